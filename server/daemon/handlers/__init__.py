"""The LSP handlers, one module per feature, and the table that registers them for a session.

Every handler is called on the event loop (it reads the report index and the session's buffers,
which belong to the loop) as ``handler(session, ls, params)`` (a command: ``(session, ls, *args)``).
``runs`` says where its work happens: ``LOOP``, all of it, from memory (source text is read by the
source cache's own thread, ``SOURCES.warm``, before the handler looks at it); ``THREAD``, the
handler awaits ``work`` in a thread; ``PROCESS``, it awaits ``work`` in an analysis process
(``pool.WorkerPool``: under the analysis budgets, and picklable by name). The recorder's command
(``profd.record``) registers itself (record_lsp).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional

from lsprotocol import types as L
from pygls.lsp.server import LanguageServer

from ....protocol import methods as M
from .. import record_lsp
from . import (
    code_actions,
    code_lens,
    commands,
    diagnostics,
    documents,
    hover,
    inlay_hints,
    profd_methods,
    workspace,
)
from .common import RpcError, Session

LOOP, THREAD, PROCESS = "loop", "thread", "process"


@dataclass(frozen=True)
class Handler:
    method: str
    handler: Callable
    options: Any = None  # the feature's registration options (pygls announces them)
    command: bool = False  # a workspace/executeCommand command, not a method
    runs: str = LOOP
    work: Optional[Callable] = None  # what runs off the loop (THREAD, PROCESS)


HANDLERS = [
    # the session's lifecycle and options
    Handler(L.INITIALIZE, workspace.initialize),
    Handler(L.INITIALIZED, workspace.initialized),
    Handler(L.WORKSPACE_DID_CHANGE_CONFIGURATION, workspace.did_change_configuration),
    Handler(L.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, workspace.did_change_folders),
    Handler(L.SHUTDOWN, workspace.shutdown),
    # documents
    Handler(L.TEXT_DOCUMENT_DID_OPEN, documents.did_open),
    Handler(L.TEXT_DOCUMENT_DID_CHANGE, documents.did_change),
    Handler(L.TEXT_DOCUMENT_DID_CLOSE, documents.did_close),
    Handler(L.TEXT_DOCUMENT_DID_SAVE, documents.did_save),
    # findings, costs and fixes
    Handler(L.TEXT_DOCUMENT_DIAGNOSTIC, diagnostics.pull_diagnostics, diagnostics.OPTIONS),
    Handler(L.WORKSPACE_DIAGNOSTIC, diagnostics.workspace_diagnostics),
    Handler(L.TEXT_DOCUMENT_HOVER, hover.hover),
    Handler(L.TEXT_DOCUMENT_INLAY_HINT, inlay_hints.inlay_hints, inlay_hints.OPTIONS),
    Handler(L.TEXT_DOCUMENT_CODE_LENS, code_lens.code_lens, code_lens.OPTIONS),
    Handler(
        L.TEXT_DOCUMENT_CODE_ACTION,
        code_actions.code_action,
        code_actions.OPTIONS,
        runs=THREAD,
        work=code_actions.edits_task,
    ),
    # commands
    Handler(M.CMD_SHOW, commands.show, command=True),
    Handler(M.CMD_ANNOTATE, commands.annotate, command=True, runs=PROCESS, work=commands.annotate_task),
    Handler(M.CMD_ANALYZE, commands.analyze, command=True),  # the analysis: core's worker pool
    # the profd/ methods
    Handler(M.ANALYZE, profd_methods.analyze),  # the analysis: core's worker pool
    Handler(M.ANALYZE_RANK, profd_methods.analyze_rank),  # the same, with the rank summary made beside it
    Handler(M.REPORTS, profd_methods.reports),
    Handler(M.REPORT, profd_methods.report),
    Handler(M.STATUS, profd_methods.status),
    Handler(M.RUN_WORKLOAD, profd_methods.run_workload, runs=THREAD, work=profd_methods.workload_task),
]


def _bind(fn: Callable, session: Session) -> Callable:
    """``fn`` with the session given: pygls passes the server as the first argument when that
    is named ``ls``, and awaits a coroutine function (a plain one is called at once)."""
    bound = _bind_async(fn, session) if inspect.iscoroutinefunction(fn) else _bind_sync(fn, session)
    bound.__name__, bound.__doc__ = fn.__name__, fn.__doc__
    return bound


def _bind_async(fn: Callable, session: Session) -> Callable:
    async def bound(ls, *args):
        return await fn(session, ls, *args)

    return bound


def _bind_sync(fn: Callable, session: Session) -> Callable:
    def bound(ls, *args):
        return fn(session, ls, *args)

    return bound


def register(ls: LanguageServer, session: Session) -> None:
    """Every handler of the table (and the recorder's) on ``ls``, for ``session``."""
    for h in HANDLERS:
        fn = _bind(h.handler, session)
        if h.command:
            ls.command(h.method)(fn)
        else:
            ls.feature(h.method, h.options)(fn)
    record_lsp.register(ls, session, RpcError)  # profd.record
