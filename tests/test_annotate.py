"""The annotated trace: valid Chrome trace JSON (what Perfetto's JSON importer needs), the original
events untouched, the findings as instants at the timestamps of their evidence, a profd step track."""

import gzip
import json

import pytest

from conftest import SRC, trace
from profd.server.engine.annotate import annotate_file
from profd.server.engine import Options


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    src = trace("tinygpt_naive")
    out = str(tmp_path_factory.mktemp("ann") / "naive.annotated.json")
    report = annotate_file(src, out, Options(workspace=[SRC]))
    with open(out, "rb") as f:
        doc = json.load(f)  # the stdlib parser: strict JSON, no orjson leniency
    with gzip.open(src) as f:
        orig = json.load(f)
    return report, doc, orig


def test_valid_chrome_trace_with_the_original_events_untouched(annotated):
    report, doc, orig = annotated
    ev = doc["traceEvents"]
    n = len(orig["traceEvents"])
    assert ev[:n] == orig["traceEvents"]
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {
        k: v for k, v in orig.items() if k != "traceEvents"
    }
    added = ev[n:]
    assert sum(1 for e in added if e["ph"] == "i") == len(report.diagnostics)
    for e in added:  # the fields the JSON importer requires per phase
        assert e["ph"] in ("M", "X", "i") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and e["name"]
        if e["ph"] == "X":
            assert e["dur"] > 0
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")
    pids = {e["pid"] for e in orig["traceEvents"] if "pid" in e}
    (profd,) = [e for e in added if e["ph"] == "M" and e["name"] == "process_name"]
    assert profd["args"]["name"] == "profd" and profd["pid"] not in pids


def test_step_track_has_one_slice_per_profiler_step(annotated):
    report, doc, orig = annotated
    steps = sorted(
        (e["ts"], e["dur"])
        for e in orig["traceEvents"]
        if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")
    )
    slices = [e for e in doc["traceEvents"] if e.get("cat") == "profd" and e["ph"] == "X"]
    got = sorted((e["ts"], e["dur"]) for e in slices)
    assert len(got) == len(steps) == 3
    for (t, d), (t2, d2) in zip(got, steps):
        assert t == pytest.approx(t2, abs=1e-3) and d == pytest.approx(d2, abs=1e-3)
    want = [s.gpu_busy_us for s in report.summary.steps]
    assert [e["args"]["gpu_busy_us"] for e in sorted(slices, key=lambda e: e["ts"])] == pytest.approx(
        want, abs=1e-3
    )
    assert all(e["args"]["verdict"] in ("overhead-bound", "balanced", "compute-bound") for e in slices)


def marker(doc, code):
    found = [
        e for e in doc["traceEvents"] if e.get("cat") == "profd" and e["ph"] == "i" and e["name"] == code
    ]
    assert found, code
    return found


def test_markers_sit_on_their_evidence(annotated):
    report, doc, orig = annotated
    ev = orig["traceEvents"]
    first_step = min(e["ts"] for e in ev if e.get("name", "").startswith("ProfilerStep#"))
    # host-sync: exactly on the first blocking cudaStreamSynchronize of the profiled steps,
    # on the thread that called it
    (m,) = marker(doc, "host-sync")
    syncs = sorted(
        (e["ts"], e["tid"]) for e in ev if e.get("name") == "cudaStreamSynchronize" and e["ts"] >= first_step
    )
    assert (m["ts"], m["tid"]) in syncs
    # fp32-matmul: on the GPU stream, at an fp32 SIMT GEMM kernel's start
    (m,) = marker(doc, "fp32-matmul")
    k = [e for e in ev if e.get("cat") == "kernel" and e["ts"] == m["ts"] and e["tid"] == m["tid"]]
    assert k and ("f32f32" in k[0]["name"] or "sgemm" in k[0]["name"])
    # pageable-memcpy: each marker on a pageable HtoD copy
    for m in marker(doc, "pageable-memcpy"):
        assert any(
            e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"] and e["ts"] == m["ts"] for e in ev
        )
    # every line-located marker carries the location it describes
    for m in marker(doc, "launch-storm"):
        assert m["args"]["location"].split(":")[0].endswith(".py")
        assert m["ts"] >= first_step
