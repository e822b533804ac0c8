"""H9: a storage-relative ``as_strided`` of a view of an intermediate, rebased onto the storage root."""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.fx

from aliasing.core.facts import storage_identity
from rewrite.editing.nodes import Builder, LoweringSkip, computing, recompile, static_int, undo, view_chain
from rewrite.guard.common import is_pre_existing, log, node_builder, same_layout, strided_tensor
from rewrite.guard.hazards import Guarded, GuardReport, Hazard, InductorModel

__all__ = ["StorageView", "guard_storage_views", "plan_storage_views"]

aten = torch.ops.aten


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
