"""One vocabulary for the counts of clone elimination's decisions, everywhere they are printed.

Clone elimination decides every *copy candidate* of a program: each clone
(``aten.clone``, an ``aten._to_copy`` that may change nothing, a torch-level
clone; conditions C1-C8 and C10) and each write-back ``copy_`` (condition C9,
or C10 with a dead clone). One decision is one row of the decision table, with
its kind (``clone`` or ``copy_``) and its action (``remove`` or ``keep``).
:func:`count_copies` counts the rows, and :class:`CopyCounts` says them in the
one sentence that ``fx-aliasing explain`` (its summary and its table), the demo,
``fx-aliasing rewrite``, the HTML report and the JSON output all use::

    6 copy candidates (5 clones, 1 copy_): 2 removed, 4 kept

Every row is counted exactly once by kind (clones + copy_ = candidates) and
exactly once by action (removed + kept = candidates).

This module imports neither torch nor the planner (which imports it); a decision
is anything with an ``action`` and a reason that says whether it is a copy's.

Examples
--------
>>> from rewrite.planning.decisions import Decision, Reason
>>> decisions = [
...     Decision("clone", "keep", Reason.LAYOUT),
...     Decision("clone_1", "remove", Reason.REMOVABLE),
...     Decision("copy_", "keep", Reason.NOT_A_SELF_COPY),
... ]
>>> counts = count_copies(decisions)
>>> print(counts)
3 copy candidates (2 clones, 1 copy_): 1 removed, 2 kept
>>> counts.clones, counts.copies, counts.removed, counts.kept
(2, 1, 1, 2)
>>> [copy_kind(d) for d in decisions]
['clone', 'clone', 'copy_']
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol


class _Reason(Protocol):
    @property
    def is_copy_reason(self) -> bool: ...


class Decision(Protocol):
    """What :func:`count_copies` reads of a decision
    (:class:`rewrite.planning.decisions.Decision` has it)."""

    @property
    def action(self) -> str: ...

    @property
    def reason(self) -> _Reason: ...

__all__ = ["CopyCounts", "CopyKind", "copy_kind", "count_copies"]

#: The kind of a copy candidate: a clone, or a write-back ``copy_``.
CopyKind = Literal["clone", "copy_"]


def copy_kind(decision: Decision) -> CopyKind:
    """``"copy_"`` for the decision on a ``copy_`` (its reason is one of C9's, or C10's
    ``copy-erased-with-a-dead-clone``), ``"clone"`` otherwise: the same split as
    :attr:`~rewrite.planning.decisions.CloneEliminationReport.removed`,
    ``.kept`` (clones) and ``.dropped_copies``."""
    return "copy_" if decision.reason.is_copy_reason else "clone"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


@dataclass(frozen=True)
class CopyCounts:
    """How many decisions of each kind and action; ``str()`` gives the one sentence.

    The four fields partition the decision table's rows; the properties add them up.
    """

    clones_removed: int = 0
    clones_kept: int = 0
    copies_removed: int = 0
    copies_kept: int = 0

    @property
    def clones(self) -> int:
        """Rows of kind ``clone``."""
        return self.clones_removed + self.clones_kept

    @property
    def copies(self) -> int:
        """Rows of kind ``copy_``."""
        return self.copies_removed + self.copies_kept

    @property
    def candidates(self) -> int:
        """Every row: ``clones + copies``, and ``removed + kept``."""
        return self.clones + self.copies

    @property
    def removed(self) -> int:
        """Rows whose action is ``remove`` (clones and ``copy_``)."""
        return self.clones_removed + self.copies_removed

    @property
    def kept(self) -> int:
        """Rows whose action is ``keep`` (clones and ``copy_``)."""
        return self.clones_kept + self.copies_kept

    def candidates_text(self) -> str:
        """``6 copy candidates (5 clones, 1 copy_)``: the sentence's first half."""
        return f"{_plural(self.candidates, 'copy candidate')} ({_plural(self.clones, 'clone')}, {self.copies} copy_)"

    def __str__(self) -> str:
        return f"{self.candidates_text()}: {self.removed} removed, {self.kept} kept"

    def as_dict(self) -> dict[str, int]:
        """Every count by name (the ``counts`` of ``fx-aliasing explain --json``).

        Examples
        --------
        >>> sorted(CopyCounts(2, 3, 0, 1).as_dict().items())  # doctest: +NORMALIZE_WHITESPACE
        [('candidates', 6), ('clones', 5), ('clones_kept', 3), ('clones_removed', 2), ('copies', 1),
         ('copies_kept', 1), ('copies_removed', 0), ('kept', 4), ('removed', 2)]
        """
        return {
            "candidates": self.candidates,
            "clones": self.clones,
            "copies": self.copies,
            "removed": self.removed,
            "kept": self.kept,
            "clones_removed": self.clones_removed,
            "clones_kept": self.clones_kept,
            "copies_removed": self.copies_removed,
            "copies_kept": self.copies_kept,
        }


def count_copies(decisions: Iterable[Decision]) -> CopyCounts:
    """Count the decisions (rows of the decision table) by kind and action.

    Parameters
    ----------
    decisions : iterable of Decision
        A report's ``decisions``, one per copy candidate.

    Returns
    -------
    CopyCounts
    """
    tally = {("clone", "remove"): 0, ("clone", "keep"): 0, ("copy_", "remove"): 0, ("copy_", "keep"): 0}
    for d in decisions:
        tally[(copy_kind(d), d.action)] += 1
    return CopyCounts(
        tally[("clone", "remove")], tally[("clone", "keep")], tally[("copy_", "remove")], tally[("copy_", "keep")]
    )
