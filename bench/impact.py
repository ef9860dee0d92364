"""Impact you can trust: what profd says a fix gives back, against what the fix gave back.

    python bench/impact.py                   # the table (make impact)
    python bench/impact.py --write-baseline  # hold the pairs within bounds now (make impact-baseline)
    python bench/impact.py --check           # exit 1 when a held pair left the bounds

Each pair of ``bench/impact.toml`` is two corpus recordings (``examples/corpus/expectations.toml``
ids) that differ by one fix, with the step time measured without the profiler on both sides. The
prediction is what profd's step model (``server/engine/stepmodel.py``) says fixing the findings of
``before`` with the pair's codes gives back: those fixes applied together to the replayed step
(``impact.pair_gain``), computed from the stored trace, so no GPU is needed. A pair is within
bounds when the prediction is within a factor of 1.5 of the measured gain, or both are below the
noise floor (``NOISE_SHARE`` of the measured step: run-to-run spread of the unprofiled timings).
The ranking holds on a recording with two or more measured fixes when the finding profd puts first
among them is the one whose fix gave back most.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PAIRS = os.path.join(HERE, "impact.toml")
BASELINE = os.path.join(HERE, "impact_baseline.json")
BOUND = 1.5
NOISE_SHARE = 0.05  # the unprofiled timings of one script spread up to ~5% run to run (traces/meta)

sys.path.insert(0, ROOT)
_spec = importlib.util.spec_from_file_location("profd_corpus", os.path.join(HERE, "corpus.py"))
corpus = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = corpus
_spec.loader.exec_module(corpus)

from profd.server.engine.analyze import analyze_trace  # noqa: E402
from profd.server.engine.context import Options  # noqa: E402
from profd.server.config import toml  # noqa: E402
from profd.server.engine.impact import pair_gain  # noqa: E402

tomllib = toml()  # tomllib, or tomli on Python 3.10


@dataclass
class Pair:
    id: str
    before: str
    after: str
    fix: str
    codes: list
    measured_before_us: float
    measured_after_us: float
    note: Optional[str] = None

    @property
    def measured_us(self) -> float:
        return self.measured_before_us - self.measured_after_us


@dataclass
class Result:
    pair: Pair
    findings: list  # (code, location, predicted µs alone) of before's findings with the codes
    predicted_us: float
    model_step_us: float  # the replayed step of ``before``

    @property
    def ratio(self) -> Optional[float]:
        m = max(self.pair.measured_us, 0.0)
        return self.predicted_us / m if m > 0 else None

    @property
    def noise(self) -> bool:
        """Both the prediction and the measured gain below the noise floor."""
        floor = NOISE_SHARE * self.pair.measured_before_us
        return self.predicted_us <= floor and max(self.pair.measured_us, 0.0) <= floor

    @property
    def within(self) -> bool:
        m = max(self.pair.measured_us, 0.0)
        return self.noise or (m > 0 and 1 / BOUND <= self.predicted_us / m <= BOUND)


def load(path: str = PAIRS) -> list[Pair]:
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    keys = {
        "id",
        "before",
        "after",
        "fix",
        "codes",
        "measured_before_us",
        "measured_after_us",
        "source_before",
        "source_after",
        "note",
    }
    out = []
    for p in doc.get("pair", []):
        extra = set(p) - keys
        if extra:
            raise ValueError(f"{path}: pair {p.get('id')!r}: unknown keys {sorted(extra)}")
        out.append(Pair(**{k: v for k, v in p.items() if k in Pair.__dataclass_fields__}))
    return out


def _analysed(trace) -> tuple:
    """(report, context) of a corpus trace, analysed as the corpus does."""
    path = os.path.join(ROOT, trace.files[0])
    opts = Options(
        workspace=[os.path.join(ROOT, w) for w in trace.workspace],
        path_map=[(r, os.path.join(ROOT, l)) for r, l in trace.path_map],
    )
    done = analyze_trace(path, opts)
    return done.report, done.context


def score(pairs: list[Pair]) -> list[Result]:
    traces = {t.id: t for t in corpus.load()}
    cache: dict = {}
    out = []
    for p in pairs:
        if p.before not in cache:
            cache[p.before] = _analysed(traces[p.before])
        report, ctx = cache[p.before]
        ds = [d for d in report.diagnostics if d.code in p.codes]
        gain, step = pair_gain(ctx, ds)
        found = [
            (
                d.code,
                f"{os.path.basename(d.location.path or '')}:{d.location.line or ''}",
                d.impact_us_per_step,
            )
            for d in ds
        ]
        out.append(Result(p, found, gain, step))
    return out


def ranking(results: list[Result]) -> list[tuple[str, bool, str]]:
    """Per recording with two or more measured fixes: (before, right?, what)."""
    by: dict = {}
    for r in results:
        if r.findings:
            by.setdefault(r.pair.before, []).append(r)
    out = []
    for before, rs in by.items():
        if len({tuple(r.pair.codes) for r in rs}) < 2:
            continue
        best = max(rs, key=lambda r: r.pair.measured_us)
        first = max(rs, key=lambda r: max((imp or 0.0) for _, _, imp in r.findings))
        out.append(
            (
                before,
                first.pair.codes == best.pair.codes,
                f"profd first: {'+'.join(first.pair.codes)}; measured most: {'+'.join(best.pair.codes)}",
            )
        )
    return out


def _us(v: float) -> str:
    return f"{v / 1000:.2f} ms" if abs(v) >= 1000 else f"{v:.0f} µs"


def table(results: list[Result]) -> str:
    rows = [("pair", "finding(s)", "predicted/step", "measured/step", "ratio", "", "model step / measured")]
    for r in results:
        fs = ", ".join(sorted({c for c, _, _ in r.findings})) or f"(none of {', '.join(r.pair.codes)})"
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        rows.append(
            (
                r.pair.id,
                fs,
                _us(r.predicted_us),
                _us(r.pair.measured_us),
                ratio,
                "noise" if r.noise else "ok" if r.within else "OUT",
                f"{_us(r.model_step_us)} / {_us(r.pair.measured_before_us)}",
            )
        )
    w = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w[i]) for i, c in enumerate(row)).rstrip() for row in rows]
    rk = ranking(results)
    lines.append("")
    for before, ok, what in rk:
        lines.append(f"ranking on {before}: {'right' if ok else 'WRONG'} ({what})")
    n = sum(r.within for r in results)
    lines.append(f"noise: predicted and measured both under {NOISE_SHARE:.0%} of the measured step")
    lines.append(
        f"{n} of {len(results)} pairs within {BOUND}x; ranking right on {sum(ok for _, ok, _ in rk)} of {len(rk)}"
    )
    return "\n".join(lines)


def regressions(results: list[Result], baseline: dict) -> list[str]:
    held = set(baseline.get("within", []))
    return [
        f"{r.pair.id}: predicted {_us(r.predicted_us)} for a measured {_us(r.pair.measured_us)} "
        f"({r.pair.fix}); it was within {BOUND}x"
        for r in results
        if r.pair.id in held and not r.within
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    results = score(load())
    print(table(results))
    if args.write_baseline:
        with open(BASELINE, "w") as f:
            json.dump({"within": sorted(r.pair.id for r in results if r.within)}, f, indent=1)
            f.write("\n")
    if args.check:
        with open(BASELINE) as f:
            bad = regressions(results, json.load(f))
        for b in bad:
            print("REGRESSED", b)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
