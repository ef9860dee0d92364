"""Hostile inputs (issue 17) against the loader: time and peak memory as they grow.

    python bench/hostile_bench.py                 # 64, 256 and 1024 MB inflated, both decoders
    python bench/hostile_bench.py --sizes 64,256  # smaller
    python bench/hostile_bench.py --only trailer  # the shapes whose name holds "trailer"

Each input is a gzip of a few KB to a few MB (one member repeated: built without inflating it)
that inflates to SIZE MB of one hostile shape. Every case runs in a fresh child process, native
(the C scanner) and pure Python (msgspec alone), and prints wall seconds, peak RSS (VmHWM) and the
outcome. Linear time shows as a flat s/GB column across sizes; bounded memory as a flat peak for
the shapes that need none. Synthetic by nature: no profiler writes these. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

MB = 1 << 20
CHUNK = 16 * MB


def shapes() -> dict:
    ev = b'{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":2,"pid":1,"tid":1}'
    return {  # name -> (head, filler: repeated, tail)
        "blanks between events": (b'{"traceEvents":[' + ev + b",", b" ", ev + b"]}"),
        "blanks inside an event": (b'{"traceEvents":[' + ev + b',{"ph":"X",', b" ", b'"name":"b"}]}'),
        "one long name": (b'{"traceEvents":[' + ev + b',{"ph":"X","name":"', b"x", b'"}]}'),
        "NULs": (b"\0", b"\0", b""),
        "header before the events": (b'{"x":"', b"a", b'","traceEvents":[]}'),
        "blanks before the document": (b" ", b" ", b"[]"),
        # issue 17, the reader's part: what follows the events, nesting, many events in a second array
        "blanks in the trailer": (b'{"traceEvents":[' + ev + b"],", b" ", b'"traceName":"t"}'),
        "long member in the trailer": (b'{"traceEvents":[' + ev + b'],"pad":"', b"x", b'","traceName":"t"}'),
        "members in the trailer": (b'{"traceEvents":[' + ev + b"]", b',"pad":[1,"a",{"b":null}]', b"}"),
        "a second traceEvents": (b'{"traceEvents":[' + ev + b'],"traceEvents":[', ev + b",", ev + b"]}"),
        "deep nesting": (b'{"traceEvents":[{"ph":"X","args":{"a":', b"[", b""),
    }


def build(path: str, head: bytes, fill: bytes, tail: bytes, size_mb: int) -> None:
    unit = fill * max(1, CHUNK // len(fill))
    member = gzip.compress(unit, 9)
    with open(path, "wb") as f:
        f.write(gzip.compress(head, 9))
        for _ in range(max(1, size_mb * MB // len(unit))):
            f.write(member)
        if tail:
            f.write(gzip.compress(tail, 9))


CHILD = r"""
import json, os, sys, time
if sys.argv[2] == "python":
    os.environ["PROFD_NATIVE"] = "0"  # the reference reader (msgspec)
from profd.server.engine import loader
t0 = time.perf_counter()
try:
    doc, _, size = loader.load(sys.argv[1])
    out = f"ok: {doc.n_events} events"
except loader.TraceError as e:
    out = "error: " + e.what[:60]
wall = time.perf_counter() - t0
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"wall": wall, "hwm_mb": hwm / 1024, "out": out}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64,256,1024")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--only", default="", help="shapes whose name contains this")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'shape':28} {'path':7} {'MB':>6} {'wall s':>8} {'s/GB':>6} {'peak MB':>8}  outcome")
    with tempfile.TemporaryDirectory(prefix="profd-hostile-") as tmp:
        for name, (head, fill, tail) in shapes().items():
            if args.only not in name:
                continue
            for mb in sizes:
                p = os.path.join(tmp, "t.json.gz")
                build(p, head, fill, tail, mb)
                for how in ("native", "python"):
                    t0 = time.perf_counter()
                    try:
                        r = subprocess.run(
                            [sys.executable, "-c", CHILD, p, how],
                            capture_output=True,
                            text=True,
                            timeout=args.timeout,
                        )
                        res = (
                            json.loads(r.stdout.strip().splitlines()[-1])
                            if r.returncode == 0
                            else {
                                "wall": time.perf_counter() - t0,
                                "hwm_mb": 0,
                                "out": f"child died ({r.returncode})",
                            }
                        )
                    except subprocess.TimeoutExpired:
                        res = {"wall": args.timeout, "hwm_mb": 0, "out": "timed out"}
                    print(
                        f"{name:28} {how:7} {mb:6d} {res['wall']:8.2f} "
                        f"{res['wall'] / mb * 1024:6.2f} {res['hwm_mb']:8.0f}  {res['out']}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
