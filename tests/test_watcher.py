"""The watched folder: a real Core in this process (watchdog, SQLite, analysis processes), and the
real daemon (``profd serve`` over TCP and stdio) where names, nesting, links, floods and inotify's
limits are the subject: each file analysed once and complete, the same content never twice."""

import asyncio
import collections
import os
import shutil
import time

import pytest

from conftest import SRC
from daemon_util import await_for, drop, trace_bytes, variant

from profd.server.daemon.core import Config, Core
import gzip
import hashlib
import stat
import subprocess

from daemon_util import Daemon, _daemon_doc, connect, put, serve_cmd, wait_for, write_flood
from daemon_cases import report_from, ask_report, await_for_async, wait_status
from daemon_cases import folders, served  # noqa: F401 (fixtures)

from profd.protocol import methods as M


class Recorder:
    def __init__(self):
        self.ready = []
        self.errors = []

    def report_ready(self, key, sources, report):
        self.ready.append((key, report.trace.path, report.error))

    def log_error(self, text):
        self.errors.append(text)

    def progress(self, token, title):
        pass


@pytest.fixture
async def core(tmp_path):
    watch = tmp_path / "watch"
    watch.mkdir()
    c = Core(
        Config(
            watch=str(watch), workspace=[SRC], state=str(tmp_path / "state"), workers=2, settle=0.2, quiet=0.8
        )
    )
    rec = Recorder()
    c.sessions.add(rec)
    await c.start()
    c.rec = rec
    c.watch = str(watch)
    yield c
    await c.stop()


async def test_flood_of_1000_files_each_analysed_once(core):
    blobs = [variant("seed_n64_bf16", i) for i in range(1000)]
    t0 = time.monotonic()
    for i, b in enumerate(blobs):
        sub = os.path.join(core.watch, f"d{i % 10}")
        os.makedirs(sub, exist_ok=True)
        tmp = os.path.join(sub, f".t{i}.part")
        with open(tmp, "wb") as f:
            f.write(b)
        os.replace(tmp, os.path.join(sub, f"trace_{i:04d}.json.gz"))
        if i % 50 == 0:
            await asyncio.sleep(0)  # let the loop take events while we write
    written = time.monotonic() - t0
    assert written < 10
    await await_for(lambda: len(core.index) == 1000, 90, "1000 reports", every=0.1)
    took = time.monotonic() - t0
    await asyncio.sleep(0.5)  # late events must not cause second analyses
    assert core.analyses == 1000 and len(core.rec.ready) == 1000
    assert not any(e for _, _, e in core.rec.ready)
    assert len({p for _, p, _ in core.rec.ready}) == 1000  # none lost, none twice
    assert core.index.store.count() == 1000 and core.intake.queued == 0
    print(
        f"\nflood: 1000 files written in {written:.2f} s, all analysed in {took:.2f} s, "
        f"{core.analyses} analyses"
    )


async def test_slow_writer_analysed_once_complete(core):
    data = trace_bytes("tinygpt_naive")
    path = os.path.join(core.watch, "slow.pt.trace.json.gz")
    n = 30
    step = len(data) // n + 1
    with open(path, "wb") as f:
        for i in range(n):
            f.write(data[i * step : (i + 1) * step])
            f.flush()
            # mostly faster than settle, sometimes a pause longer than settle (< quiet)
            await asyncio.sleep(0.5 if i % 10 == 9 else 0.05)
    await await_for(lambda: core.rec.ready, 30, "report")
    await asyncio.sleep(1.0)
    assert len(core.rec.ready) == 1 and core.rec.ready[0][2] is None and not core.rec.errors


async def test_same_content_twice_costs_nothing(core):
    drop(core.watch, "seed_n64_bf16")
    await await_for(lambda: core.rec.ready, 20, "report")
    drop(core.watch, "seed_n64_bf16", as_name="again.json.gz")
    await await_for(lambda: core.index.store.file_key(os.path.join(core.watch, "again.json.gz")), 10, "link")
    assert core.analyses == 1 and len(core.index) == 1


