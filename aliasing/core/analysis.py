"""Build the alias facts of a graph and answer queries about them.

:func:`analyze` makes one forward pass over the graph in node order:

- every tensor value gets its *points-to set*: the storages it may live in.
  A placeholder gets a storage of its own (shared with the placeholders whose
  fake tensors share a storage); a fresh op output gets a new storage; an
  output that aliases arguments (schema annotations, fake-tensor evidence)
  inherits theirs; an unknown op's outputs may be any of its arguments'
  storages or a new one. A value without metadata whose origin is unknown
  points to :data:`UNKNOWN_STORAGE`, which may alias everything;
- every value whose points-to set is a single known storage gets its
  :class:`~aliasing.core.regions.Region` from its fake tensor;
- a value whose storage or layout an op mutates in place (``set_``, ``t_``,
  ``resize_``, ``as_strided_``...) may alias anything and has no region;
- every read and write of a node is recorded, in graph order, against the
  storages it touches (:class:`Access`). Unknown ops touch whole storages.

The resulting :class:`AliasAnalysis` never changes. Queries are answered from
these indexes; :func:`aliasing.build_storage_graph` gives the same information
as a ``networkx.MultiDiGraph`` (schema in :mod:`aliasing.pictures.storage_graph`).
"""

from __future__ import annotations

import contextvars
import gc
import operator
import os
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
import torch.fx

from aliasing.core.effects import (
    EACH,
    SCHEMA_EFFECTS,
    SINGLE,
    Effect,
    EffectTable,
    composite_lies,
    indexing_effect,
    list_result,
    mutates_metadata,
    recomputed_copy,
    scan_calls,
    tensor_nodes,
    unknown_effect,
)
from aliasing.core.facts import FactsCache, TensorFacts, facts_of_value, is_tensor_meta
from aliasing.core.fake_values import keeps_storage_identity, restore_storage_identity
from aliasing.core.regions import Region, regions_may_overlap
from aliasing.core.roles import UNKNOWN_STORAGE, Role
from aliasing.core.subgraphs import tie_control_flow
from aliasing.core.target import OFFSET_UNKNOWN, Target, resolve_target
from aliasing.errors import MissingMetadataWarning, NoAtenOpsWarning, UnknownNodeError, describe_node

__all__ = [
    "DEFAULT_EFFECTS",
    "UNKNOWN_STORAGE",
    "Access",
    "AliasAnalysis",
    "AnalysisCount",
    "MissingMetadataWarning",
    "NoAtenOpsWarning",
    "NodeRef",
    "StorageInfo",
    "ViewStep",
    "WhyAlias",
    "WriteNote",
    "analyze",
    "counting_analyses",
    "paused_gc",
    "warnings_once",
    "with_control_flow",
]

_U = -1

NodeRef = torch.fx.Node | str


class Access(NamedTuple):
    """One read or write of a value's memory by a node, at the node's graph position.

    ``whole`` is true when the node may touch its storage anywhere (unknown ops),
    not only the value's region. (A named tuple: the analysis makes one per
    access, and a tuple is the cheapest object to make and free.)
    """

    position: int
    node: torch.fx.Node
    kind: Literal["read", "write"]
    value: torch.fx.Node
    whole: bool = False


#: Makes an Access (or StorageInfo) from its fields in order, without the generated ``__new__``'s Python call.
_new_tuple = tuple.__new__


class StorageInfo(NamedTuple):
    """One storage: its id, the role of the memory at the graph boundary, and where it came from."""

    id: str
    role: Role
    origin: str  #: name of the node that created it
    note: str = ""


#: The effect of a ``getitem`` of a multi-output node (it reads and writes nothing; one for all).
_GETITEM = Effect(note="getitem")


class ViewStep(NamedTuple):
    """One link of a value's chain of views in :class:`WhyAlias`: a node's name and what it is
    (``"user input"``, ``"slice"``, ``"add_, in place"``, ``"mul: new storage"``...)."""

    node: str
    what: str

    def __str__(self) -> str:
        return f"{self.node} ({self.what})"


class WriteNote(NamedTuple):
    """A write that may touch one of the two values of :class:`WhyAlias`: the writing node, its
    graph position, the value it writes through, where it lies with respect to the two values
    (``"before both"``, ``"between them"``, ``"after both"``) and the names of those it may touch."""

    node: str
    position: int
    via: str
    where: str
    touches: tuple[str, ...]

    def __str__(self) -> str:
        via = "" if self.via == self.node else f" through {self.via}"
        return f"#{self.position} {self.node}{via}, {self.where}: may touch {' and '.join(self.touches)}"


@dataclass(frozen=True)
class WhyAlias:
    """Why two values may (or may not) share memory: the evidence behind :meth:`AliasAnalysis.why`.

    ``may_alias`` and ``may_overlap`` are the analysis's answers; ``chain_a`` and
    ``chain_b`` the chains of views from each value's storage root (an input, a
    parameter, the op that allocated it) down to the value, toward ``storage_a`` and
    ``storage_b``, the storages the chains lead to (the shared one where there is one);
    ``storages_a`` and ``storages_b`` every storage each value may live in, ``shared``
    those both may live in; ``alias`` says why they may or may not share a storage,
    ``overlap`` why their bytes may or may not meet (empty when they cannot alias);
    ``writes`` the writes that may touch either value (at most :attr:`MAX_WRITES`;
    ``more_writes`` counts the rest). ``str()`` gives it as readable lines.
    """

    a: str
    b: str
    may_alias: bool
    may_overlap: bool
    chain_a: tuple[ViewStep, ...]
    chain_b: tuple[ViewStep, ...]
    storage_a: str | None
    storage_b: str | None
    storages_a: tuple[str, ...]
    storages_b: tuple[str, ...]
    shared: tuple[str, ...]
    alias: str
    overlap: str
    writes: tuple[WriteNote, ...] = ()
    more_writes: int = 0

    #: Writes listed at most (the rest are counted in ``more_writes``).
    MAX_WRITES = 8

    @property
    def verdict(self) -> str:
        """``"may overlap"``, ``"may alias, disjoint bytes"`` or ``"no alias"``."""
        if self.may_overlap:
            return "may overlap"
        return "may alias, disjoint bytes" if self.may_alias else "no alias"

    def lines(self) -> list[str]:
        """The explanation, one line each (what ``str()`` joins)."""
        width = max(len(self.a), len(self.b))
        out = [f"{self.a} and {self.b}: {self.verdict}"]
        for name, chain, sid in ((self.a, self.chain_a, self.storage_a), (self.b, self.chain_b, self.storage_b)):
            where = f"  [{sid}]" if sid is not None else ""
            out.append(f"  {name:<{width}}  {' -> '.join(str(s) for s in chain) or 'not a tensor value'}{where}")
        out.append(f"  storage: {self.alias}")
        if self.overlap:
            out.append(f"  overlap: {self.overlap}")
        if self.writes:
            out.append("  writes:")
            out.extend(f"    {w}" for w in self.writes)
            if self.more_writes:
                out.append(f"    ... and {self.more_writes} more")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _no_short_way(node: torch.fx.Node, facts: FactsCache) -> None:
    return None


#: Storage ids ``s0``, ``s1``, ... and their places, made once for every analysis (a storage id is
#: its place in the analysis's list of storages).
_SIDS: list[str] = []
_SID_INDEX: dict[str, int] = {}
_SIDS_LOCK = threading.Lock()


def _more_sids(i: int) -> None:
    """Make the storage ids up to past ``i`` (at least twice as many as there were)."""
    with _SIDS_LOCK:
        for j in range(len(_SIDS), max(2 * i, 1024)):
            sid = f"s{j}"
            _SID_INDEX[sid] = j
            _SIDS.append(sid)


def _sid(i: int) -> str:
    return UNKNOWN_STORAGE if i == _U else _SIDS[i]


