"""A progress line on stderr while traces are read: traces done, bytes of trace read, the current
file and how long it has been on it. Only when stderr is a terminal and not ``--quiet``; a ticker
thread redraws it so a single 1 GB trace shows it is alive. Cleared before anything else prints.

Bytes within the current file come from what this process has read so far (``rchar`` in
``/proc/self/io``, Linux; capped at the file's size): the engine needs no hook for it. Where that
is not available (another OS, or the daemon does the reading) the line shows whole files only."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Optional

from ..server.engine import size


class Progress:
    def __init__(self, files: list[str], enabled: Optional[bool] = None, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.files = files
        self.sizes = {}
        for f in files:
            try:
                self.sizes[f] = os.path.getsize(f)
            except OSError:
                self.sizes[f] = 0
        self.total = sum(self.sizes.values())
        self.done_bytes = 0
        self.done = 0
        self.current: Optional[str] = None
        self.since = time.monotonic()
        self._rchar0 = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._width = 0

    def __call__(self, path: str) -> None:
        """``path`` is starting: the one before it is done."""
        if not self.enabled:
            return
        with self._lock:
            if self.current is not None:
                self.done += 1
                self.done_bytes += self.sizes.get(self.current, 0)
            self.current = path
            self.since = time.monotonic()
            self._rchar0 = _rchar()
        if self._thread is None:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        self._draw()

    def _tick(self) -> None:
        while not self._stop.wait(0.25):
            self._draw()

    def _draw(self) -> None:
        with self._lock:
            n = len(self.files)
            cur = self.sizes.get(self.current, 0)
            read = self.done_bytes + min(cur, max(0, _rchar() - self._rchar0))
            frac = (read / self.total) if self.total else (self.done / max(1, n))
            bar = "#" * int(frac * 20)
            name = os.path.basename(self.current or "")
            line = (
                f"profd [{bar:<20}] {self.done}/{n} traces, {size(read)} of {size(self.total)}"
                f"; {name} ({size(self.sizes.get(self.current, 0))}, {time.monotonic() - self.since:.0f} s)"
            )
            pad = max(0, self._width - len(line))
            self._width = len(line)
            self.stream.write("\r" + line + " " * pad)
            self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()


def _rchar() -> int:
    """Bytes this process has read through read(2) so far; 0 where /proc is not there."""
    try:
        with open("/proc/self/io", "rb") as f:
            for line in f:
                if line.startswith(b"rchar:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
