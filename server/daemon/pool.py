"""The analysis processes: a fixed pool of spawned workers, each running one task at a time.

The event loop never parses a trace: ``WorkerPool.run(fn, *args)`` sends a module-level function
and its arguments to an idle process and waits for the result in a thread, watching the task's
wall time and the process's memory; a task over either budget ends alone (its process is killed
and replaced) with a clear ``Budget`` error. ``analyze_task`` is the analysis itself, as it runs
in a worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import gc
import logging
import multiprocessing
import os
import re
import threading
import time
from typing import TYPE_CHECKING, NamedTuple, Optional

from ...protocol import types as T
from ...protocol.job import RankSummary
from .hashing import BACKGROUND_NICE
from .index import relabel
from .watcher import Sig, same_file, sig_of, signature

if TYPE_CHECKING:  # the engine is imported in the workers (_worker_init), not by this module
    from ..engine import Options

log = logging.getLogger("profd.pool")
_gc_lock = threading.Lock()
# The last task's model and analysis: let go of once its result is sent (_worker_main), so the
# diagnostics do not wait for millions of objects to be freed (~0.1 s for a 1 GB trace)
_HELD: list = []
_tasks = 0  # tasks running in this process (the GC stays off while any does)


class TaskResult(NamedTuple):
    """One analysis as its worker hands it back: the report encoded once, with what the daemon
    needs of it before it decodes it."""

    data: bytes  # the encoded report
    sources: list[str]  # the files its findings and hot lines sit on (line_sources), read next
    summary: Optional[bytes]  # the encoded rank summary of a multi-process job's rank, else None
    wall: float  # s in the worker
    cpu: float  # CPU s
    start: float  # time.time() at its start
    read: Optional[Sig]  # the signature of the file read, None when it changed (_analyze_held)


def line_sources(report: T.Report) -> list[str]:
    """The local files whose lines the report's findings and hot lines are shown on."""
    out = [loc.path for d in report.diagnostics for loc in [d.location, *d.related] if loc.line and loc.path]
    return out + [h.path for h in report.hot_lines]


def analyze_task(path: str, options: Options) -> TaskResult:
    """One analysis, timed in the worker. The cyclic GC stays off until the result is on its
    way: its first pass after a big analysis (the engine runs with it off) took ~10-20 ms per
    250 MB of trace, and it would run on the first allocation after the return, i.e. while the
    pool pickles the result."""
    global _tasks

    with _gc_lock:
        _tasks += 1
        gc.disable()
    try:
        start, t0, c0 = time.time(), time.perf_counter(), time.process_time()
        report, summary, read = _analyze_held(path, options)
        return TaskResult(
            T.encode(report),
            line_sources(report),
            T.encode(summary) if summary is not None else None,
            time.perf_counter() - t0,
            time.process_time() - c0,
            start,
            read,
        )
    finally:
        with _gc_lock:
            _tasks -= 1
        t = threading.Timer(0.1, _gc_on_when_idle)
        t.daemon = True
        t.start()


def summarize_task(path: str, options: Options) -> RankSummary:
    """The rank summary of the trace at ``path`` (for a report whose summary is not kept)."""
    from ..engine import summarize_rank

    return summarize_rank(path, options)


_FD_DIR = "/proc/self/fd"  # Linux: opening /proc/self/fd/N opens the file N already has open


def _analyze_held(path: str, opts: Options) -> tuple[T.Report, Optional[RankSummary], Optional[Sig]]:
    """The report of the file at ``path`` (with its rank summary when it is a rank of a
    multi-process job) and that file's signature: the file is opened once and the engine reads
    that very file (through /proc/self/fd), so a rename over ``path`` meanwhile cannot make the
    report another content's. The signature is None when the file was written in place while it
    was read (or where the descriptor cannot be reopened and it changed)."""
    from ..engine import analyze_for_jobs

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return (*analyze_for_jobs(path, opts), None)  # the engine says what is wrong with it
    try:
        before = _fd_sig(fd)
        via = f"{_FD_DIR}/{fd}" if os.path.isdir(_FD_DIR) else path
        _HELD.clear()  # at most the last analysis is held (one run outside a worker too)
        report, summary = analyze_for_jobs(via, opts, hold=_HELD)
        report = relabel(report, path)
        if summary is not None:
            summary.path = path
        if via == path and not same_file(signature(path), before):
            return report, summary, None
        return report, summary, before if same_file(_fd_sig(fd), before) else None
    finally:
        os.close(fd)


def _fd_sig(fd: int) -> Sig:
    return sig_of(os.fstat(fd))


def _gc_on_when_idle() -> None:
    with _gc_lock:
        if _tasks == 0:
            gc.enable()


