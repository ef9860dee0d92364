"""Communication beyond NCCL, and classes that the launch API does not decide (issue 33).

Expert-parallel all-to-all (DeepEP), inference engines' custom all-reduce (vLLM/SGLang) and NVSHMEM
kernels appear in no trace available here, so ``_ep_trace`` writes one (synthetic, as the docstring
says): a torch.profiler-shaped rank of two 3-step jobs whose names are verbatim as those libraries'
kernels appear in published profiles (``void deep_ep::intranode::dispatch<(int)2, (int)768,
(int)8192>(int4 *, ...)``), launched with ``cudaLaunchKernelExC`` as DeepEP launches them. The other
tests use real traces.
"""

import gzip
import json
import os

import pytest

from profd.server.engine import kernels as K
from profd.server.engine import job, loader, model
from profd.server.engine.analyses import analyze
from profd.server.engine.rules.bound import kernel_families

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GEMM_NAME = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
COMM_NAMES = [
    "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int const*, int*, int, int, int, bool const*, int*, int*, int, int, void**, int**, int)",
    "void deep_ep::intranode::dispatch<(int)8, (int)768, (int)8192>(int4 *, float *, int *, long *, float *, int *)",
    "void deep_ep::internode_ll::combine<(bool)0, (int)7168>(void *, void *, int *, void *, void const *, long const *)",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
    "nvshmemi_barrier_all_on_stream_kernel",
]


def _ep_trace(path, rank=0, comm_us=400.0):
    """Synthetic (see the module docstring): per step, a GEMM op (300 µs) on stream 7, then the
    expert-parallel dispatch/combine and a custom all-reduce on stream 20, not overlapped."""
    ev, t, corr = [], 1_000.0, 100
    pid, tid = 1, 1
    for step in range(3):
        t0 = t
        ops = []
        gpu_t = t + 50
        for name, dur, api, op in [(GEMM_NAME, 300.0, "cuLaunchKernelEx", "aten::mm")] + [
            (n, comm_us / len(COMM_NAMES), "cudaLaunchKernelExC", None) for n in COMM_NAMES
        ]:
            corr += 1
            if op:
                ev.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": op,
                        "pid": pid,
                        "tid": tid,
                        "ts": t,
                        "dur": 20,
                        "args": {"External id": corr},
                    }
                )
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": api,
                    "pid": pid,
                    "tid": tid,
                    "ts": t + 5,
                    "dur": 10,
                    "args": {"External id": corr, "correlation": corr},
                }
            )
            stream = 7 if op else 20
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": stream,
                    "ts": gpu_t,
                    "dur": dur,
                    "args": {
                        "External id": corr,
                        "correlation": corr,
                        "device": 0,
                        "stream": stream,
                        "grid": [132, 1, 1],
                        "block": [768, 1, 1],
                    },
                }
            )
            ops.append(gpu_t + dur)
            gpu_t += dur
            t += 25
        end = max(ops) + 10
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaDeviceSynchronize",
                "pid": pid,
                "tid": tid,
                "ts": t,
                "dur": end - t,
                "args": {},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step + 1}",
                "pid": pid,
                "tid": tid,
                "ts": t0,
                "dur": end - t0 + 1,
                "args": {},
            }
        )
        t = end + 2
    doc = {
        "schemaVersion": 1,
        "traceEvents": ev,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H800", "computeMajor": 9, "computeMinor": 0}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
    }
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path


def _model(path):
    doc, _, _ = loader.load(path)
    m = model.build(doc)
    return m, analyze(m)


