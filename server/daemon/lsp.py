"""The LSP front-end: one pygls LanguageServer per client connection, all over one ``Core``.

Only translation between LSP and the core/engine lives here: findings -> Diagnostics on the files
they point at (push and pull), hot lines -> hover / inlay hints / code lenses, and the custom
``profd/`` methods. Handlers are coroutines on the loop; analysis runs in the core's executor.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Optional

import msgspec
from lsprotocol import types as L
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import from_fs_path, to_fs_path

from ... import __version__
from ...protocol import methods as M
from ...protocol import types as T
from ...protocol.catalog import RULES
from .core import Core, PathError
from ..engine.modules import top_modules
from ..engine.rules.util import plural, size, us
from ..engine.sourcemap import source_lines

log = logging.getLogger("profd.lsp")

SEVERITY = {"error": L.DiagnosticSeverity.Error, "warning": L.DiagnosticSeverity.Warning,
            "information": L.DiagnosticSeverity.Information, "hint": L.DiagnosticSeverity.Hint}


class RpcError(JsonRpcException):
    def __init__(self, code: int, message: str):
        super().__init__(message=message, code=code)
        self.code = code


class ProfdProtocol(LanguageServerProtocol):
    """``exit`` ends this session only (pygls would ``sys.exit`` the whole daemon)."""

    session: "LspSession"

    @lsp_method(L.EXIT)
    def lsp_exit(self, *args):  # type: ignore[override]
        s = getattr(self, "session", None)
        if s is not None:
            s.close()
        return None
        yield  # a generator, like pygls's


# ---- formatting ---------------------------------------------------------------------------------
def _steps(core, key) -> int:
    """How many profiled steps the report's totals are over: hovers, hints and lenses show per step."""
    r = core.report(key) if key else None
    return max(1, len(r.summary.steps)) if r is not None and r.summary is not None else 1


def line_len(path: str, line0: int) -> int:
    lines = source_lines(path)
    return len(lines[line0]) if 0 <= line0 < len(lines) else 0


def to_lsp_diag(d: T.Diagnostic, source: str, key: str) -> L.Diagnostic:
    loc = d.location
    on_line = bool(loc.line) and loc.path == source
    if on_line:
        l0 = loc.line - 1
        c0 = max(0, (loc.column or 1) - 1)
        if loc.end_column and loc.end_line:  # the call's own range, from the AST
            # (columns are characters; LSP counts UTF-16 units, the same for the BMP)
            rng = L.Range(L.Position(l0, c0), L.Position(loc.end_line - 1, max(0, loc.end_column - 1)))
        else:
            end = max(c0, line_len(source, l0))
            text = source_lines(source)[l0] if l0 < len(source_lines(source)) else ""
            c0 = min(c0, len(text) - len(text.lstrip())) if text else c0
            rng = L.Range(L.Position(l0, c0), L.Position(l0, end))
    else:
        rng = L.Range(L.Position(0, 0), L.Position(0, 0))
    msg = d.message
    if d.fix:
        msg += f"\nfix: {d.fix}"
    if not on_line and loc.path and loc.path != source:
        msg += f"\n(at {loc.trace_path or loc.path})"
    rule = RULES.get(d.code)
    related = []
    for r in d.related:
        if r.path and r.line and os.path.isabs(r.path):
            related.append(L.DiagnosticRelatedInformation(
                location=L.Location(uri=from_fs_path(r.path),
                                    range=L.Range(L.Position(r.line - 1, 0),
                                                  L.Position(r.line - 1, line_len(r.path, r.line - 1)))),
                message=r.function or "related"))
    return L.Diagnostic(
        range=rng, message=msg, severity=SEVERITY.get(d.severity, L.DiagnosticSeverity.Information),
        code=d.code, source="profd",
        code_description=L.CodeDescription(href=rule.doc_url) if rule and rule.doc_url else None,
        related_information=related or None, data={"key": key})


