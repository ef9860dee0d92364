"""How each client gets its diagnostics: the publish policy, chosen per client from what it says
it can do in ``initialize`` (never from its name).

- **Pull** (``textDocument/diagnostic`` with result ids) only for a client that pulls *and* can be
  asked to pull again (``workspace.diagnostics.refreshSupport``: VS Code, Helix 25.07+): a report
  that lands later is announced with ``workspace/diagnostic/refresh``.
- **Push** (``textDocument/publishDiagnostics``) for every other client, pulling ones included:
  Neovim 0.10-0.12 pull but cannot be refreshed (0.12 spells the capability
  ``workspace.workspace.refreshSupport = false``), so a pull answered before the report exists
  would stay empty until the user edits the buffer. To those clients profd does not offer pull
  at all (no ``diagnosticProvider`` in its answer to ``initialize``): they get pushes, as
  Neovim 0.7-0.9, eglot and Helix 24.x do, and never the same findings twice.
- A pull that arrives while the report for its file may still be coming (the start-up scan or an
  analysis is under way) is held until that report lands or nothing is left to analyse
  (``Core.wait_for``), so the first answer is the real one.
- Each file's diagnostics are published only when they differ from what the client was last
  sent (``Shown``): no repeats, and the result id of a pull names exactly what it holds (the
  report, and the positions after the user's edits), so ``unchanged`` is never stale.
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional

from lsprotocol import types as L
from pygls.protocol import default_converter

_CONVERTER = default_converter()


def cap(obj: Any, *path: str) -> Any:
    """``obj.a.b.c`` for ``cap(obj, "a", "b", "c")``, None where a link is missing (a client's
    capabilities leave out what it cannot do)."""
    for p in path:
        obj = getattr(obj, p, None) if obj is not None else None
    return obj


def client_pulls(caps: Optional[L.ClientCapabilities]) -> bool:
    """The client sends ``textDocument/diagnostic`` when the server offers it."""
    return cap(caps, "text_document", "diagnostic") is not None


def can_refresh(caps: Optional[L.ClientCapabilities]) -> bool:
    """The client answers ``workspace/diagnostic/refresh`` by pulling again."""
    return bool(cap(caps, "workspace", "diagnostics", "refresh_support"))


def offers_pull(caps: Optional[L.ClientCapabilities]) -> bool:
    """Whether profd offers pull diagnostics to this client (see the module's docstring)."""
    return client_pulls(caps) and can_refresh(caps)


def digest(items: list[L.Diagnostic]) -> str:
    """A short name for exactly these diagnostics (their order, ranges, text and data)."""
    import json

    doc = json.dumps(_CONVERTER.unstructure(items), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


class Shown:
    """What one client was last sent per file (by digest): publish only what changed."""

    def __init__(self) -> None:
        self._by_uri: dict[str, str] = {}

    def __contains__(self, uri: str) -> bool:
        return uri in self._by_uri

    def forget(self, uri: str) -> None:
        """The client may no longer show ``uri``'s diagnostics (eglot drops them for a file that
        was not open): the next publish sends them whatever they are."""
        self._by_uri.pop(uri, None)

    def uris(self) -> list[str]:
        return list(self._by_uri)

    def changed(self, uri: str, items: list[L.Diagnostic]) -> bool:
        """Record ``items`` as shown on ``uri``; False when that is what it shows already (or it
        shows nothing and nothing is to be shown)."""
        d = digest(items)
        if self._by_uri.get(uri, digest([]) if not items else None) == d:
            return False
        self._by_uri[uri] = d
        return True
