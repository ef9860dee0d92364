"""Printing reports: compiler-style text, JSON, SARIF 2.1.0, rule statistics. Pure functions of
Report lists. Numbers in text are per profiled step unless labelled otherwise ("total")."""

from __future__ import annotations

import os
from typing import Iterable

import msgspec

from ..protocol import types as T
from ..protocol.catalog import RULES, docs_url
from ..server.engine import impact_text, plural, render_modules, source_line, top_findings, us

_COLOR = {"error": "\033[31m", "warning": "\033[33m", "information": "\033[36m", "hint": "\033[2m"}
_BOLD, _RESET = "\033[1m", "\033[0m"
_BARS = " ▁▂▃▄▅▆▇█"

# What each profiler flag brings, for the advice on a trace recorded without it.
_FLAGS = (
    ("with_stack", "findings on your source lines"),
    ("record_shapes", "GEMM shapes: small-problem, misaligned-dims, conv-bias-before-bn"),
    ("profile_memory", "memory-peak and memory-child-pressure"),
)


def _rel(path: str) -> str:
    try:
        r = os.path.relpath(path)
        return path if r.startswith("../..") else r
    except ValueError:
        return path


def text(
    reports: Iterable[T.Report],
    color: bool = False,
    show_hints: bool = False,
    quiet: bool = False,
    modules: bool = False,
) -> str:
    out: list[str] = []
    for r in reports:
        if r.error:
            out.append(r.error)
            continue
        for d in r.diagnostics:
            if d.severity == "hint" and not show_hints:
                continue
            out.extend(_diag_lines(d, color))
        if not quiet:
            out.append(_summary_line(r, show_hints))
            out.extend(f"  = note: {n}" for n in trace_notes(r))
        if modules:
            out.extend(render_modules(r.modules))
        if not quiet or modules:
            out.append("")
    return "\n".join(out).rstrip() + "\n" if out else ""


def _diag_lines(d: T.Diagnostic, color: bool) -> list[str]:
    loc = d.location
    where = f"{_rel(loc.path)}:{loc.line}:{loc.column}" if loc.line else _rel(loc.path or "?")
    sev = f"{_COLOR[d.severity]}{d.severity}{_RESET}" if color else d.severity
    code = f"{_BOLD}{d.code}{_RESET}" if color else d.code
    lines = [f"{where}: {sev}[{code}] {d.message}"]
    if loc.module:
        lines.append(f"       = module: {loc.module}")
    if loc.line and loc.path and os.path.isfile(loc.path):
        src = source_line(loc.path, loc.line)
        if src is not None:
            lines.append(f"  {loc.line:>4} | {src.rstrip()}")
            end = loc.end_column if loc.end_line in (None, loc.line) else len(src.rstrip()) + 1
            if loc.column > 1 or end:
                width = max(1, (end or len(src.rstrip()) + 1) - loc.column)
                lines.append(f"       | {' ' * (loc.column - 1)}{'^' * width}")
    if d.impact_us_per_step is not None:
        lines.append(f"       = impact: {impact_text(d)}")
    if d.fix:
        lines.append(f"       = help: {d.fix}")
    for rel in d.related:
        if rel.library and rel.path:
            lines.append(f"       = library: {_rel(rel.path)}:{rel.line} ({rel.module}.{rel.function})")
    if loc.precision == "function" and loc.line:
        lines.append(
            f"       = note: line of the enclosing function ({loc.function}); "
            "the statement was not recoverable"
        )
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


def trace_notes(r: T.Report) -> list[str]:
    """What the reader should know about the trace itself: what profd read but could not use (the
    summary's notes), and the flags it was recorded without that some findings need (with what
    each would bring)."""
    t = r.trace
    if r.error:
        return []
    if not t.events:
        return []
    notes = list(r.summary.notes) if r.summary else []
    missing = [f"{flag}=True ({why})" for flag, why in _FLAGS if not getattr(t, flag)]
    if missing:
        notes.append("re-profile with " + ", ".join(missing))
    return notes


