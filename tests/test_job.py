"""Multi-rank job analyses on the real two-GPU NCCL traces (examples/nccl, MANIFEST).

What a performance engineer reads in them, measured before writing these tests:
- balanced DDP pair: both ranks CPU-bound at ~20-22 ms steps with ~6.5 ms of GPU compute each;
  the NCCL time differs (29.1 vs 23.2 ms per 3 steps, MANIFEST) only because each rank waits for
  the other in turn (rank 0 in steps 2-3, rank 1 in step 4): no rank is consistently late, so no
  straggler.
- FSDP pair: rank 0's CPU takes ~96 ms per step against rank 1's ~83 ms with equal GPU compute;
  rank 0 is the last to arrive at every collective and rank 1's 294 ms of NCCL time is almost all
  spinning while it waits: rank 0 is the straggler, on the CPU side.
"""

import pickle

import msgspec
import pytest

from conftest import trace
from profd.protocol.job import JobReport, RankSummary
from profd.server.engine import job
from profd.server.engine.rules import ranks


@pytest.fixture(scope="module")
def summaries():
    return {
        n: job.summarize_rank(trace(n))
        for n in ("balanced_rank0", "balanced_rank1", "fsdp_rank0", "fsdp_rank1")
    }


def pair(summaries, name):
    return job.reduce_job([summaries[f"{name}_rank0"], summaries[f"{name}_rank1"]])


def test_summary_is_small_picklable_and_on_the_wire(summaries):
    s = summaries["fsdp_rank1"]
    assert s.rank == 1 and s.world_size == 2 and s.backend == "nccl"
    assert pickle.loads(pickle.dumps(s)) == s
    assert msgspec.json.decode(msgspec.json.encode(s), type=RankSummary) == s
    assert len(pickle.dumps(s)) < 64 * 1024  # a summary, not a report: a cluster can ship thousands
    assert b'"worldSize"' in msgspec.json.encode(s)  # camelCase like the rest of the protocol


def test_comm_time_matches_the_manifest_and_only_counts_the_profiled_steps(summaries):
    # MANIFEST: per 3 steps rank 0 spends 29.1 ms and rank 1 23.2 ms in NCCL kernels (balanced)
    for name, ms in (("balanced_rank0", 29.1), ("balanced_rank1", 23.2)):
        total = sum(st.comm_us for st in summaries[name].steps) / 1000
        assert total == pytest.approx(ms, abs=0.5), name
    # fsdp rank 1: 294 ms inside NCCL kernels over the whole trace; the job view charges only the
    # collectives launched by the three profiled steps (the warm-up step's leftovers run first)
    fsdp1 = sum(st.comm_us for st in summaries["fsdp_rank1"].steps) / 1000
    assert 250 < fsdp1 < 294
    for s in summaries.values():
        assert len(s.steps) == 3
        for st in s.steps:
            assert 0 <= st.exposed_comm_us <= st.comm_us + 1e-6
            assert st.compute_us < st.dur_us


def test_balanced_pair_has_no_straggler(summaries):
    j = pair(summaries, "balanced")
    assert j.straggler is None and not j.diagnostics
    assert j.collectives_matched == 51  # 17 buckets x 3 steps, every one on both ranks
    last = [r.last_arrivals for r in j.ranks]
    assert sum(last) == 51 and max(last) / 51 < ranks.LAST_SHARE  # who arrives last alternates
    # both ranks wait at some point: the waits are a phase offset, not one slow rank
    assert all(r.wait_us > 1000 for r in j.ranks)
    c0, c1 = (r.compute_us for r in j.ranks)
    assert abs(c0 - c1) / max(c0, c1) < 0.05  # equal batches, equal GPU compute
    for r in j.ranks:
        assert r.overlap_pct is not None and 0 < r.overlap_pct < 100
        # what is left after the wait is the transfer, the same collectives on both ranks
        assert r.transfer_us == pytest.approx(j.ranks[0].transfer_us, rel=1e-3)


def test_fsdp_pair_names_rank0_the_straggler_on_the_cpu_side(summaries):
    j = pair(summaries, "fsdp")
    assert j.straggler == 0
    (d,) = j.diagnostics
    assert d.code == "rank-straggler" and d.severity == "warning"
    ev = d.evidence
    assert ev["side"] == "cpu"
    assert ev["last_arrivals"] == ev["collectives_matched"] == 144  # 32 all-gathers + 16 RS per step
    r0, r1 = j.ranks
    assert r0.wait_us < 0.01 * r1.wait_us  # the straggler never waits ...
    assert r1.wait_us > 0.8 * r1.comm_us  # ... and rank 1's NCCL time is mostly waiting for it
    assert r0.cpu_own_us > ranks.DIFF_RATIO * r1.cpu_own_us
    assert r0.compute_us < r1.compute_us  # not GPU work: the GPU side would not explain it
    assert "rank 0" in d.message and "144 of 144" in d.message
    assert d.location.path == trace("fsdp_rank0")


