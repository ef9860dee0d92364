"""``profd``: the daemon side (serve, start, stop, status)."""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from .. import __version__


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="profd", description="profd daemon")
    p.add_argument("--version", action="version", version=f"profd {__version__}")
    p.parse_args(argv)
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
