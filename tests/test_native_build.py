"""A native layer older than its sources is not used (server/engine/passes.py's stale_build): a
``git pull`` that brought new passes without a rebuild left an extension without them, and every
analysis ended in an internal error (AttributeError on the missing pass). Real files, real mtimes."""

import os

from profd.server.engine import passes


def _files(tmp_path, built_at: float, **sources_at: float) -> str:
    built = tmp_path / "_scan.cpython-311-x86_64-linux-gnu.so"
    built.write_bytes(b"\x7fELF")
    os.utime(built, (built_at, built_at))
    for name, at in sources_at.items():
        f = tmp_path / name.replace("_c", ".c").replace("_h", ".h")
        f.write_text("/* source */\n")
        os.utime(f, (at, at))
    return str(built)


def test_a_source_newer_than_the_build_makes_it_stale_and_is_named(tmp_path):
    built = _files(tmp_path, 1_000_000.0, _scan_c=999_000.0, _passes_c=1_000_500.0, _scan_h=999_000.0)
    why = passes.stale_build(built)
    assert why is not None
    assert "older than _passes.c:" in why and "pip install -e ." in why


def test_a_build_newer_than_its_sources_or_without_them_is_current(tmp_path):
    assert passes.stale_build(_files(tmp_path, 1_000_000.0, _scan_c=999_000.0, _passes_c=999_999.0)) is None
    wheel = tmp_path / "wheel"
    wheel.mkdir()
    assert passes.stale_build(_files(wheel, 1_000_000.0)) is None  # a wheel ships no sources beside it
    assert passes.stale_build(str(tmp_path / "missing.so")) is None


def test_this_checkouts_native_layer_is_current():
    """Fails, saying how to rebuild, where this checkout's extension is older than its sources
    (the pass-level tests skip then: they would compare the reference with itself)."""
    assert passes.STALE is None, passes.STALE


def test_a_checkout_with_a_compiler_has_built_its_native_layer():
    """The extension is optional (a machine without a compiler installs the Python passes), so a
    compile error in a checkout left no extension at all: nothing stale to notice, every pass-level
    test skipped, and the suite went green with the native layer untested (issue 32: a method
    table naming a pass defined below it). Where the C sources sit beside the package and a C
    compiler is on PATH, the extension must be there."""
    import importlib.machinery
    import shlex
    import shutil
    import sysconfig

    import pytest

    here = os.path.dirname(passes.__file__)
    if not all(os.path.exists(os.path.join(here, f)) for f in passes.NATIVE_SOURCES):
        pytest.skip("an installed package: no C sources beside it")
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[:1]
    if not cc or not shutil.which(cc[0]):
        pytest.skip("no C compiler on PATH: the Python passes are the build here")
    built = [
        f
        for f in os.listdir(here)
        if f.startswith("_scan.") and f.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    ]
    assert built, (
        f"no native layer in {here} though {cc[0]} is here: the build failed quietly (the extension "
        "is optional); run `pip install -e . --no-build-isolation` and read the compiler's error"
    )
