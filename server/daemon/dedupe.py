"""One analysis per content at a time: concurrent requests for the same trace share one run.

A content is known by its key (``sha256:options``, index.options_fp) only once it is hashed.
A watched file whose size no report and no analysis in flight has cannot be a repeat, so its
analysis starts at once and the file is hashed beside it (``hash_beside``; the key comes later,
``adopt``); any other file is hashed first, and an analysis of its key already under way is
joined (``run``). Each run also tells which content it really read (``made_from``): a file
replaced between its hash and its read is a different content, or one nobody can name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import Awaitable, Callable, Iterator, Optional

from .hashing import Hasher
from .watcher import Sig, same_file

log = logging.getLogger("profd.dedupe")

# (encoded report, signature of the file the worker read or None when it changed under it)
Analysis = tuple[bytes, Optional[Sig]]
# (key the report is of, signature of that file), or None when that cannot be told
Made = Optional[tuple[str, Sig]]


class Dedupe:
    """The analyses in flight, by key and by file size."""

    def __init__(self, hasher: Hasher):
        self.hasher = hasher
        self._runs: dict[str, asyncio.Future] = {}  # key -> its run's (data, made)
        self._busy_sizes: Counter = Counter()  # file sizes of analyses in flight
        self._unhashed: dict[int, list[asyncio.Future]] = {}  # size -> hashes still running
        # Analyses whose report was not used: the file changed under them, so what they read
        # cannot be named (it is looked at again), or it was content already reported.
        self.discarded = 0

    def unused(self, analysis: asyncio.Future) -> None:
        """A finished analysis whose report nobody takes (a done callback)."""
        if not analysis.cancelled() and analysis.exception() is None:
            self.discarded += 1

    # ---- by size: could a file be a repeat? -------------------------------------------------
    def may_repeat(self, size: int) -> bool:
        """Could a file of ``size`` bytes hold content being analysed or hashed now?"""
        return size in self._busy_sizes or size in self._unhashed

    @contextlib.contextmanager
    def analysing(self, size: int) -> Iterator[None]:
        """Around one analysis of a file of ``size`` bytes."""
        self._busy_sizes[size] += 1
        try:
            yield
        finally:
            self._busy_sizes[size] -= 1
            if self._busy_sizes[size] <= 0:
                del self._busy_sizes[size]

    async def hash_beside(self, path: str, size: int) -> Optional[tuple[str, Sig]]:
        """``Hasher.hash_beside``, known meanwhile to ``may_repeat`` and ``hashes_done``."""
        hashing = asyncio.ensure_future(self.hasher.hash_beside(path, size))
        self._unhashed.setdefault(size, []).append(hashing)
        try:
            return await hashing
        finally:
            waiting = self._unhashed.get(size, [])
            if hashing in waiting:
                waiting.remove(hashing)
            if not waiting:
                self._unhashed.pop(size, None)

    async def hashes_done(self, size: int) -> None:
        """Until every file of ``size`` bytes hashed beside its analysis has its key (and its run
        is registered under it, so a repeat joins it)."""
        for t in list(self._unhashed.get(size, ())):
            await asyncio.wait([t])

    def hold(self, key: str, size: int, result: tuple[bytes, Made]) -> Callable[[], None]:
        """Keep a finished run's ``result`` for content ``key`` (a file of ``size`` bytes) known
        until the returned release is called: the error report of a file that did not parse waits
        ``quiet`` s before it is committed (it may still be being written), and a repeat of that
        content meanwhile must join this result, not analyse the content again."""
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(result)
        mine = key not in self._runs
        if mine:
            self._runs[key] = fut
        self._busy_sizes[size] += 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            if mine and self._runs.get(key) is fut:
                del self._runs[key]
            self._busy_sizes[size] -= 1
            if self._busy_sizes[size] <= 0:
                del self._busy_sizes[size]

        return release

    # ---- by key: share one run --------------------------------------------------------------
    async def run(
        self, key: str, path: str, hsig: Sig, start: Callable[[], Awaitable[Analysis]]
    ) -> tuple[bytes, Made]:
        """The analysis of content ``key`` (the file at ``path``, hashed as ``hsig``): joined when
        one is in flight, else ``start()``ed. A caller sharing another's run gets its ``made``
        only when that run read ``key``."""
        fut = self._runs.get(key)
        if fut is not None:
            data, made = await asyncio.shield(fut)
            return data, ((key, hsig) if made is not None and made[0] == key else None)
        fut = asyncio.get_running_loop().create_future()
        self._runs[key] = fut
        try:
            return await self._share(fut, path, key, hsig, start())
        finally:
            if self._runs.get(key) is fut:
                del self._runs[key]

    async def adopt(
        self, key: str, path: str, hsig: Sig, analysis: Awaitable[Analysis]
    ) -> tuple[bytes, Made]:
        """An analysis started before its file was hashed, now known as content ``key``: a
        repeat arriving from now on joins it (unless another run of ``key`` was first)."""
        fut = asyncio.get_running_loop().create_future()
        mine = key not in self._runs
        if mine:
            self._runs[key] = fut
        try:
            return await self._share(fut, path, key, hsig, analysis)
        finally:
            if mine and self._runs.get(key) is fut:
                del self._runs[key]

    async def _share(
        self, fut: asyncio.Future, path: str, key: str, hsig: Sig, analysis: Awaitable[Analysis]
    ) -> tuple[bytes, Made]:
        """Await ``analysis`` (of ``path``), tell what content it read, and hand the result to
        every caller waiting on ``fut``."""
        try:
            data, read = await analysis
            made = await self._made_from(path, key, hsig, read)
            if made is None:
                self.discarded += 1
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e)
                fut.exception()  # mark retrieved
            raise
        if not fut.done():
            fut.set_result((data, made))
        return data, made

    async def _made_from(self, path: str, key: str, hsig: Sig, read: Optional[Sig]) -> Made:
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
