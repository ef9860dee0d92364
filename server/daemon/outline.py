"""The functions of a source file, by qualified name (``Block.forward``), from its AST.

Frames in a trace name a function by its bare name (``forward``); a file with four ``forward``
methods needs the enclosing classes to tell them apart. No I/O: the daemon parses the lines it
read, off its event loop, once per version of the file (``sources.SourceLines``).
"""

from __future__ import annotations

import ast
import bisect
from typing import NamedTuple, Optional, Sequence


class Func(NamedTuple):
    qualname: str
    def_line: int  # 1-based line of ``def`` (after decorators)
    end_line: int


def _outline(text: str) -> tuple[Func, ...]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ()
    out: list[Func] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out.append(Func(q, child.lineno, child.end_lineno or child.lineno))
                walk(child, q + ("." if isinstance(child, ast.ClassDef) else ".<locals>."))
            else:
                walk(child, prefix)

    walk(tree, "")
    return tuple(sorted(out, key=lambda f: f.def_line))


def functions(lines: Sequence[str]) -> tuple[Func, ...]:
    """The functions of a file, from its ``lines``."""
    return _outline("\n".join(lines)) if lines else ()


def function_at(fs: Sequence[Func], line: int) -> Optional[Func]:
    """The innermost of the functions ``fs`` whose body holds ``line`` (1-based)."""
    i = bisect.bisect_right([f.def_line for f in fs], line)
    best = None
    for f in fs[:i]:
        if f.def_line <= line <= f.end_line and (best is None or f.def_line >= best.def_line):
            best = f
    return best
