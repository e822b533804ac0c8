"""The one pipeline: lower the functional wrappers, then plan every copy against one planning state and apply.

:func:`run` is the only driver; :func:`rewrite.eliminate_clones` and
:func:`lower_and_eliminate` are thin entry points over it that differ only in
what they accept (any target and caller options, or a post-grad ``Graph``
with the hazard guard's protected copies) and in what they return.

A run, on a graph it may mutate:

1. lower (optional): ``auto_functionalized``/``_v2``/Triton wrappers/scatters
   become clones plus in-place calls (:mod:`rewrite.lowering`);
2. analyse once and build the one :class:`~rewrite.planning.state.PlanningState`
   (unless the graph has no copy to decide: then the run ends here, with no analysis);
3. plan: the planner decides every clone and ``copy_`` of the graph against the
   state, recording each decision in it (C7), to its fixed point;
4. apply the plan (:func:`rewrite.editing.apply.apply_plan`: all or nothing);
5. refresh the fake values that lived in a removed clone's storage
   (:func:`rewrite.lowering.metadata.refresh_stale`), so later passes read
   truthful metadata.

The state's updates are exact but for one case: a clone removed with a change
of layout (C1 refined) leaves the values of its storage without a region
("anywhere"). Only when a kept copy depends on such a storage is the graph
analysed again for another round (``max_rounds`` bounds them); the report
counts the analyses.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import torch.fx

from aliasing import analyze
from aliasing.core.analysis import paused_gc
from aliasing.core.facts import meta_value
from aliasing.core.fake_values import restore_storage_identity
from aliasing.core.target import Target, check_donated_inputs, resolve_target, validate_graph
from aliasing.errors import AliasingError
from rewrite.editing.apply import apply_plan
from rewrite.editing.recompile import recompile_lazily
from rewrite.lowering.functional import lower_functional_ops
from rewrite.lowering.metadata import refresh_stale, storage_keys
from rewrite.lowering.reports import LoweringReport
from rewrite.pipeline.reports import PipelineReport
from rewrite.planning.candidates import copy_candidates, is_clone_candidate
from rewrite.planning.decisions import CloneEliminationReport
from rewrite.planning.planner import plan
from rewrite.planning.state import REFINEMENTS, Plan, PlanningState

__all__ = ["Options", "lower_and_eliminate", "run"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    """What one pipeline run does (the entry points fill it from their parameters)."""

    lower_functional: bool = False
    erase_dead: bool = True
    refinements: frozenset[str] = REFINEMENTS
    #: copies nobody decides (the hazard guard's protective clones)
    keep: Collection[torch.fx.Node] = ()
    max_rounds: int = 4
    #: re-raise an internal failure instead of reporting it
    strict: bool = False


@dataclass(frozen=True)
class Round:
    """One round: its report, the names it replaced, and whether a kept copy met the state's imprecision."""

    report: CloneEliminationReport
    replaced: dict[str, str]
    again: bool  #: a kept copy met the imprecision: analyse again
    analysed: bool = True  #: False when the round had no copy to decide (no analysis built)


def resolve_for_pass(target: object, donated_inputs: Iterable[int], *, lower_functional: bool = False) -> Target:
    """The pass's :class:`Target`, the graph validated (:func:`aliasing.core.target.validate_graph`)
    only where the pass reads it: a graph without copy candidates, nothing to lower, is left
    unread (its cost is FX's index lookups, whatever its size). Raises
    :class:`aliasing.InvalidTargetError` before anything is analysed or changed."""
    resolved = resolve_target(target, check_donated_inputs(donated_inputs), validate=False)
    if lower_functional or copy_candidates(resolved.graph):
        validate_graph(resolved.graph)
    return resolved


