"""What fixing a finding would give back: time per step and its share of the step, and the
severity that follows from it.

Each rule with a time cost states, from its own evidence, the CPU and GPU time per step a fix
removes (``SAVES``). A step lasts as long as the longer of its CPU time and its GPU work
(``analyses.step_gpu``), so a saving counts only where it shortens that: a step that is
``wall = max(cpu, gpu)`` becomes ``max(cpu - saved_cpu, gpu - saved_gpu)``. Removing a sync that
waits on a busy GPU gives back nothing; speeding up a kernel in a launch-bound step gives back
nothing either; both are then information, not warnings.

The CPU side is the unprofiled estimate: the profiler slows dispatch by a measured factor
(``analyses.profiler_inflation``: at least 1.5x, 2.0x with ``with_stack``), not the time the CPU
waits in syncs, so a step's CPU time is ``wait + (range - wait) / factor`` and a CPU saving other
than a wait shrinks by the same factor. Shares are of that estimated step.

Severity bands, by the share of the step a fix gives back: 10% or more is an ``error``, 1% or
more a ``warning``, less ``information``. A finding with no time cost (memory, summaries, the
profiler's own time) keeps its catalog severity (or the one its rule chose).
"""
from __future__ import annotations

from typing import Callable, Optional

from ...protocol.types import Diagnostic
from .analyses import profiler_inflation

ERROR_SHARE = 0.10
WARNING_SHARE = 0.01

# Measured on H200 (docs/workloads.md, examples/recorded/README.md), used as conservative factors:
TF32_GIVES_BACK = 0.75  # fp32 GEMMs on CUDA cores: bf16 was 7-14x faster at 4096-8192; TF32 >= 4x
ALIGNED_GIVES_BACK = 0.5  # misaligned fallback GEMMs: the aligned twin ran 5.6x faster; claim 2x
PER_PARAM_GIVES_BACK = 0.8  # foreach/fused and set_to_none remove the per-parameter dispatch
PINNED_GPU_GIVES_BACK = 0.5  # pinned copies run at full bandwidth (about 2x pageable's)


def _ev(key: str, scale: float = 1.0) -> Callable:
    return lambda d, ctx: float(d.evidence.get(key) or 0.0) * scale


def _per_step(key: str, scale: float = 1.0) -> Callable:
    return lambda d, ctx: float(d.evidence.get(key) or 0.0) * scale / ctx.n_steps


def _line_cpu(scale: float) -> Callable:
    """The CPU time per step of the finding's own line (its hot line), scaled."""
    def f(d, ctx):
        loc = d.location
        h = ctx.hot.get((loc.trace_path, loc.line)) if loc.trace_path and loc.line else None
        return (max(h.cpu_total_us, h.cpu_inclusive_us) / ctx.n_steps * scale) if h else 0.0  # with its callees
    return f


def _zero(d, ctx) -> float:
    return 0.0


# code -> (CPU µs per step a fix removes, GPU µs per step a fix removes)
SAVES: dict[str, tuple[Callable, Callable]] = {
    "host-sync": (_ev("blocked_us_per_step"), _zero),
    "sync-wait": (_ev("blocked_us_per_step"), _zero),
    "gpu-idle-gap": (_per_step("idle_us"), _zero),  # the CPU work the GPU waits on
    "dataloader-bound": (lambda d, ctx: _ev("loader_us_per_step")(d, ctx) * float(d.evidence.get("gpu_idle_share") or 0),
                         _zero),
    "pageable-memcpy": (_per_step("launch_cpu_us"), _per_step("gpu_us", PINNED_GPU_GIVES_BACK)),
    "optimizer-foreach-off": (_line_cpu(PER_PARAM_GIVES_BACK), _zero),
    "zero-grad-not-none": (_line_cpu(PER_PARAM_GIVES_BACK), _ev("gpu_us_per_step")),
    "launch-storm": (_ev("launch_cpu_us_per_step"), _zero),
    "fp32-matmul": (_zero, _per_step("fp32_gemm_us", TF32_GIVES_BACK)),
    "misaligned-dims": (_zero, _per_step("gpu_us", ALIGNED_GIVES_BACK)),
    "gpu-contention": (_zero, lambda d, ctx: float(d.evidence.get("late_launches") or 0)
                       * float(d.evidence.get("late_delay_median_us") or 0) / ctx.n_steps),
    "compile-overhead": (lambda d, ctx: float(d.evidence.get("wrapper_us_per_call") or 0)
                         * float(d.evidence.get("regions") or 0) / ctx.n_steps, _zero),
    "compile-graph-break": (_ev("gap_us_per_step"), _zero),
    "unfused-attention": (_zero, _ev("other_us_per_step")),
}


# Rules whose CPU saving is time blocked waiting on the GPU (not inflated by the profiler).
WAITS = frozenset({"host-sync", "sync-wait"})


def given_back(ctx, cpu_us: float, gpu_us: float, wait: bool = False) -> tuple[float, float]:
    """(µs per step given back, the estimated step) when ``cpu_us`` of CPU time (a wait on the GPU
    when ``wait``, else dispatch measured under the profiler) and ``gpu_us`` of GPU time per step
    go away; both means over the steps."""
    f = profiler_inflation(ctx.model)
    saved_cpu = cpu_us if wait else cpu_us / f
    # the GPU side of a step is its longer engine: kernels, or copies (a copy-bound step)
    steps = [(g.unprofiled_cpu_us(f), max(g.work_us, g.copy_us)) for g in ctx.a.step_gpu] or \
        [(ctx.a.window_us / f, ctx.a.busy_us)]
    saved = total = 0.0
    for cpu, work in steps:
        wall = max(cpu, work)
        saved += max(0.0, wall - max(cpu - saved_cpu, work - gpu_us, 0.0))
        total += wall
    return saved / len(steps), total / len(steps)


def severity_for(share: float) -> str:
    return "error" if share >= ERROR_SHARE else "warning" if share >= WARNING_SHARE else "information"


def assign(ctx, diagnostics: list[Diagnostic]) -> None:
    """Set each finding's impact (µs per step, % of the step) and, where it has a time cost, the
    severity its impact earns."""
    for d in diagnostics:
        fs = SAVES.get(d.code)
        if fs is None:
            continue
        try:
            cpu, gpu = fs[0](d, ctx), fs[1](d, ctx)
        except (TypeError, ValueError):  # evidence a rule did not fill: no impact rather than a crash
            continue
        saved, step = given_back(ctx, max(0.0, cpu), max(0.0, gpu), d.code in WAITS)
        share = saved / step if step > 0 else 0.0
        d.impact_us_per_step = round(saved, 3)
        d.impact_pct = round(100 * share, 2)
        d.severity = severity_for(share)


def order(d: Diagnostic) -> tuple:
    """Findings by what a fix gives back, largest first; those with no time cost after, by severity."""
    sev = {"error": 0, "warning": 1, "information": 2, "hint": 3}.get(d.severity, 9)
    imp: Optional[float] = d.impact_us_per_step
    return (imp is None, -(imp or 0.0), sev, d.location.path or "", d.location.line or 0, d.code)
