"""What the ``fx-aliasing`` commands do, once :mod:`rewrite.cli` has checked their arguments.

:mod:`rewrite.cli` parses and checks the arguments without importing torch and
then calls :func:`run_command`; this module imports torch and the library.
:func:`run_demo` is the ``demo`` command as a function. Every count of
decisions printed here is said as :mod:`rewrite.counts` says it (the counts
line under each decision table, the demo's first line).

Examples
--------
>>> import io
>>> buf = io.StringIO()
>>> run_demo(out=buf)
>>> print(buf.getvalue().splitlines()[0])  # doctest: +ELLIPSIS
fx-aliasing demo: transformer-style block traced with make_fx (tracing_mode=fake), 34 nodes, 6 copy candidates (5 clones, 1 copy_): 2 removed, 4 kept
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import torch
import torch.fx

from aliasing import InvalidTargetError, RenderingError, graphviz_available, render_dot, save_timeline
from rewrite.errors import DemoFailed, NotEquivalent, OracleError, UsageError
from rewrite.examples import DEMO_DONATED_INPUTS, TracingMode, demo_block, trace_demo
from rewrite.explain import (
    Explanation,
    Phase,
    ProgramFileError,
    explain,
    format_accesses,
    format_alias_sets,
    format_decisions,
    format_storages,
    import_modules,
    load_program,
    resolve_donated,
    save_program,
)
from rewrite.planning.candidates import copy_candidates
from rewrite.testing.equivalence import check_equivalent

__all__ = ["EQUIVALENCE_TRIALS", "count_clones", "run_command", "run_demo"]

#: How many independent random input sets the demo's equivalence check runs.
EQUIVALENCE_TRIALS: int = 3

_CLONE_OPS = (torch.ops.aten.clone.default, torch.ops.aten._to_copy.default)


def count_clones(gm: torch.fx.GraphModule) -> int:
    """Number of ``aten.clone`` and ``aten._to_copy`` nodes in ``gm``'s graph.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        An ATen-level graph.

    Returns
    -------
    int
        Count of clone-like copy nodes (``copy_`` nodes are not counted; the
        decisions count every candidate: :mod:`rewrite.counts`).

    Examples
    --------
    >>> from rewrite.examples import trace_demo
    >>> count_clones(trace_demo())
    5
    """
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target in _CLONE_OPS)


# --- demo -----------------------------------------------------------------------


def _write_dot(path: Path, source: str) -> str:
    """Write the storage graph: rendered by Graphviz for .svg/.png, DOT text otherwise; what was written."""
    fmt = {".svg": "svg", ".png": "png"}.get(path.suffix.lower())
    if fmt is None:
        path.write_text(source)
        return "Graphviz DOT"
    path.write_bytes(render_dot(source, "svg" if fmt == "svg" else "png"))
    return f"{fmt.upper()}, rendered by Graphviz's dot"


def _rewrite_and_check(
    explanation: Explanation,
    make_inputs: Callable[..., tuple[torch.Tensor, ...]],
    seed: int,
    out: TextIO,
) -> None:
    gm, rewritten, report = explanation.graph_module, explanation.rewritten, explanation.report
    if not isinstance(rewritten, torch.fx.GraphModule):
        raise DemoFailed(f"copy_program returned {type(rewritten).__name__}, expected a GraphModule")
    print("\n== clone elimination ==", file=out)
    print(format_decisions(report), file=out)
    left, kept = len(copy_candidates(rewritten.graph)), explanation.counts.kept
    if left != kept:
        raise DemoFailed(f"the decision table keeps {kept} copy candidates but the rewritten graph has {left}")
    print("\n== rewritten graph ==", file=out)
    print(rewritten.code.strip(), file=out)
    donated = explanation.donated_inputs
    seeds = [seed + i for i in range(EQUIVALENCE_TRIALS)]
    for s in seeds:
        try:
            check_equivalent(gm, rewritten, make_inputs(seed=s), donated_inputs=donated)
        except NotEquivalent as exc:
            print(f"equivalent: NO (seed {s})", file=out)
            raise DemoFailed(f"the rewritten program is not equivalent to the original (seed {s}): {exc}") from exc
    print(f"equivalent: yes ({len(seeds)} random input sets, seeds {seeds[0]}..{seeds[-1]})", file=out)


def run_demo(
    *,
    dot: Path | None = None,
    html: Path | None = None,
    rewrite: bool = True,
    seed: int = 0,
    tracing_mode: TracingMode = "fake",
    out: TextIO | None = None,
) -> None:
    """Run the demo, printing to ``out`` (standard output by default).

    The first line counts the block's nodes and its copy candidates, as
    ``fx-aliasing explain``'s first line does (:mod:`rewrite.counts`).

    Parameters
    ----------
    dot : Path, optional
        Where to write the storage graph as Graphviz DOT.
    html : Path, optional
        Where to write the HTML report of the block.
    rewrite : bool
        Also print the decisions and the rewritten graph, and check the rewrite's equivalence.
    seed : int
        Seed of the tracing inputs and first seed of the equivalence check.
    tracing_mode : {"fake", "symbolic"}
        ``make_fx`` tracing mode.
    out : TextIO, optional
        Stream to print to.

    Raises
    ------
    DemoFailed
        When a step fails; the message says which.
    aliasing.AliasingError
        When the analysis or the rewrite raises.

    Examples
    --------
    >>> import io
    >>> buf = io.StringIO()
    >>> run_demo(rewrite=False, out=buf)
    >>> "== storages ==" in buf.getvalue()
    True
    """
    stream = sys.stdout if out is None else out
    _, make_inputs = demo_block()
    gm = trace_demo(tracing_mode, seed=seed)
    # the analysis of the block, and the decisions on a copy of it (gm itself is left as traced)
    explanation = explain(gm, donated_inputs=DEMO_DONATED_INPUTS, name="the demo block")
    print(
        f"fx-aliasing demo: transformer-style block traced with make_fx "
        f"(tracing_mode={tracing_mode}), {len(gm.graph.nodes)} nodes, {explanation.counts}",
        file=stream,
    )
    print("\n== graph ==", file=stream)
    print(gm.code.strip(), file=stream)
    analysis = explanation.analysis
    print("\n== storages ==\n" + format_storages(analysis), file=stream)
    print("\n== alias sets (values that may share storage) ==\n" + format_alias_sets(analysis), file=stream)
    print("\n== reads and writes per storage, in graph order ==\n" + format_accesses(analysis), file=stream)
    if dot is not None:
        try:
            written = _write_dot(dot, explanation.dot())
        except (OSError, RenderingError) as exc:
            raise DemoFailed(f"cannot write {dot}: {exc}") from exc
        print(f"\nwrote the storage graph to {dot} ({written})", file=stream)
    if html is not None:
        try:
            explanation.write_html(html)
        except ProgramFileError as exc:
            raise DemoFailed(str(exc)) from exc
        print(f"\nwrote the HTML report to {html}", file=stream)
    if rewrite:
        _rewrite_and_check(explanation, make_inputs, seed, stream)


# --- explain and rewrite ----------------------------------------------------------


def _load(args: argparse.Namespace, progress: Phase) -> tuple[torch.export.ExportedProgram, tuple[int, ...]]:
    """The program, and ``--donated`` as placeholder positions (a usage error if the program lacks one)."""
    import_modules(args.imports)
    with progress(f"loading {args.program}"):
        program = load_program(args.program)
    try:
        donated = resolve_donated(program, args.donated_items)
    except InvalidTargetError as exc:
        raise UsageError(f"--donated {args.donated!r}: {exc}") from exc
    return program, donated


def _run_explain(args: argparse.Namespace, progress: Phase, out: TextIO) -> None:
    program, donated = _load(args, progress)
    explanation = explain(program, donated_inputs=donated, name=args.program_path.name, phase=progress)
    # with --json, standard output holds the JSON document alone
    notes = sys.stderr if args.json else out
    print(explanation.to_json() if args.json else explanation.text(summary=args.summary), file=out)
    if args.dot is not None:
        try:
            kind = _write_dot(args.dot, explanation.dot())
        except (OSError, RenderingError) as exc:
            raise ProgramFileError(f"cannot write {args.dot}: {exc}") from exc
        print(f"\nwrote the storage graph to {args.dot} ({kind})", file=notes)
    if args.timeline is not None:
        with progress("drawing the storage timeline"):
            save_timeline(explanation.timeline(), args.timeline)
        print(f"wrote the storage timeline to {args.timeline}", file=notes)
    if args.html is not None:
        if not graphviz_available():
            print(
                "fx-aliasing: Graphviz's dot is not installed; the report shows the storage graph as DOT text",
                file=sys.stderr,
            )
        with progress("writing the HTML report"):
            explanation.write_html(args.html)
        print(f"wrote the HTML report to {args.html} (open it in a browser)", file=notes)


def _run_rewrite(args: argparse.Namespace, progress: Phase, out: TextIO) -> None:
    program, donated = _load(args, progress)
    explanation = explain(program, donated_inputs=donated, name=args.program_path.name, phase=progress)
    print(format_decisions(explanation.report), file=out)
    if args.check:
        _check(explanation, progress, out)
    with progress(f"saving {args.output}"):
        save_program(explanation.rewritten, args.output)
    print(f"saved {args.output}", file=out)


def _check(explanation: Explanation, progress: Phase, out: TextIO) -> None:
    example = getattr(explanation.program, "example_inputs", None)
    if not example:
        raise UsageError("--check needs example inputs saved with the program, and this program has none")
    args, kwargs = example
    if kwargs:
        raise UsageError("--check runs programs on positional example inputs; this one was exported with keyword inputs")
    with progress("checking the rewritten program on the saved example inputs"):
        try:
            check_equivalent(
                explanation.program, explanation.rewritten, list(args), donated_inputs=explanation.donated_inputs
            )
        except OracleError as exc:
            raise ProgramFileError(f"--check could not compare the programs: {exc}") from exc
    print("equivalent on the saved example inputs: yes", file=out)


def run_command(args: argparse.Namespace, progress: Phase, out: TextIO) -> None:
    """Run the command ``args`` names; its arguments are checked (:func:`rewrite.cli.main` did).

    Raises
    ------
    rewrite.errors.UsageError
        When the loaded program refutes an argument (a ``--donated`` position or
        name it does not have), or ``--check`` finds no example inputs.
    rewrite.errors.DemoFailed, aliasing.AliasingError
        When a step fails.
    """
    if args.command == "demo":
        run_demo(
            dot=args.dot, html=args.html, rewrite=not args.no_rewrite, seed=args.seed, tracing_mode=args.tracing_mode
        )
    elif args.command == "explain":
        _run_explain(args, progress, out)
    elif args.command == "rewrite":
        _run_rewrite(args, progress, out)
    else:  # pragma: no cover - argparse only accepts known commands
        raise UsageError(f"unknown command {args.command!r}")
