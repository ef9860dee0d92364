"""What fixing a finding would give back: time per step and its share of the step, and the
severity that follows from it.

Each rule with a time cost declares, beside its check (``server/engine/rules/<family>.py``), the
change its fix makes to the replayed step (``@rule.replay``: faster GEMMs, a loop made one call, a
sync that no longer waits; ``stepmodel.py`` replays it), and from its own evidence the CPU and GPU
time per step a fix removes (``saves=``), the estimate when the step cannot be replayed. This module
holds the machinery they share. A step lasts as long as the longer of its CPU time and its GPU work
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

import os
from typing import Callable, Optional

from ...protocol.types import Diagnostic
from .analyses import profiler_inflation
from .rules import Rule, declared
from .rules.util import us
from .stepmodel import Change, StepModel

ERROR_SHARE = 0.10
WARNING_SHARE = 0.01


# ---- what a fix removes, from a finding's evidence (a rule's ``saves=``) ----------------------
def ev(key: str, scale: float = 1.0) -> Callable:
    """Evidence ``key`` (µs per step), scaled."""
    return lambda d, ctx: float(d.evidence.get(key) or 0.0) * scale


def per_step(key: str, scale: float = 1.0) -> Callable:
    """Evidence ``key`` (µs over the steps) per step, scaled."""
    return lambda d, ctx: float(d.evidence.get(key) or 0.0) * scale / ctx.n_steps


def line_cpu(scale: float) -> Callable:
    """The CPU time per step of the finding's own line (its hot line), scaled."""

    def f(d, ctx):
        loc = d.location
        h = ctx.hot.get((loc.trace_path, loc.line)) if loc.trace_path and loc.line else None
        return (
            (max(h.cpu_total_us, h.cpu_inclusive_us) / ctx.n_steps * scale) if h else 0.0
        )  # with its callees

    return f


def zero(d, ctx) -> float:
    return 0.0


def given_back(ctx, cpu_us: float, gpu_us: float, wait: bool = False) -> tuple[float, float]:
    """(µs per step given back, the estimated step) when ``cpu_us`` of CPU time (a wait on the GPU
    when ``wait``, else dispatch measured under the profiler) and ``gpu_us`` of GPU time per step
    go away; both means over the steps."""
    f = profiler_inflation(ctx.model)
    saved_cpu = cpu_us if wait else cpu_us / f
    # the GPU side of a step is its longer engine: kernels, or copies (a copy-bound step)
    steps = [(g.unprofiled_cpu_us(f), max(g.work_us, g.copy_us)) for g in ctx.a.step_gpu] or [
        (ctx.a.window_us / f, ctx.a.busy_us)
    ]
    saved = total = 0.0
    for cpu, work in steps:
        wall = max(cpu, work)
        saved += max(0.0, wall - max(cpu - saved_cpu, work - gpu_us, 0.0))
        total += wall
    return saved / len(steps), total / len(steps)


def severity_for(share: float) -> str:
    return "error" if share >= ERROR_SHARE else "warning" if share >= WARNING_SHARE else "information"


# Dense peak TFLOPS by compute capability: (fp32 on CUDA cores, TF32 tensor cores, 16-bit tensor
# cores), from the vendors' data sheets (H100/H200 SXM: 67 / 495 / 989; the corpus's 4096³ fp32
# GEMM ran 7.9x faster in TF32 on the H200, the peak ratio is 7.4). None: no such tensor cores.
PEAK_TFLOPS = {
    (7, 0): (15.7, None, 125.0),
    (7, 5): (8.1, None, 65.0),
    (8, 0): (19.5, 156.0, 312.0),
    (8, 6): (31.2, 62.5, 125.0),
    (8, 7): (5.3, 10.6, 21.2),
    (8, 9): (91.6, 183.0, 362.0),
    (9, 0): (67.0, 495.0, 989.0),
    (10, 0): (80.0, 1100.0, 2250.0),
    (12, 0): (105.0, 210.0, 420.0),
}
GEMM_EFFICIENCY = 0.6  # of the 16-bit peak that an aligned large GEMM reaches (nvjet on H200: 0.67)
KERNEL_FLOOR_US = 2.0  # the shortest a kernel runs, whatever it does


