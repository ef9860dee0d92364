"""``profd-client record`` against hand profiling, on the GPU (issue 31's H200 check).

    python3 bench/record_check.py run --rounds 2 --out DIR [NAME ...]     # on the GPU machine
    python bench/record_check.py compare DIR                               # here, with profd

``run``: each workload is a corpus script (examples/corpus/src) with its profiler code taken out:
the scripts import ``_prof``, and the run folder's ``_prof.py`` is one whose ``profiler()`` does
nothing, whose ``export()`` writes nothing and whose ``steps()`` asks for 40 loop steps, so the
program is the script's own training or inference loop and nothing else. Each round runs it once
under ``record`` (server/workloads/record.py, the code behind ``profd-client record``, with its
defaults: 5 warm-up steps, 10 timed without the profiler, 3 profiled) and once under
examples/corpus/unprofiled.py (its loop timed with the profiler replaced by a timer, 20 steps), the
order alternating from round to round so that drift on the machine falls on both. The scripts run
from /opt/jobs/corpus_runs, as examples/corpus/record.sh records them, so the traces' frames name
the same files as the hand-profiled corpus traces. Imports only record.py (standard library) of
profd: the GPU machine needs torch and nothing of profd's dependencies. Writes
DIR/record_check.json and the first round's trace of each workload, DIR/<name>.pt.trace.json.gz.

``compare``: per workload, record's unprofiled step time against unprofiled.py's (mean of the
rounds, and each round), and the findings of the recorded trace against those of the hand-profiled
corpus trace (examples/corpus/traces/<trace>.json.gz): rule codes with their file:line, and the
verdict.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(ROOT, "examples", "corpus", "src")
RUN = "/opt/jobs/corpus_runs"
HAND = "/opt/jobs/corpus_hand"
KEEP = "/tmp/record_check/keep"  # the traces that go back, as one traces.tar
LOOP_STEPS = 40  # record needs 5 + 10 + 1 + 3 = 19 boundaries; the rest runs on after the trace

# name: (script and its arguments, record's step rule, profile_memory, hand-profiled corpus trace)
WORKLOADS = {
    "resnet18_train": (["resnet18_train.py", "--modules", "--memory"], "optimizer", True, "resnet18_train"),
    "amp_gradscaler": (["train_variants.py", "--variant", "scaler"], "optimizer", False, "amp_gradscaler"),
    "gpt2_train": (["gpt2_train.py", "--mode", "train"], "optimizer", False, "gpt2_train_modules"),
    "timm_resnet50": (["timm_train.py", "--model", "resnet50"], "optimizer", False, "timm_resnet50"),
    "bert_cls": (["bert_train.py", "--mode", "cls"], "optimizer", False, "bert_cls_fp32"),
    "optim_single": (["optimizers.py", "--impl", "single"], "optimizer", False, "optim_single"),
    "compiled_break": (["compiled.py", "--variant", "break"], "forward", False, "compiled_break"),
    "cpu_train": (["cpu_train.py"], "optimizer", False, "cpu_train"),  # runs without a GPU too
}

NO_PROFILER = f'''"""The corpus scripts' profiler set-up, taken out (bench/record_check.py)."""


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def step(self):
        pass


def profiler(*args, **kwargs):
    return _Nothing()


def steps(*args, **kwargs):
    return {LOOP_STEPS}


def export(*args, **kwargs):
    pass


def unprofiled_us(*args, **kwargs):  # the scripts' own timing of a step, taken out too
    return None
