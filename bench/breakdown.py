"""Where profd's full analysis spends its time, phase by phase and rule by rule (gc off, as
``engine.analyze_file`` runs it).

    python bench/breakdown.py bench/out/tinygpt_naive_x250MB.json
"""

import gc
import os
import sys
import time

from profd.server.engine import analyses, analyze, loader, model
from profd.server.engine.context import Context, Options
from profd.server.engine.rules import load_all

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(path: str) -> None:
    gc.disable()
    took = {}
    t = time.perf_counter()
    doc, sha, size = loader.load(path)  # read + inflate + sha256 + decode, streamed
    took["load"] = time.perf_counter() - t
    t = time.perf_counter()
    m = model.build(doc)
    took["model.build"] = time.perf_counter() - t
    t = time.perf_counter()
    a = analyses.analyze(m)
    took["analyze"] = time.perf_counter() - t
    t = time.perf_counter()
    ctx = Context(m, a, path, Options(workspace=[os.path.join(ROOT, "examples", "src")]))
    ctx.hot = analyze._hot_lines(ctx)
    took["hot_lines"] = time.perf_counter() - t
    for code, check in load_all().items():
        t = time.perf_counter()
        list(check(ctx))
        took["rule " + code] = time.perf_counter() - t
    total = sum(took.values())
    print(f"{path}: {doc.n_events} events, {len(m.cpu)} cpu, {len(m.gpu)} gpu")
    for k, v in sorted(took.items(), key=lambda kv: -kv[1]):
        if v >= 0.005:
            print(f"  {k:32} {v:7.2f} s  {100 * v / total:5.1f}%")
    print(f"  {'total':32} {total:7.2f} s")


if __name__ == "__main__":
    main(sys.argv[1])
