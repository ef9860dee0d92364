"""Issue 17, second round (the red team's): inputs the first round did not cover, each on the real
daemon (``profd serve`` over TCP and stdio, real SQLite, real watchdog/inotify) where the
transport matters. Before the fixes each of these stopped, froze or grew the daemon, or lost or
mislabelled a report (numbers in notes/issue-17-redteam.md).

The inputs are synthetic by nature, and say so: file names that are not UTF-8, folders nested
deeper than Python's recursion limit, sparse 16 MB "source files", a client that reads nothing.
The traces are the shipped seed traces (renamed or with their frames pointed elsewhere), or a
small synthetic one where a trace must name hundreds of source files.
"""
import asyncio
import gzip
import json
import os
import re
import socket
import subprocess
import time

import pytest

from conftest import SRC
from daemon_util import (Daemon, _daemon_doc, connect, drop, put, serve_cmd, trace_bytes,
                         variant, wait_for)
from test_daemon_hostile import (await_for_async, core, folders, served,  # noqa: F401 (fixtures)
                                 wait_status)

from profd.protocol import methods as M


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(x.split()[1]) >> 10 for x in f if x.startswith("VmRSS"))


# ---- file names that are not UTF-8 ----------------------------------------------------------------
async def test_names_that_are_not_utf8_are_skipped_not_failed(served, tmp_path):
    """A trace whose name is not UTF-8 in the watched folder raised UnicodeEncodeError in the
    store (a traceback, no report, no word to the user); a workspace folder so named made a
    good trace whose frame matched a file in it an error report ("the analysis failed:
    UnicodeEncodeError"). Now the first is skipped with one clear line, the second's frame is
    not matched there, and the good traces are reported."""
    ws = os.path.join(os.fsencode(str(tmp_path)), b"ws")
    os.makedirs(os.path.join(ws, b"d\xff"))
    with open(os.path.join(SRC, "seed_matmul.py"), "rb") as f:
        src = f.read()
    with open(os.path.join(ws, b"d\xff", b"only_here.py"), "wb") as f:
        f.write(src)
    d = served("--workspace", os.fsdecode(ws))
    await d.start()
    with open(os.path.join(os.fsencode(d.watch), b"bad\xff\xfe.json.gz"), "wb") as f:
        f.write(trace_bytes("seed_n64_bf16"))
    raw = gzip.decompress(trace_bytes("seed_n4096_bf16"))
    named = put(d.watch, "named.json.gz", gzip.compress(
        raw.replace(b'"seed_matmul.py(', b'"only_here.py(')))
    good = drop(d.watch, "seed_n4096_bf16")
    await wait_status(d, lambda st: st["reports"] == 2 and st["queued"] == 0, "two reports")
    listed = await d.request(M.REPORTS, {})
    assert sorted(r["path"] for r in listed["reports"]) == sorted([good, named])
    assert all(r["error"] is None for r in listed["reports"]), listed
    log = d.log_text()
    assert "its name is not UTF-8" in log and "Traceback" not in log


async def test_a_second_name_is_listed_under_its_own_name(served):
    """``profd/reports {path}`` for a content first seen under another name answered that other
    name's entry (the client showed the wrong file); now the entry names the path asked for."""
    d = served()
    await d.start()
    first = drop(d.watch, "seed_n4096_bf16")
    await wait_status(d, lambda st: st["reports"] == 1, "the first name's report")
    again = drop(d.watch, "seed_n4096_bf16", "again.json.gz")
    await await_for_async(lambda: _paths_are(d, {first, again}), "the second name's report")
    for p in (first, again):
        listed = await d.request(M.REPORTS, {"path": p})
        assert [(r["path"], r["newest"]) for r in listed["reports"]] == [(p, True)]


