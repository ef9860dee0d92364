"""The module view: which ``nn.Module`` instance did the work, for models whose code is a library's.

A ``with_stack`` trace marks every module call with a python event ``nn.Module: <Class>_<N>``
(``N`` counts the instances of that class in first-call order), nested like the calls:
``nn.Module: GPT2Block_3`` > ``module.py(..): _call_impl`` > ``modeling_gpt2.py(..): forward`` >
``nn.Module: GPT2Attention_3`` > ... The tree here is built from those markers over the model's
arrays: one node per instance *at its place in the tree* (a module called twice a step is one node
with two calls), each with its CPU time (total, self = not inside a submodule), the GPU work its
launches ran, forward and, through the ``fwdbwd`` flows, backward (as the hot lines charge a
line), its kernel classes and top kernels, and the memory it allocated.

Names: the profiler records classes, not attribute names. When the module's source is readable
here (the workspace, or the library installed in this interpreter) the parent class's
``__init__`` says which attribute holds which class (``self.c_attn = Conv1D(...)``,
``self.h = nn.ModuleList([GPT2Block(...) ...])``), and the children are named by it, in the order
``forward`` uses them: ``GPT2LMHeadModel.transformer.h.3.attn.c_attn``. Otherwise a child is named
by its class, with its position among same-class siblings when there are several
(``GPT2Model.GPT2Block[3].GPT2Attention.Conv1D[0]``); ``nn.Sequential`` children by position.

Repeated siblings (``GPT2Block`` ×12 under one parent) do the same work: each group is compared
member by member and submodule by submodule, and a node ``OUTLIER_RATIO`` off the median of its
peers, by at least ``OUTLIER_FLOOR`` of the tree's GPU time, says so.
"""

from __future__ import annotations

import ast
import re
import weakref
from array import array
from typing import Iterable, Optional

import msgspec

from ...protocol.types import HotLine, KernelStat, Location, ModuleGroup, ModuleNode, ModuleTree
from . import kernels
from .model import TraceModel
from .statements import walked
from .passes import arange
from .rules.util import median

PREFIX = "nn.Module: "
_INSTANCE_RE = re.compile(r"^(.*)_(\d+)$")
_CALL_IMPL = {"_call_impl", "_wrapped_call_impl", "__call__", "inner"}
_CONTAINERS = {"Sequential"}  # modules whose forward calls their children in order, named by index

