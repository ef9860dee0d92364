"""Write, or compare against, the JSON report of every shipped and corpus trace.

    python bench/snapshot.py --write DIR      # one <id>.json per trace (engine reports, msgspec JSON)
    python bench/snapshot.py --compare DIR    # exit 1 and name each trace whose report changed

A refactor that must not change behaviour (issue 27) is checked by writing DIR on the commit before
and comparing on the commit after: the reports must be byte-identical. The traces are the corpus
(``examples/corpus/expectations.toml``, each with its own workspace and path map, multi-rank jobs
with their job reports) and every other trace under ``examples/`` (workspace ``examples/src``).
The file's own path is written relative to the repository, so two checkouts compare equal.
"""

from __future__ import annotations

import argparse
import os
import sys

import msgspec

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

_SUFFIXES = (".json", ".json.gz", ".pt.trace.json")


def _relative(data: bytes) -> bytes:
    # absolute paths of this checkout -> repository-relative, so before/after checkouts agree
    return data.replace(ROOT.encode() + b"/", b"")


def cases() -> list[tuple[str, list[str], list[str], list]]:
    """(id, trace files, workspace, path map) for every trace the snapshot covers."""
    import corpus

    out, seen = [], set()
    for t in corpus.load():
        paths = [os.path.join(ROOT, f) for f in t.files]
        out.append((t.id, paths, [os.path.join(ROOT, w) for w in t.workspace], list(t.path_map)))
        seen.update(os.path.realpath(p) for p in paths)
    src = os.path.join(ROOT, "examples", "src")
    for dirpath, _dirs, files in sorted(os.walk(os.path.join(ROOT, "examples"))):
        for f in sorted(files):
            p = os.path.join(dirpath, f)
            if f.endswith(_SUFFIXES) and os.path.realpath(p) not in seen:
                rel = os.path.relpath(p, ROOT)
                out.append((rel.replace("/", "__"), [p], [src], []))
    return out


def report_bytes(paths: list[str], workspace: list[str], path_map: list) -> bytes:
    from profd.server.engine import Options

    opts = Options(workspace=workspace, path_map=path_map)
    try:
        return _relative(_encode(paths, opts))
    except Exception as e:  # a file that is not a trace (baseline.json) compares by its error
        return _relative(f"error: {type(e).__name__}: {e}".encode())


def _encode(paths: list[str], opts) -> bytes:
    from profd.server.engine import analyze_file
    from profd.server.engine.job import analyze_job

    if len(paths) == 1:
        doc = {"reports": [analyze_file(paths[0], opts)]}
    else:
        reports, jobs = analyze_job(paths, opts)
        doc = {"reports": reports, "jobs": jobs}
    return msgspec.json.encode(doc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", metavar="DIR")
    g.add_argument("--compare", metavar="DIR")
    ap.add_argument("--only", nargs="*", default=None, help="only these ids")
    a = ap.parse_args(argv)
    changed, missing, n = [], [], 0
    for cid, paths, ws, pm in cases():
        if a.only and cid not in a.only:
            continue
        n += 1
        data = report_bytes(paths, ws, pm)
        if a.write:
            os.makedirs(a.write, exist_ok=True)
            with open(os.path.join(a.write, cid + ".json"), "wb") as fh:
                fh.write(data)
            continue
        ref = os.path.join(a.compare, cid + ".json")
        if not os.path.exists(ref):
            missing.append(cid)
        elif open(ref, "rb").read() != data:
            changed.append(cid)
    if a.write:
        print(f"snapshot: {n} reports written to {a.write}")
        return 0
    for cid in changed:
        print(f"changed: {cid}")
    for cid in missing:
        print(f"not in the snapshot: {cid}")
    print(
        f"snapshot: {n} reports, {n - len(changed) - len(missing)} byte-identical, "
        f"{len(changed)} changed, {len(missing)} new"
    )
    return 1 if changed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
