"""Record a user's own program, unmodified, under torch.profiler: what ``profd-client record``,
the editor's ``profd.record`` and the MCP tool ``record_program`` share.

    res = record(["python", "train.py", "--lr", "3e-4"], RecordOptions(step="optimizer"), out_dir)
    res.traces, res.unprofiled_us, res.rule_desc, res.exit_status   # or RecordError(kind, message)

The program runs in a new session with ``record_hook/`` first on its PYTHONPATH: that folder's
``sitecustomize`` (standard library and torch only) sets the profiler up in the program's own
interpreter and says what happened in status files this module reads. Every failure is a
``RecordError`` with a message that says what to do (``usage``, ``not-python``, ``torch-missing``,
``no-torch``, ``no-step``, ``too-few-steps``, ``crash``, ``signal``, ``timeout``, ``cancelled``);
the program's process group is killed before this returns, so nothing is left running. This
module imports neither torch nor the engine.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

HOOK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "record_hook")
RULES = ("optimizer", "forward", "time")
_PY = re.compile(r"^(python|pypy)[\d.]*$")
_FUNC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.<>]*$")

HOW_TO_PICK = ("pick another rule: --step forward (each top-level nn.Module call: inference), "
               "--step MODULE:FUNCTION (each return of that function, e.g. train:train_step), "
               "--step time (fixed time windows)")


class RecordError(Exception):
    def __init__(self, kind: str, message: str, log_tail: str = "", exit_status: Optional[int] = None):
        super().__init__(message)
        self.kind, self.message, self.log_tail, self.exit_status = kind, message, log_tail, exit_status

    def __str__(self) -> str:
        return self.message


@dataclass
class RecordOptions:
    step: str = "optimizer"  # optimizer | forward | time | MODULE:QUALNAME
    window_s: float = 1.0  # --step time: the length of a step
    warmup: int = 5  # steps run untouched first (compilation, cuDNN autotuning, allocator warm-up)
    timed: int = 10  # then steps timed without the profiler (the real step time)
    steps: int = 3  # then profiled steps (after one profiler warm-up step)
    then: str = "continue"  # continue | exit, once the trace is written
    memory: bool = False  # profile_memory
    stack: bool = True  # with_stack
    shapes: bool = True  # record_shapes
    timeout: float = 600.0  # s until every recording process has written its trace

    def check(self) -> "RecordOptions":
        if self.step not in RULES and not _FUNC.match(self.step):
            raise RecordError("usage", f"--step {self.step!r}: want optimizer, forward, time or "
                                       "MODULE:FUNCTION (e.g. train:train_step)")
        for name, lo in (("warmup", 1), ("timed", 0), ("steps", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < lo or v > 100000:
                raise RecordError("usage", f"--{name} must be an integer >= {lo}, got {v!r}"
                                  + (" (the first step's start is unknown: it is always warm-up)"
                                     if name == "warmup" else ""))
        if self.then not in ("continue", "exit"):
            raise RecordError("usage", f"--then must be continue or exit, got {self.then!r}")
        if not self.window_s > 0 or not self.timeout > 0:
            raise RecordError("usage", "--window and --timeout must be positive")
        return self

    def rule_text(self) -> str:
        return {"optimizer": "each Optimizer.step() ends a step",
                "forward": "each top-level nn.Module call ends a step",
                "time": f"each {self.window_s:g} s window is a step"}.get(
            self.step, f"each return of {self.step} ends a step")

    def needed(self) -> int:
        return self.warmup + (0 if self.step == "time" else self.timed) + 1 + self.steps


@dataclass
class Command:
    argv: list[str]
    program: str  # a name for the trace: the script's stem, the module, ...
    script_module: Optional[str]  # the name --step MODULE:FUNCTION uses for the script itself
    script: Optional[str] = None  # the script file, when there is one


@dataclass
class RecordResult:
    traces: list[str]
    metas: list[dict]
    unprofiled_us: Optional[float]  # mean over the recording processes
    rule_desc: str
    exit_status: Optional[int]  # the program's; None if it runs on (never: record waits)
    command: Command
    wall_s: float
    log_tail: str = ""
    notes: list[str] = field(default_factory=list)


# ---- the command --------------------------------------------------------------------------------

def _shebang(path: str) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return ""
    return head.split(b"\n", 1)[0].decode("utf-8", "replace") if head.startswith(b"#!") else ""


_PY_OPTS_WITH_ARG = {"-W", "-X", "--check-hash-based-pycs"}


def _after_interpreter(args: list[str], cwd: str) -> tuple[Optional[str], Optional[str], list[str]]:
    """(script, module, flags) of a python command line's arguments."""
    flags: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m" and i + 1 < len(args):
            return None, args[i + 1], flags
        if a.startswith("-m") and len(a) > 2:
            return None, a[2:], flags
        if a == "-c" or a.startswith("-c"):
            return None, None, flags + ["-c"]
        if a in _PY_OPTS_WITH_ARG:
            i += 2
            continue
        if a == "-" or not a.startswith("-"):
            return (None if a == "-" else a), None, flags
        flags.append(a)
        i += 1
    return None, None, flags


