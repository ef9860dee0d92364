"""An annotated copy of a trace: the findings as instant events where their evidence first occurs,
and a "profd" track with one slice per ProfilerStep carrying its verdict and GPU busy.

The output is Chrome trace JSON as Perfetto's JSON importer and chrome://tracing read it: the
original events untouched, plus
- ``{"ph": "i", "s": "t", ...}`` instants (ts in µs, the trace's own clock) on the thread of the
  first CPU event of the finding's line (its first occurrence); findings without a line go on the
  profd track at the step they concern (or the start of the active window);
- a process of its own (an unused integer pid, ``process_name`` "profd", sorted first) with a
  ``steps`` thread of ``X`` slices (one per step) and a ``findings`` thread.
Written event by event from the file's own bytes, so the copy never needs a second whole-document buffer.
"""

from __future__ import annotations

import gzip
import itertools
from typing import IO, Iterable, Iterator, Optional, Union

import msgspec

from ...protocol.types import Diagnostic, Report
from . import kernels, loader
from .analyses import COMPUTE_BUSY_PCT, OVERHEAD_BUSY_PCT, Analysis
from .model import TraceModel

STEPS_TID = 1
FINDINGS_TID = 2
CAT = "profd"


def step_verdict(busy_pct: float) -> str:
    """The per-step verdict with the whole-trace thresholds (analyses.verdict)."""
    if busy_pct < OVERHEAD_BUSY_PCT:
        return "overhead-bound"
    if busy_pct >= COMPUTE_BUSY_PCT:
        return "compute-bound"
    return "balanced"


def annotate_file(path: str, out_path: str, options=None) -> Report:
    """Analyse ``path`` and write the annotated copy to ``out_path`` (gzip when it ends in .gz).

    The file is decoded once, for the model (the pipeline after the load is ``analyze``'s); the
    copy is the file's own bytes event by event, each event's span found by msgspec's ``Raw``
    (no objects built for it), with profd's events appended."""
    from .analyze import analyze_document  # analyze imports the rules; this module stays light

    data = loader.read_bytes(path)
    doc = loader.decode(path, data)
    pid = _free_pid(doc.traceEvents)  # before the pipeline lets go of the events
    done = analyze_document(path, doc, loader.sha256_of(data), len(data), options)
    extra = list(markers(done.model, done.analysis, done.report.diagnostics, done.context, pid))
    opener = gzip.open if out_path.endswith(".gz") else open
    with opener(out_path, "wb") as f:
        write_trace(f, data, extra)
    return done.report


def markers(m: TraceModel, a: Analysis, diagnostics: Iterable[Diagnostic], ctx, pid: int) -> Iterator[dict]:
    """The events profd adds, on process ``pid`` (one no event of the trace uses): metadata, the
    steps track, and one instant per finding."""
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "profd"}}
    yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}}
    yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": STEPS_TID, "args": {"name": "steps"}}
    yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": FINDINGS_TID, "args": {"name": "findings"}}
    for k, s in enumerate(m.steps):
        busy = a.step_busy[k] if k < len(a.step_busy) else 0.0
        pct = 100.0 * busy / s.dur if s.dur > 0 else 0.0
        v = step_verdict(pct)
        yield {
            "ph": "X",
            "cat": CAT,
            "name": f"{s.name}: {v}, GPU busy {pct:.0f}%",
            "pid": pid,
            "tid": STEPS_TID,
            "ts": s.ts,
            "dur": s.dur,
            "args": {
                "verdict": v,
                "gpu_busy_us": round(busy, 3),
                "gpu_busy_pct": round(pct, 1),
                "step_us": round(s.dur, 3),
            },
        }
    on_line = _events_by_line(m, ctx, diagnostics)
    lo = a.window[0]
    for d in diagnostics:
        loc = d.location
        evs = on_line.get((loc.trace_path, loc.line), []) if loc.line is not None else []
        where = _evidence_at(m, d, evs) if evs else None
        if where is None:
            where = {"pid": pid, "tid": FINDINGS_TID, "ts": _trace_level_ts(m, d, lo)}
        args = {
            "code": d.code,
            "severity": d.severity,
            "message": d.message,
            "location": f"{loc.path}:{loc.line}" if loc.line else (loc.path or ""),
            "evidence": d.evidence,
        }
        if d.fix:
            args["fix"] = d.fix
        yield {"ph": "i", "s": "t", "cat": CAT, "name": f"{d.code}", **where, "args": args}


