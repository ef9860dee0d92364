"""The editor experience end to end: ``profd serve --stdio`` driven by pytest-lsp's real client
(JSON-RPC over the process's pipes), with the capabilities real editors send (their
capability sets, tests/clients.py), on the shipped H200 traces.

Covered: the newest trace wins (by its recording time, not by which analysis finished last, and
across a restart), older reports stay reachable; findings whose frames do not map land on the
trace with a finding naming the prefix and the setting, and the ``path-map`` setting then maps
them; the editor's folders are the workspace; the lifecycle per spec; push only to clients that do
not pull, pull with result ids and ``unchanged``, refresh requests when a report lands; code lenses
per qualified function whose command shows something; before/after against the previous trace;
code actions that edit the buffer to code that compiles and runs; the annotated trace opened.
"""

import asyncio
import gzip
import json
import os
import shutil
import subprocess

import pytest
from lsprotocol import types as L
from pytest_lsp import client_capabilities, make_test_lsp_client

import clients
from conftest import SRC, trace
from daemon_util import await_for, drop, serve_cmd, trace_bytes, uri

from profd.server.daemon import quickfix

TRAIN_SRC = os.path.join(SRC, "train_tinygpt.py")
MODEL_SRC = os.path.join(SRC, "tinygpt.py")
SEED_SRC = os.path.join(SRC, "seed_matmul.py")
PUSH = "neovim@v0.9.1"  # no pull diagnostics: gets publishDiagnostics
PULL = "vscode"  # pulls (textDocument/diagnostic) and answers the refresh requests (tests/clients.py)


def capabilities(name):
    return clients.capabilities(name) if name in clients.ALL else client_capabilities(name)


def doc_id(path):
    return L.TextDocumentIdentifier(uri=uri(path))


async def start(tmp_path, caps, *, workspace=SRC, root=None, settings=None, state="state", extra=()):
    watch = tmp_path / "watch"
    watch.mkdir(exist_ok=True)
    client = make_test_lsp_client()
    client.refreshes = {"lens": 0, "hint": 0}

    @client.feature(L.WORKSPACE_CODE_LENS_REFRESH)
    def _lens_refresh(ls, params):
        client.refreshes["lens"] += 1

    @client.feature(L.WORKSPACE_INLAY_HINT_REFRESH)
    def _hint_refresh(ls, params):
        client.refreshes["hint"] += 1

    if settings is not None:
        client.set_configuration(settings, section="profd")
    await client.start_io(*serve_cmd(watch, tmp_path / state, *extra, workspace=workspace))
    params = L.InitializeParams(capabilities=capabilities(caps))
    if root:
        params.root_uri = uri(root)
        params.workspace_folders = [L.WorkspaceFolder(uri=uri(root), name="src")]
    await client.initialize_session(params)
    client.watch = str(watch)
    return client


async def stop(client):
    await client.shutdown_session()
    await client.stop()


async def rpc(client, method, params=None):
    return await client.protocol.send_request_async(method, params or {})


def field(obj, name):
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


async def pulled(client, path, previous=None):
    return await client.text_document_diagnostic_async(
        L.DocumentDiagnosticParams(text_document=doc_id(path), previous_result_id=previous)
    )


