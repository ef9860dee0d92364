"""The analysis pool over a long life (issue 32: a daemon analysing traces one after another holds
bounded memory). A worker's RSS creeps up by what the allocator keeps of each trace; one that idles
above the pool's ceiling once it has trimmed is replaced by a fresh process, off any task's path,
and the tasks after it run as before. (The tasks are ``exec`` of allocations: a stand-in for an
analysis' leftovers, whose sizes no test trace controls.)"""

import asyncio
import os

from profd.server.daemon.hashing import BACKGROUND_NICE
from profd.server.daemon.pool import WorkerPool, _rss_bytes


async def await_for(pred, timeout: float, what: str):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_worker_that_idles_fat_is_replaced_and_the_next_task_runs():
    pool = WorkerPool(1, True, 60.0, 2 << 30, retire_rss=0, retire_after_s=0.2)  # every one is "fat"
    try:
        await pool.run(exec, "pass")
        first = pool.all[0].proc.pid
        await await_for(lambda: pool.retired == 1, 10, "the fat worker retired")
        assert [w.proc.pid for w in pool.all] != [first] and len(pool.all) == 1
        assert await pool.run(eval, "6 * 7") == 42  # on the fresh worker
    finally:
        pool.close()


async def test_a_lean_worker_is_kept():
    pool = WorkerPool(1, True, 60.0, 2 << 30, retire_rss=1 << 40, retire_after_s=0.1)
    try:
        await pool.run(exec, "import builtins\nbuiltins.kept = bytes(8 << 20)")
        pid = pool.all[0].proc.pid
        await asyncio.sleep(0.5)
        assert pool.retired == 0 and pool.all[0].proc.pid == pid and _rss_bytes(pid) > 0
        assert await pool.run(eval, "len(kept)") == 8 << 20  # the same process: its state is there
    finally:
        pool.close()


async def test_a_busy_worker_is_not_retired_mid_task():
    """The look at the RSS comes while the worker runs its next task: it waits for that task."""
    pool = WorkerPool(1, True, 60.0, 2 << 30, retire_rss=0, retire_after_s=0.1)
    try:
        await pool.run(exec, "pass")
        pid = pool.all[0].proc.pid
        assert await pool.run(eval, "__import__('time').sleep(0.5) or 1") == 1  # over the 0.1 s look
        assert pool.retired == 0 or pool.all[0].proc.pid != pid  # never killed under the task
    finally:
        pool.close()


async def test_a_worker_holds_no_model_once_its_task_is_done():
    """An analysis's model and analysis (millions of objects for a big trace: ~0.1 s to free
    at 1 GB) are let go of after the worker has sent the report (pool._worker_main), off the
    diagnostics' path; what this checks is the end of that: after a real analysis in a real
    worker, the next task finds the worker's slot empty."""
    from profd.server.daemon.pool import analyze_task
    from profd.server.engine import Options

    from conftest import EXAMPLES

    trace = os.path.join(EXAMPLES, "seed_n4096_bf16.json.gz")
    pool = WorkerPool(1, True, 60.0, 2 << 30, retire_rss=1 << 40, retire_after_s=60)
    try:
        res = await pool.run(analyze_task, trace, Options())
        assert res.data and res.wall > 0
        held = await pool.run(eval, "__import__('profd.server.daemon.pool', fromlist=['_HELD'])._HELD")
        assert held == []
    finally:
        pool.close()


def test_analyze_for_jobs_hands_its_model_to_the_caller_to_free():
    from profd.server.engine import analyze_for_jobs

    from conftest import EXAMPLES

    hold: list = []
    report, _ = analyze_for_jobs(os.path.join(EXAMPLES, "seed_n4096_bf16.json.gz"), hold=hold)
    assert len(hold) == 1 and hold[0].report is report and len(hold[0].model.cpu) > 0


async def test_an_analysis_runs_at_a_lower_priority_than_the_daemon():
    """An analysis keeps both cores busy; the daemon's event loop answers hovers meanwhile, so the
    worker yields to it (and to the user's own programs): its niceness is the daemon's +
    ``BACKGROUND_NICE``."""
    pool = WorkerPool(1, True, 60.0, 2 << 30, retire_rss=1 << 40, retire_after_s=60)
    try:
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        # asked of the worker itself: the process that runs the task
        want = min(mine + BACKGROUND_NICE, 19)
        assert await pool.run(os.getpriority, os.PRIO_PROCESS, 0) == want
    finally:
        pool.close()
