"""Step-shape rules: ``cold-start-step``, ``one-time-setup``."""

from __future__ import annotations

import bisect
from typing import Iterable

from ....protocol.types import Diagnostic
from ..analyses import covered
from ..context import Context
from ..model import LAUNCH_CATS
from . import rule
from .util import median, r3, us

# The first active step must be this much wider than the median of the rest, and by at least
# COLD_START_MIN_US, to count: a few percent is ordinary step-to-step noise.
COLD_START_RATIO = 1.5
COLD_START_MIN_US = 50.0


def _first_op_delay(m, step) -> float | None:
    """Time from the step's start to its first aten op on the same thread (the seed's dead window)."""
    starts = m.tindex.starts.get(m.main_thread, [])
    base = m.tindex.base.get(m.main_thread, 0)
    j = bisect.bisect_left(starts, step.ts)
    while j < len(starts) and starts[j] <= step.end:
        e = m.cpu[base + j]
        if e.cat == "cpu_op":
            return e.ts - step.ts
        j += 1
    return None


def _first_time_work(m) -> list[str]:
    """What only the first step does: runtime calls absent from every later step, and growth of
    the allocator's reserved memory that later steps do not repeat."""
    per_step: list[set] = [set() for _ in m.steps]
    index = {id(s): k for k, s in enumerate(m.steps)}
    for i in m.indices(m.names_of(LAUNCH_CATS)):
        st = m.step_at(m.cpu[i].ts)
        if st is not None:
            per_step[index[id(st)]].add(m.cpu[i].name)
    later = set().union(*per_step[1:]) if len(per_step) > 1 else set()
    out = sorted(per_step[0] - later)
    grew = []
    mem = m.memory  # columns, sorted by time
    for st in m.steps:
        lo, hi = bisect.bisect_left(mem.ts, st.ts), bisect.bisect_right(mem.ts, st.end)
        inside = [mem.total_reserved[k] for k in range(lo, hi) if mem.device_type[k] == 1]
        grew.append(bool(inside) and max(inside) > inside[0])
    if grew and grew[0] and not any(grew[1:]):
        out.append("allocator growth (Total Reserved rises)")
    return out


