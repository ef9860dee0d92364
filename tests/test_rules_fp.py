"""Issue 15's false-positive and miss classes, each on a real trace: the rule fires where the
problem is and stays silent where it is not (examples/, examples/recorded/, examples/corpus/)."""
import gzip
import json
import os

import pytest

from conftest import ROOT, codes, report_of, trace
from profd.server.engine import Options, analyze_file

REC = os.path.join(ROOT, "examples", "recorded")
REC_SRC = os.path.join(REC, "src")
_cache: dict = {}


def rec(name):
    if name not in _cache:
        _cache[name] = analyze_file(os.path.join(REC, name + ".json.gz"), Options(workspace=[REC_SRC]))
    return _cache[name]


def diags(report, code):
    return [d for d in report.diagnostics if d.code == code]


def _renamed(tmp_path, name: str, old_prefix: str, new: str) -> str:
    """A shipped real trace with the kernels named ``old_prefix...`` renamed to ``new``."""
    with gzip.open(trace(name)) as f:
        d = json.load(f)
    n = 0
    for e in d["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("name", "").startswith(old_prefix):
            e["name"] = new
            n += 1
    assert n
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(d))
    return str(p)


# ---- fp32-matmul: by what the kernel computes ----------------------------------------------

TRTLLM_FP4 = ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_bA32_bB32_bC32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_"
              "16dp256b_rM_TN_transOut_schedS_biasM_relu2_bN_tma_ldgstsSf_rgTma_clmp_dynB_sm100f")
FFMA = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"


def test_fp32_matmul_reads_operand_types_not_the_accumulator(tmp_path):
    """Synthetic from real: no Blackwell trace exists here, so the real 4096^2 bf16 GEMM trace gets its
    GEMM kernel renamed to a real block-scaled FP8xFP4 kernel name (``..._Fp32_`` = accumulator):
    silent; renamed to a real fp32 FFMA kernel name: fires."""
    fp4 = analyze_file(_renamed(tmp_path, "seed_n4096_bf16", "nvjet_", TRTLLM_FP4))
    assert "fp32-matmul" not in codes(fp4)
    assert fp4.summary.kernel_classes["gemm"] > 0.5 * sum(fp4.summary.kernel_classes.values())
    ffma = analyze_file(_renamed(tmp_path, "seed_n4096_bf16", "nvjet_", FFMA))
    (d,) = diags(ffma, "fp32-matmul")
    assert d.evidence["share"] > 0.5


def test_fp32_matmul_on_real_ffma_gemms_and_not_on_tensor_cores():
    assert diags(rec("matmul-bias_n8192_float32_eager"), "fp32-matmul")
    assert not diags(rec("misaligned_odd"), "fp32-matmul")  # bf16 on cutlass tensorop fallbacks


# ---- optimizer-foreach-off -----------------------------------------------------------------

def test_foreach_off_needs_per_parameter_kernels_on_the_gpu():
    # AdamW(foreach=False) on CUDA: one kernel per parameter per op
    (d,) = diags(report_of("tinygpt_naive"), "optimizer-foreach-off")
    assert d.evidence["single_tensor_frame"] == "_single_tensor_adam"
    assert not diags(report_of("tinygpt_tuned"), "optimizer-foreach-off")  # fused AdamW


# ---- pageable-memcpy -----------------------------------------------------------------------

def test_pageable_copies_of_host_batches_fire_and_read_backs_do_not():
    # the user's own .to(dev) of a pageable batch: fires (tinygpt 32 KiB per copy, dataloader 256 KiB)
    assert diags(report_of("tinygpt_naive"), "pageable-memcpy")
    assert diags(rec("dataloader_w0"), "pageable-memcpy")
    # .cpu()/print(t) of a few bytes into pageable memory: a read-back, host-sync's finding
    r = rec("host_sync_all")
    assert "host-sync" in codes(r)
    assert not diags(r, "pageable-memcpy")


# ---- compile-overhead ----------------------------------------------------------------------

