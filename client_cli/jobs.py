"""``profd-client`` for several traces at once: a multi-rank job (``analyze A B ...``), a
before/after ``diff OLD NEW`` and ``annotate TRACE -o OUT.json``. Kept apart from main.py."""
from __future__ import annotations

import os
import sys

import orjson

from ..protocol import types as T
from . import format as fmt
from .common import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, analyze_daemon, emit, exit_code, parse_path_map


def add_subcommands(sub) -> None:
    d = sub.add_parser("diff", help="what got faster/slower and which findings came or went")
    d.add_argument("old", metavar="OLD")
    d.add_argument("new", metavar="NEW")
    a = sub.add_parser("annotate", help="write a copy of the trace with the findings as markers")
    a.add_argument("trace", metavar="TRACE")
    a.add_argument("-o", "--output", required=True, metavar="OUT.json",
                   help="where to write the annotated trace (.json or .json.gz)")
    for x in (d, a):
        x.add_argument("--workspace", action="append", default=[], metavar="DIR")
        x.add_argument("--path-map", action="append", default=[], metavar="REMOTE=LOCAL")
        x.add_argument("--disable", action="append", default=[], metavar="CODE")
    d.add_argument("--format", choices=["text", "json"], default="text")
    d.add_argument("--max-lines", type=int, default=20, help="lines to list (text)")


def _options(ns, workspace=None, path_map=None):
    from ..server.engine import Options

    ws = workspace if workspace is not None else [os.path.abspath(w) for w in (ns.workspace or ["."])]
    pm = path_map if path_map is not None else parse_path_map(ns.path_map)
    return Options(workspace=ws, path_map=pm, disabled=set(ns.disable))


def run(ns) -> int:

    opts = _options(ns)
    if ns.cmd == "diff":
        from ..server.engine.diff import diff_reports
        from ..server.engine import analyze_or_error

        old, new = analyze_or_error(ns.old, opts), analyze_or_error(ns.new, opts)
        for r in (old, new):
            if r.error:
                print(r.error, file=sys.stderr)
        if old.error or new.error:
            return EXIT_ERROR
        d = diff_reports(old, new)
        if ns.format == "json":
            sys.stdout.buffer.write(T.encode(d) + b"\n")
        else:
            sys.stdout.write(fmt.diff_text(d, max_lines=ns.max_lines))
        return EXIT_CLEAN
    if ns.cmd == "annotate":
        from ..server.engine import loader
        from ..server.engine.annotate import annotate_file

        try:
            r = annotate_file(ns.trace, ns.output, opts)
        except loader.TraceError as e:
            print(str(e), file=sys.stderr)
            return EXIT_ERROR
        except OSError as e:
            print(f"profd-client: cannot write {ns.output}: {e.strerror or e}", file=sys.stderr)
            return EXIT_ERROR
        print(f"{ns.output}: {len(r.diagnostics)} finding(s) and {len(r.summary.steps) if r.summary else 0} "
              f"step verdict(s) added; open it in https://ui.perfetto.dev or chrome://tracing")
        return EXIT_CLEAN
    return EXIT_ERROR


def cmd_analyze_job(ns, workspace, path_map) -> int:
    """Several traces: each one's report, then one job report per multi-rank job among them.

    In-process each file is read once for both. Through the daemon the reports come from it and
    only the traces that say they are ranks of a job (``distributedInfo``) are summarised here.
    """
    from ..server.engine import job

    opts = _options(ns, workspace, path_map)
    if ns.cluster or any(os.path.isdir(p) for p in ns.paths):
        return _analyze_cluster(ns, opts)
    if ns.no_daemon or os.environ.get("PROFD_NO_DAEMON"):
        reports, jobs = job.analyze_job(ns.paths, opts)
    else:
        reports = analyze_daemon(ns, workspace, path_map)
        ranked = [r.trace.path for r in reports if not r.error and (r.trace.world_size or 0) > 1]
        jobs = [job.reduce_job(g) for g in job.group_jobs(job.summarize_rank(p, opts) for p in ranked)]
    color = ns.color == "always" or (ns.color == "auto" and sys.stdout.isatty())
    if ns.format == "json" and jobs:
        sys.stdout.buffer.write(fmt.json_jobs_doc(reports, jobs) + b"\n")
    elif ns.format == "sarif" and jobs:
        doc = fmt.sarif_jobs(fmt.sarif(reports), jobs)
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        emit(reports, ns.format, color, ns.hints)
        if jobs and ns.format == "text":
            sys.stdout.write("\n" + fmt.job_text(jobs, color=color))
    sys.stdout.flush()
    code = exit_code(reports, ns.fail_on)
    if code == 0 and ns.fail_on != "never":
        bar = T.SEVERITY_RANK[ns.fail_on]
        if any(T.SEVERITY_RANK[d.severity] >= bar for j in jobs for d in j.diagnostics):

            return EXIT_FINDINGS
    return code


def _analyze_cluster(ns, opts) -> int:
    """A job folder (or many files): summaries on the cluster or a local pool, only the job report
    printed (the rank reports are never gathered in one process)."""
    from ..server.daemon import cluster

    try:
        jobs = cluster.analyze_job_paths(ns.paths, opts, cluster=ns.cluster, workers=ns.workers)
    except (OSError, RuntimeError, TimeoutError) as e:
        print(f"profd-client: cluster analysis failed: {e}", file=sys.stderr)
        return EXIT_ERROR
    if ns.format == "json":
        sys.stdout.buffer.write(fmt.json_jobs_doc([], jobs) + b"\n")
    elif ns.format == "sarif":
        doc = fmt.sarif_jobs(fmt.sarif([]), jobs)
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        color = ns.color == "always" or (ns.color == "auto" and sys.stdout.isatty())
        sys.stdout.write(fmt.job_text(jobs, color=color) or "no multi-rank job among these traces\n")
    sys.stdout.flush()
    if ns.fail_on != "never":
        bar = T.SEVERITY_RANK[ns.fail_on]
        if any(T.SEVERITY_RANK[d.severity] >= bar for j in jobs for d in j.diagnostics):
            return EXIT_FINDINGS
    return EXIT_CLEAN
