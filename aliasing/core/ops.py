"""Every fact the library knows about operators: one table per fact, then the per-release data.

Each table below says one thing about a set of operators (ATen schema names such
as ``"aten::view"``, overloads, higher-order op names, torch functions, Python
operators). Its ``#:`` comment says what it means, where it comes from and which
module reads it. The code that decides (the effect rules, the planner's
predicates, the lowering) lives in those modules and imports the tables from
here; this module imports nothing of the library. A table lists what is known:
an op it leaves out gets the conservative answer of the module that reads it.

The per-release data is read here too. The maintainer audits (``tools``, outside
the wheel) write it into ``aliasing/core/registry_data/``, one file per torch
release where the facts change with the release:

- ``torch-<release>.tsv``: the registry's classification of every ATen overload
  (:func:`committed_path`; :mod:`aliasing.core.registry` classifies the installed
  torch and compares);
- ``storage-<release>.tsv``: the storage-sharing audit's verdict per overload
  (:func:`storage_verdicts`, read once per release);
- ``layout-divergences.json``: the overloads whose meta or fake kernels lay
  results out otherwise than eager, on some release (:data:`LAYOUT_DIVERGENCES`,
  read at import; :mod:`aliasing.core.layout_divergences` describes the file
  and answers the queries).

Example
-------
>>> from aliasing.core import ops
>>> "aten::view" in ops.VIEWS, "aten::reshape" in ops.VIEWS
(True, False)
>>> ops.HIDDEN_EFFECTS["aten::batch_norm"].writes
('running_mean', 'running_var')
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import math
import operator
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

__all__ = [
    "AGREEING_SIBLINGS",
    "ALWAYS_MUTATING_SCATTERS",
    "ARANGES",
    "CANDIDATE_CALLS",
    "CHECKS",
    "COMMON_VIEWS",
    "COMPOSITE_RUNS",
    "CONTROL_FLOW_OPS",
    "COPIES",
    "DISTINCT_VIEW",
    "DTYPE_VIEWS",
    "ESCAPING_VIEWS",
    "FAKE_DIVERGENT_OVERLOADS",
    "FILLS",
    "HIDDEN_EFFECTS",
    "INDEXING",
    "INDEX_DIM_OPS",
    "INDEX_LIST_OPS",
    "INDEX_PUTS",
    "INPLACE_OPERATORS",
    "LAYOUT_DATA_FILE",
    "LAYOUT_DIVERGENCES",
    "LAYOUT_DIVERGENT_OVERLOADS",
    "LAYOUT_FREE_VIEWS",
    "METADATA_MUTATING",
    "METADATA_ONLY",
    "METADATA_READS",
    "NOT_KERNELS",
    "OVERWRITE_SELF",
    "PREFIX_REVIEWED",
    "PURE_OPERATORS",
    "REDUCTIONS",
    "REGISTRY_DATA",
    "RESHAPES",
    "REVIEWED",
    "SAME_SIGNATURE_METHODS",
    "SAME_SIGNATURE_WRAPPERS",
    "SCALAR_FUNCTIONS",
    "SCATTER_VIEWS",
    "SIZE_ONLY",
    "TORCH_CLONES",
    "TORCH_CLONE_KWARGS",
    "TORCH_VERSIONS",
    "TO_COPY_KWARGS",
    "VALUE_SAFE",
    "VIEWS",
    "WRAP_LIKE",
    "HiddenEffect",
    "LayoutDivergences",
    "committed_path",
    "storage_audit_path",
    "storage_verdicts",
    "torch_release",
]

aten = torch.ops.aten

# ---------------------------------------------------------------------------
# What a call reads and aliases (aliasing.core.effects, aliasing.core.fake_values)

#: Ops (overload or schema names) that read their arguments' metadata, not their data: the
#: analysis gives their calls no reads. Hand-written from the ops' meaning: metadata queries, and
#: fresh tensors shaped like their argument.
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

#: View ops (schema names) that always return a view of their input (never a copy): they read no
#: data. Hand-written; ``reshape``, ``contiguous`` and the like (a view or a copy) are not here.
VIEWS = frozenset(
    "aten::" + name
    for name in ["view", "_unsafe_view", "slice", "select", "narrow", "split", "split_with_sizes", "unsafe_split", "unsafe_split_with_sizes", "unbind", "chunk", "tensor_split", "transpose", "permute", "t", "expand", "expand_as", "unsqueeze", "squeeze", "diagonal", "as_strided", "alias", "detach", "_reshape_alias", "view_as", "unflatten", "movedim", "moveaxis", "unfold", "real", "imag", "view_as_real", "view_as_complex", "swapaxes", "swapdims", "numpy_T", "matrix_H", "mT", "mH", "adjoint", "_conj", "_neg_view", "lift_fresh", "indices", "values", "crow_indices", "col_indices", "ccol_indices", "row_indices"]
)

#: Ops (schema names) that overwrite their first argument without reading its old value: the
#: analysis counts no read of it. (Narrower than :data:`FILLS`, the planner's table.)
OVERWRITE_SELF = frozenset({"aten::copy_"})

#: Ops (``str(overload)``) a recording of a decomposition leaves out
#: (:func:`aliasing.core.effects.decomposition`): they read metadata and compute nothing.
NOT_KERNELS = frozenset({"prim.device.default", "aten.sym_size.int", "aten.sym_stride.int", "aten.sym_numel.default"})

#: View ops (overloads) most graphs call, looked up first through FX's index of nodes by target
#: (no pass over the graph): one of them tells whether a graph's fake values keep storage
#: identity in most graphs (:mod:`aliasing.core.fake_values`).
COMMON_VIEWS = tuple(
    getattr(aten, name).default
    for name in ("view", "t", "permute", "expand", "unsqueeze", "_unsafe_view", "alias", "detach")
) + (
    aten.slice.Tensor,
    aten.select.int,
    aten.transpose.int,
    aten.squeeze.dim,
    aten.as_strided.default,
)

# ---------------------------------------------------------------------------
# Effects that schemas do not declare (aliasing.core.effects, aliasing.core.registry)


@dataclasses.dataclass(frozen=True)
class HiddenEffect:
    """What one op does beyond its schema (an entry of :data:`HIDDEN_EFFECTS`).

    Attributes
    ----------
    writes
        Names of arguments the op may write in place although the schema does
        not mark them ``!``.
    unless_false
        Name of a ``bool`` argument: the hidden writes happen only when it is
        not the literal ``False`` (``training`` of batch norm). ``None``: always.
    view_of
        Name of the argument the op's (single) result may be a view of (or
        the very tensor), although the schema declares a fresh tensor.
    evidence
        Where the entry comes from (the audit's finding, the test that shows it).
    """

    writes: tuple[str, ...] = ()
    unless_false: str | None = None
    view_of: str | None = None
    evidence: str = ""


_RUNNING_STATS = ("running_mean", "running_var")

_BATCH_NORM_EVIDENCE = (
    "audit: nn.functional.batch_norm, function variant, sample 0 (float32[5, 5, 5], running stats, "
    "training=True, momentum=0.5) traced with torch.export (IR op aten.batch_norm.default): the real run "
    "changes running_mean and running_var in place; likewise extra.BatchNorm1d.train and "
    "extra.BatchNorm2d.train (functional_call of the modules, exported); tests/aliasing/core/test_hidden_effects.py"
)
_NATIVE_BATCH_NORM_EVIDENCE = (
    "audit: native_batch_norm, function sample 0 (float32[5, 5, 5], training=True, momentum=0.5) with "
    "make_fx and torch.export, and its out= overload (native_batch_norm.out; out, out_empty, "
    "out_wrong_shape variants); nn.functional.batch_norm and nn.functional.instance_norm traced with make_fx, "
    "which decomposes both to aten.native_batch_norm.default: running_mean and running_var change in place"
)
_INSTANCE_NORM_EVIDENCE = (
    "audit: nn.functional.instance_norm, function sample 0 (float32[5, 5, 5], running_mean/running_var, "
    "use_input_stats defaulting to True) traced with torch.export (IR op aten.instance_norm.default), and "
    "extra.InstanceNorm1d.track_running_stats.train: the running statistics change in place"
)
_BY_ANALOGY = (
    "not reached by the CPU audit ({why}); same running-statistics contract as aten::native_batch_norm, "
    "which the audit shows writing them"
)

_DROPOUT_EVIDENCE = (
    "returns its input itself (not a copy) when p == 0 or train is False (ATen's _dropout_impl); "
    "the schema declares a fresh tensor. audit: nn.functional.dropout, function variant, the samples "
    "with p=0.0 or training=False traced with torch.export (whose IR keeps aten.dropout), e.g. sample 0 "
    "(float32[5, 5], p=0.0, training=True): may_alias(input, dropout) was False; tests/aliasing/core/test_hidden_effects.py"
)
_SAME_IMPL_EVIDENCE = (
    "same ATen code path as aten::dropout (_dropout_impl): the input itself when p == 0 or train is False "
    "(checked for real in tests/aliasing/core/test_hidden_effects.py; torch.export decomposes this op, so the OpInfo "
    "audit reaches it only through the graphs it decomposes to)"
)

_RETURNS_SELF_EVIDENCE = (
    "returns its input itself (not a copy) when {when} (a CompositeImplicit op that calls "
    "self.to(...)); the schema declares a fresh tensor. A program loaded with torch.export.load gives "
    "the result a fake storage of its own, so only this entry keeps the alias: "
    "tests/aliasing/core/test_hidden_effects.py (a clone of type_as(x, y) written in place, removed wrongly without it)"
)
_CAST_EVIDENCE = _RETURNS_SELF_EVIDENCE.format(when="the input already has the dtype it casts to")

#: Effects that op schemas do not declare, by schema name (every overload of the op): arguments
#: written without a ``!``, a result that may be a view of an argument the schema calls fresh.
#: Schemas are evidence, not proof. Each entry carries the evidence that put it there: the
#: real-execution audit (``python -m tools.audit``) over PyTorch's operator database, and the
#: tests that reproduce it (tests/aliasing/core/test_hidden_effects.py). The effect rules merge an
#: entry into the schema's annotations, so it only ever *adds* effects (writes, aliasing); the
#: registry classifies the op ``hidden-effects``.
HIDDEN_EFFECTS: Mapping[str, HiddenEffect] = MappingProxyType(
    {
        "aten::type_as": HiddenEffect(
            view_of="self", evidence=_RETURNS_SELF_EVIDENCE.format(when="other has the input's dtype")
        ),
        **{
            f"aten::_cast_{kind}": HiddenEffect(view_of="self", evidence=_CAST_EVIDENCE)
            for kind in ("Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short")
        },
        "aten::lift": HiddenEffect(
            view_of="self",
            evidence="real execution: aten.lift(x) is x outside functionalization (its schema declares a "
            "fresh tensor); tests/aliasing/core/test_hidden_effects.py",
        ),
        "aten::dropout": HiddenEffect(view_of="input", evidence=_DROPOUT_EVIDENCE),
        "aten::feature_dropout": HiddenEffect(view_of="input", evidence=_SAME_IMPL_EVIDENCE),
        "aten::alpha_dropout": HiddenEffect(view_of="input", evidence=_SAME_IMPL_EVIDENCE),
        "aten::feature_alpha_dropout": HiddenEffect(view_of="input", evidence=_SAME_IMPL_EVIDENCE),
        "aten::batch_norm": HiddenEffect(writes=_RUNNING_STATS, unless_false="training", evidence=_BATCH_NORM_EVIDENCE),
        "aten::native_batch_norm": HiddenEffect(
            writes=_RUNNING_STATS, unless_false="training", evidence=_NATIVE_BATCH_NORM_EVIDENCE
        ),
        "aten::_batch_norm_impl_index": HiddenEffect(
            writes=_RUNNING_STATS,
            unless_false="training",
            evidence=_BY_ANALOGY.format(why="make_fx and torch.export trace through it on CPU"),
        ),
        "aten::cudnn_batch_norm": HiddenEffect(
            writes=_RUNNING_STATS, unless_false="training", evidence=_BY_ANALOGY.format(why="a CUDA kernel")
        ),
        "aten::miopen_batch_norm": HiddenEffect(
            writes=_RUNNING_STATS, unless_false="training", evidence=_BY_ANALOGY.format(why="a ROCm kernel")
        ),
        "aten::instance_norm": HiddenEffect(
            writes=_RUNNING_STATS, unless_false="use_input_stats", evidence=_INSTANCE_NORM_EVIDENCE
        ),
        "aten::_unsafe_view": HiddenEffect(
            view_of="self",
            evidence="real execution: the result shares its argument's storage (the op is view without the "
            "view annotation, emitted by decompositions of reshape)",
        ),
    }
)

# ---------------------------------------------------------------------------
# How each ATen overload's effects are known (aliasing.core.registry)

#: Ops (schema names, every overload) that change an argument's storage, sizes or strides in place.
#: Ops tagged ``inplace_view`` (``t_``, ``as_strided_``, ...) are metadata-mutating as well.
METADATA_MUTATING = frozenset(
    {
        "aten::set_",  # takes another storage (or an empty one)
        "aten::_unsafe_set",
        "aten::set_data",  # ``x.data = y``: x takes y's storage and metadata
        "aten::shallow_copy_data_",  # torch 2.14: x takes source's storage, as set_ (AOTAutograd's ``x.data = ...``)
        "aten::swap_",
        "aten::resize_",
        "aten::resize_as_",
        "aten::_resize_output_",
        "aten::resize_as_sparse_",
        "aten::sparse_resize_",
        "aten::sparse_resize_and_clear_",
        "aten::_coalesced_",  # changes a sparse tensor's flags
    }
)

_FOREACH = "foreach in-place op: writes the tensors of its first (list) argument, values only"
_OPTIMIZER = "fused optimizer step: writes the declared tensor lists' values in place; no metadata change"
_OUT_POSITIONAL = "out-style op whose output tensor is positional: writes only the declared argument's values"
_AMP = "AMP scaler op: writes the declared found_inf / growth_tracker / scale values in place"
_RANDOM_INIT = "initialiser: fills the declared tensor's values (random or constant), metadata unchanged"
_INPLACE_NO_FUNCTIONAL = "in-place op over its first argument's values; no functional variant of the same name"
_NOISE = "writes the declared noise tensor's values (training mode); the result is fresh"
_QUANT = "fake-quantisation observer: writes the declared running min/max, scale and zero_point values"
_MAYBE_ALIAS = "may return its argument itself (declared Tensor(a) / Tensor(b|a)): the analysis takes the alias"
_BATCH_NORM = "batch norm that declares its running-statistics writes (running_mean!, running_var!)"
_NO_DATA = "touches no tensor data or metadata (autograd or stream bookkeeping)"

#: Ops (schema names: every overload) whose schema a person read and found complete although no
#: rule of the registry fits, with the reason recorded.
REVIEWED: Mapping[str, str] = MappingProxyType(
    {
        # writes declared, no functional twin by name
        "aten::fill_diagonal_": _INPLACE_NO_FUNCTIONAL,
        "aten::_no_grad_fill_": _RANDOM_INIT,
        "aten::_no_grad_zero_": _RANDOM_INIT,
        "aten::_no_grad_normal_": _RANDOM_INIT,
        "aten::_no_grad_uniform_": _RANDOM_INIT,
        "aten::_philox_uniform_": _RANDOM_INIT,
        "aten::_philox_normal_": _RANDOM_INIT,
        "aten::_fill_mem_eff_dropout_mask_": _RANDOM_INIT,
        "aten::_sobol_engine_initialize_state_": _INPLACE_NO_FUNCTIONAL,
        "aten::_sobol_engine_scramble_": _INPLACE_NO_FUNCTIONAL,
        "aten::_sobol_engine_ff_": _INPLACE_NO_FUNCTIONAL,
        "aten::copy_sparse_to_sparse_": _INPLACE_NO_FUNCTIONAL,
        "aten::embedding_renorm_": _INPLACE_NO_FUNCTIONAL,
        "aten::requires_grad_": _NO_DATA,
        "aten::retain_grad": _NO_DATA,
        "aten::record_stream": _NO_DATA,
        "aten::_cummax_helper": _OUT_POSITIONAL,
        "aten::_cummin_helper": _OUT_POSITIONAL,
        "aten::fbgemm_linear_fp16_weight": _OUT_POSITIONAL,
        "aten::fbgemm_linear_fp16_weight_fp32_activation": _OUT_POSITIONAL,
        "aten::_flash_attention_forward_no_dropout_inplace": _OUT_POSITIONAL,
        "aten::_cudnn_attention_forward_no_dropout_inplace": _OUT_POSITIONAL,  # torch 2.15
        "aten::rrelu_with_noise": _NOISE,
        "aten::rrelu_with_noise_": _NOISE,
        "aten::fused_moving_avg_obs_fake_quant": _QUANT,
        "aten::_fused_moving_avg_obs_fq_helper": _QUANT,
        "aten::_amp_foreach_non_finite_check_and_unscale_": _AMP,
        "aten::_amp_foreach_non_finite_check_and_unscale": _AMP,
        "aten::_amp_update_scale_": _AMP,
        "aten::_amp_update_scale": _AMP,
        "aten::_batch_norm_with_update": _BATCH_NORM,
        "aten::_native_batch_norm_legit": _BATCH_NORM,
        # aliases declared by the schema but not a plain view
        "aten::as_tensor": _MAYBE_ALIAS,
        "aten::cpu": _MAYBE_ALIAS,
        "aten::cuda": _MAYBE_ALIAS,
    }
)

#: Prefixes of schema names whose ops were reviewed as a family (:data:`REVIEWED`, by prefix).
PREFIX_REVIEWED: tuple[tuple[str, str], ...] = (
    ("aten::_foreach_", _FOREACH),
    ("aten::_fused_", _OPTIMIZER),
)

# ---------------------------------------------------------------------------
# Torch-level calls of torch.fx.symbolic_trace graphs (aliasing.core.resolve, aliasing.core.effects)

#: Python operators that read their tensor operands and return a fresh value.
PURE_OPERATORS = frozenset(
    {
        operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
        operator.pow, operator.matmul, operator.and_, operator.or_, operator.xor, operator.lshift,
        operator.rshift, operator.neg, operator.pos, operator.abs, operator.invert, operator.eq,
        operator.ne, operator.lt, operator.le, operator.gt, operator.ge, operator.not_, operator.truth,
    }
)  # fmt: skip

#: Python in-place operators: on a tensor they write and return their first operand.
INPLACE_OPERATORS = frozenset(
    {
        operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
        operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor, operator.ilshift,
        operator.irshift,
    }
)  # fmt: skip

#: Functions of numbers (SymInts, SymFloats, ints, floats): on such arguments they touch no tensor.
SCALAR_FUNCTIONS: frozenset[Any] = frozenset(
    {
        torch.sym_float, torch.sym_int, torch.sym_max, torch.sym_min, torch.sym_not, torch.sym_ite,
        torch.sym_sum, torch.sym_sqrt, math.sqrt, math.floor, math.ceil, math.trunc, math.exp, math.log,
        math.log2, math.pow, builtins.abs, builtins.min, builtins.max, builtins.int, builtins.float,
        builtins.round, builtins.bool,
    }
)  # fmt: skip

#: Python-level torch functions whose signature is the ATen op's of the same name.
SAME_SIGNATURE_WRAPPERS: frozenset[Any] = frozenset({torch.split, torch.Tensor.split})

#: Python-level tensor methods (defined in ``torch._tensor``) whose signature is ATen's.
SAME_SIGNATURE_METHODS = frozenset({"split"})

# ---------------------------------------------------------------------------
# Control-flow higher-order ops (aliasing.core.subgraphs)

#: Higher-order ops that call one subgraph on their operands, by name: the index of the subgraph
#: argument and of the first operand. ``cond`` and ``while_loop`` have rules of their own.
WRAP_LIKE: Mapping[str, tuple[int, int]] = {
    "wrap": (0, 1),
    "tag_activation_checkpoint": (0, 1),
    "wrap_activation_checkpoint": (0, 1),
    "invoke_subgraph": (0, 2),
    "wrap_with_set_grad_enabled": (1, 2),
    "wrap_with_autocast": (4, 5),
}

#: Names of the higher-order ops whose subgraphs the analysis reads
#: (:func:`aliasing.core.subgraphs.control_flow_rules`).
CONTROL_FLOW_OPS: tuple[str, ...] = ("cond", "while_loop", *WRAP_LIKE)

#: Views (schema names) that may reach memory outside their base's elements: a subgraph that
#: calls one is not summarised (R5 d of :mod:`aliasing.core.subgraphs`).
ESCAPING_VIEWS = frozenset({"aten::as_strided", "aten::as_strided_", "aten::_reshape_alias"})

# ---------------------------------------------------------------------------
# What the copy planner knows of ops (rewrite.planning.dataflow, planner, candidates).
# Hand-written from the ops' ATen definitions; an op left out is answered conservatively.

#: Ops (schema names) that write every element of their first argument without reading its old
#: value (:func:`rewrite.planning.dataflow.writes_all_of`, ``write_only_args``).
FILLS = frozenset({"aten::copy_", "aten::zero_", "aten::fill_"})

#: Non-pointwise ops that cannot raise because of the values they read (shapes fixed by the trace),
#: fills, and pointwise ops that raise on no value of any dtype (on integers, division, remainders
#: and powers do: those are not here). Schema names (:func:`rewrite.planning.dataflow.may_raise_on_values`).
VALUE_SAFE = frozenset(
    "aten::" + name
    for name in [
        "zero_", "fill_", "fill", "zero", "masked_fill", "masked_fill_", "where", "eq", "ne", "lt", "le", "gt",
        "ge", "logical_not", "logical_and", "logical_or", "logical_xor", "bitwise_not", "bitwise_and",
        "bitwise_or", "bitwise_xor", "add", "add_", "sub", "sub_", "mul", "mul_", "neg", "neg_", "abs", "abs_",
        "maximum", "minimum", "clamp", "clamp_", "clamp_min", "clamp_max", "sign", "flip", "roll", "slice_copy",
        "select_copy", "narrow_copy", "permute_copy", "transpose_copy", "t_copy", "expand_copy", "unsqueeze_copy",
        "squeeze_copy", "alias_copy", "detach_copy",
        "clone", "_to_copy", "copy_", "contiguous", "sum", "mean", "amax", "amin", "prod", "var", "std",
        "var_mean", "std_mean", "norm", "linalg_vector_norm", "_softmax", "_log_softmax", "softmax",
        "log_softmax", "cumsum", "cumprod", "mm", "bmm", "addmm", "matmul", "baddbmm", "dot", "cat", "stack",
        "all", "any", "repeat", "constant_pad_nd", "native_batch_norm", "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional", "native_layer_norm", "instance_norm", "batch_norm",
        "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "numel", "dim",
        "empty_like", "zeros_like", "ones_like", "full_like", "new_empty", "new_zeros", "new_ones", "new_full",
    ]
)  # fmt: skip

#: Views (schema names) whose element correspondence does not depend on strides (they never raise
#: on a layout, and a layout change of their input leaves which elements they see unchanged).
LAYOUT_FREE_VIEWS = frozenset(
    "aten::" + name
    for name in [
        "slice", "select", "narrow", "transpose", "permute", "t", "unsqueeze", "squeeze", "expand", "expand_as",
        "diagonal", "alias", "detach", "split", "split_with_sizes", "chunk", "unbind", "unfold", "movedim",
        "tensor_split", "swapaxes", "swapdims",
    ]
)  # fmt: skip

#: Views and reshapes (schema names) whose success depends on strides, never on values.
RESHAPES = frozenset({"aten::view", "aten::_unsafe_view", "aten::reshape"})

#: Reductions (schema names): their values may follow strides (summation order), but they never
#: raise on a layout.
REDUCTIONS = frozenset(
    "aten::" + name
    for name in ["sum", "mean", "amax", "amin", "prod", "var", "std", "norm", "linalg_vector_norm", "cumsum"]
)

#: Metadata reads (schema names) that a change of strides or storage offset leaves unchanged.
SIZE_ONLY = frozenset({"aten::sym_size", "aten::sym_numel", "aten::size", "aten::numel", "aten::dim"})

#: Copies and rearrangements (schema names): each output element is one input element, so their
#: values do not depend on the inputs' strides (no arithmetic whose order could follow them), and
#: they never raise on a layout. The planner recomputes their output layout (with the pointwise ops).
COPIES = frozenset(
    "aten::" + name
    for name in [
        "clone", "_to_copy", "repeat", "cat", "stack", "constant_pad_nd", "flip", "roll", "index_select",
        "gather", "take", "slice_copy", "select_copy", "narrow_copy", "permute_copy", "transpose_copy",
        "t_copy", "expand_copy", "unsqueeze_copy", "squeeze_copy", "alias_copy", "detach_copy",
    ]
)  # fmt: skip

#: Indexing ops (schema names) whose raising depends only on their integer (index) arguments'
#: values: the floating-point data they gather or scatter cannot make them raise.
INDEXING = frozenset(
    "aten::" + name
    for name in [
        "index", "index_put", "index_put_", "_index_put_impl", "_index_put_impl_", "index_select", "gather",
        "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_", "index_add",
        "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_", "take", "embedding",
    ]
)  # fmt: skip

#: Runtime checks and other ops with an effect beyond the memory they write, by schema name (also
#: in torch.fx's own table of side-effectful functions; named here so that no PyTorch version that
#: leaves one out there lets a check go): asserts, range constraints, their functional forms
#: (:func:`rewrite.planning.dataflow.is_side_effectful`).
CHECKS = frozenset(
    "aten::" + name
    for name in [
        "_assert_async", "_assert_scalar", "_assert_tensor_metadata", "sym_constrain_range",
        "sym_constrain_range_for_size", "_functional_assert_async", "_functional_assert_scalar",
        "_functional_sym_constrain_range", "_functional_sym_constrain_range_for_size", "_print",
    ]
)  # fmt: skip

#: Indexing ops (schema names) whose only value-dependent failure is an index out of range, called
#: ``op(self, indices)``: a list of index tensors for dimensions 0, 1, ...; None for a whole
#: dimension (C10 of :mod:`rewrite.planning.planner`) ...
INDEX_LIST_OPS = frozenset(
    {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl", "aten::_index_put_impl_"}
)
#: ... and those called ``op(self, dim, index, ...)``.
INDEX_DIM_OPS = frozenset(
    "aten::" + name
    for name in ["index_select", "index_add", "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_"]
)
#: Ops (schema names) whose result is ``range(start, end, step)`` of their integer arguments.
ARANGES = frozenset({"aten::arange"})

#: Torch-level spellings of ``aten.clone`` (``torch.fx.symbolic_trace`` graphs).
TORCH_CLONES = (torch.clone, torch.Tensor.clone)
#: Keywords of a torch-level clone candidate (:data:`TORCH_CLONES`, ``call_method`` ``clone``).
TORCH_CLONE_KWARGS = frozenset({"memory_format"})
#: Keywords of an ``aten._to_copy`` clone candidate: whether the copy changes nothing is
#: condition C1's job; a call with another keyword (``pin_memory``) is not a candidate.
TO_COPY_KWARGS = frozenset({"dtype", "layout", "device", "memory_format", "non_blocking"})
#: Targets of the planner's ``call_function`` copy candidates (:mod:`rewrite.planning.candidates`):
#: the clones, ``_to_copy`` and the ``copy_`` write-backs.
CANDIDATE_CALLS = (aten.clone.default, aten._to_copy.default, aten.copy_.default, *TORCH_CLONES)

# ---------------------------------------------------------------------------
# Functionalization's write-backs and views (rewrite.lowering; the hazard guard of rewrite.inductor reads SCATTER_VIEWS too)

#: Scatter ops (version-1 write-backs, overloads) and the view each one writes through.
SCATTER_VIEWS: Mapping[Any, Any] = {
    aten.slice_scatter.default: aten.slice.Tensor,
    aten.select_scatter.default: aten.select.int,
    aten.diagonal_scatter.default: aten.diagonal.default,
    aten.as_strided_scatter.default: aten.as_strided.default,
}

#: Dtype-changing views (overloads): a chain of views through one of them reaches a scatter
#: source the lowering's dtype-exact copies make, a dtype view back to the input's dtype
#: (:func:`rewrite.lowering.metadata.scatter_sources`).
DTYPE_VIEWS = frozenset({aten.view.dtype, aten.view_as_real.default, aten.view_as_complex.default})

# ---------------------------------------------------------------------------
# What composite ops run (aliasing.core.effects.decomposition)

#: The overloads a composite op's kernel may run on fake tensors, whatever its arguments' sizes and
#: layouts (its source: ``reshape`` views where the strides allow it, else clones contiguous and
#: views the copy): a call of one is judged by these without being run, also on symbolic sizes.
#: Checked by running each on fake tensors of several layouts at sizes 0, 1, 2 and 5, static and
#: symbolic (tests/aliasing/core/test_composite_runs.py). Other composite ops are run call by call.
COMPOSITE_RUNS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "aten.reshape.default": frozenset(
            {"aten.view.default", "aten._reshape_alias.default", "aten._unsafe_view.default", "aten.clone.default"}
        ),
    }
)

# ---------------------------------------------------------------------------
# What Inductor does with some ops (the hazard guard of rewrite.inductor)

#: The ``index_put`` overloads Inductor's ``reinplace_inplaceable_ops`` writes in place (besides the scatters).
INDEX_PUTS = frozenset({aten.index_put.default, aten._unsafe_index_put.default})

#: Scatters Inductor always lowers as a mutation (the views of its ``_ALWAYS_MUTATING_SCATTER_OPS``).
ALWAYS_MUTATING_SCATTERS = frozenset({aten.diagonal_scatter.default, aten.as_strided_scatter.default})

#: Overloads that read a tensor's metadata only (sizes, strides, numel, offset), never its values.
METADATA_READS = frozenset(
    {aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default}
)

#: A view op with no Inductor lowering or decomposition: Inductor calls it (an implicit fallback
#: kernel), so the caller gets a tensor object of its own (the joint-graph guard returns one
#: instead of a collapsing output).
DISTINCT_VIEW = aten.view_as.default

# ---------------------------------------------------------------------------
# Per-release data: aliasing/core/registry_data, written by the maintainer audits

#: The folder of the per-release data files (package data: the wheel ships it).
REGISTRY_DATA = Path(__file__).with_name("registry_data")


def torch_release(version: str | None = None) -> str:
    """``"2.14"`` for torch ``2.14.0+cu130`` (the installed one by default)."""
    parts = (version or torch.__version__).split("+")[0].split(".")
    return ".".join(parts[:2])


def committed_path(release: str | None = None) -> Path:
    """Where the registry's classification of a torch release is committed
    (``python -m tools.audit --registry --write`` writes it)."""
    return REGISTRY_DATA / f"torch-{release or torch_release()}.tsv"


def storage_audit_path(release: str | None = None) -> Path:
    """Where the storage-sharing audit of a torch release is committed
    (``python -m tools.audit --storage`` writes it)."""
    return REGISTRY_DATA / f"storage-{release or torch_release()}.tsv"


_VERDICTS: dict[str, Mapping[str, str]] = {}


def storage_verdicts(release: str | None = None) -> Mapping[str, str]:
    """The storage-sharing audit's verdict per ``pure`` overload of a release (``"aten::add.Tensor"``
    -> ``"fresh"``, ``"shares"`` or ``"not-run"``), read once; empty where no audit is committed."""
    release = release or torch_release()
    hit = _VERDICTS.get(release)
    if hit is None:
        path = storage_audit_path(release)
        verdicts: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if line and not line.startswith("#"):
                    overload, verdict = line.split("\t", 2)[:2]
                    verdicts[overload] = verdict
        hit = _VERDICTS[release] = MappingProxyType(verdicts)
    return hit


#: The layout audit's data file, in ``registry_data`` (``python -m tools.audit --layouts --write-table`` writes it).
LAYOUT_DATA_FILE = "layout-divergences.json"


def _op(overload: str) -> str:
    """``aten.roll`` of ``aten.roll.default`` (and of ``aten.roll``)."""
    return ".".join(overload.split(".")[:2])


@dataclasses.dataclass(frozen=True)
class LayoutDivergences:
    """The layout audit's table: what it saw diverge on some release, and saw agree on every one
    (:mod:`aliasing.core.layout_divergences` describes the data file and answers the queries)."""

    versions: dict[str, str]
    divergent: frozenset[str]
    fake: frozenset[str]
    siblings: frozenset[str]
    divergent_ops: frozenset[str] = dataclasses.field(init=False)
    fake_ops: frozenset[str] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "divergent_ops", frozenset(map(_op, self.divergent)))
        object.__setattr__(self, "fake_ops", frozenset(map(_op, self.fake)))

    @staticmethod
    def of(data: dict[str, Any]) -> LayoutDivergences:
        """The table of the data file's JSON object."""
        return LayoutDivergences(
            {str(r): str(d["torch_version"]) for r, d in data["releases"].items()},
            frozenset(data["layout_divergent"]),
            frozenset(data["fake_divergent"]),
            frozenset(data["agreeing_siblings"]),
        )

    @staticmethod
    def load() -> LayoutDivergences:
        """The table of the data file installed in this package's ``registry_data``."""
        text = (resources.files(__package__ or "aliasing.core") / "registry_data" / LAYOUT_DATA_FILE).read_text(
            encoding="utf-8"
        )
        return LayoutDivergences.of(json.loads(text))

    def listed(self, overload: str, *, fake: bool = False) -> bool:
        """Whether ``overload`` diverged (its fake kernel, with ``fake``), or is an overload of such an op not seen agree."""
        overloads, ops = (self.fake, self.fake_ops) if fake else (self.divergent, self.divergent_ops)
        op = _op(overload)
        if overload in overloads or op in overloads:  # ``aten.one_hot``: the op's function as a whole
            return True
        return op in ops and overload not in self.siblings


#: The layout audit's table, read once at import: the union of every supported release's results.
LAYOUT_DIVERGENCES = LayoutDivergences.load()
#: The torch releases the table was measured on, and the version of each.
TORCH_VERSIONS: dict[str, str] = dict(LAYOUT_DIVERGENCES.versions)
#: Overloads seen diverging, on meta or fake tensors (``aten.<op>`` alone: the op's function as a whole).
LAYOUT_DIVERGENT_OVERLOADS: frozenset[str] = LAYOUT_DIVERGENCES.divergent
#: Those whose fake kernel diverged (the recorded ``meta['val']`` of ``make_fx`` and ``torch.export``).
FAKE_DIVERGENT_OVERLOADS: frozenset[str] = LAYOUT_DIVERGENCES.fake
#: Overloads of those ops that the audit ran and never saw diverge (trusted; others of the ops are not).
AGREEING_SIBLINGS: frozenset[str] = LAYOUT_DIVERGENCES.siblings
