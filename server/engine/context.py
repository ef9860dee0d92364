"""What a rule sees: the ``Context`` (model, analyses, options) and the helpers that place a
finding on a user's line. The rules import this module, never ``analyze``, which imports them.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ...protocol.options import AnalysisOptions
from ...protocol.types import Diagnostic, HotLine, Location
from .analyses import Analysis
from .model import TraceModel
from .modules import ModuleIndex, Place, describe, generic_name, label
from .passes import NO_LINE
from .sourcemap import LibrarySources, SourceMap
from .statements import CallGroups, Site, StatementResolver, frame_shapes


# The report's parts beside its summary and findings, each made only when asked for (Options.parts):
# the hot lines (hover, code lens, the JSON report) and the module tree (``profd-client modules``,
# ``--modules``, the JSON report). What a rule reads of them is made on first use regardless
# (Context.hot, Context.modules).
PARTS = ("hot_lines", "modules")


@dataclass
class Options:
    workspace: list[str] = field(default_factory=list)
    path_map: list[tuple[str, str]] = field(default_factory=list)
    disabled: set[str] = field(default_factory=set)  # rule codes not to run
    source_map: Optional[SourceMap] = None
    # where installed libraries' sources are (None: this interpreter's site-packages; [] none):
    # the module tree reads their classes to name modules by attribute (``transformer.h.3``)
    library_roots: Optional[list[str]] = None
    library_sources: Optional[LibrarySources] = None
    # per rule code, thresholds a team set ([tool.profd.rules.CODE]); the names a rule reads are
    # the ones its declaration lists (``@rule(..., thresholds=...)``, see Context.threshold)
    thresholds: dict[str, dict[str, float]] = field(default_factory=dict)
    # also place hot lines and related locations on library lines (a module's forward) found here
    library_lines: bool = False
    # the parts of the report to make (``PARTS``; every one by default): a caller that shows only
    # the findings and the summary asks for none
    parts: frozenset[str] = frozenset(PARTS)

    # what is built where the analysis runs, or asked of it there, never sent
    # (``protocol.options.AnalysisOptions`` has every other field): a daemon makes every part, for
    # its hovers and for each client it serves
    LOCAL = ("source_map", "library_roots", "library_sources", "parts")

    def wire(self) -> AnalysisOptions:
        """These options as they travel to a daemon (every field given)."""
        return AnalysisOptions(
            workspace=list(self.workspace),
            path_map=[(r, loc) for r, loc in self.path_map],
            disabled=sorted(self.disabled),
            thresholds={c: dict(kv) for c, kv in self.thresholds.items()},
            library_lines=self.library_lines,
        )

    def given(self, wire: AnalysisOptions) -> "Options":
        """These options with what ``wire`` gives in place of their own (a field it leaves None
        keeps the value here); what is built locally starts afresh."""
        got = {
            "workspace": list(wire.workspace) if wire.workspace is not None else list(self.workspace),
            "path_map": [
                (r, loc) for r, loc in (wire.path_map if wire.path_map is not None else self.path_map)
            ],
            "disabled": set(wire.disabled if wire.disabled is not None else self.disabled),
            "thresholds": {
                c: dict(kv)
                for c, kv in (wire.thresholds if wire.thresholds is not None else self.thresholds).items()
            },
            "library_lines": wire.library_lines if wire.library_lines is not None else self.library_lines,
        }
        return Options(library_roots=self.library_roots, parts=self.parts, **got)

    def sources(self) -> SourceMap:
        if self.source_map is None:
            self.source_map = SourceMap(self.workspace, self.path_map)
        return self.source_map

    def libraries(self) -> LibrarySources:
        if self.library_sources is None:
            self.library_sources = LibrarySources(self.library_roots)
        return self.library_sources


@dataclass
class LineKey:
    trace_path: str
    line: int
    function: str
    precision: str
    site: Optional[Site] = field(
        default=None, compare=False
    )  # the call's columns, not part of the line's identity


class Context:
    """What a rule sees: the model, the analyses, and helpers that place findings on lines."""

    def __init__(self, model: TraceModel, analysis: Analysis, trace_path: str, options: Options):
        self.model = model
        self.a = analysis
        self.trace_path = trace_path
        self.options = options
        self.sources = options.sources()
        self.statements = StatementResolver(model, self.sources)
        self.calls = CallGroups(model)
        self._keys: dict[int, LineKey] = {}
        self._ck = None  # per event, the key its line is cached under (see line_key)
        self._groups: dict[int, tuple] = {}  # that key -> the findings' group (see line_id)
        self._placed: dict[
            int, tuple[Location, tuple, int]
        ] = {}  # id(location) -> (it, its group, its event)
        self._mapped: dict[str, bool] = {}  # trace path of every location made -> found in the workspace
        self._hot: Optional[dict[tuple, HotLine]] = None  # see hot
        self._callers: Optional[dict[int, LineKey]] = None  # user frame event -> its calling statement
        self._columns: dict[Any, Any] = {}  # the per-GPU-event columns several rules read (below)

    def rules_done(self) -> None:
        """Once every rule has run, let go of what only the rules read: the columns they share
        (``_columns``) and the model's indexes (``TraceModel.let_go_of_indexes``). The impact
        replay, the analysis' last big allocation, and the report's parts read none of them (a
        later reader makes one again): ~1 MB less at the 51 MB tiling's peak."""
        self._columns = {}
        self.model.let_go_of_indexes()

    @property
    def hot(self) -> dict[tuple, HotLine]:
        """The hot lines by (trace path, line), computed on first use: a part of the report, and
        what some rules (and the impact of their fixes) read."""
        if self._hot is None:
            from .hotlines import hot_lines  # it places lines through this module

            self._hot = hot_lines(self)
        return self._hot

    @property
    def n_steps(self) -> int:
        return max(1, len(self.model.steps))

    # ---- placing findings --------------------------------------------------------------------
    def line_key(self, i: int) -> Optional[LineKey]:
        """The user source line that owns cpu event i (statement when recoverable)."""
        m = self.model
        if not m.has_call_from:  # the common case: one cached key per statement token
            key = self._keys.get(self.line_tokens()[i])
            if key is not None:
                return key
        f, src = m.line_source(i)
        if f < 0:
            return None
        # Every event under one statement token shares its line: cache per token, not per event
        # (a frame's own line, when no token holds the event, under ~frame).
        c = src if m.has_call_from else _token_key(m, f, src)
        key = self._keys.get(c)
        if key is None:
            fr = m.frames[f]
            line, precision, site = self.statements.line_for(f, src)
            key = self._keys[c] = LineKey(fr.path, line, fr.function, precision, site)
        return key

    def caller_key(self, f: int) -> Optional[LineKey]:
        """The statement of the next user frame up that user frame event ``f`` runs under: the
        call that made it, directly or through library code and module calls (None at the top)."""
        m = self.model
        p = m.parent[f]
        g = m.frame_of[p] if p >= 0 else -1
        if g < 0:
            return None
        if not self.calls_directly(f):
            return self.line_key(p)
        if self._callers is None:
            self._callers = {}
        key = self._callers.get(f)
        if key is None:
            fr = m.frames[g]
            line, precision, site = self.statements.line_for(g, f, direct=True)
            key = self._callers[f] = LineKey(fr.path, line, fr.function, precision, site)
        return key

    def calls_directly(self, f: int) -> bool:
        """User frame event ``f`` is a call of the user frame around it (no library frame or module
        call between, record_function labels aside): one of that frame's statement tokens."""
        m = self.model
        p = m.parent[f]
        g = m.frame_of[p] if p >= 0 else -1
        return g >= 0 and (p == g or (m.token[p] == p and m.cpu[p].cat == "user_annotation"))

    def line_tokens(self) -> array:
        """Per cpu event the key its line is cached under (see line_key), computed once."""
        if self._ck is None:
            self._ck = _line_tokens(self.model)
        return self._ck

    def line_key_ids(self) -> tuple[array, list, bool]:
        """Per cpu event the number of its line key (``line_key``) in a table of them (the second
        item), -1 for none; -2 where the key is of the event that asks first, so each is asked of
        ``line_key`` in turn (the third item says whether any is): a trace whose ops name their
        lines, a frame Dynamo resumes after a graph break. Frames of one shape
        (statements.frame_shapes) share the keys of their tokens, position by position: the lines
        are made once per shape, not once per token."""
        got = self._columns.get("line_key_ids")
        if got is None:
            m = self.model
            sh = frame_shapes(m)
            keys: list[Optional[LineKey]] = []
            base = array("i", [-2]) * len(sh.frames)
            if not m.has_call_from:
                st = self.statements
                shared: dict[tuple, int] = {}  # (shape, compiled) -> where its keys start
                for k, f in enumerate(sh.frames):
                    if st.resumed(f):
                        continue
                    cls = st.shape_key(f)
                    b = shared.get(cls)
                    if b is None:  # the frame's own line, then its tokens' (a user frame among them: none)
                        b = shared[cls] = len(keys)
                        keys.append(self.line_key(f))
                        keys.extend(self._token_keys(f, sh.tokens(k)))
                    base[k] = b
            ids = m.passes.line_key_ids(self.line_tokens(), m.frame_of, sh.place, sh.tokpos, base)
            asked = _ASK in ids.tobytes()  # -2 where an int32 starts: the ids are -2 or more
            got = self._columns["line_key_ids"] = (ids, keys, asked)
        return got

    def _token_keys(self, f: int, toks: array) -> list[Optional[LineKey]]:
        """``line_key`` of each of user frame ``f``'s statement tokens ``toks`` (None for a token
        that is not its own, a user frame), a key per site made once: a loop's frame holds its
        statements' tokens once per pass. For line_key_ids' frames alone (not resumed, no
        ``call_from``)."""
        m = self.model
        token, fr = m.token, m.frames[f]
        made: dict[int, LineKey] = {}  # id of a (line, precision, site) -> its key
        out: list[Optional[LineKey]] = []
        for t, placed in zip(toks, self.statements.token_lines(f)):
            if token[t] != t:
                out.append(None)
                continue
            key = made.get(id(placed))
            if key is None:
                line, precision, site = placed
                key = made[id(placed)] = LineKey(fr.path, line, fr.function, precision, site)
            out.append(key)
        return out

    def line_id(self, i: int) -> Optional[tuple]:
        """The group of findings event i belongs to, None outside every user frame: its user frame
        and the call that frame made (statements.call_of), both as the trace names them, so a
        trace gates the same with and without its source; where a finding sits is location()'s.
        A trace that names each op's line (``call_from``) groups by that line."""
        if i < 0:
            return None
        m = self.model
        if m.has_call_from:
            key = self.line_key(i)
            return (key.trace_path, key.line) if key else None
        c = self.line_tokens()[i]
        if c == NO_LINE:
            return None
        group = self._groups.get(c)
        if group is None:
            fr = m.frames[m.line_source(i)[0]]
            group = self._groups[c] = (fr.path, fr.line, fr.function, self.calls.of(c) if c >= 0 else None)
        return group

    # ---- columns several rules read, computed once -----------------------------------------
    def launch_lines(self) -> list:
        """Per GPU event the group (``line_id``) of the call that launched it, None when none."""
        got = self._columns.get("launch_lines")
        if got is None:
            groups, code = self._launch_groups()
            got = self._columns["launch_lines"] = list(map(groups.__getitem__, code))
        return got

    def _launch_groups(self) -> tuple[list, array]:
        """The distinct ``launch_lines`` groups, in order of first GPU event, and per GPU event the
        place of its own among them: ``line_id`` once per line token (per launch call where ops
        name their lines), not once per GPU event."""
        got = self._columns.get("launch_groups")
        if got is None:
            m = self.model
            launcher = m.launcher
            if m.has_call_from:  # line_id reads the event, not its token
                first, code = m.passes.codes(launcher)
                groups = [self.line_id(launcher[k]) for k in first]
            else:
                key = m.passes.take(self.line_tokens(), launcher, NO_LINE)
                first, code = m.passes.codes(key)
                groups = self._token_groups(m.passes.take(key, first, NO_LINE), launcher, first)
            got = self._columns["launch_groups"] = (groups, code)
        return got

    def _token_groups(self, tokens: array, events: array, first: array) -> list:
        """``line_id`` of line tokens (``tokens``, each of ``events[first[k]]``), as line_id would
        give them one after another: the frames grouped in that order (the call groups' members
        keep it), the groups once per frame shape and steps (CallGroups._group), read position by
        position through the line_key_ids pass."""
        m = self.model
        sh = frame_shapes(m)
        calls = self.calls
        frames = m.passes.take(m.frame_of, tokens, -1)  # a token's frame (-1: a frame's own line, none)
        base = array("i", [-2]) * len(sh.frames)
        table: list = []
        at: dict[int, int] = {}  # id(a frame's groups by position) -> where its groups start in table
        for p in m.passes.codes(frames)[0]:  # the frames in order of first token
            f = frames[p]
            if f < 0:
                continue
            groups = calls._of.get(f)
            if groups is None:
                groups = calls._group(f)
            b = at.get(id(groups))
            if b is None:
                fr = m.frames[f]
                b = at[id(groups)] = len(table)
                table.append(None)  # the frame's own line: asked of line_id (below)
                table.extend([(fr.path, fr.line, fr.function, g) for g in groups])
            base[sh.place[f]] = b
        ids = m.passes.line_key_ids(tokens, m.frame_of, sh.place, sh.tokpos, base)
        line_id = self.line_id
        return [
            table[g] if g >= 0 and (c >= 0) else line_id(events[k]) if c != NO_LINE else None
            for g, c, k in zip(ids, tokens, first)
        ]

    def launch_line_ids(self) -> array:
        """Per GPU event a number for its ``launch_lines`` group (equal groups, equal numbers; -1
        for none): a key that hashes and compares as an int."""
        got = self._columns.get("launch_line_ids")
        if got is None:
            ids: dict = {None: -1}
            groups, code = self._launch_groups()
            number = array("i", [ids.setdefault(k, len(ids) - 1) for k in groups])
            got = self._columns["launch_line_ids"] = self.model.passes.take(number, code, -1)
        return got

    def user_frames(self) -> bytes:
        """1 for the events that are user frames (each is its own ``frame_of``)."""
        got = self._columns.get("user_frames")
        if got is None:
            got = self._columns["user_frames"] = self.model.passes.fixed_points(self.model.frame_of)
        return got

    def launch_steps(self) -> list:
        """Per GPU event the step its launch call started in, None without one (or outside every
        step)."""
        got = self._columns.get("launch_steps")
        if got is None:
            steps = [*self.model.steps, None]  # place -1: None
            got = self._columns["launch_steps"] = list(map(steps.__getitem__, self.launch_step_index()))
        return got

    def launch_step_index(self) -> array:
        """Per GPU event the place in ``model.steps`` of the step its launch call started in, -1
        without one (``launch_steps``, as a column)."""
        got = self._columns.get("launch_step_index")
        if got is None:
            m = self.model
            got = self._columns["launch_step_index"] = m.passes.step_of(
                m.launcher,
                m.cpu_starts(),
                array("d", [s.ts for s in m.steps]),
                array("d", [s.end for s in m.steps]),
            )
        return got

    def launches_under(self) -> bytes:
        """1 for the cpu events with GPU work launched from them or from anything nested in them
        (a non-empty ``model.gpu_under``): the launch calls and every event above them."""
        got = self._columns.get("launches_under")
        if got is None:
            m = self.model
            got = self._columns["launches_under"] = m.passes.ancestors(m.parent, m.launcher)
        return got

    def op_input_keys(self, names: frozenset[str]) -> tuple[list[int], list]:
        """The cpu_op events with one of these names, in order, and each one's (name,
        ``input_key``), None where input_key is: what the rules that read GEMM ops' shapes
        (small-problem, misaligned-dims) derive their answers of, made once per set of names."""
        key = ("op_input_keys", names)
        got = self._columns.get(key)
        if got is None:
            from .rules.util import input_key  # the rules' helper (rules import this module)

            m = self.model
            cpu, cpu_op = m.cpu, m.cat_mask("cpu_op")
            ops = [i for i in m.indices(names) if cpu_op[i]]
            keys = []
            for i in ops:
                e = cpu[i]
                k = input_key(e)
                keys.append(None if k is None else (e.name, k))
            got = self._columns[key] = (ops, keys)
        return got

    def memory_rows(self) -> tuple[array, int]:
        """The rows of ``model.memory`` the memory rules read: the GPU allocator's samples, else
        (none has device type 1, CUDA) all of them, the CPU one's; and the first of those rows
        with the peak Total Allocated (-1 without rows). Made once, for the three memory rules."""
        got = self._columns.get("memory_rows")
        if got is None:
            mem = self.model.memory
            rows = self.model.passes.points_into(mem.device_type, b"\0\1")  # device type 1
            if not rows:
                rows = array("i", range(len(mem.device_type)))
            peak = -1
            if rows:
                level = list(map(mem.total_allocated.__getitem__, rows))
                peak = rows[level.index(max(level))]
            got = self._columns["memory_rows"] = (rows, peak)
        return got

    @property
    def mean_step_us(self) -> float:
        """The mean step, each the longer of its CPU range and its GPU work (analyses.step_gpu)."""
        steps = self.a.step_us
        return sum(steps) / len(steps) if steps else 0.0

    def location(self, i: int) -> Location:
        """Event i's user line (the trace when it has none), with the module it ran in."""
        key = self.line_key(i) if i >= 0 else None
        if key is None:
            return self.trace_location()
        loc = self.location_of_key(key)
        loc.module = self.module_of(i)
        group = self.line_id(i)
        if group is not None:  # the location keeps it alive, so its id names it alone
            self._placed[id(loc)] = (loc, group, i)
        return loc

    def group_of(self, loc: Location) -> Optional[tuple]:
        """The group (line_id) of the event a finding's location was made for, None when it was
        not made by location(): what a fix of that finding touches is that group's work."""
        hit = self._placed.get(id(loc))
        return hit[1] if hit is not None and hit[0] is loc else None

    # ---- the module view ---------------------------------------------------------------------
    def modules(self) -> ModuleIndex:
        """The module index, its nodes labelled (``GPT2Attention.c_attn``: the sources read once)."""
        idx = ModuleIndex.of(self.model)
        if idx.labels is None:
            label(self, idx)
        return idx

    def module_of(self, i: int) -> Optional[str]:
        """The module cpu event i ran in, as a user can act on it (``GPT2Attention.c_attn``), or
        None outside every module (backward ops count in their forward op's module)."""
        idx = self.modules()
        k = idx.node_at(i)
        return generic_name(idx, k) if k >= 0 else None

    def modules_where(self, weighted: Iterable[tuple[int, float]]) -> Optional[Place]:
        """Where most of some weighted cpu events ran (``(launch, GPU µs)`` pairs, say): the module,
        its instances and share; prints as ``GPT2Attention.c_attn`` (12 instances, 40%)."""
        return describe(self.modules(), weighted)

    def related(self, i: int, note: str) -> Location:
        """Event i's line as a related location of a finding, saying how it relates."""
        loc = self.location(i)
        loc.note = note
        return loc

    def location_of_key(self, key: LineKey) -> Location:
        local = self.sources.resolve(key.trace_path, key.line)
        self._mapped[key.trace_path] = self._mapped.get(key.trace_path, False) or local is not None
        st = key.site if local else None
        span = (
            {}
            if st is None or st.column is None
            else {"column": st.column, "end_line": st.end_line, "end_column": st.end_column}
        )
        return Location(
            path=local or key.trace_path,
            line=key.line,
            precision=key.precision,
            function=key.function,
            trace_path=key.trace_path,
            **span,
        )

    def unmapped_notes(self) -> list[str]:
        """When none of the source files the findings and hot lines name is in the workspace: one
        note saying so and which ``--path-map`` (or ``--workspace``) would map them."""
        roots = self.sources.roots
        if not roots or not self._mapped or any(self._mapped.values()):
            return []
        paths = sorted(self._mapped)
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        where = ", ".join(roots)
        absolute = [p for p in paths if os.path.isabs(p)]
        if absolute:
            prefix = os.path.commonpath([os.path.dirname(p) for p in absolute])
            return [
                f"no source file of this trace is in the workspace ({where}): {shown}; pass "
                f"--path-map {prefix}=DIR, DIR being where {prefix} is here"
            ]
        return [
            f"no source file of this trace is in the workspace ({where}): {shown}, relative to where "
            f"the program ran; pass --workspace DIR (that folder here) or --path-map REMOTE=DIR"
        ]

    def location_of_hot(self, h: HotLine) -> Location:
        return Location(
            path=h.path, line=h.line, precision=h.precision, function=h.function, trace_path=h.trace_path
        )

    def trace_location(self) -> Location:
        return Location(path=self.trace_path, line=None, precision="trace")

    def threshold(self, code: str, name: str) -> float:
        """A rule's threshold: the team's value from the options, else the default its declaration
        documents (``@rule(..., thresholds={name: default})``)."""
        from .rules import declared

        team = self.options.thresholds.get(code, {})
        if name in team:
            return team[name]
        r = declared(code)
        assert r is not None, code
        return r.thresholds[name]

    def diag(
        self,
        code: str,
        message: str,
        location: Location,
        evidence: dict | None = None,
        fix: str | None = None,
        severity: str | None = None,
        related: Iterable[Location] = (),
    ) -> Diagnostic:
        from .rules import declared  # the declaration, not the table generated from it

        r = declared(code)
        assert r is not None, code
        return Diagnostic(
            code=code,
            severity=severity or r.severity,
            message=message,
            location=location,
            evidence=evidence or {},
            fix=fix,
            related=list(related) + self.also_here(location),
        )

    def also_here(self, loc: Location, most: int = 5) -> list[Location]:
        """The other statements of the group a finding's location was made for (the same call on
        another line: ``y = yb.to(dev)`` beside ``x = xb.to(dev)``), as related locations: the
        finding is the group's, one whatever the source says, and the source says where else."""
        group = self.group_of(loc)
        if group is None or loc.precision != "statement" or self.model.has_call_from:
            return []
        fr = self.model.frames[self.model.line_source(self._placed[id(loc)][2])[0]]
        lines: dict[int, Optional[Site]] = {}
        st, sh, seen = self.statements, frame_shapes(self.model), set()
        # per frame its shape key, None where resumed: a group's members are many calls of a few
        # hundred frames (17,000 members of 354 frames at 1 GB)
        keys: dict[int, Optional[tuple]] = {}
        for f, t in self.calls.members(fr, group[3]):
            if f not in keys:
                keys[f] = None if st.resumed(f) else st.shape_key(f)
            key = keys[f]
            if key is not None:  # twins of one shape place the same position on the same line
                twin = (key, sh.tokpos[t])
                if twin in seen:
                    continue
                seen.add(twin)
            line, precision, site = st.line_for(f, t, direct=True)
            if precision == "statement" and line != loc.line and line not in lines:
                lines[line] = site
                if len(lines) >= most:
                    break
        out = []
        for line in sorted(lines):
            also = self.location_of_key(LineKey(fr.path, line, fr.function, "statement", lines[line]))
            also.note = "the same call on this line: part of this finding"
            out.append(also)
        return out


_ASK = array("i", [-2]).tobytes()  # see Context.line_key_ids


def _line_tokens(m: TraceModel) -> array:
    """Per cpu event the key its line is cached under in Context.line_key (the line_tokens pass):
    its statement token, else ~frame; NO_LINE when it has no user line."""
    return m.passes.line_tokens(m.frame_of, m.fwd_of, m.token)


def _token_key(m: TraceModel, f: int, src: int) -> int:
    """The key a line is cached under: its statement token, else ~frame (the frame's own line)."""
    tok = m.token[src]
    return tok if tok >= 0 else ~f
