"""Inline suppression (``# profd: ignore[code]``, ``# noqa: code``) on a real trace's source lines:
the engine drops the finding and counts it, the CLI (in-process and through the daemon) shows the
same, and ``--statistics`` reports it."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import SRC, trace
from profd.server.engine import Options, analyze_file
from profd.server.engine.suppress import ALL, codes_on

CLIENT = shutil.which("profd-client", path=os.path.dirname(sys.executable))
PROFD = shutil.which("profd", path=os.path.dirname(sys.executable))
NAIVE = trace("tinygpt_naive")


def test_comment_forms():
    assert codes_on("x = y.item()  # profd: ignore[host-sync]") == {"host-sync"}
    assert codes_on("x  # profd: ignore[host-sync, launch-storm]") == {"host-sync", "launch-storm"}
    assert codes_on("x  # profd: ignore") == {ALL}
    assert codes_on("x  # noqa: E501, host-sync") == {"e501", "host-sync"}
    assert codes_on("x  # noqa") == set()  # other linters' bare noqa
    assert codes_on("s = '# profd ignore'") == set()


def _edit(src_dir, file, needle, comment):
    p = os.path.join(src_dir, file)
    lines = open(p).read().split("\n")
    k = next(i for i, l in enumerate(lines) if needle in l)
    lines[k] += "  " + comment
    with open(p, "w") as f:
        f.write("\n".join(lines))
    return k + 1


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "src"
    shutil.copytree(SRC, d)
    return str(d)


def test_the_engine_drops_and_counts_suppressed_findings(src):
    before = analyze_file(NAIVE, Options(workspace=[src]))
    syncs = [d for d in before.diagnostics if d.code == "host-sync"]
    copies = [d for d in before.diagnostics if d.code == "pageable-memcpy"]
    assert len(syncs) == 1 and len(copies) == 1 and before.suppressed == {}  # x's and y's copies: one finding
    _edit(src, "train_tinygpt.py", 'print("step", step, "loss", loss.item()', "# profd: ignore[host-sync]")
    _edit(src, "train_tinygpt.py", "x = xb.to(dev", "# noqa: pageable-memcpy")
    _edit(src, "train_tinygpt.py", "opt.step()", "# noqa")  # bare noqa: not ours
    after = analyze_file(NAIVE, Options(workspace=[src]))
    left = {d.code for d in after.diagnostics}
    assert "host-sync" not in left
    assert "pageable-memcpy" not in left
    assert after.suppressed == {"host-sync": 1, "pageable-memcpy": 1}
    assert "optimizer-foreach-off" in left and "launch-storm" in left
    assert len(after.diagnostics) == len(before.diagnostics) - 2


def test_a_bare_profd_ignore_drops_every_rule_on_its_line(src):
    line = _edit(src, "train_tinygpt.py", "opt.step()", "# profd: ignore")
    rep = analyze_file(NAIVE, Options(workspace=[src]))
    assert not [d for d in rep.diagnostics if d.location.line == line and d.location.path.startswith(src)]
    assert rep.suppressed.get("optimizer-foreach-off") == 1 and rep.suppressed.get("launch-storm") == 1


def test_cli_and_daemon_honour_it_and_statistics_count_it(src, tmp_path):
    _edit(src, "train_tinygpt.py", 'print("step", step, "loss", loss.item()', "# profd: ignore[host-sync]")
    args = ["analyze", "--isolated", "--workspace", src, "--fail-on", "never"]
    local = subprocess.run(
        [CLIENT, *args, "--no-daemon", "--format", "json", NAIVE], capture_output=True, text=True, timeout=120
    )
    rep = json.loads(local.stdout)["reports"][0]
    assert rep["suppressed"] == {"host-sync": 1}
    assert "host-sync" not in {d["code"] for d in rep["diagnostics"]}
    st = subprocess.run(
        [CLIENT, *args, "--no-daemon", "--statistics", NAIVE], capture_output=True, text=True, timeout=120
    )
    row = next(l for l in st.stdout.splitlines() if " host-sync " in l)
    assert row.split()[0] == "0" and "(1 suppressed inline)" in row
    text = subprocess.run([CLIENT, *args, "--no-daemon", NAIVE], capture_output=True, text=True, timeout=120)
    assert "(1 suppressed inline)" in text.stdout
    # through a daemon the CLI starts for itself (said on stderr), the same report
    env = dict(os.environ, PROFD_STATE=str(tmp_path / "state"))
    env.pop("PROFD_NO_DAEMON", None)
    try:
        served = subprocess.run(
            [CLIENT, *args, "--daemon", "--format", "json", NAIVE],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert "started a daemon for later runs" in served.stderr and "profd stop" in served.stderr
        srep = json.loads(served.stdout)["reports"][0]
        assert srep["suppressed"] == {"host-sync": 1}
        assert [d["code"] for d in srep["diagnostics"]] == [d["code"] for d in rep["diagnostics"]]
        again = subprocess.run(
            [CLIENT, *args, "--format", "json", NAIVE], capture_output=True, text=True, env=env, timeout=120
        )
        assert again.stderr == ""  # a running daemon is used without a word
        # a comment added later: the daemon's report of the same trace is redone, not served stale
        _edit(src, "train_tinygpt.py", "opt.zero_grad(", "# profd: ignore[zero-grad-not-none]")
        later = subprocess.run(
            [CLIENT, *args, "--format", "json", NAIVE], capture_output=True, text=True, env=env, timeout=120
        )
        lrep = json.loads(later.stdout)["reports"][0]
        assert lrep["suppressed"] == {"host-sync": 1, "zero-grad-not-none": 1}
    finally:
        subprocess.run([PROFD, "stop", "--state", str(tmp_path / "state")], capture_output=True, timeout=30)


def test_a_comment_added_later_clears_the_editor_diagnostic_at_the_next_pull(src, tmp_path):
    """The daemon's LSP diagnostics for a source honour a suppression written after the report was
    made: the next pull (an editor re-pulls on save) leaves the finding out."""
    import asyncio

    from profd.server.daemon.rpc import DaemonClient

    watch, state = tmp_path / "watch", tmp_path / "state"
    watch.mkdir()
    env = dict(os.environ)
    env.pop("PROFD_NO_DAEMON", None)
    p = subprocess.run(
        [PROFD, "start", "--watch", str(watch), "--workspace", src, "--state", str(state)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads((state / "daemon.json").read_text())
    source = os.path.join(src, "train_tinygpt.py")

    async def pull():
        c = DaemonClient()
        await c.connect(doc["host"], doc["port"], doc["token"])
        try:
            res = await c.request(
                "textDocument/diagnostic", {"textDocument": {"uri": "file://" + source}}, timeout=30
            )
            return {d["code"] for d in res["items"]}
        finally:
            await c.close()

    try:
        shutil.copy(NAIVE, watch / "naive.json.gz")
        codes = set()
        for _ in range(300):
            codes = asyncio.run(pull())
            if "host-sync" in codes:
                break
            time.sleep(0.1)
        assert "host-sync" in codes and "zero-grad-not-none" in codes
        _edit(
            src, "train_tinygpt.py", 'print("step", step, "loss", loss.item()', "# profd: ignore[host-sync]"
        )
        after = asyncio.run(pull())
        assert "host-sync" not in after and "zero-grad-not-none" in after
    finally:
        subprocess.run([PROFD, "stop", "--state", str(state)], capture_output=True, timeout=30)


def test_a_file_level_comment_suppresses_its_codes_in_the_whole_file(src):
    """``# profd: ignore-file[...]`` on a line of its own (as ruff's ``# ruff: noqa``); a trailing one
    after code is not file-level, and ``ignore-file`` is never read as a line's bare ``ignore``."""
    base = analyze_file(NAIVE, Options(workspace=[src]))
    train = os.path.join(src, "train_tinygpt.py")
    in_train = [d.code for d in base.diagnostics if d.location.path == train]
    assert in_train.count("launch-storm") >= 2 and "host-sync" in in_train
    p = os.path.join(src, "train_tinygpt.py")
    text = open(p).read()
    with open(p, "w") as f:
        f.write(text + "\n# profd: ignore-file[launch-storm]\n")  # at the end: the lines keep their numbers
    rep = analyze_file(NAIVE, Options(workspace=[src]))
    after = [d.code for d in rep.diagnostics if d.location.path == train]
    assert "launch-storm" not in after and "host-sync" in after
    assert rep.suppressed.get("launch-storm") == in_train.count("launch-storm")
    # the other file's launch storms (none here) and findings are untouched
    other = lambda r: [d.code for d in r.diagnostics if d.location.path != train]
    assert other(rep) == other(base)
    with open(p, "w") as f:
        f.write(text + "\nimport os  # profd: ignore-file\n")  # not a line of its own: not file-level
    assert [
        d.code for d in analyze_file(NAIVE, Options(workspace=[src])).diagnostics if d.location.path == train
    ] == [c for c in in_train]


