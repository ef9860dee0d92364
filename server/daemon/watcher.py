"""The watched folder: watchdog events -> debounce -> a newest-first queue -> a fixed pool of workers.

Threads: watchdog's observer thread only tests a path and posts it to an inbox the loop drains
(``Watcher.post``); everything else runs on the server's event loop. A path goes through:

  pending (size/mtime/inode re-stat every ``settle`` s until two stats agree; a file renamed
  into the folder is complete at that instant and skips the wait: the writer's rename is its
  "done", and a file still written after it is caught by the re-stat after the read below)
  -> queue (newest first: the file a user just dropped goes ahead of any backlog; not bounded
     apart from the paths themselves, which ``pending``/``busy`` hold anyway: a bound made the
     overflow poll for room, and a file dropped after 4,000 waited 10 s among them)
  -> a worker re-stats it (changed while queued -> pending again), then calls
     ``handle(path, stat)`` (hash, look up, analyse in the daemon's executor)
  -> ok: ``commit()``; failed to parse: wait ``quiet`` s (holding no worker); still unchanged ->
     ``commit()`` the one error report; changed meanwhile -> back to pending (still written).

Only regular files whose real path lies inside the watched folder are taken: a symlink that
leads out of it (to the daemon's own database, to /dev/zero) is never read.

A file deleted at any point drops out; one replaced while being read is seen as changed and goes
round again. The watched folder removed and recreated is re-armed (the parent folder is watched
too, plus a cheap periodic check of the folder's inode) and rescanned.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import importlib
import logging
import os
import stat
import sys
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Optional

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from ..engine import file_signature, nameable
from .confine import within

log = logging.getLogger("profd.watcher")

# The traces taken: *.json (so *.pt.trace.json) and *.json.gz, never a dot-file (a writer's
# temporary). A suffix test: it runs on watchdog's thread for every event.
SUFFIXES = (".json", ".json.gz")

# The events asked of the kernel (inotify's mask): a file written, closed or renamed here, and a
# folder appearing or going. Not opens, reads or closes after reading: the daemon's own hashing
# and analysis read every trace, and those events would queue in the observer ahead of the
# next user's file (a flood of 1,000 files otherwise delays the last one by a second).
FILE_EVENTS = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirMovedEvent,
    DirDeletedEvent,
]
FOLDER_EVENTS = [DirCreatedEvent, DirMovedEvent, DirDeletedEvent]


def _pair_moves_quickly(hold_s: float = 0.005) -> list[type]:
    """watchdog's inotify backend holds each rename's "moved from" half up to 0.5 s to pair it
    with its "moved to" half, and its queue waits the whole 0.5 s whenever that half reaches the
    head first, holding every later event behind it: under a flood of renamed-into-place files
    (how trace writers finish a file) the last one arrived 0.5-1.5 s late. The two halves are
    read from the kernel together; a few ms is plenty, and a pair split anyway reaches us as a
    created file, which the settle wait still takes correctly."""
    found = []
    for mod, cls in (
        ("watchdog.observers.inotify_move_event_grouper", "InotifyMoveEventGrouper"),
        ("watchdog.observers.inotify_buffer", "InotifyBuffer"),
    ):  # watchdog 7 / 4-6
        try:
            grouper = getattr(importlib.import_module(mod), cls)
        except (ImportError, AttributeError):
            continue
        grouper.delay = min(grouper.delay, hold_s)
        found.append(grouper)
    return found


_pair_moves_quickly()

# Folders watchdog could not watch, per watched root: inotify_add_watch failed for them (the
# usual cause: the user's inotify watch limit, ENOSPC), which watchdog skips without a word, so
# a trace dropped in one was never seen. Recorded on whichever thread added the watch.
_UNWATCHED: dict[bytes, collections.deque] = {}


def _note_unwatched(root: bytes, folder: bytes) -> None:
    """``folder`` under the watched ``root`` has no watch: the root's Watcher looks into it."""
    _UNWATCHED.setdefault(root, collections.deque()).append(folder)


def _record_unwatched() -> bool:
    try:
        from watchdog.observers.inotify import InotifyWatchGroup

        add = InotifyWatchGroup._add_callback
    except (ImportError, AttributeError):
        return _record_unwatched_6()
    if getattr(add, "profd", False):
        return True

    def _add_callback(self, path) -> None:
        add(self, path)
        if not _has_watch(self, path) and os.path.isdir(path):  # (not a folder gone meanwhile)
            _note_unwatched(os.fsencode(self.path), path)

    _add_callback.profd = True
    InotifyWatchGroup._add_callback = _add_callback
    return True


