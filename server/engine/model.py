"""The trace model: typed events plus the indexes the analyses need, built in linear passes.

Indexes (all positions are into ``cpu`` or ``gpu``):
- ``cpu``: every complete CPU-side event (ops, annotations, python frames, runtime/driver calls),
  grouped by thread and sorted so that a parent always precedes its children; ``parent[i]`` is the
  innermost enclosing event on the same thread (-1 at the top).
- ``frame_of[i]``: the innermost *user* python frame enclosing event i (-1 when none).
- ``gpu``: kernels, memcpys and memsets sorted by start; ``launcher[g]`` is the runtime/driver call
  that launched GPU event g (via ``correlation``), -1 when the launch was not captured.
- ``fwd_of[i]``: for an event on the autograd thread, the forward op it is the backward of (via
  ``fwdbwd`` flows, else sequence numbers), -1 otherwise.
- ``steps``: ``ProfilerStep#N`` windows; ``memory``: ``[memory]`` instants with their enclosing event.
"""

from __future__ import annotations

import bisect
from array import array
from itertools import accumulate, compress
import re
import sys
from dataclasses import dataclass, field
from typing import Optional

import msgspec

from . import passes
from .loader import CPU_CATS, GPU_CATS, Event, TraceDoc, flag  # the loader keeps what the model reads
from .passes import COMPLEMENT, Spans, mask_or, negative
from .passes import int64 as _int64

# A child may end this much after its parent and still nest in it: Kineto rounds to ns.
NEST_SLACK_US = 0.01
# The categories the model's code column tells apart (TraceModel.cat_codes, cat_mask): the CPU ones.
CPU_CAT_CODES = tuple(sorted(CPU_CATS))

from .loader import LAUNCH_CATS  # noqa: E402  (model.LAUNCH_CATS is read across the engine)


def cat_table(cats) -> bytes:
    """The translation of the category code column (``TraceModel.cat_codes``) to 1 for the events
    of these categories, 0 for the others."""
    return bytes(int(0 < k <= len(CPU_CAT_CODES) and CPU_CAT_CODES[k - 1] in cats) for k in range(256))


LAUNCH_CODES = cat_table(LAUNCH_CATS)  # the launch calls (cuda_runtime, cuda_driver: CPU categories)

# What each producer's category means, as the category the model reads. Kineto writes the same
# names for CUDA and ROCm; the 2021-era profiler wrote "Operator", "Runtime", "Kernel", "Memcpy" and
# "Memset". None: the profiler's own spans and markers (its run, its buffer requests, Kineto's sync
# markers on the GPU lane), read by no analysis and not GPU work.
ROLES = {
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "user_annotation": "user_annotation",
    "python_function": "python_function",
    "cuda_runtime": "cuda_runtime",
    "Runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver",
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy",
    "Memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset",
    "Memset": "gpu_memset",
    "gpu_user_annotation": "gpu_user_annotation",
    "Trace": None,
    "overhead": None,
    "cuda_sync": None,
}
# Categories that hold record_function labels among the ops: there a name with '#'
# (``ProfilerStep#3``, ``Optimizer.step#SGD.step``, ``enumerate(DataLoader)#...``) is a label, as the
# later profiler files it under user_annotation; ops (``aten::mm``, ``AddmmBackward``) never have one.
LABELS_AMONG_OPS = frozenset({"Operator"})

_FRAME_RE = re.compile(r"^(.*)\((\d+)\): (.*)$")
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


# Top-level packages whose frames are never "user code" even when the trace strips site-packages.
_LIBRARY_ROOTS = frozenset(sys.stdlib_module_names) | {
    "torch",
    "torchvision",
    "torchaudio",
    "torchtext",
    "functorch",
    "triton",
    "numpy",
    "transformers",
    "accelerate",
    "deepspeed",
    "apex",
    "lightning",
    "pytorch_lightning",
    "tqdm",
    "typing_extensions",
    "importlib_metadata",
    "_pytest",
    "pytest",
    "pluggy",
    "IPython",
    "ipykernel",
    "tornado",
    "asyncio",
}


class Frame(msgspec.Struct, frozen=True):
    path: str
    line: int
    function: str
    user: bool


_frame_cache: dict[str, Optional[Frame]] = {}


