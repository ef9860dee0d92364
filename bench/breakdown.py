"""Where profd's full analysis spends its time, phase by phase, pass by pass and rule by rule: the
whole of ``engine.analyze_file`` (gc off, as it runs) and the JSON report written, as
``bench.py``'s profd-full case does.

    python bench/breakdown.py bench/out/tinygpt_naive_x250MB.json
    python bench/breakdown.py bench/out/x50.json bench/out/x250.json   # side by side, with ratios
    python bench/breakdown.py --cpu ...   # CPU time (process_time) instead of wall: steadier on a
                                          # loaded machine (the loader's threads count in load)
    python bench/breakdown.py --select profiler-artifact ...   # one rule (bench.py's profd-select)

The pipeline runs as it is; each phase is timed by wrapping the function that does it (the
pipeline's steps, the native or reference passes, the lazy indexes the rules share, each rule).
Times are exclusive: a phase nested in another counts in the inner one only, so the phases add up
to the run's wall time; ``analyze_trace (own)``, ``analyze_document``'s and ``analyze_context``'s
bodies between them, and ``analyze_file (own)`` freeing the model and analysis it lets go.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections import defaultdict

from profd.client_cli.format import json_doc
from profd.server.engine import (
    analyses,
    analyze,
    context,
    hotlines,
    impact,
    loader,
    model,
    modules,
    passes,
    sourcemap,
    statements,
    suppress,
    windows,
)
from profd.server.engine.context import Options
from profd.server.engine.rules import Rule

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")


NOW = time.perf_counter  # --cpu: time.process_time
SELECT: list[str] = []  # --select CODE (repeatable): these rules alone and no report part, as profd-select
# The load's two threads, in CPU seconds: the one that scans (the caller's) and the reader that reads,
# inflates and hashes the blocks (loader._Blocks). The load takes about as long as the busier one:
# this says which one that is, and how much room the other has. "beside": the CPU of the passes
# started on the second core while the rules run (passes.start_work).
THREADS = {"scanning": 0.0, "reading": 0.0, "beside": 0.0, "hashing": 0.0}


class Clock:
    """Exclusive time and calls per phase: a wrapped call's time less that of the wrapped calls
    inside it."""

    def __init__(self):
        self.took: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._inner: list[float] = []  # per open call, the time of the wrapped calls inside it

    def timed(self, label, fn):
        def run(*args, **kw):
            t = NOW()
            self._inner.append(0.0)
            try:
                return fn(*args, **kw)
            finally:
                took = NOW() - t
                inner = self._inner.pop()
                name = label(*args) if callable(label) else label
                self.took[name] += took - inner
                self.calls[name] += 1
                if self._inner:
                    self._inner[-1] += took

        return run

    def patch(self, owner, attr: str, label) -> None:
        fn = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        if isinstance(fn, classmethod):
            setattr(owner, attr, classmethod(self.timed(label, fn.__func__)))
        else:
            setattr(owner, attr, self.timed(label, fn))


def instrument(clock: Clock) -> None:
    """Wrap the pipeline's phases where they are looked up (analyze imports some by name)."""
    steps = [
        (analyze, "analyze_trace", "analyze_trace (own)"),
        (loader, "load", "load"),
        (analyze, "build", "model.build"),
        (loader.TraceDoc, "drop_events", "drop_events"),
        (analyze, "analyze", "analyses.analyze"),
        (analyze, "trace_info", "trace_info"),
        (analyze, "load_all", "rules.load_all (their imports)"),
        (analyze, "load", "rules.load (the enabled families' imports)"),
        (analyze, "Context", "Context()"),
        (hotlines, "hot_lines", "hot_lines"),
        (modules, "build_tree", "modules.build_tree"),
        (impact, "assign", "impact.assign"),
        (suppress, "apply", "suppress.apply"),
        (suppress, "unused", "suppress.unused"),
        (analyze, "_relate_backward", "relate_backward"),
        (analyze, "_summary", "summary"),
        (analyze, "bound", "bound"),
        # what several consumers share, built on first use
        (modules.ModuleIndex, "of", "ModuleIndex"),
        (statements.StatementResolver, "line_for", "statements.line_for"),
        (statements.CallGroups, "of", "statements.CallGroups.of"),
        (sourcemap.SourceMap, "resolve", "sourcemap.resolve"),
        (context, "_line_tokens", "Context.line_tokens"),
        (windows, "infer_steps", "windows.infer_steps"),
        (analyses, "setup_intervals", "windows.setup_intervals"),
        (analyses, "step_gpu", "analyses.step_gpu"),
        (analyses, "_classes", "analyses.gpu_classes"),
        (analyses, "host_stages", "analyses.host_stages"),
        (model, "_link_backward", "model.link_backward"),
        # (model._memory runs beside the rules, on a thread of its own: its CPU is the "beside"
        # line's, and a Clock phase from that thread would tangle this one's)
    ]
    for owner, attr, label in steps:
        clock.patch(owner, attr, label)
    for impl in (passes.NATIVE, passes.REFERENCE):
        for name in passes.PASSES:
            clock.patch(impl, name, f"pass {name} ({impl.name})")
    check = Rule.__call__
    Rule.__call__ = clock.timed(lambda r, ctx: "rule " + r.code, lambda r, ctx: list(check(r, ctx)))
    _thread_cpu(loader, "_load_stream", "scanning")
    _thread_cpu(loader._Blocks, "_run", "reading")
    # a pass started beside the rules (passes.start_work) runs on its own thread, outside the table
    # above: its time shows where its result is waited for, and its CPU here
    _thread_cpu(passes.Started, "_run", "beside")
    # a big plain file's hash, on a thread of its own from the load on (loader.LaterSha, which runs
    # as a passes.Started: threads_line takes its CPU out of "beside")
    _thread_cpu(loader.LaterSha, "_hash", "hashing")


