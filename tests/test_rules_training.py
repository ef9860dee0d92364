"""The training rules (``server/engine/rules/training.py``: ``pageable-memcpy``,
``optimizer-foreach-off``, ``zero-grad-not-none``, ``conv-bias-before-bn``, ``dataloader-bound``) on
real traces: each fires where the trace has the problem and stays silent where it does not. Traces:
examples/ (MANIFEST.md says what a reader should conclude from each), examples/recorded/ and
examples/corpus/ (recorded on an H200 for the rules; their READMEs say how); ``rule_traces`` reads
them."""

import pytest

from conftest import SRC, codes, report_of
from rule_traces import corpus, corpus_of, line_of, of, one, recorded, recorded_lines, recorded_of

NAIVE_ONLY = {
    "pageable-memcpy",
    "host-sync",
    "fp32-matmul",
    "launch-storm",
    "optimizer-foreach-off",
    "zero-grad-not-none",
}


# ---- false positives and misses (issue 15), on real traces ---------------------------------------


def test_foreach_off_needs_per_parameter_kernels_on_the_gpu():
    # AdamW(foreach=False) on CUDA: one kernel per parameter per op
    (d,) = of(report_of("tinygpt_naive"), "optimizer-foreach-off")
    assert d.evidence["single_tensor_frame"] == "_single_tensor_adam"
    assert not of(report_of("tinygpt_tuned"), "optimizer-foreach-off")  # fused AdamW


def test_pageable_copies_of_host_batches_fire_and_read_backs_do_not():
    # the user's own .to(dev) of a pageable batch: fires (tinygpt 32 KiB per copy, dataloader 256 KiB)
    assert of(report_of("tinygpt_naive"), "pageable-memcpy")
    assert of(recorded("dataloader_w0"), "pageable-memcpy")
    # .cpu()/print(t) of a few bytes into pageable memory: a read-back, host-sync's finding
    r = recorded("host_sync_all")
    assert "host-sync" in codes(r)
    assert not of(r, "pageable-memcpy")


def test_optimizer_foreach_off_not_on_cpu_parameters():
    assert not of(corpus("cpu_train"), "optimizer-foreach-off")  # CPU-only: torch's own choice
    (d,) = of(corpus("optim_single"), "optimizer-foreach-off")  # foreach=False on CUDA
    assert not of(corpus("optim_foreach"), "optimizer-foreach-off")


def test_pageable_memcpy_not_for_a_librarys_few_bytes():
    # generate() copies a few bytes from pageable memory 6 times: nothing a user could pin
    assert not of(corpus("gpt2_generate"), "pageable-memcpy")
    (d,) = of(corpus("copies_pageable_nb"), "pageable-memcpy")  # 16 MB non_blocking from pageable
    assert d.evidence["bytes_per_step"] >= 16e6
    assert not of(corpus("copies_pinned_nb"), "pageable-memcpy")


# ---- examples/recorded/: a planted problem and its fixed twin ------------------------------------


def test_conv_bias_before_bn_fires():
    ds = recorded_of("conv_bias_bn", "conv-bias-before-bn")
    assert sum(d.evidence["pairs"] for d in ds) == 6  # 2 convs x 3 active steps
    assert {d.evidence["conv_op"] for d in ds} <= {
        "aten::conv2d",
        "aten::convolution",
        "aten::_convolution",
        "aten::cudnn_convolution",
    }


def test_conv_without_bias_is_silent():
    assert not recorded_of("conv_nobias_bn", "conv-bias-before-bn")


def test_conv_bias_before_bn_line():
    assert recorded_lines("conv_bias_bn", "conv-bias-before-bn", "conv_bn.py") == [29]


def test_dataloader_bound_fires():
    (d,) = recorded_of("dataloader_w0", "dataloader-bound")
    assert d.evidence["step_share"] > 0.8 and d.evidence["gpu_idle_share"] > 0.9
    assert "SingleProcess" in d.evidence["iterator"]
    assert d.location.path.endswith("dataloader.py")


def test_dataloader_with_workers_is_silent():
    assert not recorded_of("dataloader_w8_pin", "dataloader-bound")
    assert not recorded_of("dataloader_w8_pin", "pageable-memcpy")
    assert recorded_lines("dataloader_w0", "pageable-memcpy", "dataloader.py") == [41, 42]


def test_dataloader_bound_line():
    assert recorded_lines("dataloader_w0", "dataloader-bound", "dataloader.py") == [40]


# ---- the TinyGPT training traces (examples/tinygpt_*) --------------------------------------------