def parse_frame(name: str) -> Optional[Frame]:
    """``file.py(LINE): func`` -> Frame; None for built-ins and module markers (memoised: a trace
    repeats the same few thousand frame names hundreds of thousands of times)."""
    try:
        return _frame_cache[name]
    except KeyError:
        pass
    fr = _parse_frame(name)
    if len(_frame_cache) >= 200_000:  # bounded: the daemon lives through many traces
        _frame_cache.clear()
    _frame_cache[name] = fr
    return fr


def _parse_frame(name: str) -> Optional[Frame]:
    if name.startswith("<") or name.startswith("nn.Module"):
        return None
    m = _FRAME_RE.match(name)
    if not m:
        return None
    path, line, func = m.group(1), int(m.group(2)), m.group(3)
    return Frame(path, line, func, is_user_path(path))


def is_user_path(path: str) -> bool:
    if not path or path.startswith("<"):
        return False
    p = path.replace("\\", "/")
    if "site-packages/" in p or "dist-packages/" in p or "/lib/python" in p or "/lib64/python" in p:
        return False
    if "torchinductor" in p or "/triton/" in p:
        return False  # generated code (Inductor's output cache), not the user's
    if p.endswith("/record_hook/sitecustomize.py"):
        return False  # profd-client record's start-up hook: its step wrappers call the user's code
    if p.startswith("/"):
        return True  # an absolute path outside any python lib dir: the user's own file
    root = p.split("/", 1)[0]
    if root.endswith(".py"):
        root = root[:-3]
    return root not in _LIBRARY_ROOTS


class Step(msgspec.Struct):
    name: str
    number: int
    ts: float
    end: float

    @property
    def dur(self) -> float:
        return self.end - self.ts


class MemoryEvent(msgspec.Struct):  # one per allocator sample: hundreds of thousands in a large trace
    ts: float
    nbytes: int
    total_allocated: int
    total_reserved: int
    device_type: int
    owner: int  # index into cpu of the innermost enclosing event, -1 when none
    thread: tuple