class _Builder:
    """One forward pass over the graph; produces the indexes AliasAnalysis holds."""

    def __init__(self, target: Target, effects: EffectTable) -> None:
        self.target = target
        self.effects = effects
        self.cache = FactsCache()
        self.position: dict[torch.fx.Node, int] = {}
        self.points_to: dict[torch.fx.Node, frozenset[int]] = {}
        self.facts: dict[torch.fx.Node, TensorFacts] = {}
        self.exact: set[torch.fx.Node] = set()  # values with one known storage and a strided layout
        self.outmap: dict[torch.fx.Node, dict[object, frozenset[int]]] = {}
        self.storages: list[StorageInfo] = []
        self.accesses: dict[int, list[Access]] = {_U: []}
        self.members: dict[int, list[torch.fx.Node]] = {_U: []}
        self.effect_of: dict[torch.fx.Node, Effect] = {}
        self.opaque: list[torch.fx.Node] = []  # nodes whose effect is unknown, in graph order
        #: placeholders and ATen calls that return a tensor (their values need metadata), and those
        #: of them without ``meta['val']``, in graph order
        self.described = 0
        self.undescribed: list[torch.fx.Node] = []
        self.roles: dict[torch.fx.Node, Role] = {}
        self.outputs: list[torch.fx.Node] = []
        self.output_node: torch.fx.Node | None = None
        self.placeholder_storage: dict[int, int] = {}
        self.constant_storage: dict[object, int] = {}
        self.metadata_mutated: set[torch.fx.Node] = set()
        self.torch_level_only = False
        #: storages of memory that exists before the program runs (inputs, constants)
        self.preexisting: set[int] = set()
        #: pre-existing storages whose identity is unknown (inputs without metadata): they may
        #: be any pre-existing allocation, never one the program makes
        self.uncertain: set[int] = set()
        self._related: dict[int, tuple[int, ...]] = {}
        self._identity: bool | None = None
        self._liars: set[torch.fx.Node] = set()  # calls of ops whose fake kernels lie (run's scan)
        self._composites: set[torch.fx.Node] = set()  # calls of composite ops, not yet judged (lying_source)
        self._lying_sources: dict[torch.fx.Node, torch.fx.Node] | None = None  # lying_source's map, made once
        self.offset_unknown: list[torch.fx.Node] | None = None  # inputs of unknown storage offset (unknown_offset)

    # -- storages -------------------------------------------------------------
    def new_storage(self, role: Role, origin: torch.fx.Node, note: str = "") -> int:
        i = len(self.storages)
        if i >= len(_SIDS):
            _more_sids(i)
        self.storages.append(_new_tuple(StorageInfo, (_SIDS[i], role, origin.name, note)))
        self.accesses[i] = []
        self.members[i] = []
        if role is not Role.INTERMEDIATE:
            self.preexisting.add(i)
        return i

    def trusted(self, facts: TensorFacts | None, sources: Iterable[torch.fx.Node]) -> TensorFacts | None:
        """The facts of a value that aliases ``sources``, if its metadata agrees.

        A view's sizes, strides and offset describe it inside its base only when its
        fake tensor lives in its base's fake storage. Programs loaded with
        ``torch.export.load`` and ``make_fx`` traces in real mode give every view a
        storage of its own at offset 0, and a rewrite that replaced a clone leaves its
        views' metadata on the clone's storage: such a value has no layout facts (and
        so no region) here.
        """
        if facts is None:
            return None
        for s in sources:
            base = self.facts.get(s)
            if base is not None and base.storage_key == facts.storage_key:
                return facts
        return None

    def copied(self, node: torch.fx.Node, srcs: Iterable[torch.fx.Node], key: object = SINGLE) -> bool:
        """Whether a result that may alias ``srcs`` is a copy: a view-or-copy op (``contiguous``,
        ``reshape``, ``to``; their schemas let the result alias) or an ATen op whose undeclared
        results the storage-sharing audit did not confirm fresh (``einsum``, ``sum_to_size``).

        The trace recorded a copy (output ``key``'s fake tensor is in a storage of its
        own; :attr:`Effect.copies`), and that record holds for every run the program can have:

        - the graph's fake tensors keep storage identity (a view or an in-place
          result shares its argument's fake storage somewhere in the graph;
          programs loaded with ``torch.export.load`` and ``make_fx`` traces in real
          mode give every value a storage of its own, and stay conservative);
        - the result's and every source's sizes, strides and offset are plain ints:
          where they are symbolic the trace decided at the example size, and the same
          op may return a view at another (``reshape`` of a transposed ``(n, 4)`` is a
          view of its argument at ``n == 1``, a copy above);
        - every source has layout facts the analysis trusts (one known storage,
          its own fake tensor), and none is computed from an op whose fake kernel
          the layout audit caught laying results out otherwise than eager
          (:mod:`aliasing.core.layout_divergences`);
        - the op, run again on the sources' fake tensors, makes a copy too
          (:func:`aliasing.core.effects.recomputed_copy`: right after a rewrite
          replaced a source, whose result's metadata describes the old one).
        """
        if not self.keeps_storage_identity():
            return False
        if key is SINGLE:
            result = self.cache.tensor(node)
        else:
            multi = self.cache.outputs(node)
            result = multi[key] if multi is not None and type(key) is int and 0 <= key < len(multi) else None
        if result is None or result.plain_layout is None:
            return False
        for s in srcs:
            own = self.cache.tensor(s)
            bound = self.facts.get(s)
            if s not in self.exact or own is None or bound is None or bound.storage_key != own.storage_key:
                return False
            if own.plain_layout is None or self.lying_source(s) is not None:
                return False
        return recomputed_copy(node, key)

    def keeps_storage_identity(self) -> bool:
        """Whether the graph's fake values keep storage identity (computed once;
        :func:`aliasing.core.fake_values.keeps_storage_identity`)."""
        if self._identity is None:
            self._identity = keeps_storage_identity(self.target.graph)
        return self._identity

    def lying_source(self, node: torch.fx.Node) -> torch.fx.Node | None:
        """The call of an op whose fake kernel the layout audit caught lying (or of a composite op
        that runs one: :func:`aliasing.core.effects.composite_lies`) that ``node`` is computed
        from through any chain of arguments (``node`` itself included), or None.

        Made once, in one pass in graph order (arguments come before their users), and only
        when the graph calls such an op at all.
        """
        liars = self._liars
        if self._composites:  # judged on first use: each runs its op on fake values again
            liars.update(n for n in self._composites if composite_lies(n))
            self._composites = set()
        if not liars:
            return None  # nothing is computed from a liar
        sources = self._lying_sources
        if sources is None:
            sources = self._lying_sources = {}
            for n in self.target.graph.nodes:
                if n in liars:
                    sources[n] = n
                elif sources:
                    source = next((sources[a] for a in n.all_input_nodes if a in sources), None)
                    if source is not None:
                        sources[n] = source
        return sources.get(node)

    def region(self, node: torch.fx.Node) -> Region | None:
        """The value's exact region in its one storage (read from its facts on demand), or None."""
        return self.facts[node].region if node in self.exact else None

    def related(self, s: int) -> tuple[int, ...]:
        """Storages that may be the same allocation as ``s`` (``s`` first, then the others).

        Distinct known storages are distinct allocations. A pre-existing storage of
        unknown identity may be any pre-existing one; memory the program allocates is
        none of them; :data:`UNKNOWN_STORAGE` may be anything.
        """
        hit = self._related.get(s)
        if hit is not None:
            return hit
        if s == _U:
            out: tuple[int, ...] = (_U, *range(len(self.storages)))
        elif s in self.uncertain:
            out = (s, *sorted(self.preexisting - {s}), _U)
        elif s in self.preexisting:
            out = (s, *sorted(self.uncertain - {s}), _U)
        else:
            out = (s, _U)
        self._related[s] = out
        return out

    def bind(self, node: torch.fx.Node, pts: frozenset[int], facts: TensorFacts | None) -> None:
        if node in self.metadata_mutated:
            # Its storage or layout changes later in the program (set_, t_, resize_, ...):
            # the value may be anywhere, and its metadata describes only one moment.
            pts = pts | {_U}
        self.points_to[node] = pts
        for s in pts:
            self.members[s].append(node)
        if facts is not None:
            self.facts[node] = facts
            if len(pts) == 1 and _U not in pts and facts.strided:
                self.exact.add(node)  # its region (read on demand) is exact in its one storage

    def record(self, pos: int, node: torch.fx.Node, kind: Literal["read", "write"], values: Iterable[torch.fx.Node], whole: bool) -> None:
        points_to, exact, accesses = self.points_to, self.exact, self.accesses
        for v in values:
            pts = points_to.get(v)
            if pts is None:
                continue
            acc = _new_tuple(Access, (pos, node, kind, v, whole or v not in exact))
            for s in pts:
                accesses[s].append(acc)

    # -- nodes ----------------------------------------------------------------
    def run(self) -> None:
        scan = scan_calls(self.target.graph.nodes, self.cache)
        self.metadata_mutated, self._liars, self._composites = scan.metadata_mutated, scan.lying, scan.composite
        aten = torch_level = described = 0
        position, cache, table, returns_tensor = self.position, self.cache, self.effects, _RETURNS_TENSOR
        # (a table whose class answers ``effect`` otherwise answers every node that way)
        short_effect = table.short_effect if type(table).effect is EffectTable.effect else _no_short_way
        short_call, overload = self.short_call, torch._ops.OpOverload
        for pos, node in enumerate(self.target.graph.nodes):
            position[node] = pos
            op = node.op
            if op == "call_function":
                target = node.target
                if target is operator.getitem:
                    self.getitem(pos, node)
                    continue
                if isinstance(target, overload):
                    aten += 1
                    returns = returns_tensor.get(id(target))  # (_returns_tensor's lookup, without the call)
                    if returns[1] if returns is not None else _returns_tensor(target):
                        described += 1
                        if "val" not in node.meta:  # (has_meta, inlined)
                            self.undescribed.append(node)
                    effect = short_effect(node, cache)
                    if effect is not None:
                        short_call(pos, node, effect)
                        continue
                elif isinstance(target, torch._ops.HigherOrderOperator):
                    aten += 1
                else:
                    torch_level += 1
                self.call(pos, node)
            elif op == "placeholder":
                described += 1
                if "val" not in node.meta:
                    self.undescribed.append(node)
                self.placeholder(node)
            elif op == "get_attr":
                self.get_attr(node)
            elif op == "output":
                self.output(pos, node)
            else:  # call_method, call_module
                torch_level += 1
                self.call(pos, node)
        self.described += described
        self.torch_level_only = torch_level > 0 and aten == 0
        self._unguarded_absolute_views()

    def unguarded_inputs(self) -> list[torch.fx.Node]:
        """The placeholders whose storage offset a run is not held to (computed once; see unknown_offset)."""
        if self.offset_unknown is None:
            target = self.target
            self.offset_unknown = [
                p
                for p in target.graph.find_nodes(op="placeholder")
                if p.meta.get(OFFSET_UNKNOWN) or p.name in target.offset_unknown
            ]
        return self.offset_unknown

    def _unguarded_absolute_views(self) -> None:
        """An ``as_strided`` with an explicit storage offset places its view at an absolute position,
        while an input whose offset a run is not held to lies where its metadata does not say: no
        value in such an input's storage has an exact region then (they may overlap in any way)."""
        graph = self.target.graph
        views = [
            n
            for n in graph.find_nodes(op="call_function", target=torch.ops.aten.as_strided.default)
            if (len(n.args) > 3 and n.args[3] is not None) or n.kwargs.get("storage_offset") is not None
        ]
        if not views or not self.unguarded_inputs():
            return
        unguarded = frozenset().union(*(self.points_to.get(p, frozenset()) for p in self.unguarded_inputs()))
        for view in views:
            for s in self.points_to.get(view, frozenset()) & unguarded:
                self.exact.difference_update(self.members[s])

    def placeholder(self, node: torch.fx.Node) -> None:
        role = self.target.input_roles.get(node.name, Role.USER_INPUT)
        self.roles[node] = role
        facts = self.cache.tensor(node)
        if facts is None:
            if is_tensor_meta(node) is False:
                return  # not a tensor
            # No metadata: the value may be a tensor sharing memory with any other input
            # (but not with memory the program allocates).
            s = self.new_storage(role, node, "no metadata: may be any input's memory")
            self.uncertain.add(s)
            self.bind(node, frozenset({s}), None)
            return
        shared = self.placeholder_storage.get(facts.storage_key)
        if shared is None:
            s = self.new_storage(role, node)
            self.placeholder_storage[facts.storage_key] = s
        else:
            s = shared
            if self.storages[s].role is Role.DONATED_INPUT and role is not Role.DONATED_INPUT:
                # A storage is donated only if every input in it is.
                info = self.storages[s]
                self.storages[s] = StorageInfo(info.id, role, info.origin, info.note)
        if node in self.metadata_mutated:
            self.bind(node, frozenset((s,)), facts)
            return
        # (bind, inlined: one known storage)
        self.points_to[node] = frozenset((s,))
        self.members[s].append(node)
        self.facts[node] = facts
        if facts.strided:
            self.exact.add(node)

    def _attr(self, name: str) -> Any:
        obj: Any = self.target.module
        for part in name.split("."):
            if obj is None:
                return None
            obj = getattr(obj, part, None)
        return obj

    def get_attr(self, node: torch.fx.Node) -> None:
        value = self._attr(str(node.target)) if self.target.module is not None else None
        if self.target.module is not None and not isinstance(value, torch.Tensor):
            return  # a submodule (e.g. a higher-order op's subgraph) or a non-tensor constant
        role = Role.CONSTANT
        if isinstance(value, torch.nn.Parameter):
            role = Role.PARAMETER
        self.roles[node] = role
        facts = self.cache.tensor(node)
        if isinstance(value, torch.Tensor):
            try:
                key: object = value.untyped_storage().data_ptr() or id(value)
            except Exception:
                key = id(value)
            s = self.constant_storage.get(key)
            if s is None:
                s = self.new_storage(role, node)
                self.constant_storage[key] = s
            # Regions from the real attribute: the metadata may be stale or missing.
            real = facts_of_value(value)
            self.bind(node, frozenset({s}), real if real is not None else None)
            return
        # No module to read the attribute from: constants may be tied to each other.
        s = self.constant_storage.get("shared")
        if s is None:
            s = self.new_storage(role, node, "constants without a module")
            self.constant_storage["shared"] = s
        self.points_to[node] = frozenset({s})
        self.members[s].append(node)
        if facts is not None:
            self.facts[node] = facts  # layout known, region relative to an unknown base: none

    def output(self, pos: int, node: torch.fx.Node) -> None:
        self.output_node = node
        returned = tensor_nodes(node.args)
        self.outputs = returned
        for v in returned:
            if self.roles.get(v, Role.INTERMEDIATE) is Role.INTERMEDIATE:
                self.roles[v] = Role.OUTPUT  # inputs keep their input role
        self.record(pos, node, "read", returned, whole=False)

    def _fresh(self, node: torch.fx.Node) -> frozenset[int]:
        return frozenset((self.new_storage(Role.INTERMEDIATE, node),))

    def _union(self, nodes: Iterable[torch.fx.Node]) -> set[int]:
        out: set[int] = set()
        for n in nodes:
            out |= self.points_to.get(n, frozenset())
        return out

    def call(self, pos: int, node: torch.fx.Node, effect: Effect | None = None) -> None:
        if effect is None:
            effect = self.effects.effect(node, self.cache)
        self.effect_of[node] = effect
        if effect.unknown:
            self.opaque.append(node)
        if effect.reads:
            self.record(pos, node, "read", effect.reads, whole=effect.unknown)
        if effect.writes:
            self.record(pos, node, "write", effect.writes, whole=effect.unknown)
        facts = self.cache.tensor(node)
        multi = self.cache.outputs(node) if facts is None else None  # a tensor value is no tuple
        if effect.unknown:
            reach = self._union(effect.reaches)
            if is_tensor_meta(node) is False and multi is None:
                return
            pts = frozenset(reach | self._fresh(node))
            if multi is not None:
                self.outmap[node] = dict.fromkeys(range(len(multi)), pts)
            self.bind(node, pts, facts)
        elif facts is not None or (SINGLE in effect.outputs and multi is None):
            self._bind_result(node, effect, facts)
        elif multi is not None or effect.outputs:
            self._bind_results(node, effect, multi)

    def _bind_result(self, node: torch.fx.Node, effect: Effect, facts: TensorFacts | None) -> None:
        """Bind a call's one tensor result (:meth:`call`): fresh, a copy the trace recorded, or in
        the storages of the arguments it aliases."""
        srcs = effect.outputs.get(SINGLE)
        if srcs is None:
            pts = self._fresh(node) if facts is not None else frozenset()
        elif srcs and SINGLE in effect.copies and self.copied(node, srcs):
            # A view-or-copy op (contiguous, reshape, to) that made a copy: fresh memory.
            effect = replace(effect, outputs={**effect.outputs, SINGLE: ()}, note="a copy (see AliasAnalysis)")
            self.effect_of[node] = effect
            pts = self._fresh(node)
        elif srcs:
            pts = frozenset(self._union(srcs))
            if len(srcs) == 1 and srcs[0] in effect.writes and srcs[0] in self.facts and not mutates_metadata(node.target):
                # An in-place (or out=) op returns the tensor it wrote: its layout is that tensor's.
                facts = self.facts[srcs[0]]
            elif not isinstance(node.target, torch._ops.HigherOrderOperator):  # HOP rules check their own
                facts = self.trusted(facts, srcs)
        else:
            pts = self._fresh(node)
        if pts:
            self.bind(node, pts, facts)

    def _bind_results(self, node: torch.fx.Node, effect: Effect, multi: Sequence[Any] | None) -> None:
        """Bind a call's tuple or list result (:meth:`call`), output by output."""
        keys = list(effect.outputs) if effect.outputs else list(range(len(multi or [])))
        outs: dict[object, frozenset[int]] = {}
        copied = [k for k in effect.copies if effect.outputs.get(k) and self.copied(node, effect.outputs[k], k)]
        if copied:  # results the trace recorded as copies, trusted (see copied): fresh memory
            effect = replace(effect, outputs={**effect.outputs, **dict.fromkeys(copied, ())}, note="copies (see AliasAnalysis)")
            self.effect_of[node] = effect
        # The fresh elements of a list result may be views of one allocation (nonzero_numpy):
        # they share one fresh storage.
        shared: frozenset[int] | None = None
        one_allocation = list_result(node.target)
        for k in keys:
            srcs = effect.outputs.get(k, ())
            if srcs:
                outs[k] = frozenset(self._union(srcs))
            elif one_allocation:
                shared = outs[k] = shared or self._fresh(node)
            else:
                outs[k] = self._fresh(node)
        self.outmap[node] = outs
        union: set[int] = set()
        for pts in outs.values():
            union |= pts
        if union:
            self.bind(node, frozenset(union), None)

    def short_call(self, pos: int, node: torch.fx.Node, effect: Effect) -> None:
        """:meth:`call` for the effect of a call that takes a short way (:meth:`EffectTable.short_effect`:
        it reads tensors, writes some, and returns one tensor, fresh or in one argument's storage,
        or nothing): the same records, without the general case's questions. A list of views (a
        list-view op's effect) is bound by :meth:`call`."""
        facts = self.cache.tensor(node)
        if facts is None and (self.cache.outputs(node) is not None or (effect.outputs and SINGLE not in effect.outputs)):
            self.call(pos, node, effect)  # a tuple value, or a list of views: the general case
            return
        self.effect_of[node] = effect
        points_to = self.points_to
        reads = effect.reads
        if reads:  # (record's loop, inlined: one call fewer per node)
            exact, accesses = self.exact, self.accesses
            for v in reads:
                pts = points_to.get(v)
                if pts is not None:
                    acc = _new_tuple(Access, (pos, node, "read", v, v not in exact))
                    for s in pts:
                        accesses[s].append(acc)
        if effect.writes:
            self.record(pos, node, "write", effect.writes, whole=False)
        aliased = effect.outputs.get(SINGLE)
        if aliased:
            first = aliased[0]
            pts = points_to.get(first)
            if pts:
                if effect.writes and first in effect.writes:
                    # An in-place op returns the tensor it wrote: its layout is that tensor's (as in call).
                    self.bind(node, pts, self.facts.get(first))
                else:
                    self.bind(node, pts, self.trusted(facts, aliased))
            return
        if aliased is None and facts is None:
            return  # a mutator returns nothing (a tensor in its metadata regardless is fresh)
        # A fresh result (bind and new_storage, inlined: the most common call of all).
        i = len(self.storages)
        if i >= len(_SIDS):
            _more_sids(i)
        self.storages.append(_new_tuple(StorageInfo, (_SIDS[i], Role.INTERMEDIATE, node.name, "")))
        self.accesses[i] = []
        self.members[i] = [node]
        if node in self.metadata_mutated:
            pts = frozenset((i, _U))
            self.members[_U].append(node)
        else:
            pts = frozenset((i,))
        points_to[node] = pts
        if facts is not None:
            self.facts[node] = facts
            if facts.strided and _U not in pts:
                self.exact.add(node)

    def getitem(self, pos: int, node: torch.fx.Node) -> None:
        src, key = (node.args + (None, None))[:2]
        facts = self.cache.tensor(node)
        if isinstance(src, torch.fx.Node) and src in self.outmap:
            outs = self.outmap[src]
            pts = outs.get(key, outs.get(EACH))
            if pts is None:
                # An output the effect did not describe: any of the source's storages, or new.
                pts = frozenset(self.points_to.get(src, frozenset()) | self._fresh(node))
            if facts is None and is_tensor_meta(node) is False:
                if self.cache.outputs(node) is not None:
                    self.outmap[node] = {EACH: pts}  # a Tensor[] inside a tuple: each element lives in pts
                return
            self.effect_of[node] = _GETITEM
            source_effect = self.effect_of.get(src)
            hop = isinstance(src.target, torch._ops.HigherOrderOperator)  # HOP rules check their own exactness
            if source_effect is not None and not source_effect.unknown and not hop:
                aliased = source_effect.outputs.get(key, source_effect.outputs.get(EACH, ()))
                if aliased:
                    facts = self.trusted(facts, aliased)
            self.bind(node, pts, facts)
            return
        if isinstance(src, torch.fx.Node) and src in self.points_to and self.cache.outputs(src) is None:
            # Indexing a tensor (or a value that may be one): a view or a copy of it.
            self.call(pos, node, indexing_effect(node, self.cache))
            return
        # getitem on an opaque value (a container the analysis knows nothing of): unknown.
        self.call(pos, node, unknown_effect(node, "getitem of a value without known outputs"))


