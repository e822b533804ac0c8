"""What one pipeline run did: :class:`PipelineReport` (the ``torch.compile`` adapter logs it: :mod:`rewrite.inductor.report`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rewrite.lowering.reports import LoweringReport
from rewrite.planning.decisions import CloneEliminationReport, Decision, Reason

__all__ = ["PipelineReport"]

_FOLDS = frozenset({Reason.FOLDED_INTO_COPY_BACK, Reason.REMOVABLE_BY_REGIONS})


def _is_copy(d: Decision) -> bool:
    return d.reason.is_copy_reason


@dataclass(frozen=True)
class PipelineReport:
    """Everything :func:`rewrite.lower_and_eliminate` (or :func:`rewrite.eliminate_clones`) did: the lowering, then each planner round.

    ``eliminations`` holds one :class:`~rewrite.planning.decisions.CloneEliminationReport`
    per round of the copy planner (:mod:`rewrite.planning.planner`), with a decision for
    every clone and every ``copy_`` of the graph at that round.
    """

    lowering: LoweringReport = field(default_factory=LoweringReport)
    eliminations: tuple[CloneEliminationReport, ...] = ()
    error: str | None = None
    #: analyses built by the run (one per planner round; a round after the first only follows
    #: when a kept copy depends on a storage a layout-changing removal left without regions;
    #: none when the graph has no copy to decide)
    analyses: int = 0

    def elimination(self) -> CloneEliminationReport:
        """The run as one report: every round's removals, then the last round's keeps.

        What :func:`rewrite.eliminate_clones` returns (one round: that round's report).
        """
        if not self.eliminations:
            return CloneEliminationReport(error=self.error)
        last = self.eliminations[-1]
        earlier = tuple(d for rep in self.eliminations[:-1] for d in rep.decisions if d.action == "remove")
        return CloneEliminationReport(
            earlier + last.decisions, self.error, last.notes, opaque=self.eliminations[0].opaque
        )

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

