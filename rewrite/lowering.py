"""Lower functional higher-order ops into clones plus in-place calls, then fold copy-backs.

A functionalized graph (what torch.compile's post-grad passes, ``torch.export``
and vLLM's pass managers see) hides every mutation of a custom op or a user
Triton kernel inside a functional wrapper that copies the mutated arguments:

- ``auto_functionalized(op, **kwargs)``: clones each mutated argument, runs the
  mutable ``op`` on the clones, returns ``(*op outputs, *new values)``;
- ``auto_functionalized_v2(op, _all_bases=[...], _x_base_index=i, view info...)``:
  clones each *base* of the mutated arguments, regenerates the argument views
  on the clones (``as_strided``/``slice``/``alias`` from the recorded view
  information), runs ``op``, returns ``(*op outputs, *new bases)``;
- ``triton_kernel_wrapper_functional(..., kwargs, tensors_to_clone)``: clones the
  named kernel arguments, runs the kernel, returns ``{name: new value}``.

:func:`lower_functional_ops` makes those copies explicit: each wrapper becomes
``aten.clone`` of what it would copy, the in-place call (the op's mutable
overload, ``triton_kernel_wrapper_mutation``) on the clones, and the wrapper's
``getitem`` users rewired to the clones and op outputs. Clones keep the exact
layout of what they copy (the graph's fake tensors say the new values have it):
a value that is dense with storage offset 0 is copied with a plain
``aten.clone``; any other value (a strided ``q`` out of a fused ``qkv``, a row
of a KV pool at a non-zero offset) is copied the way the wrapper itself copies
it (``clone_preserve_strides``): ``clone`` of the flat storage prefix
``as_strided(x, (n,), (1,), 0)`` and ``as_strided`` of the result with ``x``'s
sizes, strides and offset. Views of a v2 base are regenerated on the clone of
the base, re-based on its true storage (offsets are absolute in both). In
version-1 graphs the new values of mutated views are written back into their
base with ``*_scatter`` ops; those are lowered too (``clone`` of the base plus
an in-place ``copy_`` into the view), so that the scatter's copy is a clone
the later steps can judge.

Nothing is removed by the lowering: the graph is rewritten in place (new nodes
get a ``meta['val']`` computed under the graph's fake mode; existing nodes'
metadata is never touched) and computes exactly what it computed before. The
clones then go to sound clone elimination (:mod:`rewrite.planner`,
conditions C1-C7) and to :func:`fold_copy_backs`, which judges clones by the
*regions they write* rather than by their original's whole region, and handles
the pattern elimination must refuse: a clone that is written and then copied
back into its original, ``c = clone(o); op_(c); copy_(o', c')`` (a graph
input's ``copy_`` epilogue, a scatter write-back). Clone ``c`` may be replaced
by ``o`` ("folded") when (numbered as cited in the code):

F1 layout: ``c`` and ``o`` agree on dtype, device, sizes, strides, storage offset
   and conj/neg bits, so a byte of ``c``'s storage and the same byte offset of
   ``o``'s storage hold the same element (a clone's storage is exactly its
   dense region);
F2 either the first write of ``o``'s storage after ``c`` that copies from ``c``'s
   storage is ``E = copy_(d, s)`` with ``d`` in ``o``'s storage, ``s`` in ``c``'s,
   identical regions and dtypes (``E`` then becomes a self-copy; the *written
   region* below is ``d``), or there is no such copy-back and ``o``'s storage is
   not caller-visible (an intermediate or a donated input; the written regions
   are those of ``c``'s writes);
F3 with a copy-back, every write of ``c``'s storage happens before ``E`` and
   inside ``s``'s region;
F4 no read of ``o``'s storage overlapping a written region happens from the
   first write of ``c`` on (up to ``E``): it would see the new values early.
   This includes a node that writes ``c`` and reads ``o``
   (pytorch/pytorch#198031);
F5 no write of ``o``'s storage after ``c`` (up to ``E``) overlaps a written
   region or a region of ``c`` that is read;
F6 with a copy-back, reads of ``c`` after ``E`` see no later write of ``o``'s
   storage that overlaps them;
F7 ``c`` (or an alias) is not returned (the output would then share memory
   with ``o``);
F8 the storages are exactly known and no opaque op touches ``c``.

After a fold ``E`` copies a region onto itself: :func:`drop_self_copies`
removes ``copy_(d, s)`` whose two arguments provably are the same memory with
the same layout. :func:`lower_and_eliminate` chains the four steps to a fixed
point; it is what :class:`rewrite.inductor.CloneEliminationPass` runs. This
module does not import ``torch._inductor``.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> from torch._higher_order_ops.auto_functionalize import auto_functionalized_v2
>>> @torch.library.custom_op("lowering_doc::bump_", mutates_args=("x",))
... def bump_(x: torch.Tensor) -> None:
...     x.add_(1)
>>> def f(x):  # what functionalization makes of ``bump_(x[1]); return x.sum()``
...     out = auto_functionalized_v2(torch.ops.lowering_doc.bump_.default, _x_base_index=0,
...                                  _x_size=(3,), _x_stride=(1,), _x_storage_offset=3, _all_bases=[x])
...     x.copy_(out[1])
...     return x.sum()
>>> gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 3))
>>> report = lower_and_eliminate(gm.graph)
>>> report.lowering.clones, report.removed, report.dropped_copies
(('clone_default',), ('clone_default',), ('copy_',))
>>> [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]  # bump_ writes x[1] in place
['aten.as_strided.default', 'lowering_doc.bump_.default', 'aten.sum.default']
"""

from __future__ import annotations

import enum
import logging
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import torch
import torch.fx
from torch.utils import _pytree as pytree

from aliasing import Access, AliasAnalysis, Region, analyze, regions_may_overlap
from aliasing.analysis import UNKNOWN_STORAGE
from aliasing.facts import TensorFacts, has_meta, meta_value, same_layout
from aliasing.roles import CALLER_VISIBLE
from rewrite.apply import apply_decisions
from rewrite.decisions import CloneEliminationReport, Decision, Reason
from rewrite.planner import is_clone_candidate, plan_clone_elimination

__all__ = [
    "CopyBackDecision",
    "CopyBackReason",
    "Lowered",
    "LoweringReport",
    "PipelineReport",
    "Skipped",
    "drop_self_copies",
    "fold_copy_backs",
    "lower_and_eliminate",
    "lower_functional_ops",
    "plan_copy_back",
]

log = logging.getLogger(__name__)

aten = torch.ops.aten
Kind = Literal[
    "auto_functionalized", "auto_functionalized_v2", "triton_kernel_wrapper_functional", "scatter"
]

#: Scatter ops (version-1 write-backs) and the view each one writes through.
_SCATTER_VIEWS: dict[Any, Any] = {
    aten.slice_scatter.default: aten.slice.Tensor,
    aten.select_scatter.default: aten.select.int,
    aten.diagonal_scatter.default: aten.diagonal.default,
    aten.as_strided_scatter.default: aten.as_strided.default,
}


