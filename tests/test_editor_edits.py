"""Edits and positions the editor gets right on real text (issues 26 and 28): ``profd serve
--stdio`` driven by pytest-lsp's client with real editors' capability snapshots, on the shipped
tinygpt_naive trace (H200) over a copy of its source that holds what real files hold and the
trace cannot tell apart: a form feed, ``\\x1c``, ``\\x85`` and U+2028 in the docstring (Python,
the LSP and editors end lines at ``\\n``, ``\\r\\n``, ``\\r`` only; ``str.splitlines`` does not),
an emoji and an "é" before the ``zero_grad`` call (columns in UTF-16 or UTF-8 units, as the client
negotiated), a statement continued by a trailing backslash, and a string holding the
suppression comment's text. No line is added or removed: the trace's lines stay the source's.
"""

import os
import shutil

import pytest
from lsprotocol import types as L
from pytest_lsp import client_capabilities, make_test_lsp_client

from conftest import SRC, trace
from daemon_util import await_for, drop, serve_cmd, uri

TRAIN = "train_tinygpt.py"
PUSH = "neovim@v0.9.1"  # publishDiagnostics, no positionEncodings: UTF-16
EGLOT = "emacs@v29.1"  # positionEncodings utf-32, utf-8, utf-16


def _edit_lines(path, edits):
    lines = open(path, newline="").read().split("\n")
    for needle, fn in edits:
        k = next(i for i, ln in enumerate(lines) if needle in ln)
        lines[k] = fn(lines[k])
    with open(path, "w", newline="") as f:
        f.write("\n".join(lines))


@pytest.fixture
def ws(tmp_path):
    d = tmp_path / "src"
    shutil.copytree(SRC, d)
    _edit_lines(
        str(d / TRAIN),
        [
            ("naive   - pageable host batches", lambda s: s + " \x0c\x1c"),
            ("zero_grad(set_to_none=False), AdamW", lambda s: s + " \x85\u2028"),
            ("x = xb.to(dev", lambda s: s + "; \\"),  # the copies of x and y: one statement now
            (
                "opt.zero_grad(set_to_none=not naive)",
                lambda s: s.replace("opt.zero_grad", '_ = "🙂é"; opt.zero_grad'),
            ),
            (
                'print("step", step',
                lambda s: s + '; _ = "# profd: ignore[host-sync]"',
            ),  # a string, not a comment
        ],
    )
    text = open(d / TRAIN, newline="").read()
    assert len(text.split("\n")) == len(open(os.path.join(SRC, TRAIN)).read().split("\n"))
    assert len(text.splitlines()) > len(text.split("\n"))  # what str.splitlines would have counted
    compile(text, TRAIN, "exec")
    return str(d)


async def start(tmp_path, caps, workspace):
    watch = tmp_path / "watch"
    watch.mkdir(parents=True, exist_ok=True)
    client = make_test_lsp_client()
    await client.start_io(*serve_cmd(watch, tmp_path / "state", workspace=workspace))
    await client.initialize_session(L.InitializeParams(capabilities=client_capabilities(caps)))
    client.watch = str(watch)
    return client


async def stop(client):
    await client.shutdown_session()
    await client.stop()


def doc_id(path):
    return L.TextDocumentIdentifier(uri=uri(path))


def open_doc(client, path):
    text = open(path, newline="").read()
    client.text_document_did_open(
        L.DidOpenTextDocumentParams(
            text_document=L.TextDocumentItem(uri=uri(path), language_id="python", version=1, text=text)
        )
    )
    return text


async def actions(client, path, line0, only=None):
    return await client.text_document_code_action_async(
        L.CodeActionParams(
            text_document=doc_id(path),
            range=L.Range(L.Position(line0, 0), L.Position(line0, 0)),
            context=L.CodeActionContext(diagnostics=[], only=only),
        )
    )


