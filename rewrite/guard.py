"""The hazard guard: restore eager semantics where Inductor's own later passes would break them.

Pure FX analysis and rewriting (this module does not import ``torch._inductor``;
:mod:`rewrite.inductor` runs it and tells it what it needs to know about
Inductor in an :class:`InductorModel`). A rewrite is judged against eager
execution, not against stock Inductor: the guard adds the least copying that
makes Inductor's result right, and nothing where none of the hazards is present.

Inductor 2.13's pipeline, as far as the guard relies on it: the joint graph's
``remove_noop_ops`` replaces every ``clone``/``copy``/``alias`` whose fake
value has the source's sizes, strides and dtype by its source (storage offset
and later mutations are ignored), and its ``pointless_view`` pattern a
``view`` to the sizes its operand already has; after the post-grad hooks,
``reinplace_inplaceable_ops`` turns ``index_put``, ``_unsafe_index_put`` and
the scatters (``slice/select/diagonal/as_strided_scatter``, canonicalised to
one generalized scatter) into in-place writes of their first argument, then
the graph is lowered and scheduled. The hazards, numbered (docs/DESIGN.md and
the reports cite them):

H1 stale input read (``remove_noop_ops``): in a functional post-grad graph
   every write of a graph input is a ``copy_`` write-back at the end, and any
   read of the input's placeholder means its value *before* the program. A
   write-back that reads an input (through its placeholder or views of it)
   after that input's own write-back is what a dropped copy leaves behind
   (pytorch/pytorch#198131); Inductor would copy the new value. Fix: move the
   reading write-back before the first write-back it reads stale (free); when
   that would break another read (two inputs copied into each other), clone
   what it reads before that write-back.
H2 in-placed result overwritten: Inductor writes a scatter or ``index_put``
   whose first argument is an input ``M`` in place into ``M`` whenever some
   write-back into ``M`` exists; when that write-back copies another value and
   the result is used after it (returned, read later), the result is
   overwritten (#198094). Fix: clone ``M`` as the op's first argument (the op
   then writes the copy; eager copies ``M`` there too).
H3 in-placed result returned: the same op, when its result is also copied back
   into ``M`` (the write-back is then dropped) and returned, makes the output
   an alias of the input (#195451). Fix: return a clone of the result; not
   where the output is a view of ``M`` in eager too (the runtime regenerates
   it from ``M``).
H4 write-back reading the in-placed result elsewhere: after the in-place op,
   ``M`` is written a second time by its write-back, whose value reads the
   op's result at other positions (a flip, a shifted view, a gather, a
   reduction; anything but same-position pointwise reads, short of an extern
   kernel); Inductor may fuse that read into the loop that writes ``M`` and
   read values it already overwrote (#198270: its write-after-read tracking
   misses a buffer mutated twice). Fix: as for H2, the op writes a clone of
   ``M``.
H5 overlapping scatter source: a scatter Inductor will do in place whose
   source overlaps (but is not exactly) the region it writes becomes one copy
   loop reading what it overwrites (#197829: ``x[1:] = x[:-1].clone()`` after
   the clone was dropped). Fix: clone the source.
H6 dtype view read before a later write: a view that changes the element size
   (or a complex view) is lowered as an aliasing extern kernel, and its readers
   are not ordered before a later write of the viewed memory (#198101). Fix:
   take the view of a clone of its base.
H7 offset-changing clone (joint graph, before ``remove_noop_ops``): a clone
   whose source has another storage offset but equal sizes and strides is
   dropped although an opaque op (a custom op) may observe the offset
   (#197489). Fix: spell the clone ``aten.as_strided_copy`` of the same
   layout, which the no-op removal does not know (a copy all the same).
H8 returned values collapsed into one object (joint graph, before the no-op
   removal and ``pointless_view``): two returned values of one storage whose
   layouts are their storage root's (a value and a no-op ``view``,
   ``reshape``, ``detach``, full slice, ``t().t()`` of it) are returned by
   Inductor as one tensor object (the no-op views are dropped, and the
   wrapper code returns a same-layout view of a buffer as the buffer),
   where eager returns distinct objects over the storage: after a graph
   break, ``alias.resize_(12)`` resizes ``base`` too (#191449; torch 2.15's
   AOTAutograd regenerates a no-op view of another output, not a
   ``detach``). Fix: return ``aten.view_as(v, v)`` instead, a view op
   Inductor has no lowering for and calls as a fallback kernel: a distinct
   object over the same storage, no copy.
H9 storage-relative view of a materialised view (post-grad graph): an
   ``as_strided`` is relative to its operand's storage, but Inductor realizes
   the operand with its own strides, and a view of an unrealized
   intermediate (``x.repeat(...)[:, ::2]``, a diagonal, an offset slice)
   becomes a compact buffer holding only the view's elements: the
   ``as_strided`` reads the wrong elements and past the buffer's end
   (#197431; torch 2.15 refuses to compile it instead). Fix: rebase the
   ``as_strided`` onto the storage root, with the same sizes, strides and
   offset (the operand's own offset where none is given; the root's storage
   viewed in the operand's dtype where the views change it): the same view,
   no copy; Inductor realizes the root as laid out.

Which outputs the caller receives as they are (:class:`OutputRoles`) matters
to H3 and H8: AOTAutograd regenerates every output that is a view of an input
in eager (and, from 2.15, a no-op view of another output), whatever the graph
returns there; :mod:`rewrite.inductor` reads it from AOTAutograd's metadata.

Every guard copy is an ``aten.clone`` (H7: ``aten.as_strided_copy``); where
its layout is observed (a returned value, a scatter's base: H2-H4) it keeps
the exact layout of what it copies (the flat storage-prefix copy of
:func:`rewrite.editing.nodes.copy_preserving` for a strided view). An FX
clone whose source Inductor writes later is materialised before that write.
Read literally on the FX graph a guard clone is removable, so the clone
elimination must be told to keep them (:attr:`GuardReport.clones`; H1 runs
before it, H2-H6 and H9 after it). Which ops Inductor will write in place is
predicted from the graph (:func:`predict_reinplacing`); a prediction of "in
place" that Inductor does not follow costs a copy, never a wrong result.
Each rewrite is reported (:class:`Guarded`): the hazard, where, and the
bytes it copies.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> def f(dst, src):
...     src.copy_(src + 1)
...     dst.copy_(src)
>>> gm = make_fx(f, tracing_mode="fake")(torch.zeros(3), torch.ones(3))
>>> first, second = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
>>> second.replace_input_with(first, first.args[0])  # what the hook sees for ``dst[:] = src; src.add_(1)``
>>> report = guard_stale_reads(gm.graph)
>>> [(g.hazard.code, g.action, g.nbytes) for g in report.guarded]
[('H1', 'reorder', 0)]
>>> [n.name for n in gm.graph.nodes if n.op == "call_function"]  # dst takes src's old value first
['add', 'copy__1', 'copy_']
"""

from __future__ import annotations

import enum
import logging
import operator
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import torch
import torch.fx
import torch.utils._pytree as pytree

from aliasing import AliasAnalysis, analyze
from aliasing.core.effects import SINGLE
from aliasing.core.facts import known_equal, meta_value, same_region
from aliasing.core.regions import Region, regions_may_overlap
from rewrite.editing.nodes import (
    Builder,
    LoweringSkip,
    copy_preserving,
    fake_mode,
    recompile,
    replay,
    static_int,
    storage_key,
    undo,
    view_chain,
)
from rewrite.lowering.scatter import SCATTER_VIEWS

__all__ = [
    "ALL_HAZARDS",
    "KNOWN_RELEASES",
    "STOCK_MISCOMPILES",
    "CollapsedOutput",
    "GuardReport",
    "Guarded",
    "Hazard",
    "InductorModel",
    "OutputRoles",
    "Reinplacing",
    "StorageView",
    "guard_collapsed_outputs",
    "guard_inductor_hazards",
    "guard_joint_graph",
    "guard_stale_reads",
    "guard_storage_views",
    "hazards_on",
    "plan_collapsed_outputs",
    "plan_inductor_hazards",
    "plan_offset_clones",
    "plan_stale_reads",
    "plan_storage_views",
    "predict_reinplacing",
    "protected_nodes",
]

log = logging.getLogger(__name__)

aten = torch.ops.aten