def _has_watch(group, path) -> bool:
    """Whether watchdog 7's ``group`` holds a watch on ``path``. From 7.1 it keeps a tree of
    folders, and its ``_active_callbacks_by_path`` is a property that rebuilds every path of the
    tree on each read: asked once per folder added, 1,200 nested folders took minutes (the daemon
    never came up). ``_find_node_by_path`` walks the path's own parts alone."""
    find = getattr(group, "_find_node_by_path", None)
    if find is None:  # 7.0: a dict of the watched paths
        return path in getattr(group, "_active_callbacks_by_path", (path,))
    node = find(path)
    return node is not None and getattr(node, "wd", -1) != -1  # -1: watchdog's _INVALID_WD


def _record_unwatched_6() -> bool:
    """The same record on watchdog 6 (the newest for Python 3.10), which has no InotifyWatchGroup:
    its Inotify skips a folder made while it runs whose watch fails (``except OSError:
    continue``), and raises for the whole tree when one fails at the start (Watcher.rearm_if_needed
    then looks into the whole tree). Each watch that fails at the limit is recorded here."""
    try:
        from watchdog.observers.inotify_c import Inotify

        add = Inotify._add_watch
    except (ImportError, AttributeError):
        return False
    if getattr(add, "profd", False):
        return True

    def _add_watch(self, path: bytes, mask: int) -> int:
        try:
            return add(self, path, mask)
        except OSError as e:
            if e.errno == errno.ENOSPC and os.path.isdir(path):
                _note_unwatched(self._path, path)
            raise

    _add_watch.profd = True  # type: ignore[attr-defined]
    Inotify._add_watch = _add_watch  # type: ignore[method-assign]
    return True


_record_unwatched()

Sig = tuple  # (size, mtime_ns, ino, ctime_ns)
WALK_LEVELS = 10_000
# A folder's mtime this close to the clock (or ahead of it) may not move at its next change: a
# filesystem's timestamps are as coarse as the kernel's tick (4-10 ms; multigrain timestamps
# came in Linux 6.13) or its own (1-2 s on some). A trace renamed into an unwatched folder in the
# same tick as the look that listed it left the mtime as it was, and was never seen; such a folder
# is looked into again on the next tick (as git treats a racily clean file).
RACY_NS = 2_000_000_000


def matches(path: str) -> bool:
    name = os.path.basename(path)
    return not name.startswith(".") and name.endswith(SUFFIXES)


sig_of = file_signature  # the engine's, which checks the file it hashes after reading by it

HOLE_MIN = 1 << 20  # files from this size are asked for holes (a sparse file)


def refusal(path: str, mem_bytes: int = 0) -> Optional[str]:
    """Why the file at ``path`` is not read (not hashed, not analysed) at all, else None; asked
    before the hash, off the loop, in a few syscalls whatever the size (issue 28: three 30 GB
    sparse files were hashed byte by byte, 59 s in front of a new trace):

    - a sparse file (a hole before its end, ``SEEK_HOLE``): a hole reads as NUL bytes, which no
      trace holds (the reader refuses a NUL at once; hashing the holes first took ~20 s each);
    - a file over twice the memory budget of an analysis: the engine's peak is ~0.8x an
      uncompressed trace (README, make bench) and inflating only adds, so it cannot fit.
    The error names the budget as the budget errors do: a bigger budget tries the file again."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None  # the hash says what is wrong
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        size = st.st_size
        if size >= HOLE_MIN and hasattr(os, "SEEK_HOLE"):
            try:
                hole = os.lseek(fd, 0, os.SEEK_HOLE)
            except OSError:
                hole = size
            if hole < size:
                return (
                    f"it is a sparse file ({_size(size)}, a hole at byte {hole}): a hole reads "
                    "as NUL bytes, which no trace holds: not read"
                )
        if mem_bytes and size > 2 * mem_bytes:
            return (
                f"it is {_size(size)}; analysing a trace takes memory near its size (~0.8x "
                f"uncompressed), over the {mem_bytes >> 20} MB memory budget per analysis "
                "(profd serve --analysis-mb): not read"
            )
        return None
    finally:
        os.close(fd)


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 1 << 30 else f"{n / 2**20:.1f} MB"


def same_file(a: Optional[Sig], b: Optional[Sig]) -> bool:
    """Whether two signatures of an open file say the same content: size, mtime and inode (its
    change time moves when the file is renamed over or unlinked while open, content unchanged)."""
    return a is not None and b is not None and a[:3] == b[:3]


def signature(path: str) -> Optional[Sig]:
    """The signature of the regular file at ``path`` (symlinks followed), else None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return sig_of(st) if stat.S_ISREG(st.st_mode) else None


