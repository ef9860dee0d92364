"""What the built-in workloads share: device choice, the profiler set up right, the export, and the
protocol with the runner (exit codes, ``PROFD-PROGRESS``/``PROFD-RESULT`` lines on stdout).

Standalone on purpose: torch and the standard library only, importable as a sibling module when a
workload script is run by its path.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

# exit codes the runner understands
EXIT_OK, EXIT_CRASH, EXIT_USAGE, EXIT_NO_TORCH, EXIT_OOM, EXIT_NO_CUDA = 0, 1, 2, 3, 4, 5


def progress(message: str, pct: float | None = None) -> None:
    print("PROFD-PROGRESS " + json.dumps({"message": message, "pct": pct}), flush=True)


def fail(code: int, message: str):
    print(f"profd-workload: {message}", file=sys.stderr, flush=True)
    print("PROFD-ERROR " + json.dumps({"code": code, "message": message}), flush=True)
    sys.exit(code)


def import_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        fail(EXIT_NO_TORCH, f"torch is not importable in {sys.executable} ({e}); "
                            "install it with `pip install profd[workload]`")
    return torch


def common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output path without extension: writes OUT.json and OUT.txt")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--active", type=int, default=3, help="active profiler steps (schedule wait=1, warmup=1)")
    p.add_argument("--warmup-iters", type=int, default=5, help="iterations run before the profiler starts")
    p.add_argument("--with-stack", dest="with_stack", action="store_true", default=True)
    p.add_argument("--no-stack", dest="with_stack", action="store_false")
    p.add_argument("--no-shapes", dest="record_shapes", action="store_false", default=True)
    p.add_argument("--profile-memory", action="store_true")
    p.add_argument("--time-iters", type=int, default=20,
                   help="unprofiled iterations timed after warm-up (0: skip); the profiler inflates the CPU side")


def pick_device(torch, want: str) -> str:
    if want == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if want == "cuda":
        fail(EXIT_NO_CUDA, "--device cuda asked for, but torch.cuda.is_available() is False "
                           f"(torch {torch.__version__})")
    print("profd-workload: no CUDA GPU visible: running on the CPU (CPU activity only)", file=sys.stderr, flush=True)
    progress("no CUDA GPU visible: running on the CPU")
    return "cpu"


def sync(torch, dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def time_unprofiled(torch, dev: str, step, iters: int) -> float | None:
    """Mean wall time of one iteration without the profiler, in µs (GPU drained at both ends)."""
    if iters <= 0:
        return None
    sync(torch, dev)
    t = time.perf_counter()
    for _ in range(iters):
        step()
    sync(torch, dev)
    return (time.perf_counter() - t) / iters * 1e6


def profile_loop(torch, dev: str, a, label: str, step, meta: dict) -> None:
    """Warm up outside the profiler, time unprofiled, then profile ``step`` under
    ``schedule(wait=1, warmup=1, active=N)`` with a ``record_function`` label and export."""
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    progress(f"warming up ({a.warmup_iters} iterations outside the profiler)", 10)
    for _ in range(a.warmup_iters):
        step()
    sync(torch, dev)
    meta["unprofiled_us_per_iter"] = time_unprofiled(torch, dev, step, a.time_iters)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    progress(f"profiling {a.active} active steps", 40)
    with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=a.active),
                 record_shapes=a.record_shapes, profile_memory=a.profile_memory,
                 with_stack=a.with_stack) as prof:
        for _ in range(2 + a.active):
            with record_function(label):
                step()
            prof.step()
    sync(torch, dev)
    progress("exporting the trace and the key_averages table", 80)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    prof.export_chrome_trace(a.out + ".json")
    sort = "cuda_time_total" if dev == "cuda" else "cpu_time_total"
    with open(a.out + ".txt", "w") as f:
        f.write(prof.key_averages().table(sort_by=sort, row_limit=25))
    meta.update(
        device=dev,
        device_name=torch.cuda.get_device_name() if dev == "cuda" else platform.processor() or platform.machine(),
        torch=torch.__version__, cuda=getattr(torch.version, "cuda", None), python=platform.python_version(),
        active=a.active, with_stack=a.with_stack, record_shapes=a.record_shapes,
        profile_memory=a.profile_memory, label=label,
    )
    with open(a.out + ".meta.json", "w") as f:
        json.dump(meta, f, indent=1)
    print("PROFD-RESULT " + json.dumps({"json": a.out + ".json", "txt": a.out + ".txt",
                                        "meta": a.out + ".meta.json"}), flush=True)


def guarded(torch, fn) -> None:
    """Run fn, mapping out-of-memory to its own exit code and a clear message."""
    try:
        fn()
    except torch.cuda.OutOfMemoryError as e:
        fail(EXIT_OOM, f"out of GPU memory: {str(e).splitlines()[0]}")
    except MemoryError:
        fail(EXIT_OOM, "out of host memory")
    except RuntimeError as e:
        if "out of memory" in str(e).lower():
            fail(EXIT_OOM, f"out of memory: {str(e).splitlines()[0]}")
        raise
