"""``python -m profd.server.engine.rules > docs/rules.md``: the rule docs, from the catalog and docstrings."""
import sys

from .docs import render

if __name__ == "__main__":
    sys.stdout.write(render())