# ---------------------------------------------------------------------------
# reports


@dataclass(frozen=True)
class Lowered:
    """One wrapper node that was lowered: the clones it now makes and its in-place call."""

    node: str
    kind: Kind
    clones: tuple[str, ...]
    call: str


@dataclass(frozen=True)
class Skipped:
    """One wrapper node left as it was, with the reason (the later passes handle it as before)."""

    node: str
    kind: Kind
    reason: str


@dataclass(frozen=True)
class LoweringReport:
    """What :func:`lower_functional_ops` did to a graph."""

    lowered: tuple[Lowered, ...] = ()
    skipped: tuple[Skipped, ...] = ()

    @property
    def clones(self) -> tuple[str, ...]:
        """Names of every clone the lowering created."""
        return tuple(c for low in self.lowered for c in low.clones)

    def __str__(self) -> str:
        lines = [f"lowered {len(self.lowered)} functional op(s), skipped {len(self.skipped)}"]
        for low in self.lowered:
            lines.append(f"  {low.node} ({low.kind}) -> {low.call}; clones: {', '.join(low.clones) or '-'}")
        for sk in self.skipped:
            lines.append(f"  {sk.node} ({sk.kind}) skipped: {sk.reason}")
        return "\n".join(lines)


class CopyBackReason(str, enum.Enum):
    """Why a clone was folded into its original or kept (conditions F1-F8 of the module docstring)."""

    FOLDABLE = "clone-copied-back"
    UNOBSERVED = "clone-writes-unobserved"
    LAYOUT = "layout"
    UNKNOWN_STORAGE = "unknown-storage"
    OPAQUE_USE = "opaque-op-touches-clone"
    NO_COPY_BACK = "no-copy-back"
    REGION_MISMATCH = "copy-back-region-differs"
    WRITE_OUTSIDE = "clone-written-outside-copied-region"
    WRITE_AFTER_COPY_BACK = "clone-written-after-copy-back"
    ORIGINAL_READ = "original-read-after-clone-written"
    ORIGINAL_WRITTEN = "original-written-before-copy-back"
    LATE_READ = "clone-read-after-original-rewritten"
    OUTPUT_ALIASING = "clone-returned"

    def __str__(self) -> str:
        return self.value

    @property
    def condition(self) -> str:
        """The numbered condition (F1-F8) this reason enforces ("" for none)."""
        return _COPY_BACK_CONDITION.get(self, "")


_COPY_BACK_CONDITION = {
    CopyBackReason.LAYOUT: "F1",
    CopyBackReason.NO_COPY_BACK: "F2",
    CopyBackReason.REGION_MISMATCH: "F2",
    CopyBackReason.WRITE_OUTSIDE: "F3",
    CopyBackReason.WRITE_AFTER_COPY_BACK: "F3",
    CopyBackReason.ORIGINAL_READ: "F4",
    CopyBackReason.ORIGINAL_WRITTEN: "F5",
    CopyBackReason.LATE_READ: "F6",
    CopyBackReason.OUTPUT_ALIASING: "F7",
    CopyBackReason.UNKNOWN_STORAGE: "F8",
    CopyBackReason.OPAQUE_USE: "F8",
}


@dataclass(frozen=True)
class CopyBackDecision:
    """Fold (``"fold"``: replace the clone by its original) or keep one clone; ``copy_back`` names ``E``."""

    node: str
    action: Literal["fold", "keep"]
    reason: CopyBackReason
    evidence: tuple[str, ...] = ()
    original: str = ""
    copy_back: str = ""

    def __str__(self) -> str:
        cond = f"{self.reason.condition} " if self.reason.condition else ""
        ev = f" [{', '.join(self.evidence)}]" if self.evidence else ""
        return f"{self.node} ({self.original}): {self.action} {cond}{self.reason}{ev}"


@dataclass(frozen=True)
class PipelineReport:
    """Everything :func:`lower_and_eliminate` did: lowering, each elimination round, folds, dropped copies."""

    lowering: LoweringReport = field(default_factory=LoweringReport)
    eliminations: tuple[CloneEliminationReport, ...] = ()
    folds: tuple[CopyBackDecision, ...] = ()
    dropped_copies: tuple[str, ...] = ()
    error: Optional[str] = None

    @property
    def removed(self) -> tuple[str, ...]:
        """Clones removed by elimination or folded into their original."""
        out = [n for rep in self.eliminations for n in rep.removed]
        out += [d.node for d in self.folds if d.action == "fold"]
        return tuple(out)

    @property
    def kept(self) -> tuple[str, ...]:
        """Clones still in the graph (kept by the last elimination round and not folded)."""
        if not self.eliminations:
            return ()
        gone = set(self.removed)
        return tuple(n for n in self.eliminations[-1].kept if n not in gone)

    def summary(self) -> str:
        """One line: counts of lowered ops, removed and kept clones, dropped copies."""
        low = self.lowering
        text = (
            f"fx-aliasing: lowered {len(low.lowered)} functional op(s) ({len(low.skipped)} skipped), "
            f"{len(low.clones)} clone(s) created; removed {len(self.removed)} clone(s), kept {len(self.kept)}; "
            f"dropped {len(self.dropped_copies)} self-copy(ies)"
        )
        if self.error:
            text += f"; error: {self.error}"
        return text

    def __str__(self) -> str:
        parts = [self.summary(), str(self.lowering)]
        for i, rep in enumerate(self.eliminations):
            parts.append(f"clone elimination, round {i + 1}:\n{rep}")
        if self.folds:
            parts.append("copy-back folds:\n" + "\n".join(f"  {d}" for d in self.folds))
        if self.dropped_copies:
            parts.append("dropped self-copies: " + ", ".join(self.dropped_copies))
        return "\n".join(parts)


# ---------------------------------------------------------------------------
# building nodes with fake values


class _Skip(Exception):
    """A wrapper node the lowering leaves alone (with the reason)."""


def _static_int(v: object) -> Optional[int]:
    """The value of an int, or of a SymInt that is a known constant; None otherwise."""
    if type(v) is int:
        return v
    if isinstance(v, torch.SymInt):
        try:
            value = v.node.maybe_as_int()
        except Exception:
            return None
        return int(value) if value is not None else None
    return None


def _known_eq(a: object, b: object) -> bool:
    if type(a) is int and type(b) is int:
        return a == b
    try:
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        return bool(statically_known_true(a == b))  # type: ignore[arg-type,operator]
    except Exception:
        return False


def _val(node: torch.fx.Node) -> Any:
    return meta_value(node)


_COMPUTE: Any = object()
#: Replacement key for "the wrapper's value itself" (not one of its getitems).
_SELF: Any = object()


