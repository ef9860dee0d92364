"""Impact you can trust (issue 30): profd's predicted gain for a fix against the gain measured
without the profiler, on real H200 before/after pairs (bench/impact.toml). CI has no GPU: the
predictions are recomputed from the stored traces and compared with the stored measurements; a
pair held in bench/impact_baseline.json that leaves the 1.5x bound fails here."""

import importlib.util
import json
import os
import sys

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("profd_impact_bench", os.path.join(ROOT, "bench", "impact.py"))
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def results():
    return bench.score(bench.load())


def test_every_pair_names_corpus_recordings_and_findings_that_fire(results):
    assert len(results) >= 12
    for r in results:
        assert r.pair.measured_before_us > 0 and r.pair.measured_after_us > 0
        assert r.model_step_us > 0, r.pair.id
        assert r.findings, f"{r.pair.id}: none of {r.pair.codes} fires on {r.pair.before}"


def test_no_held_pair_leaves_the_bounds(results):
    with open(bench.BASELINE) as f:
        baseline = json.load(f)
    assert len(baseline["within"]) >= 10
    bad = bench.regressions(results, baseline)
    assert not bad, "\n".join(bad)


def test_the_ranking_is_right_where_two_fixes_were_measured(results):
    rk = bench.ranking(results)
    assert len(rk) >= 2
    assert all(ok for _, ok, _ in rk), rk


def test_the_bound_fails_a_prediction_off_by_more_than_half():
    p = bench.Pair("x", "a", "b", "f", ["c"], 10_000.0, 5_000.0)
    assert bench.Result(p, [], 5_000.0, 10_000.0).within
    assert bench.Result(p, [], 7_400.0, 10_000.0).within
    assert not bench.Result(p, [], 7_600.0, 10_000.0).within
    assert not bench.Result(p, [], 3_300.0, 10_000.0).within
    q = bench.Pair("y", "a", "b", "f", ["c"], 10_000.0, 9_800.0)  # 200 µs: under the noise floor
    assert bench.Result(q, [], 0.0, 10_000.0).within and bench.Result(q, [], 0.0, 10_000.0).noise
