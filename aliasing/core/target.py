"""Normalise what the user passes (GraphModule, Graph, ExportedProgram) into a graph plus roles."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from aliasing.core.roles import Role
from aliasing.errors import InvalidTargetError, describe_node

__all__ = ["OFFSET_UNKNOWN", "Target", "check_donated_inputs", "resolve_target", "validate_graph"]

#: ``meta`` key of a placeholder whose recorded storage offset is not its input's in every run
#: (a program loaded from its ``.pt2`` records every input at offset 0; the graph of an exported
#: program is called with inputs of any offset). Kept in the metadata, so that copies keep it.
OFFSET_UNKNOWN = "fx_aliasing_offset_unknown"


@dataclass(frozen=True)
class Target:
    """A graph, the module owning its attributes (if any), and the input roles by placeholder name."""

    graph: torch.fx.Graph
    module: torch.nn.Module | None
    #: placeholder name -> role; a placeholder not named here is a user input
    input_roles: dict[str, Role]
    donated: frozenset[str]
    #: placeholders whose storage offset may differ from the recorded one from run to run: the
    #: user inputs of an ``ExportedProgram`` (``ep.module()`` checks sizes, not offsets)
    offset_unknown: frozenset[str] = frozenset()


def check_donated_inputs(donated_inputs: object) -> tuple[int, ...]:
    """The donated input positions as a tuple of ints, or :class:`InvalidTargetError`.

    Example
    -------
    >>> check_donated_inputs([0, 2])
    (0, 2)
    >>> check_donated_inputs(None)
    Traceback (most recent call last):
    ...
    aliasing.errors.InvalidTargetError: donated_inputs must be an iterable of placeholder positions (ints), got None
    """
    if isinstance(donated_inputs, (str, bytes)) or not isinstance(donated_inputs, Iterable):
        raise InvalidTargetError(
            f"donated_inputs must be an iterable of placeholder positions (ints), got {donated_inputs!r}"
        )
    positions = tuple(donated_inputs)
    for pos in positions:
        if isinstance(pos, bool) or not isinstance(pos, int):
            raise InvalidTargetError(f"donated input position {pos!r} is not an int")
    return positions


def _placeholders(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The placeholders in graph order (from FX's index of nodes by op: no pass over the graph)."""
    return list(graph.find_nodes(op="placeholder", sort=True))


def validate_graph(graph: torch.fx.Graph) -> None:
    """Raise :class:`InvalidTargetError` naming the node unless ``graph`` is well formed.

    Well formed: every argument of a node is a node of the same graph defined
    earlier in graph order (so there is no cycle), and the graph has at most one
    output node, its last node.

    Example
    -------
    >>> import torch
    >>> g = torch.fx.Graph()
    >>> x = g.placeholder("x")
    >>> y = g.call_function(torch.relu, (x,))
    >>> y.prepend(x.__class__(g, "early", "call_function", torch.neg, (y,), {}))
    >>> validate_graph(g)
    Traceback (most recent call last):
    ...
    aliasing.errors.InvalidTargetError: node early uses relu, which is defined after it (a cycle or a use before definition)
      at node: %early : [num_users=0] = call_function[target=torch.neg](args = (%relu,), kwargs = {})
    """
    seen: set[torch.fx.Node] = set()
    covers, add = seen.issuperset, seen.add
    nodes = graph.nodes
    for node in nodes:
        # One call per node: every input defined earlier. (``_input_nodes`` is the dict whose
        # keys ``all_input_nodes`` copies into a new list, on every torch from 2.13 on.)
        if not covers(node._input_nodes):
            _bad_input(graph, node, seen)
        add(node)
    # At most one output node, the last (read from FX's index of nodes by op).
    outputs = graph.find_nodes(op="output", sort=True)
    if outputs and (len(outputs) > 1 or outputs[0] is not next(iter(reversed(nodes)))):
        first = outputs[0]
        after = first.next  # a node: the first output is not the last node
        raise InvalidTargetError(
            f"node {after.name} comes after the output node {first.name}\n  at node: {describe_node(after)}"
        )


def _bad_input(graph: torch.fx.Graph, node: torch.fx.Node, seen: set[torch.fx.Node]) -> None:
    """Raise :class:`InvalidTargetError` for the first input of ``node`` not among ``seen``."""
    for arg in node.all_input_nodes:
        if arg in seen:
            continue
        if arg.graph is not graph:
            raise InvalidTargetError(
                f"node {node.name} takes {arg.name}, a node of another graph\n  at node: {describe_node(node)}"
            )
        what = "itself" if arg is node else f"{arg.name}, which is defined after it"
        raise InvalidTargetError(
            f"node {node.name} uses {what} (a cycle or a use before definition)\n  at node: {describe_node(node)}"
        )


def resolve_target(target: Any, donated_inputs: Iterable[int] = (), *, validate: bool = True) -> Target:
    """Return the :class:`Target` for a GraphModule, Graph or ExportedProgram.

    ``donated_inputs`` are placeholder positions (0-based, graph order). The
    graph is validated first (:func:`validate_graph`) unless ``validate`` is False
    (a caller that validates it only where it reads it); every problem raises
    :class:`InvalidTargetError` before anything is analysed or changed.
    """
    roles: dict[str, Role] = {}
    module: torch.nn.Module | None
    graph: torch.fx.Graph
    if isinstance(target, torch.export.ExportedProgram):
        gm = target.graph_module
        module, graph = gm, gm.graph
        from torch.export.graph_signature import InputKind

        kinds = {
            InputKind.PARAMETER: Role.PARAMETER,
            InputKind.BUFFER: Role.BUFFER,
            InputKind.CONSTANT_TENSOR: Role.CONSTANT,
        }
        unguarded: set[str] = set()
        for spec in target.graph_signature.input_specs:
            name = getattr(spec.arg, "name", None)
            if name is not None:
                roles[name] = kinds.get(spec.kind, Role.USER_INPUT)
                if spec.kind == InputKind.USER_INPUT:
                    unguarded.add(name)
    elif isinstance(target, torch.fx.GraphModule):
        module, graph = target, target.graph
        unguarded = set()
    elif isinstance(target, torch.fx.Graph):
        unguarded = set()
        graph = target
        owner = getattr(target, "owning_module", None)
        module = owner if isinstance(owner, torch.nn.Module) else None
    else:
        raise InvalidTargetError(
            f"expected a torch.fx.GraphModule, torch.fx.Graph or torch.export.ExportedProgram, "
            f"got {type(target).__name__}"
        )
    if validate:
        validate_graph(graph)
    donated: set[str] = set()
    positions = check_donated_inputs(donated_inputs)
    if positions:  # (the placeholders are looked up only for donated positions)
        placeholders = _placeholders(graph)
        for pos in positions:
            if not 0 <= pos < len(placeholders):
                raise InvalidTargetError(
                    f"donated input position {pos!r} is not a placeholder position "
                    f"(the graph has {len(placeholders)} placeholders)"
                )
            donated.add(placeholders[pos].name)
        for name in donated:
            roles[name] = Role.DONATED_INPUT
    return Target(graph, module, roles, frozenset(donated), frozenset(unguarded))
