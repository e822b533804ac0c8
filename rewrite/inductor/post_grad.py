"""The post-grad stages of the guard: H1, then (after the clone elimination) H9 and H2-H6.

H1 (:func:`guard_stale_reads`) runs on the functional post-grad graph,
before the lowering and the clone elimination. :func:`guard_inductor_hazards`
runs on the graph as Inductor will receive it: H9's rebase
(:func:`guard_storage_views`), then H2-H6. H2-H5 follow from what Inductor's
``reinplace_inplaceable_ops`` will write in place (:func:`predict_reinplacing`,
conditions R1-R3), H6 from its aliasing dtype views.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.fx

from aliasing import AliasAnalysis
from aliasing.core.facts import same_region, storage_identity
from aliasing.core.ops import ALWAYS_MUTATING_SCATTERS, INDEX_PUTS, SCATTER_VIEWS
from aliasing.core.regions import Region, regions_may_overlap
from rewrite.editing.nodes import Builder, LoweringSkip, computing, recompile, static_int, undo, view_chain
from rewrite.inductor.fixes import (
    CloneInput,
    Fix,
    Reorder,
    flat_args,
    guarded_rounds,
    is_pre_existing,
    is_write_back,
    log,
    meta_only_use,
    node_builder,
    reads_of,
    region_of_value,
    same_layout,
    strided_tensor,
)
from rewrite.inductor.hazards import ALL_HAZARDS, Guarded, GuardReport, Hazard, InductorModel, OutputRoles

__all__ = [
    "Reinplacing",
    "StorageView",
    "guard_inductor_hazards",
    "guard_stale_reads",
    "guard_storage_views",
    "plan_inductor_hazards",
    "plan_stale_reads",
    "plan_storage_views",
    "predict_reinplacing",
]

aten = torch.ops.aten


# ---------------------------------------------------------------------------
# H1: a write-back that reads an input after that input's own write-back (a copy remove_noop_ops dropped)

def _epilogue_start(a: AliasAnalysis) -> int:
    """Position of the first node of the trailing run of write-backs, pure views and the output."""
    nodes = a.nodes
    start = len(nodes)
    for n in reversed(nodes):
        if n.op == "output" or is_write_back(n) or a.view_source(n) is not None or n.op in ("placeholder", "get_attr"):
            start -= 1
            continue
        break
    return start


def plan_stale_reads(a: AliasAnalysis) -> list[Fix]:
    """H1: the first write-back that reads an input after its own write-back, and how to restore the old value.

    Only the trailing epilogue of write-backs is considered: anywhere else a
    read after a write may be meant. One write-back is fixed per round (a
    reorder changes the positions the next decision depends on).
    """
    start = _epilogue_start(a)
    nodes = a.nodes
    write_backs = [n for n in nodes[start:] if is_write_back(n)]
    fixes: list[Fix] = []
    for n in write_backs:
        pos = a.position(n)
        stale: list[tuple[torch.fx.Node, torch.fx.Node]] = []  # (value read, the write-back it reads after)
        for x in reads_of(a, n):
            root = a.view_root(x)
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
            return [Reorder(Hazard.STALE_INPUT_READ, n, first, reorder, evidence)]
        for x, w in stale:
            replay_from = None if a.position(x) < a.position(w) else a.view_root(x)
            fixes.append(CloneInput(Hazard.STALE_INPUT_READ, n, x, w, evidence, replay_from))
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
    for x in reads_of(a, n):
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
        if a.view_source(x) is None:
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
    >>> def f(dst, src):
    ...     src.copy_(src + 1)
    ...     dst.copy_(src)
    >>> gm = make_fx(f, tracing_mode="fake")(torch.zeros(3), torch.ones(3))
    >>> first, second = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
    >>> second.replace_input_with(first, first.args[0])  # what the hook sees for ``dst[:] = src; src.add_(1)``
    >>> [(g.hazard.code, g.action, g.nbytes) for g in guard_stale_reads(gm.graph).guarded]
    [('H1', 'reorder', 0)]
    >>> [n.name for n in gm.graph.nodes if n.op == "call_function"]  # dst takes src's old value first
    ['add', 'copy__1', 'copy_']

    When moving the write-back would change another read (two inputs copied
    into each other), what it reads is cloned instead:

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
    return guarded_rounds(
        graph, plan_stale_reads, relevant=_has_two_write_backs, donated_inputs=donated_inputs, max_rounds=8
    )


def _has_two_write_backs(graph: torch.fx.Graph) -> bool:
    return sum(1 for n in graph.find_nodes(op="call_function", target=aten.copy_.default) if is_write_back(n)) >= 2


# ---------------------------------------------------------------------------
# What Inductor's reinplace_inplaceable_ops will write in place (R1-R3), read from the graph

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
            if u in chain or meta_only_use(u, a):
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
        if is_write_back(n):
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
        if not is_scatter and n.target not in INDEX_PUTS:
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
        if is_pre_existing(into):
            write_back = first_write_back.get(into)
            if write_back is None:
                continue  # R1
            if _uses_between(a, into, start, write_back, views):
                continue  # R2
        elif any(is_pre_existing(v) for s in a.storage_of(into) for v in a.values_in(s)):
            continue  # R1: a view of an input
        elif _uses_between(a, into, start, None, views):
            continue  # R2
        drops = write_back is not None and write_back.args[1] is n
        if is_scatter:
            mutating = any(v.target in ALWAYS_MUTATING_SCATTERS for v in views)
            if not (mutating or (_realized(into, m) and _realized(n, m)) or (is_pre_existing(into) and drops)):
                continue  # R3
        region = _written_region(views) if is_scatter else None
        out.append(Reinplacing(n, into, start, write_back, drops, source if isinstance(source, torch.fx.Node) else None, region))
    return out


def _written_region(scatters: list[torch.fx.Node]) -> Region | None:
    """The region the (fused) scatter chain writes in its outer input's storage."""
    t = strided_tensor(scatters[0].args[0])  # type: ignore[arg-type]
    if t is None:
        return None
    mode = getattr(t, "fake_mode", None)
    try:
        with computing(mode) if mode is not None else nullcontext():
            for s in scatters:
                view = SCATTER_VIEWS[s.target]
                t = view(t, *s.args[2:], **s.kwargs)
    except Exception:
        return None
    return region_of_value(t)


