"""Steps without ProfilerStep markers and one-time set-up (issue 33 A), on real traces of the
corpus's wild part: recorded on the H200 the way people profile (examples/corpus/record_wild.sh)."""

import os

from conftest import ROOT
from profd.server.engine import Options, analyze_file

WILD = os.path.join(ROOT, "examples", "corpus", "traces", "wild")
SRC = os.path.join(ROOT, "examples", "corpus", "src", "wild")


def _report(name):
    return analyze_file(os.path.join(WILD, name), Options(workspace=[SRC]))


def _codes(rep, code):
    return [d for d in rep.diagnostics if d.code == code]


def test_a_whole_epoch_without_markers_is_cut_at_its_loop_and_the_step_rules_fire():
    rep = _report("epoch_train.json.gz")
    s = rep.summary
    assert len(s.steps) >= 40 and "iterations of a loop" in s.steps_from
    # running += loss.item(): silent while the 40 batches were no steps at all
    assert any(d.location.line == 28 for d in _codes(rep, "host-sync"))


def test_a_single_forward_is_one_step_and_says_so():
    rep = _report("single_forward.json.gz")
    assert len(rep.summary.steps) == 1 and "whole window analysed as one step" in rep.summary.steps_from
    assert not _codes(rep, "one-time-setup")  # warmed up before the profiler


def test_marked_steps_say_so():
    rep = _report("tb_handler.vm_626.1796158558081947718.pt.trace.json.gz")
    assert rep.summary.steps_from == "ProfilerStep markers" and len(rep.summary.steps) == 3


def test_compiling_inside_the_window_is_set_up_and_out_of_the_verdict():
    rep = _report("compile_cold.json.gz")
    found = _codes(rep, "one-time-setup")
    assert found and "torch.compile compiling" in found[0].evidence["kinds"]
    assert rep.summary.setup_pct > 50
    assert rep.summary.verdict != "overhead-bound"  # was: the compiler's host time read as dispatch


def test_a_cold_first_conv_is_set_up_a_warm_loop_is_not():
    cold = _report("cold_conv1d.json.gz")
    assert _codes(cold, "one-time-setup") and cold.summary.setup_pct > 10
    warm = _report("isnan_check.json.gz")
    assert not _codes(warm, "one-time-setup") and warm.summary.setup_pct < 10
