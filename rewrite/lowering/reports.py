"""What the lowering did: :class:`LoweringReport`, one :class:`Lowered` or :class:`Skipped` per wrapper."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Kind", "Lowered", "LoweringReport", "Skipped"]

#: The wrapper families the lowering knows.
Kind = Literal["auto_functionalized", "auto_functionalized_v2", "triton_kernel_wrapper_functional", "scatter"]



@dataclass(frozen=True)
class Lowered:
    """One wrapper node that was lowered: the clones it now makes and its in-place call."""

    node: str
    kind: Kind
    clones: tuple[str, ...]
    call: str


@dataclass(frozen=True)
class Skipped:
    """One wrapper node left as it was, with the reason (the later passes handle it as before)."""

    node: str
    kind: Kind
    reason: str


@dataclass(frozen=True)
class LoweringReport:
    """What :func:`rewrite.lowering.lower_functional_ops` did to a graph."""

    lowered: tuple[Lowered, ...] = ()
    skipped: tuple[Skipped, ...] = ()

    @property
    def clones(self) -> tuple[str, ...]:
        """Names of every clone the lowering created."""
        return tuple(c for low in self.lowered for c in low.clones)

    def __str__(self) -> str:
        lines = [f"lowered {len(self.lowered)} functional op(s), skipped {len(self.skipped)}"]
        for low in self.lowered:
            lines.append(f"  {low.node} ({low.kind}) -> {low.call}; clones: {', '.join(low.clones) or '-'}")
        for sk in self.skipped:
            lines.append(f"  {sk.node} ({sk.kind}) skipped: {sk.reason}")
        return "\n".join(lines)
