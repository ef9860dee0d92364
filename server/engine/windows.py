"""How a trace's window is cut into steps, and which of it is one-time set-up.

Most traces people publish have no ``ProfilerStep`` markers: one ``with profile():`` around an
epoch, a few calls or a single forward. ``infer_steps`` finds the steps such a trace has: the
iterations of the outermost loop on the main thread, as the repetition of one call (a frame, a
module, an op, a ``record_function`` label, ``Optimizer.step`` or a DataLoader ``__next__``) that
starts segments of the same composition; failing that, the whole window is one step, and the
reason says so. ``setup_intervals`` finds one-time host work (CUDA context and module loading,
first-call cuDNN/cuBLAS set-up, torch.compile compiling and autotuning) wherever it lies.
"""

from __future__ import annotations

import re
from array import array
from collections import Counter

from .loader import LAUNCH_CATS
from .passes import mask_and, mask_or, negative
from .rules.util import median

# ---- steps without markers --------------------------------------------------------------------
_NOT_STEPS = ("cuda_runtime", "cuda_driver", "Runtime", "overhead", "Trace")
MIN_SIMILARITY = 0.6  # median multiset overlap of consecutive iterations
MIN_COVER = 0.3  # the iterations hold this share of the level's time at least (cold set-up may hold the rest)
MAX_DEPTH = 12


def _label(m, i: int) -> str:
    return m.cpu[i].name


def infer_steps(m) -> tuple[list, str]:
    """(steps as (name, number, start, end), how they were found) for a trace without
    ProfilerStep markers (the model makes its Steps of them: this module imports nothing of it)."""
    key = m.main_thread
    starts = m.tindex.starts.get(key) if key is not None else None
    if not starts:
        return [], "no CPU events: no steps"
    base = m.tindex.base[key]
    level = [i for i in range(base, base + len(starts)) if m.parent[i] < 0]
    under = None
    for _ in range(MAX_DEPTH):
        level = [i for i in level if m.cpu[i].cat not in _NOT_STEPS and m.cpu[i].dur > 0]
        if not level:
            break
        found = _loop(m, level)
        if found:
            cuts, anchor = found
            steps = [(f"iteration {k + 1}", k + 1, a, b) for k, (a, b) in enumerate(cuts)]
            where = f" in {_label(m, under)}" if under is not None else ""
            return steps, (
                f"{len(steps)} iterations of a loop on the main thread{where}, each starting "
                f"at {_label(m, anchor)} (no ProfilerStep markers)"
            )
        lo = min(m.cpu[i].ts for i in level)
        hi = max(m.cpu[i].ts + m.cpu[i].dur for i in level)
        big = max(level, key=lambda i: m.cpu[i].dur)
        if hi <= lo or m.cpu[big].dur < 0.5 * (hi - lo):
            break
        under, level = big, list(m.children(big))
    lo, hi = m.window()
    if hi <= lo:
        return [], "an empty window: no steps"
    return [("window", 0, lo, hi)], (
        "no ProfilerStep markers and no repeated loop found: the whole window analysed as one step"
    )


