"""The storage/mutation graph: an analysis as a ``networkx.MultiDiGraph``.

Node ids are strings; every attribute is a plain string or number, so the graph
renders (Graphviz DOT) and serialises (``networkx.node_link_data``) anywhere.

Nodes
-----
``"value:<name>"``
    ``kind="value"``, ``name``, ``role`` (a :class:`~aliasing.roles.Role` value),
    ``dtype``, ``sizes``, ``strides`` (elements), ``offset`` (elements),
    ``region`` (bytes, ``Region.describe()``, ``""`` when unknown), ``position``.
``"storage:<id>"``
    ``kind="storage"``, ``id`` (``"s0"``…, or ``"unknown"``), ``role``, ``origin``
    (name of the node that created it).
``"op:<name>"``
    ``kind="op"``, ``name``, ``target`` (the call target as text), ``position``,
    ``unknown`` (1 when the op is opaque to the analysis, else 0).

Edges (``kind`` attribute; the MultiDiGraph key is the kind)
-------------------------------------------------------------
``lives_in``      value -> storage   the value may live in the storage
``view_of``       value -> value     the value is an alias returned from that argument
``reads``         op -> value        the op reads the value's memory (``position``)
``writes``        op -> value        the op writes the value's memory (``position``)
``returns_alias`` op -> value        the op's result aliases that argument
``defines``       op -> value        the op produces the value (also for getitem)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import networkx as nx
import torch.fx

from aliasing.effects import SINGLE

if TYPE_CHECKING:
    from aliasing.analysis import AliasAnalysis

__all__ = ["build_storage_graph", "to_dot"]


def _value_id(n: torch.fx.Node) -> str:
    return f"value:{n.name}"


def _op_id(n: torch.fx.Node) -> str:
    return f"op:{n.name}"


def _target_text(n: torch.fx.Node) -> str:
    t = n.target
    if isinstance(t, str):
        return t
    return getattr(t, "__name__", None) or str(t)


def build_storage_graph(analysis: "AliasAnalysis") -> nx.MultiDiGraph:
    """Build the storage/mutation graph of an analysis (schema in the module docstring)."""
    g = nx.MultiDiGraph()
    nodes: list[tuple[str, dict[str, object]]] = []
    edges: list[tuple[str, str, str, dict[str, object]]] = []
    for sid in analysis.storages:
        info = analysis.storage_info(sid)
        nodes.append((f"storage:{sid}", {"kind": "storage", "id": sid, "role": info.role.value, "origin": info.origin}))
    for node in analysis.nodes:
        pos = analysis.position(node)
        storages = analysis.storage_of(node)
        if storages:
            facts = analysis.facts_of(node)
            region = analysis.region_of(node)
            nodes.append(
                (
                    _value_id(node),
                    {
                        "kind": "value",
                        "name": node.name,
                        "role": analysis.role(node).value,
                        "dtype": str(facts.dtype).replace("torch.", "") if facts else "",
                        "sizes": str(list(facts.sizes)) if facts else "",
                        "strides": str(list(facts.strides)) if facts else "",
                        "offset": str(facts.storage_offset) if facts else "",
                        "region": region.describe() if region is not None else "",
                        "position": pos,
                    },
                )
            )
            for sid in sorted(storages):
                if sid == "unknown" and not g.has_node("storage:unknown"):
                    nodes.append(("storage:unknown", {"kind": "storage", "id": "unknown", "role": "unknown", "origin": ""}))
                edges.append((_value_id(node), f"storage:{sid}", "lives_in", {"kind": "lives_in"}))
        effect = analysis.effect_of(node)
        if node.op in ("call_function", "call_method", "call_module", "output") and (effect is None or effect.note != "getitem"):
            nodes.append(
                (
                    _op_id(node),
                    {
                        "kind": "op",
                        "name": node.name,
                        "target": _target_text(node),
                        "position": pos,
                        "unknown": int(analysis.is_unknown(node)),
                    },
                )
            )
            if storages:
                edges.append((_op_id(node), _value_id(node), "defines", {"kind": "defines"}))
            if effect is not None:
                for kind, values in (("reads", effect.reads), ("writes", effect.writes)):
                    for v in values:
                        if analysis.storage_of(v):
                            edges.append((_op_id(node), _value_id(v), kind, {"kind": kind, "position": pos}))
                aliased = {a for srcs in effect.outputs.values() for a in srcs}
                for v in aliased:
                    edges.append((_op_id(node), _value_id(v), "returns_alias", {"kind": "returns_alias"}))
                    if SINGLE in effect.outputs and storages:
                        edges.append((_value_id(node), _value_id(v), "view_of", {"kind": "view_of"}))
            elif node.op == "output":
                for v in analysis.outputs:
                    edges.append((_op_id(node), _value_id(v), "reads", {"kind": "reads", "position": pos}))
        elif effect is not None and effect.note == "getitem" and node.args and isinstance(node.args[0], torch.fx.Node):
            src = node.args[0]
            edges.append((_op_id(src), _value_id(node), "defines", {"kind": "defines"}))
    g.add_nodes_from(nodes)
    for u, v, key, attrs in edges:
        if g.has_node(u) and g.has_node(v):
            g.add_edge(u, v, key=key, **attrs)
    return g


_STYLE = {
    "storage": 'shape=cylinder, style=filled, fillcolor="#dde8f7"',
    "value": 'shape=box, style=rounded',
    "op": 'shape=ellipse, style=filled, fillcolor="#f3f3f3"',
}
_EDGE_STYLE = {
    "lives_in": 'style=dotted, color="#5577aa"',
    "view_of": 'style=dashed',
    "reads": 'color="#338833"',
    "writes": 'color="#cc2222", penwidth=2',
    "returns_alias": 'style=dashed, color="#888888"',
    "defines": 'color="#444444"',
}


def _q(text: object) -> str:
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


def to_dot(g: nx.MultiDiGraph) -> str:
    """Render a storage graph as Graphviz DOT text (no Graphviz needed to produce it)."""
    lines = ["digraph storage_graph {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    for nid, attrs in g.nodes(data=True):
        kind = str(attrs.get("kind", ""))
        if kind == "storage":
            label = f"{attrs['id']}\n{attrs['role']}"
        elif kind == "value":
            label = f"{attrs['name']}\n{attrs['dtype']}{attrs['sizes']}"
        else:
            label = f"{attrs.get('name', nid)}\n{attrs.get('target', '')}"
        lines.append(f"  {_q(nid)} [label={_q(label)}, {_STYLE.get(kind, '')}];")
    for u, v, key in g.edges(keys=True):
        lines.append(f"  {_q(u)} -> {_q(v)} [label={_q(key)}, {_EDGE_STYLE.get(str(key), '')}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
