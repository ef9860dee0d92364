"""Mapping the trace's frame paths onto the user's workspace.

Frame paths are as the remote interpreter saw them: relative (``train.py``), with site-packages
stripped, or absolute on another machine (``/home/x/exp/model.py``). In order: the exact path
(when it exists here), the configured prefix mappings (``REMOTE=LOCAL``), a path relative to a
workspace root, then a unique suffix match under the workspace roots. When nothing matches the
trace's path is kept and the location says so (``mapped=False``).

A suffix match must be the same file, not one that shares its name: when the frame has
directories, the match shares a directory with it too, or is the candidate's whole path below its
root (``/home/x/exp/train.py`` is the workspace's ``train.py``; ``flashinfer/fused_moe/core.py``
is not the workspace's ``core.py``, nor ``moca/pipeline/model.py`` an ``other/model.py``). And a
file shorter than the frame's line is never the frame's file, whichever way it was found.
"""

from __future__ import annotations

import os
import re
import stat
from functools import lru_cache
from typing import Iterable, Iterator, Optional

_SKIP_DIRS = {
    ".git",
    ".hg",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    "site-packages",
    ".mypy_cache",
    ".pytest_cache",
    ".tox",
    "build",
    "dist",
    "dist-packages",
    "__pypackages__",
}
# The operating system's folders: searched when a root is one of them or inside one, never from a
# root above them (a CLI run from ``/`` would list /proc, /sys and /usr's ten thousand folders).
_SYSTEM_DIRS = frozenset(
    {
        "/proc",
        "/sys",
        "/dev",
        "/run",
        "/boot",
        "/usr",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/bin",
        "/sbin",
        "/etc",
        "/var",
        "/snap",
        "/tmp",
        "/lost+found",
        "/System",
        "/Library",
        "/private",
        "/Volumes",
    }
)
_MAX_FILES = 200_000
# A project's tree is a few thousand folders; past these a search costs seconds and a frame's file
# is not one a suffix match should pick from so far away.
_MAX_DIRS = 10_000
_MAX_DEPTH = 16


def nameable(path: str) -> bool:
    """Whether a report can carry ``path``: a file name that is not UTF-8 reads back with lone
    surrogates (``os.fsdecode``), which no JSON, no SQLite text and no editor takes."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class SourceMap:
    def __init__(self, roots: Iterable[str] = (), path_map: Iterable[tuple[str, str]] = ()):
        self.roots = [os.path.abspath(r) for r in roots]
        # longest remote prefix first, so /a/b wins over /a
        self.path_map = sorted(((r, l) for r, l in path_map), key=lambda p: -len(p[0]))
        self._by_name: Optional[dict[str, list[tuple[str, int]]]] = None
        self._cache: dict[str, Optional[str]] = {}
        # a found file's line count, read once: one version of each file for the whole analysis
        # (a map serves one analysis), and no stat a statement (16,600 of them in a 2,000-step trace)
        self._lines: dict[str, int] = {}

    def resolve(self, trace_path: str, line: int = 0) -> Optional[str]:
        """A local file for ``trace_path`` that has ``line``, or None."""
        if trace_path in self._cache:
            found = self._cache[trace_path]
        else:
            found = self._cache[trace_path] = self._resolve(trace_path)
        if found is not None:
            n = self._lines.get(found)
            if n is None:
                n = self._lines[found] = len(source_lines(found))
            if line > n:
                return None
        return found

    def _resolve(self, p: str) -> Optional[str]:
        if os.path.isabs(p) and os.path.isfile(p) and (not self.roots or self._inside_roots(p)):
            return p
        for remote, local in self.path_map:
            if p == remote or p.startswith(remote.rstrip("/") + "/"):
                rest = p[len(remote) :].lstrip("/")
                cand = os.path.join(local, rest) if rest else local
                if os.path.isfile(cand):
                    return os.path.abspath(cand)
        if not os.path.isabs(p):
            for root in self.roots:
                cand = os.path.join(root, p)
                if os.path.isfile(cand):
                    return cand
        return self._suffix_match(p)

    def _inside_roots(self, p: str) -> bool:
        ap = os.path.abspath(p)
        return any(ap == r or ap.startswith(r + os.sep) for r in self.roots)

    def _suffix_match(self, p: str) -> Optional[str]:
        if not self.roots:
            return None
        parts = [x for x in p.replace("\\", "/").split("/") if x and x != "."]
        if not parts:
            return None
        cands = self._index().get(parts[-1], [])
        if not cands:
            return None
        absolute = p.startswith("/") or os.path.isabs(p)
        # the longest shared tail of path components decides; a tie means ambiguous
        best, best_len, tie = None, 0, False
        for c, below in cands:
            cparts = c.split(os.sep)
            k = 0
            while k < len(parts) and k < len(cparts) and parts[-1 - k] == cparts[-1 - k]:
                k += 1
            # the frame's directories must agree: all of them (a relative frame), or at least one,
            # or (an absolute frame, from another machine) all of the candidate's below its root
            if not (k == len(parts) or k >= 2 or (absolute and k == below)):
                continue
            if k > best_len:
                best, best_len, tie = c, k, False
            elif k == best_len:
                tie = True
        return None if tie else best

    def files_named(self, name: str) -> list[str]:
        """The workspace's Python files called ``name`` (what the suffix match chose among)."""
        return [c for c, _ in self._index().get(name, [])]

    def _index(self) -> dict[str, list[tuple[str, int]]]:
        if self._by_name is None:
            idx: dict[str, list[tuple[str, int]]] = {}
            for dirpath, below, filenames in folders(self.roots):
                for f in filenames:
                    if f.endswith(".py"):  # (path, its components below the root)
                        idx.setdefault(f, []).append((os.path.join(dirpath, f), below))
            self._by_name = idx
        return self._by_name