def _loop(m, level: list[int]):
    ids = [_label(m, i) for i in level]
    counts = Counter(ids)
    total = sum(m.cpu[i].dur for i in level)
    # Without Python frames a single forward repeats its layers' ops: only a label that marks an
    # iteration (record_function, Optimizer.step, DataLoader __next__) makes op repeats a loop.
    framed = any(m.cpu[i].cat == "python_function" for i in level)
    labels = Counter(ids[k] for k, i in enumerate(level) if m.cpu[i].cat == "user_annotation")
    first = {}
    for k, n in enumerate(ids):
        first.setdefault(n, k)
    # the most iterations first: an inner loop's cuts fail the composition test, the outer's pass
    for c in sorted({c for c in counts.values() if c >= 2}, reverse=True):
        if not framed and c not in labels.values():
            continue
        for name in sorted((n for n, v in counts.items() if v == c), key=first.get):
            occ = [k for k, n in enumerate(ids) if n == name]
            segs = [level[a:b] for a, b in zip(occ, occ[1:])]
            seen = set(_label(m, i) for s in segs for i in s)
            tail = []
            for i in level[occ[-1] :]:
                if tail and _label(m, i) not in seen:
                    break
                tail.append(i)
            segs.append(tail)
            bags = [Counter(_label(m, i) for i in s) for s in segs]
            sims = [sum((x & y).values()) / max(1, sum((x | y).values())) for x, y in zip(bags, bags[1:])]
            if not sims or median(sims) < MIN_SIMILARITY:
                continue
            if sum(m.cpu[i].dur for s in segs for i in s) < MIN_COVER * total:
                continue
            cuts = [(m.cpu[s[0]].ts, max(m.cpu[i].ts + m.cpu[i].dur for i in s)) for s in segs]
            cuts = [(a, min(b, cuts[k + 1][0]) if k + 1 < len(cuts) else b) for k, (a, b) in enumerate(cuts)]
            return cuts, level[occ[0]]
    return None


# ---- one-time set-up ----------------------------------------------------------------------------
# Runtime calls that are set-up when they take long: the CUDA context (cudaFree(0) is the idiom),
# module loading, stream creation, HIP's module loads.
SETUP_CALLS = {
    "cudaFree",
    "cuModuleLoadData",
    "cuModuleLoadDataEx",
    "cuModuleLoadFatBinary",
    "cuLibraryLoadData",
    "cudaStreamCreateWithFlags",
    "cudaStreamCreate",
    "cudaStreamCreateWithPriority",
    "cuCtxCreate",
    "hipModuleLoadData",
    "hipModuleLoad",
    "hipFree",
    "hipStreamCreateWithFlags",
    "cuInit",
    "cudaSetDevice",
}
SETUP_CALL_US = 1000.0  # one such call of 1 ms or more
# torch.compile compiling: Dynamo's timed phases (record_function labels), Inductor's frames
_COMPILE = re.compile(
    r"\(dynamo_timed\)$|^entire_frame_compile$|^dynamo$|^backend_compile$|"
    r"compile_fx_inner|^async_compile|autotune|select_algorithm|"
    r"torch/_dynamo/convert_frame\.py\(\d+\): _compile|torch/_inductor/compile_fx\.py"
)
# A call that is its kind's first and FIRST_FACTOR times its kind's median, by FIRST_US or more
# (cuDNN/cuBLAS handles and heuristics, lazy kernel loading, workspace allocation on first use);
# a launch of LAUNCH_US or more at FIRST_FACTOR times its API's median is lazy module loading.
FIRST_FACTOR = 20.0
FIRST_US = 2000.0
LAUNCH_US = 1000.0


KERNEL_LAUNCHES = {
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
    "hipLaunchKernel",
    "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel",
}


def _waiting(m, i: int) -> float:
    """Time event i spends in calls that wait on the GPU (syncs, copies)."""
    t = 0.0
    for j in m.subtree(i):
        e = m.cpu[j]
        if e.cat in ("cuda_runtime", "cuda_driver") and (
            "Synchronize" in e.name or "Memcpy" in e.name or "EventQuery" in e.name
        ):
            t += e.dur
    return t


def setup_intervals(m) -> list[tuple[float, float, str]]:
    """(start, end, what) of one-time host work, in time order (they may nest; merge to measure);
    computed once per model (the analyses and one-time-setup read it).

    By name, not by event: the patterns are tested once per distinct name (the model's events by
    name, the frames' table), and a name's calls are read one by one only where one of them is
    long enough to be set-up (a Python loop over every event cost 0.5-1 µs an event)."""
    got = m.__dict__.get("_setup_intervals")
    if got is None:
        got = m._setup_intervals = _setup_intervals(m)
    return got


