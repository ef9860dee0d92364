"""The attention rules (``server/engine/rules/attention.py``: ``unfused-attention``) on real traces:
each fires where the trace has the problem and stays silent where it does not. Traces: examples/
(MANIFEST.md says what a reader should conclude from each), examples/recorded/ and examples/corpus/
(recorded on an H200 for the rules; their READMEs say how); ``rule_traces`` reads them."""

import pytest

from conftest import SRC
from rule_traces import shipped_of


# ---- examples/recorded/ twins and the corpus -----------------------------------------------------


def test_unfused_attention_on_hand_written_attention():
    (d,) = shipped_of("attention_naive", "unfused-attention")
    assert d.location.path.endswith("attention.py") and d.location.line == 30  # q @ k^T
    assert [r.line for r in d.related if "backward" not in r.note] == [32, 33]  # softmax, att @ v
    ev = d.evidence
    assert ev["scores_shape"] == [8, 16, 1024, 1024] and ev["scores_bytes"] == 8 * 16 * 1024 * 1024 * 2
    assert ev["other_us_per_step"] > ev["gemm_us_per_step"]  # passes over the scores dominate
    assert {"aten::masked_fill", "aten::mul"} <= set(ev["ops"])


def test_unfused_attention_silent_on_sdpa():
    """The twin through F.scaled_dot_product_attention (flash kernels)."""
    assert not shipped_of("attention_sdpa", "unfused-attention")


def test_unfused_attention_in_tinygpt():
    """tinygpt.py writes attention out too (lines 20-23): both variants have it."""
    for name in ("tinygpt_naive", "tinygpt_tuned"):
        (d,) = shipped_of(name, "unfused-attention", workspace=SRC)
        assert d.location.path.endswith("tinygpt.py") and d.location.line == 20
        assert d.evidence["scores_shape"][-2:] == [256, 256]


@pytest.mark.parametrize("name", ["misaligned_odd", "sync_wait_busy", "mlp_eager_b1_w256_d6_float32"])
def test_unfused_attention_silent_on_plain_gemms(name):
    assert not shipped_of(name, "unfused-attention")
