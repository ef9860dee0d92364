"""Many rank traces of one job: map ``job.summarize_rank`` over them on a local process pool or an
existing Dask distributed cluster, and reduce the small summaries into job reports.

The per-rank step is the very function the single-trace path uses (one engine); only summaries
(a few KiB per rank) come back, never the rank reports, and they are reduced as they complete.
Dask distributed rather than Ray: the per-trace task is a plain Python function over a file on a
shared filesystem, which ``Client.map`` runs as-is on any existing Dask cluster (or on Dask's
``dask-ray`` / Kubernetes / SLURM deployments); install with ``pip install 'profd[cluster]'``.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Iterable, Iterator, Optional

from ...protocol.job import JobReport, RankSummary
from ..engine import group_jobs, reduce_job, summarize_rank

TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")


# One analysis at a time per worker process. The engine is pure Python (threads would only share
# the GIL), and CPython 3.11's ``ast.parse`` (statements.py) is not safe across threads: two
# concurrent parses can fail with "SystemError: AST constructor recursion depth mismatch",
# seen here on a Dask worker with two threads.
_ENGINE_LOCK = threading.Lock()


def summarize_rank_task(path: str, options=None) -> RankSummary:
    """``job.summarize_rank`` as a cluster task: the same function, serialised within a process."""
    with _ENGINE_LOCK:
        return summarize_rank(path, options)


def trace_files(folder: str) -> list[str]:
    """Every trace file under ``folder``, recursively, sorted; hidden files and folders skipped."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out += [
            os.path.join(dirpath, f)
            for f in sorted(filenames)
            if f.endswith(TRACE_SUFFIXES) and not f.startswith(".")
        ]
    return out


def trace_paths(paths: Iterable[str]) -> list[str]:
    """Files as given; folders expanded to the trace files under them (``trace_files``)."""
    out = []
    for p in paths:
        out += trace_files(p) if os.path.isdir(p) else [p]
    return out


def summarize_all(
    paths: list[str], options=None, cluster: Optional[str] = None, client=None, workers: Optional[int] = None
) -> Iterator[RankSummary]:
    """Rank summaries as they complete: on the Dask cluster at ``cluster`` (an address such as
    ``tcp://scheduler:8786``) or ``client`` when given, else on a local pool of ``workers`` processes."""
    if client is not None or cluster:
        yield from _dask(paths, options, cluster, client)
        return
    workers = workers or min(len(paths), os.cpu_count() or 1)
    if workers <= 1 or len(paths) <= 1:
        for p in paths:
            yield summarize_rank(p, options)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(summarize_rank, p, options): p for p in paths}
        for f in as_completed(futures):
            try:
                yield f.result()
            except Exception as e:  # a task that died: say which trace and why, go on with the rest
                yield _failed(futures[f], e)


def _failed(path: str, e: BaseException) -> RankSummary:
    return RankSummary(path=path, error=f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)


def _dask(paths, options, address, client) -> Iterator[RankSummary]:
    try:
        from distributed import Client, as_completed as dask_completed
    except ImportError as e:  # pragma: no cover - depends on the optional extra
        raise RuntimeError("--cluster needs Dask distributed: pip install 'profd[cluster]'") from e
    own = client is None
    if own:
        client = Client(address)
    try:
        # pure=False: the same path may hold a new trace next time; key by path for readable dashboards
        futures = client.map(
            summarize_rank_task,
            paths,
            options=options,
            pure=False,
            key=[f"profd-summary-{i}" for i in range(len(paths))],
        )
        path_of = {f.key: p for f, p in zip(futures, paths)}
        for fut in dask_completed(futures):
            try:
                s = fut.result()
            except Exception as e:  # the task raised on its worker: name the trace and the reason
                s = _failed(path_of[fut.key], e)
            fut.release()  # nothing stays on the cluster once the summary is here
            yield s
    finally:
        if own:
            client.close()


def summarize_paths(
    paths: Iterable[str],
    options=None,
    cluster: Optional[str] = None,
    client=None,
    workers: Optional[int] = None,
) -> list[RankSummary]:
    """Every trace's summary (files, or folders' traces), from the pool or the cluster; a trace the
    task failed on gives a summary carrying ``error``. Paths are sent absolute: a worker resolves
    a relative path against its own working directory."""
    files = [os.path.abspath(f) for f in trace_paths(paths)]
    return list(summarize_all(files, options, cluster=cluster, client=client, workers=workers))


def reduce_summaries(summaries: Iterable[RankSummary]) -> list[JobReport]:
    return [reduce_job(g) for g in group_jobs(summaries)]


def analyze_job_paths(
    paths: Iterable[str],
    options=None,
    cluster: Optional[str] = None,
    client=None,
    workers: Optional[int] = None,
) -> list[JobReport]:
    """The job reports of the traces (files or folders), computed on the pool or the cluster."""
    return reduce_summaries(summarize_paths(paths, options, cluster=cluster, client=client, workers=workers))
