"""The pass table (server/engine/passes.py): each pass, its reference (Python) against its native
(C) implementation, on every shipped and corpus trace (bench/snapshot.py's list), comparing what
the pass returns (types, order, float bits), not only the report; and one representation of the
events after reading, so a file runs every pass one way.
"""

import gzip
import logging
import os
import sys

import msgspec
import pytest

from conftest import ROOT, SRC, trace
from profd.server import engine
from profd.server.engine import loader, model, passes

sys.path.insert(0, os.path.join(ROOT, "bench"))
from snapshot import cases, report_bytes  # noqa: E402

pytestmark = pytest.mark.skipif(
    passes.native() is None, reason=passes.STALE or "the _scan extension is not built"
)

CASES = cases()
RAN: set[str] = set()  # the passes some case ran both ways (test_every_pass_ran)


def _both_ways(case) -> tuple[bytes, list]:
    _id, paths, workspace, path_map = case
    with passes.differential() as runs:
        report = report_bytes(paths, workspace, path_map)
    return report, runs


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_pass_returns_what_its_reference_does(case, caplog):
    with caplog.at_level(logging.ERROR, logger="profd"):
        report, runs = _both_ways(case)
    assert [(r.name, r.differs) for r in runs if r.differs] == []
    # A pass that raises (a stale extension without it, a bad argument) crashes the analysis into
    # an error report, or a rule into the log: neither compares anything, so either fails here.
    # Only a file that is not a trace ends in an error report.
    assert not report.startswith(b"error:") or report.startswith(b"error: TraceError: "), report[:300]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    names = {r.name for r in runs}
    RAN.update(names)
    if not report.startswith(b"error:"):
        assert "classify" in names and "hot_sums" in names  # the file ran the native passes


def test_every_pass_ran():
    """Every pass of the table ran both ways on some real trace (``line_tokens`` too: no test ran
    its reference before the table)."""
    if not RAN:  # run on its own: the traces that between them run every pass
        for case in CASES:
            RAN.update(r.name for r in _both_ways(case)[1])
            if RAN >= set(passes.PASSES):
                break
    assert set(passes.PASSES) - RAN == set()


def test_differs_sees_order_types_and_float_bits():
    from array import array

    assert passes.differs({"a": 1, "b": 2}, {"b": 2, "a": 1})  # same items, another order
    assert passes.differs(array("i", [1]), array("q", [1]))
    assert passes.differs([0.0], [-0.0]) and passes.differs((1,), [1])
    assert passes.differs(float("nan"), float("nan")) is None
    assert passes.differs({"k": [array("d", [1.5]), "x"]}, {"k": [array("d", [1.5]), "x"]}) is None


def test_columns_made_in_place_and_copied_from_bytes_agree():
    """The native passes write their columns into the arrays they return (_passes.c's new_column,
    on the array layout it checks at import); where that check fails they return bytes, which
    passes.column() copies into arrays. On this Python the layout checks out, and a real trace's
    passes (each against its reference) and report are the same both ways."""
    from array import array

    built = passes.native()
    assert built.array_columns() is True  # CPython 3.10-3.13's array layout, as _passes.c reads it
    got = built.take(array("i", [5, 6, 7]), array("i", [2, 0, -1]), -9)
    assert type(got) is array and got.tolist() == [7, 5, -9]
    case = next(c for c in CASES if c[0] == "tinygpt_naive")  # real: stacks, shapes, memory
    in_place, runs = _both_ways(case)
    assert [r.name for r in runs if r.differs] == []
    try:
        assert built.array_columns(False) is False
        assert type(built.take(array("i", [5]), array("i", [0]), -1)) is bytes
        copied, runs = _both_ways(case)
    finally:
        built.array_columns(True)
    assert [r.name for r in runs if r.differs] == []
    assert copied == in_place


# ---- one representation after reading ---------------------------------------------------------
SEED = gzip.decompress(open(trace("seed_n64_bf16"), "rb").read())  # real


