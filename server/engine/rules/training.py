"""Training- and evaluation-loop anti-patterns: ``pageable-memcpy``, ``optimizer-foreach-off``,
``zero-grad-not-none``, ``conv-bias-before-bn``, ``dataloader-bound``, ``inference-without-no-grad``."""

from __future__ import annotations

import ast
from bisect import bisect_left
from itertools import compress
from typing import Iterable, Optional

import msgspec

from ....protocol.types import Diagnostic
from ..analyses import covered
from ..context import Context
from ..fixes import Edit, Fix, Source, call_name, line_first, set_kw
from ..impact import KERNEL_FLOOR_US, ev, in_ranges, line_cpu, line_loop, loop, per_step, zero
from ..stepmodel import Change, StepModel
from . import rule
from .util import mib, pct, plural, r3, us

OPT_STEP = "Optimizer.step#"
OPT_ZERO = "Optimizer.zero_grad#"
SINGLE_TENSOR_FNS = (
    "_single_tensor_adam",
    "_single_tensor_adamw",
    "_single_tensor_sgd",
    "_single_tensor_rmsprop",
    "_single_tensor_adagrad",
    "_single_tensor_nadam",
    "_single_tensor_radam",
    "_single_tensor_adamax",
    "_single_tensor_asgd",
)
UPDATE_OPS = {
    "aten::lerp_",
    "aten::addcdiv_",
    "aten::addcmul_",
    "aten::mul_",
    "aten::add_",
    "aten::sqrt",
    "aten::div_",
    "aten::sub_",
}
SINGLE_TENSOR_MIN_OPS = 20  # per-parameter update ops per step that give the loop away
PAGEABLE_BYTES_PER_STEP = 1 << 20
PAGEABLE_STEP_SHARE = 0.01
# what the quick fixes look for in the source (class names as the user writes them)
OPTIMIZER_CLASSES = {
    "Adam",
    "AdamW",
    "SGD",
    "RMSprop",
    "Adagrad",
    "Adamax",
    "NAdam",
    "RAdam",
    "ASGD",
    "Adadelta",
}
FUSED_CLASSES = {"Adam", "AdamW", "SGD", "Adagrad"}  # torch.optim classes with a fused implementation
CONV_CLASSES = {"Conv1d", "Conv2d", "Conv3d", "LazyConv1d", "LazyConv2d", "LazyConv3d"}
NORM_CLASSES = {
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "SyncBatchNorm",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
}
# Measured on H200 (docs/workloads.md, examples/recorded/README.md), used as conservative factors:
PER_PARAM_GIVES_BACK = 0.8  # foreach/fused and set_to_none remove the per-parameter dispatch
PINNED_GPU_GIVES_BACK = 0.5  # pinned copies run at full bandwidth (about 2x pageable's)
PINNED_GBPS = {9: 40.0, 10: 40.0, 12: 40.0, 8: 20.0}  # host->device from pinned memory, PCIe 5 / 4
PINNED_GBPS_OTHER = 10.0
GRAD_EVAL_MIN_OPS_PER_STEP = 1  # module ops recording autograd nodes, with no backward in the window
DATALOADER_MARK = "enumerate(DataLoader)#"
DATALOADER_STEP_SHARE = 0.10
CONV_OPS = {
    "aten::convolution",
    "aten::_convolution",
    "aten::conv2d",
    "aten::conv1d",
    "aten::conv3d",
    "aten::cudnn_convolution",
}
BN_OPS = {
    "aten::batch_norm",
    "aten::_batch_norm_impl_index",
    "aten::native_batch_norm",
    "aten::cudnn_batch_norm",
    "aten::_native_batch_norm_legit",
}