# A repeated sibling is out of line when its GPU time is this far off its peers' median (either
# way): blocks of one ModuleList run the same kernels on the same shapes, and the kernels of a
# steady GPU vary by a few percent (MANIFEST: jitter_alone), so a quarter is beyond noise...
OUTLIER_RATIO = 1.25
# ...and the difference is at least this share of the tree's GPU time (a 2 µs dropout that takes
# 3 µs in one block is not worth a look).
OUTLIER_FLOOR = 0.01
MIN_GROUP = 3  # a median of two says nothing about which one is off
TOP_KERNELS = 3
# What one tree may hold, whatever the trace says (issue 28: markers nested 1,430 deep with long
# class names made each node's path name all its ancestors, a report over 1 GB). Real models nest
# a dozen levels (GPT-2: 6) with class names of a few dozen characters; a marker deeper than
# MAX_DEPTH counts in the module it is in (its time is there already), a class name is cut to
# MAX_NAME characters and a path to MAX_PATH (its head and tail kept); the tree's note says so.
MAX_DEPTH = 64
MAX_NAME = 200
MAX_PATH = 1000


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, its head and tail kept around an ellipsis."""
    if len(text) <= limit:
        return text
    tail = limit // 3
    return text[: limit - tail - 1] + "…" + text[-tail:]


class ModuleIndex:
    """The module markers of a trace as nodes (instance at its place in the tree) and, per cpu
    event, the node it ran in. Built once per model (``ModuleIndex.of``)."""

    def __init__(self, m: TraceModel):
        self._m = weakref.ref(m)  # weak: the model caches this index (``of``), see StepModel.ctx
        cpu = m.cpu
        pyf = m.cat_mask("python_function") if cpu else b""
        frames = m.frames.mask() if cpu else b""
        # python events that are not parsed frames: built-ins and module markers
        size = len(cpu)
        py = int.from_bytes(pyf, "little")
        # (py less its frames' bits: no negative int, whose & costs a third more than the xor)
        cand = (py ^ (py & int.from_bytes(frames, "little"))).to_bytes(size, "little") if size else b""
        events = list(m.passes.marked(cpu, cand, PREFIX)) if size else []
        mask = bytearray(size)
        for i in events:
            mask[i] = 1
        self.events = events
        self.above = m.passes.nearest(m.parent, bytes(mask)) if events else array("i")
        self.node_of_event = array("i", [-1]) * (len(cpu) if events else 0)
        self.parent: list[int] = []
        self.instance: list[str] = []
        self.first: list[int] = []  # each node's first marker event
        self.markers: list[list[int]] = []
        self.depth: list[int] = []
        self.folded = 0  # markers deeper than MAX_DEPTH, counted in the module they are in
        self.clipped = 0  # class names cut to MAX_NAME
        key: dict[tuple[int, str], int] = {}
        fwd_of = m.fwd_of
        first_of: dict[str, int] = {}  # instance -> its first node
        above, node_of_event, depth, markers = self.above, self.node_of_event, self.depth, self.markers
        skip = len(PREFIX)
        for i in events:
            pe = above[i]
            inst = cpu[i].name[skip:]
            if len(inst) > MAX_NAME:  # the class cut, its instance number kept
                mm = _INSTANCE_RE.match(inst)
                cls, num = (mm.group(1), "_" + mm.group(2)[-12:]) if mm else (inst, "")
                if len(cls) > MAX_NAME:
                    inst = clip(cls, MAX_NAME) + num
                    self.clipped += 1
            if pe >= 0:
                pn = node_of_event[pe]
                if pn >= 0 and depth[pn] >= MAX_DEPTH - 1:  # too deep: in its ancestor
                    node_of_event[i] = pn
                    self.folded += 1
                    continue
            else:
                pn = -1
                if fwd_of[i] >= 0:  # a forward rerun inside backward (activation checkpointing):
                    # the same module object, at its place in the forward (the backward op that
                    # reruns it belongs to an op inside it), else wherever it first ran
                    p = self.node_at(fwd_of[i])
                    while p >= 0 and self.instance[p] != inst:
                        p = self.parent[p]
                    p = p if p >= 0 else first_of.get(inst, -1)
                    if p >= 0:
                        node_of_event[i] = p
                        markers[p].append(i)
                        continue
            k = (pn, inst)
            n = key.get(k)
            if n is None:
                n = key[k] = len(self.parent)
                first_of.setdefault(inst, n)
                self.parent.append(pn)
                depth.append(depth[pn] + 1 if pn >= 0 else 0)
                self.instance.append(inst)
                self.first.append(i)
                markers.append([])
            node_of_event[i] = n
            markers[n].append(i)
        self.labels: Optional[list[str]] = None  # made on first use (``label``: they need the sources)

    @property
    def m(self) -> TraceModel:
        m = self._m()
        assert m is not None  # the model holds its index, so it outlives it
        return m

    @classmethod
    def of(cls, m: TraceModel) -> "ModuleIndex":
        idx = m.__dict__.get("_module_index")
        if idx is None:
            idx = m._module_index = cls(m)
        return idx

    def __len__(self) -> int:
        return len(self.parent)

    def node_at(self, i: int) -> int:
        """The node cpu event i ran in: its own module, or for a backward op its forward op's;
        -1 outside every module."""
        if not self.events or i < 0:
            return -1
        m = self.m
        if m.frame_of[i] < 0 and m.fwd_of[i] >= 0:
            i = m.fwd_of[i]
        n = self.node_of_event[i]
        if n >= 0:
            return n
        a = self.above[i]
        return self.node_of_event[a] if a >= 0 else -1

    def class_of(self, n: int) -> str:
        mm = _INSTANCE_RE.match(self.instance[n])
        return mm.group(1) if mm else self.instance[n]


def build_tree(ctx) -> ModuleTree:
    """The module tree of the context's trace (``ctx``: an engine ``Context``)."""
    m, a = ctx.model, ctx.a
    idx = ModuleIndex.of(m)
    steps = max(1, len(m.steps))
    gpu_total = a.cuda_total_us  # the analyses' sum of every GPU event's duration, in event order
    if not idx.events:
        return ModuleTree(available=False, steps=steps, gpu_us=round(gpu_total, 3), note=_absent_note(m))
    n = len(idx)
    nodes = [
        ModuleNode(
            id=k,
            parent=idx.parent[k],
            path="",
            name="",
            class_name=idx.class_of(k),
            instance=idx.instance[k],
            role="",
            depth=0,
        )
        for k in range(n)
    ]
    durs = m.durs
    # forward CPU: a marker spans the call; self is what no child marker covers
    # (the sums in local floats, in the same order: a node's field read and written per marker
    # cost more than the addition)
    above, node_of = idx.above, idx.node_of_event
    self_us = [nd.cpu_self_us for nd in nodes]
    for nd, marks in zip(nodes, idx.markers):
        nd.calls += len(marks)
        total = nd.cpu_total_us
        for i in marks:
            d = durs[i]
            total += d
            pe = above[i]
            if pe >= 0:
                self_us[node_of[pe]] -= d
        nd.cpu_total_us = total
    for nd, own in zip(nodes, self_us):
        nd.cpu_self_us = own + nd.cpu_total_us
    run, frame_of, fwd_of, above, node_of = m.passes, m.frame_of, m.fwd_of, idx.above, idx.node_of_event
    # backward CPU: the autograd engine's per-node calls, charged to their forward op's module
    evaluate = array("i", m.named("autograd::engine::evaluate_function"))
    for k, i in zip(run.module_nodes(evaluate, frame_of, fwd_of, above, node_of, True)[0], evaluate):
        if k >= 0:
            nodes[k].cpu_backward_us += durs[i]
    # GPU: each kernel to the module its launch ran in (own, not yet rolled up; a launch is never
    # a marker itself)
    launch_nodes, backward = run.module_nodes(m.launcher, frame_of, fwd_of, above, node_of, False)
    fwd, bwd, launches, by_class, by_name = run.module_gpu(
        m.gpu, a.gpu_class, launch_nodes, backward, m.launcher, n
    )
    counts: list[dict] = []  # kernels per class
    kstats: list[dict] = []
    for k, nd in enumerate(nodes):
        nd.gpu_forward_us, nd.gpu_backward_us, nd.launches = fwd[k], bwd[k], launches[k]
        nd.kernel_classes = {cls: t for cls, _, t in by_class[k]}
        counts.append({cls: c for cls, c, _ in by_class[k]})
        kstats.append({name: [cls, c, t] for name, cls, c, t in by_name[k]})
    # memory: each allocation to the module it ran in (it may sit directly in a marker)
    owners = run.module_nodes(m.memory.owner, frame_of, fwd_of, above, node_of, True)[0]
    for k, nbytes in run.owner_sums(arange(run, len(owners)), owners, m.memory.nbytes).items():
        nodes[k].bytes_allocated += nbytes
    for nd in nodes:
        nd.gpu_self_us = nd.gpu_forward_us + nd.gpu_backward_us
    # roll up: a child's id is always above its parent's (made at its first marker, inside the parent's)
    for k in range(n - 1, -1, -1):
        nd = nodes[k]
        nd.gpu_us = nd.gpu_forward_us + nd.gpu_backward_us
        p = nd.parent
        if p < 0:
            continue
        pn = nodes[p]
        pn.gpu_forward_us += nd.gpu_forward_us
        pn.gpu_backward_us += nd.gpu_backward_us
        pn.cpu_backward_us += nd.cpu_backward_us
        pn.launches += nd.launches
        pn.bytes_allocated += nd.bytes_allocated
        for c, v in nd.kernel_classes.items():
            pn.kernel_classes[c] = pn.kernel_classes.get(c, 0.0) + v
        for c, v in counts[k].items():
            counts[p][c] = counts[p].get(c, 0) + v
        for name, (c, cnt, t) in kstats[k].items():
            st = kstats[p].setdefault(name, [c, 0, 0.0])
            st[1] += cnt
            st[2] += t
    for k, nd in enumerate(nodes):
        nd.gpu_us = nd.gpu_forward_us + nd.gpu_backward_us
        nd.kernel_counts = counts[k]
        top = sorted(kstats[k].items(), key=lambda kv: -kv[1][2])[:TOP_KERNELS]
        nd.top_kernels = [
            KernelStat(name=kernels.short_name(name), kernel_class=c, count=cnt, total_us=round(t, 3))
            for name, (c, cnt, t) in top
        ]
    kids: list[list[int]] = [[] for _ in range(n)]
    roots = []
    for k, nd in enumerate(nodes):
        (kids[nd.parent] if nd.parent >= 0 else roots).append(k)  # first-call order
    _name(ctx, idx, nodes)
    for k, nd in enumerate(nodes):
        nd.depth = 0 if nd.parent < 0 else nodes[nd.parent].depth + 1
        key = ctx.line_key(idx.first[k])
        nd.call_site = ctx.location_of_key(key) if key is not None else None
        nd.source = _source_location(ctx, idx, k)
    module_gpu = sum(nodes[r].gpu_us for r in roots)
    groups = _groups(nodes, kids, module_gpu, steps, _Inputs(m, idx, kstats))
    for nd in nodes:
        nd.children = sorted(kids[nd.id], key=lambda c: -nodes[c].gpu_us)
        for f in (
            "cpu_total_us",
            "cpu_self_us",
            "cpu_backward_us",
            "gpu_us",
            "gpu_forward_us",
            "gpu_backward_us",
            "gpu_self_us",
        ):
            setattr(nd, f, round(getattr(nd, f), 3))
        nd.kernel_classes = {
            c: round(v, 3) for c, v in sorted(nd.kernel_classes.items(), key=lambda kv: -kv[1])
        }
    notes = []
    if m.steps and module_gpu < 0.5 * gpu_total and gpu_total:
        notes.append(
            f"{100 * module_gpu / gpu_total:.0f}% of the GPU time ran inside a module; the rest "
            "(optimizer, loss, data movement outside forward) is on the hot lines"
        )
    if idx.folded:
        notes.append(
            f"{idx.folded} module call(s) nested deeper than {MAX_DEPTH} levels are counted "
            "in the module they ran in"
        )
    if idx.clipped:
        notes.append(f"{idx.clipped} module class name(s) longer than {MAX_NAME} characters are cut")
    note = "; ".join(notes) or None
    return ModuleTree(
        available=True,
        steps=steps,
        gpu_us=round(gpu_total, 3),
        module_gpu_us=round(module_gpu, 3),
        nodes=nodes,
        roots=sorted(roots, key=lambda r: -nodes[r].gpu_us),
        groups=groups,
        note=note,
    )


