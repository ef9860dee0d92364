"""Every pass over a trace's events, declared once: what it computes, its reference (Python) and
its native (C) implementation, and the one switch between the two.

The native layer is the ``_scan`` extension: server/engine/_scan.c reads the events (the scanner),
server/engine/_passes.c runs the passes over them. It is used where it is built, unless
``PROFD_NATIVE=0`` is in the environment or a test says ``use_native(False)``: then the reader is
msgspec and every pass the Python below. The readers converge right after reading
(loader.load): with the native layer on, a file the scanner declined is decoded by msgspec and its
events re-read by the scanner, so every file has the scanner's events and runs every native pass.
Only a file whose values the scanner's events cannot hold (a string id, a fractional byte count)
keeps msgspec's events, and it runs every reference pass: ``for_events`` decides once per file,
never a mix.

The passes marked ``beside`` read the events with the GIL released, so ``start_work`` can run them
on another thread while Python goes on (the model's build starts the GPU events' sort, the
second thread's nesting and the correlation join so, the analysis the frame shapes and the
allocator's owners); the
reference and a differential run take no thread.

The reference is the oracle: ``differential()`` runs each pass both ways and compares what they
return (tests/test_passes.py, on every shipped and corpus trace). Each pass says what it computes
(``Pass.computes``) so a caller that needs only some results can tell which passes to run.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import os
import re
import struct
import sys
import threading
from array import array
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Optional

import msgspec

try:
    from . import _scan as _BUILT  # type: ignore[attr-defined]  # the C extension: no stub for mypy
except ImportError:  # no compiler where it was installed: the reference alone, slower and larger
    _BUILT = None

NATIVE_SOURCES = ("_scan.c", "_passes.c", "_sha256.c", "_scan.h")


def stale_build(built: str, sources: tuple = NATIVE_SOURCES) -> Optional[str]:
    """Why the extension at ``built`` may not match the Python that calls it, or None: a source
    beside it (a checkout, an editable install) changed after it was built. A ``git pull`` that
    brings new passes without a rebuild left an extension that lacks them, and every analysis
    failed on a missing attribute. A wheel ships no sources beside its build: never stale."""
    here = os.path.dirname(built)
    try:
        at = os.stat(built).st_mtime
        newer = [
            f
            for f in sources
            if os.path.exists(os.path.join(here, f)) and os.stat(os.path.join(here, f)).st_mtime > at
        ]
    except OSError:
        return None
    if not newer:
        return None
    return (
        f"profd's native layer ({os.path.basename(built)}) is older than {', '.join(newer)}: running the "
        "Python passes instead (slower); rebuild it with `pip install -e .`"
    )


STALE = stale_build(_BUILT.__file__) if _BUILT is not None and getattr(_BUILT, "__file__", None) else None
if STALE:
    import warnings

    warnings.warn(STALE, RuntimeWarning, stacklevel=2)
    _BUILT = None

enabled = os.environ.get("PROFD_NATIVE", "").strip() != "0"


def native():
    """The native module (``_scan``) when it is built and switched on, else None."""
    return _BUILT if enabled else None


def own_the_heap() -> bool:
    """In ``profd-client``'s process, before its analyses start threads: the process is the
    engine's alone, and its C heap is kept lean for it.

    - One malloc arena: the threads share the process's one, where glibc gives each thread that
      allocates one of its own and the passes beside the rules kept theirs (3.5 MB of the 51 MB
      tiling's peak). True where that setting was taken (glibc with the native layer built).
    - The heap trimmed after each rule and before the replay (``TRIM_BETWEEN_RULES``; see
      ``trim_malloc``).

    Not where the engine is embedded: a trim walks every free block of the heap, ~6 ms a call in a
    600 MB process whose heap is fragmented (a test runner), 33 calls an analysis. Not in the
    daemon's workers, which trim once a task is done (``pool.release_memory``): one arena there was
    measured with the flood's races mended (ef2ed5b): five alternating pairs of ``make
    bench-daemon`` at 1 GB gave the worker 609-615 against 621-623 MiB of peak RSS, but its analysis
    took longer in four pairs of five (+0.5 to +1.4 s of 5.1-7.9 s), where in profd-client's own
    process the setting is time-neutral (1 GB, three pairs: 5.09-5.15 against 4.99-5.13 s). A
    guess, not tested: the worker shares the cores with the daemon's loop, and a thread preempted
    while it holds the one arena's lock stalls the others."""
    global TRIM_BETWEEN_RULES
    TRIM_BETWEEN_RULES = True
    mod = native()
    return bool(mod is not None and mod.malloc_arenas(1))


TRIM_BETWEEN_RULES = False  # own_the_heap: the engine trims after each rule (analyze_context)
# ... of a trace smaller than this. A trim gives back what the next rule's allocations then fault
# in again, 4 KiB at a time. The trims held the 51 MB tiling's peak RSS ~1 MiB (2% of the file)
# lower, where the interpreter's own ~30 MiB is half the peak; at 255 MB and 1 GB they lowered it
# by -1 to 10 and 5 to 22 MiB (at most 4% of the file, whose peak is ~0.6x the file there) and
# cost 30,000 of the 1 GB analysis's 193,000-195,000 page faults (~2.3 us each on the bench's VM)
# and 0.5-8% of its time in alternating runs (issue 32).
TRIM_BELOW_BYTES = 128 << 20


def trim_malloc() -> bool:
    """Give the free pages of the C allocator's heaps back to the system: False where the C library
    cannot (not glibc). Freed blocks otherwise stay resident in the heap, between the live ones, and
    count in the process' RSS. In profd-client's process (``own_the_heap``) the engine trims after
    each rule (analyze_context): a rule's transients (columns of 0.1-1 MB at the 51 MB tiling) leave
    holes that later, smaller objects fill only in part, and the peak, at the end of the rules, held
    them: 49.4-49.7 against 48.3-48.5 MiB there, at 2-6 ms for the rules' 32 trims. Not for a trace
    of ``TRIM_BELOW_BYTES`` or more, where what a trim gives back is faulted in again by the next
    rule. The daemon's workers trim once a task is done (pool.release_memory). Natively
    where the native layer is built (without the GIL: the passes beside the rules go on), through
    ctypes otherwise."""
    mod = _BUILT  # not native(): a memory setting, the same with the Python passes
    if mod is not None:
        return bool(mod.trim_malloc())
    if not _trim_fn:
        fn = None
        try:
            import ctypes

            fn = ctypes.CDLL(None).malloc_trim
            fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
        except (ImportError, OSError, AttributeError):
            pass
        _trim_fn.append(fn)
    if _trim_fn[0] is None:
        return False
    _trim_fn[0](0)
    return True


_trim_fn: list = []  # [the C library's malloc_trim or None], looked up once (no native layer)


@contextmanager
def use_native(on: bool):
    """Switch the native layer on or off for what runs inside (tests; ``PROFD_NATIVE=0`` is the
    same for a whole process)."""
    global enabled
    was = enabled
    enabled = bool(on)
    try:
        yield
    finally:
        enabled = was


_SIGN = bytes(int(b >= 0x80) for b in range(256))  # a sign byte -> 1 for a negative value
COMPLEMENT = bytes([1, 0]) + bytes(254)  # a 0/1 mask's complement, by bytes.translate


def mask_and(a: bytes, b: bytes) -> bytes:
    """Two 0/1 masks AND'ed, as big integers (one C loop, not one call an event)."""
    return (int.from_bytes(a, "little") & int.from_bytes(b, "little")).to_bytes(len(a), "little")


def mask_or(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(len(a), "little")


def arange(run: "Implementation", n: int) -> array:
    """``array("i", range(n))`` at C speed (an int per item costs ~90 ns): the positions of n set
    bytes."""
    return run.positions(b"\x01" * n)


def negative(col: array) -> bytes:
    """1 where an int32 column is negative: its values' sign bytes, translated (one C loop, not
    one call an event)."""
    size = col.itemsize
    top = size - 1 if sys.byteorder == "little" else 0  # where each value's sign bit is
    # a copy of the column sliced: a strided memoryview's tobytes() copies a byte at a time, 3x
    # slower at 200,000 and 3.9 million items (issue 32)
    return col.tobytes()[top::size].translate(_SIGN)


def column(typecode: str, data) -> array:
    """A native pass's column as an array (int32 "i", int64 "q", float64 "d"): the array it made
    in place (_passes.c, new_column), or a copy of its bytes where it could not."""
    if type(data) is array:
        return data
    out = array(typecode)
    out.frombytes(data)
    return out


# ---- helpers both implementations share -------------------------------------------------------
_ts = attrgetter("ts")
_dur = attrgetter("dur")


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
    return (
        "gpu_memcpy" if name.startswith("Memcpy") else "gpu_memset" if name.startswith("Memset") else "kernel"
    )


def innermost(cpu, parent, starts, base: Optional[int], ts: float, cat: Optional[str], slack: float) -> int:
    """The innermost event of one thread (``cpu[base:base + len(starts)]``, ``starts`` their start
    times) containing ``ts`` (of category ``cat`` if given), or -1."""
    if not starts or base is None:
        return -1
    j = bisect.bisect_right(starts, ts + slack) - 1
    if j < 0:
        return -1
    i = base + j
    while i >= 0:
        e = cpu[i]
        if e.ts + e.dur + slack >= ts and (cat is None or e.cat == cat):
            return i
        i = parent[i]
    return -1


def int64(v) -> int:
    """An allocator count as int64 (clamped: a corrupt trace may hold anything)."""
    try:
        v = int(v or 0)
    except (TypeError, ValueError, OverflowError):
        v = 0
    return max(-(2**63), min(2**63 - 1, v))


NO_LINE = -(2**31)  # never a line key: tokens are >= 0 and ~frame >= -len(cpu)


# ---- the reader's pass ------------------------------------------------------------------------
# depth's rule for an interpreter without the extension, at C speed where it can: escaped bytes
# go, then all but quotes and brackets, then every two quotes in a row (an empty string, or the
# gap between two strings: no bracket either way); the strings are every other piece between the
# quotes left, and the brackets outside them are summed.
_ESCAPED = re.compile(rb"\\.", re.S)
_NOT_SYNTAX = bytes(b for b in range(256) if b not in b'[]{}"')
_BRACKET_STEP = bytes.maketrans(b"[]{}", bytes([1, 255, 1, 255]))


def _depth_ref(block, depth: int, in_str: bool, esc: bool, limit: int) -> tuple[int, bool, bool, bool]:
    block = bytes(block[1:] if esc else block)  # a '\\' that ended the last block takes this byte
    if b"\\" in block:
        block = _ESCAPED.sub(b"", block)
    esc = block.endswith(b"\\")  # unpaired: it takes the next block's first byte
    pieces = block[: -1 if esc else None].translate(None, _NOT_SYNTAX).replace(b'""', b"").split(b'"')
    steps = array("b", b"".join(pieces[1 if in_str else 0 :: 2]).translate(_BRACKET_STEP))
    over = bool(steps) and max(itertools.accumulate(steps, initial=depth)) > limit
    return depth + sum(steps), in_str != (len(pieces) % 2 == 0), esc, over


def _depth_c(block, depth: int, in_str: bool, esc: bool, limit: int) -> tuple[int, bool, bool, bool]:
    return _BUILT.depth(block, depth, in_str, esc, limit)


# ---- the model's passes -----------------------------------------------------------------------
def _classify_ref(events, roles, label_cats, cpu_cats, gpu_cats):
    """The model's first pass: each event by its category's role (``roles``; an unknown category
    by what its events carry), CPU events by thread. Events get the category of their role."""
    by_thread: dict[tuple, list] = {}
    gpu: list = []
    gpu_ann: list = []
    mem_raw: list = []
    flows_s: dict = {}
    flows_f: dict = {}
    thread_names: dict[tuple, str] = {}
    unread: dict[str, int] = {}
    for e in events:
        ph = e.ph
        if ph == "X":
            cat = e.cat
            if cat in roles:
                role = roles[cat]
                if role == "cpu_op" and cat in label_cats and "#" in e.name:
                    role = "user_annotation"
            else:
                role = gpu_role(e)
                if role is None:
                    unread[cat] = unread.get(cat, 0) + 1
            if role is None:
                continue
            if role != cat:
                e.cat = role
            if role in gpu_cats:
                gpu.append(e)
            elif role in cpu_cats:
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


def _classify_c(events, roles, label_cats, cpu_cats, gpu_cats):
    return _BUILT.classify(events, roles, label_cats, cpu_cats, gpu_cats)


def _keep_cats(args) -> Callable[[], None]:
    """classify gives events the category of their role: what undoes it, so the second
    implementation a differential run calls sees the events the first saw."""
    events = args[0]
    cats = [e.cat for e in events]

    def undo() -> None:
        for e, c in zip(events, cats):
            if e.cat is not c:
                e.cat = c

    return undo


def _nest_ref(evs: list, base: int, slack: float, cats: tuple) -> tuple[array, array, array, bytes]:
    """Sort one thread's events (by start, longest first among equal starts, so a parent precedes
    the children that start with it) and give each its innermost enclosing event (base + position,
    -1 at the top; a child may end ``slack`` after its parent), its start, its duration and its
    category's code (1 + its place in ``cats``, 0 for none): (int32, float64, float64 arrays,
    bytes). The columns are made where the events are read anyway (each later pass over an event's
    fields costs a cache miss an event). The children's summed durations, which only the hot lines
    read, are theirs to make (``_child_durations``).

    A python frame that starts inside another python frame but ends after it is one whose exit the
    tracer lost (Dynamo's frame swaps leave ``<built-in method apply ...>`` "running" to the end of
    the trace, and everything after it nested under ``main``): it nests in that frame, its end
    clamped to the frame's for the events that follow."""
    evs.sort(key=_dur, reverse=True)  # two stable sorts: start, then longest first
    evs.sort(key=_ts)
    parent = array("i", [-1]) * len(evs)
    stack: list[int] = []  # positions in evs
    eend = array("d", [0.0]) * len(evs)  # each event's end as nesting sees it (clamped, below)
    for j, e in enumerate(evs):
        end = e.ts + e.dur
        while stack:
            tend = eend[stack[-1]]
            if e.ts < tend and end <= tend + slack:
                break
            if e.ts < tend and e.cat == "python_function" and evs[stack[-1]].cat == "python_function":
                end = tend  # a python frame whose exit the tracer lost (_child_durations clamps it so)
                break
            stack.pop()
        eend[j] = end
        if stack:
            parent[j] = base + stack[-1]
        stack.append(j)
    code = {c: k + 1 for k, c in reversed(list(enumerate(cats)))}  # the first place of a name
    return (
        parent,
        array("d", map(_ts, evs)),
        array("d", map(_dur, evs)),
        bytes(code.get(e.cat, 0) for e in evs),
    )


def _nest_c(evs: list, base: int, slack: float, cats: tuple) -> tuple[array, array, array, bytes]:
    pb, sb, db, kb = _BUILT.nest(evs, base, slack, cats)
    return column("i", pb), column("d", sb), column("d", db), kb


def _by_start_ref(events: list) -> list:
    """The events in start order, those of one start in their order (a stable sort)."""
    return sorted(events, key=_ts)


def _by_start_c(events: list) -> list:
    return _BUILT.by_start(events)


def _frames_ref(cpu, parent, parse_frame):
    """The model's second pass: the parsed python frames (an id per event into a table of distinct
    frames), the user frame around each event, the statement token (the frame's direct child,
    through record_function labels) holding it, the non-python events by name, whether any op
    carries CallFrom, the annotations and the first start."""
    n = len(cpu)
    ids = array("i", [-1]) * n  # index into table of the event's parsed frame
    table: list = []
    id_of: dict = {}
    frame_of = array("i", [-1]) * n
    token = (
        array("i", [-1]) * n
    )  # the direct child of the user frame (through record_function labels) that holds i
    by_name: dict[str, array] = {}
    call_from = False
    for i, e in enumerate(cpu):
        cat = e.cat
        p = parent[i]
        if cat == "python_function":
            fr = parse_frame(e.name)
            if fr is not None:
                k = id_of.get(fr)
                if k is None:
                    k = id_of[fr] = len(table)
                    table.append(fr)
                ids[i] = k
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
    annotations = array("i", [i for i, e in enumerate(cpu) if e.cat == "user_annotation"])
    first_ts = min((e.ts for e in cpu), default=None)
    return ids, table, frame_of, token, by_name, call_from, annotations, first_ts


def _frames_c(cpu, parent, parse_frame):
    fb, fo, tb, cb, names, table, call_from, ub, first_ts = _BUILT.frames(cpu, parent, parse_frame)
    off, idx = _children_c(column("i", cb), len(names))
    by_name = {name: idx[off[k] : off[k + 1]] for k, name in enumerate(names)}
    return (
        column("i", fb),
        table,
        column("i", fo),
        column("i", tb),
        by_name,
        call_from,
        column("i", ub),
        first_ts,
    )


def _launchers_ref(cpu, launches: array, gpu) -> array:
    """Per GPU event the runtime/driver call (among ``launches``) that launched it, by correlation
    id, -1 when none."""
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


def _launchers_c(cpu, launches: array, gpu) -> array:
    return column("i", _BUILT.launchers(cpu, launches, gpu))


def _children_ref(parent: array, n: int) -> tuple[array, array]:
    """Items grouped by parent as one flat index: the items whose parent is i are
    kids[off[i]:off[i + 1]], in order. Parents lie in [0, n)."""
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


def _children_c(parent: array, n: int) -> tuple[array, array]:
    ob, kb = _BUILT.children(parent, n)
    return column("i", ob), column("i", kb)


def _nearest_ref(parent: array, mask: bytes) -> array:
    """Per event, its nearest strict ancestor with a set mask byte (-1 when none)."""
    out = array("i", [-1]) * len(parent)
    for i, p in enumerate(parent):
        if p >= 0:
            out[i] = p if mask[p] else out[p]
    return out


def _nearest_c(parent: array, mask: bytes) -> array:
    return column("i", _BUILT.nearest(parent, mask))


def _inherit_ref(parent: array, frame_of: array, target: array) -> array:
    """target[i] where it is set (>= 0), else the parent's value for events outside any user
    frame, else -1 (fwd_of: the ops a backward node runs belong to its forward op)."""
    out = array("i", [-1]) * len(parent)
    for i, t in enumerate(target):
        if t >= 0:
            out[i] = t
        elif parent[i] >= 0 and frame_of[i] < 0:
            out[i] = out[parent[i]]
    return out


def _inherit_c(parent: array, frame_of: array, target: array) -> array:
    return column("i", _BUILT.inherit(parent, frame_of, target))


def _owners_ref(
    cpu, parent, events, starts: dict, base: dict, slack: float, cat: Optional[str], cpu_starts, durs
):
    """Per event the innermost cpu event of its thread around its start (``innermost``, many at
    once): (owner, thread: an index into threads, threads in order of first appearance).
    ``cpu_starts`` and ``durs``: every cpu event's start and duration, the model's columns (the
    native pass reads them, not the events; here the events are read, as innermost does)."""
    owner, thread = array("i"), array("i")
    threads: list[tuple] = []
    ids: dict[tuple, int] = {}
    for q in events:
        key = thread_key(q.pid, q.tid)
        t = ids.get(key)
        if t is None:
            t = ids[key] = len(threads)
            threads.append(key)
        thread.append(t)
        owner.append(innermost(cpu, parent, starts.get(key), base.get(key), q.ts, cat, slack))
    return owner, thread, threads


def _owners_c(
    cpu, parent, events, starts: dict, base: dict, slack: float, cat: Optional[str], cpu_starts, durs
):
    ob, tb, threads = _BUILT.owners(cpu, parent, events, starts, base, slack, cat, cpu_starts, durs)
    return column("i", ob), column("i", tb), threads


def _memory_columns_ref(samples):
    """The allocator samples as columns: ts, bytes, total allocated, total reserved, device type
    (-1 when absent or out of int32), address; absent counts are 0."""
    ts, nbytes, allocated, reserved, device, addr = (array(t) for t in "dqqqiq")
    for e in samples:
        a = e.args
        ts.append(e.ts)
        nbytes.append(int64(a.mem_bytes))
        allocated.append(int64(a.total_allocated))
        reserved.append(int64(a.total_reserved))
        dt = a.device_type
        device.append(dt if isinstance(dt, int) and -(2**31) <= dt < 2**31 else -1)
        addr.append(int64(a.addr))
    return ts, nbytes, allocated, reserved, device, addr


def _memory_columns_c(samples):
    return tuple(column(t, b) for t, b in zip("dqqqiq", _BUILT.memory_columns(samples)))


def _subtree_ref(off: array, kids: array, i: int) -> list[int]:
    """Event i and everything nested in it: each event's children pushed in order, the last popped
    first."""
    stack, out = [i], []
    while stack:
        j = stack.pop()
        out.append(j)
        stack.extend(kids[off[j] : off[j + 1]])
    return out


def _subtree_c(off: array, kids: array, i: int) -> list[int]:
    return _BUILT.subtree(off, kids, i)


def _cpu_total_ref(cpu, parent, durs, python) -> float:
    """As ``Self CPU time total``: the span of non-python events, without double-counting nesting.
    ``durs`` and ``python`` (1 for a python frame): the model's columns, which the native pass
    reads in place of the events; the events here."""
    total = 0.0
    top_op = [False] * len(cpu)  # event i has a non-python ancestor (or is one)
    for i, e in enumerate(cpu):
        p = parent[i]
        inside = p >= 0 and top_op[p]
        if e.cat != "python_function":
            if not inside:
                total += e.dur
            top_op[i] = True
        else:
            top_op[i] = inside
    return total


def _cpu_total_c(cpu, parent, durs, python) -> float:
    return _BUILT.cpu_total(cpu, parent, durs, python)


def _line_tokens_ref(frame_of: array, fwd_of: array, token: array) -> array:
    """Per cpu event the key its line is cached under in Context.line_key: its statement token,
    else ~frame; NO_LINE when it has no user line."""
    out = array("i", [NO_LINE]) * len(frame_of)
    for i, f in enumerate(frame_of):
        src = i
        if f < 0:  # a backward op: its forward op's line
            src = fwd_of[i]
            f = frame_of[src] if src >= 0 else -1
        if f >= 0:
            t = token[src]
            out[i] = t if t >= 0 else ~f
    return out


def _line_tokens_c(frame_of: array, fwd_of: array, token: array) -> array:
    return column("i", _BUILT.line_tokens(frame_of, fwd_of, token))


def _ancestor_sums_ref(parent: array, own: dict[int, int]) -> dict[int, int]:
    """Each event's value added to it and to every event it is nested in: the events with a
    non-zero total, in index order."""
    total: dict[int, int] = {}
    for i, b in own.items():
        while i >= 0:
            total[i] = total.get(i, 0) + b
            i = parent[i]
    return {i: t for i, t in sorted(total.items()) if t}


def _ancestor_sums_c(parent: array, own: dict[int, int]) -> dict[int, int]:
    if sum(own.values()) >= 2**62:  # int64 sums (a corrupt trace may overflow): Python's ints
        return _ancestor_sums_ref(parent, own)
    evs, tots = _BUILT.ancestor_sums(parent, array("i", own.keys()), array("q", own.values()))
    return dict(zip(column("i", evs), column("q", tots)))


def _ancestors_ref(parent: array, items: array) -> bytes:
    """1 for each item (>= 0) and every event it is nested in: the events with GPU work launched
    at or under them (items: the launch calls). A walk up stops at an event already marked."""
    out = bytearray(len(parent))
    for i in items:
        while 0 <= i < len(out) and not out[i]:
            out[i] = 1
            i = parent[i]
    return bytes(out)


def _ancestors_c(parent: array, items: array) -> bytes:
    return _BUILT.ancestors(parent, items)


def _child_durations(cpu, parent: array, slack: float) -> array:
    """Each cpu event's children's summed duration, as nest nested them: a child's duration, or for
    a python frame whose exit the tracer lost, its time up to its parent's end as nesting saw it
    (nest's clamp: nested, yet not inside). The model keeps no column of it (8 bytes an event, for
    the hot lines alone); the children add in event order, as nest would."""
    out = array("d", [0.0]) * len(cpu)
    clamped: dict[int, float] = {}  # the events nesting clamped (few: lost exits) -> their end as it saw it
    for i, e in enumerate(cpu):
        p = parent[i]
        if p < 0:
            continue
        tend = clamped.get(p)
        if tend is None:
            pe = cpu[p]
            tend = float(pe.ts + pe.dur)  # as nest's column of ends holds it
        dur = e.dur
        if not (e.ts < tend and e.ts + e.dur <= tend + slack):
            clamped[i] = tend
            dur = tend - e.ts
        out[p] += dur
    return out


def _hot_sums_ref(
    cpu,
    gpu,
    parent,
    starts,
    frame_of,
    fwd_of,
    lines,
    keys,
    launched_off,
    launched,
    gpu_class,
    launch_cats,
    durs,
    python,
    launch,
    slack,
):
    """Each event's time onto its hot line (``lines``: its number, -1 for none and for every label;
    ``keys``: the number of its line key, for the outermost call of a line): the hot lines in order
    of first event (their numbers, and that event), and per hot line in that order calls, launches
    (int64), cpu self, cpu total (outermost call of the line), cpu backward, gpu, gpu forward, gpu
    backward (float64), kernel classes and kernel stats; the native pass sums in the same order
    (the same floats). ``starts``, ``durs``, ``python`` and ``launch`` (1 for a python frame, a launch
    call): the model's columns, which the native pass reads in place of the cpu events and
    ``launch_cats``; the events here. ``slack``: nest's, for the self times (``_child_durations``)."""
    child_dur = _child_durations(cpu, parent, slack)
    order, first = array("i"), array("i")
    at: dict[int, int] = {}
    s: list[list] = []
    for i, e in enumerate(cpu):
        line = lines[i]
        if line < 0 or e.cat == "python_function":
            continue  # frames are counted through their ops; a label is not work: what runs inside it is
        h = at.get(line)
        if h is None:
            h = at[line] = len(order)
            order.append(line)
            first.append(i)
            s.append([0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, {}, {}])
        sums = s[h]
        p = parent[i]
        backward = frame_of[i] < 0 and fwd_of[i] >= 0
        top = p < 0 or cpu[p].cat == "python_function" or keys[p] != keys[i]
        self_us = e.dur - child_dur[i]
        if backward:
            if top:
                sums[4] += e.dur
        else:
            sums[2] += max(0.0, self_us)
            if top:
                sums[3] += e.dur
                sums[0] += 1
        if e.cat in launch_cats:
            gs = launched[launched_off[i] : launched_off[i + 1]]
            if gs:
                sums[1] += 1
            classes, stats = sums[8], sums[9]
            for g in gs:
                ge = gpu[g]
                cls = gpu_class[g]
                sums[5] += ge.dur
                if backward:
                    sums[7] += ge.dur
                else:
                    sums[6] += ge.dur
                classes[cls] = classes.get(cls, 0.0) + ge.dur
                st = stats.setdefault(ge.name, [cls, 0, 0.0])
                st[1] += 1
                st[2] += ge.dur
    cols = [array(t, [v[k] for v in s]) for k, t in enumerate("qqdddddd")]
    return (order, first, *cols, [v[8] for v in s], [v[9] for v in s])


def _hot_sums_c(*args):  # _hot_sums_ref's arguments, in its order
    order, first, *sums, kcs, kss = _BUILT.hot_lines(*args)
    return (
        column("i", order),
        column("i", first),
        *(column(t, b) for t, b in zip("qqdddddd", sums)),
        kcs,
        kss,
    )


def _line_key_ids_ref(line_tokens: array, frame_of: array, place: array, tokpos: array, base: array) -> array:
    """Per item of ``line_tokens`` (each event's, or some: Context._token_groups numbers call
    groups so) the number of its line key (Context.line_key_ids) from its frame's place
    (``place``, frame_shapes') in ``base``: for a statement token's events base + 1 + the token's
    position among its frame's tokens (``tokpos``), for a frame's own line base; -1 without a
    line, the frame's negative base (-2) where the key is asked event by event."""
    out = array("i", [-1]) * len(line_tokens)
    for i, c in enumerate(line_tokens):
        if c == NO_LINE:
            continue
        f = frame_of[c] if c >= 0 else ~c
        b = base[place[f]] if f >= 0 and place[f] >= 0 else -2
        out[i] = b if b < 0 or c < 0 else b + 1 + tokpos[c] if tokpos[c] >= 0 else -2
    return out


def _line_key_ids_c(line_tokens: array, frame_of: array, place: array, tokpos: array, base: array) -> array:
    return column("i", _BUILT.line_key_ids(line_tokens, frame_of, place, tokpos, base))


def _frame_shapes_ref(cpu, off: array, kids: array, frame_of: array, fids: array):
    """The user frames in event order (``frames``), each one's place among them (``place``, per
    event, -1 for the others), its shape (``shape``: frames whose subtrees are equal, every event's
    category, name, parsed frame (``fids``), input dims and children in order, share a number, by
    first appearance), its statement tokens (statements.frame_tokens: its children in order,
    looking through record_function labels) as one flat index (``tok_off``, ``toks``), and per
    event its position among its frame's tokens (``tokpos``, -1 for none), and per token its own
    subtree's shape (``tokshape``, numbered by first appearance among the tokens: what a token
    calls is a function of it): what the statements of one frame are found from, so frames of one
    shape are resolved once (int32 columns)."""
    n = len(cpu)
    frames = array("i", [i for i in range(n) if frame_of[i] == i])
    place = array("i", [-1]) * n
    tokpos = array("i", [-1]) * n
    shape, tok_off, toks, tokshape = array("i"), array("i"), array("i"), array("i")
    shapes: dict[tuple, int] = {}
    subtrees: dict[tuple, int] = {}
    for k, f in enumerate(frames):
        place[f] = k
        tok_off.append(len(toks))
        stack = list(reversed(kids[off[f] : off[f + 1]]))
        while stack:
            i = stack.pop()
            tokpos[i] = len(toks) - tok_off[-1]
            toks.append(i)
            tokshape.append(subtrees.setdefault(_subtree_atoms(cpu, off, kids, fids, i), len(subtrees)))
            if cpu[i].cat == "user_annotation":
                stack.extend(reversed(kids[off[i] : off[i + 1]]))
        shape.append(shapes.setdefault(_subtree_atoms(cpu, off, kids, fids, f), len(shapes)))
    tok_off.append(len(toks))
    return frames, place, shape, tok_off, toks, tokpos, tokshape


def _subtree_atoms(cpu, off: array, kids: array, fids: array, f: int) -> tuple:
    """Event ``f``'s subtree in preorder, each event as what a shape compares of it."""
    out = []
    stack = [f]
    while stack:
        i = stack.pop()
        e = cpu[i]
        a = e.args
        dims = bytes(a.input_dims) if a is not None else b""
        out.append((off[i + 1] - off[i], e.cat, e.name, fids[i], dims))
        stack.extend(reversed(kids[off[i] : off[i + 1]]))
    return tuple(out)


def _frame_shapes_c(cpu, off: array, kids: array, frame_of: array, fids: array):
    return tuple(column("i", b) for b in _BUILT.frame_shapes(cpu, off, kids, frame_of, fids))


# The replay's kinds of call (stepmodel's NONBLOCKING, BLOCKING, SYNC, QUEUED)
_NONBLOCKING, _BLOCKING, _SYNC, _QUEUED = 0, 1, 2, 3


def _replay_rows_ref(
    idx, starts, durs, step_starts, step_ends, sync, blocking, off, launched, gpu, slack, queue_wait
):
    """The replay's calls (stepmodel.StepModel): of the launch and sync calls ``idx`` (cpu events,
    ``starts`` and ``durs`` their columns; ``sync``, ``blocking``: per item, a sync call, a blocking
    copy) those that start in a step (``step_of``), each step's in start order (ties in idx order),
    as rows: the cpu index, the kind (a sync; a call that ended within ``slack`` of its GPU work's
    end or a blocking copy; one longer than ``queue_wait`` that waited for queue room; else
    non-blocking), the profiled CPU time before it (since the step's start or the previous call:
    its end where that waited, else its start), its GPU events (``launched``, by ``off``; none for a
    sync) and their durations; per step its first row, its CPU time between calls and after the last
    (summed row by row) and the time after the last; and the launch-to-start time of each GPU event
    that started after its call did, in idx order step by step (int32, bytes, float64, int32,
    float64, float64, int32, int32, float64, float64)."""
    step = _step_of_ref(idx, starts, step_starts, step_ends)
    per: list[list] = [[] for _ in step_starts]  # per step its calls in idx order: (event, kind, GPU events)
    for k, i in enumerate(idx):
        if step[k] < 0:
            continue
        if sync[k]:
            per[step[k]].append((i, _SYNC, []))
            continue
        gs = list(launched[off[i] : off[i + 1]])
        last = max((gpu[g].ts + gpu[g].dur for g in gs), default=None)
        if blocking[k] or (last is not None and starts[i] + durs[i] >= last - slack):
            kind = _BLOCKING
        else:
            kind = _QUEUED if durs[i] > queue_wait else _NONBLOCKING
        per[step[k]].append((i, kind, gs))
    lats = array(
        "d",
        [gpu[g].ts - starts[i] for calls in per for i, _, gs in calls for g in gs if gpu[g].ts >= starts[i]],
    )
    rows, kinds, pre, step_rows, cpu_us, tail = (
        array("i"),
        bytearray(),
        array("d"),
        array("i"),
        array("d"),
        array("d"),
    )
    op_off, ops, op_dur = array("i", [0]), array("i"), array("d")
    for s, calls in enumerate(per):
        calls.sort(key=lambda c: starts[c[0]])
        step_rows.append(len(rows))
        total, anchor = 0.0, step_starts[s]
        for i, kind, gs in calls:
            p = max(0.0, starts[i] - anchor)
            total += p
            anchor = starts[i] + durs[i] if kind != _NONBLOCKING else starts[i]
            rows.append(i)
            kinds.append(kind)
            pre.append(p)
            ops.extend(gs)
            op_dur.extend(gpu[g].dur for g in gs)
            op_off.append(len(ops))
        t = max(0.0, step_ends[s] - anchor)
        tail.append(t)
        cpu_us.append(total + t)
    step_rows.append(len(rows))
    return rows, bytes(kinds), pre, step_rows, cpu_us, tail, op_off, ops, op_dur, lats


def _replay_rows_c(
    idx, starts, durs, step_starts, step_ends, sync, blocking, off, launched, gpu, slack, queue_wait
):
    got = _BUILT.replay_rows(
        idx, starts, durs, step_starts, step_ends, sync, blocking, off, launched, gpu, slack, queue_wait
    )
    return tuple(b if t == "b" else column(t, b) for t, b in zip("ibdiddiidd", got))


def _replay_ref(
    pre, kind, op_off, op_stream, op_dur, step_rows, scale, gscale, tail, lat, keep, drop, nonblock
):
    """The replayed mean step (stepmodel.StepModel.run) over its rows as columns: per row (a
    launch or sync call, the steps' rows one after another, ``step_rows`` their offsets) the CPU
    time before it, its kind and its GPU ops (``op_off`` offsets into the ops' stream ids and
    durations); per step the CPU and GPU scale and the CPU time after its last call; and what a
    change makes of each row (its share of CPU time kept, dropped, no longer blocking; the ops'
    durations are the changed ones). The CPU clock walks the calls, each stream is free once its
    last op ended; a sync waits for every stream, a blocking call for its own ops."""
    c = 0.0
    free: dict[int, float] = {}  # stream -> when its last op ends, streams in order of first use
    for k in range(len(step_rows) - 1):
        sc, gs = scale[k], gscale[k]
        for r in range(step_rows[k], step_rows[k + 1]):
            c += pre[r] * sc * keep[r]
            if drop[r]:
                continue
            opend = c
            for o in range(op_off[r], op_off[r + 1]):
                s = op_stream[o]
                t = free.get(s, 0.0)
                t = (c + lat if c + lat > t else t) + op_dur[o] * gs
                free[s] = t
                if t > opend:
                    opend = t
            kd = kind[r]
            if kd == _NONBLOCKING or kd == _QUEUED or nonblock[r]:
                continue
            if kd == _SYNC:
                for t in free.values():
                    if t > c:
                        c = t
            else:
                c = opend
        c += tail[k] * sc
    return max(c, max(free.values(), default=c)) / (len(step_rows) - 1)


def _replay_c(
    pre, kind, op_off, op_stream, op_dur, step_rows, scale, gscale, tail, lat, keep, drop, nonblock
):
    return _BUILT.replay(
        pre, kind, op_off, op_stream, op_dur, step_rows, scale, gscale, tail, lat, keep, drop, nonblock
    )


# ---- the rules' passes ------------------------------------------------------------------------
def _kernel_configs_ref(gpu, classes, skip, launcher, ops_above, cpu, lines, frame_of, fwd_of):
    """kernel-jitter's configurations: each kernel not of class ``skip`` keyed by (name, grid,
    block, the launching op's name, the id of the launch's line group ``lines[g]`` (int32),
    launched in backward), the kernels' indices per key in order of first run; and per GPU event
    the launching op's Input Dims (raw bytes) where it has some, else None."""
    configs: dict[tuple, list] = {}
    dims: list = [None] * len(gpu)
    for g, e in enumerate(gpu):
        if e.cat != "kernel" or classes[g] == skip:
            continue
        a = e.args
        li = launcher[g]
        op = ops_above[li] if li >= 0 else -1
        if op >= 0:
            oa = cpu[op].args
            if oa is not None and oa.input_dims:
                dims[g] = bytes(oa.input_dims)
        key = (
            e.name,
            bytes(a.grid) if a else b"",
            bytes(a.block) if a else b"",
            cpu[op].name if op >= 0 else "",
            lines[g],
            li >= 0 and frame_of[li] < 0 and fwd_of[li] >= 0,
        )
        configs.setdefault(key, []).append(g)
    return configs, dims


def _kernel_configs_c(gpu, classes, skip, launcher, ops_above, cpu, lines, frame_of, fwd_of):
    return _BUILT.kernel_configs(gpu, classes, skip, launcher, ops_above, cpu, lines, frame_of, fwd_of)


def _line_gpu_sums_ref(launcher: array, line_tokens: array, gpu) -> tuple[array, array, array]:
    """Each GPU event's duration onto the line key (``line_tokens``) of the call that launched it:
    the keys in order of first event, their sums (in event order) and the launch call of each
    key's first event (int32, float64, int32)."""
    keys, reps = array("i"), array("i")
    at: dict[int, int] = {}
    sums: list[float] = []
    for li, ge in zip(launcher, gpu):
        if li >= 0:
            c = line_tokens[li]
            if c != NO_LINE:
                k = at.get(c)
                if k is None:
                    k = at[c] = len(keys)
                    keys.append(c)
                    reps.append(li)
                    sums.append(0.0)
                sums[k] += ge.dur
    return keys, array("d", sums), reps


def _line_gpu_sums_c(launcher: array, line_tokens: array, gpu) -> tuple[array, array, array]:
    kb, sb, rb = _BUILT.line_gpu_sums(launcher, line_tokens, gpu)
    return column("i", kb), column("d", sb), column("i", rb)


def _launch_runs_ref(gpu, launcher: array, frame_of: array, lines: array, steps: list, cpu, durs) -> dict:
    """launch-storm's runs: each kernel launched from a user frame, in a step and on a line, as
    (duration, its launch call's duration, launch call) under its line group's id (``lines``; -1:
    none) and (kernel name, step number) (``steps``: per GPU event the step number of its launch,
    None outside every step), in order of first run. ``durs``: each cpu event's duration (the
    column the native pass reads; the events here)."""
    per: dict = {}
    for g, e in enumerate(gpu):
        li = launcher[g]
        if li < 0 or frame_of[li] < 0 or e.cat != "kernel":
            continue
        k, step = lines[g], steps[g]
        if k < 0 or step is None:
            continue
        per.setdefault(k, {}).setdefault((e.name, step), []).append((e.dur, cpu[li].dur, li))
    return per


def _launch_runs_c(gpu, launcher: array, frame_of: array, lines: array, steps: list, cpu, durs) -> dict:
    return _BUILT.launch_runs(gpu, launcher, frame_of, lines, steps, cpu, durs)


def _run_medians_ref(runs: list) -> tuple:
    """launch-storm's medians of its runs (``launch_runs``' tuples): of the kernels' durations and
    of their launch calls' (``rules.util.median``, the mean of the middle two of an even count)."""
    from .rules.util import median

    return median([x[0] for x in runs]), median([x[1] for x in runs])


def _run_medians_c(runs: list) -> tuple:
    # by selection, not two sorts; where a sort's order would show (a zero in the middle: 0.0 and
    # -0.0 compare equal) or the values are not floats, the reference decides
    got = _BUILT.run_medians(runs)
    return got if got is not None else _run_medians_ref(runs)


def _fixed_points_ref(col: array) -> bytes:
    """1 where ``col[i] == i``: the events that are their own statement token (``token``), the
    user frames (``frame_of``)."""
    return bytes(map(operator.eq, col, range(len(col))))


def _fixed_points_c(col: array) -> bytes:
    return _BUILT.fixed_points(col)


def _positions_ref(mask: bytes) -> array:
    """The positions of the set bytes of a mask, in order (its events as indices)."""
    return array("i", itertools.compress(range(len(mask)), mask))


def _positions_c(mask: bytes) -> array:
    return column("i", _BUILT.positions(mask))


def _take_ref(col: array, idx: array, default: int) -> array:
    """``col[i]`` for each ``i`` of ``idx``, ``default`` where ``i`` is negative: a column read
    through another (the launch calls' line tokens per GPU event)."""
    return array("i", [col[i] if i >= 0 else default for i in idx])


def _take_c(col: array, idx: array, default: int) -> array:
    return column("i", _BUILT.take(col, idx, default))


def _codes_ref(col: array) -> tuple[array, array]:
    """The column's distinct values in order of first appearance, as the position of each one's
    first appearance (``first``), and per item the place of its value among them (``code``)."""
    first, code = array("i"), array("i")
    at: dict[int, int] = {}
    for k, v in enumerate(col):
        c = at.get(v)
        if c is None:
            c = at[v] = len(first)
            first.append(k)
        code.append(c)
    return first, code


def _codes_c(col: array) -> tuple[array, array]:
    fb, cb = _BUILT.codes(col)
    return column("i", fb), column("i", cb)


def _step_of_ref(idx: array, starts: array, step_starts: array, step_ends: array) -> array:
    """Per item the step (its place in the steps, ``model.step_at``) the start (``starts``) of cpu
    event ``idx[k]`` falls in, -1 for none or a negative ``idx[k]`` (the steps of the GPU events'
    launch calls)."""
    out = array("i")
    for i in idx:
        k = -1
        if i >= 0:
            t = starts[i]
            j = bisect.bisect_right(step_starts, t) - 1
            if j >= 0 and t <= step_ends[j]:
                k = j
        out.append(k)
    return out


def _step_of_c(idx: array, starts: array, step_starts: array, step_ends: array) -> array:
    return column("i", _BUILT.step_of(idx, starts, step_starts, step_ends))


def _launch_delays_ref(gpu, launcher: array, cpu, min_delay: float) -> tuple[array, array]:
    """gpu-contention's launch-to-start delays: per launched GPU event but each kernel name's first
    (a kernel's first launch loads its module), its start less its launch call's start; and the
    events among them that waited ``min_delay`` or more and started after their launch call
    returned (float64, int32)."""
    delays, late = array("d"), array("i")
    seen: set = set()
    for g, e in enumerate(gpu):
        li = launcher[g]
        if li < 0:
            continue
        if e.name not in seen:
            seen.add(e.name)
            continue
        call = cpu[li]
        d = e.ts - call.ts
        delays.append(d)
        if d >= min_delay and e.ts > call.ts + call.dur:
            late.append(g)
    return delays, late


def _launch_delays_c(gpu, launcher: array, cpu, min_delay: float) -> tuple[array, array]:
    db, lb = _BUILT.launch_delays(gpu, launcher, cpu, min_delay)
    return column("d", db), column("i", lb)


def _group_min_ref(groups: array, idx: array, values: array, lo: int, hi: int, n: int) -> tuple[array, bytes]:
    """Per group in [0, n) the least ``values[idx[k]]`` over its items ``k`` whose ``idx[k]`` lies
    in [lo, hi) (each step's first launch from the main thread's events), 0.0 for none, and whether
    it had any (float64, bytes)."""
    mins = array("d", [0.0]) * n
    seen = bytearray(n)
    for g, i in zip(groups, idx):
        if 0 <= g < n and lo <= i < hi:
            v = values[i]
            if not seen[g] or v < mins[g]:
                mins[g] = v
                seen[g] = 1
    return mins, bytes(seen)


def _group_min_c(groups: array, idx: array, values: array, lo: int, hi: int, n: int) -> tuple[array, bytes]:
    mb, sb = _BUILT.group_min(groups, idx, values, lo, hi, n)
    return column("d", mb), sb


def _gpu_under_all_ref(off: array, kids: array, launch_off: array, launched: array, roots: array) -> array:
    """For each root in order, the GPU events launched from it or anything nested in it
    (``model.gpu_under``: its subtree in ``subtree``'s order, each event's launches in order), one
    after another."""
    out = array("i")
    for r in roots:
        for j in _subtree_ref(off, kids, r):
            out.extend(launched[launch_off[j] : launch_off[j + 1]])
    return out


def _gpu_under_all_c(off: array, kids: array, launch_off: array, launched: array, roots: array) -> array:
    return column("i", _BUILT.gpu_under_all(off, kids, launch_off, launched, roots))


def _iterations_ref(
    parent: array, token: array, frame_of: array, op_mask: bytes, py_mask: bytes, lis: array
) -> tuple[array, array]:
    """launch-storm's loop iteration of each launch call of ``lis``, as two cpu-long columns (-1
    elsewhere): per innermost Python call, its outermost op below the Python frame (itself
    included; else itself), and per run of its user frame's statement, the event below the user
    frame (``frame_of``) reached climbing from its statement token (else itself)."""
    n = len(parent)
    ops, runs = array("i", [-1]) * n, array("i", [-1]) * n
    for li in lis:
        if li < 0 or ops[li] >= 0:
            continue
        best = li if op_mask[li] else -1
        a = parent[li]
        while a >= 0 and not py_mask[a]:
            if op_mask[a]:
                best = a
            a = parent[a]
        ops[li] = best if best >= 0 else li
        t = token[li]
        i = t if t >= 0 else li
        f = frame_of[li]
        while parent[i] >= 0 and parent[i] != f:
            i = parent[i]
        runs[li] = i
    return ops, runs


def _iterations_c(
    parent: array, token: array, frame_of: array, op_mask: bytes, py_mask: bytes, lis: array
) -> tuple[array, array]:
    ob, rb = _BUILT.iterations(parent, token, frame_of, op_mask, py_mask, lis)
    return column("i", ob), column("i", rb)


def _points_into_ref(col: array, mask: bytes) -> array:
    """The items whose value is an index with a set ``mask`` byte, in order (the backward events
    whose forward op, ``fwd_of``, is one of a set)."""
    return array("i", [i for i, v in enumerate(col) if 0 <= v < len(mask) and mask[v]])


def _points_into_c(col: array, mask: bytes) -> array:
    return column("i", _BUILT.points_into(col, mask))


def _owner_sums_ref(rows: array, owner: array, nbytes: array) -> dict[int, int]:
    """Over the rows (of the allocator samples' columns), the positive byte counts summed per
    owner (the innermost enclosing event, >= 0), the owners in order of first row."""
    out: dict[int, int] = {}
    for k in rows:
        o, b = owner[k], nbytes[k]
        if o >= 0 and b > 0:
            out[o] = out.get(o, 0) + b
    return out


def _owner_sums_c(rows: array, owner: array, nbytes: array) -> dict[int, int]:
    got = _BUILT.owner_sums(rows, owner, nbytes)
    if got is None:  # an int64 sum overflows (a corrupt trace): Python's ints
        return _owner_sums_ref(rows, owner, nbytes)
    return dict(zip(column("i", got[0]), column("q", got[1])))


def _scatter_sums_ref(items: array, values: array, codes: array, off: array, targets: array, n: int) -> array:
    """Per target in [0, n) the values of the items (``values[items[k]]``) added item after item
    onto each target of the item's code (``targets[off[c]:off[c + 1]]``; a negative code: none),
    from 0.0: Python's additions one after another, which the native pass makes in the same order
    (the hot lines' inclusive times: each line's statements and calls, what its chain launched)."""
    acc = [0.0] * n
    for i, c in zip(items, codes):
        if c >= 0:
            v = values[i]
            for t in targets[off[c] : off[c + 1]]:
                acc[t] += v
    return array("d", acc)


def _scatter_sums_c(items: array, values: array, codes: array, off: array, targets: array, n: int) -> array:
    return column("d", _BUILT.scatter_sums(items, values, codes, off, targets, n))


# ---- the summary analyses and the module tree -------------------------------------------------
def _pairs(flat: array):
    """A flat column's (start, end) pairs, in order."""
    it = iter(flat)
    return zip(it, it)


class Spans:
    """(start, end) pairs held as one float64 column, start and end alternating (``flat``): the
    GPU events' spans and the unions the analyses keep, 16 bytes a span where a list of float
    tuples took ~100 (a 255 MB trace's spans and unions were 25 MB of tuples). Reads as a sequence
    of (start, end) tuples. ``prefix``: covered's index, built once (analyses.index_of); ``run``: the
    passes that made it, which build the index too."""

    __slots__ = ("flat", "prefix", "run")

    def __init__(self, flat: Optional[array] = None, run: Optional["Implementation"] = None):
        self.flat = array("d") if flat is None else flat
        self.prefix: Optional[tuple] = None
        self.run = run

    @classmethod
    def of(cls, pairs, run: Optional["Implementation"] = None) -> "Spans":
        """The spans of an iterable of (start, end) pairs."""
        return cls(array("d", itertools.chain.from_iterable(pairs)), run)

    def __len__(self) -> int:
        return len(self.flat) // 2

    def __iter__(self):
        return _pairs(self.flat)

    def __getitem__(self, k: int) -> tuple[float, float]:
        n = len(self)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError("span index out of range")
        return (self.flat[2 * k], self.flat[2 * k + 1])

    def __add__(self, other: "Spans") -> "Spans":
        """The spans of both, in order (not merged)."""
        return Spans(self.flat + other.flat, self.run)

    def __eq__(self, other) -> bool:
        if isinstance(other, Spans):
            return self.flat == other.flat
        return isinstance(other, list) and list(self) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Spans({list(self)!r})"


def _spans_ref(events) -> array:
    """Each event's (start, end), start and end alternating (Spans.flat)."""
    out = array("d")
    for e in events:
        out.append(e.ts)
        out.append(e.ts + e.dur)
    return out


def _spans_c(events) -> array:
    return column("d", _BUILT.spans(events))


def _durations_ref(events) -> array:
    """Each event's duration, as one column (analyses.analyze's GPU time)."""
    return array("d", [e.dur for e in events])


def _durations_c(events) -> array:
    return column("d", _BUILT.durations(events))


def _selected(flat: array, mask: Optional[bytes]):
    if len(flat) % 2 or (mask is not None and len(mask) != len(flat) // 2):
        raise ValueError("spans: a flat column of (start, end) pairs, and a mask byte a span")
    return _pairs(flat) if mask is None else itertools.compress(_pairs(flat), mask)


def _merge_pairs(pairs) -> array:
    out: list[list] = []
    for a, b in sorted(pairs):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1][1] = b
        else:
            out.append([a, b])
    return array("d", itertools.chain.from_iterable(out))


def _merge_ref(flat: array, mask: Optional[bytes]) -> array:
    """Union of the spans of a flat column (those whose mask byte is set; all for None), sorted
    (as tuples compare), touching spans joined, as a flat column (analyses.merge)."""
    return _merge_pairs(_selected(flat, mask))


def _merge_c(flat: array, mask: Optional[bytes]) -> array:
    got = _BUILT.merge(flat, mask)
    return _merge_ref(flat, mask) if got is None else column("d", got)  # None: a NaN


def _merge_groups_ref(flat: array, groups: array, mask: bytes, n: int) -> list:
    """Per group in [0, n), the union (``merge``) of the spans whose mask byte is set and whose
    group is that one (step_gpu: each step's kernels, and its copies), flat columns."""
    if len(flat) != 2 * len(groups) or len(mask) != len(groups) or n < 0:
        raise ValueError("merge_groups: sizes differ")
    per: list[list] = [[] for _ in range(n)]
    for v, g, k in zip(_pairs(flat), groups, mask):
        if k and 0 <= g < n:
            per[g].append(v)
    return [_merge_pairs(p) for p in per]


def _merge_groups_c(flat: array, groups: array, mask: bytes, n: int) -> list:
    got = _BUILT.merge_groups(flat, groups, mask, n)
    return _merge_groups_ref(flat, groups, mask, n) if got is None else [column("d", b) for b in got]


def _span_index_ref(flat: array) -> tuple[array, array, array]:
    """covered's index of merged spans: their starts, their ends and the running sum of their
    lengths from 0.0."""
    if len(flat) % 2:
        raise ValueError("span_index: (start, end) pairs")
    pre = array("d", [0.0])
    for x, y in _pairs(flat):
        pre.append(pre[-1] + (y - x))
    return flat[0::2], flat[1::2], pre


def _span_index_c(flat: array) -> tuple[array, array, array]:
    sb, eb, pb = _BUILT.span_index(flat)
    return column("d", sb), column("d", eb), column("d", pb)


def covered_in(starts: array, ends: array, pre: array, lo: float, hi: float) -> float:
    """How much of [lo, hi] merged spans cover, from their index (``span_index``): two bisections
    on a prefix sum (analyses.covered, and idle_waits' reference)."""
    if hi <= lo or not starts:
        return 0.0
    i = bisect.bisect_right(ends, lo)  # first span ending after lo
    j = bisect.bisect_left(starts, hi)  # spans from j on start at or after hi
    if j <= i:
        return 0.0
    total = pre[j] - pre[i]
    total -= max(0.0, lo - starts[i])
    total -= max(0.0, ends[j - 1] - hi)
    return total


def _idle_waits_ref(cands, gpu_flat, launcher, cpu_ts, cpu_dur, index: tuple, share: float) -> tuple:
    """gpu-contention's late launches: of the GPU events ``cands``, those that waited while the
    lane ``index`` (span_index of merged spans) covered under ``share`` of the wait after their
    launch call returned; each one's delay from its launch call's start, and the event (float64,
    int32 arrays, in the candidates' order). The columns: the GPU events' spans, their launch
    calls, the cpu events' starts and durations."""
    delays, late = array("d"), array("i")
    starts, ends, pre = index
    for g in cands:
        ts, li = gpu_flat[2 * g], launcher[g]
        call_ts = cpu_ts[li]
        wait_from = call_ts + cpu_dur[li]
        if covered_in(starts, ends, pre, wait_from, ts) < share * (ts - wait_from):
            delays.append(ts - call_ts)
            late.append(g)
    return delays, late


def _idle_waits_c(cands, gpu_flat, launcher, cpu_ts, cpu_dur, index: tuple, share: float) -> tuple:
    db, gb = _BUILT.idle_waits(cands, gpu_flat, launcher, cpu_ts, cpu_dur, *index, share)
    return column("d", db), column("i", gb)


def _gpu_keys_ref(gpu, launcher: array, above: array, cpu) -> tuple[list, array]:
    """Per GPU event the key it is classified by, (name, category, the name of the op above its
    launch call or None), as a number into the distinct keys in order of first appearance."""
    keys: list[tuple] = []
    codes = array("i")
    index: dict[tuple, int] = {}
    for e, li in zip(gpu, launcher):
        op = above[li] if li >= 0 else -1
        key = (e.name, e.cat, cpu[op].name if op >= 0 else None)
        k = index.get(key)
        if k is None:
            k = index[key] = len(keys)
            keys.append(key)
        codes.append(k)
    return keys, codes


def _gpu_keys_c(gpu, launcher: array, above: array, cpu) -> tuple[list, array]:
    keys, cb = _BUILT.gpu_keys(gpu, launcher, above, cpu)
    return keys, column("i", cb)


def _marked_ref(cpu, mask: bytes, prefix: str) -> array:
    """The events with a set mask byte whose name starts with ``prefix``, in order (the module
    markers among the python events)."""
    return array(
        "i", [i for i in itertools.compress(range(len(mask)), mask) if cpu[i].name.startswith(prefix)]
    )


def _marked_c(cpu, mask: bytes, prefix: str) -> array:
    return column("i", _BUILT.marked(cpu, mask, prefix))


def _module_nodes_ref(idx: array, frame_of: array, fwd_of: array, above: array, node_of: array, direct: bool):
    """Per item the module node that cpu event ``idx[k]`` ran in (-1 for none, or a negative idx): a
    backward event by its forward op; its own node where ``direct`` and it has one (a marker), else
    its nearest marker's (``ModuleIndex.node_at``); and whether it was a backward event (int32,
    bytes)."""
    nodes, back = array("i"), bytearray()
    for i in idx:
        k, b = -1, 0
        if i >= 0:
            if frame_of[i] < 0 and fwd_of[i] >= 0:
                i, b = fwd_of[i], 1
            if direct and node_of[i] >= 0:
                k = node_of[i]
            else:
                a = above[i]
                k = node_of[a] if a >= 0 else -1
        nodes.append(k)
        back.append(b)
    return nodes, bytes(back)


def _module_nodes_c(idx: array, frame_of: array, fwd_of: array, above: array, node_of: array, direct: bool):
    nb, bb = _BUILT.module_nodes(idx, frame_of, fwd_of, above, node_of, direct)
    return column("i", nb), bb


def _module_gpu_ref(gpu, classes: list, nodes: array, backward: bytes, launcher: array, n: int):
    """build_tree's own GPU sums per module node: each launched GPU event's time to its node
    (``nodes``, -1 for none), forward or backward (``backward``); the launch calls per node; and
    per node its kernel classes [(class, kernels, time)] and its kernels [(name, class, count,
    time)] in order of first appearance, times summed in event order."""
    fwd, bwd, launches = array("d", [0.0]) * n, array("d", [0.0]) * n, array("i", [0]) * n
    by_class: list[dict] = [{} for _ in range(n)]
    by_name: list[dict] = [{} for _ in range(n)]
    launched: set[int] = set()
    for e, cls, k, b, li in zip(gpu, classes, nodes, backward, launcher):
        if li < 0 or not 0 <= k < n:
            continue
        if b:
            bwd[k] += e.dur
        else:
            fwd[k] += e.dur
        if li not in launched:
            launched.add(li)
            launches[k] += 1
        c = by_class[k].get(cls)
        if c is None:
            c = by_class[k][cls] = [cls, 0, 0.0]
        c[1] += 1
        c[2] += e.dur
        st = by_name[k].get(e.name)
        if st is None:
            st = by_name[k][e.name] = [e.name, cls, 0, 0.0]
        st[2] += 1
        st[3] += e.dur
    tables = ([[tuple(v) for v in d.values()] for d in t] for t in (by_class, by_name))
    return (fwd, bwd, launches, *tables)


def _module_gpu_c(gpu, classes: list, nodes: array, backward: bytes, launcher: array, n: int):
    fb, bb, lb, by_class, by_name = _BUILT.module_gpu(gpu, classes, nodes, backward, launcher, n)
    return column("d", fb), column("d", bb), column("i", lb), by_class, by_name


def _survivors_ref(rows: array, ts: array, nbytes: array, addr: array, step_starts: array, step_ends: array):
    """memory-growth's allocations (among ``rows`` of the allocator samples' columns, in time
    order) that are never freed later: no free of their block (by address) after them; inside a
    step but the last; with the step each falls in (int32, int32)."""
    last_free: dict[int, float] = {}
    for k in rows:
        if nbytes[k] < 0 and addr[k]:
            last_free[addr[k]] = ts[k]  # rows are in time order: the last free of the block
    out, steps = array("i"), array("i")
    for k in rows:
        b, t = nbytes[k], ts[k]
        if b <= 0 or not addr[k] or last_free.get(addr[k], -1.0) > t:
            continue
        s = bisect.bisect_right(step_starts, t) - 1
        if s < 0 or t > step_ends[s] or s == len(step_starts) - 1:
            continue
        out.append(k)
        steps.append(s)
    return out, steps


def _survivors_c(rows: array, ts: array, nbytes: array, addr: array, step_starts: array, step_ends: array):
    rb, sb = _BUILT.survivors(rows, ts, nbytes, addr, step_starts, step_ends)
    return column("i", rb), column("i", sb)


def _group_by_ref(items: list, keys: list) -> list:
    """The items grouped by ``keys[item]`` (equal by value, as a dict's keys), the groups in order
    of first appearance (kernel-jitter's problems by the launching op's input shapes)."""
    by: dict = {}
    for i in items:
        by.setdefault(keys[i], []).append(i)
    return list(by.values())


def _group_by_c(items: list, keys: list) -> list:
    return _BUILT.group_by(items, keys)


def _gaps_ref(flat: array, lo: float, hi: float) -> list:
    """The holes in [lo, hi] that merged spans leave (analyses.gaps)."""
    if len(flat) % 2:
        raise ValueError("spans: a flat column of (start, end) pairs")
    out, cur = [], lo
    for a, b in _pairs(flat):
        if b <= cur:
            continue
        if a >= hi:
            break
        if a > cur:
            out.append((cur, a))
        cur = max(cur, b)
    if cur < hi:
        out.append((cur, hi))
    return out


def _floats(*values) -> bool:
    """Whether the native span passes can take these bounds: floats (an int bound would come back
    a float)."""
    return all(type(v) is float for v in values)


def _gaps_c(flat: array, lo: float, hi: float) -> list:
    got = _BUILT.gaps(flat, lo, hi) if _floats(lo, hi) else None
    return _gaps_ref(flat, lo, hi) if got is None else got


def _long_gaps_ref(flat: array, lo: float, hi: float, step_starts: array, step_ends: array, share: float):
    """The holes (``gaps``) that start inside a step (``model.step_at``) and last ``share`` of it or
    more, with their step's place: (start, end, step) (host_stages' candidates)."""
    out = []
    for x, y in _gaps_ref(flat, lo, hi):
        k = bisect.bisect_right(step_starts, x) - 1
        if k >= 0 and x <= step_ends[k] and y - x >= share * (step_ends[k] - step_starts[k]):
            out.append((x, y, k))
    return out


def _long_gaps_c(flat: array, lo: float, hi: float, step_starts: array, step_ends: array, share: float):
    got = _BUILT.long_gaps(flat, lo, hi, step_starts, step_ends, share) if _floats(lo, hi) else None
    return _long_gaps_ref(flat, lo, hi, step_starts, step_ends, share) if got is None else got


def _loop_calls_ref(
    launched: list, frames_above: array, frame_of: array, ops: array, runs: array, least: int
):
    """launch-storm's calls of one kernel's launches from one line in one step (``x``: (duration,
    launch duration, launch call)): per call of the innermost Python frame (``ops``, the loop
    iteration of each launch call) and, when the line calls into library code, per call of the
    user's frame (``runs``), those with ``least`` launches or more from ``least`` iterations or
    more, in order of first launch."""
    calls: dict = {}
    for x in launched:
        li = x[2]
        inner = frames_above[li]
        calls.setdefault((0, inner), []).append(x)
        f = frame_of[li]
        if f != inner:
            calls.setdefault((1, f), []).append(x)
    its = (ops, runs)
    return [
        xs
        for (how, _), xs in calls.items()
        if len(xs) >= least and len({its[how][x[2]] for x in xs}) >= least
    ]


def _loop_calls_c(launched: list, frames_above: array, frame_of: array, ops: array, runs: array, least: int):
    return _BUILT.loop_calls(launched, frames_above, frame_of, ops, runs, least)


# ---- the table --------------------------------------------------------------------------------
class Pass(msgspec.Struct, frozen=True):
    name: str
    computes: str  # what it gives, in the words of the model field or analysis that keeps it
    reference: Callable
    native: Callable
    undo: Optional[Callable] = None  # args -> a function undoing what the pass changes in them
    # its native implementation reads the events with the GIL released (_passes.c, "with the GIL
    # released"): ``start_work`` may run it on the other core while Python goes on
    beside: bool = False


PASSES: dict[str, Pass] = {
    p.name: p
    for p in (
        Pass(
            "depth", "how deep a block of JSON nests (the reader's MAX_NESTING check)", _depth_ref, _depth_c
        ),
        Pass(
            "classify",
            "events by role: cpu by thread, gpu, gpu annotations, memory samples, fwdbwd flows, "
            "thread names, unread categories",
            _classify_ref,
            _classify_c,
            _keep_cats,
        ),
        Pass(
            "by_start",
            "events in start order (the GPU events, the allocator samples)",
            _by_start_ref,
            _by_start_c,
            beside=True,
        ),
        Pass(
            "nest",
            "one thread's events sorted; parent, start, duration and category code of each",
            _nest_ref,
            _nest_c,
            beside=True,
        ),
        Pass(
            "frames",
            "frames, frame_of, token, events by name, has_call_from, labels, t0",
            _frames_ref,
            _frames_c,
        ),
        Pass(
            "launchers",
            "launcher: the launch call of each GPU event",
            _launchers_ref,
            _launchers_c,
            beside=True,
        ),
        Pass(
            "children",
            "a flat index of items by parent (children, GPU events by launch)",
            _children_ref,
            _children_c,
        ),
        Pass(
            "nearest",
            "each event's nearest ancestor in a mask (enclosing op, enclosing frame)",
            _nearest_ref,
            _nearest_c,
        ),
        Pass("inherit", "fwd_of: the forward op of each backward event", _inherit_ref, _inherit_c),
        Pass(
            "owners",
            "the innermost enclosing event of instants (flow ends, memory samples)",
            _owners_ref,
            _owners_c,
            beside=True,
        ),
        Pass(
            "memory_columns",
            "memory: the allocator samples as columns",
            _memory_columns_ref,
            _memory_columns_c,
            beside=True,
        ),
        Pass("subtree", "an event and everything nested in it", _subtree_ref, _subtree_c),
        Pass("cpu_total", "Summary.cpu_total_us", _cpu_total_ref, _cpu_total_c),
        Pass(
            "line_tokens",
            "the key each event's source line is cached under (Context.line_tokens)",
            _line_tokens_ref,
            _line_tokens_c,
        ),
        Pass(
            "ancestor_sums",
            "values summed up the nesting (memory-child-pressure)",
            _ancestor_sums_ref,
            _ancestor_sums_c,
        ),
        Pass(
            "ancestors",
            "the events with a marked event at or under them (optimizer-foreach-off's launching ops)",
            _ancestors_ref,
            _ancestors_c,
        ),
        Pass(
            "replay_rows",
            "impact: the replayed steps' calls, their kinds, CPU time between them and GPU ops (StepModel)",
            _replay_rows_ref,
            _replay_rows_c,
        ),
        Pass(
            "replay",
            "impact: the replayed mean step with a fix's change (stepmodel.StepModel.run)",
            _replay_ref,
            _replay_c,
        ),
        Pass(
            "kernel_configs",
            "kernel-jitter's kernel configurations and the launching ops' input shapes",
            _kernel_configs_ref,
            _kernel_configs_c,
        ),
        Pass(
            "line_gpu_sums",
            "hot lines: GPU time per launching line (gpu_inclusive_us)",
            _line_gpu_sums_ref,
            _line_gpu_sums_c,
        ),
        Pass(
            "launch_runs",
            "launch-storm's kernel runs by line, kernel and step",
            _launch_runs_ref,
            _launch_runs_c,
        ),
        Pass(
            "fixed_points",
            "the events that are their own token or frame (statement tokens, user frames)",
            _fixed_points_ref,
            _fixed_points_c,
        ),
        Pass(
            "positions",
            "the set bytes of a mask as positions (hot lines: the statement tokens, the user frames)",
            _positions_ref,
            _positions_c,
        ),
        Pass("take", "a column read through an index (line tokens of the launch calls)", _take_ref, _take_c),
        Pass(
            "codes",
            "a column's distinct values by first appearance, and each item's (launch line groups)",
            _codes_ref,
            _codes_c,
        ),
        Pass(
            "step_of",
            "the step of each GPU event's launch call (Context.launch_steps)",
            _step_of_ref,
            _step_of_c,
        ),
        Pass(
            "launch_delays",
            "gpu-contention's launch-to-start delays and its late candidates",
            _launch_delays_ref,
            _launch_delays_c,
        ),
        Pass(
            "group_min",
            "each step's first launch on the main thread (profiler-artifact's usual lead-in)",
            _group_min_ref,
            _group_min_c,
        ),
        Pass(
            "gpu_under_all",
            "the GPU events launched under each of many events (model.gpu_under_many)",
            _gpu_under_all_ref,
            _gpu_under_all_c,
        ),
        Pass(
            "iterations",
            "launch-storm's loop iteration of each launch call (per Python call, per statement run)",
            _iterations_ref,
            _iterations_c,
        ),
        Pass(
            "points_into",
            "the events whose column points into a set (unfused-attention's backward ops, set-up's counted calls)",
            _points_into_ref,
            _points_into_c,
        ),
        Pass(
            "owner_sums",
            "values summed per owning event: allocated bytes (memory-child-pressure, the module tree, hot lines)",
            _owner_sums_ref,
            _owner_sums_c,
        ),
        Pass(
            "scatter_sums",
            "values summed onto targets in item order (hot lines: cpu_inclusive_us, gpu_inclusive_us)",
            _scatter_sums_ref,
            _scatter_sums_c,
        ),
        Pass(
            "hot_sums",
            "hot lines: calls, launches, CPU and GPU time, kernel classes and stats",
            _hot_sums_ref,
            _hot_sums_c,
        ),
        # the summary analyses and the module tree
        Pass(
            "merge", "a union of spans (analyses.merge: GPU busy, collectives, copies)", _merge_ref, _merge_c
        ),
        Pass(
            "spans",
            "each GPU event's (start, end) as one flat column (model.gpu_spans)",
            _spans_ref,
            _spans_c,
        ),
        Pass(
            "durations",
            "each GPU event's duration as one column (analyses.analyze: the GPU time and its classes')",
            _durations_ref,
            _durations_c,
        ),
        Pass(
            "merge_groups",
            "unions of spans per group (step_gpu: each step's kernels and copies)",
            _merge_groups_ref,
            _merge_groups_c,
        ),
        Pass(
            "span_index",
            "covered's index of a merged list (starts, ends, prefix sums)",
            _span_index_ref,
            _span_index_c,
        ),
        Pass(
            "idle_waits",
            "gpu-contention's launches that waited while the process's own GPU lane was idle",
            _idle_waits_ref,
            _idle_waits_c,
        ),
        Pass(
            "gpu_keys",
            "the key each GPU event is classified by (analyses.gpu_classes)",
            _gpu_keys_ref,
            _gpu_keys_c,
        ),
        Pass(
            "marked", "the events of a mask whose name has a prefix (module markers)", _marked_ref, _marked_c
        ),
        Pass(
            "module_nodes",
            "the module node each of many events ran in (ModuleIndex.node_at)",
            _module_nodes_ref,
            _module_nodes_c,
        ),
        Pass(
            "survivors",
            "memory-growth's allocations never freed later, and their steps",
            _survivors_ref,
            _survivors_c,
        ),
        Pass(
            "group_by", "items grouped by a key each (kernel-jitter's problems)", _group_by_ref, _group_by_c
        ),
        Pass("gaps", "the holes a merged span list leaves in a range (GPU idle gaps)", _gaps_ref, _gaps_c),
        Pass(
            "long_gaps",
            "the holes that are a share of their step or more (host_stages' candidates)",
            _long_gaps_ref,
            _long_gaps_c,
        ),
        Pass(
            "loop_calls",
            "launch-storm's loop calls of one kernel from one line and step",
            _loop_calls_ref,
            _loop_calls_c,
        ),
        Pass(
            "run_medians",
            "launch-storm's medians of its runs: the kernels' durations and their launch calls'",
            _run_medians_ref,
            _run_medians_c,
        ),
        Pass(
            "module_gpu",
            "the module tree's own GPU time, launches, kernel classes and kernels per node",
            _module_gpu_ref,
            _module_gpu_c,
        ),
        Pass(
            "frame_shapes",
            "statements: the user frames, their tokens and their shapes (frames resolved once per shape)",
            _frame_shapes_ref,
            _frame_shapes_c,
            beside=True,
        ),
        Pass(
            "line_key_ids",
            "the number of each event's line key, frames of one shape sharing theirs (Context.line_key_ids)",
            _line_key_ids_ref,
            _line_key_ids_c,
        ),
    )
}


class Implementation:
    """One implementation of every pass: ``impl.nest(...)`` and so on."""

    def __init__(self, name: str, pick: Callable[[Pass], Callable]):
        self.name = name
        for p in PASSES.values():
            setattr(self, p.name, pick(p))

    def __repr__(self) -> str:
        return f"<passes: {self.name}>"

    def __getattr__(self, name: str) -> Callable:
        # Only reached for a name no pass has (the passes are set in __init__); it tells the type
        # checker that each pass is an attribute, as set from the table.
        raise AttributeError(f"no pass named {name!r}")


REFERENCE = Implementation("reference", lambda p: p.reference)
NATIVE = Implementation("native", lambda p: p.native)
# NATIVE's passes, as start_work runs them on another thread (bench/breakdown.py times NATIVE's on
# one clock, which a second thread would tangle)
BESIDE = Implementation("beside", lambda p: p.native)
_checking: Optional[Implementation] = None  # set inside differential()


def chosen() -> Implementation:
    """The passes the switch picks (for the reader, before there are events)."""
    if native() is None:
        return REFERENCE
    return _checking or NATIVE


def for_events(events) -> Implementation:
    """The passes a file's events run, all of one kind: native for the scanner's events."""
    mod = native()
    if mod is not None and events and isinstance(events[0], mod.Event):
        return _checking or NATIVE
    return REFERENCE


class Started:
    """Work ``start_work`` runs beside the caller, on a thread of its own: ``result()`` waits for
    it and returns what it returned, or raises what it raised."""

    def __init__(self, fn: Callable, args: tuple):
        self._out: object = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), name="profd-pass", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable, args: tuple) -> None:
        try:
            self._out = fn(*args)
        except BaseException as e:  # raised where the result is asked for, as a call would raise it
            self._error = e

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out


