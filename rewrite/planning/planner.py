"""The copy planner: pure decisions on clones and copies, one at a time, as named steps.

Copies are one model: a clone ``c = clone(o)`` (or an ``aten._to_copy`` that
changes nothing, or a torch-level clone) and a write-back ``copy_(d, s)`` both
copy memory, and the planner decides for each whether the program needs it.
The conditions are stated in full, once, in docs/DESIGN.md ("Clone
elimination"); the steps below cite them by number, and each decision names
the condition with a :class:`~rewrite.planning.decisions.Reason`. A clone is
decided by the table :data:`CLONE_STEPS`, run in order until a step decides:

=========================  ==============================================  ==================================
step                       conditions                                      keep reasons
=========================  ==============================================  ==================================
:func:`_known_facts`       known metadata of both values                   ``UNKNOWN_STORAGE``
:func:`_check_layout`      C1, C1 refined (``LAYOUT_UNOBSERVED``)          ``LAYOUT``
:func:`_gather`            known storages, no opaque access of ``c``       ``UNKNOWN_STORAGE``, ``OPAQUE_USE``
:func:`_whole_region`      C4, C2, C3, C5 by ``o``'s whole region          their four reasons (stand until a
                           (:func:`_check_c2_to_c5`); then C6              later step removes); ``OUTPUT_ALIASING``
:func:`_fold`              C8a-C8d (:func:`_decide_fold`); C6              the C8 reasons, else C2-C5's
:func:`_refined`           C2'-C5' on live values (:class:`_Scan`); C6     the standing keep
=========================  ==============================================  ==================================

A clone the steps keep may still go by C10 (:func:`_decide_erase`,
``DEAD_CLONE_ERASED``; kept with ``DEAD_CLONE_FEEDS_A_CHECK``); a ``copy_`` is
decided by C9 (:func:`_decide_copy`, ``SELF_COPY`` / ``NOT_A_SELF_COPY``);
:func:`decide` dispatches a candidate, and :func:`plan` records each decision
in the planning state and decides kept copies again to a fixed point (C7).
The refinements ("layout", "liveness", "exact", "kills") can be left out with
``refinements=`` (sound: less goes); C10 has its own switch, ``erase_dead``.
Everything a condition cannot prove is a keep with its reason. The planner
reads the analysis through the :class:`~rewrite.planning.state.PlanningState`
and never touches the graph; :func:`rewrite.editing.apply.apply_plan` performs
the plan (a removed ``copy_`` is replaced by its destination, like a removed
clone by its original; a C10 group is erased).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.fx

from aliasing import Access, AliasAnalysis, Region, Role, regions_may_overlap
from aliasing.core.analysis import UNKNOWN_STORAGE
from aliasing.core.facts import TensorFacts, known_equal, same_layout, same_region
from aliasing.core.ops import ARANGES, INDEX_DIM_OPS, INDEX_LIST_OPS
from aliasing.core.roles import CALLER_VISIBLE
from rewrite.planning.candidates import is_clone_candidate, is_copy_candidate
from rewrite.planning.dataflow import (
    is_elementwise,
    is_side_effectful,
    layout_observer,
    may_raise_on_values,
    op_of,
    suspect_layout,
    write_only_args,
    writes_all_of,
)
from rewrite.planning.decisions import Decision, Reason
from rewrite.planning.state import CONDITIONS, REFINEMENTS, Plan, PlanningState, StorageClass, check_refinements

__all__ = [
    "CLONE_STEPS",
    "CONDITIONS",
    "REFINEMENTS",
    "Plan",
    "PlanningState",
    "check_refinements",
    "decide",
    "is_clone_candidate",
    "is_copy_candidate",
    "plan",
    "plan_clone_elimination",
]


def _overlaps(x: Region | None, y: Region | None) -> bool:
    if x is None or y is None:
        return True
    return regions_may_overlap(x, y)


def _same_region(x: Region | None, y: Region | None) -> bool:
    """True when two known regions provably cover the same elements in the same order."""
    return x is not None and y is not None and same_region(x, y)


def _identical(x: Region | None, y: Region | None) -> bool:
    """True when two regions are provably the same tensor geometry, strides of size-one dimensions
    included: PyTorch's overlap check calls anything else a partial overlap and raises when one
    op reads one and writes the other."""
    return (
        _same_region(x, y)
        and x is not None
        and y is not None
        and all(known_equal(p, q) for p, q in zip(x.strides, y.strides))
    )


def _same_elements(x: TensorFacts | None, y: TensorFacts | None) -> bool:
    """True when two strided values provably hold elements of one kind (dtype, device, bits)."""
    return (
        x is not None
        and y is not None
        and x.dtype == y.dtype
        and x.bits == y.bits  # device, conj and neg bits
        and x.is_strided
        and y.is_strided
    )


def _layout_only_change(x: TensorFacts, y: TensorFacts) -> bool:
    """True when two values provably differ at most in strides and storage offset (C1 refined)."""
    if not _same_elements(x, y):
        return False
    px, py = x.plain_layout, y.plain_layout
    if px is not None and py is not None:
        return px[0] == py[0]  # plain sizes
    return len(x.sizes) == len(y.sizes) and all(known_equal(p, q) for p, q in zip(x.sizes, y.sizes))


def _keep(clone: torch.fx.Node, original: torch.fx.Node, reason: Reason, ev: Iterable[torch.fx.Node]) -> Decision:
    """The keep of ``clone`` (a copy of ``original``) for ``reason``, with the evidence nodes ``ev``."""
    return Decision(clone.name, "keep", reason, tuple(e.name for e in ev), original.name)


@dataclass
class _Clone:
    """What the decision on one clone reads from the state: its accesses after the clone (C7)."""

    clone: torch.fx.Node
    original: torch.fx.Node
    position: int
    ccls: StorageClass
    ocls: StorageClass
    c_reads: list[Access]
    c_writes: list[Access]
    relocated: bool = False

    def keep(self, reason: Reason, *ev: torch.fx.Node) -> Decision:
        """The keep of this clone for ``reason``, with the evidence nodes ``ev``."""
        return _keep(self.clone, self.original, reason, ev)

    @property
    def c_read_nodes(self) -> set[torch.fx.Node]:
        return {acc.node for acc in self.c_reads}

    @property
    def c_write_nodes(self) -> set[torch.fx.Node]:
        return {acc.node for acc in self.c_writes}


def _decide_clone(state: PlanningState, clone: torch.fx.Node) -> tuple[Decision, tuple[torch.fx.Node, ...]]:
    """C1-C8, then C10 for a clone that cannot be replaced: the decision and the nodes erased with it."""
    decision = _decide_replacement(state, clone)
    if decision.action == "keep" and state.erase_dead and decision.reason is not Reason.INTERNAL_ERROR:
        erased = _decide_erase(state, clone, decision.original)
        if erased is not None:
            return erased
    return decision, ()


@dataclass
class _Candidate:
    """One clone being decided: what the steps of :data:`CLONE_STEPS` have established so far."""

    clone: torch.fx.Node
    original: torch.fx.Node
    fc: TensorFacts | None = None
    fo: TensorFacts | None = None
    #: C1 refined: the clone changes a layout nothing observes
    relocated: bool = False
    info: _Clone | None = None
    ro: Region | None = None
    #: the keep that stands when no later step removes the clone
    standing: Decision | None = None
    #: C1 for an original at an input's unguarded storage offset: the keep that a removal yields
    #: to (decided last, so that a clone the other conditions keep gives their reason)
    deferred: Decision | None = None

    def keep(self, reason: Reason, *ev: torch.fx.Node) -> Decision:
        return _keep(self.clone, self.original, reason, ev)

    def remove(self, reason: Reason, evidence: Iterable[torch.fx.Node] = ()) -> Decision:
        return Decision(self.clone.name, "remove", reason, tuple(n.name for n in evidence), self.original.name)


#: A step of a clone's decision: the decision, or None to go on to the next step.
Step = Callable[[PlanningState, _Candidate], "Decision | None"]


def _known_facts(state: PlanningState, cand: _Candidate) -> Decision | None:
    """Both values have layout facts (metadata)."""
    cand.fc, cand.fo = state.analysis.facts_of(cand.clone), state.analysis.facts_of(cand.original)
    if cand.fc is None or cand.fo is None:
        return cand.keep(
            Reason.UNKNOWN_STORAGE, *([] if cand.fc else [cand.clone]), *([] if cand.fo else [cand.original])
        )
    return None


def _check_layout(state: PlanningState, cand: _Candidate) -> Decision | None:
    """C1 (and C1 refined): the keep decision, or None with ``relocated`` set when nothing observes a change."""
    if "C1" in state.unchecked:
        return None
    a, clone, original = state.analysis, cand.clone, cand.original
    assert cand.fc is not None and cand.fo is not None  # _known_facts
    suspect = suspect_layout(a, clone, original)
    if suspect is not None:  # recorded downstream of a fake kernel that lies about layouts
        return cand.keep(Reason.LAYOUT, original, *([suspect] if suspect is not original else []))
    unknown = a.unknown_offset(original)
    if same_layout(cand.fc, cand.fo):
        if unknown is not None:
            # An original in the storage of an input whose offset may differ from run to run (an
            # exported program's, a loaded one's) may lie at another offset than the clone: a
            # layout change, decided last (a removal yields to it).
            cand.deferred = _offset_keep(state, cand, unknown)
        return None
    if not _layout_only_change(cand.fc, cand.fo) or "layout" not in state.refine:
        return cand.keep(Reason.LAYOUT, original)
    observer = layout_observer(a, clone, cand.fo, state.users, state.dead, state.resolve)
    if observer is not None:
        return cand.keep(Reason.LAYOUT, original, *([observer] if observer is not clone else []))
    cand.relocated = True
    return None


def _offset_keep(state: PlanningState, cand: _Candidate, unknown: torch.fx.Node) -> Decision | None:
    """The keep of a clone whose original may lie at another storage offset than the recorded one
    (``unknown``'s), unless nothing observes the layout (C1 refined); None where nothing does."""
    evidence = [cand.original, *([unknown] if unknown is not cand.original else [])]
    if "layout" not in state.refine:
        return cand.keep(Reason.LAYOUT, *evidence)
    assert cand.fo is not None
    observer = layout_observer(state.analysis, cand.clone, cand.fo, state.users, state.dead, state.resolve)
    if observer is None:
        return None
    return cand.keep(Reason.LAYOUT, *evidence, *([observer] if observer is not cand.clone else []))


def _gather(state: PlanningState, cand: _Candidate) -> Decision | None:
    """The clone's and the original's storage classes and the clone's accesses after it (C7)."""
    a, clone, original = state.analysis, cand.clone, cand.original
    sc, so = a.single_storage(clone), a.single_storage(original)
    ro = state.region(original)
    if sc is None or so is None or ro is None:
        return cand.keep(Reason.UNKNOWN_STORAGE, clone if sc is None else original)
    pos = a.position(clone)
    ccls, ocls = state.cls(sc), state.cls(so)
    if ccls is ocls:
        return cand.keep(Reason.UNKNOWN_STORAGE, original)
    # Accesses of the clone's memory after the clone (its storage is fresh: all of it is c).
    c_reads: list[Access] = []
    c_writes: list[Access] = []
    for acc in state.after(ccls, pos):
        if a.is_unknown(acc.node):
            return cand.keep(Reason.OPAQUE_USE, acc.node)
        (c_writes if acc.kind == "write" else c_reads).append(acc)
    cand.info, cand.ro = _Clone(clone, original, pos, ccls, ocls, c_reads, c_writes, cand.relocated), ro
    return None


def _whole_region(state: PlanningState, cand: _Candidate) -> Decision | None:
    """C2-C5 judged by the original's whole region; when they hold, C6 decides."""
    assert cand.info is not None and cand.ro is not None  # _gather
    cand.standing = _check_c2_to_c5(state, cand.info, cand.ro)
    if cand.standing is not None:
        return None
    aliasing = _check_c6(state, cand.info) if "C6" not in state.unchecked else None
    return aliasing or cand.remove(Reason.LAYOUT_UNOBSERVED if cand.relocated else Reason.REMOVABLE)


def _fold(state: PlanningState, cand: _Candidate) -> Decision | None:
    """C8, judged by the regions the clone writes (not after a change of layout)."""
    if cand.relocated:
        return None
    assert cand.info is not None and cand.standing is not None  # _whole_region
    result = _decide_fold(state, cand.info, cand.standing)
    if result.action == "remove":
        return result
    cand.standing = result
    return None


def _refined(state: PlanningState, cand: _Candidate) -> Decision:
    """C2'-C5' on live values, then C6; when they fail, the standing keep."""
    assert cand.info is not None and cand.ro is not None and cand.standing is not None
    if not state.refine - {"layout"}:
        return cand.standing
    refined = _Scan(state, cand.info, cand.ro).run()
    if isinstance(refined, Decision):
        return cand.standing
    aliasing = _check_c6(state, cand.info) if "C6" not in state.unchecked else None
    return aliasing or cand.remove(Reason.LAYOUT_UNOBSERVED if cand.relocated else Reason.REMOVABLE_BY_DATAFLOW, refined)


#: The steps that decide whether a clone may be replaced by its original, in order: (name,
#: the conditions it judges, the step). Each establishes what the next needs or returns the
#: decision; the last always decides. C10 follows for a clone they keep (:func:`_decide_clone`).
CLONE_STEPS: tuple[tuple[str, str, Step], ...] = (
    ("facts", "known metadata", _known_facts),
    ("layout", "C1, C1 refined", _check_layout),
    ("accesses", "known storages, no opaque access of the clone", _gather),
    ("whole region", "C4, C2, C3, C5 by the original's whole region; C6", _whole_region),
    ("fold", "C8a-C8d; C6", _fold),
    ("refined", "C2'-C5' on live values; C6", _refined),
)


def _decide_replacement(state: PlanningState, clone: torch.fx.Node) -> Decision:
    """C1-C8: run :data:`CLONE_STEPS` until one decides."""
    cand = _Candidate(clone, state.resolve(clone.args[0]))  # type: ignore[arg-type]
    for _, _, step in CLONE_STEPS:
        decision = step(state, cand)
        if decision is not None:
            if decision.action == "remove" and cand.deferred is not None:
                return cand.deferred  # a removal yields to the deferred C1 keep (an unguarded offset)
            return decision
    raise AssertionError("the last step of CLONE_STEPS always decides")  # pragma: no cover


def _check_c2_to_c5(
    state: PlanningState, info: _Clone, ro: Region
) -> Decision | None:
    """The keep decision of the first of C4, C2, C3, C5 that fails (None when all hold)."""
    last_c_read = info.c_reads[-1] if info.c_reads else None
    first_c_write = info.c_writes[0] if info.c_writes else None
    # Accesses of memory overlapping the original after the clone.
    o_accs = [acc for acc in state.after(info.ocls, info.position) if state.touches(ro, acc)]
    # C4 same-node hazards, one reason for each direction.
    if o_accs and "C4" not in state.unchecked:
        c_read_nodes, c_write_nodes = info.c_read_nodes, info.c_write_nodes
        for acc in o_accs:
            if acc.kind == "read" and acc.node in c_write_nodes:
                return info.keep(Reason.SAME_NODE_WRITES_CLONE_READS_ORIGINAL, acc.node)
            if acc.kind == "write" and acc.node in c_read_nodes:
                return info.keep(Reason.SAME_NODE_WRITES_ORIGINAL_READS_CLONE, acc.node)
    # C2: a write of the original before a later read of the clone.
    if "C2" not in state.unchecked and last_c_read is not None:
        for acc in o_accs:
            if acc.position >= last_c_read.position:
                break
            if acc.kind == "write":
                return info.keep(Reason.ORIGINAL_WRITTEN, acc.node, last_c_read.node)
    # C3: a write of the clone before a later read of the original.
    if "C3" not in state.unchecked and first_c_write is not None:
        for acc in o_accs:
            if acc.kind == "read" and acc.position > first_c_write.position:
                return info.keep(Reason.CLONE_WRITTEN_ORIGINAL_READ, first_c_write.node, acc.node)
    # C5: the clone is written and the original is memory the caller observes.
    if "C5" not in state.unchecked and first_c_write is not None and info.ocls.roles & CALLER_VISIBLE:
        return info.keep(Reason.WRITES_CALLER_MEMORY, first_c_write.node, info.original)
    return None


def _check_c6(state: PlanningState, info: _Clone) -> Decision | None:
    """C6: the keep decision when the clone is returned and removing it would alias outputs."""
    out = state.analysis.output_node
    if out is None or out not in info.c_read_nodes:
        return None
    if info.ocls.roles & CALLER_VISIBLE:
        return info.keep(Reason.OUTPUT_ALIASING, info.original)
    for acc in info.ocls.accesses:
        if acc.node is out:
            return info.keep(Reason.OUTPUT_ALIASING, acc.value)
    return None


@dataclass
class _Step:
    """One node's accesses of the clone's and the original's memory, regions in the original's coordinates."""

    node: torch.fx.Node
    c_reads: list[tuple[Region | None, torch.fx.Node]] = field(default_factory=list)
    c_writes: list[tuple[Region | None, torch.fx.Node]] = field(default_factory=list)
    o_reads: list[tuple[Region | None, torch.fx.Node]] = field(default_factory=list)
    o_writes: list[tuple[Region | None, torch.fx.Node]] = field(default_factory=list)


def _steps(state: PlanningState, info: _Clone, ro: Region) -> list[_Step]:
    """The accesses of both sides after the clone, grouped by node, in graph order."""

    def c_region(acc: Access) -> Region | None:
        if acc.whole:
            return None
        value = state.resolve(acc.value)
        if info.relocated:  # only the clone itself has a place in the original's memory: its region
            return ro if value is info.clone else None
        return state.region(value)

    steps: dict[torch.fx.Node, _Step] = {}
    order: list[tuple[int, torch.fx.Node]] = []

    def step(acc: Access) -> _Step:
        s = steps.get(acc.node)
        if s is None:
            s = steps[acc.node] = _Step(acc.node)
            order.append((acc.position, acc.node))
        return s

    for acc in info.c_reads + info.c_writes:
        s = step(acc)
        (s.c_writes if acc.kind == "write" else s.c_reads).append((c_region(acc), acc.value))
    for acc in state.after(info.ocls, info.position):
        if not state.touches(ro, acc):
            continue
        s = step(acc)
        (s.o_writes if acc.kind == "write" else s.o_reads).append((state.access_region(acc), acc.value))
    order.sort(key=lambda p: p[0])
    return [steps[n] for _, n in order]


def _covers(written: Region | None, dirty: Region | None, whole: Region) -> bool:
    """Whether a full overwrite of ``written`` provably covers the ``dirty`` region."""
    if written is None:
        return False
    return _same_region(written, whole) or _same_region(written, dirty)


@dataclass
class _Scan:
    """C2'-C5': the refined conditions, in one pass over both sides' accesses (module docstring).

    ``c_dirty``/``o_dirty`` hold the regions (in the original's coordinates;
    None: anywhere) where the clone's (the original's) memory holds a value the
    other side's memory does not: after the removal the one memory holds the
    value last written through either side. :meth:`run` returns the keep
    decision of the first failure, or the nodes that made the difference (dead
    readers, kills, value-preserving copies, element-exact nodes) when every
    condition holds. Each access step judges, in order, the same-node effects
    (C4'), the reads that matter (C2', C3'), then records the step's copies and
    writes; the end judges caller-visible memory (C5').
    """

    state: PlanningState
    info: _Clone
    ro: Region
    c_dirty: list[Region | None] = field(default_factory=list)
    o_dirty: list[Region | None] = field(default_factory=list)
    first_c_writer: torch.fx.Node | None = None
    last_o_writer: torch.fx.Node | None = None
    helped: list[torch.fx.Node] = field(default_factory=list)

    def run(self) -> Decision | list[torch.fx.Node]:
        state, info = self.state, self.info
        self.croot = state.find(next(iter(info.ccls.storages)))
        self.oroot = state.find(next(iter(info.ocls.storages)))
        steps = _steps(state, info, self.ro)
        self.kills = "kills" in state.refine
        self.dead_writers = (
            _dead_writers(state, info, steps, (self.croot, self.oroot)) if "liveness" in state.refine else set()
        )
        for st in steps:
            failed = self.step(st)
            if failed is not None:
                return failed
        failed = self.caller_memory() if "C5" not in state.unchecked else None
        return failed if failed is not None else list(dict.fromkeys(self.helped))

    def side(self, v: torch.fx.Node) -> str:
        root = self.state.root_of(self.state.resolve(v))
        return "c" if root == self.croot else "o" if root == self.oroot else ""

    def step(self, st: _Step) -> Decision | None:
        """One node's accesses: the conditions, then what its copies and writes change."""
        n, state = st.node, self.state
        copy = _copy_between(state, self.info, n, self.ro, self.side) if self.kills else None
        if copy == "self":
            self.helped.append(n)
            return None  # a copy of a region onto itself reads and writes nothing that changes
        dest_only = write_only_args(n) if self.kills else frozenset()
        reads_c = [r for r, v in st.c_reads if v not in dest_only]
        reads_o = [r for r, v in st.o_reads if v not in dest_only]
        failed = self.same_node(st, reads_c, reads_o) if "C4" not in state.unchecked else None
        if failed is not None:
            return failed
        if n in self.dead_writers:  # its writes reach nothing live: after the removal it does not matter either
            self.helped.append(n)
            return None
        if n in state.dead:
            if reads_c or reads_o:
                self.helped.append(n)
        else:
            failed = self.stale_reads(n, reads_c, reads_o)
            if failed is not None:
                return failed
        if isinstance(copy, tuple):  # copy_ between identical regions of c and o: both hold the copied value
            self.copied(n, *copy)
            return None
        self.written(st)
        return None

    def same_node(
        self, st: _Step, reads_c: list[Region | None], reads_o: list[Region | None]
    ) -> Decision | None:
        """C4': an op reading one side where it writes the other must be element-exact there."""
        n = st.node
        exact = "exact" in self.state.refine and is_elementwise(n)
        for writes, reads, reason in (
            (st.c_writes, reads_o, Reason.SAME_NODE_WRITES_CLONE_READS_ORIGINAL),
            (st.o_writes, reads_c, Reason.SAME_NODE_WRITES_ORIGINAL_READS_CLONE),
        ):
            for w, _ in writes:
                for r in reads:
                    if _overlaps(w, r):
                        if not (exact and _identical(w, r)):
                            return self.info.keep(reason, n)
                        self.helped.append(n)
        return None

    def stale_reads(
        self, n: torch.fx.Node, reads_c: list[Region | None], reads_o: list[Region | None]
    ) -> Decision | None:
        """C2', C3': reads by nodes that matter see the value their side holds."""
        unchecked = self.state.unchecked
        if "C2" not in unchecked:
            for r in reads_c:
                if any(_overlaps(r, d) for d in self.o_dirty):
                    return self.info.keep(Reason.ORIGINAL_WRITTEN, *([self.last_o_writer] if self.last_o_writer else []), n)
        if "C3" not in unchecked:
            for r in reads_o:
                if any(_overlaps(r, d) for d in self.c_dirty):
                    writer = [self.first_c_writer] if self.first_c_writer else []
                    return self.info.keep(Reason.CLONE_WRITTEN_ORIGINAL_READ, *writer, n)
        return None

    def copied(self, n: torch.fx.Node, region: Region | None, dest_side: str) -> None:
        """A value-preserving copy between the two sides: the destination holds the other side's value."""
        if dest_side == "c":
            self.o_dirty = [d for d in self.o_dirty if not _covers(region, d, self.ro)]
        else:
            self.c_dirty = [d for d in self.c_dirty if not _covers(region, d, self.ro)]
        self.helped.append(n)

    def written(self, st: _Step) -> None:
        """The step's writes dirty their side; a kill of a region ends the other side's claim on it."""
        n = st.node
        for w, v in st.c_writes:
            self.first_c_writer = self.first_c_writer or n
            if self.kills and writes_all_of(n, v) and w is not None:
                kept = [d for d in self.o_dirty if not _covers(w, d, self.ro)]
                if len(kept) < len(self.o_dirty):
                    self.helped.append(n)
                self.o_dirty = kept
            self.c_dirty = _bounded([*self.c_dirty, w])
        for w, v in st.o_writes:
            self.last_o_writer = n
            if self.kills and writes_all_of(n, v) and w is not None:
                kept = [d for d in self.c_dirty if not _covers(w, d, self.ro)]
                if len(kept) < len(self.c_dirty):
                    self.helped.append(n)
                self.c_dirty = kept
            self.o_dirty = _bounded([*self.o_dirty, w])

    def caller_memory(self) -> Decision | None:
        """C5': caller-visible memory ends holding its own side's value."""
        info = self.info
        if self.c_dirty and info.ocls.roles & CALLER_VISIBLE:
            first = [self.first_c_writer] if self.first_c_writer else []
            return self.info.keep(Reason.WRITES_CALLER_MEMORY, *first, info.original)
        if self.o_dirty and info.ccls.roles & CALLER_VISIBLE:
            last = [self.last_o_writer] if self.last_o_writer else []
            return self.info.keep(Reason.WRITES_CALLER_MEMORY, *last, info.clone)
        return None


def _bounded(regions: list[Region | None]) -> list[Region | None]:
    """At most 64 regions (bounds the work of a scan): beyond that, anywhere."""
    return regions if len(regions) <= 64 else [None]


def _dead_writers(
    state: PlanningState, info: _Clone, steps: list[_Step], roots: tuple[str, str]
) -> set[torch.fx.Node]:
    """Writers of the pair whose writes no live node reads, once ``c`` and ``o`` are one memory.

    Backwards over the pair's accesses, after the removal: a node is a dead
    writer when it writes only the clone's and the original's memory, cannot
    raise on the values it reads, only dead nodes use its result, and no later
    read by a node that is not dead touches what it writes (caller-visible
    memory is read at the end, everywhere). Its reads do not matter.
    """
    a = state.analysis
    live_reads: list[Region | None] = [None] if (info.ocls.roles | info.ccls.roles) & CALLER_VISIBLE else []

    def changed(arg: torch.fx.Node) -> bool:  # its values may differ once ``c`` and ``o`` are one memory
        root = state.root_of(state.resolve(arg))
        return root is None or root in roots

    dead: set[torch.fx.Node] = set()
    for st in reversed(steps):
        n = st.node
        if n in state.dead:
            continue  # reads nothing that matters
        written = [w for w, _ in st.c_writes] + [w for w, _ in st.o_writes]
        if (
            written
            and n.op != "output"
            and _writes_only(state, n, roots)
            and not may_raise_on_values(a, n, changed)
            and all(u in state.dead or u in dead for u in state.users(n))
            and not any(_overlaps(w, r) for w in written for r in live_reads)
        ):
            dead.add(n)
            continue
        dest_only = write_only_args(n)
        live_reads.extend(r for r, v in st.c_reads + st.o_reads if v not in dest_only)
        if len(live_reads) > 64:  # bound the work: anything may be read later
            live_reads = [None]
    return dead


def _writes_only(state: PlanningState, node: torch.fx.Node, roots: tuple[str, str]) -> bool:
    """Whether ``node`` (not opaque) writes only memory of the storage classes ``roots``."""
    effect = state.analysis.effect_of(node)
    if effect is None or effect.unknown:
        return False
    return all(state.root_of(state.resolve(v)) in roots for v in effect.writes)


def _copy_between(
    state: PlanningState, info: _Clone, node: torch.fx.Node, ro: Region, side: Callable[[torch.fx.Node], str]
) -> str | tuple[Region, str] | None:
    """``"self"`` for a ``copy_`` of a region onto itself (in one storage class, or between the
    clone and the original's identical regions); ``(region, side of the destination)`` for a copy
    between identical regions of the clone and the original; None otherwise."""
    if not is_copy_candidate(node):
        return None
    a = state.analysis
    d, s = state.resolve(node.args[0]), state.resolve(node.args[1])  # type: ignore[arg-type]
    if not _same_elements(a.facts_of(d), a.facts_of(s)):
        return None
    sd, ss = side(d), side(s)
    if not sd or not ss:
        return None

    def region(v: torch.fx.Node, v_side: str) -> Region | None:
        if v_side == "c" and info.relocated:
            return ro if v is info.clone else None
        return state.region(v)

    rd, rs = region(d, sd), region(s, ss)
    if not _identical(rd, rs) or rd is None:
        return None
    if sd == ss:
        return "self"
    return rd, sd


def _find_copy_back(state: PlanningState, info: _Clone, o_all: list[Access]) -> torch.fx.Node | None:
    """C8a: the first write of the original's memory that copies from the clone's memory."""
    croot = state.find(next(iter(info.ccls.storages)))
    for acc in o_all:
        n = acc.node
        if acc.kind == "write" and is_copy_candidate(n) and acc.value is n.args[0]:
            src = n.args[1]
            if isinstance(src, torch.fx.Node) and state.root_of(src) == croot:
                return n
    return None


def _decide_fold(state: PlanningState, info: _Clone, blocked: Decision) -> Decision:
    """C8: fold ``c`` into ``o`` when the regions it writes allow, else keep (see the module docstring)."""
    rc = state.region(info.clone)
    if rc is None:
        return blocked
    o_all = list(state.after(info.ocls, info.position))
    copy_back = _find_copy_back(state, info, o_all)

    def failed(decision: Decision) -> Decision:
        # With a copy-back the fold's reason says why it cannot absorb the clone;
        # without one, the fold only refined C2-C5, whose reason stands.
        return decision if copy_back is not None else blocked

    # Known regions for every access of c (whole-storage accesses have none).
    for acc in info.c_reads + info.c_writes:
        if acc.whole:
            return failed(info.keep(Reason.OPAQUE_USE, acc.node))
    # C6 holds for a fold as for any removal.
    aliasing = _check_c6(state, info)
    if aliasing is not None:
        return failed(aliasing)
    if copy_back is None:
        # C8a without a copy-back the writes must land in memory the caller does not observe (C5).
        if info.c_writes and info.ocls.roles & CALLER_VISIBLE:
            return blocked
        written: list[Region | None] | Decision = [state.access_region(w) for w in info.c_writes]
        end: int | None = None
    else:
        written = _copy_back_region(state, info, copy_back, rc)
        end = state.analysis.position(copy_back)
    if isinstance(written, Decision):
        return written
    conflict = _fold_conflict(state, info, o_all, copy_back, written, end)
    if conflict is not None:
        return failed(conflict)
    if copy_back is None:
        return Decision(info.clone.name, "remove", Reason.REMOVABLE_BY_REGIONS, (), info.original.name)
    return Decision(info.clone.name, "remove", Reason.FOLDED_INTO_COPY_BACK, (copy_back.name,), info.original.name)


def _copy_back_region(
    state: PlanningState, info: _Clone, copy_back: torch.fx.Node, rc: Region
) -> list[Region | None] | Decision:
    """C8a and C8b for a copy-back ``E = copy_(d, s)``: the written region ``[d]``, or why ``E`` cannot absorb the clone."""
    a = state.analysis
    d, s = copy_back.args[0], copy_back.args[1]
    if not isinstance(d, torch.fx.Node) or not isinstance(s, torch.fx.Node):  # excluded by is_copy_candidate
        return info.keep(Reason.COPY_BACK_REGION_DIFFERS, copy_back)
    rd, rs = state.region(d), state.region(s)
    same_class = state.root_of(d) == state.find(next(iter(info.ocls.storages)))
    # C8a the copy-back copies an identical region with the same dtype.
    # (Strides of size-one dimensions too: after the fold ``E`` reads and writes one memory.)
    if not (same_class and _identical(rd, rs) and _same_elements(a.facts_of(d), a.facts_of(s))):
        return info.keep(Reason.COPY_BACK_REGION_DIFFERS, copy_back)
    end = a.position(copy_back)
    # C8b every write of c happens before E, inside s.
    for w in info.c_writes:
        if w.position >= end:
            return info.keep(Reason.CLONE_WRITTEN_AFTER_COPY_BACK, w.node, copy_back)
        if not (_same_region(state.access_region(w), rs) or _same_region(rs, rc)):
            return info.keep(Reason.CLONE_WRITTEN_OUTSIDE_COPY_BACK, w.node, copy_back)
    return [rd]


def _fold_conflict(
    state: PlanningState,
    info: _Clone,
    o_all: list[Access],
    copy_back: torch.fx.Node | None,
    written: list[Region | None],
    end: int | None,
) -> Decision | None:
    """C8c and C8d over the original's accesses after the clone: the first conflict's keep, or None."""
    first_write = info.c_writes[0].position if info.c_writes else None
    c_write_nodes = info.c_write_nodes
    for acc in o_all:
        r = state.access_region(acc)
        if acc.kind == "write":
            if acc.node is copy_back:
                continue  # after the fold E reads and writes the same elements (C9)
            # C8d no write of o's memory overlaps a read of c at or after it (C2 by regions).
            for read in info.c_reads:
                if read.position >= acc.position and _overlaps(r, state.access_region(read)):
                    if read.node is acc.node:  # C4 by regions
                        return info.keep(Reason.SAME_NODE_WRITES_ORIGINAL_READS_CLONE, acc.node)
                    return info.keep(Reason.ORIGINAL_WRITTEN, acc.node, read.node)
        elif (
            first_write is not None
            and acc.position >= first_write
            and (end is None or acc.position < end)
            and any(_overlaps(r, w) for w in written)
        ):
            # C8c no read of the written region from the first write of c on, up to E.
            if acc.node in c_write_nodes:  # C4 by regions (pytorch/pytorch#198031)
                return info.keep(Reason.SAME_NODE_WRITES_CLONE_READS_ORIGINAL, acc.node)
            return info.keep(Reason.CLONE_WRITTEN_ORIGINAL_READ, info.c_writes[0].node, acc.node)
    return None


def _erasable(analysis: AliasAnalysis, node: torch.fx.Node) -> bool:
    """C10: an ATen op (or a getitem) that is neither opaque nor random."""
    if node.op not in ("call_function", "call_method") or analysis.is_unknown(node):
        return False
    if node.op == "call_function" and node.target is operator.getitem:
        return True
    op = op_of(node)
    return op is not None and op.namespace == "aten" and torch.Tag.nondeterministic_seeded not in op.tags


def _is_check(analysis: AliasAnalysis, node: torch.fx.Node) -> bool:
    """C10: a runtime check the original executes, which erasing ``node`` would erase.

    Asserts and range constraints (:func:`rewrite.planning.dataflow.is_side_effectful`:
    what ``Node.is_impure()`` calls impure beyond its writes), and any op that
    may raise on the values it reads (:func:`rewrite.planning.dataflow.may_raise_on_values`
    without ``changed``: erased, it checks no value at all, wherever its
    indices come from).
    """
    if is_side_effectful(node):
        return True
    return may_raise_on_values(analysis, node) and not _indexes_in_range(analysis, node)


def _indexes_in_range(analysis: AliasAnalysis, node: torch.fx.Node) -> bool:
    """Whether ``node`` provably indexes in range in the original program, so it checks nothing.

    True for the indexing ops of :data:`aliasing.core.ops.INDEX_LIST_OPS` and
    ``INDEX_DIM_OPS`` whose every index is an ``aten.arange`` of
    integer constants that no node writes before ``node`` reads it, with all
    its values inside the indexed dimension (``-n <= i < n``, ``n`` a known
    size). Judged on the original program, which is what C10 compares with:
    the node is erased, so what later removals do to that memory no longer
    matters.
    """
    op = op_of(node)
    if op is None or op.namespace != "aten" or node.kwargs.get("indices") is not None:
        return False
    name = op._schema.name
    base = node.args[0] if node.args else None
    facts = analysis.facts_of(base) if isinstance(base, torch.fx.Node) else None
    if facts is None:
        return False
    pairs: list[tuple[object, int]] = []
    if name in INDEX_LIST_OPS and len(node.args) >= 2 and isinstance(node.args[1], (list, tuple)):
        if len(node.args[1]) > len(facts.sizes):
            return False
        pairs = [(index, dim) for dim, index in enumerate(node.args[1]) if index is not None]
    elif name in INDEX_DIM_OPS and len(node.args) >= 3 and type(node.args[1]) is int:
        rank = len(facts.sizes)
        dim = node.args[1] + rank if node.args[1] < 0 else node.args[1]
        if not 0 <= dim < rank:
            return False
        pairs = [(node.args[2], dim)]
    else:
        return False
    return bool(pairs) and all(
        isinstance(index, torch.fx.Node) and _arange_in_range(analysis, index, facts.sizes[dim], node)
        for index, dim in pairs
    )


def _arange_in_range(analysis: AliasAnalysis, index: torch.fx.Node, size: object, reader: torch.fx.Node) -> bool:
    """``index`` is ``arange`` of integer constants, unwritten until ``reader``, with values in ``[-size, size)``."""
    op = op_of(index)
    if op is None or op._schema.name not in ARANGES or type(size) is not int or index.op != "call_function":
        return False
    bounds = [b for b in index.args if type(b) is int]
    if not bounds or len(bounds) != len(index.args) or len(bounds) > 3:
        return False
    facts = analysis.facts_of(index)
    if facts is None or facts.dtype not in (torch.int64, torch.int32):
        return False
    padded = [0, *bounds, 1] if len(bounds) == 1 else [*bounds, 1]
    values = range(padded[0], padded[1], padded[2])
    if values and not (-size <= min(values) and max(values) < size):
        return False
    sid = analysis.single_storage(index)
    if sid is None:
        return False
    first, last = analysis.position(index), analysis.position(reader)
    return not any(
        acc.kind == "write" and acc.node is not index and first < acc.position < last
        for acc in analysis.storage_accesses(sid)
    )


def _decide_erase(
    state: PlanningState, clone: torch.fx.Node, original: str
) -> tuple[Decision, tuple[torch.fx.Node, ...]] | None:
    """C10: erase a clone nothing reads together with every node that uses it (None: it cannot go)."""
    a = state.analysis
    state.erase_depends.pop(clone, None)  # (what this try depends on is recorded below, if it gets that far)
    sc = a.single_storage(clone)
    if sc is None or a.facts_of(clone) is None:
        return None
    if clone in state.to_output:
        return None
    ccls = state.cls(sc)
    group: dict[torch.fx.Node, None] = {clone: None}
    checks: list[torch.fx.Node] = []
    stack = [clone]
    while stack:
        for user in stack.pop().users:
            # Erased with another group already, and so are all its users (``PlanningState.gone``).
            if user in group or user in state.gone:
                continue
            # A removed copy of a member (replaced by it) is a member too: it is erased, not replaced.
            if user in state.to_output or not _erasable(a, user):
                return None
            if _is_check(a, user):
                checks.append(user)  # erased, it would no longer check what the original checks
            group[user] = None
            stack.append(user)
    names = {n.name for n in group}
    # The group's memory: the clone's storage class and every storage a node of the group makes.
    internal = set(ccls.storages) | {
        sid
        for n in group
        for sid in a.storage_of(n)
        if sid != UNKNOWN_STORAGE and a.storage_role(sid) is Role.INTERMEDIATE and a.storage_info(sid).origin in names
    }
    # What fails from here on may pass once other groups are erased (a member that writes outside
    # memory, another node touching the group's memory): the clone is decided again then (C7).
    state.erase_depends[clone] = (frozenset(group), frozenset(state.find(sid) for sid in internal))
    writers: list[torch.fx.Node] = []
    for n in group:
        effect = a.effect_of(n)
        if n is clone or effect is None:
            continue
        for w in effect.writes:
            for sid in a.storage_of(w):
                if sid not in internal:
                    return None  # it writes memory that outlives the group
        if effect.writes:
            writers.append(n)
    pos = a.position(clone)
    for sid in internal:
        for acc in state.after(state.cls(sid), pos, state.gone):
            if acc.node not in group:
                return None  # another node touches the group's memory
    if checks:  # dead, but a rewrite keeps every runtime check the original executes
        evidence = tuple(n.name for n in sorted(checks, key=a.position))
        return Decision(clone.name, "keep", Reason.DEAD_CLONE_FEEDS_A_CHECK, evidence, original), ()
    erased = tuple(n for n in sorted(group, key=a.position) if n is not clone)
    erased_names = tuple(n.name for n in erased)
    return Decision(clone.name, "remove", Reason.DEAD_CLONE_ERASED, erased_names, original, erased_names), erased





def _decide_copy(state: PlanningState, copy: torch.fx.Node) -> Decision:
    """C9: remove ``copy_(d, s)`` when it provably writes a region with its own values."""
    a = state.analysis
    d, s = state.resolve(copy.args[0]), state.resolve(copy.args[1])  # type: ignore[arg-type]
    verdict = Decision(copy.name, "remove", Reason.SELF_COPY, (), d.name)
    if d is s:
        return verdict
    rd, rs = state.root_of(d), state.root_of(s)
    if (
        rd is not None
        and rd == rs
        and _same_region(state.region(d), state.region(s))
        and _same_elements(a.facts_of(d), a.facts_of(s))
    ):
        return verdict
    return Decision(copy.name, "keep", Reason.NOT_A_SELF_COPY, (s.name,), d.name)


def plan_clone_elimination(
    analysis: AliasAnalysis,
    candidates: Sequence[torch.fx.Node] | None = None,
    *,
    erase_dead: bool = True,
    refinements: Iterable[str] | None = None,
) -> Plan:
    """Decide, for each copy candidate in graph order, whether it may be removed.

    Parameters
    ----------
    analysis : AliasAnalysis
        Analysis of the graph as it is now.
    candidates : sequence of fx.Node, optional
        Clones (:func:`is_clone_candidate`, decided by C1-C8 and C10) and copies
        (:func:`is_copy_candidate`, decided by C9) to decide on; by default
        every clone candidate. A node that is neither is ignored.
    erase_dead : bool
        Allow C10: a clone nothing reads goes with its writers and the dead
        users of its values (the decision's ``erased``). False decides every
        clone by replacement alone.
    refinements : iterable of str, optional
        The refinements of C1-C5 to use (:data:`REFINEMENTS`: "layout",
        "liveness", "exact", "kills"); all by default. Leaving some out is
        sound and removes less: for measuring what each one brings and for
        narrowing down a decision.

    Returns
    -------
    Plan
        A sequence of decisions, one per candidate, in graph order (with the
        nodes they are about, for the applier); "remove" decisions are mutually
        compatible (C7) and are applied together by
        :func:`rewrite.editing.apply.apply_decisions` (a decision may rely on earlier
        ones: a self-copy on the fold that made it one).

    Raises
    ------
    aliasing.AliasingError
        If ``refinements`` names an unknown refinement.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from aliasing import analyze
    >>> gm = make_fx(lambda x: x.clone() * 2, tracing_mode="fake")(torch.randn(3))
    >>> [(d.node, d.action) for d in plan_clone_elimination(analyze(gm))]
    [('clone', 'remove')]

    A clone written and copied back into a graph input is folded (C8), and its
    copy-back, now a self-copy, goes too (C9):

    >>> def f(x):
    ...     c = x.clone()
    ...     c.mul_(2)
    ...     x.copy_(c)
    ...     return x.sum()
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    >>> copies = [n for n in gm.graph.nodes if is_clone_candidate(n) or is_copy_candidate(n)]
    >>> [(d.node, d.action, str(d.reason)) for d in plan_clone_elimination(analyze(gm), copies)]
    [('clone', 'remove', 'clone-folded-into-its-copy-back'), ('copy_', 'remove', 'copy-onto-itself')]

    A clone only written goes with its writer (C10):

    >>> def g(x):
    ...     y = x * 2
    ...     c = y.clone()
    ...     c.add_(1)
    ...     return y
    >>> gm = make_fx(g, tracing_mode="fake")(torch.randn(3))
    >>> [(d.node, str(d.reason), d.erased) for d in plan_clone_elimination(analyze(gm))]
    [('clone', 'dead-clone-erased-with-its-writers', ('add_',))]
    """
    state = PlanningState(analysis, erase_dead=erase_dead, refine=check_refinements(refinements))
    return plan(state, candidates)


def plan(state: PlanningState, candidates: Iterable[torch.fx.Node] | None = None) -> Plan:
    """Decide every candidate against ``state``, recording each decision in it, to a fixed point (C7).

    The named steps: order the candidates (:meth:`PlanningState.candidates`),
    decide each (:func:`decide`) and record it (:meth:`PlanningState.record`),
    then decide again the kept candidates whose storage classes a removal
    changed (:func:`_kept_depending_on`), until a pass removes nothing; the
    plan is then checked (:meth:`PlanningState.plan`).
    """
    order = state.candidates(candidates)
    pending = order
    while pending:
        touched: list[str] = []
        gone = len(state.gone)
        for node in pending:
            decision, erased = decide(state, node)
            touched.extend(state.record(node, decision, erased))
        pending = _kept_depending_on(state, order, touched, gone < len(state.gone))
    return state.plan(order)


def decide(state: PlanningState, node: torch.fx.Node) -> tuple[Decision, tuple[torch.fx.Node, ...]]:
    """One candidate's decision against the state as it is (and the nodes a C10 removal erases)."""
    if node in state.erased:
        return state.erased_decision(node), ()
    if is_clone_candidate(node):
        return _decide_clone(state, node)
    return _decide_copy(state, node), ()


def _kept_depending_on(
    state: PlanningState, order: Sequence[torch.fx.Node], touched: list[str], erased: bool = False
) -> list[torch.fx.Node]:
    """C7: the kept candidates whose storage classes the last pass changed (decided in any pass:
    a copy kept earlier may depend on what this pass changed); a removal only changes the
    accesses of the classes it merges into or leaves. Also the kept clones whose own C10 group,
    as last tried, had a member since erased (``erased``: the last pass erased a dead clone's
    group) or memory whose class the last pass changed."""
    dirty = {state.find(s) for s in touched}
    if not dirty and not erased:
        return []
    depends = state.erase_depends
    return [
        c
        for c in order
        if c not in state.erased
        and state.decided[c].action == "keep"
        and (
            state.classes_of(c) & dirty
            or (c in depends and _erase_changed(state, depends[c], dirty))
        )
    ]


def _erase_changed(state: PlanningState, depends: tuple[frozenset[torch.fx.Node], frozenset[str]], dirty: set[str]) -> bool:
    """Whether a C10 group, as last tried (its members, its memory's classes), lost a member or
    saw its memory's accesses change since."""
    members, roots = depends
    return bool(members & state.gone) or any(state.find(r) in dirty for r in roots)
