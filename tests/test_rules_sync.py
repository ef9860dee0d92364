"""The sync rules (``server/engine/rules/sync.py``: ``sync-wait``, ``host-sync``) on real traces: each
fires where the trace has the problem and stays silent where it does not. Traces: examples/
(MANIFEST.md says what a reader should conclude from each), examples/recorded/ and examples/corpus/
(recorded on an H200 for the rules; their READMEs say how); ``rule_traces`` reads them."""

import pytest

from conftest import codes, report_of
from profd.server.engine.impact import severity_for
from rule_traces import corpus_of, line_of, one, recorded_lines, recorded_of


# ---- the seed's traces (examples/, MANIFEST.md) --------------------------------------------------


def test_sync_wait_not_confused_with_the_profilers_flush():
    for name in ("seed_n4096_bf16_active20", "tinygpt_tuned", "seed_n64_bf16"):
        assert "sync-wait" not in codes(report_of(name)), name


# ---- examples/recorded/ twins and the corpus -----------------------------------------------------


def test_corpus_host_sync_in_a_compiled_forward_is_on_its_line():
    (d,) = corpus_of("compiled_sync", "host-sync")  # x.mean().item() inside the compiled forward
    assert (d.location.line, d.location.precision) == (24, "statement")


# ---- examples/recorded/: a planted problem and its fixed twin ------------------------------------


def test_host_sync_variants_each_on_their_line():
    # 28: if s > 0 / 30: torch.nonzero / 31: .cpu() / 32: .tolist() / 33: print(t) / 34: .item()
    assert recorded_lines("host_sync_all", "host-sync", "host_sync.py") == [28, 30, 31, 32, 33, 34]
    by_line = {d.location.line: d for d in recorded_of("host_sync_all", "host-sync")}
    assert "aten::is_nonzero" in by_line[28].evidence["ops"]
    assert "aten::nonzero" in by_line[30].evidence["ops"]
    assert "aten::item" in by_line[34].evidence["ops"]
    assert all(d.evidence["per_step"] >= 1 for d in by_line.values())
    # severity follows what a fix gives back (engine/impact.py): the blocked time, in a CPU-bound step
    for d in by_line.values():
        assert 0 < d.impact_us_per_step <= d.evidence["blocked_us_per_step"] + 1e-6
        assert d.severity == severity_for(d.impact_pct / 100)


def test_no_host_sync_in_the_clean_loop():
    assert not recorded_of("host_sync_none", "host-sync")


def test_sync_wait_draining_a_busy_queue():
    (d,) = recorded_of("sync_wait_busy", "sync-wait")
    assert d.location.line == 23 and d.evidence["kind"] == "draining"
    assert d.evidence["blocked_us_per_step"] > 1000


def test_sync_wait_on_an_idle_gpu():
    (d,) = recorded_of("sync_wait_idle", "sync-wait")
    assert d.location.line == 30 and d.evidence["kind"] == "idle"
    assert d.evidence["count"] == 120  # 40 syncs x 3 active steps


def test_no_sync_wait_without_the_sync():
    assert not recorded_of("sync_wait_none", "sync-wait")


def test_sync_wait_on_the_waiting_rank_blames_the_collective():
    # the DDP straggler pair: rank 1 has twice the batch; rank 0's reducer sync waits in all-reduce
    waiting = [
        d for d in recorded_of("ddp_straggler_rank0", "sync-wait") if d.evidence["kind"] == "collective"
    ]
    assert waiting and waiting[0].evidence["collective_during"] >= 0.5
    assert "another rank" in waiting[0].message
    assert not [
        d for d in recorded_of("ddp_straggler_rank1", "sync-wait") if d.evidence["kind"] == "collective"
    ]


# ---- the TinyGPT training traces (examples/tinygpt_*) --------------------------------------------


def test_host_sync_lands_on_the_loss_item_statement():
    (d,) = one(report_of("tinygpt_naive"), "host-sync")
    assert d.location.precision == "statement"
    assert "loss.item()" in line_of(d.location.path, d.location.line)
    assert d.evidence["per_step"] == pytest.approx(2)  # loss.item() and int(s.sum())
    assert d.evidence["sync_call"] == "cudaStreamSynchronize"
