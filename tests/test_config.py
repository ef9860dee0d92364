"""``[tool.profd]`` read robustly and loudly (issues 28 and 29), each case through the real console
script: a file found by discovery is as loud as one given with --config; errors name the file and
the key; a hostile file (not UTF-8, nested deep, huge and sparse) is a clear exit-2 error, never a
traceback; paths in the file (output-file too) are relative to the file; thresholds that would turn
a rule off (nan, inf) or make it fire everywhere (negative) are refused; ruff's ``--config
KEY=VALUE``, ``--show-settings``, ``per-file-ignores`` and ``-v`` work."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import SRC, trace

CLIENT = shutil.which("profd-client", path=os.path.dirname(sys.executable))
NAIVE = trace("tinygpt_naive")


def cli(*args, cwd=None, env=None, timeout=180):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([CLIENT, *args], capture_output=True, text=True, cwd=cwd, env=e, timeout=timeout)


def _sub(tmp_path):
    sub = tmp_path / "pkg" / "deep"
    sub.mkdir(parents=True, exist_ok=True)
    return sub


def _one_line_error(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("profd-client: error: "), p.stderr
    for n in needles:
        assert n in p.stderr, (n, p.stderr)


def test_a_malformed_pyproject_found_by_discovery_is_as_loud_as_with_config(tmp_path):
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[tool.profd]\nignore = ["host-sync"\n')  # unclosed array
    sub = _sub(tmp_path)
    found = cli("analyze", "--no-daemon", NAIVE, cwd=sub)
    _one_line_error(found, str(bad), "is not valid TOML", "--isolated")
    given = cli("analyze", "--no-daemon", "--config", str(bad), NAIVE)
    _one_line_error(given, str(bad), "is not valid TOML")
    # --isolated passes over it; a malformed file that never mentions profd is not ours to judge
    assert cli("analyze", "--no-daemon", "--isolated", "--fail-on", "never", NAIVE, cwd=sub).returncode == 0
    bad.write_text('[project\nname = "other"\n')
    assert cli("analyze", "--no-daemon", "--fail-on", "never", NAIVE, cwd=sub).returncode == 0


@pytest.mark.parametrize(
    "body,needles",
    [
        (b'[tool.profd]\nignore = ["h\xe9te"]\n', ["not UTF-8", "byte 0xe9 on line 2"]),
        (b"[tool.profd]\nselect = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", ["nested more than 64 deep"]),
        (
            b"[tool.profd]\nrules = " + b"{a=" * 5_000 + b"1" + b"}" * 5_000 + b"\n",
            ["nested more than 64 deep"],
        ),
    ],
)
def test_a_hostile_pyproject_is_a_clear_error_not_a_traceback(tmp_path, body, needles):
    (tmp_path / "pyproject.toml").write_bytes(body)
    p = cli("analyze", "--no-daemon", NAIVE, cwd=_sub(tmp_path))
    _one_line_error(p, str(tmp_path / "pyproject.toml"), *needles)


def test_a_huge_sparse_pyproject_is_not_read_whole(tmp_path):
    path = tmp_path / "pyproject.toml"
    with open(path, "wb") as f:
        f.write(b"[tool.profd]\n")
        f.truncate(2 << 30)  # 2 GiB, sparse: no disk used
    # VmHWM, the peak of this process's own memory: ru_maxrss survives exec, so a child of a big
    # pytest process reported the parent's peak
    code = (
        "import sys\nfrom profd.client_cli.main import main\nrc = main(sys.argv[1:])\n"
        "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "print(hwm, file=sys.stderr)\nsys.exit(rc)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, "analyze", "--no-daemon", NAIVE],
        capture_output=True,
        text=True,
        cwd=_sub(tmp_path),
        timeout=120,
    )
    assert p.returncode == 2 and "larger than the 1,048,576 a configuration file may be" in p.stderr, p.stderr
    assert int(p.stderr.strip().splitlines()[-1]) < 400_000  # KiB: far below the 2 GiB file


def test_errors_in_the_file_name_the_file_and_key_not_a_flag(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.profd]\nselect = ["hostsync"]\n')
    p = cli("analyze", "--no-daemon", NAIVE, cwd=_sub(tmp_path))
    _one_line_error(
        p,
        f"{tmp_path / 'pyproject.toml'}: [tool.profd] select: unknown rule code 'hostsync'",
        "did you mean 'host-sync'?",
    )
    assert "--select" not in p.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.profd]\nignore = ["kernelz"]\n')
    p = cli("analyze", "--no-daemon", NAIVE, cwd=_sub(tmp_path))
    _one_line_error(p, "[tool.profd] ignore: unknown rule code 'kernelz'")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "-0.5"])
def test_thresholds_that_would_silence_or_flood_a_rule_are_refused(tmp_path, value):
    (tmp_path / "pyproject.toml").write_text(
        f"[tool.profd.rules.launch-storm]\nlaunches-per-step = {value}\n"
    )
    p = cli("analyze", "--no-daemon", NAIVE, cwd=_sub(tmp_path))
    _one_line_error(
        p,
        str(tmp_path / "pyproject.toml"),
        "[tool.profd.rules.launch-storm] launches-per-step",
        "wants a finite number >= 0",
    )


def test_a_share_over_one_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.profd.rules.gpu-idle-gap]\nwindow-share = 1.5\n")
    p = cli("analyze", "--no-daemon", NAIVE, cwd=_sub(tmp_path))
    _one_line_error(p, "window-share = 1.5", "<= 1")


def test_output_file_is_relative_to_the_config_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.profd]\noutput-file = "reports/profd.json"\nformat = "json"\nfail-on = "never"\n'
    )
    (tmp_path / "reports").mkdir()
    sub = _sub(tmp_path)
    p = cli("analyze", "--no-daemon", NAIVE, cwd=sub)
    assert p.returncode == 0 and p.stdout == "", p.stderr
    assert json.loads((tmp_path / "reports" / "profd.json").read_text())["reports"]
    assert not (sub / "reports").exists()
    # a flag is relative to the current folder, as any path given on the command line
    p = cli("analyze", "--no-daemon", "-o", "here.json", NAIVE, cwd=sub)
    assert p.returncode == 0 and (sub / "here.json").is_file()


def test_config_key_value_overrides_the_file_as_ruffs(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.profd]\nfail-on = "never"\n')
    sub = _sub(tmp_path)
    assert cli("analyze", "--no-daemon", NAIVE, cwd=sub).returncode == 0
    p = cli("analyze", "--no-daemon", "--config", 'fail-on = "warning"', NAIVE, cwd=sub)
    assert p.returncode == 1, p.stderr
    # dotted keys reach the per-rule thresholds
    p = cli(
        "analyze",
        "--no-daemon",
        "--isolated",
        "--format",
        "json",
        "--fail-on",
        "never",
        "--workspace",
        SRC,
        "--config",
        "rules.launch-storm.launches-per-step = 100000",
        NAIVE,
    )
    assert p.returncode == 0, p.stderr
    assert not [d for d in json.loads(p.stdout)["reports"][0]["diagnostics"] if d["code"] == "launch-storm"]
    p = cli("analyze", "--no-daemon", "--config", "fail-on = ", NAIVE, cwd=sub)
    _one_line_error(p, "--config 'fail-on = '", "not a file, nor a TOML KEY = VALUE pair")
    p = cli("analyze", "--no-daemon", "--config", 'fial-on = "never"', NAIVE, cwd=sub)
    _one_line_error(p, "unknown key 'fial-on'", "did you mean 'fail-on'?")


def test_show_settings_names_the_file_and_the_settings_in_effect(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.profd]\nignore = ["launch-storm"]\nfail-on = "error"\n')
    sub = _sub(tmp_path)
    p = cli("analyze", "--show-settings", NAIVE, cwd=sub)
    assert p.returncode == 0, p.stderr
    assert f"Settings path: {tmp_path / 'pyproject.toml'}" in p.stdout
    assert (
        "fail-on = 'error'" in p.stdout
        and "launch-storm" not in p.stdout.split("rules = ")[1].splitlines()[0]
    )
    p = cli("analyze", "--show-settings", "--format", "json", "--isolated", NAIVE, cwd=sub)
    doc = json.loads(p.stdout)
    assert doc["configFile"] is None and doc["settings"]["fail_on"] == "warning"


def test_per_file_ignores_drop_the_findings_of_matching_files(tmp_path):
    shutil.copytree(SRC, tmp_path / "src")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.profd]\nworkspace = ["src"]\nformat = "json"\nfail-on = "never"\n'
        '[tool.profd.per-file-ignores]\n"src/train_tinygpt.py" = ["host-sync"]\n'
        '"tinygpt.py" = ["kernels"]\n'
    )
    base = cli(
        "analyze",
        "--no-daemon",
        "--isolated",
        "--workspace",
        str(tmp_path / "src"),
        "--format",
        "json",
        "--fail-on",
        "never",
        NAIVE,
    )
    before = [
        (os.path.basename(d["location"]["path"]), d["code"])
        for d in json.loads(base.stdout)["reports"][0]["diagnostics"]
    ]
    assert ("train_tinygpt.py", "host-sync") in before and ("tinygpt.py", "fp32-matmul") in before
    p = cli("analyze", "--no-daemon", NAIVE, cwd=_sub(tmp_path))
    after = [
        (os.path.basename(d["location"]["path"]), d["code"])
        for d in json.loads(p.stdout)["reports"][0]["diagnostics"]
    ]
    assert ("train_tinygpt.py", "host-sync") not in after and ("tinygpt.py", "fp32-matmul") not in after
    assert ("train_tinygpt.py", "launch-storm") in after  # other codes of the same file stay
    (tmp_path / "pyproject.toml").write_text('[tool.profd.per-file-ignores]\n"x.py" = ["hostsync"]\n')
    _one_line_error(
        cli("analyze", "--no-daemon", NAIVE, cwd=_sub(tmp_path)),
        "[tool.profd.per-file-ignores] 'x.py': unknown rule code 'hostsync'",
    )


def test_verbose_says_the_configuration_and_how_it_analysed(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.profd]\nfail-on = "never"\n')
    p = cli("analyze", "-v", "--no-daemon", NAIVE, cwd=_sub(tmp_path))
    assert p.returncode == 0
    assert f"configuration: {tmp_path / 'pyproject.toml'}" in p.stderr and "analysing in-process" in p.stderr


def test_launches_per_step_counts_what_the_message_says(tmp_path):
    """The README's own example, launches-per-step = 32, keeps the finding that says "48 tiny kernel
    launches per step" (3 kernels x 16 iterations); it used to count one kernel's iterations (16)."""

    def storms(value):
        p = cli(
            "analyze",
            "--no-daemon",
            "--isolated",
            "--format",
            "json",
            "--fail-on",
            "never",
            "--workspace",
            SRC,
            "--config",
            f"rules.launch-storm.launches-per-step = {value}",
            NAIVE,
        )
        assert p.returncode == 0, p.stderr
        return sorted(
            round(d["evidence"]["launchesPerStep"])
            for d in json.loads(p.stdout)["reports"][0]["diagnostics"]
            if d["code"] == "launch-storm"
        )

    assert storms(10) == [48, 53, 424]  # the default
    assert storms(32) == [48, 53, 424]
    assert storms(50) == [53, 424]
    assert storms(500) == []
