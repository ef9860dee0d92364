"""Impact on every finding (issue 15): what a fix gives back per step, findings sorted by it, and
severity from it (engine/impact.py), on the shipped real traces."""

import glob
import os

import pytest

from profd.protocol.catalog import RULES
from profd.server.engine import Options, loader
from profd.server.engine.analyses import analyze
from profd.server.engine.context import Context
from profd.server.engine.impact import given_back, order, severity_for
from profd.server.engine.model import build
from profd.server.engine.rules import load_all

from conftest import EXAMPLES, SRC, report_of

REC = os.path.join(EXAMPLES, "recorded")
WORKSPACE = (SRC, os.path.join(REC, "src"), os.path.join(os.path.dirname(EXAMPLES), "server", "workloads"))


def rep(name):
    return report_of(name, workspace=WORKSPACE)


def one(name, code):
    (d,) = [d for d in rep(name).diagnostics if d.code == code]
    return d


def _shipped():
    return sorted(
        os.path.basename(p).split(".")[0]
        for p in glob.glob(os.path.join(EXAMPLES, "*.json.gz")) + glob.glob(os.path.join(REC, "*.json.gz"))
    )


@pytest.mark.parametrize("name", _shipped())
def test_every_finding_with_a_time_cost_has_its_impact_and_the_severity_it_earns(name):
    ds = rep(name).diagnostics
    rules = load_all()
    for d in ds:
        if rules[d.code].saves is not None:
            assert d.impact_us_per_step is not None and d.impact_us_per_step >= 0, d
            assert 0 <= d.impact_pct <= 100.0
            assert d.severity == severity_for(d.impact_pct / 100), d
        elif rules[d.code].keep_severity:  # what restructuring the step gives back at most; catalog severity
            assert d.severity == RULES[d.code].severity
        else:
            assert d.impact_us_per_step is None and d.impact_pct is None
    assert ds == sorted(ds, key=order)  # biggest impact first, then the findings with no time cost
    with_impact = [d.impact_us_per_step for d in ds if d.impact_us_per_step is not None]
    assert with_impact == sorted(with_impact, reverse=True)


def test_the_biggest_problem_is_an_error_and_comes_first():
    """tinygpt_naive's single-tensor AdamW: 20 ms of CPU a step in a CPU-bound step."""
    ds = rep("tinygpt_naive").diagnostics
    assert (ds[0].code, ds[0].severity) == ("optimizer-foreach-off", "error")
    assert ds[0].impact_pct >= 10


def test_a_gpu_saving_counts_only_where_the_gpu_bounds_the_step():
    # fp32 GEMMs holding a GPU-bound step (8192² fp32): TF32 gives back most of it
    big = one("matmul-bias_n8192_float32_eager", "fp32-matmul")
    assert big.severity == "error" and big.impact_pct > 50
    # fp32 GEMMs in a step the DataLoader bounds: faster GEMMs give back nothing
    small = one("dataloader_w0", "fp32-matmul")
    assert small.severity == "information" and small.impact_us_per_step == 0


def test_a_sync_that_drains_a_busy_gpu_gives_back_nothing():
    busy = one("sync_wait_busy", "sync-wait")  # 2.76 ms blocked per step, the GPU 97% busy meanwhile
    idle = one("sync_wait_idle", "sync-wait")  # 103 µs blocked per step on an idle GPU
    assert busy.evidence["blocked_us_per_step"] > 20 * idle.evidence["blocked_us_per_step"]
    assert busy.impact_us_per_step < 0.1 * busy.evidence["blocked_us_per_step"]
    assert busy.severity in ("information", "warning")  # the replay lets the next dispatch overlap: ~1%
    # on an idle GPU each of the 40 syncs waits for a launch's round trip: at least the time blocked
    assert idle.impact_us_per_step >= idle.evidence["blocked_us_per_step"]
    assert idle.severity in ("warning", "error")


def test_findings_without_a_time_cost_keep_the_catalog_severity():
    for code in ("memory-peak", "memory-growth"):
        d = one("memory_growth_grow", code)
        assert d.impact_us_per_step is None and d.severity == RULES[code].severity