@rule(
    "pageable-memcpy",
    "Host/device copies from pageable memory",
    "warning",
    saves=(per_step("launch_cpu_us"), per_step("gpu_us", PINNED_GPU_GIVES_BACK)),
)
def pageable_memcpy(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: ``Memcpy HtoD/DtoH (Pageable ...)`` GPU copies, grouped by the line that issued
    them: count per step, bytes, and the CPU time their copy calls block, against the step.

    Threshold: host->device copies issued by the user's own code (its frame makes the ``.to()``
    call: a batch moved from pageable memory, the DataLoader's job to pin); else copies that
    matter by size or time: 1 MiB per step, or copy calls blocking 1% of the step. A pageable
    copy is staged through a driver buffer and blocks the host, so it neither overlaps compute nor
    queues ahead (``non_blocking=True`` does nothing). A library's copies of a few bytes (0.02% of
    the step) are not the user's to pin, and a device->host copy of a value is a read-back the CPU
    waits for anyway (``host-sync``'s finding): pinning only pays there for bulk transfers.

    Why it costs time: a copy from pageable host memory is staged through a driver buffer and
    synchronises the host: it can neither overlap compute nor be queued ahead.

    Example:
        x = xb.to(dev)                   # xb lives in ordinary (pageable) memory

    Fix: pin the memory and copy asynchronously: ``DataLoader(..., pin_memory=True)`` and
    ``x = xb.to(dev, non_blocking=True)``, or ``xb.pin_memory()`` once for a reused buffer.

    Ignore when: the copy is outside the training loop (loading weights once).

    Shown by: examples/tinygpt_naive.json.gz
    """
    m = ctx.model
    groups: dict = {}
    # the pageable copies found by their key (name, category), once per distinct key
    pageable = ctx.a.keys.mask(lambda k, c: k[1] == "gpu_memcpy" and "Pageable" in k[0])
    for g in m.passes.positions(pageable):
        e = m.gpu[g]
        li = m.launcher[g]
        if li >= 0 and m.steps and m.step_at(m.cpu[li].ts) is None:
            continue  # outside the steps (a trace without steps is one window)
        k = ctx.line_id(li)
        grp = groups.setdefault(
            k,
            {
                "n": 0,
                "bytes": 0,
                "us": 0.0,
                "cpu_us": 0.0,
                "li": li,
                "names": set(),
                "user": False,
                "htod": False,
                "htod_cpu_us": 0.0,
            },
        )
        grp["n"] += 1
        grp["bytes"] += int(e.args.nbytes or 0) if e.args else 0
        grp["us"] += e.dur
        grp["cpu_us"] += m.cpu[li].dur if li >= 0 else 0.0
        grp["names"].add(e.name)
        htod = "HtoD" in e.name
        grp["htod"] = grp["htod"] or htod
        grp["htod_cpu_us"] += m.cpu[li].dur if htod and li >= 0 else 0.0
        if htod and li >= 0:
            f = m.enclosing_frame(li)
            grp["user"] = grp["user"] or (f >= 0 and m.frames[f].user)
    step = ctx.mean_step_us
    for k, grp in list(groups.items()):
        per_step = grp["bytes"] / ctx.n_steps
        blocked = grp["htod_cpu_us"] / ctx.n_steps  # a read-back's wait is the GPU queue, not staging
        if grp["htod"] and (grp["user"] or (step > 0 and blocked >= PAGEABLE_STEP_SHARE * step)):
            continue
        if per_step >= PAGEABLE_BYTES_PER_STEP:
            continue
        del groups[k]
    for k, grp in groups.items():
        yield ctx.diag(
            "pageable-memcpy",
            f"{plural(grp['n'] / ctx.n_steps, 'copy')} per step from pageable host memory "
            f"({', '.join(sorted(grp['names']))}; {mib(grp['bytes'] / ctx.n_steps)} per step): each one is "
            f"staged and blocks the CPU for {us(grp['cpu_us'] / grp['n'])}",
            ctx.location(grp["li"]) if grp["li"] >= 0 else ctx.trace_location(),
            evidence={
                "copies_per_step": r3(grp["n"] / ctx.n_steps),
                "bytes_per_step": grp["bytes"] / ctx.n_steps,
                "gpu_us": r3(grp["us"]),
                "launch_cpu_us": r3(grp["cpu_us"]),
                "kinds": sorted(grp["names"]),
            },
            fix="allocate host batches in pinned memory (tensor.pin_memory(), DataLoader(pin_memory=True)) "
            "and copy with .to(device, non_blocking=True)",
        )


@pageable_memcpy.replay
def _pinned(sm: StepModel, d: Diagnostic) -> Change:
    """The line's pageable copies from pinned memory: no longer blocking, at the pinned rate."""
    m = sm.ctx.model
    cc = m.compute_capability
    gbps = PINNED_GBPS.get(cc[0], PINNED_GBPS_OTHER) if cc else PINNED_GBPS_OTHER
    ch = Change()
    for p in sm.on_line(d):
        pageable = [(g, dd) for g, _, dd in p.ops if "Pageable" in m.gpu[g].name]
        if not pageable:
            continue
        ch.nonblock.add(p.i)
        for g, dd in pageable:
            nbytes = float(m.gpu[g].args.nbytes or 0) if m.gpu[g].args else 0.0
            if nbytes > 0:
                ch.dur[g] = min(dd, nbytes / (gbps * 1e3) + KERNEL_FLOOR_US)
    return ch


def _copy_calls(src: Source, line1: int) -> list[ast.Call]:
    return [
        c
        for c in src.calls(lambda c: call_name(c) in ("to", "cuda", "copy_"))
        if c.lineno <= line1 <= c.end_lineno
    ]


@pageable_memcpy.quick_fix
def _pin_and_copy_async(src: Source, line1: int) -> list[Fix]:
    """Pinned memory where it costs once: the file's DataLoader (``pin_memory=True``), else the
    statement that makes the copied tensor, when that runs outside the loop doing the copy. Never
    ``.pin_memory()`` at a copy in the loop: it pins every batch on the main thread, which
    PyTorch's pinned-memory tutorial warns can be slower than the pageable copy. With neither, no
    quick fix (the finding says what to do)."""
    copies = _copy_calls(src, line1)
    if not copies:
        return []
    loaders = src.calls(lambda c: call_name(c) == "DataLoader")
    if loaders:
        pin = [e for c in loaders for e in set_kw(src, c, "pin_memory", "True")]
        title = "Pin the DataLoader's memory (pin_memory=True) and copy with non_blocking=True"
    else:
        pin = []
        for c in copies:
            recv = c.func.value if isinstance(c.func, ast.Attribute) else None
            made = _made_once(src, c, recv) if isinstance(recv, ast.Name) else None
            if made is None:
                return []
            if "pin_memory" not in src.segment(made):
                l, col, el, ec = src.span(made)
                simple = isinstance(made, (ast.Call, ast.Name, ast.Attribute, ast.Subscript))
                pin += ([] if simple else [Edit(l, col, l, col, "(")]) + [
                    Edit(el, ec, el, ec, ("" if simple else ")") + ".pin_memory()")
                ]
        title = "Pin the tensor once where it is made, outside the loop (.pin_memory()), and copy with non_blocking=True"
    nb = [e for c in copies for e in set_kw(src, c, "non_blocking", "True")]
    edits = pin + nb
    return [Fix(title, edits, True)] if edits and pin else []


LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _made_once(src: Source, copy: ast.Call, name: ast.Name) -> Optional[ast.expr]:
    """The value of the plain assignment ``name = value`` that the copy reads, when it runs once
    for all the copies: not inside a loop that holds the copy (the loop's own target and
    unpacked batches are made per iteration), in the same function."""
    scope = copy
    while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        scope = src.parent(scope)
    if scope is None:
        return None
    loops = []
    n = src.parent(copy)
    while n is not None and n is not scope:
        if isinstance(n, LOOPS):
            loops.append(n)
        n = src.parent(n)
    stores = [
        x
        for x in ast.walk(scope)
        if isinstance(x, ast.Name)
        and x.id == name.id
        and isinstance(x.ctx, ast.Store)
        and (x.lineno, x.col_offset) < (copy.lineno, copy.col_offset)
    ]
    if not stores:
        return None
    last = max(stores, key=lambda x: (x.lineno, x.col_offset))
    st = src.parent(last)
    if not (isinstance(st, ast.Assign) and st.targets == [last]) or any(
        src.inside(st, loop) for loop in loops
    ):
        return None
    return st.value


def _subtree_end(m, i: int) -> int:
    """One past the last event of ``m.subtree(i)``, whose events are those from i up to there:
    nest keeps a thread's open events on a stack, so an event's descendants come right after it
    and end with its last child's."""
    while True:
        kids = m.children(i)
        if not kids:
            return i + 1
        i = kids[-1]


def _optimizer_steps(m):
    return [i for i in m.named(OPT_STEP) if m.cpu[i].cat == "user_annotation"]


@rule(
    "optimizer-foreach-off",
    "Single-tensor optimizer implementation",
    "warning",
    saves=(line_cpu(PER_PARAM_GIVES_BACK), zero),
)
def optimizer_foreach_off(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: inside ``Optimizer.step``, the single-tensor implementation on GPU parameters: its
    frame (``_single_tensor_adamw`` ...) when the trace has stacks, else many per-parameter update
    ops (``aten::lerp_``, ``aten::addcdiv_`` ...) that each launch GPU work, and no grouped
    implementation (``_foreach_``/``_fused_`` ops, or ``multi_tensor_apply`` kernels as apex's
    ``FusedAdam`` launches).

    Threshold: 20 or more per-parameter update ops per step that launch kernels, with no grouped
    op or kernel. The single-tensor loop launches several kernels per parameter; foreach or fused
    implementations launch a handful for all of them. Only GPU parameters count: on the CPU there
    is no launch to save, which is why torch picks the single-tensor path there itself, and ops
    on CPU scalars (``FusedAdam``'s step counters) launch nothing.

    Why it costs time: the single-tensor implementation loops in Python over every parameter and
    launches several kernels for each; foreach and fused implementations launch a handful in all.

    Example:
        opt = torch.optim.AdamW(model.parameters(), foreach=False)

    Fix: leave ``foreach`` at its default, or use ``fused=True`` (AdamW, Adam, SGD on CUDA).

    Ignore when: a parameter type foreach does not support forces the fallback.

    Shown by: examples/tinygpt_naive.json.gz
    """
    m = ctx.model
    steps = _optimizer_steps(m)
    if not steps:
        return
    names = set()
    update_ops = 0
    grouped = False
    launched = False
    single_frame = None
    # what the step's ops are judged by, found once through the name and frame indexes instead of
    # a walk over every event inside every step (the single-tensor optimizer is a third of the
    # naive trace's events); each step keeps the events of its own subtree, the run of events
    # from it to its end (_subtree_end), so each index is cut to it by bisection, in order
    cpu, launching, frames, cpu_op = m.cpu, ctx.launches_under(), m.frames, m.cat_mask("cpu_op")
    group_ops = m.named("aten::_foreach_") + m.named("aten::_fused_")
    group_ops = list(compress(group_ops, map(cpu_op.__getitem__, group_ops)))
    if any("multi_tensor_apply" in k[0] for k in ctx.a.keys.keys):  # apex's grouped kernels
        group_ops += compress(m.launcher, ctx.a.keys.mask(lambda k, c: "multi_tensor_apply" in k[0]))
    group_ops.sort()
    updates = m.indices(UPDATE_OPS)
    updates = list(compress(updates, map(cpu_op.__getitem__, updates)))
    updates = list(compress(updates, map(launching.__getitem__, updates)))
    singles = [j for j, _ in frames.matching(lambda fr: fr.function in SINGLE_TENSOR_FNS)]  # in order
    for i in steps:
        end = _subtree_end(m, i)
        grouped = grouped or bisect_left(group_ops, i) < bisect_left(group_ops, end)  # a grouped op,
        update_ops += bisect_left(updates, end) - bisect_left(updates, i)  # or its kernels
        mine = singles[bisect_left(singles, i) : bisect_left(singles, end)]
        if len({frames[j].function for j in mine}) > 1:  # the last one the walk over the step met
            pos = {j: k for k, j in enumerate(m.subtree(i))}
            mine = [max(mine, key=pos.__getitem__)]
        if mine:
            single_frame = frames[mine[-1]]
        launched = launched or bool(launching[i])
        names.add(cpu[i].name.split("#", 1)[1].split(".")[0])
    per_step = update_ops / len(steps)
    if grouped or not launched or (single_frame is None and per_step < SINGLE_TENSOR_MIN_OPS):
        return
    how = (
        f"its frames run {single_frame.function}"
        if single_frame
        else f"{per_step:.0f} per-parameter update ops per step and no _foreach_/_fused_ op"
    )
    yield ctx.diag(
        "optimizer-foreach-off",
        f"{', '.join(sorted(names))} uses the single-tensor implementation (foreach=False): {how}",
        ctx.location(steps[0]),
        evidence={
            "optimizer": sorted(names),
            "update_ops_per_step": r3(per_step),
            "single_tensor_frame": single_frame.function if single_frame else None,
        },
        fix="construct the optimizer with foreach=True (the default on CUDA) or fused=True",
    )


@optimizer_foreach_off.replay
def _optimizer(sm: StepModel, d: Diagnostic) -> Change:
    """The single-tensor optimizer's loop: what ``optimizer.step()`` launches (its annotation),
    else what the finding's line launches."""
    ch = loop(sm, [p for p in in_ranges(sm, OPT_STEP) if p.ops])
    return ch if not ch.empty() else line_loop(sm, d)


@optimizer_foreach_off.quick_fix
def _foreach_or_fused(src: Source, line1: int) -> list[Fix]:
    def single_tensor(c: ast.Call) -> bool:  # not already foreach=True / fused=True
        kws = {k.arg: src.segment(k.value) for k in c.keywords}
        return kws.get("foreach") != "True" and kws.get("fused") != "True"

    calls = src.calls(lambda c: call_name(c) in OPTIMIZER_CLASSES and single_tensor(c))
    out = []
    fe = [e for c in calls for e in set_kw(src, c, "foreach", "True", drop=("fused",))]
    if fe:
        out.append(Fix("Use the foreach optimizer (foreach=True)", fe, True))
    fu = [
        e
        for c in calls
        if call_name(c) in FUSED_CLASSES
        for e in set_kw(src, c, "fused", "True", drop=("foreach",))
    ]
    if fu:
        out.append(Fix("Use the fused optimizer (fused=True)", fu))
    return out


@optimizer_foreach_off.fix_elsewhere
def _constructor(src: Source, line1: int) -> list[tuple[Edit, str]]:
    """The finding sits at ``optimizer.step()``; its fix goes on the optimizer's constructor."""
    out: list[tuple[Edit, str]] = []
    for fx in _foreach_or_fused(src, line1)[:1]:
        for e in fx.edits:
            call = next(
                (
                    c
                    for c in src.calls(lambda c: call_name(c) in OPTIMIZER_CLASSES)
                    if c.lineno - 1 <= e.line <= c.end_lineno - 1
                ),
                None,
            )
            if call is None or call.lineno == line1:
                continue
            span = Edit(*src.span(call), "")
            if span not in [s for s, _ in out]:
                out.append((span, f"the optimizer is built here ({call_name(call)}): the fix goes here"))
    return out


@rule(
    "zero-grad-not-none",
    "zero_grad writes zeros every step",
    "warning",
    saves=(line_cpu(PER_PARAM_GIVES_BACK), ev("gpu_us_per_step")),
)
def zero_grad_not_none(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: ``aten::zero_``/``aten::fill_``/``aten::_foreach_zero_`` ops inside
    ``Optimizer.zero_grad`` (or ``Module.zero_grad``): gradients are overwritten with zeros.

    Threshold: any such op in the steps. With ``set_to_none=True`` (the default since PyTorch 2.0)
    zero_grad launches nothing and the next backward writes the gradients fresh.

    Why it costs time: writing zeros into every gradient launches a kernel per parameter (or a
    foreach pass) each step, and the next backward overwrites them anyway.

    Example:
        opt.zero_grad(set_to_none=False)

    Fix: ``opt.zero_grad()`` (``set_to_none=True`` is the default since PyTorch 2.0).

    Ignore when: code reads ``.grad`` before backward and needs zeros rather than ``None``.

    Shown by: examples/tinygpt_naive.json.gz
    """
    m = ctx.model
    hits = []
    scopes = [i for i in m.named(OPT_ZERO) if m.cpu[i].cat == "user_annotation"]
    scopes += [
        i
        for i, fr in m.frames.matching(lambda fr: fr.function == "zero_grad")
        if not any(m.cpu[a].name.startswith(OPT_ZERO) for a in m.ancestors(i))
    ]
    # the fill ops as a mask, each scope's subtree read through it at C speed (in the walk's order)
    fills = m.indices(("aten::zero_", "aten::fill_", "aten::_foreach_zero_"))
    is_fill = bytearray(len(m.cpu))
    for j in compress(fills, map(m.cat_mask("cpu_op").__getitem__, fills)):
        is_fill[j] = 1
    for i in scopes:
        sub = m.subtree(i)
        ops = list(compress(sub, map(is_fill.__getitem__, sub)))
        if ops:
            hits.append((i, ops))
    if not hits:
        return
    n_ops = sum(len(o) for _, o in hits)
    durs = ctx.a.gpu_durs
    gpu = sum(map(durs.__getitem__, m.gpu_under_many([j for _, ops in hits for j in ops])))
    yield ctx.diag(
        "zero-grad-not-none",
        f"zero_grad writes zeros into the gradients every step ({n_ops / ctx.n_steps:.0f} fill ops per "
        f"step, {us(gpu / ctx.n_steps)} of GPU): set_to_none=False",
        ctx.location(hits[0][0]),
        evidence={"fill_ops_per_step": r3(n_ops / ctx.n_steps), "gpu_us_per_step": r3(gpu / ctx.n_steps)},
        fix="call zero_grad(set_to_none=True) (the default): no kernels, and less memory traffic",
    )


@zero_grad_not_none.replay
def _zero_grad(sm: StepModel, d: Diagnostic) -> Change:
    """Every launch of ``zero_grad()`` (its annotation, else the finding's line) gone."""
    pts = [p for p in in_ranges(sm, OPT_ZERO) if p.ops] or [p for p in sm.on_line(d) if p.ops]
    return Change(keep={p.i: 0.0 for p in pts}, drop={p.i for p in pts})


@zero_grad_not_none.quick_fix
def _set_to_none(src: Source, line1: int) -> list[Fix]:
    calls = line_first(src, line1, src.calls(lambda c: call_name(c) == "zero_grad"))
    edits = [e for c in calls for e in set_kw(src, c, "set_to_none", "True")]
    return [Fix("Use zero_grad(set_to_none=True)", edits, True)] if edits else []


def _has_bias(e) -> bool:
    try:
        dims = msgspec.json.decode(e.args.input_dims) if e.args and e.args.input_dims else None
    except msgspec.DecodeError:
        return False
    return bool(dims) and len(dims) >= 3 and isinstance(dims[2], list) and len(dims[2]) == 1


@rule("conv-bias-before-bn", "Convolution bias feeding batch norm", "information")
def conv_bias_before_bn(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: a convolution op with a bias input (``record_shapes``) whose next op on the same
    thread is a batch norm: the bias is subtracted right back out by the norm's mean.

    Threshold: any such pair. The bias costs a read and add per output element and a parameter
    for nothing; ``bias=False`` is the standard fix.

    Why it costs time: batch norm subtracts the mean right after the convolution, so the bias is
    removed again: a read and add per output element and a parameter for nothing.

    Example:
        nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64))

    Fix: ``nn.Conv2d(64, 64, 3, padding=1, bias=False)`` before a batch norm.

    Ignore when: the weights come from a checkpoint that must load unchanged.

    Shown by: examples/recorded/conv_bias_bn.json.gz
    """
    m = ctx.model
    pairs = []
    last_conv = None
    for i in m.indices(CONV_OPS | BN_OPS):
        e = m.cpu[i]
        if e.cat != "cpu_op" or m.is_backward(i):
            continue
        if e.name in CONV_OPS and (m.enclosing_op(i) < 0 or m.cpu[m.enclosing_op(i)].name not in CONV_OPS):
            last_conv = i if _has_bias(e) or any(_has_bias(m.cpu[c]) for c in m.children(i)) else None
        elif e.name in BN_OPS and (m.enclosing_op(i) < 0 or m.cpu[m.enclosing_op(i)].name not in BN_OPS):
            if last_conv is not None and m.thread[last_conv] == m.thread[i]:
                pairs.append((last_conv, i))
            last_conv = None
    if not pairs:
        return
    by_line: dict = {}
    for c, b in pairs:
        by_line.setdefault(ctx.line_id(c), []).append((c, b))
    for k, ps in by_line.items():
        yield ctx.diag(
            "conv-bias-before-bn",
            f"{plural(len(ps) / ctx.n_steps, 'convolution')} per step with a bias feed straight into batch norm, "
            f"which removes the bias again",
            ctx.location(ps[0][0]),
            evidence={"pairs": len(ps), "conv_op": m.cpu[ps[0][0]].name, "bn_op": m.cpu[ps[0][1]].name},
            fix="construct the convolution with bias=False when a BatchNorm follows it",
        )


@conv_bias_before_bn.quick_fix
def _no_bias(src: Source, line1: int) -> list[Fix]:
    edits = []
    scopes = [
        n
        for n in ast.walk(src.tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Call))
        and src.calls(lambda c: call_name(c) in NORM_CLASSES, n)
        and src.calls(lambda c: call_name(c) in CONV_CLASSES, n)
    ]
    seen = set()
    for s in scopes:
        for c in src.calls(lambda c: call_name(c) in CONV_CLASSES, s):
            if id(c) not in seen:
                seen.add(id(c))
                edits += set_kw(src, c, "bias", "False")
    return (
        [Fix("Build the convolution without bias (bias=False): the batch norm cancels it", edits, True)]
        if edits
        else []
    )


@rule(
    "dataloader-bound",
    "GPU waits while the DataLoader produces the batch",
    "warning",
    saves=(
        lambda d, ctx: ev("loader_us_per_step")(d, ctx) * float(d.evidence.get("gpu_idle_share") or 0),
        zero,
    ),
)
def dataloader_bound(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: time inside the DataLoader's ``__next__`` (``enumerate(DataLoader)#...``) within
    the steps, and how idle the GPU was meanwhile.

    Threshold: the DataLoader holds 10% of the step time or more while the GPU is under half
    busy. Then the input pipeline, not the model, sets the pace.

    Why it costs time: the step waits for the next batch while the GPU is idle: the input pipeline,
    not the model, sets the pace.

    Example:
        loader = DataLoader(ds, batch_size=256)          # num_workers=0: decoding on the main thread

    Fix: ``DataLoader(ds, batch_size=256, num_workers=8, pin_memory=True, persistent_workers=True)``,
    move augmentation to the GPU, or pre-process the dataset once.

    Ignore when: the run is I/O-bound by design (streaming from a slow store) and that is known.

    Shown by: examples/recorded/dataloader_w0.json.gz
    """
    m, a = ctx.model, ctx.a
    if not m.steps:
        return
    loads = [
        i
        for i in m.named(DATALOADER_MARK)
        if m.cpu[i].cat == "user_annotation" and m.step_at(m.cpu[i].ts) is not None
    ]
    if not loads:
        return
    t = sum(m.cpu[i].dur for i in loads)
    busy = sum(covered(a.busy, m.cpu[i].ts, m.cpu[i].ts + m.cpu[i].dur) for i in loads)
    step_total = sum(s.dur for s in m.steps)
    share = t / step_total if step_total else 0.0
    idle = 1 - (busy / t if t else 0.0)
    if share < DATALOADER_STEP_SHARE or idle < 0.5:
        return
    kind = m.cpu[loads[0]].name.split("#", 1)[1]
    yield ctx.diag(
        "dataloader-bound",
        f"the DataLoader takes {us(t / ctx.n_steps)} per step ({pct(100 * share)} of the step) in {kind}, "
        f"with the GPU idle {pct(100 * idle)} of that time",
        ctx.location(loads[0]),
        evidence={
            "loader_us_per_step": r3(t / ctx.n_steps),
            "step_share": r3(share),
            "gpu_idle_share": r3(idle),
            "iterator": kind,
        },
        fix="use DataLoader(num_workers=N, pin_memory=True, persistent_workers=True, prefetch_factor=2+) "
        "and move per-sample work (decoding, augmentation) out of the training process",
    )


@dataloader_bound.replay
def _loader(sm: StepModel, d: Diagnostic) -> Change:
    """The DataLoader's time on the main thread moves to workers: what it spent there (host
    work: the profiler's cost per event it recorded inside taken out) is gone from the step."""
    per_step = float(d.evidence.get("loader_us_per_step") or 0.0)
    return Change(cpu_cut_us=per_step * sm.mean_scale)


@rule("inference-without-no-grad", "Forward passes build autograd graphs that no backward uses", "warning")
def inference_without_no_grad(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: ops run inside ``nn.Module`` calls that carry an autograd ``Sequence number`` (the
    profiler records one for an op only while grad mode is on), in a window where no backward
    runs (no ``autograd::engine::evaluate_function``, no op matched to a forward); per line, how
    many such ops per step, and the modules they ran in.

    Threshold: one such op per step or more, and not one backward op anywhere in the window. With
    grad mode on, every op on a parameter records a graph node and keeps the tensors it needs for a
    backward alive until its output dies: an evaluation or serving loop pays that graph's memory
    and dispatch for nothing. Ops outside modules are left out (a benchmark's plain tensors have
    no parameters that require grad, so no graph is built for them), and so are traces without
    stacks or module names, where the ops cannot be placed in a module.

    Why it costs time: the forward builds the autograd graph and saves its activations for a
    backward that never runs, so memory holds every saved activation until the output is dropped
    (a running total kept as a tensor keeps every step's graph), and each op pays autograd's
    bookkeeping on the CPU.

    Example:
        model.eval()
        for xb in loader:
            logits = model(xb)               # grad mode is still on: eval() only changes dropout/norm

    Fix: run evaluation and inference under ``with torch.inference_mode():`` (or
    ``torch.no_grad()``): no graph is recorded and activations are freed as soon as they are used.

    Ignore when: the profiled window ends before the backward of a training step (a forward
    profiled alone), or the loop needs gradients of its inputs (saliency, adversarial examples).

    Shown by: examples/corpus/traces/eval_grad.json.gz (its twin eval_nograd.json.gz runs under
    ``torch.no_grad()`` and is silent)
    """
    m = ctx.model
    if m.named("autograd::engine::evaluate_function") or (len(m.fwd_of) and max(m.fwd_of) >= 0):
        return  # a backward runs: the graph is used
    idx = ctx.modules()
    by_line: dict = {}
    for i, e in enumerate(m.cpu):
        a = e.args
        if (
            e.cat != "cpu_op"
            or a is None
            or a.seq is None
            or a.fwd_tid not in (None, 0)
            or m.enclosing_op(i) >= 0
            or idx.node_at(i) < 0
            or (m.steps and m.step_at(e.ts) is None)
        ):
            continue
        by_line.setdefault(ctx.line_id(i), []).append(i)
    n_ops = sum(len(v) for v in by_line.values())
    if n_ops < GRAD_EVAL_MIN_OPS_PER_STEP * ctx.n_steps:
        return
    top = max(by_line.values(), key=len)
    where = ctx.modules_where([(i, 1.0) for ops in by_line.values() for i in ops])
    yield ctx.diag(
        "inference-without-no-grad",
        f"the forward runs with grad mode on and no backward follows: {n_ops / ctx.n_steps:.0f} ops per "
        f"step" + (f" in {where}" if where else "") + " record autograd graph nodes and keep what a "
        "backward would need alive",
        ctx.location(top[0]),
        evidence={
            "recorded_ops_per_step": r3(n_ops / ctx.n_steps),
            "lines": len(by_line),
            "module": where.name if where else None,
        },
        fix="run the forward under torch.inference_mode() (or torch.no_grad()) when no backward follows",
    )
