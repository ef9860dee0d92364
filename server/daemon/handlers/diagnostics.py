"""Pulled diagnostics (``textDocument/diagnostic``, ``workspace/diagnostic``) with result ids;
pushed ones are the session's (``Session.publish``, the policy in publish.py)."""

from __future__ import annotations

from typing import Optional

from lsprotocol import types as L
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path

from .. import publish as policy
from .common import Session, lookup

OPTIONS = L.DiagnosticOptions(inter_file_dependencies=False, workspace_diagnostics=True, identifier="profd")


def diagnostic_report(session: Session, source: str, previous: Optional[str]):
    """(result id, LSP diagnostics or None when ``previous`` is still current) of a file: the
    result id names the report shown on it (content + options) and exactly the diagnostics
    sent (their positions after the user's edits), so ``unchanged`` is never stale."""
    key, items = session.lsp_diagnostics(source)
    result_id = f"{key or 'none'}:{policy.digest(items)}"
    if previous == result_id:
        return result_id, None
    return result_id, items


async def pull_diagnostics(session: Session, ls: LanguageServer, params: L.DocumentDiagnosticParams):
    core = session.core
    source = await lookup(core, params.text_document.uri)
    if core.index.newest_for(source) is None and core.index.key_of_trace(source) is None:
        # its report may be on its way (the start-up scan, an analysis): the first answer
        # waits for it, or until nothing is left to analyse
        await core.wait_for(source)
        source = await lookup(core, params.text_document.uri)
    result_id, items = diagnostic_report(session, source, params.previous_result_id)
    if items is None:
        return L.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
    return L.RelatedFullDocumentDiagnosticReport(items=items, result_id=result_id)


def workspace_diagnostics(session: Session, ls: LanguageServer, params: L.WorkspaceDiagnosticParams):
    """Every file profd has findings on, the trace files too (which an editor rarely opens:
    trace-level findings and the unmapped-source hint live there)."""
    prev = {p.uri: p.value for p in params.previous_result_ids or ()}
    out: list = []
    for source in session.core.index.sources():
        uri = from_fs_path(source)
        result_id, items = diagnostic_report(session, source, prev.get(uri))
        if items is None:
            out.append(
                L.WorkspaceUnchangedDocumentDiagnosticReport(uri=uri, version=None, result_id=result_id)
            )
        elif items or uri in prev:
            out.append(
                L.WorkspaceFullDocumentDiagnosticReport(
                    uri=uri, version=None, items=items, result_id=result_id
                )
            )
    return L.WorkspaceDiagnosticReport(items=out)
