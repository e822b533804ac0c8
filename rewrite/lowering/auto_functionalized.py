"""Lowering of ``auto_functionalized`` (version-1 functionalization of a mutable custom op).

``auto_functionalized(op, **kwargs)`` clones each mutated argument, runs the
mutable ``op`` on the clones and returns ``(*op outputs, *new values)``. The
lowering makes that explicit: a layout-preserving clone of every mutated
argument (:func:`rewrite.lowering.builder.copy_preserving`), the call of the
mutable overload on the clones, and the wrapper's getitems rewired to the op's
outputs and the clones. A ``Tensor[]`` mutable argument gives a list of
clones, whose nested getitems :func:`nested_lists` describes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from rewrite.lowering.builder import (
    Builder,
    LoweredCall,
    LoweringSkip,
    copy_preserving,
    emit_op,
    getitem_users,
    output_replacements,
)

__all__ = ["lower_auto_functionalized", "nested_lists"]


def lower_auto_functionalized(b: Builder, node: torch.fx.Node) -> LoweredCall:
    """Clones of the mutated arguments, the mutable op on them, and the getitem replacements."""
    from torch._higher_order_ops.auto_functionalize import get_mutable_args

    op = node.args[0]
    if not isinstance(op, torch._ops.OpOverload):
        raise LoweringSkip("the mutable op is not an OpOverload")
    users = getitem_users(node)
    names, _types = get_mutable_args(op)
    kwargs = dict(node.kwargs)
    clones: list[torch.fx.Node] = []
    new_values: list[Any] = []
    for name in names:
        arg = kwargs.get(name)
        if arg is None:
            new_values.append(None)
        elif isinstance(arg, torch.fx.Node):
            cp = copy_preserving(b, arg)
            clones.append(cp.clone)
            kwargs[name] = cp.value
            new_values.append(cp.value)
        elif isinstance(arg, (list, tuple)):
            copies = []
            for a in arg:
                if not isinstance(a, torch.fx.Node):
                    raise LoweringSkip(f"mutable list argument {name!r} holds a non-node")
                cp = copy_preserving(b, a)
                clones.append(cp.clone)
                copies.append(cp.value)
            kwargs[name] = copies
            new_values.append(copies)
        else:
            raise LoweringSkip(f"mutable argument {name!r} is not a tensor")
    call = emit_op(b, op, kwargs)
    repl, first = output_replacements(b, op, call, users)
    for j, value in enumerate(new_values):
        idx = first + j
        if idx not in users:
            continue
        if isinstance(value, torch.fx.Node):
            repl[idx] = value
        # a list of new values (Tensor[] argument): its nested getitems are rewired from nested_lists
    return clones, call, repl


def nested_lists(node: torch.fx.Node, call: torch.fx.Node) -> dict[object, list[torch.fx.Node]]:
    """For ``Tensor[]`` mutable arguments: getitem index -> the list of copies passed to the call."""
    from torch._higher_order_ops.auto_functionalize import get_mutable_args

    op = node.args[0]
    if not isinstance(op, torch._ops.OpOverload):
        return {}
    names, _ = get_mutable_args(op)
    first = max(len(op._schema.returns), 1)
    bound = dict(zip([a.name for a in op._schema.arguments], list(call.args)))
    bound.update(call.kwargs)
    out: dict[object, list[torch.fx.Node]] = {}
    for j, name in enumerate(names):
        value = bound.get(name)
        if isinstance(value, (list, tuple)):
            out[first + j] = list(value)
    return out
