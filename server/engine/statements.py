"""Statement-level lines: which statement of a function issued an op.

A ``with_stack`` trace names a frame by its function's first line (``tinygpt.py(14): forward``), or,
for frames already running when the profiler started, by the line they were at
(``train_tinygpt.py(71): main``). It does not say which statement issued each call (Kineto #630).

When the source is in the workspace we recover it: the frame's direct children, in time order
(``<built-in method item ...>``, ``torch/nn/modules/module.py(..): _call_impl``, a user callee
``train_tinygpt.py(21): token_stats``, a bare ``aten::add``, a ``record_function`` label), are
aligned with the call sites of the function's AST in execution order (arguments before the call
that takes them). The alignment walks forward and wraps around, so loops and untaken branches cost
nothing. A child that matches no site keeps the frame's line with ``function`` precision.
"""

from __future__ import annotations

import ast
import bisect
import re
import threading
from array import array
from typing import Iterator, Optional

import msgspec

from .model import TraceModel
from .passes import start
from .sourcemap import SourceMap, source_lines

_PARSE_LOCK = threading.Lock()
_BUILTIN_RE = re.compile(r"^<built-in (?:method|function) ([A-Za-z_][A-Za-z0-9_]*)")
# Frames of library code whose name says nothing about the call site.
_SKIP = {"__enter__", "__exit__", "__getattr__", "__setattr__", "__getattribute__", "__delattr__"}
# aten ops that appear directly under a frame (no python-level wrapper) -> the names of the
# call sites or operators that cause them.
_ATEN_SITES = {
    "aten::item": {"item", "int", "float", "bool"},
    "aten::_local_scalar_dense": {"item", "int", "float", "bool"},
    "aten::is_nonzero": {"<test>", "bool"},
    "aten::add": {"<+>"},
    "aten::add_": {"<+=>"},
    "aten::sub": {"<->"},
    "aten::sub_": {"<-=>"},
    "aten::mul": {"<*>"},
    "aten::mul_": {"<*=>"},
    "aten::div": {"</>"},
    "aten::div_": {"</=>"},
    "aten::matmul": {"<@>"},
    "aten::gt": {"<>>"},
    "aten::lt": {"<<>"},
    "aten::ge": {"<>=>"},
    "aten::le": {"<<=>"},
    "aten::eq": {"<==>"},
    "aten::ne": {"<!=>"},
    "aten::neg": {"<-x>"},
    "aten::bitwise_not": {"<~>"},
    "aten::pow": {"<**>"},
    "aten::remainder": {"<%>"},
    "aten::floor_divide": {"<//>"},
    "aten::index": {"<[]>"},
    "aten::select": {"<[]>"},
    "aten::slice": {"<[]>"},
    "aten::index_put_": {"<[]=>"},
    "aten::copy_": {"<[]=>"},
}
# Python operator slots that reach the profiler as ``<built-in method __gt__ ...>``.
_DUNDER = {
    "__add__": "<+>",
    "__radd__": "<+>",
    "__iadd__": "<+=>",
    "__sub__": "<->",
    "__rsub__": "<->",
    "__isub__": "<-=>",
    "__mul__": "<*>",
    "__rmul__": "<*>",
    "__imul__": "<*=>",
    "__truediv__": "</>",
    "__rtruediv__": "</>",
    "__itruediv__": "</=>",
    "__matmul__": "<@>",
    "__rmatmul__": "<@>",
    "__pow__": "<**>",
    "__mod__": "<%>",
    "__floordiv__": "<//>",
    "__gt__": "<>>",
    "__lt__": "<<>",
    "__ge__": "<>=>",
    "__le__": "<<=>",
    "__eq__": "<==>",
    "__ne__": "<!=>",
    "__neg__": "<-x>",
    "__invert__": "<~>",
    "__getitem__": "<[]>",
    "__setitem__": "<[]=>",
    "__bool__": "<test>",
    "__int__": "int",
    "__float__": "float",
    "__len__": "len",
    "__iter__": "__iter__",
    "__format__": "<fmt>",
    "__repr__": "repr",
    "__str__": "str",
}
# Dynamo names the code after a graph break ``torch_dynamo_resume_in_<function>_at_<line>``.
RESUME_RE = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")
PROFILER_STEP = "<profiler.step>"  # the site of ``prof.step()``
_GRAPH_MARKERS = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
# torch.compile's machinery: frames and ops that run compiled graphs or guard them.
_COMPILER_PATHS = ("torch/_dynamo/", "torch/_compile.py", "torch/_inductor/", "torch/_functorch/")
_COMPILER_OPS = _GRAPH_MARKERS + ("TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher")
_BINOP = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.MatMult: "@",
    ast.Pow: "**",
    ast.Mod: "%",
    ast.FloorDiv: "//",
}
_CMPOP = {ast.Gt: ">", ast.Lt: "<", ast.GtE: ">=", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!="}


class Site(msgspec.Struct, frozen=True):
    name: str  # callee name (``item``, ``to``, ``model``), ``record_function:LABEL``, or ``<op>``
    line: int  # the line of the statement that holds it
    # The expression's span when it starts on that line: 1-based character columns, end exclusive
    # (``loss.item()`` from the ``l`` to past the ``)``); None when it starts on a later line.
    column: Optional[int] = None
    end_line: Optional[int] = None
    end_column: Optional[int] = None


def _call_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return "<call>"


class _SiteCollector(ast.NodeVisitor):
    """Call sites of one function body in execution order, each with its statement's line."""

    def __init__(self, profilers: frozenset = frozenset(), lines: tuple[str, ...] = ()):
        self.sites: list[Site] = []
        self.stmt_line = 0
        self.profilers = profilers  # names bound to a torch.profiler.profile(...) in this body
        self.lines = lines

    def visit_FunctionDef(self, node):  # nested defs run later, elsewhere
        pass

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef

    def generic_visit(self, node):
        if isinstance(node, ast.stmt):
            self._stmt(node)
            return
        super().generic_visit(node)

    def _stmt(self, node: ast.stmt):
        outer = self.stmt_line
        self.stmt_line = node.lineno
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self.visit(item.context_expr)
                ce = item.context_expr
                if (
                    isinstance(ce, ast.Call)
                    and _call_name(ce) == "record_function"
                    and ce.args
                    and isinstance(ce.args[0], ast.Constant)
                    and isinstance(ce.args[0].value, str)
                ):
                    self._add(f"record_function:{ce.args[0].value}", ce)
            for s in node.body:
                self.visit(s)
        elif isinstance(node, (ast.If, ast.While)):
            self.visit(node.test)
            self._add("<test>", node.test)
            for s in node.body + node.orelse:
                self.visit(s)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.visit(node.iter)
            self._add("__iter__", node.iter)
            for s in node.body + node.orelse:
                self.visit(s)
        elif isinstance(node, ast.AugAssign):
            self.visit(node.value)
            self.visit(node.target)
            op = _BINOP.get(type(node.op))
            if op:
                self._add(f"<{op}=>", node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(t, ast.Subscript) for t in getattr(node, "targets", [])
        ):
            self.visit(node.value)
            self._add("<[]=>", node)
        else:
            for child in ast.iter_child_nodes(node):
                self.visit(child)
        self.stmt_line = outer

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)  # arguments run first
        f = node.func
        if (
            isinstance(f, ast.Attribute)
            and f.attr == "step"
            and isinstance(f.value, ast.Name)
            and f.value.id in self.profilers
        ):
            self._add(PROFILER_STEP)  # only the profiler's own frame stands for it, never user work
            return
        self._add(_call_name(node), node)

    def visit_BinOp(self, node: ast.BinOp):
        self.generic_visit(node)
        op = _BINOP.get(type(node.op))
        if op:
            self._add(f"<{op}>", node)

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        for op in node.ops:
            sym = _CMPOP.get(type(op))
            if sym:
                self._add(f"<{sym}>", node)

    def visit_UnaryOp(self, node: ast.UnaryOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.Invert):
            self._add("<~>", node)
        elif isinstance(node.op, ast.USub):
            self._add("<-x>", node)

    def visit_Subscript(self, node: ast.Subscript):
        self.generic_visit(node)
        self._add("<[]>", node)

    def _add(self, name: str, node: Optional[ast.AST] = None):
        if node is None or getattr(node, "lineno", None) != self.stmt_line:
            self.sites.append(Site(name, self.stmt_line))
            return
        end_line = getattr(node, "end_lineno", None) or node.lineno
        self.sites.append(
            Site(
                name,
                self.stmt_line,
                self._char(node.lineno, node.col_offset) + 1,
                end_line,
                self._char(end_line, getattr(node, "end_col_offset", None) or 0) + 1,
            )
        )

    def _char(self, line: int, byte_col: int) -> int:
        """ast's UTF-8 byte offset as a character offset."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def walked(node: ast.AST) -> list:
    """``ast.walk(node)`` as a list, in its order (breadth-first), made once per node and kept on
    it (a parsed file lives as long as the resolver that parsed it). The statement and module
    passes look up the function around each frame line they place, each lookup a walk of the whole
    file, and walk each function three times more: 20-40 ms of a 10 MB trace's analysis with its
    sources, in ast's generators."""
    got = node.__dict__.get("_walked")
    if got is None:
        got = node.__dict__["_walked"] = list(ast.walk(node))
    return got


