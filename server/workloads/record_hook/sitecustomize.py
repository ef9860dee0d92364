"""profd's start-up hook for ``profd-client record``: the user's program runs unmodified under
torch.profiler, set up right. Imported by Python at start-up (this folder is put first on
PYTHONPATH by ``profd.server.workloads.record``); needs only the standard library and torch, so it
works in any venv whatever profd's own interpreter is.

``PROFD_RECORD`` (JSON) says what to do. Without it this module does nothing but hand over to the
``sitecustomize`` it shadows. In the one process to record (the program; under torchrun each
rank, never the launcher; never a multiprocessing child such as a DataLoader worker, nor a
subprocess such as torch.compile's workers: ``PROFD_RECORD_ACTIVE`` marks them), once torch is
imported, each step boundary (by the step rule) advances: ``warmup`` steps run untouched, the next
``timed`` steps are timed without the profiler (the GPU synchronised at both ends: the real step
time), then the profiler records one warm-up step and ``steps`` steps, marked with ``prof.step()``
(ProfilerStep#N), and the trace is written, gzipped, atomically into ``out``. Then the program runs
on (``then: continue``) with every hook removed, or stops (``then: exit``).

Step rules: ``optimizer`` (each ``Optimizer.step()`` of the first optimizer that steps, found with
torch's global optimizer-step hook), ``forward`` (each top-level call of the first ``nn.Module`` with
parameters called at top level, through the global module forward hooks), ``func`` (each return of
``module:qualname``; the script itself answers to its file's name), ``time`` (a window of
``window_s`` seconds, by SIGALRM).

What happened is appended as JSON lines to ``status/<pid>.jsonl``; the recorder reads them.
"""
import atexit
import gzip
import json
import os
import shutil
import sys
import time


