"""H7 and H8 on the joint graph (``joint_custom_pre_pass``): offset-changing clones and collapsed outputs."""

from __future__ import annotations

import operator
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from aliasing.core.facts import known_equal, meta_value, storage_identity
from aliasing.core.ops import DISTINCT_VIEW
from rewrite.editing.nodes import Builder, recompile, static_int, view_chain
from rewrite.inductor.fixes import (
    copy_nbytes,
    flat_args,
    is_pre_existing,
    log,
    node_builder,
    output_of,
    same_layout,
    strided_tensor,
)
from rewrite.inductor.hazards import ALL_HAZARDS, Guarded, GuardReport, Hazard, OutputRoles

__all__ = [
    "CollapsedOutput",
    "guard_collapsed_outputs",
    "guard_joint_graph",
    "plan_collapsed_outputs",
    "plan_offset_clones",
]

aten = torch.ops.aten


# ---------------------------------------------------------------------------
# H7: offset-changing clones, before remove_noop_ops

def _observes_layout(u: torch.fx.Node) -> bool:
    """An op that may observe a tensor's storage offset: anything but ATen and prims compute."""
    if u.op != "call_function" or u.target is operator.getitem:
        return False
    t = u.target
    if isinstance(t, torch._ops.OpOverload):
        return t.namespace not in ("aten", "prims") or t is aten.sym_storage_offset.default
    return True  # higher-order ops (auto_functionalized wraps the custom op) and Python callables


def _layout_args(b: Builder, v: torch.fx.Node, t: torch.Tensor) -> tuple[list[Any], list[Any], Any]:
    """Sizes, strides and offset of ``v`` as as_strided arguments (symbolic ones read from ``v``)."""
    sizes: list[Any] = []
    strides: list[Any] = []
    for d, (s, st) in enumerate(zip(t.shape, t.stride())):
        sizes.append(s if static_int(s) is not None else b.call(aten.sym_size.int, (v, d)))
        strides.append(st if static_int(st) is not None else b.call(aten.sym_stride.int, (v, d)))
    off = t.storage_offset()
    offset = off if static_int(off) is not None else b.call(aten.sym_storage_offset.default, (v,))
    return sizes, strides, offset