def run(target: Target, options: Options) -> tuple[PipelineReport, dict[str, str]]:
    """Run the pipeline on ``target``'s graph (mutated); returns its report and ``{removed name: replacement name}``.

    ``target`` is the resolved program (:func:`aliasing.core.target.resolve_target`:
    the graph, its module and its inputs' roles, donated ones included).

    Never raises unless ``options.strict``: a failure before the plan is applied
    keeps every copy of the failing round (the graph is as that round found it),
    one after it (refreshing metadata) leaves the round's removals standing; both
    are reported in :attr:`PipelineReport.error`.

    Example
    -------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x[0].copy_(x[0]).sum() + x.clone().sum(), tracing_mode="fake")(torch.randn(2, 3))
    >>> from aliasing.core.target import resolve_target
    >>> report, replaced = run(resolve_target(gm), Options())
    >>> [(d.node, d.action, str(d.reason)) for d in report.eliminations[0].decisions]
    [('copy_', 'remove', 'copy-onto-itself'), ('clone', 'remove', 'removable')]
    >>> report.analyses, sorted(replaced)
    (1, ['clone', 'copy_'])
    """
    lowering = LoweringReport()
    rounds: list[CloneEliminationReport] = []
    replaced: dict[str, str] = {}
    error: str | None = None
    analyses = 0
    try:
        if options.lower_functional:
            lowering = lower_functional_ops(target.graph)
        for _ in range(max(1, options.max_rounds)):
            done = _round(target, options)
            analyses += done.analysed
            rounds.append(done.report)
            replaced.update(done.replaced)
            if done.report.error or not done.replaced or not done.again:
                break  # the state's updates were exact: the plan is the graph's fixed point
    except Exception as e:  # never raise from a pass: report and keep what was done
        if options.strict:
            raise
        error = f"{type(e).__name__}: {e}"
        log.warning("fx-aliasing pipeline stopped: %s", error)
    error = error or next((r.error for r in rounds if r.error), None)
    return PipelineReport(lowering, tuple(rounds), error, analyses=analyses), replaced


def _round(target: Target, options: Options) -> Round:
    """Analyse, plan against one state, apply, refresh stale metadata."""
    graph = target.graph
    kept = set(options.keep)
    candidates = [n for n in copy_candidates(graph) if n not in kept]
    if not candidates:
        # Nothing to decide: no analysis (its cost would be the whole pass's on a graph without
        # copies, the common case of a post-grad graph), and the graph is left as it is.
        return Round(CloneEliminationReport(()), {}, False, analysed=False)
    opaque: tuple[str, ...] = ()
    # A program loaded from its .pt2 gets its fake values propagated again, so that it gets the
    # decisions it gets in memory (or a warning that it is analysed conservatively).
    restore_storage_identity(target.module, target.graph)
    try:
        analysis = analyze(target)
        opaque = tuple(n.name for n in analysis.opaque_nodes)
        state = PlanningState(analysis, erase_dead=options.erase_dead, refine=options.refinements, protected=kept)
        planned = plan(state, candidates)
        stale, roots = _stale_storages(planned)
        # Asked of the analysis about the plan's nodes, so before the graph changes: the refresh
        # below recreates nodes the analysis has never seen.
        again = _imprecise_for_a_keep(state, planned)
        replaced = apply_plan(graph, planned)  # all or nothing
    except Exception as e:
        if options.strict:
            raise
        log.warning("copy planning failed, keeping every copy: %s: %s", type(e).__name__, e)
        clones = [n for n in candidates if is_clone_candidate(n)]
        return Round(CloneEliminationReport.internal_error(clones, f"{type(e).__name__}: {e}", opaque), {}, False)
    # The graph has changed: from here on nothing may lose the plan (its report, and the names
    # that tell the entry points to regenerate code and rename an ExportedProgram's outputs).
    error: str | None = None
    try:
        # a recreated node keeps its name; where it could not, its new name is a replacement too
        replaced.update((old, new) for old, new in _refresh(graph, stale, roots).items() if old != new)
    except Exception as e:
        if options.strict:
            raise
        error = f"refreshing the metadata of the removed clones' values failed: {type(e).__name__}: {e}"
        log.warning("fx-aliasing: %s (the removals stand; later passes may read stale metadata)", error)
        again = False
    if log.isEnabledFor(logging.DEBUG):  # (the evidence is joined only for a log that shows it)
        for d in planned:
            log.debug("%s %s (%s): %s %s", d.action, d.node, d.original, d.reason, ", ".join(d.evidence))
    return Round(CloneEliminationReport(tuple(planned), error, opaque=opaque), replaced, again)


