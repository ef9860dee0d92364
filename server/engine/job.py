"""Multi-rank jobs: per-rank summaries (map) and the job report (reduce). Pure: no I/O beyond the engine.

- ``summarize_rank(path, options) -> RankSummary`` is a pure function of one trace file; the
  summary is small and picklable, so a process pool or a cluster can map it over ranks.
- ``reduce_job(summaries) -> JobReport`` folds summaries of one job; it never needs the reports.
- ``group_jobs(summaries)`` splits a mixed set into jobs (same world size, backend, group ranks).

How the numbers are measured (all per step, µs, GPU work charged to the step whose CPU launched it,
so nothing depends on the ranks' clocks agreeing):
- compute: union of the non-communication GPU intervals (all streams) launched by the step.
- comm: union of the collective kernels launched by the step.
- exposed comm: the part of comm with no compute running anywhere on that GPU: what overlap with
  backward (DDP buckets) or prefetch (FSDP) did not hide. overlap % = 1 - exposed / comm.
- cpu own: the step's wall time minus blocking synchronisations on its thread.
- wait: NCCL kernels start when their stream reaches them and spin until every peer has arrived,
  so a collective's duration is wait plus transfer. The same collective (same step, kernel and
  ordinal) is matched across ranks; the shortest duration is the transfer (the last rank to arrive
  hardly waits), and each rank's excess over it is its wait. The rank that arrives last is the one
  the others wait for. No clock alignment is needed: only durations are compared.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Optional

from ...protocol.job import Collective, JobReport, LineCost, RankRow, RankStep, RankSummary
from ...protocol.types import Report
from . import kernels, loader
from .analyses import CPU_COLLECTIVE_PREFIXES, SYNC_CALLS, Analysis, Spans, covered, merge
from .model import TraceModel
from .rules.ranks import rank_straggler
from .rules.util import ms as _ms
from .rules.util import r3

DATALOADER_MARK = "enumerate(DataLoader)#"
HOT_LINES_PER_RANK = 50


# ---- map: one trace -> RankSummary ---------------------------------------------------------------


def summarize_rank(path: str, options=None) -> RankSummary:
    """The summary of one rank's trace (a bad trace gives a summary carrying ``error``)."""
    return analyze_rank(path, options)[1]


def analyze_rank(path: str, options=None) -> tuple[Report, RankSummary]:
    """The full per-trace report and the rank summary, from one run of the pipeline.

    A file that is not a trace gives a Report and a summary that both carry ``error``.
    """
    report, summary = _analyze(path, options, every_trace=True)
    assert summary is not None
    return report, summary


def analyze_for_jobs(
    path: str, options=None, hold: Optional[list] = None
) -> tuple[Report, Optional[RankSummary]]:
    """The report, and the rank summary when the trace is one rank of a multi-process job (a
    rank and a world size of 2 or more: what ``group_jobs`` keeps), from one run of the pipeline;
    None for a single-process trace or a file that is not a trace, which then cost no summary.
    ``hold``: the pipeline's model and analysis are appended to it, for the caller to let go of
    once the report is on its way (freeing the objects of a 1 GB trace takes ~0.1 s)."""
    return _analyze(path, options, every_trace=False, hold=hold)


def _analyze(
    path: str, options, every_trace: bool, hold: Optional[list] = None
) -> tuple[Report, Optional[RankSummary]]:
    # analyze imports the rules, which import this module: keep it lazy
    from .analyze import analyze_trace, error_report

    try:
        done = analyze_trace(path, options)
    except loader.TraceError as e:
        return error_report(path, str(e)), (RankSummary(path=path, error=str(e)) if every_trace else None)
    if hold is not None:
        hold.append(done)
    info = done.report.trace
    if not every_trace and (info.rank is None or not info.world_size or info.world_size < 2):
        return done.report, None
    return done.report, summarize_model(done.model, done.analysis, done.report)


def summarize_model(m: TraceModel, a: Analysis, report: Optional[Report] = None) -> RankSummary:
    """The rank summary from an already built model (and optionally its report)."""
    info = report.trace if report is not None else None
    dist = m.doc.distributedInfo or {}
    rank = _int(dist.get("rank"))
    world = _int(dist.get("world_size"))
    backend = dist.get("backend")
    s = RankSummary(
        path=info.path if info else "",
        sha256=info.sha256 if info else "",
        rank=rank,
        world_size=world,
        backend=str(backend) if backend is not None else None,
        group=_group_key(dist),
        start_us=_start_us(m),
        steps=step_stats(m, a),
        collectives=collectives(m, a),
    )
    if report is not None:
        s.verdict = report.summary.verdict if report.summary else None
        counts: dict[str, int] = {}
        for d in report.diagnostics:
            counts[d.code] = counts.get(d.code, 0) + 1
        s.findings = counts
        s.hot_lines = [
            LineCost(
                path=h.path, line=h.line, function=h.function, cpu_total_us=h.cpu_total_us, gpu_us=h.gpu_us
            )
            for h in report.hot_lines[:HOT_LINES_PER_RANK]
        ]
    return s


