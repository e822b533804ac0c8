"""The one place that mutates a graph: apply clone-removal decisions, then verify."""

from __future__ import annotations

from collections.abc import Sequence

import torch.fx

from rewrite.decisions import Decision
from rewrite.errors import RewriteError

__all__ = ["apply_decisions"]


def apply_decisions(graph: torch.fx.Graph, decisions: Sequence[Decision]) -> dict[str, str]:
    """Replace every removed clone by its original and erase it.

    Decisions must come from :func:`rewrite.planner.plan_clone_elimination` on
    this graph (in graph order). Returns ``{removed clone name: replacement name}``.
    Raises :class:`RewriteError` if a decision names a node that is not there
    or the rewritten graph fails ``graph.lint()``.

    Example
    -------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from aliasing import analyze
    >>> from rewrite.planner import plan_clone_elimination
    >>> gm = make_fx(lambda x: x.clone() * 2, tracing_mode="fake")(torch.randn(3))
    >>> apply_decisions(gm.graph, plan_clone_elimination(analyze(gm)))
    {'clone': 'x_1'}
    """
    by_name = {n.name: n for n in graph.nodes}
    replaced: dict[str, str] = {}
    for d in decisions:
        if d.action != "remove":
            continue
        clone = by_name.get(d.node)
        if clone is None or not clone.args or not isinstance(clone.args[0], torch.fx.Node):
            raise RewriteError(f"decision names a clone that is not in the graph: {d.node!r}")
        original = clone.args[0]
        clone.replace_all_uses_with(original)
        graph.erase_node(clone)
        replaced[d.node] = original.name
    try:
        graph.lint()
    except Exception as e:  # lint raises plain RuntimeErrors
        raise RewriteError(f"the rewritten graph is malformed: {e}") from e
    return replaced