class AliasAnalysis:
    """Immutable answers about which values share memory and who touches it.

    Build one with :func:`analyze`. Every query takes an ``fx.Node`` or a node name.

    Example
    -------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from aliasing import analyze
    >>> def f(x):
    ...     q, k = x.split(4, dim=-1)
    ...     q.add_(1)
    ...     return k * 2
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 8))
    >>> a = analyze(gm)
    >>> a.may_alias("getitem", "getitem_1"), a.may_overlap("getitem", "getitem_1")
    (True, False)
    >>> [n.name for n in a.writers("x_1")]
    ['add_']
    """

    def __init__(self, target: Target, builder: _Builder) -> None:
        self._target = target
        self._b = builder
        self._by_name: dict[str, torch.fx.Node] | None = None  # built on the first query by name

    # -- plumbing -------------------------------------------------------------
    def _node(self, n: NodeRef) -> torch.fx.Node:
        if type(n) is torch.fx.Node and n in self._b.position:  # the common case, checked at once
            return n
        if isinstance(n, torch.fx.Node):
            if n not in self._b.position:
                raise UnknownNodeError(f"node is not in the analysed graph: {describe_node(n)}")
            return n
        if isinstance(n, str):
            if self._by_name is None:
                self._by_name = {m.name: m for m in self._b.position}
            node = self._by_name.get(n)
            if node is None:
                raise UnknownNodeError(f"no node named {n!r} in the analysed graph")
            return node
        raise UnknownNodeError(f"expected an fx.Node or a node name, got {type(n).__name__}")

    def _pts(self, n: torch.fx.Node) -> frozenset[int]:
        return self._b.points_to.get(n, frozenset())

    @property
    def target_graph(self) -> torch.fx.Graph:
        """The analysed ``torch.fx.Graph``."""
        return self._target.graph

    @property
    def nodes(self) -> tuple[torch.fx.Node, ...]:
        """All nodes, in graph order."""
        return tuple(self._b.position)

    def position(self, n: NodeRef) -> int:
        """The node's index in graph order."""
        return self._b.position[self._node(n)]

    # -- storages -------------------------------------------------------------
    @property
    def storages(self) -> tuple[str, ...]:
        """Ids of all storages, in order of creation."""
        return tuple(s.id for s in self._b.storages)

    def _storage_index(self, sid: str) -> int:
        i = _SID_INDEX.get(sid)
        if i is not None and i < len(self._b.storages):
            return i
        if sid == UNKNOWN_STORAGE:
            return _U
        raise UnknownNodeError(f"no storage {sid!r} in this analysis")

    def storage_info(self, sid: str) -> StorageInfo:
        """Role and origin of a storage."""
        return self._b.storages[self._storage_index(sid)]

    def storage_role(self, sid: str) -> Role:
        """The boundary role of a storage's memory (the role of the input that owns it)."""
        return self.storage_info(sid).role

    def storage_of(self, n: NodeRef) -> frozenset[str]:
        """Storages ``n``'s value may live in (empty for non-tensor values).

        One id for a value of known origin; several when an unknown op may return
        an alias of several arguments; ``"unknown"`` when nothing is known.
        """
        return frozenset(_sid(s) for s in self._pts(self._node(n)))

    def single_storage(self, n: NodeRef) -> str | None:
        """The one known storage ``n``'s value lives in; None when it may live in several,
        in :data:`UNKNOWN_STORAGE`, or is not a tensor (``storage_of`` in one id, without the set)."""
        b = self._b
        pts = b.points_to.get(n) if type(n) is torch.fx.Node else None  # (the planner's common case, at once)
        if pts is None:
            pts = self._pts(self._node(n))
        if len(pts) != 1:
            return None
        for s in pts:
            return None if s == _U else b.storages[s].id
        return None

    def values_in(self, sid: str) -> tuple[torch.fx.Node, ...]:
        """Values that may live in the storage ``sid``, in graph order."""
        members = self._b.members
        found = [v for s in self._b.related(self._storage_index(sid)) for v in members[s]]
        pos = self._b.position
        return tuple(sorted(set(found), key=pos.__getitem__))

    def storage_accesses(self, sid: str) -> tuple[Access, ...]:
        """Reads and writes that may touch the storage ``sid``, in graph order.

        Accesses through values of another storage that may be the same allocation
        (an input without metadata, :data:`UNKNOWN_STORAGE`) are included with
        ``whole=True``: their regions are relative to another base.
        """
        i = self._storage_index(sid)
        related = self._b.related(i)
        accs = list(self._b.accesses[i])
        others = [a if a.whole else a._replace(whole=True) for s in related[1:] for a in self._b.accesses[s]]
        if others:
            accs = sorted(accs + others, key=lambda a: a.position)
        return tuple(accs)

    # -- values ---------------------------------------------------------------
    def facts_of(self, n: NodeRef) -> TensorFacts | None:
        """Layout facts of a tensor value (None without metadata)."""
        facts = self._b.facts.get(n) if type(n) is torch.fx.Node else None  # (the common case, at once)
        return facts if facts is not None else self._b.facts.get(self._node(n))

    def region_of(self, n: NodeRef) -> Region | None:
        """The value's byte region in its storage, or None when its storage is not exactly known."""
        return self._b.region(self._node(n))

    def effect_of(self, n: NodeRef) -> Effect | None:
        """The memory effect the analysis used for a call node (None for other nodes)."""
        return self._b.effect_of.get(self._node(n))

    def lying_source(self, n: NodeRef) -> torch.fx.Node | None:
        """The call of an op whose fake kernel lays results out otherwise than eager (the layout
        audit's :mod:`aliasing.core.layout_divergences`) that ``n`` is computed from, ``n`` itself
        included, or None: downstream of it, recorded layouts may not be the real ones.

        Example
        -------
        >>> import torch
        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> from aliasing import analyze
        >>> def f(x):
        ...     return torch.roll(x, 1, 0).relu(), x.relu()
        >>> a = analyze(make_fx(f, tracing_mode="fake")(torch.randn(2, 3)))
        >>> [getattr(a.lying_source(n), "name", None) for n in ("roll", "relu", "relu_1")]
        ['roll', 'roll', None]
        """
        return self._b.lying_source(self._node(n))

    def unknown_offset(self, n: NodeRef) -> torch.fx.Node | None:
        """An input whose storage ``n`` may share and whose recorded storage offset may not be its
        offset in a run, or None: where it is not None, ``n``'s recorded offset proves nothing.

        Such inputs are the user inputs of an ``ExportedProgram`` (its module checks their sizes,
        not their offsets) and the placeholders marked :data:`aliasing.core.target.OFFSET_UNKNOWN`
        (a program loaded from its ``.pt2`` records every input at offset 0).

        Example
        -------
        >>> import io, torch
        >>> from aliasing import analyze
        >>> class M(torch.nn.Module):
        ...     def forward(self, x):
        ...         return x[1:].clone(), (x * 2).clone()
        >>> buf = io.BytesIO()
        >>> torch.export.save(torch.export.export(M(), (torch.randn(3)[1:],)), buf)
        >>> _ = buf.seek(0)
        >>> a = analyze(torch.export.load(buf))
        >>> [getattr(a.unknown_offset(n), "name", None) for n in ("slice_1", "mul")]
        ['x', None]
        """
        flagged = self._b.unguarded_inputs()
        if not flagged:
            return None
        node = self._node(n)
        return next((p for p in flagged if self.may_alias(node, p)), None)

    def is_unknown(self, n: NodeRef) -> bool:
        """True when ``n`` is an op the analysis treats as opaque."""
        e = self._b.effect_of.get(n) if type(n) is torch.fx.Node else None  # (the common case, at once)
        if e is None:
            e = self._b.effect_of.get(self._node(n))
        return bool(e is not None and e.unknown)

    @property
    def opaque_nodes(self) -> tuple[torch.fx.Node, ...]:
        """Nodes the analysis could not see into (unknown ops), in graph order: everything
        they can reach is answered conservatively."""
        return tuple(self._b.opaque)

    def role(self, n: NodeRef) -> Role:
        """Boundary role: an input kind for placeholders, CONSTANT/PARAMETER for get_attr,
        OUTPUT for values the graph returns, INTERMEDIATE otherwise."""
        node = self._node(n)
        if node.op == "output":
            return Role.OUTPUT
        return self._b.roles.get(node, Role.INTERMEDIATE)

    @property
    def outputs(self) -> tuple[torch.fx.Node, ...]:
        """Values the graph returns, in order (repeats removed)."""
        return tuple(self._b.outputs)

    @property
    def output_node(self) -> torch.fx.Node | None:
        """The graph's output node."""
        return self._b.output_node

    def may_alias(self, a: NodeRef, b: NodeRef) -> bool:
        """May the two values share a storage?"""
        pa, pb = self._pts(self._node(a)), self._pts(self._node(b))
        if not pa or not pb:
            return False
        if pa & pb or _U in pa or _U in pb:
            return True
        unc, pre = self._b.uncertain, self._b.preexisting
        return bool(unc) and bool((pa & unc and pb & pre) or (pb & unc and pa & pre))

    def may_overlap(self, a: NodeRef, b: NodeRef) -> bool:
        """May the two values' regions touch a common byte?"""
        na, nb = self._node(a), self._node(b)
        if not self.may_alias(na, nb):
            return False
        ra, rb = self._b.region(na), self._b.region(nb)
        if ra is None or rb is None or self._pts(na) != self._pts(nb):
            return True
        return regions_may_overlap(ra, rb)

    def alias_set(self, n: NodeRef) -> tuple[torch.fx.Node, ...]:
        """All values that may share ``n``'s storage (``n`` included), in graph order."""
        node = self._node(n)
        pts = self._pts(node)
        if not pts:
            return ()
        if _U in pts:
            found = [v for v in self._b.points_to if self._b.points_to[v]]
        else:
            members = self._b.members
            found = [v for s in {r for p in pts for r in self._b.related(p)} for v in members[s]]
        pos = self._b.position
        return tuple(sorted(set(found), key=pos.__getitem__))

    def accesses_overlapping(self, n: NodeRef, kind: str | None = None) -> Iterator[Access]:
        """Accesses (of ``kind``, or both) of memory that may overlap ``n``, unordered, with repeats."""
        node = self._node(n)
        pts = self._pts(node)
        region = self._b.region(node)
        storages = {r for p in pts for r in self._b.related(p)}
        for s in storages:
            for acc in self._b.accesses[s]:
                if kind is not None and acc.kind != kind:
                    continue
                if region is None or acc.whole or s not in pts:
                    yield acc
                    continue
                other = self._b.region(acc.value)
                if other is None or regions_may_overlap(region, other):
                    yield acc

    def _ordered(self, accs: Iterable[Access]) -> tuple[torch.fx.Node, ...]:
        nodes = {a.node: a.position for a in accs}
        return tuple(sorted(nodes, key=nodes.__getitem__))

    def writers(self, n: NodeRef) -> tuple[torch.fx.Node, ...]:
        """Nodes that may write memory overlapping ``n``, in graph order."""
        return self._ordered(self.accesses_overlapping(n, "write"))

    def readers(self, n: NodeRef) -> tuple[torch.fx.Node, ...]:
        """Nodes that may read memory overlapping ``n``, in graph order (the output node included)."""
        return self._ordered(self.accesses_overlapping(n, "read"))

    # -- explanations -----------------------------------------------------------
    def why(self, a: NodeRef, b: NodeRef) -> WhyAlias:
        """Why ``a`` and ``b`` may (or may not) share memory: the evidence behind :meth:`may_alias`
        and :meth:`may_overlap`, read from what the analysis recorded (no second analysis).

        For each value, the chain of views from its storage's root (an input, a parameter, the
        op that allocated it) down to it; the storages they share, or why they cannot share one
        (distinct storages and where each comes from); whether their bytes may meet and why
        (exact regions that overlap or are disjoint, or why no exact region is known: symbolic
        sizes, an op the analysis does not model, missing metadata...); and the writes that may
        touch either value, in graph order. ``may_alias`` and ``may_overlap`` of the result are
        the analysis's answers. ``str()`` of the result gives it as readable lines (regions as
        ``offset+[sizes]:[strides]xitemsize``, in elements: :meth:`Region.describe`).

        Example
        -------
        >>> import torch
        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> def f(x):
        ...     q, k = x.split(4, dim=-1)
        ...     q.add_(1)
        ...     return k.t() * 2, x.clone()
        >>> a = analyze(make_fx(f, tracing_mode="fake")(torch.randn(2, 8)))
        >>> print(a.why("getitem", "t"))
        getitem and t: may alias, disjoint bytes
          getitem  x_1 (user input) -> getitem (split[0])  [s0]
          t        x_1 (user input) -> getitem_1 (split[1]) -> t (t)  [s0]
          storage: both may live in s0 (user input x_1)
          overlap: disjoint: exact regions getitem 0+[2,4]:[8,1]x4, t 4+[4,2]:[1,8]x4 share no byte
          writes:
            #4 add_ through getitem, between them: may touch getitem
        >>> w = a.why("x_1", "clone")
        >>> w.may_alias, w.alias
        (False, 'distinct storages: x_1 lives in s0 (user input x_1), clone in s2 (new memory of clone)')
        """
        na, nb = self._node(a), self._node(b)
        alias, overlap = self.may_alias(na, nb), self.may_overlap(na, nb)
        pa, pb = self._pts(na), self._pts(nb)
        shared = pa & pb
        sa, sb = _why_target(pa, shared), _why_target(pb, shared)
        chain_a, chain_b = self._why_chain(na, sa), self._why_chain(nb, sb)
        writes: list[WriteNote] = []
        more = 0
        if alias:
            reason = self._why_alias(na, nb, pa, pb, shared)
            overlap_reason = self._why_overlap(na, nb, pa, pb, chain_a + chain_b)
            writes, more = self._why_writes(na, nb)
        else:
            reason = self._why_apart(na, nb, pa, pb)
            overlap_reason = ""
        return WhyAlias(
            na.name,
            nb.name,
            alias,
            overlap,
            tuple(self._why_steps(chain_a, sa)),
            tuple(self._why_steps(chain_b, sb)),
            None if sa is None else _sid(sa),
            None if sb is None else _sid(sb),
            tuple(_sid(s) for s in _why_order(pa)),
            tuple(_sid(s) for s in _why_order(pb)),
            tuple(_sid(s) for s in _why_order(shared)),
            reason,
            overlap_reason,
            tuple(writes),
            more,
        )

    def _why_sources(self, node: torch.fx.Node) -> tuple[torch.fx.Node, ...]:
        """The values ``node``'s value may be a view (or the in-place result) of, as its effect recorded."""
        b = self._b
        effect = b.effect_of.get(node)
        if effect is None:
            return ()
        if effect.unknown:
            return tuple(effect.reaches)
        if effect is _GETITEM:  # an element of a multi-output node: its sources, else the node itself
            src, key = (node.args + (None, None))[:2]
            if not isinstance(src, torch.fx.Node):
                return ()
            se = b.effect_of.get(src)
            if se is None or se.unknown:
                return (src,)
            return (*se.outputs.get(key, se.outputs.get(EACH, ())), src)
        srcs = effect.outputs.get(SINGLE)
        if srcs is None:
            srcs = tuple(dict.fromkeys(x for v in effect.outputs.values() for x in v))
        return tuple(srcs)

    def _why_chain(self, node: torch.fx.Node, s: int | None) -> list[torch.fx.Node]:
        """The chain of values from the root of storage ``s`` down to ``node`` (following, at each
        step, the first source that may live in ``s``); ``[]`` when ``node`` is in no storage."""
        if s is None:
            return []
        chain = [node]
        seen = {node}
        cur = node
        while True:
            parent = next((p for p in self._why_sources(cur) if p not in seen and s in self._pts(p)), None)
            if parent is None:
                break
            chain.append(parent)
            seen.add(parent)
            cur = parent
        chain.reverse()
        return chain

    def _why_steps(self, chain: list[torch.fx.Node], s: int | None) -> list[ViewStep]:
        """The chain as :class:`ViewStep` entries (the middle of a long one elided)."""
        steps = []
        for i, node in enumerate(chain):
            parent = chain[i - 1] if i else None
            steps.append(ViewStep(node.name, self._why_what(node, parent, s)))
        if len(steps) > 12:
            steps = [steps[0], ViewStep("...", f"{len(steps) - 11} more"), *steps[-10:]]
        return steps

    def _why_what(self, node: torch.fx.Node, parent: torch.fx.Node | None, s: int | None) -> str:
        """What one link of a chain is: an input's role, an op, an in-place op, an allocation."""
        b = self._b
        later = ", its storage or layout changed in place later" if s == _U and node in b.metadata_mutated else ""
        if node.op in ("placeholder", "get_attr"):
            return self.role(node).value.replace("_", " ") + later
        effect = b.effect_of.get(node)
        op = _why_op(node)
        if effect is _GETITEM:
            src, key = (node.args + (None, None))[:2]
            return f"{_why_op(src) if isinstance(src, torch.fx.Node) else op}[{key}]" + later
        if effect is not None and effect.unknown:
            return f"{op}, an op the analysis does not model: any argument's memory or new" + later
        if parent is None:
            if s is not None and s != _U and b.storages[s].origin == node.name:
                return f"{op}: new storage" + later
            return (f"{op}: storage unknown" if s == _U else op) + later
        if effect is not None and parent in effect.writes:
            return f"{op}, in place" + later
        return op + later

    def _why_storage(self, s: int) -> str:
        """A storage in words: its id, role and origin."""
        if s == _U:
            return f"{UNKNOWN_STORAGE} (any storage)"
        info = self._b.storages[s]
        where = f"new memory of {info.origin}" if info.role is Role.INTERMEDIATE else f"{info.role.value.replace('_', ' ')} {info.origin}"
        return f"{info.id} ({where}{'; ' + info.note if info.note else ''})"

    def _why_alias(
        self, na: torch.fx.Node, nb: torch.fx.Node, pa: frozenset[int], pb: frozenset[int], shared: frozenset[int]
    ) -> str:
        """Why two values may share a storage."""
        known = [s for s in _why_order(shared) if s != _U]
        if na is nb:
            return "the same value" + (f", in {', '.join(self._why_storage(s) for s in _why_order(pa))}" if pa else "")
        if known:
            text = "both may live in " + ", ".join(self._why_storage(s) for s in known)
            others = [
                f"{n.name} may also live in {', '.join(_sid(s) for s in _why_order(p - shared))}"
                for n, p in ((na, pa), (nb, pb))
                if p - shared
            ]
            return "; ".join([text, *others])
        for n, p in ((na, pa), (nb, pb)):
            if _U in p:
                return f"{n.name} may live in any storage: {self._why_unknown_storage(n)}"
        unc = self._b.uncertain
        for (n, p), (m, q) in (((na, pa), (nb, pb)), ((nb, pb), (na, pa))):
            mine = [s for s in _why_order(p) if s in unc]
            if mine:
                return (
                    f"{n.name} lives in {self._why_storage(mine[0])}, an input without metadata that may be any "
                    f"input's memory, {m.name}'s {', '.join(self._why_storage(s) for s in _why_order(q))} included"
                )
        return "their storages may be one allocation"

    def _why_unknown_storage(self, n: torch.fx.Node) -> str:
        """Why a value's points-to set holds :data:`UNKNOWN_STORAGE`."""
        if n in self._b.metadata_mutated:
            return "an op changes its storage or layout in place (set_, t_, resize_, as_strided_...)"
        chain = self._why_chain(n, _U)
        root = chain[0] if chain else n
        if root in self._b.metadata_mutated:
            return f"it is a view of {root.name}, and an op changes {root.name}'s storage or layout in place"
        return f"it comes from {root.name} ({self._why_what(root, None, _U)})"

    def _why_apart(self, na: torch.fx.Node, nb: torch.fx.Node, pa: frozenset[int], pb: frozenset[int]) -> str:
        """Why two values cannot share a storage."""
        for n, p in ((na, pa), (nb, pb)):
            if not p:
                return f"{n.name} is not a tensor value (it lives in no storage)"
        where_a = ", ".join(self._why_storage(s) for s in _why_order(pa))
        where_b = ", ".join(self._why_storage(s) for s in _why_order(pb))
        return f"distinct storages: {na.name} lives in {where_a}, {nb.name} in {where_b}"

    def _why_overlap(
        self, na: torch.fx.Node, nb: torch.fx.Node, pa: frozenset[int], pb: frozenset[int], chain: list[torch.fx.Node]
    ) -> str:
        """Why the bytes of two values that may alias may (or may not) meet (as :meth:`may_overlap` decides)."""
        if na is nb:
            return "the same value"
        b = self._b
        if pa != pb:
            text = (
                f"unknown: they may live in different sets of storages ({na.name}: "
                f"{', '.join(_sid(s) for s in _why_order(pa))}; {nb.name}: {', '.join(_sid(s) for s in _why_order(pb))}), "
                "and regions are compared only inside one known storage"
            )
            opaque = next((n for n in chain if self.is_unknown(n)), None)
            if opaque is not None:
                note = b.effect_of[opaque].note
                detail = f" ({note})" if note and note != "unknown op" else ""
                text += f"; {opaque.name} is an op the analysis does not model{detail}"
            return text
        ra, rb = b.region(na), b.region(nb)
        gaps = [f"{n.name} has no exact region: {self._why_no_region(n)}" for n, r in ((na, ra), (nb, rb)) if r is None]
        if gaps or ra is None or rb is None:
            return "unknown: " + "; ".join(gaps)
        shown = f"{na.name} {ra.describe()}, {nb.name} {rb.describe()}"  # offset+[sizes]:[strides]xitemsize
        concrete = ra.is_concrete and rb.is_concrete
        if not regions_may_overlap(ra, rb):
            return f"disjoint: exact regions {shown} share no byte" + ("" if concrete else " (proved for every size)")
        if concrete:
            return f"yes: exact regions {shown} share bytes"
        return f"unknown: symbolic regions {shown}; that they share no byte could not be proved"

    def _why_no_region(self, n: torch.fx.Node) -> str:
        """Why a value has no exact region in its storage."""
        b = self._b
        pts = self._pts(n)
        if _U in pts:
            return f"it may live in any storage: {self._why_unknown_storage(n)}"
        if len(pts) > 1:
            chain = self._why_chain(n, min(pts))
            opaque = next((m for m in chain if self.is_unknown(m)), None)
            why = f": {opaque.name} is an op the analysis does not model" if opaque is not None else ""
            return f"it may live in several storages ({', '.join(_sid(s) for s in _why_order(pts))}){why}"
        facts = b.facts.get(n)
        if facts is None:
            if "val" not in n.meta:
                return "missing metadata (the node has no meta['val'])"
            if b.cache.tensor(n) is not None:
                return (
                    "its recorded layout does not place it inside its base's storage (the trace gave it a storage "
                    "of its own: a program loaded from .pt2, a real-mode make_fx trace, or views of a rewritten clone)"
                )
            return "its metadata does not describe a tensor"
        if not facts.strided:
            return "its layout is not strided (sparse or nested)"
        if n.op == "get_attr":
            return "a constant without its module: its place in the storage is unknown"
        flagged = [p for p in b.unguarded_inputs() if pts & self._pts(p)]
        if flagged:
            return (
                f"an as_strided with an explicit storage offset places a view in the storage of {flagged[0].name}, "
                "whose offset a run is not held to"
            )
        return "its region is not known exactly"

    def _why_writes(self, na: torch.fx.Node, nb: torch.fx.Node) -> tuple[list[WriteNote], int]:
        """The writes that may touch either value, in graph order (at most :attr:`WhyAlias.MAX_WRITES`), and how many more."""
        pos = self._b.position
        touched: dict[torch.fx.Node, tuple[int, str, list[str]]] = {}
        for n in dict.fromkeys((na, nb)):
            for acc in self.accesses_overlapping(n, "write"):
                entry = touched.setdefault(acc.node, (acc.position, acc.value.name, []))
                if n.name not in entry[2]:
                    entry[2].append(n.name)
        lo, hi = sorted((pos[na], pos[nb]))
        notes = []
        for node, (p, via, names) in sorted(touched.items(), key=lambda kv: kv[1][0]):
            if node is na or node is nb:
                where = f"at {node.name}"
            elif p < lo:
                where = "before both"
            elif p > hi:
                where = "after both"
            else:
                where = "between them"
            notes.append(WriteNote(node.name, p, via, where, tuple(names)))
        cap = WhyAlias.MAX_WRITES
        return notes[:cap], max(0, len(notes) - cap)

    def __repr__(self) -> str:
        return (
            f"AliasAnalysis({len(self._b.position)} nodes, {len(self._b.storages)} storages, "
            f"{len(self._b.points_to)} tensor values)"
        )

    # -- views ------------------------------------------------------------------
    def view_source(self, n: NodeRef) -> torch.fx.Node | None:
        """The one value ``n`` is a pure view of, or None.

        A pure view is a call that reads and writes nothing and whose effect
        makes its value an alias of exactly one value (for ``getitem``, of what
        that output of its producer aliases). None for anything else: a fresh
        value, an in-place result, an unknown op, an alias of several values.

        Example
        -------
        >>> import torch
        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> from aliasing import analyze
        >>> def f(x):
        ...     v = x.view(2, 4)[1]
        ...     return v.add_(1).t(), x * 2
        >>> a = analyze(make_fx(f, tracing_mode="fake")(torch.randn(8)))
        >>> [getattr(a.view_source(n), "name", None) for n in ("view", "select", "add_", "t", "mul")]
        ['x_1', 'view', None, 'add_', None]
        """
        node = self._node(n)
        b = self._b
        e = b.effect_of.get(node)
        if node.op != "call_function" or e is None or e.unknown or e.reads or e.writes:
            return None
        if node.target is operator.getitem:
            src = node.args[0]
            se = b.effect_of.get(src) if isinstance(src, torch.fx.Node) else None
            srcs = () if se is None or se.unknown else se.outputs.get(node.args[1], ())
        else:
            srcs = e.outputs.get(SINGLE, ())
        return srcs[0] if len(srcs) == 1 else None

    def view_root(self, n: NodeRef) -> torch.fx.Node:
        """The top of ``n``'s chain of pure views (:meth:`view_source`); ``n`` itself when it is no view.

        Example
        -------
        >>> import torch
        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> from aliasing import analyze
        >>> def f(x):
        ...     v = x.view(2, 4)[1]
        ...     return v.add_(1).t()
        >>> a = analyze(make_fx(f, tracing_mode="fake")(torch.randn(8)))
        >>> a.view_root("select").name, a.view_root("t").name
        ('x_1', 'add_')
        """
        node = self._node(n)
        src = self.view_source(node)
        while src is not None:
            node, src = src, self.view_source(src)
        return node

    def views_of(self, n: NodeRef) -> tuple[torch.fx.Node, ...]:
        """``n`` and every pure view made from it, transitively (:meth:`view_source`), in graph order.

        Example
        -------
        >>> import torch
        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> from aliasing import analyze
        >>> def f(x):
        ...     v = x.view(2, 4)[1]
        ...     return v.add_(1).t(), x * 2
        >>> a = analyze(make_fx(f, tracing_mode="fake")(torch.randn(8)))
        >>> [v.name for v in a.views_of("x_1")]
        ['x_1', 'view', 'select']
        """
        node = self._node(n)
        out, seen = [node], {node}
        for v in out:  # grows while it is walked: each view's own views follow it
            for u in v.users:
                if u not in seen and self.view_source(u) is v:
                    seen.add(u)
                    out.append(u)
        return tuple(sorted(out, key=self._b.position.__getitem__))


