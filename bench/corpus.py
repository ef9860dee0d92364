"""Score profd against the real-trace corpus: what a performance engineer expects of each trace.

    python bench/corpus.py                     # the table (make corpus)
    python bench/corpus.py --trace ID [...]    # only these traces
    python bench/corpus.py --write-baseline    # hold what passes now (make corpus-baseline)
    python bench/corpus.py --check             # exit 1 when a held expectation regressed
    python bench/corpus.py --json FILE         # every entry's outcome, for tooling

The expectations live in ``examples/corpus/expectations.toml`` (format: ``examples/corpus/README.md``).
Each trace is analysed in-process with ``analyze_file`` (``analyze_job`` for a multi-rank job) and the
trace's workspace, so findings carry mapped source lines. Per entry:

- ``expect`` holds when a finding of that code (on that rank, in that file when given) fires; when
  the entry names a ``line`` it is also *located* when such a finding sits on exactly that line.
- ``absent`` holds when no finding of that code (rank, file, line when given) fires; a violated
  absent entry is a false positive.
- ``verdict`` holds when the report's summary verdict equals it (for a job: every rank's).

Per rule: precision = held expects / (held expects + violated absents), recall = held expects /
expects, location accuracy = located / expects with a line. Findings no entry judges are listed as
unjudged, never counted. Like ``bench.py`` this prints numbers and asserts nothing on its own;
``tests/test_corpus.py`` fails when an entry held in ``examples/corpus/baseline.json`` stops holding.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from profd.server.config import toml  # tomllib, or tomli on Python 3.10

tomllib = toml()

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXPECTATIONS = os.path.join(ROOT, "examples", "corpus", "expectations.toml")
BASELINE = os.path.join(ROOT, "examples", "corpus", "baseline.json")

_TRACE_KEYS = {
    "id",
    "file",
    "files",
    "workspace",
    "vendor",
    "format",
    "recorded",
    "verdict",
    "expect",
    "absent",
    "notes",
    "path_map",
    "gpu_busy",
    "part",
}
# recorded: traces recorded for the corpus the way DESIGN.md recommends (and the earlier recordings);
# wild: recorded the way people really profile (no steps, cold calls, one activity), or by strangers
PARTS = ("recorded", "wild")
_BUSY_KEYS = {"pct", "within", "source"}
_REQUIRED_TRACE = {"id", "workspace", "vendor", "format", "recorded"}
_ENTRY_KEYS = {"id", "code", "file", "line", "rank", "why"}
VENDORS = {"nvidia", "amd", "other"}


class CorpusError(Exception):
    """The expectations file is malformed: the message names the entry and what is wrong."""


@dataclass
class Entry:
    id: str
    kind: str  # expect | absent | verdict
    code: str  # the rule code; for a verdict entry the expected verdict
    why: str
    file: Optional[str] = None
    line: Optional[int] = None
    rank: Optional[int] = None
    pct: Optional[float] = None  # gpu-busy entries: the reference GPU busy % ...
    within: Optional[float] = None  # ... and how many points profd may differ from it


@dataclass
class Trace:
    id: str
    files: list[str]  # repository-relative; several for a multi-rank job
    workspace: list[str]
    vendor: str
    format: str
    recorded: str
    entries: list[Entry]
    path_map: list[tuple[str, str]] = field(default_factory=list)
    part: str = "recorded"

    @property
    def group(self) -> str:
        return f"{self.vendor}/{self.format}"


@dataclass
class Finding:
    code: str
    path: Optional[str]
    trace_path: Optional[str]
    line: Optional[int]
    precision: str
    rank: Optional[int]


@dataclass
class Outcome:
    entry: Entry
    held: bool
    located: Optional[bool] = None  # expect entries with a line only
    seen: str = ""  # what fired instead, for the report


# --------------------------------------------------------------------------- loading


def load(path: str = EXPECTATIONS, root: str = ROOT) -> list[Trace]:
    """Parse and validate the expectations file; raises CorpusError naming the bad entry."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise CorpusError(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise CorpusError(f"{path}: not valid TOML: {e}") from None
    if doc.get("schema") != 1:
        raise CorpusError(f"{path}: schema = 1 expected, got {doc.get('schema')!r}")
    extra = set(doc) - {"schema", "trace"}
    if extra:
        raise CorpusError(f"{path}: unknown top-level keys {sorted(extra)}")
    traces, ids = [], set()
    examples = os.path.realpath(os.path.join(root, "examples"))
    for n, t in enumerate(doc.get("trace", [])):
        where = f"{path}: trace #{n + 1} ({t.get('id', '?')})"
        unknown = set(t) - _TRACE_KEYS
        if unknown:
            raise CorpusError(f"{where}: unknown keys {sorted(unknown)}")
        missing = _REQUIRED_TRACE - set(t)
        if missing:
            raise CorpusError(f"{where}: missing {sorted(missing)}")
        if ("file" in t) == ("files" in t):
            raise CorpusError(f"{where}: give exactly one of file (one trace) or files (a job's ranks)")
        files = [t["file"]] if "file" in t else list(t["files"])
        for f in files:
            full = os.path.realpath(os.path.join(root, f))
            if not (full.startswith(examples + os.sep)):
                raise CorpusError(f"{where}: {f} is not under examples/")
            if not os.path.isfile(full):
                raise CorpusError(f"{where}: {f} does not exist")
        for w in t["workspace"]:
            if not os.path.isdir(os.path.join(root, w)):
                raise CorpusError(f"{where}: workspace {w} is not a folder")
        if t["vendor"] not in VENDORS:
            raise CorpusError(f"{where}: vendor must be one of {sorted(VENDORS)}")
        if t.get("part", "recorded") not in PARTS:
            raise CorpusError(f"{where}: part must be one of {list(PARTS)}")
        tid = t["id"]
        entries = []
        if "verdict" in t:
            entries.append(
                Entry(id=f"{tid}/verdict", kind="verdict", code=t["verdict"], why="the summary verdict")
            )
        if "gpu_busy" in t:
            b = t["gpu_busy"]
            ok = (
                isinstance(b, dict)
                and not set(b) - _BUSY_KEYS
                and all(isinstance(b.get(k), (int, float)) for k in ("pct", "within"))
                and isinstance(b.get("source"), str)
                and b["source"]
            )
            if not ok:
                raise CorpusError(f"{where}: gpu_busy takes pct and within (numbers) and source (a string)")
            entries.append(
                Entry(
                    id=f"{tid}/gpu-busy",
                    kind="busy",
                    code=f"{b['pct']}±{b['within']}",
                    why=b["source"],
                    pct=float(b["pct"]),
                    within=float(b["within"]),
                )
            )
        for kind in ("expect", "absent"):
            for e in t.get(kind, []):
                ew = f"{where}: {kind} {e.get('id', '?')}"
                unknown = set(e) - _ENTRY_KEYS
                if unknown:
                    raise CorpusError(f"{ew}: unknown keys {sorted(unknown)}")
                for k in ("id", "code", "why"):
                    if not isinstance(e.get(k), str) or not e[k]:
                        raise CorpusError(f"{ew}: {k} (a non-empty string) is required")
                if "line" in e and ("file" not in e or not isinstance(e["line"], int)):
                    raise CorpusError(f"{ew}: a line needs a file and must be an integer")
                entries.append(
                    Entry(
                        id=e["id"],
                        kind=kind,
                        code=e["code"],
                        why=e["why"],
                        file=e.get("file"),
                        line=e.get("line"),
                        rank=e.get("rank"),
                    )
                )
        for e in entries:
            if e.id in ids:
                raise CorpusError(f"{where}: duplicate id {e.id}")
            ids.add(e.id)
        if tid in ids:
            raise CorpusError(f"{where}: trace id {tid} clashes with an entry id")
        traces.append(
            Trace(
                id=tid,
                files=files,
                workspace=list(t["workspace"]),
                vendor=t["vendor"],
                format=t["format"],
                recorded=t["recorded"],
                entries=entries,
                path_map=[tuple(p) for p in t.get("path_map", [])],
                part=t.get("part", "recorded"),
            )
        )
    return traces