async def pull_until(client, path, pred, timeout=60, what="diagnostics"):
    """Pull until ``pred(codes)`` holds (a report under new options may still be on its way)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        rep = await pulled(client, path)
        if pred({d.code for d in rep.items}):
            return rep
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def hover_text(client, path, line0):
    h = await client.text_document_hover_async(
        L.HoverParams(text_document=doc_id(path), position=L.Position(line0, 4))
    )
    return h.contents.value if h else None


async def wait_reports(client, n, timeout=60):
    async def count():
        return field(await rpc(client, "profd/status"), "reports")

    deadline = asyncio.get_running_loop().time() + timeout
    while (c := await count()) < n:
        assert asyncio.get_running_loop().time() < deadline, f"{c} of {n} reports"
        await asyncio.sleep(0.1)


# ---- the newest trace wins; before/after --------------------------------------------------------
async def test_newest_recorded_trace_wins_over_the_last_analysed_and_shows_before_after(tmp_path):
    client = await start(tmp_path, PUSH)
    try:
        # tinygpt_tuned was recorded 12.7 s after tinygpt_naive (their own clocks); it lands first
        drop(client.watch, "tinygpt_tuned")
        await wait_reports(client, 1)
        tuned = {d.code for d in await await_for(lambda: client.diagnostics.get(uri(MODEL_SRC)), 30, "diags")}
        assert "fp32-matmul" not in tuned  # the tuned run uses TF32 / bf16
        drop(client.watch, "tinygpt_naive")  # older recording, analysed last
        await wait_reports(client, 2)
        await asyncio.sleep(0.3)
        assert {d.code for d in client.diagnostics.get(uri(MODEL_SRC), [])} == tuned
        assert not client.diagnostics.get(uri(TRAIN_SRC))  # naive's host-sync, zero-grad... not shown
        assert "tinygpt_tuned" in await hover_text(client, TRAIN_SRC, 52)
        # the older one stays reachable
        rows = field(await rpc(client, "profd/reports"), "reports")
        assert sorted(os.path.basename(field(r, "path")) for r in rows) == [
            "tinygpt_naive.json.gz",
            "tinygpt_tuned.json.gz",
        ]
        # before/after: the newest against the one recorded before it, per line
        text = await hover_text(client, TRAIN_SRC, 67)  # opt.zero_grad(set_to_none=...)
        assert "Before/after" in text and "tinygpt_naive" in text
        gone = next(ln for ln in text.splitlines() if ln.startswith("- gone:"))
        assert "`zero-grad-not-none`" in gone
        lenses = await client.text_document_code_lens_async(L.CodeLensParams(text_document=doc_id(TRAIN_SRC)))
        deltas = [x for x in lenses if x.command.title.startswith("profd: vs tinygpt_naive")]
        assert any(
            x.range.start.line == 67 and "zero-grad-not-none" in x.command.title.split("gone:")[1]
            for x in deltas
        )
        shown_text = await client.workspace_execute_command_async(
            L.ExecuteCommandParams(command=deltas[0].command.command, arguments=deltas[0].command.arguments)
        )
        assert "Before/after" in shown_text and any("Before/after" in m.message for m in client.messages)
    finally:
        await stop(client)
    # a restart keeps the order (from the store, nothing analysed again)
    again = await start(tmp_path, PUSH)
    try:
        await await_for(lambda: again.diagnostics.get(uri(MODEL_SRC)), 30, "diags after restart")
        assert {d.code for d in again.diagnostics[uri(MODEL_SRC)]} == tuned
        assert not again.diagnostics.get(uri(TRAIN_SRC))
        assert field(await rpc(again, "profd/status"), "analyses") == 0
    finally:
        await stop(again)


# ---- relatedInformation -------------------------------------------------------------------------
async def test_related_information_links_backward_waits_and_graph_breaks(tmp_path):
    rec_src = os.path.join(os.path.dirname(trace("sync_wait_busy")), "src")
    client = await start(tmp_path, PUSH, extra=("--workspace", rec_src))
    try:
        for name in ("tinygpt_naive", "sync_wait_busy", "graph_break_break"):
            drop(client.watch, name)

        def related(path, code):
            for d in client.diagnostics.get(uri(path), []):
                if d.code == code and d.related_information:
                    return [
                        (r.location.uri, r.location.range.start.line, r.message)
                        for r in d.related_information
                    ]
            return None

        # a forward line's GEMMs <-> the line whose backward pass runs their backward kernels
        rel = await await_for(lambda: related(MODEL_SRC, "fp32-matmul"), 60, "fp32-matmul related")
        assert (uri(TRAIN_SRC), 64) in [(u, ln) for u, ln, m in rel if "backward runs from here" in m]
        # a wait <-> the GPU work it waited for, where it was launched
        sync_src = os.path.join(rec_src, "sync_wait.py")
        rel = await await_for(lambda: related(sync_src, "sync-wait"), 60, "sync-wait related")
        assert any(u == uri(sync_src) and "the GPU work it waited for" in m for u, ln, m in rel)
        # a graph break <-> the compiled region it splits
        gb_src = os.path.join(rec_src, "graph_break.py")
        rel = await await_for(lambda: related(gb_src, "compile-graph-break"), 60, "graph-break related")
        assert any("the compiled region this break splits" in m for u, ln, m in rel)
    finally:
        await stop(client)


# ---- unmapped frames; settings ------------------------------------------------------------------
REMOTE = "/home/gpuuser/jobs/run42"


def remote_copy(dst_dir, name="tinygpt_naive"):
    """The real trace as if recorded on another machine: its frame paths under REMOTE (the events
    are untouched; only the file names in python_function frames get the remote prefix)."""
    doc = json.loads(gzip.decompress(trace_bytes(name)))
    for e in doc["traceEvents"]:
        if e.get("cat") == "python_function" and e["name"].split("(")[0] in (
            "train_tinygpt.py",
            "tinygpt.py",
        ):
            e["name"] = f"{REMOTE}/{e['name']}"
    path = os.path.join(str(dst_dir), "run42.json.gz")
    with open(path + ".part", "wb") as f:
        f.write(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    os.replace(path + ".part", path)
    return path


async def test_unmapped_frames_land_on_the_trace_and_the_path_map_setting_maps_them(tmp_path):
    client = await start(tmp_path, PULL, workspace=None, settings={})
    try:
        path = remote_copy(client.watch)
        await wait_reports(client, 1)
        await await_for(lambda: client.diagnostic_refresh_count > 0, 10, "diagnostic refresh")
        assert client.refreshes["lens"] > 0 and client.refreshes["hint"] > 0
        rep = await pulled(client, path)
        hint = next(d for d in rep.items if d.code == "unmapped-source")
        assert REMOTE in hint.message and f"--path-map {REMOTE}=" in hint.message
        assert "path-map" in hint.message and "train_tinygpt.py" in hint.message
        sync = next(d for d in rep.items if d.code == "host-sync")
        assert f"(at {REMOTE}/train_tinygpt.py:" in sync.message  # its frame's own line
        assert client.diagnostics == {}  # a pulling client gets no push (it would show them twice)
        # the trace is rarely open in the editor: workspace diagnostics carry it
        ws = await client.workspace_diagnostic_async(L.WorkspaceDiagnosticParams(previous_result_ids=[]))
        on_trace = next(r for r in ws.items if r.uri == uri(path))
        assert any(d.code == "unmapped-source" for d in on_trace.items)
        ws2 = await client.workspace_diagnostic_async(
            L.WorkspaceDiagnosticParams(
                previous_result_ids=[L.PreviousResultId(uri=r.uri, value=r.result_id) for r in ws.items]
            )
        )
        assert {r.kind for r in ws2.items} == {"unchanged"}
        # the same report again: unchanged
        again = await pulled(client, path, previous=rep.result_id)
        assert again.kind == "unchanged" and again.result_id == rep.result_id
        # the setting fixes it: didChangeConfiguration, the server asks for the section
        before = client.diagnostic_refresh_count
        client.set_configuration({"path-map": [f"{REMOTE}={SRC}"]}, section="profd")
        client.workspace_did_change_configuration(L.DidChangeConfigurationParams(settings=None))
        on_src = await pull_until(client, TRAIN_SRC, lambda c: "host-sync" in c)
        sync = next(d for d in on_src.items if d.code == "host-sync")
        assert sync.range.start.line == 69 and "(at " not in sync.message
        left = await pulled(client, path)
        assert not any(d.code == "unmapped-source" for d in left.items)
        await await_for(lambda: client.diagnostic_refresh_count > before, 10, "a refresh")
        # a bad value is said, not applied
        client.set_configuration({"select": ["host-synk"]}, section="profd")
        client.workspace_did_change_configuration(L.DidChangeConfigurationParams(settings=None))
        await await_for(lambda: any("host-synk" in m.message for m in client.messages), 10, "warning")
    finally:
        await stop(client)


async def test_settings_select_and_ignore_apply_like_tool_profd(tmp_path):
    client = await start(tmp_path, PULL, settings={"ignore": ["host-sync"]})
    try:
        drop(client.watch, "tinygpt_naive")
        await pull_until(client, TRAIN_SRC, lambda c: "zero-grad-not-none" in c)
        codes = {d.code for d in (await pulled(client, TRAIN_SRC)).items}
        assert "host-sync" not in codes  # ignored by the setting
        client.workspace_did_change_configuration(
            L.DidChangeConfigurationParams(settings={"profd": {"select": ["host-sync"]}})
        )
        await pull_until(client, TRAIN_SRC, lambda c: c == {"host-sync"}, what="only host-sync")
    finally:
        await stop(client)


async def test_the_editors_workspace_folders_are_the_workspace(tmp_path):
    client = await start(tmp_path, PUSH, workspace=None, root=SRC)
    try:
        drop(client.watch, "seed_n64_bf16")
        diags = await await_for(
            lambda: client.diagnostics.get(uri(SEED_SRC)), 30, "diagnostics on the source"
        )
        assert any(d.code == "overhead-bound" and d.range.start.line == 20 for d in diags)
        st = await rpc(client, "profd/status")
        assert field(st, "workspace") == [SRC]
    finally:
        await stop(client)


# ---- the lifecycle ------------------------------------------------------------------------------
def _frame(obj):
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read(stream):
    length = None
    while True:
        line = stream.readline()
        assert line, "the server closed its output"
        if line in (b"\r\n", b"\n"):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(stream.read(length))


def _answer(proc, msg_id):
    while True:
        msg = _read(proc.stdout)
        if msg.get("id") == msg_id and "method" not in msg:
            return msg


def test_lifecycle_errors_per_the_spec(tmp_path):
    watch = tmp_path / "watch"
    watch.mkdir()
    proc = subprocess.Popen(
        serve_cmd(watch, tmp_path / "state"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        hover = {"textDocument": {"uri": uri(SEED_SRC)}, "position": {"line": 20, "character": 4}}

        def send(obj):
            proc.stdin.write(_frame({"jsonrpc": "2.0", **obj}))
            proc.stdin.flush()

        send({"id": 1, "method": "textDocument/hover", "params": hover})
        assert _answer(proc, 1)["error"]["code"] == -32002  # ServerNotInitialized
        send(
            {
                "id": 2,
                "method": "initialize",
                "params": {"processId": None, "rootUri": None, "capabilities": {}},
            }
        )
        assert "capabilities" in _answer(proc, 2)["result"]
        send({"method": "initialized", "params": {}})
        send({"id": 3, "method": "profd/status", "params": {}})
        assert _answer(proc, 3)["result"]["version"]
        send({"id": 4, "method": "shutdown"})
        assert _answer(proc, 4)["result"] is None
        send({"id": 5, "method": "textDocument/hover", "params": hover})
        assert _answer(proc, 5)["error"]["code"] == -32600  # InvalidRequest after shutdown
        send({"method": "exit"})
        assert proc.wait(15) == 0  # exit after shutdown: success
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_exit_without_shutdown_exits_1(tmp_path):
    """The spec: "The server should exit with success code 0 if the shutdown request has been
    received before; otherwise with error code 1"."""
    watch = tmp_path / "watch"
    watch.mkdir()
    proc = subprocess.Popen(
        serve_cmd(watch, tmp_path / "state"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        proc.stdin.write(
            _frame(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"processId": None, "rootUri": None, "capabilities": {}},
                }
            )
        )
        proc.stdin.flush()
        assert "capabilities" in _answer(proc, 1)["result"]
        proc.stdin.write(_frame({"jsonrpc": "2.0", "method": "exit"}))
        proc.stdin.flush()
        assert proc.wait(15) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