class Ran:
    """Work ``start_work`` ran in place (the reference, a differential run, no thread): its
    result."""

    def __init__(self, out):
        self._out = out

    def result(self):
        return self._out


def start(run: Implementation, name: str, *args) -> "Started | Ran":
    """Pass ``name`` of ``run`` (a model's passes) on its arguments, beside the caller where it
    runs without the GIL (``start_work``)."""
    return start_work(run, (name,), _one_pass, name, *args)


def _one_pass(run: Implementation, name: str, *args):
    return getattr(run, name)(*args)


def start_work(run: Implementation, uses: tuple[str, ...], work: Callable, *args) -> "Started | Ran":
    """``work(run, *args)``, a function of passes ``uses`` of ``run`` (a model's passes) and little
    else, on another thread where each of those passes' native implementation reads the events
    without the GIL (``Pass.beside``): the reading then takes the second core while Python goes on
    with what does not need the result (the analyses, the first rules). Elsewhere (the reference, a
    differential run) it runs here and now. The arguments must not change until ``result()``: the
    model's lists and columns do not after build."""
    if run is NATIVE and all(PASSES[n].beside for n in uses):
        try:
            return Started(work, (BESIDE, *args))
        except RuntimeError:  # no thread to be had (a worker's memory cap counts its stack): here
            pass
    return Ran(work(run, *args))


