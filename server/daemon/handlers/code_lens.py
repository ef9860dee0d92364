"""``textDocument/codeLens``: a lens above each hot function (by qualified name) with its cost per
step and its best fix, one on each line that changed against the previous trace, and the
recorder's lenses (record_lsp)."""

from __future__ import annotations


from lsprotocol import types as L
from pygls.lsp.server import LanguageServer

from ....protocol import methods as M
from ....protocol import types as T
from ...engine import top_findings
from .. import outline, present, record_lsp
from ..sources import SOURCES
from .common import Session, line_deltas, lookup, steps

OPTIONS = L.CodeLensOptions(resolve_provider=False)


def _lens(l0: int, title: str, detail: str) -> L.CodeLens:
    return L.CodeLens(
        range=L.Range(L.Position(l0, 0), L.Position(l0, 0)),
        command=L.Command(title=title, command=M.CMD_SHOW, arguments=[detail]),
    )


async def code_lens(session: Session, ls: LanguageServer, params: L.CodeLensParams):
    core = session.core
    source = await lookup(core, params.text_document.uri, outline=True)
    key, hots = core.hot_lines_for(source)
    pos = session.positions(key)
    hots = pos.hot_lines(hots)
    found = pos.diagnostics(core.diagnostics_for(source)[1])  # in the same lines as the hot lines
    src_lines = session.current_lines(source)
    fns = (
        SOURCES.functions(source) if src_lines == SOURCES.lines(source) else outline.functions(src_lines)
    )  # an unsaved buffer: its own outline
    funcs: dict[str, tuple[int, list[T.HotLine]]] = {}
    for h in hots:
        f = outline.function_at(fns, h.line)
        name, l0 = (f.qualname, f.def_line - 1) if f else (h.function, h.line - 1)
        funcs.setdefault(name, (l0, []))[1].append(h)
    out = []
    for name, (l0, hs) in funcs.items():
        # what the function's statements run, callees included (its own lines' self costs
        # would leave out the model it calls)
        gpu = sum(max(h.gpu_us, h.gpu_inclusive_us) for h in hs)
        cpu = sum(max(h.cpu_total_us, h.cpu_inclusive_us) for h in hs)
        launches = sum(h.launches for h in hs)
        if gpu <= 0 and cpu <= 0:
            continue
        n = steps(core, key)
        rows = {h.line for h in hs}
        best = top_findings(
            [d for d in found or () if d.location.path == source and d.location.line in rows], 1
        )
        title = present.function_lens_title(name, gpu, cpu, launches, len(hs), n, best[0] if best else None)
        detail = present.function_lens_detail(name, source, core.index[key].path, hs, n, src_lines)
        out.append(_lens(l0, title, detail))
    old_trace, deltas = line_deltas(core, source)
    for ld in deltas:
        if ld.trend == "same" and not ld.codes_gone and not ld.codes_new:
            continue
        now = pos.line(source, ld.line)
        if now is None:
            continue
        out.append(
            _lens(
                now.line - 1, present.delta_title(ld, old_trace), present.before_after_markdown(ld, old_trace)
            )
        )
    return out + record_lsp.lenses(session, source)