class _Builder:
    """Creates nodes before a given node, each with a ``meta['val']`` computed under the fake mode."""

    def __init__(self, graph: torch.fx.Graph, mode: Any) -> None:
        self.graph = graph
        self.mode = mode
        self.created: list[torch.fx.Node] = []

    def fake(self, obj: Any) -> Any:
        def one(x: Any) -> Any:
            if isinstance(x, torch.fx.Node):
                if not has_meta(x):
                    raise _Skip(f"argument {x.name} has no meta['val']")
                return meta_value(x)
            return x

        return pytree.tree_map(one, obj)

    def call(
        self, target: Any, args: tuple[Any, ...], kwargs: Optional[dict[str, Any]] = None, *, val: Any = _COMPUTE
    ) -> torch.fx.Node:
        """A new ``call_function`` node; its fake value is ``val``, or computed by running ``target``."""
        kwargs = kwargs or {}
        if val is _COMPUTE:
            fargs, fkwargs = self.fake((args, kwargs))
            with self.mode:
                val = target(*fargs, **fkwargs)
        node = self.graph.call_function(target, args, kwargs)
        node.meta["val"] = val  # a node this module creates: setting its metadata is allowed
        self.created.append(node)
        return node


def _fake_mode(graph: torch.fx.Graph) -> Any:
    from torch._guards import detect_fake_mode

    vals = []
    for n in graph.nodes:
        v = meta_value(n)
        if isinstance(v, torch.Tensor):
            vals.append(v)
        elif isinstance(v, (list, tuple)):
            vals.extend(x for x in v if isinstance(x, torch.Tensor))
        if len(vals) > 16:
            break
    mode = detect_fake_mode(vals) if vals else None
    return mode


@dataclass
class _Copy:
    """A copy of a value with its exact layout: ``clone`` is the aten.clone node, ``value`` the copy."""

    clone: torch.fx.Node
    value: torch.fx.Node
    flat: bool  #: True when the clone copies more than the value (its storage prefix or root); ``value`` is a view of it


def _copy_preserving(b: _Builder, x: torch.fx.Node) -> _Copy:
    """``clone(x)`` when that keeps x's layout; else the flat-prefix copy (clone_preserve_strides)."""
    xv = _val(x)
    if not isinstance(xv, torch.Tensor) or xv.layout != torch.strided:
        raise _Skip(f"{x.name} is not a strided tensor with metadata")
    if xv.is_conj() or xv.is_neg():
        raise _Skip(f"{x.name} has the conj/neg bit set")
    if _known_eq(xv.storage_offset(), 0):
        with b.mode:
            cv = torch.ops.aten.clone.default(xv)
        if len(cv.stride()) == len(xv.stride()) and all(_known_eq(s, t) for s, t in zip(cv.stride(), xv.stride())):
            c = b.call(aten.clone.default, (x,), val=cv)
            return _Copy(c, c, False)
    sizes = [_static_int(s) for s in xv.size()]
    strides = [_static_int(s) for s in xv.stride()]
    offset = _static_int(xv.storage_offset())
    if any(s is None for s in sizes) or any(s is None for s in strides) or offset is None:
        replayed = _copy_root_and_replay(b, x)
        if replayed is None:
            raise _Skip(f"{x.name} has a symbolic layout that a plain clone does not preserve")
        return replayed
    if any(s < 0 for s in strides):  # type: ignore[operator]
        raise _Skip(f"{x.name} has a negative stride")
    from torch._prims_common import compute_required_storage_length

    needed = int(compute_required_storage_length(sizes, strides, offset))  # type: ignore[arg-type]
    flat = b.call(aten.as_strided.default, (_storage_root(x), [needed], [1], 0))
    c = b.call(aten.clone.default, (flat,))
    value = b.call(aten.as_strided.default, (c, list(sizes), list(strides), offset))
    return _Copy(c, value, True)


def _is_view_of_first_arg(node: torch.fx.Node) -> bool:
    """True for a non-mutating op whose (first) output aliases its first argument (a view)."""
    op = node.target
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) or not node.args:
        return False
    from torch.utils._python_dispatch import get_alias_info

    try:
        info = get_alias_info(op)
    except Exception:
        return False
    if not info.args or not info.outs or any(a.is_write for a in info.args):
        return False
    return bool(set(info.args[0].alias_set) & set(info.outs[0].alias_set))


def _storage_root(x: torch.fx.Node) -> torch.fx.Node:
    """The value at the top of ``x``'s chain of views that provably shares ``x``'s (fake) storage.

    ``as_strided`` offsets are absolute in the storage, so ``as_strided(root, ...)``
    and ``as_strided(x, ...)`` mean the same; Inductor lowers the former reliably
    (an ``as_strided`` of a slice of an unrealized intermediate loses the slice's
    offset, a wrong-result bug this module must not trigger).
    """
    key = _storage_key(_val(x))
    node = x
    while True:
        parent: Optional[torch.fx.Node] = None
        if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            src = node.args[0]
            if _is_view_of_first_arg(src) and isinstance(src.args[0], torch.fx.Node):
                parent = src.args[0]
        elif _is_view_of_first_arg(node) and isinstance(node.args[0], torch.fx.Node):
            parent = node.args[0]
        if parent is None or key is None or _storage_key(_val(parent)) != key:
            return node
        node = parent


def _view_chain(x: torch.fx.Node) -> Optional[tuple[torch.fx.Node, list[torch.fx.Node]]]:
    """``(root, chain)``: the view ops (getitem nodes for multi-output views) from ``root`` down to ``x``."""
    chain: list[torch.fx.Node] = []
    node = x
    while True:
        if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            src = node.args[0]
            if not (_is_view_of_first_arg(src) and isinstance(src.args[0], torch.fx.Node)):
                break
            chain.append(node)
            node = src.args[0]
        elif _is_view_of_first_arg(node) and isinstance(node.args[0], torch.fx.Node):
            chain.append(node)
            node = node.args[0]
        else:
            break
    return (node, chain) if chain else None


def _replay(b: _Builder, chain: list[torch.fx.Node], start: torch.fx.Node) -> torch.fx.Node:
    """Apply the view ops of ``chain`` (innermost last) to ``start``."""
    current = start
    for step in reversed(chain):
        if step.target is operator.getitem:
            src = step.args[0]
            if not isinstance(src, torch.fx.Node):
                raise _Skip(f"{step.name}: unexpected view structure")
            multi = b.call(src.target, (current, *src.args[1:]), dict(src.kwargs))
            current = b.call(operator.getitem, (multi, step.args[1]), val=_val(multi)[step.args[1]])
        else:
            current = b.call(step.target, (current, *step.args[1:]), dict(step.kwargs))
    return current


def _copy_root_and_replay(b: _Builder, x: torch.fx.Node) -> Optional[_Copy]:
    """Copy ``x``'s storage root (dense, offset 0) and replay the views that made ``x`` on the copy."""
    found = _view_chain(x)
    if found is None:
        return None
    root, chain = found
    rv, xv = _val(root), _val(x)
    if not isinstance(rv, torch.Tensor) or _storage_key(rv) != _storage_key(xv) or not _known_eq(rv.storage_offset(), 0):
        return None
    with b.mode:
        cv = torch.ops.aten.clone.default(rv)
    if len(cv.stride()) != len(rv.stride()) or not all(_known_eq(p, q) for p, q in zip(cv.stride(), rv.stride())):
        return None
    c = b.call(aten.clone.default, (root,), val=cv)
    return _Copy(c, _replay(b, chain, c), True)


