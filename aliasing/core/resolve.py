"""Resolve torch-level calls of ``torch.fx.symbolic_trace`` graphs to ATen schemas.

Graphs from ``torch.fx.symbolic_trace`` call torch functions (``torch.add``),
tensor methods (``call_method`` ``add_``) and Python operators
(``operator.iadd``, ``operator.setitem``) instead of ATen ``OpOverload``\\ s.
Their memory effects are those of the ATen op of the same name where the call
binds to ATen's own signature, which holds for torch's *generated* bindings:
the builtins of the ``torch`` namespace and the method descriptors of
``torch.Tensor``. Python-level wrappers (``torch.nn.functional.*``, most
``torch.functional`` functions) may reorder arguments and stay unknown, except
for the few listed in :data:`aliasing.core.ops.SAME_SIGNATURE_WRAPPERS`.

A call resolves to an overload only when every ATen overload that the call's
arguments can bind to agrees on the alias annotations of the arguments passed
and of the results (:func:`resolve_overload`); otherwise it is unknown.
"""

from __future__ import annotations

from collections.abc import Hashable
from functools import cache
from typing import Any

import torch
import torch.fx

from aliasing.core.ops import SAME_SIGNATURE_METHODS, SAME_SIGNATURE_WRAPPERS

__all__ = ["resolve_overload"]


def _aten_name(node: torch.fx.Node) -> str | None:
    """The ATen op name a torch-level call stands for, when it binds to ATen's signature."""
    target = node.target
    if node.op == "call_method":
        if not isinstance(target, str):
            return None
        attr = torch.Tensor.__dict__.get(target)
        if attr is None:
            attr = getattr(torch.Tensor, target, None)
        if type(attr).__name__ in ("method_descriptor", "wrapper_descriptor") or target in SAME_SIGNATURE_METHODS:
            return target
        return None
    if node.op != "call_function":
        return None
    if target in SAME_SIGNATURE_WRAPPERS:
        return str(getattr(target, "__name__", ""))
    if type(target).__name__ == "method_descriptor" and getattr(target, "__objclass__", None) is torch._C.TensorBase:
        return str(getattr(target, "__name__", ""))
    if type(target).__name__ == "builtin_function_or_method" and getattr(target, "__module__", None) in (
        "torch",
        "torch._C._VariableFunctions",
        None,
    ):
        name = getattr(target, "__name__", "")
        if getattr(torch, name, None) is target:
            return str(name)
    return None


def resolve_overload(node: torch.fx.Node) -> torch._ops.OpOverload | None:
    """The ATen overload whose schema describes a torch-level call's memory effects, or None.

    ``node.target`` itself when it is an ``OpOverload``; for a tensor method,
    a ``torch`` builtin or a listed wrapper, the overload of the ATen op of the
    same name that the call's arguments bind to, provided every overload they
    could bind to agrees on the alias annotations; None otherwise (unknown).

    Example
    -------
    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: x.add_(1).view(-1))
    >>> [str(resolve_overload(n)) for n in gm.graph.nodes if n.op == "call_method"]
    ['aten.add_.Scalar', 'aten.view.default']
    """
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target
    name = _aten_name(node)
    if not name:
        return None
    kinds = tuple(_arg_kind(a) for a in node.args)
    return _resolve(name, kinds, tuple(sorted(node.kwargs)))


def _arg_kind(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, torch.SymInt)):
        return "int"
    if isinstance(value, (float, torch.SymFloat)):
        return "float"
    if value is None:
        return "none"
    return "any"  # a node (tensor or scalar), a dtype, a string...


@cache
def _resolve(name: str, kinds: tuple[str, ...], kwargs: tuple[str, ...]) -> torch._ops.OpOverload | None:
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return None
    bindable: list[tuple[torch._ops.OpOverload, Hashable]] = []
    overloads: list[str] = packet.overloads()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    for overload in overloads:
        op = getattr(packet, overload)
        signature = _binding(op, kinds, kwargs)
        if signature is not None:
            bindable.append((op, signature))
    if not bindable or any(sig != bindable[0][1] for _, sig in bindable):
        return None
    return bindable[0][0]


def _binding(op: torch._ops.OpOverload, kinds: tuple[str, ...], kwargs: tuple[str, ...]) -> Hashable | None:
    """The alias signature of ``op`` for a call with these arguments, or None if it cannot bind."""
    schema = op._schema
    arguments = schema.arguments
    if not any("Tensor" in str(a.type) for a in arguments):
        return None  # a TorchScript builtin on lists, strings or numbers (aten::add.t), not a tensor op
    positional = [a for a in arguments if not a.kwarg_only]
    if len(kinds) > len(positional):
        return None
    names = {a.name for a in arguments}
    if any(k not in names for k in kwargs):
        return None
    passed = {a.name for a in positional[: len(kinds)]} | set(kwargs)
    for a in arguments:
        if a.name not in passed and not a.has_default_value() and "?" not in str(a.type):
            return None  # a required argument is missing
    for kind, a in zip(kinds, positional):
        t = str(a.type)
        if kind == "list" and "[]" not in t and "List" not in t:
            return None
        if kind == "float" and t in ("int", "SymInt", "bool"):
            return None
        if kind in ("int", "bool", "float") and t == "Tensor":
            return None
    returns = schema.returns

    def sets(alias: Any) -> frozenset[str]:
        return frozenset(alias.before_set) if alias is not None else frozenset()

    out_sets = [sets(r.alias_info) for r in returns]

    def role(a: Any) -> tuple[bool, tuple[int, ...]]:
        s = sets(a.alias_info)
        write = bool(a.alias_info is not None and a.alias_info.is_write)
        return write, tuple(i for i, o in enumerate(out_sets) if s and s & o)

    roles = tuple(role(a) for a in arguments if a.name in passed)
    list_return = len(returns) == 1 and "[]" in str(returns[0].type)
    return (roles, len(returns), list_return, tuple(bool(o) for o in out_sets))
