"""``[tool.profd]`` in ``pyproject.toml``, and rule selection (``--select/--ignore/--extend-select``).

The configuration is found as ruff finds its own: the first ``pyproject.toml`` with a
``[tool.profd]`` table from the current directory upwards, or the file ``--config FILE`` names;
``--isolated`` ignores every configuration file. Keys are the long flag names (``workspace``,
``path-map``, ``select``, ``ignore``, ``extend-select``, ``fail-on``, ``format``, ``hints``,
``color``, ``statistics``); a flag given on the command line wins over the file. Paths in the file
are relative to the file's folder. Per-rule thresholds live in ``[tool.profd.rules.CODE]``.

A code in a selection is a rule code (``host-sync``), a family (``kernels``: every rule of
``server/engine/rules/kernels.py``) or ``ALL``; anything else is a usage error (exit 2) naming the
nearest real code.

Every error names the file and the key. The file is read robustly: at most ``MAX_BYTES``, UTF-8,
nesting at most ``MAX_DEPTH`` deep (TOML parsers recurse per level), else a clear error (exit 2).
A ``pyproject.toml`` found on the way up that cannot be read or parsed is as loud as one named
by ``--config``, unless it never mentions profd (then it cannot configure us and is passed over).
"""

from __future__ import annotations

import math
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ..protocol.catalog import UnknownCode, expand_code
from ..protocol.options import path_map_item

KEYS = {
    "workspace",
    "path-map",
    "select",
    "ignore",
    "extend-select",
    "fail-on",
    "format",
    "hints",
    "color",
    "statistics",
    "output-file",
    "rules",
    "per-file-ignores",
}
FAIL_ON = ("error", "warning", "information", "hint", "never")
FORMATS = ("text", "json", "sarif", "github", "junit")
MAX_BYTES = 1 << 20  # a pyproject.toml is a few KB; this bounds what a hostile one costs
MAX_DEPTH = 64  # arrays/tables nested deeper than this are refused before the parser recurses


def toml():
    """The TOML parser module (``tomllib``; ``tomli`` on Python 3.10), imported when a file or
    ``--config`` pair is read (not at start-up). The one fallback of the repository: bench/, tests/
    and .ci/ scripts read their TOML through it too."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser, from PyPI (a conditional dependency in pyproject.toml)
        import tomli as tomllib
    return tomllib


class UsageError(Exception):
    """A bad flag or configuration value: the CLI prints it and exits 2."""


@dataclass
class FileConfig:
    path: Optional[str] = None  # the pyproject.toml it came from
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default=None):
        return self.values.get(key, default)


def find_pyproject(start: str) -> Optional[str]:
    """The first ``pyproject.toml`` with a ``[tool.profd]`` table from ``start`` upwards. One that
    mentions profd but cannot be read or parsed is an error (as loud as ``--config``)."""
    d = os.path.abspath(start)
    while True:
        cand = os.path.join(d, "pyproject.toml")
        if os.path.isfile(cand):
            data = _read(cand, found_from=start)
            if data is not None and _profd_table(cand, data, found_from=start) is not None:
                return cand
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def _found(found_from: Optional[str]) -> str:
    return (
        (
            f" (found looking for [tool.profd] upwards from {os.path.abspath(found_from)}; "
            "--isolated ignores configuration files)"
        )
        if found_from
        else ""
    )


def _read(path: str, found_from: Optional[str] = None) -> Optional[bytes]:
    """The file's bytes, at most MAX_BYTES of them. On discovery (``found_from``), None for a file
    that never mentions profd: it cannot hold our table, and an unrelated project's file is not ours
    to judge."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        if found_from and e.errno == 2:  # gone since it was listed
            return None
        raise UsageError(f"cannot read {path}: {e.strerror or e}{_found(found_from)}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{path}: not a regular file")
        if st.st_size > MAX_BYTES:
            raise UsageError(
                f"{path}: {st.st_size:,} bytes, larger than the {MAX_BYTES:,} a configuration "
                f"file may be{_found(found_from)}"
            )
        chunks, n = [], 0
        while n <= MAX_BYTES:
            b = os.read(fd, min(1 << 16, MAX_BYTES + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
        data = b"".join(chunks)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}{_found(found_from)}")
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:  # grew while read
        raise UsageError(f"{path}: larger than the {MAX_BYTES:,} bytes a configuration file may be")
    if found_from and b"profd" not in data:
        return None
    return data


_TOKENS = re.compile(
    r'"""(?:[^"\\]|\\.|"(?!""))*"""|\'\'\'(?:[^\']|\'(?!\'\'))*\'\'\''
    r'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]'
)


def _nesting(text: str) -> int:
    """The deepest ``[``/``{`` nesting outside strings and comments (one linear pass, so that a
    hostile file is refused before a recursive parser sees it)."""
    depth = top = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in ("[", "{"):
            depth += 1
            top = max(top, depth)
            if top > MAX_DEPTH:
                return top
        elif c in ("]", "}"):
            depth = max(0, depth - 1)
    return top


def _profd_table(path: str, data: Optional[bytes] = None, found_from: Optional[str] = None) -> Optional[dict]:
    """``[tool.profd]`` of the file (None when it has none); a UsageError naming the file and what
    is wrong when it cannot be read as TOML."""
    if data is None:
        data = _read(path)
    where = _found(found_from)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise UsageError(
            f"{path}: not UTF-8 (byte 0x{data[e.start]:02x} on line {line}); TOML files are UTF-8{where}"
        )
    depth = _nesting(text)
    if depth > MAX_DEPTH:
        raise UsageError(f"{path}: arrays or tables nested more than {MAX_DEPTH} deep{where}")
    tomllib = toml()
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path} is not valid TOML: {e}{where}")
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to parse{where}")
    tool = doc.get("tool")
    t = tool.get("profd") if isinstance(tool, dict) else None
    return t if isinstance(t, dict) else None


