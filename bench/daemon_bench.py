"""The daemon under load: hover latency while it analyses a big trace, and watch latency.

    python bench/daemon_bench.py                                    # the 1 GB tiling
    python bench/daemon_bench.py --big bench/out/tinygpt_naive_x250MB.json

A real ``profd serve --stdio`` (default settle/quiet, 2 workers) watches a temp folder and is
driven over its stdio pipes by a minimal JSON-RPC client in this process:

1. ``examples/tinygpt_naive.json.gz`` is dropped into the folder (written to a dot-name, then
   renamed); once ``profd/reportReady`` arrives, ``profd/report`` gives its hot lines and the
   hottest one under ``examples/src`` is the hover target (checked to answer).
2. The big trace is put in the folder under a dot-name (hard link, or a copy with ``--copy``) and
   ``os.rename``d into place: that instant is when the file is complete. From then on a hover on
   the target line is sent every ``--every`` ms (one at a time) until the big trace's
   ``profd/reportReady`` arrives (it follows its ``textDocument/publishDiagnostics``).
3. The daemon is stopped and the same file is analysed in a fresh subprocess
   (``engine.analyze_file``, imports excluded: the daemon's workers are warm) for the analysis
   time that the publish latency is compared with.

4. With ``--series N``: N traces of one content each (``--series-trace``, made distinct by leading
   whitespace, so none is a re-drop the store answers) are dropped one after another, each once
   the previous one's report is published; after each, every process's RSS in the daemon's tree
   (issue 32: bounded for a daemon analysing traces one after another).

With ``--loop-stalls`` the daemon runs under asyncio's debug mode, which logs each callback that
holds its event loop over 5 ms: the ones during the big analysis are listed (a load-independent
account of the daemon's own share of a hover's delay; the debug mode costs a little itself).

Printed: hover count / p50 / p95 / p99 / max (ms) during the big analysis (target p99 <= 10 ms),
beside the same hovers sent for ``--idle`` s before it with nothing analysed (this machine's floor:
on a loaded machine the scheduler's delays are in both), with the daemon's CPU per hover (what a
stream of hovers takes from the core the analysis could use);
publish latency (rename -> diagnostics at the client), the reference analysis time, and
overhead = latency - analysis (target <= 0.2 s); the daemon's own timings from its log; peak RSS of
the daemon and its pool workers (``VmHWM`` each, and the sampled sum of ``VmRSS`` over the tree).
Benchmarks print numbers; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(ROOT, "examples", "src")
SMALL = os.path.join(ROOT, "examples", "tinygpt_naive.json.gz")
DEFAULT_BIG = os.path.join(HERE, "out", "tinygpt_naive_x1000MB.json")


def uri(path: str) -> str:
    return Path(path).as_uri()


# ``--loop-stalls``: the daemon runs with asyncio's debug mode logging every callback of the event
# loop that holds it over 5 ms (what delays a hover whatever the machine's load)
STALL_MS = 5
STALLS = f"""
import asyncio.base_events as b, runpy, sys
init = b.BaseEventLoop.__init__
def debug_init(self, *a, **k):
    init(self, *a, **k)
    self.set_debug(True)
    self.slow_callback_duration = {STALL_MS / 1000}
