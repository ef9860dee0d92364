"""The engine: trace file -> model -> analyses -> rules -> Report, with no I/O beyond reading the
trace and the sources, and no protocol. ``api`` is its one door, re-exported here: the daemon and
the CLI import the package, never a submodule."""

from .api import *  # noqa: F401,F403
from .api import __all__  # noqa: F401
