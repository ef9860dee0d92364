"""torch.compile rules: ``compile-overhead``, ``compile-fusion`` and ``compile-graph-break``."""

from __future__ import annotations

from typing import Iterable

from ....protocol.types import Diagnostic
from .. import kernels as K
from ..analyses import covered, profiler_inflation
from ..context import Context, LineKey
from ..impact import cpu_cut, ev, zero
from ..statements import RESUME_RE
from ..stepmodel import Change, StepModel
from . import rule
from .util import median, plural, r3, us

REGION = "Torch-Compiled Region"
WRAPPER_OPS = ("TorchDynamo Cache Lookup",)
SMALL_REGION_KERNELS = 2  # kernels per call at or below which fusion cannot save much
FUSED_OPS = {
    "aten::addmm": "aten::add + aten::mm",
    "aten::_addmm_activation": "aten::addmm + activation",
    "aten::baddbmm": "aten::add + aten::bmm",
}


def _regions(m):
    return [i for i in m.named(REGION) if m.cpu[i].cat == "cpu_op"]


GRAPH_CALL = "## Call CompiledFxGraph"
RESUME = "torch_dynamo_resume_in_"
GRAPH_RUNS = ("CompiledFunction", GRAPH_CALL)  # one compiled graph running (training / inference)


def _nearest_region(m, i: int) -> int:
    for a in m.ancestors(i):
        if m.cpu[a].cat == "cpu_op" and m.cpu[a].name.startswith(REGION):
            return a
    return -1


def _break_site(m, region: int):
    """(frame path, break line, function) from the resume frame a region runs, else None."""
    for c in m.children(region):
        fr = m.frames.get(c)
        hit = RESUME_RE.match(fr.function) if fr is not None else None
        if hit:
            return fr.path, int(hit.group(2)), hit.group(1)
    return None


def breaks(m, in_steps: bool = True) -> list[dict]:
    """Every graph break: each compiled graph that a call of a compiled function runs beyond its
    first. Dynamo compiles the code after a break apart, as a resume function: its compiled region
    runs nested in the first graph's (and its ``torch_dynamo_resume_in_<fn>_at_<line>`` frame names
    the break's line), or the region runs a further ``## Call CompiledFxGraph``; a resume frame
    outside any enclosing region is a break whose call cannot be told (``outer`` -1). Per break:
    the graph it resumes in (``region``), the call it splits (``outer``), the break site (from the
    resume frame), the CPU time between the previous graph's end and the resume (``gap``) and the
    eager ops the CPU ran there. ``in_steps``: only breaks inside the profiled steps.

    One implementation for ``compile-graph-break`` (what each break costs) and
    ``compile-overhead`` (whose one-or-two-op verdict does not apply to a function with breaks)."""
    found: dict[int, int] = {}  # resumed graph -> the call it splits
    regions = _regions(m)
    for r in regions:
        p = _nearest_region(m, r)
        if p >= 0:
            found[r] = p
    for r in regions:  # further graphs one region runs itself
        own = [j for j in m.subtree(r) if m.cpu[j].name.startswith(GRAPH_CALL) and _nearest_region(m, j) == r]
        for j in own[1:]:
            found[j] = r
    # resumed code whose region is no call's (or ran without one): the frames tested once per
    # distinct frame, their events found in the id column
    for i, _ in m.frames.matching(lambda fr: fr.function.startswith(RESUME)):
        r = _nearest_region(m, i)
        if r not in found:
            found.setdefault(r if r >= 0 else i, -1)
    out = []
    for r in sorted(found):
        p = found[r]
        ts = m.cpu[r].ts
        if in_steps and m.step_at(ts) is None:
            continue
        if p < 0:
            out.append({"region": r, "outer": p, "site": _break_site(m, r), "gap": (ts, ts), "eager": []})
            continue
        prev, eager = m.cpu[p].ts, []
        for j in m.subtree(p):
            e = m.cpu[j]
            if e.ts >= ts or j == p or _nearest_region(m, j) != p:
                continue
            if e.name.startswith(GRAPH_RUNS) or (e.cat == "cpu_op" and e.name.startswith(REGION)):
                prev = max(prev, e.ts + e.dur)
        for j in m.subtree(p):
            e = m.cpu[j]
            if prev <= e.ts < ts and e.cat == "cpu_op" and m.enclosing_op(j) == p:
                eager.append(j)
        out.append({"region": r, "outer": p, "site": _break_site(m, r), "gap": (prev, ts), "eager": eager})
    return out


