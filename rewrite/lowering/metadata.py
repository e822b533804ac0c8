"""Keep fake values truthful after a clone is replaced by its original.

After ``c`` is replaced by ``o``, views of ``c`` (and in-place results on it)
still carry fake tensors in ``c``'s fake storage, which would make the
analysis believe the view copied (or miss an alias shown only by fake
evidence). :func:`refresh_stale` recreates each such node with its fake value
recomputed from its current arguments; existing nodes' metadata is never
modified.
"""

from __future__ import annotations

import logging
import operator
from typing import Any

import torch
import torch.fx

from aliasing.core.facts import has_meta, meta_value
from rewrite.editing.nodes import COMPUTE, Builder, fake_mode, storage_key, take_name

__all__ = ["refresh_stale", "storage_keys"]

log = logging.getLogger(__name__)


def storage_keys(v: Any) -> set[int]:
    """The fake storages a (possibly nested) fake value lives in."""
    if isinstance(v, (list, tuple)):
        return {k for x in v for k in storage_keys(x)}
    k = storage_key(v)
    return set() if k is None else {k}


def refresh_stale(graph: torch.fx.Graph, stale: set[int]) -> dict[str, str]:
    """Recreate every node whose fake value still lives in one of the ``stale`` fake storages.

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
    mode = fake_mode(graph)
    recreated: dict[str, str] = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or not has_meta(node):
            continue
        if not (storage_keys(meta_value(node)) & stale):
            continue
        if mode is None:
            log.debug("left the stale metadata of %s: the graph has no single fake mode", node.name)
            continue
        b = Builder(graph, mode)
        try:
            with graph.inserting_before(node):
                if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
                    parent = meta_value(node.args[0])
                    val = parent[node.args[1]] if isinstance(parent, (list, tuple)) else COMPUTE
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
