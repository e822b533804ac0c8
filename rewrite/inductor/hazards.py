"""The hazard catalogue (:data:`HAZARDS`, one row per class H1-H9), and what every guard stage returns.

docs/DESIGN.md ("Inductor's own aliasing bugs") states each class in full:
what goes wrong, the fix, its cost. The catalogue is the code's map of it:
each class's code, name, the pytorch/pytorch issue, the hook that checks it,
the ``plan_*`` function that finds it, the torch releases whose stock
Inductor still gets it wrong, and one line of description. :data:`STOCK_MISCOMPILES`
and :func:`hazards_on` read it. :class:`Guarded` and :class:`GuardReport` are
what every guard stage returns (:func:`protected_nodes`: its copies in a
graph); :class:`InductorModel` and :class:`OutputRoles` are what the passes
(:mod:`rewrite.inductor.passes`) tell the guard about Inductor and about the
caller.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import torch.fx

__all__ = [
    "ALL_HAZARDS",
    "HAZARDS",
    "KNOWN_RELEASES",
    "STOCK_MISCOMPILES",
    "Action",
    "GuardReport",
    "Guarded",
    "Hazard",
    "HazardClass",
    "InductorModel",
    "OutputRoles",
    "hazards_on",
    "protected_nodes",
]


class Hazard(str, enum.Enum):
    """A way Inductor's later passes would break eager semantics (a row of :data:`HAZARDS`)."""

    STALE_INPUT_READ = "stale-input-read"
    OVERWRITTEN_RESULT = "in-placed-result-overwritten"
    ESCAPING_RESULT = "in-placed-result-returned"
    WRITE_BACK_READS_ELSEWHERE = "write-back-reads-in-placed-result-elsewhere"
    OVERLAPPING_SOURCE = "scatter-source-overlaps-destination"
    DTYPE_VIEW_READ_LATE = "dtype-view-read-before-base-write"
    OFFSET_CLONE_DROPPED = "offset-changing-clone-dropped"
    OUTPUTS_COLLAPSED = "distinct-outputs-returned-as-one-object"
    STORAGE_VIEW_OF_COPY = "as-strided-over-a-materialised-view"

    def __str__(self) -> str:
        return self.value

    @property
    def code(self) -> str:
        """``H1``..``H9``."""
        return _ROWS[self].code

    @property
    def description(self) -> str:
        """One line: what goes wrong without the guard."""
        return _ROWS[self].description


#: The Inductor hook whose graph shows a hazard (the joint graph: before ``remove_noop_ops`` drops what it needs).
Hook = Literal["joint_custom_pre_pass", "post_grad_custom_post_pass"]


@dataclass(frozen=True)
class HazardClass:
    """One class of :data:`HAZARDS`.

    ``check`` names the ``plan_*`` function of :mod:`rewrite.inductor` that
    finds it; ``broken_on`` the torch releases (``major.minor``) whose stock
    Inductor miscompiles programs of the class.
    """

    hazard: Hazard
    code: str
    issue: int
    hook: Hook
    check: str
    broken_on: frozenset[str]
    description: str


def _row(hazard: Hazard, code: str, issue: int, hook: Hook, check: str, broken_on: str, description: str) -> HazardClass:
    return HazardClass(hazard, code, issue, hook, check, frozenset(broken_on.split()), description)


_POST: Hook = "post_grad_custom_post_pass"
_JOINT: Hook = "joint_custom_pre_pass"

