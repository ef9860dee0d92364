"""Where findings land and how steps are measured, on real H200 traces (issue 15, "Locations and
summaries"): no work pinned on ``prof.step()``, a host sync inside a compiled forward on the line
that breaks the graph, steps measured on the GPU timeline too, "held by" grouped by family."""

import glob
import os

import pytest

from profd.server.engine import Options, analyze_file, loader
from profd.server.engine.analyze import analyze_trace
from profd.server.engine.model import build
from profd.server.engine.sourcemap import source_line

from conftest import EXAMPLES, SRC, report_of

REC = os.path.join(EXAMPLES, "recorded")
REC_SRC = os.path.join(REC, "src")
WORKSPACE = [SRC, REC_SRC]


def rec(name):
    return report_of(name, workspace=tuple(WORKSPACE))


def _shipped_paths():
    return sorted(glob.glob(os.path.join(EXAMPLES, "*.json.gz")) + glob.glob(os.path.join(REC, "*.json.gz")))


def _shipped():
    return sorted(os.path.basename(p).split(".")[0] for p in _shipped_paths())


@pytest.mark.parametrize("name", _shipped())
def test_no_finding_and_no_gpu_work_on_prof_step(name):
    """A frame already running when the profiler started is named by the line it was at, often
    ``prof.step()``: a function-precision finding goes on its ``def`` line instead, and no line
    resolved to ``prof.step()`` carries the program's GPU work."""
    r = rec(name)
    for d in r.diagnostics:
        text = source_line(d.location.path, d.location.line) if d.location.line else None
        assert not (text and "prof.step()" in text), (d.code, d.location)
    for h in r.hot_lines:
        text = source_line(h.path, h.line) or ""
        if "prof.step()" in text:
            assert h.gpu_us == 0 and h.launches == 0, h


def test_function_precision_lands_on_the_def_line():
    r = rec("graph_break_whole")
    fn = [d for d in r.diagnostics if d.location.precision == "function"]
    assert fn, "the trace has function-precision findings (backward ops under main)"
    for d in fn:
        assert source_line(d.location.path, d.location.line).lstrip().startswith("def "), d.location


def test_nesting_survives_python_frames_whose_exit_was_lost():
    """Dynamo's frame swaps leave ``<built-in method apply ...>`` frames 'running' to the trace's
    end; the eager op between two compiled graphs must still nest under the compiled forward."""
    doc, _, _ = loader.load(os.path.join(REC, "graph_break_break.json.gz"))
    m = build(doc)
    ops = [i for i, e in enumerate(m.cpu) if e.name == "aten::is_nonzero"]
    assert len(ops) == 3  # one per step
    for i in ops:
        fr = m.frames[m.frame_of[i]]
        assert (fr.path, fr.function) == ("graph_break.py", "forward")


def test_host_sync_in_a_compiled_forward_lands_on_the_graph_break_line():
    (d,) = [d for d in rec("graph_break_break").diagnostics if d.code == "host-sync"]
    assert d.location.path.endswith("graph_break.py")
    assert (d.location.line, d.location.precision) == (25, "statement")  # `if h.mean() > 0:`
    assert d.evidence["per_step"] == 1


def test_steps_measured_on_the_gpu_timeline_when_the_cpu_runs_ahead():
    """sync_wait_none queues 20 4096² GEMMs per step and never waits: the CPU's ProfilerStep
    ranges (~1 ms) say how fast it queues; the GPU needs ~3.7 ms for each step's work."""
    s = rec("sync_wait_none").summary
    assert all(st.bound == "gpu" for st in s.steps)
    for st in s.steps:
        assert st.gpu_work_us > 3 * st.dur_us
        assert st.step_us == st.gpu_span_us >= st.gpu_work_us
    # its twin with the sync: the CPU range already holds the GPU's time, and the GPU bounds it
    for st in rec("sync_wait_busy").summary.steps:
        assert st.bound == "gpu" and st.step_us == st.dur_us
    # launch-bound: the CPU bounds every step
    for st in report_of("seed_n64_bf16").summary.steps:
        assert st.bound == "cpu" and st.step_us == st.dur_us and st.gpu_work_us < 0.1 * st.dur_us


