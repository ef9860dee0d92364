"""Is the GPU or the CPU the bottleneck? ``overhead-bound``, ``compute-bound``, ``transfer-bound``,
``small-problem``."""

from __future__ import annotations

from itertools import compress
from operator import attrgetter
from typing import Iterable

from ....protocol.types import Diagnostic
from ..analyses import COPY_CATS, host_stages, verdict
from ..context import Context
from ..kernels import COMMUNICATION, GEMM, short_name
from ..stepmodel import NONBLOCKING, Change, StepModel
from . import rule
from .util import GEMM_OPS, pct, plural, r3, shapes, size, us

_dur = attrgetter("dur")
# A GEMM of fewer FLOPs than this finishes on a Hopper/Ampere GPU (hundreds of TFLOP/s) in about a
# microsecond: less than its own launch costs. Below it the problem cannot keep the GPU busy.
SMALL_GEMM_FLOPS = 1e9
# Without shapes: GEMM kernels this short are launch-latency sized.
SMALL_GEMM_KERNEL_US = 10.0


def _top_launch_line(ctx):
    """The hot line that launches most (ties: more CPU time)."""
    lines = [h for h in ctx.hot.values() if h.launches]
    return max(lines, key=lambda h: (h.launches, h.cpu_total_us)) if lines else None


def _inflation_note(m) -> str:
    opts = [
        n
        for n, on in (
            ("with_stack", m.with_stack),
            ("record_shapes", m.record_shapes),
            ("profile_memory", m.profile_memory),
        )
        if on
    ]
    return ("; the profiler itself inflates CPU time (options on: " + ", ".join(opts) + ")") if opts else ""


