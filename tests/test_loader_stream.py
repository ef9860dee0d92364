"""The streaming decoder (server/engine/_scan.c + loader._load_stream) against the msgspec reference.

Real traces: every shipped trace (the peer traces of examples/peer too: ROCm, the 2021-era format,
a bare JSON array, MTIA) gives the same events and the same report either way, also fed in blocks
of a few KB. Synthetic documents only for shapes no shipped trace has (trailer keys after
the events, the bare-array form, string ids, escaped keys, a "traceEvents" inside a string), each
marked as such.
"""
import glob
import gzip
import os

import msgspec
import pytest

from conftest import EXAMPLES, SRC
from profd.server import engine
from profd.server.engine import loader, model
from profd.server.engine.loader import TraceError

pytestmark = pytest.mark.skipif(loader._scan is None, reason="the _scan extension is not built")

TRACES = sorted(glob.glob(os.path.join(EXAMPLES, "**", "*.gz"), recursive=True))
ARGS = ("external_id", "correlation", "seq", "fwd_tid", "device_type", "mem_bytes", "total_allocated",
        "total_reserved", "addr", "nbytes", "input_dims", "input_types", "grid", "block", "name", "call_from")


def _norm(e):
    a = e.args
    head = (e.ph, e.name, e.cat, e.pid, e.tid, e.ts, e.dur, e.id)
    if a is None:
        return head + (None,)
    return head + tuple(bytes(v) if isinstance(v, (bytes, msgspec.Raw)) else v
                        for v in (getattr(a, f) for f in ARGS))


def _kept(events):
    x, flows, instants, meta = loader.KEEP
    out = []
    for e in events:
        if (e.ph == "X" and (x is None or e.cat in x)) or (e.ph in ("s", "f") and e.cat in flows) or \
                (e.ph in ("i", "I") and e.name in instants) or (e.ph == "M" and e.name in meta):
            out.append(e)
    return out


def _whole(path):
    doc = loader.decode(path, loader.read_bytes(path))
    return doc


@pytest.mark.parametrize("path", TRACES, ids=lambda p: os.path.relpath(p, EXAMPLES))
def test_same_events_as_msgspec(path, monkeypatch):
    ref = _whole(path)
    doc, sha, size = loader.load(path)
    assert isinstance(doc.traceEvents[0], loader._scan.Event)  # the streaming path ran
    assert doc.n_events == len(ref.traceEvents)
    assert [_norm(e) for e in doc.traceEvents] == [_norm(e) for e in _kept(ref.traceEvents)]
    data = loader.read_bytes(path)
    assert (sha, size) == (loader.sha256_of(data), len(data))
    assert doc.deviceProperties == ref.deviceProperties and doc.with_stack == ref.with_stack
    # fed a few KB at a time, every event straddles block boundaries somewhere
    monkeypatch.setattr(loader, "BLOCK_BYTES", 3001)
    small, _, _ = loader.load(path)
    assert [_norm(e) for e in small.traceEvents] == [_norm(e) for e in doc.traceEvents]


@pytest.mark.parametrize("name", ["tinygpt_naive.json.gz", "nccl/fsdp_rank0.1796064976619326162.pt.trace.json.gz",
                                  "recorded/host_sync_all.json.gz", "recorded/graph_break_break.json.gz",
                                  # other producers: ROCm, the 2021-era profiler (allocator samples
                                  # with only Bytes), MTIA lanes profd does not read
                                  "peer/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                                  "peer/kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz",
                                  "peer/hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"])
def test_same_report_as_msgspec(name, monkeypatch):
    path = os.path.join(EXAMPLES, name)
    opts = engine.Options(workspace=[SRC])
    fast = msgspec.json.encode(engine.analyze_file(path, opts))
    # the reference: msgspec decode and the model's pure-Python passes, as without a compiler
    monkeypatch.setattr(loader, "_scan", None)
    monkeypatch.setattr(model, "_scan", None)
    ref = msgspec.json.encode(engine.analyze_file(path, engine.Options(workspace=[SRC])))
    assert fast == ref


def _write(tmp_path, name, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


EV = b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10.5, "dur": 3, ' \
     b'"args": {"External id": 7, "Input Dims": [[2, 3], [3, 4]]}}'


def test_trailer_keys_after_the_events(tmp_path):
    """Synthetic: keys after the array (no shipped trace puts them there)."""
    path = _write(tmp_path, "t.json", b'{"schemaVersion": 1, "traceEvents": [\n' + EV + b',\n' + EV +
                  b'\n], "traceName": "after", "with_stack": 1}')
    doc, _, _ = loader.load(path)
    assert isinstance(doc.traceEvents[0], loader._scan.Event)
    assert doc.traceName == "after" and doc.with_stack == 1 and doc.n_events == 2
    a = doc.traceEvents[0].args
    assert a.external_id == 7 and bytes(a.input_dims) == b"[[2, 3], [3, 4]]" and a.correlation is None


