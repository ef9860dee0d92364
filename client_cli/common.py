"""What every profd-client subcommand shares: exit codes, option parsing helpers, analysing through
the daemon or in-process, and printing reports. The subcommand modules import this one, never
``main``, which imports them.

Exit codes as ruff: 0 clean (or below --fail-on), 1 findings at/above --fail-on, 2 bad input/usage.
"""
from __future__ import annotations

import os
import sys

import orjson

from ..protocol import types as T
from . import format as fmt

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def parse_path_map(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for it in items or []:
        if "=" not in it:
            raise SystemExit(f"profd-client: --path-map wants REMOTE=LOCAL, got {it!r}")
        r, l = it.split("=", 1)
        out.append((r, os.path.abspath(l)))
    return out


def analyze_local(paths: list[str], workspace: list[str], path_map, disabled=()) -> list[T.Report]:
    from ..server.engine import Options, analyze_or_error

    opts = Options(workspace=workspace, path_map=path_map, disabled=set(disabled))
    return [analyze_or_error(p, opts) for p in paths]


def analyze_daemon(ns, workspace, path_map) -> list[T.Report]:
    """Through the running daemon (started if none runs); in-process if it cannot be reached."""
    from . import daemon_client as dc

    def local(p):
        return analyze_local([p], workspace, path_map, ns.disable)[0]

    try:
        doc = dc.ensure_daemon(ns.state, workspace, ns.paths)
        return dc.analyze_sync(doc, ns.paths, workspace, path_map, set(ns.disable), local)
    except (OSError, SystemExit, dc.RpcError, TimeoutError) as e:
        dc.warn(f"daemon unavailable ({e}); analysing in-process")
        return analyze_local(ns.paths, workspace, path_map, ns.disable)


def exit_code(reports: list[T.Report], fail_on: str) -> int:
    if any(r.error for r in reports):
        return EXIT_ERROR
    if fail_on == "never":
        return EXIT_CLEAN
    bar = T.SEVERITY_RANK[fail_on]
    hit = any(T.SEVERITY_RANK[d.severity] >= bar for r in reports for d in r.diagnostics)
    return EXIT_FINDINGS if hit else EXIT_CLEAN


def emit(reports: list[T.Report], form: str, color: bool, hints: bool, modules: bool = False) -> None:
    if form == "json":
        sys.stdout.buffer.write(fmt.json_doc(reports) + b"\n")
    elif form == "sarif":
        sys.stdout.buffer.write(orjson.dumps(fmt.sarif(reports), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        for r in reports:
            if r.error:
                print(r.error, file=sys.stderr)
        sys.stdout.write(fmt.text([r for r in reports if not r.error], color=color, show_hints=hints,
                                  modules=modules)
                         if any(not r.error for r in reports) else "")
    sys.stdout.flush()
