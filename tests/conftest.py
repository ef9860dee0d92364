import os

import pytest

# A test that runs profd-client without --no-daemon must not leave a daemon in the user's cache dir;
# the daemon tests start their own with an explicit --state and unset this where they need to.
os.environ.setdefault("PROFD_NO_DAEMON", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
SRC = os.path.join(EXAMPLES, "src")


def trace(name: str) -> str:
    """Path of a shipped real trace (examples/), by its short name."""
    for d in (
        EXAMPLES,
        os.path.join(EXAMPLES, "nccl"),
        os.path.join(EXAMPLES, "recorded"),
        os.path.join(ROOT, "tests", "data"),
    ):
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if f.startswith(name + ".") or f == name:
                return os.path.join(d, f)
    raise FileNotFoundError(name)


_cache: dict = {}


def report_of(name: str, workspace=(SRC,)):
    """The engine's report of a shipped trace, cached per session (the engine is pure)."""
    from profd.server.engine import Options, analyze_file

    key = (name, tuple(workspace))
    if key not in _cache:
        _cache[key] = analyze_file(trace(name), Options(workspace=list(workspace)))
    return _cache[key]


def codes(report) -> set:
    return {d.code for d in report.diagnostics}


@pytest.fixture
def examples_dir():
    return EXAMPLES


def pty_run(argv, env, timeout=120):
    """``argv`` with stdout and stderr on a terminal (what a user at a terminal sees), stdin empty;
    ``env`` the whole environment. Returns (exit status, what the terminal showed)."""
    import pty
    import subprocess

    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    proc.wait(timeout=timeout)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode(errors="replace")