def test_bare_array_form_and_gzip(tmp_path):
    """Synthetic: the Chrome "JSON array" form, gzipped."""
    path = _write(tmp_path, "a.json.gz", gzip.compress(b"[\n" + EV + b",\n" + EV + b"]\n"))
    doc, sha, size = loader.load(path)
    assert len(doc.traceEvents) == 2 and doc.traceEvents[1].ts == 10.5
    assert size == len(gzip.decompress(open(path, "rb").read()))


@pytest.mark.parametrize("doc", [
    b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": "p", "tid": 1, "ts": 1, "dur": 1,'
    b' "args": {"External id": "x7"}}]}',  # string ids: msgspec's Union[int, str]
    b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "n\\u0061me": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}',
    b'{"traceName": "x \\"traceEvents\\": [", "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "b", '
    b'"pid": 1, "tid": 1, "ts": 1, "dur": 1}]}',
], ids=["string-ids", "escaped-key", "key-inside-a-string"])
def test_declined_shapes_fall_back_to_msgspec(tmp_path, doc):
    """Synthetic: shapes the scanner declines; the result is msgspec's, not an error."""
    path = _write(tmp_path, "d.json", doc)
    got, _, _ = loader.load(path)
    ref = _whole(path)
    assert [_norm(e) for e in got.traceEvents] == [_norm(e) for e in ref.traceEvents]


def test_truncated_file_gives_msgspecs_error(tmp_path):
    data = gzip.decompress(open(os.path.join(EXAMPLES, "tinygpt_naive.json.gz"), "rb").read())
    path = _write(tmp_path, "half.json", data[: len(data) // 2])
    with pytest.raises(TraceError) as e:
        loader.load(path)
    assert "half.json" in str(e.value) and "truncated" in str(e.value)


def test_corrupt_gzip_is_named(tmp_path):
    raw = open(os.path.join(EXAMPLES, "tinygpt_naive.json.gz"), "rb").read()
    path = _write(tmp_path, "bad.json.gz", raw[:20] + bytes(len(raw) - 20))
    with pytest.raises(TraceError) as e:
        loader.load(path)
    assert "bad.json.gz" in str(e.value) and "gzip" in str(e.value)


# ---- differential fuzzing: the scanner against msgspec on the fuzzer's documents -------------
import hypothesis  # noqa: E402
from hypothesis import given  # noqa: E402

from test_fuzz import SETTINGS, dump, mutated_bytes, structured_doc  # noqa: E402


def _same_as_msgspec(tmp_path_factory, data: bytes) -> None:
    """Synthetic (mutated real trace): the streaming path gives msgspec's events or its error."""
    path = str(tmp_path_factory.mktemp("diff") / "t.json")
    with open(path, "wb") as f:
        f.write(data)
    try:
        ref = _kept(_whole(path).traceEvents)
    except TraceError as e:
        with pytest.raises(TraceError) as got:
            loader.load(path)
        assert str(got.value) == str(e)
        return
    doc, _, _ = loader.load(path)  # when the scanner declines, msgspec's events come back unfiltered
    assert [_norm(e) for e in _kept(doc.traceEvents)] == [_norm(e) for e in ref]
    scanned = bool(doc.traceEvents) and isinstance(doc.traceEvents[0], loader._scan.Event)
    hypothesis.event("decoded by the scanner" if scanned else "declined: msgspec decoded it")


@SETTINGS
@given(structured_doc())
def test_scanner_matches_msgspec_structured(tmp_path_factory, doc):
    _same_as_msgspec(tmp_path_factory, dump(doc))


@SETTINGS
@given(mutated_bytes())
def test_scanner_matches_msgspec_bytes(tmp_path_factory, data):
    _same_as_msgspec(tmp_path_factory, bytes(data))


def _report_both_ways(tmp_path_factory, data: bytes, monkeypatch) -> None:
    """Synthetic (mutated real trace): the native path (scanner + C model passes) and the pure
    Python one (msgspec + the model's Python passes) give the same report, or the same error."""
    path = str(tmp_path_factory.mktemp("both") / "t.json")
    with open(path, "wb") as f:
        f.write(data)

    def run():
        try:
            rep = engine.analyze_file(path, engine.Options())
        except TraceError as e:
            return str(e)
        rep.trace.path = ""
        return msgspec.json.encode(rep)

    native = run()
    with monkeypatch.context() as mp:
        mp.setattr(loader, "_scan", None)
        mp.setattr(model, "_scan", None)
        mp.setattr(engine, "_scan", None)
        from profd.server.engine import analyses
        from profd.server.engine.rules import memory
        mp.setattr(analyses, "_scan", None)
        mp.setattr(memory, "_scan", None)
        python = run()
    assert native == python


@SETTINGS
@given(structured_doc())
def test_native_and_python_reports_agree(tmp_path_factory, monkeypatch, doc):
    _report_both_ways(tmp_path_factory, dump(doc), monkeypatch)


@SETTINGS
@given(mutated_bytes())
def test_native_and_python_reports_agree_bytes(tmp_path_factory, monkeypatch, data):
    _report_both_ways(tmp_path_factory, bytes(data), monkeypatch)
