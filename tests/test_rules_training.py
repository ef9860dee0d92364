"""Training-loop rules, statement-level lines and backward charged to the forward line, on the
real TinyGPT traces: the naive run has six planted problems, the tuned run none of them."""
import pytest

from conftest import SRC, codes, report_of

NAIVE_ONLY = {"pageable-memcpy", "host-sync", "fp32-matmul", "launch-storm", "optimizer-foreach-off",
              "zero-grad-not-none"}


def line_of(path, line):
    with open(path) as f:
        return f.read().splitlines()[line - 1]


def one(report, code):
    found = [d for d in report.diagnostics if d.code == code]
    assert found, f"{code} did not fire"
    return found


def test_naive_has_the_planted_problems_and_tuned_has_none():
    assert NAIVE_ONLY <= codes(report_of("tinygpt_naive"))
    assert not NAIVE_ONLY & codes(report_of("tinygpt_tuned"))


def test_host_sync_lands_on_the_loss_item_statement():
    (d,) = one(report_of("tinygpt_naive"), "host-sync")
    assert d.location.precision == "statement"
    assert "loss.item()" in line_of(d.location.path, d.location.line)
    assert d.evidence["per_step"] == pytest.approx(2)  # loss.item() and int(s.sum())
    assert d.evidence["sync_call"] == "cudaStreamSynchronize"


def test_pageable_copies_land_on_the_to_device_lines():
    ds = one(report_of("tinygpt_naive"), "pageable-memcpy")
    lines = {line_of(d.location.path, d.location.line).strip() for d in ds}
    assert lines == {"x = xb.to(dev, non_blocking=not naive)", "y = yb.to(dev, non_blocking=not naive)"}
    assert all(d.location.precision == "statement" for d in ds)


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
