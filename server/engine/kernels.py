"""Kernel classes, from what a kernel computes: its name's family and the op that launched it.

A kernel's demangled name is ``[void|<return type>] qualified::name<template args>(params)``. The
family is read from the qualified name itself, not from anything in the template arguments or the
parameter list: those name types and helpers (``fbgemm_gpu::FixedDivisor``, ``cublasGemvParams``,
``ReduceAdd``) that say nothing about the work, and substring matches over the whole name put an
fbgemm embedding lookup among the GEMMs and an FFT among the reductions. Two kinds of names carry
their work in the template arguments and are read there:

- generic launchers whose first template argument is the real kernel (``cutlass::Kernel2<
  cutlass_80_simt_sgemm_...>``, ``cutlass::device_kernel<...>``);
- ATen's elementwise launchers (``vectorized_elementwise_kernel<4, FillFunctor<float>, ...>``),
  whose functor says whether they copy/fill memory or compute.

Names that match no family (``cudnn::winograd::...Tiles``, ``fft2d_r2c_32x32``, old ``triton__0d1d``)
take the class of the op that launched them (``aten::cudnn_convolution`` -> conv). The op also wins
over a GEMM name when it is a convolution or attention: cuDNN lowers convolutions to GEMMs
(``volta_sgemm_128x64_nn``, ``nvjet_sm90_*``, ``gemvx`` launched by ``aten::cudnn_convolution`` or
``convolution_backward`` are convolution time, 20-34% of a CNN's GPU time). The launch API says
nothing about the math: ``cudaLaunchKernelExC``/``cuLaunchKernelEx`` launch cuBLAS GEMMs, Triton
kernels (nano-vllm's ``store_kvcache_kernel``) and expert-parallel all-to-all kernels alike, so a
kernel that neither its name nor its op explains stays ``other``.

Communication is every library that moves data between GPUs: NCCL/RCCL (``ncclDevKernel_*``),
MSCCL/MSCCL++, NVSHMEM (``nvshmemi_*``), expert-parallel dispatch/combine (DeepEP's
``deep_ep::intranode::dispatch``, ``deep_ep::internode_ll::combine``, ROCm mori's
``EpDispatchIntraNodeKernel``, TensorRT-LLM's ``moeA2ADispatchKernel``), inference engines' custom
all-reduce (vLLM/SGLang ``cross_device_reduce_1stage``, TensorRT-LLM ``oneShotAllReduceKernel``,
quick-reduce), PyTorch symmetric memory (``c10d::symmetric_memory::*``) and Transformer Engine's
userbuffers; they count wherever collectives count (busy share, exposed communication, the job).

ROCm's families sit beside CUDA's: RCCL keeps NCCL's kernel names, Tensile's GEMMs are
``Cijk_Ailk_Bljk_...`` (rocBLAS/hipBLASLt, launched by ``hipExtModuleLaunchKernel`` while ATen's own
kernels go through ``hipLaunchKernel``), MIOpen's convolutions ``igemm_{fwd,bwd,wrw}_*``, its
reductions ``hipcub::``/``rocprim::``. The runtime and driver calls, CUDA and HIP alike (Kineto
files both under ``cuda_runtime``), have their roles in ``API_ROLES`` (launch, copy, memset, sync).

``gemm_math`` says how a GEMM kernel multiplies (tensor cores in TF32/16-bit/8-bit/4-bit, fp32 FFMA
on CUDA cores, matrix-vector), from the operand types its name declares: the accumulator type
(``..._Fp32`` in ``bmm_MxE4m3_MxE2m1..._Fp32``) is not the math.
"""

from __future__ import annotations

import functools
import re
from typing import Optional

GEMM = "gemm"
ATTENTION = "attention"
CONV = "conv"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
COPY = "copy"
COMMUNICATION = "communication"
OTHER = "other"

CLASSES = (GEMM, ATTENTION, CONV, ELEMENTWISE, REDUCTION, COPY, COMMUNICATION, OTHER)


