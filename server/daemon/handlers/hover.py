"""``textDocument/hover``: a line's costs per step, the modules it calls, its findings, and its
before/after against the previous trace of the same program."""

from __future__ import annotations

import os

import msgspec
from lsprotocol import types as L
from pygls.lsp.server import LanguageServer

from ...engine import top_modules
from .. import encoding, present
from .common import Session, line_deltas, lookup, steps


async def hover(session: Session, ls: LanguageServer, params: L.HoverParams):
    core = session.core
    source = await lookup(core, params.text_document.uri)
    line = params.position.line + 1
    key, hots = core.hot_lines_for(source)
    pos = session.positions(key)
    was = pos.back(source, line)  # the line of the analysed text this one comes from
    if was is None:  # added since the trace: nothing ran there
        return None
    h = next((x for x in hots if x.line == was.line), None)
    if h is not None and was.line != line:
        h = msgspec.structs.replace(h, line=line)
    tree = getattr(core.index.report(key), "modules", None) if key else None
    mods = top_modules(tree, source, was.line)
    old_trace, deltas = line_deltas(core, source)
    ld = next((d for d in deltas if d.line == was.line), None)
    if h is None and not mods and ld is None:
        return None
    _, diags = session.findings(source)
    here = [d for d in diags if d.location.line == line and d.location.path == source]
    parts = []
    if h is not None or mods:
        parts.append(
            present.hover_markdown(
                h, core.index[key].path, here, mods, steps(core, key), f"{os.path.basename(source)}:{line}"
            )
        )
    if ld is not None:
        parts.append(present.before_after_markdown(ld, old_trace))
    if was.changed:
        base = core.index.baseline(key, source) or ()
        then = base[was.line - 1].strip() if 0 < was.line <= len(base) else ""
        parts.append(present.changed_line_note(was.line, then))
    return L.Hover(
        contents=L.MarkupContent(kind=L.MarkupKind.Markdown, value="\n\n".join(parts)),
        range=encoding.range_(
            session.current_lines(source),
            present.line_range(source, line, session.current_lines),
            session.encoding,
        ),
    )
