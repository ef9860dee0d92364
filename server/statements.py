"""Statement-level lines: which statement of a function issued an op.

A ``with_stack`` trace names a frame by its function's first line (or, for frames already running
when the profiler started, the line they were at). Until the AST alignment recovers the statement,
findings sit on the frame's line with ``function`` precision.
"""
from __future__ import annotations

from .model import TraceModel
from .sourcemap import SourceMap


class StatementResolver:
    def __init__(self, model: TraceModel, sources: SourceMap):
        self.model = model
        self.sources = sources

    def line_for(self, frame: int, event: int) -> tuple[int, str]:
        """(line, precision) for cpu ``event`` issued inside user ``frame``."""
        return self.model.frames[frame].line, "function"