def _absent_note(m: TraceModel) -> str:
    if not m.with_stack:
        return (
            "no module frames: the trace was recorded without with_stack=True, which records the "
            "nn.Module calls (profile(..., with_stack=True))"
        )
    if not m.frames:
        return "no module frames: the trace has no python frames"
    return (
        "no module frames: the trace has python frames but no nn.Module calls (compiled code, "
        "a TorchScript model, or no nn.Module in the profiled steps)"
    )


# ---- names --------------------------------------------------------------------------------------
def _name(ctx, idx: ModuleIndex, nodes: list[ModuleNode]) -> None:
    labels = label(ctx, idx)
    for k, nd in enumerate(nodes):  # parents first: ids grow downwards
        nd.name = labels[k]
        nd.path = labels[k] if nd.parent < 0 else clip(f"{nodes[nd.parent].path}.{labels[k]}", MAX_PATH)
        nd.role = generic_name(idx, k)


def label(ctx, idx: ModuleIndex) -> list[str]:
    """Each node's label under its parent (``c_attn``, ``h.3``, ``Linear[1]``; a root's class),
    from the parent classes' sources where readable (``ctx``: an engine ``Context``): made once per
    index, on first use (the tree, the module a finding names)."""
    if idx.labels is not None:
        return idx.labels
    classes = _ClassSources(ctx)
    n = len(idx)
    cls = [idx.class_of(k) for k in range(n)]
    kids: list[list[int]] = [[] for _ in range(n)]
    labels = [""] * n
    for k in range(n):  # first-call order
        p = idx.parent[k]
        if p >= 0:
            kids[p].append(k)
        else:
            labels[k] = cls[k]
    for p, children in enumerate(kids):
        if not children:
            continue
        given = _attr_labels(cls[p], [cls[c] for c in children], classes.attrs(idx, p))
        by_class: dict[str, list[int]] = {}
        for c in children:
            by_class.setdefault(cls[c], []).append(c)
        for pos, c in enumerate(children):
            if given and given.get(pos):
                labels[c] = given[pos]
            else:
                same = by_class[cls[c]]
                labels[c] = cls[c] if len(same) == 1 else f"{cls[c]}[{same.index(c)}]"
    idx.labels = labels
    return labels