@dataclass
class Outcome:
    """What ``handle`` did with a stable file: ``ok`` False = it did not parse (maybe not yet).
    ``commit`` None: no report of what the path holds (it was replaced while read): look again.
    ``sig``: the signature of the file the report was made from, when the handler knows it, else
    the queued signature is what counts. ``keep``: records the report for its content alone,
    when the path has changed since. ``release``: called once the watcher is done with the
    outcome, committed or not (an error report held for its ``quiet`` wait lets go of it)."""

    ok: bool
    commit: Optional[Callable[[], None]]
    sig: Optional[Sig] = None
    keep: Optional[Callable[[], None]] = None
    release: Optional[Callable[[], None]] = None


Handler = Callable[[str, Sig], Awaitable[Optional[Outcome]]]


class Intake:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        handle: Handler,
        *,
        settle: float = 0.3,
        quiet: float = 2.0,
        workers: int = 2,
    ):
        self.loop = loop
        self.handle = handle
        self.settle = settle
        self.quiet = quiet
        # Newest first: a trace dropped during a flood is the one its user waits for.
        self.queue: asyncio.Queue = asyncio.LifoQueue()
        self.pending: dict[str, Optional[Sig]] = {}
        self.busy: set[str] = set()  # queued or being handled
        self.dirty: set[str] = set()  # an event came while busy
        self.n_workers = workers
        self._tasks: list[asyncio.Task] = []
        self.handled = 0

    def start(self) -> None:
        self._tasks = [self.loop.create_task(self._worker()) for _ in range(self.n_workers)]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def queued(self) -> int:
        """Files not done with: settling, queued, being hashed or read, or waiting out ``quiet``
        (a path between the queue and its analysis is neither queued nor running otherwise)."""
        return len(self.pending) + len(self.busy)

    # ---- on the loop ------------------------------------------------------------------------
    def notice(self, path: str, complete: bool = False) -> None:
        """A file event (created, modified, closed, moved here) or a scan found ``path``;
        ``complete``: it was renamed into place (no need to watch it settle)."""
        if path in self.busy:
            self.dirty.add(path)
            return
        if path in self.pending:
            return
        self.pending[path] = signature(path)
        if complete:
            self._check(path)
        else:
            self.loop.call_later(self.settle, self._check, path)

    def _check(self, path: str) -> None:
        if path not in self.pending:
            return
        prev, now = self.pending[path], signature(path)
        if now is None:
            del self.pending[path]  # deleted (or not a file): nothing to do
            return
        if now != prev:
            self.pending[path] = now
            self.loop.call_later(self.settle, self._check, path)
            return
        self.queue.put_nowait((path, now))
        del self.pending[path]
        self.busy.add(path)

    async def _worker(self) -> None:
        while True:
            path, sig = await self.queue.get()
            try:
                await self._one(path, sig)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one file stop a worker
                log.exception("profd: handling %s failed", path)
                self._release(path)
            finally:
                self.queue.task_done()

    async def _one(self, path: str, sig: Sig) -> None:
        self.dirty.discard(path)
        if signature(path) != sig:
            # Replaced or written while it waited in the queue (A -> B -> A on one name): the
            # handler judges a file by its signature (is its size one seen before?), so a stale
            # one would analyse content already reported. Let it settle again.
            self._release(path, again=True)
            return
        out = await self.handle(path, sig)
        self.handled += 1
        if out is None:
            self._release(path)
            return
        waiting = False
        try:
            waiting = self._settle(path, sig, out)
        finally:
            if not waiting and out.release is not None:
                out.release()

    def _settle(self, path: str, sig: Sig, out: Outcome) -> bool:
        """Commit ``out`` or send ``path`` round again; True when the commit waits out ``quiet``
        (``_quiet_over`` ends it)."""
        if out.commit is None:
            self._release(path, again=True)
            return False
        made_from, now = out.sig or sig, signature(path)
        if now != made_from:  # replaced or still written while read: go round again
            log.info(
                "profd: %s changed after it was read (%s, now %s); looking at it again", path, made_from, now
            )
            if out.keep is not None:
                out.keep()  # the work done stands for the content it read
            self._release(path, again=True)
            return False
        sig = made_from
        if out.ok:
            out.commit()
            self._release(path)
            return False
        # Did not parse. Still being written? It must stay unchanged for ``quiet`` s; the wait
        # holds no worker, so a folder of bad files does not hold up the good ones.
        self.loop.call_later(self.quiet, self._quiet_over, path, sig, out)
        return True

    def _quiet_over(self, path: str, sig: Sig, out: Outcome) -> None:
        try:
            now = signature(path)
            if now is None:
                self._release(path)
            elif now != sig:
                self._release(path, again=True)
            else:
                try:
                    out.commit()  # the one error report for this content
                except Exception:
                    log.exception("profd: recording the error report of %s failed", path)
                self._release(path)
        finally:
            if out.release is not None:
                out.release()

    def _release(self, path: str, again: bool = False) -> None:
        self.busy.discard(path)
        if again or path in self.dirty:
            self.dirty.discard(path)
            if os.path.exists(path):
                self.notice(path)