class Hazard(str, enum.Enum):
    """A way Inductor's later passes would break eager semantics (the module docstring's H1-H9)."""

    STALE_INPUT_READ = "stale-input-read"
    OVERWRITTEN_RESULT = "in-placed-result-overwritten"
    ESCAPING_RESULT = "in-placed-result-returned"
    WRITE_BACK_READS_ELSEWHERE = "write-back-reads-in-placed-result-elsewhere"
    OVERLAPPING_SOURCE = "scatter-source-overlaps-destination"
    DTYPE_VIEW_READ_LATE = "dtype-view-read-before-base-write"
    OFFSET_CLONE_DROPPED = "offset-changing-clone-dropped"
    OUTPUTS_COLLAPSED = "distinct-outputs-returned-as-one-object"
    STORAGE_VIEW_OF_COPY = "as-strided-over-a-materialised-view"

    def __str__(self) -> str:
        return self.value

    @property
    def code(self) -> str:
        """``H1``..``H9``."""
        return _CODE[self]

    @property
    def description(self) -> str:
        """One line: what goes wrong without the guard."""
        return _DESCRIPTION[self]


_CODE = {h: f"H{i + 1}" for i, h in enumerate(Hazard)}

_DESCRIPTION = {
    Hazard.STALE_INPUT_READ: "a write-back reads an input after that input's own write-back "
    "(a copy remove_noop_ops dropped); Inductor would copy the new value",
    Hazard.OVERWRITTEN_RESULT: "Inductor writes the op into a graph input whose write-back then "
    "overwrites the result, which is still used",
    Hazard.ESCAPING_RESULT: "Inductor writes the op into a graph input and returns that input as the result",
    Hazard.WRITE_BACK_READS_ELSEWHERE: "the input is written by the in-placed op and again by its write-back, "
    "which reads the op's result at other positions in the same loop",
    Hazard.OVERLAPPING_SOURCE: "the in-placed scatter copies a source that overlaps the region it writes",
    Hazard.DTYPE_VIEW_READ_LATE: "readers of an aliasing dtype view are not ordered before a later write of its base",
    Hazard.OFFSET_CLONE_DROPPED: "remove_noop_ops drops a clone that changes the storage offset an opaque op may observe",
    Hazard.OUTPUTS_COLLAPSED: "Inductor returns one tensor object for outputs eager returns as distinct views "
    "of one storage (a later resize_ or other metadata change of one changes the other)",
    Hazard.STORAGE_VIEW_OF_COPY: "Inductor materialises the view an as_strided is taken of into a buffer of its own "
    "and applies the storage-relative as_strided to that buffer (reads past its end)",
}

#: The torch releases (``major.minor``) whose stock Inductor miscompiles programs of each hazard
#: class. Proven, not assumed: on every release CI runs, tests/test_inductor_guard.py compiles the
#: class's programs without the guard and fails when a class marked fixed there has a wrong result,
#: or a class marked broken has none. On a release where a class is fixed the guard does not look for it.
STOCK_MISCOMPILES: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "H1": frozenset({"2.13", "2.14"}),
        "H2": frozenset({"2.13", "2.14", "2.15"}),
        "H3": frozenset({"2.13", "2.14", "2.15"}),
        "H4": frozenset({"2.13", "2.14"}),
        "H5": frozenset({"2.13", "2.14"}),
        "H6": frozenset({"2.13", "2.14", "2.15"}),
        "H7": frozenset({"2.13", "2.14", "2.15"}),
        "H8": frozenset({"2.13", "2.14", "2.15"}),
        "H9": frozenset({"2.13", "2.14", "2.15"}),
    }
)

#: The releases :data:`STOCK_MISCOMPILES` describes; on any other the guard looks for every class.
KNOWN_RELEASES = frozenset({"2.13", "2.14", "2.15"})

ALL_HAZARDS = frozenset(STOCK_MISCOMPILES)


def hazards_on(release: str) -> frozenset[str]:
    """The hazard codes to guard on a torch release (``"2.15"``): all of them on a release not in the table.

    Examples
    --------
    >>> sorted(hazards_on("2.15"))
    ['H2', 'H3', 'H6', 'H7', 'H8', 'H9']
    >>> hazards_on("9.99") == ALL_HAZARDS
    True
    """
    if release not in KNOWN_RELEASES:
        return ALL_HAZARDS
    return frozenset(code for code, releases in STOCK_MISCOMPILES.items() if release in releases)


Action = Literal["reorder", "clone", "view", "rebase"]


@dataclass(frozen=True)
class Guarded:
    """One hazard the guard removed.

    ``node`` is where: the node whose inputs were protected (the reader, the
    scatter, the write-back, the output). ``action`` is ``"reorder"``
    (``created`` names the nodes moved, no copy), ``"clone"`` (``created``
    names the copies), ``"view"`` (H8: ``created`` names the distinct view
    returned instead) or ``"rebase"`` (H9: the op now views the storage
    root; ``created`` names any helper views). ``nbytes`` is what the copies
    allocate (0 without a copy, None when the size is symbolic).
    ``evidence`` names the nodes that make the hazard.
    """

    hazard: Hazard
    node: str
    action: Action
    created: tuple[str, ...]
    nbytes: int | None
    evidence: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for logs and reports."""
        cost = "symbolic size" if self.nbytes is None else f"{self.nbytes} B"
        what = {"reorder": "moved", "clone": "cloned", "view": "returned", "rebase": "rebased onto"}[self.action]
        ev = f" (evidence: {', '.join(self.evidence)})" if self.evidence else ""
        return f"{self.hazard.code} {self.hazard}: {self.action} at {self.node}, {what} {', '.join(self.created)}; {cost}{ev}"


@dataclass(frozen=True)
class GuardReport:
    """What one guard stage did: the hazards it removed, in order, and any failure."""

    guarded: tuple[Guarded, ...] = ()
    error: str | None = None

    @property
    def clones(self) -> tuple[str, ...]:
        """Names of the copies the guard created (the clone elimination must keep them)."""
        return tuple(c for g in self.guarded if g.action == "clone" for c in g.created)

    @property
    def nbytes(self) -> int:
        """Bytes the guard's copies allocate (symbolic sizes not counted)."""
        return sum(g.nbytes or 0 for g in self.guarded)

    @property
    def hazards(self) -> tuple[str, ...]:
        """The hazard codes guarded, in order (repeats kept)."""
        return tuple(g.hazard.code for g in self.guarded)

    def merged(self, other: GuardReport) -> GuardReport:
        """This report followed by ``other``."""
        errors = [e for e in (self.error, other.error) if e]
        return GuardReport(self.guarded + other.guarded, "; ".join(errors) or None)

    def summary(self) -> str:
        """One line: how many hazards, which, and the bytes copied."""
        if not self.guarded:
            text = "fx-aliasing guard: no hazard"
        else:
            codes = ", ".join(f"{g.hazard.code} {g.action} at {g.node}" for g in self.guarded)
            symbolic = any(g.nbytes is None for g in self.guarded)
            text = (
                f"fx-aliasing guard: {len(self.guarded)} hazard(s) guarded ({codes}); "
                f"{len(self.clones)} copy(ies), {self.nbytes} B{' + symbolic sizes' if symbolic else ''}"
            )
        if self.error:
            text += f"; error: {self.error}"
        return text

    def __str__(self) -> str:
        return "\n".join([self.summary(), *(f"  {g.describe()}" for g in self.guarded)])


@dataclass(frozen=True)
class InductorModel:
    """What the guard assumes about Inductor's passes after the post-grad hook.

    ``realizing_targets``: ops whose inputs Inductor always realizes
    (``torch._inductor.lowering.needs_realized_inputs``); ``fallback_targets``:
    ops lowered as extern (fallback) kernels (``torch._inductor.lowering.fallbacks``);
    both feed the scatter condition R3 of :func:`predict_reinplacing`.
    ``kernel_targets``: ops lowered by Inductor's kernel templates
    (``torch._inductor.kernel``: matmuls, convolutions), which like the other
    two read their inputs in a kernel of their own (H4's path ends there).
    :mod:`rewrite.inductor` fills them from the installed Inductor; the empty
    default treats every ATen op as fusible. ``hazards``: the hazard codes the
    installed Inductor still gets wrong (:func:`hazards_on` its release; every
    class by default); the guard looks for no other.
    """

    realizing_targets: frozenset[Any] = frozenset()
    fallback_targets: frozenset[Any] = frozenset()
    kernel_targets: frozenset[Any] = frozenset()
    hazards: frozenset[str] = ALL_HAZARDS

    def realizes_inputs(self, target: Any) -> bool:
        """True when ``target`` (an op overload or packet) always realizes its inputs."""
        return target in self.realizing_targets or getattr(target, "overloadpacket", None) in self.realizing_targets

    def is_fallback(self, target: Any) -> bool:
        """True when ``target`` is lowered as an extern (fallback) kernel."""
        return target in self.fallback_targets

    def is_separate_kernel(self, target: Any) -> bool:
        """True when ``target`` reads its inputs in a kernel of its own (extern, template or realizing)."""
        return self.is_fallback(target) or self.realizes_inputs(target) or target in self.kernel_targets


