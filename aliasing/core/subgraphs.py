"""Effects of control-flow higher-order ops, from an analysis of their subgraphs.

A control-flow higher-order op (``cond``, ``while_loop``, ``invoke_subgraph``,
``wrap`` and the wrap-like ``tag_activation_checkpoint``,
``wrap_activation_checkpoint``, ``wrap_with_set_grad_enabled``,
``wrap_with_autocast``) calls subgraph modules (``get_attr`` nodes of the
graph's owning module) on its operands. Each subgraph is analysed with
:func:`aliasing.analyze` and summarised by :func:`summarize_subgraph` into a
:class:`SubgraphSummary`: which operand positions it writes and reads, and
which operand positions each of its outputs may alias. The op's
:class:`~aliasing.core.effects.Effect` combines the summaries:

R1 reads: every tensor operand (and ``cond``'s predicate), conservatively.
R2 writes: the operands some subgraph writes (any write overlapping the
   placeholder, in any branch, in the loop condition or the loop body).
R3 outputs: output ``k`` may alias the operands that output ``k`` of *any*
   branch may alias; it is fresh when no branch's output ``k`` aliases an input.
R4 ``while_loop``: a loop that runs zero times returns clones of its carried
   inputs; every later iteration's carried values are the body's outputs. So
   when the body returns no alias of its inputs, the operands written are
   those the body or the condition writes at the first iteration (later
   iterations write fresh memory or the same additional inputs), and every
   output is fresh. A body that may return an alias of its inputs is not
   summarised (see R5).

R5 Anything a summary cannot express makes the op an unknown op
(:func:`aliasing.core.effects.unknown_effect`, with the reason as its note):

a. the subgraph module cannot be found (no owning module) or the analysis
   of the subgraph fails;
b. a tensor placeholder without metadata (its region is unknown);
c. an access to a placeholder's storage that may touch the whole storage
   (an unknown op inside the subgraph, a value whose region is unknown):
   an :class:`~aliasing.core.effects.Effect` confines reads and writes to each
   operand's region;
d. ``as_strided`` (or ``_reshape_alias``) inside the subgraph: a view that
   may reach memory outside its base's elements;
e. a write to, or an output living in, memory that is neither an input nor
   fresh (a constant or parameter of the subgraph), or an output whose
   storage is unknown;
f. two outputs that may share one fresh storage (the effect gives each
   fresh output a storage of its own);
g. an output that may alias an input, when the region its metadata gives in
   the outer graph cannot be shown to be where it really lives (the
   subgraph's output and the aliased placeholder must have the same layout
   as the outer output and operand);
h. operand or output counts that do not match the subgraph, tensor operands
   passed by keyword, and a ``while_loop`` body that may return an alias of
   its inputs.

Nested control flow is analysed recursively: the subgraph analyses use the
same :class:`~aliasing.core.effects.EffectTable` as the rules (see
:func:`with_control_flow`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch
import torch.fx

from aliasing.core.effects import SINGLE, Effect, EffectRule, EffectTable, tensor_nodes, unknown_effect
from aliasing.core.facts import FactsCache, TensorFacts, same_layout
from aliasing.core.ops import ESCAPING_VIEWS, WRAP_LIKE
from aliasing.core.regions import Region
from aliasing.core.roles import UNKNOWN_STORAGE, Role
from aliasing.errors import OpaqueSubgraph


class SubgraphAccess(Protocol):
    """What the rules read of one access (an :class:`aliasing.Access`) in a subgraph's analysis."""

    @property
    def node(self) -> torch.fx.Node: ...
    @property
    def kind(self) -> Literal["read", "write"]: ...
    @property
    def value(self) -> torch.fx.Node: ...
    @property
    def whole(self) -> bool: ...


class SubgraphAnalysis(Protocol):
    """What the rules read of a subgraph's analysis: the part of :class:`aliasing.AliasAnalysis` they use.

    The rules receive the analysis entry point and never import :mod:`aliasing.core.analysis`
    (which imports them); this protocol is the type of what that entry point returns.
    """

    @property
    def nodes(self) -> tuple[torch.fx.Node, ...]: ...
    @property
    def storages(self) -> tuple[str, ...]: ...
    @property
    def output_node(self) -> torch.fx.Node | None: ...
    def storage_role(self, sid: str) -> Role: ...
    def storage_of(self, n: torch.fx.Node) -> frozenset[str]: ...
    def storage_accesses(self, sid: str) -> Sequence[SubgraphAccess]: ...
    def facts_of(self, n: torch.fx.Node) -> TensorFacts | None: ...
    def region_of(self, n: torch.fx.Node) -> Region | None: ...
    def accesses_overlapping(self, n: torch.fx.Node, kind: str | None = None) -> Iterator[SubgraphAccess]: ...


