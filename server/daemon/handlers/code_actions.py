"""``textDocument/codeAction``: the quick fixes and suppressions of the findings in the range,
the file's fix-all (``source.fixAll.profd``) and the annotated trace. The edits come from
``quickfix`` (its public entry: fixes, suppress, fix_all), computed in a thread."""

from __future__ import annotations

import os
from typing import Optional

from lsprotocol import types as L
from pygls.lsp.server import LanguageServer

from ....protocol import methods as M
from ...engine import split_lines
from .. import encoding, present, quickfix
from ..placement import UNMAPPED
from ..sources import SOURCES
from .common import Session, lookup

FIX_ALL = "source.fixAll.profd"
OPTIONS = L.CodeActionOptions(code_action_kinds=[L.CodeActionKind.QuickFix, FIX_ALL])


def edits_task(text: str, near: list[tuple[str, int]], everything: list[tuple[str, int]]) -> dict:
    """(in a thread: each fix parses and compiles the file) Per finding its quick fixes then its
    suppression; the fix-all."""
    each = []
    for code, line in near:
        fxs = quickfix.fixes(text, code, line)
        sup = quickfix.suppress(text, code, line)
        each.append(fxs + ([sup] if sup is not None else []))
    return {"each": each, "all": quickfix.fix_all(text, everything) if everything else None}


def _wants(only: list[str], kind: str) -> bool:
    """Whether a code-action request limited to ``only`` kinds (none: all) takes ``kind``
    (kinds are hierarchical: ``source`` takes ``source.fixAll.profd``)."""
    return not only or any(kind == k or kind.startswith(k + ".") for k in only)


def _action(
    uri: str,
    fx: quickfix.Fix,
    diags: Optional[list[L.Diagnostic]],
    lines,
    enc: str,
    kind: str = L.CodeActionKind.QuickFix,
) -> L.CodeAction:
    """A fix as a code action; its edits' columns (characters on ``lines``) in the client's units."""
    edits = [
        L.TextEdit(
            range=L.Range(L.Position(e.line, e.col), L.Position(e.end_line, e.end_col)), new_text=e.text
        )
        for e in fx.edits
    ]
    return L.CodeAction(
        title=fx.title,
        kind=kind,
        diagnostics=diags,
        is_preferred=fx.preferred or None,
        edit=L.WorkspaceEdit(changes={uri: encoding.edits(edits, lines, enc)}),
    )


async def code_action(session: Session, ls: LanguageServer, params: L.CodeActionParams):
    """Quick fixes and suppressions for the findings in the range, the file's fix-all
    (``source.fixAll.profd``) and the annotated trace. The edits are computed off the loop
    (``edits_task``) and kept for the buffer's text: editors ask again at every cursor move."""
    core = session.core
    uri = params.text_document.uri
    source = await lookup(core, uri)
    key, diags = session.findings(source)  # on the buffer's lines
    if key is None:
        return []
    row = core.index[key]
    only = [str(getattr(k, "value", k)) for k in (params.context.only or ())]
    lo, hi = params.range.start.line + 1, params.range.end.line + 1
    doc = ls.workspace.text_documents.get(uri)
    text = doc.source if doc is not None else "\n".join(SOURCES.lines(source)) + "\n"
    mine = [d for d in diags if d.location.path == source and d.location.line and d.code != UNMAPPED]
    near = [d for d in mine if lo <= d.location.line <= hi] if _wants(only, L.CodeActionKind.QuickFix) else []
    everything = [(d.code, d.location.line) for d in mine] if _wants(only, FIX_ALL) else []
    found = await session.edits_for(text, [(d.code, d.location.line) for d in near], everything)
    lines, enc = split_lines(text), session.encoding
    out: list[L.CodeAction] = []
    lsp_near: list[L.Diagnostic] = []
    for d, fxs in zip(near, found["each"]):
        ld = session.to_client(
            [present.to_lsp_diag(d, source, key, row.sources, session.current_lines)], source
        )[0]
        lsp_near.append(ld)
        out += [_action(uri, fx, [ld], lines, enc) for fx in fxs]
    if found["all"] is not None:
        out.append(_action(uri, found["all"], None, lines, enc, kind=FIX_ALL))
    if (out or any(d.location.path == source for d in diags)) and not only:
        out.append(
            L.CodeAction(
                title=f"Open the annotated trace ({os.path.basename(row.path)})",
                kind=L.CodeActionKind.Empty,
                diagnostics=lsp_near or None,
                command=L.Command(
                    title="profd: open the annotated trace", command=M.CMD_ANNOTATE, arguments=[key]
                ),
            )
        )
    return out