# ---- folders nested deeper than Python's recursion limit ------------------------------------------
def nest(top: str, depth: int, trace_at: int = -1) -> None:
    """``top/a/a/.../a`` ``depth`` levels deep (made through directory fds: the path passes
    PATH_MAX), with the seed trace at level ``trace_at``."""
    fd = os.open(top, os.O_RDONLY)
    try:
        for i in range(depth):
            if i == trace_at:
                t = os.open("t.json.gz", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
                os.write(t, trace_bytes("seed_n64_bf16"))
                os.close(t)
            os.mkdir("a", dir_fd=fd)
            nfd = os.open("a", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)


async def test_folders_nested_past_the_recursion_limit(served, tmp_path):
    """1,200 folders deep in the watched folder: the daemon died at start (RecursionError in
    watchdog's os.walk); the same tree moved in while running killed watchdog's thread (no
    trace seen after it, for good), and once that was fixed our scan of each folder's subtree,
    for every folder watchdog reports inside it, froze the loop (quadratic). Now the daemon
    starts, a trace 40 levels down the moved-in tree is found, and the loop answers."""
    d = served()
    try:
        nest(d.watch, 1200)
        await d.start()
        first = drop(d.watch, "seed_n4096_bf16")
        await wait_status(d, lambda st: st["reports"] == 1, "the trace beside the deep tree")
        out = str(tmp_path / "out")
        os.mkdir(out)
        nest(out, 1200, trace_at=40)
        os.rename(os.path.join(out, "a"), os.path.join(d.watch, "b"))
        deep = os.path.join(d.watch, "b", *["a"] * 39, "t.json.gz")
        later = drop(d.watch, "seed_n4096_bf16", "later.json.gz")
        await await_for_async(lambda: _paths_are(d, {first, deep, later}),
                              "the moved-in and the later trace", timeout=60)
        assert "Traceback" not in d.log_text()
    finally:
        subprocess.run(["rm", "-rf", d.watch, str(tmp_path / "out")], check=False)  # (rmtree
        # recurses per level too)


async def _paths_are(d, want: set) -> bool:
    """Each path in ``want`` has its report (by path: a content seen twice is listed once)."""
    for p in want:
        r = await d.request(M.REPORT, {"path": p})
        if r is None or r["trace"]["path"] != p:
            return False
    return True


# ---- source files: text held bounded --------------------------------------------------------------
def many_sources(paths: list[str]) -> bytes:
    """Synthetic trace: one Python frame per path, each calling an aten op (one hot line each)."""
    ev = [{"ph": "X", "cat": "python_function", "name": "main.py(1): <module>", "pid": 1,
           "tid": 1, "ts": 0, "dur": 100 * len(paths) + 100,
           "args": {"Python parent id": None, "Python id": 1}}]
    for k, p in enumerate(paths):
        t = 10 + k * 100
        ev.append({"ph": "X", "cat": "python_function", "name": f"{p}(3): f{k}", "pid": 1,
                   "tid": 1, "ts": t, "dur": 80, "args": {"Python parent id": 1, "Python id": k + 2}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
                   "ts": t + 10, "dur": 50, "args": {}})
    return json.dumps({"traceEvents": ev}).encode()


def sparse_sources(folder, n: int, size: int = 16 << 20) -> list[str]:
    """``n`` files of ``size`` NULs each, taking no disk (the reader's per-file cap is 16 MB)."""
    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(str(folder), f"f{k}.py") for k in range(n)]
    for p in paths:
        with open(p, "wb") as f:
            f.truncate(size)
    return paths


def test_source_text_held_is_bounded(tmp_path):
    """In process: the daemon's source snapshot keeps at most MAX_CHARS of text, the newest
    files first, and the engine's own cache is not filled as well (it held 256 files of up
    to 16 MB each, again)."""
    from profd.server.daemon.sources import SourceLines
    from profd.server.engine import sourcemap
    paths = sparse_sources(tmp_path / "src", 6, 4 << 20)
    small = tmp_path / "small.py"
    small.write_text("x = 1\n")
    s = SourceLines()
    s.MAX_CHARS = 10 << 20
    before = sourcemap._read_lines.cache_info().currsize
    s._read(paths + [str(small)], False)
    assert s.chars <= s.MAX_CHARS
    assert s.lines(str(small)) == ("x = 1",) and len(s.lines(paths[-1])[0]) == 4 << 20
    assert s.lines(paths[0]) == ()  # the oldest made room
    assert sourcemap._read_lines.cache_info().currsize == before
    s._read([str(small)], False)  # unchanged: kept, not read again
    assert s.chars == sum(len(x) for p in paths + [str(small)] for x in s.lines(p))