#: Analyses one subgraph: the analysis entry point, bound to an effect table.
Analyzer = Callable[[torch.fx.GraphModule], SubgraphAnalysis]

__all__ = [
    "OpaqueSubgraph",
    "SubgraphAccess",
    "SubgraphAnalysis",
    "SubgraphSummary",
    "control_flow_rules",
    "summarize_subgraph",
    "tie_control_flow",
]


@dataclass(frozen=True)
class SubgraphSummary:
    """What one subgraph does to its inputs, by placeholder position.

    ``outputs[k]`` holds the placeholder positions output ``k`` may alias
    (empty: fresh memory or not a tensor). ``single_output`` is true when the
    subgraph returns one value rather than a tuple. ``input_facts`` and
    ``output_facts`` are the layouts the subgraph's metadata gives its
    placeholders and outputs; ``exact_outputs[k]`` says whether the analysis
    knows output ``k``'s region (one storage, known layout).
    """

    num_inputs: int
    reads: frozenset[int]
    writes: frozenset[int]
    outputs: tuple[frozenset[int], ...]
    single_output: bool
    input_facts: tuple[TensorFacts | None, ...]
    output_facts: tuple[TensorFacts | None, ...]
    exact_outputs: tuple[bool, ...]

    @property
    def aliases_inputs(self) -> bool:
        """True when some output may alias some input."""
        return any(self.outputs)


def _op_name(target: object) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target._schema.name)
    return ""


def summarize_subgraph(
    module: torch.fx.GraphModule,
    analyze: Analyzer,
    *,
    scalar_inputs: Iterable[int] = (),
) -> SubgraphSummary:
    """Summarise what a subgraph does to its inputs (see the module docstring).

    Parameters
    ----------
    module : torch.fx.GraphModule
        The subgraph, as a higher-order op calls it (placeholders are its operands).
    analyze : callable
        The analysis entry point, applied to ``module`` (``aliasing.analyze``, or
        one bound to an extended effect table). This module does not import it.
    scalar_inputs : iterable of int
        Placeholder positions known to receive Python scalars (the op passes a
        constant there, such as a size that tracing lifted into an operand):
        they are not tensors even without metadata.

    Returns
    -------
    SubgraphSummary

    Raises
    ------
    OpaqueSubgraph
        When the subgraph does something a summary cannot express (R5 a-f).

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> import aliasing
    >>> def body(x, y):
    ...     x.add_(1)
    ...     return (x * y,)
    >>> gm = make_fx(body, tracing_mode="fake")(torch.ones(2), torch.ones(2))
    >>> s = summarize_subgraph(gm, aliasing.analyze)
    >>> sorted(s.writes), s.outputs
    ([0], (frozenset(),))
    """
    try:
        analysis = analyze(module)
    except RecursionError as err:
        raise OpaqueSubgraph(f"the analysis of the subgraph recursed too deeply: {err}") from err
    except Exception as err:  # any failure inside the subgraph analysis makes the op opaque (R5 a)
        raise OpaqueSubgraph(f"the analysis of the subgraph failed: {type(err).__name__}: {err}") from err
    return _summarize(analysis, frozenset(scalar_inputs))


