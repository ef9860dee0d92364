"""Helpers for the daemon tests: start/stop real daemons, wait on conditions, write traces."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import subprocess
import sys
import time

from conftest import SRC, trace

from profd.protocol import methods as M

PY = sys.executable
FAST = ["--settle", "0.2", "--quiet", "0.8"]  # debounce tuned for tests (defaults 0.3 / 2.0)


def serve_cmd(watch, state, *extra, transport=("--stdio",), workspace=SRC):
    ws = ["--workspace", workspace] if workspace else []
    return [
        PY,
        "-m",
        "profd.server.daemon.cli",
        "serve",
        *transport,
        "--watch",
        str(watch),
        *ws,
        "--state",
        str(state),
        *FAST,
        *extra,
    ]


class Daemon:
    """``profd serve --tcp 127.0.0.1:0`` in its own process group; stopped by ``stop()``. Its
    stdout and stderr go to ``log`` (default STATE/test-daemon.log)."""

    def __init__(self, watch, state, *extra, log=None):
        self.watch, self.state, self.extra = str(watch), str(state), extra
        self.log_path = str(log or os.path.join(self.state, "test-daemon.log"))
        self.proc = None
        self.doc = None

    def start(self, timeout=20.0) -> dict:
        djson = os.path.join(self.state, "daemon.json")
        if os.path.exists(djson):
            os.unlink(djson)  # a stale one from a killed daemon
        os.makedirs(self.state, exist_ok=True)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            serve_cmd(
                self.watch, self.state, *self.extra, "--log-level", "INFO", transport=("--tcp", "127.0.0.1:0")
            ),
            stdout=self.log,
            stderr=self.log,
            start_new_session=True,
        )
        self.doc = wait_for(
            lambda: _daemon_doc(djson, self.proc.pid), timeout, f"daemon.json from pid {self.proc.pid}"
        )
        return self.doc

    def log_text(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def kill9(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the daemon and its analysis workers
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self._reap()
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._reap()

    def _reap(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # any worker left behind
        except (ProcessLookupError, PermissionError, TypeError, AttributeError):
            pass
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if getattr(self, "log", None):
            self.log.close()


def _daemon_doc(path, pid):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if doc.get("pid") == pid else None


def wait_for(cond, timeout=10.0, what="condition", every=0.02):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


async def await_for(cond, timeout=10.0, what="condition", every=0.02):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(every)


def trace_bytes(name: str) -> bytes:
    with open(trace(name), "rb") as f:
        return f.read()


def variant(name: str, i: int) -> bytes:
    """The trace ``name`` as distinct content: the JSON with ``i`` trailing spaces, gzipped."""
    raw = gzip.decompress(trace_bytes(name))
    return gzip.compress(raw + b" " * (i + 1), compresslevel=1)


def put(folder, name: str, data: bytes) -> str:
    """Write ``data`` as ``folder/name`` atomically (a dot-file renamed into place)."""
    dst = os.path.join(str(folder), name)
    tmp = os.path.join(str(folder), f".{name}.part")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, dst)
    return dst


def write_flood(folder, n: int) -> dict[str, bytes]:
    """The issue's flood, as fast as the disk takes it: ``n`` files, 25% invalid (a truncated
    event, distinct each time), the rest variants of a real trace with duplicates under new names,
    renames after writing, and A -> B -> A on one name in 32. Returns path -> bytes there now."""
    contents: dict[str, bytes] = {}
    uniques = [variant("seed_n64_bf16", i) for i in range(max(1, n // 4))]
    made = 0
    for i in range(n):
        kind = i % 8
        if kind in (0, 1):  # invalid
            data = b'{"traceEvents":[{"ph":"X","name":"' + str(i).encode()
        elif kind in (2, 3, 4):  # unique content
            data = uniques[made % len(uniques)]
            made += 1
        elif kind == 5:  # a duplicate of earlier content under a new name
            data = uniques[(i * 7) % max(1, min(made, len(uniques)))]
        else:
            data = uniques[(i * 3) % max(1, min(made, len(uniques)))]
        p = put(folder, f"f{i:04d}.json" + (".gz" if data[:2] == b"\x1f\x8b" else ""), data)
        contents[p] = data
        if kind == 6:  # renamed after being written
            q = os.path.join(str(folder), f"r{i:04d}.json.gz")
            os.rename(p, q)
            contents[q] = contents.pop(p)
        if kind == 7 and i % 32 == 7:  # A -> B -> A on one name
            for x in (uniques[(i + 1) % max(1, min(made, len(uniques)))], data):
                put(folder, os.path.basename(p), x)
    return contents


def drop(dst_dir, name: str, as_name: str | None = None) -> str:
    """Copy a shipped trace into ``dst_dir`` atomically (write a dot-file, then rename)."""
    data = trace_bytes(name)
    dst = os.path.join(str(dst_dir), as_name or os.path.basename(trace(name)))
    tmp = os.path.join(str(dst_dir), "." + os.path.basename(dst) + ".part")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, dst)
    return dst


def uri(path: str) -> str:
    return "file://" + path


async def connect(doc, token="__doc__"):
    """A DaemonClient on the TCP daemon of ``doc`` (its daemon.json), with its token or ``token``."""
    from profd.client_cli.daemon_client import DaemonClient

    c = DaemonClient()
    await c.connect(doc["host"], doc["port"], doc["token"] if token == "__doc__" else token)
    return c


async def call(doc, method, params=None, timeout=20):
    c = await connect(doc)
    try:
        return await c.request(method, params or {}, timeout=timeout)
    finally:
        await c.close()


async def lsp_tcp_client(doc):
    """pytest-lsp's client over TCP, as Neovim 0.9 (push diagnostics), initialized with the token."""
    return await lsp_client(doc=doc)


