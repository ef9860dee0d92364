"""Placement rules: ``unmapped-source``, ``unused-suppression``.

Only the daemon knows which of a trace's source files exist on this machine (it keeps a snapshot of
them, read off its loop), so the finding is made in ``server/daemon/placement.py``
(``unmapped_hint``). It is registered here, like ``rank-straggler``, so that the catalog, the
registry, ``profd-client rule`` and ``--ignore`` know it as every other rule; the engine itself
finds nothing for it.
"""

from __future__ import annotations

from typing import Iterable

from ....protocol.types import Diagnostic
from ..context import Context
from . import rule


@rule("unmapped-source", "Frames that map onto no file of this machine (editors)", "information")
def unmapped_source(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: the trace's frame paths that map onto no file here (``unmapped``) and their common
    folder (``prefix``), with how many findings therefore sit on the trace instead of their lines.

    Threshold: one frame path of a finding or hot line that no workspace root or ``path-map`` leads
    to an existing file. Shown once per trace, on the trace, in editors (the CLI says the same in a
    ``note:`` under the summary line).

    Why it costs time: it costs none by itself; it says why the findings are not on your lines (the
    trace was recorded on another machine or in a container, under another path).

    Example:
        # recorded in a container as /workspace/train.py, opened here as ~/proj/train.py

    Fix: map the recorded prefix onto your checkout: ``path-map = ["/workspace=/home/me/proj"]``
    (``[tool.profd]`` or the editor's settings), or ``--path-map`` / ``--workspace`` on ``profd serve``.

    Ignore when: the frames are a library's that you do not have locally.

    Shown by: examples/tinygpt_naive.json.gz (served by a daemon whose workspace is not examples/src)
    """
    return ()


@rule(
    "unused-suppression",
    "A suppression comment that suppressed nothing in this trace",
    "information",
    keep_severity=True,
)
def unused_suppression(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: a ``# profd: ignore[...]``, ``# noqa: ...`` or ``# profd: ignore-file[...]`` comment
    in a source file of the trace, on a statement the trace ran, whose codes (``codes``) suppressed
    no finding of this trace: the finding it was written for is gone, or the code is misspelt.

    Threshold: every code of the comment that no finding used, among the rules that ran (a
    ``--select`` that leaves a rule out leaves its suppressions alone); a line the trace never ran
    says nothing about its comment. A ``# noqa:`` code that is no profd rule (``E501``) is another
    tool's. Ruff's RUF100 (``unused-noqa``) is this rule; as there, ``# profd: ignore[unused-suppression]``
    on the line keeps a comment that is meant for another run (a GPU trace's finding in a CPU trace).
    The findings are made where suppression is (``server/engine/suppress.py``, after every rule),
    so this check itself finds nothing.

    Why it costs time: it costs none; a stale suppression hides the next real finding on its line.

    Example:
        loss_value = loss.item()  # profd: ignore[host-sync]      (the sync was removed since)

    Fix: remove the comment, or the codes in it that suppress nothing.

    Ignore when: the comment is for another trace of the same code (another device, another size).

    Shown by: tests/test_suppress.py (examples/tinygpt_naive.json.gz with comments added to its source)
    """
    return ()
