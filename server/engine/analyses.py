"""Whole-trace analyses shared by the rules: GPU busy time, totals, steps, kernel classes.

All times are microseconds, as the trace writes them.
"""

from __future__ import annotations

import bisect
import operator
import sys
from array import array
from dataclasses import dataclass, field
from typing import Callable

import msgspec

from . import kernels, passes
from .model import TraceModel
from .passes import COMPLEMENT
from .windows import setup_intervals


Spans = passes.Spans  # (start, end) pairs in one float64 column: the unions below


def _as_spans(intervals) -> Spans:
    """A Spans as it is; (start, end) pairs (the job's per-rank lists) as one."""
    return intervals if isinstance(intervals, Spans) else Spans.of(intervals)


def merge(intervals, run: passes.Implementation = passes.REFERENCE) -> Spans:
    """Union of intervals (a Spans, or (start, end) pairs), sorted (the ``merge`` pass; ``run``:
    the model's passes)."""
    return Spans(run.merge(_as_spans(intervals).flat, None), run)


def index_of(merged):
    """starts, ends and prefix sums of merged spans (the span_index pass), built once per ``Spans``:
    what covered reads, and idle_waits (gpu-contention)."""
    merged = _as_spans(merged)
    hit = merged.prefix
    if hit is None:
        hit = merged.prefix = (merged.run or passes.REFERENCE).span_index(merged.flat)
    return hit


def covered(merged, lo: float, hi: float) -> float:
    """How much of [lo, hi] the merged intervals cover: two bisections on a prefix sum, so the
    rules can ask it once per event without a quadratic scan."""
    if not merged:  # (covered_in checks the range)
        return 0.0
    starts, ends, pre = index_of(merged)
    return passes.covered_in(starts, ends, pre, lo, hi)


def gaps(merged, lo: float, hi: float) -> list[tuple[float, float]]:
    """The holes in [lo, hi] that the merged intervals leave (the ``gaps`` pass of the passes
    that made them)."""
    merged = _as_spans(merged)
    return (merged.run or passes.REFERENCE).gaps(merged.flat, lo, hi)


class GpuKeys(msgspec.Struct):
    """The GPU events by the key they are classified by (the gpu_keys pass): the distinct keys
    (name, category, the op above the launch call), each event's number into them and each key's
    kernel class. A question about the events is asked once per key, not once per event."""

    keys: list[tuple]
    codes: array  # per GPU event, its key's place in keys
    classes: list[str]  # per key, its class

    def mask(self, flag: Callable[[tuple, str], bool]) -> bytes:
        """1 for the GPU events whose key (and its class) ``flag`` holds for."""
        table = bytes(bool(flag(k, c)) for k, c in zip(self.keys, self.classes))
        codes = self.codes
        if len(table) <= 256:  # each code fits its low byte: one translation, at C speed
            low = 0 if sys.byteorder == "little" else codes.itemsize - 1
            return codes.tobytes()[low :: codes.itemsize].translate(table.ljust(256, b"\0"))
        return bytes(map(table.__getitem__, codes))