class _Pattern:
    """A pattern of this module's, compiled on its first search. A typical trace's names are
    ASCII, so the case-blind families as written (kept for other text: ``_Families``) are never
    compiled for it; compiling every family twice at import took ~15 ms of a small trace's 150 ms
    analysis."""

    __slots__ = ("pattern", "flags", "_rx")

    def __init__(self, pattern: str, flags: int = 0):
        self.pattern, self.flags = pattern, flags
        self._rx: Optional[re.Pattern] = None

    def search(self, text: str):
        rx = self._rx
        if rx is None:
            rx = self._rx = re.compile(self.pattern, self.flags)
        return rx.search(text)


# Name families, first match wins, matched against the qualified kernel name (no template args).
# The order resolves overlaps: a collective's "AllReduce" is communication, not a reduction; cuDNN's
# "implicit_gemm" is a convolution, not a GEMM; cuBLAS's "splitKreduce" finishes a GEMM.
_FAMILIES = [
    (
        COMMUNICATION,
        _Pattern(
            r"^nccl|^rccl|nccl(Dev)?Kernel|c10d|all_?reduce|all_?gather|reduce_?scatter|"
            r"all_?to_?all|sendrecv|^msccl|mscclpp|^nvshmem|deep_?ep::|(^|::)Ep(Dispatch|Combine)|"
            r"moe_?a2a|(^|::|_)a2a_|cross_device_reduce|quick_?reduce|userbuffers|symmetric_memory",
            re.I,
        ),
    ),
    (ATTENTION, _Pattern(r"flash|fmha|attention|attn|sdpa|(^|_|::)mha_", re.I)),
    (
        CONV,
        _Pattern(
            r"conv(?!ert)|wgrad|dgrad|fprop|implicit_?gemm|winograd|im2col|col2im|scudnn|cudnn::cnn::|"
            r"igemm_(fwd|bwd|wrw)|miopen.*(fwd|bwd|wrw)",
            re.I,
        ),
    ),
    # "(?<!fb)": fbgemm_gpu is Meta's embedding/sparse library, not a GEMM
    (
        GEMM,
        _Pattern(
            r"(?<!fb)gemm|gemv|nvjet|cublas|^epilogue::|^Cijk_|tensile|rocblas|hipblaslt|splitKreduce|"
            r"wgmma|triton_tem|"
            r"(^|::)bmm_|matmul|dot_kernel|(^|_)mm_|cutlass_\d+_(tensorop|simt|wmma)",
            re.I,
        ),
    ),
    (
        REDUCTION,
        _Pattern(
            r"reduce|softmax|norm|bn_fw|bn_bw|GammaBeta|welford|cub::|rocprim::|radix_?sort|argm(ax|in)|"
            r"topk|sort|scan|cross_entropy|nll|ClassNLLCriterion|triton_red|triton_per|"
            r"sum_kernel|mean_kernel|logsumexp|cumsum|histogram|(max|avg|average)_?pool|moments",
            re.I,
        ),
    ),
    (
        COPY,
        _Pattern(
            r"copy|memcpy|memset|cat_?array|gather|scatter|index|embedding|transpose|fill|"
            r"nchwToNhwc|nhwcToNchw|permute|chunk_cat|split_with_sizes|to_dense|recat|"
            # ATen's embedding(-bag) backward, as fbgemm's: gradient rows gathered per index segment
            r"compute_grad_weight|partial_segment|partials_per_segment|"
            # KV-cache stores (nano-vllm's Triton store_kvcache_kernel, vLLM's reshape_and_cache)
            r"store_?kv|kv_?cache|reshape_and_cache|(^|::|_)roll_",
            re.I,
        ),
    ),
    (
        ELEMENTWISE,
        _Pattern(
            r"elementwise|triton_poi|pointwise|unary|binary|where|gelu|relu|silu|dropout|"
            r"lerp|addcdiv|adam|sgd|fused_|multi_tensor_apply|foreach|scal_kernel|triu_tril|"
            r"philox|bernoulli|distribution|"
            # RNN cells' fused gate math: ATen's lstm/gru_cell kernels, cuDNN's elemWiseRNNcell
            r"(lstm|gru)_cell_(forward|backward)|elemWise|grid_sampler|upsample|rescale|(tril|triu)_indices",
            re.I,
        ),
    ),
]

