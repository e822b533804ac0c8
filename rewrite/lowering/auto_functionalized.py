"""Lowering of ``auto_functionalized`` (version-1 functionalization of a mutable custom op).

``auto_functionalized(op, **kwargs)`` clones each mutated argument, runs the
mutable ``op`` on the clones and returns ``(*op outputs, *new values)``. The
lowering makes that explicit: a layout-preserving clone of every mutated
argument (:func:`rewrite.lowering.copies.exact_copy`), the call of the
mutable overload on the clones, and the wrapper's getitems rewired to the op's
outputs and the clones. A ``Tensor[]`` mutable argument gives a list of
clones, whose nested getitems :func:`nested_lists` describes.

A mutated argument that is a view of caller memory (a view of a graph input)
whose new value is only written back, by the scatter chain that undoes its
views, into a *copy* of its base that the program keeps (returned or read,
never copied back into the input) is lowered as ``auto_functionalized_v2``
lowers it: one layout-preserving clone of the base, the argument's views
regenerated on the clone, the op writing them in place, and the scatter chain
replaced by the clone (:func:`base_write_backs`). The argument's own copy
could never go there (C5: its original is caller memory), while the base's
copy is the program's result.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from aliasing.core.ops import SCATTER_VIEWS
from rewrite.editing.nodes import (
    Builder,
    LoweredCall,
    LoweringSkip,
    emit_op,
    getitem_users,
    output_replacements,
    replay,
    val,
)
from rewrite.lowering.copies import exact_copy, require_layout

__all__ = ["BaseWriteBack", "base_write_backs", "fold_base_write_backs", "lower_auto_functionalized", "nested_lists"]


@dataclass(frozen=True)
class BaseWriteBack:
    """A mutated argument written back into a kept copy of its base (see the module docstring).

    ``chain`` is the argument's views from ``base`` down (innermost first, as
    :func:`rewrite.editing.nodes.view_chain` gives them); ``scatters`` the
    write-back chain, outermost first (``scatters[0]`` is the copy of
    ``base`` with the new value written in).
    """

    base: torch.fx.Node
    chain: tuple[torch.fx.Node, ...]
    scatters: tuple[torch.fx.Node, ...]


def _matches(view: torch.fx.Node, scatter: torch.fx.Node) -> bool:
    """True when ``scatter`` writes its source through exactly ``view``'s view of the same input."""
    return (
        scatter.op == "call_function"
        and SCATTER_VIEWS.get(scatter.target) is view.target
        and view.op == "call_function"
        and len(scatter.args) >= 2
        and bool(view.args)
        and scatter.args[0] is view.args[0]
        and tuple(scatter.args[2:]) == tuple(view.args[1:])
        and dict(scatter.kwargs) == dict(view.kwargs)
    )


def _storage_root(x: torch.fx.Node) -> torch.fx.Node:
    node = x
    while node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view:
        parent = node.args[0] if node.args else None
        if not isinstance(parent, torch.fx.Node):
            break
        node = parent
    return node


def _copied_back(value: torch.fx.Node, root: torch.fx.Node) -> bool:
    """True when ``value`` (through views and further scatters into it) is copied into ``root``."""
    todo, seen = [value], {value}
    while todo:
        v = todo.pop()
        for u in v.users:
            if u.op != "call_function":
                continue
            if u.target is torch.ops.aten.copy_.default and u.args[1] is v and _storage_root(u.args[0]) is root:  # type: ignore[arg-type]
                return True
            follows = (u.target in SCATTER_VIEWS and u.args[0] is v) or (
                isinstance(u.target, torch._ops.OpOverload) and u.target.is_view and u.args[0] is v
            )
            if follows and u not in seen:
                seen.add(u)
                todo.append(u)
    return False