def folders(roots: Iterable[str]) -> Iterator[tuple[str, int, list[str]]]:
    """The folders the suffix match searches under ``roots``: (folder, its depth counting the root
    as 1, the names of its files), nearest the root first, so that a bound cuts the deepest ones.

    Bounded in what it reads, whatever the workspace is (``/`` as the current folder): at most
    ``_MAX_DIRS`` folders listed and ``_MAX_FILES`` Python files, ``_MAX_DEPTH`` levels deep; never
    the skipped names, hidden folders, linked folders, nor the system's folders under a root that
    holds them. Only folder listings are read, no file."""
    listed = py_files = 0
    for root in roots:
        level = [root]
        for depth in range(1, _MAX_DEPTH + 1):
            deeper: list[str] = []
            for folder in level:
                if listed >= _MAX_DIRS or py_files > _MAX_FILES:
                    return
                listed += 1
                files: list[str] = []
                try:
                    with os.scandir(folder) as it:
                        for e in it:
                            if not nameable(e.name):
                                continue
                            try:
                                is_dir = e.is_dir()
                            except OSError:
                                is_dir = False
                            if not is_dir:
                                files.append(e.name)
                            elif _searched(e):
                                deeper.append(e.path)
                except OSError:  # unreadable or gone: as os.walk, skipped
                    continue
                py_files += sum(1 for f in files if f.endswith(".py"))
                yield folder, depth, files
            level = deeper


def _searched(e: os.DirEntry) -> bool:
    name = e.name
    return not (name in _SKIP_DIRS or name.startswith(".") or e.path in _SYSTEM_DIRS or e.is_symlink())


class LibrarySources:
    """Library files installed here (this interpreter's site-packages, or the given roots), for
    library frames: the trace's path after its ``site-packages/`` (as is when relative), joined
    to each root. No suffix search: a site-packages tree is too large to index per trace."""

    def __init__(self, roots: Optional[Iterable[str]] = None):
        if roots is None:
            import site
            import sysconfig

            found = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
            try:
                found += site.getsitepackages() + [site.getusersitepackages()]
            except AttributeError:  # some virtualenvs' site module
                pass
            roots = found
        self.roots = list(dict.fromkeys(os.path.abspath(r) for r in roots if os.path.isdir(r)))
        self._cache: dict[str, Optional[str]] = {}

    def resolve(self, trace_path: str) -> Optional[str]:
        hit = self._cache.get(trace_path, "")
        if hit != "":
            return hit
        p = trace_path.replace("\\", "/")
        for marker in ("site-packages/", "dist-packages/"):
            if marker in p:
                p = p.rsplit(marker, 1)[1]
                break
        found = None
        if not os.path.isabs(p):
            for root in self.roots:
                cand = os.path.join(root, p)
                if os.path.isfile(cand):
                    found = cand
                    break
        self._cache[trace_path] = found
        return found


_EOL = re.compile(r"\r\n|\r|\n")
_NOT_EOL = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # str.splitlines' other line ends


def split_lines(text: str) -> list[str]:
    """``text``'s lines as Python's tokenizer, the LSP and every editor count them: a line ends at
    ``\n``, ``\r\n`` or ``\r`` only (``str.splitlines`` also ends one at a form feed, ``\x0b``,
    ``\x1c``-``\x1e``, ``\x85``, U+2028 and U+2029, which moved every finding below a docstring
    holding one a line down). A final line end ends the last line, as with ``splitlines``."""
    if not any(c in text for c in _NOT_EOL):  # the common case: the same lines, faster
        return text.splitlines()
    lines = _EOL.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def line_starts(text: str) -> list[int]:
    """The offset in ``text`` where each line starts (the ``split_lines`` lines, then the empty
    one after a final line end)."""
    return [0, *(m.end() for m in _EOL.finditer(text))]


MAX_SOURCE_BYTES = 16 << 20  # a larger "source file" is not one (a trace can name any path)


def read_lines(path: str) -> tuple[str, ...]:
    """The file's lines, uncached (for a caller with a cache of its own). Only a regular file,
    opened without blocking (a FIFO or device named by a frame would otherwise hang the reader,
    and /dev/zero never ends), and only its first MAX_SOURCE_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return ()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ()
        chunks, size = [], 0
        while size < MAX_SOURCE_BYTES and (b := os.read(fd, min(1 << 20, MAX_SOURCE_BYTES - size))):
            chunks.append(b)
            size += len(b)
        return tuple(split_lines(b"".join(chunks).decode("utf-8", errors="replace")))
    except OSError:
        return ()
    finally:
        os.close(fd)


@lru_cache(maxsize=256)
def _read_lines(path: str, mtime: float) -> tuple[str, ...]:
    return read_lines(path)


def source_lines(path: str) -> tuple[str, ...]:
    """The file's lines (cached by mtime); empty when unreadable or not a regular file."""
    try:
        return _read_lines(path, os.stat(path).st_mtime)
    except (OSError, ValueError):
        return ()


def source_line(path: str, line: int) -> Optional[str]:
    lines = source_lines(path)
    return lines[line - 1] if 0 < line <= len(lines) else None
