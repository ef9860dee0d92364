"""Inline suppression: a comment on the source line a finding sits on drops it from the report.

    loss_value = loss.item()  # profd: ignore[host-sync]
    x = batch.to(dev)         # profd: ignore[pageable-memcpy, launch-storm]
    torch.cuda.synchronize()  # profd: ignore            (every profd finding on this line)
    y = z.item()              # noqa: host-sync          (noqa style, beside other tools' codes)

A finding on a statement that spans several lines is suppressed by a comment on any of them. A
bare ``# noqa`` is other linters' and suppresses nothing here. The report keeps how many findings
each code lost (``Report.suppressed``) so ``--statistics`` can say so. This runs in the engine's
report assembly (``analyze.analyze_model``), so the CLI, the daemon and every other caller see
the same findings; the daemon runs it again on the diagnostics it serves for a source, so that a
comment written after the report was made takes effect at the next publish or pull.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, Sequence

from ...protocol.types import Diagnostic
from .sourcemap import source_lines

# `# profd: ignore`, `# profd: ignore[a, b]`, `# noqa: a, b` (codes are lower-case words with -)
_PROFD = re.compile(r"#\s*profd:\s*ignore(?:\[([^\]]*)\])?", re.IGNORECASE)
_NOQA = re.compile(r"#\s*noqa:\s*([A-Za-z0-9_\-]+(?:[\s,]+[A-Za-z0-9_\-]+)*)", re.IGNORECASE)
ALL = "*"


def codes_on(text: str) -> set[str]:
    """The codes a line's comment suppresses (``ALL`` for a bare ``# profd: ignore``)."""
    if "#" not in text:
        return set()
    out: set[str] = set()
    for m in _PROFD.finditer(text):
        if m.group(1) is None:
            out.add(ALL)
        else:
            out |= {c.strip().lower() for c in m.group(1).split(",") if c.strip()}
    for m in _NOQA.finditer(text):
        out |= {c.lower() for c in re.split(r"[\s,]+", m.group(1)) if c}
    return out


def _suppressed(d: Diagnostic, lines_of: Callable[[str], Sequence[str]]) -> bool:
    loc = d.location
    if not loc.line or not loc.path or loc.precision == "trace":
        return False
    lines = lines_of(loc.path)
    last = loc.end_line if loc.end_line and loc.end_line >= loc.line else loc.line
    for n in range(loc.line, min(last, len(lines)) + 1):
        codes = codes_on(lines[n - 1])
        if ALL in codes or d.code in codes:
            return True
    return False


def apply(diagnostics: Iterable[Diagnostic], lines_of: Callable[[str], Sequence[str]] = source_lines
          ) -> tuple[list[Diagnostic], dict[str, int]]:
    """(the findings no comment suppresses, per code how many were suppressed); ``lines_of``: a
    file's lines (default: read now; the daemon passes what it read off its event loop)."""
    kept: list[Diagnostic] = []
    dropped: dict[str, int] = {}
    for d in diagnostics:
        if _suppressed(d, lines_of):
            dropped[d.code] = dropped.get(d.code, 0) + 1
        else:
            kept.append(d)
    return kept, dropped

