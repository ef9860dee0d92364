"""Wire types for before/after diffs of two reports of the same program (``profd/diff``). No I/O."""

from __future__ import annotations

from typing import Literal, Optional

from .types import Diagnostic, Location, Struct

Change = Literal["gone", "new", "kept"]
Trend = Literal["faster", "slower", "same", "new", "gone"]


class FindingDelta(Struct):
    """One finding present in the old report, the new one, or both (matched on code and line)."""

    code: str
    change: Change
    location: Location
    old: Optional[Diagnostic] = None
    new: Optional[Diagnostic] = None


class RuleDelta(Struct):
    code: str
    change: Change  # gone: fired before only; new: fires now only; kept: both
    old_count: int
    new_count: int


class LineDelta(Struct):
    """One source line's cost per step, before and after (µs)."""

    path: str
    line: int
    function: str
    trend: Trend
    old_cpu_us: float = 0.0
    new_cpu_us: float = 0.0
    old_gpu_us: float = 0.0
    new_gpu_us: float = 0.0
    delta_us: float = 0.0  # (new - old) of CPU total + GPU, per step; negative is faster
    codes_gone: list[str] = []
    codes_new: list[str] = []


class SummaryDelta(Struct):
    old_verdict: Optional[str] = None
    new_verdict: Optional[str] = None
    old_step_us: Optional[float] = None  # median step
    new_step_us: Optional[float] = None
    old_gpu_busy_pct: Optional[float] = None
    new_gpu_busy_pct: Optional[float] = None
    old_cpu_per_step_us: Optional[float] = None
    new_cpu_per_step_us: Optional[float] = None
    old_cuda_per_step_us: Optional[float] = None
    new_cuda_per_step_us: Optional[float] = None


class ReportDiff(Struct):
    old_path: str
    new_path: str
    summary: SummaryDelta
    rules: list[RuleDelta] = []
    findings: list[FindingDelta] = []
    lines: list[LineDelta] = []
    # "" when the two traces look like runs of one program; else why they do not (their source files
    # share nothing): a diff of two programs compares nothing line by line
    different_programs: str = ""