async def test_a_repeat_of_a_bad_file_during_its_quiet_wait_is_not_analysed_again(core):
    """A file that does not parse waits ``quiet`` s before its error report is committed (it may
    still be being written). A copy of it dropped in that wait shares the result: one analysis,
    one error report per path. (Analysing it again was the flood test's rare 502-for-501.)"""
    body = b'{"traceEvents":[{"ph":"X","name":"cut off here'
    first = os.path.join(core.watch, "bad.json")
    with open(first, "wb") as f:
        f.write(body)
    await await_for(lambda: core.analyses == 1, 20, "the first analysis", every=0.01)
    assert not core.rec.ready  # still in its quiet wait
    again = os.path.join(core.watch, "bad_again.json")
    with open(again + ".part", "wb") as f:
        f.write(body)
    os.replace(again + ".part", again)
    await await_for(lambda: len(core.rec.ready) == 2, 20, "both error reports")
    await asyncio.sleep(1.0)
    assert core.analyses == 1
    assert sorted(os.path.basename(p) for _, p, _ in core.rec.ready) == ["bad.json", "bad_again.json"]
    assert all(e for _, _, e in core.rec.ready)
    assert not core.dedupe._runs and not core.dedupe._busy_sizes  # every hold let go


async def test_an_analysis_whose_file_went_away_is_counted_as_discarded(core, monkeypatch):
    """A file renamed away while its analysis starts (the flood's rename after write): the
    worker's report cannot be used, and the status says so (``discarded``) instead of passing it
    off as a content analysed; one that is used is not counted. (The flood's 502 analyses for 501
    contents were such runs.) The file's suffix keeps the watcher off it: only this call."""
    from profd.server.daemon.watcher import signature

    path = os.path.join(core.watch, "renamed_away.trace")
    with open(path, "wb") as f:
        f.write(trace_bytes("seed_n64_bf16"))
    real = core.dedupe.hasher.hash_beside

    async def renamed_first(p, size):
        os.rename(p, p + ".moved")
        return await real(p, size)

    monkeypatch.setattr(core.dedupe.hasher, "hash_beside", renamed_first)
    assert await core._handle_watched(path, signature(path)) is None
    await await_for(lambda: core.analyses == 1 and core.running == 0, 20, "the analysis", every=0.01)
    await asyncio.sleep(0.1)  # the done callback
    assert core.dedupe.discarded == 1 and len(core.index) == 0
    monkeypatch.setattr(core.dedupe.hasher, "hash_beside", real)
    os.rename(path + ".moved", path)
    out = await core._handle_watched(path, signature(path))
    out.commit()
    assert core.analyses == 2 and core.dedupe.discarded == 1 and len(core.index) == 1


async def test_deleted_and_replaced_files_and_folder_recreated(core):
    # deleted right after it appears: no report, no crash
    p = drop(core.watch, "seed_n64_bf16", as_name="gone.json.gz")
    os.unlink(p)
    # replaced while pending: the final content is what gets analysed
    with open(os.path.join(core.watch, "swap.json"), "wb") as f:
        f.write(b"not a trace yet")
    drop(core.watch, "seed_n64_bf16", as_name="swap.json.gz")
    os.unlink(os.path.join(core.watch, "swap.json"))
    await await_for(lambda: core.rec.ready, 20, "report")
    await asyncio.sleep(1.2)
    assert [os.path.basename(p) for _, p, _ in core.rec.ready] == ["swap.json.gz"]
    # the watched folder removed and recreated: still watching
    shutil.rmtree(core.watch)
    await asyncio.sleep(0.3)
    os.makedirs(core.watch)
    await asyncio.sleep(0.3)
    drop(core.watch, "tinygpt_naive")
    await await_for(lambda: len(core.rec.ready) == 2, 30, "report after re-arm")
    assert core.rec.ready[-1][1].endswith("tinygpt_naive.json.gz")
    assert core.rec.ready[-1][2] is None


async def test_foreign_and_empty_json_one_error_each(core):
    for name, body in [
        ("empty.json", b""),
        ("foreign.json", b'{"name": "package"}'),
        ("garbage.json.gz", os.urandom(3000)),
    ]:
        with open(os.path.join(core.watch, name), "wb") as f:
            f.write(body)
    await await_for(lambda: len(core.rec.ready) == 3, 20, "three error reports")
    await asyncio.sleep(1.5)
    assert len(core.rec.ready) == 3 and all(e for _, _, e in core.rec.ready)
    assert len(core.rec.errors) == 3


