"""H1: a write-back that reads an input after that input's own write-back (a copy ``remove_noop_ops`` dropped)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

import torch
import torch.fx

from aliasing import AliasAnalysis
from rewrite.guard.common import is_pure_view, is_write_back, reads_of, view_root
from rewrite.guard.fixes import CloneInput, Fix, Reorder, guarded_rounds
from rewrite.guard.hazards import ALL_HAZARDS, GuardReport, Hazard

__all__ = ["guard_stale_reads", "plan_stale_reads"]

aten = torch.ops.aten


def _epilogue_start(a: AliasAnalysis) -> int:
    """Position of the first node of the trailing run of write-backs, pure views and the output."""
    nodes = a.nodes
    start = len(nodes)
    for n in reversed(nodes):
        if n.op == "output" or is_write_back(n) or is_pure_view(a, n) or n.op in ("placeholder", "get_attr"):
            start -= 1
            continue
        break
    return start


def plan_stale_reads(a: AliasAnalysis) -> list[Fix]:
    """H1: the first write-back that reads an input after its own write-back, and how to restore the old value.

    Only the trailing epilogue of write-backs is considered: anywhere else a
    read after a write may be meant. One write-back is fixed per round (a
    reorder changes the positions the next decision depends on).
    """
    start = _epilogue_start(a)
    nodes = a.nodes
    write_backs = [n for n in nodes[start:] if is_write_back(n)]
    fixes: list[Fix] = []
    for n in write_backs:
        pos = a.position(n)
        stale: list[tuple[torch.fx.Node, torch.fx.Node]] = []  # (value read, the write-back it reads after)
        for x in reads_of(a, n):
            root = view_root(a, x)
            for w in write_backs:
                if a.position(w) >= pos:
                    break
                if root is w.args[0] and a.may_overlap(x, root):
                    stale.append((x, w))
                    break
        if not stale:
            continue
        first = min((w for _, w in stale), key=a.position)
        evidence = tuple(sorted({w.name for _, w in stale}))
        reorder = _plan_reorder(a, n, first, {x for x, _ in stale})
        if reorder is not None:
            return [Reorder(Hazard.STALE_INPUT_READ, n, first, reorder, evidence)]
        for x, w in stale:
            replay_from = None if a.position(x) < a.position(w) else view_root(a, x)
            fixes.append(CloneInput(Hazard.STALE_INPUT_READ, n, x, w, evidence, replay_from))
        return fixes
    return fixes


def _plan_reorder(
    a: AliasAnalysis, n: torch.fx.Node, first: torch.fx.Node, stale: set[torch.fx.Node]
) -> tuple[torch.fx.Node, ...] | None:
    """The views to move with write-back ``n`` before ``first``, or None when moving it changes another read."""
    lo, hi = a.position(first), a.position(n)
    between = a.nodes[lo:hi]
    dst = n.args[0]
    touching_dst = {acc.node for acc in a.accesses_overlapping(dst)}  # type: ignore[arg-type]
    if any(m in touching_dst for m in between):
        return None  # a node in between reads or writes what ``n`` writes
    for x in reads_of(a, n):
        if x in stale:
            continue
        if any(acc.node in between for acc in a.accesses_overlapping(x, "write")):
            return None  # ``n`` reads something written in between that it is meant to see
    moved: list[torch.fx.Node] = []
    todo = [x for x in n.all_input_nodes if a.position(x) >= lo]
    while todo:
        x = todo.pop()
        if x in moved:
            continue
        if not is_pure_view(a, x):
            return None
        moved.append(x)
        todo.extend(y for y in x.all_input_nodes if a.position(y) >= lo)
    return tuple(sorted(moved, key=a.position))


def guard_stale_reads(
    graph: torch.fx.Graph, *, donated_inputs: Iterable[int] = (), hazards: Collection[str] = ALL_HAZARDS
) -> GuardReport:
    """H1 on a functional post-grad graph (before anything adds in-place ops to it); mutates ``graph``.

    Never raises: a failure is reported in :attr:`GuardReport.error` and
    leaves the fixes done so far. Does nothing unless ``"H1"`` is in ``hazards``.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def swapped(a, b):
    ...     a.copy_(b)
    ...     b.copy_(a)
    >>> gm = make_fx(swapped, tracing_mode="fake")(torch.zeros(2), torch.ones(2))
    >>> first, second = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
    >>> second.replace_input_with(first, first.args[0])  # ``t = a.clone(); a.copy_(b); b.copy_(t)``, clone dropped
    >>> print(guard_stale_reads(gm.graph))
    fx-aliasing guard: 1 hazard(s) guarded (H1 clone at copy__1); 1 copy(ies), 8 B
      H1 stale-input-read: clone at copy__1, cloned clone_default; 8 B (evidence: copy_)
    """
    if "H1" not in hazards:
        return GuardReport()
    return guarded_rounds(
        graph, plan_stale_reads, relevant=_has_two_write_backs, donated_inputs=donated_inputs, max_rounds=8
    )


def _has_two_write_backs(graph: torch.fx.Graph) -> bool:
    return sum(1 for n in graph.find_nodes(op="call_function", target=aten.copy_.default) if is_write_back(n)) >= 2
