"""Explain a program: its storages, alias sets, accesses and clone decisions, in one call.

:func:`explain` analyses a program (a ``GraphModule`` or an ``ExportedProgram``),
runs :func:`rewrite.eliminate_clones` on a copy of it, and returns an
:class:`Explanation` that holds both and presents them: as text
(:meth:`Explanation.text`, what ``fx-aliasing explain`` prints), as pictures
(:meth:`Explanation.timeline`, :meth:`Explanation.dot`) and as one
self-contained HTML report (:meth:`Explanation.write_html`,
:mod:`rewrite.html_report`).

:func:`explain_file` and :func:`rewrite_file` do the same for a program saved
with ``torch.export.save`` (a ``.pt2`` file): what the ``fx-aliasing explain``
and ``fx-aliasing rewrite`` commands run.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> from rewrite.explain import explain
>>> def f(x):
...     y = (x * 2).clone()  # only read: not needed
...     return y + 1
>>> e = explain(make_fx(f, tracing_mode="fake")(torch.randn(3)))
>>> e.report.removed
('clone',)
>>> "== storages ==" in e.text()
True
"""

from __future__ import annotations

import contextlib
import importlib
import io
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import torch
import torch.fx

from aliasing import AliasAnalysis, analyze, plot_timeline, to_dot
from aliasing.errors import AliasingError
from rewrite.decisions import CloneEliminationReport
from rewrite.eliminate import eliminate_clones
from rewrite.testing import copy_program

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "Explanation",
    "Phase",
    "ProgramFileError",
    "explain",
    "explain_file",
    "format_accesses",
    "format_alias_sets",
    "format_decisions",
    "format_storages",
    "load_program",
    "resolve_donated",
    "rewrite_file",
    "save_program",
]

Program = Union[torch.fx.GraphModule, "torch.export.ExportedProgram"]

#: A progress hook: ``phase("analysing")`` returns a context manager around one phase of work.
Phase = Callable[[str], contextlib.AbstractContextManager[None]]


