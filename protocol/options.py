"""Option values every front end takes alike (``profd-client``, ``profd serve``, the editor's
settings, ``[tool.profd]``): one parser for each, so each front end says the same of a bad one."""
from __future__ import annotations

import os
from typing import Optional


def path_map_item(item: str, base: Optional[str] = None) -> tuple[str, str]:
    """``REMOTE=LOCAL`` -> (the frame path prefix from the profiled machine, the local folder
    made absolute: ``~`` expanded, a relative one taken from ``base`` or the working directory).
    ValueError says what is wrong."""
    if not isinstance(item, str) or "=" not in item:
        raise ValueError(f"path-map wants REMOTE=LOCAL, got {item!r}")
    remote, local = item.split("=", 1)
    local = os.path.expanduser(local)
    return remote, os.path.normpath(os.path.join(base or os.getcwd(), local))