@dataclass
class TraceModel:
    doc: TraceDoc
    cpu: list[Event]
    parent: array  # int32, as every per-event index below
    thread: "ThreadColumn"  # cpu index -> (pid, tid)
    frames: "FrameIndex"  # cpu index of a python_function event -> its parsed frame
    frame_of: array
    gpu: list[Event]
    launcher: array
    steps: list[Step]
    gpu_annotations: list[Event]
    thread_names: dict[tuple, str] = field(default_factory=dict)
    main_thread: Optional[tuple] = None
    t0: float = 0.0
    unread: dict[str, int] = field(default_factory=dict)  # complete events of categories not read: count
    memory_samples: int = 0  # the allocator's samples (``memory``'s length, known before it is made)
    steps_from: str = "ProfilerStep markers"  # how the window was cut into steps (windows.infer_steps)
    # the implementation of every pass this model's events run, all native or all the reference
    passes: passes.Implementation = field(default=passes.REFERENCE, repr=False, compare=False)
    # each cpu event's duration, as one column (build sets it with the other columns)
    durs: array = field(default_factory=lambda: array("d"), repr=False, compare=False)

    # ---- made on first read: a ``--select`` whose rules read neither skips them -----------
    @property
    def fwd_of(self) -> array:
        """Per cpu event the forward op it is the backward of (-1 for none): fwdbwd flows, else
        sequence numbers (``_link_backward``)."""
        got = self.__dict__.get("_fwd_of")
        if got is None:
            run, flows_s, flows_f = self._backward_from
            got = self._fwd_of = _link_backward(
                run,
                self.cpu,
                self.parent,
                self.tindex,
                self.frame_of,
                flows_s,
                flows_f,
                self._by_name,
                self.cat_codes,
            )
            del self._backward_from  # the flows are not needed again
        return got

    @property
    def memory(self) -> "MemoryTable":
        """The allocator's samples, each with the innermost CPU event around it (``_memory``), made
        on first read or as ``start_memory`` started it."""
        got = self.__dict__.get("_memory")
        if got is None:  # not started: read here
            got = _memory(self.passes, self.__dict__.pop("_memory_from"), self.tindex)
        elif type(got) is not MemoryTable:
            got = got.result()
        self._memory = got
        return got

    def start_memory(self) -> None:
        """Read the allocator's samples beside the caller (passes.start_work: three passes that
        read the events without the GIL), where that runs; with none, nothing starts."""
        if "_memory" not in self.__dict__ and self._memory_from:
            uses = ("by_start", "memory_columns", "owners")
            samples = self.__dict__.pop("_memory_from")
            self._memory = passes.start_work(self.passes, uses, _memory, samples, self.tindex)

    # ---- metadata -------------------------------------------------------------------------
    @property
    def wall_start_us(self) -> Optional[float]:
        """When the trace was recorded (µs since the epoch): kineto's event clock plus
        ``baseTimeNanoseconds`` (its offset to the epoch); None when the trace has no offset."""
        try:
            base = float(self.doc.baseTimeNanoseconds) / 1000.0
        except (TypeError, ValueError):
            return None
        return round(base + self.t0, 3) if base == base and abs(base) != float("inf") else None

    @property
    def with_stack(self) -> bool:
        return flag(self.doc.with_stack) or bool(self.frames)

    @property
    def record_shapes(self) -> bool:
        return flag(self.doc.record_shapes)

    @property
    def profile_memory(self) -> bool:
        return flag(self.doc.profile_memory) or self.memory_samples > 0

    @property
    def device(self):
        props = self.doc.deviceProperties or []
        return props[0] if props else None

    @property
    def compute_capability(self) -> Optional[tuple[int, int]]:
        d = self.device
        if d is None or d.computeMajor is None:
            return None
        return (d.computeMajor, d.computeMinor or 0)

    # ---- windows --------------------------------------------------------------------------
    def window(self) -> tuple[float, float]:
        """The active window: first step start to last step end, else the CPU span."""
        if self.steps:
            return self.steps[0].ts, max(s.end for s in self.steps)
        if self.cpu:
            return min(e.ts for e in self.cpu), max(e.ts + e.dur for e in self.cpu)
        if self.gpu:
            return self.gpu[0].ts, max(e.ts + e.dur for e in self.gpu)
        return 0.0, 0.0

    def step_at(self, ts: float) -> Optional[Step]:
        i = bisect.bisect_right(self._step_starts, ts) - 1
        if i >= 0 and ts <= self.steps[i].end:
            return self.steps[i]
        return None

    def __post_init__(self):
        self._step_starts = [s.ts for s in self.steps]

    # ---- navigation ------------------------------------------------------------------------
    def ancestors(self, i: int):
        i = self.parent[i]
        while i >= 0:
            yield i
            i = self.parent[i]

    def enclosing_op(self, i: int) -> int:
        """The nearest enclosing cpu_op of event i (itself excluded), -1 when none."""
        return self.ops_above()[i]

    def ops_above(self) -> array:
        """Per event its nearest enclosing cpu_op (``enclosing_op``), as one column."""
        above = self.__dict__.get("_ops_above")
        if above is None:
            above = self._ops_above = self.passes.nearest(self.parent, self.cat_mask("cpu_op"))
        return above

    def let_go_of_indexes(self) -> None:
        """Let go of the per-event columns made on first read and remade on the next (the nearest
        enclosing op and frame, the category masks): called once the rules have run, which read
        them; the impact replay and the report's parts do not (0.5 MB each at 119,000 events)."""
        for name in ("_ops_above", "_frames_above", "_cat_masks"):
            self.__dict__.pop(name, None)

    def cpu_starts(self) -> array:
        """Each cpu event's start, as one column (made by build; each thread's start column in
        ``tindex.starts`` is a view of its slice)."""
        return self._cpu_starts

    def gpu_spans(self) -> Spans:
        """(start, end) of each GPU event, made once (the analyses' unions and steps read them)."""
        got = self.__dict__.get("_gpu_spans")
        if got is None:
            got = self._gpu_spans = Spans(self.passes.spans(self.gpu), self.passes)
        return got

    def cat_mask(self, *cats: str) -> bytes:
        """1 for the events of one of these categories (made once per set of categories): a
        translation of the code column (nest made it; a cpu event's category is a CPU one)."""
        key = frozenset(cats)
        masks = self.__dict__.setdefault("_cat_masks", {})
        got = masks.get(key)
        if got is None:
            got = masks[key] = self.cat_codes.translate(cat_table(key))
        return got

    def enclosing_frame(self, i: int) -> int:
        """The nearest enclosing python frame (user or library; built-ins are not frames) of
        event i (itself excluded), -1 when none."""
        return self.frames_above()[i]

    def frames_above(self) -> array:
        """Per event its nearest enclosing python frame (``enclosing_frame``), as one column."""
        above = self.__dict__.get("_frames_above")
        if above is None:
            above = self._frames_above = self.passes.nearest(self.parent, self.frames.mask())
        return above

    def outermost_op(self, i: int) -> int:
        """The outermost cpu_op enclosing event i (itself included) below its user frame."""
        best = i if self.cpu[i].cat == "cpu_op" else -1
        for a in self.ancestors(i):
            if self.cpu[a].cat == "python_function":
                break
            if self.cpu[a].cat == "cpu_op":
                best = a
        return best

    def named(self, prefix: str) -> list[int]:
        """cpu indices of events whose name starts with ``prefix``, in order."""
        out = []
        for name, idx in self._by_name.items():
            if name.startswith(prefix):
                out.extend(idx)
        out.sort()
        return out

    def named_groups(self):
        """(name, cpu indices in order) of every non-python event, name by name."""
        return self._by_name.items()

    def names_of(self, cats) -> set[str]:
        """Distinct names of the (non-python) cpu events of these categories."""
        return {n for n, idx in self._by_name.items() if self.cpu[idx[0]].cat in cats}

    def indices(self, names) -> list[int]:
        """cpu indices of events with one of these exact names, in order."""
        out = []
        for n in names:
            out.extend(self._by_name.get(n, ()))
        out.sort()
        return out

    def count(self, names) -> int:
        """How many events have one of these exact names (each name once)."""
        total = 0
        for n in set(names):
            total += len(self._by_name.get(n, ()))
        return total

    def indices_during(self, names, lo: float, hi: float) -> list[int]:
        """cpu indices, in order, of the events with one of these exact names (each name once)
        that start in [lo, hi]: each name's events cut to the window thread by thread (a thread's
        events sit together in cpu, in start order), not read one by one."""
        spans = []
        for key, starts in self.tindex.starts.items():
            base = self.tindex.base[key]
            spans.append((base + bisect.bisect_left(starts, lo), base + bisect.bisect_right(starts, hi)))
        out: list[int] = []
        for n in set(names):
            idx = self._by_name.get(n)
            if idx:
                for a, z in spans:
                    out.extend(idx[bisect.bisect_left(idx, a) : bisect.bisect_left(idx, z)])
        out.sort()
        return out

    def subtree(self, i: int) -> list[int]:
        """Event i and every event nested in it (each event's children pushed in order, the last
        popped first)."""
        return self.passes.subtree(*self.child_index, i)

    def gpu_under(self, i: int) -> list[int]:
        """GPU events launched from event i or anything nested in it (the gpu_under_all pass)."""
        return self.gpu_under_many((i,)).tolist()

    def gpu_under_many(self, roots) -> array:
        """``gpu_under`` of each of ``roots`` (cpu indices), one after another, as one column."""
        return self.passes.gpu_under_all(*self.child_index, *self._launched, array("i", roots))

    def children(self, i: int):
        """Direct children of event i, in order (a slice of one flat index)."""
        off, kids = self.child_index
        return kids[off[i] : off[i + 1]]

    def user_frame(self, i: int) -> int:
        """The user frame that owns event i: its own, or through the backward->forward link."""
        return self.line_source(i)[0]

    def line_source(self, i: int) -> tuple[int, int]:
        """(user frame, event) whose statement places event i: i itself in its own frame, or for a
        backward op the forward op it differentiates; (-1, -1) when neither is in a user frame."""
        f = self.frame_of[i]
        if f >= 0:
            return f, i
        fw = self.fwd_of[i]
        f = self.frame_of[fw] if fw >= 0 else -1
        return (f, fw) if f >= 0 else (-1, -1)

    def is_backward(self, i: int) -> bool:
        return self.frame_of[i] < 0 and self.fwd_of[i] >= 0

    def gpu_of_launch(self, i: int):
        """GPU events launched by cpu event i, in start order."""
        off, gs = self._launched
        return gs[off[i] : off[i + 1]]