async def test_files_next_to_the_watched_folder_are_ignored(core):
    parent = os.path.dirname(core.watch)
    with open(os.path.join(parent, "sibling.json.gz"), "wb") as f:  # the parent is watched too
        f.write(variant("seed_n64_bf16", 7))
    drop(core.watch, "seed_n64_bf16", as_name="inside.json.gz")
    await await_for(lambda: core.rec.ready, 20, "report")
    await asyncio.sleep(0.8)
    assert [os.path.basename(p) for _, p, _ in core.rec.ready] == ["inside.json.gz"]
    assert core.analyses == 1


async def test_big_file_hashed_beside_its_analysis_in_a_child(core, monkeypatch):
    from profd.server.daemon import hashing

    monkeypatch.setattr(hashing, "BACKGROUND_MIN_BYTES", 0)  # every file counts as big here
    path = drop(core.watch, "seed_n64_bf16")
    await await_for(lambda: core.rec.ready, 20, "report")
    key = core.rec.ready[0][0]
    assert key == f"{hashing.sha_file(path)[0]}:{core.fp}" and core.analyses == 1
    assert core.rec.ready[0][2] is None
    # the same content under another name: hashed first (same size), linked, not analysed
    drop(core.watch, "seed_n64_bf16", as_name="again.json.gz")
    await await_for(lambda: core.index.store.file_key(os.path.join(core.watch, "again.json.gz")), 10, "link")
    assert core.analyses == 1 and len(core.index) == 1


async def test_same_new_content_twice_at_once_analysed_once(core, monkeypatch):
    from profd.server.daemon import hashing

    monkeypatch.setattr(hashing, "BACKGROUND_MIN_BYTES", 0)
    drop(core.watch, "tinygpt_naive", as_name="a.json.gz")
    drop(core.watch, "tinygpt_naive", as_name="b.json.gz")
    await await_for(lambda: len(core.rec.ready) == 2, 30, "two reports")
    assert core.analyses == 1 and len(core.index) == 1
    assert {os.path.basename(p) for _, p, _ in core.rec.ready} == {"a.json.gz", "b.json.gz"}


async def test_a_file_replaced_while_analysed_keeps_the_work_done(core, monkeypatch):
    """A -> B -> A on one name, in the worst order: the daemon hashed and analysed B, and A was
    back by the time the result came. B's report stands for B (a later file holding B is linked
    to it, not analysed again), the path ends with A's report, and each content is analysed once.
    The swap is made at that instant by wrapping the analysis: no timing can place it there."""
    from profd.server.daemon import hashing

    a, b = variant("seed_n64_bf16", 1), variant("seed_n64_bf16", 2)
    path = os.path.join(core.watch, "aba.json.gz")
    submit = core._submit

    async def swap_after(p, *args):
        got = await submit(p, *args)
        if p == path and core.analyses == 0:
            tmp = path + ".part"
            with open(tmp, "wb") as f:
                f.write(a)
            os.replace(tmp, path)  # A is back while B's result is on its way
        return got

    monkeypatch.setattr(core, "_submit", swap_after)
    tmp = os.path.join(core.watch, ".aba.part")
    with open(tmp, "wb") as f:
        f.write(b)
    os.replace(tmp, path)
    sha = __import__("hashlib").sha256
    key_a, key_b = f"{sha(a).hexdigest()}:{core.fp}", f"{sha(b).hexdigest()}:{core.fp}"
    await await_for(lambda: core.index.key_of_trace(path) == key_a, 20, "A's report at the path")
    assert key_b in core.index and core.analyses == 2
    assert [k for k, p, _ in core.rec.ready if p == path] == [key_a]  # B was never shown there
    later = os.path.join(core.watch, "b_again.json.gz")
    with open(tmp, "wb") as f:
        f.write(b)
    os.replace(tmp, later)
    await await_for(lambda: core.index.key_of_trace(later) == key_b, 20, "B linked")
    assert core.analyses == 2
    assert hashing.sha_file(later)[0] == key_b.split(":")[0]


