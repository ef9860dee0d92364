"""Issue 17: a daemon that no input can stop. Each item reproduced on the real daemon, ``profd
serve`` over TCP and over stdio (spawned by an LSP client, as an editor does), plus the
engine-level checks that decide it (one decision per input on both decoder paths, bounded work).
A test taking ``served`` runs its one scenario on both transports (``daemon_util.Served``); where
the transport itself is the subject (stopping, strangers, headers) each has its own case.

Inputs are real shipped traces, edited where the attack needs it (a frame naming a FIFO, an
overflowing number); the bombs are synthetic by nature (nothing a profiler writes) and say so.
"""
import asyncio
import errno
import gzip
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import time

import pytest
from lsprotocol import types as L

from conftest import SRC
from daemon_util import (PY, Daemon, Served, alive, await_for, call, child_pids, connect, drop,
                         lsp_tcp_client, put, serve_cmd, trace_bytes, uri, variant, write_flood)

from profd.client_cli.daemon_client import RpcError
from profd.protocol import methods as M
from profd.server.engine import loader, passes

SEED_SRC = os.path.join(SRC, "seed_matmul.py")
CLIENT = os.path.join(os.path.dirname(sys.executable), "profd-client")


# ---- helpers ------------------------------------------------------------------------------------
def seed_doc() -> dict:
    return json.loads(gzip.decompress(trace_bytes("seed_n64_bf16")))


def gz_repeat(head: bytes, filler: bytes, times: int, tail: bytes = b"") -> bytes:
    """Synthetic bomb: gzip members ``head``, ``filler`` x ``times`` (one member, repeated), ``tail``:
    a few KB on disk that inflate to ``len(filler) * times`` bytes, built without inflating."""
    member = gzip.compress(filler, 9)
    return gzip.compress(head, 9) + member * times + (gzip.compress(tail, 9) if tail else b"")


MB16 = 16 << 20


async def ask(src, method, params=None):
    """A request to a daemon: through a ``Served``'s own client, or a connection to the TCP
    daemon of a daemon.json ``doc``."""
    return await (src.request(method, params) if isinstance(src, Served) else
                  call(src, method, params))


async def wait_status(src, pred, what, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        st = await ask(src, M.STATUS)
        if pred(st):
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {st}")
        await asyncio.sleep(0.05)


async def report_of(src, path):
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


# ---- 1. a frame naming a FIFO or /dev/zero --------------------------------------------------------
def trace_naming(path: str) -> bytes:
    """The real seed trace with its user frames pointing at ``path`` (edited: the attack)."""
    raw = gzip.decompress(trace_bytes("seed_n64_bf16")).replace(b'"seed_matmul.py(',
                                                              f'"{path}('.encode())
    return gzip.compress(raw)


async def test_fifo_and_dev_zero_as_source(served, tmp_path):
    d = await served().start()
    fifo = str(tmp_path / "fifo.py")
    os.mkfifo(fifo)
    traces = [put(d.watch, "fifo.json.gz", trace_naming(fifo)),
              put(d.watch, "zero.json.gz", trace_naming("/dev/zero"))]
    await wait_status(d, lambda st: st["reports"] == 2, "two reports")
    for _ in range(2):  # it used to recur on every reconnect: initialized publishes everything
        c = d.lsp
        for t in traces:  # not files here: the findings land on the trace, with the frame named
            diags = await await_for(lambda: c.diagnostics.get(uri(t)), 10, "diagnostics")
            assert any(fifo in x.message or "/dev/zero" in x.message for x in diags)
        for src in (fifo, "/dev/zero"):  # an editor asking about them is answered at once
            hover = await asyncio.wait_for(c.text_document_hover_async(L.HoverParams(
                text_document=L.TextDocumentIdentifier(uri=uri(src)),
                position=L.Position(20, 0))), 10)
            assert hover is None or hover.contents
            lens = await asyncio.wait_for(c.text_document_code_lens_async(L.CodeLensParams(
                text_document=L.TextDocumentIdentifier(uri=uri(src)))), 10)
            assert lens is not None
        await d.reconnect()
    assert (await d.request(M.STATUS))["reports"] == 2


def test_engine_never_reads_a_fifo_as_source(tmp_path):
    from profd.server.engine.sourcemap import source_lines
    fifo = str(tmp_path / "src.py")
    os.mkfifo(fifo)
    assert source_lines(fifo) == () and source_lines("/dev/zero") == ()


# ---- 2. linear time, per-analysis budgets, a stop that stops ------------------------------------
def _offered(monkeypatch, path) -> tuple[int, int]:
    """(bytes handed to the scanner over all its calls, inflated size) for loading ``path``."""
    orig = passes.native().Scanner
    seen = [0]

    class Counting:
        def __init__(self, *a):
            self.s = orig(*a)

        def scan(self, buf, pos, final):
            seen[0] += len(buf) - pos
            return self.s.scan(buf, pos, final)

        @property
        def total(self):
            return self.s.total

    monkeypatch.setattr(passes.native(), "Scanner", Counting)
    _, _, size = loader.load(path)
    return seen[0], size


EV = b'{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":2,"pid":1,"tid":1}'


@pytest.mark.parametrize("shape", ["blanks between events", "blanks inside an event", "long name"])
def test_scanner_work_is_linear(tmp_path, monkeypatch, shape):
    """Synthetic: 48 MB of one token. The scanner is offered each byte a bounded number of times
    (it was offered the whole pending event again with every 2 MB block: quadratic)."""
    if passes.native() is None:
        pytest.skip("scanner not built")
    n = 48 << 20
    body = {"blanks between events": EV + b"," + b" " * n + EV,
            "blanks inside an event": EV + b',{"ph":"X",' + b" " * n + b'"name":"b"}',
            "long name": EV + b',{"ph":"X","name":"' + b"x" * n + b'"}'}[shape]
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents":[' + body + b"]}")
    offered, size = _offered(monkeypatch, str(p))
    assert offered <= 4 * size, (offered, size)
    doc, _, _ = loader.load(str(p))
    assert len(doc.traceEvents) == 2  # every complete (X) event is kept, whatever its category (loader.KEEP)


