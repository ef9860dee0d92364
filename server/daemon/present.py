"""What the editor shows, as text: LSP Diagnostics made from findings, the markdown of hovers,
the labels of inlay hints and the titles of code lenses. Pure functions of a report's contents
(and the source lines they sit on); the handlers (``handlers/``) choose what to show and where.

Numbers are per profiled step, and say so (the findings' convention): a report's costs are sums
over its ``steps`` steps, divided here.
"""

from __future__ import annotations

import os
from typing import Optional

from lsprotocol import types as L
from pygls.uris import from_fs_path

from ...protocol import types as T
from ...protocol.catalog import RULES
from ...protocol.diff import LineDelta
from ..engine import impact_text, plural, size, us
from . import quickfix
from .sources import SOURCES

SEVERITY = {
    "error": L.DiagnosticSeverity.Error,
    "warning": L.DiagnosticSeverity.Warning,
    "information": L.DiagnosticSeverity.Information,
    "hint": L.DiagnosticSeverity.Hint,
}


def line_len(path: str, line0: int, lines_of=None) -> int:
    lines = (lines_of or SOURCES.lines)(path)
    return len(lines[line0]) if 0 <= line0 < len(lines) else 0


def line_range(path: str, line1: int, lines_of=None) -> L.Range:
    l0 = max(0, line1 - 1)
    return L.Range(L.Position(l0, 0), L.Position(l0, line_len(path, l0, lines_of)))


def to_lsp_diag(d: T.Diagnostic, source: str, key: str, sources=(), lines_of=None) -> L.Diagnostic:
    """A finding as an LSP Diagnostic on ``source``; ``sources``: the report's local files (a
    related location elsewhere points at its file when that is here, else at the trace);
    ``lines_of``: the text the client shows (default: the files as last read)."""
    loc = d.location
    on_line = bool(loc.line) and loc.path == source
    if on_line:
        l0 = loc.line - 1
        c0 = max(0, (loc.column or 1) - 1)
        if loc.end_column and loc.end_line:  # the call's own range, from the AST
            # (columns are characters: the session turns them into the client's units, encoding.py)
            rng = L.Range(L.Position(l0, c0), L.Position(loc.end_line - 1, max(0, loc.end_column - 1)))
        else:
            end = max(c0, line_len(source, l0, lines_of))
            lines = (lines_of or SOURCES.lines)(source)
            text = lines[l0] if l0 < len(lines) else ""
            c0 = min(c0, len(text) - len(text.lstrip())) if text else c0
            rng = L.Range(L.Position(l0, c0), L.Position(l0, end))
    else:
        rng = L.Range(L.Position(0, 0), L.Position(0, 0))
    msg = d.message
    if d.impact_us_per_step is not None:  # what severity comes from, and what hides it
        msg += f"\nimpact: {impact_text(d)}"
    if d.fix:
        msg += f"\nfix: {d.fix}"
    if not on_line and loc.path and loc.path != source:
        msg += f"\n(at {loc.trace_path or loc.path}" + (f":{loc.line})" if loc.line else ")")
    rule = RULES.get(d.code)
    related = []
    for r in d.related:
        if not r.line:
            continue
        here = r.path in sources and r.path != source or r.path == source
        target = r.path if here else source
        where = (r.note or r.function or "related") + (
            "" if here else f" (at {r.trace_path or r.path}:{r.line})"
        )
        related.append(
            L.DiagnosticRelatedInformation(
                location=L.Location(
                    uri=from_fs_path(target), range=line_range(target, r.line, lines_of) if here else rng
                ),
                message=where,
            )
        )
    if on_line:
        related += _fix_sites(d, source, lines_of)
    return L.Diagnostic(
        range=rng,
        message=msg,
        severity=SEVERITY.get(d.severity, L.DiagnosticSeverity.Information),
        code=d.code,
        source="profd",
        code_description=L.CodeDescription(href=rule.doc_url) if rule and rule.doc_url else None,
        related_information=related or None,
        data={"key": key, "line": loc.line if on_line else None},
    )


