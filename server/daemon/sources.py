"""The daemon's one cache of source text: the files findings point at, read off the loop.

The LSP handlers and the core read a snapshot from memory (``SOURCES.lines(path)``); a thread of
its own stats and reads the files (``await SOURCES.warm(paths)``), so a frame naming a FIFO,
/dev/zero or a file on a hung mount never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import os
import stat
from collections import OrderedDict
from typing import NamedTuple, Optional

from ..engine import read_lines
from . import confine

log = logging.getLogger("profd.sources")


class Snap(NamedTuple):
    """A source file as last read off the loop."""

    mtime: Optional[float]  # None: not a regular file here (missing, a FIFO, unreadable)
    lines: tuple[str, ...]
    real: str  # its real path
    functions: Optional[tuple] = None  # outline.functions, once asked for


class SourceLines:
    """The source files findings point at, read on one thread of its own into a snapshot the
    LSP handlers read from memory: the loop never stats, reads or resolves a source file (a
    frame naming a FIFO, /dev/zero or a file on a hung mount cannot stall anything). Handlers
    ``await warm(paths)`` first; the engine's reader (``sourcemap.read_lines``) reads only
    regular files. This is the daemon's one cache of source text (not the engine's as well), and
    it is bounded in text, not only in files: a trace naming 200 files of 16 MB each (any file
    can be named) would otherwise keep gigabytes for good."""

    MAX = 8192  # files kept (least recently warmed dropped first)
    MAX_CHARS = 256 << 20  # and at most this much text in all

    def __init__(self):
        self._reader = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="profd-src")
        self._snap: OrderedDict[str, Snap] = OrderedDict()
        self.chars = 0  # text held in _snap

    async def warm(self, paths, timeout: float = 2.0, outline: bool = False) -> None:
        """Read (or re-stat) ``paths`` off the loop, waiting at most ``timeout`` s; ``outline``:
        their functions too (code lenses name them)."""
        paths = [p for p in dict.fromkeys(paths) if p and os.path.isabs(p)]
        if not paths:
            return
        fut = asyncio.get_running_loop().run_in_executor(self._reader, self._read, paths, outline)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            log.warning("profd: reading %d source file(s) took over %.0f s", len(paths), timeout)

    def _read(self, paths: list[str], with_outline: bool) -> None:
        from . import outline  # the AST outline, parsed here: never on the loop

        for p in paths:
            try:
                st = os.stat(p)
                mtime = st.st_mtime if stat.S_ISREG(st.st_mode) else None
            except (OSError, ValueError):  # ValueError: a NUL byte in a frame's path
                mtime = None
            # The old snapshot stays in place until the new one replaces it (one assignment): the
            # loop reads SOURCES while this thread works (and after a warm that timed out), and a
            # file missing here reads as empty, every finding's line "deleted" (an empty pull).
            old = self._snap.get(p)
            if old is not None and old.mtime == mtime:
                lines, funcs = old.lines, old.functions
            else:
                lines, funcs = read_lines(p) if mtime is not None else (), None
            if with_outline and funcs is None:
                funcs = outline.functions(lines)
            self._snap[p] = Snap(mtime, lines, confine.real(p) or p, funcs)
            self._snap.move_to_end(p)
            self.chars += text_chars(lines) - (text_chars(old.lines) if old is not None else 0)
            while len(self._snap) > self.MAX or (self.chars > self.MAX_CHARS and len(self._snap) > 1):
                self.chars -= text_chars(self._snap.popitem(last=False)[1].lines)

    # ---- on the loop: memory only -----------------------------------------------------------
    def lines(self, path: str) -> tuple[str, ...]:
        s = self._snap.get(path)
        return s.lines if s is not None else ()

    def mtime(self, path: str) -> Optional[float]:
        s = self._snap.get(path)
        return s.mtime if s is not None else None

    def isfile(self, path: str) -> bool:
        return self.mtime(path) is not None

    def local(self, path: str, roots: list[str]) -> bool:
        """Whether ``path`` is a regular file (as last read) inside one of the folders ``roots``
        (warmed too: their real paths are known): only those get findings, hovers and edits."""
        return self.isfile(path) and confine.within(
            self.real(path), [self.real(r) for r in roots], resolved=True
        )

    def real(self, path: str) -> str:
        s = self._snap.get(path)
        return s.real if s is not None else path

    def functions(self, path: str) -> tuple:
        s = self._snap.get(path)
        return s.functions or () if s is not None else ()


def text_chars(lines: tuple[str, ...]) -> int:
    """Characters of text in ``lines`` (what the caches are bounded by)."""
    return sum(map(len, lines))


SOURCES = SourceLines()
