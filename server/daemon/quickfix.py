"""Quick fixes for findings whose fix is mechanical, computed on the source text (pure: text in,
edits out; the LSP layer turns them into code actions).

Each fix is found on the AST (never by regex on the text), applied to a copy and offered only if
the result still compiles. Positions are 0-based lines and character offsets in the line.

- ``zero-grad-not-none``: ``zero_grad(set_to_none=True)``.
- ``optimizer-foreach-off``: ``foreach=True`` or ``fused=True`` on the optimizer's constructor.
- ``pageable-memcpy``: ``non_blocking=True`` on the copy, and pinned memory at the source, once
  (``pin_memory=True`` on the file's DataLoader, else ``.pin_memory()`` where the tensor is made,
  outside the copy's loop; never at a copy inside the loop).
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
from functools import lru_cache
from typing import Callable, NamedTuple, Optional

from ..engine.sourcemap import line_starts, split_lines
from ..engine.suppress import ALL, Comments

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
    """``text`` with ``edits`` applied (non-overlapping; any order). Lines end at ``\n``,
    ``\r\n`` or ``\r`` only (``sourcemap.split_lines``), columns are characters."""
    starts = line_starts(text)

    def off(line: int, col: int) -> int:
        return min(starts[line] + col, len(text)) if line < len(starts) else len(text)

    out, end = [], len(text)
    for e in sorted(edits, key=lambda e: (e.line, e.col), reverse=True):
        a, b = off(e.line, e.col), off(e.end_line, e.end_col)
        out += [text[b:end], e.text]
        end = a
    out.append(text[:end])
    return "".join(reversed(out))


def _compiles(text: str) -> bool:
    try:
        compile(text, "<profd-fix>", "exec")
        return True
    except (SyntaxError, ValueError):
        return False


class _Src:
    def __init__(self, text: str):
        self.text = text
        self.lines = split_lines(text)
        self.starts = line_starts(text)
        self.tree = ast.parse(text)
        self._parents: Optional[dict[int, ast.AST]] = None

    def col(self, line1: int, byte_col: int) -> int:
        """AST byte offset -> character offset in the line."""
        s = self.lines[line1 - 1] if 0 < line1 <= len(self.lines) else ""
        return len(s.encode()[:byte_col].decode(errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int, int, int]:
        return (node.lineno - 1, self.col(node.lineno, node.col_offset),
                node.end_lineno - 1, self.col(node.end_lineno, node.end_col_offset))

    def segment(self, node: ast.AST) -> str:
        """The node's source text (``ast.get_source_segment`` splits the whole text at each call:
        quadratic over a file's assignments)."""
        if getattr(node, "end_lineno", None) is None:
            return ""
        l, c, el, ec = self.span(node)
        if el >= len(self.starts):
            return ""
        return self.text[self.starts[l] + c:self.starts[el] + ec]

    def parent(self, node: ast.AST) -> Optional[ast.AST]:
        if self._parents is None:
            self._parents = {id(c): p for p in ast.walk(self.tree) for c in ast.iter_child_nodes(p)}
        return self._parents.get(id(node))

    def inside(self, node: ast.AST, outer: ast.AST) -> bool:
        while node is not None:
            if node is outer:
                return True
            node = self.parent(node)
        return False

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
    """Pinned memory where it costs once: the file's DataLoader (``pin_memory=True``), else the
    statement that makes the copied tensor, when that runs outside the loop doing the copy. Never
    ``.pin_memory()`` at a copy in the loop: it pins every batch on the main thread, which
    PyTorch's pinned-memory tutorial warns can be slower than the pageable copy. With neither, no
    quick fix (the finding says what to do)."""
    copies = _copy_calls(src, line1)
    if not copies:
        return []
    loaders = src.calls(lambda c: _name(c) == "DataLoader")
    if loaders:
        pin = [e for c in loaders for e in _set_kw(src, c, "pin_memory", "True")]
        title = "Pin the DataLoader's memory (pin_memory=True) and copy with non_blocking=True"
    else:
        pin = []
        for c in copies:
            recv = c.func.value if isinstance(c.func, ast.Attribute) else None
            made = _made_once(src, c, recv) if isinstance(recv, ast.Name) else None
            if made is None:
                return []
            if "pin_memory" not in src.segment(made):
                l, col, el, ec = src.span(made)
                simple = isinstance(made, (ast.Call, ast.Name, ast.Attribute, ast.Subscript))
                pin += ([] if simple else [Edit(l, col, l, col, "(")]) + \
                    [Edit(el, ec, el, ec, ("" if simple else ")") + ".pin_memory()")]
        title = "Pin the tensor once where it is made, outside the loop (.pin_memory()), and copy with non_blocking=True"
    nb = [e for c in copies for e in _set_kw(src, c, "non_blocking", "True")]
    edits = pin + nb
    return [Fix(title, edits, True)] if edits and pin else []


LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _made_once(src: _Src, copy: ast.Call, name: ast.Name) -> Optional[ast.expr]:
    """The value of the plain assignment ``name = value`` that the copy reads, when it runs once
    for all the copies: not inside a loop that holds the copy (the loop's own target and
    unpacked batches are made per iteration), in the same function."""
    scope = copy
    while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        scope = src.parent(scope)
    if scope is None:
        return None
    loops = []
    n = src.parent(copy)
    while n is not None and n is not scope:
        if isinstance(n, LOOPS):
            loops.append(n)
        n = src.parent(n)
    stores = [x for x in ast.walk(scope) if isinstance(x, ast.Name) and x.id == name.id
              and isinstance(x.ctx, ast.Store) and (x.lineno, x.col_offset) < (copy.lineno, copy.col_offset)]
    if not stores:
        return None
    last = max(stores, key=lambda x: (x.lineno, x.col_offset))
    st = src.parent(last)
    if not (isinstance(st, ast.Assign) and st.targets == [last]) or \
            any(src.inside(st, loop) for loop in loops):
        return None
    return st.value


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


MAX_TEXT = 1 << 20  # characters: a larger file gets no quick fixes (each parses and compiles it)


@lru_cache(maxsize=4)
def _parsed(text: str) -> _Src:
    """The parsed text, once for the several findings of one code-action request."""
    return _Src(text)


def fixes(text: str, code: str, line1: int) -> list[Fix]:
    """Quick fixes for finding ``code`` on 1-based ``line1`` of ``text``; each one compiles."""
    fn = FIXES.get(code)
    if fn is None or len(text) > MAX_TEXT:
        return []
    try:
        found = fn(_parsed(text), line1)
    except (SyntaxError, ValueError, IndexError, RecursionError, MemoryError):
        return []
    return [f for f in found if f.edits and _compiles(apply(text, f.edits))]


def _offsets(text: str, edits: list[Edit]) -> list[tuple[int, int]]:
    starts = line_starts(text)
    off = lambda l, c: starts[l] + c if l < len(starts) else len(text)  # noqa: E731
    return [(off(e.line, e.col), off(e.end_line, e.end_col)) for e in edits]


def fix_all(text: str, findings: list[tuple[str, int]]) -> Optional[Fix]:
    """One fix for the file: each finding's preferred quick fix (``findings``: (code, 1-based
    line)), the same edit once, a fix whose edits overlap one already taken left out, each taken
    only if the text still compiles with it."""
    taken: list[Edit] = []
    spans: list[tuple[int, int]] = []
    n = 0
    for code, line1 in findings:
        fx = next((f for f in fixes(text, code, line1) if f.preferred), None)
        if fx is None:
            continue
        new = [e for e in fx.edits if e not in taken]
        if not new:
            n += 1  # the same fix as an earlier finding's (one optimizer for several steps)
            continue
        mine = _offsets(text, new)
        if any(a < d and c < b or a == b == c == d for a, b in mine for c, d in spans):
            continue
        if not _compiles(apply(text, taken + new)):
            continue
        taken += new
        spans += mine
        n += 1
    if not taken:
        return None
    return Fix(f"Fix all profd findings that have a mechanical fix ({n} in this file)", taken, True)


RELATED = {"optimizer-foreach-off"}
MAX_RELATED_TEXT = 1 << 19  # characters: diagnostics are made on the loop; a larger file goes without


def related(text: str, code: str, line1: int) -> list[tuple[Edit, str]]:
    """Places a finding's fix goes that are not its own line: (span, what is there). For
    ``optimizer-foreach-off`` (found at ``optimizer.step()``) the optimizer's constructor."""
    if code not in RELATED or len(text) > MAX_RELATED_TEXT:
        return []
    try:
        src = _parsed(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out = []
    for fx in _optimizer(src, line1)[:1]:
        for e in fx.edits:
            call = next((c for c in src.calls(lambda c: _name(c) in OPTIMIZERS)
                         if c.lineno - 1 <= e.line <= c.end_lineno - 1), None)
            if call is None or call.lineno == line1:
                continue
            span = Edit(*src.span(call), "")
            if span not in [s for s, _ in out]:
                out.append((span, f"the optimizer is built here ({_name(call)}): the fix goes here"))
    return out


def suppress(text: str, code: str, line1: int) -> Optional[Fix]:
    """``# profd: ignore[code]`` on the statement of 1-based ``line1`` (merged into one of its
    comments that has one; else at the end of its last line, where a comment may stand: never
    after a trailing backslash, never inside a string). Offered only if the result compiles and
    the engine then reads the code as suppressed on ``line1``."""
    lines = split_lines(text)
    if not 0 < line1 <= len(lines):
        return None
    com = Comments(lines)
    already = com.codes(line1)  # the engine's own reading of the comments
    if code in already or ALL in already:
        return None
    first, last = com.statement(line1)
    edit = None
    for n in range(first, last + 1):
        for c in com.by_line.get(n, ()):
            m = SUPPRESS.search(c.text)
            if m:
                codes = [x.strip() for x in m.group(1).split(",") if x.strip()]
                new = f"# profd: ignore[{', '.join(codes + [code])}]"
                edit = Edit(n - 1, c.col + m.start(), n - 1, c.col + m.end(), new)
                break
        if edit:
            break
    if edit is None:
        s = lines[last - 1]
        edit = Edit(last - 1, len(s.rstrip()), last - 1, len(s), f"  # profd: ignore[{code}]")
    new_text = apply(text, [edit])
    if not _compiles(new_text) or code not in Comments(split_lines(new_text)).codes(line1):
        return None
    return Fix(f"Ignore {code} on this line (# profd: ignore[{code}])", [edit])
