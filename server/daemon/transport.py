"""Transports: the JSON-RPC read loop, stdio, and a TCP server with a session per connection.

pygls's own ``start_tcp`` serves one session per process; here an asyncio server accepts any
number of connections and gives each its own pygls LanguageServer (``lsp.LspSession``) over the
shared ``Core``. The read loop (instead of pygls's ``run_async``) answers what pygls would drop:
a body that is not JSON gets -32700, a message that is not a JSON-RPC request -32600, a request
before ``initialize`` -32002, and over TCP an ``initialize`` without the daemon's token is refused
(-32001, logged) and the connection closed. Bodies are capped so no client can make us buffer
gigabytes; header lines and header blocks too (answered -32600, one log line, no traceback).

Strangers are kept out cheaply: until a TCP connection has sent ``initialize`` with the token it
is only a socket whose frames are read (bodies up to ``MAX_UNAUTHED_BODY``) and checked; its LSP
server is built after (issue 28: building one per connection first let 100 token-less connections
a second slow the owner's requests from 1 ms to 0.34 s, and 250 a second lock him out). It has
``auth_timeout`` s to do so, at most ``MAX_UNAUTHED`` connections may be waiting to (a new one
makes room by dropping the oldest that has sent nothing yet, else the oldest: idle sockets never
lock out the owner, and a burst of the owner's own clients fits), and at most ``max_conns`` in
all, well under the process's file limit (no EMFILE storms in the accept loop).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import re
import threading
from typing import Any, Optional

import orjson
from pygls.exceptions import JsonRpcException

from ...protocol import methods as M
from .confine import shown
from .core import Core
from .lsp import LspSession

log = logging.getLogger("profd.transport")

MAX_BODY = 64 << 20
MAX_HEADER = 8 << 10  # bytes of headers before a body (LSP sends two short lines)
MAX_UNAUTHED = 128  # connections waiting to show the token (each a socket and a few KB)
MAX_UNAUTHED_BODY = 1 << 20  # a message before the token: an initialize is a few KB
# Output a TCP client has not read yet: past PAUSE_UNREAD its requests are not read until it reads
# (back-pressure: its own requests cannot grow our buffer); past MAX_UNREAD (pushes to a client
# that never reads, or many big answers at once) it is disconnected.
PAUSE_UNREAD = 1 << 20
MAX_UNREAD = 64 << 20
AUTH_TIMEOUT = 10.0
_CL = re.compile(rb"^Content-Length:\s*(\d+)\s*$", re.I)


class _BadHeader(Exception):
    pass


def token_ok(given: Any, token: str) -> bool:
    """Constant-time comparison of what the client sent with the token, for any string."""
    return isinstance(given, str) and hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), token.encode()
    )


def _frame(obj: Any) -> bytes:
    body = orjson.dumps(obj)
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _error(msg_id: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


class _Framing:
    """Reading and writing LSP frames on one connection: bodies capped at ``max_body`` (smaller
    before a TCP client has shown the token: an ``initialize`` is a few KB), header lines and
    header blocks too."""

    def __init__(self, reader, writer, max_body: int = MAX_BODY):
        self.reader, self.writer, self.max_body = reader, writer, max_body
        self.heard = False  # the client has sent something

    def send_raw(self, obj: dict) -> None:
        res = self.writer.write(_frame(obj))
        if asyncio.iscoroutine(res):
            asyncio.ensure_future(res)

    async def read_message(self) -> Optional[bytes]:
        length = None
        seen = 0
        while True:
            try:
                line = await self.reader.readline()
            except (ValueError, asyncio.LimitOverrunError):  # one line past the stream's limit
                raise _BadHeader("a header line is too long") from None
            if not line:
                return None
            self.heard = True
            seen += len(line)
            if seen > MAX_HEADER:
                raise _BadHeader(f"more than {MAX_HEADER} bytes of headers")
            if line in (b"\r\n", b"\n"):
                if length is None:
                    continue  # stray blank line
                break
            m = _CL.match(line)
            if m:
                length = int(m.group(1))
        if length > self.max_body:
            self.send_raw(_error(None, -32600, f"profd: message of {length} bytes refused"))
            return None
        return await self.reader.readexactly(length)

    async def next_json(self, peer: str) -> tuple[str, Any]:
        """The next message as ("msg", its dict as orjson read it), or ("end", None) when the
        connection is over; bodies that are not JSON or not JSON-RPC are answered here and skipped."""
        while True:
            try:
                body = await self.read_message()
            except (asyncio.IncompleteReadError, ConnectionError):
                return "end", None
            except _BadHeader as e:
                log.warning("profd: closed %s: %s", peer, e)
                self.send_raw(_error(None, -32600, f"profd: {e}"))
                await _drain(self.writer)
                return "end", None
            if body is None:
                return "end", None
            try:
                raw = orjson.loads(body)
            except orjson.JSONDecodeError as e:
                log.warning("profd: %s sent a body that is not JSON: %s", peer, e)
                self.send_raw(_error(None, -32700, f"Parse error: {e}"))
                continue
            if (
                not isinstance(raw, dict)
                or raw.get("jsonrpc") != "2.0"
                or not (isinstance(raw.get("method"), str) or "id" in raw)
            ):
                self.send_raw(
                    _error(
                        raw.get("id") if isinstance(raw, dict) else None,
                        -32600,
                        "Invalid Request: not a JSON-RPC 2.0 message",
                    )
                )
                continue
            return "msg", raw


async def _authenticate(io: _Framing, token: str, peer: str) -> Optional[dict]:
    """A TCP client before it is anyone: nothing but frames read and its ``initialize`` checked
    against the token (no LSP server is built for a stranger). The initialize, or None when the
    client went, sent ``exit`` or a wrong token (refused, logged)."""
    while True:
        kind, raw = await io.next_json(peer)
        if kind == "end":
            return None
        method = raw.get("method")
        if method == "initialize":
            params = raw.get("params")
            opts = params.get("initializationOptions") if isinstance(params, dict) else None
            given = opts.get("token") if isinstance(opts, dict) else None
            if token_ok(given, token):
                return raw
            log.warning("profd: refused %s: initialize without the daemon token", peer)
            io.send_raw(
                _error(
                    raw.get("id"),
                    M.ERR_UNAUTHORIZED,
                    "profd: unauthorized: initializationOptions.token is "
                    "missing or wrong (see STATE/daemon.json)",
                )
            )
            await _drain(io.writer)
            return None
        if method == "exit":
            return None
        if "id" in raw and method is not None:
            io.send_raw(_error(raw.get("id"), M.ERR_NOT_INITIALIZED, "profd: initialize first"))


async def serve_session(
    core: Core,
    reader,
    writer,
    *,
    token: Optional[str],
    peer: str,
    auth_timeout: float = AUTH_TIMEOUT,
    on_auth=None,
    framing: Optional[_Framing] = None,
) -> int:
    """Run one client's session until it disconnects, sends ``exit``, or (TCP, ``token`` given)
    has not sent ``initialize`` with the token within ``auth_timeout`` s; ``on_auth()`` once it
    has. Its LSP server is built only then. The exit status the spec asks for: 1 after an
    ``exit`` that no ``shutdown`` came before, else 0."""
    done = asyncio.Event()
    transport = getattr(writer, "transport", None)  # TCP: a socket's buffer we can see
    if transport is not None:
        writer = _Bounded(writer, peer, done)
    io = framing or _Framing(reader, writer)
    io.writer = writer
    first = None
    if token is not None:
        io.max_body = min(io.max_body, MAX_UNAUTHED_BODY)
        try:
            first = await asyncio.wait_for(_authenticate(io, token, peer), auth_timeout)
        except asyncio.TimeoutError:
            log.warning("profd: closed %s: no initialize with the token within %.0f s", peer, auth_timeout)
            return 0
        if first is None:
            return 0
        io.max_body = MAX_BODY
        if on_auth:
            on_auth()
    session = LspSession(core, token, peer)
    session.authed = True
    proto = session.ls.protocol
    proto.set_writer(writer)
    session.on_close = done.set
    send_raw = io.send_raw
    stop = asyncio.ensure_future(done.wait())  # one waiter for the whole session, not one a message
    try:
        while not done.is_set():
            if first is not None:
                raw, first = first, None
            else:
                rd = asyncio.ensure_future(io.next_json(peer))
                await asyncio.wait({rd, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not rd.done():
                    rd.cancel()
                    break
                kind, raw = rd.result()
                if kind == "end":
                    break
            method = raw.get("method")
            is_request = "id" in raw and method is not None
            if is_request and method not in proto.fm.builtin_features and method not in proto.fm.features:
                send_raw(_error(raw.get("id"), -32601, f"Method not found: {shown(method)}"))
                continue
            try:
                # structured from the dict orjson read, not parsed a second time
                message = proto.structure_message(raw)
            except JsonRpcException as e:
                if is_request:
                    send_raw(_error(raw.get("id"), e.code, e.message or "Invalid params"))
                continue
            except Exception as e:  # pragma: no cover - structure failures not covered above
                if is_request:
                    send_raw(_error(raw.get("id"), -32600, f"Invalid Request: {shown(str(e))}"))
                continue
            try:
                proto.handle_message(message)
            except Exception:
                log.exception("profd: handling a message from %s failed", peer)
                if is_request:
                    send_raw(_error(raw.get("id"), -32603, "Internal error"))
            if transport is not None and transport.get_write_buffer_size() > PAUSE_UNREAD:
                try:
                    await writer.drain()  # read nothing more until the client reads
                except ConnectionError:
                    break
    finally:
        stop.cancel()
        session.close()
    return session.exit_code


class _Bounded:
    """A TCP client's StreamWriter that drops the client once ``MAX_UNREAD`` bytes sent to it
    are unread (a client that never reads must not grow the daemon's memory)."""

    def __init__(self, writer: asyncio.StreamWriter, peer: str, done: asyncio.Event):
        self.w, self.peer, self.done = writer, peer, done

    def write(self, data: bytes) -> None:
        t = self.w.transport
        if t.is_closing():
            return
        if t.get_write_buffer_size() + len(data) > MAX_UNREAD:
            log.warning(
                "profd: closed %s: it has not read the last %d MB sent to it",
                self.peer,
                t.get_write_buffer_size() >> 20,
            )
            t.abort()
            self.done.set()
            return
        self.w.write(data)

    def __getattr__(self, name):
        return getattr(self.w, name)


async def _drain(writer) -> None:
    d = getattr(writer, "drain", None)
    if d:
        try:
            await asyncio.wait_for(d(), 2)
        except Exception:
            pass


def _stdin_stream(stdin) -> asyncio.StreamReader:
    """stdin fed into an asyncio stream by a daemon thread of our own (never pygls's pool, never
    the loop); being a daemon thread, a blocked read never holds the process at exit."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_BODY + (1 << 16), loop=loop)
    fd = stdin.fileno()

    def pump():
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        except (OSError, RuntimeError):
            pass
        try:
            loop.call_soon_threadsafe(reader.feed_eof)
        except RuntimeError:
            pass

    threading.Thread(target=pump, name="profd-stdin", daemon=True).start()
    return reader


class _StdoutWriter:
    def __init__(self, stream):
        self.stream = stream
        self.lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self.lock:
            self.stream.write(data)
            self.stream.flush()

    def close(self) -> None:
        pass


async def run_stdio(core: Core, stdin, stdout) -> int:
    """Serve the editor on stdio; the process's exit status (serve_session)."""
    await core.start(watch=False)  # scanned once the editor's folders and settings are in
    try:
        return await serve_session(
            core, _stdin_stream(stdin), _StdoutWriter(stdout), token=None, peer="stdio"
        )
    finally:
        await core.stop()


def _file_limit() -> int:
    """The soft limit on open files, raised to the hard one where allowed."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        if soft != resource.RLIM_INFINITY and soft < want:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
                soft = want
            except (ValueError, OSError):
                pass
        return soft if soft != resource.RLIM_INFINITY else 65536
    except (ImportError, OSError, ValueError):
        return 1024


class TcpServer:
    def __init__(self, core: Core, host: str, port: int, token: str, auth_timeout: float = AUTH_TIMEOUT):
        self.core, self.host, self.port, self.token = core, host, port, token
        self.auth_timeout = auth_timeout
        self.server: Optional[asyncio.base_events.Server] = None
        self.tasks: set[asyncio.Task] = set()
        self.unauthed: dict[asyncio.Task, _Framing] = {}  # connections before the token, oldest first
        # Half the file limit for clients: the rest is the store, the watcher, the workers.
        self.max_conns = max(16, min(1024, _file_limit() // 2))

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._conn, self.host, self.port)
        addr = self.server.sockets[0].getsockname()
        return addr[0], addr[1]

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = "%s:%s" % writer.get_extra_info("peername")[:2]
        task = asyncio.current_task()
        if len(self.tasks) >= self.max_conns:
            log.warning("profd: refused %s: %d connections open", peer, len(self.tasks))
            writer.close()
            return
        while len(self.unauthed) >= MAX_UNAUTHED:  # a stranger makes room: the oldest silent one
            old = next(
                (t for t, f in self.unauthed.items() if not f.heard),  # (else the oldest)
                next(iter(self.unauthed)),
            )
            f = self.unauthed.pop(old)
            f.writer.close()
            old.cancel()
        io = _Framing(reader, writer)
        self.tasks.add(task)
        self.unauthed[task] = io
        try:
            await serve_session(
                self.core,
                reader,
                writer,
                token=self.token,
                peer=peer,
                auth_timeout=self.auth_timeout,
                on_auth=lambda: self.unauthed.pop(task, None),
                framing=io,
            )
        except asyncio.CancelledError:
            if task in self.tasks:  # evicted: not the server closing
                log.warning("profd: dropped %s: too many connections waiting to authenticate", peer)
            else:
                raise
        except Exception:
            log.exception("profd: session %s failed", peer)
        finally:
            self.tasks.discard(task)
            self.unauthed.pop(task, None)
            try:
                writer.close()
            except Exception:
                pass

    async def close(self) -> None:
        if self.server:
            self.server.close()
        tasks, self.tasks = list(self.tasks), set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
