"""The rule catalog: stable codes, titles, default severities and doc anchors.

Each rule is declared once, beside its check, in its family module (``server/engine/rules/``);
``rules_table.py`` is generated from those declarations so that the front ends read the catalog
without importing the engine (``python -m profd.server.engine.rules`` writes it).

Codes never change meaning; a new finding gets a new code. The doc anchor is the link target the
LSP ``codeDescription`` and SARIF ``helpUri`` carry: ``rules.md#<code>`` in the docs installed with
the package (``docs/`` ships as ``profd/docs``), or under ``$PROFD_DOCS_URL`` when set (a base URL
such as ``https://example.org/profd/docs``).
"""

from __future__ import annotations

import os
from functools import lru_cache

import msgspec

from .rules_table import TABLE


@lru_cache(maxsize=None)
def _installed_docs() -> str:
    # installed: site-packages/profd/{protocol,docs}; a source tree: {protocol,docs}/ side by side
    from urllib.parse import quote

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "rules.md")
    return "file://" + quote(path)


def docs_url() -> str:
    """Where docs/rules.md is: ``$PROFD_DOCS_URL/rules.md``, else the installed file."""
    base = os.environ.get("PROFD_DOCS_URL")
    return base.rstrip("/") + "/rules.md" if base else _installed_docs()


class RuleInfo(msgspec.Struct, frozen=True):
    code: str
    title: str
    severity: str  # default: error | warning | information | hint
    family: str  # the server/engine/rules module that declares it

    @property
    def doc_url(self) -> str:
        return f"{docs_url()}#{self.code}"


# generated from the rule declarations (server/engine/rules/<family>.py): protocol/ reads no engine
_RULES = [RuleInfo(*row) for row in TABLE]

RULES: dict[str, RuleInfo] = {r.code: r for r in _RULES}


def rule(code: str) -> RuleInfo:
    return RULES[code]


class UnknownCode(ValueError):
    """A selection names no rule: ``nearest`` is the closest real code or family, if any."""

    def __init__(self, code: str, nearest: "str | None"):
        super().__init__(code)
        self.code, self.nearest = code, nearest


def families() -> dict[str, set[str]]:
    fam: dict[str, set[str]] = {}
    for c, info in RULES.items():
        fam.setdefault(info.family, set()).add(c)
    return fam


def expand_code(code: str, allow_families: bool = True) -> set[str]:
    """The rule codes a selection item stands for: a code, a family (``kernels``) or ``ALL``.
    Raises ``UnknownCode`` naming the nearest real one."""
    if code in RULES:
        return {code}
    fam = families()
    if allow_families and code == "ALL":
        return set(RULES)
    if allow_families and code in fam:
        return fam[code]
    import difflib

    near = difflib.get_close_matches(
        code, list(RULES) + (list(fam) if allow_families else []), n=1, cutoff=0.5
    )
    raise UnknownCode(code, near[0] if near else None)
