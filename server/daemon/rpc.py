"""The client side of the daemon's TCP transport: a small asyncio JSON-RPC/LSP client (no pygls
needed). ``profd status`` and ``profd-client`` both talk to a running daemon through it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Optional

import msgspec
import orjson

from ...protocol import methods as M
from ...protocol import types as T
from ...protocol.options import AnalysisOptions


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

    async def connect(
        self, host: str, port: int, token: Optional[str], timeout: float = 10.0, root: Optional[str] = None
    ) -> dict:
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=1 << 26), timeout
        )
        self._task = asyncio.ensure_future(self._read_loop())
        root = root or os.getcwd()
        res = await self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": "file://" + root,
                "capabilities": {},
                "clientInfo": {"name": "profd-client"},
                "initializationOptions": {"token": token} if token is not None else {},
            },
            timeout,
        )
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


async def with_client(doc: dict, fn):
    c = DaemonClient()
    await c.connect(doc["host"], doc["port"], doc["token"])
    try:
        return await fn(c)
    finally:
        await c.close()


def status_sync(doc: dict) -> dict:
    return asyncio.run(with_client(doc, lambda c: c.request(M.STATUS, {}, timeout=10)))


async def analyze(c: DaemonClient, path: str, options: AnalysisOptions) -> Optional[T.Report]:
    """The daemon's report for ``path`` with these options (a field left None: the daemon's
    own); None when the daemon refuses the path (outside what it may read, or missing), so the
    caller can analyse in-process instead."""
    res = await _analyze(c, M.ANALYZE, path, options)
    return T.report_from_builtins(res) if res is not None else None


async def analyze_rank(c: DaemonClient, path: str, options: AnalysisOptions) -> Optional[M.RankAnalysis]:
    """As ``analyze``, with the rank summary the daemon made from the same analysis when the
    trace is a rank of a multi-process job."""
    res = await _analyze(c, M.ANALYZE_RANK, path, options)
    return msgspec.convert(res, M.RankAnalysis) if res is not None else None


async def _analyze(c: DaemonClient, method: str, path: str, options: AnalysisOptions) -> Any:
    params = M.AnalyzeParams(path=os.path.abspath(path), **msgspec.structs.asdict(options))
    try:
        return await c.request(method, msgspec.to_builtins(params))
    except RpcError as e:
        if e.code in (M.ERR_FORBIDDEN_PATH, M.ERR_NOT_FOUND):
            return None
        raise
