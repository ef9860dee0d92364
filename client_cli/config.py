"""The configuration parser lives in ``server/config.py`` (the daemon reads ``[tool.profd]`` with it
too, and may not import the CLI); the CLI's modules import it under this name."""

from ..server.config import *  # noqa: F401,F403
from ..server.config import (
    FAIL_ON,
    FORMATS,
    KEYS,
    MAX_BYTES,
    MAX_DEPTH,
    FileConfig,
    UsageError,
    check_code,
    find_pyproject,
    load,
    selection,
    split_codes,
    unknown_code_message,
)
