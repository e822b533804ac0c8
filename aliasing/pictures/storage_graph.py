"""The storage graph of an analysis: as data (``networkx``) and as a picture (Graphviz DOT).

:func:`build_storage_graph` gives the analysis as a ``networkx.MultiDiGraph``;
node ids are strings and every attribute a plain string or number, so the graph
serialises (``networkx.node_link_data``) anywhere. :func:`to_dot` draws it for
people (schema of the picture below), with filters for large graphs, and
:func:`render_dot` turns DOT into SVG or PNG where Graphviz is installed.

Nodes of the data graph
-----------------------
``"value:<name>"``
    ``kind="value"``, ``name``, ``role`` (a :class:`~aliasing.core.roles.Role` value),
    ``dtype``, ``sizes``, ``strides`` (elements), ``offset`` (elements),
    ``region`` (bytes, ``Region.describe()``, ``""`` when unknown), ``position``.
``"storage:<id>"``
    ``kind="storage"``, ``id`` (``"s0"``…, or ``"unknown"``), ``role``, ``origin``
    (name of the node that created it).
``"op:<name>"``
    ``kind="op"``, ``name``, ``target`` (the call target as text), ``position``,
    ``unknown`` (1 when the op is opaque to the analysis, else 0).

Edges of the data graph (``kind`` attribute; the MultiDiGraph key is the kind)
------------------------------------------------------------------------------
``lives_in``      value -> storage   the value may live in the storage
``view_of``       value -> value     the value is an alias returned from that argument
``reads``         op -> value        the op reads the value's memory (``position``)
``writes``        op -> value        the op writes the value's memory (``position``)
``returns_alias`` op -> value        the op's result aliases that argument
``defines``       op -> value        the op produces the value (also for getitem)

The picture (:func:`to_dot`)
----------------------------
- one box per graph node: the op and the value it defines are drawn once,
  labelled with the node's name, its position in program order (``#12``), the
  op, and the value's dtype and sizes (offset and strides when it is a view
  that is not contiguous from offset 0);
- values are clustered by storage (one frame per storage that holds several
  drawn values, labelled with its id, role and origin; a value alone in its
  storage names the storage in its own label); ops that define no tensor
  (in-place custom ops, ``output``) and values that may live in several
  storages stand outside;
- program order runs top to bottom: every edge goes from an earlier node to a
  later one, and invisible edges keep conflicting accesses of one storage
  (a write and the reads and writes around it) in program order;
- reads are thin grey arrows from a value to the op that reads it; writes are
  thick red arrows from the op to the value it writes, labelled ``writes``;
  views are dashed blue arrows from the base to the view;
- with ``decisions=`` (a clone-elimination report), removed clones are green
  and kept clones orange, with their reason, and dotted orange arrows lead to
  the evidence of a keep.

Example
-------
>>> import torch, aliasing
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> def f(x):
...     q, k = x.split(2, dim=-1)
...     q.mul_(2)
...     return k + 1
>>> a = aliasing.analyze(make_fx(f, tracing_mode="fake")(torch.randn(3, 4)))
>>> dot = aliasing.to_dot(a)
>>> '"mul_" -> "getitem"' in dot and 'subgraph "cluster_s0"' in dot
True
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

import networkx as nx
import torch.fx

from aliasing.core.effects import SINGLE, Effect
from aliasing.errors import RenderingError, UnknownNodeError

if TYPE_CHECKING:
    from aliasing.core.analysis import AliasAnalysis

__all__ = [
    "DecisionLike",
    "Decisions",
    "RenderingError",
    "build_storage_graph",
    "decisions_of",
    "graphviz_available",
    "reason_text",
    "render_dot",
    "to_dot",
]


def _value_id(n: torch.fx.Node) -> str:
    return f"value:{n.name}"


def _op_id(n: torch.fx.Node) -> str:
    return f"op:{n.name}"


def _target_text(n: torch.fx.Node) -> str:
    t = n.target
    if isinstance(t, str):
        return t
    return getattr(t, "__name__", None) or str(t)


def build_storage_graph(analysis: AliasAnalysis) -> nx.MultiDiGraph[str]:
    """Build the storage/mutation graph of an analysis (schema in the module docstring).

    Example
    -------
    >>> import torch, aliasing
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> a = aliasing.analyze(make_fx(lambda x: x[0].add_(1), tracing_mode="fake")(torch.zeros(2)))
    >>> g = aliasing.build_storage_graph(a)
    >>> sorted(k for _, _, k in g.edges(keys=True) if k == "writes")
    ['writes']
    """
    parts = _GraphParts()
    for sid in analysis.storages:
        info = analysis.storage_info(sid)
        parts.nodes.append((f"storage:{sid}", {"kind": "storage", "id": sid, "role": info.role.value, "origin": info.origin}))
    for node in analysis.nodes:
        _add_value(parts, analysis, node)
        _add_op(parts, analysis, node)
    return parts.graph()


@dataclass
class _GraphParts:
    """The storage graph's nodes and edges, collected in program order before the graph is built."""

    nodes: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    edges: list[tuple[str, str, str, dict[str, object]]] = field(default_factory=list)

    def edge(self, tail: str, head: str, kind: str, **attrs: object) -> None:
        """An edge of ``kind`` (also its key), with ``attrs`` after the kind."""
        self.edges.append((tail, head, kind, {"kind": kind, **attrs}))

    def graph(self) -> nx.MultiDiGraph[str]:
        """The graph: every node, and the edges whose two ends are nodes."""
        g: nx.MultiDiGraph[str] = nx.MultiDiGraph()
        g.add_nodes_from(self.nodes)
        for tail, head, key, attrs in self.edges:
            if g.has_node(tail) and g.has_node(head):
                g.add_edge(tail, head, key=key, **attrs)
        return g


