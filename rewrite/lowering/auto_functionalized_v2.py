"""Lowering of ``auto_functionalized_v2`` (version-2 functionalization of a mutable custom op).

``auto_functionalized_v2(op, _all_bases=[...], _x_base_index=i, view info...)``
clones each *base* of the mutated arguments, regenerates the argument views
on the clones (``as_strided``/``slice``/``alias`` from the recorded view
information), runs ``op`` and returns ``(*op outputs, *new bases)``. The
lowering clones every base with its layout, regenerates the views on the
clones (re-based on their true storage: offsets are absolute in both, and
with dynamic shapes the recorded view chain is replayed instead of an
``as_strided`` on a symbolic offset) and calls the mutable overload. ``out=``
operators allocate their outputs instead of copying (:func:`lower_v2_out`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from aliasing.core.facts import known_equal, meta_value
from rewrite.editing.nodes import (
    SELF,
    Builder,
    Copy,
    LoweredCall,
    LoweringSkip,
    emit_op,
    getitem_users,
    output_replacements,
    replay,
    val,
    view_chain,
)
from rewrite.lowering.copies import exact_copy, fits_storage, storage_in_dtype

__all__ = ["lower_auto_functionalized_v2", "lower_v2_out"]

aten = torch.ops.aten


def lower_auto_functionalized_v2(b: Builder, node: torch.fx.Node) -> LoweredCall:
    """Clones of the bases, the argument views regenerated on them, the mutable op, the replacements."""
    op = node.args[0]
    if not isinstance(op, torch._ops.OpOverload):
        raise LoweringSkip("the mutable op is a higher-order op")
    kwargs = dict(node.kwargs)
    bases = kwargs.pop("_all_bases", None)
    if not isinstance(bases, (list, tuple)):
        raise LoweringSkip("no _all_bases")
    if torch._library.utils.is_out(op):
        return lower_v2_out(b, node, op, kwargs)
    users = getitem_users(node)
    names, infos = _view_information(op, kwargs, bases)
    copies = _copy_bases(b, bases)
    _regenerate_arguments(b, names, infos, bases, copies, kwargs)
    call = emit_op(b, op, kwargs)
    repl, first = output_replacements(b, op, call, users)
    for j, cp in enumerate(copies):
        if first + j in users:
            repl[first + j] = cp.value
    return [cp.clone for cp in copies], call, repl


def _view_information(
    op: torch._ops.OpOverload, kwargs: dict[str, Any], bases: list[Any] | tuple[Any, ...]
) -> tuple[list[str], dict[str, Any]]:
    """The mutable arguments' names and the view information the wrapper recorded for each;
    skip when it cannot be read or the wrapper has arguments this lowering does not know."""
    from torch._higher_order_ops.auto_functionalize import (
        get_mutable_args_from_schema,
        read_view_information_from_args,
    )

    names, types = get_mutable_args_from_schema(op._schema)
    try:
        infos: dict[str, Any] = read_view_information_from_args(names, types, kwargs, list(bases))
    except Exception as e:
        raise LoweringSkip(f"unreadable view information: {type(e).__name__}: {e}") from e
    if any(k.startswith("_") and k not in {a.name for a in op._schema.arguments} for k in kwargs):
        raise LoweringSkip(f"unrecognised wrapper arguments {sorted(k for k in kwargs if k.startswith('_'))}")
    return names, infos


def _copy_bases(b: Builder, bases: list[Any] | tuple[Any, ...]) -> list[Copy]:
    """A layout-preserving clone of each base."""
    copies: list[Copy] = []
    for base in bases:
        if not isinstance(base, torch.fx.Node):
            raise LoweringSkip("a base is not a node")
        copies.append(exact_copy(b, base))
    return copies


def _regenerate_arguments(
    b: Builder,
    names: list[str],
    infos: dict[str, Any],
    bases: list[Any] | tuple[Any, ...],
    copies: list[Copy],
    kwargs: dict[str, Any],
) -> None:
    """Set each mutable argument of ``kwargs`` to its view regenerated on the clones (None where
    the wrapper recorded none; a list for a list argument)."""
    for name in names:
        info = infos.get(name)
        if info is None:
            kwargs[name] = None
        elif isinstance(info, list):
            kwargs[name] = [None if i is None else _regenerate_view(b, i, bases, copies) for i in info]
        else:
            kwargs[name] = _regenerate_view(b, info, bases, copies)


def _regenerate_view(b: Builder, info: Any, bases: list[Any] | tuple[Any, ...], copies: list[Copy]) -> torch.fx.Node:
    """One argument view, from its recorded view information, on the clone of its base."""
    from torch._higher_order_ops.auto_functionalize import AliasViewInfo, AsStridedViewInfo, NotView, SliceViewInfo

    cp: Copy = copies[info.base_index]
    if isinstance(info, NotView):
        return cp.value
    if isinstance(info, AliasViewInfo):
        return b.call(aten.alias.default, (cp.value,))
    if isinstance(info, SliceViewInfo):
        return b.call(aten.slice.Tensor, (cp.value, info.dim, info.start, info.end))
    if isinstance(info, AsStridedViewInfo):
        replayed = _replay_view_chain(b, info, bases[info.base_index], cp.value)
        if replayed is not None:
            return replayed
        # Offsets are absolute in the base's storage, counted in the base's elements; the clone has
        # the same storage coordinates (it copies the base, the flat prefix of its storage, or its
        # root), seen in the base's dtype where a view of the base reinterprets it.
        storage = storage_in_dtype(b, cp, val(cp.value).dtype)
        if not fits_storage(b, storage, info.size, info.stride, info.storage_offset):
            # recorded in the elements of another dtype than the base's (a view_as_real of it): lost
            raise LoweringSkip("the recorded view reaches past its base's storage")
        return b.call(aten.as_strided.default, (storage, list(info.size), list(info.stride), info.storage_offset))
    raise LoweringSkip(f"unknown view information {type(info).__name__}")


def _replay_view_chain(b: Builder, info: Any, base: Any, copy: torch.fx.Node) -> torch.fx.Node | None:
    """Regenerate a view recorded as ``as_strided`` by replaying the view ops that made it.

    With dynamic shapes functionalization records the view's offset as
    ``sym_storage_offset(view)``; when ``view`` is a chain of view ops on the base,
    the same ops applied to the copy give the same view without an ``as_strided``
    on a symbolic offset (which Inductor mis-lowers for views of inputs).
    Returns None when the pattern does not apply.
    """
    off = info.storage_offset
    if not (isinstance(off, torch.fx.Node) and off.target is aten.sym_storage_offset.default and off.args):
        return None
    view = off.args[0]
    found = view_chain(view) if isinstance(view, torch.fx.Node) else None
    if found is None or found[0] is not base:
        return None
    vv = val(view)  # type: ignore[arg-type]
    if not isinstance(vv, torch.Tensor) or len(vv.size()) != len(info.size) or len(vv.stride()) != len(info.stride):
        return None
    size_val, stride_val = b.fake((list(info.size), list(info.stride)))
    if not (
        all(known_equal(x, y) for x, y in zip(vv.size(), size_val))
        and all(known_equal(x, y) for x, y in zip(vv.stride(), stride_val))
    ):
        return None
    return replay(b, found[1], copy)


def lower_v2_out(b: Builder, node: torch.fx.Node, op: torch._ops.OpOverload, kwargs: dict[str, Any]) -> LoweredCall:
    """``out=`` ops: the wrapper allocates the outputs (nothing is copied); so does the lowering."""
    from torch._higher_order_ops.auto_functionalize import get_mutable_args_from_schema

    names, _ = get_mutable_args_from_schema(op._schema)
    outs: list[torch.fx.Node] = []
    for name in names:
        try:
            size, stride = kwargs.pop(f"_{name}_size"), kwargs.pop(f"_{name}_stride")
            dtype, device = kwargs.pop(f"_{name}_dtype"), kwargs.pop(f"_{name}_device")
        except KeyError as e:
            raise LoweringSkip(f"out= wrapper without layout of {name!r}") from e
        t = b.call(aten.empty_strided.default, (list(size), list(stride)), {"dtype": dtype, "device": device})
        kwargs[name] = t
        outs.append(t)
    call = emit_op(b, op, kwargs)
    if not isinstance(meta_value(node), (list, tuple)):
        # A single out= tensor: the wrapper's value is the tensor itself.
        if len(outs) != 1:
            raise LoweringSkip("out= wrapper with one value but several out arguments")
        return [], call, {SELF: outs[0]}
    repl: dict[object, torch.fx.Node] = {}
    for idx in getitem_users(node):
        if not isinstance(idx, int) or not 0 <= idx < len(outs):
            raise LoweringSkip(f"getitem index {idx!r} out of range")
        repl[idx] = outs[idx]
    return [], call, repl
