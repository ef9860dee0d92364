"""The wire contract: the report a trace turns into, shared by the daemon, the CLI and the tests.

msgspec structs with camelCase names on the wire (``hotLines``, ``cpuTotalUs``), so the same
types encode JSON for ``profd-client --format json`` and the LSP custom methods. No I/O here.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import msgspec

Severity = Literal["error", "warning", "information", "hint"]
Precision = Literal["statement", "function", "trace"]
Verdict = Literal[
    "overhead-bound", "compute-bound", "transfer-bound", "balanced", "set-up", "cpu-only", "no-steps"
]

SEVERITY_RANK = {"hint": 0, "information": 1, "warning": 2, "error": 3}


class Struct(msgspec.Struct, rename="camel", omit_defaults=False, kw_only=True):
    """Base for every wire type: camelCase keys, keyword construction."""


class Location(Struct):
    """Where a finding lies: a source line (1-based) or, without stacks, the trace itself."""

    path: Optional[str] = None  # workspace path after mapping, else the trace's frame path
    line: Optional[int] = None
    column: int = 1  # 1-based, in characters: where the call that issued the work starts
    precision: Precision = "trace"
    function: Optional[str] = None
    trace_path: Optional[str] = None  # the path as the trace named it, before mapping
    module: Optional[str] = None  # the nn.Module the work ran in, when known ("GPT2Attention.c_attn")
    library: bool = False  # a line of library code (transformers, torchvision), not the user's
    end_line: Optional[int] = None  # the range of that call (exclusive end column), when known
    end_column: Optional[int] = None
    note: Optional[str] = None  # for a related location: how it relates to the finding


class Diagnostic(Struct):
    code: str
    severity: Severity
    message: str
    location: Location
    evidence: dict[str, Any] = {}
    fix: Optional[str] = None
    related: list[Location] = []
    # What a fix gives back (engine/impact.py): µs per step and its share of the step (%); None
    # for a finding with no time cost (memory, summaries, the profiler's own time).
    impact_us_per_step: Optional[float] = None
    impact_pct: Optional[float] = None
    # A fix that gives back little of what it removes, because the other side bounds the step:
    # why (``impact_note``: "hidden behind the CPU-bound step: fix X first (f.py:12); then ~Y per
    # step"), the finding whose fix unhides it and what this one gives back after that.
    impact_note: Optional[str] = None
    impact_hidden_by: Optional[str] = None
    impact_then_us_per_step: Optional[float] = None


class KernelStat(Struct):
    name: str
    kernel_class: str
    count: int
    total_us: float


class HotLine(Struct):
    """What one user source line cost, summed over the active steps."""

    path: str
    line: int
    function: str
    precision: Precision
    trace_path: str
    calls: int = 0
    cpu_self_us: float = 0.0
    cpu_total_us: float = 0.0
    gpu_us: float = 0.0
    gpu_forward_us: float = 0.0
    gpu_backward_us: float = 0.0
    cpu_backward_us: float = 0.0
    launches: int = 0
    kernel_classes: dict[str, float] = {}
    top_kernels: list[KernelStat] = []
    bytes_allocated: int = 0
    library: bool = False  # a library's line (a module's forward), shown only when asked for
    # with what the line calls (its own cost above is "self"): its calls' CPU span, and the GPU work
    # launched beneath it in any function it calls, forward and (through fwdbwd) backward
    cpu_inclusive_us: float = 0.0
    gpu_inclusive_us: float = 0.0


class ModuleNode(Struct):
    """One nn.Module instance in the module tree, summed over the active steps and inclusive of its
    submodules (``gpu_self_us`` is what no submodule holds, so a node's ``gpu_us`` is its
    ``gpu_self_us`` plus its children's). Backward time is charged through the ``fwdbwd`` flows."""

    id: int
    parent: int  # -1 at a root
    path: str  # "TinyGPT.blocks.0.attn.qkv" from the source when readable, else classes: "GPT2Block[3]"
    name: str  # the last part of ``path``
    class_name: str
    instance: str  # as the profiler named it: "GPT2Block_3"
    role: str  # what it is to its parent, across instances: "GPT2Attention.c_attn" (Location.module)
    depth: int
    calls: int = 0
    cpu_total_us: float = 0.0
    cpu_self_us: float = 0.0  # forward CPU not inside a submodule
    cpu_backward_us: float = 0.0
    gpu_us: float = 0.0
    gpu_forward_us: float = 0.0
    gpu_backward_us: float = 0.0
    gpu_self_us: float = 0.0
    launches: int = 0
    kernel_classes: dict[str, float] = {}  # class -> GPU µs
    kernel_counts: dict[str, int] = {}  # class -> kernels run
    top_kernels: list[KernelStat] = []
    bytes_allocated: int = 0
    children: list[int] = []  # hottest first
    call_site: Optional[Location] = None  # the user line that calls it
    source: Optional[Location] = None  # its forward's definition: ``path`` only when the file is
    # here (``trace_path`` as the trace names it), ``library`` when it is not the user's code
    outlier: Optional[str] = None  # how it is out of line with its siblings, when it is


class ModuleGroup(Struct):
    """Siblings of one class under one parent (``GPT2Block`` ×12): the same work, so comparable."""

    parent: int
    class_name: str
    members: list[int]
    gpu_median_us: float
    gpu_min_us: float
    gpu_max_us: float
    outliers: list[int] = []  # nodes (members, or a member's submodule) out of line


class ModuleTree(Struct):
    available: bool
    note: Optional[str] = None  # why there is no tree, or what it leaves out
    steps: int = 1
    gpu_us: float = 0.0  # all GPU time of the trace
    module_gpu_us: float = 0.0  # the part under some module (forward or, via fwdbwd, backward)
    nodes: list[ModuleNode] = []
    roots: list[int] = []  # hottest first
    groups: list[ModuleGroup] = []


class Step(Struct):
    name: str
    start_us: float  # from the start of the trace's first event
    dur_us: float  # the CPU's ProfilerStep range
    gpu_busy_us: float  # GPU busy inside that range (any step's work)
    gpu_work_us: float = 0.0  # GPU time of the work this step launched, wherever it ran
    gpu_span_us: float = 0.0  # first start to last end of that work
    bound: Literal["cpu", "gpu"] = "cpu"  # gpu: the work outlasts the CPU range (the CPU ran ahead)
    step_us: float = 0.0  # the longer of the two: dur_us, or gpu_span_us when the GPU bounds it
    copy_us: float = 0.0  # copy-engine time (DMA copies, memsets) inside the range: GPU work too


class Summary(Struct):
    verdict: Verdict
    cpu_total_us: float  # as the profiler table's "Self CPU time total"
    cuda_total_us: float  # as the profiler table's "Self CUDA time total"
    gpu_busy_pct: Optional[float]  # of the active window; None without GPU events
    window_us: float
    steps: list[Step] = []
    kernel_classes: dict[str, float] = {}  # class -> GPU µs
    launches: int = 0
    kernels: int = 0
    notes: list[str] = []  # what profd read but could not use, said once (unanalysed devices, unmapped paths)
    # of the active window, the time the copy engines ran host/device copies or memsets (their own
    # engines: not in gpu_busy_pct, which counts kernels); None without GPU events
    copy_busy_pct: Optional[float] = None
    # how the window was cut into steps: ProfilerStep markers, a loop's iterations, or one step
    steps_from: str = ""
    # of the active window, the share that is one-time set-up (compiling, CUDA
    # context and module loading, first-call library set-up): left out of the steady-state verdict
    setup_pct: Optional[float] = None


class TraceInfo(Struct):
    path: str
    sha256: str
    size_bytes: int
    device: Optional[str] = None
    compute_capability: Optional[str] = None
    cuda_runtime: Optional[str] = None
    cupti: Optional[str] = None
    with_stack: bool = False
    record_shapes: bool = False
    profile_memory: bool = False
    events: int = 0
    rank: Optional[int] = None
    world_size: Optional[int] = None
    recorded_us: Optional[float] = None  # when it was recorded, µs since the epoch (if it says)


class Report(Struct):
    trace: TraceInfo
    summary: Optional[Summary] = None
    diagnostics: list[Diagnostic] = []
    hot_lines: list[HotLine] = []
    modules: Optional[ModuleTree] = None
    error: Optional[str] = None  # set when the file could not be read as a trace
    profd_version: str = ""
    suppressed: dict[str, int] = {}  # rule code -> findings dropped by an inline `# profd: ignore[...]`


class ReportList(Struct):
    reports: list[Report]


_encoder = msgspec.json.Encoder()


def to_builtins(obj: Any) -> Any:
    """A wire type as plain dicts/lists (for pygls, which serialises with its own converter)."""
    return msgspec.to_builtins(obj)


def encode(obj: Any) -> bytes:
    return _encoder.encode(obj)


def decode_report(data: bytes | str) -> Report:
    return msgspec.json.decode(data, type=Report)


def report_from_builtins(obj: Any) -> Report:
    return msgspec.convert(obj, type=Report)
