"""Hot lines: per user source line, what ran there (calls, launches, CPU and GPU time, inclusive
of what it calls, bytes allocated, its top kernels). A part of the report, and what a few rules and
the impact of their fixes read (``Context.hot``, computed on first use).
"""

from __future__ import annotations

from array import array
from itertools import compress
from typing import Optional

from ...protocol.types import HotLine, KernelStat
from . import kernels
from .model import LAUNCH_CATS, NEST_SLACK_US
from .passes import NO_LINE, arange, negative


def hot_lines(ctx) -> dict[tuple, HotLine]:
    """The hot lines of the context's trace (``ctx``: an engine ``Context``) by (trace path, line)."""
    m = ctx.model
    hot: dict[tuple, HotLine] = {}
    kstats: dict[tuple, dict[str, list]] = {}

    def of_key(key) -> Optional[HotLine]:
        if key is None:
            return None
        k = (key.trace_path, key.line)
        h = hot.get(k)
        if h is None:
            loc = ctx.location_of_key(key)
            h = hot[k] = HotLine(
                path=loc.path,
                line=key.line,
                function=key.function,
                precision=key.precision,
                trace_path=key.trace_path,
            )
        return h

    ids, keys = _asked(ctx)
    by_id: list[Optional[HotLine]] = [None] * len(keys)  # per key number, its hot line once asked

    def line(i: int) -> Optional[HotLine]:
        k = ids[i]
        if k == -2:  # asked of line_key (see Context.line_key_ids), as the events come
            return of_key(ctx.line_key(i))
        if k < 0:
            return None
        h = by_id[k]
        if h is None:
            h = by_id[k] = of_key(keys[k])
        return h

    lines, idents, where = _numbered(m, ids, keys)
    off, gs = m._launched
    _order, first, *sums, kcs, kss = m.passes.hot_sums(
        m.cpu,
        m.gpu,
        m.parent,
        m.cpu_starts(),
        m.frame_of,
        m.fwd_of,
        lines,
        idents,
        off,
        gs,
        ctx.a.gpu_class,
        LAUNCH_CATS,
        m.durs,
        m.cat_mask("python_function"),
        m.cat_mask(*LAUNCH_CATS),
        NEST_SLACK_US,
    )
    for n, i in enumerate(first):  # in order of first event, as the hot lines are made
        h = line(i)
        assert h is not None
        s = [c[n] for c in sums]
        h.calls += s[0]
        h.launches += s[1]
        h.cpu_self_us += s[2]
        h.cpu_total_us += s[3]
        h.cpu_backward_us += s[4]
        h.gpu_us += s[5]
        h.gpu_forward_us += s[6]
        h.gpu_backward_us += s[7]
        h.kernel_classes = kcs[n]
        if kss[n]:
            kstats[(h.trace_path, h.line)] = kss[n]
    _inclusive(ctx, hot, line, of_key, ids, lines, where)
    _allocated(ctx, ids, line)
    for k, h in hot.items():
        ks = kstats.get(k, {})
        top = sorted(ks.items(), key=lambda kv: -kv[1][2])[:5]
        h.top_kernels = [
            KernelStat(name=kernels.short_name(n), kernel_class=c, count=cnt, total_us=round(t, 3))
            for n, (c, cnt, t) in top
        ]
        h.kernel_classes = {c: round(v, 3) for c, v in h.kernel_classes.items()}
        for f in (
            "cpu_self_us",
            "cpu_total_us",
            "gpu_us",
            "gpu_forward_us",
            "gpu_backward_us",
            "cpu_backward_us",
            "cpu_inclusive_us",
            "gpu_inclusive_us",
        ):
            setattr(h, f, round(getattr(h, f), 3))
    return hot


def _allocated(ctx, ids: array, line) -> None:
    """The allocations' bytes onto their owners' lines: summed by the key the owner's line is
    cached under, in order of first sample, so each line is looked up once, through any owner of
    its key (the same key, the same line). Where no key is asked event by event, that key is the
    owner's line key number (``ids``: the events that share a line token share it), so a line is
    looked up once per key, not once per token (the byte counts are ints: their sum is the same
    whatever groups they are added in); else the owner's line token (the owner itself where the
    trace names each op's line), and where line_key is asked event by event (``ids``: -2) the
    line is looked up through the first owner that allocated."""
    m = ctx.model
    mem = m.memory
    if not ctx.line_key_ids()[2]:
        keys, none = m.passes.take(ids, mem.owner, -1), -1  # -1: no owner, or one without a line
    else:
        keys = mem.owner if m.has_call_from else m.passes.take(ctx.line_tokens(), mem.owner, NO_LINE)
        none = -1 if m.has_call_from else NO_LINE  # no owner, or one without a line: no line's bytes
    first, code = m.passes.codes(keys)
    number = arange(m.passes, len(first))
    values = m.passes.take(keys, first, none)
    if none in values:
        number[values.index(none)] = -1  # the values are distinct
    sums = m.passes.owner_sums(arange(m.passes, len(code)), m.passes.take(number, code, -1), mem.nbytes)
    for k, nbytes in sums.items():
        owner = mem.owner[first[k]]
        if ids[owner] == -2:
            owner = next(o for o, c, b in zip(mem.owner, code, mem.nbytes) if c == k and b > 0)
        h = line(owner)
        if h is not None:
            h.bytes_allocated += nbytes


