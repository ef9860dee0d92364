"""Option values every front end takes alike (``profd-client``, ``profd serve``, the editor's
settings, ``[tool.profd]``): one parser for each, so each front end says the same of a bad one."""

from __future__ import annotations

import os
from typing import Optional

from .types import Struct


def path_map_item(item: str, base: Optional[str] = None) -> tuple[str, str]:
    """``REMOTE=LOCAL`` -> (the frame path prefix from the profiled machine, the local folder
    made absolute: ``~`` expanded, a relative one taken from ``base`` or the working directory).
    ValueError says what is wrong."""
    if not isinstance(item, str) or "=" not in item:
        raise ValueError(f"path-map wants REMOTE=LOCAL, got {item!r}")
    remote, local = item.split("=", 1)
    local = os.path.expanduser(local)
    return remote, os.path.normpath(os.path.join(base or os.getcwd(), local))


class AnalysisOptions(Struct, kw_only=True):
    """An analysis's options as they travel (``profd/analyze``, the daemon's settings, the CLI's
    requests): the engine's ``Options`` less what it builds where it runs (the source map, the
    library roots). One definition: ``engine.Options`` has these fields, under these names, and
    converts (``Options.wire``, ``Options.given``); tests/test_layout.py holds the two equal. A
    field left None is not given: the receiver's own value applies."""

    workspace: Optional[list[str]] = None
    path_map: Optional[list[tuple[str, str]]] = None
    disabled: Optional[list[str]] = None  # rule codes not to run
    thresholds: Optional[dict[str, dict[str, float]]] = None  # per rule code ([tool.profd.rules.CODE])
    library_lines: Optional[bool] = None
