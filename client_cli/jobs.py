"""``profd-client`` for several traces at once: a before/after ``diff OLD NEW``, ``annotate TRACE
-o OUT.json`` and a multi-rank job on a Dask cluster (``analyze --cluster``). Kept apart from main.py."""

from __future__ import annotations

import os
import sys

from ..protocol import types as T
from . import common
from . import format as fmt
from .config import UsageError


def add_subcommands(cmd) -> None:
    d = cmd(
        "diff",
        "what got faster or slower between two traces, and which findings came or went",
        "Compare two traces of the same program (before/after a change): step time, verdict,\n"
        "rules and findings that came or went, and the source lines whose cost moved.\n"
        "With --fail-on, findings that are new in NEW at or above that severity exit 1: a CI gate\n"
        "for regressions. --format sarif reports the new findings only.",
    )
    d.add_argument("old", metavar="OLD", help="the trace before")
    d.add_argument("new", metavar="NEW", help="the trace after")
    common.output_options(d, ("text", "json", "sarif"))
    common.analysis_options(d)
    d.add_argument("--max-lines", type=int, default=20, metavar="N", help="source lines to list (text)")
    a = cmd(
        "annotate", "write a copy of the trace with the findings as markers, for Perfetto or chrome://tracing"
    )
    a.add_argument("trace", metavar="TRACE", help="the trace to annotate")
    a.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT.json",
        help="where to write the annotated trace (.json, or .json.gz to compress it)",
    )
    common.output_options(a, ("text", "json"), output_file=False)
    common.analysis_options(a, daemon=False, gate=False)


def run(ns, out: common.Output) -> int:
    if ns.cmd == "diff":
        return _diff(ns, out)
    return _annotate(ns, out)


def diff_paths(ns, old_path: str, new_path: str):
    """(old report, new report, their diff, the findings new in NEW), or None when either is not a
    trace (its error said on stderr). ``diff`` and ``record --baseline`` print it."""
    from ..server.engine import diff_reports

    old, new = common.analyze_paths(ns, [old_path, new_path])
    for r in (old, new):
        if r.error:
            print(r.error, file=sys.stderr)
    if old.error or new.error:
        return None
    d = diff_reports(old, new)
    return old, new, d, [f.new for f in d.findings if f.change == "new" and f.new is not None]


def _diff(ns, out: common.Output) -> int:
    got = diff_paths(ns, ns.old, ns.new)
    if got is None:
        return common.EXIT_ERROR
    old, new, d, came = got
    if ns.format == "json":
        out.write(fmt.camel_json(d) + b"\n")
    elif ns.format == "sarif":
        out.json(
            fmt.sarif(
                [
                    T.Report(
                        trace=new.trace,
                        summary=new.summary,
                        diagnostics=came,
                        profd_version=new.profd_version,
                    )
                ]
            )
        )
    else:
        out.write(fmt.diff_text(d, max_lines=ns.max_lines))
    return common.exit_code(ns, [], came)


def _annotate(ns, out: common.Output) -> int:
    from ..server.engine import TraceError, annotate_file

    try:
        r = annotate_file(ns.trace, ns.output, common.engine_options(ns))
    except TraceError as e:
        print(str(e), file=sys.stderr)
        return common.EXIT_ERROR
    except OSError as e:
        raise UsageError(f"cannot write {ns.output}: {e.strerror or e}")
    steps = len(r.summary.steps) if r.summary else 0
    if ns.format == "json":
        out.json({"output": os.path.abspath(ns.output), "findings": len(r.diagnostics), "steps": steps})
    elif not out.quiet:
        out.write(
            f"{ns.output}: {fmt.plural(len(r.diagnostics), 'finding')} and "
            f"{fmt.plural(steps, 'step verdict')} added; open it in https://ui.perfetto.dev "
            "or chrome://tracing\n"
        )
    return common.EXIT_CLEAN


def analyze_cluster(ns, out: common.Output) -> int:
    """The rank traces (files or folders) summarised on the Dask cluster at ``--cluster``: only the
    job reports are printed (the rank reports are never gathered in one process). Paths are made
    absolute here, so the workers read the same files whatever their working directory."""
    from ..server.daemon import cluster

    files, _ = common.expand_paths(ns.paths)
    files = [os.path.abspath(f) for f in files]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise UsageError(
            f"no such trace: {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    try:
        summaries = cluster.summarize_paths(
            files, common.engine_options(ns), cluster=ns.cluster, workers=ns.workers
        )
    except (OSError, RuntimeError, TimeoutError) as e:
        common.warn(f"cluster analysis failed: {e}")
        return common.EXIT_ERROR
    failed = [s for s in summaries if s.error]
    for s in failed:
        common.warn(f"task for {s.path} failed: {s.error}")
    jobs_ = cluster.reduce_summaries(summaries)
    if ns.format == "json":
        out.write(fmt.json_doc([], jobs_) + b"\n")
    elif ns.format == "sarif":
        out.json(fmt.sarif([], jobs_))
    elif ns.statistics:
        out.write(fmt.statistics_text(fmt.statistics([], jobs_)))
    else:
        ok = len(summaries) - len(failed)
        out.write(
            fmt.job_text(jobs_, color=out.color)
            or f"no multi-rank job among the {fmt.plural(ok, 'trace')} summarised"
            f"{f' ({len(failed)} failed)' if failed else ''}\n"
        )
    if failed:
        return common.EXIT_ERROR
    return common.exit_code(ns, [], [d for j in jobs_ for d in j.diagnostics])