# ---- lenses, code actions, annotated trace ------------------------------------------------------
async def test_lenses_per_qualified_function_do_something_visible(tmp_path):
    client = await start(tmp_path, PUSH)
    try:
        drop(client.watch, "tinygpt_naive")
        await await_for(lambda: client.diagnostics.get(uri(TRAIN_SRC)), 30, "diagnostics")
        lenses = await client.text_document_code_lens_async(L.CodeLensParams(text_document=doc_id(MODEL_SRC)))
        names = {x.command.title.split(":")[1].strip(): x for x in lenses}
        for q, def_line in (
            ("Attention.forward", 14),
            ("MLP.forward", 33),
            ("Block.forward", 45),
            ("TinyGPT.forward", 59),
        ):
            assert q in names, names.keys()
            assert names[q].range.start.line == def_line - 1
        lens = names["Attention.forward"]
        text = await client.workspace_execute_command_async(
            L.ExecuteCommandParams(command=lens.command.command, arguments=lens.command.arguments)
        )
        assert "Attention.forward" in text and "line 20" in text  # its hot lines, with numbers
        await await_for(
            lambda: any("Attention.forward" in m.message for m in client.messages), 5, "showMessage"
        )
        # kernel names keep what tells them apart
        hover = await hover_text(client, MODEL_SRC, 33)
        kernels = [ln for ln in hover.splitlines() if ln.startswith("- `")]
        assert len(kernels) == len(set(kernels)) and not any("`at::native::`" in k for k in kernels)
    finally:
        await stop(client)


