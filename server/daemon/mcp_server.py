"""``profd mcp``: profd for coding agents, over the Model Context Protocol (stdio), on the official SDK.

A front-end like the LSP one, and as thin: every tool translates a request into the engine's own
calls and the answer into plain JSON an agent can act on without parsing prose. Analyses go
through the running daemon when there is one (an agent and an editor then share reports and the
store), else through the same engine in this process; there is no second analysis path.

Safety, as the daemon's: paths are confined to the configured roots (after resolving symlinks),
nothing runs but the built-in workloads, and those only when the server was started with
``--allow-workloads``, and the user's own programs under the roots (``record_program``) only with
``--allow-record``. Results are bounded (``top`` with a ``cursor`` for more): an agent's context
is small.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError

from ... import __version__
from ...protocol import methods as M
from ...protocol import types as T
from ...protocol.catalog import RULES, UnknownCode, expand_code
from ...protocol.options import AnalysisOptions
from ..engine import Options, analyze_job, analyze_or_error, diff_reports, rule_page, tree_document
from . import confine, rpc
from .confine import shown
from .store import Lru

TRACE_SUFFIXES = (".json", ".pt.trace.json", ".json.gz")
MAX_TOP = 100  # the most items one answer carries, whatever the agent asks
MAX_FOLDER_TRACES = 200
MAX_JOB_RANKS = 256  # rank traces one job_report reads (each is a whole analysis)
WORKLOAD_TIMEOUT_S = 600
RECORD_TIMEOUT_S = 600.0


@dataclass
class Config:
    roots: list[str]  # real paths; every path a tool touches must lie under one of them
    workspace: list[str] = field(default_factory=list)  # default workspace (else the roots)
    find_daemon: Callable[[], Optional[dict]] = lambda: None  # the running daemon's doc, if any
    allow_workloads: bool = False
    workload_dir: Optional[str] = None
    allow_record: bool = False  # record_program: run a Python program under the roots under the profiler


class Backend:
    """Where analyses run: the running daemon when there is one, else the engine in-process. The
    in-process answers are kept per (path, size, mtime, options) so that ``hot_lines`` after
    ``analyze_trace`` does not read the trace twice; the daemon keeps its own store."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._local = Lru(max_items=16)  # bounded: in count and in the reports' bytes

    def daemon(self) -> Optional[dict]:
        try:
            return self.cfg.find_daemon()
        except OSError:
            return None

    async def analyze(self, path: str, workspace: list[str], disabled: set[str]) -> T.Report:
        doc = self.daemon()
        if doc is not None:
            try:
                wire = AnalysisOptions(workspace=workspace, path_map=[], disabled=sorted(disabled))
                rep = await rpc.with_client(doc, lambda c: rpc.analyze(c, path, wire))
                if rep is not None:
                    return rep
            except (OSError, rpc.RpcError, TimeoutError):
                pass  # the daemon went away or refused: the same engine, here
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns, tuple(workspace), tuple(sorted(disabled)))
        rep = self._local.get(key)
        if rep is None:
            opts = Options(workspace=workspace, disabled=disabled)
            rep = await anyio.to_thread.run_sync(lambda: analyze_or_error(path, opts))
            self._local.put(key, rep, len(T.encode(rep)))
        return rep

    async def reports(self) -> list[dict]:
        doc = self.daemon()
        if doc is not None:
            try:
                res = await rpc.with_client(doc, lambda c: c.request(M.REPORTS, {"path": None}, timeout=30))
                return [
                    {
                        "path": r["path"],
                        "key": r["key"],
                        "error": r.get("error"),
                        "sources": r.get("sources", []),
                        "newest": r.get("newest", False),
                        "from": "daemon",
                    }
                    for r in res["reports"]
                ]
            except (OSError, rpc.RpcError, TimeoutError):
                pass
        return [
            {
                "path": r.trace.path,
                "key": r.trace.sha256,
                "error": r.error,
                "sources": sorted({d.location.path for d in r.diagnostics if d.location.line}),
                "newest": True,
                "from": "this server",
            }
            for r in self._local.values()
        ]


