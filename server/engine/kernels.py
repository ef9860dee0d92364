"""Kernel classes from kernel-name families and launch-API patterns together.

Names alone are not enough across stacks: Hopper's cuBLAS GEMMs are ``nvjet_sm90_*`` with no
"gemm" in the name, launched by ``cuLaunchKernelEx``; fp32 GEMMs go through
``cudaLaunchKernelExC`` after ``cudaFuncGetAttributes``; on Ampere-era stacks a GEMM launch was
preceded by ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` (the seed's signal). The name
families win when they match; the launch pattern decides the rest.
"""
from __future__ import annotations

import functools
import re

GEMM = "gemm"
ATTENTION = "attention"
CONV = "conv"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
COPY = "copy"
COMMUNICATION = "communication"
OTHER = "other"

_FAMILIES = [
    (COMMUNICATION, re.compile(r"nccl|ncclDevKernel|all_?reduce|all_?gather|reduce_?scatter|c10d", re.I)),
    (ATTENTION, re.compile(r"flash|fmha|attention|sdpa|mha_", re.I)),
    (CONV, re.compile(r"conv|wgrad|dgrad|implicit_?gemm|cudnn.*(fprop|bprop)", re.I)),
    (GEMM, re.compile(r"gemm|nvjet|xmma|cutlass|cublas|s16816|h16816|s1688|h1688|wgmma|_mm_|matmul|"
                      r"splitKreduce|triton_tem|dot_kernel|gemv", re.I)),
    (REDUCTION, re.compile(r"reduce|softmax|norm|cub::|argmax|argmin|scan|sort|topk|cross_entropy|"
                           r"nll_loss|welford|triton_red|triton_per|sum_kernel|mean_kernel|radix", re.I)),
    (COPY, re.compile(r"copy|memcpy|memset|cat_?array|gather|scatter|index|embedding|transpose|fill",
                      re.I)),
    (ELEMENTWISE, re.compile(r"elementwise|functor|triton_poi|pointwise|unary|binary|where|"
                             r"gelu|relu|silu|dropout|lerp|addcdiv|adam|sgd|fused_", re.I)),
]

# Launch APIs that, on the stacks measured, launch library GEMMs rather than ATen elementwise code.
GEMM_LAUNCH_APIS = frozenset({"cuLaunchKernelEx", "cudaLaunchKernelExC"})
OCCUPANCY_QUERY = "cudaOccupancyMaxActiveBlocksPerMultiprocessor"


_class_cache: dict[str, str] = {}


def classify_name(name: str, cat: str = "kernel") -> str:
    if cat == "gpu_memcpy" or cat == "gpu_memset":
        return COPY
    cls = _class_cache.get(name)
    if cls is None:
        cls = _classify(name)
        if len(_class_cache) >= 20_000:  # a long-running daemon sees new kernel names forever
            _class_cache.clear()
        _class_cache[name] = cls
    return cls


def _classify(name: str) -> str:
    for cls, rx in _FAMILIES:
        if rx.search(name):
            return cls
    return OTHER


def classify(name: str, cat: str, launch_api: str | None, occupancy_before: bool) -> str:
    """Class of one GPU event, using the launch pattern when the name says nothing."""
    cls = classify_name(name, cat)
    if cls == OTHER and (launch_api in GEMM_LAUNCH_APIS or occupancy_before):
        return GEMM
    return cls


_TC_MARKERS = re.compile(r"tensorop|tf32|bf16|f16|h16|s16816|s1688|hmma|wgmma|gmma|nvjet|_e4m3|_e5m2|i8", re.I)
_FP32_MARKERS = re.compile(r"sgemm|f32f32|ffma|fp32|_simt_|float32", re.I)


@functools.lru_cache(maxsize=8192)  # a trace repeats a few hundred kernel names endlessly
def is_fp32_simt_gemm(name: str) -> bool:
    """An fp32 GEMM kernel that runs on CUDA cores (FFMA/SIMT), not tensor cores."""
    if not _FP32_MARKERS.search(name):
        return False
    # ``sm80_xmma_gemm_f32f32_..._ffma_`` is FFMA; ``..._tf32f32_...`` or ``tensorop_s1688`` is TF32 on TCs
    if re.search(r"tf32|tensorop|s1688|hmma", name, re.I):
        return False
    return True


def short_name(name: str, limit: int = 80) -> str:
    """A readable kernel name: templates cut, ``void`` dropped."""
    n = name[5:] if name.startswith("void ") else name
    depth, out = 0, []
    for ch in n:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<…>")
            continue
        if ch == ">":
            depth = max(0, depth - 1)
            continue
        if depth == 0:
            out.append(ch)
    s = "".join(out)
    s = re.sub(r"\(.*\)$", "", s) or n
    return s if len(s) <= limit else s[: limit - 1] + "…"