def build(doc: TraceDoc) -> TraceModel:
    events = doc.traceEvents
    run = passes.for_events(events)  # every pass of this file native, or every one the reference
    by_thread, gpu, gpu_ann, mem_raw, flows_s, flows_f, thread_names, unread = run.classify(
        events, ROLES, LABELS_AMONG_OPS, CPU_CATS, GPU_CATS
    )
    gpu_by_start = passes.start(run, "by_start", gpu)  # beside the cpu threads' nesting

    # cpu: the first thread's list itself (no reference to its events taken again), the others appended
    cpu: list[Event] = []
    parent = array("i")
    durs = array("d")
    codes = bytearray()
    cpu_starts = array("d")  # each cpu event's start; each thread's starts are a slice of it
    placed: list[tuple[tuple, int, int]] = []
    keys = sorted(by_thread, key=str)
    nested = _nest_threads(run, [by_thread[k] for k in keys])
    for key, (pb, sb, db, kb) in zip(keys, nested):
        evs = by_thread[key]
        placed.append((key, len(cpu), len(evs)))
        codes += kb
        if cpu:  # the first thread's columns themselves, the others' appended
            parent += pb
            cpu_starts += sb
            durs += db
            cpu += evs
        else:
            parent, cpu_starts, durs = pb, sb, db
            cpu = evs
    whole = memoryview(cpu_starts)  # (the column is complete: no resize while the slices live)
    starts = {key: whole[base : base + n] for key, base, n in placed}
    tindex = ThreadIndex(cpu, parent, starts, cpu_starts, durs)
    thread = ThreadColumn(tindex.base, len(cpu))

    cat_codes = bytes(codes)
    gpu = gpu_by_start.result()
    # the correlation join on the other core while this one reads the frames (0.06 s at 1 GB)
    launched_by = passes.start(run, "launchers", cpu, run.positions(cat_codes.translate(LAUNCH_CODES)), gpu)
    frame_ids, frame_table, frame_of, token, by_name, call_from, annotations, first_ts = run.frames(
        cpu, parent, parse_frame
    )
    frames = FrameIndex.from_ids(frame_ids, frame_table, run)
    launcher = launched_by.result()

    steps = _steps(cpu, annotations)
    main = _main_thread(cpu, thread, steps, annotations, starts)
    t0 = first_ts if first_ts is not None else (gpu[0].ts if gpu else 0.0)
    m = TraceModel(
        doc=doc,
        cpu=cpu,
        parent=parent,
        thread=thread,
        frames=frames,
        frame_of=frame_of,
        gpu=gpu,
        launcher=launcher,
        steps=steps,
        gpu_annotations=gpu_ann,
        thread_names=thread_names,
        main_thread=main,
        t0=t0,
        unread=unread,
        memory_samples=len(mem_raw),
        passes=run,
    )
    m._backward_from = (run, flows_s, flows_f)  # fwd_of, made on first read
    m._memory_from = mem_raw  # memory, made on first read
    m.child_index = run.children(
        parent, len(parent)
    )  # (off, kids): i's children are kids[off[i] : off[i + 1]]
    m._cpu_starts = cpu_starts
    m._by_name = by_name
    m.durs = durs
    m.cat_codes = cat_codes  # 1 + each cpu event's category's place in CPU_CAT_CODES, 0 none
    m.token = token
    m.labels = annotations  # the user_annotation events (record_function labels, step markers)
    m.has_call_from = call_from
    m.tindex = tindex
    m._launched = run.children(launcher, len(cpu))
    if not m.steps:  # no ProfilerStep markers: the loop's iterations, else the window as one step
        from .windows import infer_steps

        found, m.steps_from = infer_steps(m)
        m.steps = [Step(*s) for s in found]
        m._step_starts = [s.ts for s in m.steps]
    return m