async def lsp_client(doc=None, cmd=None, ready=None):
    """pytest-lsp's client as Neovim 0.9 (push diagnostics): on the TCP daemon of ``doc``
    (initialized with its token), or spawning ``cmd`` and speaking on its stdin/stdout. With
    ``ready`` (a list), each profd/reportReady's params are appended to it as a dict."""
    from lsprotocol import types as L
    from pytest_lsp import client_capabilities, make_test_lsp_client

    client = make_test_lsp_client()
    if ready is not None:
        client.feature(M.REPORT_READY)(lambda params: ready.append(plain(params)))
    if doc is not None:
        await client.start_tcp(doc["host"], doc["port"])
    else:
        await client.start_io(*cmd)
    try:
        await asyncio.wait_for(
            client.initialize_session(
                L.InitializeParams(
                    capabilities=client_capabilities("neovim@v0.9.1"),
                    initialization_options={"token": doc["token"]} if doc is not None else None,
                )
            ),
            60,
        )
    except BaseException:
        if client._server is not None and client._server.returncode is None:
            client._server.kill()  # a daemon that never answered initialize: not left behind
        raise
    return client


def plain(obj):
    """What pygls hands a client for a method it has no type for (namedtuples) as the JSON it
    was: dicts and lists."""
    if hasattr(obj, "_asdict"):
        return {k: plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def child_pids(pid: int) -> set:
    """The live processes whose parent is ``pid`` (a daemon's analysis workers)."""
    out = set()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.add(int(p))
    return out


def alive(pid: int) -> bool:
    """``pid`` is running (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Served:
    """A real ``profd serve --watch --state`` and an editor's LSP client on it (pytest-lsp as
    Neovim 0.9), over ``transport``: "tcp" (``Daemon``, the client connecting with the token) or
    "stdio" (the client spawns the daemon and speaks on its stdin/stdout, as an editor does). One
    scenario runs on both through ``request``, ``ready`` (profd/reportReady params, in order),
    ``lsp`` (the client: ``lsp.diagnostics`` is what was pushed), ``log_text``, ``restart`` and
    ``reconnect``. Both log at INFO to ``log`` (default STATE/test-daemon.log; TCP: its stdout
    and stderr; stdio: ``--log-file``, its stdout being the LSP stream)."""

    def __init__(self, transport: str, watch, state, *extra, log=None):
        self.watch, self.state, self.extra = str(watch), str(state), extra
        self.log_path = str(log or os.path.join(self.state, "test-daemon.log"))
        self.tcp = Daemon(watch, state, *extra, log=self.log_path) if transport == "tcp" else None
        self.lsp = None
        self.ready: list[dict] = []

    @property
    def pid(self) -> int:
        return self.tcp.proc.pid if self.tcp else self.lsp._server.pid

    async def start(self) -> "Served":
        self.ready = []
        if self.tcp:
            self.tcp.start()
            self.lsp = await lsp_client(doc=self.tcp.doc, ready=self.ready)
        else:
            os.makedirs(self.state, exist_ok=True)
            self.lsp = await lsp_client(
                cmd=serve_cmd(
                    self.watch, self.state, *self.extra, "--log-level", "INFO", "--log-file", self.log_path
                ),
                ready=self.ready,
            )
        return self

    async def request(self, method: str, params=None, timeout: float = 20):
        return plain(
            await asyncio.wait_for(self.lsp.protocol.send_request_async(method, params or {}), timeout)
        )

    def log_text(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    async def stop(self, timeout: float = 30) -> None:
        """LSP shutdown and exit (which end a stdio daemon), then (TCP) SIGTERM the daemon; any
        process left is killed."""
        if self.lsp is None:
            if self.tcp:  # a daemon whose start timed out is stopped too (it ran on past the test)
                self.tcp.stop()
            return
        pid, lsp, self.lsp = self.pid, self.lsp, None
        try:
            if self.tcp or lsp._server.returncode is None:  # (a stdio daemon may be gone)
                await asyncio.wait_for(lsp.shutdown_session(), timeout)
        except Exception:
            for p in [*child_pids(pid), pid]:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        finally:
            if self.tcp:
                self.tcp.stop()
            await asyncio.wait_for(lsp.stop(), timeout)

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def reconnect(self) -> None:
        """The editor's client again: a new connection to the same TCP daemon; over stdio (where
        the client's end is the daemon's life) a new daemon on the same state."""
        if not self.tcp:
            return await self.restart()
        old, self.ready = self.lsp, []
        await asyncio.wait_for(old.shutdown_session(), 30)
        await asyncio.wait_for(old.stop(), 30)
        self.lsp = await lsp_client(doc=self.tcp.doc, ready=self.ready)


def processes_with(marker: str) -> list[str]:
    """Command lines of the live processes (other than pytest) that contain ``marker``."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
            if marker in cmd and "pytest" not in cmd:
                out.append(cmd)
    return out
