"""Explain a program: its storages, alias sets, accesses and clone decisions, in one call.

:func:`explain` analyses a program (a ``GraphModule`` or an ``ExportedProgram``),
runs :func:`rewrite.eliminate_clones` on a copy of it, and returns an
:class:`Explanation` that holds both and presents them: as text
(:meth:`Explanation.text`, what ``fx-aliasing explain`` prints), as pictures
(:meth:`Explanation.timeline`, :meth:`Explanation.dot`) and as one
self-contained HTML report (:meth:`Explanation.write_html`,
:mod:`rewrite.html_report`), and as JSON (:meth:`Explanation.to_json`, what
``fx-aliasing explain --json`` prints; the schema: :meth:`Explanation.as_dict`).
Every count of decisions they show is said one way (:mod:`rewrite.counts`).

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
>>> print(e.text(summary=True))
program: 5 nodes, 4 storages, 1 copy candidate (1 clone, 0 copy_): 1 removed, 0 kept
inputs: 1 user input (0:x_1)
storages: 4 (1 user input, 3 intermediate); no write in place
alias sets: none (no two values share a storage)
<BLANKLINE>
== clone elimination ==
node   kind   original  action  reason     evidence
-----  -----  --------  ------  ---------  --------
clone  clone  mul       remove  removable
1 copy candidate (1 clone, 0 copy_): 1 removed, 0 kept
<BLANKLINE>
reasons:
  removable: no condition requires the copy
<BLANKLINE>
(summary: e.text() or fx-aliasing explain without --summary adds every input, storage, alias set, read and write)
>>> "== storages ==" in e.text()
True
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import io
import json
import logging
import re
import textwrap
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import torch
import torch.fx

from aliasing import AliasAnalysis, analyze, plot_timeline, to_dot, warnings_once
from aliasing.core.roles import CALLER_VISIBLE
from aliasing.errors import AliasingError
from rewrite.counts import CopyCounts, copy_kind, count_copies
from rewrite.editing.copying import copy_program
from rewrite.errors import ProgramFileError
from rewrite.pipeline.eliminate import eliminate_clones
from rewrite.planning.decisions import CloneEliminationReport, Decision

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "JSON_SCHEMA",
    "SUMMARY_DECISIONS",
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

#: The summary lists decisions one a line up to this many; beyond, grouped by action and reason.
SUMMARY_DECISIONS: int = 12

#: The ``schema`` of :meth:`Explanation.as_dict` (and of ``fx-aliasing explain --json``).
JSON_SCHEMA: str = "fx-aliasing-explain/1"

#: A progress hook: ``phase("analysing")`` returns a context manager around one phase of work.
Phase = Callable[[str], contextlib.AbstractContextManager[None]]


def _quiet(label: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _fx_aliasing_version() -> str:
    """fx-aliasing's installed version, or ``"source"`` in a source checkout that is not installed."""
    try:
        return importlib.metadata.version("fx-aliasing")
    except importlib.metadata.PackageNotFoundError:
        return "source"


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
    """The decision table, one row per copy candidate, its counts, then what each reason that occurs means.

    Columns: the candidate's node, its kind (``clone`` or ``copy_``), its original
    (a ``copy_``'s destination), the action, the condition and reason, the evidence.
    The line under the table counts the rows (:class:`rewrite.counts.CopyCounts`).

    Examples
    --------
    >>> from rewrite.planning.decisions import CloneEliminationReport, Decision, Reason
    >>> print(format_decisions(CloneEliminationReport((Decision("clone", "keep", Reason.LAYOUT, ("x",), "x"),))))
    node   kind   original  action  reason     evidence
    -----  -----  --------  ------  ---------  --------
    clone  clone  x         keep    C1 layout  x
    1 copy candidate (1 clone, 0 copy_): 0 removed, 1 kept
    <BLANKLINE>
    reasons:
      layout: C1: the clone's layout (dtype, device, sizes, strides, offset, bits) differs from its original
    """
    lines = [_decision_table(report)]
    reasons = list(dict.fromkeys(d.reason for d in report.decisions))
    if reasons:
        lines.append("\nreasons:")
        lines.extend(f"  {r.value}: {r.description}" for r in reasons)
    return "\n".join(lines)


