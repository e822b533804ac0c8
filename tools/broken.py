"""Deliberately broken clone-elimination passes, to prove the fuzzer catches them.

Never use these on a real program: each one removes clones the program needs.
They exist so that a test can show that :func:`rewrite.testing.programs` with
:func:`rewrite.testing.check_pass` finds a counterexample to each of them
within a bounded number of examples:

- :func:`skipping` builds the library's own pass with some conditions of
  docs/DESIGN.md (C1-C6) not checked (``rewrite.planning.planner.plan_clone_elimination``'s
  ``skip``), for example ``skipping("C2")``;
- :func:`drop_every_clone` is the naive pass: every clone replaced by its input;
- :func:`output_only_pass` is the "output-only" rule of the unsafe clone
  elimination that serving engines ship: it looks only at graph outputs and
  removes every same-layout clone unless the clone is returned and its original
  is a graph input. :func:`plan_output_only`, :func:`remove_clones` and
  :func:`output_only_clone_elimination` are its parts; the benchmarks
  (``benchmarks/scaling.py``) compare it with the real pass.

``python -m tools.broken`` prints how long the fuzzer takes to catch the naive pass
and the one that ignores later writes to a clone's original (C2 skipped):
:func:`seconds_to_catch`, CPU seconds of a ``@given(programs())`` test of
:func:`rewrite.testing.check_pass` until it fails, shrinking included, with
:data:`rewrite.testing.FUZZ_SETTINGS` and with Hypothesis's defaults.

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

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from hypothesis import settings as Settings

    from rewrite.testing.programs import Program

__all__ = [
    "BROKEN_CONDITIONS",
    "CATCH_PASSES",
    "Catch",
    "drop_every_clone",
    "eliminate_clones_skipping",
    "output_only_clone_elimination",
    "output_only_pass",
    "plan_output_only",
    "remove_clones",
    "seconds_to_catch",
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


def drop_every_clone(gm: torch.fx.GraphModule) -> None:
    """The naive clone elimination (UNSOUND): every ``aten.clone`` replaced by its input.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: (x.clone(),), tracing_mode="fake")(torch.randn(2))
    >>> drop_every_clone(gm)
    >>> "clone" in gm.code
    False
    """
    for node in list(gm.graph.nodes):
        if node.target is torch.ops.aten.clone.default:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    gm.recompile()


def _ignoring_later_writes(program: Program) -> Callable[[torch.fx.GraphModule], None]:
    return skipping("C2", donated_inputs=program.donated_inputs)


#: The wrong passes of the catch-time figure (:func:`seconds_to_catch`), each made for the program
#: under test: the naive one, and the library's pass without C2 (a write to the original between
#: the clone and a later read of the clone is ignored).
CATCH_PASSES: dict[str, Callable[[Program], Callable[[torch.fx.GraphModule], None]]] = {
    "drop-every-clone": lambda program: drop_every_clone,
    "ignores-later-writes": _ignoring_later_writes,
}


@dataclass(frozen=True)
class Catch:
    """How a ``@given(programs())`` test of a wrong pass ended (:func:`seconds_to_catch`).

    ``cpu_seconds`` is the process's CPU time (``time.process_time``) from the test's call
    to its failure, generation and shrinking included; ``examples`` the programs the test
    body checked (shrinking's included); ``first_failure`` the example that failed first
    (1-based); ``clause`` the reported failure's soundness clause (comma-separated when
    Hypothesis reports several distinct failures, ``failures_reported`` of them), ``""`` if none.
    """

    name: str
    settings: str
    seed: int
    caught: bool
    clause: str
    cpu_seconds: float
    examples: int
    first_failure: int
    shrunk_ops: int
    failures_reported: int


def _settings_named(name: str) -> Settings:
    from hypothesis import settings

    from rewrite.testing.programs import FUZZ_SETTINGS

    if name == "fuzz":  # what the README shows: FUZZ_SETTINGS (no example database, to measure)
        return settings(FUZZ_SETTINGS, database=None)
    if name == "defaults":  # Hypothesis's defaults, without the deadline (a draw traces a program)
        return settings(deadline=None, database=None)
    raise ValueError(f"settings are 'fuzz' or 'defaults', got {name!r}")


def seconds_to_catch(name: str, *, seed: int = 0, settings: str = "fuzz") -> Catch:
    """Run a ``@given(programs())`` test of :func:`rewrite.testing.check_pass` on the wrong pass
    ``name`` (of :data:`CATCH_PASSES`) under Hypothesis seed ``seed``, until it fails.

    ``settings`` is ``"fuzz"`` (:data:`rewrite.testing.FUZZ_SETTINGS`) or ``"defaults"``
    (Hypothesis's, without the deadline), both without the example database.

    Examples
    --------
    >>> catch = seconds_to_catch("drop-every-clone", seed=1)
    >>> catch.caught, catch.shrunk_ops <= 3
    (True, True)
    """
    from hypothesis import given
    from hypothesis import seed as hypothesis_seed

    from rewrite.errors import NotEquivalent
    from rewrite.testing.programs import check_pass, programs

    make_pass = CATCH_PASSES[name]
    counts = {"examples": 0, "first": 0, "ops": 0}

    @hypothesis_seed(seed)
    @_settings_named(settings)
    @given(programs())
    def test(program: Program) -> None:
        counts["examples"] += 1
        try:
            check_pass(make_pass(program), program)
        except NotEquivalent:
            counts["first"] = counts["first"] or counts["examples"]
            counts["ops"] = program.num_ops  # the last failure run is the reported one
            raise

    found: list[NotEquivalent] = []
    start = time.process_time()
    try:
        test()
    except NotEquivalent as err:
        found = [err]
    except Exception as err:  # an ExceptionGroup: Hypothesis's report of several distinct failures
        found = [e for e in getattr(err, "exceptions", ()) if isinstance(e, NotEquivalent)]
        if not found:
            raise
    seconds = time.process_time() - start
    clause = ",".join(sorted({e.clause for e in found}))
    return Catch(
        name, settings, seed, bool(found), clause, seconds, counts["examples"], counts["first"], counts["ops"], len(found)
    )


def _warm_up() -> float:
    """CPU seconds of the first program drawn, traced and checked in this process (torch's lazy imports)."""
    from rewrite.testing.programs import check_pass, sample_programs

    start = time.process_time()
    for program in sample_programs(1, seed=0):
        check_pass(lambda gm: None, program)
    return time.process_time() - start


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.broken [--seeds N] [--settings fuzz defaults] [--passes ...]``: the CPU seconds
    the fuzzer takes to catch each wrong pass of :data:`CATCH_PASSES` (a line each, then the
    figures as one JSON line); returns 1 if a pass was not caught."""
    parser = argparse.ArgumentParser(prog="python -m tools.broken", description=main.__doc__)
    parser.add_argument("--seeds", type=int, default=3, metavar="N", help="Hypothesis seeds 0 .. N-1 (default 3)")
    parser.add_argument("--settings", nargs="+", choices=("fuzz", "defaults"), default=["fuzz", "defaults"])
    parser.add_argument("--passes", nargs="+", choices=tuple(CATCH_PASSES), default=list(CATCH_PASSES))
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    warm_up = _warm_up()
    print(f"warm-up (first program traced and checked): {warm_up:.1f} s CPU", file=sys.stderr)
    catches: list[Catch] = []
    for name in args.passes:
        for which in args.settings:
            for seed in range(args.seeds):
                catch = seconds_to_catch(name, seed=seed, settings=which)
                catches.append(catch)
                verdict = f"caught ({catch.clause})" if catch.caught else "NOT CAUGHT"
                print(
                    f"{name:<21} {which:<8} seed {seed}: {catch.cpu_seconds:6.1f} s CPU, {catch.examples:4d} programs "
                    f"(first failure: #{catch.first_failure}, shrunk to {catch.shrunk_ops} statements), {verdict}",
                    flush=True,
                )
    summary: dict[str, Any] = {"warm_up_cpu_seconds": round(warm_up, 2), "catches": [asdict(c) for c in catches]}
    for c in summary["catches"]:
        c["cpu_seconds"] = round(c["cpu_seconds"], 2)
    print(json.dumps(summary, sort_keys=True))
    return 0 if all(c.caught for c in catches) else 1


if __name__ == "__main__":
    sys.exit(main())
