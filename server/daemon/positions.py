"""Positions through the user's edits: a trace's line numbers belong to the source as it was when
the trace was analysed (its *baseline*, kept with the report), not to the file as it is now.

``LineMap(baseline, current)`` diffs the two texts line by line (difflib) and maps a baseline
line onto the current text: an unchanged line to where it moved, a changed line (an edit, a quick
fix, a re-indent) to the line that replaced it (flagged ``changed``), a deleted one to nothing.
Columns follow the call's own text when the line changed (``loss.item()`` found again on it).
``Positions`` maps a report's findings, hot lines and ranges for one client, whose current text
is its open buffer (unsaved edits included) or else the file on disk. The engine never aligns an
old trace against new text: nothing here analyses anything. No I/O: texts are handed in.
"""

from __future__ import annotations

import difflib
from collections import OrderedDict
from typing import Callable, NamedTuple, Optional, Sequence

import msgspec

from ...protocol import types as T

Lines = Sequence[str]


class Where(NamedTuple):
    line: int  # 1-based, in the current text
    changed: bool  # the line's text is not what the trace was analysed against


class LineMap:
    """Baseline line -> current line, and back (both 1-based)."""

    def __init__(self, old: Lines, new: Lines):
        self.old, self.new = tuple(old), tuple(new)
        self.identity = self.old == self.new
        self._fwd: dict[int, Where] = {}
        self._back: dict[int, Where] = {}
        if not self.identity:
            self._build()

    def _build(self) -> None:
        sm = difflib.SequenceMatcher(None, self.old, self.new, autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                for k in range(i2 - i1):
                    self._pair(i1 + k, j1 + k, False)
            elif tag == "replace":
                self._replace(i1, i2, j1, j2)
            # "delete": those baseline lines are gone; "insert": new lines no trace ran

    def _pair(self, i: int, j: int, changed: bool) -> None:
        self._fwd[i + 1] = Where(j + 1, changed)
        self._back.setdefault(j + 1, Where(i + 1, changed))

    def _replace(self, i1: int, i2: int, j1: int, j2: int) -> None:
        """Old lines i1..i2 became new lines j1..j2: pair the lines that are still alike (in
        order); a line with no like partner goes to the new line at the same place in the block
        (a statement rewritten into fewer or more lines is still there, changed)."""
        nxt = j1
        alike = (i2 - i1) * (j2 - j1) <= 400  # beyond that, by place alone (no quadratic work)
        matched: dict[int, int] = {}
        for i in range(i1, i2):
            best, best_r = None, 0.6
            for j in range(nxt, j2 if alike else nxt):
                r = difflib.SequenceMatcher(None, self.old[i].strip(), self.new[j].strip()).ratio()
                if r > best_r:
                    best, best_r = j, r
            if best is not None:
                matched[i] = best
                nxt = best + 1
        free = [j for j in range(j1, j2) if j not in matched.values()]
        for i in range(i1, i2):
            if i in matched:
                self._pair(i, matched[i], True)
                continue
            # no like partner: rewritten into a new line between its neighbours' partners, or
            # deleted when none is free there
            lo = max((matched[k] for k in matched if k < i), default=j1 - 1)
            hi = min((matched[k] for k in matched if k > i), default=j2)
            room = [j for j in free if lo < j < hi]
            if room:
                k = (i - i1) * len(room) // max(1, i2 - i1)
                self._pair(i, room[min(k, len(room) - 1)], True)

    def line(self, line: int) -> Optional[Where]:
        """Where baseline ``line`` is now; None when it was deleted (or is past the text)."""
        if self.identity:
            return Where(line, False)
        return self._fwd.get(line)

    def back(self, line: int) -> Optional[Where]:
        """The baseline line the current ``line`` comes from; None for a line added since."""
        if self.identity:
            return Where(line, False)
        return self._back.get(line)

    def columns(self, line: int, col0: int, end0: Optional[int]) -> tuple[int, Optional[int]]:
        """0-based [col0, end0) on baseline ``line`` as columns on the line it maps to: the same
        text found again on it (nearest to where it was), else the whole statement."""
        w = self.line(line)
        if w is None or not w.changed:
            return col0, end0
        old = self.old[line - 1] if line <= len(self.old) else ""
        new = self.new[w.line - 1] if w.line <= len(self.new) else ""
        if end0 is not None and end0 > col0:
            piece = old[col0:end0]
            hits = [k for k in range(len(new)) if new.startswith(piece, k)] if piece.strip() else []
            if hits:
                at = min(hits, key=lambda k: abs(k - col0))
                return at, at + len(piece)
        indent = len(new) - len(new.lstrip())
        return indent, len(new) if end0 is not None else None


class Positions:
    """One report's positions for one client: ``baseline_of(path)`` the text the report was made
    against (None: unknown, the current text stands in), ``current_of(path)`` the text the client
    shows (its buffer, else the file)."""

    def __init__(self, baseline_of: Callable[[str], Optional[Lines]], current_of: Callable[[str], Lines]):
        self.baseline_of, self.current_of = baseline_of, current_of
        self._maps: dict[str, LineMap] = {}

    def map(self, path: str) -> LineMap:
        m = self._maps.get(path)
        if m is None:
            cur = self.current_of(path)
            base = self.baseline_of(path)
            m = self._maps[path] = _cached(cur if base is None else base, cur)
        return m

    def location(self, loc: T.Location) -> Optional[T.Location]:
        """``loc`` in the current text; None when its line was deleted."""
        if not loc.line or not loc.path:
            return loc
        m = self.map(loc.path)
        if m.identity:
            return loc
        w = m.line(loc.line)
        if w is None:
            return None
        c0 = max(0, (loc.column or 1) - 1)
        one_line = not loc.end_line or loc.end_line == loc.line
        end0 = loc.end_column - 1 if loc.end_column and one_line else None
        c0, end0 = m.columns(loc.line, c0, end0)
        end_line, end_col = loc.end_line, loc.end_column
        if loc.end_line and not one_line:
            we = m.line(loc.end_line)
            end_line, end_col = (
                (we.line, loc.end_column) if we is not None and not we.changed else (w.line, None)
            )
        elif loc.end_line:
            end_line, end_col = w.line, (end0 + 1 if end0 is not None else None)
        return msgspec.structs.replace(loc, line=w.line, column=c0 + 1, end_line=end_line, end_column=end_col)

    def diagnostics(self, diags: Sequence[T.Diagnostic]) -> list[T.Diagnostic]:
        """Copies of ``diags`` in the current text (a finding whose line was deleted is dropped;
        a related location whose line was deleted too)."""
        out = []
        for d in diags:
            loc = self.location(d.location)
            if loc is None:
                continue
            related = [r2 for r2 in (self.location(r) for r in d.related) if r2 is not None]
            out.append(msgspec.structs.replace(d, location=loc, related=related))
        return out

    def hot_lines(self, hots: Sequence[T.HotLine]) -> list[T.HotLine]:
        out = []
        for h in hots:
            w = self.map(h.path).line(h.line)
            if w is not None:
                out.append(h if w.line == h.line else msgspec.structs.replace(h, line=w.line))
        return out

    def line(self, path: str, line: int) -> Optional[Where]:
        return self.map(path).line(line)

    def back(self, path: str, line: int) -> Optional[Where]:
        return self.map(path).back(line)


_MAPS: OrderedDict[tuple, LineMap] = OrderedDict()


def _cached(old: Lines, new: Lines) -> LineMap:
    """One diff per pair of texts (each publish and hover of an unchanged buffer reuses it)."""
    k = (hash(tuple(old)), len(old), hash(tuple(new)), len(new))
    m = _MAPS.get(k)
    if m is None or m.old != tuple(old) or m.new != tuple(new):
        m = _MAPS[k] = LineMap(old, new)
        while len(_MAPS) > 64:
            _MAPS.popitem(last=False)
    else:
        _MAPS.move_to_end(k)
    return m
