"""The workload runner: runs a built-in workload (``server/workloads/``) in a subprocess with a
timeout, under a correct profiler setup, and leaves a gzipped trace and its ``key_averages`` table
in an output folder (the daemon's watched folder, or any other).

Python API (what ``profd/runWorkload`` and ``profd-client run`` call)::

    spec = WorkloadSpec.parse({"workload": "matmul-bias", "n": 4096, "dtype": "bfloat16"})
    res = run_workload(spec, out_dir, timeout=300, progress_cb=lambda msg, pct: ...)
    res.trace_path, res.table_path, res.meta   # or WorkloadError(kind, message) is raised

    sweep = run_sweep(spec, [64, 512, 4096], out_dir)   # one run per size, then
    print(format_table(sweep.rows))                     # CPU ops and GPU per step, GPU busy %, verdict

Only the workloads named in ``WORKLOADS`` run, with parameters validated against their schema:
no code and no free-form arguments come from a request. A crash, an out-of-memory, a missing
torch, a missing GPU or a timeout raise ``WorkloadError`` with a clear message; the process group
of a timed-out run is killed, so nothing hangs. This module imports neither torch nor the engine
at import time (the engine only for the comparison table).
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    import subprocess

# subprocess, signal, tempfile, shutil and gzip are imported where a workload runs: the CLI builds
# its ``run`` options from this module on every command, and an ``analyze`` needs none of them.

from . import SCRIPTS, script_path

ProgressCb = Callable[[str, Optional[float]], None]

# ---- parameter schemas -------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    kind: type
    default: Any
    choices: tuple = ()
    lo: Optional[int] = None
    hi: Optional[int] = None
    help: str = ""


_COMMON = {
    "active": Param(int, 3, lo=1, hi=50, help="active profiler steps (schedule wait=1, warmup=1, active=N)"),
    "with_stack": Param(bool, True, help="record Python call stacks (with_stack)"),
    "record_shapes": Param(bool, True, help="record input shapes (record_shapes)"),
    "profile_memory": Param(bool, False, help="record allocations (profile_memory)"),
    "device": Param(str, "auto", ("auto", "cuda", "cpu"), help="auto: cuda when a GPU is visible, else cpu"),
}

WORKLOADS: dict[str, dict[str, Param]] = {
    "matmul-bias": {
        "n": Param(int, 4096, lo=64, hi=8192, help="matrix size n (x, w: n x n; b: n)"),
        "dtype": Param(str, "bfloat16", ("float32", "tf32", "bfloat16", "float16")),
        "compile": Param(bool, False, help="torch.compile the function"),
        **_COMMON,
    },
    "mlp": {
        "mode": Param(str, "eager", ("eager", "compile", "graphs"),
                      help="eager, torch.compile, or torch.compile(mode='reduce-overhead') (CUDA graphs)"),
        "batch": Param(int, 1, lo=1, hi=4096),
        "width": Param(int, 256, lo=8, hi=8192),
        "depth": Param(int, 6, lo=1, hi=48),
        "dtype": Param(str, "float32", ("float32", "bfloat16", "float16")),
        **_COMMON,
    },
}
assert set(WORKLOADS) == set(SCRIPTS)


class WorkloadError(Exception):
    """A workload that could not run or did not finish. ``kind`` is one of: bad-params,
    missing-torch, no-cuda, oom, timeout, crash, no-python, no-output."""

    def __init__(self, kind: str, message: str, log_tail: str = ""):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.log_tail = log_tail

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass
class WorkloadSpec:
    workload: str
    params: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, d: dict) -> "WorkloadSpec":
        """Validate a request ({"workload": name, param: value, ...} or {"workload", "params"})."""
        if not isinstance(d, dict):
            raise WorkloadError("bad-params", "a workload request is an object")
        d = dict(d)
        name = d.pop("workload", None)
        if name not in WORKLOADS:
            raise WorkloadError("bad-params", f"unknown workload {name!r}; built-in: {', '.join(WORKLOADS)}")
        raw = dict(d.pop("params", {}) or {})
        raw.update(d)
        return cls(name, validate(name, raw))

    def label(self) -> str:
        p = self.params
        if self.workload == "matmul-bias":
            s = f"matmul-bias_n{p['n']}_{p['dtype']}_{'compiled' if p['compile'] else 'eager'}"
        else:
            s = f"mlp_{p['mode']}_b{p['batch']}_w{p['width']}_d{p['depth']}_{p['dtype']}"
        return s + ("" if p["device"] == "auto" else f"_{p['device']}")

    def argv(self) -> list[str]:
        """Command-line arguments for the workload script, from validated params only."""
        out = []
        for k, v in self.params.items():
            if k == "with_stack":
                out.append("--with-stack" if v else "--no-stack")
            elif k == "record_shapes":
                out += [] if v else ["--no-shapes"]
            elif k == "profile_memory":
                out += ["--profile-memory"] if v else []
            elif k == "compile":
                out += ["--compile"] if v else []
            else:
                out += [f"--{k.replace('_', '-')}", str(v)]
        return out


def validate(name: str, raw: dict) -> dict:
    schema = WORKLOADS[name]
    unknown = sorted(set(raw) - set(schema))
    if unknown:
        raise WorkloadError("bad-params", f"{name}: unknown parameter(s) {', '.join(unknown)}; "
                                          f"known: {', '.join(schema)}")
    out = {}
    for k, p in schema.items():
        v = raw.get(k, p.default)
        if p.kind is bool:
            if isinstance(v, str) and v.lower() in ("true", "false", "1", "0"):
                v = v.lower() in ("true", "1")
            if not isinstance(v, bool):
                raise WorkloadError("bad-params", f"{name}: {k} must be true or false, got {v!r}")
        elif p.kind is int:
            if isinstance(v, str) and v.strip().isdigit():
                v = int(v)
            if not isinstance(v, int) or isinstance(v, bool):
                raise WorkloadError("bad-params", f"{name}: {k} must be an integer, got {v!r}")
            if (p.lo is not None and v < p.lo) or (p.hi is not None and v > p.hi):
                raise WorkloadError("bad-params", f"{name}: {k} must be in {p.lo}..{p.hi}, got {v}")
        else:
            if not isinstance(v, str):
                raise WorkloadError("bad-params", f"{name}: {k} must be a string, got {v!r}")
        if p.choices and v not in p.choices:
            raise WorkloadError("bad-params", f"{name}: {k} must be one of {', '.join(p.choices)}, got {v!r}")
        out[k] = v
    if name == "mlp" and out["mode"] == "graphs" and out["device"] == "cpu":
        raise WorkloadError("bad-params", "mlp: mode graphs (CUDA graphs) needs device cuda")
    return out


# ---- running -------------------------------------------------------------------------------


@dataclass
class RunResult:
    spec: WorkloadSpec
    trace_path: str  # gzipped Chrome trace in out_dir
    table_path: str  # key_averages table (.txt) in out_dir
    meta: dict  # what the workload reported: device, torch version, unprofiled µs/iter, ...
    wall_s: float
    log_tail: str = ""

    @property
    def device(self) -> str:
        return self.meta.get("device", "?")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["spec"] = {"workload": self.spec.workload, **self.spec.params}
        return d


_EXIT_KINDS = {3: "missing-torch", 4: "oom", 5: "no-cuda", 2: "bad-params"}


def run_workload(spec: WorkloadSpec | dict, out_dir: str, timeout: float = 600.0,
                 progress_cb: Optional[ProgressCb] = None, python: Optional[str] = None,
                 name: Optional[str] = None, env: Optional[dict] = None) -> RunResult:
    """Run one built-in workload; return where its trace (``.json.gz``) and table (``.txt``) are.

    The workload writes its raw ``.json`` into a private temporary folder; only the finished,
    gzipped trace is moved into ``out_dir`` (atomically), so a watcher never sees a half file.
    ``python`` is the interpreter that has torch (default: this one).
    """
    if isinstance(spec, dict):
        spec = WorkloadSpec.parse(spec)
    else:
        spec = WorkloadSpec(spec.workload, validate(spec.workload, spec.params))
    import gzip
    import shutil
    import tempfile

    cb = progress_cb or (lambda msg, pct: None)
    os.makedirs(out_dir, exist_ok=True)
    stem = _free_stem(out_dir, name or spec.label())
    tmp = tempfile.mkdtemp(prefix="profd-run-")
    try:
        cmd = [python or sys.executable, "-u", script_path(spec.workload), *spec.argv(),
               "--out", os.path.join(tmp, "trace")]
        cb(f"starting {spec.label()}", 0.0)
        t0 = time.monotonic()
        rc, out_lines, err_lines = _run(cmd, timeout, cb, env)
        wall = time.monotonic() - t0
        tail = "\n".join((err_lines + out_lines)[-30:])
        if rc != 0:
            raise _error_of(rc, out_lines, err_lines, tail, timeout, cmd[0])
        raw = os.path.join(tmp, "trace.json")
        if not os.path.isfile(raw):
            raise WorkloadError("no-output", "the workload exited cleanly but wrote no trace", tail)
        cb("compressing the trace", 90.0)
        trace_path = os.path.join(out_dir, stem + ".json.gz")
        table_path = os.path.join(out_dir, stem + ".txt")
        part = os.path.join(out_dir, "." + stem + ".part")
        with open(raw, "rb") as src, gzip.open(part, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        shutil.copyfile(os.path.join(tmp, "trace.txt"), table_path)
        meta = {}
        try:
            with open(os.path.join(tmp, "trace.meta.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            pass
        os.replace(part, trace_path)  # last: the trace appears complete or not at all
        cb("done", 100.0)
        return RunResult(spec, trace_path, table_path, meta, wall, tail)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _free_stem(out_dir: str, stem: str) -> str:
    cand, k = stem, 1
    while os.path.exists(os.path.join(out_dir, cand + ".json.gz")) or os.path.exists(os.path.join(out_dir, cand + ".txt")):
        k += 1
        cand = f"{stem}-{k}"
    return cand


def _run(cmd: list[str], timeout: float, cb: ProgressCb, env: Optional[dict]):
    import subprocess

    e = dict(os.environ if env is None else env)
    e["PYTHONUNBUFFERED"] = "1"
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=e, start_new_session=True, text=True, errors="replace")
    except OSError as ex:
        raise WorkloadError("no-python", f"cannot start {cmd[0]}: {ex}") from None
    out_lines: list[str] = []
    err_lines: list[str] = []

    def read_out():
        for line in proc.stdout:
            line = line.rstrip("\n")
            out_lines.append(line)
            if line.startswith("PROFD-PROGRESS "):
                try:
                    d = json.loads(line[15:])
                    cb(d.get("message", ""), d.get("pct"))
                except (ValueError, AttributeError):
                    pass

    def read_err():
        for line in proc.stderr:
            err_lines.append(line.rstrip("\n"))
            del err_lines[:-200]

    ts = [threading.Thread(target=read_out, daemon=True), threading.Thread(target=read_err, daemon=True)]
    for t in ts:
        t.start()
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        for t in ts:
            t.join(2)
        tail = "\n".join((err_lines + out_lines)[-30:])
        raise WorkloadError("timeout", f"the workload did not finish within {timeout:g} s and was killed",
                            tail) from None
    for t in ts:
        t.join(5)
    return rc, out_lines, err_lines


def _kill(proc: subprocess.Popen) -> None:
    """Kill the workload's whole process group (torch.compile starts worker processes)."""
    import signal
    import subprocess

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue


def _error_of(rc: int, out_lines, err_lines, tail: str, timeout: float, python: str) -> WorkloadError:
    msg = None
    for line in out_lines:
        if line.startswith("PROFD-ERROR "):
            try:
                msg = json.loads(line[12:]).get("message")
            except ValueError:
                pass
    if rc in _EXIT_KINDS and msg:
        return WorkloadError(_EXIT_KINDS[rc], msg, tail)
    if rc < 0:
        import signal

        sig = -rc
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        hint = " (killed: likely out of host memory)" if sig == signal.SIGKILL else ""
        return WorkloadError("crash", f"the workload died on signal {name}{hint}", tail)
    # an exception: its last line is the clearest message
    last = next((l for l in reversed(err_lines) if l.strip() and not l.startswith(" ")), "")
    if "out of memory" in tail.lower():
        return WorkloadError("oom", last or "out of memory", tail)
    if "No module named 'torch'" in tail:
        return WorkloadError("missing-torch", f"torch is not importable in {python}; "
                                              "install it with `pip install profd[workload]`", tail)
    return WorkloadError("crash", f"the workload exited with status {rc}: {last or 'no message'}", tail)


# ---- sweeps and the comparison table ---------------------------------------------------------


@dataclass
class Row:
    label: str
    n: Optional[int]
    dtype: str
    mode: str  # eager / compiled / graphs
    device: str
    cpu_total_us: Optional[float] = None  # per profiled step: CPU op time (all threads)
    cuda_total_us: Optional[float] = None  # per profiled step: GPU time (kernels, copies, memsets)
    gpu_busy_pct: Optional[float] = None
    verdict: str = ""
    unprofiled_us: Optional[float] = None
    findings: list = field(default_factory=list)  # warning/information codes
    trace_path: str = ""
    error: str = ""