def _write(tmp_path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def _report(path: str) -> dict:
    """The report less what names the file (its path, size and hash)."""
    rep = msgspec.to_builtins(engine.analyze_file(path, engine.Options(workspace=[SRC])))
    del rep["trace"]
    return rep


def test_a_file_the_scanner_declines_is_read_into_its_events(tmp_path):
    """Synthetic (the real seed trace with one event's key escaped, which the scanner declines and
    msgspec reads): msgspec decodes it and the scanner re-reads its events, so it runs the native passes,
    and its report is the original's."""
    original = _report(_write(tmp_path, "t.json", SEED))
    i = SEED.index(b'"name": "', SEED.index(b'"traceEvents"'))  # an event's
    path = _write(tmp_path, "t.json", SEED[:i] + b'"na\\u006de"' + SEED[i + 6 :])  # same path
    with pytest.raises(loader._Declined):
        loader._load_stream(path, passes.native())
    doc, _, _ = loader.load(path)
    assert passes.for_events(doc.traceEvents) is passes.NATIVE
    assert model.build(doc).passes is passes.NATIVE
    assert _report(path) == original


def test_values_the_scanner_cannot_hold_run_every_reference_pass(tmp_path):
    """Synthetic (the real seed trace with one correlation id written as a string, which msgspec
    keeps a str): the events stay msgspec's and every pass of that file is the reference, never a
    mix; the report is the one the reference path gives."""
    key = b'"correlation": '
    i = SEED.index(key) + len(key)
    j = SEED.index(b",", i)
    path = _write(tmp_path, "string_id.json", SEED[:i] + b'"' + SEED[i:j].strip() + b'"' + SEED[j:])
    doc, _, _ = loader.load(path)
    assert passes.for_events(doc.traceEvents) is passes.REFERENCE
    assert model.build(doc).passes is passes.REFERENCE
    native = _report(path)
    with passes.use_native(False):
        assert passes.native() is None
        assert _report(path) == native


def test_the_span_unions_match_their_reference_on_odd_spans():
    """Synthetic: spans ending before they start, ties, -0.0, infinities, unsorted input and NaNs
    (the native merges hand those to the reference), each merged whole and through a mask; the
    holes they leave in ranges; a column that is not (start, end) pairs is refused both ways."""
    import random
    from array import array

    odd = [(5.0, 3.0), (5.0, 7.0), (0.0, 1.0), (-0.0, 2.0), (1.0, 1.0), (2.0, 2.5), (9.0, 9.0), (8.0, 12.0)]
    odd += [(float("inf"), float("inf")), (-float("inf"), -1.0), (3.0, -2.0), (2.5, 2.5)]
    rng = random.Random(32)
    cases = [odd, [], [(1, 2), (0, 5)], [(float("nan"), 1.0), (0.0, 2.0)]]
    cases += [rng.sample(odd, len(odd)) for _ in range(20)]
    for spans in cases:
        flat = passes.Spans.of(spans).flat
        mask = bytes(rng.randrange(2) for _ in spans)
        p = passes.PASSES["merge"]
        for m in (None, mask):
            assert passes.differs(p.reference(flat, m), p.native(flat, m)) is None, (spans, m)
        merged = p.reference(flat, None)
        p = passes.PASSES["span_index"]
        assert passes.differs(p.reference(merged), p.native(merged)) is None, spans
        starts, ends = array("d", [0.0, 2.0, 6.0]), array("d", [1.5, 5.0, 20.0])
        for lo, hi in ((0.0, 10.0), (-5.0, 3.0), (2.0, 2.0), (1.0, float("inf")), (float("nan"), 4.0)):
            p = passes.PASSES["gaps"]
            assert passes.differs(p.reference(merged, lo, hi), p.native(merged, lo, hi)) is None
            p = passes.PASSES["long_gaps"]
            for share in (0.0, 0.25):
                want = p.reference(merged, lo, hi, starts, ends, share)
                assert passes.differs(want, p.native(merged, lo, hi, starts, ends, share)) is None
        groups = array("i", [rng.randrange(-1, 3) for _ in spans])
        p = passes.PASSES["merge_groups"]
        assert passes.differs(p.reference(flat, groups, mask, 3), p.native(flat, groups, mask, 3)) is None
    for name, args in (
        ("merge", (array("d", [1.0]), None)),
        ("merge", (array("d", [1.0, 2.0]), b"\x01\x01")),
    ):
        for impl in (passes.PASSES[name].reference, passes.PASSES[name].native):
            with pytest.raises(ValueError):
                impl(*args)


def test_spans_read_as_their_pairs():
    """A Spans column reads as the (start, end) tuples it holds: indexing, iteration, adding two,
    equality with the list of tuples it was made from."""
    s = passes.Spans.of([(0.0, 1.0), (2.0, 3.5)])
    assert len(s) == 2 and bool(s) and not passes.Spans()
    assert list(s) == [(0.0, 1.0), (2.0, 3.5)] and s == [(0.0, 1.0), (2.0, 3.5)]
    assert s[0] == (0.0, 1.0) and s[-1] == (2.0, 3.5)
    with pytest.raises(IndexError):
        s[2]
    assert list(s + passes.Spans.of([(-1.0, 0.0)])) == [(0.0, 1.0), (2.0, 3.5), (-1.0, 0.0)]


def test_nest_sorts_runs_and_shuffles_as_its_reference(tmp_path):
    """Synthetic: one thread's events in a few sorted runs (merged by nest's run merge), in dozens
    of runs that overlap a little (a trace's order: events moved a little earlier, so each merge
    moves only its overlap), and shuffled (qsort), with equal starts and equal durations, sorted
    and nested as the reference does."""
    import json
    import random

    rng = random.Random(32)
    base = [(float(rng.randrange(0, 5000)), float(rng.choice([1, 2, 5, 50, 500]))) for _ in range(3000)]
    order = lambda v: (v[0], -v[1])  # noqa: E731
    runs = sorted(base[:1000], key=order) + sorted(base[1000:], key=order)
    local = sorted(base, key=order)
    for _ in range(41):  # an odd number of runs: one waits a round unmerged
        p = rng.randrange(60, len(local))
        local.insert(p - rng.randrange(1, 50), local.pop(p))
    breaks = sum(order(a) > order(b) for a, b in zip(local, local[1:]))
    assert 20 < breaks < 3000 // 16  # the run merge's case, not qsort's
    for k, spans in enumerate((runs, local, rng.sample(base, len(base)))):
        events = [
            {"ph": "X", "cat": "cpu_op", "name": f"op{j % 7}", "pid": 1, "tid": 1, "ts": ts, "dur": dur}
            for j, (ts, dur) in enumerate(spans)
        ]
        path = _write(tmp_path, f"t{k}.json", json.dumps({"traceEvents": events}).encode())
        evs = list(loader.load(path)[0].traceEvents)
        assert passes.for_events(evs) is passes.NATIVE
        p = passes.PASSES["nest"]
        ref = p.reference(list(evs), 0, model.NEST_SLACK_US, model.CPU_CAT_CODES)
        got = p.native(list(evs), 0, model.NEST_SLACK_US, model.CPU_CAT_CODES)
        assert passes.differs(ref, got) is None


def test_by_start_sorts_stably_as_its_reference(tmp_path):
    """Synthetic: events in a few sorted runs, in dozens of slightly overlapping runs, and
    shuffled, with many equal starts (and -0.0 beside 0.0): by_start orders them as
    ``sorted(key=ts)`` does, equal starts in their order in the list."""
    import json
    import random

    rng = random.Random(5)
    starts = [float(rng.randrange(0, 300)) for _ in range(2000)] + [0.0, -0.0, 0.0]
    local = sorted(starts)
    for _ in range(25):
        p = rng.randrange(60, len(local))
        local.insert(p - rng.randrange(1, 50), local.pop(p))
    for k, spans in enumerate(
        (sorted(starts[:900]) + sorted(starts[900:]), local, rng.sample(starts, len(starts)))
    ):
        events = [
            {"ph": "X", "cat": "kernel", "name": f"k{j}", "pid": 0, "tid": 7, "ts": ts, "dur": 1.0}
            for j, ts in enumerate(spans)
        ]
        path = _write(tmp_path, f"s{k}.json", json.dumps({"traceEvents": events}).encode())
        evs = list(loader.load(path)[0].traceEvents)
        assert passes.for_events(evs) is passes.NATIVE
        p = passes.PASSES["by_start"]
        ref, got = p.reference(list(evs)), p.native(list(evs))
        assert [e.name for e in got] == [e.name for e in ref]
        assert [e.ts for e in got] == sorted(e.ts for e in evs)


def test_a_native_pass_reads_only_events_from_its_event_lists(monkeypatch):
    """Every native pass a real trace's analysis calls, called again with each list of events it
    was given replaced by one of non-events (floats): it raises TypeError, or returns what it
    returned on the events when it reads none of them (launchers with no launch calls); never reads
    a float as an event. The passes check each event where they read it, not in a pass over the
    whole list first (issue 32: that pass cost 3% of a 255 MB trace's analysis)."""
    mod = passes.native()
    calls: list = []

    def record(p):
        def run(*args):
            calls.append((p.name, [list(a) if type(a) is list else a for a in args]))
            return p.native(*args)

        return run

    monkeypatch.setattr(passes, "_checking", passes.Implementation("recording", record))
    engine.analyze_file(trace("tinygpt_naive.json.gz"))
    checked = set()
    for name, args in calls:
        lists = [k for k, a in enumerate(args) if type(a) is list and a and isinstance(a[0], mod.Event)]
        if not lists:
            continue
        native = passes.PASSES[name].native
        want = native(*[list(a) if type(a) is list else a for a in args])
        for k in lists:
            foreign = [list(a) if type(a) is list else a for a in args]
            foreign[k] = [1.5] * len(args[k])
            try:
                got = native(*foreign)
            except TypeError:
                checked.add(name)
                continue
            assert passes.differs(want, got) is None, f"{name} read argument {k}'s floats"
    # (cpu_total reads the model's columns, no event: it returned what it did on the events)
    assert {"classify", "nest", "frames", "owners", "launchers", "hot_sums"} <= checked


def test_launchers_join_ids_repeated_across_processes_as_its_reference(tmp_path):
    """Synthetic (no real trace repeats correlation ids across processes this often): launch calls
    of four processes, pids written 1, 1.0 (equal to 1), "1" (not equal to it) and 2, sharing ids,
    some called twice; kernels of each id. The native join (one table keyed by id)
    gives each kernel the call the reference's dicts do: the (pid, id) first seen last, its last
    call."""
    import json
    import random

    rng = random.Random(7)
    events = []
    for k in range(400):
        pid = rng.choice([1, 1.0, "1", 2])
        corr = rng.randrange(0, 60)
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": pid,
                "tid": 1,
                "ts": float(k),
                "dur": 0.5,
                "args": {"correlation": corr},
            }
        )
    for k in range(80):
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{k % 5}",
                "pid": 0,
                "tid": 7,
                "ts": 500.0 + k,
                "dur": 0.2,
                "args": {"correlation": k},
            }
        )
    path = _write(tmp_path, "ids.json", json.dumps({"traceEvents": events}).encode())
    evs = list(loader.load(path)[0].traceEvents)
    assert passes.for_events(evs) is passes.NATIVE
    cpu = [e for e in evs if e.cat == "cuda_runtime"]
    gpu = [e for e in evs if e.cat == "kernel"]
    launches = __import__("array").array("i", range(len(cpu)))
    p = passes.PASSES["launchers"]
    ref, got = p.reference(cpu, launches, gpu), p.native(cpu, launches, gpu)
    assert passes.differs(ref, got) is None
    assert sum(1 for i in ref if i >= 0) > 40  # most kernels found their call
    pids = {type(e.pid) for e in cpu}
    assert {int, str} <= pids, pids