BUDGETS = ("--analysis-mb", "400", "--analysis-timeout", "5")


async def test_budgets_end_the_analysis_with_an_error_report_once(served):
    """Synthetic bombs (a few MB of gzip each): a 2 GB name behind an escaped key (the scanner
    declines it, so the whole-buffer decoder inflates it all: memory) and 8 GB of blanks inside
    the events (time). Each ends with an error report naming its budget, the other worker goes
    on, a good trace after them gets its diagnostics, and a restart does not queue them again."""
    d = await served(*BUDGETS).start()
    name = put(d.watch, "name.json.gz", gz_repeat(b'{"traceEvents":[{"n\\u0061me":"',
                                                  b"x" * MB16, 128, b'"}]}'))
    blank = put(d.watch, "blank.json.gz", gz_repeat(b'{"traceEvents":[', b" " * MB16, 512, b"]}"))
    await wait_status(d, lambda st: st["reports"] == 2, "the bombs' reports", timeout=60)
    r = await report_of(d, name)
    assert "memory budget" in r["error"] and "--analysis-mb" in r["error"], r["error"]
    r = await report_of(d, blank)
    assert "budget per analysis" in r["error"] and "--analysis-timeout" in r["error"], r["error"]
    good = drop(d.watch, "seed_n64_bf16")
    await await_for(lambda: d.lsp.diagnostics.get(uri(SEED_SRC)), 30, "the good trace's diagnostics")
    assert (await report_of(d, good))["error"] is None
    await d.restart()
    await await_for(lambda: d.lsp.diagnostics.get(uri(SEED_SRC)), 20, "diagnostics from the store")
    await asyncio.sleep(1.5)  # what a restart would re-queue has been queued by now
    st = await d.request(M.STATUS)
    assert st["analyses"] == 0 and st["reports"] == 3 and st["running"] == 0


