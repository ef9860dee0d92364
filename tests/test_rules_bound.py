"""The bound rules (``server/engine/rules/bound.py``: ``overhead-bound``, ``compute-bound``,
``transfer-bound``, ``small-problem``) on real traces: each fires where the trace has the problem
and stays silent where it does not. Traces: examples/ (MANIFEST.md says what a reader should
conclude from each), examples/recorded/ and examples/corpus/ (recorded on an H200 for the rules;
their READMEs say how); ``rule_traces`` reads them."""

import pytest

from conftest import codes, report_of
from rule_traces import corpus_of, of, recorded_tools


# ---- the seed's traces (examples/, MANIFEST.md) --------------------------------------------------


def test_overhead_bound_on_64x64_points_at_the_launching_line():
    r = report_of("seed_n64_bf16")
    assert r.summary.verdict == "overhead-bound"
    assert r.summary.gpu_busy_pct < 5  # MANIFEST: GPU busy ~1% of the active window
    # the table's last two lines: Self CPU 1.211 ms, Self CUDA 11.872 µs
    assert r.summary.cpu_total_us == pytest.approx(1211, rel=0.02)
    assert r.summary.cuda_total_us == pytest.approx(11.872, rel=0.01)
    (d,) = of(r, "overhead-bound")
    assert d.location.path.endswith("examples/src/seed_matmul.py")
    assert d.location.line == 21  # `return torch.matmul(x, w) + b` launches both kernels
    assert d.evidence["cpu_total_us"] > 50 * d.evidence["cuda_total_us"]


def test_compute_bound_on_4096_names_the_gemm_and_is_not_overhead_bound():
    r = report_of("seed_n4096_bf16")
    assert r.summary.verdict == "compute-bound"
    assert "overhead-bound" not in codes(r)
    (d,) = of(r, "compute-bound")
    assert d.evidence["families"][0]["class"] == "gemm"
    assert d.evidence["families"][0]["top_kernel"].startswith("nvjet_sm90")
    assert "compute-bound" not in codes(report_of("seed_n64_bf16"))


def test_small_problem_on_tiny_gemms_not_on_large_ones():
    (d,) = of(report_of("seed_n64_bf16"), "small-problem")
    assert d.evidence["largest_gemm_mkn"] == [64, 64, 64]
    assert "small-problem" not in codes(report_of("seed_n1024_bf16_nostack"))  # 2 GFLOP GEMMs
    assert "small-problem" not in codes(report_of("seed_n4096_bf16"))


def test_no_stack_trace_still_gets_findings_at_trace_level():
    r = report_of("seed_n1024_bf16_nostack")
    assert r.summary.verdict == "overhead-bound"
    assert r.diagnostics
    assert all(d.location.precision == "trace" and d.location.line is None for d in r.diagnostics)
    assert r.hot_lines == []


# ---- examples/recorded/: a planted problem and its fixed twin ------------------------------------


def test_sweep_small_is_overhead_bound():
    r = recorded_tools("matmul-bias_n512_bfloat16_eager")
    assert r.summary.verdict == "overhead-bound"
    assert {"overhead-bound", "small-problem"} <= {d.code for d in r.diagnostics}


# ---- workloads nobody tuned the rules for (examples/corpus/record2.sh) ---------------------------


def test_small_problem_not_when_the_step_waits_on_host_work():
    # the step measures numpy, not the launch overhead of a small GEMM
    assert not corpus_of("numpy_pipeline", "small-problem")
    # a batch-1 decode loop of tiny GEMMs is still the small-problem case
    assert corpus_of("decode_kv_item", "small-problem")
