"""Every rule's page is complete and true: each section is in its docstring, and the shipped trace
the page names really makes the rule fire (a job rule: on the job its traces form)."""

import ast
import os

import pytest

from conftest import EXAMPLES, ROOT
from profd.protocol.catalog import RULES
from profd.server.engine import Options, analyze_file
from profd.server.engine.rules.docs import ORDER, rule_doc

WORKSPACE = [os.path.join(EXAMPLES, "src"), os.path.join(EXAMPLES, "recorded", "src")]


@pytest.mark.parametrize("code", list(RULES))
def test_every_rule_page_has_every_section(code):
    d = rule_doc(code)
    missing = [h for h in ORDER if not d.sections.get(h)]
    assert not missing, f"{code}: docstring lacks {missing}"
    ast.parse(d.sections["Example"])  # the example is Python (comments may explain it)
    assert d.traces and all(os.path.isfile(os.path.join(ROOT, t)) for t in d.traces)


@pytest.mark.parametrize("code", list(RULES))
def test_the_shipped_trace_a_page_names_shows_the_rule(code, tmp_path):
    d = rule_doc(code)
    paths = [os.path.join(ROOT, t) for t in d.traces]
    if RULES[code].family == "ranks":
        from profd.server.engine import job

        _, jobs = job.analyze_job(paths, Options(workspace=WORKSPACE))
        assert any(x.code == code for j in jobs for x in j.diagnostics)
    elif code == "unused-suppression":  # a comment is needed: one on a line of a copy of its source
        import shutil

        shutil.copytree(WORKSPACE[0], tmp_path / "src")
        p = tmp_path / "src" / "train_tinygpt.py"
        p.write_text(p.read_text().replace("opt.step()", "opt.step()  # profd: ignore[host-sync]", 1))
        rep = analyze_file(paths[0], Options(workspace=[str(tmp_path / "src")]))
        assert code in {x.code for x in rep.diagnostics}
    elif RULES[code].family == "sources":  # placed by the daemon, which knows what exists here
        from profd.server.daemon.placement import unmapped_hint

        rep = analyze_file(paths[0], Options(workspace=[os.path.dirname(paths[0])]))
        hint = unmapped_hint(rep, paths[0], sources=[], workspace=[])
        assert hint is not None and hint.code == code
    else:
        rep = analyze_file(paths[0], Options(workspace=WORKSPACE))
        assert code in {x.code for x in rep.diagnostics}, f"{code} does not fire on {d.traces[0]}"
