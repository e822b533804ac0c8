"""Fuzzing an FX pass: :func:`check_pass` runs a pass on a copy of a drawn program and checks it.

The soundness clauses are :func:`rewrite.testing.check_equivalent`'s (outputs
bitwise, input mutations, no new aliasing, the same raises, the RNG state). A
pass may take a ``torch.fx.GraphModule`` or a ``torch.fx.Graph``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import cast

import torch
import torch.fx

from rewrite.errors import NotEquivalent, RewriteError
from rewrite.testing.equivalence import OracleError, check_equivalent, copy_program, quiet_torch_trace
from rewrite.testing.programs.profiles import hypothesis_tracer_paused
from rewrite.testing.programs.program import Program

__all__ = ["check_pass"]

PassFn = Callable[[torch.fx.GraphModule], object] | Callable[[torch.fx.Graph], object]


def check_pass(
    pass_fn: PassFn,
    program: Program,
    *,
    strict: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
) -> torch.fx.GraphModule:
    """Run ``pass_fn`` on a copy of ``program``'s graph and check the result is equivalent.

    The check is :func:`rewrite.testing.check_equivalent`'s: outputs compared
    bitwise (NaN equal to NaN) with their dtype, shape and strides, input
    mutations, no new aliasing, raising (an original that raises needs a rewrite
    that raises the same exception type), and the random-number generators' final
    state, both programs starting from the same generator state.

    Parameters
    ----------
    pass_fn : Callable[[torch.fx.GraphModule], object] or Callable[[torch.fx.Graph], object]
        The pass under test. It may return a new GraphModule, or rewrite its
        argument in place and return anything else (``None``, a report). A pass
        over a ``torch.fx.Graph`` (as Inductor's custom passes and vLLM's
        passes are) works too: one whose first parameter is annotated
        ``torch.fx.Graph``, or that has a ``uuid()`` method, gets the copy's
        Graph; any other gets the GraphModule, and runs again on a fresh copy's
        Graph if it fails on an attribute only a Graph has (``gm.nodes``...).
        The module's code is regenerated after a Graph pass.
    program : Program
        A drawn program (from :func:`~rewrite.testing.programs`); its own graph is never touched.
    strict : bool
        Also require the rewritten graph to pass ``graph.lint()``.
    rtol, atol : float, optional
        A tolerance for floating-point values, passed to ``check_equivalent``;
        ``None`` (the default) compares them bitwise.  Only for a pass whose
        rounding legitimately differs (one that reorders arithmetic on purpose).

    Returns
    -------
    torch.fx.GraphModule
        The rewritten module, for further checks (for example idempotence).

    Raises
    ------
    NotEquivalent
        When a soundness clause fails (see :func:`rewrite.testing.check_equivalent`);
        the message ends with ``program.source()``, a standalone repro.
    RewriteError
        In strict mode, when the rewritten graph fails ``graph.lint()``.
    OracleError
        When the program's inputs do not fit its signature, or nothing could be
        compared (see :func:`rewrite.testing.check_equivalent`): a generator bug,
        never a verdict on the pass; the message ends with ``program.source()``.

    Examples
    --------
    >>> from hypothesis import find
    >>> import torch
    >>> from rewrite.testing import programs
    >>> def drop_clones(gm):  # unsound: replaces every clone by its input
    ...     for n in list(gm.graph.nodes):
    ...         if n.target is torch.ops.aten.clone.default:
    ...             n.replace_all_uses_with(n.args[0]); gm.graph.erase_node(n)
    ...     gm.recompile()
    >>> def fails(p):
    ...     try:
    ...         check_pass(drop_clones, p)
    ...     except NotEquivalent:
    ...         return True
    ...     return False
    >>> p = find(programs(max_ops=4), fails)
    >>> p.num_ops <= 4
    True
    """
    with quiet_torch_trace():
        return _check_pass(pass_fn, program, strict=strict, rtol=rtol, atol=atol)


def _check_pass(
    pass_fn: PassFn, program: Program, *, strict: bool, rtol: float | None, atol: float | None
) -> torch.fx.GraphModule:
    rewritten = _apply_pass(pass_fn, program)
    with hypothesis_tracer_paused():
        failure = _first_failure(program, rewritten, strict=strict, rtol=rtol, atol=atol)
    # Raised here, outside the handlers, whatever the clause: Hypothesis tells bugs apart by
    # where an exception and its context were raised, and would shrink (and report) each
    # clause of one wrong pass as a bug of its own. (The cause stays on the exception.)
    if isinstance(failure, NotEquivalent):
        message = str(failure).split("] ", 1)[-1]
        raise NotEquivalent(
            failure.clause, f"{message}\n\n{_repro_note(program)}\n\nrewritten graph:\n{rewritten.code}"
        ) from failure
    if isinstance(failure, OracleError):
        message = str(failure).split("] ", 1)[-1]
        raise OracleError(failure.reason, f"{message}\n\n{_repro_note(program)}", failure.error) from failure
    if failure is not None:
        raise RewriteError(f"rewritten graph fails lint: {failure}\n\n{_repro_note(program)}") from failure
    return rewritten


def _first_failure(
    program: Program, rewritten: torch.fx.GraphModule, *, strict: bool, rtol: float | None, atol: float | None
) -> Exception | None:
    """The lint error (in strict mode), :class:`NotEquivalent` or :class:`OracleError` of the first
    check of ``rewritten`` against ``program`` that fails, or ``None``."""
    if strict:
        try:
            rewritten.graph.lint()
        except Exception as err:  # torch.fx raises RuntimeError and others from lint
            return err
    try:
        for make_inputs in program.input_sets:  # the example, then the boundary sizes (export-dynamic)
            check_equivalent(
                program.graph_module,
                rewritten,
                make_inputs,
                donated_inputs=program.donated_inputs,
                rtol=rtol,
                atol=atol,
            )
    except (NotEquivalent, OracleError) as err:
        return err
    return None


#: What a ``torch.fx.Graph`` has and a ``GraphModule`` does not: a pass that uses one takes a Graph.
_GRAPH_ONLY = frozenset(name for name in dir(torch.fx.Graph) if not hasattr(torch.fx.GraphModule, name))


def _takes_graph(pass_fn: PassFn) -> bool:
    """Whether ``pass_fn`` declares that it takes a ``torch.fx.Graph``: Inductor's custom passes
    (they have ``uuid()``) and functions whose first parameter is annotated ``torch.fx.Graph``."""
    if callable(getattr(pass_fn, "uuid", None)):  # torch._inductor.custom_graph_pass.CustomGraphPass
        return True
    try:
        params = list(inspect.signature(pass_fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params:
        return False
    annotation = params[0].annotation
    if isinstance(annotation, str):
        return annotation.split("[")[0].rsplit(".", 1)[-1] == "Graph"
    return annotation is torch.fx.Graph


def _graph_attribute_missing(err: AttributeError) -> bool:
    """Whether ``err`` is a GraphModule missing an attribute that only a Graph has."""
    name, obj = getattr(err, "name", None), getattr(err, "obj", None)
    if name is None:  # raised without the interpreter's context: read the message
        found = re.match(r"'(\w+)' object has no attribute '(\w+)'", str(err))
        return found is not None and found.group(1) == "GraphModule" and found.group(2) in _GRAPH_ONLY
    return name in _GRAPH_ONLY and (obj is None or isinstance(obj, torch.fx.GraphModule))


def _apply_pass(pass_fn: PassFn, program: Program) -> torch.fx.GraphModule:
    """Run ``pass_fn`` on a copy of the program's graph module (:func:`_apply_to_copy`)."""
    return _apply_to_copy(pass_fn, program.graph_module)