@rule("cold-start-step", "First active step much wider than the rest", "warning")
def cold_start_step(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: the first ProfilerStep's duration against the median of the other steps, the
    delay before its first op dispatches, and the first-time work only it does (runtime calls no
    later step makes, allocator growth).

    Threshold: at least 1.5x the median of the rest and 50 µs wider, with three or more steps.
    A warning when first-time work is visible (workspace allocation, module loading, allocator
    growth: warm up outside the profiler). Information when none is: on the H200 traces the first
    active step is ~100 µs wider on its first op whether or not the program warmed up outside the
    profiler, which is the profiler's own start-up, not the program's. Silent when the first step
    holds one-time set-up (``one-time-setup`` fires on it): that finding names what the step does
    (context creation, lazy loading, library set-up, compiling) and its share, and the verdict
    already leaves it out; one cause, one finding. This rule keeps the first steps that are wider
    without set-up long enough to name (allocator growth, a few first-time runtime calls, the
    profiler's start-up).

    Why it costs time: one-off work (cuBLAS workspaces, allocator growth, lazy module loading) lands
    in the first profiled step and inflates it; averages over the steps then mislead.

    Example:
        with profile(schedule=schedule(wait=0, warmup=0, active=3)) as prof:
            for step in range(3):        # the first step pays the warm-up
                train_step(); prof.step()

    Fix: warm up outside the profiler (run two or three steps first) or use
    ``schedule(wait=1, warmup=1, active=3)``.

    Ignore when: start-up time is what you are measuring.

    Shown by: examples/mlp_eager.1796061140317126347.pt.trace.json.gz
    """
    m = ctx.model
    if len(m.steps) < 3:
        return
    first = m.steps[0]
    if covered(ctx.a.setup, first.ts, first.end) > 0:
        return  # one-time-setup owns a first step that holds set-up: one cause, one finding
    rest = median(s.dur for s in m.steps[1:])
    if rest <= 0 or first.dur < COLD_START_RATIO * rest or first.dur - rest < COLD_START_MIN_US:
        return
    delay = _first_op_delay(m, first)
    later = [_first_op_delay(m, s) for s in m.steps[1:]]
    later = [d for d in later if d is not None]
    dead = ""
    if delay is not None and later and delay > 2 * median(later):
        dead = f"; {us(delay)} pass before its first op dispatches (vs {us(median(later))} later)"
    work = _first_time_work(m)
    if work:
        why = f"; only this step does {', '.join(work[:4])}: first-time work inside the measured window"
    else:
        why = (
            "; it does no first-time work (no extra runtime calls, no allocator growth): if the "
            "program already warms up outside the profiler, this is the profiler's own start-up"
        )
    yield ctx.diag(
        "cold-start-step",
        f"first active step {first.name} takes {us(first.dur)}, {first.dur / rest:.1f}x the median "
        f"{us(rest)} of the other {len(m.steps) - 1}{dead}{why}",
        ctx.trace_location(),
        evidence={
            "first_step": first.name,
            "first_step_us": r3(first.dur),
            "median_rest_us": r3(rest),
            "ratio": r3(first.dur / rest),
            "first_op_delay_us": r3(delay) if delay is not None else None,
            "first_time_work": work,
        },
        fix="run a few warm-up iterations before the profiler starts and use "
        "schedule(wait=1, warmup=1, active=N); judge steady state from the later steps",
        severity="warning" if work else "information",
    )


@rule("one-time-setup", "One-time set-up inside the profiled window", "warning")
def one_time_setup(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: the one-time host work inside the active window (``windows.setup_intervals``): long
    CUDA context and module calls (``cudaFree``, ``cuModuleLoadData``, ``hipModuleLoadData``, stream
    creation), launches many times their API's median (lazy kernel loading: one 626 ms
    ``cudaLaunchKernel`` at a first ``conv1d``), first calls of an op many times its later calls
    (cuDNN/cuBLAS handles and heuristics), and torch.compile compiling (Dynamo's timed phases,
    Inductor's ``compile_fx_inner``, codegen, autotuning); its share of the window.

    Threshold: 5 ms and 10% of the active window (merged). Also in windows without steps. The
    verdict leaves this stretch out (the shares are of the rest of the window); when no step is
    free of it (the window is one cold call) there is no steady state to judge and the verdict is
    ``set-up``, unless the GPU is busy 80% of the rest (compute-bound whatever the host did). It
    owns a first step that holds set-up: ``cold-start-step`` stays silent on it (one cause, one
    finding; this one names what the step does and how much of the window it holds).

    Why it costs time: it does not: it happens once per process. But inside the profiled window it
    dwarfs the steady state, and read as dispatch it makes a GPU-bound program look overhead-bound.

    Example:
        model = torch.compile(model)
        with profile() as prof:
            for x in batches[:5]:
                model(x)            # the first call compiles inside the window

    Fix: warm up before profiling (run the model, the loss, the optimizer step and the compiled
    function a few times first) or profile with ``schedule(wait=1, warmup=1, active=N)``; for
    torch.compile, cache compiled artifacts (``TORCHINDUCTOR_FX_GRAPH_CACHE``, the default, and
    ``TORCHINDUCTOR_AUTOGRAD_CACHE``) or run the compile before the profiler.

    Ignore when: start-up time is what you are measuring.

    Shown by: examples/corpus/traces/wild/compile_cold.json.gz
    """
    from ..windows import setup_intervals

    m, a = ctx.model, ctx.a
    if a.setup_us <= 0:
        return
    lo, hi = a.window
    kinds: dict[str, float] = {}
    for x, y, what in setup_intervals(m):
        x, y = max(x, lo), min(y, hi)
        if y > x:
            kind = (
                "torch.compile compiling"
                if what.startswith("torch.compile")
                else (
                    "lazy kernel loading"
                    if "lazy" in what
                    else (
                        "CUDA context/module set-up"
                        if not what.startswith("first")
                        else "first-call library set-up"
                    )
                )
            )
            kinds[kind] = kinds.get(kind, 0.0) + (y - x)
    share = 100.0 * a.setup_us / a.window_us
    parts = ", ".join(k for k, _ in sorted(kinds.items(), key=lambda kv: -kv[1]))
    rest = (
        "the verdict judges the rest"
        if a.steady_steps
        else "no step is free of it, so the window holds no steady state: profile warm to judge one"
    )
    yield ctx.diag(
        "one-time-setup",
        f"{us(a.setup_us)} of the {us(a.window_us)} window ({share:.0f}%) is one-time set-up ({parts}); {rest}",
        ctx.trace_location(),
        evidence={
            "setup_us": r3(a.setup_us),
            "window_us": r3(a.window_us),
            "setup_pct": r3(share),
            "kinds": sorted(kinds),
        },
        fix="warm up before profiling (a few calls of the model, loss and optimizer step, and of the compiled "
        "function) or use schedule(wait=1, warmup=1, active=N); keep torch.compile's caches "
        "(TORCHINDUCTOR_FX_GRAPH_CACHE) so compilation is not repeated",
    )
