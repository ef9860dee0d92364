"""Attention rules: ``unfused-attention``."""

from __future__ import annotations

import ast
from bisect import bisect_left, bisect_right
from itertools import chain, compress
from typing import Iterable

from ....protocol.types import Diagnostic
from ..context import Context
from ..fixes import Edit, Fix, Source, call_name
from ..impact import ev, gpu_cut, zero
from ..kernels import GEMM
from ..passes import mask_and, negative
from . import rule
from .util import mib, pct, per_inputs, r3, shapes, us

MATMUL_OPS = {"aten::matmul", "aten::bmm", "aten::baddbmm", "aten::einsum"}
SOFTMAX_OPS = {"aten::softmax", "aten::_softmax", "aten::_safe_softmax"}
CHAIN_WINDOW = 8  # ops between the score GEMM and the softmax, and the softmax and the value GEMM
# The fix must give back at least this share of the step (the chain's non-GEMM GPU time).
MIN_STEP_SHARE = 0.01
_ELEM_BYTES = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8}


def _top_ops(m):
    """Per user frame call, its outermost aten ops in time order (what its statements ran)."""
    per: dict[int, list[int]] = {}
    cpu_op, above, frame_of = m.cat_mask("cpu_op"), m.ops_above(), m.frame_of
    for i in m.indices(MATMUL_OPS | SOFTMAX_OPS):
        if not cpu_op[i] or above[i] >= 0 or frame_of[i] < 0:
            continue  # inside another op (SDPA's math path is SDPA's): not the user's chain
        per.setdefault(frame_of[i], []).append(i)
    return per


def _dims(e):
    mats, types = shapes(e)
    return mats, (types[0] if types else None)


def chains(m) -> list[dict]:
    """Score GEMM -> softmax -> value GEMM on one frame call: attention written out. With
    ``record_shapes``, the shapes must agree ([.., Tq, D] x [.., D, Tk] -> softmax over
    [.., Tq, Tk] -> [.., Tq, Tk] x [.., Tk, Dv]) and give the scores' size."""
    out: list[dict] = []
    seen: dict = {}
    for frame, ops in _top_ops(m).items():
        ops.sort()
        for k, i in enumerate(ops):
            if m.cpu[i].name not in MATMUL_OPS:
                continue
            sm = next((j for j in ops[k + 1 : k + 1 + CHAIN_WINDOW] if m.cpu[j].name in SOFTMAX_OPS), None)
            if sm is None:
                continue
            rest = ops[ops.index(sm) + 1 :]
            v = next((j for j in rest[:CHAIN_WINDOW] if m.cpu[j].name in MATMUL_OPS), None)
            if v is None:
                continue
            # every step runs the same shapes: each op name and inputs decoded once (read only)
            (qk, t), (s, _), (pv, _) = (per_inputs(m.cpu[j], seen, _dims) for j in (i, sm, v))
            scores = None
            if qk and s and pv:
                a_, b_ = qk[0], qk[1] if len(qk) > 1 else None
                if b_ is None or len(a_) < 3 or a_[-1] != b_[-2]:
                    continue
                tq, tk = a_[-2], b_[-1]
                if s[0][-2:] != [tq, tk] or pv[0][-2:] != [tq, tk] or len(pv) < 2 or pv[1][-2] != tk:
                    continue
                n = 1
                for d in s[0]:
                    n *= d
                scores = {"shape": s[0], "bytes": n * _ELEM_BYTES.get(t, 2), "tq": tq, "tk": tk, "d": a_[-1]}
            c = {"frame": frame, "qk": i, "softmax": sm, "pv": v, "scores": scores}
            c["ops"] = _between(m, c)
            out.append(c)
    return out


def _chain_gpu(m, a, c, backward_of, subtrees, durs) -> tuple[float, float]:
    """(GEMM µs, other µs) of the GPU work of the chain's ops, forward and backward: every top op
    from the score GEMM to the value GEMM on that frame (scale, mask, dropout between), and the
    backward ops autograd runs for them (``subtrees``: each op's ``m.subtree``; ``durs``: the
    GPU events' durations)."""
    fwd = chain.from_iterable(map(subtrees.__getitem__, c["ops"]))
    back = list(chain.from_iterable(filter(None, map(backward_of.get, fwd))))  # in fwd's order
    gs = set(m.gpu_under_many(c["ops"]))  # the GPU events of fwd, in its order
    gs.update(m.gpu_under_many(back))
    cls = a.gpu_class
    gemm = sum(compress(map(durs.__getitem__, gs), map(GEMM.__eq__, map(cls.__getitem__, gs))))
    return gemm, sum(map(durs.__getitem__, gs)) - gemm