# Generic launchers whose first template argument names the real kernel.
_WRAPPERS = _Pattern(r"^cutlass\w*::(Kernel2?|device_kernel)$|kernel_wrapper", re.I)
# ATen's elementwise launchers: the functor in the template args says copy/fill or compute.
_ATEN_ELEMENTWISE = _Pattern(r"(^|::)(vectorized_|unrolled_)?elementwise_kernel(_with_index)?$")
_COPY_FUNCTOR = _Pattern(r"copy|FillFunctor|fill_kernel", re.I)

# The class of the op that launched a kernel, for names that match no family (aten op names).
_OP_FAMILIES = [
    (
        COMMUNICATION,
        _Pattern(r"^(c10d|nccl|gloo|record_param_comms)|all_?reduce|all_?gather|reduce_?scatter", re.I),
    ),
    (ATTENTION, _Pattern(r"attention|flash|efficient_attention|cudnn_attention", re.I)),
    (CONV, _Pattern(r"conv", re.I)),
    (
        GEMM,
        _Pattern(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|addmv|mv|dot|_addmm_activation)$"),
    ),
    (
        REDUCTION,
        _Pattern(
            r"norm|softmax|^aten::(sum|mean|max|min|amax|amin|argmax|argmin|sort|topk|cumsum|"
            r"std|var|logsumexp|nll_loss|cross_entropy)",
            re.I,
        ),
    ),
    (
        COPY,
        _Pattern(
            r"^aten::(copy_|_to_copy|to|clone|contiguous|cat|index|index_select|gather|scatter|"
            r"embedding|fill_|zero_|zeros|ones|full)",
            re.I,
        ),
    ),
]

LAUNCH, COPY_API, MEMSET_API, SYNC = "launch", "copy", "memset", "sync"
API_ROLES = {
    **dict.fromkeys(
        (
            "cudaLaunchKernel",
            "cudaLaunchKernelExC",
            "cudaLaunchCooperativeKernel",
            "cuLaunchKernel",
            "cuLaunchKernelEx",
            "cuLaunchCooperativeKernel",
            "cudaGraphLaunch",
            "cuGraphLaunch",
            "hipLaunchKernel",
            "hipExtLaunchKernel",
            "hipModuleLaunchKernel",
            "hipExtModuleLaunchKernel",
            "hipLaunchCooperativeKernel",
            "hipGraphLaunch",
        ),
        LAUNCH,
    ),
    **dict.fromkeys(
        (
            "cudaMemcpy",
            "cudaMemcpyAsync",
            "cudaMemcpy2D",
            "cudaMemcpy2DAsync",
            "cudaMemcpyPeer",
            "cudaMemcpyPeerAsync",
            "cudaMemcpyToSymbol",
            "cudaMemcpyFromSymbol",
            "cuMemcpy",
            "cuMemcpyAsync",
            "cuMemcpyHtoD",
            "cuMemcpyDtoH",
            "cuMemcpyHtoDAsync",
            "cuMemcpyDtoHAsync",
            "hipMemcpy",
            "hipMemcpyAsync",
            "hipMemcpyWithStream",
            "hipMemcpy2D",
            "hipMemcpy2DAsync",
            "hipMemcpyPeer",
            "hipMemcpyPeerAsync",
            "hipMemcpyHtoD",
            "hipMemcpyDtoH",
            "hipMemcpyDtoD",
            "hipMemcpyHtoDAsync",
            "hipMemcpyDtoHAsync",
            "hipMemcpyDtoDAsync",
            "hipMemcpyToSymbol",
            "hipMemcpyFromSymbol",
        ),
        COPY_API,
    ),
    **dict.fromkeys(
        (
            "cudaMemset",
            "cudaMemsetAsync",
            "cuMemsetD8",
            "cuMemsetD32",
            "cuMemsetD8Async",
            "cuMemsetD32Async",
            "hipMemset",
            "hipMemsetAsync",
            "hipMemsetD8",
            "hipMemsetD32",
            "hipMemsetD8Async",
            "hipMemsetD32Async",
        ),
        MEMSET_API,
    ),
    **dict.fromkeys(
        (
            "cudaDeviceSynchronize",
            "cudaStreamSynchronize",
            "cudaEventSynchronize",
            "cuCtxSynchronize",
            "cuStreamSynchronize",
            "cuEventSynchronize",
            "hipDeviceSynchronize",
            "hipStreamSynchronize",
            "hipEventSynchronize",
        ),
        SYNC,
    ),
}


