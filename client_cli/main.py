"""``profd-client``: prints the findings of torch.profiler traces like a linter. Thin: the engine or
the daemon does the work.

Every command that prints results takes the same output options (--format, -o/--output-file,
-q/--quiet, --color, --config, --isolated); those that analyse take the same analysis options
(--workspace, --path-map, --select/--extend-select/--ignore, --fail-on/--exit-zero, --no-daemon).
Flags win over [tool.profd] in pyproject.toml. Exit status as ruff: 0 no finding at or above
--fail-on, 1 findings at or above it, 2 bad usage or input, or an internal error.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Optional

from .. import __version__
from . import common
from .config import UsageError


def _parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """profd-client's parser: every subcommand, or only the group that holds ``command`` (start-up:
    building all of them costs more than a small trace's analysis, and imports the workload
    runner). The subcommands' own help, usage and errors are the same either way."""
    p = argparse.ArgumentParser(
        prog="profd-client",
        description=__doc__,
        formatter_class=common.Formatter,
        epilog=common.epilog(common.EXIT_GATE),
    )
    p.add_argument("--version", action="version", version=f"profd-client {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def cmd(name, help, description=None, exit_text=None, env=True):
        """A subcommand; its epilog says its own exit statuses (those with --fail-on: the gate's)."""
        x = sub.add_parser(
            name,
            help=help,
            description=description or help[:1].upper() + help[1:] + ".",
            formatter_class=common.Formatter,
        )
        x.set_defaults(_epilog=(exit_text, env))
        return x

    for names, add in _COMMANDS:
        if command is None or command in names:
            add(cmd)
    for name, x in sub.choices.items():  # epilogs, once every subcommand's options are known
        exit_text, env = x.get_default("_epilog") or (None, True)
        dests = {a.dest for a in x._actions}
        if env is True and "state" not in dests:  # no daemon involved: its variables do not apply
            env = tuple(k for k in common.ENV_VARS if k not in ("PROFD_NO_DAEMON", "PROFD_STATE"))
        x.epilog = common.epilog(
            exit_text or (common.EXIT_GATE if "fail_on" in dests else common.EXIT_PLAIN), env
        )
    return p


def _add_analyze(cmd) -> None:
    a = cmd(
        "analyze",
        "analyse trace files or folders of them and print the findings",
        "Analyse torch.profiler traces and print the findings on your source lines.\n\n"
        "PATH is a trace (*.json, *.pt.trace.json, *.json.gz) or a folder: every trace under it,\n"
        "recursively (a JSON file there that is not a trace is skipped and said). Traces that are\n"
        "ranks of one distributed job also get a job report.",
    )
    a.add_argument("paths", nargs="+", metavar="PATH", help="trace files or folders")
    common.output_options(a, ("text", "json", "sarif", "github", "junit"), statistics=True)
    common.analysis_options(a)
    j = a.add_argument_group("multi-rank jobs")
    j.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="a Dask scheduler (tcp://host:8786): summarise the "
        "rank traces there, reading them where they lie; prints only the job report",
    )
    j.add_argument(
        "--workers", type=int, metavar="N", help="local processes for --cluster-less job summaries"
    )
    a.add_argument(
        "--modules",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also print each trace's nn.Module tree (text output)",
    )
    a.add_argument(
        "--library-lines",
        action="store_true",
        help="also put module costs and findings on library lines (a module's forward in "
        "transformers, torchvision, ...) when that source is installed here (in-process)",
    )


def _add_modules(cmd) -> None:
    mo = cmd("modules", "the nn.Module tree of traces: GPU and CPU per module, hottest first")
    mo.add_argument("paths", nargs="+", metavar="PATH", help="trace files or folders")
    mo.add_argument("--depth", type=int, default=4, metavar="N", help="levels of the tree to print")
    common.output_options(mo, ("text", "json"))
    common.analysis_options(mo, gate=False)


def _add_jobs(cmd) -> None:
    from . import jobs

    jobs.add_subcommands(cmd)  # diff, annotate


