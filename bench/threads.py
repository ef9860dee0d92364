"""Which thread runs when: one bench case (``cases.py MODE FILE``, in a fresh process) with each of
its threads' CPU sampled from /proc every ``--every`` seconds, and at the end each thread's time
run, time waited on the run queue and context switches (``schedstat``, ``status``). Linux only.

    python bench/threads.py bench/out/tinygpt_naive_x1000MB.json
    python bench/threads.py --mode profd-load --every 0.05 FILE

A row per sample, a column per thread (in the order they started; ``nice`` under each: the
LaterSha hash runs at 19), each the cores that thread used over the sample (1.0: a whole core).
It showed that nice 19 did not keep the hash out of a 1 GB load's way (issue 32): the hash took
0.4-1.0 of a core while the scanner got 0.5-0.8 and waited 0.5-0.9 s on the run queue.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int, tid: str) -> tuple[float, str]:
    """(CPU seconds, nice) of one thread."""
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2 :].split()  # past the command name, which may hold blanks
    return (int(fields[11]) + int(fields[12])) / TICK, fields[16]


def _sched(pid: int, tid: str) -> tuple[float, float, int, int]:
    """(seconds run, seconds waited on the run queue, voluntary and involuntary switches)."""
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        run, wait = (int(x) / 1e9 for x in f.read().split()[:2])
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    return run, wait, int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"])


def sample(cmd: list[str], every: float) -> None:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    t0 = time.perf_counter()
    cpu: dict[str, float] = {}
    nice: dict[str, str] = {}
    sched: dict[str, tuple[float, float, int, int]] = {}
    rows: list[tuple[float, dict[str, float]]] = []
    while proc.poll() is None:
        now = time.perf_counter() - t0
        used = {}
        try:
            tids = os.listdir(f"/proc/{proc.pid}/task")
        except OSError:
            break
        for tid in tids:
            try:
                total, nice[tid] = _stat(proc.pid, tid)
                sched[tid] = _sched(proc.pid, tid)
            except (OSError, ValueError, KeyError):  # the thread ended meanwhile
                continue
            used[tid] = total - cpu.get(tid, total)
            cpu[tid] = total
        rows.append((now, used))
        time.sleep(every)
    out = proc.stdout.read() if proc.stdout else b""
    print(out.decode(errors="replace").strip()[:200])
    order = sorted(cpu, key=int)
    print("     s " + " ".join(f"{t[-5:]:>6}" for t in order) + "    all")
    print("  nice " + " ".join(f"{nice[t]:>6}" for t in order))
    for now, used in rows:
        cores = [used.get(t, 0.0) / every for t in order]
        print(f"{now:6.2f} " + " ".join(f"{c:6.1f}" for c in cores) + f" {sum(cores):6.1f}")
    for t in order:
        run, wait, vol, inv = sched[t]
        print(
            f"thread {t}: ran {run:.2f} s, waited on the run queue {wait:.2f} s, switches {vol} voluntary, {inv} not"
        )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--mode", default="profd-full", help="a cases.py mode (default profd-full)")
    ap.add_argument("--every", type=float, default=0.1, help="seconds between samples (default 0.1)")
    args = ap.parse_args(argv)
    if not os.path.isdir("/proc/self/task"):
        print("threads.py reads /proc: Linux only", file=sys.stderr)
        return 2
    sample(
        [sys.executable, os.path.join(HERE, "cases.py"), args.mode, os.path.abspath(args.file)], args.every
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
