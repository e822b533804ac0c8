"""Which nodes are copy candidates: the clones C1-C8 and C10 decide, the ``copy_`` write-backs C9 decides."""

from __future__ import annotations

import torch
import torch.fx

from aliasing.core.ops import CANDIDATE_CALLS, TO_COPY_KWARGS, TORCH_CLONE_KWARGS, TORCH_CLONES

__all__ = ["copy_candidates", "is_clone_candidate", "is_copy_candidate"]

# (the targets compared by identity: this runs on every node)
_CLONE = torch.ops.aten.clone.default
_TO_COPY = torch.ops.aten._to_copy.default
_COPY_ = torch.ops.aten.copy_.default


def is_clone_candidate(node: torch.fx.Node) -> bool:
    """True for ``aten.clone``, ``aten._to_copy`` calls that may change nothing, and torch-level clones.

    Torch-level graphs (``torch.fx.symbolic_trace``) spell a clone as the
    ``call_method`` ``clone`` or as a call of ``torch.clone`` or
    ``Tensor.clone``; the analysis gives them the effects of ``aten.clone``.
    (Whether a ``_to_copy`` really changes nothing is condition C1's job.)

    Examples
    --------
    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: x.clone() + torch.clone(x))
    >>> [n.name for n in gm.graph.nodes if is_clone_candidate(n)]
    ['clone', 'clone_1']
    """
    op = node.op  # most nodes are decided by their op and target alone (this runs on every node)
    allowed: frozenset[str] | None
    if op == "call_function":
        target = node.target
        if target is _CLONE:
            allowed = None
        elif target is _TO_COPY:
            allowed = TO_COPY_KWARGS
        elif target in TORCH_CLONES:
            allowed = TORCH_CLONE_KWARGS
        else:
            return False
    elif op == "call_method" and node.target == "clone":
        allowed = TORCH_CLONE_KWARGS
    else:
        return False
    args = node.args
    if len(args) != 1 or not isinstance(args[0], torch.fx.Node):
        return False
    return allowed is None or set(node.kwargs) <= allowed


def is_copy_candidate(node: torch.fx.Node) -> bool:
    """True for ``aten.copy_(d, s)`` with two node arguments: a write-back condition C9 may drop.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x, y: x.copy_(y), tracing_mode="fake")(torch.randn(2), torch.randn(2))
    >>> [n.name for n in gm.graph.nodes if is_copy_candidate(n)]
    ['copy_']
    """
    return (
        node.op == "call_function"
        and node.target is _COPY_
        and len(node.args) == 2
        and not node.kwargs
        and all(isinstance(a, torch.fx.Node) for a in node.args)
    )


def copy_candidates(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The clone and ``copy_`` candidates of ``graph``, in graph order.

    Read from FX's index of nodes by op and target (no pass over the graph: a graph
    without copies costs nothing here).

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x, y: x.copy_(y.clone()) + 1, tracing_mode="fake")(torch.randn(2), torch.randn(2))
    >>> [n.name for n in copy_candidates(gm.graph)]
    ['clone', 'copy_']
    """
    found: list[torch.fx.Node] = list(graph.find_nodes(op="call_method", target="clone", sort=False))
    for target in CANDIDATE_CALLS:
        found += graph.find_nodes(op="call_function", target=target, sort=False)
    return [n for n in sorted(found) if is_clone_candidate(n) or is_copy_candidate(n)]