def _op_call_args(op: torch._ops.OpOverload, kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Positional and keyword arguments for ``op`` from a name -> value mapping (schema order)."""
    args: list[Any] = []
    kw: dict[str, Any] = {}
    for a in op._schema.arguments:
        if a.name in kwargs:
            value = kwargs[a.name]
        elif a.has_default_value():
            value = a.default_value
        else:
            raise _Skip(f"argument {a.name!r} of {op} is missing")
        if a.kwarg_only:
            kw[a.name] = value
        else:
            args.append(value)
    extra = set(kwargs) - {a.name for a in op._schema.arguments}
    if extra:
        raise _Skip(f"unexpected arguments {sorted(extra)} for {op}")
    return tuple(args), kw


def _getitem_users(node: torch.fx.Node) -> dict[object, list[torch.fx.Node]]:
    users: dict[object, list[torch.fx.Node]] = {}
    for u in node.users:
        if u.op != "call_function" or u.target is not operator.getitem or u.args[0] is not node:
            raise _Skip(f"{u.name} uses the wrapper's result other than through getitem")
        users.setdefault(u.args[1], []).append(u)
    return users


def _emit_op(b: _Builder, op: torch._ops.OpOverload, kwargs: dict[str, Any]) -> torch.fx.Node:
    args, kw = _op_call_args(op, kwargs)
    return b.call(op, args, kw)


def _output_replacements(
    b: _Builder, op: torch._ops.OpOverload, call: torch.fx.Node, users: dict[object, list[torch.fx.Node]]
) -> tuple[dict[object, torch.fx.Node], int]:
    """Replacements for the getitems of the op's own outputs; returns them and the index of the first new value."""
    n_returns = len(op._schema.returns)
    first = max(n_returns, 1)
    repl: dict[object, torch.fx.Node] = {}
    for idx in users:
        if not isinstance(idx, int):
            raise _Skip(f"non-integer getitem index {idx!r}")
        if idx < first:
            if n_returns == 0:
                if any(g.users for g in users[idx]):
                    raise _Skip("the op returns nothing but its result is used")
                continue  # an unused getitem of None: erased with the wrapper
            if n_returns == 1:
                repl[idx] = call
            else:
                val = _val(call)
                repl[idx] = b.call(operator.getitem, (call, idx), val=val[idx] if isinstance(val, (list, tuple)) else None)
    return repl, first


def _lower_v1(b: _Builder, node: torch.fx.Node) -> tuple[list[torch.fx.Node], torch.fx.Node, dict[object, torch.fx.Node]]:
    from torch._higher_order_ops.auto_functionalize import get_mutable_args

    op = node.args[0]
    if not isinstance(op, torch._ops.OpOverload):
        raise _Skip("the mutable op is not an OpOverload")
    users = _getitem_users(node)
    names, _types = get_mutable_args(op)
    kwargs = dict(node.kwargs)
    clones: list[torch.fx.Node] = []
    new_values: list[Any] = []
    for name in names:
        arg = kwargs.get(name)
        if arg is None:
            new_values.append(None)
        elif isinstance(arg, torch.fx.Node):
            cp = _copy_preserving(b, arg)
            clones.append(cp.clone)
            kwargs[name] = cp.value
            new_values.append(cp.value)
        elif isinstance(arg, (list, tuple)):
            copies = []
            for a in arg:
                if not isinstance(a, torch.fx.Node):
                    raise _Skip(f"mutable list argument {name!r} holds a non-node")
                cp = _copy_preserving(b, a)
                clones.append(cp.clone)
                copies.append(cp.value)
            kwargs[name] = copies
            new_values.append(copies)
        else:
            raise _Skip(f"mutable argument {name!r} is not a tensor")
    call = _emit_op(b, op, kwargs)
    repl, first = _output_replacements(b, op, call, users)
    for j, value in enumerate(new_values):
        idx = first + j
        if idx not in users:
            continue
        if isinstance(value, torch.fx.Node):
            repl[idx] = value
        # a list of new values (Tensor[] argument): its nested getitems are rewired by _rewire
    return clones, call, repl


def _lower_v2(b: _Builder, node: torch.fx.Node) -> tuple[list[torch.fx.Node], torch.fx.Node, dict[object, torch.fx.Node]]:
    from torch._higher_order_ops.auto_functionalize import (
        AliasViewInfo,
        AsStridedViewInfo,
        NotView,
        SliceViewInfo,
        get_mutable_args_from_schema,
        read_view_information_from_args,
    )

    op = node.args[0]
    if not isinstance(op, torch._ops.OpOverload):
        raise _Skip("the mutable op is a higher-order op")
    kwargs = dict(node.kwargs)
    bases = kwargs.pop("_all_bases", None)
    if not isinstance(bases, (list, tuple)):
        raise _Skip("no _all_bases")
    if torch._library.utils.is_out(op):
        return _lower_v2_out(b, node, op, kwargs)
    users = _getitem_users(node)
    names, types = get_mutable_args_from_schema(op._schema)
    try:
        infos = read_view_information_from_args(names, types, kwargs, list(bases))
    except Exception as e:
        raise _Skip(f"unreadable view information: {type(e).__name__}: {e}") from e
    if any(k.startswith("_") and k not in {a.name for a in op._schema.arguments} for k in kwargs):
        raise _Skip(f"unrecognised wrapper arguments {sorted(k for k in kwargs if k.startswith('_'))}")
    copies: list[_Copy] = []
    for base in bases:
        if not isinstance(base, torch.fx.Node):
            raise _Skip("a base is not a node")
        copies.append(_copy_preserving(b, base))

    def regenerate(info: Any) -> torch.fx.Node:
        cp = copies[info.base_index]
        if isinstance(info, NotView):
            return cp.value
        if isinstance(info, AliasViewInfo):
            return b.call(aten.alias.default, (cp.value,))
        if isinstance(info, SliceViewInfo):
            return b.call(aten.slice.Tensor, (cp.value, info.dim, info.start, info.end))
        if isinstance(info, AsStridedViewInfo):
            replayed = _replay_view_chain(b, info, bases[info.base_index], cp.value)
            if replayed is not None:
                return replayed
            # Offsets are absolute in the base's storage; the clone has the same storage
            # coordinates (it copies the base, the flat prefix of its storage, or its root).
            return b.call(aten.as_strided.default, (cp.clone, list(info.size), list(info.stride), info.storage_offset))
        raise _Skip(f"unknown view information {type(info).__name__}")

    for name in names:
        info = infos.get(name)
        if info is None:
            kwargs[name] = None
        elif isinstance(info, list):
            kwargs[name] = [None if i is None else regenerate(i) for i in info]
        else:
            kwargs[name] = regenerate(info)
    call = _emit_op(b, op, kwargs)
    repl, first = _output_replacements(b, op, call, users)
    for j, cp in enumerate(copies):
        if first + j in users:
            repl[first + j] = cp.value
    return [cp.clone for cp in copies], call, repl


def _replay_view_chain(b: _Builder, info: Any, base: Any, copy: torch.fx.Node) -> Optional[torch.fx.Node]:
    """Regenerate a view recorded as ``as_strided`` by replaying the view ops that made it.

    With dynamic shapes functionalization records the view's offset as
    ``sym_storage_offset(view)``; when ``view`` is a chain of view ops on the base,
    the same ops applied to the copy give the same view without an ``as_strided``
    on a symbolic offset (which Inductor mis-lowers for views of inputs).
    Returns None when the pattern does not apply.
    """
    off = info.storage_offset
    if not (isinstance(off, torch.fx.Node) and off.target is aten.sym_storage_offset.default and off.args):
        return None
    view = off.args[0]
    found = _view_chain(view) if isinstance(view, torch.fx.Node) else None
    if found is None or found[0] is not base:
        return None
    vv = _val(view)
    if not isinstance(vv, torch.Tensor) or len(vv.size()) != len(info.size) or len(vv.stride()) != len(info.stride):
        return None
    size_val, stride_val = b.fake((list(info.size), list(info.stride)))
    if not (
        all(_known_eq(x, y) for x, y in zip(vv.size(), size_val))
        and all(_known_eq(x, y) for x, y in zip(vv.stride(), stride_val))
    ):
        return None
    return _replay(b, found[1], copy)


def _lower_v2_out(
    b: _Builder, node: torch.fx.Node, op: torch._ops.OpOverload, kwargs: dict[str, Any]
) -> tuple[list[torch.fx.Node], torch.fx.Node, dict[object, torch.fx.Node]]:
    """``out=`` ops: the wrapper allocates the outputs (nothing is copied); so does the lowering."""
    from torch._higher_order_ops.auto_functionalize import get_mutable_args_from_schema

    names, _ = get_mutable_args_from_schema(op._schema)
    outs: list[torch.fx.Node] = []
    for name in names:
        try:
            size, stride = kwargs.pop(f"_{name}_size"), kwargs.pop(f"_{name}_stride")
            dtype, device = kwargs.pop(f"_{name}_dtype"), kwargs.pop(f"_{name}_device")
        except KeyError as e:
            raise _Skip(f"out= wrapper without layout of {name!r}") from e
        t = b.call(aten.empty_strided.default, (list(size), list(stride)), {"dtype": dtype, "device": device})
        kwargs[name] = t
        outs.append(t)
    call = _emit_op(b, op, kwargs)
    if not _is_tuple_val(node):
        # A single out= tensor: the wrapper's value is the tensor itself.
        if len(outs) != 1:
            raise _Skip("out= wrapper with one value but several out arguments")
        return [], call, {_SELF: outs[0]}
    repl: dict[object, torch.fx.Node] = {}
    for idx in _getitem_users(node):
        if not isinstance(idx, int) or not 0 <= idx < len(outs):
            raise _Skip(f"getitem index {idx!r} out of range")
        repl[idx] = outs[idx]
    return [], call, repl


def _is_tuple_val(node: torch.fx.Node) -> bool:
    return isinstance(meta_value(node), (list, tuple))


def _lower_triton(b: _Builder, node: torch.fx.Node) -> tuple[list[torch.fx.Node], torch.fx.Node, dict[object, torch.fx.Node]]:
    from torch._higher_order_ops.triton_kernel_wrap import triton_kernel_wrapper_mutation

    users = _getitem_users(node)
    kw = dict(node.kwargs)
    kernel_kwargs = kw.get("kwargs")
    to_clone = kw.get("tensors_to_clone")
    if not isinstance(kernel_kwargs, dict) or not isinstance(to_clone, (list, tuple)):
        raise _Skip("wrapper without kwargs/tensors_to_clone")
    new_kwargs = dict(kernel_kwargs)
    clones: list[torch.fx.Node] = []
    values: dict[str, torch.fx.Node] = {}
    for key in to_clone:
        arg = kernel_kwargs.get(key)
        if not isinstance(arg, torch.fx.Node):
            raise _Skip(f"tensor to clone {key!r} is not a node")
        cp = _copy_preserving(b, arg)
        clones.append(cp.clone)
        new_kwargs[key] = cp.value
        values[key] = cp.value
    call_kwargs = {k: v for k, v in kw.items() if k != "tensors_to_clone"}
    call_kwargs["kwargs"] = new_kwargs
    call = b.call(triton_kernel_wrapper_mutation, (), call_kwargs, val=None)
    repl: dict[object, torch.fx.Node] = {}
    for key in users:
        if key not in values:
            raise _Skip(f"getitem of {key!r}, which the wrapper does not return")
        repl[key] = values[key]
    return clones, call, repl


def _lower_scatters(b: _Builder, graph: torch.fx.Graph, lowered_values: set[torch.fx.Node]) -> list[Lowered]:
    """Lower ``*_scatter(inp, src, ...)`` whose ``src`` is a new value made by the lowering."""
    out: list[Lowered] = []
    for node in list(graph.nodes):
        view_op = _SCATTER_VIEWS.get(node.target) if node.op == "call_function" else None
        if view_op is None or len(node.args) < 2:
            continue
        inp, src = node.args[0], node.args[1]
        if not isinstance(inp, torch.fx.Node) or not isinstance(src, torch.fx.Node) or src not in lowered_values:
            continue
        sv, iv = _val(node), _val(inp)
        if not isinstance(sv, torch.Tensor) or not isinstance(iv, torch.Tensor):
            continue
        if not (
            len(sv.stride()) == len(iv.stride())
            and all(_known_eq(s, t) for s, t in zip(sv.stride(), iv.stride()))
            and _known_eq(sv.storage_offset(), iv.storage_offset())
        ):
            continue  # the scatter's result has another layout than its input: leave it
        start = len(b.created)
        try:
            with graph.inserting_before(node):
                cp = _copy_preserving(b, inp)
                view = b.call(view_op, (cp.value, *node.args[2:]), dict(node.kwargs))
                b.call(aten.copy_.default, (view, src))
        except _Skip as e:
            _undo(graph, b, start)
            log.debug("scatter %s not lowered: %s", node.name, e)
            continue
        except Exception as e:  # fake propagation failed: leave the scatter
            _undo(graph, b, start)
            log.debug("scatter %s not lowered: %s: %s", node.name, type(e).__name__, e)
            continue
        node.replace_all_uses_with(cp.value)
        graph.erase_node(node)
        lowered_values.add(cp.value)
        out.append(Lowered(node.name, "scatter", (cp.clone.name,), b.created[-1].name))
    return out


def _undo(graph: torch.fx.Graph, b: _Builder, start: int) -> None:
    for n in reversed(b.created[start:]):
        if not n.users:
            graph.erase_node(n)
    del b.created[start:]


_KINDS: dict[str, Kind] = {
    "auto_functionalized": "auto_functionalized",
    "auto_functionalized_v2": "auto_functionalized_v2",
    "triton_kernel_wrapper_functional": "triton_kernel_wrapper_functional",
}


def _kind(node: torch.fx.Node) -> Optional[Kind]:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.HigherOrderOperator):
        return None
    return _KINDS.get(str(node.target.name()))


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
    mode = _fake_mode(graph)
    lowered: list[Lowered] = []
    skipped: list[Skipped] = []
    wrappers = [(n, k) for n in graph.nodes if (k := _kind(n)) is not None]
    if not wrappers:
        return LoweringReport()
    if mode is None:
        return LoweringReport((), tuple(Skipped(n.name, k, "the graph has no fake tensors") for n, k in wrappers))
    b = _Builder(graph, mode)
    new_values: set[torch.fx.Node] = set()
    for node, kind in wrappers:
        start = len(b.created)
        name = node.name
        try:
            with graph.inserting_before(node):
                if kind == "auto_functionalized":
                    clones, call, repl = _lower_v1(b, node)
                elif kind == "auto_functionalized_v2":
                    clones, call, repl = _lower_v2(b, node)
                else:
                    clones, call, repl = _lower_triton(b, node)
            lists = _nested_lists(node, call, kind)
            _check_rewirable(node, repl, lists)
            _rewire(graph, node, repl, lists)
        except _Skip as e:
            _undo(graph, b, start)
            skipped.append(Skipped(name, kind, str(e)))
            log.debug("not lowered: %s (%s): %s", name, kind, e)
            continue
        except Exception as e:  # fake propagation or an unexpected structure: leave the node
            _undo(graph, b, start)
            skipped.append(Skipped(name, kind, f"{type(e).__name__}: {e}"))
            log.debug("not lowered: %s (%s): %s: %s", name, kind, type(e).__name__, e)
            continue
        new_values.update(v for v in repl.values() if isinstance(v, torch.fx.Node))
        for values in lists.values():
            new_values.update(values)
        lowered.append(Lowered(name, kind, tuple(c.name for c in clones), call.name))
        log.debug("lowered %s (%s) into %s with clones %s", name, kind, call.name, [c.name for c in clones])
    if scatters and new_values:
        with_views = set(new_values)
        for v in list(new_values):
            with_views.update(_view_users(v))
        lowered.extend(_lower_scatters(b, graph, with_views))
    _recompile(graph)
    return LoweringReport(tuple(lowered), tuple(skipped))