def test_grouping_by_identity_merges_equal_names_as_the_reference(tmp_path):
    """Synthetic from a real trace (no real kernel or op name is that long): the native passes that
    group events under a key (kernel_configs, launch_runs, hot_sums, gpu_keys; frames' name codes)
    look a group up by the identity of the key's objects before the dict. The scanner makes one
    object of each name up to 64 KB; a longer name is a new object each time it occurs, equal to
    the others. tinygpt_naive's most launched kernel and an op of at most a hundred calls renamed
    to 66 KB names: their events group as the reference's dicts group them (one key each, not one
    per object)."""
    import collections
    import json

    doc = json.loads(
        gzip.decompress(open(os.path.join(ROOT, "examples", "tinygpt_naive.json.gz"), "rb").read())
    )
    events = doc["traceEvents"]
    kernels = collections.Counter(e["name"] for e in events if e.get("cat") == "kernel")
    ops = collections.Counter(e["name"] for e in events if e.get("cat") == "cpu_op")
    top = kernels.most_common(1)[0][0]
    op = next(name for name, n in ops.most_common() if n <= 100)
    long_name, long_op = top + " " * (66 << 10), op + " " * (66 << 10)
    for e in events:
        if e.get("cat") == "kernel" and e["name"] == top:
            e["name"] = long_name
        elif e.get("cat") == "cpu_op" and e["name"] == op:
            e["name"] = long_op
    path = _write(tmp_path, "long_names.json", json.dumps(doc).encode())
    evs = loader.load(path)[0].traceEvents
    for name, count in ((long_name, kernels[top]), (long_op, ops[op])):
        named = [e.name for e in evs if e.name == name]
        assert len(named) == count and len({id(n) for n in named}) == count  # each its own object
    del evs, named
    with passes.differential() as runs:
        engine.analyze.analyze_file(path)
    assert {"kernel_configs", "launch_runs", "hot_sums", "gpu_keys", "frames"} <= {r.name for r in runs}
    assert [(r.name, r.differs) for r in runs if r.differs] == []


