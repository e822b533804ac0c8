"""Effects of ops on memory: a data table of rules with a conservative default.

An :class:`Effect` says which tensor arguments a node reads and writes, and, for
each of its outputs, which arguments that output may alias (an empty tuple
means a fresh allocation). The rules:

- ``OpOverload`` (ATen and custom ops): the schema's alias annotations.
  ``Tensor(a!)`` arguments are written (``out=`` too, by keyword or position);
  ``Tensor(a)`` returns alias the arguments of the same alias set; a return
  without annotation is fresh where the schema can be trusted (a custom op's, or
  an ATen op's that the storage-sharing audit of the installed release confirmed:
  :func:`aliasing.core.registry.fresh_confirmed`), unless the fake tensors show
  that the traced output shares the storage of an argument, in which case it
  aliases that argument. An ATen op the audit did not confirm (``einsum``,
  ``unsafe_split``, ``dequantize``...) may return any of its tensor arguments or
  a view of one: the analysis takes its result as fresh only where
  :meth:`aliasing.AliasAnalysis.copied` trusts a recorded copy. Pure view ops read no data (their users
  do); metadata-only ops (``sym_size``, ``sym_stride``, ``sym_numel``,
  ``sym_storage_offset``) read nothing; every other op reads every tensor
  argument.
- Higher-order ops with explicit rules: ``auto_functionalized``,
  ``auto_functionalized_v2`` (functional: read everything, write nothing,
  fresh outputs), ``triton_kernel_wrapper_functional`` (outputs in
  ``tensors_to_clone`` are fresh, the others alias their input),
  ``triton_kernel_wrapper_mutation`` (writes the kernel's mutated arguments as
  Triton's own mutation analysis finds them, or every tensor argument when
  that analysis is not available), ``with_effects`` (the wrapped op's effect;
  output 0 is the effect token).
- Hidden effects: ops whose schema does not declare a write or a view
  (:data:`aliasing.core.ops.HIDDEN_EFFECTS`, each entry backed by the audit) get it added.
- Torch-level calls (``torch.fx.symbolic_trace`` graphs: tensor methods, torch
  builtins, Python operators, ``operator.setitem``, indexing) through the ATen
  schema of the same name where that is unambiguous (:mod:`aliasing.core.resolve`).
- Everything else (``call_module``, Python callables, unrecognised
  higher-order ops) is unknown (:func:`unknown_effect`): it may read and write
  every tensor it can reach and may return an alias of any of them.

This module holds :data:`SCHEMA_EFFECTS`, the table of those rules; the facts
about operators that the rules read (views, metadata-only ops, hidden effects,
Python operators) are tables of :mod:`aliasing.core.ops`. The
control-flow higher-order ops (``cond``, ``while_loop``, ``invoke_subgraph``,
``wrap`` and its variants) need the analysis itself for their subgraphs: their
rules (:mod:`aliasing.core.subgraphs`) receive the analysis entry point, and
:data:`aliasing.DEFAULT_EFFECTS` is ``SCHEMA_EFFECTS`` tied to them by
:func:`aliasing.with_control_flow`. Callers extend a table with
``table.with_rule(target, rule)``; nothing mutates a global table.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any, NamedTuple

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from aliasing.core.facts import FactsCache, TensorFacts, is_tensor_meta, known_equal, meta_value, plain_ints
from aliasing.core.layout_divergences import fake_layout_divergent, layout_divergent
from aliasing.core.ops import (
    COMPOSITE_RUNS,
    HIDDEN_EFFECTS,
    INPLACE_OPERATORS,
    METADATA_ONLY,
    NOT_KERNELS,
    OVERWRITE_SELF,
    PURE_OPERATORS,
    SCALAR_FUNCTIONS,
    VIEWS,
)
from aliasing.core.registry import classify, fresh_confirmed
from aliasing.core.resolve import resolve_overload

__all__ = [
    "EACH",
    "SCHEMA_EFFECTS",
    "SINGLE",
    "CallScan",
    "Effect",
    "EffectRule",
    "EffectTable",
    "always_aliases_first",
    "composite_diverges",
    "composite_lies",
    "decomposes",
    "decomposition",
    "fake_kernel_lies",
    "indexing_effect",
    "list_result",
    "metadata_written",
    "mutates_metadata",
    "recomputed_copy",
    "rests_on_identity",
    "scan_calls",
    "tensor_nodes",
    "unknown_effect",
]

#: Output key of a node whose value is itself a tensor (not a tuple).
SINGLE: object = "<value>"
#: Output key that stands for every element of a list result whose length the metadata
#: does not give (a ``Tensor[]`` return traced without ``meta['val']``).
EACH: object = "<each>"

Sources = tuple[torch.fx.Node, ...]


@dataclass(frozen=True, init=False)
class Effect:
    """What one node does to memory.

    ``outputs`` maps an output key (:data:`SINGLE` for a tensor-valued node,
    else the ``getitem`` index or dict key) to the argument nodes that output may
    alias; ``()`` means fresh memory. When ``unknown`` is true the node may read,
    write and alias everything in ``reaches`` (and ``outputs`` is ignored).
    """

    reads: Sources = ()
    writes: Sources = ()
    outputs: Mapping[object, Sources] = field(default_factory=dict)
    unknown: bool = False
    reaches: Sources = ()
    note: str = ""
    #: Output keys that may alias their sources (``contiguous``, ``reshape``, ``to``: a view or
    #: a copy, depending on the layout) and that the trace recorded as a copy. The analysis
    #: makes such an output fresh where the metadata is trustworthy (:func:`recomputed_copy`
    #: and ``aliasing.core.analysis``); elsewhere the alias stands.
    copies: tuple[object, ...] = ()

    def __init__(
        self,
        reads: Sources = (),
        writes: Sources = (),
        outputs: Mapping[object, Sources] | None = None,
        unknown: bool = False,
        reaches: Sources = (),
        note: str = "",
        copies: tuple[object, ...] = (),
    ) -> None:
        # One per node of every analysis: fill the fields directly (a frozen dataclass's
        # generated __init__ pays a call per field).
        d = self.__dict__
        d["reads"], d["writes"], d["outputs"], d["unknown"] = reads, writes, {} if outputs is None else outputs, unknown
        d["reaches"], d["note"], d["copies"] = reaches, note, copies


_new_object = object.__new__


def _short_effect(reads: Sources, outputs: Mapping[object, Sources]) -> Effect:
    """``Effect(reads=reads, outputs=outputs)``, made without the keyword call (the short ways of
    :func:`schema_effect` make one per node): the other fields keep their defaults, which the class holds."""
    effect = _new_object(Effect)
    d = effect.__dict__
    d["reads"], d["outputs"] = reads, outputs
    return effect


def _unique(nodes: list[torch.fx.Node]) -> Sources:
    """``nodes`` without repeats, in order (most calls pass one or two tensors)."""
    if len(nodes) == 2:
        a, b = nodes
        return (a,) if a is b else (a, b)
    return tuple(dict.fromkeys(nodes)) if len(nodes) > 1 else tuple(nodes)


#: A rule maps a node (and the shared metadata cache) to its effect.
EffectRule = Callable[[torch.fx.Node, FactsCache], Effect]


def tensor_nodes(obj: Any) -> list[torch.fx.Node]:
    """All fx Nodes inside a (nested) argument structure, in order, without repeats."""
    if isinstance(obj, torch.fx.Node):
        return [obj]
    if obj is None or isinstance(obj, (int, float, bool, str)):
        return []
    out: list[torch.fx.Node] = []
    seen: set[torch.fx.Node] = set()

    def visit(x: Any) -> None:
        if isinstance(x, torch.fx.Node):
            if x not in seen:
                seen.add(x)
                out.append(x)
        elif isinstance(x, (list, tuple)):
            for y in x:
                visit(y)
        elif isinstance(x, dict):
            for y in x.values():
                visit(y)
        elif isinstance(x, slice):
            visit(x.start)
            visit(x.stop)
            visit(x.step)

    visit(obj)
    return out


def unknown_effect(node: torch.fx.Node, note: str = "unknown op") -> Effect:
    """The conservative default: reads, writes and may alias everything it can reach."""
    reach = tuple(tensor_nodes((node.args, node.kwargs)))
    return Effect(reads=reach, writes=reach, unknown=True, reaches=reach, note=note)


# ---------------------------------------------------------------------------
# schema-based rule for OpOverload


@dataclass(frozen=True)
class _SchemaEffect:
    """An op overload's effect template, computed once per overload and reused for every call."""

    names: tuple[str, ...]
    index: Mapping[str, int]  # argument name -> position
    kwarg_only: tuple[bool, ...]
    arg_sets: tuple[frozenset[str], ...]
    arg_writes: tuple[bool, ...]
    tensor_args: tuple[int, ...]  # indices of arguments whose type can hold tensors
    out_sets: tuple[frozenset[str], ...]
    out_args: tuple[tuple[int, ...], ...]  # per return: the tensor arguments it may alias
    list_return: bool  # a single Tensor[] return
    metadata_only: bool
    never_copies: bool  # a view op that always returns a view (reads no data)
    hidden_writes: tuple[bool, ...]  # written although the schema has no `!` (aliasing.core.ops.HIDDEN_EFFECTS)
    hidden_condition: int | None  # index of the bool argument that must not be False for them
    hidden_view_of: int | None  # index of the argument the result is a view of, undeclared
    may_write: bool  # some argument may be written (declared or hidden)
    mutates_metadata: bool  # changes its first argument's storage or layout (set_, resize_, t_...)
    out_params: tuple[int, ...]  # keyword-only written arguments (``out=``): they may be resized
    write_only: tuple[int, ...]  # written, old value never read: copy_'s self, out= of out variants
    unclassified: bool  # an ATen overload that aliasing.core.registry cannot classify: every call is unknown
    #: one fresh tensor result, nothing written, no alias annotation, nothing hidden (``mm``,
    #: ``softmax``, ``clone``): the common case, which :func:`schema_effect` takes a short way
    plain: bool = False
    #: a view op (:data:`~aliasing.core.ops.VIEWS`) whose one tensor result aliases its first argument only (by its
    #: schema, or by the hidden-effects table: ``_unsafe_view``), nothing written (``view``, ``t``,
    #: ``slice``, ``expand``): the other short way
    view: bool = False
    #: an op that returns nothing and writes arguments it declares (``Tensor(a!)``), with nothing
    #: hidden, no ``out=`` and no argument written without being read (custom in-place kernels:
    #: ``rms_norm_``, a KV-cache write): the third short way
    mutator: bool = False
    #: an op whose one tensor result is a view or a copy of its first argument, depending on the
    #: layout (``reshape``, ``contiguous``, ``flatten``, ``to``; ``dropout`` and ``type_as`` by the
    #: hidden-effects table), nothing written: a call
    #: the trace records as a view (its result in its first argument's fake storage) takes the view
    #: ops' short way; a recorded copy takes the general one (:attr:`Effect.copies`)
    view_or_copy: bool = False
    #: an in-place op that writes its first argument only and returns it (``add_``, ``mul_``,
    #: ``copy_``, whose old value it does not read), nothing hidden, no ``out=``: the fifth short way
    inplace: bool = False
    #: a view op (:data:`~aliasing.core.ops.VIEWS`) whose one ``Tensor[]`` result aliases its first argument only, by
    #: its schema, nothing written or hidden (``split``, ``split_with_sizes``, ``unbind``,
    #: ``chunk``): every element a view of the first argument, nothing read (the sixth short way)
    list_view: bool = False
    #: the layout audit caught the op's fake kernel laying results out otherwise than eager
    #: (:func:`aliasing.core.layout_divergences.fake_layout_divergent`)
    fake_divergent: bool = False
    #: an ATen op whose schema declares fresh results that the storage-sharing audit of this
    #: release did not confirm (:func:`aliasing.core.registry.fresh_confirmed`): each tensor result
    #: may alias every tensor argument, and every tensor argument is read
    undeclared: bool = False
    #: an ATen op with a CompositeImplicitAutograd kernel (``aten.batch_norm``): a call runs the ops
    #: it decomposes to (:func:`decomposes`, :func:`aliasing.core.fake_values.composite_lies`)
    composite: bool = False