def _attr_labels(parent_class: str, child_classes: list[str], attrs) -> dict[int, str]:
    """Child position -> attribute path (``c_attn``, ``h.3``), from the parent class's source."""
    if parent_class in _CONTAINERS:  # nn.Sequential calls its children in order: their names
        return {pos: str(pos) for pos in range(len(child_classes))}
    if attrs is None:
        return {}
    kinds, refs = attrs
    out: dict[int, str] = {}
    used: set[str] = set()
    counts: dict[str, int] = {}
    ordered = sorted(kinds, key=lambda a: refs.get(a, 1 << 30))
    for pos, cls in enumerate(child_classes):
        one = [x for x in ordered if kinds[x] == ("one", cls) and x not in used]
        if one:
            out[pos] = one[0]
            used.add(one[0])
            continue
        many = [x for x in ordered if kinds[x] == ("list", cls)]
        if many:
            x = many[0]
            out[pos] = f"{x}.{counts.get(x, 0)}"
            counts[x] = counts.get(x, 0) + 1
    rest = [pos for pos in range(len(child_classes)) if pos not in out]
    unknown = [x for x in ordered if kinds[x] == ("?", None) and x in refs and x not in used]
    if rest and len(rest) == len(unknown):  # as many unnamed children as unnamed attributes forward uses
        out.update(zip(rest, unknown))
    return out