# the client's side, written here on purpose (not profd's encoding.py): columns in its units
def units(s, enc):
    return (
        len(s)
        if enc == "utf-32"
        else len(s.encode(enc.replace("utf-16", "utf-16-le"))) // (2 if enc == "utf-16" else 1)
    )


def char_col(line, col, enc):
    n = 0
    for i, ch in enumerate(line):
        if n >= col:
            return i
        n += units(ch, enc)
    return len(line)


def apply_client_edits(text, edits, enc):
    """``text`` with LSP TextEdits applied as an editor does, lines ending at \\n, \\r\\n, \\r."""
    import re

    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    lines = [text[a:b].rstrip("\r\n") for a, b in zip(starts, starts[1:] + [len(text)])]

    def off(p):
        return starts[p.line] + char_col(lines[p.line], p.character, enc)

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: off(e.range.start)] + e.new_text + text[off(e.range.end) :]
    return text


def lines_of(text):
    import re

    return re.split(r"\r\n|\r|\n", text)


async def diagnostics(client, caps, path, timeout=60):
    """Pushed, or pulled by a client that pulls."""
    if client_capabilities(caps).text_document.diagnostic is None:
        return await await_for(lambda: client.diagnostics.get(uri(path)), timeout, "diagnostics")
    import asyncio

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        rep = await client.text_document_diagnostic_async(
            L.DocumentDiagnosticParams(text_document=doc_id(path))
        )
        if rep.items:
            return rep.items
        assert asyncio.get_running_loop().time() < deadline, "no diagnostics"
        await asyncio.sleep(0.2)


async def opened(client, caps, name, path):
    """Drop the trace ``name``, wait for its findings on ``path``, open ``path``: (findings, text)."""
    drop(client.watch, name)
    diags = await diagnostics(client, caps, path)
    return diags, open_doc(client, path)


async def _findings_and_fixes(tmp_path, ws, caps, enc):
    train = os.path.join(ws, TRAIN)
    client = await start(tmp_path, caps, ws)
    try:
        diags, text = await opened(client, caps, "tinygpt_naive", train)
        lines = lines_of(text)
        by_code = {}
        for d in diags:
            by_code.setdefault(d.code, []).append(d)
        # every finding on its statement, though the docstring above holds \f, \x1c, \x85, U+2028
        zg = by_code["zero-grad-not-none"][0]
        assert "opt.zero_grad(" in lines[zg.range.start.line]
        # its range starts at the call, in the client's units, past the emoji and the é
        line = lines[zg.range.start.line]
        assert zg.range.start.character == units(line[: line.index("opt.zero_grad")], enc)
        assert {"pageable-memcpy", "optimizer-foreach-off", "zero-grad-not-none"} <= set(by_code)
        assert all(
            "xb.to(" in lines[d.range.start.line] or "yb.to(" in lines[d.range.start.line]
            for d in by_code["pageable-memcpy"]
        )
        # a string holding the comment's text suppresses nothing
        assert any("loss.item()" in lines[d.range.start.line] for d in by_code.get("host-sync", []))

        # the zero_grad fix writes set_to_none=True, not set_to_noneTruee
        acts = await actions(client, train, zg.range.start.line)
        fix = next(a for a in acts if a.title == "Use zero_grad(set_to_none=True)")
        fixed = apply_client_edits(text, fix.edit.changes[uri(train)], enc)
        assert '_ = "🙂é"; opt.zero_grad(set_to_none=True)' in fixed
        compile(fixed, train, "exec")

        # "ignore on this line" after a trailing backslash: at the end of the statement, compiling
        copy = next(d for d in by_code["pageable-memcpy"] if lines[d.range.start.line].endswith("\\"))
        acts = await actions(client, train, copy.range.start.line)
        sup = next(a for a in acts if a.title.startswith("Ignore pageable-memcpy"))
        ignored = apply_client_edits(text, sup.edit.changes[uri(train)], enc)
        compile(ignored, train, "exec")
        new_lines = lines_of(ignored)
        assert (
            new_lines[copy.range.start.line] == lines[copy.range.start.line]
        )  # the backslash line as it was
        assert new_lines[copy.range.start.line + 1].endswith("# profd: ignore[pageable-memcpy]")
        return train, ignored, client
    except BaseException:
        await stop(client)
        raise