def hover_markdown(h: Optional[T.HotLine], trace: str, findings: list[T.Diagnostic],
                   modules: list[T.ModuleNode] = (), steps: int = 1, where: str = "") -> str:
    """A line's hover: its costs per profiled step (the findings' convention, over ``steps``
    steps; ``h`` None for a line whose work all ran in callees, such as a call of a model written
    in the workspace) and the modules it calls, hottest first."""
    n = max(1, steps)
    if h is None:
        return _modules_hover([f"**profd** · `{where}` · per step (mean of {plural(n, 'profiled step')})"],
                              trace, findings, modules, n)
    out = [f"**profd** · `{os.path.basename(h.path)}:{h.line}` in `{h.function}`"
           + ("" if h.precision == "statement" else f" ({h.precision})")
           + f" · per step (mean of {plural(n, 'profiled step')})", ""]
    out.append(f"- CPU: {us(h.cpu_total_us / n)} total, {us(h.cpu_self_us / n)} self, "
               f"{plural(h.calls / n, 'call')}")
    gpu = f"- GPU: {us(h.gpu_us / n)}"
    if h.gpu_forward_us or h.gpu_backward_us:
        gpu += f" (forward {us(h.gpu_forward_us / n)}, backward {us(h.gpu_backward_us / n)})"
    out.append(gpu)
    if h.cpu_backward_us:
        out.append(f"- CPU in backward: {us(h.cpu_backward_us / n)}")
    out.append(f"- Launches: {h.launches / n:.3g}")
    if h.kernel_classes:
        cls = ", ".join(f"{k} {us(v / n)}" for k, v in
                        sorted(h.kernel_classes.items(), key=lambda kv: -kv[1]))
        out.append(f"- Kernel classes: {cls}")
    if h.bytes_allocated:
        out.append(f"- Memory allocated: {size(h.bytes_allocated / n)}")
    if h.top_kernels:
        out.append("")
        out.append("Top kernels:")
        for k in h.top_kernels[:5]:
            name = k.name if len(k.name) <= 80 else k.name[:77] + "..."
            out.append(f"- `{name}` ({k.kernel_class}): {k.count / n:.3g}×, {us(k.total_us / n)}")
    return _modules_hover(out, trace, findings, modules, n)


def _modules_hover(out: list[str], trace: str, findings, modules, steps: int) -> str:
    if modules:
        out.append("")
        out.append("Top modules (GPU per step, forward + backward):")
        for nd in modules:
            out.append(f"- `{nd.path}` ({nd.class_name}): {us(nd.gpu_us / steps)} = "
                       f"{us(nd.gpu_forward_us / steps)} + {us(nd.gpu_backward_us / steps)}"
                       + (f"; out of line: {nd.outlier}" if nd.outlier else ""))
    for d in findings:
        out.append("")
        out.append(f"**{d.severity}[{d.code}]** {d.message}")
    out.append("")
    out.append(f"Trace: `{trace}`")
    return "\n".join(out)


def _get(params: Any, name: str, default=None):
    if isinstance(params, dict):
        return params.get(name, default)
    return getattr(params, name, default)


def _plain(obj: Any) -> Any:
    """pygls hands custom params over as namedtuples: back to JSON-like builtins."""
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def _convert(params: Any, typ):
    try:
        params = _plain(params)
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise TypeError("params must be an object")
        return msgspec.convert(params, type=typ)
    except (msgspec.ValidationError, TypeError) as e:
        raise RpcError(-32602, f"profd: invalid params: {e}")


# ---- a session ----------------------------------------------------------------------------------
class LspSession:
    def __init__(self, core: Core, token: Optional[str], peer: str = "stdio"):
        self.core = core
        self.token = token
        self.peer = peer
        self.authed = token is None
        self.ready = False
        self.closed = False
        self.published: set[str] = set()
        self.on_close = None
        self.ls = build_server(self)
        self.ls.protocol.session = self

    @property
    def can_progress(self) -> bool:
        caps = self.ls.protocol.client_capabilities
        win = getattr(caps, "window", None) if caps else None
        return bool(win and win.work_done_progress)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.ready = False
        self.core.sessions.discard(self)
        try:
            w = self.ls.protocol.writer
            if w is not None:
                w.close()
        except Exception:
            pass
        if self.on_close:
            self.on_close()

    # ---- from the core ----------------------------------------------------------------------
    def publish(self, source: str) -> None:
        key, diags = self.core.diagnostics_for(source)
        items = [to_lsp_diag(d, source, key) for d in diags]
        uri = from_fs_path(source)
        if not items and uri not in self.published:
            return
        self.published.add(uri)
        self.ls.text_document_publish_diagnostics(
            L.PublishDiagnosticsParams(uri=uri, diagnostics=items))

    def report_ready(self, key: str, sources: list[str], report: T.Report) -> None:
        if not self.ready:
            return
        for s in sources:
            self.publish(s)
        self.ls.protocol.notify(M.REPORT_READY, T.to_builtins(M.ReportReady(
            key=key, path=self.core.meta[key].path, error=report.error,
            diagnostics=len(report.diagnostics), sources=sources)))

    def log_error(self, text: str) -> None:
        if self.ready:
            self.ls.window_log_message(L.LogMessageParams(type=L.MessageType.Error, message=text))

    def progress(self, token: str, title: Optional[str]) -> None:
        if not self.ready or not self.can_progress:
            return
        wdp = self.ls.work_done_progress
        if title is not None:
            wdp.create(token, callback=lambda *a: wdp.begin(
                token, L.WorkDoneProgressBegin(title=title, cancellable=False)))
        elif token in wdp.tokens:
            wdp.end(token, L.WorkDoneProgressEnd(message="done"))


