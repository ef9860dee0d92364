"""What the daemon's tests share: a real daemon (``profd serve``) on a watched folder over TCP and
stdio (``served``: the test's one scenario runs on each), an in-process ``Core``, the requests they
send, and the edited real traces and synthetic inputs several features are tried with (each
synthetic one says so: nothing a profiler writes)."""

import asyncio
import gzip
import json
import os
import sys
import time

import pytest

from conftest import SRC
from daemon_util import Daemon, Served, call, connect, trace_bytes

from profd.protocol import methods as M


SEED_SRC = os.path.join(SRC, "seed_matmul.py")


CLIENT = os.path.join(os.path.dirname(sys.executable), "profd-client")


def seed_doc() -> dict:
    return json.loads(gzip.decompress(trace_bytes("seed_n64_bf16")))


async def ask(src, method, params=None):
    """A request to a daemon: through a ``Served``'s own client, or a connection to the TCP
    daemon of a daemon.json ``doc``."""
    return await (src.request(method, params) if isinstance(src, Served) else call(src, method, params))


async def wait_status(src, pred, what, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        st = await ask(src, M.STATUS)
        if pred(st):
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {st}")
        await asyncio.sleep(0.05)


async def ask_report(src, path):
    return await ask(src, M.REPORT, {"path": path})


@pytest.fixture
def folders(tmp_path):
    watch = tmp_path / "watch"
    watch.mkdir()
    return watch, tmp_path / "state"


@pytest.fixture
def daemon(folders):
    d = Daemon(*folders)
    d.start()
    yield d
    d.stop()


@pytest.fixture(params=["tcp", "stdio"])
async def served(request, folders):
    """``served(*flags, state=, log=)``: a ``Served`` daemon on ``folders`` (not started), over
    TCP and over stdio: the test's one scenario runs on each; whatever it left running is
    stopped."""
    made = []

    def make(*extra, state=None, log=None):
        watch, default_state = folders
        made.append(Served(request.param, watch, state or default_state, *extra, log=log))
        return made[-1]

    yield make
    for s in made:
        await s.stop()


@pytest.fixture
def strict_daemon(folders):
    d = Daemon(*folders, "--auth-timeout", "1")
    d.start()
    yield d
    d.stop()


@pytest.fixture
async def core(folders):
    from profd.server.daemon.core import Config, Core

    watch, state = folders
    c = Core(Config(watch=str(watch), workspace=[SRC], state=str(state), workers=2, settle=0.1, quiet=0.5))
    c.index.retry_s = 0.3
    await c.start()
    c.watch = str(watch)
    yield c
    await c.stop()


def trace_naming(path: str) -> bytes:
    """The real seed trace with its user frames pointing at ``path`` (edited: the attack)."""
    raw = gzip.decompress(trace_bytes("seed_n64_bf16")).replace(b'"seed_matmul.py(', f'"{path}('.encode())
    return gzip.compress(raw)


async def await_for_async(coro_fn, what, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        v = await coro_fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def hostile(kind: str) -> bytes:
    """The real seed trace with one value made hostile (edited)."""
    raw = before = gzip.decompress(trace_bytes("seed_n64_bf16")).decode()
    if kind == "lone surrogate":
        raw = raw.replace('"name": "aten::mm"', '"name": "aten::mm\\ud800"', 1)
    elif kind == "overflow":
        raw = raw.replace('"dur": ', '"dur": 1e309, "x": ', 1)
    else:
        raw = raw.replace('"args": {', '"args": {"deep": ' + "[" * 1024 + "]" * 1024 + ", ", 1)
    assert raw != before
    return raw.encode()


KINDS = ["lone surrogate", "overflow", "deep"]


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(x.split()[1]) >> 10 for x in f if x.startswith("VmRSS"))


async def report_from(doc, path):
    """profd/report of ``path`` from the TCP daemon of ``doc`` (its daemon.json), on a connection of
    its own."""
    c = await connect(doc)
    try:
        return await c.request(M.REPORT, {"path": path})
    finally:
        await c.close()
