"""The compile rules (``server/engine/rules/compile.py``: ``compile-overhead``, ``compile-fusion``,
``compile-graph-break``) on real traces: each fires where the trace has the problem and stays silent
where it does not. Traces: examples/ (MANIFEST.md says what a reader should conclude from each),
examples/recorded/ and examples/corpus/ (recorded on an H200 for the rules; their READMEs say how);
``rule_traces`` reads them."""

import pytest

from conftest import codes, report_of
from rule_traces import corpus, corpus_of, of, recorded_of, shipped_of


# ---- the seed's traces (examples/, MANIFEST.md) --------------------------------------------------


def test_compile_overhead_on_single_op_compiled_region():
    (d,) = of(report_of("seed_n64_bf16_compiled"), "compile-overhead")
    assert d.evidence["kernels_per_call"] <= 2
    assert d.evidence["wrapper_us_per_call"] > 10 * d.evidence["gpu_us_per_call"]
    assert "compile-overhead" not in codes(report_of("seed_n64_bf16"))


def test_compile_fusion_reports_the_bias_epilogue_on_hopper():
    (d,) = of(report_of("seed_n4096_bf16_compiled"), "compile-fusion")
    assert d.evidence["op"] == "aten::addmm"
    assert d.evidence["bias_epilogue"] and not d.evidence["bias_copy"]  # no DtoD copy on this stack
    assert "compile-fusion" not in codes(report_of("seed_n4096_bf16"))


# ---- false positives and misses (issue 15), on real traces ---------------------------------------


def test_compile_overhead_on_one_op_functions_only():
    (d,) = of(report_of("seed_n64_bf16_compiled"), "compile-overhead")
    assert 1 <= d.evidence["kernels_per_call"] <= 2
    assert "compile-overhead" not in codes(report_of("seed_n64_bf16"))


def test_compile_overhead_not_on_a_model_whose_problem_is_graph_breaks():
    r = corpus("compiled_break")
    assert "compile-graph-break" in codes(r)
    assert "compile-overhead" not in codes(r)
    assert "compile-overhead" not in codes(corpus("compiled_none"))  # a multi-op model compiled whole


# ---- examples/recorded/ twins and the corpus -----------------------------------------------------


def test_graph_break_points_at_the_line_that_breaks_the_graph():
    (d,) = shipped_of("graph_break_break", "compile-graph-break")
    assert d.location.path.endswith("graph_break.py")
    assert (d.location.line, d.location.precision) == (25, "statement")  # if h.mean() > 0:
    ev = d.evidence
    assert ev["breaks_per_step"] == 1 and ev["graphs_per_call"] == 2
    assert "aten::is_nonzero" in ev["eager_ops"]  # the test ran eagerly between the graphs
    assert 0 < ev["gpu_idle_us_per_step"] <= ev["gap_us_per_step"]
    assert ev["regions"] == ["Torch-Compiled Region: 2/0"]


@pytest.mark.parametrize(
    "name",
    [
        "graph_break_whole",
        "seed_n64_bf16_compiled",
        "seed_n4096_bf16_compiled",
        "matmul-bias_n64_bfloat16_compiled",
        "mlp_graphs_b1_w256_d6_float32",
    ],
)
def test_graph_break_silent_on_whole_graphs(name):
    assert not shipped_of(name, "compile-graph-break")


def test_a_graph_break_is_not_called_compile_overhead():
    assert not shipped_of("graph_break_break", "compile-overhead")


@pytest.mark.parametrize("name,line", [("compiled_break", 22), ("compiled_sync", 24)])
def test_corpus_graph_breaks_at_print_and_item(name, line):
    (d,) = corpus_of(name, "compile-graph-break")
    assert d.location.path.endswith("compiled.py") and d.location.line == line


def test_corpus_whole_graph_and_memory_and_attention_twins_are_silent():
    assert not corpus_of("compiled_none", "compile-graph-break")
    for name in ("memgrowth_item", "eval_grad", "eval_nograd", "resnet18_train", "grad_accum"):
        assert not corpus_of(name, "memory-growth"), name
    for name in ("attention_sdpa", "gpt2_train_modules", "timm_vit_small"):
        assert not corpus_of(name, "unfused-attention"), name


# ---- examples/recorded/: a planted problem and its fixed twin ------------------------------------


def test_sweep_compile_tax_on_a_single_op():
    assert recorded_of("matmul-bias_n64_bfloat16_compiled", "compile-overhead")