def _add_workload(cmd) -> None:
    from . import workload

    workload.add_subcommands(cmd)  # run


def _add_record(cmd) -> None:
    from . import record

    record.add_subcommands(cmd)  # record -- COMMAND...


def _add_daemon_queries(cmd) -> None:
    s = cmd("status", "what the running daemon is doing", exit_text=common.EXIT_DAEMON, env=common.DAEMON_ENV)
    h = cmd(
        "hover",
        "the daemon's numbers for one source line",
        exit_text=common.EXIT_DAEMON,
        env=common.DAEMON_ENV,
    )
    h.add_argument(
        "where",
        metavar="FILE:LINE",
        help="a source file (relative to the current folder or a workspace root) and a 1-based line",
    )
    h.add_argument(
        "--workspace",
        action="append",
        default=None,
        metavar="DIR",
        help="where to look for FILE besides the current folder (default: the daemon's workspace)",
    )
    r = cmd(
        "reports",
        "the reports the daemon holds, with their verdicts and finding counts",
        exit_text=common.EXIT_DAEMON,
        env=common.DAEMON_ENV,
    )
    r.add_argument("path", nargs="?", metavar="PATH", help="only this trace or source file")
    for x in (s, h, r):
        common.output_options(x, ("text", "json"))
        x.add_argument(
            "--state",
            metavar="DIR",
            help="the daemon's state folder (default: $PROFD_STATE or the user cache dir)",
        )


def _add_rule(cmd) -> None:
    ru = cmd(
        "rule",
        "explain a rule: what it means, why it costs time, an example, the fix, when to ignore it",
        env=("NO_COLOR", "PROFD_DOCS_URL"),
    )
    ru.add_argument("code", nargs="?", metavar="CODE", help="a rule code (host-sync)")
    ru.add_argument("--all", action="store_true", help="every rule (with --format text: one line each)")
    common.output_options(ru, ("text", "json"))


# The subcommands in --help's order, by the groups that build them.
_COMMANDS = (
    (("analyze",), _add_analyze),
    (("modules",), _add_modules),
    (("diff", "annotate"), _add_jobs),
    (("run",), _add_workload),
    (("record",), _add_record),
    (("status", "hover", "reports"), _add_daemon_queries),
    (("rule",), _add_rule),
)


def _command(argv: Optional[list[str]]) -> Optional[str]:
    """The subcommand ``argv`` names first, when it is one (profd-client has no options of its own
    before the subcommand but --help and --version, which need the whole parser)."""
    args = sys.argv[1:] if argv is None else argv
    first = args[0] if args else None
    return first if any(first in names for names, _ in _COMMANDS) else None


def parse(p: argparse.ArgumentParser, argv: Optional[list[str]]) -> argparse.Namespace:
    """As ``parse_args``, but a flag a subcommand does not know prints that subcommand's usage."""
    ns, extra = p.parse_known_args(argv)
    if extra:
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices[ns.cmd].error(f"unrecognized arguments: {' '.join(extra)}")
    return ns


def show_settings(ns, out: common.Output) -> int:
    """``--show-settings``: the configuration file used and every setting in effect (as ruff's)."""
    skip = {"cmd", "show_settings", "_formats", "_epilog", "config", "disable"}
    vals = {k: (sorted(v) if isinstance(v, set) else v) for k, v in sorted(vars(ns).items()) if k not in skip}
    if "disabled" in vals:
        from ..protocol.catalog import RULES

        vals["rules"] = sorted(set(RULES) - set(ns.disabled))
        del vals["disabled"]
    if ns.format == "json":
        out.json({"configFile": ns.config_path, "settings": vals})
        return common.EXIT_CLEAN
    lines = [f"Settings path: {ns.config_path or 'none (no [tool.profd] found; defaults and flags only)'}"]
    for k, v in vals.items():
        if k == "config_path":
            continue
        lines.append(f"{k.replace('_', '-')} = {v!r}")
    out.write("\n".join(lines) + "\n")
    return common.EXIT_CLEAN


