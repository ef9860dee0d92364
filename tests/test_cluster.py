"""Cluster scale: many rank traces of one job, mapped on a Dask LocalCluster (or a process pool),
reduced from summaries; the job findings equal the single-process ones.

The jobs are tiled from the real NCCL traces with new rank ids: an 8-rank DDP job of balanced
rank copies (no straggler), and a 4-rank FSDP job where one rank is a copy of the slow fsdp rank 0
(the planted straggler, at rank 2) and the others copies of fsdp rank 1."""

import os

import msgspec
import orjson
import pytest

from conftest import trace
from profd.server.daemon import cluster
from profd.server.engine import job
from profd.server.engine.loader import read_bytes


def tile(src: str, out_dir: str, rank: int, world: int) -> str:
    doc = orjson.loads(bytes(read_bytes(src)))
    info = doc["distributedInfo"]
    info.update(rank=rank, world_size=world)
    for pg in info.get("pg_config", []):
        pg.update(pg_size=world, ranks=list(range(world)))
    path = os.path.join(out_dir, f"rank{rank}.pt.trace.json")
    with open(path, "wb") as f:
        f.write(orjson.dumps(doc))
    return path


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    ddp = tmp_path_factory.mktemp("ddp8")
    b0, b1 = trace("balanced_rank0"), trace("balanced_rank1")
    ddp_paths = [tile(b0 if r % 2 == 0 else b1, str(ddp), r, 8) for r in range(8)]
    fsdp = tmp_path_factory.mktemp("fsdp4")
    f0, f1 = trace("fsdp_rank0"), trace("fsdp_rank1")
    fsdp_paths = [tile(f0 if r == 2 else f1, str(fsdp), r, 4) for r in range(4)]
    return {"ddp": (str(ddp), ddp_paths), "fsdp": (str(fsdp), fsdp_paths)}


def single_process(paths):
    return [job.reduce_job(g) for g in job.group_jobs(job.summarize_rank(p) for p in paths)]


def enc(reports):
    return [msgspec.json.encode(j) for j in reports]


def test_folder_of_rank_traces_on_a_process_pool(jobs):
    folder, paths = jobs["ddp"]
    assert cluster.trace_paths([folder]) == sorted(paths)
    got = cluster.analyze_job_paths([folder], workers=2)
    want = single_process(paths)
    assert enc(got) == enc(want)
    (j,) = got
    assert len(j.ranks) == 8 and j.missing_ranks == [] and j.straggler is None


def test_dask_local_cluster_equals_single_process(jobs):
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as lc,
        distributed.Client(lc) as client,
    ):
        for name in ("ddp", "fsdp"):
            folder, paths = jobs[name]
            got = cluster.analyze_job_paths([folder], client=client)
            assert enc(got) == enc(single_process(paths)), name
            (j,) = got
            if name == "fsdp":
                assert j.straggler == 2  # the planted slow rank, found among four
                others = [r for r in j.ranks if r.rank != 2]
                assert all(r.wait_us > 0.8 * r.comm_us for r in others)
            else:
                assert j.straggler is None


def test_cli_cluster_address(jobs, capsys):
    distributed = pytest.importorskip("distributed")
    from profd.client_cli.main import main

    folder, _ = jobs["fsdp"]
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None, scheduler_port=0
    ) as lc:
        rc = main(
            [
                "analyze",
                "--no-daemon",
                "--fail-on",
                "never",
                "--format",
                "json",
                "--cluster",
                lc.scheduler_address,
                folder,
            ]
        )
    assert rc == 0
    doc = msgspec.json.decode(capsys.readouterr().out)
    assert doc["reports"] == [] and doc["jobs"][0]["straggler"] == 2


def test_cli_cluster_sends_absolute_paths_and_names_each_failed_task(jobs, tmp_path, monkeypatch, capsys):
    """Workers resolve a relative path against their own working directory: the CLI resolves paths
    before sending them, and a task that fails is reported with its trace and reason (exit 2).
    The worker is a real ``dask worker`` process started in another folder."""
    distributed = pytest.importorskip("distributed")
    import subprocess
    import sys

    from profd.client_cli.main import main

    folder, paths = jobs["fsdp"]
    bad = tmp_path / "not_a_trace.json"
    bad.write_text('{"hello": "world"}')
    elsewhere = tmp_path / "worker_cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(os.path.dirname(folder))
    rel = [os.path.relpath(p) for p in paths]
    with distributed.LocalCluster(
        n_workers=0, processes=True, host="127.0.0.1", dashboard_address=None, scheduler_port=0
    ) as lc:
        worker = subprocess.Popen(
            [
                os.path.join(os.path.dirname(sys.executable), "dask"),
                "worker",
                lc.scheduler_address,
                "--nthreads",
                "1",
                "--no-dashboard",
            ],
            cwd=str(elsewhere),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with distributed.Client(lc.scheduler_address) as c:
                c.wait_for_workers(1, timeout=60)
            rc = main(
                [
                    "analyze",
                    "--no-daemon",
                    "--isolated",
                    "--fail-on",
                    "never",
                    "--format",
                    "json",
                    "--cluster",
                    lc.scheduler_address,
                    *rel,
                    str(bad),
                ]
            )
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    out, err = capsys.readouterr()
    assert rc == 2
    assert f"task for {bad} failed: " in err and "not a torch.profiler trace" in err
    doc = msgspec.json.decode(out)
    (j,) = doc["jobs"]
    assert j["straggler"] == 2 and all(os.path.isabs(r["path"]) for r in j["ranks"])
    assert len(j["ranks"]) == 4  # every rank read by the worker, whose cwd holds none of them