def _value_attrs(analysis: AliasAnalysis, node: torch.fx.Node) -> dict[str, object]:
    """The attributes of a ``value:`` node (module docstring)."""
    facts = analysis.facts_of(node)
    region = analysis.region_of(node)
    return {
        "kind": "value",
        "name": node.name,
        "role": analysis.role(node).value,
        "dtype": str(facts.dtype).replace("torch.", "") if facts else "",
        "sizes": str(list(facts.sizes)) if facts else "",
        "strides": str(list(facts.strides)) if facts else "",
        "offset": str(facts.storage_offset) if facts else "",
        "region": region.describe() if region is not None else "",
        "position": analysis.position(node),
    }


def _add_value(parts: _GraphParts, analysis: AliasAnalysis, node: torch.fx.Node) -> None:
    """The node's value, if it lives in a storage, and a ``lives_in`` edge to each of its storages."""
    storages = analysis.storage_of(node)
    if not storages:
        return
    parts.nodes.append((_value_id(node), _value_attrs(analysis, node)))
    for sid in sorted(storages):
        if sid == "unknown":  # not among analysis.storages; repeats merge when the graph is built
            parts.nodes.append(("storage:unknown", {"kind": "storage", "id": "unknown", "role": "unknown", "origin": ""}))
        parts.edge(_value_id(node), f"storage:{sid}", "lives_in")


def _add_op(parts: _GraphParts, analysis: AliasAnalysis, node: torch.fx.Node) -> None:
    """The node's op (a call or the output) and its edges; for a getitem, the edge from the op it unpacks."""
    effect = analysis.effect_of(node)
    getitem = effect is not None and effect.note == "getitem"
    if node.op in ("call_function", "call_method", "call_module", "output") and not getitem:
        parts.nodes.append(
            (
                _op_id(node),
                {
                    "kind": "op",
                    "name": node.name,
                    "target": _target_text(node),
                    "position": analysis.position(node),
                    "unknown": int(analysis.is_unknown(node)),
                },
            )
        )
        _add_op_edges(parts, analysis, node, effect)
    elif getitem and node.args and isinstance(node.args[0], torch.fx.Node):
        parts.edge(_op_id(node.args[0]), _value_id(node), "defines")


