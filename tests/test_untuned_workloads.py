"""Rules on workloads nobody tuned them for (examples/corpus/record2.sh, recorded on an H200):
each change fires on the trace with the problem and stays silent on its twin without it."""
import os

from conftest import ROOT
from profd.server.engine import Options, analyze_file

CORPUS = os.path.join(ROOT, "examples", "corpus")
_cache: dict = {}


def report(name):
    if name not in _cache:
        _cache[name] = analyze_file(os.path.join(CORPUS, "traces", name + ".json.gz"),
                                    Options(workspace=[os.path.join(CORPUS, "src")]))
    return _cache[name]


def diags(name, code):
    return [d for d in report(name).diagnostics if d.code == code]


def test_launch_storm_counts_a_user_loop_calling_a_module_not_one_op_launching_many():
    # for t in range(32): h, c = self.cell(x[:, t], (h, c)): each run of the statement calls
    # nn.LSTMCell (library frames), which launches two tiny GEMMs and the fused cell kernel
    (d,) = diags("lstm_cell_loop", "launch-storm")
    assert (d.location.path.endswith("lstm_lm.py"), d.location.line) == (True, 34)
    assert d.evidence["launches_per_step"] >= 3 * 32
    # nn.LSTM: one aten::lstm call whose cuDNN recurrence launches 128 elementwise kernels a step
    # from C++ while the GPU stays busy: no Python loop, and no storm
    assert not diags("lstm_cudnn_fp32", "launch-storm")
    assert "compute-bound" in {d.code for d in report("lstm_cudnn_fp32").diagnostics}


def test_gpu_idle_gap_names_host_work_on_an_overhead_bound_trace():
    # numpy builds each batch on the main thread (12 ms, a third of the step) with the GPU idle
    assert report("numpy_pipeline").summary.verdict == "overhead-bound"
    (d,) = diags("numpy_pipeline", "gpu-idle-gap")
    assert d.location.line == 35  # x, y = next(data)
    assert "batches" in d.evidence["cpu_during"] and d.evidence["largest_gap_us"] > 10_000
    # overhead-bound traces whose idle time is dispatch (many small gaps between ops, torch's
    # own Python between them) keep it overhead-bound's
    for name in ("mobilenet_v3_b1", "lstm_cell_loop", "sgd_single_small", "bert_mlm_bf16"):
        assert report(name).summary.verdict == "overhead-bound", name
        assert not diags(name, "gpu-idle-gap"), name


def test_small_problem_not_when_the_step_waits_on_host_work():
    # the step measures numpy, not the launch overhead of a small GEMM
    assert not diags("numpy_pipeline", "small-problem")
    # a batch-1 decode loop of tiny GEMMs is still the small-problem case
    assert diags("decode_kv_item", "small-problem")
