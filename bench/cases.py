"""One bench case, run in a fresh process: ``python bench/cases.py MODE FILE`` prints its result
as a JSON line. ``bench.py`` runs each case so; this module imports nothing beyond what its case
needs (the bench's own argparse, statistics and subprocess would count in the case's peak RSS:
2.4 MB, which made the 51 MB case read 1.42x the file where ``profd-client analyze`` peaks at
1.33x). The ``hta`` case runs under HTA's own venv: nothing of profd is imported for it."""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
# profd-select's one rule (--select): cheap, and without a step-model fix, so no other rule runs
# for its impact (a rule that declares one brings the others that do: analyze._rules_to_run)
SELECT_RULE = os.environ.get("PROFD_BENCH_SELECT", "profiler-artifact")


def _read(path: str) -> bytes:
    """The file's JSON bytes: a gzipped one inflated as a script does it (``gzip``, zlib's)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        import gzip

        data = gzip.decompress(data)
    return data


HELD: list = []  # the profd-full case's analysis, never freed (the process exits)


def child(mode: str, path: str) -> dict:
    import gc

    t0, c0 = time.perf_counter(), time.process_time()
    extra = {}
    if mode == "orjson-gc":
        import orjson

        doc = orjson.loads(_read(path))
        extra["events"] = len(doc["traceEvents"])
    elif mode == "orjson":
        import orjson

        extra["import_s"], extra["import_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
        gc.disable()
        doc = orjson.loads(_read(path))
        extra["events"] = len(doc["traceEvents"])
    elif mode == "msgspec-raw":
        import msgspec

        gc.disable()
        doc = msgspec.json.decode(_read(path))
        extra["events"] = len(doc["traceEvents"])
    elif mode == "profd-load":
        from profd.server.engine import loader, passes

        passes.own_the_heap()

        extra["import_s"], extra["import_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
        doc, _, _ = loader.load(path)
        extra["events"] = len(doc.traceEvents)
    elif mode in ("profd-full", "profd-select"):
        from profd.client_cli.format import json_doc
        from profd.protocol.catalog import RULES
        from profd.server.engine import Options, passes
        from profd.server.engine.analyze import analyze_or_error

        passes.own_the_heap()  # as profd-client's process (client_cli.common.analyze_local)

        extra["import_s"], extra["import_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
        sel = mode == "profd-select"
        disabled = set(RULES) - {SELECT_RULE} if sel else set()
        opts = Options(workspace=[os.path.join(ROOT, "examples", "src")], disabled=disabled)
        if sel:  # the summary and the findings alone, as `profd-client analyze --select` prints
            opts.parts = frozenset()
        # as `profd-client analyze` runs it: the analysis is held, not freed, since the process
        # ends right after writing (client_cli.main.entry: freeing a 255 MB trace's model took
        # ~0.04 s that no user waits for)
        rep = analyze_or_error(path, opts, hold=HELD)
        # the JSON report written, as `profd-client analyze --format json` writes it
        with open(os.path.join(OUT, mode.replace("-", "_") + "_report.json"), "wb") as f:
            f.write(json_doc([rep]) + b"\n")
        extra["events"] = rep.trace.events
        extra["diagnostics"] = len(rep.diagnostics)
        extra["hot_lines"] = len(rep.hot_lines)
    elif mode == "yardstick":
        extra["events"] = yardstick()
    elif mode == "hta":
        # Runs under HTA_PYTHON when bench/.hta-venv exists: nothing of profd may be imported here.
        from hta.trace_analysis import TraceAnalysis  # type: ignore

        d = os.path.join(OUT, "hta_" + os.path.basename(path).replace(".", "_"))
        os.makedirs(d, exist_ok=True)
        link = os.path.join(d, "rank0.json")
        if not os.path.exists(link):
            os.symlink(os.path.abspath(path), link)
        t1 = time.perf_counter()
        ta = TraceAnalysis(trace_dir=d)  # one rank: HTA parses in this process (no pool)
        t2 = time.perf_counter()
        temporal = ta.get_temporal_breakdown(visualize=False)
        t3 = time.perf_counter()
        ta.get_idle_time_breakdown(visualize=False)
        t4 = time.perf_counter()
        extra["events"] = int(sum(len(df) for df in ta.t.traces.values()))  # HTA's kept events
        extra["import_s"], extra["load_s"] = t1 - t0, t2 - t1
        extra["temporal_s"], extra["idle_s"] = t3 - t2, t4 - t3
        extra["idle_pct"] = float(temporal["idle_time_pctg"].iloc[0])
    else:
        raise SystemExit(f"unknown mode {mode}")
    wall = time.perf_counter() - t0
    return {"work_s": wall, "cpu_s": time.process_time() - c0, "rss": _vm_hwm(), **extra}


def yardstick() -> int:
    """The machine's speed for pure-Python work like the rules' (the module docstring): 400,000
    floats from a fixed seed sorted, grouped as (value, index) tuples under 1,000 keys, each
    group's values summed. Returns how many groups it made (the same every run)."""
    import random

    rnd = random.Random(32)
    xs = [rnd.random() for _ in range(400_000)]
    s = sorted(xs)
    groups: dict[int, list] = {}
    for i, x in enumerate(xs):
        groups.setdefault(int(x * 1000), []).append((x, i))
    sums = {k: sum(x for x, _ in v) for k, v in groups.items()}
    return len(sums) + (s[0] > 1)


def _vm_hwm() -> int:
    """This process's peak RSS. ``VmHWM`` belongs to the mm created at exec; ``ru_maxrss`` also
    keeps the RSS of the forked parent image, which would charge the bench's own memory to us."""
    import resource

    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise SystemExit("usage: python bench/cases.py MODE FILE")
    print(json.dumps(child(*argv)), flush=True)
    if HELD:  # ends as profd-client does after an in-process analysis: no teardown
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
