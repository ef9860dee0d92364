"""``profd-client record [OPTIONS] -- COMMAND...``: profile your own program with no code change,
then print its findings as ``analyze`` does (``--baseline OLD``: the diff against an earlier
recording instead, with the measured unprofiled step time of both).

The recording itself is ``profd.server.workloads.record`` (shared with the editor and the MCP
server); this module only translates options and prints. The program's output goes to stderr
(stdout is the findings'); the trace goes into the watched folder of the running daemon, else
``--out`` (default ./profd-traces).
"""

from __future__ import annotations

import argparse
import os
import sys

from . import common
from .config import UsageError

DESCRIPTION = """\
Run your program unmodified under torch.profiler, set up right, and print the findings on its trace.

COMMAND is a Python program: `python train.py ARGS`, `python -m pkg ARGS`, `torchrun ... train.py`.
A start-up hook in the program's own interpreter (PYTHONPATH) sets the profiler up: steps end at
each Optimizer.step() (or --step), the first --warmup steps run untouched (compilation, autotuning),
the next --timed steps are timed without the profiler (the real step time, GPU synchronised), then
one profiler warm-up step and --steps profiled steps are recorded with ProfilerStep markers.
DataLoader workers and other child processes are not profiled; under torchrun every rank records
its own trace and a job report follows.

Costs: with_stack (on; --no-stack) adds Python-call overhead to every op, most on Python-heavy
steps; record_shapes (on; --no-shapes) a little per op; --memory (profile_memory) a record per
allocation and larger traces. The unprofiled step time is measured apart, so the report says both.

Exit status: as analyze (0, 1 findings at or above --fail-on, 2 bad input: no command, not a Python
program, torch missing, no step reached, the program killed or failing before its trace was
written). When the program itself fails after its trace was written, its findings are printed and
its exit status is kept."""


def add_subcommands(cmd) -> None:
    r = cmd(
        "record",
        "run your own program under the profiler (no code change) and print its findings",
        DESCRIPTION,
    )
    g = r.add_argument_group("recording")
    g.add_argument(
        "--step",
        default="optimizer",
        metavar="RULE",
        help="what ends a step: optimizer (each Optimizer.step()), forward (each top-level "
        "nn.Module call: inference), MODULE:FUNCTION (each return of it; the script is "
        "MODULE by its file name, e.g. train:train_step), or time (--window s windows)",
    )
    g.add_argument("--window", type=float, default=1.0, metavar="S", help="--step time: seconds per step")
    g.add_argument(
        "--warmup", type=int, default=5, metavar="N", help="steps run untouched first (at least 1)"
    )
    g.add_argument(
        "--timed", type=int, default=10, metavar="N", help="steps then timed without the profiler (0: none)"
    )
    g.add_argument("--steps", type=int, default=3, metavar="N", help="steps profiled")
    g.add_argument(
        "--then",
        choices=["continue", "exit"],
        default="continue",
        help="once the trace is written: let the program run on, or stop it",
    )
    g.add_argument("--memory", action="store_true", help="profile_memory=True (memory rules; bigger traces)")
    g.add_argument(
        "--stack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with_stack (findings on your lines)",
    )
    g.add_argument("--shapes", action=argparse.BooleanOptionalAction, default=True, help="record_shapes")
    g.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="folder for the trace (default: the running daemon's watched folder, else ./profd-traces)",
    )
    g.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds until the trace is written before the program is stopped",
    )
    g.add_argument(
        "--baseline",
        metavar="OLD_TRACE",
        default=None,
        help="print the diff against this earlier recording instead of the findings",
    )
    common.output_options(r, ("text", "json", "sarif"), statistics=True)
    common.analysis_options(r)
    r.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- COMMAND...", help="the program and its arguments"
    )


def _out_dir(ns) -> str:
    if ns.out:
        return os.path.abspath(ns.out)
    if not common.no_daemon(ns):
        from . import daemon_client as dc

        try:
            doc = dc.find_daemon(ns.state)
        except OSError:
            doc = None
        if doc and doc.get("watch") and os.path.isdir(doc["watch"]):
            return doc["watch"]
    return os.path.abspath("profd-traces")


def _ms(us) -> str:
    return "-" if us is None else f"{us / 1000:.2f} ms"


def _spread(meta: dict) -> str:
    """The timed steps' range (CPU time between their boundaries, the first one left out: it starts
    on an empty GPU queue, after the synchronisation), so a reader can tell a noisy timing from a
    change; and whether a window was timed again for holding one-time work."""
    gaps = (meta.get("timed_intervals_us") or [])[1:]
    again = meta.get("timed_retimed") or 0
    return (f"; one step {_ms(min(gaps))} to {_ms(max(gaps))}" if len(gaps) >= 2 else "") + (
        f"; timed again {again}x: a step held one-time work" if again else ""
    )


