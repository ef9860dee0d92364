"""The LSP front-end: one pygls LanguageServer per client connection, all over one ``Core``.

Only translation between LSP and the core/engine lives here: findings -> Diagnostics on the files
they point at (per client, publish.py: pushed, or pulled with result ids by clients that can be
refreshed), on the lines of the text the client shows (positions.py maps the trace's lines through
the user's edits), hot lines -> hover /
inlay hints / code lenses per qualified function, the diff against the previous trace of the same
program -> a hover section and lenses, findings -> code actions (quick fixes from ``quickfix``,
suppress on this line, open in the annotated trace), editor settings (``workspace/configuration``,
``didChangeConfiguration``, workspace folders) -> the core's options, and the custom ``profd/``
methods. The lifecycle follows the spec: -32002 before ``initialize``, -32600 after ``shutdown``,
``exit`` ends the session. Handlers are coroutines on the loop; analysis runs in the core's
executor.
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
from ...protocol.diff import LineDelta, ReportDiff
from . import encoding, outline, positions, publish as policy, quickfix, record_lsp, settings as S
from .settings import plain as _plain
from .core import Core, PathError
from .confine import shown
from .placement import UNMAPPED
from .sources import SOURCES
from ..engine.diff import diff_reports
from ..engine.impact import impact_text, top
from ..engine.modules import top_modules
from ..engine.rules.util import plural, size, us
from ..engine.sourcemap import split_lines

log = logging.getLogger("profd.lsp")

SEVERITY = {"error": L.DiagnosticSeverity.Error, "warning": L.DiagnosticSeverity.Warning,
            "information": L.DiagnosticSeverity.Information, "hint": L.DiagnosticSeverity.Hint}


class RpcError(JsonRpcException):
    def __init__(self, code: int, message: str):
        super().__init__(message=message, code=code)
        self.code = code


class ProfdProtocol(LanguageServerProtocol):
    """The lifecycle as the spec has it: a request before ``initialize`` gets -32002
    (ServerNotInitialized), one after ``shutdown`` -32600 (InvalidRequest; pygls would never
    answer it), notifications then are dropped, and ``exit`` ends this session only (pygls would
    ``sys.exit`` the whole daemon)."""

    session: "LspSession"
    initialize_seen = False

    def handle_message(self, message):
        method = getattr(message, "method", None)
        msg_id = getattr(message, "id", None)
        is_request = method is not None and msg_id is not None
        if method == L.EXIT:
            return super().handle_message(message)
        if self._shutdown:
            if is_request:
                self._send_response(msg_id, None, L.ResponseError(
                    code=-32600, message=f"profd: {method} after shutdown: only exit is accepted"))
            return None
        if not self.initialize_seen and method is not None:
            if method != L.INITIALIZE:
                if is_request:
                    self._send_response(msg_id, None, L.ResponseError(
                        code=M.ERR_NOT_INITIALIZED, message=f"profd: {method} before initialize"))
                return None
            self.initialize_seen = True
        return super().handle_message(message)

    @lsp_method(L.INITIALIZE)
    def lsp_initialize(self, params: L.InitializeParams):  # type: ignore[override]
        """pygls's answer, less ``diagnosticProvider`` for a client that pulls but cannot be
        asked to pull again (publish.offers_pull): it gets pushes instead."""
        result = yield from super().lsp_initialize(params)
        if not policy.offers_pull(params.capabilities):
            result.capabilities.diagnostic_provider = None
        return result

    def _send_response(self, msg_id, result=None, error=None):
        """A handler's exception goes back as a plain message, never its traceback (pygls sends
        it in ``data``; the log has it): bad input (a NUL in a path, a list where a number goes)
        is InvalidParams, anything else InternalError."""
        if error is not None and isinstance(getattr(error, "data", None), dict) \
                and "traceback" in error.data:
            error = client_error(error)
        return super()._send_response(msg_id, result, error)

    @lsp_method(L.EXIT)
    def lsp_exit(self, *args):  # type: ignore[override]
        s = getattr(self, "session", None)
        if s is not None:
            s.exit_code = 0 if self._shutdown else 1  # the spec: 1 without a shutdown first
            s.close()
        return None
        yield  # a generator, like pygls's


_BAD_INPUT = ("ValueError", "TypeError", "KeyError", "IndexError", "OverflowError", "UnicodeError",
              "UnicodeEncodeError", "UnicodeDecodeError", "AttributeError", "RecursionError")


def client_error(error):
    """pygls's error for an exception in a handler ("ValueError: embedded null byte" and its
    traceback) as a client should get it: -32602 for bad input, -32603 otherwise, the message
    plain and short, no ``data``."""
    text = str(getattr(error, "message", "") or "")
    kind = text.split(":", 1)[0].strip()
    if kind in _BAD_INPUT:
        return type(error)(code=-32602, message=f"profd: invalid params: {shown(text)}")
    return type(error)(code=-32603, message=f"profd: internal error ({shown(kind, 60)}; the "
                                           "daemon's log has the details)")


# ---- formatting ---------------------------------------------------------------------------------
def _steps(core, key) -> int:
    """How many profiled steps the report's totals are over: hovers, hints and lenses show per step."""
    r = core.index.report(key) if key else None
    return max(1, len(r.summary.steps)) if r is not None and r.summary is not None else 1


def line_len(path: str, line0: int, lines_of=None) -> int:
    lines = (lines_of or SOURCES.lines)(path)
    return len(lines[line0]) if 0 <= line0 < len(lines) else 0


def _line_range(path: str, line1: int, lines_of=None) -> L.Range:
    l0 = max(0, line1 - 1)
    return L.Range(L.Position(l0, 0), L.Position(l0, line_len(path, l0, lines_of)))


