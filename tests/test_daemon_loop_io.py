"""No file I/O on the daemon's event loop: a source file on a hung mount stalls one thread, never
every client.

A real ``profd serve --stdio`` spawned by pytest-lsp, with one change made for the test (said
here, and only in the daemon's own process): ``os.stat`` and ``os.lstat`` of any path under a
folder named ``slowmount`` sleep 3 s once a flag file exists, as a stat on a dead NFS mount
would block, and append a line to a marker file when each such sleep ends. The findings of a
real trace (the shipped seed trace, its frames pointed at a copy of its source under
``slowmount``) sit on that file. With the flag set, an editor opens the file (the daemon pushes
its findings again, which reads the file's lines and suppression comments) and asks for a
pull of every file's diagnostics, and another request (``profd/status``) is sent right behind:
its answer must come while the stat is still asleep (no marker yet), i.e. the loop was free.
The editor's requests are still answered (from what was read before).
"""

import asyncio
import gzip
import os
import shutil
import sys

from lsprotocol import types as L
from pytest_lsp import client_capabilities, make_test_lsp_client

from conftest import SRC
from daemon_util import FAST, await_for, put, trace_bytes, uri

from profd.protocol import methods as M

SHIM = r"""
import os, sys, time
flag, done = os.environ["PROFD_TEST_HANG_FLAG"], os.environ["PROFD_TEST_HANG_DONE"]
real_stat, real_lstat = os.stat, os.lstat

def flagged():
    try:
        real_stat(flag)
        return True
    except OSError:
        return False

def hung(real):
    def call(p, *a, **k):
        if not isinstance(p, int) and "slowmount" in os.fsdecode(p) and flagged():
            time.sleep(3)
            with open(done, "a") as f:
                f.write("slept\n")
        return real(p, *a, **k)
    return call

os.stat, os.lstat = hung(real_stat), hung(real_lstat)
from profd.server.daemon.cli import main
sys.exit(main(sys.argv[1:]))
"""


async def test_a_hung_source_file_does_not_stop_the_loop(tmp_path):
    slow = tmp_path / "slowmount"
    slow.mkdir()
    src = str(slow / "seed_matmul.py")
    shutil.copy(os.path.join(SRC, "seed_matmul.py"), src)
    watch, state = tmp_path / "watch", tmp_path / "state"
    watch.mkdir()
    flag, done = str(tmp_path / "hang"), str(tmp_path / "slept")
    os.environ["PROFD_TEST_HANG_FLAG"], os.environ["PROFD_TEST_HANG_DONE"] = flag, done
    client = make_test_lsp_client()
    await client.start_io(
        sys.executable,
        "-c",
        SHIM,
        "serve",
        "--stdio",
        "--watch",
        str(watch),
        "--state",
        str(state),
        "--workspace",
        str(slow),
        *FAST,
    )  # (frames outside it stay unmapped)
    try:
        await client.initialize_session(L.InitializeParams(capabilities=client_capabilities("neovim@v0.9.1")))
        raw = gzip.decompress(trace_bytes("seed_n64_bf16")).replace(b'"seed_matmul.py(', f'"{src}('.encode())
        put(watch, "seed.json.gz", gzip.compress(raw))
        diags = await await_for(lambda: client.diagnostics.get(uri(src)), 30, "findings on the file")
        assert diags

        open(flag, "w").close()  # from now on, a stat of the file hangs for 3 s
        client.text_document_did_open(
            L.DidOpenTextDocumentParams(
                text_document=L.TextDocumentItem(
                    uri=uri(src), language_id="python", version=1, text=open(src).read()
                )
            )
        )
        pull = asyncio.ensure_future(
            client.workspace_diagnostic_async(L.WorkspaceDiagnosticParams(previous_result_ids=[]))
        )
        status = await asyncio.wait_for(client.protocol.send_request_async(M.STATUS, {}), 20)
        assert not os.path.exists(done), "profd/status waited for a stat on the hung mount"
        reports = status["reports"] if isinstance(status, dict) else status.reports
        assert reports == 1

        report = await asyncio.wait_for(pull, 20)  # answered, from the lines read before
        mine = [i for i in report.items if i.uri == uri(src)]
        assert mine and mine[0].items
        await await_for(lambda: os.path.exists(done), 20, "the hung stat to end (on its thread)")
    finally:
        if os.path.exists(flag):
            os.remove(flag)
        await client.shutdown_session()
        await client.stop()
