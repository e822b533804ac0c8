"""Calls of a random ATen overload that the operator registry classifies ``pure``.

The analysis trusts such an overload's undeclared results only where the storage-sharing
audit of the installed release confirmed them fresh (docs/DESIGN.md, "One trust rule"); the
fuzzer checks that claim in program contexts the audit never saw: a statement calls one
overload drawn from all of the registry's ``pure`` ones, with a drawn value as its first
tensor argument and arguments made from the schema for the rest (a call that raises is
not drawn). :func:`pure_overloads` is the list, made once per process (less the families of
:data:`_LEFT_OUT`). A kernel may still crash the process on odd arguments: soaks run their
rounds in worker processes (``--jobs``), where a crash is recorded and the campaign goes on.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["pure_overloads", "schema_call"]

_OVERLOADS: tuple[str, ...] | None = None

#: Families left out: ``empty`` (uninitialised memory, which no two runs agree on), views with
#: explicit strides (made from the schema, they read past the storage), ``_lazy_clone`` (copy on
#: write: the real-memory oracle sees the shared bytes change when either side is written), and kernels that
#: crash the process on arguments made from their schemas (the storage-sharing audit's crashed
#: calls: backward, batch-norm, quantized, embedding-bag, weight-norm, RNN-cell kernels) or that
#: need layouts the program state cannot track (sparse, nested, mkldnn).
_LEFT_OUT = (
    "empty",
    "strided",  # explicit strides made from the schema read past the storage (undefined values)
    "_reshape_alias",
    "_lazy_clone",  # a copy-on-write clone: the real-memory oracle sees the shared bytes as written
    "backward",
    "batch_norm",
    "quant",
    "fbgemm",
    "embedding_bag",
    "nnpack",
    "weight_norm",
    "_thnn",
    "segment_reduce",
    "_transform_bias_rescale_qkv",
    "lstm",
    "gru",
    "rnn",
    "sparse",
    "nested",
    "mkldnn",
    "cudnn",
    "miopen",
    "_test_",
    "_foobar",
    "_fused",
    "_foreach",
)


def pure_overloads() -> tuple[str, ...]:
    """The registry's ``pure`` ATen overloads as ``"name.overload"`` (``"mm.default"``), sorted.

    Example
    -------
    >>> "mm.default" in pure_overloads() and "add_.Tensor" not in pure_overloads()
    True
    """
    global _OVERLOADS
    if _OVERLOADS is None:
        from aliasing.core.registry import classify_installed

        names = []
        for row in classify_installed():
            if row.kind != "pure" or any(word in row.overload for word in _LEFT_OUT):
                continue
            name, _, overload = row.overload.removeprefix("aten::").partition(".")
            names.append(f"{name}.{overload or 'default'}")
        _OVERLOADS = tuple(sorted(names))
    return _OVERLOADS


def schema_call(overload: str, first: str, tensor: torch.Tensor, other: Callable[[], str]) -> str | None:
    """The source of a call of ``aten.<overload>`` with ``first`` (the name of ``tensor``) as its first
    tensor argument, ``other()`` for the other tensors, and values made from the schema for the rest;
    None where an argument has no value to make (a string, a generator...)."""
    name, _, which = overload.partition(".")
    op = getattr(getattr(torch.ops.aten, name), which)
    parts: list[str] = []
    placed = False
    for arg in op._schema.arguments:
        if arg.kwarg_only and (arg.has_default_value() or "?" in str(arg.type)):
            continue
        value = _value(str(arg.type), tensor, first if not placed else None, other)
        if value is None:
            if not arg.has_default_value():
                return None
            break  # the rest take their defaults
        placed = placed or value == first
        parts.append(value)
    return f"torch.ops.aten.{name}.{which}({', '.join(parts)})" if placed else None


def _value(kind: str, tensor: torch.Tensor, first: str | None, other: Callable[[], str]) -> str | None:
    if kind == "Tensor":
        return first if first is not None else other()
    if kind in ("Tensor?", "Tensor[]", "List[Tensor]", "Tensor?[]", "List[Optional[Tensor]]"):
        inner = first if first is not None else other()
        return inner if kind == "Tensor?" else f"[{inner}]"
    if kind in ("int", "SymInt"):
        return "0" if tensor.dim() == 0 else "1"
    if kind in ("int[]", "SymInt[]", "List[int]", "List[SymInt]"):
        return repr(list(tensor.shape))
    if kind in ("int[1]", "List[int][1]"):
        return "[0]" if tensor.dim() else "[]"
    if kind in ("float", "Scalar", "float?", "Scalar?"):
        return "0.5"
    if kind in ("bool", "bool?"):
        return "False"
    if kind.endswith("?"):
        return "None"
    return None
