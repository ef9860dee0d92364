"""Every editor the docs cover sees every report: ``profd serve --stdio`` driven by a raw LSP
client (pytest-lsp's, JSON-RPC over the process's pipes) that sends each editor's real capability
set (tests/clients.py), on the shipped H200 traces tinygpt_naive and tinygpt_tuned (recorded
12.7 s later: it replaces naive's findings).

Before this, Neovim 0.10-0.12 (they pull but cannot be asked to pull again) showed nothing until
the user edited the buffer: their first pull was answered before the report existed.
"""

import asyncio
import os

import pytest
from lsprotocol import types as L
from pygls.protocol import default_converter
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, LanguageClient, register_lsp_features

import clients
from conftest import SRC
from daemon_util import await_for, drop, serve_cmd, uri

TRAIN_SRC = os.path.join(SRC, "train_tinygpt.py")
MODEL_SRC = os.path.join(SRC, "tinygpt.py")


async def start(tmp_path, name, *before, root=SRC):
    """A server for client ``name`` (its workspace ``root``), with the traces ``before`` in its
    folder when it starts."""
    watch = tmp_path / "watch"
    watch.mkdir(exist_ok=True)
    for t in before:
        drop(watch, t)
    client = LanguageClient(converter_factory=default_converter)
    client.ready = []  # (reportReady params, what was pushed when it came)
    client.sent = []  # every publishDiagnostics, by uri, in order

    def _pub(ls, params: L.PublishDiagnosticsParams):
        client.sent.append(params.uri)
        client.diagnostics[params.uri] = params.diagnostics

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, L.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: _pub})

    @client.feature("profd/reportReady")
    def _ready(ls, params):
        client.ready.append((params, {u: list(d) for u, d in client.diagnostics.items()}))

    await client.start_io(*serve_cmd(watch, tmp_path / "state", workspace=None))
    result = await client.initialize_session(
        L.InitializeParams(
            capabilities=clients.capabilities(name),
            root_uri=uri(root),
            workspace_folders=[L.WorkspaceFolder(uri=uri(root), name="src")],
        )
    )
    client.pulls = result.capabilities.diagnostic_provider is not None
    client.watch = str(watch)
    return client


async def stop(client):
    await client.shutdown_session()
    await client.stop()


def did_open(client, path):
    client.text_document_did_open(
        L.DidOpenTextDocumentParams(
            text_document=L.TextDocumentItem(
                uri=uri(path), language_id="python", version=1, text=open(path).read()
            )
        )
    )


async def pull(client, path):
    rep = await client.text_document_diagnostic_async(
        L.DocumentDiagnosticParams(text_document=L.TextDocumentIdentifier(uri=uri(path)))
    )
    return rep.items


def pushed(client, path):
    return client.diagnostics.get(uri(path), [])


def has(diags, code, line0=None):
    return any(d.code == code and (line0 is None or d.range.start.line == line0) for d in diags)


def ready_for(client, trace_name):
    return [(p, snap) for p, snap in client.ready if os.path.basename(p.path).startswith(trace_name)]


async def replaced_by_tuned(client):
    """The newer trace lands: naive's fp32-matmul on tinygpt.py gives way to tuned's findings."""
    refreshes = client.diagnostic_refresh_count
    drop(client.watch, "tinygpt_tuned")
    if client.pulls:
        await await_for(
            lambda: client.diagnostic_refresh_count > refreshes and ready_for(client, "tinygpt_tuned"),
            60,
            "a refresh after the newer trace",
        )
        assert not has(await pull(client, MODEL_SRC), "fp32-matmul")
        assert client.diagnostics == {}  # a pulling client gets no push: nothing shown twice
    else:
        ((_, snap),) = await await_for(lambda: ready_for(client, "tinygpt_tuned"), 60, "reportReady")
        # published before the report is announced: shown the moment it exists
        assert not has(snap.get(uri(MODEL_SRC), []), "fp32-matmul")
        assert not has(pushed(client, MODEL_SRC), "fp32-matmul")


@pytest.mark.parametrize("name", clients.ALL)
async def test_a_file_opened_after_its_trace_landed_shows_its_findings(tmp_path, name):
    client = await start(tmp_path, name, "tinygpt_naive")  # there before the editor starts
    try:
        assert client.pulls == (name in clients.PULL)
        did_open(client, TRAIN_SRC)
        if client.pulls:
            # the editor pulls as the buffer opens, before the start-up scan is done: the
            # answer waits for the report instead of saying "nothing"
            diags = await pull(client, TRAIN_SRC)
        else:
            diags = await await_for(lambda: pushed(client, TRAIN_SRC), 60, "pushed diagnostics")
        assert has(diags, "host-sync", 69)  # loss.item() on line 70
        await replaced_by_tuned(client)
    finally:
        await stop(client)


