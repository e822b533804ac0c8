"""``eliminate_clones``: analyse, plan, apply. The entry point of the clone-elimination pass."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Union, cast

import torch
import torch.fx

from aliasing import analyze
from aliasing.core.analysis import paused_gc
from aliasing.core.target import Target as ResolvedTarget
from aliasing.core.target import check_donated_inputs, resolve_target
from aliasing.errors import AliasingError
from rewrite.editing.apply import apply_decisions
from rewrite.errors import RewriteError
from rewrite.planning.decisions import CloneEliminationReport
from rewrite.planning.planner import check_refinements, is_clone_candidate, plan_clone_elimination

__all__ = ["eliminate_clones", "recompile_lazily"]

log = logging.getLogger(__name__)

Target = Union[torch.fx.GraphModule, torch.fx.Graph, "torch.export.ExportedProgram"]


class _CodeOnDemand:
    """The generated code of a GraphModule, produced on first access (a non-data
    descriptor: once ``recompile`` stores ``_code`` on the instance, it is plain data)."""

    def __get__(self, obj: object, owner: object = None) -> object:
        if obj is None:
            return self
        torch.fx.GraphModule.recompile(cast(torch.fx.GraphModule, obj))  # installed on GraphModule classes only
        return obj.__dict__["_code"]


def _forward_on_demand(self: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
    torch.fx.GraphModule.recompile(self)  # installs the real forward on the instance's class
    return self.forward(*args, **kwargs)


def _reduce_fresh(self: torch.fx.GraphModule) -> Any:
    torch.fx.GraphModule.recompile(self)
    return torch.fx.GraphModule.__reduce__(self)


def recompile_lazily(gm: torch.fx.GraphModule) -> None:
    """Mark ``gm``'s Python code stale: it is generated on the first call, ``.code``,
    ``str()`` or pickling, as torch's own lazy graph modules do.

    Pass managers that never run the Python code (Inductor, vLLM) then never pay
    for it. Every GraphModule instance has a class of its own (torch creates one
    per instance), so the change touches this module only.

    Example
    -------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x.clone() * 2)(torch.ones(2))
    >>> clone = next(n for n in gm.graph.nodes if n.name == "clone")
    >>> _ = clone.replace_all_uses_with(clone.args[0]); gm.graph.erase_node(clone)
    >>> recompile_lazily(gm)
    >>> "clone" in gm.code, gm(torch.ones(2)).tolist()
    (False, [2.0, 2.0])
    """
    cls = type(gm)
    if cls.__qualname__.rsplit(".", 1)[-1] != "GraphModuleImpl":
        gm.recompile()  # not torch's per-instance class: compile now rather than touch a shared class
        return
    gm.__dict__.pop("_code", None)
    # torch's per-instance GraphModule class: these shadow GraphModule's members for this module only
    cls._code = _CodeOnDemand()
    cls.forward = _forward_on_demand  # replaced by the real forward at the first recompile
    cls.__reduce__ = _reduce_fresh  # type: ignore[method-assign]  # pickling regenerates the code first


def _rename_exported_outputs(ep: torch.export.ExportedProgram, replaced: dict[str, str]) -> None:
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
    erase_dead: bool = True,
    refinements: Iterable[str] | None = None,
) -> CloneEliminationReport:
    """Remove every ``clone`` whose copy the program does not need, and none that it does.

    The target is rewritten in place: a GraphModule or ExportedProgram has its
    Python code regenerated on first use (:func:`recompile_lazily`); a bare
    ``Graph`` is left for its owner to recompile, as pass managers expect. Conditions
    C1-C8 and C10 (see :mod:`rewrite.planning.planner`) decide each candidate:
    ``aten.clone`` (with or without ``memory_format``), ``aten._to_copy`` that
    changes nothing, and the torch-level ``Tensor.clone``/``torch.clone`` of
    ``torch.fx.symbolic_trace`` graphs. Running it twice changes nothing the
    second time.

    Parameters
    ----------
    target : torch.fx.GraphModule, torch.fx.Graph or torch.export.ExportedProgram
    donated_inputs : iterable of int
        Placeholder positions (0-based, graph order) the caller gives up.
    strict : bool
        Raise :class:`rewrite.errors.RewriteError` on an internal failure instead
        of keeping every clone and reporting why.
    erase_dead : bool
        Allow condition C10: a clone that nothing reads is erased together with
        its writers and the dead users of its values. False removes clones only
        by replacing them with their originals.
    refinements : iterable of str, optional
        The refinements of C1-C5 to use (``rewrite.planning.planner.REFINEMENTS``:
        "layout", "liveness", "exact", "kills"); all by default. Fewer is
        sound and removes less (for measuring each one, or narrowing down a
        decision).

    Raises
    ------
    aliasing.InvalidTargetError
        Before anything changes, when ``target`` is not a graph, the graph is
        malformed (a cycle, a use before definition, a node of another graph:
        the message names the node), or ``donated_inputs`` is not a sequence of
        placeholder positions. Caller mistakes are never reported as
        ``internal-error`` keeps.

    The graph is never left half-rewritten: on any failure it is as it was.

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
    # Caller mistakes raise here, before anything is analysed or changed.
    resolved = resolve_target(target, check_donated_inputs(donated_inputs))
    refine = check_refinements(refinements)
    with paused_gc():
        return _eliminate(target, resolved, strict, erase_dead, refine)


def _eliminate(
    target: Target, resolved: ResolvedTarget, strict: bool, erase_dead: bool, refinements: frozenset[str]
) -> CloneEliminationReport:
    graph = resolved.graph
    candidates = [n for n in graph.nodes if is_clone_candidate(n)]
    opaque: tuple[str, ...] = ()
    try:
        analysis = analyze(resolved)
        opaque = tuple(n.name for n in analysis.opaque_nodes)
        decisions = plan_clone_elimination(analysis, candidates, erase_dead=erase_dead, refinements=refinements)
        replaced = apply_decisions(graph, decisions)  # all or nothing
    except Exception as e:
        if strict:
            if isinstance(e, AliasingError):
                raise
            raise RewriteError(f"clone elimination failed: {type(e).__name__}: {e}") from e
        log.warning("clone elimination failed, keeping every clone: %s: %s", type(e).__name__, e)
        return CloneEliminationReport.internal_error(candidates, f"{type(e).__name__}: {e}", opaque)
    if replaced:
        if isinstance(target, torch.export.ExportedProgram):
            _rename_exported_outputs(target, replaced)
            recompile_lazily(target.graph_module)
        elif isinstance(target, torch.fx.GraphModule):
            recompile_lazily(target)
        # A bare Graph is rewritten in place and left to its owner to recompile, as pass
        # managers (Inductor's post-grad passes, vLLM's) expect.
    report = CloneEliminationReport(tuple(decisions), opaque=opaque)
    for d in decisions:
        log.debug("%s %s: %s %s", d.action, d.node, d.reason, ", ".join(d.evidence))
    return report
