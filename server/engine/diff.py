"""Before/after: what changed between two reports of the same program. Pure: Report x Report -> ReportDiff.

``diff_reports(old, new, min_us=50.0, min_ratio=0.10) -> ReportDiff`` is the one entry point (the CLI's
``profd-client diff`` and the daemon's ``profd/diff`` share it).

- Costs are compared per step (each report's own number of profiled steps), so a run profiled over
  more steps does not look slower.
- Lines are matched on the path as the trace names it and the line number; findings on code and
  line (trace-level findings on code and their order). A line's cost includes what it calls
  (``cpu_inclusive_us``, ``gpu_inclusive_us``: the statement, not the leaves it reaches), and a
  line is faster/slower when its CPU plus GPU time per step moved by at least ``min_ratio`` of the larger side and ``min_us``: smaller
  moves are run-to-run noise (the same tuned step varies 19-26 ms under the profiler, MANIFEST).
"""

from __future__ import annotations

from typing import Optional

from ...protocol.diff import FindingDelta, LineDelta, ReportDiff, RuleDelta, SummaryDelta
from ...protocol.types import Diagnostic, Report
from .rules.util import median, r3

_ORDER = {"gone": 0, "new": 1, "kept": 2}


def diff_reports(old: Report, new: Report, min_us: float = 50.0, min_ratio: float = 0.10) -> ReportDiff:
    """What got faster or slower per source line, and which findings appeared or went away."""
    findings = _findings(old, new)
    out = ReportDiff(
        old_path=old.trace.path,
        new_path=new.trace.path,
        summary=_summary(old, new),
        rules=_rules(old, new),
        findings=findings,
    )
    n_old, n_new = _steps(old), _steps(new)
    olds = {(h.trace_path, h.line): h for h in old.hot_lines}
    news = {(h.trace_path, h.line): h for h in new.hot_lines}
    by_line: dict[tuple, tuple[list, list]] = {}
    for f in findings:
        loc = f.location
        if loc.line is not None:
            gone, appeared = by_line.setdefault((loc.trace_path or loc.path, loc.line), ([], []))
            if f.change == "gone":
                gone.append(f.code)
            elif f.change == "new":
                appeared.append(f.code)
    lines = []
    for key in list(olds) + [k for k in news if k not in olds]:
        o, n = olds.get(key), news.get(key)
        h = n or o
        oc = _cpu(o) / n_old if o else 0.0
        og = _gpu(o) / n_old if o else 0.0
        nc = _cpu(n) / n_new if n else 0.0
        ng = _gpu(n) / n_new if n else 0.0
        delta = (nc + ng) - (oc + og)
        if o is None:
            trend = "new"
        elif n is None:
            trend = "gone"
        elif abs(delta) >= min_us and abs(delta) >= min_ratio * max(oc + og, nc + ng):
            trend = "faster" if delta < 0 else "slower"
        else:
            trend = "same"
        gone, appeared = by_line.get(key, ([], []))
        lines.append(
            LineDelta(
                path=h.path,
                line=h.line,
                function=h.function,
                trend=trend,
                old_cpu_us=r3(oc),
                new_cpu_us=r3(nc),
                old_gpu_us=r3(og),
                new_gpu_us=r3(ng),
                delta_us=r3(delta),
                codes_gone=sorted(set(gone)),
                codes_new=sorted(set(appeared)),
            )
        )
    lines.sort(key=lambda d: (d.trend == "same", -abs(d.delta_us)))
    out.lines = lines
    out.different_programs = _different_programs(old, new)
    return out


def _different_programs(old: Report, new: Report) -> str:
    """Why OLD and NEW are not two runs of one program ("" when they may be): the source files their
    lines run in (frame file names, wherever each was recorded) have less than a fifth in common."""
    import os

    def files(r: Report) -> set[str]:
        return {os.path.basename(h.trace_path or h.path) for h in r.hot_lines if (h.trace_path or h.path)}

    a, b = files(old), files(new)
    if not a or not b:
        return ""
    common = a & b
    if len(common) >= 0.2 * min(len(a), len(b)):
        return ""
    show = lambda s: ", ".join(sorted(s)[:4]) + (" …" if len(s) > 4 else "")
    return (
        f"these look like two different programs: their lines run in {show(a)} and {show(b)}"
        + (f" (only {show(common)} in common)" if common else " (no source file in common)")
        + "; a diff compares two runs of one program"
    )


def _cpu(h) -> float:
    """A line's CPU cost with what it calls (a report written before inclusive costs: its total)."""
    return max(h.cpu_total_us, h.cpu_inclusive_us)


def _gpu(h) -> float:
    """A line's GPU work with what it calls: ``loss = model(x)`` holds the model's kernels."""
    return max(h.gpu_us, h.gpu_inclusive_us)


def _steps(r: Report) -> int:
    return max(1, len(r.summary.steps)) if r.summary else 1


def _keyed(r: Report) -> dict[tuple, Diagnostic]:
    """Findings keyed by code and line (trace-level ones by code), with an ordinal for repeats."""
    out: dict[tuple, Diagnostic] = {}
    seen: dict[tuple, int] = {}
    for d in r.diagnostics:
        loc = d.location
        base = (
            (d.code, loc.trace_path or loc.path, loc.line) if loc.line is not None else (d.code, None, None)
        )
        k = seen.get(base, 0)
        seen[base] = k + 1
        out[base + (k,)] = d
    return out


def _findings(old: Report, new: Report) -> list[FindingDelta]:
    o, n = _keyed(old), _keyed(new)
    out = []
    for k, d in o.items():
        if k in n:
            out.append(FindingDelta(code=d.code, change="kept", location=n[k].location, old=d, new=n[k]))
        else:
            out.append(FindingDelta(code=d.code, change="gone", location=d.location, old=d))
    for k, d in n.items():
        if k not in o:
            out.append(FindingDelta(code=d.code, change="new", location=d.location, new=d))
    out.sort(key=lambda f: (_ORDER[f.change], f.code, f.location.path or "", f.location.line or 0))
    return out


def _rules(old: Report, new: Report) -> list[RuleDelta]:
    oc: dict[str, int] = {}
    nc: dict[str, int] = {}
    for d in old.diagnostics:
        oc[d.code] = oc.get(d.code, 0) + 1
    for d in new.diagnostics:
        nc[d.code] = nc.get(d.code, 0) + 1
    out = []
    for code in sorted(set(oc) | set(nc)):
        change = "kept" if code in oc and code in nc else ("gone" if code in oc else "new")
        out.append(RuleDelta(code=code, change=change, old_count=oc.get(code, 0), new_count=nc.get(code, 0)))
    out.sort(key=lambda r: (_ORDER[r.change], r.code))
    return out


def _summary(old: Report, new: Report) -> SummaryDelta:
    s = SummaryDelta()
    for side, r in (("old", old), ("new", new)):
        sm = r.summary
        if sm is None:
            continue
        n = _steps(r)
        setattr(s, f"{side}_verdict", sm.verdict)
        setattr(s, f"{side}_step_us", _med([st.dur_us for st in sm.steps]))
        setattr(s, f"{side}_gpu_busy_pct", sm.gpu_busy_pct)
        setattr(s, f"{side}_cpu_per_step_us", r3(sm.cpu_total_us / n))
        setattr(s, f"{side}_cuda_per_step_us", r3(sm.cuda_total_us / n))
    return s


def _med(xs) -> Optional[float]:
    return r3(median(xs)) if xs else None
