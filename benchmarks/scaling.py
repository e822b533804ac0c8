"""Scaling benchmark of ``aliasing.analyze`` and ``rewrite.eliminate_clones``.

Run from the repository root::

    python -m benchmarks.scaling                       # 1k, 16k, 64k nodes; writes benchmarks/results/scaling.json
    python -m benchmarks.scaling --sizes 1k,16k --repeats 3 --out /tmp/s.json

What is measured, per graph size, in one process and on the same graph
(:func:`benchmarks.synthetic.build_transformer_graph`):

- ``bare``: :func:`bare_traversal`, the floor any analysis pays: visit every
  node in graph order, read ``node.meta.get("val")`` and, for each tensor in it
  (tuples and lists are walked), its storage identity
  (``untyped_storage()._cdata``), ``size()``, ``stride()``,
  ``storage_offset()`` and ``dtype``.
- ``analyze``: ``aliasing.analyze(gm)``.
- ``eliminate``: ``rewrite.eliminate_clones`` on a fresh copy of the
  ``GraphModule`` (``rewrite.testing.copy_program``; the copy is made before
  the clock starts). It includes the analysis, the planning and the rewrite;
  the module's Python code is regenerated lazily, on first use, and is not part
  of it.
- ``eliminate_graph``: ``rewrite.eliminate_clones`` on a fresh copy of the bare
  ``torch.fx.Graph``, as pass managers call it.
- ``vllm`` and ``vllm_recompile``: vLLM's ``UnsafeCloneEliminationPass`` (from
  the installed ``vllm`` package, under its pass context) on a fresh copy of the
  ``Graph``, and the same followed by ``GraphModule.recompile``, as a pass on a
  ``GraphModule`` needs; left out when ``vllm`` is not installed.
- ``vllm_without_scan``: vLLM's pass with its scan of an original's users for
  one after a write skipped (:func:`vllm_without_scan`; quadratic where its
  removals chain), reported only where it removes the same clones (the
  shared-weight shape; on the synthetic shape it does not, and the table shows
  a dash): what vLLM's pass costs without that scan, so
  what a pass's per-node cost must match to be as fast at sizes where the
  scan is small.
- ``edits``: the graph edits of ``eliminate_clones``'s removals alone
  (:func:`replay_removals`: ``replace_all_uses_with`` and ``erase_node`` of each
  removed clone, and the erasure of the nodes a C10 removal erases with it) on a
  fresh copy of the ``Graph``: what any pass that removes those clones pays,
  vLLM's included (it removes about as many on both shapes).
- ``schema_floor``: :func:`schema_floor`, the least a schema-reading alias
  analysis does: each value's fake storage identity, and one read or write
  record per tensor argument (by the op's schema) in its storage's list.
  ``schema_floor`` plus ``edits`` is the floor of a pass that knows who
  touches which storage and removes the clones; side by side with vLLM's
  pass, the summary reports what vLLM's time leaves above that floor for
  views, regions, layouts and the decisions (``left_above_floor_s``), and
  what ours spends there (``ours_above_floor_s``).
- ``hostile_no_meta``: ``eliminate_graph`` on the graph whose placeholders after
  the fifth carry no ``meta['val']`` (the synthetic shape's weights; the
  shared-weight shape's ``cos`` and ``sin``); ``hostile_unknown``: ``eliminate_graph`` on the
  graph with an opaque Python call on every layer's input.

The measures run interleaved, one round after another (``--repeats`` rounds, or
``--large-repeats`` for graphs of 32k nodes and more), each after a
``gc.collect()``; the sizes of a shape are interleaved too (round ``r`` of every
size, then round ``r + 1``: :func:`time_sizes`), so a slow spell of the machine
falls on every size alike rather than on one side of a growth factor. Each call is timed with two clocks: wall time
(``time.perf_counter``) and the process's CPU time (``time.process_time``);
on a machine shared with other jobs the wall time of identical runs varies up
to twofold (the process waits for a core) and the CPU time much less, so both
are reported and the targets are judged on each. Medians are reported; ratios to ``bare`` are
taken at the largest size, growth factors between the two largest sizes
(16k -> 64k).

Side by side, the script compares ``eliminate_clones`` with the UNSOUND
output-only baseline (:mod:`tools.broken`) on a small synthetic graph
(``--check-size``) and on the named programs of :mod:`benchmarks.programs`:
clones removed by each, whether ``rewrite.testing.check_equivalent`` accepts the
whole rewritten program, and how many of the baseline's removals it rejects
when each is applied alone.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor

import aliasing
import rewrite
from benchmarks.programs import PROGRAMS, NamedProgram
from benchmarks.synthetic import (
    build_shared_weight_graph,
    build_transformer_graph,
    count_nodes,
    layers_for_nodes,
    shared_layers_for_nodes,
)
from rewrite.errors import NotEquivalent
from rewrite.planning.decisions import Decision, Reason
from rewrite.planning.planner import is_clone_candidate
from rewrite.testing import check_equivalent, copy_program
from tools.broken import output_only_clone_elimination, plan_output_only, remove_clones

__all__ = [
    "TARGETS",
    "bare_traversal",
    "compare_on_graph",
    "compare_on_programs",
    "main",
    "parse_size",
    "removal_edits",
    "replay_removals",
    "schema_floor",
    "time_size",
    "time_sizes",
    "vllm_without_scan",
]

#: Max ratio to the bare traversal (and, for ``analyze``, to the ``meta['val']`` loop) at the
#: largest size and max growth between the two largest sizes (16k -> 64k nodes), per measure.
TARGETS: dict[str, dict[str, float]] = {
    "analyze": {"ratio_to_bare": 25.0, "ratio_to_meta_val": 30.0, "growth": 4.5},
    "eliminate": {"ratio_to_bare": 40.0, "growth": 4.5},
}
#: Growth targets of the other measures (4x the nodes costs at most 4.5x the time).
GROWTH_TARGETS: dict[str, float] = {"eliminate_graph": 4.5, "hostile_no_meta": 4.5, "hostile_unknown": 4.5}
#: Side by side with vLLM's pass, per graph shape: max ratio of ours to theirs, at a size
#: (nodes, rounded to thousands).
VLLM_TARGETS: dict[str, tuple[tuple[str, str, int, float], ...]] = {
    "synthetic": (
        ("eliminate_graph", "vllm", 64, 0.5),
        ("eliminate_graph", "vllm", 16, 1.5),
        ("eliminate", "vllm_recompile", 16, 1.0),
    ),
    "shared": (
        ("eliminate_graph", "vllm", 64, 1.0),
        ("eliminate_graph", "vllm", 16, 1.0),
        ("eliminate", "vllm_recompile", 16, 1.0),
    ),
}
#: The graph shapes: a builder of ``layers`` layers and the layer count for a node budget.
#: ``synthetic``: :func:`benchmarks.synthetic.build_transformer_graph` (weights per layer,
#: KV-cache writes; vLLM's pass is quadratic there); ``shared``:
#: :func:`benchmarks.synthetic.build_shared_weight_graph` (one set of weights; only the
#: residual's uses pile up, as vLLM's pass removes its clones).
SHAPES: dict[str, tuple[Callable[[int], tuple[torch.fx.GraphModule, Callable[[], list[Tensor]]]], Callable[[int], int]]] = {
    "synthetic": (build_transformer_graph, layers_for_nodes),
    "shared": (build_shared_weight_graph, shared_layers_for_nodes),
}

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "scaling.json"
LARGE_NODES = 32_000
#: ``"wall"``: elapsed time (``time.perf_counter``); ``"cpu"``: CPU time of the
#: process (``time.process_time``), which time spent waiting for a shared CPU does not inflate.
CLOCKS = ("wall", "cpu")


# --------------------------------------------------------------------------- timing


def _read_val(val: object) -> int:
    if isinstance(val, Tensor):
        facts = (
            val.untyped_storage()._cdata,
            tuple(val.size()),
            tuple(val.stride()),
            val.storage_offset(),
            val.dtype,
        )
        return len(facts)
    if isinstance(val, (tuple, list)):
        return sum(_read_val(v) for v in val)
    return 0


def meta_val_loop(gm: torch.fx.GraphModule) -> int:
    """Read every node's ``meta['val']`` and nothing else: the floor of any pass that looks at metadata.

    Returns the number of nodes with a value.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> meta_val_loop(make_fx(lambda x: x.clone(), tracing_mode="fake")(torch.randn(2)))
    2
    """
    n = 0
    for node in gm.graph.nodes:
        if node.meta.get("val") is not None:
            n += 1
    return n


def bare_traversal(gm: torch.fx.GraphModule) -> int:
    """Read every node's ``meta['val']`` and each tensor's storage, sizes, strides, offset, dtype.

    Returns the number of facts read (so the work cannot be skipped).

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x.clone(), tracing_mode="fake")(torch.randn(2))
    >>> bare_traversal(gm)  # two tensors, five facts each
    10
    """
    n = 0
    for node in gm.graph.nodes:
        n += _read_val(node.meta.get("val"))
    return n


#: Removals made by erasing another removal's C10 group (their edits are that group's).
_ERASED_WITH_A_GROUP = frozenset({Reason.ERASED_WITH_DEAD_CLONE, Reason.COPY_ERASED_WITH_DEAD_CLONE})


def removal_edits(graph: torch.fx.Graph, decisions: Sequence[Decision]) -> list[tuple[torch.fx.Node, tuple[torch.fx.Node, ...]]]:
    """The nodes of ``graph`` that :func:`replay_removals` edits for the removals among ``decisions``
    (each removed candidate, with the nodes a C10 removal erases with it), looked up by name
    before any clock starts."""
    by_name = {n.name: n for n in graph.nodes}
    return [
        (by_name[d.node], tuple(by_name[e] for e in d.erased))
        for d in decisions
        if d.action == "remove" and d.reason not in _ERASED_WITH_A_GROUP
    ]


def replay_removals(graph: torch.fx.Graph, edits: Sequence[tuple[torch.fx.Node, tuple[torch.fx.Node, ...]]]) -> int:
    """Make the graph edits of the removals ``edits`` (:func:`removal_edits`) with torch.fx alone: a
    candidate with nothing erased is replaced by its first argument, a C10 group is erased users
    first. The cost any pass pays for those removals; returns the number of nodes erased.

    Examples
    --------
    >>> import torch, rewrite
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: (x * 2).clone() + 1, tracing_mode="fake")(torch.randn(2))
    >>> report = rewrite.eliminate_clones(copy.deepcopy(gm))
    >>> replay_removals(gm.graph, removal_edits(gm.graph, report.decisions))
    1
    >>> [n.name for n in gm.graph.nodes]
    ['x_1', 'mul', 'add', 'output']
    """
    erased = 0
    for node, group in edits:
        for member in reversed(group):
            graph.erase_node(member)
        first = node.args[0]
        if not group and isinstance(first, torch.fx.Node):
            node.replace_all_uses_with(first)
        graph.erase_node(node)
        erased += 1 + len(group)
    return erased


def _tensor_params(op: object) -> tuple[tuple[int, str, bool], ...]:
    """``(position, name, written)`` of each tensor parameter of an op's schema (none for other targets)."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return ()
    return tuple(
        (i, a.name, bool(a.alias_info is not None and a.alias_info.is_write))
        for i, a in enumerate(schema.arguments)
        if "Tensor" in str(a.type)
    )