def cmd_daemon(ns, out: common.Output) -> int:
    """status | hover FILE:LINE | reports [PATH]."""
    from . import daemon_client as dc
    from . import format as fmt

    doc = dc.find_daemon(ns.state)
    if doc is None:  # as `profd status` and `profd stop`: 1 says none runs
        common.warn(
            "no daemon running (start one with `profd start --watch DIR`, or `profd-client analyze --daemon`)"
        )
        return common.EXIT_FINDINGS
    if ns.cmd == "status":
        st = dc.status_sync(doc)
        if ns.format == "json":
            out.json({**st, "host": doc["host"], "port": doc["port"]})
        else:
            out.write(fmt.status_text(st, doc))
        return common.EXIT_CLEAN
    if ns.cmd == "hover":
        file, _, line = ns.where.rpartition(":")
        if not file or not line.isdigit() or int(line) < 1:
            raise UsageError(f"hover wants FILE:LINE (a 1-based line), got {ns.where!r}")
        path = _find_source(file, ns.workspace or doc.get("workspace") or [])
        text = dc.hover_sync(doc, path, int(line))
        if ns.format == "json":
            out.json({"path": path, "line": int(line), "hover": text})
        else:
            out.write((text or f"{ns.where}: no profile data for this line") + "\n")
        return common.EXIT_CLEAN if text else common.EXIT_FINDINGS
    rows = dc.reports_sync(doc, ns.path)
    if ns.format == "json":
        out.json(rows)
    else:
        out.write(fmt.reports_text(rows))
    return common.EXIT_CLEAN


def _find_source(file: str, roots: list[str]) -> str:
    """FILE as given (absolute or relative to the current folder), else under a workspace root."""
    if os.path.isabs(file) or os.path.exists(file):
        return os.path.abspath(file)
    for r in roots:
        cand = os.path.join(r, file)
        if os.path.exists(cand):
            return os.path.abspath(cand)
    where = " or under " + ", ".join(roots) if roots else ""
    raise UsageError(f"hover: no file {file} here{where}")


def cmd_rule(ns, out: common.Output) -> int:
    from ..protocol.catalog import RULES
    from ..server.engine import rule_doc

    from .config import check_code

    if ns.all or not ns.code:
        docs = [rule_doc(c) for c in RULES]
        if ns.format == "json":
            out.json([d.as_dict() for d in docs])
        else:
            w = max(len(c) for c in RULES)
            out.write("".join(f"{d.code:<{w}}  {RULES[d.code].severity:<11}  {d.title}\n" for d in docs))
        return common.EXIT_CLEAN
    (code,) = check_code(ns.code, "rule", families=False)
    d = rule_doc(code)
    out.write(orjson_dump(d.as_dict()) if ns.format == "json" else d.text())
    return common.EXIT_CLEAN


def orjson_dump(obj) -> bytes:
    import orjson

    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"


def cmd_modules(ns, out: common.Output) -> int:
    """profd-client modules TRACE...: the module trees (the JSON is each report's ``modules``)."""
    import msgspec

    from . import format as fmt

    files, _ = common.expand_paths(ns.paths)
    reports = common.analyze_paths(ns, files)
    for r in reports:
        if r.error:
            print(r.error, file=sys.stderr)
    good = [r for r in reports if not r.error]
    if ns.format == "json":
        out.write(
            msgspec.json.encode({"modules": [{"path": r.trace.path, "tree": r.modules} for r in good]})
            + b"\n"
        )
    elif good:
        out.write(fmt.modules_text(good, ns.depth))
    return common.EXIT_ERROR if len(good) < len(reports) else common.EXIT_CLEAN