'''


def _load_record():
    path = os.path.join(ROOT, "server", "workloads", "record.py")
    spec = importlib.util.spec_from_file_location("profd_record", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["profd_record"] = mod  # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


def _stage():
    """RUN: the scripts with their profiler taken out; HAND: as they are (examples/corpus/record.sh)."""
    for d in (RUN, HAND):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for f in os.listdir(SRC):
            if f.endswith(".py"):
                shutil.copy(os.path.join(SRC, f), d)
    with open(os.path.join(RUN, "_prof.py"), "w") as f:
        f.write(NO_PROFILER)


def _hand(argv, name, limit):
    """The script profiled by its own code, as the corpus trace was: its trace file."""
    out = os.path.join(HAND, "out", name)
    p = subprocess.run(
        [sys.executable] + argv + ["--out", out],
        cwd=HAND,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=limit,
    )
    if p.returncode != 0 or not os.path.exists(out + ".json.gz"):
        raise RuntimeError(f"{argv}: rc={p.returncode}\n{(p.stdout + p.stderr)[-1500:]}")
    return out + ".json.gz"


def _env():
    e = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    return e


def _unprofiled(argv, limit):
    """unprofiled.py's step time over the same steps of the program as record's timed window: the
    scripts warm up 3 steps before their loop, record's default warm-up is 5 steps and it times the
    next 10, so the loop's first 2 steps go untimed and 10 are timed."""
    cmd = [sys.executable, os.path.join(ROOT, "examples", "corpus", "unprofiled.py"), RUN] + argv
    env = dict(_env(), UNPROFILED_SKIP="2", UNPROFILED_STEPS="10")
    p = subprocess.run(cmd, cwd=RUN, env=env, capture_output=True, text=True, timeout=limit)
    m = re.search(r"us_per_step=([\d.]+)", p.stdout)
    if not m:
        raise RuntimeError(f"unprofiled.py {argv}: rc={p.returncode}\n{(p.stdout + p.stderr)[-1500:]}")
    return float(m.group(1))


def _record(rec, argv, rule, memory, out, limit):
    opts = rec.RecordOptions(step=rule, memory=memory, then="exit", timeout=limit)
    res = rec.record([sys.executable] + argv + ["--out", os.devnull], opts, out, cwd=RUN, env=_env())
    return res.unprofiled_us, res.traces, res.metas[0].get("timed_intervals_us") if res.metas else None


def run(ns):
    rec = _load_record()
    _stage()
    os.makedirs(ns.out, exist_ok=True)
    shutil.rmtree(KEEP, ignore_errors=True)
    os.makedirs(KEEP)
    names = ns.names or list(WORKLOADS)
    results = {n: {"unprofiled_py": [], "record": [], "intervals": [], "errors": []} for n in names}
    start = time.time()
    for r in range(ns.rounds):
        for n in names:
            if time.time() - start > ns.budget:
                print(f"budget: round {r} {n} skipped", flush=True)
                continue
            argv, rule, memory, _ = WORKLOADS[n]
            out = os.path.join("/tmp/record_check", f"{n}.r{r}")
            order = ("unprofiled", "record") if r % 2 == 0 else ("record", "unprofiled")
            for what in order + (("hand",) if r == 0 and ns.hand else ()):
                try:
                    if what == "hand":
                        shutil.copy(_hand(argv, n, 300), os.path.join(KEEP, f"{n}.hand.json.gz"))
                    elif what == "unprofiled":
                        results[n]["unprofiled_py"].append(_unprofiled(argv, 300))
                    else:
                        us, traces, gaps = _record(rec, argv, rule, memory, out, 300)
                        results[n]["record"].append(us)
                        results[n]["intervals"].append(gaps)
                        if r == 0 and traces:
                            shutil.copy(traces[0], os.path.join(KEEP, f"{n}.pt.trace.json.gz"))
                except Exception as e:  # one failure must not lose the rest of the run
                    results[n]["errors"].append(f"round {r} {what}: {e}"[-800:])
            print(n, r, results[n]["unprofiled_py"], results[n]["record"], flush=True)
            with open(os.path.join(ns.out, "record_check.json"), "w") as f:
                json.dump(results, f, indent=1)
            with tarfile.open(os.path.join(ns.out, "traces.tar"), "w") as tar:
                tar.add(KEEP, arcname="traces")


def _findings(path):
    """(code, file:line, severity) of each finding, the verdict and the GPU's busy share, as
    ``profd-client analyze --format json`` reports them."""
    cli = os.path.join(os.path.dirname(sys.executable), "profd-client")
    out = subprocess.run(
        [cli, "analyze", "--no-daemon", "--format", "json", "--fail-on", "never", "--workspace", SRC, path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rep = json.loads(out)["reports"][0]
    found = set()
    for d in rep["diagnostics"]:
        loc = d.get("location") or {}
        if loc.get("line"):
            where = f"{os.path.basename(loc.get('tracePath') or loc.get('path') or '')}:{loc['line']}"
        else:
            where = "(the trace)"
        found.add((d["code"], where, d["severity"]))
    s = rep["summary"]
    busy = "" if s.get("gpuBusyPct") is None else f" (GPU busy {s['gpuBusyPct']:.0f}%)"
    return found, s["verdict"] + busy


def _mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def compare(ns):
    with open(os.path.join(ns.dir, "record_check.json")) as f:
        results = json.load(f)
    traces = tempfile.mkdtemp(prefix="record_check-")
    with tarfile.open(os.path.join(ns.dir, "traces.tar")) as tar:
        tar.extractall(traces, filter="data")
    traces = os.path.join(traces, "traces")
    for n, res in results.items():
        up, rc = res["unprofiled_py"], res["record"]
        d = (_mean(rc) / _mean(up) - 1) * 100 if up and rc else float("nan")
        print(
            f"## {n}: unprofiled.py {_mean(up):.0f} us ({', '.join(f'{x:.0f}' for x in up)}); "
            f"record {_mean(rc):.0f} us ({', '.join(f'{x:.0f}' for x in rc)}): {d:+.1f}%"
        )
        for e in res["errors"]:
            print("   error:", e.splitlines()[0])
        trace = os.path.join(traces, f"{n}.pt.trace.json.gz")
        if not os.path.exists(trace):
            continue
        hand = os.path.join(traces, f"{n}.hand.json.gz")
        if not os.path.exists(hand):  # none profiled by hand in the same run: the corpus trace
            hand = os.path.join(ROOT, "examples", "corpus", "traces", WORKLOADS[n][3] + ".json.gz")
        got, verdict = _findings(trace)
        want, hand_verdict = _findings(hand)
        print(f"   verdict: record {verdict}, hand {hand_verdict} ({os.path.relpath(hand, ROOT)})")
        for code, where, sev in sorted(set(got) | set(want)):
            mark = (
                "both "
                if (code, where, sev) in got and (code, where, sev) in want
                else ("record" if (code, where, sev) in got else "hand  ")
            )
            print(f"   {mark} {code} {where} {sev}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--rounds", type=int, default=2)
    r.add_argument("--out", required=True)
    r.add_argument("--hand", action="store_true", help="also profile each script by its own code once")
    r.add_argument("--budget", type=float, default=520, help="seconds after which no run starts")
    r.add_argument("names", nargs="*", help=", ".join(WORKLOADS))
    c = sub.add_parser("compare")
    c.add_argument("dir")
    ns = p.parse_args()
    unknown = [n for n in getattr(ns, "names", []) if n not in WORKLOADS]
    if unknown:
        p.error(f"no such workload: {', '.join(unknown)} (want {', '.join(WORKLOADS)})")
    run(ns) if ns.cmd == "run" else compare(ns)


if __name__ == "__main__":
    main()