class FrameIndex:
    """cpu index -> parsed Frame, for the python_function events: a dict's interface over an int32
    array into the few thousand distinct frames (a dict entry per event cost ~80 B)."""

    def __init__(self, n: int):
        self._ids = array("i", [-1]) * n
        self._table: list[Frame] = []
        self._id_of: dict[Frame, int] = {}
        self._count: Optional[int] = 0
        self._run = passes.REFERENCE  # the file's passes (from_ids): matching's scan

    def __setitem__(self, i: int, fr: Frame) -> None:
        k = self._id_of.get(fr)
        if k is None:
            k = self._id_of[fr] = len(self._table)
            self._table.append(fr)
        if self._ids[i] < 0:
            self._count = len(self) + 1
        self._ids[i] = k

    @property
    def ids(self) -> array:
        """Per cpu event the number of its parsed frame in the table, -1 for an event that is none
        (the column the frame passes read: frame_shapes, points_into)."""
        return self._ids

    def mask(self) -> bytes:
        """1 for the events that are parsed frames: an id >= 0 (the others are -1)."""
        return negative(self._ids).translate(COMPLEMENT)

    def get(self, i: int, default=None):
        try:
            k = self._ids[i] if i >= 0 else -1
        except (IndexError, TypeError):
            return default
        return self._table[k] if k >= 0 else default

    def __getitem__(self, i: int) -> Frame:
        fr = self.get(i)
        if fr is None:
            raise KeyError(i)
        return fr

    def first(self, pred) -> int:
        """The first cpu index whose frame satisfies ``pred`` (tested once per distinct frame),
        else -1."""
        hits = [k for k, fr in enumerate(self._table) if pred(fr)]
        return min((self._ids.index(k) for k in hits), default=-1)

    def __contains__(self, i) -> bool:
        try:
            return i >= 0 and self._ids[i] >= 0
        except (IndexError, TypeError):
            return False

    def __len__(self) -> int:
        if self._count is None:  # counted on first use: the model's readers ask only whether any
            self._count = len(self._ids) - negative(self._ids).count(1)  # the ids are -1 or a table index
        return self._count

    def __bool__(self) -> bool:
        return bool(self._table)  # every frame in the table is some event's

    def items(self):
        table = self._table
        return ((i, table[k]) for i, k in enumerate(self._ids) if k >= 0)

    def keys(self):
        return (i for i, _ in self.items())

    def matching(self, pred) -> list[tuple[int, "Frame"]]:
        """(event, frame) of the frames for which ``pred(frame)`` holds, in event order; the test
        runs once per distinct frame and the events are scanned only when one matches."""
        table = self._table
        want = bytes(bool(pred(fr)) for fr in table)  # per frame id: wanted
        if not any(want):
            return []
        ids = self._ids
        # the events whose id is wanted, in order: one pass over the id column
        return [(i, table[ids[i]]) for i in self._run.points_into(ids, want)]

    __iter__ = keys

    @classmethod
    def from_ids(cls, ids: array, table: list, run=passes.REFERENCE) -> "FrameIndex":
        fi = cls(0)
        fi._run = run
        fi._ids = ids
        fi._table = table
        fi._id_of = {fr: k for k, fr in enumerate(table)}
        fi._count = None
        return fi


