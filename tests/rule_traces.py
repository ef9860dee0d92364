"""The traces the rule tests read, each report cached per session (the engine is pure): shipped
traces by short name (``conftest.trace``), examples/recorded/ (recorded for the rules on an H200,
its README says how), examples/corpus/ (other programs, examples/corpus/README.md), and the
synthetic-from-real variants a few tests need (a real trace with kernels renamed or delayed)."""

import gzip
import json
import os

from conftest import EXAMPLES, ROOT, report_of, trace
from profd.server.engine import Options, analyze_file

REC = os.path.join(EXAMPLES, "recorded")
REC_SRC = os.path.join(REC, "src")
WORKLOADS = os.path.join(ROOT, "server", "workloads")
CORPUS = os.path.join(EXAMPLES, "corpus")
_cache: dict = {}


def of(report, code):
    """The findings of ``code`` in ``report``."""
    return [d for d in report.diagnostics if d.code == code]


def one(report, code):
    found = [d for d in report.diagnostics if d.code == code]
    assert found, f"{code} did not fire"
    return found


def line_of(path, line):
    with open(path) as f:
        return f.read().splitlines()[line - 1]


def shipped_of(name, code, workspace=REC_SRC):
    """A shipped trace's findings of ``code``, its sources looked up under ``workspace``."""
    return [d for d in report_of(name, workspace=(workspace,)).diagnostics if d.code == code]


def recorded(name):
    """A trace of examples/recorded/, its sources there."""
    key = ("recorded", name)
    if key not in _cache:
        _cache[key] = analyze_file(os.path.join(REC, name + ".json.gz"), Options(workspace=[REC_SRC]))
    return _cache[key]


def recorded_tools(name):
    """A trace of examples/recorded/, its sources there and the runner's workloads."""
    key = ("recorded+workloads", name)
    if key not in _cache:
        _cache[key] = analyze_file(
            os.path.join(REC, name + ".json.gz"), Options(workspace=[REC_SRC, WORKLOADS])
        )
    return _cache[key]


def recorded_of(name, code):
    return [d for d in recorded_tools(name).diagnostics if d.code == code]


def recorded_lines(name, code, file):
    return sorted(
        d.location.line
        for d in recorded_of(name, code)
        if d.location.path and d.location.path.endswith(os.sep + file)
    )


def recorded_job(prefix):
    """The job report of a 2-rank recording in examples/recorded/."""
    from profd.server.engine.job import analyze_job

    _, jobs = analyze_job(
        [os.path.join(REC, f"{prefix}_rank{r}.json.gz") for r in (0, 1)], Options(workspace=[REC_SRC])
    )
    (job,) = jobs
    return job


def job_of(name):
    """The job report of a shipped 2-rank pair (``NAME_rank0``, ``NAME_rank1``)."""
    from profd.server.engine import job

    return job.reduce_job([job.summarize_rank(trace(f"{name}_rank{r}")) for r in (0, 1)])


def corpus(name):
    """A trace of examples/corpus/traces, its sources in examples/corpus/src."""
    key = ("corpus", name)
    if key not in _cache:
        _cache[key] = analyze_file(
            os.path.join(CORPUS, "traces", name + ".json.gz"),
            Options(workspace=[os.path.join(CORPUS, "src")]),
        )
    return _cache[key]


def corpus_of(name, code):
    return [d for d in corpus(name).diagnostics if d.code == code]


def corpus_job(name):
    from profd.server.engine import job

    key = ("job", name)
    if key not in _cache:
        _cache[key] = job.reduce_job(
            [job.summarize_rank(os.path.join(CORPUS, "traces", f"{name}_rank{r}.json.gz")) for r in (0, 1)]
        )
    return _cache[key]


def renamed_kernels(tmp_path, name: str, old_prefix: str, new: str) -> str:
    """A shipped real trace with the kernels named ``old_prefix...`` renamed to ``new``."""
    with gzip.open(trace(name)) as f:
        d = json.load(f)
    n = 0
    for e in d["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("name", "").startswith(old_prefix):
            e["name"] = new
            n += 1
    assert n
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(d))
    return str(p)


def delayed_kernels(tmp_path, name: str, which, by_us: float = 300.0) -> str:
    """A recorded real trace with the GPU events whose per-kernel ordinal satisfies ``which`` started
    ``by_us`` later (their launches unchanged)."""
    with gzip.open(os.path.join(REC, name + ".json.gz")) as f:
        d = json.load(f)
    seen: dict = {}
    for e in sorted(
        (e for e in d["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
        key=lambda e: e["ts"],
    ):
        k = seen[e["name"]] = seen.get(e["name"], -1) + 1
        if which(k):
            e["ts"] += by_us
    p = tmp_path / f"{name}_delayed.json"
    p.write_text(json.dumps(d))
    return str(p)
