"""Clients the daemon cannot trust, and requests it must answer plainly: strangers without the
token (cheap, capped, never pushing the owner out), over-long headers, clients that read nothing
or never read (bounded, dropped at the cap), odd and hostile requests (plain errors, no
traceback), and a request's own options (its result is that client's alone). On the real daemon
over TCP and stdio, real sockets."""

import asyncio
import json
import os
import re
import socket
import subprocess
import time

from lsprotocol import types as L
import pytest

from daemon_util import Daemon, await_for, call, connect, drop, lsp_tcp_client, put, serve_cmd, uri
from daemon_cases import CLIENT, KINDS, SEED_SRC, ask_report, await_for_async, hostile, rss_mb, wait_status
from daemon_cases import core, daemon, folders, served, strict_daemon  # noqa: F401 (fixtures)

from profd.client_cli.daemon_client import RpcError
from profd.protocol import methods as M


async def test_strangers_cost_no_server_and_never_push_out_the_owner(core, monkeypatch):
    """200 token-less connections open (some silent, some sending junk or a wrong token), then 40
    of the owner's clients at once: every one of the 40 gets in, and no LSP server was built for
    any stranger (each used to cost one before its token was read, and a burst of 40 lost 7 to
    the eviction of the 'oldest')."""
    from profd.server.daemon import transport

    built = []
    real = transport.LspSession

    def counting(*a, **k):
        built.append(a[2] if len(a) > 2 else k.get("peer"))
        return real(*a, **k)

    monkeypatch.setattr(transport, "LspSession", counting)
    srv = transport.TcpServer(core, "127.0.0.1", 0, "t0ken")
    host, port = await srv.start()
    doc = {"host": host, "port": port, "token": "t0ken"}
    loop = asyncio.get_running_loop()
    socks = []
    try:
        for i in range(200):
            s = socket.socket()
            s.setblocking(False)
            await loop.sock_connect(s, (host, port))
            if i % 3 == 1:
                await loop.sock_sendall(s, b"Content-Length: 2\r\n\r\n{}")
            elif i % 3 == 2:
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {"initializationOptions": {"token": "wrong"}},
                    }
                ).encode()
                await loop.sock_sendall(s, b"Content-Length: %d\r\n\r\n" % len(body) + body)
            socks.append(s)
        await asyncio.sleep(0.2)
        assert built == []

        async def owner():
            return (await call(doc, M.STATUS))["pid"]

        pids = await asyncio.gather(*[owner() for _ in range(40)], return_exceptions=True)
        assert pids == [os.getpid()] * 40, [p for p in pids if p != os.getpid()][:3]
        assert len(built) == 40
    finally:
        for s in socks:
            s.close()
        await srv.close()


ODD = [
    (M.ANALYZE, {"path": "/tmp/a\0b.json"}),
    (M.ANALYZE, {"path": "file:///tmp/a%00b.json"}),
    (M.ANALYZE, {"path": ["x"]}),
    (M.ANALYZE, {"path": 5}),
    (M.ANALYZE, {"path": "x" * 200_000}),
    (M.REPORT, {"path": "/tmp/a\0b.json"}),
    (M.REPORT, {"path": "file:///tmp/%00"}),
    (M.REPORT, {"key": 5}),
    (M.REPORTS, {"path": "/tmp/a\0b"}),
    (M.RUN_WORKLOAD, {"workload": "matmul-bias", "params": {"n": "²"}}),
    (M.RUN_WORKLOAD, {"workload": "matmul-bias", "params": {"n": ["a", {}]}}),
    (M.RUN_WORKLOAD, ["matmul-bias"]),
    (M.RUN_WORKLOAD, {"workload": ["x"]}),
    (
        "textDocument/hover",
        {"textDocument": {"uri": "file:///tmp/a%00b.py"}, "position": {"line": 1, "character": 0}},
    ),
    ("textDocument/codeLens", {"textDocument": {"uri": "file:///tmp/a%00b.py"}}),
    (
        "textDocument/inlayHint",
        {
            "textDocument": {"uri": "file:///tmp/a%00b.py"},
            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 9, "character": 0}},
        },
    ),
    ("textDocument/diagnostic", {"textDocument": {"uri": "file:///tmp/a%00b.py"}}),
    ("workspace/executeCommand", {"command": M.CMD_ANALYZE, "arguments": ["/tmp/\0"]}),
    ("workspace/executeCommand", {"command": M.CMD_ANALYZE, "arguments": [["x"]]}),
]


