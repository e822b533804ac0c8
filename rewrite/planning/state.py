"""The planning state: one analysis as updated by the decisions recorded so far (condition C7).

A pipeline run builds one :class:`PlanningState` from one analysis. The
planner (:mod:`rewrite.planning.planner`) queries it for every candidate and
:meth:`PlanningState.record`\\ s each decision: a removed clone's storage
joins its original's storage class, a removed copy stops reading and
writing, a dead clone's group (C10) leaves the graph, and the nodes that die
with it stop counting as readers. The hazard guard's protected copies enter
it as nodes nobody decides (:attr:`PlanningState.protected`). Nodes travel
inside; names appear only in the :class:`~rewrite.planning.decisions.Decision`\\ s
the reports show. :meth:`PlanningState.plan` hands the applier
(:func:`rewrite.editing.apply.apply_plan`) the decisions with their nodes.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

import torch.fx

from aliasing import Access, AliasAnalysis, Region, Role, regions_may_overlap
from aliasing.errors import AliasingError
from rewrite.errors import RewriteError
from rewrite.planning.candidates import is_clone_candidate, is_copy_candidate
from rewrite.planning.dataflow import Liveness
from rewrite.planning.decisions import Decision, Reason

__all__ = ["CONDITIONS", "REFINEMENTS", "Plan", "PlanningState", "StorageClass", "check_refinements"]

#: The conditions a test tool may leave unchecked (:mod:`tools.broken`; unsound).
CONDITIONS = frozenset({"C1", "C2", "C3", "C4", "C5", "C6"})

#: The refinements of C1-C5 that ``refinements`` may name (turning any off is sound: less goes).
#: "layout": C1 refined; "liveness": dead readers and dead writers; "exact": element-exact
#: same-node effects (C4'); "kills": kills, value-preserving and self copies, write-only
#: destinations. C10 has its own switch, ``erase_dead``.
REFINEMENTS = frozenset({"layout", "liveness", "exact", "kills"})


def check_refinements(refinements: Iterable[str] | None) -> frozenset[str]:
    """The refinements named (all of :data:`REFINEMENTS` for None).

    Raises
    ------
    aliasing.AliasingError
        If one is unknown (or ``refinements`` is a single string).

    Example
    -------
    >>> sorted(check_refinements(["kills", "layout"]))
    ['kills', 'layout']
    """
    if isinstance(refinements, str):
        raise AliasingError(f"refinements must be a collection of names, not the string {refinements!r}")
    refine = REFINEMENTS if refinements is None else frozenset(refinements)
    if refine - REFINEMENTS:
        raise AliasingError(f"unknown refinements: {sorted(refine - REFINEMENTS)}; known: {sorted(REFINEMENTS)}")
    return refine


@dataclass
class StorageClass:
    """A set of storages merged by removals: their accesses in graph order."""

    storages: set[str]
    accesses: list[Access]
    positions: list[int]
    roles: set[Role]


@dataclass(frozen=True)
class Plan(Sequence[Decision]):
    """The decisions of one planning run, in graph order, with the nodes they are about.

    A sequence of :class:`~rewrite.planning.decisions.Decision` (what reports
    show); :attr:`nodes` are the candidates themselves and :attr:`erased` the
    nodes each C10 removal erases with its clone, so that the applier never
    looks a name up.
    """

    decisions: tuple[Decision, ...] = ()
    nodes: tuple[torch.fx.Node, ...] = ()
    erased: tuple[tuple[torch.fx.Node, ...], ...] = ()

    @overload
    def __getitem__(self, i: int) -> Decision: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Decision]: ...
    def __getitem__(self, i: int | slice) -> Decision | Sequence[Decision]:
        return self.decisions[i]

    def __len__(self) -> int:
        return len(self.decisions)

    def __iter__(self) -> Iterator[Decision]:
        return iter(self.decisions)

    def removals(self) -> list[tuple[torch.fx.Node, Decision, tuple[torch.fx.Node, ...]]]:
        """``(node, decision, erased nodes)`` of every removal, in graph order."""
        return [(n, d, e) for n, d, e in zip(self.nodes, self.decisions, self.erased) if d.action == "remove"]


def _reaching_output(analysis: AliasAnalysis) -> frozenset[torch.fx.Node]:
    """The output node and every node whose result it uses, directly or through other nodes."""
    reach: set[torch.fx.Node] = set()
    add, misses = reach.add, reach.isdisjoint  # (one C call per node for its users)
    for n in reversed(analysis.nodes):  # users before the nodes they use (a valid graph's order)
        if n.op == "output" or not misses(n.users):
            add(n)
    return frozenset(reach)


@dataclass(eq=False)
class PlanningState:
    """The analysis as updated by the decisions recorded so far (C7).

    Parameters
    ----------
    analysis : AliasAnalysis
        Analysis of the graph as it is when planning starts (never rebuilt while planning).
    erase_dead : bool
        Whether condition C10 may erase dead clones.
    refine : frozenset of str
        The refinements in use (:data:`REFINEMENTS`).
    protected : collection of fx.Node
        Copies nobody decides: the hazard guard's protective clones (:mod:`rewrite.inductor`).
    unchecked : frozenset of str
        Conditions of :data:`CONDITIONS` not checked. Unsound: only the test tools that
        prove the fuzzer catches a broken pass set it (:mod:`tools.broken`).

    Example
    -------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from aliasing import analyze
    >>> gm = make_fx(lambda x: x.clone() * 2, tracing_mode="fake")(torch.randn(3))
    >>> state = PlanningState(analyze(gm))
    >>> clone = next(n for n in gm.graph.nodes if n.name == "clone")
    >>> state.record(clone, Decision("clone", "remove", Reason.REMOVABLE, (), "x_1")) != []
    True
    >>> state.resolve(clone).name, [d.node for d in state.plan([clone])]
    ('x_1', ['clone'])
    """

    analysis: AliasAnalysis
    erase_dead: bool = True
    refine: frozenset[str] = REFINEMENTS
    protected: Collection[torch.fx.Node] = frozenset()
    unchecked: frozenset[str] = frozenset()
    #: dead readers (kept up to date as nodes leave the graph)
    dead: set[torch.fx.Node] = field(default_factory=set)
    liveness: Liveness | None = None
    parent: dict[str, str] = field(default_factory=dict)
    classes: dict[str, StorageClass] = field(default_factory=dict)
    removed: set[torch.fx.Node] = field(default_factory=set)
    replaced: dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)
    #: storages merged with a change of layout (C1 refined): their regions describe nothing
    relocated: set[str] = field(default_factory=set)
    #: nodes erased with a dead clone (C10) -> that clone
    erased: dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)
    #: each C10 clone -> the nodes erased with it, in graph order
    groups: dict[torch.fx.Node, tuple[torch.fx.Node, ...]] = field(default_factory=dict)
    #: dead clones erased (C10) and the nodes erased with them: no longer in the graph. Every
    #: user of a node here is here too (a group takes every user of its members, or is refused),
    #: so a later group may skip them; :meth:`check_erasures` checks it on every plan.
    gone: set[torch.fx.Node] = field(default_factory=set)
    #: nodes whose results reach the output node through uses (C10 cannot erase them)
    to_output: frozenset[torch.fx.Node] = frozenset()
    #: the decision recorded for each candidate
    decided: dict[torch.fx.Node, Decision] = field(default_factory=dict)
    #: a clone whose C10 group was walked but not erased -> (the group as walked, its memory's
    #: class roots): the planner decides it again once another erasure changes either (C7)
    erase_depends: dict[torch.fx.Node, tuple[frozenset[torch.fx.Node], frozenset[str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = self.unchecked - CONDITIONS
        if unknown:
            raise AliasingError(f"unknown conditions to skip: {sorted(unknown)}; known: {sorted(CONDITIONS)}")
        if "liveness" in self.refine and self.liveness is None:
            self.liveness = Liveness(self.analysis)
            self.dead = self.liveness.readers()
        if self.erase_dead and not self.to_output:
            self.to_output = _reaching_output(self.analysis)

    # -- queries -------------------------------------------------------------------------------

    def find(self, sid: str) -> str:
        """The root of storage ``sid``'s class (path compression included)."""
        root = sid
        while root in self.parent:
            root = self.parent[root]
        while sid != root:
            nxt = self.parent[sid]
            self.parent[sid] = root
            sid = nxt
        return root

    def cls(self, sid: str) -> StorageClass:
        """The storage class of ``sid``, its accesses as the removals so far leave them."""
        root = self.find(sid)
        c = self.classes.get(root)
        if c is None:
            accs = list(self.analysis.storage_accesses(root))
            c = StorageClass({root}, accs, [a.position for a in accs], {self.analysis.storage_role(root)})
            self.classes[root] = c
        return c

    def resolve(self, node: torch.fx.Node) -> torch.fx.Node:
        """What stands for ``node`` once the removals so far are applied."""
        while node in self.replaced:
            node = self.replaced[node]
        return node

    def root_of(self, node: torch.fx.Node) -> str | None:
        """The storage class of ``node``'s single known storage (None when it has none)."""
        sid = self.analysis.single_storage(node)
        return None if sid is None else self.find(sid)

    def region(self, node: torch.fx.Node) -> Region | None:
        """``node``'s region in its storage class (None: anywhere), after the removals so far (C7).

        A value of a storage merged with a change of layout has none, except the
        removed clone itself, which stands for its replacement.
        """
        sid = self.analysis.single_storage(node)
        if sid is not None and sid in self.relocated:
            if node in self.replaced:
                return self.region(self.replaced[node])
            return None
        return self.analysis.region_of(node)

    def access_region(self, acc: Access) -> Region | None:
        """The region an access touches (None: anywhere in its storage)."""
        return None if acc.whole else self.region(acc.value)

    def touches(self, region: Region | None, acc: Access) -> bool:
        """Whether ``acc`` may touch ``region`` (unknown regions touch everything)."""
        other = self.access_region(acc)
        return region is None or other is None or regions_may_overlap(region, other)

    def after(
        self, cls: StorageClass, position: int, left_out: Collection[torch.fx.Node] | None = None
    ) -> Iterator[Access]:
        """The accesses of ``cls`` after ``position``, but those of ``left_out`` (by default the removed nodes)."""
        skipped = self.removed if left_out is None else left_out
        i = bisect.bisect_right(cls.positions, position)
        for acc in cls.accesses[i:]:
            if acc.node not in skipped:
                yield acc

    def users(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """The nodes that use ``node`` once the removals so far are applied (C7)."""
        out: list[torch.fx.Node] = []
        for user in node.users:
            if user in self.gone:
                continue
            if user in self.removed:
                if self.resolve(user) is self.resolve(node):  # a removed clone or copy of it: its users take it
                    out.extend(self.users(user))
                continue
            out.append(user)
        return out

    def classes_of(self, node: torch.fx.Node) -> set[str]:
        """Roots of the storage classes a decision depends on (a clone's and its original's, a copy's two sides)."""
        roots: set[str] = set()
        for arg in (node, *node.args[:2]) if is_copy_candidate(node) else (node, node.args[0]):
            if isinstance(arg, torch.fx.Node):
                root = self.root_of(self.resolve(arg))
                if root is not None:
                    roots.add(root)
        return roots

    def candidates(self, nodes: Iterable[torch.fx.Node] | None) -> list[torch.fx.Node]:
        """The copy candidates among ``nodes`` (every clone candidate for None), in graph order, protected ones left out."""
        pool = [n for n in self.analysis.nodes if is_clone_candidate(n)] if nodes is None else nodes
        chosen = (n for n in pool if (is_clone_candidate(n) or is_copy_candidate(n)) and n not in self.protected)
        return sorted(chosen, key=self.analysis.position)

    # -- updates -------------------------------------------------------------------------------

    def merge(self, small: str, big: str) -> None:
        """Join two storage classes (a clone removed: its storage is now its original's)."""
        a, b = self.find(small), self.find(big)
        if a == b:
            return
        ca, cb = self.cls(a), self.cls(b)
        for acc in ca.accesses:
            i = bisect.bisect_right(cb.positions, acc.position)
            cb.positions.insert(i, acc.position)
            cb.accesses.insert(i, acc)
        cb.storages |= ca.storages
        cb.roles |= ca.roles
        self.parent[a] = b
        del self.classes[a]

    def record(
        self, node: torch.fx.Node, decision: Decision, erased: Sequence[torch.fx.Node] = ()
    ) -> list[str]:
        """Record ``decision`` on ``node`` (and the nodes a C10 removal erases with it).

        Returns the roots of the storage classes the decision changed: kept
        candidates that depend on them must be decided again (C7).
        """
        self.decided[node] = decision
        if decision.action != "remove" or decision.reason in (Reason.ERASED_WITH_DEAD_CLONE, Reason.COPY_ERASED_WITH_DEAD_CLONE):
            return []
        self.removed.add(node)
        if decision.reason is Reason.DEAD_CLONE_ERASED:
            return self._record_erasure(node, tuple(erased))
        replacement = self.resolve(node.args[0])  # type: ignore[arg-type]
        self.replaced[node] = replacement
        touched: list[str] = []
        if is_clone_candidate(node):
            sc, so = self.analysis.single_storage(node), self.analysis.single_storage(replacement)
            if sc is not None and so is not None:
                if decision.reason is Reason.LAYOUT_UNOBSERVED:
                    self.relocated.add(sc)
                self.merge(sc, so)
                touched.append(so)
        else:
            touched.extend(self.classes_of(node))
        touched.extend(self._classes_read(self._died([node])))
        return touched

    def _record_erasure(self, clone: torch.fx.Node, group: tuple[torch.fx.Node, ...]) -> list[str]:
        self.groups[clone] = group
        self.gone.add(clone)
        self.gone.update(group)
        for n in group:
            self.erased[n] = clone
            self.removed.add(n)
            self.replaced.pop(n, None)  # a removed copy of a member is erased with it
        return self._classes_read([clone, *group]) + self._classes_read(self._died([clone, *group]))

    def _died(self, gone: list[torch.fx.Node]) -> list[torch.fx.Node]:
        """The nodes that die once ``gone`` left the graph (C7): their reads stop counting."""
        if self.liveness is None:
            return []
        died = self.liveness.forget(gone, self.users)
        self.dead |= {n for n in died if n not in self.liveness.relevant}
        return died

    def _classes_read(self, nodes: Iterable[torch.fx.Node]) -> list[str]:
        """Roots of the storage classes ``nodes`` read (a C10 group erased: those classes lose accesses)."""
        roots: list[str] = []
        for n in nodes:
            effect = self.analysis.effect_of(n)
            for v in effect.reads if effect is not None else ():
                root = self.root_of(self.resolve(v))
                if root is not None:
                    roots.append(root)
        return roots

    # -- the plan ------------------------------------------------------------------------------

    def erased_decision(self, node: torch.fx.Node) -> Decision:
        """The decision for a candidate erased with a dead clone's group (C10)."""
        reason = Reason.COPY_ERASED_WITH_DEAD_CLONE if is_copy_candidate(node) else Reason.ERASED_WITH_DEAD_CLONE
        arg = node.args[0]
        original = arg.name if isinstance(arg, torch.fx.Node) else ""
        return Decision(node.name, "remove", reason, (self.erased[node].name,), original)

    def check_erasures(self) -> None:
        """The plan's C10 invariant: every user of an erased node is erased too (none stays, none is
        replaced). Raises :class:`~rewrite.errors.RewriteError` naming the nodes (an internal error:
        the pipeline then keeps every clone)."""
        for node in self.gone:
            stays = [u for u in node.users if u not in self.gone]
            if stays:
                how = ", ".join(f"{u.name} ({'replaced' if u in self.replaced else 'which stays'})" for u in stays)
                raise RewriteError(f"internal error: the plan erases {node.name} but {how} still uses it")

    def plan(self, order: Sequence[torch.fx.Node]) -> Plan:
        """The recorded decisions on ``order`` (graph order), C10 members marked erased, checked."""
        for node in self.erased:
            if node in self.decided:
                self.decided[node] = self.erased_decision(node)
        self.check_erasures()
        return Plan(
            tuple(self.decided[n] for n in order),
            tuple(order),
            tuple(self.groups.get(n, ()) for n in order),
        )
