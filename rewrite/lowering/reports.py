"""What the lowering and the pipeline did: :class:`LoweringReport` and :class:`PipelineReport`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rewrite.decisions import CloneEliminationReport, Decision, Reason

__all__ = ["Kind", "Lowered", "LoweringReport", "PipelineReport", "Skipped"]

#: The wrapper families the lowering knows.
Kind = Literal["auto_functionalized", "auto_functionalized_v2", "triton_kernel_wrapper_functional", "scatter"]

_FOLDS = frozenset({Reason.FOLDED_INTO_COPY_BACK, Reason.REMOVABLE_BY_REGIONS})


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


def _is_copy(d: Decision) -> bool:
    return d.reason.is_copy_reason


@dataclass(frozen=True)
class PipelineReport:
    """Everything :func:`rewrite.lowering.lower_and_eliminate` did: the lowering, then each planner round.

    ``eliminations`` holds one :class:`~rewrite.decisions.CloneEliminationReport`
    per round of the copy planner (:mod:`rewrite.planner`), with a decision for
    every clone and every ``copy_`` of the graph at that round.
    """

    lowering: LoweringReport = field(default_factory=LoweringReport)
    eliminations: tuple[CloneEliminationReport, ...] = ()
    error: str | None = None

    def _decisions(self) -> list[Decision]:
        return [d for rep in self.eliminations for d in rep.decisions]

    @property
    def removed(self) -> tuple[str, ...]:
        """Clones removed, in every round (folded ones included)."""
        return tuple(d.node for d in self._decisions() if d.action == "remove" and not _is_copy(d))

    @property
    def folds(self) -> tuple[Decision, ...]:
        """The removals of clones by the copy-back fold (condition C8)."""
        return tuple(d for d in self._decisions() if d.action == "remove" and d.reason in _FOLDS)

    @property
    def dropped_copies(self) -> tuple[str, ...]:
        """``copy_`` nodes removed as self-copies (condition C9)."""
        return tuple(d.node for d in self._decisions() if d.action == "remove" and _is_copy(d))

    @property
    def kept(self) -> tuple[str, ...]:
        """Clones still in the graph (kept by the last round)."""
        if not self.eliminations:
            return ()
        return tuple(d.node for d in self.eliminations[-1].decisions if d.action == "keep" and not _is_copy(d))

    def summary(self) -> str:
        """One line: counts of lowered ops, removed and kept clones, dropped copies."""
        low = self.lowering
        text = (
            f"fx-aliasing: lowered {len(low.lowered)} functional op(s) ({len(low.skipped)} skipped), "
            f"{len(low.clones)} clone(s) created; removed {len(self.removed)} clone(s) "
            f"({len(self.folds)} folded), kept {len(self.kept)}; "
            f"dropped {len(self.dropped_copies)} self-copy(ies)"
        )
        if self.error:
            text += f"; error: {self.error}"
        return text

    def __str__(self) -> str:
        parts = [self.summary(), str(self.lowering)]
        for i, rep in enumerate(self.eliminations):
            parts.append(f"copy planner, round {i + 1}:\n{rep}")
        return "\n".join(parts)