def _view_users(v: torch.fx.Node) -> list[torch.fx.Node]:
    return [u for u in v.users if u.op == "call_function" and u.target is aten.as_strided.default and u.args[0] is v]


def _nested_lists(node: torch.fx.Node, call: torch.fx.Node, kind: Kind) -> dict[object, list[torch.fx.Node]]:
    """For version-1 ``Tensor[]`` mutable arguments: getitem index -> the list of copies passed to the call."""
    if kind != "auto_functionalized":
        return {}
    from torch._higher_order_ops.auto_functionalize import get_mutable_args

    op = node.args[0]
    if not isinstance(op, torch._ops.OpOverload):
        return {}
    names, _ = get_mutable_args(op)
    first = max(len(op._schema.returns), 1)
    bound = dict(zip([a.name for a in op._schema.arguments], list(call.args)))
    bound.update(call.kwargs)
    out: dict[object, list[torch.fx.Node]] = {}
    for j, name in enumerate(names):
        value = bound.get(name)
        if isinstance(value, (list, tuple)):
            out[first + j] = list(value)
    return out


def _check_rewirable(node: torch.fx.Node, repl: dict[object, torch.fx.Node], lists: dict[object, list[torch.fx.Node]]) -> None:
    if _SELF in repl:
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
                    raise _Skip(f"{u.name} uses a list of new values other than through getitem")
        elif repl.get(idx) is None:
            raise _Skip(f"no replacement for output {idx!r}")


