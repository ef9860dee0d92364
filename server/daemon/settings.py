"""The options an editor session runs with, as the CLI reads them: the editor's settings (the
``profd`` section, keys as in ``[tool.profd]``) over the ``[tool.profd]`` table of the
workspace's ``pyproject.toml`` (found as the CLI finds it: from each workspace folder upwards,
read by the CLI's own parser, ``server/config.py``) over the daemon's command line.

- ``workspace``, ``path-map``: the settings', the file's and the command line's together.
- ``select``, ``extend-select``, ``ignore``: resolved as ruff does (``config.selection``), from the
  settings when they set any of the three, else from the file; the command line's ``--disable``
  stays off either way.
- ``rules`` (per-rule thresholds, ``{"launch-storm": {"min_launches_per_step": 32}}``): the file's,
  each threshold the settings name replaced.

A misspelt code or key gets the CLI's "did you mean"; a bad value is reported and left out, never
applied half; a ``pyproject.toml`` that is wrong is reported (its path and what is wrong) and not
applied.
"""

from __future__ import annotations

import difflib
import os
from typing import Any

from .. import config
from ...protocol import methods as M
from ...protocol.catalog import RULES
from ...protocol.options import path_map_item

KEYS = ("workspace", "path-map", "select", "extend-select", "ignore", "rules", "watch")
SELECTION = ("select", "extend-select", "ignore")


def plain(obj: Any) -> Any:
    """pygls hands custom params and settings over as namedtuples: back to JSON-like builtins."""
    if hasattr(obj, "_asdict"):
        return {k: plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def parse(raw: Any) -> tuple[dict, list[str]]:
    """Editor settings -> (values, problems)."""
    raw = plain(raw)
    if isinstance(raw, dict) and isinstance(raw.get(M.SETTINGS_SECTION), dict):
        raw = raw[M.SETTINGS_SECTION]  # didChangeConfiguration sends the whole settings object
    if not isinstance(raw, dict):
        return {}, []
    out: dict = {}
    bad: list[str] = []
    for k, v in raw.items():
        if k == "token":
            continue
        if k not in KEYS:
            near = difflib.get_close_matches(str(k), KEYS, n=1)
            bad.append(
                f"unknown setting {k!r}"
                + (f" (did you mean {near[0]!r}?)" if near else "")
                + f"; known: {', '.join(KEYS)}"
            )
            continue
        if k == "watch":
            if isinstance(v, str) and v:
                out[k] = os.path.abspath(os.path.expanduser(v))
            else:
                bad.append("watch wants a folder")
            continue
        if k == "rules":
            try:
                out[k] = config._thresholds(
                    v, "setting profd.rules"
                )  # the CLI's checks of [tool.profd.rules]
            except config.UsageError as e:
                bad.append(str(e))
            continue
        vals = [v] if isinstance(v, str) else v
        if not isinstance(vals, list) or not all(isinstance(x, str) for x in vals):
            bad.append(f"{k} wants a list of strings")
            continue
        if k == "workspace":
            out[k] = [os.path.abspath(os.path.expanduser(x)) for x in vals]
        elif k == "path-map":
            try:
                out[k] = [path_map_item(x) for x in vals]
            except ValueError as e:
                bad.append(str(e))
        else:
            codes = config.split_codes(vals)
            errors = []
            for c in codes:
                try:
                    config.check_code(c, f"setting profd.{k}")
                except config.UsageError as e:
                    errors.append(str(e))
            if errors:
                bad += errors
            else:
                out[k] = codes
    return out, bad


def disabled(values: dict) -> set[str]:
    """The rule codes ``values``' selection turns off (none when it sets none)."""
    if not any(k in values for k in SELECTION):
        return set()
    chosen = config.selection(
        values.get("select") or None, values.get("extend-select", []), values.get("ignore", [])
    )
    return set(RULES) - chosen


def project(folders: list[str]) -> tuple[dict, list[str], list[str]]:
    """(values, the files they came from, problems) of the ``[tool.profd]`` tables found from each
    of ``folders`` upwards (a file reached from two folders counts once; the first folder's
    selection and thresholds win). Reads files: call it off the event loop."""
    out: dict = {}
    paths: list[str] = []
    bad: list[str] = []
    for folder in folders:
        try:
            fc = config.load(None, False, cwd=folder)
            if fc.path is None or fc.path in paths:
                continue
            vals = dict(fc.values)
            vals["path-map"] = [path_map_item(m) for m in vals.get("path-map", [])]
        except (config.UsageError, ValueError) as e:
            bad.append(f"{e}; [tool.profd] there is not applied")
            continue
        except OSError as e:
            bad.append(f"cannot read the pyproject.toml above {folder}: {e}")
            continue
        try:
            off = disabled(vals)  # validates the file's codes (the nearest one named)
        except config.UsageError as e:
            bad.append(f"{fc.path}: [tool.profd] {str(e).lstrip('-')}; [tool.profd] there is not applied")
            continue
        paths.append(fc.path)
        out.setdefault("workspace", []).extend(vals.get("workspace", []))
        out.setdefault("path-map", []).extend(vals["path-map"])
        if any(k in vals for k in SELECTION) and "disabled" not in out:
            out["disabled"] = off
        for code, kv in vals.get("rules", {}).items():
            out.setdefault("rules", {}).setdefault(code, {})
            for name, v in kv.items():
                out["rules"][code].setdefault(name, v)
    return out, paths, bad


def effective(settings: dict, proj: dict, base_disabled: set[str]) -> tuple[set[str], dict]:
    """(rule codes off, thresholds) from the settings over the project file over the command line."""
    off = set(base_disabled) | (
        disabled(settings) if any(k in settings for k in SELECTION) else set(proj.get("disabled", ()))
    )
    th = {c: dict(kv) for c, kv in proj.get("rules", {}).items()}
    for code, kv in settings.get("rules", {}).items():
        th.setdefault(code, {}).update(kv)
    return off, th