def apis(role: str) -> frozenset:
    """The runtime/driver call names of one role, CUDA and HIP."""
    return frozenset(n for n, r in API_ROLES.items() if r == role)


# Copies that return only once the copy is done: on ROCm ``.item()`` is one hipMemcpyWithStream,
# no separate sync call (on CUDA a cudaMemcpyAsync and a cudaStreamSynchronize).
BLOCKING_COPIES = frozenset(
    {
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cuMemcpyDtoH",
        "hipMemcpy",
        "hipMemcpyWithStream",
        "hipMemcpy2D",
        "hipMemcpyDtoH",
    }
)
# Calls that wait for the whole device (the profiler's closing flush is one).
DEVICE_SYNCS = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize"})


# The brackets parse_name reads; the text between them is sliced, not walked a character at a time
# (measured on the 1,278 kernel names of the shipped and peer traces: 11.1 -> 3.5 µs a name, 144 -> 38 µs
# the longest, 5 KB; a trace of Triton or CUTLASS kernels has thousands of distinct names).
_BRACKETS = re.compile(r"[<>(]")


@functools.lru_cache(maxsize=8192)  # a trace repeats a few hundred kernel names endlessly
def parse_name(name: str) -> tuple[str, str]:
    """(qualified kernel name, the template arguments that follow it), from a demangled name:
    ``void at::native::(anonymous namespace)::foo<float, 4>(float*)`` -> ``("at::native::foo", "float, 4")``;
    ``std::enable_if<!(false), void>::type internal::gemvx::kernel<int, ...>(...)`` ->
    ``("internal::gemvx::kernel", "int, ...")`` (a return type's template is not the kernel's).

    The text outside every template's angle brackets is the name, up to the first ``(`` outside
    them that follows some of it (the parameter list); its last word is the kernel's; the arguments
    are those of the last top-level template at or after that word. An unclosed ``<`` hides the rest."""
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    s = s.replace("(anonymous namespace)::", "")
    pieces: list[str] = []  # the text outside the templates, in order
    size = 0  # its length so far, less the run since ``last``
    groups: list[tuple[int, str]] = []  # (where in that text, a top-level template's arguments)
    depth, last, at, inner = 0, 0, 0, 0
    for m in _BRACKETS.finditer(s):
        i = m.start()
        ch = s[i]
        if ch == "<":
            if depth == 0:
                pieces.append(s[last:i])
                size += i - last
                at, inner = size, i + 1
            depth += 1
        elif ch == ">":
            if depth:  # a '>' outside every template is text
                depth -= 1
                if depth == 0:
                    groups.append((at, s[inner:i]))
                    last = i + 1
        elif depth == 0 and size + i - last > 0:  # '(' after some text: the parameter list
            pieces.append(s[last:i])
            break
    else:
        if depth == 0:
            pieces.append(s[last:])
    head = "".join(pieces).rstrip()
    start = head.rfind(" ") + 1
    targs = [g for pos, g in groups if pos >= start]
    return head[start:], targs[-1] if targs else ""