def _summarize(analysis: SubgraphAnalysis, scalar_inputs: frozenset[int]) -> SubgraphSummary:
    nodes = analysis.nodes
    _check_escaping_views(nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    scalars = {p for i, p in enumerate(placeholders) if i in scalar_inputs}
    by_storage, input_facts = _input_storages(analysis, placeholders, scalars)
    _check_storage_accesses(analysis, by_storage, scalars)
    out_node = analysis.output_node
    returned: Any = out_node.args[0] if out_node is not None and out_node.args else ()
    single = not isinstance(returned, (tuple, list))
    elements: Sequence[Any] = [returned] if single else list(returned)
    tensor_positions = frozenset(i for sids in by_storage.values() for i in sids)
    outputs, output_facts, exact = _summarize_outputs(analysis, elements, by_storage, scalars, tensor_positions)
    reads = frozenset(i for i in tensor_positions if _touched(analysis, placeholders[i], "read", scalars, out_node))
    writes = frozenset(i for i in tensor_positions if _touched(analysis, placeholders[i], "write", scalars, out_node))
    return SubgraphSummary(
        num_inputs=len(placeholders),
        reads=reads,
        writes=writes,
        outputs=tuple(outputs),
        single_output=single,
        input_facts=tuple(input_facts),
        output_facts=tuple(output_facts),
        exact_outputs=tuple(exact),
    )


def _check_escaping_views(nodes: Iterable[torch.fx.Node]) -> None:
    """Raise when a node of the subgraph is a view that may reach outside its base (R5 d)."""
    for n in nodes:
        if n.op == "call_function" and _op_name(n.target) in ESCAPING_VIEWS:
            raise OpaqueSubgraph(f"{n.name} ({_op_name(n.target)}) may reach memory outside its base (R5 d)")


def _input_storages(
    analysis: SubgraphAnalysis, placeholders: Sequence[torch.fx.Node], scalars: set[torch.fx.Node]
) -> tuple[dict[str, list[int]], list[TensorFacts | None]]:
    """The placeholder positions of each input storage, and each placeholder's facts;
    raise for a tensor placeholder whose region is unknown (R5 b)."""
    by_storage: dict[str, list[int]] = {}
    input_facts: list[TensorFacts | None] = []
    for i, p in enumerate(placeholders):
        sids = analysis.storage_of(p)
        input_facts.append(analysis.facts_of(p))
        if not sids or p in scalars:
            continue  # not a tensor (an int, a SymInt, a constant the op passes)
        if analysis.region_of(p) is None:
            raise OpaqueSubgraph(
                f"placeholder {p.name} has no region (no metadata, or an op changes its layout) (R5 b)"
            )
        for sid in sids:
            by_storage.setdefault(sid, []).append(i)
    return by_storage, input_facts


def _check_storage_accesses(
    analysis: SubgraphAnalysis, by_storage: Mapping[str, list[int]], scalars: set[torch.fx.Node]
) -> None:
    """Raise for an access that may touch an input's whole storage (R5 c) and for a write
    to memory that is neither an input nor fresh (R5 e)."""
    scalar_storages = {sid for p in scalars for sid in analysis.storage_of(p)} - set(by_storage)
    for sid in analysis.storages:
        if sid in scalar_storages:
            continue  # the storage of a scalar operand without metadata: no memory at all
        role = analysis.storage_role(sid)
        # Accesses of scalar placeholders (their storage is "unknown" to the analysis) touch no memory.
        accesses = [acc for acc in analysis.storage_accesses(sid) if acc.value not in scalars]
        if sid in by_storage:
            for acc in accesses:
                if acc.whole:
                    raise OpaqueSubgraph(
                        f"{acc.node.name} may {acc.kind} anywhere in the storage of input {sid} (R5 c)"
                    )
        elif role is not Role.INTERMEDIATE:
            for acc in accesses:
                if acc.kind == "write":
                    raise OpaqueSubgraph(f"{acc.node.name} writes {role.value} memory of the subgraph (R5 e)")


def _summarize_outputs(
    analysis: SubgraphAnalysis,
    elements: Sequence[Any],
    by_storage: Mapping[str, list[int]],
    scalars: set[torch.fx.Node],
    tensor_positions: frozenset[int],
) -> tuple[list[frozenset[int]], list[TensorFacts | None], list[bool]]:
    """Per returned element: the input positions it may alias, its facts, and whether its
    region is known (R5 e, f raise)."""
    outputs: list[frozenset[int]] = []
    output_facts: list[TensorFacts | None] = []
    exact: list[bool] = []
    fresh_owner: dict[str, int] = {}
    for k, value in enumerate(elements):
        if not isinstance(value, torch.fx.Node) or value in scalars:
            outputs.append(frozenset())
            output_facts.append(None)
            exact.append(False)
            continue
        aliased = _output_aliases(analysis, k, value, by_storage, fresh_owner)
        outputs.append(frozenset(aliased & tensor_positions))
        output_facts.append(analysis.facts_of(value))
        exact.append(analysis.region_of(value) is not None)
    return outputs, output_facts, exact


def _output_aliases(
    analysis: SubgraphAnalysis,
    k: int,
    value: torch.fx.Node,
    by_storage: Mapping[str, list[int]],
    fresh_owner: dict[str, int],
) -> set[int]:
    """The input positions output ``k`` may alias; raise when it may live in unknown, constant
    or parameter memory (R5 e), or share a fresh storage with an earlier output (R5 f,
    ``fresh_owner`` records the first output of each fresh storage)."""
    sids = analysis.storage_of(value)
    if UNKNOWN_STORAGE in sids:
        raise OpaqueSubgraph(f"output {k} ({value.name}) may live in any storage (R5 e)")
    aliased: set[int] = set()
    for sid in sids:
        if sid in by_storage:
            aliased.update(by_storage[sid])
            continue
        role = analysis.storage_role(sid)
        if role is not Role.INTERMEDIATE:
            raise OpaqueSubgraph(f"output {k} ({value.name}) lives in {role.value} memory (R5 e)")
        other = fresh_owner.setdefault(sid, k)
        if other != k:
            raise OpaqueSubgraph(f"outputs {other} and {k} may share the fresh storage {sid} (R5 f)")
    return aliased


def _touched(
    analysis: SubgraphAnalysis, p: torch.fx.Node, kind: str, scalars: set[torch.fx.Node], out_node: torch.fx.Node | None
) -> bool:
    """Whether some access of ``kind`` (other than the output's) overlaps placeholder ``p``."""
    return any(acc.value not in scalars and acc.node is not out_node for acc in analysis.accesses_overlapping(p, kind))


# ---------------------------------------------------------------------------
# resolving subgraphs and operands


def _subgraph(node: torch.fx.Node, arg: object) -> torch.fx.GraphModule:
    """The GraphModule a ``get_attr`` argument names, from the node's owning module (R5 a)."""
    if not isinstance(arg, torch.fx.Node) or arg.op != "get_attr":
        raise OpaqueSubgraph(f"subgraph argument {arg!r} is not a get_attr node (R5 a)")
    owner = node.graph.owning_module
    if owner is None:
        raise OpaqueSubgraph("the graph has no owning module to read subgraphs from (R5 a)")
    obj: Any = owner
    for part in str(arg.target).split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if not isinstance(obj, torch.fx.GraphModule):
        raise OpaqueSubgraph(f"{arg.target} is not a subgraph module of the owning module (R5 a)")
    return obj


def _operand_nodes(operands: Sequence[Any]) -> list[torch.fx.Node | None]:
    return [x if isinstance(x, torch.fx.Node) else None for x in operands]


def _summary(node: torch.fx.Node, arg: object, operands: Sequence[Any], analyze: Analyzer) -> SubgraphSummary:
    """Summary of the subgraph ``arg`` names, called on ``operands`` (Python scalars among them are no tensors)."""
    scalars = [i for i, x in enumerate(operands) if not isinstance(x, (torch.fx.Node, torch.Tensor))]
    return summarize_subgraph(_subgraph(node, arg), analyze, scalar_inputs=scalars)


def _no_tensor_kwargs(node: torch.fx.Node) -> None:
    if tensor_nodes(node.kwargs):
        raise OpaqueSubgraph("operands passed by keyword are not mapped to placeholders (R5 h)")


def _outer_outputs(
    node: torch.fx.Node, facts: FactsCache, summaries: Sequence[SubgraphSummary]
) -> list[tuple[object, list[TensorFacts]]]:
    """Output keys of the op node, each with the layouts its metadata gives that output."""
    multi = facts.outputs(node)
    single = facts.tensor(node)
    count = len(summaries[0].outputs)
    if any(len(s.outputs) != count or s.single_output != summaries[0].single_output for s in summaries):
        raise OpaqueSubgraph("the subgraphs return different numbers of outputs (R5 h)")
    if multi is not None or (single is None and not summaries[0].single_output):
        if summaries[0].single_output:
            raise OpaqueSubgraph("the op returns a tuple but its subgraph returns one value (R5 h)")
        if multi is not None and len(multi) != count:
            raise OpaqueSubgraph(f"the op returns {len(multi)} values, its subgraph {count} (R5 h)")
        per_key: dict[object, list[TensorFacts]] = {k: [] for k in range(count)}
        if multi is not None:
            for k, f in enumerate(multi):
                if f is not None:
                    per_key[k].append(f)
        for user in node.users:
            if user.op == "call_function" and user.target is operator.getitem and len(user.args) >= 2:
                key = user.args[1]
                f = facts.tensor(user)
                if key in per_key and f is not None:
                    per_key[key].append(f)
        return list(per_key.items())
    if not summaries[0].single_output:
        raise OpaqueSubgraph("the op returns one value but its subgraph returns a tuple (R5 h)")
    return [(SINGLE, [single] if single is not None else [])]


def _combine(
    node: torch.fx.Node,
    facts: FactsCache,
    operands: Sequence[Any],
    summaries: Sequence[SubgraphSummary],
    extra_reads: Sequence[torch.fx.Node],
    note: str,
) -> Effect:
    """The op's effect from its subgraphs' summaries (R1-R3, R5 g)."""
    nodes = _operand_nodes(operands)
    for s in summaries:
        if s.num_inputs != len(operands):
            raise OpaqueSubgraph(f"{len(operands)} operands for a subgraph of {s.num_inputs} inputs (R5 h)")
    written = sorted(set().union(*(s.writes for s in summaries)))
    writes = tuple(n for n in (nodes[i] for i in written) if n is not None)
    outputs: dict[object, tuple[torch.fx.Node, ...]] = {}
    for index, (key, outer) in enumerate(_outer_outputs(node, facts, summaries)):
        aliased: set[int] = set()
        for s in summaries:
            positions = s.outputs[index]
            if not positions:
                continue
            aliased |= positions
            if outer:
                _check_placement(s, index, positions, outer, nodes, facts)
        outputs[key] = tuple(n for n in (nodes[i] for i in sorted(aliased)) if n is not None)
    reads = tuple(dict.fromkeys([*extra_reads, *tensor_nodes(list(operands))]))
    return Effect(reads=reads, writes=writes, outputs=outputs, note=note)


def _check_placement(
    summary: SubgraphSummary,
    index: int,
    positions: frozenset[int],
    outer: Sequence[TensorFacts],
    nodes: Sequence[torch.fx.Node | None],
    facts: FactsCache,
) -> None:
    """R5 g: an output aliasing an input must sit where the outer metadata says it does."""
    inner = summary.output_facts[index]
    if not summary.exact_outputs[index] or inner is None:
        raise OpaqueSubgraph(f"output {index} may alias an input at an unknown place (R5 g)")
    if not all(same_layout(inner, f) for f in outer):
        raise OpaqueSubgraph(f"output {index} aliases an input with a layout its metadata does not show (R5 g)")
    for i in positions:
        placeholder = summary.input_facts[i]
        operand = nodes[i]
        operand_facts = facts.tensor(operand) if operand is not None else None
        if placeholder is None or operand_facts is None or not same_layout(placeholder, operand_facts):
            raise OpaqueSubgraph(f"input {i} of the subgraph is laid out differently from its operand (R5 g)")


# ---------------------------------------------------------------------------
# the rules



def _guarded(name: str, rule: Callable[[torch.fx.Node, FactsCache], Effect]) -> EffectRule:
    def guarded(node: torch.fx.Node, facts: FactsCache) -> Effect:
        try:
            return rule(node, facts)
        except OpaqueSubgraph as err:
            return unknown_effect(node, f"{name}: {err}")

    guarded.__name__ = f"{name}_effect"
    guarded.__doc__ = f"Effect of ``{name}`` from its subgraphs (see :mod:`aliasing.core.subgraphs`)."
    return guarded


def _cond_rule(analyze: Analyzer) -> EffectRule:
    def rule(node: torch.fx.Node, facts: FactsCache) -> Effect:
        operands = node.args[3] if len(node.args) == 4 else None
        if not isinstance(operands, (tuple, list)):
            raise OpaqueSubgraph("expected cond(pred, true_graph, false_graph, operands) (R5 h)")
        _no_tensor_kwargs(node)
        pred, true_arg, false_arg = node.args[:3]
        summaries = [_summary(node, a, operands, analyze) for a in (true_arg, false_arg)]
        return _combine(node, facts, list(operands), summaries, tensor_nodes(pred), "cond: branches analysed")

    return _guarded("cond", rule)


def _while_loop_rule(analyze: Analyzer) -> EffectRule:
    def rule(node: torch.fx.Node, facts: FactsCache) -> Effect:
        args = node.args
        carried = args[2] if len(args) == 4 else None
        additional = args[3] if len(args) == 4 else None
        if not isinstance(carried, (tuple, list)) or not isinstance(additional, (tuple, list)):
            raise OpaqueSubgraph("expected while_loop(cond_fn, body_fn, carried_inputs, additional_inputs) (R5 h)")
        _no_tensor_kwargs(node)
        operands = [*carried, *additional]
        cond_fn = _summary(node, args[0], operands, analyze)
        body = _summary(node, args[1], operands, analyze)
        if len(body.outputs) != len(carried) or body.single_output:
            count = len(body.outputs)
            raise OpaqueSubgraph(f"the body returns {count} values for {len(carried)} carried inputs (R5 h)")
        if body.aliases_inputs:
            raise OpaqueSubgraph("the body may return an alias of its inputs (R4, R5 h)")
        # R4: outputs are fresh (clones, or the last iteration's fresh body outputs); the body's
        # summary gives the output keys, the condition's summary only its writes.
        effect = _combine(node, facts, operands, [body], (), "while_loop: condition and body analysed")
        if cond_fn.num_inputs != len(operands):
            raise OpaqueSubgraph(f"{len(operands)} operands for a condition of {cond_fn.num_inputs} inputs (R5 h)")
        nodes = _operand_nodes(operands)
        extra = tuple(n for n in (nodes[i] for i in sorted(cond_fn.writes)) if n is not None)
        writes = tuple(dict.fromkeys([*effect.writes, *extra]))
        return Effect(reads=effect.reads, writes=writes, outputs=effect.outputs, note=effect.note)

    return _guarded("while_loop", rule)


def _wrap_rule(name: str, subgraph_index: int, first_operand: int, analyze: Analyzer) -> EffectRule:
    def rule(node: torch.fx.Node, facts: FactsCache) -> Effect:
        if len(node.args) <= subgraph_index:
            raise OpaqueSubgraph(f"{name} without its subgraph argument (R5 h)")
        _no_tensor_kwargs(node)
        operands = list(node.args[first_operand:])
        summary = _summary(node, node.args[subgraph_index], operands, analyze)
        return _combine(node, facts, operands, [summary], (), f"{name}: subgraph analysed")

    return _guarded(name, rule)


def control_flow_rules(analyze: Analyzer) -> dict[str, EffectRule]:
    """Rules for the control-flow higher-order ops, keyed by op name (``EffectTable.hop_rules``).

    Parameters
    ----------
    analyze : callable
        Analyses one subgraph (a ``GraphModule``) with the table the rules belong
        to; the rules receive the analysis entry point, they do not import it.

    Returns
    -------
    dict[str, EffectRule]

    Examples
    --------
    >>> import aliasing
    >>> sorted(control_flow_rules(aliasing.analyze))[:3]
    ['cond', 'invoke_subgraph', 'tag_activation_checkpoint']
    """
    rules: dict[str, EffectRule] = {
        "cond": _cond_rule(analyze),
        "while_loop": _while_loop_rule(analyze),
    }
    for name, (sub, first) in WRAP_LIKE.items():
        rules[name] = _wrap_rule(name, sub, first, analyze)
    return rules


def tie_control_flow(table: EffectTable, analyze: Callable[..., SubgraphAnalysis]) -> EffectTable:
    """``table`` plus the control-flow rules, whose subgraphs are analysed with the returned table.

    ``analyze`` is the analysis entry point (called as ``analyze(gm, effects=table)``);
    :func:`aliasing.with_control_flow` binds it. Use it after extending a table, so
    that nested subgraphs see the extension too.

    Examples
    --------
    >>> import aliasing
    >>> "cond" in tie_control_flow(aliasing.core.effects.SCHEMA_EFFECTS, aliasing.analyze).hop_rules
    True
    """
    cell: list[EffectTable] = []

    def analyze_subgraph(gm: torch.fx.GraphModule) -> SubgraphAnalysis:
        return analyze(gm, effects=cell[0])

    tied = EffectTable(table.rules, {**table.hop_rules, **control_flow_rules(analyze_subgraph)})
    cell.append(tied)
    return tied
