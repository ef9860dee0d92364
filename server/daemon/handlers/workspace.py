"""The session's lifecycle and its options: initialize/initialized/shutdown, the editor's settings
(``workspace/didChangeConfiguration``) and its workspace folders."""

from __future__ import annotations


from lsprotocol import types as L
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .... import __version__
from .. import settings as S
from ..publish import cap
from ..sources import SOURCES
from .common import Session


def folders_of(params: L.InitializeParams) -> list[str]:
    """The editor's workspace: its folders, else rootUri, else rootPath."""
    if params.workspace_folders:
        return [p for p in (to_fs_path(f.uri) for f in params.workspace_folders) if p]
    if params.root_uri:
        p = to_fs_path(params.root_uri)
        return [p] if p else []
    return [params.root_path] if params.root_path else []


def initialize(session: Session, ls: LanguageServer, params: L.InitializeParams):
    session.folders = folders_of(params)
    opts = params.initialization_options
    if isinstance(opts, dict):
        session.init_settings = opts.get("settings", {k: v for k, v in opts.items() if k != "token"})


async def initialized(session: Session, ls: LanguageServer, params: L.InitializedParams):
    core = session.core
    session.ready = True
    core.sessions.add(session)
    ls.window_log_message(
        L.LogMessageParams(
            type=L.MessageType.Info,
            message=f"profd {__version__}: {len(core.index)} reports; watching {core.cfg.watch}",
        )
    )
    await session.load_project()
    await session.load_settings()
    await SOURCES.warm(core.index.sources())
    for source in core.index.sources():
        session.publish(source)
    session.schedule_refresh()


def shutdown(session: Session, ls: LanguageServer, *args):
    session.ready = False
    session.core.sessions.discard(session)


async def did_change_configuration(
    session: Session, ls: LanguageServer, params: L.DidChangeConfigurationParams
):
    vals, _ = S.parse(params.settings)
    if vals or not cap(session.caps, "workspace", "configuration"):
        session.apply_settings(params.settings)
    else:  # the notification carries nothing usable (often null): ask for the section
        await session.load_settings()


async def did_change_folders(session: Session, ls: LanguageServer, params: L.DidChangeWorkspaceFoldersParams):
    gone = {to_fs_path(f.uri) for f in params.event.removed}
    session.folders = [f for f in session.folders if f not in gone] + [
        p for p in (to_fs_path(f.uri) for f in params.event.added) if p
    ]
    await session.load_project()
    session.reconfigure()
