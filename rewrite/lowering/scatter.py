"""Lowering of version-1 scatter write-backs: ``*_scatter(base, new_value, ...)``.

Under version-1 functionalization the new value of a mutated view is written
back into its base with a scatter op, which copies the base. When the new
value comes from a lowered wrapper, the scatter becomes ``clone(base)`` plus
an in-place ``copy_`` of the new value into the same view of the clone, so
that the scatter's copy is a clone, and its write a ``copy_``, that the copy
planner (:mod:`rewrite.planning.planner`, C8 and C9) can judge.
"""

from __future__ import annotations

import logging

import torch
import torch.fx

from aliasing.core.facts import known_equal
from aliasing.core.ops import SCATTER_VIEWS
from rewrite.editing.nodes import Builder, LoweringSkip, undo, val
from rewrite.lowering.copies import exact_copy
from rewrite.lowering.metadata import refresh_replaced, scatter_sources, storage_keys
from rewrite.lowering.reports import Lowered

__all__ = ["lower_scatters"]

log = logging.getLogger(__name__)

aten = torch.ops.aten


def lower_scatters(b: Builder, graph: torch.fx.Graph, lowered_values: set[torch.fx.Node]) -> list[Lowered]:
    """Lower ``*_scatter(inp, src, ...)`` whose ``src`` is a new value made by the lowering (mutates ``graph``)."""
    out: list[Lowered] = []
    for node in list(graph.nodes):
        view_op = SCATTER_VIEWS.get(node.target) if node.op == "call_function" else None
        if view_op is None or len(node.args) < 2:
            continue
        inp, src = node.args[0], node.args[1]
        if not isinstance(inp, torch.fx.Node) or not isinstance(src, torch.fx.Node) or src not in lowered_values:
            continue
        sv, iv = val(node), val(inp)
        if not isinstance(sv, torch.Tensor) or not isinstance(iv, torch.Tensor):
            continue
        if not (
            len(sv.stride()) == len(iv.stride())
            and all(known_equal(s, t) for s, t in zip(sv.stride(), iv.stride()))
            and known_equal(sv.storage_offset(), iv.storage_offset())
        ):
            continue  # the scatter's result has another layout than its input: leave it
        start = len(b.created)
        try:
            with graph.inserting_before(node):
                cp = exact_copy(b, inp)
                view = b.call(view_op, (cp.value, *node.args[2:]), dict(node.kwargs))
                b.call(aten.copy_.default, (view, src))
        except LoweringSkip as e:
            undo(graph, b, start)
            log.debug("scatter %s not lowered: %s", node.name, e)
            continue
        except Exception as e:  # fake propagation failed: leave the scatter
            undo(graph, b, start)
            log.debug("scatter %s not lowered: %s: %s", node.name, type(e).__name__, e)
            continue
        stale = storage_keys(val(node))
        node.replace_all_uses_with(cp.value)
        graph.erase_node(node)
        # its views (a dtype view back to the input's dtype), recreated, may feed the next scatter
        refresh_replaced(graph, stale, [cp.value])
        lowered_values |= scatter_sources([cp.value])
        out.append(Lowered(node.name, "scatter", (cp.clone.name,), b.created[-1].name))
    return out
