"""What an in-process ``profd-client analyze`` imports (issue 32: a small trace's analysis returns in
well under 150 ms, start-up included, so it must not pay for the daemon, the editor and agent
front ends, process pools or the workload runner's machinery). Modules, not times: a test of
which modules load does not depend on how loaded the machine is. ``bench/startup.py`` measures
the time."""

import os
import subprocess
import sys

import pytest

from profd.server.engine import passes

NATIVE_SHA = passes.native() is not None and passes.native().sha256_native()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = os.path.join(ROOT, "examples", "seed_n64_bf16.json.gz")
BIG = os.path.join(ROOT, "examples", "tinygpt_naive.json.gz")  # 10 MB of JSON

# Each of these is imported only by what an analysis of named files does not do: the LSP server
# (pygls, lsprotocol), the folder watcher (watchdog), the MCP server (mcp), the daemon and its
# process pools and clusters (asyncio, multiprocessing, concurrent.futures, dask), running a
# workload (subprocess, signal, tempfile), torch; orjson (~15 ms of the start-up) only writes the
# JSON of statistics, SARIF, rule pages and the annotated trace: a report's JSON is msgspec's.
# The parser is built for the one subcommand asked for, so the other subcommands' modules (the
# workload runner, record, diff/annotate) stay out; logging only logs a rule that failed, difflib
# only suggests a key for a misspelt one, tomllib only reads a pyproject.toml (none here). A small
# trace is hashed by the interpreter's own sha256, not OpenSSL's (hashlib, ~6 ms to load); the
# scanner unescapes strings itself (it imported json for that); the rule pages (rules.docs) are
# read only to show one; statistics (with random and fractions) gave one median.
NOT_IMPORTED = (
    "pygls",
    "lsprotocol",
    "watchdog",
    "mcp",
    "dask",
    "distributed",
    "torch",
    "asyncio",
    "multiprocessing",
    "concurrent",
    "subprocess",
    "signal",
    "tempfile",
    "profd.server.daemon",
    "orjson",
    "profd.server.workloads",
    "profd.client_cli.workload",
    "profd.client_cli.record",
    "profd.client_cli.jobs",
    "logging",
    "difflib",
    "tomllib",
    "hashlib",
    "json",
    "statistics",
    "profd.server.engine.rules.docs",
)

# Python 3.10 only, and not profd's doing: msgspec's C core imports uuid when it loads, 3.10's uuid
# imports platform, and 3.10's platform imports subprocess (and it signal) at its top; 3.11's
# platform imports subprocess only inside the functions that run one. profd cannot leave them out
# without leaving out msgspec, which writes every report; the test checks that this chain is the
# cause (a bare ``import msgspec`` loads them) and allows these two, nothing else.
BY_MSGSPEC_ON_310 = ["signal", "subprocess"] if sys.version_info < (3, 11) else []

PROBE = """
import sys
from profd.client_cli.main import main
rc = main(["analyze", "--no-daemon", "--format", "json", "--fail-on", "never", "-o", {null!r}, {trace!r}])
print(rc)
print("\\n".join(sorted(sys.modules)))
"""


def _probe(trace: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROBE.format(null=os.devnull, trace=trace)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PROFD_NO_DAEMON": "1"},
    )


def test_in_process_analyze_imports_no_front_end_or_pool(tmp_path):
    p = _probe(TRACE, tmp_path)
    assert p.returncode == 0, p.stderr
    rc, *mods = p.stdout.split()
    assert rc == "0", p.stderr
    assert "profd.server.engine.rules.kernels" in mods  # the analysis ran in this process
    loaded = sorted(m for m in mods if any(m == n or m.startswith(n + ".") for n in NOT_IMPORTED))
    if BY_MSGSPEC_ON_310:
        bare = subprocess.run(
            [sys.executable, "-c", "import sys, msgspec; print(' '.join(sys.modules))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert {"uuid", "platform", *BY_MSGSPEC_ON_310} <= set(bare), "msgspec no longer brings them"
    assert loaded == BY_MSGSPEC_ON_310, f"an in-process analyze imported {loaded}"


@pytest.mark.skipif(not NATIVE_SHA, reason="no native layer, or a CPU without SHA extensions")
def test_a_large_trace_is_hashed_without_openssl_where_the_native_sha256_runs(tmp_path):
    """A 10 MB trace (past SMALL_HASH_BYTES) is hashed by the native layer's sha256, not by
    hashlib's OpenSSL: loading that costs 3.7 MiB of resident memory, 7% of a 51 MB trace's whole
    analysis (issue 32's peak RSS goal)."""
    p = _probe(BIG, tmp_path)
    assert p.returncode == 0, p.stderr
    rc, *mods = p.stdout.split()
    assert rc == "0", p.stderr
    assert "profd.server.engine.rules.kernels" in mods
    assert "hashlib" not in mods and "_hashlib" not in mods
