"""``workspace/executeCommand``: ``profd.show`` (a lens's detail as a message), ``profd.annotate``
(the annotated copy of a trace, written by an analysis process) and ``profd.analyze``."""

from __future__ import annotations

import os

from lsprotocol import types as L
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path

from ...engine import Options, annotate_file
from ..publish import cap
from .common import RpcError, Session, command_args
from .profd_methods import analyze_path


def annotate_task(trace: str, out: str, options: Options) -> str:
    """In an analysis process: write the annotated copy of ``trace`` to ``out``."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    annotate_file(trace, out, options)
    return out


def show(session: Session, ls: LanguageServer, *args):
    text = "\n".join(str(a) for a in command_args(args))
    session.tell(L.MessageType.Info, text)
    return text


async def annotate(session: Session, ls: LanguageServer, *args):
    core = session.core
    args = command_args(args)
    key = args[0] if args else None
    if not isinstance(key, str) or key not in core.index:
        raise RpcError(-32602, "profd.annotate wants [report key]")
    row, cfg = core.index[key], core.cfg
    name = os.path.basename(row.path).split(".json")[0]
    out = os.path.join(cfg.state, "annotated", f"{name}.{key[:12]}.profd.json.gz")
    if not await core.io(os.path.exists, out):
        try:
            await core.run_in_worker(annotate_task, row.path, out, cfg.options())
        except Exception as e:
            raise RpcError(-32603, f"profd: annotating {row.path} failed: {e}")
    uri = from_fs_path(out)
    if cap(session.caps, "window", "show_document", "support"):
        ls.window_show_document(L.ShowDocumentParams(uri=uri, external=True))
    session.tell(
        L.MessageType.Info,
        f"profd: annotated trace written to {out} (open it in https://ui.perfetto.dev or chrome://tracing)",
    )
    return {"path": out, "uri": uri}


async def analyze(session: Session, ls: LanguageServer, *args):
    args = command_args(args)
    if not args:
        raise RpcError(-32602, "profd.analyze wants [path]")
    return await analyze_path(session, args[0])
