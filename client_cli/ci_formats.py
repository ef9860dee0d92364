"""The CI output formats, as ruff names them: ``github`` (workflow commands that GitHub Actions turns
into annotations on the diff) and ``junit`` (JUnit XML, which most CI systems show as test
results). Pure functions of Report lists, like format.py; a finding on the trace itself (no source
line) is annotated on the trace file."""

from __future__ import annotations

import os
from typing import Iterable
from xml.sax.saxutils import quoteattr

from ..protocol import types as T

_GITHUB_LEVEL = {"error": "error", "warning": "warning", "information": "notice", "hint": "notice"}


def _rel(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


def _esc_data(s: str) -> str:  # GitHub's escaping for a command's message
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _esc_prop(s: str) -> str:  # ... and for its properties
    return _esc_data(s).replace(":", "%3A").replace(",", "%2C")


def _diags(reports: Iterable[T.Report], jobs, show_hints: bool):
    for r in reports:
        for d in r.diagnostics:
            if d.severity != "hint" or show_hints:
                yield r.trace.path, d
    for j in jobs:
        for d in j.diagnostics:
            yield d.location.path or "", d


def github(reports: Iterable[T.Report], jobs=(), show_hints: bool = False) -> str:
    """``::warning file=F,line=L,col=C,endColumn=E,title=profd (host-sync)::MESSAGE`` per finding."""
    out = []
    for trace, d in _diags(reports, jobs, show_hints):
        loc = d.location
        props = [f"file={_esc_prop(_rel(loc.path or trace))}"]
        if loc.line:
            props.append(f"line={loc.line}")
            if loc.column:
                props.append(f"col={loc.column}")
            if loc.end_line and loc.end_line != loc.line:
                props.append(f"endLine={loc.end_line}")
            elif loc.end_column:
                props.append(f"endColumn={loc.end_column}")
        props.append(f"title={_esc_prop(f'profd ({d.code})')}")
        msg = d.message + (f" (trace: {_rel(trace)})" if trace and loc.path != trace else "")
        out.append(f"::{_GITHUB_LEVEL[d.severity]} {','.join(props)}::{_esc_data(msg)}")
    return "\n".join(out) + ("\n" if out else "")


def junit(reports: Iterable[T.Report], jobs=(), show_hints: bool = False) -> str:
    """One ``<testsuite>`` per trace, one failed ``<testcase>`` per finding (a clean trace: one
    passing case), as ruff's junit output."""
    reports = list(reports)
    suites = []
    total = fails = 0
    for r in reports:
        ds = [d for d in r.diagnostics if d.severity != "hint" or show_hints]
        cases = []
        for d in ds:
            loc = d.location
            where = (
                f"{_rel(loc.path)}:{loc.line}:{loc.column}" if loc.line else _rel(loc.path or r.trace.path)
            )
            cases.append(
                f"    <testcase name={quoteattr(f'{d.code} at {where}')} classname={quoteattr(_rel(loc.path or r.trace.path))}>\n"
                f"      <failure type={quoteattr(d.severity)} message={quoteattr(d.message)}>"
                f"{_xml_text(where + ': ' + d.severity + '[' + d.code + '] ' + d.message)}</failure>\n"
                "    </testcase>"
            )
        if not ds:
            cases.append(f'    <testcase name="no findings" classname={quoteattr(_rel(r.trace.path))}/>')
        total += max(1, len(ds))
        fails += len(ds)
        suites.append(
            f'  <testsuite name={quoteattr(_rel(r.trace.path))} tests="{max(1, len(ds))}" '
            f'failures="{len(ds)}" errors="{1 if r.error else 0}">\n' + "\n".join(cases) + "\n  </testsuite>"
        )
    for k, j in enumerate(jobs):
        name = f"job {k + 1}: {len(j.ranks)} of {j.world_size} ranks"
        cases = [
            f"    <testcase name={quoteattr(f'{d.code}')} classname={quoteattr(name)}>\n"
            f"      <failure type={quoteattr(d.severity)} message={quoteattr(d.message)}/>\n    </testcase>"
            for d in j.diagnostics
        ] or [f'    <testcase name="no findings" classname={quoteattr(name)}/>']
        total += max(1, len(j.diagnostics))
        fails += len(j.diagnostics)
        suites.append(
            f'  <testsuite name={quoteattr(name)} tests="{max(1, len(j.diagnostics))}" '
            f'failures="{len(j.diagnostics)}">\n' + "\n".join(cases) + "\n  </testsuite>"
        )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<testsuites name="profd" tests="{total}" failures="{fails}">\n'
        + "\n".join(suites)
        + "\n</testsuites>\n"
    )


def _xml_text(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
