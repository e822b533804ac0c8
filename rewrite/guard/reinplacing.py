"""What Inductor's ``reinplace_inplaceable_ops`` will write in place (:func:`predict_reinplacing`), read from the graph."""

from __future__ import annotations

import operator
from collections.abc import Collection
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.fx

from aliasing import AliasAnalysis
from aliasing.core.regions import Region
from rewrite.editing.nodes import computing
from rewrite.guard.common import is_pre_existing, is_write_back, meta_only_use, region_of_value, strided_tensor
from rewrite.guard.hazards import InductorModel
from rewrite.lowering.scatter import SCATTER_VIEWS

__all__ = ["INDEX_PUTS", "Reinplacing", "predict_reinplacing"]

aten = torch.ops.aten


#: The ``index_put`` overloads Inductor writes in place (besides the scatters).
INDEX_PUTS = frozenset({aten.index_put.default, aten._unsafe_index_put.default})


#: Scatters Inductor always lowers as a mutation (``_ALWAYS_MUTATING_SCATTER_OPS``' views).
_ALWAYS_MUTATING = frozenset({aten.diagonal_scatter.default, aten.as_strided_scatter.default})


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
            mutating = any(v.target in _ALWAYS_MUTATING for v in views)
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
