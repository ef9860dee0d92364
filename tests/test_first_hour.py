"""What a newcomer meets in the first hour (issue 29), through the real console scripts: an internal
error exits 2 with one line and a log pointer (never a finding's 1); no daemon is left behind by a
CI or scripted run (``PROFD_NO_DAEMON=0`` means off); the daemon commands agree on "no daemon
running"; a bad flag on a subcommand prints that subcommand's usage; ruff's habits
(``--output-format``, the closing ``Found N findings`` line)."""

import json
import os
import shutil
import subprocess
import sys

from conftest import SRC, pty_run, trace

BIN = os.path.dirname(sys.executable)
CLIENT, PROFD = shutil.which("profd-client", path=BIN), shutil.which("profd", path=BIN)
NAIVE, TUNED = trace("tinygpt_naive"), trace("tinygpt_tuned")


def run(exe, *args, env=None, cwd=None, timeout=120):
    e = dict(os.environ)
    e.pop("PROFD_NO_DAEMON", None)
    e.update(env or {})
    return subprocess.run([exe, *args], capture_output=True, text=True, env=e, cwd=cwd, timeout=timeout)


def test_an_internal_error_exits_2_with_one_line_and_the_traceback_in_a_log(tmp_path):
    code = (
        "import sys\nimport profd.client_cli.main as m\n"
        "def boom(ns, out):\n    raise RuntimeError('simulated bug')\n"
        "m.cmd_rule = boom\nsys.exit(m.main(['rule', 'host-sync']))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PROFD_STATE=str(tmp_path / "state")),
    )
    log = tmp_path / "state" / "error.log"
    assert p.returncode == 2, p
    assert (
        p.stderr
        == f"profd-client: internal error: RuntimeError: simulated bug (traceback in {log}; please report it)\n"
    )
    assert "Traceback (most recent call last)" in log.read_text() and "simulated bug" in log.read_text()


def test_no_daemon_is_started_by_a_ci_or_scripted_run(tmp_path):
    state = tmp_path / "state"
    for env in ({}, {"CI": "true"}, {"PROFD_NO_DAEMON": "0"}, {"PROFD_NO_DAEMON": ""}):
        p = run(
            CLIENT,
            "analyze",
            "--isolated",
            "--fail-on",
            "never",
            NAIVE,
            env={"PROFD_STATE": str(state), **env},
        )
        assert p.returncode == 0 and "started a daemon" not in p.stderr, (env, p.stderr)
        assert not (state / "daemon.json").exists(), env
    # PROFD_NO_DAEMON=1 is on
    p = run(
        CLIENT,
        "analyze",
        "--isolated",
        "-v",
        "--fail-on",
        "never",
        NAIVE,
        env={"PROFD_STATE": str(state), "PROFD_NO_DAEMON": "1"},
    )
    assert "analysing in-process (--no-daemon)" in p.stderr


def test_at_a_terminal_outside_ci_a_daemon_is_started_and_said(tmp_path):
    state = tmp_path / "state"
    env = dict(os.environ, PROFD_STATE=str(state))
    env.pop("PROFD_NO_DAEMON", None)
    env.pop("CI", None)
    try:
        rc, err = pty_run([CLIENT, "analyze", "--isolated", "--fail-on", "never", NAIVE], env)
        assert rc == 0 and "started a daemon for later runs" in err, err
        assert (state / "daemon.json").exists()
        # and a script then uses the running one without a word
        p = run(
            CLIENT,
            "analyze",
            "--isolated",
            "-v",
            "--fail-on",
            "never",
            NAIVE,
            env={"PROFD_STATE": str(state)},
        )
        assert p.returncode == 0 and "analysing through the daemon" in p.stderr, p.stderr
    finally:
        run(PROFD, "stop", "--state", str(state))


def test_daemon_commands_agree_when_none_runs(tmp_path):
    env = {"PROFD_STATE": str(tmp_path / "state")}
    for exe, args in (
        (PROFD, ["status"]),
        (PROFD, ["stop"]),
        (CLIENT, ["status"]),
        (CLIENT, ["reports"]),
        (CLIENT, ["hover", "x.py:1"]),
    ):
        p = run(exe, *args, env=env)
        assert p.returncode == 1 and "no daemon running" in p.stderr and p.stdout == "", (exe, args, p)