#: Templates by ``id(op)`` (the op is kept alive in the value, so its id is not reused).
_TEMPLATES: dict[int, tuple[torch._ops.OpOverload, _SchemaEffect]] = {}


def _schema_effect(op: torch._ops.OpOverload) -> _SchemaEffect:
    """The op's effect template, computed on first use (looked up by identity: an
    ``OpOverload``'s own ``__hash__`` is a Python call, too slow for every node)."""
    hit = _TEMPLATES.get(id(op))
    if hit is not None:
        return hit[1]
    template = _compute_schema_effect(op)
    _TEMPLATES[id(op)] = (op, template)
    return template


def _compute_schema_effect(op: torch._ops.OpOverload) -> _SchemaEffect:
    """The op's template: what its schema, the registry and the hidden-effects table say of its
    arguments and results; then which of the short ways its calls take (:func:`_short_ways`)."""
    from torch.utils._python_dispatch import get_alias_info

    info = get_alias_info(op)
    registry = classify(op)
    schema = op._schema
    returns = schema.returns
    name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    names = tuple(a.name for a in schema.arguments)
    hidden = HIDDEN_EFFECTS.get(schema.name)
    hidden_writes = tuple(hidden is not None and n in hidden.writes for n in names)
    condition = hidden.unless_false if hidden is not None else None
    view_of = hidden.view_of if hidden is not None else None
    kwarg_only = tuple(a.kwarg_only for a in schema.arguments)
    arg_sets = tuple(frozenset(a.alias_set) for a in info.args)
    arg_writes = tuple(bool(a.is_write) for a in info.args)
    tensor_args = tuple(i for i, a in enumerate(schema.arguments) if "Tensor" in str(a.type))
    out_sets = tuple(frozenset(o.alias_set) for o in info.outs)
    out_args = tuple(tuple(i for i in tensor_args if arg_sets[i] & o) for o in out_sets)
    # The one trust rule for undeclared results (docs/DESIGN.md, "The memory model"): an ATen
    # op's unannotated result is fresh only where the storage-sharing audit confirmed it.
    undeclared = (
        registry.kind == "pure" and schema.name.startswith("aten::") and bool(out_sets) and not fresh_confirmed(name)
    )
    if undeclared:
        out_args = tuple(tensor_args if "Tensor" in str(r.type) else () for r in returns)
    template = _SchemaEffect(
        names=names,
        index={n: i for i, n in enumerate(names)},
        kwarg_only=kwarg_only,
        arg_sets=arg_sets,
        arg_writes=arg_writes,
        tensor_args=tensor_args,
        out_sets=out_sets,
        out_args=out_args,
        list_return=len(returns) == 1 and str(returns[0].type).startswith("List["),
        metadata_only=name in METADATA_ONLY or schema.name in METADATA_ONLY,
        never_copies=schema.name in VIEWS,
        hidden_writes=hidden_writes,
        hidden_condition=names.index(condition) if condition in names else None,
        hidden_view_of=names.index(view_of) if view_of in names else None,
        may_write=any(arg_writes) or any(hidden_writes),
        mutates_metadata=registry.kind == "metadata-mutating",
        out_params=tuple(i for i in range(len(names)) if arg_writes[i] and kwarg_only[i]),
        write_only=_write_only(schema.name, names, arg_writes, kwarg_only, registry.kind),
        unclassified=registry.kind == "unclassified" and schema.name.startswith("aten::"),
        fake_divergent=fake_layout_divergent(str(op)),
        undeclared=undeclared,
        composite=schema.name.startswith("aten::")
        and torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd"),
    )
    types = tuple(str(r.type) for r in returns)
    plain, view, view_or_copy, inplace, list_view, mutator = _short_ways(
        template, types, hidden is not None, view_of is not None
    )
    return replace(
        template, plain=plain, view=view, view_or_copy=view_or_copy, inplace=inplace, list_view=list_view, mutator=mutator
    )