@rule("overhead-bound", "GPU mostly idle while the CPU dispatches", "warning", keep_severity=True)
def overhead_bound(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: GPU busy share of the active window (collectives left out), CPU op time vs GPU time
    per step (the evidence's ``cpu_total_us``/``cuda_total_us``: over all active steps), launches
    per step, and the line that launches most.

    Threshold: busy < 30% of the window. Below that the GPU waits for the CPU most of the time: a
    faster kernel cannot shorten the step, fewer or larger launches can.

    Why it costs time: the GPU finishes each kernel before the CPU has launched the next one, so the
    step lasts as long as the Python and dispatcher work: a faster GPU or kernel changes nothing.

    Example:
        for x in batch:                  # batch-1 inference, one small layer after another
            y = mlp(x.unsqueeze(0))

    Fix: give the GPU more work per launch (batch the inputs), launch less (torch.compile,
    CUDA graphs: ``torch.compile(mode="reduce-overhead")``), or move the Python loop into tensor ops.

    Ignore when: the run is a deliberately tiny benchmark or a debug configuration; production
    shapes are the ones to profile.

    Shown by: examples/mlp_eager.1796061140317126347.pt.trace.json.gz
    """
    if verdict(ctx.model, ctx.a) != "overhead-bound":
        return
    a, m = ctx.a, ctx.model
    top = _top_launch_line(ctx)
    loc = ctx.location_of_hot(top) if top else ctx.trace_location()
    n = ctx.n_steps
    per_step = a.launches / n
    where = f"; {top.launches / n:.0f} of them from this line" if top else ""
    yield ctx.diag(
        "overhead-bound",
        f"{_busy(a)}{_copies_note(a)}: per step CPU ops "
        f"{us(a.cpu_total_us / n)} vs GPU {us(a.cuda_total_us / n)}; the CPU dispatches "
        f"{plural(per_step, 'launch')} per step{where}" + _inflation_note(m),
        loc,
        evidence={
            "gpu_busy_pct": r3(a.busy_pct),
            "copy_busy_pct": r3(a.copy_pct or 0.0),
            "cpu_total_us": r3(a.cpu_total_us),
            "cuda_total_us": r3(a.cuda_total_us),
            "launches_per_step": r3(per_step),
            "window_us": r3(a.window_us),
            **_steady_evidence(a),
        },
        fix="launch less and bigger: batch the work, fuse ops (torch.compile), capture the step in a "
        "CUDA graph (mode='reduce-overhead'), or raise the problem size",
    )


@overhead_bound.replay
def _graphed(sm: StepModel, d: Diagnostic) -> Change:
    """The step captured as a CUDA graph (or compiled with mode="reduce-overhead"): one replay
    launches its work, so the CPU time between its launches is gone; the GPU work stays. What
    that gives back is the most a restructuring does, so the finding keeps its severity."""
    return Change(keep={p.i: 0.0 for p in sm.points() if p.kind == NONBLOCKING and p.ops})


@rule("compute-bound", "GPU busy for most of the active steps", "information")
def compute_bound(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: GPU busy share of the active window and the kernel families that hold it (conv,
    GEMM, attention, elementwise, reduction, copy, communication: many small variants of one
    family hold the GPU together), each with its largest kernel.

    Threshold: busy >= 80%. The GPU is the bottleneck; CPU-side savings cannot shorten the step,
    so the message names the kernels worth optimising.

    Why it costs time: it does not waste time: the GPU is the bottleneck, so only faster kernels
    (precision, fusion, better shapes) or less work shorten the step.

    Example:
        y = a @ b + bias                 # 4096 x 4096 bf16: the GEMM holds the GPU

    Fix: look at the kernels the message names: bf16/TF32 instead of fp32, fused attention,
    torch.compile to fuse elementwise work, shapes that are multiples of 8.

    Ignore when: the kernels are already the fastest available; this is the state to be in.

    Shown by: examples/seed_n4096_bf16.json.gz
    """
    if verdict(ctx.model, ctx.a) != "compute-bound":
        return
    m, a = ctx.model, ctx.a
    fams = kernel_families(m, a)
    total = a.cuda_total_us or 1.0
    shown = [(c, f) for c, f in fams[:3] if f["total_us"] >= 0.01 * total] or fams[:1]
    names = ", ".join(
        f"{c} {100 * f['total_us'] / total:.0f}% ({f['kernels']} kernel(s), largest "
        f"{short_name(f['top'], 40)})"
        for c, f in shown
    )
    hot = max(ctx.hot.values(), key=lambda h: h.gpu_us, default=None)
    loc = ctx.location_of_hot(hot) if hot and hot.gpu_us > 0 else ctx.trace_location()
    yield ctx.diag(
        "compute-bound",
        f"{_busy(a)} (per step GPU {us(a.cuda_total_us / ctx.n_steps)} "
        f"vs CPU ops {us(a.cpu_total_us / ctx.n_steps)}); held by {names}",
        loc,
        evidence={
            "gpu_busy_pct": r3(a.busy_pct),
            "cpu_total_us": r3(a.cpu_total_us),
            "cuda_total_us": r3(a.cuda_total_us),
            **_steady_evidence(a),
            "families": [
                {
                    "class": c,
                    "total_us": r3(f["total_us"]),
                    "count": f["count"],
                    "kernels": f["kernels"],
                    "top_kernel": f["top"],
                }
                for c, f in fams
            ],
        },
        fix="the GPU is the bottleneck: lower precision (bf16/fp8), fuse memory-bound kernels, or "
        "pick a faster algorithm; CPU-side changes will not shorten the step",
    )


def _busy(a) -> str:
    """The busy share the verdict judged: of the active steps, or, with one-time set-up in the
    window, of the rest of it (analyses.verdict), the whole window's beside it."""
    if a.setup_us > 0:
        return (
            f"GPU busy {pct(a.steady_pct(a.steady_busy_us))} outside the one-time set-up, "
            f"{pct(a.busy_pct)} of the whole window"
        )
    return f"GPU busy {pct(a.busy_pct)} of the active steps"


def _steady_evidence(a) -> dict:
    return {"steady_busy_pct": r3(a.steady_pct(a.steady_busy_us))} if a.setup_us > 0 else {}


def _copies_note(a) -> str:
    """The copy engines' share beside the kernels' busy share, when they ran."""
    cp = a.copy_pct or 0.0
    return f" (copy engines {pct(cp)} more)" if cp >= 1.0 else ""


@rule("transfer-bound", "Host/device copies fill the step", "warning")
def transfer_bound(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: the share of the active window in which the copy engines ran host<->device copies
    or memsets, against the kernels' share; per direction the bytes and copy time per step and
    the rate they reached; whether the host side was pinned or pageable; the line that issued
    the most copy time.

    Threshold: copies run 80% of the window (the compute-bound bar) and longer than kernels.
    Copies and memsets are GPU work on their own engines (DMA): a step of them is as busy as a
    step of kernels, so calling it overhead-bound at "GPU busy 0%" would send the reader after
    launches that are not there.

    Why it costs time: the step cannot be shorter than the bytes that cross the host link (PCIe or
    C2C) at the rate it reaches; faster kernels or less Python change nothing while the copy
    engines are the busy part of the GPU.

    Example:
        for step in range(steps):
            x = host_batch.to("cuda")        # 154 MB over PCIe every step
            y = model(x).cpu()                # and the result back

    Fix: move fewer bytes: keep tensors on the device across steps, copy once outside the loop,
    send a smaller dtype (bf16/uint8) and convert on the GPU; from pinned memory with
    ``non_blocking=True`` on a side stream, overlap the copies with compute.

    Ignore when: moving the data is the point (a bandwidth benchmark, an offloading scheme);
    then check the rate against the link's.

    Shown by: examples/wild/torchbench__trace.json.gz
    """
    m, a = ctx.model, ctx.a
    if verdict(m, a) != "transfer-bound":
        return
    lo, hi = a.window
    n = ctx.n_steps
    dirs: dict[str, dict] = {}
    lines: dict = {}
    pageable = 0.0
    total = 0.0
    for g, e in enumerate(m.gpu):
        if e.cat not in COPY_CATS or a.gpu_class[g] == COMMUNICATION or e.ts + e.dur <= lo or e.ts >= hi:
            continue
        kind = next(
            (k for k in ("HtoD", "DtoH", "DtoD", "PtoP") if k in e.name),
            "memset" if e.cat == "gpu_memset" else "copy",
        )
        d = dirs.setdefault(kind, {"bytes": 0, "us": 0.0, "count": 0})
        d["bytes"] += int(e.args.nbytes or 0) if e.args else 0
        d["us"] += e.dur
        d["count"] += 1
        total += e.dur
        pageable += e.dur if "Pageable" in e.name else 0.0
        li = m.launcher[g]
        k = ctx.line_id(li) if li >= 0 else None
        if k is not None:
            lines[k] = (lines.get(k, (0.0, li))[0] + e.dur, li)
    order = sorted(dirs.items(), key=lambda kv: -kv[1]["us"])
    parts = []
    for kind, d in order[:3]:
        rate = f" at {d['bytes'] / d['us'] / 1e3:.1f} GB/s" if d["bytes"] and d["us"] > 0 else ""
        parts.append(f"{kind} {size(d['bytes'] / n)} in {us(d['us'] / n)}{rate}")
    host = (
        ("from pageable memory" if pageable >= 0.5 * total else "from pinned memory")
        if any(k in dirs for k in ("HtoD", "DtoH"))
        else "device-side"
    )
    top = max(lines.values(), key=lambda v: v[0]) if lines else None
    loc = ctx.location(top[1]) if top else ctx.trace_location()
    yield ctx.diag(
        "transfer-bound",
        f"the copy engines run copies {pct(a.copy_pct)} of the active window, kernels {pct(a.busy_pct)}: "
        f"per step {', '.join(parts)} ({host}); the step is as long as its transfers",
        loc,
        evidence={
            "copy_busy_pct": r3(a.copy_pct),
            "gpu_busy_pct": r3(a.busy_pct),
            "window_us": r3(a.window_us),
            "pageable_share": r3(pageable / total) if total else 0.0,
            "directions": {
                k: {
                    "bytes_per_step": d["bytes"] / n,
                    "us_per_step": r3(d["us"] / n),
                    "count": d["count"],
                    "gb_per_s": r3(d["bytes"] / d["us"] / 1e3) if d["us"] > 0 else None,
                }
                for k, d in order
            },
        },
        fix="move fewer bytes: keep tensors on the GPU across steps, copy once outside the loop, send a smaller "
        "dtype and convert on the device; overlap the rest with compute (pinned memory, non_blocking=True)",
    )


def kernel_families(m, a) -> list[tuple[str, dict]]:
    """GPU time by kernel family (conv, GEMM, attention, elementwise, reduction, copy,
    communication), largest first: a family of many small variants (ResNet's convolutions) holds
    the GPU as one. Per family: total µs, launches, distinct kernels and the largest of them."""
    per: dict[str, dict] = {}
    names: dict[tuple[str, str], float] = {}
    for g, e in enumerate(m.gpu):
        c = a.gpu_class[g]
        f = per.setdefault(c, {"total_us": 0.0, "count": 0})
        f["total_us"] += e.dur
        f["count"] += 1
        names[(c, e.name)] = names.get((c, e.name), 0.0) + e.dur
    for (c, n), t in names.items():
        f = per[c]
        f["kernels"] = f.get("kernels", 0) + 1
        if t > f.get("top_us", -1.0):
            f["top"], f["top_us"] = n, t
    for f in per.values():
        f.pop("top_us")
    return sorted(per.items(), key=lambda kv: -kv[1]["total_us"])


def _biggest_gemm(ctx: Context):
    """(flops, dims, op index) of the GEMM op with the most FLOPs among those that recorded their
    input dims (the first of equals), None without any. A step runs the same GEMMs on the same
    shapes: each is worked out once per op name and inputs (``input_key``, the ops' column of them
    shared with misaligned-dims); an op of inputs seen before has an earlier op of its FLOPs."""
    best = None
    cpu = ctx.model.cpu
    seen: set = set()  # (name, input_key) of the ops worked out
    ops, keys = ctx.op_input_keys(GEMM_OPS)
    for i, key in zip(ops, keys):
        if key is not None:  # else worked out alone
            if key in seen:
                continue
            seen.add(key)
        got = _gemm_shape(cpu[i])
        if got is not None and (best is None or got[0] > best[0]):  # as max(): the first of equals
            best = (*got, i)
    return best


def _gemm_shape(e) -> tuple[float, tuple] | None:
    """(flops, (batch, M, K, N)) of one GEMM op from its input shapes, None without two matrices."""
    mats, _ = shapes(e)
    if len(mats) < 2:
        return None
    a_, b_ = mats[-2], mats[-1]
    if e.name in ("aten::linear",):
        a_, b_ = mats[0], mats[1][::-1]
    batch = 1
    for d in a_[:-2]:
        batch *= d
    mm, k, n = a_[-2], a_[-1], b_[-1]
    return 2.0 * batch * mm * k * n, (batch, mm, k, n)


@rule("small-problem", "Overhead-bound with small GEMM shapes", "information")
def small_problem(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: overhead-bound, and the GEMMs are tiny: from ``record_shapes`` their FLOPs, else
    their kernel durations.

    Threshold: every recorded GEMM under 1 GFLOP (about a microsecond on a modern GPU, less than its
    launch), or without shapes a median GEMM kernel under 10 µs. A benchmark this small measures
    launch overhead, not the model: production-sized problems are usually compute-bound. Not when
    the GPU waits on a stage of host work instead (one op-free stretch of a quarter of a step:
    numpy building the batch, a sleep; ``gpu-idle-gap`` names it): that step measures the host
    work, and a larger problem would not change it.

    Why it costs time: each GEMM is shorter than the CPU call that launches it, so the run measures
    launch overhead; conclusions drawn from it do not carry over to real sizes.

    Example:
        a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
        for _ in range(steps):
            y = a @ a                    # about 1 µs of GPU work per 10 µs launch

    Fix: profile with the production batch and model sizes, or batch several small problems
    into one (``torch.bmm``, a larger batch dimension).

    Ignore when: small shapes are the real workload (batch-1 serving); then see overhead-bound.

    Shown by: examples/seed_n64_bf16.json.gz
    """
    m, a = ctx.model, ctx.a
    if verdict(m, a) != "overhead-bound":
        return
    biggest = _biggest_gemm(ctx)
    if biggest is not None:
        if biggest[0] >= SMALL_GEMM_FLOPS:
            return
        b, mm, k, n = biggest[1]
        what = (
            f"the largest GEMM is {mm}x{k} @ {k}x{n}"
            + (f" (batch {b})" if b > 1 else "")
            + f", {biggest[0] / 1e6:.1f} MFLOP"
        )
        loc = ctx.location(biggest[2])
        ev = {"largest_gemm_flops": biggest[0], "largest_gemm_mkn": [mm, k, n], "batch": b}
    elif gemm_durs := list(compress(map(_dur, m.gpu), a.keys.mask(lambda k, c: c == GEMM))):
        gemm_durs.sort()
        med = gemm_durs[len(gemm_durs) // 2]
        if med >= SMALL_GEMM_KERNEL_US:
            return
        what = f"GEMM kernels run a median {us(med)}"
        loc = ctx.trace_location()
        ev = {"median_gemm_kernel_us": r3(med)}
    else:
        return
    if host_stages(m, a):  # the step waits on host work, not on launches
        return
    ev.update({"gpu_busy_pct": r3(a.busy_pct)})
    yield ctx.diag(
        "small-problem",
        f"overhead-bound with a small problem: {what}; at this size the step measures launch "
        f"overhead, not the GPU",
        loc,
        evidence=ev,
        fix="profile at production sizes (batch, sequence, hidden dims) before optimising; small "
        "shapes call for batching or CUDA graphs, large ones are usually compute-bound",
    )
