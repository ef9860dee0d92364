"""The TCP daemon: token, several clients, CLI runs, restart from SQLite, bad JSON-RPC, kill -9."""

import asyncio
import json
import os
import socket
import sqlite3
import stat
import subprocess
import sys

import pytest

from conftest import SRC, trace
from daemon_util import Daemon, await_for, call, connect, drop, lsp_tcp_client, uri, wait_for

from profd.client_cli.daemon_client import RpcError
from profd.protocol import methods as M

SEED_SRC = os.path.join(SRC, "seed_matmul.py")
CLIENT = os.path.join(os.path.dirname(sys.executable), "profd-client")


@pytest.fixture
def daemon(tmp_path):
    watch = tmp_path / "watch"
    watch.mkdir()
    d = Daemon(watch, tmp_path / "state")
    d.start()
    yield d
    d.stop()


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_token_loopback_and_owner_only_files(daemon):
    doc = daemon.doc
    assert doc["host"] == "127.0.0.1"
    assert mode(os.path.join(daemon.state, "daemon.json")) == 0o600
    assert mode(os.path.join(daemon.state, "profd.sqlite3")) == 0o600
    for token in (None, "wrong-token"):
        with pytest.raises(RpcError) as e:
            await connect(doc, token)
        assert e.value.code == M.ERR_UNAUTHORIZED
    wait_for(lambda: daemon.log_text().count("refused") >= 2, 5, "refusals in the log")
    # a request before initialize is not served either
    r, w = await asyncio.open_connection(doc["host"], doc["port"])
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": M.STATUS, "params": {}}).encode()
    w.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    resp = await read_frame(r)
    assert resp["error"]["code"] == M.ERR_NOT_INITIALIZED
    w.close()
    st = await call(doc, M.STATUS)  # with the token: served
    assert st["pid"] == doc["pid"]


async def read_frame(reader):
    length = None
    while True:
        line = await asyncio.wait_for(reader.readline(), 10)
        assert line, "connection closed"
        if line.strip() == b"" and length is not None:
            break
        if line.lower().startswith(b"content-length"):
            length = int(line.split(b":")[1])
    return json.loads(await reader.readexactly(length))


async def test_malformed_json_rpc_and_unknown_method_get_errors(daemon):
    doc = daemon.doc
    c = await connect(doc)
    w = c.writer
    # raw frames on the authenticated connection, answers collected by the client's reader
    got = []
    orig = c._waiting

    async def raw(body: bytes, expect_id=None):
        fut = asyncio.get_running_loop().create_future()
        orig[expect_id] = fut
        w.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        try:
            return await asyncio.wait_for(fut, 10)
        except RpcError as e:
            got.append(e.code)
            return e
        finally:
            orig.pop(expect_id, None)

    e1 = await raw(b"{this is not json", None)
    e2 = await raw(b"[1, 2, 3]", None)
    e3 = await raw(b'{"jsonrpc": "2.0", "id": 77, "method": "profd/noSuchMethod"}', 77)
    e4 = await raw(b'{"jsonrpc": "2.0", "id": 78, "method": "profd/analyze", "params": 5}', 78)
    assert [e.code for e in (e1, e2, e3, e4)] == [-32700, -32600, -32601, -32602]
    # the same connection and the daemon live on
    assert (await c.request(M.STATUS, {}))["pid"] == doc["pid"]
    await c.close()
    # a client that hangs up mid-message does not hurt either
    s = socket.create_connection((doc["host"], doc["port"]))
    s.sendall(b'Content-Length: 1000\r\n\r\n{"jsonrpc"')
    s.close()
    assert (await call(doc, M.STATUS))["pid"] == doc["pid"]


