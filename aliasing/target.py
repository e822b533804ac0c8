"""Normalise what the user passes (GraphModule, Graph, ExportedProgram) into a graph plus roles."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.fx

from aliasing.errors import InvalidTargetError
from aliasing.roles import Role

__all__ = ["Target", "resolve_target"]


@dataclass(frozen=True)
class Target:
    """A graph, the module owning its attributes (if any), and the input roles by placeholder name."""

    graph: torch.fx.Graph
    module: Optional[torch.nn.Module]
    input_roles: dict[str, Role]
    donated: frozenset[str]


def _placeholders(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [n for n in graph.nodes if n.op == "placeholder"]


def resolve_target(target: Any, donated_inputs: Iterable[int] = ()) -> Target:
    """Return the :class:`Target` for a GraphModule, Graph or ExportedProgram.

    ``donated_inputs`` are placeholder positions (0-based, graph order).
    """
    roles: dict[str, Role] = {}
    module: Optional[torch.nn.Module]
    if isinstance(target, torch.export.ExportedProgram):
        module = target.graph_module
        graph = module.graph
        from torch.export.graph_signature import InputKind

        kinds = {
            InputKind.PARAMETER: Role.PARAMETER,
            InputKind.BUFFER: Role.BUFFER,
            InputKind.CONSTANT_TENSOR: Role.CONSTANT,
        }
        for spec in target.graph_signature.input_specs:
            name = getattr(spec.arg, "name", None)
            if name is not None:
                roles[name] = kinds.get(spec.kind, Role.USER_INPUT)
    elif isinstance(target, torch.fx.GraphModule):
        module, graph = target, target.graph
    elif isinstance(target, torch.fx.Graph):
        graph = target
        owner = getattr(target, "owning_module", None)
        module = owner if isinstance(owner, torch.nn.Module) else None
    else:
        raise InvalidTargetError(
            f"expected a torch.fx.GraphModule, torch.fx.Graph or torch.export.ExportedProgram, "
            f"got {type(target).__name__}"
        )
    placeholders = _placeholders(graph)
    donated: set[str] = set()
    for pos in donated_inputs:
        if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos < len(placeholders):
            raise InvalidTargetError(
                f"donated input position {pos!r} is not a placeholder position "
                f"(the graph has {len(placeholders)} placeholders)"
            )
        donated.add(placeholders[pos].name)
    for p in placeholders:
        role = roles.get(p.name, Role.USER_INPUT)
        if p.name in donated:
            role = Role.DONATED_INPUT
        roles[p.name] = role
    return Target(graph, module, roles, frozenset(donated))
