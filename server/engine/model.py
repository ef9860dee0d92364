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
from operator import attrgetter
import re
import sys
from dataclasses import dataclass, field
from typing import Optional

from .loader import CPU_CATS, GPU_CATS, Event, TraceDoc, flag  # the loader keeps what the model reads
from .loader import _scan, column, scanned

# A child may end this much after its parent and still nest in it: Kineto rounds to ns.
NEST_SLACK_US = 0.01

from .loader import LAUNCH_CATS  # noqa: E402, F401  (model.LAUNCH_CATS is read across the engine)

# What each producer's category means, as the category the model reads. Kineto writes the same
# names for CUDA and ROCm; the 2021-era profiler wrote "Operator", "Runtime", "Kernel", "Memcpy" and
# "Memset". None: the profiler's own spans and markers (its run, its buffer requests, Kineto's sync
# markers on the GPU lane), read by no analysis and not GPU work.
ROLES = {
    "cpu_op": "cpu_op", "Operator": "cpu_op",
    "user_annotation": "user_annotation",
    "python_function": "python_function",
    "cuda_runtime": "cuda_runtime", "Runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver",
    "kernel": "kernel", "Kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy", "Memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset", "Memset": "gpu_memset",
    "gpu_user_annotation": "gpu_user_annotation",
    "Trace": None, "overhead": None, "cuda_sync": None,
}
# Categories that hold record_function labels among the ops: there a name with '#'
# (``ProfilerStep#3``, ``Optimizer.step#SGD.step``, ``enumerate(DataLoader)#...``) is a label, as the
# later profiler files it under user_annotation; ops (``aten::mm``, ``AddmmBackward``) never have one.
LABELS_AMONG_OPS = frozenset({"Operator"})

_ts = attrgetter("ts")
_dur = attrgetter("dur")
_FRAME_RE = re.compile(r"^(.*)\((\d+)\): (.*)$")
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

# Top-level packages whose frames are never "user code" even when the trace strips site-packages.
_LIBRARY_ROOTS = frozenset(sys.stdlib_module_names) | {
    "torch", "torchvision", "torchaudio", "torchtext", "functorch", "triton", "numpy", "transformers",
    "accelerate", "deepspeed", "apex", "lightning", "pytorch_lightning", "tqdm", "typing_extensions",
    "importlib_metadata", "_pytest", "pytest", "pluggy", "IPython", "ipykernel", "tornado", "asyncio",
}


@dataclass(frozen=True)
class Frame:
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


@dataclass
class Step:
    name: str
    number: int
    ts: float
    end: float

    @property
    def dur(self) -> float:
        return self.end - self.ts


@dataclass(slots=True)  # one per allocator sample: hundreds of thousands in a large trace
class MemoryEvent:
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
    fwd_of: array
    steps: list[Step]
    memory: "MemoryTable"
    gpu_annotations: list[Event]
    thread_names: dict[tuple, str] = field(default_factory=dict)
    main_thread: Optional[tuple] = None
    t0: float = 0.0
    unread: dict[str, int] = field(default_factory=dict)  # complete events of categories not read: count
    steps_from: str = "ProfilerStep markers"  # how the window was cut into steps (windows.infer_steps)

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
        return flag(self.doc.profile_memory) or bool(self.memory)

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
        above = self.__dict__.get("_ops_above")
        if above is None:
            above = self._ops_above = _nearest(self.parent, _cat_mask(self.cpu, "cpu_op"))
        return above[i]

    def enclosing_frame(self, i: int) -> int:
        """The nearest enclosing python frame (user or library; built-ins are not frames) of
        event i (itself excluded), -1 when none."""
        above = self.__dict__.get("_frames_above")
        if above is None:
            above = self._frames_above = _nearest(self.parent, self.frames.mask())
        return above[i]

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

    def subtree(self, i: int) -> list[int]:
        """Event i and every event nested in it."""
        if _scan is not None:
            return _scan.subtree(*self._kids, i)
        stack, out = [i], []
        while stack:
            j = stack.pop()
            out.append(j)
            stack.extend(self.children(j))
        return out

    def gpu_under(self, i: int) -> list[int]:
        """GPU events launched from event i or anything nested in it."""
        return [g for j in self.subtree(i) for g in self.gpu_of_launch(j)]

    def children(self, i: int):
        """Direct children of event i, in order (a slice of one flat index)."""
        off, kids = self._kids
        return kids[off[i]:off[i + 1]]

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
        return gs[off[i]:off[i + 1]]


