"""The samples in README.md and docs/ are program output (issue 29): each block marked
``<!-- sample: tests/test_samples.py -->`` is run here and what it shows is checked against what
the commands print now, so a sample cannot go stale.

A text sample is ``$ COMMAND`` lines, each followed by the lines it prints: ``(...)`` stands for
the rest of a line (or any text inside one), a line ``...`` for lines left out; lines between two
``...`` are consecutive in the output. ``$ make demo`` runs the Makefile's demo recipe with this
interpreter's scripts. The MCP sample (docs/mcp.md) is JSON: a string with ``...`` matches any text
there, an object shows some of its keys, a list its first items; the session that makes it is the
doc's own Python block, run as written. The MCP tool table lists exactly the tools the server
offers."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT

BIN = os.path.dirname(sys.executable)
MARK = "<!-- sample: tests/test_samples.py -->"


def blocks(doc: str) -> list[tuple[str, str]]:
    """(language, body) of each marked fenced block of ``doc`` (relative to the repo)."""
    text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
    got = re.findall(re.escape(MARK) + r"\n```([a-z]*)\n(.*?)\n```", text, re.S)
    assert got, f"{doc}: no {MARK} block"
    return got


def commands(body: str) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in body.split("\n"):
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"sample starts without a $ command: {line!r}"
            out[-1][1].append(line)
    return out


def _pattern(line: str) -> re.Pattern:
    return re.compile(".*".join(re.escape(p) for p in line.rstrip().split("(...)")) + r"\s*")


def check_lines(expected: list[str], actual: str, what: str) -> None:
    """Every shown line is in ``actual`` in order; runs between ``...`` lines are consecutive."""
    got = [l.rstrip() for l in actual.split("\n")]
    runs, cur = [], []
    for e in expected:
        if e.strip() == "...":
            runs.append(cur)
            cur = []
        else:
            cur.append(_pattern(e))
    runs.append(cur)
    at = 0
    for run in runs:
        if not run:
            continue
        for start in range(at, len(got) - len(run) + 1):
            if all(p.fullmatch(got[start + k]) for k, p in enumerate(run)):
                at = start + len(run)
                break
        else:
            raise AssertionError(
                f"{what}: not in the output (from line {at + 1} on):\n"
                + "\n".join(p.pattern for p in run)
                + "\n--- output:\n"
                + actual
            )


def make_demo_command() -> list[str]:
    """The profd-client command of the Makefile's demo recipe, with this interpreter's scripts."""
    mk = open(os.path.join(ROOT, "Makefile")).read()
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", mk, re.M).group(1)
    lines = recipe.replace("\\\n", " ").split("\n")
    cmd = next(l.strip().lstrip("-@") for l in lines if "$(BIN)/profd-client" in l)
    return shlex.split(cmd.replace("$(BIN)/", BIN + "/"))


def run_sample(body: str, cwd: str, env: dict) -> None:
    for cmd, expected in commands(body):
        if cmd == "make demo":
            p = subprocess.run(
                make_demo_command(), cwd=cwd, env=env, capture_output=True, text=True, timeout=600
            )
        else:
            p = subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, (cmd, p.returncode, p.stderr)
        check_lines(
            expected,
            p.stdout + p.stderr
            if cmd.startswith("profd start") or cmd.startswith("profd stop")
            else p.stdout,
            f"`{cmd}`",
        )
        if cmd.startswith("profd start"):
            _wait_for_a_report(cwd, env)


def _wait_for_a_report(cwd, env, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = subprocess.run(
            ["profd-client", "reports"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
        )
        if p.returncode == 0 and ".json" in p.stdout:  # not "no reports"
            return
        time.sleep(0.5)
    raise AssertionError("no report within 2 minutes of `profd start`")


def _env(tmp_path) -> dict:
    env = dict(
        os.environ,
        PATH=f"{BIN}:{os.environ.get('PATH', '')}",
        PROFD_STATE=str(tmp_path / "state"),
        NO_COLOR="1",
    )
    env.pop("PROFD_NO_DAEMON", None)
    return env


def test_readme_make_demo_sample():
    body = next(b for _, b in blocks("README.md") if b.startswith("$ make demo"))
    run_sample(
        body,
        ROOT,
        dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", NO_COLOR="1", PROFD_NO_DAEMON="1"),
    )


def test_readme_modules_sample():
    body = next(b for _, b in blocks("README.md") if b.startswith("$ profd-client modules"))
    run_sample(
        body,
        ROOT,
        dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", NO_COLOR="1", PROFD_NO_DAEMON="1"),
    )


def test_readme_daemon_sample_runs_on_the_shipped_repo(tmp_path):
    body = next(b for _, b in blocks("README.md") if "$ profd start" in b)
    work = tmp_path / "repo"
    work.mkdir()
    os.symlink(os.path.join(ROOT, "examples"), work / "examples")
    env = _env(tmp_path)
    try:
        run_sample(body, str(work), env)
    finally:
        subprocess.run([os.path.join(BIN, "profd"), "stop"], env=env, capture_output=True, timeout=60)


def match_json(sample, actual, where="$") -> None:
    if isinstance(sample, dict):
        assert isinstance(actual, dict), where
        for k, v in sample.items():
            assert k in actual, f"{where}.{k}: not in the answer"
            match_json(v, actual[k], f"{where}.{k}")
    elif isinstance(sample, list):
        assert isinstance(actual, list) and len(actual) >= len(sample), where
        for i, v in enumerate(sample):
            match_json(v, actual[i], f"{where}[{i}]")
    elif isinstance(sample, str) and "..." in sample:
        pat = ".*".join(re.escape(p) for p in sample.split("..."))
        assert isinstance(actual, str) and re.fullmatch(pat, actual, re.S), (
            f"{where}: {actual!r} !~ {sample!r}"
        )
    else:
        assert sample == actual, f"{where}: the doc says {sample!r}, the server {actual!r}"


def _mcp_session_from_the_doc() -> str:
    text = open(os.path.join(ROOT, "docs", "mcp.md"), encoding="utf-8").read()
    code = next(b for b in re.findall(r"```python\n(.*?)\n```", text, re.S) if "call_tool" in b)
    code = code.replace('command="profd"', f"command={os.path.join(BIN, 'profd')!r}")
    return "async def _session():\n" + textwrap.indent(code, "    ") + "\n    return res.structured_content\n"


def test_mcp_doc_sample_and_tool_table():
    pytest.importorskip("mcp")
    import json

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    ns: dict = {}
    exec(_mcp_session_from_the_doc(), ns)
    cwd = os.getcwd()
    os.chdir(ROOT)  # the doc's paths are relative to the repo
    try:
        got = asyncio.run(ns["_session"]())
    finally:
        os.chdir(cwd)
    ((_, sample),) = blocks("docs/mcp.md")
    match_json(json.loads(sample), got)

    async def tools(*extra):
        params = StdioServerParameters(
            command=os.path.join(BIN, "profd"), args=["mcp", "--root", ROOT, *extra]
        )
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                return {t.name for t in (await s.list_tools()).tools}

    text = open(os.path.join(ROOT, "docs", "mcp.md"), encoding="utf-8").read()
    table = set(re.findall(r"^\| `([a-z_]+)` \|", text, re.M))
    assert table == asyncio.run(tools("--allow-workloads", "--allow-record")), (
        "docs/mcp.md's tool table vs the server's tools"
    )
    assert "module_tree" in table