async def test_two_clients_at_once_both_get_diagnostics(daemon):
    a = await lsp_tcp_client(daemon.doc)
    b = await lsp_tcp_client(daemon.doc)
    try:
        drop(daemon.watch, "seed_n64_bf16")
        for c in (a, b):
            diags = await await_for(lambda: c.diagnostics.get(uri(SEED_SRC)), 20, "diagnostics")
            assert any(d.code == "overhead-bound" and d.range.start.line == 20 for d in diags)
        # a third client arriving later gets them at once (published on initialized)
        c3 = await lsp_tcp_client(daemon.doc)
        await await_for(lambda: c3.diagnostics.get(uri(SEED_SRC)), 5, "diagnostics for c3")
        await c3.shutdown_session()
        await c3.stop()
        st = await call(daemon.doc, M.STATUS)
        assert st["analyses"] == 1 and st["sessions"] == 3  # a, b and this one
    finally:
        for c in (a, b):
            await c.shutdown_session()
            await c.stop()


def test_cli_outside_the_roots_falls_back_with_identical_output(daemon):
    env = dict(os.environ, PROFD_STATE=daemon.state)
    env.pop("PROFD_NO_DAEMON", None)
    t = trace("seed_n64_bf16")
    local = subprocess.run(
        [CLIENT, "analyze", "--no-daemon", "--workspace", SRC, "--format", "json", "--fail-on", "never", t],
        capture_output=True,
        env=env,
        timeout=60,
    )
    for i in range(10):
        p = subprocess.run(
            [CLIENT, "analyze", "--workspace", SRC, "--format", "json", "--fail-on", "never", t],
            capture_output=True,
            env=env,
            timeout=60,
        )
        assert p.returncode == 0 and p.stderr == b"", p.stderr
        assert p.stdout == local.stdout  # same output as in-process
    # ... served by the daemon (refused paths would fall back silently: check it analysed once)
    # the trace lives outside watch/workspace, so allow it: the run above must have used fallback
    st = subprocess.run([CLIENT, "status"], capture_output=True, text=True, env=env, timeout=30)
    assert st.returncode == 0 and f"pid {daemon.doc['pid']}" in st.stdout


