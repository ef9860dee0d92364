"""The report index's keys: ``sha256(raw file bytes):options fingerprint`` (``options_fp``),
and a report relabelled for the same content seen under another name."""
from __future__ import annotations

import hashlib
import json
import os

from ...protocol import types as T
from ..engine import impact

def options_fp(workspace, path_map, disabled, thresholds=None) -> str:
    """The options' part of a report's key (thresholds only when set: the keys made before
    thresholds could be set stay valid)."""
    doc = json.dumps([sorted(os.path.abspath(w) for w in workspace),
                      [list(p) for p in path_map], sorted(disabled)]
                     + ([thresholds] if thresholds else []), sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:12]


def relabel(report: T.Report, path: str) -> T.Report:
    """The report as if the trace were at ``path`` (same content seen under another name)."""
    old = report.trace.path
    if old == path:
        return report
    report.trace.path = path
    if report.error:
        report.error = report.error.replace(old, path)
    for d in report.diagnostics:
        for loc in [d.location, *d.related]:
            if loc.path == old:
                loc.path = path
    report.diagnostics.sort(key=impact.order)  # ties go by path: ordered as if analysed there
    return report