def test_grouping_past_the_identity_caches_bound_as_the_reference(tmp_path):
    """Synthetic (no real trace has 70,000 distinct kernels): the identity cache in front of a
    pass's dict holds at most 65,536 combinations, so memory stays bounded; the kernels past it
    are found through the dict. Each of 70,000 names twice, the second round in another order:
    gpu_keys numbers them as its reference does, the names past the bound included."""
    import json
    import random

    names = [f"k{j}" for j in range(70_000)]
    again = random.Random(3).sample(names, len(names))
    events = [
        {"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": float(t), "dur": 1.0}
        for t, n in enumerate(names + again)
    ]
    path = _write(tmp_path, "many.json", json.dumps({"traceEvents": events}).encode())
    gpu = list(loader.load(path)[0].traceEvents)
    assert passes.for_events(gpu) is passes.NATIVE
    launcher = __import__("array").array("i", [-1]) * len(gpu)
    p = passes.PASSES["gpu_keys"]
    ref, got = p.reference(gpu, launcher, launcher[:0], []), p.native(gpu, launcher, launcher[:0], [])
    assert passes.differs(ref, got) is None
    assert len(got[0]) == 70_000 and got[1][70_000:].tolist() == [int(n[1:]) for n in again]


@pytest.mark.skipif(passes.native() is None, reason="the native layer is not built")
def test_the_readme_states_the_scanners_event_sizes():
    """The README's sizes of the scanner's events are those of a real trace's events: a python
    frame, an allocator sample, and an op's prefix plus a slot for each field it has (a CPU op with
    its id and shapes, a kernel with its ids, grid and block: the most common of each kind). Each
    op's size is its prefix and its present fields, 8 bytes each, counted from what it reads back:
    a slot kept for an absent field (or a field lost) shows here."""
    import collections
    import re

    doc, _, _ = loader.load(os.path.join(ROOT, "examples", "tinygpt_naive.json.gz"))
    size: dict = collections.defaultdict(collections.Counter)
    op_fields = ("external_id", "correlation", "seq", "fwd_tid", "nbytes")
    op_objects = ("input_dims", "input_types", "grid", "block", "name", "call_from")
    for e in doc.traceEvents:
        kind = "frame" if e.cat == "python_function" else "sample" if e.name == "[memory]" else e.cat
        size[kind][sys.getsizeof(e)] += 1
        if type(e).__name__ == "OpEvent":
            a = e.args
            n = (e.id is not None) + (
                sum(getattr(a, f) is not None for f in op_fields)
                + sum(getattr(a, f) not in (None, b"") for f in op_objects)
                if a is not None
                else 0
            )
            assert sys.getsizeof(e) == 64 + 8 * n, (e, n)
    common = {k: c.most_common(1)[0][0] for k, c in size.items()}
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    m = re.search(
        r"(\d+) bytes for a python frame, (\d+) for an allocator sample, and for an op (\d+) plus (\d+) for "
        r"each field it has: (\d+) for a CPU op with its id and shapes, (\d+) for a kernel",
        text,
    )
    assert m, "the README no longer states the event sizes"
    assert tuple(map(int, m.groups())) == (
        common["frame"],
        common["sample"],
        64,
        8,
        common["cpu_op"],
        common["kernel"],
    )


