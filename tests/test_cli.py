"""profd-client analyze as a user runs it: a real console script in a subprocess."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import SRC, trace

CLIENT = shutil.which("profd-client", path=os.path.dirname(sys.executable))


def run(*args, cwd=None):
    return subprocess.run(
        [CLIENT, "analyze", "--no-daemon", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_text_output_is_compiler_style_with_the_source_line():
    p = run("--workspace", SRC, "--fail-on", "never", trace("tinygpt_naive"))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    sync = next(l for l in lines if "[host-sync]" in l)
    path, line, col, rest = sync.split(":", 3)
    assert path.endswith("train_tinygpt.py") and int(line) == 70 and int(col) >= 1
    nxt = lines[lines.index(sync) + 1]
    assert "loss.item()" in nxt  # the source line under the finding
    assert any("balanced" in l or "overhead-bound" in l for l in lines if "CPU ops" in l)


def test_json_output_matches_the_protocol():
    p = run("--workspace", SRC, "--format", "json", "--fail-on", "never", trace("seed_n64_bf16"))
    doc = json.loads(p.stdout)
    (rep,) = doc["reports"]
    assert rep["summary"]["verdict"] == "overhead-bound"
    assert len(rep["trace"]["sha256"]) == 64
    d = next(d for d in rep["diagnostics"] if d["code"] == "overhead-bound")
    assert d["location"]["line"] == 21 and d["location"]["path"].endswith("seed_matmul.py")
    assert rep["hotLines"] and "cpuTotalUs" in rep["hotLines"][0]


def test_sarif_output_has_rules_and_results():
    p = run("--workspace", SRC, "--format", "sarif", "--fail-on", "never", trace("tinygpt_naive"))
    sarif = json.loads(p.stdout)
    assert sarif["version"] == "2.1.0"
    run0 = sarif["runs"][0]
    ids = {r["id"] for r in run0["tool"]["driver"]["rules"]}
    assert {"host-sync", "fp32-matmul"} <= ids
    res = next(r for r in run0["results"] if r["ruleId"] == "host-sync")
    assert res["locations"][0]["physicalLocation"]["region"]["startLine"] == 70


def test_exit_codes_follow_fail_on():
    # tinygpt_naive's single-tensor AdamW costs over 10% of its step: an error (engine/impact.py)
    assert run("--fail-on", "error", trace("tinygpt_naive")).returncode == 1
    assert run("--fail-on", "warning", trace("tinygpt_naive")).returncode == 1
    assert run("--fail-on", "never", trace("tinygpt_naive")).returncode == 0
    # the tuned twin has warnings and no finding that costs 10% of its step
    assert run("--fail-on", "warning", trace("tinygpt_tuned")).returncode == 1
    assert run("--fail-on", "error", trace("tinygpt_tuned")).returncode == 0


def test_bad_input_is_one_clear_error_and_exit_2(tmp_path):
    bad = tmp_path / "half.json"
    bad.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1')
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"hello": "world"}')
    p = run(str(bad), str(foreign), trace("seed_n64_bf16"))
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert f"profd: bad trace {bad}: invalid JSON" in p.stderr
    assert f"profd: bad trace {foreign}: not a torch.profiler trace" in p.stderr
    assert "overhead-bound" in p.stdout  # the good file is still reported


def test_path_map_maps_remote_paths(tmp_path):
    p = run(
        "--workspace",
        str(tmp_path),
        "--path-map",
        f"train_tinygpt.py={SRC}/train_tinygpt.py",
        "--format",
        "json",
        "--fail-on",
        "never",
        trace("tinygpt_naive"),
    )
    rep = json.loads(p.stdout)["reports"][0]
    d = next(d for d in rep["diagnostics"] if d["code"] == "host-sync")
    assert d["location"]["path"] == os.path.join(SRC, "train_tinygpt.py")
    assert d["location"]["precision"] == "statement"


def test_usage_error_exits_2():
    p = subprocess.run([CLIENT, "analyze"], capture_output=True, text=True)
    assert p.returncode == 2


def test_text_output_makes_no_part_it_does_not_print():
    """The text report prints no hot lines, and the module tree only with --modules, so analyze
    asks for no more (engine ``Options.parts``): what it prints is still the formatter's text of
    the report with every part, with --select (one rule) and with --modules."""
    from profd.client_cli import format as fmt
    from profd.protocol.catalog import RULES
    from profd.server.engine import Options, analyze_file

    path = trace("tinygpt_naive")
    for code, modules in (("host-sync", False), ("profiler-artifact", True), (None, False)):
        args = (["--select", code] if code else []) + (["--modules"] if modules else [])
        p = run("--isolated", "--workspace", SRC, "--fail-on", "never", *args, path)
        assert p.returncode == 0, p.stderr
        disabled = set(RULES) - {code} if code else set()
        full = analyze_file(path, Options(workspace=[SRC], disabled=disabled))
        assert full.hot_lines and full.modules is not None
        assert p.stdout == fmt.text([full], modules=modules) + fmt.closing_line([full]) + "\n", code


def test_the_output_is_whole_when_the_process_ends_without_freeing():
    """After an in-process analysis the console script ends with ``os._exit`` once its output is
    flushed (freeing a big trace's model took ~0.2 s): every byte of a report larger than a
    pipe's buffer still reaches the reader, and the exit code is the findings' one."""
    traces = [trace("tinygpt_naive"), trace("tinygpt_tuned"), trace("seed_n64_bf16")]
    p = run("--workspace", SRC, "--format", "json", "--fail-on", "warning", *traces)
    assert len(p.stdout) > 1 << 16  # past a pipe's buffer: the flush before the exit matters
    assert [r["trace"]["path"] for r in json.loads(p.stdout)["reports"]] == traces
    assert p.returncode == 1, p.stderr


def test_a_reader_that_stops_early_gets_no_traceback():
    p = subprocess.Popen(
        [CLIENT, "analyze", "--no-daemon", "--format", "json", "--fail-on", "never", trace("tinygpt_naive")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout.read(100)
    p.stdout.close()  # the reader goes away (`| head -c 100`)
    err = p.stderr.read().decode()
    assert p.wait(60) in (0, 120), err
    assert "Traceback" not in err, err


def test_the_client_process_owns_its_heap(monkeypatch, capsys):
    """``profd-client``'s own process (``common.KEEP_LAST`` set by its entry) asks for one malloc
    arena before its first in-process analysis starts the reader's and the passes' threads (each
    kept an arena of its own: bench/cases.py measures what that cost), and for the heap trimmed
    between rules (``passes.own_the_heap``); a program that calls ``main()`` itself (KEEP_LAST
    None) keeps its malloc as it was."""
    from profd.client_cli import common
    from profd.client_cli.main import main
    from profd.server import engine

    calls = []
    monkeypatch.setattr(engine, "own_the_heap", lambda: calls.append(1) or True)
    argv = ["analyze", "--no-daemon", "--isolated", "--fail-on", "never", trace("tinygpt_naive")]
    monkeypatch.setattr(common, "KEEP_LAST", [])
    assert main(argv) == 0
    assert calls == [1]
    monkeypatch.setattr(common, "KEEP_LAST", None)
    assert main(argv) == 0
    assert calls == [1]
    capsys.readouterr()


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_one_malloc_arena_is_taken_where_the_native_layer_is_built(monkeypatch):
    from profd.server.engine import passes

    mod = passes.native()
    if mod is None:
        pytest.skip("the native layer is not built")
    assert mod.malloc_arenas(0) is False  # not a setting: refused
    monkeypatch.setattr(passes, "TRIM_BETWEEN_RULES", False)  # restored after: this process embeds the engine
    assert passes.own_the_heap() is True
    assert passes.TRIM_BETWEEN_RULES is True


def test_status_says_the_analyses_whose_file_changed_as_it_was_read_apart():
    """``profd-client status``: the daemon's ``discarded`` analyses (the file changed under them,
    so they made no report) are said beside the count, and nothing is said when there are none or
    the daemon is older and does not send the field."""
    from profd.client_cli.format import status_text
    from profd.protocol.methods import StatusResult
    import msgspec

    doc = {"host": "127.0.0.1", "port": 1}
    st = StatusResult("0.1.0", 1, "tcp", None, [], 3, 0, 0, 4, 1, 2.0, discarded=1)
    wire = json.loads(msgspec.json.encode(st))  # as the client receives it
    assert "4 analyses (1 of a file that changed as it was read), 1 session" in status_text(wire, doc)
    wire["discarded"] = 0
    assert "4 analyses, 1 session" in status_text(wire, doc)
    del wire["discarded"]
    assert "4 analyses, 1 session" in status_text(wire, doc)