def build(doc: TraceDoc) -> TraceModel:
    events = doc.traceEvents
    fast = scanned(events)
    if fast:
        try:
            by_thread, gpu, gpu_ann, mem_raw, flows_s, flows_f, thread_names, unread = \
                _scan.classify(events, ROLES, LABELS_AMONG_OPS, CPU_CATS, GPU_CATS)
        except TypeError:  # not all of one decoder's events
            fast = False
    if not fast:
        by_thread, gpu, gpu_ann, mem_raw, flows_s, flows_f, thread_names, unread = _classify(events)

    cpu: list[Event] = []
    parent = array("i")
    child_dur = array("d")
    starts: dict[tuple, array] = {}
    for key in sorted(by_thread, key=str):
        evs = by_thread[key]
        pb, cb, sb = _nest(evs, len(cpu))
        parent.frombytes(pb)
        child_dur.frombytes(cb)
        starts[key] = column("d", sb)
        cpu += evs
    tindex = ThreadIndex(cpu, parent, starts)
    thread = ThreadColumn(tindex.base, len(cpu))

    frames, frame_of, token, by_name, call_from, launches, annotations, first_ts = \
        (_frames_fast if fast else _frames)(cpu, parent)

    gpu.sort(key=_ts)
    launcher = _launchers(cpu, launches, gpu, fast)

    fwd_of = _link_backward(cpu, parent, tindex, frame_of, flows_s, flows_f)
    steps = _steps(cpu, annotations)
    main = _main_thread(cpu, thread, steps, annotations, starts)
    memory = _memory(mem_raw, tindex)
    t0 = first_ts if first_ts is not None else (gpu[0].ts if gpu else 0.0)
    m = TraceModel(doc=doc, cpu=cpu, parent=parent, thread=thread, frames=frames, frame_of=frame_of,
                   gpu=gpu, launcher=launcher, fwd_of=fwd_of, steps=steps, memory=memory,
                   gpu_annotations=gpu_ann, thread_names=thread_names, main_thread=main, t0=t0,
                   unread=unread)
    m._kids = _children(parent)
    m._by_name = by_name
    m.child_dur = child_dur
    m.token = token
    m.labels = annotations  # the user_annotation events (record_function labels, step markers)
    m.has_call_from = call_from
    m.tindex = tindex
    m._launched = _children(launcher, len(cpu))
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
        self._count = 0

    def __setitem__(self, i: int, fr: Frame) -> None:
        k = self._id_of.get(fr)
        if k is None:
            k = self._id_of[fr] = len(self._table)
            self._table.append(fr)
        if self._ids[i] < 0:
            self._count += 1
        self._ids[i] = k

    def mask(self) -> bytes:
        """1 for the events that are parsed frames."""
        return bytes(map((-1).__ne__, self._ids))

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
        return self._count

    def items(self):
        table = self._table
        return ((i, table[k]) for i, k in enumerate(self._ids) if k >= 0)

    def keys(self):
        return (i for i, _ in self.items())

    def matching(self, pred) -> list[tuple[int, "Frame"]]:
        """(event, frame) of the frames for which ``pred(frame)`` holds, in event order; the test
        runs once per distinct frame and the events are scanned only when one matches."""
        want = {k for k, fr in enumerate(self._table) if pred(fr)}
        if not want:
            return []
        ids, table = self._ids, self._table
        return [(i, table[k]) for i, k in enumerate(ids) if k in want]

    __iter__ = keys

    @classmethod
    def from_ids(cls, ids: bytes, table: list) -> "FrameIndex":
        fi = cls(0)
        fi._ids = column("i", ids)
        fi._table = table
        fi._id_of = {fr: k for k, fr in enumerate(table)}
        fi._count = len(fi._ids) - fi._ids.count(-1)
        return fi


def thread_key(pid, tid) -> tuple:
    """A thread's key: ids written as digit strings (the 2021 profiler's ``"tid": "25738"`` on ops,
    25738 on its allocator samples) are the same thread as the number."""
    return (_id(pid), _id(tid))


def _id(v):
    if isinstance(v, str) and 0 < len(v) <= 18 and v.isdigit() and v.isascii():
        return int(v)
    return v


def gpu_role(e) -> Optional[str]:
    """The GPU category of a complete event of an unknown category that carries what a GPU lane's
    events carry (a device, a stream and a correlation id to its launch), else None."""
    a = e.args
    if a is None or a.device is None or a.stream is None or a.correlation is None:
        return None
    name = e.name
    return "gpu_memcpy" if name.startswith("Memcpy") else "gpu_memset" if name.startswith("Memset") else "kernel"