def _shapes_args(name: str) -> tuple:
    from profd.server.engine.statements import _frame_shapes_args

    doc = loader.load(name)[0]
    return _frame_shapes_args(model.build(doc))


@pytest.mark.parametrize(
    "name",
    [
        trace("tinygpt_naive.json.gz"),
        trace("seed_n4096_bf16_compiled.json.gz"),
        os.path.join(ROOT, "examples", "wild", "switchtf__result_trace.json.gz"),
    ],
)
def test_a_pass_started_beside_returns_what_it_returns_in_place(name):
    """frame_shapes started on another thread (passes.start: it reads the events with the GIL
    released) returns, column for column, what it returns called in place, while this thread
    runs Python meanwhile (new strs made and hashed, as the analyses and rules do)."""
    args = _shapes_args(name)
    want = passes.NATIVE.frame_shapes(*args)
    started = passes.start(passes.NATIVE, "frame_shapes", *args)
    assert isinstance(started, passes.Started)
    busy = {f"{k}:{k * 7}": k for k in range(50_000)}
    got = started.result()
    assert passes.differs(want, got) is None
    assert len(got[0]) > 0 and len(busy) == 50_000  # the trace has user frames: shapes were made
    # the reference and a differential run take no thread: they run where they are asked
    assert isinstance(passes.start(passes.REFERENCE, "frame_shapes", *args), passes.Ran)