@dataclass
class SweepResult:
    runs: list  # RunResult or WorkloadError, one per size
    rows: list  # Row, one per size


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError:
        raise WorkloadError("bad-params", f"--n wants integers separated by commas, got {text!r}") from None
    if not sizes:
        raise WorkloadError("bad-params", "no size given")
    return sizes


def run_sweep(spec: WorkloadSpec | dict, sizes: list[int], out_dir: str, timeout: float = 600.0,
              progress_cb: Optional[ProgressCb] = None, python: Optional[str] = None,
              analyze: bool = True, workspace: Optional[list[str]] = None) -> SweepResult:
    """One run per size (n); a failed size is recorded and the sweep goes on."""
    if isinstance(spec, dict):
        spec = WorkloadSpec.parse(spec)
    if "n" not in WORKLOADS[spec.workload]:
        raise WorkloadError("bad-params", f"{spec.workload} has no size parameter n to sweep")
    specs = [WorkloadSpec(spec.workload, validate(spec.workload, {**spec.params, "n": n})) for n in sizes]
    cb = progress_cb or (lambda msg, pct: None)
    runs, rows = [], []
    for k, s in enumerate(specs):
        def sub(msg, pct, k=k, s=s):
            base = 100.0 * k / len(specs)
            cb(f"[{k + 1}/{len(specs)} n={s.params['n']}] {msg}", base + (pct or 0.0) / len(specs))
        try:
            r = run_workload(s, out_dir, timeout, sub, python)
        except WorkloadError as e:
            runs.append(e)
            rows.append(Row(s.label(), s.params.get("n"), s.params.get("dtype", ""), _mode(s), "?", error=str(e)))
            continue
        runs.append(r)
        rows.append(row_of(r.trace_path, r.meta, workspace) if analyze else
                    Row(s.label(), s.params.get("n"), s.params.get("dtype", ""), _mode(s), r.device,
                        unprofiled_us=r.meta.get("unprofiled_us_per_iter"), trace_path=r.trace_path))
    return SweepResult(runs, rows)


