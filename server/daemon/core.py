"""The daemon's shared core: one store, one analysis executor, one watcher, many LSP sessions.

The engine runs in a process pool of our own (spawned workers; the event loop never parses a
trace, so hovers and status answer at once while a large trace is read). Results are keyed by
``sha256(raw file bytes):options fingerprint`` (protocol.methods), stored in SQLite, and indexed in
memory by the source files their findings point at: for each source file the newest trace wins
(by its own recording time, then by arrival; only reports made with the current options), older
ones stay queryable through profd/reports and profd/report, and the one before it is what a
before/after compares against.
"""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import copy
import functools
import logging
import os
import sqlite3
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Optional, Protocol

import msgspec

from ... import __version__
from ...protocol import methods as M
from ...protocol import types as T
from ..engine.sourcemap import split_lines
from . import confine
from .confine import shown
from .hashing import Hasher
from .index import options_fp, relabel
from .placement import UNMAPPED, local_sources, placed_path, suggest_maps, unmapped_hint, unmapped_paths
from .pool import BUDGET, Budget, WorkerPool, analyze_task, default_memory_budget
from .sources import SOURCES, text_chars
from .store import Lru, Row, Store, private_dir
from .watcher import Intake, Outcome, Sig, Watcher, inside, refusal, same_file, signature

log = logging.getLogger("profd.core")


@dataclass
class Config:
    watch: Optional[str] = None
    workspace: list[str] = field(default_factory=list)
    path_map: list[tuple[str, str]] = field(default_factory=list)
    disabled: set[str] = field(default_factory=set)
    # per rule code, thresholds a team set ([tool.profd.rules.CODE], the editor's "rules" setting)
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)
    state: str = "."
    allow: list[str] = field(default_factory=list)  # explicit allow-list for profd/analyze
    workers: int = 2
    settle: float = 0.3  # s a file's size/mtime must hold still before it is read
    quiet: float = 2.0  # s a file that did not parse must stay unchanged before it is an error
    analysis_timeout: float = 300.0  # s one analysis may run before its process is ended
    analysis_mb: int = 0  # MB one analysis may hold (0: default_memory_budget)
    allow_record: bool = False  # profd.record for TCP clients too (always for the stdio session)


class Session(Protocol):
    def report_ready(self, key: str, sources: list[str], report: T.Report) -> None: ...

    def republish(self) -> None: ...

    def unplaced(self, key: str) -> None: ...

    def log_error(self, text: str) -> None: ...

    def progress(self, token: str, title: Optional[str]) -> None: ...

    def progress_at(self, token: str, percentage: int, message: str) -> None: ...


class PathError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def line_sources(report: T.Report) -> list[str]:
    """The local files whose lines the report's findings and hot lines are shown on."""
    out = [loc.path for d in report.diagnostics for loc in [d.location, *d.related] if loc.line]
    return out + [h.path for h in report.hot_lines]


def shown_roots(workspace, path_map) -> list[str]:
    """The folders whose files may carry findings, hovers, lenses and edits: the workspace and
    the local sides of the path map (where the user said the sources are); a frame's file outside
    them stays unmapped (confine)."""
    return list(dict.fromkeys([*workspace, *(local for _, local in path_map)]))


# The source texts kept with a report (the baselines positions are mapped from): files of at
# most BASELINE_FILE_CHARS, BASELINE_CHARS in all; a larger one is mapped as it is now.
BASELINE_FILE_CHARS = 1 << 20
BASELINE_CHARS = 8 << 20