async def test_lines_columns_and_edits_on_real_text_utf16(tmp_path, ws):
    train, ignored, client = await _findings_and_fixes(tmp_path, ws, PUSH, "utf-16")
    try:
        # and the comment it wrote does suppress the finding once saved
        client.text_document_did_change(
            L.DidChangeTextDocumentParams(
                text_document=L.VersionedTextDocumentIdentifier(uri=uri(train), version=2),
                content_changes=[L.TextDocumentContentChangeWholeDocument(text=ignored)],
            )
        )
        with open(train, "w", newline="") as f:
            f.write(ignored)
        client.text_document_did_save(L.DidSaveTextDocumentParams(text_document=doc_id(train)))
        await await_for(
            lambda: not any(d.code == "pageable-memcpy" for d in client.diagnostics.get(uri(train), [])),
            30,
            "suppressed",
        )
    finally:
        await stop(client)


async def test_lines_columns_and_edits_on_real_text_negotiated_encoding(tmp_path, ws):
    """eglot offers utf-32 first; a client offering only utf-8 gets utf-8 (Neovim 0.11 lists
    utf-8 first)."""
    train, _, client = await _findings_and_fixes(tmp_path, ws, EGLOT, "utf-32")
    await stop(client)
    caps = client_capabilities("neovim@v0.11.0")
    assert caps.general.position_encodings[0] == "utf-8"
    train, _, client = await _findings_and_fixes(tmp_path / "nvim", ws, "neovim@v0.11.0", "utf-8")
    await stop(client)


# ---- fix-all, where the fix goes, pinned memory once ---------------------------------------------
async def test_fix_all_and_the_optimizers_constructor_in_related_information(tmp_path):
    train = os.path.join(SRC, TRAIN)
    client = await start(tmp_path, PUSH, SRC)
    try:
        diags, text = await opened(client, PUSH, "tinygpt_naive", train)
        lines = lines_of(text)
        opt = next(d for d in diags if d.code == "optimizer-foreach-off")
        assert "opt.step()" in lines[opt.range.start.line]
        built = [r for r in opt.related_information or () if "the optimizer is built here" in r.message]
        assert len(built) == 1 and built[0].location.uri == uri(train)
        assert (
            "torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)"
            in lines[built[0].location.range.start.line]
        )
        # the client asks for source.fixAll (VS Code on save, `editor.codeActionsOnSave`)
        acts = await actions(client, train, 0, only=[L.CodeActionKind.SourceFixAll])
        assert [a.kind for a in acts] == ["source.fixAll.profd"]
        fixed = apply_client_edits(text, acts[0].edit.changes[uri(train)], "utf-16")
        compile(fixed, train, "exec")
        assert "zero_grad(set_to_none=True)" in fixed and "foreach=True" in fixed
        assert not any("Ignore" in a.title for a in acts)  # fix-all fixes, never suppresses
        # a quick-fix-only request gets no fix-all
        acts = await actions(client, train, opt.range.start.line, only=[L.CodeActionKind.QuickFix])
        assert acts and all(a.kind == L.CodeActionKind.QuickFix for a in acts)
    finally:
        await stop(client)