@dataclass(frozen=True)
class OutputRoles:
    """What the caller receives for each output of the graph (positions in the output node's flat list).

    ``returned``: user outputs the caller receives as they are (the same
    tensor object). ``regenerated``: user outputs the runtime replaces by a
    view it regenerates from an input or from another output (AOTAutograd's
    aliased outputs: a view of an input in eager is one in the compiled
    program too, whatever the graph returns there). Positions in neither (an
    input mutation's new value, an intermediate base, what the backward
    saves) are internal. :mod:`rewrite.inductor` reads them from
    AOTAutograd's metadata; every guard takes None, the default, as "every
    output is returned as it is".
    """

    returned: frozenset[int]
    regenerated: frozenset[int]


def _output_of(graph: torch.fx.Graph) -> torch.fx.Node | None:
    return next(iter(graph.find_nodes(op="output")), None)


def _flat_args(out: torch.fx.Node | None) -> list[Any]:
    """The output node's flat list of returned values (nodes or constants)."""
    if out is None or not out.args:
        return []
    flat, _ = pytree.tree_flatten(out.args[0])
    return flat


# ---------------------------------------------------------------------------
# helpers over the analysis

_INDEX_PUTS = frozenset({aten.index_put.default, aten._unsafe_index_put.default})
#: Scatters Inductor always lowers as a mutation (``_ALWAYS_MUTATING_SCATTER_OPS``' views).
_ALWAYS_MUTATING = frozenset({aten.diagonal_scatter.default, aten.as_strided_scatter.default})
_META_ONLY = frozenset(
    {aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default}
)


def _is_pre_existing(n: object) -> bool:
    return isinstance(n, torch.fx.Node) and n.op in ("placeholder", "get_attr")


def _is_write_back(n: torch.fx.Node) -> bool:
    """``copy_(P, s)`` into a graph input or constant: a functionalization write-back."""
    return (
        n.op == "call_function"
        and n.target is aten.copy_.default
        and len(n.args) >= 2
        and _is_pre_existing(n.args[0])
        and isinstance(n.args[1], torch.fx.Node)
    )


def _alias_source(a: AliasAnalysis, n: torch.fx.Node) -> torch.fx.Node | None:
    """The one argument whose memory ``n``'s value lives in (a view, an in-place result); None if fresh."""
    if n.op != "call_function":
        return None
    if n.target is operator.getitem:
        src = n.args[0]
        if not isinstance(src, torch.fx.Node):
            return None
        e = a.effect_of(src)
        srcs = () if e is None or e.unknown else e.outputs.get(n.args[1], ())
    else:
        e = a.effect_of(n)
        srcs = () if e is None or e.unknown else e.outputs.get(SINGLE, ())
    return srcs[0] if len(srcs) == 1 else None


def _is_pure_view(a: AliasAnalysis, n: torch.fx.Node) -> bool:
    """A view: aliases one argument, reads and writes nothing."""
    e = a.effect_of(n)
    return e is not None and not e.unknown and not e.reads and not e.writes and _alias_source(a, n) is not None


def _view_root(a: AliasAnalysis, x: torch.fx.Node) -> torch.fx.Node:
    """The top of ``x``'s chain of pure views."""
    node = x
    while _is_pure_view(a, node):
        src = _alias_source(a, node)
        if src is None:
            break
        node = src
    return node


def _views_of(a: AliasAnalysis, v: torch.fx.Node) -> list[torch.fx.Node]:
    """``v`` and every pure view made from it (transitively), in graph order."""
    out = [v]
    seen = {v}
    i = 0
    while i < len(out):
        for u in out[i].users:
            if u not in seen and _is_pure_view(a, u) and _alias_source(a, u) is out[i]:
                seen.add(u)
                out.append(u)
        i += 1
    return sorted(out, key=a.position)


def _reads(a: AliasAnalysis, n: torch.fx.Node) -> tuple[torch.fx.Node, ...]:
    """The values ``n`` reads the data of (the output node reads what it returns)."""
    if n.op == "output":
        return tuple(x for x in n.all_input_nodes)
    e = a.effect_of(n)
    if e is None:
        return ()
    return e.reaches if e.unknown else e.reads


def _tensor(n: torch.fx.Node) -> torch.Tensor | None:
    v = meta_value(n)
    return v if isinstance(v, torch.Tensor) and v.layout == torch.strided else None


def _nbytes(n: torch.fx.Node) -> int | None:
    """Bytes a dense copy of ``n``'s value allocates (None when symbolic or unknown)."""
    t = _tensor(n)
    if t is None:
        return None
    numel = static_int(t.numel())
    return None if numel is None else numel * t.element_size()


def _region_of_value(t: torch.Tensor) -> Region:
    return Region(t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.element_size())


def _builder(graph: torch.fx.Graph) -> Builder:
    mode = fake_mode(graph)
    if mode is None:
        raise LoweringSkip("the graph has no fake tensors of a single fake mode")
    return Builder(graph, mode)


# ---------------------------------------------------------------------------
# the fixes: decided first, applied together


@dataclass(frozen=True)
class _CloneInput:
    """Clone ``value`` before ``before`` and make ``user`` read the clone (replay: rebuild the view first)."""

    hazard: Hazard
    user: torch.fx.Node
    value: torch.fx.Node
    before: torch.fx.Node
    evidence: tuple[str, ...]
    replay_from: torch.fx.Node | None = None  # a view defined after ``before``: replay its chain on this root
    exact_layout: bool = False  # the copy's layout is observed (a result, a scatter's base): copy it exactly


@dataclass(frozen=True)
class _Reorder:
    """Move ``node`` (with the views it needs, ``moved``) just before ``before``."""

    hazard: Hazard
    node: torch.fx.Node
    before: torch.fx.Node
    moved: tuple[torch.fx.Node, ...]
    evidence: tuple[str, ...]


_Fix = _CloneInput | _Reorder


def _apply(graph: torch.fx.Graph, fixes: Sequence[_Fix]) -> list[Guarded]:
    """Apply the fixes (the one place this module mutates a graph); returns what was done."""
    done: list[Guarded] = []
    b: Builder | None = None
    for fix in fixes:
        if isinstance(fix, _Reorder):
            for n in (*fix.moved, fix.node):
                fix.before.prepend(n)
            done.append(Guarded(fix.hazard, fix.node.name, "reorder", tuple(n.name for n in (*fix.moved, fix.node)), 0, fix.evidence))
            continue
        if b is None:
            b = _builder(graph)
        start = len(b.created)
        with graph.inserting_before(fix.before):
            source = fix.value
            if fix.replay_from is not None:
                found = view_chain(fix.value)
                if found is None:
                    raise LoweringSkip(f"{fix.value.name}: no view chain to replay")
                source = replay(b, found[1], fix.replay_from)
            c = value = None
            if fix.exact_layout:
                try:
                    cp = copy_preserving(b, source)  # a flat prefix copy for a strided view
                    c, value = cp.clone, cp.value
                except LoweringSkip:
                    pass
            if c is None or value is None:
                c = value = b.call(aten.clone.default, (source,))
        fix.user.replace_input_with(fix.value, value)
        helpers = tuple(n.name for n in b.created[start:] if n is not c)
        done.append(Guarded(fix.hazard, fix.user.name, "clone", (c.name,), _nbytes(c), fix.evidence + helpers))
    if fixes:
        graph.lint()
        recompile(graph)
    return done