def _rewire(graph: torch.fx.Graph, node: torch.fx.Node, repl: dict[object, torch.fx.Node], lists: dict[object, list[torch.fx.Node]]) -> None:
    if _SELF in repl:
        node.replace_all_uses_with(repl[_SELF])
        graph.erase_node(node)
        return
    for g in list(node.users):
        idx = g.args[1]
        if not g.users:
            pass
        elif idx in lists:
            for u in list(g.users):
                u.replace_all_uses_with(lists[idx][u.args[1]])
                graph.erase_node(u)
        else:
            g.replace_all_uses_with(repl[idx])
        graph.erase_node(g)
    graph.erase_node(node)


def _recompile(graph: torch.fx.Graph) -> None:
    owner = getattr(graph, "owning_module", None)
    if isinstance(owner, torch.fx.GraphModule):
        owner.recompile()


# ---------------------------------------------------------------------------
# copy-back folding


def _single(a: AliasAnalysis, n: torch.fx.Node) -> Optional[str]:
    pts = a.storage_of(n)
    if len(pts) != 1 or UNKNOWN_STORAGE in pts:
        return None
    return next(iter(pts))


def _same_region(x: Optional[Region], y: Optional[Region]) -> bool:
    if x is None or y is None:
        return False
    return (
        x.itemsize == y.itemsize
        and len(x.sizes) == len(y.sizes)
        and _known_eq(x.offset, y.offset)
        and all(_known_eq(p, q) for p, q in zip(x.sizes, y.sizes))
        and all(_known_eq(p, q) or _known_eq(n, 1) for p, q, n in zip(x.strides, y.strides, x.sizes))
    )


def _overlaps(x: Optional[Region], y: Optional[Region]) -> bool:
    if x is None or y is None:
        return True
    return regions_may_overlap(x, y)


def _access_region(a: AliasAnalysis, acc: Access) -> Optional[Region]:
    return None if acc.whole else a.region_of(acc.value)


def _same_facts(x: Optional[TensorFacts], y: Optional[TensorFacts]) -> bool:
    return (
        x is not None
        and y is not None
        and x.dtype == y.dtype
        and x.device == y.device
        and x.is_conj == y.is_conj
        and x.is_neg == y.is_neg
        and x.is_strided
        and y.is_strided
    )