class ThreadIndex:
    """Per-thread start times, for "which event encloses this instant" queries."""

    def __init__(self, cpu, parent, starts: dict[tuple, memoryview], cpu_starts: array, durs: array):
        """``starts``: each thread's start times, in the order its events sit, contiguously, in cpu;
        ``cpu_starts`` and ``durs``: every cpu event's start and duration (the model's columns,
        which the owners pass reads in place of the events)."""
        self.cpu, self.parent = cpu, parent
        self.starts = starts
        self.cpu_starts, self.durs = cpu_starts, durs
        self.base: dict = {}
        base = 0
        for key, tss in starts.items():
            self.base[key] = base
            base += len(tss)

    def innermost(self, key, ts: float, cat: Optional[str] = None, slack: float = 1e-3) -> int:
        """Innermost event on ``key`` containing ``ts`` (of category ``cat`` if given), or -1."""
        return passes.innermost(
            self.cpu, self.parent, self.starts.get(key), self.base.get(key), ts, cat, slack
        )


def _nest_threads(run, threads: list[list]) -> list[tuple]:
    """The nest pass over each thread's events (in that order, each placed after the ones before
    it): the longest thread here, the others beside it (passes.start_work) where nest reads the
    events without the GIL (the autograd engine's thread is a fourth of a training step's events)."""
    bases = list(accumulate(map(len, threads), initial=0))
    if len(threads) < 2:
        return _nest_each(run, list(zip(threads, bases)))
    big = max(range(len(threads)), key=lambda k: len(threads[k]))
    rest = [k for k in range(len(threads)) if k != big]
    others = passes.start_work(run, ("nest",), _nest_each, [(threads[k], bases[k]) for k in rest])
    out: list = [None] * len(threads)
    out[big] = run.nest(threads[big], bases[big], NEST_SLACK_US, CPU_CAT_CODES)
    for k, got in zip(rest, others.result()):
        out[k] = got
    return out


