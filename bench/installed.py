"""An interpreter that runs profd as a user's ``pip install profd`` does, for the bench's children.

This checkout's venv holds profd as an *editable* install: its ``.pth`` runs a finder at every
start of that interpreter, which imports ``pathlib``, ``urllib.parse``, ``ipaddress`` and
``fnmatch`` (2.1 MiB of resident memory, ~20 ms of start-up, measured: ``python -c pass`` 10.8
against 8.7 MiB in a plain venv). An installed wheel has no finder, so a bench child run from this
venv counted the finder in every case's peak RSS and in the start-up bench's wall time (net of what
profd imports anyway: 0.5-0.9 MB of the 51 MB case's peak; a small trace's analyze within the
machine's noise).

``python()`` makes ``bench/out/venv-installed`` once: a venv without pip whose one ``.pth`` puts on
the path (1) ``bench/out/installed``, where ``profd/`` is laid out as the wheel lays it out
(``pyproject.toml``'s package-dir: the package's ``__init__`` and its four subpackages, linked to
this checkout, so the children run this checkout's code and its built native layer), and (2) this
venv's site-packages as a plain directory, for the dependencies: a path line in a ``.pth`` is not
a site dir, so the editable finder's ``.pth`` in it is not run. ``site`` itself runs as it does
for any installed program.
"""

from __future__ import annotations

import functools
import os
import site
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VIEW = os.path.join(HERE, "out", "installed")
VENV = os.path.join(HERE, "out", "venv-installed")

# pyproject.toml's [tool.setuptools] package-dir, at the top: the rest are under these
PACKAGE_DIRS = {"__init__.py": "profd/__init__.py", "server": "server", "client_cli": "client_cli",
                "protocol": "protocol", "docs": "docs"}  # fmt: skip


def _view() -> str:
    pkg = os.path.join(VIEW, "profd")
    os.makedirs(pkg, exist_ok=True)
    for name, src in PACKAGE_DIRS.items():
        link, target = os.path.join(pkg, name), os.path.join(ROOT, src)
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(target, link)
    return VIEW


@functools.lru_cache(maxsize=None)
def python() -> str:
    """The bench venv's interpreter (made or mended on first use in a run)."""
    paths = [_view(), *site.getsitepackages()]
    exe = os.path.join(VENV, "bin", "python")
    if not os.path.exists(exe):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", VENV], check=True)
    purelib = subprocess.run(
        [exe, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    pth = os.path.join(purelib, "profd_bench.pth")
    want = "".join(p + "\n" for p in paths)
    try:
        with open(pth) as f:
            have = f.read()
    except OSError:
        have = ""
    if have != want:
        with open(pth, "w") as f:
            f.write(want)
    return exe


def describe() -> str:
    return (
        "children run profd as installed from a wheel (bench/installed.py: a venv without the "
        "editable install's finder, which costs 2.1 MiB and ~20 ms at each start)"
    )
