"""The client's documents: opened, edited, closed and saved buffers move the findings with the
text (the report stays the trace's: it is never analysed again against text that did not run)."""

from __future__ import annotations

import os

from lsprotocol import types as L
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path

from ..sources import SOURCES
from .common import Session, lookup, path_of


async def did_open(session: Session, ls: LanguageServer, params: L.DidOpenTextDocumentParams):
    """Push a file's findings again when it is opened (on the buffer's text): some clients
    (eglot) drop diagnostics for files that were not open when they arrived."""
    source = await lookup(session.core, params.text_document.uri)
    session.shown.forget(from_fs_path(source))
    session.publish(source)


def did_change(session: Session, ls: LanguageServer, params: L.DidChangeTextDocumentParams):
    """An edit (pygls has applied it to the buffer, incremental or whole): the findings
    move with the text."""
    session.edited(params.text_document.uri)


async def did_close(session: Session, ls: LanguageServer, params: L.DidCloseTextDocumentParams):
    """Closed without saving: the findings go back onto the file as it is on disk."""
    session.publish(await lookup(session.core, params.text_document.uri))


async def did_save(session: Session, ls: LanguageServer, params: L.DidSaveTextDocumentParams):
    """A saved source (an edit, a quick fix, a ``# profd: ignore[...]``): the report stays
    the trace's (it is never analysed again against text that did not run); its positions
    are mapped onto the saved text and a new comment suppresses at once. A saved
    ``pyproject.toml``: the ``[tool.profd]`` options are read again."""
    if os.path.basename(path_of(params.text_document.uri)) == "pyproject.toml":
        await session.load_project()
        session.reconfigure()
        return
    core = session.core
    source = await lookup(core, params.text_document.uri)
    key = core.index.newest_for(source)
    if key is not None:
        await SOURCES.warm(core.index[key].sources)
    session.publish(source)
    session.schedule_refresh()
