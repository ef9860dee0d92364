"""The gaps rules (``server/engine/rules/gaps.py``: ``gpu-idle-gap``, ``gpu-contention``) on real
traces: each fires where the trace has the problem and stays silent where it does not. Traces:
examples/ (MANIFEST.md says what a reader should conclude from each), examples/recorded/ and
examples/corpus/ (recorded on an H200 for the rules; their READMEs say how); ``rule_traces`` reads
them."""

import os

from conftest import codes, report_of
from profd.server.engine import analyze_file
from rule_traces import REC, corpus, corpus_of, delayed_kernels, of, recorded, recorded_of


# ---- the seed's traces (examples/, MANIFEST.md) --------------------------------------------------


def test_gpu_idle_gap_silent_when_gpu_is_saturated():
    assert "gpu-idle-gap" not in codes(report_of("seed_n4096_bf16_active20"))
    gaps = of(report_of("tinygpt_naive"), "gpu-idle-gap")
    assert gaps and all(d.evidence["idle_share"] >= 0.05 for d in gaps)


def test_gpu_contention_silent_on_traces_where_the_queue_is_our_own():
    # the 20-step run has 0.4-0.8 ms launch delays, all behind our own busy lane
    for name in ("seed_n4096_bf16_active20", "tinygpt_naive", "tinygpt_tuned"):
        assert "gpu-contention" not in codes(report_of(name)), name


# ---- false positives and misses (issue 15), on real traces ---------------------------------------


def test_contention_counts_no_first_launch():
    from profd.server.engine import loader, model

    (d,) = of(recorded("contention_contended"), "gpu-contention")
    doc, _, _ = loader.load(os.path.join(REC, "contention_contended.json.gz"))
    m = model.build(doc)
    launched = [e.name for g, e in enumerate(m.gpu) if m.launcher[g] >= 0]
    # each kernel's first launch (lazy module loading) is left out of the judgement
    assert d.evidence["launches"] == len(launched) - len(set(launched))
    assert not of(recorded("contention_alone"), "gpu-contention")


def test_contention_is_not_the_first_launch_of_each_kernel(tmp_path):
    """Synthetic from real: on the H200 no recording showed first-launch delays (a cold-start run
    without warm-up loaded the modules inside the launch calls), so the real trace of one
    process alone gets each kernel's first launch started 300 µs late on an idle lane, as lazy
    module loading does on other stacks: silent. The same delay on later launches is what another
    process holding the GPU looks like: fires."""
    assert not of(
        analyze_file(delayed_kernels(tmp_path, "contention_alone", lambda k: k == 0)), "gpu-contention"
    )
    assert of(
        analyze_file(delayed_kernels(tmp_path, "contention_alone", lambda k: k in (5, 9))), "gpu-contention"
    )


# ---- examples/recorded/: a planted problem and its fixed twin ------------------------------------


def test_gpu_contention_fires_under_another_process():
    (d,) = recorded_of("contention_contended", "gpu-contention")
    assert d.evidence["delay_p90_us"] > 1000
    assert d.location.line == 22  # the profiled `y = x @ w + b`, not the warm-up loop's (18)
    # the kernels themselves stay steady: no jitter
    assert not recorded_of("contention_contended", "kernel-jitter")


def test_no_contention_alone():
    assert not recorded_of("contention_alone", "gpu-contention")


# ---- workloads nobody tuned the rules for (examples/corpus/record2.sh) ---------------------------


def test_gpu_idle_gap_names_host_work_on_an_overhead_bound_trace():
    # numpy builds each batch on the main thread (12 ms, a third of the step) with the GPU idle
    assert corpus("numpy_pipeline").summary.verdict == "overhead-bound"
    (d,) = corpus_of("numpy_pipeline", "gpu-idle-gap")
    assert d.location.line == 35  # x, y = next(data)
    assert "batches" in d.evidence["cpu_during"] and d.evidence["largest_gap_us"] > 10_000
    # overhead-bound traces whose idle time is dispatch (many small gaps between ops, torch's
    # own Python between them) keep it overhead-bound's
    for name in ("mobilenet_v3_b1", "lstm_cell_loop", "sgd_single_small", "bert_mlm_bf16"):
        assert corpus(name).summary.verdict == "overhead-bound", name
        assert not corpus_of(name, "gpu-idle-gap"), name