@rule(
    "compile-overhead",
    "torch.compile wrapper time outweighs a tiny region",
    "warning",
    saves=(
        lambda d, ctx: (
            float(d.evidence.get("wrapper_us_per_call") or 0)
            * float(d.evidence.get("regions") or 0)
            / ctx.n_steps
        ),
        zero,
    ),
)
def compile_overhead(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: per call of a compiled function (an outermost ``Torch-Compiled Region``), the
    wrapper's CPU time (the region and its Dynamo cache lookup, minus the aten ops the compiled
    graph dispatches) against the GPU time of the kernels it runs.

    Threshold: one or two kernels per call, whose wrapper on a steady call (the median call: the
    first builds guards and warms caches), divided by the profiler's measured CPU inflation for the
    options on (``profiler-artifact``'s factors, 1.5x-2.4x on H200), still costs more CPU time than
    their GPU work, in a function Dynamo compiled whole: a 4096² GEMM's 180 µs hide a wrapper that
    only the profiler makes look as long. With one or two ops there is nothing to fuse, so the
    Dynamo/AOTAutograd/Inductor wrappers are pure tax (the seed measured about 2x the eager CPU
    time). A function that runs several graphs per call (graph breaks: nested regions, resume
    frames, several ``CompiledFxGraph`` calls) has a different problem, ``compile-graph-break``'s;
    a region that runs no kernel is not a GPU cost at all.

    Why it costs time: a compiled region's wrappers (Dynamo guards, AOTAutograd, Inductor runtime)
    cost CPU time on every call; with one or two ops inside there is nothing to fuse to pay for it.

    Example:
        f = torch.compile(lambda a, b, bias: a @ b + bias)   # one GEMM: nothing to fuse

    Fix: compile a larger region (the whole model or step), or leave tiny functions eager;
    ``mode="reduce-overhead"`` adds CUDA graphs that remove launch costs.

    Ignore when: the region grows in real use, or compile time and wrappers are amortised elsewhere.

    Shown by: examples/seed_n64_bf16_compiled.json.gz
    """
    m = ctx.model
    regions = _regions(m)
    if not regions or breaks(m, in_steps=False):
        return
    wrappers, gpus = [], []
    kernels = 0
    for r in regions:
        sub = m.subtree(r)
        aten = [
            j
            for j in sub
            if m.cpu[j].cat == "cpu_op"
            and m.cpu[j].name.startswith("aten::")
            and m.enclosing_op(j) >= 0
            and not m.cpu[m.enclosing_op(j)].name.startswith("aten::")
        ]
        lookup = 0.0
        p = m.parent[r]
        if p >= 0:
            lookup = sum(m.cpu[c].dur for c in m.children(p) if m.cpu[c].name in WRAPPER_OPS)
        wrappers.append(m.cpu[r].dur + lookup - sum(m.cpu[j].dur for j in aten))
        gs = m.gpu_under(r)
        gpus.append(sum(m.gpu[g].dur for g in gs))
        kernels += sum(m.gpu[g].cat == "kernel" for g in gs)
    n = len(regions)
    # a steady call, not the first one (guards built, caches cold: cold-start-step's finding), and
    # the wrapper as it would cost without the profiler, which inflates CPU time at least this much
    wrapper, gpu = median(wrappers), median(gpus)
    factor = profiler_inflation(m)
    if kernels == 0 or kernels / n > SMALL_REGION_KERNELS or wrapper / factor <= gpu:
        return
    yield ctx.diag(
        "compile-overhead",
        f"torch.compile region of {plural(kernels / n, 'kernel')} per call: its Dynamo/AOT wrappers cost "
        f"{us(wrapper)} of CPU per call (at least {us(wrapper / factor)} without the profiler) against "
        f"{us(gpu)} of GPU work; nothing is left to fuse",
        ctx.location(regions[0]),
        evidence={
            "regions": n,
            "kernels_per_call": r3(kernels / n),
            "wrapper_us_per_call": r3(wrapper),
            "unprofiled_wrapper_us_at_least": r3(wrapper / factor),
            "gpu_us_per_call": r3(gpu),
        },
        fix="compile a larger region (the whole model or training step) so fusion pays for the "
        "wrapper, or leave one- and two-op functions eager",
    )


@compile_overhead.replay
def _eager(sm: StepModel, d: Diagnostic) -> Change:
    """The tiny regions run eagerly: their wrappers' time per step is gone from the CPU."""
    return Change(
        cpu_cut_us=float(d.evidence.get("wrapper_us_per_call") or 0)
        * float(d.evidence.get("regions") or 0)
        / len(sm.steps)
        * sm.mean_scale
    )


@rule("compile-fusion", "What dispatcher-level fusion really ran on the GPU", "information")
def compile_fusion(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: a fused aten op (``aten::addmm`` for ``mm + add``) dispatched inside a compiled
    region, and what the GPU ran for it: a bias copy (``Memcpy DtoD``) before the GEMM (older
    stacks) or the bias folded into the GEMM epilogue (``*_bias_*`` kernels on Hopper/CUDA 13).

    Threshold: none; information whenever a compiled region dispatches a fused op.

    Why it costs time: it reports what fusion really happened: a bias copy before the GEMM means the
    fused op did not save the extra memory pass on this stack.

    Example:
        y = torch.compile(lambda a, b, bias: a @ b + bias)(a, b, bias)   # aten::addmm

    Fix: nothing, or upgrade the stack: on Hopper/CUDA 13 the bias is folded into the GEMM epilogue.

    Ignore when: always safe to ignore (information).

    Shown by: examples/seed_n4096_bf16_compiled.json.gz
    """
    m = ctx.model
    seen: dict = {}
    for r in _regions(m):
        for j in m.subtree(r):
            e = m.cpu[j]
            if e.cat == "cpu_op" and e.name in FUSED_OPS:
                runs = [m.gpu[g] for g in m.gpu_under(j)]
                seen.setdefault(e.name, []).append((j, runs))
    for name, calls in seen.items():
        runs = [g for _, rs in calls for g in rs]
        copies = [g for g in runs if g.cat == "gpu_memcpy" and "DtoD" in g.name]
        gemms = [g for g in runs if g.cat == "kernel"]
        epilogue = any("bias" in g.name.lower() for g in gemms)
        if copies:
            what = (
                f"a bias copy ({copies[0].name}, {us(sum(c.dur for c in copies) / len(calls))}) then the "
                f"GEMM: fusion at the dispatcher, not in the kernel"
            )
        elif epilogue:
            what = "one GEMM with the bias folded into its epilogue (no separate add kernel)"
        else:
            what = f"{plural(len(gemms) / len(calls), 'kernel')} per call"
        kn = K.short_name(gemms[0].name, 60) if gemms else "?"
        yield ctx.diag(
            "compile-fusion",
            f"torch.compile fused {FUSED_OPS[name]} into {name}; the GPU ran {what} ({kn})",
            ctx.location(calls[0][0]),
            evidence={
                "op": name,
                "calls": len(calls),
                "bias_copy": bool(copies),
                "bias_epilogue": epilogue,
                "kernels": sorted({g.name for g in gemms}),
            },
            fix=None,
        )


# ---- compile-graph-break ---------------------------------------------------------------------
@rule(
    "compile-graph-break",
    "A compiled function runs as several graphs with eager code between",
    "warning",
    saves=(ev("gap_us_per_step"), zero),
)
def compile_graph_break(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: compiled regions nested in a compiled region (or a further
    ``## Call CompiledFxGraph`` one region runs), each the code after a graph break that Dynamo
    compiled apart and resumes in (its ``torch_dynamo_resume_in_<fn>_at_<line>`` frame names the
    break's line; without stacks, the region's name), per step: the graphs per call,
    the CPU time between the graph before the break and the resume (the eager code at the break,
    and the guard check of the resume function) and how much of it the GPU sat idle.

    Threshold: any break inside the steps: a warning. A break splits one graph in two: no fusion
    across it, a second Dynamo/AOT wrapper per call, and eager code between that often syncs with
    the GPU (a tensor in a Python condition, ``.item()``, ``print``). The graph break line is
    what to change (``torch._dynamo.explain`` or ``TORCH_LOGS=graph_breaks`` say why it breaks).

    Why it costs time: the compiled function runs as several graphs: no fusion across the break,
    a Dynamo guard check and AOT wrapper for each graph, and the code at the break runs eagerly on
    the CPU while the GPU waits for the next graph (and, for a tensor in a condition, for the host
    to read it).

    Example:
        @torch.compile
        def forward(self, x):
            h = self.l1(x)
            if h.mean() > 0:   # data-dependent branch: the graph breaks here
                h = h * 0.5
            return self.l2(h)

    Fix: make the code at the break traceable: ``torch.where(cond, a, b)`` or ``torch.cond``
    instead of a Python ``if`` on a tensor; no ``.item()``, ``print`` or data-dependent shapes
    inside the compiled function; or move that code out of it. ``TORCH_LOGS=graph_breaks`` (or
    ``torch._dynamo.explain``) names the reason Dynamo broke.

    Ignore when: the break is deliberate (a ``torch._dynamo.graph_break()`` around code that cannot
    be compiled) and the time between the graphs is small next to the step.

    Shown by: examples/recorded/graph_break_break.json.gz
    """
    m, a = ctx.model, ctx.a
    groups: dict = {}
    for b in breaks(m):
        if b["outer"] < 0:  # no call to measure the break in
            continue
        key = b["site"][:2] if b["site"] else m.cpu[b["region"]].name
        groups.setdefault(key, []).append(b)
    n = ctx.n_steps
    for key, bs in groups.items():
        gap = sum(hi - lo for b in bs for lo, hi in [b["gap"]]) / n
        idle = sum(hi - lo - covered(a.busy, lo, hi) for b in bs for lo, hi in [b["gap"]]) / n
        ops: dict[str, float] = {}
        for b in bs:
            for j in b["eager"]:
                ops[m.cpu[j].name] = ops.get(m.cpu[j].name, 0.0) + m.cpu[j].dur / n
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:4]
        calls = len({b["outer"] for b in bs})
        graphs = 1 + len(bs) / max(1, calls)
        site = bs[0]["site"]
        if site:
            path, line, fn = site
            loc = ctx.location_of_key(LineKey(path, line, fn, "statement"))
            where = f"{fn}() breaks its graph at line {line}"
        else:
            loc = ctx.trace_location()
            where = f"a compiled function breaks its graph ({m.cpu[bs[0]['region']].name} resumes it)"
        eager = ", ".join(f"{nm} {us(t)}" for nm, t in top) or "no aten op"
        yield ctx.diag(
            "compile-graph-break",
            f"torch.compile: {where}: {graphs:.0f} graphs per call, {len(bs) / n:.0f} break(s) per step; "
            f"between the graphs the CPU spends {us(gap)} per step in eager code and guards ({eager}), "
            f"the GPU idle {us(idle)} of it",
            loc,
            evidence={
                "breaks_per_step": r3(len(bs) / n),
                "graphs_per_call": r3(graphs),
                "gap_us_per_step": r3(gap),
                "gpu_idle_us_per_step": r3(idle),
                "eager_ops": {nm: r3(t) for nm, t in top},
                "regions": sorted({m.cpu[b["region"]].name for b in bs}),
                "impact_basis": "gpu_idle_us_per_step",
            },
            related=[
                ctx.related(
                    bs[0]["outer"],
                    f"the compiled region this break splits ({m.cpu[bs[0]['outer']].name}), entered here",
                )
            ],
            fix="make the code at the break traceable (keep tensors out of Python conditions: torch.where / "
            "torch.cond; no .item(), print or data-dependent shapes inside the compiled function), or "
            "move it out of the compiled function; TORCH_LOGS=graph_breaks says why Dynamo broke",
        )


compile_graph_break.replay(cpu_cut("gap_us_per_step"))  # the eager code between the graphs, gone