def test_a_pass_beside_reads_strs_python_has_not_hashed():
    """Synthetic change of a real trace: every event's category replaced by an equal str made anew
    (not interned, its hash not made yet, where the scanner's strs are both). Without the GIL the
    pass compares their characters and takes the GIL back to hash each: the same shapes as on
    the scanner's strs."""
    args = _shapes_args(trace("tinygpt_naive.json.gz"))
    want = passes.NATIVE.frame_shapes(*args)
    for e in args[0]:
        e.cat = "".join(list(e.cat))
    got = passes.start(passes.NATIVE, "frame_shapes", *args).result()
    assert passes.differs(want, got) is None


@pytest.mark.parametrize("name", ["tinygpt_naive.json.gz", "seed_n4096_bf16_compiled.json.gz"])
def test_memory_read_beside_is_the_memory_read_in_place(name):
    """The allocator's samples read beside the analyses (model.start_memory: by_start,
    memory_columns and owners without the GIL, on another thread) are the table read in place,
    column for column, on traces of one and two threads; and the GPU events' sort started beside
    the nesting in build is the sort in place."""
    doc = loader.load(trace(name))[0]
    m = model.build(doc)
    assert m.memory_samples > 0
    samples = list(m._memory_from)
    m.start_memory()
    assert isinstance(m.__dict__["_memory"], passes.Started)
    busy = [str(k) for k in range(50_000)]  # Python runs meanwhile
    got = m.memory
    want = model._memory(passes.NATIVE, samples, m.tindex)
    cols = ("ts", "nbytes", "total_allocated", "total_reserved", "device_type", "addr", "owner", "thread_id")
    for c in cols + ("threads",):
        assert passes.differs(getattr(want, c), getattr(got, c)) is None, c
    assert any(o >= 0 for o in got.owner) and len(busy) == 50_000
    assert [e.ts for e in m.gpu] == sorted(e.ts for e in m.gpu)


