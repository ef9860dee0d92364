"""Issue 15's false-positive and miss classes, each on a real trace: the rule fires where the
problem is and stays silent where it is not (examples/, examples/recorded/, examples/corpus/)."""
import gzip
import json
import os


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


# ---- on the corpus (examples/corpus/traces, recorded on an H200: examples/corpus/README.md) ----

CORPUS = os.path.join(ROOT, "examples", "corpus")


def corpus(name):
    key = ("corpus", name)
    if key not in _cache:
        _cache[key] = analyze_file(os.path.join(CORPUS, "traces", name + ".json.gz"),
                                   Options(workspace=[os.path.join(CORPUS, "src")]))
    return _cache[key]


def corpus_job(name):
    from profd.server.engine import job

    key = ("job", name)
    if key not in _cache:
        _cache[key] = job.reduce_job([job.summarize_rank(os.path.join(CORPUS, "traces", f"{name}_rank{r}.json.gz"))
                                      for r in (0, 1)])
    return _cache[key]


def test_misaligned_dims_as_the_kernel_sees_them():
    # decode GEMMs [1, 1, 768] x [768, N]: M = 1 is a matrix-vector product, not a misaligned GEMM
    assert not diags(corpus("gpt2_generate"), "misaligned-dims")
    assert not diags(corpus("serve_decode_batch"), "misaligned-dims")
    # a linear on [16, 559, 1024]: its leading dims fold to M = 8944, a multiple of 8 (nvjet kernels)
    assert not diags(corpus("linear_m8944_aligned"), "misaligned-dims")
    assert not diags(corpus("timm_vit_small"), "misaligned-dims")  # M = 32 * 197 = 6304
    # the twin with K 1023 and N 4095: a cutlass align1 fallback
    (d,) = diags(corpus("linear_m8944_odd"), "misaligned-dims")
    assert (d.evidence["m"], d.evidence["k"], d.evidence["n"]) == (8944, 1023, 4095)
    assert d.evidence["misaligned"] == [1023, 4095] and "align1" in d.evidence["fallback"]
    # the kernel named is the fallback itself, not the first GEMM-class kernel of the op (a 10-wide
    # head whose op also runs cuBLAS's splitKreduce)
    from profd.server.engine import kernels as K

    for name in ("linear_m8944_odd", "cold_start"):
        for d in diags(corpus(name), "misaligned-dims"):
            assert K.gemm_fallback(d.evidence["kernel"], 2), d.evidence["kernel"]


def test_fp32_matmul_silent_on_fp8_and_tf32_tensor_cores():
    assert diags(corpus("gemm_fp32"), "fp32-matmul")
    assert not diags(corpus("gemm_tf32"), "fp32-matmul")
    assert not diags(corpus("gemm_fp8"), "fp32-matmul")  # torch._scaled_mm on float8_e4m3fn


def test_fp32_matmul_in_a_lambda_lands_on_the_lambda():
    # gemm = lambda: x @ w (line 25), called at line 29 of main(): the lambda's frame names line 25
    (d,) = diags(corpus("gemm_fp32"), "fp32-matmul")
    assert d.location.path.endswith("gemm_precision.py") and d.location.line == 25


def test_jitter_is_one_kernel_on_one_problem():
    from profd.server.engine import loader, model
    from profd.server.engine.rules.util import quantile

    # V100, no shapes, no stack (a peer project's trace): volta_sgemm_32x128_tt runs 15 times a step
    # on problems of ~400 µs and ~48 µs; across them p50 49 µs, p90 419 µs; each steady on its own
    path = os.path.join(ROOT, "examples", "peer", "hta", "df_index_resolver", "df_index_resolver.json.gz")
    doc, _, _ = loader.load(path)
    m = model.build(doc)
    ds = [e.dur for e in m.gpu if e.name == "volta_sgemm_32x128_tt"]
    assert quantile(ds, 0.9) > 5 * quantile(ds, 0.5)
    assert not diags(analyze_file(path), "kernel-jitter")
    # ResNet-18's batch norm over layers of different sizes (record_shapes): no jitter either
    assert not diags(corpus("resnet18_train"), "kernel-jitter")
    # a GEMM sharing its SMs with a side stream, the same problem every time: jitter
    assert diags(rec("jitter_side"), "kernel-jitter")