def _between(m, c):
    """The outermost ops the frame call ran from the score GEMM to the value GEMM, in the order
    ``m.subtree(frame)`` meets them: a thread's events sit in start order, and an event's subtree
    is the run of events after it (nest's stack), so the events that start from the one GEMM to
    the other are one run of the thread's, and the subtree's walk (the last child first) meets
    ops that do not nest in each other last index first."""
    cpu_op, above, frame_of, starts = m.cat_mask("cpu_op"), m.ops_above(), m.frame_of, m.cpu_starts()
    f = c["frame"]
    lo, hi = starts[c["qk"]], starts[c["pv"]]
    key = m.thread[f]
    base = m.tindex.base[key]
    end = base + len(m.tindex.starts[key])
    first, last = bisect_left(starts, lo, base, end), bisect_right(starts, hi, base, end)
    ops = compress(range(last - 1, first - 1, -1), cpu_op[first:last][::-1])  # last first
    return [j for j in ops if frame_of[j] == f and above[j] < 0]


def _backward_map(m, fwd) -> dict[int, list[int]]:
    """Forward op (of ``fwd``) -> the outermost backward ops autograd ran for it (``fwd_of``): the
    events pointing into ``fwd`` outside every user frame whose parent points nowhere (or that
    have none), told apart by columns taken at C speed, not tested one by one."""
    out: dict[int, list[int]] = {}
    fwd_of, run = m.fwd_of, m.passes
    mask = bytearray(len(fwd_of))
    for j in fwd:
        mask[j] = 1
    back = run.points_into(fwd_of, bytes(mask))
    if not back:
        return out
    keep = mask_and(
        negative(run.take(m.frame_of, back, 0)),
        negative(run.take(fwd_of, run.take(m.parent, back, -1), -1)),  # the parent's, -1 for none
    )
    for i in compress(back, keep):
        out.setdefault(fwd_of[i], []).append(i)
    return out


@rule(
    "unfused-attention",
    "Attention written out with the scores materialised",
    "warning",
    thresholds={"step-share": MIN_STEP_SHARE},
    saves=(zero, ev("other_us_per_step")),
)
def unfused_attention(ctx: Context) -> Iterable[Diagnostic]:
    """Evidence: on one call of a user function, a batched GEMM whose output is softmaxed and fed
    to a second batched GEMM (with ``record_shapes`` the shapes must chain: [.., Tq, D] x [.., D, Tk],
    softmax over [.., Tq, Tk], [.., Tq, Tk] x [.., Tk, Dv]), not inside another op (SDPA's own math
    path is not the user's); the scores tensor it materialises (B×H×Tq×Tk); and the GPU time of
    the chain forward and backward, split into its GEMMs and the rest (scale, mask, softmax,
    dropout: passes over the scores in memory).

    Threshold: the rest is at least 1% of the step. ``F.scaled_dot_product_attention`` runs the
    chain as one flash/memory-efficient kernel that keeps the scores on chip: about the GEMMs'
    time, so the rest is what the fix gives back (measured on H200, B=8 H=16 T=1024 D=64 bf16,
    forward+backward: 2.59 ms a step written out, 0.4 ms through SDPA; the rest was 2.1 ms).

    Why it costs time: the B×H×T×T scores go to GPU memory and every op after the score GEMM
    (scale, mask, softmax, dropout, their backward) reads and writes all of them again: memory
    traffic that grows with T², where a fused kernel keeps each tile on chip.

    Example:
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(mask == 0, float("-inf"))
        att = att.softmax(dim=-1)
        y = att @ v

    Fix: ``y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)`` (flash or
    memory-efficient kernels on CUDA); in Hugging Face models, ``attn_implementation="sdpa"``.

    Ignore when: the attention needs something SDPA cannot express (scores read back for analysis,
    a custom normalisation) and the step share is small.

    Shown by: examples/recorded/attention_naive.json.gz
    """
    m, a = ctx.model, ctx.a
    found = chains(m)
    if not found:
        return
    subtrees = {op: m.subtree(op) for c in found for op in c["ops"]}
    backward_of = _backward_map(m, chain.from_iterable(subtrees.values()))
    durs = a.gpu_durs
    step_us = ctx.mean_step_us or a.window_us
    groups: dict = {}
    for c in found:
        groups.setdefault(ctx.line_id(c["qk"]), []).append(c)
    for key, cs in groups.items():
        gemm = other = 0.0
        for c in cs:
            g, o = _chain_gpu(m, a, c, backward_of, subtrees, durs)
            gemm += g
            other += o
        n = ctx.n_steps
        share = other / n / step_us if step_us else 0.0
        if share < ctx.threshold("unfused-attention", "step-share"):
            continue
        c = cs[0]
        sc = c["scores"]
        size = (
            f"the {'x'.join(map(str, sc['shape']))} scores ({mib(sc['bytes'])}) written to memory and "
            f"read back by every op between them"
            if sc
            else "the scores materialised between them (no record_shapes: their size is unknown)"
        )
        where = ctx.modules_where([(x["qk"], 1.0) for x in cs])  # a library model's attention module
        yield ctx.diag(
            "unfused-attention",
            "attention written out" + (f" in {where}" if where else "") + f": {m.cpu[c['qk']].name} -> "
            f"{m.cpu[c['softmax']].name} -> {m.cpu[c['pv']].name} ({len(cs) / n:.0f} per step), {size}; "
            f"the chain's GPU time is "
            f"{us((gemm + other) / n)} per step, {us(other / n)} of it outside its GEMMs "
            f"({pct(100 * share)} of the step), which a fused kernel does not spend",
            ctx.location(c["qk"]),
            evidence={
                "chains_per_step": r3(len(cs) / n),
                "gemm_us_per_step": r3(gemm / n),
                "other_us_per_step": r3(other / n),
                "step_share": r3(share),
                "scores_shape": sc["shape"] if sc else None,
                "scores_bytes": sc["bytes"] if sc else None,
                "ops": [m.cpu[j].name for j in c["ops"]],
                "module": where.name if where else None,
            },
            fix="call torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=..., is_causal=...) "
            "(Hugging Face: attn_implementation='sdpa'): one fused kernel, no scores in memory",
            related=[
                ctx.related(c["softmax"], "the softmax over these scores"),
                ctx.related(c["pv"], "the probabilities times V"),
            ],
        )