def load(config, isolated: bool, cwd: Optional[str] = None) -> FileConfig:
    """The configuration in effect: ``--config FILE``, else the nearest pyproject.toml, else none;
    then each ``--config KEY=VALUE`` (a TOML pair, as ruff's) over it. ``config`` is one value or
    a list of them (``--config`` repeats)."""
    items = [config] if isinstance(config, str) else list(config or [])
    files = [c for c in items if not _is_override(c)]
    overrides = [c for c in items if _is_override(c)]
    if len(files) > 1:
        raise UsageError(f"--config names {len(files)} files ({', '.join(files)}); give one")
    path, t = None, {}
    if files:
        config = files[0]
        if not os.path.isfile(config):
            raise UsageError(
                f"--config {config}: no such file"
                + (" (a KEY = VALUE override needs an '=')" if "=" not in config else "")
            )
        got = _profd_table(config)
        path = os.path.abspath(config)
        if got is None:
            raise UsageError(f"--config {config}: no [tool.profd] table in it")
        t = got
    elif not isolated:
        path = find_pyproject(cwd or os.getcwd())
        if path is not None:
            t = _profd_table(path) or {}
    if overrides:
        t = _merge(dict(t), _overrides(overrides))
    if path is None and not t:
        return FileConfig()
    return FileConfig(
        path, _check(t, path or "--config", os.path.dirname(path) if path else (cwd or os.getcwd()))
    )


def _is_override(c: str) -> bool:
    """``--config`` takes a file or a ``KEY = VALUE`` pair (as ruff's): an existing file is a file."""
    return "=" in c and not os.path.isfile(c)


def _overrides(items: list[str]) -> dict:
    out: dict = {}
    tomllib = toml()
    for it in items:
        if len(it) > 4096 or _nesting(it) > MAX_DEPTH:
            raise UsageError(f"--config {it[:60]!r}: too long or nested too deeply")
        try:
            doc = tomllib.loads(it)
        except tomllib.TOMLDecodeError as e:
            raise UsageError(
                f"--config {it!r}: not a file, nor a TOML KEY = VALUE pair ({e}); "
                "e.g. --config 'fail-on = \"error\"' or --config 'rules.launch-storm.launches-per-step = 64'"
            )
        _merge(out, doc)
    return out


def _merge(into: dict, new: dict) -> dict:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            into[k] = _merge(dict(into[k]), v)
        else:
            into[k] = v
    return into