def _function_sites(
    tree: Optional[ast.AST], line: int, lines: tuple[str, ...] = ()
) -> tuple[list[Site], bool]:
    """(call sites in execution order, whether ``line`` is the def line) of the function at line."""
    if tree is None:
        return [], False
    func, is_def = _function_at(tree, line)
    col = _SiteCollector(_profiler_names(func), lines)
    body = getattr(func, "body", [])
    if isinstance(func, ast.Lambda):  # one expression, on the lambda's line
        col.stmt_line = func.lineno
        body = [body]
    for stmt in body:
        col.visit(stmt)
    sites = col.sites
    if sites and not is_def:
        # A frame already running resumes at the line it was on; code before the outermost
        # loop around that line has run and will not run again (a warm-up loop, say). When that
        # line opens the profiler (``with profile(...) as prof:``, ``prof.start()``), what it
        # records ends where the profiler stops: the with-block's last line, the ``prof.stop()``.
        floor = _resume_floor(func, line)
        ceiling = _profiled_until(func, line)
        sites = [st for st in sites if floor <= st.line <= ceiling]
    return sites, is_def


def _profiled_until(func, line: int) -> int:
    """The last line a profiler opened at ``line`` records: the end of a ``with profile(...)``
    statement there, the line of the ``X.stop()`` after an ``X.start()`` there (or of
    ``X.__exit__``), else the end of the function (the profiler outlives the frame's code)."""
    end = getattr(func, "end_lineno", None) or 10**9
    started = None
    for node in walked(func):
        if (
            isinstance(node, (ast.With, ast.AsyncWith))
            and node.lineno <= line <= node.body[0].lineno - 1
            and any(_is_profile_call(it.context_expr) for it in node.items)
        ):
            return node.end_lineno or end
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node.lineno == line:
            f = node.value.func
            if isinstance(f, ast.Attribute) and f.attr in ("start", "__enter__"):
                started = ast.dump(f.value)
    if started is not None:
        stops = [
            node.lineno
            for node in walked(func)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("stop", "__exit__")
            and ast.dump(node.func.value) == started
            and node.lineno > line
        ]
        if stops:
            return min(stops)
    return end