@pytest.mark.parametrize("way", ["profd stop", "LSP exit", "stdin closed"])
async def test_stop_stops_the_daemon_and_its_busy_workers(folders, way):
    """Both workers busy for minutes, then the daemon is told to stop: ``profd stop`` on a
    ``profd start`` (TCP) daemon with an editor connected, or (stdio) its editor's shutdown and
    exit, or its editor gone (stdin closed). The daemon exits at once and takes its busy
    workers with it, and logs no error for it."""
    watch, state = folders
    served = editor = None
    if way == "profd stop":
        env = dict(os.environ, PROFD_STATE=str(state))
        subprocess.run([PY, "-m", "profd.server.daemon.cli", "start", "--watch", str(watch),
                        "--state", str(state), "--analysis-timeout", "600"], check=True, env=env,
                       capture_output=True, timeout=60)
        src = json.load(open(os.path.join(state, "daemon.json")))
        pid = src["pid"]
    else:
        src = served = await Served("stdio", watch, state, "--analysis-timeout", "600").start()
        pid = served.pid
    try:
        # Synthetic: 64 GB of blanks in ~70 KB of gzip, both workers on it for minutes.
        bomb = gz_repeat(b'{"traceEvents":[', b" " * MB16, 4096, b"]}")
        put(watch, "b1.json.gz", bomb)
        put(watch, "b2.json.gz", bomb + gzip.compress(b" "))
        st = await wait_status(src, lambda st: st["running"] == 2, "both running")
        assert st["pid"] == pid
        workers = child_pids(pid)
        assert len(workers) >= 2, workers
        if way == "profd stop":
            editor = await lsp_tcp_client(src)
            out = subprocess.run([PY, "-m", "profd.server.daemon.cli", "stop", "--state",
                                  str(state)], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0 and "stopped" in out.stdout, out
            with open(os.path.join(state, "daemon.log")) as f:  # the daemon's own, rotated, log
                log = f.read()
            assert "listening on" in log
        elif way == "LSP exit":
            await asyncio.wait_for(served.lsp.shutdown_session(), 20)  # shutdown, exit, its end
        else:
            served.lsp._server.stdin.close()
            await asyncio.wait_for(served.lsp._server.wait(), 20)
        assert not alive(pid)
        await await_for(lambda: not any(alive(w) for w in workers), 5, "the workers gone")
        log = log if editor else served.log_text()
        assert " ERROR " not in log and "Traceback" not in log, log
    finally:
        if editor:
            await editor.stop()
        for p in [pid, *child_pids(pid)]:
            try:
                os.kill(p, 9)
            except OSError:
                pass
        if served:
            await served.stop()


async def test_an_allocation_faster_than_the_poll_meets_the_ceiling():
    """The daemon polls a worker's RSS every 50 ms; one allocation can outrun that (a buffer
    doubled at once, or memory reserved before it is touched, which RSS does not show). Each
    worker also has a hard heap ceiling a quarter above its budget: a task reserving 2 GB under a
    400 MB budget ends with the budget's error, and the next task runs on a fresh worker. (The task
    is ``eval`` of an allocation: a stand-in for what a hostile trace makes the reader do.)"""
    from profd.server.daemon.pool import Budget, WorkerPool
    pool = WorkerPool(1, True, 60.0, 400 << 20)
    try:
        with pytest.raises(Budget, match="over the 400 MB memory budget .*--analysis-mb"):
            await pool.run(eval, "len(bytes(2 << 30))")
        assert await pool.run(eval, "len(bytes(1 << 20))") == 1 << 20
    finally:
        pool.close()


async def test_a_budget_error_is_tried_again_under_a_bigger_budget(folders):
    """A trace ended by its memory budget keeps that error across restarts under the same budget
    (a bomb is not re-run at every start), and is analysed again, once, when the daemon comes back
    with a bigger one: the error said to raise --analysis-mb, so raising it must help. The trace
    is the real seed trace with 256 MB of blanks after ``"traceEvents": [`` (edited: it must run
    past the daemon's first 50 ms look at the worker); in-process Cores on one real store."""
    from profd.server.daemon.core import Config, Core
    watch, state = folders
    raw = gzip.decompress(trace_bytes("seed_n64_bf16"))
    i = raw.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    path = put(watch, "slow.json.gz", gz_repeat(raw[:i], b" " * MB16, 16, raw[i:]))

    async def run(mb: int):
        c = Core(Config(watch=str(watch), workspace=[SRC], state=str(state), workers=1,
                        settle=0.1, quiet=0.5, analysis_mb=mb))
        await c.start()
        try:
            await await_for(lambda: c.index.key_of_trace(path) in c.index and c.intake.queued == 0 and
                            c.running == 0, 60, "the trace's report")
            await asyncio.sleep(0.3)
            return c.analyses, c.index.row(c.index.key_of_trace(path)).error
        finally:
            await c.stop()

    n, err = await run(1)  # 1 MB: any analysis is over it
    assert n == 1 and "over the 1 MB memory budget" in err, err
    assert await run(1) == (0, err)  # the same budget: not tried again
    n, err = await run(0)  # the default budget (>= 1 GiB)
    assert n == 1 and err is None, err
    assert await run(0) == (0, None)


# ---- 3. what byte 0 says is said before inflating -------------------------------------------------
async def test_nul_bomb_is_refused_for_its_first_byte(served):
    """Synthetic: 2 GB of NULs in 2 MB of gzip, under a 400 MB budget: refused as not JSON (the
    fallback inflated all of it, 2.1 GB, to say so), the header bomb likewise."""
    d = await served(*BUDGETS).start()
    nuls = put(d.watch, "nuls.json.gz", gz_repeat(b"\0", b"\0" * MB16, 128))
    head = put(d.watch, "head.json.gz", gz_repeat(b'{"x":"', b"a" * MB16, 128,
                                                  b'","traceEvents":[]}'))
    await wait_status(d, lambda st: st["reports"] == 2, "two error reports")
    assert "not JSON" in (await report_of(d, nuls))["error"]
    assert "no 'traceEvents' array in the first 64 MB" in (await report_of(d, head))["error"]


# ---- 4. one decision per input --------------------------------------------------------------------
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


@pytest.mark.parametrize("kind", KINDS)
def test_native_and_python_decide_alike(tmp_path, monkeypatch, kind):
    p = str(tmp_path / "t.json")
    with open(p, "wb") as f:
        f.write(hostile(kind))
    errors = []
    for native in (True, False):
        with monkeypatch.context() as mp:
            if not native:
                mp.setattr(passes, "enabled", False)
            with pytest.raises(loader.TraceError) as e:
                loader.load(p)
            errors.append(str(e.value))
    assert errors[0] == errors[1]
    assert {"lone surrogate": "surrogate", "overflow": "out of range",
            "deep": "nested too deeply"}[kind] in errors[0]


def test_a_second_trace_events_key_decides_alike(tmp_path, monkeypatch):
    """Found by the campaign: the header repeated after the events (the real seed trace with a
    range duplicated, so "traceEvents" comes twice). msgspec keeps the last array; the streamed
    path took the first. Now it declines and both give the last one."""
    raw = gzip.decompress(trace_bytes("seed_n64_bf16"))
    i = raw.index(b'"traceEvents"')
    doc = raw[:-1] + b', "traceEvents": [' + EV + b"]}"
    assert raw[i:].count(b'"traceEvents"') == 1
    p = str(tmp_path / "t.json")
    with open(p, "wb") as f:
        f.write(doc)
    native = loader.load(p)[0]
    monkeypatch.setattr(passes, "enabled", False)
    python = loader.load(p)[0]
    assert [e.name for e in native.traceEvents] == [e.name for e in python.traceEvents] == ["a"]


async def test_hostile_values_get_error_reports_over_tcp(daemon):
    paths = {k: put(daemon.watch, f"{k.replace(' ', '_')}.json", hostile(k)) for k in KINDS}
    await wait_status(daemon.doc, lambda st: st["reports"] == 3, "three reports")
    for k, p in paths.items():
        r = await report_of(daemon.doc, p)
        assert r["error"] and r["error"].startswith(f"profd: bad trace {p}: "), (k, r["error"])
        got = await call(daemon.doc, M.ANALYZE, {"path": p})  # a Report, never -32603
        assert got["error"] == r["error"]
    out = subprocess.run([CLIENT, "analyze", "--no-daemon", *paths.values()], capture_output=True,
                         text=True, timeout=120)
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
    full = await report_of(d, seed)
    codes = sorted({x["code"] for x in full["diagnostics"]})
    mine = await d.request(M.ANALYZE, {"path": seed, "disabled": codes})
    assert mine["diagnostics"] == []
    again = await report_of(d, seed)
    assert sorted({x["code"] for x in again["diagnostics"]}) == codes
    assert "overhead-bound" in {x.code for x in d.lsp.diagnostics[uri(SEED_SRC)]}


# ---- 5. dedup keeps the index in memory right ---------------------------------------------------
async def test_same_content_second_name_and_a_b_a(served):
    d = await served().start()
    a, b = variant("seed_n64_bf16", 1), variant("seed_n64_bf16", 2)
    sha = {k: hashlib.sha256(gzip.decompress(v)).hexdigest() for k, v in (("a", a), ("b", b))}
    first = put(d.watch, "first.json.gz", a)
    await wait_status(d, lambda st: st["reports"] == 1, "first report")
    second = put(d.watch, "second.json.gz", a)
    r = await await_for_async(lambda: report_of(d, second), "second name's report")
    assert r["trace"]["path"] == second and r["trace"]["sha256"] == sha["a"]
    listed = await d.request(M.REPORTS, {"path": second})
    assert len(listed["reports"]) == 1 and listed["reports"][0]["newest"]
    x = put(d.watch, "x.json.gz", a)
    for content, want in ((b, "b"), (a, "a")):
        time.sleep(0.02)  # a new mtime
        put(d.watch, "x.json.gz", content)
        await await_for_async(lambda: _sha_is(d, x, sha[want]), f"x serving {want}")
    st = await d.request(M.STATUS)
    assert st["analyses"] == 2  # a and b, once each
    assert (await report_of(d, first))["trace"]["path"] == first


async def _sha_is(src, path, sha):
    r = await report_of(src, path)
    return r if r and r["trace"]["sha256"] == sha else None


async def await_for_async(coro_fn, what, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        v = await coro_fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# ---- 6. one client's options are its own ----------------------------------------------------------
async def test_per_request_options_do_not_change_what_others_see(daemon):
    path = drop(daemon.watch, "seed_n64_bf16")
    viewer = await lsp_tcp_client(daemon.doc)
    try:
        await await_for(lambda: viewer.diagnostics.get(uri(SEED_SRC)), 20, "diagnostics")
        full = await report_of(daemon.doc, path)
        codes = sorted({d["code"] for d in full["diagnostics"]})
        assert "overhead-bound" in codes
        mine = await call(daemon.doc, M.ANALYZE, {"path": path, "disabled": codes})
        assert mine["diagnostics"] == []
        mine = await call(daemon.doc, M.ANALYZE, {"path": path, "workspace": [os.getcwd()]})
        assert mine["trace"]["path"] == path
        pulled = await viewer.text_document_diagnostic_async(L.DocumentDiagnosticParams(
            text_document=L.TextDocumentIdentifier(uri=uri(SEED_SRC))))
        assert "overhead-bound" in {x.code for x in pulled.items}
        assert sorted({d["code"] for d in (await report_of(daemon.doc, path))["diagnostics"]}) \
            == codes
        assert "overhead-bound" in {d.code for d in viewer.diagnostics[uri(SEED_SRC)]}
        listed = await call(daemon.doc, M.REPORTS, {"path": path})
        assert len(listed["reports"]) == 1  # the per-request results are not listed for others
    finally:
        await viewer.shutdown_session()
        await viewer.stop()


# ---- 7. strangers: timeouts, caps, odd headers and tokens ----------------------------------------
@pytest.fixture
def strict_daemon(folders):
    d = Daemon(*folders, "--auth-timeout", "1")
    d.start()
    yield d
    d.stop()


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
    p = subprocess.Popen(serve_cmd(watch, state), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out, err = p.communicate(b"X-Junk: " + b"x" * 100_000 + b"\r\n", timeout=60)
    assert b'"code":-32600' in out.replace(b" ", b""), out[:500]
    assert b"Traceback" not in err, err[-2000:]


# ---- 8. bad files do not hold up good ones --------------------------------------------------------
async def test_bad_files_do_not_starve_a_good_one(served):
    """40 unparseable files, each waiting --quiet 6 s before its error report, then a real trace:
    it is reported before any of them (each used to hold an intake worker for its wait)."""
    d = await served("--quiet", "6").start()
    for i in range(40):
        put(d.watch, f"bad{i:02d}.json", b'{"traceEvents":[{"ph":"X",' + b" " * i)
    good = drop(d.watch, "seed_n64_bf16")
    await await_for(lambda: any(r["path"] == good for r in d.ready), 30, "the good report")
    assert d.ready[0]["path"] == good and d.ready[0]["error"] is None, d.ready[:3]
    assert d.lsp.diagnostics.get(uri(SEED_SRC))


async def _ready(c, path):
    await asyncio.sleep(0.05)
    return any(n.get("method") == M.REPORT_READY and n["params"]["path"] == path
               for n in c.notifications)


# ---- 9. a store that heals ------------------------------------------------------------------------
async def test_garbage_or_truncated_store_is_moved_aside_and_rebuilt(served):
    d = served()
    drop(d.watch, "seed_n64_bf16")
    drop(d.watch, "seed_n4096_bf16")
    os.makedirs(d.state)
    db = os.path.join(d.state, "profd.sqlite3")
    with open(db, "wb") as f:
        f.write(os.urandom(20_000))
    await d.start()
    await wait_status(d, lambda st: st["reports"] == 2, "rebuilt")
    assert len(_moved_aside(d.state)) == 1
    assert "moved it to" in d.log_text()
    await d.stop()
    with open(db, "r+b") as f:  # a good store, truncated
        f.truncate(os.path.getsize(db) // 2)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.unlink(db + suffix)
    await d.start()
    await wait_status(d, lambda st: st["reports"] == 2, "rebuilt again")
    assert len(_moved_aside(d.state)) == 2
    await await_for(lambda: d.lsp.diagnostics.get(uri(SEED_SRC)), 20, "diagnostics")


def _moved_aside(state) -> list:
    return [n for n in os.listdir(state) if n.startswith("profd.sqlite3.bad-")]


async def test_reports_that_do_not_decode_are_analysed_again(served):
    d = served()
    path = drop(d.watch, "seed_n64_bf16")
    await d.start()
    await wait_status(d, lambda st: st["reports"] == 1, "a report")
    await d.stop()
    con = sqlite3.connect(os.path.join(d.state, "profd.sqlite3"))
    con.execute("UPDATE reports SET report = randomblob(300)")
    con.commit()
    con.close()
    await d.start()  # its client's initialized publishes: the garbage is found
    await await_for(lambda: d.lsp.diagnostics.get(uri(SEED_SRC)), 30, "re-analysed")
    r = await report_of(d, path)
    assert r["error"] is None and r["diagnostics"]
    assert (await d.request(M.STATUS))["analyses"] == 1
    assert "does not decode" in d.log_text()


def mount_or_skip(*args) -> None:
    r = subprocess.run(["mount", *args], capture_output=True, text=True) \
        if shutil.which("mount") else None
    if r is None or r.returncode:
        pytest.skip("cannot mount here (needs mount(8), root and CAP_SYS_ADMIN): "
                    f"{r.stderr.strip() if r else 'no mount'}")


def umount(path) -> None:
    if shutil.which("umount"):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    """A real filesystem of 8 MB (tmpfs) for the state: filled, it is a full disk. Where mounting
    is refused, the in-process tests below stand in."""
    fs = tmp_path / "disk"
    fs.mkdir()
    mount_or_skip("-t", "tmpfs", "-o", "size=8m", "tmpfs", str(fs))
    try:
        yield fs
    finally:
        umount(fs)


@pytest.fixture(params=["a stored report", "no store"])
async def read_only_state(request, folders):
    """The state of a daemon that analysed the real seed trace (or an empty state dir), made
    read-only by a read-only bind mount on itself (root cannot write it either). The seed
    trace's path, or None."""
    watch, state = folders
    seed = None
    if request.param == "a stored report":
        seed = drop(watch, "seed_n64_bf16")
        d = await Served("stdio", watch, state).start()
        await wait_status(d, lambda st: st["reports"] == 1, "a report")
        await d.stop()
    else:
        os.makedirs(state)
    try:
        mount_or_skip("--bind", str(state), str(state))
        mount_or_skip("-o", "remount,ro,bind", str(state))
        yield seed
    finally:
        umount(state)


def fill(folder) -> str:
    """Fill the filesystem of ``folder`` to its last block; the filler's path."""
    path = os.path.join(str(folder), "filler")
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 1 << 16, 1 << 12, 1 << 9):
            try:
                while True:
                    f.write(b"\xff" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
    return path


async def test_full_disk_keeps_reports_and_saves_them_when_space_returns(served, small_disk,
                                                                        tmp_path):
    """The state on a real filesystem filled to the last block (the log beside it, elsewhere,
    to be read): 30 traces dropped then are all served, from memory; once there is room again
    they are saved (a restart analyses nothing)."""
    d = await served(state=small_disk / "state", log=tmp_path / "daemon.log").start()
    filler = fill(small_disk)
    paths = [put(d.watch, f"t{i:02d}.json.gz", variant("seed_n64_bf16", i)) for i in range(30)]
    await wait_status(d, lambda st: st["reports"] == 30 and st["queued"] == st["running"] == 0,
                      "30 reports", timeout=120)
    for p in paths:
        r = await report_of(d, p)
        assert r["error"] is None and r["trace"]["path"] == p and r["diagnostics"], p
    assert d.lsp.diagnostics.get(uri(SEED_SRC))
    assert "cannot write the results store" in d.log_text()
    os.unlink(filler)  # room again
    await await_for(lambda: "all reports saved" in d.log_text(), 30, "the reports saved")
    await d.restart()
    await asyncio.sleep(1.0)
    st = await d.request(M.STATUS)
    assert st["reports"] == 30 and st["analyses"] == 0, st


@pytest.mark.parametrize("served", ["stdio"], indirect=True)
async def test_read_only_state_is_served_as_it_is_over_stdio(served, read_only_state, tmp_path):
    """An editor's daemon on a state it cannot write (it died at start with a traceback, failing
    to move the 'bad' store aside): a stored report is served without analysing it again, a
    new trace is analysed and served from memory, one clear line says why."""
    seed = read_only_state
    d = await served(log=tmp_path / "daemon.log").start()
    if seed:
        await await_for(lambda: d.lsp.diagnostics.get(uri(SEED_SRC)), 20, "stored diagnostics")
        assert (await report_of(d, seed))["error"] is None
    st = await d.request(M.STATUS)
    assert st["reports"] == (1 if seed else 0) and st["analyses"] == 0, st
    new = drop(d.watch, "seed_n4096_bf16")
    r = await await_for_async(lambda: report_of(d, new), "the new trace's report")
    assert r["error"] is None and r["diagnostics"]
    assert d.lsp.diagnostics.get(uri(SEED_SRC))
    log = d.log_text()
    assert "cannot be written" in log, log
    assert ("serving it read-only" if seed else "from memory") in log, log
    assert "Traceback" not in log


async def test_read_only_state_is_refused_clearly_over_tcp(read_only_state, folders):
    """A TCP daemon is found through STATE/daemon.json: on a read-only state it says so and
    exits 2 (it died with a traceback)."""
    out = subprocess.run(serve_cmd(*folders, transport=("--tcp", "127.0.0.1:0")),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out
    assert "cannot write" in out.stderr and "writable --state" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr, out.stderr


@pytest.fixture
async def core(folders):
    from profd.server.daemon.core import Config, Core
    watch, state = folders
    c = Core(Config(watch=str(watch), workspace=[SRC], state=str(state), workers=2,
                    settle=0.1, quiet=0.5))
    c.index.retry_s = 0.3
    await c.start()
    c.watch = str(watch)
    yield c
    await c.stop()


async def test_store_at_its_page_cap_keeps_reports_in_process(core):
    """In process, for where no filesystem can be mounted (the real full disk: the tmpfs test
    above): SQLite's page cap gives the same SQLITE_FULL error on every write."""
    pages = core.index.store._db.execute("PRAGMA page_count").fetchone()[0]
    core.index.store._db.execute(f"PRAGMA max_page_count={pages}")
    paths = [put(core.watch, f"t{i:02d}.json.gz", variant("seed_n64_bf16", i)) for i in range(30)]
    await await_for(lambda: len(core.index) == 30, 60, "30 reports in memory")
    assert all(core.index.report(core.index.key_of_trace(p)) is not None for p in paths)
    assert core.index.store.count() < 30 and core.index.pending_writes
    core.index.store._db.execute("PRAGMA max_page_count=1073741823")  # space again
    await await_for(lambda: core.index.store.count() == 30 and not core.index.pending_writes, 10, "all saved")


async def test_store_turning_read_only_in_use_keeps_serving(core):
    """A store that stops taking writes while the daemon runs (a ``mode=ro`` connection: a
    filesystem cannot be remounted read-only under a file open for writing)."""
    core.index.store._db.close()
    core.index.store._db = sqlite3.connect(f"file:{core.index.store.path}?mode=ro", uri=True,
                                     check_same_thread=False, isolation_level=None)
    path = drop(core.watch, "seed_n64_bf16")
    await await_for(lambda: core.index.key_of_trace(path) is not None, 30, "a report in memory")
    _, diags = core.diagnostics_for(SEED_SRC)
    assert any(x.code == "overhead-bound" for x in diags) and core.index.pending_writes


# ---- 10. symlinks, state dir, logs ----------------------------------------------------------------
async def test_symlinks_out_of_the_folder_are_not_followed(served, tmp_path):
    d = served()
    os.makedirs(d.state, mode=0o755)
    os.chmod(d.state, 0o755)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "t.json.gz").write_bytes(trace_bytes("seed_n64_bf16"))
    await d.start()
    assert stat.S_IMODE(os.stat(d.state).st_mode) == 0o700
    os.symlink(os.path.join(d.state, "profd.sqlite3"), os.path.join(d.watch, "db.json"))
    os.symlink(outside / "t.json.gz", os.path.join(d.watch, "out.json.gz"))
    real = drop(d.watch, "seed_n4096_bf16")
    await wait_status(d, lambda st: st["reports"] == 1, "the real file's report")
    await asyncio.sleep(1.0)  # the symlinks' events have been seen by now
    listed = await d.request(M.REPORTS, {})
    assert [r["path"] for r in listed["reports"]] == [real]
    assert [r["path"] for r in d.ready] == [real]
    assert "a symlink out of the watched folder" in d.log_text()


def test_rate_limit_sums_up_what_it_dropped():
    import logging
    from profd.server.daemon.cli import RateLimit
    f = RateLimit(burst=3, window=0.2)
    recs = [logging.LogRecord("profd", logging.WARNING, "", 0, "refused %s", ("x",), None)
            for _ in range(10)]
    assert [f.filter(r) for r in recs] == [True] * 3 + [False] * 7
    time.sleep(0.25)
    r = logging.LogRecord("profd", logging.WARNING, "", 0, "refused %s", ("x",), None)
    assert f.filter(r) and "7 more like this" in r.getMessage()


# ---- the flood of the "Done when" ---------------------------------------------------------
FLOOD = int(os.environ.get("PROFD_FLOOD_FILES", "1000"))


async def test_flood_with_duplicates_renames_aba_and_invalid_files(folders):
    """1,000 files in under 10 s: 25% invalid, duplicates under new names, renames, A->B->A on
    one name; then a good trace. Every path ends with the report of its current content, each
    content is analysed once, and the good trace dropped last is analysed before the backlog."""
    watch, state = folders
    d = Daemon(watch, state, "--quiet", "0.5")
    d.start()
    c = await connect(d.doc)
    try:
        t0 = time.monotonic()
        contents = write_flood(watch, FLOOD)  # path -> bytes now there
        written = time.monotonic() - t0
        good = drop(watch, "seed_n4096_bf16")
        contents[good] = trace_bytes("seed_n4096_bf16")
        t_good = time.monotonic()
        await await_for_async(lambda: _ready(c, good), "the good trace", timeout=120)
        latency = time.monotonic() - t_good
        st_then = await c.request(M.STATUS, {})
        distinct = {hashlib.sha256(v).hexdigest() for v in contents.values()}

        async def settled():
            st = await c.request(M.STATUS, {})
            return st if st["queued"] == 0 and st["running"] == 0 and \
                st["analyses"] >= len(distinct) else None
        st = await await_for_async(settled, "the flood analysed", timeout=300)
        await asyncio.sleep(1.0)
        st = await c.request(M.STATUS, {})
        assert st["analyses"] == len(distinct), (st["analyses"], len(distinct))
        for p, data in contents.items():
            r = await c.request(M.REPORT, {"path": p})
            assert r is not None, p
            raw = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
            if r["error"] is None:
                assert r["trace"]["sha256"] == hashlib.sha256(raw).hexdigest(), p
            else:
                assert raw.startswith(b'{"traceEvents":[{"ph":"X","name":"'), p
        assert st_then["queued"] + st_then["running"] > 0 or st_then["analyses"] < len(distinct), \
            "the good trace was not reported ahead of the backlog"
        print(f"\nflood: {len(contents)} paths written in {written:.2f} s, {len(distinct)} "
              f"contents, good trace reported {latency:.2f} s after its drop "
              f"(backlog then: {st_then['queued']} queued), all analysed once")
    finally:
        await c.close()
        d.stop()
