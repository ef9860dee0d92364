"""The rules: one module per family, each rule declared once beside its check.

A declaration holds everything about a rule: its code, title, default severity and family (the
module it is in), the thresholds a team may set and their defaults, the check (``ctx -> iterable
of Diagnostic``), and, where it has them, the change its fix makes to the replayed step
(``server/engine/impact.py`` replays it) and its mechanical fix (text in, edits out;
``server/engine/fixes.py`` applies it)::

    @rule("zero-grad-not-none", "zero_grad writes zeros every step", "warning")
    def zero_grad_not_none(ctx: Context) -> Iterator[Diagnostic]:
        '''Evidence: ... Threshold: ... (the rule's page)'''

    @zero_grad_not_none.replay
    def _(sm: StepModel, d: Diagnostic) -> Change: ...

    @zero_grad_not_none.quick_fix
    def _(src: Source, line1: int) -> list[Fix]: ...

A rule's docstring states its evidence, its threshold and why that value; ``docs/rules.md`` is
generated from them, and ``protocol/rules_table.py`` (the catalog the front ends read, which must
not import the engine) from the declarations: ``python -m profd.server.engine.rules`` writes both.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Iterable, Optional, get_args

from ....protocol.types import Severity

Check = Callable[
    ..., Any
]  # Context -> Iterable[Diagnostic] (a job-level rule: JobReport -> Diagnostic | None)

# The order of the families is the order of the catalog and of docs/rules.md; within a family,
# the order of declaration.
FAMILIES = [
    "bound",
    "steps",
    "artifacts",
    "sync",
    "gaps",
    "kernels",
    "compile",
    "memory",
    "attention",
    "training",
    "ranks",
    "sources",
]
SEVERITIES: tuple[str, ...] = get_args(Severity)


class Rule:
    """One rule's declaration. Calling it runs its check."""

    def __init__(
        self,
        code: str,
        title: str,
        severity: Severity,
        family: str,
        check: Check,
        thresholds: Optional[dict[str, float]] = None,
        saves: Optional[tuple[Callable, Callable]] = None,
        waits: bool = False,
        keep_severity: bool = False,
        symptom: bool = False,
        job: bool = False,
    ):
        if severity not in SEVERITIES:
            raise ValueError(f"rule {code}: severity {severity!r} is not one of {', '.join(SEVERITIES)}")
        self.code, self.title, self.severity, self.family = code, title, severity, family
        self.check = check
        self.doc = inspect.getdoc(check) or ""
        self.thresholds: dict[str, float] = dict(thresholds or {})  # name -> default
        # (CPU µs per step a fix removes, GPU µs per step) from the finding's evidence: the
        # estimate when the step cannot be replayed (impact.given_back)
        self.saves = saves
        self.waits = waits  # its CPU saving is time blocked on the GPU, not dispatch the profiler inflates
        self.keep_severity = keep_severity  # a restructuring: its impact is at most, its severity stays
        self.symptom = symptom  # another rule names the cause; on a tie the cause ranks first
        self.job = job  # its check takes a job report (every rank's summary), not one trace
        self.change: Optional[Callable] = None  # (StepModel, Diagnostic) -> Change: the fix, replayed
        self.fix: Optional[Callable] = None  # (fixes.Source, 1-based line) -> [Fix]
        self.fix_sites: Optional[Callable] = None  # (fixes.Source, 1-based line) -> [(span, note)]

    def __call__(self, ctx: Any) -> Iterable:
        """The findings on one trace (a job-level rule finds none there)."""
        return () if self.job else self.check(ctx)

    def __repr__(self) -> str:
        return f"Rule({self.code!r})"

    def replay(self, fn: Callable) -> Callable:
        """Declare the change this rule's fix makes to the replayed step (impact.py)."""
        self.change = fn
        return fn

    def quick_fix(self, fn: Callable) -> Callable:
        """Declare this rule's mechanical fix: (fixes.Source, 1-based line) -> list of Fix."""
        self.fix = fn
        return fn

    def fix_elsewhere(self, fn: Callable) -> Callable:
        """Declare where this rule's fix goes when that is not the finding's line:
        (fixes.Source, 1-based line) -> list of (span, what is there)."""
        self.fix_sites = fn
        return fn


REGISTRY: dict[str, Rule] = {}


def rule(code: str, title: str, severity: Severity, **options: Any) -> Callable[[Check], Rule]:
    """Declare the decorated check as rule ``code`` of its module's family. ``options`` are
    Rule's keywords (thresholds, saves, waits, keep_severity, symptom, job), passed on as they
    are: a misspelt one fails the import, where Rule is built."""

    def wrap(fn: Check) -> Rule:
        if code in REGISTRY:
            raise KeyError(f"rule code {code!r} is declared twice")
        family = fn.__module__.rsplit(".", 1)[-1]
        if family not in FAMILIES:
            raise KeyError(f"rule {code!r}: module {fn.__module__} is not a rule family")
        r = REGISTRY[code] = Rule(code, title, severity, family, fn, **options)
        return r

    return wrap


def load_all() -> dict[str, Rule]:
    """Every rule, in catalog order."""
    if not _ORDERED:
        for fam in FAMILIES:
            importlib.import_module(f"{__name__}.{fam}")
        _ORDERED.update(sorted(REGISTRY.items(), key=lambda kv: FAMILIES.index(kv[1].family)))
    return _ORDERED


_ORDERED: dict[str, Rule] = {}


def load(codes: Iterable[str]) -> dict[str, Rule]:
    """The rules ``codes``, in catalog order, importing only their families (the catalog names
    each code's): a selection of one rule does not pay for the other families' imports. A code the
    catalog does not name brings every family."""
    from ....protocol.catalog import RULES as CATALOG

    want = set(codes)
    if _ORDERED or not want <= set(CATALOG):
        return {c: r for c, r in load_all().items() if c in want}
    for fam in sorted({CATALOG[c].family for c in want}):
        importlib.import_module(f"{__name__}.{fam}")
    got = [(c, r) for c, r in REGISTRY.items() if c in want]
    return dict(sorted(got, key=lambda kv: FAMILIES.index(kv[1].family)))  # stable: declaration order


def declared(code: str) -> Optional[Rule]:
    """The declaration of ``code`` (None for a code no rule declares), its family imported alone."""
    r = REGISTRY.get(code)
    return r if r is not None else load([code]).get(code)


def thresholds() -> dict[str, dict[str, float]]:
    """Per rule code, the thresholds a team may set (``[tool.profd.rules.CODE]``) and their
    defaults, as each rule declares them."""
    return {code: dict(r.thresholds) for code, r in load_all().items() if r.thresholds}
