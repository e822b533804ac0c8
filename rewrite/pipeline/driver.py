"""The pipeline: lower the functional wrappers, then run the copy planner to a fixed point.

Each round analyses the graph as it is, asks the one copy planner
(:func:`rewrite.planning.planner.plan_clone_elimination`, conditions C1-C9) about every
clone and every ``copy_`` of the graph, applies the removals with the one
applier (:func:`rewrite.editing.apply.apply_decisions`: a removed clone is replaced by
its original, a removed self-copy by its destination) and recreates the nodes
whose fake values lived in a removed clone's storage
(:func:`rewrite.lowering.metadata.refresh_stale`). The planner's plan is a
fixed point of its own incremental analysis (C7); rounds repeat, against a
fresh analysis, until a round removes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable

import torch.fx

from aliasing import analyze
from aliasing.core.facts import meta_value
from rewrite.editing.apply import apply_decisions
from rewrite.editing.nodes import recompile
from rewrite.lowering.functional import lower_functional_ops
from rewrite.lowering.metadata import refresh_stale, storage_keys
from rewrite.lowering.reports import LoweringReport
from rewrite.pipeline.reports import PipelineReport
from rewrite.planning.decisions import CloneEliminationReport
from rewrite.planning.planner import is_clone_candidate, is_copy_candidate, plan_clone_elimination

__all__ = ["lower_and_eliminate", "plan_and_apply"]

log = logging.getLogger(__name__)


def plan_and_apply(
    graph: torch.fx.Graph, *, donated_inputs: Iterable[int] = (), keep: Collection[torch.fx.Node] = ()
) -> CloneEliminationReport:
    """One round: plan every clone and ``copy_`` of ``graph`` and apply the removals (mutates ``graph``).

    Never raises from the planning: a failure keeps every copy and is reported
    in :attr:`~rewrite.planning.decisions.CloneEliminationReport.error`. Nodes in
    ``keep`` are not judged (the hazard guard's copies, :mod:`rewrite.guard`:
    needed by what Inductor does later, not by the graph read literally).

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x[0].copy_(x[0]).sum() + x.clone().sum(), tracing_mode="fake")(torch.randn(2, 3))
    >>> [(d.node, d.action, str(d.reason)) for d in plan_and_apply(gm.graph).decisions]
    [('copy_', 'remove', 'copy-onto-itself'), ('clone', 'remove', 'removable')]
    """
    donated = tuple(donated_inputs)
    kept = set(keep)
    candidates = [n for n in graph.nodes if (is_clone_candidate(n) or is_copy_candidate(n)) and n not in kept]
    try:
        decisions = plan_clone_elimination(analyze(graph, donated_inputs=donated), candidates)
    except Exception as e:
        log.warning("copy planning failed, keeping every copy: %s: %s", type(e).__name__, e)
        return CloneEliminationReport.internal_error(
            [n for n in candidates if is_clone_candidate(n)], f"{type(e).__name__}: {e}"
        )
    by_name = {n.name: n for n in graph.nodes}
    stale: set[int] = set()
    for d in decisions:
        if d.action == "remove" and not d.reason.is_copy_reason and d.node in by_name:
            stale |= storage_keys(meta_value(by_name[d.node]))
    replaced = apply_decisions(graph, decisions)
    keep_keys: set[int] = set()
    for n in graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            keep_keys |= storage_keys(meta_value(n))
    refresh_stale(graph, stale - keep_keys)
    for d in decisions:
        log.debug("%s %s (%s): %s %s", d.action, d.node, d.original, d.reason, ", ".join(d.evidence))
    if replaced:
        recompile(graph)
    return CloneEliminationReport(tuple(decisions))


def lower_and_eliminate(
    graph: torch.fx.Graph,
    *,
    donated_inputs: Iterable[int] = (),
    lower_functional: bool = True,
    max_rounds: int = 4,
    keep: Collection[torch.fx.Node] = (),
) -> PipelineReport:
    """Lower functional ops (optionally), then remove the copies the program does not need.

    Never raises on a well-formed graph: a failure stops the pipeline where it
    is (every step leaves a valid, equivalent graph) and is reported in
    :attr:`PipelineReport.error`.

    Parameters
    ----------
    graph : torch.fx.Graph
        A functionalized graph with ``meta['val']`` on its nodes (mutated in place).
    donated_inputs : iterable of int
        Placeholder positions the caller gives up (see :func:`aliasing.analyze`).
    lower_functional : bool
        Lower ``auto_functionalized``/``_v2``/``triton_kernel_wrapper_functional``
        first; with False only the copies already in the graph are judged.
    max_rounds : int
        Bound on planner rounds (each against a fresh analysis).
    keep : collection of fx.Node
        Copies the planner must leave alone (the hazard guard's protective clones).

    Returns
    -------
    PipelineReport

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: (x * 2).clone() + 1, tracing_mode="fake")(torch.randn(4))
    >>> report = lower_and_eliminate(gm.graph)
    >>> report.removed
    ('clone',)
    """
    donated = tuple(donated_inputs)
    lowering = LoweringReport()
    rounds: list[CloneEliminationReport] = []
    error: str | None = None
    try:
        if lower_functional:
            lowering = lower_functional_ops(graph)
        for _ in range(max(1, max_rounds)):
            rep = plan_and_apply(graph, donated_inputs=donated, keep=keep)
            rounds.append(rep)
            if rep.error:
                error = rep.error
                break
            if not any(d.action == "remove" for d in rep.decisions):
                break  # this round ran on the final graph and found nothing: a fixed point
    except Exception as e:  # never raise from a pass: report and keep what was done
        error = f"{type(e).__name__}: {e}"
        log.warning("fx-aliasing pipeline stopped: %s", error)
    return PipelineReport(lowering, tuple(rounds), error)
