"""Job-level rules: ``rank-straggler``.

One trace cannot show a straggler: the rule needs every rank's summary, so its check takes the job
report (``server/engine/job.py``'s ``reduce_job`` calls it once the ranks are matched) and, run on a
single trace like the other rules, finds nothing.
"""

from __future__ import annotations

from typing import Optional

from ....protocol.job import JobReport
from ....protocol.types import Diagnostic, Location
from . import rule
from .util import median, r3
from .util import ms as _ms

# rank-straggler thresholds (see ``rank_straggler`` for why these values)
LAST_SHARE = 0.75
MIN_MATCHED = 6
WAIT_SHARE = 0.30
DIFF_RATIO = 1.05
LAUNCH_RATIO = 1.2


@rule("rank-straggler", "One rank much slower than the others", "warning", job=True)
def rank_straggler(job: JobReport) -> Optional[Diagnostic]:
    """Evidence: per rank, the share of matched collectives it arrived last at; the other ranks'
    collective wait per step (each collective's duration beyond the shortest rank's: NCCL kernels
    and gloo calls spin until every peer arrives) against their step; and what differs on the late
    rank against the median of the others: CPU own time per step (step wall time minus blocking
    syncs), GPU compute, DataLoader time, launches.

    Threshold: fires on the rank that arrives last most often when (1) it is last at ≥ 75% of at
    least 6 matched collectives: with two ranks chance alone gives 50% (the balanced DDP pair splits
    23/28), a rank that really lags gates nearly every one (the FSDP pair: 144 of 144); (2) the others
    wait ≥ 30% of their step in collectives for it: jobs balanced by design show up to ~25% from
    phase jitter alone (the balanced NCCL pair: 25% and 19%, both ranks waiting in turn; the balanced
    gloo pair: 21%), a real straggler more (34% to all of the step on the recorded ones); and (3)
    something in its own work per step is larger than on the others (time ≥ 5% above their median,
    launches ≥ 20%: a rank-dependent code path shows as many more, a few are noise): a
    rank the others wait for is a straggler whatever the reason, and the message says how much wait
    it causes and what differs (a rank that is last while doing less than the others, as in the
    CPU-bound DDP pair, is a phase offset of the profiled window, not a slow rank). Absolute
    collective durations are never compared, only matched collectives across ranks; a rank that
    waits in a blocking collective has as long a step as the one it waits for, so step time alone
    says nothing.

    Why it costs time: a synchronous job runs at its slowest rank's pace: every other rank waits in
    its collectives for the straggler each step.

    Example:
        batch = per_rank_batch * (2 if rank == 1 else 1)   # uneven shards

    Fix: balance the work (equal shards, equal sequence lengths per rank), check the straggler's
    host (CPU contention, data loading, thermal throttling), or pin its processes.

    Ignore when: the imbalance is inherent and accepted (a rank that also logs or evaluates).

    Shown by: examples/nccl/fsdp_rank0.1796064976619326162.pt.trace.json.gz with
    examples/nccl/fsdp_rank1.1796064976475768587.pt.trace.json.gz (the two ranks of one job)
    """
    rows = [r for r in job.ranks if r.wait_us is not None]
    if len(rows) < 2 or job.collectives_matched < MIN_MATCHED:
        return None
    cand = max(rows, key=lambda r: (r.last_arrivals, r.cpu_own_us + r.compute_us))
    share = cand.last_arrivals / job.collectives_matched
    others = [r for r in rows if r is not cand]
    o_step = median(r.step_us for r in others)
    o_wait = median(r.wait_us for r in others)
    if share < LAST_SHARE or o_step <= 0 or o_wait < WAIT_SHARE * o_step:
        return None
    axes = [
        ("cpu", "CPU own time", "cpu_own_us"),
        ("gpu", "GPU compute", "compute_us"),
        ("data", "DataLoader time", "data_us"),
        ("launches", "launches", "launches"),
    ]
    diffs = []
    for side, label, f in axes:
        mine, theirs = getattr(cand, f), median(getattr(r, f) for r in others)
        if (
            mine > 0
            and mine > theirs
            and mine >= (LAUNCH_RATIO if side == "launches" else DIFF_RATIO) * theirs
        ):
            # time axes rank by the µs they add; launches by what ~5 µs of CPU each costs
            cost = (mine - theirs) * (5.0 if side == "launches" else 1.0)
            diffs.append((cost, side, label, mine, theirs))
    if not diffs:
        return None
    diffs.sort(reverse=True)
    parts = [
        f"{label} {_count(mine) if side == 'launches' else _ms(mine)} vs {_count(theirs) if side == 'launches' else _ms(theirs)}"
        + (f" ({mine / theirs:.2f}x)" if theirs > 0 else "")
        for _, side, label, mine, theirs in diffs
    ]
    msg = (
        f"rank {cand.rank} is the straggler: it arrives last at {cand.last_arrivals} of "
        f"{job.collectives_matched} matched collectives and the other ranks' collectives wait "
        f"{_ms(o_wait)} per step for it (their step: {_ms(o_step)}); what differs on rank {cand.rank} "
        f"per step: {', '.join(parts)}"
    )
    side = diffs[0][1]
    fix = {
        "cpu": "find what rank {r} does more of on the CPU (logging, rank-0-only work, a busier core, a "
        "slower data path) and move it off the step; fewer, larger collectives cut per-step dispatch",
        "gpu": "give rank {r} less work (balance the batch/sequence lengths or the sharding) or find why its "
        "kernels run longer (clocks, a shared GPU)",
        "data": "rank {r}'s input pipeline is slower: more DataLoader workers, pinned memory, or balance "
        "the data shards",
        "launches": "rank {r} launches more GPU work per step: look for rank-dependent code paths or "
        "unfused per-parameter work",
    }[side].format(r=cand.rank)
    evidence = {
        "rank": cand.rank,
        "last_arrivals": cand.last_arrivals,
        "collectives_matched": job.collectives_matched,
        "last_share": r3(share),
        "side": side,
        "differs": [d[1] for d in diffs],
        "compute_us": cand.compute_us,
        "others_compute_us": r3(median(r.compute_us for r in others)),
        "cpu_own_us": cand.cpu_own_us,
        "others_cpu_own_us": r3(median(r.cpu_own_us for r in others)),
        "data_us": cand.data_us,
        "others_data_us": r3(median(r.data_us for r in others)),
        "launches": cand.launches,
        "others_launches": r3(median(r.launches for r in others)),
        "step_us": cand.step_us,
        "others_step_us": r3(o_step),
        "others_wait_us": r3(o_wait),
        "others_wait_share": r3(o_wait / o_step),
        "straggler_wait_us": cand.wait_us,
    }
    return Diagnostic(
        code="rank-straggler",
        severity=rank_straggler.severity,
        message=msg,
        location=Location(path=cand.path, precision="trace"),
        evidence=evidence,
        fix=fix,
    )


def _count(v: float) -> str:
    return f"{v:.0f}"