class _Events(FileSystemEventHandler):
    """Runs on watchdog's thread, for every event: a cheap test, then the path goes into an inbox
    the loop drains in one wake-up per burst (a flood of 1,000 files is a few wake-ups, not
    thousands of cross-thread calls competing with the observer for the GIL)."""

    def __init__(self, watcher: "Watcher"):
        self.w = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        p = os.fsdecode(getattr(event, "dest_path", "") or event.src_path)
        w = self.w
        if event.is_directory or p == w.root:
            w.post(w.rearm_if_needed)
            if (
                event.is_directory
                and event.event_type in ("created", "moved")
                and p.startswith(w.root + os.sep)
            ):
                w.post(w.scan, p, False)  # watchdog reports each folder below it too
        elif (
            event.event_type != "deleted" and matches(p) and p.startswith(w.root + os.sep)
        ):  # not the parent's own files
            if event.event_type == "moved" and w.on_complete is not None:
                w.post(w.on_complete, p)
            else:
                w.post(w.on_path, p)


def inside(path: str, root: str) -> bool:
    """Whether ``path``, symlinks resolved, lies under the folder ``root`` (itself resolved)."""
    return within(path, [root], strict=True)


class Watcher:
    """watchdog on ``root`` (recursive) and its parent (to see ``root`` come back)."""

    def __init__(
        self,
        root: str,
        loop: asyncio.AbstractEventLoop,
        on_path: Callable[[str], None],
        check_every: float = 1.0,
        on_complete: Optional[Callable[[str], None]] = None,
    ):
        self.root = os.path.abspath(root)
        self.loop = loop
        self.on_path = self._inside(on_path)
        self.on_complete = self._inside(on_complete) if on_complete else None  # renamed here
        self.check_every = check_every
        self.observer = Observer()
        self._handler = _Events(self)
        self._root_watch = None
        self._parent_watch = None
        self._ino: Optional[int] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self.rearmed = 0
        self._inbox: collections.deque = collections.deque()  # (fn, args) from watchdog's thread
        self._unwatched: collections.OrderedDict[str, Optional[int]] = collections.OrderedDict()
        self._woken = False

    def post(self, fn: Callable, *args) -> None:
        """From watchdog's thread: run ``fn(*args)`` on the loop, in order."""
        self._inbox.append((fn, args))
        if not self._woken:
            self._woken = True
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: the daemon is stopping
                pass

    def _drain(self) -> None:
        self._woken = False  # first: a path posted from now on wakes the loop again
        while self._inbox:
            fn, args = self._inbox.popleft()
            try:
                fn(*args)
            except Exception:  # one path must not drop the rest of the burst
                log.exception("profd: handling a file event failed")

    def _inside(self, fn: Callable[[str], None]) -> Callable[[str], None]:
        def offer(path: str) -> None:
            if not nameable(path):
                log.warning(
                    "profd: ignoring %s: its name is not UTF-8, so no report or editor "
                    "can name it (rename it)",
                    ascii(path),
                )
            elif inside(path, self.root):
                fn(path)
            elif os.path.islink(path):
                log.warning("profd: ignoring %s: a symlink out of the watched folder", path)

        return offer

    def start(self) -> None:
        # os.walk (ours and watchdog's, on its own thread too) recurses once per folder level
        # (Python 3.11); a folder nested ~1,000 deep in the watched one raised RecursionError and
        # the daemon died at start. The walk ends where a path passes PATH_MAX (4,096 bytes: at
        # most ~2,050 levels), so this limit is never reached; 1 MB of thread stack is enough.
        sys.setrecursionlimit(max(sys.getrecursionlimit(), WALK_LEVELS))
        self.observer.daemon = True
        self.observer.start()
        self.rearm_if_needed()
        self._tick()

    def stop(self) -> None:
        if self._timer:
            self._timer.cancel()
        self.observer.stop()
        self.observer.join(timeout=5)

    def _tick(self) -> None:
        self.rearm_if_needed()
        self._look_into_unwatched()
        self._timer = self.loop.call_later(self.check_every, self._tick)

    def _look_into_unwatched(self, per_tick: int = 2000) -> None:
        """The folders inotify could not watch, looked into instead: each tick stats up to
        ``per_tick`` of them (in turn) and lists those whose entries changed (a file or folder
        made, renamed or deleted there); folders found there are looked into too. A folder whose
        mtime is within ``RACY_NS`` of the clock is listed again on the next tick."""
        got, new = _UNWATCHED.get(os.fsencode(self.root)), 0
        while got:
            d = os.fsdecode(got.popleft())
            if d not in self._unwatched:
                self._unwatched[d], new = None, new + 1
        if new:
            log.error(
                "profd: %d folder(s) in %s cannot be watched (the inotify watch limit, "
                "sysctl fs.inotify.max_user_watches, is reached?); traces there are found "
                "by looking every %.0f s or more",
                len(self._unwatched),
                self.root,
                self.check_every,
            )
        for _ in range(min(per_tick, len(self._unwatched))):
            d, seen = self._unwatched.popitem(last=False)
            try:
                now = os.stat(d).st_mtime_ns
            except OSError:
                continue  # gone
            self._unwatched[d] = now if time.time_ns() - now >= RACY_NS else None
            if now != seen:
                self.scan(d, False)
                try:
                    subs = [
                        e.path
                        for e in os.scandir(d)
                        if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
                    ]
                except OSError:
                    subs = []
                for sub in subs:  # made in an unwatched folder: no watch was even tried
                    self._unwatched.setdefault(sub, None)

    def rearm_if_needed(self) -> None:
        parent = os.path.dirname(self.root)
        if self._parent_watch is None and os.path.isdir(parent):
            try:
                self._parent_watch = self.observer.schedule(
                    self._handler, parent, recursive=False, event_filter=FOLDER_EVENTS
                )
            except OSError:
                self._parent_watch = None
        try:
            ino = os.stat(self.root).st_ino if os.path.isdir(self.root) else None
        except OSError:
            ino = None
        if ino == self._ino:
            return
        if self._root_watch is not None:
            try:
                self.observer.unschedule(self._root_watch)
            except (KeyError, OSError):
                pass
            self._root_watch = None
        self._ino = ino
        if ino is None:
            log.warning("profd: watched folder %s is gone; waiting for it to come back", self.root)
            return
        try:
            self._root_watch = self.observer.schedule(
                self._handler, self.root, recursive=True, event_filter=FILE_EVENTS
            )
        except OSError as e:
            if e.errno != errno.ENOSPC:
                log.error("profd: cannot watch %s: %s", self.root, e)
                self._ino = None
                return
            # At the inotify watch limit, a watchdog that raises for the whole tree (watchdog 6)
            # leaves it unwatched: the whole tree is looked into on each tick instead (the
            # folders a watchdog that skips them leaves unwatched are, too), saying so once.
            _note_unwatched(os.fsencode(self.root), os.fsencode(self.root))
            return
        if self.rearmed:
            log.warning("profd: watching %s again", self.root)
        self.rearmed += 1
        self.scan(self.root)

    def scan(self, top: str, below: bool = True) -> None:
        """Files already there (at start, or in a folder that just appeared); ``below``: in its
        subfolders too. A folder appearing is scanned alone: watchdog sends an event for each
        folder inside it (a tree moved in, ``mkdir -p``), and scanning each one's whole subtree
        again was quadratic (a tree 2,000 deep moved in froze the loop for minutes)."""
        for d, dirs, files in os.walk(top):
            dirs[:] = [x for x in dirs if not x.startswith(".")] if below else []
            for f in files:
                p = os.path.join(d, f)
                if matches(p):
                    self.on_path(p)
