"""What every profd-client subcommand shares: exit codes, the common options, the configuration they
resolve against, where output goes, analysing through the daemon or in-process, and printing
reports. The subcommand modules import this one, never ``main``, which imports them.

Exit codes as ruff: 0 clean (or nothing at/above --fail-on, or --exit-zero), 1 findings at/above
--fail-on, 2 bad input, a bad trace or bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Optional

from ..protocol import types as T
from ..protocol.options import path_map_item
from . import config
from . import format as fmt

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
TRACE_SUFFIXES = (".json", ".pt.trace.json", ".json.gz")
DEFAULT_FAIL_ON = "warning"

ENV_VARS = {
    "NO_COLOR": "any value: no colour (as --color never), unless --color always",
    "PROFD_NO_DAEMON": "1/true/yes: analyse in-process, as --no-daemon; 0/false/no/empty: as unset",
    "PROFD_STATE": "the daemon's state folder (default: the user cache dir, profd)",
    "PROFD_MAX_TRACE_BYTES": "largest trace, inflated, profd reads before refusing it (default: 16 GiB)",
    "PROFD_DOCS_URL": "base URL of the rule docs for links (default: the docs installed with profd)",
}
ENVIRONMENT = "environment:\n" + "\n".join(f"  {k:<21} {v}" for k, v in ENV_VARS.items())
DAEMON_ENV = ("NO_COLOR", "PROFD_STATE")

EXIT_GATE = """exit status: 0 no finding at or above --fail-on (or --exit-zero), 1 findings at or above
--fail-on, 2 bad usage, a file that is not a trace, no trace found, or an internal error."""
EXIT_PLAIN = """exit status: 0 done, 2 bad usage or input, or an internal error."""
EXIT_DAEMON = """exit status: 0 answered, 1 no daemon running (or, for hover, no data for the line),
2 bad usage, or an internal error."""


def epilog(exit_text: str = EXIT_PLAIN, env=True) -> str:
    """A subcommand's --help epilog: the environment variables that apply to it (``env``: all, or
    a tuple of names) and its own exit statuses."""
    if env is True:
        env = tuple(ENV_VARS)
    head = "environment:\n" + "\n".join(f"  {k:<21} {ENV_VARS[k]}" for k in env) + "\n\n" if env else ""
    return head + exit_text


def warn(msg: str) -> None:
    print(f"profd-client: {msg}", file=sys.stderr)


def verbose(ns, msg: str) -> None:
    if getattr(ns, "verbose", False):
        warn(msg)


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Help with the defaults shown and the description's line breaks kept."""

    def _get_help_string(self, action):
        h = action.help or ""
        if (
            "%(default)" not in h
            and action.default not in (None, False, [], argparse.SUPPRESS)
            and action.option_strings
            and action.nargs != 0
        ):
            h += " (default: %(default)s)"
        return h


# ---- the common options --------------------------------------------------------------------------


def output_options(
    p: argparse.ArgumentParser, formats=("text", "json"), statistics: bool = False, output_file: bool = True
) -> None:
    """``--format``, ``-o/--output-file``, ``-q/--quiet``, ``--color`` (and ``--statistics``): on every
    command that prints results (``annotate``'s ``-o`` is the annotated trace it writes)."""
    p.set_defaults(_formats=tuple(formats))
    g = p.add_argument_group("output")
    g.add_argument(
        "--format",
        "--output-format",
        dest="format",
        choices=list(formats),
        default=None,
        help=f"output format: {', '.join(formats)} (default: text)",
    )
    if output_file:
        g.add_argument(
            "-o",
            "--output-file",
            metavar="FILE",
            default=None,
            help="write the output to FILE instead of stdout",
        )
    g.add_argument(
        "-q", "--quiet", action="store_true", help="only the findings: no summaries, notes or progress"
    )
    g.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default=None,
        help="colour the text output (default: auto: when stdout is a terminal and NO_COLOR is unset)",
    )
    if statistics:
        g.add_argument(
            "--statistics",
            action="store_true",
            default=None,
            help="print the number of findings per rule (and those suppressed inline) instead of the findings",
        )
    g.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="say on stderr which configuration file is used, how each trace is analysed and how long it took",
    )
    g.add_argument(
        "--config",
        metavar="FILE|KEY=VALUE",
        action="append",
        default=None,
        help="read [tool.profd] from FILE (default: the nearest pyproject.toml with one, upwards from the "
        "current folder), or override one setting with a TOML pair, as ruff's: "
        "--config 'fail-on = \"error\"' (repeatable)",
    )
    g.add_argument("--isolated", action="store_true", help="ignore every configuration file")
    g.add_argument(
        "--show-settings",
        action="store_true",
        help="print the configuration file used and the settings in effect, and exit",
    )


