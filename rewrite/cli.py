"""The ``fx-aliasing`` command line.

``fx-aliasing explain PROGRAM.pt2`` loads a program saved with
``torch.export.save`` and prints:

1. the program's inputs (placeholder positions, names and roles);
2. the storages: id, role and the values that live in each;
3. the alias sets: values that may share storage, with the pairs inside a set
   whose regions provably do not overlap;
4. the reads and writes of each storage, in graph order;
5. the clone-elimination decisions, with their reasons (and what each means)
   and evidence.

``--html FILE`` also writes one self-contained HTML report (summary, decision
table, storage timeline, storage graph, close-ups per clone, the code with
removed and kept clones marked); ``--timeline FILE`` (``.svg`` or ``.png``) and
``--dot FILE`` write the pictures alone.

``fx-aliasing rewrite PROGRAM.pt2 -o OUT.pt2`` saves the program with the clones
it does not need removed; ``--donated`` (both commands) names the inputs the
caller gives up, by placeholder position or name; ``--check`` runs the original
and the rewritten program on the example inputs saved with the program and
compares them (:func:`rewrite.testing.check_equivalent`).

``fx-aliasing demo`` does the same on the bundled transformer-style block
(:mod:`rewrite.examples`), traced with ``make_fx``, and checks the rewrite on
random inputs.

Paths and arguments are checked before any work starts. Phases that take more
than a second say so on standard error. The exit status is 0 on success, 1 when
loading, the analysis, the rewrite or a check fails (with a message on standard
error), 2 on a usage error.

Examples
--------
>>> from rewrite.cli import main
>>> main(["demo", "--no-rewrite"])  # doctest: +ELLIPSIS
fx-aliasing demo: ...
0
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

import torch
import torch.fx

from aliasing import AliasingError, RenderingError, analyze, graphviz_available, render_dot, save_timeline
from rewrite import eliminate_clones
from rewrite.editing.copying import copy_program
from rewrite.errors import DemoFailed, NotEquivalent, OracleError, UsageError
from rewrite.examples import DEMO_DONATED_INPUTS, TracingMode, demo_block, trace_demo
from rewrite.explain import (
    Explanation,
    ProgramFileError,
    explain,
    format_accesses,
    format_alias_sets,
    format_storages,
    import_modules,
    load_program,
    save_program,
)
from rewrite.testing.equivalence import check_equivalent

__all__ = ["ProgressReporter", "build_parser", "count_clones", "main", "run_demo", "version_text"]

#: How many independent random input sets the demo's equivalence check runs.
EQUIVALENCE_TRIALS: int = 3

#: A phase that runs longer than this many seconds says so on standard error.
PROGRESS_AFTER_S: float = 1.0

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
        Count of clone-like copy nodes (the candidates of clone elimination).

    Examples
    --------
    >>> from rewrite.examples import trace_demo
    >>> count_clones(trace_demo())
    5
    """
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target in _CLONE_OPS)


def version_text() -> str:
    """``fx-aliasing X.Y.Z (torch A.B.C)``.

    Examples
    --------
    >>> version_text().startswith("fx-aliasing ")
    True
    """
    try:
        ours = importlib.metadata.version("fx-aliasing")
    except importlib.metadata.PackageNotFoundError:  # a source checkout that is not installed
        ours = "(not installed)"
    return f"fx-aliasing {ours} (torch {torch.__version__})"


