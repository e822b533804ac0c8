"""Exact copies: a copy has the dtype, sizes, strides and storage offset of what it copies.

:func:`rewrite.editing.nodes.copy_preserving` copies a strided view at an
offset as the flat prefix of its storage root's storage, in the root's dtype,
and views it with the view's sizes, strides and offset. When the view's chain
reinterprets the dtype (``view.dtype``, ``view_as_real``, ``view_as_complex``)
that copy has the root's dtype, not the view's: ``x[1].view(torch.int32)`` of
a float32 ``x`` would be copied as float32, and a mutable op would receive
float32 values. :func:`exact_copy` copies such a view by its chain:

1. Where the last ``view.dtype`` between real dtypes in the chain makes
   ``k`` (a *bitcast*), ``k`` is copied with a clone of ``k``'s dtype, as
   :func:`copy_preserving` copies a view (its storage prefix, or for a
   symbolic layout the dense top with the views applied again), and the views
   below ``k`` are applied to the copy. Inductor lowers a bitcast of a buffer
   it computes as a new buffer, not a view: an op writing through a bitcast of
   a copy would write that buffer and leave the copy as it was. The steps from
   the top down to ``k`` must keep the element size (then the bitcasts can move
   to the top); otherwise the copy is not made.
2. Where the chain changes the dtype only by complex views (``view_as_real``,
   ``view_as_complex``, ``view.dtype`` to or from a complex dtype: aliasing
   views in Inductor too), the top of the chain (the value whose storage the
   views share) is copied and the whole chain applied to the copy. The copy
   then has the shape that the write-back into the top copies from
   (``copy_(x, new)``), and the copy planner can fold it (C8).

Every copy is checked against what it copies. Where no exact copy can be
made this way (a bitcast that changes the element size, a symbolic layout of a
top that is not dense at offset 0), :class:`~rewrite.errors.LoweringSkip` is
raised, and the wrapper is left as it was, to Inductor.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from aliasing.core.facts import known_equal, storage_identity
from rewrite.editing.nodes import (
    Builder,
    Copy,
    LoweringSkip,
    copy_preserving,
    replay,
    static_int,
    undo,
    val,
    view_chain,
)

__all__ = ["exact_copy", "fits_storage", "require_layout", "same_dtype_and_layout", "storage_in_dtype"]

aten = torch.ops.aten


def same_dtype_and_layout(a: Any, b: Any) -> bool:
    """True when two (fake) tensors provably have one dtype, sizes, strides and storage offset.

    Examples
    --------
    >>> import torch
    >>> x = torch.zeros(3, 4)
    >>> same_dtype_and_layout(x[1], x[1].clone()), same_dtype_and_layout(x[1], x[1].view(torch.int32))
    (False, False)
    >>> same_dtype_and_layout(x[1], torch.as_strided(x.clone(), (4,), (1,), 4))
    True
    """
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.dtype != b.dtype:
        return False
    if a.dim() != b.dim():
        return False
    return (
        all(known_equal(p, q) for p, q in zip(a.size(), b.size()))
        and all(known_equal(p, q) for p, q in zip(a.stride(), b.stride()))
        and known_equal(a.storage_offset(), b.storage_offset())
    )


def require_layout(node: torch.fx.Node, like: Any, what: str) -> None:
    """Raise :class:`LoweringSkip` unless ``node``'s fake value has ``like``'s dtype and layout."""
    got = val(node)
    if not same_dtype_and_layout(got, like):
        shown = f"{got.dtype} {tuple(got.size())}" if isinstance(got, torch.Tensor) else type(got).__name__
        raise LoweringSkip(f"{what}: the copy ({shown}) does not have the original's dtype and layout")


def exact_copy(b: Builder, x: torch.fx.Node) -> Copy:
    """A copy of ``x`` with ``x``'s exact dtype and layout, checked (see the module docstring).

    Without a dtype change in ``x``'s chain of views, :func:`copy_preserving`
    copies ``x``. Raises :class:`LoweringSkip` when no exact copy can be made.
    """
    top, chain = _chain_in_storage(x)
    if all(_dtype_of(v) == _dtype_of(_viewed(v)) for v in chain):
        cp = copy_preserving(b, x)
    else:
        cut = next((i for i, v in enumerate(chain) if _is_bitcast(v)), None)
        if cut is None:  # (2) complex views only
            cp = copy_preserving(b, top)
            cp = Copy(cp.clone, replay(b, chain, cp.value), True)
        else:  # (1) the last bitcast, copied in its own dtype
            cp = _copy_in_own_dtype(b, top, chain[cut:])
            if cut:
                cp = Copy(cp.clone, replay(b, chain[:cut], cp.value), True)
    require_layout(cp.value, val(x), f"copy of {x.name}")
    return cp


def storage_in_dtype(b: Builder, cp: Copy, dtype: torch.dtype) -> torch.fx.Node:
    """The copy's clone in storage coordinates, seen in ``dtype``: the operand of an ``as_strided``
    whose sizes, strides and offset count ``dtype``'s elements.

    The clone itself where it has that dtype; else, between a complex dtype
    and a real one, its storage from offset 0 (the clone flattened where the
    element size changes, static sizes only) reinterpreted by ``view.dtype``.
    Raises :class:`LoweringSkip` where that cannot be done.
    """
    cv = val(cp.clone)
    if not isinstance(cv, torch.Tensor):
        raise LoweringSkip(f"{cp.clone.name} has no fake tensor")
    if cv.dtype == dtype:
        return cp.clone
    if not (cv.dtype.is_complex or dtype.is_complex):
        raise LoweringSkip(f"{cp.clone.name} would be written through a bitcast")  # (1) of the module docstring
    if cv.element_size() == dtype.itemsize:
        return b.call(aten.view.dtype, (cp.clone, dtype))
    n = static_int(cv.numel())
    if n is None or not cv.is_contiguous() or not known_equal(cv.storage_offset(), 0):
        raise LoweringSkip(f"{cp.clone.name} cannot be seen as {dtype}")
    flat = b.call(aten.as_strided.default, (cp.clone, [n], [1], 0)) if cv.dim() != 1 else cp.clone
    return b.call(aten.view.dtype, (flat, dtype))


def fits_storage(b: Builder, base: torch.fx.Node, size: Any, stride: Any, offset: Any) -> bool:
    """False when ``as_strided(base, size, stride, offset)`` would reach past the end of ``base``'s
    storage (static values only; True where that cannot be told)."""
    fs, ft, fo = b.fake((list(size), list(stride), offset))
    dims = [(static_int(s), static_int(t)) for s, t in zip(fs, ft)]
    off, bv = static_int(fo), val(base)
    if not isinstance(bv, torch.Tensor) or off is None:
        return True
    capacity = static_int(bv.untyped_storage().nbytes())
    known = [(s, t) for s, t in dims if s is not None and t is not None]
    if capacity is None or len(known) != len(dims) or any(s == 0 for s, _ in known):
        return True
    end = off + 1 + sum((s - 1) * abs(t) for s, t in known)
    return end * bv.element_size() <= capacity


def _chain_in_storage(x: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]]:
    """``(top, chain)``: the top of ``x``'s chain of views that stays in ``x``'s (fake) storage, and
    the view steps from it down to ``x``, innermost first (``(x, [])`` without views)."""
    found = view_chain(x)
    key = storage_identity(val(x))
    if found is None or key is None:
        return x, []
    root, chain = found
    nodes = [*chain, root]  # nodes[i] is a view of nodes[i + 1]
    top = 0
    while top + 1 < len(nodes) and storage_identity(val(nodes[top + 1])) == key:
        top += 1
    return nodes[top], chain[:top]


def _is_bitcast(step: torch.fx.Node) -> bool:
    """A ``view.dtype`` between real dtypes (Inductor: a bitcast, a new buffer for a computed one)."""
    if step.target is not aten.view.dtype:
        return False
    a, b = _dtype_of(step), _dtype_of(_viewed(step))
    return a is not None and b is not None and not a.is_complex and not b.is_complex


def _copy_in_own_dtype(b: Builder, top: torch.fx.Node, chain: list[torch.fx.Node]) -> Copy:
    """An exact copy of ``chain[0]``, a bitcast of a view of ``top`` (``chain`` from it up to
    ``top``), whose clone has the bitcast's dtype.

    Every step keeps the element size, so the bitcasts can move to the top:
    ``top`` is seen in the bitcast's dtype (``view.dtype``, the same storage
    and layout) and copied as :func:`copy_preserving` copies a view: the
    storage prefix up to the view's end, viewed with its static layout; or,
    for a symbolic layout, the whole of ``top`` (dense at offset 0) with the
    other steps of the chain applied again to the copy.
    """
    k = chain[0]
    kv, tv = val(k), val(top)
    itemsizes = {d.itemsize if d is not None else None for d in map(_dtype_of, chain)}
    if not isinstance(tv, torch.Tensor) or itemsizes != {tv.itemsize}:
        raise LoweringSkip(f"{k.name}: a dtype view that changes the element size")
    start = len(b.created)
    try:
        cp = copy_preserving(b, k)
        if not cp.flat:
            return cp  # a plain clone of k keeps its layout
    except LoweringSkip:
        pass
    undo(b.graph, b, start)
    seen = b.call(aten.view.dtype, (top, kv.dtype)) if tv.dtype != kv.dtype else top
    sizes = [static_int(s) for s in kv.size()]
    strides = [static_int(s) for s in kv.stride()]
    offset = static_int(kv.storage_offset())
    if offset is not None and all(s is not None and s >= 0 for s in strides) and all(s is not None for s in sizes):
        from torch._prims_common import compute_required_storage_length

        n = int(compute_required_storage_length(sizes, strides, offset))  # type: ignore[arg-type]
        if not fits_storage(b, seen, [n], [1], 0):
            raise LoweringSkip(f"{k.name}: its storage prefix would pass the storage's end")
        # as copy_preserving's flat copy: offsets are absolute in the storage (counted in k's elements)
        c = b.call(aten.clone.default, (b.call(aten.as_strided.default, (seen, [n], [1], 0)),))
        return Copy(c, b.call(aten.as_strided.default, (c, list(sizes), list(strides), offset)), True)
    cp = copy_preserving(b, seen)
    if cp.flat:
        raise LoweringSkip(f"{k.name}: a dtype view with a symbolic layout of a view that is not dense")
    return Copy(cp.clone, replay(b, [v for v in chain if not _is_bitcast(v)], cp.value), True)


def _viewed(step: torch.fx.Node) -> Any:
    """The value a view step views (for a getitem of a multi-output view, that view's operand)."""
    src = step.args[0]
    if step.target is operator.getitem and isinstance(src, torch.fx.Node):
        return src.args[0]
    return src


def _dtype_of(node: Any) -> torch.dtype | None:
    v = val(node) if isinstance(node, torch.fx.Node) else None
    return v.dtype if isinstance(v, torch.Tensor) else None
