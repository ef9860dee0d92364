"""A real editor: Neovim (Debian's 0.7.2) headless, configured with the block from docs/editors.md
as written (only its ``cmd`` pointed at this checkout), attached to ``profd serve --stdio``."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, SRC
from daemon_util import drop, serve_cmd

NVIM = shutil.which("nvim")
pytestmark = pytest.mark.skipif(NVIM is None, reason="nvim is not installed "
                                "(apt-get install -y neovim; .ci/run installs it)")


def doc_block(marker: str, lang: str) -> str:
    """The first ``lang`` code block after ``marker`` in docs/editors.md."""
    text = open(os.path.join(ROOT, "docs", "editors.md")).read()
    at = text.index(marker)
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(text, at)
    return m.group(1)


LUA = r"""
local out_path = vim.env.PROFD_TEST_OUT
local a, b = vim.env.PROFD_TEST_A, vim.env.PROFD_TEST_B
local function finish(doc)
  local f = io.open(out_path, "w"); f:write(vim.fn.json_encode(doc)); f:close()
  vim.cmd("qall!")
end
vim.o.hidden = true
vim.cmd("edit " .. a)
local buf_a = vim.api.nvim_get_current_buf()
vim.cmd("edit " .. b)
local buf_b = vim.api.nvim_get_current_buf()
local ok = vim.wait(30000, function()
  return #vim.diagnostic.get(buf_a) > 0 and #vim.diagnostic.get(buf_b) > 0 end, 50)
local function diags(buf)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    local lsp = d.user_data and d.user_data.lsp or {}
    table.insert(out, { lnum = d.lnum, code = d.code or lsp.code, message = d.message })
  end
  return out
end
local function request(buf, method, params)
  local res = vim.lsp.buf_request_sync(buf, method, params, 15000)
  for _, r in pairs(res or {}) do if r.result then return r.result end end
  return nil
end
local hover = request(buf_b, "textDocument/hover", {
  textDocument = { uri = vim.uri_from_bufnr(buf_b) }, position = { line = 33, character = 8 } })
local lenses = request(buf_b, "textDocument/codeLens", { textDocument = { uri = vim.uri_from_bufnr(buf_b) } })
local lens_titles, shown = {}, nil
for _, l in ipairs(lenses or {}) do table.insert(lens_titles, l.command.title) end
for _, l in ipairs(lenses or {}) do
  if l.command.title:find("Attention.forward", 1, true) then
    shown = request(buf_b, "workspace/executeCommand", { command = l.command.command, arguments = l.command.arguments })
  end
end
-- a quick fix applied to the buffer as the editor does it
local actions = request(buf_a, "textDocument/codeAction", {
  textDocument = { uri = vim.uri_from_bufnr(buf_a) },
  range = { start = { line = 67, character = 0 }, ["end"] = { line = 67, character = 0 } },
  context = { diagnostics = vim.lsp.diagnostic.get_line_diagnostics(buf_a, 67) } })
local titles, applied = {}, nil
for _, act in ipairs(actions or {}) do
  table.insert(titles, act.title)
  if act.title:find("set_to_none=True", 1, true) and act.edit then
    vim.lsp.util.apply_workspace_edit(act.edit, "utf-16")
    applied = act.title
  end
end
local clients = #vim.lsp.get_active_clients()
local text = table.concat(vim.api.nvim_buf_get_lines(buf_a, 0, -1, false), "\n") .. "\n"
finish({ ok = ok, clients = clients, a = diags(buf_a), b = diags(buf_b),
         hover = hover and hover.contents.value, lenses = lens_titles, shown = shown,
         actions = titles, applied = applied, text = text })
"""


def test_neovim_with_the_documented_config(tmp_path):
    watch, state = tmp_path / "watch", tmp_path / "state"
    watch.mkdir()
    drop(watch, "tinygpt_naive")  # there before the editor starts: the startup scan finds it
    init = doc_block("tested: tests/test_nvim.py", "lua")
    init, n = re.subn(r"cmd = \{[^}]*\},", "cmd = vim.fn.json_decode(vim.env.PROFD_TEST_CMD),", init)
    assert n == 1, "the documented config has one cmd"
    (tmp_path / "init.lua").write_text(init)
    (tmp_path / "t.lua").write_text(LUA)
    out = tmp_path / "out.json"
    a, b = os.path.join(SRC, "train_tinygpt.py"), os.path.join(SRC, "tinygpt.py")
    env = dict(os.environ, PROFD_TEST_CMD=json.dumps(serve_cmd(watch, state, workspace=None)),
               PROFD_TEST_OUT=str(out), PROFD_TEST_A=a, PROFD_TEST_B=b)
    p = subprocess.run([NVIM, "--headless", "-u", str(tmp_path / "init.lua"), "-i", "NONE",
                        "-c", f"luafile {tmp_path / 't.lua'}"],
                       capture_output=True, text=True, timeout=120, cwd=SRC, env=env)  # root_dir: SRC
    assert out.exists(), p.stderr
    doc = json.loads(out.read_text())
    assert doc["ok"], doc
    # one client for both buffers, each finding once
    assert doc["clients"] == 1
    for side in ("a", "b"):
        keys = [(d["lnum"], d["code"], d["message"]) for d in doc[side]]
        assert len(keys) == len(set(keys)), f"duplicated diagnostics in buffer {side}"
    # the workspace is Neovim's root_dir: findings on the sources' lines (no --workspace given)
    assert any(d["code"] == "host-sync" and d["lnum"] == 69 for d in doc["a"])
    assert any(d["code"] == "fp32-matmul" and d["lnum"] == 33 for d in doc["b"])
    assert doc["hover"] and "GPU" in doc["hover"] and "per step" in doc["hover"]
    assert any("Attention.forward" in t for t in doc["lenses"]) and any("MLP.forward" in t for t in doc["lenses"])
    assert "Attention.forward" in doc["shown"] and "line 20" in doc["shown"]
    # the quick fix edited the buffer to code that compiles
    assert doc["applied"] and any(t.startswith("Ignore") for t in doc["actions"])
    line = doc["text"].splitlines()[67]
    assert "zero_grad(set_to_none=True)" in line
    compile(doc["text"], "train_tinygpt.py", "exec")
