"""The workspace search behind the suffix match is bounded in what it lists, whatever the workspace
(issue 32: run from ``/``, a small trace's analysis took 2.2 s listing /proc, /sys and /usr). The
trees are real folders made in tmp; the bounds are counted in folders listed, never timed."""

import os

from profd.server.engine import sourcemap
from profd.server.engine.sourcemap import SourceMap, folders


def _tree(root, spec):
    """Make each path of ``spec`` under ``root``: a name ending in .py a file, else a folder."""
    for rel in spec:
        p = root / rel
        if rel.endswith(".py"):
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("x = 1\n")
        else:
            p.mkdir(parents=True, exist_ok=True)


def test_skipped_hidden_and_linked_folders_are_not_listed(tmp_path):
    _tree(
        tmp_path,
        [
            "src/pkg/model.py",
            ".git/objects/hook.py",
            "node_modules/a/b/c.py",
            ".venv/lib/site-packages/torch/nn.py",
            "lib/site-packages/numpy/core.py",
            "build/lib/pkg/model.py",
            ".hidden/secret.py",
        ],
    )
    os.symlink(tmp_path / "src", tmp_path / "linked")
    listed = [os.path.relpath(d, tmp_path) for d, _, _ in folders([str(tmp_path)])]
    assert sorted(listed) == [".", "lib", "src", "src/pkg"]
    sm = SourceMap([str(tmp_path)])
    assert sm.files_named("model.py") == [str(tmp_path / "src" / "pkg" / "model.py")]
    assert sm.files_named("c.py") == sm.files_named("nn.py") == sm.files_named("core.py") == []


def test_the_search_stops_at_its_folder_and_depth_bounds_nearest_first(tmp_path, monkeypatch):
    deep = "/".join(f"d{i}" for i in range(30))
    _tree(tmp_path, [f"{deep}/bottom.py", "top.py", *(f"wide{i}/w{i}.py" for i in range(300))])
    listed = list(folders([str(tmp_path)]))
    depths = [depth for _, depth, _ in listed]
    assert max(depths) == sourcemap._MAX_DEPTH  # the chain is cut at the depth bound
    assert depths == sorted(depths)  # breadth first: every folder before the ones below it
    assert SourceMap([str(tmp_path)]).files_named("bottom.py") == []
    monkeypatch.setattr(sourcemap, "_MAX_DIRS", 100)
    listed = list(folders([str(tmp_path)]))
    assert len(listed) == 100  # the root, then the nearest 99 of its 301 folders
    sm = SourceMap([str(tmp_path)])
    assert sm.resolve("/elsewhere/top.py") == str(tmp_path / "top.py")  # the root's own files found
    found = sum(bool(sm.files_named(f"w{i}.py")) for i in range(300))
    assert found == sum(os.path.basename(d).startswith("wide") for d, _, _ in listed) >= 98


def test_a_root_above_the_system_folders_does_not_list_them(monkeypatch):
    """From ``/`` (a CLI run there: the current folder is the default workspace) the system's
    folders are not searched; bounded so the test lists a few hundred folders at most."""
    monkeypatch.setattr(sourcemap, "_MAX_DIRS", 300)
    listed = [d for d, _, _ in folders(["/"])]
    assert listed[0] == "/" and len(listed) <= 300
    tops = {"/" + d.split("/")[1] for d in listed[1:]}
    assert not tops & sourcemap._SYSTEM_DIRS
    # a root inside one of them is searched as any other
    usr = [d for d, _, _ in folders(["/usr/lib"])]
    assert usr[0] == "/usr/lib" and len(usr) > 1
