"""The wheel: built with the C scanner inside, installed into a fresh venv with no compiler at
install time (a binary wheel never compiles), both commands run from it with their version, the
rule docs ship inside it (the links point at them), and the extras are declared."""
import os
import subprocess
import sys
import sysconfig
import urllib.parse
import zipfile

import pytest

from conftest import ROOT, trace


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), ROOT],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    (whl,) = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".whl")]
    return whl


def test_the_wheel_holds_the_scanner_the_docs_and_the_extras(wheel):
    from profd import __version__

    assert os.path.basename(wheel).startswith(f"profd-{__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("profd/server/engine/_scan.") and n.endswith((".so", ".pyd")) for n in names)
    assert {"profd/docs/rules.md", "profd/docs/schema.json"} <= set(names)
    meta = zipfile.ZipFile(wheel).read(f"profd-{__version__}.dist-info/METADATA").decode()
    extras = {l.split(":", 1)[1].strip() for l in meta.splitlines() if l.startswith("Provides-Extra:")}
    assert {"workload", "cluster"} <= extras


def test_it_installs_in_a_fresh_venv_without_a_compiler(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    # the dependencies come from this environment (no index needed); profd itself from the wheel
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "deps.pth"), "w") as f:
        f.write(sysconfig.get_path("purelib") + "\n")
    env = dict(os.environ, CC="/nonexistent/cc", PATH=f"{venv / 'bin'}:/usr/bin:/bin", PROFD_NO_DAEMON="1")
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    where = subprocess.run([str(py), "-c", "import profd.server.engine._scan as s, profd; print(s.__file__); print(profd.__file__)"],
                           capture_output=True, text=True, env=env, cwd=str(tmp_path))
    scan, pkg = where.stdout.split()
    assert scan.startswith(site) and pkg.startswith(site)  # the wheel's own copy, C scanner included
    from profd import __version__

    client, profd = venv / "bin" / "profd-client", venv / "bin" / "profd"
    assert subprocess.run([str(client), "--version"], capture_output=True, text=True, env=env).stdout.strip() \
        == f"profd-client {__version__}"
    assert subprocess.run([str(profd), "--version"], capture_output=True, text=True, env=env).stdout.strip() \
        == f"profd {__version__}"
    a = subprocess.run([str(client), "analyze", "--isolated", trace("tinygpt_naive")], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert a.returncode == 1 and "[host-sync]" in a.stdout, a.stderr
    page = subprocess.run([str(client), "rule", "host-sync"], capture_output=True, text=True, env=env)
    link = next(l for l in page.stdout.splitlines() if l.startswith("Docs: "))[len("Docs: file://"):]
    docs = urllib.parse.unquote(link.split("#")[0])
    assert docs.startswith(site) and os.path.isfile(docs)
