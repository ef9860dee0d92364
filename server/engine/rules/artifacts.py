"""Time that belongs to the profiler, not the program: ``profiler-artifact``."""

from __future__ import annotations

from typing import Iterable

from ....protocol.types import Diagnostic
from ..analyses import INFLATION, covered, profiler_inflation, verdict
from ..context import Context
from . import rule
from .util import median, pct, plural, r3, us

LANE_OFFSET_MIN_US = 100.0


@rule("profiler-artifact", "Time that belongs to the profiler, not the program", "information")
def profiler_artifact(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: ``Activity Buffer Request`` events; the CPU->GPU lane offset (first GPU event vs
    first CPU event of the window); the closing flush sync after the last step, judged by what the
    GPU did during it; and, when the verdict is overhead-bound, the profiler options that inflate
    CPU time with their measured factors.

    Thresholds: a lane offset of 100 µs or more beyond the CPU work every later step does before its
    first launch (a DataLoader fetch leading every step is the program's time: 46 ms of
    ``_SingleProcessDataLoaderIter.__next__`` before the first kernel is no profiler offset); the
    flush sync is always explained when present.
    These are facts about the measurement, reported as information so that nobody optimises them.

    Why it costs time: it is time the profiler adds (its buffers, the lane offset, the closing
    flush); optimising it changes nothing without the profiler.

    Example:
        prof.export_chrome_trace("t.json")   # the final cudaDeviceSynchronize is the profiler's

    Fix: nothing to fix in the program; read the other findings with this time taken out, and
    profile with fewer options when the verdict is CPU-side (see the measured inflation factors).

    Ignore when: always safe to ignore; it is reported so that nobody optimises it.

    Shown by: examples/tinygpt_naive.json.gz
    """
    m, a = ctx.model, ctx.a
    yield from _buffer_requests(ctx)
    if m.gpu and m.steps:
        offset = m.gpu[0].ts - m.steps[0].ts
        li = m.launcher[0]
        queued = m.gpu[0].ts - m.cpu[li].ts if li >= 0 else 0.0
        queued_before = li < 0 or (queued >= 0.5 * offset and queued >= 1000)
        # the CPU work every step does before its first launch (a DataLoader fetch, say) is the
        # program's, not the profiler's: only the first step's lead-in beyond it is an artifact
        usual = _usual_lead_in(ctx)
        if offset >= LANE_OFFSET_MIN_US and (queued_before or offset - usual >= LANE_OFFSET_MIN_US):
            if queued_before:
                waited = (
                    f"its launch waited {us(queued)} in the queue"
                    if li >= 0
                    else "it was launched before the recording started"
                )
                what = (
                    f"{waited}: the GPU was still running work "
                    f"queued before the recorded window (the schedule's warm-up steps), which the "
                    f"trace does not show"
                )
            else:
                what = "the profiler's CPU->GPU lane offset and the first dispatch, not a gap in your program"
                if usual >= LANE_OFFSET_MIN_US:
                    what += (
                        f" (beyond the {us(usual)} every later step spends on the CPU before its first "
                        f"launch, which is your program's)"
                    )
            yield ctx.diag(
                "profiler-artifact",
                f"the first GPU event starts {us(offset)} after the first step begins; {what}",
                ctx.trace_location(),
                evidence={
                    "kind": "lane-offset",
                    "offset_us": r3(offset),
                    "first_launch_queued_us": r3(queued),
                    "usual_lead_in_us": r3(usual),
                },
                fix="ignore this lead-in when reading the timeline; profd measures GPU busy from the first GPU event",
            )
    yield from _flush_sync(ctx)
    if verdict(m, a) == "overhead-bound":
        factor, on = cpu_inflation(m)
        names = ", ".join(n for n, _ in on) or "CPU+CUDA activities only"
        yield ctx.diag(
            "profiler-artifact",
            f"the overhead-bound verdict is measured under the profiler ({names}): on H200 these "
            f"settings made the CPU side at least {factor:.1f}x slower than unprofiled, so the real "
            f"CPU time per step is likely nearer {us(a.cpu_total_us / ctx.n_steps / factor)} than "
            f"{us(a.cpu_total_us / ctx.n_steps)}",
            ctx.trace_location(),
            evidence={
                "kind": "cpu-inflation",
                "options": [n for n, _ in on],
                "factor_at_least": factor,
                "cpu_per_step_us": r3(a.cpu_total_us / ctx.n_steps),
            },
            fix="confirm with an unprofiled timing (torch.cuda.Event or time.perf_counter around "
            "synchronised steps) and profile again without with_stack/record_shapes/profile_memory",
        )


def cpu_inflation(m) -> tuple[float, list]:
    """How much slower the profiler's options made the CPU side at least (the MANIFEST's factors,
    ``analyses.INFLATION``), and the (option, factor) pairs that are on."""
    return profiler_inflation(m), [(n, f) for n, f in INFLATION if getattr(m, n)]


def _usual_lead_in(ctx) -> float:
    """Median time from a later step's start to its first GPU launch on the main thread: the CPU
    work a step does before it launches anything (0 with fewer than two steps). The main thread's
    events are one stretch of cpu (``tindex``), so each step's first launch is one pass over the
    GPU events' launch steps (``Context.launch_step_index``)."""
    m = ctx.model
    base = m.tindex.base.get(m.main_thread) if m.main_thread is not None else None
    if base is None:
        return 0.0
    end = base + len(m.tindex.starts[m.main_thread])
    starts, seen = m.passes.group_min(
        ctx.launch_step_index(), m.launcher, m.cpu_starts(), base, end, len(m.steps)
    )
    firsts: dict[int, float] = {}
    for k in range(1, len(m.steps)):  # not the first step
        if seen[k]:
            st = m.steps[k]
            t = starts[k] - st.ts  # the least start less the step's: the least difference
            if st.number not in firsts or t < firsts[st.number]:
                firsts[st.number] = t
    return median(firsts.values()) if firsts else 0.0


