"""``profd-client run WORKLOAD ...``: run a built-in workload under the profiler, then print the
findings on its trace (and, for a size sweep ``--n 64,512,4096``, the comparison table).

Runs the workload in a subprocess of this process (``profd.server.workloads.runner``) and analyses the trace
with the engine. The daemon's ``profd/runWorkload`` does the same on the daemon's side; until the
CLI talks to it for this command, ``--no-daemon`` is what happens either way.
"""
from __future__ import annotations

import os
import sys

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def add_subcommands(sub) -> None:
    from ..server.workloads.runner import add_workload_args

    r = sub.add_parser("run", help="run a built-in workload under the profiler and print the findings",
                       description=__doc__.splitlines()[0])
    add_workload_args(r)
    r.add_argument("--out", default=None, metavar="DIR",
                   help="folder for the trace (.json.gz) and table (.txt) (default: ./profd-runs)")
    r.add_argument("--timeout", type=float, default=600.0, help="seconds per run before it is killed")
    r.add_argument("--python", default=None, help="interpreter with torch (default: this one)")
    r.add_argument("--no-daemon", action="store_true", help="run and analyse in this process")
    r.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    r.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    r.add_argument("--hints", action="store_true")


def run(ns) -> int:
    from ..server.workloads import runner as R
    from ..server.engine import Options, analyze_or_error
    from ..server.workloads import HERE
    from . import format as fmt

    out = os.path.abspath(ns.out or "profd-runs")
    progress = (lambda msg, pct: None) if ns.quiet else (
        lambda msg, pct: print(f"profd: {msg}" + (f" ({pct:.0f}%)" if pct is not None else ""),
                               file=sys.stderr, flush=True))
    try:
        spec, sizes = R.spec_from_args(ns)
        if len(sizes) > 1:
            sweep = R.run_sweep(spec, sizes, out, ns.timeout, progress, ns.python, analyze=False)
            traces = []
            for x in sweep.runs:
                if isinstance(x, R.RunResult):
                    R.write_sidecar_meta(x)
                    traces.append((x.trace_path, x.meta))
                else:
                    print(f"profd: {x}", file=sys.stderr)
        else:
            res = R.run_workload(spec, out, ns.timeout, progress, ns.python)
            R.write_sidecar_meta(res)
            traces = [(res.trace_path, res.meta)]
    except R.WorkloadError as e:
        print(f"profd-client: workload failed: {e}", file=sys.stderr)
        if e.log_tail and e.kind in ("crash", "oom", "no-output"):
            print(e.log_tail, file=sys.stderr)
        return EXIT_ERROR
    color = ns.color == "always" or (ns.color == "auto" and sys.stdout.isatty())
    opts = Options(workspace=[HERE])
    reports, rows = [], []
    for path, meta in traces:
        rep = analyze_or_error(path, opts)
        reports.append(rep)
        if meta.get("device") == "cpu":
            print(f"profd: {os.path.basename(path)} ran on the CPU (no CUDA GPU visible): "
                  "CPU activity only", file=sys.stderr)
        rows.append(R.row_of(path, meta, [HERE]) if len(traces) > 1 else None)
    for r in reports:
        if r.error:
            print(r.error, file=sys.stderr)
    ok = [r for r in reports if not r.error]
    if ok:
        sys.stdout.write(fmt.text(ok, color=color, show_hints=ns.hints))
    if len(traces) > 1:
        sys.stdout.write("\n" + R.format_table([x for x in rows if x]))
    for path, _ in traces:
        print(f"trace: {path}  table: {path.split('.json')[0]}.txt", file=sys.stderr)
    if len(traces) < max(1, len(sizes)) or any(r.error for r in reports):
        return EXIT_ERROR
    return EXIT_CLEAN