# ---- translation: engine types -> what an agent reads ----------------------------------------------
def finding(d: T.Diagnostic) -> dict:
    loc = d.location
    return {
        "code": d.code,
        "severity": d.severity,
        "message": d.message,
        "file": loc.path,
        "line": loc.line,
        "column": loc.column,
        "function": loc.function,
        "precision": loc.precision,
        "evidence": d.evidence,
        "fix": d.fix,
        # what a fix gives back per step (sortable; None: no time cost) and what hides it
        "impactUsPerStep": d.impact_us_per_step,
        "impactPct": d.impact_pct,
        "impactNote": d.impact_note,
        "impactHiddenBy": d.impact_hidden_by,
        "impactThenUsPerStep": d.impact_then_us_per_step,
        "related": [{"file": r.path, "line": r.line, "function": r.function} for r in d.related],
    }


def verdict(r: T.Report) -> dict:
    s = r.summary
    if s is None:
        return {}
    return {
        "verdict": s.verdict,
        "gpuBusyPct": s.gpu_busy_pct,
        "copyBusyPct": s.copy_busy_pct,
        "cpuTotalUs": s.cpu_total_us,
        "cudaTotalUs": s.cuda_total_us,
        "steps": len(s.steps),
        "kernels": s.kernels,
        "launches": s.launches,
    }


def page(items: list, top: int, cursor: int) -> tuple[list, Optional[int]]:
    """``top`` items from ``cursor`` on, and the cursor of the next page (None at the end)."""
    top = max(1, min(int(top), MAX_TOP))
    cursor = max(0, int(cursor))
    chunk = items[cursor : cursor + top]
    nxt = cursor + top
    return chunk, (nxt if nxt < len(items) else None)