def _fix_sites(d: T.Diagnostic, source: str, lines_of=None) -> list[L.DiagnosticRelatedInformation]:
    """Where the finding's fix goes when that is another line of its file (the optimizer's
    constructor for ``optimizer-foreach-off``, found at ``optimizer.step()``)."""
    if d.code not in quickfix.RELATED:
        return []
    text = "\n".join((lines_of or SOURCES.lines)(source)) + "\n"
    return [
        L.DiagnosticRelatedInformation(
            location=L.Location(
                uri=from_fs_path(source),
                range=L.Range(L.Position(e.line, e.col), L.Position(e.end_line, e.end_col)),
            ),
            message=note,
        )
        for e, note in quickfix.related(text, d.code, d.location.line)
    ]


def hover_markdown(
    h: Optional[T.HotLine],
    trace: str,
    findings: list[T.Diagnostic],
    modules: list[T.ModuleNode] = (),
    steps: int = 1,
    where: str = "",
) -> str:
    """A line's hover: its costs per profiled step (the findings' convention, over ``steps``
    steps; ``h`` None for a line whose work all ran in callees, such as a call of a model written
    in the workspace) and the modules it calls, hottest first."""
    n = max(1, steps)
    if h is None:
        return _modules_hover(
            [f"**profd** · `{where}` · per step (mean of {plural(n, 'profiled step')})"],
            trace,
            findings,
            modules,
            n,
        )
    out = [
        f"**profd** · `{os.path.basename(h.path)}:{h.line}` in `{h.function}`"
        + ("" if h.precision == "statement" else f" ({h.precision})")
        + f" · per step (mean of {plural(n, 'profiled step')})",
        "",
    ]
    # per step, like every number here: "total" would say the whole window (README, Numbers)
    out.append(
        f"- CPU: {us(h.cpu_total_us / n)} in its ops, {us(h.cpu_self_us / n)} self, "
        f"{plural(h.calls / n, 'call')}"
    )
    gpu = f"- GPU: {us(h.gpu_us / n)} self"
    if h.gpu_forward_us or h.gpu_backward_us:
        gpu += f" (forward {us(h.gpu_forward_us / n)}, backward {us(h.gpu_backward_us / n)})"
    out.append(gpu)
    if h.cpu_inclusive_us > h.cpu_total_us or h.gpu_inclusive_us > h.gpu_us:
        out.append(
            f"- Inclusive (with what it calls): CPU {us(h.cpu_inclusive_us / n)}, "
            f"GPU {us(h.gpu_inclusive_us / n)}"
        )
    if h.cpu_backward_us:
        out.append(f"- CPU in backward: {us(h.cpu_backward_us / n)}")
    out.append(f"- Launches: {h.launches / n:.3g}")
    if h.kernel_classes:
        cls = ", ".join(
            f"{k} {us(v / n)}" for k, v in sorted(h.kernel_classes.items(), key=lambda kv: -kv[1])
        )
        out.append(f"- Kernel classes: {cls}")
    if h.bytes_allocated:
        out.append(f"- Memory allocated: {size(h.bytes_allocated / n)}")
    if h.top_kernels:
        out.append("")
        out.append("Top kernels:")
        for k in h.top_kernels[:5]:
            name = k.name if len(k.name) <= 80 else k.name[:77] + "..."
            out.append(f"- `{name}` ({k.kernel_class}): {k.count / n:.3g}×, {us(k.total_us / n)}")
    return _modules_hover(out, trace, findings, modules, n)


def _modules_hover(out: list[str], trace: str, findings, modules, steps: int) -> str:
    if modules:
        out.append("")
        out.append("Top modules (GPU per step, forward + backward):")
        for nd in modules:
            out.append(
                f"- `{nd.path}` ({nd.class_name}): {us(nd.gpu_us / steps)} = "
                f"{us(nd.gpu_forward_us / steps)} + {us(nd.gpu_backward_us / steps)}"
                + (f"; out of line: {nd.outlier}" if nd.outlier else "")
            )
    for d in findings:
        out.append("")
        out.append(f"**{d.severity}[{d.code}]** {d.message}")
        if d.impact_us_per_step is not None:
            out.append("")
            out.append(f"Impact: {impact_text(d)}")
    out.append("")
    out.append(f"Trace: `{trace}`")
    return "\n".join(out)


