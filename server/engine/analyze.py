"""Trace file -> model -> analyses -> rules -> Report. No protocol, no network.

``analyze_file`` is the one path the CLI, the daemon and the tests share. What a rule sees (the
``Context``) lives in ``context``, which the rules import instead of this module.
"""

from __future__ import annotations

import gc
import os
import re
from contextlib import contextmanager
from typing import Optional

import msgspec

from ... import __version__
from ...protocol.catalog import RULES as CATALOG
from ...protocol.types import Diagnostic, HotLine, Report, Step, Summary, TraceInfo
from . import impact, loader, modules, passes, suppress
from .analyses import Analysis, analyze, verdict
from .bound import bound
from .context import Context, Options
from .model import TraceModel, build
from .statements import start_frame_shapes
from .rules import load, load_all
from .rules.util import us


MAX_HOT_LINES = 200


class Analyzed(msgspec.Struct):
    """One trace through the pipeline: its report, and what it was made from for the callers that
    take more than the report from the same read (a rank's summary, the annotated copy)."""

    report: Report
    model: TraceModel
    analysis: Analysis
    context: Context


@contextmanager
def _cyclic_gc_paused():
    """Loading and building the model create millions of small objects and no cycles: the cyclic
    GC would only rescan them again and again (it tripled the time on the 36 MB trace).

    After the pause, what the pipeline made and keeps goes straight to the oldest generation,
    which only a full collection scans: the first young collection after it scanned all of it and
    found nothing (0.11 s after a 1 GB trace's report, 0.024 s after 255 MB). ``freeze`` then
    ``unfreeze`` move every tracked object there (a process's own frozen objects too: none here;
    ``profd-client`` freezes only as it exits)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def analyze_trace(path: str, options: Optional[Options] = None) -> Analyzed:
    """load -> model -> analyses -> rules -> report: the one pipeline behind every front end (the
    report, a rank's summary, the annotated copy). Raises ``loader.TraceError`` for a file that is
    not a trace."""
    with _cyclic_gc_paused():
        doc, sha, size = loader.load(path, later=True)
        return analyze_document(path, doc, sha, size, options)


def analyze_document(
    path: str,
    doc: loader.TraceDoc,
    sha: "str | loader.LaterSha",
    size: int,
    options: Optional[Options] = None,
) -> Analyzed:
    """The pipeline from a decoded document on, for a caller that decoded the file itself
    (annotate keeps the events as written). Lets go of the document's events. ``sha``: the
    digest, or the loader's ``LaterSha`` still hashing it beside the analysis."""
    options = options or Options()
    with _cyclic_gc_paused():
        model = build(doc)
        doc.drop_events()
        # on the other core, while the analyses and first rules run
        start_frame_shapes(model)
        model.start_memory()
        analysis = analyze(model)
        ctx = Context(model, analysis, path, options)
        report = analyze_context(ctx, trace_info(path, sha if isinstance(sha, str) else "", size, model))
        if not isinstance(sha, str):
            report.trace.sha256 = sha.result()  # no rule reads it: waited for at the end
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


def analyze_or_error(path: str, options: Optional[Options] = None, hold: Optional[list] = None) -> Report:
    """Like ``analyze_file`` but a bad trace becomes a Report carrying ``error``. ``hold``: the
    pipeline's model and analysis are appended to it, for the caller to let go of (or never
    free: a process about to exit)."""
    try:
        done = analyze_trace(path, options)
    except loader.TraceError as e:
        return error_report(path, str(e))
    if hold is not None:
        hold.append(done)
    return done.report


def analyze_context(ctx: Context, info: TraceInfo) -> Report:
    """Rules and the report's parts over a built model and its analyses (the context holds both).
    What the enabled rules read is made on first use (the hot lines, the module labels); the
    parts no rule reads only when ``options.parts`` asks for them (``PARTS``)."""
    options = ctx.options
    diagnostics: list[Diagnostic] = []
    trim = passes.TRIM_BETWEEN_RULES and info.size_bytes < passes.TRIM_BELOW_BYTES
    rules = _enabled_rules(options.disabled)
    for code in _rules_to_run(rules, options.disabled):
        try:
            diagnostics.extend(rules[code](ctx))
        except MemoryError:  # the analysis is over its memory: no report, not a partial one
            raise
        except Exception:  # one broken rule must not take the report down
            import logging  # here: the one use, and no start-up cost for it

            logging.getLogger("profd.engine").exception("rule %s failed on %s", code, info.path)
        if trim:  # the rule's transients: not held resident up to the peak
            passes.trim_malloc()
    ctx.rules_done()
    if trim:  # what only the rules read: the replay's objects come from Python's arenas
        passes.trim_malloc()
    impact.assign(ctx, diagnostics)
    if options.disabled:  # the findings run only for the impact of the enabled ones
        diagnostics = [d for d in diagnostics if d.code not in options.disabled]
    used: set[tuple[str, int, str]] = set()
    diagnostics, suppressed = suppress.apply(diagnostics, used=used)
    if suppress.UNUSED not in options.disabled:
        ran: dict[str, set[int]] = {}
        for h in ctx.hot.values():  # the statements this trace ran, in the workspace's files
            local = ctx.sources.resolve(h.trace_path, h.line) if h.precision == "statement" else None
            if local is not None:
                ran.setdefault(local, set()).add(h.line)
        ran_rules = set(load_all()) - set(options.disabled)
        diagnostics += suppress.unused(used, ran, ran_rules)
    _relate_backward(ctx, diagnostics)
    diagnostics.sort(key=impact.order)
    parts = options.parts
    tree = (
        modules.build_tree(ctx)
        if "modules" in parts or (options.library_lines and "hot_lines" in parts)
        else None
    )
    ranked: list[HotLine] = []
    if "hot_lines" in parts:
        ranked = sorted(
            ctx.hot.values(),
            key=lambda h: -(max(h.gpu_us, h.gpu_inclusive_us) + max(h.cpu_total_us, h.cpu_inclusive_us)),
        )[:MAX_HOT_LINES]
        if options.library_lines and tree is not None:  # off by default: the user's own lines first
            ranked += modules.library_lines(tree, diagnostics)
    return bound(
        Report(
            trace=info,
            summary=_summary(ctx),
            diagnostics=diagnostics,
            hot_lines=ranked,
            modules=tree if "modules" in parts else None,
            profd_version=__version__,
            suppressed=suppressed,
        )
    )


def _enabled_rules(disabled: set[str]) -> dict:
    """The enabled rules, their families alone imported, or every rule when one of them declares
    a change (``_rules_to_run`` then runs the others that do)."""
    if not disabled:
        return load_all()
    rules = load(c for c in CATALOG if c not in disabled)
    return load_all() if any(r.change is not None for r in rules.values()) else rules


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
    if site is None or not site.line or not any(d.location.line for d in diagnostics):
        return
    hot = ctx.hot
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
    classes = a.class_us
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
        kernels=a.keys.mask(lambda k, c: k[1] == "kernel").count(1),
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