def test_step_share_uses_the_bounding_side():
    """Shares of 'the step' divide by the step the program lives, not the CPU's range."""
    from profd.server.engine.analyses import analyze
    from profd.server.engine.context import Context

    doc, _, _ = loader.load(os.path.join(REC, "sync_wait_none.json.gz"))
    m = build(doc)
    ctx = Context(m, analyze(m), "t", Options())
    cpu_mean = sum(s.dur for s in m.steps) / len(m.steps)
    assert ctx.mean_step_us > 3 * cpu_mean


def test_held_by_groups_kernels_by_family():
    r = report_of("seed_n4096_bf16")
    (d,) = [d for d in r.diagnostics if d.code == "compute-bound"]
    fams = d.evidence["families"]
    assert [f["class"] for f in fams][:2] == ["gemm", "elementwise"]
    assert sum(f["total_us"] for f in fams) == pytest.approx(r.summary.cuda_total_us, abs=0.01)
    assert all(a["total_us"] >= b["total_us"] for a, b in zip(fams, fams[1:]))
    assert d.message.count("gemm") == 1


CORPUS = os.path.join(EXAMPLES, "corpus")


def corpus_model(name):
    doc, _, _ = loader.load(os.path.join(CORPUS, "traces", name + ".json.gz"))
    return build(doc)


def test_a_lambda_keeps_its_own_line():
    """gemm_precision.py runs `gemm = lambda: x @ w` (line 25) inside main (def line 9): the
    lambda's frame is named by its own first line, which is where the GEMM is."""
    r = analyze_file(
        os.path.join(CORPUS, "traces", "gemm_fp32.json.gz"), Options(workspace=[os.path.join(CORPUS, "src")])
    )
    (d,) = [d for d in r.diagnostics if d.code == "fp32-matmul"]
    assert d.location.line == 25


def test_cpu_far_ahead_steps_are_gpu_bound():
    """cpu_ahead.py queues 24 8192³ bf16 GEMMs a step and never waits: ProfilerStep ranges of
    ~1.7 ms, GPU work of ~38 ms a step."""
    from profd.server.engine.analyses import analyze

    m = corpus_model("cpu_ahead")
    for g in analyze(m).step_gpu:
        assert g.bound == "gpu" and g.work_us > 10 * g.cpu_us and g.step_us >= g.work_us


def test_held_by_families_on_resnet():
    """ResNet-18: batch norm's kernels are the largest by exact name, but the 26 conv variants
    together hold the GPU longest."""
    from profd.server.engine.analyses import analyze
    from profd.server.engine.rules.bound import kernel_families

    m = corpus_model("resnet18_train")
    a = analyze(m)
    per: dict = {}
    for e in m.gpu:
        per[e.name] = per.get(e.name, 0.0) + e.dur
    largest = max(per, key=per.get)
    assert "bn_" in largest  # by name, batch norm first
    fams = kernel_families(m, a)
    assert fams[0][0] == "conv" and fams[0][1]["kernels"] > 10


@pytest.mark.parametrize("name,unprofiled_us", [("gemm_fp8", 109.1), ("graphs_replay", 62.4)])
def test_verdict_takes_the_profilers_cpu_slowdown_out(name, unprofiled_us):
    """Both run at their GPU work's pace unprofiled (the recording's own timing, in its meta), but
    the profiled CPU ranges are longer than the GPU work and the busy share is 'balanced': with the
    profiler's slowdown taken out of the CPU side, the GPU bounds most steps."""
    from profd.server.engine.analyses import analyze, verdict

    m = corpus_model(name)
    a = analyze(m)
    assert 30 <= a.busy_pct < 80  # the busy share alone would say balanced
    work = [g.work_us for g in a.step_gpu][1:]
    assert all(abs(w - unprofiled_us) < 0.2 * unprofiled_us for w in work)  # GPU work = the real step
    assert verdict(m, a) == "compute-bound"
    # and a launch-bound twin stays overhead-bound (graphs_eager: 487 µs unprofiled, 54 µs of GPU work)
    m2 = corpus_model("graphs_eager")
    assert verdict(m2, analyze(m2)) == "overhead-bound"