def analysis_options(p: argparse.ArgumentParser, daemon: bool = True, gate: bool = True) -> None:
    """Where sources are, which rules run, and (``gate``) what fails the run."""
    g = p.add_argument_group("analysis")
    g.add_argument(
        "--workspace",
        action="append",
        default=None,
        metavar="DIR",
        help="where your sources live, to map the trace's frame paths onto (repeatable; default: .)",
    )
    g.add_argument(
        "--path-map",
        action="append",
        default=None,
        metavar="REMOTE=LOCAL",
        help="map a frame path prefix from the profiled machine onto a local folder (repeatable)",
    )
    g.add_argument(
        "--select",
        action="append",
        default=None,
        metavar="CODES",
        help="run only these rules: codes, families (kernels) or ALL, comma-separated (default: ALL)",
    )
    g.add_argument(
        "--extend-select",
        action="append",
        default=None,
        metavar="CODES",
        help="run these rules in addition to --select",
    )
    g.add_argument(
        "--ignore",
        action="append",
        default=None,
        metavar="CODES",
        help="do not run these rules (comma-separated codes or families)",
    )
    g.add_argument("--disable", action="append", default=None, metavar="CODES", help=argparse.SUPPRESS)
    g.add_argument("--hints", action="store_true", default=None, help="also print hint-level findings")
    if gate:
        g.add_argument(
            "--fail-on",
            choices=list(config.FAIL_ON),
            default=None,
            help=f"lowest severity that makes the exit status 1 (default: {DEFAULT_FAIL_ON})",
        )
        g.add_argument(
            "--exit-zero",
            action="store_true",
            help="exit 0 even when there are findings (2 still means bad input)",
        )
    if daemon:
        d = g.add_mutually_exclusive_group()
        d.add_argument(
            "--no-daemon",
            action="store_true",
            help="analyse in this process (default: through a running daemon; one is started only "
            "at a terminal, never in CI or a script)",
        )
        d.add_argument(
            "--daemon",
            action="store_true",
            help="go through the daemon, starting one if none runs (also in CI or a script)",
        )
        g.add_argument(
            "--state",
            metavar="DIR",
            default=None,
            help="the daemon's state folder (default: $PROFD_STATE or the user cache dir)",
        )


def resolve(ns) -> argparse.Namespace:
    """Fill the options a flag did not give from ``[tool.profd]`` and the defaults; validate them.
    Raises ``config.UsageError`` (exit 2)."""
    cfg = config.load(getattr(ns, "config", None), getattr(ns, "isolated", False))
    ns.config_path = cfg.path
    ns.per_file_ignores = cfg.get("per-file-ignores", {})
    if getattr(ns, "verbose", False):
        warn(
            f"configuration: {cfg.path}"
            if cfg.path
            else "configuration: none (defaults and flags only)"
            + (" (--isolated)" if getattr(ns, "isolated", False) else "")
        )

    def pick(attr, key, default):
        v = getattr(ns, attr, None)
        if v is None:
            v = cfg.get(key, default)
        setattr(ns, attr, v)

    formats = getattr(ns, "_formats", ("text",))
    if ns.format is None and cfg.get("format") not in formats:  # [tool.profd] format: where it applies
        ns.format = "text"
    pick("format", "format", "text")
    pick("color", "color", "auto")
    pick("output_file", "output-file", None)
    if hasattr(ns, "statistics"):
        pick("statistics", "statistics", False)
    if hasattr(ns, "select"):
        pick("hints", "hints", False)
        pick("workspace", "workspace", ["."])
        pick("path_map", "path-map", [])
        ns.workspace = [os.path.abspath(w) for w in ns.workspace]
        ns.path_map = parse_path_map(ns.path_map)
        sel = (
            config.split_codes(ns.select)
            if ns.select is not None
            else (config.split_codes(cfg.get("select")) if cfg.get("select") is not None else None)
        )
        ext = config.split_codes(cfg.get("extend-select", [])) + config.split_codes(ns.extend_select or [])
        ign = (
            config.split_codes(cfg.get("ignore", []))
            + config.split_codes(ns.ignore or [])
            + config.split_codes(ns.disable or [])
        )
        chosen = config.selection(sel, ext, ign)
        from ..protocol.catalog import RULES

        ns.disabled = set(RULES) - chosen
        ns.thresholds = cfg.get("rules", {})
    if hasattr(ns, "fail_on"):
        pick("fail_on", "fail-on", DEFAULT_FAIL_ON)
    return ns


def parse_path_map(items: list[str]) -> list[tuple[str, str]]:
    try:
        return [path_map_item(it) for it in items or []]
    except ValueError as e:
        raise config.UsageError(f"--{e}")


