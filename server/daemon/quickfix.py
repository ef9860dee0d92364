"""Quick fixes for findings whose fix is mechanical, computed on the source text (pure: text in,
edits out; the LSP layer turns them into code actions).

Each fix is found on the AST (never by regex on the text), applied to a copy and offered only if
the result still compiles. Positions are 0-based lines and character offsets in the line.

- ``zero-grad-not-none``: ``zero_grad(set_to_none=True)``.
- ``optimizer-foreach-off``: ``foreach=True`` or ``fused=True`` on the optimizer's constructor.
- ``pageable-memcpy``: ``non_blocking=True`` on the copy, and pinned memory at the source
  (``pin_memory=True`` on the file's DataLoader, else ``.pin_memory()`` before the copy).
- ``fp32-matmul``: ``torch.backends.cuda.matmul.allow_tf32 = True`` after the imports (or the
  existing assignment set to True), or the statement under ``torch.autocast`` (bf16).
- ``conv-bias-before-bn``: ``bias=False`` on the convolutions built beside a batch norm.
- ``unfused-attention``: ``F.scaled_dot_product_attention(q, k, v, attn_mask=..., scale=...)``
  in place of scores -> mask -> softmax -> ``@ v``, with the same mask and scale.
- every finding: ``# profd: ignore[code]`` at the end of its line (the inline suppression the
  engine honours, ``engine/suppress.py``; an existing ``# profd: ignore[a]`` becomes
  ``# profd: ignore[a, code]``).
"""
from __future__ import annotations

import ast
import re
from typing import Callable, NamedTuple, Optional

from ..engine.suppress import ALL, codes_on

OPTIMIZERS = {"Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "ASGD",
              "Adadelta"}
FUSED_OK = {"Adam", "AdamW", "SGD", "Adagrad"}  # torch.optim classes with a fused implementation
CONVS = {"Conv1d", "Conv2d", "Conv3d", "LazyConv1d", "LazyConv2d", "LazyConv3d"}
NORMS = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d",
         "LazyBatchNorm2d", "LazyBatchNorm3d"}
SUPPRESS = re.compile(r"#\s*profd:\s*ignore\[([^\]]*)\]", re.IGNORECASE)  # where to add a code


class Edit(NamedTuple):
    line: int
    col: int
    end_line: int
    end_col: int
    text: str


class Fix(NamedTuple):
    title: str
    edits: list[Edit]
    preferred: bool = False


