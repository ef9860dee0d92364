"""The engine's one door: everything the daemon and the CLI take from the engine, and nothing
else. They import this module (through the package: ``from ..engine import analyze_file``), never
an engine submodule; tests/test_layout.py fails on an import that goes around it.

- the pipeline (trace file -> model -> analyses -> rules -> Report): ``analyze_file``,
  ``analyze_or_error``; a rank's summary from the same run: ``analyze_rank``, ``summarize_rank``,
  ``analyze_for_jobs`` (the summary only of a multi-process job's rank);
  a job's: ``analyze_job``, ``group_jobs``, ``reduce_job``; the annotated copy: ``annotate_file``;
- what says a file is unchanged (``file_signature``), as the loader checks the file it hashes
  after reading and the daemon's watcher checks the files it keys;
- the options every front end builds (``Options``, its wire shape ``protocol.options``);
- what the front ends say of a report: diffs, impact, module trees, rule pages, numbers;
- the source text the findings sit on, read as the engine reads it, and its inline suppressions;
- the rules' quick fixes (pure: text in, edits out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .analyze import analyze_file, analyze_or_error
from .annotate import annotate_file
from .context import Options
from .diff import diff_reports
from .fixes import (
    Edit,
    Fix,
    apply as apply_edits,
    elsewhere as fixed_elsewhere,
    fix_all,
    fixes as quick_fixes,
    related as related_edits,
    suppress as suppression_fix,
)
from .impact import impact_text, order as impact_order, top as top_findings
from .job import (
    analyze_for_jobs,
    analyze_job,
    analyze_rank,
    comm_findings,
    group_jobs,
    reduce_job,
    summarize_rank,
)
from .loader import TraceError, file_signature
from .modules import render as render_modules, top_modules, tree_document
from .passes import own_the_heap, trim_malloc
from .rules import thresholds as rule_thresholds
from .rules.util import plural, size, us
from .sourcemap import SourceMap, line_starts, nameable, read_lines, source_line, split_lines
from .suppress import ALL as ALL_CODES, Comments, apply as apply_suppressions

if TYPE_CHECKING:
    from .rules.docs import RuleDoc


# The rule pages are imported when a page is asked for: few commands show one, and the module
# (json, textwrap, its docstring parser) was 5% of a small trace's `profd-client analyze`.
def rule_doc(code: str) -> "RuleDoc":
    """A rule's page, parsed from its declaration and docstring (``rules.docs``)."""
    from .rules.docs import rule_doc as doc

    return doc(code)


def rule_page(code: str) -> Optional[str]:
    """The markdown page of one rule, or None for a code that no rule declares (``rules.docs``)."""
    from .rules.docs import rule_page as page

    return page(code)


__all__ = [
    # the pipeline
    "Options",
    "own_the_heap",
    "trim_malloc",
    "TraceError",
    "file_signature",
    "analyze_file",
    "analyze_or_error",
    "annotate_file",
    "analyze_rank",
    "analyze_for_jobs",
    "summarize_rank",
    "analyze_job",
    "group_jobs",
    "reduce_job",
    # what the front ends say of reports
    "diff_reports",
    "impact_text",
    "impact_order",
    "top_findings",
    "comm_findings",
    "render_modules",
    "top_modules",
    "tree_document",
    "rule_doc",
    "rule_page",
    "rule_thresholds",
    "plural",
    "size",
    "us",
    # quick fixes (each rule's, declared beside its check)
    "Edit",
    "Fix",
    "apply_edits",
    "fix_all",
    "fixed_elsewhere",
    "quick_fixes",
    "related_edits",
    "suppression_fix",
    # sources and suppressions
    "SourceMap",
    "line_starts",
    "nameable",
    "read_lines",
    "source_line",
    "split_lines",
    "ALL_CODES",
    "Comments",
    "apply_suppressions",
]