def plan_copy_back(a: AliasAnalysis, clone: torch.fx.Node) -> CopyBackDecision:
    """Decide whether ``clone`` may be folded into its original (conditions F1-F8; pure).

    Parameters
    ----------
    a : AliasAnalysis
        Analysis of the graph as it is now.
    clone : torch.fx.Node
        A clone candidate (:func:`rewrite.is_clone_candidate`).

    Returns
    -------
    CopyBackDecision

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from aliasing import analyze
    >>> def f(x):
    ...     c = x.clone()
    ...     c.mul_(2)
    ...     x.copy_(c)
    ...     return x.sum()
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    >>> d = plan_copy_back(analyze(gm), next(n for n in gm.graph.nodes if n.name == "clone"))
    >>> d.action, str(d.reason)
    ('fold', 'clone-copied-back')
    """
    original = clone.args[0]
    if not isinstance(original, torch.fx.Node):
        return CopyBackDecision(clone.name, "keep", CopyBackReason.UNKNOWN_STORAGE)

    def keep(reason: CopyBackReason, *ev: torch.fx.Node) -> CopyBackDecision:
        return CopyBackDecision(clone.name, "keep", reason, tuple(e.name for e in ev), original.name)

    fc, fo = a.facts_of(clone), a.facts_of(original)
    if fc is None or fo is None:
        return keep(CopyBackReason.UNKNOWN_STORAGE)
    # F1 layout.
    if not same_layout(fc, fo):
        return keep(CopyBackReason.LAYOUT, original)
    sc, so = _single(a, clone), _single(a, original)
    rc = a.region_of(clone)
    if sc is None or so is None or sc == so or rc is None:
        return keep(CopyBackReason.UNKNOWN_STORAGE)
    pc = a.position(clone)
    c_acc = [acc for acc in a.storage_accesses(sc) if acc.position > pc]
    o_acc = [acc for acc in a.storage_accesses(so) if acc.position > pc]
    # F8 nothing opaque touches the clone.
    for acc in c_acc:
        if acc.whole or a.is_unknown(acc.node):
            return keep(CopyBackReason.OPAQUE_USE, acc.node)
    # F2 the copy-back E = copy_(d, s), if any.
    copy_back: Optional[torch.fx.Node] = None
    for acc in o_acc:
        n = acc.node
        if (
            acc.kind == "write"
            and n.target is aten.copy_.default
            and len(n.args) == 2
            and acc.value is n.args[0]
            and isinstance(n.args[1], torch.fx.Node)
            and _single(a, n.args[1]) == sc
        ):
            copy_back = n
            break
    c_writes = [acc for acc in c_acc if acc.kind == "write"]
    c_reads = [acc for acc in c_acc if acc.kind == "read"]
    first_write = c_writes[0].position if c_writes else None
    out = a.output_node
    # F7 the clone is not returned.
    if out is not None and any(acc.node is out for acc in c_reads):
        return keep(CopyBackReason.OUTPUT_ALIASING, out)
    end: Optional[int] = None
    if copy_back is None:
        # F2 without a copy-back the writes must land in memory the caller does not observe.
        if c_writes and a.storage_role(so) in CALLER_VISIBLE:
            return keep(CopyBackReason.NO_COPY_BACK, c_writes[0].node, original)
        written = [_access_region(a, w) for w in c_writes]
    else:
        d, s = copy_back.args[0], copy_back.args[1]
        if not isinstance(d, torch.fx.Node) or not isinstance(s, torch.fx.Node):
            return keep(CopyBackReason.NO_COPY_BACK)
        rd, rs = a.region_of(d), a.region_of(s)
        if not (_same_region(rd, rs) and _same_facts(a.facts_of(d), a.facts_of(s)) and _single(a, d) == so):
            return keep(CopyBackReason.REGION_MISMATCH, copy_back)
        end = a.position(copy_back)
        # F3 every write of c before E, inside s.
        for w in c_writes:
            if w.position >= end:
                return keep(CopyBackReason.WRITE_AFTER_COPY_BACK, w.node, copy_back)
            rw = _access_region(a, w)
            if not (_same_region(rw, rs) or _same_region(rs, rc)):
                return keep(CopyBackReason.WRITE_OUTSIDE, w.node)
        written = [rd]
    protected = written + [_access_region(a, r) for r in c_reads if end is None or r.position <= end]
    for acc in o_acc:
        if end is not None and acc.position >= end:
            break
        r = _access_region(a, acc)
        if acc.kind == "write":
            # F5 no write of o's memory that c's values (or the written region) depend on.
            if any(_overlaps(r, p) for p in protected):
                return keep(CopyBackReason.ORIGINAL_WRITTEN, acc.node)
        elif first_write is not None and acc.position >= first_write and any(_overlaps(r, w) for w in written):
            # F4 no read of the written region once c is written (same node included).
            return keep(CopyBackReason.ORIGINAL_READ, acc.node)
    if copy_back is None or end is None:
        return CopyBackDecision(clone.name, "fold", CopyBackReason.UNOBSERVED, (), original.name)
    # F6 reads of c after E see no later write of the same bytes of o.
    late = [r for r in c_reads if r.position > end]
    if late:
        last = late[-1].position
        for acc in o_acc:
            if acc.position <= end or acc.position >= last or acc.kind != "write":
                continue
            r = _access_region(a, acc)
            if any(_overlaps(r, _access_region(a, x)) for x in late if x.position > acc.position):
                return keep(CopyBackReason.LATE_READ, acc.node)
    return CopyBackDecision(clone.name, "fold", CopyBackReason.FOLDABLE, (copy_back.name,), original.name, copy_back.name)


def _self_copy(a: AliasAnalysis, n: torch.fx.Node) -> bool:
    if n.op != "call_function" or n.target is not aten.copy_.default or len(n.args) != 2 or n.kwargs:
        return False
    d, s = n.args
    if not isinstance(d, torch.fx.Node) or not isinstance(s, torch.fx.Node):
        return False
    if d is s:
        return True
    sd, ss = _single(a, d), _single(a, s)
    if sd is None or sd != ss:
        return False
    return _same_region(a.region_of(d), a.region_of(s)) and _same_facts(a.facts_of(d), a.facts_of(s))


def drop_self_copies(graph: torch.fx.Graph, *, analysis: Optional[AliasAnalysis] = None) -> tuple[str, ...]:
    """Remove ``copy_(d, s)`` where ``d`` and ``s`` provably are the same memory, layout and dtype.

    Such a copy writes every element with its own value. Users of the copy
    (its result is ``d``) are rewired to ``d``. Mutates ``graph``; returns the
    names of the removed copies.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x[0].copy_(x[0]).sum(), tracing_mode="fake")(torch.randn(2, 3))
    >>> drop_self_copies(gm.graph)
    ('copy_',)
    """
    a = analysis if analysis is not None else analyze(graph)
    dropped: list[str] = []
    for n in list(graph.nodes):
        if _self_copy(a, n):
            d = n.args[0]
            if not isinstance(d, torch.fx.Node):
                continue
            n.replace_all_uses_with(d)
            dropped.append(n.name)
            graph.erase_node(n)
            log.debug("dropped self-copy %s", dropped[-1])
    if dropped:
        _recompile(graph)
    return tuple(dropped)


def fold_copy_backs(
    graph: torch.fx.Graph, *, donated_inputs: Iterable[int] = (), max_folds: int = 1000
) -> tuple[CopyBackDecision, ...]:
    """Fold every clone that is written and then copied back into its original (mutates ``graph``).

    One clone at a time against a fresh analysis of the current graph (so two
    folds never rely on each other's stale facts). A folded clone is replaced by
    its original and the copy-back, now a self-copy, is dropped. Returns the
    decisions for every clone considered in the last round plus every fold.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def f(x):
    ...     c = x.clone()
    ...     c.mul_(2)
    ...     x.copy_(c)
    ...     return x.sum()
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    >>> [d.action for d in fold_copy_backs(gm.graph)]
    ['fold']
    >>> any(n.target is torch.ops.aten.clone.default for n in gm.graph.nodes)
    False
    """
    donated = tuple(donated_inputs)
    folds: list[CopyBackDecision] = []
    last: list[CopyBackDecision] = []
    while len(folds) < max_folds:
        a = analyze(graph, donated_inputs=donated)
        candidates = [n for n in graph.nodes if is_clone_candidate(n)]
        last = []
        done = False
        for c in reversed(candidates):
            d = plan_copy_back(a, c)
            if d.action != "fold":
                last.append(d)
                continue
            original = c.args[0]
            if not isinstance(original, torch.fx.Node):
                continue
            _replace(graph, c, original)
            log.debug("folded %s into %s (copy-back %s)", d.node, d.original, d.copy_back)
            folds.append(d)
            drop_self_copies(graph, analysis=None)
            done = True
            break
        if not done:
            break
    if folds:
        _recompile(graph)
    return tuple(folds) + tuple(reversed(last))