async def code_actions(client, path, line0):
    return await client.text_document_code_action_async(
        L.CodeActionParams(
            text_document=doc_id(path),
            range=L.Range(L.Position(line0, 0), L.Position(line0, 0)),
            context=L.CodeActionContext(diagnostics=[]),
        )
    )


def annotate_command(acts):
    """The "open the annotated trace" action's command. lsprotocol's client-side converter reads
    any CodeAction that carries a command as a bare Command (its ``command`` the stringified
    object); real editors read the CodeAction."""
    import ast

    for a in acts:
        if isinstance(a, L.CodeAction) and a.command and a.command.command == "profd.annotate":
            return a.command
        if isinstance(a, L.Command) and "profd.annotate" in a.command:
            cmd = ast.literal_eval(a.command)
            return L.Command(title=cmd["title"], command=cmd["command"], arguments=cmd["arguments"])
    return None


def apply_edit(text, edit: L.WorkspaceEdit, path):
    edits = [
        quickfix.Edit(
            e.range.start.line, e.range.start.character, e.range.end.line, e.range.end.character, e.new_text
        )
        for e in edit.changes[uri(path)]
    ]
    return quickfix.apply(text, edits)


async def test_quick_fixes_edit_the_buffer_to_code_that_compiles(tmp_path):
    client = await start(tmp_path, PUSH)
    try:
        drop(client.watch, "tinygpt_naive")
        await await_for(lambda: client.diagnostics.get(uri(TRAIN_SRC)), 30, "diagnostics")
        text = open(TRAIN_SRC).read()
        client.text_document_did_open(
            L.DidOpenTextDocumentParams(
                text_document=L.TextDocumentItem(
                    uri=uri(TRAIN_SRC), language_id="python", version=1, text=text
                )
            )
        )
        want = {67: "zero_grad(set_to_none=True)", 66: "fused=True"}
        # the batch copied at line 52 is unpacked from a list inside the step loop: no place to pin
        # it once, and `.pin_memory()` there would pin every batch on the main thread
        acts = await code_actions(client, TRAIN_SRC, 52)
        assert [a.title for a in acts if a.title.startswith("Ignore pageable-memcpy")]
        assert not any(
            "pin_memory" in e.new_text
            for a in acts
            if getattr(a, "edit", None)
            for e in a.edit.changes[uri(TRAIN_SRC)]
        )
        for line0, expect in want.items():
            acts = await code_actions(client, TRAIN_SRC, line0)
            fix = next(
                a
                for a in acts
                if getattr(a, "edit", None)
                and "Ignore" not in a.title
                and expect in apply_edit(text, a.edit, TRAIN_SRC)
            )
            new = apply_edit(text, fix.edit, TRAIN_SRC)
            assert expect in new and new != text
            compile(new, TRAIN_SRC, "exec")
            sup = next(
                a for a in acts if a.title.startswith("Ignore") and a.diagnostics[0].range.start.line == line0
            )
            code = sup.diagnostics[0].code
            assert f"# profd: ignore[{code}]" in apply_edit(text, sup.edit, TRAIN_SRC).splitlines()[line0]
            assert annotate_command(acts) is not None
        # fp32 GEMMs in the model: TF32, or the statement under autocast
        model = open(MODEL_SRC).read()
        acts = await code_actions(client, MODEL_SRC, 33)
        titles = [a.title for a in acts]
        assert any("allow_tf32" in t for t in titles) and any("autocast" in t for t in titles)
        for a in acts:
            if getattr(a, "edit", None) and "Ignore" not in a.title:
                compile(apply_edit(model, a.edit, MODEL_SRC), MODEL_SRC, "exec")
    finally:
        await stop(client)


