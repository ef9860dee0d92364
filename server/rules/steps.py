"""Step-shape rules: ``cold-start-step``."""
from __future__ import annotations

import bisect

from . import rule
from .util import median, r3, us

# The first active step must be this much wider than the median of the rest, and by at least
# COLD_START_MIN_US, to count: a few percent is ordinary step-to-step noise.
COLD_START_RATIO = 1.5
COLD_START_MIN_US = 50.0


def _first_op_delay(m, step) -> float | None:
    """Time from the step's start to its first aten op on the same thread (the seed's dead window)."""
    starts = m.tindex.starts.get(m.main_thread, [])
    positions = m.tindex.positions.get(m.main_thread, [])
    j = bisect.bisect_left(starts, step.ts)
    while j < len(starts) and starts[j] <= step.end:
        e = m.cpu[positions[j]]
        if e.cat == "cpu_op":
            return e.ts - step.ts
        j += 1
    return None


@rule("cold-start-step")
def cold_start_step(ctx):
    """Evidence: the first ProfilerStep's duration against the median of the other steps.

    Threshold: at least 1.5x the median of the rest and 50 µs wider, with three or more steps.
    The first step pays workspace allocation, cuBLAS heuristics, lazy module loading and allocator
    growth; ``schedule(warmup=1)`` keeps some of it out but not all (seen on H200 traces recorded
    with wait=1, warmup=1). Averages over active steps then overstate the steady state.
    """
    m = ctx.model
    if len(m.steps) < 3:
        return
    first = m.steps[0]
    rest = median(s.dur for s in m.steps[1:])
    if rest <= 0 or first.dur < COLD_START_RATIO * rest or first.dur - rest < COLD_START_MIN_US:
        return
    delay = _first_op_delay(m, first)
    later = [_first_op_delay(m, s) for s in m.steps[1:]]
    later = [d for d in later if d is not None]
    dead = ""
    if delay is not None and later and delay > 2 * median(later):
        dead = f"; {us(delay)} pass before its first op dispatches (vs {us(median(later))} later)"
    yield ctx.diag(
        "cold-start-step",
        f"first active step {first.name} takes {us(first.dur)}, {first.dur / rest:.1f}x the median "
        f"{us(rest)} of the other {len(m.steps) - 1}{dead}: a cold start inside the measured window",
        ctx.trace_location(),
        evidence={"first_step": first.name, "first_step_us": r3(first.dur), "median_rest_us": r3(rest),
                  "ratio": r3(first.dur / rest), "first_op_delay_us": r3(delay) if delay is not None else None},
        fix="run a few warm-up iterations before the profiler starts and use "
            "schedule(wait=1, warmup=1, active=N); judge steady state from the later steps",
    )