b.BaseEventLoop.__init__ = debug_init
sys.argv[0] = "profd"
runpy.run_module("profd.server.daemon.cli", run_name="__main__")
"""
STALL_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) WARNING asyncio: Executing (.*) took ([\d.]+) seconds"
)


async def serve(
    prefix: str, tmp: str | None, stalls: bool = False
) -> tuple[asyncio.subprocess.Process, str, str, str]:
    """A real ``profd serve --stdio`` (default settle/quiet, 2 workers, INFO log) watching a fresh
    temp folder: (process, the folder, its watch/, its daemon.log). ``stalls``: under asyncio's
    debug mode, logging the loop's callbacks over STALL_MS."""
    work = tempfile.mkdtemp(prefix=prefix, dir=tmp)
    watch, state = os.path.join(work, "watch"), os.path.join(work, "state")
    os.makedirs(watch)
    log_path = os.path.join(work, "daemon.log")
    with open(log_path, "wb") as log:  # the daemon writes to its own copy of the descriptor
        proc = await asyncio.create_subprocess_exec(
            *[sys.executable, *(["-c", STALLS] if stalls else ["-m", "profd.server.daemon.cli"])],
            *["serve", "--stdio", "--watch", watch],
            *["--workspace", SRC, "--state", state, "--log-level", "INFO"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=ROOT,
            limit=64 << 20,
        )
    return proc, work, watch, log_path


# ---- a minimal LSP client over the daemon's stdio ----------------------------------------------
class Client:
    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.next_id = 0
        self.waiting: dict[int, asyncio.Future] = {}
        self.ready: dict[str, tuple[float, dict]] = {}  # trace path -> (t, reportReady params)
        self.diags: list[tuple[float, str, int]] = []  # (t, uri, count) per publishDiagnostics
        self.progress: list[tuple[float, str]] = []
        self.events: dict[str, asyncio.Event] = {}
        self.reader = asyncio.ensure_future(self._read())

    def _send(self, obj: dict) -> None:
        body = json.dumps(obj).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def request(self, method: str, params, timeout: float = 60.0):
        self.next_id += 1
        i = self.next_id
        fut = asyncio.get_running_loop().create_future()
        self.waiting[i] = fut
        self._send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        return await asyncio.wait_for(fut, timeout)

    def notify(self, method: str, params) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def initialize(self, capabilities: dict) -> None:
        """The LSP handshake, then a status request: the daemon answers requests from here on."""
        await self.request(
            "initialize", {"processId": os.getpid(), "rootUri": uri(ROOT), "capabilities": capabilities}
        )
        self.notify("initialized", {})
        await self.request("profd/status", {})

    async def close(self) -> None:
        """LSP shutdown + exit; SIGTERM, then SIGKILL, when the daemon does not go."""
        proc = self.proc
        try:
            await self.request("shutdown", None, timeout=10)
            self.notify("exit", None)
            proc.stdin.close()
            await asyncio.wait_for(proc.wait(), 10)
        except Exception:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except asyncio.TimeoutError:
                    proc.kill()
        self.reader.cancel()

    def ready_event(self, path: str) -> asyncio.Event:
        return self.events.setdefault(path, asyncio.Event())

    async def _read(self) -> None:
        r = self.proc.stdout
        while True:
            length = None
            while True:
                line = await r.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            msg = json.loads(await r.readexactly(length))
            now = time.perf_counter()
            method = msg.get("method")
            if method is None:  # a response
                fut = self.waiting.pop(msg.get("id"), None)
                if fut and not fut.done():
                    if "error" in msg:
                        fut.set_exception(RuntimeError(msg["error"]))
                    else:
                        fut.set_result(msg.get("result"))
            elif "id" in msg:  # a request from the server (workDoneProgress/create)
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            elif method == "textDocument/publishDiagnostics":
                p = msg["params"]
                self.diags.append((now, p["uri"], len(p["diagnostics"])))
            elif method == "profd/reportReady":
                p = msg["params"]
                self.ready[p["path"]] = (now, p)
                self.ready_event(p["path"]).set()
            elif method == "$/progress":
                self.progress.append((now, msg["params"]["value"].get("kind", "?")))


# ---- the daemon's process tree ---------------------------------------------------------------
def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def _stat(pid) -> list[str]:
    """``/proc/PID/stat``'s fields after the command's name (which may hold spaces): state, ppid, ..."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _cpu_of(pid: int) -> float:
    """``pid``'s CPU time so far (user + system, all its threads), in s."""
    parts = _stat(pid)
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the daemon, its pool workers, their resource tracker)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            ppid = int(_stat(d)[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


class RssSampler(threading.Thread):
    """Sum of VmRSS over the daemon's tree every ``every`` s; VmHWM of each process seen. The
    tree is listed again only every ``relist`` s: walking /proc holds this process's GIL for
    milliseconds, which would show up in the hover latencies measured here."""

    def __init__(self, pid: int, every: float = 0.5, relist: float = 5.0):
        super().__init__(daemon=True, name="rss-sampler")
        self.pid, self.every, self.relist = pid, every, relist
        self.peak_sum = 0
        self.hwm: dict[int, int] = {}
        self.pids: list[int] = [pid]
        self.listed = 0.0
        self.stop_ev = threading.Event()

    def sample(self, relist: bool = False) -> None:
        if relist or time.monotonic() - self.listed > self.relist:
            self.pids, self.listed = tree(self.pid), time.monotonic()
        total = 0
        for p in self.pids:
            st = _status(p)
            total += st.get("VmRSS", 0)
            if "VmHWM" in st:
                self.hwm[p] = max(self.hwm.get(p, 0), st["VmHWM"])
        self.peak_sum = max(self.peak_sum, total)

    def run(self) -> None:
        while not self.stop_ev.wait(self.every):
            self.sample()


# ---- helpers ------------------------------------------------------------------------------------
def pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def place(src: str, folder: str, name: str, copy: bool) -> tuple[str, float]:
    """Put ``src`` at ``folder/name`` complete in one step: a dot-name first (ignored by the
    watcher), then ``os.rename``. Returns (path, perf_counter just after the rename)."""
    tmp = os.path.join(folder, "." + name + ".part")
    dst = os.path.join(folder, name)
    linked = False
    if not copy:
        try:
            os.link(src, tmp)
            linked = True
        except OSError:
            pass
    if not linked:
        shutil.copyfile(src, tmp)
    os.rename(tmp, dst)
    return dst, time.perf_counter()


def place_variant(src: str, folder: str, name: str, k: int) -> tuple[str, float]:
    """``src`` with ``k`` leading spaces (the same trace, another content hash) put at
    ``folder/name`` complete in one step, as ``place``."""
    tmp = os.path.join(folder, "." + name + ".part")
    dst = os.path.join(folder, name)
    with open(src, "rb") as f, open(tmp, "wb") as out:
        out.write(b" " * k)
        shutil.copyfileobj(f, out, 16 << 20)
    os.rename(tmp, dst)
    return dst, time.perf_counter()


def rss_of(pids: list[int]) -> dict[int, int]:
    return {p: _status(p).get("VmRSS", 0) for p in pids}


async def series(c: Client, watch: str, ns, pid: int, timeout: float) -> list[dict]:
    """``ns.series`` distinct copies of ``ns.series_trace`` dropped one after another: per trace,
    the publish latency and, once published, the RSS of each process of the daemon's tree."""
    rows = []
    base = os.path.basename(ns.series_trace).split(".")[0]
    for k in range(1, ns.series + 1):
        name = f"{base}_series{k}.json"
        ev = c.ready_event(os.path.join(watch, name))
        path, t = place_variant(ns.series_trace, watch, name, k)
        await asyncio.wait_for(ev.wait(), timeout)
        ready_t, ready = c.ready[path]
        await asyncio.sleep(0.3)  # the worker's GC back on (0.1 s after its task), the store written
        rows.append(
            {
                "latency": ready_t - t,
                "error": ready.get("error"),
                "rss": rss_of(tree(pid)),
            }
        )
        print(f"#   series {k}/{ns.series} published +{rows[-1]['latency']:.2f} s", flush=True)
    return rows


REF_CHILD = r"""
import gc, json, os, sys, time
from profd.server.engine import Options, analyze_file
path, ws = sys.argv[1], sys.argv[2]
t, c = time.perf_counter(), time.process_time()
rep = analyze_file(path, Options(workspace=[ws]))
wall, cpu = time.perf_counter() - t, time.process_time() - c
hwm = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        hwm = int(line.split()[1]) * 1024
print(json.dumps({"s": wall, "cpu": cpu, "hwm": hwm, "diagnostics": len(rep.diagnostics),
                  "hot_lines": len(rep.hot_lines)}))
"""


def reference_analysis(path: str) -> dict:
    p = subprocess.run([sys.executable, "-c", REF_CHILD, path, SRC], capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---- the run ------------------------------------------------------------------------------------
async def run(ns) -> dict:
    proc, work, watch, log_path = await serve("profd-daemon-bench-", ns.tmp, ns.loop_stalls)
    c = Client(proc)
    res: dict = {"work": work, "log": log_path}
    sampler = RssSampler(proc.pid)
    sampler.start()
    try:
        t0 = time.perf_counter()
        await c.initialize(
            {
                "window": {"workDoneProgress": True},
                "textDocument": {"hover": {"contentFormat": ["markdown"]}, "publishDiagnostics": {}},
            }
        )
        res["start_s"] = time.perf_counter() - t0

        # 1. the small real trace, and a line with a hover
        small, t_small = place(SMALL, watch, os.path.basename(SMALL), copy=True)
        await asyncio.wait_for(c.ready_event(small).wait(), 120)
        res["small_latency_s"] = c.ready[small][0] - t_small
        rep = await c.request("profd/report", {"path": small})
        hots = [h for h in rep["hotLines"] if h["path"].startswith(SRC + os.sep)]
        if not hots:
            raise SystemExit("no hot line under examples/src in the small report")
        h = max(hots, key=lambda x: (x["gpuUs"], x["cpuTotalUs"]))
        target = {
            "textDocument": {"uri": uri(h["path"])},
            "position": {"line": h["line"] - 1, "character": 4},
        }
        hv = await c.request("textDocument/hover", target)
        if not hv or "profd" not in hv["contents"]["value"]:
            raise SystemExit(f"no hover on {h['path']}:{h['line']}: {hv!r}")
        res["target"] = f"{os.path.relpath(h['path'], ROOT)}:{h['line']}"
        for _ in range(20):  # warm both ends
            await c.request("textDocument/hover", target)
        sampler.sample(relist=True)  # the pool workers are up by now
        # the same hovers with nothing analysed: this machine's floor, which a loaded machine raises
        idle: list[float] = []
        cpu0, own0 = _cpu_of(proc.pid), time.process_time()
        t_end = time.perf_counter() + ns.idle
        while time.perf_counter() < t_end:
            t = time.perf_counter()
            await c.request("textDocument/hover", target)
            idle.append(time.perf_counter() - t)
            await asyncio.sleep(max(0.0, ns.every / 1000 - (time.perf_counter() - t)))
        res["idle_hovers"] = idle
        res["idle_cpu"] = (_cpu_of(proc.pid) - cpu0, time.process_time() - own0)

        # 2. the big trace, complete at the rename; hovers until its report is published
        n_diags_before = len(c.diags)
        big_name = os.path.basename(ns.big)
        ev = c.ready_event(os.path.join(watch, big_name))
        lat: list[tuple[float, float]] = []  # (t since rename, latency s)
        big, t_rename = place(ns.big, watch, big_name, copy=ns.copy)
        res["rename_epoch"] = time.time()
        every = ns.every / 1000
        deadline = t_rename + ns.timeout
        while not ev.is_set():
            t = time.perf_counter()
            if t > deadline:
                raise SystemExit(f"no report for {big} after {ns.timeout} s (log: {log_path})")
            hv = await c.request("textDocument/hover", target)
            done = time.perf_counter()
            if ev.is_set() and c.ready[big][0] < t:
                break  # sent after the publish: not during the analysis
            if hv is None:
                raise SystemExit("hover answered null during the run")
            lat.append((t - t_rename, done - t))
            rest = every - (time.perf_counter() - t)
            if rest > 0:
                try:
                    await asyncio.wait_for(ev.wait(), rest)
                except asyncio.TimeoutError:
                    pass
        t_ready, ready = c.ready[big]
        res["ready_epoch"] = time.time() - (time.perf_counter() - t_ready)
        first_diag = next((t for t, u, _ in c.diags[n_diags_before:] if t >= t_rename), None)
        res.update(
            hovers=lat,
            t_ready=t_ready - t_rename,
            big_path=big,
            t_first_diag=(first_diag - t_rename) if first_diag else None,
            big_diagnostics=ready.get("diagnostics"),
            big_error=ready.get("error"),
            progress=[(t - t_rename, k) for t, k in c.progress if t >= t_rename],
        )
        hv = await c.request("textDocument/hover", target)
        res["hover_after"] = bool(hv and big_name in hv["contents"]["value"])
        st = await c.request("profd/status", {})
        res["analyses"] = st["analyses"]
        sampler.sample(relist=True)
        if ns.series:
            res["series"] = await series(c, watch, ns, proc.pid, ns.timeout)
    finally:
        sampler.stop_ev.set()
        sampler.join()
        res["rss_peak_sum"] = sampler.peak_sum
        res["hwm"] = {p: v for p, v in sampler.hwm.items()}
        res["daemon_pid"] = proc.pid
        await c.close()
    return res


ANALYSED = re.compile(
    r"analysed (?P<path>.+?) \((?P<bytes>\d+) bytes\): (?P<wall>[\d.]+) s in the "
    r"worker \(CPU (?P<cpu>[\d.]+) s\), (?P<submit>[\d.]+) s from submit"
)


def loop_stalls(log_path: str, t0: float, t1: float) -> list[tuple[float, str]]:
    """The event loop's callbacks over STALL_MS the daemon logged between epoch ``t0`` and
    ``t1``: (seconds, what ran), longest first."""
    out = []
    try:
        lines = open(log_path, errors="replace").read().splitlines()
    except OSError:
        return out
    for line in lines:
        m = STALL_LINE.match(line)
        if not m:
            continue
        when = time.mktime(time.strptime(m[1][:19], "%Y-%m-%d %H:%M:%S")) + int(m[1][20:]) / 1e3
        if t0 <= when <= t1 + 0.1:
            what = re.sub(r" at 0x[0-9a-f]+|<Task pending name='[^']*' coro=|created at .*", "", m[2])
            out.append((float(m[3]), what[:100]))
    return sorted(out, reverse=True)


def daemon_analysis(log_path: str, path: str) -> dict | None:
    """The daemon's own timing of the analysis of ``path`` (its INFO log line), if it logs one."""
    try:
        text = open(log_path, errors="replace").read()
    except OSError:
        return None
    for m in ANALYSED.finditer(text):
        if m["path"] == path:
            return {k: float(m[k]) for k in ("wall", "cpu", "submit")}
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--big",
        default=DEFAULT_BIG,
        help="the big trace (default bench/out/tinygpt_naive_x1000MB.json; make it "
        "with: python bench/tile.py examples/tinygpt_naive.json.gz OUT --mb 1000)",
    )
    ap.add_argument("--every", type=float, default=20.0, help="ms between hovers (default 20)")
    ap.add_argument(
        "--idle",
        type=float,
        default=3.0,
        help="s of the same hovers before the big trace, with nothing analysed (default 3)",
    )
    ap.add_argument(
        "--copy",
        action="store_true",
        help="copy the big trace into the folder (default: hard link when possible)",
    )
    ap.add_argument(
        "--no-reference", action="store_true", help="skip the reference analysis in a fresh subprocess"
    )
    ap.add_argument("--timeout", type=float, default=600.0, help="s to wait for the big report")
    ap.add_argument(
        "--loop-stalls",
        action="store_true",
        help=f"run the daemon under asyncio's debug mode and list its loop's callbacks over {STALL_MS} ms "
        "during the big analysis (the daemon's own share of a hover's delay, whatever the load)",
    )
    ap.add_argument(
        "--series",
        type=int,
        default=0,
        metavar="N",
        help="then drop N traces one after another and print the RSS after each (default: none)",
    )
    ap.add_argument(
        "--series-trace",
        default=None,
        metavar="TRACE",
        help="the trace the series copies (plain JSON; default: --big)",
    )
    ap.add_argument("--tmp", default=None, help="where the temp folder goes (default $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (daemon log, state)")
    ap.add_argument(
        "--dump",
        metavar="FILE",
        help="write the raw hover samples [[s since rename, latency s], ...] and the timings as JSON",
    )
    ns = ap.parse_args(argv)
    ns.big = os.path.abspath(ns.big)
    ns.series_trace = os.path.abspath(ns.series_trace or ns.big)
    if not os.path.isfile(ns.big):
        print(f"no such file: {ns.big} (make it with bench/tile.py)", file=sys.stderr)
        return 2
    size = os.path.getsize(ns.big)
    print(
        f"# python {sys.version.split()[0]}, {os.cpu_count()} cpus, load "
        f"{os.getloadavg()[0]:.2f}; big trace {os.path.relpath(ns.big, ROOT)} "
        f"({size / 1e6:,.0f} MB); hover every {ns.every:g} ms",
        flush=True,
    )

    res = asyncio.run(run(ns))
    ref = None if ns.no_reference else reference_analysis(ns.big)

    lat = [x * 1e3 for _, x in res["hovers"]]
    print(
        f"\ndaemon: profd serve --stdio (default settle/quiet, 2 workers), ready in "
        f"{res['start_s']:.2f} s; small trace published {res['small_latency_s']:.2f} s after "
        f"its rename; hover target {res['target']}"
    )
    print("\n1. hover latency while the daemon analyses the big trace")
    if lat:
        worst = sorted(res["hovers"], key=lambda x: -x[1])[:5]
        print(
            f"   hovers {len(lat)}  p50 {pct(lat, 50):.2f} ms  p95 {pct(lat, 95):.2f} ms  "
            f"p99 {pct(lat, 99):.2f} ms  max {max(lat):.2f} ms   (target p99 <= 10 ms)"
        )
        print("   worst: " + ", ".join(f"{x * 1e3:.1f} ms at +{t:.2f} s" for t, x in worst))
        idle = [x * 1e3 for x in res["idle_hovers"]]
        if idle:
            dc, oc = res["idle_cpu"]
            print(
                f"   CPU per idle hover: daemon {dc / len(idle) * 1e3:.2f} ms (all its threads), "
                f"this client {oc / len(idle) * 1e3:.2f} ms"
            )
            print(
                f"   the same hovers before, nothing analysed ({ns.idle:g} s): {len(idle)}  p50 "
                f"{pct(idle, 50):.2f} ms  p99 {pct(idle, 99):.2f} ms  max {max(idle):.2f} ms; "
                f"p99 while analysing / idle: {pct(lat, 99) / pct(idle, 99):.2f}x"
            )
    else:
        print("   no hovers were sent (the report came first)")
    print(f"   after the publish the hover shows the big trace: {res['hover_after']}")
    if ns.loop_stalls:
        st = loop_stalls(res["log"], res["rename_epoch"], res["ready_epoch"])
        print(
            f"   the daemon's event loop (asyncio debug mode): {len(st)} callbacks over {STALL_MS} ms "
            "from the rename to the report"
            + (": " + "; ".join(f"{s * 1e3:.1f} ms {w}" for s, w in st[:5]) if st else "")
        )

    print("\n2. watch latency (rename into the folder -> diagnostics at the client)")
    lat_s = res["t_ready"]
    fd = res["t_first_diag"]
    print(
        f"   first publishDiagnostics +{fd:.3f} s; profd/reportReady +{lat_s:.3f} s "
        f"({res['big_diagnostics']} diagnostics, error {res['big_error']!r}, "
        f"analyses {res['analyses']})"
        if fd is not None
        else f"   profd/reportReady +{lat_s:.3f} s (no publishDiagnostics seen)"
    )
    if res["progress"]:
        print("   $/progress: " + ", ".join(f"{k} +{t:.3f} s" for t, k in res["progress"]))
    pub = fd if fd is not None else lat_s
    dm = daemon_analysis(res["log"], res["big_path"])
    if dm:
        print(
            f"   the daemon's worker: analysis {dm['wall']:.3f} s wall, {dm['cpu']:.3f} s CPU "
            f"(submit -> result {dm['submit']:.3f} s); latency - worker analysis = "
            f"{pub - dm['wall']:+.3f} s (the daemon's own share; target <= 0.2 s)"
        )
    if ref and "s" in ref:
        print(
            f"   reference analysis (fresh process, analyze_file, imports excluded): "
            f"{ref['s']:.3f} s wall, {ref['cpu']:.3f} s CPU, peak RSS "
            f"{ref['hwm'] / 2**20:,.0f} MiB, {ref['diagnostics']} diagnostics"
        )
        print(
            f"   publish latency {pub:.3f} s  analysis {ref['s']:.3f} s  overhead "
            f"{pub - ref['s']:+.3f} s   (target overhead <= 0.2 s)"
        )
    elif ref:
        print(f"   reference analysis failed: {ref['error']}")

    print("\n3. peak RSS of the daemon's process tree")
    dpid = res["daemon_pid"]
    for p, v in sorted(res["hwm"].items(), key=lambda kv: kv[0] != dpid):
        print(f"   pid {p:>7} {'daemon' if p == dpid else 'child ':<7} VmHWM {v / 2**20:8,.0f} MiB")
    print(f"   sampled peak of the tree's summed VmRSS: {res['rss_peak_sum'] / 2**20:,.0f} MiB")
    if res.get("series"):
        print(
            f"\n4. {ns.series} traces one after another ({os.path.relpath(ns.series_trace, ROOT)}, "
            f"{os.path.getsize(ns.series_trace) / 1e6:,.0f} MB, each another content): VmRSS once each "
            "is published (MiB)"
        )
        pids = sorted({p for r in res["series"] for p in r["rss"]}, key=lambda p: p != dpid)
        print(
            "   trace  latency s  "
            + "  ".join(f"{'daemon' if p == dpid else p:>8}" for p in pids)
            + "       sum"
        )
        for k, r in enumerate(res["series"], 1):
            print(
                f"   {k:>5}  {r['latency']:>9.2f}  "
                + "  ".join(f"{r['rss'].get(p, 0) / 2**20:>8,.0f}" for p in pids)
                + f"  {sum(r['rss'].values()) / 2**20:>8,.0f}"
                + (f"  error: {r['error']}" if r["error"] else "")
            )
        first, last = (sum(r["rss"].values()) for r in (res["series"][0], res["series"][-1]))
        print(f"   the tree's RSS after the last / after the first: {last / first:.2f}x")
    if ns.dump:
        with open(ns.dump, "w") as f:
            json.dump(
                {
                    "hovers": res["hovers"],
                    "t_ready": res["t_ready"],
                    "t_first_diag": res["t_first_diag"],
                    "daemon": dm,
                    "reference": ref,
                    "big": ns.big,
                },
                f,
            )
    if ns.keep:
        print(f"\n# kept {res['work']}")
    else:
        shutil.rmtree(res["work"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
