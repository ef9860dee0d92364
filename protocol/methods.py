"""The custom LSP methods under ``profd/``: names and request/result types, shared by the daemon
and the client. msgspec structs with camelCase on the wire, like ``types``. No I/O.

Reports are identified by a *key*: the sha256 of the raw trace file bytes (as stored on disk,
gzip or not) plus a short fingerprint of the analysis options (workspace roots, path maps,
disabled rules, thresholds, library lines), ``"<sha256>:<opts>"``. The same content analysed with the same options is never
analysed twice.
"""

from __future__ import annotations

from typing import Any, Optional

from .job import RankSummary
from .options import AnalysisOptions
from .types import Report, Struct

ANALYZE = "profd/analyze"  # AnalyzeParams -> Report
ANALYZE_RANK = "profd/analyzeRank"  # AnalyzeParams -> RankAnalysis (the report and a job rank's summary)
REPORTS = "profd/reports"  # ReportsParams -> ReportsResult
REPORT = "profd/report"  # ReportParams -> Report (or null)
STATUS = "profd/status"  # {} -> StatusResult
REPORT_READY = "profd/reportReady"  # notification, ReportReady
RUN_WORKLOAD = "profd/runWorkload"  # {workload, params} -> {trace, table, wallS, report}

CMD_ANALYZE = "profd.analyze"  # workspace/executeCommand, arguments: [path]
CMD_SHOW = "profd.show"  # arguments: [text]; shows it (window/showMessage), returns it
CMD_ANNOTATE = "profd.annotate"  # arguments: [report key]; writes the annotated trace, opens it
CMD_RECORD = (
    "profd.record"  # arguments: [script path, {args, step, ...}]; records it (stdio / --allow-record)
)
SETTINGS_SECTION = "profd"  # workspace/configuration section; keys as in [tool.profd]

# JSON-RPC error codes used by the daemon (besides the standard -32700/-32600/-32601/-32602).
ERR_UNAUTHORIZED = -32001  # TCP initialize without the right token
ERR_FORBIDDEN_PATH = -32004  # profd/analyze outside the watched folder / workspace / allow-list
ERR_NOT_FOUND = -32003  # profd/analyze on a missing file
ERR_NOT_INITIALIZED = -32002  # LSP ServerNotInitialized (before initialize)


class AnalyzeParams(AnalysisOptions, kw_only=True):
    """A trace to analyse, with the options of this request (each one left None: the daemon's
    own, those of the watched folder)."""

    path: str


class RankAnalysis(Struct):
    report: Report
    summary: Optional[RankSummary] = None  # only for a rank of a multi-process job (job.analyze_for_jobs)


class ReportsParams(Struct):
    path: Optional[str] = None  # only reports of this trace file, or touching this source file


class ReportEntry(Struct):
    key: str
    path: str
    mtime: float
    size: int
    created: float
    error: Optional[str] = None
    sources: list[str] = []
    newest: bool = False  # the newest trace of its path


class ReportsResult(Struct):
    reports: list[ReportEntry]


class ReportParams(Struct):
    key: Optional[str] = None
    path: Optional[str] = None  # a trace path: its newest report


class StatusResult(Struct):
    version: str
    pid: int
    transport: str
    watch: Optional[str]
    workspace: list[str]
    reports: int
    queued: int  # watched files not done with yet (settling, queued, hashed, analysed, or quiet)
    running: int  # analyses in flight (watched files and profd/analyze requests)
    analyses: int  # analyses run since the daemon started
    sessions: int
    uptime_s: float
    discarded: int = 0  # of the analyses, those whose report went unused (the file changed under it)


class ReportReady(Struct):
    key: str
    path: str
    error: Optional[str] = None
    diagnostics: int = 0
    sources: list[str] = []


class RunWorkloadParams(Struct):
    workload: str
    params: dict[str, Any] = {}


__all__ = [
    "ANALYZE",
    "ANALYZE_RANK",
    "REPORTS",
    "REPORT",
    "STATUS",
    "REPORT_READY",
    "RUN_WORKLOAD",
    "CMD_ANALYZE",
    "CMD_SHOW",
    "CMD_ANNOTATE",
    "CMD_RECORD",
    "SETTINGS_SECTION",
    "AnalyzeParams",
    "RankAnalysis",
    "ReportsParams",
    "ReportEntry",
    "ReportsResult",
    "ReportParams",
    "StatusResult",
    "ReportReady",
    "RunWorkloadParams",
    "Report",
]