def _chain():
    """Run the sitecustomize this one shadows (a venv's, the distribution's), if any."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        mod = sys.modules.pop("sitecustomize", None)
        spec = importlib.util.find_spec("sitecustomize")
        if spec is not None and spec.origin and os.path.dirname(os.path.abspath(spec.origin)) != here:
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
        if mod is not None:
            sys.modules["sitecustomize"] = mod
    except Exception as e:  # theirs failed: Python would only warn too
        print(f"profd record: the shadowed sitecustomize failed: {e!r}", file=sys.stderr)
    finally:
        sys.path[:] = [p for p in saved if os.path.abspath(p or ".") != here]


def _argv():
    return list(getattr(sys, "orig_argv", None) or sys.argv or [])


def _is_launcher(argv):
    """torchrun / python -m torch.distributed.run|launch: its workers record, not it."""
    names = [os.path.basename(a) for a in argv[1:3]]
    if "torchrun" in names:
        return True
    for i, a in enumerate(argv[:-1]):
        if a == "-m" and argv[i + 1] in ("torch.distributed.run", "torch.distributed.launch"):
            return True
    return False


def _is_mp_child(argv):
    text = " ".join(argv)
    return "--multiprocessing-fork" in argv or "multiprocessing.spawn" in text or \
        "multiprocessing.forkserver" in text or "multiprocessing.resource_tracker" in text


class Recorder:
    def __init__(self, cfg):
        self.cfg = cfg
        self.pid = os.getpid()
        self.n = 0  # step boundaries seen
        self.phase = "warmup"  # warmup -> timed -> profiling -> done
        self.prof = None
        self.active_done = 0
        self.t0 = None
        self.hooks = []
        self.torch = None
        self.rule_desc = ""
        self.trace_path = None
        self.unprofiled_us = None
        self.intervals_us = []  # CPU time between the timed steps' boundaries (the closing sync apart)
        self.retimed = 0  # timed windows thrown away for holding one-time work
        self._busy = False
        os.makedirs(cfg["status"], exist_ok=True)
        self._status = os.path.join(cfg["status"], f"{self.pid}.jsonl")

    # ---- status ----------------------------------------------------------------------------
    def say(self, event, **kw):
        kw.update(event=event, pid=self.pid, t=time.time())
        try:
            with open(self._status, "a") as f:
                f.write(json.dumps(kw, default=str) + "\n")
        except OSError:
            pass

    # ---- torch arrives ---------------------------------------------------------------------
    def on_torch(self, torch):
        if self.torch is not None:
            return
        self.torch = torch
        rank = os.environ.get("RANK")
        self.say("torch", version=torch.__version__, python=sys.executable, rank=rank,
                 world=os.environ.get("WORLD_SIZE"))
        rule = self.cfg["rule"]
        try:
            getattr(self, "_rule_" + rule)()
        except Exception as e:
            self.say("error", message=f"cannot set up the step rule {rule}: {e!r}")

    def _rule_optimizer(self):
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.opt = None

        compiling = _is_compiling(self.torch)

        def post(opt, args, kwargs):
            if compiling() or self.opt is not None or os.getpid() != self.pid:
                return
            # The first optimizer that steps ends the steps. Its boundary is taken after its step()
            # returns (an instance wrapper), not in this hook, which runs inside the
            # Optimizer.step record_function: a ProfilerStep must not split that op.
            self.opt = opt
            self.rule_desc = f"each {type(opt).__name__}.step() ends a step"
            self.say("rule", desc=self.rule_desc)
            inner = opt.step

            def step(*a, **k):
                out = inner(*a, **k)
                if os.getpid() == self.pid:
                    self.boundary()
                return out

            step.__wrapped__ = inner
            opt.step = step
            self.hooks.append(lambda: opt.__dict__.pop("step", None))
            self.boundary()  # this first step ends here

        self.hooks.append(register_optimizer_step_post_hook(post).remove)

    def _rule_forward(self):
        """The first module called with parameters (necessarily at top level: a module without
        parameters has no children with any) ends the steps. A global pre-hook finds it, then
        gives way to a forward hook on that module alone: global hooks slow every module call and
        torch.compile guards on them in every graph."""
        import threading

        from torch.nn.modules.module import register_module_forward_pre_hook

        main = threading.main_thread().ident
        compiling = _is_compiling(self.torch)
        found = {}

        def post(mod, args, out):
            if os.getpid() == self.pid and threading.get_ident() == main:
                self.boundary()

        def pre(mod, args):
            if compiling() or found or threading.get_ident() != main or os.getpid() != self.pid:
                return
            if next(mod.parameters(), None) is None:
                return
            found["top"] = mod
            finder.remove()
            try:
                h = mod.register_forward_hook(post, always_call=True)
            except TypeError:  # torch < 2.0
                h = mod.register_forward_hook(post)
            self.hooks.append(h.remove)
            self.rule_desc = f"each call of {type(mod).__name__} (top-level nn.Module) ends a step"
            self.say("rule", desc=self.rule_desc)

        finder = register_module_forward_pre_hook(pre)
        self.hooks.append(finder.remove)

    def _rule_func(self):
        import functools

        modname, _, qual = self.cfg["func"].partition(":")
        last = qual.rsplit(".", 1)[-1]
        script = self.cfg.get("script_module")
        self.rule_desc = f"each return of {modname}:{qual} ends a step"
        me = self

        def matches(frame):
            co = frame.f_code
            if co.co_name != last or getattr(co, "co_qualname", qual) != qual:
                return False
            name = frame.f_globals.get("__name__")
            return name == modname or (name == "__main__" and modname == script)

        def rebind(frame):
            """Replace the function where it is looked up (module global, class attribute)."""
            parts = qual.split(".")
            if "<locals>" in parts:
                return False
            holder = frame.f_globals
            try:
                for p in parts[:-1]:
                    holder = (holder[p] if isinstance(holder, dict) else getattr(holder, p))
            except (KeyError, AttributeError):
                return False
            d = holder if isinstance(holder, dict) else getattr(holder, "__dict__", {})
            fn = d.get(parts[-1])
            raw = getattr(fn, "__func__", fn)
            if getattr(raw, "__code__", None) is not frame.f_code:
                return False

            @functools.wraps(raw)
            def wrapper(*a, **k):
                out = raw(*a, **k)
                if os.getpid() == me.pid:
                    me.boundary()
                return out

            new = type(fn)(wrapper) if isinstance(fn, (staticmethod, classmethod)) else wrapper
            if isinstance(holder, dict):
                holder[parts[-1]] = new
                self.hooks.append(lambda: holder.__setitem__(parts[-1], fn))
            else:
                setattr(holder, parts[-1], new)
                self.hooks.append(lambda: setattr(holder, parts[-1], fn))
            return True

        def local(frame, event, arg):
            if event == "return" and os.getpid() == me.pid:
                me.boundary()
            return local

        def glob(frame, event, arg):
            if event != "call" or not matches(frame):
                return None
            me.say("rule", desc=me.rule_desc)
            if rebind(frame):
                sys.settrace(None)  # found and wrapped: no more tracing (this first call is warm-up)
                return None
            frame.f_trace_lines = False
            me.say("note", message=f"{qual} could not be wrapped where it is defined: its returns are "
                                   "traced (adds Python overhead to every call)")
            me.target = frame.f_code

            def glob2(frame, event, arg):
                if event == "call" and frame.f_code is me.target:
                    frame.f_trace_lines = False
                    return local
                return None

            sys.settrace(glob2)
            return local

        sys.settrace(glob)
        self.hooks.append(lambda: sys.settrace(None))

    def _rule_time(self):
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            self.say("error", message="the time rule needs torch imported in the main thread")
            return
        w = float(self.cfg.get("window_s") or 1.0)
        self.rule_desc = f"each {w:g} s window is a step"
        self.say("rule", desc=self.rule_desc)
        signal.signal(signal.SIGALRM, lambda *a: self.boundary())
        signal.setitimer(signal.ITIMER_REAL, w, w)
        self.hooks.append(lambda: signal.setitimer(signal.ITIMER_REAL, 0, 0))

    # ---- the step machine ------------------------------------------------------------------
    def _sync(self):
        torch = self.torch
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
        except Exception:
            pass

    def boundary(self):
        """One step ended. Not re-entered: a time window's SIGALRM may land while the profiler
        starts or writes the trace; that boundary is skipped."""
        if self.phase == "done" or self._busy:
            return
        self._busy = True
        try:
            self._boundary()
        finally:
            self._busy = False

    def _boundary(self):
        self.n += 1
        cfg = self.cfg
        if self.n == 1:
            self.say("first-step")
        if self.phase == "warmup":
            if self.n >= cfg["warmup"]:
                if cfg["timed"] > 0 and cfg["rule"] != "time":
                    self._sync()
                    self._start_timing()
                    self.say("timing", step=self.n)
                else:
                    self._start_profiler()
            return
        if self.phase == "timed":
            self.stamps.append(time.perf_counter())
            if self.n - self.n_timed0 >= cfg["timed"]:
                self._sync()
                dt = time.perf_counter() - self.t0
                gaps = [round((b - a) * 1e6, 1) for a, b in zip(self.stamps, self.stamps[1:])]
                cold = _one_time(gaps)
                if cold is not None and self.retimed < MAX_RETIMES:
                    # A step of the window did one-time work (a first call of an op the warm-up
                    # never ran: lazy kernel loading, cuDNN/cuBLAS set-up): it is no step time.
                    # Time a fresh window instead, from this (synchronised) boundary.
                    self.retimed += 1
                    self.say("timing-again", step=cold[0], us=cold[1], median_us=cold[2])
                    self._start_timing()  # the window's closing sync above is this one's start
                    return
                self.unprofiled_us = dt / cfg["timed"] * 1e6
                self.intervals_us = gaps
                self.say("unprofiled", us_per_step=self.unprofiled_us, steps=cfg["timed"], retimed=self.retimed)
                self._start_profiler()
            return
        if self.phase == "profiling":
            self.active_done = self.n - self.n_prof0 - 1  # the first profiled step is the profiler's warm-up
            self.prof.step()
            if self.active_done >= cfg["steps"]:
                self._finish()

    def _start_timing(self):
        """A timed window starts at this (synchronised) boundary."""
        self.phase, self.t0, self.n_timed0 = "timed", time.perf_counter(), self.n
        self.stamps = [self.t0]

    def _start_profiler(self):
        from torch.profiler import ProfilerActivity, profile, schedule

        torch = self.torch
        acts = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            acts.append(ProfilerActivity.CUDA)
        cfg = self.cfg
        self.prof = profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=cfg["steps"], repeat=1),
                            on_trace_ready=self._export, record_shapes=cfg["shapes"],
                            with_stack=cfg["stack"], profile_memory=cfg["memory"])
        self.phase, self.n_prof0 = "profiling", self.n
        self.say("profiling", step=self.n)
        self.prof.start()

    def _export(self, prof):
        if self.active_done <= 0:  # only the profiler's warm-up step: nothing worth a trace
            return
        cfg = self.cfg
        stem = cfg["stem"]
        world = int(os.environ.get("WORLD_SIZE") or 1)
        if world > 1:
            stem += f".rank{os.environ.get('RANK', '0')}"
        out = cfg["out"]
        os.makedirs(out, exist_ok=True)
        raw = os.path.join(out, f".{stem}.{self.pid}.json")
        part = os.path.join(out, f".{stem}.{self.pid}.part")
        final = os.path.join(out, stem + ".pt.trace.json.gz")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as src, gzip.open(part, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.remove(raw)
        meta = {"program": cfg.get("program"), "argv": _argv(), "cwd": os.getcwd(), "rule": cfg["rule"],
                "rule_desc": self.rule_desc, "warmup": cfg["warmup"], "timed": cfg["timed"],
                "steps": self.active_done, "unprofiled_us_per_step": self.unprofiled_us,
                "timed_intervals_us": self.intervals_us, "timed_retimed": self.retimed,
                "torch": self.torch.__version__, "python": sys.version.split()[0], "rank": os.environ.get("RANK"),
                "world": world, "with_stack": cfg["stack"], "record_shapes": cfg["shapes"],
                "profile_memory": cfg["memory"], "recorded_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with open(os.path.join(out, stem + ".profd-meta"), "w") as f:
            json.dump(meta, f, indent=1, default=str)
        os.replace(part, final)  # last: a watcher sees the trace complete or not at all
        self.trace_path = final
        self.say("trace", path=final, steps=self.active_done, unprofiled_us_per_step=self.unprofiled_us)

    def _finish(self):
        """The last profiled step is done: stop the profiler, remove the hooks, exit or run on."""
        self.phase = "done"
        try:
            self.prof.stop()
        except Exception:
            pass
        if self.trace_path is None and self.active_done > 0:  # stopped early (the program ended)
            try:
                self._export(self.prof)
            except Exception as e:
                self.say("error", message=f"writing the trace failed: {e!r}")
        self.prof = None
        for undo in reversed(self.hooks):
            try:
                undo()
            except Exception:
                pass
        self.hooks = []
        if self.cfg["then"] == "exit":
            self.say("exit", code=0, steps=self.n, by="record")
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
            os._exit(0)

    # ---- the program ends ------------------------------------------------------------------
    def at_exit(self):
        if os.getpid() != self.pid:
            return
        if self.phase == "profiling":
            self.active_done = max(0, self.n - self.n_prof0 - 1)
            self.say("ended-early", steps=self.n, active=self.active_done)
            self._finish()
        self.say("exit", steps=self.n, torch=self.torch is not None)

    def excepthook(self, prev):
        def hook(tp, value, tb):
            if os.getpid() == self.pid:
                self.say("exception", type=tp.__name__, message=str(value)[:500], step=self.n + 1)
            prev(tp, value, tb)
        return hook


def _is_compiling(torch):
    """torch.compiler.is_compiling (torch >= 2.3), else dynamo's, else never."""
    for get in (lambda: torch.compiler.is_compiling, lambda: torch._dynamo.is_compiling):
        try:
            return get()
        except AttributeError:
            continue
    return lambda: False