async def test_odd_requests_get_plain_errors(core):
    """Each of these answered -32603 with the Python traceback in ``data`` (a NUL in a path,
    %00 in a URI, runWorkload with a list or n: "²"); now an answer, or InvalidParams (or
    the daemon's own codes) with a short plain message, the traceback in the log only."""
    from profd.client_cli.daemon_client import RpcError
    from profd.server.daemon import transport

    srv = transport.TcpServer(core, "127.0.0.1", 0, "t0ken")
    host, port = await srv.start()
    c = await connect({"host": host, "port": port, "token": "t0ken"})
    try:
        for method, params in ODD:
            try:
                await c.request(method, params, timeout=20)
            except RpcError as e:
                assert e.code != -32603, (method, params, e)
                assert "Traceback" not in str(e) and len(str(e)) < 1000, (method, str(e)[:300])
    finally:
        await c.close()
        await srv.close()


async def test_hostile_values_get_error_reports_over_tcp(daemon):
    paths = {k: put(daemon.watch, f"{k.replace(' ', '_')}.json", hostile(k)) for k in KINDS}
    await wait_status(daemon.doc, lambda st: st["reports"] == 3, "three reports")
    for k, p in paths.items():
        r = await ask_report(daemon.doc, p)
        assert r["error"] and r["error"].startswith(f"profd: bad trace {p}: "), (k, r["error"])
        got = await call(daemon.doc, M.ANALYZE, {"path": p})  # a Report, never -32603
        assert got["error"] == r["error"]
    out = subprocess.run(
        [CLIENT, "analyze", "--no-daemon", *paths.values()], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr and "Error:" not in out.stderr
    assert out.stderr.count("profd: bad trace") + out.stdout.count("profd: bad trace") >= 3


@pytest.mark.parametrize("served", ["stdio"], indirect=True)
async def test_hostile_values_and_own_options_over_stdio(served):
    """Items 4 and 6 as an editor's daemon sees them: a hostile file is a Report with an error
    (never -32603), and one request's options leave what the editor is shown alone."""
    d = await served().start()
    seed = drop(d.watch, "seed_n64_bf16")
    await await_for(lambda: d.lsp.diagnostics.get(uri(SEED_SRC)), 20, "diagnostics")
    bad = put(d.watch, "surrogate.json", hostile("lone surrogate"))
    assert "surrogate" in (await d.request(M.ANALYZE, {"path": bad}))["error"]
    full = await ask_report(d, seed)
    codes = sorted({x["code"] for x in full["diagnostics"]})
    mine = await d.request(M.ANALYZE, {"path": seed, "disabled": codes})
    assert mine["diagnostics"] == []
    again = await ask_report(d, seed)
    assert sorted({x["code"] for x in again["diagnostics"]}) == codes
    assert "overhead-bound" in {x.code for x in d.lsp.diagnostics[uri(SEED_SRC)]}


async def test_per_request_options_do_not_change_what_others_see(daemon):
    path = drop(daemon.watch, "seed_n64_bf16")
    viewer = await lsp_tcp_client(daemon.doc)
    try:
        await await_for(lambda: viewer.diagnostics.get(uri(SEED_SRC)), 20, "diagnostics")
        full = await ask_report(daemon.doc, path)
        codes = sorted({d["code"] for d in full["diagnostics"]})
        assert "overhead-bound" in codes
        mine = await call(daemon.doc, M.ANALYZE, {"path": path, "disabled": codes})
        assert mine["diagnostics"] == []
        mine = await call(daemon.doc, M.ANALYZE, {"path": path, "workspace": [os.getcwd()]})
        assert mine["trace"]["path"] == path
        pulled = await viewer.text_document_diagnostic_async(
            L.DocumentDiagnosticParams(text_document=L.TextDocumentIdentifier(uri=uri(SEED_SRC)))
        )
        assert "overhead-bound" in {x.code for x in pulled.items}
        assert sorted({d["code"] for d in (await ask_report(daemon.doc, path))["diagnostics"]}) == codes
        assert "overhead-bound" in {d.code for d in viewer.diagnostics[uri(SEED_SRC)]}
        listed = await call(daemon.doc, M.REPORTS, {"path": path})
        assert len(listed["reports"]) == 1  # the per-request results are not listed for others
    finally:
        await viewer.shutdown_session()
        await viewer.stop()


def _recv_all(s, timeout=10.0):
    """What the daemon sent until it closed the connection; None if it did not close it."""
    s.settimeout(timeout)
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        return None
    return out


async def test_strangers_time_out_are_capped_and_get_clean_errors(strict_daemon):
    d = strict_daemon
    doc = d.doc
    idle = [socket.create_connection((doc["host"], doc["port"])) for _ in range(80)]
    try:
        # the owner gets in past 80 idle strangers (the oldest are dropped for newcomers)
        assert (await call(doc, M.STATUS))["pid"] == doc["pid"]
        # and the strangers are closed once their second to authenticate is over
        assert _recv_all(idle[-1], 10) == b""
    finally:
        for s in idle:
            s.close()
    # an over-long header line: -32600, one line in the log, no traceback
    s = socket.create_connection((doc["host"], doc["port"]))
    s.sendall(b"X-Junk: " + b"x" * 70_000 + b"\r\n")
    answer = _recv_all(s)
    s.close()
    assert b'"code":-32600' in answer.replace(b" ", b"") and b"too long" in answer
    # a token that is not ASCII: refused like any wrong token (it used to drop the connection)
    with pytest.raises(RpcError) as e:
        await connect(doc, "tökén-✓" * 4)
    assert e.value.code == M.ERR_UNAUTHORIZED
    # a flood of refusals: rate-limited in the log
    for _ in range(60):
        with pytest.raises(RpcError):
            await connect(doc, "wrong")
    assert (await call(doc, M.STATUS))["pid"] == doc["pid"]
    log = d.log_text()
    assert "Traceback" not in log, log[-3000:]
    assert "header line is too long" in log
    assert 5 <= log.count("refused 127.0.0.1") <= 12, log.count("refused 127.0.0.1")
    assert "closed 127.0.0.1" in log and "no initialize with the token" in log


def test_over_long_header_on_stdio_is_answered(folders):
    watch, state = folders
    p = subprocess.Popen(
        serve_cmd(watch, state), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = p.communicate(b"X-Junk: " + b"x" * 100_000 + b"\r\n", timeout=60)
    assert b'"code":-32600' in out.replace(b" ", b""), out[:500]
    assert b"Traceback" not in err, err[-2000:]


def _frame(obj) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def _status(doc):
    c = await connect(doc)
    try:
        return await c.request(M.STATUS, {})
    finally:
        await c.close()


async def test_a_client_that_reads_nothing_does_not_grow_the_daemon(folders):
    """An authorised TCP client sending requests and never reading the answers: the daemon kept
    every answer in its write buffer (48 -> 610 MB for 13 MB of requests in 40 s, without end).
    Now it stops reading that client's requests until the client reads (back-pressure): the
    client's sends block, the daemon stays small, other clients are answered, and once the
    client reads, every answer it was owed comes, in order."""
    d = Daemon(*folders)
    d.start()
    s = socket.create_connection((d.doc["host"], d.doc["port"]))
    try:
        good = drop(d.watch, "seed_n4096_bf16")
        await wait_status(d.doc, lambda st: st["reports"] == 1, "a report to ask for")
        s.sendall(
            _frame(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {"capabilities": {}, "initializationOptions": {"token": d.doc["token"]}},
                }
            )
        )
        before = rss_mb(d.proc.pid)
        s.setblocking(False)
        batch, sent, n, stuck, since = b"", 0, 0, False, None
        deadline = time.monotonic() + 60
        while not stuck and time.monotonic() < deadline:
            if sent == len(batch):  # more requests (asking for the report, ~5 KB each)
                batch = b"".join(
                    _frame({"jsonrpc": "2.0", "id": n + i, "method": M.REPORT, "params": {"path": good}})
                    for i in range(1, 1001)
                )
                sent, n = 0, n + 1000
            try:
                sent += s.send(batch[sent:])
                since = None
            except BlockingIOError:
                since = since or time.monotonic()
                stuck = time.monotonic() - since > 3  # the daemon reads no more of ours
                await asyncio.sleep(0.02)
        assert stuck, f"the daemon took all {n} requests without an answer being read"
        grown = rss_mb(d.proc.pid) - before
        assert grown < 200, f"the daemon grew by {grown} MB"
        st = await asyncio.wait_for(_status(d.doc), 20)  # another client is answered
        assert st["reports"] == 1
        s.setblocking(True)
        s.settimeout(30)
        got, buf = [], b""
        while len(got) < 200:
            buf += s.recv(1 << 16)
            while b"\r\n\r\n" in buf:
                head, rest = buf.split(b"\r\n\r\n", 1)
                size = int(re.search(rb"Content-Length: *(\d+)", head, re.I).group(1))
                if len(rest) < size:
                    break
                got.append(json.loads(rest[:size]))
                buf = rest[size:]
        got = got[:200]
        assert [m.get("id") for m in got] == list(range(200))  # initialize's, then each in turn
        assert all(m["result"]["trace"]["path"] == good for m in got[1:])
    finally:
        s.close()
        d.stop()
    assert "Traceback" not in d.log_text()


async def test_a_client_never_reading_is_dropped_at_the_cap(core, monkeypatch, caplog):
    """In process, on a real loopback socket (the cap is 64 MB; here 256 KB, and back-pressure
    off, so that what a client never reads piles up as pushes to a frozen editor would): the
    client is disconnected at the cap with one line, and the next client is served."""
    from profd.server.daemon import transport

    monkeypatch.setattr(transport, "PAUSE_UNREAD", 1 << 40)
    monkeypatch.setattr(transport, "MAX_UNREAD", 256 << 10)
    good = drop(core.watch, "seed_n4096_bf16")
    await await_for_async(lambda: _known(core, good), "the report")
    srv = transport.TcpServer(core, "127.0.0.1", 0, "tok")
    host, port = await srv.start()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            _frame(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {"capabilities": {}, "initializationOptions": {"token": "tok"}},
                }
            )
        )
        for i in range(1, 2001):
            writer.write(_frame({"jsonrpc": "2.0", "id": i, "method": M.REPORT, "params": {"path": good}}))
            await asyncio.sleep(0)
        await await_for_async(lambda: _gone(srv), "the client dropped", timeout=60)
        assert any("has not read the last" in r.getMessage() for r in caplog.records)
        writer.close()
        from profd.client_cli.daemon_client import DaemonClient

        c = DaemonClient()
        await c.connect(host, port, "tok")
        assert (await c.request(M.REPORT, {"path": good}))["trace"]["path"] == good
        await c.close()
    finally:
        await srv.close()


async def _known(core, path) -> bool:
    return core.index.key_of_trace(path) is not None


async def _gone(srv) -> bool:
    return not srv.tasks
