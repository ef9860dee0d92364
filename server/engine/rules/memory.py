"""Memory rules from ``profile_memory`` traces: ``memory-peak``, ``memory-child-pressure``,
``memory-growth``."""
from __future__ import annotations

import bisect
from array import array
from itertools import compress

from ..loader import _scan, column
from . import rule
from .util import mib, plural, r3

CUDA = 1
CHILD_MIN_BYTES = 16 * 1024**2  # a call must allocate at least this through its children ...
CHILD_PEAK_SHARE = 0.05  # ... and at least this share of the peak,
CHILD_SELF_SHARE = 0.10  # while allocating at most this share itself.
CHILD_MAX_FINDINGS = 3


def _device_rows(m) -> array:
    """Rows of ``m.memory`` (a column table) for the GPU allocator, else the CPU one."""
    dt = m.memory.device_type
    rows = array("i", compress(range(len(dt)), (d == CUDA for d in dt)))
    return rows or array("i", compress(range(len(dt)), (d != CUDA for d in dt)))


@rule("memory-peak")
def memory_peak(ctx):
    """Evidence: the largest ``Total Allocated`` among the ``[memory]`` events (GPU first, else
    CPU), the allocation that reached it and its line.

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
    rows = _device_rows(m)
    if not rows:
        return
    peak = m.memory[max(rows, key=m.memory.total_allocated.__getitem__)]
    total_mem = m.device.totalGlobalMem if m.device is not None and peak.device_type == CUDA else None
    share = f" ({100 * peak.total_allocated / total_mem:.1f}% of the device)" if total_mem else ""
    yield ctx.diag(
        "memory-peak",
        f"peak allocated memory {mib(peak.total_allocated)}{share}, reached by an allocation of "
        f"{mib(peak.nbytes)}" + (f" in {ctx.model.cpu[peak.owner].name}" if peak.owner >= 0 else ""),
        ctx.location(peak.owner) if peak.owner >= 0 else ctx.trace_location(),
        evidence={"peak_bytes": peak.total_allocated, "allocation_bytes": peak.nbytes,
                  "device": "cuda" if peak.device_type == CUDA else "cpu",
                  "device_total_bytes": total_mem},
        fix="to lower it: activation checkpointing, smaller micro-batches, bf16 activations, or "
            "freeing references earlier (del, set_to_none=True)",
    )


@rule("memory-child-pressure")
def memory_child_pressure(ctx):
    """Evidence: an op whose allocations with its children are large while its own are small,
    with the chain of children down to the one that allocates most.

    Threshold: at least 16 MiB and 5% of the peak through children, at most 10% by the op
    itself; the 3 largest. This is the table's "CPU Mem large, Self CPU Mem small": the pressure
    comes from the call chain beneath, which is where to look.

    Why it costs time: large allocations in the call's children (temporaries, copies, casts) grow
    the allocator's pool and may fragment it; the op itself allocates little, so the cause is below.

    Example:
        attn = q @ k.transpose(-2, -1)   # inside the call, a full [seq, seq] temporary per head

    Fix: follow the chain to the child that allocates: in-place ops, fused kernels
    (``F.scaled_dot_product_attention``), or avoiding dtype casts that copy.

    Ignore when: the temporaries are needed and the peak is far from the device limit.

    Shown by: examples/tinygpt_naive.json.gz
    """
    m = ctx.model
    rows = _device_rows(m)
    if not rows:
        return
    mem = m.memory
    peak = max(mem.total_allocated[k] for k in rows) or 1
    self_b: dict[int, int] = {}
    owner, nbytes = mem.owner, mem.nbytes
    for k in rows:
        o, b = owner[k], nbytes[k]
        if o >= 0 and b > 0:
            self_b[o] = self_b.get(o, 0) + b
    total_b = _ancestor_sums(m, self_b)
    cands = []
    for i, tot in total_b.items():
        e = m.cpu[i]
        if e.cat != "cpu_op" or e.name.startswith(("Torch-Compiled Region", "TorchDynamo", "CompiledFunction")):
            continue
        own = self_b.get(i, 0)
        if tot >= CHILD_MIN_BYTES and tot >= CHILD_PEAK_SHARE * peak and own <= CHILD_SELF_SHARE * tot:
            outer = m.enclosing_op(i)
            if outer >= 0 and total_b.get(outer, 0) == tot and self_b.get(outer, 0) <= CHILD_SELF_SHARE * tot:
                continue  # the outer op tells the same story
            cands.append((tot, i))
    by_name: dict = {}
    for tot, i in sorted(cands, reverse=True):
        by_name.setdefault((m.cpu[i].name, ctx.line_id(i)), []).append((tot, i))
    shown = 0
    for (name, _), items in by_name.items():
        if shown >= CHILD_MAX_FINDINGS:
            break
        tot, i = items[0]
        chain = _chain(m, i, total_b)
        if len(chain) < 3:
            continue  # op -> its one implementation (aten::matmul -> aten::mm): a wrapper, not a chain
        shown += 1
        yield ctx.diag(
            "memory-child-pressure",
            f"{name} allocates {mib(tot)} through its children but {mib(self_b.get(i, 0))} itself "
            f"({plural(len(items), 'call')}); the memory comes from {' -> '.join(chain)}",
            ctx.location(i),
            evidence={"op": name, "total_bytes": tot, "self_bytes": self_b.get(i, 0), "chain": chain,
                      "calls": len(items), "peak_share": r3(tot / peak)},
            fix="look at the child chain: a large intermediate (logits, attention scores, a float32 "
                "upcast) is the target for chunking, fusion or checkpointing",
        )


def _ancestor_sums(m, own: dict[int, int]) -> dict[int, int]:
    """Each event's bytes added to it and to every event it is nested in."""
    if _scan is not None and sum(own.values()) < 2**62:  # int64 sums (a corrupt trace may overflow)
        evs, tots = _scan.ancestor_sums(m.parent, array("i", own.keys()), array("q", own.values()))
        return dict(zip(column("i", evs), column("q", tots)))
    total: dict[int, int] = {}
    for i, b in own.items():
        total[i] = total.get(i, 0) + b
        for a in m.ancestors(i):
            total[a] = total.get(a, 0) + b
    return total


