"""Inline suppression: a comment on the source line a finding sits on drops it from the report.

    loss_value = loss.item()  # profd: ignore[host-sync]
    x = batch.to(dev)         # profd: ignore[pageable-memcpy, launch-storm]
    torch.cuda.synchronize()  # profd: ignore            (every profd finding on this line)
    y = z.item()              # noqa: host-sync          (noqa style, beside other tools' codes)

A comment line of its own ``# profd: ignore-file`` (or ``# profd: ignore-file[host-sync, ...]``)
anywhere in a file drops every finding (or those codes') located in that file, as ruff's
``# ruff: noqa``. A finding on a statement that spans several lines (brackets, a trailing backslash) is suppressed
by a comment on any of them. Comments are found by Python's tokenizer, so text inside a string
(``s = "# profd: ignore[...]"``) is not one. A bare ``# noqa`` is other linters' and suppresses
nothing here. The report keeps how many findings
each code lost (``Report.suppressed``) so ``--statistics`` can say so. This runs in the engine's
report assembly (``analyze.analyze_model``), so the CLI, the daemon and every other caller see
the same findings; the daemon runs it again on the diagnostics it serves for a source, so that a
comment written after the report was made takes effect at the next publish or pull.
"""
from __future__ import annotations

import bisect
import io
import re
import tokenize
from collections import OrderedDict
from typing import Callable, Iterable, NamedTuple, Optional, Sequence

from ...protocol.types import Diagnostic
from .sourcemap import source_lines

# `# profd: ignore`, `# profd: ignore[a, b]`, flake8's noqa with a colon and codes (codes are lower-case words with -)
_PROFD = re.compile(r"#\s*profd:\s*ignore(?!-file)(?:\[([^\]]*)\])?", re.IGNORECASE)
_FILE = re.compile(r"#\s*profd:\s*ignore-file(?:\[([^\]]*)\])?\s*$", re.IGNORECASE)
_NOQA = re.compile(r"#\s*noqa:\s*([A-Za-z0-9_\-]+(?:[\s,]+[A-Za-z0-9_\-]+)*)", re.IGNORECASE)
_MAYBE = re.compile(r"profd:|noqa:", re.IGNORECASE)  # a line that could hold one
ALL = "*"


def codes_on(text: str) -> set[str]:
    """The codes a comment's text suppresses (``ALL`` for a bare ``# profd: ignore``)."""
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


class Comment(NamedTuple):
    line: int  # 1-based
    col: int  # character offset of the ``#``
    text: str


class Comments:
    """A file's comments as Python's tokenizer finds them, and its statements' line spans (a
    logical line: brackets and backslashes join physical ones). Where the text does not tokenize
    (an edit half made), the lines after the failure are read as text, comment-like or not."""

    def __init__(self, lines: Sequence[str]):
        self.lines = lines
        self.by_line: dict[int, list[Comment]] = {}
        self._firsts: list[int] = []  # statement spans, in order: first lines ...
        self._lasts: list[int] = []  # ... and last lines
        good = 0  # lines up to here were tokenized
        first: Optional[int] = None
        skip = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
                tokenize.ENDMARKER)
        try:
            toks = tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
            for t in toks:
                if t.type == tokenize.COMMENT:
                    self.by_line.setdefault(t.start[0], []).append(Comment(t.start[0], t.start[1], t.string))
                elif t.type == tokenize.NEWLINE:
                    if first is not None:
                        self._firsts.append(first)
                        self._lasts.append(t.start[0])
                    first = None
                elif t.type not in skip and first is None:
                    first = t.start[0]
                good = t.end[0] if first is None else first - 1
        except (tokenize.TokenError, SyntaxError, ValueError):
            for n in list(self.by_line):
                if n > good:
                    del self.by_line[n]
            for n in range(good + 1, len(lines) + 1):
                k = lines[n - 1].find("#")
                if k >= 0:
                    self.by_line[n] = [Comment(n, k, lines[n - 1][k:])]

    def statement(self, line: int) -> tuple[int, int]:
        """(first, last) line of the statement ``line`` is part of (itself when none is)."""
        i = bisect.bisect_right(self._firsts, line) - 1
        if i >= 0 and self._lasts[i] >= line:
            return self._firsts[i], self._lasts[i]
        return line, line

    def file_codes(self) -> set[str]:
        """The codes the file's own ``# profd: ignore-file[...]`` comment lines suppress in all of it
        (a comment after code on its line is not one)."""
        if not hasattr(self, "_file"):
            self._file: set[str] = set()
            for n, cs in self.by_line.items():
                for c in cs:
                    m = _FILE.match(c.text)
                    if m and not self.lines[n - 1][:c.col].strip():
                        self._file |= {ALL} if m.group(1) is None else \
                            {x.strip().lower() for x in m.group(1).split(",") if x.strip()}
        return self._file

    def codes(self, line: int) -> set[str]:
        """The codes suppressed on ``line``: its statement's comments' (``ALL`` for every code)."""
        first, last = self.statement(line)
        out: set[str] = set()
        for n in range(first, last + 1):
            for c in self.by_line.get(n, ()):
                out |= codes_on(c.text)
        return out


_NONE = Comments(())
_SCANNED: "OrderedDict[tuple[str, ...], Comments]" = OrderedDict()


def comments(lines: Sequence[str]) -> Comments:
    """``lines``' comments, for ``codes`` (kept by content for the last few texts seen: the
    daemon asks again at each publish, with the same text read anew). Lines without ``profd:`` or
    ``noqa:`` anywhere are not tokenized at all (so the statement spans are only there when a
    comment could be)."""
    key = tuple(lines)
    hit = _SCANNED.get(key)
    if hit is not None:
        _SCANNED.move_to_end(key)
        return hit
    c = Comments(key) if any(_MAYBE.search(ln) for ln in key) else _NONE
    _SCANNED[key] = c
    if len(_SCANNED) > 16:
        _SCANNED.popitem(last=False)
    return c


def _suppressed(d: Diagnostic, lines_of: Callable[[str], Sequence[str]]) -> bool:
    loc = d.location
    if not loc.line or not loc.path or loc.precision == "trace":
        return False
    lines = lines_of(loc.path)
    com = comments(lines)
    whole = com.file_codes()
    if ALL in whole or d.code in whole:
        return True
    last = loc.end_line if loc.end_line and loc.end_line >= loc.line else loc.line
    for n in range(loc.line, min(last, len(lines)) + 1):
        codes = com.codes(n)
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