def test_ten_cli_runs_served_by_the_daemon(daemon):
    env = dict(os.environ, PROFD_STATE=daemon.state)
    t = drop(daemon.watch, "seed_n64_bf16")
    hover = None
    for i in range(10):
        p = subprocess.run(
            [CLIENT, "analyze", "--daemon", "--workspace", SRC, "--fail-on", "never", t],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert p.returncode == 0 and "warning[overhead-bound]" in p.stdout, p.stderr
    hover = subprocess.run(
        [CLIENT, "hover", f"{SEED_SRC}:21"], capture_output=True, text=True, env=env, timeout=30
    )
    assert "Launches: 2" in hover.stdout
    reps = subprocess.run([CLIENT, "reports"], capture_output=True, text=True, env=env, timeout=30)
    assert os.path.basename(t) in reps.stdout
    st = asyncio.run(call(daemon.doc, M.STATUS))
    assert st["analyses"] == 1  # the watcher's; ten analyze requests were served from the store


# profd-client with the engine's pipeline made to fail: a run that analyses anything in the
# CLI's own process exits 2 (internal error) instead of printing the reports.
_CLI_THAT_ANALYSES_NOTHING = (
    "import sys\n"
    "import profd.server.engine.analyze as pipeline\n"
    "def refuse(*args, **kwargs):\n"
    "    raise AssertionError('the CLI analysed a trace itself')\n"
    "pipeline.analyze_trace = refuse\n"
    "from profd.client_cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_a_job_through_the_daemon_comes_back_whole_with_its_options(daemon):
    """Two ranks of a DDP job through the daemon, with a per-rule threshold: the daemon runs with
    the CLI's options (thresholds too: the CLI no longer analyses in-process for them) and sends
    each rank's summary beside its report, so the CLI analyses nothing itself and prints what
    the in-process run prints, job report included."""
    env = dict(os.environ, PROFD_STATE=daemon.state)
    env.pop("PROFD_NO_DAEMON", None)
    ranks = [drop(daemon.watch, f"ddp_straggler_rank{r}") for r in (0, 1)]
    args = [
        "analyze",
        "--isolated",
        "--workspace",
        SRC,
        "--format",
        "json",
        "--fail-on",
        "never",
        "--config",
        "rules.launch-storm.launches-per-step = 50",
        *ranks,
    ]
    local = subprocess.run([CLIENT, *args, "--no-daemon"], capture_output=True, env=env, timeout=120)
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout)["jobs"], "the two ranks make one job"
    p = subprocess.run(
        [sys.executable, "-c", _CLI_THAT_ANALYSES_NOTHING, *args, "--daemon", "-v"],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert b"analysing through the daemon" in p.stderr
    assert p.stdout == local.stdout


async def test_restart_serves_from_sqlite_without_reanalysis(tmp_path):
    watch = tmp_path / "watch"
    watch.mkdir()
    d = Daemon(watch, tmp_path / "state")
    d.start()
    try:
        drop(watch, "seed_n64_bf16")
        for _ in range(200):
            if (await call(d.doc, M.STATUS))["reports"] == 1:
                break
            await asyncio.sleep(0.05)
        d.stop()
        d.start()
        c = await connect(d.doc)
        hover = await c.request(
            "textDocument/hover",
            {"textDocument": {"uri": uri(SEED_SRC)}, "position": {"line": 20, "character": 0}},
        )
        assert "Launches: 2" in hover["contents"]["value"]
        st = await c.request(M.STATUS, {})
        assert st["reports"] == 1 and st["analyses"] == 0
        await c.close()
    finally:
        d.stop()


async def test_kill9_during_analysis_then_restart(tmp_path):
    watch = tmp_path / "watch"
    watch.mkdir()
    d = Daemon(watch, tmp_path / "state", "--workers", "1")
    d.start()
    try:
        drop(watch, "seed_n64_bf16")
        c = await connect(d.doc)
        await await_for_async(c, lambda st: st["reports"] == 1, "first report")
        drop(watch, "tinygpt_naive")  # ~0.7 s of analysis
        await await_for_async(c, lambda st: st["running"] == 1, "analysis running", every=0.005)
        d.kill9()
        db = os.path.join(d.state, "profd.sqlite3")
        con = sqlite3.connect(db)
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("SELECT COUNT(*) FROM reports").fetchone()[0] == 1
        con.close()
        d.start()
        c = await connect(d.doc)
        st = await await_for_async(c, lambda st: st["reports"] == 2, "re-analysis", timeout=30)
        assert st["analyses"] == 1  # only the interrupted file, not the finished one
        reps = await c.request(M.REPORTS, {})
        assert sorted(os.path.basename(r["path"]) for r in reps["reports"]) == [
            "seed_n64_bf16.json.gz",
            "tinygpt_naive.json.gz",
        ]
        assert all(r["error"] is None for r in reps["reports"])
        await c.close()
    finally:
        d.stop()


async def await_for_async(c, pred, what, timeout=20, every=0.05):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        st = await c.request(M.STATUS, {})
        if pred(st):
            return st
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {st}")
        await asyncio.sleep(every)


def test_client_starts_a_daemon_when_none_runs(tmp_path):
    state = str(tmp_path / "state")
    env = dict(os.environ, PROFD_STATE=state)
    env.pop("PROFD_NO_DAEMON", None)
    t = trace("seed_n64_bf16")
    try:
        p = subprocess.run(
            [CLIENT, "analyze", "--daemon", "--workspace", SRC, "--fail-on", "never", t],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert p.returncode == 0 and "warning[overhead-bound]" in p.stdout, p.stderr
        doc = json.load(open(os.path.join(state, "daemon.json")))
        assert mode(os.path.join(state, "daemon.json")) == 0o600
        st = asyncio.run(call(doc, M.STATUS))
        assert st["analyses"] == 1 and st["reports"] == 1
    finally:
        subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "profd"), "stop"],
            env=env,
            timeout=30,
            capture_output=True,
        )
    assert not os.path.exists(os.path.join(state, "daemon.json"))