# --------------------------------------------------------------------------- running


def findings_of(trace: Trace, root: str = ROOT) -> tuple[list[Finding], list]:
    """Run the engine on one corpus trace: every finding, and every report's summary."""
    from profd.server.engine import Options, analyze_file
    from profd.server.engine.job import analyze_job

    opts = Options(workspace=[os.path.join(root, w) for w in trace.workspace], path_map=list(trace.path_map))
    paths = [os.path.join(root, f) for f in trace.files]
    if len(paths) == 1:
        reports, jobs = [analyze_file(paths[0], opts)], []
    else:
        reports, jobs = analyze_job(paths, opts)
    out, summaries = [], []
    for k, rep in enumerate(reports):
        if rep.error:
            raise CorpusError(f"{trace.id}: {rep.trace.path}: {rep.error}")
        rank = rep.trace.rank if rep.trace.rank is not None else (k if len(reports) > 1 else None)
        summaries.append(rep.summary)
        out.extend(_finding(d, rank) for d in rep.diagnostics)
    for job in jobs:
        for d in job.diagnostics:
            rank = d.evidence.get("rank") if isinstance(d.evidence, dict) else None
            if rank is None and d.code == "rank-straggler":
                rank = job.straggler
            out.append(_finding(d, rank))
    return out, summaries


