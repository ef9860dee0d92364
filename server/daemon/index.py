"""The report index: the stored reports, and which one each trace file and source file shows.

Results are keyed by ``sha256(raw file bytes):options fingerprint`` (``options_fp``), stored in
SQLite (``store.Store``), and indexed in memory by the source files their findings point at: for
each source file the newest trace wins (by its own recording time, then by arrival; only reports
made with the current options), older ones stay queryable through profd/reports and
profd/report, and the one before it is what a before/after compares against.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sqlite3
import time
from collections import OrderedDict
from typing import Callable, Optional

import msgspec

from ... import __version__
from ...protocol import methods as M
from ...protocol import types as T
from ..engine import Options, impact_order, split_lines
from .sources import SOURCES, text_chars
from .store import Lru, Row, Store

log = logging.getLogger("profd.index")


def options_fp(opts: Options) -> str:
    """The options' part of a report's key (thresholds and library lines only when set: the keys
    made before they could be set stay valid)."""
    doc = json.dumps(
        [
            sorted(os.path.abspath(w) for w in opts.workspace),
            [list(p) for p in opts.path_map],
            sorted(opts.disabled),
        ]
        + ([opts.thresholds] if opts.thresholds else [])
        + ([{"library_lines": True}] if opts.library_lines else []),
        sort_keys=True,
    )
    return hashlib.sha256(doc.encode()).hexdigest()[:12]


def relabel(report: T.Report, path: str) -> T.Report:
    """The report as if the trace were at ``path`` (same content seen under another name)."""
    old = report.trace.path
    if old == path:
        return report
    report.trace.path = path
    if report.error:
        report.error = report.error.replace(old, path)
    for d in report.diagnostics:
        for loc in [d.location, *d.related]:
            if loc.path == old:
                loc.path = path
    report.diagnostics.sort(key=impact_order)  # ties go by path: ordered as if analysed there
    return report


# The source texts kept with a report (the baselines positions are mapped from): files of at
# most BASELINE_FILE_CHARS, BASELINE_CHARS in all; a larger one is mapped as it is now.
BASELINE_FILE_CHARS = 1 << 20
BASELINE_CHARS = 8 << 20
BASELINES_KEPT = 16  # reports whose baselines stay in memory (the others are read back)


class ReportIndex:
    """The stored reports (SQLite, ``store.Store``) and, in memory, which one each trace file and
    each source file shows. A source file shows the newest report that points at it, among those
    made under the options in force (``shown_fp``; while reports under new options are on their
    way, ``fallback_fp``'s where the new ones are not in yet); the one before it is what a
    before/after compares against. A trace file shows its newest content's report.

    Writes the store refuses (disk full, read-only) are served from memory and retried every
    ``retry_s`` seconds; a corrupt store is moved aside and started empty (``on_reset`` then
    scans the watched files again); a stored report that does not decode is forgotten and its
    traces handed to ``on_lost`` to be analysed again."""

    def __init__(
        self,
        shown_fp: str,
        on_reset: Callable[[], None] = lambda: None,
        on_lost: Callable[[str], None] = lambda path: None,
    ):
        self.shown_fp = shown_fp
        self.fallback_fp: Optional[str] = None
        self.on_reset, self.on_lost = on_reset, on_lost
        self.store: Optional[Store] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.retry_s = 5.0
        self._rows: dict[str, Row] = {}
        self._by_source: dict[str, list[str]] = {}  # source path -> keys, oldest first
        self._trace_key: dict[str, str] = {}  # trace path -> key of its newest content
        self._cache = Lru()  # decoded reports, bounded in count and bytes
        self._unsaved: OrderedDict[tuple, tuple] = OrderedDict()  # refused writes, retried
        self._retry: Optional[asyncio.TimerHandle] = None
        self._texts: OrderedDict[str, dict[str, tuple[str, ...]]] = OrderedDict()  # baselines

    # ---- opening and closing ----------------------------------------------------------------
    def open(self, path: str, loop: asyncio.AbstractEventLoop) -> None:
        """Open the store at ``path`` and index what it holds."""
        self.loop = loop
        self.store = Store(path)
        try:
            rows, files = list(self.store.rows()), self.store.files()
        except sqlite3.DatabaseError as e:
            self.store.reset(e)
            rows, files = [], []
        for row in rows:
            self.add(row)
        for path, key in files:  # oldest first: the newest link wins, as it did
            if key in self._rows:
                self.add(self._rows[key], path)

    @property
    def _store(self) -> Store:
        if self.store is None:
            raise RuntimeError("profd: the report index is used before it was opened")
        return self.store

    def close(self) -> None:
        if self._retry:
            self._retry.cancel()
        if self.store:
            self.store.close()

    # ---- reading ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def __getitem__(self, key: str) -> Row:
        """The stored facts of report ``key``; KeyError when it is not indexed."""
        return self._rows[key]

    def row(self, key: Optional[str]) -> Optional[Row]:
        """The stored facts of report ``key`` (trace path, size, sources, error, ...)."""
        return self._rows.get(key) if key else None

    def rows(self) -> list[Row]:
        return list(self._rows.values())

    def key_of_trace(self, path: str) -> Optional[str]:
        """The key of the newest content seen at trace file ``path``."""
        return self._trace_key.get(path)

    def sources(self) -> list[str]:
        """Every file some report points at (source files and the trace files themselves)."""
        return list(self._by_source)

    def indexed(self, path: str) -> bool:
        """Whether some report points at ``path``."""
        return path in self._by_source

    def has_size(self, size: int) -> bool:
        """Whether a stored report is of a trace file of ``size`` bytes."""
        return any(r.size == size for r in self._rows.values())

    @property
    def pending_writes(self) -> int:
        """Writes the store refused that wait for their retry."""
        return len(self._unsaved)

    def report(self, key: Optional[str]) -> Optional[T.Report]:
        """The decoded report of ``key`` (the cached object itself: do not change it)."""
        if not key:
            return None
        r = self._cache.get(key)
        if r is not None:
            return r
        unsaved = self._unsaved.get(("put", self._rows[key].path)) if key in self._rows else None
        try:
            data = unsaved[5] if unsaved and unsaved[1] == key else self._store.get(key)
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

    def report_at(self, key: Optional[str], path: str) -> Optional[T.Report]:
        """The report of ``key`` as the trace at ``path`` has it (a relabelled copy for a second
        name; the cached object itself for the first)."""
        r = self.report(key)
        if r is None or path == r.trace.path:
            return r
        return relabel(T.decode_report(T.encode(r)), path)

    def sources_at(self, key: str, path: str) -> list[str]:
        """The report's sources with the trace at ``path`` (the same content under its name)."""
        row = self._rows[key]
        return [path if s == row.path else s for s in row.sources]

    def shown(self, key: str) -> bool:
        """Whether report ``key`` was made under the options shown now."""
        return key.endswith(":" + self.shown_fp) or bool(
            self.fallback_fp and key.endswith(":" + self.fallback_fp)
        )

    def keys_for(self, source: str) -> list[str]:
        """Keys of the reports shown on ``source``, oldest first (while reports under new
        options are on their way, the old options' ones where the new ones are not in yet)."""
        for fp in (self.shown_fp, self.fallback_fp):
            if fp is None:
                continue
            tail = ":" + fp
            keys = [k for k in self._by_source.get(source, ()) if k.endswith(tail) and k in self._rows]
            if keys:
                return sorted(keys, key=lambda k: self._rows[k].order())
        return []

    def newest_for(self, source: str) -> Optional[str]:
        keys = self.keys_for(source)
        return keys[-1] if keys else None

    def previous_for(self, source: str) -> Optional[str]:
        """The report before the newest one on ``source`` (a trace of the same program)."""
        keys = self.keys_for(source)
        return keys[-2] if len(keys) > 1 else None

    def entries(self, path: Optional[str] = None) -> list[M.ReportEntry]:
        """profd/reports: every stored report, or those of (or pointing at) ``path``."""
        out = []
        for row in self._rows.values():
            if path and row.path != path and path not in row.sources and self._trace_key.get(path) != row.key:
                continue
            named = path if path and self._trace_key.get(path) == row.key else row.path
            out.append(
                M.ReportEntry(
                    key=row.key,
                    path=named,
                    mtime=row.mtime,
                    size=row.size,
                    created=row.created,
                    error=row.error,
                    sources=row.sources,
                    newest=self._trace_key.get(named) == row.key,
                )
            )
        return out

    # ---- writing ----------------------------------------------------------------------------
    def add(self, row: Row, path: Optional[str] = None) -> None:
        """``row`` is the newest report for its sources and for the trace at ``path`` (default:
        the path it was analysed under; another one when the same content came back there or
        arrived under another name)."""
        self._rows[row.key] = row
        path = path or row.path
        for s in self.sources_at(row.key, path):
            keys = self._by_source.setdefault(s, [])
            if row.key in keys:
                keys.remove(row.key)
            keys.append(row.key)
        self._trace_key[path] = row.key

    def keep(self, row: Row) -> None:
        """Know ``row`` without showing it anywhere (a content no file holds any more: the next
        file with that content links to it)."""
        self._rows[row.key] = row

    def put(self, key: str, path: str, sig: tuple, data: bytes, report: T.Report, sources: list[str]) -> Row:
        """Store report ``data`` (decoded: ``report``) of content ``key``, read from ``path`` as
        the file ``sig`` (watcher.Sig), shown on ``sources``; the texts of those sources are kept
        as the analysis read them (keep_texts). The report is cached but shown nowhere yet:
        ``add`` or ``keep`` the row returned."""
        size, mtime = sig[0], sig[1] / 1e9
        rec = report.trace.recorded_us / 1e6 if report.trace.recorded_us is not None else None
        created = (
            self.write(("put", key, path, mtime, size, data, report.error, sources, rec, *sig[2:4]))
            or time.time()
        )
        self.keep_texts(key, [s for s in sources if s != path])
        self._cache.put(key, report, len(data))
        return Row(key, path, mtime, size, report.error, sources, created, rec)

    def link(self, path: str, key: str, sig: tuple) -> None:
        """The file at ``path`` (signature ``sig``) now holds the content of stored report ``key``."""
        self.write(("link", path, key, sig[1] / 1e9, sig[0], *sig[2:4]))
        self.add(self._rows[key], path)

    def write(self, op: tuple) -> Optional[float]:
        """Run one store write (``("put", ...)``, ``("link", ...)`` or ``("put_texts", ...)``);
        one the store refuses is kept and retried every few seconds (disk full, read-only file),
        and a corrupt store is moved aside and rebuilt from the watched files. The index in
        memory has the result either way."""
        kind = (op[0], op[2] if op[0] == "put" else op[1])  # put: its path; link: its path; texts: key
        self._unsaved.pop(kind, None)
        try:
            return getattr(self._store, op[0])(*op[1:])
        except sqlite3.DataError as e:  # this one row is over SQLite's limits: it alone is refused
            log.error(
                "profd: the results store refused a write (%s of %s: %s); the other reports are kept",
                op[0],
                kind[1],
                e,
            )
            if op[0] == "put" and op[6] is None:
                err = (
                    f"profd: the report of {op[2]} ({len(op[5])} bytes) is more than the "
                    f"results store takes ({e})"
                )
                stub = T.encode(
                    T.Report(
                        trace=T.TraceInfo(path=op[2], sha256="", size_bytes=op[4]),
                        error=err,
                        profd_version=__version__,
                    )
                )
                return self.write((*op[:5], stub, err, *op[7:]))
        except sqlite3.OperationalError as e:
            if not self._unsaved:
                log.error(
                    "profd: cannot write the results store %s (%s); keeping reports in "
                    "memory and retrying every %.0f s",
                    self._store.path,
                    e,
                    self.retry_s,
                )
            self._unsaved[kind] = op
            if self._retry is None and self.loop is not None:
                self._retry = self.loop.call_later(self.retry_s, self._retry_writes)
        except sqlite3.DatabaseError as e:
            self._rebuild(e)
        return None

    def _retry_writes(self) -> None:
        self._retry = None
        for op in list(self._unsaved.values()):
            self.write(op)
            if self._retry is not None:  # still refused: the rest waits too
                return
        log.warning("profd: the results store is writable again; all reports saved")

    def _rebuild(self, why: BaseException) -> None:
        """The store is corrupt: move it aside, start empty, and analyse the watched files again."""
        self._store.reset(why)
        self._rows.clear()
        self._by_source.clear()
        self._trace_key.clear()
        self._cache.clear()
        self._unsaved.clear()
        self.on_reset()

    def _undecodable(self, key: str, why: BaseException) -> None:
        """A stored report that does not decode: forget it and analyse its trace(s) again."""
        log.error(
            "profd: the stored report %s does not decode (%s); analysing its trace again", key[:16], why
        )
        paths = {p for p, k in self._trace_key.items() if k == key}
        try:
            self._store.drop(key)
        except sqlite3.DatabaseError as e:
            self._rebuild(e)
            return
        self._rows.pop(key, None)
        for keys in self._by_source.values():
            if key in keys:
                keys.remove(key)
        for p in paths:
            del self._trace_key[p]
            self.on_lost(p)

    # ---- the texts reports were made against ------------------------------------------------
    def keep_texts(self, key: str, sources: list[str]) -> None:
        """Keep the text of each source as the analysis of ``key`` read it (warmed right after
        it): the baseline its positions are mapped from after the user edits."""
        texts, room = {}, BASELINE_CHARS
        for s in sources:  # a "source" of megabytes is not one a user edits (any file can be named)
            n = text_chars(SOURCES.lines(s))
            if SOURCES.isfile(s) and n <= min(room, BASELINE_FILE_CHARS):
                texts[s], room = SOURCES.lines(s), room - n
        self._texts[key] = texts
        self._texts.move_to_end(key)
        while len(self._texts) > BASELINES_KEPT:
            self._texts.popitem(last=False)
        if texts:
            self.write(("put_texts", key, {p: "".join(ln + "\n" for ln in t) for p, t in texts.items()}))

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
            while len(self._texts) > BASELINES_KEPT:
                self._texts.popitem(last=False)
        else:
            self._texts.move_to_end(key)
        return texts.get(path)
