"""``textDocument/inlayHint``: each hot line's cost per step at its end."""

from __future__ import annotations


from lsprotocol import types as L
from pygls.lsp.server import LanguageServer

from .. import encoding, present
from .common import Session, lookup, steps

OPTIONS = L.InlayHintOptions(resolve_provider=False)


async def inlay_hints(session: Session, ls: LanguageServer, params: L.InlayHintParams):
    core = session.core
    source = await lookup(core, params.text_document.uri)
    key, hots = core.hot_lines_for(source)
    hots = session.positions(key).hot_lines(hots)
    n = steps(core, key)
    lo, hi = params.range.start.line, params.range.end.line
    lines, enc = session.current_lines(source), session.encoding
    out = []
    for h in hots:
        l0 = h.line - 1
        label = present.hint_label(h, n) if lo <= l0 <= hi else None
        if label is None:
            continue
        end = L.Position(l0, present.line_len(source, l0, session.current_lines))
        out.append(L.InlayHint(position=encoding.position(lines, end, enc), label=label, padding_left=True))
    return out
