"""Decisions of the clone-elimination planner, their reasons, and the report."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal, Optional

__all__ = ["Reason", "Decision", "CloneEliminationReport"]


class Reason(str, enum.Enum):
    """Why a clone was removed or kept. ``condition`` names the DESIGN.md condition (C1-C7)."""

    REMOVABLE = "removable"
    LAYOUT = "layout"
    ORIGINAL_WRITTEN = "original-written-while-clone-live"
    CLONE_WRITTEN_ORIGINAL_READ = "clone-written-then-original-read"
    SAME_NODE_HAZARD = "same-node-reads-original-writes-clone"
    WRITES_CALLER_MEMORY = "clone-written-original-is-caller-memory"
    OUTPUT_ALIASING = "output-would-alias"
    UNKNOWN_STORAGE = "unknown-storage"
    OPAQUE_USE = "opaque-op-touches-clone"
    INTERNAL_ERROR = "internal-error"

    def __str__(self) -> str:
        return self.value

    @property
    def condition(self) -> str:
        """The numbered condition of DESIGN.md this reason enforces ("" for none)."""
        return _CONDITION.get(self, "")

    @property
    def description(self) -> str:
        """One line explaining the reason."""
        return _DESCRIPTION[self]


_CONDITION = {
    Reason.LAYOUT: "C1",
    Reason.ORIGINAL_WRITTEN: "C2",
    Reason.CLONE_WRITTEN_ORIGINAL_READ: "C3",
    Reason.SAME_NODE_HAZARD: "C4",
    Reason.WRITES_CALLER_MEMORY: "C5",
    Reason.OUTPUT_ALIASING: "C6",
}

_DESCRIPTION = {
    Reason.REMOVABLE: "no condition requires the copy",
    Reason.LAYOUT: "C1: the clone's layout (dtype, device, sizes, strides, offset, bits) differs from its original",
    Reason.ORIGINAL_WRITTEN: "C2: memory of the original is written while the clone is still read afterwards",
    Reason.CLONE_WRITTEN_ORIGINAL_READ: "C3: the clone is written and memory of the original is read afterwards",
    Reason.SAME_NODE_HAZARD: "C4: one node writes the clone's memory and reads the original's (or the reverse)",
    Reason.WRITES_CALLER_MEMORY: "C5: the clone is written and the original is caller-visible memory",
    Reason.OUTPUT_ALIASING: "C6: the clone is returned and removing it would make outputs share memory "
    "with an input, a constant or another output",
    Reason.UNKNOWN_STORAGE: "the storage or layout of the clone or its original is unknown (missing metadata)",
    Reason.OPAQUE_USE: "an op the analysis cannot see into touches the clone's memory",
    Reason.INTERNAL_ERROR: "the pass failed internally; every clone is kept",
}


@dataclass(frozen=True)
class Decision:
    """What the planner decided for one clone candidate.

    ``node`` is the clone's name, ``evidence`` the names of the nodes that caused
    the decision (the conflicting write and read, the caller-visible input, ...).
    """

    node: str
    action: Literal["remove", "keep"]
    reason: Reason
    evidence: tuple[str, ...] = ()
    original: str = ""


@dataclass(frozen=True)
class CloneEliminationReport:
    """All decisions of one clone-elimination run, in graph order."""

    decisions: tuple[Decision, ...] = ()
    error: Optional[str] = None
    notes: tuple[str, ...] = field(default=())

    @property
    def removed(self) -> tuple[str, ...]:
        """Names of the clones removed."""
        return tuple(d.node for d in self.decisions if d.action == "remove")

    @property
    def kept(self) -> tuple[str, ...]:
        """Names of the clones kept."""
        return tuple(d.node for d in self.decisions if d.action == "keep")

    def decision(self, name: str) -> Decision:
        """The decision for the clone named ``name`` (KeyError if it was no candidate)."""
        for d in self.decisions:
            if d.node == name:
                return d
        raise KeyError(name)

    def __str__(self) -> str:
        header = ("clone", "original", "action", "reason", "evidence")
        rows = [header] + [
            (d.node, d.original, d.action, f"{d.reason.condition + ' ' if d.reason.condition else ''}{d.reason}", ", ".join(d.evidence))
            for d in self.decisions
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.append(f"{len(self.removed)} removed, {len(self.kept)} kept")
        if self.error:
            lines.append(f"error: {self.error}")
        return "\n".join(lines)
