"""The three codes issue 15 added, each on a real H200 trace with the problem (fires, at the line)
and on its twin without it (silent): compile-graph-break, memory-growth, unfused-attention.
Traces and sources: examples/recorded/ (record3.sh), examples/ (tinygpt)."""
import os

import pytest

from conftest import EXAMPLES, SRC, report_of

REC_SRC = os.path.join(EXAMPLES, "recorded", "src")


def diags(name, code, workspace=REC_SRC):
    return [d for d in report_of(name, workspace=(workspace,)).diagnostics if d.code == code]


# ---- compile-graph-break ---------------------------------------------------------------------

def test_graph_break_points_at_the_line_that_breaks_the_graph():
    (d,) = diags("graph_break_break", "compile-graph-break")
    assert d.location.path.endswith("graph_break.py")
    assert (d.location.line, d.location.precision) == (25, "statement")  # if h.mean() > 0:
    ev = d.evidence
    assert ev["breaks_per_step"] == 1 and ev["graphs_per_call"] == 2
    assert "aten::is_nonzero" in ev["eager_ops"]  # the test ran eagerly between the graphs
    assert 0 < ev["gpu_idle_us_per_step"] <= ev["gap_us_per_step"]
    assert ev["regions"] == ["Torch-Compiled Region: 2/0"]


@pytest.mark.parametrize("name", ["graph_break_whole", "seed_n64_bf16_compiled", "seed_n4096_bf16_compiled",
                                  "matmul-bias_n64_bfloat16_compiled", "mlp_graphs_b1_w256_d6_float32"])
def test_graph_break_silent_on_whole_graphs(name):
    assert not diags(name, "compile-graph-break")


def test_a_graph_break_is_not_called_compile_overhead():
    assert not diags("graph_break_break", "compile-overhead")


# ---- memory-growth ---------------------------------------------------------------------------

def test_memory_growth_names_the_allocations_that_survive_each_step():
    (d,) = diags("memory_growth_grow", "memory-growth")
    ev = d.evidence
    assert ev["steps_leaking"] == ev["steps_compared"] == 7  # 8 steps, the last not judged
    assert 30 * 2**20 < ev["rise_bytes_per_step"] < 50 * 2**20  # 38 MiB a step, measured
    level = ev["level_bytes"]
    assert all(b > a for a, b in zip(level, level[1:]))
    assert d.location.path.endswith("memory_growth.py") and d.location.line == 32  # out = model(xb)
    assert ev["backward_in_steps"] is False and "No backward" in d.message


@pytest.mark.parametrize("name", ["memory_growth_fixed", "tinygpt_naive", "tinygpt_tuned", "seed_n4096_bf16_active20"])
def test_memory_growth_silent_when_each_step_frees_its_tensors(name):
    assert not diags(name, "memory-growth", workspace=SRC if name.startswith(("tinygpt", "seed")) else REC_SRC)


# ---- unfused-attention -----------------------------------------------------------------------

def test_unfused_attention_on_hand_written_attention():
    (d,) = diags("attention_naive", "unfused-attention")
    assert d.location.path.endswith("attention.py") and d.location.line == 30  # q @ k^T
    assert [r.line for r in d.related if "backward" not in r.note] == [32, 33]  # softmax, att @ v
    ev = d.evidence
    assert ev["scores_shape"] == [8, 16, 1024, 1024] and ev["scores_bytes"] == 8 * 16 * 1024 * 1024 * 2
    assert ev["other_us_per_step"] > ev["gemm_us_per_step"]  # passes over the scores dominate
    assert {"aten::masked_fill", "aten::mul"} <= set(ev["ops"])


def test_unfused_attention_silent_on_sdpa():
    """The twin through F.scaled_dot_product_attention (flash kernels)."""
    assert not diags("attention_sdpa", "unfused-attention")


def test_unfused_attention_in_tinygpt():
    """tinygpt.py writes attention out too (lines 20-23): both variants have it."""
    for name in ("tinygpt_naive", "tinygpt_tuned"):
        (d,) = diags(name, "unfused-attention", workspace=SRC)
        assert d.location.path.endswith("tinygpt.py") and d.location.line == 20
        assert d.evidence["scores_shape"][-2:] == [256, 256]


@pytest.mark.parametrize("name", ["misaligned_odd", "sync_wait_busy", "mlp_eager_b1_w256_d6_float32"])
def test_unfused_attention_silent_on_plain_gemms(name):
    assert not diags(name, "unfused-attention")


# ---- the same codes on the corpus's recordings (examples/corpus/, other programs) ------------

CORPUS = os.path.join(EXAMPLES, "corpus")
_corpus: dict = {}


def corpus(name, code):
    from profd.server.engine import Options, analyze_file

    if name not in _corpus:
        _corpus[name] = analyze_file(os.path.join(CORPUS, "traces", name + ".json.gz"),
                                     Options(workspace=[os.path.join(CORPUS, "src")]))
    return [d for d in _corpus[name].diagnostics if d.code == code]


@pytest.mark.parametrize("name,line", [("compiled_break", 22), ("compiled_sync", 24)])
def test_corpus_graph_breaks_at_print_and_item(name, line):
    (d,) = corpus(name, "compile-graph-break")
    assert d.location.path.endswith("compiled.py") and d.location.line == line


def test_corpus_host_sync_in_a_compiled_forward_is_on_its_line():
    (d,) = corpus("compiled_sync", "host-sync")  # x.mean().item() inside the compiled forward
    assert (d.location.line, d.location.precision) == (24, "statement")


def test_corpus_whole_graph_and_memory_and_attention_twins_are_silent():
    assert not corpus("compiled_none", "compile-graph-break")
    for name in ("memgrowth_item", "eval_grad", "eval_nograd", "resnet18_train", "grad_accum"):
        assert not corpus(name, "memory-growth"), name
    for name in ("attention_sdpa", "gpt2_train_modules", "timm_vit_small"):
        assert not corpus(name, "unfused-attention"), name


def test_corpus_memory_growth_and_unfused_attention_fire_on_their_lines():
    (g,) = corpus("memgrowth_tensor", "memory-growth")
    assert g.location.path.endswith("memory_growth.py") and g.location.line == 27
    (u,) = corpus("attention_manual", "unfused-attention")
    assert u.location.path.endswith("attention.py") and u.location.line == 23
    assert u.evidence["scores_shape"] == [8, 12, 512, 512]