def build(cfg: Config) -> MCPServer:
    backend = Backend(cfg)
    mcp = MCPServer(
        "profd",
        version=__version__,
        instructions=(
            "profd reads torch.profiler traces (Chrome-trace JSON, .json/.pt.trace.json/.json.gz) and "
            "returns findings on the user's source lines, each with evidence and a fix. Start with "
            "analyze_trace; explain_rule gives a rule's page; diff_traces compares before/after."
        ),
    )

    def confined(path: str, what: str = "path") -> str:
        real = confine.real(os.path.expanduser(path)) if isinstance(path, str) and "\0" not in path else None
        if real is None:
            raise ToolError(f"profd: {what} must be a non-empty path without NUL bytes, got {shown(path)}")
        if not confine.within(real, cfg.roots, resolved=True):
            raise ToolError(
                f"profd: {shown(path)} is outside the roots this server may read "
                f"({', '.join(cfg.roots)}); start `profd mcp --root DIR` to allow it"
            )
        return real

    def existing_file(path: str, what: str = "path") -> str:
        real = confined(path, what)
        if not os.path.isfile(real):
            raise ToolError(f"profd: {shown(path)}: no such trace file")
        return real

    def codes(items: list[str], allow_families: bool = True) -> set[str]:
        """The rule codes of a selection (codes, families, ALL), validated as the CLI does."""
        out: set[str] = set()
        for item in items:
            try:
                out |= expand_code(item, allow_families)
            except UnknownCode as e:
                raise ToolError(
                    f"profd: unknown rule code {shown(item)}"
                    + (f"; did you mean {e.nearest!r}?" if e.nearest else "")
                )
        return out

    def selection(select: Optional[list[str]], ignore: Optional[list[str]]) -> set[str]:
        """Rule codes not to run, from a selection; an unknown code is refused with the nearest."""
        chosen = codes(select) if select else set(RULES)
        return (set(RULES) - chosen) | codes(ignore or [])

    def workspace_for(workspace: Optional[str]) -> list[str]:
        if workspace:
            return [confined(workspace, "workspace")]
        return cfg.workspace or cfg.roots

    async def report_of(path: str, workspace: Optional[str], disabled: set[str] = frozenset()) -> T.Report:
        real = existing_file(path)
        rep = await backend.analyze(real, workspace_for(workspace), set(disabled))
        if rep.error:
            raise ToolError(rep.error)
        return rep

    @mcp.tool()
    async def analyze_trace(
        path: Optional[str] = None,
        folder: Optional[str] = None,
        workspace: Optional[str] = None,
        select: Optional[list[str]] = None,
        ignore: Optional[list[str]] = None,
        top: int = 20,
        cursor: int = 0,
    ) -> dict[str, Any]:
        """Analyse one torch.profiler trace (`path`) or every trace in a folder (`folder`, recursive).
        Returns the verdict (overhead-bound, compute-bound, ...) and the findings ranked by impact,
        each with code, severity, file, line, column, evidence and fix. `workspace` is where the
        sources live (default: the server's roots); `select`/`ignore` take rule codes; `top` and
        `cursor` page through findings (or traces, for a folder)."""
        disabled = selection(select, ignore)
        if (path is None) == (folder is None):
            raise ToolError("profd: give exactly one of `path` or `folder`")
        if path is not None:
            rep = await report_of(path, workspace, disabled)
            items, nxt = page(rep.diagnostics, top, cursor)
            return {
                "trace": rep.trace.path,
                "device": rep.trace.device,
                **verdict(rep),
                "withStack": rep.trace.with_stack,
                "total": len(rep.diagnostics),
                "findings": [finding(d) for d in items],
                "nextCursor": nxt,
            }
        root = confined(folder, "folder")
        if not os.path.isdir(root):
            raise ToolError(f"profd: {shown(folder)}: not a folder")
        # each file as a path would be: a symlink in the folder that leads out of the roots is
        # not read (os.walk does not enter linked folders; a linked file is resolved here)
        traces = sorted(
            os.path.join(d, f)
            for d, _, fs in os.walk(root)
            for f in fs
            if f.endswith(TRACE_SUFFIXES) and confine.within(os.path.join(d, f), cfg.roots)
        )[:MAX_FOLDER_TRACES]
        chunk, nxt = page(traces, top, cursor)
        out = []
        for t in chunk:
            rep = await backend.analyze(t, workspace_for(workspace), disabled)
            out.append(
                {
                    "trace": t,
                    "error": rep.error,
                    **verdict(rep),
                    "total": len(rep.diagnostics),
                    "findings": [finding(d) for d in rep.diagnostics[:3]],
                }
            )
        return {"folder": root, "total": len(traces), "traces": out, "nextCursor": nxt}

    @mcp.tool()
    async def hot_lines(
        path: str, workspace: Optional[str] = None, top: int = 10, sort: str = "total", cursor: int = 0
    ) -> dict[str, Any]:
        """The source lines that cost the most in a trace: per line CPU and GPU time (forward and
        backward), launches, top kernels and bytes allocated, summed over the profiled steps.
        `sort`: total (GPU + CPU), gpu, cpu or memory."""
        keys = {
            "total": lambda h: h.gpu_us + h.cpu_total_us,
            "gpu": lambda h: h.gpu_us,
            "cpu": lambda h: h.cpu_total_us,
            "memory": lambda h: h.bytes_allocated,
        }
        if sort not in keys:
            raise ToolError(f"profd: sort must be one of {', '.join(keys)}")
        rep = await report_of(path, workspace)
        lines = sorted(rep.hot_lines, key=keys[sort], reverse=True)
        chunk, nxt = page(lines, top, cursor)
        steps = len(rep.summary.steps) if rep.summary else 0
        return {
            "trace": rep.trace.path,
            "steps": steps,
            "total": len(lines),
            "nextCursor": nxt,
            "lines": [T.to_builtins(h) for h in chunk],
        }

    @mcp.tool()
    async def module_tree(path: str, workspace: Optional[str] = None, depth: int = 4) -> dict[str, Any]:
        """The nn.Module tree of a trace recorded with with_stack: per module (path such as
        GPT2LMHeadModel.transformer.h.3.attn) calls, CPU time, GPU time forward and backward,
        kernel classes, top kernels and memory, summed over the steps; repeated blocks compared
        and the ones out of line with their peers named. `text` is the tree as profd prints it."""
        rep = await report_of(path, workspace)
        return {"trace": rep.trace.path, **tree_document(rep.modules, max(1, min(depth, 12)))}

    @mcp.tool()
    def explain_rule(code: str) -> dict[str, Any]:
        """A rule's page: what it means, its evidence, threshold and why, and how to fix it."""
        codes([code], allow_families=False)  # an unknown code is refused with the nearest
        text = rule_page(code)
        info = RULES[code]
        return {
            "code": code,
            "title": info.title,
            "defaultSeverity": info.severity,
            "family": info.family,
            "docUrl": info.doc_url,
            "doc": text,
        }

    @mcp.tool()
    async def diff_traces(
        old: str, new: str, workspace: Optional[str] = None, top: int = 20
    ) -> dict[str, Any]:
        """Before/after: what got faster or slower per line, which findings went away or are new,
        and how the verdict and step time changed, between an `old` and a `new` trace."""
        d = T.to_builtins(diff_reports(await report_of(old, workspace), await report_of(new, workspace)))
        for k, v in d.items():  # bounded: each list keeps its first `top` (the diff ranks them)
            if isinstance(v, list):
                d[k] = v[: max(1, min(int(top), MAX_TOP))]
        return d

    @mcp.tool()
    async def job_report(paths: list[str], workspace: Optional[str] = None) -> dict[str, Any]:
        """Several rank traces of one distributed job: per rank and step the compute, collective
        time, exposed communication and wait, and which rank the others wait for (rank-straggler)."""
        if not paths:
            raise ToolError("profd: job_report wants the rank traces of one job")
        if len(paths) > MAX_JOB_RANKS:
            raise ToolError(f"profd: job_report takes at most {MAX_JOB_RANKS} rank traces, got {len(paths)}")
        real = [existing_file(p) for p in paths]
        opts = Options(workspace=workspace_for(workspace))
        reports, jobs = await anyio.to_thread.run_sync(lambda: analyze_job(real, opts))
        bad = [r.error for r in reports if r.error]
        if bad:
            raise ToolError("; ".join(bad))
        return {
            "ranks": [{"trace": r.trace.path, "rank": r.trace.rank, **verdict(r)} for r in reports],
            "jobs": [T.to_builtins(j) for j in jobs],
        }

    @mcp.tool()
    async def list_reports() -> dict[str, Any]:
        """The reports held: the daemon's (every trace it watched or was asked about) when one runs,
        else those this server made."""
        rows = await backend.reports()
        return {"total": len(rows), "reports": rows[:MAX_TOP]}

    if cfg.allow_workloads:

        @mcp.tool()
        async def run_workload(workload: str, params: Optional[dict[str, Any]] = None) -> dict[str, Any]:
            """Run one of profd's built-in workloads (matmul-bias, mlp) under a correct profiler
            set-up and analyse its trace. Only built-in workloads with validated parameters run."""
            from ..workloads import runner

            try:
                spec = runner.WorkloadSpec.parse({"workload": workload, "params": params or {}})
            except runner.WorkloadError as e:
                raise ToolError(f"profd: workload: {e}")
            out = cfg.workload_dir or os.path.join(cfg.roots[0], "profd-traces")
            os.makedirs(out, exist_ok=True)
            try:
                res = await anyio.to_thread.run_sync(
                    lambda: runner.run_workload(spec, out, timeout=WORKLOAD_TIMEOUT_S)
                )
            except runner.WorkloadError as e:
                raise ToolError(f"profd: workload {spec.label()} failed: {e}")
            rep = await backend.analyze(res.trace_path, workspace_for(None), set())
            return {
                "trace": res.trace_path,
                "wallS": round(res.wall_s, 3),
                **verdict(rep),
                "findings": [finding(d) for d in rep.diagnostics[:20]],
            }

    if cfg.allow_record:

        @mcp.tool()
        async def record_program(
            command: list[str],
            cwd: Optional[str] = None,
            step: str = "optimizer",
            warmup: int = 5,
            timed: int = 10,
            steps: int = 3,
            memory: bool = False,
            timeout_s: float = RECORD_TIMEOUT_S,
            top: int = 20,
        ) -> dict[str, Any]:
            """Run a Python program (`command`: ["python", "train.py", ...], ["python", "-m", "pkg"],
            ["torchrun", ...]) unmodified under torch.profiler and analyse its trace. `step` says what
            ends a step: optimizer (each Optimizer.step()), forward (each top-level nn.Module call,
            for inference), MODULE:FUNCTION, or time. The first `warmup` steps run untouched, `timed`
            more are timed without the profiler (unprofiledUsPerStep: the real step time), then
            `steps` are profiled; the program is stopped then. Returns the trace paths (for
            diff_traces after a fix), both step times, the verdict and the findings. `cwd` (default:
            the first root) and the script must lie under the roots; at most `timeout_s` seconds."""
            from ..workloads import record as R

            if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
                raise ToolError(
                    'profd: command must be a non-empty list of strings, e.g. ["python", "train.py"]'
                )
            where = confined(cwd, "cwd") if cwd else cfg.roots[0]
            if not os.path.isdir(where):
                raise ToolError(f"profd: cwd {cwd}: not a folder")
            try:
                cmd = R.parse_command(command, where)
            except R.RecordError as e:
                raise ToolError(f"profd: record: {e}")
            if cmd.script:
                confined(cmd.script, "script")
            opts = R.RecordOptions(
                step=step,
                warmup=warmup,
                timed=timed,
                steps=steps,
                memory=memory,
                then="exit",
                timeout=max(1.0, min(float(timeout_s), RECORD_TIMEOUT_S)),
            )
            out = cfg.workload_dir or os.path.join(cfg.roots[0], "profd-traces")
            try:
                res = await anyio.to_thread.run_sync(lambda: R.record(command, opts, out, cwd=where))
            except R.RecordError as e:
                raise ToolError(f"profd: record: {e}" + (f"\n{e.log_tail[-1500:]}" if e.log_tail else ""))
            reports = [await backend.analyze(t, workspace_for(None), set()) for t in res.traces]
            bad = [r.error for r in reports if r.error]
            if bad:
                raise ToolError("; ".join(bad))
            rep = reports[0]
            diags = (
                sorted(
                    (d for r in reports for d in r.diagnostics), key=lambda d: -(d.impact_us_per_step or 0.0)
                )
                if len(reports) > 1
                else rep.diagnostics
            )
            items, _ = page(diags, top, 0)
            return {
                **R.record_doc(res, reports),
                **verdict(rep),
                "total": len(diags),
                "findings": [finding(d) for d in items],
            }

    @mcp.resource(
        "profd://rules/{code}",
        mime_type="text/markdown",
        description="The page of one profd rule (evidence, threshold, fix)",
    )
    def rule_resource(code: str) -> str:
        text = rule_page(code) if code in RULES else None
        if text is None:  # not found (an error the client is shown, no server traceback)
            try:
                expand_code(code, False)
                nearest = None
            except UnknownCode as e:
                nearest = e.nearest
            raise ResourceNotFoundError(
                f"profd: no rule {shown(code)}"
                + (f"; did you mean profd://rules/{nearest}?" if nearest else "")
                + f" (the {len(RULES)} rules: `profd-client rule --all`, or explain_rule)"
            )
        return text

    @mcp.resource(
        "profd://reports/latest",
        mime_type="application/json",
        description="The newest report of each trace path profd holds",
    )
    async def latest_reports() -> list[dict]:
        return [r for r in await backend.reports() if r["newest"]][:MAX_TOP]

    return mcp


def serve(cfg: Config) -> None:
    build(cfg).run("stdio")