def _why_order(pts: Iterable[int]) -> list[int]:
    """Storage indexes in creation order, :data:`UNKNOWN_STORAGE` last."""
    return sorted(pts, key=lambda s: (s == _U, s))


def _why_target(pts: frozenset[int], shared: frozenset[int]) -> int | None:
    """The storage a value's chain in :meth:`AliasAnalysis.why` leads to: the first shared one, else its first."""
    order = _why_order(shared) or _why_order(pts)
    return order[0] if order else None


def _why_op(node: torch.fx.Node) -> str:
    """A node's op in a word: ``slice``, ``mylib.foo``, ``.add()``, ``module fc``..."""
    t = node.target
    if node.op == "call_function":
        if isinstance(t, torch._ops.OpOverload):
            return t._opname if t.namespace == "aten" else f"{t.namespace}.{t._opname}"
        return str(getattr(t, "__name__", t))
    if node.op == "call_method":
        return f".{t}()"
    if node.op == "call_module":
        return f"module {t}"
    return node.op


def analyze(
    target: torch.fx.GraphModule | torch.fx.Graph | torch.export.ExportedProgram | Target,
    *,
    donated_inputs: Iterable[int] = (),
    effects: EffectTable | None = None,
) -> AliasAnalysis:
    """Analyse which values of a graph share memory and who reads and writes it.

    Parameters
    ----------
    target : torch.fx.GraphModule, torch.fx.Graph or torch.export.ExportedProgram
        The program. Facts come from each node's ``meta['val']`` (fake tensors)
        and op schemas; nodes without metadata are treated conservatively.
    donated_inputs : iterable of int
        Placeholder positions (0-based, graph order) whose storage the caller
        gives up: their final value is unspecified.
    effects : EffectTable
        Memory-effect rules; :data:`DEFAULT_EFFECTS` by default.

    Returns
    -------
    AliasAnalysis

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x[0].add_(1), tracing_mode="fake")(torch.zeros(2, 3))
    >>> a = analyze(gm)
    >>> a.may_alias("x_1", "select"), str(a.role("x_1"))
    (True, 'user_input')
    """
    resolved = target if isinstance(target, Target) else resolve_target(target, donated_inputs)
    if resolved is not target:
        # A program loaded from its .pt2 gets its fake values propagated again (aliasing.core.fake_values).
        restore_storage_identity(resolved.module, resolved.graph)
    builder = _Builder(resolved, effects if effects is not None else DEFAULT_EFFECTS)
    for counter in _COUNTERS:
        counter.count += 1
    with paused_gc():
        builder.run()
    if builder.torch_level_only:
        _warn_once(
            "the graph has no ATen-level ops (a torch.fx.symbolic_trace graph?): torch-level calls are "
            "resolved to ATen schemas by name where that is unambiguous and treated as unknown otherwise; "
            "trace with torch.fx.experimental.proxy_tensor.make_fx or torch.export for exact answers",
            NoAtenOpsWarning,
        )
    else:
        missing, total = builder.undescribed, builder.described
        if missing:
            shown = ", ".join(n.name for n in missing[:3]) + (", ..." if len(missing) > 3 else "")
            _warn_once(
                f"{len(missing)} of {total} tensor-valued nodes have no meta['val'] ({shown}): the graph's "
                "metadata was stripped or never recorded, so their storages are unknown (may alias anything) "
                "and the clones they touch are kept; re-trace with make_fx or torch.export, or run "
                "aliasing.propagate_fake_values(gm, *inputs) first",
                MissingMetadataWarning,
            )
    return AliasAnalysis(resolved, builder)