def test_reduce_is_order_free_and_streams(summaries):
    ss = [summaries["fsdp_rank1"], summaries["fsdp_rank0"]]
    a = job.reduce_job(ss)
    b = job.reduce_job(iter(reversed(ss)))  # any order, consumed once
    assert msgspec.json.encode(a) == msgspec.json.encode(b)
    assert msgspec.json.decode(msgspec.json.encode(a), type=JobReport) == a


def test_straggler_follows_the_data_not_the_rank_id(summaries):
    """Relabel the FSDP ranks: the verdict must move with the slow trace."""
    s0 = msgspec.structs.replace(summaries["fsdp_rank0"], rank=1)
    s1 = msgspec.structs.replace(summaries["fsdp_rank1"], rank=0)
    j = job.reduce_job([s0, s1])
    assert j.straggler == 1 and j.diagnostics[0].location.path == trace("fsdp_rank0")


def test_jobs_are_grouped_apart(summaries):
    jobs = job.group_jobs(summaries.values())
    names = sorted(tuple(s.path.rsplit("/", 1)[1].split(".")[0] for s in g) for g in jobs)
    assert names == [("balanced_rank0", "balanced_rank1"), ("fsdp_rank0", "fsdp_rank1")]


def test_the_same_rank_passed_twice_is_said(summaries):
    """Issue 16: a rank passed twice was dropped silently (two one-rank jobs, both left out)."""
    s0, s1 = summaries["balanced_rank0"], summaries["balanced_rank1"]
    copy = msgspec.structs.replace(s0, path="/elsewhere/copy_of_rank0.json")  # the same bytes
    (g,) = job.group_jobs([s0, copy, s1])
    assert [s.rank for s in g] == [0, 1]
    assert g.notes == [
        f"rank 0 passed twice: /elsewhere/copy_of_rank0.json is the same trace as {s0.path}; read once"
    ]
    j = job.reduce_job(g)
    assert j.notes[0] == g.notes[0] and [r.rank for r in j.ranks] == [0, 1]
    (alone,) = job.group_jobs([s0, copy])  # only the twin: still a job, which says so
    assert len(alone) == 1 and alone.notes and job.reduce_job(alone).missing_ranks == [1]
    other = msgspec.structs.replace(s0, path="/elsewhere/rank0_rerun.json", sha256="0" * 64)
    jobs = job.group_jobs([s0, s1, other])  # a different trace of rank 0: two runs, said in both
    assert len(jobs) == 2 and all("rank 0 appears in two different traces" in j.notes[0] for j in jobs)


def test_cli_prints_per_rank_reports_and_the_job_report(capsys, monkeypatch):
    from profd.client_cli.main import main

    monkeypatch.setenv("PROFD_NO_DAEMON", "1")
    rc = main(
        [
            "analyze",
            "--no-daemon",
            "--fail-on",
            "never",
            "--format",
            "json",
            trace("balanced_rank0"),
            trace("balanced_rank1"),
        ]
    )
    assert rc == 0
    doc = msgspec.json.decode(capsys.readouterr().out)
    assert len(doc["reports"]) == 2 and len(doc["jobs"]) == 1
    assert [r["rank"] for r in doc["jobs"][0]["ranks"]] == [0, 1]
    assert doc["jobs"][0]["straggler"] is None


def _recorded_job(name):
    # real 2-rank NCCL DDP runs recorded on two H200s (examples/recorded/README.md)
    return job.reduce_job([job.summarize_rank(trace(f"{name}_rank{r}")) for r in (0, 1)])


def test_recorded_straggler_pair_names_the_rank_with_the_bigger_batch():
    j = _recorded_job("ddp_straggler")  # rank 1 gets twice the batch
    assert j.straggler == 1
    (d,) = [d for d in j.diagnostics if d.code == "rank-straggler"]
    waiting = next(r for r in j.ranks if r.rank == 0)
    assert waiting.wait_us > 0


def test_recorded_overlapping_pair_has_no_straggler_and_hides_its_communication():
    j = _recorded_job("ddp_overlap_b8192")
    assert j.straggler is None
    for r in j.ranks:
        assert r.overlap_pct > 80  # all-reduce buckets run under the backward GEMMs