def to_lsp_diag(d: T.Diagnostic, source: str, key: str, sources=(), lines_of=None) -> L.Diagnostic:
    """A finding as an LSP Diagnostic on ``source``; ``sources``: the report's local files (a
    related location elsewhere points at its file when that is here, else at the trace);
    ``lines_of``: the text the client shows (default: the files as last read)."""
    loc = d.location
    on_line = bool(loc.line) and loc.path == source
    if on_line:
        l0 = loc.line - 1
        c0 = max(0, (loc.column or 1) - 1)
        if loc.end_column and loc.end_line:  # the call's own range, from the AST
            # (columns are characters: the session turns them into the client's units, encoding.py)
            rng = L.Range(L.Position(l0, c0), L.Position(loc.end_line - 1, max(0, loc.end_column - 1)))
        else:
            end = max(c0, line_len(source, l0, lines_of))
            lines = (lines_of or SOURCES.lines)(source)
            text = lines[l0] if l0 < len(lines) else ""
            c0 = min(c0, len(text) - len(text.lstrip())) if text else c0
            rng = L.Range(L.Position(l0, c0), L.Position(l0, end))
    else:
        rng = L.Range(L.Position(0, 0), L.Position(0, 0))
    msg = d.message
    if d.impact_us_per_step is not None:  # what severity comes from, and what hides it
        msg += f"\nimpact: {impact_text(d)}"
    if d.fix:
        msg += f"\nfix: {d.fix}"
    if not on_line and loc.path and loc.path != source:
        msg += f"\n(at {loc.trace_path or loc.path}" + (f":{loc.line})" if loc.line else ")")
    rule = RULES.get(d.code)
    related = []
    for r in d.related:
        if not r.line:
            continue
        here = r.path in sources and r.path != source or r.path == source
        target = r.path if here else source
        where = (r.note or r.function or "related") + ("" if here else f" (at {r.trace_path or r.path}:{r.line})")
        related.append(L.DiagnosticRelatedInformation(
            location=L.Location(uri=from_fs_path(target),
                                range=_line_range(target, r.line, lines_of) if here else rng),
            message=where))
    if on_line:
        related += _fix_sites(d, source, lines_of)
    return L.Diagnostic(
        range=rng, message=msg, severity=SEVERITY.get(d.severity, L.DiagnosticSeverity.Information),
        code=d.code, source="profd",
        code_description=L.CodeDescription(href=rule.doc_url) if rule and rule.doc_url else None,
        related_information=related or None, data={"key": key, "line": loc.line if on_line else None})


def _fix_sites(d: T.Diagnostic, source: str, lines_of=None) -> list[L.DiagnosticRelatedInformation]:
    """Where the finding's fix goes when that is another line of its file (the optimizer's
    constructor for ``optimizer-foreach-off``, found at ``optimizer.step()``)."""
    if d.code not in quickfix.RELATED:
        return []
    text = "\n".join((lines_of or SOURCES.lines)(source)) + "\n"
    return [L.DiagnosticRelatedInformation(
        location=L.Location(uri=from_fs_path(source), range=L.Range(
            L.Position(e.line, e.col), L.Position(e.end_line, e.end_col))), message=note)
        for e, note in quickfix.related(text, d.code, d.location.line)]


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
    gpu = f"- GPU: {us(h.gpu_us / n)} self"
    if h.gpu_forward_us or h.gpu_backward_us:
        gpu += f" (forward {us(h.gpu_forward_us / n)}, backward {us(h.gpu_backward_us / n)})"
    out.append(gpu)
    if h.cpu_inclusive_us > h.cpu_total_us or h.gpu_inclusive_us > h.gpu_us:
        out.append(f"- Inclusive (with what it calls): CPU {us(h.cpu_inclusive_us / n)}, "
                   f"GPU {us(h.gpu_inclusive_us / n)}")
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
        if d.impact_us_per_step is not None:
            out.append("")
            out.append(f"Impact: {impact_text(d)}")
    out.append("")
    out.append(f"Trace: `{trace}`")
    return "\n".join(out)


def before_after_markdown(ld: LineDelta, old_trace: str) -> str:
    """The hover section: this line against the previous trace of the same program."""
    old, new = ld.old_cpu_us + ld.old_gpu_us, ld.new_cpu_us + ld.new_gpu_us
    trend = {"faster": "faster", "slower": "slower", "same": "about the same",
             "new": "new in this trace", "gone": "gone"}[ld.trend]
    pct = f", {100 * ld.delta_us / old:+.0f}%" if old > 0 and ld.trend in ("faster", "slower") else ""
    out = [f"**Before/after** (against `{os.path.basename(old_trace)}`): CPU+GPU per step "
           f"{us(old)} → {us(new)} ({trend}{pct})"]
    out.append(f"- CPU {us(ld.old_cpu_us)} → {us(ld.new_cpu_us)}, "
               f"GPU {us(ld.old_gpu_us)} → {us(ld.new_gpu_us)}")
    if ld.codes_gone:
        out.append("- gone: " + ", ".join(f"`{c}`" for c in ld.codes_gone))
    if ld.codes_new:
        out.append("- new: " + ", ".join(f"`{c}`" for c in ld.codes_new))
    return "\n".join(out)


def delta_title(ld: LineDelta, old_trace: str) -> str:
    bits = [f"profd: vs {os.path.basename(old_trace)}: {'+' if ld.delta_us >= 0 else '−'}"
            f"{us(abs(ld.delta_us))}/step ({ld.trend})"]
    if ld.codes_gone:
        bits.append("gone: " + ", ".join(ld.codes_gone))
    if ld.codes_new:
        bits.append("new: " + ", ".join(ld.codes_new))
    return " · ".join(bits)


