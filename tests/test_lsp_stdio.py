"""The daemon as an editor spawns it: ``profd serve --stdio``, driven by pytest-lsp's client."""

import asyncio
import os
import urllib.parse

import pytest
from lsprotocol import types as L
from pytest_lsp import client_capabilities, make_test_lsp_client

from conftest import SRC
from daemon_util import await_for, drop, serve_cmd, trace_bytes, uri

SEED_SRC = os.path.join(SRC, "seed_matmul.py")
TRAIN_SRC = os.path.join(SRC, "train_tinygpt.py")


@pytest.fixture
async def lsp(tmp_path):
    watch, state = tmp_path / "watch", tmp_path / "state"
    watch.mkdir()
    client = make_test_lsp_client()
    await client.start_io(*serve_cmd(watch, state))
    caps = client_capabilities("neovim@v0.9.1")  # pushes only (pulling clients: test_editor.py)
    await client.initialize_session(L.InitializeParams(capabilities=caps))
    client.watch = str(watch)
    yield client
    await client.shutdown_session()
    await client.stop()


async def status(client):
    return await client.protocol.send_request_async("profd/status", {})


def field(obj, name):
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


async def test_dropped_trace_gives_diagnostics_and_hover_on_the_source_line(lsp):
    drop(lsp.watch, "seed_n64_bf16")
    diags = await await_for(lambda: lsp.diagnostics.get(uri(SEED_SRC)), 20, "diagnostics")
    d = next(d for d in diags if d.code == "overhead-bound")
    assert d.range.start.line == 20  # seed_matmul.py:21, 0-based
    assert d.severity == L.DiagnosticSeverity.Warning and d.source == "profd"
    # the rule's page in the docs installed with profd (a file that exists), at the rule's anchor
    href = d.code_description.href
    assert href.startswith("file://") and href.endswith("#overhead-bound")
    assert os.path.isfile(urllib.parse.unquote(href[len("file://") :].split("#")[0]))
    assert "fix:" in d.message

    hover = await lsp.text_document_hover_async(
        L.HoverParams(text_document=L.TextDocumentIdentifier(uri=uri(SEED_SRC)), position=L.Position(20, 4))
    )
    text = hover.contents.value
    # per profiled step, as the findings say: 11.9 µs and 6 launches over the 3 steps
    assert "per step (mean of 3 profiled steps)" in text
    assert "GPU: 4.0 µs" in text and "Launches: 2" in text and "(gemm)" in text
    assert "seed_n64_bf16.json.gz" in text  # which trace

    pulled = await lsp.text_document_diagnostic_async(
        L.DocumentDiagnosticParams(text_document=L.TextDocumentIdentifier(uri=uri(SEED_SRC)))
    )
    assert {x.code for x in pulled.items} == {x.code for x in diags}

    hints = await lsp.text_document_inlay_hint_async(
        L.InlayHintParams(
            text_document=L.TextDocumentIdentifier(uri=uri(SEED_SRC)),
            range=L.Range(L.Position(0, 0), L.Position(100, 0)),
        )
    )
    assert any(h.position.line == 20 and "GPU" in h.label for h in hints)
    lenses = await lsp.text_document_code_lens_async(
        L.CodeLensParams(text_document=L.TextDocumentIdentifier(uri=uri(SEED_SRC)))
    )
    costs = [
        lens for lens in lenses if lens.command.command != "profd.record"
    ]  # "Profile with profd": issue 31
    assert costs and all(lens.command.title.startswith("profd:") for lens in costs)

    st = await status(lsp)
    assert field(st, "reports") == 1 and field(st, "analyses") == 1


async def test_training_trace_lands_on_train_tinygpt_and_analyze_request(lsp):
    drop(lsp.watch, "tinygpt_naive")
    diags = await await_for(lambda: lsp.diagnostics.get(uri(TRAIN_SRC)), 30, "diagnostics")
    sync = next(d for d in diags if d.code == "host-sync")
    assert sync.range.start.line == 69  # loss.item() on line 70
    # profd/analyze of the same file: served from the store, no second analysis
    path = os.path.join(lsp.watch, "tinygpt_naive.json.gz")
    rep = await lsp.protocol.send_request_async("profd/analyze", {"path": path})
    assert field(field(rep, "trace"), "path") == path
    assert field(await status(lsp), "analyses") == 1
    via_cmd = await lsp.workspace_execute_command_async(
        L.ExecuteCommandParams(command="profd.analyze", arguments=[path])
    )
    assert field(field(via_cmd, "summary"), "verdict") == field(field(rep, "summary"), "verdict")
    # outside the roots: refused
    with pytest.raises(Exception, match="outside"):
        await lsp.protocol.send_request_async("profd/analyze", {"path": "/etc/passwd"})
    with pytest.raises(Exception, match="outside"):
        await lsp.protocol.send_request_async(
            "profd/analyze", {"path": os.path.join(lsp.watch, "..", "..", "x.json")}
        )