def step_line(res, reports) -> str:
    from ..server.workloads.record import profiled_us

    prof = [p for p in (profiled_us(r) for r in reports if not r.error) if p]
    p = sum(prof) / len(prof) if prof else None
    ratio = f" ({p / res.unprofiled_us:.2f}x)" if p and res.unprofiled_us else ""
    timed = res.metas[0].get("timed") if res.metas else None
    return (
        f"record: {res.command.program}: {res.rule_desc}; step time unprofiled {_ms(res.unprofiled_us)}"
        + (f" (mean of {timed} steps{_spread(res.metas[0])})" if res.unprofiled_us and timed else "")
        + f", profiled {_ms(p)}{ratio}; "
        + ", ".join(res.traces)
        + "\n"
    )


def run(ns, out: common.Output) -> int:
    from ..server.workloads import record as R

    if not ns.command or ns.command == ["--"]:
        raise UsageError(
            "no command: give the program after --, as in `profd-client record -- python train.py`"
        )
    opts = R.RecordOptions(
        step=ns.step,
        window_s=ns.window,
        warmup=ns.warmup,
        timed=ns.timed,
        steps=ns.steps,
        then=ns.then,
        memory=ns.memory,
        stack=ns.stack,
        shapes=ns.shapes,
        timeout=ns.timeout,
    )
    if ns.baseline and not os.path.isfile(ns.baseline):
        raise UsageError(f"--baseline {ns.baseline}: no such trace")
    quiet = ns.quiet
    progress = (
        (lambda m, p: None) if quiet else (lambda m, p: print(f"profd: {m}", file=sys.stderr, flush=True))
    )
    echo = lambda line: print(line, file=sys.stderr, flush=True)  # the program's output: stderr
    try:
        res = R.record(ns.command, opts, _out_dir(ns), progress=progress, echo=echo)
    except R.RecordError as e:
        print(f"profd-client: record: {e}", file=sys.stderr)
        return common.EXIT_ERROR
    for n in res.notes:
        print(f"profd-client: record: {n}", file=sys.stderr)
    if ns.baseline:
        code = _baseline(ns, out, res)
    else:
        code = _findings(ns, out, res)
    if res.exit_status:  # the program's own failure, after its trace was written: its status is kept
        return res.exit_status if res.exit_status > 0 else 128 - res.exit_status
    return code


def _findings(ns, out: common.Output, res) -> int:
    from ..server.engine import group_jobs, reduce_job
    from ..server.workloads import record as R

    if len(res.traces) > 1:  # ranks of one job: the same reading as analyze
        opts = common.engine_options(ns)
        summaries: list = []
        reports = common.analyze_local(res.traces, opts, summaries=summaries)
        jobs_ = [reduce_job(g) for g in group_jobs([s for s in summaries if s.path in res.traces])]
    else:
        reports, jobs_ = common.analyze_paths(ns, res.traces), []
    if ns.format == "json" and not ns.statistics:
        import orjson

        from . import format as fmt

        doc = orjson.loads(fmt.json_doc(reports, jobs_))
        doc["record"] = R.record_doc(res, reports)
        for r in reports:
            if r.error:
                print(r.error, file=sys.stderr)
        out.json(doc)
    else:
        common.emit(out, ns, reports, jobs_)
        if ns.format == "text" and not ns.quiet:
            out.write(step_line(res, reports))
    return common.exit_code(ns, reports, [d for j in jobs_ for d in j.diagnostics])


def _baseline(ns, out: common.Output, res) -> int:
    from ..server.workloads.record import meta_of, record_doc
    from . import format as fmt
    from .jobs import diff_paths

    got = diff_paths(ns, os.path.abspath(ns.baseline), res.traces[0])
    if got is None:
        return common.EXIT_ERROR
    old, new, d, came = got
    old_us = meta_of(ns.baseline).get("unprofiled_us_per_step")
    if ns.format == "json":
        import orjson

        doc = orjson.loads(fmt.camel_json(d))
        doc["record"] = record_doc(res, [new])
        doc["record"]["baselineUnprofiledUsPerStep"] = old_us
        out.json(doc)
    else:
        out.write(fmt.diff_text(d))
        if not ns.quiet:
            change = ""
            if old_us and res.unprofiled_us:
                change = f" ({(res.unprofiled_us - old_us) / old_us * 100:+.1f}%)"
            old_txt = _ms(old_us) if old_us else "not measured (not a profd record trace)"
            out.write(f"unprofiled step: before {old_txt}, after {_ms(res.unprofiled_us)}{change}\n")
            out.write(step_line(res, [new]))
    return common.exit_code(ns, [], came)