def _cap_memory(budget: int) -> None:
    """A hard ceiling on the process's heap (RLIMIT_DATA: brk and private writable mappings), a
    quarter above the budget the daemon polls for: the poll (every 50 ms) gives the friendly
    ending, the ceiling stops an allocation faster than the poll (one realloc can double a
    buffer) with a MemoryError before it takes the machine's memory."""
    try:
        import resource

        cap = budget + budget // 4 + (256 << 20)  # the interpreter and the engine: ~100 MB
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    except (ImportError, ValueError, OSError):  # not POSIX, or not allowed: the poll still holds
        pass


def _worker_init(quiet_stderr: bool, mem_bytes: int = 0) -> None:
    """In each analysis process: let go of the daemon's stdio (an editor waits for those pipes to
    close), exit when the daemon is gone (even after kill -9: nothing else would tell us), cap
    its memory, and import the engine before the first trace."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2) if quiet_stderr else (0, 1):
        os.dup2(null, fd)
    os.close(null)
    parent = os.getppid()

    def watch_parent():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch_parent, name="profd-parent-watch", daemon=True).start()
    _lower_priority()
    if mem_bytes:
        _cap_memory(mem_bytes)
    try:  # every worker imports the engine now, not on its first trace (~50 ms on the way)
        from .. import engine  # noqa: F401
    except Exception:  # pragma: no cover - the task itself will say what is wrong
        pass


def _lower_priority() -> None:
    """An analysis keeps the cores busy (its reader and scanner threads, the passes beside the
    rules), and at the daemon's own priority the event loop that answers a hover waited its turn
    behind them. Niced, the scheduler runs the loop as soon as a request wakes it; the analysis
    loses nothing on an otherwise idle machine, and yields to the user's own programs too.
    Measured (``make bench-daemon``, 1 GB, seven runs each alternating): hover p95 5.6-9.4 ->
    3.5-4.8 ms, p99 7.1-13.0 -> 5.1-7.2 ms (one run of seven 15.0 ms, the machine slowed); the
    daemon's own share of the publish unchanged (0.009-0.028 s)."""
    try:
        os.nice(BACKGROUND_NICE)
    except (AttributeError, OSError):  # pragma: no cover - no nice (Windows), or refused
        pass


def _worker_main(conn, quiet_stderr: bool, mem_bytes: int = 0) -> None:
    """An analysis process: tasks from the pipe, one at a time, until the daemon says stop (or
    its memory ceiling is hit: it answers so and exits, its heap goes with it)."""
    _worker_init(quiet_stderr, mem_bytes)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            fn, args = task
            out = ("ok", fn(*args))
        except MemoryError:
            out = ("memory", None)
        except BaseException as e:  # analyze_or_error catches trace errors; this is a bug
            out = ("error", f"{type(e).__name__}: {e}")
        try:
            conn.send(out)
        except (OSError, ValueError):
            return
        if out[0] == "memory":
            return
        _HELD.clear()
        release_memory()