class ProgressReporter:
    """Says on ``stream`` which phase is running when one takes longer than ``after`` seconds.

    Use an instance as the ``phase`` hook of :func:`rewrite.explain.explain`:
    ``with progress("analysing"): ...``. A phase that ends quickly prints nothing;
    a slow one prints ``fx-aliasing: analysing ...`` once it has run ``after``
    seconds and ``fx-aliasing: analysing done (3.2 s)`` when it ends.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> progress = ProgressReporter(out, after=0.0)
    >>> with progress("counting"):
    ...     pass
    >>> out.getvalue().splitlines()[-1].startswith("fx-aliasing: counting done")
    True
    """

    def __init__(self, stream: TextIO | None = None, *, after: float = PROGRESS_AFTER_S) -> None:
        self._stream = stream
        self._after = after

    @contextlib.contextmanager
    def __call__(self, label: str) -> Iterator[None]:
        stream = self._stream if self._stream is not None else sys.stderr
        started = time.monotonic()
        announced = threading.Event()
        lock = threading.Lock()

        def announce() -> None:
            with lock:
                announced.set()
                print(f"fx-aliasing: {label} ...", file=stream, flush=True)

        timer: threading.Timer | None = None
        if self._after <= 0:
            announce()
        else:
            timer = threading.Timer(self._after, announce)
            timer.daemon = True
            timer.start()
        try:
            yield
        finally:
            if timer is not None:
                timer.cancel()
            with lock:
                if announced.is_set():
                    print(f"fx-aliasing: {label} done ({time.monotonic() - started:.1f} s)", file=stream, flush=True)


# --- argument checks (before any work) ----------------------------------------