def _summary_line(r: T.Report, show_hints: bool = False) -> str:
    s = r.summary
    path = _rel(r.trace.path)
    if not r.trace.events:
        return (
            f"{path}: empty trace: the profiler recorded no events (was export_chrome_trace called "
            "before the schedule's active steps ran, or outside `with profile(...)`?)"
        )
    if s is None:
        return f"{path}: no summary"
    n = len(s.steps)
    per = max(1, n)
    busy = (
        f"GPU busy {s.gpu_busy_pct:.1f}% of the active window"
        if s.gpu_busy_pct is not None
        else "no GPU events"
    )
    if s.copy_busy_pct:  # the copy engines' work, which the kernels' busy share leaves out
        busy += f" (copy engines {s.copy_busy_pct:.1f}%)" if s.copy_busy_pct >= 0.1 else ""
    steps = ", ".join(f"{(st.step_us or st.dur_us) / 1000:.2f}" for st in s.steps[:8]) + (
        " …" if n > 8 else ""
    )
    spark = sparkline([st.gpu_busy_us / st.dur_us if st.dur_us else 0 for st in s.steps])
    found = severity_counts(d.severity for d in r.diagnostics if d.severity != "hint" or show_hints)
    sup = sum((r.suppressed or {}).values())
    found += f" ({sup} suppressed inline)" if sup else ""
    # one word, one meaning: "per step" unless "total" is said; the verdict's word, never a second
    # "-bound" beside it (which side ends each step is said as "paced by")
    timing = (
        f"per step CPU ops {us(s.cpu_total_us / per)} vs GPU {us(s.cuda_total_us / per)}"
        f" over {plural(n, 'step')}" + (f" (ms: {steps}{_bound(s.steps)})" if n else "")
        if n
        else f"no ProfilerStep# steps: CPU ops total {us(s.cpu_total_us)} vs GPU total {us(s.cuda_total_us)} "
        "for the whole trace"
    )
    best = top_findings(r.diagnostics)
    most = (
        "; fixes that give back most: " + ", ".join(f"{d.code} ~{us(d.impact_us_per_step)}" for d in best)
        if best
        else ""
    )
    return (
        f"{path}: {s.verdict}: {timing}; {busy}"
        + (f"; GPU busy/step {spark}" if spark else "")
        + f"; {found}{most}"
    )


def _bound(steps: list[T.Step]) -> str:
    """Which side bounds the steps, and the CPU's ranges when the GPU's work outlasts them."""
    if not steps:
        return ""
    gpu = [st for st in steps if st.bound == "gpu"]
    if len(gpu) * 2 <= len(steps):
        return "; paced by the CPU"
    cpu = sum(st.dur_us for st in gpu) / len(gpu)
    work = sum(max(st.gpu_work_us, st.copy_us) for st in gpu) / len(gpu)
    ahead = f", while the CPU queues it in {cpu / 1000:.2f} ms" if cpu < work else ""
    return f"; paced by the GPU: its work takes {work / 1000:.2f} ms/step{ahead}"


def severity_counts(severities: Iterable[str]) -> str:
    """``11 warnings, 6 information, 1 hint`` (most severe first), or ``no findings``."""
    counts: dict[str, int] = {}
    for s in severities:
        counts[s] = counts.get(s, 0) + 1
    return (
        ", ".join(
            plural(counts[k], k, "information" if k == "information" else None)
            for k in ("error", "warning", "information", "hint")
            if k in counts
        )
        or "no findings"
    )


def closing_line(reports: Iterable[T.Report], jobs=(), show_hints: bool = False) -> str:
    """The last line of the text output, as ruff's: ``Found 17 findings (11 warnings, 6 information)
    in 6 traces``; hints not shown are counted, so that a hint-only run does not read as clean."""
    reports = list(reports)
    sevs = [d.severity for r in reports for d in r.diagnostics] + [
        d.severity for j in jobs for d in j.diagnostics
    ]
    shown = [s for s in sevs if s != "hint" or show_hints]
    hidden = len(sevs) - len(shown)
    sup = sum(sum((r.suppressed or {}).values()) for r in reports)
    line = f"Found {plural(len(shown), 'finding')}" + (f" ({severity_counts(shown)})" if shown else "")
    line += f" in {plural(len(reports), 'trace')}" if reports else ""
    extra = [f"{plural(hidden, 'hint')} not shown (--hints shows them)"] if hidden else []
    extra += [f"{sup} suppressed inline"] if sup else []
    return line + ("; " + ", ".join(extra) if extra else "")


def sparkline(fractions: list[float]) -> str:
    return "".join(_BARS[min(8, max(1 if f > 0 else 0, round(f * 8)))] for f in fractions)


# ---- statistics -----------------------------------------------------------------------------------


