"""``eliminate_clones``: analyse, plan, apply. The entry point of the clone-elimination pass."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Union

import torch
import torch.fx

from aliasing import analyze
from aliasing.analysis import paused_gc
from aliasing.errors import AliasingError
from rewrite.apply import apply_decisions
from rewrite.decisions import CloneEliminationReport, Decision, Reason
from rewrite.errors import RewriteError
from rewrite.planner import is_clone_candidate, plan_clone_elimination

__all__ = ["eliminate_clones"]

log = logging.getLogger(__name__)

Target = Union[torch.fx.GraphModule, torch.fx.Graph, "torch.export.ExportedProgram"]


def _graph_of(target: Any) -> torch.fx.Graph:
    if isinstance(target, torch.export.ExportedProgram):
        return target.graph_module.graph
    if isinstance(target, torch.fx.GraphModule):
        return target.graph
    if isinstance(target, torch.fx.Graph):
        return target
    from aliasing.errors import InvalidTargetError

    raise InvalidTargetError(
        f"expected a torch.fx.GraphModule, torch.fx.Graph or torch.export.ExportedProgram, got {type(target).__name__}"
    )


def _rename_exported_outputs(ep: "torch.export.ExportedProgram", replaced: dict[str, str]) -> None:
    """Keep an ExportedProgram's output specs naming the values the graph now returns."""
    for spec in ep.graph_signature.output_specs:
        name = getattr(spec.arg, "name", None)
        if name in replaced:
            new = replaced[name]
            while new in replaced:
                new = replaced[new]
            spec.arg = type(spec.arg)(name=new)


def eliminate_clones(
    target: Target,
    *,
    donated_inputs: Iterable[int] = (),
    strict: bool = False,
) -> CloneEliminationReport:
    """Remove every ``clone`` whose copy the program does not need, and none that it does.

    The target is rewritten in place: a GraphModule or ExportedProgram is
    recompiled; a bare ``Graph`` is left for its owner to recompile, as pass
    managers expect. Conditions
    C1-C7 (see :mod:`rewrite.planner`) decide each candidate: ``aten.clone``
    (with or without ``memory_format``) and ``aten._to_copy`` that changes
    nothing. Running it twice changes nothing the second time.

    Parameters
    ----------
    target : torch.fx.GraphModule, torch.fx.Graph or torch.export.ExportedProgram
    donated_inputs : iterable of int
        Placeholder positions (0-based, graph order) the caller gives up.
    strict : bool
        Raise :class:`rewrite.errors.RewriteError` on an internal failure instead
        of keeping every clone and reporting why.

    Returns
    -------
    CloneEliminationReport

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def f(x):
    ...     y = x.clone()
    ...     y.add_(1)          # x is an input: the copy protects it (C5)
    ...     z = y.clone()      # only read: not needed
    ...     return z * 2
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    >>> report = eliminate_clones(gm)
    >>> report.removed, report.kept
    (('clone_1',), ('clone',))
    """
    graph = _graph_of(target)
    donated = tuple(donated_inputs)
    with paused_gc():
        return _eliminate(target, graph, donated, strict)


def _eliminate(target: Target, graph: torch.fx.Graph, donated: tuple[int, ...], strict: bool) -> CloneEliminationReport:
    candidates = [n for n in graph.nodes if is_clone_candidate(n)]
    try:
        analysis = analyze(target, donated_inputs=donated)
        decisions = plan_clone_elimination(analysis, candidates)
    except Exception as e:
        if strict:
            if isinstance(e, AliasingError):
                raise
            raise RewriteError(f"clone elimination failed: {type(e).__name__}: {e}") from e
        log.warning("clone elimination failed, keeping every clone: %s: %s", type(e).__name__, e)
        message = f"{type(e).__name__}: {e}"
        return CloneEliminationReport(
            tuple(Decision(n.name, "keep", Reason.INTERNAL_ERROR, (), str(n.args[0])) for n in candidates), message
        )
    replaced = apply_decisions(graph, decisions)
    if replaced:
        if isinstance(target, torch.export.ExportedProgram):
            _rename_exported_outputs(target, replaced)
            target.graph_module.recompile()
        elif isinstance(target, torch.fx.GraphModule):
            target.recompile()
        # A bare Graph is rewritten in place and left to its owner to recompile, as pass
        # managers (Inductor's post-grad passes, vLLM's) expect.
    report = CloneEliminationReport(tuple(decisions))
    for d in decisions:
        log.debug("%s %s: %s %s", d.action, d.node, d.reason, ", ".join(d.evidence))
    return report
