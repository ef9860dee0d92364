"""Talking to the profd daemon through its own client (``server/daemon/rpc.py``).

``find_daemon`` reads STATE/daemon.json; ``ensure_daemon`` starts one when none runs (as
``dmypy run`` does); the ``*_sync`` helpers are what ``profd-client`` calls.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Optional


from ..protocol import methods as M
from ..protocol import types as T
from ..protocol.options import AnalysisOptions
from ..server.daemon.rpc import DaemonClient, RpcError, analyze, analyze_rank, status_sync, with_client  # noqa: F401 (status_sync: for main)


# ---- finding / starting the daemon --------------------------------------------------------------
def state_dir(state: Optional[str] = None) -> str:
    from ..server.daemon.cli import default_state

    return os.path.abspath(state or default_state())


def find_daemon(state: Optional[str] = None) -> Optional[dict]:
    from ..server.daemon.cli import running

    return running(state_dir(state))


IDLE_EXIT_S = 1800


def ensure_daemon(
    state: Optional[str], workspace: list[str], paths: list[str], announce: bool = True
) -> dict:
    """The running daemon, or a new one allowed to read the workspace, the cwd and ``paths``
    (said on stderr: it stays until it has been idle for 30 minutes)."""
    doc = find_daemon(state)
    if doc:
        return doc
    from ..server.daemon.cli import start_daemon

    opts = ["--tcp", "127.0.0.1:0", "--idle-exit", str(IDLE_EXIT_S)]  # an auto-started daemon goes away
    allow = {os.getcwd(), *workspace, *(os.path.dirname(os.path.abspath(p)) for p in paths)}
    for w in workspace:
        opts += ["--workspace", w]
    for a in sorted(allow):
        opts += ["--allow", a]
    doc = start_daemon(opts, state_dir(state))
    if announce:
        warn(
            f"started a daemon for later runs (pid {doc['pid']}, state {state_dir(state)}); it exits "
            f"after {IDLE_EXIT_S // 60} idle minutes, or now with `profd stop`; --no-daemon analyses in-process"
        )
    return doc


def _relabel(rep: T.Report, typed: str) -> T.Report:
    from ..server.daemon.index import relabel

    return relabel(rep, typed)


def analyze_sync(
    doc: dict,
    paths: list[str],
    options: AnalysisOptions,
    fallback,
    progress=None,
    summaries: Optional[list] = None,
) -> list[T.Report]:
    """Reports for ``paths`` from the daemon, analysed with ``options``, in order; a path it
    refuses goes to ``fallback(path, summaries)``. ``summaries`` (when given) gets the rank
    summary of each trace that is a rank of a multi-process job, made by the daemon from the same
    analysis as its report: nothing the daemon returned is analysed here again."""

    async def go(c: DaemonClient):
        out = []
        for p in paths:
            if progress:
                progress(p)
            out.append(await (analyze(c, p, options) if summaries is None else analyze_rank(c, p, options)))
        return out

    answers = asyncio.run(with_client(doc, go))  # all or nothing: a failure here analyses in-process
    reports = []
    for p, got in zip(paths, answers):
        if got is None:
            reports.append(fallback(p, summaries))
        elif isinstance(got, M.RankAnalysis):
            reports.append(_relabel(got.report, p))
            if got.summary is not None and summaries is not None:
                got.summary.path = got.report.trace.path
                summaries.append(got.summary)
        else:
            reports.append(_relabel(got, p))
    return reports


def reports_sync(doc: dict, path: Optional[str] = None) -> list[dict]:
    """The daemon's reports, each with its ``report`` (verdict, findings) beside the entry."""

    async def go(c: DaemonClient):
        res = await c.request(M.REPORTS, {"path": os.path.abspath(path) if path else None}, timeout=30)
        rows = res["reports"]
        for r in rows:
            r["report"] = None if r.get("error") else await c.request(M.REPORT, {"key": r["key"]}, timeout=30)
        return rows

    return asyncio.run(with_client(doc, go))


def hover_sync(doc: dict, file: str, line: int) -> Optional[str]:
    uri = "file://" + os.path.abspath(file)

    async def go(c: DaemonClient):
        return await c.request(
            "textDocument/hover",
            {"textDocument": {"uri": uri}, "position": {"line": line - 1, "character": 0}},
            timeout=30,
        )

    res = asyncio.run(with_client(doc, go))
    if not res:
        return None
    contents = res.get("contents")
    return contents.get("value") if isinstance(contents, dict) else str(contents)


def warn(msg: str) -> None:
    print(f"profd-client: {msg}", file=sys.stderr)