def _asked(ctx) -> tuple[array, list]:
    """Context.line_key_ids, with the keys asked event by event (-2) asked of line_key for the
    events the sums read, in event order (the ops, launches and the like: not frames or labels)."""
    ids, keys, asked = ctx.line_key_ids()
    if not asked:
        return ids, keys
    m = ctx.model
    ids, keys = array("i", ids), list(keys)
    number: dict[int, int] = {}
    cpu = m.cpu
    for i in compress(range(len(ids)), map((-2).__eq__, ids)):
        if cpu[i].cat in ("python_function", "user_annotation"):
            continue  # asked later, where the old order asks them (hot_lines' line)
        key = ctx.line_key(i)
        if key is None:
            ids[i] = -1
            continue
        k = number.get(id(key))
        if k is None:
            k = number[id(key)] = len(keys)
            keys.append(key)
        ids[i] = k
    return ids, keys


def _numbered(m, ids: array, keys: list) -> tuple[array, array, dict]:
    """Per event the number of its hot line (by trace path and line) and of its line key (by what
    the key compares: path, line, function, precision), -1 for none and for every label (no
    line's work: what runs inside it is); and the hot lines' numbers by (trace path, line)."""
    where: dict[tuple, int] = {}
    ident: dict[tuple, int] = {}
    line_no, key_no = array("i"), array("i")
    for key in keys:
        if key is None:
            line_no.append(-1)
            key_no.append(-1)
            continue
        line_no.append(where.setdefault((key.trace_path, key.line), len(where)))
        key_no.append(ident.setdefault((key.trace_path, key.line, key.function, key.precision), len(ident)))
    if m.labels:
        ids = array("i", ids)
        for i in m.labels:
            ids[i] = -1
    return m.passes.take(line_no, ids, -1), m.passes.take(key_no, ids, -1), where


CONTEXT_PLUMBING = frozenset({"__enter__", "__exit__"})


def _inclusive(ctx, hot: dict, line, of_key, ids: array, lines: array, where: dict) -> None:
    """A line's cost with what it calls (``cpu_inclusive_us``, ``gpu_inclusive_us``), beside its
    own (``cpu_self_us``/``cpu_total_us``, ``gpu_us``): ``loss = model(x, y)`` runs no op itself,
    yet the forward's kernels, and through the fwdbwd flows their backward, are its work.

    CPU: each statement token's span (an op, a library call, a module call, a user function it
    calls directly), record_function labels aside (what runs inside them is a token itself).
    GPU: every GPU event charged to the innermost line that launched it (the forward op's for a
    backward kernel), to that line and to each statement up the user frames that called it.

    The sums are columns (``lines``: each event's hot line number, by ``where``; ``ids``: its line
    key's, -2 where it is asked event by event) added by the scatter_sums pass, in the order the
    additions were made one by one; a line is asked of ``line`` only where a new one may be made
    (each number's first event, each event asked), in event order, so the hot lines are made in
    the order they were."""
    m = ctx.model
    asked = ctx.line_key_ids()[2]

    def number(h) -> int:
        return -1 if h is None else where.setdefault((h.trace_path, h.line), len(where))

    def asks(items: array) -> list[int]:  # the positions of the items whose key is asked one by one
        if not asked:
            return []
        k = m.passes.take(ids, items, -1)
        return list(compress(range(len(k)), map((-2).__eq__, k)))

    spans = bytearray(m.passes.fixed_points(m.token))  # the statement tokens, labels aside
    for i in m.labels:
        spans[i] = 0
    # and a with-statement's __enter__/__exit__ (record_function, the profiler's own)
    plumbing = bytes(fr.function in CONTEXT_PLUMBING for fr in m.frames._table)
    for i in m.passes.points_into(m.frames.ids, plumbing):
        spans[i] = 0
    toks = m.passes.positions(spans)
    nums = m.passes.take(lines, toks, -1)
    for p in sorted({*m.passes.codes(nums)[0], *asks(toks)}):
        nums[p] = number(line(toks[p]))
    calls, called = array("i"), array("i")  # the user frames called directly, their callers' lines
    for f in m.passes.positions(ctx.user_frames()):
        if ctx.calls_directly(f):
            k = number(of_key(ctx.caller_key(f)))
            if k >= 0:
                calls.append(f)
                called.append(k)
    n = len(where)
    each = arange(m.passes, n + 1)  # one target a code: its own line
    cpu_us = m.passes.scatter_sums(toks + calls, m.durs, nums + called, each, each[:n], n)
    _onto(hot, where, cpu_us, "cpu_inclusive_us")
    if not m.gpu:
        return
    _gpu_inclusive(ctx, hot, line, of_key, number, asks, lines, where)


