"""What the copy planner derives from an analysis: dead readers, element-exact ops, layouts.

Pure functions of an :class:`~aliasing.AliasAnalysis` and of the graph it
describes; nothing here changes a graph or its metadata. The planner
(:mod:`rewrite.planning.planner`) cites them in conditions C1-C5 and C10:

- *liveness* (:class:`Liveness`): a node whose result reaches nothing
  (no write, no use by a node that is not dead itself) reads nothing that
  matters, unless a value it reads can make it (or a dead node after it)
  raise: indexing with tensor indices, ``item``, asserts, integer division,
  anything the tables of :mod:`aliasing.core.ops` do not list as safe (:func:`may_raise_on_values`);
- *element-exact effects* (:func:`is_elementwise`, :func:`writes_all_of`,
  :func:`write_only_args`): ops that read element ``i`` of each input to
  write element ``i`` of their output (pointwise ops in place or with
  ``out=``, ``copy_``, ``zero_``, ``fill_``), which write every element of
  their destination (a proven full overwrite, a *kill*), and whose
  destination's old value they do not read;
- *layout observability* (:func:`layout_observer`): whether any consumer of a
  value would notice that its strides or storage offset changed (layouts are
  predicted on meta tensors, which are evidence, not proof: ops whose meta or
  fake kernels the layout audit caught laying results out otherwise than eager,
  :mod:`aliasing.core.layout_divergences`, observe);
- ``wrap`` higher-order ops are judged through their subgraph (:func:`wrap_body`):
  a dead ``wrap`` whose subgraph cannot raise reads nothing that matters, and
  one whose subgraph only reads a value observes its layout only where the
  subgraph does.

The facts about operators these predicates read (which ops fill, are
value-safe, views free of layouts, reshapes, reductions, size reads, copies,
indexing, runtime checks) are tables of :mod:`aliasing.core.ops`; this module
keeps the predicates. Everything not listed there is answered conservatively:
an unlisted op may raise on any value, is not elementwise, writes only part
of what it writes, reads its destination, and observes layouts.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import torch
import torch.fx

from aliasing import AliasAnalysis
from aliasing.core.effects import composite_diverges, decomposes
from aliasing.core.facts import TensorFacts, same_layout
from aliasing.core.layout_divergences import layout_divergent
from aliasing.core.ops import (
    CHECKS,
    COPIES,
    FILLS,
    INDEXING,
    LAYOUT_FREE_VIEWS,
    REDUCTIONS,
    RESHAPES,
    SIZE_ONLY,
    VALUE_SAFE,
)
from aliasing.core.resolve import resolve_overload

__all__ = [
    "Liveness",
    "is_elementwise",
    "is_side_effectful",
    "layout_observer",
    "may_raise_on_values",
    "non_overlapping",
    "op_of",
    "suspect_layout",
    "wrap_body",
    "write_only_args",
    "writes_all_of",
]

_POINTWISE = torch.Tag.pointwise
_INPLACE = torch.Tag.inplace
_OUT = torch.Tag.out


def op_of(node: torch.fx.Node) -> torch._ops.OpOverload | None:
    """The ATen (or custom) overload a call node stands for, or None (getitem, Python callables, HOPs)."""
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        return node.target
    if node.op in ("call_function", "call_method"):
        return resolve_overload(node)
    return None


def _name(op: torch._ops.OpOverload | None) -> str:
    return op._schema.name if op is not None else ""


def _arg_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    """Every node among the arguments, with repeats, in order."""
    found: list[torch.fx.Node] = []
    torch.fx.map_arg((node.args, node.kwargs), lambda n: found.append(n) or n)  # type: ignore[func-returns-value]
    return found


def _floating(facts: TensorFacts | None) -> bool:
    return facts is not None and (facts.dtype.is_floating_point or facts.dtype.is_complex)


def wrap_body(analysis: AliasAnalysis, node: torch.fx.Node) -> torch.fx.GraphModule | None:
    """The subgraph module a ``wrap`` higher-order op calls (None for any other node)."""
    if node.op != "call_function" or node.target is not torch.ops.higher_order.wrap or not node.args:
        return None
    return _submodule(analysis, node.args[0])


def _submodule(analysis: AliasAnalysis, sub: Any) -> torch.fx.GraphModule | None:
    """The graph module a ``get_attr`` node of the analysed graph names (None for anything else)."""
    module: Any = analysis.target_graph.owning_module
    if not isinstance(sub, torch.fx.Node) or sub.op != "get_attr" or module is None:
        return None
    for part in str(sub.target).split("."):
        module = getattr(module, part, None)
    return module if isinstance(module, torch.fx.GraphModule) else None


def _body_analysis(body: torch.fx.GraphModule) -> AliasAnalysis:
    from aliasing import analyze

    return analyze(body)


def may_raise_on_values(
    analysis: AliasAnalysis, node: torch.fx.Node, changed: Callable[[torch.fx.Node], bool] | None = None
) -> bool:
    """Whether ``node`` could raise depending on the values (not the shapes) it reads.

    False only for ops known not to: pointwise ops on floating-point tensors
    (integer division and powers raise on some integers), views, copies,
    reductions, products, concatenation, normalisation, metadata reads,
    ``getitem`` of a tuple or with constant indices, and a ``wrap`` whose
    subgraph holds only such ops. True for the rest (indexing with tensor
    indices, ``item``, asserts, data-dependent shapes, custom and unknown ops).

    ``changed(arg)`` (when given) says which arguments may hold other values
    than before (a rewrite changes only some memory): an indexing op
    (``index_put_``, ``gather``, ``scatter``...) raises only on its index
    values, so it may raise differently only when an argument that is not
    floating point is ``changed``.
    """
    if node.op == "call_function" and node.target is operator.getitem:
        return any(isinstance(a, torch.fx.Node) for a in node.args[1:])
    if is_side_effectful(node):  # an assert checks values; any other effect is answered conservatively
        return True
    body = wrap_body(analysis, node)
    if body is not None:
        inner = _body_analysis(body)
        calls = [n for n in inner.nodes if n.op in ("call_function", "call_method", "call_module")]
        return any(may_raise_on_values(inner, n) for n in calls)
    op = op_of(node)
    if op is None:
        return True
    name = _name(op)
    if name in VALUE_SAFE or name in LAYOUT_FREE_VIEWS or name in RESHAPES:
        return False
    if _POINTWISE in op.tags:
        return not all(_floating(analysis.facts_of(a)) for a in node.all_input_nodes)
    if changed is not None and name in INDEXING and op.namespace == "aten":
        return any(changed(a) and not _floating(analysis.facts_of(a)) for a in node.all_input_nodes)
    return True


def is_side_effectful(node: torch.fx.Node, cache: dict[object, bool] | None = None) -> bool:
    """Whether ``node`` does something beyond computing its result and writing its arguments.

    True for what ``Node.is_impure()`` calls impure for any reason other than
    a mutable schema (whose writes the planner judges by memory): runtime
    checks (``aten._assert_async``, ``_assert_scalar``,
    ``_assert_tensor_metadata``, ``sym_constrain_range(_for_size)``, their
    functional forms), profiler ranges, ops registered as effectful and
    ``with_effects``, random ops, and torch.fx's other side-effectful
    functions (``torch._assert``, grad-mode and autocast switches). Such a
    node is never dead (torch.fx's dead-code elimination keeps it too), and
    erasing it would erase what it does.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: torch._assert_async(x.add_(1).all()), tracing_mode="fake")(torch.ones(2))
    >>> [(n.name, is_side_effectful(n)) for n in gm.graph.nodes if n.op == "call_function"]
    [('add_', False), ('all_1', False), ('_assert_async', True)]

    ``cache`` (a dict the caller keeps for one planning run) remembers the answer
    per ``OpOverload`` target, for which it depends on the target alone.
    """
    if node.op not in ("call_function", "call_method"):
        return node.op == "call_module"
    target = node.target
    if cache is not None and node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
        hit = cache.get(target)
        if hit is None:
            hit = cache[target] = _side_effectful(node, target)
        return hit
    return _side_effectful(node, target)


def _side_effectful(node: torch.fx.Node, target: object) -> bool:
    if node.op == "call_function" and (
        target is torch.ops.higher_order.with_effects or target in torch.fx.node._side_effectful_functions
    ):
        return True
    op = op_of(node)
    if op is not None:
        if _name(op) in CHECKS or op.namespace == "profiler" or torch.Tag.nondeterministic_seeded in op.tags:
            return True
        try:
            from torch._higher_order_ops.effects import _get_effect

            if _get_effect(op) is not None:
                return True
        except Exception:  # no effect registry in this PyTorch: torch.fx's table below still answers
            pass
    if node.op != "call_function":
        return False
    try:
        impure = node.is_impure()
    except Exception:  # an owning module torch.fx cannot inspect: conservative
        return True
    # Impure only because the schema is mutable: its writes are memory the planner judges.
    return impure and not (op is not None and target is op and op._schema.is_mutable)


def _pure(analysis: AliasAnalysis, node: torch.fx.Node, cache: dict[object, bool] | None = None) -> bool:
    """A call that writes nothing, is not opaque and has no side effect (:func:`is_side_effectful`)."""
    if node.op not in ("call_function", "call_method") or is_side_effectful(node, cache):
        return False
    effect = analysis.effect_of(node)
    return effect is not None and not effect.unknown and not effect.writes


class Liveness:
    """Dead nodes of a graph, kept up to date as a planner takes nodes out of it.

    A node is dead when it writes nothing, is not opaque, has no side effect
    (:func:`is_side_effectful`: asserts and the like), and every user of
    its result is dead (so nothing it computes reaches an output, memory, or
    an op that may raise). A dead node still counts as a reader when it, or a
    dead node its result flows into, may raise depending on values
    (:func:`may_raise_on_values`); the others are *dead readers*: what they
    read does not matter.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from aliasing import analyze
    >>> def f(x):
    ...     unused = x.sum()
    ...     return x + 1
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    >>> sorted(n.name for n in Liveness(analyze(gm)).readers())
    ['sum_1']
    """

    def __init__(self, analysis: AliasAnalysis) -> None:
        self.analysis = analysis
        self.dead: set[torch.fx.Node] = set()
        self.relevant: set[torch.fx.Node] = set()  # dead nodes whose values may reach a raise
        self._effectful: dict[object, bool] = {}  # is_side_effectful per OpOverload target
        all_dead = self.dead.issuperset  # (one C call per node for its users)
        for node in reversed(analysis.nodes):  # users before the nodes they use
            if all_dead(node.users) and _pure(analysis, node, self._effectful):
                self._mark(node, node.users)

    def _mark(self, node: torch.fx.Node, users: Iterable[torch.fx.Node]) -> None:
        self.dead.add(node)
        if may_raise_on_values(self.analysis, node) or any(u in self.relevant for u in users):
            self.relevant.add(node)

    def readers(self) -> set[torch.fx.Node]:
        """The dead readers."""
        return self.dead - self.relevant

    def forget(
        self, nodes: Iterable[torch.fx.Node], users: Callable[[torch.fx.Node], Sequence[torch.fx.Node]]
    ) -> list[torch.fx.Node]:
        """After ``nodes`` left the graph (``users(n)``: the uses that remain), the nodes that died, in
        the order found: the nodes feeding them, transitively, whose remaining users are all dead."""
        found: list[torch.fx.Node] = []
        frontier = [arg for n in nodes for arg in n.all_input_nodes]
        while frontier:
            node = frontier.pop()
            if node in self.dead or not _pure(self.analysis, node, self._effectful):
                continue
            remaining = users(node)
            if all(u in self.dead for u in remaining):
                self._mark(node, remaining)
                found.append(node)
                frontier.extend(node.all_input_nodes)
        return found


def is_elementwise(node: torch.fx.Node) -> bool:
    """Whether element ``i`` of what ``node`` writes depends only on element ``i`` of same-shaped inputs.

    True for pointwise ops (in place, with ``out=``, or functional), ``copy_``,
    ``zero_`` and ``fill_``: if such an op reads exactly the region it writes,
    each element is read before it is written, whatever the memory order.
    """
    op = op_of(node)
    return op is not None and (_POINTWISE in op.tags or _name(op) in FILLS)


def _destinations(node: torch.fx.Node, op: torch._ops.OpOverload) -> list[torch.fx.Node]:
    """The arguments an elementwise op writes in full: ``self`` of in-place ops and fills, ``out=``."""
    name = _name(op)
    if name in FILLS or (_INPLACE in op.tags and _POINTWISE in op.tags):
        first = node.args[0] if node.args else node.kwargs.get("self")
        return [first] if isinstance(first, torch.fx.Node) else []
    if _OUT in op.tags and _POINTWISE in op.tags:
        out = node.kwargs.get("out")
        return [out] if isinstance(out, torch.fx.Node) else []
    return []


def writes_all_of(node: torch.fx.Node, value: torch.fx.Node) -> bool:
    """Whether ``node`` provably writes every element of ``value`` (a full overwrite: a kill).

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x[0].zero_(), tracing_mode="fake")(torch.randn(2, 3))
    >>> select, zero = [n for n in gm.graph.nodes if n.op == "call_function"]
    >>> writes_all_of(zero, select), writes_all_of(zero, select.args[0])
    (True, False)
    """
    op = op_of(node)
    return op is not None and value in _destinations(node, op)


def write_only_args(node: torch.fx.Node) -> frozenset[torch.fx.Node]:
    """Arguments ``node`` writes without reading their old values (``copy_``'s and fills' ``self``,
    ``out=`` of pointwise ops), unless the same value is also passed as an input."""
    op = op_of(node)
    if op is None:
        return frozenset()
    if _name(op) not in FILLS and not (_OUT in op.tags and _POINTWISE in op.tags):
        return frozenset()  # an in-place op reads what it writes
    dests = _destinations(node, op)
    if not dests:
        return frozenset()
    passed = _arg_nodes(node)
    return frozenset(d for d in dests if passed.count(d) == 1)


def non_overlapping(facts: TensorFacts) -> bool:
    """True when no two elements of the value share memory (provably, with concrete strides)."""
    dims = []
    for n, s in zip(facts.sizes, facts.strides):
        if type(n) is not int or type(s) is not int:
            return False
        if n > 1:
            dims.append((s, n))
    reach = 0
    for s, n in sorted(dims):
        if s <= reach:
            return False
        reach += s * (n - 1)
    return True


# --------------------------------------------------------------------------- layouts


def _names_memory_format(clone: torch.fx.Node) -> bool:
    """Whether a clone candidate asks for a memory format other than ``preserve_format``."""
    fmt = clone.kwargs.get("memory_format")
    return fmt is not None and fmt is not torch.preserve_format


def suspect_layout(analysis: AliasAnalysis, clone: torch.fx.Node, original: torch.fx.Node) -> torch.fx.Node | None:
    """The op whose fake kernel may have recorded another layout for ``original`` than the real one, when
    that decides whether removing ``clone`` keeps the layout (None: the recorded layouts are evidence enough).

    The trace records layouts by running fake kernels, and the layout audit
    (:mod:`aliasing.core.layout_divergences`) saw some lay results out otherwise
    than their CPU kernels (``roll`` of a channels-last input: contiguous on
    fake tensors, channels-last for real). Downstream of such an op, equal
    recorded layouts prove nothing. A ``preserve_format`` clone whose recorded
    layout equals its original's still copies the real layout (the clone of a
    dense value has its strides); one that names a memory format, or whose
    recorded layout differs, may change the real layout in a way the recorded
    ones do not show: the clone stays (C1).

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from aliasing import analyze
    >>> def f(x):
    ...     r = torch.roll(x, 1, 0)
    ...     return r.clone(memory_format=torch.contiguous_format), r.clone()
    >>> gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last))
    >>> a = analyze(gm)
    >>> [getattr(suspect_layout(a, c, c.args[0]), "name", None) for c in gm.graph.nodes if c.name.startswith("clone")]
    ['roll', None]
    """
    liar = analysis.lying_source(original)
    if liar is None:
        return None
    fc, fo = analysis.facts_of(clone), analysis.facts_of(original)
    if fc is not None and fo is not None and same_layout(fc, fo) and not _names_memory_format(clone):
        return None
    return liar


#: sizes, strides (0 for dimensions of size one: they address nothing), storage offset, dtype
Layout = tuple[tuple[int, ...], tuple[int, ...], int, torch.dtype]


def _normal(sizes: tuple[int, ...], strides: tuple[int, ...], offset: int, dtype: torch.dtype) -> Layout:
    return sizes, tuple(0 if n == 1 else s for n, s in zip(sizes, strides)), offset, dtype


def _layout(facts: TensorFacts | None) -> Layout | None:
    raw = _raw_layout(facts)
    return None if raw is None else _normal(*raw)


def _raw_layout(facts: TensorFacts | None) -> Layout | None:
    if facts is None:
        return None
    return facts.plain_layout  # None when symbolic (no meta tensor to build) or not strided


def _meta(layout: Layout, device: torch.device) -> torch.Tensor:
    sizes, strides, offset, dtype = layout
    span = 0 if 0 in sizes else 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
    return torch.empty(offset + span, dtype=dtype, device="meta").as_strided(sizes, strides, offset)


def simulate(
    analysis: AliasAnalysis,
    node: torch.fx.Node,
    substitute: dict[torch.fx.Node, TensorFacts],
    resolve: Callable[[torch.fx.Node], torch.fx.Node] = lambda n: n,
) -> Layout | None:
    """The layout ``node``'s result would have if the arguments in ``substitute`` had those facts.

    The op runs on meta tensors built from the facts of its arguments (those
    of ``resolve(arg)``: what stands for the argument after earlier removals),
    None when any is symbolic, unknown or not strided, or the op fails there.
    """
    op = op_of(node)
    if op is None:
        return None
    missing = False

    def tensor(arg: torch.fx.Node) -> Any:
        nonlocal missing
        facts = substitute.get(arg) or analysis.facts_of(resolve(arg))
        layout = _raw_layout(facts)
        if layout is None or facts is None:
            missing = True
            return None
        return _Described(layout, facts.device)

    # substitute: keyed by the arguments themselves
    described = torch.fx.map_arg((node.args, node.kwargs), tensor)
    if missing:
        return None
    key = _simulation_key(op, described)
    if key is not None and key in _SIMULATED:
        return _SIMULATED[key]
    args, kwargs = torch.fx.node.map_aggregate(
        described, lambda a: _meta(a.layout, a.device) if isinstance(a, _Described) else a
    )
    answer = _run_on_meta(op, args, kwargs)
    if key is not None:
        if len(_SIMULATED) >= _SIMULATED_MAX:
            _SIMULATED.clear()
        _SIMULATED[key] = answer
    return answer


class _Described:
    """An argument of a simulated call: the layout and device of the meta tensor it stands for."""

    __slots__ = ("device", "layout")

    def __init__(self, layout: Layout, device: torch.device) -> None:
        self.layout, self.device = layout, device


#: Layouts :func:`simulate` computed, per op and described arguments: a meta kernel's answer is a
#: function of its arguments' layouts and values (and of the default dtype, which a Python scalar
#: promotes to), and the same call recurs in every layer of a model.
_SIMULATED: dict[tuple[Any, ...], Layout | None] = {}
_SIMULATED_MAX = 4096


def _simulation_key(op: torch._ops.OpOverload, described: Any) -> tuple[Any, ...] | None:
    """A hashable description of a simulated call (None when an argument has no plain value)."""

    def key(a: Any) -> Any:
        if isinstance(a, _Described):
            return ("T", a.layout, a.device)
        if isinstance(a, (list, tuple)):
            return (type(a).__name__, *(key(x) for x in a))
        if isinstance(a, dict):
            return ("dict", *((k, key(v)) for k, v in sorted(a.items())))
        if a is None or type(a) in _PLAIN:
            return (type(a), a)  # (1, 1.0 and True are equal keys)
        raise _Unkeyed

    try:
        # (the default dtype too: a Python scalar promotes to it)
        return (id(op), op, torch.get_default_dtype(), key(described))
    except (_Unkeyed, TypeError):
        return None


_PLAIN = frozenset({int, float, bool, str, torch.dtype, torch.device, torch.memory_format, torch.layout})


class _Unkeyed(Exception):
    """An argument of a simulated call without a plain, hashable value (a symbolic size, ...)."""


def _run_on_meta(op: torch._ops.OpOverload, args: Any, kwargs: Any) -> Layout | None:
    try:
        with torch.no_grad():
            result = op(*args, **kwargs)
    except Exception:  # an op without a meta kernel, or arguments it rejects: unknown
        return None
    if not isinstance(result, torch.Tensor):
        return None
    return _normal(tuple(result.shape), tuple(result.stride()), int(result.storage_offset()), result.dtype)


def layout_observer(
    analysis: AliasAnalysis,
    value: torch.fx.Node,
    new_facts: TensorFacts,
    users: Callable[[torch.fx.Node], Sequence[torch.fx.Node]],
    dead: Iterable[torch.fx.Node] = (),
    resolve: Callable[[torch.fx.Node], torch.fx.Node] = lambda n: n,
) -> torch.fx.Node | None:
    """The first consumer of ``value`` that would notice it taking ``new_facts``' layout (None: none would).

    ``value``'s dtype, device and sizes stay; only strides and storage offset
    change. ``users(n)`` gives the nodes that use ``n`` once the planner's
    earlier removals are applied, and ``resolve(n)`` the value that stands for
    ``n`` then (a removed copy of ``value`` stands for ``value``: its users'
    arguments name it). A consumer does not observe the change when:

    (a) it makes a fresh value elementwise or by copying (pointwise ops,
        ``clone``, ``_to_copy``, rearrangements such as ``repeat``, ``cat``,
        ``flip``, ``gather``) whose layout, recomputed on meta tensors, is
        the one its metadata records, and none of whose other arguments is
        computed from an op whose fake kernel lies about layouts (their
        recorded layouts, which the recomputation uses, may be wrong);
    (b) it writes ``value`` elementwise in full (pointwise in place, ``copy_``,
        fills, ``out=``), ``new_facts`` has no internal overlap, and nothing
        uses its result;
    (c) it reads ``value`` as an input of an elementwise op that writes
        another value (``copy_``'s source, an operand of an in-place op);
    (d) it reads sizes only (``sym_size``, ``numel``);
    (e) it is a view whose elements do not depend on strides (slices,
        transposes, splits...), or a ``view`` that the new layout still
        allows (run on meta tensors), and nothing uses it;
    (f) it is a dead op that cannot raise on a layout (pointwise ops,
        reductions, copies) and nothing uses it;
    (g) it is a ``wrap`` or a ``cond`` that does not write the value and whose
        subgraph (each branch) does not observe the layout of the placeholder it
        binds (these rules, inside the subgraph).

    Anything else observes: the output node (an output's recorded layout),
    stride reads, ``reshape``/``as_strided``, a ``view`` the new layout does
    not allow, reductions whose result is used (their summation order follows
    strides), custom and unknown ops, and every op of an overload packet in
    :data:`aliasing.core.layout_divergences.LAYOUT_DIVERGENT_OVERLOADS` (the layout
    audit, ``python -m tools.audit --layouts``, saw its meta or fake kernel
    lay a result out otherwise than its CPU kernel: ``roll`` keeps a
    channels-last input's layout on CPU and returns a contiguous one on meta
    tensors, so recomputing its layout proves nothing). So does a used in-place result or view
    of ``value``: it would carry the new layout while its metadata records
    the old one, and the pass never rewrites metadata that later passes
    (Inductor's among them) read.
    """
    dead_set: AbstractSet[torch.fx.Node] = dead if isinstance(dead, (set, frozenset)) else frozenset(dead)
    if _layout(new_facts) is None:
        return value
    for user in users(value):
        # The arguments of ``user`` that stand for ``value`` (itself, or removed copies of it).
        names = frozenset(a for a in user.all_input_nodes if resolve(a) is value)
        if not _unobserved(analysis, user, names, new_facts, users, dead_set, resolve):
            return user
    return None


def _unobserved(
    analysis: AliasAnalysis,
    user: torch.fx.Node,
    names: frozenset[torch.fx.Node],
    new_facts: TensorFacts,
    users: Callable[[torch.fx.Node], Sequence[torch.fx.Node]],
    dead: AbstractSet[torch.fx.Node],
    resolve: Callable[[torch.fx.Node], torch.fx.Node],
) -> bool:
    if user.op == "output" or analysis.is_unknown(user):
        return False
    body = wrap_body(analysis, user)
    if body is not None:  # (g) judged through the subgraph
        return _unobserved_in_body(analysis, user, [body], user.args[1:], names, new_facts)
    branches = _cond_branches(analysis, user)
    if branches is not None:  # (g) judged through both branches
        return _unobserved_in_body(analysis, user, branches, tuple(user.args[3]), names, new_facts)  # type: ignore[arg-type]
    if user.op == "call_function" and user.target is operator.getitem:
        return False  # indexing the value itself (a torch-level graph): strides may matter
    op = op_of(user)
    if op is None or op.namespace != "aten":
        return False
    name = _name(op)
    if layout_divergent(str(op)) or (decomposes(op) and composite_diverges(user)):
        return False  # the layout audit saw its meta or fake kernel (or one it runs) lay a result out otherwise than eager
    effect = analysis.effect_of(user)
    writes = effect.writes if effect is not None else ()
    used = bool(users(user))
    if name in SIZE_ONLY:  # (d)
        return True
    if names & set(_destinations(user, op)):  # (b)
        return not used and non_overlapping(new_facts)  # a used result's metadata records the old layout
    if names & set(writes):
        return False  # written, but not elementwise in full
    if is_elementwise(user) and writes:  # (c) an input of an op writing something else
        return True
    if (_POINTWISE in op.tags or name in COPIES) and not writes:  # (a)
        recorded = _layout(analysis.facts_of(user))
        others = [resolve(a) for a in user.all_input_nodes if a not in names]
        suspect = any(analysis.lying_source(a) is not None for a in others)  # their layouts may be wrong
        if (
            recorded is not None
            and not suspect
            and simulate(analysis, user, dict.fromkeys(names, new_facts), resolve) == recorded
        ):
            return True
    if name in LAYOUT_FREE_VIEWS or name == "aten::view":  # (e)
        if analysis.facts_of(user) is None:  # a tuple of views: no getitem of it may be used
            return name in LAYOUT_FREE_VIEWS and all(
                u.op == "call_function" and u.target is operator.getitem and not users(u) for u in users(user)
            )
        if name == "aten::view" and simulate(analysis, user, dict.fromkeys(names, new_facts), resolve) is None:
            return False  # the new layout does not allow the view (or it cannot be run)
        return not used  # a used view's metadata records the old layout
    if user in dead and not used:  # (f)
        return _POINTWISE in op.tags or name in COPIES or name in REDUCTIONS
    return False


def _cond_branches(analysis: AliasAnalysis, node: torch.fx.Node) -> list[torch.fx.GraphModule] | None:
    """The two branch modules of a ``cond`` whose operands are a tuple (None for any other node)."""
    if node.op != "call_function" or node.target is not torch.ops.higher_order.cond or len(node.args) != 4:
        return None
    if not isinstance(node.args[3], (tuple, list)):
        return None
    branches = [_submodule(analysis, sub) for sub in node.args[1:3]]
    return [b for b in branches if b is not None] if all(b is not None for b in branches) else None


def _unobserved_in_body(
    analysis: AliasAnalysis,
    user: torch.fx.Node,
    bodies: Sequence[torch.fx.GraphModule],
    operands: Sequence[Any],
    names: frozenset[torch.fx.Node],
    new_facts: TensorFacts,
) -> bool:
    """(g): a ``wrap`` or ``cond`` that only reads the value, whose subgraphs (the ``wrap``'s one, each of
    the ``cond``'s branches) do not observe the layout of the placeholder the value binds either."""
    effect = analysis.effect_of(user)
    if effect is None or effect.unknown or names & set(effect.writes) or user.kwargs:
        return False
    for body in bodies:
        inner = _body_analysis(body)
        placeholders = [n for n in inner.nodes if n.op == "placeholder"]
        if len(placeholders) != len(operands):
            return False
        for placeholder, operand in zip(placeholders, operands):
            if operand in names and layout_observer(inner, placeholder, new_facts, lambda n: list(n.users)) is not None:
                return False
    return True