def peaks(m) -> tuple:
    cc = m.compute_capability
    if cc is None:
        return (None, None, None)
    return PEAK_TFLOPS.get(tuple(cc)) or PEAK_TFLOPS.get((cc[0], 0)) or (None, None, None)


# ---- the changes a fix makes to the replayed step (a rule's ``@rule.replay``) -----------------
def in_ranges(sm: StepModel, prefix: str) -> list:
    """The calls made inside the main thread's ``prefix`` annotations (``Optimizer.step#``),
    whatever line they are on (a trace without stacks has none)."""
    m = sm.ctx.model
    spans = sorted(
        (m.cpu[i].ts, m.cpu[i].ts + m.cpu[i].dur)
        for i in m.named(prefix)
        if m.cpu[i].cat == "user_annotation"
    )
    if not spans:
        return []
    out, k = [], 0
    for p in sm.points():  # both in time order
        while k < len(spans) and spans[k][1] < p.ts:
            k += 1
        if k < len(spans) and spans[k][0] <= p.ts <= spans[k][1]:
            out.append(p)
    return out


def loop(sm: StepModel, own: list) -> Change:
    """A loop made one call (foreach, a vectorised op): of ``own``, the kernels launched over and
    over (not the one-off ones) keep the CPU time of one launch per kernel, and each loses the
    floor a launch costs the GPU (the shortest of them) but keeps its work."""
    m = sm.ctx.model
    count: dict = {}
    for p in own:
        for g, _, _ in p.ops:
            count[m.gpu[g].name] = count.get(m.gpu[g].name, 0) + 1
    n_steps = len(sm.steps)
    loop = {name for name, c in count.items() if c > n_steps}
    pts = [p for p in own if p.ops and all(m.gpu[g].name in loop for g, _, _ in p.ops)]
    if not pts:
        return Change()
    share = min(1.0, len(loop) * n_steps / len(pts))
    floor = min(dd for p in pts for _, _, dd in p.ops)
    ch = Change()
    for p in pts:
        ch.keep[p.i] = share
        for g, _, dd in p.ops:
            ch.dur[g] = max(0.0, dd - floor) + floor * share
    return ch


def line_loop(sm: StepModel, d) -> Change:
    """The loop of the finding's own line (not its backward's)."""
    m = sm.ctx.model
    return loop(sm, [p for p in sm.on_line(d) if p.ops and m.frame_of[p.i] >= 0])


def cpu_cut(key: str, over_steps: bool = False) -> Callable:
    """Evidence ``key`` (µs per step, or over the steps) of host work gone from the step."""

    def f(sm, d):
        v = float(d.evidence.get(key) or 0.0)
        return Change(cpu_cut_us=(v / len(sm.steps) if over_steps else v) * sm.mean_scale)

    return f


def gpu_cut(key: str) -> Callable:
    """Evidence ``key`` (µs per step) of GPU work gone from the step."""
    return lambda sm, d: Change(gpu_cut_us=float(d.evidence.get(key) or 0.0))


HIDDEN_SHARE = 0.25  # a fix that gives back under a quarter of what it removes is hidden ...
HIDDEN_MIN = 0.01  # ... when what it removes is at least 1% of the step
HIDDEN_MAX_FIRST = 4  # fixes named as what to do first, at most


def change_for(sm: StepModel, d: Diagnostic) -> Optional[Change]:
    """The change finding ``d``'s fix makes to the replayed step, as its rule declares it."""
    r = declared(d.code)
    f = r.change if r else None
    if f is None:
        return None
    try:
        ch = f(sm, d)
    except (TypeError, ValueError, KeyError, ZeroDivisionError):
        return None
    return None if ch.empty() else ch


