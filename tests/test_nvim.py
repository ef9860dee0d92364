"""A real editor: Neovim (Debian's 0.7.2) headless, attached to ``profd serve --stdio``."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import SRC
from daemon_util import drop, serve_cmd

NVIM = shutil.which("nvim")
pytestmark = pytest.mark.skipif(NVIM is None, reason="nvim is not installed "
                                "(apt-get install -y neovim; .ci/run installs it)")

LUA = r"""
local out_path, src = _G.profd_out, _G.profd_src
local cmd = vim.fn.json_decode(_G.profd_cmd)
local function finish(doc)
  local f = io.open(out_path, "w"); f:write(vim.fn.json_encode(doc)); f:close()
  vim.cmd("qall!")
end
vim.cmd("edit " .. src)
local buf = vim.api.nvim_get_current_buf()
local id = vim.lsp.start_client({ name = "profd", cmd = cmd, root_dir = vim.fn.getcwd() })
vim.lsp.buf_attach_client(buf, id)
local ok = vim.wait(20000, function() return #vim.diagnostic.get(buf) > 0 end, 50)
local diags = {}
for _, d in ipairs(vim.diagnostic.get(buf)) do
  table.insert(diags, { lnum = d.lnum, code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code), message = d.message, severity = d.severity })
end
local res = vim.lsp.buf_request_sync(buf, "textDocument/hover", {
  textDocument = { uri = vim.uri_from_bufnr(buf) }, position = { line = 20, character = 4 } }, 10000)
local hover = nil
for _, r in pairs(res or {}) do
  if r.result and r.result.contents then hover = r.result.contents.value end
end
vim.lsp.stop_client(id)
vim.wait(3000, function() return vim.lsp.client_is_stopped(id) end, 50)
finish({ ok = ok, diags = diags, hover = hover })
"""


def test_neovim_shows_diagnostics_and_hover(tmp_path):
    watch, state = tmp_path / "watch", tmp_path / "state"
    watch.mkdir()
    drop(watch, "seed_n64_bf16")  # there before the editor starts: the startup scan finds it
    out, script = tmp_path / "out.json", tmp_path / "t.lua"
    script.write_text(LUA)
    cmd = serve_cmd(watch, state)
    src = os.path.join(SRC, "seed_matmul.py")
    setup = (f"lua _G.profd_out={json.dumps(str(out))}; _G.profd_src={json.dumps(src)}; "
             f"_G.profd_cmd={json.dumps(json.dumps(cmd))}")
    p = subprocess.run([NVIM, "--headless", "--clean", "-c", setup, "-c", f"luafile {script}"],
                       capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert out.exists(), p.stderr
    doc = json.loads(out.read_text())
    assert doc["ok"], doc
    d = next(d for d in doc["diags"] if d["code"] == "overhead-bound")
    assert d["lnum"] == 20 and "GPU busy" in d["message"]
    assert doc["hover"] and "Launches: 2" in doc["hover"] and "GPU:" in doc["hover"]
