"""The rule catalog, the implementations and the docs agree."""
import os

from conftest import ROOT
from profd.protocol.catalog import RULES
from profd.server.engine.rules import load_all
from profd.server.engine.rules.docs import render

JOB_LEVEL = {"rank-straggler"}  # needs several rank traces: server/engine/job.py


def test_every_catalog_code_is_implemented_and_documented():
    checks = load_all()
    for code in RULES:
        if code in JOB_LEVEL:
            continue
        assert code in checks, code
        doc = checks[code].__doc__ or ""
        assert "Evidence" in doc and "Threshold" in doc, code


def test_docs_rules_md_is_generated_from_the_code():
    with open(os.path.join(ROOT, "docs", "rules.md")) as f:
        assert f.read() == render(), "run: python -m profd.server.engine.rules > docs/rules.md"