def base_write_backs(node: torch.fx.Node) -> dict[str, BaseWriteBack]:
    """The mutated arguments of ``node`` (an ``auto_functionalized``) to lower through a copy of their base."""
    from torch._higher_order_ops.auto_functionalize import get_mutable_args

    op = node.args[0]
    if not isinstance(op, torch._ops.OpOverload):
        return {}
    names, _ = get_mutable_args(op)
    first = max(len(op._schema.returns), 1)
    getitems: dict[object, list[torch.fx.Node]] = {}
    for u in node.users:
        if u.op == "call_function" and u.target is operator.getitem:
            getitems.setdefault(u.args[1], []).append(u)
    found: dict[str, BaseWriteBack] = {}
    roots: list[torch.fx.Node] = []
    for j, name in enumerate(names):
        arg = node.kwargs.get(name)
        gs = getitems.get(first + j, [])
        if not isinstance(arg, torch.fx.Node) or len(gs) != 1 or len(gs[0].users) != 1:
            continue
        (scatter,) = gs[0].users
        view, chain, scatters = arg, [arg], [scatter]
        if not (_matches(view, scatter) and scatter.args[1] is gs[0]):
            continue
        while len(scatters[-1].users) == 1:
            (outer,) = scatters[-1].users
            parent = view.args[0]
            if not (isinstance(parent, torch.fx.Node) and _matches(parent, outer) and outer.args[1] is scatters[-1]):
                break
            view = parent
            chain.append(view)
            scatters.append(outer)
        base = view.args[0]
        if not isinstance(base, torch.fx.Node):
            continue
        root = _storage_root(base)
        if root.op not in ("placeholder", "get_attr") or _copied_back(scatters[-1], root):
            continue  # not caller memory, or the new value goes back into it: the copy-back fold handles it
        roots.append(root)
        found[name] = BaseWriteBack(base, tuple(chain), tuple(reversed(scatters)))
    if len(set(roots)) != len(roots):
        return {}  # two arguments in one base: each would get its own copy
    return found


def fold_base_write_backs(graph: torch.fx.Graph, repl: dict[object, torch.fx.Node]) -> None:
    """After the wrapper's users were rewired: replace each folded scatter chain by the base's copy (mutates ``graph``)."""
    for key, copy in repl.items():
        if not isinstance(key, torch.fx.Node):
            continue
        key.replace_all_uses_with(copy)
        pending = [key]
        while pending:
            s = pending.pop()
            inner = s.args[1] if len(s.args) > 1 else None
            graph.erase_node(s)
            if isinstance(inner, torch.fx.Node) and inner.target in SCATTER_VIEWS and not inner.users:
                pending.append(inner)


def lower_auto_functionalized(
    b: Builder, node: torch.fx.Node, write_backs: dict[str, BaseWriteBack] | None = None
) -> LoweredCall:
    """Clones of the mutated arguments, the mutable op on them, and the getitem replacements.

    An argument in ``write_backs`` is lowered through one copy of its base;
    the replacements then also map its outermost scatter node to that copy
    (:func:`fold_base_write_backs` applies it once the getitems are rewired).
    """
    from torch._higher_order_ops.auto_functionalize import get_mutable_args

    op = node.args[0]
    if not isinstance(op, torch._ops.OpOverload):
        raise LoweringSkip("the mutable op is not an OpOverload")
    users = getitem_users(node)
    names, _types = get_mutable_args(op)
    kwargs = dict(node.kwargs)
    clones: list[torch.fx.Node] = []
    new_values: list[Any] = []
    folded: dict[object, torch.fx.Node] = {}
    for name in names:
        arg = kwargs.get(name)
        wb = (write_backs or {}).get(name)
        if arg is None:
            new_values.append(None)
        elif wb is not None:
            cp = exact_copy(b, wb.base)
            clones.append(cp.clone)
            value = replay(b, list(wb.chain), cp.value)
            require_layout(value, val(wb.chain[0]), f"argument {name!r}")
            kwargs[name] = value
            new_values.append(value)
            folded[wb.scatters[0]] = cp.value
        elif isinstance(arg, torch.fx.Node):
            cp = exact_copy(b, arg)
            clones.append(cp.clone)
            kwargs[name] = cp.value
            new_values.append(cp.value)
        elif isinstance(arg, (list, tuple)):
            copies = []
            for a in arg:
                if not isinstance(a, torch.fx.Node):
                    raise LoweringSkip(f"mutable list argument {name!r} holds a non-node")
                cp = exact_copy(b, a)
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
    repl.update(folded)
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