class AnalysisCount:
    """How many analyses :func:`analyze` built inside a :func:`counting_analyses` block."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


_COUNTERS: list[AnalysisCount] = []


@contextmanager
def counting_analyses() -> Iterator[AnalysisCount]:
    """Count the analyses built inside the block, by any caller (a pass, its guard, the lowering).

    Example
    -------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x.clone() + 1, tracing_mode="fake")(torch.randn(2))
    >>> with counting_analyses() as n:
    ...     _ = analyze(gm), analyze(gm.graph)
    >>> n.count
    2
    """
    counter = AnalysisCount()
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _COUNTERS.remove(counter)


#: Per op, by identity: whether it returns a tensor (the op is kept in the value, so its id is not reused).
_RETURNS_TENSOR: dict[int, tuple[torch._ops.OpOverload, bool]] = {}


def _returns_tensor(op: torch._ops.OpOverload) -> bool:
    """Whether the op's schema returns a tensor (remembered per op)."""
    hit = _RETURNS_TENSOR.get(id(op))
    if hit is None:
        _RETURNS_TENSOR[id(op)] = hit = (op, any("Tensor" in str(r.type) for r in op._schema.returns))
    return hit[1]


#: Warning categories already issued inside the current :func:`warnings_once` block (None outside one).
_WARNED: contextvars.ContextVar[set[type[Warning]] | None] = contextvars.ContextVar("fx_aliasing_warned", default=None)