_UNSEEN: Any = object()  # schema_floor's marker of a target not looked up yet


def schema_floor(target: torch.fx.GraphModule | torch.fx.Graph) -> int:
    """The least a schema-reading alias analysis does: per node, its fake value's storage identity,
    and, through a per-op table of the schema's tensor parameters (which are written), one read or
    write record per tensor argument in the list of the argument's storage (a list of tensors is
    skipped: the floor is the lower for it). No views, regions,
    layouts or decisions: the leanest Python we could write for that much (the ``bare``
    traversal's five facts are not read). Returns the number of records.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> schema_floor(make_fx(lambda x: x.add_(1).clone(), tracing_mode="fake")(torch.randn(2)))  # add_ writes x, clone reads it, the output reads the clone
    3
    """
    storage_id, fake, node_type = torch._C._storage_id, FakeTensor, torch.fx.Node
    params: dict[object, Any] = {}  # target -> its tensor parameters (None: no schema)
    sid: dict[torch.fx.Node, int] = {}
    records: dict[int, list[tuple[int, bool]]] = {}
    n = 0
    graph = target.graph if isinstance(target, torch.fx.GraphModule) else target
    for pos, node in enumerate(graph.nodes):
        val = node.meta.get("val")
        if type(val) is fake:
            try:  # noqa: SIM105  (contextlib.suppress would add a call per node to the floor)
                sid[node] = storage_id(val)
            except RuntimeError:  # no storage (sparse and other layouts)
                pass
        op = node.target
        table = params.get(op, _UNSEEN) if node.op == "call_function" else None
        if table is _UNSEEN:
            table = params[op] = _tensor_params(op) if hasattr(op, "_schema") else None
        if table is not None:
            args, kwargs = node.args, node.kwargs
            for i, name, written in table:
                arg = kwargs.get(name) if kwargs and name in kwargs else (args[i] if i < len(args) else None)
                if type(arg) is node_type and arg in sid:
                    records.setdefault(sid[arg], []).append((pos, written))
                    n += 1
        else:  # getitem, output and calls without a schema: their arguments are read
            for arg in node.all_input_nodes:
                if arg in sid:
                    records.setdefault(sid[arg], []).append((pos, False))
                    n += 1
    return n


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """``(wall seconds, CPU seconds of this process)`` of one call, after a ``gc.collect()``."""
    gc.collect()
    cpu = time.process_time()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def parse_size(text: str) -> int:
    """``"16k"`` -> 16000, ``"900"`` -> 900 (node counts).

    Examples
    --------
    >>> parse_size("64k"), parse_size("1000")
    (64000, 1000)
    """
    t = text.strip().lower()
    value = int(float(t[:-1]) * 1000) if t.endswith("k") else int(t)
    if value < 1:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def _count_clones(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if is_clone_candidate(n))


