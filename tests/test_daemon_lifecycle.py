"""``profd start/status/stop`` and the profd-client questions for the daemon, as a user runs them:
a missing folder refused, a second ``start`` with other settings refused clearly (or ``--replace``),
``status`` naming what it watches, ``hover FILE:LINE`` relative to the workspace, ``reports`` with
verdicts and counts."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import SRC, trace

BIN = os.path.dirname(sys.executable)
CLIENT, PROFD = shutil.which("profd-client", path=BIN), shutil.which("profd", path=BIN)


def run(exe, *args, cwd=None, state=None):
    env = dict(os.environ)
    env.pop("PROFD_NO_DAEMON", None)
    if state:
        env["PROFD_STATE"] = str(state)
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60)


@pytest.fixture
def state(tmp_path):
    s = tmp_path / "state"
    yield s
    run(PROFD, "stop", "--state", str(s))


def test_start_refuses_a_missing_folder(tmp_path, state):
    p = run(PROFD, "start", "--watch", str(tmp_path / "nope"), "--state", str(state))
    assert p.returncode == 2 and f"--watch {tmp_path / 'nope'}: no such folder" in p.stderr
    assert not (state / "daemon.json").exists()


def test_start_status_reconfigure_hover_and_reports(tmp_path, state):
    watch, other = tmp_path / "watch", tmp_path / "other"
    watch.mkdir()
    other.mkdir()
    p = run(PROFD, "start", "--watch", str(watch), "--workspace", SRC, "--state", str(state))
    assert p.returncode == 0 and f"watching {watch}" in p.stdout, p.stderr
    pid = json.loads((state / "daemon.json").read_text())["pid"]
    again = run(PROFD, "start", "--watch", str(watch), "--workspace", SRC, "--state", str(state))
    assert again.returncode == 0 and "already running" in again.stdout
    clash = run(PROFD, "start", "--watch", str(other), "--state", str(state))
    assert clash.returncode == 2 and "it was not changed" in clash.stderr and "--replace" in clash.stderr
    assert json.loads((state / "daemon.json").read_text())["pid"] == pid

    shutil.copy(trace("seed_n64_bf16"), watch / "seed.json.gz")
    for _ in range(400):
        st = json.loads(run(CLIENT, "status", "--format", "json", state=state).stdout)
        if st["reports"] >= 1 and not st["queued"] and not st["running"]:
            break
        time.sleep(0.1)
    text = run(CLIENT, "status", state=state).stdout
    assert f"watching {watch}" in text and "None" not in text and "1 report," in text
    # FILE:LINE relative to the daemon's workspace, from a folder where no such file is
    h = run(CLIENT, "hover", "seed_matmul.py:21", cwd=str(tmp_path), state=state)
    assert h.returncode == 0 and "Launches: 2" in h.stdout, h.stderr
    miss = run(CLIENT, "hover", "nowhere.py:3", cwd=str(tmp_path), state=state)
    assert miss.returncode == 2 and "no file nowhere.py" in miss.stderr
    reps = run(CLIENT, "reports", state=state).stdout
    line = next(l for l in reps.splitlines() if "seed.json.gz" in l)
    assert "overhead-bound" in line and "warning" in line and "source file" in line

    rep = run(PROFD, "start", "--replace", "--watch", str(other), "--state", str(state))
    assert rep.returncode == 0 and f"watching {other}" in rep.stdout, rep.stderr
    assert json.loads((state / "daemon.json").read_text())["pid"] != pid
    none = run(PROFD, "start", "--replace", "--state", str(tmp_path / "s2"))
    try:
        assert "watching no folder" in none.stdout
        assert "watching no folder" in run(PROFD, "status", "--state", str(tmp_path / "s2")).stdout
    finally:
        run(PROFD, "stop", "--state", str(tmp_path / "s2"))


def test_start_from_a_folder_holding_a_profd_folder(tmp_path, state):
    """``python -m`` put the current folder first on the daemon's sys.path: a ``profd/`` there
    (a checkout of profd, a project of that name) was imported instead, the daemon died with an
    ImportError and ``start`` pointed at a daemon.log that did not exist."""
    (tmp_path / "profd" / "server").mkdir(parents=True)
    watch = tmp_path / "watch"
    watch.mkdir()
    p = run(PROFD, "start", "--watch", str(watch), "--state", str(state), cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert json.loads((state / "daemon.json").read_text())["pid"]


def test_a_daemon_that_dies_early_is_pointed_at_where_it_wrote(tmp_path):
    from profd.server.daemon.cli import _see

    log, err = tmp_path / "daemon.log", tmp_path / "daemon.err"
    err.write_text("an old crash\n")
    since = err.stat().st_size
    assert _see(str(log), str(err), since) == "; it wrote nothing"
    with open(err, "a") as f:
        f.write("Traceback (most recent call last):\nImportError: cannot import name 'x'\n")
    msg = _see(str(log), str(err), since)
    assert str(err) in msg and str(log) not in msg  # no pointer at a log that does not exist
    assert "ImportError: cannot import name 'x'" in msg and "an old crash" not in msg
