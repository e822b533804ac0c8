"""The ``fx-aliasing`` command line.

``fx-aliasing explain PROGRAM.pt2`` loads a program saved with
``torch.export.save`` and prints:

1. a summary: nodes, inputs by role, storages, alias sets, and the copy
   candidates counted by kind and action (:mod:`rewrite.counts`);
2. the clone-elimination decisions, one row per copy candidate (a clone or a
   ``copy_``), with their reasons (and what each means) and evidence;
3. the program's inputs (placeholder positions, names and roles);
4. the storages: id, role and the values that live in each;
5. the alias sets: values that may share storage, with the pairs inside a set
   whose regions provably do not overlap;
6. the reads and writes of each storage, in graph order.

``--summary`` prints only the first two; ``--json`` prints the decisions and
their counts as JSON instead (:meth:`rewrite.explain.Explanation.as_dict` has
the schema). ``--html FILE`` also writes one self-contained HTML report
(summary, decision table, storage timeline, storage graph, close-ups per clone,
the code with removed and kept clones marked); ``--timeline FILE`` (``.svg`` or
``.png``) and ``--dot FILE`` write the pictures alone.

``fx-aliasing rewrite PROGRAM.pt2 -o OUT.pt2`` saves the program with the clones
it does not need removed; ``--donated`` (both commands) names the inputs the
caller gives up, by placeholder position or name; ``--check`` runs the original
and the rewritten program on the example inputs saved with the program and
compares them (:func:`rewrite.testing.check_equivalent`).

``fx-aliasing demo`` does the same on the bundled transformer-style block
(:mod:`rewrite.examples`), traced with ``make_fx``, and checks the rewrite on
random inputs.

This module parses and checks the arguments without importing torch:
``--help``, ``--version`` and every usage error answer at once. The commands
themselves (:mod:`rewrite.commands`) are imported once the arguments are
checked. Paths and arguments are checked before any work starts; what can only
be checked against the loaded program (``--donated`` positions and names) is
checked right after loading it. The exit status is 0 on success, 1 when
loading, the analysis, the rewrite or a check fails (with a message on standard
error), 2 on a usage error (the usage, then one ``error:`` line naming the
argument). Phases that take more than a second say so on standard error.

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
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rewrite.lazy import lazy_names

if TYPE_CHECKING:
    from rewrite.commands import count_clones, run_demo
    from rewrite.errors import DemoFailed, UsageError  # noqa: F401  (their old names here: rewrite.errors)

__all__ = ["ProgressReporter", "build_parser", "count_clones", "main", "run_demo", "version_text"]

#: A phase that runs longer than this many seconds says so on standard error.
PROGRESS_AFTER_S: float = 1.0

#: Names this module gives from the modules that import torch, imported on first use.
_LAZY = {
    "count_clones": "rewrite.commands",
    "run_demo": "rewrite.commands",
    "EQUIVALENCE_TRIALS": "rewrite.commands",
    "DemoFailed": "rewrite.errors",
    "UsageError": "rewrite.errors",
}


__getattr__, __dir__ = lazy_names(globals(), _LAZY, __all__)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:  # a source checkout that is not installed
        return "(not installed)"


def version_text() -> str:
    """``fx-aliasing X.Y.Z (torch A.B.C)``, read from the installed packages' metadata (torch is not imported).

    Examples
    --------
    >>> version_text().startswith("fx-aliasing ")
    True
    """
    return f"fx-aliasing {_version('fx-aliasing')} (torch {_version('torch')})"


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


# --- argument checks (before any work, and before torch is imported) ----------------


class _BadArgument(Exception):
    """A path or an argument is wrong (found before torch is imported); exit status 2."""


def _input_file(text: str) -> Path:
    path = Path(text)
    if not path.exists():
        raise _BadArgument(f"{text}: no such file")
    if not path.is_file():
        raise _BadArgument(f"{text} is not a file")
    if not os.access(path, os.R_OK):
        raise _BadArgument(f"{text} is not readable")
    return path


def _output_file(path: Path, what: str, inputs: Sequence[Path], suffixes: Sequence[str] = ()) -> Path:
    if suffixes and path.suffix.lower() not in suffixes:
        raise _BadArgument(f"{what} {path}: the file name must end with {' or '.join(suffixes)}")
    if path.is_dir():
        raise _BadArgument(f"{what} {path} is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise _BadArgument(f"{what} {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise _BadArgument(f"{what} {path} is not writable")
    for other in inputs:
        if path.resolve() == other.resolve():
            raise _BadArgument(f"{what} {path} is the input program; choose another file")
    return path


def _donated(text: str | None) -> tuple[int | str, ...]:
    """``--donated``'s positions and names (whether the program has them is checked once it is loaded)."""
    if not text:
        return ()
    items: list[int | str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise _BadArgument(f"--donated {text!r}: an empty entry (use commas between positions or names)")
        if part.isdigit():
            items.append(int(part))
        elif part.isidentifier():
            items.append(part)
        else:
            raise _BadArgument(f"--donated {text!r}: {part!r} is neither a placeholder position nor a name")
    return tuple(items)


def _importable(modules: Sequence[str]) -> None:
    """``--import``: each name is a module name whose top-level package exists (found, not imported)."""
    if modules and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # --import finds ./myops.py, as `python -m` does (the console script does not)
    for module in modules:
        if not all(part.isidentifier() for part in module.split(".")):
            raise _BadArgument(f"--import {module!r}: not a module name")
        top = module.partition(".")[0]
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise _BadArgument(f"--import {module}: no module named {top!r} (on sys.path or in the current folder)")


#: ``--dot`` file suffixes that Graphviz renders (any other suffix gets the DOT text).
_RENDERED = (".svg", ".png")
_IMAGES = (".pdf", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".eps", ".ps")


def _dot_target(path: Path, what: str = "--dot") -> Path:
    """Refuse a ``--dot`` file that would get DOT text under an image's name, before any work."""
    suffix = path.suffix.lower()
    # (aliasing.graphviz_available asks the same question, but importing aliasing imports torch)
    if suffix in _RENDERED and shutil.which("dot") is None:
        raise _BadArgument(
            f"{what} {path}: rendering {suffix[1:].upper()} needs Graphviz's dot program "
            "(apt-get install graphviz), or name a .dot file to get the DOT text"
        )
    if suffix in _IMAGES:
        raise _BadArgument(f"{what} {path}: writes DOT text (.dot, .gv) or renders .svg and .png; not {suffix}")
    return path


def _needs_matplotlib(option: str) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise _BadArgument(f"{option} draws the storage timeline with matplotlib: pip install 'fx-aliasing[notebooks]'")


def _check_program_options(args: argparse.Namespace) -> None:
    """``explain`` and ``rewrite``: the program, ``--donated`` and ``--import``; sets
    ``args.program_path`` and ``args.donated_items``."""
    args.program_path = _input_file(args.program)
    args.donated_items = _donated(args.donated)
    _importable(args.imports)


def _check_arguments(args: argparse.Namespace) -> None:
    """Every check that needs no loaded program, in the order the options are documented."""
    if args.command == "demo":
        if args.dot is not None:
            _dot_target(args.dot)
        if args.html is not None:
            _output_file(args.html, "--html", [], (".html", ".htm"))
            _needs_matplotlib("--html")
    elif args.command == "explain":
        _check_program_options(args)
        program = [args.program_path]
        if args.html is not None:
            _output_file(args.html, "--html", program, (".html", ".htm"))
            _needs_matplotlib("--html")
        if args.timeline is not None:
            _output_file(args.timeline, "--timeline", program, (".svg", ".png"))
            _needs_matplotlib("--timeline")
        if args.dot is not None:
            _dot_target(_output_file(args.dot, "--dot", program))
        written = [p for p in (args.html, args.timeline, args.dot) if p is not None]
        if len({p.resolve() for p in written}) < len(written):
            raise _BadArgument("--html, --timeline and --dot must name different files")
    elif args.command == "rewrite":
        _check_program_options(args)
        _output_file(args.output, "-o", [args.program_path])


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
        epilog="Exit status: 0 on success, 1 when loading, the analysis, the rewrite or a check fails, "
        "2 on a usage error.",
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
    output = ex.add_mutually_exclusive_group()
    output.add_argument(
        "--summary",
        action="store_true",
        help="print only the summary and the clone decisions (a few dozen lines on large programs)",
    )
    output.add_argument(
        "--json",
        action="store_true",
        help="print the decisions and their counts as JSON (sorted keys) instead of the text; "
        "what else is said goes to standard error",
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
    demo.add_argument(
        "--no-rewrite",
        action="store_true",
        help="only analyse: print no decision table and no rewritten graph, check no equivalence",
    )
    demo.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    demo.add_argument(
        "--tracing-mode",
        choices=("fake", "symbolic"),
        default="fake",
        help="make_fx tracing mode; 'symbolic' makes the token dimension a SymInt (default: fake)",
    )


# --- main -------------------------------------------------------------------------


def _usage_error(parser: argparse.ArgumentParser, command: str, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"fx-aliasing {command}: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fx-aliasing`` console script.

    Parses and checks the arguments without importing torch (``--help``,
    ``--version`` and usage errors answer at once), then runs the command
    (:func:`rewrite.commands.run_command`).

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
    command = str(args.command)
    try:
        _check_arguments(args)
    except _BadArgument as exc:
        return _usage_error(parser, command, str(exc))

    # The arguments are fine: from here on the work needs torch.
    from aliasing.errors import AliasingError
    from rewrite.commands import run_command
    from rewrite.errors import DemoFailed, UsageError

    progress = ProgressReporter()
    try:
        run_command(args, progress, sys.stdout)
    except UsageError as exc:  # an argument the loaded program refutes (--donated), or --check without inputs
        sys.stdout.flush()
        return _usage_error(parser, command, str(exc))
    except (DemoFailed, AliasingError) as exc:
        sys.stdout.flush()
        print(f"fx-aliasing {command}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
