"""Printing reports: compiler-style text, JSON, SARIF 2.1.0. Pure functions of Report lists."""
from __future__ import annotations

import os
from typing import Iterable

from ..protocol import types as T
from ..protocol.catalog import RULES
from ..server.engine.modules import render as render_modules
from ..server.engine.sourcemap import source_line

_COLOR = {"error": "\033[31m", "warning": "\033[33m", "information": "\033[36m", "hint": "\033[2m"}
_RESET = "\033[0m"
_BARS = " ▁▂▃▄▅▆▇█"


def _rel(path: str) -> str:
    try:
        r = os.path.relpath(path)
        return path if r.startswith("../..") else r
    except ValueError:
        return path


def text(reports: Iterable[T.Report], color: bool = False, show_hints: bool = False,
         modules: bool = False) -> str:
    out: list[str] = []
    for r in reports:
        if r.error:
            out.append(r.error)
            continue
        for d in r.diagnostics:
            if d.severity == "hint" and not show_hints:
                continue
            out.extend(_diag_lines(d, color))
        out.append(_summary_line(r))
        if modules:
            out.extend(render_modules(r.modules))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _diag_lines(d: T.Diagnostic, color: bool) -> list[str]:
    loc = d.location
    where = f"{_rel(loc.path)}:{loc.line}:{loc.column}" if loc.line else _rel(loc.path or "?")
    sev = f"{_COLOR[d.severity]}{d.severity}{_RESET}" if color else d.severity
    lines = [f"{where}: {sev}[{d.code}] {d.message}"]
    if loc.module:
        lines.append(f"       = module: {loc.module}")
    if loc.line and loc.path and os.path.isfile(loc.path):
        src = source_line(loc.path, loc.line)
        if src is not None:
            lines.append(f"  {loc.line:>4} | {src.rstrip()}")
    if d.fix:
        lines.append(f"       = help: {d.fix}")
    if loc.precision == "function" and loc.line:
        lines.append(f"       = note: line of the enclosing function ({loc.function}); "
                     "the statement was not recoverable")
    return lines


def modules_text(reports: Iterable[T.Report], depth: int = 4) -> str:
    """``profd-client modules``: each trace's module tree, hottest first."""
    out: list[str] = []
    for r in reports:
        if r.error:
            out.append(r.error)
            continue
        out.append(f"{_rel(r.trace.path)}:")
        out.extend(render_modules(r.modules, depth=depth))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _summary_line(r: T.Report) -> str:
    s = r.summary
    if s is None:
        return f"{_rel(r.trace.path)}: no summary"
    busy = f"GPU busy {s.gpu_busy_pct:.1f}% of the active window" if s.gpu_busy_pct is not None else "no GPU events"
    steps = ", ".join(f"{(st.step_us or st.dur_us) / 1000:.2f}" for st in s.steps[:8]) + (" …" if len(s.steps) > 8 else "")
    spark = sparkline([st.gpu_busy_us / st.dur_us if st.dur_us else 0 for st in s.steps])
    n = sum(1 for d in r.diagnostics if d.severity in ("error", "warning"))
    return (f"{_rel(r.trace.path)}: {s.verdict}: CPU total {_fmt_us(s.cpu_total_us)} vs CUDA total "
            f"{_fmt_us(s.cuda_total_us)}; {busy}; {len(s.steps)} steps (ms: {steps}{_bound(s.steps)})"
            + (f" GPU busy/step {spark}" if spark else "") + f"; {n} warning(s)")


def _bound(steps: list[T.Step]) -> str:
    """Which side bounds the steps, and the CPU's ranges when the GPU's work outlasts them."""
    if not steps:
        return ""
    gpu = [st for st in steps if st.bound == "gpu"]
    if len(gpu) * 2 <= len(steps):
        return "; CPU-bound"
    cpu = sum(st.dur_us for st in gpu) / len(gpu)
    work = sum(st.gpu_work_us for st in gpu) / len(gpu)
    ahead = f", while the CPU queues it in {cpu / 1000:.2f} ms" if cpu < work else ""
    return f"; GPU-bound: its work takes {work / 1000:.2f} ms/step{ahead}"