def test_a_model_built_beside_is_the_model_built_in_place(monkeypatch):
    """A real trace of two CPU threads, allocator samples and user frames, built with the passes
    that can run beside (passes.start_work: the GPU events' sort and the second thread's nesting
    in build, the memory table and the frame shapes after it) and built with every pass in place:
    the same events in the same order, the same columns."""
    from profd.server.engine.statements import frame_shapes, start_frame_shapes

    name = trace("tinygpt_naive.json.gz")

    def made(beside: bool):
        with monkeypatch.context() as mp:
            if not beside:
                mp.setattr(passes, "start_work", lambda run, uses, work, *a: passes.Ran(work(run, *a)))
            m = model.build(loader.load(name)[0])
            assert len(m.tindex.starts) == 2
            start_frame_shapes(m)
            m.start_memory()
            started = type(m.__dict__["_memory"]), type(m.__dict__["_frame_shapes"])
            return m, started

    a, started = made(True)
    b, in_place = made(False)
    assert started == (passes.Started, passes.Started) and in_place == (passes.Ran, passes.Ran)
    assert [id(e) for e in a.cpu] != [id(e) for e in b.cpu]  # two reads, compared by value
    assert [(e.name, e.ts) for e in a.cpu] == [(e.name, e.ts) for e in b.cpu]
    assert [(e.name, e.ts) for e in a.gpu] == [(e.name, e.ts) for e in b.gpu]
    for col in ("parent", "durs", "cat_codes", "launcher", "frame_of"):
        assert passes.differs(getattr(a, col), getattr(b, col)) is None, col
    for f in frame_shapes(a).__struct_fields__:
        assert passes.differs(getattr(frame_shapes(a), f), getattr(frame_shapes(b), f)) is None, f
    for c in ("ts", "nbytes", "total_allocated", "device_type", "owner", "thread_id", "threads"):
        assert passes.differs(getattr(a.memory, c), getattr(b.memory, c)) is None, c


def test_a_pass_with_no_thread_to_run_beside_runs_in_place(monkeypatch):
    """Where no thread can be started (a daemon worker's memory cap counts a thread's stack, and
    ``Thread.start`` raises), a pass to run beside runs in place and returns the same."""
    import threading

    args = _shapes_args(trace("tinygpt_naive.json.gz"))
    want = passes.NATIVE.frame_shapes(*args)

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    got = passes.start(passes.NATIVE, "frame_shapes", *args)
    assert isinstance(got, passes.Ran)
    assert passes.differs(want, got.result()) is None


