"""Deliberately broken clone-elimination passes, to prove the fuzzer catches them.

Never use these on a real program: each one removes clones the program needs.
They exist so that a test can show that :func:`rewrite.testing.programs` with
:func:`rewrite.testing.check_pass` finds a counterexample to each of them
within a bounded number of examples:

- :func:`skipping` builds the library's own pass with some conditions of
  docs/DESIGN.md (C1-C6) not checked (``rewrite.planning.planner.plan_clone_elimination``'s
  ``skip``), for example ``skipping("C2")``;
- :func:`output_only_pass` is the "output-only" rule of the unsafe clone
  elimination that serving engines ship: it looks only at graph outputs and
  removes every same-layout clone unless the clone is returned and its original
  is a graph input. :func:`plan_output_only`, :func:`remove_clones` and
  :func:`output_only_clone_elimination` are its parts; the benchmarks
  (``benchmarks/scaling.py``) compare it with the real pass.

The output-only rule, reimplemented from docs/DESIGN.md's description of the
unsafe rule vLLM ships, looks at the graph's outputs and inputs and at nothing
else. A clone ``c = clone(o)`` is kept only when ``o`` is a graph input (a
placeholder) and ``c`` or ``o`` is returned by the graph; every other clone
is replaced by its original. It ignores writes to the original or to the
clone (direct, through views, through chained in-place results, through
``out=`` keywords, through custom ops with ``mutates_args``), reads of the
original after the clone is written, clones of inputs that are written but
not returned, and two clones of one value: docs/DESIGN.md lists the wrong
results this gives. Two deliberate differences from the shipped pass:

- the shipped pass raises an assertion on a clone with two direct in-place
  writers; this one does not crash, it removes the clone like any other;
- candidates are the library's own (:func:`rewrite.planning.planner.is_clone_candidate`:
  ``aten.clone`` with or without ``memory_format`` and ``aten._to_copy``)
  restricted to clones that keep their original's layout (same dtype, device,
  sizes, strides, storage offset), so that a comparison isolates the
  output-only rule rather than counting layout changes it would also break.

Examples
--------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> from rewrite.testing import check_equivalent, copy_program
>>> def f(x):
...     y = x + 1
...     c = y.clone()
...     y.mul_(2)          # the original is written while the clone is still read
...     return (c,)
>>> gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
>>> broken = copy_program(gm)
>>> output_only_pass(broken)
>>> check_equivalent(gm, broken, [torch.randn(3)])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
rewrite.errors.NotEquivalent: [output] output 0: values differ ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.fx

from aliasing import analyze
from aliasing.core.facts import same_layout, tensor_facts
from aliasing.errors import AliasingError
from rewrite.editing.apply import apply_plan
from rewrite.errors import RewriteError
from rewrite.planning.candidates import is_clone_candidate
from rewrite.planning.decisions import CloneEliminationReport
from rewrite.planning.planner import plan
from rewrite.planning.state import CONDITIONS, PlanningState

__all__ = [
    "BROKEN_CONDITIONS",
    "eliminate_clones_skipping",
    "output_only_clone_elimination",
    "output_only_pass",
    "plan_output_only",
    "remove_clones",
    "skipping",
]

#: The conditions whose absence the fuzzer must detect (``tests/rewrite/testing/test_fuzz_power.py``).
BROKEN_CONDITIONS: tuple[str, ...] = ("C2", "C3", "C5", "C6")


def eliminate_clones_skipping(
    gm: torch.fx.GraphModule, skip: Iterable[str], *, donated_inputs: Iterable[int] = ()
) -> CloneEliminationReport:
    """The library's clone elimination with the conditions in ``skip`` not checked (unsound).

    Parameters
    ----------
    gm : torch.fx.GraphModule
        Rewritten in place and recompiled.
    skip : iterable of str
        Conditions among ``"C1"`` .. ``"C6"`` to leave out.
    donated_inputs : iterable of int
        Placeholder positions the caller gives up.

    Returns
    -------
    CloneEliminationReport

    Raises
    ------
    aliasing.AliasingError
        If ``skip`` names an unknown condition.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: (x.clone(),), tracing_mode="fake")(torch.randn(2))
    >>> eliminate_clones_skipping(gm, ["C6"]).removed  # the output now aliases the input
    ('clone',)
    """
    analysis = analyze(gm, donated_inputs=tuple(donated_inputs))
    planned = plan(PlanningState(analysis, unchecked=frozenset(skip)))  # raises on an unknown condition
    if apply_plan(gm.graph, planned):
        gm.recompile()
    return CloneEliminationReport(tuple(planned))


def skipping(*conditions: str, donated_inputs: Iterable[int] = ()) -> Callable[[torch.fx.GraphModule], None]:
    """A pass (for :func:`rewrite.testing.check_pass`) that skips ``conditions``.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: (x.clone(),), tracing_mode="fake")(torch.randn(2))
    >>> skipping("C6")(gm)
    >>> "clone" in gm.code
    False
    """
    if not conditions:
        raise AliasingError("skipping() needs at least one condition to leave out")
    skip = frozenset(conditions)
    donated = tuple(donated_inputs)
    unknown = skip - CONDITIONS
    if unknown:
        raise AliasingError(f"unknown conditions to skip: {sorted(unknown)}; known: {sorted(CONDITIONS)}")

    def broken_pass(gm: torch.fx.GraphModule) -> None:
        eliminate_clones_skipping(gm, skip, donated_inputs=donated)

    broken_pass.__name__ = f"eliminate_clones_skipping_{'_'.join(sorted(skip))}"
    return broken_pass


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

    Raises
    ------
    rewrite.errors.RewriteError
        If a name is not a node of ``gm`` or names a node without a node argument.

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
            original = node.args[0] if node.args else None
            if not isinstance(original, torch.fx.Node):
                raise RewriteError(f"{node.name} has no node argument to replace it with")
            node.replace_all_uses_with(original)
            gm.graph.erase_node(node)
            wanted.discard(node.name)
    if wanted:
        raise RewriteError(f"no such nodes: {sorted(wanted)}")
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


def output_only_pass(gm: torch.fx.GraphModule) -> None:
    """The unsafe "output-only" clone elimination (:func:`output_only_clone_elimination`), as a pass.

    A clone that keeps its original's layout is replaced by its original unless
    the clone (or the original) is returned and the original is a graph input.
    Writes to the original or the clone, through views, ``out=`` or custom ops,
    and two clones of one value are all ignored: that is the bug.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: ((x + 1).clone(), x.clone()), tracing_mode="fake")(torch.randn(2))
    >>> output_only_pass(gm)
    >>> sum(n.target is torch.ops.aten.clone.default for n in gm.graph.nodes)
    1
    """
    output_only_clone_elimination(gm)