def engine_options(ns):
    from ..server.engine import Options

    opts = Options(
        workspace=ns.workspace,
        path_map=ns.path_map,
        disabled=set(ns.disabled),
        thresholds=dict(ns.thresholds or {}),
        library_lines=bool(getattr(ns, "library_lines", False)),
    )
    parts = getattr(ns, "parts", None)  # the report parts the command prints (every one unless said)
    if parts is not None:
        opts.parts = frozenset(parts)
    return opts


def env_flag(name: str) -> bool:
    """An on/off environment variable: 1/true/yes/on is on; unset, empty, 0/false/no/off is off."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def no_daemon(ns) -> bool:
    return bool(getattr(ns, "no_daemon", False) or env_flag("PROFD_NO_DAEMON"))


def interactive() -> bool:
    """A person at a terminal: stderr is a TTY and ``CI`` is not set (CI systems set it)."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty and not env_flag("CI")


# ---- where output goes -------------------------------------------------------------------------


class Output:
    """stdout or ``-o FILE``; colour only on a terminal (``--color``, ``NO_COLOR``)."""

    def __init__(self, ns):
        self.path = getattr(ns, "output_file", None)
        self.quiet = bool(getattr(ns, "quiet", False))
        self._f = None
        mode = getattr(ns, "color", "auto") or "auto"
        tty = self.path is None and sys.stdout.isatty()
        self.color = mode == "always" or (mode == "auto" and tty and not os.environ.get("NO_COLOR"))

    def _file(self):
        if self._f is None:
            if self.path is None:
                self._f = sys.stdout.buffer
            else:
                try:
                    self._f = open(self.path, "wb")
                except OSError as e:
                    raise config.UsageError(f"cannot write {self.path}: {e.strerror or e}")
        return self._f

    def write(self, data: str | bytes) -> None:
        self._file().write(data.encode() if isinstance(data, str) else data)

    def json(self, obj) -> None:
        import orjson  # here: a report's JSON is msgspec's (format.json_doc); orjson's import costs ~15 ms

        self.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")

    def close(self) -> None:
        if self._f is not None:
            self._f.flush()
            if self.path is not None:
                self._f.close()


# ---- traces: folders, progress, analysis ---------------------------------------------------------


def expand_paths(paths: list[str]) -> tuple[list[str], set[str]]:
    """Files as given; a folder stands for every trace under it (recursively: ``*.json``,
    ``*.pt.trace.json``, ``*.json.gz``; hidden ones skipped). Returns the files and those that
    came from a folder (a non-trace JSON there is skipped, not an error)."""
    out: list[str] = []
    found: set[str] = set()
    for p in paths:
        if os.path.isdir(p):
            # here, not at the top: the cluster module brings multiprocessing, which analysing
            # the files named on the command line does not need
            from ..server.daemon.cluster import trace_files

            got = trace_files(p)
            if not got:
                raise config.UsageError(
                    f"no trace files ({', '.join('*' + s for s in TRACE_SUFFIXES)}) under {p}"
                )
            out += got
            found.update(got)
        else:
            out.append(p)
    return out, found


def not_a_trace(r: T.Report) -> bool:
    return bool(r.error) and "not a torch.profiler trace" in r.error


def analyze_paths(ns, files: list[str], progress=None, summaries: Optional[list] = None) -> list[T.Report]:
    """One report per file, through the daemon (started if none runs) or in-process, with the
    options ``ns`` resolved to. ``summaries`` (when given) gets the rank summary of each trace that
    is a rank of a multi-process job, made from the same analysis as its report (by the daemon,
    when it analysed it)."""
    return per_file_ignores(ns, _analyze_paths(ns, files, progress, summaries))


def per_file_ignores(ns, reports: list[T.Report]) -> list[T.Report]:
    """``[tool.profd.per-file-ignores]``: drop the findings located in a file a glob matches (the
    glob against the absolute path, or a bare name's against the file name)."""
    import fnmatch

    pfi = getattr(ns, "per_file_ignores", None) or {}
    if not pfi:
        return reports
    from ..protocol.catalog import UnknownCode, expand_code

    def codes(cs):
        out = set()
        for c in cs:
            try:
                out |= expand_code(c, True)
            except UnknownCode:
                pass
        return out

    rules = [(pat, codes(cs)) for pat, cs in pfi.items()]
    out = []
    for r in reports:
        keep, dropped = [], 0
        for d in r.diagnostics:
            path = d.location.path or ""
            name = os.path.basename(path)
            if any(
                d.code in cs and (fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(name, pat))
                for pat, cs in rules
            ):
                dropped += 1
            else:
                keep.append(d)
        if dropped:
            verbose(ns, f"{r.trace.path}: {dropped} finding(s) dropped by per-file-ignores")
            import msgspec

            r = msgspec.structs.replace(r, diagnostics=keep)
        out.append(r)
    return out