class _Families:
    """Families of names in order, the first whose pattern matches a text wins. A case-blind
    pattern runs lowercased over the text's lowercase where the text is ASCII: an alternation under
    IGNORECASE ran ~3x slower (26 of the ~30 µs a new kernel name's class cost). Lowercasing a
    pattern keeps its meaning where its escapes are all lowercase (``\\d``, ``\\w``; no ``\\D``
    or ``\\W``), and the two agree on ASCII text; str.lower is not re's case folding beyond ASCII
    (the long s, the Kelvin sign), so other text meets the patterns as written (tests/test_kernels.py
    checks both)."""

    def __init__(self, families: list[tuple[str, _Pattern]]):
        # (class, the pattern ASCII text meets, whether that one reads the lowercase, the pattern)
        self.rows = [
            (cls, _Pattern(rx.pattern.lower()), True, rx) if rx.flags & re.I else (cls, rx, False, rx)
            for cls, rx in families
        ]

    def first(self, text: str) -> str:
        if text.isascii():
            low = text.lower()
            for cls, fast, lowered, _ in self.rows:
                if fast.search(low if lowered else text):
                    return cls
            return OTHER
        for cls, _, _, rx in self.rows:
            if rx.search(text):
                return cls
        return OTHER


_NAME_FAMILIES = _Families(_FAMILIES)
_OP_CLASSES = _Families(_OP_FAMILIES)


def _family(text: str) -> str:
    return _NAME_FAMILIES.first(text)


_class_cache: dict[str, str] = {}


def classify_name(name: str, cat: str = "kernel") -> str:
    """The class a kernel's name alone gives (OTHER when it says nothing)."""
    if cat == "gpu_memcpy" or cat == "gpu_memset":
        return COPY
    cls = _class_cache.get(name)
    if cls is None:
        cls = _classify(name)
        if len(_class_cache) >= 20_000:  # a long-running daemon sees new kernel names forever
            _class_cache.clear()
        _class_cache[name] = cls
    return cls


# Inductor's generated kernels say what they are in their prefix: pointwise, reduction, persistent
# reduction, template (a GEMM or convolution); the fused op names after it are not the class.
_TRITON = {"poi": ELEMENTWISE, "red": REDUCTION, "per": REDUCTION, "tem": GEMM}
# max-autotune's benchmark candidates of the mm/bmm templates are named after the template alone
# (``triton_mm``: 1,324 of them in one autotuning window, examples/corpus/traces/wild/compile_autotune)
_TRITON_TEMPLATES = {"triton_mm": GEMM, "triton_bmm": GEMM}


def _classify(name: str) -> str:
    base, targs = parse_name(name)
    if base.startswith("triton_") and base[7:10] in _TRITON:
        return _TRITON[base[7:10]]
    if base in _TRITON_TEMPLATES:
        return _TRITON_TEMPLATES[base]
    if _WRAPPERS.search(base) and targs:
        inner = _family(targs.split(",")[0])
        if inner != OTHER:
            return inner
    if _ATEN_ELEMENTWISE.search(base):
        return COPY if _COPY_FUNCTOR.search(targs) else ELEMENTWISE
    return _family(base)


@functools.lru_cache(maxsize=8192)  # a trace's kernels come from a few hundred ops
def op_class(op: str | None) -> str:
    """The class of the aten op that launched a kernel (OTHER when it says nothing)."""
    return _OP_CLASSES.first(op) if op else OTHER


# An op whose kernels are its own work whatever the library lowers it to: cuDNN runs a convolution
# as GEMMs, FFTs or a GEMV, an attention op its GEMMs.
_OP_OVER_GEMM = frozenset({CONV, ATTENTION})


