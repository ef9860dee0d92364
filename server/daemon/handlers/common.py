"""What the handlers share: the request error, params conversion, the client's capabilities, file
lookup, and the before/after of a source file against the previous trace of its program."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional, Protocol

import msgspec
from lsprotocol import types as L
from pygls.exceptions import JsonRpcException
from pygls.uris import from_fs_path, to_fs_path

from ....protocol import types as T
from ....protocol.diff import LineDelta, ReportDiff
from ...engine import diff_reports
from .. import positions
from ..core import Core
from ..publish import Shown
from ..settings import plain
from ..sources import SOURCES


class Session(Protocol):
    """What a handler uses of its client's session (lsp.Session)."""

    core: Core
    ready: bool
    peer: str
    folders: list[str]
    init_settings: Any
    shown: Shown  # what each file shows, as last pushed

    @property
    def caps(self) -> Any: ...  # the client's capabilities
    @property
    def encoding(self) -> str: ...  # the column unit agreed at initialize

    # the text the client shows, and the findings moved onto it
    def current_lines(self, path: str) -> tuple[str, ...]: ...
    def positions(self, key: Optional[str]) -> positions.Positions: ...
    def findings(self, source: str) -> tuple[Optional[str], list[T.Diagnostic]]: ...
    def lsp_diagnostics(self, source: str) -> tuple[Optional[str], list[L.Diagnostic]]: ...
    def to_client(self, items: list[L.Diagnostic], path: str) -> list[L.Diagnostic]: ...
    async def edits_for(
        self, text: str, near: list[tuple[str, int]], everything: list[tuple[str, int]]
    ) -> dict: ...

    # telling the client
    def publish(self, source: str) -> None: ...
    def schedule_refresh(self) -> None: ...
    def edited(self, uri: str) -> None: ...
    def tell(self, kind: L.MessageType, text: str) -> None: ...
    def log_error(self, text: str) -> None: ...
    def progress(self, token: str, title: Optional[str]) -> None: ...

    # its options
    async def load_project(self) -> None: ...
    async def load_settings(self) -> None: ...
    def apply_settings(self, raw: Any) -> None: ...
    def reconfigure(self) -> None: ...


class RpcError(JsonRpcException):
    """A request's error as the client gets it: a JSON-RPC code and a plain message."""

    def __init__(self, code: int, message: str):
        super().__init__(message=message, code=code)
        self.code = code


def convert(params: Any, typ):
    """A request's params (JSON-like, or pygls's namedtuples) as the protocol type ``typ``;
    InvalidParams when they do not fit."""
    try:
        params = plain(params)
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise TypeError("params must be an object")
        return msgspec.convert(params, type=typ)
    except (msgspec.ValidationError, TypeError) as e:
        raise RpcError(-32602, f"profd: invalid params: {e}")


def command_args(args: tuple) -> tuple:
    """A command's arguments, whether the client sent them spread or as one list."""
    if len(args) == 1 and isinstance(args[0], list):
        return tuple(args[0])
    return args


@lru_cache(maxsize=4096)
def path_of(uri: str) -> str:
    return to_fs_path(uri) or uri


@lru_cache(maxsize=4096)
def uri_of(path: str) -> Optional[str]:
    """``path``'s file URI, as ``from_fs_path`` (a hover asks for it several times, and pygls
    quotes it anew each time)."""
    return from_fs_path(path)


async def lookup(core: Core, uri: str, outline: bool = False) -> str:
    """The indexed name of the file at ``uri`` (as indexed, or via its real path), read into
    ``SOURCES`` (off the loop) for the handler that asked; ``outline``: its functions too."""
    p = path_of(uri)
    if not core.index.indexed(p):
        await SOURCES.warm([p], outline=outline)
        rp = SOURCES.real(p)
        indexed = next((s for s in core.index.sources() if SOURCES.real(s) == rp), None)
        if indexed is None:
            return p
        p = indexed
    await SOURCES.warm([p], outline=outline)
    return p


def steps(core: Core, key: Optional[str]) -> int:
    """How many profiled steps the report's totals are over: hovers, hints and lenses show per step."""
    r = core.index.report(key) if key else None
    return max(1, len(r.summary.steps)) if r is not None and r.summary is not None else 1


_DIFFS: dict[tuple[str, str], ReportDiff] = {}  # (old key, new key): keys name content + options


def _diff_cached(core: Core, old: str, new: str) -> Optional[ReportDiff]:
    d = _DIFFS.get((old, new))
    if d is None:
        a, b = core.index.report(old), core.index.report(new)
        if a is None or b is None or a.error or b.error:
            return None
        d = _DIFFS[(old, new)] = diff_reports(a, b)
        if len(_DIFFS) > 32:
            _DIFFS.pop(next(iter(_DIFFS)))
    return d


def line_deltas(core: Core, source: str) -> tuple[Optional[str], list[LineDelta]]:
    """(previous trace path, its per-line deltas on ``source``) when a newer trace of the same
    program replaced an older one on this file."""
    old, new = core.index.previous_for(source), core.index.newest_for(source)
    if old is None or new is None:
        return None, []
    d = _diff_cached(core, old, new)
    if d is None:
        return None, []
    return core.index[old].path, [ld for ld in d.lines if ld.path == source]
