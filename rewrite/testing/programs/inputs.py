"""The inputs of a drawn program: shapes, layouts, donation, and the ``make_inputs`` source."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import hypothesis.strategies as st

from rewrite.testing.programs.values import shape_args

_RANKS = st.sampled_from([2, 1, 3, 4])  # matrices first: most views need two dimensions


@dataclass(frozen=True)
class _InputSpec:
    shape: tuple[int, ...]
    layout: str  # "contiguous" | "transposed" | "strided" | "offset"

    def expression(self) -> str:
        shape = self.shape
        if self.layout == "transposed":
            base = (*shape[:-2], shape[-1], shape[-2])
            return f"torch.randn({shape_args(base)}, generator=g).transpose(-2, -1)"
        if self.layout == "strided":
            base = (*shape[:-1], 2 * shape[-1])
            return f"torch.randn({shape_args(base)}, generator=g)[..., ::2]"
        if self.layout == "offset":
            base = (shape[0] + 1, *shape[1:])
            return f"torch.randn({shape_args(base)}, generator=g)[1:]"
        return f"torch.randn({shape_args(shape)}, generator=g)"


def draw_inputs(
    draw: st.DrawFn, *, max_inputs: int, max_size: int, allow_donation: bool
) -> tuple[list[_InputSpec], tuple[int, ...]]:
    """Draw the inputs (1 to ``max_inputs``, sizes up to ``max_size``) and which of them are donated."""
    count = draw(st.integers(1, max_inputs))
    specs: list[_InputSpec] = []
    donated: list[int] = []
    for i in range(count):
        rank = draw(_RANKS)
        shape = tuple(draw(st.integers(1, max_size)) for _ in range(rank))
        layouts = ["contiguous", "contiguous", "offset", "strided"] + (["transposed"] if rank >= 2 else [])
        specs.append(_InputSpec(shape, draw(st.sampled_from(layouts))))
        if allow_donation and draw(st.integers(0, 3)) == 3:
            donated.append(i)
    return specs, tuple(donated)


def make_inputs_source(specs: Sequence[_InputSpec], seed: int) -> str:
    """The source of a ``make_inputs()`` that makes the inputs of ``specs`` from ``seed``."""
    lines = ["def make_inputs():", f"    g = torch.Generator().manual_seed({seed})"]
    lines += [f"    x{i} = {spec.expression()}" for i, spec in enumerate(specs)]
    lines.append(f"    return [{', '.join(f'x{i}' for i in range(len(specs)))}]")
    return "\n".join(lines) + "\n"