def test_unused_suppressions_are_reported_as_ruffs_rule_100(src):
    """``unused-suppression`` (ruff's RUF100): on tinygpt_naive's own source, a comment whose code
    a finding used is silent, each code that suppressed nothing is reported on its comment."""
    used = _edit(
        src, "train_tinygpt.py", 'print("step", step, "loss", loss.item()', "# profd: ignore[host-sync]"
    )
    half = _edit(src, "train_tinygpt.py", "opt.zero_grad(", "# profd: ignore[launch-storm, host-sync]")
    other = _edit(src, "train_tinygpt.py", "x = xb.to(dev", "# noqa: E501, fp32-matmul")
    typo = _edit(src, "train_tinygpt.py", "opt.step()", "# profd: ignore[lunch-storm]")
    never = _edit(
        src, "train_tinygpt.py", "def main(", "# profd: ignore[host-sync]"
    )  # a def line: no op ran there
    rep = analyze_file(NAIVE, Options(workspace=[src]))
    found = {d.location.line: d for d in rep.diagnostics if d.code == "unused-suppression"}
    assert set(found) == {half, other, typo}, found
    assert used not in found and never not in found
    assert found[half].evidence["codes"] == ["host-sync"]  # launch-storm suppressed zero_grad's storm
    assert found[other].evidence["codes"] == ["fp32-matmul"]  # E501 is another tool's
    assert "no such rule" in found[typo].message
    d = found[half]
    text = open(os.path.join(src, "train_tinygpt.py")).read().split("\n")[half - 1]
    assert text[d.location.column - 1 :].startswith("# profd: ignore[")
    assert d.severity == "information" and d.location.precision == "statement"
    # waived on its line as ruff's RUF100 is, and off with the rest of the rules
    _edit(src, "train_tinygpt.py", "x = xb.to(dev", "# profd: ignore[unused-suppression]")
    rep = analyze_file(NAIVE, Options(workspace=[src]))
    assert other not in {d.location.line for d in rep.diagnostics if d.code == "unused-suppression"}
    off = analyze_file(NAIVE, Options(workspace=[src], disabled={"unused-suppression"}))
    assert not [d for d in off.diagnostics if d.code == "unused-suppression"]


def test_a_suppression_of_a_rule_left_out_is_not_unused(src):
    _edit(src, "train_tinygpt.py", "opt.zero_grad(", "# profd: ignore[launch-storm, host-sync]")
    args = [
        CLIENT,
        "analyze",
        "--no-daemon",
        "--isolated",
        "--workspace",
        src,
        "--fail-on",
        "never",
        "--format",
        "json",
    ]
    picked = json.loads(
        subprocess.run(
            [*args, "--select", "launch-storm,unused-suppression", NAIVE],
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
    )
    assert not [d for d in picked["reports"][0]["diagnostics"] if d["code"] == "unused-suppression"]
    every = json.loads(subprocess.run([*args, NAIVE], capture_output=True, text=True, timeout=300).stdout)
    (d,) = [d for d in every["reports"][0]["diagnostics"] if d["code"] == "unused-suppression"]
    assert d["evidence"]["codes"] == ["host-sync"]