@dataclass
class Analysis:
    window: tuple[float, float]
    busy: Spans  # merged GPU busy intervals (all streams; kernels, copies, memsets)
    busy_us: float  # of the window, the time the GPU ran kernels other than collectives
    cpu_total_us: float
    cuda_total_us: float
    gpu_class: list[str]
    launches: int
    step_busy: list[float] = field(default_factory=list)
    comm: Spans = field(default_factory=Spans)
    comm_us: float = 0.0
    cpu_comm: list[int] = field(default_factory=list)  # CPU-side collectives (gloo ...), cpu indices
    cpu_comm_us: float = 0.0  # their union inside the window
    step_gpu: list["StepGpu"] = field(default_factory=list)
    setup: Spans = field(default_factory=Spans)  # one-time set-up, merged
    setup_us: float = 0.0  # of it, inside the active window
    # the steady state: the window less the set-up, and of it the time kernels (no collectives),
    # any GPU work and the copy engines ran; the steps that hold no set-up (``steady_steps``)
    steady_us: float = 0.0
    steady_busy_us: float = 0.0
    steady_work_us: float = 0.0
    steady_copy_us: float = 0.0
    steady_steps: list[int] = field(default_factory=list)
    # DMA copies and memsets (the copy engines), merged; of the window, the time one ran, and the
    # time the GPU ran anything but collectives (kernels or copies)
    copies: Spans = field(default_factory=Spans)
    copy_us: float = 0.0
    work_us: float = 0.0
    step_copy: list[float] = field(default_factory=list)  # per step, copy-engine time inside its range
    keys: GpuKeys = field(default_factory=lambda: GpuKeys([], array("i"), []))  # (the GPU events')
    gpu_durs: array = field(default_factory=lambda: array("d"))  # each GPU event's duration
    # GPU time per kernel class, the classes in order of first event (each summed in event order)
    class_us: dict[str, float] = field(default_factory=dict)

    @property
    def copy_pct(self) -> float | None:
        return 100.0 * self.copy_us / self.window_us if self.window_us > 0 else None

    @property
    def work_pct(self) -> float | None:
        """The window's share in which the GPU ran any work of its own, on the SMs or the copy
        engines (collectives left out)."""
        return 100.0 * self.work_us / self.window_us if self.window_us > 0 else None

    @property
    def step_us(self) -> list[float]:
        """Each step's length as the program sees it: the CPU's ProfilerStep range, or the GPU's
        span of the step's work when the GPU bounds it (the CPU only queued it and ran ahead)."""
        return [g.step_us for g in self.step_gpu]

    @property
    def window_us(self) -> float:
        return self.window[1] - self.window[0]

    @property
    def busy_pct(self) -> float | None:
        if self.window_us <= 0:
            return None
        return 100.0 * self.busy_us / self.window_us

    def occupied(self) -> Spans:
        """The GPU's busy, collective and set-up stretches, merged (made once: a merged list
        alone is its own merge, the usual case without collectives or set-up)."""
        got = self.__dict__.get("_occupied")
        if got is None:
            parts = [x for x in (self.busy, self.comm, self.setup) if x]
            run = (parts[0].run if parts else None) or passes.REFERENCE
            got = self._occupied = parts[0] if len(parts) == 1 else merge(sum(parts, Spans()), run)
        return got

    def steady_pct(self, us: float) -> float:
        """``us`` as a share of the steady state (the window less its one-time set-up)."""
        return 100.0 * us / self.steady_us if self.steady_us > 0 else 0.0


def analyze(m: TraceModel) -> Analysis:
    keys = _classes(m)
    gpu_class = list(map(keys.classes.__getitem__, keys.codes))
    # Collectives spin while they wait for a peer: their time is not the GPU computing, so the
    # busy share that decides the verdict leaves them out (they are reported on their own). So do
    # DMA copies and memsets, which run on the copy engines while the SMs wait (HTA's compute share
    # counts kernels alone too): they are counted on their own (``copies``, ``copy_us``), and
    # ``busy``/``work_us`` hold both, for the rules that ask whether the GPU had work queued at a
    # moment and for the verdict (an idle GPU is idle on every engine; transfer-bound).
    spans, run = m.gpu_spans(), m.passes
    kinds = comm_of, kernel, copy = _kinds(keys)
    # the distinct launch calls, counted by the codes pass (a set of the column cost ~85 ns an event)
    launchers = run.codes(m.launcher)[0]
    busy = Spans(run.merge(spans.flat, comm_of.translate(COMPLEMENT)), run)
    comm = Spans(run.merge(spans.flat, comm_of), run)
    compute = Spans(run.merge(spans.flat, kernel), run)
    lo, hi = active_window(m, busy or comm)
    durs = run.durations(m.gpu)  # one column: the events' dur read at C speed
    a = Analysis(
        window=(lo, hi),
        busy=busy,
        busy_us=covered(compute, lo, hi),
        cpu_total_us=_cpu_total(m),
        cuda_total_us=sum(durs),
        gpu_class=gpu_class,
        launches=len(launchers) - (-1 in m.launcher),  # a launcher is a cpu index, or -1
        keys=keys,
        class_us=_class_us(run, keys, durs),
        gpu_durs=durs,
    )
    a.comm = comm
    a.comm_us = covered(comm, lo, hi)
    a.cpu_comm = cpu_collectives(m)
    a.cpu_comm_us = covered(
        merge([(m.cpu[i].ts, m.cpu[i].ts + m.cpu[i].dur) for i in a.cpu_comm], run), lo, hi
    )
    a.step_busy = [covered(compute, s.ts, s.end) for s in m.steps]
    a.copies = Spans(run.merge(spans.flat, copy), run)
    a.copy_us = covered(a.copies, lo, hi)
    a.work_us = covered(busy, lo, hi)
    a.step_copy = [covered(a.copies, s.ts, s.end) for s in m.steps]
    a.step_gpu = step_gpu(m, kinds)
    setup = merge([(x, y) for x, y, _ in setup_intervals(m)], run)
    setup_us = covered(setup, lo, hi)
    if setup_us >= SETUP_MIN_US and setup_us >= SETUP_MIN_SHARE * (hi - lo):
        a.setup, a.setup_us = setup, setup_us
    _steady(m, a, compute)
    return a