def time_size(
    nodes: int,
    repeats: int,
    *,
    shape: str = "synthetic",
    log: Callable[[str], None] = lambda s: None,
    with_vllm: bool = True,
) -> dict[str, Any]:
    """Build the graph of ``shape`` with about ``nodes`` nodes and time every measure on it.

    :func:`time_sizes` for one size.

    Parameters
    ----------
    nodes : int
        Target node count (the layer count is chosen by ``layers_for_nodes``).
    repeats : int
        Interleaved rounds; each round times every measure once.
    shape : str
        A key of :data:`SHAPES`.
    log : callable
        Receives progress lines.
    with_vllm : bool
        Also time vLLM's pass when the ``vllm`` package is installed.

    Returns
    -------
    dict
        ``shape``, ``layers``, ``nodes``, ``clones``, ``build_s``; per measure and clock
        (``result["analyze"]["cpu"]``) ``runs_s`` and ``median_s``; and the
        clones ``eliminate_clones`` and the baseline remove.

    Examples
    --------
    >>> r = time_size(200, 1)
    >>> r["nodes"] > 100 and r["eliminate"]["removed"] > 0
    True
    """
    return time_sizes([(nodes, repeats)], shape=shape, log=log, with_vllm=with_vllm)[0]


@dataclass
class _Size:
    """One graph size under measure: its graphs, and the runs of each measure so far."""

    target_nodes: int
    repeats: int
    layers: int
    gm: torch.fx.GraphModule
    build_s: float
    no_meta: torch.fx.Graph
    unknown: torch.fx.Graph
    runs: dict[str, list[tuple[float, float]]]
    removed: int = 0
    kept: int = 0
    #: whether vLLM's pass without its users scan left the nodes the pass left, in every round
    same_removals_without_scan: bool | None = None


