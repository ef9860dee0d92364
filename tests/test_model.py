"""The trace model's indexes on real traces."""

import os

import pytest

from conftest import SRC, trace
from profd.server.engine import loader, model
from profd.server.engine.model import is_user_path, parse_frame
from profd.server.engine.sourcemap import SourceMap


@pytest.fixture(scope="module")
def naive():
    doc, sha, size = loader.load(trace("tinygpt_naive"))
    return model.build(doc)


def test_steps_are_the_profiler_steps(naive):
    assert [s.name for s in naive.steps] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert all(s.dur > 30_000 for s in naive.steps)


def test_every_kernel_is_linked_to_its_launch(naive):
    launched = [g for g, li in enumerate(naive.launcher) if li >= 0]
    assert len(launched) == len(naive.gpu)
    for g in launched[:200]:
        call = naive.cpu[naive.launcher[g]]
        assert call.cat in ("cuda_runtime", "cuda_driver")
        assert call.args.correlation == naive.gpu[g].args.correlation
        assert call.ts <= naive.gpu[g].ts  # a kernel never starts before its launch


def test_parents_contain_their_children(naive):
    for i in range(0, len(naive.cpu), 7):
        p = naive.parent[i]
        if p >= 0:
            e, pe = naive.cpu[i], naive.cpu[p]
            assert pe.ts <= e.ts and e.ts + e.dur <= pe.ts + pe.dur + 0.01


def test_backward_ops_link_to_their_forward_op(naive):
    bwd = [i for i, e in enumerate(naive.cpu) if e.cat == "cpu_op" and e.name == "MmBackward0"]
    assert bwd
    for i in bwd:
        fw = naive.fwd_of[i]
        assert fw >= 0 and naive.cpu[fw].name in (
            "aten::mm",
            "aten::matmul",
            "aten::linear",
            "aten::addmm",
            "aten::t",
            "aten::view",
        )
        assert naive.frame_of[fw] >= 0  # the forward op has a user frame to charge


def test_memory_events_have_owners(naive):
    owned = [x for x in naive.memory if x.owner >= 0]
    assert len(owned) > 0.9 * len(naive.memory)


def test_user_frames_skip_libraries():
    assert parse_frame("train.py(70): main").user
    assert parse_frame("/home/x/exp/model.py(3): f").user
    assert not parse_frame("torch/nn/modules/module.py(1771): _call_impl").user
    assert not parse_frame("/usr/lib/python3.12/threading.py(10): run").user
    assert not parse_frame("/x/site-packages/transformers/a.py(1): f").user
    assert not parse_frame("contextlib.py(137): __enter__").user
    assert not parse_frame("/tmp/torchinductor_root/5f/c5f3.py(46): call").user
    assert parse_frame("<built-in method item of Tensor object at 0x7f>") is None
    assert not is_user_path("<frozen runpy>")


def test_source_map_exact_prefix_suffix_and_ambiguity(tmp_path):
    (tmp_path / "a" / "pkg").mkdir(parents=True)
    (tmp_path / "b" / "pkg").mkdir(parents=True)
    (tmp_path / "a" / "pkg" / "model.py").write_text("x = 1\n")
    (tmp_path / "b" / "pkg" / "model.py").write_text("x = 2\n")
    (tmp_path / "a" / "train.py").write_text("y = 1\n")
    sm = SourceMap([str(tmp_path)], [("/remote/exp", str(tmp_path / "b"))])
    assert sm.resolve("/remote/exp/pkg/model.py") == str(tmp_path / "b" / "pkg" / "model.py")  # prefix map
    assert sm.resolve("train.py") == str(tmp_path / "a" / "train.py")  # unique suffix
    assert sm.resolve("a/pkg/model.py") == str(tmp_path / "a" / "pkg" / "model.py")  # relative to root
    assert sm.resolve("/elsewhere/pkg/model.py") is None  # two equally good candidates: ambiguous
    assert sm.resolve("/elsewhere/a/pkg/model.py") == str(tmp_path / "a" / "pkg" / "model.py")
    assert sm.resolve("nothing.py") is None


def test_source_map_never_takes_a_file_that_only_shares_the_name(tmp_path):
    """Issue 16: flashinfer/fused_moe/core.py(1633) landed on the workspace's own 540-line core.py,
    moca/.../pipeline/model.py on a model.py elsewhere."""
    (tmp_path / "server").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "core.py").write_text("x = 1\n" * 540)
    (tmp_path / "server" / "core.py").write_text("x = 1\n" * 2000)
    (tmp_path / "other" / "model.py").write_text("x = 1\n" * 100)
    (tmp_path / "train.py").write_text("x = 1\n" * 100)
    sm = SourceMap([str(tmp_path)])
    assert sm.resolve("flashinfer/fused_moe/core.py") is None  # its directories are not the workspace's
    assert sm.resolve("/x/moca/exp/pipeline/model.py") is None  # pipeline/ is not other/
    assert sm.resolve("/home/x/exp/train.py") == str(tmp_path / "train.py")  # another machine's checkout
    assert sm.resolve("/home/x/exp/train.py", 100) == str(tmp_path / "train.py")
    assert sm.resolve("/home/x/exp/train.py", 101) is None  # a line past the end: not that file
    assert sm.resolve(str(tmp_path / "core.py"), 1633) is None  # even the exact path
    assert sm.resolve("core.py", 540) == str(tmp_path / "core.py")  # a bare name: unique at the root


def test_unmapped_sources_get_one_path_map_note(tmp_path):
    """A real trace with stacks, its sources absent from the workspace: the findings stay on the
    trace's paths and one note says which --path-map would map them; mapped, no note."""
    from profd.server import engine

    bare = engine.analyze_file(trace("tinygpt_naive"), engine.Options(workspace=[str(tmp_path)]))
    assert bare.diagnostics and all(not d.location.path.startswith(str(tmp_path)) for d in bare.diagnostics)
    (note,) = bare.summary.notes
    assert note.startswith(f"no source file of this trace is in the workspace ({tmp_path})")
    assert "train_tinygpt.py" in note and "--workspace DIR" in note
    mapped = engine.analyze_file(trace("tinygpt_naive"), engine.Options(workspace=[SRC]))
    assert mapped.summary.notes == []


def test_workspace_sources_map_trace_frames():
    sm = SourceMap([SRC])
    assert sm.resolve("train_tinygpt.py") == os.path.join(SRC, "train_tinygpt.py")