def _get(params: Any, name: str, default=None):
    if isinstance(params, dict):
        return params.get(name, default)
    return getattr(params, name, default)


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


_DIFFS: dict[tuple[str, str], ReportDiff] = {}  # (old key, new key): keys name content + options


def _diff_cached(core: Core, old: str, new: str) -> Optional[ReportDiff]:
    d = _DIFFS.get((old, new))
    if d is None:
        a, b = core.index.report(old), core.index.report(new)
        if a is None or b is None or a.error or b.error:
            return None
        d = _DIFFS[(old, new)] = diff_reports(a, b)
        if len(_DIFFS) > 32:
            _DIFFS.pop(next(iter(_DIFFS)))
    return d


def line_deltas(core: Core, source: str) -> tuple[Optional[str], list[LineDelta]]:
    """(previous trace path, its per-line deltas on ``source``) when a newer trace of the same
    program replaced an older one on this file."""
    old, new = core.index.previous_for(source), core.index.newest_for(source)
    if old is None or new is None:
        return None, []
    d = _diff_cached(core, old, new)
    if d is None:
        return None, []
    return core.index.row(old).path, [ld for ld in d.lines if ld.path == source]


def _annotate_task(trace: str, out: str, workspace, path_map, disabled) -> str:
    """In an analysis process: write the annotated copy of ``trace`` to ``out``."""
    from ..engine.annotate import annotate_file
    from ..engine.context import Options

    os.makedirs(os.path.dirname(out), exist_ok=True)
    annotate_file(trace, out, Options(workspace=list(workspace), path_map=[tuple(p) for p in path_map],
                                      disabled=set(disabled)))
    return out


# ---- a session ----------------------------------------------------------------------------------
def _cap(obj: Any, *path: str) -> Any:
    for p in path:
        obj = getattr(obj, p, None) if obj is not None else None
    return obj