def statistics(reports: Iterable[T.Report], jobs=(), show_hints: bool = False) -> list[dict]:
    """Per rule: findings shown and findings suppressed inline, most first."""
    rows: dict[str, dict] = {}

    def row(code):
        info = RULES.get(code)
        return rows.setdefault(
            code,
            {
                "code": code,
                "count": 0,
                "suppressed": 0,
                "severity": info.severity if info else "warning",
                "severities": {},
                "title": info.title if info else "",
            },
        )

    def count(d):
        x = row(d.code)
        x["count"] += 1
        x["severities"][d.severity] = x["severities"].get(d.severity, 0) + 1

    for r in reports:
        for d in r.diagnostics:
            if d.severity != "hint" or show_hints:
                count(d)
        for code, k in (r.suppressed or {}).items():
            row(code)["suppressed"] += k
    for j in jobs:
        for d in j.diagnostics:
            count(d)
    for x in rows.values():  # the severity the findings were reported at (the most severe), not the default
        if x["severities"]:
            x["severity"] = max(x["severities"], key=lambda s: T.SEVERITY_RANK[s])
    return sorted(rows.values(), key=lambda x: (-x["count"], -x["suppressed"], x["code"]))


def statistics_text(rows: list[dict]) -> str:
    if not rows:
        return "no findings\n"
    w = max(len(x["code"]) for x in rows)

    def sev(x):  # as reported: "warning" or, mixed, "1 warning, 2 information"
        s = x.get("severities") or {}
        return x["severity"] if len(s) <= 1 else severity_counts(k for k, n in s.items() for _ in range(n))

    sw = max(11, *(len(sev(x)) for x in rows))
    out = [
        f"{x['count']:5d}  {x['code']:<{w}}  {sev(x):<{sw}}  {x['title']}"
        + (f"  ({x['suppressed']} suppressed inline)" if x["suppressed"] else "")
        for x in rows
    ]
    return "\n".join(out) + "\n"


# ---- JSON --------------------------------------------------------------------------------------------


def _camel(k: str) -> str:
    head, *rest = k.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def camel_evidence(ev: dict) -> dict:
    """Evidence keys in the documents' camelCase. Keys of lists of records are field names too;
    a dict value is data keyed by names from the trace (kernel classes, ops) and is left as is."""

    def rec(v):
        if isinstance(v, list):
            return [{_camel(k): x for k, x in e.items()} if isinstance(e, dict) else e for e in v]
        return v

    return {_camel(k): rec(v) for k, v in ev.items()}


def camel_json(obj) -> bytes:
    """A wire type as JSON with every ``evidence`` (of findings, of job reports) in camelCase."""

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "evidence" and isinstance(v, dict):
                    x[k] = camel_evidence(v)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    doc = msgspec.to_builtins(obj)
    walk(doc)
    return msgspec.json.encode(doc)


def json_doc(reports: Iterable[T.Report], jobs=()) -> bytes:
    """``{"reports": [Report...], "jobs": [JobReport...]}`` (schema: docs/schema.json)."""
    from ..protocol.schema import AnalyzeOutput

    return camel_json(AnalyzeOutput(reports=list(reports), jobs=list(jobs)))


# ---- SARIF ---------------------------------------------------------------------------------------

_SARIF_LEVEL = {"error": "error", "warning": "warning", "information": "note", "hint": "note"}
SRCROOT = "SRCROOT"


def _sarif_rule(code: str) -> dict:
    from ..server.engine import rule_doc

    info = RULES[code]
    doc = rule_doc(code)
    return {
        "id": code,
        "name": code,
        "shortDescription": {"text": info.title},
        "fullDescription": {"text": doc.what},
        "help": {"text": doc.text(), "markdown": doc.markdown()},
        "helpUri": info.doc_url,
        "defaultConfiguration": {"level": _SARIF_LEVEL[info.severity]},
        "properties": {"family": info.family},
    }


def _artifact(path: str, root: str) -> dict:
    ap = os.path.abspath(path)
    if ap == root or ap.startswith(root + os.sep):
        return {"uri": os.path.relpath(ap, root).replace(os.sep, "/"), "uriBaseId": SRCROOT}
    return {"uri": _uri(ap)}


