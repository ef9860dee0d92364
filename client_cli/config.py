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
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ..protocol.catalog import UnknownCode, expand_code
from ..protocol.options import path_map_item

KEYS = {"workspace", "path-map", "select", "ignore", "extend-select", "fail-on", "format", "hints",
        "color", "statistics", "output-file", "rules"}
FAIL_ON = ("error", "warning", "information", "hint", "never")


class UsageError(Exception):
    """A bad flag or configuration value: the CLI prints it and exits 2."""


@dataclass
class FileConfig:
    path: Optional[str] = None  # the pyproject.toml it came from
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default=None):
        return self.values.get(key, default)


def find_pyproject(start: str) -> Optional[str]:
    """The first ``pyproject.toml`` with a ``[tool.profd]`` table from ``start`` upwards."""
    d = os.path.abspath(start)
    while True:
        cand = os.path.join(d, "pyproject.toml")
        if os.path.isfile(cand) and _profd_table(cand, quiet=True) is not None:
            return cand
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def _profd_table(path: str, quiet: bool = False) -> Optional[dict]:
    import tomllib

    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        if quiet:
            return None
        raise UsageError(f"cannot read {path}: {e.strerror or e}")
    except tomllib.TOMLDecodeError as e:
        if quiet:
            return None
        raise UsageError(f"{path} is not valid TOML: {e}")
    tool = doc.get("tool")
    t = tool.get("profd") if isinstance(tool, dict) else None
    return t if isinstance(t, dict) else None


def load(config: Optional[str], isolated: bool, cwd: Optional[str] = None) -> FileConfig:
    """The configuration in effect: ``--config FILE``, else the nearest pyproject.toml, else none."""
    if isolated:
        return FileConfig()
    if config:
        if not os.path.isfile(config):
            raise UsageError(f"--config {config}: no such file")
        t = _profd_table(config)
        path = os.path.abspath(config)
        if t is None:
            raise UsageError(f"--config {config}: no [tool.profd] table in it")
    else:
        path = find_pyproject(cwd or os.getcwd())
        if path is None:
            return FileConfig()
        t = _profd_table(path) or {}
    unknown = sorted(set(t) - KEYS)
    if unknown:
        near = difflib.get_close_matches(unknown[0], sorted(KEYS), n=1)
        raise UsageError(f"{path}: unknown key {unknown[0]!r} in [tool.profd]"
                         + (f" (did you mean {near[0]!r}?)" if near else "")
                         + f"; known: {', '.join(sorted(KEYS))}")
    base = os.path.dirname(path)
    vals = dict(t)
    for k in ("select", "ignore", "extend-select", "workspace", "path-map"):
        if k in vals:
            v = vals[k]
            if isinstance(v, str):
                v = [v]
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise UsageError(f"{path}: [tool.profd] {k} wants a list of strings")
            vals[k] = v
    if "workspace" in vals:
        vals["workspace"] = [os.path.normpath(os.path.join(base, w)) for w in vals["workspace"]]
    if "path-map" in vals:
        vals["path-map"] = [_rebase_map(m, base, path) for m in vals["path-map"]]
    for key, allowed in (("fail-on", FAIL_ON), ("format", ("text", "json", "sarif")),
                         ("color", ("auto", "always", "never"))):
        if key in vals and vals[key] not in allowed:
            raise UsageError(f"{path}: [tool.profd] {key} must be one of {', '.join(allowed)}, got {vals[key]!r}")
    for key in ("hints", "statistics"):
        if key in vals and not isinstance(vals[key], bool):
            raise UsageError(f"{path}: [tool.profd] {key} wants true or false, got {vals[key]!r}")
    if "rules" in vals:
        vals["rules"] = _thresholds(vals["rules"], path)
    return FileConfig(path, vals)


def _rebase_map(m: str, base: str, path: str) -> str:
    try:
        r, l = path_map_item(m, base)
    except ValueError as e:
        raise UsageError(f"{path}: [tool.profd] {e}")
    return f"{r}={l}"


def _thresholds(t, path: str) -> dict[str, dict[str, float]]:
    """``[tool.profd.rules.CODE] name = number``: each code and name checked against the rule's own
    ``THRESHOLDS`` (the knobs it documents)."""
    from ..server.engine.rules import thresholds

    known = thresholds()
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
                raise UsageError(f"{path}: rule {code} has no threshold {name!r}; "
                                 + (f"it has: {', '.join(opts)}" if opts else "it has none to set"))
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise UsageError(f"{path}: [tool.profd.rules.{code}] {name} wants a number, got {v!r}")
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