def test_a_bad_flag_on_a_subcommand_prints_that_subcommands_usage():
    for exe, cmd in (
        (CLIENT, "analyze"),
        (CLIENT, "diff"),
        (CLIENT, "rule"),
        (PROFD, "status"),
        (PROFD, "start"),
    ):
        p = run(exe, cmd, "--no-such-flag", *{"diff": ["x", "y"], "analyze": ["x"]}.get(cmd, []))
        assert p.returncode == 2 and p.stderr.startswith(f"usage: {os.path.basename(exe)} {cmd} "), p.stderr
        assert "unrecognized arguments: --no-such-flag" in p.stderr


def test_output_format_is_format_and_the_text_ends_with_a_total_line():
    a = run(
        CLIENT, "analyze", "--no-daemon", "--isolated", "--output-format", "json", "--fail-on", "never", NAIVE
    )
    b = run(CLIENT, "analyze", "--no-daemon", "--isolated", "--format", "json", "--fail-on", "never", NAIVE)
    assert a.returncode == 0 and a.stdout == b.stdout and json.loads(a.stdout)["reports"]
    t = run(
        CLIENT, "analyze", "--no-daemon", "--isolated", "--workspace", SRC, "--fail-on", "never", NAIVE, TUNED
    )
    last = t.stdout.rstrip("\n").splitlines()[-1]
    diags = [
        d
        for r in json.loads(
            run(
                CLIENT,
                "analyze",
                "--no-daemon",
                "--isolated",
                "--workspace",
                SRC,
                "--format",
                "json",
                "--fail-on",
                "never",
                NAIVE,
                TUNED,
            ).stdout
        )["reports"]
        for d in r["diagnostics"]
    ]
    shown = [d for d in diags if d["severity"] != "hint"]
    assert (
        last.startswith(f"Found {len(shown)} findings (")
        and last.endswith(" in 2 traces")
        or "not shown" in last
    ), last
    for sev, word in (("error", "error"), ("warning", "warning")):
        n = sum(d["severity"] == sev for d in shown)
        assert (f"{n} {word}" in last) == (n > 0), (sev, last)
    q = run(CLIENT, "analyze", "--no-daemon", "--isolated", "-q", "--fail-on", "never", NAIVE)
    assert "Found " not in q.stdout  # --quiet: findings only


def test_a_hint_only_selection_does_not_read_as_clean():
    p = run(
        CLIENT,
        "analyze",
        "--no-daemon",
        "--isolated",
        "--select",
        "kernel-class",
        "--fail-on",
        "never",
        NAIVE,
    )
    js = run(
        CLIENT,
        "analyze",
        "--no-daemon",
        "--isolated",
        "--select",
        "kernel-class",
        "--format",
        "json",
        "--fail-on",
        "never",
        NAIVE,
    )
    hints = [d for r in json.loads(js.stdout)["reports"] for d in r["diagnostics"] if d["severity"] == "hint"]
    assert hints  # the JSON has them
    last = p.stdout.rstrip("\n").splitlines()[-1]
    assert (
        last
        == f"Found 0 findings in 1 trace; {len(hints)} hint{'s' if len(hints) > 1 else ''} not shown (--hints shows them)"
    )


def _analyze(*args):
    return run(
        CLIENT, "analyze", "--no-daemon", "--isolated", "--workspace", SRC, "--fail-on", "never", *args
    )