def _nest_each(run, items: list[tuple[list, int]]) -> list[tuple]:
    return [run.nest(evs, base, NEST_SLACK_US, CPU_CAT_CODES) for evs, base in items]


def _link_backward(run, cpu, parent, tindex, frame_of, flows_s, flows_f, by_name, codes) -> array:
    """fwd_of[i] for events on backward threads: the forward op whose backward they run.
    ``by_name`` and ``codes``: the model's non-python events by name and category code column."""
    n = len(cpu)
    if not flows_f and not any(e.args is not None and e.args.fwd_tid not in (None, 0) for e in cpu):
        return array("i", [-1]) * n
    # each flow with both ends, in flow order, as two lists (C-speed maps, not a tuple a flow)
    starts, ends = list(map(flows_s.get, flows_f)), list(flows_f.values())
    if not all(starts):  # a flow without its start (None; an event is always true)
        found = [s is not None for s in starts]
        starts, ends = list(compress(starts, found)), list(compress(ends, found))
    fws, bws = _flow_ends(run, starts, ends, tindex)
    keep = mask_or(negative(fws), negative(bws)).translate(COMPLEMENT)  # the flows with an op at both ends
    ok = run.positions(keep)
    fw_ok, bw_ok = run.take(fws, ok, -1), run.take(bws, ok, -1)
    tgt = array("i", [-1]) * n
    if bw_ok:
        # The engine's wrapper op around a backward node belongs to its forward op too: the first
        # flow's through it, unless the wrapper is a backward end itself (then the last flow's, as
        # any backward end). The wrappers are marked by name; the python events, not among the
        # names, are marked all and their own names read.
        py = CPU_CAT_CODES.index("python_function") + 1
        mark = bytearray(codes.translate(bytes(int(k == py) for k in range(256))))
        for name, idx in by_name.items():
            if name.startswith(_WRAPPER):
                for i in idx:
                    mark[i] = 1
        above = run.take(parent, bw_ok, -1)
        for k in reversed(run.points_into(above, bytes(mark))):  # the first flow's written last
            p = above[k]
            if codes[p] != py or cpu[p].name.startswith(_WRAPPER):
                tgt[p] = fw_ok[k]
        for bw, fw in zip(bw_ok, fw_ok):
            tgt[bw] = fw
    else:  # older traces: match sequence numbers instead
        target: dict[int, int] = {}
        fwd_seq: dict = {}
        for i, e in enumerate(cpu):
            a = e.args
            if e.cat == "cpu_op" and a is not None and a.seq is not None and a.fwd_tid in (None, 0):
                fwd_seq.setdefault(a.seq, i)
        for i, e in enumerate(cpu):
            a = e.args
            if e.cat == "cpu_op" and a is not None and a.seq is not None and a.fwd_tid not in (None, 0):
                fw = fwd_seq.get(a.seq, -1)
                if fw >= 0:
                    target.setdefault(i, fw)
        for k, v in target.items():
            tgt[k] = v
    return run.inherit(parent, frame_of, tgt)


_WRAPPER = "autograd::engine::evaluate_function"  # the engine's op around each backward node


def _flow_ends(run, starts: list, ends: list, tindex: ThreadIndex) -> tuple[array, array]:
    """(forward ops, backward ops) at the two ends of the fwdbwd flows: the innermost cpu_op around
    each end on its thread, -1 when none."""
    return tuple(
        run.owners(
            tindex.cpu,
            tindex.parent,
            side,
            tindex.starts,
            tindex.base,
            1e-3,
            "cpu_op",
            tindex.cpu_starts,
            tindex.durs,
        )[0]
        for side in (starts, ends)
    )


