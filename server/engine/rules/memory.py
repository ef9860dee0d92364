"""Memory rules from ``profile_memory`` traces: ``memory-peak``, ``memory-child-pressure``,
``memory-growth``."""

from __future__ import annotations

import bisect
from array import array
from typing import Iterable

from ....protocol.types import Diagnostic
from ..context import Context
from . import rule
from .util import mib, plural, r3

CUDA = 1
CHILD_MIN_BYTES = 16 * 1024**2  # a call must allocate at least this through its children ...
CHILD_PEAK_SHARE = 0.05  # ... and at least this share of the peak,
CHILD_SELF_SHARE = 0.10  # while allocating at most this share itself.
CHILD_ONE_HELPER = 0.9  # one helper holding this share makes the scope a wrapper around it
CHILD_MAX_FINDINGS = 3


# record_function labels torch and its libraries put on their own work: not the user's scopes
_TORCH_ANNOTATIONS = (
    "ProfilerStep#",
    "Optimizer.",
    "enumerate(DataLoader)#",
    "## ",
    "DistributedDataParallel",
    "Torch-Compiled Region",
    "CompiledFunction",
    "cudaGraph",
    "c10d::",
    "nccl:",
    "gloo:",
)


def _scopes(ctx) -> bytes:
    """1 for the user-level scopes: the frames of the user's own code, and the ``record_function``
    regions (labels) the user put there."""
    m = ctx.model
    cpu = m.cpu
    mask = bytearray(ctx.user_frames())
    for i in m.labels:
        if not cpu[i].name.startswith(_TORCH_ANNOTATIONS):
            mask[i] = 1
    return bytes(mask)


def _scope_name(m, i: int) -> str:
    fr = m.frames.get(i)
    if fr is not None:
        return f"{fr.function}() in {fr.path.replace(chr(92), '/').rsplit('/', 1)[-1]}"
    return f"record_function({m.cpu[i].name!r})"