def _check(t: dict, path: str, base: str) -> dict:
    """Validate the [tool.profd] values (each error names ``path`` and the key); paths made absolute
    against ``base`` (the file's folder)."""
    unknown = sorted(set(t) - KEYS)
    if unknown:
        import difflib

        near = difflib.get_close_matches(unknown[0], sorted(KEYS), n=1)
        raise UsageError(
            f"{path}: unknown key {unknown[0]!r} in [tool.profd]"
            + (f" (did you mean {near[0]!r}?)" if near else "")
            + f"; known: {', '.join(sorted(KEYS))}"
        )
    vals = dict(t)
    for k in ("select", "ignore", "extend-select", "workspace", "path-map"):
        if k in vals:
            v = vals[k]
            if isinstance(v, str):
                v = [v]
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise UsageError(f"{path}: [tool.profd] {k} wants a list of strings, got {_short(vals[k])}")
            vals[k] = v
    for k in ("select", "ignore", "extend-select"):
        for c in split_codes(vals.get(k, [])):
            check_code(c, f"{path}: [tool.profd] {k}")
    if "workspace" in vals:
        vals["workspace"] = [
            os.path.normpath(os.path.join(base, os.path.expanduser(w))) for w in vals["workspace"]
        ]
    if "path-map" in vals:
        vals["path-map"] = [_rebase_map(m, base, path) for m in vals["path-map"]]
    if "output-file" in vals:
        if not isinstance(vals["output-file"], str) or not vals["output-file"]:
            raise UsageError(
                f"{path}: [tool.profd] output-file wants a path, got {_short(vals['output-file'])}"
            )
        vals["output-file"] = os.path.join(base, os.path.expanduser(vals["output-file"]))
    for key, allowed in (("fail-on", FAIL_ON), ("format", FORMATS), ("color", ("auto", "always", "never"))):
        if key in vals and vals[key] not in allowed:
            raise UsageError(
                f"{path}: [tool.profd] {key} must be one of {', '.join(allowed)}, got {_short(vals[key])}"
            )
    for key in ("hints", "statistics"):
        if key in vals and not isinstance(vals[key], bool):
            raise UsageError(f"{path}: [tool.profd] {key} wants true or false, got {_short(vals[key])}")
    if "per-file-ignores" in vals:
        vals["per-file-ignores"] = _per_file_ignores(vals["per-file-ignores"], path, base)
    if "rules" in vals:
        vals["rules"] = _thresholds(vals["rules"], path)
    return vals


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _per_file_ignores(t, path: str, base: str) -> dict[str, list[str]]:
    """``[tool.profd.per-file-ignores] "GLOB" = ["code", ...]`` (as ruff's): findings located in a
    file matching GLOB (relative to the config file's folder, or a bare file name) are dropped."""
    if not isinstance(t, dict):
        raise UsageError(f'{path}: [tool.profd.per-file-ignores] wants "GLOB" = ["code", ...] pairs')
    out: dict[str, list[str]] = {}
    for glob, codes in t.items():
        if isinstance(codes, str):
            codes = [codes]
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            raise UsageError(f"{path}: [tool.profd.per-file-ignores] {glob!r} wants a list of rule codes")
        for c in split_codes(codes):
            check_code(c, f"{path}: [tool.profd.per-file-ignores] {glob!r}")
        pat = (
            glob
            if os.path.isabs(glob) or "/" not in glob.strip("*") and not glob.startswith("./")
            else os.path.join(base, glob)
        )
        out[pat] = split_codes(codes)
    return out


def _rebase_map(m: str, base: str, path: str) -> str:
    try:
        r, l = path_map_item(m, base)
    except ValueError as e:
        raise UsageError(f"{path}: [tool.profd] {e}")
    return f"{r}={l}"


def _thresholds(t, path: str) -> dict[str, dict[str, float]]:
    """``[tool.profd.rules.CODE] name = number``: each code and name checked against the rule's own
    declared thresholds (the knobs it documents)."""
    from .engine import rule_thresholds

    known = rule_thresholds()
    if not isinstance(t, dict):
        raise UsageError(f"{path}: [tool.profd.rules] wants tables, one per rule code")
    out: dict[str, dict[str, float]] = {}
    for code, kv in t.items():
        check_code(code, f"{path}: [tool.profd.rules.{code}]", families=False)
        if not isinstance(kv, dict):
            raise UsageError(f"{path}: [tool.profd.rules.{code}] wants name = number pairs")
        for name, v in kv.items():
            if name not in known.get(code, {}):
                opts = sorted(known.get(code, {}))
                raise UsageError(
                    f"{path}: rule {code} has no threshold {name!r}; "
                    + (f"it has: {', '.join(opts)}" if opts else "it has none to set")
                )
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise UsageError(f"{path}: [tool.profd.rules.{code}] {name} wants a number, got {_short(v)}")
            if not math.isfinite(v) or v < 0 or (name.endswith("-share") and v > 1):
                raise UsageError(
                    f"{path}: [tool.profd.rules.{code}] {name} = {v!r}: wants a finite number >= 0"
                    + (" and <= 1 (a share of the time)" if name.endswith("-share") else "")
                    + " (nan or inf would turn the rule off, a negative one fire everywhere)"
                )
        out[code] = {k: float(v) for k, v in kv.items()}
    return out


# ---- selection -----------------------------------------------------------------------------------


def check_code(code: str, where: str, families: bool = True) -> set[str]:
    """The rule codes ``code`` stands for; a UsageError naming the nearest code when it is none."""
    try:
        return expand_code(code, families)
    except UnknownCode as e:
        raise UsageError(f"{where}: {unknown_code_message(e)}")


def unknown_code_message(e: UnknownCode) -> str:
    hint = f"; did you mean {e.nearest!r}?" if e.nearest else ""
    return f"unknown rule code {e.code!r}{hint} (`profd-client rule --all` lists them)"


def split_codes(items: Iterable[str]) -> list[str]:
    """Comma lists and repeated flags alike: ``["a,b", "c"]`` -> ``["a", "b", "c"]``."""
    return [c.strip() for it in items or [] for c in str(it).split(",") if c.strip()]


def selection(select: Optional[list[str]], extend: list[str], ignore: list[str]) -> set[str]:
    """The rule codes to run, as ruff resolves them: ``select`` (default ALL) plus ``extend``,
    minus ``ignore``; each code validated."""
    chosen: set[str] = set()
    for c in select if select is not None else ["ALL"]:
        chosen |= check_code(c, "--select")
    for c in extend:
        chosen |= check_code(c, "--extend-select")
    for c in ignore:
        chosen -= check_code(c, "--ignore")
    return chosen