def test_the_worker_reads_the_file_it_opened_whatever_is_renamed_over_it(tmp_path, monkeypatch):
    """An analysis opens the trace once and the engine reads that very file: a rename over the
    path between the open and the engine's read (forced here by wrapping the engine's entry)
    changes nothing about which content the report is of, and the signature it returns is that
    file's; the report names the path, never the descriptor it was read through."""
    import gzip
    import hashlib

    from profd.server.daemon import pool
    from profd.server.engine import Options
    from profd.server.engine import analyze as pipeline

    a, b = variant("seed_n64_bf16", 1), variant("seed_n64_bf16", 2)
    path = str(tmp_path / "t.json.gz")
    (tmp_path / "t.json.gz").write_bytes(a)
    ino_a = os.stat(path).st_ino
    real = pipeline.analyze_trace

    def swapped_first(p, opts=None):
        (tmp_path / ".b").write_bytes(b)
        os.replace(tmp_path / ".b", path)  # B is at the path now
        return real(p, opts)

    monkeypatch.setattr(pipeline, "analyze_trace", swapped_first)
    report, _summary, read = pool._analyze_held(path, Options())
    assert report.trace.sha256 == hashlib.sha256(gzip.decompress(a)).hexdigest()
    assert report.trace.path == path and read is not None and read[2] == ino_a
    assert os.stat(path).st_ino != ino_a


async def test_a_file_replaced_while_queued_is_handled_as_it_is_now(tmp_path):
    """A -> B on one name while the path waits in the queue: the handler gets the file as it is
    now, once, never the queued signature of a content no longer there (its size let a repeat
    of known content pass as unseen, and be analysed again)."""
    from profd.server.daemon.watcher import Intake, signature

    gate, seen = asyncio.Event(), []

    async def handle(path, sig):
        seen.append((os.path.basename(path), sig))
        await gate.wait()
        return None

    intake = Intake(asyncio.get_running_loop(), handle, settle=0.05, quiet=0.1, workers=1)
    intake.start()
    try:
        first, x = tmp_path / "first.json", tmp_path / "x.json"
        first.write_bytes(b"{}")
        x.write_bytes(b"A" * 10)
        intake.notice(str(first), complete=True)
        await await_for(lambda: seen, 5, "the first file taken")
        intake.notice(str(x), complete=True)  # queued as A
        (tmp_path / ".x").write_bytes(b"B" * 20)
        os.replace(tmp_path / ".x", x)  # B is there now (no event: only the re-stat can tell)
        gate.set()
        await await_for(lambda: len(seen) == 2 and intake.queued == 0, 10, "x handled")
        await asyncio.sleep(0.2)
        assert [n for n, _ in seen] == ["first.json", "x.json"]
        assert seen[1][1] == signature(str(x)) and seen[1][1][0] == 20
    finally:
        await intake.stop()


async def test_the_newest_file_goes_first_however_long_the_backlog(tmp_path):
    """1,500 files are waiting (more than the 1,024 the queue once held: the rest polled for room
    every settle period) when one more arrives: it is the next one handled."""
    from profd.server.daemon.watcher import Intake

    gate, order = asyncio.Event(), []

    async def handle(path, sig):
        order.append(os.path.basename(path))
        await gate.wait()
        return None

    intake = Intake(asyncio.get_running_loop(), handle, settle=0.05, quiet=0.1, workers=1)
    intake.start()
    try:
        paths = []
        for i in range(1501):
            p = tmp_path / f"t{i:04d}.json"
            p.write_bytes(b"{}")
            paths.append(str(p))
        intake.notice(paths[0], complete=True)  # the worker takes it and waits at the gate
        await await_for(lambda: order, 5, "the first file taken")
        for p in paths[1:]:
            intake.notice(p, complete=True)
        newest = tmp_path / "newest.json"
        newest.write_bytes(b"{}")
        intake.notice(str(newest), complete=True)
        gate.set()
        await await_for(lambda: len(order) >= 3, 10, "the next files taken")
        assert order[1] == "newest.json", order[:5]
    finally:
        await intake.stop()