@pytest.mark.parametrize("path", _shipped_paths(), ids=lambda p: os.path.basename(p).split(".")[0])
def test_a_frames_token_keys_at_once_are_line_key_token_by_token(path):
    """Context.line_key_ids keys a frame's statement tokens at once (_token_keys: a line per site,
    not per token, where a loop's frame holds a token per statement per pass): each key equals
    what ``line_key`` gives that token alone, down to the call site it carries, on every shipped
    trace with its source."""
    from profd.server.engine.statements import frame_shapes

    done = analyze_trace(path, Options(workspace=WORKSPACE))
    ctx, m = done.context, done.model
    if m.has_call_from:
        pytest.skip("ops name their own lines: no frame is keyed at once")
    sh, st = frame_shapes(m), ctx.statements
    if not len(sh.frames):
        pytest.skip("recorded without with_stack: no user frame")
    compared = 0
    for k, f in enumerate(sh.frames):
        if st.resumed(f):
            continue
        toks = sh.tokens(k)
        for t, got in zip(toks, ctx._token_keys(f, toks)):
            want = ctx.line_key(t) if m.token[t] == t else None
            assert (got is None) == (want is None), (f, t)
            if want is not None:
                assert got == want and got.site is want.site, (f, t, got, want)
                compared += 1
    assert compared > 0


@pytest.mark.parametrize("path", _shipped_paths(), ids=lambda p: os.path.basename(p).split(".")[0])
def test_what_a_token_calls_once_per_shape_is_what_it_calls_alone(path):
    """call_of and the labelled method are made once per shape of token (FrameShapes.tokshape): for
    every statement token of every shipped trace they equal what the token gives alone, and the
    token's shape is found at its own place among its frame's tokens."""
    from profd.server.engine import statements as S

    done = analyze_trace(path, Options(workspace=WORKSPACE))
    m = done.model
    sh = S.frame_shapes(m)
    if not len(sh.toks):
        pytest.skip("recorded without with_stack: no statement token")
    for t in sh.toks:
        assert sh.toks[sh.tok_off[sh.place[m.frame_of[m.parent[t]]]] + sh.tokpos[t]] == t
        assert S.call_of(m, t) == S._call_of(m, t)
        assert S._labelled_method(m, t) == S._find_labelled_method(m, t)
    assert len(m._calls) <= len(set(sh.tokshape))


def test_a_parsed_file_is_walked_once_in_asts_order():
    """The statement and module passes walk a parsed file once per frame line they place;
    ``statements.walked`` lists a node's walk once and keeps it: the same nodes in ast.walk's
    breadth-first order (``_resume_floor`` takes the first loop as the outermost), and the same list
    on the next call. On every shipped workload source."""
    import ast

    from profd.server.engine.statements import walked

    files = sorted(glob.glob(os.path.join(SRC, "*.py")))
    assert files
    for path in files:
        with open(path) as f:
            tree = ast.parse(f.read())
        first = walked(tree)
        assert [type(n) for n in first] == [type(n) for n in ast.walk(tree)]
        assert all(a is b for a, b in zip(first, ast.walk(tree)))
        assert walked(tree) is first
        funcs = [n for n in first if isinstance(n, ast.FunctionDef)]
        for fn in funcs:
            assert all(a is b for a, b in zip(walked(fn), ast.walk(fn)))
            assert len(walked(fn)) == sum(1 for _ in ast.walk(fn))
