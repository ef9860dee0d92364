"""Rules on the traces recorded for them on an H200 (examples/recorded/, made as its README says):
each planted problem fires at the user's line, and its fixed twin stays silent."""
import os


from profd.server.engine import Options, analyze_file
from profd.server.engine.impact import severity_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REC = os.path.join(ROOT, "examples", "recorded")
SRC = os.path.join(REC, "src")
WORKLOADS = os.path.join(ROOT, "server", "workloads")
_cache: dict = {}


def rep(name):
    if name not in _cache:
        _cache[name] = analyze_file(os.path.join(REC, name + ".json.gz"), Options(workspace=[SRC, WORKLOADS]))
    return _cache[name]


def diags(name, code):
    return [d for d in rep(name).diagnostics if d.code == code]


def lines(name, code, file):
    return sorted(d.location.line for d in diags(name, code)
                  if d.location.path and d.location.path.endswith(os.sep + file))


# ---- conv-bias-before-bn -------------------------------------------------------------------

def test_conv_bias_before_bn_fires():
    ds = diags("conv_bias_bn", "conv-bias-before-bn")
    assert sum(d.evidence["pairs"] for d in ds) == 6  # 2 convs x 3 active steps
    assert {d.evidence["conv_op"] for d in ds} <= {"aten::conv2d", "aten::convolution", "aten::_convolution",
                                                   "aten::cudnn_convolution"}


def test_conv_without_bias_is_silent():
    assert not diags("conv_nobias_bn", "conv-bias-before-bn")


def test_conv_bias_before_bn_line():
    assert lines("conv_bias_bn", "conv-bias-before-bn", "conv_bn.py") == [29]


# ---- dataloader-bound ----------------------------------------------------------------------

def test_dataloader_bound_fires():
    (d,) = diags("dataloader_w0", "dataloader-bound")
    assert d.evidence["step_share"] > 0.8 and d.evidence["gpu_idle_share"] > 0.9
    assert "SingleProcess" in d.evidence["iterator"]
    assert d.location.path.endswith("dataloader.py")


def test_dataloader_with_workers_is_silent():
    assert not diags("dataloader_w8_pin", "dataloader-bound")
    assert not diags("dataloader_w8_pin", "pageable-memcpy")
    assert lines("dataloader_w0", "pageable-memcpy", "dataloader.py") == [41, 42]


def test_dataloader_bound_line():
    assert lines("dataloader_w0", "dataloader-bound", "dataloader.py") == [40]


# ---- misaligned-dims -----------------------------------------------------------------------

def test_misaligned_dims_fire_on_each_gemm_line():
    assert lines("misaligned_odd", "misaligned-dims", "misaligned.py") == [20, 21, 22]
    bad = {x for d in diags("misaligned_odd", "misaligned-dims") for x in d.evidence["misaligned"]}
    assert bad == {4095, 50257}


def test_aligned_dims_are_silent():
    assert not diags("misaligned_aligned", "misaligned-dims")
    # the measured cost of the odd sizes: the same three GEMMs take >5x the GPU time
    assert rep("misaligned_odd").summary.cuda_total_us > 5 * rep("misaligned_aligned").summary.cuda_total_us


# ---- host-sync -----------------------------------------------------------------------------

def test_host_sync_variants_each_on_their_line():
    # 28: if s > 0 / 30: torch.nonzero / 31: .cpu() / 32: .tolist() / 33: print(t) / 34: .item()
    assert lines("host_sync_all", "host-sync", "host_sync.py") == [28, 30, 31, 32, 33, 34]
    by_line = {d.location.line: d for d in diags("host_sync_all", "host-sync")}
    assert "aten::is_nonzero" in by_line[28].evidence["ops"]
    assert "aten::nonzero" in by_line[30].evidence["ops"]
    assert "aten::item" in by_line[34].evidence["ops"]
    assert all(d.evidence["per_step"] >= 1 for d in by_line.values())
    # severity follows what a fix gives back (engine/impact.py): the blocked time, in a CPU-bound step
    for d in by_line.values():
        assert 0 < d.impact_us_per_step <= d.evidence["blocked_us_per_step"] + 1e-6
        assert d.severity == severity_for(d.impact_pct / 100)


def test_no_host_sync_in_the_clean_loop():
    assert not diags("host_sync_none", "host-sync")