# ---- the watcher's own costs under a flood (real watchdog, real inotify) ---------------------------
async def _watching(tmp_path, seen):
    from profd.server.daemon.watcher import Watcher

    root = tmp_path / "w"
    root.mkdir()
    w = Watcher(
        str(root),
        asyncio.get_running_loop(),
        lambda p: seen.append(("path", p)),
        on_complete=lambda p: seen.append(("complete", p)),
    )
    drains = []
    orig = w._drain
    w._drain = lambda: (drains.append(len(w._inbox)), orig())
    w.start()
    return root, w, drains


async def test_reads_of_watched_files_raise_no_events(tmp_path):
    """The daemon hashes and analyses every trace it is told of: those opens and reads must not
    come back as events (they queued in watchdog's observer ahead of the next user's file)."""
    from profd.server.daemon import watcher

    events = []
    orig = watcher._Events.on_any_event
    watcher._Events.on_any_event = lambda self, e: (events.append(e.event_type), orig(self, e))
    seen: list = []
    try:
        root, w, _ = await _watching(tmp_path, seen)
        p = str(root / "t.json")
        with open(p, "wb") as f:
            f.write(trace_bytes("seed_n64_bf16"))
        await await_for(lambda: seen, 10, "the new file")
        n = len(events)
        for _ in range(20):
            with open(p, "rb") as f:
                f.read()
        await asyncio.sleep(0.3)
        assert events[n:] == [], events[n:]
        assert "opened" not in events and "closed_no_write" not in events, events
    finally:
        watcher._Events.on_any_event = orig
        w.stop()


async def test_a_burst_of_renames_is_a_few_wakeups_in_order(tmp_path):
    """300 traces renamed into place at once: each is offered once, in the order written,
    through far fewer loop wake-ups than events; as complete (a rename's two halves paired),
    or, for a pair the kernel reads split across two reads, as a new file (it then waits out the
    settle time: slower for that one file, never held for the others)."""
    seen: list = []
    root, w, drains = await _watching(tmp_path, seen)
    try:
        data = trace_bytes("seed_n64_bf16")
        names = [f"t{i:03d}.json.gz" for i in range(300)]
        for n in names:
            tmp = root / ("." + n + ".part")
            tmp.write_bytes(data)
            os.rename(tmp, root / n)
        await await_for(lambda: len(seen) >= 300, 20, "300 renames")
        await asyncio.sleep(0.2)
        assert [p for _, p in seen] == [str(root / n) for n in names]
        assert sum(kind == "complete" for kind, _ in seen) > 250, seen
        assert len(drains) < 300 and max(drains) > 1, drains
    finally:
        w.stop()


def test_move_pairing_hold_is_short_on_this_watchdog():
    """watchdog's inotify queue held an unpaired "moved from" half (a file renamed out of the
    folder, or a rename split across two kernel reads) at its head for 0.5 s, every later event
    waiting behind it. The watcher shortens that hold to a few ms; this checks it found the knob
    on the watchdog installed (it moved between watchdog 6 and 7), so an upgrade cannot quietly
    bring the stall back. What the hold costs under a flood: bench/flood_bench.py."""
    from profd.server.daemon import watcher

    held = watcher._pair_moves_quickly()
    assert held and all(cls.delay <= 0.005 for cls in held), held


async def test_same_content_second_name_and_a_b_a(served):
    d = await served().start()
    a, b = variant("seed_n64_bf16", 1), variant("seed_n64_bf16", 2)
    sha = {k: hashlib.sha256(gzip.decompress(v)).hexdigest() for k, v in (("a", a), ("b", b))}
    first = put(d.watch, "first.json.gz", a)
    await wait_status(d, lambda st: st["reports"] == 1, "first report")
    second = put(d.watch, "second.json.gz", a)
    r = await await_for_async(lambda: ask_report(d, second), "second name's report")
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
    assert (await ask_report(d, first))["trace"]["path"] == first