@contextmanager
def warnings_once() -> Iterator[None]:
    """Inside the block, each of the analysis's warnings is issued at most once, however many
    analyses run (``rewrite.explain.explain`` analyses the program and then its copy)."""
    if _WARNED.get() is not None:
        yield
        return
    token = _WARNED.set(set())
    try:
        yield
    finally:
        _WARNED.reset(token)


def _warn_once(message: str, category: type[Warning]) -> None:
    seen = _WARNED.get()
    if seen is not None:
        if category in seen:
            return
        seen.add(category)
    warnings.warn(message, category, stacklevel=_caller_level())


_LIBRARY = tuple(str(Path(__file__).resolve().parents[2] / pkg) + os.sep for pkg in ("aliasing", "rewrite"))


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside this library: warnings point at the caller's line."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def with_control_flow(table: EffectTable) -> EffectTable:
    """``table`` plus the control-flow rules (``cond``, ``while_loop``, ``wrap``...), whose
    subgraphs are analysed with the returned table.

    Use it after extending a table, so that nested subgraphs see the extension too.

    Examples
    --------
    >>> import torch
    >>> from aliasing.core.effects import Effect
    >>> mine = with_control_flow(DEFAULT_EFFECTS.with_rule(torch.ops.aten.relu.default,
    ...                                                  lambda node, facts: Effect(reads=(node.args[0],))))
    >>> "cond" in mine.hop_rules
    True
    """
    return tie_control_flow(table, analyze)