def _steps(cpu, annotations) -> list[Step]:
    steps = []
    for i in annotations:
        e = cpu[i]
        m = _STEP_RE.match(e.name)
        if m:
            steps.append(Step(e.name, int(m.group(1)), e.ts, e.ts + e.dur))
    steps.sort(key=lambda s: s.ts)
    return steps


def _main_thread(cpu, thread, steps, annotations, starts) -> Optional[tuple]:
    if steps:
        for i in annotations:
            if cpu[i].name == steps[0].name:
                return thread[i]
    counts = {key: len(tss) for key, tss in starts.items()}
    return max(counts, key=counts.get) if counts else None


class ThreadColumn:
    """cpu index -> its thread key: the cpu list holds each thread's events contiguously, so a
    bisection over the few threads' first indices replaces a key per event."""

    def __init__(self, base: dict[tuple, int], n: int):
        """``base``: each thread's first cpu index (ThreadIndex.base); ``n``: the number of events."""
        self.keys = list(base)
        self.bases = list(base.values())
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple:
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.keys[bisect.bisect_right(self.bases, i) - 1]


class MemoryTable:
    """The [memory] samples as columns (44 B a sample instead of ~200 B of objects); iterating or
    indexing gives ``MemoryEvent`` objects, made on demand."""

    def __init__(self):
        self.ts = array("d")
        self.nbytes = array("q")
        self.total_allocated = array("q")
        self.total_reserved = array("q")
        self.device_type = array("i")
        self.addr = array("q")  # the block's address: an alloc and its free share it (0: unknown)
        self.owner = array("i")
        self.thread_id = array("i")
        self.threads: list[tuple] = []
        self.totals_summed = False  # total_allocated summed from the samples' Bytes (see _sum_totals)

    def append(
        self, ts, nbytes, total_allocated, total_reserved, device_type, owner, thread_id, addr=0
    ) -> None:
        self.ts.append(ts)
        self.nbytes.append(nbytes)
        self.total_allocated.append(total_allocated)
        self.total_reserved.append(total_reserved)
        self.device_type.append(device_type)
        self.addr.append(addr)
        self.owner.append(owner)
        self.thread_id.append(thread_id)

    def __len__(self) -> int:
        return len(self.ts)

    def __getitem__(self, k: int) -> MemoryEvent:
        return MemoryEvent(
            self.ts[k],
            self.nbytes[k],
            self.total_allocated[k],
            self.total_reserved[k],
            self.device_type[k],
            self.owner[k],
            self.threads[self.thread_id[k]],
        )

    def __iter__(self):
        return map(self.__getitem__, range(len(self.ts)))


def _memory(run, mem_raw, tindex: ThreadIndex) -> MemoryTable:
    """Each [memory] instant with the innermost CPU event around it on its thread."""
    samples = run.by_start(mem_raw)
    out = MemoryTable()
    out.ts, out.nbytes, out.total_allocated, out.total_reserved, out.device_type, out.addr = (
        run.memory_columns(samples)
    )
    out.owner, out.thread_id, out.threads = run.owners(
        tindex.cpu,
        tindex.parent,
        samples,
        tindex.starts,
        tindex.base,
        0.0,
        None,
        tindex.cpu_starts,
        tindex.durs,
    )
    return _sum_totals(out)


def _sum_totals(mem: MemoryTable) -> MemoryTable:
    """The 2021-era profiler wrote only ``Bytes`` (+alloc/-free) per sample, no ``Total Allocated``:
    then each device's total is the running sum of its samples, raised by the least amount that
    keeps it from going negative (memory allocated before the profiler started and freed during it),
    so a peak read from it is a lower bound."""
    if not mem.nbytes or any(mem.total_allocated) or not any(mem.nbytes):
        return mem
    running: dict[int, int] = {}
    low: dict[int, int] = {}
    for k, (d, b) in enumerate(zip(mem.device_type, mem.nbytes)):
        r = running[d] = _int64(running.get(d, 0) + b)
        mem.total_allocated[k] = r
        low[d] = min(low.get(d, 0), r)
    for k, d in enumerate(mem.device_type):
        mem.total_allocated[k] = _int64(mem.total_allocated[k] - low[d])
    mem.totals_summed = True
    return mem