def _input_file(text: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise UsageError(f"{text}: no such file")
    if not path.is_file():
        raise UsageError(f"{text} is not a file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{text} is not readable")
    return path


def _output_file(path: Path, what: str, inputs: Sequence[Path], suffixes: Sequence[str] = ()) -> Path:
    if suffixes and path.suffix.lower() not in suffixes:
        raise UsageError(f"{what} {path}: the file name must end with {' or '.join(suffixes)}")
    if path.is_dir():
        raise UsageError(f"{what} {path} is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{what} {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{what} {path} is not writable")
    for other in inputs:
        if path.resolve() == other.resolve():
            raise UsageError(f"{what} {path} is the input program; choose another file")
    return path


def _donated(text: str | None) -> tuple[int | str, ...]:
    if not text:
        return ()
    items: list[int | str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise UsageError(f"--donated {text!r}: an empty entry (use commas between positions or names)")
        if part.isdigit():
            items.append(int(part))
        elif part.isidentifier():
            items.append(part)
        else:
            raise UsageError(f"--donated {text!r}: {part!r} is neither a placeholder position nor a name")
    return tuple(items)


#: ``--dot`` file suffixes that Graphviz renders (any other suffix gets the DOT text).
_RENDERED = {".svg": "svg", ".png": "png"}
_IMAGES = (".pdf", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".eps", ".ps")


def _dot_target(path: Path, what: str = "--dot") -> Path:
    """Refuse a ``--dot`` file that would get DOT text under an image's name, before any work."""
    suffix = path.suffix.lower()
    if suffix in _RENDERED and not graphviz_available():
        raise UsageError(
            f"{what} {path}: rendering {suffix[1:].upper()} needs Graphviz's dot program "
            "(apt-get install graphviz), or name a .dot file to get the DOT text"
        )
    if suffix in _IMAGES:
        raise UsageError(f"{what} {path}: writes DOT text (.dot, .gv) or renders .svg and .png; not {suffix}")
    return path


def _write_dot(path: Path, source: str) -> str:
    """Write the storage graph: rendered by Graphviz for .svg/.png, DOT text otherwise; what was written."""
    fmt = _RENDERED.get(path.suffix.lower())
    if fmt is None:
        path.write_text(source)
        return "Graphviz DOT"
    path.write_bytes(render_dot(source, "svg" if fmt == "svg" else "png"))
    return f"{fmt.upper()}, rendered by Graphviz's dot"


def _needs_matplotlib(option: str) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"{option} draws the storage timeline with matplotlib: pip install 'fx-aliasing[notebooks]'")


# --- the parser -----------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``fx-aliasing``.

    Examples
    --------
    >>> build_parser().parse_args(["demo", "--seed", "3"]).seed
    3
    >>> build_parser().parse_args(["rewrite", "p.pt2", "-o", "q.pt2"]).output
    PosixPath('q.pt2')
    """
    parser = argparse.ArgumentParser(
        prog="fx-aliasing",
        description="Alias, overlap and mutation analysis for torch.fx graphs, "
        "and a sound clone-elimination pass.",
    )
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_explain_parser(sub)
    _add_rewrite_parser(sub)
    _add_demo_parser(sub)
    return parser


_DOT_HELP = "write the storage graph to FILE: DOT text, or rendered by Graphviz for .svg and .png"


def _add_program_options(p: argparse.ArgumentParser) -> None:
    """The options ``explain`` and ``rewrite`` share: the program, ``--donated``, ``--import``."""
    p.add_argument("program", metavar="PROGRAM.pt2", help="a program saved with torch.export.save")
    p.add_argument(
        "--donated",
        metavar="INPUTS",
        help="inputs the caller gives up, as comma-separated placeholder positions or names "
        "(explain lists them), e.g. --donated 4,k_cache",
    )
    p.add_argument(
        "--import",
        dest="imports",
        metavar="MODULE",
        action="append",
        default=[],
        help="import MODULE first (one that registers the custom ops the program uses); repeatable",
    )


def _add_explain_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``explain`` subcommand."""
    ex = sub.add_parser(
        "explain",
        help="print the storages, alias sets, accesses and clone decisions of a saved program",
        description="Load a program saved with torch.export.save, print its storages, alias sets, "
        "per-storage reads and writes and the clone-elimination decisions with their reasons and evidence; "
        "optionally write an HTML report and the pictures.",
    )
    _add_program_options(ex)
    ex.add_argument("--html", metavar="FILE", type=Path, help="write a self-contained HTML report to FILE")
    ex.add_argument("--timeline", metavar="FILE", type=Path, help="write the storage timeline to FILE (.svg or .png)")
    ex.add_argument("--dot", metavar="FILE", type=Path, help=_DOT_HELP)
    ex.add_argument(
        "--summary",
        action="store_true",
        help="print only the summary and the clone decisions (a few dozen lines on large programs)",
    )


def _add_rewrite_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``rewrite`` subcommand."""
    rw = sub.add_parser(
        "rewrite",
        help="save a program with the clones it does not need removed",
        description="Load a program saved with torch.export.save, remove every clone it does not need "
        "and save the result with torch.export.save.",
    )
    _add_program_options(rw)
    rw.add_argument("-o", "--output", metavar="OUT.pt2", type=Path, required=True, help="where to save the result")
    rw.add_argument(
        "--check",
        action="store_true",
        help="run the original and the rewritten program on the example inputs saved with it and compare them",
    )


def _add_demo_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``demo`` subcommand."""
    demo = sub.add_parser(
        "demo",
        help="analyse and rewrite the bundled transformer-style block",
        description="Trace the bundled transformer-style block (in-place RMSNorm and rotary "
        "custom ops, fused qkv split, KV-cache write, clones), print its storages, alias "
        "sets and per-storage reads and writes, then remove the clones that are not needed "
        "and check the result on random inputs.",
    )
    demo.add_argument("--dot", metavar="FILE", type=Path, help=_DOT_HELP)
    demo.add_argument("--html", metavar="FILE", type=Path, help="write the HTML report of the block to FILE")
    demo.add_argument("--no-rewrite", action="store_true", help="only analyse; skip clone elimination")
    demo.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    demo.add_argument(
        "--tracing-mode",
        choices=("fake", "symbolic"),
        default="fake",
        help="make_fx tracing mode; 'symbolic' makes the token dimension a SymInt (default: fake)",
    )


# --- demo -----------------------------------------------------------------------


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
    html: Path | None = None,
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
    html : Path, optional
        Where to write the HTML report of the block.
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
    print("\n== storages ==\n" + format_storages(analysis), file=stream)
    print("\n== alias sets (values that may share storage) ==\n" + format_alias_sets(analysis), file=stream)
    print("\n== reads and writes per storage, in graph order ==\n" + format_accesses(analysis), file=stream)
    if dot is not None or html is not None:
        explanation = explain(gm, donated_inputs=DEMO_DONATED_INPUTS, name="the demo block")
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
        _rewrite_and_check(gm, make_inputs, seed, DEMO_DONATED_INPUTS, stream)


# --- explain and rewrite ----------------------------------------------------------


def _load(args: argparse.Namespace, progress: ProgressReporter) -> torch.export.ExportedProgram:
    if args.imports and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # --import finds ./myops.py, as `python -m` does (the console script does not)
    import_modules(args.imports)
    with progress(f"loading {args.program}"):
        return load_program(args.program)


def _run_explain(args: argparse.Namespace, progress: ProgressReporter, out: TextIO) -> None:
    program_path = _input_file(args.program)
    donated = _donated(args.donated)
    if args.html is not None:
        _output_file(args.html, "--html", [program_path], (".html", ".htm"))
        _needs_matplotlib("--html")
    if args.timeline is not None:
        _output_file(args.timeline, "--timeline", [program_path], (".svg", ".png"))
        _needs_matplotlib("--timeline")
    if args.dot is not None:
        _dot_target(_output_file(args.dot, "--dot", [program_path]))
    written = [p for p in (args.html, args.timeline, args.dot) if p is not None]
    if len({p.resolve() for p in written}) < len(written):
        raise UsageError("--html, --timeline and --dot must name different files")

    program = _load(args, progress)
    explanation = explain(program, donated_inputs=donated, name=program_path.name, phase=progress)
    print(explanation.text(summary=args.summary), file=out)
    if args.dot is not None:
        try:
            kind = _write_dot(args.dot, explanation.dot())
        except (OSError, RenderingError) as exc:
            raise ProgramFileError(f"cannot write {args.dot}: {exc}") from exc
        print(f"\nwrote the storage graph to {args.dot} ({kind})", file=out)
    if args.timeline is not None:
        with progress("drawing the storage timeline"):
            save_timeline(explanation.timeline(), args.timeline)
        print(f"wrote the storage timeline to {args.timeline}", file=out)
    if args.html is not None:
        if not graphviz_available():
            print(
                "fx-aliasing: Graphviz's dot is not installed; the report shows the storage graph as DOT text",
                file=sys.stderr,
            )
        with progress("writing the HTML report"):
            explanation.write_html(args.html)
        print(f"wrote the HTML report to {args.html} (open it in a browser)", file=out)


def _run_rewrite(args: argparse.Namespace, progress: ProgressReporter, out: TextIO) -> None:
    program_path = _input_file(args.program)
    donated = _donated(args.donated)
    _output_file(args.output, "-o", [program_path])
    program = _load(args, progress)
    explanation = explain(program, donated_inputs=donated, name=program_path.name, phase=progress)
    report = explanation.report
    before = count_clones(explanation.graph_module)
    print(str(report), file=out)
    if args.check:
        _check(explanation, progress, out)
    with progress(f"saving {args.output}"):
        save_program(explanation.rewritten, args.output)
    after = count_clones(explanation.rewritten.graph_module)
    print(f"clones: {before} before, {after} after; saved {args.output}", file=out)


def _check(explanation: Explanation, progress: ProgressReporter, out: TextIO) -> None:
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fx-aliasing`` console script.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        0 on success, 1 when a command fails, 2 on a usage error.

    Examples
    --------
    >>> main(["demo", "--no-rewrite", "--seed", "1"])  # doctest: +ELLIPSIS
    fx-aliasing demo: ...
    0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help, --version and on usage errors
        return exc.code if isinstance(exc.code, int) else 2
    progress = ProgressReporter()
    command = str(args.command)
    try:
        if command == "demo":
            if args.dot is not None:
                _dot_target(args.dot)
            if args.html is not None:
                _output_file(args.html, "--html", [], (".html", ".htm"))
                _needs_matplotlib("--html")
            run_demo(
                dot=args.dot, html=args.html, rewrite=not args.no_rewrite, seed=args.seed, tracing_mode=args.tracing_mode
            )
        elif command == "explain":
            _run_explain(args, progress, sys.stdout)
        elif command == "rewrite":
            _run_rewrite(args, progress, sys.stdout)
        else:  # pragma: no cover - argparse only accepts known commands
            parser.print_usage(sys.stderr)
            return 2
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"fx-aliasing {command}: error: {exc}", file=sys.stderr)
        return 2
    except (DemoFailed, AliasingError) as exc:
        sys.stdout.flush()
        print(f"fx-aliasing {command}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
