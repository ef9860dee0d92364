"""Build a large, realistic torch.profiler trace by tiling a real one.

Each copy of the source's events is shifted in time by the trace's span (plus a small gap), so the
copies follow one another like more profiled steps of the same run. Ids stay unique per copy:
``External id``, ``correlation``, ``Python id`` / ``Python parent id`` and the flow ``id`` of
``s``/``f`` events are offset by ``copy * stride``; ``ProfilerStep#N`` is renumbered so steps stay
unique. Metadata (``M``) events are written once.

The output is streamed: the source is decoded once, then each copy's events are dumped one by one
with orjson, so producing 1 GB needs only the source's objects in memory.

    python bench/tile.py SOURCE OUT --mb 250
    python bench/tile.py SOURCE OUT --copies 100   # 100x the source's steps (bench.py --steps)
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import orjson
from cases import _read  # bench/ is this script's directory: on sys.path when run

ID_ARGS = ("External id", "correlation", "Python id", "Python parent id")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _plan(events: list) -> tuple[float, int, int, int]:
    """(time shift per copy, id stride, step-number stride, min step number) for the source."""
    t0, t1 = float("inf"), float("-inf")
    max_id = 0
    steps = []
    for e in events:
        if e.get("ph") == "M":
            continue
        ts = e.get("ts")
        if isinstance(ts, (int, float)):
            t0 = min(t0, ts)
            t1 = max(t1, ts + (e.get("dur") or 0))
        if isinstance(e.get("id"), int):
            max_id = max(max_id, e["id"])
        a = e.get("args")
        if isinstance(a, dict):
            for k in ID_ARGS:
                v = a.get(k)
                if isinstance(v, int):
                    max_id = max(max_id, v)
        m = _STEP.match(e.get("name", "") or "")
        if m:
            steps.append(int(m.group(1)))
    span = (t1 - t0) if t1 > t0 else 1.0
    shift = span + 1000.0  # a 1 ms gap between copies, like a profiler schedule's skipped steps
    step_stride = (max(steps) - min(steps) + 1) if steps else 0
    return shift, max_id + 1, step_stride, min(steps) if steps else 0


def _templates(events: list) -> list:
    """Per event: (dict, which fields to shift) so each copy does only the needed work."""
    out = []
    for e in events:
        if e.get("ph") == "M":
            continue
        a = e.get("args") if isinstance(e.get("args"), dict) else None
        id_keys = tuple(k for k in ID_ARGS if a is not None and isinstance(a.get(k), int))
        flow = e.get("ph") in ("s", "f") and isinstance(e.get("id"), int)
        m = _STEP.match(e.get("name", "") or "")
        out.append((e, isinstance(e.get("ts"), (int, float)), id_keys, flow, int(m.group(1)) if m else None))
    return out


def tile(
    source: str, out: str, target_bytes: int = 0, log=sys.stderr, copies_wanted: int = 0
) -> tuple[int, int]:
    """Write ``out`` (plain JSON) of at least ``target_bytes`` by whole copies, or of exactly
    ``copies_wanted`` copies; (bytes, copies)."""
    doc = orjson.loads(_read(source))
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    events = doc.pop("traceEvents")
    shift, id_stride, step_stride, _ = _plan(events)
    tmpl = _templates(events)
    meta = [e for e in events if e.get("ph") == "M"]
    tmp = out + ".part"
    written = 0
    copies = 0
    with open(tmp, "wb", buffering=1 << 22) as f:
        head = orjson.dumps(doc, option=orjson.OPT_INDENT_2)[:-2]  # drop the closing "\n}"
        head += b',\n  "traceEvents": [\n'
        f.write(head)
        written += len(head)
        first = True
        for e in meta:
            b = orjson.dumps(e)
            f.write(b if first else b",\n" + b)
            written += len(b) + 2
            first = False
        while (copies < copies_wanted) if copies_wanted else (written < target_bytes):
            k = copies
            dt = shift * k
            did = id_stride * k
            parts = []
            for e, has_ts, id_keys, flow, step in tmpl:
                if k == 0:
                    c = e
                else:
                    c = dict(e)
                    if has_ts:
                        c["ts"] = round(e["ts"] + dt, 3)
                    if id_keys:
                        a = dict(e["args"])
                        for key in id_keys:
                            a[key] = a[key] + did
                        c["args"] = a
                    if flow:
                        c["id"] = e["id"] + did
                    if step is not None:
                        c["name"] = f"ProfilerStep#{step + step_stride * k}"
                parts.append(orjson.dumps(c))
            chunk = b",\n".join(parts)
            if not first:
                chunk = b",\n" + chunk
            first = False
            f.write(chunk)
            written += len(chunk)
            copies += 1
            if log and copies % 10 == 0:
                print(f"  tile: {copies} copies, {written / 1e6:.0f} MB", file=log)
        tail = b"\n  ]\n}\n"
        f.write(tail)
        written += len(tail)
    os.replace(tmp, out)
    return written, copies


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("out")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--mb", type=float, default=250, help="target size in MB (10^6 bytes)")
    size.add_argument("--copies", type=int, default=0, help="this many copies (its steps this many times)")
    ns = ap.parse_args(argv)
    n, copies = tile(ns.source, ns.out, int(ns.mb * 1e6), copies_wanted=ns.copies)
    print(f"{ns.out}: {n} bytes, {copies} copies of {ns.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