async def test_half_written_trace_waits_until_complete(lsp):
    data = trace_bytes("seed_n64_bf16")
    path = os.path.join(lsp.watch, "slow.json.gz")
    half = len(data) // 2
    with open(path, "wb") as f:
        # first half in small pieces (faster than the 0.2 s settle), then a pause longer than
        # settle but shorter than quiet (0.8 s): it is tried, fails, and is not reported
        for i in range(0, half, 4096):
            f.write(data[i : min(i + 4096, half)])
            f.flush()
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.45)
        assert uri(SEED_SRC) not in lsp.diagnostics and uri(path) not in lsp.diagnostics
        f.write(data[half:])
    diags = await await_for(lambda: lsp.diagnostics.get(uri(SEED_SRC)), 20, "diagnostics")
    assert any(d.code == "overhead-bound" for d in diags)
    # trace-level findings arrive in their own notification, maybe a moment later: but no error
    on_trace = await await_for(lambda: lsp.diagnostics.get(uri(path)), 20, "trace diagnostics")
    assert on_trace and not any(d.code == "bad-trace" for d in on_trace)
    reps = await lsp.protocol.send_request_async("profd/reports", {})
    rows = field(reps, "reports")
    assert len(rows) == 1 and field(rows[0], "error") is None


async def test_corrupt_file_gives_one_error(lsp):
    bad = os.path.join(lsp.watch, "bad.json")
    with open(bad, "wb") as f:
        f.write(b'{"traceEvents": [ {"ph": "X", "name": ')
    diags = await await_for(lambda: lsp.diagnostics.get(uri(bad)), 20, "error diagnostic")
    assert len(diags) == 1 and "bad.json" in diags[0].message
    assert diags[0].severity == L.DiagnosticSeverity.Error
    errors = lambda: [m for m in lsp.log_messages if m.type == L.MessageType.Error]  # noqa: E731
    await await_for(lambda: errors(), 5, "logMessage")
    await asyncio.sleep(1.2)  # longer than quiet: no retry loop, still one
    assert len(errors()) == 1
    st = await status(lsp)
    assert field(st, "reports") == 1 and field(st, "queued") == 0


async def test_run_workload_writes_into_the_watched_folder_and_answers_with_findings(lsp):
    pytest.importorskip("torch")
    res = await lsp.protocol.send_request_async(
        "profd/runWorkload", {"workload": "matmul-bias", "params": {"n": 64, "device": "cpu", "active": 2}}
    )
    trace_path = field(res, "trace")
    assert os.path.dirname(trace_path) == lsp.watch and trace_path.endswith(".json.gz")
    assert os.path.isfile(field(res, "table"))
    rep = field(res, "report")
    assert field(field(rep, "summary"), "verdict") == "cpu-only"
    # only built-in workloads with validated parameters
    with pytest.raises(Exception, match="unknown workload"):
        await lsp.protocol.send_request_async("profd/runWorkload", {"workload": "rm -rf /"})
    with pytest.raises(Exception):
        await lsp.protocol.send_request_async(
            "profd/runWorkload", {"workload": "matmul-bias", "params": {"n": "64; echo"}}
        )


async def test_a_reply_with_non_ascii_text_is_framed_in_bytes(lsp, tmp_path):
    """The daemon writes its replies with orjson, in UTF-8 rather than stdlib json's ASCII
    escapes: the Content-Length must count the bytes, or the client misreads every message
    after the first one that holds a non-ASCII character. A reply naming a file called
    ``ünï✓.json`` is read whole, and the next request is still answered."""
    odd = str(tmp_path / "ünï✓.json")
    with pytest.raises(Exception) as got:
        await lsp.workspace_execute_command_async(
            L.ExecuteCommandParams(command="profd.analyze", arguments=[odd])
        )
    assert "ünï✓" in str(got.value), got.value
    st = await status(lsp)
    assert field(st, "pid") > 0
