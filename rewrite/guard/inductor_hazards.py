"""H2-H6 (and the H9 stage before them): Inductor's later passes on the final post-grad graph.

H2-H5 follow from what Inductor writes in place (:mod:`rewrite.guard.reinplacing`),
H6 from its aliasing dtype views; :func:`guard_inductor_hazards` is the
post-grad stage that runs them, after the H9 rebase
(:mod:`rewrite.guard.storage_views`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.fx

from aliasing import AliasAnalysis
from aliasing.core.facts import same_region
from aliasing.core.regions import Region, regions_may_overlap
from rewrite.guard.common import (
    flat_args,
    is_pure_view,
    meta_only_use,
    reads_of,
    region_of_value,
    strided_tensor,
    views_of,
)
from rewrite.guard.fixes import CloneInput, Fix, guarded_rounds
from rewrite.guard.hazards import GuardReport, Hazard, InductorModel, OutputRoles
from rewrite.guard.reinplacing import INDEX_PUTS, Reinplacing, predict_reinplacing
from rewrite.guard.storage_views import guard_storage_views
from rewrite.lowering.scatter import SCATTER_VIEWS

__all__ = ["guard_inductor_hazards", "plan_inductor_hazards"]

aten = torch.ops.aten


def _late_uses(a: AliasAnalysis, value: torch.fx.Node, after: torch.fx.Node) -> list[torch.fx.Node]:
    """Nodes after ``after`` that read ``value`` or a view of it (the output node included)."""
    p = a.position(after)
    views = set(views_of(a, value))
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
                if is_pure_view(a, u):
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
    views = set(views_of(a, value))
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
        views = views_of(a, d)
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
