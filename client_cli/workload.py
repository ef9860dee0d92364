"""``profd-client run WORKLOAD ...``: run a built-in workload under the profiler, then print the
findings on its trace (and, for a size sweep ``--n 64,512,4096``, the comparison table).

Runs the workload in a subprocess of this process (``profd.server.workloads.runner``) and analyses the trace
with the engine. The daemon's ``profd/runWorkload`` does the same on the daemon's side; until the
CLI talks to it for this command, ``--no-daemon`` is what happens either way.
"""

from __future__ import annotations

import os
import sys

from . import common


def add_subcommands(cmd) -> None:
    from ..server.workloads.runner import add_workload_args

    r = cmd(
        "run",
        "run a built-in workload under the profiler and print the findings on its trace",
        "Run a built-in workload under a correct profiler set-up, then print the findings on its\n"
        "trace; for a size sweep (--n 64,512,4096) also the table of where it turns from\n"
        "overhead-bound to compute-bound. Needs torch (pip install 'profd[workload]').",
    )
    add_workload_args(r)
    r.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="folder for the trace (.json.gz) and table (.txt) (default: ./profd-runs)",
    )
    r.add_argument(
        "--timeout", type=float, default=600.0, metavar="S", help="seconds per run before it is killed"
    )
    r.add_argument(
        "--python", default=None, metavar="PATH", help="interpreter with torch (default: this one)"
    )
    common.output_options(r, ("text", "json", "sarif"), statistics=True)
    common.analysis_options(r, daemon=False)
    r.add_argument(
        "--no-daemon",
        action="store_true",
        help="accepted for symmetry: the run and its analysis happen in this process",
    )


def run(ns, out: common.Output) -> int:
    from ..server.workloads import runner
    from ..server.engine import analyze_or_error
    from ..server.workloads import HERE

    out_dir = os.path.abspath(ns.out or "profd-runs")  # `out` is where the findings print
    progress = (
        (lambda msg, pct: None)
        if ns.quiet
        else (
            lambda msg, pct: print(
                f"profd: {msg}" + (f" ({pct:.0f}%)" if pct is not None else ""), file=sys.stderr, flush=True
            )
        )
    )
    try:
        spec, sizes = runner.spec_from_args(ns)
        if len(sizes) > 1:
            sweep = runner.run_sweep(spec, sizes, out_dir, ns.timeout, progress, ns.python, analyze=False)
            traces = []
            for x in sweep.runs:
                if isinstance(x, runner.RunResult):
                    runner.write_sidecar_meta(x)
                    traces.append((x.trace_path, x.meta))
                else:
                    print(f"profd: {x}", file=sys.stderr)
        else:
            res = runner.run_workload(spec, out_dir, ns.timeout, progress, ns.python)
            runner.write_sidecar_meta(res)
            traces = [(res.trace_path, res.meta)]
    except runner.WorkloadError as e:
        print(f"profd-client: workload failed: {e}", file=sys.stderr)
        if e.log_tail and e.kind in ("crash", "oom", "no-output"):
            print(e.log_tail, file=sys.stderr)
        return common.EXIT_ERROR
    opts = common.engine_options(ns)
    opts.workspace = [HERE, *opts.workspace]
    reports, rows = [], []
    for path, meta in traces:
        rep = analyze_or_error(path, opts)
        reports.append(rep)
        if meta.get("device") == "cpu":
            print(
                f"profd: {os.path.basename(path)} ran on the CPU (no CUDA GPU visible): CPU activity only",
                file=sys.stderr,
            )
        rows.append(runner.row_of(path, meta, [HERE]) if len(traces) > 1 else None)
    common.emit(out, ns, reports)
    if len(traces) > 1 and ns.format == "text" and not ns.statistics:
        out.write("\n" + runner.format_table([x for x in rows if x]))
    if not ns.quiet:
        for path, _ in traces:
            print(f"trace: {path}  table: {path.split('.json')[0]}.txt", file=sys.stderr)
    if len(traces) < max(1, len(sizes)):
        return common.EXIT_ERROR
    return common.exit_code(ns, reports)
