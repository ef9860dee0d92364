"""The module tree (engine/modules.py) on real traces with ``nn.Module`` frames: names from the
model's source, GPU time forward and backward per module summing to its parent's, repeated blocks
compared, findings naming their module, the CLI and the hover showing it."""

import os
import statistics
import subprocess
import sys

from conftest import ROOT, SRC, report_of, trace

from profd.server.engine import Options, analyze_file
from profd.server.engine.loader import load
from profd.server.engine.model import build
from profd.server.engine.modules import OUTLIER_RATIO, render, top_modules
import gzip
import json

from profd.protocol import types as T
from profd.server.engine import bound, modules


def nodes_by_path(tree):
    return {nd.path: nd for nd in tree.nodes}


def independent_module_gpu(path: str, root_class: str) -> tuple[float, float]:
    """(forward, backward) GPU µs of the kernels launched inside a root module's calls, found
    without the module index: a launch inside one of the root's marker spans on its thread, or a
    backward launch whose fwdbwd forward op is."""
    m = build(load(path)[0])
    spans = [
        (m.thread[i], e.ts, e.ts + e.dur)
        for i, e in enumerate(m.cpu)
        if e.cat == "python_function" and e.name.startswith(f"nn.Module: {root_class}_")
    ]

    def inside(i):
        e = m.cpu[i]
        return any(t == m.thread[i] and a <= e.ts and e.ts + e.dur <= b + 0.01 for t, a, b in spans)

    fwd = bwd = 0.0
    for g, ge in enumerate(m.gpu):
        li = m.launcher[g]
        if li < 0:
            continue
        if m.is_backward(li):
            if inside(m.fwd_of[li]):
                bwd += ge.dur
        elif inside(li):
            fwd += ge.dur
    return fwd, bwd


def test_tinygpt_tree_names_every_block_by_attribute_and_sums_to_the_model():
    tree = report_of("tinygpt_naive").modules
    assert tree.available
    by = nodes_by_path(tree)
    (root,) = [tree.nodes[r] for r in tree.roots]
    assert root.path == "TinyGPT"
    blocks = [by[f"TinyGPT.blocks.{k}"] for k in range(4)]  # the ModuleList, named from __init__
    for b in blocks:
        assert b.class_name == "Block" and b.calls == tree.steps  # once per step
        assert b.gpu_forward_us > 0 and b.gpu_backward_us > b.gpu_forward_us  # training: bwd ~2x fwd
        assert abs(b.gpu_us - (b.gpu_forward_us + b.gpu_backward_us)) < 0.01
        assert {"TinyGPT.blocks.%d.%s" % (blocks.index(b), s) for s in ("attn", "mlp", "ln1", "ln2")} <= set(
            by
        )
        assert by[f"{b.path}.attn.qkv"].class_name == "Linear"
    # every node's GPU time is its own plus its children's, down the tree
    for nd in tree.nodes:
        kids = sum(tree.nodes[c].gpu_us for c in nd.children)
        assert abs(nd.gpu_us - nd.gpu_self_us - kids) < 0.01 * (1 + len(nd.children))
    # and the root's matches the kernels found under its calls without the module index
    fwd, bwd = independent_module_gpu(trace("tinygpt_naive"), "TinyGPT")
    assert abs(root.gpu_forward_us - fwd) < 0.01 and abs(root.gpu_backward_us - bwd) < 0.01
    assert root.gpu_us <= tree.gpu_us and tree.module_gpu_us == root.gpu_us
    # identical blocks: none is out of line
    (g,) = [g for g in tree.groups if g.class_name == "Block"]
    assert g.members == [b.id for b in blocks] and g.outliers == []
    assert max(b.gpu_us for b in blocks) < OUTLIER_RATIO * statistics.median(b.gpu_us for b in blocks)


def test_without_the_source_modules_are_named_by_class_and_position():
    r = analyze_file(trace("tinygpt_naive"), Options(workspace=[], library_roots=[]))
    by = nodes_by_path(r.modules)
    assert "TinyGPT.Block[3].Attention.Linear[0]" in by  # qkv: the first Linear the Attention calls
    assert by["TinyGPT.Block[3].Attention.Linear[0]"].instance.startswith("Linear_")
    named = report_of("tinygpt_naive").modules
    # the same numbers whatever the names
    assert sorted(nd.gpu_us for nd in r.modules.nodes) == sorted(nd.gpu_us for nd in named.nodes)


