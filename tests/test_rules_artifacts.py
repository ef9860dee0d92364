"""The artifacts rules (``server/engine/rules/artifacts.py``: ``profiler-artifact``) on real traces:
each fires where the trace has the problem and stays silent where it does not. Traces: examples/
(MANIFEST.md says what a reader should conclude from each), examples/recorded/ and examples/corpus/
(recorded on an H200 for the rules; their READMEs say how); ``rule_traces`` reads them."""

from conftest import report_of
from rule_traces import of, recorded


# ---- the seed's traces (examples/, MANIFEST.md) --------------------------------------------------


def test_profiler_artifacts_lane_offset_flush_sync_judged_by_the_gpu():
    r = report_of("seed_n4096_bf16_active20")
    kinds = {d.evidence["kind"]: d for d in of(r, "profiler-artifact")}
    assert "lane-offset" in kinds
    assert 200 <= kinds["lane-offset"].evidence["offset_us"] <= 1600  # MANIFEST: 0.2-1.6 ms
    # the long closing sync drains a busy GPU: it must not be read as idle time
    assert kinds["flush-sync"].evidence["gpu_busy_during"] > 0.9
    assert "CPU had run ahead" in kinds["flush-sync"].message
    short = {d.evidence["kind"]: d for d in of(report_of("seed_n64_bf16"), "profiler-artifact")}
    assert short["flush-sync"].evidence["gpu_busy_during"] < 0.1
    # inflation is only explained when the verdict is CPU-side
    assert "cpu-inflation" in short
    assert "cpu-inflation" not in kinds


# ---- false positives and misses (issue 15), on real traces ---------------------------------------


def test_a_dataloader_lead_in_is_not_called_a_lane_offset():
    # 46 ms of _SingleProcessDataLoaderIter.__next__ before the first kernel, as in every step
    kinds = {d.evidence["kind"] for d in of(recorded("dataloader_w0"), "profiler-artifact")}
    assert "lane-offset" not in kinds
    assert of(recorded("dataloader_w0"), "dataloader-bound")
    # a first step whose dispatch alone is slow still gets the explanation
    lane = [
        d
        for d in of(report_of("seed_n4096_bf16_active20"), "profiler-artifact")
        if d.evidence["kind"] == "lane-offset"
    ]
    assert lane and lane[0].evidence["usual_lead_in_us"] < 0.5 * lane[0].evidence["offset_us"]