def release_memory() -> bool:
    """Give the memory of the task just done back to the system, once its result is sent (off
    the diagnostics' path). Freed blocks stay in the C allocator's heap and thread arenas
    otherwise: a worker idled at ~310 MB after each 1 GB trace, ~90 MB after this (60-100 ms,
    bench/daemon_bench.py --series). The cycles the task left are collected first so that their
    memory goes too. False where the C library cannot trim (not glibc)."""
    from ..engine import trim_malloc  # the worker imported the engine at its start

    gc.collect()
    return trim_malloc()


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def default_memory_budget(workers: int) -> int:
    """Bytes one analysis may hold: half the machine's memory shared by the workers, at least 1 GiB
    (the engine's peak is about the trace's inflated size)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        total = 8 << 30
    return max(1 << 30, total // 2 // max(1, workers))


# How a budget's error names its budget (WorkerProcess.run writes them): "over the 400 MB memory budget",
# "over the 300 s budget".
BUDGET = re.compile(r"over the (\d+) (MB memory|s) budget")


class Budget(Exception):
    """An analysis ended by the daemon: over its time or memory budget, or its process died."""


class WorkerProcess:
    """One spawned analysis process and the pipe to it; one task at a time. Waiting for a result
    (in a thread, never on the loop) also watches the task's wall time and the process's RSS and
    kills the process the moment either is over budget: that task alone ends, with a clear error."""

    def __init__(self, ctx, quiet_stderr: bool, mem_bytes: int = 0):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_main, args=(child, quiet_stderr, mem_bytes), daemon=True, name="profd-analysis"
        )
        self.proc.start()
        child.close()

    @property
    def alive(self) -> bool:
        return self.proc.exitcode is None

    def run(self, task: tuple, time_s: float, mem_bytes: int):
        """The result of ``task`` ((fn, args)); Budget when it was ended."""
        t0 = time.monotonic()
        try:
            self.conn.send(task)
            while not self.conn.poll(0.05):
                if not self.proc.is_alive():
                    self.kill()
                    raise Budget("the analysis process died (out of memory?)")
                took = time.monotonic() - t0
                if took > time_s:
                    self.kill()
                    raise Budget(
                        f"analysis stopped after {took:.0f} s, over the {time_s:.0f} s "
                        "budget per analysis (profd serve --analysis-timeout)"
                    )
                rss = _rss_bytes(self.proc.pid)
                if rss > mem_bytes:
                    self.kill()
                    raise Budget(
                        f"analysis stopped at {rss >> 20} MB, over the "
                        f"{mem_bytes >> 20} MB memory budget per analysis "
                        "(profd serve --analysis-mb)"
                    )
            kind, value = self.conn.recv()
        except (EOFError, OSError):
            self.kill()
            raise Budget("the analysis process died (out of memory?)") from None
        if kind == "memory":  # its ceiling (_cap_memory) stopped an allocation; it has exited
            self.kill()
            raise Budget(
                f"analysis stopped allocating over the {mem_bytes >> 20} MB memory "
                "budget per analysis (profd serve --analysis-mb)"
            )
        if kind != "ok":
            raise Budget(f"the analysis failed: {value}")
        return value

    def kill(self) -> None:
        if self.proc.exitcode is None:
            try:
                self.proc.kill()
            except OSError:
                pass
        self.proc.join(5)
        self.conn.close()


# A worker idling above this RSS once it has trimmed (release_memory) is replaced by a fresh one.
# A worker idles at 55-120 MB after traces of 250 MB to 1 GB, creeping up 1-4 MB per trace (what
# the allocator's arenas keep: bench/daemon_bench.py --series 10): the creep is what the bound
# stops, so a daemon analysing traces for days holds at most this per worker between analyses.
RETIRE_RSS = 256 << 20
RETIRE_AFTER_S = 2.0  # the look at a worker's RSS, once it has had time to trim


class WorkerPool:
    """A fixed number of analysis processes. A worker ended by its budget is replaced; the others
    and their tasks go on (a ProcessPoolExecutor breaks every task when one process dies). A
    worker that stays fat while idle is retired and replaced (RETIRE_RSS), off any task's path."""

    def __init__(
        self,
        n: int,
        quiet_stderr: bool,
        time_s: float,
        mem_bytes: int,
        retire_rss: int = RETIRE_RSS,
        retire_after_s: float = RETIRE_AFTER_S,
    ):
        self.ctx = multiprocessing.get_context("spawn")
        self.quiet = quiet_stderr
        self.time_s, self.mem_bytes = time_s, mem_bytes
        self.retire_rss, self.retire_after_s = retire_rss, retire_after_s
        self.retired = 0  # workers replaced for their idle RSS (logged, and read by the tests)
        self.all: list[WorkerProcess] = []
        self.busy: set[WorkerProcess] = set()
        self.idle: asyncio.Queue = asyncio.Queue()
        self.threads = cf.ThreadPoolExecutor(max_workers=n, thread_name_prefix="profd-wait")
        self.closed = False
        for _ in range(n):
            self._add()

    def _add(self) -> None:
        w = WorkerProcess(self.ctx, self.quiet, self.mem_bytes)
        self.all.append(w)
        self.idle.put_nowait(w)

    async def run(self, fn, *args):
        """``fn(*args)`` (a module-level function) in a worker, within the budgets."""
        task = (fn, args)
        loop = asyncio.get_running_loop()
        while (w := await self.idle.get()) not in self.all:
            pass  # retired while it waited in the queue
        self.busy.add(w)
        try:
            return await loop.run_in_executor(self.threads, w.run, task, self.time_s, self.mem_bytes)
        finally:
            self.busy.discard(w)
            if w.alive and not self.closed:
                self.idle.put_nowait(w)
                loop.call_later(self.retire_after_s, self._retire_if_fat, w)
            else:
                self.all.remove(w)
                if not self.closed:
                    self._add()

    def _retire_if_fat(self, w: WorkerProcess) -> None:
        """Replace the idle worker ``w`` when it holds more than ``retire_rss`` after trimming."""
        if self.closed or w in self.busy or w not in self.all or not w.alive:
            return
        rss = _rss_bytes(w.proc.pid)
        if rss <= self.retire_rss:
            return
        log.info("profd: analysis process %d idles at %d MB: replaced by a fresh one", w.proc.pid, rss >> 20)
        self.all.remove(w)  # its entry in the idle queue is skipped (run)
        self.threads.submit(w.kill)  # off the loop: kill then join
        self.retired += 1
        self._add()

    def close(self) -> None:
        """Every process ends now, tasks in flight included (their waits raise Budget)."""
        self.closed = True
        for w in list(self.all):
            if w.proc.exitcode is None:
                w.proc.kill()
        for w in list(self.all):
            w.proc.join(5)
        self.threads.shutdown(wait=False, cancel_futures=True)
