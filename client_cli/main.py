"""``profd-client``: prints findings like a compiler. Thin: the engine or the daemon does the work.

Exit codes as ruff: 0 clean (or below --fail-on), 1 findings at/above --fail-on, 2 bad input/usage.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from .common import (EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, analyze_daemon, analyze_local, emit, exit_code,
                     parse_path_map)

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="profd-client", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("analyze", help="analyse trace files and print the findings")
    a.add_argument("paths", nargs="+", metavar="PATH")
    a.add_argument("--no-daemon", action="store_true", help="analyse in this process")
    a.add_argument("--format", choices=["text", "json", "sarif"], default="text")
    a.add_argument("--workspace", action="append", default=[], metavar="DIR",
                   help="workspace root for mapping frame paths (repeatable; default: .)")
    a.add_argument("--path-map", action="append", default=[], metavar="REMOTE=LOCAL")
    a.add_argument("--fail-on", choices=["error", "warning", "information", "hint", "never"],
                   default="error")
    a.add_argument("--hints", action="store_true", help="also print hint-level findings")
    a.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    a.add_argument("--disable", action="append", default=[], metavar="CODE")
    a.add_argument("--state", metavar="DIR", help="daemon state dir (default: user cache dir)")
    a.add_argument("--cluster", metavar="ADDRESS", help="Dask scheduler (tcp://host:8786): summarise "
                   "the rank traces of a job (files or a folder) there; prints the job report")
    a.add_argument("--workers", type=int, metavar="N", help="local processes for a job folder")
    a.add_argument("--modules", action=argparse.BooleanOptionalAction, default=False,
                   help="also print each trace's module tree (text output)")
    _modules_subcommand(sub)
    _daemon_subcommands(sub)
    from . import jobs

    jobs.add_subcommands(sub)  # diff, annotate
    from . import workload

    workload.add_subcommands(sub)  # run
    return p


def _modules_subcommand(sub) -> None:
    m = sub.add_parser("modules", help="the nn.Module tree of traces: GPU/CPU per module, hottest first")
    m.add_argument("paths", nargs="+", metavar="PATH")
    m.add_argument("--depth", type=int, default=4, help="levels of the tree to print (default 4)")
    m.add_argument("--format", choices=["text", "json"], default="text")
    m.add_argument("--no-daemon", action="store_true", help="analyse in this process")
    m.add_argument("--workspace", action="append", default=[], metavar="DIR")
    m.add_argument("--path-map", action="append", default=[], metavar="REMOTE=LOCAL")
    m.add_argument("--state", metavar="DIR", help="daemon state dir (default: user cache dir)")
    m.set_defaults(disable=[])


def cmd_modules(ns) -> int:
    """profd-client modules TRACE...: the module trees (the JSON is each report's ``modules``)."""
    import msgspec

    from . import format as fmt

    workspace = [os.path.abspath(w) for w in (ns.workspace or ["."])]
    path_map = parse_path_map(ns.path_map)
    if ns.no_daemon or os.environ.get("PROFD_NO_DAEMON"):
        reports = analyze_local(ns.paths, workspace, path_map)
    else:
        reports = analyze_daemon(ns, workspace, path_map)
    for r in reports:
        if r.error:
            print(r.error, file=sys.stderr)
    good = [r for r in reports if not r.error]
    if ns.format == "json":
        sys.stdout.buffer.write(msgspec.json.encode({"modules": [{"path": r.trace.path, "tree": r.modules}
                                                                 for r in good]}) + b"\n")
    elif good:
        sys.stdout.write(fmt.modules_text(good, ns.depth))
    return EXIT_ERROR if len(good) < len(reports) else EXIT_CLEAN


def _daemon_subcommands(sub) -> None:
    """status / hover / reports: questions for the running daemon (daemon_client)."""
    s = sub.add_parser("status", help="what the daemon is doing")
    h = sub.add_parser("hover", help="the daemon's numbers for a source line")
    h.add_argument("where", metavar="FILE:LINE")
    r = sub.add_parser("reports", help="the reports the daemon holds")
    r.add_argument("path", nargs="?", metavar="PATH", help="only this trace or source file")
    for x in (s, h, r):
        x.add_argument("--state", metavar="DIR", help="daemon state dir (default: user cache dir)")


def cmd_daemon(ns) -> int:
    """profd-client status | hover FILE:LINE | reports [PATH]."""
    from . import daemon_client as dc

    doc = dc.find_daemon(ns.state)
    if doc is None:
        dc.warn("no daemon running (start one with `profd start --watch DIR`)")
        return EXIT_ERROR
    if ns.cmd == "status":
        st = dc.status_sync(doc)
        print(f"profd {st['version']} pid {st['pid']} on {doc['host']}:{doc['port']}: watching "
              f"{st['watch']}; {st['reports']} reports, {st['queued']} queued, {st['running']} "
              f"running, {st['analyses']} analyses, {st['sessions']} sessions, "
              f"up {st['uptimeS']:.0f} s")
        return EXIT_CLEAN
    if ns.cmd == "hover":
        file, _, line = ns.where.rpartition(":")
        if not file or not line.isdigit():
            dc.warn(f"hover wants FILE:LINE, got {ns.where!r}")
            return EXIT_ERROR
        text = dc.hover_sync(doc, file, int(line))
        if not text:
            print(f"{ns.where}: no profile data for this line")
            return EXIT_FINDINGS
        print(text)
        return EXIT_CLEAN
    rows = dc.reports_sync(doc, ns.path)
    for r in rows:
        what = r.get("error") or f"{len(r.get('sources', []))} files"
        mark = "*" if r.get("newest") else " "
        print(f"{mark} {r['key'][:12]}  {r['path']}  {what}")
    return EXIT_CLEAN


def cmd_analyze(ns) -> int:
    workspace = [os.path.abspath(w) for w in (ns.workspace or ["."])]
    path_map = parse_path_map(ns.path_map)
    if len(ns.paths) > 1 or ns.cluster or any(os.path.isdir(p) for p in ns.paths):  # a multi-rank job
        from . import jobs

        return jobs.cmd_analyze_job(ns, workspace, path_map)
    if ns.no_daemon or os.environ.get("PROFD_NO_DAEMON"):
        reports = analyze_local(ns.paths, workspace, path_map, ns.disable)
    else:
        reports = analyze_daemon(ns, workspace, path_map)
    color = ns.color == "always" or (ns.color == "auto" and sys.stdout.isatty())
    emit(reports, ns.format, color, ns.hints, ns.modules)
    return exit_code(reports, ns.fail_on)


def main(argv: Optional[list[str]] = None) -> int:
    ns = _parser().parse_args(argv)
    try:
        if ns.cmd == "analyze":
            return cmd_analyze(ns)
        if ns.cmd == "modules":
            return cmd_modules(ns)
        if ns.cmd in ("diff", "annotate"):
            from . import jobs

            return jobs.run(ns)
        if ns.cmd in ("status", "hover", "reports"):
            return cmd_daemon(ns)
        if ns.cmd == "run":
            from . import workload

            return workload.run(ns)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_CLEAN
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