async def test_a_trace_naming_huge_sources_does_not_grow_the_daemon(folders, tmp_path):
    """A 10 KB trace naming 60 files of 16 MB (any file can be named): the daemon read them all
    and kept them (engine cache and its own), 2.7 GB for 200 such files, for good. Now what it
    holds is bounded (256 MB of text), and the report is there."""
    paths = sparse_sources(tmp_path / "src", 60)
    d = Daemon(*folders)
    d.start()
    try:
        before = rss_mb(d.proc.pid)
        t = put(d.watch, "t.json", many_sources(paths))
        await wait_status(d.doc, lambda st: st["reports"] == 1, "the report", timeout=60)
        await asyncio.sleep(2.5)  # the warm-up of its sources (at most 2 s waited for) is over
        r = await _report(d.doc, t)
        # every named source has its hot line (the <module> frame may have one too: inclusive costs)
        assert r["error"] is None and set(paths) <= {h["path"] for h in r["hotLines"]}
        grown = rss_mb(d.proc.pid) - before
        assert grown < 450, f"the daemon grew by {grown} MB"
    finally:
        d.stop()


async def _report(doc, path):
    c = await connect(doc)
    try:
        return await c.request(M.REPORT, {"path": path})
    finally:
        await c.close()


# ---- a client that reads nothing ------------------------------------------------------------------
def _frame(obj) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


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
        s.sendall(_frame({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "capabilities": {}, "initializationOptions": {"token": d.doc["token"]}}}))
        before = rss_mb(d.proc.pid)
        s.setblocking(False)
        batch, sent, n, stuck, since = b"", 0, 0, False, None
        deadline = time.monotonic() + 60
        while not stuck and time.monotonic() < deadline:
            if sent == len(batch):  # more requests (asking for the report, ~5 KB each)
                batch = b"".join(_frame({"jsonrpc": "2.0", "id": n + i, "method": M.REPORT,
                                         "params": {"path": good}}) for i in range(1, 1001))
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


async def _status(doc):
    c = await connect(doc)
    try:
        return await c.request(M.STATUS, {})
    finally:
        await c.close()


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
        writer.write(_frame({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "capabilities": {}, "initializationOptions": {"token": "tok"}}}))
        for i in range(1, 2001):
            writer.write(_frame({"jsonrpc": "2.0", "id": i, "method": M.REPORT,
                                 "params": {"path": good}}))
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


# ---- more folders than inotify watches ------------------------------------------------------------
LIMITED = "echo 40 > /proc/sys/user/max_inotify_watches && exec \"$@\""


def _limited_or_skip() -> None:
    """A user namespace of our own, where the inotify watch limit can be lowered for this
    daemon alone (never the machine's, shared with everything else)."""
    r = subprocess.run(["unshare", "-Ur", "sh", "-c", LIMITED, "sh", "true"],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"no user namespace to lower the inotify limit in: {r.stderr.decode()[:200]}")


@pytest.mark.parametrize("when", ["before start", "while running"])
async def test_folders_past_the_inotify_watch_limit_are_looked_into(folders, when):
    """100 subfolders and a limit of 40 watches: watchdog skipped the folders it could not
    watch without a word, and traces dropped in them were never reported (2 of 3 missing, no
    log line). Now the daemon says so (one ERROR naming the sysctl) and looks into those
    folders on its periodic check: all three are reported."""
    _limited_or_skip()
    watch, state = folders
    subs = [os.path.join(str(watch), f"d{i}") for i in range(100)]
    if when == "before start":
        for s_ in subs:
            os.mkdir(s_)
    d = Daemon(watch, state)
    os.makedirs(state, exist_ok=True)
    log = open(d.log_path, "ab")
    d.log = log
    d.proc = subprocess.Popen(
        ["unshare", "-Ur", "sh", "-c", LIMITED, "sh",
         *serve_cmd(watch, state, "--log-level", "INFO", transport=("--tcp", "127.0.0.1:0"))],
        stdout=log, stderr=log, start_new_session=True)
    try:
        d.doc = wait_for(lambda: _daemon_doc(os.path.join(str(state), "daemon.json"),
                                             d.proc.pid), 30, "daemon.json")
        if when == "while running":
            for s_ in subs:
                os.mkdir(s_)
        wait_for(lambda: "cannot be watched (the inotify watch limit" in d.log_text(), 30,
                 "the daemon saying some folders are not watched")
        paths = [put(subs[i], "t.json.gz", variant("seed_n64_bf16", i)) for i in (0, 50, 99)]
        for p in paths:
            await await_for_async(lambda: _reported(d.doc, p), f"a report of {p}", timeout=60)
    finally:
        d.stop()


async def _reported(doc, path) -> bool:
    return await _report(doc, path) is not None
