"""What a finished analysis leaves behind (issue 32: a daemon analysing traces one after another
stays bounded). Objects, not bytes: which objects survive does not depend on the allocator or on
how loaded the machine is; ``bench/bench.py`` and the note measure the RSS."""

import gc
import os
import weakref

import pytest

from profd.server.engine import Options
from profd.server.engine.analyze import analyze_trace
from profd.server.engine.passes import Spans

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = os.path.join(ROOT, "examples", "tinygpt_naive.json.gz")


def test_a_finished_analysis_is_freed_without_the_cyclic_gc():
    """The model, the analysis and the context are freed by reference counting when the caller
    lets go of them: a cycle among them (a cached step model or module index pointing back) waited
    for the cyclic GC, which the engine pauses and a daemon rarely runs in full, so each analysis's
    tens of MB stayed; and no interval list outlives its analysis (a module-level index cache kept
    the last 64). Asked of those objects themselves, with the collector off: counting what a
    collection finds after the analysis also counted other code's garbage (an in-process Dask
    cluster's tornado futures, left by test_cluster, failed it when run just before)."""
    gc.collect()
    gc.disable()
    try:
        done = analyze_trace(TRACE, Options(workspace=[os.path.join(ROOT, "examples", "src")]))
        assert done.report.diagnostics  # a real analysis ran
        kept = [weakref.ref(o) for o in (done.model, done.analysis, done.context)]
        del done
        assert [r() for r in kept] == [None, None, None]
    finally:
        gc.enable()
    assert not [o for o in gc.get_objects() if isinstance(o, Spans)]


def test_what_an_analysis_keeps_is_in_the_oldest_generation():
    """The model's containers leave the pipeline in the GC's oldest generation: the first young
    collection after the pause would otherwise scan all of them (0.11 s after a 1 GB trace) and
    find nothing."""
    gc.collect()
    assert gc.isenabled()
    done = analyze_trace(TRACE, Options(workspace=[os.path.join(ROOT, "examples", "src")]))
    cpu = done.model.cpu
    assert any(o is cpu for o in gc.get_objects(2))
    assert not any(o is cpu for g in (0, 1) for o in gc.get_objects(g))


def test_what_only_the_rules_read_is_let_go_before_the_replay_and_remade_on_a_later_read(monkeypatch):
    """Once every rule has run, the context's shared rule columns and the model's nearest-op and
    nearest-frame columns are let go (``Context.rules_done``), before the impact replay (the
    analysis' last big allocation). A reader after that remakes them: every rule run again over
    the finished analysis finds what the report holds."""
    from profd.server.engine import impact
    from profd.server.engine.rules import load_all

    seen = []
    assign = impact.assign

    def watched(ctx, diagnostics):
        seen.append(
            (dict(ctx._columns), "_ops_above" in ctx.model.__dict__, "_frames_above" in ctx.model.__dict__)
        )
        return assign(ctx, diagnostics)

    monkeypatch.setattr(impact, "assign", watched)
    done = analyze_trace(TRACE, Options(workspace=[os.path.join(ROOT, "examples", "src")]))
    assert seen == [({}, False, False)]
    ctx = done.context
    rules = load_all()
    again = {(d.code, d.message) for code in sorted(rules) for d in rules[code](ctx)}
    reported = {(d.code, d.message) for d in done.report.diagnostics if d.code != "unused-suppression"}
    assert reported and reported <= again
    assert "_ops_above" in done.model.__dict__ and ctx._columns  # remade by the rules that read them


_FRAGMENT = """
import builtins, sys
from profd.server.engine import passes
if sys.argv[1] == "ctypes":
    passes._BUILT = None  # the fallback a build without the native layer takes
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
xs = [bytes(1000) for _ in range(200_000)]
builtins.kept = xs[::64]  # live blocks between the freed ones: the heap cannot shrink by itself
del xs
before = rss()
took = passes.trim_malloc()
print(took, before - rss())
"""


@pytest.mark.parametrize("how", ["native", "ctypes"])
def test_trim_malloc_gives_the_heaps_free_pages_back(how):
    """``passes.trim_malloc`` (the engine's per-rule trim, the daemon workers' after each task)
    hands back the pages of blocks freed between live ones, which glibc keeps resident otherwise:
    200 MB of 1 KB blocks freed with every 64th kept must shrink the process by most of it. In a
    child process: the test runner's own heap is not the test's to measure."""
    import subprocess
    import sys

    from profd.server.engine import passes

    if how == "native" and passes._BUILT is None:
        pytest.skip("the native layer is not built")
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("no /proc")
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENT, how], capture_output=True, text=True, check=True
    ).stdout.split()
    if out[0] == "False":
        pytest.skip("this C library cannot trim (not glibc)")
    assert int(out[1]) > 100 << 20, out


@pytest.mark.parametrize("own, big", [(True, False), (False, False), (True, True)])
def test_the_engine_trims_after_each_rule_and_before_the_replay(monkeypatch, own, big):
    """The rules' transients (their columns, a pass's results) are freed when the rule ends, and
    would stay resident as holes in the heap up to the analysis' peak: in a process that is the
    engine's alone (``own_the_heap``: profd-client's) the engine trims once a rule has run, and
    once more when what only the rules read is let go (``Context.rules_done``) before the impact
    replay, whose objects come from Python's own arenas, not those holes. Where the engine is
    embedded it leaves the host's heap alone (a trim walks all of it). Nor for a trace of
    ``TRIM_BELOW_BYTES`` or more (``big``: the limit set to this trace's size), whose peak is far
    under the file's size and whose next rules would fault the trimmed pages in again."""
    from profd.server.engine import analyze as pipeline, passes
    from profd.server.engine.rules import load_all

    events: list[str] = []
    monkeypatch.setattr(passes, "TRIM_BETWEEN_RULES", own)
    if big:
        monkeypatch.setattr(passes, "TRIM_BELOW_BYTES", os.path.getsize(TRACE))
    monkeypatch.setattr(passes, "trim_malloc", lambda: events.append("trim") or True)
    done_before = pipeline.Context.rules_done
    monkeypatch.setattr(
        pipeline.Context, "rules_done", lambda self: events.append("done") or done_before(self)
    )
    analyze_trace(TRACE, Options(workspace=[os.path.join(ROOT, "examples", "src")]))
    ran = len(pipeline._rules_to_run(load_all(), set()))
    assert events == (["trim"] * ran + ["done", "trim"] if own and not big else ["done"])