class LspSession:
    def __init__(self, core: Core, token: Optional[str], peer: str = "stdio"):
        self.core = core
        self.token = token
        self.peer = peer
        self.authed = token is None
        self.ready = False
        self.closed = False
        self.exit_code = 0
        self.shown = policy.Shown()  # what each file shows, as last sent (push clients)
        self._edits: dict[str, asyncio.TimerHandle] = {}  # uri -> its debounced publish
        self._told_unplaced: set[str] = set()  # traces whose unplaced findings were told of
        self._begun: set[str] = set()  # progress tokens begun (reports only after the begin)
        self.folders: list[str] = []
        self.settings: dict = {}
        self.project: dict = {}  # [tool.profd] of the workspace (settings.project)
        self.project_files: list[str] = []
        self._told: set[str] = set()
        self.init_settings: Any = None
        self.on_close = None
        self._refresh: Optional[asyncio.TimerHandle] = None
        self._fixes: dict[tuple, dict] = {}  # code actions' edits, by buffer text (edits_for)
        self._fixes_lock = asyncio.Lock()
        self.ls = build_server(self)
        self.ls.protocol.session = self

    # ---- what the client can do -------------------------------------------------------------
    @property
    def caps(self):
        return self.ls.protocol.client_capabilities

    @property
    def can_progress(self) -> bool:
        return bool(_cap(self.caps, "window", "work_done_progress"))

    @property
    def encoding(self) -> str:
        """The column unit agreed at ``initialize`` (``positions``): utf-16 unless negotiated."""
        try:
            enc = self.ls.workspace.position_encoding
        except Exception:  # before initialize
            return encoding.UTF16
        return str(getattr(enc, "value", enc) or encoding.UTF16)

    def to_client(self, items: list[L.Diagnostic], path: str) -> list[L.Diagnostic]:
        """Diagnostics on ``path`` (character columns) in the client's column units."""
        return encoding.diagnostics(items, path, self.current_lines, self.encoding)

    @property
    def pulls(self) -> bool:
        """profd offered this client pull diagnostics (publish.offers_pull): it gets no push
        (it would show everything twice)."""
        return policy.offers_pull(self.caps)

    async def edits_for(self, text: str, near: list[tuple[str, int]],
                        everything: list[tuple[str, int]]) -> dict:
        """``_edits_task`` in a thread, one at a time per client, the last few kept by text."""
        k = (hash(text), len(text), tuple(near), tuple(everything))
        async with self._fixes_lock:
            hit = self._fixes.get(k)
            if hit is None:
                hit = await asyncio.get_running_loop().run_in_executor(None, _edits_task, text, near, everything)
                self._fixes[k] = hit
                while len(self._fixes) > 8:
                    self._fixes.pop(next(iter(self._fixes)))
        return hit

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.ready = False
        self.core.sessions.discard(self)
        if self._refresh is not None:
            self._refresh.cancel()
        try:
            w = self.ls.protocol.writer
            if w is not None:
                w.close()
        except Exception:
            pass
        if self.on_close:
            self.on_close()

    # ---- settings ---------------------------------------------------------------------------
    def tell(self, kind: L.MessageType, text: str) -> None:
        if not self.closed:
            self.ls.window_show_message(L.ShowMessageParams(type=kind, message=text))

    async def load_settings(self) -> None:
        """Ask the client for the ``profd`` section (when it can answer), then apply it."""
        raw = self.init_settings
        if _cap(self.caps, "workspace", "configuration"):
            try:
                got = await asyncio.wait_for(self.ls.workspace_configuration_async(
                    L.ConfigurationParams(items=[L.ConfigurationItem(section=M.SETTINGS_SECTION)])), 10)
                if got and got[0] is not None:
                    raw = got[0]
            except Exception as e:  # a client that cannot answer keeps initializationOptions
                log.info("profd: workspace/configuration from %s failed: %s", self.peer, e)
        self.apply_settings(raw)

    def apply_settings(self, raw: Any) -> None:
        vals, bad = S.parse(raw)
        for b in bad:
            self.tell(L.MessageType.Warning, f"profd: setting ignored: {b}")
        self.settings = vals
        self.reconfigure()

    async def load_project(self) -> None:
        """Read ``[tool.profd]`` from the workspace's ``pyproject.toml`` (off the loop); say
        what is wrong with one, once per change."""
        folders = self.folders or list(self.core.base.workspace)
        vals, paths, bad = await self.core.io(S.project, folders)
        for b in bad:
            if b not in self._told:
                self.tell(L.MessageType.Warning, f"profd: {b}")
        self._told = set(bad)
        if paths != self.project_files:
            log.info("profd: [tool.profd] from %s", ", ".join(paths) or "no pyproject.toml")
        self.project, self.project_files = vals, paths

    def reconfigure(self) -> None:
        """The core's options from the daemon's own (command line), the editor's folders and its
        settings. A shared TCP daemon keeps its own options; it takes the folders only when it was
        started without a workspace."""
        core, base, st = self.core, self.core.base, self.settings
        if core.transport != "stdio":
            if st:
                self.tell(L.MessageType.Info, "profd: this is a shared daemon: it keeps the options "
                                              "it was started with (`profd start ...`)")
            if self.folders and not base.workspace:
                core.configure(workspace=_union(core.cfg.workspace, self.folders))
        else:
            pj = self.project
            ws = _union(st.get("workspace", []), pj.get("workspace", []), base.workspace, self.folders)
            pm = list(st.get("path-map", [])) + list(pj.get("path-map", [])) + [p for p in base.path_map]
            dis, th = S.effective(st, pj, base.disabled)
            core.configure(workspace=ws, path_map=pm, disabled=dis, thresholds={**base.thresholds, **th},
                           watch=st.get("watch", base.watch))
        # every session republishes once the reports under the new options are in (Core.configure:
        # what is shown stays until its replacement is ready)
        core.watch_now()

    # ---- positions: the trace's lines on the text this client shows ------------------------
    def current_lines(self, path: str) -> tuple[str, ...]:
        """The text of ``path`` as the client shows it: its open buffer (unsaved edits
        included), else the file as last read."""
        docs = self.ls.workspace.text_documents
        doc = docs.get(from_fs_path(path))
        if doc is None and docs:
            real = SOURCES.real(path)
            doc = next((d for u, d in docs.items() if SOURCES.real(_path_of(u)) == real), None)
        return tuple(split_lines(doc.source)) if doc is not None else SOURCES.lines(path)

    def positions(self, key: Optional[str]) -> positions.Positions:
        """Report ``key``'s positions moved from the text it was made against onto ours."""
        return positions.Positions(
            (lambda p: self.core.index.baseline(key, p)) if key else (lambda p: None), self.current_lines)

    def findings(self, source: str) -> tuple[Optional[str], list[T.Diagnostic]]:
        """The findings shown on ``source``, on the lines of the text this client shows."""
        return self.core.diagnostics_for(source, lines_of=self.current_lines,
                                         transform=lambda key, ds: self.positions(key).diagnostics(ds))

    def lsp_diagnostics(self, source: str) -> tuple[Optional[str], list[L.Diagnostic]]:
        key, diags = self.findings(source)
        row = self.core.index.row(key)
        items = [to_lsp_diag(d, source, key, row.sources if row else (), self.current_lines)
                 for d in diags]
        return key, self.to_client(items + self.unplaced_notes(source), source)

    def is_open(self, path: str) -> bool:
        docs = self.ls.workspace.text_documents
        if from_fs_path(path) in docs:
            return True
        real = SOURCES.real(path)
        return any(SOURCES.real(_path_of(u)) == real for u in docs)

    def unplaced_notes(self, source: str) -> list[L.Diagnostic]:
        """On an open file that a trace names by its base name but whose frames could not be
        placed here (another machine's path, or the same file in two folders): one note saying
        so, where the user looks (findings on a trace file are easily never seen)."""
        core, name = self.core, os.path.basename(source)
        out = []
        for key, (trace_path, names) in list(core.unplaced.items()):
            if name not in names or core.index.key_of_trace(trace_path) != key or \
                    not core.index.shown(key) or not self.is_open(source):
                continue
            hint = core.unmapped_hint(key, trace_path)
            if hint is None:
                continue
            frames = ", ".join(f"`{p}`" for p in names[name][:3])
            out.append(L.Diagnostic(
                range=L.Range(L.Position(0, 0), L.Position(0, 0)), severity=L.DiagnosticSeverity.Information,
                code=UNMAPPED, source="profd",
                message=(f"trace {os.path.basename(trace_path)} names {frames}, which profd could "
                         f"not place on this file: {hint.message}\nfix: {hint.fix}"),
                data={"key": key, "line": None}))
        return out

    def unplaced(self, key: str) -> None:
        """Report ``key`` has findings no file here shows (the core searched for their files):
        say so once per trace with ``window/showMessage``, and show the notes on open files."""
        if not self.ready or key not in self.core.unplaced:
            return
        trace_path, names = self.core.unplaced[key]
        hint = self.core.unmapped_hint(key, trace_path)
        if hint is not None and trace_path not in self._told_unplaced:
            self._told_unplaced.add(trace_path)
            self.tell(L.MessageType.Warning, f"profd: {os.path.basename(trace_path)}: {hint.message}. "
                                             f"To place them: {hint.fix}")
        self.publish(trace_path)
        for uri in list(self.ls.workspace.text_documents):
            if os.path.basename(_path_of(uri)) in names:
                self.publish(self._source_of(uri))
        self.schedule_refresh()

    def edited(self, uri: str) -> None:
        """A buffer changed: its findings move with the text (pushed once the typing pauses;
        a pulling client pulls again by itself and gets a new result id)."""
        if self.pulls or self.closed:
            return
        old = self._edits.pop(uri, None)
        if old is not None:
            old.cancel()
        self._edits[uri] = asyncio.get_running_loop().call_later(
            0.2, lambda: (self._edits.pop(uri, None), self.ready and self.publish(self._source_of(uri))))

    def _source_of(self, uri: str) -> str:
        p = _path_of(uri)
        if self.core.index.indexed(p):
            return p
        real = SOURCES.real(p)
        return next((s for s in self.core.index.sources() if SOURCES.real(s) == real), p)

    # ---- from the core ----------------------------------------------------------------------
    def publish(self, source: str) -> None:
        if self.pulls:
            return
        _, items = self.lsp_diagnostics(source)
        uri = from_fs_path(source)
        if self.shown.changed(uri, items):  # only what changed: no repeats
            self.ls.text_document_publish_diagnostics(
                L.PublishDiagnosticsParams(uri=uri, diagnostics=items))

    def republish(self) -> None:
        """Every file again, once the reports under new options are in (Core.configure): only
        what changed is sent, emptied where nothing is left."""
        if not self.ready:
            return
        for uri in self.shown.uris():
            self.publish(_path_of(uri))
        for source in self.core.index.sources():
            if from_fs_path(source) not in self.shown:
                self.publish(source)
        self.schedule_refresh()

    def schedule_refresh(self) -> None:
        """Ask the client to pull again (diagnostics, lenses, hints): once per burst of reports."""
        if self._refresh is not None or self.closed:
            return
        loop = asyncio.get_running_loop()
        self._refresh = loop.call_later(0.05, self._send_refresh)

    def _send_refresh(self) -> None:
        self._refresh = None
        if not self.ready:
            return
        ws = _cap(self.caps, "workspace")
        for want, send in ((self.pulls, self.ls.workspace_diagnostic_refresh),
                           (_cap(ws, "code_lens", "refresh_support"), self.ls.workspace_code_lens_refresh),
                           (_cap(ws, "inlay_hint", "refresh_support"), self.ls.workspace_inlay_hint_refresh)):
            if want:
                fut = send(None)
                if hasattr(fut, "add_done_callback"):
                    fut.add_done_callback(lambda f: f.cancelled() or f.exception())

    def report_ready(self, key: str, sources: list[str], report: T.Report) -> None:
        if not self.ready:
            return
        for s in sources:
            self.publish(s)
        self.schedule_refresh()
        self.ls.protocol.notify(M.REPORT_READY, T.to_builtins(M.ReportReady(
            key=key, path=self.core.index.row(key).path, error=report.error,
            diagnostics=len(report.diagnostics), sources=sources)))

    def log_error(self, text: str) -> None:
        if self.ready:
            self.ls.window_log_message(L.LogMessageParams(type=L.MessageType.Error, message=text))

    def progress(self, token: str, title: Optional[str]) -> None:
        if not self.ready or not self.can_progress:
            return
        wdp = self.ls.work_done_progress

        def begin(*_):
            if token in wdp.tokens:  # not ended before the client answered
                wdp.begin(token, L.WorkDoneProgressBegin(title=title, cancellable=False,
                                                         percentage=0))
                self._begun.add(token)

        if title is not None:
            wdp.create(token, callback=begin)
        elif token in wdp.tokens:
            if token in self._begun:
                wdp.end(token, L.WorkDoneProgressEnd(message="done"))
            self._begun.discard(token)
            wdp.tokens.pop(token, None)

    def progress_at(self, token: str, percentage: int, message: str) -> None:
        """A ``$/progress`` report for a begun ``token`` (an analysis: Core._progress)."""
        if self.ready and token in self._begun:
            self.ls.work_done_progress.report(token, L.WorkDoneProgressReport(
                percentage=percentage, message=message))


