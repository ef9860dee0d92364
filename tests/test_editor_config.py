"""The editor configures profd as the CLI does (issue 26): ``[tool.profd]`` in the workspace's
``pyproject.toml`` (found from each workspace folder upwards, read by the CLI's own parser,
``server/config.py``), per-rule thresholds from the editor's settings over the file's, and
the CLI's "did you mean" for a misspelt code or key. ``profd serve --stdio`` driven by pytest-lsp
with Neovim 0.9's capabilities (pushed diagnostics, ``workspace/configuration``), on the shipped
tinygpt_naive trace (H200), whose findings the CLI gives as: host-sync on line 70, launch-storm on
lines 25, 67 and 68 (10 launches per step and more), zero-grad-not-none on line 68.
"""

import os
import shutil
import subprocess
import sys

from lsprotocol import types as L

import test_editor as editor
from conftest import SRC, trace
from daemon_util import await_for, drop, uri
from test_editor import stop

PUSH = "neovim@v0.9.1"
TRAIN = "train_tinygpt.py"
PYPROJECT = """[project]
name = "tinygpt-experiments"

[tool.profd]
ignore = ["host-sync"]

[tool.profd.rules.launch-storm]
launches-per-step = 100000
"""


async def start(tmp_path, root, settings=None):
    return await editor.start(tmp_path, PUSH, workspace=None, root=root, settings=settings)


def codes(client, path):
    return {d.code for d in client.diagnostics.get(uri(path), [])}


def workspace(tmp_path, pyproject=PYPROJECT):
    ws = tmp_path / "ws"
    shutil.copytree(SRC, ws)
    (ws / "pyproject.toml").write_text(pyproject)
    return str(ws)


def cli_codes(ws):
    """What the CLI says from the same folder (the same file read the same way)."""
    out = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "profd-client"),
            "analyze",
            "--no-daemon",
            "--workspace",
            ws,
            "--format",
            "json",
            "--fail-on",
            "never",
            trace("tinygpt_naive"),
        ],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=120,
    )
    import json

    doc = json.loads(out.stdout)
    reports = doc if isinstance(doc, list) else doc.get("reports", [doc])
    return {
        d["code"]
        for r in reports
        for d in r["diagnostics"]
        if d["location"].get("path") == os.path.join(ws, TRAIN)
    }


async def test_tool_profd_in_the_workspace_and_thresholds_from_the_settings(tmp_path):
    ws = workspace(tmp_path)
    train = os.path.join(ws, TRAIN)
    client = await start(tmp_path, ws)
    try:
        drop(client.watch, "tinygpt_naive")
        await await_for(lambda: "zero-grad-not-none" in codes(client, train), 60, "diagnostics")
        got = codes(client, train)
        assert "host-sync" not in got and "launch-storm" not in got  # the file's ignore and threshold
        assert got == cli_codes(ws)  # as the CLI reads the same pyproject.toml
        # a threshold set in the editor wins over the file's
        client.workspace_did_change_configuration(
            L.DidChangeConfigurationParams(
                settings={"profd": {"rules": {"launch-storm": {"launches-per-step": 10}}}}
            )
        )
        await await_for(lambda: "launch-storm" in codes(client, train), 60, "launch-storm back")
        assert "host-sync" not in codes(client, train)  # the file's ignore still holds
        # the editor's own selection replaces the file's
        client.workspace_did_change_configuration(
            L.DidChangeConfigurationParams(settings={"profd": {"ignore": ["launch-storm"]}})
        )
        await await_for(
            lambda: "host-sync" in codes(client, train) and "launch-storm" not in codes(client, train),
            60,
            "the settings' selection",
        )
        # a saved pyproject.toml is read again
        with open(os.path.join(ws, "pyproject.toml"), "w") as f:
            f.write(PYPROJECT.replace('ignore = ["host-sync"]', 'ignore = ["zero-grad-not-none"]'))
        client.workspace_did_change_configuration(L.DidChangeConfigurationParams(settings={"profd": {}}))
        client.text_document_did_save(
            L.DidSaveTextDocumentParams(
                text_document=L.TextDocumentIdentifier(uri=uri(os.path.join(ws, "pyproject.toml")))
            )
        )
        await await_for(
            lambda: "host-sync" in codes(client, train) and "zero-grad-not-none" not in codes(client, train),
            60,
            "the edited file",
        )
    finally:
        await stop(client)


async def test_misspelt_codes_and_keys_get_did_you_mean(tmp_path):
    ws = workspace(tmp_path, PYPROJECT.replace('"host-sync"', '"host-snyc"'))
    client = await start(
        tmp_path,
        ws,
        settings={
            "ignore": ["hots-sync"],
            "ingore": ["x"],
            "rules": {"launch-storm": {"launches-per-stpe": 3}},
        },
    )
    try:

        def said(*words):
            return [m.message for m in client.messages if all(w in m.message for w in words)]

        await await_for(lambda: said("did you mean 'host-sync'", "hots-sync"), 30, "the setting's code")
        await await_for(
            lambda: said("did you mean 'host-sync'", "host-snyc", os.path.join(ws, "pyproject.toml")),
            30,
            "the file's code, naming the file",
        )
        await await_for(lambda: said("ingore", "did you mean 'ignore'"), 30, "the setting's key")
        await await_for(lambda: said("launches-per-stpe", "launches-per-step"), 30, "the threshold's name")
        assert all(m.type == L.MessageType.Warning for m in client.messages if "did you mean" in m.message)
        # nothing half applied: the bad file and the bad settings configure nothing, the rest runs
        drop(client.watch, "tinygpt_naive")
        train = os.path.join(ws, TRAIN)
        await await_for(lambda: {"host-sync", "launch-storm"} <= codes(client, train), 60, "all rules")
    finally:
        await stop(client)