async def test_suppress_action_then_save_drops_the_finding(tmp_path):
    """The action writes the comment the engine reads (engine/suppress.py); saving re-reads."""
    ws = tmp_path / "src"
    shutil.copytree(SRC, ws)
    train = str(ws / "train_tinygpt.py")
    client = await start(tmp_path, PUSH, workspace=str(ws))
    try:
        drop(client.watch, "tinygpt_naive")
        diags = await await_for(lambda: client.diagnostics.get(uri(train)), 30, "diagnostics")
        assert any(d.code == "zero-grad-not-none" and d.range.start.line == 67 for d in diags)
        text = open(train).read()
        acts = await code_actions(client, train, 67)
        sup = next(a for a in acts if a.title.startswith("Ignore zero-grad-not-none"))
        with open(train, "w") as f:
            f.write(apply_edit(text, sup.edit, train))
        client.text_document_did_save(L.DidSaveTextDocumentParams(text_document=doc_id(train)))
        await await_for(
            lambda: not any(d.code == "zero-grad-not-none" for d in client.diagnostics.get(uri(train), [])),
            30,
            "suppressed",
        )
        assert any(d.code == "host-sync" for d in client.diagnostics[uri(train)])  # the others stay
    finally:
        await stop(client)


async def test_open_in_the_annotated_trace(tmp_path):
    client = await start(tmp_path, PULL)
    try:
        drop(client.watch, "seed_n64_bf16")
        await wait_reports(client, 1)
        acts = await code_actions(client, SEED_SRC, 20)
        ann = annotate_command(acts)
        res = await client.workspace_execute_command_async(
            L.ExecuteCommandParams(command=ann.command, arguments=ann.arguments)
        )
        out = field(res, "path")
        with gzip.open(out) as f:
            doc = json.load(f)
        assert any(e.get("cat") == "profd" for e in doc["traceEvents"])
        assert [d.uri for d in client.shown_documents] == [uri(out)]
    finally:
        await stop(client)