def test_statistics_show_the_reported_severity_and_refuse_sarif():
    diags = json.loads(_analyze("--format", "json", NAIVE).stdout)["reports"][0]["diagnostics"]
    st = json.loads(_analyze("--statistics", "--format", "json", NAIVE).stdout)
    for row in st:
        got = [d["severity"] for d in diags if d["code"] == row["code"]]
        assert row["severities"] == {s: got.count(s) for s in set(got)}, row
    # the catalog default of optimizer-foreach-off is warning; here its impact makes it an error
    foreach = next(r for r in st if r["code"] == "optimizer-foreach-off")
    assert foreach["severity"] == "error" != "warning"  # catalog default: warning
    text = _analyze("--statistics", NAIVE).stdout
    storm = next(l for l in text.splitlines() if " launch-storm " in l)
    sev = next(r for r in st if r["code"] == "launch-storm")["severities"]
    assert len(sev) > 1  # mixed here: the text says each
    assert all(f"{n} {k}" in storm or f"{n} {k}s" in storm for k, n in sev.items()), (storm, sev)
    p = _analyze("--statistics", "--format", "sarif", NAIVE)
    assert p.returncode == 2 and "--statistics prints text or json, not sarif" in p.stderr and p.stdout == ""


def test_github_and_junit_formats():
    import xml.etree.ElementTree as ET

    diags = [
        d
        for d in json.loads(_analyze("--format", "json", NAIVE).stdout)["reports"][0]["diagnostics"]
        if d["severity"] != "hint"
    ]
    gh = _analyze("--output-format", "github", NAIVE).stdout.splitlines()
    assert len(gh) == len(diags)
    sync = next(l for l in gh if "(host-sync)" in l)
    assert sync.startswith("::notice file=") and "train_tinygpt.py,line=70,col=45," in sync
    assert all(l.split(" ", 1)[0] in ("::error", "::warning", "::notice") for l in gh)
    assert sum(l.startswith("::error ") for l in gh) == sum(d["severity"] == "error" for d in diags)
    root = ET.fromstring(_analyze("--format", "junit", NAIVE, TUNED).stdout)
    suites = root.findall("testsuite")
    assert len(suites) == 2 and int(suites[0].get("failures")) == len(diags)
    assert {c.find("failure").get("type") for c in suites[0].findall("testcase")} <= {
        "error",
        "warning",
        "information",
    }


def test_unmapped_source_is_a_rule_that_rule_and_ignore_know():
    page = run(CLIENT, "rule", "unmapped-source")
    assert page.returncode == 0 and "--path-map" in page.stdout and "path-map" in page.stdout
    assert "unmapped-source" in run(CLIENT, "rule", "--all").stdout
    for sel in ("--ignore", "--select"):
        p = _analyze(sel, "unmapped-source", NAIVE)
        assert p.returncode == 0, p.stderr
    p = run(PROFD, "start", "--disable", "unmapped-sourse", "--state", "/nonexistent/x")
    assert p.returncode == 2 and "unmapped-source" in p.stderr  # the nearest code, also for the daemon


def test_a_diff_of_two_different_programs_says_so():
    def diff(a, b, *args):
        return run(CLIENT, "diff", "--no-daemon", "--isolated", "--fail-on", "never", *args, a, b)

    other = diff(NAIVE, trace("seed_n64_bf16"))
    assert other.returncode == 0 and "these look like two different programs" in other.stdout.splitlines()[1]
    js = json.loads(diff(NAIVE, trace("seed_n64_bf16"), "--format", "json").stdout)
    assert "seed_matmul.py" in js["differentPrograms"]
    same = diff(NAIVE, TUNED)
    assert "different programs" not in same.stdout
    assert json.loads(diff(NAIVE, TUNED, "--format", "json").stdout)["differentPrograms"] == ""


def test_each_job_names_its_traces():
    p = run(
        CLIENT,
        "analyze",
        "--no-daemon",
        "--isolated",
        "--fail-on",
        "never",
        trace("balanced_rank0"),
        trace("balanced_rank1"),
        trace("fsdp_rank0"),
        trace("fsdp_rank1"),
    )
    heads = [l for l in p.stdout.splitlines() if l.startswith("  traces: ")]
    assert len(heads) == 2, p.stdout
    assert "rank 0 " in heads[0] and "balanced_rank0" in heads[0] and "balanced_rank1" in heads[0]
    assert "fsdp_rank0" in heads[1] and "fsdp_rank1" in heads[1] and "balanced" not in heads[1]