MAX_RETIMES = 2  # a program that keeps doing new work each step is timed as it is after that


def _one_time(gaps):
    """(index, us, median us) of a timed step that held one-time work, or None: a step over 3x the
    window's median that alone moves the window's mean by more than 10%. Host intervals, so a
    GPU-bound loop (the host running ahead, then paced by the queue) never looks like one: its
    steps are even once the queue is full, and the filling is no 3x outlier."""
    if len(gaps) < 3:
        return None
    med = sorted(gaps)[len(gaps) // 2]
    i = max(range(len(gaps)), key=gaps.__getitem__)
    if gaps[i] > 3 * med and gaps[i] - med > 0.1 * sum(gaps):
        return i, gaps[i], med
    return None


class _TorchFinder:
    """Call ``Recorder.on_torch`` once ``import torch`` has finished (torch is not imported early:
    a script may set its environment first)."""

    def __init__(self, rec):
        self.rec = rec

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader, rec = spec.loader, self.rec
        inner = loader.exec_module

        def exec_module(module):
            inner(module)
            rec.on_torch(module)

        loader.exec_module = exec_module
        return spec


def _boot():
    raw = os.environ.get("PROFD_RECORD")
    if not raw or os.environ.get("PROFD_RECORD_ACTIVE"):
        return
    try:
        cfg = json.loads(raw)
    except ValueError:
        return
    argv = _argv()
    if _is_mp_child(argv):
        return
    rec = Recorder(cfg)
    if _is_launcher(argv):
        rec.say("launcher", argv=argv)
        return
    os.environ["PROFD_RECORD_ACTIVE"] = str(os.getpid())  # children of this process do not record
    rec.say("start", argv=argv, python=sys.executable, cwd=os.getcwd())
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        rec.say("torch-missing", python=sys.executable)
        print(f"profd record: torch is not importable in {sys.executable}", file=sys.stderr)
        os._exit(3)
    sys.meta_path.insert(0, _TorchFinder(rec))
    sys.excepthook = rec.excepthook(sys.excepthook)
    atexit.register(rec.at_exit)
    global _RECORDER
    _RECORDER = rec


_RECORDER = None
try:
    _boot()
finally:
    _chain()
