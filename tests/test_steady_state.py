"""The verdict judges the steady state: the window less its one-time set-up (issue 33). On the
shared wild traces (examples/wild: strangers' recordings) and the corpus's wild recordings."""

import os

from conftest import ROOT
from profd.server.engine import Options, analyze_file
from profd.server.engine.analyses import analyze, verdict
from profd.server.engine.loader import load
from profd.server.engine.model import build

WILD = os.path.join(ROOT, "examples", "wild")
CORPUS_WILD = os.path.join(ROOT, "examples", "corpus", "traces", "wild")


def _report(path):
    return analyze_file(path, Options(workspace=[os.path.dirname(path)]))


def _codes(rep):
    return {d.code for d in rep.diagnostics}


def test_a_cold_single_call_has_no_steady_state_to_judge():
    # one forward each, cold: 62% (cuDNN set-up and lazy loading of a first conv1d) and 84%
    # (context, stream, lazy loading) of the window is set-up, and no step is free of it; the
    # rest is cold too (a 292 ms stall with nothing recorded before a TorchScript function's
    # first call; a CUDA-only recording's untraced host time): both were overhead-bound
    for name in ("partt__fwd_bs512.json.gz", "shiftvit__trace.json.gz"):
        rep = _report(os.path.join(WILD, name))
        assert rep.summary.verdict == "set-up", name
        assert "one-time-setup" in _codes(rep) and "overhead-bound" not in _codes(rep), name
        assert any("no steady state to judge" in n for n in rep.summary.notes), name


def test_the_same_model_warm_is_judged():
    # partt at batch 2 has no set-up in its window: 5 ms of kernels in 32 ms, overhead-bound
    rep = _report(os.path.join(WILD, "partt__fwd_bs2.json.gz"))
    assert rep.summary.verdict == "overhead-bound" and "one-time-setup" not in _codes(rep)


def test_a_cold_call_whose_gpu_is_busy_outside_set_up_is_compute_bound():
    # switchtf batch 8: 20% set-up, the GPU busy 96% of the rest: it bounds the call
    rep = _report(os.path.join(WILD, "switchtf__trace_8batch_1024.json.gz"))
    assert rep.summary.verdict == "compute-bound" and "one-time-setup" in _codes(rep)


def test_steady_steps_are_judged_after_a_cold_first_one():
    # cold_conv1d: the first of 5 iterations holds the set-up, the other 4 keep the GPU ~99% busy
    rep = _report(os.path.join(CORPUS_WILD, "cold_conv1d.json.gz"))
    assert rep.summary.verdict == "compute-bound" and "one-time-setup" in _codes(rep)


def test_the_steady_share_is_measured_outside_set_up_not_scaled():
    # the autotuner runs its benchmark kernels during set-up: the whole window's busy share
    # scaled up to the 0.1% that is not set-up read 100% (compute-bound); measured there, 29%
    doc, _, _ = load(os.path.join(CORPUS_WILD, "compile_autotune.json.gz"))
    m = build(doc)
    a = analyze(m)
    assert a.work_us - a.steady_work_us > 0  # GPU work inside the set-up stretch
    assert a.steady_pct(a.steady_busy_us) < 80
    assert verdict(m, a) == "set-up"


def test_idle_gpu_during_set_up_is_no_idle_gap():
    # compile_cold: the GPU idles 1.6 s while Inductor lowers the graph (an error-level gpu-idle-gap
    # before), compile_autotune while it precompiles its candidates: set-up, which one-time-setup says
    for name in ("compile_cold.json.gz", "compile_autotune.json.gz"):
        rep = _report(os.path.join(CORPUS_WILD, name))
        assert "one-time-setup" in _codes(rep) and "gpu-idle-gap" not in _codes(rep), name


def test_an_idle_gap_in_the_steady_state_is_still_one():
    # isnan_check (warm): `if torch.isnan(x).any():` syncs every iteration and the GPU idles
    # while the CPU catches up; no set-up in its window
    rep = _report(os.path.join(CORPUS_WILD, "isnan_check.json.gz"))
    assert "one-time-setup" not in _codes(rep) and "gpu-idle-gap" in _codes(rep)


def test_a_first_step_wider_by_its_set_up_is_one_finding():
    # cold_conv1d: the first of 5 iterations is 328 ms against 3.5 ms, 253 ms of it the first
    # conv1d's cuDNN set-up and lazy loading: one-time-setup names it, cold-start-step said it again
    rep = _report(os.path.join(CORPUS_WILD, "cold_conv1d.json.gz"))
    assert "one-time-setup" in _codes(rep) and "cold-start-step" not in _codes(rep)


def test_a_first_step_wider_without_set_up_to_name_is_still_cold_start():
    # mlp_eager: the first ProfilerStep is wider, with no set-up long enough to be one-time-setup's
    rep = _report(os.path.join(ROOT, "examples", "mlp_eager.1796061140317126347.pt.trace.json.gz"))
    assert "cold-start-step" in _codes(rep) and "one-time-setup" not in _codes(rep)


def test_the_bound_finding_quotes_the_share_the_verdict_judged():
    # switchtf batch 8: 80.7% of the whole window, 95.9% outside its set-up: compute-bound on the latter
    rep = _report(os.path.join(WILD, "switchtf__trace_8batch_1024.json.gz"))
    (d,) = [d for d in rep.diagnostics if d.code == "compute-bound"]
    assert "outside the one-time set-up" in d.message and d.evidence["steady_busy_pct"] > 90