def _start_us(m: TraceModel) -> float:
    """Wall-clock start (µs since the epoch; the event clock alone without an offset)."""
    w = m.wall_start_us
    return w if w is not None else r3(m.t0)


def _group_key(dist: dict) -> str:
    world = dist.get("world_size")
    backend = dist.get("backend")
    ranks = ""
    for pg in dist.get("pg_config") or []:
        if isinstance(pg, dict) and pg.get("pg_desc") == "default_pg":
            ranks = str(pg.get("ranks"))
    # what else one job's ranks share: its process groups and the NCCL build (a job id, when the
    # trace carries one); ranks of unrelated jobs of the same size differ in these more often than not
    extra = "".join(
        f";{k}={dist[k]}" for k in ("job_id", "pg_count", "nccl_version") if dist.get(k) is not None
    )
    return f"world={world};backend={backend};ranks={ranks}{extra}" if world is not None else ""


def _step_of_launch(m: TraceModel) -> list[int]:
    """For each GPU event, the index of the step whose window holds its launch (-1 when none)."""
    out = []
    starts = {id(s): k for k, s in enumerate(m.steps)}
    for g in range(len(m.gpu)):
        li = m.launcher[g]
        st = m.step_at(m.cpu[li].ts) if li >= 0 else None
        out.append(starts[id(st)] if st is not None else -1)
    return out


def step_stats(m: TraceModel, a: Analysis) -> list[RankStep]:
    owner = _step_of_launch(m)
    n = len(m.steps)
    index = {id(s): k for k, s in enumerate(m.steps)}
    comp: list[list] = [[] for _ in range(n)]
    comm: list[list] = [[] for _ in range(n)]
    cpu_comm: list[list] = [[] for _ in range(n)]
    launches = [0] * n
    for g, e in enumerate(m.gpu):
        k = owner[g]
        if k < 0:
            continue
        launches[k] += 1
        (comm if a.gpu_class[g] == kernels.COMMUNICATION else comp)[k].append((e.ts, e.ts + e.dur))
    for i in a.cpu_comm:
        st = m.step_at(m.cpu[i].ts)
        if st is not None:
            cpu_comm[index[id(st)]].append((m.cpu[i].ts, m.cpu[i].ts + m.cpu[i].dur))
    sync = [0.0] * n
    for i, e in enumerate(m.cpu):
        if e.name in SYNC_CALLS and m.thread[i] == m.main_thread:
            st = m.step_at(e.ts)
            if st is not None:
                sync[index[id(st)]] += min(e.dur, st.end - e.ts)
    data = [0.0] * n
    for i in m.named(DATALOADER_MARK):
        e = m.cpu[i]
        st = m.step_at(e.ts) if e.cat == "user_annotation" else None
        if st is not None:
            data[index[id(st)]] += min(e.dur, st.end - e.ts)
    main = _main_ops(m)
    out = []
    for k, s in enumerate(m.steps):
        cm = merge(comm[k])
        comm_us = sum(b - x for x, b in cm)
        hidden = sum(covered(a.busy, x, b) for x, b in cm)  # compute anywhere on the GPU
        cc = merge(cpu_comm[k])
        blocked = 0.0  # the main thread idle while a CPU collective runs: waiting for it
        if cc:  # CPU collectives (gloo): hidden while the main thread computes
            cc_us = sum(b - x for x, b in cc)
            cc_hidden = sum(covered(main, x, b) for x, b in cc)
            comm_us += cc_us
            hidden += cc_hidden
            blocked = cc_us - cc_hidden
        cp = merge(comp[k])
        out.append(
            RankStep(
                number=s.number,
                dur_us=r3(s.dur),
                cpu_own_us=r3(max(0.0, s.dur - sync[k] - blocked)),
                compute_us=r3(sum(b - x for x, b in cp)),
                comm_us=r3(comm_us),
                exposed_comm_us=r3(max(0.0, comm_us - hidden)),
                data_us=r3(data[k]),
                launches=launches[k],
            )
        )
    return out


