"""``lower_functional_ops``: every functional wrapper of the graph into clones plus an in-place call.

This module dispatches each wrapper node to its family's lowering
(:mod:`~rewrite.lowering.auto_functionalized`,
:mod:`~rewrite.lowering.auto_functionalized_v2`,
:mod:`~rewrite.lowering.triton`), rewires the wrapper's getitem users, and
then lowers the version-1 scatter write-backs of the new values
(:mod:`~rewrite.lowering.scatter`). A wrapper that cannot be lowered is left
as it was and reported.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import cast

import torch
import torch.fx

from aliasing.core.facts import meta_value
from rewrite.editing.nodes import SELF, Builder, LoweringSkip, fake_mode, recompile, undo
from rewrite.lowering.auto_functionalized import (
    base_write_backs,
    fold_base_write_backs,
    lower_auto_functionalized,
    nested_lists,
)
from rewrite.lowering.auto_functionalized_v2 import lower_auto_functionalized_v2
from rewrite.lowering.metadata import refresh_replaced, scatter_sources, storage_keys
from rewrite.lowering.reports import Kind, Lowered, LoweringReport, Skipped
from rewrite.lowering.scatter import lower_scatters
from rewrite.lowering.triton import lower_triton_wrapper

__all__ = ["lower_functional_ops"]

log = logging.getLogger(__name__)

_KINDS: dict[str, Kind] = {
    "auto_functionalized": "auto_functionalized",
    "auto_functionalized_v2": "auto_functionalized_v2",
    "triton_kernel_wrapper_functional": "triton_kernel_wrapper_functional",
}


def _kind(node: torch.fx.Node) -> Kind | None:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.HigherOrderOperator):
        return None
    name = cast(Callable[[], str], node.target.name)  # HigherOrderOperator.name is untyped
    return _KINDS.get(str(name()))


def _wrappers(graph: torch.fx.Graph) -> list[tuple[torch.fx.Node, Kind]]:
    """The wrapper nodes of ``graph`` in graph order, with their kinds.

    Read from FX's index of nodes by target (no pass over the graph): a wrapper's target is the
    higher-order operator registered under its name (``torch.ops.higher_order``), and one that
    is not registered in this process is in no graph.
    """
    found: list[torch.fx.Node] = []
    for name in _KINDS:
        hop = getattr(torch.ops.higher_order, name, None)
        if hop is not None:
            found += graph.find_nodes(op="call_function", target=hop, sort=False)
    return [(n, k) for n in sorted(found) if (k := _kind(n)) is not None]


def lower_functional_ops(graph: torch.fx.Graph, *, scatters: bool = True) -> LoweringReport:
    """Rewrite functional wrappers into explicit clones plus in-place calls (mutates ``graph``).

    Each ``auto_functionalized``, ``auto_functionalized_v2`` and
    ``triton_kernel_wrapper_functional`` node becomes: a layout-preserving
    ``aten.clone`` of every value the wrapper copies (v2: of every base, with
    the argument views regenerated on the clone), the in-place call on the
    copies, and its ``getitem`` users rewired. With ``scatters`` (default),
    version-1 write-backs ``*_scatter(base, new_value, ...)`` of those new values
    become ``clone(base)`` plus ``copy_`` into the view. The program computes
    the same values as before; new nodes carry ``meta['val']`` computed under
    the graph's fake mode. A node that cannot be lowered (no fake tensors,
    symbolic non-dense layouts, a higher-order mutable op, unusual uses) is
    left as it was and reported in :attr:`LoweringReport.skipped`.

    Parameters
    ----------
    graph : torch.fx.Graph
        A functionalized graph whose nodes carry ``meta['val']``.
    scatters : bool
        Also lower version-1 scatter write-backs of lowered values.

    Returns
    -------
    LoweringReport

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from torch._higher_order_ops.auto_functionalize import auto_functionalized
    >>> @torch.library.custom_op("lowering_doc::add1_", mutates_args=("x",))
    ... def add1_(x: torch.Tensor) -> None:
    ...     x.add_(1)
    >>> def f(a):
    ...     y = a * 2
    ...     _, y2 = auto_functionalized(torch.ops.lowering_doc.add1_.default, x=y)
    ...     return y2
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    >>> report = lower_functional_ops(gm.graph)
    >>> [l.kind for l in report.lowered], len(report.clones)
    (['auto_functionalized'], 1)
    """
    lowered: list[Lowered] = []
    skipped: list[Skipped] = []
    wrappers = _wrappers(graph)
    if not wrappers:
        return LoweringReport()
    mode = fake_mode(graph)
    if mode is None:
        reason = "the graph has no fake tensors of a single fake mode"
        return LoweringReport((), tuple(Skipped(n.name, k, reason) for n, k in wrappers))
    b = Builder(graph, mode)
    new_values: set[torch.fx.Node] = set()
    stale: set[int] = set()  # the fake storages of the wrappers' results
    for node, kind in wrappers:
        start = len(b.created)
        name = node.name
        results = storage_keys([meta_value(g) for g in node.users])
        try:
            with graph.inserting_before(node):
                if kind == "auto_functionalized":
                    clones, call, repl = lower_auto_functionalized(b, node, base_write_backs(node))
                elif kind == "auto_functionalized_v2":
                    clones, call, repl = lower_auto_functionalized_v2(b, node)
                else:
                    clones, call, repl = lower_triton_wrapper(b, node)
            lists = nested_lists(node, call) if kind == "auto_functionalized" else {}
            _check_rewirable(node, repl, lists)
            _rewire(graph, node, repl, lists)
            fold_base_write_backs(graph, repl)
        except LoweringSkip as e:
            undo(graph, b, start)
            skipped.append(Skipped(name, kind, str(e)))
            log.debug("not lowered: %s (%s): %s", name, kind, e)
            continue
        except Exception as e:  # fake propagation or an unexpected structure: leave the node
            undo(graph, b, start)
            skipped.append(Skipped(name, kind, f"{type(e).__name__}: {e}"))
            log.debug("not lowered: %s (%s): %s: %s", name, kind, type(e).__name__, e)
            continue
        new_values.update(v for k, v in repl.items() if isinstance(v, torch.fx.Node) and not isinstance(k, torch.fx.Node))
        for values in lists.values():
            new_values.update(values)
        stale |= results
        lowered.append(Lowered(name, kind, tuple(c.name for c in clones), call.name))
        log.debug("lowered %s (%s) into %s with clones %s", name, kind, call.name, [c.name for c in clones])
    # Views of the new values (a dtype view back to the input's dtype) are recreated in the clones' storages.
    refresh_replaced(graph, stale, new_values)
    if scatters and new_values:
        lowered.extend(lower_scatters(b, graph, scatter_sources(new_values)))
    recompile(graph)
    return LoweringReport(tuple(lowered), tuple(skipped))


def _check_rewirable(node: torch.fx.Node, repl: dict[object, torch.fx.Node], lists: dict[object, list[torch.fx.Node]]) -> None:
    if SELF in repl:
        return
    for g in node.users:
        idx = g.args[1]
        if not g.users:
            continue
        if idx in lists:
            for u in g.users:
                if (
                    u.op != "call_function"
                    or u.target is not operator.getitem
                    or not isinstance(u.args[1], int)
                    or not -len(lists[idx]) <= u.args[1] < len(lists[idx])
                ):
                    raise LoweringSkip(f"{u.name} uses a list of new values other than through getitem")
        elif repl.get(idx) is None:
            raise LoweringSkip(f"no replacement for output {idx!r}")


def _rewire(graph: torch.fx.Graph, node: torch.fx.Node, repl: dict[object, torch.fx.Node], lists: dict[object, list[torch.fx.Node]]) -> None:
    if SELF in repl:
        node.replace_all_uses_with(repl[SELF])
        graph.erase_node(node)
        return
    for g in list(node.users):
        idx = g.args[1]
        if not g.users:
            pass
        elif idx in lists:
            for u in list(g.users):
                u.replace_all_uses_with(lists[idx][u.args[1]])  # type: ignore[index]
                graph.erase_node(u)
        else:
            g.replace_all_uses_with(repl[idx])
        graph.erase_node(g)
    graph.erase_node(node)
