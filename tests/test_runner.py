"""The workload runner (server/workloads/runner.py): parameter validation, clear errors (missing torch, crash,
out of memory, timeout) with no torch needed, and real CPU runs when torch is importable."""

import importlib.util
import os
import textwrap
import time

import pytest

from profd.server.workloads import runner as R

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(
    not HAVE_TORCH, reason="torch is not installed (pip install profd[workload])"
)


# ---- validation (no torch) ----------------------------------------------------------------


def test_defaults_and_label():
    s = R.WorkloadSpec.parse({"workload": "matmul-bias", "n": 512, "dtype": "float32"})
    assert s.params["n"] == 512 and s.params["compile"] is False and s.params["active"] == 3
    assert s.label() == "matmul-bias_n512_float32_eager"
    assert "--no-stack" not in s.argv() and "--with-stack" in s.argv()


@pytest.mark.parametrize(
    "req, words",
    [
        ({"workload": "rm -rf /"}, "unknown workload"),
        ({"workload": "matmul-bias", "n": 9000}, "64..8192"),
        ({"workload": "matmul-bias", "n": 32}, "64..8192"),
        ({"workload": "matmul-bias", "dtype": "int8"}, "one of"),
        ({"workload": "matmul-bias", "n": "4096; rm"}, "integer"),
        ({"workload": "matmul-bias", "script": "import os"}, "unknown parameter"),
        ({"workload": "matmul-bias", "compile": "yes please"}, "true or false"),
        ({"workload": "mlp", "mode": "graphs", "device": "cpu"}, "needs device cuda"),
    ],
)
def test_bad_params_are_refused(req, words):
    with pytest.raises(R.WorkloadError) as e:
        R.WorkloadSpec.parse(req)
    assert e.value.kind == "bad-params" and words in e.value.message


def test_sizes():
    assert R.parse_sizes("64,512, 4096") == [64, 512, 4096]
    with pytest.raises(R.WorkloadError):
        R.parse_sizes("64,big")


# ---- failures, with a fake torch on PYTHONPATH (no torch needed) ----------------------------


def fake_torch(tmp_path, body: str) -> dict:
    d = tmp_path / "fake"
    (d / "torch").mkdir(parents=True)
    (d / "torch" / "__init__.py").write_text(textwrap.dedent(body))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(d)
    return env


SPEC = {"workload": "matmul-bias", "n": 64, "dtype": "float32", "device": "cpu", "active": 1}


def test_missing_torch_is_a_clear_error(tmp_path):
    env = fake_torch(tmp_path, "raise ImportError(\"No module named 'torch'\")\n")
    t = time.monotonic()
    with pytest.raises(R.WorkloadError) as e:
        R.run_workload(SPEC, str(tmp_path / "out"), timeout=60, env=env)
    assert e.value.kind == "missing-torch"
    assert "pip install profd[workload]" in e.value.message
    assert time.monotonic() - t < 30
    assert not list((tmp_path / "out").glob("*.json*"))  # nothing half-written left behind


def test_crash_is_a_clear_error(tmp_path):
    env = fake_torch(tmp_path, 'raise RuntimeError("CUDA driver exploded")\n')
    with pytest.raises(R.WorkloadError) as e:
        R.run_workload(SPEC, str(tmp_path / "out"), timeout=60, env=env)
    assert e.value.kind == "crash" and "CUDA driver exploded" in e.value.message