def _finding(d, rank) -> Finding:
    loc = d.location
    return Finding(
        code=d.code,
        path=loc.path,
        trace_path=loc.trace_path,
        line=loc.line,
        precision=loc.precision,
        rank=rank,
    )


def _file_matches(want: str, f: Finding) -> bool:
    want = want.replace("\\", "/").strip("/")
    for p in (f.path, f.trace_path):
        if p:
            p = p.replace("\\", "/")
            if p == want or p.endswith("/" + want):
                return True
    return False


def _matches(e: Entry, f: Finding, with_line: bool) -> bool:
    if f.code != e.code:
        return False
    if e.rank is not None and f.rank != e.rank:
        return False
    if e.file is not None and not _file_matches(e.file, f):
        return False
    if with_line and e.line is not None and f.line != e.line:
        return False
    return True


def judge(trace: Trace, found: list[Finding], summaries: list) -> tuple[list[Outcome], list[Finding]]:
    """Each entry's outcome, and the findings no entry of the trace speaks about."""
    outcomes, judged = [], set()
    verdicts = [s.verdict if s else "" for s in summaries]
    for e in trace.entries:
        if e.kind == "busy":
            busy = [s.gpu_busy_pct if s else None for s in summaries]
            ok = bool(busy) and all(b is not None and abs(b - e.pct) <= e.within for b in busy)
            outcomes.append(Outcome(e, ok, seen=",".join("none" if b is None else f"{b:.1f}" for b in busy)))
            continue
        if e.kind == "verdict":
            ok = bool(verdicts) and all(v == e.code for v in verdicts)
            outcomes.append(Outcome(e, ok, seen=",".join(sorted(set(verdicts)))))
            continue
        # An expect entry with a line is detected by the code (file, rank) firing anywhere; where it
        # sits is scored apart. An absent entry with a line forbids only that line.
        hits = [k for k, f in enumerate(found) if _matches(e, f, with_line=e.kind == "absent")]
        if e.kind == "expect":
            at = [k for k in hits if e.line is None or found[k].line == e.line]
            judged.update(at if e.line is not None else hits)
            lines = sorted({found[k].line for k in hits if found[k].line is not None})
            located = None if e.line is None else bool(at)
            outcomes.append(
                Outcome(e, bool(hits), located, seen="lines " + ",".join(map(str, lines)) if lines else "")
            )
        else:
            judged.update(hits)
            where = sorted({f"{found[k].line}" for k in hits if found[k].line is not None})
            outcomes.append(Outcome(e, not hits, seen=("at " + ",".join(where)) if where else ""))
    # A finding of an expected code at a line no entry names is still unjudged (a stray location).
    unjudged = [f for k, f in enumerate(found) if k not in judged]
    return outcomes, unjudged


@dataclass
class TraceResult:
    trace: Trace
    outcomes: list[Outcome]
    unjudged: list[Finding]
    seconds: float
    error: Optional[str] = None


def score(traces: list[Trace], root: str = ROOT) -> list[TraceResult]:
    results = []
    for t in traces:
        t0 = time.perf_counter()
        try:
            found, summaries = findings_of(t, root)
        except CorpusError as e:
            results.append(
                TraceResult(
                    t,
                    [Outcome(x, False, False if x.line else None) for x in t.entries],
                    [],
                    time.perf_counter() - t0,
                    error=str(e),
                )
            )
            continue
        outcomes, unjudged = judge(t, found, summaries)
        results.append(TraceResult(t, outcomes, unjudged, time.perf_counter() - t0))
    return results


# --------------------------------------------------------------------------- baseline


def passing(results: list[TraceResult]) -> dict[str, list[str]]:
    """The ids that hold now: ``held`` (detected / not fired / verdict) and ``located`` (at the line)."""
    held, located = [], []
    for r in results:
        for o in r.outcomes:
            if o.held:
                held.append(o.entry.id)
            if o.located:
                located.append(o.entry.id)
    return {"held": sorted(held), "located": sorted(located)}


