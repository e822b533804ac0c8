"""How the guard edits a graph, and what every stage reads from it.

The fixes of H1-H6 are decided first (:class:`CloneInput`, :class:`Reorder`)
against a fresh analysis, applied together by :func:`_apply` (the one place
planned fixes edit a graph), in rounds (:func:`guarded_rounds`) until a round
finds nothing, never raising. H7-H9 edit their graphs in their own stages,
with :func:`node_builder`. The readings the stages share (reads, write-backs,
tensor metadata) come after them; views are the analysis's
(:meth:`aliasing.AliasAnalysis.view_source`, ``view_root``, ``views_of``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from aliasing import AliasAnalysis, analyze
from aliasing.core.facts import known_equal, meta_value
from aliasing.core.ops import METADATA_READS
from aliasing.core.regions import Region
from rewrite.editing.nodes import Builder, LoweringSkip, fake_mode, recompile, replay, static_int, view_chain
from rewrite.inductor.hazards import Guarded, GuardReport, Hazard
from rewrite.lowering.copies import exact_copy

#: The one logger of every guard stage (the name the README documents).
log = logging.getLogger("rewrite.inductor.guard")

aten = torch.ops.aten


@dataclass(frozen=True)
class CloneInput:
    """Clone ``value`` before ``before`` and make ``user`` read the clone (replay: rebuild the view first)."""

    hazard: Hazard
    user: torch.fx.Node
    value: torch.fx.Node
    before: torch.fx.Node
    evidence: tuple[str, ...]
    replay_from: torch.fx.Node | None = None  # a view defined after ``before``: replay its chain on this root
    exact_layout: bool = False  # the copy's layout is observed (a result, a scatter's base): copy it exactly


@dataclass(frozen=True)
class Reorder:
    """Move ``node`` (with the views it needs, ``moved``) just before ``before``."""

    hazard: Hazard
    node: torch.fx.Node
    before: torch.fx.Node
    moved: tuple[torch.fx.Node, ...]
    evidence: tuple[str, ...]


#: A planned fix: a clone of what a node reads, or a reordering.
Fix = CloneInput | Reorder


def _apply(graph: torch.fx.Graph, fixes: Sequence[Fix]) -> tuple[list[Guarded], list[torch.fx.Node]]:
    """Apply the fixes (the one place the planned fixes mutate a graph); returns what was done and the copies made."""
    done: list[Guarded] = []
    copies: list[torch.fx.Node] = []
    b: Builder | None = None
    for fix in fixes:
        if isinstance(fix, Reorder):
            for n in (*fix.moved, fix.node):
                fix.before.prepend(n)
            done.append(Guarded(fix.hazard, fix.node.name, "reorder", tuple(n.name for n in (*fix.moved, fix.node)), 0, fix.evidence))
            continue
        if b is None:
            b = node_builder(graph)
        start = len(b.created)
        with graph.inserting_before(fix.before):
            source = fix.value
            if fix.replay_from is not None:
                found = view_chain(fix.value)
                if found is None:
                    raise LoweringSkip(f"{fix.value.name}: no view chain to replay")
                source = replay(b, found[1], fix.replay_from)
            c = value = None
            if fix.exact_layout:
                try:
                    cp = exact_copy(b, source)  # a flat prefix copy for a strided view, in its dtype
                    c, value = cp.clone, cp.value
                except LoweringSkip:
                    pass
            if c is None or value is None:
                c = value = b.call(aten.clone.default, (source,))
        fix.user.replace_input_with(fix.value, value)
        helpers = tuple(n.name for n in b.created[start:] if n is not c)
        done.append(Guarded(fix.hazard, fix.user.name, "clone", (c.name,), copy_nbytes(c), fix.evidence + helpers))
        copies.append(c)
    if fixes:
        graph.lint()
        recompile(graph)
    return done, copies


def guarded_rounds(
    graph: torch.fx.Graph,
    plan: Callable[[AliasAnalysis], list[Fix]],
    *,
    relevant: Callable[[torch.fx.Graph], bool],
    donated_inputs: Iterable[int],
    max_rounds: int,
) -> GuardReport:
    """Plan against a fresh analysis, apply, repeat until a round finds nothing (never raises).

    ``relevant`` is a cheap scan of the graph: without the nodes a hazard
    needs, no analysis is built at all.
    """
    done: list[Guarded] = []
    copies: list[torch.fx.Node] = []
    seen: set[tuple[Hazard, torch.fx.Node]] = set()
    donated = tuple(donated_inputs)
    try:
        for _ in range(max(1, max_rounds)):
            if not relevant(graph):
                break
            fixes = [f for f in plan(analyze(graph, donated_inputs=donated)) if (f.hazard, _where(f)) not in seen]
            if not fixes:
                break
            seen.update((f.hazard, _where(f)) for f in fixes)
            applied, made = _apply(graph, fixes)
            done.extend(applied)
            copies.extend(made)
    except Exception as e:  # never raise from a pass: keep what was done (each fix leaves a valid graph)
        log.warning("fx-aliasing guard stopped: %s: %s", type(e).__name__, e)
        return GuardReport(tuple(done), f"{type(e).__name__}: {e}", copies=tuple(copies))
    return GuardReport(tuple(done), copies=tuple(copies))


def _where(f: Fix) -> torch.fx.Node:
    return f.node if isinstance(f, Reorder) else f.user


def node_builder(graph: torch.fx.Graph) -> Builder:
    """The node builder the guard stages edit ``graph`` with (``LoweringSkip`` without one fake mode)."""
    mode = fake_mode(graph)
    if mode is None:
        raise LoweringSkip("the graph has no fake tensors of a single fake mode")
    return Builder(graph, mode)


# ---------------------------------------------------------------------------
# what the stages read: the graph's boundary, reads, write-backs, tensor metadata

def output_of(graph: torch.fx.Graph) -> torch.fx.Node | None:
    """The graph's output node (None if it has none)."""
    return next(iter(graph.find_nodes(op="output")), None)


