"""The engine: trace file -> model -> analyses -> rules -> Report, with no I/O beyond reading the
trace and the sources, and no protocol. ``analyze_file`` is its one entry point."""
from .analyze import analyze_file, analyze_or_error
from .context import Options

__all__ = ["Options", "analyze_file", "analyze_or_error"]
