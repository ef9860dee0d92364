"""The functions of a source file, by qualified name (``Block.forward``), from its AST.

Frames in a trace name a function by its bare name (``forward``); a file with four ``forward``
methods needs the enclosing classes to tell them apart. Cached per (path, mtime) through the
engine's own cached reader; no other I/O.
"""
from __future__ import annotations

import ast
import bisect
import os
from functools import lru_cache
from typing import NamedTuple, Optional

from ..engine.sourcemap import source_lines


class Func(NamedTuple):
    qualname: str
    def_line: int  # 1-based line of ``def`` (after decorators)
    end_line: int


@lru_cache(maxsize=256)
def _outline(path: str, mtime: float) -> tuple[Func, ...]:
    try:
        tree = ast.parse("\n".join(source_lines(path)))
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


def functions(path: str) -> tuple[Func, ...]:
    try:
        return _outline(path, os.stat(path).st_mtime)
    except OSError:
        return ()


def function_at(path: str, line: int) -> Optional[Func]:
    """The innermost function whose body holds ``line`` (1-based)."""
    fs = functions(path)
    i = bisect.bisect_right([f.def_line for f in fs], line)
    best = None
    for f in fs[:i]:
        if f.def_line <= line <= f.end_line and (best is None or f.def_line >= best.def_line):
            best = f
    return best