def _guarded_rounds(
    graph: torch.fx.Graph,
    plan: Callable[[AliasAnalysis], list[_Fix]],
    *,
    relevant: Callable[[torch.fx.Graph], bool],
    donated_inputs: Iterable[int],
    max_rounds: int,
) -> GuardReport:
    """Plan against a fresh analysis, apply, repeat until a round finds nothing (never raises).

    ``relevant`` is a cheap scan of the graph: without the nodes a hazard
    needs, no analysis is built at all.
    """
    done: list[Guarded] = []
    seen: set[tuple[Hazard, torch.fx.Node]] = set()
    donated = tuple(donated_inputs)
    try:
        for _ in range(max(1, max_rounds)):
            if not relevant(graph):
                break
            fixes = [f for f in plan(analyze(graph, donated_inputs=donated)) if (f.hazard, _where(f)) not in seen]
            if not fixes:
                break
            seen.update((f.hazard, _where(f)) for f in fixes)
            done.extend(_apply(graph, fixes))
    except Exception as e:  # never raise from a pass: keep what was done (each fix leaves a valid graph)
        log.warning("fx-aliasing guard stopped: %s: %s", type(e).__name__, e)
        return GuardReport(tuple(done), f"{type(e).__name__}: {e}")
    return GuardReport(tuple(done))


def _where(f: _Fix) -> torch.fx.Node:
    return f.node if isinstance(f, _Reorder) else f.user


# ---------------------------------------------------------------------------
# H1: stale reads of inputs after their write-back


def _epilogue_start(a: AliasAnalysis) -> int:
    """Position of the first node of the trailing run of write-backs, pure views and the output."""
    nodes = a.nodes
    start = len(nodes)
    for n in reversed(nodes):
        if n.op == "output" or _is_write_back(n) or _is_pure_view(a, n) or n.op in ("placeholder", "get_attr"):
            start -= 1
            continue
        break
    return start


def plan_stale_reads(a: AliasAnalysis) -> list[_Fix]:
    """H1: the first write-back that reads an input after its own write-back, and how to restore the old value.

    Only the trailing epilogue of write-backs is considered: anywhere else a
    read after a write may be meant. One write-back is fixed per round (a
    reorder changes the positions the next decision depends on).
    """
    start = _epilogue_start(a)
    nodes = a.nodes
    write_backs = [n for n in nodes[start:] if _is_write_back(n)]
    fixes: list[_Fix] = []
    for n in write_backs:
        pos = a.position(n)
        stale: list[tuple[torch.fx.Node, torch.fx.Node]] = []  # (value read, the write-back it reads after)
        for x in _reads(a, n):
            root = _view_root(a, x)
            for w in write_backs:
                if a.position(w) >= pos:
                    break
                if root is w.args[0] and a.may_overlap(x, root):
                    stale.append((x, w))
                    break
        if not stale:
            continue
        first = min((w for _, w in stale), key=a.position)
        evidence = tuple(sorted({w.name for _, w in stale}))
        reorder = _plan_reorder(a, n, first, {x for x, _ in stale})
        if reorder is not None:
            return [_Reorder(Hazard.STALE_INPUT_READ, n, first, reorder, evidence)]
        for x, w in stale:
            replay_from = None if a.position(x) < a.position(w) else _view_root(a, x)
            fixes.append(_CloneInput(Hazard.STALE_INPUT_READ, n, x, w, evidence, replay_from))
        return fixes
    return fixes


def _plan_reorder(
    a: AliasAnalysis, n: torch.fx.Node, first: torch.fx.Node, stale: set[torch.fx.Node]
) -> tuple[torch.fx.Node, ...] | None:
    """The views to move with write-back ``n`` before ``first``, or None when moving it changes another read."""
    lo, hi = a.position(first), a.position(n)
    between = a.nodes[lo:hi]
    dst = n.args[0]
    touching_dst = {acc.node for acc in a.accesses_overlapping(dst)}  # type: ignore[arg-type]
    if any(m in touching_dst for m in between):
        return None  # a node in between reads or writes what ``n`` writes
    for x in _reads(a, n):
        if x in stale:
            continue
        if any(acc.node in between for acc in a.accesses_overlapping(x, "write")):
            return None  # ``n`` reads something written in between that it is meant to see
    moved: list[torch.fx.Node] = []
    todo = [x for x in n.all_input_nodes if a.position(x) >= lo]
    while todo:
        x = todo.pop()
        if x in moved:
            continue
        if not _is_pure_view(a, x):
            return None
        moved.append(x)
        todo.extend(y for y in x.all_input_nodes if a.position(y) >= lo)
    return tuple(sorted(moved, key=a.position))


def guard_stale_reads(
    graph: torch.fx.Graph, *, donated_inputs: Iterable[int] = (), hazards: Collection[str] = ALL_HAZARDS
) -> GuardReport:
    """H1 on a functional post-grad graph (before anything adds in-place ops to it); mutates ``graph``.

    Never raises: a failure is reported in :attr:`GuardReport.error` and
    leaves the fixes done so far. Does nothing unless ``"H1"`` is in ``hazards``.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def swapped(a, b):
    ...     a.copy_(b)
    ...     b.copy_(a)
    >>> gm = make_fx(swapped, tracing_mode="fake")(torch.zeros(2), torch.ones(2))
    >>> first, second = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
    >>> second.replace_input_with(first, first.args[0])  # ``t = a.clone(); a.copy_(b); b.copy_(t)``, clone dropped
    >>> print(guard_stale_reads(gm.graph))
    fx-aliasing guard: 1 hazard(s) guarded (H1 clone at copy__1); 1 copy(ies), 8 B
      H1 stale-input-read: clone at copy__1, cloned clone_default; 8 B (evidence: copy_)
    """
    if "H1" not in hazards:
        return GuardReport()
    return _guarded_rounds(
        graph, plan_stale_reads, relevant=_has_two_write_backs, donated_inputs=donated_inputs, max_rounds=8
    )


def _has_two_write_backs(graph: torch.fx.Graph) -> bool:
    return sum(1 for n in graph.find_nodes(op="call_function", target=aten.copy_.default) if _is_write_back(n)) >= 2


# ---------------------------------------------------------------------------
# what Inductor's reinplacing will do


@dataclass(frozen=True)
class Reinplacing:
    """An op Inductor's ``reinplace_inplaceable_ops`` will turn into an in-place write.

    ``node`` writes ``into`` (its first argument) in place, evaluated at the
    position of ``start`` (a scatter fused with the scatter of its source is
    evaluated at the inner one). ``write_back`` is the write-back into
    ``into`` when ``into`` is a graph input; ``drops_write_back`` when that
    write-back copies ``node``'s own result (Inductor then removes it).
    ``region`` is the region the op writes, for a scatter (None for index_put).
    """

    node: torch.fx.Node
    into: torch.fx.Node
    start: torch.fx.Node
    write_back: torch.fx.Node | None
    drops_write_back: bool
    source: torch.fx.Node | None
    region: Region | None


def _fused_inner(n: torch.fx.Node) -> torch.fx.Node | None:
    """The scatter ``n``'s source is, when Inductor fuses the two (``canonicalize_view_scatter_ops``)."""
    src = n.args[1] if len(n.args) > 1 else None
    if not isinstance(src, torch.fx.Node) or src.target not in SCATTER_VIEWS or not src.args:
        return None
    inner_inp = src.args[0]
    view = SCATTER_VIEWS[n.target]
    if (
        isinstance(inner_inp, torch.fx.Node)
        and inner_inp.target is view
        and inner_inp.args[0] is n.args[0]
        and tuple(inner_inp.args[1:]) == tuple(n.args[2:])
        and dict(inner_inp.kwargs) == dict(n.kwargs)
    ):
        return src
    return None


def _meta_only_use(u: torch.fx.Node, a: AliasAnalysis) -> bool:
    if u.target in _META_ONLY:
        return True
    if u.op == "call_function" and _is_pure_view(a, u):
        return all(_meta_only_use(w, a) for w in u.users)
    return False


def _realized(n: torch.fx.Node, model: InductorModel) -> bool:
    """``torch._inductor.fx_utils.is_node_realized``, with the model's op sets."""
    base = n.args[0] if n.op == "call_function" and n.target is operator.getitem and n.args else n
    if isinstance(base, torch.fx.Node) and (base.op in ("placeholder", "output") or model.is_fallback(base.target)):
        return True
    return any(u.op == "output" or model.realizes_inputs(u.target) for u in n.users)


