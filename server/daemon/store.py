"""The results store: SQLite (WAL, one transaction per write, owner-only file) under the state dir.

``reports``: one row per key (raw-file sha256 + options fingerprint, see protocol.methods), the
encoded Report and the absolute source files its findings point at (so a restart rebuilds the
per-source index without decoding a single report). ``files``: trace path -> key of its newest
content, with the size/mtime/inode/ctime it had, so a restart skips hashing files it already
knows (and hashes one whose content was replaced keeping its size and mtime).
``texts``: the source files' text each report was made against (its positions' baseline). A report
over SQLite's limits (``sqlite3.DataError``) is refused alone: the daemon stores an error in its
place, never taking it for a corrupt store.
Thread-safe (one connection, one lock); every call is short.

The database is the daemon's alone (``locking_mode=EXCLUSIVE``): the WAL index then lives in the
process's heap instead of a memory-mapped ``-shm`` file, which raises SIGBUS when the file cannot
be written or extended. A file that is not a database, or fails SQLite's quick check, is moved
aside (``profd.sqlite3.bad-<time>``) and a fresh one is made: the watched files rebuild it.
A store that cannot be written at all (a read-only file, directory or filesystem) is served
read-only as it is (or, if there is none to read, kept in memory): its writes raise
``sqlite3.OperationalError``, which the daemon answers by keeping new reports in memory.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from typing import Iterator, NamedTuple, Optional
from urllib.parse import quote

log = logging.getLogger("profd.store")

SCHEMA = """
CREATE TABLE IF NOT EXISTS reports (
    key TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    mtime REAL NOT NULL,
    size INTEGER NOT NULL,
    report BLOB NOT NULL,
    error TEXT,
    sources TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL,
    recorded REAL
);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    key TEXT NOT NULL,
    mtime REAL NOT NULL,
    size INTEGER NOT NULL,
    seen REAL NOT NULL,
    ino INTEGER,
    ctime_ns INTEGER
);
CREATE INDEX IF NOT EXISTS reports_created ON reports(created);
CREATE TABLE IF NOT EXISTS texts (
    key TEXT NOT NULL,
    path TEXT NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (key, path)
);
"""


class Row(NamedTuple):
    key: str
    path: str
    mtime: float
    size: int
    error: Optional[str]
    sources: list[str]
    created: float
    recorded: Optional[float] = None  # when the trace was recorded (epoch s), if it says

    def order(self) -> tuple[float, float]:
        """Newer traces sort later: by their own recording time (else the file's mtime), then
        by arrival."""
        return (self.recorded if self.recorded is not None else self.mtime, self.created)


def _private_file(path: str) -> None:
    """Create ``path`` (if missing) readable and writable by its owner only."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)


def private_dir(path: str) -> None:
    """Create ``path`` if missing and make it the owner's alone (an existing one too)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        if os.stat(path).st_uid == os.getuid():
            os.chmod(path, 0o700)
    except OSError as e:
        log.warning("profd: cannot make %s owner-only: %s", path, e)


class Store:
    def __init__(self, path: str):
        self.path = path
        self.moved_aside: Optional[str] = None  # where a bad database went, if one did
        private_dir(os.path.dirname(os.path.abspath(path)))
        self._lock = threading.RLock()
        try:
            self._open()
        except (sqlite3.DatabaseError, OSError) as e:
            self._heal(e)

    def _heal(self, why: BaseException) -> None:
        """The store did not open, or failed in use: one that cannot be written is served
        read-only; a bad one is moved aside and made afresh."""
        if isinstance(why, OSError) and why.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return self._open_read_only(why)
        try:
            self._move_aside(why)
            self._open()
        except OSError as e:  # the state dir itself cannot be written
            self._open_read_only(e)

    def _open(self) -> None:
        _private_file(self.path)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
        try:
            self._db.execute("PRAGMA locking_mode=EXCLUSIVE")  # before WAL: no -shm mapping
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            check = self._db.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                raise sqlite3.DatabaseError("; ".join(str(r[0]) for r in check[:3]))
            self._schema()
        except BaseException:
            self._db.close()
            raise
        for suffix in ("-wal", "-shm"):  # created by the first write; owner-only too
            if os.path.exists(self.path + suffix):
                os.chmod(self.path + suffix, 0o600)

    def _schema(self) -> None:
        with self._tx() as c:
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)
            cols = {r[1] for r in c.execute("PRAGMA table_info(reports)")}
            if "recorded" not in cols:  # a store from before recording times were kept
                c.execute("ALTER TABLE reports ADD COLUMN recorded REAL")
            fcols = {r[1] for r in c.execute("PRAGMA table_info(files)")}
            for col in ("ino", "ctime_ns"):  # a store from before files were told by them
                if col not in fcols:
                    c.execute(f"ALTER TABLE files ADD COLUMN {col} INTEGER")

    def _open_read_only(self, why: OSError) -> None:
        """Nothing under the state dir can be written: serve the store as it is, read-only
        (``immutable``: no lock, no -shm or -wal to create; its writes fail, so the daemon keeps
        new reports in memory), or one in memory if it cannot be read either."""
        db = None
        try:
            db = sqlite3.connect(
                f"file:{quote(self.path)}?mode=ro&immutable=1",
                uri=True,
                check_same_thread=False,
                isolation_level=None,
            )
            if db.execute("PRAGMA quick_check").fetchall() != [("ok",)]:
                raise sqlite3.DatabaseError("it fails the quick check")
            db.execute("SELECT 1 FROM reports, files LIMIT 1").fetchall()
            self._db, how = db, "read-only, as it is"
        except sqlite3.Error:
            if db is not None:
                db.close()
            self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            self._schema()
            how = "from memory (none can be read there)"
        log.error(
            "profd: the results store %s cannot be written (%s); serving it %s: new reports "
            "last until the daemon stops",
            self.path,
            why,
            how,
        )

    def _move_aside(self, why: BaseException) -> None:
        aside = f"{self.path}.bad-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.replace(self.path + suffix, aside + suffix)
            except FileNotFoundError:
                pass
        self.moved_aside = aside
        log.error(
            "profd: the results store %s is unusable (%s); moved it to %s and starting an "
            "empty one (the watched files are analysed again)",
            self.path,
            why,
            aside,
        )

    def reset(self, why: BaseException) -> None:
        """The store failed while in use (corrupt pages): move it aside and start an empty one."""
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._heal(why)

    class _Tx:
        def __init__(self, store: "Store"):
            self.s = store

        def __enter__(self):
            self.s._lock.acquire()
            self.s._db.execute("BEGIN IMMEDIATE")
            return self.s._db

        def __exit__(self, et, e, tb):
            try:
                self.s._db.execute("ROLLBACK" if et else "COMMIT")
            finally:
                self.s._lock.release()
            return False

    def _tx(self) -> "Store._Tx":
        return Store._Tx(self)

    def _q(self, sql: str, args=()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ---- writes -----------------------------------------------------------------------------
    def put(
        self,
        key: str,
        path: str,
        mtime: float,
        size: int,
        report: bytes,
        error: Optional[str],
        sources: list[str],
        recorded: Optional[float] = None,
        ino: Optional[int] = None,
        ctime_ns: Optional[int] = None,
    ) -> float:
        """Store a report and point its trace path at it, in one transaction. Returns created."""
        now = time.time()
        with self._tx() as c:
            c.execute(
                "INSERT OR REPLACE INTO reports(key, path, mtime, size, report, error, sources,"
                " created, recorded) VALUES (?,?,?,?,?,?,?,?,?)",
                (key, path, mtime, size, report, error, json.dumps(sources), now, recorded),
            )
            c.execute(
                "INSERT OR REPLACE INTO files(path, key, mtime, size, seen, ino, ctime_ns) "
                "VALUES (?,?,?,?,?,?,?)",
                (path, key, mtime, size, now, ino, ctime_ns),
            )
        return now

    def put_texts(self, key: str, texts: dict[str, str]) -> None:
        """The source texts report ``key`` was made against (positions.py maps edits from them)."""
        with self._tx() as c:
            c.executemany(
                "INSERT OR REPLACE INTO texts(key, path, text) VALUES (?,?,?)",
                [(key, p, t) for p, t in texts.items()],
            )

    def texts(self, key: str) -> dict[str, str]:
        return dict(self._q("SELECT path, text FROM texts WHERE key=?", (key,)))

    def link(
        self,
        path: str,
        key: str,
        mtime: float,
        size: int,
        ino: Optional[int] = None,
        ctime_ns: Optional[int] = None,
    ) -> None:
        """Record that the file at ``path`` (as stat'ed) has the content of ``key``."""
        with self._tx() as c:
            c.execute(
                "INSERT OR REPLACE INTO files(path, key, mtime, size, seen, ino, ctime_ns) "
                "VALUES (?,?,?,?,?,?,?)",
                (path, key, mtime, size, time.time(), ino, ctime_ns),
            )

    # ---- reads ------------------------------------------------------------------------------
    def has(self, key: str) -> bool:
        return bool(self._q("SELECT 1 FROM reports WHERE key=?", (key,)))

    def get(self, key: str) -> Optional[bytes]:
        r = self._q("SELECT report FROM reports WHERE key=?", (key,))
        return bytes(r[0][0]) if r else None

    def row(self, key: str) -> Optional[Row]:
        r = self._q(
            "SELECT key, path, mtime, size, error, sources, created, recorded FROM reports WHERE key=?",
            (key,),
        )
        return _row(r[0]) if r else None

    def known_file(
        self, path: str, mtime: float, size: int, ino: Optional[int] = None, ctime_ns: Optional[int] = None
    ) -> Optional[str]:
        """The key of ``path`` if it is unchanged since it was last seen: the same size and mtime,
        and the same inode and change time (another content copied in with the old size and mtime,
        ``rsync -a``/``cp -p``/``tar x``, has a new change time, and often a new inode). A file
        recorded without them (an older store) is hashed once more."""
        r = self._q(
            "SELECT key FROM files WHERE path=? AND mtime=? AND size=? AND ino IS ? AND ctime_ns IS ?",
            (path, mtime, size, ino, ctime_ns),
        )
        return r[0][0] if r else None

    def drop(self, key: str) -> None:
        """Forget a report (it could not be decoded) and the files that pointed at it."""
        with self._tx() as c:
            c.execute("DELETE FROM reports WHERE key=?", (key,))
            c.execute("DELETE FROM files WHERE key=?", (key,))
            c.execute("DELETE FROM texts WHERE key=?", (key,))

    def file_key(self, path: str) -> Optional[str]:
        r = self._q("SELECT key FROM files WHERE path=?", (path,))
        return r[0][0] if r else None

    def files(self) -> list[tuple[str, str]]:
        """(trace path, key of its content) as last seen, oldest first."""
        return self._q("SELECT path, key FROM files ORDER BY seen, rowid")

    def rows(self) -> Iterator[Row]:
        """Every report's metadata, oldest first."""
        for r in self._q(
            "SELECT key, path, mtime, size, error, sources, created, recorded FROM reports "
            "ORDER BY created, rowid"
        ):
            yield _row(r)

    def count(self) -> int:
        return self._q("SELECT COUNT(*) FROM reports")[0][0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _row(r: tuple) -> Row:
    return Row(r[0], r[1], r[2], r[3], r[4], json.loads(r[5] or "[]"), r[6], r[7])


class Lru:
    """Decoded reports kept for their next use, least recently used dropped first, bounded in
    count and in the encoded bytes they came from (a report is at most
    ``engine.bound.MAX_REPORT_BYTES``; its objects take a few times that): the daemon's cache and
    the MCP server's alike."""

    def __init__(self, max_items: int = 64, max_bytes: int = 128 << 20):
        self.max_items, self.max_bytes = max_items, max_bytes
        self._d: "OrderedDict[object, tuple[object, int]]" = OrderedDict()
        self.bytes = 0

    def get(self, key):
        hit = self._d.get(key)
        if hit is None:
            return None
        self._d.move_to_end(key)
        return hit[0]

    def put(self, key, value, nbytes: int) -> None:
        old = self._d.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._d[key] = (value, nbytes)
        self.bytes += nbytes
        while len(self._d) > 1 and (len(self._d) > self.max_items or self.bytes > self.max_bytes):
            self.bytes -= self._d.popitem(last=False)[1][1]

    def __contains__(self, key) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def values(self):
        return [v for v, _ in self._d.values()]

    def clear(self) -> None:
        self._d.clear()
        self.bytes = 0
