"""The rule declarations, the catalog generated from them and the docs agree."""

import os

from conftest import ROOT
from profd.protocol.catalog import RULES
from profd.server.engine.rules import load_all
from profd.server.engine.rules.docs import COMMAND, generated


def test_every_rule_is_declared_with_its_page():
    rules = load_all()
    assert list(rules) == list(RULES)
    for code, r in rules.items():
        assert (r.title, r.severity, r.family) == (
            RULES[code].title,
            RULES[code].severity,
            RULES[code].family,
        )
        assert "Evidence" in r.doc and "Threshold" in r.doc, code


def test_generated_files_are_up_to_date():
    """docs/rules.md and protocol/rules_table.py (the catalog protocol/ reads without the engine)
    are generated from the declarations."""
    for rel, text in generated().items():
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            assert f.read() == text, f"{rel} is stale: run {COMMAND}"