def apply(text: str, edits: list[Edit]) -> str:
    """``text`` with ``edits`` applied (non-overlapping; any order)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))

    def off(line: int, col: int) -> int:
        return starts[min(line, len(lines))] + col

    out = text
    for e in sorted(edits, key=lambda e: (e.line, e.col), reverse=True):
        out = out[:off(e.line, e.col)] + e.text + out[off(e.end_line, e.end_col):]
    return out


def _compiles(text: str) -> bool:
    try:
        compile(text, "<profd-fix>", "exec")
        return True
    except (SyntaxError, ValueError):
        return False


class _Src:
    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines()
        self.tree = ast.parse(text)

    def col(self, line1: int, byte_col: int) -> int:
        """AST byte offset -> character offset in the line."""
        s = self.lines[line1 - 1] if 0 < line1 <= len(self.lines) else ""
        return len(s.encode()[:byte_col].decode(errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int, int, int]:
        return (node.lineno - 1, self.col(node.lineno, node.col_offset),
                node.end_lineno - 1, self.col(node.end_lineno, node.end_col_offset))

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""

    def calls(self, pred: Callable[[ast.Call], bool], within: Optional[ast.AST] = None):
        return [n for n in ast.walk(within or self.tree) if isinstance(n, ast.Call) and pred(n)]

    def stmt_at(self, line1: int) -> Optional[ast.stmt]:
        """The innermost simple statement starting on ``line1``."""
        best = None
        for n in ast.walk(self.tree):
            if isinstance(n, ast.stmt) and n.lineno == line1 and not hasattr(n, "body"):
                best = n
        return best

    def func_at(self, line1: int):
        best = None
        for n in ast.walk(self.tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    n.lineno <= line1 <= (n.end_lineno or n.lineno):
                if best is None or n.lineno >= best.lineno:
                    best = n
        return best


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _set_kw(src: _Src, call: ast.Call, key: str, value: str, drop: tuple[str, ...] = ()) -> list[Edit]:
    """Edits setting keyword ``key=value`` on ``call`` (replacing it if present), removing ``drop``."""
    edits = []
    for kw in call.keywords:
        if kw.arg == key:
            if src.segment(kw.value) == value:
                return []
            l, c, el, ec = src.span(kw.value)
            edits.append(Edit(l, c, el, ec, value))
        elif kw.arg in drop:
            edits += _drop_kw(src, call, kw)
    if any(kw.arg == key for kw in call.keywords):
        return edits
    # append before the closing parenthesis
    el, ec = call.end_lineno - 1, src.col(call.end_lineno, call.end_col_offset) - 1
    sep = ", " if (call.args or [k for k in call.keywords if k.arg not in drop]) else ""
    edits.append(Edit(el, ec, el, ec, f"{sep}{key}={value}"))
    return edits


def _drop_kw(src: _Src, call: ast.Call, kw: ast.keyword) -> list[Edit]:
    items = sorted([*call.args, *[k.value for k in call.keywords]], key=lambda n: (n.lineno, n.col_offset))
    i = items.index(kw.value)
    l, c = kw.lineno - 1, src.col(kw.lineno, kw.col_offset)
    el, ec = src.span(kw.value)[2:]
    if i > 0:  # ", key=value" from the end of the previous item
        prev = items[i - 1]
        l, c = prev.end_lineno - 1, src.col(prev.end_lineno, prev.end_col_offset)
    elif i + 1 < len(items):  # "key=value, " up to the next item
        nxt = items[i + 1]
        el, ec = nxt.lineno - 1, src.col(nxt.lineno, nxt.col_offset)
        if isinstance(nxt, ast.AST) and any(k.value is nxt for k in call.keywords):
            k2 = next(k for k in call.keywords if k.value is nxt)
            el, ec = k2.lineno - 1, src.col(k2.lineno, k2.col_offset)
    return [Edit(l, c, el, ec, "")]


def _line_first(src: _Src, line1: int, calls: list[ast.Call]) -> list[ast.Call]:
    on = [c for c in calls if c.lineno <= line1 <= c.end_lineno]
    return on or calls


# ---- the fixes ----------------------------------------------------------------------------------
def _zero_grad(src: _Src, line1: int) -> list[Fix]:
    calls = _line_first(src, line1, src.calls(lambda c: _name(c) == "zero_grad"))
    edits = [e for c in calls for e in _set_kw(src, c, "set_to_none", "True")]
    return [Fix("Use zero_grad(set_to_none=True)", edits, True)] if edits else []


def _optimizer(src: _Src, line1: int) -> list[Fix]:
    def single_tensor(c: ast.Call) -> bool:  # not already foreach=True / fused=True
        kws = {k.arg: src.segment(k.value) for k in c.keywords}
        return kws.get("foreach") != "True" and kws.get("fused") != "True"

    calls = src.calls(lambda c: _name(c) in OPTIMIZERS and single_tensor(c))
    out = []
    fe = [e for c in calls for e in _set_kw(src, c, "foreach", "True", drop=("fused",))]
    if fe:
        out.append(Fix("Use the foreach optimizer (foreach=True)", fe, True))
    fu = [e for c in calls if _name(c) in FUSED_OK for e in _set_kw(src, c, "fused", "True", drop=("foreach",))]
    if fu:
        out.append(Fix("Use the fused optimizer (fused=True)", fu))
    return out


def _copy_calls(src: _Src, line1: int) -> list[ast.Call]:
    return [c for c in src.calls(lambda c: _name(c) in ("to", "cuda", "copy_"))
            if c.lineno <= line1 <= c.end_lineno]


def _pageable(src: _Src, line1: int) -> list[Fix]:
    copies = _copy_calls(src, line1)
    if not copies:
        return []
    nb = [e for c in copies for e in _set_kw(src, c, "non_blocking", "True")]
    loaders = src.calls(lambda c: _name(c) == "DataLoader")
    if loaders:
        pin = [e for c in loaders for e in _set_kw(src, c, "pin_memory", "True")]
        title = "Pin the DataLoader's memory (pin_memory=True) and copy with non_blocking=True"
    else:
        pin = []
        for c in copies:
            recv = c.func.value if isinstance(c.func, ast.Attribute) else None
            if recv is None or "pin_memory" in src.segment(recv):
                continue
            l, col, el, ec = src.span(recv)
            pin.append(Edit(el, ec, el, ec, ".pin_memory()"))
        title = "Copy from pinned memory (.pin_memory()) with non_blocking=True"
    edits = pin + nb
    return [Fix(title, edits, True)] if edits else []


def _after_imports(src: _Src) -> int:
    """0-based line after the module's leading docstring and imports."""
    line = 0
    for n in src.tree.body:
        if isinstance(n, (ast.Import, ast.ImportFrom)) or (
                isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)):
            line = n.end_lineno
        else:
            break
    return line


