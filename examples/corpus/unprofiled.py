"""Unprofiled step time of a corpus workload: its own script, with the profiler replaced by a timer.

    python3 examples/corpus/unprofiled.py SRC_DIR SCRIPT [ARGS...]
    python3 examples/corpus/unprofiled.py examples/corpus/src train_variants.py --variant scaler

SRC_DIR holds the script and its ``_prof.py`` (examples/corpus/src or examples/recorded/src). The
script runs as recorded (its warm-up, then its profiled loop), but ``_prof.profiler`` is a context
that synchronises the GPU on entry and exit and counts ``step()`` calls, ``_prof.steps`` asks for
20 steps (``UNPROFILED_STEPS`` to change it; scripts with a fixed loop keep theirs), and nothing
is exported. ``UNPROFILED_SKIP=N`` runs the loop's first N steps untimed (a loop whose first
iteration calls ops the script's warm-up never ran pays their one-time set-up there). Prints ``RESULT <script> <args> steps=N us_per_step=T``: the
mean wall time of a step, GPU work included. Needs a GPU. Used for the verdict entries whose
``notes`` say "the profiler replaced by a timer".
"""
import os, runpy, sys, time

import torch

SYNC = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)  # CPU: a smoke test
SKIP = int(os.environ.get("UNPROFILED_SKIP", "0"))


def main():
    src, script, *args = sys.argv[1:]
    sys.path.insert(0, os.path.abspath(src))
    import _prof

    class Timer:
        def __init__(self):
            self.n = 0

        def __enter__(self):
            SYNC()
            self.t = time.perf_counter()
            return self

        def step(self):
            self.n += 1
            if self.n == SKIP:  # the untimed steps are over: time from here
                SYNC()
                self.t = time.perf_counter()

        def __exit__(self, *exc):
            SYNC()
            dt = time.perf_counter() - self.t
            n = self.n - min(SKIP, self.n)
            print(f"RESULT {script} {' '.join(args)} steps={n} us_per_step={dt / max(n, 1) * 1e6:.1f}",
                  flush=True)

    _prof.profiler = lambda *a, **k: Timer()
    _prof.steps = lambda *a, **k: int(os.environ.get("UNPROFILED_STEPS", "20")) + SKIP
    _prof.export = lambda *a, **k: None
    sys.argv = [script] + args + ["--out", os.devnull]
    runpy.run_path(os.path.join(src, script), run_name="__main__")


if __name__ == "__main__":
    main()