def _prepare(nodes: int, repeats: int, shape: str, log: Callable[[str], None], with_vllm: bool) -> _Size:
    build, layers_for = SHAPES[shape]
    layers = layers_for(nodes)
    start = time.perf_counter()
    gm, _ = build(layers)
    build_s = time.perf_counter() - start
    log(f"  {shape}: built {count_nodes(gm)} nodes ({layers} layers) in {build_s:.1f}s, {repeats} rounds")
    keys = ["meta_val", "bare", "schema_floor", "edits", "analyze", "eliminate", "eliminate_graph"]
    keys += ["hostile_no_meta", "hostile_unknown"]
    keys += ["vllm", "vllm_without_scan", "vllm_recompile"] if with_vllm else []
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in keys}
    return _Size(nodes, repeats, layers, gm, build_s, hostile_no_meta(gm.graph), hostile_unknown(gm.graph), runs)


def _time_round(size: _Size, vllm_pass: Callable[[torch.fx.Graph], object] | None) -> None:
    """Time every measure once on ``size``'s graphs (each on a fresh copy where it rewrites)."""
    gm, runs = size.gm, size.runs
    runs["meta_val"].append(_timed(lambda: meta_val_loop(gm)))
    runs["bare"].append(_timed(lambda: bare_traversal(gm)))
    runs["schema_floor"].append(_timed(lambda: schema_floor(gm)))
    runs["analyze"].append(_timed(lambda: aliasing.analyze(gm)))
    fresh = _copy(gm)
    reports: list[rewrite.CloneEliminationReport] = []
    runs["eliminate"].append(_timed(lambda: reports.append(rewrite.eliminate_clones(fresh))))
    size.removed, size.kept = len(reports[0].removed), len(reports[0].kept)
    g = copy.deepcopy(gm.graph)
    edits = removal_edits(g, reports[0].decisions)
    runs["edits"].append(_timed(lambda: replay_removals(g, edits)))
    for key, graph in (("eliminate_graph", gm.graph), ("hostile_no_meta", size.no_meta), ("hostile_unknown", size.unknown)):
        copied = copy.deepcopy(graph)
        runs[key].append(_timed(lambda g=copied: rewrite.eliminate_clones(g)))
    if vllm_pass is not None:
        theirs = copy.deepcopy(gm.graph)
        runs["vllm"].append(_timed(lambda: vllm_pass(theirs)))
        unscanned, without_scan = copy.deepcopy(gm.graph), vllm_without_scan(vllm_pass)
        runs["vllm_without_scan"].append(_timed(lambda: without_scan(unscanned)))
        same = [n.name for n in unscanned.nodes] == [n.name for n in theirs.nodes]
        size.same_removals_without_scan = same and size.same_removals_without_scan is not False
        module = _copy(gm)
        runs["vllm_recompile"].append(_timed(lambda: (vllm_pass(module.graph), module.recompile())))


def _result(size: _Size, shape: str) -> dict[str, Any]:
    result: dict[str, Any] = {
        "shape": shape,
        "target_nodes": size.target_nodes,
        "layers": size.layers,
        "nodes": count_nodes(size.gm),
        "clones": _count_clones(size.gm),
        "build_s": round(size.build_s, 3),
        "repeats": size.repeats,
    }
    for key, values in size.runs.items():
        result[key] = {}
        for i, clock in enumerate(CLOCKS):
            series = [v[i] for v in values]
            result[key][clock] = {"runs_s": [round(v, 5) for v in series], "median_s": statistics.median(series)}
    result["eliminate"].update(removed=size.removed, kept=size.kept)
    if "vllm_without_scan" in result:
        result["vllm_without_scan"]["same_removals"] = size.same_removals_without_scan
    result["baseline_removed"] = len(plan_output_only(size.gm.graph))
    return result


