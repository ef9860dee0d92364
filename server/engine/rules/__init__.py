"""The rules: one module per family, each rule a function ``check(ctx) -> iterable of Diagnostic``.

A rule's docstring states its evidence, its threshold and why that value; ``docs/rules.md`` is
generated from them (``python -m profd.server.engine.rules``) and is the ``codeDescription`` target.
"""
from __future__ import annotations

import importlib
from typing import Callable, Iterable

from ....protocol.catalog import RULES as CATALOG

Check = Callable[..., Iterable]
REGISTRY: dict[str, Check] = {}

FAMILIES = ["bound", "steps", "artifacts", "sync", "gaps", "kernels", "compile", "memory", "training", "ranks",
            "attention", "sources"]


def rule(code: str):
    """Register ``fn`` as the check for catalog code ``code``."""
    if code not in CATALOG:
        raise KeyError(f"rule code {code!r} is not in the catalog")

    def wrap(fn: Check) -> Check:
        REGISTRY[code] = fn
        fn.code = code
        return fn

    return wrap


def load_all() -> dict[str, Check]:
    for fam in FAMILIES:
        importlib.import_module(f"{__name__}.{fam}")
    return REGISTRY


_THRESHOLDS: dict[str, dict[str, float]] = {}


def thresholds() -> dict[str, dict[str, float]]:
    """Per rule code, the thresholds a team may set (``[tool.profd.rules.CODE]``) and their
    defaults: each family module's ``THRESHOLDS``."""
    if not _THRESHOLDS:
        for fam in FAMILIES:
            mod = importlib.import_module(f"{__name__}.{fam}")
            for code, kv in getattr(mod, "THRESHOLDS", {}).items():
                _THRESHOLDS.setdefault(code, {}).update(kv)
    return _THRESHOLDS