def test_ab_scan_times_two_builds_by_turns():
    """bench/ab_scan.py, the scanner's A/B timer: both builds (here the one built, twice) scan a
    shipped trace in turn and read the same events; a file without events is refused by name."""
    from ab_scan import _build, scan_times

    built = passes.native().__file__
    data = gzip.decompress(open(trace("tinygpt_naive"), "rb").read())
    times = scan_times({"A": _build("a", built), "B": _build("b", built)}, data, 3)
    assert [len(t) for t in times.values()] == [3, 3]
    assert all(t >= 0 for ts in times.values() for t in ts)
    with pytest.raises(SystemExit, match="no traceEvents array"):
        scan_times({"A": passes.native()}, b'{"other": 1}', 1)


def _medians_both_ways(runs: list) -> None:
    p = passes.PASSES["run_medians"]
    ref, got = p.reference(list(runs)), p.native(list(runs))
    assert passes.differs(ref, got) is None, (ref, got)


def test_run_medians_select_as_the_sort_gives():
    """Synthetic (orders and values no trace is known to hold, beside launch-storm's real runs in
    the differential cases above): the medians found by selection equal the sorted ones bit for
    bit: odd and even counts, runs of equal values, orders that defeat a median-of-three pivot
    (sorted, reversed, organ pipe: the selection sorts the rest past its rounds), zeros of both
    signs in the middle (the sort's order decides the sign: the reference answers), a NaN, ints."""
    from hypothesis import given
    from hypothesis import strategies as st
    from test_fuzz import SETTINGS

    def runs(xs):
        return [(float(x), float(-x) * 0.5 + 7.0, j) for j, x in enumerate(xs)]

    for n in (1, 2, 3, 10, 1001, 4096):
        up = list(range(n))
        for xs in (up, up[::-1], up[: n // 2] + up[n // 2 :][::-1], [5] * n, [j % 3 for j in up]):
            _medians_both_ways(runs(xs))
    _medians_both_ways([(0.0, 1.0, 0), (-0.0, 2.0, 1), (1.0, 3.0, 2)])  # a zero of either sign in the middle
    _medians_both_ways([(-0.0, -0.0, 0), (0.0, 0.0, 1)])
    _medians_both_ways([(float("nan"), 1.0, 0), (2.0, 1.0, 1), (3.0, 1.0, 2)])
    _medians_both_ways([(1, 2, 0), (3, 4, 1)])  # ints: the reference's own result
    _medians_both_ways([])

    finite = st.floats(allow_nan=False, width=64) | st.sampled_from([0.0, -0.0, 1.5, 1e300, -1e-300])

    @SETTINGS
    @given(st.lists(st.tuples(finite, finite), max_size=60))
    def drawn(pairs):
        _medians_both_ways([(a, b, j) for j, (a, b) in enumerate(pairs)])

    drawn()


def test_the_hot_lines_read_the_children_as_nest_clamped_them():
    """Real: a Dynamo graph break (examples/recorded/graph_break_whole), whose frame swaps leave
    python frames "running" to the end of the trace, so nest clamps them to their parent's end.
    The model keeps no column of each event's children's summed duration (the hot lines alone read
    it): hot_sums makes it from the nesting, a clamped child counted up to its parent's end as
    nesting saw it (never past it: no event's children add up to less than nothing, where a
    clamped end misread is a share far below zero); the native pass and its reference agree on
    the trace."""
    path = os.path.join(ROOT, "examples", "recorded", "graph_break_whole.json.gz")
    doc = loader.load(path)[0]
    m = model.build(doc)
    slack = model.NEST_SLACK_US
    starts, durs, parent = m.cpu_starts(), m.durs, m.parent
    clamped = [
        i for i, p in enumerate(parent) if p >= 0 and starts[i] + durs[i] > starts[p] + durs[p] + slack
    ]
    assert clamped  # the trace exercises the clamp
    cd = passes._child_durations(m.cpu, parent, slack)
    assert min(cd) >= 0.0
    assert max(cd[parent[i]] for i in clamped) > 0.0
    with passes.differential() as runs:
        engine.analyze_file(path)
    assert [(r.name, r.differs) for r in runs if r.name == "hot_sums"] == [("hot_sums", None)]