def time_sizes(
    sizes: Sequence[tuple[int, int]],
    *,
    shape: str = "synthetic",
    log: Callable[[str], None] = lambda s: None,
    with_vllm: bool = True,
) -> list[dict[str, Any]]:
    """Time every measure on graphs of ``shape`` of several sizes, the sizes' rounds interleaved.

    Round ``r`` times every measure once on each size that has more than ``r``
    rounds, so a slow spell of a shared machine falls on every size alike and
    the growth factors between sizes compare rounds run side by side.

    Parameters
    ----------
    sizes : sequence of (int, int)
        ``(target node count, rounds)`` per size.
    shape, log, with_vllm
        As in :func:`time_size`.

    Returns
    -------
    list of dict
        One :func:`time_size` result per size, in the order given.

    Examples
    --------
    >>> small, larger = time_sizes([(120, 2), (250, 1)], with_vllm=False)
    >>> len(small["analyze"]["cpu"]["runs_s"]), len(larger["analyze"]["cpu"]["runs_s"])
    (2, 1)
    """
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {sorted(SHAPES)}, got {shape!r}")
    vllm_pass = _vllm_pass() if with_vllm else None
    prepared = [_prepare(n, repeats, shape, log, vllm_pass is not None) for n, repeats in sizes]
    for r in range(max((s.repeats for s in prepared), default=0)):
        for size in prepared:
            if r < size.repeats:
                _time_round(size, vllm_pass)
                log(
                    f"  {shape} {count_nodes(size.gm)} nodes, round {r + 1}/{size.repeats} (wall/cpu s): "
                    + "  ".join(f"{k} {v[-1][0]:.3f}/{v[-1][1]:.3f}" for k, v in size.runs.items())
                )
    return [_result(size, shape) for size in prepared]


def summarise(sizes: Sequence[dict[str, Any]], clock: str = "cpu", shape: str = "synthetic") -> dict[str, Any]:
    """Ratios to ``bare`` at the largest size and growth between the two largest sizes.

    ``sizes`` are the rows of one graph shape (``shape``: its :data:`VLLM_TARGETS`);
    ``clock`` is ``"cpu"`` (process CPU time) or ``"wall"`` (elapsed time).

    Examples
    --------
    >>> def row(n, b, a, e):
    ...     times = {"bare": b, "analyze": a, "eliminate": e}
    ...     return {"nodes": n, **{k: {"cpu": {"median_s": v}} for k, v in times.items()}}
    >>> s = summarise([row(16, 1.0, 4.0, 8.0), row(64, 4.0, 16.0, 40.0)])
    >>> s["analyze"]["ratio_to_bare"], s["eliminate"]["growth"], s["eliminate"]["meets_targets"]
    (4.0, 5.0, False)
    """
    ordered = sorted(sizes, key=lambda r: r["nodes"])
    if not ordered:
        return {}
    big = ordered[-1]
    prev = ordered[-2] if len(ordered) > 1 else None

    def t(row: dict[str, Any], key: str) -> float:
        return float(row[key][clock]["median_s"])

    out: dict[str, Any] = {"largest_nodes": big["nodes"], "growth_from_nodes": prev["nodes"] if prev else None}
    if prev is not None:
        out["bare_growth"] = t(big, "bare") / t(prev, "bare")
    for key, target in TARGETS.items():
        ratio = t(big, key) / t(big, "bare")
        growth = t(big, key) / t(prev, key) if prev is not None else None
        entry: dict[str, Any] = {"ratio_to_bare": ratio, "growth": growth, "targets": target}
        # context, not a target: growth divided by the bare traversal's growth on the same graphs
        entry["growth_over_bare_growth"] = growth / out["bare_growth"] if growth is not None else None
        meets = ratio <= target["ratio_to_bare"] and (growth is None or growth <= target["growth"])
        if "meta_val" in big and t(big, "meta_val") > 0:
            entry["ratio_to_meta_val"] = t(big, key) / t(big, "meta_val")
            meets = meets and entry["ratio_to_meta_val"] <= target.get("ratio_to_meta_val", float("inf"))
        entry["meets_targets"] = meets
        out[key] = entry
    for key, max_growth in GROWTH_TARGETS.items():
        if key in big and prev is not None and key in prev:
            growth = t(big, key) / t(prev, key)
            out[key] = {"growth": growth, "targets": {"growth": max_growth}, "meets_targets": growth <= max_growth}
    by_k = {round(r["nodes"] / 1000): r for r in ordered}
    vs: list[dict[str, Any]] = []
    for ours, theirs, k, limit in VLLM_TARGETS.get(shape, ()):
        row = by_k.get(k)
        if row is None or ours not in row or theirs not in row:
            continue
        ratio = t(row, ours) / t(row, theirs)
        entry = {"ours": ours, "theirs": theirs, "nodes": row["nodes"], "ratio": ratio, "target": limit, "meets_target": ratio <= limit}
        if ours == "eliminate_graph" and "edits" in row:
            # What vLLM's time leaves for the analysis and the decisions above the floor (recording
            # who reads and writes each storage, making the edits), and what ours spends there.
            floor = t(row, "schema_floor") + t(row, "edits")
            entry.update(floor_s=floor, left_above_floor_s=t(row, theirs) - floor, ours_above_floor_s=t(row, ours) - floor)
            if theirs == "vllm" and row.get("vllm_without_scan", {}).get("same_removals"):
                entry["theirs_without_scan_s"] = t(row, "vllm_without_scan")
        vs.append(entry)
    if vs:
        out["vs_vllm"] = vs
    return out