def _steady(m: TraceModel, a: Analysis, compute: Spans) -> None:
    """The steady state's shares: what the GPU did outside the set-up stretches, measured there
    (the GPU may work during set-up: the autotuner benchmarks its candidates), and the steps that
    hold none of it."""
    lo, hi = a.window
    rest = gaps(a.setup, lo, hi)
    a.steady_us = sum(y - x for x, y in rest)
    a.steady_busy_us = sum(covered(compute, x, y) for x, y in rest)
    a.steady_work_us = sum(covered(a.busy, x, y) for x, y in rest)
    a.steady_copy_us = sum(covered(a.copies, x, y) for x, y in rest)
    a.steady_steps = [k for k, s in enumerate(m.steps) if covered(a.setup, s.ts, s.end) <= 0]


COPY_CATS = ("gpu_memcpy", "gpu_memset")  # the copy engines' work (DMA), not the SMs'


class StepGpu(msgspec.Struct):
    """One step on the GPU timeline: the work its CPU range launched."""

    cpu_us: float  # the ProfilerStep range
    work_us: float  # GPU time of that work (its kernels' union)
    span_us: float  # first start to last end of that work
    wait_us: float = 0.0  # the main thread blocked in sync calls inside the range
    events: int = 0  # events the profiler recorded on the main thread inside the range
    copy_us: float = 0.0  # copy-engine time of that work (its copies' and memsets' union)

    @property
    def bound(self) -> str:
        """``gpu`` when the step's own GPU work, on the SMs or on the copy engines, fills 80% of its
        CPU range or outlasts it (the CPU only queued it, or waited for it): the compute-bound
        bar, per step."""
        w = max(self.work_us, self.copy_us)
        return "gpu" if w >= COMPUTE_BUSY_PCT / 100 * self.cpu_us and w > 0 else "cpu"

    @property
    def step_us(self) -> float:
        return max(self.cpu_us, self.span_us) if self.bound == "gpu" else self.cpu_us

    def unprofiled_cpu_us(self, inflation: float) -> float:
        """The CPU range without the profiler's slowdown: dispatch shrinks by ``inflation``
        (``profiler_inflation``), the time blocked waiting on the GPU does not, and the profiler
        cannot have added more than it costs per event it recorded (``MAX_US_PER_EVENT``): a step
        of few, long events (a big model, a data loader on the main thread) barely shrinks."""
        scaled = self.wait_us + max(0.0, self.cpu_us - self.wait_us) / inflation
        return max(scaled, self.wait_us, self.cpu_us - self.events * MAX_US_PER_EVENT)