def plan_offset_clones(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """H7: clones ``remove_noop_ops`` would drop although their storage offset differs and an opaque op reads them."""
    inputs = {storage_identity(meta_value(n)) for n in graph.nodes if n.op == "placeholder"}
    out_node = next((n for n in graph.nodes if n.op == "output"), None)
    outputs = {storage_identity(meta_value(x)) for x in (out_node.all_input_nodes if out_node is not None else [])}
    found: list[torch.fx.Node] = []
    for c in graph.nodes:
        if c.op != "call_function" or c.target is not aten.clone.default or len(c.args) != 1:
            continue
        v = c.args[0]
        if not isinstance(v, torch.fx.Node):
            continue
        ct, vt = strided_tensor(c), strided_tensor(v)
        if ct is None or vt is None:
            continue
        same_meta = (
            ct.dtype == vt.dtype
            and ct.device == vt.device
            and ct.is_conj() == vt.is_conj()
            and ct.is_neg() == vt.is_neg()
            and len(ct.shape) == len(vt.shape)
            and all(known_equal(p, q) for p, q in zip(ct.shape, vt.shape))
            and all(known_equal(p, q) for p, q in zip(ct.stride(), vt.stride()))
        )
        if not same_meta or known_equal(ct.storage_offset(), vt.storage_offset()):
            continue
        cs, vs = storage_identity(ct), storage_identity(vt)
        if cs in outputs and (vs in inputs or vs in outputs):
            continue  # remove_noop_ops keeps it (no new input/output aliasing)
        if _reaches_observer(c):
            found.append(c)
    return found


def _reaches_observer(c: torch.fx.Node) -> bool:
    todo, seen = [c], {c}
    while todo:
        v = todo.pop()
        for u in v.users:
            if _observes_layout(u):
                return True
            if u.op == "call_function" and isinstance(u.target, torch._ops.OpOverload) and u.target.is_view and u not in seen:
                seen.add(u)
                todo.append(u)
    return False


def guard_joint_graph(
    graph: torch.fx.Graph, *, hazards: Collection[str] = ALL_HAZARDS, outputs: OutputRoles | None = None
) -> GuardReport:
    """H7 and H8 on the joint graph (``joint_custom_pre_pass``, before ``remove_noop_ops``); mutates ``graph``.

    Only the classes in ``hazards`` are looked for. H7: each protected clone
    becomes ``aten.as_strided_copy`` of its source with the source's own
    sizes, strides and offset: the same copy, with the same layout, under a
    name the no-op removal does not drop. H8 (:func:`guard_collapsed_outputs`):
    each returned value Inductor would return as the same object as another
    becomes a distinct view of it; ``outputs`` says which outputs the caller
    receives as they are (all of them by default). Never raises.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> @torch.library.custom_op("guard_doc::offset", mutates_args=())
    ... def offset(x: torch.Tensor) -> torch.Tensor:
    ...     return torch.tensor(x.storage_offset())
    >>> @offset.register_fake
    ... def _(x):
    ...     return torch.empty((), dtype=torch.int64)
    >>> gm = make_fx(lambda x: offset(x[1:].clone()), tracing_mode="fake")(torch.arange(8.0))
    >>> print(guard_joint_graph(gm.graph))
    fx-aliasing guard: 1 hazard(s) guarded (H7 clone at clone); 1 copy(ies), 28 B
      H7 offset-changing-clone-dropped: clone at clone, cloned as_strided_copy_default; 28 B (evidence: offset)
    """
    report = _guard_offset_clones(graph) if "H7" in hazards else GuardReport()
    if "H8" in hazards:
        report = report.merged(guard_collapsed_outputs(graph, outputs))
    return report


def _guard_offset_clones(graph: torch.fx.Graph) -> GuardReport:
    done: list[Guarded] = []
    try:
        clones = plan_offset_clones(graph)
        if not clones:
            return GuardReport()
        b = node_builder(graph)
        for c in clones:
            v = c.args[0]
            assert isinstance(v, torch.fx.Node)  # checked by plan_offset_clones
            vt, ct = strided_tensor(v), strided_tensor(c)
            if vt is None or ct is None:
                continue
            start = len(b.created)
            with graph.inserting_before(c):
                sizes, strides, offset = _layout_args(b, v, vt)
                copy = b.call(aten.as_strided_copy.default, (v, sizes, strides, offset))
            nt = strided_tensor(copy)
            if nt is None or not (
                all(known_equal(p, q) for p, q in zip(nt.stride(), ct.stride())) and known_equal(nt.storage_offset(), 0)
            ):
                for n in reversed(b.created[start:]):
                    graph.erase_node(n)
                del b.created[start:]
                log.debug("offset-changing clone %s kept as it is: as_strided_copy would change its layout", c.name)
                continue
            readers = tuple(u.name for u in c.users if _observes_layout(u))
            c.replace_all_uses_with(copy)
            graph.erase_node(c)
            done.append(Guarded(Hazard.OFFSET_CLONE_DROPPED, c.name, "clone", (copy.name,), copy_nbytes(copy), readers))
        graph.lint()
        recompile(graph)
    except Exception as e:
        log.warning("fx-aliasing joint-graph guard stopped: %s: %s", type(e).__name__, e)
        return GuardReport(tuple(done), f"{type(e).__name__}: {e}")
    return GuardReport(tuple(done))


# ---------------------------------------------------------------------------
# H8: the returned values, before remove_noop_ops and pointless_view

@dataclass(frozen=True)
class CollapsedOutput:
    """A returned ``value`` Inductor would return as the very object it returns for ``kept``, at ``positions``."""

    value: torch.fx.Node
    kept: torch.fx.Node
    positions: tuple[int, ...]


def plan_collapsed_outputs(graph: torch.fx.Graph, outputs: OutputRoles | None = None) -> list[CollapsedOutput]:
    """H8: distinct returned values Inductor returns as one tensor object.

    Inductor returns a value whose layout (dtype, sizes, strides, offset) is
    its storage root's as the root's buffer itself: its joint-graph passes
    drop no-op views (``remove_noop_ops``: ``alias`` (a ``detach``), full
    slices; ``pointless_view``: a ``view`` to the same sizes), and its
    wrapper code returns any view of a buffer with the buffer's layout as the
    buffer (``PythonWrapperCodegen.codegen_reinterpret_view``). Two such
    returned values of one storage become one object, where eager returns two
    that share the storage: a later ``resize_`` (or any metadata change) of
    one changes the other. Only the outputs the caller receives as they are
    count (``outputs``; every one by default); values of an input's storage
    are the runtime's (it regenerates every output that aliases an input).
    The first such value of a storage keeps its place (its root, if it is
    returned).
    """
    out = output_of(graph)
    flat = flat_args(out)
    returned = range(len(flat)) if outputs is None else sorted(i for i in outputs.returned if i < len(flat))
    inputs = {storage_identity(meta_value(n)) for n in graph.nodes if is_pre_existing(n)}
    groups: dict[int, list[torch.fx.Node]] = {}
    roots: dict[int, torch.fx.Node] = {}
    for i in returned:
        x = flat[i]
        if not isinstance(x, torch.fx.Node):
            continue
        t = strided_tensor(x)
        key = storage_identity(t)
        if t is None or key is None or key in inputs:
            continue
        found = view_chain(x)
        root = found[0] if found is not None else x
        rt = strided_tensor(root)
        if rt is None or storage_identity(rt) != key or not same_layout(t, rt):
            continue  # returned as a reinterpret_tensor of the root's buffer: an object of its own
        members = groups.setdefault(key, [])
        roots[key] = root
        if x not in members:
            members.append(x)
    found_: list[CollapsedOutput] = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        kept = roots[key] if roots[key] in members else members[0]
        for x in members:
            if x is not kept:
                found_.append(CollapsedOutput(x, kept, tuple(i for i in returned if flat[i] is x)))
    return found_


def guard_collapsed_outputs(graph: torch.fx.Graph, outputs: OutputRoles | None = None) -> GuardReport:
    """H8 on the joint graph: return a distinct view (``aten.view_as(v, v)``) for each :func:`plan_collapsed_outputs` value.

    The view shares the storage and has the value's layout, so the caller
    gets what eager gives it: distinct tensor objects over one storage, at no
    copy. Inductor has no lowering for ``view_as`` and calls it as an
    (implicit) fallback kernel, which returns an object of its own. Mutates
    ``graph``; never raises.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def f(x):  # pytorch/pytorch#191449: ``alias.resize_(12)`` follows, after a graph break
    ...     base = x + 1
    ...     return base, base.view(-1)
    >>> gm = make_fx(f, tracing_mode="fake")(torch.zeros(1))
    >>> print(guard_collapsed_outputs(gm.graph))
    fx-aliasing guard: 1 hazard(s) guarded (H8 view at view); 0 copy(ies), 0 B
      H8 distinct-outputs-returned-as-one-object: view at view, returned view_as_default; 0 B (evidence: add)
    """
    done: list[Guarded] = []
    try:
        plans = plan_collapsed_outputs(graph, outputs)
        out = output_of(graph)
        if not plans or out is None:
            return GuardReport()
        b = node_builder(graph)
        flat, spec = pytree.tree_flatten(out.args[0])
        for c in plans:
            with graph.inserting_before(out):
                distinct = b.call(DISTINCT_VIEW, (c.value, c.value))
            for i in c.positions:
                flat[i] = distinct
            done.append(Guarded(Hazard.OUTPUTS_COLLAPSED, c.value.name, "view", (distinct.name,), 0, (c.kept.name,)))
        out.args = (pytree.tree_unflatten(flat, spec), *out.args[1:])
        graph.lint()
        recompile(graph)
    except Exception as e:
        log.warning("fx-aliasing output-identity guard stopped: %s: %s", type(e).__name__, e)
        return GuardReport(tuple(done), f"{type(e).__name__}: {e}")
    return GuardReport(tuple(done))