def _vllm_pass() -> Callable[[torch.fx.Graph], object] | None:
    """vLLM's ``UnsafeCloneEliminationPass`` as a function of a Graph, under vLLM's pass context; None without vllm."""
    try:
        from vllm.compilation.passes.inductor_pass import get_pass_context, pass_context
        from vllm.config.utils import Range

        from benchmarks.vllm_comparison import _vllm_config, load_vllm_pass

        instance = load_vllm_pass()(_vllm_config())
    except Exception:  # vllm absent or not importable here: the comparison is left out
        return None

    def run(graph: torch.fx.Graph) -> object:
        with pass_context(Range(1, 8192)):
            get_pass_context().donated_input_ids = set()
            return instance(graph)

    return run


def _never(_: object) -> bool:
    return False


def vllm_without_scan(vllm_pass: Callable[[torch.fx.Graph], object]) -> Callable[[torch.fx.Graph], object]:
    """vLLM's pass with its scan of users skipped: context for its time, not a baseline.

    Before removing a clone that a user writes, vLLM's pass scans every user of
    the clone's original for one after the write (``any(...)`` over
    ``original_node.users``). Where its removals chain (the shared-weight
    shape's residual: each layer's clone of the last one), the users of one
    node pile up and the scans grow quadratically. This runs the pass with that
    module's ``any`` answering False at once, which removes the same clones
    wherever no scan finds a later user (the benchmark checks that it does, by
    the nodes left, in every round), so the difference of the two times is the scans' cost.
    """
    from benchmarks.vllm_comparison import load_vllm_pass

    module = sys.modules[load_vllm_pass().__module__]

    def run(graph: torch.fx.Graph) -> object:
        module.any = _never  # type: ignore[attr-defined]  # a module global shadows the builtin
        try:
            return vllm_pass(graph)
        finally:
            del module.any

    return run


def hostile_no_meta(graph: torch.fx.Graph) -> torch.fx.Graph:
    """A copy of ``graph`` whose placeholders other than the first five carry no ``meta['val']``
    (the synthetic shape's weights, the shared-weight shape's ``cos`` and ``sin``)."""
    g = copy.deepcopy(graph)
    for i, node in enumerate(n for n in g.nodes if n.op == "placeholder"):
        if i >= 5:
            node.meta = {k: v for k, v in node.meta.items() if k != "val"}
    return g


def _opaque(x: Tensor) -> None:
    """A Python function the analysis cannot see into."""


