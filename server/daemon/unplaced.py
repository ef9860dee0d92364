"""Findings no file here could place (another machine's paths, or the same file in two folders):
per report, the trace and its frames' paths by base name, and the path maps that would place them,
found by searching the workspace once, off the loop. The ``unmapped-source`` finding of a report
(placement.unmapped_hint) suggests those maps once they are known."""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict
from typing import Awaitable, Callable, Optional

from ...protocol import types as T
from .index import ReportIndex
from .placement import suggest_maps, unmapped_hint, unmapped_paths

log = logging.getLogger("profd.unplaced")


class UnplacedFindings:
    """``index``'s reports with findings that could not be placed. ``workspace()``: the folders
    searched; ``io(fn)``: runs ``fn`` off the loop; ``found(key)``: told when report ``key``'s
    search is done (the sessions tell their users); ``loop()``: the daemon's loop, None before it
    starts (nothing is searched then)."""

    KEPT = 256  # reports whose frames and maps are remembered (the oldest forgotten first)

    def __init__(
        self,
        index: ReportIndex,
        workspace: Callable[[], list[str]],
        io: Callable[[Callable], Awaitable],
        found: Callable[[str], None],
        loop: Callable[[], Optional[asyncio.AbstractEventLoop]],
    ):
        self.index, self.workspace, self.io, self.found, self.loop = index, workspace, io, found, loop
        # key -> (trace path, {frame base name: frame paths}); and the path maps found
        self._reports: OrderedDict[str, tuple[str, dict[str, list[str]]]] = OrderedDict()
        self._maps: OrderedDict[str, Optional[list]] = OrderedDict()

    def get(self, key: str) -> Optional[tuple[str, dict[str, list[str]]]]:
        """(trace path, {frame base name: frame paths}) of report ``key``'s unplaced frames."""
        return self._reports.get(key)

    def items(self) -> list[tuple[str, tuple[str, dict[str, list[str]]]]]:
        return list(self._reports.items())

    def hint(self, key: str, trace_path: str) -> Optional[T.Diagnostic]:
        """The ``unmapped-source`` finding of report ``key`` as the trace at ``trace_path`` has
        it (None when every frame maps), suggesting a path map that works once the workspace was
        searched for the files it names (``_search``, started here the first time)."""
        r = self.index.report_at(key, trace_path)
        if r is None or r.error:
            return None
        sources = self.index.sources_at(key, trace_path)
        if key not in self._maps:
            paths = unmapped_paths(r, sources)
            self._maps[key] = None if paths else []
            if paths:
                names: dict[str, list[str]] = {}
                for p in paths:
                    names.setdefault(os.path.basename(p), []).append(p)
                self._reports[key] = (trace_path, names)
                loop = self.loop()
                if loop is not None:
                    loop.create_task(self._search(key, paths))
            while len(self._maps) > self.KEPT:
                self._reports.pop(self._maps.popitem(last=False)[0], None)
        return unmapped_hint(r, trace_path, sources, self.workspace(), self._maps.get(key) or None)

    async def _search(self, key: str, paths: list[str]) -> None:
        """Look in the workspace for the files an unplaced report names (off the loop), keep the
        path maps that would place them, and say so."""
        from ..engine import SourceMap

        roots = list(self.workspace())
        try:
            maps = await self.io(lambda: suggest_maps(paths, SourceMap(roots).files_named))
        except Exception:  # a workspace that cannot be walked: the hint keeps its generic map
            log.exception("profd: looking for the files of %s failed", key[:16])
            maps = []
        if key in self._maps:
            self._maps[key] = maps
        self.found(key)
