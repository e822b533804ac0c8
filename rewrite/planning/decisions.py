"""Decisions of the clone-elimination planner, their reasons, and the report."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from rewrite.counts import copy_kind, count_copies

if TYPE_CHECKING:
    import torch.fx

__all__ = ["CloneEliminationReport", "Decision", "Reason"]


class Reason(str, enum.Enum):
    """Why a copy (a clone or a ``copy_``) was removed or kept.

    ``condition`` names the numbered condition of :mod:`rewrite.planning.planner`
    (docs/DESIGN.md's C1-C7, and C8 copy-back folds, C9 self-copies, C10
    dead clones erased with their writers) that the reason enforces or that
    allowed the removal.
    """

    # removals
    REMOVABLE = "removable"
    FOLDED_INTO_COPY_BACK = "clone-folded-into-its-copy-back"
    REMOVABLE_BY_REGIONS = "removable-by-regions"
    REMOVABLE_BY_DATAFLOW = "removable-by-liveness-and-kills"
    LAYOUT_UNOBSERVED = "layout-change-unobserved"
    DEAD_CLONE_ERASED = "dead-clone-erased-with-its-writers"
    ERASED_WITH_DEAD_CLONE = "erased-with-a-dead-clone"
    COPY_ERASED_WITH_DEAD_CLONE = "copy-erased-with-a-dead-clone"
    SELF_COPY = "copy-onto-itself"
    # keeps
    LAYOUT = "layout"
    ORIGINAL_WRITTEN = "original-written-while-clone-live"
    CLONE_WRITTEN_ORIGINAL_READ = "clone-written-then-original-read"
    SAME_NODE_WRITES_CLONE_READS_ORIGINAL = "same-node-writes-clone-reads-original"
    SAME_NODE_WRITES_ORIGINAL_READS_CLONE = "same-node-writes-original-reads-clone"
    WRITES_CALLER_MEMORY = "clone-written-original-is-caller-memory"
    OUTPUT_ALIASING = "output-would-alias"
    COPY_BACK_REGION_DIFFERS = "copy-back-region-differs-from-clone"
    CLONE_WRITTEN_AFTER_COPY_BACK = "clone-written-after-copy-back"
    CLONE_WRITTEN_OUTSIDE_COPY_BACK = "clone-written-outside-copied-back-region"
    NOT_A_SELF_COPY = "copy-not-provably-onto-itself"
    DEAD_CLONE_FEEDS_A_CHECK = "dead-clone-feeds-a-runtime-check"
    UNKNOWN_STORAGE = "unknown-storage"
    OPAQUE_USE = "opaque-op-touches-clone"
    INTERNAL_ERROR = "internal-error"

    def __str__(self) -> str:
        return self.value

    @property
    def condition(self) -> str:
        """The numbered condition of :mod:`rewrite.planning.planner` this reason cites ("" for none)."""
        return _CONDITION.get(self, "")

    @property
    def description(self) -> str:
        """One line explaining the reason."""
        return _DESCRIPTION[self]

    @property
    def is_copy_reason(self) -> bool:
        """True for the reasons of ``copy_`` decisions (C9), False for those of clones."""
        return self in (Reason.SELF_COPY, Reason.NOT_A_SELF_COPY, Reason.COPY_ERASED_WITH_DEAD_CLONE)


_CONDITION = {
    Reason.LAYOUT: "C1",
    Reason.ORIGINAL_WRITTEN: "C2",
    Reason.CLONE_WRITTEN_ORIGINAL_READ: "C3",
    Reason.SAME_NODE_WRITES_CLONE_READS_ORIGINAL: "C4",
    Reason.SAME_NODE_WRITES_ORIGINAL_READS_CLONE: "C4",
    Reason.WRITES_CALLER_MEMORY: "C5",
    Reason.OUTPUT_ALIASING: "C6",
    Reason.REMOVABLE_BY_DATAFLOW: "C2-C5",
    Reason.LAYOUT_UNOBSERVED: "C1",
    Reason.DEAD_CLONE_ERASED: "C10",
    Reason.ERASED_WITH_DEAD_CLONE: "C10",
    Reason.COPY_ERASED_WITH_DEAD_CLONE: "C10",
    Reason.DEAD_CLONE_FEEDS_A_CHECK: "C10",
    Reason.FOLDED_INTO_COPY_BACK: "C8",
    Reason.REMOVABLE_BY_REGIONS: "C8",
    Reason.COPY_BACK_REGION_DIFFERS: "C8a",
    Reason.CLONE_WRITTEN_AFTER_COPY_BACK: "C8b",
    Reason.CLONE_WRITTEN_OUTSIDE_COPY_BACK: "C8b",
    Reason.SELF_COPY: "C9",
    Reason.NOT_A_SELF_COPY: "C9",
}

_DESCRIPTION = {
    Reason.REMOVABLE: "no condition requires the copy",
    Reason.FOLDED_INTO_COPY_BACK: "C8: the clone is only written where it is copied back into its original, "
    "and nothing observes the difference; the copy-back becomes a self-copy (C9)",
    Reason.REMOVABLE_BY_REGIONS: "C8: C2-C5 hold when judged by the regions the clone writes and reads "
    "(without a copy-back: nothing reads the original where the clone writes, and the original is not "
    "caller-visible if the clone is written)",
    Reason.REMOVABLE_BY_DATAFLOW: "C2-C5 hold on live values: no live read of the clone sees a write of the "
    "original (nor the reverse) that no full overwrite or value-preserving copy undid, same-node effects are "
    "element-exact, and caller-visible memory ends as it would have (evidence: the dead readers, kills, "
    "value-preserving copies and element-exact nodes that made the difference)",
    Reason.LAYOUT_UNOBSERVED: "C1: the clone changes only strides or storage offset, and no consumer observes "
    "the layout (elementwise and copying consumers recompute the layouts their metadata records)",
    Reason.DEAD_CLONE_ERASED: "C10: nothing reads the clone: it is erased with the nodes that only write it "
    "or use its dead values (evidence: the erased nodes)",
    Reason.ERASED_WITH_DEAD_CLONE: "C10: a clone that only uses a dead clone's values, erased with it "
    "(evidence: the dead clone)",
    Reason.COPY_ERASED_WITH_DEAD_CLONE: "C10: a copy into a dead clone, erased with it (evidence: the dead clone)",
    Reason.SELF_COPY: "C9: the copy writes a region with its own values (same memory, layout and dtype)",
    Reason.LAYOUT: "C1: the clone's layout (dtype, device, sizes, strides, offset, bits) differs from its original",
    Reason.ORIGINAL_WRITTEN: "C2: memory of the original is written while the clone is still read afterwards",
    Reason.CLONE_WRITTEN_ORIGINAL_READ: "C3: the clone is written and memory of the original is read afterwards",
    Reason.SAME_NODE_WRITES_CLONE_READS_ORIGINAL: "C4: one node writes the clone's memory and reads the original's",
    Reason.SAME_NODE_WRITES_ORIGINAL_READS_CLONE: "C4: one node writes the original's memory and reads the clone's",
    Reason.WRITES_CALLER_MEMORY: "C5: the clone is written and the original is caller-visible memory "
    "(with no copy-back that writes it anyway)",
    Reason.OUTPUT_ALIASING: "C6: the clone is returned and removing it would make outputs share memory "
    "with an input, a constant or another output",
    Reason.COPY_BACK_REGION_DIFFERS: "C8a: the first copy of the clone into its original is not an identical "
    "region with the same dtype",
    Reason.CLONE_WRITTEN_AFTER_COPY_BACK: "C8b: the clone is written after it is copied back",
    Reason.CLONE_WRITTEN_OUTSIDE_COPY_BACK: "C8b: the clone is written outside the region it copies back",
    Reason.NOT_A_SELF_COPY: "C9: the copy's source and destination are not provably the same memory with the same "
    "layout and dtype",
    Reason.DEAD_CLONE_FEEDS_A_CHECK: "C10: nothing reads the clone, but its group executes a runtime check "
    "the rewrite must keep: an assert, a range constraint or another side effect, or an op that may raise on "
    "the values it reads (indexing, item) (evidence: the checks)",
    Reason.UNKNOWN_STORAGE: "the storage or layout of the clone or its original is unknown (missing metadata)",
    Reason.OPAQUE_USE: "an op the analysis cannot see into touches the clone's memory",
    Reason.INTERNAL_ERROR: "the pass failed internally; every clone is kept",
}


@dataclass(frozen=True, init=False)
class Decision:
    """What the planner decided for one clone candidate.

    ``node`` is the clone's name, ``evidence`` the names of the nodes that caused
    the decision (the conflicting write and read, the caller-visible input, ...).
    ``erased`` names the nodes a C10 removal erases with the clone (its dead
    writers and the dead users of its values), in graph order.
    """

    node: str
    action: Literal["remove", "keep"]
    reason: Reason
    evidence: tuple[str, ...] = ()
    original: str = ""
    erased: tuple[str, ...] = ()

    def __init__(
        self,
        node: str,
        action: Literal["remove", "keep"],
        reason: Reason,
        evidence: tuple[str, ...] = (),
        original: str = "",
        erased: tuple[str, ...] = (),
    ) -> None:
        # One or two per candidate: fill the fields directly (a frozen dataclass's generated
        # __init__ pays a call per field).
        d = self.__dict__
        d["node"], d["action"], d["reason"], d["evidence"], d["original"], d["erased"] = (
            node, action, reason, evidence, original, erased
        )


@dataclass(frozen=True)
class CloneEliminationReport:
    """All decisions of one clone-elimination run, in graph order."""

    decisions: tuple[Decision, ...] = ()
    error: str | None = None
    notes: tuple[str, ...] = field(default=())
    #: names of the nodes the analysis could not see into (answered conservatively)
    opaque: tuple[str, ...] = field(default=())

    @classmethod
    def internal_error(
        cls, candidates: Iterable[torch.fx.Node], message: str, opaque: Iterable[str] = ()
    ) -> CloneEliminationReport:
        """The report of a run that failed internally: every candidate kept with :attr:`Reason.INTERNAL_ERROR`.

        Each decision names the candidate node, its first argument as the
        original, and no evidence; ``error`` is ``message``; ``opaque`` are the
        names of the nodes the analysis could not see into, when it got that far.

        Examples
        --------
        >>> import torch
        >>> gm = torch.fx.symbolic_trace(lambda x: x.clone() + 1)
        >>> clone = next(n for n in gm.graph.nodes if n.op == "call_method")
        >>> report = CloneEliminationReport.internal_error([clone], "RuntimeError: boom")
        >>> report.kept, report.removed, report.error
        (('clone',), (), 'RuntimeError: boom')
        >>> report.decision("clone").reason is Reason.INTERNAL_ERROR, report.decision("clone").original
        (True, 'x')
        """
        return cls(
            tuple(Decision(n.name, "keep", Reason.INTERNAL_ERROR, (), str(n.args[0])) for n in candidates),
            message,
            opaque=tuple(opaque),
        )

    @property
    def removed(self) -> tuple[str, ...]:
        """Names of the clones removed (``copy_`` self-copies are in :attr:`dropped_copies`)."""
        return tuple(d.node for d in self.decisions if d.action == "remove" and not d.reason.is_copy_reason)

    @property
    def kept(self) -> tuple[str, ...]:
        """Names of the clones kept (a ``copy_`` kept is a write-back the program needs, not listed)."""
        return tuple(d.node for d in self.decisions if d.action == "keep" and not d.reason.is_copy_reason)

    @property
    def dropped_copies(self) -> tuple[str, ...]:
        """Names of the ``copy_`` nodes removed as self-copies (condition C9)."""
        return tuple(d.node for d in self.decisions if d.action == "remove" and d.reason.is_copy_reason)

    def decision(self, name: str) -> Decision:
        """The decision for the clone named ``name`` (KeyError if it was no candidate)."""
        for d in self.decisions:
            if d.node == name:
                return d
        raise KeyError(name)

    def __str__(self) -> str:
        header = ("node", "kind", "original", "action", "reason", "evidence")
        rows = [header] + [
            (
                d.node,
                copy_kind(d),
                d.original,
                d.action,
                f"{d.reason.condition + ' ' if d.reason.condition else ''}{d.reason}",
                ", ".join(d.evidence),
            )
            for d in self.decisions
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.append(str(count_copies(self.decisions)))
        if self.opaque:
            shown = ", ".join(self.opaque[:8]) + (", ..." if len(self.opaque) > 8 else "")
            lines.append(f"{len(self.opaque)} opaque nodes answered conservatively: {shown}")
        if self.error:
            lines.append(f"error: {self.error}")
        return "\n".join(lines)