class _ClassSources:
    """Per module class, from its source when readable: which attribute holds which module class
    (``__init__``) and the order the class's methods first use each attribute."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._cache: dict[tuple[str, int], Optional[tuple]] = {}

    def attrs(self, idx: ModuleIndex, node: int):
        fr = forward_frame(idx, node)
        if fr is None:
            return None
        local = _local(self.ctx, fr.path)
        if local is None:
            return None
        key = (local, fr.line)
        if key not in self._cache:
            self._cache[key] = _class_attrs(self.ctx.statements.tree(local), fr.line)
        return self._cache[key]


def forward_frame(idx: ModuleIndex, node: int):
    """The parsed frame of the module's own ``forward`` under its first marker: past
    ``_call_impl`` and through wrappers (transformers decorates its forwards:
    ``generic.py(..): wrapper`` > ``modeling_gpt2.py(..): forward``), within a few levels; the first
    frame below ``_call_impl`` when none is called ``forward``; None when the trace has none."""
    m = idx.m
    level = [c for c in m.children(idx.first[node])]
    first = None
    for _ in range(4):
        below = []
        for i in level:
            fr = m.frames.get(i)
            if fr is None:
                continue
            if fr.function in _CALL_IMPL and fr.path.replace("\\", "/").endswith(
                "torch/nn/modules/module.py"
            ):
                below.extend(m.children(i))
                continue
            if fr.function == "forward":
                return fr
            if first is None:
                first = fr
            below.extend(m.children(i))
        level = below
    return first


def _local(ctx, path: str) -> Optional[str]:
    return ctx.sources.resolve(path) or ctx.options.libraries().resolve(path)


def _class_attrs(tree, line: int):
    if tree is None:
        return None
    cls = None
    for node in walked(tree):
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if cls is None or node.lineno > cls.lineno:
                cls = node
    if cls is None:
        return None
    kinds: dict[str, tuple] = {}
    methods = [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for f in methods:
        if f.name != "__init__":
            continue
        for st in walked(f):
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                        and st.value is not None
                    ):
                        kinds.setdefault(t.attr, _kind(st.value))
    kinds = {k: v for k, v in kinds.items() if v is not None}
    # first use of each attribute, forward first, then the other methods in source order
    refs: dict[str, int] = {}
    order = sorted(methods, key=lambda f: (f.name != "forward", f.lineno))
    seq = 0
    for f in order:
        if f.name == "__init__":
            continue
        uses = [
            n
            for n in walked(f)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
        ]
        for u in sorted(uses, key=lambda u: (u.lineno, u.col_offset)):
            if u.attr not in refs:
                refs[u.attr] = seq
                seq += 1
    return kinds, refs


def _kind(value: ast.AST):
    """("one", Class) for ``Class(...)``, ("list", Class) for a ModuleList of one class, ("?", None)
    for a value whose module class the source does not say (a factory, ``ACT2FN[...]``), None for
    a plain value."""
    if isinstance(value, ast.Call):
        name = _callee(value.func)
        if name in ("ModuleList", "ModuleDict"):
            inner = _element_class(value.args[0]) if value.args else None
            return ("list", inner) if inner else ("?", None)
        if name and name[:1].isupper():
            return ("one", name)
        return ("?", None)  # self._make_layer(...), get_activation(...)
    if isinstance(value, ast.Subscript):
        return ("?", None)
    return None


def _callee(f: ast.AST) -> Optional[str]:
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return None


def _element_class(arg: ast.AST) -> Optional[str]:
    if isinstance(arg, (ast.ListComp, ast.GeneratorExp)) and isinstance(arg.elt, ast.Call):
        return _callee(arg.elt.func)
    if isinstance(arg, ast.List) and arg.elts and all(isinstance(e, ast.Call) for e in arg.elts):
        names = {_callee(e.func) for e in arg.elts}
        return names.pop() if len(names) == 1 else None
    return None


def _source_location(ctx, idx: ModuleIndex, node: int) -> Optional[Location]:
    fr = forward_frame(idx, node)
    if fr is None:
        return None
    return Location(
        path=_local(ctx, fr.path),
        line=fr.line,
        precision="function",
        function=fr.function,
        trace_path=fr.path,
        library=not fr.user,
    )


def library_lines(tree: ModuleTree, diagnostics: list) -> list[HotLine]:
    """Opt-in (``Options.library_lines``): the modules' costs on their library ``forward`` lines
    when those files are here (one line per class: its instances summed), and each finding that
    names a module gets that module's library line among its related locations."""
    if not tree.available:
        return []
    lines: dict[tuple[str, int], HotLine] = {}
    kernels_of: dict[tuple[str, int], dict[str, KernelStat]] = {}
    by_role: dict[str, list[Location]] = {}
    for nd in tree.nodes:
        src = nd.source
        if src is None or not src.library or not src.path:
            continue
        by_role.setdefault(nd.role, []).append(src)
        key = (src.path, src.line)
        h = lines.get(key)
        if h is None:
            h = lines[key] = HotLine(
                path=src.path,
                line=src.line,
                function=f"{nd.class_name}.{src.function}",
                precision="function",
                trace_path=src.trace_path,
                library=True,
            )
        h.calls += nd.calls
        h.cpu_self_us += nd.cpu_self_us
        h.cpu_total_us += nd.cpu_total_us
        h.cpu_backward_us += nd.cpu_backward_us
        h.gpu_us += nd.gpu_us
        h.gpu_forward_us += nd.gpu_forward_us
        h.gpu_backward_us += nd.gpu_backward_us
        h.launches += nd.launches
        h.bytes_allocated += nd.bytes_allocated
        h.kernel_classes = {
            c: h.kernel_classes.get(c, 0.0) + nd.kernel_classes.get(c, 0.0)
            for c in {*h.kernel_classes, *nd.kernel_classes}
        }
        ks = kernels_of.setdefault(key, {})
        for kn in nd.top_kernels:
            have = ks.get(kn.name)
            ks[kn.name] = (
                kn
                if have is None
                else KernelStat(
                    name=kn.name,
                    kernel_class=kn.kernel_class,
                    count=have.count + kn.count,
                    total_us=have.total_us + kn.total_us,
                )
            )
    for key, h in lines.items():
        h.top_kernels = sorted(kernels_of[key].values(), key=lambda kn: -kn.total_us)[:5]
        for f in (
            "cpu_self_us",
            "cpu_total_us",
            "cpu_backward_us",
            "gpu_us",
            "gpu_forward_us",
            "gpu_backward_us",
        ):
            setattr(h, f, round(getattr(h, f), 3))
        h.kernel_classes = {c: round(v, 3) for c, v in h.kernel_classes.items()}
    for d in diagnostics:
        role = d.location.module
        for src in by_role.get(role, [])[:1] if role else []:
            d.related.append(
                Location(
                    path=src.path,
                    line=src.line,
                    precision="function",
                    function=src.function,
                    trace_path=src.trace_path,
                    module=role,
                    library=True,
                )
            )
    return sorted(lines.values(), key=lambda h: -h.gpu_us)


