"""The fixes of H1-H6: decided first (:class:`CloneInput`, :class:`Reorder`), applied together, in rounds.

A stage plans its fixes against a fresh analysis, :func:`_apply` makes them
(the one place the planned fixes edit a graph), and :func:`guarded_rounds`
repeats that until a round finds nothing, never raising.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.fx

from aliasing import AliasAnalysis, analyze
from rewrite.editing.nodes import Builder, LoweringSkip, recompile, replay, view_chain
from rewrite.guard.common import copy_nbytes, log, node_builder
from rewrite.guard.hazards import Guarded, GuardReport, Hazard
from rewrite.lowering.copies import exact_copy

aten = torch.ops.aten


@dataclass(frozen=True)
class CloneInput:
    """Clone ``value`` before ``before`` and make ``user`` read the clone (replay: rebuild the view first)."""

    hazard: Hazard
    user: torch.fx.Node
    value: torch.fx.Node
    before: torch.fx.Node
    evidence: tuple[str, ...]
    replay_from: torch.fx.Node | None = None  # a view defined after ``before``: replay its chain on this root
    exact_layout: bool = False  # the copy's layout is observed (a result, a scatter's base): copy it exactly


@dataclass(frozen=True)
class Reorder:
    """Move ``node`` (with the views it needs, ``moved``) just before ``before``."""

    hazard: Hazard
    node: torch.fx.Node
    before: torch.fx.Node
    moved: tuple[torch.fx.Node, ...]
    evidence: tuple[str, ...]


#: A planned fix: a clone of what a node reads, or a reordering.
Fix = CloneInput | Reorder


def _apply(graph: torch.fx.Graph, fixes: Sequence[Fix]) -> tuple[list[Guarded], list[torch.fx.Node]]:
    """Apply the fixes (the one place the planned fixes mutate a graph); returns what was done and the copies made."""
    done: list[Guarded] = []
    copies: list[torch.fx.Node] = []
    b: Builder | None = None
    for fix in fixes:
        if isinstance(fix, Reorder):
            for n in (*fix.moved, fix.node):
                fix.before.prepend(n)
            done.append(Guarded(fix.hazard, fix.node.name, "reorder", tuple(n.name for n in (*fix.moved, fix.node)), 0, fix.evidence))
            continue
        if b is None:
            b = node_builder(graph)
        start = len(b.created)
        with graph.inserting_before(fix.before):
            source = fix.value
            if fix.replay_from is not None:
                found = view_chain(fix.value)
                if found is None:
                    raise LoweringSkip(f"{fix.value.name}: no view chain to replay")
                source = replay(b, found[1], fix.replay_from)
            c = value = None
            if fix.exact_layout:
                try:
                    cp = exact_copy(b, source)  # a flat prefix copy for a strided view, in its dtype
                    c, value = cp.clone, cp.value
                except LoweringSkip:
                    pass
            if c is None or value is None:
                c = value = b.call(aten.clone.default, (source,))
        fix.user.replace_input_with(fix.value, value)
        helpers = tuple(n.name for n in b.created[start:] if n is not c)
        done.append(Guarded(fix.hazard, fix.user.name, "clone", (c.name,), copy_nbytes(c), fix.evidence + helpers))
        copies.append(c)
    if fixes:
        graph.lint()
        recompile(graph)
    return done, copies


def guarded_rounds(
    graph: torch.fx.Graph,
    plan: Callable[[AliasAnalysis], list[Fix]],
    *,
    relevant: Callable[[torch.fx.Graph], bool],
    donated_inputs: Iterable[int],
    max_rounds: int,
) -> GuardReport:
    """Plan against a fresh analysis, apply, repeat until a round finds nothing (never raises).

    ``relevant`` is a cheap scan of the graph: without the nodes a hazard
    needs, no analysis is built at all.
    """
    done: list[Guarded] = []
    copies: list[torch.fx.Node] = []
    seen: set[tuple[Hazard, torch.fx.Node]] = set()
    donated = tuple(donated_inputs)
    try:
        for _ in range(max(1, max_rounds)):
            if not relevant(graph):
                break
            fixes = [f for f in plan(analyze(graph, donated_inputs=donated)) if (f.hazard, _where(f)) not in seen]
            if not fixes:
                break
            seen.update((f.hazard, _where(f)) for f in fixes)
            applied, made = _apply(graph, fixes)
            done.extend(applied)
            copies.extend(made)
    except Exception as e:  # never raise from a pass: keep what was done (each fix leaves a valid graph)
        log.warning("fx-aliasing guard stopped: %s: %s", type(e).__name__, e)
        return GuardReport(tuple(done), f"{type(e).__name__}: {e}", copies=tuple(copies))
    return GuardReport(tuple(done), copies=tuple(copies))


def _where(f: Fix) -> torch.fx.Node:
    return f.node if isinstance(f, Reorder) else f.user