def _fingerprint(d: T.Diagnostic, root: str, seen: dict) -> str:
    """Stable across runs and line moves: the rule, the file relative to the root, the function,
    the source text of the line (not its number), and which of the same rule's findings there it is."""
    loc = d.location
    src = source_line(loc.path, loc.line) if loc.line and loc.path and os.path.isfile(loc.path) else None
    rel = os.path.relpath(os.path.abspath(loc.path), root) if loc.path else ""
    key = "\0".join(
        [d.code, rel, loc.function or "", (src or "").strip(), "" if src else str(loc.line or "")]
    )
    n = seen[key] = seen.get(key, 0) + 1
    import hashlib  # here: only the CI formats fingerprint, and its import costs a small trace's analyze 4%

    return hashlib.sha256(f"{key}\0{n}".encode()).hexdigest()[:32]


def sarif(reports: Iterable[T.Report], jobs=()) -> dict:
    reports = list(reports)
    root = os.path.abspath(os.getcwd())
    codes = {d.code for r in reports for d in r.diagnostics} | {d.code for j in jobs for d in j.diagnostics}
    rules = [_sarif_rule(c) for c in sorted(codes) if c in RULES]
    index = {r["id"]: k for k, r in enumerate(rules)}
    results = []
    notifications = []
    seen: dict = {}

    def result(d: T.Diagnostic, trace: str, props: dict) -> dict:
        loc = d.location
        phys: dict = {"artifactLocation": _artifact(loc.path or trace, root)}
        if loc.line:
            region = {"startLine": loc.line, "startColumn": loc.column}
            if loc.end_line:
                region["endLine"] = loc.end_line
            if loc.end_column:
                region["endColumn"] = loc.end_column
            phys["region"] = region
        return {
            "ruleId": d.code,
            "ruleIndex": index.get(d.code, -1),
            "level": _SARIF_LEVEL[d.severity],
            "message": {"text": d.message + (f" Fix: {d.fix}" if d.fix else "")},
            "locations": [{"physicalLocation": phys}],
            "partialFingerprints": {"profdFinding/v1": _fingerprint(d, root, seen)},
            "properties": {
                "evidence": camel_evidence(d.evidence),
                "precision": loc.precision,
                **(
                    {"impactUsPerStep": d.impact_us_per_step, "impactPct": d.impact_pct}
                    if d.impact_us_per_step is not None
                    else {}
                ),
                **({"impactNote": d.impact_note} if d.impact_note else {}),
                **(
                    {"impactHiddenBy": d.impact_hidden_by, "impactThenUsPerStep": d.impact_then_us_per_step}
                    if d.impact_hidden_by
                    else {}
                ),
                **props,
            },
        }

    for r in reports:
        if r.error:
            notifications.append(
                {
                    "level": "error",
                    "message": {"text": r.error},
                    "locations": [{"physicalLocation": {"artifactLocation": _artifact(r.trace.path, root)}}],
                }
            )
            continue
        for d in r.diagnostics:
            results.append(result(d, r.trace.path, {"trace": r.trace.path}))
    for j in jobs:
        for d in j.diagnostics:
            results.append(result(d, d.location.path or "", {"job": j.group}))
    from .. import __version__

    run = {
        "tool": {
            "driver": {
                "name": "profd",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": docs_url(),
                "rules": rules,
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": _uri(root) + "/"}},
        "results": results,
    }
    run["invocations"] = [
        {
            "executionSuccessful": not notifications,
            **({"toolExecutionNotifications": notifications} if notifications else {}),
        }
    ]
    return {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0", "runs": [run]}


def _uri(path: str) -> str:
    if os.path.isabs(path):
        from urllib.parse import quote

        return "file://" + quote(path)
    return path.replace(os.sep, "/")


# ---- multi-rank jobs and before/after diffs -------------------------------------------------------


def job_text(jobs, color: bool = False) -> str:
    """The job reports: one row per rank (per-step means), then the job findings."""
    from ..server.engine import comm_findings

    out: list[str] = []
    for j in jobs:
        out.append(
            f"job: {len(j.ranks)} of {j.world_size} ranks ({j.backend}); "
            f"{j.collectives_matched} collectives matched across ranks"
        )
        out.append(
            "  traces: "
            + ", ".join(f"rank {r.rank if r.rank is not None else '?'} {_rel(r.path)}" for r in j.ranks)
        )
        out.append(
            f"  {'rank':>4} {'step':>9} {'cpu own':>9} {'compute':>9} {'comm':>9} {'exposed':>9} "
            f"{'overlap':>7} {'wait':>9} {'last':>5}  (ms per step)"
        )
        for r in j.ranks:
            ov = f"{r.overlap_pct:.0f}%" if r.overlap_pct is not None else "-"
            wait = f"{r.wait_us / 1000:9.2f}" if r.wait_us is not None else f"{'-':>9}"
            out.append(
                f"  {r.rank if r.rank is not None else '?':>4} {r.step_us / 1000:9.2f} "
                f"{r.cpu_own_us / 1000:9.2f} {r.compute_us / 1000:9.2f} {r.comm_us / 1000:9.2f} "
                f"{r.exposed_comm_us / 1000:9.2f} {ov:>7} {wait} {r.last_arrivals:5d}"
            )
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


_TREND = {"faster": "-", "slower": "+", "new": "+", "gone": "-", "same": " "}


def diff_text(d, max_lines: int = 20) -> str:
    """A before/after diff: summary, rules gone/new, findings gone/new with their lines, line costs."""
    s = d.summary
    out = [f"diff {_rel(d.old_path)} -> {_rel(d.new_path)}"]
    if d.different_programs:
        out.append(f"  = warning: {d.different_programs}")
    if s.old_step_us is not None and s.new_step_us is not None:
        out.append(
            f"  step (median): {s.old_step_us / 1000:.2f} ms -> {s.new_step_us / 1000:.2f} ms "
            f"({_pct_change(s.old_step_us, s.new_step_us)}); verdict {s.old_verdict} -> {s.new_verdict}"
        )
    if s.old_cuda_per_step_us is not None and s.new_cuda_per_step_us is not None:
        out.append(
            f"  per step: CPU ops {us(s.old_cpu_per_step_us)} -> {us(s.new_cpu_per_step_us)}, "
            f"GPU {us(s.old_cuda_per_step_us)} -> {us(s.new_cuda_per_step_us)}"
        )
    for r in d.rules:
        if r.change != "kept":
            out.append(
                f"  {'-' if r.change == 'gone' else '+'} [{r.code}] {r.change} "
                f"({r.old_count} -> {r.new_count})"
            )
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
        out.append("lines (CPU + GPU per step, with what each line calls):")
        for ln in moved:
            old, new = ln.old_cpu_us + ln.old_gpu_us, ln.new_cpu_us + ln.new_gpu_us
            out.append(
                f"  {_TREND[ln.trend]} {_rel(ln.path)}:{ln.line} ({ln.function}) {ln.trend}: "
                f"{us(old)} -> {us(new)}"
                + (f"; gone: {', '.join(ln.codes_gone)}" if ln.codes_gone else "")
                + (f"; new: {', '.join(ln.codes_new)}" if ln.codes_new else "")
            )
    return "\n".join(out).rstrip() + "\n"


def _pct_change(old: float, new: float) -> str:
    if not old:
        return "n/a"
    return f"{100.0 * (new - old) / old:+.0f}%"


# ---- the daemon's answers --------------------------------------------------------------------------


def status_text(st: dict, doc: dict) -> str:
    watch = f"watching {st['watch']}" if st.get("watch") else "watching no folder (analyses on request)"
    ws = ", ".join(st.get("workspace") or []) or "none"
    # an analysis whose file changed while it was read is not a report: said apart (older daemons
    # do not send the count)
    discarded = f" ({st['discarded']} of a file that changed as it was read)" if st.get("discarded") else ""
    return (
        f"profd {st['version']} pid {st['pid']} on {doc['host']}:{doc['port']}: {watch}; workspace {ws}; "
        f"{plural(st['reports'], 'report')}, {st['queued']} queued, {st['running']} running, "
        f"{plural(st['analyses'], 'analysis', 'analyses')}{discarded}, {plural(st['sessions'], 'session')}, "
        f"up {st['uptimeS']:.0f} s\n"
    )


def reports_text(rows: list[dict]) -> str:
    """One line per report the daemon holds: newest mark, key, trace, verdict, findings by severity."""
    if not rows:
        return "no reports\n"
    out = []
    for r in rows:
        mark = "*" if r.get("newest") else " "
        rep = r.get("report")
        if r.get("error") or rep is None:
            what = r.get("error") or "not loaded"
        else:
            verdict = (rep.get("summary") or {}).get("verdict", "no summary")
            found = severity_counts(d["severity"] for d in rep.get("diagnostics", []))
            what = f"{verdict}; {found}; {plural(len(r.get('sources', [])), 'source file')}"
        out.append(f"{mark} {r['key'][:12]}  {_rel(r['path'])}  {what}")
    return "\n".join(out) + "\n"
