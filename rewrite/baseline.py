"""UNSOUND baseline: the "output-only" clone-elimination rule, for comparison only.

Never use this module to optimise a program. It reimplements, from the
description in DESIGN.md, the unsafe rule of the clone elimination that vLLM
ships: it looks at the graph's outputs and inputs and at nothing else. A clone
``c = clone(o)`` is kept only when

- ``o`` is a graph input (a placeholder), and
- ``c`` or ``o`` is returned by the graph;

every other clone is replaced by its original. The rule ignores writes to the
original or to the clone (direct, through views, through chained in-place
results, through ``out=`` keywords, through custom ops with ``mutates_args``),
reads of the original after the clone is written, clones of inputs that are
written but not returned, and two clones of one value: DESIGN.md lists the
wrong results this gives. The benchmark (``benchmarks/scaling.py``) counts how
many of its removals :func:`rewrite.testing.check_equivalent` rejects.

Two deliberate differences from the shipped pass:

- the shipped pass raises an assertion on a clone with two direct in-place
  writers; this baseline does not crash, it removes the clone like any other;
- candidates are the library's own (:func:`rewrite.planner.is_clone_candidate`:
  ``aten.clone`` with or without ``memory_format`` and ``aten._to_copy``)
  restricted to clones that keep their original's layout (same dtype, device,
  sizes, strides, storage offset), so that the comparison isolates the
  output-only rule rather than counting layout changes it would also break.
"""

from __future__ import annotations

import torch
import torch.fx

from aliasing.facts import same_layout, tensor_facts
from rewrite.planner import is_clone_candidate

__all__ = ["output_only_clone_elimination", "plan_output_only", "remove_clones"]


def _returned(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    returned: set[torch.fx.Node] = set()
    for node in graph.find_nodes(op="output"):
        torch.fx.map_arg(node.args, returned.add)
    return returned


def _keeps_layout(clone: torch.fx.Node, original: torch.fx.Node) -> bool:
    a, b = tensor_facts(clone), tensor_facts(original)
    return a is not None and b is not None and same_layout(a, b)


def plan_output_only(graph: torch.fx.Graph) -> list[tuple[str, str]]:
    """Pairs ``(clone, replacement)`` the output-only rule removes, in graph order (UNSOUND).

    Pure: the graph is not changed. A clone whose original is itself removed is
    judged against (and replaced by) that clone's own replacement, as it would
    be if the removals were applied one after another.

    Parameters
    ----------
    graph : torch.fx.Graph
        A graph with ``meta['val']`` on its clones and their originals.

    Returns
    -------
    list of tuple of str
        ``(removed clone name, name of the node that replaces it)``.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: (x.clone(), (x + 1).clone()), tracing_mode="fake")(torch.randn(2))
    >>> plan_output_only(gm.graph)
    [('clone_1', 'add')]
    """
    returned = _returned(graph)
    replacement: dict[torch.fx.Node, torch.fx.Node] = {}
    plan: list[tuple[str, str]] = []
    for node in graph.nodes:
        if not is_clone_candidate(node):
            continue
        first = node.args[0]
        if not isinstance(first, torch.fx.Node) or not _keeps_layout(node, first):
            continue
        original = replacement.get(first, first)
        if original.op == "placeholder" and (node in returned or original in returned):
            continue  # the only hazard the rule knows: returning a graph input
        replacement[node] = original
        if node in returned:
            returned.add(original)  # the output now returns the original
        plan.append((node.name, original.name))
    return plan


def remove_clones(gm: torch.fx.GraphModule, names: list[str] | tuple[str, ...]) -> None:
    """Replace each named clone by its first argument, erase it and recompile ``gm``.

    Clones are removed in graph order; a later clone whose argument was
    removed already takes that argument's replacement.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x.clone() + 1, tracing_mode="fake")(torch.randn(2))
    >>> remove_clones(gm, ["clone"])
    >>> [n.name for n in gm.graph.nodes]
    ['x_1', 'add', 'output']
    """
    wanted = set(names)
    for node in list(gm.graph.nodes):
        if node.name in wanted:
            original = node.args[0]
            if not isinstance(original, torch.fx.Node):
                raise ValueError(f"{node.name} has no node argument to replace it with")
            node.replace_all_uses_with(original)
            gm.graph.erase_node(node)
            wanted.discard(node.name)
    if wanted:
        raise ValueError(f"no such nodes: {sorted(wanted)}")
    gm.recompile()


def output_only_clone_elimination(gm: torch.fx.GraphModule) -> list[str]:
    """Remove clones by the UNSOUND output-only rule; a baseline for comparison only.

    Rewrites ``gm`` in place (recompiled) and returns the names of the removed
    clones. See the module docstring for the rule and for why it is wrong.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        A graph with ``meta['val']`` fake tensors (``make_fx``/``torch.export``).

    Returns
    -------
    list of str
        Names of the removed clones, in graph order.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def f(x):
    ...     y = x + 1
    ...     c = y.clone()
    ...     y.mul_(2)          # the original is written while the clone is read later
    ...     return c + y
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    >>> output_only_clone_elimination(gm)  # wrong: c now reads the doubled y
    ['clone']
    """
    plan = plan_output_only(gm.graph)
    remove_clones(gm, [name for name, _ in plan])
    return [name for name, _ in plan]
