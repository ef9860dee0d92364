"""The steps rules (``server/engine/rules/steps.py``: ``cold-start-step``, ``one-time-setup``) on real
traces: each fires where the trace has the problem and stays silent where it does not. Traces:
examples/ (MANIFEST.md says what a reader should conclude from each), examples/recorded/ and
examples/corpus/ (recorded on an H200 for the rules; their READMEs say how); ``rule_traces`` reads
them."""

import pytest

from conftest import codes, report_of
from rule_traces import of


# ---- the seed's traces (examples/, MANIFEST.md) --------------------------------------------------


def test_cold_start_step_fires_on_the_wide_first_step_only():
    r = report_of("seed_n64_bf16")
    (d,) = of(r, "cold-start-step")
    assert d.evidence["first_step"] == "ProfilerStep#2"
    assert d.evidence["first_step_us"] == pytest.approx(644.3, abs=1)
    # no first-time work is visible in that step, so it is information, not a warning
    assert d.evidence["first_time_work"] == [] and d.severity == "information"
    # the tuned TinyGPT's first step is not the widest: no cold start there
    assert "cold-start-step" not in codes(report_of("tinygpt_tuned"))
    assert "cold-start-step" not in codes(report_of("tinygpt_naive"))
