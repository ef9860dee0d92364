"""The daemon's shared core: one index, one worker pool, one watcher, many LSP sessions.

A thin composition of the rooms, each with its own module: the analysis processes
(``pool.WorkerPool``: the event loop never parses a trace, so hovers and status answer at once
while a large trace is read), the content hash (``hashing``), one analysis per content at a time
(``dedupe``), the stored reports and which one each file shows (``index.ReportIndex``), the source
text (``sources.SOURCES``) and the watched folder (``watcher``). What stays here is the sequence
that joins them (a watched file or a profd/analyze request -> hash -> analyse -> store -> tell
every session), the options in force, and the findings no file here could place.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import copy
import functools
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional, Protocol

import msgspec

from ... import __version__
from ...protocol import methods as M
from ...protocol import types as T
from ...protocol.job import RankSummary
from ...protocol.options import AnalysisOptions
from ..engine import Options, apply_suppressions
from . import confine
from .confine import shown
from .dedupe import Analysis, Dedupe, Made
from .hashing import Hasher
from .index import ReportIndex, options_fp, relabel
from .placement import UNMAPPED, local_sources, placed_path
from .pool import BUDGET, Budget, TaskResult, WorkerPool, analyze_task, default_memory_budget, summarize_task
from .sources import SOURCES
from .store import private_dir
from .unplaced import UnplacedFindings
from .watcher import Intake, Outcome, Sig, Watcher, inside, refusal, signature

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
    library_lines: bool = False  # hot lines on library lines too (a request can ask for it)

    def options(self) -> Options:
        """The engine's options of the analyses of the watched folder (the daemon's own)."""
        return Options(
            workspace=list(self.workspace),
            path_map=list(self.path_map),
            disabled=set(self.disabled),
            thresholds={c: dict(kv) for c, kv in self.thresholds.items()},
            library_lines=self.library_lines,
        )


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
        self.index = ReportIndex(options_fp(cfg.options()), on_reset=self._rescan, on_lost=self._notice)
        # Rank summaries made beside their reports (by (report sha256, options fingerprint)): a
        # multi-rank profd/analyzeRank takes them from here, not from another analysis.
        self._summaries: OrderedDict[tuple[str, str], RankSummary] = OrderedDict()
        self.analyses = 0
        self._rate = 0.0  # trace bytes analysed per second (an average), for progress estimates
        self.running = 0
        self.started = time.time()
        # Reports made with one request's own options (profd/analyze {workspace, disabled, ...}):
        # kept for that client's repeats, never indexed, so no other client sees them.
        self._aside: OrderedDict[str, bytes] = OrderedDict()
        self.watcher: Optional[Watcher] = None
        self.intake: Optional[Intake] = None
        self._pool: Optional[WorkerPool] = None
        self._io = cf.ThreadPoolExecutor(max_workers=2, thread_name_prefix="profd-io")
        self.hasher = Hasher(self._io)
        self.dedupe = Dedupe(self.hasher)
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._deferred = False  # the watcher waits for the editor's options (watch_now)
        self._settling: Optional[asyncio.Task] = None
        # Reports with findings that could not be placed on a file here: key -> (trace path,
        # {frame base name: frame paths}); and the path maps found that would place them.
        self.unplaced = UnplacedFindings(
            self.index,
            lambda: self.cfg.workspace,
            self.io,
            lambda key: self._notify("unplaced", key),
            lambda: self.loop,
        )

    # ---- lifecycle --------------------------------------------------------------------------
    async def start(self, watch: bool = True) -> None:
        """Open the store, spawn the workers and (``watch``) watch the folder now; without it the
        folder is first scanned at ``watch_now()``: a stdio daemon waits for its editor's folders
        and settings, so the traces there are analysed once, under the options that will show
        them."""
        self.loop = asyncio.get_running_loop()
        private_dir(self.cfg.state)
        self.index.open(os.path.join(self.cfg.state, "profd.sqlite3"), self.loop)
        # The workers spawn and import the engine now, not on the first trace.
        mem = (self.cfg.analysis_mb << 20) or default_memory_budget(self.cfg.workers)
        self._pool = WorkerPool(self.cfg.workers, self.transport == "stdio", self.cfg.analysis_timeout, mem)
        self.intake = Intake(
            self.loop,
            self._handle_watched,
            settle=self.cfg.settle,
            quiet=self.cfg.quiet,
            workers=self.cfg.workers,
        )
        self.intake.start()
        self._deferred = not watch
        if watch:
            self._watch()
        log.info("profd: %d reports loaded from %s", len(self.index), self.index.store.path)

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
        while (
            self.busy
            and time.monotonic() < deadline
            and self.index.newest_for(source) is None
            and self.index.key_of_trace(source) is None
        ):
            await asyncio.sleep(0.05)

    def _watch(self) -> None:
        if self.watcher:
            self.watcher.stop()
            self.watcher = None
        if self.cfg.watch:
            self.watcher = Watcher(
                self.cfg.watch,
                self.loop,
                self.intake.notice,
                on_complete=functools.partial(self.intake.notice, complete=True),
            )
            self.watcher.start()

    def configure(
        self,
        *,
        workspace: Optional[list[str]] = None,
        path_map: Optional[list[tuple[str, str]]] = None,
        disabled: Optional[set[str]] = None,
        watch: Optional[str] = None,
        thresholds: Optional[dict[str, dict[str, float]]] = None,
    ) -> bool:
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
        old_fp = self.fp
        self.index.shown_fp = options_fp(cfg.options())
        log.info(
            "profd: options now workspace=%s path_map=%s disabled=%s watch=%s thresholds=%s",
            cfg.workspace,
            cfg.path_map,
            sorted(cfg.disabled),
            cfg.watch,
            cfg.thresholds,
        )
        if self.loop is not None and not self._deferred:
            if self.index.fallback_fp is None and old_fp != self.fp:
                self.index.fallback_fp = old_fp
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
        self.index.fallback_fp = None
        self._notify("republish")

    async def stop(self) -> None:
        if self.watcher:
            self.watcher.stop()
        if self.intake:
            await self.intake.stop()
        if self._pool:
            self._pool.close()
        self._io.shutdown(wait=False)
        self.index.close()

    @property
    def fp(self) -> str:
        """The fingerprint of the options in force (the second half of a report's key)."""
        return self.index.shown_fp

    def _rescan(self) -> None:
        """The store was reset (corrupt): analyse the watched files again."""
        if self.watcher:
            self.watcher.scan(self.watcher.root)

    def _notice(self, path: str) -> None:
        """A trace's stored report was lost: analyse it again."""
        if self.intake:
            self.intake.notice(path)

    def _notify(self, what: str, *args) -> None:
        """``session.<what>(*args)`` for every session; one that fails is logged, not the others'
        concern."""
        for s in list(self.sessions):
            try:
                getattr(s, what)(*args)
            except Exception:
                log.exception("profd: %s to a session failed", what)

    def diagnostics_for(
        self, source: str, lines_of=None, transform=None
    ) -> tuple[Optional[str], list[T.Diagnostic]]:
        """For a trace file: its current content's trace-level findings (or its error); for a
        source file: the findings on it of the newest report that touches it. ``transform(key,
        findings)``: the findings moved onto the text a client shows (positions.Positions), whose
        lines ``lines_of(path)`` gives (default: the files as last read)."""
        index = self.index
        cur = index.key_of_trace(source)
        if cur and not index.shown(cur):  # made under options no longer in force
            cur = None
        key = cur or index.newest_for(source)
        r = index.report_at(key, source) if cur else index.report(key)
        if r is None:
            return key, []
        if r.error:
            return key, [
                T.Diagnostic(
                    code="bad-trace", severity="error", message=r.error, location=T.Location(path=source)
                )
            ] if cur else []
        trace_path = r.trace.path
        sources = index.sources_at(key, trace_path)
        here = [d for d in r.diagnostics if placed_path(d.location, trace_path, sources) == source]
        # The engine dropped what the source's comments suppressed when the report was made; a
        # `# profd: ignore[...]` added since takes effect at the next publish or pull (the same code).
        if transform is not None:
            here = transform(key, here)
        here = apply_suppressions(here, lines_of or SOURCES.lines)[0]
        if cur and UNMAPPED not in self.cfg.disabled:  # a rule like the others: --disable/ignore know it
            hint = self.unplaced.hint(key, source)
            if hint is not None:
                here.append(hint)
        return key, here

    def hot_lines_for(self, source: str) -> tuple[Optional[str], list[T.HotLine]]:
        key = self.index.newest_for(source)
        r = self.index.report(key)
        if r is None:
            return key, []
        return key, [h for h in r.hot_lines if h.path == source]

    def status(self) -> M.StatusResult:
        running = self.running
        return M.StatusResult(
            version=__version__,
            pid=os.getpid(),
            transport=self.transport,
            watch=self.cfg.watch,
            workspace=self.cfg.workspace,
            reports=len(self.index),
            queued=self.intake.queued if self.intake else 0,
            running=running,
            analyses=self.analyses,
            discarded=self.dedupe.discarded,
            sessions=len(self.sessions),
            uptime_s=round(time.time() - self.started, 3),
        )

    # ---- analysis ---------------------------------------------------------------------------
    async def _analyze_unseen(self, path: str, sig: Sig) -> Optional[tuple[str, bytes, Made]]:
        """Analyse a watched file whose content cannot have been seen (no report and no analysis
        in flight has its size): the analysis starts at once and the file is hashed beside it,
        so the hash (~0.7 s per GB) is not on the way to the diagnostics. (key, data, what the
        report is of: see _analyze_once), or None when the file went away or turned out to be a
        repeat after all."""
        cfg, size, fp = self.cfg, sig[0], self.fp  # the options as they are now, for the key
        task = asyncio.ensure_future(self._analyze_in_worker(path, size, cfg.options()))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved if dropped
        hashed = await self.dedupe.hash_beside(path, size)
        if hashed is None:
            task.add_done_callback(self.dedupe.unused)  # gone: the analysis finishes unused
            return None
        sha, hsig = hashed
        key = f"{sha}:{fp}"
        if self._known(key):  # committed meanwhile under another name (or replaced by it
            self._link(path, key, hsig)  # after the analysis opened the file: A -> B -> A)
            task.add_done_callback(self.dedupe.unused)
            return None
        data, made = await self.dedupe.adopt(key, path, hsig, task)  # a repeat from now joins it
        return key, data, made

    async def _analyze_once(
        self, key: str, path: str, size: int, opts: Options, *, hsig: Sig
    ) -> tuple[bytes, Made]:
        """Analyse once per key: concurrent callers of the same content share one run
        (Dedupe.run). ``hsig``: the signature of the file ``key`` was hashed from. (report, (key
        it is the report of, signature of that file)), the second None when that cannot be told."""
        return await self.dedupe.run(key, path, hsig, lambda: self._analyze_in_worker(path, size, opts))

    def _known(self, key: str) -> bool:
        """Whether content ``key`` has its report: any report, except a budget's error made under
        a smaller budget than the daemon has now (raising --analysis-mb or --analysis-timeout
        tries those again, once)."""
        row = self.index.row(key)
        if row is None:
            return False
        m = BUDGET.search(row.error) if row.error else None
        if m is None:
            return True
        now = self._pool.mem_bytes >> 20 if m[2] == "MB memory" else self.cfg.analysis_timeout
        return int(m[1]) >= now

    def _may_repeat(self, size: int) -> bool:
        """Could a file of ``size`` bytes hold content already reported or being analysed?"""
        return self.dedupe.may_repeat(size) or self.index.has_size(size)

    async def _analyze_in_worker(self, path: str, size: int, opts: Options) -> Analysis:
        """One analysis of ``path`` in the pool, told as progress to every session: (report,
        signature of the file the worker read, None when it changed under it)."""
        token = f"profd-analyze-{os.path.basename(path)[:32]}-{time.monotonic_ns()}"
        for s in list(self.sessions):
            s.progress(token, f"profd: analysing {os.path.basename(path)}")
        ticker = self.loop.create_task(self._progress(token, size))
        self.running += 1
        t0 = time.time()
        try:
            with self.dedupe.analysing(size):
                res = await self._submit(path, opts)
                data, wall, cpu, start, read = res.data, res.wall, res.cpu, res.start, res.read
                if res.summary is not None:
                    self._keep_summary(msgspec.json.decode(res.summary, type=RankSummary), opts)
                # The lines its findings sit on (the worker named them: the report is not decoded
                # for it), read now (off the loop): while this analysis is still in flight, so a
                # repeat of its content joins it instead of starting another.
                await SOURCES.warm([*res.sources, *shown_roots(opts.workspace, opts.path_map)])
            self.analyses += 1
            if wall > 0.05:  # what the next analyses' progress is estimated from
                self._rate = 0.5 * self._rate + 0.5 * (size / wall) if self._rate else size / wall
            t1 = time.time()
            log.info(
                "profd: analysed %s (%d bytes): %.3f s in the worker (CPU %.3f s), "
                "%.3f s from submit (started after %.3f s, back %.3f s after its end)",
                path,
                size,
                wall,
                cpu,
                t1 - t0,
                start - t0,
                t1 - start - wall,
            )
            return data, read
        finally:
            self.running -= 1
            ticker.cancel()
            for s in list(self.sessions):
                s.progress(token, None)

    async def _progress(self, token: str, size: int, first: float = 0.1, every: float = 0.25) -> None:
        """``$/progress`` reports while one analysis runs: the share done, estimated from the
        bytes per second of the analyses before it (the worker cannot say how far it is), held
        below 100% until the result is in. The first comes soon (``first``) so that an analysis
        of a fraction of a second still shows one, then one each ``every``."""
        t0, last = time.monotonic(), -1
        await asyncio.sleep(first)
        while True:
            rate = self._rate or 4e6  # bytes/s before any analysis was timed (a 1 MB gz: ~0.3 s)
            pct = min(95, int(100 * (time.monotonic() - t0) * rate / max(1, size)))
            if pct != last:
                last = pct
                for s in list(self.sessions):
                    s.progress_at(token, pct, f"~{pct}% of {size / 1e6:.1f} MB (estimated)")
            await asyncio.sleep(every)

    async def _submit(self, path: str, opts: Options) -> TaskResult:
        try:
            return await self._pool.run(analyze_task, path, opts)
        except Budget as e:
            log.error("profd: %s: %s", path, e)
            report = T.Report(
                trace=T.TraceInfo(path=path, sha256="", size_bytes=0), error=f"profd: bad trace {path}: {e}"
            )
            return TaskResult(
                T.encode(report), [], None, 0.0, 0.0, time.time(), await self.io(signature, path)
            )

    def _keep_summary(self, summary: RankSummary, opts: Options) -> None:
        self._summaries[(summary.sha256, options_fp(opts))] = summary
        while len(self._summaries) > 1024:  # a few KiB each
            self._summaries.popitem(last=False)

    async def run_in_worker(self, fn, *args):
        """Other work on a trace (annotating it) in an analysis process, under the same budgets;
        Budget when it was ended."""
        return await self._pool.run(fn, *args)

    def _link(self, path: str, key: str, sig: Sig) -> None:
        """The file at ``path`` now holds the content of the stored report ``key``."""
        self.index.link(path, key, sig)
        self._notify("report_ready", key, self.index.sources_at(key, path), self.index.report_at(key, path))

    def _commit(
        self, key: str, path: str, sig: Sig, data: bytes, report: T.Report, current: bool = True
    ) -> None:
        """Store the report of content ``key``, read from ``path`` as ``sig``; ``current``: the
        file there still holds it (else the report is kept for that content alone: no path
        points at it, nothing is published, and the next file with that content links to it)."""
        if self._known(key) and self.index[key].path != path:  # committed meanwhile under
            if current:  # another name: the same content
                self._link(path, key, sig)
            return
        roots = shown_roots(self.cfg.workspace, self.cfg.path_map)  # only files inside are shown on
        # (warmed by _analyze_in_worker)
        sources = local_sources(report, path, lambda p: SOURCES.local(p, roots))
        row = self.index.put(key, path, sig, data, report, sources)
        if not current:
            self.index.keep(row)
            return
        self.index.add(row)
        self.unplaced.hint(key, path)  # starts the search for what its frames name
        if report.error:
            log.error("%s", report.error)
        self._notify("report_ready", key, sources, report)
        if report.error:
            self._notify("log_error", report.error)

    async def _handle_watched(self, path: str, sig: Sig) -> Optional[Outcome]:
        if not inside(path, self.cfg.watch):  # became a symlink out of the folder meanwhile
            return None
        known = self.index.store.known_file(path, sig[1] / 1e9, sig[0], *sig[2:4])
        if known and known.endswith(":" + self.fp) and self._known(known):
            return None
        why = await self.io(refusal, path, self._pool.mem_bytes)
        if why is not None:  # not hashed: keyed by its signature, an error report said at once
            key = "sig-%d-%d-%d-%d:%s" % (*sig[:4], self.fp)
            if self._known(key):
                return None
            report = self._refused(path, sig[0], why)
            return Outcome(
                ok=False,
                sig=sig,
                commit=functools.partial(self._commit, key, path, sig, T.encode(report), report),
            )
        size, cfg, fp = sig[0], self.cfg, self.fp
        opts = cfg.options()
        if not self._may_repeat(size):
            got = await self._analyze_unseen(path, sig)
            if got is None:
                return None
            key, data, made = got
        else:
            hashed = await self.hasher.hash(path)
            if hashed is None:
                return None
            sha, hsig = hashed
            await self.dedupe.hashes_done(size)  # a same-size file hashed beside its analysis
            key = f"{sha}:{fp}"
            if self._known(key):  # same content again (here or under another name): costs nothing
                self._link(path, key, hsig)
                return None
            data, made = await self._analyze_once(key, path, size, opts, hsig=hsig)
        if made is None:  # the file was replaced while read: nothing is known of it, look again
            return Outcome(ok=False, commit=None)
        if made[0] != key and self._known(made[0]):  # replaced after its hash by content
            self.dedupe.discarded += 1  # already reported (A -> B -> A): this run was not needed
        key, hsig = made
        report = relabel(T.decode_report(data), path)
        data_out = data if report.error is None else T.encode(report)
        commit = functools.partial(self._commit, key, path, hsig, data_out, report)
        # The report is of the content ``key`` (the file ``hsig``), whatever the path holds by now:
        # a file replaced again after it was read keeps the work done for that content.
        if report.error is None:
            return Outcome(ok=True, commit=commit, sig=hsig, keep=functools.partial(commit, current=False))
        # Its commit waits out ``quiet``: meanwhile a repeat of this content joins this result.
        release = self.dedupe.hold(key, hsig[0], (data, made))
        return Outcome(ok=False, commit=commit, sig=hsig, release=release)

    # ---- profd/analyze ----------------------------------------------------------------------
    def sources_changed(self, key: str) -> bool:
        """Whether a source file the report points at changed after it was made (as last read:
        ``await SOURCES.warm(row.sources)`` first): its findings' lines, columns and inline
        suppressions (``# profd: ignore[...]``) come from the sources."""
        row = self.index[key]
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
            raise PathError(
                M.ERR_FORBIDDEN_PATH,
                f"profd: {shown(path)} is outside the watched folder and workspace roots",
            )
        if not os.path.isfile(real):
            raise PathError(M.ERR_NOT_FOUND, f"profd: no such file: {shown(path)}")
        return real

    async def io(self, fn, *args):
        """``fn(*args)`` on the daemon's I/O threads: a stat or a path lookup never runs on the
        loop (a hung mount stalls that thread, not every client)."""
        return await self.loop.run_in_executor(self._io, fn, *args)

    def _refused(self, path: str, size: int, why: str) -> T.Report:
        log.warning("profd: %s: %s", path, why)
        return T.Report(
            trace=T.TraceInfo(path=path, sha256="", size_bytes=size),
            error=f"profd: bad trace {path}: {why}",
            profd_version=__version__,
        )

    async def analyze(self, p: M.AnalyzeParams) -> T.Report:
        real = await self.io(self.check_path, p.path)
        why = await self.io(refusal, real, self._pool.mem_bytes)
        if why is not None:
            sig = await self.io(signature, real)
            return self._refused(p.path, sig[0] if sig else 0, why)
        opts = self.request_options(p)
        fp = options_fp(opts)
        hashed = await self.hasher.hash(real)
        if hashed is None:
            raise PathError(M.ERR_NOT_FOUND, f"profd: no such file: {p.path}")
        sha, sig = hashed
        key = f"{sha}:{fp}"
        row = self.index.row(key)
        if row is not None:
            await SOURCES.warm(row.sources)
        stale = row is not None and (self.sources_changed(key) or not self._known(key))
        if row is not None and not stale and self.index.report(key) is not None:
            return self.index.report_at(key, p.path)
        if fp != self.fp:  # this request's own options: its result is this client's alone
            data = self._aside.get(key)
            if data is None:
                data, made = await self._analyze_once(key, real, sig[0], opts, hsig=sig)
                if made is not None:
                    self._aside[made[0]] = data
                while len(self._aside) > 32:
                    self._aside.popitem(last=False)
            return relabel(T.decode_report(data), p.path)
        data, made = await self._analyze_once(key, real, sig[0], opts, hsig=sig)
        report = relabel(T.decode_report(data), real)  # what was read, under its own key
        if made is not None and (made[0] != key or key not in self.index or stale):
            self._commit(made[0], real, made[1], T.encode(report) if report.error else data, report)
        # decoded once: a second copy only for a path that names the file through a link
        return report if p.path == real else relabel(T.decode_report(data), p.path)

    def request_options(self, p: AnalysisOptions) -> Options:
        """The options of one request: what it gives over the daemon's own."""
        opts = self.cfg.options().given(p)
        if p.workspace is not None:
            opts.workspace = [os.path.abspath(w) for w in opts.workspace]
        return opts

    async def analyze_rank(self, p: M.AnalyzeParams) -> M.RankAnalysis:
        """profd/analyzeRank: ``analyze``'s report and, for a rank of a multi-process job, the
        rank summary made beside it in the worker (one analysis for both). A report that came
        from the store (made before this daemon started) has none kept: its trace is summarised
        in a worker then."""
        report = await self.analyze(p)
        info = report.trace
        if report.error or info.rank is None or not info.world_size or info.world_size < 2:
            return M.RankAnalysis(report=report)
        opts = self.request_options(p)
        summary = self._summaries.get((info.sha256, options_fp(opts)))
        if summary is None:
            real = await self.io(self.check_path, p.path)
            try:
                summary = await self.run_in_worker(summarize_task, real, opts)
            except Budget as e:
                log.error("profd: summarising %s: %s", real, e)
                return M.RankAnalysis(report=report)
            if summary.sha256 != info.sha256:  # replaced meanwhile: not this report's rank
                return M.RankAnalysis(report=report)
            self._keep_summary(summary, opts)
        return M.RankAnalysis(report=report, summary=msgspec.structs.replace(summary, path=info.path))