# ---- repeated siblings ----------------------------------------------------------------------------
def _groups(
    nodes: list[ModuleNode], kids: list[list[int]], total: float, steps: int, inputs
) -> list[ModuleGroup]:
    out = []
    floor = OUTLIER_FLOOR * total
    for p, children in enumerate(kids):
        by_class: dict[str, list[int]] = {}
        for c in children:
            by_class.setdefault(nodes[c].class_name, []).append(c)
        for cls, members in by_class.items():
            if len(members) < MIN_GROUP:
                continue
            vals = [nodes[c].gpu_us for c in members]
            g = ModuleGroup(
                parent=p,
                class_name=cls,
                members=members,
                gpu_median_us=round(median(vals), 3),
                gpu_min_us=round(min(vals), 3),
                gpu_max_us=round(max(vals), 3),
            )
            _compare(nodes, kids, inputs, members, f"{cls} siblings", floor, steps, g.outliers)
            out.append(g)
    return out


def _work(nodes: list[ModuleNode], kids: list[list[int]], inputs, k: int) -> tuple:
    """What a node does, to tell peers (the same work, so the same time expected) from siblings
    that merely share a class: its calls; what its first call's ops took in (the set of their
    input shapes, with ``record_shapes``; else the set of kernel names it ran): the stages of a
    ResNet share a class and a structure but not their shapes; then a composite module's
    submodules (name, class, calls; a block with a ``downsample`` its peers lack is other work),
    a leaf's kernels per class (the first Linear of a net skips its input gradient, one GEMM
    fewer, and is not a slow peer). A composite's kernel mix is left out: a block run in fp32
    adds cast kernels, and that block is exactly the one to compare."""
    nd = nodes[k]
    if kids[k]:
        return (
            nd.calls,
            inputs(k),
            tuple(sorted((nodes[c].name, nodes[c].class_name, nodes[c].calls) for c in kids[k])),
        )
    return nd.calls, inputs(k), tuple(sorted(nd.kernel_counts.items()))


class _Inputs:
    """Per node, the set of input shapes of the ops under its first call (``record_shapes``), else
    the set of kernel names it ran; computed when asked (only repeated siblings are)."""

    def __init__(self, m: TraceModel, idx: ModuleIndex, kstats: list[dict]):
        self.m, self.idx, self.kstats = m, idx, kstats
        self.shapes = m.record_shapes
        self._memo: dict[int, frozenset] = {}

    def __call__(self, k: int) -> frozenset:
        hit = self._memo.get(k)
        if hit is None:
            hit = None
            if self.shapes:
                cpu = self.m.cpu
                hit = frozenset(
                    bytes(e.args.input_dims)
                    for j in self.m.subtree(self.idx.first[k])
                    for e in (cpu[j],)
                    if e.cat == "cpu_op" and e.args is not None and e.args.input_dims
                )
            if not hit:
                hit = frozenset(self.kstats[k])
            self._memo[k] = hit
        return hit