unfused_attention.replay(gpu_cut("other_us_per_step"))  # the chain's GPU time outside its GEMMs, gone


def _is_transpose_last2(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and call_name(node) == "transpose"
        and len(node.args) == 2
        and {ast.unparse(a) for a in node.args} == {"-2", "-1"}
    )


@unfused_attention.quick_fix
def _sdpa(src: Source, line1: int) -> list[Fix]:
    func = src.func_at(line1)
    if func is None:
        return []
    body = [
        n
        for n in ast.walk(func)
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    ]
    body.sort(key=lambda n: n.lineno)
    for i, first in enumerate(body):
        scores = first.targets[0].id
        mm, scale = first.value, None
        if (
            isinstance(mm, ast.BinOp)
            and isinstance(mm.op, (ast.Div, ast.Mult))
            and isinstance(mm.left, ast.BinOp)
            and isinstance(mm.left.op, ast.MatMult)
        ):
            scale = f"1 / ({src.segment(mm.right)})" if isinstance(mm.op, ast.Div) else src.segment(mm.right)
            mm = mm.left
        if not (
            isinstance(mm, ast.BinOp) and isinstance(mm.op, ast.MatMult) and _is_transpose_last2(mm.right)
        ):
            continue
        q, k = src.segment(mm.left), src.segment(mm.right.func.value)
        mask, soft, rest, chain = None, None, body[i + 1 :], [first]
        for st in rest:
            uses = {n.id for n in ast.walk(st.value) if isinstance(n, ast.Name)}
            if scores not in uses:
                continue
            if st.targets[0].id != scores:
                break
            chain.append(st)
            for c in ast.walk(st.value):
                if isinstance(c, ast.Call) and call_name(c) == "masked_fill" and c.args:
                    m = c.args[0]
                    mask = (
                        src.segment(m.operand)
                        if isinstance(m, ast.UnaryOp) and isinstance(m.op, ast.Invert)
                        else f"~({src.segment(m)})"
                    )
                if isinstance(c, ast.Call) and call_name(c) == "softmax":
                    soft = st
            if soft is not None:
                break
        if soft is None:
            continue
        # the statement that multiplies the probabilities by v, after the softmax
        for st in ast.walk(func):
            if not isinstance(st, ast.stmt) or st.lineno <= soft.end_lineno:
                continue
            hit = next(
                (
                    b
                    for b in ast.walk(st)
                    if isinstance(b, ast.BinOp)
                    and isinstance(b.op, ast.MatMult)
                    and isinstance(b.left, ast.Name)
                    and b.left.id == scores
                ),
                None,
            )
            if hit is None:
                continue
            v = src.segment(hit.right)
            args = [q, k, v] + ([f"attn_mask={mask}"] if mask else []) + ([f"scale={scale}"] if scale else [])
            fn = (
                "F.scaled_dot_product_attention"
                if _has_F(src)
                else "torch.nn.functional.scaled_dot_product_attention"
            )
            edits = [Edit(*src.span(hit), f"{fn}({', '.join(args)})")]
            for dead in chain:  # scores, mask, softmax: one fused call does them all
                edits.append(Edit(dead.lineno - 1, 0, dead.end_lineno, 0, ""))
            return [Fix("Use F.scaled_dot_product_attention (fused attention kernel)", edits, True)]
    return []


def _has_F(src: Source) -> bool:
    return any(
        isinstance(n, ast.ImportFrom)
        and n.module == "torch.nn"
        and any(a.name == "functional" and a.asname == "F" for a in n.names)
        or isinstance(n, ast.Import)
        and any(a.name == "torch.nn.functional" and a.asname == "F" for a in n.names)
        for n in src.tree.body
    )
