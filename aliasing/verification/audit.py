"""Effects audit: PyTorch's operator tests, run for real and checked with the memory oracle.

For every :class:`~torch.testing._internal.opinfo.core.OpInfo` in
``torch.testing._internal.common_methods_invocations.op_db`` (PyTorch's
operator database: every ATen op PyTorch ships tests for), the audit runs the
op's sample inputs on CPU in up to five *variants*:

- ``function``: the op itself (``op.op``);
- ``inplace``: its in-place variant (``op.inplace_variant``), if any;
- ``out``, ``out_empty``, ``out_wrong_shape``: its ``out=`` variant (if
  ``op.supports_out``) with ``out=`` tensors of the right size (``empty_like``
  of the functional result), of size 0 (``empty(0)``: the op must resize and
  reallocate them) and of a wrong shape (``empty(numel + 1)``: the op must
  resize them in place).

Each call is traced with ``make_fx(tracing_mode="fake")`` and, for the first
``export_samples`` samples of each op and variant, with
``torch.export.export`` (whose IR keeps ops such as ``aten.batch_norm`` that
``make_fx`` decomposes; export is slower, so only the first samples are
exported). Every graph is analysed with :func:`aliasing.analyze` and run on
fresh real copies of the sample's tensors (same sizes, strides, offsets and
storage sharing) under :func:`aliasing.verification.oracle.check_analysis`: every input
whose bytes really change must be reported written by the node that wrote it,
and every two values that really share storage (or bytes) must be reported
aliasing (overlapping).

Each (op, variant, sample, tracer) check ends as one :class:`SampleResult`:
``pass``, ``violation`` (the :class:`~aliasing.verification.oracle.AnalysisUnsound`
message), or ``skipped`` with a reason (the eager call raised, tracing failed,
non-CPU or non-strided tensors...). A skipped check is never counted as a
pass. Passing checks also count the analysis's *imprecision*: claims ("may
alias", "may overlap", "writes") that the run never confirmed.

Besides ``op_db``, the audit runs a few *extra* cases that op_db has no
OpInfo for: functional calls (``torch.func.functional_call``) of
``BatchNorm1d``/``BatchNorm2d`` in train and eval mode and of
``InstanceNorm1d(track_running_stats=True)``, whose running statistics are
graph inputs (``op_db`` already covers ``F.batch_norm`` and
``F.instance_norm`` with running statistics in train mode).

Run it with ``python -m aliasing.verification.audit`` (``--help`` for the options); it
needs ``expecttest`` (``torch.testing._internal`` imports it) and numpy (the
oracle), both in the ``test`` extra. ``python -m aliasing.verification.audit --layouts``
runs the layout audit instead (:mod:`aliasing.verification.layout_audit`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import itertools
import json
import sys
import traceback
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from aliasing.core.analysis import DEFAULT_EFFECTS, analyze
from aliasing.core.effects import EffectTable
from aliasing.errors import AuditError
from aliasing.verification import campaign
from aliasing.verification.campaign import CampaignError, CampaignOptions, Outcome, WorkItem
from aliasing.verification.oracle import AnalysisUnsound, check_analysis
from aliasing.verification.time_limit import SampleTimeout, time_limit

__all__ = [
    "TRACERS",
    "VARIANTS",
    "AuditError",
    "AuditReport",
    "SampleResult",
    "audit",
    "audit_item",
    "audited_ops",
    "main",
    "render_markdown",
]

#: The ways each op is called, in report order.
VARIANTS: tuple[str, ...] = ("function", "inplace", "out", "out_empty", "out_wrong_shape")
#: The ways each call is traced, in report order.
TRACERS: tuple[str, ...] = ("make_fx", "export")
#: CPU dtypes tried in this order; the first one the op supports is used.
DTYPE_PREFERENCE: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.complex64,
    torch.bool,
    torch.bfloat16,
    torch.float16,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.complex128,
)

_MESSAGE_LIMIT = 4000
_EXAMPLE_LIMIT = 300
_DETAILS_LIMIT = 5  # violations described in full per op (all are counted)


@dataclasses.dataclass(frozen=True)
class SampleResult:
    """The outcome of one check: one op, variant, sample and tracer.

    Attributes
    ----------
    op
        The op's key: the OpInfo's name, plus ``.variant_test_name`` if it has one.
    variant
        One of :data:`VARIANTS`.
    sample
        Index of the sample input in the op's ``sample_inputs`` (0-based).
    tracer
        One of :data:`TRACERS`.
    status
        ``"pass"``, ``"violation"`` or ``"skipped"``.
    reason
        For a skip: its category (``"eager call raised RuntimeError"``...).
    message
        For a violation: the oracle's message; for a skip: the error text.
    false_alias, false_overlap, false_writers
        Imprecise claims of a passing check (see :class:`aliasing.verification.oracle.Exactness`).
    examples
        Up to three imprecise claims, as text.
    trace_divergence
        Inputs the eager call changed but the traced graph's run did not (the
        graph does not represent the call; the analysis is checked on the graph).
    fake_mismatch
        Graph outputs whose real sizes or strides differ from their fake tensor
        in ``meta['val']`` (the analysis reads layouts from the fake tensors).
    graph_ops
        The ``call_function`` targets of the traced graph, in order, without repeats.
    sample_text
        A short description of the sample (shapes, dtypes, other arguments).
    """

    op: str
    variant: str
    sample: int
    tracer: str
    status: str
    reason: str = ""
    message: str = ""
    false_alias: int = 0
    false_overlap: int = 0
    false_writers: int = 0
    examples: tuple[str, ...] = ()
    trace_divergence: tuple[str, ...] = ()
    fake_mismatch: tuple[str, ...] = ()
    graph_ops: tuple[str, ...] = ()
    sample_text: str = ""

    @property
    def imprecise_claims(self) -> int:
        """Number of claims the run did not confirm."""
        return self.false_alias + self.false_overlap + self.false_writers


# ---------------------------------------------------------------------------
# which ops


@dataclasses.dataclass(frozen=True)
class _AuditedOp:
    """One entry of the audit: an OpInfo, or an extra case shaped like one."""

    key: str
    info: Any  # torch.testing._internal.opinfo.core.OpInfo, or _ExtraCase


class _ExtraCase:
    """A case op_db does not have, with the part of the OpInfo interface the audit uses."""

    inplace_variant: None = None
    supports_out = False

    def __init__(
        self, name: str, op: Callable[..., Any], samples: Callable[[torch.dtype], list[Any]]
    ) -> None:
        self.name = name
        self.variant_test_name = ""
        self.op = op
        self._samples = samples

    def supported_dtypes(self, device: str) -> set[torch.dtype]:
        return {torch.float32}

    def sample_inputs(self, device: str, dtype: torch.dtype, requires_grad: bool = False) -> list[Any]:
        return self._samples(dtype)


def _norm_module_case(name: str, make: Callable[[], torch.nn.Module], train: bool, shapes: Sequence[Sequence[int]]) -> _ExtraCase:
    """``functional_call`` of a norm module with its parameters and buffers as graph inputs."""
    from torch.testing._internal.opinfo.core import SampleInput as _SampleInput

    SampleInput: Any = _SampleInput  # untyped upstream
    template = make()
    names = [n for n, _ in template.named_parameters()] + [n for n, _ in template.named_buffers()]

    def call(x: torch.Tensor, *state: torch.Tensor) -> Any:
        module = make().train(train)
        return torch.func.functional_call(module, dict(zip(names, state)), (x,))

    def samples(dtype: torch.dtype) -> list[Any]:
        out = []
        for shape in shapes:
            module = make()
            with torch.no_grad():
                for p in module.parameters():
                    p.uniform_(0.5, 1.5)
                for _n, b in module.named_buffers():
                    if b.is_floating_point():
                        b.uniform_(0.1, 1.0)
            state = [t.detach().clone() for _, t in module.named_parameters()]
            state += [t.detach().clone() for _, t in module.named_buffers()]
            out.append(SampleInput(torch.randn(*shape, dtype=dtype), args=tuple(state)))
        return out

    return _ExtraCase(name, call, samples)


def _extra_cases() -> list[_ExtraCase]:
    nn = torch.nn
    return [
        _norm_module_case("extra.BatchNorm1d.train", lambda: nn.BatchNorm1d(3), True, [(4, 3), (2, 3, 5)]),
        _norm_module_case("extra.BatchNorm1d.eval", lambda: nn.BatchNorm1d(3), False, [(4, 3)]),
        _norm_module_case("extra.BatchNorm2d.train", lambda: nn.BatchNorm2d(2), True, [(3, 2, 4, 4)]),
        _norm_module_case(
            "extra.InstanceNorm1d.track_running_stats.train",
            lambda: nn.InstanceNorm1d(3, affine=True, track_running_stats=True),
            True,
            [(2, 3, 5)],
        ),
        _norm_module_case(
            "extra.InstanceNorm1d.track_running_stats.eval",
            lambda: nn.InstanceNorm1d(3, affine=True, track_running_stats=True),
            False,
            [(2, 3, 5)],
        ),
    ]


def _op_key(info: Any) -> str:
    variant = getattr(info, "variant_test_name", "")
    return f"{info.name}.{variant}" if variant else str(info.name)


def audited_ops(names: Sequence[str] | None = None, *, extra: bool = True) -> list[str]:
    """Keys of the ops the audit runs, in audit order (sorted).

    Parameters
    ----------
    names : sequence of str, optional
        OpInfo names (``"add"``, ``"nn.functional.batch_norm"``: every variant
        of that name) or keys (``"nn.functional.batch_norm.without_cudnn"``:
        one variant), or extra case names (``"extra.BatchNorm1d.train"``).
        ``None``: every op of ``op_db`` (and the extra cases).
    extra : bool
        Whether the extra cases (norm modules' functional calls) are included
        when ``names`` is ``None``.

    Returns
    -------
    list of str

    Raises
    ------
    AuditError
        If a name matches no op.

    Examples
    --------
    >>> audited_ops(["nn.functional.batch_norm"])
    ['nn.functional.batch_norm', 'nn.functional.batch_norm.without_cudnn']
    """
    return [op.key for op in _select(names, extra)]


def _select(names: Sequence[str] | None, extra: bool) -> list[_AuditedOp]:
    from torch.testing._internal.common_methods_invocations import op_db

    everything = [_AuditedOp(_op_key(info), info) for info in op_db]
    extras = [_AuditedOp(case.name, case) for case in _extra_cases()]
    if names is None:
        chosen = everything + (extras if extra else [])
    else:
        pool = everything + extras
        chosen = []
        for name in names:
            hits = [op for op in pool if op.key == name or op.info.name == name]
            if not hits:
                raise AuditError(f"no OpInfo or extra case named {name!r} (see audited_ops())")
            chosen.extend(h for h in hits if h not in chosen)
    return sorted(chosen, key=lambda op: op.key)


_OP_TABLE: dict[str, _AuditedOp] = {}


def _op_by_key(key: str) -> _AuditedOp:
    """The op of ``key`` (built once per process: a campaign's worker looks its items up here)."""
    if not _OP_TABLE:
        _OP_TABLE.update((op.key, op) for op in _select(None, True))
    if key not in _OP_TABLE:
        raise AuditError(f"no OpInfo or extra case with the key {key!r} (see audited_ops())")
    return _OP_TABLE[key]


def _pick_dtype(info: Any) -> torch.dtype | None:
    supported = set(info.supported_dtypes("cpu"))
    for dtype in DTYPE_PREFERENCE:
        if dtype in supported:
            return dtype
    return min(supported, key=str) if supported else None


# ---------------------------------------------------------------------------
# one sample


class _Skip(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def _error_text(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + " ..."


def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        extra = "" if value.is_contiguous() or value.numel() <= 1 else f" strides={tuple(value.stride())}"
        return f"{dtype}{list(value.shape)}{extra}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_describe_value(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_describe_value(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _describe(sample: Any) -> str:
    text = f"input={_describe_value(sample.input)}"
    if sample.args:
        text += f" args={_describe_value(tuple(sample.args))}"
    if sample.kwargs:
        text += f" kwargs={_describe_value(dict(sample.kwargs))}"
    return text if len(text) <= _EXAMPLE_LIMIT else text[:_EXAMPLE_LIMIT] + " ..."


_Snapshot = tuple[torch.Tensor, tuple[Any, ...]]


def _snapshot(t: torch.Tensor) -> _Snapshot | None:
    """The bytes of ``t``'s whole storage and its layout, to tell later whether anything changed."""
    try:
        data = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).clone()
        return data, (tuple(t.shape), t.stride(), t.storage_offset())
    except Exception:  # not a strided CPU tensor: nothing to compare
        return None


def _changed(before: Sequence[_Snapshot | None], after: Sequence[torch.Tensor]) -> set[int]:
    changed: set[int] = set()
    for i, (old, t) in enumerate(zip(before, after)):
        new = _snapshot(t)
        if old is None or new is None:
            continue
        if old[1] != new[1] or old[0].numel() != new[0].numel() or not torch.equal(old[0], new[0]):
            changed.add(i)
    return changed


def _check_tensor(t: torch.Tensor) -> None:
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise _Skip("tensor subclass", type(t).__name__)
    if t.device.type != "cpu":
        raise _Skip("non-CPU tensor", str(t.device))
    if t.layout is not torch.strided:
        raise _Skip("non-strided layout (sparse, mkldnn, ...)", str(t.layout))
    if t.is_quantized:
        raise _Skip("quantized tensor", str(t.dtype))
    if t.is_nested:
        raise _Skip("nested tensor")


def _out_names(fn: Any, count: int) -> list[str] | None:
    """The names of the ``out=`` arguments of ``fn``'s ``out`` overload, for ``torch.ops`` packets."""
    if not isinstance(fn, torch._ops.OpOverloadPacket) or count < 2:
        return None
    overloads: list[str] = fn.overloads()  # type: ignore[no-untyped-call]
    if "out" not in overloads:
        return None
    schema = fn.out._schema
    names = [
        a.name for a in schema.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
    ]
    return names if len(names) == count else None


class _Call:
    """One variant of one sample as a function of its tensors only (other arguments are constants)."""

    def __init__(self, fn: Callable[..., Any], sample: Any, out_kind: str | None) -> None:
        leaves, self.spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
        self.leaves = leaves
        self.slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        tensors: list[torch.Tensor] = [leaves[i] for i in self.slots]
        for t in tensors:
            _check_tensor(t)
        self.fn = fn
        self.out_spec: pytree.TreeSpec | None = None
        self.out_count = 0
        self.pristine = copy.deepcopy(tensors)  # preserves sizes, strides, offsets, shared storage
        if out_kind is not None:
            expected = self._invoke(copy.deepcopy(self.pristine), None)
            outs, self.out_spec = pytree.tree_flatten(expected)
            if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
                raise _Skip("out= variant: the result is not tensors", type(expected).__name__)
            made = [self._make_out(o, out_kind) for o in outs]
            self.out_count = len(made)
            self.pristine = self.pristine + made

    @staticmethod
    def _make_out(result: torch.Tensor, kind: str) -> torch.Tensor:
        # Filled with a value results seldom have, so that the oracle sees the op's writes
        # (a write that stores the bytes already there is invisible to it).
        fill = True if result.dtype is torch.bool else 77
        if kind == "out":
            return torch.full_like(result, fill)  # same sizes and strides as the result
        if kind == "out_empty":
            return torch.empty(0, dtype=result.dtype)
        return torch.full((result.numel() + 1,), fill, dtype=result.dtype)  # out_wrong_shape

    def _invoke(self, tensors: Sequence[torch.Tensor], outs: Sequence[torch.Tensor] | None) -> Any:
        leaves = list(self.leaves)
        for i, t in zip(self.slots, tensors):
            leaves[i] = t
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        if outs is not None:
            assert self.out_spec is not None
            structured = pytree.tree_unflatten(list(outs), self.out_spec)
            named = _out_names(self.fn, len(outs))
            if named is not None and isinstance(structured, (tuple, list)):
                # an ATen op called through torch.ops takes its out= tensors by name
                kwargs = {**kwargs, **dict(zip(named, outs))}
            else:
                kwargs = {**kwargs, "out": tuple(structured) if isinstance(structured, (tuple, list)) else structured}
        return self.fn(inp, *args, **kwargs)

    def __call__(self, *tensors: torch.Tensor) -> Any:
        n = len(self.slots)
        outs = tensors[n:] if self.out_spec is not None else None
        return self._invoke(tensors[:n], outs)

    def fresh(self) -> list[torch.Tensor]:
        return copy.deepcopy(self.pristine)


class _Exported(torch.nn.Module):
    def __init__(self, call: _Call) -> None:
        super().__init__()
        self.call = call

    def forward(self, *tensors: torch.Tensor) -> Any:
        return self.call(*tensors)


def _graph_ops(gm: torch.fx.GraphModule) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for n in gm.graph.nodes:
        if n.op == "call_function":
            target = n.target
            name = str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", repr(target))
            seen[str(name)] = None
    return tuple(seen)


def _export_inputs(ep: torch.export.ExportedProgram, user: list[torch.Tensor]) -> list[Any]:
    from torch.export.graph_signature import InputKind

    state = ep.state_dict
    values: list[Any] = []
    user_iter = iter(user)
    for spec in ep.graph_signature.input_specs:
        if spec.kind is InputKind.USER_INPUT:
            values.append(next(user_iter))
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and spec.target in state:
            values.append(copy.deepcopy(state[spec.target].detach()))
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.BUFFER) and spec.target in ep.constants:
            values.append(copy.deepcopy(ep.constants[spec.target]))
        else:
            raise _Skip("export: unsupported graph input kind", str(spec.kind))
    return values


def _trace_failure(tracer: str, err: BaseException) -> str:
    reason = f"{tracer} failed: {type(err).__name__}"
    frames = {f.name for f in traceback.extract_tb(err.__traceback__)}
    if isinstance(err, IndexError) and "produce_guards_verbose" in frames:
        reason += " (guards on an input that the call resized to another rank)"
    return reason


def _seed(op: str, variant: str, index: int) -> int:
    return zlib.crc32(f"{op}/{variant}/{index}".encode()) & 0x7FFFFFFF


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def _fake_mismatch(gm: torch.fx.GraphModule, inputs: list[Any], seed: int) -> tuple[str, ...]:
    """Outputs whose real layout differs from the layout their fake tensor claims."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    returned = pytree.tree_leaves(output.args)
    torch.manual_seed(seed)
    real = pytree.tree_leaves(torch.fx.Interpreter(gm).run(*inputs))
    found: list[str] = []
    for _i, (node, value) in enumerate(zip(returned, real)):
        if not isinstance(node, torch.fx.Node) or node.op == "placeholder":
            continue  # an input's fake tensor describes it on entry, before any resize
        fake = node.meta.get("val")
        if not isinstance(fake, torch.Tensor) or not isinstance(value, torch.Tensor):
            continue
        try:
            claimed = tuple(int(x) for x in fake.shape), tuple(int(x) for x in fake.stride()), int(fake.storage_offset())
        except Exception:  # symbolic: nothing to compare
            continue
        if claimed != _layout(value):
            found.append(f"{node.name}: fake sizes/strides/offset {claimed}, real {_layout(value)}")
    return tuple(found)


def _check_graph(
    gm: torch.fx.GraphModule,
    target: Any,
    inputs: list[Any],
    again: list[Any],
    watched: Sequence[torch.Tensor],
    eager_changed: set[int],
    effects: EffectTable,
    seed: int,
    base: dict[str, Any],
) -> SampleResult:
    ops = _graph_ops(gm)
    try:
        analysis = analyze(target, effects=effects)
    except Exception as err:
        return SampleResult(**base, status="skipped", reason=f"analysis raised {type(err).__name__}", message=_error_text(err), graph_ops=ops)
    before = [_snapshot(t) for t in watched]
    torch.manual_seed(seed)
    try:
        exact = check_analysis(analysis, gm, inputs)
    except AnalysisUnsound as err:
        try:
            lies = _fake_mismatch(gm, again, seed)
        except Exception:  # diagnosis only
            lies = ()
        return SampleResult(**base, status="violation", message=_error_text(err), fake_mismatch=lies, graph_ops=ops)
    except Exception as err:
        return SampleResult(**base, status="skipped", reason=f"graph run raised {type(err).__name__}", message=_error_text(err), graph_ops=ops)
    graph_changed = _changed(before, watched)
    try:
        mismatch = _fake_mismatch(gm, again, seed)
    except Exception as err:  # the check ran the graph already: report, do not fail
        mismatch = (f"second run raised {type(err).__name__}",)
    divergence = tuple(f"input {i}" for i in sorted(eager_changed - graph_changed))
    examples = (
        [f"may_alias({a}, {b})" for a, b in exact.false_alias[:1]]
        + [f"may_overlap({a}, {b})" for a, b in exact.false_overlap[:1]]
        + [f"{w} in writers({v})" for w, v in exact.false_writers[:1]]
    )
    return SampleResult(
        **base,
        status="pass",
        false_alias=len(exact.false_alias),
        false_overlap=len(exact.false_overlap),
        false_writers=len(exact.false_writers),
        examples=tuple(examples),
        trace_divergence=divergence,
        fake_mismatch=mismatch,
        graph_ops=ops,
    )


def _run_sample(
    key: str,
    fn: Callable[..., Any],
    variant: str,
    index: int,
    sample: Any,
    export: bool,
    effects: EffectTable,
    timeout: float | None,
) -> list[SampleResult]:
    from torch.fx.experimental.proxy_tensor import make_fx

    tracers = TRACERS if export else TRACERS[:1]
    common: dict[str, Any] = {"op": key, "variant": variant, "sample": index}
    text = ""
    with contextlib.suppress(Exception):  # a description is best effort
        text = _describe(sample)
    results: list[SampleResult] = []

    def skip_all(reason: str, detail: str) -> list[SampleResult]:
        return [
            SampleResult(**common, tracer=t, status="skipped", reason=reason, message=detail, sample_text=text)
            for t in tracers
        ]

    seed = _seed(key, variant, index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with time_limit(timeout):
                try:
                    torch.manual_seed(seed)
                    call = _Call(fn, sample, variant if variant.startswith("out") else None)
                except _Skip:
                    raise
                except Exception as err:
                    raise _Skip(f"eager call raised {type(err).__name__}", _error_text(err)) from err
                eager_inputs = call.fresh()
                before = [_snapshot(t) for t in eager_inputs]
                torch.manual_seed(seed)
                try:
                    call(*eager_inputs)
                except Exception as err:
                    raise _Skip(f"eager call raised {type(err).__name__}", _error_text(err)) from err
                eager_changed = _changed(before, eager_inputs)

                for tracer in tracers:
                    base = {**common, "tracer": tracer, "sample_text": text}
                    torch.manual_seed(seed)
                    try:
                        if tracer == "make_fx":
                            gm = make_fx(call, tracing_mode="fake")(*call.fresh())
                            target: Any = gm
                            inputs = call.fresh()
                            watched = inputs
                            again = call.fresh()
                        else:
                            ep = torch.export.export(_Exported(call), tuple(call.fresh()), strict=False)
                            gm, target = ep.graph_module, ep
                            watched = call.fresh()
                            inputs = _export_inputs(ep, watched)
                            again = _export_inputs(ep, call.fresh())
                    except _Skip as skip:
                        results.append(SampleResult(**base, status="skipped", reason=skip.reason, message=skip.detail))
                        continue
                    except Exception as err:
                        results.append(
                            SampleResult(**base, status="skipped", reason=_trace_failure(tracer, err), message=_error_text(err))
                        )
                        continue
                    results.append(_check_graph(gm, target, inputs, again, watched, eager_changed, effects, seed, base))
        except _Skip as skip:
            return skip_all(skip.reason, skip.detail)
        except SampleTimeout:
            done = {r.tracer for r in results}
            return results + [
                SampleResult(**common, tracer=t, status="skipped", reason="timeout", message=f"over {timeout} s", sample_text=text)
                for t in tracers
                if t not in done
            ]
        except Exception as err:  # anything else: this sample, not the audit
            done = {r.tracer for r in results}
            return results + [
                SampleResult(**common, tracer=t, status="skipped", reason=f"audit error {type(err).__name__}", message=_error_text(err), sample_text=text)
                for t in tracers
                if t not in done
            ]
    return results


def _variants(info: Any) -> list[tuple[str, Callable[..., Any]]]:
    out: list[tuple[str, Callable[..., Any]]] = [("function", info.op)]
    if getattr(info, "inplace_variant", None) is not None:
        out.append(("inplace", info.inplace_variant))
    if getattr(info, "supports_out", False):
        out.extend((kind, info.op) for kind in ("out", "out_empty", "out_wrong_shape"))
    return out


def _audit_op(
    op: _AuditedOp,
    max_samples: int | None,
    export_samples: int,
    effects: EffectTable,
    timeout: float | None,
) -> tuple[str | None, list[SampleResult], str]:
    """(dtype, results, reason the op was not run at all or "")."""
    info = op.info
    try:
        dtype = _pick_dtype(info)
    except Exception as err:
        return None, [], f"supported dtypes raised {type(err).__name__}"
    if dtype is None:
        return None, [], "no CPU dtype"
    results: list[SampleResult] = []
    torch.manual_seed(_seed(op.key, "samples", 0))
    try:  # the samples are never mutated (each check runs on copies): one list for every variant
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            samples = list(itertools.islice(info.sample_inputs("cpu", dtype, requires_grad=False), max_samples))
    except Exception as err:
        return str(dtype).replace("torch.", ""), [], f"sample generation raised {type(err).__name__}: {err}"[:_EXAMPLE_LIMIT]
    for variant, fn in _variants(info):
        for index, sample in enumerate(samples):
            results.extend(_run_sample(op.key, fn, variant, index, sample, index < export_samples, effects, timeout))
    return str(dtype).replace("torch.", ""), results, ""


# ---------------------------------------------------------------------------
# the report


@dataclasses.dataclass(frozen=True)
class AuditReport:
    """Everything one audit found.

    Attributes
    ----------
    results
        One :class:`SampleResult` per check, in audit order.
    dtypes
        The dtype each audited op ran with.
    not_run
        Ops that produced no check, with the reason (no CPU dtype, time budget...).
    settings
        The audit's parameters.
    runtime_s
        Seconds the ops took, summed over ops (a one-process run's wall-clock time; a
        parallel or merged run's total work).
    """

    results: tuple[SampleResult, ...]
    dtypes: dict[str, str]
    not_run: dict[str, str]
    settings: dict[str, Any]
    runtime_s: float

    @property
    def violations(self) -> tuple[SampleResult, ...]:
        """The checks where the analysis missed what the run showed."""
        return tuple(r for r in self.results if r.status == "violation")

    @property
    def skipped(self) -> tuple[SampleResult, ...]:
        """The checks that could not be made, each with its reason."""
        return tuple(r for r in self.results if r.status == "skipped")

    @property
    def passes(self) -> tuple[SampleResult, ...]:
        """The checks the analysis passed."""
        return tuple(r for r in self.results if r.status == "pass")

    def per_op(self) -> dict[str, dict[str, Any]]:
        """Figures per op (see :meth:`to_json`)."""
        ops: dict[str, dict[str, Any]] = {}
        for key in sorted({r.op for r in self.results} | set(self.dtypes)):
            rs = [r for r in self.results if r.op == key]
            by_variant: dict[str, dict[str, dict[str, int]]] = {}
            for r in rs:
                cell = by_variant.setdefault(r.variant, {}).setdefault(
                    r.tracer, {"samples": 0, "passes": 0, "violations": 0, "skipped": 0}
                )
                cell["samples"] += 1
                cell[{"pass": "passes", "violation": "violations", "skipped": "skipped"}[r.status]] += 1
            skips = Counter(r.reason for r in rs if r.status == "skipped")
            examples: dict[str, str] = {}
            for r in rs:
                if r.status == "skipped" and r.reason not in examples:
                    examples[r.reason] = r.message[:_EXAMPLE_LIMIT]
            ops[key] = {
                "dtype": self.dtypes.get(key),
                "variants": [v for v in VARIANTS if v in by_variant],
                "samples": len(rs),
                "passes": sum(r.status == "pass" for r in rs),
                "violations": sum(r.status == "violation" for r in rs),
                "skipped": sum(r.status == "skipped" for r in rs),
                "imprecise_claims": {
                    "false_alias": sum(r.false_alias for r in rs),
                    "false_overlap": sum(r.false_overlap for r in rs),
                    "false_writers": sum(r.false_writers for r in rs),
                },
                "imprecise_checks": sum(r.imprecise_claims > 0 for r in rs),
                "imprecision_examples": sorted({e for r in rs for e in r.examples})[:5],
                "trace_divergence": sum(bool(r.trace_divergence) for r in rs),
                "fake_mismatch": sum(bool(r.fake_mismatch) for r in rs),
                "fake_mismatch_examples": sorted({f"{r.variant}/{r.tracer}: {m}" for r in rs for m in r.fake_mismatch})[:3],
                "by_variant": {v: by_variant[v] for v in VARIANTS if v in by_variant},
                "skips": dict(sorted(skips.items())),
                "skip_examples": dict(sorted(examples.items())),
                "violations_by_variant": dict(
                    sorted(Counter(f"{r.variant}/{r.tracer}" for r in rs if r.status == "violation").items())
                ),
                "violation_details": [
                    {
                        "variant": r.variant,
                        "sample": r.sample,
                        "tracer": r.tracer,
                        "sample_text": r.sample_text,
                        "graph_ops": list(r.graph_ops),
                        "fake_mismatch": list(r.fake_mismatch),
                        "message": r.message,
                    }
                    for r in [r for r in rs if r.status == "violation"][:_DETAILS_LIMIT]
                ],
            }
        return ops

    def summary(self) -> dict[str, Any]:
        """Headline figures: ops, variants, samples, passes, violations, imprecise ops, skips by reason.

        Examples
        --------
        >>> report = audit(["abs"], max_samples=1, export_samples=0)
        >>> s = report.summary()
        >>> s["violations"], s["ops_audited"], s["samples"] == s["passes"] + s["skipped"]
        (0, 1, True)
        """
        variants = {(r.op, r.variant) for r in self.results}
        samples = {(r.op, r.variant, r.sample) for r in self.results}
        imprecise = {r.op for r in self.results if r.imprecise_claims}
        by_tracer = {
            t: {
                "checks": sum(r.tracer == t for r in self.results),
                "passes": sum(r.tracer == t and r.status == "pass" for r in self.results),
                "violations": sum(r.tracer == t and r.status == "violation" for r in self.results),
                "skipped": sum(r.tracer == t and r.status == "skipped" for r in self.results),
            }
            for t in TRACERS
        }
        return {
            "ops_audited": len({r.op for r in self.results}),
            "ops_not_run": len(self.not_run),
            "variants": len(variants),
            "sample_inputs": len(samples),
            "samples": len(self.results),
            "passes": len(self.passes),
            "violations": len(self.violations),
            "ops_with_violations": len({r.op for r in self.violations}),
            "skipped": len(self.skipped),
            "skipped_by_reason": dict(sorted(Counter(r.reason for r in self.skipped).items(), key=lambda kv: (-kv[1], kv[0]))),
            "imprecise_ops": len(imprecise),
            "imprecise_claims": sum(r.imprecise_claims for r in self.results),
            "trace_divergences": sum(bool(r.trace_divergence) for r in self.results),
            "fake_mismatches": sum(bool(r.fake_mismatch) for r in self.results),
            "by_tracer": by_tracer,
            "runtime_s": round(self.runtime_s, 1),
        }

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data: settings, summary, ops not run, and figures per op.

        Per op: ``dtype``, ``variants``, ``samples`` (checks), ``passes``,
        ``violations``, ``skipped``, ``imprecise_claims`` (by kind),
        ``imprecise_checks``, ``imprecision_examples``, ``trace_divergence``,
        ``fake_mismatch`` (and examples), ``by_variant`` (per variant and
        tracer), ``skips`` (count per reason), ``skip_examples`` (the first
        message per reason), ``violations_by_variant`` and
        ``violation_details`` (the first five violations in full).
        """
        return {
            "torch_version": torch.__version__,
            "settings": self.settings,
            "summary": self.summary(),
            "not_run": dict(sorted(self.not_run.items())),
            "ops": self.per_op(),
        }

    def to_markdown(self, top: int = 40) -> str:
        """A summary table, skips by reason, violations, and the ``top`` most imprecise ops
        (:func:`render_markdown` of :meth:`to_json`)."""
        return render_markdown(self.to_json(), top)


def _first_claim(message: str) -> str:
    lines = message.splitlines()
    return lines[1].strip() if len(lines) > 1 else message.strip()


def render_markdown(data: dict[str, Any], top: int = 40) -> str:
    """The Markdown summary of an audit's JSON report (:meth:`AuditReport.to_json`).

    Parameters
    ----------
    data : dict
        The JSON report, for example read back from ``--json``.
    top : int
        How many of the most imprecise ops to list.

    Returns
    -------
    str

    Examples
    --------
    >>> text = render_markdown(audit(["t"], max_samples=1, export_samples=0).to_json())
    >>> text.splitlines()[0], "| **violations** | **0** |" in text
    ('# Effects audit', True)
    """
    s = data["summary"]
    st = data["settings"]
    ops: dict[str, Any] = data["ops"]
    limit = f"at most {st['max_samples']}" if st.get("max_samples") else "all"
    lines = [
        "# Effects audit",
        "",
        f"`python -m aliasing.verification.audit` on torch {data['torch_version']}, CPU, one thread: every OpInfo of "
        "`op_db` (plus the extra norm-module cases, `extra.*`) in its function, in-place and `out=` variants "
        "(`out=` of the right size, of size 0 and of a wrong shape), traced with "
        "`make_fx(tracing_mode=\"fake\")` and, for the first "
        f"{st.get('export_samples')} sample(s) of each op and variant only (export is slow), with "
        "`torch.export.export`; each graph analysed and run on real tensors under the memory oracle "
        f"(`aliasing.verification.oracle.check_analysis`), {limit} sample inputs per op and variant. A *sample* below is "
        "one check: one op, variant, sample input and tracer. A skipped sample is never counted as a pass.",
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| ops audited | {s['ops_audited']} |",
        f"| ops not run | {s['ops_not_run']} |",
        f"| variants (op, variant) | {s['variants']} |",
        f"| sample inputs (op, variant, sample) | {s['sample_inputs']} |",
        f"| samples (checks) | {s['samples']} |",
        f"| passes | {s['passes']} |",
        f"| **violations** | **{s['violations']}** |",
        f"| ops with violations | {s['ops_with_violations']} |",
        f"| skipped | {s['skipped']} |",
        f"| imprecise ops | {s['imprecise_ops']} |",
        f"| imprecise claims | {s['imprecise_claims']} |",
        f"| checks whose graph did not write an input eager wrote | {s['trace_divergences']} |",
        f"| checks whose fake output layout differs from the real one | {s['fake_mismatches']} |",
        f"| runtime | {s['runtime_s']} s |",
        "",
        "| tracer | checks | passes | violations | skipped |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t, f in s["by_tracer"].items():
        lines.append(f"| {t} | {f['checks']} | {f['passes']} | {f['violations']} | {f['skipped']} |")
    lines += ["", "## Skipped samples by reason", "", "| reason | samples |", "| --- | --- |"]
    for reason, n in s["skipped_by_reason"].items():
        lines.append(f"| {reason} | {n} |")
    if data["not_run"]:
        lines += ["", "## Ops not run", "", "| op | reason |", "| --- | --- |"]
        lines += [f"| `{k}` | {v} |" for k, v in sorted(data["not_run"].items())]
    lines += ["", "## Violations", ""]
    bad = {k: v for k, v in ops.items() if v["violations"]}
    if not bad:
        lines.append("None.")
    else:
        lines += [
            "| op | variant / tracer: checks | graph ops | first sample | first missed claim |",
            "| --- | --- | --- | --- | --- |",
        ]
        for k, v in bad.items():
            first = v["violation_details"][0]
            where = ", ".join(f"{w}: {n}" for w, n in v["violations_by_variant"].items())
            graph_ops = ", ".join(f"`{g}`" for g in first["graph_ops"] if g != "getitem")
            lines.append(
                f"| `{k}` | {where} | {graph_ops} | {first['sample']}: `{first['sample_text']}` "
                f"| {_first_claim(first['message'])} |"
            )
    lines += [
        "",
        f"## Imprecision: top {top} ops",
        "",
        "Claims of passing checks that the run never confirmed (false alias / overlap / writer), summed "
        "over the op's checks. Most come from `out=` tensors of the wrong size, whose values become "
        "\"unknown storage\" (may alias and be written by anything).",
        "",
        "| op | checks | imprecise checks | false alias | false overlap | false writers | example |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    ranked = sorted(
        (k for k, v in ops.items() if sum(v["imprecise_claims"].values())),
        key=lambda k: (-sum(ops[k]["imprecise_claims"].values()), k),
    )
    for k in ranked[:top]:
        v = ops[k]
        c = v["imprecise_claims"]
        ex = v["imprecision_examples"][0] if v["imprecision_examples"] else ""
        lines.append(
            f"| `{k}` | {v['samples']} | {v['imprecise_checks']} | {c['false_alias']} | {c['false_overlap']} "
            f"| {c['false_writers']} | `{ex}` |"
        )
    diverging = [k for k, v in ops.items() if v["trace_divergence"]]
    if diverging:
        lines += [
            "",
            "## Traces that do not write what eager writes",
            "",
            "Checks whose traced graph, run for real, left unchanged an input the eager call changed "
            "(the analysis is checked against the graph; these say the graph does not represent the call):",
            "",
        ]
        lines += [f"- `{k}`: {ops[k]['trace_divergence']} check(s)" for k in diverging]
    lying = [k for k, v in ops.items() if v["fake_mismatch"]]
    if lying:
        lines += [
            "",
            "## Fake tensors that do not match the real layout",
            "",
            "Checks where a graph output's real sizes, strides or offset differ from its fake tensor in "
            "`meta['val']` (the analysis takes regions from the fake tensors):",
            "",
        ]
        lines += [f"- `{k}`: {ops[k]['fake_mismatch']} check(s); e.g. {ops[k]['fake_mismatch_examples'][0]}" for k in lying]
    return "\n".join(lines) + "\n"


#: The campaign tool name of the audit (results files name it; ``python -m aliasing.verification.campaign merge``).
TOOL = "aliasing.verification.audit"
_OP_DB_MODULE = "torch.testing._internal.common_methods_invocations"
#: A custom effect table, for items run in this process (tables hold functions: they do not travel).
_IN_PROCESS_EFFECTS: list[EffectTable] = []


def _campaign_settings(
    ops: Sequence[str] | None,
    max_samples: int | None,
    export_samples: int,
    sample_timeout: float | None,
    extra: bool,
    custom_effects: bool,
    num_threads: int | None,
    imports: Sequence[str],
) -> dict[str, Any]:
    """What decides an op's checks: the campaign's settings (written in a results file's header)."""
    return {
        "ops": list(ops) if ops is not None else "all",
        "max_samples": max_samples,
        "export_samples": export_samples,
        "sample_timeout_s": sample_timeout,
        "extra_cases": extra,
        "dtype_preference": [str(d).replace("torch.", "") for d in DTYPE_PREFERENCE],
        "custom_effects": custom_effects,
        "num_threads": num_threads,
        "imports": list(imports),
    }


def _work_items(settings: dict[str, Any]) -> list[WorkItem]:
    """One work item per audited op, in audit order (the key is the op's key)."""
    ops = None if settings["ops"] == "all" else settings["ops"]
    return [WorkItem(op.key, op.key) for op in _select(ops, settings["extra_cases"])]


def audit_item(settings: dict[str, Any], key: str) -> dict[str, Any]:
    """One campaign item: every check of the op ``key`` (what a worker process runs).

    Returns ``{"dtype", "results" (SampleResult fields), "not_run" (the reason, or "")}``.

    Examples
    --------
    >>> settings = _campaign_settings(["abs"], 1, 0, 60.0, True, False, 1, ())
    >>> item = audit_item(settings, "abs")
    >>> item["dtype"], {r["status"] for r in item["results"]}
    ('float32', {'pass'})
    """
    if settings["custom_effects"] and not _IN_PROCESS_EFFECTS:
        raise AuditError("a custom effect table runs in the process that holds it (jobs=None)")
    effects = _IN_PROCESS_EFFECTS[-1] if settings["custom_effects"] else DEFAULT_EFFECTS
    threads = torch.get_num_threads()
    if settings["num_threads"] is not None:
        torch.set_num_threads(settings["num_threads"])
    try:
        dtype, results, why = _audit_op(
            _op_by_key(key), settings["max_samples"], settings["export_samples"], effects, settings["sample_timeout_s"]
        )
    finally:
        torch.set_num_threads(threads)
    return {"dtype": dtype, "results": [dataclasses.asdict(r) for r in results], "not_run": why}


def _sample_result(data: dict[str, Any]) -> SampleResult:
    tuples = ("examples", "trace_divergence", "fake_mismatch", "graph_ops")
    fields: dict[str, Any] = {k: tuple(v) if k in tuples else v for k, v in data.items()}
    return SampleResult(**fields)


def _fold(
    settings: dict[str, Any],
    outcomes: dict[str, Outcome],
    not_started: Sequence[str] = (),
    time_budget: float | None = None,
) -> AuditReport:
    """The report of a campaign's outcomes, in audit order (whatever order they finished in)."""
    results: list[SampleResult] = []
    dtypes: dict[str, str] = {}
    not_run: dict[str, str] = {}
    for item in _work_items(settings):
        outcome = outcomes.get(item.key)
        if outcome is None:
            if item.key in not_started:
                not_run[item.key] = f"time budget of {time_budget} s spent"
            continue
        if outcome.status != "ok":
            not_run[item.key] = f"{outcome.status}: {outcome.error}"[:_EXAMPLE_LIMIT]
            continue
        value = outcome.value
        if value["dtype"] is not None:
            dtypes[item.key] = value["dtype"]
        if value["not_run"]:
            not_run[item.key] = value["not_run"]
        results.extend(_sample_result(r) for r in value["results"])
    report_settings = {
        "ops": settings["ops"],
        "max_samples": settings["max_samples"],
        "export_samples": settings["export_samples"],
        "time_budget_s": time_budget,
        "sample_timeout_s": settings["sample_timeout_s"],
        "extra_cases": settings["extra_cases"],
        "dtype_preference": settings["dtype_preference"],
        "custom_effects": settings["custom_effects"],
    }
    if settings["imports"]:
        report_settings["imports"] = settings["imports"]
    runtime = sum(o.seconds for o in outcomes.values())
    return AuditReport(tuple(results), dtypes, not_run, report_settings, runtime)


def audit(
    ops: Sequence[str] | None = None,
    *,
    max_samples: int | None = None,
    export_samples: int = 2,
    time_budget: float | None = None,
    sample_timeout: float | None = 60.0,
    effects: EffectTable = DEFAULT_EFFECTS,
    extra: bool = True,
    num_threads: int | None = 1,
    progress: Callable[[str], None] | None = None,
    campaign_options: CampaignOptions | None = None,
) -> AuditReport:
    """Run the effects audit: OpInfo samples for real, against the analysis, under the oracle.

    Each op is one item of a campaign (:mod:`aliasing.verification.campaign`): in this process by
    default, or in worker processes, in shards, resumable from a results file, or on
    Ray, as ``campaign_options`` say; the report is the same in every case.

    Parameters
    ----------
    ops : sequence of str, optional
        Which ops (see :func:`audited_ops`); ``None``: all of ``op_db`` and the extra cases.
    max_samples : int, optional
        At most this many sample inputs per op and variant (``None``: all).
    export_samples : int
        The first this many samples of each op and variant are also traced
        with ``torch.export.export`` (0: no export).
    time_budget : float, optional
        Seconds; once spent, the remaining ops are not started (listed in
        :attr:`AuditReport.not_run`).
    sample_timeout : float, optional
        Seconds one sample may take (all its checks) before it is skipped as ``timeout``.
    effects : aliasing.EffectTable
        The effect rules under audit (:data:`aliasing.DEFAULT_EFFECTS` by default;
        another table runs in this process only).
    extra : bool
        Include the extra norm-module cases when ``ops`` is ``None``.
    num_threads : int, optional
        ``torch.set_num_threads`` for each op (restored afterwards); ``None`` leaves it.
    progress : callable, optional
        Called with one line of text per op.
    campaign_options : aliasing.verification.campaign.CampaignOptions, optional
        Worker processes (``jobs``), ``shard``, ``results`` file, Ray address,
        per-op time limit, modules to import in each worker.

    Returns
    -------
    AuditReport
        Of the ops of this shard (recorded ones of a resumed run included); an op
        whose item failed (an error, its worker killed past the time limit or
        dead) is listed in :attr:`AuditReport.not_run` with the reason.

    Raises
    ------
    AuditError
        If an op name is unknown or a setting is out of range.

    Examples
    --------
    >>> report = audit(["add"], max_samples=2, export_samples=1)
    >>> len(report.violations), sorted({r.variant for r in report.results})
    (0, ['function', 'inplace', 'out', 'out_empty', 'out_wrong_shape'])
    """
    if max_samples is not None and max_samples < 1:
        raise AuditError(f"max_samples must be at least 1, got {max_samples}")
    if export_samples < 0:
        raise AuditError(f"export_samples must be at least 0, got {export_samples}")
    options = campaign_options or CampaignOptions()
    options = dataclasses.replace(options, time_budget=time_budget if time_budget is not None else options.time_budget)
    user_imports = options.imports
    # workers load op_db before their first op, outside its time (it takes seconds to import)
    options = dataclasses.replace(options, imports=(_OP_DB_MODULE, *user_imports))
    custom = effects is not DEFAULT_EFFECTS
    if custom and (options.jobs is not None or options.ray_address is not None):
        raise AuditError("a custom effect table runs in this process only (no jobs, no Ray)")
    settings = _campaign_settings(ops, max_samples, export_samples, sample_timeout, extra, custom, num_threads, user_imports)
    items = _work_items(settings)  # (unknown names raise here)

    def report_op(outcome: Outcome, done: int, total: int | None) -> None:
        if progress is None:
            return
        if outcome.status != "ok":
            progress(f"[{done}/{total}] {outcome.key}: {outcome.status}: {outcome.error[:200]} ({outcome.seconds:.1f} s)")
            return
        rs, why = outcome.value["results"], outcome.value["not_run"]
        bad = sum(r["status"] == "violation" for r in rs)
        skipped = sum(r["status"] == "skipped" for r in rs)
        progress(
            f"[{done}/{total}] {outcome.key}: {len(rs)} checks, {bad} violations, {skipped} skipped"
            f"{' (' + why + ')' if why else ''} ({outcome.seconds:.1f} s)"
        )

    if custom:
        _IN_PROCESS_EFFECTS.append(effects)
    try:
        run = campaign.run_campaign(audit_item, items, settings=settings, tool=TOOL, options=options, progress=report_op)
    except CampaignError as err:
        raise AuditError(str(err)) from err
    finally:
        if custom:
            _IN_PROCESS_EFFECTS.pop()
    return _fold(settings, run.outcomes, run.not_started, options.time_budget)


def _registry_main(*, write: bool) -> int:
    """``--registry``: the operator-registry coverage check (:mod:`aliasing.core.registry`)."""
    from aliasing.core import registry

    rows = registry.classify_installed()
    if write:
        unclassified = [r for r in rows if r.kind == "unclassified"]
        if unclassified:
            print(registry.compare_with_committed(rows).summary())
            return 1
        registry.write_classification(rows, registry.committed_path())
        print(f"wrote {registry.committed_path()} ({len(rows)} overloads)")
        return 0
    diff = registry.compare_with_committed(rows)
    print(diff.summary())
    return 0 if diff.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aliasing.verification.audit``: run the audit, print the summary, write the reports.

    Exit status 0 when no check found a violation, 1 otherwise. With ``--jobs``,
    ``--shard``, ``--results``, ``--ray`` the ops run as a campaign
    (:mod:`aliasing.verification.campaign`); ``--merge RESULTS...`` prints and writes the report
    of a campaign's results files instead of running.

    Examples
    --------
    >>> main(["--ops", "abs", "--max-samples", "1", "--no-export", "--quiet"])
    0
    """
    parser = argparse.ArgumentParser(
        prog="python -m aliasing.verification.audit",
        description="Run PyTorch's OpInfo samples for real and check the alias analysis against them.",
    )
    parser.add_argument("--ops", nargs="+", metavar="NAME", help="OpInfo names or keys (default: all of op_db)")
    parser.add_argument("--max-samples", type=int, default=None, metavar="N", help="sample inputs per op and variant")
    parser.add_argument("--export-samples", type=int, default=2, metavar="N", help="samples also traced with torch.export (default 2)")
    parser.add_argument("--no-export", action="store_true", help="trace with make_fx only")
    parser.add_argument("--time-budget", type=float, default=None, metavar="S", help="stop starting ops after S seconds")
    parser.add_argument("--sample-timeout", type=float, default=60.0, metavar="S", help="seconds per sample (default 60)")
    parser.add_argument("--no-extra", action="store_true", help="leave out the extra norm-module cases")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the summary as Markdown")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--registry",
        action="store_true",
        help="classify every ATen overload of the installed torch and compare with the committed classification",
    )
    parser.add_argument("--write", action="store_true", help="with --registry: write the classification file")
    parser.add_argument(
        "--layouts",
        action="store_true",
        help="run the layout audit instead (aliasing.verification.layout_audit: meta and fake result layouts against eager; "
        "its options: --layouts --help)",
    )
    campaign.add_campaign_arguments(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--layouts" in argv:
        from aliasing.verification.layout_audit import main as layout_main

        return layout_main([a for a in argv if a != "--layouts"])
    args = parser.parse_args(argv)
    if args.registry:
        return _registry_main(write=args.write)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        if args.merge is not None:
            settings, outcomes = campaign.merge_results(
                args.merge, tool=TOOL, items=_work_items, allow_missing=args.allow_missing
            )
            report = _fold(settings, outcomes)
        else:
            report = audit(
                args.ops,
                max_samples=args.max_samples,
                export_samples=0 if args.no_export else args.export_samples,
                time_budget=args.time_budget,
                sample_timeout=args.sample_timeout,
                extra=not args.no_extra,
                progress=None if args.quiet else progress,
                campaign_options=campaign.options_from_args(args),
            )
    except (AuditError, CampaignError) as err:
        parser.error(str(err))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(report.to_markdown())
    if not args.quiet:
        summary = report.summary()
        for k in ("ops_audited", "variants", "samples", "passes", "violations", "skipped", "imprecise_ops", "runtime_s"):
            print(f"{k}: {summary[k]}", file=sys.stderr)
        for r in report.violations:
            print(f"VIOLATION {r.op} {r.variant} sample {r.sample} ({r.tracer}):\n{r.message}", file=sys.stderr)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