def step_gpu(m: TraceModel, kinds: tuple[bytes, bytes, bytes]) -> list[StepGpu]:
    """Per step, the GPU work launched from inside its CPU range (by the launch call's start):
    its kernels less collectives, as the busy share counts them (a collective spins while it
    waits for a peer), and apart from them its copies and memsets (the copy engines). The span
    covers both.

    When the CPU runs far ahead (a long closing sync), ProfilerStep ranges measure how fast the
    CPU queues work, not how long the GPU needs for it: a step is as long as the longer of the two.
    ``kinds``: the GPU events' masks (``_kinds``).
    """
    if not m.steps:
        return []
    starts = [s.ts for s in m.steps]
    ends = [s.end for s in m.steps]
    cpu, run = m.cpu, m.passes
    # each launched event's step, by its launch call's start (-1: none), and which of them count
    step = run.step_of(m.launcher, m.cpu_starts(), array("d", starts), array("d", ends))
    _, kernel, copy = kinds
    flat = m.gpu_spans().flat
    per = run.merge_groups(flat, step, kernel, len(m.steps))
    per_copy = run.merge_groups(flat, step, copy, len(m.steps))
    # the union of both a step, as one pass over the events: a union of unions is the union (one
    # call, where a merge of each step's two lists made 354 at 1 GB: 0.05 s)
    per_both = run.merge_groups(flat, step, passes.mask_or(kernel, copy), len(m.steps))
    wait = [0.0] * len(m.steps)
    for i in m.indices(SYNC_CALLS):
        e = cpu[i]
        k = bisect.bisect_right(starts, e.ts) - 1
        if k >= 0 and e.ts <= m.steps[k].end and m.thread[i] == m.main_thread:
            wait[k] += min(e.dur, m.steps[k].end - e.ts)
    main = m.tindex.starts.get(m.main_thread, ()) if m.main_thread is not None else ()
    out = []
    for s, merged, copies, both, w in zip(m.steps, per, per_copy, per_both, wait):
        n = bisect.bisect_right(main, s.end) - bisect.bisect_left(main, s.ts)
        out.append(
            StepGpu(
                cpu_us=s.dur,
                work_us=_length(merged),
                span_us=both[-1] - both[0] if both else 0.0,
                wait_us=w,
                events=n,
                copy_us=_length(copies),
            )
        )
    return out


def _length(flat: array) -> float:
    """The spans' lengths (a flat column, start and end alternating) added in order: each end less
    its start at C speed (no tuple or generator step a span)."""
    return sum(map(operator.sub, flat[1::2], flat[::2]))


CPU_COLLECTIVE_PREFIXES = ("gloo:", "mpi:", "ucc:")


def cpu_collectives(m: TraceModel) -> list[int]:
    """CPU-side collectives (gloo, MPI, UCC: ``gloo:all_reduce`` ...), outermost ones, in time order.
    Like an NCCL kernel, their span is wait plus transfer: the call returns when every peer has
    contributed."""
    out = []
    for i in (i for pre in CPU_COLLECTIVE_PREFIXES for i in m.named(pre)):
        if not any(m.cpu[x].name.startswith(CPU_COLLECTIVE_PREFIXES) for x in m.ancestors(i)):
            out.append(i)
    return sorted(out, key=lambda i: m.cpu[i].ts)


def active_window(m: TraceModel, busy: Spans) -> tuple[float, float]:
    """The steps' span, starting at the GPU's first event and ending after the work they issued.

    The lead-in before the first GPU event is the profiler's CPU->GPU lane offset plus the first
    dispatch (``profiler-artifact`` reports it); GPU work still running when the last step
    returns belongs to the steps, so the window stretches to it.
    """
    lo, hi = m.window()
    if busy:
        hi = max(hi, busy[-1][1])
        if m.steps:
            # also when the GPU starts after the last step returns: it was still draining work
            # queued before the window (the schedule's warm-up steps), which the trace does not show
            lo = max(lo, busy[0][0])
    return lo, hi


def _cpu_total(m: TraceModel) -> float:
    """As ``Self CPU time total``: the span of non-python events, without double-counting nesting."""
    return m.passes.cpu_total(m.cpu, m.parent, m.durs, m.cat_mask("python_function"))


def _classes(m: TraceModel) -> GpuKeys:
    """The GPU events' keys and their kernel classes, classified once per distinct (name,
    category, launching op)."""
    keys, codes = m.passes.gpu_keys(m.gpu, m.launcher, m.ops_above(), m.cpu)
    return GpuKeys(keys, codes, [kernels.classify(*key) for key in keys])


def _class_us(run: passes.Implementation, keys: GpuKeys, durs: array) -> dict[str, float]:
    """GPU time per kernel class, the classes in order of first event, each class's durations
    added one after another in event order (as a loop over the events adds them; ``sum`` of
    floats compensates from Python 3.12 on, which would change the last bits): the scatter_sums
    pass, each key's events onto its class."""
    classes = list(dict.fromkeys(keys.classes))
    place = {c: k for k, c in enumerate(classes)}
    onto = array("i", [place[c] for c in keys.classes])  # per key its class: one target a code
    off = passes.arange(run, len(keys.keys) + 1)  # 0, 1, ... len(keys)
    sums = run.scatter_sums(passes.arange(run, len(durs)), durs, keys.codes, off, onto, len(classes))
    return dict(zip(classes, sums))