def _frame_name(fr) -> str:
    """A python frame's event name, as the profiler writes it (``file.py(LINE): func``)."""
    return f"{fr.path}({fr.line}): {fr.function}"


def _setup_intervals(m) -> list[tuple[float, float, str]]:
    cpu = m.cpu
    out = []
    for i, _ in m.frames.matching(lambda fr: bool(_COMPILE.search(_frame_name(fr)))):
        e = cpu[i]
        out.append((e.ts, e.ts + e.dur, "torch.compile compiling"))
    # a name's calls that count: the launch calls and the top-level ops
    counted = mask_or(
        m.cat_mask(*sorted(LAUNCH_CATS)), mask_and(m.cat_mask("cpu_op"), negative(m.ops_above()))
    )
    run = m.passes
    for name, idx in m.named_groups():  # every non-python event, by name, in index order
        if _COMPILE.search(name):
            out.extend((cpu[i].ts, cpu[i].ts + cpu[i].dur, "torch.compile compiling") for i in idx)
            continue
        if name in SETUP_CALLS:
            rest = array("i")  # an index column, as the passes read it
            for i in idx:
                e = cpu[i]
                if e.dur >= SETUP_CALL_US:
                    out.append((e.ts, e.ts + e.dur, e.name))
                else:
                    rest.append(i)
            idx = rest
        group = run.take(idx, run.points_into(idx, counted), -1)  # those counted, at C speed
        if len(group) >= 2:
            _first_calls(m, name, group, out)
    out.sort()
    return out


_LONG_LAUNCH = (array("d", [LAUNCH_US]), array("d", [float("inf")]))


def _first_calls(m, name: str, idx: array, out: list) -> None:
    """Of one name's calls, a first call far longer than the rest (lazy loading, first-call
    library set-up) onto ``out``."""
    cpu = m.cpu
    launch = cpu[idx[0]].cat in LAUNCH_CATS
    # The median (a sort) only for a name with a call long enough to be set-up: a launch of
    # LAUNCH_US or more; a first op of FIRST_US or more (over a median of 0 or more). The calls'
    # durations are listed one by one only past those tests, made by passes over the duration
    # column (durations are finite: an event's start and duration are).
    run = m.passes
    if launch:
        if name not in KERNEL_LAUNCHES:
            return  # a long copy or sync call waits on the GPU: not set-up
        # max(durs) < LAUNCH_US: no call's duration in [LAUNCH_US, inf) (step_of's interval lookup)
        if b"\0" not in negative(run.step_of(idx, m.durs, _LONG_LAUNCH[0], _LONG_LAUNCH[1])):
            return
        durs = list(map(m.durs.__getitem__, idx))
        med = median(durs)
        if max(durs) < FIRST_FACTOR * med:
            return  # no call long enough: which kernel each launched does not matter
        seen = set()
        for i, d in zip(idx, durs):
            gs = m.gpu_of_launch(i)
            kern = m.gpu[gs[0]].name if len(gs) else None
            if kern in seen:
                continue  # lazy loading happens at a kernel's first launch only (a full queue
            seen.add(kern)  # blocks any launch, and is the GPU's backlog, not set-up)
            if d >= LAUNCH_US and d >= FIRST_FACTOR * med:
                out.append((cpu[i].ts, cpu[i].ts + d - med, f"first {name} (lazy loading)"))
        return
    if (
        m.durs[idx[0]] < FIRST_US
        and run.group_min(array("i", [0]) * len(idx), idx, m.durs, 0, len(m.durs), 1)[0][0] >= 0.0
    ):
        return  # min(durs) >= 0.0
    durs = list(map(m.durs.__getitem__, idx))
    med = median(durs)
    i = idx[0]
    d = durs[0] - _waiting(m, i)  # an op that waits on the GPU (.item(), a blocking copy) is not set-up
    if d - med >= FIRST_US and d >= FIRST_FACTOR * med:
        out.append((cpu[i].ts, cpu[i].ts + d - med, f"first {name}"))