def _chain(m, i: int, total_b: dict) -> list[str]:
    out = [m.cpu[i].name]
    while True:
        kids = [c for c in m.children(i) if total_b.get(c, 0) > 0]
        if not kids:
            return out
        i = max(kids, key=lambda c: total_b[c])
        out.append(m.cpu[i].name)
        if len(out) > 8:
            return out


# ---- memory-growth ---------------------------------------------------------------------------
GROWTH_MIN_BYTES = 1024**2  # per step: below a MiB a run of 100k steps still fits
GROWTH_STEP_SHARE = 0.75  # of the steps compared, this share must leave survivors
# What a team may set in [tool.profd.rules.CODE] (read through ctx.threshold; defaults above).
THRESHOLDS = {"memory-growth": {"min-bytes-per-step": GROWTH_MIN_BYTES}}


@rule("memory-growth")
def memory_growth(ctx):
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
    rows = _device_rows(m)
    if len(steps) < 3 or not rows:
        return
    mem = m.memory
    ts, nbytes, addr, owner = mem.ts, mem.nbytes, mem.addr, mem.owner
    last_free: dict[int, float] = {}
    for k in rows:
        if nbytes[k] < 0 and addr[k]:
            last_free[addr[k]] = ts[k]  # rows are in time order: the last free of the block
    starts = [s.ts for s in steps]
    survive = [0] * len(steps)
    by_line: dict = {}
    for k in rows:
        b, t = nbytes[k], ts[k]
        if b <= 0 or not addr[k] or last_free.get(addr[k], -1.0) > t:
            continue
        s = bisect.bisect_right(starts, t) - 1
        if s < 0 or t > steps[s].end or s == len(steps) - 1:
            continue
        survive[s] += b
        o = owner[k]
        key = ctx.line_id(o) if o >= 0 else None
        ent = by_line.setdefault(key, [0, o])
        ent[0] += b
    compared = survive[:-1]
    least = ctx.threshold("memory-growth", "min-bytes-per-step")
    leaking = sum(1 for b in compared if b >= least)
    level = []
    for s in steps:
        k = bisect.bisect_right(ts, s.end, 0, len(ts)) - 1
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
    peak = max(mem.total_allocated[k] for k in rows)
    left = f"; at this rate the device's {mib(total_mem)} fill in about {(total_mem - peak) / rise:,.0f} more steps" \
        if total_mem and total_mem > peak else ""
    op = m.cpu[top_o].name if top_o >= 0 else "an untracked allocation"
    no_backward = not any(m.is_backward(i) for i in range(len(m.cpu)))
    why = (" No backward runs in these steps: the forward keeps its autograd graph, held by a "
           "tensor that outlives the step." if no_backward else "")
    yield ctx.diag(
        "memory-growth",
        f"allocated {'GPU' if cuda else 'CPU'} memory rises {mib(rise)} per step ({mib(level[0])} -> "
        f"{mib(level[-1])} over {len(steps)} steps) and is never freed: {mib(top_b / len(compared))} "
        f"of each step's allocations here ({op}) survive it{left}.{why}",
        ctx.location(top_o) if top_key is not None else ctx.trace_location(),
        evidence={"rise_bytes_per_step": int(rise), "surviving_bytes_per_step": int(per_step),
                  "steps_leaking": leaking, "steps_compared": len(compared),
                  "level_bytes": level, "line_bytes_per_step": int(top_b / len(compared)),
                  "op": op, "backward_in_steps": not no_backward, "device_total_bytes": total_mem},
        fix="find what keeps each step's tensors alive: accumulate loss.item() or loss.detach() instead of "
            "the loss tensor, run evaluation under torch.no_grad() / torch.inference_mode(), and do not keep "
            "outputs or losses in lists across steps",
        related=[ctx.location(o) for _, o, key in lines[1:3] if key is not None],
    )
