"""The memory rules (``server/engine/rules/memory.py``: ``memory-child-pressure``, ``memory-peak``,
``memory-growth``) on real traces: each fires where the trace has the problem and stays silent where
it does not. Traces: examples/ (MANIFEST.md says what a reader should conclude from each),
examples/recorded/ and examples/corpus/ (recorded on an H200 for the rules; their READMEs say how);
``rule_traces`` reads them."""

import pytest

from conftest import SRC, codes, report_of
from rule_traces import REC_SRC, corpus, corpus_of, of, recorded, shipped_of


# ---- the seed's traces (examples/, MANIFEST.md) --------------------------------------------------


def test_memory_peak_and_no_child_pressure_from_composite_ops():
    r = report_of("tinygpt_naive")
    (peak,) = of(r, "memory-peak")
    assert peak.evidence["peak_bytes"] > 1 << 30
    # aten::cross_entropy_loss allocating through aten::log_softmax is true of every composite op;
    # the record_function('forward') region wraps one call, model(x), which allocates for itself
    assert "memory-child-pressure" not in codes(r)
    assert "memory-peak" not in codes(report_of("mlp_eager"))  # recorded without profile_memory
    # recorded with profile_memory; the record_function region wraps one helper that allocates
    assert "memory-peak" in codes(report_of("seed_n4096_bf16"))
    assert "memory-child-pressure" not in codes(report_of("seed_n4096_bf16"))


# ---- false positives and misses (issue 15), on real traces ---------------------------------------


def test_child_pressure_on_a_region_whose_helpers_allocate():
    # record_function("features") calls upcast() and pairwise(): 256 MiB a call, 384 KiB its own
    (d,) = of(recorded("memory_scope_helpers"), "memory-child-pressure")
    assert d.evidence["scope"] == "record_function('features')"
    assert d.evidence["self_bytes"] < 0.01 * d.evidence["total_bytes"]
    assert {h["scope"].split("(")[0] for h in d.evidence["helpers"]} == {"upcast", "pairwise"}
    assert d.location.path.endswith("memory_scope.py") and d.location.line == 20  # the with statement
    # the same work in the region's own statements: nothing to point at beneath it
    assert "memory-peak" in codes(recorded("memory_scope_inline"))
    assert not of(recorded("memory_scope_inline"), "memory-child-pressure")


def test_child_pressure_not_on_composite_aten_ops():
    # ResNet-18 with profile_memory: aten::conv2d allocates through aten::cudnn_convolution, as
    # every composite op does; no user function or region allocates through helpers
    r = corpus("resnet18_train")
    assert "memory-peak" in codes(r)
    assert not of(r, "memory-child-pressure")


# ---- examples/recorded/ twins and the corpus -----------------------------------------------------


def test_memory_growth_names_the_allocations_that_survive_each_step():
    (d,) = shipped_of("memory_growth_grow", "memory-growth")
    ev = d.evidence
    assert ev["steps_leaking"] == ev["steps_compared"] == 7  # 8 steps, the last not judged
    assert 30 * 2**20 < ev["rise_bytes_per_step"] < 50 * 2**20  # 38 MiB a step, measured
    level = ev["level_bytes"]
    assert all(b > a for a, b in zip(level, level[1:]))
    assert d.location.path.endswith("memory_growth.py") and d.location.line == 32  # out = model(xb)
    assert ev["backward_in_steps"] is False and "No backward" in d.message


@pytest.mark.parametrize(
    "name", ["memory_growth_fixed", "tinygpt_naive", "tinygpt_tuned", "seed_n4096_bf16_active20"]
)
def test_memory_growth_silent_when_each_step_frees_its_tensors(name):
    assert not shipped_of(
        name, "memory-growth", workspace=SRC if name.startswith(("tinygpt", "seed")) else REC_SRC
    )


def test_corpus_memory_growth_and_unfused_attention_fire_on_their_lines():
    (g,) = corpus_of("memgrowth_tensor", "memory-growth")
    assert g.location.path.endswith("memory_growth.py") and g.location.line == 27
    (u,) = corpus_of("attention_manual", "unfused-attention")
    assert u.location.path.endswith("attention.py") and u.location.line == 23
    assert u.evidence["scores_shape"] == [8, 12, 512, 512]