def _imprecise_for_a_keep(state: PlanningState, planned: Plan) -> bool:
    """Whether a kept copy depends on a storage class a layout-changing removal left without
    regions (C1 refined: "anywhere"): only then can a fresh analysis decide it otherwise."""
    if not state.relocated:
        return False
    vague = {state.find(sid) for sid in state.relocated}
    return any(d.action == "keep" and state.classes_of(n) & vague for n, d in zip(planned.nodes, planned.decisions))


def _stale_storages(planned: Plan) -> tuple[set[int], list[torch.fx.Node]]:
    """The fake storages of the clones the plan removes (values there become stale), and the
    nodes that take the replaced clones' places (the clones' users become theirs)."""
    stale: set[int] = set()
    originals: list[torch.fx.Node] = []
    gone: set[torch.fx.Node] = set()
    for node, d, erased in planned.removals():
        gone.add(node)
        gone.update(erased)
        if not d.reason.is_copy_reason:
            stale |= storage_keys(meta_value(node))
            if isinstance(node.args[0], torch.fx.Node):
                originals.append(node.args[0])
    return stale, [n for n in dict.fromkeys(originals) if n not in gone]


def _refresh(graph: torch.fx.Graph, stale: set[int], roots: list[torch.fx.Node]) -> dict[str, str]:
    """Recreate the nodes whose fake values live in ``stale`` storages (never those of inputs or
    constants); ``{old name: name now}`` of the recreated nodes."""
    if not stale:
        return {}
    keep_keys: set[int] = set()
    for n in (*graph.find_nodes(op="placeholder"), *graph.find_nodes(op="get_attr")):
        keep_keys |= storage_keys(meta_value(n))
    return refresh_stale(graph, stale - keep_keys, roots)


def lower_and_eliminate(
    graph: torch.fx.Graph,
    *,
    donated_inputs: Iterable[int] = (),
    lower_functional: bool = True,
    max_rounds: int = 4,
    keep: Collection[torch.fx.Node] = (),
) -> PipelineReport:
    """Lower functional ops (optionally), then remove the copies the program does not need.

    The post-grad entry point of :func:`run` (the ``torch.compile`` and vLLM
    adapters call it). Never raises on a well-formed graph: a failure stops
    the pipeline where it is (every step leaves a valid, equivalent graph) and
    is reported in :attr:`PipelineReport.error`.

    Parameters
    ----------
    graph : torch.fx.Graph
        A functionalized graph with ``meta['val']`` on its nodes (mutated in place;
        its owning GraphModule's code is regenerated on first use).
    donated_inputs : iterable of int
        Placeholder positions the caller gives up (see :func:`aliasing.analyze`).
    lower_functional : bool
        Lower ``auto_functionalized``/``_v2``/``triton_kernel_wrapper_functional``
        first; with False only the copies already in the graph are judged.
    max_rounds : int
        Bound on planner rounds (a round after the first only follows when a
        kept copy depends on a storage a layout-changing removal left without regions).
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
    >>> report.removed, report.analyses
    (('clone',), 1)
    """
    options = Options(lower_functional, keep=tuple(keep), max_rounds=max_rounds)
    # The collector is paused for the whole pass, as in eliminate_clones: a collection of the
    # caller's young objects would otherwise land in it (Inductor's and vLLM's passes leave many).
    with paused_gc():
        try:
            target = resolve_for_pass(graph, donated_inputs, lower_functional=lower_functional)
        except AliasingError as e:  # a pass never raises: report it
            log.warning("fx-aliasing pipeline stopped: %s: %s", type(e).__name__, e)
            return PipelineReport(error=f"{type(e).__name__}: {e}")
        report, replaced = run(target, options)
    owner = getattr(graph, "owning_module", None)
    if (replaced or report.lowering.lowered) and isinstance(owner, torch.fx.GraphModule):
        recompile_lazily(owner)
    return report
