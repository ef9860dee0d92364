"""The files generated from the rule declarations: the rule pages (``docs/rules.md``, from each
rule's declaration and docstring; every front-end, ``profd-client rule CODE``, SARIF ``help``, LSP,
MCP, shows the same page) and the catalog table ``protocol/rules_table.py`` (code, title, default
severity, family), which the front ends read without importing the engine.
``python -m profd.server.engine.rules`` writes both; ``tests/test_catalog.py`` fails when either is
stale.

A rule's docstring is made of labelled paragraphs (a label starts a line and ends with a colon):
``Evidence:`` and ``Threshold:`` (what it measures, from what, and why that value), then ``Why it
costs time:``, ``Example:`` (indented code), ``Fix:``, ``Ignore when:`` and ``Shown by:`` (a
shipped trace on which the rule fires; ``tests/test_rule_docs.py`` checks that it does).
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from dataclasses import dataclass, field
from typing import Optional

from ....protocol.catalog import RULES
from ..impact import ERROR_SHARE, WARNING_SHARE
from . import load_all

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RULES_MD = os.path.join("docs", "rules.md")  # relative to the source tree's root
RULES_TABLE = os.path.join("protocol", "rules_table.py")
COMMAND = "python -m profd.server.engine.rules"

SECTIONS = {  # docstring label -> heading on the page
    "Why it costs time": "Why it costs time",
    "Example": "Example",
    "Fix": "How to fix",
    "Ignore when": "When to ignore it",
    "Evidence": "Evidence",
    "Threshold": "Threshold",
    "Thresholds": "Threshold",
    "Shown by": "A shipped trace that shows it",
}
ORDER = [
    "Why it costs time",
    "Example",
    "How to fix",
    "When to ignore it",
    "Evidence",
    "Threshold",
    "A shipped trace that shows it",
]
_LABEL = re.compile(r"^(%s):\s?(.*)$" % "|".join(sorted(map(re.escape, SECTIONS), key=len, reverse=True)))
_TRACE = re.compile(r"examples/\S+?\.json(?:\.gz)?")


@dataclass
class RuleDoc:
    code: str
    title: str
    severity: str
    family: str
    intro: str = ""
    sections: dict[str, str] = field(default_factory=dict)  # heading -> text (Example: code)

    @property
    def what(self) -> str:
        """What it means: the docstring's lead paragraph, else the catalog title."""
        return self.intro or f"{self.title}."

    @property
    def traces(self) -> list[str]:
        return _TRACE.findall(self.sections.get("A shipped trace that shows it", ""))

    def _head(self) -> str:
        return (
            f"{self.title}. Default severity: {self.severity}; family {self.family} "
            f"(`server/engine/rules/{self.family}.py`)."
        )

    def markdown(self, level: int = 2) -> str:
        h = "#" * level
        out = [f"{h} {self.code}", "", f"**{self._head()}**", "", f"{h}# What it means", "", self.what, ""]
        for head in ORDER:
            body = self.sections.get(head)
            if not body:
                continue
            out += [f"{h}# {head}", ""]
            out += (["```python", body, "```"] if head == "Example" else [body]) + [""]
        knobs = self.settable()
        if knobs:
            out += [
                f"{h}# Settable thresholds",
                "",
                f"Under `[tool.profd.rules.{self.code}]` in `pyproject.toml`:",
                "",
            ]
            out += [f"- `{k} = {v:g}` (the default)" for k, v in knobs.items()] + [""]
        out += [
            f"Suppress one finding with `# profd: ignore[{self.code}]` on its line; turn the rule off "
            f'with `--ignore {self.code}` or `ignore = ["{self.code}"]` under `[tool.profd]`.',
            "",
        ]
        return "\n".join(out).rstrip() + "\n"

    def settable(self) -> dict[str, float]:
        """The thresholds a team may set for this rule, with their defaults."""
        from . import thresholds

        return dict(thresholds().get(self.code, {}))

    def text(self) -> str:
        """The page at a terminal (``profd-client rule CODE``)."""
        out = [
            f"{self.code} ({self.severity}, {self.family}): {self.title}",
            "",
            "What it means",
            _indent(self.what),
            "",
        ]
        for head in ORDER:
            body = self.sections.get(head)
            if body:
                out += [head, _indent(body, 6 if head == "Example" else 2), ""]
        knobs = self.settable()
        if knobs:
            out += [
                f"Settable thresholds ([tool.profd.rules.{self.code}] in pyproject.toml)",
                *(f"  {k} = {v:g}  (default)" for k, v in knobs.items()),
                "",
            ]
        out += [
            f"Suppress one finding: `# profd: ignore[{self.code}]` on its line. Turn it off: "
            f"--ignore {self.code}.",
            f"Docs: {RULES[self.code].doc_url}",
        ]
        return "\n".join(out) + "\n"

    def as_dict(self) -> dict:
        return {
            "code": self.code,
            "title": self.title,
            "severity": self.severity,
            "family": self.family,
            "what": self.what,
            "sections": dict(self.sections),
            "traces": self.traces,
            "thresholds": self.settable(),
            "docUrl": RULES[self.code].doc_url,
        }