def _events_by_line(m: TraceModel, ctx, diagnostics: Iterable[Diagnostic]) -> dict[tuple, list[int]]:
    """(trace path, line) of each located finding -> CPU events charged to that line, by start time."""
    want = {(d.location.trace_path, d.location.line) for d in diagnostics if d.location.line is not None}
    found: dict[tuple, list[int]] = {}
    if not want:
        return found
    lo = m.steps[0].ts if m.steps else float("-inf")
    for i, e in enumerate(m.cpu):
        if e.cat == "python_function" or e.ts < lo or m.user_frame(i) < 0:
            continue
        key = ctx.line_key(i)
        if key is not None and (key.trace_path, key.line) in want:
            found.setdefault((key.trace_path, key.line), []).append(i)
    for v in found.values():
        v.sort(key=lambda i: m.cpu[i].ts)
    return found


def _at(e) -> dict:
    return {"pid": e.pid, "tid": e.tid, "ts": e.ts}


def _evidence_at(m: TraceModel, d: Diagnostic, evs: list[int]) -> Optional[dict]:
    """Where the finding's evidence first shows among its line's events.

    host-sync: the synchronising call; fp32-matmul / pageable-memcpy: the first offending kernel or
    copy on its GPU stream; memory findings: the allocation that reached the peak (memory-peak);
    otherwise the line's first event in the active steps.
    """
    ev = d.evidence or {}
    if d.code == "host-sync" and ev.get("sync_call"):
        for i in evs:
            for c in m.subtree(i):
                if m.cpu[c].name == ev["sync_call"]:
                    return _at(m.cpu[c])
    if d.code in ("fp32-matmul", "pageable-memcpy"):
        gpu = []
        for i in evs:
            gpu.extend(m.gpu_under(i))
        for g in sorted(gpu, key=lambda g: m.gpu[g].ts):
            e = m.gpu[g]
            if (d.code == "fp32-matmul" and e.cat == "kernel" and kernels.is_fp32_simt_gemm(e.name)) or (
                d.code == "pageable-memcpy" and e.cat == "gpu_memcpy" and "pageable" in e.name.lower()
            ):
                return _at(e)
    if d.code == "memory-peak" and m.memory:
        peak = max(m.memory, key=lambda x: x.total_allocated)
        return {"pid": peak.thread[0], "tid": peak.thread[1], "ts": peak.ts}
    return _at(m.cpu[evs[0]])


def _trace_level_ts(m: TraceModel, d: Diagnostic, default: float) -> float:
    """A trace-level finding's time: the step its evidence names, else the active window's start."""
    ev = d.evidence or {}
    if ev.get("kind") == "flush-sync":
        syncs = [e for e in m.cpu if e.name in kernels.DEVICE_SYNCS]
        if syncs:
            return max(syncs, key=lambda e: e.ts).ts
    if ev.get("kind") == "lane-offset" and m.steps:
        return m.steps[0].ts
    for key in ("first_step", "step"):
        name = ev.get(key)
        if isinstance(name, str):
            for s in m.steps:
                if s.name == name:
                    return s.ts
    return default


def _free_pid(events: list) -> int:
    ints = [e.pid for e in events if isinstance(e.pid, int)]
    return max(ints, default=0) + 1


# The file's members and events as the bytes they are written in: a structural pass, no values built.
_RAW_DOC = msgspec.json.Decoder(Union[dict[str, msgspec.Raw], list[msgspec.Raw]])
_RAW_EVENTS = msgspec.json.Decoder(list[msgspec.Raw])


def write_trace(f: IO[bytes], data: bytes, extra: list[dict], chunk: int = 4096) -> None:
    """The trace JSON ``data`` with ``extra`` appended to its events, written event by event: the
    file's own events and members as their bytes, ``extra`` with orjson."""
    import orjson  # here, not at the top: the engine's import (every analysis) then goes without it

    doc = _RAW_DOC.decode(data)
    members: dict[str, msgspec.Raw] = {}
    if isinstance(doc, list):  # the Chrome "JSON array" form: events only
        events = doc
    else:
        events = _RAW_EVENTS.decode(doc.get("traceEvents", b"[]"))
        members = doc
    f.write(b'{"traceEvents":[')
    sep = b""
    buf: list = []
    for e in itertools.chain(events, map(orjson.dumps, extra)):
        buf.append(sep)
        buf.append(e)
        sep = b","
        if len(buf) >= chunk:
            f.write(b"".join(buf))
            buf.clear()
    f.write(b"".join(buf))
    f.write(b"]")
    for k, v in members.items():
        if k == "traceEvents":
            continue
        f.write(b"," + orjson.dumps(k) + b":")
        f.write(v)
    f.write(b"}")


def annotated_events(path: str) -> Optional[list]:
    """The events of an annotated (or any) trace file, for tests and tools."""
    import orjson

    return orjson.loads(bytes(loader.read_bytes(path))).get("traceEvents")
