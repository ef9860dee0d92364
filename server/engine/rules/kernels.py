"""Kernel-level rules: ``kernel-class``, ``kernel-jitter``, ``fp32-matmul``, ``misaligned-dims``,
``launch-storm``."""

from __future__ import annotations

import ast
from itertools import chain, repeat
from operator import itemgetter, truediv
from array import array
import math
from typing import Iterable

from ....protocol.types import Diagnostic
from .. import kernels as K
from ..analyses import covered
from ..context import Context
from ..fixes import Edit, Fix, Source, after_imports, imports_torch
from ..modules import PREFIX
from ..impact import GEMM_EFFICIENCY, KERNEL_FLOOR_US, ev, line_loop, peaks, per_step, zero
from ..stepmodel import Change, StepModel
from . import rule
from .util import GEMM_OPS, inputs, median, pct, plural, quantile, r3, us

JITTER_MIN_SAMPLES = 10
JITTER_MIN_PER_PROBLEM = 3  # runs of one problem needed to know its median
JITTER_P90_RATIO = 1.25  # p90 over p50
JITTER_MIN_SPREAD_US = 5.0  # and p90 - p50 at least this (timer and launch noise lie below)
JITTER_MIN_LOST_SHARE = 0.01  # and the time above p50 is at least this share of GPU busy time
FP32_GEMM_SHARE = 0.10  # of GPU time
MISALIGNED_SHARE = 0.01  # of GPU time in the misaligned GEMMs
# Measured on H200 (docs/workloads.md, examples/recorded/README.md), used as conservative factors:
TF32_GIVES_BACK = 0.75  # fp32 GEMMs on CUDA cores: bf16 was 7-14x faster at 4096-8192; TF32 >= 4x
ALIGNED_GIVES_BACK = 0.5  # misaligned fallback GEMMs: the aligned twin ran 5.6x faster; claim 2x
STORM_PER_STEP = 10  # launches of one kernel from one line per step
_HALF_TYPES = ("BFloat16", "Half", "bfloat16", "float16")