def _reason_cell(d: Decision) -> str:
    return f"{d.reason.condition} {d.reason.value}" if d.reason.condition else d.reason.value


def _decision_table(report: CloneEliminationReport) -> str:
    """The table's rows, then the counts line (and the opaque nodes and the error, if any)."""
    header = ("node", "kind", "original", "action", "reason", "evidence")
    rows = [header] + [
        (d.node, copy_kind(d), d.original, d.action, _reason_cell(d), ", ".join(d.evidence)) for d in report.decisions
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(str(count_copies(report.decisions)))
    if report.opaque:
        lines.append(f"{len(report.opaque)} opaque nodes answered conservatively: {_listed(list(report.opaque))}")
    if report.error:
        lines.append(f"error: {report.error}")
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

    @property
    def counts(self) -> CopyCounts:
        """The decisions counted by kind and action (:func:`rewrite.counts.count_copies`)."""
        return count_copies(self.report.decisions)

    def as_dict(self) -> dict[str, Any]:
        """The decisions as plain data: what :meth:`to_json` (``fx-aliasing explain --json``) writes.

        The schema (version 1; ``"schema": "fx-aliasing-explain/1"``), every key always present:

        - ``schema`` (str): ``"fx-aliasing-explain/1"``; a change of the keys or their
          meaning changes the number;
        - ``program`` (str): the program's name (the file name on the command line);
        - ``torch``, ``fx_aliasing`` (str): the versions that made the decisions;
        - ``nodes``, ``storages`` (int): nodes of the program's graph, storages of the analysis;
        - ``donated_inputs``: a list of ``{"position": int, "name": str}``, placeholders
          the caller gives up;
        - ``counts``: ``{"candidates", "clones", "copies", "removed", "kept",
          "clones_removed", "clones_kept", "copies_removed", "copies_kept"}`` (int), the
          rows of ``decisions`` counted by kind and action (:class:`rewrite.counts.CopyCounts`:
          ``clones + copies == removed + kept == candidates == len(decisions)``);
        - ``decisions``: one object per copy candidate, in graph order:

          - ``node`` (str): the clone's or ``copy_``'s node name;
          - ``kind`` (str): ``"clone"`` or ``"copy_"``;
          - ``original`` (str): the clone's original (a ``copy_``'s destination);
          - ``action`` (str): ``"remove"`` or ``"keep"``;
          - ``reason`` (str): the reason code (:class:`rewrite.Reason`'s value, e.g.
            ``"clone-written-then-original-read"``);
          - ``condition`` (str or null): the condition the reason cites (``"C1"`` ...
            ``"C10"``, ``"C2-C5"``, ``"C8a"``, ``"C8b"``), null for none;
          - ``description`` (str): what the reason means, one line;
          - ``evidence`` (list of str): the names of the nodes that caused the decision;
          - ``erased`` (list of str): the nodes a C10 removal erases with the clone;
        - ``opaque`` (list of str): nodes the analysis could not see into (answered conservatively);
        - ``error`` (str or null): why the pass failed and kept every copy, null when it did not.

        Examples
        --------
        >>> import torch
        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> d = explain(make_fx(lambda x: (x * 2).clone() + 1, tracing_mode="fake")(torch.randn(3))).as_dict()
        >>> d["counts"]["candidates"], d["decisions"][0]["kind"], d["decisions"][0]["action"]
        (1, 'clone', 'remove')
        """
        placeholders = [n.name for n in self.graph_module.graph.nodes if n.op == "placeholder"]
        report = self.report
        return {
            "schema": JSON_SCHEMA,
            "program": self.name,
            "torch": torch.__version__,
            "fx_aliasing": _fx_aliasing_version(),
            "nodes": len(self.graph_module.graph.nodes),
            "storages": len(self.analysis.storages),
            "donated_inputs": [{"position": i, "name": placeholders[i]} for i in self.donated_inputs],
            "counts": self.counts.as_dict(),
            "decisions": [
                {
                    "node": d.node,
                    "kind": copy_kind(d),
                    "original": d.original,
                    "action": d.action,
                    "reason": d.reason.value,
                    "condition": d.reason.condition or None,
                    "description": d.reason.description,
                    "evidence": list(d.evidence),
                    "erased": list(d.erased),
                }
                for d in report.decisions
            ],
            "opaque": list(report.opaque),
            "error": report.error,
        }

    def to_json(self) -> str:
        """:meth:`as_dict` as JSON, keys sorted and indented by 2 (stable: diff it in CI).

        Examples
        --------
        >>> import json, torch
        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> e = explain(make_fx(lambda x: (x * 2).clone() + 1, tracing_mode="fake")(torch.randn(3)))
        >>> json.loads(e.to_json())["decisions"][0]["reason"]
        'removable'
        """
        return json.dumps(self.as_dict(), indent=2, sort_keys=True)

    def text(self, *, summary: bool = False) -> str:
        """What ``fx-aliasing explain`` prints: a summary and the clone decisions first, then the details.

        The summary (a few lines: nodes, inputs by role, storages and what is written
        in place, alias sets) and the decision table with what each reason means come
        first; then, unless ``summary``, every input with its placeholder position,
        the storages table, the alias sets with their provably disjoint pairs, and the
        reads and writes of each storage in graph order. With ``summary=True`` the text
        stays short on large programs: a few dozen lines, decisions beyond
        :data:`SUMMARY_DECISIONS` grouped by action and reason.
        """
        parts = [*_summary_lines(self), "", "== clone elimination ==", _decision_text(self.report, brief=summary)]
        if summary:
            parts.append(
                "\n(summary: e.text() or fx-aliasing explain without --summary adds every input, storage, "
                "alias set, read and write)"
            )
            return "\n".join(parts)
        placeholders = [n for n in self.graph_module.graph.nodes if n.op == "placeholder"]
        inputs = _packed([f"{i}:{n.name} ({self.analysis.role(n).value})" for i, n in enumerate(placeholders)])
        parts += [
            "\n== inputs (placeholder position:name (role)) ==\n" + (inputs or "-"),
            "\n== storages ==\n" + format_storages(self.analysis),
            "\n== alias sets (values that may share storage) ==\n" + format_alias_sets(self.analysis),
            "\n== reads and writes per storage, in graph order ==\n" + format_accesses(self.analysis),
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


#: Width the summary and the inputs list wrap to.
_WIDTH = 100


def _packed(entries: Sequence[str], width: int = _WIDTH) -> str:
    """Entries joined by ``", "``, as many a line as fit in ``width`` (an entry is never split)."""
    lines: list[str] = []
    for entry in entries:
        if lines and len(lines[-1]) + 2 + len(entry) <= width:
            lines[-1] += ", " + entry
        else:
            if lines:
                lines[-1] += ","
            lines.append(entry)
    return "\n".join(lines)


def _line(pieces: Sequence[str], width: int = _WIDTH) -> str:
    """Pieces joined by ``"; "``, wrapped between pieces where it can (continuation lines indented)."""
    lines: list[str] = []
    for piece in pieces:
        if lines and len(lines[-1]) + 2 + len(piece) <= width:
            lines[-1] += "; " + piece
            continue
        if lines:
            lines[-1] += ";"
        indent = "    " if lines else ""
        lines.extend(textwrap.wrap(piece, width, initial_indent=indent, subsequent_indent="    ", break_on_hyphens=False))
    return "\n".join(lines)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _listed(names: Sequence[str], limit: int = 8) -> str:
    """``a, b, c`` or ``a, b, ... (and 12 more)``."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", ... (and {len(names) - limit} more)"


def _positions(positions: Sequence[int]) -> str:
    """``0-37`` or ``2, 5, 9-11``: placeholder positions as ranges."""
    ranges: list[list[int]] = []
    for p in positions:
        if ranges and p == ranges[-1][1] + 1:
            ranges[-1][1] = p
        else:
            ranges.append([p, p])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)


def _summary_lines(e: Explanation) -> list[str]:
    """The first lines of :meth:`Explanation.text`: counts, inputs by role, storages, writes, alias sets."""
    analysis, report = e.analysis, e.report
    gm = e.graph_module
    lines = [f"{e.name}: {len(gm.graph.nodes)} nodes, {len(analysis.storages)} storages, {e.counts}"]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    lines.append(_inputs_line(analysis, placeholders))
    lines.append(_storages_line(analysis))
    lines.append(_alias_sets_line(analysis))
    if e.donated_inputs:
        lines.append("donated: " + ", ".join(f"{i}:{placeholders[i].name}" for i in e.donated_inputs))
    if report.opaque:
        lines.append(f"opaque nodes (answered conservatively): {_listed(list(report.opaque))}")
    if report.error:
        lines.append(f"error (every clone kept): {report.error}")
    return [_line([line]) for line in lines]


def _inputs_line(analysis: AliasAnalysis, placeholders: Sequence[torch.fx.Node]) -> str:
    """The inputs: user inputs by name (what --donated takes), the rest by role with their positions."""
    by_role: dict[str, list[int]] = {}
    for i, n in enumerate(placeholders):
        by_role.setdefault(analysis.role(n).value, []).append(i)
    inputs: list[str] = []
    for role, positions in by_role.items():
        words = _plural(len(positions), role.replace("_", " "))
        names = [f"{i}:{placeholders[i].name}" for i in positions]
        detail = _listed(names, 6) if role in ("user_input", "donated_input") or len(positions) <= 4 else (
            f"positions {_positions(positions)}"
        )
        inputs.append(f"{words} ({detail})")
    return _line(["inputs: " + (inputs[0] if inputs else "none"), *inputs[1:]])


def _storages_line(analysis: AliasAnalysis) -> str:
    """The storages by role, and what is written in place (the caller's memory by name)."""
    roles = Counter(analysis.storage_role(sid).value for sid in analysis.storages)
    written: dict[str, list[str]] = {}
    for sid in analysis.storages:
        writers = list(dict.fromkeys(a.node.name for a in analysis.storage_accesses(sid) if a.kind == "write"))
        if writers:
            written[sid] = writers
    counts = ", ".join(f"{n} {role.replace('_', ' ')}" for role, n in roles.items())
    caller = [
        f"{analysis.storage_info(sid).origin} by {_listed(writers, 3)}"
        for sid, writers in written.items()
        if analysis.storage_role(sid) in CALLER_VISIBLE
    ]
    where = [f"{_plural(len(written), 'storage')} written in place" if written else "no write in place"]
    if written:
        where.append(f"the caller's memory: {_listed(caller, 4)}" if caller else "none of them the caller's memory")
    return _line([f"storages: {len(analysis.storages)} ({counts})", *where])


def _alias_sets_line(analysis: AliasAnalysis) -> str:
    """The alias sets of several values: how many, and the largest."""
    sets: dict[tuple[str, ...], int] = {}
    for node in analysis.nodes:
        if node.op == "output" or not analysis.storage_of(node):
            continue
        members = analysis.alias_set(node)
        if len(members) > 1:
            sets[tuple(m.name for m in members)] = len(members)
    if not sets:
        return "alias sets: none (no two values share a storage)"
    largest = max(sets, key=lambda k: sets[k])
    return (
        f"alias sets: {len(sets)} of values sharing a storage, the largest {len(largest)} values "
        f"({_listed(list(largest), 4)})"
    )


def _decision_text(report: CloneEliminationReport, *, brief: bool) -> str:
    """The decision table; when ``brief`` and there are many decisions, grouped by action and reason."""
    if not report.decisions:
        return "no copy candidate (clone or copy_) in the program"
    if not brief or len(report.decisions) <= SUMMARY_DECISIONS:
        return format_decisions(report)
    groups: dict[tuple[str, str], list[str]] = {}
    for d in sorted(report.decisions, key=lambda d: d.action != "keep"):  # kept first
        groups.setdefault((d.action, _reason_cell(d)), []).append(d.node)
    lines = [f"{count_copies(report.decisions)} (the table: without --summary)"]
    for (action, reason), clones in groups.items():
        what = "kept" if action == "keep" else "removed"
        head = f"  {what} {len(clones)}, {reason}: "
        for shown in range(len(clones), 0, -1):  # at most three lines a group
            names = ", ".join(clones[:shown]) + (f", ... and {len(clones) - shown} more" if shown < len(clones) else "")
            body = textwrap.fill(names, _WIDTH, initial_indent=head, subsequent_indent="      ")
            if body.count("\n") < 3:
                break
        lines.append(body)
    reasons = list(dict.fromkeys(d.reason for d in report.decisions))
    lines.append("\nreasons:")
    lines.extend(textwrap.fill(f"  {r.value}: {r.description}", _WIDTH, subsequent_indent="      ") for r in reasons)
    return "\n".join(lines)


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
    """Analyse ``program`` and eliminate the clones of a copy of it; ``program`` is left unchanged
    (but for its fake values, propagated again where a program loaded from its ``.pt2`` lost
    their storage identity: :func:`aliasing.restore_storage_identity`).

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
    with warnings_once():  # the copy's analysis would repeat the original's warnings
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
    records: list[logging.LogRecord] = []
    try:
        with _quiet_warnings(), _captured_log("torch.export", records):
            program = torch.export.load(path)
    except Exception as exc:  # torch raises many kinds; all mean "not a program this torch can load"
        raise ProgramFileError(_load_failure(path, exc, records)) from exc
    if not isinstance(program, torch.export.ExportedProgram):
        raise ProgramFileError(f"{path} holds a {type(program).__name__}, not an ExportedProgram")
    return program


@contextlib.contextmanager
def _captured_log(name: str, records: list[logging.LogRecord]) -> Iterator[None]:
    """Keep what logger ``name`` says during the block (torch.export.load logs a whole traceback at
    WARNING before it raises) in ``records`` instead of printing it: the error says it in one line."""

    def keep(record: logging.LogRecord) -> bool:
        records.append(record)
        return False  # a logger's filter runs before its handlers (torch's own) and before propagation

    logger = logging.getLogger(name)
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


_UNRESOLVED_OP = re.compile(r"resolve (?:torch\.ops\.)?(([A-Za-z_]\w*)\.[\w.]+) to an operator")
_DAMAGED = (UnicodeDecodeError, json.JSONDecodeError, zipfile.BadZipFile, zlib.error, EOFError)


def _load_failure(path: Path, exc: BaseException, records: Sequence[logging.LogRecord]) -> str:
    """One line saying why ``torch.export.load`` failed on ``path``, from the exception and from what
    torch logged (the real cause is often only in the logged traceback)."""
    causes: list[BaseException] = []

    def add(e: BaseException | None) -> None:
        while e is not None and e not in causes:
            causes.append(e)
            e = e.__cause__ or e.__context__

    add(exc)
    for record in records:
        if record.exc_info and record.exc_info[1] is not None:
            add(record.exc_info[1])
    for e in causes:
        found = _UNRESOLVED_OP.search(str(e))
        if found:
            op, namespace = found.group(1), found.group(2)
            return (
                f"{path} uses the custom op {op}, which no imported module registers: pass --import MODULE "
                f"(imports= from Python), the module that defines the {namespace!r} ops"
            )
    damaged: BaseException | None = next((e for e in causes if isinstance(e, _DAMAGED)), None)
    if damaged is None:
        damaged = next((e for e in causes if "PytorchStreamReader" in str(e) or "hasRecord" in str(e)), None)
    if damaged is not None:
        first = str(damaged).splitlines()[0].split("  (Could this error message")[0] if str(damaged) else ""
        return (
            f"{path} could not be loaded as an exported program: the file is damaged or incomplete "
            f"({type(damaged).__name__}: {first}); save the program again with torch.export.save"
        )
    root = causes[-1]
    first = str(root).splitlines()[0] if str(root) else ""
    return f"{path} could not be loaded as an exported program: {type(root).__name__}: {first}"


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