def _classify(events):
    """The model's first pass (``_scan.classify`` does the same for the scanner's events): each
    event by its category's role (``ROLES``; an unknown category by what its events carry), CPU
    events by thread. Events get the category of their role."""
    by_thread: dict[tuple, list[Event]] = {}
    gpu: list[Event] = []
    gpu_ann: list[Event] = []
    mem_raw: list[Event] = []
    flows_s: dict = {}
    flows_f: dict = {}
    thread_names: dict[tuple, str] = {}
    unread: dict[str, int] = {}
    for e in events:
        ph = e.ph
        if ph == "X":
            cat = e.cat
            if cat in ROLES:
                role = ROLES[cat]
                if role == "cpu_op" and cat in LABELS_AMONG_OPS and "#" in e.name:
                    role = "user_annotation"
            else:
                role = gpu_role(e)
                if role is None:
                    unread[cat] = unread.get(cat, 0) + 1
            if role is None:
                continue
            if role != cat:
                e.cat = role
            if role in GPU_CATS:
                gpu.append(e)
            elif role in CPU_CATS:
                by_thread.setdefault(thread_key(e.pid, e.tid), []).append(e)
            elif role == "gpu_user_annotation":
                gpu_ann.append(e)
        elif ph == "i" or ph == "I":
            if e.name == "[memory]" and e.args is not None:
                mem_raw.append(e)
        elif ph == "s" or ph == "f":
            if e.cat == "fwdbwd":
                (flows_s if ph == "s" else flows_f)[e.id] = e
        elif ph == "M" and e.name == "thread_name" and e.args is not None and e.args.name:
            thread_names[thread_key(e.pid, e.tid)] = e.args.name
    return by_thread, gpu, gpu_ann, mem_raw, flows_s, flows_f, thread_names, unread


def _frames(cpu, parent):
    """The model's second pass: parsed python frames, the user frame around each event, the
    statement token (the frame's direct child, through record_function labels) holding it, the
    non-python events by name, whether any op carries CallFrom, the launch calls, the annotations
    and the first start. ``_frames_fast`` is the same in C."""
    frames = FrameIndex(len(cpu))
    n = len(cpu)
    frame_of = array("i", [-1]) * n
    token = array("i", [-1]) * n  # the direct child of the user frame (through record_function labels) that holds i
    by_name: dict[str, array] = {}
    call_from = False
    for i, e in enumerate(cpu):
        cat = e.cat
        p = parent[i]
        if cat == "python_function":
            fr = parse_frame(e.name)
            if fr is not None:
                frames[i] = fr
                if fr.user:
                    frame_of[i] = i
                    continue
        else:
            idx = by_name.get(e.name)
            if idx is None:
                idx = by_name[e.name] = array("i")
            idx.append(i)
            if not call_from and cat == "cpu_op" and e.args is not None and e.args.call_from:
                call_from = True
        if p >= 0:
            f = frame_of[p]
            frame_of[i] = f
            if f >= 0:
                if p == f or (token[p] == p and cpu[p].cat == "user_annotation"):
                    token[i] = i
                else:
                    token[i] = token[p]
    launches = [i for i, e in enumerate(cpu) if e.cat in LAUNCH_CATS]
    annotations = [i for i, e in enumerate(cpu) if e.cat == "user_annotation"]
    first_ts = min((e.ts for e in cpu), default=None)
    return frames, frame_of, token, by_name, call_from, launches, annotations, first_ts


def _frames_fast(cpu, parent):
    fb, fo, tb, cb, names, table, call_from, lb, ub, first_ts = _scan.frames(cpu, parent, parse_frame, LAUNCH_CATS)
    off, idx = _children(column("i", cb), len(names))
    by_name = {name: idx[off[k]:off[k + 1]] for k, name in enumerate(names)}
    return (FrameIndex.from_ids(fb, table), column("i", fo), column("i", tb), by_name, call_from,
            column("i", lb), column("i", ub), first_ts)


def _launchers(cpu, launches, gpu, fast: bool) -> array:
    """Per GPU event the runtime/driver call that launched it (by correlation id), -1 when none."""
    if fast and (not gpu or scanned(gpu)):
        return column("i", _scan.launchers(cpu, array("i", launches), gpu))
    launcher = array("i")
    by_corr: dict = {}
    for i in launches:
        e = cpu[i]
        if e.args is not None and e.args.correlation is not None:
            by_corr[(e.pid, e.args.correlation)] = i
    corr_any = {c: i for (p, c), i in by_corr.items()}  # ids repeated across processes: the last
    for e in gpu:
        c = e.args.correlation if e.args is not None else None
        launcher.append(corr_any.get(c, -1) if c is not None else -1)
    return launcher


