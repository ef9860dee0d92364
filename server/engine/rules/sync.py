"""Synchronisation: ``sync-wait`` (explicit syncs that block) and ``host-sync`` (syncs forced
from user code by reading a GPU value on the host)."""

from __future__ import annotations

import bisect
from typing import Iterable

from ....protocol.types import Diagnostic
from .. import kernels as K
from ..analyses import SYNC_CALLS, covered  # SYNC_CALLS: other families import it from here
from ..context import Context
from ..impact import ev, zero
from ..stepmodel import BLOCKING, SYNC, Change, StepModel
from . import rule
from .util import pct, plural, r3, us

HOST_READ_WAITS = SYNC_CALLS | K.BLOCKING_COPIES  # what a host read blocks in
# aten ops that read a device value on the host, and what the user wrote to cause them.
HOST_READ_OPS = {
    "aten::item": ".item() / float(t) / int(t)",
    "aten::_local_scalar_dense": ".item() / float(t) / int(t)",
    "aten::is_nonzero": "a tensor in a condition (if t.sum() > 0, bool(t))",
    "aten::nonzero": "torch.nonzero / t[mask] (output size depends on data)",
    "aten::tolist": ".tolist()",
    "aten::equal": "torch.equal",
    "aten::masked_select": "t[mask] (output size depends on data)",
    "aten::unique": "torch.unique",
    "aten::_unique2": "torch.unique",
    "aten::repeat_interleave": "repeat_interleave with tensor repeats",
}
_COPY_OPS = {"aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu"}
# sync-wait: a sync is worth a warning when the CPU blocks this share of a step in it.
SYNC_WAIT_STEP_SHARE = 0.05
SYNC_WAIT_MIN_US = 100.0
# host-sync: a warning when the forced syncs block this share of the step; below, information.
HOST_SYNC_WARN_SHARE = 0.01


def is_profiler_internal(m, i: int) -> bool:
    """Event i runs inside the profiler's own python code (start/stop/step)."""
    for a in m.ancestors(i):
        fr = m.frames.get(a)
        if fr is not None and ("torch/profiler/" in fr.path or fr.path.endswith("autograd/profiler.py")):
            return True
    return False


def host_read_op(m, i: int):
    """(op index, what the user wrote) when sync call i was forced by a host read, else None."""
    for a in m.ancestors(i):
        e = m.cpu[a]
        if e.cat != "cpu_op":
            if e.cat == "python_function":
                break
            continue
        if e.name in HOST_READ_OPS:
            top = a
            for b in m.ancestors(
                a
            ):  # report the outermost host-read op (aten::item over _local_scalar_dense)
                if m.cpu[b].cat == "cpu_op" and m.cpu[b].name in HOST_READ_OPS:
                    top = b
                elif m.cpu[b].cat == "python_function":
                    break
            return top, HOST_READ_OPS[m.cpu[top].name]
        if e.name in _COPY_OPS and _copies_to_host(m, a):
            return _outermost_copy(m, a), ".cpu() / .to('cpu') / .numpy() / printing a tensor"
    return None


def _copies_to_host(m, op: int) -> bool:
    return any("DtoH" in m.gpu[g].name for g in m.gpu_under(op))


def _outermost_copy(m, a: int) -> int:
    top = a
    for b in m.ancestors(a):
        if m.cpu[b].cat == "cpu_op" and m.cpu[b].name in _COPY_OPS:
            top = b
        elif m.cpu[b].cat == "python_function":
            break
    return top


def _loop_syncs(m, names=SYNC_CALLS) -> list[int]:
    """Sync calls (of ``names``) inside the steps, the profiler's own left out."""
    return [
        i for i in m.indices(names) if m.step_at(m.cpu[i].ts) is not None and not is_profiler_internal(m, i)
    ]


