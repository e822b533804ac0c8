"""Keep fake values truthful after a clone is replaced by its original.

After ``c`` is replaced by ``o``, views of ``c`` (and in-place results on it)
still carry fake tensors in ``c``'s fake storage, which would make the
analysis believe the view copied (or miss an alias shown only by fake
evidence). :func:`refresh_stale` recreates each such node with its fake value
recomputed from its current arguments; existing nodes' metadata is never
modified. The lowering does the same for the views of a functional wrapper's
new values once the copies replace them (:func:`refresh_replaced`).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterable
from typing import Any

import torch
import torch.fx

from aliasing.core.facts import has_meta, meta_value, storage_identity
from aliasing.core.ops import DTYPE_VIEWS
from rewrite.editing.nodes import COMPUTE, Builder, fake_mode, take_name

__all__ = ["refresh_replaced", "refresh_stale", "scatter_sources", "storage_keys", "with_views"]

log = logging.getLogger(__name__)


def storage_keys(v: Any) -> set[int]:
    """The fake storages a (possibly nested) fake value lives in."""
    if isinstance(v, (list, tuple)):
        return {k for x in v for k in storage_keys(x)}
    k = storage_identity(v)
    return set() if k is None else {k}


def refresh_stale(
    graph: torch.fx.Graph, stale: set[int], roots: Iterable[torch.fx.Node] | None = None
) -> dict[str, str]:
    """Recreate every node whose fake value still lives in one of the ``stale`` fake storages.

    With ``roots`` (the nodes that took the place of the removed clones), only
    their users are looked at, and the users of every stale node found, in
    turn: a fake value lives in a removed clone's storage only when it was
    made from one that does (a view, an in-place result, an element of a
    tuple), and every use of the clone is now a use of its replacement.
    Without ``roots`` every node of the graph is looked at.

    Nodes are recreated in graph order, each with its fake value recomputed
    from its current arguments under the graph's fake mode. A node whose value
    cannot be recomputed (the graph's values carry several fake modes, as
    ``make_fx`` in real mode leaves them, or fake propagation fails) is left as
    it is: the analysis stays sound over stale metadata (views alias by their
    schema or op identity, unknown ops alias everything), it only loses
    precision. A recreated node takes the name of the node it replaces
    (:func:`rewrite.editing.nodes.take_name`). Returns ``{old name: name now}``
    for the recreated nodes (the same name unless the graph's namespace could
    not be reused; empty if nothing was stale).
    """
    if not stale:
        return {}
    nodes = [n for n in (graph.nodes if roots is None else _reached(graph, roots, stale)) if _is_stale(n, stale)]
    if not nodes:
        return {}
    mode = fake_mode(graph)  # (only now: finding it reads the metadata of the graph's first values)
    if mode is None:
        log.debug("left the stale metadata of %s: the graph has no single fake mode", ", ".join(n.name for n in nodes))
        return {}
    recreated: dict[str, str] = {}
    b = Builder(graph, mode)
    for node in nodes:
        try:
            with graph.inserting_before(node):
                if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
                    parent = meta_value(node.args[0])
                    index: Any = node.args[1]
                    val = parent[index] if isinstance(parent, (list, tuple)) else COMPUTE
                    fresh = b.call(node.target, tuple(node.args), dict(node.kwargs), val=val)
                else:
                    fresh = b.call(node.target, tuple(node.args), dict(node.kwargs))
        except Exception as e:  # the value is computed before the node is created: nothing to undo
            log.debug("left the stale metadata of %s: %s: %s", node.name, type(e).__name__, e)
            continue
        node.replace_all_uses_with(fresh)
        name = node.name
        graph.erase_node(node)
        take_name(fresh, name)
        recreated[name] = fresh.name
    return recreated


def refresh_replaced(graph: torch.fx.Graph, stale: set[int], values: Iterable[torch.fx.Node]) -> set[torch.fx.Node]:
    """After a lowering replaced nodes (whose fake values lived in ``stale``) by ``values``: their
    views, recreated (:func:`refresh_stale`), and ``values`` with those views (:func:`with_views`).

    Functionalization views a new value (a dtype view back to the input's
    dtype, an ``as_strided`` of a base); those views still carry fake values
    in the replaced node's storage until they are recreated from the values
    that replaced it.
    """
    roots = set(values)
    refresh_stale(graph, stale, roots)
    return with_views(roots)


def scatter_sources(values: Iterable[torch.fx.Node]) -> set[torch.fx.Node]:
    """``values`` and the views of them a scatter's source may be, as a lowered value: through
    ``as_strided`` alone (as functionalization records views of a base), or through chains of
    view ops with a dtype view among them. Following every chain of views lowers scatters whose
    clones then stay: more copies than stock Inductor (the GPU benchmark's decoder)."""
    found = set(values)
    seen: set[tuple[torch.fx.Node, bool]] = {(v, False) for v in found}
    todo = [(v, False) for v in found]
    while todo:
        v, dtype_seen = todo.pop()
        for u in v.users:
            if not (
                u.op == "call_function"
                and isinstance(u.target, torch._ops.OpOverload)
                and u.target.is_view
                and u.args
                and u.args[0] is v
            ):
                continue
            now = dtype_seen or u.target in DTYPE_VIEWS
            if (u, now) in seen:
                continue
            seen.add((u, now))
            if now or u.target is torch.ops.aten.as_strided.default:
                found.add(u)
            todo.append((u, now))
    return found


def with_views(values: Iterable[torch.fx.Node]) -> set[torch.fx.Node]:
    """``values`` and their views, through chains of view ops (``as_strided``, ``view.dtype``, ``view_as_real``...)."""
    found = set(values)
    todo = list(found)
    while todo:
        v = todo.pop()
        for u in v.users:
            if (
                u not in found
                and u.op == "call_function"
                and isinstance(u.target, torch._ops.OpOverload)
                and u.target.is_view
                and bool(u.args)
                and u.args[0] is v
            ):
                found.add(u)
                todo.append(u)
    return found


def _is_stale(node: torch.fx.Node, stale: set[int]) -> bool:
    return node.op == "call_function" and has_meta(node) and bool(storage_keys(meta_value(node)) & stale)


def _reached(graph: torch.fx.Graph, roots: Iterable[torch.fx.Node], stale: set[int]) -> list[torch.fx.Node]:
    """The stale nodes among the users of ``roots`` and, transitively, of the stale nodes found,
    in graph order."""
    found: set[torch.fx.Node] = set()
    frontier = [u for r in roots for u in r.users]
    while frontier:
        node = frontier.pop()
        if node in found or not _is_stale(node, stale):
            continue
        found.add(node)
        frontier.extend(node.users)
    if not found:
        return []
    return [n for n in graph.nodes if n in found]