def test_given_back_is_bounded_by_the_step():
    doc, _, _ = loader.load(os.path.join(REC, "sync_wait_none.json.gz"))
    m = build(doc)
    ctx = Context(m, analyze(m), "t", Options())
    assert given_back(ctx, 0.0, 0.0)[0] == 0.0
    saved, step = given_back(ctx, 1e9, 1e9)
    assert saved == pytest.approx(step)  # removing everything gives back the whole step, no more
    # GPU-bound steps (the CPU only queues the GEMMs): CPU savings give back nothing
    assert given_back(ctx, 500.0, 0.0)[0] == 0.0
    assert given_back(ctx, 0.0, 500.0)[0] == pytest.approx(500.0)


def test_a_large_cost_hidden_by_the_bound_side_says_what_hides_it():
    """tinygpt_naive: fp32 GEMMs are 73.6% of its GPU time, but the single-tensor optimizer's
    dispatch bounds the step; the finding names that fix and what TF32 gives back after it."""
    d = one("tinygpt_naive", "fp32-matmul")
    assert d.impact_note and d.impact_note.startswith(
        "hidden behind the CPU-bound step: fix optimizer-foreach-off"
    )
    assert d.impact_hidden_by == "optimizer-foreach-off"
    assert d.impact_then_us_per_step > 2 * d.impact_us_per_step
    assert d.evidence["impact_cost_us_per_step"] > 4 * d.impact_us_per_step
    # the optimizer's launch storm is the same loop: it says so and ranks after the optimizer
    ds = rep("tinygpt_naive").diagnostics
    storm = [x for x in ds if x.code == "launch-storm" and x.location.line == 67][0]
    assert "same loop as optimizer-foreach-off" in storm.impact_note
    assert ds.index(storm) > ds.index(one("tinygpt_naive", "optimizer-foreach-off"))


@pytest.mark.parametrize("name", _shipped())
def test_no_finding_reads_as_its_own_contradiction(name):
    """A fix that gives back under a quarter of what it removes (1% of the step or more) says why."""
    for d in rep(name).diagnostics:
        cost = d.evidence.get("impact_cost_us_per_step")
        if d.impact_us_per_step is not None and cost and d.impact_us_per_step < 0.25 * cost:
            assert d.impact_note and d.impact_note.startswith("hidden behind"), d


def test_the_step_models_calls_are_the_traces_launch_and_sync_calls_with_their_gpu_work():
    """The replayed calls the fixes change: every Point is a launch or sync call, in time order,
    at its cpu event's start, and its ops are the GPU events that call launched, with
    their durations and one stream number per GPU stream; a line's calls are the Points on it."""
    from profd.server.engine.stepmodel import BLOCKING, NONBLOCKING, QUEUED, SYNC, StepModel

    path = os.path.join(EXAMPLES, "tinygpt_naive.json.gz")
    doc, _, _ = loader.load(path)
    m = build(doc)
    ctx = Context(m, analyze(m), path, Options(workspace=list(WORKSPACE)))
    sm = StepModel.of(ctx)
    pts = list(sm.points())
    assert len(pts) == sum(len(st.points) for st in sm.steps) > 1000
    assert [p.ts for p in pts] == sorted(p.ts for p in pts)  # one thread's calls, in time order
    streams: dict = {}
    for p in pts:
        e = m.cpu[p.i]
        assert p.ts == e.ts and p.kind in (NONBLOCKING, BLOCKING, SYNC, QUEUED)
        assert p.kind != SYNC or not p.ops
        for g, stream, dur in p.ops:
            assert m.launcher[g] == p.i and dur == m.gpu[g].dur
            assert streams.setdefault((m.gpu[g].pid, m.gpu[g].tid), stream) == stream
    assert sorted(streams.values()) == list(range(len(streams)))
    (line, on), *_ = sorted(sm.by_line().items(), key=lambda kv: -len(kv[1]))
    assert on == [p for p in pts if (k := ctx.line_key(p.i)) and (k.trace_path, k.line) == line]
