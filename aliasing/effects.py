"""Effects of ops on memory: a data table of rules with a conservative default.

An :class:`Effect` says which tensor arguments a node reads and writes, and, for
each of its outputs, which arguments that output may alias (an empty tuple
means a fresh allocation). The rules:

- ``OpOverload`` (ATen and custom ops): the schema's alias annotations.
  ``Tensor(a!)`` arguments are written (``out=`` too, by keyword or position);
  ``Tensor(a)`` returns alias the arguments of the same alias set; a return
  without annotation is fresh, unless the fake tensors show that the traced
  output shares the storage of an argument (``aten._unsafe_view``), in which
  case it aliases that argument. Pure view ops read no data (their users
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
- Control-flow higher-order ops (``cond``, ``while_loop``, ``invoke_subgraph``,
  ``wrap`` and its variants) by analysing their subgraphs
  (:mod:`aliasing.subgraphs`), falling back to unknown when that fails.
- Everything else (``call_method``, ``call_module``, Python callables,
  unrecognised higher-order ops) is unknown (:func:`unknown_effect`): it may
  read and write every tensor it can reach and may return an alias of any of
  them.

Rules are looked up in an :class:`EffectTable` that callers may extend
(``DEFAULT_EFFECTS.with_rule(target, rule)``); nothing mutates a global table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

import torch
import torch.fx

from aliasing.facts import FactsCache, TensorFacts

__all__ = [
    "unknown_effect",
    "Effect",
    "EffectRule",
    "EffectTable",
    "DEFAULT_EFFECTS",
    "SINGLE",
    "tensor_nodes",
    "mutates_metadata",
]

#: Output key of a node whose value is itself a tensor (not a tuple).
SINGLE: object = "<value>"

Sources = tuple[torch.fx.Node, ...]


@dataclass(frozen=True)
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


METADATA_ONLY = frozenset(
    {
        "aten::sym_size.int",
        "aten::sym_size",
        "aten::sym_stride.int",
        "aten::sym_stride",
        "aten::sym_numel",
        "aten::sym_storage_offset",
        "aten::size.int",
        "aten::size",
        "aten::stride.int",
        "aten::stride",
        "aten::numel",
        "aten::dim",
        "aten::is_contiguous",
        "aten::is_contiguous.memory_format",
        # fresh tensors shaped like their argument: they read its metadata, not its data
        "aten::empty_like",
        "aten::zeros_like",
        "aten::ones_like",
        "aten::full_like",
        "aten::rand_like",
        "aten::randn_like",
        "aten::randint_like",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::new_zeros",
        "aten::new_ones",
        "aten::new_full",
    }
)


#: View ops that always return a view of their input (never a copy): they read no data.
VIEWS = frozenset(
    "aten::" + name
    for name in (
        "view _unsafe_view slice select narrow split split_with_sizes unsafe_split unsafe_split_with_sizes "
        "unbind chunk tensor_split transpose permute t expand expand_as unsqueeze squeeze diagonal "
        "as_strided alias detach _reshape_alias view_as unflatten movedim moveaxis unfold real imag "
        "view_as_real view_as_complex swapaxes swapdims numpy_T matrix_H mT mH adjoint _conj _neg_view "
        "lift_fresh indices values crow_indices col_indices ccol_indices row_indices"
    ).split()
)

#: Ops whose result is a view of their first argument although their schema declares a
#: fresh tensor. (Fake-tensor evidence finds such results at trace time too, but not once
#: a rewrite has made the metadata stale, so these are listed.)
UNDECLARED_VIEWS = frozenset({"aten::_unsafe_view"})


@dataclass(frozen=True)
class _SchemaEffect:
    names: tuple[str, ...]
    kwarg_only: tuple[bool, ...]
    arg_sets: tuple[frozenset[str], ...]
    arg_writes: tuple[bool, ...]
    tensor_args: tuple[int, ...]  # indices of arguments whose type can hold tensors
    out_sets: tuple[frozenset[str], ...]
    list_return: bool  # a single Tensor[] return
    metadata_only: bool
    never_copies: bool  # a view op that always returns a view (reads no data)
    aliases_first_arg: bool  # returns a view of its first argument although the schema says fresh


@lru_cache(maxsize=None)
def _schema_effect(op: torch._ops.OpOverload) -> _SchemaEffect:
    from torch.utils._python_dispatch import get_alias_info

    info = get_alias_info(op)
    schema = op._schema
    returns = schema.returns
    list_return = len(returns) == 1 and str(returns[0].type).startswith("List[")
    name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    return _SchemaEffect(
        names=tuple(a.name for a in schema.arguments),
        kwarg_only=tuple(a.kwarg_only for a in schema.arguments),
        arg_sets=tuple(frozenset(a.alias_set) for a in info.args),
        arg_writes=tuple(bool(a.is_write) for a in info.args),
        tensor_args=tuple(i for i, a in enumerate(schema.arguments) if "Tensor" in str(a.type)),
        out_sets=tuple(frozenset(o.alias_set) for o in info.outs),
        list_return=list_return,
        metadata_only=name in METADATA_ONLY or schema.name in METADATA_ONLY,
        never_copies=schema.name in VIEWS,
        aliases_first_arg=schema.name in UNDECLARED_VIEWS,
    )


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

_METADATA_MUTATING = frozenset({"aten::set_", "aten::resize_", "aten::resize_as_", "aten::_unsafe_set", "aten::swap_"})


def mutates_metadata(target: object) -> bool:
    """True for ops that change their first argument's storage, sizes or strides in place
    (``set_``, ``resize_``, and the ``inplace_view`` ops such as ``t_`` and ``as_strided_``)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return torch.Tag.inplace_view in target.tags or target._schema.name in _METADATA_MUTATING