def _apply_to_copy(pass_fn: PassFn, gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Run ``pass_fn`` on a copy of ``gm``, as a GraphModule pass or as a Graph pass; the result.

    A pass that is not declared a Graph pass (:func:`_takes_graph`) gets the
    GraphModule first; if it then fails on an attribute only a Graph has
    (``gm.nodes``, ``gm.find_nodes``, ``gm.erase_node``...), it runs again on a
    fresh copy's Graph. A Graph pass rewrites the graph in place (or returns a
    new Graph); the module's code is regenerated after it.
    """
    with hypothesis_tracer_paused():
        copy = copy_program(gm)
    if not isinstance(copy, torch.fx.GraphModule):
        raise RewriteError("copy_program returned something other than a GraphModule")
    if not _takes_graph(pass_fn):
        try:
            result = cast(Callable[[torch.fx.GraphModule], object], pass_fn)(copy)
        except AttributeError as err:
            if not _graph_attribute_missing(err):
                raise
            with hypothesis_tracer_paused():
                copy = copy_program(gm)  # the failed attempt may have changed the first copy
            if not isinstance(copy, torch.fx.GraphModule):
                raise RewriteError("copy_program returned something other than a GraphModule") from err
        else:
            return result if isinstance(result, torch.fx.GraphModule) else copy
    result = pass_fn(copy.graph)  # type: ignore[arg-type]  # a Graph pass
    if isinstance(result, torch.fx.Graph) and result is not copy.graph:
        return torch.fx.GraphModule(copy, result)
    copy.recompile()
    return copy


def _repro_note(program: Program) -> str:
    return "standalone repro of the program:\n" + program.source()
