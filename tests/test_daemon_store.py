"""The results store (SQLite) and the report index over it: persistence, WAL, owner-only files and
links; a report the store cannot take, a garbage or truncated store, reports that do not decode,
a full disk, a read-only state folder, a store at its page cap or turning read-only in use: the
daemon keeps serving, from memory where it must, and says what is wrong."""

import asyncio
import errno
import os
import shutil
import sqlite3
import stat
import subprocess
import threading

import pytest

from daemon_util import Served, await_for, drop, put, serve_cmd, uri, variant
from daemon_cases import SEED_SRC, ask_report, await_for_async, wait_status
from daemon_cases import core, folders, served  # noqa: F401 (fixtures)

from profd.protocol import methods as M
from profd.server.daemon.store import Store


def test_put_get_reopen_and_modes(tmp_path):
    db = str(tmp_path / "state" / "profd.sqlite3")
    s = Store(db)
    assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    created = s.put("k1", "/w/a.json", 1.5, 10, b'{"x":1}', None, ["/src/a.py"])
    s.put("k2", "/w/b.json", 2.5, 20, b'{"x":2}', "profd: bad trace /w/b.json: empty", ["/w/b.json"])
    assert s.get("k1") == b'{"x":1}' and s.has("k2") and not s.has("k3")
    assert s.known_file("/w/a.json", 1.5, 10) == "k1"
    assert s.known_file("/w/a.json", 1.6, 10) is None  # changed on disk: hash again
    s.link("/w/c.json", "k1", 3.0, 10)  # same content under another name
    assert s.file_key("/w/c.json") == "k1" and s.count() == 2
    s.close()
    for f in os.listdir(tmp_path / "state"):
        assert stat.S_IMODE(os.stat(tmp_path / "state" / f).st_mode) == 0o600, f
    s2 = Store(db)
    rows = list(s2.rows())
    assert [r.key for r in rows] == ["k1", "k2"] and rows[0].sources == ["/src/a.py"]
    assert rows[0].created == created and rows[1].error.startswith("profd: bad trace")
    s2.close()


def test_concurrent_writers(tmp_path):
    s = Store(str(tmp_path / "db.sqlite3"))

    def writer(n):
        for i in range(50):
            s.put(f"{n}-{i}", f"/w/{n}-{i}.json", 0.0, 1, b"{}", None, [])

    ts = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert s.count() == 200
    s.close()


@pytest.mark.skipif(
    not hasattr(sqlite3.Connection, "setlimit"),
    reason="lowering SQLite's length limit needs Connection.setlimit (Python 3.11+); without it a "
    "report over the limit would have to be over 1 GB",
)
async def test_a_report_the_store_cannot_take_is_refused_alone(core):
    """SQLite's length limit (1 GB by default; lowered here so a real report is over it): the
    write raised 'string or blob too big', taken for corruption: the store was moved aside and
    rebuilt, and the reports of traces analysed on request were lost. Now that report alone is
    stored as an error saying so; the store and the other reports stay."""
    first = drop(core.watch, "seed_n64_bf16")
    await await_for(lambda: core.index.key_of_trace(first) is not None, 30, "the first report")
    key1 = core.index.key_of_trace(first)
    core.index.store._db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 4000)
    big = drop(core.watch, "seed_n4096_bf16")
    await await_for(lambda: core.index.key_of_trace(big) is not None, 30, "the second report")
    core.index.store._db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000_000)
    assert core.index.store.moved_aside is None
    assert not [f for f in os.listdir(os.path.dirname(core.index.store.path)) if ".bad-" in f]
    assert core.index.store.get(key1) is not None and core.index.store.file_key(first) == key1
    row = core.index.store.row(core.index.key_of_trace(big))
    assert row is not None and "more than the results store takes" in row.error
    assert "string or blob too big" in row.error


def test_the_report_cache_is_bounded_in_bytes():
    from profd.server.daemon.store import Lru

    c = Lru(max_items=64, max_bytes=1000)
    for i in range(10):
        c.put(i, f"r{i}", 300)
    assert len(c) == 3 and c.bytes == 900 and c.get(9) == "r9" and c.get(0) is None
    c.put("big", "huge", 5000)  # one over the bound alone is still kept (the one in use)
    assert len(c) == 1 and c.get("big") == "huge"


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
    r = await ask_report(d, path)
    assert r["error"] is None and r["diagnostics"]
    assert (await d.request(M.STATUS))["analyses"] == 1
    assert "does not decode" in d.log_text()


def mount_or_skip(*args) -> None:
    r = subprocess.run(["mount", *args], capture_output=True, text=True) if shutil.which("mount") else None
    if r is None or r.returncode:
        pytest.skip(
            "cannot mount here (needs mount(8), root and CAP_SYS_ADMIN): "
            f"{r.stderr.strip() if r else 'no mount'}"
        )


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


async def test_full_disk_keeps_reports_and_saves_them_when_space_returns(served, small_disk, tmp_path):
    """The state on a real filesystem filled to the last block (the log beside it, elsewhere,
    to be read): 30 traces dropped then are all served, from memory; once there is room again
    they are saved (a restart analyses nothing)."""
    d = await served(state=small_disk / "state", log=tmp_path / "daemon.log").start()
    filler = fill(small_disk)
    paths = [put(d.watch, f"t{i:02d}.json.gz", variant("seed_n64_bf16", i)) for i in range(30)]
    await wait_status(
        d, lambda st: st["reports"] == 30 and st["queued"] == st["running"] == 0, "30 reports", timeout=120
    )
    for p in paths:
        r = await ask_report(d, p)
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
        assert (await ask_report(d, seed))["error"] is None
    st = await d.request(M.STATUS)
    assert st["reports"] == (1 if seed else 0) and st["analyses"] == 0, st
    new = drop(d.watch, "seed_n4096_bf16")
    r = await await_for_async(lambda: ask_report(d, new), "the new trace's report")
    assert r["error"] is None and r["diagnostics"]
    assert d.lsp.diagnostics.get(uri(SEED_SRC))
    log = d.log_text()
    assert "cannot be written" in log, log
    assert ("serving it read-only" if seed else "from memory") in log, log
    assert "Traceback" not in log


async def test_read_only_state_is_refused_clearly_over_tcp(read_only_state, folders):
    """A TCP daemon is found through STATE/daemon.json: on a read-only state it says so and
    exits 2 (it died with a traceback)."""
    out = subprocess.run(
        serve_cmd(*folders, transport=("--tcp", "127.0.0.1:0")), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2, out
    assert "cannot write" in out.stderr and "writable --state" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr, out.stderr


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
    core.index.store._db = sqlite3.connect(
        f"file:{core.index.store.path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
    )
    path = drop(core.watch, "seed_n64_bf16")
    await await_for(lambda: core.index.key_of_trace(path) is not None, 30, "a report in memory")
    _, diags = core.diagnostics_for(SEED_SRC)
    assert any(x.code == "overhead-bound" for x in diags) and core.index.pending_writes
