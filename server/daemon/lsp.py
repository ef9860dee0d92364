"""The LSP front-end: one pygls LanguageServer per client connection, all over one ``Core``.

A session (``LspSession``) holds what one client has: its capabilities and column encoding, its
settings and folders (-> the core's options), its open buffers (positions.py maps the trace's
lines through the user's edits), and what it was last sent (publish.py: pushed, or pulled with
result ids by clients that can be refreshed). The requests are answered by the handlers in
``handlers/`` (one module per feature, registered from its table), and what they show is
formatted in ``present``. The lifecycle follows the spec (``ProfdProtocol``): -32002 before
``initialize``, -32600 after ``shutdown``, ``exit`` ends the session.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from typing import Any, Optional

import orjson
from lsprotocol import types as L
from pygls.exceptions import JsonRpcInternalError
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from ... import __version__
from ...protocol import methods as M
from ...protocol import types as T
from ..engine import split_lines
from . import encoding, handlers, positions, publish as policy, settings as S
from .confine import shown
from .core import Core
from .handlers.code_actions import edits_task
from .handlers.common import path_of, uri_of
from .placement import UNMAPPED
from .present import to_lsp_diag
from .publish import cap
from .sources import SOURCES

log = logging.getLogger("profd.lsp")


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
                self._send_response(
                    msg_id,
                    None,
                    L.ResponseError(
                        code=-32600, message=f"profd: {method} after shutdown: only exit is accepted"
                    ),
                )
            return None
        if not self.initialize_seen and method is not None:
            if method != L.INITIALIZE:
                if is_request:
                    self._send_response(
                        msg_id,
                        None,
                        L.ResponseError(
                            code=M.ERR_NOT_INITIALIZED, message=f"profd: {method} before initialize"
                        ),
                    )
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
        if error is not None and isinstance(getattr(error, "data", None), dict) and "traceback" in error.data:
            error = client_error(error)
        return super()._send_response(msg_id, result, error)

    def _send_data(self, data):
        """pygls's framing, with the body written by orjson (stdlib json walked every hover's
        reply in Python): the same JSON, in UTF-8 rather than ASCII escapes; what orjson cannot
        write (an int past 64 bits) goes pygls's way."""
        if not data or self.writer is None:
            return super()._send_data(data)
        try:
            body = orjson.dumps(data, default=self._serialize_message, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:  # orjson.JSONEncodeError
            return super()._send_data(data)
        head = f"Content-Length: {len(body)}\r\nContent-Type: {self.CONTENT_TYPE}; charset={self.CHARSET}\r\n\r\n"
        try:
            res = self.writer.write(head.encode() + body if self._include_headers else body)
            if inspect.isawaitable(res):
                asyncio.ensure_future(res)
        except BrokenPipeError:
            log.exception("profd: sending to the client: broken pipe")
            raise
        except Exception as error:
            log.exception("profd: sending to the client failed")
            self._server._report_server_error(error, JsonRpcInternalError)

    @lsp_method(L.EXIT)
    def lsp_exit(self, *args):  # type: ignore[override]
        s = getattr(self, "session", None)
        if s is not None:
            s.exit_code = 0 if self._shutdown else 1  # the spec: 1 without a shutdown first
            s.close()
        return None
        yield  # a generator, like pygls's


_BAD_INPUT = (
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "OverflowError",
    "UnicodeError",
    "UnicodeEncodeError",
    "UnicodeDecodeError",
    "AttributeError",
    "RecursionError",
)


def client_error(error):
    """pygls's error for an exception in a handler ("ValueError: embedded null byte" and its
    traceback) as a client should get it: -32602 for bad input, -32603 otherwise, the message
    plain and short, no ``data``."""
    text = str(getattr(error, "message", "") or "")
    kind = text.split(":", 1)[0].strip()
    if kind in _BAD_INPUT:
        return type(error)(code=-32602, message=f"profd: invalid params: {shown(text)}")
    return type(error)(
        code=-32603, message=f"profd: internal error ({shown(kind, 60)}; the daemon's log has the details)"
    )


# ---- a session ----------------------------------------------------------------------------------
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
        # The latest report of a token whose create the client has not answered yet: sent at its
        # begin, so a client slow to answer (a loaded machine) still sees how far it is.
        self._pending: dict[str, L.WorkDoneProgressReport] = {}
        self.folders: list[str] = []
        self.settings: dict = {}
        self.project: dict = {}  # [tool.profd] of the workspace (settings.project)
        self.project_files: list[str] = []
        self._told: set[str] = set()
        self.init_settings: Any = None
        self.on_close = None
        self._refresh: Optional[asyncio.TimerHandle] = None
        self._fixes: dict[tuple, dict] = {}  # code actions' edits, by buffer text (edits_for)
        self._split: dict[str, tuple[str, tuple[str, ...]]] = {}  # uri -> (buffer text, its lines)
        self._fixes_lock = asyncio.Lock()
        self.ls = build_server(self)
        self.ls.protocol.session = self

    # ---- what the client can do -------------------------------------------------------------
    @property
    def caps(self):
        return self.ls.protocol.client_capabilities

    @property
    def can_progress(self) -> bool:
        return bool(cap(self.caps, "window", "work_done_progress"))

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

    async def edits_for(
        self, text: str, near: list[tuple[str, int]], everything: list[tuple[str, int]]
    ) -> dict:
        """The code actions' edits (``handlers.code_actions.edits_task``) in a thread, one at a time
        per client, the last few kept by text."""
        k = (hash(text), len(text), tuple(near), tuple(everything))
        async with self._fixes_lock:
            hit = self._fixes.get(k)
            if hit is None:
                hit = await asyncio.get_running_loop().run_in_executor(
                    None, edits_task, text, near, everything
                )
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
        if cap(self.caps, "workspace", "configuration"):
            try:
                got = await asyncio.wait_for(
                    self.ls.workspace_configuration_async(
                        L.ConfigurationParams(items=[L.ConfigurationItem(section=M.SETTINGS_SECTION)])
                    ),
                    10,
                )
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
                self.tell(
                    L.MessageType.Info,
                    "profd: this is a shared daemon: it keeps the options "
                    "it was started with (`profd start ...`)",
                )
            if self.folders and not base.workspace:
                core.configure(workspace=_union(core.cfg.workspace, self.folders))
        else:
            pj = self.project
            ws = _union(st.get("workspace", []), pj.get("workspace", []), base.workspace, self.folders)
            pm = list(st.get("path-map", [])) + list(pj.get("path-map", [])) + [p for p in base.path_map]
            dis, th = S.effective(st, pj, base.disabled)
            core.configure(
                workspace=ws,
                path_map=pm,
                disabled=dis,
                thresholds={**base.thresholds, **th},
                watch=st.get("watch", base.watch),
            )
        # every session republishes once the reports under the new options are in (Core.configure:
        # what is shown stays until its replacement is ready)
        core.watch_now()

    # ---- positions: the trace's lines on the text this client shows ------------------------
    def current_lines(self, path: str) -> tuple[str, ...]:
        """The text of ``path`` as the client shows it: its open buffer (unsaved edits
        included), else the file as last read."""
        docs = self.ls.workspace.text_documents
        doc = docs.get(uri_of(path))
        if doc is None and docs:
            real = SOURCES.real(path)
            doc = next((d for u, d in docs.items() if SOURCES.real(path_of(u)) == real), None)
        if doc is None:
            return SOURCES.lines(path)
        # a hover asks for these lines several times; the buffer's text is split once per edit
        text = doc.source
        seen = self._split.get(doc.uri)
        if seen is None or seen[0] is not text:
            seen = self._split[doc.uri] = (text, tuple(split_lines(text)))
            if len(self._split) > 64:  # the open buffers, and a few closed ones
                self._split.pop(next(iter(self._split)))
        return seen[1]

    def positions(self, key: Optional[str]) -> positions.Positions:
        """Report ``key``'s positions moved from the text it was made against onto ours."""
        return positions.Positions(
            (lambda p: self.core.index.baseline(key, p)) if key else (lambda p: None), self.current_lines
        )

    def findings(self, source: str) -> tuple[Optional[str], list[T.Diagnostic]]:
        """The findings shown on ``source``, on the lines of the text this client shows."""
        return self.core.diagnostics_for(
            source, lines_of=self.current_lines, transform=lambda key, ds: self.positions(key).diagnostics(ds)
        )

    def lsp_diagnostics(self, source: str) -> tuple[Optional[str], list[L.Diagnostic]]:
        key, diags = self.findings(source)
        row = self.core.index.row(key)
        items = [to_lsp_diag(d, source, key, row.sources if row else (), self.current_lines) for d in diags]
        return key, self.to_client(items + self.unplaced_notes(source), source)

    def is_open(self, path: str) -> bool:
        docs = self.ls.workspace.text_documents
        if uri_of(path) in docs:
            return True
        real = SOURCES.real(path)
        return any(SOURCES.real(path_of(u)) == real for u in docs)

    def unplaced_notes(self, source: str) -> list[L.Diagnostic]:
        """On an open file that a trace names by its base name but whose frames could not be
        placed here (another machine's path, or the same file in two folders): one note saying
        so, where the user looks (findings on a trace file are easily never seen)."""
        core, name = self.core, os.path.basename(source)
        out = []
        for key, (trace_path, names) in core.unplaced.items():
            if (
                name not in names
                or core.index.key_of_trace(trace_path) != key
                or not core.index.shown(key)
                or not self.is_open(source)
            ):
                continue
            hint = core.unplaced.hint(key, trace_path)
            if hint is None:
                continue
            frames = ", ".join(f"`{p}`" for p in names[name][:3])
            out.append(
                L.Diagnostic(
                    range=L.Range(L.Position(0, 0), L.Position(0, 0)),
                    severity=L.DiagnosticSeverity.Information,
                    code=UNMAPPED,
                    source="profd",
                    message=(
                        f"trace {os.path.basename(trace_path)} names {frames}, which profd could "
                        f"not place on this file: {hint.message}\nfix: {hint.fix}"
                    ),
                    data={"key": key, "line": None},
                )
            )
        return out

    def unplaced(self, key: str) -> None:
        """Report ``key`` has findings no file here shows (the core searched for their files):
        say so once per trace with ``window/showMessage``, and show the notes on open files."""
        unplaced = self.core.unplaced.get(key)
        if not self.ready or unplaced is None:
            return
        trace_path, names = unplaced
        hint = self.core.unplaced.hint(key, trace_path)
        if hint is not None and trace_path not in self._told_unplaced:
            self._told_unplaced.add(trace_path)
            self.tell(
                L.MessageType.Warning,
                f"profd: {os.path.basename(trace_path)}: {hint.message}. To place them: {hint.fix}",
            )
        self.publish(trace_path)
        for uri in list(self.ls.workspace.text_documents):
            if os.path.basename(path_of(uri)) in names:
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
            0.2, lambda: (self._edits.pop(uri, None), self.ready and self.publish(self._source_of(uri)))
        )

    def _source_of(self, uri: str) -> str:
        p = path_of(uri)
        if self.core.index.indexed(p):
            return p
        real = SOURCES.real(p)
        return next((s for s in self.core.index.sources() if SOURCES.real(s) == real), p)

    # ---- from the core ----------------------------------------------------------------------
    def publish(self, source: str) -> None:
        if self.pulls:
            return
        _, items = self.lsp_diagnostics(source)
        uri = uri_of(source)
        if self.shown.changed(uri, items):  # only what changed: no repeats
            self.ls.text_document_publish_diagnostics(L.PublishDiagnosticsParams(uri=uri, diagnostics=items))

    def republish(self) -> None:
        """Every file again, once the reports under new options are in (Core.configure): only
        what changed is sent, emptied where nothing is left."""
        if not self.ready:
            return
        for uri in self.shown.uris():
            self.publish(path_of(uri))
        for source in self.core.index.sources():
            u = uri_of(source)
            if u is None or u not in self.shown:
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
        ws = cap(self.caps, "workspace")
        for want, send in (
            (self.pulls, self.ls.workspace_diagnostic_refresh),
            (cap(ws, "code_lens", "refresh_support"), self.ls.workspace_code_lens_refresh),
            (cap(ws, "inlay_hint", "refresh_support"), self.ls.workspace_inlay_hint_refresh),
        ):
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
        self.ls.protocol.notify(
            M.REPORT_READY,
            T.to_builtins(
                M.ReportReady(
                    key=key,
                    path=self.core.index[key].path,
                    error=report.error,
                    diagnostics=len(report.diagnostics),
                    sources=sources,
                )
            ),
        )

    def log_error(self, text: str) -> None:
        if self.ready:
            self.ls.window_log_message(L.LogMessageParams(type=L.MessageType.Error, message=text))

    def progress(self, token: str, title: Optional[str]) -> None:
        if not self.ready or not self.can_progress:
            return
        wdp = self.ls.work_done_progress

        def begin(*_):
            if token in wdp.tokens:  # not ended before the client answered
                wdp.begin(token, L.WorkDoneProgressBegin(title=title, cancellable=False, percentage=0))
                self._begun.add(token)
                if (late := self._pending.pop(token, None)) is not None:
                    wdp.report(token, late)

        if title is not None:
            wdp.create(token, callback=begin)
        elif token in wdp.tokens:
            if token in self._begun:
                wdp.end(token, L.WorkDoneProgressEnd(message="done"))
            self._begun.discard(token)
            self._pending.pop(token, None)
            wdp.tokens.pop(token, None)

    def progress_at(self, token: str, percentage: int, message: str) -> None:
        """A ``$/progress`` report for a begun ``token`` (an analysis: Core._progress)."""
        if not self.ready:
            return
        report = L.WorkDoneProgressReport(percentage=percentage, message=message)
        if token in self._begun:
            self.ls.work_done_progress.report(token, report)
        elif token in self.ls.work_done_progress.tokens:
            self._pending[token] = report


def _union(*lists: list[str]) -> list[str]:
    out: dict[str, None] = {}
    for xs in lists:
        for x in xs:
            out[os.path.abspath(x)] = None
    return list(out)


def build_server(session: LspSession) -> LanguageServer:
    ls = LanguageServer(
        "profd",
        __version__,
        protocol_cls=ProfdProtocol,
        text_document_sync_kind=L.TextDocumentSyncKind.Incremental,
    )
    handlers.register(ls, session)
    return ls