# ---- the reference as the oracle --------------------------------------------------------------
@dataclass
class Run:
    """One pass called under ``differential()``: where the implementations differ, else None."""

    name: str
    differs: Optional[str]


@contextmanager
def differential():
    """Inside, every pass the native layer would run runs both ways, the reference first on copies
    of the lists it is given, and the native result is used. Yields the list of ``Run``s."""
    global _checking
    runs: list[Run] = []
    was = _checking
    _checking = Implementation("differential", lambda p: _both(p, runs))
    try:
        yield runs
    finally:
        _checking = was


def _both(p: Pass, runs: list) -> Callable:
    def run(*args):
        undo = p.undo(args) if p.undo else None
        ref = p.reference(*(list(a) if type(a) is list else a for a in args))
        if undo:
            undo()
        got = p.native(*args)
        runs.append(Run(p.name, differs(ref, got)))
        return got

    return run


def differs(a, b, where: str = "") -> Optional[str]:
    """Where two pass results differ (types, lengths, order, float bits), else None."""
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, float):
        return None if struct.pack("d", a) == struct.pack("d", b) else f"{where}: {a!r} vs {b!r}"
    if isinstance(a, Spans):
        return differs(a.flat, b.flat, where)
    if isinstance(a, array):
        if a.typecode != b.typecode or a.tobytes() != b.tobytes():
            k = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return f"{where}[{k}]: array {a.typecode} of {len(a)} vs {b.typecode} of {len(b)}"
        return None
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{where}: keys differ (or their order)"
        return next((d for k in a for d in [differs(a[k], b[k], f"{where}[{k!r}]")] if d), None)
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: {len(a)} vs {len(b)} items"
        return next(
            (d for k, (x, y) in enumerate(zip(a, b)) for d in [differs(x, y, f"{where}[{k}]")] if d), None
        )
    return None if a is b or a == b else f"{where}: {a!r} vs {b!r}"