# ---------------------------------------------------------------------------
# H2-H6: Inductor's later passes on the final post-grad graph

def _late_uses(a: AliasAnalysis, value: torch.fx.Node, after: torch.fx.Node) -> list[torch.fx.Node]:
    """Nodes after ``after`` that read ``value`` or a view of it (the output node included)."""
    p = a.position(after)
    views = set(a.views_of(value))
    return sorted(
        {u for v in views for u in v.users if a.position(u) > p and not meta_only_use(u, a) and u not in views},
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
        vt = strided_tensor(v)
        for u in v.users:
            if a.position(u) >= end or u.op != "call_function" or _is_extern(u, model):
                continue
            ut = strided_tensor(u)
            same = False
            if ut is not None and vt is not None and tuple(ut.shape) == tuple(vt.shape):
                if a.view_source(u) is not None:
                    same = same_region(region_of_value(ut), region_of_value(vt))
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
    views = set(a.views_of(value))
    return [x for x in out.all_input_nodes if x in views]


def _returned_as_is(out: torch.fx.Node | None, outputs: OutputRoles | None) -> set[torch.fx.Node]:
    """The output values some position of which the runtime does not regenerate (all of them without ``outputs``)."""
    flat = flat_args(out)
    regenerated = outputs.regenerated if outputs is not None else frozenset()
    return {x for i, x in enumerate(flat) if isinstance(x, torch.fx.Node) and i not in regenerated}


def _dtype_view_hazards(a: AliasAnalysis) -> list[Fix]:
    """H6: element-size-changing (or complex) dtype views of contiguous memory read before a later write."""
    fixes: list[Fix] = []
    for d in a.nodes:
        if d.op != "call_function" or d.target is not aten.view.dtype or not isinstance(d.args[0], torch.fx.Node):
            continue
        base, dt = d.args[0], d.args[1]
        bt, out = strided_tensor(base), strided_tensor(d)
        if bt is None or out is None or not isinstance(dt, torch.dtype):
            continue
        if bt.element_size() == out.element_size() and not (bt.is_complex() or out.is_complex()):
            continue  # a bitcast: Inductor tracks it like any read
        if not bt.is_contiguous():
            continue  # Inductor copies a non-contiguous base first
        views = a.views_of(d)
        if any(acc.value in views for acc in a.accesses_overlapping(d, "write")):
            continue  # written through the view: cloning the base would change what it writes
        readers = [u for v in views for u in v.users if u.op != "output" and v in reads_of(a, u)]
        if not readers:
            continue
        first = min(a.position(u) for u in readers)
        later = [w for w in a.writers(d) if a.position(w) > first]
        if later:
            fixes.append(CloneInput(Hazard.DTYPE_VIEW_READ_LATE, d, base, d, tuple(w.name for w in later[:3])))
    return fixes


def plan_inductor_hazards(
    a: AliasAnalysis, model: InductorModel | None = None, outputs: OutputRoles | None = None
) -> list[Fix]:
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
    fixes: list[Fix] = []

    def add(fix: Fix) -> bool:
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
                    if add(CloneInput(Hazard.OVERWRITTEN_RESULT, r.node, r.into, r.node, ev, exact_layout=True)):
                        continue
                elif _reads_elsewhere(a, r, m) and add(
                    CloneInput(Hazard.WRITE_BACK_READS_ELSEWHERE, r.node, r.into, r.node, (wb.name,), exact_layout=True)
                ):
                    continue
            if wb is not None and r.drops_write_back:
                out = a.output_node
                for v in _output_aliases(a, r.node):
                    if out is not None and v in escaping:
                        add(CloneInput(Hazard.ESCAPING_RESULT, out, v, out, (r.into.name, wb.name), exact_layout=True))
            if r.source is not None and r.region is not None and _overlaps_destination(a, r):
                user = r.start
                add(CloneInput(Hazard.OVERLAPPING_SOURCE, user, r.source, user, (r.into.name,)))
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
        guarded_rounds(
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
        graph.find_nodes(op="call_function", target=t) for t in (*SCATTER_VIEWS, *INDEX_PUTS, aten.view.dtype)
    )


# ---------------------------------------------------------------------------
# H9: a storage-relative as_strided of a view of an intermediate, rebased onto the storage root

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
        rt, vt = strided_tensor(root), strided_tensor(v)
        if rt is None or vt is None or storage_identity(rt) is None or storage_identity(rt) != storage_identity(vt):
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
    return is_pre_existing(root) or any(u.op == "output" for u in root.users) or root.target in model.kernel_targets


def _realizing_view(x: torch.fx.Node, model: InductorModel) -> bool:
    """A view Inductor lowers as an (aliasing) extern kernel over its realized input: the views after it stay views."""
    if x.target is operator.getitem:
        return False
    if x.target is not aten.view.dtype:
        return model.is_fallback(x.target)
    # Inductor adds view.dtype to its fallbacks the first time an element size changes; a bitcast stays a view
    if not isinstance(x.args[0], torch.fx.Node):
        return False
    bt, out = strided_tensor(x.args[0]), strided_tensor(x)
    if bt is None or out is None:
        return False
    return bt.element_size() != out.element_size() or bt.is_complex() or out.is_complex()


def _storage_base(b: Builder, root: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
    """``root``, or (for a view of another dtype) its storage as one flat ``dtype`` view: what as_strided's units are."""
    rt = strided_tensor(root)
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
        b = node_builder(graph)
        erased: set[torch.fx.Node] = set()  # plans may share views (nested as_strided of one view)
        for sv in plans:
            n, v = sv.node, sv.node.args[0]
            assert isinstance(v, torch.fx.Node)  # checked by plan_storage_views
            vt, nt = strided_tensor(v), strided_tensor(n)
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
                    with computing(b.mode):
                        got = aten.as_strided.default(*fargs, **fkwargs)
            except Exception as e:  # the fake op raised, or a skip above
                undo(graph, b, start)
                log.debug("as_strided %s not rebased onto %s: %s", n.name, sv.root.name, e)
                continue
            if not same_layout(got, nt):
                undo(graph, b, start)
                log.debug("as_strided %s not rebased onto %s: the layout would change", n.name, sv.root.name)
                continue
            n.args, n.kwargs = args, kwargs
            for x in dict.fromkeys((v, *sv.views)):  # the operand, then each view's parent: drop the dead ones
                if not x.users and x not in erased:
                    graph.erase_node(x)
                    erased.add(x)
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
