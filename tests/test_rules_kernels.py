"""The kernels rules (``server/engine/rules/kernels.py``: ``kernel-class``, ``kernel-jitter``,
``fp32-matmul``, ``misaligned-dims``, ``launch-storm``) on real traces: each fires where the trace
has the problem and stays silent where it does not. Traces: examples/ (MANIFEST.md says what a
reader should conclude from each), examples/recorded/ and examples/corpus/ (recorded on an H200 for
the rules; their READMEs say how); ``rule_traces`` reads them."""

import os

from conftest import ROOT, codes, report_of
from profd.server.engine import analyze_file
from rule_traces import (
    corpus,
    corpus_of,
    line_of,
    of,
    one,
    recorded,
    recorded_lines,
    recorded_of,
    recorded_tools,
    renamed_kernels,
)

TRTLLM_FP4 = (
    "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_bA32_bB32_bC32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_"
    "16dp256b_rM_TN_transOut_schedS_biasM_relu2_bN_tma_ldgstsSf_rgTma_clmp_dynB_sm100f"
)

FFMA = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"


# ---- the seed's traces (examples/, MANIFEST.md) --------------------------------------------------


def test_kernel_class_uses_launch_patterns_on_hopper():
    r = report_of("seed_n4096_bf16")
    classes = r.summary.kernel_classes
    assert max(classes, key=classes.get) == "gemm"
    assert classes.get("elementwise", 0) > 0
    (d,) = of(r, "kernel-class")
    assert d.severity == "hint"


def test_kernel_jitter_silent_on_steady_h200_gemm():
    # MANIFEST: 20 samples, 170.8-177.9 µs: a narrow distribution deserves no warning
    assert "kernel-jitter" not in codes(report_of("seed_n4096_bf16_active20"))


# ---- false positives and misses (issue 15), on real traces ---------------------------------------


def test_fp32_matmul_reads_operand_types_not_the_accumulator(tmp_path):
    """Synthetic from real: no Blackwell trace exists here, so the real 4096^2 bf16 GEMM trace gets its
    GEMM kernel renamed to a real block-scaled FP8xFP4 kernel name (``..._Fp32_`` = accumulator):
    silent; renamed to a real fp32 FFMA kernel name: fires."""
    fp4 = analyze_file(renamed_kernels(tmp_path, "seed_n4096_bf16", "nvjet_", TRTLLM_FP4))
    assert "fp32-matmul" not in codes(fp4)
    assert fp4.summary.kernel_classes["gemm"] > 0.5 * sum(fp4.summary.kernel_classes.values())
    ffma = analyze_file(renamed_kernels(tmp_path, "seed_n4096_bf16", "nvjet_", FFMA))
    (d,) = of(ffma, "fp32-matmul")
    assert d.evidence["share"] > 0.5


def test_fp32_matmul_on_real_ffma_gemms_and_not_on_tensor_cores():
    assert of(recorded("matmul-bias_n8192_float32_eager"), "fp32-matmul")
    assert not of(recorded("misaligned_odd"), "fp32-matmul")  # bf16 on cutlass tensorop fallbacks


def test_misaligned_dims_as_the_kernel_sees_them():
    # decode GEMMs [1, 1, 768] x [768, N]: M = 1 is a matrix-vector product, not a misaligned GEMM
    assert not of(corpus("gpt2_generate"), "misaligned-dims")
    assert not of(corpus("serve_decode_batch"), "misaligned-dims")
    # a linear on [16, 559, 1024]: its leading dims fold to M = 8944, a multiple of 8 (nvjet kernels)
    assert not of(corpus("linear_m8944_aligned"), "misaligned-dims")
    assert not of(corpus("timm_vit_small"), "misaligned-dims")  # M = 32 * 197 = 6304
    # the twin with K 1023 and N 4095: a cutlass align1 fallback
    (d,) = of(corpus("linear_m8944_odd"), "misaligned-dims")
    assert (d.evidence["m"], d.evidence["k"], d.evidence["n"]) == (8944, 1023, 4095)
    assert d.evidence["misaligned"] == [1023, 4095] and "align1" in d.evidence["fallback"]
    # the kernel named is the fallback itself, not the first GEMM-class kernel of the op (a 10-wide
    # head whose op also runs cuBLAS's splitKreduce)
    from profd.server.engine import kernels as K

    for name in ("linear_m8944_odd", "cold_start"):
        for d in of(corpus(name), "misaligned-dims"):
            assert K.gemm_fallback(d.evidence["kernel"], 2), d.evidence["kernel"]


def test_fp32_matmul_silent_on_fp8_and_tf32_tensor_cores():
    assert of(corpus("gemm_fp32"), "fp32-matmul")
    assert not of(corpus("gemm_tf32"), "fp32-matmul")
    assert not of(corpus("gemm_fp8"), "fp32-matmul")  # torch._scaled_mm on float8_e4m3fn


