"""``eliminate_clones``: analyse, plan, apply. The entry point of the clone-elimination pass."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Union

import torch
import torch.fx

from aliasing.core.analysis import paused_gc
from aliasing.core.target import Target as ResolvedTarget
from aliasing.errors import AliasingError
from rewrite.editing.recompile import recompile_lazily
from rewrite.errors import RewriteError
from rewrite.pipeline.driver import Options, resolve_for_pass, run
from rewrite.planning.decisions import CloneEliminationReport
from rewrite.planning.state import check_refinements

__all__ = ["eliminate_clones"]

Target = Union[torch.fx.GraphModule, torch.fx.Graph, "torch.export.ExportedProgram"]


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
    Python code regenerated on first use (:func:`rewrite.editing.recompile.recompile_lazily`); a bare
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
        ``internal-error`` keeps. A graph without copy candidates is not read,
        so not validated either: nothing is decided or changed there.

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
    # The collector is paused for the whole pass, the graph's validation included: a collection
    # of the caller's young objects (a graph copy just made) would otherwise land in it.
    with paused_gc():
        # Caller mistakes raise here, before anything is analysed or changed.
        resolved = resolve_for_pass(target, donated_inputs)
        refine = check_refinements(refinements)
        return _eliminate(target, resolved, strict, erase_dead, refine)


def _eliminate(
    target: Target, resolved: ResolvedTarget, strict: bool, erase_dead: bool, refinements: frozenset[str]
) -> CloneEliminationReport:
    options = Options(erase_dead=erase_dead, refinements=refinements, strict=strict)
    try:
        pipeline, replaced = run(resolved, options)
    except AliasingError:
        raise
    except Exception as e:  # strict: every internal failure is a RewriteError
        raise RewriteError(f"clone elimination failed: {type(e).__name__}: {e}") from e
    if replaced:
        if isinstance(target, torch.export.ExportedProgram):
            _rename_exported_outputs(target, replaced)
            recompile_lazily(target.graph_module)
        elif isinstance(target, torch.fx.GraphModule):
            recompile_lazily(target)
        # A bare Graph is rewritten in place and left to its owner to recompile, as pass
        # managers (Inductor's post-grad passes, vLLM's) expect.
    return pipeline.elimination()
