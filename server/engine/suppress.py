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

A comment that suppressed nothing in this trace, on a statement the trace ran (or, ``ignore-file``,
in a file it ran), is itself a finding, ``unused-suppression`` (ruff's RUF100, ``unused-noqa``):
each code it names that no finding of this trace needed, a misspelt one too; a ``# noqa:`` code
that is no profd rule's is another tool's and never reported, nor a rule's that did not run.
"""

from __future__ import annotations

import bisect
import io
import re
import tokenize
from collections import OrderedDict
from typing import Callable, Iterable, NamedTuple, Optional, Sequence, cast

from ...protocol.catalog import RULES
from ...protocol.types import Diagnostic, Location, Severity
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
        skip = (
            tokenize.NL,
            tokenize.COMMENT,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENCODING,
            tokenize.ENDMARKER,
        )
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

    def file_comments(self) -> dict[int, set[str]]:
        """The file's own ``# profd: ignore-file[...]`` comment lines (a comment after code on its
        line is not one): line -> the codes each suppresses in all of the file."""
        if not hasattr(self, "_file"):
            self._file: dict[int, set[str]] = {}
            for n, cs in self.by_line.items():
                for c in cs:
                    m = _FILE.match(c.text)
                    if m and not self.lines[n - 1][: c.col].strip():
                        self._file.setdefault(n, set()).update(
                            {ALL}
                            if m.group(1) is None
                            else {x.strip().lower() for x in m.group(1).split(",") if x.strip()}
                        )
        return self._file

    def file_codes(self) -> set[str]:
        """The codes the file's ``ignore-file`` comments suppress in all of it."""
        return set().union(*self.file_comments().values())

    def codes(self, line: int) -> set[str]:
        """The codes suppressed on ``line``: its statement's comments' (``ALL`` for every code)."""
        return set().union(*(codes for _, codes in self.comments_of(line)))

    def comments_of(self, line: int) -> list[tuple[int, set[str]]]:
        """(comment line, the codes it suppresses) for the comments of ``line``'s statement."""
        first, last = self.statement(line)
        return [(n, codes_on(c.text)) for n in range(first, last + 1) for c in self.by_line.get(n, ())]


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


UNUSED = "unused-suppression"


def _suppressor(d: Diagnostic, lines_of: Callable[[str], Sequence[str]]) -> Optional[tuple[str, int, str]]:
    """(path, comment line, the code it names for ``d``: ``d.code`` or ``ALL``) of the comment that
    suppresses ``d``, None when none does."""
    loc = d.location
    if not loc.line or not loc.path or loc.precision == "trace":
        return None
    lines = lines_of(loc.path)
    com = comments(lines)
    every = ALL if d.code != UNUSED else None  # a bare ignore is what the finding is about, not its waiver
    for n, codes in com.file_comments().items():
        if d.code in codes or every in codes:
            return loc.path, n, d.code if d.code in codes else ALL
    last = loc.end_line if loc.end_line and loc.end_line >= loc.line else loc.line
    for line in range(loc.line, min(last, len(lines)) + 1):
        for n, codes in com.comments_of(line):
            if d.code in codes or every in codes:
                return loc.path, n, d.code if d.code in codes else ALL
    return None


def apply(
    diagnostics: Iterable[Diagnostic],
    lines_of: Callable[[str], Sequence[str]] = source_lines,
    used: Optional[set[tuple[str, int, str]]] = None,
) -> tuple[list[Diagnostic], dict[str, int]]:
    """(the findings no comment suppresses, per code how many were suppressed); ``lines_of``: a
    file's lines (default: read now; the daemon passes what it read off its event loop); ``used``
    collects (path, comment line, code) of each comment that suppressed a finding."""
    kept: list[Diagnostic] = []
    dropped: dict[str, int] = {}
    for d in diagnostics:
        hit = _suppressor(d, lines_of)
        if hit is not None:
            dropped[d.code] = dropped.get(d.code, 0) + 1
            if used is not None:
                used.add(hit)
        else:
            kept.append(d)
    return kept, dropped


def _named(text: str) -> set[str]:
    """The codes a comment names that can be unused: all of ``# profd: ignore[...]``'s (``ALL`` for a
    bare one), and the profd rules among ``# noqa:``'s (the rest are other tools')."""
    out = codes_on(_NOQA.sub("", text))
    for m in _NOQA.finditer(text):
        out |= {c.lower() for c in re.split(r"[\s,]+", m.group(1)) if c.lower() in RULES}
    return out


def unused(
    used: set[tuple[str, int, str]],
    ran: dict[str, set[int]],
    ran_rules: set[str],
    lines_of: Callable[[str], Sequence[str]] = source_lines,
) -> list[Diagnostic]:
    """``unused-suppression`` findings: per comment in a file the trace ran (``ran``: path -> the
    lines it ran), the codes it names that suppressed nothing (``used``, from ``apply``), among
    the rules that ran (``ran_rules``). A line comment counts only on a statement the trace ran."""
    out: list[Diagnostic] = []
    for path in sorted(ran):
        lines = lines_of(path)
        com = comments(lines)
        whole = com.file_comments()
        for n in sorted(com.by_line):
            for c in com.by_line[n]:
                if n in whole and _FILE.match(c.text):
                    codes = whole[n]
                else:
                    first, last = com.statement(n)
                    if ran[path].isdisjoint(range(first, last + 1)):
                        continue  # code this trace never ran: it cannot say the comment is unused
                    codes = _named(c.text)
                if UNUSED in codes:  # ``# profd: ignore[unused-suppression]``, as ruff's RUF100 in a noqa
                    continue
                idle = sorted(
                    k
                    for k in codes
                    if (path, n, k) not in used and (k == ALL or k in ran_rules or k not in RULES)
                )
                if idle:
                    out.append(_unused_finding(path, n, c, idle))
    return out


def _unused_finding(path: str, line: int, c: Comment, idle: list[str]) -> Diagnostic:
    named = [k for k in idle if k != ALL]
    unknown = [k for k in named if k not in RULES]
    what = f"no {', '.join(named)} finding" if named else "no finding"
    why = f"; {', '.join(unknown)}: no such rule" if unknown else ""
    text = c.text.strip()
    head = (
        f"`{text}` suppressed nothing"
        if set(idle) == _named(text) or idle == [ALL]
        else f"`{text}`: {', '.join(named)} suppressed nothing"
    )
    return Diagnostic(
        code=UNUSED,
        severity=cast(Severity, RULES[UNUSED].severity),
        message=f"{head} in this trace ({what} here{why})",
        location=Location(
            path=path,
            line=line,
            column=c.col + 1,
            precision="statement",
            trace_path=path,
            end_line=line,
            end_column=c.col + 1 + len(c.text),
        ),
        evidence={"codes": idle, "comment": c.text.strip()},
        fix="remove the comment, or the codes in it that suppress nothing",
    )