def _profiler_names(func) -> frozenset:
    """Names a function binds to a profiler: ``with profile(...) as prof``, ``prof = profile(...)``."""
    out = set()
    for node in walked(func):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if _is_profile_call(item.context_expr) and isinstance(item.optional_vars, ast.Name):
                    out.add(item.optional_vars.id)
        elif isinstance(node, ast.Assign) and _is_profile_call(node.value):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(out)


def _is_profile_call(node) -> bool:
    return isinstance(node, ast.Call) and _call_name(node) in ("profile", "profiler")


def _function_at(tree: ast.AST, line: int):
    """(function node, is_def_line): the def (or lambda) starting at ``line``, else the innermost def
    containing it. A lambda is a function of its own: its frame ``file(LINE): <lambda>`` names its
    line, not the def around it."""
    best = None
    for node in walked(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
            if first <= line <= (node.end_lineno or node.lineno) and line in (node.lineno, first):
                return node, True
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                if best is None or node.lineno >= best.lineno:
                    best = node
    return (best if best is not None else tree), False


_NO_NAME: frozenset[str] = frozenset()  # StatementResolver._align's key for a name set no site bears
_UNSEEN, _PER_EVENT = object(), object()  # StatementResolver._names' memo: not made yet; per event


class StatementResolver:
    def __init__(self, model: TraceModel, sources: SourceMap):
        self.model = model
        self.sources = sources
        self._trees: dict[str, Optional[ast.AST]] = {}
        # frame -> per position among its tokens, that token's site (one list per shape, see _by_position)
        self._frame_lines: dict[int, list[Optional[Site]]] = {}
        self._shaped: dict[tuple, list[Optional[Site]]] = {}  # (shape, compiled) -> that list
        self._site_cache: dict[tuple, object] = {}
        self._resumes: Optional[dict[int, list[tuple[float, int]]]] = None
        self._aligned: dict[tuple, list[tuple[int, int]]] = {}  # see _align
        self._named: dict[tuple, object] = {}  # see _names
        self._no_site: dict[int, tuple[int, str, None]] = {}  # see line_for

    def line_for(self, frame: int, event: int, direct: bool = False) -> tuple[int, str, Optional[Site]]:
        """(line, precision, the call site when known) for cpu ``event`` issued inside user ``frame``;
        ``direct``: ``event`` is a call the frame makes itself (a user function it calls)."""
        m = self.model
        if m.has_call_from:
            call_from = self._call_from(event)
            if call_from is not None:
                return call_from, "statement", None
        lines = self._frame_lines.get(frame)
        if lines is None:
            lines = self._frame_lines[frame] = self._by_position(frame)
        brk = self._break_line(frame, event)
        if brk is not None:  # the trace names this line: alignment could only guess it
            return brk, "statement", None
        tok = event if direct else m.token[event] if m.frame_of[event] == frame else None
        site = None
        if tok is not None and tok >= 0:  # -1: the frame's own event, no token's
            sh = frame_shapes(m)
            k = sh.tokpos[tok]
            if k >= 0 and sh.toks[sh.tok_off[sh.place[frame]] + k] == tok:  # one of this frame's
                site = lines[k]
        return self._placed(frame, site)

    def token_lines(self, frame: int) -> list[tuple[int, str, Optional[Site]]]:
        """``line_for`` of each of the frame's statement tokens, by position, at once: a frame
        that loops holds a token per statement per pass (thousands in a long run), and each is
        one of few sites. Not for a frame Dynamo resumes (``resumed``: its events' lines depend
        on the event) nor a trace whose ops name their lines (``call_from``)."""
        placed: dict[int, tuple[int, str, Optional[Site]]] = {}  # id(site) -> its line
        out = []
        for site in self._by_position(frame):
            got = placed.get(id(site))
            if got is None:
                got = placed[id(site)] = self._placed(frame, site)
            out.append(got)
        return out

    def _placed(self, frame: int, site: Optional[Site]) -> tuple[int, str, Optional[Site]]:
        """(line, precision, site) of an event of ``frame`` aligned with ``site``; with none, the
        frame's line, whichever of its events asks: made once per frame."""
        if site is not None:
            return site.line, "statement", site
        got = self._no_site.get(frame)
        if got is None:
            only = self._one_statement(frame)
            got = (
                (only, "statement", None)
                if only is not None
                else (self.function_line(frame), "function", None)
            )
            self._no_site[frame] = got
        return got

    def _one_statement(self, frame: int) -> Optional[int]:
        """The line of a function whose calls all lie on one statement (``return a @ w + b``):
        whatever it runs, a compiled graph too, is that statement's."""
        fr = self.model.frames[frame]
        local = self.sources.resolve(fr.path)
        if local is None:
            return None
        sites, is_def = self._sites(local, fr.line)
        lines = {st.line for st in sites}
        return lines.pop() if is_def and len(lines) == 1 else None

    def function_line(self, frame: int) -> int:
        """The line a function-precision finding in ``frame`` goes on. A frame already running when
        the profiler started is named by the line it was at, the line the profiler saw first
        (``prof.step()``, the ``with profile(...)``), not the line that did the work: with the
        source, its ``def`` line instead (for module code, the header of the loop around it)."""
        fr = self.model.frames[frame]
        local = self.sources.resolve(fr.path)
        tree = self.tree(local) if local is not None else None
        if tree is None:
            return fr.line
        key = ("def", local, fr.line)
        hit = self._site_cache.get(key)
        if hit is None:
            func, is_def = _function_at(tree, fr.line)
            if is_def:
                hit = fr.line
            elif isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                # the enclosing def of a resumed frame is its own function; a lambda or a
                # comprehension inside one is named by its own first line: keep that
                hit = func.lineno if func.name == fr.function else fr.line
            else:
                hit = _resume_floor(func, fr.line)
            self._site_cache[key] = hit
        return hit

    def _break_line(self, frame: int, event: int) -> Optional[int]:
        """The line where Dynamo broke a compiled function's graph, for the eager code it runs
        there: an op that ``frame`` runs itself (no python frame or compiled graph between them:
        the graphs run under Dynamo's ``_fn`` frames), before the
        ``torch_dynamo_resume_in_<function>_at_<line>`` frame that ``frame`` calls next."""
        if self._resumes is None:
            self._resumes = resume_frames(self.model)
        resumes = self._resumes.get(frame)
        if not resumes:
            return None
        m = self.model
        ts = m.cpu[event].ts
        for a in m.ancestors(event):
            if a == frame:
                break
            e = m.cpu[a]
            if e.cat == "python_function" or e.name.startswith(_GRAPH_MARKERS):
                return None  # compiled code: a graph's own ops
        if m.cpu[event].name.startswith(_GRAPH_MARKERS):
            return None
        k = bisect.bisect_left(resumes, (ts,))
        return resumes[k][1] if k < len(resumes) else None

    def _call_from(self, event: int) -> Optional[int]:
        e = self.model.cpu[event]
        cf = e.args.call_from if e.args is not None else None
        if cf:
            m = re.search(r"\((\d+)\)|:(\d+)", cf)
            if m:
                return int(m.group(1) or m.group(2))
        return None

    def tree(self, local: str) -> Optional[ast.AST]:
        """The parsed file (once per resolver), None when it does not parse."""
        if local not in self._trees:
            # ast.parse is not thread-safe on CPython 3.11 ("AST constructor recursion depth
            # mismatch" under concurrent parses): the daemon and Dask workers analyse in threads
            with _PARSE_LOCK:
                try:
                    self._trees[local] = ast.parse("\n".join(source_lines(local)))
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    self._trees[local] = None
        return self._trees[local]

    def _sites(self, local: str, line: int) -> tuple[list[Site], bool]:
        """The call sites of the function a frame names, once per (file, line): a trace holds
        the same frame thousands of times."""
        key = (local, line)
        hit = self._site_cache.get(key)
        if hit is None:
            hit = self._site_cache[key] = _function_sites(self.tree(local), line, source_lines(local))
        return hit

    def _by_position(self, frame: int) -> list[Optional[Site]]:
        """Per position among the frame's tokens, the site aligned with that token: once per shape
        of frame (frame_shapes; a function called each step, each layer, has the same subtree each
        call) and whether it runs compiled, the one thing outside the subtree the alignment reads."""
        key = self.shape_key(frame)
        got = self._shaped.get(key)
        if got is None:
            sh = frame_shapes(self.model)
            lines = self._align(frame)
            got = self._shaped[key] = [lines.get(t) for t in sh.tokens(sh.place[frame])]
        return got

    def shape_key(self, frame: int) -> tuple:
        """What the lines of a frame's tokens are a function of: its shape, and whether it runs
        compiled (outside the subtree: its parent). ``resumed`` frames aside."""
        m = self.model
        sh = frame_shapes(m)
        p = m.parent[frame]
        return sh.shape[sh.place[frame]], p >= 0 and m.cpu[p].name.startswith("Torch-Compiled Region")

    def resumed(self, frame: int) -> bool:
        """Whether Dynamo resumes the frame after a graph break (_break_line): its events' lines
        then depend on the event, not only on its token."""
        if self._resumes is None:
            self._resumes = resume_frames(self.model)
        return bool(self._resumes.get(frame))

    def _align(self, frame: int) -> dict[int, Site]:
        m = self.model
        fr = m.frames[frame]
        local = self.sources.resolve(fr.path, fr.line)
        if local is None:
            return {}
        sites, is_def = self._sites(local, fr.line)
        if not sites:
            return {}
        # A compiled function's frame (Dynamo runs it under a ``Torch-Compiled Region``) holds its
        # graphs, each many statements: no call site is theirs.
        p = m.parent[frame]
        compiled = p >= 0 and m.cpu[p].name.startswith("Torch-Compiled Region")
        toks = [(t, n) for t in self._tokens(frame) for n in [self._names(t, compiled)] if n is not None]
        if any(st.name == PROFILER_STEP for st in sites):
            # the function's own ``prof.step()`` is known: the profiler's step is that site, never
            # another ``.step()`` (``opt.step()`` two lines up took it, and the fused optimizer's
            # calls, left without a site, fell to the ``def`` line)
            pstep = ({PROFILER_STEP}, False)
            toks = [(t, pstep if PROFILER_STEP in n[0] else n) for t, n in toks]
        # A function called over and over (each step, each layer) has the same tokens each call:
        # the alignment is a function of the site list and the tokens' names, made once. A name
        # set no site bears matches nothing in _match whatever it holds (_find finds no site by it,
        # so it neither places its token nor bounds another): such sets are one in the key, and
        # calls that differ only there (each step's ``ProfilerStep#N`` label) share one alignment.
        named = {st.name for st in sites}
        key = (
            local,
            fr.line,
            tuple((frozenset(n) if not named.isdisjoint(n) else _NO_NAME, anyc) for _, (n, anyc) in toks),
        )
        hit = self._aligned.get(key)
        if hit is None:
            hit = self._aligned[key] = _match(sites, is_def, fr.line, [n for _, n in toks])
        return {toks[j][0]: sites[k] for j, k in hit}

    def _tokens(self, frame: int):
        sh = frame_shapes(self.model)  # frame_tokens, as the frame_shapes pass listed them
        return sh.tokens(sh.place[frame])

    def _names(self, i: int, compiled: bool = False) -> Optional[tuple[set[str], bool]]:
        """(site names the child can stand for, whether any call site will do); None: skip it.
        What the event's name says, made once per name (shared: never to be changed), and the
        labelled method a library frame runs, per event."""
        e = self.model.cpu[i]
        key = (e.cat, e.name, compiled)
        got = self._named.get(key, _UNSEEN)
        if got is _UNSEEN:
            got = self._named[key] = self._names_of(i, compiled)
        if got is _PER_EVENT:
            fr = self.model.frames[i]
            return {fr.function} | _labelled_method(self.model, i), True
        return got

    def _names_of(self, i: int, compiled: bool):
        m = self.model
        e = m.cpu[i]
        if e.cat == "user_annotation":
            return {f"record_function:{e.name}"}, False
        if e.cat == "python_function":
            mb = _BUILTIN_RE.match(e.name)
            if mb:
                name = mb.group(1)
                return {_DUNDER.get(name, name)}, False
            fr = m.frames.get(i)
            if fr is None:
                return set(), True  # ``nn.Module: X`` markers are module calls
            if fr.function in _SKIP or (compiled and fr.path.startswith(_COMPILER_PATHS)):
                return None
            if fr.path.startswith("torch/profiler/") and fr.function == "step":
                return {PROFILER_STEP, "step"}, False  # prof.step() is the profiler's work alone
            if fr.user and fr.function not in ("forward", "__call__"):
                return {fr.function}, False
            # a library function or a module call; a decorator's wrapper (the optimizer's
            # ``wrapper``, ``_compile.py: inner``) is named by the method it runs, as torch labels it
            return _PER_EVENT
        if e.cat == "cpu_op":
            if compiled and e.name.startswith(_COMPILER_OPS):
                return None
            return _ATEN_SITES.get(e.name, set()), e.name not in _ATEN_SITES
        return None


def frame_tokens(m: TraceModel, frame: int):
    """Direct children of the frame in time order, looking through record_function labels."""
    stack = list(reversed(m.children(frame)))
    while stack:
        i = stack.pop()
        e = m.cpu[i]
        if e.cat == "user_annotation":
            yield i  # the label itself anchors its with-statement
            stack.extend(reversed(m.children(i)))
        else:
            yield i


class FrameShapes(msgspec.Struct):
    """The user frames of a trace, their statement tokens and their shapes (the frame_shapes pass):
    frames of one shape have equal subtrees, so their tokens align with the same sites and fall in
    the same call groups, position by position."""

    frames: array  # the user frames, in event order
    place: array  # per event, its place among frames (-1: not a user frame)
    shape: array  # per place, the frame's shape
    tok_off: array  # per place, where its tokens start in toks (and one past the last)
    toks: array  # the frames' tokens (frame_tokens), one frame after another
    tokpos: array  # per event, its position among its frame's tokens (-1: not a token)
    tokshape: array  # per token (as toks), the shape of its own subtree: what it calls is of that alone

    def tokens(self, k: int) -> array:
        return self.toks[self.tok_off[k] : self.tok_off[k + 1]]

    def token_shape(self, m: TraceModel, tok: int) -> int:
        """The shape of statement token ``tok``'s own subtree: its place among the tokens of the
        frame it runs in (a label's children are the frame's tokens too)."""
        return self.tokshape[self.tok_off[self.place[m.frame_of[m.parent[tok]]]] + self.tokpos[tok]]


def frame_shapes(m: TraceModel) -> FrameShapes:
    """The model's FrameShapes, made on first use (the statements and the call groups share it),
    or as the pass ``start_frame_shapes`` started finished."""
    got = m.__dict__.get("_frame_shapes")
    if type(got) is not FrameShapes:
        cols = got.result() if got is not None else m.passes.frame_shapes(*_frame_shapes_args(m))
        got = m._frame_shapes = FrameShapes(*cols)
    return got


def start_frame_shapes(m: TraceModel) -> None:
    """Start the frame_shapes pass beside the caller (passes.start): it reads only what build
    made, and the statements first ask for it after the analyses and the first rules (at 1 GB its
    tenth of a second then runs on the other core)."""
    if "_frame_shapes" not in m.__dict__:
        m._frame_shapes = start(m.passes, "frame_shapes", *_frame_shapes_args(m))


def _frame_shapes_args(m: TraceModel) -> tuple:
    return (m.cpu, *m.child_index, m.frame_of, m.frames.ids)


_ZERO_CODE = array("i", [0])  # one token's code in codes' column (int32)


class CallGroups:
    """The group of findings each statement token falls in, from the trace alone (the same with and
    without the source): what the token calls (``call_of``), except that the calls a loop in the
    function repeats (twice or more in one call of the function, within one step), and whose runs
    overlap, are one group: ``x = x + torch.relu(lin(norm(x)))`` in a loop is four calls and one
    line (as many of each per call of the function). Two calls of one kind outside a loop with the same shapes (``x = xb.to(dev)``, ``y =
    yb.to(dev)``) stay one group, which the source then places on the first of its lines."""

    def __init__(self, m: TraceModel):
        self.m = m
        self._of: dict[int, list] = {}  # frame -> per position among its tokens, that token's group
        # (shape, the tokens' steps) -> (the groups by position, each group's positions)
        self._shaped: dict[tuple, tuple[list, dict[tuple, list[int]]]] = {}
        # (parsed frame, the tokens' calls, the pattern of steps) -> the same: shapes that differ
        # only where no call differs (each step's ProfilerStep#N label, whose call drops the number) share it
        self._called: dict[tuple, tuple[list, dict[tuple, list[int]]]] = {}
        self._steps: Optional[tuple] = None  # see _step_table
        self._places: Optional[array] = None  # every token's step, by frame shape place (_step_places)
        # (frame, group) -> [(frame event, its tokens, the group's positions among them)]: a
        # member (frame event, token) for each position, listed on asking (members)
        self._members: dict[tuple, list[tuple[int, array, list[int]]]] = {}

    def of(self, tok: int) -> tuple:
        """The group of statement token ``tok`` (never a user frame: the token of a frame's own op)."""
        m = self.m
        frame = m.frame_of[tok]
        groups = self._of.get(frame)
        if groups is None:
            groups = self._group(frame)
        return groups[frame_shapes(m).tokpos[tok]]

    def _group(self, frame: int) -> list:
        """The frame's groups, once per shape and pattern of steps: the groups are a function of the
        tokens' calls (the subtree) and of which tokens share a step (in order of first token)."""
        m = self.m
        sh = frame_shapes(m)
        k = sh.place[frame]
        toks = sh.tokens(k)
        places = self._step_places(sh, k)
        pattern = self._step_pattern(places)
        key = (sh.shape[k], pattern)
        got = self._shaped.get(key)
        if got is None:
            got = self._shaped[key] = self._groups(m.frames.ids[frame], toks, places, pattern)
        groups, positions = got
        fr = m.frames[frame]
        for g, at in positions.items():
            self._members.setdefault((fr, g), []).append((frame, toks, at))
        self._of[frame] = groups
        return groups

    def members(self, fr, group) -> Iterator[tuple[int, int]]:
        """(frame event, token) of each member of ``group`` of parsed frame ``fr``, in order of
        the frames' first tokens, each frame's in its order."""
        for frame, toks, at in self._members.get((fr, group), ()):
            for p in at:
                yield frame, toks[p]

    def _step_table(self) -> tuple[array, array, array, list]:
        """The steps as the call groups read them, made once: per step the first step of its
        number (``canon``), its start and end columns, its number."""
        if self._steps is None:
            m = self.m
            numbers: dict = {}
            self._steps = (
                array("i", [numbers.setdefault(s.number, k) for k, s in enumerate(m.steps)]),
                array("d", [s.ts for s in m.steps]),
                array("d", [s.end for s in m.steps]),
                [s.number for s in m.steps],
            )
        return self._steps

    def _step_places(self, sh: FrameShapes, k: int) -> array:
        """Each token's step of the frame at place ``k`` of the frame shapes (its place in the
        steps, -1 for none: ``model.step_at`` of its start): a slice of every token's, found in
        one pass on first use (the call groups ask for nearly every frame: 5,074 of 5,192 at 1 GB,
        each a pass of its own before)."""
        if self._places is None:
            _, starts, ends, _ = self._step_table()
            self._places = self.m.passes.step_of(sh.toks, self.m.cpu_starts(), starts, ends)
        return self._places[sh.tok_off[k] : sh.tok_off[k + 1]]

    def _step_pattern(self, places: array) -> bytes:
        """Which of the tokens start in the same step (by step number; none counts as one),
        numbered by first appearance (``places``: _step_places)."""
        if places.count(places[0] if places else 0) == len(places):
            # one step for all of them (98% of the frames at 1 GB): every token numbered 0, as
            # codes would number them, without its two passes
            return (_ZERO_CODE * len(places)).tobytes()
        run = self.m.passes
        return run.codes(run.take(self._step_table()[0], places, -1))[1].tobytes()

    def _groups(
        self, fid: int, toks: array, places: array, pattern: bytes
    ) -> tuple[list, dict[tuple, list[int]]]:
        """The group of each token of one frame (by position) and the positions of each group, in
        order of first token (``places``: each token's step, _step_places; ``pattern``: which of
        them share a step, _step_pattern): a function of the tokens' calls and that pattern alone,
        made once per pair and function (``fid``: the frame's parsed frame; the frames that share
        a list of groups share their function, which Context._token_groups reads once per list)."""
        m = self.m
        keys = [call_of(m, t) for t in toks]
        called = (fid, tuple(keys), pattern)
        got = self._called.get(called)
        if got is None:
            got = self._called[called] = self._group_calls(keys, places)
        return got

    def _group_calls(self, keys: list, places: array) -> tuple[list, dict[tuple, list[int]]]:
        """_groups of the tokens' calls (``keys``)."""
        first: dict[tuple, int] = {}
        runs: dict = {}  # step -> {key: [first position, last position, count]}
        numbers = self._step_table()[3]
        for pos, (p, k) in enumerate(zip(places, keys)):
            first.setdefault(k, pos)
            number = numbers[p] if p >= 0 else None
            run = runs.setdefault(number, {}).get(k)
            if run is None:
                runs[number][k] = [pos, pos, 1]
            else:
                run[1], run[2] = pos, run[2] + 1
        root: dict[tuple, tuple] = {}

        def find(k):
            while root[k] != k:
                k = root[k]
            return k

        for by_key in runs.values():
            # a loop's body: calls repeated as often as each other (twice or more), their runs
            # overlapping; five ``with record_function(...)`` lines around two ``.to()`` are no loop
            loops = sorted(
                ((r[2], r[0], r[1], k) for k, r in by_key.items() if r[2] >= 2), key=lambda x: x[:3]
            )
            end, head, times = -1, None, 0
            for n, a, z, k in loops:
                if n != times:
                    end, head, times = -1, None, n
                root.setdefault(k, k)
                if head is not None and a <= end:  # overlapping runs: one loop's body
                    x, y = find(k), find(head)
                    if x != y:
                        lo, hi = (x, y) if first[x] < first[y] else (y, x)
                        root[hi] = lo
                    end = max(end, z)
                else:
                    head, end = k, z
        size: dict[tuple, int] = {}
        for k in root:
            size[find(k)] = size.get(find(k), 0) + 1
        groups: list = []
        positions: dict[tuple, list[int]] = {}  # in order of first token, as members keeps them
        for pos, k in enumerate(keys):  # a call a loop repeats alone keeps its own key
            g = ("loop", find(k)) if k in root and size[find(k)] > 1 else k
            groups.append(g)
            positions.setdefault(g, []).append(pos)
        return groups, positions


def call_of(m: TraceModel, tok: int) -> tuple:
    """``_call_of``, once per shape of token (FrameShapes.tokshape: what a token calls is a
    function of its subtree): a loop's frame holds each of its statements' tokens once a pass."""
    return _per_token_shape(m, "_calls", _call_of, tok)


def _per_token_shape(m: TraceModel, memo: str, fn, tok: int):
    """``fn(m, tok)``, made once per shape of statement token (``tokshape``: a function of the
    token's own subtree), kept in the model's ``memo``."""
    s = frame_shapes(m).token_shape(m, tok)
    done = m.__dict__.setdefault(memo, {})
    got = done.get(s)
    if got is None:
        got = done[s] = fn(m, tok)
    return got


def _call_of(m: TraceModel, tok: int) -> tuple:
    """What a frame's statement token calls, as the trace names it (never from the source):
    ``("builtin", "item")``, ``("op", "aten::add")``, ``("label", "data")``, a module call
    ``("module", "nn.Module: GPT_0")``, a python callee's frame with the method a library wrapper
    runs (``Optimizer.step``'s ``wrapper`` -> ``step``). Findings are grouped by the frame and this,
    with or without the source, so the source only decides which statement a finding sits on."""
    e = m.cpu[tok]
    if e.cat == "user_annotation":
        return ("label", _STEP_NUMBER.sub("", e.name))
    if e.cat == "python_function":
        mb = _BUILTIN_RE.match(e.name)
        if mb:  # as the op it runs (``.item()`` as ``int(t)``), told apart by that op's shapes
            op = next((c for c in m.children(tok) if m.cpu[c].cat == "cpu_op"), -1)
            return ("cpu_op", m.cpu[op].name, _dims(m, op)) if op >= 0 else ("builtin", mb.group(1))
        fr = m.frames.get(tok)
        if fr is None:  # ``nn.Module: Conv2d_3``: the class, not the instance a loop steps through
            return ("module", _INSTANCE.sub("", e.name))
        if fr.user:
            return ("call", fr.path, fr.line, fr.function)
        return ("call", fr.path, fr.function, *sorted(_labelled_method(m, tok)))
    # an operator the frame runs itself (``x @ w_up``, ``h @ w_vocab``): its shapes tell the uses apart
    return (e.cat, e.name, _dims(m, tok))


def _dims(m: TraceModel, i: int) -> bytes:
    a = m.cpu[i].args
    return bytes(a.input_dims) if a is not None else b""


_STEP_NUMBER = re.compile(r"#\d+$")  # ``ProfilerStep#3``: one label for every step
_INSTANCE = re.compile(r"_\d+$")


# torch labels an optimizer's methods ``Optimizer.step#AdamW.step``, ``Optimizer.zero_grad#SGD.zero_grad``
_METHOD_LABEL = re.compile(r"^[A-Za-z_]\w*\.([A-Za-z_]\w*)#")


def _labelled_method(m: TraceModel, i: int) -> set[str]:
    """The method a library frame (statement token ``i``) runs, from a ``Class.method#...`` label
    just beneath it (a breadth-first look at a few dozen events: the label opens the wrapped
    call). Once per shape of token (its subtree, all the look reads): the alignment and the call
    groups both ask (shared: never to be changed)."""
    return _per_token_shape(m, "_labelled_methods", _find_labelled_method, i)


def _find_labelled_method(m: TraceModel, i: int, budget: int = 64) -> set[str]:
    # breadth first through the flat child index, the queue read in place (not popped from its
    # front) and grown only while it holds fewer than ``budget`` events: no later one is read
    off, kids = m.child_index
    labels = m.cat_mask("user_annotation")
    queue = list(kids[off[i] : off[i + 1]])
    k = 0
    while k < len(queue) and k < budget:
        c = queue[k]
        k += 1
        if labels[c]:
            r = _METHOD_LABEL.match(m.cpu[c].name)
            if r:
                return {r.group(1)}
        if len(queue) < budget:
            queue.extend(kids[off[c] : off[c + 1]])
    return set()


def _match(sites: list[Site], is_def: bool, line: int, names: list) -> list[tuple[int, int]]:
    """The tokens of one call of a function aligned with its call sites, in order: (position
    among the tokens, index into ``sites``) of each token placed. ``names``: per token, the site
    names it can stand for and whether any call site will do (StatementResolver._names); a frame
    that starts mid-function (``line`` not its def) starts at ``line``."""
    cursor, first = 0, True
    if not is_def:
        cursor = next((k for k, st in enumerate(sites) if st.line >= line), 0)
    out = []
    for idx, (names_, any_call) in enumerate(names):
        start = cursor if first else cursor + 1
        limit, pending = None, 1
        if any_call:
            # The next token that names its site bounds this one; the calls before that site
            # are shared out, in order, among the unnamed tokens before it.
            for j in range(idx + 1, min(len(names), idx + 40)):
                n, anyc = names[j]
                if n and n != names_:
                    limit = _find(sites, start, n, False)
                    if limit is not None:
                        break
                if anyc:
                    pending += 1
        k = _find(sites, start, names_, any_call, limit, pending, None if first else cursor)
        if k is None:
            continue
        out.append((idx, k))
        cursor, first = k, False
    return out


def _find(
    sites: list[Site],
    start: int,
    names: set[str],
    any_call: bool,
    limit: Optional[int] = None,
    pending: int = 1,
    stay: Optional[int] = None,
) -> Optional[int]:
    """The next site from ``start`` (wrapping) named in ``names``; else, when any call will do,
    the last call site before ``limit`` (the site the next unambiguous token needs), or the next
    call site when there is no limit."""
    n = len(sites)
    span = n if limit is None else (limit - start) % n
    for d in range(n):
        k = (start + d) % n
        if sites[k].name in names:
            if not any_call or limit is None or d < span:
                return k
            break
    if not any_call:
        return None
    calls = [
        (start + d) % n for d in range(span if limit is not None else n) if _is_call(sites[(start + d) % n])
    ]
    if limit is not None and pending > len(calls) and stay is not None and _is_call(sites[stay]):
        return stay  # more unnamed calls than call sites before the next named one: a loop repeats it
    if not calls:
        return None
    if limit is None:
        return calls[0]
    k = calls[max(0, len(calls) - pending)]
    # the same call written twice before the next named site (``if a: loss = model(x)`` /
    # ``else: loss = model(x)``) ran once: the first one reached, not the untaken branch's twin
    return next(c for c in calls if sites[c].name == sites[k].name)


def _is_call(site: Site) -> bool:
    return not site.name.startswith(("<", "record_function:"))


def _resume_floor(func, line: int) -> int:
    """First line of the outermost loop statement of ``func`` that contains ``line``."""
    for node in walked(func):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and node is not func:
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                return node.lineno  # ast.walk is breadth-first: the outermost comes first
    return line


def resume_frames(m: TraceModel) -> dict[int, list[tuple[float, int]]]:
    """Per user frame, (start, break line) of the ``torch_dynamo_resume_in_<function>_at_<line>``
    frames it runs (Dynamo resumes a compiled function there after a graph break), in time order."""
    out: dict[int, list[tuple[float, int]]] = {}
    for j, fr in m.frames.matching(lambda fr: fr.function.startswith("torch_dynamo_resume_in_")):
        r = RESUME_RE.match(fr.function)
        p = m.parent[j]
        f = m.frame_of[p] if r and p >= 0 else -1
        if f >= 0 and m.frames[f].function == r.group(1):
            out.setdefault(f, []).append((m.cpu[j].ts, int(r.group(2))))
    for v in out.values():
        v.sort()
    return out
