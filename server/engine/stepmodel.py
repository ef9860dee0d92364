"""A model of the step, replayed: what bounds it, and what a change to it gives back.

The active steps are replayed as the program ran them, without the profiler: the CPU walks its
launch and sync calls in order, spending between two of them the time the trace shows (dispatch,
Python, host work) shrunk by the profiler's slowdown (``StepGpu.unprofiled_cpu_us``: by the
options' factor, never more than the profiler costs per event it recorded). Each launch queues its
GPU work on its stream, which starts it once the stream is free and the launch has arrived (the
launch latency the trace shows); a sync call (``.item()``,
``cudaDeviceSynchronize``) waits for the GPU to drain, and so does a call that returned only once
its own copy had finished (a copy from pageable memory, a blocking device-to-host copy). A step
lasts from the CPU's start to the later of the CPU's end and the GPU's, carried over the steps,
so a CPU that runs ahead overlaps the next step with the GPU's work and a sync does not.

A fix is a change to that replay (``Change``): CPU time between calls taken out or kept in part,
GPU work made shorter or removed, a call that no longer blocks. What it gives back is the replayed
step before less the replayed step after, so the same saving counts for nothing when the other
side bounds the step, and in full when it is the critical path. No I/O here.
"""

from __future__ import annotations

import bisect
import weakref
from array import array
from itertools import chain, repeat
from operator import attrgetter, itemgetter, sub
from typing import Optional

import msgspec

from . import kernels
from .passes import NO_LINE

LAUNCH_APIS = kernels.apis(kernels.LAUNCH) | kernels.apis(kernels.COPY_API) | kernels.apis(kernels.MEMSET_API)
SYNC_APIS = kernels.apis(kernels.SYNC)
# A launch call this long that did not wait for its own work waited for room in the launch queue
# (the CPU far ahead of the GPU): time the CPU spent waiting, not dispatching.
QUEUE_WAIT_US = 100.0
# A call that ended within this of its own GPU work's end waited for it (a blocking copy).
BLOCK_SLACK_US = 1.0
MAX_POINTS = 400_000
MAX_STEPS = 8  # the replay's steps: the first this many active steps stand for the rest
# What the profiler adds per event it records, on any thread of the process: measured on the H200
# corpus pairs (bench/impact.toml) as (profiled CPU - unprofiled step) / events on CPU-bound steps,
# 3.1-4.6 µs with record_shapes and with_stack; without with_stack, the bound the verdict uses.
EVENT_COST_US = {True: 3.5, False: 3.0}
LAUNCH_LATENCY_MAX_US = 20.0
MIN_SCALE = 0.1  # the profiler never made dispatch more than ten times slower  # beyond this many calls in the active steps, replay is not attempted

NONBLOCKING, BLOCKING, SYNC, QUEUED = 0, 1, 2, 3  # QUEUED: a launch that waited for queue room


class Point(msgspec.Struct, gc=False):  # one per replayed call: thousands (no cycle: no GC header)
    i: int  # cpu event index of the call
    ts: float
    kind: int
    ops: tuple  # (gpu index, stream number, duration) each; a tuple is 32 bytes less than a list


class SimStep(msgspec.Struct):
    ts: float
    end: float
    scale: float  # unprofiled / profiled CPU time between calls
    points: list
    cpu_us: float = 0.0  # profiled CPU time between calls (what ``scale`` applies to)
    gpu_us: float = 0.0  # GPU work of its calls
    tail: float = 0.0  # profiled CPU time after the last call


class Change(msgspec.Struct):
    """What a fix changes in the replay (any field may be empty)."""

    keep: dict = msgspec.field(default_factory=dict)  # cpu index -> share of the CPU time before it kept
    drop: set = msgspec.field(default_factory=set)  # calls that no longer happen (their GPU work neither)
    dur: dict = msgspec.field(default_factory=dict)  # gpu index -> its new duration
    nonblock: set = msgspec.field(default_factory=set)  # calls that no longer wait for the GPU
    cpu_cut_us: float = 0.0  # profiled CPU µs per step taken out, spread over the step
    gpu_cut_us: float = 0.0  # GPU µs per step taken out, spread over the step's work

    def __or__(self, o: "Change") -> "Change":
        keep = dict(self.keep)
        for k, v in o.keep.items():
            keep[k] = min(keep.get(k, 1.0), v)
        dur = dict(self.dur)
        for k, v in o.dur.items():
            dur[k] = min(dur.get(k, v), v)
        return Change(
            keep,
            self.drop | o.drop,
            dur,
            self.nonblock | o.nonblock,
            self.cpu_cut_us + o.cpu_cut_us,
            self.gpu_cut_us + o.gpu_cut_us,
        )

    def empty(self) -> bool:
        return not (self.keep or self.drop or self.dur or self.nonblock or self.cpu_cut_us or self.gpu_cut_us)


