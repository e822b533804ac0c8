"""Shared helpers of the lowerings: building nodes with fake values, layout-preserving copies.

Every lowering creates its nodes through a :class:`Builder`, which computes
each new node's ``meta['val']`` under the graph's fake mode (nodes this
package creates are the only ones whose metadata it sets). A copy keeps the
exact layout of what it copies (:func:`copy_preserving`): a plain
``aten.clone`` for a dense value at offset 0, otherwise the flat storage
prefix copy Inductor's own ``clone_preserve_strides`` makes, or, for symbolic
layouts, a copy of the storage root with the view chain replayed on it.
A lowering that cannot handle a node raises :class:`LoweringSkip`; the node
is then left as it was.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from aliasing.core.facts import has_meta, known_equal, meta_value, storage_identity
from aliasing.core.fake_values import computing
from aliasing.core.regions import static_int
from rewrite.errors import LoweringSkip

__all__ = [
    "COMPUTE",
    "SELF",
    "Builder",
    "Copy",
    "LoweredCall",
    "LoweringSkip",
    "computing",
    "copy_preserving",
    "emit_op",
    "fake_mode",
    "getitem_users",
    "output_replacements",
    "recompile",
    "replay",
    "static_int",
    "take_name",
    "undo",
    "val",
    "view_chain",
]

aten = torch.ops.aten

#: ``Builder.call`` default: compute the new node's fake value by running its target.
COMPUTE: Any = object()
#: Replacement key for "the wrapper's value itself" (not one of its getitems).
SELF: Any = object()

#: What a wrapper lowering returns: the clones it made, the in-place call, and the
#: replacement of each of the wrapper's getitem indices (or :data:`SELF`).
LoweredCall = tuple[list[torch.fx.Node], torch.fx.Node, dict[object, torch.fx.Node]]


def val(node: torch.fx.Node) -> Any:
    """The node's fake value (``meta['val']``), read through :mod:`aliasing.core.facts`."""
    return meta_value(node)


class Builder:
    """Creates nodes at the graph's insertion point, each with a ``meta['val']`` computed under the fake mode."""

    def __init__(self, graph: torch.fx.Graph, mode: Any) -> None:
        self.graph = graph
        self.mode = mode
        self.created: list[torch.fx.Node] = []

    def fake(self, obj: Any) -> Any:
        """``obj`` with every node replaced by its fake value."""

        def one(x: Any) -> Any:
            if isinstance(x, torch.fx.Node):
                if not has_meta(x):
                    raise LoweringSkip(f"argument {x.name} has no meta['val']")
                return meta_value(x)
            return x

        return pytree.tree_map(one, obj)

    def call(
        self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None, *, val: Any = COMPUTE
    ) -> torch.fx.Node:
        """A new ``call_function`` node; its fake value is ``val``, or computed by running ``target``."""
        kwargs = kwargs or {}
        if val is COMPUTE:
            fargs, fkwargs = self.fake((args, kwargs))
            with computing(self.mode):
                val = target(*fargs, **fkwargs)
        node = self.graph.call_function(target, args, kwargs)
        node.meta["val"] = val  # a node this package creates: setting its metadata is allowed
        self.created.append(node)
        return node


def fake_mode(graph: torch.fx.Graph) -> Any:
    """The fake mode of the graph's fake tensors (None when it has none, or several).

    ``make_fx`` in real mode gives every value a fake mode of its own; nothing
    can be computed across them.
    """
    from torch._guards import detect_fake_mode

    vals = []
    for n in graph.nodes:
        v = meta_value(n)
        if isinstance(v, torch.Tensor):
            vals.append(v)
        elif isinstance(v, (list, tuple)):
            vals.extend(x for x in v if isinstance(x, torch.Tensor))
        if len(vals) > 16:
            break
    if not vals:
        return None
    try:
        return detect_fake_mode(vals)
    except AssertionError:  # values of different fake modes
        return None


def undo(graph: torch.fx.Graph, b: Builder, start: int) -> None:
    """Erase the nodes ``b`` created since ``start`` (a lowering that gave up)."""
    for n in reversed(b.created[start:]):
        if not n.users:
            graph.erase_node(n)
    del b.created[start:]


def take_name(node: torch.fx.Node, name: str) -> bool:
    """Give ``node`` the name of a node just erased from its graph (False: it keeps its own).

    A recreated node then keeps the name reports, generated code and an
    ExportedProgram's signature know it by. The graph's namespace never frees
    a name, so the name is reassigned to ``node`` rather than created anew.
    """
    namespace = getattr(node.graph, "_graph_namespace", None)
    rename = getattr(namespace, "_rename_object", None)
    if rename is None:
        return False
    node.name = name
    rename(node, name)
    return True