def regressions(results: list[TraceResult], baseline: dict) -> list[str]:
    """Entries the baseline holds that no longer hold (only for the traces scored)."""
    now = passing(results)
    scored = {o.entry.id: o for r in results for o in r.outcomes}
    out = []
    for key, what in (("held", "no longer holds"), ("located", "is no longer on its line")):
        have = set(now[key])
        for i in baseline.get(key, []):
            if i in scored and i not in have:
                o = scored[i]
                out.append(
                    f"{i} {what}: {o.entry.kind} {o.entry.code}"
                    f"{_where(o.entry)} ({o.entry.why}){'; saw ' + o.seen if o.seen else ''}"
                )
    return out


def _where(e: Entry) -> str:
    s = f" {e.file}" if e.file else ""
    if e.line is not None:
        s += f":{e.line}"
    if e.rank is not None:
        s += f" rank {e.rank}"
    return s


# --------------------------------------------------------------------------- table


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b else "  - "


def table(results: list[TraceResult]) -> str:
    rules: dict[str, list[int]] = {}  # code -> [expects, held, absents, violated, lines, located]
    groups: dict[str, list[int]] = {}  # group -> [traces, expects, held, absents, violated, lines, located,
    #                                    verdicts, verdicts held, gpu-busy entries, gpu-busy held]
    for r in results:
        g = groups.setdefault(r.trace.group, [0] * 11)
        g[0] += 1
        for o in r.outcomes:
            e = o.entry
            if e.kind in ("verdict", "busy"):
                k = 7 if e.kind == "verdict" else 9
                g[k] += 1
                g[k + 1] += o.held
                continue
            row = rules.setdefault(e.code, [0] * 6)
            if e.kind == "expect":
                row[0] += 1
                row[1] += o.held
                g[1] += 1
                g[2] += o.held
                if e.line is not None:
                    row[4] += 1
                    row[5] += bool(o.located)
                    g[5] += 1
                    g[6] += bool(o.located)
            else:
                row[2] += 1
                row[3] += not o.held
                g[3] += 1
                g[4] += not o.held
    lines = []
    w = max([len(c) for c in rules] + [22])
    lines.append(
        f"{'rule':<{w}} {'expect':>6} {'held':>5} {'recall':>6} {'absent':>6} {'FP':>4} "
        f"{'precision':>9} {'lines':>5} {'at line':>7} {'loc acc':>7}"
    )
    tot = [0] * 6
    for code in sorted(rules):
        e, h, a, v, ln, lo = rules[code]
        tot = [x + y for x, y in zip(tot, rules[code])]
        lines.append(
            f"{code:<{w}} {e:>6} {h:>5} {_ratio(h, e):>6} {a:>6} {v:>4} {_ratio(h, h + v):>9} "
            f"{ln:>5} {lo:>7} {_ratio(lo, ln):>7}"
        )
    e, h, a, v, ln, lo = tot
    lines.append(
        f"{'ALL':<{w}} {e:>6} {h:>5} {_ratio(h, e):>6} {a:>6} {v:>4} {_ratio(h, h + v):>9} "
        f"{ln:>5} {lo:>7} {_ratio(lo, ln):>7}"
    )
    lines.append("")
    lines.append(
        f"{'vendor/format':<{w}} {'traces':>6} {'expect':>6} {'held':>5} {'recall':>6} "
        f"{'absent':>6} {'FP':>4} {'precision':>9} {'loc acc':>7} {'verdict':>7} {'GPU busy':>8}"
    )
    for name in sorted(groups):
        n, e, h, a, v, ln, lo, vd, vh, bd, bh = groups[name]
        lines.append(
            f"{name:<{w}} {n:>6} {e:>6} {h:>5} {_ratio(h, e):>6} {a:>6} {v:>4} "
            f"{_ratio(h, h + v):>9} {_ratio(lo, ln):>7} {f'{vh}/{vd}':>7} {f'{bh}/{bd}':>8}"
        )
    n_all = sum(len(r.outcomes) for r in results)
    n_ok = sum(o.held for r in results for o in r.outcomes)
    ln_all = sum(1 for r in results for o in r.outcomes if o.located is not None)
    ln_ok = sum(1 for r in results for o in r.outcomes if o.located)
    lines.append("")
    lines.append(
        f"{n_ok} of {n_all} entries held (expect, absent, verdict, GPU busy); {ln_ok} of {ln_all} "
        f"statement-level locations; {len(results)} traces"
    )
    for part in PARTS:
        rs = [r for r in results if r.trace.part == part]
        if rs:
            held = sum(o.held for r in rs for o in r.outcomes)
            lines.append(
                f"  {part}: {held} of {sum(len(r.outcomes) for r in rs)} entries held, {len(rs)} traces"
            )
    return "\n".join(lines)


