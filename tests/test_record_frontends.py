"""``profd.record`` in the editor (a real ``profd serve --stdio`` driven by pytest-lsp's client; a
TCP daemon without --allow-record refuses it) and the MCP tool ``record_program`` (the MCP SDK's
stdio client on a real ``profd mcp --allow-record``). Each records a real script of
tests/data/record/ on the CPU: train_small.py's zero_grad(set_to_none=False) must come back as a
zero-grad-not-none diagnostic / finding on line 8."""

import asyncio
import importlib.util
import os
import sys

import pytest
from lsprotocol import types as L
from pytest_lsp import client_capabilities, make_test_lsp_client

from daemon_util import Daemon, await_for, processes_with, serve_cmd, uri

from profd.server.daemon import rpc

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "record")
TRAIN = os.path.join(DATA, "train_small.py")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(
    not HAVE_TORCH, reason="torch is not installed (CPU torch: .ci/run installs it)"
)
FAST = {"warmup": 2, "timed": 2, "steps": 3, "python": sys.executable}


@pytest.fixture
async def lsp(tmp_path):
    watch, state = tmp_path / "watch", tmp_path / "state"
    watch.mkdir()
    client = make_test_lsp_client()
    await client.start_io(*serve_cmd(watch, state, workspace=DATA))
    caps = client_capabilities("neovim@v0.9.1")
    await client.initialize_session(L.InitializeParams(capabilities=caps))
    client.watch = str(watch)
    yield client
    await client.shutdown_session()
    await client.stop()


def execute(client, *args):
    return client.workspace_execute_command_async(
        L.ExecuteCommandParams(command="profd.record", arguments=list(args))
    )


async def test_lens_above_main_guard_only_in_the_workspace(lsp, tmp_path):
    lenses = await lsp.text_document_code_lens_async(
        L.CodeLensParams(text_document=L.TextDocumentIdentifier(uri=uri(TRAIN)))
    )
    rec = [x for x in lenses if x.command.command == "profd.record"]
    assert [(x.range.start.line, x.command.title, list(x.command.arguments)) for x in rec] == [
        (25, "Profile with profd", [TRAIN])
    ]  # line 26: if __name__ == "__main__":
    outside = tmp_path / "elsewhere.py"
    outside.write_text('if __name__ == "__main__":\n    pass\n')
    lenses = await lsp.text_document_code_lens_async(
        L.CodeLensParams(text_document=L.TextDocumentIdentifier(uri=uri(str(outside))))
    )
    assert not [x for x in lenses if x.command.command == "profd.record"]
    with pytest.raises(Exception, match="outside the workspace"):
        await execute(lsp, str(outside))
    with pytest.raises(Exception, match="unknown option"):
        await execute(lsp, TRAIN, {"shell": "rm -rf /"})


@needs_torch
async def test_record_command_with_progress_lands_diagnostics(lsp):
    res = await execute(lsp, TRAIN, FAST)
    (trace,) = res["traces"]
    assert os.path.dirname(trace) == lsp.watch and trace.endswith(".pt.trace.json.gz")
    assert res["unprofiledUsPerStep"] > 0 and res["rule"] == "each SGD.step() ends a step"
    diags = await await_for(lambda: lsp.diagnostics.get(uri(TRAIN)), 30, "diagnostics")
    assert any(d.code == "zero-grad-not-none" and d.range.start.line == 7 for d in diags)
    kinds = [[getattr(v, "kind", None) for v in vals] for vals in lsp.progress_reports.values()]
    ours = [vals for t, vals in lsp.progress_reports.items() if str(t).startswith("profd-record-")]
    assert ours and ours[0][0].cancellable is True and ours[0][-1].kind == "end", kinds
    assert any("unprofiled step" in (getattr(v, "message", None) or "") for v in ours[0])


@needs_torch
async def test_cancelling_the_progress_stops_the_program(lsp):
    marker = f"300.{os.getpid()}"
    task = asyncio.ensure_future(
        execute(lsp, os.path.join(DATA, "never_steps.py"), {**FAST, "args": ["--seconds", marker]})
    )
    await await_for(lambda: processes_with(marker), 60, "the program to start")
    token = await await_for(
        lambda: next((t for t in lsp.progress_reports if str(t).startswith("profd-record-")), None),
        30,
        "progress",
    )
    lsp.protocol.notify("window/workDoneProgress/cancel", L.WorkDoneProgressCancelParams(token=token))
    with pytest.raises(Exception, match="cancelled"):
        await asyncio.wait_for(task, 60)
    assert processes_with(marker) == []


async def test_tcp_daemon_refuses_record_without_allow_record(tmp_path):
    d = Daemon(tmp_path / "watch", tmp_path / "state", "--workspace", DATA)
    os.makedirs(tmp_path / "watch")
    doc = d.start()
    try:

        async def go(c):  # connected and initialised with the token
            with pytest.raises(rpc.RpcError, match="allow-record"):
                await c.request(
                    "workspace/executeCommand", {"command": "profd.record", "arguments": [TRAIN]}, timeout=30
                )
            lenses = await c.request(
                "textDocument/codeLens", {"textDocument": {"uri": uri(TRAIN)}}, timeout=30
            )
            assert not [x for x in lenses or [] if x["command"]["command"] == "profd.record"]

        await rpc.with_client(doc, go)
    finally:
        d.stop()


# ---- MCP -------------------------------------------------------------------------------------------

HAVE_MCP = importlib.util.find_spec("mcp") is not None
needs_mcp = pytest.mark.skipif(
    not HAVE_MCP, reason="the mcp package is not installed (pip install profd[mcp])"
)
if HAVE_MCP:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client


def mcp_server(*args):
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "profd.server.daemon.cli", "mcp", *args],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def call(s, tool, **arguments):
    res = await s.call_tool(tool, arguments)
    return (None, res.content[0].text) if res.is_error else (res.structured_content, None)


async def with_session(params, fn):
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            return await fn(s)


@needs_mcp
async def test_record_program_only_with_allow_record(tmp_path):
    async def go(s):
        return {t.name for t in (await s.list_tools()).tools}

    assert "record_program" not in await with_session(mcp_server("--root", DATA, "--no-daemon"), go)


@needs_mcp
@needs_torch
async def test_record_program_confined_and_returns_findings(tmp_path):
    out = tmp_path / "traces"

    async def go(s):
        _, err = await call(s, "record_program", command=[sys.executable, "/etc/passwd.py"])
        assert err and "no such script" in err
        _, err = await call(s, "record_program", command=[sys.executable, "x.py"], cwd="/")
        assert err and "outside the roots" in err
        _, err = await call(s, "record_program", command=["/bin/echo", "hi"])
        assert err and "not a Python program" in err
        res, err = await call(
            s, "record_program", command=[sys.executable, "train_small.py"], warmup=2, timed=2, steps=3
        )
        assert err is None, err
        (trace,) = res["traces"]
        assert os.path.dirname(trace) == str(out) and res["unprofiledUsPerStep"] > 0
        assert res["steps"] == 3 and res["verdict"] == "cpu-only"
        assert any(
            f["code"] == "zero-grad-not-none" and f["line"] == 8 and f["file"] == TRAIN
            for f in res["findings"]
        )
        _, err = await call(
            s,
            "record_program",
            command=[sys.executable, "never_steps.py"],
            warmup=2,
            timed=2,
            steps=3,
            timeout_s=600,
        )
        assert err and "before the first step" in err and "--step forward" in err

    await with_session(
        mcp_server("--root", DATA, "--no-daemon", "--allow-record", "--workload-dir", str(out)), go
    )
