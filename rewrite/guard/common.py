"""Helpers every hazard family shares: reads, views and write-backs read from the analysis, tensor metadata.

Nothing here edits a graph (:func:`node_builder` makes the node builder the
stages edit with).
"""

from __future__ import annotations

import logging
import operator
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from aliasing import AliasAnalysis
from aliasing.core.effects import SINGLE
from aliasing.core.facts import known_equal, meta_value
from aliasing.core.regions import Region
from rewrite.editing.nodes import Builder, LoweringSkip, fake_mode, static_int

#: The one logger of every guard stage: ``rewrite.guard`` (the package's name, which the README documents).
log = logging.getLogger("rewrite.guard")

aten = torch.ops.aten


def output_of(graph: torch.fx.Graph) -> torch.fx.Node | None:
    """The graph's output node (None if it has none)."""
    return next(iter(graph.find_nodes(op="output")), None)


def flat_args(out: torch.fx.Node | None) -> list[Any]:
    """The output node's flat list of returned values (nodes or constants)."""
    if out is None or not out.args:
        return []
    flat, _ = pytree.tree_flatten(out.args[0])
    return flat


# ---------------------------------------------------------------------------
# helpers over the analysis

_META_ONLY = frozenset(
    {aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default}
)


def is_pre_existing(n: object) -> bool:
    """A graph input or constant: a ``placeholder`` or ``get_attr`` node."""
    return isinstance(n, torch.fx.Node) and n.op in ("placeholder", "get_attr")


def is_write_back(n: torch.fx.Node) -> bool:
    """``copy_(P, s)`` into a graph input or constant: a functionalization write-back."""
    return (
        n.op == "call_function"
        and n.target is aten.copy_.default
        and len(n.args) >= 2
        and is_pre_existing(n.args[0])
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


def is_pure_view(a: AliasAnalysis, n: torch.fx.Node) -> bool:
    """A view: aliases one argument, reads and writes nothing."""
    e = a.effect_of(n)
    return e is not None and not e.unknown and not e.reads and not e.writes and _alias_source(a, n) is not None


def view_root(a: AliasAnalysis, x: torch.fx.Node) -> torch.fx.Node:
    """The top of ``x``'s chain of pure views."""
    node = x
    while is_pure_view(a, node):
        src = _alias_source(a, node)
        if src is None:
            break
        node = src
    return node


def views_of(a: AliasAnalysis, v: torch.fx.Node) -> list[torch.fx.Node]:
    """``v`` and every pure view made from it (transitively), in graph order."""
    out = [v]
    seen = {v}
    i = 0
    while i < len(out):
        for u in out[i].users:
            if u not in seen and is_pure_view(a, u) and _alias_source(a, u) is out[i]:
                seen.add(u)
                out.append(u)
        i += 1
    return sorted(out, key=a.position)


def reads_of(a: AliasAnalysis, n: torch.fx.Node) -> tuple[torch.fx.Node, ...]:
    """The values ``n`` reads the data of (the output node reads what it returns)."""
    if n.op == "output":
        return tuple(x for x in n.all_input_nodes)
    e = a.effect_of(n)
    if e is None:
        return ()
    return e.reaches if e.unknown else e.reads


def meta_only_use(u: torch.fx.Node, a: AliasAnalysis) -> bool:
    """``u`` reads only metadata (sizes, strides, numel, offset), directly or through pure views."""
    if u.target in _META_ONLY:
        return True
    if u.op == "call_function" and is_pure_view(a, u):
        return all(meta_only_use(w, a) for w in u.users)
    return False


def strided_tensor(n: torch.fx.Node) -> torch.Tensor | None:
    """``n``'s value (its ``meta['val']``) when it is a strided tensor, else None."""
    v = meta_value(n)
    return v if isinstance(v, torch.Tensor) and v.layout == torch.strided else None


def copy_nbytes(n: torch.fx.Node) -> int | None:
    """Bytes a dense copy of ``n``'s value allocates (None when symbolic or unknown)."""
    t = strided_tensor(n)
    if t is None:
        return None
    numel = static_int(t.numel())
    return None if numel is None else numel * t.element_size()


def region_of_value(t: torch.Tensor) -> Region:
    """The storage region ``t`` covers: its offset, sizes, strides and element size."""
    return Region(t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.element_size())


def same_layout(t: torch.Tensor, u: torch.Tensor) -> bool:
    """Equal dtype, sizes, strides and storage offset (symbolic ones only where known equal)."""
    return (
        t.dtype == u.dtype
        and t.dim() == u.dim()
        and all(known_equal(p, q) for p, q in zip(t.shape, u.shape))
        and all(known_equal(p, q) for p, q in zip(t.stride(), u.stride()))
        and known_equal(t.storage_offset(), u.storage_offset())
    )


def node_builder(graph: torch.fx.Graph) -> Builder:
    """The node builder the guard stages edit ``graph`` with (``LoweringSkip`` without one fake mode)."""
    mode = fake_mode(graph)
    if mode is None:
        raise LoweringSkip("the graph has no fake tensors of a single fake mode")
    return Builder(graph, mode)