def _quiet(label: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


class ProgramFileError(AliasingError):
    """A file is not a program saved with ``torch.export.save``, or cannot be read or written."""


# --- text ---------------------------------------------------------------------


def _names(nodes: Sequence[torch.fx.Node]) -> str:
    return ", ".join(n.name for n in nodes) if nodes else "-"


def format_storages(analysis: AliasAnalysis) -> str:
    """The storages table: id, role and the values that may live in each.

    Examples
    --------
    >>> import torch, aliasing
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> a = aliasing.analyze(make_fx(lambda x: x[0] * 2, tracing_mode="fake")(torch.zeros(2, 2)))
    >>> print(format_storages(a))
    storage  role           values
    s0       user_input     x_1, select
    s1       intermediate   mul
    """
    lines = [f"{'storage':<8} {'role':<14} values"]
    for sid in analysis.storages:
        lines.append(f"{sid:<8} {analysis.storage_role(sid).value:<14} {_names(analysis.values_in(sid))}")
    return "\n".join(lines)


def format_alias_sets(analysis: AliasAnalysis) -> str:
    """Values that may share storage, one set a line, with the provably disjoint pairs.

    Examples
    --------
    >>> import torch, aliasing
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> a = aliasing.analyze(make_fx(lambda x: x.split(2), tracing_mode="fake")(torch.zeros(4)))
    >>> print(format_alias_sets(a))
    {x_1, split, getitem, getitem_1}
        provably disjoint: getitem/getitem_1
    alias nothing else: -
    """
    lines: list[str] = []
    seen: set[tuple[str, ...]] = set()
    alone: list[torch.fx.Node] = []
    for node in analysis.nodes:
        if node.op == "output" or not analysis.storage_of(node):
            continue
        members = analysis.alias_set(node)
        key = tuple(m.name for m in members)
        if key in seen:
            continue
        seen.add(key)
        if len(members) <= 1:
            alone.append(node)
            continue
        lines.append(f"{{{', '.join(key)}}}")
        tensors = [m for m in members if m.op != "output" and analysis.facts_of(m) is not None]
        disjoint = [
            f"{a.name}/{b.name}"
            for i, a in enumerate(tensors)
            for b in tensors[i + 1 :]
            if not analysis.may_overlap(a, b)
        ]
        if disjoint:
            lines.append(f"    provably disjoint: {', '.join(disjoint)}")
    lines.append(f"alias nothing else: {_names(alone)}")
    return "\n".join(lines)


def format_accesses(analysis: AliasAnalysis) -> str:
    """The reads and writes of each storage, in graph order.

    Examples
    --------
    >>> import torch, aliasing
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> a = aliasing.analyze(make_fx(lambda x: x[0].add_(1), tracing_mode="fake")(torch.zeros(2)))
    >>> print(format_accesses(a))
    s0 (user_input):
        read  add_ via select
        write add_ via select
        read  output via add_
    """
    lines: list[str] = []
    for sid in analysis.storages:
        accesses = analysis.storage_accesses(sid)
        lines.append(f"{sid} ({analysis.storage_role(sid).value}):")
        if not accesses:
            lines.append("    (no reads or writes)")
        for access in accesses:
            via = "" if access.value is access.node else f" via {access.value.name}"
            lines.append(f"    {access.kind:<5} {access.node.name}{via}")
    return "\n".join(lines)


def format_decisions(report: CloneEliminationReport) -> str:
    """The decision table, then what each reason that occurs means.

    Examples
    --------
    >>> from rewrite.decisions import CloneEliminationReport, Decision, Reason
    >>> print(format_decisions(CloneEliminationReport((Decision("clone", "keep", Reason.LAYOUT, ("x",), "x"),))))
    clone  original  action  reason     evidence
    -----  --------  ------  ---------  --------
    clone  x         keep    C1 layout  x
    0 removed, 1 kept
    <BLANKLINE>
    reasons:
      layout: C1: the clone's layout (dtype, device, sizes, strides, offset, bits) differs from its original
    """
    lines = [str(report)]
    reasons = list(dict.fromkeys(d.reason for d in report.decisions))
    if reasons:
        lines.append("\nreasons:")
        lines.extend(f"  {r.value}: {r.description}" for r in reasons)
    return "\n".join(lines)


# --- the explanation ----------------------------------------------------------


@dataclass(frozen=True)
class Explanation:
    """A program, its analysis, and the clone-elimination run on a copy of it.

    ``program`` is left as it was; ``rewritten`` is the copy with the clones
    removed; ``analysis`` is the analysis of ``program`` (so removed clones are
    in it, for the pictures); ``donated_inputs`` are placeholder positions.
    """

    program: Any
    analysis: AliasAnalysis
    report: CloneEliminationReport
    rewritten: Any
    donated_inputs: tuple[int, ...] = ()
    name: str = "program"

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        """The original program's ``GraphModule``."""
        return _graph_module(self.program)

    def text(self) -> str:
        """Storages, alias sets, per-storage accesses and decisions, as ``fx-aliasing explain`` prints them."""
        gm = self.graph_module
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        inputs = ", ".join(f"{i}:{n.name} ({self.analysis.role(n).value})" for i, n in enumerate(placeholders))
        parts = [
            f"{self.name}: {len(gm.graph.nodes)} nodes, {len(self.analysis.storages)} storages, "
            f"{len(self.report.decisions)} clone candidates",
            f"inputs (placeholder position:name): {inputs or '-'}",
            "\n== storages ==\n" + format_storages(self.analysis),
            "\n== alias sets (values that may share storage) ==\n" + format_alias_sets(self.analysis),
            "\n== reads and writes per storage, in graph order ==\n" + format_accesses(self.analysis),
            "\n== clone elimination ==\n" + format_decisions(self.report),
        ]
        return "\n".join(parts)

    def timeline(self, **kwargs: Any) -> Figure:
        """The storage timeline with the decisions annotated (:func:`aliasing.plot_timeline`'s keywords)."""
        kwargs.setdefault("decisions", self.report)
        return plot_timeline(self.analysis, **kwargs)

    def dot(self, **kwargs: Any) -> str:
        """The storage graph as DOT with the decisions coloured (:func:`aliasing.to_dot`'s keywords)."""
        kwargs.setdefault("decisions", self.report)
        return to_dot(self.analysis, **kwargs)

    def html(self, *, title: str | None = None) -> str:
        """The self-contained HTML report (:func:`rewrite.html_report.render_html`)."""
        from rewrite.html_report import render_html

        return render_html(self, title=title)

    def write_html(self, path: str | Path, *, title: str | None = None) -> Path:
        """Write :meth:`html` to ``path``; returns the path."""
        path = Path(path)
        text = self.html(title=title)
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ProgramFileError(f"cannot write {path}: {exc}") from exc
        return path


def _graph_module(program: Any) -> torch.fx.GraphModule:
    if isinstance(program, torch.export.ExportedProgram):
        gm: torch.fx.GraphModule = program.graph_module
        return gm
    if isinstance(program, torch.fx.GraphModule):
        return program
    raise AliasingError(f"expected a GraphModule or an ExportedProgram, got {type(program).__name__}")


def resolve_donated(program: Program, donated: Iterable[int | str]) -> tuple[int, ...]:
    """Placeholder positions for donated inputs given as positions or placeholder names.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x, y: x + y, tracing_mode="fake")(torch.zeros(2), torch.zeros(2))
    >>> resolve_donated(gm, ["y_1", 0])
    (1, 0)
    """
    from aliasing import InvalidTargetError

    placeholders = [n.name for n in _graph_module(program).graph.nodes if n.op == "placeholder"]
    positions: list[int] = []
    for item in donated:
        if isinstance(item, bool):
            raise InvalidTargetError(f"donated input {item!r} is neither a position nor a placeholder name")
        if isinstance(item, int) or (isinstance(item, str) and item.isdigit()):
            pos = int(item)
            if not 0 <= pos < len(placeholders):
                raise InvalidTargetError(
                    f"donated input position {pos} is out of range: the program has {len(placeholders)} "
                    f"placeholders ({', '.join(f'{i}:{n}' for i, n in enumerate(placeholders))})"
                )
            positions.append(pos)
        elif isinstance(item, str) and item in placeholders:
            positions.append(placeholders.index(item))
        else:
            raise InvalidTargetError(
                f"donated input {item!r} is not a placeholder of the program "
                f"(placeholders: {', '.join(f'{i}:{n}' for i, n in enumerate(placeholders))})"
            )
    return tuple(dict.fromkeys(positions))


def explain(
    program: Program,
    *,
    donated_inputs: Iterable[int | str] = (),
    name: str = "program",
    phase: Phase = _quiet,
) -> Explanation:
    """Analyse ``program`` and eliminate the clones of a copy of it; ``program`` is left unchanged.

    Parameters
    ----------
    program : torch.fx.GraphModule or torch.export.ExportedProgram
    donated_inputs : iterable of int or str
        Inputs the caller gives up: placeholder positions, or placeholder names.
    name : str
        What the text and the report call the program.
    phase : callable, optional
        Progress hook: ``phase(label)`` returns a context manager wrapped around
        each phase of work (the CLI prints the slow ones).

    Returns
    -------
    Explanation

    Raises
    ------
    aliasing.InvalidTargetError
        When ``program`` is not a program or a donated input is not one of its placeholders.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def f(x):
    ...     y = x.clone()
    ...     y.add_(1)
    ...     return y
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    >>> explain(gm).report.kept, explain(gm, donated_inputs=["x_1"]).report.removed
    (('clone',), ('clone',))
    """
    from aliasing import InvalidTargetError

    if not isinstance(program, (torch.fx.GraphModule, torch.export.ExportedProgram)):
        raise InvalidTargetError(f"expected a GraphModule or an ExportedProgram, got {type(program).__name__}")
    donated = resolve_donated(program, donated_inputs)
    with phase("analysing"):
        analysis = analyze(program, donated_inputs=donated)
    with phase("eliminating clones"):
        rewritten = copy_program(program)
        report = eliminate_clones(rewritten, donated_inputs=donated)
    return Explanation(program, analysis, report, rewritten, donated, name)


# --- files --------------------------------------------------------------------


def import_modules(modules: Iterable[str]) -> None:
    """Import modules that register the custom ops a saved program uses.

    Raises
    ------
    ProgramFileError
        When a module cannot be imported.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # any failure of the user's module is reported, not raised raw
            raise ProgramFileError(f"cannot import {module!r}: {type(exc).__name__}: {exc}") from exc


def load_program(path: str | Path, *, imports: Iterable[str] = ()) -> torch.export.ExportedProgram:
    """Load a program saved with ``torch.export.save``, with a clear error for anything else.

    Parameters
    ----------
    path : str or Path
        The ``.pt2`` file.
    imports : iterable of str
        Modules to import first (those that register the program's custom ops).

    Raises
    ------
    ProgramFileError
        When the file is missing, unreadable, or not an exported program.

    Examples
    --------
    >>> import tempfile, torch
    >>> ep = torch.export.export(torch.nn.ReLU(), (torch.randn(2),))
    >>> with tempfile.TemporaryDirectory() as d:
    ...     torch.export.save(ep, f"{d}/relu.pt2")
    ...     type(load_program(f"{d}/relu.pt2")).__name__
    'ExportedProgram'
    """
    path = Path(path)
    import_modules(imports)
    if not path.is_file():
        raise ProgramFileError(f"{path}: no such file" if not path.exists() else f"{path} is not a file")
    try:
        if not zipfile.is_zipfile(path):
            raise ProgramFileError(
                f"{path} is not an exported program: not a zip archive (expected a file written by torch.export.save)"
            )
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except OSError as exc:
        raise ProgramFileError(f"cannot read {path}: {exc}") from exc
    if not any(n.endswith(("serialized_exported_program.json", ".json")) and "models/" in n for n in names) and not any(
        "archive_format" in n for n in names
    ):
        raise ProgramFileError(
            f"{path} is not an exported program: it is a zip archive without torch.export's model files "
            f"(a torch.save checkpoint? save the program with torch.export.save(torch.export.export(model, args), path))"
        )
    try:
        with _quiet_warnings():
            program = torch.export.load(path)
    except Exception as exc:  # torch raises many kinds; all mean "not a program this torch can load"
        hint = ""
        if "operator" in str(exc).lower() or "op" in type(exc).__name__.lower():
            hint = " (if the program uses custom ops, import the module that registers them: --import MODULE)"
        raise ProgramFileError(
            f"{path} could not be loaded as an exported program: {type(exc).__name__}: {exc}{hint}"
        ) from exc
    if not isinstance(program, torch.export.ExportedProgram):
        raise ProgramFileError(f"{path} holds a {type(program).__name__}, not an ExportedProgram")
    return program


@contextlib.contextmanager
def _quiet_warnings() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def save_program(program: torch.export.ExportedProgram, path: str | Path) -> Path:
    """Save an exported program with ``torch.export.save``; errors as :class:`ProgramFileError`."""
    path = Path(path)
    buffer = io.BytesIO()
    try:
        with _quiet_warnings():
            torch.export.save(program, buffer)
        path.write_bytes(buffer.getvalue())
    except OSError as exc:
        raise ProgramFileError(f"cannot write {path}: {exc}") from exc
    except Exception as exc:  # serialisation of the rewritten program failed: nothing was written
        raise ProgramFileError(f"cannot save the rewritten program: {type(exc).__name__}: {exc}") from exc
    return path


def explain_file(
    path: str | Path,
    *,
    donated_inputs: Iterable[int | str] = (),
    html: str | Path | None = None,
    imports: Iterable[str] = (),
    phase: Phase = _quiet,
) -> Explanation:
    """:func:`explain` a program saved with ``torch.export.save``, and write the HTML report if asked.

    Examples
    --------
    >>> import tempfile, torch
    >>> class Scale(torch.nn.Module):
    ...     def forward(self, x):
    ...         return (x * 2).clone()
    >>> with tempfile.TemporaryDirectory() as d:
    ...     torch.export.save(torch.export.export(Scale(), (torch.randn(3),)), f"{d}/scale.pt2")
    ...     explain_file(f"{d}/scale.pt2").report.removed
    ('clone',)
    """
    with phase(f"loading {path}"):
        program = load_program(path, imports=imports)
    explanation = explain(program, donated_inputs=donated_inputs, name=Path(path).name, phase=phase)
    if html is not None:
        with phase("writing the HTML report"):
            explanation.write_html(html)
    return explanation


def rewrite_file(
    path: str | Path,
    out: str | Path,
    *,
    donated_inputs: Iterable[int | str] = (),
    imports: Iterable[str] = (),
    phase: Phase = _quiet,
) -> Explanation:
    """Load a saved program, eliminate its clones and save the result to ``out``.

    Returns the :class:`Explanation` (its ``rewritten`` program is what was saved).

    Examples
    --------
    >>> import tempfile, torch
    >>> class Scale(torch.nn.Module):
    ...     def forward(self, x):
    ...         return (x * 2).clone()
    >>> with tempfile.TemporaryDirectory() as d:
    ...     torch.export.save(torch.export.export(Scale(), (torch.randn(3),)), f"{d}/scale.pt2")
    ...     e = rewrite_file(f"{d}/scale.pt2", f"{d}/out.pt2")
    ...     [n.name for n in load_program(f"{d}/out.pt2").graph.nodes]
    ['x', 'mul', 'output']
    """
    explanation = explain_file(path, donated_inputs=donated_inputs, imports=imports, phase=phase)
    with phase(f"saving {out}"):
        save_program(explanation.rewritten, out)
    return explanation