def hostile_unknown(graph: torch.fx.Graph) -> torch.fx.Graph:
    """A copy of ``graph`` with an opaque Python call on the input of every RMSNorm clone (one per layer and more)."""
    g = copy.deepcopy(graph)
    for node in list(g.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.clone.default:
            with g.inserting_after(node):
                g.call_function(_opaque, (node.args[0],))
    return g


# --------------------------------------------------------------------------- side by side


def _rejection(
    original: torch.fx.GraphModule,
    rewritten: torch.fx.GraphModule,
    inputs: Callable[[], Sequence[Any]],
    donated: Sequence[int],
) -> str | None:
    """``None`` if ``check_equivalent`` accepts ``rewritten``, else the failed clause."""
    try:
        check_equivalent(original, rewritten, inputs, donated_inputs=donated)
    except NotEquivalent as e:
        return e.clause
    return None


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    new = copy_program(gm)
    if not isinstance(new, torch.fx.GraphModule):
        raise TypeError("copy_program returned a non-GraphModule for a GraphModule")
    return new


def compare(
    gm: torch.fx.GraphModule,
    inputs: Callable[[], Sequence[Any]],
    *,
    donated_inputs: Sequence[int] = (),
) -> dict[str, Any]:
    """Run ``eliminate_clones`` and the baseline on copies of ``gm``; check every removal.

    Returns
    -------
    dict
        ``clones``; ``ours``: ``removed`` (names), ``rejected`` (clause or None);
        ``baseline``: ``removed``, ``rejected`` (whole program), and
        ``rejected_alone``: ``{clone: clause}`` for each baseline removal that
        ``check_equivalent`` rejects when applied alone.

    Examples
    --------
    >>> from benchmarks.programs import program
    >>> p = program("two_clones_written")
    >>> r = compare(p.trace(), p.inputs)
    >>> len(r["ours"]["removed"]), r["ours"]["rejected"], len(r["baseline"]["removed"]), r["baseline"]["rejected"]
    (1, None, 2, 'output')
    """
    ours = _copy(gm)
    report = rewrite.eliminate_clones(ours, donated_inputs=donated_inputs)
    base = _copy(gm)
    base_removed = output_only_clone_elimination(base)
    alone: dict[str, str] = {}
    for name in base_removed:
        single = _copy(gm)
        remove_clones(single, [name])
        clause = _rejection(gm, single, inputs, donated_inputs)
        if clause is not None:
            alone[name] = clause
    return {
        "clones": _count_clones(gm),
        "ours": {"removed": list(report.removed), "rejected": _rejection(gm, ours, inputs, donated_inputs)},
        "baseline": {
            "removed": base_removed,
            "rejected": _rejection(gm, base, inputs, donated_inputs),
            "rejected_alone": alone,
        },
    }


def compare_on_graph(nodes: int) -> dict[str, Any]:
    """:func:`compare` on the synthetic graph of about ``nodes`` nodes, with real inputs."""
    layers = layers_for_nodes(nodes)
    gm, inputs = build_transformer_graph(layers)
    result = compare(gm, inputs)
    result.update(nodes=count_nodes(gm), layers=layers)
    return result


def compare_on_programs(programs: Sequence[NamedProgram] = PROGRAMS) -> list[dict[str, Any]]:
    """:func:`compare` on each named program; adds ``name``, ``case`` and ``sound_removals``."""
    rows = []
    for p in programs:
        row = compare(p.trace(), lambda p=p: p.inputs(seed=1), donated_inputs=p.donated_inputs)
        row.update(name=p.name, case=p.case, sound_removals=p.sound_removals)
        rows.append(row)
    return rows


def comparison_totals(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Totals over :func:`compare` rows."""
    return {
        "programs": len(rows),
        "clones": sum(r["clones"] for r in rows),
        "sound_removals": sum(r.get("sound_removals", 0) for r in rows),
        "ours_removed": sum(len(r["ours"]["removed"]) for r in rows),
        "ours_programs_rejected": sum(r["ours"]["rejected"] is not None for r in rows),
        "baseline_removed": sum(len(r["baseline"]["removed"]) for r in rows),
        "baseline_programs_rejected": sum(r["baseline"]["rejected"] is not None for r in rows),
        "baseline_removals_rejected_alone": sum(len(r["baseline"]["rejected_alone"]) for r in rows),
    }


# --------------------------------------------------------------------------- report


def _machine() -> dict[str, Any]:
    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_at_start": load,
    }


def format_table(
    sizes: Sequence[dict[str, Any]], summary: dict[str, Any], clock: str = "cpu", shape: str = "synthetic"
) -> str:
    """The timing table of one clock and graph shape printed by :func:`main` (also in benchmarks/README.md)."""
    lines = [
        f"{shape} graphs, {clock} time, medians:",
        "",
        "| nodes | layers | clones | meta['val'] (ms) | bare (ms) | analyze (ms) | eliminate (ms) | analyze/meta['val'] |"
        " analyze/bare | eliminate/bare | removed (ours) | removed (baseline) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(sizes, key=lambda r: r["nodes"]):
        b, a, e = (r[k][clock]["median_s"] * 1000 for k in ("bare", "analyze", "eliminate"))
        m = r["meta_val"][clock]["median_s"] * 1000 if "meta_val" in r else float("nan")
        lines.append(
            f"| {r['nodes']} | {r['layers']} | {r['clones']} | {m:.1f} | {b:.1f} | {a:.0f} | {e:.0f}"
            f" | {a / m if m else float('nan'):.1f}x | {a / b:.1f}x | {e / b:.1f}x"
            f" | {r['eliminate']['removed']} | {r['baseline_removed']} |"
        )
    extra = [k for k in ("schema_floor", "edits", "eliminate_graph", "hostile_no_meta", "hostile_unknown", "vllm", "vllm_without_scan", "vllm_recompile") if any(k in r for r in sizes)]
    if extra:
        lines += ["", "| nodes | " + " | ".join(f"{k} (ms)" for k in extra) + " |", "|---:|" + "---:|" * len(extra)]
        for r in sorted(sizes, key=lambda r: r["nodes"]):
            cells = [
                f"{r[k][clock]['median_s'] * 1000:.0f}" if k in r and r[k].get("same_removals", True) else "-"
                for k in extra
            ]
            lines.append(f"| {r['nodes']} | " + " | ".join(cells) + " |")
    lines.append("")
    for key in ("analyze", "eliminate"):
        s = summary.get(key)
        if s:
            growth = "n/a" if s["growth"] is None else f"{s['growth']:.2f}x"
            t = s["targets"]
            lines.append(
                f"{key}: {s['ratio_to_bare']:.1f}x bare at {summary['largest_nodes']} nodes"
                f" (target <= {t['ratio_to_bare']:.0f}x)"
                + (
                    f", {s['ratio_to_meta_val']:.1f}x the meta['val'] loop (target <= {t['ratio_to_meta_val']:.0f}x)"
                    if "ratio_to_meta_val" in s and "ratio_to_meta_val" in t
                    else ""
                )
                + f", growth {summary['growth_from_nodes']} -> "
                f"{summary['largest_nodes']}: {growth} (target <= {t['growth']}x):"
                f" {'MET' if s['meets_targets'] else 'NOT MET'}"
            )
    for key in GROWTH_TARGETS:
        s = summary.get(key)
        if s:
            lines.append(
                f"{key}: growth {summary['growth_from_nodes']} -> {summary['largest_nodes']}: {s['growth']:.2f}x"
                f" (target <= {s['targets']['growth']}x): {'MET' if s['meets_targets'] else 'NOT MET'}"
            )
    for v in summary.get("vs_vllm", []):
        lines.append(
            f"{v['ours']} / {v['theirs']} at {v['nodes']} nodes: {v['ratio']:.2f}"
            f" (target <= {v['target']}): {'MET' if v['meets_target'] else 'NOT MET'}"
        )
        if "floor_s" in v:
            per_node = 1e6 / v["nodes"]
            lines.append(
                f"  floor (schema floor + edits) {v['floor_s'] * 1e3:.0f} ms; above it, {v['theirs']} leaves"
                f" {v['left_above_floor_s'] * 1e3:.0f} ms ({v['left_above_floor_s'] * per_node:.1f} us/node),"
                f" ours spends {v['ours_above_floor_s'] * 1e3:.0f} ms ({v['ours_above_floor_s'] * per_node:.1f} us/node)"
            )
        if "theirs_without_scan_s" in v:
            lines.append(
                f"  {v['theirs']} without its users scan (same removals): {v['theirs_without_scan_s'] * 1e3:.0f} ms"
                f" ({v['theirs_without_scan_s'] * 1e6 / v['nodes']:.1f} us/node)"
            )
    if summary.get("bare_growth") is not None:
        lines.append(f"bare traversal growth: {summary['bare_growth']:.2f}x")
        for key in ("analyze", "eliminate"):
            if summary.get(key):
                lines.append(f"{key} growth / bare growth: {summary[key]['growth_over_bare_growth']:.2f}")
    return "\n".join(lines)


def format_programs(rows: Sequence[dict[str, Any]]) -> str:
    """The side-by-side table of the named programs."""
    lines = [
        "| program | case | clones | sound | ours | ours rejected | baseline | baseline rejected | rejected alone |",
        "|---|---|---:|---:|---:|---|---:|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['case']} | {r['clones']} | {r['sound_removals']} | {len(r['ours']['removed'])}"
            f" | {r['ours']['rejected'] or '-'} | {len(r['baseline']['removed'])} | {r['baseline']['rejected'] or '-'}"
            f" | {len(r['baseline']['rejected_alone'])} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of the benchmark."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1k,16k,64k", help="comma-separated node counts (e.g. 1k,16k,64k)")
    p.add_argument(
        "--shapes", default=",".join(SHAPES), help=f"comma-separated graph shapes (default: {','.join(SHAPES)})"
    )
    p.add_argument("--repeats", type=int, default=5, help="timing rounds per size (default 5)")
    p.add_argument(
        "--large-repeats",
        type=int,
        default=3,
        help=f"timing rounds for sizes of {LARGE_NODES} nodes and more (default 3)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    p.add_argument(
        "--check-size",
        type=parse_size,
        default=200,
        help="synthetic graph size for the equivalence check (default 200)",
    )
    p.add_argument("--no-compare", action="store_true", help="skip the side-by-side equivalence comparison")
    p.add_argument("--no-vllm", action="store_true", help="do not time vLLM's pass even when vllm is installed")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the tables and write the JSON; returns the exit status.

    Examples
    --------
    >>> main(["--sizes", "200", "--repeats", "1", "--no-compare", "--out", "/tmp/fxa_doctest.json"])  # doctest: +SKIP
    0
    """
    args = build_parser().parse_args(argv)
    if args.repeats < 1 or args.large_repeats < 1:
        raise SystemExit("--repeats and --large-repeats must be >= 1")
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or not shapes:
        raise SystemExit(f"--shapes: unknown {unknown}; choose from {sorted(SHAPES)}")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    result: dict[str, Any] = {"machine": _machine(), "targets": TARGETS, "vllm_targets": VLLM_TARGETS, "sizes": []}
    for shape in shapes:
        rounds = [(n, args.large_repeats if n >= LARGE_NODES else args.repeats) for n in sizes]
        log(f"{shape}: sizes {', '.join(f'~{n} nodes ({r} rounds)' for n, r in rounds)}, interleaved")
        result["sizes"].extend(time_sizes(rounds, shape=shape, log=log, with_vllm=not args.no_vllm))
    result["summary"] = {}
    for shape in shapes:
        rows = [r for r in result["sizes"] if r["shape"] == shape]
        result["summary"][shape] = {clock: summarise(rows, clock, shape) for clock in CLOCKS}
        for clock in ("cpu", "wall"):
            print(format_table(rows, result["summary"][shape][clock], clock, shape), end="\n\n")

    if not args.no_compare:
        log(f"equivalence check on the ~{args.check_size}-node synthetic graph")
        graph_row = compare_on_graph(args.check_size)
        result["synthetic_comparison"] = graph_row
        log("equivalence check on the named programs")
        rows = compare_on_programs()
        result["programs"] = rows
        result["program_totals"] = comparison_totals(rows)
        base = graph_row["baseline"]
        print(
            f"\nsynthetic graph, {graph_row['nodes']} nodes, {graph_row['clones']} clones:"
            f" ours removed {len(graph_row['ours']['removed'])} (rejected: {graph_row['ours']['rejected'] or 'no'});"
            f" baseline removed {len(base['removed'])} (program rejected: {base['rejected'] or 'no'};"
            f" removals rejected alone: {len(base['rejected_alone'])})"
        )
        print()
        print(format_programs(rows))
        print(json.dumps(result["program_totals"]))

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