def parse_command(argv: list[str], cwd: Optional[str] = None) -> Command:
    """Check that ``argv`` runs a Python program profd's hook can reach; name it."""
    cwd = cwd or os.getcwd()
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise RecordError("usage", "no command: give the program after --, as in "
                                   "`profd-client record -- python train.py`")
    exe = argv[0]
    if exe.endswith(".py") and os.path.isfile(os.path.join(cwd, exe)) and not _shebang(os.path.join(cwd, exe)):
        py = shutil.which("python3") or shutil.which("python")
        if py is None:
            raise RecordError("not-python", f"{exe} is a Python file but no python3 is on PATH")
        argv = [py, *argv]
        exe = py
    path = exe if os.sep in exe else shutil.which(exe)
    if path and not os.path.isabs(path):
        path = os.path.join(cwd, path)
    if not path or not os.path.isfile(path):
        raise RecordError("usage", f"no such command: {exe}")
    base = os.path.basename(path)
    sheb = _shebang(path)
    if _PY.match(base) or (not sheb and _PY.match(os.path.basename(os.path.realpath(path)))):
        script, module, flags = _after_interpreter(argv[1:], cwd)
        bad = [f for f in flags if f in ("-I", "-E", "-S") or (f.startswith("-") and not f.startswith("--")
                                                                 and set(f[1:]) & set("IES"))]
        if bad:
            raise RecordError("usage", f"{' '.join(bad)}: this interpreter flag makes Python ignore PYTHONPATH "
                                       "or site, which profd record needs to set the profiler up; drop it")
        if module:
            return Command(argv, module.rsplit(".", 1)[-1], module)
        if script:
            sp = os.path.join(cwd, script)
            if not os.path.isfile(sp):
                raise RecordError("usage", f"no such script: {script} (in {cwd})")
            stem = os.path.splitext(os.path.basename(script))[0]
            return Command(argv, stem, stem, os.path.abspath(sp))
        if "-c" in flags:
            return Command(argv, "python-c", None)
        raise RecordError("usage", f"{exe} with no script: give the program, as in `python train.py`")
    if "python" not in sheb:
        raise RecordError("not-python", f"{exe} is not a Python program (record runs Python programs: "
                                        "`python train.py`, `python -m pkg`, `torchrun ... train.py`)")
    # a Python entry point (torchrun, a console script): name it by the script it runs, if any
    script = next((a for a in argv[1:] if a.endswith(".py")), None)
    if script:
        stem = os.path.splitext(os.path.basename(script))[0]
        sp = os.path.join(cwd, script)
        return Command(argv, stem, stem, os.path.abspath(sp) if os.path.isfile(sp) else None)
    mod = next((argv[i + 1] for i, a in enumerate(argv[1:-1], 1) if a in ("-m", "--module")), None)
    return Command(argv, (mod or base).rsplit(".", 1)[-1], mod)


def free_stem(out_dir: str, program: str) -> str:
    base = f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', program)}-{time.strftime('%Y%m%d-%H%M%S')}"
    cand, k = base, 1
    while any(f.startswith(cand + ".") for f in _listdir(out_dir)):
        k += 1
        cand = f"{base}-{k}"
    return cand


def _listdir(d: str) -> list[str]:
    try:
        return os.listdir(d)
    except OSError:
        return []


def meta_of(trace: str) -> dict:
    """What ``record`` wrote beside a trace (``X.pt.trace.json.gz`` -> ``X.profd-meta``), or {}."""
    p = trace.split(".pt.trace.json")[0].split(".json")[0] + ".profd-meta"
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


# ---- running it -----------------------------------------------------------------------------------

def _sig_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _kill_group(pgid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)


class _Status:
    """The hook's JSON lines, per process, read as they grow."""

    def __init__(self, folder: str):
        self.folder = folder
        self.pos: dict[str, int] = {}
        self.events: list[dict] = []

    def poll(self) -> list[dict]:
        new = []
        for name in sorted(_listdir(self.folder)):
            p = os.path.join(self.folder, name)
            try:
                with open(p, "rb") as f:
                    f.seek(self.pos.get(name, 0))
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1
            self.pos[name] = self.pos.get(name, 0) + end
            for line in data[:end].splitlines():
                try:
                    new.append(json.loads(line))
                except ValueError:
                    pass
        self.events += new
        return new

    def of(self, event: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == event]


