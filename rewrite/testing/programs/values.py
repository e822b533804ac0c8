"""The values of a program being drawn: real tensors with the memory they cover, and shape helpers.

Every statement is executed on real tensors while it is drawn; a :class:`Value`
is one tensor the program has made (or an input), with the storage elements it
covers, which decide what a statement may read while it writes.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Sequence
from dataclasses import dataclass

import hypothesis.strategies as st
import torch

#: Largest rank of a drawn value.
MAX_RANK = 4


class Rejected(Exception):
    """A drawn statement is not valid on real tensors."""


@functools.lru_cache(maxsize=8192)
def compiled(source: str, filename: str, mode: str) -> types.CodeType:
    """``compile(source, filename, mode)``, cached: while shrinking, Hypothesis draws the same
    statements (and inputs, and programs) again and again."""
    code: types.CodeType = compile(source, filename, mode)
    return code


@functools.cache
def integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    """``st.integers(lo, hi)``, built once (drawing is the hot path of the generator)."""
    return st.integers(lo, hi)


def shape_args(shape: Sequence[int]) -> str:
    """The sizes as call arguments: ``2, 3`` (``()`` for a scalar)."""
    return ", ".join(str(s) for s in shape) if shape else "()"


def shape_tuple(shape: Sequence[int]) -> str:
    """The sizes as a tuple literal: ``()``, ``(4,)``, ``(2, 3,)``."""
    return "(" + "".join(f"{s}, " for s in shape).rstrip(" ") + ")" if len(shape) != 1 else f"({shape[0]},)"


def storage_elements(t: torch.Tensor) -> frozenset[int]:
    """Storage element offsets that ``t`` covers."""
    idx = torch.tensor([t.storage_offset()], dtype=torch.int64)
    for size, stride in zip(t.shape, t.stride()):
        idx = (idx[:, None] + torch.arange(size, dtype=torch.int64) * stride).reshape(-1)
    return frozenset(idx.tolist())


def clone_keeps_layout(t: torch.Tensor) -> bool:
    """Whether ``t.clone()`` has ``t``'s strides and storage offset."""
    return bool(t.storage_offset() == 0 and t.clone().stride() == t.stride())


def broadcasts_to(src: Sequence[int], dst: Sequence[int]) -> bool:
    """Whether shape ``src`` broadcasts to shape ``dst`` (``dst`` unchanged)."""
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(reversed(src), reversed(dst)))


def broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """The shape ``a`` and ``b`` broadcast to together (None where they do not)."""
    try:
        shape: torch.Size = torch.broadcast_shapes(tuple(a), tuple(b))  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        return tuple(shape)
    except RuntimeError:
        return None


@dataclass
class Value:
    """One tensor the program has made (or an input): its name, how it was made, the real tensor,
    the storage elements it covers and its storage (the storage's data pointer)."""

    name: str
    kind: str  # "input" | "fresh" | "clone" | "view" | "inplace"
    tensor: torch.Tensor
    elements: frozenset[int]
    storage: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.tensor.shape)

    @property
    def writable(self) -> bool:
        return len(self.elements) == self.tensor.numel()