def _add_op_edges(parts: _GraphParts, analysis: AliasAnalysis, node: torch.fx.Node, effect: Effect | None) -> None:
    """An op's ``defines``, ``reads``, ``writes``, ``returns_alias`` and ``view_of`` edges."""
    pos = analysis.position(node)
    storages = analysis.storage_of(node)
    if storages:
        parts.edge(_op_id(node), _value_id(node), "defines")
    if effect is not None:
        for kind, values in (("reads", effect.reads), ("writes", effect.writes)):
            for v in values:
                if analysis.storage_of(v):
                    parts.edge(_op_id(node), _value_id(v), kind, position=pos)
        aliased = {a for srcs in effect.outputs.values() for a in srcs}
        for v in aliased:
            parts.edge(_op_id(node), _value_id(v), "returns_alias")
            if SINGLE in effect.outputs and storages:
                parts.edge(_value_id(node), _value_id(v), "view_of")
    elif node.op == "output":
        for v in analysis.outputs:
            parts.edge(_op_id(node), _value_id(v), "reads", position=pos)


# --- decisions, as the pictures read them -------------------------------------


class DecisionLike(Protocol):
    """What the pictures read from one clone decision (``rewrite.Decision`` has it).

    ``aliasing`` never imports :mod:`rewrite`; any object with these attributes will do.
    """

    @property
    def node(self) -> str: ...

    @property
    def action(self) -> str: ...

    @property
    def reason(self) -> str: ...

    @property
    def evidence(self) -> tuple[str, ...]: ...

    @property
    def original(self) -> str: ...


class _HasDecisions(Protocol):
    @property
    def decisions(self) -> Sequence[DecisionLike]: ...


#: A clone-elimination report (anything with ``.decisions``) or a sequence of decisions.
Decisions = _HasDecisions | Iterable[DecisionLike]


def decisions_of(decisions: Decisions | None) -> tuple[DecisionLike, ...]:
    """The decisions of a report (``.decisions``) or of a sequence, as a tuple (``()`` for None).

    Example
    -------
    >>> decisions_of(None)
    ()
    """
    if decisions is None:
        return ()
    inner = getattr(decisions, "decisions", None)
    if inner is not None:
        return tuple(inner)
    return tuple(decisions)  # type: ignore[arg-type]


def reason_text(decision: DecisionLike) -> str:
    """``"C3 clone-written-then-original-read"``: the reason with its condition, if it has one.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> reason_text(SimpleNamespace(reason="removable"))
    'removable'
    """
    condition = str(getattr(decision.reason, "condition", "") or "")
    reason = str(decision.reason)
    return f"{condition} {reason}" if condition else reason


# --- DOT: a picture for people ------------------------------------------------

_DTYPE_SHORT = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
    "complex64": "c64",
    "complex128": "c128",
}

#: Fill colours of value boxes and storage frames, by role.
ROLE_COLOURS: dict[str, tuple[str, str]] = {
    # role: (value fill, storage frame fill)
    "user_input": ("#d6e6f7", "#eef4fb"),
    "donated_input": ("#fff0b3", "#fffae6"),
    "parameter": ("#e6dcf5", "#f5f0fb"),
    "buffer": ("#fadcc8", "#fdf1e9"),
    "constant": ("#e4e4e4", "#f4f4f4"),
    "output": ("#ffffff", "#f7f7f7"),
    "intermediate": ("#ffffff", "#f7f7f7"),
}
REMOVED_FILL = "#b9e6b9"
KEPT_FILL = "#ffd19a"
WRITE_COLOUR = "#d62728"
READ_COLOUR = "#555555"
VIEW_COLOUR = "#1f6fb4"
EVIDENCE_COLOUR = "#e08000"


def _q(text: object) -> str:
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


def _short_target(target: str) -> str:
    """``mm.default`` -> ``mm``; ``rotary_.default`` -> ``rotary_``; ``getitem`` stays."""
    for suffix in (".default", ".Tensor", ".Scalar"):
        if target.endswith(suffix):
            return target[: -len(suffix)]
    return target


def _layout_text(attrs: dict[str, object]) -> str:
    dtype = str(attrs.get("dtype", ""))
    sizes = str(attrs.get("sizes", ""))
    if not dtype and not sizes:
        return ""
    text = f"{_DTYPE_SHORT.get(dtype, dtype)}{sizes}"
    strides, offset = str(attrs.get("strides", "")), str(attrs.get("offset", ""))
    if strides and not _contiguous(sizes, strides):
        text += f" strides {strides}"
    if offset not in ("", "0"):
        text += f" @{offset}"
    return text