def _short_ways(
    se: _SchemaEffect, returns: tuple[str, ...], hidden: bool, view_of: bool
) -> tuple[bool, bool, bool, bool, bool, bool]:
    """Which short way a template's calls take (plain, view, view-or-copy, in-place, list-view, mutator),
    from its fields, its return types, whether the hidden-effects table lists the op and whether
    it names an argument the result is a view of."""
    out_args, arg_writes, kwarg_only = se.out_args, se.arg_writes, se.kwarg_only
    odd = se.metadata_only or se.unclassified or se.mutates_metadata
    one_tensor = len(se.out_sets) == 1 and returns[:1] == ("Tensor",)
    one_result = not (odd or se.may_write or se.list_return) and one_tensor
    # The one result may alias the first argument only: by the schema's annotation, or by the
    # hidden-effects table where the schema declares none (``_unsafe_view``, ``dropout``).
    aliases_first = one_result and (
        out_args[0] == (0,) if not view_of else (not out_args[0] and se.hidden_view_of == 0)
    )
    inplace = (
        not (odd or se.list_return)
        and one_tensor
        and out_args[0] == (0,)
        and not hidden
        and not se.out_params
        and arg_writes[:1] == (True,)
        and not any(arg_writes[1:])
        and not kwarg_only[0]
        and se.write_only in ((), (0,))
    )
    list_view = (
        se.list_return
        and se.never_copies
        and not (odd or se.may_write)
        and not hidden
        and len(se.out_sets) == 1
        and out_args[0] == (0,)
        and not kwarg_only[0]
    )
    mutator = (
        not (odd or se.list_return) and not returns and any(arg_writes) and not hidden and not se.out_params
        and not se.write_only
    )
    plain = one_result and not view_of and not out_args[0]
    return plain, aliases_first and se.never_copies, aliases_first and not se.never_copies, inplace, list_view, mutator


def _write_only(
    name: str, names: Sequence[str], arg_writes: Sequence[bool], kwarg_only: Sequence[bool], kind: str
) -> tuple[int, ...]:
    """Arguments whose old value the op never reads (it only writes them): ``copy_``'s ``self``,
    and the ``out=`` arguments of out variants (every written argument keyword-only)."""
    if name in OVERWRITE_SELF and names and arg_writes[0]:
        return (0,)
    if kind == "schema-out":
        return tuple(i for i in range(len(names)) if arg_writes[i] and kwarg_only[i])
    return ()


def _flat(value: Any) -> list[torch.fx.Node]:
    """The nodes in one argument value (a node, or a possibly nested list of them)."""
    if type(value) is torch.fx.Node:
        return [value]
    if isinstance(value, (list, tuple)):
        out: list[torch.fx.Node] = []
        for v in value:
            if type(v) is torch.fx.Node:
                out.append(v)
            elif isinstance(v, (list, tuple, dict)):
                out.extend(tensor_nodes(v))
        return out
    if isinstance(value, dict):
        return tensor_nodes(value)
    return []


def _storage_keys(nodes: Sources, facts: FactsCache) -> dict[int, torch.fx.Node]:
    keys: dict[int, torch.fx.Node] = {}
    for n in nodes:
        f = facts.tensor(n)
        if f is not None:
            keys.setdefault(f.storage_key, n)
    return keys


_METADATA_ONLY_EFFECT = Effect(note="metadata only")
_MISSING = object()

class CallScan(NamedTuple):
    """What one pass over a graph's calls finds from their ops' templates (:func:`scan_calls`)."""

    #: values whose storage, sizes or strides some call may change in place (:func:`metadata_written`)
    metadata_mutated: set[torch.fx.Node]
    #: calls of an op whose fake kernel the layout audit caught lying (:func:`fake_kernel_lies`): ATen
    #: overloads, and torch-level calls (functions, tensor methods) that resolve to one
    lying: set[torch.fx.Node]
    #: calls of ATen ops with a CompositeImplicitAutograd kernel (:func:`decomposes`), and torch-level
    #: calls that resolve to one: whether one lies rests on what it runs
    #: (:func:`aliasing.core.fake_values.composite_lies`)
    composite: set[torch.fx.Node]


def scan_calls(nodes: Iterable[torch.fx.Node], facts: FactsCache) -> CallScan:
    """One pass over the calls of ``nodes`` (each op's template rules out most calls at once)."""
    mutated: set[torch.fx.Node] = set()
    lying: set[torch.fx.Node] = set()
    composite: set[torch.fx.Node] = set()
    for n in nodes:
        kind, op = n.op, n.target
        if kind == "call_function" and isinstance(op, torch._ops.OpOverload):
            hit = _TEMPLATES.get(id(op))  # (_schema_effect's lookup, without the call: this runs on every node)
            template = hit[1] if hit is not None else _schema_effect(op)
            if template.fake_divergent:
                lying.add(n)
            elif template.composite:
                composite.add(n)
            if not template.mutates_metadata and not template.out_params:
                continue
        elif kind == "call_function" and op is operator.getitem:
            continue  # picks an element, or a view: changes no tensor's metadata (and resolves to no op)
        elif kind == "call_method" or (kind == "call_function" and not isinstance(op, torch._ops.HigherOrderOperator)):
            resolved = resolve_overload(n)  # a torch-level call: the overload it stands for, if one
            if resolved is not None and fake_kernel_lies(resolved):
                lying.add(n)
            elif resolved is not None and decomposes(resolved):
                composite.add(n)
        elif kind != "call_function":
            continue  # placeholders, attributes, the output, modules (a HOP goes on, as before)
        mutated.update(metadata_written(n, facts))
    return CallScan(mutated, lying, composite)


def mutates_metadata(target: object) -> bool:
    """True for ops that change their first argument's storage, sizes or strides in place
    (``set_``, ``resize_``, and the ``inplace_view`` ops such as ``t_`` and ``as_strided_``)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return _schema_effect(target).mutates_metadata


def _same_shape(a: TensorFacts | None, b: TensorFacts | None) -> bool:
    if a is None or b is None or len(a.sizes) != len(b.sizes) or len(a.strides) != len(b.strides):
        return False
    return all(known_equal(x, y) for x, y in zip(a.sizes + a.strides, b.sizes + b.strides)) and known_equal(
        a.storage_offset, b.storage_offset
    )


def metadata_written(node: torch.fx.Node, facts: FactsCache) -> list[torch.fx.Node]:
    """Arguments whose storage, sizes or strides ``node`` may change in place.

    Two kinds: ops that change their first argument's metadata (``set_``,
    ``resize_``, ``inplace_view`` ops such as ``t_``; see :func:`mutates_metadata`),
    and ``out=`` arguments that the op resizes because their size differs from
    the result's (a hidden metadata write: the op may reallocate the storage).
    An ``out=`` argument is taken as resized unless the fake tensors show that
    its layout before the op equals the result's. The fake tensor of such an
    argument describes it only before the op.
    """
    if node.op not in ("call_function", "call_method"):
        return []
    op = node.target if isinstance(node.target, torch._ops.OpOverload) else resolve_overload(node)
    args = node.args
    if op is not None:
        template = _schema_effect(op)
        if not template.mutates_metadata and not template.out_params:
            return []  # the common case, decided by the op's template
    if op is None:
        # An unknown callable may change any tensor's metadata; a tensor method or torch
        # function that does not resolve might be one of set_, resize_, t_...
        return tensor_nodes((args, node.kwargs)) if _may_mutate_metadata(node) else []
    if mutates_metadata(op):
        return [args[0]] if args and isinstance(args[0], torch.fx.Node) else []
    se = _schema_effect(op)
    if not se.out_params:
        return []
    out: list[torch.fx.Node] = []
    multi = facts.outputs(node)
    for i in se.out_params:
        name = se.names[i]
        if name not in node.kwargs:
            continue
        value = node.kwargs[name]
        if type(value) is not torch.fx.Node:
            out.extend(_flat(value))  # a list of out= tensors: each may be resized
            continue
        result: TensorFacts | None = None
        ks = [k for k, o in enumerate(se.out_sets) if o & se.arg_sets[i]]
        if len(ks) == 1:
            if len(se.out_sets) == 1:
                result = facts.tensor(node)
            elif multi is not None and ks[0] < len(multi):
                result = multi[ks[0]]
        before = facts.tensor(value)
        # An empty out= tensor is resized by the real kernel even where the fake kernel
        # leaves it as it is (audit: geqrf.a), so its fake layout proves nothing.
        if not _same_shape(before, result) or _is_empty(before):
            out.append(value)
    return out


def _is_empty(f: TensorFacts | None) -> bool:
    return f is None or any(known_equal(s, 0) for s in f.sizes)


def schema_effect(node: torch.fx.Node, facts: FactsCache, op: torch._ops.OpOverload | None = None) -> Effect:
    """Effect of an ``OpOverload`` call from its schema (see module docstring).

    ``op`` is the overload whose schema describes the call (by default the node's
    target; :func:`aliasing.core.resolve.resolve_overload` for torch-level calls).
    """
    if op is None:
        if not isinstance(node.target, torch._ops.OpOverload):
            return unknown_effect(node)
        op = node.target
    hit = _TEMPLATES.get(id(op))  # (_schema_effect's lookup, without the call: this runs on every node)
    se = hit[1] if hit is not None else _schema_effect(op)
    if se.metadata_only:
        return _METADATA_ONLY_EFFECT
    if se.unclassified:
        return unknown_effect(node, f"{op} is not classified by aliasing.core.registry (a new ATen op?)")
    args, kwargs = node.args, node.kwargs
    if not _matches_schema(se, args, kwargs):
        return unknown_effect(node, "arguments do not match the schema")
    short = _short_way(se, node, facts, args, kwargs)
    if short is not None:
        return short
    # The tensor arguments actually passed, by schema position.
    passed: dict[int, list[torch.fx.Node]] = {}
    tensors: list[torch.fx.Node] = []
    _collect_passed(se, args, kwargs, passed, tensors)
    all_tensors = tuple(dict.fromkeys(tensors)) if len(tensors) > 1 else tuple(tensors)
    writes: list[torch.fx.Node] = []
    if se.may_write:
        _collect_writes(se, args, kwargs, passed, writes)
    outputs: dict[object, Sources] = {}
    facts_per_key = _declared_outputs(se, node, facts, passed, outputs)
    pure_view = not writes and bool(outputs) and all(outputs.values())
    read_aliased: set[torch.fx.Node] = set(all_tensors) if se.undeclared and not se.never_copies else set()
    copies: list[object] = []
    _apply_trace_evidence(se, node, facts, all_tensors, pure_view, facts_per_key, outputs, read_aliased, copies)
    return Effect(
        reads=_reads(se, passed, all_tensors, outputs, pure_view, read_aliased),
        writes=tuple(dict.fromkeys(writes)) if len(writes) > 1 else tuple(writes),
        outputs=outputs,
        copies=tuple(copies),
    )


def _matches_schema(se: _SchemaEffect, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether a call's arguments fit the op's schema (no more positional ones, known keywords)."""
    return len(args) <= len(se.names) and not (kwargs and any(k not in se.index for k in kwargs))