def per_trace(results: list[TraceResult], unjudged: bool = True) -> str:
    lines = []
    for r in results:
        bad = [o for o in r.outcomes if not o.held or o.located is False]
        if not bad and not r.error and not (unjudged and r.unjudged):
            continue
        lines.append(f"{r.trace.id}  ({', '.join(r.trace.files)}; {r.seconds:.1f} s)")
        if r.error:
            lines.append(f"  ERROR  {r.error}")
        for o in bad:
            e = o.entry
            if not o.held:
                tag = {"expect": "MISS", "absent": "FALSE+", "verdict": "VERDICT", "busy": "GPU BUSY"}[e.kind]
            else:
                tag = "MISPLACED"
            seen = f"  [saw {o.seen}]" if o.seen else ""
            lines.append(f"  {tag:<9} {e.id}: {e.code}{_where(e)}  -- {e.why}{seen}")
        if unjudged and r.unjudged:
            by: dict[str, list[str]] = {}
            for f in r.unjudged:
                s = f"{os.path.basename(f.path or f.trace_path or '')}:{f.line}" if f.line else "trace"
                if f.rank is not None:
                    s += f"@r{f.rank}"
                by.setdefault(f.code, []).append(s)
            lines.append(
                "  unjudged  "
                + "; ".join(
                    f"{c} ({', '.join(sorted(set(v))[:4])}{', ...' if len(set(v)) > 4 else ''})"
                    for c, v in sorted(by.items())
                )
            )
    return "\n".join(lines)


def as_json(results: list[TraceResult]) -> dict:
    return {
        "traces": [
            {
                "id": r.trace.id,
                "files": r.trace.files,
                "group": r.trace.group,
                "seconds": round(r.seconds, 3),
                "error": r.error,
                "entries": [
                    {
                        "id": o.entry.id,
                        "kind": o.entry.kind,
                        "code": o.entry.code,
                        "held": o.held,
                        "located": o.located,
                        "seen": o.seen,
                    }
                    for o in r.outcomes
                ],
                "unjudged": [
                    {"code": f.code, "path": f.path, "line": f.line, "rank": f.rank} for f in r.unjudged
                ],
            }
            for r in results
        ]
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--expectations", default=EXPECTATIONS)
    p.add_argument("--baseline", default=BASELINE)
    p.add_argument("--trace", action="append", default=[], help="score only this trace id (repeatable)")
    p.add_argument("--write-baseline", action="store_true", help="hold every entry that passes now")
    p.add_argument("--check", action="store_true", help="exit 1 when an entry held in the baseline regressed")
    p.add_argument("--json", help="write every outcome to this file")
    p.add_argument("--no-unjudged", action="store_true", help="do not list findings no entry judges")
    a = p.parse_args(argv)
    try:
        traces = load(a.expectations)
    except CorpusError as e:
        print(f"corpus: {e}", file=sys.stderr)
        return 2
    if a.trace:
        unknown = set(a.trace) - {t.id for t in traces}
        if unknown:
            print(f"corpus: unknown trace ids {sorted(unknown)}", file=sys.stderr)
            return 2
        traces = [t for t in traces if t.id in a.trace]
    t0 = time.perf_counter()
    results = score(traces)
    print(table(results))
    detail = per_trace(results, unjudged=not a.no_unjudged)
    if detail:
        print(
            "\nper trace (MISS: expected and absent; FALSE+: fired though it would be wrong; "
            "MISPLACED: fired, not on the line)\n" + detail
        )
    print(f"\nscored in {time.perf_counter() - t0:.1f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(as_json(results), f, indent=1)
    rc = 0
    if a.write_baseline:
        if a.trace:
            print("corpus: --write-baseline scores every trace; drop --trace", file=sys.stderr)
            return 2
        with open(a.baseline, "w") as f:
            json.dump(passing(results), f, indent=1)
            f.write("\n")
        print(f"wrote {os.path.relpath(a.baseline, ROOT)}")
    elif a.check:
        try:
            with open(a.baseline) as f:
                base = json.load(f)
        except (OSError, ValueError) as e:
            print(f"corpus: cannot read the baseline {a.baseline}: {e}", file=sys.stderr)
            return 2
        reg = regressions(results, base)
        for line in reg:
            print("REGRESSED", line)
        rc = 1 if reg else 0
    if any(r.error for r in results):
        rc = rc or 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
