"""Two builds of the scanner timed against each other in one process, turn about.

The 2-core VM's speed swings by 30-60% from one minute to the next (a neighbour's load), so two
runs of ``bench.py`` or ``breakdown.py`` minutes apart cannot tell a 3% change in the scanner from
the weather. Here both builds of the native module (``_scan*.so``) are loaded side by side, each
scans the same bytes from memory in turn (no reader thread, no hashing), and the minimum of each
is compared: same machine state, same data. An A/A run (one build twice) gives equal minimums.

    cp server/engine/_scan*.so /tmp/before.so        # before the change
    ... edit _scan.c, pip install -e . --no-build-isolation ...
    python bench/ab_scan.py /tmp/before.so server/engine/_scan*.so bench/out/tinygpt_naive_x50MB.json

Measured with it (issue 32): an SSE whitespace skip that callgrind counted as 3% fewer
instructions made the scan 3.7-5% slower, and went back out.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import time

from cases import _read  # bench/ is this script's directory: on sys.path when run
from profd.server.engine import loader


def _build(tag: str, path: str):
    """The extension at ``path`` as a module of its own (its own statics, its own slab pool)."""
    spec = importlib.util.spec_from_file_location(f"ab_{tag}._scan", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"ab_scan: {path}: not a loadable extension")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _events_start(data: bytes) -> int:
    """Where the scanner starts: just past the '[' that opens the events (the loader's
    ``events_start``, as profd finds it)."""
    try:
        start, _form = loader.events_start("the trace", data)
    except loader.TraceError as e:
        raise SystemExit(f"ab_scan: {e}") from None
    if start < 0:
        raise SystemExit("ab_scan: no traceEvents array in the trace")
    return start


def scan_times(builds: dict, data: bytes, rounds: int) -> dict[str, list[float]]:
    """Per build the CPU seconds of each full scan, the builds taking turns (the order flips each
    round, so neither always runs first); every build must read the same number of events."""
    start = _events_start(data)
    times: dict[str, list[float]] = {k: [] for k in builds}
    counts: dict[str, int] = {}
    order = list(builds)
    for r in range(rounds):
        for tag in order if r % 2 == 0 else order[::-1]:
            scanner = builds[tag].Scanner(*loader.KEEP)
            t = time.thread_time()
            events, _end, done = scanner.scan(data, start, True)
            times[tag].append(time.thread_time() - t)
            if not done:
                raise SystemExit(f"ab_scan: build {tag} did not reach the end of the events")
            counts[tag] = len(events)
            del events
    if len(set(counts.values())) > 1:
        raise SystemExit(f"ab_scan: the builds read different numbers of events: {counts}")
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="build A (the baseline), a _scan*.so")
    ap.add_argument("b", help="build B, a _scan*.so")
    ap.add_argument("trace", help="a trace (.json or .json.gz: inflated in memory first)")
    ap.add_argument("-n", "--rounds", type=int, default=20)
    ns = ap.parse_args(argv)
    data = _read(ns.trace)  # inflated when gzipped, as bench.py's children read it
    gc.disable()
    times = scan_times({"A": _build("a", ns.a), "B": _build("b", ns.b)}, data, ns.rounds)
    for tag, ts in times.items():
        print(f"{tag}  min {min(ts):.4f} s  median {statistics.median(ts):.4f} s  ({len(ts)} scans)")
    print(f"B/A  {min(times['B']) / min(times['A']):.3f} (of the minimums)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
