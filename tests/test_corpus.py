"""The real-trace corpus (examples/corpus/): every expectation held in the baseline must still hold.

Like ruff checking its rules against real projects before a release: an engine change that breaks an
expectation that held (a miss, a false positive, a finding moved off its statement) fails here, with
the entry's id, what was expected and why. After a fix that makes more entries hold, run
``make corpus-baseline`` to hold them too.
"""

import dataclasses
import importlib.util
import json
import os
import sys

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("profd_corpus", os.path.join(ROOT, "bench", "corpus.py"))
corpus = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = corpus  # dataclasses look their module up there
_spec.loader.exec_module(corpus)


@pytest.fixture(scope="module")
def traces():
    return corpus.load()


@pytest.fixture(scope="module")
def results(traces):
    return corpus.score(traces)


@pytest.fixture(scope="module")
def baseline():
    with open(corpus.BASELINE) as f:
        return json.load(f)


def test_every_trace_analyses(results):
    assert [r.trace.id for r in results if r.error] == []


def test_no_held_expectation_regressed(results, baseline):
    reg = corpus.regressions(results, baseline)
    assert not reg, "corpus expectations that held no longer do:\n" + "\n".join(reg)


def test_baseline_names_only_entries_that_exist(traces, baseline):
    ids = {e.id for t in traces for e in t.entries}
    stale = sorted(set(baseline["held"] + baseline["located"]) - ids)
    assert not stale, f"baseline.json names entries no longer in expectations.toml: {stale}"


def test_corpus_spans_the_recordings(traces):
    # the shipped traces are all in it, and every entry says why
    files = {f for t in traces for f in t.files}
    assert "examples/tinygpt_naive.json.gz" in files
    assert all(e.why for t in traces for e in t.entries)


def test_a_finding_that_would_be_wrong_is_a_regression(traces, baseline):
    """The check can fail: on the real 64x64 trace, an absent entry for a code that does fire (and
    an expect entry on a line it does not sit on) come out as a false positive and a misplacement."""
    t = next(t for t in traces if t.id == "seed_n64_bf16")
    found, verdicts = corpus.findings_of(t)
    fired = next(f for f in found if f.code == "overhead-bound")
    wrong = corpus.Entry(id="probe/absent", kind="absent", code=fired.code, why="probe")
    off_line = corpus.Entry(
        id="probe/line", kind="expect", code="memory-peak", file="seed_matmul.py", line=7, why="probe"
    )
    probe = dataclasses.replace(t, entries=[wrong, off_line])
    outcomes, _ = corpus.judge(probe, found, verdicts)
    by = {o.entry.id: o for o in outcomes}
    assert by["probe/absent"].held is False
    assert by["probe/line"].held is True and by["probe/line"].located is False
    res = [corpus.TraceResult(probe, outcomes, [], 0.0)]
    reg = corpus.regressions(res, {"held": ["probe/absent"], "located": ["probe/line"]})
    assert len(reg) == 2 and reg[0].startswith("probe/absent no longer holds")


def test_bad_expectations_name_the_entry(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(
        'schema = 1\n[[trace]]\nid = "x"\nfile = "examples/seed_n64_bf16.json.gz"\n'
        'workspace = ["examples/src"]\nvendor = "nvidia"\nformat = "kineto-modern"\n'
        'recorded = "r"\nexpect = [{ id = "x/a", code = "host-sync" }]\n'
    )
    with pytest.raises(corpus.CorpusError, match=r"x/a: why"):
        corpus.load(str(p))
    p.write_text(
        p.read_text()
        .replace('code = "host-sync" }', 'code = "host-sync", why = "w" }')
        .replace("seed_n64_bf16.json.gz", "nope.json.gz")
    )
    with pytest.raises(corpus.CorpusError, match="nope.json.gz does not exist"):
        corpus.load(str(p))
