"""Talking to the profd daemon: a small asyncio JSON-RPC/LSP client over TCP (no pygls needed).

``find_daemon`` reads STATE/daemon.json; ``ensure_daemon`` starts one when none runs (as
``dmypy run`` does); the ``*_sync`` helpers are what ``profd-client`` calls.
"""
from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, Optional

import orjson

from ..protocol import methods as M
from ..protocol import types as T


class RpcError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message


class DaemonClient:
    def __init__(self):
        self.reader: Optional[asyncio.StreamReader] = None
        self.writer: Optional[asyncio.StreamWriter] = None
        self._next = 0
        self._waiting: dict[int, asyncio.Future] = {}
        self._task: Optional[asyncio.Task] = None
        self.notifications: list[dict] = []

    async def connect(self, host: str, port: int, token: Optional[str], timeout: float = 10.0,
                      root: Optional[str] = None) -> dict:
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=1 << 26), timeout)
        self._task = asyncio.ensure_future(self._read_loop())
        root = root or os.getcwd()
        res = await self.request("initialize", {
            "processId": os.getpid(), "rootUri": "file://" + root, "capabilities": {},
            "clientInfo": {"name": "profd-client"},
            "initializationOptions": {"token": token} if token is not None else {}}, timeout)
        await self.notify("initialized", {})
        return res

    def _send(self, obj: dict) -> None:
        body = orjson.dumps(obj)
        self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def request(self, method: str, params: Any = None, timeout: float = 600.0) -> Any:
        self._next += 1
        mid = self._next
        fut = asyncio.get_running_loop().create_future()
        self._waiting[mid] = fut
        self._send({"jsonrpc": "2.0", "id": mid, "method": method, "params": params})
        await self.writer.drain()
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._waiting.pop(mid, None)

    async def notify(self, method: str, params: Any = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})
        await self.writer.drain()

    async def _read_loop(self) -> None:
        try:
            while True:
                length = None
                while True:
                    line = await self.reader.readline()
                    if not line:
                        raise ConnectionError("the daemon closed the connection")
                    if line in (b"\r\n", b"\n") and length is not None:
                        break
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                msg = orjson.loads(await self.reader.readexactly(length))
                if "method" in msg and "id" in msg:  # a server->client request: accept it
                    self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                elif "method" in msg:
                    self.notifications.append(msg)
                else:
                    fut = self._waiting.get(msg.get("id"))
                    if fut and not fut.done():
                        if "error" in msg:
                            e = msg["error"] or {}
                            fut.set_exception(RpcError(e.get("code", 0), e.get("message", "")))
                        else:
                            fut.set_result(msg.get("result"))
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(str(e)))
        except asyncio.CancelledError:
            pass

    async def close(self) -> None:
        try:
            await self.request("shutdown", None, timeout=5)
            await self.notify("exit", None)
        except Exception:
            pass
        if self._task:
            self._task.cancel()
        if self.writer:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except Exception:
                pass


# ---- finding / starting the daemon --------------------------------------------------------------
def state_dir(state: Optional[str] = None) -> str:
    from ..server.cli import default_state
    return os.path.abspath(state or default_state())


def find_daemon(state: Optional[str] = None) -> Optional[dict]:
    from ..server.cli import running
    return running(state_dir(state))


def ensure_daemon(state: Optional[str], workspace: list[str], paths: list[str]) -> dict:
    """The running daemon, or a new one allowed to read the workspace, the cwd and ``paths``."""
    doc = find_daemon(state)
    if doc:
        return doc
    from ..server.cli import start_daemon
    opts = ["--tcp", "127.0.0.1:0", "--idle-exit", "1800"]  # an auto-started daemon goes away
    allow = {os.getcwd(), *workspace, *(os.path.dirname(os.path.abspath(p)) for p in paths)}
    for w in workspace:
        opts += ["--workspace", w]
    for a in sorted(allow):
        opts += ["--allow", a]
    return start_daemon(opts, state_dir(state))


async def _with(doc: dict, fn):
    c = DaemonClient()
    await c.connect(doc["host"], doc["port"], doc["token"])
    try:
        return await fn(c)
    finally:
        await c.close()


def _relabel(rep: T.Report, typed: str) -> T.Report:
    from ..server.core import relabel
    return relabel(rep, typed)


def analyze_sync(doc: dict, paths: list[str], workspace: list[str], path_map, disabled,
                 fallback) -> list[T.Report]:
    """Reports for ``paths`` from the daemon, in order; a path it refuses goes to ``fallback``."""
    async def go(c: DaemonClient):
        out = []
        for p in paths:
            try:
                res = await c.request(M.ANALYZE, {
                    "path": os.path.abspath(p), "workspace": workspace,
                    "pathMap": [list(x) for x in path_map], "disabled": sorted(disabled)})
                out.append(_relabel(T.report_from_builtins(res), p))
            except RpcError as e:
                if e.code in (M.ERR_FORBIDDEN_PATH, M.ERR_NOT_FOUND):
                    out.append(None)
                else:
                    raise
        return out

    reports = asyncio.run(_with(doc, go))
    return [r if r is not None else fallback(p) for p, r in zip(paths, reports)]


def status_sync(doc: dict) -> dict:
    return asyncio.run(_with(doc, lambda c: c.request(M.STATUS, {}, timeout=10)))


def reports_sync(doc: dict, path: Optional[str] = None) -> list[dict]:
    res = asyncio.run(_with(doc, lambda c: c.request(
        M.REPORTS, {"path": os.path.abspath(path) if path else None}, timeout=30)))
    return res["reports"]


def hover_sync(doc: dict, file: str, line: int) -> Optional[str]:
    uri = "file://" + os.path.abspath(file)

    async def go(c: DaemonClient):
        return await c.request("textDocument/hover", {
            "textDocument": {"uri": uri}, "position": {"line": line - 1, "character": 0}},
            timeout=30)

    res = asyncio.run(_with(doc, go))
    if not res:
        return None
    contents = res.get("contents")
    return contents.get("value") if isinstance(contents, dict) else str(contents)


def warn(msg: str) -> None:
    print(f"profd-client: {msg}", file=sys.stderr)