def _union(*lists: list[str]) -> list[str]:
    out: dict[str, None] = {}
    for xs in lists:
        for x in xs:
            out[os.path.abspath(x)] = None
    return list(out)


def _folders(params: L.InitializeParams) -> list[str]:
    """The editor's workspace: its folders, else rootUri, else rootPath."""
    if params.workspace_folders:
        return [p for p in (to_fs_path(f.uri) for f in params.workspace_folders) if p]
    if params.root_uri:
        p = to_fs_path(params.root_uri)
        return [p] if p else []
    return [params.root_path] if params.root_path else []


FIX_ALL = "source.fixAll.profd"


def _wants(only: list[str], kind: str) -> bool:
    """Whether a code-action request limited to ``only`` kinds (none: all) takes ``kind``
    (kinds are hierarchical: ``source`` takes ``source.fixAll.profd``)."""
    return not only or any(kind == k or kind.startswith(k + ".") for k in only)


def _action(uri: str, fx: quickfix.Fix, diags: Optional[list[L.Diagnostic]], lines, enc: str,
            kind: str = L.CodeActionKind.QuickFix) -> L.CodeAction:
    """A fix as a code action; its edits' columns (characters on ``lines``) in the client's units."""
    edits = [L.TextEdit(range=L.Range(L.Position(e.line, e.col), L.Position(e.end_line, e.end_col)),
                        new_text=e.text) for e in fx.edits]
    return L.CodeAction(
        title=fx.title, kind=kind, diagnostics=diags, is_preferred=fx.preferred or None,
        edit=L.WorkspaceEdit(changes={uri: encoding.edits(edits, lines, enc)}))