def test_naive_has_the_planted_problems_and_tuned_has_none():
    assert NAIVE_ONLY <= codes(report_of("tinygpt_naive"))
    assert not NAIVE_ONLY & codes(report_of("tinygpt_tuned"))


def test_pageable_copies_land_on_the_to_device_line():
    # x = xb.to(dev) and y = yb.to(dev): the same call on tensors of one shape, which the trace cannot
    # tell apart, so one finding (the same with and without the source) on the first of the lines
    (d,) = one(report_of("tinygpt_naive"), "pageable-memcpy")
    assert line_of(d.location.path, d.location.line).strip() == "x = xb.to(dev, non_blocking=not naive)"
    assert d.location.precision == "statement" and d.evidence["copies_per_step"] == 2


def test_optimizer_and_zero_grad_rules_point_at_their_calls():
    (opt,) = one(report_of("tinygpt_naive"), "optimizer-foreach-off")
    assert "opt.step()" in line_of(opt.location.path, opt.location.line)
    (zg,) = one(report_of("tinygpt_naive"), "zero-grad-not-none")
    assert "zero_grad" in line_of(zg.location.path, zg.location.line)
    assert zg.evidence["fill_ops_per_step"] > 10


def test_backward_gpu_time_is_charged_to_forward_lines():
    hot = {(h.trace_path, h.line): h for h in report_of("tinygpt_naive").hot_lines}
    mlp = hot[("tinygpt.py", 34)]  # return self.out(F.gelu(self.fc(x)))
    assert mlp.gpu_backward_us > 0 and mlp.gpu_forward_us > 0
    assert mlp.gpu_us == pytest.approx(mlp.gpu_forward_us + mlp.gpu_backward_us, rel=1e-6)
    # backward GEMMs (dgrad + wgrad) cost more than the forward one
    assert mlp.gpu_backward_us > mlp.gpu_forward_us
    assert any(k.kernel_class == "gemm" for k in mlp.top_kernels)


def test_statement_precision_needs_the_source():
    r = report_of("tinygpt_naive", workspace=())
    (d,) = one(r, "host-sync")
    assert d.location.precision == "function"
    assert d.location.path == "train_tinygpt.py"  # the trace's own path is kept
    assert d.location.line == 71  # main was already running: the line it was at


def test_module_calls_in_loops_and_attribute_lookups_resolve_to_statements():
    hot = [h for h in report_of("tinygpt_naive").hot_lines if h.trace_path == "tinygpt.py" and h.gpu_us > 0]
    assert hot and all(h.precision == "statement" for h in hot)
    lines = {h.line for h in hot}
    # `x = blk(x)` runs four blocks in a loop; `logits = self.head(self.ln(x))` after it
    with open(f"{SRC}/tinygpt.py") as f:
        src = f.read().splitlines()
    assert any("self.head(self.ln(x))" in src[l - 1] for l in lines)
    assert any("self.out(F.gelu(self.fc(x)))" in src[l - 1] for l in lines)


# ---- inference-without-no-grad ---------------------------------------------------------------


def test_inference_without_no_grad_on_an_eval_loop_that_forgets_it():
    """eval_loop.py --variant grad: the encoder's forward under grad mode, no backward in the window."""
    (d,) = corpus_of("eval_grad", "inference-without-no-grad")
    assert d.location.path.endswith("eval_loop.py")
    assert (d.location.line, d.location.precision) == (27, "statement")  # logits = head(model(xb)...)
    assert d.evidence["recorded_ops_per_step"] >= 100  # every op of the 4-layer encoder records a node
    assert d.evidence["module"].startswith("TransformerEncoderLayer")
    assert "torch.inference_mode()" in d.fix


@pytest.mark.parametrize("name", ["eval_nograd", "gpt2_infer_modules"])
def test_inference_without_no_grad_silent_under_no_grad(name):
    """The same loop under torch.no_grad(), and HF GPT-2 inference under no_grad (its autocast casts
    record sequence numbers outside any module)."""
    assert not corpus_of(name, "inference-without-no-grad")


@pytest.mark.parametrize("name", ["tinygpt_naive", "seed_n64_bf16", "sync_wait_busy"])
def test_inference_without_no_grad_silent_when_a_backward_runs_or_no_module_is_called(name):
    """A training step (its backward uses the graph), and benchmarks of plain tensors (grad mode on,
    but their ops run in no module: nothing requires grad)."""
    assert "inference-without-no-grad" not in codes(report_of(name))
