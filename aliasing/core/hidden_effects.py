"""Effects that op schemas do not declare: a table, each entry backed by evidence.

Schemas are evidence, not proof. Some ATen ops write an argument without a
``!`` in their schema, or return a view their schema calls fresh. Each such
op has one :class:`HiddenEffect` here, keyed by the schema name (it applies to
every overload of the op), with the evidence that put it there: the
real-execution audit (:mod:`tools.audit`, ``python -m tools.audit``)
over PyTorch's operator database, and the tests that reproduce it.

:mod:`aliasing.core.effects` merges these entries into the schema's annotations,
so an entry only ever *adds* effects (writes, aliasing); it never removes one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["HIDDEN_EFFECTS", "HiddenEffect"]


@dataclass(frozen=True)
class HiddenEffect:
    """What one op does beyond its schema.

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