def _main_ops(m: TraceModel) -> Spans:
    """Merged spans of the main thread's ops that compute (not a collective or a wait on one)."""
    spans = []
    for i, e in enumerate(m.cpu):
        if e.cat != "cpu_op" or m.thread[i] != m.main_thread or m.enclosing_op(i) >= 0:
            continue
        if e.name.startswith(CPU_COLLECTIVE_PREFIXES) or "wait" in e.name.lower():
            continue
        spans.append((e.ts, e.ts + e.dur))
    return merge(spans)


def collectives(m: TraceModel, a: Analysis) -> list[Collective]:
    owner = _step_of_launch(m)
    seen: dict[tuple, int] = {}
    out = []

    def add(number: int, name: str, dur: float):
        short = kernels.short_name(name)
        k = (number, short)
        o = seen.get(k, 0)
        seen[k] = o + 1
        out.append(Collective(key=f"{number}|{short}|{o}", name=short, dur_us=r3(dur)))

    for g, e in enumerate(m.gpu):
        if a.gpu_class[g] == kernels.COMMUNICATION and owner[g] >= 0:
            add(m.steps[owner[g]].number, e.name, e.dur)
    for i in a.cpu_comm:
        st = m.step_at(m.cpu[i].ts)
        if st is not None:
            add(st.number, m.cpu[i].name, m.cpu[i].dur)
    return out


# ---- grouping ------------------------------------------------------------------------------------

JOB_GAP_US = 10e6


class JobGroup(list):
    """The rank summaries of one job, and what grouping them noticed (``reduce_job`` keeps it)."""

    def __init__(self, items=()):
        super().__init__(items)
        self.notes: list[str] = []


def group_jobs(summaries: Iterable[RankSummary]) -> list[JobGroup]:
    """Summaries of distributed traces grouped by job; single-process traces are left out.

    Traces of one job share world size, backend, the default group's ranks, the process-group count and
    the NCCL version (and a job id when the trace has one). Two jobs of the same
    shape (the balanced and the FSDP pair here) are told apart by time: the ranks of one job enter
    their profiled steps together (collectives hold them within a step of each other), so a start
    more than 10 s after the previous trace's, or a rank seen twice, begins another job. 10 s
    leaves room for clocks of different hosts. A rank passed twice is said, never dropped silently:
    the same trace twice (same content) is read once; two different traces of one rank are two
    runs of the job.
    """
    groups: dict[str, list[RankSummary]] = {}
    for s in summaries:
        if s.error or s.rank is None or not s.world_size or s.world_size < 2:
            continue
        groups.setdefault(s.group, []).append(s)
    jobs: list[JobGroup] = []
    for g in groups.values():
        cur = JobGroup()
        for s in sorted(g, key=lambda s: s.start_us):
            twin = next((c for c in cur if c.rank == s.rank), None)
            if twin is not None and twin.sha256 and twin.sha256 == s.sha256:
                cur.notes.append(
                    f"rank {s.rank} passed twice: {s.path} is the same trace as {twin.path}; read once"
                )
                continue
            if cur and (s.start_us - cur[-1].start_us > JOB_GAP_US or twin is not None):
                if twin is not None:
                    note = (
                        f"rank {s.rank} appears in two different traces ({twin.path}, {s.path}): "
                        f"taken as two runs of the job"
                    )
                    cur.notes.append(note)
                jobs.append(cur)
                cur = JobGroup()
                if twin is not None:
                    cur.notes.append(note)
            cur.append(s)
        if cur:
            jobs.append(cur)
    out = []
    for j in jobs:
        if len(j) >= 2 or j.notes:
            ordered = JobGroup(sorted(j, key=lambda s: s.rank))
            ordered.notes = j.notes
            out.append(ordered)
    return out


# ---- reduce: summaries -> JobReport ----------------------------------------------------------------