def _short_way(
    se: _SchemaEffect, node: torch.fx.Node, facts: FactsCache, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Effect | None:
    """The effect of a call of a plain, a mutator, a view, a traced-view, an in-place or a
    list-view op by its short way (the general rules' effect, computed without their questions);
    None for other ops, for a view, in-place or list-view call whose first argument is no node,
    and for a view-or-copy call the trace recorded as a copy (the general rules decide). ``args`` and ``kwargs`` are the node's
    (read once by the caller: they are properties). The one dispatch of :func:`schema_effect` and
    :meth:`EffectTable.short_effect`."""
    if se.plain:
        return _plain_effect(se, node, facts, args, kwargs)
    if se.mutator:
        return _mutator_effect(se, args, kwargs)
    if se.view:
        return _view_effect(se, args, kwargs)
    if se.view_or_copy:
        return _traced_view_effect(se, node, facts, args, kwargs)
    if se.inplace:
        return _inplace_effect(se, args, kwargs)
    if se.list_view:
        return _list_view_effect(se, node, facts, args, kwargs)
    return None


#: The outputs of a plain op's call that returns fresh memory (the common case: one mapping for
#: all of them; read-only, as every effect's outputs are to their readers).
_FRESH_RESULT: Mapping[object, Sources] = MappingProxyType({SINGLE: ()})


def _plain_effect(
    se: _SchemaEffect, node: torch.fx.Node, facts: FactsCache, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Effect:
    """The effect of a call of a plain op (:attr:`_SchemaEffect.plain`): it reads every tensor
    passed and returns fresh memory, unless the trace shows the result in an argument's storage
    (then it aliases the first such argument). What the general path computes for these ops."""
    tensors = _passed_tensors(se, args, kwargs)
    # (_unique and _short_effect, inlined: a plain call is the most common node of all)
    if len(tensors) == 1:
        reads: Sources = (tensors[0],)
    elif len(tensors) == 2:
        a, b = tensors
        reads = (a,) if a is b else (a, b)
    else:
        reads = tuple(dict.fromkeys(tensors))
    hit = facts.in_storage_of(node, reads) if reads else None
    effect = _new_object(Effect)
    d = effect.__dict__
    d["reads"], d["outputs"] = reads, _FRESH_RESULT if hit is None else {SINGLE: (hit,)}
    return effect


def _view_effect(se: _SchemaEffect, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Effect | None:
    """The effect of a call of a view op (:attr:`_SchemaEffect.view`): its result aliases its
    first argument, and it reads the other tensors passed (what the general path computes for
    these ops); None when the first argument is no node (the general path decides)."""
    name = se.names[0]
    if kwargs and name in kwargs:
        base = kwargs[name]
    else:
        base = args[0] if args and not se.kwarg_only[0] else None
    if type(base) is not torch.fx.Node:
        return None
    tensors = _passed_tensors(se, args, kwargs)
    reads = tuple(n for n in dict.fromkeys(tensors) if n is not base) if len(tensors) > 1 else ()
    return _short_effect(reads, {SINGLE: (base,)})


def _traced_view_effect(
    se: _SchemaEffect, node: torch.fx.Node, facts: FactsCache, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Effect | None:
    """The effect of a call of a view-or-copy op (:attr:`_SchemaEffect.view_or_copy`) that the trace
    recorded as a view: both the result and its first argument have fake tensors, in one fake storage.
    Then the general rules give what a view op's call gives (no copy recorded, so nothing read of
    the base, and no :attr:`Effect.copies`); None otherwise (the general path weighs a recorded copy)."""
    effect = _view_effect(se, args, kwargs)
    if effect is None:
        return None
    base = effect.outputs[SINGLE][0]
    f, b = facts.tensor(node), facts.tensor(base)
    if f is None or b is None or f.storage_key != b.storage_key:
        return None
    return effect


def _inplace_effect(se: _SchemaEffect, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Effect | None:
    """The effect of a call of an in-place op (:attr:`_SchemaEffect.inplace`): it writes its first
    argument and returns it, and reads every tensor passed, but for ``copy_``'s destination unless
    it is passed as an input too (what the general path computes for these ops); None when the
    first argument is no node (the general path decides)."""
    name = se.names[0]
    base = kwargs[name] if kwargs and name in kwargs else (args[0] if args else None)
    if type(base) is not torch.fx.Node:
        return None
    tensors = _passed_tensors(se, args, kwargs)  # (``base`` first: the first argument is a tensor)
    rest = tensors[1:]
    reads = _unique(rest) if se.write_only and base not in rest else _unique(tensors)
    return Effect(reads=reads, writes=(base,), outputs={SINGLE: (base,)})


def _list_view_effect(
    se: _SchemaEffect, node: torch.fx.Node, facts: FactsCache, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Effect | None:
    """The effect of a call of a list-returning view op (:attr:`_SchemaEffect.list_view`): each
    element of its result (by the trace's list, else :data:`EACH`) aliases its first argument, and
    nothing is read (what the general path computes for these ops: a view op's results are never
    copies, so the trace's evidence changes nothing). None when the first argument is no node,
    another tensor is passed (``tensor_split``'s indices) or the trace's list is empty (the general
    path decides)."""
    name = se.names[0]
    base = kwargs[name] if kwargs and name in kwargs else (args[0] if args else None)
    if type(base) is not torch.fx.Node or len(_passed_tensors(se, args, kwargs)) != 1:
        return None
    multi = facts.outputs(node)
    if multi is not None and not multi:
        return None
    aliased = (base,)
    return _short_effect((), dict.fromkeys(range(len(multi)) if multi is not None else (EACH,), aliased))


def _mutator_effect(se: _SchemaEffect, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Effect:
    """The effect of a call of a mutator (:attr:`_SchemaEffect.mutator`): it reads every tensor
    passed, writes those passed for its written arguments and returns nothing (what the general
    path computes for these ops: no outputs, so no trace evidence to weigh)."""
    passed: dict[int, list[torch.fx.Node]] = {}
    tensors: list[torch.fx.Node] = []
    _collect_passed(se, args, kwargs, passed, tensors)
    writes = [n for i, nodes in passed.items() if se.arg_writes[i] for n in nodes]
    return Effect(reads=_unique(tensors), writes=_unique(writes))


def _passed_tensors(se: _SchemaEffect, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[torch.fx.Node]:
    """The tensor arguments of one call, in schema order, with repeats."""
    nargs = len(args)
    tensors: list[torch.fx.Node] = []
    for i in se.tensor_args:
        if kwargs and se.names[i] in kwargs:
            value = kwargs[se.names[i]]
        elif i < nargs and not se.kwarg_only[i]:
            value = args[i]
        else:
            continue
        if type(value) is torch.fx.Node:
            tensors.append(value)
        else:
            tensors.extend(_flat(value))
    return tensors


def _collect_passed(
    se: _SchemaEffect,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    passed: dict[int, list[torch.fx.Node]],
    tensors: list[torch.fx.Node],
) -> None:
    """Fill ``passed`` (schema position -> the nodes passed there) and ``tensors`` (all of
    them, in order, with repeats) with the tensor arguments of one call."""
    nargs = len(args)
    for i in se.tensor_args:
        name = se.names[i]
        if kwargs and name in kwargs:
            value = kwargs[name]
        elif i < nargs and not se.kwarg_only[i]:
            value = args[i]
        else:
            continue
        nodes = [value] if type(value) is torch.fx.Node else _flat(value)
        if nodes:
            passed[i] = nodes
            tensors.extend(nodes)


def _collect_writes(
    se: _SchemaEffect,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    passed: Mapping[int, list[torch.fx.Node]],
    writes: list[torch.fx.Node],
) -> None:
    """Append to ``writes`` the nodes passed for written arguments: declared (``!``) or hidden
    (:data:`aliasing.core.ops.HIDDEN_EFFECTS`, counted unless their condition is literally False)."""
    cond = se.hidden_condition
    hidden_on = cond is None or _bound(se, cond, args, kwargs) is not False
    for i, nodes in passed.items():
        if se.arg_writes[i] or (se.hidden_writes[i] and hidden_on):
            writes.extend(nodes)


def _sources(se: _SchemaEffect, passed: Mapping[int, list[torch.fx.Node]], k: int) -> Sources:
    """The passed nodes that return ``k`` may alias, by the schema's alias sets."""
    arg_ids = se.out_args[k]
    if not arg_ids:
        return ()
    if len(arg_ids) == 1:
        nodes = passed.get(arg_ids[0])
        return tuple(nodes) if nodes else ()
    out: list[torch.fx.Node] = []
    for i in arg_ids:
        out.extend(passed.get(i, ()))
    return tuple(dict.fromkeys(out))


def _declared_outputs(
    se: _SchemaEffect,
    node: torch.fx.Node,
    facts: FactsCache,
    passed: Mapping[int, list[torch.fx.Node]],
    outputs: dict[object, Sources],
) -> dict[object, TensorFacts | None]:
    """Fill ``outputs`` with what the schema (and the hidden-effects table) says each output
    aliases; return the traced facts of each output key (None where there are none)."""
    facts_per_key: dict[object, TensorFacts | None]
    if se.list_return or len(se.out_sets) > 1:
        multi = facts.outputs(node)
        if multi is not None:
            keys: list[object] = list(range(len(multi)))
        else:
            keys = [EACH] if se.list_return else list(range(len(se.out_sets)))
        for k in keys:
            outputs[k] = _sources(se, passed, 0 if se.list_return or type(k) is not int else k)
        facts_per_key = {k: (multi[k] if multi is not None and type(k) is int else None) for k in keys}
    elif len(se.out_sets) == 1:
        outputs[SINGLE] = _sources(se, passed, 0)
        facts_per_key = {SINGLE: facts.tensor(node)}
    else:
        facts_per_key = {}
    view_of = se.hidden_view_of
    if view_of is not None and view_of in passed and SINGLE in outputs and not outputs[SINGLE]:
        outputs[SINGLE] = tuple(passed[view_of])  # e.g. _unsafe_view: a view its schema does not declare
    return facts_per_key


def _apply_trace_evidence(
    se: _SchemaEffect,
    node: torch.fx.Node,
    facts: FactsCache,
    all_tensors: Sources,
    pure_view: bool,
    facts_per_key: Mapping[object, TensorFacts | None],
    outputs: dict[object, Sources],
    read_aliased: set[torch.fx.Node],
    copies: list[object],
) -> None:
    """Correct ``outputs`` by the fake tensors: a "fresh" output that shares an argument's
    storage aliases it. (Evidence only ever adds aliasing; metadata made stale by a rewrite
    cannot remove any.) For a pure view op that may also copy, add to ``read_aliased`` the
    sources it may have copied, and to ``copies`` the outputs the trace recorded as copies."""
    arg_keys: dict[int, torch.fx.Node] | None = None
    for k, srcs in outputs.items():
        f: TensorFacts | None = facts_per_key.get(k)
        if not srcs:
            if f is not None and all_tensors:
                if arg_keys is None:
                    arg_keys = _storage_keys(all_tensors, facts)
                hit = arg_keys.get(f.storage_key)
                if hit is not None:
                    outputs[k] = (hit,)
            elif f is None and all_tensors and type(k) is int:
                # A Tensor[] element of a tuple result: any of its tensors may be an argument
                # itself (audit: histogramdd.TensorList_bins returns its bins).
                nested = facts.nested_storage_keys(node, k)
                if nested:
                    if arg_keys is None:
                        arg_keys = _storage_keys(all_tensors, facts)
                    hits = tuple(dict.fromkeys(arg_keys[key] for key in nested if key in arg_keys))
                    if hits:
                        outputs[k] = hits
        elif pure_view and not se.never_copies and (f is None or f.storage_key not in _storage_keys(srcs, facts)):
            # An op that may return a view or a copy (reshape, contiguous) reads nothing
            # only when the trace shows it returned a view.
            read_aliased.update(srcs)
            if f is not None:
                copies.append(k)  # the trace recorded a copy: fresh, where the analysis trusts that


def _reads(
    se: _SchemaEffect,
    passed: Mapping[int, list[torch.fx.Node]],
    all_tensors: Sources,
    outputs: Mapping[object, Sources],
    pure_view: bool,
    read_aliased: set[torch.fx.Node],
) -> Sources:
    """The tensor arguments whose data the call reads: a pure view reads only what it may
    have copied; ``copy_``'s destination and ``out=`` arguments are written, not read
    (unless also passed as an input); every other call reads all of them."""
    if pure_view:
        aliased = {n for srcs in outputs.values() for n in srcs}
        return tuple(n for n in all_tensors if n not in aliased or n in read_aliased)
    if se.write_only:
        overwritten = {n for i in se.write_only for n in passed.get(i, ())}
        inputs = {n for i, nodes in passed.items() if i not in se.write_only for n in nodes}
        return tuple(n for n in all_tensors if n not in overwritten or n in inputs)
    return all_tensors


def fake_kernel_lies(op: torch._ops.OpOverload) -> bool:
    """Whether the layout audit caught ``op``'s fake kernel laying results out otherwise than eager
    (:func:`aliasing.core.layout_divergences.fake_layout_divergent`, remembered in the op's template)."""
    return _schema_effect(op).fake_divergent


def decomposes(op: object) -> bool:
    """Whether ``op`` is an ATen overload with a CompositeImplicitAutograd kernel (``aten.batch_norm``,
    which ``torch.export`` keeps): a call runs the ops it decomposes to, whose kernels lay its
    result out (:func:`aliasing.core.fake_values.composite_lies` judges a call by them)."""
    return isinstance(op, torch._ops.OpOverload) and _schema_effect(op).composite


def list_result(op: object) -> bool:
    """Whether ``op`` is an ATen or custom overload with one ``Tensor[]`` result: its elements may be
    views of one allocation (``nonzero_numpy`` unbinds one tensor), whatever its schema says."""
    return isinstance(op, torch._ops.OpOverload) and _schema_effect(op).list_return


def rests_on_identity(op: torch._ops.OpOverload) -> bool:
    """Whether a call of ``op`` may take fresh memory only on the trace's storage identity: a
    view-or-copy op (``reshape``, ``contiguous``) or an ATen op whose undeclared results the
    storage-sharing audit did not confirm fresh (``einsum``)."""
    se = _schema_effect(op)
    return se.undeclared or se.view_or_copy


def always_aliases_first(op: torch._ops.OpOverload) -> bool:
    """True for an op whose one result is always its first argument or a view of it
    (``view``, ``t``, ``slice``...; in-place ops such as ``add_``)."""
    se = _schema_effect(op)
    if se.unclassified or se.mutates_metadata or se.list_return or len(se.out_args) != 1:
        return False
    first = se.out_args[0]
    return len(first) == 1 and first[0] == 0 and (se.never_copies or se.arg_writes[0])


def recomputed_copy(node: torch.fx.Node, key: object = SINGLE) -> bool:
    """Whether the op of ``node``, run again on its arguments' fake tensors, returns fresh memory
    for output ``key`` (:data:`SINGLE`, or the position in a tuple or list result).

    For ops that return a view or a copy depending on the layout (``contiguous``,
    ``reshape``, ``to``, ``flatten``, ``type_as``...) and for ATen ops whose
    undeclared results the storage-sharing audit did not confirm fresh (``einsum``):
    the fake kernel decides the same way the real one does, from the arguments'
    recorded layouts. Running it on the arguments' *current* metadata, rather than
    reading the result's recorded storage, keeps the answer right after a rewrite
    replaced an argument (the result's metadata then describes the old argument).
    False when it cannot be run: an argument without a fake tensor (real tensors in
    ``meta['val']`` are never run), an op that raises, or a tracing mode that is
    active. The caller answers for symbolic sizes before asking (a re-run answers for
    the example sizes only).
    """
    op = node.target
    if not isinstance(op, torch._ops.OpOverload):
        return False
    call = _fake_call(node)
    if call is None:
        return False
    args, kwargs, fakes = call
    memo = _copy_key(op, args, kwargs, fakes)
    answers = _RECOMPUTED.get(memo) if memo is not None else None
    if answers is None:
        out = _run_fake(op, args, kwargs, fakes[0].fake_mode)
        answers = _fresh_outputs(out, fakes) if out is not _FAILED else ()
        if memo is not None:
            if len(_RECOMPUTED) >= _RECOMPUTED_MAX:
                _RECOMPUTED.clear()
            _RECOMPUTED[memo] = answers
    index = 0 if key is SINGLE else key
    return type(index) is int and 0 <= index < len(answers) and answers[index]


def _fake_call(node: torch.fx.Node) -> tuple[Any, Any, list[Any]] | None:
    """The node's arguments with its argument nodes' fake tensors in their places, and those fake
    tensors; None where an argument node has no fake value (or a real tensor: never run), where
    there is no fake tensor, or where they live in different fake modes."""
    from torch._subclasses.fake_tensor import FakeTensor

    missing = False
    fakes: list[FakeTensor] = []

    def value(a: Any) -> Any:
        nonlocal missing
        if not isinstance(a, torch.fx.Node):
            return a
        v = meta_value(a)
        if v is None or (isinstance(v, torch.Tensor) and not isinstance(v, FakeTensor)):
            missing = True
        elif isinstance(v, FakeTensor):
            fakes.append(v)
        elif isinstance(v, (list, tuple)):
            fakes.extend(x for x in v if isinstance(x, FakeTensor))
        return v

    args = torch.fx.node.map_aggregate(node.args, value)
    kwargs = torch.fx.node.map_aggregate(node.kwargs, value)
    if missing or not fakes or any(f.fake_mode is not fakes[0].fake_mode for f in fakes):
        return None
    return args, kwargs, fakes


#: What :func:`_run_fake` returns for a call that raised.
_FAILED: Any = object()


def _run_fake(fn: Callable[..., Any], args: Any, kwargs: Any, mode: Any, *inner: Any) -> Any:
    """``fn(*args, **kwargs)`` under the fake ``mode`` (any tracing mode set aside, without autograd,
    guards suppressed: a re-run adds nothing to the program's shape environment), inside the
    dispatch modes ``inner``; :data:`_FAILED` where it raises."""
    from contextlib import ExitStack

    from torch.utils._python_dispatch import _disable_current_modes

    shape_env = mode.shape_env
    try:
        with ExitStack() as stack:
            stack.enter_context(_disable_current_modes())
            stack.enter_context(mode)
            stack.enter_context(torch.no_grad())
            if shape_env is not None:
                stack.enter_context(shape_env.suppress_guards())
            for m in inner:
                stack.enter_context(m)
            return fn(*args, **kwargs)
    except Exception:  # (any kernel's error: the call proves nothing)
        return _FAILED


def _fresh_outputs(out: Any, fakes: Sequence[torch.Tensor]) -> tuple[bool, ...]:
    """Per output (one for a tensor result, one per element of a tuple or list), whether it lives in
    a storage of none of ``fakes``; () where that cannot be told."""
    results = (out,) if isinstance(out, torch.Tensor) else tuple(out) if isinstance(out, (list, tuple)) else ()
    try:
        keys = {f.untyped_storage()._cdata for f in fakes}
        return tuple(isinstance(r, torch.Tensor) and r.untyped_storage()._cdata not in keys for r in results)
    except Exception:
        return ()


# -- what a composite call runs ---------------------------------------------------------------
#
# The layout audit (tools.layout_audit) judges the overloads that reach a kernel.
# A CompositeImplicitAutograd op kept in a graph (``aten.batch_norm``, which ``torch.export``
# keeps) runs ``native_batch_norm`` or ``_native_batch_norm_legit_no_training`` depending on its
# arguments, and is laid out by what it runs, on fake tensors as eagerly: a call of a composite
# op (:func:`decomposes`) is judged by the overloads it runs on its own fake arguments. It lies
# where one of them does, and its meta layout proves nothing where one of them diverges; a call
# that cannot be run on fake values is taken to lie and diverge.

class _Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records the overloads that reach the Python dispatcher (below every composite kernel)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func)
        if name not in NOT_KERNELS:
            self.ops.add(name)
        return func(*args, **(kwargs or {}))


def decomposition(node: torch.fx.Node) -> frozenset[str] | None:
    """The overloads (``"aten.native_batch_norm.default"``) that ``node``'s call runs on its
    arguments' fake tensors (a composite ATen op, or a torch-level call that resolves to one);
    None where it cannot be run (see :func:`recomputed_copy`), may change an argument's
    metadata (the fake values are the graph's own), or has symbolic sizes (a run answers for the
    example sizes only, and a composite kernel may take another path at another size). For an
    op of :data:`aliasing.core.ops.COMPOSITE_RUNS`, what it may run at any size and layout,
    without running it.

    Example
    -------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> def f(x):
    ...     return torch.ops.aten.batch_norm.default(x.t(), None, None, None, None, True, 0.1, 1e-5, False)
    >>> gm = make_fx(f, tracing_mode="fake", pre_dispatch=True)(torch.randn(4, 3))
    >>> bn = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.batch_norm.default)
    >>> decomposes(bn.target), sorted(decomposition(bn))
    (True, ['aten.empty.memory_format', 'aten.native_batch_norm.default'])
    >>> composite_lies(bn), composite_diverges(bn)
    (True, True)
    """
    op = node.target
    if mutates_metadata(op):
        return None
    if isinstance(op, torch._ops.OpOverload):
        known = COMPOSITE_RUNS.get(str(op))  # what it may run at any size and layout: no run needed
        if known is not None:
            return known
    call = _fake_call(node)
    if call is None:
        return None
    args, kwargs, fakes = call
    memo: tuple[Any, ...] | None = None
    if isinstance(op, torch._ops.OpOverload):
        try:
            memo = _describe_call(op, args, kwargs)
        except _Symbolic:  # run at the example sizes only: another size may run other ops
            return None
        except (_NoKey, RuntimeError, NotImplementedError, TypeError):
            memo = None
        if memo is not None and memo in _DECOMPOSITIONS:
            return _DECOMPOSITIONS[memo]
    if memo is None and _symbolic(args, kwargs, fakes):
        return None
    recorder = _Recorder()
    if node.op == "call_method":  # a torch-level graph's tensor method
        out = _run_fake(lambda *a, **k: getattr(a[0], str(op))(*a[1:], **k), args, kwargs, fakes[0].fake_mode, recorder)
    elif callable(op):
        out = _run_fake(op, args, kwargs, fakes[0].fake_mode, recorder)
    else:
        return None
    ops = None if out is _FAILED else frozenset(recorder.ops)
    if memo is not None:
        if len(_DECOMPOSITIONS) >= _RECOMPUTED_MAX:
            _DECOMPOSITIONS.clear()
        _DECOMPOSITIONS[memo] = ops
    return ops


def _symbolic(args: Any, kwargs: Any, fakes: Sequence[torch.Tensor]) -> bool:
    """Whether a call's fake tensors have symbolic sizes, strides or offsets, or its other
    arguments hold symbols (``reshape(x, [s0, -1])``)."""
    if not all(plain_ints((*f.size(), *f.stride(), f.storage_offset())) for f in fakes):
        return True
    leaves = tree_leaves((args, kwargs))
    return any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) for v in leaves)


#: Answers of :func:`decomposition` by op and argument layouts (what a composite kernel runs
#: depends on nothing else); bounded like :data:`_RECOMPUTED`.
_DECOMPOSITIONS: dict[tuple[Any, ...], frozenset[str] | None] = {}


def composite_lies(node: torch.fx.Node) -> bool:
    """Whether the fake layout recorded for a call of a composite op may not be its eager one: an
    op it runs has a fake kernel the layout audit caught lying, or it cannot be run."""
    ops = decomposition(node)
    return ops is None or any(fake_layout_divergent(o) for o in ops)


def composite_diverges(node: torch.fx.Node) -> bool:
    """Whether a composite op's meta or fake layout proves nothing of its eager one: an op it runs
    diverges in the layout audit, or it cannot be run."""
    ops = decomposition(node)
    return ops is None or any(layout_divergent(o) for o in ops)


#: Answers of :func:`recomputed_copy` by op and argument layouts (the fake kernel's choice
#: between a view and a copy depends on nothing else); bounded, cleared when full.
_RECOMPUTED: dict[tuple[Any, ...], tuple[bool, ...]] = {}
_RECOMPUTED_MAX = 4096


def _copy_key(op: torch._ops.OpOverload, args: Any, kwargs: Any, fakes: Sequence[torch.Tensor]) -> tuple[Any, ...] | None:
    """A hashable description of a call's arguments (layouts of the tensors, values of the rest,
    which tensors share a storage); None when some part has no plain value (symbolic sizes...)."""
    try:
        return _describe_call(op, args, kwargs)
    except (_NoKey, _Symbolic, RuntimeError, NotImplementedError, TypeError):
        return None


#: Argument types described by their values in :func:`_describe_call`.
_PLAIN_TYPES = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout})
_SYMBOLS = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _describe_call(op: torch._ops.OpOverload, args: Any, kwargs: Any) -> tuple[Any, ...]:
    """:func:`_copy_key`'s description, in one walk of the arguments (no pytree); raises
    :class:`_Symbolic` at a symbolic size, stride, offset or value, :class:`_NoKey` at a value
    without a plain description."""
    storages: dict[int, int] = {}

    def describe(a: Any) -> Any:
        t = type(a)
        if t in _PLAIN_TYPES:
            return a
        if t is list or t is tuple:
            return (t.__name__, *(describe(x) for x in a))
        if isinstance(a, torch.Tensor):
            sizes, strides, offset = a.size(), a.stride(), a.storage_offset()
            if not plain_ints((*sizes, *strides, offset)):
                raise _Symbolic
            shared = storages.setdefault(a.untyped_storage()._cdata, len(storages))
            return ("T", tuple(sizes), tuple(strides), offset, a.dtype, a.device, a.layout, a.is_conj(), a.is_neg(), shared)
        if isinstance(a, dict):
            return ("dict", *((k, describe(v)) for k, v in sorted(a.items())))
        if isinstance(a, (list, tuple)):
            return (type(a).__name__, *(describe(x) for x in a))
        raise _Symbolic if isinstance(a, _SYMBOLS) else _NoKey

    return (id(op), op, describe(args), describe(kwargs))


class _Symbolic(Exception):
    """An argument with a symbolic size, stride, offset or value."""


class _NoKey(Exception):
    """An argument without a plain, hashable description."""


def _bound(se: _SchemaEffect, i: int, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """The value passed for schema argument ``i`` (``_MISSING`` when it is not passed)."""
    name = se.names[i]
    if name in kwargs:
        return kwargs[name]
    if i < len(args) and not se.kwarg_only[i]:
        return args[i]
    return _MISSING


def _may_mutate_metadata(node: torch.fx.Node) -> bool:
    """Whether an unresolved call may change the metadata of a tensor it reaches.

    A tensor method that does not resolve to one ATen schema may be one of the
    metadata-changing methods (an overload of ``set_``, ``resize_``, ``t_``...).
    Opaque Python callables and modules are taken to read, write and alias what
    they reach, not to change its sizes or storage in place: a tracer that sees
    through them (``make_fx``, ``torch.export``) records such changes as ATen ops.
    """
    return node.op == "call_method"


# ---------------------------------------------------------------------------
# Python-level calls (torch.fx.symbolic_trace graphs)


def _known_scalar(node: torch.fx.Node) -> bool:
    """True when the value is known not to be a tensor: its metadata says so, or it comes
    from an op whose schema returns no tensor (``size``, ``sym_size``, ``item``...)."""
    known = is_tensor_meta(node)
    if known is not None:
        return not known
    if node.op in ("call_function", "call_method"):
        op = resolve_overload(node)
        if op is not None:
            return not any("Tensor" in str(r.type) for r in op._schema.returns)
        if node.op == "call_function" and (
            node.target in PURE_OPERATORS or node.target in INPLACE_OPERATORS or node.target in SCALAR_FUNCTIONS
        ):
            return all(_known_scalar(a) for a in tensor_nodes((node.args, node.kwargs)))
    return False


def _nodes_known_scalar(nodes: Sequence[torch.fx.Node], facts: FactsCache) -> bool:
    return all(_known_scalar(n) for n in nodes)


def _python_operator(node: torch.fx.Node, facts: FactsCache) -> Effect:
    """``operator.add`` and friends: read tensor operands, return a fresh value."""
    nodes = tuple(tensor_nodes((node.args, node.kwargs)))
    if _nodes_known_scalar(nodes, facts):
        return Effect(note="scalar arithmetic")
    return Effect(reads=nodes, outputs={SINGLE: ()}, note="python operator")


def _scalar_function(node: torch.fx.Node, facts: FactsCache) -> Effect:
    """``torch.sym_float``, ``math.floor``, ``max``...: no effect on numbers, unknown on anything else."""
    if _nodes_known_scalar(tuple(tensor_nodes((node.args, node.kwargs))), facts):
        return Effect(note="scalar arithmetic")
    return unknown_effect(node, "a function of numbers called with a value that may be a tensor")


def _python_inplace_operator(node: torch.fx.Node, facts: FactsCache) -> Effect:
    """``operator.iadd`` and friends: on a tensor, write and return the first operand."""
    nodes = tuple(tensor_nodes((node.args, node.kwargs)))
    first = node.args[0] if node.args else None
    if _nodes_known_scalar(nodes, facts) or not isinstance(first, torch.fx.Node):
        return _python_operator(node, facts)
    return Effect(reads=nodes, writes=(first,), outputs={SINGLE: (first,)}, note="python in-place operator")


def _basic_index(index: Any, facts: FactsCache) -> bool | None:
    """True for basic indexing (a view), False for advanced (a copy), None when unknown."""
    if isinstance(index, tuple):
        parts = [_basic_index(i, facts) for i in index]
        if any(p is False for p in parts):
            return False
        return None if any(p is None for p in parts) else True
    if index is None or index is Ellipsis or isinstance(index, (bool, int, torch.SymInt)):
        return True
    if isinstance(index, slice):
        return _basic_index((index.start, index.stop, index.step), facts)
    if isinstance(index, torch.fx.Node):
        known = is_tensor_meta(index)
        return None if known is None else not known
    return False  # a list or another sequence: advanced indexing


def indexing_effect(node: torch.fx.Node, facts: FactsCache) -> Effect:
    """``operator.getitem(tensor, index)``: basic indexing returns a view (reads nothing),
    advanced indexing a copy (reads the tensor and the indices); when the index's kind
    is unknown, both: the result may alias the tensor, which is read."""
    src = node.args[0]
    index = node.args[1] if len(node.args) > 1 else None
    if not isinstance(src, torch.fx.Node):
        return unknown_effect(node, "getitem of a constant")
    basic = _basic_index(index, facts)
    idx = tuple(tensor_nodes(index))
    if basic is True:
        return Effect(outputs={SINGLE: (src,)}, note="basic indexing: a view")
    if basic is False:
        return Effect(reads=(src, *idx), outputs={SINGLE: ()}, note="advanced indexing: a copy")
    return Effect(reads=(src, *idx), outputs={SINGLE: (src,)}, note="indexing: a view or a copy")


def _setitem(node: torch.fx.Node, facts: FactsCache) -> Effect:
    """``operator.setitem(tensor, index, value)``: writes the tensor, reads the rest."""
    if not node.args or not isinstance(node.args[0], torch.fx.Node):
        return unknown_effect(node, "setitem of a constant")
    dst = node.args[0]
    nodes = tuple(tensor_nodes((node.args, node.kwargs)))
    return Effect(reads=nodes, writes=(dst,), note="setitem")


# ---------------------------------------------------------------------------
# higher-order ops


def _functional_hop(node: torch.fx.Node, facts: FactsCache) -> Effect:
    reads = tuple(tensor_nodes((node.args, node.kwargs)))
    multi = facts.outputs(node)
    outputs: dict[object, Sources] = {}
    if multi is not None:
        outputs = dict.fromkeys(range(len(multi)), ())
    return Effect(reads=reads, outputs=outputs, note="functional higher-order op")


def _triton_functional(node: torch.fx.Node, facts: FactsCache) -> Effect:
    kwargs = node.kwargs.get("kwargs")
    to_clone = node.kwargs.get("tensors_to_clone")
    if not isinstance(kwargs, dict) or not isinstance(to_clone, (list, tuple)):
        return unknown_effect(node, "triton_kernel_wrapper_functional without kwargs")
    outputs: dict[object, Sources] = {}
    for key, value in kwargs.items():
        if isinstance(value, torch.fx.Node):
            outputs[key] = () if key in to_clone else (value,)
    reads = tuple(tensor_nodes(kwargs))
    return Effect(reads=reads, outputs=outputs, note="triton functional")


def _triton_mutated_names(node: torch.fx.Node) -> list[str] | None:
    try:
        from torch._higher_order_ops.triton_kernel_wrap import get_mutated_tensors

        kwargs = node.kwargs["kwargs"]
        kernel, constants = node.kwargs["kernel_idx"], node.kwargs["constant_args_idx"]
        tma = node.kwargs.get("tma_descriptor_metadata", {})
        if not (isinstance(kwargs, dict) and isinstance(kernel, int) and isinstance(constants, int)):
            return None
        if not isinstance(tma, dict):
            return None
        values = {k: meta_value(v) if isinstance(v, torch.fx.Node) else v for k, v in kwargs.items()}
        return list(get_mutated_tensors(kernel, constants, values, tma))
    except Exception:  # no kernel side table, no Triton, or the analysis failed
        return None


def _triton_mutation(node: torch.fx.Node, facts: FactsCache) -> Effect:
    kwargs = node.kwargs.get("kwargs")
    if not isinstance(kwargs, dict):
        return unknown_effect(node, "triton_kernel_wrapper_mutation without kwargs")
    reads = tuple(tensor_nodes(kwargs))
    names = _triton_mutated_names(node)
    if names is None:
        return Effect(reads=reads, writes=reads, note="triton kernel: mutated arguments unknown, all written")
    writes = tuple(tensor_nodes([kwargs[n] for n in names if n in kwargs]))
    return Effect(reads=reads, writes=writes, note="triton kernel")


def _with_effects(node: torch.fx.Node, facts: FactsCache) -> Effect:
    if len(node.args) < 2 or not isinstance(node.args[1], torch._ops.OpOverload):
        return unknown_effect(node, "with_effects of an unknown op")
    op = node.args[1]
    se = _schema_effect(op)
    bound: dict[str, Any] = {}
    for i, name in enumerate(se.names):
        if name in node.kwargs:
            bound[name] = node.kwargs[name]
        elif i + 2 < len(node.args):
            bound[name] = node.args[i + 2]
    written: list[torch.fx.Node] = []
    by_set: dict[str, list[torch.fx.Node]] = {}
    for name, aset, is_write in zip(se.names, se.arg_sets, se.arg_writes):
        nodes = tensor_nodes(bound.get(name))
        if is_write:
            written.extend(nodes)
        for s in aset:
            by_set.setdefault(s, []).extend(nodes)
    outputs: dict[object, Sources] = {0: ()}
    for k, aset in enumerate(se.out_sets):
        outputs[k + 1] = tuple(n for s in sorted(aset) for n in by_set.get(s, ()))
    reads = tuple(tensor_nodes((node.args[2:], node.kwargs)))
    return Effect(reads=reads, writes=tuple(written), outputs=outputs, note="with_effects")


# ---------------------------------------------------------------------------
# the table


def _hop_name(target: object) -> str | None:
    if isinstance(target, torch._ops.HigherOrderOperator):
        return str(target._name)
    return None


@dataclass(frozen=True)
class EffectTable:
    """Rules keyed by call target (or higher-order-op name), with a conservative default.

    Example
    -------
    >>> import torch
    >>> from aliasing import DEFAULT_EFFECTS, Effect
    >>> table = DEFAULT_EFFECTS.with_rule(torch.ops.aten.relu.default,
    ...                                   lambda node, facts: Effect(reads=(node.args[0],)))
    """

    rules: Mapping[object, EffectRule] = field(default_factory=dict)
    hop_rules: Mapping[str, EffectRule] = field(default_factory=dict)

    @cached_property
    def _op_rules(self) -> bool:
        """Whether some rule is keyed by an ``OpOverload`` (else op nodes skip the rule lookup)."""
        return any(isinstance(k, torch._ops.OpOverload) for k in self.rules)

    def with_rule(self, target: object, rule: EffectRule) -> EffectTable:
        """A new table with ``rule`` for ``target`` (an op, callable, or higher-order-op name)."""
        if isinstance(target, str):
            return EffectTable(self.rules, {**self.hop_rules, target: rule})
        return EffectTable({**self.rules, target: rule}, self.hop_rules)

    def short_effect(self, node: torch.fx.Node, facts: FactsCache) -> Effect | None:
        """The effect of a ``call_function`` node of an ``OpOverload`` the table has no rule for,
        when its template takes a short way (:func:`_short_way`: a *plain* op, one fresh tensor
        result, nothing written; a *view* op, its one result aliasing its first argument; a
        *mutator*, nothing returned, declared writes only; a *view-or-copy* op the trace recorded
        as a view; an *in-place* op, its first argument written and returned; a *list-view* op,
        each element of its result a view of its first argument), as :meth:`effect` gives it; None for
        any other node (and a template not computed yet). The analysis's short way for the most
        common calls, without :meth:`effect`'s dispatch.
        """
        op = node.target
        hit = _TEMPLATES.get(id(op))
        if hit is None or (self._op_rules and op in self.rules):
            return None
        se = hit[1]
        if not (se.plain or se.view or se.mutator or se.view_or_copy or se.inplace or se.list_view):
            return None
        args, kwargs = node.args, node.kwargs
        # (_matches_schema, inlined: this runs for most nodes of every analysis)
        if len(args) > len(se.names) or (kwargs and any(k not in se.index for k in kwargs)):
            return None  # (an argument mismatch: the general path's unknown effect)
        return _short_way(se, node, facts, args, kwargs)

    def effect(self, node: torch.fx.Node, facts: FactsCache) -> Effect:
        """The effect of one ``call_*`` node (``facts`` is the metadata cache to read through)."""
        if node.op == "call_method":
            op = resolve_overload(node)
            if op is not None:
                return schema_effect(node, facts, op)
            return unknown_effect(node, f"method {node.target} has no ATen schema that describes it")
        if node.op != "call_function":
            return unknown_effect(node, f"{node.op} is opaque")
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            rule = self.rules.get(target) if self._op_rules else None
            return rule(node, facts) if rule is not None else schema_effect(node, facts, target)
        rule = self.rules.get(target)
        if rule is not None:
            return rule(node, facts)
        hop = _hop_name(target)
        if hop is not None:
            if hop == "with_effects":
                return _with_effects(node, facts)
            hop_rule = self.hop_rules.get(hop)
            if hop_rule is not None:
                return hop_rule(node, facts)
            return unknown_effect(node, f"higher-order op {hop} is analysed as opaque")
        op = resolve_overload(node)
        if op is not None:
            return schema_effect(node, facts, op)
        return unknown_effect(node)


SCHEMA_EFFECTS = EffectTable(
    rules={
        operator.setitem: _setitem,
        **dict.fromkeys(PURE_OPERATORS, _python_operator),
        **dict.fromkeys(INPLACE_OPERATORS, _python_inplace_operator),
        **dict.fromkeys(SCALAR_FUNCTIONS, _scalar_function),
    },
    hop_rules={
        "auto_functionalized": _functional_hop,
        "auto_functionalized_v2": _functional_hop,
        "triton_kernel_wrapper_functional": _triton_functional,
        "triton_kernel_wrapper_mutation": _triton_mutation,
    },
)
