"""profd-client behaving as ruff users expect, each point through the real console script in a
subprocess: folders, exit codes, rule selection, [tool.profd], common options, columns, units,
machine output (JSON schema, SARIF), diff as a CI gate, and the advice on how a trace was recorded."""

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse

import pytest

from conftest import ROOT, SRC, pty_run, trace

CLIENT = shutil.which("profd-client", path=os.path.dirname(sys.executable))
PROFD = shutil.which("profd", path=os.path.dirname(sys.executable))
NAIVE, TUNED = trace("tinygpt_naive"), trace("tinygpt_tuned")


def cli(*args, cwd=None, env=None, timeout=180):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([CLIENT, *args], capture_output=True, text=True, cwd=cwd, env=e, timeout=timeout)


def analyze(*args, **kw):
    return cli("analyze", "--no-daemon", "--isolated", *args, **kw)


# ---- folders ----------------------------------------------------------------------------------------


def test_a_folder_means_every_trace_under_it_with_a_job_report_for_ranks(tmp_path):
    deep = tmp_path / "runs" / "a" / "b"
    deep.mkdir(parents=True)
    shutil.copy(trace("seed_n64_bf16"), deep / "seed.json.gz")
    shutil.copy(trace("balanced_rank0"), tmp_path / "runs" / "r0.pt.trace.json.gz")
    shutil.copy(trace("balanced_rank1"), tmp_path / "runs" / "a" / "r1.pt.trace.json.gz")
    (tmp_path / "runs" / "a" / "config.json").write_text('{"lr": 0.1}')  # not a trace: skipped, said
    (tmp_path / "runs" / "notes.txt").write_text("not a trace suffix")
    hidden = tmp_path / "runs" / ".cache"
    hidden.mkdir()
    shutil.copy(trace("seed_n64_bf16"), hidden / "x.json.gz")
    p = analyze("--format", "json", "--fail-on", "never", str(tmp_path / "runs"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    names = sorted(os.path.basename(r["trace"]["path"]) for r in doc["reports"])
    assert names == ["r0.pt.trace.json.gz", "r1.pt.trace.json.gz", "seed.json.gz"]
    assert len(doc["jobs"]) == 1 and [r["rank"] for r in doc["jobs"][0]["ranks"]] == [0, 1]
    assert "skipped 1 JSON file(s) that are not traces" in p.stderr and "config.json" in p.stderr
    text = analyze("--fail-on", "never", str(tmp_path / "runs"))
    assert "job: 2 of 2 ranks" in text.stdout


def test_an_empty_folder_is_an_error_not_a_clean_run(tmp_path):
    p = analyze(str(tmp_path))
    assert p.returncode == 2
    assert f"no trace files (*.json, *.pt.trace.json, *.json.gz) under {tmp_path}" in p.stderr


# ---- exit codes -------------------------------------------------------------------------------------


def test_exit_codes_default_fail_on_warning_exit_zero_and_bad_input(tmp_path):
    assert analyze(NAIVE).returncode == 1  # warnings: the default --fail-on warning fails
    assert analyze("--exit-zero", NAIVE).returncode == 0
    assert analyze("--fail-on", "never", NAIVE).returncode == 0
    # only information-level findings: below the default, at --fail-on information
    info = analyze("--select", "compute-bound", trace("seed_n4096_bf16"))
    assert "information[compute-bound]" in info.stdout and info.returncode == 0
    assert (
        analyze("--select", "compute-bound", "--fail-on", "information", trace("seed_n4096_bf16")).returncode
        == 1
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert analyze("--exit-zero", str(bad)).returncode == 2  # --exit-zero never hides bad input
    assert analyze("--path-map", "foo", NAIVE).returncode == 2
    assert "--path-map wants REMOTE=LOCAL" in analyze("--path-map", "foo", NAIVE).stderr


# ---- selection -------------------------------------------------------------------------------------


def _codes(p):
    return {d["code"] for r in json.loads(p.stdout)["reports"] for d in r["diagnostics"]}


def test_select_ignore_extend_select_take_comma_lists_and_families():
    all_ = _codes(analyze("--format", "json", "--fail-on", "never", NAIVE))
    assert {"host-sync", "launch-storm", "pageable-memcpy"} <= all_
    ign = _codes(
        analyze("--format", "json", "--fail-on", "never", "--ignore", "host-sync,launch-storm", NAIVE)
    )
    assert ign == all_ - {"host-sync", "launch-storm"}
    sel = _codes(
        analyze(
            "--format",
            "json",
            "--fail-on",
            "never",
            "--select",
            "host-sync",
            "--extend-select",
            "training",
            NAIVE,
        )
    )
    assert "host-sync" in sel and sel <= {
        "host-sync",
        "pageable-memcpy",
        "optimizer-foreach-off",
        "zero-grad-not-none",
        "conv-bias-before-bn",
        "dataloader-bound",
    }
    assert {"pageable-memcpy", "zero-grad-not-none"} <= sel


@pytest.mark.parametrize("flag", ["--select", "--ignore", "--extend-select", "--disable"])
def test_an_unknown_code_is_a_usage_error_naming_the_nearest(flag):
    p = analyze(flag, "host-synk", NAIVE)
    assert p.returncode == 2 and p.stdout == ""
    assert "unknown rule code 'host-synk'; did you mean 'host-sync'?" in p.stderr


# ---- [tool.profd] ----------------------------------------------------------------------------------


def _project(tmp_path, body):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.profd]\n" + body)
    sub = tmp_path / "pkg" / "deep"
    sub.mkdir(parents=True, exist_ok=True)
    return sub


def test_pyproject_is_found_upwards_and_flags_win(tmp_path):
    shutil.copytree(SRC, tmp_path / "src")
    sub = _project(
        tmp_path, 'workspace = ["src"]\nignore = ["launch-storm"]\nfail-on = "never"\nformat = "json"\n'
    )
    p = cli("analyze", "--no-daemon", NAIVE, cwd=sub)
    assert p.returncode == 0, p.stderr  # fail-on never from the file
    doc = json.loads(p.stdout)  # format json from the file
    codes = {d["code"] for d in doc["reports"][0]["diagnostics"]}
    assert "launch-storm" not in codes and "host-sync" in codes
    sync = next(d for d in doc["reports"][0]["diagnostics"] if d["code"] == "host-sync")
    assert sync["location"]["path"] == str(
        tmp_path / "src" / "train_tinygpt.py"
    )  # workspace relative to the file
    # a flag wins over the file; --isolated ignores it; --config names another
    assert cli("analyze", "--no-daemon", "--fail-on", "warning", NAIVE, cwd=sub).returncode == 1
    iso = cli("analyze", "--no-daemon", "--isolated", "--fail-on", "never", NAIVE, cwd=sub)
    assert "warning[launch-storm]" in iso.stdout and not iso.stdout.startswith("{")
    other = tmp_path / "ci.toml"
    other.write_text(
        '[tool.profd]\nselect = ["host-sync"]\nfail-on = "information"\n'
    )  # 0.2% of the step: information
    p = cli("analyze", "--no-daemon", "--config", str(other), NAIVE, cwd=sub)
    assert p.returncode == 1 and set(re.findall(r"\[([a-z0-9-]+)\]", p.stdout)) == {"host-sync"}


def test_pyproject_errors_are_usage_errors(tmp_path):
    sub = _project(tmp_path, 'ignor = ["host-sync"]\n')
    p = cli("analyze", "--no-daemon", NAIVE, cwd=sub)
    assert p.returncode == 2 and "unknown key 'ignor' in [tool.profd] (did you mean 'ignore'?)" in p.stderr
    sub = _project(tmp_path, 'select = ["hostsync"]\n')
    p = cli("analyze", "--no-daemon", NAIVE, cwd=sub)
    assert p.returncode == 2 and "did you mean 'host-sync'?" in p.stderr
    p = cli("analyze", "--no-daemon", "--config", str(tmp_path / "missing.toml"), NAIVE)
    assert p.returncode == 2 and "no such file" in p.stderr


def test_per_rule_thresholds_from_pyproject(tmp_path):
    base = analyze("--format", "json", "--fail-on", "never", "--workspace", SRC, NAIVE)
    storms = [d for d in json.loads(base.stdout)["reports"][0]["diagnostics"] if d["code"] == "launch-storm"]
    assert storms  # 48, 424 and 53 launches per step from three lines
    least = min(d["evidence"]["launchesPerStep"] for d in storms)
    sub = _project(
        tmp_path,
        f'fail-on = "never"\n\n[tool.profd.rules.launch-storm]\nlaunches-per-step = {int(least) + 1000}\n',
    )
    p = cli("analyze", "--no-daemon", "--format", "json", "--workspace", SRC, NAIVE, cwd=sub)
    assert p.returncode == 0, p.stderr
    assert not [d for d in json.loads(p.stdout)["reports"][0]["diagnostics"] if d["code"] == "launch-storm"]
    sub = _project(tmp_path, "[tool.profd.rules.launch-storm]\nlaunches = 3\n")
    p = cli("analyze", "--no-daemon", NAIVE, cwd=sub)
    assert (
        p.returncode == 2
        and "rule launch-storm has no threshold 'launches'; it has: launches-per-step" in p.stderr
    )


# ---- common options on every command ---------------------------------------------------------------


@pytest.mark.parametrize("cmd", ["analyze", "diff", "run", "status", "reports", "hover", "annotate", "rule"])
def test_every_command_that_prints_takes_the_common_options(cmd):
    p = cli(cmd, "--help")
    assert p.returncode == 0
    for opt in ("--format", "--quiet", "--color", "--config", "--isolated"):
        assert opt in p.stdout, (cmd, opt)
    if cmd != "annotate":  # annotate's -o is the annotated trace it writes
        assert "--output-file" in p.stdout
    if cmd in ("analyze", "diff", "run"):
        for opt in ("--select", "--ignore", "--extend-select", "--fail-on", "--exit-zero"):
            assert opt in p.stdout, (cmd, opt)
    assert ("PROFD_STATE" in p.stdout) == (cmd not in ("rule", "annotate", "run")), cmd
    assert "exit status" in p.stdout
    # each epilog says its own command's exit statuses: the --fail-on gate only where there is one
    assert ("--fail-on" in p.stdout.split("\nexit status")[-1]) == (cmd in ("analyze", "diff", "run")), cmd
    assert ("PROFD_NO_DAEMON" in p.stdout) == (cmd in ("analyze", "diff")), cmd


def test_version_in_both_commands():
    from profd import __version__

    assert cli("--version").stdout.strip() == f"profd-client {__version__}"
    p = subprocess.run([PROFD, "--version"], capture_output=True, text=True)
    assert p.stdout.strip() == f"profd {__version__}"


def test_output_file_quiet_and_statistics(tmp_path):
    out = tmp_path / "r.sarif"
    p = analyze("--format", "sarif", "-o", str(out), "--fail-on", "never", NAIVE)
    assert p.returncode == 0 and p.stdout == "" and json.loads(out.read_text())["version"] == "2.1.0"
    q = analyze("-q", "--fail-on", "never", NAIVE)
    assert "[host-sync]" in q.stdout and "GPU busy" not in q.stdout.splitlines()[-1]
    assert "= note:" not in q.stdout
    st = analyze("--statistics", "--fail-on", "never", NAIVE)
    rows = {l.split()[1]: int(l.split()[0]) for l in st.stdout.splitlines()}
    full = json.loads(analyze("--format", "json", "--fail-on", "never", NAIVE).stdout)
    want: dict = {}
    for d in full["reports"][0]["diagnostics"]:
        if d["severity"] != "hint":
            want[d["code"]] = want.get(d["code"], 0) + 1
    assert rows == want
    js = json.loads(analyze("--statistics", "--format", "json", "--fail-on", "never", NAIVE).stdout)
    assert {r["code"]: r["count"] for r in js} == want


def _pty_run(args, env=None):
    """profd-client with stdout and stderr on a terminal: what a user at a terminal sees."""
    return pty_run([CLIENT, *args], dict(os.environ, **(env or {})))


def test_colour_and_progress_at_a_terminal_and_no_color(tmp_path):
    rc, out = _pty_run(["analyze", "--no-daemon", "--isolated", "--fail-on", "never", NAIVE, TUNED])
    assert rc == 0 and "\033[33mwarning\033[0m" in out  # auto: colour at a terminal
    # the progress line on stderr: traces done, bytes read of all, the current file
    assert "0/2 traces, " in out and " of 1.0 MiB; tinygpt_naive.json.gz (598.8 KiB" in out
    rc, out = _pty_run(
        ["analyze", "--no-daemon", "--isolated", "--fail-on", "never", NAIVE], {"NO_COLOR": "1"}
    )
    assert "\033[33m" not in out and "[host-sync]" in out
    rc, out = _pty_run(["analyze", "--no-daemon", "--isolated", "-q", "--fail-on", "never", NAIVE])
    assert "profd [" not in out  # --quiet: no progress
    piped = analyze("--fail-on", "never", NAIVE)
    assert "\033[" not in piped.stdout and "profd [" not in piped.stderr  # not a terminal: neither
    assert "\033[33m" in analyze("--color", "always", "--fail-on", "never", NAIVE).stdout


# ---- what the text says ------------------------------------------------------------------------


def test_columns_and_ranges_come_from_the_ast():
    p = analyze("--format", "json", "--fail-on", "never", "--workspace", SRC, NAIVE)
    diags = json.loads(p.stdout)["reports"][0]["diagnostics"]
    src = open(os.path.join(SRC, "train_tinygpt.py")).read().splitlines()
    sync = next(d for d in diags if d["code"] == "host-sync")
    line = src[sync["location"]["line"] - 1]
    col = line.index("loss.item()") + 1
    assert sync["location"]["column"] == col
    assert sync["location"]["endLine"] == sync["location"]["line"]
    assert sync["location"]["endColumn"] == col + len("loss.item()")
    text = analyze("--fail-on", "never", "--workspace", SRC, NAIVE).stdout.splitlines()
    k = next(i for i, l in enumerate(text) if "[host-sync]" in l)
    assert text[k].split(":")[2] == str(col)
    caret = text[k + 2]
    assert caret.endswith("^" * len("loss.item()")) and caret.index("^") - caret.index("|") - 2 == col - 1


def test_units_and_plurals():
    outs = [
        analyze("--fail-on", "never", "--workspace", SRC, "--hints", t).stdout
        for t in (NAIVE, TUNED, trace("seed_n64_bf16"), trace("mlp_eager"), trace("dataloader_w0"))
    ]
    for out in outs:
        assert not re.search(r"\((?:s|ies|es)\)", out), out
        assert not re.search(r"\b1 (?:launches|copies|syncs|kernels|calls|gaps|steps)\b", out), out
        assert "0.0 MiB" not in out and "0.000 µs" not in out
    assert "2 copies per step" in outs[0] and "64.0 KiB per step" in outs[0]  # x's and y's, one finding
    assert "1 copy per step" in outs[4]
    summary = next(l for l in outs[0].splitlines() if "of the active window" in l)
    assert "per step CPU ops" in summary and "over 3 steps" in summary and "total" not in summary
    assert "-bound" not in summary.split(": ", 2)[2]  # the verdict's word only: "paced by" says which side


def test_an_empty_trace_is_said_plainly(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    p = analyze(str(empty))
    assert "empty trace: the profiler recorded no events" in p.stdout
    assert "0 steps" not in p.stdout and "(ms: )" not in p.stdout


def test_advice_to_re_profile_with_the_missing_flags():
    nostack = analyze("--fail-on", "never", trace("seed_n1024_bf16_nostack")).stdout
    assert "= note: re-profile with with_stack=True (findings on your source lines)" in nostack
    full = analyze("--fail-on", "never", "--workspace", SRC, NAIVE).stdout  # recorded with all three
    assert "re-profile" not in full


# ---- machine output -------------------------------------------------------------------------------


def test_json_evidence_is_camel_case_and_the_schema_is_generated():
    doc = json.loads(analyze("--format", "json", "--fail-on", "never", NAIVE).stdout)
    assert doc["jobs"] == []
    for d in doc["reports"][0]["diagnostics"]:
        assert all("_" not in k for k in d["evidence"]), d["evidence"]
    from profd.protocol.schema import render

    with open(os.path.join(ROOT, "docs", "schema.json"), encoding="utf-8") as f:
        assert f.read() == render(), "run: python -m profd.protocol.schema > docs/schema.json"
    schema = json.loads(render())
    assert set(schema["$defs"]["AnalyzeOutput"]["properties"]) == {"reports", "jobs"}


def test_sarif_has_base_ids_fingerprints_rule_help_and_real_doc_links(tmp_path):
    a = json.loads(
        analyze("--format", "sarif", "--fail-on", "never", "--workspace", SRC, NAIVE, cwd=ROOT).stdout
    )
    b = json.loads(
        analyze("--format", "sarif", "--fail-on", "never", "--workspace", SRC, NAIVE, cwd=ROOT).stdout
    )
    run = a["runs"][0]
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == "file://" + urllib.parse.quote(ROOT) + "/"
    res = next(r for r in run["results"] if r["ruleId"] == "host-sync")
    art = res["locations"][0]["physicalLocation"]["artifactLocation"]
    assert art == {"uri": "examples/src/train_tinygpt.py", "uriBaseId": "SRCROOT"}
    fp = [r["partialFingerprints"]["profdFinding/v1"] for r in run["results"]]
    assert fp == [r["partialFingerprints"]["profdFinding/v1"] for r in b["runs"][0]["results"]]
    assert len(set(fp)) == len(fp)  # one per finding
    rule = next(r for r in run["tool"]["driver"]["rules"] if r["id"] == "host-sync")
    assert rule["fullDescription"]["text"] and "How to fix" in rule["help"]["markdown"]
    path, _, anchor = rule["helpUri"][len("file://") :].partition("#")
    assert anchor == "host-sync" and os.path.isfile(urllib.parse.unquote(path))
    with open(urllib.parse.unquote(path), encoding="utf-8") as f:
        assert "\n## host-sync\n" in f.read()
    env = analyze(
        "--format",
        "sarif",
        "--fail-on",
        "never",
        NAIVE,
        env={"PROFD_DOCS_URL": "https://docs.example/profd/"},
    )
    urls = {r["helpUri"] for r in json.loads(env.stdout)["runs"][0]["tool"]["driver"]["rules"]}
    assert all(u.startswith("https://docs.example/profd/rules.md#") for u in urls)


# ---- diff as a CI gate ----------------------------------------------------------------------------


def test_diff_gates_new_findings_and_prints_sarif():
    reg = cli("diff", "--no-daemon", "--isolated", "--format", "sarif", "--workspace", SRC, TUNED, NAIVE)
    assert reg.returncode == 1  # the naive trace brings new warnings
    new = {r["ruleId"] for r in json.loads(reg.stdout)["runs"][0]["results"]}
    assert {"host-sync", "pageable-memcpy"} <= new
    assert cli("diff", "--no-daemon", "--isolated", "--exit-zero", TUNED, NAIVE).returncode == 0
    same = cli("diff", "--no-daemon", "--isolated", "--format", "sarif", NAIVE, NAIVE)
    assert same.returncode == 0 and json.loads(same.stdout)["runs"][0]["results"] == []
    js = json.loads(cli("diff", "--no-daemon", "--isolated", "--format", "json", TUNED, NAIVE).stdout)
    came = [f["new"] for f in js["findings"] if f["change"] == "new"]
    assert came and all("_" not in k for d in came for k in d["evidence"])  # camelCase there too
    text = cli("diff", "--no-daemon", "--isolated", "--fail-on", "never", NAIVE, TUNED)
    assert text.returncode == 0 and "gone[host-sync]" in text.stdout


# ---- rule pages ------------------------------------------------------------------------------------


def test_rule_prints_the_page_and_unknown_codes_get_the_nearest():
    p = cli("rule", "host-sync")
    assert p.returncode == 0
    for head in (
        "What it means",
        "Why it costs time",
        "Example",
        "How to fix",
        "When to ignore it",
        "A shipped trace that shows it",
        "# profd: ignore[host-sync]",
    ):
        assert head in p.stdout, head
    assert "loss.item()" in p.stdout
    bad = cli("rule", "host-synk")
    assert bad.returncode == 2 and "did you mean 'host-sync'?" in bad.stderr
    from profd.protocol.catalog import RULES

    listed = [l.split()[0] for l in cli("rule", "--all").stdout.splitlines()]
    assert listed == list(RULES)
    from profd.server.engine.rules import thresholds

    page = cli("rule", "launch-storm").stdout  # the thresholds a team may set, with their defaults
    for name, default in thresholds()["launch-storm"].items():
        assert f"  {name} = {default:g}  (default)" in page
    js = json.loads(cli("rule", "launch-storm", "--format", "json").stdout)
    assert js["code"] == "launch-storm" and js["traces"] and "How to fix" in js["sections"]


def _actions(p, name):
    import argparse

    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for n, sp in a.choices.items():
                yield from _actions(sp, f"{name} {n}")
        elif not isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
            yield name, a


def test_every_option_of_both_commands_has_help_text():
    from profd.client_cli.main import _parser as client_parser
    from profd.server.daemon.cli import _parser as daemon_parser

    bare = [
        f"{n} {a.option_strings or a.dest}"
        for p, name in ((client_parser(), "profd-client"), (daemon_parser(), "profd"))
        for n, a in _actions(p, name)
        if not a.help
    ]
    assert bare == []
    assert "PROFD_STATE" in subprocess.run([PROFD, "--help"], capture_output=True, text=True).stdout
    run_help = cli("run", "--help").stdout
    assert "Needs torch (pip install 'profd[workload]')." in run_help  # the description ends its sentence
    assert "--no-stack" not in run_help  # one spelling: --with-stack / --no-with-stack


def test_the_daemon_refuses_unknown_codes_and_bad_path_maps(tmp_path):
    p = subprocess.run(
        [PROFD, "start", "--disable", "host-synk", "--state", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "did you mean 'host-sync'?" in p.stderr
    assert not (tmp_path / "daemon.json").exists()
    p = subprocess.run(
        [PROFD, "serve", "--stdio", "--path-map", "foo", "--state", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 2 and "--path-map wants REMOTE=LOCAL" in p.stderr


def test_path_map_items_read_alike_everywhere(monkeypatch, tmp_path):
    """``REMOTE=LOCAL`` is read by one parser for the CLI, ``profd serve``, the editor's settings
    and ``[tool.profd]``: the local side is made absolute (``~`` expanded; relative to the config
    file's folder there, else the working directory); anything without ``=`` is refused with the
    same words."""
    from profd.protocol.options import path_map_item

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", "/home/u")
    assert path_map_item("/job/run42=src") == ("/job/run42", str(tmp_path / "src"))
    assert path_map_item("/job=~/proj/../code") == ("/job", "/home/u/code")
    assert path_map_item("/job=src", base="/etc/cfg") == ("/job", "/etc/cfg/src")
    assert path_map_item("a=b=c", base="/x") == ("a", "/x/b=c")
    with pytest.raises(ValueError, match="path-map wants REMOTE=LOCAL, got 'foo'"):
        path_map_item("foo")


def test_a_subcommand_parsed_alone_has_the_help_it_has_among_all():
    """main builds only the subcommand argv names (start-up); its help, defaults and epilog must
    be those the whole parser gives it."""
    import argparse

    from profd.client_cli.main import _COMMANDS, _parser

    def subs(p):
        return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices

    whole = subs(_parser())
    for names, _ in _COMMANDS:
        alone = subs(_parser(names[0]))
        assert sorted(alone) == sorted(names)
        for n in names:
            assert alone[n].format_help() == whole[n].format_help(), n
            assert alone[n]._defaults == whole[n]._defaults, n
            assert [(a.dest, a.default) for a in alone[n]._actions] == [
                (a.dest, a.default) for a in whole[n]._actions
            ], n