def _mode(s: WorkloadSpec) -> str:
    if "mode" in s.params:
        return {"compile": "compiled"}.get(s.params["mode"], s.params["mode"])
    return "compiled" if s.params.get("compile") else "eager"


def row_of(trace_path: str, meta: Optional[dict] = None, workspace: Optional[list[str]] = None) -> Row:
    """One table row from a trace (and the workload's meta.json when there is one)."""
    from ..engine import Options, analyze_or_error  # the engine only here: the runner runs without it

    meta = meta or {}
    mode = "compiled" if meta.get("compile") else "eager"
    if meta.get("mode"):
        mode = {"compile": "compiled"}.get(meta["mode"], meta["mode"])
    row = Row(os.path.basename(trace_path).split(".json")[0], meta.get("n"), meta.get("dtype", ""), mode,
              meta.get("device", "?"), unprofiled_us=meta.get("unprofiled_us_per_iter"), trace_path=trace_path)
    rep = analyze_or_error(trace_path, Options(workspace=workspace or [os.path.dirname(script_path("mlp"))]))
    if rep.error:
        row.error = rep.error
        return row
    s = rep.summary
    n = max(1, len(s.steps))  # per step, as every number profd prints unless it says "total"
    row.cpu_total_us, row.cuda_total_us, row.gpu_busy_pct, row.verdict = (
        s.cpu_total_us / n, s.cuda_total_us / n, s.gpu_busy_pct, s.verdict)
    row.findings = sorted({d.code for d in rep.diagnostics if d.severity in ("error", "warning", "information")})
    return row


def meta_beside(trace_path: str) -> dict:
    """The meta.json a sweep wrote beside a trace (``X.json.gz`` -> ``X.meta.json``), if any."""
    p = trace_path.split(".json")[0] + ".meta.json"
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _f(us: Optional[float]) -> str:
    if us is None:
        return "-"
    return f"{us / 1000:.3f} ms" if us >= 1000 else f"{us:.1f} µs"


def format_table(rows: list[Row]) -> str:
    head = ["n", "dtype", "mode", "device", "CPU ops/step", "GPU/step", "GPU busy", "verdict",
            "unprofiled/iter", "findings"]
    body = []
    for r in rows:
        if r.error:
            body.append([str(r.n or "-"), r.dtype, r.mode, r.device, "-", "-", "-", "error: " + r.error, "-", ""])
            continue
        body.append([str(r.n or "-"), r.dtype, r.mode, r.device, _f(r.cpu_total_us), _f(r.cuda_total_us),
                     "-" if r.gpu_busy_pct is None else f"{r.gpu_busy_pct:.1f}%", r.verdict,
                     _f(r.unprofiled_us), ", ".join(c for c in r.findings if c != "kernel-class")])
    w = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w[i]) for i, c in enumerate(cells)).rstrip()
    return "\n".join([line(head), line(["-" * x for x in w])] + [line(b) for b in body]) + "\n"