def _nest(evs: list, base: int) -> tuple[bytes, bytes, bytes]:
    """Sort one thread's events (by start, longest first among equal starts, so a parent precedes
    the children that start with it) and give each its innermost enclosing event (base + position,
    -1 at the top), its children's summed duration and its start: (int32, float64, float64 bytes).

    A python frame that starts inside another python frame but ends after it is one whose exit the
    tracer lost (Dynamo's frame swaps leave ``<built-in method apply ...>`` "running" to the end of
    the trace, and everything after it nested under ``main``): it nests in that frame, its end
    clamped to the frame's for the events that follow."""
    if scanned(evs):
        try:
            return _scan.nest(evs, base, NEST_SLACK_US)
        except TypeError:  # a mixed list: the Python path below
            pass
    evs.sort(key=_dur, reverse=True)  # two stable sorts: start, then longest first
    evs.sort(key=_ts)
    parent = array("i", [-1]) * len(evs)
    child_dur = array("d", [0.0]) * len(evs)
    stack: list[int] = []  # positions in evs
    eend = array("d", [0.0]) * len(evs)  # each event's end as nesting sees it (clamped, below)
    for j, e in enumerate(evs):
        end, dur = e.ts + e.dur, e.dur
        while stack:
            tend = eend[stack[-1]]
            if e.ts < tend and end <= tend + NEST_SLACK_US:
                break
            if e.ts < tend and e.cat == "python_function" and evs[stack[-1]].cat == "python_function":
                end, dur = tend, tend - e.ts  # a python frame whose exit the tracer lost
                break
            stack.pop()
        eend[j] = end
        if stack:
            parent[j] = base + stack[-1]
            child_dur[stack[-1]] += dur
        stack.append(j)
    return parent.tobytes(), child_dur.tobytes(), array("d", map(_ts, evs)).tobytes()


def _children(parent: array, n: Optional[int] = None) -> tuple[array, array]:
    """Items grouped by parent as one flat index: the items whose parent is i are
    kids[off[i]:off[i + 1]], in order. Parents lie in [0, n) (n = len(parent) by default)."""
    n = len(parent) if n is None else n
    if _scan is not None:
        ob, kb = _scan.children(parent, n)
        return column("i", ob), column("i", kb)
    off = array("i", [0]) * (n + 1)
    for p in parent:
        if p >= 0:
            off[p + 1] += 1
    for i in range(n):
        off[i + 1] += off[i]
    fill = off[:-1]
    kids = array("i", [0]) * off[n]
    for i, p in enumerate(parent):
        if p >= 0:
            kids[fill[p]] = i
            fill[p] += 1
    return off, kids


def _cat_mask(cpu: list, cat: str) -> bytes:
    if scanned(cpu):
        return _scan.cat_mask(cpu, cat)
    return bytes(e.cat == cat for e in cpu)


def _nearest(parent: array, mask: bytes) -> array:
    """Per event, its nearest strict ancestor with a set mask byte (-1 when none)."""
    if _scan is not None:
        return column("i", _scan.nearest(parent, mask))
    out = array("i", [-1]) * len(parent)
    for i, p in enumerate(parent):
        if p >= 0:
            out[i] = p if mask[p] else out[p]
    return out


class ThreadIndex:
    """Per-thread start times, for "which event encloses this instant" queries."""

    def __init__(self, cpu, parent, starts: dict[tuple, list[float]]):
        """``starts``: each thread's start times, in the order its events sit, contiguously, in cpu."""
        self.cpu, self.parent = cpu, parent
        self.starts = starts
        self.base: dict = {}
        base = 0
        for key, tss in starts.items():
            self.base[key] = base
            base += len(tss)

    def innermost(self, key, ts: float, cat: Optional[str] = None, slack: float = 1e-3) -> int:
        """Innermost event on ``key`` containing ``ts`` (of category ``cat`` if given), or -1."""
        starts = self.starts.get(key)
        if not starts:
            return -1
        j = bisect.bisect_right(starts, ts + slack) - 1
        if j < 0:
            return -1
        i = self.base[key] + j
        cpu, parent = self.cpu, self.parent
        while i >= 0:
            e = cpu[i]
            if e.ts + e.dur + slack >= ts and (cat is None or e.cat == cat):
                return i
            i = parent[i]
        return -1


