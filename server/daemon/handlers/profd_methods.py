"""The custom ``profd/`` requests: analyze, analyzeRank, reports, report, status, runWorkload."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from pygls.lsp.server import LanguageServer

from ....protocol import methods as M
from ....protocol import types as T
from ..core import PathError
from ..settings import plain
from .common import RpcError, Session, convert

log = logging.getLogger("profd.lsp")

WORKLOAD_TIMEOUT_S = 600.0


async def analyze_path(session: Session, path: Any, extra: Any = None, rank: bool = False):
    """profd/analyze (``rank``: profd/analyzeRank) of ``path`` with the request's own options
    ``extra``, as JSON builtins."""
    params = convert({"path": path, **(extra or {})}, M.AnalyzeParams)
    core = session.core
    try:
        got = await (core.analyze_rank(params) if rank else core.analyze(params))
    except PathError as e:
        log.warning("%s (client %s)", e, session.peer)
        raise RpcError(e.code, str(e))
    return T.to_builtins(got)


async def analyze(session: Session, ls: LanguageServer, params: Any, rank: bool = False):
    raw = plain(params)
    p = convert(raw, M.AnalyzeParams)
    extra = {k: v for k, v in raw.items() if k != "path"} if isinstance(raw, dict) else {}
    return await analyze_path(session, p.path, extra, rank)


async def analyze_rank(session: Session, ls: LanguageServer, params: Any):
    return await analyze(session, ls, params, rank=True)


def reports(session: Session, ls: LanguageServer, params: Any):
    p = convert(params, M.ReportsParams)
    return T.to_builtins(M.ReportsResult(reports=session.core.index.entries(p.path)))


async def report(session: Session, ls: LanguageServer, params: Any):
    core = session.core
    p = convert(params, M.ReportParams)
    key = p.key or (core.index.key_of_trace(p.path) if p.path else None)
    if p.path and key is None:
        key = core.index.key_of_trace(await core.io(os.path.realpath, p.path))
    r = (
        (core.index.report_at(key, p.path) if p.path else core.index.report(key))
        if key and key in core.index
        else None
    )
    return T.to_builtins(r) if r is not None else None


def status(session: Session, ls: LanguageServer, params: Any):
    return T.to_builtins(session.core.status())


def workload_task(spec, watch: str):
    """(in a thread) Run the built-in workload ``spec``; its trace and table go into ``watch``."""
    from ...workloads import runner

    return runner.run_workload(spec, watch, timeout=WORKLOAD_TIMEOUT_S)


async def run_workload(session: Session, ls: LanguageServer, params: Any):
    """Run a built-in workload (validated; never code from the request) in a subprocess,
    write its trace and table into the watched folder, and answer with the analysis."""
    from ...workloads import runner

    core = session.core
    raw = plain(params)
    if not isinstance(raw, dict):
        raise RpcError(-32602, "profd/runWorkload wants {workload, params}")
    if not core.cfg.watch:
        raise RpcError(-32602, "this daemon watches no folder to write the trace into")
    try:
        spec = runner.WorkloadSpec.parse(raw)
    except runner.WorkloadError as e:
        raise RpcError(-32602, f"profd: workload: {e}")
    token = f"profd-run-{os.getpid()}-{id(spec)}"
    session.progress(token, f"profd: running {spec.label()}")
    try:
        res = await asyncio.get_running_loop().run_in_executor(None, workload_task, spec, core.cfg.watch)
    except runner.WorkloadError as e:
        session.log_error(f"profd: workload {spec.label()} failed: {e}")
        raise RpcError(-32003, f"profd: workload {spec.label()} failed: {e}")
    finally:
        session.progress(token, None)
    report = await core.analyze(M.AnalyzeParams(path=res.trace_path))
    return {
        "trace": res.trace_path,
        "table": res.table_path,
        "wallS": round(res.wall_s, 3),
        "report": T.to_builtins(report),
    }