def test_expert_parallel_and_custom_all_reduce_kernels_are_communication(tmp_path):
    m, a = _model(_ep_trace(str(tmp_path / "ep.json.gz")))
    by = {e.name: a.gpu_class[g] for g, e in enumerate(m.gpu)}
    assert {by[n] for n in COMM_NAMES} == {K.COMMUNICATION}, by  # was gemm (cudaLaunchKernelExC) / other
    assert by[GEMM_NAME] == K.GEMM
    # they count where collectives count: out of the busy share, in the communication time ...
    assert a.busy_pct == pytest.approx(100 * 900 / a.window_us, rel=0.05)
    assert a.comm_us == pytest.approx(3 * 400, rel=0.01)
    # ... exposed (nothing overlaps them) in the rank's steps ...
    steps = job.step_stats(m, a)
    assert all(
        s.comm_us == pytest.approx(400, rel=0.01) and s.exposed_comm_us == pytest.approx(400, rel=0.01)
        for s in steps
    )
    # ... and never the largest GEMM
    fams = dict(kernel_families(m, a))
    assert fams[K.GEMM]["top"] == GEMM_NAME and fams[K.GEMM]["count"] == 3


def test_a_job_report_counts_them_as_communication(tmp_path):
    paths = [_ep_trace(str(tmp_path / f"r{r}.json.gz"), rank=r, comm_us=400.0 + 300 * r) for r in (0, 1)]
    reports, jobs = job.analyze_job(paths)
    (j,) = jobs
    comm = {row.rank: row.comm_us for row in j.ranks}
    assert comm[0] > 0 and comm[1] > comm[0]
    assert all(r.summary.kernel_classes.get(K.COMMUNICATION, 0) > 0 for r in reports)


def test_the_launch_api_is_no_evidence_of_a_gemm():
    # real trace: nano-vllm's Triton KV-cache store is launched with cuLaunchKernelEx, as cuBLAS's
    # GEMMs are on this stack; it stores the KV cache (a copy), it multiplies nothing
    m, a = _model(os.path.join(ROOT, "examples", "wild", "nanovllm__decode_gpu_100.json.gz"))
    hits = [g for g, e in enumerate(m.gpu) if e.name == "store_kvcache_kernel"]
    assert hits and {m.cpu[m.launcher[g]].name for g in hits} == {"cuLaunchKernelEx"}
    assert {a.gpu_class[g] for g in hits} == {K.COPY}
    gemm_names = {e.name for g, e in enumerate(m.gpu) if a.gpu_class[g] == K.GEMM}
    assert gemm_names and all(K.classify_name(n) == K.GEMM for n in gemm_names)


KINETO_RESNET = os.path.join(
    ROOT,
    "examples",
    "peer",
    "kineto",
    "tb_plugin",
    "samples",
    "resnet50_num_workers_0",
    "worker0.1623143566756.pt.trace.json.gz",
)


@pytest.mark.parametrize(
    "path",
    [KINETO_RESNET, os.path.join(ROOT, "examples", "corpus", "traces", "mobilenet_v3_b1.json.gz")],
    ids=["kineto_resnet50_v100", "mobilenet_v3_b1_h200"],
)
def test_a_convolution_lowered_to_gemms_is_convolution_time(path):
    # real traces: cuDNN runs convolutions as volta_sgemm_* (V100) / cutlass, gemvx, xmma GEMMs
    # (H200) under aten::cudnn_convolution and its backward; the model's Linear stays a GEMM
    m, a = _model(path)
    conv_gemms, linear = 0.0, 0.0
    for g, e in enumerate(m.gpu):
        li = m.launcher[g]
        op = m.enclosing_op(li) if li >= 0 else -1
        opname = m.cpu[op].name if op >= 0 else ""
        if K.classify_name(e.name) != K.GEMM:
            continue
        if "conv" in opname:
            assert a.gpu_class[g] == K.CONV, (e.name, opname)
            conv_gemms += e.dur
        elif opname in ("aten::addmm", "aten::mm", "aten::linear"):
            assert a.gpu_class[g] == K.GEMM, (e.name, opname)
            linear += e.dur
    total = sum(e.dur for e in m.gpu)
    assert conv_gemms > 0.05 * total and linear > 0