def recompile(graph: torch.fx.Graph) -> None:
    """Recompile the graph's owning GraphModule, if it has one."""
    owner = getattr(graph, "owning_module", None)
    if isinstance(owner, torch.fx.GraphModule):
        owner.recompile()


# ---------------------------------------------------------------------------
# layout-preserving copies


@dataclass
class Copy:
    """A copy of a value with its exact layout: ``clone`` is the aten.clone node, ``value`` the copy."""

    clone: torch.fx.Node
    value: torch.fx.Node
    flat: bool  #: True when the clone copies more than the value (its storage prefix or root); ``value`` is a view of it


def copy_preserving(b: Builder, x: torch.fx.Node) -> Copy:
    """``clone(x)`` when that keeps x's layout; else the flat-prefix copy (clone_preserve_strides)."""
    xv = val(x)
    if not isinstance(xv, torch.Tensor) or xv.layout != torch.strided:
        raise LoweringSkip(f"{x.name} is not a strided tensor with metadata")
    if xv.is_conj() or xv.is_neg():
        raise LoweringSkip(f"{x.name} has the conj/neg bit set")
    if known_equal(xv.storage_offset(), 0):
        with computing(b.mode):
            cv = torch.ops.aten.clone.default(xv)
        if len(cv.stride()) == len(xv.stride()) and all(known_equal(s, t) for s, t in zip(cv.stride(), xv.stride())):
            c = b.call(aten.clone.default, (x,), val=cv)
            return Copy(c, c, False)
    sizes = [static_int(s) for s in xv.size()]
    strides = [static_int(s) for s in xv.stride()]
    offset = static_int(xv.storage_offset())
    if any(s is None for s in sizes) or any(s is None for s in strides) or offset is None:
        replayed = _copy_root_and_replay(b, x)
        if replayed is None:
            raise LoweringSkip(f"{x.name} has a symbolic layout that a plain clone does not preserve")
        return replayed
    if any(s < 0 for s in strides):  # type: ignore[operator]
        raise LoweringSkip(f"{x.name} has a negative stride")
    from torch._prims_common import compute_required_storage_length

    needed = int(compute_required_storage_length(sizes, strides, offset))  # type: ignore[arg-type]
    flat = b.call(aten.as_strided.default, (_storage_root(x), [needed], [1], 0))
    c = b.call(aten.clone.default, (flat,))
    value = b.call(aten.as_strided.default, (c, list(sizes), list(strides), offset))
    return Copy(c, value, True)


def _is_view_of_first_arg(node: torch.fx.Node) -> bool:
    """True for a non-mutating op whose (first) output aliases its first argument (a view)."""
    op = node.target
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) or not node.args:
        return False
    from torch.utils._python_dispatch import get_alias_info

    try:
        info = get_alias_info(op)
    except Exception:
        return False
    if not info.args or not info.outs or any(a.is_write for a in info.args):
        return False
    return bool(set(info.args[0].alias_set) & set(info.outs[0].alias_set))


def _storage_root(x: torch.fx.Node) -> torch.fx.Node:
    """The value at the top of ``x``'s chain of views that provably shares ``x``'s (fake) storage.

    ``as_strided`` offsets are absolute in the storage, so ``as_strided(root, ...)``
    and ``as_strided(x, ...)`` mean the same; Inductor lowers the former reliably
    (an ``as_strided`` of a slice of an unrealized intermediate loses the slice's
    offset, a wrong-result bug this package must not trigger).
    """
    key = storage_identity(val(x))
    node = x
    while True:
        parent: torch.fx.Node | None = None
        if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            src = node.args[0]
            if _is_view_of_first_arg(src) and isinstance(src.args[0], torch.fx.Node):
                parent = src.args[0]
        elif _is_view_of_first_arg(node) and isinstance(node.args[0], torch.fx.Node):
            parent = node.args[0]
        if parent is None or key is None or storage_identity(val(parent)) != key:
            return node
        node = parent