def _indent(text: str, n: int = 2) -> str:
    return "\n".join((" " * n + line) if line else "" for line in text.split("\n"))


def parse(doc: str) -> tuple[str, dict[str, str]]:
    """(lead paragraph, heading -> text) of a rule docstring. Example code keeps its indentation
    relative to the block."""
    intro: list[str] = []
    sections: dict[str, list[str]] = {}
    cur: Optional[list[str]] = None
    for line in doc.split("\n"):
        m = _LABEL.match(line)
        if m:
            head = SECTIONS[m.group(1)]
            cur = sections.setdefault(head, [])
            if cur:
                cur.append("")
            if m.group(2):
                cur.append(m.group(2))
            continue
        (cur if cur is not None else intro).append(line)
    out = {}
    for head, lines in sections.items():
        if head == "Example":
            body = textwrap.dedent("\n".join(lines)).strip("\n")
        else:
            body = "\n".join(lines).strip()
            if head != "A shipped trace that shows it":
                body = body[:1].upper() + body[1:]
        out[head] = body
    return "\n".join(intro).strip(), out


def rule_doc(code: str) -> RuleDoc:
    r = load_all()[code]
    intro, sections = parse(r.doc)
    return RuleDoc(code, r.title, r.severity, r.family, intro, sections)


def rule_page(code: str) -> Optional[str]:
    """The markdown page of one rule, or None for a code that no rule declares."""
    if code not in load_all():
        return None
    return rule_doc(code).markdown()


def render() -> str:
    out = [
        "# profd rules",
        "",
        f"Generated by `{COMMAND}` from the rule declarations",
        "(`server/engine/rules/<family>.py`) and each rule's docstring: what it means, why it costs",
        "time, an example, how to fix it, when to ignore it, its evidence and threshold (and why that",
        "value), and a shipped trace that shows it. `profd-client rule CODE` prints the same page. Codes",
        "are stable; the LSP `codeDescription` and SARIF `helpUri` link here.",
        "",
        "## Impact and severity",
        "",
        "Every finding with a time cost carries its impact (`impactUsPerStep`, `impactPct`): the time",
        "per step a fix would give back and its share of the step. The active steps are replayed",
        "without the profiler (`server/engine/stepmodel.py`): the CPU walks its launches and syncs,",
        "each stream runs its work when it is free, a sync waits for the GPU; the fix is a change to",
        "that replay (faster GEMMs from the device's peak rates, a loop made one call, a sync that no",
        "longer waits), and its impact is the replayed step before less after. A fix whose saving the",
        'step does not wait on says so (`impactNote`: "hidden behind the CPU-bound step: fix X first;',
        'then ~Y per step", with `impactHiddenBy` and `impactThenUsPerStep`). `make impact` checks the',
        "predictions against before/after pairs measured without the profiler (`bench/impact.toml`).",
        "Findings are sorted by impact, and it sets the severity:",
        "",
        "| a fix gives back | severity |",
        "|---|---|",
        f"| {100 * ERROR_SHARE:.0f}% of the step or more | error |",
        f"| {100 * WARNING_SHARE:.0f}% to {100 * ERROR_SHARE:.0f}% | warning |",
        f"| less than {100 * WARNING_SHARE:.0f}% | information |",
        "",
        "A finding with no time cost (memory, the verdict and its summaries, the profiler's own time)",
        "keeps the default severity below, so `--fail-on error` fails on the problems that cost a",
        "tenth of the step or more (`overhead-bound` carries what replaying the step as a CUDA graph",
        "gives back at most, and keeps its severity). Each rule declares, beside its check, how its",
        "fix changes the replay (`@rule.replay` in `server/engine/rules/<family>.py`);",
        "`server/engine/impact.py` replays it.",
        "",
        "| code | default severity | family | fires when |",
        "|---|---|---|---|",
    ]
    for code, r in load_all().items():
        out.append(f"| [`{code}`](#{code}) | {r.severity} | {r.family} | {r.title} |")
    out.append("")
    for code in load_all():
        out += [rule_page(code), ""]
    return "\n".join(out).rstrip() + "\n"


def render_table() -> str:
    """``protocol/rules_table.py``: each declared rule's code, title, default severity and family,
    in catalog order."""
    out = [
        f'"""Generated by ``{COMMAND}`` from the rule declarations',
        "(``server/engine/rules/<family>.py``): do not edit. ``catalog.py`` reads it, so that protocol/",
        'never imports the engine."""',
        "",
        "TABLE: tuple[tuple[str, str, str, str], ...] = (",
    ]
    for r in load_all().values():
        out.append(
            "    ("
            + ", ".join(json.dumps(v, ensure_ascii=False) for v in (r.code, r.title, r.severity, r.family))
            + "),"
        )
    out.append(")")
    return "\n".join(out) + "\n"


def generated() -> dict[str, str]:
    """Each generated file (relative to the source tree's root) and the text it must hold."""
    return {RULES_MD: render(), RULES_TABLE: render_table()}


def write(root: str = ROOT) -> list[str]:
    """Write the generated files under ``root``; the ones that changed."""
    changed = []
    for rel, text in generated().items():
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    continue
        except FileNotFoundError:
            pass
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        changed.append(rel)
    return changed
