"""Printing reports: compiler-style text, JSON, SARIF 2.1.0. Pure functions of Report lists."""
from __future__ import annotations

import os
from typing import Iterable

from ..protocol import types as T
from ..protocol.catalog import RULES
from ..server.sourcemap import source_line

_COLOR = {"error": "\033[31m", "warning": "\033[33m", "information": "\033[36m", "hint": "\033[2m"}
_RESET = "\033[0m"
_BARS = " ▁▂▃▄▅▆▇█"


def _rel(path: str) -> str:
    try:
        r = os.path.relpath(path)
        return path if r.startswith("../..") else r
    except ValueError:
        return path


def text(reports: Iterable[T.Report], color: bool = False, show_hints: bool = False) -> str:
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
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _diag_lines(d: T.Diagnostic, color: bool) -> list[str]:
    loc = d.location
    where = f"{_rel(loc.path)}:{loc.line}:{loc.column}" if loc.line else _rel(loc.path or "?")
    sev = f"{_COLOR[d.severity]}{d.severity}{_RESET}" if color else d.severity
    lines = [f"{where}: {sev}[{d.code}] {d.message}"]
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


def _summary_line(r: T.Report) -> str:
    s = r.summary
    if s is None:
        return f"{_rel(r.trace.path)}: no summary"
    busy = f"GPU busy {s.gpu_busy_pct:.1f}% of the active window" if s.gpu_busy_pct is not None else "no GPU events"
    steps = ", ".join(f"{st.dur_us / 1000:.2f}" for st in s.steps[:8]) + (" …" if len(s.steps) > 8 else "")
    spark = sparkline([st.gpu_busy_us / st.dur_us if st.dur_us else 0 for st in s.steps])
    n = sum(1 for d in r.diagnostics if d.severity in ("error", "warning"))
    return (f"{_rel(r.trace.path)}: {s.verdict}: CPU total {_fmt_us(s.cpu_total_us)} vs CUDA total "
            f"{_fmt_us(s.cuda_total_us)}; {busy}; {len(s.steps)} steps (ms: {steps})"
            + (f" GPU busy/step {spark}" if spark else "") + f"; {n} warning(s)")


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
