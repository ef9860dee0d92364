"""Where a report's findings are shown: on a source file that exists here, else on the trace.

A finding whose frame could not be mapped onto this machine (the trace names
``/home/gpuuser/jobs/run42/train.py`` and no workspace root or path map leads to a local file) is
shown on the trace file itself, with its frame path and line in the message, and the trace gets one
more finding (``unmapped-source``) that names the unmapped prefix and the ``--path-map`` /
``path-map`` setting that fixes it. No I/O here: ``local_sources`` is told which files exist (the
daemon's snapshot of them, read off its loop) and runs once when a report is committed; its answer
is stored with the report.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Optional

from ...protocol import types as T

UNMAPPED = "unmapped-source"


def local_sources(
    report: T.Report, trace_path: str, isfile: Callable[[str], bool] = os.path.isfile
) -> list[str]:
    """The files the report's findings and hot lines point at that exist here (``isfile``), plus
    the trace itself when anything lands on it (trace-level findings, unmapped frames, a read
    error)."""
    out: dict[str, None] = {}
    seen: dict[str, bool] = {}

    def here(p: Optional[str]) -> bool:
        if not p or not os.path.isabs(p):
            return False
        if p not in seen:
            seen[p] = isfile(p)
        return seen[p]

    for d in report.diagnostics:
        p = d.location.path if d.location.line and here(d.location.path) else trace_path
        out[p] = None
    for h in report.hot_lines:
        if here(h.path):
            out[h.path] = None
    if report.error:
        out[trace_path] = None
    return list(out)


def placed_path(loc: T.Location, trace_path: str, sources: Iterable[str]) -> str:
    """The file a finding is shown on: its source line when that file is here, else the trace."""
    if loc.line and loc.path and loc.path in sources:
        return loc.path
    return trace_path


def unmapped_paths(report: T.Report, sources: Iterable[str]) -> list[str]:
    """Frame paths of findings and hot lines that did not map onto a local file, in order."""
    src = set(sources)
    out: dict[str, None] = {}
    for loc in [d.location for d in report.diagnostics] + [
        T.Location(path=h.path, line=h.line, trace_path=h.trace_path) for h in report.hot_lines
    ]:
        if loc.line and loc.path and loc.path not in src:
            out[loc.trace_path or loc.path] = None
    return list(out)


def suggest_maps(paths: list[str], files_named: Callable[[str], list[str]]) -> list[tuple[str, str, int]]:
    """``--path-map REMOTE=LOCAL`` choices that map the unmapped absolute frame ``paths`` onto
    files that exist here (``files_named(basename)``: the workspace's files of that name), best
    first: (REMOTE, LOCAL, how many of the paths it maps). For each candidate file the shared tail
    of path components decides the prefixes; a tie of two folders (the same file in both) gives
    both, for the user to pick the one that ran."""
    counts: dict[tuple[str, str], set[str]] = {}
    for p in paths:
        if not os.path.isabs(p):
            continue
        parts = p.split("/")
        for c in files_named(parts[-1]):
            cparts = c.split(os.sep)
            k = 0
            while k < len(parts) - 1 and k < len(cparts) - 1 and parts[-1 - k] == cparts[-1 - k]:
                k += 1
            remote = "/".join(parts[: len(parts) - k]) or "/"
            local = os.sep.join(cparts[: len(cparts) - k]) or os.sep
            counts.setdefault((remote, local), set()).add(p)
    ranked = sorted(counts.items(), key=lambda kv: (-len(kv[1]), -len(kv[0][0]), kv[0]))
    if not ranked:
        return []
    top = len(ranked[0][1])
    return [(r, l, len(ps)) for (r, l), ps in ranked if len(ps) == top]


def unmapped_hint(
    report: T.Report,
    trace_path: str,
    sources: Iterable[str],
    workspace: list[str],
    maps: Optional[list[tuple[str, str, int]]] = None,
) -> Optional[T.Diagnostic]:
    """One finding on the trace naming what could not be mapped and how to map it (``maps``:
    suggest_maps's answer, when the workspace was searched for those files)."""
    paths = unmapped_paths(report, sources)
    if not paths:
        return None
    n = sum(
        1
        for d in report.diagnostics
        if d.location.line and (d.location.trace_path or d.location.path) in set(paths)
    )
    absolute = [p for p in paths if os.path.isabs(p)]
    shown = ", ".join(os.path.basename(p) for p in paths[:4]) + (" …" if len(paths) > 4 else "")
    where = workspace[0] if workspace else "/path/to/your/checkout"
    if absolute and maps:
        prefix = maps[0][0]
        opts = " or ".join(f"`--path-map {r}={l}`" for r, l, _ in maps[:4])
        fix = (
            f"map it onto your checkout: {opts} on `profd serve`, or the setting `path-map = "
            f'["{maps[0][0]}={maps[0][1]}"]` (editor settings or `[tool.profd]`)'
            + (
                "; the same files are in more than one folder here: pick the one that ran"
                if len(maps) > 1
                else ""
            )
        )
        what = f"under `{os.path.commonpath([os.path.dirname(p) for p in absolute])}`"
    elif absolute:
        prefix = os.path.commonpath([os.path.dirname(p) for p in absolute])
        fix = (
            f"map it onto your checkout: `--path-map {prefix}={where}` on `profd serve`, or "
            f'the setting `path-map = ["{prefix}={where}"]` (editor settings or '
            f"`[tool.profd]`)"
        )
        what = f"under `{prefix}`"
    else:
        prefix = os.path.commonpath([os.path.dirname(p) or "." for p in paths]) or "."
        fix = (
            "say where the sources live: `--workspace DIR` on `profd serve`, or the setting "
            '`workspace = ["DIR"]` (editor settings or `[tool.profd]`; an editor\'s workspace '
            "folders count too)"
        )
        what = "relative to the machine that recorded it"
    msg = (
        f"{len(paths)} source file(s) of this trace are not found here ({shown}, {what}): "
        f"{n} finding(s) are shown on the trace instead of on their lines"
    )
    return T.Diagnostic(
        code=UNMAPPED,
        severity="information",
        message=msg,
        location=T.Location(path=trace_path),
        fix=fix,
        evidence={"unmapped": paths, "prefix": prefix},
    )
