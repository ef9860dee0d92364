"""``profd mcp`` end to end: the MCP SDK's own stdio client drives a real ``profd mcp`` process on
the shipped real traces, as a coding agent would."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from conftest import EXAMPLES, SRC, report_of, trace  # noqa: E402
from daemon_util import Daemon  # noqa: E402

from profd.protocol.catalog import RULES  # noqa: E402
from profd.server.engine.rules.docs import rule_page  # noqa: E402
import os

from daemon_util import trace_bytes

PY = sys.executable


def server(*args, env=None) -> StdioServerParameters:
    return StdioServerParameters(
        command=PY,
        args=["-m", "profd.server.daemon.cli", "mcp", *args],
        env={"PYTHONUNBUFFERED": "1", **(env or {})},
    )


async def call(session: ClientSession, tool: str, **arguments):
    res = await session.call_tool(tool, arguments)
    if res.is_error:
        return None, res.content[0].text
    return res.structured_content, None


async def with_session(params: StdioServerParameters, fn):
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            return await fn(s)


async def test_agent_session_over_stdio(tmp_path):
    """List the tools, analyse a real trace (findings on the planted lines, as the engine says),
    page, explain a rule, diff naive vs tuned, and get clear errors for bad requests."""
    foreign = tmp_path / "notes.json"  # a file an agent may well pass by mistake
    foreign.write_text("# my notes, not JSON\n")
    records = tmp_path / "records.json"  # JSON, but objects with no ph/ts: not a trace either
    records.write_text('[{"name": "a", "value": 1}, {"name": "b", "value": 2}]')
    naive, tuned = trace("tinygpt_naive"), trace("tinygpt_tuned")
    engine = report_of("tinygpt_naive")

    async def go(s: ClientSession):
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert {
            "analyze_trace",
            "hot_lines",
            "explain_rule",
            "diff_traces",
            "job_report",
            "list_reports",
        } <= set(tools)
        assert "run_workload" not in tools  # not without --allow-workloads
        assert "path" in tools["analyze_trace"].input_schema["properties"]

        out, err = await call(s, "analyze_trace", path=naive, workspace=SRC, top=100)
        assert err is None
        assert out["verdict"] == engine.summary.verdict
        assert out["total"] == len(engine.diagnostics) == len(out["findings"])
        assert [f["code"] for f in out["findings"]] == [d.code for d in engine.diagnostics]
        # the planted `loss.item()` sync, on its statement in the user's training loop
        sync = [f for f in out["findings"] if f["code"] == "host-sync"]
        assert any(f["file"].endswith("train_tinygpt.py") and f["line"] == 70 for f in sync), sync
        assert all(sf["fix"] and sf["evidence"] for sf in sync)  # what to do, and the numbers why
        assert [f["evidence"] for f in out["findings"]] == [d.evidence for d in engine.diagnostics]

        first, _ = await call(s, "analyze_trace", path=naive, workspace=SRC, top=2)
        assert len(first["findings"]) == 2 and first["nextCursor"] == 2
        rest, _ = await call(s, "analyze_trace", path=naive, workspace=SRC, top=100, cursor=2)
        assert [f["code"] for f in first["findings"] + rest["findings"]] == [
            f["code"] for f in out["findings"]
        ]
        assert rest["nextCursor"] is None

        hot, _ = await call(s, "hot_lines", path=naive, workspace=SRC, top=3, sort="gpu")
        gpu = [h["gpuUs"] for h in hot["lines"]]
        assert len(gpu) == 3 and gpu == sorted(gpu, reverse=True)
        assert gpu[0] == max(h.gpu_us for h in engine.hot_lines)

        mods, _ = await call(s, "module_tree", path=naive, workspace=SRC, depth=2)
        assert mods["available"] and "blocks.0 [Block]" in mods["text"]
        assert [n["path"] for n in mods["nodes"]][0] == "TinyGPT"
        assert {n["path"] for n in mods["nodes"]} >= {f"TinyGPT.blocks.{k}" for k in range(4)}

        rule, _ = await call(s, "explain_rule", code="host-sync")
        assert rule["code"] == "host-sync" and rule["doc"] == rule_page("host-sync")
        assert rule["defaultSeverity"] == RULES["host-sync"].severity
        _, err = await call(s, "explain_rule", code="host-synk")
        assert "unknown rule code" in err and "host-sync" in err

        d, _ = await call(s, "diff_traces", old=naive, new=tuned, workspace=SRC)
        gone = {f["code"] for f in d["findings"] if f["change"] == "gone"}
        assert {"host-sync", "pageable-memcpy"} <= gone, d["findings"]

        _, err = await call(s, "analyze_trace", path="/etc/passwd")
        assert "outside the roots" in err
        for bad in (foreign, records):
            _, err = await call(s, "analyze_trace", path=str(bad))
            assert err is not None and str(bad) in err and "trace" in err, err
        _, err = await call(s, "analyze_trace", path=naive, select=["not-a-rule"])
        assert "unknown rule code" in err

        text = await s.read_resource("profd://rules/fp32-matmul")
        assert "fp32" in text.contents[0].text
        # an unknown rule: a helpful error (was "Error creating resource from template" and a
        # server traceback)
        with pytest.raises(Exception, match="did you mean profd://rules/host-sync"):
            await s.read_resource("profd://rules/host-synk")

        listed, _ = await call(s, "list_reports")
        assert any(r["path"] == naive for r in listed["reports"])

    await with_session(server("--root", EXAMPLES, "--root", str(tmp_path), "--no-daemon"), go)


async def test_job_report_names_the_straggler_rank():
    ranks = [trace("fsdp_rank0"), trace("fsdp_rank1")]

    async def go(s):
        out, err = await call(s, "job_report", paths=ranks)
        assert err is None
        assert sorted(r["rank"] for r in out["ranks"]) == [0, 1]
        rows = out["jobs"][0]["ranks"]
        assert len(rows) == 2

    await with_session(server("--root", EXAMPLES, "--no-daemon"), go)


async def test_analyses_go_through_a_running_daemon(tmp_path):
    """With a daemon running, the agent's analysis is the daemon's: it lands in the daemon's
    reports, the ones an editor sees."""
    watch = tmp_path / "watch"
    watch.mkdir()
    d = Daemon(watch, tmp_path / "state", "--allow", EXAMPLES)
    d.start()
    try:

        async def go(s):
            out, err = await call(s, "analyze_trace", path=trace("seed_n64_bf16"), workspace=SRC)
            assert err is None and out["verdict"] == "overhead-bound"
            listed, _ = await call(s, "list_reports")
            return listed

        listed = await with_session(server("--root", EXAMPLES, "--state", str(tmp_path / "state")), go)
        assert any(r["from"] == "daemon" and r["path"] == trace("seed_n64_bf16") for r in listed["reports"])
    finally:
        d.stop()


async def test_workloads_only_when_enabled(tmp_path):
    async def go(s):
        tools = {t.name for t in (await s.list_tools()).tools}
        assert "run_workload" in tools
        _, err = await call(s, "run_workload", workload="rm -rf /", params={})
        assert err and "workload" in err

    await with_session(server("--root", str(tmp_path), "--no-daemon", "--allow-workloads"), go)


async def test_mcp_confines_folders_bounds_echoes_and_jobs(tmp_path):
    """``analyze_trace {folder}`` read a symlink in the folder that led out of ``--root`` (the
    same file given as ``path`` was refused); a 1 MB path came back whole in the error;
    ``job_report`` took any number of paths. Now the folder's files are confined like a path,
    echoes are cut, and a job is at most ``MAX_JOB_RANKS`` traces."""
    pytest.importorskip("mcp")
    from test_mcp import call, server, with_session

    from profd.server.daemon.mcp_server import MAX_JOB_RANKS

    root = tmp_path / "root"
    root.mkdir()
    secret = tmp_path / "outside.json.gz"
    secret.write_bytes(trace_bytes("seed_n4096_bf16"))
    os.symlink(secret, root / "link.json.gz")
    mine = root / "mine.json.gz"
    mine.write_bytes(trace_bytes("seed_n64_bf16"))

    async def go(s):
        out, err = await call(s, "analyze_trace", folder=str(root))
        assert err is None and [t["trace"] for t in out["traces"]] == [str(mine)], out
        out, err = await call(s, "analyze_trace", path=str(root / "link.json.gz"))
        assert out is None and "outside the roots" in err
        out, err = await call(s, "analyze_trace", path="/" + "x" * (1 << 20))
        assert out is None and len(err) < 2000 and f"({(1 << 20) + 1} characters)" in err, err[:300]
        out, err = await call(s, "job_report", paths=[str(mine)] * (MAX_JOB_RANKS + 1))
        assert out is None and f"at most {MAX_JOB_RANKS} rank traces" in err

    await with_session(server("--root", str(root)), go)