def cmd_analyze(ns, out: common.Output) -> int:
    from .progress import Progress

    if ns.cluster:
        from . import jobs

        return jobs.analyze_cluster(ns, out)
    files, from_folder = common.expand_paths(ns.paths)
    bar = Progress(files, enabled=None if not ns.quiet else False)
    summaries: Optional[list] = [] if len(files) > 1 else None  # each rank's, from its report's analysis
    ns.parts = _parts_printed(ns, several=summaries is not None)
    try:
        reports = common.analyze_paths(ns, files, bar, summaries)
    finally:
        bar.close()
    skipped = [r for r in reports if r.trace.path in from_folder and common.not_a_trace(r)]
    if skipped and not ns.quiet:
        common.warn(
            f"skipped {len(skipped)} JSON file(s) that are not traces: "
            + ", ".join(os.path.relpath(r.trace.path) for r in skipped[:5])
            + (" …" if len(skipped) > 5 else "")
        )
    reports = [r for r in reports if r not in skipped]
    if not reports:
        raise UsageError("no traces among " + ", ".join(ns.paths))
    from ..server.engine import group_jobs, reduce_job

    jobs_ = [reduce_job(g) for g in group_jobs(summaries or ())]  # ranks only: no file that is not a trace
    common.emit(out, ns, reports, jobs_)
    return common.exit_code(ns, reports, [d for j in jobs_ for d in j.diagnostics])


def _parts_printed(ns, several: bool) -> set[str]:
    """The report parts (engine ``PARTS``) that ``analyze`` prints in its format: every one in the
    JSON report, the module tree with ``--modules``, the hot lines for the job report of several
    ranks (each rank's summary names its hottest lines); the rest print the summary and findings
    alone, so the analysis makes no more (a daemon makes every part regardless)."""
    if ns.format == "json" and not getattr(ns, "statistics", False):
        return {"hot_lines", "modules"}
    return ({"modules"} if ns.format == "text" and ns.modules else set()) | (
        {"hot_lines"} if several else set()
    )


def main(argv: Optional[list[str]] = None) -> int:
    ns = parse(_parser(_command(argv)), argv)
    out = None
    try:
        common.resolve(ns)
        out = common.Output(ns)
        if getattr(ns, "show_settings", False):
            return show_settings(ns, out)
        if ns.cmd == "analyze":
            return cmd_analyze(ns, out)
        if ns.cmd in ("diff", "annotate"):
            from . import jobs

            return jobs.run(ns, out)
        if ns.cmd in ("status", "hover", "reports"):
            return cmd_daemon(ns, out)
        if ns.cmd == "rule":
            return cmd_rule(ns, out)
        if ns.cmd == "modules":
            return cmd_modules(ns, out)
        if ns.cmd == "run":
            from . import workload

            return workload.run(ns, out)
        if ns.cmd == "record":
            from . import record

            return record.run(ns, out)
    except UsageError as e:
        print(f"profd-client: error: {e}", file=sys.stderr)
        return common.EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return common.EXIT_CLEAN
    except Exception:  # a bug: exit 2 with one line and the traceback in a log, never a finding's 1
        from ..server.daemon.cli import internal_error

        return internal_error("profd-client", getattr(ns, "state", None))
    finally:
        if out is not None:
            try:
                out.close()
            except BrokenPipeError:
                pass
    return common.EXIT_ERROR


def entry() -> int:
    """The ``profd-client`` process: :func:`main`, then every object it made frozen out of the
    cyclic GC. The interpreter's exit would otherwise collect them all (modules, the report): a
    fifth of a small trace's whole run, for memory the process is about to give back anyway. After
    an in-process analysis the process ends at once once its output is flushed (as mypy's does):
    freeing the last trace's model and the modules took ~0.2 s after a 1 GB trace's report."""
    common.KEEP_LAST = []
    rc = main()
    gc.freeze()
    if common.KEEP_LAST and "distributed" not in sys.modules:  # (a cluster client closes itself)
        _exit_now(rc)
    return rc


def _exit_now(rc: int) -> None:
    """``os._exit(rc)`` once stdout, stderr and the logs are flushed; a flush that fails (a
    closed pipe) returns, and the interpreter's own exit says so as it always has."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(entry())