def reduce_job(summaries: Iterable[RankSummary]) -> JobReport:
    """The job report of the rank summaries of one job (in any order; streamed once)."""
    rows: list[RankRow] = []
    coll: dict[str, list[tuple[int, float]]] = defaultdict(list)  # key -> [(row index, dur)]
    lines: dict[tuple, LineCost] = {}
    notes: list[str] = list(getattr(summaries, "notes", ()))  # a JobGroup's
    world = backend = None
    group = ""
    for s in summaries:
        if s.error:
            notes.append(f"{s.path}: {s.error}")
            continue
        world = world or s.world_size
        backend = backend or s.backend
        group = group or s.group
        idx = len(rows)
        rows.append(_row(s))
        for c in s.collectives:
            coll[c.key].append((idx, c.dur_us))
        for h in s.hot_lines:
            k = (h.path, h.line)
            t = lines.get(k)
            if t is None:
                lines[k] = LineCost(
                    path=h.path,
                    line=h.line,
                    function=h.function,
                    cpu_total_us=h.cpu_total_us,
                    gpu_us=h.gpu_us,
                    ranks=1,
                )
            else:
                t.cpu_total_us = r3(t.cpu_total_us + h.cpu_total_us)
                t.gpu_us = r3(t.gpu_us + h.gpu_us)
                t.ranks += 1
    _waits(rows, coll)  # indices in ``coll`` are positions in arrival order: sort only after
    rows.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0))
    job = JobReport(group=group, world_size=world, backend=backend, ranks=rows, notes=notes)
    job.collectives_matched = _matched(coll, len(rows))
    if world:
        present = {r.rank for r in rows}
        job.missing_ranks = [k for k in range(world) if k not in present]
    job.hot_lines = sorted(lines.values(), key=lambda h: -(h.cpu_total_us + h.gpu_us))[:HOT_LINES_PER_RANK]
    d = rank_straggler.check(job)  # the job-level rule (rules/ranks.py)
    if d is not None:
        job.diagnostics.append(d)
        job.straggler = d.evidence.get("rank")
    return job


def _row(s: RankSummary) -> RankRow:
    n = max(1, len(s.steps))

    def mean(f):
        return r3(sum(getattr(st, f) for st in s.steps) / n)

    comm = sum(st.comm_us for st in s.steps)
    exposed = sum(st.exposed_comm_us for st in s.steps)
    return RankRow(
        rank=s.rank,
        path=s.path,
        steps=len(s.steps),
        step_us=mean("dur_us"),
        cpu_own_us=mean("cpu_own_us"),
        compute_us=mean("compute_us"),
        comm_us=mean("comm_us"),
        exposed_comm_us=mean("exposed_comm_us"),
        data_us=mean("data_us"),
        launches=mean("launches"),
        overlap_pct=r3(100.0 * (comm - exposed) / comm, 1) if comm > 0 else None,
        verdict=s.verdict,
    )


def _complete(durs: list[tuple[int, float]], n: int) -> bool:
    return len(durs) == n and len({i for i, _ in durs}) == n


def _matched(coll: dict, n: int) -> int:
    return sum(1 for durs in coll.values() if _complete(durs, n)) if n >= 2 else 0


def _waits(rows: list[RankRow], coll: dict[str, list[tuple[int, float]]]) -> None:
    """Per-rank collective wait per step, from the durations of the collectives every rank ran."""
    n = len(rows)
    if n < 2:
        return
    wait = [0.0] * n
    last = [0] * n
    steps: set = set()
    for key, durs in coll.items():
        if not _complete(durs, n):
            continue  # not every rank ran it (different profiled steps, or a partial group)
        steps.add(key.split("|", 1)[0])
        lo = min(d for _, d in durs)
        for i, d in durs:
            wait[i] += d - lo
        last[min(durs, key=lambda t: t[1])[0]] += 1
    if not steps:
        return
    for k, r in enumerate(rows):
        r.wait_us = r3(wait[k] / len(steps))
        r.transfer_us = r3(max(0.0, r.comm_us - r.wait_us))
        r.last_arrivals = last[k]


def comm_findings(job: JobReport) -> list[str]:
    """One line per rank: communication vs computation and how much of it overlaps compute."""
    out = []
    for r in job.ranks:
        ov = f"{r.overlap_pct:.0f}% overlapped" if r.overlap_pct is not None else "no collectives"
        w = f"; waiting {_ms(r.wait_us)}, transfer ~{_ms(r.transfer_us)}" if r.wait_us is not None else ""
        out.append(
            f"rank {r.rank}: step {_ms(r.step_us)}, compute {_ms(r.compute_us)}, "
            f"collectives {_ms(r.comm_us)} ({ov}, exposed {_ms(r.exposed_comm_us)}){w}"
        )
    return out


def analyze_job(paths: list[str], options=None) -> tuple[list[Report], list[JobReport]]:
    """Single-process path: every trace's report plus one job report per job among them."""
    reports, summaries = [], []
    for p in paths:
        rep, s = analyze_for_jobs(p, options)
        reports.append(rep)
        if s is not None:
            summaries.append(s)
    return reports, [reduce_job(g) for g in group_jobs(summaries)]


def _int(v) -> Optional[int]:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None