#: The catalogue, in code order. ``broken_on`` is proven, not assumed: on every release CI runs,
#: tests/rewrite/inductor/test_inductor_guard.py compiles each class's programs without the guard and
#: fails when a class marked fixed there has a wrong result, or a class marked broken has none.
HAZARDS: tuple[HazardClass, ...] = (
    _row(
        Hazard.STALE_INPUT_READ, "H1", 198131, _POST, "plan_stale_reads", "2.13 2.14",
        "a write-back reads an input after that input's own write-back "
        "(a copy remove_noop_ops dropped); Inductor would copy the new value",
    ),
    _row(
        Hazard.OVERWRITTEN_RESULT, "H2", 198094, _POST, "plan_inductor_hazards", "2.13 2.14 2.15",
        "Inductor writes the op into a graph input whose write-back then overwrites the result, which is still used",
    ),
    _row(
        Hazard.ESCAPING_RESULT, "H3", 195451, _POST, "plan_inductor_hazards", "2.13 2.14 2.15",
        "Inductor writes the op into a graph input and returns that input as the result",
    ),
    _row(
        Hazard.WRITE_BACK_READS_ELSEWHERE, "H4", 198270, _POST, "plan_inductor_hazards", "2.13 2.14",
        "the input is written by the in-placed op and again by its write-back, "
        "which reads the op's result at other positions in the same loop",
    ),
    _row(
        Hazard.OVERLAPPING_SOURCE, "H5", 197829, _POST, "plan_inductor_hazards", "2.13 2.14",
        "the in-placed scatter copies a source that overlaps the region it writes",
    ),
    _row(
        Hazard.DTYPE_VIEW_READ_LATE, "H6", 198101, _POST, "plan_inductor_hazards", "2.13 2.14 2.15",
        "readers of an aliasing dtype view are not ordered before a later write of its base",
    ),
    _row(
        Hazard.OFFSET_CLONE_DROPPED, "H7", 197489, _JOINT, "plan_offset_clones", "2.13 2.14 2.15",
        "remove_noop_ops drops a clone that changes the storage offset an opaque op may observe",
    ),
    _row(
        Hazard.OUTPUTS_COLLAPSED, "H8", 191449, _JOINT, "plan_collapsed_outputs", "2.13 2.14 2.15",
        "Inductor returns one tensor object for outputs eager returns as distinct views "
        "of one storage (a later resize_ or other metadata change of one changes the other)",
    ),
    _row(
        Hazard.STORAGE_VIEW_OF_COPY, "H9", 197431, _POST, "plan_storage_views", "2.13 2.14 2.15",
        "Inductor materialises the view an as_strided is taken of into a buffer of its own "
        "and applies the storage-relative as_strided to that buffer (reads past its end)",
    ),
)

_ROWS = {row.hazard: row for row in HAZARDS}

#: The torch releases whose stock Inductor miscompiles each hazard class, by code (read from
#: :data:`HAZARDS`). On a release where a class is fixed the guard does not look for it.
STOCK_MISCOMPILES: Mapping[str, frozenset[str]] = MappingProxyType({row.code: row.broken_on for row in HAZARDS})

#: The releases :data:`STOCK_MISCOMPILES` describes; on any other the guard looks for every class.
KNOWN_RELEASES = frozenset({"2.13", "2.14", "2.15"})

ALL_HAZARDS = frozenset(STOCK_MISCOMPILES)


def hazards_on(release: str) -> frozenset[str]:
    """The hazard codes to guard on a torch release (``"2.15"``): all of them on a release not in the table.

    Examples
    --------
    >>> sorted(hazards_on("2.15"))
    ['H2', 'H3', 'H6', 'H7', 'H8', 'H9']
    >>> hazards_on("9.99") == ALL_HAZARDS
    True
    """
    if release not in KNOWN_RELEASES:
        return ALL_HAZARDS
    return frozenset(code for code, releases in STOCK_MISCOMPILES.items() if release in releases)


Action = Literal["reorder", "clone", "view", "rebase"]