def test_compile_overhead_not_on_a_model_whose_problem_is_graph_breaks():
    r = corpus("compiled_break")
    assert "compile-graph-break" in codes(r)
    assert "compile-overhead" not in codes(r)
    assert "compile-overhead" not in codes(corpus("compiled_none"))  # a multi-op model compiled whole


def test_optimizer_foreach_off_not_on_cpu_parameters():
    assert not diags(corpus("cpu_train"), "optimizer-foreach-off")  # CPU-only: torch's own choice
    (d,) = diags(corpus("optim_single"), "optimizer-foreach-off")   # foreach=False on CUDA
    assert not diags(corpus("optim_foreach"), "optimizer-foreach-off")


def test_pageable_memcpy_not_for_a_librarys_few_bytes():
    # generate() copies a few bytes from pageable memory 6 times: nothing a user could pin
    assert not diags(corpus("gpt2_generate"), "pageable-memcpy")
    (d,) = diags(corpus("copies_pageable_nb"), "pageable-memcpy")  # 16 MB non_blocking from pageable
    assert d.evidence["bytes_per_step"] >= 16e6
    assert not diags(corpus("copies_pinned_nb"), "pageable-memcpy")


def test_child_pressure_not_on_composite_aten_ops():
    # ResNet-18 with profile_memory: aten::conv2d allocates through aten::cudnn_convolution, as
    # every composite op does; no user function or region allocates through helpers
    r = corpus("resnet18_train")
    assert "memory-peak" in codes(r)
    assert not diags(r, "memory-child-pressure")


def test_launch_storm_counts_launch_calls_not_graph_replays():
    assert not diags(corpus("graphs_replay"), "launch-storm")  # one cudaGraphLaunch a step
    assert diags(report_of("tinygpt_naive"), "launch-storm")


def test_gloo_collectives_count_and_the_straggler_is_found():
    j = corpus_job("gloo_straggler")  # rank 1 sleeps 40 ms a step: rank 0 waits in gloo:all_reduce
    assert j.collectives_matched >= 6
    assert all(r.comm_us > 0.3 * r.step_us for r in j.ranks)
    (d,) = j.diagnostics
    assert d.evidence["rank"] == 1 and d.evidence["side"] == "cpu"
    assert d.evidence["others_wait_share"] > 0.5
    # the balanced twin: rank 1 is last too, but rank 0 waits 21% of its step, within what balanced
    # jobs show from phase jitter
    b = corpus_job("gloo_balanced")
    assert b.collectives_matched >= 6 and b.straggler is None and not b.diagnostics
    # one rank's own analysis counts them as communication too
    from profd.server.engine import loader, model
    from profd.server.engine.analyses import analyze

    doc, _, _ = loader.load(os.path.join(CORPUS, "traces", "gloo_balanced_rank0.json.gz"))
    m = model.build(doc)
    a = analyze(m)
    assert len(a.cpu_comm) >= 9 and not m.gpu
    assert a.cpu_comm_us > 0.3 * sum(s.dur for s in m.steps)


def _delayed(tmp_path, name: str, which, by_us: float = 300.0) -> str:
    """A recorded real trace with the GPU events whose per-kernel ordinal satisfies ``which`` started
    ``by_us`` later (their launches unchanged)."""
    with gzip.open(os.path.join(REC, name + ".json.gz")) as f:
        d = json.load(f)
    seen: dict = {}
    for e in sorted((e for e in d["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                    key=lambda e: e["ts"]):
        k = seen[e["name"]] = seen.get(e["name"], -1) + 1
        if which(k):
            e["ts"] += by_us
    p = tmp_path / f"{name}_delayed.json"
    p.write_text(json.dumps(d))
    return str(p)


def test_contention_is_not_the_first_launch_of_each_kernel(tmp_path):
    """Synthetic from real: on the H200 no recording showed first-launch delays (a cold-start run
    without warm-up loaded the modules inside the launch calls), so the real trace of one
    process alone gets each kernel's first launch started 300 µs late on an idle lane, as lazy
    module loading does on other stacks: silent. The same delay on later launches is what another
    process holding the GPU looks like: fires."""
    assert not diags(analyze_file(_delayed(tmp_path, "contention_alone", lambda k: k == 0)), "gpu-contention")
    assert diags(analyze_file(_delayed(tmp_path, "contention_alone", lambda k: k in (5, 9))), "gpu-contention")