def view_chain(x: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """``(root, chain)``: the view ops (getitem nodes for multi-output views) from ``root`` down to ``x``."""
    chain: list[torch.fx.Node] = []
    node = x
    while True:
        if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            src = node.args[0]
            if not (_is_view_of_first_arg(src) and isinstance(src.args[0], torch.fx.Node)):
                break
            chain.append(node)
            node = src.args[0]
        elif _is_view_of_first_arg(node) and isinstance(node.args[0], torch.fx.Node):
            chain.append(node)
            node = node.args[0]
        else:
            break
    return (node, chain) if chain else None


def replay(b: Builder, chain: list[torch.fx.Node], start: torch.fx.Node) -> torch.fx.Node:
    """Apply the view ops of ``chain`` (innermost last) to ``start``."""
    current = start
    for step in reversed(chain):
        if step.target is operator.getitem:
            src = step.args[0]
            if not isinstance(src, torch.fx.Node):
                raise LoweringSkip(f"{step.name}: unexpected view structure")
            multi = b.call(src.target, (current, *src.args[1:]), dict(src.kwargs))
            current = b.call(operator.getitem, (multi, step.args[1]), val=val(multi)[step.args[1]])
        else:
            current = b.call(step.target, (current, *step.args[1:]), dict(step.kwargs))
    return current


def _copy_root_and_replay(b: Builder, x: torch.fx.Node) -> Copy | None:
    """Copy ``x``'s storage root (dense, offset 0) and replay the views that made ``x`` on the copy."""
    found = view_chain(x)
    if found is None:
        return None
    root, chain = found
    rv, xv = val(root), val(x)
    if not isinstance(rv, torch.Tensor) or storage_identity(rv) != storage_identity(xv) or not known_equal(rv.storage_offset(), 0):
        return None
    with computing(b.mode):
        cv = torch.ops.aten.clone.default(rv)
    if len(cv.stride()) != len(rv.stride()) or not all(known_equal(p, q) for p, q in zip(cv.stride(), rv.stride())):
        return None
    c = b.call(aten.clone.default, (root,), val=cv)
    return Copy(c, replay(b, chain, c), True)


# ---------------------------------------------------------------------------
# calling the mutable op and rewiring the wrapper's users


def _op_call_args(op: torch._ops.OpOverload, kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Positional and keyword arguments for ``op`` from a name -> value mapping (schema order)."""
    args: list[Any] = []
    kw: dict[str, Any] = {}
    for a in op._schema.arguments:
        if a.name in kwargs:
            value = kwargs[a.name]
        elif a.has_default_value():
            value = a.default_value
        else:
            raise LoweringSkip(f"argument {a.name!r} of {op} is missing")
        if a.kwarg_only:
            kw[a.name] = value
        else:
            args.append(value)
    extra = set(kwargs) - {a.name for a in op._schema.arguments}
    if extra:
        raise LoweringSkip(f"unexpected arguments {sorted(extra)} for {op}")
    return tuple(args), kw


def emit_op(b: Builder, op: torch._ops.OpOverload, kwargs: dict[str, Any]) -> torch.fx.Node:
    """A call of ``op`` with arguments taken by name from ``kwargs``."""
    args, kw = _op_call_args(op, kwargs)
    return b.call(op, args, kw)


def getitem_users(node: torch.fx.Node) -> dict[object, list[torch.fx.Node]]:
    """The wrapper's getitem users by index (raises :class:`LoweringSkip` on any other use)."""
    users: dict[object, list[torch.fx.Node]] = {}
    for u in node.users:
        if u.op != "call_function" or u.target is not operator.getitem or u.args[0] is not node:
            raise LoweringSkip(f"{u.name} uses the wrapper's result other than through getitem")
        users.setdefault(u.args[1], []).append(u)
    return users


def output_replacements(
    b: Builder, op: torch._ops.OpOverload, call: torch.fx.Node, users: dict[object, list[torch.fx.Node]]
) -> tuple[dict[object, torch.fx.Node], int]:
    """Replacements for the getitems of the op's own outputs; returns them and the index of the first new value."""
    n_returns = len(op._schema.returns)
    first = max(n_returns, 1)
    repl: dict[object, torch.fx.Node] = {}
    for idx in users:
        if not isinstance(idx, int):
            raise LoweringSkip(f"non-integer getitem index {idx!r}")
        if idx < first:
            if n_returns == 0:
                if any(g.users for g in users[idx]):
                    raise LoweringSkip("the op returns nothing but its result is used")
                continue  # an unused getitem of None: erased with the wrapper
            if n_returns == 1:
                repl[idx] = call
            else:
                value = val(call)
                repl[idx] = b.call(
                    operator.getitem, (call, idx), val=value[idx] if isinstance(value, (list, tuple)) else None
                )
    return repl, first
