"""Wire types for multi-rank jobs: the small per-rank summary and the job report reduced from them.

``RankSummary`` is what one trace of a distributed job boils down to: a few numbers per step, the
duration of every collective it launched (keyed so that the same collective matches across ranks)
and its hottest lines. It is small and picklable, so a cluster can map the per-trace analysis over
ranks and reduce summaries without ever holding the rank reports. ``JobReport`` is the reduction.
msgspec structs, camelCase on the wire like ``protocol/types.py``. No I/O here.
"""

from __future__ import annotations

from typing import Any, Optional

import msgspec

from .types import Diagnostic, Struct


class RankStep(Struct):
    """One profiled step of one rank. Times in µs; GPU work is charged to the step that launched it."""

    number: int
    dur_us: float  # ProfilerStep wall time on the CPU
    cpu_own_us: float  # dur minus blocking synchronisations and CPU-collective waits on the step's thread
    compute_us: float  # GPU busy in non-communication work launched by the step (union of streams)
    comm_us: float  # GPU time in collectives launched by the step (union of streams)
    exposed_comm_us: float  # the part of comm_us with no compute running anywhere on the GPU
    data_us: float = 0.0  # time in the DataLoader's __next__ (``enumerate(DataLoader)#``) in the step
    launches: int = 0  # GPU work launched by the step (kernels, copies, memsets)


class Collective(Struct):
    """One collective kernel: ``key`` is the same on every rank (step, kernel, ordinal)."""

    key: str
    name: str
    dur_us: float


class LineCost(Struct):
    """A hot source line of one rank (or, in a job report, summed over ranks)."""

    path: str
    line: int
    function: str
    cpu_total_us: float
    gpu_us: float
    ranks: int = 1


class RankSummary(Struct):
    path: str
    sha256: str = ""
    rank: Optional[int] = None
    world_size: Optional[int] = None
    backend: Optional[str] = None
    group: str = ""  # what identifies the job: world size, backend, the default group's ranks
    start_us: float = 0.0  # wall-clock start of the trace (baseTimeNanoseconds + first event), µs
    verdict: Optional[str] = None
    steps: list[RankStep] = []
    collectives: list[Collective] = []
    hot_lines: list[LineCost] = []
    findings: dict[str, int] = {}  # per-trace rule code -> count
    error: Optional[str] = None


class RankRow(Struct):
    """One rank in the job report: per-step means over its profiled steps (µs)."""

    rank: Optional[int]
    path: str
    steps: int
    step_us: float
    cpu_own_us: float
    compute_us: float
    comm_us: float
    exposed_comm_us: float
    overlap_pct: Optional[float]  # share of comm_us that ran under compute
    data_us: float = 0.0
    launches: float = 0.0
    wait_us: Optional[float] = None  # collective time spent waiting for later peers (matched collectives)
    transfer_us: Optional[float] = None  # comm_us - wait_us: what the collectives cost on their own
    last_arrivals: int = 0  # matched collectives where this rank was the last to arrive
    verdict: Optional[str] = None


class JobReport(Struct):
    group: str
    world_size: Optional[int]
    backend: Optional[str]
    ranks: list[RankRow] = []
    missing_ranks: list[int] = []
    collectives_matched: int = 0
    straggler: Optional[int] = None  # the rank rank-straggler names, if it fired
    diagnostics: list[Diagnostic] = []
    hot_lines: list[LineCost] = []  # summed over ranks
    notes: list[str] = []
    evidence: dict[str, Any] = {}


class JobList(Struct):
    jobs: list[JobReport]


def decode_summary(data: bytes | str) -> RankSummary:
    return msgspec.json.decode(data, type=RankSummary)


def decode_job(data: bytes | str) -> JobReport:
    return msgspec.json.decode(data, type=JobReport)
