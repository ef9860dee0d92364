"""The editor configs in docs/editors.md that no packaged editor here can run: Helix is not in
Debian, so its languages.toml block is read as Helix reads it (TOML), and the server it names is
started with its arguments and its ``config`` as ``initializationOptions`` (what Helix sends), over
stdio with pytest-lsp's client."""

import os
import sys

from lsprotocol import types as L
from pytest_lsp import client_capabilities, make_test_lsp_client

from profd.server.config import toml

from conftest import SRC
from daemon_util import FAST, await_for, drop, uri
from test_nvim import doc_block

BIN = os.path.dirname(sys.executable)
tomllib = toml()  # tomllib, or tomli on Python 3.10


async def test_the_helix_config_starts_a_working_server(tmp_path):
    doc = tomllib.loads(doc_block("tested: tests/test_editor_configs.py", "toml"))
    server = doc["language-server"]["profd"]
    (lang,) = doc["language"]
    assert lang["name"] == "python" and "profd" in lang["language-servers"]
    watch = tmp_path / "watch"
    watch.mkdir()
    args = [str(watch) if a == "/home/me/profiles" else a for a in server["args"]]
    assert str(watch) in args, "the documented config names its watch folder"
    client = make_test_lsp_client()
    await client.start_io(
        os.path.join(BIN, server["command"]), *args, "--state", str(tmp_path / "state"), *FAST
    )
    try:
        # Helix: its workspace is the folder it runs in; config goes as initializationOptions
        await client.initialize_session(
            L.InitializeParams(
                capabilities=client_capabilities("neovim@v0.9.1"),
                root_uri=uri(SRC),
                workspace_folders=[L.WorkspaceFolder(uri=uri(SRC), name="src")],
                initialization_options=server["config"],
            )
        )
        drop(watch, "seed_n64_bf16")
        diags = await await_for(
            lambda: client.diagnostics.get(uri(os.path.join(SRC, "seed_matmul.py"))), 30, "diagnostics"
        )
        assert any(d.code == "overhead-bound" for d in diags)
        assert not [m for m in client.messages if m.type == L.MessageType.Warning]  # config accepted
    finally:
        await client.shutdown_session()
        await client.stop()