def sparkline(fractions: list[float]) -> str:
    return "".join(_BARS[min(8, max(1 if f > 0 else 0, round(f * 8)))] for f in fractions)


def _fmt_us(us: float) -> str:
    if us >= 1000:
        return f"{us / 1000:.3f} ms"
    return f"{us:.3f} µs"


def json_doc(reports: Iterable[T.Report]) -> bytes:
    return T.encode(T.ReportList(reports=list(reports)))


_SARIF_LEVEL = {"error": "error", "warning": "warning", "information": "note", "hint": "note"}


def sarif(reports: Iterable[T.Report]) -> dict:
    reports = list(reports)
    used = sorted({d.code for r in reports for d in r.diagnostics})
    rules = [{
        "id": c, "name": c, "shortDescription": {"text": RULES[c].title},
        "helpUri": RULES[c].doc_url,
        "defaultConfiguration": {"level": _SARIF_LEVEL[RULES[c].severity]},
    } for c in used if c in RULES]
    index = {r["id"]: k for k, r in enumerate(rules)}
    results = []
    notifications = []
    for r in reports:
        if r.error:
            notifications.append({"level": "error", "message": {"text": r.error}})
            continue
        for d in r.diagnostics:
            loc = d.location
            phys: dict = {"artifactLocation": {"uri": _uri(loc.path or r.trace.path)}}
            if loc.line:
                phys["region"] = {"startLine": loc.line, "startColumn": loc.column}
            results.append({
                "ruleId": d.code, "ruleIndex": index.get(d.code, -1), "level": _SARIF_LEVEL[d.severity],
                "message": {"text": d.message + (f" Fix: {d.fix}" if d.fix else "")},
                "locations": [{"physicalLocation": phys}],
                "properties": {"evidence": d.evidence, "precision": loc.precision,
                               "trace": r.trace.path},
            })
    run = {"tool": {"driver": {"name": "profd", "informationUri": "https://github.com/profd/profd",
                               "rules": rules}},
           "results": results}
    if notifications:
        run["invocations"] = [{"executionSuccessful": False, "toolExecutionNotifications": notifications}]
    return {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0", "runs": [run]}


def _uri(path: str) -> str:
    if os.path.isabs(path):
        return "file://" + path
    return path.replace(os.sep, "/")


# ---- multi-rank jobs and before/after diffs -------------------------------------------------------

def job_text(jobs, color: bool = False) -> str:
    """The job reports: one row per rank (per-step means), then the job findings."""
    from ..server.engine.job import comm_findings

    out: list[str] = []
    for j in jobs:
        out.append(f"job: {len(j.ranks)} of {j.world_size} ranks ({j.backend}); "
                   f"{j.collectives_matched} collectives matched across ranks")
        out.append(f"  {'rank':>4} {'step':>9} {'cpu own':>9} {'compute':>9} {'comm':>9} {'exposed':>9} "
                   f"{'overlap':>7} {'wait':>9} {'last':>5}  (ms per step)")
        for r in j.ranks:
            ov = f"{r.overlap_pct:.0f}%" if r.overlap_pct is not None else "-"
            wait = f"{r.wait_us / 1000:9.2f}" if r.wait_us is not None else f"{'-':>9}"
            out.append(f"  {r.rank if r.rank is not None else '?':>4} {r.step_us / 1000:9.2f} "
                       f"{r.cpu_own_us / 1000:9.2f} {r.compute_us / 1000:9.2f} {r.comm_us / 1000:9.2f} "
                       f"{r.exposed_comm_us / 1000:9.2f} {ov:>7} {wait} {r.last_arrivals:5d}")
        if j.missing_ranks:
            out.append(f"  missing ranks: {', '.join(map(str, j.missing_ranks))}")
        for line in comm_findings(j):
            out.append(f"  = note: {line}")
        for d in j.diagnostics:
            out.extend(_diag_lines(d, color))
        if not j.diagnostics:
            out.append("  no straggler: no rank is consistently the last to arrive with more work")
        for n in j.notes:
            out.append(f"  = note: {n}")
        out.append("")
    return "\n".join(out).rstrip() + "\n" if out else ""


def json_jobs_doc(reports, jobs) -> bytes:
    """``{"reports": [...], "jobs": [...]}``: the ReportList document with the job reports beside."""
    import msgspec

    return msgspec.json.encode({"reports": list(reports), "jobs": list(jobs)})


def sarif_jobs(doc: dict, jobs) -> dict:
    """Adds the job findings (on the straggler's trace) to a SARIF document from ``sarif``."""
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    for j in jobs:
        for d in j.diagnostics:
            if d.code not in {r["id"] for r in rules}:
                rules.append({"id": d.code, "name": d.code, "shortDescription": {"text": RULES[d.code].title},
                              "helpUri": RULES[d.code].doc_url,
                              "defaultConfiguration": {"level": _SARIF_LEVEL[RULES[d.code].severity]}})
            index = next(k for k, r in enumerate(rules) if r["id"] == d.code)
            run["results"].append({
                "ruleId": d.code, "ruleIndex": index, "level": _SARIF_LEVEL[d.severity],
                "message": {"text": d.message + (f" Fix: {d.fix}" if d.fix else "")},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(d.location.path or "")}}}],
                "properties": {"evidence": d.evidence, "precision": "trace", "job": j.group}})
    return doc