# ---- quick fixes that run (torch on the CPU) ----------------------------------------------------
def _load(text, name):
    import types

    mod = types.ModuleType(name)
    exec(compile(text, name, "exec"), mod.__dict__)
    return mod


def test_attention_and_model_fixes_run_and_compute_the_same():
    torch = pytest.importorskip("torch")
    text = open(MODEL_SRC).read()
    (att,) = quickfix.fixes(text, "unfused-attention", 22)
    fixed = quickfix.apply(text, att.edits)
    assert "scaled_dot_product_attention(q, k, v, attn_mask=mask" in fixed and "softmax" not in fixed
    mlp = next(i for i, ln in enumerate(fixed.splitlines(), 1) if "self.out(F.gelu" in ln)
    tf32, autocast = quickfix.fixes(fixed, "fp32-matmul", mlp)
    fixed = quickfix.apply(fixed, tf32.edits + autocast.edits)
    old, new = _load(text, "tinygpt_old"), _load(fixed, "tinygpt_new")
    torch.manual_seed(0)
    a = old.TinyGPT(vocab=64, d=32, heads=4, layers=2, ctx=16)
    b = new.TinyGPT(vocab=64, d=32, heads=4, layers=2, ctx=16)
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 64, (2, 16))
    la, lb = a(idx, idx), b(idx, idx)
    la, lb = (la[-1] if isinstance(la, tuple) else la), (lb[-1] if isinstance(lb, tuple) else lb)
    assert torch.allclose(la, lb, atol=1e-5)


async def test_attention_quick_fix_through_the_editor_runs_and_computes_the_same(tmp_path, monkeypatch):
    rec_src = os.path.join(os.path.dirname(trace("attention_naive")), "src")
    src = os.path.join(rec_src, "attention.py")
    client = await start(tmp_path, PUSH, workspace=rec_src)
    try:
        drop(client.watch, "attention_naive")
        diags = await await_for(lambda: client.diagnostics.get(uri(src)), 60, "diagnostics")
        line0 = next(d.range.start.line for d in diags if d.code == "unfused-attention")
        acts = await code_actions(client, src, line0)
        fix = next(a for a in acts if "scaled_dot_product_attention" in a.title)
        text = open(src).read()
        fixed = apply_edit(text, fix.edit, src)
    finally:
        await stop(client)
    assert "F.scaled_dot_product_attention(q, k, v" in fixed and "softmax(att" not in fixed
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(rec_src)  # its profiler helper
    old, new = _load(text, "attention_old"), _load(fixed, "attention_new")
    torch.manual_seed(0)
    a, b = old.Attention(64, 4, 32, naive=True), new.Attention(64, 4, 32, naive=True)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 32, 64)
    assert torch.allclose(a(x), b(x), atol=1e-5)


def test_conv_fix_runs(monkeypatch):
    torch = pytest.importorskip("torch")
    src_dir = os.path.join(os.path.dirname(trace("conv_bias_bn")), "src")
    text = open(os.path.join(src_dir, "conv_bn.py")).read()
    (fix,) = quickfix.fixes(text, "conv-bias-before-bn", 29)
    fixed = quickfix.apply(text, fix.edits)
    monkeypatch.syspath_prepend(src_dir)  # its profiler helper
    monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, *a, **k: self)  # a CPU-only machine
    model = _load(fixed, "conv_bn_fixed").build(True)  # --bias: the fix wins over the flag
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(c.bias is None for c in convs)
    model(torch.randn(2, 3, 32, 32))
