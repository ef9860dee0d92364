"""Type-check the package as it is installed: `profd.server.engine.x`, not `server/engine/x.py`.

The source folders are mapped onto package names by [tool.setuptools] package-dir (server/ ->
profd.server, ...), and an editable install reaches them through an import hook that no type checker
follows. So this builds that layout as symlinks under build/typecheck/ from the same table, runs
`mypy -p profd` on it ([tool.mypy] in pyproject.toml holds the settings) and prints each error at its
path in the repository. Exits with mypy's status.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from profd.server.config import toml  # tomllib, or tomli on Python 3.10

tomllib = toml()

ROOT = Path(__file__).resolve().parent.parent
FARM = ROOT / "build" / "typecheck"


def build_farm() -> None:
    """profd/server -> server/ and so on; a deeper name links only where its folder is not already
    the nested one (profd.server.engine = server/engine needs no link of its own)."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    pkg = FARM / "profd"
    pkg.mkdir(parents=True, exist_ok=True)
    for name, folder in table.items():
        parts = name.split(".")
        if len(parts) == 1:  # profd itself: its files, as the farm's profd/ is a real folder
            for f in (ROOT / folder).glob("*.py"):
                _link(pkg / f.name, f)
            continue
        parent = table.get(".".join(parts[:-1]))
        if len(parts) > 2 and parent is not None and folder == f"{parent}/{parts[-1]}":
            continue
        _link(pkg.joinpath(*parts[1:]), ROOT / folder)


def _link(at: Path, to: Path) -> None:
    if at.is_symlink() and Path(os.readlink(at)) == to:
        return
    if at.is_symlink() or at.exists():
        at.unlink()
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to)


def main() -> int:
    build_farm()
    env = dict(os.environ, MYPYPATH=str(FARM))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(FARM / ".mypy_cache"),
            "-p",
            "profd",
            *sys.argv[1:],
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    farm = str(FARM / "profd") + "/"
    for line in (run.stdout + run.stderr).splitlines():
        print(line.replace(farm, "").replace(os.path.relpath(farm, ROOT) + "/", ""))
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
