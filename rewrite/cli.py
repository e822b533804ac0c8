"""The ``fx-aliasing`` command line.

``fx-aliasing demo`` traces the bundled transformer-style block
(:mod:`rewrite.examples`), analyses it with :func:`aliasing.analyze` and prints:

1. the traced graph;
2. the storages: id, role and the values that live in each;
3. the alias sets: values that may share storage, with the pairs inside a set
   whose regions provably do not overlap;
4. the reads and writes of each storage, in graph order;

then, unless ``--no-rewrite`` is given, runs :func:`rewrite.eliminate_clones`
on a copy of the program and prints the decision table, the clone counts before
and after, and whether the rewritten program is equivalent to the original on
random inputs (:func:`rewrite.testing.check_equivalent`). ``--dot FILE`` writes
the storage graph as Graphviz DOT.

The exit status is 0 on success, 1 when the analysis, the rewrite or the
equivalence check fails (with a message on standard error), 2 on a usage error.

Examples
--------
>>> from rewrite.cli import main
>>> main(["demo", "--no-rewrite"])  # doctest: +ELLIPSIS
fx-aliasing demo: ...
0
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import torch
import torch.fx

from aliasing import AliasAnalysis, AliasingError, analyze
from rewrite import eliminate_clones
from rewrite.errors import NotEquivalent
from rewrite.examples import DEMO_DONATED_INPUTS, TracingMode, demo_block, trace_demo
from rewrite.testing import check_equivalent, copy_program

__all__ = ["build_parser", "count_clones", "main", "run_demo"]

#: How many independent random input sets the equivalence check runs.
EQUIVALENCE_TRIALS: int = 3

_CLONE_OPS = (torch.ops.aten.clone.default, torch.ops.aten._to_copy.default)


class DemoFailed(Exception):
    """A step of the demo failed; the message says which and why."""


def count_clones(gm: torch.fx.GraphModule) -> int:
    """Number of ``aten.clone`` and ``aten._to_copy`` nodes in ``gm``'s graph.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        An ATen-level graph.

    Returns
    -------
    int
        Count of clone-like copy nodes (the candidates of clone elimination).

    Examples
    --------
    >>> from rewrite.examples import trace_demo
    >>> count_clones(trace_demo())
    5
    """
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target in _CLONE_OPS)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``fx-aliasing``.

    Examples
    --------
    >>> build_parser().parse_args(["demo", "--seed", "3"]).seed
    3
    """
    parser = argparse.ArgumentParser(
        prog="fx-aliasing",
        description="Alias, overlap and mutation analysis for torch.fx graphs, "
        "and a sound clone-elimination pass.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    demo = sub.add_parser(
        "demo",
        help="analyse and rewrite the bundled transformer-style block",
        description="Trace the bundled transformer-style block (in-place RMSNorm and rotary "
        "custom ops, fused qkv split, KV-cache write, clones), print its storages, alias "
        "sets and per-storage reads and writes, then remove the clones that are not needed "
        "and check the result on random inputs.",
    )
    demo.add_argument("--dot", metavar="FILE", type=Path, help="write the storage graph as Graphviz DOT to FILE")
    demo.add_argument("--no-rewrite", action="store_true", help="only analyse; skip clone elimination")
    demo.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    demo.add_argument(
        "--tracing-mode",
        choices=("fake", "symbolic"),
        default="fake",
        help="make_fx tracing mode; 'symbolic' makes the token dimension a SymInt (default: fake)",
    )
    return parser


def _names(nodes: Sequence[torch.fx.Node]) -> str:
    return ", ".join(n.name for n in nodes) if nodes else "-"


def _print_storages(analysis: AliasAnalysis, out: TextIO) -> None:
    print("\n== storages ==", file=out)
    print(f"{'storage':<8} {'role':<14} values", file=out)
    for sid in analysis.storages:
        role = analysis.storage_role(sid)
        print(f"{sid:<8} {role.value:<14} {_names(analysis.values_in(sid))}", file=out)


def _tensor_nodes(gm: torch.fx.GraphModule, analysis: AliasAnalysis) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op != "output" and analysis.storage_of(n)]


