"""``--select`` of one rule runs that rule alone (the others are disabled, and a disabled rule does
not run), and its report is the full run's with only that rule's findings: the same findings,
byte for byte (impact, related locations, suppressions), and the same summary, hot lines and
module tree. On real traces (shipped examples and corpus traces), for every rule that fires on
them and one that does not. And asked for no part of the report beside the summary and the
findings (``Options.parts``, what a one-rule run computes then is only what that rule reads), every
rule's findings and the summary are still the full run's."""

import os

import msgspec
import pytest

from profd.protocol.catalog import RULES
from profd.server.engine import Options, analyze_file
from profd.server.engine.rules import FAMILIES, load_all

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = [
    os.path.join(ROOT, "examples", f)
    for f in (
        "tinygpt_naive.json.gz",
        "mlp_eager.1796061140317126347.pt.trace.json.gz",
        "seed_n64_bf16.json.gz",
    )
]
TRACES += [
    os.path.join(ROOT, "examples", "corpus", "traces", f)
    for f in ("attention_manual.json.gz", "cnn_conv_bias_bn.json.gz", "compiled_break.json.gz")
]
WORKSPACE = [os.path.join(ROOT, "examples", "src"), os.path.join(ROOT, "examples", "corpus", "src")]


def _report(path, disabled=(), **kw):
    rep = analyze_file(path, Options(workspace=WORKSPACE, disabled=set(disabled), **kw))
    return msgspec.to_builtins(rep)


@pytest.mark.parametrize("path", TRACES, ids=os.path.basename)
def test_select_one_rule_gives_the_full_runs_findings_of_it(path):
    full = _report(path)
    fired = sorted({d["code"] for d in full["diagnostics"]})
    assert fired, "a trace with findings"
    silent = next(c for c in RULES if c not in fired)
    for code in fired + [silent]:
        alone = _report(path, set(RULES) - {code})
        assert alone["diagnostics"] == [d for d in full["diagnostics"] if d["code"] == code], code
        assert alone.get("suppressed", {}).get(code) == full.get("suppressed", {}).get(code), code
        for key in set(full) - {"diagnostics", "suppressed"}:
            assert alone[key] == full[key], (code, key)


@pytest.mark.parametrize("path", TRACES, ids=os.path.basename)
def test_select_without_the_parts_gives_every_rules_findings_and_the_summary(path):
    full = _report(path)
    for code in RULES:
        alone = _report(path, set(RULES) - {code}, parts=frozenset())
        assert alone["diagnostics"] == [d for d in full["diagnostics"] if d["code"] == code], code
        assert alone.get("suppressed", {}).get(code) == full.get("suppressed", {}).get(code), code
        assert not alone.get("hotLines") and alone.get("modules") is None, code
        for key in (set(full) | set(alone)) - {"diagnostics", "suppressed", "hotLines", "modules"}:
            assert alone.get(key) == full.get(key), (code, key)


_ALONE = """
import sys, msgspec
from profd.protocol.catalog import RULES
from profd.server.engine import Options, analyze_file
from profd.server.engine.rules import FAMILIES, load_all
code, path, *ws = sys.argv[1:]
rep = analyze_file(path, Options(workspace=ws, disabled=set(RULES) - {code}, parts=frozenset()))
fams = sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("profd.server.engine.rules."))
sys.stdout.buffer.write(msgspec.json.encode({"report": rep, "families": fams}))
"""


def test_a_rule_alone_in_a_fresh_process_imports_only_what_it_needs():
    """In a process that has not loaded every rule, a one-rule run imports the families it runs
    (its own, not every one; every one when it declares a replayed change, as the others that do
    run for its impact) and gives the full run's findings of it."""
    import subprocess
    import sys

    path = TRACES[0]
    full = _report(path)
    for code in ("profiler-artifact", "memory-peak", "host-sync"):
        out = subprocess.run(
            [sys.executable, "-c", _ALONE, code, path, *WORKSPACE], capture_output=True, check=True
        ).stdout
        got = msgspec.json.decode(out)
        assert got["report"]["diagnostics"] == [d for d in full["diagnostics"] if d["code"] == code], code
        fams = set(got["families"])  # and what the package imports (docs, ranks) or a rule's helpers
        rule = load_all()[code]
        if rule.change is None:
            assert rule.family in fams and not set(FAMILIES) <= fams, (code, fams)
        else:
            assert set(FAMILIES) <= fams, (code, fams)
