"""``profd.record`` in the editor: a code lens "Profile with profd" above a script's
``if __name__ == "__main__":`` and the command it runs (``[path, {args, step, warmup, timed, steps,
then, memory, timeout, python}]``): the script is recorded through the daemon with
``profd.server.workloads.record`` (the same as ``profd-client record``), with ``$/progress`` that
the editor can cancel, and its findings land as diagnostics when the trace is analysed.

Running a program is offered only to the editor's own session (stdio), or over TCP to a daemon
started with ``--allow-record``; the script must lie in the workspace, and runs from the
workspace folder that holds it. The trace goes into the watched folder, else
``<workspace>/profd-traces``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import shutil
import sys
import threading
from typing import Any, Optional

from lsprotocol import types as L
from pygls.lsp.server import LanguageServer

from ...protocol import methods as M
from ..workloads import record as R
from .sources import SOURCES

log = logging.getLogger("profd.lsp")
MAIN_RE = re.compile(r"""^if\s+__name__\s*==\s*(['"])__main__\1\s*:""")
TIMEOUT_S = 600.0
_ids = itertools.count(1)


def allowed(session) -> bool:
    return session.core.transport == "stdio" or bool(getattr(session.core.cfg, "allow_record", False))


def roots(session) -> list[str]:
    out: dict[str, None] = {}
    for r in list(session.core.cfg.workspace) + list(session.folders):
        out[os.path.realpath(r)] = None
    return list(out)


def root_of(session, path: str) -> Optional[str]:
    """The workspace folder holding ``path`` (after resolving links), or None."""
    real = os.path.realpath(path)
    best = None
    for r in roots(session):
        if real == r or real.startswith(r.rstrip(os.sep) + os.sep):
            best = r if best is None or len(r) > len(best) else best
    return best


def lenses(session, source: str) -> list[L.CodeLens]:
    """A "Profile with profd" lens on each ``if __name__ == "__main__":`` of a workspace script."""
    if not source.endswith(".py") or not allowed(session) or root_of(session, source) is None:
        return []
    out = []
    for i, text in enumerate(SOURCES.lines(source)):
        if MAIN_RE.match(text):
            out.append(
                L.CodeLens(
                    range=L.Range(L.Position(i, 0), L.Position(i, 0)),
                    command=L.Command(title="Profile with profd", command=M.CMD_RECORD, arguments=[source]),
                )
            )
    return out


def interpreter(root: str) -> str:
    """The workspace's interpreter: its .venv/venv, the active venv, python3 on PATH, this one."""
    for cand in (
        os.path.join(root, ".venv", "bin", "python"),
        os.path.join(root, "venv", "bin", "python"),
        os.path.join(os.environ.get("VIRTUAL_ENV", ""), "bin", "python")
        if os.environ.get("VIRTUAL_ENV")
        else "",
    ):
        if cand and os.path.isfile(cand):
            return cand
    return shutil.which("python3") or sys.executable


def options_of(raw: Any) -> tuple[list[str], R.RecordOptions, Optional[str]]:
    """(script arguments, recording options, interpreter) from the command's second argument."""
    raw = raw or {}
    if not isinstance(raw, dict):
        raise R.RecordError("usage", "profd.record wants [path, {args, step, warmup, timed, steps, ...}]")
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise R.RecordError("usage", "profd.record: args must be a list of strings")
    known = {"step", "warmup", "timed", "steps", "then", "memory", "window", "timeout"}
    unknown = set(raw) - known - {"args", "python"}
    if unknown:
        raise R.RecordError("usage", f"profd.record: unknown option(s) {', '.join(sorted(unknown))}")
    kw = {("window_s" if k == "window" else k): v for k, v in raw.items() if k in known}
    kw["timeout"] = min(float(kw.get("timeout", TIMEOUT_S)), TIMEOUT_S)
    try:
        opts = R.RecordOptions(**kw).check()
    except TypeError as e:
        raise R.RecordError("usage", f"profd.record: {e}")
    py = raw.get("python")
    if py is not None and not isinstance(py, str):
        raise R.RecordError("usage", "profd.record: python must be a path")
    return args, opts, py


def register(ls, session, rpc_error) -> None:
    core = session.core

    @ls.command(M.CMD_RECORD)
    async def cmd_record(ls_: LanguageServer, *args):
        if len(args) == 1 and isinstance(args[0], list):
            args = tuple(args[0])
        if not allowed(session):
            raise rpc_error(
                -32600,
                "profd.record runs programs only for the editor's own (stdio) session; "
                "start the daemon with --allow-record to offer it over TCP",
            )
        path = args[0] if args else None
        if not isinstance(path, str) or not path:
            raise rpc_error(-32602, "profd.record wants [path to a Python script, {options}]")
        root = root_of(session, path)
        if root is None:
            raise rpc_error(
                M.ERR_FORBIDDEN_PATH,
                f"profd.record: {path} is outside the workspace ({', '.join(roots(session)) or 'none'})",
            )
        try:
            argv, opts, py = options_of(args[1] if len(args) > 1 else None)
        except R.RecordError as e:
            raise rpc_error(-32602, str(e))
        script = os.path.realpath(path)
        command = [py or interpreter(root), script, *argv]
        out_dir = core.cfg.watch or os.path.join(root, "profd-traces")
        loop = asyncio.get_running_loop()
        cancel = threading.Event()
        token = f"profd-record-{os.getpid()}-{next(_ids)}"
        wdp = ls_.work_done_progress
        shown = session.ready and session.can_progress

        def begin(*a):
            wdp.begin(
                token,
                L.WorkDoneProgressBegin(
                    title=f"profd: recording {os.path.basename(script)}", cancellable=True, percentage=0
                ),
            )
            fut = wdp.tokens.get(token)
            if fut is not None:
                fut.add_done_callback(lambda f: f.cancelled() and cancel.set())

        if shown:
            wdp.create(token, callback=begin)

        def report(msg: str, pct: Optional[float]) -> None:
            if shown and token in wdp.tokens:
                wdp.report(
                    token,
                    L.WorkDoneProgressReport(message=msg, percentage=int(pct) if pct is not None else None),
                )

        def progress(msg, pct):
            loop.call_soon_threadsafe(report, msg, pct)

        try:
            res = await loop.run_in_executor(
                None, lambda: R.record(command, opts, out_dir, cwd=root, progress=progress, cancel=cancel)
            )
        except asyncio.CancelledError:
            cancel.set()
            raise
        except R.RecordError as e:
            session.log_error(f"profd: recording {script} failed: {e}\n{e.log_tail}")
            if e.kind != "cancelled":
                session.tell(L.MessageType.Error, f"profd: recording {os.path.basename(script)} failed: {e}")
            raise rpc_error(-32800 if e.kind == "cancelled" else -32003, f"profd: record: {e}")
        finally:
            if shown and token in wdp.tokens:
                wdp.end(token, L.WorkDoneProgressEnd(message="done"))
        reports = [await core.analyze(M.AnalyzeParams(path=t)) for t in res.traces]
        facts = R.record_doc(res, reports)
        n = sum(len(r.diagnostics) for r in reports)
        unp = f"{res.unprofiled_us / 1000:.2f} ms" if res.unprofiled_us else "not measured"
        session.tell(
            L.MessageType.Info,
            f"profd: recorded {os.path.basename(script)} ({res.rule_desc}): "
            f"{n} findings; step time unprofiled {unp}; trace {', '.join(res.traces)}",
        )
        return {**facts, "findings": n, "errors": [r.error for r in reports if r.error]}