def assign(ctx, diagnostics: list[Diagnostic]) -> None:
    """Set each finding's impact (µs per step, % of the step) and, where it has a time cost, the
    severity its impact earns; a finding whose fix is hidden behind what bounds the step says so,
    names the fix that would unhide it and what it gives back then."""
    sm: Optional[StepModel] = None  # replayed only for a finding with a time cost (no others)
    changes: dict[int, Change] = {}
    after: dict[int, float] = {}  # the replayed step with each finding's fix alone
    for d in diagnostics:
        r = declared(d.code)
        if r is None or (r.saves is None and r.change is None):
            continue
        if sm is None:
            sm = StepModel.of(ctx)
        if r.saves is None and not sm.ok:
            continue
        ch = change_for(sm, d) if sm.ok else None
        if ch is None and r.saves is None:
            continue
        if ch is not None:
            changes[id(d)] = ch
            after[id(d)] = sm.run(ch)
            saved, step = max(0.0, sm.base - after[id(d)]), sm.base
        else:
            fs = r.saves
            assert fs is not None  # ch is None here only when the rule declares saves
            try:
                cpu, gpu = fs[0](d, ctx), fs[1](d, ctx)
            except (TypeError, ValueError):  # evidence a rule did not fill: no impact rather than a crash
                continue
            saved, step = given_back(ctx, max(0.0, cpu), max(0.0, gpu), r.waits)
            if sm.ok:  # shares of the replayed step, as the others
                step = sm.base
            cost = max(cpu, gpu)
            if cost >= HIDDEN_MIN * step and saved < HIDDEN_SHARE * cost:
                d.evidence["impact_cost_us_per_step"] = round(cost, 3)
                d.impact_note = _not_waited(d, "CPU" if gpu >= cpu else "GPU", cost)
        share = min(1.0, saved / step) if step > 0 else 0.0
        d.impact_us_per_step = round(min(saved, step), 3)
        d.impact_pct = round(100 * share, 2)
        if not r.keep_severity:
            d.severity = severity_for(share)
    if sm is not None and sm.ok:  # without it no finding has a change to compare
        _same_fix(diagnostics, changes)
        _hidden(sm, diagnostics, changes, after)


def _same_fix(diagnostics: list[Diagnostic], changes: dict) -> None:
    """A symptom whose change is another finding's on the same line says it is the same fix."""
    for d in diagnostics:
        if not _symptom(d) or id(d) not in changes:
            continue
        for o in diagnostics:
            if (
                o is not d
                and not _symptom(o)
                and id(o) in changes
                and (o.location.trace_path, o.location.line) == (d.location.trace_path, d.location.line)
                and changes[id(o)].keep == changes[id(d)].keep
            ):
                d.impact_note = f"the same loop as {o.code} on this line: its fix is this one's"
                d.evidence["impact_same_fix_as"] = o.code
                break


def _hidden(sm: StepModel, diagnostics: list[Diagnostic], changes: dict, after: dict) -> None:
    """For a fix that gives back little of what it removes: the other finding whose fix, made
    first, lets it give back most, and how much then."""
    base = sm.base
    withc = [d for d in diagnostics if id(d) in changes]
    for d in withc:
        ch = changes[id(d)]
        cpu_rm, gpu_rm = sm.removed(ch)
        cost = max(cpu_rm, gpu_rm)
        if cost < HIDDEN_MIN * base or (d.impact_us_per_step or 0.0) >= HIDDEN_SHARE * cost:
            continue
        side = "CPU" if gpu_rm >= cpu_rm else "GPU"  # a GPU saving hides behind a CPU-bound step
        others = sorted(
            (
                o
                for o in withc
                if o is not d and not _same_place(o, d) and "impact_same_fix_as" not in o.evidence
            ),
            key=order,
        )[:HIDDEN_MAX_FIRST]
        best, then = [], 0.0
        for o in others:  # the one fix made first that lets this one give back most
            oc = changes[id(o)]
            gain = after[id(o)] - sm.run(oc | ch)
            if gain > then:
                best, then = [o], gain
        need = max(HIDDEN_MIN * base, 2 * (d.impact_us_per_step or 0.0))
        if then < need:  # none alone: the others in the order profd ranks them, until it shows
            acc = Change()
            for k, o in enumerate(others):
                acc = acc | changes[id(o)]
                gain = sm.run(acc) - sm.run(acc | ch)
                if gain >= need:
                    best, then = others[: k + 1], gain
                    break
        d.evidence["impact_cost_us_per_step"] = round(cost, 3)
        if best and then >= need:
            d.impact_hidden_by = best[0].code
            d.impact_then_us_per_step = round(then, 3)
            first = ", ".join(f"{o.code}{_where(o)}" for o in best)
            d.impact_note = (
                f"hidden behind the {side}-bound step: fix {first} first; then ~{us(then)} per step"
            )
        else:
            d.impact_note = _not_waited(d, side, cost)