def test_sequential_children_are_named_by_position_and_findings_name_their_module():
    r = report_of("conv_bias_bn")
    by = nodes_by_path(r.modules)
    assert by["Sequential.0"].class_name == "Conv2d" and by["Sequential.1"].class_name == "BatchNorm2d"
    (d,) = [d for d in r.diagnostics if d.code == "conv-bias-before-bn"]
    assert d.location.module == "Sequential.Conv2d"


def test_fp32_gemm_finding_names_the_module_with_most_of_that_time():
    r = report_of("tinygpt_naive")
    (d,) = [d for d in r.diagnostics if d.code == "fp32-matmul"]
    mod = d.evidence["module"]
    assert f"`{mod}`" in d.message
    owner, attr = mod.split(".")
    assert any(
        nd.name == attr and r.modules.nodes[nd.parent].class_name == owner
        for nd in r.modules.nodes
        if nd.parent >= 0
    )


def test_repeated_layers_with_the_same_kernels_are_compared_and_the_odd_one_flagged():
    # DDP with 4 MB buckets: the all-reduce of each bucket overlaps the backward GEMMs of the layers
    # before it; the last Linear's backward runs first, with nothing beside it, and is faster.
    tree = report_of("ddp_overlap_rank0").modules
    (g,) = [g for g in tree.groups if g.class_name == "Linear"]
    assert g.outliers
    for k in g.outliers:
        nd = tree.nodes[k]
        peers = [tree.nodes[m] for m in g.members if tree.nodes[m].kernel_counts == nd.kernel_counts]
        med = statistics.median(p.gpu_us for p in peers)
        assert nd.outlier and (nd.gpu_us >= OUTLIER_RATIO * med or nd.gpu_us * OUTLIER_RATIO <= med)
    # the first Linear skips its input gradient (one GEMM fewer): different work, not compared
    first = tree.nodes[g.members[0]]
    assert first.kernel_counts["gemm"] < tree.nodes[g.members[1]].kernel_counts["gemm"]
    assert first.id not in g.outliers
    # with 8192-row batches the GEMMs dominate: no layer out of line
    big = report_of("ddp_overlap_b8192_rank0").modules
    assert all(not g.outliers for g in big.groups) and big.groups


def test_a_trace_without_module_frames_says_so():
    nostack = report_of("seed_n1024_bf16_nostack").modules
    assert not nostack.available and "with_stack" in nostack.note
    plain = report_of("seed_n64_bf16").modules  # stacks, but a bare matmul: no nn.Module
    assert not plain.available and "nn.Module" in plain.note
    assert render(plain) == [f"modules: {plain.note}"]


def test_hover_of_the_line_that_calls_the_model_lists_its_top_modules():
    from profd.server.daemon.present import hover_markdown

    r = report_of("tinygpt_naive")
    root = r.modules.nodes[r.modules.roots[0]]
    site = root.call_site
    assert site.precision == "statement" and "model(" in open(site.path).read().splitlines()[site.line - 1]
    top = top_modules(r.modules, site.path, site.line)
    assert top[0] is root and {nd.parent for nd in top[1:]} == {root.id}
    assert [nd.gpu_us for nd in top[1:]] == sorted((nd.gpu_us for nd in top[1:]), reverse=True)
    # the model is the workspace's own code: its work lies on its own lines, and this line has no
    # costs of its own, but its hover still lists the modules it calls
    assert not [h for h in r.hot_lines if h.path == site.path and h.line == site.line and h.gpu_us]
    text = hover_markdown(None, r.trace.path, [], top, r.modules.steps, "train_tinygpt.py:63")
    assert "Top modules" in text and "`TinyGPT.blocks.0`" in text and "`TinyGPT`" in text