def _uses_between(
    a: AliasAnalysis,
    into: torch.fx.Node,
    start: torch.fx.Node,
    end: torch.fx.Node | None,
    chain: Collection[torch.fx.Node] = (),
) -> bool:
    """R2: a use of memory overlapping ``into`` after ``start`` (and before ``end``), other than metadata.

    The scatters of a fused ``chain`` are not uses: Inductor replaces them by one scatter at ``start``.
    """
    lo = a.position(start)
    hi = a.position(end) if end is not None else len(a.nodes)
    sharing = {v for s in a.storage_of(into) for v in a.values_in(s)}
    for v in sharing:
        if v is not into and not a.may_overlap(v, into):
            continue
        for u in v.users:
            p = a.position(u)
            if p <= lo or p >= hi:
                continue
            if u in chain or _meta_only_use(u, a):
                continue
            if u.target is aten.copy_.default and u.args[0] is into:
                continue
            return True
    return False


def predict_reinplacing(a: AliasAnalysis, model: InductorModel | None = None) -> list[Reinplacing]:
    """What Inductor 2.13's ``reinplace_inplaceable_ops`` will write in place, read from the graph.

    For ``n = op(into, ...)`` with ``op`` an ``index_put``, ``_unsafe_index_put``
    or scatter (a scatter fused with the scatter of its source counts once):

    R1 ``into`` is a graph input or constant with a ``copy_`` write-back (the
       first one in the graph), or an intermediate; a view of an input is left
       out (Inductor needs a matching view write-back; the guard does not
       predict it);
    R2 no use of a value overlapping ``into`` (its views included) comes after
       ``n`` and before the write-back (after ``n`` for an intermediate),
       other than metadata queries and write-backs into ``into``;
    R3 a scatter also needs: a diagonal or as_strided view, or ``into`` and
       ``n`` realized (an input, an extern kernel, an output or an input of an
       op that realizes its inputs), or, for an input, a write-back of ``n``
       itself.
    """
    m = model or InductorModel()
    first_write_back: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in a.nodes:
        if _is_write_back(n):
            first_write_back.setdefault(n.args[0], n)  # type: ignore[arg-type]
    inner_of_fused: set[torch.fx.Node] = set()  # scatters Inductor fuses into the scatter of their result
    for n in a.nodes:
        if n.op == "call_function" and n.target in SCATTER_VIEWS:
            inner = _fused_inner(n)
            while inner is not None:
                inner_of_fused.add(inner)
                inner = _fused_inner(inner)
    out: list[Reinplacing] = []
    for n in a.nodes:
        if n.op != "call_function" or not n.args or not isinstance(n.args[0], torch.fx.Node):
            continue
        is_scatter = n.target in SCATTER_VIEWS
        if not is_scatter and n.target not in _INDEX_PUTS:
            continue
        if n in inner_of_fused:
            continue
        into = n.args[0]
        start, views, source = n, [n], n.args[1] if is_scatter else None
        inner = _fused_inner(n) if is_scatter else None
        while inner is not None:
            start, source = inner, inner.args[1]
            views.append(inner)
            inner = _fused_inner(inner)
        write_back: torch.fx.Node | None = None
        if _is_pre_existing(into):
            write_back = first_write_back.get(into)
            if write_back is None:
                continue  # R1
            if _uses_between(a, into, start, write_back, views):
                continue  # R2
        elif any(_is_pre_existing(v) for s in a.storage_of(into) for v in a.values_in(s)):
            continue  # R1: a view of an input
        elif _uses_between(a, into, start, None, views):
            continue  # R2
        drops = write_back is not None and write_back.args[1] is n
        if is_scatter:
            mutating = any(v.target in _ALWAYS_MUTATING for v in views)
            if not (mutating or (_realized(into, m) and _realized(n, m)) or (_is_pre_existing(into) and drops)):
                continue  # R3
        region = _written_region(views) if is_scatter else None
        out.append(Reinplacing(n, into, start, write_back, drops, source if isinstance(source, torch.fx.Node) else None, region))
    return out


def _written_region(scatters: list[torch.fx.Node]) -> Region | None:
    """The region the (fused) scatter chain writes in its outer input's storage."""
    t = _tensor(scatters[0].args[0])  # type: ignore[arg-type]
    if t is None:
        return None
    mode = getattr(t, "fake_mode", None)
    try:
        with mode if mode is not None else nullcontext():
            for s in scatters:
                view = SCATTER_VIEWS[s.target]
                t = view(t, *s.args[2:], **s.kwargs)
    except Exception:
        return None
    return _region_of_value(t)


# ---------------------------------------------------------------------------
# H2-H6: Inductor's later passes on the final post-grad graph


def _late_uses(a: AliasAnalysis, value: torch.fx.Node, after: torch.fx.Node) -> list[torch.fx.Node]:
    """Nodes after ``after`` that read ``value`` or a view of it (the output node included)."""
    p = a.position(after)
    views = set(_views_of(a, value))
    return sorted(
        {u for v in views for u in v.users if a.position(u) > p and not _meta_only_use(u, a) and u not in views},
        key=a.position,
    )


def _is_extern(u: torch.fx.Node, model: InductorModel) -> bool:
    """An op Inductor runs as a separate kernel that reads its inputs before anything after it runs."""
    t = u.target
    if isinstance(t, torch._ops.OpOverload):
        return t.namespace not in ("aten", "prims") or model.is_separate_kernel(t)
    return isinstance(t, torch._ops.HigherOrderOperator)


def _reads_elsewhere(a: AliasAnalysis, r: Reinplacing, model: InductorModel) -> bool:
    """H4: the write-back's value depends on ``r.node``'s result read at other positions.

    A same-shape pointwise op and a view of the same layout read the positions
    they produce; an extern kernel (a matmul, a custom op) reads all of its
    input before anything after it runs: the path ends there. Anything else
    (other views, reductions, flips, gathers, concatenations) may be fused
    into the loop that writes ``r.into`` and reads other positions.
    """
    wb = r.write_back
    if wb is None or r.drops_write_back:
        return False
    target = wb.args[1]
    end = a.position(wb)
    seen: set[tuple[torch.fx.Node, bool]] = set()
    todo: list[tuple[torch.fx.Node, bool]] = [(r.node, False)]
    while todo:
        v, remapped = todo.pop()
        if (v, remapped) in seen:
            continue
        seen.add((v, remapped))
        if v is target:
            if remapped:
                return True
            continue
        vt = _tensor(v)
        for u in v.users:
            if a.position(u) >= end or u.op != "call_function" or _is_extern(u, model):
                continue
            ut = _tensor(u)
            same = False
            if ut is not None and vt is not None and tuple(ut.shape) == tuple(vt.shape):
                if _is_pure_view(a, u):
                    same = same_region(_region_of_value(ut), _region_of_value(vt))
                elif isinstance(u.target, torch._ops.OpOverload) and torch.Tag.pointwise in u.target.tags:
                    same = same_region(
                        Region(0, tuple(ut.shape), tuple(ut.stride()), 1), Region(0, tuple(vt.shape), tuple(vt.stride()), 1)
                    )
            todo.append((u, remapped or not same))
    return False


def _output_aliases(a: AliasAnalysis, value: torch.fx.Node) -> list[torch.fx.Node]:
    out = a.output_node
    if out is None:
        return []
    views = set(_views_of(a, value))
    return [x for x in out.all_input_nodes if x in views]


def _returned_as_is(out: torch.fx.Node | None, outputs: OutputRoles | None) -> set[torch.fx.Node]:
    """The output values some position of which the runtime does not regenerate (all of them without ``outputs``)."""
    flat = _flat_args(out)
    regenerated = outputs.regenerated if outputs is not None else frozenset()
    return {x for i, x in enumerate(flat) if isinstance(x, torch.fx.Node) and i not in regenerated}


