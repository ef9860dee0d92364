"""Quick fixes, as the LSP layer asks for them: the engine computes them (``engine/fixes.py``, each
rule's own fix declared beside its check; pure: text in, edits out) and ``lsp`` turns the edits
into code actions. This module is the daemon's one entry point to them."""

from __future__ import annotations

from ..engine import (
    Edit,
    Fix,
    apply_edits as apply,
    fix_all,
    fixed_elsewhere as elsewhere,
    quick_fixes as fixes,
    related_edits as related,
    suppression_fix as suppress,
)

__all__ = ["Edit", "Fix", "apply", "fix_all", "fixes", "related", "suppress"]


def __getattr__(name: str):
    if name == "RELATED":  # the codes whose fix goes elsewhere than their line (read once rules load)
        return elsewhere()
    raise AttributeError(name)