def schema_effect(node: torch.fx.Node, facts: FactsCache) -> Effect:
    """Effect of an ``OpOverload`` call from its schema (see module docstring)."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload):
        return unknown_effect(node)
    se = _schema_effect(op)
    if se.metadata_only:
        return _METADATA_ONLY_EFFECT
    args, kwargs = node.args, node.kwargs
    if len(args) > len(se.names) or any(k not in se.names for k in kwargs):
        return unknown_effect(node, "arguments do not match the schema")
    tensors: list[torch.fx.Node] = []
    writes: list[torch.fx.Node] = []
    by_set: dict[str, list[torch.fx.Node]] = {}
    for i in se.tensor_args:
        name = se.names[i]
        if name in kwargs:
            value = kwargs[name]
        elif i < len(args) and not se.kwarg_only[i]:
            value = args[i]
        else:
            continue
        nodes = _flat(value)
        if not nodes:
            continue
        tensors.extend(nodes)
        if se.arg_writes[i]:
            writes.extend(nodes)
        for s in se.arg_sets[i]:
            by_set.setdefault(s, []).extend(nodes)
    all_tensors = tuple(dict.fromkeys(tensors)) if len(tensors) > 1 else tuple(tensors)

    def sources(aset: frozenset[str]) -> Sources:
        if not aset:
            return ()
        out: list[torch.fx.Node] = []
        for s in sorted(aset):
            out.extend(by_set.get(s, ()))
        return tuple(dict.fromkeys(out))

    outputs: dict[object, Sources] = {}
    multi = facts.outputs(node)
    facts_per_key: dict[object, Optional[TensorFacts]]
    if se.list_return or len(se.out_sets) > 1:
        if multi is not None:
            keys: list[object] = list(range(len(multi)))
        else:
            keys = [] if se.list_return else list(range(len(se.out_sets)))
        for k in keys:
            aset = se.out_sets[0] if se.list_return else se.out_sets[k]  # type: ignore[index]
            outputs[k] = sources(aset)
        facts_per_key = {k: (multi[k] if multi is not None else None) for k in keys}  # type: ignore[index]
    elif len(se.out_sets) == 1:
        outputs[SINGLE] = sources(se.out_sets[0])
        facts_per_key = {SINGLE: facts.tensor(node)}
    else:
        facts_per_key = {}

    if se.aliases_first_arg and all_tensors and SINGLE in outputs and not outputs[SINGLE]:
        outputs[SINGLE] = (all_tensors[0],)  # e.g. _unsafe_view: a view its schema does not declare
    # Fake-tensor evidence: a "fresh" output that shares an argument's storage aliases it.
    # (Evidence only ever adds aliasing; metadata made stale by a rewrite cannot remove any.)
    arg_keys: Optional[dict[int, torch.fx.Node]] = None
    pure_view = not writes and bool(outputs) and all(outputs.values())
    read_aliased: set[torch.fx.Node] = set()
    for k, srcs in outputs.items():
        f: Optional[TensorFacts] = facts_per_key.get(k)
        if not srcs:
            if f is not None and all_tensors:
                if arg_keys is None:
                    arg_keys = _storage_keys(all_tensors, facts)
                hit = arg_keys.get(f.storage_key)
                if hit is not None:
                    outputs[k] = (hit,)
        elif pure_view and not se.never_copies:
            # An op that may return a view or a copy (reshape, contiguous) reads nothing
            # only when the trace shows it returned a view.
            if f is None or f.storage_key not in _storage_keys(srcs, facts):
                read_aliased.update(srcs)
    if pure_view:
        aliased = {n for srcs in outputs.values() for n in srcs}
        reads = tuple(n for n in all_tensors if n not in aliased or n in read_aliased)
    else:
        reads = all_tensors
    return Effect(reads=reads, writes=tuple(dict.fromkeys(writes)), outputs=outputs)


# ---------------------------------------------------------------------------
# higher-order ops


def _functional_hop(node: torch.fx.Node, facts: FactsCache) -> Effect:
    reads = tuple(tensor_nodes((node.args, node.kwargs)))
    multi = facts.outputs(node)
    outputs: dict[object, Sources] = {}
    if multi is not None:
        outputs = {k: () for k in range(len(multi))}
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


def _triton_mutated_names(node: torch.fx.Node) -> Optional[list[str]]:
    try:
        from torch._higher_order_ops.triton_kernel_wrap import get_mutated_tensors

        kwargs = node.kwargs["kwargs"]
        return list(
            get_mutated_tensors(
                node.kwargs["kernel_idx"],
                node.kwargs["constant_args_idx"],
                {k: v.meta.get("val") if isinstance(v, torch.fx.Node) else v for k, v in kwargs.items()},
                node.kwargs.get("tma_descriptor_metadata", {}),
            )
        )
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


def _hop_name(target: object) -> Optional[str]:
    if isinstance(target, torch._ops.HigherOrderOperator):
        return str(target.name())
    return None


@dataclass(frozen=True)
class EffectTable:
    """Rules keyed by call target (or higher-order-op name), with a conservative default.

    Example
    -------
    >>> import torch
    >>> from aliasing.effects import DEFAULT_EFFECTS, Effect
    >>> table = DEFAULT_EFFECTS.with_rule(torch.ops.aten.relu.default,
    ...                                   lambda node, facts: Effect(reads=(node.args[0],)))
    """

    rules: Mapping[object, EffectRule] = field(default_factory=dict)
    hop_rules: Mapping[str, EffectRule] = field(default_factory=dict)

    def with_rule(self, target: object, rule: EffectRule) -> "EffectTable":
        """A new table with ``rule`` for ``target`` (an op, callable, or higher-order-op name)."""
        if isinstance(target, str):
            return EffectTable(self.rules, {**self.hop_rules, target: rule})
        return EffectTable({**self.rules, target: rule}, self.hop_rules)

    def effect(self, node: torch.fx.Node, facts: FactsCache) -> Effect:
        """The effect of one ``call_*`` node (``facts`` is the metadata cache to read through)."""
        if node.op != "call_function":
            return unknown_effect(node, f"{node.op} is opaque")
        target = node.target
        rule = self.rules.get(target)
        if rule is not None:
            return rule(node, facts)
        if isinstance(target, torch._ops.OpOverload):
            return schema_effect(node, facts)
        hop = _hop_name(target)
        if hop is not None:
            if hop == "with_effects":
                return _with_effects(node, facts)
            hop_rule = self.hop_rules.get(hop)
            if hop_rule is not None:
                return hop_rule(node, facts)
            return unknown_effect(node, f"higher-order op {hop} is analysed as opaque")
        return unknown_effect(node)


DEFAULT_EFFECTS = EffectTable(
    rules={},
    hop_rules={
        "auto_functionalized": _functional_hop,
        "auto_functionalized_v2": _functional_hop,
        "triton_kernel_wrapper_functional": _triton_functional,
        "triton_kernel_wrapper_mutation": _triton_mutation,
    },
)


# Control-flow higher-order ops (cond, while_loop, invoke_subgraph, wrap-like ops) analyse their
# subgraphs; aliasing.subgraphs needs the names above, so it is imported last.
from aliasing.subgraphs import with_control_flow  # noqa: E402

DEFAULT_EFFECTS = with_control_flow(DEFAULT_EFFECTS)