def _analyze_paths(ns, files: list[str], progress=None, summaries: Optional[list] = None) -> list[T.Report]:
    progress = progress or (lambda path: None)
    opts = engine_options(ns)
    if no_daemon(ns):
        verbose(ns, "analysing in-process (--no-daemon)")
        return analyze_local(files, opts, progress, summaries)
    from . import daemon_client as dc

    def local(p, got: Optional[list]):
        return analyze_local([p], opts, summaries=got)[0]

    try:
        if getattr(ns, "daemon", False) or interactive():  # start one only when asked or at a terminal
            doc = dc.ensure_daemon(ns.state, ns.workspace, files, announce=not getattr(ns, "quiet", False))
        else:  # CI, a script, a pipe: use a daemon already running, never leave one behind
            doc = dc.find_daemon(ns.state)
            if doc is None:
                verbose(ns, "no daemon running and not at a terminal: analysing in-process")
                return analyze_local(files, opts, progress, summaries)
        verbose(ns, f"analysing through the daemon (pid {doc.get('pid')})")
        return dc.analyze_sync(doc, files, opts.wire(), local, progress, summaries)
    except (OSError, SystemExit, dc.RpcError, TimeoutError) as e:
        warn(f"daemon unavailable ({e}); analysing in-process")
        return analyze_local(files, opts, progress, summaries)


# Set to a list by the profd-client process (main.entry): the last in-process analysis's model is
# kept there to the process's end, which then exits without freeing it (~0.2 s of a 1 GB trace's
# objects, after its report is out). None (a caller of main() in-process, the tests): every
# model is freed as soon as its report is made.
KEEP_LAST: Optional[list] = None


def analyze_local(
    paths: list[str], opts, progress: Optional[Callable] = None, summaries: Optional[list] = None
) -> list[T.Report]:
    """Reports of ``paths`` in this process; ``summaries`` (when given) gets the rank summary of
    each that is a rank of a multi-process job, from the same run."""
    from ..server.engine import analyze_for_jobs, analyze_or_error, own_the_heap

    if KEEP_LAST is not None:  # the profd-client process: the engine's alone (one arena, trimmed)
        own_the_heap()
    out = []
    for p in paths:
        if progress:
            progress(p)
        if KEEP_LAST is not None:
            KEEP_LAST.clear()  # one model at a time, as without: the last one is kept
        if summaries is None:
            out.append(analyze_or_error(p, opts, hold=KEEP_LAST))
        else:
            rep, s = analyze_for_jobs(p, opts, hold=KEEP_LAST)
            out.append(rep)
            if s is not None:
                summaries.append(s)
    return out


def exit_code(ns, reports: list[T.Report], extra_diags=()) -> int:
    """2 for a bad trace; else 1 when a finding is at or above --fail-on (0 with --exit-zero)."""
    if any(r.error for r in reports):
        return EXIT_ERROR
    if getattr(ns, "exit_zero", False) or ns.fail_on == "never":
        return EXIT_CLEAN
    bar = T.SEVERITY_RANK[ns.fail_on]
    diags = [d for r in reports for d in r.diagnostics] + list(extra_diags)
    return EXIT_FINDINGS if any(T.SEVERITY_RANK[d.severity] >= bar for d in diags) else EXIT_CLEAN


def emit(out: Output, ns, reports: list[T.Report], jobs=()) -> None:
    """The reports (and job reports) in the chosen format, or their statistics."""
    for r in reports:
        if r.error:
            print(r.error, file=sys.stderr)
    if getattr(ns, "statistics", False):
        if ns.format not in ("text", "json"):
            raise config.UsageError(
                f"--statistics prints text or json, not {ns.format} "
                f"(--format {ns.format} without --statistics prints the findings)"
            )
        rows = fmt.statistics(reports, jobs, show_hints=ns.hints)
        if ns.format == "json":
            out.json(rows)
        else:
            out.write(fmt.statistics_text(rows))
        return
    if ns.format == "json":
        out.write(fmt.json_doc(reports, jobs) + b"\n")
    elif ns.format == "sarif":
        out.json(fmt.sarif(reports, jobs))
    elif ns.format in ("github", "junit"):
        from . import ci_formats

        out.write(
            getattr(ci_formats, ns.format)([r for r in reports if not r.error], jobs, show_hints=ns.hints)
        )
    else:
        ok = [r for r in reports if not r.error]
        if ok:
            out.write(
                fmt.text(
                    ok,
                    color=out.color,
                    show_hints=ns.hints,
                    quiet=out.quiet,
                    modules=bool(getattr(ns, "modules", False)),
                )
            )
        if jobs:
            out.write(("\n" if ok else "") + fmt.job_text(jobs, color=out.color))
        if not out.quiet and (ok or jobs):
            out.write(fmt.closing_line(ok, jobs, show_hints=ns.hints) + "\n")