def _edits_task(text: str, near: list[tuple[str, int]], everything: list[tuple[str, int]]) -> dict:
    """(off the loop) Per finding its quick fixes then its suppression; the fix-all."""
    each = []
    for code, line in near:
        fxs = quickfix.fixes(text, code, line)
        sup = quickfix.suppress(text, code, line)
        each.append(fxs + ([sup] if sup is not None else []))
    return {"each": each, "all": quickfix.fix_all(text, everything) if everything else None}


def _path_of(uri: str) -> str:
    return to_fs_path(uri) or uri


async def _lookup(core: Core, uri: str, outline: bool = False) -> str:
    """The indexed name of the file at ``uri`` (as indexed, or via its real path), read into
    ``SOURCES`` (off the loop) for the handler that asked; ``outline``: its functions too."""
    p = _path_of(uri)
    if not core.index.indexed(p):
        await SOURCES.warm([p], outline=outline)
        rp = SOURCES.real(p)
        indexed = next((s for s in core.index.sources() if SOURCES.real(s) == rp), None)
        if indexed is None:
            return p
        p = indexed
    await SOURCES.warm([p], outline=outline)
    return p


WORKLOAD_TIMEOUT_S = 600.0


def build_server(session: LspSession) -> LanguageServer:
    core = session.core
    ls = LanguageServer("profd", __version__, protocol_cls=ProfdProtocol,
                        text_document_sync_kind=L.TextDocumentSyncKind.Incremental)

    @ls.feature(L.INITIALIZE)
    def initialize(ls_: LanguageServer, params: L.InitializeParams):
        session.folders = _folders(params)
        opts = params.initialization_options
        if isinstance(opts, dict):
            session.init_settings = opts.get("settings", {k: v for k, v in opts.items() if k != "token"})

    @ls.feature(L.INITIALIZED)
    async def initialized(ls_: LanguageServer, params: L.InitializedParams):
        session.ready = True
        core.sessions.add(session)
        ls_.window_log_message(L.LogMessageParams(
            type=L.MessageType.Info,
            message=f"profd {__version__}: {len(core.index)} reports; watching {core.cfg.watch}"))
        await session.load_project()
        await session.load_settings()
        await SOURCES.warm(core.index.sources())
        for source in core.index.sources():
            session.publish(source)
        session.schedule_refresh()

    @ls.feature(L.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls_: LanguageServer, params: L.DidChangeConfigurationParams):
        vals, _ = S.parse(params.settings)
        if vals or not _cap(session.caps, "workspace", "configuration"):
            session.apply_settings(params.settings)
        else:  # the notification carries nothing usable (often null): ask for the section
            await session.load_settings()

    @ls.feature(L.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    async def did_change_folders(ls_: LanguageServer, params: L.DidChangeWorkspaceFoldersParams):
        gone = {to_fs_path(f.uri) for f in params.event.removed}
        session.folders = [f for f in session.folders if f not in gone] + \
            [p for p in (to_fs_path(f.uri) for f in params.event.added) if p]
        await session.load_project()
        session.reconfigure()

    @ls.feature(L.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls_: LanguageServer, params: L.DidOpenTextDocumentParams):
        """Push a file's findings again when it is opened (on the buffer's text): some clients
        (eglot) drop diagnostics for files that were not open when they arrived."""
        source = await _lookup(core, params.text_document.uri)
        session.shown.forget(from_fs_path(source))
        session.publish(source)

    @ls.feature(L.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls_: LanguageServer, params: L.DidChangeTextDocumentParams):
        """An edit (pygls has applied it to the buffer, incremental or whole): the findings
        move with the text."""
        session.edited(params.text_document.uri)

    @ls.feature(L.TEXT_DOCUMENT_DID_CLOSE)
    async def did_close(ls_: LanguageServer, params: L.DidCloseTextDocumentParams):
        """Closed without saving: the findings go back onto the file as it is on disk."""
        session.publish(await _lookup(core, params.text_document.uri))

    @ls.feature(L.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls_: LanguageServer, params: L.DidSaveTextDocumentParams):
        """A saved source (an edit, a quick fix, a ``# profd: ignore[...]``): the report stays
        the trace's (it is never analysed again against text that did not run); its positions
        are mapped onto the saved text and a new comment suppresses at once. A saved
        ``pyproject.toml``: the ``[tool.profd]`` options are read again."""
        if os.path.basename(_path_of(params.text_document.uri)) == "pyproject.toml":
            await session.load_project()
            session.reconfigure()
            return
        source = await _lookup(core, params.text_document.uri)
        key = core.index.newest_for(source)
        if key is not None:
            await SOURCES.warm(core.index.row(key).sources)
        session.publish(source)
        session.schedule_refresh()

    @ls.feature(L.SHUTDOWN)
    def shutdown(ls_: LanguageServer, *args):
        session.ready = False
        core.sessions.discard(session)

    def diagnostic_report(source: str, previous: Optional[str]):
        """(result id, LSP diagnostics or None when ``previous`` is still current) of a file: the
        result id names the report shown on it (content + options) and exactly the diagnostics
        sent (their positions after the user's edits), so ``unchanged`` is never stale."""
        key, items = session.lsp_diagnostics(source)
        result_id = f"{key or 'none'}:{policy.digest(items)}"
        if previous == result_id:
            return result_id, None
        return result_id, items

    @ls.feature(L.TEXT_DOCUMENT_DIAGNOSTIC,
                L.DiagnosticOptions(inter_file_dependencies=False, workspace_diagnostics=True,
                                    identifier="profd"))
    async def pull_diagnostics(ls_: LanguageServer, params: L.DocumentDiagnosticParams):
        source = await _lookup(core, params.text_document.uri)
        if core.index.newest_for(source) is None and core.index.key_of_trace(source) is None:
            # its report may be on its way (the start-up scan, an analysis): the first answer
            # waits for it, or until nothing is left to analyse
            await core.wait_for(source)
            source = await _lookup(core, params.text_document.uri)
        result_id, items = diagnostic_report(source, params.previous_result_id)
        if items is None:
            return L.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
        return L.RelatedFullDocumentDiagnosticReport(items=items, result_id=result_id)

    @ls.feature(L.WORKSPACE_DIAGNOSTIC)
    def workspace_diagnostics(ls_: LanguageServer, params: L.WorkspaceDiagnosticParams):
        """Every file profd has findings on, the trace files too (which an editor rarely opens:
        trace-level findings and the unmapped-source hint live there)."""
        prev = {p.uri: p.value for p in params.previous_result_ids or ()}
        out = []
        for source in core.index.sources():
            uri = from_fs_path(source)
            result_id, items = diagnostic_report(source, prev.get(uri))
            if items is None:
                out.append(L.WorkspaceUnchangedDocumentDiagnosticReport(
                    uri=uri, version=None, result_id=result_id))
            elif items or uri in prev:
                out.append(L.WorkspaceFullDocumentDiagnosticReport(
                    uri=uri, version=None, items=items, result_id=result_id))
        return L.WorkspaceDiagnosticReport(items=out)

    @ls.feature(L.TEXT_DOCUMENT_HOVER)
    async def hover(ls_: LanguageServer, params: L.HoverParams):
        source = await _lookup(core, params.text_document.uri)
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
            parts.append(hover_markdown(h, core.index.row(key).path, here, mods, _steps(core, key),
                                        f"{os.path.basename(source)}:{line}"))
        if ld is not None:
            parts.append(before_after_markdown(ld, old_trace))
        if was.changed:
            base = core.index.baseline(key, source) or ()
            then = base[was.line - 1].strip() if 0 < was.line <= len(base) else ""
            parts.append(f"*This line changed since the trace was analysed* (it was line {was.line}"
                         + (f": `{then[:80]}`" if then else "") + "): the numbers are that code's.")
        return L.Hover(contents=L.MarkupContent(kind=L.MarkupKind.Markdown, value="\n\n".join(parts)),
                       range=encoding.range_(session.current_lines(source),
                                             _line_range(source, line, session.current_lines), session.encoding))

    @ls.feature(L.TEXT_DOCUMENT_INLAY_HINT, L.InlayHintOptions(resolve_provider=False))
    async def inlay_hints(ls_: LanguageServer, params: L.InlayHintParams):
        source = await _lookup(core, params.text_document.uri)
        key, hots = core.hot_lines_for(source)
        hots = session.positions(key).hot_lines(hots)
        n = _steps(core, key)
        lo, hi = params.range.start.line, params.range.end.line
        lines, enc = session.current_lines(source), session.encoding
        out = []
        for h in hots:
            l0 = h.line - 1
            g, c = max(h.gpu_us, h.gpu_inclusive_us), max(h.cpu_total_us, h.cpu_inclusive_us)
            if not lo <= l0 <= hi or (g <= 0 and c <= 0):
                continue
            label = f"per step: GPU {us(g / n)} · CPU {us(c / n)}" + (" incl. calls" if (g, c) != (h.gpu_us, h.cpu_total_us) else "")
            if h.launches:
                label += f" · {plural(h.launches / n, 'launch')}"
            out.append(L.InlayHint(position=encoding.position(lines, L.Position(l0, line_len(source, l0, session.current_lines)), enc),
                                   label=label, padding_left=True))
        return out

    @ls.feature(L.TEXT_DOCUMENT_CODE_LENS, L.CodeLensOptions(resolve_provider=False))
    async def code_lens(ls_: LanguageServer, params: L.CodeLensParams):
        source = await _lookup(core, params.text_document.uri, outline=True)
        key, hots = core.hot_lines_for(source)
        pos = session.positions(key)
        hots = pos.hot_lines(hots)
        found = pos.diagnostics(core.diagnostics_for(source)[1])  # in the same lines as the hot lines
        src_lines = session.current_lines(source)
        fns = SOURCES.functions(source) if src_lines == SOURCES.lines(source) else \
            outline.functions(src_lines)  # an unsaved buffer: its own outline
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
            n = _steps(core, key)
            title = (f"profd: {name}: per step GPU {us(gpu / n)} · CPU {us(cpu / n)} · "
                     f"{plural(launches / n, 'launch')} ({plural(len(hs), 'hot line')})")
            rows = {h.line for h in hs}
            best = top([d for d in found or () if d.location.path == source and d.location.line in rows], 1)
            if best:  # the fix in this function that gives back most
                title += f" · top fix: {best[0].code} ~{us(best[0].impact_us_per_step)}/step"
            lines = [f"profd: {name} in {os.path.basename(source)}, per step "
                     f"(trace {os.path.basename(core.index.row(key).path)}):"]
            for h in sorted(hs, key=lambda h: -(h.gpu_us + h.cpu_total_us))[:8]:
                text = src_lines[h.line - 1].strip() if h.line <= len(src_lines) else ""
                lines.append(f"  line {h.line}: GPU {us(h.gpu_us / n)}, CPU {us(h.cpu_total_us / n)}, "
                             f"{plural(h.launches / n, 'launch')}  {text[:60]}")
            out.append(L.CodeLens(range=L.Range(L.Position(l0, 0), L.Position(l0, 0)),
                                  command=L.Command(title=title, command=M.CMD_SHOW,
                                                    arguments=["\n".join(lines)])))
        old_trace, deltas = line_deltas(core, source)
        for ld in deltas:
            if ld.trend == "same" and not ld.codes_gone and not ld.codes_new:
                continue
            now = pos.line(source, ld.line)
            if now is None:
                continue
            l0 = now.line - 1
            out.append(L.CodeLens(range=L.Range(L.Position(l0, 0), L.Position(l0, 0)),
                                  command=L.Command(title=delta_title(ld, old_trace), command=M.CMD_SHOW,
                                                    arguments=[before_after_markdown(ld, old_trace)])))
        return out + record_lsp.lenses(session, source)

    @ls.feature(L.TEXT_DOCUMENT_CODE_ACTION,
                L.CodeActionOptions(code_action_kinds=[L.CodeActionKind.QuickFix, FIX_ALL]))
    async def code_action(ls_: LanguageServer, params: L.CodeActionParams):
        """Quick fixes and suppressions for the findings in the range, the file's fix-all
        (``source.fixAll.profd``) and the annotated trace. The edits are computed off the loop
        (each parses and compiles the file) and kept for the buffer's text: editors ask again at
        every cursor move."""
        uri = params.text_document.uri
        source = await _lookup(core, uri)
        key, diags = session.findings(source)  # on the buffer's lines
        if key is None:
            return []
        row = core.index.row(key)
        only = [str(getattr(k, "value", k)) for k in (params.context.only or ())]
        lo, hi = params.range.start.line + 1, params.range.end.line + 1
        doc = ls_.workspace.text_documents.get(uri)
        text = doc.source if doc is not None else "\n".join(SOURCES.lines(source)) + "\n"
        mine = [d for d in diags if d.location.path == source and d.location.line and d.code != UNMAPPED]
        near = [d for d in mine if lo <= d.location.line <= hi] if _wants(only, L.CodeActionKind.QuickFix) else []
        everything = [(d.code, d.location.line) for d in mine] if _wants(only, FIX_ALL) else []
        found = await session.edits_for(text, [(d.code, d.location.line) for d in near], everything)
        lines, enc = split_lines(text), session.encoding
        out: list[L.CodeAction] = []
        lsp_near: list[L.Diagnostic] = []
        for d, fxs in zip(near, found["each"]):
            ld = session.to_client([to_lsp_diag(d, source, key, row.sources, session.current_lines)], source)[0]
            lsp_near.append(ld)
            out += [_action(uri, fx, [ld], lines, enc) for fx in fxs]
        if found["all"] is not None:
            out.append(_action(uri, found["all"], None, lines, enc, kind=FIX_ALL))
        if (out or any(d.location.path == source for d in diags)) and not only:
            out.append(L.CodeAction(title=f"Open the annotated trace ({os.path.basename(row.path)})",
                                    kind=L.CodeActionKind.Empty, diagnostics=lsp_near or None,
                                    command=L.Command(title="profd: open the annotated trace",
                                                      command=M.CMD_ANNOTATE, arguments=[key])))
        return out

    record_lsp.register(ls, session, RpcError)  # profd.record

    @ls.command(M.CMD_SHOW)
    def cmd_show(ls_: LanguageServer, *args):
        if len(args) == 1 and isinstance(args[0], list):
            args = tuple(args[0])
        text = "\n".join(str(a) for a in args)
        session.tell(L.MessageType.Info, text)
        return text

    @ls.command(M.CMD_ANNOTATE)
    async def cmd_annotate(ls_: LanguageServer, *args):
        if len(args) == 1 and isinstance(args[0], list):
            args = tuple(args[0])
        key = args[0] if args else None
        if not isinstance(key, str) or key not in core.index:
            raise RpcError(-32602, "profd.annotate wants [report key]")
        row, cfg = core.index.row(key), core.cfg
        name = os.path.basename(row.path).split(".json")[0]
        out = os.path.join(cfg.state, "annotated", f"{name}.{key[:12]}.profd.json.gz")
        if not await core.io(os.path.exists, out):
            try:
                await core.run_in_worker(_annotate_task, row.path, out, cfg.workspace,
                                         [list(p) for p in cfg.path_map], sorted(cfg.disabled))
            except Exception as e:
                raise RpcError(-32603, f"profd: annotating {row.path} failed: {e}")
        uri = from_fs_path(out)
        if _cap(session.caps, "window", "show_document", "support"):
            ls_.window_show_document(L.ShowDocumentParams(uri=uri, external=True))
        session.tell(L.MessageType.Info, f"profd: annotated trace written to {out} "
                                         "(open it in https://ui.perfetto.dev or chrome://tracing)")
        return {"path": out, "uri": uri}

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
        return T.to_builtins(M.ReportsResult(reports=core.index.entries(p.path)))

    @ls.feature(M.REPORT)
    async def report(ls_: LanguageServer, params: Any):
        p = _convert(params, M.ReportParams)
        key = p.key or (core.index.key_of_trace(p.path) if p.path else None)
        if p.path and key is None:
            key = core.index.key_of_trace(await core.io(os.path.realpath, p.path))
        r = (core.index.report_at(key, p.path) if p.path else core.index.report(key)) \
            if key and key in core.index else None
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
