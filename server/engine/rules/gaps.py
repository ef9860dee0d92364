"""GPU timeline rules: ``gpu-idle-gap`` and ``gpu-contention``."""

from __future__ import annotations

import bisect
from operator import attrgetter
from typing import Iterable

from ....protocol.types import Diagnostic
from ..analyses import gaps, host_stages, index_of, merge, verdict
from ..context import Context
from ..impact import cpu_cut, per_step, zero
from ..stepmodel import Change, StepModel
from . import rule
from .util import pct, plural, quantile, r3, us

# A gap counts when it is at least this long (several launch latencies) ...
GAP_MIN_US = 50.0
# ... and the gaps inside the steps add up to this share of the window.
GAP_TOTAL_SHARE = 0.10
# gpu-contention: a kernel waits this long after its launch returned while our lane is idle.
CONTENTION_DELAY_US = 100.0
CONTENTION_MIN_SAMPLES = 3
CONTENTION_SHARE = 0.05  # of launched GPU events

_ts = attrgetter("ts")


def _cpu_during(ctx, lo: float, hi: float):
    """What held up the GPU during [lo, hi]: on the thread that launched the work that ended the
    gap (the autograd thread during backward, the main thread otherwise), the innermost
    non-python event covering most of the gap."""
    m = ctx.model
    key = m.main_thread
    g = bisect.bisect_left(m.gpu, hi - 1e-3, key=_ts)  # the GPU event that ended the gap
    if g < len(m.gpu) and m.launcher[g] >= 0:
        key = m.thread[m.launcher[g]]
    i = m.tindex.innermost(key, (lo + hi) / 2)
    fallback = -1
    while i >= 0:
        e = m.cpu[i]
        if e.cat != "python_function":
            if min(e.ts + e.dur, hi) - max(e.ts, lo) >= 0.5 * (hi - lo):
                return i
            fallback = i
        i = m.parent[i]
    if fallback < 0 and g < len(m.gpu) and m.launcher[g] >= 0:
        return m.launcher[g]
    return fallback


def _host_during(ctx, lo: float, hi: float) -> tuple[int, int]:
    """(event to place, event to name) for host work on the main thread during [lo, hi] that
    dispatched nothing: the innermost event covering most of it (an op, or the Python call, such
    as a generator building a batch with numpy, that ran then), placed at the statement that
    called it when it is a call of the user's own code."""
    m = ctx.model
    i = m.tindex.innermost(m.main_thread, (lo + hi) / 2)
    while i >= 0:
        e = m.cpu[i]
        if min(e.ts + e.dur, hi) - max(e.ts, lo) >= 0.5 * (hi - lo):
            break
        i = m.parent[i]
    if i < 0 or m.cpu[i].name.startswith("ProfilerStep#"):
        j = _cpu_during(ctx, lo, hi)
        return j, j
    fr = m.frames.get(i)
    at = m.parent[i] if fr is not None and fr.user and m.parent[i] >= 0 else i
    return at, i


def _main_during(m, lo: float, hi: float) -> int:
    i = m.tindex.innermost(m.main_thread, (lo + hi) / 2)
    while i >= 0 and m.cpu[i].cat == "python_function":
        i = m.parent[i]
    return i


