"""Traces other producers write (examples/peer: HTA's and Kineto's test data, see its README):
ROCm on MI250, the 2021-era profiler's format, MTIA, CUPTI's range profiler, CPU-only ranks.

Every one is read, its GPU work is seen (the kernel counts of the peer README, counted by HTA), and
its GPU busy % lands within 10 points of HTA's compute % where HTA's number is meaningful. Then
one test per format for what that format changes. Synthetic inputs only where no real trace shows
the case (numbers written as strings, a ROCm ``.item()``), each derived from a real trace and
marked as such.
"""

import gzip
import json
import os
import re

import msgspec
import pytest

from conftest import EXAMPLES, SRC, trace
from profd.server import engine
from profd.server.engine import loader, model, passes
from profd.server.engine.loader import TraceError

PEER = os.path.join(EXAMPLES, "peer")
AMD = os.path.join(PEER, "hta", "amd_trace", "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
OLD = os.path.join(
    PEER, "kineto", "tb_plugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz"
)
OLD_ARRAY = os.path.join(
    PEER, "kineto", "tb_plugin", "samples", "resnet50_num_workers_4", "v7bd25bd0", "worker0.pt.trace.json.gz"
)
MTIA = os.path.join(PEER, "hta", "mtia_inference_trace", "mtia_inference_rank_0.json.gz")
CUPTI_RANGE = os.path.join(PEER, "hta", "cupti_profiler", "benchmark_result_924719_1679055439_trace.json.gz")
WITH_TOTALS = os.path.join(PEER, "hta", "df_index_resolver", "df_index_resolver.json.gz")


def _table():
    """(file, kernels, HTA compute % or None) from examples/peer/README.md."""
    rows = []
    with open(os.path.join(PEER, "README.md")) as f:
        for line in f:
            m = re.match(r"\| `([^`]+)` \|[^|]*\|[^|]*\| (\d+) \| ([\d.]+|-) \|", line)
            if m:
                rows.append((m.group(1), int(m.group(2)), None if m.group(3) == "-" else float(m.group(3))))
    return rows


ROWS = _table()


def test_the_table_lists_every_peer_trace():
    on_disk = {os.path.relpath(p, PEER) for p in _peer_files()}
    assert {r[0] for r in ROWS} == on_disk and len(ROWS) == 22


def _peer_files():
    for root, _, files in os.walk(PEER):
        for f in files:
            if f.endswith(".gz"):
                yield os.path.join(root, f)


_reports: dict = {}


def report(path):
    if path not in _reports:
        _reports[path] = engine.analyze_file(path, engine.Options(workspace=[PEER]))
    return _reports[path]


@pytest.mark.parametrize("name,kernels,hta", ROWS, ids=[r[0].replace("/", "_") for r in ROWS])
def test_every_peer_trace_is_read_with_its_gpu_work(name, kernels, hta):
    s = report(os.path.join(PEER, name)).summary
    assert s.kernels == kernels  # HTA's count: every kernel seen, whatever the producer called it
    if kernels:
        assert s.verdict != "cpu-only" and s.gpu_busy_pct is not None
    if hta is not None:
        assert abs(s.gpu_busy_pct - hta) <= 10, (s.gpu_busy_pct, hta)


def test_cli_exit_codes_on_peer_traces(capsys):
    from profd.client_cli.main import main

    assert main(["analyze", "--no-daemon", "--fail-on", "never", AMD, OLD_ARRAY]) == 0
    out = capsys.readouterr().out
    assert "bad trace" not in out
    assert len(re.findall(r"^examples/peer/\S+: (overhead-bound|compute-bound|balanced): ", out, re.M)) == 2


# ---- the 2021-era profiler: Operator/Runtime/Kernel/Memcpy/Memset, "stream 7", Bytes-only memory ----
def test_2021_categories_read_as_their_roles():
    doc, _, _ = loader.load(OLD)
    m = model.build(doc)
    assert [s.number for s in m.steps] == [16, 17, 18, 19, 20, 21]  # ProfilerStep#N among the Operator events
    assert {e.cat for e in m.cpu} == {"cpu_op", "user_annotation", "cuda_runtime"}
    assert {e.cat for e in m.gpu} == {"kernel", "gpu_memcpy", "gpu_memset"}
    assert {e.tid for e in m.gpu} == {"stream 7"}
    launched = sum(1 for li in m.launcher if li >= 0)
    assert launched == len(m.gpu)  # every kernel, copy and memset joined to its Runtime call
    assert m.cpu[m.launcher[0]].name.startswith("cuda")
    # ops write "tid": "25738", their allocator samples 25738: one thread, so samples have owners
    assert len(m.memory) > 10000 and sum(1 for o in m.memory.owner if o >= 0) > 0.5 * len(m.memory)


def test_2021_memory_peak_from_bytes_only():
    """The samples carry only Bytes: the peak is summed from them (a lower bound), never 0 B."""
    rep = report(OLD)
    d = next(d for d in rep.diagnostics if d.code == "memory-peak")
    assert d.evidence["summed"] is True and "at least" in d.message and "records no totals" in d.message
    assert d.evidence["peak_bytes"] >= d.evidence["allocation_bytes"] > 0
    # a trace with Total Allocated reads it as it is
    d = next(d for d in report(WITH_TOTALS).diagnostics if d.code == "memory-peak")
    assert "summed" not in d.evidence and "at least" not in d.message


def test_2021_bare_array_same_report_both_ways(monkeypatch):
    _same_report_both_ways(OLD_ARRAY, monkeypatch)


# ---- ROCm -------------------------------------------------------------------------------------
def test_rocm_hip_launches_and_amd_kernel_families():
    doc, _, _ = loader.load(AMD)
    m = model.build(doc)
    a = engine.analyses.analyze(m)
    by_api = {}
    for g, e in enumerate(m.gpu):
        li = m.launcher[g]
        by_api.setdefault(m.cpu[li].name if li >= 0 else None, set()).add(a.gpu_class[g])
    assert None not in by_api  # every GPU event joined to its HIP call
    assert by_api["hipExtModuleLaunchKernel"] == {"gemm"}  # Tensile Cijk_* GEMMs
    assert by_api["hipMemcpyWithStream"] == {"copy"}
    assert "other" not in {c for cs in by_api.values() for c in cs}


def _rewrite(path, tmp_path, fn, name="t.json"):
    d = json.loads(gzip.decompress(open(path, "rb").read()))
    fn(d["traceEvents"])
    out = tmp_path / name
    out.write_text(json.dumps(d))
    return str(out)


def _as_strings(events):
    """What roctracer writes for some producers: numbers as strings ("bytes": "256")."""
    for e in events:
        a = e.get("args")
        if e.get("cat") == "cuda_runtime" and isinstance(a, dict):
            a["bytes"] = str(int(a.get("size", "0")))
        if e.get("cat") in ("kernel", "gpu_memcpy") and isinstance(e.get("ts"), (int, float)):
            e["ts"], e["dur"] = repr(e["ts"]), repr(e["dur"])
        if e.get("name") == "[memory]" and isinstance(a, dict):
            for k in ("Bytes", "Total Allocated", "Total Reserved"):
                if isinstance(a.get(k), int):
                    a[k] = str(a[k])


def test_numbers_written_as_strings_read_as_numbers(tmp_path, monkeypatch):
    """Synthetic (the real MI250 trace, its copy sizes, GPU times and allocator counts rewritten as
    strings): the scanner reads them itself, both paths agree, and the report is the original's."""
    path = _rewrite(AMD, tmp_path, _as_strings)
    doc, _, _ = loader.load(path)
    assert (
        passes.for_events(doc.traceEvents) is passes.NATIVE
    )  # not declined: the scanner reads numeric strings
    copies = [e for e in doc.traceEvents if e.name == "hipMemcpyWithStream"]
    assert copies and all(isinstance(e.args.nbytes, int) and e.args.nbytes > 0 for e in copies)
    rep = _same_report_both_ways(path, monkeypatch)
    ref = engine.analyze_file(AMD, engine.Options(workspace=[PEER]))
    assert rep.summary == ref.summary and rep.diagnostics == [
        msgspec.structs.replace(d, location=msgspec.structs.replace(d.location, path=path))
        if d.location.path == AMD
        else d
        for d in ref.diagnostics
    ]


@pytest.mark.parametrize("value", ["soon", "nan", "inf", "1e400", " 5"])
def test_strings_that_are_not_finite_numbers_are_refused(tmp_path, value):
    def bad_ts(events):
        next(e for e in events if e.get("cat") == "kernel")["ts"] = value

    path = _rewrite(AMD, tmp_path, bad_ts)
    with pytest.raises(TraceError) as e:
        engine.analyze_file(path)
    assert path in str(e.value) and ".ts" in str(e.value)


def _rocm_item(events):
    """ROCm's .item(): one blocking hipMemcpyWithStream, no separate stream sync (CUDA: a
    cudaMemcpyAsync and a cudaStreamSynchronize); launches are hipLaunchKernel."""
    names = {"cudaMemcpyAsync": "hipMemcpyWithStream", "cudaLaunchKernel": "hipLaunchKernel"}
    events[:] = [e for e in events if e.get("name") != "cudaStreamSynchronize"]
    for e in events:
        if e.get("name") in names:
            e["name"] = names[e["name"]]


def test_host_sync_through_hip_blocking_copies(tmp_path):
    """Synthetic (the real host_sync traces with their CUDA calls rewritten as ROCm makes them):
    the host reads are found on the same lines, and the clean loop stays clean."""
    opts = engine.Options(workspace=[os.path.join(EXAMPLES, "recorded", "src")])
    cuda = sorted(
        d.location.line
        for d in engine.analyze_file(trace("host_sync_all"), opts).diagnostics
        if d.code == "host-sync"
    )
    hip = engine.analyze_file(_rewrite(trace("host_sync_all"), tmp_path, _rocm_item, "all.json"), opts)
    assert cuda and sorted(d.location.line for d in hip.diagnostics if d.code == "host-sync") == cuda
    assert all(
        d.evidence["sync_call"] == "hipMemcpyWithStream" for d in hip.diagnostics if d.code == "host-sync"
    )
    clean = engine.analyze_file(_rewrite(trace("host_sync_none"), tmp_path, _rocm_item, "none.json"), opts)
    assert not [d for d in clean.diagnostics if d.code == "host-sync"]


# ---- accelerators and lanes profd does not analyse ------------------------------------------------
def test_mtia_is_said_not_analysed():
    s = report(MTIA).summary
    assert s.verdict == "cpu-only" and s.kernels == 0
    (note,) = [n for n in s.notes if n.startswith("not analysed")]
    assert "1313 mtia_ccp_events" in note and "823 mtia_runtime" in note and "ARTEMIS" in note


def test_cupti_range_profiler_is_said_not_analysed():
    (note,) = [n for n in report(CUPTI_RANGE).summary.notes if n.startswith("not analysed")]
    assert "77 cuda_profiler_range" in note


def test_a_cuda_trace_has_nothing_unread():
    assert not [n for n in report(WITH_TOTALS).summary.notes if n.startswith("not analysed")]
    assert model.build(loader.load(AMD)[0]).unread == {}  # cuda_sync, Trace, ...: known, not GPU work


def test_gpu_work_recognised_by_what_it_carries(tmp_path):
    """Synthetic (the real MI250 trace with its GPU categories renamed as an unknown producer might):
    kernels and copies are still GPU work, by their device, stream and correlation id."""

    def rename(events):
        for e in events:
            if e.get("cat") in ("kernel", "gpu_memcpy"):
                e["cat"] = "gpu_activity"

    path = _rewrite(AMD, tmp_path, rename)
    s = engine.analyze_file(path).summary
    ref = report(AMD).summary
    assert (s.kernels, s.gpu_busy_pct, s.kernel_classes) == (
        ref.kernels,
        ref.gpu_busy_pct,
        ref.kernel_classes,
    )
    assert not s.notes or not s.notes[0].startswith("not analysed")


# ---- not a trace ------------------------------------------------------------------------------
def test_foreign_json_exits_2(tmp_path, capsys):
    from profd.client_cli.main import main

    p = tmp_path / "metrics.json"
    p.write_text(json.dumps([{"name": "loss", "value": 0.3}, {"name": "acc", "value": 0.9}]))
    assert main(["analyze", "--no-daemon", str(p)]) == 2
    err = capsys.readouterr()
    assert f"profd: bad trace {p}: not a trace: 2 JSON object(s), none with a 'ph'" in err.out + err.err


def _same_report_both_ways(path, monkeypatch):
    opts = engine.Options(workspace=[SRC])
    native = engine.analyze_file(path, opts)
    with passes.use_native(False):  # msgspec and every reference pass
        python = engine.analyze_file(path, engine.Options(workspace=[SRC]))
    assert msgspec.json.encode(native) == msgspec.json.encode(python)
    return native