_TREND = {"faster": "-", "slower": "+", "new": "+", "gone": "-", "same": " "}


def diff_text(d, max_lines: int = 20) -> str:
    """A before/after diff: summary, rules gone/new, findings gone/new with their lines, line costs."""
    s = d.summary
    out = [f"diff {_rel(d.old_path)} -> {_rel(d.new_path)}"]
    if s.old_step_us is not None and s.new_step_us is not None:
        out.append(f"  step (median): {s.old_step_us / 1000:.2f} ms -> {s.new_step_us / 1000:.2f} ms "
                   f"({_pct_change(s.old_step_us, s.new_step_us)}); verdict {s.old_verdict} -> {s.new_verdict}")
    if s.old_cuda_per_step_us is not None and s.new_cuda_per_step_us is not None:
        out.append(f"  per step: CPU total {_fmt_us(s.old_cpu_per_step_us)} -> {_fmt_us(s.new_cpu_per_step_us)}, "
                   f"CUDA total {_fmt_us(s.old_cuda_per_step_us)} -> {_fmt_us(s.new_cuda_per_step_us)}")
    for r in d.rules:
        if r.change != "kept":
            out.append(f"  {'-' if r.change == 'gone' else '+'} [{r.code}] {r.change} "
                       f"({r.old_count} -> {r.new_count})")
    out.append("")
    for f in d.findings:
        if f.change == "kept":
            continue
        diag = f.old if f.change == "gone" else f.new
        loc = f.location
        where = f"{_rel(loc.path)}:{loc.line}" if loc.line else _rel(loc.path or "?")
        out.append(f"{where}: {f.change}[{f.code}] {diag.message}")
        if loc.line and loc.path and os.path.isfile(loc.path):
            src = source_line(loc.path, loc.line)
            if src is not None:
                out.append(f"  {loc.line:>4} | {src.rstrip()}")
    moved = [ln for ln in d.lines if ln.trend != "same"][:max_lines]
    if moved:
        out.append("")
        out.append("lines (CPU total + GPU per step):")
        for ln in moved:
            old, new = ln.old_cpu_us + ln.old_gpu_us, ln.new_cpu_us + ln.new_gpu_us
            out.append(f"  {_TREND[ln.trend]} {_rel(ln.path)}:{ln.line} ({ln.function}) {ln.trend}: "
                       f"{_fmt_us(old)} -> {_fmt_us(new)}"
                       + (f"; gone: {', '.join(ln.codes_gone)}" if ln.codes_gone else "")
                       + (f"; new: {', '.join(ln.codes_new)}" if ln.codes_new else ""))
    return "\n".join(out).rstrip() + "\n"


def _pct_change(old: float, new: float) -> str:
    if not old:
        return "n/a"
    return f"{100.0 * (new - old) / old:+.0f}%"