def _kernel_difference(nodes: list[ModuleNode], k: int, group: list[int]) -> str:
    """The top kernels of node k that none of its peers runs, as a clause of its outlier note."""
    theirs = {kn.name for c in group if c != k for kn in nodes[c].top_kernels}
    odd = [kn.name for kn in nodes[k].top_kernels if kn.name not in theirs]
    return (
        f"; runs {', '.join(kernels.short_name(n, 60) for n in odd[:2])}, which its peers do not"
        if odd
        else ""
    )


def _compare(
    nodes, kids, inputs, peers: list[int], what: str, floor: float, steps: int, found: list[int]
) -> None:
    """Flag the peers doing the same work (``_work``) whose GPU time is out of line with their
    median, then compare their submodules, matched by name."""
    same: dict[tuple, list[int]] = {}
    for c in peers:
        same.setdefault(_work(nodes, kids, inputs, c), []).append(c)
    for group in same.values():
        if len(group) < MIN_GROUP:
            continue
        vals = [nodes[c].gpu_us for c in group]
        med = median(vals)
        for c, v in zip(group, vals):
            if med > 0 and abs(v - med) >= floor and (v >= OUTLIER_RATIO * med or v * OUTLIER_RATIO <= med):
                nodes[c].outlier = (
                    f"GPU {v / med:.2f}x the median of {len(group)} {what} doing the "
                    f"same work ({_ms(v / steps)} vs {_ms(med / steps)} per step)"
                    + _kernel_difference(nodes, c, group)
                )
                found.append(c)
        named: dict[str, list[int]] = {}
        for c in group:
            for k in kids[c]:
                named.setdefault(nodes[k].name, []).append(k)
        for name, sub in named.items():
            if len(sub) == len(group):
                _compare(nodes, kids, inputs, sub, f"{name} submodules of its peers", floor, steps, found)


# ---- what the rules and the hovers use ----------------------------------------------------------
def generic_name(tree_or_index, node: int) -> str:
    """The node as a user can act on it, without the instance: ``GPT2Attention.c_attn`` (parent
    class and attribute), or the class for a root."""
    idx = tree_or_index
    label = idx.labels[node] if idx.labels else idx.class_of(node)
    p = idx.parent[node]
    if p < 0:
        return label
    label = re.sub(r"\[\d+\]$", "", label)
    label = re.sub(r"\.\d+$", "", label)
    if label.isdigit():  # a Sequential's child: its class says more
        label = idx.class_of(node)
    return f"{idx.class_of(p)}.{label}"


class Place(msgspec.Struct, frozen=True):
    """The module where most of some work ran (``describe``)."""

    name: str  # GPT2Attention.c_attn
    instances: int
    share: float  # of the work's weight, 0..1

    def __str__(self) -> str:
        parts = ([f"{self.instances} instances"] if self.instances > 1 else []) + (
            [f"{100 * self.share:.0f}%"] if self.share < 0.995 else []
        )
        return f"`{self.name}`" + (f" ({', '.join(parts)})" if parts else "")


def describe(idx: ModuleIndex, weighted: Iterable[tuple[int, float]]) -> Optional[Place]:
    """Where a set of weighted cpu events ran, for a finding's message: the module (parent class
    and attribute) holding the most weight, its instances and its share of the weight:
    ``GPT2Attention.c_attn`` (12 instances, 40%); None when none ran in a module."""
    weight: dict[str, float] = {}
    nodes: dict[str, set[int]] = {}
    names: dict[int, str] = {}  # node -> its generic name, made once per node
    pairs = list(weighted)
    if not idx.events:
        return None
    m = idx.m
    at = m.passes.module_nodes(  # node_at of every event, in one pass
        array("i", [i for i, _ in pairs]), m.frame_of, m.fwd_of, idx.above, idx.node_of_event, True
    )[0]
    total = 0.0
    for (_, w), k in zip(pairs, at):
        total += w
        if k >= 0:
            name = names.get(k)
            if name is None:
                name = names[k] = generic_name(idx, k)
            weight[name] = weight.get(name, 0.0) + w
            nodes.setdefault(name, set()).add(k)
    if not weight:
        return None
    name = max(weight, key=weight.get)
    return Place(name, len(nodes[name]), weight[name] / total if total > 0 else 1.0)