def record(argv: list[str], opts: RecordOptions, out_dir: str, cwd: Optional[str] = None,
           progress: Optional[Callable[[str, Optional[float]], None]] = None,
           cancel: Optional[threading.Event] = None, echo: Optional[Callable[[str], None]] = None,
           env: Optional[dict] = None) -> RecordResult:
    """Run ``argv`` under the profiler; return its traces (one per recording process) or raise
    ``RecordError``. ``echo`` gets the program's output lines (stdout and stderr), ``progress``
    (message, percent) what the recording reached; ``cancel`` set kills the program."""
    opts.check()
    cwd = os.path.abspath(cwd or os.getcwd())
    cmd = parse_command(list(argv), cwd)
    cb = progress or (lambda msg, pct: None)
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    status_dir = tempfile.mkdtemp(prefix="profd-record-")
    stem = free_stem(out_dir, cmd.program)
    kind = "func" if ":" in opts.step else opts.step
    cfg = {"rule": kind, "func": opts.step if kind == "func" else None, "window_s": opts.window_s,
           "warmup": opts.warmup, "timed": opts.timed, "steps": opts.steps, "then": opts.then,
           "memory": opts.memory, "stack": opts.stack, "shapes": opts.shapes, "out": out_dir,
           "stem": stem, "status": status_dir, "program": cmd.program, "script_module": cmd.script_module}
    e = dict(os.environ if env is None else env)
    e.pop("PROFD_RECORD_ACTIVE", None)
    e["PROFD_RECORD"] = json.dumps(cfg)
    e["PYTHONPATH"] = HOOK_DIR + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e["PYTHONUNBUFFERED"] = "1"
    tail: list[str] = []
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd.argv, cwd=cwd, env=e, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as ex:
        shutil.rmtree(status_dir, ignore_errors=True)
        raise RecordError("usage", f"cannot start {cmd.argv[0]}: {ex.strerror or ex}") from None

    def pump():
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            tail.append(line)
            del tail[:-40]
            if echo is not None:
                try:
                    echo(line)
                except Exception:
                    pass

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    st = _Status(status_dir)
    timed_out = cancelled = False
    need = opts.needed()
    try:
        cb(f"running {' '.join(cmd.argv)[:120]}", 0.0)
        while True:
            try:
                proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            for ev in st.poll():
                msg = _progress_of(ev, opts)
                if msg:
                    cb(msg[0], msg[1])
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            recording = {x["pid"] for x in st.of("torch")}
            written = {x["pid"] for x in st.of("trace")} | {x["pid"] for x in st.of("exit")}
            if time.monotonic() - t0 > opts.timeout and (not recording or recording - written):
                timed_out = True
                break
    except BaseException:
        _kill_group(proc.pid)
        raise
    finally:
        _kill_group(proc.pid)  # the program's leftovers too (DataLoader workers, compile workers)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        reader.join(2)
        st.poll()
        shutil.rmtree(status_dir, ignore_errors=True)
    wall = time.monotonic() - t0
    log = "\n".join(tail[-30:])
    rc = proc.returncode
    traces = sorted(x["path"] for x in st.of("trace") if os.path.isfile(x["path"]))
    if cancelled:
        raise RecordError("cancelled", "cancelled: the program was stopped", log)
    rule = next((x["desc"] for x in st.of("rule")), "") or opts.rule_text()
    if timed_out:
        seen = max((x.get("steps", 0) for x in st.of("exit")), default=0)
        if not st.of("start"):
            raise RecordError("not-python", f"no Python process with profd's hook started within "
                                            f"{opts.timeout:g} s", log)
        if not st.of("torch"):
            raise RecordError("no-torch", f"the program did not import torch within {opts.timeout:g} s", log)
        if not st.of("first-step"):
            raise RecordError("no-step", f"no step boundary within {opts.timeout:g} s under the step rule "
                                         f"'{opts.step}' ({rule}); {HOW_TO_PICK}", log)
        raise RecordError("timeout", f"the recording did not finish within {opts.timeout:g} s "
                                     f"({_reached(st)} of the {need} steps it needs: {opts.warmup} warm-up, "
                                     f"{opts.timed if opts.step != 'time' else 0} timed, 1 + {opts.steps} "
                                     "profiled); lower --warmup/--timed/--steps or raise --timeout"
                                     + (f" ({seen} steps)" if seen else ""), log)
    if not traces:
        raise _failure(st, rc, opts, rule, log, need)
    metas = [meta_of(t) for t in traces]
    ups = [m["unprofiled_us_per_step"] for m in metas if m.get("unprofiled_us_per_step")]
    notes = [x["message"] for x in st.of("note")] + [x["message"] for x in st.of("error")]
    early = st.of("ended-early")
    if early:
        notes.append(f"the program ended during the recording: {min(x['active'] for x in early)} of "
                     f"{opts.steps} profiled steps recorded")
    if rc is not None and rc < 0:
        notes.append(f"the program was killed by signal {_sig_name(-rc)} after its trace was written")
    elif rc:
        exc = st.of("exception")
        notes.append(f"the program exited with status {rc}"
                     + (f" ({exc[0]['type']}: {exc[0]['message']})" if exc else "") + " after its trace was written")
    return RecordResult(traces, metas, sum(ups) / len(ups) if ups else None, rule, rc, cmd, wall, log, notes)