def _gpu_inclusive(ctx, hot: dict, line, of_key, number, asks, lines: array, where: dict) -> None:
    """``gpu_inclusive_us``: the GPU time of each launching line token (line_gpu_sums) onto its
    line and the lines of the statements up the user frames above it (its chain), each distinct
    (line, chain) pair's lines found once."""
    m = ctx.model
    _, sums, reps = m.passes.line_gpu_sums(m.launcher, ctx.line_tokens(), m.gpu)
    chains: dict[int, list] = {}  # user frame event -> the lines of the statements above it
    same_chain: dict[tuple, list] = {}

    def above(f: int) -> list:
        got = chains.get(f)
        if got is not None:
            return got
        path, fs = [], []
        while f >= 0 and f not in chains:
            fs.append(f)
            p = m.parent[f]
            g = m.frame_of[p] if p >= 0 else -1
            # caller_key: a frame called through library code or a module call is on its
            # caller's line, line_key(p): read through p's key number, once per key, not per frame
            h = None if g < 0 else of_key(ctx.caller_key(f)) if ctx.calls_directly(f) else line(p)
            path.append(h)
            f = g
        tail = chains.get(f, []) if f >= 0 else []
        for k in range(len(fs) - 1, -1, -1):  # innermost last: build the chains outward in
            h = path[k]
            tail = ([h] if h is not None else []) + tail
            # one list per distinct chain: frames of one shape, one step after another, share theirs
            tail = chains[fs[k]] = same_chain.setdefault(tuple(map(id, tail)), tail)
        return chains[fs[0]] if fs else tail

    nums = m.passes.take(lines, reps, -1)
    own = m.passes.take(m.frame_of, reps, -1)  # line_source's frame: the token's, else its forward op's
    fwd = m.passes.take(m.frame_of, m.passes.take(m.fwd_of, reps, -1), -1)
    frames = own  # (a new column: the backward tokens' own -1 replaced in place, not rebuilt)
    for p in m.passes.positions(negative(own)):
        frames[p] = fwd[p]
    first_of_frame, frame_code = m.passes.codes(frames)
    chain_no: dict[int, int] = {}  # id(a chain) -> its number
    chain_lists: list[list] = []
    of_frame = array("i", [-1]) * len(first_of_frame)  # per distinct frame the number of its chain
    for p in sorted({*m.passes.codes(nums)[0], *asks(reps), *first_of_frame}):
        nums[p] = number(line(reps[p]))
        f = frames[p]
        if f >= 0 and of_frame[frame_code[p]] < 0:  # the frame's first token: its chain, made now
            c = above(f)
            k = of_frame[frame_code[p]] = chain_no.setdefault(id(c), len(chain_lists))
            if k == len(chain_lists):
                chain_lists.append(c)
    pairs: dict[tuple, int] = {}  # (line, chain) -> its number, in order of first token
    code = array(
        "i", [pairs.setdefault(pc, len(pairs)) for pc in zip(nums, m.passes.take(of_frame, frame_code, -1))]
    )
    off, onto = array("i", [0]), array("i")  # per pair the distinct lines its GPU time goes to
    for a, c in pairs:
        got = [a] if a >= 0 else []
        for t in map(number, chain_lists[c] if c >= 0 else []):
            if t not in got:
                got.append(t)
        onto.extend(got)
        off.append(len(onto))
    n = len(where)
    gpu_us = m.passes.scatter_sums(arange(m.passes, len(sums)), sums, code, off, onto, n)
    _onto(hot, where, gpu_us, "gpu_inclusive_us")


def _onto(hot: dict, where: dict, sums: array, field: str) -> None:
    """Each hot line's sum (``sums``, by its number in ``where``) added to its ``field``: the first
    time anything adds to it, so it is the sum itself, as the additions one by one made it."""
    for key, h in hot.items():
        at = where.get(key)
        if at is not None:
            setattr(h, field, getattr(h, field) + sums[at])