@pytest.mark.parametrize("name", clients.ALL)
async def test_a_file_opened_before_its_trace_lands_shows_its_findings(tmp_path, name):
    client = await start(tmp_path, name)
    try:
        did_open(client, TRAIN_SRC)
        if client.pulls:
            assert list(await pull(client, TRAIN_SRC)) == []  # nothing to wait for: known absent
        refreshes = client.diagnostic_refresh_count
        drop(client.watch, "tinygpt_naive")
        ((_, snap),) = await await_for(lambda: ready_for(client, "tinygpt_naive"), 60, "reportReady")
        if client.pulls:
            await await_for(lambda: client.diagnostic_refresh_count > refreshes, 10, "a refresh")
            assert has(await pull(client, TRAIN_SRC), "host-sync", 69)
        else:
            assert has(snap.get(uri(TRAIN_SRC), []), "host-sync", 69)
        await replaced_by_tuned(client)
    finally:
        await stop(client)


async def test_each_file_is_published_once_per_change(tmp_path):
    """No repeats: a report, a settings change that changes nothing shown, a second identical
    trace under another name: each file's diagnostics are sent only when they differ."""
    client = await start(tmp_path, "neovim-0.7.2")
    sent = client.sent
    try:
        drop(client.watch, "tinygpt_naive")
        await await_for(lambda: ready_for(client, "tinygpt_naive"), 60, "reportReady")
        await asyncio.sleep(0.3)
        first = list(sent)
        assert first and len(first) == len(set(first)), first
        # the same content again under another name: nothing new to show
        import shutil

        shutil.copy(
            os.path.join(client.watch, "tinygpt_naive.json.gz"), os.path.join(client.watch, "copy.json.gz")
        )
        await await_for(lambda: len(client.ready) >= 2, 30, "the copy's reportReady")
        client.workspace_did_change_configuration(
            L.DidChangeConfigurationParams(settings={"profd": {"path-map": []}})
        )
        await asyncio.sleep(1.0)
        again = sent[len(first) :]
        assert uri(TRAIN_SRC) not in again and uri(MODEL_SRC) not in again, again
    finally:
        await stop(client)


# ---- edits after profiling: findings stay on their statements ------------------------------------
def change(client, path, version, line0, text, end=None):
    """An incremental didChange: ``text`` replaces [line0:0, end) (an insertion by default)."""
    end = end or L.Position(line0, 0)
    client.text_document_did_change(
        L.DidChangeTextDocumentParams(
            text_document=L.VersionedTextDocumentIdentifier(uri=uri(path), version=version),
            content_changes=[
                L.TextDocumentContentChangePartial(range=L.Range(L.Position(line0, 0), end), text=text)
            ],
        )
    )


async def shown_now(client, path, previous=None):
    """What the editor shows on ``path`` once its findings settle: (items, result id or None)."""
    if client.pulls:
        rep = await client.text_document_diagnostic_async(
            L.DocumentDiagnosticParams(
                text_document=L.TextDocumentIdentifier(uri=uri(path)), previous_result_id=previous
            )
        )
        assert rep.kind == "full", "a buffer that moved must not be answered unchanged"
        return list(rep.items), rep.result_id
    await asyncio.sleep(0.6)  # the push after an edit waits for typing to pause (0.2 s)
    return list(pushed(client, path)), None


def statements(diags, lines):
    return sorted((d.code, lines[d.range.start.line].strip()) for d in diags)


@pytest.mark.parametrize("name", ["neovim-0.7.2", "neovim-0.12.0-dev", "vscode"])
async def test_an_edit_then_a_save_keeps_every_finding_on_its_statement(tmp_path, name):
    """The issue's case: one line added at the top of tinygpt.py (unsaved, then saved) put every
    finding on the line above its statement and added a gpu-idle-gap warning (the old trace was
    analysed again against the new text). Now the trace's positions move with the edit."""
    import shutil

    ws = tmp_path / "src"
    shutil.copytree(SRC, ws)
    model = str(ws / "tinygpt.py")
    client = await start(tmp_path, name, "tinygpt_naive", root=str(ws))
    try:
        text = open(model).read()
        lines = text.splitlines()
        did_open(client, model)
        if client.pulls:
            before, rid = await shown_now(client, model)
        else:
            before = await await_for(lambda: pushed(client, model), 60, "pushed diagnostics")
            rid = None
        assert has(before, "fp32-matmul", 33)
        want = statements(before, lines)
        # one line added at the top, not saved
        change(client, model, 2, 0, "import os  # added after profiling\n")
        lines = ["import os  # added after profiling"] + lines
        moved, rid2 = await shown_now(client, model, rid)
        if not client.pulls:
            moved = await await_for(
                lambda: has(pushed(client, model), "fp32-matmul", 34) and pushed(client, model),
                10,
                "the findings moved",
            )
        assert statements(moved, lines) == want  # every finding on its statement, none new
        assert rid2 != rid or not client.pulls
        hover = await client.text_document_hover_async(
            L.HoverParams(text_document=L.TextDocumentIdentifier(uri=uri(model)), position=L.Position(34, 8))
        )
        assert hover and "GPU" in hover.contents.value and "changed since" not in hover.contents.value
        # saved: still the trace's report, on the saved text; nothing analysed again
        with open(model, "w") as f:
            f.write("\n".join(lines) + "\n")
        client.text_document_did_save(
            L.DidSaveTextDocumentParams(text_document=L.TextDocumentIdentifier(uri=uri(model)))
        )
        saved, _ = await shown_now(client, model)
        if not client.pulls:
            saved = pushed(client, model)
        assert statements(saved, lines) == want
        st = await client.protocol.send_request_async("profd/status", {})
        assert st.analyses == 1
        # the statement itself edited: the finding stays on it and the hover says it changed
        stmt = lines[34]
        change(client, model, 3, 34, stmt + "  # tf32 later", end=L.Position(34, len(stmt)))
        lines[34] = stmt + "  # tf32 later"
        edited, _ = await shown_now(client, model)
        if not client.pulls:
            edited = await await_for(
                lambda: (
                    [d for d in pushed(client, model) if d.code == "fp32-matmul"] and pushed(client, model)
                ),
                10,
                "",
            )
        assert has(edited, "fp32-matmul", 34)
        hover = await client.text_document_hover_async(
            L.HoverParams(text_document=L.TextDocumentIdentifier(uri=uri(model)), position=L.Position(34, 8))
        )
        assert "changed since the trace" in hover.contents.value and "it was line 34" in hover.contents.value
    finally:
        await stop(client)