def _reached(st: _Status) -> str:
    return "reached " + ("profiling" if st.of("profiling") else "the timed steps" if st.of("timing")
                         else "the warm-up")


def _progress_of(ev: dict, opts: RecordOptions) -> Optional[tuple[str, Optional[float]]]:
    k = ev.get("event")
    if k == "torch":
        return f"torch {ev.get('version')} imported" + (f" (rank {ev['rank']})" if ev.get("rank") else ""), 5.0
    if k == "first-step":
        return "first step done", 10.0
    if k == "timing":
        return f"timing {opts.timed} steps without the profiler", 30.0
    if k == "timing-again":
        return (f"a timed step took {ev['us'] / 1000:.2f} ms, {ev['us'] / max(ev['median_us'], 1e-9):.0f}x the others"
                " (one-time work, as a first call): timing again", 40.0)
    if k == "unprofiled":
        return f"unprofiled step: {ev['us_per_step'] / 1000:.2f} ms", 50.0
    if k == "profiling":
        return f"profiling 1 + {opts.steps} steps", 60.0
    if k == "trace":
        return f"trace written: {ev['path']}", 90.0
    return None


def _failure(st: _Status, rc: Optional[int], opts: RecordOptions, rule: str, log: str, need: int) -> RecordError:
    """Why a program that ended left no trace."""
    if rc is not None and rc < 0:
        return RecordError("signal", f"the program was killed by signal {_sig_name(-rc)}"
                           + (" (SIGKILL: often out of host memory)" if -rc == signal.SIGKILL else "")
                           + " before its trace was written", log, rc)
    if st.of("torch-missing"):
        py = st.of("torch-missing")[0].get("python")
        return RecordError("torch-missing", f"torch is not importable in the program's interpreter {py}: "
                                            "install it there (pip install torch)", log, rc)
    if not st.of("start"):
        if st.of("launcher"):
            return RecordError("crash", f"the launcher exited with status {rc} before any worker started", log, rc)
        return RecordError("not-python", f"no Python process started with profd's hook (exit status {rc}): "
                                         "the command is not a Python program, or it runs Python with "
                                         "-I/-E/-S or a cleared environment", log, rc)
    exc = st.of("exception")
    why = f": {exc[0]['type']}: {exc[0]['message']}" if exc else ""
    status = f"exit status {rc}" if rc else "exit status 0"
    if not st.of("torch"):
        return RecordError("no-torch", f"the program exited ({status}{why}) without importing torch", log, rc)
    steps = max((x.get("steps", 0) for x in st.of("exit")), default=0)
    if not st.of("first-step"):
        return RecordError("no-step", f"the program exited ({status}{why}) before the first step: no step "
                                      f"boundary under the step rule '{opts.step}' ({rule}); {HOW_TO_PICK}", log, rc)
    if exc or rc:
        at = exc[0].get("step") if exc else steps + 1
        return RecordError("crash", f"the program failed at step {at} ({status}{why}) before it was profiled "
                                    f"(record profiles after {opts.warmup} warm-up and "
                                    f"{opts.timed if opts.step != 'time' else 0} timed steps)", log, rc)
    return RecordError("too-few-steps", f"the program ended after {steps} steps ({rule}); record needs {need} "
                                        f"({opts.warmup} warm-up, {opts.timed if opts.step != 'time' else 0} "
                                        f"timed, 1 + {opts.steps} profiled): lower --warmup/--timed/--steps", log, rc)


# ---- what a recording reports ---------------------------------------------------------------

def profiled_us(report) -> Optional[float]:
    """The mean profiled step of a report (each step's longer of its CPU range and its GPU span)."""
    s = getattr(report, "summary", None)
    xs = [x.step_us or x.dur_us for x in (s.steps if s else []) if (x.step_us or x.dur_us)]
    return sum(xs) / len(xs) if xs else None


def record_doc(res: RecordResult, reports) -> dict:
    """The recording's facts for JSON answers (the CLI's ``record`` key, the editor, the MCP tool)."""
    prof = [p for p in (profiled_us(r) for r in reports if not r.error) if p]
    return {"traces": res.traces, "program": res.command.program, "rule": res.rule_desc,
            "unprofiledUsPerStep": res.unprofiled_us,
            "profiledUsPerStep": sum(prof) / len(prof) if prof else None,
            "exitStatus": res.exit_status, "wallS": round(res.wall_s, 3), "notes": res.notes}