def flat_args(out: torch.fx.Node | None) -> list[Any]:
    """The output node's flat list of returned values (nodes or constants)."""
    if out is None or not out.args:
        return []
    flat, _ = pytree.tree_flatten(out.args[0])
    return flat


def is_pre_existing(n: object) -> bool:
    """A graph input or constant: a ``placeholder`` or ``get_attr`` node."""
    return isinstance(n, torch.fx.Node) and n.op in ("placeholder", "get_attr")


def is_write_back(n: torch.fx.Node) -> bool:
    """``copy_(P, s)`` into a graph input or constant: a functionalization write-back."""
    return (
        n.op == "call_function"
        and n.target is aten.copy_.default
        and len(n.args) >= 2
        and is_pre_existing(n.args[0])
        and isinstance(n.args[1], torch.fx.Node)
    )


def reads_of(a: AliasAnalysis, n: torch.fx.Node) -> tuple[torch.fx.Node, ...]:
    """The values ``n`` reads the data of (the output node reads what it returns)."""
    if n.op == "output":
        return tuple(x for x in n.all_input_nodes)
    e = a.effect_of(n)
    if e is None:
        return ()
    return e.reaches if e.unknown else e.reads


def meta_only_use(u: torch.fx.Node, a: AliasAnalysis) -> bool:
    """``u`` reads only metadata (sizes, strides, numel, offset), directly or through pure views."""
    if u.target in METADATA_READS:
        return True
    if u.op == "call_function" and a.view_source(u) is not None:
        return all(meta_only_use(w, a) for w in u.users)
    return False


def strided_tensor(n: torch.fx.Node) -> torch.Tensor | None:
    """``n``'s value (its ``meta['val']``) when it is a strided tensor, else None."""
    v = meta_value(n)
    return v if isinstance(v, torch.Tensor) and v.layout == torch.strided else None


def copy_nbytes(n: torch.fx.Node) -> int | None:
    """Bytes a dense copy of ``n``'s value allocates (None when symbolic or unknown)."""
    t = strided_tensor(n)
    if t is None:
        return None
    numel = static_int(t.numel())
    return None if numel is None else numel * t.element_size()


def region_of_value(t: torch.Tensor) -> Region:
    """The storage region ``t`` covers: its offset, sizes, strides and element size."""
    return Region(t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.element_size())


def same_layout(t: torch.Tensor, u: torch.Tensor) -> bool:
    """Equal dtype, sizes, strides and storage offset (symbolic ones only where known equal)."""
    return (
        t.dtype == u.dtype
        and t.dim() == u.dim()
        and all(known_equal(p, q) for p, q in zip(t.shape, u.shape))
        and all(known_equal(p, q) for p, q in zip(t.stride(), u.stride()))
        and known_equal(t.storage_offset(), u.storage_offset())
    )