def _dtype_view_hazards(a: AliasAnalysis) -> list[_Fix]:
    """H6: element-size-changing (or complex) dtype views of contiguous memory read before a later write."""
    fixes: list[_Fix] = []
    for d in a.nodes:
        if d.op != "call_function" or d.target is not aten.view.dtype or not isinstance(d.args[0], torch.fx.Node):
            continue
        base, dt = d.args[0], d.args[1]
        bt, out = _tensor(base), _tensor(d)
        if bt is None or out is None or not isinstance(dt, torch.dtype):
            continue
        if bt.element_size() == out.element_size() and not (bt.is_complex() or out.is_complex()):
            continue  # a bitcast: Inductor tracks it like any read
        if not bt.is_contiguous():
            continue  # Inductor copies a non-contiguous base first
        views = _views_of(a, d)
        if any(acc.value in views for acc in a.accesses_overlapping(d, "write")):
            continue  # written through the view: cloning the base would change what it writes
        readers = [u for v in views for u in v.users if u.op != "output" and v in _reads(a, u)]
        if not readers:
            continue
        first = min(a.position(u) for u in readers)
        later = [w for w in a.writers(d) if a.position(w) > first]
        if later:
            fixes.append(_CloneInput(Hazard.DTYPE_VIEW_READ_LATE, d, base, d, tuple(w.name for w in later[:3])))
    return fixes


def plan_inductor_hazards(
    a: AliasAnalysis, model: InductorModel | None = None, outputs: OutputRoles | None = None
) -> list[_Fix]:
    """H2-H6 on the final post-grad graph: the protective clones Inductor's later passes need.

    Only the classes in ``model.hazards`` are looked for; a fix of one class
    that would also have covered another (H2's clone covers H4 and H5) counts
    only where its own class is looked for. H3 looks only at the outputs the
    caller receives as they are (``outputs``; all of them by default): one
    the runtime regenerates as a view of its input aliases that input in
    eager too.
    """
    m = model or InductorModel()
    escaping = _returned_as_is(a.output_node, outputs)
    fixes: list[_Fix] = []

    def add(fix: _Fix) -> bool:
        if fix.hazard.code not in m.hazards:
            return False
        fixes.append(fix)
        return True

    if m.hazards & {"H2", "H3", "H4", "H5"}:
        for r in predict_reinplacing(a, m):
            wb = r.write_back
            if wb is not None and not r.drops_write_back:
                late = _late_uses(a, r.node, wb)
                if late:
                    ev = (wb.name, *(u.name for u in late[:2]))
                    if add(_CloneInput(Hazard.OVERWRITTEN_RESULT, r.node, r.into, r.node, ev, exact_layout=True)):
                        continue
                elif _reads_elsewhere(a, r, m) and add(
                    _CloneInput(Hazard.WRITE_BACK_READS_ELSEWHERE, r.node, r.into, r.node, (wb.name,), exact_layout=True)
                ):
                    continue
            if wb is not None and r.drops_write_back:
                out = a.output_node
                for v in _output_aliases(a, r.node):
                    if out is not None and v in escaping:
                        add(_CloneInput(Hazard.ESCAPING_RESULT, out, v, out, (r.into.name, wb.name), exact_layout=True))
            if r.source is not None and r.region is not None and _overlaps_destination(a, r):
                user = r.start
                add(_CloneInput(Hazard.OVERLAPPING_SOURCE, user, r.source, user, (r.into.name,)))
    if "H6" in m.hazards:
        fixes.extend(_dtype_view_hazards(a))
    return fixes


def _overlaps_destination(a: AliasAnalysis, r: Reinplacing) -> bool:
    """H5: the scatter's source overlaps the region it writes, without being exactly that region."""
    src = r.source
    if src is None or r.region is None:
        return False
    if not (a.storage_of(src) & a.storage_of(r.into)):
        return False
    sr = a.region_of(src)
    if sr is None:
        return True
    dest = r.region
    if same_region(sr, dest):
        return False  # a copy of a region onto itself reads each element where it writes it
    return regions_may_overlap(sr, dest)


def guard_inductor_hazards(
    graph: torch.fx.Graph,
    model: InductorModel | None = None,
    *,
    donated_inputs: Iterable[int] = (),
    outputs: OutputRoles | None = None,
) -> GuardReport:
    """H2-H6 and H9 on the post-grad graph as Inductor will receive it; mutates ``graph``. Never raises.

    ``outputs`` says which outputs the caller receives as they are (H3; every
    output by default).

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def post_grad(x, src):  # ``y = x.slice_scatter(src, 0, 1, 3); x.zero_(); return y`` (#198094)
    ...     y = torch.ops.aten.slice_scatter.default(x, src, 0, 1, 3)
    ...     x.copy_(torch.zeros(4, 2))
    ...     return y
    >>> gm = make_fx(post_grad, tracing_mode="fake")(torch.zeros(4, 2), torch.ones(2, 2))
    >>> [(g.hazard.code, g.action, g.nbytes) for g in guard_inductor_hazards(gm.graph).guarded]
    [('H2', 'clone', 32)]
    """
    m = model or InductorModel()
    rebased = guard_storage_views(graph, m) if "H9" in m.hazards else GuardReport()
    return rebased.merged(
        _guarded_rounds(
            graph,
            lambda a: plan_inductor_hazards(a, m, outputs),
            relevant=_has_inductor_hazard_nodes,
            donated_inputs=donated_inputs,
            max_rounds=4,
        )
    )


def _has_inductor_hazard_nodes(graph: torch.fx.Graph) -> bool:
    """Scatters and index_puts (H2-H5) or dtype views (H6)."""
    return any(
        graph.find_nodes(op="call_function", target=t) for t in (*SCATTER_VIEWS, *_INDEX_PUTS, aten.view.dtype)
    )


# ---------------------------------------------------------------------------
# H9: storage-relative views taken of a view of an intermediate


@dataclass(frozen=True)
class StorageView:
    """An ``as_strided`` (``node``) of a view of an intermediate: ``root`` owns the storage, ``views`` lead to the operand."""

    node: torch.fx.Node
    root: torch.fx.Node
    views: tuple[torch.fx.Node, ...]


def plan_storage_views(graph: torch.fx.Graph, model: InductorModel | None = None) -> list[StorageView]:
    """H9: the ``as_strided`` ops whose operand is a view of an intermediate Inductor may not have realized.

    ``as_strided`` is relative to its operand's storage, and Inductor keeps a
    view as a view of that storage only over a realized buffer: Inductor
    realizes an ``as_strided`` operand with the operand's strides, and a view
    of an unrealized intermediate (a pointwise ``repeat``, ``x + 1``) then
    becomes a buffer of its own, holding only the view's elements
    (``torch._inductor.graph.GraphLowering.run_node``, "as_strided ops").
    Views of graph inputs, constants and buffers Inductor has before it
    lowers the views (:func:`_buffer_before_views`), and views after an
    element-size-changing dtype view (an extern kernel over the realized
    buffer), stay views.
    """
    m = model or InductorModel()
    found: list[StorageView] = []
    for n in graph.find_nodes(op="call_function", target=aten.as_strided.default):
        v = n.args[0] if n.args else None
        if not isinstance(v, torch.fx.Node):
            continue
        chain = view_chain(v)
        if chain is None:
            continue  # the operand owns its storage: Inductor realizes all of it
        root, views = chain
        rt, vt = _tensor(root), _tensor(v)
        if rt is None or vt is None or storage_key(rt) is None or storage_key(rt) != storage_key(vt):
            continue
        if _buffer_before_views(root, m) or any(_realizing_view(x, m) for x in views):
            continue
        found.append(StorageView(n, root, tuple(views)))
    return found


def _buffer_before_views(root: torch.fx.Node, model: InductorModel) -> bool:
    """Inductor has ``root`` in a buffer of its own before it lowers the views of it.

    A graph input or constant; a returned value (realized as soon as it is
    lowered); a kernel template's result. Not a realizing user's input (it is
    realized only when that user is lowered, perhaps after the views) nor a
    fallback's result (``lowering.fallbacks`` grows as Inductor lowers ops
    that fall back only for some arguments).
    """
    return _is_pre_existing(root) or any(u.op == "output" for u in root.users) or root.target in model.kernel_targets


def _realizing_view(x: torch.fx.Node, model: InductorModel) -> bool:
    """A view Inductor lowers as an (aliasing) extern kernel over its realized input: the views after it stay views."""
    if x.target is operator.getitem:
        return False
    if x.target is not aten.view.dtype:
        return model.is_fallback(x.target)
    # Inductor adds view.dtype to its fallbacks the first time an element size changes; a bitcast stays a view
    if not isinstance(x.args[0], torch.fx.Node):
        return False
    bt, out = _tensor(x.args[0]), _tensor(x)
    if bt is None or out is None:
        return False
    return bt.element_size() != out.element_size() or bt.is_complex() or out.is_complex()


