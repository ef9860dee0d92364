"""The source files findings point at: read off the event loop and only if they are regular files
inside the workspace (a frame naming a FIFO, /dev/zero, a file outside, a NUL byte), and held
bounded however many and however big (sources.SourceLines). On the real daemon over TCP and stdio
where the transport matters; the traces are the shipped seed trace with its frames pointed
elsewhere, or a small synthetic one where a trace must name hundreds of files (it says so)."""

import asyncio
import json
import os

from lsprotocol import types as L

from daemon_util import Daemon, await_for, put, uri
from daemon_cases import SEED_SRC, report_from, rss_mb, trace_naming, wait_status
from daemon_cases import core, folders, served  # noqa: F401 (fixtures)

from profd.protocol import methods as M


async def test_fifo_and_dev_zero_as_source(served, tmp_path):
    d = await served().start()
    fifo = str(tmp_path / "fifo.py")
    os.mkfifo(fifo)
    traces = [
        put(d.watch, "fifo.json.gz", trace_naming(fifo)),
        put(d.watch, "zero.json.gz", trace_naming("/dev/zero")),
    ]
    await wait_status(d, lambda st: st["reports"] == 2, "two reports")
    for _ in range(2):  # it used to recur on every reconnect: initialized publishes everything
        c = d.lsp
        for t in traces:  # not files here: the findings land on the trace, with the frame named
            diags = await await_for(lambda: c.diagnostics.get(uri(t)), 10, "diagnostics")
            assert any(fifo in x.message or "/dev/zero" in x.message for x in diags)
        for src in (fifo, "/dev/zero"):  # an editor asking about them is answered at once
            hover = await asyncio.wait_for(
                c.text_document_hover_async(
                    L.HoverParams(
                        text_document=L.TextDocumentIdentifier(uri=uri(src)), position=L.Position(20, 0)
                    )
                ),
                10,
            )
            assert hover is None or hover.contents
            lens = await asyncio.wait_for(
                c.text_document_code_lens_async(
                    L.CodeLensParams(text_document=L.TextDocumentIdentifier(uri=uri(src)))
                ),
                10,
            )
            assert lens is not None
        await d.reconnect()
    assert (await d.request(M.STATUS))["reports"] == 2


async def test_a_frame_outside_the_workspace_is_unmapped(core, tmp_path):
    """The trace names a real file outside the workspace by absolute path (a copy of the seed's
    source, so its lines exist): it gets no diagnostics, hovers or lenses (no report indexes it,
    so no edit can be offered on it); the findings land on the trace, unmapped."""
    outside = tmp_path / "home"
    outside.mkdir()
    victim = outside / "not_in_the_workspace.py"
    victim.write_bytes(open(SEED_SRC, "rb").read())
    path = put(core.watch, "out.json.gz", trace_naming(str(victim)))
    await await_for(lambda: core.index.key_of_trace(path) is not None, 30, "the report")
    key = core.index.key_of_trace(path)
    assert str(victim) not in core.index.row(key).sources
    assert core.index.newest_for(str(victim)) is None and core.hot_lines_for(str(victim)) == (None, [])
    assert core.diagnostics_for(str(victim))[1] == []
    _, on_trace = core.diagnostics_for(path)
    assert any(d.code == "overhead-bound" for d in on_trace)
    assert any(d.code == "unmapped-source" for d in on_trace)


async def test_a_frame_path_with_a_nul_byte_is_reported(core):
    """A frame path holding a NUL byte: the daemon's source reader raised ValueError and the
    trace was never reported (the CLI did). Now it is, the frame unmapped."""
    path = put(core.watch, "nul.json.gz", trace_naming("/tmp/a\\u0000b/nowhere.py"))
    await await_for(lambda: core.index.key_of_trace(path) is not None, 30, "the report")
    key = core.index.key_of_trace(path)
    assert core.index.row(key).error is None
    assert any(d.code == "overhead-bound" for d in core.diagnostics_for(path)[1])


def many_sources(paths: list[str]) -> bytes:
    """Synthetic trace: one Python frame per path, each calling an aten op (one hot line each)."""
    ev = [
        {
            "ph": "X",
            "cat": "python_function",
            "name": "main.py(1): <module>",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100 * len(paths) + 100,
            "args": {"Python parent id": None, "Python id": 1},
        }
    ]
    for k, p in enumerate(paths):
        t = 10 + k * 100
        ev.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"{p}(3): f{k}",
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": 80,
                "args": {"Python parent id": 1, "Python id": k + 2},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::add",
                "pid": 1,
                "tid": 1,
                "ts": t + 10,
                "dur": 50,
                "args": {},
            }
        )
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
        r = await report_from(d.doc, t)
        # every named source has its hot line (the <module> frame may have one too: inclusive costs)
        assert r["error"] is None and set(paths) <= {h["path"] for h in r["hotLines"]}
        grown = rss_mb(d.proc.pid) - before
        assert grown < 450, f"the daemon grew by {grown} MB"
    finally:
        d.stop()