_COPY_CATS = frozenset(COPY_CATS)


def _kinds(keys: GpuKeys) -> tuple[bytes, bytes, bytes]:
    """Masks over the GPU events: the collectives, the kernels and the copies or memsets (these
    two without collectives), asked once per key."""
    comm = keys.mask(lambda k, c: c == kernels.COMMUNICATION)
    kernel = keys.mask(lambda k, c: k[1] == "kernel" and c != kernels.COMMUNICATION)
    copy = keys.mask(lambda k, c: k[1] in _COPY_CATS and c != kernels.COMMUNICATION)
    return comm, kernel, copy


def verdict(m: TraceModel, a: Analysis) -> str:
    """overhead-bound / compute-bound / transfer-bound / balanced / set-up / cpu-only, from the GPU's
    busy shares of the steady state: the window less its one-time set-up (windows.setup_intervals),
    where the GPU idles while the host compiles or loads.

    When the copy engines run host<->device copies (or memsets) for 80% of it and longer than the
    SMs run kernels, the transfers bound the step: transfer-bound (a copy benchmark of 154 MB
    tensors holds them 99% of the time with no kernel at all). Below 30% of GPU work, on any
    engine, the GPU waits most of the time for the CPU to hand it work; at 80% and above of kernel
    time the GPU is the bottleneck and CPU savings cannot shorten the step. Between, the steps
    decide: when the GPU's own work fills 80% of most steps once the profiler's CPU slowdown is
    taken out (``StepGpu.unprofiled_cpu_us``), the GPU bounds the program unprofiled and it is
    compute-bound (a compiled 4096² GEMM: 0.41 ms profiled CPU steps, 0.18 ms of GPU work, 216 µs
    a step unprofiled); otherwise "balanced".

    "set-up" when there is no steady state to judge: set-up was found and no step is free of it
    (the window is one cold call, as a single profiled forward is). The rest of a cold call is
    cold too, in ways the trace does not always name (a host stall that records nothing before a
    TorchScript function's first call, the untraced host time of a CUDA-only recording, a caching
    allocator growing from empty): such a stretch only ever makes the GPU look idler, so an idle
    GPU there says nothing of per-step dispatch, while a GPU busy 80% of it still bounds the call.
    """
    if not m.gpu:
        return "cpu-only"
    if a.busy_pct is None:
        return "no-steps"
    if transfer_bound(a):
        return "transfer-bound"
    busy, work = a.steady_pct(a.steady_busy_us), a.steady_pct(a.steady_work_us)
    if a.setup_us > 0 and not a.steady_steps:
        return "compute-bound" if busy >= COMPUTE_BUSY_PCT else "set-up"
    if work < OVERHEAD_BUSY_PCT:
        return "overhead-bound"
    if busy >= COMPUTE_BUSY_PCT:
        return "compute-bound"
    f = profiler_inflation(m)
    steps = [a.step_gpu[k] for k in a.steady_steps if k < len(a.step_gpu)]
    bound = sum(1 for g in steps if g.work_us >= COMPUTE_BUSY_PCT / 100 * g.unprofiled_cpu_us(f))
    if steps and bound * 2 > len(steps):
        return "compute-bound"
    return "balanced"


def transfer_bound(a: Analysis) -> bool:
    """The copy engines hold 80% of the steady state (the compute-bound bar) and more of it than
    kernels."""
    cp = a.steady_pct(a.steady_copy_us)
    return a.steady_us > 0 and cp >= COMPUTE_BUSY_PCT and cp > a.steady_pct(a.steady_busy_us)


# Calls that block the CPU until the GPU (a stream, an event) catches up.
SYNC_CALLS = kernels.apis(kernels.SYNC)  # CUDA runtime, driver and HIP