def before_after_markdown(ld: LineDelta, old_trace: str) -> str:
    """The hover section: this line against the previous trace of the same program."""
    old, new = ld.old_cpu_us + ld.old_gpu_us, ld.new_cpu_us + ld.new_gpu_us
    trend = {
        "faster": "faster",
        "slower": "slower",
        "same": "about the same",
        "new": "new in this trace",
        "gone": "gone",
    }[ld.trend]
    pct = f", {100 * ld.delta_us / old:+.0f}%" if old > 0 and ld.trend in ("faster", "slower") else ""
    out = [
        f"**Before/after** (against `{os.path.basename(old_trace)}`): CPU+GPU per step "
        f"{us(old)} → {us(new)} ({trend}{pct})"
    ]
    out.append(
        f"- CPU {us(ld.old_cpu_us)} → {us(ld.new_cpu_us)}, GPU {us(ld.old_gpu_us)} → {us(ld.new_gpu_us)}"
    )
    if ld.codes_gone:
        out.append("- gone: " + ", ".join(f"`{c}`" for c in ld.codes_gone))
    if ld.codes_new:
        out.append("- new: " + ", ".join(f"`{c}`" for c in ld.codes_new))
    return "\n".join(out)


def delta_title(ld: LineDelta, old_trace: str) -> str:
    bits = [
        f"profd: vs {os.path.basename(old_trace)}: {'+' if ld.delta_us >= 0 else '−'}"
        f"{us(abs(ld.delta_us))}/step ({ld.trend})"
    ]
    if ld.codes_gone:
        bits.append("gone: " + ", ".join(ld.codes_gone))
    if ld.codes_new:
        bits.append("new: " + ", ".join(ld.codes_new))
    return " · ".join(bits)


def changed_line_note(was_line: int, then: str) -> str:
    """The hover's note on a line edited since the trace: the numbers are of line ``was_line``
    as it was (``then``: its text then, when kept)."""
    return (
        f"*This line changed since the trace was analysed* (it was line {was_line}"
        + (f": `{then[:80]}`" if then else "")
        + "): the numbers are that code's."
    )


def hint_label(h: T.HotLine, steps: int) -> Optional[str]:
    """A hot line's inlay hint, per step (with what it calls where that is more); None for a
    line that cost nothing."""
    g, c = max(h.gpu_us, h.gpu_inclusive_us), max(h.cpu_total_us, h.cpu_inclusive_us)
    if g <= 0 and c <= 0:
        return None
    n = steps
    label = f"per step: GPU {us(g / n)} · CPU {us(c / n)}" + (
        " incl. calls" if (g, c) != (h.gpu_us, h.cpu_total_us) else ""
    )
    if h.launches:
        label += f" · {plural(h.launches / n, 'launch')}"
    return label


def function_lens_title(
    name: str,
    gpu: float,
    cpu: float,
    launches: float,
    hot_lines: int,
    steps: int,
    best: Optional[T.Diagnostic],
) -> str:
    """A function's code lens: what its statements run per step, callees included, and the fix
    in it that gives back most (``best``)."""
    n = steps
    title = (
        f"profd: {name}: per step GPU {us(gpu / n)} · CPU {us(cpu / n)} · "
        f"{plural(launches / n, 'launch')} ({plural(hot_lines, 'hot line')})"
    )
    if best is not None:
        title += f" · top fix: {best.code} ~{us(best.impact_us_per_step)}/step"
    return title


def function_lens_detail(
    name: str, source: str, trace: str, hots: list[T.HotLine], steps: int, src_lines: tuple[str, ...]
) -> str:
    """What clicking a function's lens shows: its hottest lines, per step."""
    n = steps
    lines = [f"profd: {name} in {os.path.basename(source)}, per step (trace {os.path.basename(trace)}):"]
    for h in sorted(hots, key=lambda h: -(h.gpu_us + h.cpu_total_us))[:8]:
        text = src_lines[h.line - 1].strip() if h.line <= len(src_lines) else ""
        lines.append(
            f"  line {h.line}: GPU {us(h.gpu_us / n)}, CPU {us(h.cpu_total_us / n)}, "
            f"{plural(h.launches / n, 'launch')}  {text[:60]}"
        )
    return "\n".join(lines)