# ---------------------------------------------------------------------------
# replacing a value: keep the fake tensors of its users truthful


def _storage_key(v: Any) -> Optional[int]:
    if isinstance(v, torch.Tensor) and v.layout == torch.strided:
        try:
            return int(v.untyped_storage()._cdata)
        except Exception:
            return None
    return None


def _val_keys(v: Any) -> set[int]:
    if isinstance(v, (list, tuple)):
        return {k for x in v for k in _val_keys(x)}
    k = _storage_key(v)
    return set() if k is None else {k}


def _refresh_stale(graph: torch.fx.Graph, stale: set[int]) -> list[str]:
    """Recreate every node whose fake value still lives in a replaced value's fake storage.

    After ``c`` is replaced by ``o``, views of ``c`` (and in-place results on it)
    still carry fake tensors in ``c``'s fake storage, which would make the
    analysis believe the view copied (or miss an alias shown only by fake
    evidence). Each such node is recreated, in graph order, with its fake value
    recomputed from its current arguments; existing nodes' metadata is never
    modified. Returns the names of the recreated nodes (empty if nothing was
    stale). Raises when a fake value cannot be recomputed.
    """
    if not stale:
        return []
    mode = _fake_mode(graph)
    recreated: list[str] = []
    for node in list(graph.nodes):
        if node.op != "call_function" or not has_meta(node):
            continue
        if not (_val_keys(meta_value(node)) & stale):
            continue
        if mode is None:
            raise RuntimeError("no fake mode to recompute stale metadata")
        b = _Builder(graph, mode)
        with graph.inserting_before(node):
            if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
                parent = meta_value(node.args[0])
                val = parent[node.args[1]] if isinstance(parent, (list, tuple)) else _COMPUTE
                fresh = b.call(node.target, tuple(node.args), dict(node.kwargs), val=val)
            else:
                fresh = b.call(node.target, tuple(node.args), dict(node.kwargs))
        node.replace_all_uses_with(fresh)
        recreated.append(node.name)
        graph.erase_node(node)
    return recreated


def _replace(graph: torch.fx.Graph, old: torch.fx.Node, new: torch.fx.Node) -> None:
    """Replace ``old`` by ``new`` everywhere, erase ``old``, and refresh the stale users."""
    stale = _val_keys(meta_value(old))
    old.replace_all_uses_with(new)
    graph.erase_node(old)
    _refresh_stale(graph, stale - _val_keys(meta_value(new)))


def _eliminate(graph: torch.fx.Graph, donated: tuple[int, ...]) -> CloneEliminationReport:
    """Sound clone elimination (:mod:`rewrite.planner`), applied with truthful fake values."""
    candidates = [n for n in graph.nodes if is_clone_candidate(n)]
    try:
        decisions = plan_clone_elimination(analyze(graph, donated_inputs=donated), candidates)
    except Exception as e:
        log.warning("clone elimination failed, keeping every clone: %s: %s", type(e).__name__, e)
        return CloneEliminationReport(
            tuple(Decision(n.name, "keep", Reason.INTERNAL_ERROR, (), str(n.args[0])) for n in candidates),
            f"{type(e).__name__}: {e}",
        )
    by_name = {n.name: n for n in graph.nodes}
    stale: set[int] = set()
    for d in decisions:
        if d.action == "remove" and d.node in by_name:
            stale |= _val_keys(meta_value(by_name[d.node]))
    apply_decisions(graph, decisions)
    keep_keys = set()
    for n in graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            keep_keys |= _val_keys(meta_value(n))
    _refresh_stale(graph, stale - keep_keys)
    for d in decisions:
        log.debug("%s %s (%s): %s %s", d.action, d.node, d.original, d.reason, ", ".join(d.evidence))
    return CloneEliminationReport(tuple(decisions))


# ---------------------------------------------------------------------------
# the pipeline


def lower_and_eliminate(
    graph: torch.fx.Graph,
    *,
    donated_inputs: Iterable[int] = (),
    lower_functional: bool = True,
    max_rounds: int = 4,
) -> PipelineReport:
    """Lower functional ops (optionally), then eliminate and fold clones to a fixed point.

    Never raises on a well-formed graph: a failure stops the pipeline where it
    is (every step leaves a valid, equivalent graph) and is reported in
    :attr:`PipelineReport.error`.

    Parameters
    ----------
    graph : torch.fx.Graph
        A functionalized graph with ``meta['val']`` on its nodes (mutated in place).
    donated_inputs : iterable of int
        Placeholder positions the caller gives up (see :func:`aliasing.analyze`).
    lower_functional : bool
        Lower ``auto_functionalized``/``_v2``/``triton_kernel_wrapper_functional``
        first; with False only clones already in the graph are judged.
    max_rounds : int
        Bound on elimination/fold rounds.

    Returns
    -------
    PipelineReport

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: (x * 2).clone() + 1, tracing_mode="fake")(torch.randn(4))
    >>> report = lower_and_eliminate(gm.graph)
    >>> report.removed
    ('clone',)
    """
    donated = tuple(donated_inputs)
    lowering = LoweringReport()
    eliminations: list[CloneEliminationReport] = []
    folds: list[CopyBackDecision] = []
    dropped: list[str] = []
    error: Optional[str] = None
    try:
        if lower_functional:
            lowering = lower_functional_ops(graph)
        for _ in range(max(1, max_rounds)):
            rep = _eliminate(graph, donated)
            eliminations.append(rep)
            if rep.error:
                error = rep.error
                break
            decisions = fold_copy_backs(graph, donated_inputs=donated)
            new_folds = [d for d in decisions if d.action == "fold"]
            folds.extend(new_folds)
            gone = drop_self_copies(graph)
            dropped.extend(gone)
            if not new_folds and not gone:
                break  # elimination ran last on this graph: nothing left for another round
    except Exception as e:  # never raise from a pass: report and keep what was done
        error = f"{type(e).__name__}: {e}"
        log.warning("fx-aliasing pipeline stopped: %s", error)
    present = {n.name for n in graph.nodes}
    dropped += [d.copy_back for d in folds if d.copy_back not in present and d.copy_back not in dropped]
    return PipelineReport(lowering, tuple(eliminations), tuple(folds), tuple(dropped), error)