class Core:
    def __init__(self, cfg: Config, transport: str = "stdio"):
        self.cfg = cfg
        self.base = copy.deepcopy(cfg)  # as started; editor settings apply on top of it
        self.transport = transport
        self.sessions: set[Session] = set()
        self.meta: dict[str, Row] = {}
        self.by_source: dict[str, list[str]] = {}  # source path -> keys, oldest first
        self.trace_key: dict[str, str] = {}  # trace path -> key of its newest content
        self.inflight: dict[str, asyncio.Future] = {}
        self._busy_sizes: Counter = Counter()  # file sizes of analyses in flight
        self._unhashed: dict[int, list[asyncio.Future]] = {}  # size -> hashes still running
        self.analyses = 0
        self._rate = 0.0  # trace bytes analysed per second (an average), for progress estimates
        self.running = 0
        self.started = time.time()
        self.fp = options_fp(cfg.workspace, cfg.path_map, cfg.disabled, cfg.thresholds)
        self._cache = Lru()  # decoded reports, bounded in count and bytes
        # Reports made with one request's own options (profd/analyze {workspace, disabled, ...}):
        # kept for that client's repeats, never indexed, so no other client sees them.
        self._aside: OrderedDict[str, bytes] = OrderedDict()
        # Writes the store refused (disk full, read-only): served from memory, retried.
        self._unsaved: OrderedDict[tuple, tuple] = OrderedDict()
        self._retry: Optional[asyncio.TimerHandle] = None
        self.store_retry_s = 5.0
        self.store: Optional[Store] = None
        self.watcher: Optional[Watcher] = None
        self.intake: Optional[Intake] = None
        self._pool: Optional[WorkerPool] = None
        self._io = cf.ThreadPoolExecutor(max_workers=2, thread_name_prefix="profd-io")
        self.hasher = Hasher(self._io)
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._deferred = False  # the watcher waits for the editor's options (watch_now)
        # While reports under new options are on their way: the options fingerprint whose
        # reports are shown meanwhile (what is shown stays until its replacement is ready).
        self._fallback: Optional[str] = None
        self._settling: Optional[asyncio.Task] = None
        self._texts: OrderedDict[str, dict[str, tuple[str, ...]]] = OrderedDict()  # baselines
        # Reports with findings that could not be placed on a file here: key -> (trace path,
        # {frame base name: frame paths}); and the path maps found that would place them.
        self.unplaced: OrderedDict[str, tuple[str, dict[str, list[str]]]] = OrderedDict()
        self._maps: OrderedDict[str, Optional[list]] = OrderedDict()

    # ---- lifecycle --------------------------------------------------------------------------
    async def start(self, watch: bool = True) -> None:
        """Open the store, spawn the workers and (``watch``) watch the folder now; without it the
        folder is first scanned at ``watch_now()``: a stdio daemon waits for its editor's folders
        and settings, so the traces there are analysed once, under the options that will show
        them."""
        self.loop = asyncio.get_running_loop()
        private_dir(self.cfg.state)
        self.store = Store(os.path.join(self.cfg.state, "profd.sqlite3"))
        self._load_index()
        # The workers spawn and import the engine now, not on the first trace.
        mem = (self.cfg.analysis_mb << 20) or default_memory_budget(self.cfg.workers)
        self._pool = WorkerPool(self.cfg.workers, self.transport == "stdio",
                             self.cfg.analysis_timeout, mem)
        self.intake = Intake(self.loop, self._handle_watched, settle=self.cfg.settle,
                             quiet=self.cfg.quiet, workers=self.cfg.workers)
        self.intake.start()
        self._deferred = not watch
        if watch:
            self._watch()
        log.info("profd: %d reports loaded from %s", len(self.meta), self.store.path)

    def watch_now(self) -> None:
        """Start the watcher deferred by ``start(watch=False)`` (once; later calls do nothing)."""
        if self._deferred and self.loop is not None:
            self._deferred = False
            self._watch()

    @property
    def busy(self) -> bool:
        """Traces are queued or being analysed (or the folder is still to be scanned)."""
        return self._deferred or self.running > 0 or bool(self.intake and self.intake.queued)

    async def wait_for(self, source: str, timeout: float = 30.0) -> None:
        """Until a report shows on ``source`` or nothing is left to analyse (at most
        ``timeout`` s): what a pull that arrives before its report waits for."""
        deadline = time.monotonic() + timeout
        while self.busy and time.monotonic() < deadline and self.newest_for(source) is None \
                and source not in self.trace_key:
            await asyncio.sleep(0.05)

    def _watch(self) -> None:
        if self.watcher:
            self.watcher.stop()
            self.watcher = None
        if self.cfg.watch:
            self.watcher = Watcher(self.cfg.watch, self.loop, self.intake.notice,
                                   on_complete=functools.partial(self.intake.notice,
                                                                 complete=True))
            self.watcher.start()

    def configure(self, *, workspace: Optional[list[str]] = None,
                  path_map: Optional[list[tuple[str, str]]] = None,
                  disabled: Optional[set[str]] = None, watch: Optional[str] = None,
                  thresholds: Optional[dict[str, dict[str, float]]] = None) -> bool:
        """New options from the editor (``None``: keep). Reports made under the old ones stay
        stored (and come back if the options do); every watched trace is analysed again under
        the new ones. True when anything changed."""
        cfg = self.cfg
        before = (cfg.workspace, cfg.path_map, cfg.disabled, cfg.watch, cfg.thresholds)
        if workspace is not None:
            cfg.workspace = [os.path.abspath(w) for w in workspace]
        if path_map is not None:
            cfg.path_map = [(r, os.path.abspath(l)) for r, l in path_map]
        if disabled is not None:
            cfg.disabled = set(disabled)
        if watch is not None:
            cfg.watch = os.path.abspath(watch)
        if thresholds is not None:
            cfg.thresholds = {c: dict(kv) for c, kv in thresholds.items()}
        if (cfg.workspace, cfg.path_map, cfg.disabled, cfg.watch, cfg.thresholds) == before:
            return False
        old_fp, self.fp = self.fp, options_fp(cfg.workspace, cfg.path_map, cfg.disabled, cfg.thresholds)
        log.info("profd: options now workspace=%s path_map=%s disabled=%s watch=%s thresholds=%s",
                 cfg.workspace, cfg.path_map, sorted(cfg.disabled), cfg.watch, cfg.thresholds)
        if self.loop is not None and not self._deferred:
            if self._fallback is None and old_fp != self.fp:
                self._fallback = old_fp
            if cfg.watch != before[3]:
                self._watch()  # its start scans the folder
            elif self.watcher:
                self.watcher.scan(self.watcher.root)
            if self._settling is None or self._settling.done():
                self._settling = self.loop.create_task(self._options_settle())
        return True

    async def _options_settle(self) -> None:
        """Once the watched traces are analysed under the new options: stop showing the old
        options' reports and let every session republish (only what changed is sent)."""
        await asyncio.sleep(0.05)
        while self.busy:
            await asyncio.sleep(0.05)
        self._fallback = None
        for s in list(self.sessions):
            try:
                s.republish()
            except Exception:
                log.exception("profd: republishing to a session failed")

    async def stop(self) -> None:
        if self._retry:
            self._retry.cancel()
        if self.watcher:
            self.watcher.stop()
        if self.intake:
            await self.intake.stop()
        if self._pool:
            self._pool.close()
        self._io.shutdown(wait=False)
        if self.store:
            self.store.close()

    # ---- the index --------------------------------------------------------------------------
    def _load_index(self) -> None:
        try:
            rows, files = list(self.store.rows()), self.store.files()
        except sqlite3.DatabaseError as e:
            self.store.reset(e)
            rows, files = [], []
        for row in rows:
            self._index(row)
        for path, key in files:  # oldest first: the newest link wins, as it did
            if key in self.meta:
                self._index(self.meta[key], path)

    # ---- the store healing --------------------------------------------------------------------
    def _write(self, op: tuple) -> Optional[float]:
        """Run one store write (``("put", ...)`` or ``("link", ...)``); one the store refuses is
        kept and retried every few seconds (disk full, read-only file), and a corrupt store is
        moved aside and rebuilt from the watched files. The index in memory has the result
        either way."""
        kind = (op[0], op[2] if op[0] == "put" else op[1])  # put: its path; link: its path; texts: key
        self._unsaved.pop(kind, None)
        try:
            return getattr(self.store, op[0])(*op[1:])
        except sqlite3.DataError as e:  # this one row is over SQLite's limits: it alone is refused
            log.error("profd: the results store refused a write (%s of %s: %s); the other "
                      "reports are kept", op[0], kind[1], e)
            if op[0] == "put" and op[6] is None:
                err = (f"profd: the report of {op[2]} ({len(op[5])} bytes) is more than the "
                       f"results store takes ({e})")
                stub = T.encode(T.Report(trace=T.TraceInfo(path=op[2], sha256="", size_bytes=op[4]),
                                         error=err, profd_version=__version__))
                return self._write((*op[:5], stub, err, *op[7:]))
        except sqlite3.OperationalError as e:
            if not self._unsaved:
                log.error("profd: cannot write the results store %s (%s); keeping reports in "
                          "memory and retrying every %.0f s", self.store.path, e,
                          self.store_retry_s)
            self._unsaved[kind] = op
            if self._retry is None and self.loop is not None:
                self._retry = self.loop.call_later(self.store_retry_s, self._retry_writes)
        except sqlite3.DatabaseError as e:
            self._rebuild(e)
        return None

    def _retry_writes(self) -> None:
        self._retry = None
        for op in list(self._unsaved.values()):
            self._write(op)
            if self._retry is not None:  # still refused: the rest waits too
                return
        log.warning("profd: the results store is writable again; all reports saved")

    def _rebuild(self, why: BaseException) -> None:
        """The store is corrupt: move it aside, start empty, and analyse the watched files again."""
        self.store.reset(why)
        self.meta.clear()
        self.by_source.clear()
        self.trace_key.clear()
        self._cache.clear()
        self._unsaved.clear()
        if self.watcher:
            self.watcher.scan(self.watcher.root)

    def _undecodable(self, key: str, why: BaseException) -> None:
        """A stored report that does not decode: forget it and analyse its trace(s) again."""
        log.error("profd: the stored report %s does not decode (%s); analysing its trace again",
                  key[:16], why)
        paths = {p for p, k in self.trace_key.items() if k == key}
        try:
            self.store.drop(key)
        except sqlite3.DatabaseError as e:
            self._rebuild(e)
            return
        self.meta.pop(key, None)
        for keys in self.by_source.values():
            if key in keys:
                keys.remove(key)
        for p in paths:
            del self.trace_key[p]
            if self.intake:
                self.intake.notice(p)

    def _index(self, row: Row, path: Optional[str] = None) -> None:
        """``row`` is the newest report for its sources and for the trace at ``path`` (default:
        the path it was analysed under; another one when the same content came back there or
        arrived under another name)."""
        self.meta[row.key] = row
        path = path or row.path
        for s in self._sources_at(row.key, path):
            keys = self.by_source.setdefault(s, [])
            if row.key in keys:
                keys.remove(row.key)
            keys.append(row.key)
        self.trace_key[path] = row.key

    # ---- the texts reports were made against ------------------------------------------------
    def _keep_texts(self, key: str, sources: list[str]) -> None:
        """Keep the text of each source as the analysis of ``key`` read it (warmed right after
        it, in _analyse): the baseline its positions are mapped from after the user edits."""
        texts, room = {}, BASELINE_CHARS
        for s in sources:  # a "source" of megabytes is not one a user edits (any file can be named)
            n = text_chars(SOURCES.lines(s))
            if SOURCES.isfile(s) and n <= min(room, BASELINE_FILE_CHARS):
                texts[s], room = SOURCES.lines(s), room - n
        self._texts[key] = texts
        self._texts.move_to_end(key)
        while len(self._texts) > 16:
            self._texts.popitem(last=False)
        if texts:
            self._write(("put_texts", key, {p: "".join(ln + "\n" for ln in t) for p, t in texts.items()}))

    def baseline(self, key: str, path: str) -> Optional[tuple[str, ...]]:
        """The text of ``path`` that report ``key`` was made against; None when not kept (a
        report stored before texts were)."""
        texts = self._texts.get(key)
        if texts is None:
            try:
                raw = self.store.texts(key) if self.store else {}
            except sqlite3.Error:
                raw = {}
            texts = self._texts[key] = {p: tuple(split_lines(t)) for p, t in raw.items()}
            while len(self._texts) > 16:
                self._texts.popitem(last=False)
        else:
            self._texts.move_to_end(key)
        return texts.get(path)

    def _link(self, path: str, key: str, sig: Sig) -> None:
        """The file at ``path`` now holds the content of the stored report ``key``."""
        self._write(("link", path, key, sig[1] / 1e9, sig[0], *sig[2:4]))
        self._index(self.meta[key], path)
        for s in list(self.sessions):
            try:
                s.report_ready(key, self._sources_at(key, path), self.report_at(key, path))
            except Exception:
                log.exception("profd: notifying a session failed")

    def _sources_at(self, key: str, path: str) -> list[str]:
        """The report's sources with the trace at ``path`` (the same content under its name)."""
        row = self.meta[key]
        return [path if s == row.path else s for s in row.sources]

    def report_at(self, key: str, path: str) -> Optional[T.Report]:
        """The report of ``key`` as the trace at ``path`` has it (a relabelled copy for a second
        name; the cached object itself for the first)."""
        r = self.report(key)
        if r is None or path == r.trace.path:
            return r
        return relabel(T.decode_report(T.encode(r)), path)

    def report(self, key: str) -> Optional[T.Report]:
        r = self._cache.get(key)
        if r is not None:
            return r
        unsaved = self._unsaved.get(("put", self.meta[key].path)) if key in self.meta else None
        try:
            data = unsaved[5] if unsaved and unsaved[1] == key else self.store.get(key)
            if data is None:
                return None
            r = T.decode_report(data)
        except sqlite3.DataError as e:  # this row alone (over this SQLite's limits): not the store
            self._undecodable(key, e)
            return None
        except sqlite3.DatabaseError as e:
            self._rebuild(e)
            return None
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            self._undecodable(key, e)
            return None
        self._cache.put(key, r, len(data))
        return r

    def keys_for(self, source: str) -> list[str]:
        """Keys of the reports shown on ``source`` under the current options, oldest first
        (while reports under new options are on their way, the old options' ones where the new
        ones are not in yet)."""
        for fp in (self.fp, self._fallback):
            if fp is None:
                continue
            tail = ":" + fp
            keys = [k for k in self.by_source.get(source, ()) if k.endswith(tail) and k in self.meta]
            if keys:
                return sorted(keys, key=lambda k: self.meta[k].order())
        return []

    def current_fp(self, key: str) -> bool:
        """Whether report ``key`` was made under the options shown now."""
        return key.endswith(":" + self.fp) or bool(self._fallback and key.endswith(":" + self._fallback))

    def newest_for(self, source: str) -> Optional[str]:
        keys = self.keys_for(source)
        return keys[-1] if keys else None

    def previous_for(self, source: str) -> Optional[str]:
        """The report before the newest one on ``source`` (a trace of the same program)."""
        keys = self.keys_for(source)
        return keys[-2] if len(keys) > 1 else None

    def diagnostics_for(self, source: str, lines_of=None, transform=None
                        ) -> tuple[Optional[str], list[T.Diagnostic]]:
        """For a trace file: its current content's trace-level findings (or its error); for a
        source file: the findings on it of the newest report that touches it. ``transform(key,
        findings)``: the findings moved onto the text a client shows (positions.Positions), whose
        lines ``lines_of(path)`` gives (default: the files as last read)."""
        cur = self.trace_key.get(source)
        if cur and not self.current_fp(cur):  # made under options no longer in force
            cur = None
        key = cur or self.newest_for(source)
        r = self.report_at(key, source) if cur else self.report(key) if key else None
        if r is None:
            return key, []
        if r.error:
            return key, [T.Diagnostic(code="bad-trace", severity="error", message=r.error,
                                      location=T.Location(path=source))] if cur else []
        trace_path = r.trace.path
        sources = self._sources_at(key, trace_path)
        here = [d for d in r.diagnostics if placed_path(d.location, trace_path, sources) == source]
        # The engine dropped what the source's comments suppressed when the report was made; a
        # `# profd: ignore[...]` added since takes effect at the next publish or pull (the same module).
        from ..engine import suppress

        if transform is not None:
            here = transform(key, here)
        here = suppress.apply(here, lines_of or SOURCES.lines)[0]
        if cur and UNMAPPED not in self.cfg.disabled:  # a rule like the others: --disable/ignore know it
            hint = self.unmapped_hint(key, source)
            if hint is not None:
                here.append(hint)
        return key, here

    # ---- findings that could not be placed -------------------------------------------------
    def unmapped_hint(self, key: str, trace_path: str) -> Optional[T.Diagnostic]:
        """The ``unmapped-source`` finding of report ``key`` as the trace at ``trace_path`` has
        it (None when every frame maps), suggesting a path map that works once the workspace was
        searched for the files it names (``_search``, started here the first time)."""
        r = self.report_at(key, trace_path)
        if r is None or r.error:
            return None
        sources = self._sources_at(key, trace_path)
        if key not in self._maps:
            paths = unmapped_paths(r, sources)
            self._maps[key] = None if paths else []
            if paths:
                names: dict[str, list[str]] = {}
                for p in paths:
                    names.setdefault(os.path.basename(p), []).append(p)
                self.unplaced[key] = (trace_path, names)
                if self.loop is not None:
                    self.loop.create_task(self._search(key, paths))
            while len(self._maps) > 256:
                self.unplaced.pop(self._maps.popitem(last=False)[0], None)
        return unmapped_hint(r, trace_path, sources, self.cfg.workspace, self._maps.get(key) or None)

    async def _search(self, key: str, paths: list[str]) -> None:
        """Look in the workspace for the files an unplaced report names (off the loop), keep the
        path maps that would place them, and let every session tell its user."""
        from ..engine.sourcemap import SourceMap

        roots = list(self.cfg.workspace)
        try:
            maps = await self.io(lambda: suggest_maps(paths, SourceMap(roots).files_named))
        except Exception:  # a workspace that cannot be walked: the hint keeps its generic map
            log.exception("profd: looking for the files of %s failed", key[:16])
            maps = []
        if key in self._maps:
            self._maps[key] = maps
        for s in list(self.sessions):
            try:
                s.unplaced(key)
            except Exception:
                log.exception("profd: telling a session about unplaced findings failed")

    def hot_lines_for(self, source: str) -> tuple[Optional[str], list[T.HotLine]]:
        key = self.newest_for(source)
        r = self.report(key) if key else None
        if r is None:
            return key, []
        return key, [h for h in r.hot_lines if h.path == source]

    def entries(self, path: Optional[str] = None) -> list[M.ReportEntry]:
        out = []
        for row in self.meta.values():
            if path and row.path != path and path not in row.sources and \
                    self.trace_key.get(path) != row.key:
                continue
            named = path if path and self.trace_key.get(path) == row.key else row.path
            out.append(M.ReportEntry(key=row.key, path=named, mtime=row.mtime, size=row.size,
                                     created=row.created, error=row.error, sources=row.sources,
                                     newest=self.trace_key.get(named) == row.key))
        return out

    def status(self) -> M.StatusResult:
        running = self.running
        return M.StatusResult(version=__version__, pid=os.getpid(), transport=self.transport,
                              watch=self.cfg.watch, workspace=self.cfg.workspace,
                              reports=len(self.meta),
                              queued=self.intake.queued if self.intake else 0, running=running,
                              analyses=self.analyses, sessions=len(self.sessions),
                              uptime_s=round(time.time() - self.started, 3))

    # ---- analysis ---------------------------------------------------------------------------
    async def _run(self, key: str, path: str, size: int, workspace, path_map, disabled, thresholds,
                   hsig: Optional[Sig] = None) -> tuple[bytes, Optional[tuple[str, Sig]]]:
        """Analyse once per key: concurrent callers of the same content share one run. ``hsig``:
        the signature of the file ``key`` was hashed from. (report, (key it is the report of,
        signature of that file)), the second None when that cannot be told (see _made_from); a
        caller sharing another's run gets its report only when it is of ``key``."""
        fut = self.inflight.get(key)
        if fut is not None:
            data, made = await asyncio.shield(fut)
            return data, ((key, hsig) if made is not None and made[0] == key else None)
        fut = self.loop.create_future()
        self.inflight[key] = fut
        try:
            return await self._share(fut, path, key, hsig,
                                     self._analyse(path, size, workspace, path_map, disabled,
                                                   thresholds))
        finally:
            if self.inflight.get(key) is fut:
                del self.inflight[key]

    async def _share(self, fut: asyncio.Future, path: str, key: str, hsig: Optional[Sig],
                     job) -> tuple[bytes, Optional[tuple[str, Sig]]]:
        """Await ``job`` (an analysis of ``path``), tell what content it read, and hand the
        result to every caller waiting on ``fut``."""
        try:
            data, read = await job
            made = await self._made_from(path, key, hsig, read)
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e)
                fut.exception()  # mark retrieved
            raise
        if not fut.done():
            fut.set_result((data, made))
        return data, made

    async def _made_from(self, path: str, key: str, hsig: Optional[Sig],
                         read: Optional[Sig]) -> Optional[tuple[str, Sig]]:
        """The content an analysis of ``path`` read, as (key, signature): ``key`` when it read the
        very file that was hashed; when the file was replaced in between and the analysis read the
        file that is there now, that file's key (hashed again: a few ms); else None (replaced
        while being read: nobody can tell what it read)."""
        if read is None:
            return None
        if same_file(read, hsig):
            return key, hsig
        again = await self.hasher.hash(path)
        if again is None or not same_file(again[1], read):
            log.info("profd: %s was replaced while it was read; looking at it again", path)
            return None
        return f"{again[0]}:{key.split(':', 1)[1]}", again[1]

    async def _run_new(self, path: str, sig: Sig) -> Optional[tuple[str, bytes,
                                                                    Optional[tuple[str, Sig]]]]:
        """Analyse a watched file whose content cannot have been seen (no report and no analysis
        in flight has its size): the analysis starts at once and the file is hashed beside it,
        so the hash (~0.7 s per GB) is not on the way to the diagnostics. (key, data, what the
        report is of: see _run), or None when the file went away or turned out to be a repeat
        after all."""
        cfg, size, fp = self.cfg, sig[0], self.fp  # the options as they are now, for the key
        fut = self.loop.create_future()
        job = asyncio.ensure_future(self._analyse(path, size, cfg.workspace, cfg.path_map,
                                                  cfg.disabled, cfg.thresholds))
        job.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved if dropped
        hashing = asyncio.ensure_future(self.hasher.hash_beside(path, size))
        self._unhashed.setdefault(size, []).append(hashing)
        try:
            hashed = await hashing
        finally:
            waiting = self._unhashed.get(size, [])
            if hashing in waiting:
                waiting.remove(hashing)
            if not waiting:
                self._unhashed.pop(size, None)
        if hashed is None:
            return None  # gone: the analysis finishes unused
        sha, hsig = hashed
        key = f"{sha}:{fp}"
        if self._known(key):  # committed meanwhile under another name
            self._link(path, key, hsig)
            return None
        mine = key not in self.inflight
        if mine:  # a repeat arriving now joins this run
            self.inflight[key] = fut
        try:
            data, made = await self._share(fut, path, key, hsig, job)
            return key, data, made
        finally:
            if mine and self.inflight.get(key) is fut:
                del self.inflight[key]

    def _known(self, key: str) -> bool:
        """Whether content ``key`` has its report: any report, except a budget's error made under
        a smaller budget than the daemon has now (raising --analysis-mb or --analysis-timeout
        tries those again, once)."""
        row = self.meta.get(key)
        if row is None:
            return False
        m = BUDGET.search(row.error) if row.error else None
        if m is None:
            return True
        now = self._pool.mem_bytes >> 20 if m[2] == "MB memory" else self.cfg.analysis_timeout
        return int(m[1]) >= now

    def _may_repeat(self, size: int) -> bool:
        """Could a file of ``size`` bytes hold content already reported or being analysed?"""
        return size in self._busy_sizes or size in self._unhashed or \
            any(r.size == size for r in self.meta.values())

    async def _analyse(self, path: str, size: int, workspace, path_map,
                       disabled, thresholds) -> tuple[bytes, Optional[Sig]]:
        """(report, signature of the file the worker read, None when it changed under it)."""
        token = f"profd-analyze-{os.path.basename(path)[:32]}-{time.monotonic_ns()}"
        for s in list(self.sessions):
            s.progress(token, f"profd: analysing {os.path.basename(path)}")
        ticker = self.loop.create_task(self._progress(token, size))
        self.running += 1
        self._busy_sizes[size] += 1
        t0 = time.time()
        try:
            data, wall, cpu, start, read = await self._submit(path, workspace, path_map, disabled,
                                                              thresholds)
            # The lines its findings sit on, read now (off the loop): while this analysis is still
            # in flight, so a repeat of its content joins it instead of starting another.
            await SOURCES.warm([*line_sources(T.decode_report(data)),
                                *shown_roots(workspace, path_map)])
            self.analyses += 1
            if wall > 0.05:  # what the next analyses' progress is estimated from
                self._rate = 0.5 * self._rate + 0.5 * (size / wall) if self._rate else size / wall
            t1 = time.time()
            log.info("profd: analysed %s (%d bytes): %.3f s in the worker (CPU %.3f s), "
                     "%.3f s from submit (started after %.3f s, back %.3f s after its end)",
                     path, size, wall, cpu, t1 - t0, start - t0, t1 - start - wall)
            return data, read
        finally:
            self.running -= 1
            self._busy_sizes[size] -= 1
            if self._busy_sizes[size] <= 0:
                del self._busy_sizes[size]
            ticker.cancel()
            for s in list(self.sessions):
                s.progress(token, None)

    async def _progress(self, token: str, size: int, every: float = 0.25) -> None:
        """``$/progress`` reports while one analysis runs: the share done, estimated from the
        bytes per second of the analyses before it (the worker cannot say how far it is), held
        below 100% until the result is in."""
        t0, last = time.monotonic(), -1
        while True:
            await asyncio.sleep(every)
            rate = self._rate or 4e6  # bytes/s before any analysis was timed (a 1 MB gz: ~0.3 s)
            pct = min(95, int(100 * (time.monotonic() - t0) * rate / max(1, size)))
            if pct != last:
                last = pct
                for s in list(self.sessions):
                    s.progress_at(token, pct, f"~{pct}% of {size / 1e6:.1f} MB (estimated)")

    async def _submit(self, path, workspace, path_map, disabled, thresholds
                      ) -> tuple[bytes, float, float, float, Optional[Sig]]:
        try:
            return await self._pool.run(analyze_task, path, list(workspace),
                                        [list(p) for p in path_map], sorted(disabled), thresholds)
        except Budget as e:
            log.error("profd: %s: %s", path, e)
            report = T.Report(trace=T.TraceInfo(path=path, sha256="", size_bytes=0),
                              error=f"profd: bad trace {path}: {e}")
            return T.encode(report), 0.0, 0.0, time.time(), await self.io(signature, path)

    async def run_in_worker(self, fn, *args):
        """Other work on a trace (annotating it) in an analysis process, under the same budgets;
        Budget when it was ended."""
        return await self._pool.run(fn, *args)

    def _commit(self, key: str, path: str, sig: Sig, data: bytes, report: T.Report,
                current: bool = True) -> None:
        """Store the report of content ``key``, read from ``path`` as ``sig``; ``current``: the
        file there still holds it (else the report is kept for that content alone: no path
        points at it, nothing is published, and the next file with that content links to it)."""
        if self._known(key) and self.meta[key].path != path:  # committed meanwhile under
            if current:                                          # another name: the same content
                self._link(path, key, sig)
            return
        roots = shown_roots(self.cfg.workspace, self.cfg.path_map)  # only files inside are shown on
        sources = local_sources(report, path, lambda p: SOURCES.local(p, roots))  # warmed by _analyse
        size, mtime_ns = sig[0], sig[1]
        rec = report.trace.recorded_us / 1e6 if report.trace.recorded_us is not None else None
        created = self._write(("put", key, path, mtime_ns / 1e9, size, data, report.error,
                               sources, rec, *sig[2:4])) or time.time()
        self._keep_texts(key, [s for s in sources if s != path])
        row = Row(key, path, mtime_ns / 1e9, size, report.error, sources, created, rec)
        self._cache.put(key, report, len(data))
        if not current:
            self.meta[key] = row
            return
        self._index(row)
        self.unmapped_hint(key, path)  # starts the search for what its frames name
        if report.error:
            log.error("%s", report.error)
        for s in list(self.sessions):
            try:
                s.report_ready(key, sources, report)
                if report.error:
                    s.log_error(report.error)
            except Exception:
                log.exception("profd: notifying a session failed")

    async def _handle_watched(self, path: str, sig: Sig) -> Optional[Outcome]:
        if not inside(path, self.cfg.watch):  # became a symlink out of the folder meanwhile
            return None
        known = self.store.known_file(path, sig[1] / 1e9, sig[0], *sig[2:4])
        if known and known.endswith(":" + self.fp) and self._known(known):
            return None
        why = await self.io(refusal, path, self._pool.mem_bytes)
        if why is not None:  # not hashed: keyed by its signature, an error report said at once
            key = "sig-%d-%d-%d-%d:%s" % (*sig[:4], self.fp)
            if self._known(key):
                return None
            report = self._refused(path, sig[0], why)
            return Outcome(ok=False, sig=sig, commit=functools.partial(
                self._commit, key, path, sig, T.encode(report), report))
        size, cfg, fp = sig[0], self.cfg, self.fp
        opts = (cfg.workspace, cfg.path_map, cfg.disabled, cfg.thresholds)  # configure() replaces, never mutates
        if not self._may_repeat(size):
            got = await self._run_new(path, sig)
            if got is None:
                return None
            key, data, made = got
        else:
            hashed = await self.hasher.hash(path)
            if hashed is None:
                return None
            sha, hsig = hashed
            for t in list(self._unhashed.get(size, ())):  # a same-size file hashed beside its
                await asyncio.wait([t])                   # analysis: let it register its key
            key = f"{sha}:{fp}"
            if self._known(key):  # same content again (here or under another name): costs nothing
                self._link(path, key, hsig)
                return None
            data, made = await self._run(key, path, size, *opts, hsig=hsig)
        if made is None:  # the file was replaced while read: nothing is known of it, look again
            return Outcome(ok=False, commit=None)
        key, hsig = made
        report = relabel(T.decode_report(data), path)
        data_out = data if report.error is None else T.encode(report)
        commit = functools.partial(self._commit, key, path, hsig, data_out, report)
        # The report is of the content ``key`` (the file ``hsig``), whatever the path holds by now:
        # a file replaced again after it was read keeps the work done for that content.
        ok = report.error is None
        return Outcome(ok=ok, commit=commit, sig=hsig,
                       keep=functools.partial(commit, current=False) if ok else None)

    # ---- profd/analyze ----------------------------------------------------------------------
    def sources_changed(self, key: str) -> bool:
        """Whether a source file the report points at changed after it was made (as last read:
        ``await SOURCES.warm(row.sources)`` first): its findings' lines, columns and inline
        suppressions (``# profd: ignore[...]``) come from the sources."""
        row = self.meta[key]
        return any((SOURCES.mtime(src) or 0.0) > row.created for src in row.sources)

    def roots(self) -> list[str]:
        if self.cfg.allow:
            return list(self.cfg.allow)
        return [r for r in [self.cfg.watch, *self.cfg.workspace] if r]

    def check_path(self, path: str) -> str:
        """The real path of ``path`` if it lies under a root (symlinks resolved), else PathError."""
        if isinstance(path, str) and path.startswith("file://"):
            from urllib.parse import unquote, urlparse
            path = unquote(urlparse(path).path)
        if not isinstance(path, str) or not path or "\0" in path:
            raise PathError(-32602, f"profd: analyze wants a path, got {shown(path)}")
        if not os.path.isabs(path):
            raise PathError(-32602, f"profd: analyze wants an absolute path, got {shown(path)}")
        real = confine.real(path)
        if real is None or not confine.within(real, self.roots()):
            raise PathError(M.ERR_FORBIDDEN_PATH,
                            f"profd: {shown(path)} is outside the watched folder and workspace roots")
        if not os.path.isfile(real):
            raise PathError(M.ERR_NOT_FOUND, f"profd: no such file: {shown(path)}")
        return real

    async def io(self, fn, *args):
        """``fn(*args)`` on the daemon's I/O threads: a stat or a path lookup never runs on the
        loop (a hung mount stalls that thread, not every client)."""
        return await self.loop.run_in_executor(self._io, fn, *args)

    def _refused(self, path: str, size: int, why: str) -> T.Report:
        log.warning("profd: %s: %s", path, why)
        return T.Report(trace=T.TraceInfo(path=path, sha256="", size_bytes=size),
                        error=f"profd: bad trace {path}: {why}", profd_version=__version__)

    async def analyze(self, p: M.AnalyzeParams) -> T.Report:
        real = await self.io(self.check_path, p.path)
        why = await self.io(refusal, real, self._pool.mem_bytes)
        if why is not None:
            sig = await self.io(signature, real)
            return self._refused(p.path, sig[0] if sig else 0, why)
        cfg = self.cfg
        ws = [os.path.abspath(w) for w in p.workspace] if p.workspace is not None else cfg.workspace
        pm = [tuple(x) for x in p.path_map] if p.path_map is not None else cfg.path_map
        dis = set(p.disabled) if p.disabled is not None else cfg.disabled
        th = cfg.thresholds
        fp = options_fp(ws, pm, dis, th)
        hashed = await self.hasher.hash(real)
        if hashed is None:
            raise PathError(M.ERR_NOT_FOUND, f"profd: no such file: {p.path}")
        sha, sig = hashed
        key = f"{sha}:{fp}"
        if key in self.meta:
            await SOURCES.warm(self.meta[key].sources)
        stale = key in self.meta and (self.sources_changed(key) or not self._known(key))
        if key in self.meta and not stale and self.report(key) is not None:
            return self.report_at(key, p.path)
        if fp != self.fp:  # this request's own options: its result is this client's alone
            data = self._aside.get(key)
            if data is None:
                data, made = await self._run(key, real, sig[0], ws, pm, dis, th, hsig=sig)
                if made is not None:
                    self._aside[made[0]] = data
                while len(self._aside) > 32:
                    self._aside.popitem(last=False)
            return relabel(T.decode_report(data), p.path)
        data, made = await self._run(key, real, sig[0], ws, pm, dis, th, hsig=sig)
        if made is not None and (made[0] != key or key not in self.meta or stale):
            report = relabel(T.decode_report(data), real)  # what was read, under its own key
            self._commit(made[0], real, made[1], T.encode(report) if report.error else data, report)
        return relabel(T.decode_report(data), p.path)