def write_sidecar_meta(res: RunResult) -> str:
    """Keep the workload's meta beside the trace (used by the sweep table)."""
    p = res.trace_path.split(".json")[0] + ".meta.json"
    with open(p, "w") as f:
        json.dump(res.meta, f, indent=1)
    return p


# ---- python -m profd.server.workloads.runner (also usable on a GPU box without the engine) ------------


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m profd.server.workloads.runner", description="run built-in workloads")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a workload (sweep when --n has several sizes)")
    add_workload_args(r)
    r.add_argument("--out", default=".", help="output folder")
    r.add_argument("--timeout", type=float, default=600.0)
    r.add_argument("--python", default=None, help="interpreter with torch (default: this one)")
    r.add_argument("--no-analyze", action="store_true", help="skip the engine (table later with `table`)")
    t = sub.add_parser("table", help="comparison table of traces written by run")
    t.add_argument("traces", nargs="+")
    ns = p.parse_args(argv)
    if ns.cmd == "table":
        print(format_table([row_of(x, meta_beside(x)) for x in ns.traces]), end="")
        return 0
    try:
        spec, sizes = spec_from_args(ns)
        log = lambda m, pct: print(f"  .. {m}", file=sys.stderr, flush=True)
        if len(sizes) > 1:
            res = run_sweep(spec, sizes, ns.out, ns.timeout, log, ns.python,
                            analyze=not ns.no_analyze)
            for x in res.runs:
                if isinstance(x, RunResult):
                    write_sidecar_meta(x)
                    print(f"wrote {x.trace_path} ({x.wall_s:.1f} s)")
                else:
                    print(f"failed: {x}", file=sys.stderr)
            print(format_table(res.rows), end="")
            return 0 if all(isinstance(x, RunResult) for x in res.runs) else 1
        res1 = run_workload(spec, ns.out, ns.timeout, log, ns.python)
        write_sidecar_meta(res1)
        print(f"wrote {res1.trace_path} and {res1.table_path} ({res1.wall_s:.1f} s)")
        if not ns.no_analyze:
            print(format_table([row_of(res1.trace_path, res1.meta)]), end="")
        return 0
    except WorkloadError as e:
        print(f"profd: workload error: {e}", file=sys.stderr)
        if e.log_tail:
            print(e.log_tail, file=sys.stderr)
        return 2


def add_workload_args(p) -> None:
    """The workload arguments shared by ``profd-client run`` and ``python -m profd.server.workloads.runner run``."""
    import argparse

    p.add_argument("workload", choices=sorted(WORKLOADS), help="the built-in workload to run")
    p.add_argument("--n", default=None, help="matrix size, or sizes separated by commas for a sweep (64..8192)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16")
    p.add_argument("--compile", action="store_true", default=None, help="run it under torch.compile")
    p.add_argument("--mode", default=None, help="mlp: eager, compile or graphs")
    p.add_argument("--batch", type=int, default=None, help="mlp: batch size")
    p.add_argument("--width", type=int, default=None, help="mlp: hidden width")
    p.add_argument("--depth", type=int, default=None, help="mlp: number of layers")
    p.add_argument("--active", type=int, default=None, help="profiled (active) steps")
    p.add_argument("--with-stack", dest="with_stack", action=argparse.BooleanOptionalAction, default=None,
                   help="record Python stacks (findings on lines; default: on)")
    p.add_argument("--no-stack", dest="with_stack", action="store_false", help=argparse.SUPPRESS)  # old spelling
    p.add_argument("--profile-memory", action="store_true", default=None, help="record allocations (profile_memory=True)")
    p.add_argument("--device", default=None, choices=["auto", "cuda", "cpu"], help="where to run (auto: the GPU when there is one)")


def spec_from_args(ns) -> tuple[WorkloadSpec, list[int]]:
    raw = {k: getattr(ns, k) for k in ("dtype", "compile", "mode", "batch", "width", "depth", "active",
                                       "with_stack", "profile_memory", "device") if getattr(ns, k, None) is not None}
    sizes: list[int] = []
    if ns.n is not None:
        sizes = parse_sizes(ns.n)
        raw["n"] = sizes[0]
    spec = WorkloadSpec.parse({"workload": ns.workload, **raw})
    return spec, sizes


if __name__ == "__main__":
    sys.exit(main())
