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

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.fx

from aliasing.regions import Region, SizeLike

__all__ = ["TensorFacts", "tensor_facts", "output_facts", "has_meta", "same_layout", "meta_value"]


@dataclass(frozen=True)
class TensorFacts:
    """Layout facts of one tensor value, read from its fake tensor."""

    storage_key: int  #: identity of the fake storage (equal keys: same storage at trace time)
    sizes: tuple[SizeLike, ...]
    strides: tuple[SizeLike, ...]  #: in elements
    storage_offset: SizeLike  #: in elements
    dtype: torch.dtype
    device: torch.device
    is_conj: bool
    is_neg: bool
    itemsize: int
    is_strided: bool  #: torch.strided layout (sparse/nested tensors are not)

    @property
    def region(self) -> Optional[Region]:
        """Bytes this value can touch in its storage (None for non-strided layouts)."""
        if not self.is_strided:
            return None
        item = self.itemsize
        return Region(self.storage_offset * item, self.sizes, tuple(s * item for s in self.strides), item)


def meta_value(node: torch.fx.Node) -> Any:
    """The node's ``meta['val']`` (or ``None``)."""
    return node.meta.get("val")


def has_meta(node: torch.fx.Node) -> bool:
    """True when the node carries a ``meta['val']``."""
    return "val" in node.meta


def _facts_of(value: object) -> Optional[TensorFacts]:
    if not isinstance(value, torch.Tensor):
        return None
    try:
        strided = value.layout == torch.strided
        if strided:
            key = value.untyped_storage()._cdata
            strides = tuple(value.stride())
            offset = value.storage_offset()
        else:
            key, strides, offset = id(value), (), 0
        return TensorFacts(
            storage_key=key,
            sizes=tuple(value.size()),
            strides=strides,
            storage_offset=offset,
            dtype=value.dtype,
            device=value.device,
            is_conj=value.is_conj(),
            is_neg=value.is_neg(),
            itemsize=value.element_size(),
            is_strided=strided,
        )
    except Exception:  # a tensor subclass without storage/strides: unknown layout
        return None


def tensor_facts(node: torch.fx.Node) -> Optional[TensorFacts]:
    """Facts of a tensor-valued node, or None (no metadata, or not a tensor)."""
    return _facts_of(node.meta.get("val"))


def output_facts(node: torch.fx.Node) -> Optional[list[Optional[TensorFacts]]]:
    """Per-element facts of a node whose value is a tuple or list; None otherwise."""
    value = node.meta.get("val")
    if isinstance(value, (tuple, list)):
        return [_facts_of(v) for v in value]
    return None


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