def _contiguous(sizes: str, strides: str) -> bool:
    try:
        dims = [int(s) for s in sizes.strip("[]").split(",") if s.strip()]
        steps = [int(s) for s in strides.strip("[]").split(",") if s.strip()]
    except ValueError:  # symbolic sizes: say nothing about strides
        return True
    expected = 1
    for size, stride in reversed(list(zip(dims, steps))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


@dataclass
class _Item:
    """One fx node as the picture draws it: the op and the value it defines, merged."""

    name: str
    position: int
    value: dict[str, object] | None = None
    op: dict[str, object] | None = None
    storages: tuple[str, ...] = ()
    neighbours: set[str] = field(default_factory=set)


def _items(g: nx.MultiDiGraph[str]) -> dict[str, _Item]:
    items: dict[str, _Item] = {}
    for _, attrs in g.nodes(data=True):
        kind = attrs.get("kind")
        if kind not in ("value", "op"):
            continue
        name = str(attrs["name"])
        item = items.get(name)
        if item is None:
            item = items[name] = _Item(name, int(attrs.get("position", 0)))
        if kind == "value":
            item.value = dict(attrs)
        else:
            item.op = dict(attrs)
    for tail, head, key in g.edges(keys=True):
        if key == "lives_in":
            name = str(g.nodes[tail]["name"])
            items[name].storages = (*items[name].storages, str(g.nodes[head]["id"]))
            continue
        a, b = str(g.nodes[tail].get("name", "")), str(g.nodes[head].get("name", ""))
        if a in items and b in items and a != b:
            items[a].neighbours.add(b)
            items[b].neighbours.add(a)
    return items


def _names(refs: object) -> list[str]:
    if refs is None:
        return []
    if isinstance(refs, (str, torch.fx.Node)):
        refs = [refs]
    if not isinstance(refs, Iterable):
        raise UnknownNodeError(f"expected a node, a node name or an iterable of them, got {type(refs).__name__}")
    return [r.name if isinstance(r, torch.fx.Node) else str(r) for r in refs]


def _select(
    g: nx.MultiDiGraph[str],
    items: dict[str, _Item],
    nodes: object,
    storages: object,
    around: object,
    depth: int,
    window: tuple[int, int] | None,
) -> set[str] | None:
    """Names of the fx nodes to draw, or None for all of them."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"depth must be a non-negative int, got {depth!r}")
    if nodes is None and storages is None and around is None and window is None:
        return None
    chosen: set[str] = set()
    if window is not None:
        if not isinstance(window, tuple) or len(window) != 2 or not all(type(w) is int for w in window):
            raise ValueError(f"window must be a (first, last) pair of positions, got {window!r}")
        first, last = window
        inside = {n for n, item in items.items() if first <= item.position <= last}
        # with the inputs (placeholders, attributes) the window's nodes take
        inputs = {m for n in inside for m in items[n].neighbours if _is_input(items[m]) and items[m].position < first}
        chosen |= inside | inputs
    for name in _names(nodes) + _names(around):
        if name not in items:
            raise UnknownNodeError(f"no node named {name!r} in the storage graph")
    chosen.update(_names(nodes))
    if storages is not None:
        wanted = set(_names(storages))
        known = {str(a["id"]) for _, a in g.nodes(data=True) if a.get("kind") == "storage"}
        missing = sorted(wanted - known)
        if missing:
            raise UnknownNodeError(f"no storage {missing[0]!r} in the storage graph (storages: {', '.join(sorted(known))})")
        inside = {name for name, item in items.items() if wanted & set(item.storages)}
        chosen |= inside
        for tail, head, key in g.edges(keys=True):
            if key in ("reads", "writes") and str(g.nodes[head]["name"]) in inside:
                chosen.add(str(g.nodes[tail]["name"]))
    frontier = set(_names(around))
    chosen |= frontier
    for _ in range(depth):
        frontier = {n for f in frontier for n in items[f].neighbours} - chosen
        chosen |= frontier
    return chosen


def _is_input(item: _Item) -> bool:
    return item.op is None and item.value is not None and str(item.value.get("role", "")) not in ("intermediate", "output")


def _role_of(item: _Item) -> str:
    return str(item.value.get("role", "intermediate")) if item.value else "intermediate"


def _label(item: _Item, decision: DecisionLike | None, alone: bool) -> str:
    head = f"{item.name}  #{item.position}"
    if alone and len(item.storages) == 1:
        head += f"  · {item.storages[0]}"
    lines = [head]
    if item.op is not None:
        target = _short_target(str(item.op.get("target", "")))
        if item.op.get("unknown"):
            target += "  (opaque)"
        if target and target != item.name:
            lines.append(target)
    elif item.value is not None:
        role = str(item.value.get("role", ""))
        if role and role not in ("intermediate", "output"):
            lines.append(role.replace("_", " "))
    if item.value is not None:
        layout = _layout_text(item.value)
        if layout:
            lines.append(layout)
        if len(item.storages) > 1:
            lines.append("may live in " + ", ".join(sorted(item.storages)))
    if decision is not None:
        verb = "REMOVED" if decision.action == "remove" else "KEPT"
        lines.append(f"{verb}: {reason_text(decision)}")
    return "\n".join(lines)


def _node_style(item: _Item, decision: DecisionLike | None) -> str:
    attrs: list[str] = []
    if item.value is None:
        attrs.append('shape=ellipse, style=filled, fillcolor="#f0f0f0"')
    else:
        fill = ROLE_COLOURS.get(_role_of(item), ROLE_COLOURS["intermediate"])[0]
        style = "rounded,filled"
        if decision is not None:
            fill = REMOVED_FILL if decision.action == "remove" else KEPT_FILL
            if decision.action == "remove":
                style += ",dashed"
        attrs.append(f'shape=box, style="{style}", fillcolor="{fill}"')
        if _role_of(item) == "output":
            attrs.append("penwidth=2.5")
    if item.op is not None and item.op.get("unknown"):
        attrs.append('shape=octagon, color="#b35900"')
    return ", ".join(attrs)


def _memory_order(
    g: nx.MultiDiGraph[str], items: dict[str, _Item], shown: set[str]
) -> set[tuple[str, str]]:
    """Pairs (earlier, later) of shown nodes whose accesses of one storage conflict."""
    per_storage: dict[str, list[tuple[int, str, str]]] = {}
    for tail, head, key in g.edges(keys=True):
        if key not in ("reads", "writes"):
            continue
        op = str(g.nodes[tail]["name"])
        if op not in shown:
            continue
        for sid in items[str(g.nodes[head]["name"])].storages:
            per_storage.setdefault(sid, []).append((items[op].position, "write" if key == "writes" else "read", op))
    pairs: set[tuple[str, str]] = set()
    for accesses in per_storage.values():
        accesses.sort()
        last_writer: str | None = None
        readers: list[str] = []
        for _, kind, op in accesses:
            if kind == "write":
                for earlier in [*readers, *([last_writer] if last_writer else [])]:
                    if earlier != op:
                        pairs.add((earlier, op))
                last_writer, readers = op, []
            else:
                if last_writer is not None and last_writer != op:
                    pairs.add((last_writer, op))
                readers.append(op)
    return pairs


def to_dot(
    source: AliasAnalysis | nx.MultiDiGraph[str],
    *,
    nodes: object = None,
    storages: object = None,
    around: object = None,
    depth: int = 1,
    window: tuple[int, int] | None = None,
    decisions: Decisions | None = None,
    title: str | None = None,
    max_nodes: int | None = 150,
) -> str:
    """Draw the storage graph of an analysis as Graphviz DOT text, for people.

    The picture is described in the module docstring: one box per node, values
    clustered by storage, program order top to bottom, writes in red. No
    Graphviz is needed to produce the text; :func:`render_dot` (or
    ``dot -Tsvg``) renders it.

    Parameters
    ----------
    source : AliasAnalysis or networkx.MultiDiGraph
        An analysis, or its :func:`build_storage_graph`.
    nodes : node, name or iterable of them, optional
        Draw these nodes.
    storages : storage id or iterable of ids, optional
        Draw the values living in these storages and the ops that read or write them.
    around : node, name or iterable of them, optional
        Draw these nodes and their neighbours up to ``depth`` edges away
        (reads, writes, views, definitions), and, with ``decisions``, the
        original and the evidence of each clone drawn (the nodes that explain
        a keep, however far away).
    depth : int
        How far ``around`` reaches (default 1).
    window : (int, int), optional
        Draw the nodes at these positions (first and last, inclusive) and the
        inputs they take.
    decisions : CloneEliminationReport or sequence of decisions, optional
        Colour removed (green) and kept (orange) clones, with their reasons.
    title : str, optional
        A title above the picture (a line saying what a filter hid is added).
    max_nodes : int or None
        Without a filter, a graph of more nodes is drawn from its first op over
        this many positions (a window), and the title says so: Graphviz takes
        minutes, and people get lost, on a whole 1,000-node graph. ``None``
        draws everything.

    When several of ``nodes``, ``storages``, ``around`` and ``window`` are
    given, the picture shows the union; with none, the whole graph (up to
    ``max_nodes``).

    Returns
    -------
    str
        DOT source of one ``digraph``.

    Raises
    ------
    aliasing.UnknownNodeError
        When a filter names a node or storage the graph does not have.

    Examples
    --------
    >>> import torch, aliasing
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> a = aliasing.analyze(make_fx(lambda x: x[0].add_(1), tracing_mode="fake")(torch.zeros(2)))
    >>> aliasing.to_dot(a).splitlines()[0]
    'digraph storage_graph {'
    >>> print(aliasing.to_dot(a, around="add_", depth=0).count("->"))
    0
    """
    g = source if isinstance(source, nx.MultiDiGraph) else build_storage_graph(source)
    items = _items(g)
    if max_nodes is not None and (isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1):
        raise ValueError(f"max_nodes must be a positive int or None, got {max_nodes!r}")
    unfiltered = nodes is None and storages is None and around is None and window is None
    hint = ""
    if unfiltered and max_nodes is not None and len(items) > max_nodes:
        window = _first_window(items, max_nodes)
        hint = f"positions {window[0]}-{window[1]}: pass nodes=, storages=, around= or window= to choose"
    chosen = _select(g, items, nodes, storages, around, depth, window)
    by_clone = {d.node: d for d in decisions_of(decisions)}
    if chosen is not None and around is not None:
        chosen |= _decision_context(chosen, by_clone, items)
    shown = set(items) if chosen is None else chosen
    heading = [title] if title else []
    if chosen is not None:
        heading.append(f"{len(shown)} of {len(items)} nodes shown" + (f" ({hint})" if hint else ""))
    lines = _preamble(heading)
    lines.extend(_box_lines(g, items, shown, by_clone))
    lines.extend(_edge_lines(g, items, shown, by_clone))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _first_window(items: dict[str, _Item], max_nodes: int) -> tuple[int, int]:
    """``max_nodes`` positions from the first op (or fewer from the first, so as to end at the last node)."""
    ops = sorted(i.position for i in items.values() if i.op is not None)
    start = min(ops[0] if ops else 0, max(i.position for i in items.values()) - max_nodes + 1)
    return start, start + max_nodes - 1


def _decision_context(chosen: set[str], by_clone: dict[str, DecisionLike], items: dict[str, _Item]) -> set[str]:
    """The original and the evidence of each chosen clone's decision.

    A clone drawn around something comes with what its decision names: the evidence of a
    keep (the write, the later read) may be further than ``depth`` edges away.
    """
    named: set[str] = set()
    for clone in [c for c in by_clone if c in chosen]:
        decision = by_clone[clone]
        named |= {str(e) for e in (*decision.evidence, decision.original) if str(e) in items}
    return named


def _preamble(heading: list[str]) -> list[str]:
    """The ``digraph`` line, the default attributes and the picture's label (``heading``, one per line)."""
    lines = [
        "digraph storage_graph {",
        "  rankdir=TB; newrank=true; nodesep=0.2; ranksep=0.25;",
        '  graph [fontname="Helvetica,Arial,sans-serif", fontsize=11, labelloc=t, labeljust=l];',
        '  node [fontname="Helvetica,Arial,sans-serif", fontsize=10, margin="0.08,0.03", height=0.3];',
        '  edge [fontname="Helvetica,Arial,sans-serif", fontsize=8, arrowsize=0.6];',
    ]
    if heading:
        lines.append(f"  label={_q(chr(10).join(heading))};")
    return lines


def _clusters(ordered: list[_Item]) -> tuple[dict[str, list[_Item]], list[_Item]]:
    """The items framed by storage (storages of several items) and those drawn loose, in program order."""
    clusters: dict[str, list[_Item]] = {}
    loose: list[_Item] = []
    for item in ordered:
        if len(item.storages) == 1:
            clusters.setdefault(item.storages[0], []).append(item)
        else:
            loose.append(item)
    for sid in [s for s, members in clusters.items() if len(members) == 1]:
        loose.extend(clusters.pop(sid))  # a frame around one box says nothing its label does not
    loose.sort(key=lambda i: i.position)
    return clusters, loose


def _storage_order(sid: str) -> tuple[bool, int]:
    """``s2`` before ``s10``, ``unknown`` last."""
    return sid == "unknown", int(sid[1:]) if sid[1:].isdigit() else 0


def _node_line(item: _Item, indent: str, decision: DecisionLike | None) -> str:
    """The DOT line of one box (a box inside a frame, ``indent`` deeper, does not name its storage)."""
    label = _label(item, decision, alone=not indent.startswith("    "))
    return f"{indent}{_q(item.name)} [label={_q(label)}, {_node_style(item, decision)}];"


def _box_lines(
    g: nx.MultiDiGraph[str], items: dict[str, _Item], shown: set[str], by_clone: dict[str, DecisionLike]
) -> list[str]:
    """The boxes of the shown items: the storage frames with theirs, then the loose ones."""
    storage_attrs = {str(a["id"]): a for _, a in g.nodes(data=True) if a.get("kind") == "storage"}
    ordered = sorted((items[n] for n in shown), key=lambda i: i.position)
    clusters, loose = _clusters(ordered)
    lines: list[str] = []
    for sid in sorted(clusters, key=_storage_order):
        info = storage_attrs.get(sid, {})
        role = str(info.get("role", ""))
        origin = str(info.get("origin", ""))
        frame = ROLE_COLOURS.get(role, ("", "#f7f7f7"))[1]
        label = f"{sid} · {role.replace('_', ' ')}" + (f" · from {origin}" if origin else "")
        lines.append(f"  subgraph {_q('cluster_' + sid)} {{")
        lines.append(f'    label={_q(label)}; style="rounded,filled"; color="#9a9a9a"; fillcolor="{frame}";')
        lines.extend(_node_line(item, "    ", by_clone.get(item.name)) for item in clusters[sid])
        lines.append("  }")
    lines.extend(_node_line(item, "  ", by_clone.get(item.name)) for item in loose)
    return lines


@dataclass
class _EdgePairs:
    """The drawn edges between shown items, as (tail, head) name pairs in the picture's direction."""

    reads: set[tuple[str, str]] = field(default_factory=set)  #: value -> op
    writes: set[tuple[str, str]] = field(default_factory=set)  #: op -> value
    views: set[tuple[str, str]] = field(default_factory=set)  #: base -> view (and argument -> aliasing op)


def _edge_pairs(g: nx.MultiDiGraph[str], shown: set[str]) -> _EdgePairs:
    """The storage graph's edges between two different shown items, turned the way they are drawn."""
    pairs = _EdgePairs()
    for tail, head, key in g.edges(keys=True):
        a, b = str(g.nodes[tail].get("name", "")), str(g.nodes[head].get("name", ""))
        if a not in shown or b not in shown or a == b:
            continue
        if key == "reads":
            pairs.reads.add((b, a))  # value -> op
        elif key == "writes":
            pairs.writes.add((a, b))  # op -> value
        elif key == "view_of":
            pairs.views.add((b, a))  # base -> view
        elif key == "defines":
            pairs.views.add((a, b))  # multi-output op -> getitem
        elif key == "returns_alias":
            pairs.views.add((b, a))  # argument -> op whose result aliases it
    return pairs


def _edge_lines(
    g: nx.MultiDiGraph[str], items: dict[str, _Item], shown: set[str], by_clone: dict[str, DecisionLike]
) -> list[str]:
    """Every edge line: reads, writes, views, the invisible program order, the evidence of keeps."""
    pairs = _edge_pairs(g, shown)
    drawn: set[tuple[str, str]] = set()  # (tail, head) pairs with an edge already
    edges: list[str] = []
    for value, op in sorted(pairs.reads):
        edges.append(f'  {_q(value)} -> {_q(op)} [color="{READ_COLOUR}"];')
        drawn.add((value, op))
    for op, value in sorted(pairs.writes):
        edges.append(
            f'  {_q(op)} -> {_q(value)} [color="{WRITE_COLOUR}", penwidth=2.2, label="writes", '
            f'fontcolor="{WRITE_COLOUR}", constraint=false];'
        )
        if (value, op) not in drawn:  # keep the writer below what it writes
            edges.append(f"  {_q(value)} -> {_q(op)} [style=invis];")
        drawn.add((op, value))
    for base, view in sorted(pairs.views):
        if (base, view) in drawn:
            continue
        same_storage = bool(set(items[base].storages) & set(items[view].storages))
        style = f'style=dashed, color="{VIEW_COLOUR}"' if same_storage else f'color="{READ_COLOUR}"'
        edges.append(f"  {_q(base)} -> {_q(view)} [{style}];")
        drawn.add((base, view))
    for earlier, later in sorted(_memory_order(g, items, shown)):
        if (earlier, later) not in drawn and items[earlier].position < items[later].position:
            edges.append(f"  {_q(earlier)} -> {_q(later)} [style=invis];")
    edges.extend(_evidence_lines(by_clone, shown))
    return edges


def _evidence_lines(by_clone: dict[str, DecisionLike], shown: set[str]) -> list[str]:
    """Dotted arrows from each shown kept clone to the shown evidence of its keep."""
    edges: list[str] = []
    for clone, decision in sorted(by_clone.items()):
        if decision.action != "keep" or clone not in shown:
            continue
        for evidence in decision.evidence:
            if evidence in shown and evidence != clone and evidence != decision.original:
                edges.append(
                    f'  {_q(clone)} -> {_q(evidence)} [style=dotted, color="{EVIDENCE_COLOUR}", penwidth=1.5, '
                    f'constraint=false, label="evidence", fontcolor="{EVIDENCE_COLOUR}"];'
                )
    return edges


def graphviz_available() -> bool:
    """True when Graphviz's ``dot`` program is on ``PATH``.

    Example
    -------
    >>> isinstance(graphviz_available(), bool)
    True
    """
    return shutil.which("dot") is not None


def render_dot(source: str, format: Literal["svg", "png"] = "svg", *, timeout: float = 120.0) -> bytes:
    """Render DOT text with Graphviz's ``dot`` program.

    Parameters
    ----------
    source : str
        DOT text (:func:`to_dot`).
    format : {"svg", "png"}
        Output format.
    timeout : float
        Seconds to wait for ``dot``.

    Returns
    -------
    bytes
        The SVG document or PNG image.

    Raises
    ------
    RenderingError
        When ``dot`` is not installed (Debian: ``apt-get install graphviz``), fails or times out.

    Examples
    --------
    >>> svg = render_dot("digraph { a -> b }") if graphviz_available() else b"<svg"
    >>> svg.lstrip().startswith((b"<?xml", b"<svg", b"<!DOCTYPE"))
    True
    """
    if format not in ("svg", "png"):
        raise RenderingError(f"format must be 'svg' or 'png', got {format!r}")
    exe = shutil.which("dot")
    if exe is None:
        raise RenderingError("Graphviz's 'dot' program is not installed (Debian/Ubuntu: apt-get install graphviz)")
    try:
        done = subprocess.run(
            [exe, f"-T{format}"], input=source.encode(), capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise RenderingError(f"dot did not finish within {timeout:g} s") from exc
    if done.returncode != 0:
        raise RenderingError(f"dot failed (exit {done.returncode}): {done.stderr.decode(errors='replace').strip()}")
    return done.stdout
