"""Trace file -> model -> analyses -> rules -> Report. No protocol, no network.

``analyze_file`` is the one path the CLI, the daemon and the tests share. What a rule sees (the
``Context``) lives in ``context``, which the rules import instead of this module.
"""

from __future__ import annotations

import gc
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import compress
from typing import Optional

from ... import __version__
from ...protocol.types import Diagnostic, HotLine, KernelStat, Report, Step, Summary, TraceInfo
from . import impact, kernels, loader, modules, suppress
from .analyses import Analysis, analyze, verdict
from .bound import bound
from .context import Context, Options
from .model import LAUNCH_CATS, TraceModel, build
from .rules import load_all
from .rules.util import us


MAX_HOT_LINES = 200


@dataclass
class Analyzed:
    """One trace through the pipeline: its report, and what it was made from for the callers that
    take more than the report from the same read (a rank's summary, the annotated copy)."""

    report: Report
    model: TraceModel
    analysis: Analysis
    context: Context


@contextmanager
def _cyclic_gc_paused():
    """Loading and building the model create millions of small objects and no cycles: the cyclic
    GC would only rescan them again and again (it tripled the time on the 36 MB trace)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def analyze_trace(path: str, options: Optional[Options] = None) -> Analyzed:
    """load -> model -> analyses -> rules -> report: the one pipeline behind every front end (the
    report, a rank's summary, the annotated copy). Raises ``loader.TraceError`` for a file that is
    not a trace."""
    with _cyclic_gc_paused():
        doc, sha, size = loader.load(path)
        return analyze_document(path, doc, sha, size, options)


def analyze_document(
    path: str, doc: loader.TraceDoc, sha: str, size: int, options: Optional[Options] = None
) -> Analyzed:
    """The pipeline from a decoded document on, for a caller that decoded the file itself
    (annotate keeps the events as written). Lets go of the document's events."""
    options = options or Options()
    with _cyclic_gc_paused():
        model = build(doc)
        doc.drop_events()
        analysis = analyze(model)
        ctx = Context(model, analysis, path, options)
        report = analyze_context(ctx, trace_info(path, sha, size, model))
    return Analyzed(report, model, analysis, ctx)


def analyze_file(path: str, options: Optional[Options] = None) -> Report:
    """Analyse one trace file. Raises ``loader.TraceError`` for a file that is not a trace."""
    return analyze_trace(path, options).report


def error_report(path: str, error: str) -> Report:
    """The report of a file that is not a trace: its size (0 for what is not a regular file) and
    the error."""
    try:
        size = os.path.getsize(path) if os.path.isfile(path) else 0
    except (OSError, ValueError):  # gone meanwhile; ValueError: a NUL in the path
        size = 0
    return Report(
        trace=TraceInfo(path=path, sha256="", size_bytes=size), error=error, profd_version=__version__
    )


def analyze_or_error(path: str, options: Optional[Options] = None) -> Report:
    """Like ``analyze_file`` but a bad trace becomes a Report carrying ``error``."""
    try:
        return analyze_file(path, options)
    except loader.TraceError as e:
        return error_report(path, str(e))


def analyze_context(ctx: Context, info: TraceInfo) -> Report:
    """Rules and hot lines over a built model and its analyses (the context holds both)."""
    options = ctx.options
    hot = _hot_lines(ctx)
    ctx.hot = hot
    tree = modules.build_tree(ctx)  # before the rules: it names the modules their findings cite
    diagnostics: list[Diagnostic] = []
    rules = load_all()
    for code in _rules_to_run(rules, options.disabled):
        try:
            diagnostics.extend(rules[code](ctx))
        except MemoryError:  # the analysis is over its memory: no report, not a partial one
            raise
        except Exception:  # one broken rule must not take the report down
            import logging  # here: the one use, and no start-up cost for it

            logging.getLogger("profd.engine").exception("rule %s failed on %s", code, info.path)
    impact.assign(ctx, diagnostics)
    if options.disabled:  # the findings run only for the impact of the enabled ones
        diagnostics = [d for d in diagnostics if d.code not in options.disabled]
    used: set[tuple[str, int, str]] = set()
    diagnostics, suppressed = suppress.apply(diagnostics, used=used)
    if suppress.UNUSED not in options.disabled:
        ran: dict[str, set[int]] = {}
        for h in hot.values():  # the statements this trace ran, in the workspace's files
            local = ctx.sources.resolve(h.trace_path, h.line) if h.precision == "statement" else None
            if local is not None:
                ran.setdefault(local, set()).add(h.line)
        ran_rules = set(load_all()) - set(options.disabled)
        diagnostics += suppress.unused(used, ran, ran_rules)
    _relate_backward(ctx, diagnostics)
    diagnostics.sort(key=impact.order)
    ranked = sorted(
        hot.values(),
        key=lambda h: -(max(h.gpu_us, h.gpu_inclusive_us) + max(h.cpu_total_us, h.cpu_inclusive_us)),
    )[:MAX_HOT_LINES]
    if options.library_lines:  # off by default: the user's own lines first
        ranked += modules.library_lines(tree, diagnostics)
    return bound(
        Report(
            trace=info,
            summary=_summary(ctx),
            diagnostics=diagnostics,
            hot_lines=ranked,
            modules=tree,
            profd_version=__version__,
            suppressed=suppressed,
        )
    )


def _rules_to_run(rules: dict, disabled: set[str]) -> list[str]:
    """The enabled rules, and the disabled ones whose findings the impact of an enabled finding
    reads: a fix replayed on the step model (``change``) is judged against the other findings'
    (the fix that hides it, the same fix on one line), so while an enabled rule declares one, the
    disabled rules that declare one run too and their findings are dropped after
    ``impact.assign``. A ``--select`` of one rule then says what the full run says of it."""
    enabled = [c for c in rules if c not in disabled]
    if not any(rules[c].change is not None for c in enabled):
        return enabled
    return [c for c in rules if c not in disabled or rules[c].change is not None]


_BACKWARD = re.compile(r"(^|/)torch/(_tensor|autograd/__init__)\.py$")


def _relate_backward(ctx: Context, diagnostics: list[Diagnostic]) -> None:
    """Forward line <-> backward time: a finding on a line whose backward kernels ran (charged to
    it through the fwdbwd flows) points at the line that ran the backward pass
    (``loss.backward()``), and a finding on that line points at the forward lines whose backward
    cost most."""
    m = ctx.model
    i = m.frames.first(lambda fr: fr.function == "backward" and bool(_BACKWARD.search(fr.path)))
    site = ctx.location(i) if i >= 0 else None
    if site is None or not site.line:
        return
    hot = ctx.hot or {}
    fwd = sorted(
        (
            h
            for h in hot.values()
            if h.gpu_backward_us > 0 and (h.trace_path, h.line) != (site.trace_path, site.line)
        ),
        key=lambda h: -h.gpu_backward_us,
    )
    if not fwd:
        return
    n = max(1, ctx.n_steps)
    for d in diagnostics:
        loc = d.location
        if not loc.line:
            continue
        h = hot.get((loc.trace_path, loc.line))
        if (loc.trace_path, loc.line) == (site.trace_path, site.line):
            for f in fwd[:3]:
                rel = ctx.location_of_hot(f)
                rel.note = f"backward of this forward line: {us(f.gpu_backward_us / n)} GPU per step"
                d.related.append(rel)
        elif h is not None and h.gpu_backward_us > 0:
            d.related.append(
                ctx.related(
                    i, f"this line's backward runs from here: {us(h.gpu_backward_us / n)} GPU per step"
                )
            )


def trace_info(path: str, sha: str, size: int, m: TraceModel) -> TraceInfo:
    doc = m.doc
    dev = m.device
    cc = m.compute_capability
    dist = doc.distributedInfo or {}
    return TraceInfo(
        path=path,
        sha256=sha,
        size_bytes=size,
        device=dev.name if dev is not None else None,
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
        cuda_runtime=str(doc.cuda_runtime_version) if doc.cuda_runtime_version is not None else None,
        cupti=str(doc.cupti_version) if doc.cupti_version is not None else None,
        with_stack=m.with_stack,
        record_shapes=m.record_shapes,
        profile_memory=m.profile_memory,
        events=doc.n_events,
        recorded_us=m.wall_start_us,
        rank=_int_or_none(dist.get("rank")),
        world_size=_int_or_none(dist.get("world_size")),
    )


def _int_or_none(v) -> Optional[int]:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _summary(ctx: Context) -> Summary:
    m, a = ctx.model, ctx.a
    classes: dict[str, float] = {}
    for g, e in enumerate(m.gpu):
        classes[a.gpu_class[g]] = classes.get(a.gpu_class[g], 0.0) + e.dur
    steps = [
        Step(
            name=s.name,
            start_us=round(s.ts - m.t0, 3),
            dur_us=round(s.dur, 3),
            gpu_busy_us=round(a.step_busy[k], 3),
            gpu_work_us=round(g.work_us, 3),
            gpu_span_us=round(g.span_us, 3),
            bound=g.bound,
            step_us=round(g.step_us, 3),
            copy_us=round(a.step_copy[k], 3),
        )
        for k, (s, g) in enumerate(zip(m.steps, a.step_gpu))
    ]
    return Summary(
        verdict=verdict(m, a),
        cpu_total_us=round(a.cpu_total_us, 3),
        cuda_total_us=round(a.cuda_total_us, 3),
        gpu_busy_pct=round(a.busy_pct, 2) if a.busy_pct is not None and m.gpu else None,
        window_us=round(a.window_us, 3),
        steps=steps,
        kernel_classes={k: round(v, 3) for k, v in sorted(classes.items(), key=lambda kv: -kv[1])},
        launches=a.launches,
        kernels=sum(1 for e in m.gpu if e.cat == "kernel"),
        notes=_window_notes(m, a) + _unread_notes(m) + ctx.unmapped_notes(),
        copy_busy_pct=round(a.copy_pct, 2) if a.copy_pct is not None and m.gpu else None,
        steps_from=m.steps_from,
        setup_pct=round(100.0 * a.setup_us / a.window_us, 2) if a.window_us > 0 else None,
    )


def _window_notes(m: TraceModel, a: Analysis) -> list[str]:
    """How the window was cut into steps when the trace has no markers, and its set-up share."""
    out = [] if m.steps_from == "ProfilerStep markers" else [f"steps: {m.steps_from}"]
    if a.setup_us > 0 and a.window_us > 0:
        rest = (
            "left out of the verdict"
            if a.steady_steps
            else "and no step is free of it: no steady state to judge"
        )
        out.append(
            f"set-up: {100.0 * a.setup_us / a.window_us:.0f}% of the active window is one-time "
            f"set-up ({us(a.setup_us)}), {rest}"
        )
    return out


def _unread_notes(m: TraceModel) -> list[str]:
    """What the trace holds that no analysis reads: complete events of categories profd does not
    know and that do not carry what GPU work carries (another accelerator's lanes, such as MTIA's,
    CUPTI's range-profiler replays), said instead of a silent cpu-only."""
    if not m.unread:
        return []
    parts = ", ".join(f"{n} {cat}" for cat, n in sorted(m.unread.items(), key=lambda kv: (-kv[1], kv[0])))
    dev = f" (device: {m.device.name})" if m.device is not None and m.device.name else ""
    return [
        f"not analysed: {parts} event(s){dev}; profd reads CPU ops, CUDA/HIP runtime calls and "
        f"CUDA/ROCm GPU kernels, copies and memsets: the verdict and findings leave these out"
    ]


def _hot_lines(ctx: Context) -> dict[tuple, HotLine]:
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

    def line(i: int) -> Optional[HotLine]:
        return of_key(ctx.line_key(i))

    for h, s in m.passes.hot_sums(ctx, line, LAUNCH_CATS):
        h.calls += s[0]
        h.launches += s[1]
        h.cpu_self_us += s[2]
        h.cpu_total_us += s[3]
        h.cpu_backward_us += s[4]
        h.gpu_us += s[5]
        h.gpu_forward_us += s[6]
        h.gpu_backward_us += s[7]
        h.kernel_classes = s[8]
        if s[9]:
            kstats[(h.trace_path, h.line)] = s[9]
    _inclusive(ctx, line, of_key)
    # the allocations by the key their owner's line is cached under (the owner itself where the
    # trace names each op's line), in order of first sample, so each line is looked up once
    ck = None if m.has_call_from else ctx.line_tokens()
    allocated: dict[int, list] = {}  # key -> [its first owner, bytes]
    get = allocated.get
    for owner, nbytes in zip(m.memory.owner, m.memory.nbytes):
        if owner >= 0 and nbytes > 0:
            c = owner if ck is None else ck[owner]
            got = get(c)
            if got is None:
                allocated[c] = [owner, nbytes]
            else:
                got[1] += nbytes
    for owner, nbytes in allocated.values():
        h = line(owner)
        if h is not None:
            h.bytes_allocated += nbytes
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


CONTEXT_PLUMBING = frozenset({"__enter__", "__exit__"})


def _inclusive(ctx: Context, line, of_key) -> None:
    """A line's cost with what it calls (``cpu_inclusive_us``, ``gpu_inclusive_us``), beside its
    own (``cpu_self_us``/``cpu_total_us``, ``gpu_us``): ``loss = model(x, y)`` runs no op itself,
    yet the forward's kernels, and through the fwdbwd flows their backward, are its work.

    CPU: each statement token's span (an op, a library call, a module call, a user function it
    calls directly), record_function labels aside (what runs inside them is a token itself).
    GPU: every GPU event charged to the innermost line that launched it (the forward op's for a
    backward kernel), to that line and to each statement up the user frames that called it."""
    m = ctx.model
    tok, cpu = m.token, m.cpu
    frames = m.frames
    for i in compress(range(len(tok)), m.passes.fixed_points(tok)):  # the statement tokens
        e = cpu[i]
        if e.cat == "user_annotation":
            continue
        if e.cat == "python_function":
            fr = frames.get(i)
            if fr is not None and fr.function in CONTEXT_PLUMBING:
                continue  # a with-statement's __enter__/__exit__ (record_function, the profiler's own)
        h = line(i)
        if h is not None:
            h.cpu_inclusive_us += e.dur
    for f in compress(range(len(cpu)), ctx.user_frames()):
        if ctx.calls_directly(f):
            h = of_key(ctx.caller_key(f))
            if h is not None:
                h.cpu_inclusive_us += cpu[f].dur
    if not m.gpu:
        return
    _, sums, reps = m.passes.line_gpu_sums(m.launcher, ctx.line_tokens(), m.gpu)
    chains: dict[int, list] = {}  # user frame event -> the lines of the statements above it

    def above(f: int) -> list:
        got = chains.get(f)
        if got is not None:
            return got
        path, fs = [], []
        while f >= 0 and f not in chains:
            fs.append(f)
            h = of_key(ctx.caller_key(f))
            path.append(h)
            p = m.parent[f]
            f = m.frame_of[p] if p >= 0 else -1
        tail = chains.get(f, []) if f >= 0 else []
        for k in range(len(fs) - 1, -1, -1):  # innermost last: build the chains outward in
            h = path[k]
            tail = ([h] if h is not None else []) + tail
            chains[fs[k]] = tail
        return chains[fs[0]] if fs else tail

    for us_, li in zip(sums, reps):
        h0 = line(li)
        f, _ = m.line_source(li)
        seen = set()
        for h in ([h0] if h0 is not None else []) + (above(f) if f >= 0 else []):
            if id(h) not in seen:
                seen.add(id(h))
                h.gpu_inclusive_us += us_