def test_killed_by_signal(tmp_path):
    env = fake_torch(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    with pytest.raises(R.WorkloadError) as e:
        R.run_workload(SPEC, str(tmp_path / "out"), timeout=60, env=env)
    assert e.value.kind == "crash" and "SIGKILL" in e.value.message


def test_out_of_memory(tmp_path):
    env = fake_torch(tmp_path, 'raise RuntimeError("CUDA out of memory. Tried to allocate 512.00 GiB")\n')
    with pytest.raises(R.WorkloadError) as e:
        R.run_workload(SPEC, str(tmp_path / "out"), timeout=60, env=env)
    assert e.value.kind == "oom" and "out of memory" in e.value.message


def test_timeout_kills_the_workload(tmp_path):
    marker = tmp_path / "child.pid"
    env = fake_torch(
        tmp_path,
        f"""
        import os, subprocess, sys, time
        # a grandchild too, as torch.compile's workers would be: the whole group must go
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(marker)!r}, "w").write(str(p.pid))
        time.sleep(60)
        """,
    )
    t = time.monotonic()
    with pytest.raises(R.WorkloadError) as e:
        R.run_workload(SPEC, str(tmp_path / "out"), timeout=3, env=env)
    assert e.value.kind == "timeout" and "3 s" in e.value.message
    assert time.monotonic() - t < 20
    pid = int(marker.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the workload's child process survived the timeout")


def test_no_python(tmp_path):
    with pytest.raises(R.WorkloadError) as e:
        R.run_workload(SPEC, str(tmp_path), timeout=10, python="/nonexistent/python3")
    assert e.value.kind == "no-python"


def test_sweep_records_failures_and_goes_on(tmp_path):
    res = R.run_sweep(SPEC, [64, 128], str(tmp_path), timeout=30, python="/nonexistent/python3")
    assert len(res.rows) == 2 and all(r.error for r in res.rows)
    assert "no-python" in R.format_table(res.rows)


def test_cli_bad_params_exit_2(capsys):
    from profd.client_cli.main import main

    assert main(["run", "matmul-bias", "--n", "100000", "--no-daemon"]) == 2
    assert "64..8192" in capsys.readouterr().err


# ---- real runs on the CPU (torch installed) ------------------------------------------------


@needs_torch
def test_matmul_bias_on_cpu(tmp_path):
    from profd.server.engine import Options, analyze_file

    seen = []
    res = R.run_workload(
        {**SPEC, "active": 2}, str(tmp_path), timeout=300, progress_cb=lambda m, p: seen.append((m, p))
    )
    assert res.trace_path.endswith(".json.gz") and os.path.getsize(res.trace_path) > 1000
    assert res.meta["device"] == "cpu" and res.meta["n"] == 64 and res.meta["active"] == 2
    table = open(res.table_path).read()
    assert "aten::addmm" in table or "aten::mm" in table
    assert "matmul_bias" in table  # the record_function label
    assert seen[0][1] == 0.0 and seen[-1] == ("done", 100.0)
    assert any("warming up" in m for m, _ in seen)
    rep = analyze_file(res.trace_path, Options(workspace=[os.path.dirname(R.script_path("matmul-bias"))]))
    assert rep.summary.verdict == "cpu-only"
    assert len(rep.summary.steps) == 2  # schedule(wait=1, warmup=1, active=2)
    assert rep.summary.cpu_total_us > 0
    # with_stack: the workload's own lines are in the trace
    assert any(h.path.endswith("matmul_bias.py") for h in rep.hot_lines)
    # only the finished trace and the table land in the folder
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [os.path.basename(res.trace_path), os.path.basename(res.table_path)]
    )


@needs_torch
def test_no_stack_and_sweep_table(tmp_path):
    res = R.run_sweep(
        {**SPEC, "with_stack": False, "dtype": "bfloat16"}, [64, 96], str(tmp_path), timeout=300
    )
    assert [type(x).__name__ for x in res.runs] == ["RunResult", "RunResult"], res.rows
    assert [r.n for r in res.rows] == [64, 96]
    assert all(r.verdict == "cpu-only" and r.cpu_total_us > 0 and not r.error for r in res.rows)
    text = R.format_table(res.rows)
    assert "CPU ops/step" in text and "cpu-only" in text and "96" in text


@needs_torch
def test_mlp_on_cpu(tmp_path):
    res = R.run_workload(
        {"workload": "mlp", "device": "cpu", "active": 1, "depth": 2, "width": 64}, str(tmp_path), timeout=300
    )
    assert "mlp_forward" in open(res.table_path).read()  # the record_function label
    assert res.meta["mode"] == "eager" and res.meta["device"] == "cpu"


@needs_torch
def test_cuda_asked_without_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(R.WorkloadError) as e:
        R.run_workload({**SPEC, "device": "cuda"}, str(tmp_path), timeout=120)
    assert e.value.kind == "no-cuda"


@needs_torch
def test_cli_run_prints_findings(tmp_path, capsys):
    from profd.client_cli.main import main

    rc = main(
        [
            "run",
            "matmul-bias",
            "--n",
            "64",
            "--dtype",
            "float32",
            "--active",
            "2",
            "--device",
            "cpu",
            "--no-daemon",
            "--out",
            str(tmp_path),
        ]
    )  # -q would drop the summary line, as ruff -q does
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "cpu-only: per step CPU ops" in out
    assert "ran on the CPU" in err