def _print_alias_sets(gm: torch.fx.GraphModule, analysis: AliasAnalysis, out: TextIO) -> None:
    print("\n== alias sets (values that may share storage) ==", file=out)
    seen: set[tuple[str, ...]] = set()
    alone: list[torch.fx.Node] = []
    for node in _tensor_nodes(gm, analysis):
        members = analysis.alias_set(node)
        key = tuple(m.name for m in members)
        if key in seen:
            continue
        seen.add(key)
        if len(members) <= 1:
            alone.append(node)
            continue
        print(f"{{{', '.join(key)}}}", file=out)
        tensors = [m for m in members if m.op != "output"]
        disjoint = [
            f"{a.name}/{b.name}"
            for i, a in enumerate(tensors)
            for b in tensors[i + 1 :]
            if not analysis.may_overlap(a, b)
        ]
        if disjoint:
            print(f"    provably disjoint: {', '.join(disjoint)}", file=out)
    print(f"alias nothing else: {_names(alone)}", file=out)


def _print_accesses(analysis: AliasAnalysis, out: TextIO) -> None:
    print("\n== reads and writes per storage, in graph order ==", file=out)
    for sid in analysis.storages:
        accesses = analysis.storage_accesses(sid)
        print(f"{sid} ({analysis.storage_role(sid).value}):", file=out)
        if not accesses:
            print("    (no reads or writes)", file=out)
        for access in accesses:
            via = "" if access.value is access.node else f" via {access.value.name}"
            print(f"    {access.kind:<5} {access.node.name}{via}", file=out)


def _rewrite_and_check(
    gm: torch.fx.GraphModule,
    make_inputs: Callable[..., tuple[torch.Tensor, ...]],
    seed: int,
    donated: tuple[int, ...],
    out: TextIO,
) -> None:
    rewritten = copy_program(gm)
    if not isinstance(rewritten, torch.fx.GraphModule):
        raise DemoFailed(f"copy_program returned {type(rewritten).__name__}, expected a GraphModule")
    before = count_clones(rewritten)
    report = eliminate_clones(rewritten, donated_inputs=donated)
    after = count_clones(rewritten)
    print("\n== clone elimination ==", file=out)
    print(str(report), file=out)
    print(f"clones: {before} before, {after} after (removed {len(report.removed)}: {', '.join(report.removed) or '-'})", file=out)
    if before - after != len(report.removed):
        raise DemoFailed(
            f"the report lists {len(report.removed)} removed clones but the graph lost {before - after}"
        )
    print("\n== rewritten graph ==", file=out)
    print(rewritten.code.strip(), file=out)
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
    rewrite: bool = True,
    seed: int = 0,
    tracing_mode: TracingMode = "fake",
    out: TextIO | None = None,
) -> None:
    """Run the demo, printing to ``out`` (standard output by default).

    Parameters
    ----------
    dot : Path, optional
        Where to write the storage graph as Graphviz DOT.
    rewrite : bool
        Also run clone elimination and the equivalence check.
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
    n_nodes = len(gm.graph.nodes)
    print(
        f"fx-aliasing demo: transformer-style block traced with make_fx "
        f"(tracing_mode={tracing_mode}), {n_nodes} nodes, {count_clones(gm)} clones",
        file=stream,
    )
    print("\n== graph ==", file=stream)
    print(gm.code.strip(), file=stream)
    analysis = analyze(gm, donated_inputs=DEMO_DONATED_INPUTS)
    _print_storages(analysis, stream)
    _print_alias_sets(gm, analysis, stream)
    _print_accesses(analysis, stream)
    if dot is not None:
        try:
            dot.write_text(analysis.to_dot())
        except OSError as exc:
            raise DemoFailed(f"cannot write {dot}: {exc}") from exc
        print(f"\nwrote the storage graph to {dot} (Graphviz DOT)", file=stream)
    if rewrite:
        _rewrite_and_check(gm, make_inputs, seed, DEMO_DONATED_INPUTS, stream)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fx-aliasing`` console script.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        0 on success, 1 when the demo fails, 2 on a usage error.

    Examples
    --------
    >>> main(["demo", "--no-rewrite", "--seed", "1"])  # doctest: +ELLIPSIS
    fx-aliasing demo: ...
    0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return exc.code if isinstance(exc.code, int) else 2
    if args.command != "demo":  # pragma: no cover - argparse only accepts known commands
        parser.print_usage(sys.stderr)
        return 2
    try:
        run_demo(dot=args.dot, rewrite=not args.no_rewrite, seed=args.seed, tracing_mode=args.tracing_mode)
    except (DemoFailed, AliasingError) as exc:
        sys.stdout.flush()
        print(f"fx-aliasing demo: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