def test_fp32_matmul_in_a_lambda_lands_on_the_lambda():
    # gemm = lambda: x @ w (line 25), called at line 29 of main(): the lambda's frame names line 25
    (d,) = of(corpus("gemm_fp32"), "fp32-matmul")
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
    assert not of(analyze_file(path), "kernel-jitter")
    # ResNet-18's batch norm over layers of different sizes (record_shapes): no jitter either
    assert not of(corpus("resnet18_train"), "kernel-jitter")
    # a GEMM sharing its SMs with a side stream, the same problem every time: jitter
    assert of(recorded("jitter_side"), "kernel-jitter")


def test_launch_storm_counts_launch_calls_not_graph_replays():
    assert not of(corpus("graphs_replay"), "launch-storm")  # one cudaGraphLaunch a step
    assert of(report_of("tinygpt_naive"), "launch-storm")


# ---- examples/recorded/: a planted problem and its fixed twin ------------------------------------


def test_misaligned_dims_fire_on_each_gemm_line():
    assert recorded_lines("misaligned_odd", "misaligned-dims", "misaligned.py") == [20, 21, 22]
    bad = {x for d in recorded_of("misaligned_odd", "misaligned-dims") for x in d.evidence["misaligned"]}
    assert bad == {4095, 50257}


def test_aligned_dims_are_silent():
    assert not recorded_of("misaligned_aligned", "misaligned-dims")
    # the measured cost of the odd sizes: the same three GEMMs take >5x the GPU time
    assert (
        recorded_tools("misaligned_odd").summary.cuda_total_us
        > 5 * recorded_tools("misaligned_aligned").summary.cuda_total_us
    )


def test_kernel_jitter_fires_on_shared_sms():
    # real jitter: a 2048 bf16 GEMM sharing SMs with a side stream, p50 23.8 µs, p90 43.1 µs
    (d,) = recorded_of("jitter_side", "kernel-jitter")
    assert d.evidence["p90_us"] > 1.5 * d.evidence["p50_us"]


def test_no_jitter_on_steady_kernels():
    assert not recorded_of("jitter_alone", "kernel-jitter")
    # 4096 GEMM with the side stream: only a rare outlier (max 263 µs vs p50 169 µs), p90 steady
    assert not recorded_of("jitter_side_n4096", "kernel-jitter")


def test_sweep_large_fp32_uses_no_tensor_cores():
    r = recorded_tools("matmul-bias_n8192_float32_eager")
    assert "fp32-matmul" in {d.code for d in r.diagnostics}
    assert r.summary.verdict != "overhead-bound" and r.summary.gpu_busy_pct > 70


# ---- the TinyGPT training traces (examples/tinygpt_*) --------------------------------------------


def test_launch_storm_lands_on_the_loop_in_token_stats():
    ds = one(report_of("tinygpt_naive"), "launch-storm")
    loop = [d for d in ds if d.location.function == "token_stats"]
    assert len(loop) == 1
    assert "(row > 100).sum()" in line_of(loop[0].location.path, loop[0].location.line)
    assert loop[0].evidence["launches_per_step"] >= 16  # one per row, batch of 16
    # the per-parameter optimizer loop is a storm too, on the opt.step() line
    assert any("opt.step()" in line_of(d.location.path, d.location.line) for d in ds)


def test_fp32_matmul_on_ffma_gemms_of_a_hopper_gpu():
    (d,) = one(report_of("tinygpt_naive"), "fp32-matmul")
    assert d.evidence["share"] > 0.5
    assert d.evidence["compute_capability"] == "9.0"
    assert any("f32f32" in k or "sgemm" in k for k in d.evidence["kernels"])


# ---- workloads nobody tuned the rules for (examples/corpus/record2.sh) ---------------------------


def test_launch_storm_counts_a_user_loop_calling_a_module_not_one_op_launching_many():
    # for t in range(32): h, c = self.cell(x[:, t], (h, c)): each run of the statement calls
    # nn.LSTMCell (library frames), which launches two tiny GEMMs and the fused cell kernel
    (d,) = corpus_of("lstm_cell_loop", "launch-storm")
    assert (d.location.path.endswith("lstm_lm.py"), d.location.line) == (True, 34)
    assert d.evidence["launches_per_step"] >= 3 * 32
    # nn.LSTM: one aten::lstm call whose cuDNN recurrence launches 128 elementwise kernels a step
    # from C++ while the GPU stays busy: no Python loop, and no storm
    assert not corpus_of("lstm_cudnn_fp32", "launch-storm")
    assert "compute-bound" in {d.code for d in corpus("lstm_cudnn_fp32").diagnostics}