@rule("memory-child-pressure", "Large allocation made by a call's children", "information")
def memory_child_pressure(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: a user-level scope (a function of the user's code, or a ``record_function``
    region) whose allocations in total are large while its own statements allocate little: the
    memory comes from the helpers it calls. Its own = what the ops it calls directly allocate
    (library code it calls included); the rest belongs to the user functions and regions nested
    in it. With the chain down to the scope and op that allocate most.

    Threshold: at least 16 MiB and 5% of the peak in one call, at most 10% of it by the scope's
    own statements, and no single helper holding 90% of it (a region wrapping one call, as
    ``record_function('forward')`` around ``model(x)``, says only that the call allocates); scopes
    that fit in one step (``main()`` and the loop around the steps hold everything by
    construction); the 3 largest.
    This is the profiler table's "CPU Mem large, Self CPU Mem small" for a high-level function:
    the pressure comes from the call chain beneath, which is where to look. A composite aten op
    allocating through its implementation (``aten::conv2d`` through ``aten::cudnn_convolution``)
    is true of every op and says nothing.

    Why it costs time: large allocations in the helpers (temporaries, copies, casts) grow the
    allocator's pool and may fragment it; the scope's own statements allocate little, so the cause
    is in the code it calls.

    Example:
        with record_function("features"):
            a = upcast(x)                  # a helper: an fp32 copy of the batch
            s = pairwise(a)                # a helper: a [B, N, N] similarity matrix

    Fix: follow the helpers to the one that allocates: in-place ops, fused kernels
    (``F.scaled_dot_product_attention``), chunking, or avoiding dtype casts that copy.

    Ignore when: the temporaries are needed and the peak is far from the device limit.

    Shown by: examples/recorded/memory_scope_helpers.json.gz
    """
    m = ctx.model
    rows, top = ctx.memory_rows()  # the GPU allocator's rows (else the CPU one's), the peak's
    if not rows:
        return
    mem = m.memory
    peak = mem.total_allocated[top] or 1
    is_scope = _scopes(ctx)
    above = m.passes.nearest(m.parent, is_scope)
    listed = m.passes.positions(is_scope)
    # each allocation's bytes onto its nearest scope, itself included (``own``), then each scope's
    # total added up the scope tree, children first (they come after their parents): the few
    # thousand scopes summed instead of every event that the allocations nest in
    scope_of = array("i", above)
    for i in listed:
        scope_of[i] = i
    own = m.passes.owner_sums(rows, m.passes.take(scope_of, mem.owner, -1), mem.nbytes)
    total_b: dict[int, int] = {}  # the scopes' totals, as _ancestor_sums gives them (none of 0)
    inner: dict[int, int] = {}
    for i in reversed(listed):
        t = own.get(i, 0) + inner.get(i, 0)
        if t:
            total_b[i] = t
            up = above[i]
            if up >= 0:
                inner[up] = inner.get(up, 0) + t
    # scopes inside one step: the loop and main() around the steps hold everything by construction
    scopes = [i for i, inside in zip(listed, _in_one_step(m, listed)) if inside and i in total_b]
    kids: dict[int, list[int]] = {}
    for i in scopes:
        up = above[i]  # the nearest scope around it
        if up >= 0:
            kids.setdefault(up, []).append(i)

    cands = []
    for i in scopes:
        tot = total_b.get(i, 0)
        if tot < CHILD_MIN_BYTES or tot < CHILD_PEAK_SHARE * peak or own.get(i, 0) > CHILD_SELF_SHARE * tot:
            continue
        helpers = _helpers(m, kids.get(i, ()), total_b)
        if not helpers or helpers[0][1] >= CHILD_ONE_HELPER * tot:
            continue  # a wrapper around one call: that call's own allocations are the story
        cands.append((tot, i, helpers))
    by_scope: dict = {}
    for tot, i, helpers in sorted(cands, key=lambda c: -c[0]):
        by_scope.setdefault((_scope_name(m, i), ctx.line_id(i)), []).append((tot, i, helpers))
    if by_scope:  # every event's total, for the ops under the helpers (a finding's, not every scope's)
        op_b = _ancestor_sums(m, m.passes.owner_sums(rows, mem.owner, mem.nbytes))
    for (name, _), items in list(by_scope.items())[:CHILD_MAX_FINDINGS]:
        tot, i, helpers = items[0]
        parts = [f"{h} {mib(b)} ({_top_op(m, j, op_b)})" for h, b, j in helpers[:3]]
        yield ctx.diag(
            "memory-child-pressure",
            f"{name} allocates {mib(tot)} per call ({plural(len(items), 'call')}) but {mib(own.get(i, 0))} in its "
            f"own statements; the memory comes from the code it calls: {', '.join(parts)}",
            ctx.location(i),
            evidence={
                "scope": name,
                "total_bytes": tot,
                "self_bytes": own.get(i, 0),
                "helpers": [{"scope": h, "bytes": b} for h, b, _ in helpers[:5]],
                "calls": len(items),
                "peak_share": r3(tot / peak),
            },
            fix="look at the helpers: a large intermediate (logits, attention scores, a float32 "
            "upcast) is the target for chunking, fusion, freeing earlier or checkpointing",
        )


def _in_one_step(m, idx: array) -> list[bool]:
    """Per event of ``idx``, whether it starts and ends in one step (``model.step_at`` of each
    start, the step_of pass)."""
    if not m.steps:
        return [True] * len(idx)
    starts, durs = m.cpu_starts(), m.durs
    ends = array("d", [s.end for s in m.steps])
    at = m.passes.step_of(idx, starts, array("d", [s.ts for s in m.steps]), ends)
    return [k >= 0 and starts[i] + durs[i] <= ends[k] + 1.0 for i, k in zip(idx, at)]


def _helpers(m, kids, total_b: dict) -> list[tuple[str, int, int]]:
    """The scopes called directly by one scope, grouped by name (a helper called in a loop is one
    helper): (name, bytes, its largest call), most bytes first."""
    by: dict[str, list] = {}
    for c in kids:
        b = total_b.get(c, 0)
        if b <= 0:
            continue
        h = by.setdefault(_scope_name(m, c), [0, c])
        h[0] += b
        if b > total_b.get(h[1], 0):
            h[1] = c
    return sorted(((n, b, c) for n, (b, c) in by.items()), key=lambda t: -t[1])


def _top_op(m, i: int, total_b: dict) -> str:
    """The outermost op under scope i that allocates most."""
    best, most = "", 0
    for j in m.subtree(i):
        e = m.cpu[j]
        if (
            e.cat == "cpu_op"
            and m.enclosing_op(j) < 0
            or (e.cat == "cpu_op" and m.cpu[m.enclosing_op(j)].cat != "cpu_op")
        ):
            if total_b.get(j, 0) > most:
                best, most = e.name, total_b[j]
    return best or "?"


def _ancestor_sums(m, own: dict[int, int]) -> dict[int, int]:
    """Each event's bytes added to it and to every event it is nested in (the ancestor_sums pass)."""
    return m.passes.ancestor_sums(m.parent, own)


@rule("memory-peak", "Peak allocated memory and the line that reached it", "information")
def memory_peak(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: the largest ``Total Allocated`` among the ``[memory]`` events (GPU first, else
    CPU), the allocation that reached it and its line. Traces whose samples carry only ``Bytes``
    (the 2021-era profiler) get the running sum of the allocations, a lower bound, and say so.

    Threshold: none; information whenever the trace was recorded with ``profile_memory``.

    Why it costs time: not directly; the peak and the line that reached it tell how close the run is
    to out-of-memory and where activation memory comes from.

    Example:
        logits = self.out(h)             # [batch, seq, vocab] activations: the peak

    Fix: to lower it: activation checkpointing, smaller micro-batches with gradient accumulation,
    bf16 activations, or chunked loss computation.

    Ignore when: memory is not a constraint (information).

    Shown by: examples/seed_n4096_bf16.json.gz
    """
    m = ctx.model
    rows, top = ctx.memory_rows()
    if not rows:
        return
    peak = m.memory[top]
    total_mem = m.device.totalGlobalMem if m.device is not None and peak.device_type == CUDA else None
    share = f" ({100 * peak.total_allocated / total_mem:.1f}% of the device)" if total_mem else ""
    summed = m.memory.totals_summed
    yield ctx.diag(
        "memory-peak",
        f"peak allocated memory {'at least ' if summed else ''}{mib(peak.total_allocated)}{share}"
        f"{' (summed from the allocations: the trace records no totals)' if summed else ''}, reached by an allocation of "
        f"{mib(peak.nbytes)}" + (f" in {ctx.model.cpu[peak.owner].name}" if peak.owner >= 0 else ""),
        ctx.location(peak.owner) if peak.owner >= 0 else ctx.trace_location(),
        evidence={
            "peak_bytes": peak.total_allocated,
            "allocation_bytes": peak.nbytes,
            **({"summed": True} if summed else {}),
            "device": "cuda" if peak.device_type == CUDA else "cpu",
            "device_total_bytes": total_mem,
        },
        fix="to lower it: activation checkpointing, smaller micro-batches, bf16 activations, or "
        "freeing references earlier (del, set_to_none=True)",
    )


# ---- memory-growth ---------------------------------------------------------------------------
GROWTH_MIN_BYTES = 1024**2  # per step: below a MiB a run of 100k steps still fits
GROWTH_STEP_SHARE = 0.75  # of the steps compared, this share must leave survivors


@rule(
    "memory-growth",
    "Allocated memory rises step over step and is not freed",
    "warning",
    thresholds={"min-bytes-per-step": GROWTH_MIN_BYTES},
)
def memory_growth(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: per active step, the bytes it allocated (``[memory]`` samples, GPU first, else
    CPU) whose block is never freed later in the trace (a free names the block by ``Addr``),
    the allocated level at each step's end, and the lines that made the surviving allocations.

    Threshold: at least 1 MiB survives in 75% of the steps compared (all but the last, whose
    outputs may still be in use) and the level at the steps' ends rises by at least 1 MiB a step.
    One step's survivors are a cache or lazily created state; survivors every step are a leak:
    something keeps each step's tensors alive (a loss summed as a tensor under grad mode keeps
    every step's graph and the activations it saved; outputs appended to a list), and the run
    ends in an out-of-memory error. Needs ``profile_memory=True`` and at least three steps.

    Why it costs time: it costs memory first: the run fails with an out-of-memory error after
    enough steps; before that the caching allocator keeps growing its pool, and a loop that keeps
    autograd graphs alive also spends time building graphs nobody uses.

    Example:
        total = 0
        for x, y in loader:            # evaluation without torch.no_grad()
            loss = F.mse_loss(model(x), y)
            total = total + loss       # keeps every step's graph and activations alive

    Fix: accumulate ``loss.item()`` (every N steps) or ``loss.detach()`` instead of the loss
    tensor, run evaluation under ``torch.no_grad()`` or ``torch.inference_mode()``, and do not
    keep outputs or losses in lists across steps (``.detach().cpu()`` what must be kept).

    Ignore when: the growth is a cache that stops growing (a first epoch filling a buffer) or the
    steps profiled are the only ones the program runs.

    Shown by: examples/recorded/memory_growth_grow.json.gz
    """
    m = ctx.model
    steps = m.steps
    rows, top = ctx.memory_rows()
    if len(steps) < 3 or not rows:
        return
    mem = m.memory
    ts, nbytes, addr, owner = mem.ts, mem.nbytes, mem.addr, mem.owner
    starts, ends = array("d", [s.ts for s in steps]), array("d", [s.end for s in steps])
    survive = [0] * len(steps)
    by_line: dict = {}
    for k, s in zip(*m.passes.survivors(rows, ts, nbytes, addr, starts, ends)):
        b = nbytes[k]
        survive[s] += b
        o = owner[k]
        key = ctx.line_id(o) if o >= 0 else None
        ent = by_line.setdefault(key, [0, o])
        ent[0] += b
    compared = survive[:-1]
    least = ctx.threshold("memory-growth", "min-bytes-per-step")
    leaking = sum(1 for b in compared if b >= least)
    level = []
    for step in steps:
        k = bisect.bisect_right(ts, step.end, 0, len(ts)) - 1
        while k >= 0 and mem.device_type[k] != mem.device_type[rows[0]]:
            k -= 1
        level.append(mem.total_allocated[k] if k >= 0 else 0)
    rise = (level[-1] - level[0]) / (len(steps) - 1)
    if leaking < GROWTH_STEP_SHARE * len(compared) or rise < least:
        return
    per_step = sum(compared) / len(compared)
    lines = sorted(((b, o, key) for key, (b, o) in by_line.items()), key=lambda x: (-x[0], x[1]))
    top_b, top_o, top_key = lines[0]
    cuda = mem.device_type[rows[0]] == CUDA
    total_mem = m.device.totalGlobalMem if cuda and m.device is not None else None
    peak = mem.total_allocated[top]
    left = (
        f"; at this rate the device's {mib(total_mem)} fill in about {(total_mem - peak) / rise:,.0f} more steps"
        if total_mem and total_mem > peak
        else ""
    )
    op = m.cpu[top_o].name if top_o >= 0 else "an untracked allocation"
    no_backward = m.fwd_of.count(-1) == len(m.fwd_of)  # no event links back to a forward op
    why = (
        " No backward runs in these steps: the forward keeps its autograd graph, held by a "
        "tensor that outlives the step."
        if no_backward
        else ""
    )
    yield ctx.diag(
        "memory-growth",
        f"allocated {'GPU' if cuda else 'CPU'} memory rises {mib(rise)} per step ({mib(level[0])} -> "
        f"{mib(level[-1])} over {len(steps)} steps) and is never freed: {mib(top_b / len(compared))} "
        f"of each step's allocations here ({op}) survive it{left}.{why}",
        ctx.location(top_o) if top_key is not None else ctx.trace_location(),
        evidence={
            "rise_bytes_per_step": int(rise),
            "surviving_bytes_per_step": int(per_step),
            "steps_leaking": leaking,
            "steps_compared": len(compared),
            "level_bytes": level,
            "line_bytes_per_step": int(top_b / len(compared)),
            "op": op,
            "backward_in_steps": not no_backward,
            "device_total_bytes": total_mem,
        },
        fix="find what keeps each step's tensors alive: accumulate loss.item() or loss.detach() instead of "
        "the loss tensor, run evaluation under torch.no_grad() / torch.inference_mode(), and do not keep "
        "outputs or losses in lists across steps",
        related=[ctx.location(o) for _, o, key in lines[1:3] if key is not None],
    )
