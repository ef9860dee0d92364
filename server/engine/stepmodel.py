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
from itertools import accumulate
from dataclasses import dataclass, field
from typing import Optional

from . import kernels

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


@dataclass
class Point:
    i: int  # cpu event index of the call
    ts: float
    end: float
    kind: int
    ops: list  # (gpu index, stream key, duration)
    pre: float = 0.0  # profiled CPU time between the previous call (or the step's start) and this one


@dataclass
class SimStep:
    ts: float
    end: float
    scale: float  # unprofiled / profiled CPU time between calls
    points: list
    cpu_us: float = 0.0  # profiled CPU time between calls (what ``scale`` applies to)
    gpu_us: float = 0.0  # GPU work of its calls
    tail: float = 0.0  # profiled CPU time after the last call


@dataclass
class Change:
    """What a fix changes in the replay (any field may be empty)."""

    keep: dict = field(default_factory=dict)  # cpu index -> share of the CPU time before it kept
    drop: set = field(default_factory=set)  # calls that no longer happen (their GPU work neither)
    dur: dict = field(default_factory=dict)  # gpu index -> its new duration
    nonblock: set = field(default_factory=set)  # calls that no longer wait for the GPU
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
        self._by_line: Optional[dict] = None
        self._by_group: Optional[dict] = None
        self.latency = 0.0
        if not m.steps or not a.step_gpu:
            return
        cost = EVENT_COST_US[bool(m.with_stack)]
        msteps = m.steps[:MAX_STEPS]
        starts = [s.ts for s in msteps]
        per: list[list[Point]] = [[] for _ in msteps]
        if m.count(LAUNCH_APIS | SYNC_APIS) > MAX_POINTS:
            return
        # the calls of the replayed steps (the loop below keeps those inside a step)
        idx = m.indices_during(LAUNCH_APIS | SYNC_APIS, starts[0], max(s.end for s in msteps))
        cpu, gpu, spans = m.cpu, m.gpu, m.gpu_spans()
        ends = [s.end for s in msteps]
        off, launched = m._launched  # the GPU events of each call (gpu_of_launch)
        for i in idx:
            e = cpu[i]
            ts = e.ts
            k = bisect.bisect_right(starts, ts) - 1
            if k < 0 or ts > ends[k]:
                continue
            end = ts + e.dur
            if e.name in SYNC_APIS:
                per[k].append(Point(i, ts, end, SYNC, []))
                continue
            ops, last = [], None  # last: when the call's last GPU event ends
            for g in launched[off[i] : off[i + 1]]:
                ge = gpu[g]
                ops.append((g, (ge.pid, ge.tid), ge.dur))
                if last is None or spans[g][1] > last:
                    last = spans[g][1]
            blocking = e.name in kernels.BLOCKING_COPIES or (
                last is not None and end >= last - BLOCK_SLACK_US
            )
            kind = BLOCKING if blocking else QUEUED if e.dur > QUEUE_WAIT_US else NONBLOCKING
            per[k].append(Point(i, ts, end, kind, ops))
        lats = sorted(
            spans[g][0] - p.ts for pts in per for p in pts for g, _, _ in p.ops if spans[g][0] >= p.ts
        )
        # launch to start on an idle stream: the low quartile of what the trace shows, at most LAUNCH_LATENCY_MAX_US
        self.latency = min(lats[len(lats) // 4], LAUNCH_LATENCY_MAX_US) if lats else 0.0
        threads = list(m.tindex.starts.values())
        for s, pts in zip(msteps, per):
            pts.sort(key=lambda p: p.ts)
            cpu_us, anchor = 0.0, s.ts
            for p in pts:
                p.pre = max(0.0, p.ts - anchor)
                cpu_us += p.pre
                anchor = p.end if self._waits(p) else p.ts
            tail = max(0.0, s.end - anchor)
            cpu_us += tail
            events = sum(bisect.bisect_right(t, s.end) - bisect.bisect_left(t, s.ts) for t in threads)
            unprof = max(cpu_us * MIN_SCALE, cpu_us - events * cost)
            self.steps.append(
                SimStep(
                    s.ts,
                    s.end,
                    unprof / cpu_us if cpu_us > 0 else 1.0,
                    pts,
                    cpu_us,
                    sum(d for p in pts for _, _, d in p.ops),
                    tail,
                )
            )
        self._columns()
        self.at = {p.i: (p, st) for st in self.steps for p in st.points}
        self.gpu_at = {g: p.i for st in self.steps for p in st.points for g, _, _ in p.ops}
        self.base = self.run(Change())
        n = sum(st.cpu_us for st in self.steps)
        self.mean_scale = sum(st.cpu_us * st.scale for st in self.steps) / n if n > 0 else 1.0

    @staticmethod
    def _waits(p: Point) -> bool:
        """Whether the call's own duration is waiting rather than dispatch."""
        return p.kind != NONBLOCKING

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

    def _columns(self) -> None:
        """The steps' calls as the replay pass reads them: one row per call, the steps' rows one
        after another, each call's GPU ops (stream id, duration) in one flat list."""
        rows = [p for st in self.steps for p in st.points]
        ops = [op for p in rows for op in p.ops]
        streams: dict = {}
        self._pre = array("d", [p.pre for p in rows])
        self._kind = bytes([p.kind for p in rows])
        self._row_scale = array("d", [st.scale for st in self.steps for _ in st.points])
        self._op_off = array("i", accumulate((len(p.ops) for p in rows), initial=0))
        self._op_stream = array("i", [streams.setdefault(s, len(streams)) for _, s, _ in ops])
        self._op_dur = array("d", [d for _, _, d in ops])
        self._step_rows = array("i", accumulate((len(st.points) for st in self.steps), initial=0))
        self._row_of = {p.i: r for r, p in enumerate(rows)}  # cpu index of a call -> its row
        self._op_of = {g: o for o, (g, _, _) in enumerate(ops)}  # gpu index -> its op
        self._tail = array("d", [st.tail for st in self.steps])
        self._ones = array("d", [1.0]) * len(rows)
        self._none = bytes(len(rows))

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
        for i in ch.nonblock:
            p, _ = self.at.get(i, (None, None))
            if p is not None and p.kind in (SYNC, BLOCKING):
                cpu += p.end - p.ts
        row_of, pre, scale = self._row_of, self._pre, self._row_scale
        for i, k in ch.keep.items():
            r = row_of.get(i)
            if r is not None:
                cpu += pre[r] * scale[r] * (1.0 - k)
        for i in ch.drop:
            p, _ = self.at.get(i, (None, None))
            if p is not None:
                gpu += sum(d for _, _, d in p.ops)
        op_of, op_dur, gpu_at = self._op_of, self._op_dur, self.gpu_at
        for g, d2 in ch.dur.items():
            o = op_of.get(g)
            if o is not None and gpu_at[g] not in ch.drop:
                gpu += op_dur[o] - d2
        n = len(self.steps) or 1
        return cpu / n + ch.cpu_cut_us, gpu / n + ch.gpu_cut_us

    # ---- selecting what a finding's fix touches -----------------------------------------------
    def by_line(self) -> dict:
        """(trace path, line) -> the calls placed on that user line, in order."""
        if self._by_line is None:
            out: dict = {}
            for st in self.steps:
                for p in st.points:
                    key = self.ctx.line_key(p.i)
                    if key is not None:
                        out.setdefault((key.trace_path, key.line), []).append(p)
            self._by_line = out
        return self._by_line

    def by_group(self) -> dict:
        """Context.line_id's group -> the calls in it, in order."""
        if self._by_group is None:
            out: dict = {}
            for st in self.steps:
                for p in st.points:
                    group = self.ctx.line_id(p.i)
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
        for st in self.steps:
            yield from st.points


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