@rule("kernel-class", "GPU time by kernel class", "hint")
def kernel_class(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: GPU time per kernel class (GEMM, attention, conv, elementwise, reduction, copy,
    communication), from kernel-name families and the op that launched each kernel (a convolution
    lowered to GEMMs is convolution time; the launch API is never evidence).

    Threshold: none; a summary (hint) whenever the trace has GPU work.

    Why it costs time: it does not; it says where the GPU time goes (GEMM, attention, elementwise,
    copies, communication) so that the other findings can be weighed.

    Example:
        # GEMM 70%, elementwise 20%, copy 10%: fusing the elementwise work is the next lever

    Fix: nothing to fix; use it to choose what to optimise.

    Ignore when: always safe to ignore (a hint, shown with --hints).

    Shown by: examples/tinygpt_naive.json.gz
    """
    m, a = ctx.model, ctx.a
    if not m.gpu:
        return
    per = a.class_us
    total = sum(per.values()) or 1.0
    parts = ", ".join(f"{c} {pct(100 * t / total)}" for c, t in sorted(per.items(), key=lambda kv: -kv[1]))
    yield ctx.diag(
        "kernel-class",
        f"GPU time by kernel class: {parts}",
        ctx.trace_location(),
        evidence={"classes_us": {c: r3(t) for c, t in per.items()}},
    )


def _module_of(ctx, i: int) -> int:
    """The innermost ``nn.Module: Name_k`` frame (one per module instance) at or above cpu event
    i, or above the forward op a backward op differentiates; -1 when the trace has none."""
    m = ctx.model
    idx = ctx.modules()
    if not idx.events:
        return -1
    for start in (i, m.fwd_of[i] if m.is_backward(i) else -1):
        if start >= 0:
            e = m.cpu[start]
            if e.cat == "python_function" and e.name.startswith(PREFIX):
                return start
            j = idx.above[start]  # the nearest marker above it
            if j >= 0:
                return j
    return -1


def _problems(ctx, gs: list[int], dims: list) -> list[list[int]]:
    """One kernel configuration's runs split by the problem each one solved: the launching op's
    input shapes when the trace has them (``record_shapes``; ``dims``, per GPU event, from the
    kernel_configs pass); else the module instance that ran it (``with_stack``);
    else its position among this kernel's launches in its step (a training step repeats the same
    calls in the same order); else all runs together."""
    m = ctx.model
    if dims[gs[0]] is not None:  # record_shapes: by shapes alone, unless a run has none
        by_dims = m.passes.group_by(gs, dims)
        # a group's runs share its dims: a run without is in a group whose first run has none
        if all(dims[p[0]] is not None for p in by_dims):
            return by_dims
    cpu, launcher, steps = m.cpu, m.launcher, ctx.launch_steps()
    by: dict = {}
    seen: dict = {}
    for g in gs:
        d = dims[g]
        if d is not None:  # record_shapes (older traces say so only here)
            key = ("shapes", d)
        else:
            li = launcher[g]
            mod = _module_of(ctx, li) if li >= 0 else -1
            step = steps[g]
            if mod >= 0:
                key = ("module", cpu[mod].name)
            elif step is not None:
                n = seen[step.number] = seen.get(step.number, -1) + 1
                key = ("ordinal", n)
            else:
                key = ("all",)
        by.setdefault(key, []).append(g)
    return list(by.values())


@rule("kernel-jitter", "One kernel configuration with widely spread durations", "warning")
def kernel_jitter(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: one kernel configuration (name, grid, block, launching op, source line, forward or
    backward), its runs split by problem (the launching op's input shapes with ``record_shapes``;
    else the module instance; else the launch's position in its step), each run compared with the
    median of its own problem; p50, p90 and max of those ratios and of the durations.

    Threshold: 10 runs or more in problems of at least 3 runs, the runs' p90 at least 1.25x their
    problem's median and 5 µs above it (below that lies timer and launch noise), and the time spent
    above the medians at least 1% of the GPU's busy time (else it cannot matter). One kernel run
    over layers of different sizes (ResNet's batch norm: p50 185 µs, p90 695 µs across layers) is
    several problems, not jitter. On the H200 the same GEMM varies under 3% over 20-40 runs, which
    stays silent; a GEMM sharing its SMs with a side stream (p50 24 µs, p90 43 µs) fires.

    Why it costs time: the same kernel with the same configuration sometimes runs much longer:
    another stream or process is sharing its SMs, clocks drop, or memory is contended; the slow
    runs are lost time.

    Example:
        with torch.cuda.stream(side):
            side_gemm = big @ big        # shares the SMs with the main stream's GEMM

    Fix: find what runs beside the slow instances (side streams, other processes, NCCL kernels),
    serialise or separate them, check clocks and power limits (``nvidia-smi -q -d CLOCK``).

    Ignore when: the variation is inherent to the kernel (data-dependent work such as sorting).

    Shown by: examples/recorded/jitter_side.json.gz
    """
    m = ctx.model
    # the same kernel launched by different ops (a forward op and its backward, say) does
    # different work: only the same op's launches are one configuration; collectives' durations
    # are mostly waiting for peers
    groups, dims = m.passes.kernel_configs(
        m.gpu,
        ctx.a.gpu_class,
        K.COMMUNICATION,
        m.launcher,
        m.ops_above(),
        m.cpu,
        ctx.launch_line_ids(),
        m.frame_of,
        m.fwd_of,
    )
    durs = ctx.a.gpu_durs
    for key, gs in groups.items():
        if len(gs) < JITTER_MIN_SAMPLES:
            continue
        kept = []  # (its median, gpu indices) of each problem counted
        ratios: list[float] = []  # each run over its problem's median (problems of median > 0)
        for pgs in _problems(ctx, gs, dims):
            if len(pgs) < JITTER_MIN_PER_PROBLEM:
                continue
            # sorted once: the median, and the ratios as one sorted run each (a quick sort below)
            ds = sorted(map(durs.__getitem__, pgs))
            med = median(ds)
            kept.append((med, pgs))
            if med > 0:  # a problem's runs at once, not a tuple unpacked a run
                ratios.extend(map(truediv, ds, repeat(med)))
        if sum(len(k[1]) for k in kept) < JITTER_MIN_SAMPLES or len(ratios) < JITTER_MIN_SAMPLES:
            continue
        ratios.sort()  # once for both quantiles (each sorts its copy: a sorted list is one pass)
        r50, r90 = quantile(ratios, 0.5), quantile(ratios, 0.9)
        if r90 < JITTER_P90_RATIO * max(r50, 1e-9):
            continue  # most configurations stop here, before the runs are listed and the spread sorted
        problems = len(kept)
        # (duration, its problem's median, gpu index), in the order of the runs
        runs = [(durs[g], med, g) for med, pgs in kept for g in pgs]
        spread = quantile([d - med for d, med, _ in runs], 0.9)
        if spread < JITTER_MIN_SPREAD_US:
            continue
        lost = sum(d - med for d, med, _ in runs if d > med)
        if lost < JITTER_MIN_LOST_SHARE * ctx.a.busy_us:
            continue
        ds = [d for d, _, _ in runs]
        p50, p90, mx = quantile(ds, 0.5), quantile(ds, 0.9), max(ds)
        li = m.launcher[gs[0]]
        slow = [g for d, med, g in runs if med > 0 and d / med >= r90]
        shared = sum(1 for g in slow if covered(ctx.a.comm, m.gpu[g].ts, m.gpu[g].ts + m.gpu[g].dur) > 0)
        why = (
            f"; {shared} of the {len(slow)} slowest runs overlap collectives, which share the SMs"
            if shared * 2 >= len(slow) and shared
            else ""
        )
        yield ctx.diag(
            "kernel-jitter",
            f"{K.short_name(key[0], 60)} varies widely on the same problem over {len(ds)} runs: p90 "
            f"{r90:.2f}x the problem's median (p50 {us(p50)}, p90 {us(p90)}, max {us(mx)}); an average "
            f"hides it{why}",
            ctx.location(li) if li >= 0 else ctx.trace_location(),
            evidence={
                "kernel": key[0],
                "samples": len(ds),
                "problems": problems,
                "p50_us": r3(p50),
                "p90_us": r3(p90),
                "p90_ratio": r3(r90),
                "lost_us": r3(lost),
                "max_us": r3(mx),
                "min_us": r3(min(ds)),
            },
            fix="check clocks and power (nvidia-smi -q -d CLOCK,PERFORMANCE), other processes on the "
            "GPU, and thermal throttling; lock clocks for benchmarking",
        )


