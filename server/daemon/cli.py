"""``profd``: the daemon side.

  profd serve [--stdio | --tcp HOST:PORT] --watch DIR [--workspace DIR]... [--path-map R=L]...
              [--state DIR] [--allow DIR]...
  profd start [same options]   background TCP daemon (as dmypy): STATE/daemon.json, mode 0600
  profd stop | profd status
  profd mcp [--root DIR]... [--workspace DIR]... [--allow-workloads] [--allow-record]   MCP server over stdio

Over TCP the daemon writes ``STATE/daemon.json`` ({host, port, pid, token, ...}, owner-only) once
it listens, and removes it when it stops. Clients send the token in
``initializationOptions.token``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Optional

from ... import __version__
from ...protocol.options import path_map_item

DAEMON_FILE = "daemon.json"


def default_state() -> str:
    env = os.environ.get("PROFD_STATE")
    if env:
        return env
    from platformdirs import user_cache_dir

    return user_cache_dir("profd")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--watch", metavar="DIR", help="folder to watch for new traces")
    p.add_argument(
        "--workspace",
        action="append",
        default=[],
        metavar="DIR",
        help="workspace root for mapping frame paths (repeatable)",
    )
    p.add_argument(
        "--path-map",
        action="append",
        default=[],
        metavar="REMOTE=LOCAL",
        help="map a frame path prefix from the profiled machine onto a local folder (repeatable)",
    )
    p.add_argument(
        "--disable",
        action="append",
        default=[],
        metavar="CODES",
        help="rules not to run (comma-separated codes or families; repeatable)",
    )
    p.add_argument(
        "--state", metavar="DIR", help="state dir (default: $PROFD_STATE or user cache dir / profd)"
    )
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="DIR",
        help="profd/analyze may read only under these (default: watch + workspace)",
    )
    p.add_argument("--workers", type=int, default=2, help="analysis processes (default 2)")
    p.add_argument(
        "--analysis-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="end an analysis after S seconds with an error report (default 300)",
    )
    p.add_argument(
        "--analysis-mb",
        type=int,
        default=0,
        metavar="MB",
        help="end an analysis holding more than MB of memory with an error report "
        "(default: half the machine's memory shared by the workers, >= 1024)",
    )
    p.add_argument(
        "--log-file", metavar="PATH", help="log here, rotated at 10 MB (3 kept), instead of stderr"
    )
    p.add_argument("--auth-timeout", type=float, default=10.0, help=argparse.SUPPRESS)
    p.add_argument("--settle", type=float, default=0.3, help=argparse.SUPPRESS)
    p.add_argument("--quiet", type=float, default=2.0, help=argparse.SUPPRESS)
    p.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING or ERROR (default: WARNING)")
    p.add_argument(
        "--allow-record",
        action="store_true",
        help="offer profd.record (run a workspace script under the profiler) to TCP clients "
        "too; the editor's own stdio session always has it",
    )
    p.add_argument(
        "--idle-exit",
        type=float,
        default=0.0,
        metavar="S",
        help="TCP: exit after S seconds without any client (0: never)",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="profd",
        description="profd daemon: the findings over LSP (stdio or TCP), a watched folder, MCP",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="environment:\n  PROFD_STATE            the state folder (default: the user cache dir, profd)\n"
        "  PROFD_MAX_TRACE_BYTES  largest trace, inflated, read before refusing it (default: 16 GiB)\n"
        "  PROFD_DOCS_URL         base URL of the rule docs for links (default: the installed docs)",
    )
    p.add_argument("--version", action="version", version=f"profd {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve LSP over stdio (default) or TCP")
    g = s.add_mutually_exclusive_group()
    g.add_argument(
        "--stdio", action="store_true", help="speak LSP on stdin/stdout (what an editor spawns; the default)"
    )
    g.add_argument(
        "--tcp",
        metavar="HOST:PORT",
        help="listen on HOST:PORT (port 0: any free one) with a token in STATE/daemon.json",
    )
    _common(s)
    st = sub.add_parser("start", help="start a background TCP daemon")
    st.add_argument(
        "--tcp",
        metavar="HOST:PORT",
        default="127.0.0.1:0",
        help="where to listen (default: loopback, any free port)",
    )
    st.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for it to listen")
    st.add_argument(
        "--replace",
        action="store_true",
        help="a daemon already runs with other settings: stop it and start this one",
    )
    _common(st)
    for name in ("stop", "status"):
        x = sub.add_parser(
            name,
            help=f"{name} the background daemon",
            epilog="exit status: 0 done, 1 no daemon running, 2 bad usage or an internal error",
        )
        x.add_argument(
            "--state", metavar="DIR", help="its state dir (default: $PROFD_STATE or user cache dir / profd)"
        )
    m = sub.add_parser("mcp", help="serve the findings to coding agents over MCP (stdio)")
    m.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="DIR",
        help="the tools may read traces and sources only under these (repeatable; default: .)",
    )
    m.add_argument(
        "--workspace",
        action="append",
        default=[],
        metavar="DIR",
        help="where the sources live, for mapping frames (default: the roots)",
    )
    m.add_argument(
        "--state",
        metavar="DIR",
        help="a running daemon's state dir: analyses go through "
        "it, sharing its reports and store (default: user cache dir / profd)",
    )
    m.add_argument("--no-daemon", action="store_true", help="always analyse in this process")
    m.add_argument(
        "--allow-workloads", action="store_true", help="offer run_workload (the built-in workloads only)"
    )
    m.add_argument(
        "--workload-dir",
        metavar="DIR",
        help="where run_workload and record_program write traces (default: ROOT/profd-traces)",
    )
    m.add_argument(
        "--allow-record",
        action="store_true",
        help="offer record_program (run a Python program under the roots under the profiler)",
    )
    return p


def _config(ns):
    from .core import Config

    def pm(items):
        try:
            return [path_map_item(it) for it in items]
        except ValueError as e:
            print(f"profd: --{e}", file=sys.stderr)
            raise SystemExit(2)

    return Config(
        watch=os.path.abspath(ns.watch) if ns.watch else None,
        workspace=[os.path.abspath(w) for w in ns.workspace],
        path_map=pm(ns.path_map),
        disabled=disabled_codes(ns.disable),
        state=os.path.abspath(ns.state or default_state()),
        allow=[os.path.abspath(a) for a in ns.allow],
        workers=max(1, ns.workers),
        settle=ns.settle,
        quiet=ns.quiet,
        analysis_timeout=ns.analysis_timeout,
        analysis_mb=ns.analysis_mb,
        allow_record=ns.allow_record,
    )


def disabled_codes(items: list[str]) -> set[str]:
    """``--disable a,b --disable kernels`` as rule codes; an unknown one exits 2 naming the nearest."""
    from ...protocol.catalog import UnknownCode, expand_code

    out: set[str] = set()
    for code in (c.strip() for it in items for c in it.split(",") if c.strip()):
        try:
            out |= expand_code(code)
        except UnknownCode as e:
            near = f"; did you mean {e.nearest!r}?" if e.nearest else ""
            print(f"profd: --disable: unknown rule code {e.code!r}{near}", file=sys.stderr)
            raise SystemExit(2)
    return out


class RateLimit(logging.Filter):
    """At most ``burst`` warnings (and errors) per message template (logger + format string) every ``window``
    seconds; the rest are counted and summed up in one line when the window turns. Repeats lose
    their tracebacks after the first. A flood of bad clients or files cannot fill the disk."""

    def __init__(self, burst: int = 10, window: float = 60.0):
        super().__init__()
        self.burst, self.window = burst, window
        self.seen: dict[tuple, list] = {}  # template -> [window start, count]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:  # INFO is asked for; floods come as warnings
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        w = self.seen.get(key)
        if w is None or now - w[0] > self.window:
            dropped = w[1] - self.burst if w and w[1] > self.burst else 0
            if len(self.seen) > 1000:
                self.seen.clear()
            self.seen[key] = w = [now, 0]
            if dropped:
                record.msg = (
                    f"{record.msg} [{dropped} more like this in the last {self.window:.0f} s not logged]"
                )
        w[1] += 1
        if w[1] > 1:
            record.exc_info, record.exc_text, record.stack_info = None, None, None
        return w[1] <= self.burst


def _logging(level: str, log_file: Optional[str] = None) -> None:
    if log_file:
        from logging.handlers import RotatingFileHandler

        fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.close(fd)
        handler: logging.Handler = RotatingFileHandler(log_file, maxBytes=10 << 20, backupCount=3)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RateLimit())
    logging.basicConfig(level=getattr(logging, level.upper(), logging.WARNING), handlers=[handler])
    logging.getLogger("pygls").setLevel(logging.CRITICAL)  # pygls logs every message at INFO


def _loop_errors(loop, context: dict) -> None:
    """asyncio's own errors (accept() out of file descriptors, ...) as one line each, through
    the rate-limited log, instead of a traceback per event."""
    exc = context.get("exception")
    if isinstance(exc, asyncio.CancelledError):  # a callback (asyncio's streams in 3.11, pygls)
        return  # reading a task cancelled at a stop: not an error
    logging.getLogger("profd.loop").error(
        "profd: %s%s", context.get("message", "event loop error"), f": {exc!r}" if exc else ""
    )


def write_private_json(path: str, doc: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def read_daemon(state: str) -> Optional[dict]:
    try:
        with open(os.path.join(state, DAEMON_FILE)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and "port" in doc and "token" in doc else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmd_serve(ns) -> int:
    bad = _check_folders(ns)
    if bad:
        print(bad, file=sys.stderr)
        return 2
    _logging(ns.log_level, ns.log_file)
    import faulthandler

    faulthandler.enable()  # SIGSEGV/SIGBUS/...: the stacks on stderr, not a silent death
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID`: every thread's stack on stderr
    cfg = _config(ns)
    if ns.tcp:
        return asyncio.run(_serve_tcp(cfg, ns.tcp, ns.idle_exit, ns.auth_timeout))
    from .core import Core
    from .transport import run_stdio

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but LSP may reach the real stdout

    async def main():
        asyncio.get_running_loop().set_exception_handler(_loop_errors)
        return await run_stdio(Core(cfg, "stdio"), stdin, stdout)

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 0


async def _serve_tcp(cfg, hostport: str, idle_exit: float = 0.0, auth_timeout: float = 10.0) -> int:
    from .core import Core
    from .transport import TcpServer

    asyncio.get_running_loop().set_exception_handler(_loop_errors)
    host, _, port = hostport.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    core = Core(cfg, "tcp")
    await core.start()
    token = secrets.token_urlsafe(32)
    srv = TcpServer(core, host, int(port or 0), token, auth_timeout)
    h, p = await srv.start()
    path = os.path.join(cfg.state, DAEMON_FILE)
    try:
        write_private_json(
            path,
            {
                "host": h,
                "port": p,
                "pid": os.getpid(),
                "token": token,
                "watch": cfg.watch,
                "workspace": cfg.workspace,
                "version": __version__,
                "started": time.time(),
            },
        )
    except OSError as e:  # clients find a TCP daemon (and its token) only through that file
        logging.getLogger("profd").error(
            "profd: cannot write %s (%s); a TCP daemon needs a writable --state folder", path, e.strerror or e
        )
        await srv.close()
        await core.stop()
        return 2
    logging.getLogger("profd").warning(
        "profd %s listening on %s:%s (pid %d, state %s)", __version__, h, p, os.getpid(), cfg.state
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    last_busy = time.monotonic()

    def idle_check():
        nonlocal last_busy
        if srv.tasks or core.running:
            last_busy = time.monotonic()
        elif time.monotonic() - last_busy > idle_exit:
            logging.getLogger("profd").warning("profd: idle for %.0f s, exiting", idle_exit)
            stop.set()
            return
        loop.call_later(min(5.0, idle_exit / 2), idle_check)

    if idle_exit > 0:
        idle_check()
    try:
        await stop.wait()
    finally:
        await srv.close()
        await core.stop()
        doc = read_daemon(cfg.state)
        if doc and doc.get("pid") == os.getpid():
            try:
                os.unlink(path)
            except OSError:
                pass
    return 0


def running(state: str) -> Optional[dict]:
    doc = read_daemon(state)
    if doc and isinstance(doc.get("pid"), int) and pid_alive(doc["pid"]):
        return doc
    return None


def start_daemon(argv_opts: list[str], state: str, timeout: float = 20.0) -> dict:
    """Start ``profd serve --tcp`` in the background; return its daemon.json once it listens."""
    from .store import private_dir

    private_dir(state)
    log_path = os.path.join(state, "daemon.log")  # rotated by the daemon
    err_path = os.path.join(state, "daemon.err")  # what bypasses logging (a crash's stacks)
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    since = os.fstat(fd).st_size  # what this start writes there comes after
    # -c, not -m: -m puts the current folder first on sys.path, and a folder there named profd/
    # (a checkout, a project of that name) was imported instead of profd (ImportError)
    proc = subprocess.Popen(
        [sys.executable, "-c", _DAEMON_MAIN, "serve", *argv_opts, "--state", state, "--log-file", log_path],
        stdin=subprocess.DEVNULL,
        stdout=fd,
        stderr=fd,
        start_new_session=True,
        close_fds=True,
    )
    os.close(fd)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = read_daemon(state)
        if doc and doc.get("pid") == proc.pid:
            return doc
        if proc.poll() is not None:
            raise SystemExit(f"profd: the daemon exited ({proc.returncode}){_see(log_path, err_path, since)}")
        time.sleep(0.05)
    raise SystemExit(
        f"profd: the daemon did not start within {timeout:.0f} s{_see(log_path, err_path, since)}"
    )


_DAEMON_MAIN = (
    "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
    "from profd.server.daemon.cli import main; sys.exit(main())"
)


def _see(log_path: str, err_path: str, since: int = 0) -> str:
    """Where to look: the files that exist and say something, and the last lines this start
    wrote to its stderr (a daemon that dies before its logging is set up writes only there)."""
    size = lambda p: os.path.getsize(p) if os.path.isfile(p) else 0  # noqa: E731
    said = [p for p, n in ((log_path, 0), (err_path, since)) if size(p) > n]
    out = f"; see {' and '.join(said)}" if said else "; it wrote nothing"
    if err_path in said:
        with open(err_path, "rb") as f:
            f.seek(max(since, size(err_path) - 2000))
            tail = f.read().decode(errors="replace").strip().splitlines()[-3:]
        out += ":\n  " + "\n  ".join(tail)
    return out


def _check_folders(ns) -> Optional[str]:
    """Why the folders the options name cannot be used (None when they can)."""
    for flag, d in [("--watch", ns.watch)] + [("--workspace", w) for w in ns.workspace]:
        if d and not os.path.isdir(d):
            return f"profd: {flag} {d}: no such folder"
    return None


def _settings(doc: dict) -> tuple:
    return (doc.get("watch"), sorted(doc.get("workspace") or []))


def cmd_start(ns) -> int:
    state = os.path.abspath(ns.state or default_state())
    bad = _check_folders(ns)
    if bad:
        print(bad, file=sys.stderr)
        return 2
    disabled_codes(ns.disable)  # a bad code exits 2 here, not in the background daemon
    doc = running(state)
    want = (os.path.abspath(ns.watch) if ns.watch else None, sorted(os.path.abspath(w) for w in ns.workspace))
    if doc:
        have = _settings(doc)
        if have == want or (not ns.watch and not ns.workspace):
            print(
                f"profd: already running: {doc['host']}:{doc['port']} pid {doc['pid']}, "
                f"{_watching(doc.get('watch'))}"
            )
            return 0
        if not ns.replace:
            print(
                f"profd: a daemon already runs (pid {doc['pid']}, {_watching(have[0])}, workspace "
                f"{', '.join(have[1]) or 'none'}); it was not changed. `profd start --replace ...` stops it "
                "and starts one with these settings, `profd stop` stops it",
                file=sys.stderr,
            )
            return 2
        if cmd_stop(ns) != 0:
            return 1
    opts = ["--tcp", ns.tcp]
    if ns.watch:
        opts += ["--watch", os.path.abspath(ns.watch)]
    for w in ns.workspace:
        opts += ["--workspace", os.path.abspath(w)]
    for m in ns.path_map:
        opts += ["--path-map", m]
    for d in ns.disable:
        opts += ["--disable", d]
    for a in ns.allow:
        opts += ["--allow", os.path.abspath(a)]
    if ns.allow_record:
        opts.append("--allow-record")
    opts += [
        "--workers",
        str(ns.workers),
        "--log-level",
        ns.log_level,
        "--idle-exit",
        str(ns.idle_exit),
        "--analysis-timeout",
        str(ns.analysis_timeout),
        "--analysis-mb",
        str(ns.analysis_mb),
    ]
    doc = start_daemon(opts, state, ns.timeout)
    print(
        f"profd: started on {doc['host']}:{doc['port']} pid {doc['pid']}, {_watching(doc.get('watch'))} "
        f"(state {state})"
    )
    return 0


def _watching(watch: Optional[str]) -> str:
    return f"watching {watch}" if watch else "watching no folder (analyses on request only)"


def cmd_stop(ns) -> int:
    state = os.path.abspath(ns.state or default_state())
    doc = running(state)
    if not doc:  # as `profd status` and `profd-client status`: 1 says none runs
        print("profd: no daemon running", file=sys.stderr)
        return 1
    pid = doc["pid"]
    os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, 10):
        # Stuck (a blocked loop, a worker that ignores us): end it and its analysis processes.
        # `profd start` made it a session leader, so its group is its own.
        try:
            group = os.getpgid(pid)
        except ProcessLookupError:
            group = None
        try:
            if group == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not _wait_gone(pid, 5):
            print(f"profd: pid {pid} did not stop", file=sys.stderr)
            return 1
        print(f"profd: pid {pid} did not stop within 10 s; killed it")
        path = os.path.join(state, DAEMON_FILE)
        if (read_daemon(state) or {}).get("pid") == pid:
            try:
                os.unlink(path)
            except OSError:
                pass
        return 0
    print(f"profd: stopped pid {pid}")
    return 0


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:  # reap it if it is our child (the tests start it so); else just look
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def cmd_status(ns) -> int:
    state = os.path.abspath(ns.state or default_state())
    doc = running(state)
    if not doc:
        print("profd: no daemon running", file=sys.stderr)
        return 1
    from .rpc import status_sync

    st = status_sync(doc)
    print(
        f"profd {st['version']}: pid {st['pid']} on {doc['host']}:{doc['port']}, "
        f"{_watching(st['watch'])}, {st['reports']} reports, {st['queued']} queued, "
        f"{st['running']} running, {st['analyses']} analyses, {st['sessions']} sessions, "
        f"up {st['uptimeS']:.0f} s"
    )
    return 0


def cmd_mcp(ns) -> int:
    _logging("WARNING")  # stdout is the MCP channel: logs go to stderr only
    try:
        from .mcp_server import Config, serve
    except ImportError as e:
        print(f"profd: the MCP server needs the mcp package: pip install 'profd[mcp]' ({e})", file=sys.stderr)
        return 2
    roots = [os.path.realpath(r) for r in (ns.root or ["."])]
    for r in roots:
        if not os.path.isdir(r):
            print(f"profd: --root {r}: not a folder", file=sys.stderr)
            return 2
    state = os.path.abspath(ns.state or default_state())
    serve(
        Config(
            roots=roots,
            workspace=[os.path.realpath(w) for w in ns.workspace],
            find_daemon=(lambda: None) if ns.no_daemon else (lambda: running(state)),
            allow_workloads=ns.allow_workloads,
            allow_record=ns.allow_record,
            workload_dir=os.path.abspath(ns.workload_dir) if ns.workload_dir else None,
        )
    )
    return 0


def internal_error(prog: str, state: Optional[str] = None) -> int:
    """An uncaught exception: one line on stderr naming where the traceback went (STATE/error.log,
    else the temp folder), exit 2, never a finding's status (1). Call from an ``except``."""
    import tempfile
    import traceback

    e = sys.exc_info()[1]
    text = (
        f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {prog} {__version__} {' '.join(sys.argv[1:])[:2000]}\n"
        + traceback.format_exc()
    )
    log = None
    for d in (state or _state_or_none(), tempfile.gettempdir()):
        if not d:
            continue
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            path = os.path.join(d, "error.log")
            if os.path.exists(path) and os.path.getsize(path) > 1 << 20:
                os.replace(path, path + ".1")
            with open(path, "a", encoding="utf-8", errors="replace") as f:
                f.write(text)
            log = path
            break
        except OSError:
            continue
    what = f"{type(e).__name__}: {e}".splitlines()[0][:300] if e else "unknown error"
    print(
        f"{prog}: internal error: {what}" + (f" (traceback in {log}; please report it)" if log else ""),
        file=sys.stderr,
    )
    return 2


def _state_or_none() -> Optional[str]:
    try:
        return default_state()
    except Exception:  # platformdirs missing or broken: the temp folder will do
        return None


def main(argv: Optional[list[str]] = None) -> int:
    p = _parser()
    ns, extra = p.parse_known_args(argv)
    if extra:
        p._subparsers._group_actions[0].choices[ns.cmd].error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return {
            "serve": cmd_serve,
            "start": cmd_start,
            "stop": cmd_stop,
            "status": cmd_status,
            "mcp": cmd_mcp,
        }[ns.cmd](ns)
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except Exception:
        return internal_error("profd", getattr(ns, "state", None))


if __name__ == "__main__":
    sys.exit(main())
