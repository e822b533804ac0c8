"""Inputs of a program with symbolic sizes at the boundaries of its sizes' ranges.

A decision that rests on a trace must hold for every size the program admits, not
only the example's: ``reshape`` of a transposed ``(n, 4)`` copies for ``n > 1`` and
is a view at ``n == 1``. For a program exported with dynamic sizes
(``tracing_mode="export-dynamic"``), :func:`boundary_inputs` gives makers of real
inputs at each symbol's boundary values (0, 1, 2, its example value and a larger one,
as its range allows; the other symbols at their example values), laid out as the
placeholders' symbolic strides and offsets say, and kept only where the exported
program itself accepts them (its input checks and runtime asserts pass).

Example
-------
>>> import torch
>>> from torch.export import Dim
>>> class M(torch.nn.Module):
...     def forward(self, x):
...         return x.t() * 2
>>> ep = torch.export.export(M(), (torch.randn(3, 4),), dynamic_shapes=({0: Dim("n")},))
>>> sorted(tuple(make()[0].shape) for make in boundary_inputs(ep, seed=0))
[(0, 4), (1, 4), (2, 4), (3, 4), (9, 4)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.fx

__all__ = ["boundary_inputs"]

InputMaker = Callable[[], list[torch.Tensor]]


def boundary_inputs(ep: torch.export.ExportedProgram, *, seed: int) -> list[InputMaker]:
    """Makers of the user inputs of ``ep`` at its symbols' boundary values (see the module docstring)."""
    user = set(ep.graph_signature.user_inputs)
    values = [p.meta.get("val") for p in ep.graph.find_nodes(op="placeholder", sort=True) if p.name in user]
    if not values or not all(isinstance(v, torch.Tensor) for v in values):
        return []
    env = getattr(values[0].fake_mode, "shape_env", None)
    if env is None:
        return []
    symbols = sorted({s for v in values for x in _layout(v) for s in _free(x)}, key=str)
    known = env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val  # (renamed in 2.14)
    hints = {s: int(known[s]) for s in symbols if s in known}
    if len(hints) != len(symbols):
        return []
    makers: list[InputMaker] = []
    seen: set[tuple[int, ...]] = set()
    module = ep.module()
    for s in symbols:
        lo, hi = _bounds(ep.range_constraints, env, s)
        for value in (0, 1, 2, hints[s], 2 * hints[s] + 3):
            if not lo <= value <= hi:
                continue
            assignment = {**hints, s: value}
            key = tuple(assignment[t] for t in symbols)
            if key in seen:
                continue
            seen.add(key)
            maker = _maker(values, assignment, seed)
            if maker is not None and _accepted(module, maker):
                makers.append(maker)
    return makers


def _layout(v: torch.Tensor) -> tuple[Any, ...]:
    return (*v.shape, *v.stride(), v.storage_offset())


def _free(x: Any) -> set[sympy.Symbol]:
    return set(x.node.expr.free_symbols) if isinstance(x, torch.SymInt) else set()


def _bounds(ranges: Any, env: Any, s: sympy.Symbol) -> tuple[int, float]:
    """The range the program admits for ``s``: its range constraint (which admits 0 and 1 where the
    shape environment's own range starts at 2), else the shape environment's."""
    vr = ranges.get(s, env.var_to_range.get(s))
    if vr is None:
        return 0, float("inf")
    return _as_int(vr.lower, 0), _as_int(vr.upper, float("inf"))


def _as_int(bound: Any, infinite: float) -> Any:
    """A range bound as an int, ``infinite`` for torch's infinities (``int_oo``)."""
    return int(bound) if isinstance(bound, sympy.Integer) else infinite


def _evaluate(x: Any, assignment: dict[sympy.Symbol, int]) -> int | None:
    if not isinstance(x, torch.SymInt):
        return int(x)
    value = x.node.expr.xreplace({s: sympy.Integer(v) for s, v in assignment.items()})
    return int(value) if value.is_Integer else None


def _maker(values: list[torch.Tensor], assignment: dict[sympy.Symbol, int], seed: int) -> InputMaker | None:
    """A maker of real inputs with the placeholders' layouts at ``assignment``; None where a layout
    does not evaluate to plain ints."""
    layouts: list[tuple[list[int], list[int], int, torch.dtype]] = []
    for v in values:
        sizes = [_evaluate(x, assignment) for x in v.shape]
        strides = [_evaluate(x, assignment) for x in v.stride()]
        offset = _evaluate(v.storage_offset(), assignment)
        if None in sizes or None in strides or offset is None or any(n < 0 for n in sizes):  # type: ignore[operator]
            return None
        layouts.append((sizes, strides, offset, v.dtype))  # type: ignore[arg-type]

    def make() -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        out = []
        for sizes, strides, offset, dtype in layouts:
            extent = offset + (1 + sum((n - 1) * st for n, st in zip(sizes, strides)) if all(sizes) else 0)
            if dtype.is_floating_point or dtype.is_complex:
                base = torch.randn(extent, generator=generator).to(dtype)
            elif dtype == torch.bool:
                base = torch.rand(extent, generator=generator) > 0.5
            else:
                base = torch.randint(-5, 6, (extent,), generator=generator).to(dtype)
            out.append(base.as_strided(sizes, strides, offset))
        return out

    return make


def _accepted(module: torch.nn.Module, make: InputMaker) -> bool:
    """Whether the exported program runs on the inputs (its input checks, runtime asserts and kernels)."""
    try:
        with torch.no_grad():
            module(*make())
    except Exception:
        return False
    return True