# How much the profiler slows the CPU side. Measured on H200 (MANIFEST): a tuned TinyGPT step takes
# 11.9-12.9 ms unprofiled and, under the profiler, 19-26 ms (CPU+CUDA activities), 23-29 ms
# (+record_shapes), 24-34 ms (+with_stack), 30-31 ms (+profile_memory). The factors are the low
# ends of those ratios ("at least"); waits on the GPU are not inflated.
INFLATION = [("record_shapes", 1.9), ("with_stack", 2.0), ("profile_memory", 2.4)]
BASE_INFLATION = 1.5
# What one recorded event costs, at most, in the same measurements (all options on): the typical
# tuned TinyGPT step, 18.6-20.9 ms profiled vs 11.9-12.9 ms unprofiled over its 2,325 main-thread
# events, is ~3 us an event; the seed's compiled 4096^2 GEMM, 409-421 us vs 216 us over 167, ~1.2 us.
# The cost is per event, not per second: a factor alone would shrink a big model's 150 ms step
# (3,000 events) as much as a tiny loop's.
MAX_US_PER_EVENT = 3.0


def profiler_inflation(m: TraceModel) -> float:
    """The factor by which this trace's profiler options at least slowed its CPU side."""
    return max([f for n, f in INFLATION if getattr(m, n)], default=BASE_INFLATION)


OVERHEAD_BUSY_PCT = 30.0
# One-time set-up counts (a finding, and out of the verdict) from this much of the active window:
# a first call a few ms slower than the rest in a long window is noise, a context creation or a
# compilation is most of it (0.3-10 s in the cold wild traces, 0-4% in the warmed-up ones).
SETUP_MIN_US = 5000.0
SETUP_MIN_SHARE = 0.10
COMPUTE_BUSY_PCT = 80.0


# A gap is a stage of host work (building a batch with numpy, a sleep, I/O) when one op-free
# stretch of it is this share of its step: the overhead between ops comes in many small pieces.
HOST_STEP_SHARE = 0.25


def host_stages(m: TraceModel, a: Analysis) -> list[tuple[float, float]]:
    """The GPU's idle holes inside the steps that are a stage of host work: each hole cut where
    the CPU next starts an op (on any thread; dispatching, op after op, is overhead-bound's), kept
    when that stretch alone is a quarter of its step and the main thread runs Python code that is
    not torch's own meanwhile (torch's dispatcher, the profiler's step and Dynamo's wrappers are
    the overhead between ops, which comes in many small pieces). One-time set-up is no stage: its
    stretches count as covered (``one-time-setup``'s)."""
    cached = a.__dict__.get("_host_stages")
    if cached is not None:
        return cached
    out: list[tuple[float, float]] = []
    if m.steps:
        lo, hi = a.window
        occupied = a.occupied()
        run = getattr(occupied, "run", None) or passes.REFERENCE
        starts, ends = array("d", [s.ts for s in m.steps]), array("d", [s.end for s in m.steps])
        # only a hole this long can hold such a stretch
        long = run.long_gaps(occupied.flat, lo, min(hi, m.steps[-1].end), starts, ends, HOST_STEP_SHARE)
        for x, y, k in long:
            step = m.steps[k]
            nxt = _next_op_start(m, x)
            y = min(y, nxt) if nxt is not None else y
            if y - x < HOST_STEP_SHARE * (step.end - step.ts):
                continue
            if _python_of(m, m.tindex.innermost(m.main_thread, (x + y) / 2)) not in (None, "torch"):
                out.append((x, y))
    a.__dict__["_host_stages"] = out
    return out


def _next_op_start(m, t: float):
    """The first start of a cpu_op after ``t`` on any thread, None when none: per thread, its
    first event after ``t`` (its events sit in start order) and from there the first op, found in
    the op mask (a byte search, not a walk over the events)."""
    ops = m.cat_mask("cpu_op")
    best = None
    for key, starts in m.tindex.starts.items():
        base = m.tindex.base[key]
        k = ops.find(1, base + bisect.bisect_right(starts, t), base + len(starts))
        if k >= 0 and (best is None or starts[k - base] < best):
            best = starts[k - base]
    return best


def _python_of(m, i: int):
    """Whose Python runs at event i: None when it is no Python (an op, a runtime call, nothing),
    "torch" when torch's own code called it (a frame of torch's below the user's frame), else
    "other" (the user's code, numpy, another library)."""
    if i < 0 or m.cpu[i].cat != "python_function":
        return None
    seen = None
    while i >= 0 and m.cpu[i].cat == "python_function":
        fr = m.frames.get(i)
        if fr is not None and fr.path:
            if fr.path.replace("\\", "/").split("site-packages/")[-1].startswith("torch/"):
                return "torch"
            if fr.user:
                return "other"
            seen = "other"
        i = m.parent[i]
    return seen