async def test_pinned_memory_goes_on_the_dataloader_not_into_the_step_loop(tmp_path):
    rec_src = os.path.join(os.path.dirname(trace("dataloader_w0")), "src")
    src = os.path.join(rec_src, "dataloader.py")
    client = await start(tmp_path, PUSH, rec_src)
    try:
        diags, text = await opened(client, PUSH, "dataloader_w0", src)
        copy = next(d for d in diags if d.code == "pageable-memcpy")
        acts = await actions(client, src, copy.range.start.line)
        fix = next(a for a in acts if "pin_memory=True" in a.title)
        fixed = apply_client_edits(text, fix.edit.changes[uri(src)], "utf-16")
        compile(fixed, src, "exec")
        loader = next(ln for ln in lines_of(fixed) if "DataLoader(Noisy()" in ln)
        assert "pin_memory=True" in loader
        assert "non_blocking=True" in lines_of(fixed)[copy.range.start.line]
        assert ".pin_memory()" not in fixed
    finally:
        await stop(client)


def test_pinning_once_outside_the_loop_or_not_at_all():
    """(the fix on its own, on text: no trace shows a tensor made once before the loop)"""
    from profd.server.daemon import quickfix

    text = (
        "import torch\n\ndef main(dev, batches):\n    x = torch.randn(64, 64)\n"
        "    w = torch.randn(64, 64) + 1\n    for step in range(10):\n        a = x.to(dev)\n"
        "        b = w.to(dev)\n        for xb in batches:\n            c = xb.to(dev)\n"
    )
    (fx,) = quickfix.fixes(text, "pageable-memcpy", 7)
    new = quickfix.apply(text, fx.edits)
    assert "x = torch.randn(64, 64).pin_memory()" in new and "a = x.to(dev, non_blocking=True)" in new
    (fx,) = quickfix.fixes(text, "pageable-memcpy", 8)
    assert "w = (torch.randn(64, 64) + 1).pin_memory()" in quickfix.apply(text, fx.edits)
    assert quickfix.fixes(text, "pageable-memcpy", 10) == []  # made per iteration: nowhere to pin once


# ---- no freeze ------------------------------------------------------------------------------------
def _padded_model(n):
    """tinygpt.py (fp32-matmul on its line 34) with ``n`` assignments appended, as a long module."""
    return open(os.path.join(SRC, "tinygpt.py")).read() + "".join(
        f"w{i} = torch.mm(a{i}, b{i})  # table {i}\n" for i in range(n)
    )


def test_the_fp32_fix_is_linear_in_the_file():
    """Against the file's own compile time (a ratio, so load does not matter): the fix walked every
    assignment with ``ast.get_source_segment``, which splits the whole text each time (50 KB:
    26 s, ~390 compiles; now ~6)."""
    import time
    from profd.server.daemon import quickfix

    text = _padded_model(1400)
    assert len(text) > 38_000
    t = time.perf_counter()
    compile(text, "tinygpt.py", "exec")
    one = time.perf_counter() - t
    t = time.perf_counter()
    fixes = quickfix.fixes(text, "fp32-matmul", 34)
    assert len(fixes) == 2
    assert time.perf_counter() - t < 60 * one


async def test_code_actions_run_off_the_loop(tmp_path):
    """A hover asked while the code actions of a 380 KB module are computed is answered first."""
    import asyncio

    ws = tmp_path / "src"
    shutil.copytree(SRC, ws)
    model = str(ws / "tinygpt.py")
    with open(model, "w") as f:
        f.write(_padded_model(8_000))
    train = str(ws / TRAIN)
    client = await start(tmp_path, PUSH, str(ws))
    try:
        drop(client.watch, "tinygpt_naive")
        diags = await diagnostics(client, PUSH, model)
        fp32 = next(d for d in diags if d.code == "fp32-matmul")
        await diagnostics(client, PUSH, train)
        done = []
        slow = asyncio.ensure_future(actions(client, model, fp32.range.start.line))
        slow.add_done_callback(lambda f: done.append("actions"))
        await asyncio.sleep(0.05)
        h = await client.text_document_hover_async(
            L.HoverParams(text_document=doc_id(train), position=L.Position(66, 8))
        )
        done.append("hover")
        assert h is not None
        acts = await slow
        assert done == ["hover", "actions"]
        assert any("allow_tf32" in a.title for a in acts)
    finally:
        await stop(client)
