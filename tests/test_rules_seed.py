"""The seed's rules on the real H200 traces: each fires where the trace has the problem and stays
silent where it does not (MANIFEST.md says what a reader should conclude from each trace)."""
import pytest

from conftest import codes, report_of


def diags(report, code):
    return [d for d in report.diagnostics if d.code == code]


def test_overhead_bound_on_64x64_points_at_the_launching_line():
    r = report_of("seed_n64_bf16")
    assert r.summary.verdict == "overhead-bound"
    assert r.summary.gpu_busy_pct < 5  # MANIFEST: GPU busy ~1% of the active window
    # the table's last two lines: Self CPU 1.211 ms, Self CUDA 11.872 µs
    assert r.summary.cpu_total_us == pytest.approx(1211, rel=0.02)
    assert r.summary.cuda_total_us == pytest.approx(11.872, rel=0.01)
    (d,) = diags(r, "overhead-bound")
    assert d.location.path.endswith("examples/src/seed_matmul.py")
    assert d.location.line == 21  # `return torch.matmul(x, w) + b` launches both kernels
    assert d.evidence["cpu_total_us"] > 50 * d.evidence["cuda_total_us"]


def test_compute_bound_on_4096_names_the_gemm_and_is_not_overhead_bound():
    r = report_of("seed_n4096_bf16")
    assert r.summary.verdict == "compute-bound"
    assert "overhead-bound" not in codes(r)
    (d,) = diags(r, "compute-bound")
    assert d.evidence["families"][0]["class"] == "gemm"
    assert d.evidence["families"][0]["top_kernel"].startswith("nvjet_sm90")
    assert "compute-bound" not in codes(report_of("seed_n64_bf16"))


def test_cold_start_step_fires_on_the_wide_first_step_only():
    r = report_of("seed_n64_bf16")
    (d,) = diags(r, "cold-start-step")
    assert d.evidence["first_step"] == "ProfilerStep#2"
    assert d.evidence["first_step_us"] == pytest.approx(644.3, abs=1)
    # no first-time work is visible in that step, so it is information, not a warning
    assert d.evidence["first_time_work"] == [] and d.severity == "information"
    # the tuned TinyGPT's first step is not the widest: no cold start there
    assert "cold-start-step" not in codes(report_of("tinygpt_tuned"))
    assert "cold-start-step" not in codes(report_of("tinygpt_naive"))


def test_small_problem_on_tiny_gemms_not_on_large_ones():
    (d,) = diags(report_of("seed_n64_bf16"), "small-problem")
    assert d.evidence["largest_gemm_mkn"] == [64, 64, 64]
    assert "small-problem" not in codes(report_of("seed_n1024_bf16_nostack"))  # 2 GFLOP GEMMs
    assert "small-problem" not in codes(report_of("seed_n4096_bf16"))


def test_profiler_artifacts_lane_offset_flush_sync_judged_by_the_gpu():
    r = report_of("seed_n4096_bf16_active20")
    kinds = {d.evidence["kind"]: d for d in diags(r, "profiler-artifact")}
    assert "lane-offset" in kinds
    assert 200 <= kinds["lane-offset"].evidence["offset_us"] <= 1600  # MANIFEST: 0.2-1.6 ms
    # the long closing sync drains a busy GPU: it must not be read as idle time
    assert kinds["flush-sync"].evidence["gpu_busy_during"] > 0.9
    assert "CPU had run ahead" in kinds["flush-sync"].message
    short = {d.evidence["kind"]: d for d in diags(report_of("seed_n64_bf16"), "profiler-artifact")}
    assert short["flush-sync"].evidence["gpu_busy_during"] < 0.1
    # inflation is only explained when the verdict is CPU-side
    assert "cpu-inflation" in short
    assert "cpu-inflation" not in kinds


def test_kernel_class_uses_launch_patterns_on_hopper():
    r = report_of("seed_n4096_bf16")
    classes = r.summary.kernel_classes
    assert max(classes, key=classes.get) == "gemm"
    assert classes.get("elementwise", 0) > 0
    (d,) = diags(r, "kernel-class")
    assert d.severity == "hint"


def test_kernel_jitter_silent_on_steady_h200_gemm():
    # MANIFEST: 20 samples, 170.8-177.9 µs: a narrow distribution deserves no warning
    assert "kernel-jitter" not in codes(report_of("seed_n4096_bf16_active20"))


def test_compile_overhead_on_single_op_compiled_region():
    (d,) = diags(report_of("seed_n64_bf16_compiled"), "compile-overhead")
    assert d.evidence["kernels_per_call"] <= 2
    assert d.evidence["wrapper_us_per_call"] > 10 * d.evidence["gpu_us_per_call"]
    assert "compile-overhead" not in codes(report_of("seed_n64_bf16"))


def test_compile_fusion_reports_the_bias_epilogue_on_hopper():
    (d,) = diags(report_of("seed_n4096_bf16_compiled"), "compile-fusion")
    assert d.evidence["op"] == "aten::addmm"
    assert d.evidence["bias_epilogue"] and not d.evidence["bias_copy"]  # no DtoD copy on this stack
    assert "compile-fusion" not in codes(report_of("seed_n4096_bf16"))


def test_memory_peak_and_no_child_pressure_from_composite_ops():
    r = report_of("tinygpt_naive")
    (peak,) = diags(r, "memory-peak")
    assert peak.evidence["peak_bytes"] > 1 << 30
    # aten::cross_entropy_loss allocating through aten::log_softmax is true of every composite op;
    # the record_function('forward') region wraps one call, model(x), which allocates for itself
    assert "memory-child-pressure" not in codes(r)
    assert "memory-peak" not in codes(report_of("mlp_eager"))  # recorded without profile_memory
    # recorded with profile_memory; the record_function region wraps one helper that allocates
    assert "memory-peak" in codes(report_of("seed_n4096_bf16"))
    assert "memory-child-pressure" not in codes(report_of("seed_n4096_bf16"))


def test_sync_wait_not_confused_with_the_profilers_flush():
    for name in ("seed_n4096_bf16_active20", "tinygpt_tuned", "seed_n64_bf16"):
        assert "sync-wait" not in codes(report_of(name)), name


def test_gpu_idle_gap_silent_when_gpu_is_saturated():
    assert "gpu-idle-gap" not in codes(report_of("seed_n4096_bf16_active20"))
    gaps = diags(report_of("tinygpt_naive"), "gpu-idle-gap")
    assert gaps and all(d.evidence["idle_share"] >= 0.05 for d in gaps)


def test_gpu_contention_silent_on_traces_where_the_queue_is_our_own():
    # the 20-step run has 0.4-0.8 ms launch delays, all behind our own busy lane
    for name in ("seed_n4096_bf16_active20", "tinygpt_naive", "tinygpt_tuned"):
        assert "gpu-contention" not in codes(report_of(name)), name


def test_no_stack_trace_still_gets_findings_at_trace_level():
    r = report_of("seed_n1024_bf16_nostack")
    assert r.summary.verdict == "overhead-bound"
    assert r.diagnostics
    assert all(d.location.precision == "trace" and d.location.line is None for d in r.diagnostics)
    assert r.hot_lines == []