#: The default rules: schemas, hidden effects, higher-order ops and control flow
#: (:data:`aliasing.core.effects.SCHEMA_EFFECTS` tied to the control-flow rules).
DEFAULT_EFFECTS: EffectTable = with_control_flow(SCHEMA_EFFECTS)


_gc_depth = 0


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for one pass over a graph.

    One pass over a large graph allocates many small objects; the collections
    they trigger would otherwise traverse the whole heap (every node and fake
    tensor of the graph) again and again, which made analysis time grow faster
    than the graph. The collector is disabled and the existing objects frozen
    for the duration; both are restored afterwards (nested uses are no-ops).

    The objects the pass made are handed to the oldest generation with the
    rest (``gc.freeze()`` then ``gc.unfreeze()``): they survive the pass (the
    analysis, the rewritten graph), and a young-generation collection right
    after it would only traverse them all once more (a tenth of an analysis'
    time); the next full collection still frees any cycle among them.
    """
    global _gc_depth
    _gc_depth += 1
    enabled = gc.isenabled()
    if _gc_depth == 1:
        gc.freeze()
        gc.disable()
    try:
        yield
    finally:
        _gc_depth -= 1
        if _gc_depth == 0:
            gc.freeze()  # the pass's objects join the frozen ones, and all go to the oldest generation
            gc.unfreeze()
            if enabled:
                gc.enable()
