"""Quick fixes for findings whose fix is mechanical, computed on the source text (pure: text in,
edits out; the daemon turns them into LSP code actions).

Each rule declares its own fix beside its check (``@rule.quick_fix`` in
``server/engine/rules/<family>.py``: ``(Source, 1-based line) -> [Fix]``); this module holds what
they share: the parsed ``Source`` and its AST helpers, ``Edit``/``Fix``, applying edits, and the
entry points (``fixes``, ``fix_all``, ``related``, ``suppress``). Each fix is found on the AST
(never by regex on the text), applied to a copy and offered only if the result still compiles.
Positions are 0-based lines and character offsets in the line.

Every finding also gets ``# profd: ignore[code]`` at the end of its line (``suppress``: the inline
suppression the engine honours, ``engine/suppress.py``; an existing ``# profd: ignore[a]``
becomes ``# profd: ignore[a, code]``).
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Callable, NamedTuple, Optional

from .rules import declared, load_all
from .sourcemap import line_starts, split_lines
from .suppress import ALL, Comments

SUPPRESS = re.compile(r"#\s*profd:\s*ignore\[([^\]]*)\]", re.IGNORECASE)  # where to add a code


class Edit(NamedTuple):
    line: int
    col: int
    end_line: int
    end_col: int
    text: str


class Fix(NamedTuple):
    title: str
    edits: list[Edit]
    preferred: bool = False


def apply(text: str, edits: list[Edit]) -> str:
    """``text`` with ``edits`` applied (non-overlapping; any order). Lines end at ``\n``,
    ``\r\n`` or ``\r`` only (``sourcemap.split_lines``), columns are characters."""
    starts = line_starts(text)

    def off(line: int, col: int) -> int:
        return min(starts[line] + col, len(text)) if line < len(starts) else len(text)

    out, end = [], len(text)
    for e in sorted(edits, key=lambda e: (e.line, e.col), reverse=True):
        a, b = off(e.line, e.col), off(e.end_line, e.end_col)
        out += [text[b:end], e.text]
        end = a
    out.append(text[:end])
    return "".join(reversed(out))


def compiles(text: str) -> bool:
    try:
        compile(text, "<profd-fix>", "exec")
        return True
    except (SyntaxError, ValueError):
        return False


class Source:
    def __init__(self, text: str):
        self.text = text
        self.lines = split_lines(text)
        self.starts = line_starts(text)
        self.tree = ast.parse(text)
        self._parents: Optional[dict[int, ast.AST]] = None

    def col(self, line1: int, byte_col: int) -> int:
        """AST byte offset -> character offset in the line."""
        s = self.lines[line1 - 1] if 0 < line1 <= len(self.lines) else ""
        return len(s.encode()[:byte_col].decode(errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int, int, int]:
        return (
            node.lineno - 1,
            self.col(node.lineno, node.col_offset),
            node.end_lineno - 1,
            self.col(node.end_lineno, node.end_col_offset),
        )

    def segment(self, node: ast.AST) -> str:
        """The node's source text (``ast.get_source_segment`` splits the whole text at each call:
        quadratic over a file's assignments)."""
        if getattr(node, "end_lineno", None) is None:
            return ""
        l, c, el, ec = self.span(node)
        if el >= len(self.starts):
            return ""
        return self.text[self.starts[l] + c : self.starts[el] + ec]

    def parent(self, node: ast.AST) -> Optional[ast.AST]:
        if self._parents is None:
            self._parents = {id(c): p for p in ast.walk(self.tree) for c in ast.iter_child_nodes(p)}
        return self._parents.get(id(node))

    def inside(self, node: ast.AST, outer: ast.AST) -> bool:
        while node is not None:
            if node is outer:
                return True
            node = self.parent(node)
        return False

    def calls(self, pred: Callable[[ast.Call], bool], within: Optional[ast.AST] = None):
        return [n for n in ast.walk(within or self.tree) if isinstance(n, ast.Call) and pred(n)]

    def stmt_at(self, line1: int) -> Optional[ast.stmt]:
        """The innermost simple statement starting on ``line1``."""
        best = None
        for n in ast.walk(self.tree):
            if isinstance(n, ast.stmt) and n.lineno == line1 and not hasattr(n, "body"):
                best = n
        return best

    def func_at(self, line1: int):
        best = None
        for n in ast.walk(self.tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= line1 <= (
                n.end_lineno or n.lineno
            ):
                if best is None or n.lineno >= best.lineno:
                    best = n
        return best


def call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def set_kw(src: Source, call: ast.Call, key: str, value: str, drop: tuple[str, ...] = ()) -> list[Edit]:
    """Edits setting keyword ``key=value`` on ``call`` (replacing it if present), removing ``drop``."""
    edits = []
    for kw in call.keywords:
        if kw.arg == key:
            if src.segment(kw.value) == value:
                return []
            l, c, el, ec = src.span(kw.value)
            edits.append(Edit(l, c, el, ec, value))
        elif kw.arg in drop:
            edits += drop_kw(src, call, kw)
    if any(kw.arg == key for kw in call.keywords):
        return edits
    # append before the closing parenthesis
    el, ec = call.end_lineno - 1, src.col(call.end_lineno, call.end_col_offset) - 1
    sep = ", " if (call.args or [k for k in call.keywords if k.arg not in drop]) else ""
    edits.append(Edit(el, ec, el, ec, f"{sep}{key}={value}"))
    return edits


def drop_kw(src: Source, call: ast.Call, kw: ast.keyword) -> list[Edit]:
    items = sorted([*call.args, *[k.value for k in call.keywords]], key=lambda n: (n.lineno, n.col_offset))
    i = items.index(kw.value)
    l, c = kw.lineno - 1, src.col(kw.lineno, kw.col_offset)
    el, ec = src.span(kw.value)[2:]
    if i > 0:  # ", key=value" from the end of the previous item
        prev = items[i - 1]
        l, c = prev.end_lineno - 1, src.col(prev.end_lineno, prev.end_col_offset)
    elif i + 1 < len(items):  # "key=value, " up to the next item
        nxt = items[i + 1]
        el, ec = nxt.lineno - 1, src.col(nxt.lineno, nxt.col_offset)
        if isinstance(nxt, ast.AST) and any(k.value is nxt for k in call.keywords):
            k2 = next(k for k in call.keywords if k.value is nxt)
            el, ec = k2.lineno - 1, src.col(k2.lineno, k2.col_offset)
    return [Edit(l, c, el, ec, "")]


def line_first(src: Source, line1: int, calls: list[ast.Call]) -> list[ast.Call]:
    on = [c for c in calls if c.lineno <= line1 <= c.end_lineno]
    return on or calls


# ---- what the rules' fixes share -----------------------------------------------------------
def after_imports(src: Source) -> int:
    """0-based line after the module's leading docstring and imports."""
    line = 0
    for n in src.tree.body:
        if isinstance(n, (ast.Import, ast.ImportFrom)) or (
            isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        ):
            line = n.end_lineno
        else:
            break
    return line


def imports_torch(src: Source) -> bool:
    return any(
        isinstance(n, ast.Import) and any(a.name == "torch" and a.asname is None for a in n.names)
        for n in src.tree.body
    )


MAX_TEXT = 1 << 20  # characters: a larger file gets no quick fixes (each parses and compiles it)


@lru_cache(maxsize=4)
def _parsed(text: str) -> Source:
    """The parsed text, once for the several findings of one code-action request."""
    return Source(text)


def fixes(text: str, code: str, line1: int) -> list[Fix]:
    """Quick fixes for finding ``code`` on 1-based ``line1`` of ``text``; each one compiles."""
    r = declared(code)
    fn = r.fix if r else None
    if fn is None or len(text) > MAX_TEXT:
        return []
    try:
        found = fn(_parsed(text), line1)
    except (SyntaxError, ValueError, IndexError, RecursionError, MemoryError):
        return []
    return [f for f in found if f.edits and compiles(apply(text, f.edits))]


def _offsets(text: str, edits: list[Edit]) -> list[tuple[int, int]]:
    starts = line_starts(text)
    off = lambda l, c: starts[l] + c if l < len(starts) else len(text)  # noqa: E731
    return [(off(e.line, e.col), off(e.end_line, e.end_col)) for e in edits]


def fix_all(text: str, findings: list[tuple[str, int]]) -> Optional[Fix]:
    """One fix for the file: each finding's preferred quick fix (``findings``: (code, 1-based
    line)), the same edit once, a fix whose edits overlap one already taken left out, each taken
    only if the text still compiles with it."""
    taken: list[Edit] = []
    spans: list[tuple[int, int]] = []
    n = 0
    for code, line1 in findings:
        fx = next((f for f in fixes(text, code, line1) if f.preferred), None)
        if fx is None:
            continue
        new = [e for e in fx.edits if e not in taken]
        if not new:
            n += 1  # the same fix as an earlier finding's (one optimizer for several steps)
            continue
        mine = _offsets(text, new)
        if any(a < d and c < b or a == b == c == d for a, b in mine for c, d in spans):
            continue
        if not compiles(apply(text, taken + new)):
            continue
        taken += new
        spans += mine
        n += 1
    if not taken:
        return None
    return Fix(f"Fix all profd findings that have a mechanical fix ({n} in this file)", taken, True)


MAX_RELATED_TEXT = 1 << 19  # characters: diagnostics are made on the loop; a larger file goes without


def elsewhere() -> frozenset[str]:
    """The codes whose fix goes somewhere other than the finding's own line (``related``)."""
    return frozenset(code for code, r in load_all().items() if r.fix_sites is not None)


def related(text: str, code: str, line1: int) -> list[tuple[Edit, str]]:
    """Places a finding's fix goes that are not its own line: (span, what is there), as its rule
    declares them (``@rule.fix_elsewhere``: ``optimizer-foreach-off``, found at
    ``optimizer.step()``, points at the optimizer's constructor)."""
    r = declared(code)
    if r is None or r.fix_sites is None or len(text) > MAX_RELATED_TEXT:
        return []
    try:
        src = _parsed(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return r.fix_sites(src, line1)


def suppress(text: str, code: str, line1: int) -> Optional[Fix]:
    """``# profd: ignore[code]`` on the statement of 1-based ``line1`` (merged into one of its
    comments that has one; else at the end of its last line, where a comment may stand: never
    after a trailing backslash, never inside a string). Offered only if the result compiles and
    the engine then reads the code as suppressed on ``line1``."""
    lines = split_lines(text)
    if not 0 < line1 <= len(lines):
        return None
    com = Comments(lines)
    already = com.codes(line1)  # the engine's own reading of the comments
    if code in already or ALL in already:
        return None
    first, last = com.statement(line1)
    edit = None
    for n in range(first, last + 1):
        for c in com.by_line.get(n, ()):
            m = SUPPRESS.search(c.text)
            if m:
                codes = [x.strip() for x in m.group(1).split(",") if x.strip()]
                new = f"# profd: ignore[{', '.join(codes + [code])}]"
                edit = Edit(n - 1, c.col + m.start(), n - 1, c.col + m.end(), new)
                break
        if edit:
            break
    if edit is None:
        s = lines[last - 1]
        edit = Edit(last - 1, len(s.rstrip()), last - 1, len(s), f"  # profd: ignore[{code}]")
    new_text = apply(text, [edit])
    if not compiles(new_text) or code not in Comments(split_lines(new_text)).codes(line1):
        return None
    return Fix(f"Ignore {code} on this line (# profd: ignore[{code}])", [edit])
