"""Deliberately broken clone-elimination passes, to prove the fuzzer catches them.

Never use these on a real program: each one removes clones the program needs.
They exist so that a test can show that :func:`rewrite.testing.programs` with
:func:`rewrite.testing.check_pass` finds a counterexample to each of them
within a bounded number of examples:

- :func:`skipping` builds the library's own pass with some conditions of
  DESIGN.md (C1-C6) not checked (``rewrite.planner.plan_clone_elimination``'s
  ``skip``), for example ``skipping("C2")``;
- :func:`output_only_pass` is the "output-only" rule of the unsafe clone
  elimination that serving engines ship: it looks only at graph outputs and
  removes every same-layout clone unless the clone is returned and its original
  is a graph input.

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
from aliasing.errors import AliasingError
from rewrite.apply import apply_decisions
from rewrite.baseline import output_only_clone_elimination
from rewrite.decisions import CloneEliminationReport
from rewrite.planner import CONDITIONS, is_clone_candidate, plan_clone_elimination

__all__ = ["BROKEN_CONDITIONS", "eliminate_clones_skipping", "output_only_pass", "skipping"]

#: The conditions whose absence the fuzzer must detect (issue 5's power test).
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
    skip_set = frozenset(skip)
    unknown = skip_set - CONDITIONS
    if unknown:
        raise AliasingError(f"unknown conditions to skip: {sorted(unknown)}; known: {sorted(CONDITIONS)}")
    candidates = [n for n in gm.graph.nodes if is_clone_candidate(n)]
    decisions = plan_clone_elimination(
        analyze(gm, donated_inputs=tuple(donated_inputs)), candidates, skip=skip_set
    )
    if apply_decisions(gm.graph, decisions):
        gm.recompile()
    return CloneEliminationReport(tuple(decisions))


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


def output_only_pass(gm: torch.fx.GraphModule) -> None:
    """The unsafe "output-only" clone elimination (:mod:`rewrite.baseline`), as a pass.

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