def _buffer_requests(ctx):
    m = ctx.model
    evs = [m.cpu[i] for i in m.indices(("Activity Buffer Request",))]
    evs += [e for e in m.gpu_annotations if e.name == "Activity Buffer Request"]
    # the GPU lane's, found by their key (once per distinct name), not by reading every event
    on_gpu = ctx.a.keys.mask(lambda k, c: k[0] == "Activity Buffer Request")
    evs += map(m.gpu.__getitem__, m.passes.positions(on_gpu))
    if evs:
        total = sum(e.dur for e in evs)
        yield ctx.diag(
            "profiler-artifact",
            f"{plural(len(evs), 'Activity Buffer Request event')}, {us(total)}: the profiler allocating its "
            f"own event buffers, not your program",
            ctx.trace_location(),
            evidence={"kind": "activity-buffer-request", "count": len(evs), "total_us": r3(total)},
            fix="ignore it; a longer warmup in the schedule keeps it out of the active steps",
        )


def _flush_sync(ctx):
    m, a = ctx.model, ctx.a
    if not m.steps:
        return
    from .sync import SYNC_CALLS, is_profiler_internal

    last = m.steps[-1].end
    syncs = [m.cpu[i] for i in m.indices(SYNC_CALLS) if (m.cpu[i].ts >= last or is_profiler_internal(m, i))]
    if not syncs:
        return
    e = max(syncs, key=lambda e: e.dur)
    busy = covered(a.busy, e.ts, e.ts + e.dur) / e.dur if e.dur > 0 else 0.0
    if busy >= 0.5:
        meaning = (
            f"the GPU was busy for {pct(100 * busy)} of it: the CPU had run ahead of a busy "
            f"GPU, which is healthy"
        )
    else:
        meaning = f"the GPU was idle for {pct(100 * (1 - busy))} of it"
    yield ctx.diag(
        "profiler-artifact",
        f"the profiler's closing {e.name} after the last step blocks {us(e.dur)}; {meaning}",
        ctx.trace_location(),
        evidence={"kind": "flush-sync", "sync_us": r3(e.dur), "gpu_busy_during": r3(busy)},
        fix="not your code: the profiler flushes the GPU when it stops",
    )