@dataclass(frozen=True)
class Guarded:
    """One hazard the guard removed.

    ``node`` is where: the node whose inputs were protected (the reader, the
    scatter, the write-back, the output). ``action`` is ``"reorder"``
    (``created`` names the nodes moved, no copy), ``"clone"`` (``created``
    names the copies), ``"view"`` (H8: ``created`` names the distinct view
    returned instead) or ``"rebase"`` (H9: the op now views the storage
    root; ``created`` names any helper views). ``nbytes`` is what the copies
    allocate (0 without a copy, None when the size is symbolic).
    ``evidence`` names the nodes that make the hazard.
    """

    hazard: Hazard
    node: str
    action: Action
    created: tuple[str, ...]
    nbytes: int | None
    evidence: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for logs and reports."""
        cost = "symbolic size" if self.nbytes is None else f"{self.nbytes} B"
        what = {"reorder": "moved", "clone": "cloned", "view": "returned", "rebase": "rebased onto"}[self.action]
        ev = f" (evidence: {', '.join(self.evidence)})" if self.evidence else ""
        return f"{self.hazard.code} {self.hazard}: {self.action} at {self.node}, {what} {', '.join(self.created)}; {cost}{ev}"


@dataclass(frozen=True)
class GuardReport:
    """What one guard stage did: the hazards it removed, in order, and any failure."""

    guarded: tuple[Guarded, ...] = ()
    error: str | None = None
    #: the copy nodes the stage made (named in :attr:`clones`): what the pipeline must keep
    copies: tuple[torch.fx.Node, ...] = field(default=(), compare=False, repr=False)

    @property
    def clones(self) -> tuple[str, ...]:
        """Names of the copies the guard created (the clone elimination must keep them)."""
        return tuple(c for g in self.guarded if g.action == "clone" for c in g.created)

    @property
    def nbytes(self) -> int:
        """Bytes the guard's copies allocate (symbolic sizes not counted)."""
        return sum(g.nbytes or 0 for g in self.guarded)

    @property
    def hazards(self) -> tuple[str, ...]:
        """The hazard codes guarded, in order (repeats kept)."""
        return tuple(g.hazard.code for g in self.guarded)

    def merged(self, other: GuardReport) -> GuardReport:
        """This report followed by ``other``."""
        errors = [e for e in (self.error, other.error) if e]
        return GuardReport(self.guarded + other.guarded, "; ".join(errors) or None, copies=self.copies + other.copies)

    def summary(self) -> str:
        """One line: how many hazards, which, and the bytes copied."""
        if not self.guarded:
            text = "fx-aliasing guard: no hazard"
        else:
            codes = ", ".join(f"{g.hazard.code} {g.action} at {g.node}" for g in self.guarded)
            symbolic = any(g.nbytes is None for g in self.guarded)
            text = (
                f"fx-aliasing guard: {len(self.guarded)} hazard(s) guarded ({codes}); "
                f"{len(self.clones)} copy(ies), {self.nbytes} B{' + symbolic sizes' if symbolic else ''}"
            )
        if self.error:
            text += f"; error: {self.error}"
        return text

    def __str__(self) -> str:
        return "\n".join([self.summary(), *(f"  {g.describe()}" for g in self.guarded)])


@dataclass(frozen=True)
class InductorModel:
    """What the guard assumes about Inductor's passes after the post-grad hook.

    ``realizing_targets``: ops whose inputs Inductor always realizes
    (``torch._inductor.lowering.needs_realized_inputs``); ``fallback_targets``:
    ops lowered as extern (fallback) kernels (``torch._inductor.lowering.fallbacks``);
    both feed the scatter condition R3 of :func:`~rewrite.inductor.post_grad.predict_reinplacing`.
    ``kernel_targets``: ops lowered by Inductor's kernel templates
    (``torch._inductor.kernel``: matmuls, convolutions), which like the other
    two read their inputs in a kernel of their own (H4's path ends there).
    :func:`rewrite.inductor.inductor_model` fills them from the installed Inductor; the empty
    default treats every ATen op as fusible. ``hazards``: the hazard codes the
    installed Inductor still gets wrong (:func:`hazards_on` its release; every
    class by default); the guard looks for no other.
    """

    realizing_targets: frozenset[Any] = frozenset()
    fallback_targets: frozenset[Any] = frozenset()
    kernel_targets: frozenset[Any] = frozenset()
    hazards: frozenset[str] = ALL_HAZARDS

    def realizes_inputs(self, target: Any) -> bool:
        """True when ``target`` (an op overload or packet) always realizes its inputs."""
        return target in self.realizing_targets or getattr(target, "overloadpacket", None) in self.realizing_targets

    def is_fallback(self, target: Any) -> bool:
        """True when ``target`` is lowered as an extern (fallback) kernel."""
        return target in self.fallback_targets

    def is_separate_kernel(self, target: Any) -> bool:
        """True when ``target`` reads its inputs in a kernel of its own (extern, template or realizing)."""
        return self.is_fallback(target) or self.realizes_inputs(target) or target in self.kernel_targets


@dataclass(frozen=True)
class OutputRoles:
    """What the caller receives for each output of the graph (positions in the output node's flat list).

    ``returned``: user outputs the caller receives as they are (the same
    tensor object). ``regenerated``: user outputs the runtime replaces by a
    view it regenerates from an input or from another output (AOTAutograd's
    aliased outputs: a view of an input in eager is one in the compiled
    program too, whatever the graph returns there). Positions in neither (an
    input mutation's new value, an intermediate base, what the backward
    saves) are internal. :func:`rewrite.inductor.output_roles` reads them from
    AOTAutograd's metadata; every guard takes None, the default, as "every
    output is returned as it is".
    """

    returned: frozenset[int]
    regenerated: frozenset[int]


def protected_nodes(graph: torch.fx.Graph, report: GuardReport) -> Collection[torch.fx.Node]:
    """The guard's copies in ``report`` that are nodes of ``graph`` (the nodes themselves: no name is looked up)."""
    return [n for n in report.copies if n.graph is graph]