def test_compile_overhead_on_one_op_functions_only():
    (d,) = diags(report_of("seed_n64_bf16_compiled"), "compile-overhead")
    assert 1 <= d.evidence["kernels_per_call"] <= 2
    assert "compile-overhead" not in codes(report_of("seed_n64_bf16"))


# ---- memory-child-pressure: a user-level scope whose helpers allocate ------------------------

def test_child_pressure_on_a_region_whose_helpers_allocate():
    # record_function("features") calls upcast() and pairwise(): 256 MiB a call, 384 KiB its own
    (d,) = diags(rec("memory_scope_helpers"), "memory-child-pressure")
    assert d.evidence["scope"] == "record_function('features')"
    assert d.evidence["self_bytes"] < 0.01 * d.evidence["total_bytes"]
    assert {h["scope"].split("(")[0] for h in d.evidence["helpers"]} == {"upcast", "pairwise"}
    assert d.location.path.endswith("memory_scope.py") and d.location.line == 20  # the with statement
    # the same work in the region's own statements: nothing to point at beneath it
    assert "memory-peak" in codes(rec("memory_scope_inline"))
    assert not diags(rec("memory_scope_inline"), "memory-child-pressure")


# ---- profiler-artifact: a lead-in the program spends is not the profiler's ------------------

def test_a_dataloader_lead_in_is_not_called_a_lane_offset():
    # 46 ms of _SingleProcessDataLoaderIter.__next__ before the first kernel, as in every step
    kinds = {d.evidence["kind"] for d in diags(rec("dataloader_w0"), "profiler-artifact")}
    assert "lane-offset" not in kinds
    assert diags(rec("dataloader_w0"), "dataloader-bound")
    # a first step whose dispatch alone is slow still gets the explanation
    lane = [d for d in diags(report_of("seed_n4096_bf16_active20"), "profiler-artifact")
            if d.evidence["kind"] == "lane-offset"]
    assert lane and lane[0].evidence["usual_lead_in_us"] < 0.5 * lane[0].evidence["offset_us"]


# ---- gpu-contention ------------------------------------------------------------------------

def test_contention_counts_no_first_launch():
    from profd.server.engine import loader, model

    (d,) = diags(rec("contention_contended"), "gpu-contention")
    doc, _, _ = loader.load(os.path.join(REC, "contention_contended.json.gz"))
    m = model.build(doc)
    launched = [e.name for g, e in enumerate(m.gpu) if m.launcher[g] >= 0]
    # each kernel's first launch (lazy module loading) is left out of the judgement
    assert d.evidence["launches"] == len(launched) - len(set(launched))
    assert not diags(rec("contention_alone"), "gpu-contention")


# ---- rank-straggler ------------------------------------------------------------------------

def _job(name):
    from profd.server.engine import job
    return job.reduce_job([job.summarize_rank(trace(f"{name}_rank{r}")) for r in (0, 1)])


def test_straggler_says_how_much_wait_and_what_differs():
    j = _job("ddp_straggler")  # rank 1: double batch and a 20 ms sleep a step
    (d,) = j.diagnostics
    assert d.evidence["rank"] == 1 and d.evidence["side"] == "cpu"
    assert d.evidence["others_wait_share"] > 0.5
    assert "cpu" in d.evidence["differs"] and "gpu" in d.evidence["differs"]  # 2x batch: more compute too
    assert "wait" in d.message and "CPU own time" in d.message and "GPU compute" in d.message


def test_a_rank_that_is_late_while_doing_less_is_no_straggler():
    # the CPU-bound DDP pair: rank 1 arrives last at 23 of 27 and rank 0's NCCL kernels spin 6 ms a
    # step, but rank 1 does less CPU and GPU work than rank 0: a phase offset of the window
    j = _job("ddp_overlap")
    r1 = next(r for r in j.ranks if r.rank == 1)
    assert r1.last_arrivals >= 0.75 * j.collectives_matched
    assert j.straggler is None and not j.diagnostics
