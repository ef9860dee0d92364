"""Copies and memsets are GPU work on their own engines (issue 33): counted, shown beside the
kernels' busy share, and a step they fill is transfer-bound, not overhead-bound.

Real traces: examples/wild/torchbench__trace.json.gz (pytorch/benchmark's copy benchmark on an
A100: 147 MiB HtoD and DtoH per step from pinned memory, no kernel) fires; a step of kernels with a
few copies (tinygpt_naive, the H200 pinned/pageable copy traces of the corpus) does not.
"""

import os

import pytest

from profd.server.engine import Options, analyze_file, loader, model
from profd.server.engine.analyses import analyze, verdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCHBENCH = os.path.join(ROOT, "examples", "wild", "torchbench__trace.json.gz")


def test_a_step_of_copies_is_transfer_bound_not_overhead_bound():
    r = analyze_file(TORCHBENCH, Options())
    s = r.summary
    assert s.verdict == "transfer-bound"  # was overhead-bound at "GPU busy 0.0%"
    assert s.gpu_busy_pct == 0.0 and s.copy_busy_pct > 95
    assert all(st.copy_us > 0.9 * st.dur_us and st.bound == "gpu" for st in s.steps)
    codes = {d.code for d in r.diagnostics}
    assert "transfer-bound" in codes and "overhead-bound" not in codes
    (d,) = [d for d in r.diagnostics if d.code == "transfer-bound"]
    dirs = d.evidence["directions"]
    # 154,140,672 bytes each way per step, HtoD 30.6 ms (5.0 GB/s), DtoH 17.7 ms (8.7 GB/s)
    assert dirs["HtoD"]["bytes_per_step"] == pytest.approx(154_140_672)
    assert dirs["DtoH"]["bytes_per_step"] == pytest.approx(154_140_672)
    assert dirs["HtoD"]["gb_per_s"] == pytest.approx(5.0, abs=0.1) and dirs["DtoH"][
        "gb_per_s"
    ] == pytest.approx(8.7, abs=0.1)
    assert d.evidence["pageable_share"] == 0.0 and "pinned" in d.message
    # the wait for the copies is not time a fix of the sync gives back: the copies still run
    (sw,) = [x for x in r.diagnostics if x.code == "sync-wait"]
    assert "copies" in sw.message and sw.impact_pct < 5


@pytest.mark.parametrize(
    "path",
    [
        os.path.join(ROOT, "examples", "tinygpt_naive.json.gz"),
        os.path.join(ROOT, "examples", "corpus", "traces", "copies_pageable_nb.json.gz"),
        os.path.join(ROOT, "examples", "corpus", "traces", "copies_pinned_nb.json.gz"),
    ],
)
def test_kernel_steps_with_some_copies_are_not_transfer_bound(path):
    doc, _, _ = loader.load(path)
    m = model.build(doc)
    a = analyze(m)
    assert a.copy_us > 0  # they do copy ...
    assert verdict(m, a) != "transfer-bound"  # ... but kernels, not copies, hold the GPU
    assert a.work_us >= a.busy_us and a.work_us >= a.copy_us