def classify(name: str, cat: str, op: str | None = None) -> str:
    """Class of one GPU event: its name's family, else its launching op's; a convolution's or
    attention's GEMM-named kernels are the op's. The launch API is never evidence (module doc)."""
    cls = classify_name(name, cat)
    if cls == OTHER or cls == GEMM:
        oc = op_class(op)
        if oc != OTHER and (cls == OTHER or oc in _OP_OVER_GEMM):
            return oc
    return cls


# ---- how a GEMM multiplies -----------------------------------------------------------------------

TENSOR_CORE = "tensor-core"
FP32_SIMT = "fp32-simt"
HALF_SIMT = "fp16-simt"  # fp16 HFMA2 on CUDA cores (cuBLAS's hgemm): no tensor cores, and not fp32
FP64 = "fp64"
COMPLEX = "complex"
GEMV = "gemv"
UNKNOWN = "unknown"

# Operand types and instruction families that run on tensor cores (NVIDIA mma/wgmma, AMD MFMA):
# TF32, fp16/bf16, fp8 (e4m3/e5m2), fp4/fp6 (e2m1, e3m2, e2m3), int8, block-scaled MX/NV formats.
_TC = re.compile(
    r"tf32|bf16|bfloat16|(^|[^a-z])f16|fp16|half|hmma|imma|wgmma|gmma|tensorop|nvjet|"
    r"[shi]\d{3,5}gemm|e4m3|e5m2|e2m1|e3m2|e2m3|ue8m0|fp8|fp4|mxf\d|nvf4|(^|_)i8|int8|"
    r"_MI\d+x\d+x\d+",
    re.I,
)
# fp32 multiplies on CUDA cores: BLAS's s-prefix GEMMs, FFMA kernels, CUTLASS SIMT kernels.
_SIMT = re.compile(r"sgemm|ffma|simt", re.I)
# cuBLAS/CUTLASS name the math in the word that ends in "gemm" and the storage around it:
# ampere_fp16_s16816gemm_fp16_* is fp16 in and out, fp32 accumulation on 16x8x16 tensor-core MMAs;
# ampere_fp16_sgemm_fp16_* fp16 in and out, fp32 FFMA on CUDA cores. The word's letters are the
# math's type (s fp32, d fp64, c/z/gc complex, h fp16, i int8), its digits the MMA shape (tensor
# cores: 884, 1688, 16816, 161616, 8816), none a SIMT kernel (s: FFMA, h: HFMA2). A bare "gemm"
# word (xmma, CUTLASS 3, Triton) says nothing of the math: the operand types decide.
_MATH_WORD = re.compile(r"(?<![A-Za-z0-9])(gc|[sdczhi])(\d{3,6})?gemm(?![a-z])")
_MATH_OF = {"s": FP32_SIMT, "h": HALF_SIMT, "d": FP64, "c": COMPLEX, "z": COMPLEX, "gc": COMPLEX}


@functools.lru_cache(maxsize=8192)
def gemm_math(name: str) -> str:
    """How a GEMM kernel multiplies, from the math its name declares (cuBLAS/CUTLASS's
    ``<type><mma shape>gemm`` word), else from its operand types and instructions:
    ``tensor-core``, ``fp32-simt`` (fp32 FFMA on CUDA cores, whatever the storage: fp16 in and out
    for ``ampere_fp16_sgemm_fp16_*``), ``fp16-simt`` (HFMA2), ``fp64``, ``complex``, ``gemv``
    (matrix-vector or rank-1: bandwidth-bound, tensor cores would not help) or ``unknown``."""
    base, targs = parse_name(name)
    text = base + " " + targs.split(",")[0] if _WRAPPERS.search(base) else base
    if re.search(r"gemv|gemmk1|gemmSN", base, re.I):
        return GEMV
    word = _MATH_WORD.search(text)
    if word:  # the math the name declares, whatever the storage types beside it
        return TENSOR_CORE if word.group(2) else _MATH_OF.get(word.group(1), UNKNOWN)
    if _TC.search(text):
        return TENSOR_CORE
    if re.search(r"(^|_)(z|gc|c)gemm|zgemm|cgemm", text, re.I):
        return COMPLEX
    if re.search(r"(^|_)dgemm|f64|fp64|double", text, re.I):
        return FP64
    if _SIMT.search(text):
        return FP32_SIMT
    return UNKNOWN