# ---- sync-wait -----------------------------------------------------------------------------

def test_sync_wait_draining_a_busy_queue():
    (d,) = diags("sync_wait_busy", "sync-wait")
    assert d.location.line == 23 and d.evidence["kind"] == "draining"
    assert d.evidence["blocked_us_per_step"] > 1000


def test_sync_wait_on_an_idle_gpu():
    (d,) = diags("sync_wait_idle", "sync-wait")
    assert d.location.line == 30 and d.evidence["kind"] == "idle"
    assert d.evidence["count"] == 120  # 40 syncs x 3 active steps


def test_no_sync_wait_without_the_sync():
    assert not diags("sync_wait_none", "sync-wait")


# ---- gpu-contention ------------------------------------------------------------------------

def test_gpu_contention_fires_under_another_process():
    (d,) = diags("contention_contended", "gpu-contention")
    assert d.evidence["delay_p90_us"] > 1000
    assert d.location.line == 22  # the profiled `y = x @ w + b`, not the warm-up loop's (18)
    # the kernels themselves stay steady: no jitter
    assert not diags("contention_contended", "kernel-jitter")


def test_no_contention_alone():
    assert not diags("contention_alone", "gpu-contention")


# ---- kernel-jitter -------------------------------------------------------------------------

def test_kernel_jitter_fires_on_shared_sms():
    # real jitter: a 2048 bf16 GEMM sharing SMs with a side stream, p50 23.8 µs, p90 43.1 µs
    (d,) = diags("jitter_side", "kernel-jitter")
    assert d.evidence["p90_us"] > 1.5 * d.evidence["p50_us"]


def test_no_jitter_on_steady_kernels():
    assert not diags("jitter_alone", "kernel-jitter")
    # 4096 GEMM with the side stream: only a rare outlier (max 263 µs vs p50 169 µs), p90 steady
    assert not diags("jitter_side_n4096", "kernel-jitter")


# ---- the runner's own traces from the H200 sweep ----------------------------------------------

def test_sweep_small_is_overhead_bound():
    r = rep("matmul-bias_n512_bfloat16_eager")
    assert r.summary.verdict == "overhead-bound"
    assert {"overhead-bound", "small-problem"} <= {d.code for d in r.diagnostics}


def test_sweep_large_fp32_uses_no_tensor_cores():
    r = rep("matmul-bias_n8192_float32_eager")
    assert "fp32-matmul" in {d.code for d in r.diagnostics}
    assert r.summary.verdict != "overhead-bound" and r.summary.gpu_busy_pct > 70


def test_sweep_compile_tax_on_a_single_op():
    assert diags("matmul-bias_n64_bfloat16_compiled", "compile-overhead")


# ---- 2-rank NCCL DDP ------------------------------------------------------------------------

def _job(prefix):
    from profd.server.engine.job import analyze_job

    _, jobs = analyze_job([os.path.join(REC, f"{prefix}_rank{r}.json.gz") for r in (0, 1)],
                          Options(workspace=[SRC]))
    (job,) = jobs
    return job


def test_ddp_straggler_is_rank_1():
    job = _job("ddp_straggler")
    assert job.straggler == 1
    assert [d.code for d in job.diagnostics] == ["rank-straggler"]
    wait = {r.rank: r.wait_us for r in job.ranks}
    assert wait[0] > 20_000 and wait[1] < 1_000  # rank 0 waits ~28.5 ms a step in collectives


def test_ddp_overlap_is_good_and_has_no_straggler():
    job = _job("ddp_overlap_b8192")
    assert job.straggler is None and not job.diagnostics
    assert all(r.overlap_pct > 80 for r in job.ranks)  # measured 90.7% / 95.0%


def test_sync_wait_on_the_waiting_rank_blames_the_collective():
    # the DDP straggler pair: rank 1 has twice the batch; rank 0's reducer sync waits in all-reduce
    waiting = [d for d in diags("ddp_straggler_rank0", "sync-wait") if d.evidence["kind"] == "collective"]
    assert waiting and waiting[0].evidence["collective_during"] >= 0.5
    assert "another rank" in waiting[0].message
    assert not [d for d in diags("ddp_straggler_rank1", "sync-wait") if d.evidence["kind"] == "collective"]