def tree_document(tree: Optional[ModuleTree], depth: int = 4) -> dict:
    """The module tree for a machine reader (the MCP server): whether the trace has one (and why
    not), the steps, the text ``render`` prints, and the nodes down to ``depth`` as wire dicts
    (times summed over the steps, as in the Report), hottest first."""
    from ...protocol.types import to_builtins

    if tree is None or not tree.available:
        return {
            "available": False,
            "note": tree.note if tree else "no module tree in this report",
            "steps": tree.steps if tree else 0,
            "text": "\n".join(render(tree)),
            "nodes": [],
            "groups": [],
        }
    keep = [nd for nd in tree.nodes if nd.depth < depth]
    keep.sort(key=lambda nd: (nd.depth, -nd.gpu_us))
    return {
        "available": True,
        "note": tree.note,
        "steps": tree.steps,
        "gpuUs": tree.gpu_us,
        "moduleGpuUs": tree.module_gpu_us,
        "text": "\n".join(render(tree, depth=depth)),
        "nodes": [to_builtins(nd) for nd in keep],
        "groups": [to_builtins(g) for g in tree.groups],
    }


def top_modules(tree: Optional[ModuleTree], path: str, line: int, limit: int = 5) -> list[ModuleNode]:
    """The hottest modules called from a user line (for its hover): the nodes whose call site is
    the line, then their submodules, by GPU time."""
    if tree is None or not tree.available:
        return []
    here = [
        nd
        for nd in tree.nodes
        if nd.call_site is not None and nd.call_site.line == line and nd.call_site.path == path
    ]
    if not here:
        return []
    ids = {nd.id for nd in here}
    under = [nd for nd in tree.nodes if nd.parent in ids]
    ranked = sorted(here, key=lambda nd: -nd.gpu_us) + sorted(under, key=lambda nd: -nd.gpu_us)
    return ranked[:limit]


def render(tree: Optional[ModuleTree], depth: int = 4, min_share: float = 0.005) -> list[str]:
    """The tree as text lines, hottest first, times per step, down to ``depth`` levels. Repeated
    siblings (``h.0`` … ``h.11``) are listed together, one line each, where their hottest stands;
    only the first of them (and any out of line) is opened. Modules under ``min_share`` of the
    tree's GPU time are folded into one line."""
    if tree is None:
        return ["modules: not computed"]
    if not tree.available:
        return [f"modules: {tree.note}"]
    nodes = tree.nodes
    st = tree.steps
    total = tree.module_gpu_us or 1.0
    grouped = {m: g for g in tree.groups for m in g.members}
    out = [f"modules (GPU per step = forward + backward, CPU forward per step; {st} steps):"]

    def one(nd: ModuleNode, indent: int) -> None:
        calls = nd.calls / st
        kc = (
            ", ".join(f"{c} {100 * v / nd.gpu_us:.0f}%" for c, v in list(nd.kernel_classes.items())[:2])
            if nd.gpu_us
            else ""
        )
        text = (
            f"{'  ' * indent}{nd.name}"
            + (f" ×{calls:g}" if calls != 1 else "")
            + (f" [{nd.class_name}]" if nd.class_name not in nd.name else "")
            + f"  {_ms(nd.gpu_us / st)} ({100.0 * nd.gpu_us / total:.0f}%) = {_ms(nd.gpu_forward_us / st)}"
            f" + {_ms(nd.gpu_backward_us / st)}; CPU {_ms(nd.cpu_total_us / st)}"
            + (f"; {kc}" if kc else "")
            + (f"; allocates {_mib(nd.bytes_allocated / st)}" if nd.bytes_allocated else "")
        )
        if nd.outlier:
            text += f"  <- out of line: {nd.outlier}"
        out.append(text)

    def walk(nd: ModuleNode, indent: int, open_: bool = True) -> None:
        one(nd, indent)
        if not open_ or indent >= depth:
            return
        shown: set[int] = set()
        small = 0.0
        n_small = 0
        for c in nd.children:
            if c in shown:
                continue
            ch = nodes[c]
            g = grouped.get(c)
            if g is not None and g.parent == nd.id:
                for k, mem in enumerate(g.members):  # first-call order: h.0, h.1, ...
                    shown.add(mem)
                    walk(nodes[mem], indent + 1, k == 0 or mem in g.outliers or _has_outlier(nodes, mem))
                continue
            if ch.gpu_us < min_share * total and not ch.outlier:
                small += ch.gpu_us
                n_small += 1
                continue
            shown.add(c)
            walk(ch, indent + 1)
        if n_small:
            out.append(f"{'  ' * (indent + 1)}… {n_small} more, {_ms(small / st)}")

    for r in tree.roots:
        walk(nodes[r], 1)
    for g in tree.groups:
        if g.outliers:
            out.append(
                f"  out of line among {len(g.members)} {g.class_name}: "
                + ", ".join(nodes[k].path for k in g.outliers[:4])
            )
    if tree.note:
        out.append(f"  = note: {tree.note}")
    return out


def _has_outlier(nodes: list[ModuleNode], k: int) -> bool:
    return any(nodes[c].outlier or _has_outlier(nodes, c) for c in nodes[k].children)


def _mib(n: float) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"