def _link_backward(cpu, parent, tindex, frame_of, flows_s, flows_f) -> array:
    """fwd_of[i] for events on backward threads: the forward op whose backward they run."""
    n = len(cpu)
    fwd_of = array("i", [-1]) * n
    if not flows_f and not any(e.args is not None and e.args.fwd_tid not in (None, 0) for e in cpu):
        return fwd_of
    target: dict[int, int] = {}
    pairs = [(s, f) for fid, f in flows_f.items() for s in [flows_s.get(fid)] if s is not None]
    for fw, bw in _flow_ends(pairs, tindex):
        if fw >= 0 and bw >= 0:
            target[bw] = fw
            p = parent[bw]  # the engine's wrapper op around the backward node belongs to it too
            if p >= 0 and cpu[p].name.startswith("autograd::engine::evaluate_function"):
                target.setdefault(p, fw)
    if not target:  # older traces: match sequence numbers instead
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
    if _scan is not None:
        tgt = array("i", [-1]) * n
        for k, v in target.items():
            tgt[k] = v
        return column("i", _scan.inherit(parent, frame_of, tgt))
    for i in range(n):
        t = target.get(i)
        if t is not None:
            fwd_of[i] = t
        elif parent[i] >= 0 and frame_of[i] < 0:
            fwd_of[i] = fwd_of[parent[i]]
    return fwd_of


def _flow_ends(pairs: list, tindex: ThreadIndex):
    """(forward op, backward op) at the two ends of each fwdbwd flow: the innermost cpu_op around
    each end on its thread, -1 when none."""
    if pairs and scanned([pairs[0][0]]) and scanned([pairs[0][1]]):
        return zip(*(column("i", _scan.owners(tindex.cpu, tindex.parent, [p[side] for p in pairs], tindex.starts,
                                              tindex.base, 1e-3, "cpu_op")[0]) for side in (0, 1)))
    return ((tindex.innermost(thread_key(s.pid, s.tid), s.ts, "cpu_op"),
             tindex.innermost(thread_key(f.pid, f.tid), f.ts, "cpu_op"))
            for s, f in pairs)


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

    def append(self, ts, nbytes, total_allocated, total_reserved, device_type, owner, thread_id, addr=0) -> None:
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
        return MemoryEvent(self.ts[k], self.nbytes[k], self.total_allocated[k], self.total_reserved[k],
                           self.device_type[k], self.owner[k], self.threads[self.thread_id[k]])

    def __iter__(self):
        return map(self.__getitem__, range(len(self.ts)))


def _memory(mem_raw, tindex: ThreadIndex) -> MemoryTable:
    """Each [memory] instant with the innermost CPU event around it on its thread."""
    if scanned(mem_raw):
        try:
            return _sum_totals(_memory_fast(mem_raw, tindex))
        except TypeError:
            pass
    return _sum_totals(_memory_slow(mem_raw, tindex))


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


def _memory_slow(mem_raw, tindex: ThreadIndex) -> MemoryTable:
    out = MemoryTable()
    ids: dict[tuple, int] = {}
    for e in sorted(mem_raw, key=_ts):
        a = e.args
        key = thread_key(e.pid, e.tid)
        tid = ids.get(key)
        if tid is None:
            tid = ids[key] = len(out.threads)
            out.threads.append(key)
        dt = a.device_type
        out.append(e.ts, _int64(a.mem_bytes), _int64(a.total_allocated), _int64(a.total_reserved),
                   dt if isinstance(dt, int) and -2**31 <= dt < 2**31 else -1,
                   tindex.innermost(key, e.ts, slack=0.0), tid, _int64(a.addr))
    return out


def _memory_fast(mem_raw, tindex: ThreadIndex) -> MemoryTable:
    samples = sorted(mem_raw, key=_ts)
    out = MemoryTable()
    out.ts, out.nbytes, out.total_allocated, out.total_reserved, out.device_type, out.addr = \
        (column(t, b) for t, b in zip("dqqqiq", _scan.memory_columns(samples)))
    ob, tb, out.threads = _scan.owners(tindex.cpu, tindex.parent, samples, tindex.starts, tindex.base, 0.0, None)
    out.owner, out.thread_id = column("i", ob), column("i", tb)
    return out


def _int64(v) -> int:
    """An allocator count as int64 (clamped: a corrupt trace may hold anything)."""
    return max(-2**63, min(2**63 - 1, _int(v)))


def _int(v) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError, OverflowError):
        return 0
