"""How long ``profd-client analyze`` of a small trace takes, start-up and imports included, against
the interpreter's own start-up measured in the same run (issue 32: under 150 ms of wall time).

    python bench/startup.py                          # 20 rounds on examples/seed_n64_bf16.json.gz
    python bench/startup.py --python /work/main/.venv/bin/python   # and another checkout's, A/B

The cases run round-robin (one of each per round), so a load that comes and goes on a shared
machine falls on all of them alike; the table gives medians of wall time and of CPU time (user +
system of the child, from ``getrusage(RUSAGE_CHILDREN)``), the CPU time being the steadier number
on a loaded machine. Children run with bytecode caching allowed (``PYTHONDONTWRITEBYTECODE``
unset) after one warm-up round, as an installed profd runs from its compiled ``.pyc`` files.
``--importtime`` prints the modules an in-process analyze imports, slowest first (``-X importtime``).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import installed  # bench/ is this script's directory: on sys.path when run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TRACE = os.path.join(ROOT, "examples", "seed_n64_bf16.json.gz")


def analyze_cmd(python: str, trace: str) -> list[str]:
    return [
        python,
        "-m",
        "profd.client_cli.main",
        "analyze",
        "--no-daemon",
        "--format",
        "json",
        "--fail-on",
        "never",
        trace,
    ]


# The children run in an empty folder: the current folder is the default workspace, and from a
# big one (``/``) the source lookup would measure that folder, not the start-up.
_CWD = tempfile.TemporaryDirectory(prefix="profd-startup-")
CWD = _CWD.name


def child_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PROFD_NO_DAEMON"] = "1"
    return env


def run_once(cmd: list[str], env: dict) -> tuple[float, float]:
    """Wall and CPU seconds of one child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=CWD)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.decode(errors='replace')[-300:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def importtime(python: str, trace: str, top: int) -> None:
    """The modules an in-process analyze imports, by their own import time (best of 3 runs)."""
    best: dict[str, int] = {}
    for _ in range(3):
        p = subprocess.run(
            [python, "-X", "importtime", *analyze_cmd(python, trace)[1:]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=child_env(),
            cwd=CWD,
        )
        for line in p.stderr.decode().splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| +(\S+)", line)
            if m:
                best[m[3]] = min(best.get(m[3], 1 << 60), int(m[1]))
    print(f"# {python}: {len(best)} modules imported, {sum(best.values()) / 1e3:.1f} ms of imports in all")
    for name, t in sorted(best.items(), key=lambda kv: -kv[1])[:top]:
        print(f"#   {t / 1e3:7.2f} ms  {name}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="profd-client analyze start-up vs the interpreter's")
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument(
        "--python",
        action="append",
        default=[],
        help="also time this interpreter's profd (another checkout's venv); repeatable",
    )
    ap.add_argument(
        "--importtime",
        type=int,
        default=0,
        metavar="N",
        help="also print the N slowest imports of each interpreter's analyze",
    )
    ns = ap.parse_args(argv)
    env = child_env()
    py = installed.python()  # profd as a wheel installs it (the module doc of bench/installed.py)
    cases = [
        ("python -c pass", [py, "-c", "pass"]),
        ("python -c 'import orjson'", [py, "-c", "import orjson"]),
        ("analyze", analyze_cmd(py, ns.trace)),
        # this checkout's venv, where profd is an editable install: its finder runs at each start
        ("analyze (editable install)", analyze_cmd(sys.executable, ns.trace)),
    ]
    for other in ns.python:
        cases.append((f"analyze ({os.path.relpath(other, '/work')})", analyze_cmd(other, ns.trace)))
    for _, cmd in cases:  # warm-up: the .pyc files written, the trace in the page cache
        run_once(cmd, env)
    times: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in cases}
    for _ in range(ns.rounds):
        for label, cmd in cases:
            times[label].append(run_once(cmd, env))
    print(
        f"# {os.path.relpath(ns.trace, ROOT)}, {ns.rounds} rounds round-robin, {os.cpu_count()} cpus, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(f"# {installed.describe()}")
    base_wall = statistics.median(w for w, _ in times["python -c pass"])
    base_cpu = statistics.median(c for _, c in times["python -c pass"])
    hdr = f"{'case':<44} {'wall ms':>8} {'cpu ms':>8} {'wall/pass':>9} {'cpu/pass':>9}"
    print(hdr)
    print("-" * len(hdr))
    for label, _ in cases:
        w = statistics.median(x for x, _ in times[label])
        c = statistics.median(x for _, x in times[label])
        print(f"{label:<44} {w * 1e3:8.1f} {c * 1e3:8.1f} {w / base_wall:8.2f}x {c / base_cpu:8.2f}x")
    w = statistics.median(x for x, _ in times["analyze"])
    print(
        f"target: analyze of a small trace under 150 ms wall: {w * 1e3:.0f} ms "
        f"{'MET' if w < 0.150 else 'MISSED'}"
    )
    if ns.importtime:
        for exe in [py, *ns.python]:
            importtime(exe, ns.trace, ns.importtime)
    return 0


if __name__ == "__main__":
    sys.exit(main())
