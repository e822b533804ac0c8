"""Apply clone-removal decisions to a graph, then verify: the one place the planner's decisions become graph edits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch.fx
from torch.fx.node import Argument

from rewrite.errors import RewriteError
from rewrite.planning.decisions import Decision, Reason
from rewrite.planning.state import Plan

__all__ = ["apply_decisions", "apply_plan"]

#: Removals that erase their node (condition C10) rather than replace it: a dead clone's own
#: decision (with or without nodes erased with it) and the candidates its group takes along.
_ERASURES = frozenset({Reason.DEAD_CLONE_ERASED, Reason.ERASED_WITH_DEAD_CLONE, Reason.COPY_ERASED_WITH_DEAD_CLONE})


def apply_decisions(graph: torch.fx.Graph, decisions: Sequence[Decision] | Plan) -> dict[str, str]:
    """Replace every removed clone by its original and erase it, all or nothing.

    Decisions must come from :func:`rewrite.planning.planner.plan_clone_elimination` on
    this graph or on a copy of it (in graph order; the nodes of a plan of this graph
    are used as they are, other decisions are matched by name). A dead clone's removal (condition C10:
    reason ``DEAD_CLONE_ERASED``, whether or not it names nodes in
    ``erased``) erases the clone and the nodes it names instead of replacing
    it; a removal of a node that such a group erases only erases it.
    Returns ``{removed clone name: replacement name}`` (a C10 clone maps to
    its original's name, which nothing uses in its place). Every decision is
    checked before the graph changes: a decision naming a node that is not
    there, whose replacement would be used before it is defined, or a plan
    that erases a node still used by a node that stays or is replaced (the
    plan's invariant; the message names both) raises :class:`RewriteError`
    and leaves the graph as it was. A failure while rewriting restores every
    use it had changed.

    Example
    -------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from aliasing import analyze
    >>> from rewrite.planning.planner import plan_clone_elimination
    >>> gm = make_fx(lambda x: x.clone() * 2, tracing_mode="fake")(torch.randn(3))
    >>> apply_decisions(gm.graph, plan_clone_elimination(analyze(gm)))
    {'clone': 'x_1'}
    """
    if isinstance(decisions, Plan) and all(n.graph is graph for n in decisions.nodes):
        return apply_plan(graph, decisions)
    # decisions a caller selected, or a plan of another graph (a copy of this one): by name
    return apply_plan(graph, _plan_of(graph, decisions))


def _plan_of(graph: torch.fx.Graph, decisions: Sequence[Decision]) -> Plan:
    """The removals among decisions given by name (a caller's own selection of a plan's decisions)."""
    by_name = {n.name: n for n in graph.nodes}
    removals = [d for d in decisions if d.action == "remove"]
    nodes: list[torch.fx.Node] = []
    erased: list[tuple[torch.fx.Node, ...]] = []
    for d in removals:
        node = by_name.get(d.node)
        if node is None:
            raise RewriteError(f"decision names a clone that is not in the graph: {d.node!r}")
        missing = [name for name in d.erased if name not in by_name]
        if missing:
            raise RewriteError(f"decision for {d.node!r} erases a node that is not in the graph: {missing[0]!r}")
        nodes.append(node)
        erased.append(tuple(by_name[name] for name in d.erased))
    return Plan(tuple(removals), tuple(nodes), tuple(erased))


def apply_plan(graph: torch.fx.Graph, plan: Plan) -> dict[str, str]:
    """Apply a :class:`~rewrite.planning.state.Plan` (its nodes, never looked up by name), all or nothing.

    What :func:`apply_decisions` does, for the planner's own plan.
    """
    removals = plan.removals()
    if not removals:
        return {}
    position = {n: i for i, n in enumerate(graph.nodes)}
    erased: dict[torch.fx.Node, None] = {}
    for _, d, group in removals:
        for member in group:
            if member not in position:
                raise RewriteError(f"decision for {d.node!r} erases a node that is not in the graph: {member.name!r}")
            erased[member] = None
    clones: list[torch.fx.Node] = []
    dead_clones: list[torch.fx.Node] = []
    for clone, d, group in removals:
        if clone not in position or not clone.args or not isinstance(clone.args[0], torch.fx.Node):
            raise RewriteError(f"decision names a clone that is not in the graph: {d.node!r}")
        if group or d.reason in _ERASURES or clone in erased:
            dead_clones.append(clone)
            continue
        if clone.args[0] not in position or position[clone.args[0]] >= position[clone]:
            raise RewriteError(f"the original of {d.node!r} is not defined before it")
        clones.append(clone)
    group_all = set(erased) | set(dead_clones)
    _check_erasures(group_all, {clone: cast(torch.fx.Node, clone.args[0]) for clone in clones})
    replaced = _replace(clones)
    for clone in dead_clones:
        if clone not in erased:  # the clone of a C10 group (its members are only erased)
            replaced[clone.name] = cast(torch.fx.Node, clone.args[0]).name
    for clone in clones:
        graph.erase_node(clone)
    # C10 groups: erase users before what they use (reverse graph order).
    for node in sorted(group_all, key=position.__getitem__, reverse=True):
        graph.erase_node(node)
    return replaced


def _replace(clones: list[torch.fx.Node]) -> dict[str, str]:
    """Make every user of each clone use its original instead; on a failure restore every use changed."""
    replaced: dict[str, str] = {}
    undo: list[tuple[torch.fx.Node, tuple[Argument, ...], dict[str, Argument]]] = []
    try:
        for clone in clones:
            original = cast(torch.fx.Node, clone.args[0])  # checked by the caller
            for user in list(clone.users):
                undo.append((user, user.args, dict(user.kwargs)))
            clone.replace_all_uses_with(original)
            replaced[clone.name] = original.name
        for clone in clones:
            if clone.users:
                raise RewriteError(f"{clone.name} still has users after its replacement")
    except BaseException:
        for user, args, kwargs in reversed(undo):
            user.args, user.kwargs = args, kwargs
        raise
    return replaced


def _check_erasures(group: set[torch.fx.Node], replaced: dict[torch.fx.Node, torch.fx.Node]) -> None:
    """The invariant of every plan: no erased node is used by a node that stays or is replaced."""
    for node in sorted(group, key=lambda n: n.name):
        outside = [u for u in node.users if u not in group]
        if outside:
            users = ", ".join(
                f"{u.name} (replaced by {replaced[u].name})" if u in replaced else f"{u.name} (which stays)"
                for u in outside
            )
            raise RewriteError(f"inconsistent plan: {node.name} is erased but still used by {users}")
