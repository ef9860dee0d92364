"""The content half of a report's key: sha256 of a trace file, never on the event loop.

A file is hashed on the daemon's I/O threads; beside a running analysis a big one is hashed in a
child process at a lower priority instead (a thread of the daemon would compete with the event
loop for CPU while the analysis already keeps the cores busy). Each hash also gives the signature
(``watcher.Sig``) of the very file it read, so a rename over the path meanwhile cannot mix two
contents.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import hashlib
import os
import sys
from typing import Optional

from .watcher import Sig, sig_of

BACKGROUND_MIN_BYTES = 64 << 20  # below this the hash takes a few ms: a thread does it
# How much the daemon's work in other processes (this hash, the analyses: pool._lower_priority)
# yields to its event loop (os.nice): the loop answers the editor.
BACKGROUND_NICE = 10

_CHILD = (
    "import hashlib, os, sys\n"
    f"os.nice({BACKGROUND_NICE})\n"
    "h = hashlib.sha256()\n"
    "with open(sys.argv[1], 'rb') as f:\n"
    "    st = os.fstat(f.fileno())\n"
    "    while chunk := f.read(1 << 20):\n"
    "        h.update(chunk)\n"
    "print(h.hexdigest(), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)\n"
)


def sha_file(path: str) -> tuple[str, Sig]:
    """sha256 of the file at ``path`` and the signature of the very file it read (a rename over
    ``path`` meanwhile does not mix two contents)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest(), sig_of(st)


class Hasher:
    """Hashes trace files off the loop, on the I/O threads ``io`` (shared with the core's other
    stats and lookups)."""

    def __init__(self, io: cf.Executor):
        self._io = io

    async def hash(self, path: str) -> Optional[tuple[str, Sig]]:
        """(sha256, signature of the file read), or None when it is gone."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._io, sha_file, path)
        except OSError:
            return None

    async def hash_beside(self, path: str, size: int) -> Optional[tuple[str, Sig]]:
        """``hash(path)`` while an analysis runs: in a niced child for a file of ``size`` bytes
        over BACKGROUND_MIN_BYTES."""
        if size < BACKGROUND_MIN_BYTES:
            return await self.hash(path)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                "-c",
                _CHILD,
                path,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError:
            return await self.hash(path)
        try:
            out, _ = await proc.communicate()
        except asyncio.CancelledError:
            if proc.returncode is None:
                proc.kill()
            raise
        digest, *st = out.decode(errors="replace").split() or [""]
        if proc.returncode != 0 or len(digest) != 64 or len(st) != 4:
            return None  # gone or unreadable
        return digest, tuple(int(x) for x in st)
