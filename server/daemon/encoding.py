"""Columns as the client counts them, converted in this one place.

profd counts a column in characters (code points) of a line, lines being split as Python and the
LSP split them (``sourcemap.split_lines``). An LSP client counts UTF-16 code units unless the two
agreed on another unit at ``initialize`` (``general.positionEncodings``: pygls takes the client's
first of utf-8, utf-16, utf-32 and announces it in ``positionEncoding``). Before this, an emoji or
an "é" earlier on a line moved every column after it: "Use zero_grad(set_to_none=True)" wrote
``zero_grad(set_to_noneTruee)``. Every position the LSP layer sends goes through ``to_client``
(ranges of diagnostics, their related locations, edits, hovers, hints), every column it reads
through ``from_client``.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from lsprotocol import types as L
from pygls.uris import to_fs_path

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"


def units(text: str, enc: str) -> int:
    """How many of the client's units ``text`` is."""
    if enc == UTF32 or text.isascii():
        return len(text)
    if enc == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def to_client(line: str, col: int, enc: str) -> int:
    """Character column ``col`` of ``line`` in the client's units (past the end: counted on)."""
    if col <= 0:
        return 0
    return units(line[:col], enc) + max(0, col - len(line))


def from_client(line: str, col: int, enc: str) -> int:
    """The client's column ``col`` on ``line`` as a character column (inside a character that
    takes several units: that character's)."""
    if enc == UTF32 or line.isascii() or col <= 0:
        return max(0, col)
    n = 0
    for i, ch in enumerate(line):
        n += units(ch, enc)
        if n > col:
            return i
    return len(line) + (col - n)


def position(lines: Sequence[str], p: L.Position, enc: str) -> L.Position:
    """A character position on ``lines`` as the client's."""
    text = lines[p.line] if 0 <= p.line < len(lines) else ""
    return L.Position(p.line, to_client(text, p.character, enc))


def range_(lines: Sequence[str], r: L.Range, enc: str) -> L.Range:
    return L.Range(position(lines, r.start, enc), position(lines, r.end, enc))


LinesOf = Callable[[str], Sequence[str]]  # a file's lines as the client has them, by path


def diagnostics(items: Iterable[L.Diagnostic], path: str, lines_of: LinesOf, enc: str) -> list[L.Diagnostic]:
    """``items`` (on the file at ``path``, character columns) with the client's columns, their
    related locations too (each on its own file)."""
    out = list(items)
    if enc == UTF32:
        return out
    here = lines_of(path)
    for d in out:
        d.range = range_(here, d.range, enc)
        for r in d.related_information or ():
            p = to_fs_path(r.location.uri) or r.location.uri
            r.location.range = range_(here if p == path else lines_of(p), r.location.range, enc)
    return out


def edits(items: Iterable[L.TextEdit], lines: Sequence[str], enc: str) -> list[L.TextEdit]:
    """Text edits (character columns on ``lines``) with the client's columns."""
    return [L.TextEdit(range=range_(lines, e.range, enc), new_text=e.new_text) for e in items]
