"""``python -m profd.server.engine.rules``: write the files generated from the rule declarations
(``docs/rules.md`` and ``protocol/rules_table.py``) in this source tree."""

import sys

from .docs import ROOT, write

if __name__ == "__main__":
    changed = write()
    sys.stdout.write("".join(f"wrote {p}\n" for p in changed) or f"up to date under {ROOT}\n")