def _not_waited(d: Diagnostic, side: str, cost: float) -> str:
    return (
        f"hidden behind the {side}-bound step: it removes {us(cost)} per step that the step does not wait on"
    )


def _same_place(a: Diagnostic, b: Diagnostic) -> bool:
    return (a.location.trace_path, a.location.line) == (b.location.trace_path, b.location.line)


def pair_gain(ctx, diagnostics: list[Diagnostic]) -> tuple[float, float]:
    """(µs per step, the replayed step) that fixing all of ``diagnostics`` together gives back:
    their changes applied at once, so two findings of one fix (a single-tensor optimizer's
    launch storm and the optimizer finding itself) count once; findings the model cannot replay
    add their own impact."""
    sm = StepModel.of(ctx)
    ch, extra = Change(), 0.0
    for d in diagnostics:
        c = change_for(sm, d) if sm.ok else None
        if c is None:
            extra += d.impact_us_per_step or 0.0
        else:
            ch = ch | c
    base = sm.base if sm.ok else 0.0
    gain = max(0.0, base - sm.run(ch)) if sm.ok and not ch.empty() else 0.0
    return gain + extra, base


def _where(d: Diagnostic) -> str:
    loc = d.location
    if loc.path and loc.line:
        return f" ({os.path.basename(loc.path)}:{loc.line})"
    return ""


def impact_text(d: Diagnostic) -> Optional[str]:
    """What a fix gives back, as every front end says it: "a fix gives back ~2.31 ms per step
    (5.9% of the step)", and why it is small when it is hidden ("...; hidden behind the CPU-bound
    step: fix optimizer-foreach-off first (fixes.py:47); then ~7.10 ms per step")."""
    if d.impact_us_per_step is None:
        return None
    text = f"a fix gives back ~{us(d.impact_us_per_step)} per step ({d.impact_pct:.1f}% of the step)"
    return text + (f"; {d.impact_note}" if d.impact_note else "")


def top(diagnostics: list[Diagnostic], n: int = 3) -> list[Diagnostic]:
    """The ``n`` findings whose fixes give back most, largest first, each fix once (a symptom
    whose fix is another finding's on its line is left out)."""
    return sorted(
        (d for d in diagnostics if d.impact_us_per_step and "impact_same_fix_as" not in d.evidence), key=order
    )[:n]


def order(d: Diagnostic) -> tuple:
    """Findings by what a fix gives back, largest first; those with no time cost after, by severity."""
    sev = {"error": 0, "warning": 1, "information": 2, "hint": 3}.get(d.severity, 9)
    imp: Optional[float] = d.impact_us_per_step
    return (imp is None, -(imp or 0.0), _symptom(d), sev, d.location.path or "", d.location.line or 0, d.code)


def _symptom(d: Diagnostic) -> bool:
    """A finding that describes a symptom another rule names the cause of (a launch storm on the
    line of a single-tensor optimizer is that optimizer's loop): on a tie the cause comes first."""
    r: Optional[Rule] = declared(d.code)
    return r is not None and r.symptom
