"""Kernel classes and GEMM math on real kernel names (tests/data/kernel_names.tsv: every distinct
kernel name of the shipped traces and of the peer projects' traces in ../shared/peer-traces, see
tests/data/README.md), and on the shipped traces themselves."""

import glob
import os
import re

import pytest

from profd.server.engine import kernels as K
from profd.server.engine import loader, model
from profd.server.engine.analyses import analyze

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "tests", "data", "kernel_names.tsv")


def _rows():
    with open(TABLE, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t", 3) for line in f if not line.startswith("#")]


ROWS = _rows()


def test_the_table_covers_every_family_and_every_gemm_math():
    classes = {r[0] for r in ROWS}
    assert classes >= {K.GEMM, K.CONV, K.ELEMENTWISE, K.REDUCTION, K.COPY, K.COMMUNICATION}
    maths = {r[1] for r in ROWS if r[0] == K.GEMM}
    assert maths >= {K.TENSOR_CORE, K.FP32_SIMT, K.GEMV, K.COMPLEX}
    assert len({r[2].split("/")[0] for r in ROWS}) >= 2  # shipped and peer traces
    assert len(ROWS) > 400


def _parse_name_by_character(name: str) -> tuple[str, str]:
    """kernels.parse_name as it was first written, a character at a time: the spec the faster one
    (the brackets found by a regex, the text between them sliced) must meet."""
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    s = s.replace("(anonymous namespace)::", "")
    depth, flat, groups, cur, at = 0, [], [], [], 0
    for ch in s:
        if ch == "<":
            depth += 1
            if depth == 1:
                cur, at = [], len(flat)
                continue
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0:
                groups.append((at, "".join(cur)))
                continue
        elif ch == "(" and depth == 0 and flat:
            break
        if depth:
            cur.append(ch)
        else:
            flat.append(ch)
    head = "".join(flat).rstrip()
    start = head.rfind(" ") + 1
    targs = [g for pos, g in groups if pos >= start]
    return head[start:], targs[-1] if targs else ""


def test_parse_name_reads_names_as_a_walk_over_their_characters_does():
    import random

    rnd = random.Random(32)
    fuzz = ["".join(rnd.choice("<>() ab:,_") for _ in range(rnd.randint(0, 24))) for _ in range(30_000)]
    fuzz += ["void " + f for f in fuzz[:3000]] + ["(anonymous namespace)::" + f for f in fuzz[:3000]]
    names = [r[3] for r in ROWS] + fuzz  # every real kernel name of the table, and strings of brackets
    differ = [n for n in names if K.parse_name.__wrapped__(n) != _parse_name_by_character(n)]
    assert differ == []


def test_families_match_lowercased_names_as_their_case_blind_patterns_do():
    """A case-blind family runs lowercased over an ASCII name's lowercase (faster than IGNORECASE):
    the same answer as the pattern as written on every real kernel name and launching op; a name
    beyond ASCII meets the pattern as written, whose case folding str.lower does not share. A
    case-sensitive family (the GEMM ops) reads the name as it is."""
    names = {K.parse_name(r[3])[0] for r in ROWS} | {r[3] for r in ROWS}
    ops = {"aten::mm", "aten::MM", "aten::addmm", "aten::_scaled_mm", "aten::Conv2d", "aten::softmax",
           "aten::layer_norm", "c10d::allreduce_", "aten::copy_", "aten::Copy_", "aten::add"}  # fmt: skip
    for table, texts in ((K._NAME_FAMILIES, names), (K._OP_CLASSES, ops)):
        for cls, fast, lowered, rx in table.rows:
            assert not re.search(r"\\[A-Z]", rx.pattern), cls  # lowercasing keeps its meaning
            assert lowered == bool(rx.flags & re.IGNORECASE), cls
            for text in texts:
                assert bool(fast.search(text.lower() if lowered else text)) == bool(rx.search(text)), (
                    cls,
                    text,
                )
    assert K._family("\u017fendrecv") == K.COMMUNICATION  # the long s: an s to IGNORECASE
    assert not K._NAME_FAMILIES.rows[0][1].search("\u017fendrecv".lower())  # not to str.lower
    assert K.op_class("aten::mm") == K.GEMM and K.op_class("aten::MM") == K.OTHER  # case-sensitive family


@pytest.mark.parametrize("expected,math,source,name", ROWS, ids=[r[3][:60] for r in ROWS])
def test_real_kernel_names(expected, math, source, name):
    assert K.classify_name(name) == expected, (source, name)
    if expected == K.GEMM:
        assert K.gemm_math(name) == math, (source, name)


def test_names_are_read_from_the_kernel_not_its_template_arguments():
    # fbgemm's embedding kernels carry "gemm" in their namespace, cuBLAS's GEMV its params type,
    # an FFT convolution helper "reduce" nowhere in its name: none of that is the kernel's work
    by = {r[3]: r[0] for r in ROWS}
    fbgemm = [n for n in by if n.startswith("void fbgemm_gpu::")]
    assert fbgemm and all(by[n] != K.GEMM for n in fbgemm)
    assert all(
        by[n] == K.COMMUNICATION for n in by if n.startswith("ncclDevKernel") or n.startswith("ncclKernel")
    )
    fills = [n for n in by if "vectorized_elementwise_kernel<4, at::native::FillFunctor" in n]
    adds = [n for n in by if "vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add" in n]
    assert fills and adds and {by[n] for n in fills} == {K.COPY} and {by[n] for n in adds} == {K.ELEMENTWISE}


def test_block_scaled_fp8_fp4_kernels_with_an_fp32_accumulator_are_tensor_core_gemms():
    (name,) = [r[3] for r in ROWS if r[3].startswith("bmm_MxE4m3_MxE2m1")]
    assert "_Fp32_" in name
    assert K.classify_name(name) == K.GEMM and K.gemm_math(name) == K.TENSOR_CORE
    assert not K.is_fp32_simt_gemm(name)


def test_wrapped_cutlass_kernels_are_judged_by_the_kernel_they_wrap():
    simt = [r[3] for r in ROWS if "cutlass::Kernel2<cutlass_80_simt_sgemm" in r[3]]
    tc = [r[3] for r in ROWS if "cutlass::Kernel2<cutlass_75_tensorop_bf16" in r[3]]
    assert simt and tc
    assert all(K.gemm_math(n) == K.FP32_SIMT for n in simt)
    assert all(K.gemm_math(n) == K.TENSOR_CORE for n in tc)
    assert K.short_name(simt[0]).startswith("cutlass_80_simt_sgemm")
    # the 4095-wide bf16 GEMM's fallback is an align1 kernel; the aligned twin's nvjet is not one
    assert "align1" in K.gemm_fallback(tc[0], 2)
    assert K.gemm_fallback("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 2) is None


def test_the_launching_op_classes_names_that_say_nothing():
    # a real trace: cuDNN's workspace init kernel has no family in its name; it runs for
    # aten::convolution_backward, so it is convolution time
    doc, _, _ = loader.load(os.path.join(ROOT, "examples", "recorded", "conv_bias_bn.json.gz"))
    m = model.build(doc)
    a = analyze(m)
    hits = [g for g, e in enumerate(m.gpu) if "init_device_workspace_kernel" in e.name]
    assert hits and all(K.classify_name(m.gpu[g].name) == K.OTHER for g in hits)
    assert all(a.gpu_class[g] == K.CONV for g in hits)


SHIPPED = sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.gz"), recursive=True))


@pytest.mark.parametrize("path", SHIPPED, ids=[os.path.relpath(p, ROOT) for p in SHIPPED])
def test_classes_explain_the_gpu_time_of_every_shipped_trace(path):
    try:
        doc, _, _ = loader.load(path)
    except loader.TraceError:
        pytest.skip("not a trace this reader reads")
    m = model.build(doc)
    if not m.gpu:
        return
    a = analyze(m)
    total = sum(e.dur for e in m.gpu) or 1.0
    # torch.cuda._sleep's spin kernel (HTA's cuda_event_sync test trace) computes nothing by design:
    # "other" is its true class, so it is left out of the budget
    other = sum(
        e.dur for g, e in enumerate(m.gpu) if a.gpu_class[g] == K.OTHER and "spin_kernel" not in e.name
    )
    assert other <= 0.05 * total, sorted(
        {K.short_name(e.name) for g, e in enumerate(m.gpu) if a.gpu_class[g] == K.OTHER}
    )
    for g, e in enumerate(m.gpu):
        if e.name.startswith("nccl"):
            assert a.gpu_class[g] == K.COMMUNICATION


def test_the_math_is_the_gemm_word_not_the_storage_around_it():
    # partt (A100, fp16 inference, examples/wild): cuBLAS's ampere_fp16_sgemm_fp16_* keep fp16 in
    # and out but multiply in fp32 FFMA on CUDA cores ("sgemm"); ampere_fp16_s16816gemm_fp16_* and
    # cutlass's wmma s161616gemm multiply on tensor cores (the MMA shape in the word). Both used to
    # read as tensor-core GEMMs because "fp16" is in their names.
    doc, _, _ = loader.load(os.path.join(ROOT, "examples", "wild", "partt__fwd_bs2.json.gz"))
    m = model.build(doc)
    a = analyze(m)
    gemms = {e.name for g, e in enumerate(m.gpu) if a.gpu_class[g] == K.GEMM}
    simt = {n for n in gemms if K.is_fp32_simt_gemm(n)}
    assert simt == {n for n in gemms if n.startswith("ampere_fp16_sgemm_fp16_")} and simt
    assert all(K.gemm_math(n) == K.TENSOR_CORE for n in gemms if "s16816gemm" in n or "s161616gemm" in n)
    # they are fp16-storage GEMMs on CUDA cores: the fallback misaligned-dims names
    assert all(K.gemm_fallback(n, 2) == "runs on CUDA cores, not tensor cores" for n in simt)
    # the cuBLAS families by their math word (names as cuBLAS spells them; no trace here has hgemm
    # or h884gemm kernels): HFMA2 on CUDA cores, HMMA tensor cores, fp64
    assert K.gemm_math("maxwell_hgemm_256x128_nn") == K.HALF_SIMT
    assert K.gemm_math("volta_h884gemm_64x64_ldg8_nn") == K.TENSOR_CORE
    assert K.gemm_math("ampere_dgemm_64x64_nn") == K.FP64