async def _sha_is(src, path, sha):
    r = await ask_report(src, path)
    return r if r and r["trace"]["sha256"] == sha else None


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
    recs = [logging.LogRecord("profd", logging.WARNING, "", 0, "refused %s", ("x",), None) for _ in range(10)]
    assert [f.filter(r) for r in recs] == [True] * 3 + [False] * 7
    time.sleep(0.25)
    r = logging.LogRecord("profd", logging.WARNING, "", 0, "refused %s", ("x",), None)
    assert f.filter(r) and "7 more like this" in r.getMessage()


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
            return (
                st
                if st["queued"] == 0
                and st["running"] == 0
                and st["analyses"] - st["discarded"] >= len(distinct)
                else None
            )

        st = await await_for_async(settled, "the flood analysed", timeout=300)
        await asyncio.sleep(1.0)
        st = await c.request(M.STATUS, {})
        # Each content analysed once. An analysis of a name changed while it was read (renamed
        # away, or A -> B -> A) cannot tell what it read: it is discarded and the name looked at
        # again, and the status counts it apart. Only the flood's renamed and A-B-A names can.
        changed_names = sum(1 for i in range(FLOOD) if i % 8 == 6 or i % 32 == 7)
        used = st["analyses"] - st["discarded"]
        assert used == len(distinct) and st["discarded"] <= changed_names, (st, len(distinct))
        for p, data in contents.items():
            r = await c.request(M.REPORT, {"path": p})
            assert r is not None, p
            raw = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
            if r["error"] is None:
                assert r["trace"]["sha256"] == hashlib.sha256(raw).hexdigest(), p
            else:
                assert raw.startswith(b'{"traceEvents":[{"ph":"X","name":"'), p
        assert st_then["queued"] + st_then["running"] > 0 or st_then["analyses"] < len(distinct), (
            "the good trace was not reported ahead of the backlog"
        )
        print(
            f"\nflood: {len(contents)} paths written in {written:.2f} s, {len(distinct)} "
            f"contents, good trace reported {latency:.2f} s after its drop "
            f"(backlog then: {st_then['queued']} queued), all analysed once "
            f"({st['discarded']} analyses of a name changed while read discarded)"
        )
    finally:
        await c.close()
        d.stop()


async def _ready(c, path):
    await asyncio.sleep(0.05)
    return any(n.get("method") == M.REPORT_READY and n["params"]["path"] == path for n in c.notifications)


