"""The clone-elimination planner: pure decisions, one clone at a time.

``c = clone(o)`` may be replaced by ``o`` when all of these hold (DESIGN.md):

C1 layout: ``c`` and ``o`` agree on dtype, device, sizes, strides, storage
   offset and conj/neg bits (a ``memory_format`` that changes strides fails).
C2 no write to memory overlapping ``o`` between the clone and a later read of
   ``c`` (or of an alias of ``c``).
C3 no write to ``c`` (through any alias: views, chained in-place results,
   ``out=``) followed by a read of memory overlapping ``o``.
C4 no node both writes memory of ``c`` and reads memory of ``o``, nor writes
   memory of ``o`` and reads memory of ``c`` (same-node hazard).
C5 if ``o`` lives in caller-visible memory (a non-donated input, a parameter,
   a buffer or a constant), nothing writes ``c``.
C6 if ``c`` (or an alias) is returned, ``o`` must not live in caller-visible
   memory, nor share memory with another returned value.
C7 decisions are taken one clone at a time, in graph order, against the
   analysis *as updated by the removals already decided*: after ``c`` goes,
   its storage is merged into ``o``'s, so a second clone of ``o`` sees the
   first one's writes as writes of ``o``. Clones kept in one pass are decided
   again in the next while removals happen (a removed clone may have been the
   read that kept an earlier one), so the plan is a fixed point.

Everything a condition cannot prove is a keep with its :class:`Reason`:
missing metadata or an ambiguous storage (``UNKNOWN_STORAGE``), an opaque op
touching the clone's memory (``OPAQUE_USE``). The planner reads the analysis
and never touches the graph; :mod:`rewrite.apply` performs the decisions.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.fx

from aliasing import Access, AliasAnalysis, Region, Role, regions_may_overlap
from aliasing.analysis import UNKNOWN_STORAGE
from aliasing.facts import same_layout
from aliasing.roles import CALLER_VISIBLE
from rewrite.decisions import Decision, Reason

__all__ = ["is_clone_candidate", "plan_clone_elimination", "CONDITIONS"]

#: Conditions that ``skip`` may name (for testing test tools only: skipping any is unsound).
CONDITIONS = frozenset({"C1", "C2", "C3", "C4", "C5", "C6"})

_TO_COPY_KWARGS = frozenset({"dtype", "layout", "device", "memory_format", "non_blocking"})


def is_clone_candidate(node: torch.fx.Node) -> bool:
    """True for ``aten.clone`` and for ``aten._to_copy`` calls that may change nothing.

    (Whether a ``_to_copy`` really changes nothing is condition C1's job.)
    """
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    if node.target is torch.ops.aten.clone.default:
        return len(node.args) == 1
    if node.target is torch.ops.aten._to_copy.default:
        return len(node.args) == 1 and set(node.kwargs) <= _TO_COPY_KWARGS
    return False


@dataclass
class _Class:
    """A set of storages merged by removals: their accesses in graph order."""

    storages: set[str]
    accesses: list[Access]
    positions: list[int]
    roles: set[Role]


@dataclass
class _State:
    """The analysis as updated by the removals decided so far (C7)."""

    analysis: AliasAnalysis
    parent: dict[str, str] = field(default_factory=dict)
    classes: dict[str, _Class] = field(default_factory=dict)
    removed: set[torch.fx.Node] = field(default_factory=set)
    replaced: dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)

    def find(self, sid: str) -> str:
        root = sid
        while root in self.parent:
            root = self.parent[root]
        while sid != root:
            nxt = self.parent[sid]
            self.parent[sid] = root
            sid = nxt
        return root

    def cls(self, sid: str) -> _Class:
        root = self.find(sid)
        c = self.classes.get(root)
        if c is None:
            accs = list(self.analysis.storage_accesses(root))
            c = _Class({root}, accs, [a.position for a in accs], {self.analysis.storage_role(root)})
            self.classes[root] = c
        return c

    def merge(self, small: str, big: str) -> None:
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

    def resolve(self, node: torch.fx.Node) -> torch.fx.Node:
        while node in self.replaced:
            node = self.replaced[node]
        return node


def _single_storage(analysis: AliasAnalysis, node: torch.fx.Node) -> Optional[str]:
    pts = analysis.storage_of(node)
    if len(pts) != 1 or UNKNOWN_STORAGE in pts:
        return None
    return next(iter(pts))


def _touches(region: Optional[Region], analysis: AliasAnalysis, acc: Access) -> bool:
    if region is None or acc.whole:
        return True
    other = analysis.region_of(acc.value)
    return other is None or regions_may_overlap(region, other)


def _after(cls: _Class, position: int, removed: set[torch.fx.Node]) -> Iterable[Access]:
    i = bisect.bisect_right(cls.positions, position)
    for acc in cls.accesses[i:]:
        if acc.node not in removed:
            yield acc


def _decide(state: _State, clone: torch.fx.Node, skip: frozenset[str]) -> Decision:
    a = state.analysis
    name = clone.name
    original = state.resolve(clone.args[0])  # type: ignore[arg-type]
    keep = lambda reason, *ev: Decision(name, "keep", reason, tuple(e.name for e in ev), original.name)  # noqa: E731

    fc, fo = a.facts_of(clone), a.facts_of(original)
    if fc is None or fo is None:
        return keep(Reason.UNKNOWN_STORAGE, *([] if fc else [clone]), *([] if fo else [original]))
    # C1 layout.
    if "C1" not in skip and not same_layout(fc, fo):
        return keep(Reason.LAYOUT, original)
    sc, so = _single_storage(a, clone), _single_storage(a, original)
    ro = a.region_of(original)
    if sc is None or so is None or ro is None:
        return keep(Reason.UNKNOWN_STORAGE, clone if sc is None else original)
    pos = a.position(clone)
    ccls, ocls = state.cls(sc), state.cls(so)
    if ccls is ocls:
        return keep(Reason.UNKNOWN_STORAGE, original)

    # Accesses of the clone's memory after the clone (its storage is fresh: all of it is c).
    c_reads: list[Access] = []
    c_writes: list[Access] = []
    for acc in _after(ccls, pos, state.removed):
        if a.is_unknown(acc.node):
            return keep(Reason.OPAQUE_USE, acc.node)
        (c_writes if acc.kind == "write" else c_reads).append(acc)
    last_c_read = c_reads[-1] if c_reads else None
    first_c_write = c_writes[0] if c_writes else None
    c_read_nodes = {acc.node for acc in c_reads}
    c_write_nodes = {acc.node for acc in c_writes}

    # Accesses of memory overlapping the original after the clone.
    o_accs = [acc for acc in _after(ocls, pos, state.removed) if _touches(ro, a, acc)]

    # C4 same-node hazards.
    if "C4" not in skip:
        for acc in o_accs:
            if acc.kind == "read" and acc.node in c_write_nodes:
                return keep(Reason.SAME_NODE_HAZARD, acc.node)
            if acc.kind == "write" and acc.node in c_read_nodes:
                return keep(Reason.SAME_NODE_HAZARD, acc.node)
    # C2: a write of the original before a later read of the clone.
    if "C2" not in skip and last_c_read is not None:
        for acc in o_accs:
            if acc.position >= last_c_read.position:
                break
            if acc.kind == "write":
                return keep(Reason.ORIGINAL_WRITTEN, acc.node, last_c_read.node)
    # C3: a write of the clone before a later read of the original.
    if "C3" not in skip and first_c_write is not None:
        for acc in o_accs:
            if acc.kind == "read" and acc.position > first_c_write.position:
                return keep(Reason.CLONE_WRITTEN_ORIGINAL_READ, first_c_write.node, acc.node)
    caller_visible = ocls.roles & CALLER_VISIBLE
    # C5: the clone is written and the original is memory the caller observes.
    if "C5" not in skip and first_c_write is not None and caller_visible:
        return keep(Reason.WRITES_CALLER_MEMORY, first_c_write.node, original)
    # C6: the clone is returned.
    out = a.output_node
    if "C6" not in skip and out is not None and out in c_read_nodes:
        if caller_visible:
            return keep(Reason.OUTPUT_ALIASING, original)
        for acc in ocls.accesses:
            if acc.node is out:
                return keep(Reason.OUTPUT_ALIASING, acc.value)
    return Decision(name, "remove", Reason.REMOVABLE, (), original.name)


def plan_clone_elimination(
    analysis: AliasAnalysis,
    candidates: Optional[Sequence[torch.fx.Node]] = None,
    *,
    skip: Iterable[str] = (),
) -> list[Decision]:
    """Decide, for each clone candidate in graph order, whether it may be removed.

    Parameters
    ----------
    analysis : AliasAnalysis
        Analysis of the graph as it is now.
    candidates : sequence of fx.Node, optional
        Clone nodes to decide on; by default every :func:`is_clone_candidate` node.
    skip : iterable of str
        Conditions to *not* check ("C1".."C6"). Unsound: it exists to prove that
        the test tools catch a broken pass. Leave empty.

    Returns
    -------
    list of Decision
        One per candidate, in graph order; "remove" decisions are mutually
        compatible (C7) and are applied by :func:`rewrite.apply.apply_decisions`.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from aliasing import analyze
    >>> gm = make_fx(lambda x: x.clone() * 2, tracing_mode="fake")(torch.randn(3))
    >>> [(d.node, d.action) for d in plan_clone_elimination(analyze(gm))]
    [('clone', 'remove')]
    """
    skip_set = frozenset(skip)
    unknown = skip_set - CONDITIONS
    if unknown:
        from aliasing.errors import AliasingError

        raise AliasingError(f"unknown conditions to skip: {sorted(unknown)}")
    if candidates is None:
        candidates = [n for n in analysis.nodes if is_clone_candidate(n)]
    state = _State(analysis)
    order = sorted(candidates, key=analysis.position)
    decisions: dict[torch.fx.Node, Decision] = {}
    pending = order
    while pending:
        # C7: each pass decides the clones still kept against the graph as the removals
        # so far leave it. A removal can unblock a clone decided earlier (a later clone
        # was the read that kept it), so passes repeat until nothing changes: the plan
        # is a fixed point, and running the pass again removes nothing. A removal only
        # changes the accesses of the storage class it merges into, so only kept clones
        # whose own or original's class was touched are decided again.
        touched: list[str] = []
        for clone in pending:
            d = _decide(state, clone, skip_set)
            decisions[clone] = d
            if d.action == "remove":
                original = state.resolve(clone.args[0])  # type: ignore[arg-type]
                sc, so = _single_storage(analysis, clone), _single_storage(analysis, original)
                state.removed.add(clone)
                state.replaced[clone] = original
                if sc is not None and so is not None:
                    state.merge(sc, so)
                    touched.append(so)
        dirty = {state.find(s) for s in touched}
        pending = [c for c in pending if decisions[c].action == "keep" and _classes_of(state, c) & dirty]
    return [decisions[c] for c in order]


def _classes_of(state: _State, clone: torch.fx.Node) -> set[str]:
    """Roots of the storage classes a clone's decision depends on (its own and its original's)."""
    roots: set[str] = set()
    for node in (clone, state.resolve(clone.args[0])):  # type: ignore[arg-type]
        sid = _single_storage(state.analysis, node)
        if sid is not None:
            roots.add(state.find(sid))
    return roots
