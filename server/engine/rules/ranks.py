"""Job-level rules: ``rank-straggler``.

One trace cannot show a straggler: the rule needs every rank's summary, so the computation lives in
``server/engine/job.py`` (``reduce_job`` -> ``straggler``). It is registered here so that the catalog, the
registry and ``docs/rules.md`` describe it like every other rule; on a single trace it finds nothing.
"""
from __future__ import annotations

from .. import job
from . import rule


@rule("rank-straggler")
def rank_straggler(ctx):
    return ()


rank_straggler.__doc__ = job.straggler.__doc__