@rule(
    "gpu-idle-gap",
    "GPU idle gaps inside steps",
    "warning",
    thresholds={"min-gap-us": GAP_MIN_US, "window-share": GAP_TOTAL_SHARE},
    saves=(per_step("idle_us"), zero),
)
def gpu_idle_gap(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: holes between GPU work inside the active steps, each with what the main thread
    was doing meanwhile (the op and the user line), largest first.

    Threshold: gaps of 50 µs or more that add up to 10% of the window, outside the stretches of
    one-time set-up (the GPU idles while the host compiles or loads: ``one-time-setup`` says so,
    and that idle time is no gap inside a step). On overhead-bound traces,
    where idle time is everywhere and ``overhead-bound`` explains it by the CPU dispatching, only
    a gap counts only as a stage of host work: one stretch, before the CPU starts its next op,
    that alone is a quarter of its step, while the main thread runs Python that is not torch's
    own (numpy or Python building the next batch, a sleep, I/O), which fewer or larger launches
    would not shorten; the overhead between ops (torch's dispatcher, the profiler's step) comes
    in many small pieces and stays ``overhead-bound``'s.

    Why it costs time: during each gap the GPU has nothing queued; whatever the CPU does meanwhile
    (the op and line in the message) sits on the critical path.

    Example:
        x = preprocess(batch).to(dev)    # CPU work between two GPU phases of the step

    Fix: move that CPU work off the step (DataLoader workers, precompute), overlap it with GPU work
    (``non_blocking=True`` copies, CUDA streams), or make it GPU work.

    Ignore when: the gap is a deliberate wait (a barrier, logging every N steps).

    Shown by: examples/tinygpt_naive.json.gz
    """
    m, a = ctx.model, ctx.a
    if not m.steps or not m.gpu:
        return
    lo, hi = a.window
    host_only = verdict(m, a) == "overhead-bound"
    # the GPU idle while the host compiles or loads (one-time set-up) is one-time-setup's finding,
    # not a gap inside a step: the set-up stretches count as covered
    holes = host_stages(m, a) if host_only else gaps(a.occupied(), lo, min(hi, m.steps[-1].end))
    holes = [(x, y) for x, y in holes if y - x >= ctx.threshold("gpu-idle-gap", "min-gap-us")]
    total = sum(y - x for x, y in holes)
    if not holes or total < ctx.threshold("gpu-idle-gap", "window-share") * a.window_us:
        return
    holes.sort(key=lambda g: -(g[1] - g[0]))
    # group the gaps by what the CPU was doing, so that one cause is one finding
    by_cause: dict = {}
    for x, y in holes:
        i, named = _host_during(ctx, x, y) if host_only else (_cpu_during(ctx, x, y),) * 2
        if i >= 0 and m.is_backward(i):
            # backward ops run on the autograd thread: one cause, placed where the main thread
            # waits for it (the loss.backward() line), naming the ops seen
            j = _main_during(m, x, y)
            c = by_cause.setdefault(("backward",), {"gaps": [], "op": j, "ops": {}})
            name = m.cpu[i].name.replace("autograd::engine::evaluate_function: ", "")
            c["ops"][name] = c["ops"].get(name, 0.0) + (y - x)
        else:
            k = ctx.line_id(i) or ("", m.cpu[i].name if i >= 0 else "?")
            c = by_cause.setdefault(k, {"gaps": [], "op": i, "named": named})
        c["gaps"].append((x, y))
    for k, c in sorted(by_cause.items(), key=lambda kv: -sum(y - x for x, y in kv[1]["gaps"]))[:3]:
        gs = c["gaps"]
        t = sum(y - x for x, y in gs)
        if t < 0.05 * a.window_us:
            continue
        op = c["op"]
        named = c.get("named", op)
        doing = m.cpu[named].name if named >= 0 else "nothing recorded"
        if host_only and named >= 0 and m.cpu[named].cat == "python_function":
            doing = f"Python with no GPU work queued ({doing})"
        if "ops" in c:
            top = sorted(c["ops"], key=lambda n: -c["ops"][n])[:3]
            doing = f"the autograd engine's backward ops ({', '.join(top)})"
        yield ctx.diag(
            "gpu-idle-gap",
            f"the GPU idles {us(t / ctx.n_steps)} per step ({pct(100 * t / a.window_us)} of the window) "
            f"in {plural(len(gs), 'gap')} up to {us(max(y - x for x, y in gs))}, while the CPU runs {doing}",
            ctx.location(op) if op >= 0 else ctx.trace_location(),
            evidence={
                "gaps": len(gs),
                "idle_us": r3(t),
                "idle_share": r3(t / a.window_us),
                "largest_gap_us": r3(max(y - x for x, y in gs)),
                "cpu_during": doing,
                "first_gap_at_us": r3(gs[0][0] - m.t0),
            },
            fix="move this CPU work off the critical path (pinned non_blocking copies, a DataLoader "
            "with workers, no host syncs) or overlap it with GPU work queued ahead",
        )


gpu_idle_gap.replay(cpu_cut("idle_us", over_steps=True))  # the CPU work the GPU waits on, gone


@rule(
    "gpu-contention",
    "Kernels start late while this trace's GPU lane is idle",
    "warning",
    saves=(
        zero,
        lambda d, ctx: (
            float(d.evidence.get("late_launches") or 0)
            * float(d.evidence.get("late_delay_median_us") or 0)
            / ctx.n_steps
        ),
    ),
)
def gpu_contention(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: launch-to-start delays (kernel start minus the launch call's start) of kernels
    that waited while this trace's own GPU work was idle, with p50/p90/max; the kernels' own
    durations stay steady.

    Threshold: at least 3 such kernels, 5% of the launches, each waiting 100 µs or more with our
    lane less than 10% busy meanwhile. A long delay while our own lane is busy is just a queue
    (the CPU ahead of a busy GPU), not contention. Each kernel's first launch in the trace is left
    out: with lazy module loading (CUDA's default) it loads the kernel's module, and the first
    launch after context creation sets the context up, which delays it with no one else around.

    Why it costs time: kernels were ready but started late while this process's GPU lane was idle:
    another process or stream held the GPU, so this job's steps stretch for reasons outside its code.

    Example:
        # two jobs on one GPU: CUDA_VISIBLE_DEVICES=0 python train.py & CUDA_VISIBLE_DEVICES=0 python eval.py

    Fix: give the job a GPU of its own (or a MIG slice), schedule the other work elsewhere, or
    profile when the GPU is not shared.

    Ignore when: sharing the GPU is intended and the slowdown is accepted.

    Shown by: examples/recorded/contention_contended.json.gz
    """
    m, a = ctx.model, ctx.a
    own = merge(a.busy + a.comm) if a.comm else a.busy  # a merged list alone is its own merge
    delays, candidates = m.passes.launch_delays(m.gpu, m.launcher, m.cpu, CONTENTION_DELAY_US)
    late = _late(m, own, candidates)
    if len(late) < CONTENTION_MIN_SAMPLES or len(late) < CONTENTION_SHARE * max(1, len(delays)):
        return
    ds = [d for d, _ in late]
    worst = max(late)[1]
    yield ctx.diag(
        "gpu-contention",
        f"{len(late)} of {len(delays)} GPU launches started {us(quantile(ds, 0.5))} (median; max "
        f"{us(max(ds))}) after their launch while this process's GPU work was idle: another process "
        f"or context holds the GPU (launch delay p50 {us(quantile(delays, 0.5))}, p90 "
        f"{us(quantile(delays, 0.9))} overall)",
        ctx.location(m.launcher[worst]),
        evidence={
            "late_launches": len(late),
            "launches": len(delays),
            "delay_p50_us": r3(quantile(delays, 0.5)),
            "delay_p90_us": r3(quantile(delays, 0.9)),
            "delay_max_us": r3(max(delays)),
            "late_delay_median_us": r3(quantile(ds, 0.5)),
        },
        fix="profile on a dedicated GPU (check nvidia-smi for other processes, MPS or MIG "
        "neighbours); the kernels themselves are not slow",
    )


def _late(m, own, candidates) -> list[tuple[float, int]]:
    """(launch delay, GPU event) of the candidates that waited while our own lane (``own``, merged)
    was idle: it covered under a tenth of the wait after the launch call returned (the idle_waits
    pass, over the columns: tens of thousands of candidates)."""
    delays, late = m.passes.idle_waits(
        candidates, m.gpu_spans().flat, m.launcher, m.cpu_starts(), m.durs, index_of(own), 0.1
    )
    return list(zip(delays, late))


@gpu_contention.replay
def _uncontended(sm: StepModel, d: Diagnostic) -> Change:
    """The late launches start on time: their median delay each, gone from the GPU side."""
    return Change(
        gpu_cut_us=float(d.evidence.get("late_launches") or 0)
        * float(d.evidence.get("late_delay_median_us") or 0)
        / len(sm.steps)
    )