def _imports_torch(src: _Src) -> bool:
    return any(isinstance(n, ast.Import) and any(a.name == "torch" and a.asname is None for a in n.names)
               for n in src.tree.body)


def _fp32(src: _Src, line1: int) -> list[Fix]:
    out = []
    sets = [n for n in ast.walk(src.tree) if isinstance(n, ast.Assign)
            and any(src.segment(t).endswith("matmul.allow_tf32") for t in n.targets)]
    if sets:
        edits = [Edit(*src.span(n.value), "True") for n in sets if src.segment(n.value) != "True"]
    else:
        at = _after_imports(src)
        pre = "" if _imports_torch(src) else "import torch\n"
        edits = [Edit(at, 0, at, 0, f"{pre}torch.backends.cuda.matmul.allow_tf32 = True  "
                                     "# fp32 GEMMs on tensor cores (TF32)\n")]
    if edits:
        out.append(Fix("Allow TF32 for fp32 matmuls (torch.backends.cuda.matmul.allow_tf32)", edits, True))
    st = src.stmt_at(line1)
    if st is not None and st.end_lineno == st.lineno and _imports_torch(src):
        text = src.lines[line1 - 1]
        ind = text[:len(text) - len(text.lstrip())]
        out.append(Fix("Run this statement under torch.autocast (bf16)", [Edit(
            line1 - 1, 0, line1 - 1, len(text),
            f'{ind}with torch.autocast("cuda", dtype=torch.bfloat16):\n{ind}    {text.lstrip()}')]))
    return out


def _conv_bias(src: _Src, line1: int) -> list[Fix]:
    edits = []
    scopes = [n for n in ast.walk(src.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Call))
              and src.calls(lambda c: _name(c) in NORMS, n) and src.calls(lambda c: _name(c) in CONVS, n)]
    seen = set()
    for s in scopes:
        for c in src.calls(lambda c: _name(c) in CONVS, s):
            if id(c) not in seen:
                seen.add(id(c))
                edits += _set_kw(src, c, "bias", "False")
    return [Fix("Build the convolution without bias (bias=False): the batch norm cancels it", edits,
                True)] if edits else []