def _storage_base(b: Builder, root: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
    """``root``, or (for a view of another dtype) its storage as one flat ``dtype`` view: what as_strided's units are."""
    rt = _tensor(root)
    if rt is None:
        raise LoweringSkip(f"{root.name} has no tensor metadata")
    if rt.dtype == dtype:
        return root
    from torch._prims_common import compute_required_storage_length

    sizes = [static_int(x) for x in rt.shape]
    strides = [static_int(x) for x in rt.stride()]
    offset = static_int(rt.storage_offset())
    if any(x is None for x in (*sizes, *strides)) or offset is None:
        raise LoweringSkip(f"{root.name}: a symbolic layout under a dtype view")
    needed = int(compute_required_storage_length(sizes, strides, offset))  # type: ignore[arg-type]
    flat = b.call(aten.as_strided.default, (root, [needed], [1], 0))
    return b.call(aten.view.dtype, (flat, dtype))


def guard_storage_views(graph: torch.fx.Graph, model: InductorModel | None = None) -> GuardReport:
    """H9 on the post-grad graph: rebase each :func:`plan_storage_views` ``as_strided`` onto its storage root.

    ``as_strided(view, size, stride, offset)`` views the storage the view
    shares with its root, so ``as_strided(root, size, stride, offset)`` (the
    view's own offset when none is given; over the root's storage in the
    view's dtype when the views change it) is the same view, without a copy;
    Inductor realizes the whole root, exactly as laid out. An op the rebase
    cannot reproduce exactly (a symbolic layout under a dtype view) is left
    as it is and logged. Mutates ``graph``; never raises.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def f(x):  # pytorch/pytorch#197431
    ...     full = x.repeat(3, 2)
    ...     return torch.as_strided(full[:, ::2], (3, 2), full.stride())
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(1, 1))
    >>> print(guard_storage_views(gm.graph))
    fx-aliasing guard: 1 hazard(s) guarded (H9 rebase at as_strided); 0 copy(ies), 0 B
      H9 as-strided-over-a-materialised-view: rebase at as_strided, rebased onto repeat; 0 B (evidence: slice_1)
    """
    done: list[Guarded] = []
    try:
        plans = plan_storage_views(graph, model)
        if not plans:
            return GuardReport()
        b = _builder(graph)
        for sv in plans:
            n, v = sv.node, sv.node.args[0]
            assert isinstance(v, torch.fx.Node)  # checked by plan_storage_views
            vt, nt = _tensor(v), _tensor(n)
            if vt is None or nt is None:
                continue
            start = len(b.created)
            kwargs = dict(n.kwargs)
            offset = n.args[3] if len(n.args) > 3 else kwargs.pop("storage_offset", None)
            try:
                with graph.inserting_before(n):
                    if offset is None:  # as_strided keeps the operand's own offset
                        off = vt.storage_offset()
                        offset = off if static_int(off) is not None else b.call(aten.sym_storage_offset.default, (v,))
                    base = _storage_base(b, sv.root, vt.dtype)
                    args = (base, n.args[1], n.args[2], offset)
                    fargs, fkwargs = b.fake((args, kwargs))
                    with b.mode:
                        got = aten.as_strided.default(*fargs, **fkwargs)
            except Exception as e:  # the fake op raised, or a skip above
                undo(graph, b, start)
                log.debug("as_strided %s not rebased onto %s: %s", n.name, sv.root.name, e)
                continue
            if not _same_layout(got, nt):
                undo(graph, b, start)
                log.debug("as_strided %s not rebased onto %s: the layout would change", n.name, sv.root.name)
                continue
            n.args, n.kwargs = args, kwargs
            for x in dict.fromkeys((v, *sv.views)):  # the operand, then each view's parent: drop the dead ones
                if not x.users:
                    graph.erase_node(x)
            helpers = tuple(x.name for x in b.created[start:] if x is not base)
            evidence = tuple(x.name for x in sv.views)
            done.append(Guarded(Hazard.STORAGE_VIEW_OF_COPY, n.name, "rebase", (base.name, *helpers), 0, evidence))
        if done:
            graph.lint()
            recompile(graph)
    except Exception as e:
        log.warning("fx-aliasing storage-view guard stopped: %s: %s", type(e).__name__, e)
        return GuardReport(tuple(done), f"{type(e).__name__}: {e}")
    return GuardReport(tuple(done))


def _same_layout(t: torch.Tensor, u: torch.Tensor) -> bool:
    """Equal dtype, sizes, strides and storage offset (symbolic ones only where known equal)."""
    return (
        t.dtype == u.dtype
        and t.dim() == u.dim()
        and all(known_equal(p, q) for p, q in zip(t.shape, u.shape))
        and all(known_equal(p, q) for p, q in zip(t.stride(), u.stride()))
        and known_equal(t.storage_offset(), u.storage_offset())
    )


# ---------------------------------------------------------------------------
# H7: the joint graph, before remove_noop_ops


def _observes_layout(u: torch.fx.Node) -> bool:
    """An op that may observe a tensor's storage offset: anything but ATen and prims compute."""
    if u.op != "call_function" or u.target is operator.getitem:
        return False
    t = u.target
    if isinstance(t, torch._ops.OpOverload):
        return t.namespace not in ("aten", "prims") or t is aten.sym_storage_offset.default
    return True  # higher-order ops (auto_functionalized wraps the custom op) and Python callables


def _layout_args(b: Builder, v: torch.fx.Node, t: torch.Tensor) -> tuple[list[Any], list[Any], Any]:
    """Sizes, strides and offset of ``v`` as as_strided arguments (symbolic ones read from ``v``)."""
    sizes: list[Any] = []
    strides: list[Any] = []
    for d, (s, st) in enumerate(zip(t.shape, t.stride())):
        sizes.append(s if static_int(s) is not None else b.call(aten.sym_size.int, (v, d)))
        strides.append(st if static_int(st) is not None else b.call(aten.sym_stride.int, (v, d)))
    off = t.storage_offset()
    offset = off if static_int(off) is not None else b.call(aten.sym_storage_offset.default, (v,))
    return sizes, strides, offset


def plan_offset_clones(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """H7: clones ``remove_noop_ops`` would drop although their storage offset differs and an opaque op reads them."""
    inputs = {storage_key(meta_value(n)) for n in graph.nodes if n.op == "placeholder"}
    out_node = next((n for n in graph.nodes if n.op == "output"), None)
    outputs = {storage_key(meta_value(x)) for x in (out_node.all_input_nodes if out_node is not None else [])}
    found: list[torch.fx.Node] = []
    for c in graph.nodes:
        if c.op != "call_function" or c.target is not aten.clone.default or len(c.args) != 1:
            continue
        v = c.args[0]
        if not isinstance(v, torch.fx.Node):
            continue
        ct, vt = _tensor(c), _tensor(v)
        if ct is None or vt is None:
            continue
        same_meta = (
            ct.dtype == vt.dtype
            and ct.device == vt.device
            and ct.is_conj() == vt.is_conj()
            and ct.is_neg() == vt.is_neg()
            and len(ct.shape) == len(vt.shape)
            and all(known_equal(p, q) for p, q in zip(ct.shape, vt.shape))
            and all(known_equal(p, q) for p, q in zip(ct.stride(), vt.stride()))
        )
        if not same_meta or known_equal(ct.storage_offset(), vt.storage_offset()):
            continue
        cs, vs = storage_key(ct), storage_key(vt)
        if cs in outputs and (vs in inputs or vs in outputs):
            continue  # remove_noop_ops keeps it (no new input/output aliasing)
        if _reaches_observer(c):
            found.append(c)
    return found


def _reaches_observer(c: torch.fx.Node) -> bool:
    todo, seen = [c], {c}
    while todo:
        v = todo.pop()
        for u in v.users:
            if _observes_layout(u):
                return True
            if u.op == "call_function" and isinstance(u.target, torch._ops.OpOverload) and u.target.is_view and u not in seen:
                seen.add(u)
                todo.append(u)
    return False


def guard_joint_graph(
    graph: torch.fx.Graph, *, hazards: Collection[str] = ALL_HAZARDS, outputs: OutputRoles | None = None
) -> GuardReport:
    """H7 and H8 on the joint graph (``joint_custom_pre_pass``, before ``remove_noop_ops``); mutates ``graph``.

    Only the classes in ``hazards`` are looked for. H7: each protected clone
    becomes ``aten.as_strided_copy`` of its source with the source's own
    sizes, strides and offset: the same copy, with the same layout, under a
    name the no-op removal does not drop. H8 (:func:`guard_collapsed_outputs`):
    each returned value Inductor would return as the same object as another
    becomes a distinct view of it; ``outputs`` says which outputs the caller
    receives as they are (all of them by default). Never raises.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> @torch.library.custom_op("guard_doc::offset", mutates_args=())
    ... def offset(x: torch.Tensor) -> torch.Tensor:
    ...     return torch.tensor(x.storage_offset())
    >>> @offset.register_fake
    ... def _(x):
    ...     return torch.empty((), dtype=torch.int64)
    >>> gm = make_fx(lambda x: offset(x[1:].clone()), tracing_mode="fake")(torch.arange(8.0))
    >>> print(guard_joint_graph(gm.graph))
    fx-aliasing guard: 1 hazard(s) guarded (H7 clone at clone); 1 copy(ies), 28 B
      H7 offset-changing-clone-dropped: clone at clone, cloned as_strided_copy_default; 28 B (evidence: offset)
    """
    report = _guard_offset_clones(graph) if "H7" in hazards else GuardReport()
    if "H8" in hazards:
        report = report.merged(guard_collapsed_outputs(graph, outputs))
    return report


def _guard_offset_clones(graph: torch.fx.Graph) -> GuardReport:
    done: list[Guarded] = []
    try:
        clones = plan_offset_clones(graph)
        if not clones:
            return GuardReport()
        b = _builder(graph)
        for c in clones:
            v = c.args[0]
            assert isinstance(v, torch.fx.Node)  # checked by plan_offset_clones
            vt, ct = _tensor(v), _tensor(c)
            if vt is None or ct is None:
                continue
            start = len(b.created)
            with graph.inserting_before(c):
                sizes, strides, offset = _layout_args(b, v, vt)
                copy = b.call(aten.as_strided_copy.default, (v, sizes, strides, offset))
            nt = _tensor(copy)
            if nt is None or not (
                all(known_equal(p, q) for p, q in zip(nt.stride(), ct.stride())) and known_equal(nt.storage_offset(), 0)
            ):
                for n in reversed(b.created[start:]):
                    graph.erase_node(n)
                del b.created[start:]
                log.debug("offset-changing clone %s kept as it is: as_strided_copy would change its layout", c.name)
                continue
            readers = tuple(u.name for u in c.users if _observes_layout(u))
            c.replace_all_uses_with(copy)
            graph.erase_node(c)
            done.append(Guarded(Hazard.OFFSET_CLONE_DROPPED, c.name, "clone", (copy.name,), _nbytes(copy), readers))
        graph.lint()
        recompile(graph)
    except Exception as e:
        log.warning("fx-aliasing joint-graph guard stopped: %s: %s", type(e).__name__, e)
        return GuardReport(tuple(done), f"{type(e).__name__}: {e}")
    return GuardReport(tuple(done))


# ---------------------------------------------------------------------------
# H8: the joint graph's returned values, before remove_noop_ops and pointless_view


#: Returned instead of a collapsing output: a view op with no Inductor lowering or decomposition, so
#: Inductor calls it (an implicit fallback kernel) and the caller gets a tensor object of its own.
_DISTINCT_VIEW = aten.view_as.default


@dataclass(frozen=True)
class CollapsedOutput:
    """A returned ``value`` Inductor would return as the very object it returns for ``kept``, at ``positions``."""

    value: torch.fx.Node
    kept: torch.fx.Node
    positions: tuple[int, ...]


def plan_collapsed_outputs(graph: torch.fx.Graph, outputs: OutputRoles | None = None) -> list[CollapsedOutput]:
    """H8: distinct returned values Inductor returns as one tensor object.

    Inductor returns a value whose layout (dtype, sizes, strides, offset) is
    its storage root's as the root's buffer itself: its joint-graph passes
    drop no-op views (``remove_noop_ops``: ``alias`` (a ``detach``), full
    slices; ``pointless_view``: a ``view`` to the same sizes), and its
    wrapper code returns any view of a buffer with the buffer's layout as the
    buffer (``PythonWrapperCodegen.codegen_reinterpret_view``). Two such
    returned values of one storage become one object, where eager returns two
    that share the storage: a later ``resize_`` (or any metadata change) of
    one changes the other. Only the outputs the caller receives as they are
    count (``outputs``; every one by default); values of an input's storage
    are the runtime's (it regenerates every output that aliases an input).
    The first such value of a storage keeps its place (its root, if it is
    returned).
    """
    out = _output_of(graph)
    flat = _flat_args(out)
    returned = range(len(flat)) if outputs is None else sorted(i for i in outputs.returned if i < len(flat))
    inputs = {storage_key(meta_value(n)) for n in graph.nodes if _is_pre_existing(n)}
    groups: dict[int, list[torch.fx.Node]] = {}
    roots: dict[int, torch.fx.Node] = {}
    for i in returned:
        x = flat[i]
        if not isinstance(x, torch.fx.Node):
            continue
        t = _tensor(x)
        key = storage_key(t)
        if t is None or key is None or key in inputs:
            continue
        found = view_chain(x)
        root = found[0] if found is not None else x
        rt = _tensor(root)
        if rt is None or storage_key(rt) != key or not _same_layout(t, rt):
            continue  # returned as a reinterpret_tensor of the root's buffer: an object of its own
        members = groups.setdefault(key, [])
        roots[key] = root
        if x not in members:
            members.append(x)
    found_: list[CollapsedOutput] = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        kept = roots[key] if roots[key] in members else members[0]
        for x in members:
            if x is not kept:
                found_.append(CollapsedOutput(x, kept, tuple(i for i in returned if flat[i] is x)))
    return found_


def guard_collapsed_outputs(graph: torch.fx.Graph, outputs: OutputRoles | None = None) -> GuardReport:
    """H8 on the joint graph: return a distinct view (``aten.view_as(v, v)``) for each :func:`plan_collapsed_outputs` value.

    The view shares the storage and has the value's layout, so the caller
    gets what eager gives it: distinct tensor objects over one storage, at no
    copy. Inductor has no lowering for ``view_as`` and calls it as an
    (implicit) fallback kernel, which returns an object of its own. Mutates
    ``graph``; never raises.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def f(x):  # pytorch/pytorch#191449: ``alias.resize_(12)`` follows, after a graph break
    ...     base = x + 1
    ...     return base, base.view(-1)
    >>> gm = make_fx(f, tracing_mode="fake")(torch.zeros(1))
    >>> print(guard_collapsed_outputs(gm.graph))
    fx-aliasing guard: 1 hazard(s) guarded (H8 view at view); 0 copy(ies), 0 B
      H8 distinct-outputs-returned-as-one-object: view at view, returned view_as_default; 0 B (evidence: add)
    """
    done: list[Guarded] = []
    try:
        plans = plan_collapsed_outputs(graph, outputs)
        out = _output_of(graph)
        if not plans or out is None:
            return GuardReport()
        b = _builder(graph)
        flat, spec = pytree.tree_flatten(out.args[0])
        for c in plans:
            with graph.inserting_before(out):
                distinct = b.call(_DISTINCT_VIEW, (c.value, c.value))
            for i in c.positions:
                flat[i] = distinct
            done.append(Guarded(Hazard.OUTPUTS_COLLAPSED, c.value.name, "view", (distinct.name,), 0, (c.kept.name,)))
        out.args = (pytree.tree_unflatten(flat, spec), *out.args[1:])
        graph.lint()
        recompile(graph)
    except Exception as e:
        log.warning("fx-aliasing output-identity guard stopped: %s: %s", type(e).__name__, e)
        return GuardReport(tuple(done), f"{type(e).__name__}: {e}")
    return GuardReport(tuple(done))


def protected_nodes(graph: torch.fx.Graph, report: GuardReport) -> Collection[torch.fx.Node]:
    """The nodes of ``graph`` that are the guard's copies in ``report``."""
    names = set(report.clones)
    return [n for n in graph.nodes if n.name in names]