class StepModel:
    """The replayable active steps of one trace (``of(ctx)`` builds it once per analysis)."""

    def __init__(self, ctx):
        # Weak: the analysis caches this model (``of``) and the context holds the analysis, so a
        # strong reference back would make the whole analysis a cycle that only the cyclic GC
        # frees (a daemon analysing one trace after another grew by the analysis each time).
        self._ctx = weakref.ref(ctx)
        m, a = ctx.model, ctx.a
        self.steps: list[SimStep] = []
        self._points: list[Point] = []  # the replayed calls by row: the steps' points one after another
        self._by_line: Optional[dict] = None
        self._by_group: Optional[dict] = None
        self.latency = 0.0
        if not m.steps or not a.step_gpu:
            return
        cost = EVENT_COST_US[bool(m.with_stack)]
        msteps = m.steps[:MAX_STEPS]
        if m.count(LAUNCH_APIS | SYNC_APIS) > MAX_POINTS:
            return
        # the calls of the replayed steps (replay_rows keeps those inside a step), as rows
        idx = array("i", m.indices_during(LAUNCH_APIS | SYNC_APIS, msteps[0].ts, max(s.end for s in msteps)))
        sync, blocking = set(m.indices(SYNC_APIS)), set(m.indices(kernels.BLOCKING_COPIES))
        starts, durs = m.cpu_starts(), m.durs
        off, launched = m._launched  # the GPU events of each call (gpu_of_launch)
        rows, kinds, pre, step_rows, cpu_us, tail, op_off, ops, op_dur, lats = m.passes.replay_rows(
            idx,
            starts,
            durs,
            array("d", [s.ts for s in msteps]),
            array("d", [s.end for s in msteps]),
            bytes(map(sync.__contains__, idx)),
            bytes(map(blocking.__contains__, idx)),
            off,
            launched,
            m.gpu,
            BLOCK_SLACK_US,
            QUEUE_WAIT_US,
        )
        lats = sorted(lats)
        # launch to start on an idle stream: the low quartile of what the trace shows, at most LAUNCH_LATENCY_MAX_US
        self.latency = min(lats[len(lats) // 4], LAUNCH_LATENCY_MAX_US) if lats else 0.0
        streams: dict = {}  # (pid, tid) -> its number, in order of first op
        gpu = m.gpu
        op_stream = array("i", [streams.setdefault((gpu[g].pid, gpu[g].tid), len(streams)) for g in ops])
        each_op = list(zip(ops, op_stream, op_dur))  # (gpu index, stream number, duration)
        points = [
            Point(i, starts[i], k, tuple(each_op[a:b])) for i, k, a, b in zip(rows, kinds, op_off, op_off[1:])
        ]
        threads = list(m.tindex.starts.values())
        for j, s in enumerate(msteps):
            a, b = step_rows[j], step_rows[j + 1]
            events = sum(bisect.bisect_right(t, s.end) - bisect.bisect_left(t, s.ts) for t in threads)
            unprof = max(cpu_us[j] * MIN_SCALE, cpu_us[j] - events * cost)
            self.steps.append(
                SimStep(
                    s.ts,
                    s.end,
                    unprof / cpu_us[j] if cpu_us[j] > 0 else 1.0,
                    points[a:b],
                    cpu_us[j],
                    sum(op_dur[op_off[a] : op_off[b]]),  # Python's sum (compensated from 3.12), as before
                    tail[j],
                )
            )
        # the rows as the replay pass reads them (run): the steps' rows one after another
        self._pre, self._kind, self._step_rows, self._tail = pre, kinds, step_rows, tail
        self._op_off, self._op_stream, self._op_dur = op_off, op_stream, op_dur
        self._row_scale = array("d")
        for st in self.steps:
            self._row_scale.extend(array("d", [st.scale]) * len(st.points))
        # cpu index of a call -> its row, gpu index -> its op, made of int objects already held:
        # the Points' and the ops' own, and one list of the slots for both (an int read from a
        # column or a range is a new object: 28 bytes each, 0.6 MB at 7,168 calls)
        slots = list(range(max(len(rows), len(ops))))
        self._row_of = dict(zip(map(attrgetter("i"), points), slots))
        self._op_of = dict(zip(map(itemgetter(0), each_op), slots))
        self._points = points
        # per op the cpu index of the call that launched it (a dict of each, 1 MB at 7,000 calls)
        self._op_call = array("i", chain.from_iterable(map(repeat, rows, map(sub, op_off[1:], op_off))))
        self._ones = array("d", [1.0]) * len(rows)
        self._none = bytes(len(rows))
        self.base = self.run(Change())
        n = sum(st.cpu_us for st in self.steps)
        self.mean_scale = sum(st.cpu_us * st.scale for st in self.steps) / n if n > 0 else 1.0

    @property
    def ctx(self):
        return self._ctx()

    @classmethod
    def of(cls, ctx) -> "StepModel":
        sm = ctx.a.__dict__.get("_step_model")
        if sm is None or sm.ctx is not ctx:
            sm = ctx.a.__dict__["_step_model"] = cls(ctx)
        return sm

    @property
    def ok(self) -> bool:
        return bool(self.steps) and self.base > 0

    def run(self, ch: Change) -> float:
        """The mean step, µs, with ``ch`` applied (the replay pass, over the rows as columns)."""
        if not self.steps:
            return 0.0
        scale, gscale = array("d"), array("d")
        for st in self.steps:
            sc = st.scale
            if ch.cpu_cut_us and st.cpu_us > 0:
                sc *= max(0.0, 1.0 - ch.cpu_cut_us / (st.cpu_us * st.scale))
            scale.append(sc)
            gscale.append(
                max(0.0, 1.0 - ch.gpu_cut_us / st.gpu_us) if ch.gpu_cut_us and st.gpu_us > 0 else 1.0
            )
        keep = _overridden(self._ones, ch.keep, self._row_of)
        dur = _overridden(self._op_dur, ch.dur, self._op_of)
        return self.ctx.model.passes.replay(
            self._pre,
            self._kind,
            self._op_off,
            self._op_stream,
            dur,
            self._step_rows,
            scale,
            gscale,
            self._tail,
            self.latency,
            keep,
            self._rows_in(ch.drop),
            self._rows_in(ch.nonblock),
        )

    def _rows_in(self, calls: set) -> bytes:
        """1 for the rows of these calls."""
        if not calls:
            return self._none
        out = bytearray(self._none)
        for i in calls:
            r = self._row_of.get(i)
            if r is not None:
                out[r] = 1
        return bytes(out)

    def removed(self, ch: Change) -> tuple[float, float]:
        """(CPU µs, GPU µs) per step that ``ch`` takes out, wherever the step waits: its own cost."""
        cpu = gpu = 0.0
        row_of, pre, scale, points = self._row_of, self._pre, self._row_scale, self._points
        starts, durs = self.ctx.model.cpu_starts(), self.ctx.model.durs
        for i in ch.nonblock:
            r = row_of.get(i)
            if r is not None and points[r].kind in (SYNC, BLOCKING):
                cpu += (starts[i] + durs[i]) - starts[i]  # the call's end - its start
        for i, k in ch.keep.items():
            r = row_of.get(i)
            if r is not None:
                cpu += pre[r] * scale[r] * (1.0 - k)
        for i in ch.drop:
            r = row_of.get(i)
            if r is not None:
                gpu += sum(d for _, _, d in points[r].ops)
        op_of, op_dur, op_call = self._op_of, self._op_dur, self._op_call
        for g, d2 in ch.dur.items():
            o = op_of.get(g)
            if o is not None and op_call[o] not in ch.drop:
                gpu += op_dur[o] - d2
        n = len(self.steps) or 1
        return cpu / n + ch.cpu_cut_us, gpu / n + ch.gpu_cut_us

    # ---- selecting what a finding's fix touches -----------------------------------------------
    def by_line(self) -> dict:
        """(trace path, line) -> the calls placed on that user line, in order."""
        if self._by_line is None:
            out: dict = {}
            for p in self._points:
                key = self.ctx.line_key(p.i)
                if key is not None:
                    out.setdefault((key.trace_path, key.line), []).append(p)
            self._by_line = out
        return self._by_line

    def by_group(self) -> dict:
        """Context.line_id's group -> the calls in it, in order."""
        if self._by_group is None:
            ctx = self.ctx
            m = ctx.model
            pts = self._points
            if m.has_call_from:  # line_id reads the event, not its token
                groups = [ctx.line_id(p.i) for p in pts]
            else:  # one group per line token: asked of its first call, as the calls come
                tokens = m.passes.take(ctx.line_tokens(), array("i", [p.i for p in pts]), NO_LINE)
                first, code = m.passes.codes(tokens)
                groups = list(map([ctx.line_id(pts[k].i) for k in first].__getitem__, code))
            out: dict = {}
            for p, group in zip(pts, groups):
                if group is not None:
                    out.setdefault(group, []).append(p)
            self._by_group = out
        return self._by_group

    def on_line(self, d) -> list:
        """The calls a finding's fix touches: those of the group its location was made for (the
        same with and without the source), else those placed on its line."""
        loc = d.location
        group = self.ctx.group_of(loc)
        if group is not None:
            return self.by_group().get(group, [])
        if not loc.trace_path or not loc.line:
            return []
        return self.by_line().get((loc.trace_path, loc.line), [])

    def points(self):
        return iter(self._points)


def _overridden(base: array, values: dict, slot_of: dict) -> array:
    """``base`` with ``values[k]`` written at ``slot_of[k]`` for each key that has a slot; ``base``
    itself (never written) when there is nothing to write."""
    if not values:
        return base
    out = array("d", base)
    for k, v in values.items():
        j = slot_of.get(k)
        if j is not None:
            out[j] = v
    return out
