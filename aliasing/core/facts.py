"""Facts read from node metadata: the only module that reads ``node.meta``.

For every node whose ``meta['val']`` is a (fake) tensor, :func:`tensor_facts`
returns a :class:`TensorFacts`: the identity of its fake storage, its layout
(sizes, strides, storage offset, dtype, device, conj/neg bits) and its
:class:`~aliasing.core.regions.Region` in bytes. Nodes whose value is a tuple or list
of tensors (multi-output ops) give one entry per element with
:func:`output_facts`. A node without ``meta['val']`` gives ``None``: its
storage is unknown and every consumer must treat it conservatively.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor

from aliasing.core.regions import Region, SizeLike

__all__ = ["FactsCache", "PlainLayout", "TensorFacts", "facts_of_value", "has_meta", "is_tensor_meta", "known_equal", "meta_value", "plain_ints", "same_layout", "same_region", "storage_identity", "tensor_facts"]


#: A layout in plain ints: sizes, strides, storage offset (elements), dtype.
PlainLayout = tuple[tuple[int, ...], tuple[int, ...], int, torch.dtype]
_INT = {int}


def plain_ints(values: tuple[object, ...]) -> bool:
    """True when every value is a plain ``int`` (no SymInt), checked in one C-level pass.

    Examples
    --------
    >>> plain_ints((2, 3, 0)), plain_ints(()), plain_ints((2, 3.0))
    (True, True, False)
    """
    return set(map(type, values)) <= _INT


class TensorFacts:
    """Layout facts of one tensor value, read from its fake tensor when first asked for.

    The storage identity is read at once; sizes, strides, storage offset and the
    :class:`~aliasing.core.regions.Region` (in bytes) on first use, so an analysis pays
    for layouts only where a query needs them. ``strides`` and ``storage_offset``
    are in elements. ``region`` is None for non-strided layouts (sparse, nested).
    """

    __slots__ = ("_bits", "_dtype", "_offset", "_plain", "_region", "_sizes", "_strides", "storage_key", "strided", "value")

    def __init__(self, value: torch.Tensor, storage_key: int, strided: bool) -> None:
        self.value = value  #: the (fake) tensor the facts are read from
        self.storage_key = storage_key  #: identity of the fake storage (equal keys: same storage at trace time)
        self.strided = strided
        self._dtype: torch.dtype | None = None
        self._sizes: tuple[SizeLike, ...] | None = None
        self._strides: tuple[SizeLike, ...] | None = None
        self._offset: SizeLike = 0
        self._region: Region | None = None
        self._bits: tuple[torch.device, bool, bool] | None = None  # device, conj and neg bits, read once
        self._plain: PlainLayout | bool | None = False  # False: not computed yet

    @property
    def dtype(self) -> torch.dtype:
        if self._dtype is None:
            self._dtype = self.value.dtype
        return self._dtype

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def sizes(self) -> tuple[SizeLike, ...]:
        if self._sizes is None:
            self._sizes = tuple(self.value.shape)
        return self._sizes

    @property
    def strides(self) -> tuple[SizeLike, ...]:
        if self._strides is None:
            if self.strided:
                self._strides = tuple(self.value.stride())
                self._offset = self.value.storage_offset()
            else:
                self._strides = ()
        return self._strides

    @property
    def storage_offset(self) -> SizeLike:
        self.strides  # noqa: B018  # reads the offset with the strides
        return self._offset

    @property
    def region(self) -> Region | None:
        if self._region is None and self.strided:
            self._region = Region(self.storage_offset, self.sizes, self.strides, self.itemsize)
        return self._region

    @property
    def plain_layout(self) -> PlainLayout | None:
        """``(sizes, strides, storage offset, dtype)`` when the sizes, strides and offset are all
        plain ints (computed once); None for symbolic ones and for non-strided layouts."""
        plain = self._plain
        if plain is False:
            plain = None
            if self.strided:
                # (the properties' reads, made here at once: this runs for most values a planner asks about)
                v = self.value
                sizes = self._sizes
                if sizes is None:
                    sizes = self._sizes = tuple(v.shape)
                strides = self._strides
                if strides is None:
                    strides = self._strides = tuple(v.stride())
                    self._offset = v.storage_offset()
                dtype = self._dtype
                if dtype is None:
                    dtype = self._dtype = v.dtype
                offset = self._offset
                if set(map(type, (offset, *sizes, *strides))) <= _INT:  # (plain_ints, inlined)
                    plain = (sizes, strides, offset, dtype)  # type: ignore[assignment]
            self._plain = plain
        return plain  # type: ignore[return-value]

    @property
    def is_strided(self) -> bool:
        """True for the torch.strided layout (sparse and nested tensors are not)."""
        return self.strided

    @property
    def bits(self) -> tuple[torch.device, bool, bool]:
        """``(device, conj bit, neg bit)``: what the elements are, besides the dtype (read once: a
        tensor subclass's methods and properties cost about a microsecond each)."""
        if self._bits is None:
            v = self.value
            self._bits = (v.device, bool(v.is_conj()), bool(v.is_neg()))
        return self._bits

    @property
    def device(self) -> torch.device:
        return self.bits[0]

    @property
    def is_conj(self) -> bool:
        return self.bits[1]

    @property
    def is_neg(self) -> bool:
        return self.bits[2]

    def __repr__(self) -> str:
        return (
            f"TensorFacts(sizes={list(self.sizes)}, strides={list(self.strides)}, "
            f"offset={self.storage_offset}, dtype={self.dtype})"
        )


def meta_value(node: torch.fx.Node) -> Any:
    """The node's ``meta['val']`` (or ``None``)."""
    return node.meta.get("val")


def has_meta(node: torch.fx.Node) -> bool:
    """True when the node carries a ``meta['val']``."""
    return "val" in node.meta


#: The fake tensor class, and the identity of a tensor's storage (C), what
#: ``untyped_storage()._cdata`` gives, without making the storage object (torch_function is
#: disabled on fake tensors: the two ask the same C++ tensor). A tensor of a layout other than
#: strided has no storage: ``_storage_id`` raises for it (sparse COO, CSR, CSC, BSR, BSC and
#: MKLDNN; ``tests/aliasing/core/test_layout_facts.py``), so a storage identity is the layout's
#: proof too. A fake tensor that records MKLDNN dispatch keys says strided of its meta tensor:
#: it takes the general way.
_FAKE_TENSOR = FakeTensor
_STORAGE_ID = getattr(torch._C, "_storage_id", None)


def facts_of_value(value: object) -> TensorFacts | None:
    """Facts of a tensor object (fake or real); None for anything else."""
    if type(value) is _FAKE_TENSOR and _STORAGE_ID is not None and value.__dict__.get("dispatch_keys", True) is None:
        # The common case (once per tensor of every analysis), in one C call; a tensor without
        # a storage (any other layout) raises and takes the general way below.
        try:
            return TensorFacts(value, _STORAGE_ID(value), True)
        except Exception:
            pass
    if not isinstance(value, torch.Tensor):
        return None
    try:
        if value.layout is not torch.strided:
            return TensorFacts(value, id(value), False)
        try:
            key = value.untyped_storage()._cdata
        except (RuntimeError, NotImplementedError, AttributeError):  # opaque subclasses without a storage
            return TensorFacts(value, id(value), False)
        return TensorFacts(value, key, True)
    except Exception:  # a tensor subclass without sizes or dtype: unknown layout
        return None


def storage_identity(value: object) -> int | None:
    """Identity of a strided tensor's storage (``untyped_storage()._cdata``); None for anything else
    (the storage key of :func:`facts_of_value`'s facts, without the facts).

    Examples
    --------
    >>> import torch
    >>> x = torch.randn(4)
    >>> storage_identity(x[1:]) == storage_identity(x), storage_identity(x.to_sparse()), storage_identity(3)
    (True, None, None)
    """
    facts = facts_of_value(value)
    return facts.storage_key if facts is not None and facts.strided else None


_UNREAD: Any = object()  # FactsCache's marker of a node not read yet


class FactsCache:
    """Reads each node's metadata once; the analysis and the effect rules share one cache."""

    __slots__ = ("_outputs", "_tensor")

    def __init__(self) -> None:
        self._tensor: dict[torch.fx.Node, TensorFacts | None] = {}
        self._outputs: dict[torch.fx.Node, list[TensorFacts | None] | None] = {}

    def tensor(self, node: torch.fx.Node) -> TensorFacts | None:
        """Facts of a tensor-valued node, or None (no metadata, or not a tensor)."""
        facts: TensorFacts | None = self._tensor.get(node, _UNREAD)
        if facts is _UNREAD:  # (no try/except: raising KeyError once per node costs more than the lookup)
            facts = self._tensor[node] = facts_of_value(node.meta.get("val"))
        return facts

    def in_storage_of(self, node: torch.fx.Node, others: tuple[torch.fx.Node, ...]) -> torch.fx.Node | None:
        """The first of ``others`` whose fake tensor lives in ``node``'s fake storage (None when
        none does, or ``node`` has no facts): the trace's evidence of an alias. One call per node."""
        facts = self.tensor(node)
        if facts is None:
            return None
        key, cached = facts.storage_key, self._tensor
        for n in others:
            f = cached.get(n, _UNREAD)
            if f is _UNREAD:
                f = self.tensor(n)
            if f is not None and f.storage_key == key:
                return n
        return None

    def outputs(self, node: torch.fx.Node) -> list[TensorFacts | None] | None:
        """Per-element facts of a node whose value is a tuple or list; None otherwise."""
        out: list[TensorFacts | None] | None = self._outputs.get(node, _UNREAD)
        if out is _UNREAD:  # (read once; no KeyError raised on the first read)
            value = node.meta.get("val")
            out = self._outputs[node] = [facts_of_value(v) for v in value] if isinstance(value, (tuple, list)) else None
        return out

    def nested_storage_keys(self, node: torch.fx.Node, index: int) -> list[int]:
        """Storage identities of the tensors inside element ``index`` of a tuple-valued node
        (a ``Tensor[]`` inside a tuple result); empty when there are none."""
        value = node.meta.get("val")
        if not isinstance(value, (tuple, list)) or not 0 <= index < len(value):
            return []
        element = value[index]
        return _nested_keys(element) if isinstance(element, (tuple, list)) else []


def _nested_keys(value: object) -> list[int]:
    if isinstance(value, (tuple, list)):
        return [k for v in value for k in _nested_keys(v)]
    facts = facts_of_value(value)
    return [facts.storage_key] if facts is not None else []


def tensor_facts(node: torch.fx.Node) -> TensorFacts | None:
    """Facts of a tensor-valued node, or None (no metadata, or not a tensor). Uncached."""
    return facts_of_value(node.meta.get("val"))


def is_tensor_meta(node: torch.fx.Node) -> bool | None:
    """True/False when metadata says whether the value is a tensor; None without metadata."""
    if "val" not in node.meta:
        return None
    return isinstance(node.meta["val"], torch.Tensor)


def known_equal(a: SizeLike, b: SizeLike) -> bool:
    """True when two sizes (ints or SymInts) are provably equal."""
    if type(a) is int and type(b) is int:
        return a == b
    try:
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        return bool(statically_known_true(a == b))
    except Exception:
        return False


def same_region(x: Region, y: Region) -> bool:
    """True when two regions provably cover the same elements in the same order
    (strides of size-one dimensions aside: they address nothing).

    Examples
    --------
    >>> from aliasing.core.regions import Region
    >>> same_region(Region(0, (2, 1), (1, 5), 4), Region(0, (2, 1), (1, 1), 4))
    True
    >>> same_region(Region(0, (2,), (1,), 4), Region(2, (2,), (1,), 4))
    False
    """
    return (
        x.itemsize == y.itemsize
        and len(x.sizes) == len(y.sizes)
        and known_equal(x.offset, y.offset)
        and all(known_equal(p, q) for p, q in zip(x.sizes, y.sizes))
        and all(known_equal(p, q) or known_equal(n, 1) for p, q, n in zip(x.strides, y.strides, x.sizes))
    )


def same_layout(a: TensorFacts, b: TensorFacts) -> bool:
    """True when two values provably agree on dtype, device, sizes, strides, offset and bits."""
    pa, pb = a.plain_layout, b.plain_layout
    if pa is not None and pb is not None:  # plain ints: compare the tuples (and then the bits)
        return pa == pb and a.bits == b.bits
    return (  # the cheap facts first
        a.is_strided
        and b.is_strided
        and a.dtype == b.dtype
        and len(a.sizes) == len(b.sizes)
        and _all_known_equal(a.sizes, b.sizes)
        and _all_known_equal(a.strides, b.strides)
        and known_equal(a.storage_offset, b.storage_offset)
        and a.bits == b.bits
    )


def _all_known_equal(xs: tuple[SizeLike, ...], ys: tuple[SizeLike, ...]) -> bool:
    """Element-wise :func:`known_equal` of two tuples of the same length (plain ints compared at once)."""
    if plain_ints(xs) and plain_ints(ys):
        return xs == ys  # (never compare SymInts with ==: that may add a guard)
    return all(known_equal(x, y) for x, y in zip(xs, ys))
