"""What one report may hold, whatever the trace says: counts, text and, last, its encoded size.

A trace is the profiled program's to write, and nothing in it bounds what a report of it may say:
nn.Module markers nested 1,430 deep with long class names made a report of over 1 GB (each
module's path names its ancestors), a 691 KB trace one of 206 MB (issue 28) -- over SQLite's
blob limit, over the 64 MB an LSP client may be sent, and held in the daemon's memory outside the
analysis budget. So every report leaves the engine bounded (``bound``, the last step of every
analysis: CLI, daemon and MCP alike; in the daemon it runs in the analysis process, under its
budget):

- findings: the ``MAX_DIAGNOSTICS`` of most impact (they come ranked), each with at most
  ``MAX_RELATED`` related places, its message, fix and names cut to ``MAX_TEXT`` characters, and
  evidence over ``MAX_EVIDENCE`` bytes replaced by a line saying how big it was;
- module tree: at most ``MAX_NODES`` nodes, the shallowest and hottest kept (a node's parent is
  always kept; depth and names are bounded where the tree is built, ``modules.MAX_DEPTH``);
- then the whole: encoded over ``MAX_REPORT_BYTES`` (16 MB), the module tree, the hot lines, the
  findings and last the steps are halved in turn until it fits.

What was cut is said in the report itself: ``summary.notes`` (and the module tree's ``note``)
carry one line per cut, "report bounded: ...", so a reader never takes a cut report for a whole
one.
"""

from __future__ import annotations

from typing import Optional

from ...protocol import types as T

MAX_REPORT_BYTES = 16 << 20
MAX_DIAGNOSTICS = 1000
MAX_RELATED = 32
MAX_TEXT = 4096
MAX_EVIDENCE = 64 << 10
MAX_NODES = 10_000
CUT = "report bounded: "


def _clip(text: Optional[str], limit: int = MAX_TEXT) -> Optional[str]:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def _clip_location(loc: Optional[T.Location]) -> None:
    if loc is None:
        return
    for f in ("path", "trace_path", "function", "module", "note"):
        setattr(loc, f, _clip(getattr(loc, f)))


def bound(report: T.Report, max_bytes: int = MAX_REPORT_BYTES) -> T.Report:
    """``report`` cut (in place) to what a report may hold, the cuts said in it."""
    cuts: list[str] = []
    diags = report.diagnostics
    if len(diags) > MAX_DIAGNOSTICS:
        cuts.append(
            f"{len(diags) - MAX_DIAGNOSTICS} finding(s) of least impact left out (at most {MAX_DIAGNOSTICS})"
        )
        del diags[MAX_DIAGNOSTICS:]
    big_evidence = 0
    for d in diags:
        d.message, d.fix = _clip(d.message), _clip(d.fix)
        _clip_location(d.location)
        if len(d.related) > MAX_RELATED:
            del d.related[MAX_RELATED:]
        for r in d.related:
            _clip_location(r)
        if d.evidence:
            n = len(T.encode(d.evidence))
            if n > MAX_EVIDENCE:
                d.evidence = {"cut": f"{n} bytes of evidence, over the {MAX_EVIDENCE} a finding keeps"}
                big_evidence += 1
    if big_evidence:
        cuts.append(f"the evidence of {big_evidence} finding(s) left out (over {MAX_EVIDENCE >> 10} KB each)")
    for h in report.hot_lines:
        h.path, h.trace_path, h.function = _clip(h.path), _clip(h.trace_path), _clip(h.function)
    tree = report.modules
    if tree is not None and len(tree.nodes) > MAX_NODES:
        _keep_nodes(tree, MAX_NODES, cuts)
    # the notes that say the cuts count too: a report cut to just under the bound went over it
    # once its notes were added
    while len(T.encode(report)) + _notes_bytes(cuts) > max_bytes:
        if not _halve(report, cuts):
            break
    if cuts:
        say(report, cuts)
    return report


def _notes_bytes(cuts: list[str]) -> int:
    """What the notes saying ``cuts`` add to the encoded report (quotes, comma, escapes' slack)."""
    return sum(len((CUT + c).encode()) + 8 for c in cuts)


def say(report: T.Report, cuts: list[str]) -> None:
    lines = [CUT + c for c in cuts]
    if report.summary is not None:
        report.summary.notes = [*report.summary.notes, *lines]
    elif report.modules is not None:
        report.modules.note = "; ".join(filter(None, [report.modules.note, *lines]))


def _halve(report: T.Report, cuts: list[str]) -> bool:
    """Halve the biggest of the parts that grow with the trace; False when none is left."""
    tree, s = report.modules, report.summary
    parts = {
        "modules": tree.nodes if tree is not None else [],
        "hot": report.hot_lines,
        "findings": report.diagnostics,
        "steps": s.steps if s is not None else [],
    }
    sizes = {k: len(T.encode(v)) for k, v in parts.items() if len(v) > (1 if k == "steps" else 0)}
    if not sizes:
        return False
    part = max(sizes, key=sizes.get)
    over = f"over {MAX_REPORT_BYTES >> 20} MB in all"
    if part == "modules":
        _keep_nodes(tree, len(tree.nodes) // 2, cuts)
        return True
    items = parts[part]
    n = len(items)
    del items[n // 2 :]
    what = {
        "hot": "hot line(s) of least cost left out",
        "findings": "finding(s) of least impact left out",
        "steps": f"of {n} steps not listed",
    }[part]
    cuts.append(f"{n - len(items)} {what} ({over})")
    return True


def _keep_nodes(tree: T.ModuleTree, keep: int, cuts: list[str]) -> None:
    """Keep ``keep`` nodes of the tree: the shallowest, hottest first (so every kept node's parent
    is kept), renumbered; the note says how many went."""
    nodes = tree.nodes
    n = len(nodes)
    if keep <= 0:
        tree.nodes, tree.roots, tree.groups, tree.available = [], [], [], False
        cuts.append(f"the module tree ({n} modules) left out")
        tree.note = "; ".join(filter(None, [tree.note, CUT + cuts[-1]]))
        return
    chosen = sorted(range(n), key=lambda k: (nodes[k].depth, -nodes[k].gpu_us, k))[:keep]
    chosen.sort()  # first-call order, as built: a parent's id stays below its children's
    new = {old: i for i, old in enumerate(chosen)}
    out = []
    for old in chosen:
        nd = nodes[old]
        nd.id = new[old]
        nd.parent = new.get(nd.parent, -1) if nd.parent >= 0 else -1
        nd.children = [new[c] for c in nd.children if c in new]
        out.append(nd)
    tree.nodes = out
    tree.roots = [new[r] for r in tree.roots if r in new]
    groups = []
    for g in tree.groups:
        members = [new[m] for m in g.members if m in new]
        if (g.parent < 0 or g.parent in new) and members:
            g.parent, g.members = new.get(g.parent, -1), members
            g.outliers = [new[o] for o in g.outliers if o in new]
            groups.append(g)
    tree.groups = groups
    msg = f"{n - keep} of {n} modules left out (the deepest, then the coldest; at most {keep} kept)"
    cuts.append(msg)
    tree.note = "; ".join(filter(None, [tree.note, CUT + msg]))