def is_fp32_simt_gemm(name: str) -> bool:
    """An fp32 GEMM kernel that runs on CUDA cores (FFMA/SIMT), not tensor cores."""
    return gemm_math(name) == FP32_SIMT


_ALIGN = re.compile(r"align(\d+)", re.I)


def gemm_fallback(name: str, elem_bytes: int) -> str | None:
    """Why a GEMM kernel is a fallback for unaligned operands, or None when nothing says so.

    Evidence from the name: CUDA-core math (``fp32-simt``) where the inputs could use tensor cores,
    or a declared operand alignment (CUTLASS/xmma ``alignN``, in elements) under 16 bytes: cuBLAS
    picks those when a leading dimension is not a multiple of 16 bytes (8 fp16/bf16 elements), as
    ``cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1`` for a 4095-wide bf16 matrix on
    the H200, where the aligned twin runs ``nvjet_sm90_*``, 5.6x faster."""
    if gemm_math(name) in (FP32_SIMT, HALF_SIMT):
        return "runs on CUDA cores, not tensor cores"
    base, targs = parse_name(name)
    text = base + " " + targs.split(",")[0] if _WRAPPERS.search(base) else base
    al = [int(x) for x in _ALIGN.findall(text)]
    if al and min(al) * elem_bytes < 16:
        return f"an align{min(al)} kernel ({min(al) * elem_bytes}-byte operands)"
    return None


_IDENT = re.compile(r"[A-Za-z_]\w*")
# Words that say nothing about what a kernel computes: C++ scalar types, namespaces and ATen's
# generic launch wrappers, whose template arguments (the functor, the op) carry its identity.
_GENERIC = frozenset(
    """void bool char signed unsigned short int long float double const type std array
    lambda operator c10 at native detail cuda BFloat16 Half Float8_e4m3fn Float8_e5m2 complex
    gpu_kernel_impl gpu_kernel_impl_nocast gpu_index_kernel func_wrapper_t ReduceOp OpaqueType
    TensorListMetadata FusedOptimizerTensorListMetadata BUnaryFunctor AUnaryFunctor binary_internal
    TensorIteratorBase TensorIterator Scalar ArrayRef AccumulateType enable_if true false ul u""".split()
)


def _collapse(s: str) -> str:
    out, depth = [], 0
    for ch in s:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<…>")
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def short_name(name: str, limit: int = 80) -> str:
    """A readable kernel name that keeps what tells kernels apart: ``void``, anonymous namespaces
    and the argument list dropped; a generic launcher shows the kernel it wraps
    (``cutlass_80_simt_sgemm_256x128_8x4_nn_align1``, not ``cutlass::Kernel2<…>``); other
    templates show the first argument that names what the kernel computes (ATen's launchers carry
    the op there: ``vectorized_elementwise_kernel<GeluCUDAKernelImpl…>``, not four identical
    ``at::native::…``), else short template arguments as they are. An over-long name keeps its
    head and its tail."""
    base, targs = parse_name(name)
    if _WRAPPERS.search(base) and targs:
        s = targs.split(",")[0].strip()
    elif targs:
        tokens = [t for t in _IDENT.findall(targs) if t not in _GENERIC and not t.isdigit()]
        what = next(
            (t for t in tokens if t[0].islower() or "Functor" in t or "Epilogue" in t or "functor" in t),
            tokens[0] if tokens else None,
        )
        flat = _collapse(targs).replace(" ", "")
        s = f"{base}<{what}…>" if what else (f"{base}<{flat}>" if len(flat) <= 32 else f"{base}<…>")
    else:
        s = base or name
    if len(s) <= limit:
        return s
    head = (limit - 1) * 2 // 3
    return s[:head] + "…" + s[-(limit - 1 - head) :]
