"""The layout is the architecture: data flows trace -> engine -> report -> daemon | CLI, and the
imports must say the same. Every import in the source (top-level and lazy alike) is read with ``ast``
and resolved to a profd module, so a new import against the flow fails here, not in review."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# package -> folder, as pyproject's package-dir maps them
PACKAGES = {
    "profd.server": "server",
    "profd.client_cli": "client_cli",
    "profd.protocol": "protocol",
    "profd": "profd",
}


def _modules() -> dict[str, str]:
    """module name -> file, for every .py under the mapped folders."""
    out = {}
    for pkg, folder in PACKAGES.items():
        base = os.path.join(ROOT, folder)
        for dirpath, _, files in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            parts = [] if rel == "." else rel.split(os.sep)
            for f in files:
                if not f.endswith(".py") or (pkg == "profd" and parts):
                    continue
                name = f[:-3]
                mod = ".".join([pkg, *parts] + ([] if name == "__init__" else [name]))
                out[mod] = os.path.join(dirpath, f)
    return out


MODULES = _modules()


def _extension(pkg: str, name: str) -> bool:
    init = MODULES.get(pkg, "")
    return bool(init) and os.path.exists(os.path.join(os.path.dirname(init), name + ".c"))


def _imports(mod: str, path: str) -> set[str]:
    """The profd modules ``mod`` imports, anywhere in its body."""
    is_pkg = path.endswith("__init__.py")
    here = mod.split(".") if is_pkg else mod.split(".")[:-1]
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            # `from pkg import sub` imports the submodule when there is one (a C extension such as
            # _scan is one too, and imports nothing of ours), else a name defined in pkg
            names = [
                f"{target}.{a.name}"
                if f"{target}.{a.name}" in MODULES or _extension(target, a.name)
                else target
                for a in node.names
            ]
        else:
            continue
        out.update(n for n in names if n in MODULES and n != mod)
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _edges(src_prefix: str, dst_prefix: str):
    return [
        (a, b) for a, bs in GRAPH.items() if a.startswith(src_prefix) for b in bs if b.startswith(dst_prefix)
    ]


@pytest.mark.parametrize(
    "src,dst",
    [
        ("profd.server.engine", "profd.server.daemon"),
        ("profd.server.engine", "profd.server.workloads"),
        ("profd.server.engine", "profd.client_cli"),
        ("profd.protocol", "profd.server"),
        ("profd.protocol", "profd.client_cli"),
        ("profd.server", "profd.client_cli"),
    ],
)
def test_no_import_against_the_flow(src, dst):
    assert _edges(src, dst) == []


@pytest.mark.parametrize(
    "front", ["profd.client_cli", "profd.server.daemon", "profd.server.workloads", "profd.server.config"]
)
def test_front_ends_import_only_the_engine_facade(front):
    """The engine's one door is its package (``engine/api.py``, re-exported by ``__init__``): a
    module outside the engine that imports an engine submodule depends on the engine's insides."""
    assert [(a, b) for a, b in _edges(front, "profd.server.engine.")] == []


def test_the_wire_options_are_the_engine_options():
    """One options type: the protocol's ``AnalysisOptions`` (free of the engine) has exactly the
    engine ``Options``' fields less the ones built where the analysis runs, and a round trip over
    the wire gives the same options back."""
    import dataclasses

    import msgspec

    from profd.protocol.options import AnalysisOptions
    from profd.server.engine import Options

    sent = {f.name for f in dataclasses.fields(Options)} - set(Options.LOCAL)
    assert sent == set(AnalysisOptions.__struct_fields__)
    opts = Options(
        workspace=["/w"],
        path_map=[("/remote", "/here")],
        disabled={"host-sync"},
        thresholds={"launch-storm": {"min_launches_per_step": 32.0}},
        library_lines=True,
    )
    wire = msgspec.json.decode(msgspec.json.encode(opts.wire()), type=AnalysisOptions)
    assert Options().given(wire) == opts
    assert opts.given(AnalysisOptions()) == opts  # nothing given: every value kept


def test_rules_see_the_context_not_the_entry_module():
    """The entry module imports the rules; a rule importing it back would be a circle."""
    bad = [
        (a, b)
        for a, b in _edges("profd.server.engine.rules", "profd.server.engine")
        if b in ("profd.server.engine.analyze", "profd.server.engine")
    ]
    assert bad == []
    assert ("profd.server.engine.analyze", "profd.server.engine.rules") in _edges(
        "profd.server.engine.analyze", ""
    )


def test_no_import_cycles():
    """Tarjan's strongly connected components over the whole import graph: none larger than one."""
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_graph_is_read():
    """The checks above mean nothing if the reader found no edges: the engine entry reaches the model."""
    assert "profd.server.engine.model" in GRAPH["profd.server.engine.analyze"]
    assert "profd.client_cli.common" in GRAPH["profd.client_cli.jobs"]
    assert "profd.server.engine" in GRAPH["profd.client_cli.format"]