def _path_of(uri: str) -> str:
    return to_fs_path(uri) or uri


def _lookup(core: Core, uri: str) -> str:
    """The indexed name of the file at ``uri`` (as indexed, or via its real path)."""
    p = _path_of(uri)
    if p in core.by_source:
        return p
    rp = os.path.realpath(p)
    for s in core.by_source:
        if os.path.realpath(s) == rp:
            return s
    return p


WORKLOAD_TIMEOUT_S = 600.0


def build_server(session: LspSession) -> LanguageServer:
    core = session.core
    ls = LanguageServer("profd", __version__, protocol_cls=ProfdProtocol,
                        text_document_sync_kind=L.TextDocumentSyncKind.None_)

    @ls.feature(L.INITIALIZED)
    def initialized(ls_: LanguageServer, params: L.InitializedParams):
        session.ready = True
        core.sessions.add(session)
        for source in list(core.by_source):
            session.publish(source)
        ls_.window_log_message(L.LogMessageParams(
            type=L.MessageType.Info,
            message=f"profd {__version__}: {len(core.meta)} reports; watching {core.cfg.watch}"))

    @ls.feature(L.SHUTDOWN)
    def shutdown(ls_: LanguageServer, *args):
        session.ready = False
        core.sessions.discard(session)

    @ls.feature(L.TEXT_DOCUMENT_DIAGNOSTIC,
                L.DiagnosticOptions(inter_file_dependencies=False, workspace_diagnostics=False,
                                    identifier="profd"))
    def pull_diagnostics(ls_: LanguageServer, params: L.DocumentDiagnosticParams):
        source = _lookup(core, params.text_document.uri)
        key, diags = core.diagnostics_for(source)
        return L.RelatedFullDocumentDiagnosticReport(
            items=[to_lsp_diag(d, source, key) for d in diags], result_id=key)

    @ls.feature(L.TEXT_DOCUMENT_HOVER)
    def hover(ls_: LanguageServer, params: L.HoverParams):
        source = _lookup(core, params.text_document.uri)
        line = params.position.line + 1
        key, hots = core.hot_lines_for(source)
        h = next((x for x in hots if x.line == line), None)
        tree = getattr(core.report(key), "modules", None) if key else None
        mods = top_modules(tree, source, line)
        if h is None and not mods:
            return None
        _, diags = core.diagnostics_for(source)
        here = [d for d in diags if d.location.line == line and d.location.path == source]
        text = hover_markdown(h, core.meta[key].path, here, mods, _steps(core, key),
                              f"{os.path.basename(source)}:{line}")
        return L.Hover(contents=L.MarkupContent(kind=L.MarkupKind.Markdown, value=text),
                       range=L.Range(L.Position(line - 1, 0),
                                     L.Position(line - 1, line_len(source, line - 1))))

    @ls.feature(L.TEXT_DOCUMENT_INLAY_HINT, L.InlayHintOptions(resolve_provider=False))
    def inlay_hints(ls_: LanguageServer, params: L.InlayHintParams):
        source = _lookup(core, params.text_document.uri)
        key, hots = core.hot_lines_for(source)
        n = _steps(core, key)
        lo, hi = params.range.start.line, params.range.end.line
        out = []
        for h in hots:
            l0 = h.line - 1
            if not lo <= l0 <= hi or (h.gpu_us <= 0 and h.cpu_total_us <= 0):
                continue
            label = f"per step: GPU {us(h.gpu_us / n)} · CPU {us(h.cpu_total_us / n)}"
            if h.launches:
                label += f" · {plural(h.launches / n, 'launch')}"
            out.append(L.InlayHint(position=L.Position(l0, line_len(source, l0)), label=label,
                                   padding_left=True))
        return out

    @ls.feature(L.TEXT_DOCUMENT_CODE_LENS, L.CodeLensOptions(resolve_provider=False))
    def code_lens(ls_: LanguageServer, params: L.CodeLensParams):
        source = _lookup(core, params.text_document.uri)
        key, hots = core.hot_lines_for(source)
        if not hots:
            return []
        funcs: dict[str, list[T.HotLine]] = {}
        for h in hots:
            funcs.setdefault(h.function, []).append(h)
        lines = source_lines(source)
        out = []
        for fn, hs in funcs.items():
            gpu = sum(h.gpu_us for h in hs)
            cpu = max(h.cpu_total_us for h in hs)
            launches = sum(h.launches for h in hs)
            if gpu <= 0 and cpu <= 0:
                continue
            short = fn.rsplit(".", 1)[-1]
            l0 = next((i for i, t in enumerate(lines)
                       if t.lstrip().startswith((f"def {short}(", f"async def {short}("))),
                      min(h.line for h in hs) - 1)
            n = _steps(core, key)
            title = (f"profd: per step GPU {us(gpu / n)} · CPU {us(cpu / n)} · {plural(launches / n, 'launch')} "
                     f"({plural(len(hs), 'hot line')})")
            out.append(L.CodeLens(range=L.Range(L.Position(l0, 0), L.Position(l0, 0)),
                                  command=L.Command(title=title, command=M.CMD_ANALYZE,
                                                    arguments=[core.meta[key].path])))
        return out

    async def _analyze(path: Any, extra: Any = None):
        params = _convert({"path": path, **(extra or {})}, M.AnalyzeParams)
        try:
            report = await core.analyze(params)
        except PathError as e:
            log.warning("%s (client %s)", e, session.peer)
            raise RpcError(e.code, str(e))
        return T.to_builtins(report)

    @ls.command(M.CMD_ANALYZE)
    async def cmd_analyze(ls_: LanguageServer, *args):
        if len(args) == 1 and isinstance(args[0], list):
            args = tuple(args[0])
        if not args:
            raise RpcError(-32602, "profd.analyze wants [path]")
        return await _analyze(args[0])

    @ls.feature(M.ANALYZE)
    async def analyze(ls_: LanguageServer, params: Any):
        raw = _plain(params)
        p = _convert(raw, M.AnalyzeParams)
        extra = {k: v for k, v in raw.items() if k != "path"} if isinstance(raw, dict) else {}
        return await _analyze(p.path, extra)

    @ls.feature(M.REPORTS)
    def reports(ls_: LanguageServer, params: Any):
        p = _convert(params, M.ReportsParams)
        return T.to_builtins(M.ReportsResult(reports=core.entries(p.path)))

    @ls.feature(M.REPORT)
    def report(ls_: LanguageServer, params: Any):
        p = _convert(params, M.ReportParams)
        key = p.key or (core.trace_key.get(p.path) if p.path else None)
        if p.path and key is None:
            key = core.trace_key.get(os.path.realpath(p.path))
        r = core.report(key) if key and key in core.meta else None
        return T.to_builtins(r) if r is not None else None

    @ls.feature(M.STATUS)
    def status(ls_: LanguageServer, params: Any):
        return T.to_builtins(core.status())

    @ls.feature(M.RUN_WORKLOAD)
    async def run_workload(ls_: LanguageServer, params: Any):
        """Run a built-in workload (validated; never code from the request) in a subprocess,
        write its trace and table into the watched folder, and answer with the analysis."""
        from ..workloads import runner

        raw = _plain(params)
        if not isinstance(raw, dict):
            raise RpcError(-32602, "profd/runWorkload wants {workload, params}")
        if not core.cfg.watch:
            raise RpcError(-32602, "this daemon watches no folder to write the trace into")
        try:
            spec = runner.WorkloadSpec.parse(raw)
        except runner.WorkloadError as e:
            raise RpcError(-32602, f"profd: workload: {e}")
        token = f"profd-run-{os.getpid()}-{id(spec)}"
        session.progress(token, f"profd: running {spec.label()}")
        try:
            res = await asyncio.get_running_loop().run_in_executor(
                None, lambda: runner.run_workload(spec, core.cfg.watch, timeout=WORKLOAD_TIMEOUT_S))
        except runner.WorkloadError as e:
            session.log_error(f"profd: workload {spec.label()} failed: {e}")
            raise RpcError(-32003, f"profd: workload {spec.label()} failed: {e}")
        finally:
            session.progress(token, None)
        report = await core.analyze(M.AnalyzeParams(path=res.trace_path))
        return {"trace": res.trace_path, "table": res.table_path, "wallS": round(res.wall_s, 3),
                "report": T.to_builtins(report)}

    return ls
