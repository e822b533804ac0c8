"""Facts read from node metadata: the only module that reads ``node.meta``.

For every node whose ``meta['val']`` is a (fake) tensor, :func:`tensor_facts`
returns a :class:`TensorFacts`: the identity of its fake storage, its layout
(sizes, strides, storage offset, dtype, device, conj/neg bits) and its
:class:`~aliasing.regions.Region` in bytes. Nodes whose value is a tuple or list
of tensors (multi-output ops) give one entry per element with
:func:`output_facts`. A node without ``meta['val']`` gives ``None``: its
storage is unknown and every consumer must treat it conservatively.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch
import torch.fx

from aliasing.regions import Region, SizeLike

__all__ = ["TensorFacts", "FactsCache", "facts_of_value", "tensor_facts", "is_tensor_meta", "has_meta", "same_layout", "meta_value"]


class TensorFacts(NamedTuple):
    """Layout facts of one tensor value, read once from its fake tensor.

    ``strides`` and ``storage_offset`` are in elements. ``region`` is None for
    non-strided layouts. ``device``, ``is_conj`` and ``is_neg`` are read on first use.
    """

    storage_key: int  #: identity of the fake storage (equal keys: same storage at trace time)
    sizes: tuple[SizeLike, ...]
    strides: tuple[SizeLike, ...]
    storage_offset: SizeLike
    dtype: torch.dtype
    itemsize: int
    region: Optional[Region]
    value: torch.Tensor  #: the (fake) tensor the facts were read from

    @property
    def is_strided(self) -> bool:
        """True for the torch.strided layout (sparse and nested tensors are not)."""
        return self.region is not None

    @property
    def device(self) -> torch.device:
        return self.value.device

    @property
    def is_conj(self) -> bool:
        return bool(self.value.is_conj())

    @property
    def is_neg(self) -> bool:
        return bool(self.value.is_neg())

    def __repr__(self) -> str:
        return (
            f"TensorFacts(sizes={list(self.sizes)}, strides={list(self.strides)}, "
            f"offset={self.storage_offset}, dtype={self.dtype})"
        )


def _read(value: torch.Tensor) -> TensorFacts:
    sizes = tuple(value.shape)
    dtype = value.dtype
    item = dtype.itemsize
    try:
        strides = tuple(value.stride())
        offset = value.storage_offset()
        key = value.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):  # sparse, nested, opaque subclasses
        return TensorFacts(id(value), sizes, (), 0, dtype, item, None, value)
    return TensorFacts(key, sizes, strides, offset, dtype, item, Region(offset, sizes, strides, item), value)


def meta_value(node: torch.fx.Node) -> Any:
    """The node's ``meta['val']`` (or ``None``)."""
    return node.meta.get("val")


def has_meta(node: torch.fx.Node) -> bool:
    """True when the node carries a ``meta['val']``."""
    return "val" in node.meta


def facts_of_value(value: object) -> Optional[TensorFacts]:
    """Facts of a tensor object (fake or real); None for anything else."""
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return _read(value)
    except Exception:  # a tensor subclass without sizes or dtype: unknown layout
        return None


class FactsCache:
    """Reads each node's metadata once; the analysis and the effect rules share one cache."""

    __slots__ = ("_tensor", "_outputs")

    def __init__(self) -> None:
        self._tensor: dict[torch.fx.Node, Optional[TensorFacts]] = {}
        self._outputs: dict[torch.fx.Node, Optional[list[Optional[TensorFacts]]]] = {}

    def tensor(self, node: torch.fx.Node) -> Optional[TensorFacts]:
        """Facts of a tensor-valued node, or None (no metadata, or not a tensor)."""
        try:
            return self._tensor[node]
        except KeyError:
            facts = facts_of_value(node.meta.get("val"))
            self._tensor[node] = facts
            return facts

    def outputs(self, node: torch.fx.Node) -> Optional[list[Optional[TensorFacts]]]:
        """Per-element facts of a node whose value is a tuple or list; None otherwise."""
        try:
            return self._outputs[node]
        except KeyError:
            value = node.meta.get("val")
            out = [facts_of_value(v) for v in value] if isinstance(value, (tuple, list)) else None
            self._outputs[node] = out
            return out


def tensor_facts(node: torch.fx.Node) -> Optional[TensorFacts]:
    """Facts of a tensor-valued node, or None (no metadata, or not a tensor). Uncached."""
    return facts_of_value(node.meta.get("val"))


def is_tensor_meta(node: torch.fx.Node) -> Optional[bool]:
    """True/False when metadata says whether the value is a tensor; None without metadata."""
    if "val" not in node.meta:
        return None
    return isinstance(node.meta["val"], torch.Tensor)


def _same(a: SizeLike, b: SizeLike) -> bool:
    if type(a) is int and type(b) is int:
        return a == b
    try:
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        return bool(statically_known_true(a == b))  # type: ignore[arg-type]
    except Exception:
        return False


def same_layout(a: TensorFacts, b: TensorFacts) -> bool:
    """True when two values provably agree on dtype, device, sizes, strides, offset and bits."""
    return (
        a.is_strided
        and b.is_strided
        and a.dtype == b.dtype
        and a.device == b.device
        and a.is_conj == b.is_conj
        and a.is_neg == b.is_neg
        and len(a.sizes) == len(b.sizes)
        and all(_same(x, y) for x, y in zip(a.sizes, b.sizes))
        and all(_same(x, y) for x, y in zip(a.strides, b.strides))
        and _same(a.storage_offset, b.storage_offset)
    )