def _same_size_and_mtime(path: str, data: bytes, in_place: bool) -> None:
    """Put ``data`` (the same length as what is there) at ``path`` with the old mtime, as
    ``cp -p`` does (in place: same inode) or ``rsync -a``/``tar x`` (a new file renamed over)."""
    st = os.stat(path)
    assert len(data) == st.st_size
    if in_place:
        with open(path, "r+b") as f:
            f.write(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        tmp = os.path.join(os.path.dirname(path), ".incoming")
        with open(tmp, "wb") as f:
            f.write(data)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, path)
    now = os.stat(path)
    assert (now.st_size, now.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def _two_contents() -> tuple[bytes, bytes]:
    """The real seed trace twice, as two contents of one length (uncompressed: one space moved)."""
    raw = gzip.decompress(trace_bytes("seed_n64_bf16"))
    return raw + b" \n", raw + b"\n "


@pytest.mark.parametrize("in_place", [True, False], ids=["cp-p", "rsync-a"])
async def test_another_content_with_the_old_size_and_mtime_is_analysed(folders, in_place):
    """The store told a file by path, size and mtime: another content copied in with both kept
    (``cp -p``, ``rsync -a``, ``tar x``) kept the old report, live and after a restart. Now the
    inode and change time tell it: the new content gets its own report both ways."""
    from profd.server.daemon.core import Config, Core

    watch, state = folders
    a, b = _two_contents()

    async def started():
        c = Core(
            Config(watch=str(watch), workspace=[SRC], state=str(state), workers=1, settle=0.1, quiet=0.5)
        )
        await c.start()
        return c

    c = await started()
    try:
        path = put(str(watch), "t.json", a)
        await await_for(lambda: c.index.key_of_trace(path) is not None, 30, "the first content's report")
        first = c.index.key_of_trace(path)
        _same_size_and_mtime(path, b, in_place)  # live
        await await_for(
            lambda: c.index.key_of_trace(path) not in (None, first), 30, "the second content's report"
        )
        second = c.index.key_of_trace(path)
    finally:
        await c.stop()
    _same_size_and_mtime(path, a, in_place)  # while the daemon is down
    c = await started()
    try:
        await await_for(lambda: c.index.key_of_trace(path) == first, 30, "the first content again")
        assert second in c.index
    finally:
        await c.stop()


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
    named = put(d.watch, "named.json.gz", gzip.compress(raw.replace(b'"seed_matmul.py(', b'"only_here.py(')))
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
        await await_for_async(
            lambda: _paths_are(d, {first, deep, later}), "the moved-in and the later trace", timeout=60
        )
        assert "Traceback" not in d.log_text()
    finally:
        subprocess.run(["rm", "-rf", d.watch, str(tmp_path / "out")], check=False)  # (rmtree


async def _paths_are(d, want: set) -> bool:
    """Each path in ``want`` has its report (by path: a content seen twice is listed once)."""
    for p in want:
        r = await d.request(M.REPORT, {"path": p})
        if r is None or r["trace"]["path"] != p:
            return False
    return True


LIMITED = 'echo 40 > /proc/sys/user/max_inotify_watches && exec "$@"'


def _limited_or_skip() -> None:
    """A user namespace of our own, where the inotify watch limit can be lowered for this
    daemon alone (never the machine's, shared with everything else)."""
    r = subprocess.run(["unshare", "-Ur", "sh", "-c", LIMITED, "sh", "true"], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"no user namespace to lower the inotify limit in: {r.stderr.decode()[:200]}")


def _hooked() -> bool:
    from profd.server.daemon.watcher import _record_unwatched

    return _record_unwatched()


@pytest.mark.parametrize("when", ["before start", "while running"])
async def test_folders_past_the_inotify_watch_limit_are_looked_into(folders, when):
    """100 subfolders and a limit of 40 watches: watchdog skipped the folders it could not
    watch without a word, and traces dropped in them were never reported (2 of 3 missing, no
    log line). Now the daemon says so (one ERROR naming the sysctl) and looks into those
    folders on its periodic check: all three are reported. On watchdog 6 (Python 3.10's), whose
    recursive watch raises for the whole tree at the limit, the whole tree is looked into.
    The watchdog hook that records the failed watches is there on either version."""
    assert _hooked()
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
        [
            "unshare",
            "-Ur",
            "sh",
            "-c",
            LIMITED,
            "sh",
            *serve_cmd(watch, state, "--log-level", "INFO", transport=("--tcp", "127.0.0.1:0")),
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        d.doc = wait_for(
            lambda: _daemon_doc(os.path.join(str(state), "daemon.json"), d.proc.pid), 30, "daemon.json"
        )
        if when == "while running":
            for s_ in subs:
                os.mkdir(s_)
        wait_for(
            lambda: "cannot be watched (the inotify watch limit" in d.log_text(),
            30,
            "the daemon saying some folders are not watched",
        )
        paths = [put(subs[i], "t.json.gz", variant("seed_n64_bf16", i)) for i in (0, 50, 99)]
        for p in paths:
            await await_for_async(lambda: _reported(d.doc, p), f"a report of {p}", timeout=60)
    finally:
        d.stop()


async def _reported(doc, path) -> bool:
    return await report_from(doc, path) is not None


async def test_an_unwatched_folder_changed_in_the_same_clock_tick_is_looked_into_again(tmp_path):
    """A folder inotify could not watch is looked into when its mtime moves. A filesystem's
    timestamps are as coarse as the kernel's tick (4-10 ms before Linux 6.13's multigrain ones):
    a trace renamed in in the same tick as the look that listed the folder left its mtime as it
    was, and was never seen (what a loaded machine makes likely). Synthetic timestamps: this
    kernel's are fine-grained, so the folder's mtime is set back to what the first look saw, as
    a coarse clock would leave it; the failed watch is recorded as watchdog's hook records it."""
    from profd.server.daemon import watcher

    root = tmp_path / "w"
    sub = root / "d0"
    sub.mkdir(parents=True)
    seen: list = []
    w = watcher.Watcher(str(root), asyncio.get_running_loop(), seen.append)
    watcher._UNWATCHED.setdefault(os.fsencode(w.root), collections.deque()).append(os.fsencode(str(sub)))
    w._look_into_unwatched()
    assert seen == []
    looked = os.stat(sub)
    p = put(sub, "t.json.gz", variant("seed_n64_bf16", 0))
    os.utime(sub, ns=(looked.st_atime_ns, looked.st_mtime_ns))
    w._look_into_unwatched()
    assert seen == [p]