@rule(
    "fp32-matmul",
    "GEMM time in fp32 kernels without tensor cores",
    "warning",
    saves=(zero, per_step("fp32_gemm_us", TF32_GIVES_BACK)),
)
def fp32_matmul(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: GPU time in fp32 GEMM kernels that run on CUDA cores (``sgemm``, ``*_f32f32_*``
    with FFMA, SIMT kernels) on a GPU with tensor cores for TF32/bf16 (compute capability >= 8).
    The math is the name's ``gemm`` word, not its storage types: ``ampere_fp16_sgemm_fp16_*``
    (fp16 in and out, fp32 FFMA) counts, ``ampere_fp16_s16816gemm_fp16_*`` (tensor cores) does not.

    Threshold: 10% of GPU time. Tensor cores run the same GEMMs several times faster in TF32 or
    bf16; below 10% the gain is not worth a precision change.

    Why it costs time: fp32 GEMMs run on CUDA cores; on compute capability 8.0 and later, tensor
    cores run the same GEMM several times faster in TF32 or bf16.

    Example:
        model = TinyGPT().cuda()         # fp32 weights and activations
        logits = model(x)                # sgemm / f32f32 kernels

    Fix: ``torch.backends.cuda.matmul.allow_tf32 = True`` (or
    ``torch.set_float32_matmul_precision("high")``), or autocast:
    ``with torch.autocast("cuda", dtype=torch.bfloat16): logits = model(x)``.

    Ignore when: the computation needs full fp32 precision (some scientific code, a numerics test).

    Shown by: examples/tinygpt_naive.json.gz
    """
    m, a = ctx.model, ctx.a
    cc = m.compute_capability
    if cc is not None and cc[0] < 8:
        return
    total = a.cuda_total_us or 0.0
    lines: dict = {}
    fp32 = 0.0
    names: dict[str, float] = {}
    launches: list[tuple[int, float]] = []
    # the fp32 CUDA-core GEMMs, asked once per kernel key; their launch lines by number (equal
    # line_id groups, equal numbers)
    # columns, not the events: durations (gpu_durs), names by key (a kernel's key holds its name)
    launcher, line_ids, durs = m.launcher, ctx.launch_line_ids(), a.gpu_durs
    name_of, codes = [k[0] for k in a.keys.keys], a.keys.codes
    for g in m.passes.positions(a.keys.mask(lambda k, c: c == K.GEMM and K.is_fp32_simt_gemm(k[0]))):
        d = durs[g]
        fp32 += d
        name = name_of[codes[g]]
        names[name] = names.get(name, 0.0) + d
        li = launcher[g]
        launches.append((li, d))
        lines.setdefault(line_ids[g], [0.0, li])[0] += d
    if total <= 0 or fp32 < FP32_GEMM_SHARE * total:
        return
    top_line = max(lines.items(), key=lambda kv: kv[1][0])
    li = top_line[1][1]
    top = sorted(names.items(), key=lambda kv: -kv[1])[:3]
    where = ctx.modules_where(launches)  # most of the fp32 GEMM time, by module
    yield ctx.diag(
        "fp32-matmul",
        f"{pct(100 * fp32 / total)} of GPU time ({us(fp32)}) is fp32 GEMMs on CUDA cores, not tensor "
        f"cores"
        + (f", the largest part in {where}" if where else "")
        + f": {', '.join(K.short_name(n, 50) for n, _ in top)}",
        ctx.location(li) if li >= 0 else ctx.trace_location(),
        evidence={
            "fp32_gemm_us": r3(fp32),
            "share": r3(fp32 / total),
            "kernels": [n for n, _ in top],
            "module": where.name if where else None,
            "lines": len(lines),
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        },
        fix="enable TF32 (torch.backends.cuda.matmul.allow_tf32 = True or "
        "torch.set_float32_matmul_precision('high')) or run the model under "
        "torch.autocast('cuda', dtype=torch.bfloat16)",
        related=[
            ctx.related(v[1], f"fp32 GEMMs here too: {us(v[0] / ctx.n_steps)} per step")
            for k, v in sorted(lines.items(), key=lambda kv: -kv[1][0])
            if v[1] != li and v[1] >= 0
        ][:5],
    )


@fp32_matmul.replay
def _tf32(sm: StepModel, d: Diagnostic) -> Change:
    """Every fp32 CUDA-core GEMM at the TF32 (else 16-bit) tensor cores' speed."""
    m, a = sm.ctx.model, sm.ctx.a
    fp32, tf32, half = peaks(m)
    faster = (tf32 or half) / fp32 if fp32 else 4.0  # unknown device: a conservative 4x
    ch = Change()
    for p in sm.points():
        for g, _, dd in p.ops:
            if a.gpu_class[g] == K.GEMM and K.is_fp32_simt_gemm(m.gpu[g].name):
                ch.dur[g] = dd / faster + KERNEL_FLOOR_US
    return ch


@fp32_matmul.quick_fix
def _tf32_or_autocast(src: Source, line1: int) -> list[Fix]:
    out = []
    sets = [
        n
        for n in ast.walk(src.tree)
        if isinstance(n, ast.Assign) and any(src.segment(t).endswith("matmul.allow_tf32") for t in n.targets)
    ]
    if sets:
        edits = [Edit(*src.span(n.value), "True") for n in sets if src.segment(n.value) != "True"]
    else:
        at = after_imports(src)
        pre = "" if imports_torch(src) else "import torch\n"
        edits = [
            Edit(
                at,
                0,
                at,
                0,
                f"{pre}torch.backends.cuda.matmul.allow_tf32 = True  # fp32 GEMMs on tensor cores (TF32)\n",
            )
        ]
    if edits:
        out.append(Fix("Allow TF32 for fp32 matmuls (torch.backends.cuda.matmul.allow_tf32)", edits, True))
    st = src.stmt_at(line1)
    if st is not None and st.end_lineno == st.lineno and imports_torch(src):
        text = src.lines[line1 - 1]
        ind = text[: len(text) - len(text.lstrip())]
        out.append(
            Fix(
                "Run this statement under torch.autocast (bf16)",
                [
                    Edit(
                        line1 - 1,
                        0,
                        line1 - 1,
                        len(text),
                        f'{ind}with torch.autocast("cuda", dtype=torch.bfloat16):\n{ind}    {text.lstrip()}',
                    )
                ],
            )
        )
    return out


def gemm_mkn(name: str, dims: list) -> tuple[int, int, int] | None:
    """(M, K, N) of a GEMM op as its kernel sees them, from its ``record_shapes`` inputs: the
    leading dimensions of an N-d input multiply into M (``linear`` on ``[16, 559, 1024]`` is
    M = 8944), batched ops keep their batch apart; None when the shapes do not say."""

    def mat(k):
        return dims[k] if len(dims) > k and dims[k] is not None and len(dims[k]) >= 1 else None

    if name in ("aten::mm", "aten::bmm"):
        a, b = mat(0), mat(1)
    elif name in ("aten::addmm", "aten::baddbmm"):
        a, b = mat(1), mat(2)
    elif name == "aten::linear":
        x, w = mat(0), mat(1)
        if x is None or w is None or len(w) != 2:
            return None
        return math.prod(x[:-1]), x[-1], w[0]
    elif name == "aten::matmul":
        a, b = mat(0), mat(1)
        if a is not None and b is not None and len(b) <= 2:
            n = b[-1] if len(b) == 2 else 1
            return math.prod(a[:-1]), a[-1], n
    else:
        return None
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return None
    return a[-2], a[-1], b[-1]


@rule(
    "misaligned-dims",
    "fp16/bf16 GEMM dims not multiples of 8",
    "warning",
    saves=(zero, per_step("gpu_us", ALIGNED_GIVES_BACK)),
)
def misaligned_dims(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: fp16/bf16 GEMM ops (``record_shapes``) whose M, K or N, as the kernel sees them
    (the leading dimensions of an N-d input multiplied into M), is not a multiple of 8, and whose
    kernels show the fallback: a declared operand alignment under 16 bytes (``..._align1``) or
    CUDA-core math; with the GPU time of their kernels.

    Threshold: such GEMMs hold 1% of GPU time or more. A dimension of 1 is never counted (a
    decode step's ``[1, 1, 768] x [768, 32000]`` is a matrix-vector product, not a misaligned
    GEMM), nor an odd size whose kernel stayed on the fast path (cuBLAS pads M itself). On the
    H200 a 4095-wide bf16 GEMM ran ``cutlass_75_tensorop_..._align1`` where the 4096-wide twin ran
    ``nvjet_sm90_*``, 5.6x faster: tensor-core GEMM tiles want 16-byte aligned leading
    dimensions, 8 fp16/bf16 elements.

    Why it costs time: tensor-core GEMM tiles want M, N and K in multiples of 8 for fp16/bf16; an
    odd size falls back to slower kernels or pads every call.

    Example:
        proj = nn.Linear(1000, 1001).cuda().bfloat16()   # 1001 is not a multiple of 8

    Fix: pad the dimensions to multiples of 8 (64 is better still): vocabulary sizes, hidden sizes,
    batch sizes; pad the vocabulary and ignore the extra logits.

    Ignore when: the shape is fixed by the data and the GEMM's share of GPU time is small.

    Shown by: examples/recorded/misaligned_odd.json.gz
    """
    m, a = ctx.model, ctx.a
    total = a.cuda_total_us or 0.0
    if total <= 0:
        return
    found: dict = {}
    cpu, above = m.cpu, m.ops_above()
    seen: dict = {}  # (name, input_key) -> _misaligned's answer: a step repeats its GEMMs' shapes
    ops, keys = ctx.op_input_keys(GEMM_OPS)  # the GEMM ops and their inputs' keys, a column
    for i, key in zip(ops, keys):
        if key is None:  # no args, or inputs that give no key: read from the event, worked out alone
            e = cpu[i]
            if e.args is None or not e.args.input_dims:
                continue
            got = _misaligned(e)
        elif not key[1][0]:
            continue  # no input dims
        else:
            got = seen.get(key, seen)
            if got is seen:
                got = seen[key] = _misaligned(cpu[i])
        if got is None:  # most ops: aligned or not 16-bit, known by their key alone
            continue
        if above[i] >= 0 and cpu[above[i]].name in GEMM_OPS:
            continue  # count the outermost GEMM op once (aten::linear over aten::addmm)
        mkn, bad = got
        gemms = [g for g in m.gpu_under(i) if a.gpu_class[g] == K.GEMM]
        fell = next(((g, r) for g, r in ((g, K.gemm_fallback(m.gpu[g].name, 2)) for g in gemms) if r), None)
        if fell is None:
            continue
        fallback, why = fell
        gpu_us = sum(m.gpu[g].dur for g in gemms)
        k = ctx.line_id(i)
        f = found.setdefault(
            k, {"op": i, "gpu_us": 0.0, "mkn": mkn, "bad": set(), "why": why, "kernel": m.gpu[fallback].name}
        )
        f["gpu_us"] += gpu_us
        f["bad"].update(bad)
    for k, f in found.items():
        if f["gpu_us"] < MISALIGNED_SHARE * total:
            continue
        mm, kk, nn = f["mkn"]
        yield ctx.diag(
            "misaligned-dims",
            f"{m.cpu[f['op']].name} with M×K×N = {mm}×{kk}×{nn} in 16-bit precision: "
            f"{', '.join(map(str, sorted(f['bad'])))} not a multiple of 8, and cuBLAS fell back to "
            f"{K.short_name(f['kernel'], 60)} ({f['why']}); its kernels take "
            f"{us(f['gpu_us'])} ({pct(100 * f['gpu_us'] / total)} of GPU time)",
            ctx.location(f["op"]),
            evidence={
                "op": m.cpu[f["op"]].name,
                "m": mm,
                "k": kk,
                "n": nn,
                "misaligned": sorted(f["bad"]),
                "kernel": f["kernel"],
                "fallback": f["why"],
                "gpu_us": r3(f["gpu_us"]),
            },
            fix="pad the dimension to a multiple of 8 (vocab sizes, hidden sizes, batch*seq), e.g. "
            "round the vocabulary up to a multiple of 64",
        )


def _misaligned(e) -> tuple[tuple[int, int, int], list[int]] | None:
    """A 16-bit GEMM op's (M, K, N) and those of them (above 1) not multiples of 8, from its input
    shapes; None for another precision, unknown shapes or aligned dimensions."""
    dims, types = inputs(e)
    if not any(h in t for t in types for h in _HALF_TYPES):
        return None
    mkn = gemm_mkn(e.name, dims)
    if mkn is None:
        return None
    bad = sorted({x for x in mkn if x > 1 and x % 8})
    return (mkn, bad) if bad else None


@misaligned_dims.replay
def _aligned(sm: StepModel, d: Diagnostic) -> Change:
    """The misaligned GEMMs of the line at the aligned kernel's speed: 2·M·K·N FLOPs at the 16-bit
    tensor cores' peak times GEMM_EFFICIENCY, never slower than they ran."""
    m, a = sm.ctx.model, sm.ctx.a
    half = peaks(m)[2]
    evd = d.evidence
    try:
        flops = 2.0 * float(evd["m"]) * float(evd["k"]) * float(evd["n"])
    except (KeyError, TypeError, ValueError):
        return Change()
    if not half:
        return Change()
    t = flops / (half * 1e6 * GEMM_EFFICIENCY) + KERNEL_FLOOR_US
    ch = Change()
    for p in sm.on_line(d):
        for g, _, dd in p.ops:
            if a.gpu_class[g] == K.GEMM:
                ch.dur[g] = min(dd, t)
    return ch


# launch-storm's runs: (kernel duration, launch call duration, launch call)
_call = itemgetter(2)


def _launch_iterations(m) -> dict[str, array]:
    """The loop iteration of every launch call, counted per innermost Python call (``ops``) and
    per run of the user's statement (``runs``): the iterations pass's two columns."""
    ops, runs = m.passes.iterations(
        m.parent, m.token, m.frame_of, m.cat_mask("cpu_op"), m.cat_mask("python_function"), m.launcher
    )
    return {"ops": ops, "runs": runs}


_GPU_US, _CPU_US = itemgetter(0), itemgetter(1)  # of a launch-storm run: (kernel µs, launch µs, call)


@rule(
    "launch-storm",
    "One line launching many tiny kernels per step",
    "warning",
    thresholds={"launches-per-step": STORM_PER_STEP},
    symptom=True,
    saves=(ev("launch_cpu_us_per_step"), zero),
)
def launch_storm(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: one source line whose code launches the same kernel many times in one step from
    a Python loop, each run shorter than the CPU call that launched it: many ops dispatched by one
    call of one Python function (over rows in the user's code, over parameters in a single-tensor
    optimizer), or the user's line itself run many times by one call of its function (a loop over
    time steps calling a module: ``for t in ...: h, c = self.cell(x[:, t], (h, c))``).

    Threshold: ``launches-per-step`` (default 10) tiny launches per step from the line, counted as
    the message counts them (over its kernels), found as 10 or more iterations (fewer when the
    threshold is set lower) launching one kernel per call and step (distinct ops, or
    distinct runs of the user's statement), with the kernel's median duration below the median
    launch call's. Counting per innermost Python call keeps a model of 48 layers out (each
    layer's forward launches its kernel once), and counting the user's statement's runs keeps out
    a line that runs once (``model(x)``) however many layers it calls (the user's own loop over
    layers counts: with kernels that small it is launch-bound the same way); requiring kernels
    shorter than their launch keeps loops over large work, which keep the GPU fed, out. One op that
    launches many kernels itself (cuDNN's LSTM stepping through time, a CUDA graph replay's one
    ``cudaGraphLaunch``) is one iteration: no Python loop to vectorise, and its launches cost no
    Python dispatch. Backward launches come from the autograd engine, not a Python loop, and are
    not counted.

    Why it costs time: each launch costs several microseconds of CPU time while the kernel runs for
    less; a Python loop of tiny kernels keeps the GPU waiting on the CPU.

    Example:
        out = []
        for row in idx:                  # one reduction kernel per row
            out.append((row > 100).sum())

    Fix: vectorise the loop into one tensor op (``(idx > 100).sum(dim=1)``), use foreach/fused
    optimizers, or capture the region with ``torch.compile`` or CUDA graphs.

    Ignore when: the loop runs once per epoch or outside the hot path.

    Shown by: examples/tinygpt_naive.json.gz
    """
    m = ctx.model
    frame_of = m.frame_of
    numbers = [s.number for s in m.steps] + [None]  # place -1: outside every step
    steps = list(map(numbers.__getitem__, ctx.launch_step_index()))
    per = m.passes.launch_runs(m.gpu, m.launcher, frame_of, ctx.launch_line_ids(), steps, m.cpu, m.durs)
    # the knob is what the message says (tiny launches per step from the line, over its kernels);
    # a loop is found by its iterations of one kernel, at most that many (10 unless set lower)
    wanted = ctx.threshold("launch-storm", "launches-per-step")
    least = min(STORM_PER_STEP, wanted)
    its = None  # the loop iteration of each launch call, both ways (made when a group is big enough)
    frames_above = m.frames_above()
    for k, groups in per.items():
        storm: dict = {}  # kernel name -> its runs, a list per (kernel, step) group
        for (name, _), launched in groups.items():
            if len(launched) < least:
                continue
            if its is None:
                its = _launch_iterations(m)
            # per call of the innermost Python frame (ops it dispatches), and per call of the user's
            # frame when the line calls into library code (runs of the user's statement), counting
            # iterations, not kernels: one op launching many (cuDNN's RNN, a CUDA graph replay) is one
            got = m.passes.loop_calls(launched, frames_above, frame_of, its["ops"], its["runs"], least)
            # each launch call's run once (its last, in its first place); a call is of one line and
            # step, so of this group alone: made once here, not through a dict in the usual case of
            # one list with each call once
            if len(got) == 1 and len(set(map(_call, got[0]))) == len(got[0]):
                storm.setdefault(name, []).append(got[0])
            elif got:  # a launch both per Python call and per statement run, or a call of two runs
                once: dict = {}
                for runs in got:
                    once.update(zip(map(_call, runs), runs))
                storm.setdefault(name, []).append(list(once.values()))
        # per kernel its runs and the two medians (by selection: most kernels stop here)
        kept = {}
        for n, parts in storm.items():
            runs = parts[0] if len(parts) == 1 else list(chain.from_iterable(parts))
            mg, mc = m.passes.run_medians(runs)
            if mg < mc:
                kept[n] = (runs, mg, mc)
        if not kept:
            continue
        launches = sum(len(v[0]) for v in kept.values()) / ctx.n_steps
        if wanted > least and round(launches) < wanted:  # set above the loop finder's 10
            continue
        # the runs one kernel after another, as they were summed from one list of them (the same
        # floats in the same order through the one builtin sum, read at C speed: 185k runs at 1 GB)
        gpu = sum(map(_GPU_US, chain.from_iterable(v[0] for v in kept.values()))) / ctx.n_steps
        cpu = sum(map(_CPU_US, chain.from_iterable(v[0] for v in kept.values()))) / ctx.n_steps
        name, (runs, mg, mc) = max(kept.items(), key=lambda kv: len(kv[1][0]))
        yield ctx.diag(
            "launch-storm",
            f"{launches:.0f} tiny kernel launches per step from this line ({plural(len(kept), 'kernel')} "
            f"repeated in a loop, e.g. {K.short_name(name, 50)} x{len(runs) / ctx.n_steps:.0f}): "
            f"{us(gpu)} of GPU work per step costs {us(cpu)} of launch calls",
            ctx.location(runs[0][2]),
            evidence={
                "launches_per_step": r3(launches),
                "kernels": len(kept),
                "gpu_us_per_step": r3(gpu),
                "launch_cpu_us_per_step": r3(cpu),
                "median_kernel_us": r3(mg),
                "median_launch_us": r3(mc),
            },
            fix="vectorise the loop into one tensor op over the batch (e.g. (idx > 100).sum(dim=1)), "
            "use foreach/fused optimizers, or capture the region with torch.compile / CUDA graphs",
        )


launch_storm.replay(line_loop)  # the line's loop made one call
