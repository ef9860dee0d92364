"""The wheel: built with the C scanner inside, installed into a fresh venv with no compiler at
install time (a binary wheel never compiles), both commands run from it with their version, the
rule docs ship inside it (the links point at them), and the extras are declared."""

import json
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
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), ROOT],
        capture_output=True,
        text=True,
        timeout=600,
    )
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
    # the dependencies come from this environment (no index needed); profd itself from the wheel
    venv, py, env = _venv_with_deps(tmp_path)
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    p = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    where = subprocess.run(
        [
            str(py),
            "-c",
            "import profd.server.engine._scan as s, profd; print(s.__file__); print(profd.__file__)",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
    )
    scan, pkg = where.stdout.split()
    assert scan.startswith(site) and pkg.startswith(site)  # the wheel's own copy, C scanner included
    from profd import __version__

    client, profd = venv / "bin" / "profd-client", venv / "bin" / "profd"
    assert (
        subprocess.run([str(client), "--version"], capture_output=True, text=True, env=env).stdout.strip()
        == f"profd-client {__version__}"
    )
    assert (
        subprocess.run([str(profd), "--version"], capture_output=True, text=True, env=env).stdout.strip()
        == f"profd {__version__}"
    )
    a = subprocess.run(
        [str(client), "analyze", "--isolated", trace("tinygpt_naive")],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=120,
    )
    assert a.returncode == 1 and "[host-sync]" in a.stdout, a.stderr
    page = subprocess.run([str(client), "rule", "host-sync"], capture_output=True, text=True, env=env)
    link = next(l for l in page.stdout.splitlines() if l.startswith("Docs: "))[len("Docs: file://") :]
    docs = urllib.parse.unquote(link.split("#")[0])
    assert docs.startswith(site) and os.path.isfile(docs)


def _venv_with_deps(tmp_path):
    """A fresh venv whose dependencies come from this environment (no index); profd not in it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with open(os.path.join(site, "deps.pth"), "w") as f:
        f.write(sysconfig.get_path("purelib") + "\n")
    env = dict(os.environ, CC="/nonexistent/cc", PATH=f"{venv / 'bin'}:/usr/bin:/bin", PROFD_NO_DAEMON="1")
    return venv, py, env


def _source_tree(dst):
    """The files an sdist holds (git's tracked files; no build/ left from an earlier build)."""
    import shutil

    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    if files.returncode != 0:
        pytest.skip("not a git checkout: cannot tell the source files from build outputs")
    for rel in files.stdout.decode().split("\0"):
        if rel and os.path.isfile(os.path.join(ROOT, rel)):
            os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, rel), os.path.join(dst, rel))
    shutil.copy2(
        os.path.join(ROOT, "pyproject.toml"), os.path.join(dst, "pyproject.toml")
    )  # the working copy's


def test_built_from_source_without_a_compiler_it_falls_back_to_the_pure_python_reader(tmp_path):
    """What `pip install profd-*.tar.gz` does on a machine with no C compiler: the scanner is an
    optional extension, so the build goes on without it and the reports are the same."""
    src, out = tmp_path / "src", tmp_path / "dist"
    _source_tree(src)
    env = dict(os.environ, CC="/nonexistent/cc")
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    (whl,) = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".whl")]
    assert not [n for n in zipfile.ZipFile(whl).namelist() if n.endswith((".so", ".pyd"))]
    venv, py, venv_env = _venv_with_deps(tmp_path)
    p = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", whl],
        capture_output=True,
        text=True,
        env=venv_env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    args = ["analyze", "--isolated", "--format", "json", "--fail-on", "never", trace("tinygpt_naive")]
    pure = subprocess.run(
        [str(venv / "bin" / "profd-client"), *args],
        capture_output=True,
        env=venv_env,
        cwd=str(tmp_path),
        timeout=300,
    )
    here = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "profd-client"), *args],
        capture_output=True,
        env=dict(os.environ, PROFD_NO_DAEMON="1"),
        cwd=str(tmp_path),
        timeout=300,
    )
    assert pure.returncode == 0, pure.stderr[-2000:]
    # A library frame's file is found in the running interpreter's own site-packages: CI's dev venv
    # has torch (torch/nn/modules/sparse.py resolves), the test venv reaches its dependencies through
    # a .pth and does not. That is the environment, not the reader: library paths are left out.
    assert _without_library_paths(json.loads(pure.stdout)) == _without_library_paths(json.loads(here.stdout))


def _without_library_paths(node):
    if isinstance(node, dict):
        return {
            k: (None if k == "path" and node.get("library") else _without_library_paths(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_without_library_paths(v) for v in node]
    return node


def test_auditwheel_makes_the_wheel_manylinux_and_it_runs_without_a_compiler(wheel, tmp_path):
    pytest.importorskip("auditwheel")
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '')}")
    out = tmp_path / "wheelhouse"
    p = subprocess.run(
        [sys.executable, "-m", "auditwheel", "repair", wheel, "-w", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    (fixed,) = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".whl")]
    assert (
        "manylinux" in os.path.basename(fixed)
        and "linux_x86_64" not in os.path.basename(fixed).split("manylinux")[0]
    )
    venv, py, venv_env = _venv_with_deps(tmp_path)
    p = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", fixed],
        capture_output=True,
        text=True,
        env=venv_env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    a = subprocess.run(
        [str(venv / "bin" / "profd-client"), "analyze", "--isolated", trace("tinygpt_naive")],
        capture_output=True,
        text=True,
        env=venv_env,
        cwd=str(tmp_path),
        timeout=120,
    )
    assert a.returncode == 1 and "[host-sync]" in a.stdout, a.stderr


def test_the_version_is_the_changelogs_newest_entry():
    import re

    from profd import __version__

    text = open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8").read()
    newest = re.search(r"^## (.+)$", text, re.M).group(1)
    assert newest.split()[0] == __version__, (newest, __version__)
    meta = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    assert f'version = "{__version__}"' in meta