def _thread_cpu(owner, attr: str, key: str) -> None:
    """Add the CPU time of the thread that runs ``owner.attr`` there to THREADS[key]."""
    fn = getattr(owner, attr)

    def run(*args, **kw):
        t = time.thread_time()
        try:
            return fn(*args, **kw)
        finally:
            THREADS[key] += time.thread_time() - t

    setattr(owner, attr, run)


def threads_line(threads: dict) -> str:
    hashing = threads.get("hashing", 0.0)
    return (
        f"  {'load threads (cpu)':40} scanning {threads['scanning']:.3f} s, reading (read, inflate, "
        f"sha256 unless hashed later) {threads['reading']:.3f} s\n"
        f"  {'a big plain file hashed later (cpu)':40} {hashing:.3f} s (from the load on, lowest priority)\n"
        f"  {'passes beside the rules (cpu)':40} {threads['beside'] - hashing:.3f} s"
    )


def run(path: str) -> tuple[dict[str, float], dict[str, int], float, str]:
    clock = Clock()
    instrument(clock)
    # analyze_file's own time, beside analyze_trace's: freeing the model and analysis it drops
    whole = clock.timed("analyze_file (own: freeing the analysis)", analyze.analyze_file)
    write = clock.timed("json write", _write)
    gc.disable()
    t = NOW()
    from profd.protocol.catalog import RULES

    disabled = set(RULES) - set(SELECT) if SELECT else set()
    opts = Options(workspace=[os.path.join(ROOT, "examples", "src")], disabled=disabled)
    if SELECT:  # the summary and the findings alone, as bench.py's profd-select
        opts.parts = frozenset()
    rep = whole(path, opts)
    write(rep)
    total = NOW() - t
    head = (
        f"{path}: {rep.trace.events} events, {len(rep.summary.steps)} steps, "
        f"{len(rep.diagnostics)} findings, {len(rep.hot_lines)} hot lines"
    )
    return dict(clock.took), dict(clock.calls), total, head


def _write(rep) -> None:
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "breakdown_report.json"), "wb") as f:
        f.write(json_doc([rep]) + b"\n")


def main(paths: list[str]) -> None:
    if len(paths) == 1:
        took, calls, total, head = run(paths[0])
        print(head)
        for k, v in sorted(took.items(), key=lambda kv: -kv[1]):
            if v >= 0.005:
                print(f"  {k:40} {v:7.3f} s  {100 * v / total:5.1f}%  {calls[k]:>8} calls")
        print(
            f"  {'total (cpu)' if NOW is time.process_time else 'total (wall)':40} {total:7.3f} s  (phases sum to {sum(took.values()):.3f} s)"
        )
        print(threads_line(THREADS))
        return
    # several files: one child each (a fresh interpreter: no cache carried from one to the next)
    import json
    import subprocess

    runs = []
    for p in paths:
        cpu = ["--cpu"] if NOW is time.process_time else []
        cpu += [a for c in SELECT for a in ("--select", c)]
        out = subprocess.run(
            [sys.executable, __file__, *cpu, "--json", p], check=True, capture_output=True, text=True
        ).stdout
        runs.append(json.loads(out.splitlines()[-1]))
    for r in runs:
        print(r["head"])
        print(threads_line(r["threads"]))
    base = runs[0]
    keys = sorted({k for r in runs for k in r["took"]}, key=lambda k: -runs[-1]["took"].get(k, 0.0))
    print(f"  {'phase':40}" + "".join(f"{os.path.basename(p)[:10]:>10}" for p in paths) + "   ratios")
    for k in keys + ["total"]:
        vals = [r["total"] if k == "total" else r["took"].get(k, 0.0) for r in runs]
        if max(vals) < 0.005:
            continue
        b = base["total"] if k == "total" else base["took"].get(k, 0.0)
        ratios = " ".join(f"{v / b:5.1f}x" if b > 0.0005 else "    -" for v in vals[1:])
        print(f"  {k:40}" + "".join(f"{v:10.3f}" for v in vals) + "   " + ratios)


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[0] == "--cpu":
        NOW = time.process_time
        argv = argv[1:]
    while argv[0] == "--select":
        SELECT.append(argv[1])
        argv = argv[2:]
    if argv[0] == "--json":
        import json

        took, calls, total, head = run(argv[1])
        print(json.dumps({"took": took, "calls": calls, "total": total, "head": head, "threads": THREADS}))
    else:
        main(argv)