@rule(
    "sync-wait",
    "A synchronising call blocks the CPU",
    "warning",
    saves=(ev("blocked_us_per_step"), zero),
    waits=True,
)
def sync_wait(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: explicit synchronising calls inside the steps (``torch.cuda.synchronize``,
    stream/event syncs) that are not host reads, with how long they block and what the GPU did
    meanwhile: draining a busy queue (the CPU ran ahead, fine unless repeated), waiting on a
    collective (an NCCL kernel spinning for a late peer: see ``rank-straggler``) or idle (the
    sync waited for nothing, or for work that was late).

    Threshold: the syncs at one line block at least 5% of the step time and 100 µs per step.

    Why it costs time: the CPU stops until the GPU drains its queue, so it cannot launch the next
    step's work ahead; when the GPU was idle meanwhile the sync waited for nothing.

    Example:
        loss.backward()
        torch.cuda.synchronize()         # every step, to "measure" time

    Fix: drop syncs from the training loop (time with CUDA events, read metrics every N steps),
    or wait on a specific event (``event.synchronize()``) only when the result is needed.

    Ignore when: the sync is a deliberate barrier (benchmark timing, before a host-side checkpoint).

    Shown by: examples/recorded/sync_wait_busy.json.gz
    """
    m, a = ctx.model, ctx.a
    if not m.steps:
        return
    groups: dict = {}
    for i in _loop_syncs(m):
        if host_read_op(m, i) is not None:
            continue
        k = ctx.line_id(i)
        groups.setdefault(k, []).append(i)
    step_us = ctx.mean_step_us
    for k, idx in groups.items():
        blocked = sum(m.cpu[i].dur for i in idx) / ctx.n_steps
        if blocked < SYNC_WAIT_MIN_US or blocked < SYNC_WAIT_STEP_SHARE * step_us:
            continue
        busy = sum(covered(a.busy, m.cpu[i].ts, m.cpu[i].ts + m.cpu[i].dur) for i in idx)
        total = sum(m.cpu[i].dur for i in idx) or 1.0
        frac = busy / total
        comm = sum(covered(a.comm, m.cpu[i].ts, m.cpu[i].ts + m.cpu[i].dur) for i in idx) / total
        if frac >= 0.5:
            copies = sum(covered(a.copies, m.cpu[i].ts, m.cpu[i].ts + m.cpu[i].dur) for i in idx) / total
            kind, what = (
                "draining",
                ("draining a queue of copies" if copies >= 0.5 else "draining a busy GPU queue"),
            )
        elif comm >= 0.5:
            # a collective spins on the GPU while it waits for a peer: the wait is another rank's
            kind, what = (
                "collective",
                f"waiting on a collective ({pct(100 * comm)} of the time in collective kernels): another rank is late",
            )
        else:
            kind, what = "idle", "while the GPU sat idle"
        name = m.cpu[idx[0]].name
        waited = _waited_on(m, idx[0])
        related = []
        if waited >= 0 and m.launcher[waited] >= 0:
            what_g = "the collective it waited on" if kind == "collective" else "the GPU work it waited for"
            related.append(
                ctx.related(
                    m.launcher[waited], f"{what_g}: {K.short_name(m.gpu[waited].name, 60)}, launched here"
                )
            )
        yield ctx.diag(
            "sync-wait",
            f"{name} blocks the CPU {us(blocked)} per step ({pct(100 * blocked / step_us)} of the step), "
            f"{what} (the GPU busy {pct(100 * frac)} of the waits)",
            ctx.location(idx[0]),
            evidence={
                "sync_call": name,
                "count": len(idx),
                "blocked_us_per_step": r3(blocked),
                "gpu_busy_during": r3(frac),
                "collective_during": r3(comm),
                "kind": kind,
            },
            fix=(
                "the wait is another rank's lateness: balance the work across ranks (batch sizes, data "
                "shards, host-side work) and see rank-straggler in the job report"
                if kind == "collective"
                else "synchronise only where a result is needed (timing, logging every N steps); use events "
                "(torch.cuda.Event.record / wait_stream) to order streams without blocking the CPU"
            ),
            related=related,
        )


@sync_wait.replay
def _unblock(sm: StepModel, d: Diagnostic) -> Change:
    """The line's syncs and blocking copies no longer wait (the value is read later, or not)."""
    return Change(nonblock={p.i for p in sm.on_line(d) if p.kind in (SYNC, BLOCKING)})


@rule(
    "host-sync",
    "Device-to-host synchronisation forced from user code",
    "warning",
    saves=(ev("blocked_us_per_step"), zero),
    waits=True,
)
def host_sync(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: sync calls (or copies that block, as ``hipMemcpyWithStream`` does on ROCm) inside
    the steps whose enclosing aten op reads a device value on the host (``aten::item``,
    ``aten::is_nonzero``, ``aten::nonzero``, a DtoH copy), grouped by source line: how many per step
    and how long the CPU was blocked per step.

    Threshold: one or more per step in user code. Each one drains the GPU queue and stops the CPU
    from running ahead, so its cost is the lost overlap more than the blocked time: a warning when
    it happens every step or blocks at least 1% of the step, else information.

    Why it costs time: reading a device value on the host (``.item()``, ``float(t)``, ``if t:``)
    waits for every queued kernel to finish and stops the CPU from running ahead, so the GPU idles
    at the start of every step.

    Example:
        for step, (x, y) in enumerate(loader):
            loss = model(x, y)
            print("loss", loss.item())   # a device->host sync every step

    Fix: keep the value on the device and read it every N steps
    (``if step % 100 == 0: print(loss.item())``), accumulate on the GPU
    (``total += loss.detach()``), or use ``non_blocking`` copies to pinned memory.

    Ignore when: the value decides control flow that cannot wait (early stopping on this step's
    loss) and the step is long enough for the sync not to matter.

    Shown by: examples/tinygpt_naive.json.gz
    """
    m = ctx.model
    if not m.steps:
        return
    groups: dict = {}
    for i in _loop_syncs(m, HOST_READ_WAITS):
        e = m.cpu[i]
        hit = host_read_op(m, i)
        if hit is None:
            continue
        op, what = hit
        k = ctx.line_id(op)
        g = groups.setdefault(k, {"ops": set(), "what": set(), "sync": e.name, "first": op})
        if op not in g["ops"]:
            g["ops"].add(op)
            g["what"].add(what)
    step_us = ctx.mean_step_us
    for k, g in groups.items():
        ops = sorted(g["ops"])
        blocked = sum(m.cpu[o].dur for o in ops) / ctx.n_steps
        per_step = len(ops) / ctx.n_steps
        names = sorted({m.cpu[o].name for o in ops})
        share = blocked / step_us if step_us else 0.0
        yield ctx.diag(
            "host-sync",
            f"{plural(per_step, 'device->host sync')} per step from {', '.join(sorted(g['what']))} "
            f"({', '.join(names)} -> {g['sync']}): the CPU blocks {us(blocked)} per step "
            f"({pct(100 * share)} of the step) and cannot queue work ahead of the GPU",
            ctx.location(g["first"]),
            evidence={
                "sync_call": g["sync"],
                "ops": names,
                "per_step": r3(per_step),
                "blocked_us_per_step": r3(blocked),
                "step_share": r3(share),
            },
            fix="keep values on the GPU inside the loop (accumulate losses as tensors, log every N "
            "steps), avoid data-dependent shapes and Python conditions on tensors",
            severity="warning" if share >= HOST_SYNC_WARN_SHARE or per_step >= 1 else "information",
        )


host_sync.replay(_unblock)  # as sync-wait's: the line's syncs no longer wait


def _waited_on(m, i: int) -> int:
    """The GPU event a sync at cpu event i waited for: the last one to finish inside its wait."""
    e = m.cpu[i]
    lo, hi = e.ts, e.ts + e.dur
    best, best_end = -1, lo
    g = bisect.bisect_right(m.gpu, hi, key=lambda x: x.ts) - 1
    for _ in range(4096):  # a sync waits on recent work: never walk the whole GPU lane
        if g < 0:
            break
        end = m.gpu[g].ts + m.gpu[g].dur
        if best_end <= end <= hi + 1.0:
            best, best_end = g, end
        g -= 1
    return best
