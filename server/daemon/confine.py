"""Confinement: which paths the daemon and the MCP server may touch, decided in one place.

A path is inside a root when its real path (symlinks resolved) is the root's real path or lies
under it. Every front-end asks here: the watcher (a trace's real path under the watched folder),
``profd/analyze`` and the MCP tools (a path, or each file of a folder, under the configured
roots: a symlink in a folder that leads out of it is refused like the path it leads to), and the
placement of findings (a frame's file shows diagnostics, hovers, lenses and edits only when it is
inside the workspace; a frame naming ``~/.bashrc`` or ``/etc/hostname`` stays unmapped, on the
trace). A path holding a NUL byte, or that cannot be resolved, is inside nothing.

``shown`` cuts a path (or any client-given text) for an echo in an error message: a 10 MB path
is not sent back whole.
"""

from __future__ import annotations

import os
from typing import Iterable, Optional

SHOWN = 200  # characters of a client-given path or text echoed back


def real(path: str) -> Optional[str]:
    """The real path of ``path``, or None when it cannot be one (a NUL byte, not a string)."""
    if not isinstance(path, str) or not path or "\0" in path:
        return None
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return None


def under(real_path: str, real_root: str, strict: bool = False) -> bool:
    """Whether the resolved ``real_path`` is the resolved ``real_root`` (unless ``strict``) or lies
    below it."""
    if real_path == real_root:
        return not strict
    return real_path.startswith(real_root.rstrip(os.sep) + os.sep)


def within(path: str, roots: Iterable[str], strict: bool = False, resolved: bool = False) -> bool:
    """Whether ``path`` lies inside one of ``roots`` (both resolved here, unless ``resolved``:
    they are real paths already)."""
    rp = path if resolved else real(path)
    if rp is None or "\0" in rp:
        return False
    for root in roots:
        r = root if resolved else real(root)
        if r is not None and under(rp, r, strict):
            return True
    return False


def shown(text, limit: int = SHOWN) -> str:
    """``text`` (a client's) as an error message may echo it: ``repr`` for what is not a string,
    cut to ``limit`` characters with how much was left out."""
    s = text if isinstance(text, str) else repr(text)
    s = s.replace("\0", "\\0")
    if len(s) <= limit:
        return s
    return f"{s[:limit]}… ({len(s)} characters)"