# ---- findings whose frames cannot be placed ------------------------------------------------------
async def test_unplaced_findings_are_told_and_the_suggested_map_places_them(tmp_path):
    """The same sources in two folders of the workspace and a trace recorded elsewhere (its
    frames under /home/gpuuser/jobs/run42): nothing can be placed. Before, the findings and the
    hint sat on the trace file only (eglot drops those, Neovim keeps them in a hidden buffer) and
    the map the hint suggested (onto the workspace root) placed nothing."""
    import shutil

    from test_editor import REMOTE, remote_copy

    ws = tmp_path / "ws"
    for sub in ("a", "b"):
        shutil.copytree(SRC, ws / sub)
    client = await start(tmp_path, "neovim-0.7.2", root=str(ws))
    try:
        train_a = str(ws / "a" / "train_tinygpt.py")
        did_open(client, train_a)
        remote_copy(client.watch)
        await await_for(lambda: client.ready, 60, "reportReady")
        told = await await_for(
            lambda: [
                m for m in client.messages if m.type == L.MessageType.Warning and "run42.json.gz" in m.message
            ],
            30,
            "a showMessage",
        )
        text = told[0].message
        for sub in ("a", "b"):  # both folders hold the files: both maps, to pick from
            assert f"--path-map {REMOTE}={ws / sub}" in text, text
        # where the user looks: a note on the open file of that name
        note = await await_for(
            lambda: [d for d in pushed(client, train_a) if d.code == "unmapped-source"],
            30,
            "a note on the open file",
        )
        assert "run42.json.gz" in note[0].message and f"{REMOTE}/train_tinygpt.py" in note[0].message
        # the suggested map works: the findings land on their lines
        client.workspace_did_change_configuration(
            L.DidChangeConfigurationParams(settings={"profd": {"path-map": [f"{REMOTE}={ws / 'a'}"]}})
        )
        diags = await await_for(
            lambda: has(pushed(client, train_a), "host-sync", 69) and pushed(client, train_a),
            60,
            "the findings on their lines",
        )
        assert not any(d.code == "unmapped-source" for d in diags)
        await asyncio.sleep(0.5)
        assert (
            len(told)
            == len(
                [
                    m
                    for m in client.messages
                    if m.type == L.MessageType.Warning and "run42.json.gz" in m.message
                ]
            )
            == 1
        )  # said once
    finally:
        await stop(client)


async def test_every_analysis_reports_progress_with_percentages(tmp_path):
    """$/progress was sent only for traces of 8 MB and more, with no percentage between begin
    and end. A 3 MB trace (an FSDP rank of a real H200 run) now has its begin, reports in
    between (estimated from the bytes per second of analyses before it) and its end."""
    client = await start(tmp_path, "vscode")
    try:
        drop(client.watch, "fsdp_rank0")
        await await_for(lambda: client.ready, 120, "reportReady")
        await asyncio.sleep(0.3)
        runs = {t: r for t, r in client.progress_reports.items() if str(t).startswith("profd-analyze-")}
        assert len(runs) == 1, client.progress_reports
        (reports,) = runs.values()
        kinds = [r.kind for r in reports]
        assert kinds[0] == "begin" and kinds[-1] == "end" and kinds.count("report") >= 1, kinds
        pcts = [r.percentage for r in reports if r.kind == "report"]
        assert all(0 <= p < 100 for p in pcts) and pcts == sorted(pcts) and pcts[-1] > 0, pcts
    finally:
        await stop(client)