def test_cli_modules_subcommand_and_analyze_flag():
    env = dict(os.environ, PROFD_NO_DAEMON="1")
    cmd = [sys.executable, "-m", "profd.client_cli.main"]
    out = subprocess.run(
        cmd + ["modules", "--no-daemon", "--workspace", SRC, trace("tinygpt_naive"), trace("seed_n64_bf16")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "blocks.0 [Block]" in out.stdout and "blocks.3 [Block]" in out.stdout
    assert "no module frames" in out.stdout
    plain = subprocess.run(
        cmd + ["analyze", "--no-daemon", "--workspace", SRC, trace("tinygpt_naive")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    with_tree = subprocess.run(
        cmd + ["analyze", "--no-daemon", "--modules", "--workspace", SRC, trace("tinygpt_naive")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert "blocks.0 [Block]" not in plain.stdout and "blocks.0 [Block]" in with_tree.stdout
    js = subprocess.run(
        cmd + ["modules", "--no-daemon", "--format", "json", trace("conv_bias_bn")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    import json

    (doc,) = json.loads(js.stdout)["modules"]
    assert doc["tree"]["available"] and any(n["path"] == "Sequential.0" for n in doc["tree"]["nodes"])


def test_library_lines_are_off_by_default_and_on_the_installed_source_when_asked(tmp_path):
    # the trace is real (conv_bias_bn); the library is a stand-in file at the path its frames name,
    # since what matters is whether the file is here, not what it holds
    lib = tmp_path / "site-packages"
    conv = lib / "torch" / "nn" / "modules" / "conv.py"
    conv.parent.mkdir(parents=True)
    conv.write_text("\n" * 600)
    off = analyze_file(trace("conv_bias_bn"), Options(workspace=[], library_roots=[str(lib)]))
    assert not any(h.library for h in off.hot_lines)
    convs = [nd for nd in off.modules.nodes if nd.class_name == "Conv2d"]
    assert all(nd.source.path == str(conv) and nd.source.library for nd in convs)
    assert all(
        nd.source.path is None for nd in off.modules.nodes if nd.class_name == "BatchNorm2d"
    )  # not here
    on = analyze_file(
        trace("conv_bias_bn"), Options(workspace=[], library_roots=[str(lib)], library_lines=True)
    )
    (h,) = [h for h in on.hot_lines if h.library]
    assert (h.path, h.line) == (str(conv), convs[0].source.line)
    assert abs(h.gpu_us - sum(nd.gpu_us for nd in convs)) < 0.01 and h.gpu_backward_us > 0
    (d,) = [d for d in on.diagnostics if d.code == "conv-bias-before-bn"]
    assert any(r.library and r.path == str(conv) and r.module == "Sequential.Conv2d" for r in d.related)
    (d_off,) = [d for d in off.diagnostics if d.code == "conv-bias-before-bn"]
    assert not any(r.library for r in d_off.related)


# ---- Hugging Face and torchvision models (examples/corpus: recorded on an H200, library code) ----
CORPUS = os.path.join(ROOT, "examples", "corpus")


def corpus_report(name: str):
    key = ("corpus", name)
    from conftest import _cache

    if key not in _cache:
        _cache[key] = analyze_file(
            os.path.join(CORPUS, "traces", name + ".json.gz"),
            Options(workspace=[os.path.join(CORPUS, "src")], library_roots=[]),
        )
    return _cache[key]


def check_sums(tree) -> None:
    for nd in tree.nodes:
        kids = sum(tree.nodes[c].gpu_us for c in nd.children)
        assert abs(nd.gpu_us - nd.gpu_self_us - kids) < 0.01 * (1 + len(nd.children))
        assert abs(nd.gpu_us - nd.gpu_forward_us - nd.gpu_backward_us) < 0.01


def test_hf_gpt2_training_tree_names_every_block_forward_and_backward():
    r = corpus_report("gpt2_train_modules")  # GPT2LMHeadModel, 4 layers, bf16 autocast, AdamW
    tree = r.modules
    check_sums(tree)
    by = nodes_by_path(tree)
    root = tree.nodes[tree.roots[0]]
    assert root.path == "GPT2LMHeadModel" and by["GPT2LMHeadModel.GPT2Model"].parent == root.id
    # transformers is not installed here: named by class and position, every block there
    blocks = [by[f"GPT2LMHeadModel.GPT2Model.GPT2Block[{k}]"] for k in range(4)]
    for b in blocks:
        assert b.calls == tree.steps and b.gpu_forward_us > 0 and b.gpu_backward_us > b.gpu_forward_us
        assert {tree.nodes[c].class_name for c in b.children} >= {"GPT2Attention", "GPT2MLP", "LayerNorm"}
    fwd, bwd = independent_module_gpu(
        os.path.join(CORPUS, "traces", "gpt2_train_modules.json.gz"), "GPT2LMHeadModel"
    )
    assert abs(root.gpu_forward_us - fwd) < 0.01 and abs(root.gpu_backward_us - bwd) < 0.01
    (g,) = [g for g in tree.groups if g.class_name == "GPT2Block"]
    assert g.members == [b.id for b in blocks] and not g.outliers  # the same layer four times
    # the line that calls the library model holds all of it; its hover lists the blocks
    site = root.call_site
    assert "model(" in open(site.path).read().splitlines()[site.line - 1]
    (h,) = [h for h in r.hot_lines if h.path == site.path and h.line == site.line]
    assert h.gpu_us >= root.gpu_us - 0.01
    top = top_modules(tree, site.path, site.line, limit=8)
    assert top[0] is root and by["GPT2LMHeadModel.GPT2Model"] in top


def test_hf_gpt2_inference_has_no_backward():
    tree = corpus_report("gpt2_infer_modules").modules
    check_sums(tree)
    blocks = [nd for nd in tree.nodes if nd.class_name == "GPT2Block"]
    assert len(blocks) == 4 and all(b.gpu_forward_us > 0 for b in blocks)
    assert all(nd.gpu_backward_us == 0 and nd.cpu_backward_us == 0 for nd in tree.nodes)


def test_torchvision_resnet_stages_are_not_peers_and_every_block_is_named():
    tree = corpus_report("resnet18_train").modules
    check_sums(tree)
    by = nodes_by_path(tree)
    stages = [by[f"ResNet.Sequential[{k}]"] for k in range(4)]
    for s in stages:
        assert [tree.nodes[c].class_name for c in s.children] == ["BasicBlock"] * 2
        assert s.gpu_forward_us > 0 and s.gpu_backward_us > 0
    # the four stages share a class and a structure but not their shapes: no stage, block or
    # submodule is out of line with the others
    assert all(not g.outliers for g in tree.groups) and not any(nd.outlier for nd in tree.nodes)
    root = tree.nodes[tree.roots[0]]
    fwd, bwd = independent_module_gpu(os.path.join(CORPUS, "traces", "resnet18_train.json.gz"), "ResNet")
    assert abs(root.gpu_forward_us - fwd) < 0.01 and abs(root.gpu_backward_us - bwd) < 0.01


def test_activation_checkpointing_reruns_count_as_calls_of_the_module():
    tree = corpus_report("act_checkpoint").modules  # torch.utils.checkpoint around each block
    assert len(tree.roots) == 1  # the reruns inside backward are no separate trees
    blocks = [
        tree.nodes[c] for c in tree.nodes[tree.roots[0]].children if tree.nodes[c].class_name == "Sequential"
    ]
    assert len(blocks) == 8 and all(b.calls == 2 * tree.steps for b in blocks)  # forward + rerun


def _step(dur: float) -> dict:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": "ProfilerStep#1",
        "pid": 1,
        "tid": 1,
        "ts": 0.0,
        "dur": dur,
    }


def _gemm(ts: float) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": ts,
            "dur": 5,
            "args": {"External id": 1},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": ts + 1,
            "dur": 2,
            "args": {"correlation": 7, "External id": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ampere_sgemm_128x64_nn",
            "pid": 0,
            "tid": 7,
            "ts": ts + 4,
            "dur": 30,
            "args": {"correlation": 7, "device": 0, "stream": 7},
        },
    ]


def _doc(events: list[dict]) -> bytes:
    return gzip.compress(
        json.dumps(
            {
                "schemaVersion": 1,
                "with_stack": 1,
                "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
                "traceEvents": events,
            }
        ).encode()
    )


def deep_modules(depth: int, name_len: int) -> bytes:
    """nn.Module markers nested ``depth`` deep, each class name ``name_len`` characters, a GEMM
    at the bottom: each module's path names all its ancestors (quadratic in depth)."""
    ev = [_step(4.0 * depth + 100)]
    for i in range(depth):
        ev.append(
            {
                "ph": "X",
                "cat": "python_function",
                "pid": 1,
                "tid": 1,
                "name": f"nn.Module: {('M%d' % i).ljust(name_len, 'x')}_0",
                "ts": 1.0 + 2 * i,
                "dur": 4.0 * depth - 4 * i + 50,
            }
        )
    return _doc(ev + _gemm(2.0 * depth + 5))


def wide_modules(n: int, name_len: int) -> bytes:
    """``n`` sibling modules, each a class of its own."""
    ev = [_step(10.0 * n + 100)]
    for i in range(n):
        ev.append(
            {
                "ph": "X",
                "cat": "python_function",
                "pid": 1,
                "tid": 1,
                "name": f"nn.Module: {('W%d' % i).ljust(name_len, 'y')}_0",
                "ts": 1.0 + 10 * i,
                "dur": 5,
            }
        )
    return _doc(ev + _gemm(10.0 * n + 20))


def _analyze(tmp_path, name: str, data: bytes) -> T.Report:
    p = tmp_path / name
    p.write_bytes(data)
    return analyze_file(str(p), Options(workspace=[SRC]))


def test_a_deep_module_tree_is_bounded_and_says_so(tmp_path):
    """1,400 markers deep with 400-character class names: unbounded, the tree's paths alone were
    1,400² × 400 / 2 = 392 M characters; now depth, names and paths are capped and the note
    says what was folded and cut."""
    rep = _analyze(tmp_path, "deep.json.gz", deep_modules(1400, 400))
    tree = rep.modules
    assert tree.available and len(tree.nodes) == modules.MAX_DEPTH
    assert max(nd.depth for nd in tree.nodes) == modules.MAX_DEPTH - 1
    assert max(len(nd.path) for nd in tree.nodes) <= modules.MAX_PATH
    assert max(len(nd.class_name) for nd in tree.nodes) <= modules.MAX_NAME
    assert f"{1400 - modules.MAX_DEPTH} module call(s) nested deeper than" in tree.note
    assert "1400 module class name(s) longer than" in tree.note
    assert tree.nodes[0].gpu_us == 30.0  # the kernel at the bottom still counts, in its ancestor
    assert len(T.encode(rep)) < 1 << 20


def test_a_wide_module_tree_keeps_the_shallowest_hottest(tmp_path):
    rep = _analyze(tmp_path, "wide.json.gz", wide_modules(bound.MAX_NODES + 2000, 100))
    tree = rep.modules
    assert len(tree.nodes) == bound.MAX_NODES
    assert all(nd.id == i for i, nd in enumerate(tree.nodes))
    assert all(c < len(tree.nodes) for nd in tree.nodes for c in nd.children)
    cut = [n for n in rep.summary.notes if n.startswith(bound.CUT)]
    assert cut == [
        f"{bound.CUT}2000 of {bound.MAX_NODES + 2000} modules left out (the deepest, "
        f"then the coldest; at most {bound.MAX_NODES} kept)"
    ], rep.summary.notes
    assert cut[0] in tree.note


def test_the_total_bound_halves_what_grows_and_says_so():
    """A real report (tinygpt, with_stack: modules, hot lines, findings) under a 40 KB bound: it
    fits, each cut is a line in the notes, and what is kept is the head of each ranking."""
    rep = analyze_file(trace("tinygpt_naive"), Options(workspace=[SRC]))
    whole = T.decode_report(T.encode(rep))
    assert len(T.encode(rep)) > 40_000 and not any(n.startswith(bound.CUT) for n in rep.summary.notes)
    bound.bound(rep, max_bytes=40_000)
    assert len(T.encode(rep)) <= 40_000
    cuts = [n for n in rep.summary.notes if n.startswith(bound.CUT)]
    assert cuts and all("left out" in c or "not listed" in c for c in cuts), cuts
    assert [d.code for d in rep.diagnostics] == [d.code for d in whole.diagnostics][: len(rep.diagnostics)]
    assert rep.hot_lines == whole.hot_lines[: len(rep.hot_lines)]