def _is_transpose_last2(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _name(node) == "transpose" and len(node.args) == 2 and \
        {ast.unparse(a) for a in node.args} == {"-2", "-1"}


def _attention(src: _Src, line1: int) -> list[Fix]:
    func = src.func_at(line1)
    if func is None:
        return []
    body = [n for n in ast.walk(func) if isinstance(n, ast.Assign) and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)]
    body.sort(key=lambda n: n.lineno)
    for i, first in enumerate(body):
        scores = first.targets[0].id
        mm, scale = first.value, None
        if isinstance(mm, ast.BinOp) and isinstance(mm.op, (ast.Div, ast.Mult)) and \
                isinstance(mm.left, ast.BinOp) and isinstance(mm.left.op, ast.MatMult):
            scale = (f"1 / ({src.segment(mm.right)})" if isinstance(mm.op, ast.Div)
                     else src.segment(mm.right))
            mm = mm.left
        if not (isinstance(mm, ast.BinOp) and isinstance(mm.op, ast.MatMult) and _is_transpose_last2(mm.right)):
            continue
        q, k = src.segment(mm.left), src.segment(mm.right.func.value)
        mask, soft, rest, chain = None, None, body[i + 1:], [first]
        for st in rest:
            uses = {n.id for n in ast.walk(st.value) if isinstance(n, ast.Name)}
            if scores not in uses:
                continue
            if st.targets[0].id != scores:
                break
            chain.append(st)
            for c in ast.walk(st.value):
                if isinstance(c, ast.Call) and _name(c) == "masked_fill" and c.args:
                    m = c.args[0]
                    mask = src.segment(m.operand) if isinstance(m, ast.UnaryOp) and isinstance(m.op, ast.Invert) \
                        else f"~({src.segment(m)})"
                if isinstance(c, ast.Call) and _name(c) == "softmax":
                    soft = st
            if soft is not None:
                break
        if soft is None:
            continue
        # the statement that multiplies the probabilities by v, after the softmax
        for st in ast.walk(func):
            if not isinstance(st, ast.stmt) or st.lineno <= soft.end_lineno:
                continue
            hit = next((b for b in ast.walk(st) if isinstance(b, ast.BinOp) and isinstance(b.op, ast.MatMult)
                        and isinstance(b.left, ast.Name) and b.left.id == scores), None)
            if hit is None:
                continue
            v = src.segment(hit.right)
            args = [q, k, v] + ([f"attn_mask={mask}"] if mask else []) + ([f"scale={scale}"] if scale else [])
            fn = "F.scaled_dot_product_attention" if _has_F(src) else "torch.nn.functional.scaled_dot_product_attention"
            edits = [Edit(*src.span(hit), f"{fn}({', '.join(args)})")]
            for dead in chain:  # scores, mask, softmax: one fused call does them all
                edits.append(Edit(dead.lineno - 1, 0, dead.end_lineno, 0, ""))
            return [Fix("Use F.scaled_dot_product_attention (fused attention kernel)", edits, True)]
    return []


def _has_F(src: _Src) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.module == "torch.nn" and any(a.name == "functional" and a.asname == "F" for a in n.names)
               or isinstance(n, ast.Import) and any(a.name == "torch.nn.functional" and a.asname == "F" for a in n.names)
               for n in src.tree.body)


FIXES: dict[str, Callable[[_Src, int], list[Fix]]] = {
    "zero-grad-not-none": _zero_grad,
    "optimizer-foreach-off": _optimizer,
    "pageable-memcpy": _pageable,
    "fp32-matmul": _fp32,
    "conv-bias-before-bn": _conv_bias,
    "unfused-attention": _attention,
}


def fixes(text: str, code: str, line1: int) -> list[Fix]:
    """Quick fixes for finding ``code`` on 1-based ``line1`` of ``text``; each one compiles."""
    fn = FIXES.get(code)
    if fn is None:
        return []
    try:
        src = _Src(text)
        found = fn(src, line1)
    except (SyntaxError, ValueError, IndexError):
        return []
    return [f for f in found if f.edits and _compiles(apply(text, f.edits))]


def suppress(text: str, code: str, line1: int) -> Optional[Fix]:
    """``# profd: ignore[code]`` at the end of the line (merged into one that is there)."""
    lines = text.splitlines()
    if not 0 < line1 <= len(lines):
        return None
    s = lines[line1 - 1]
    already = codes_on(s)  # the engine's own reading of the comment
    if code in already or ALL in already:
        return None
    m = SUPPRESS.search(s)
    if m:
        codes = [c.strip() for c in m.group(1).split(",") if c.strip()]
        new = f"# profd: ignore[{', '.join(codes + [code])}]"
        return Fix(f"Ignore {code} on this line", [Edit(line1 - 1, m.start(), line1 - 1, m.end(), new)])
    end = len(s.rstrip())
    return Fix(f"Ignore {code} on this line (# profd: ignore[{code}])",
               [Edit(line1 - 1, end, line1 - 1, len(s), f"  # profd: ignore[{code}]")])
