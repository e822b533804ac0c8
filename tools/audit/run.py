"""The effects audit's checks: each sample of each op run eagerly, traced, analysed and run under the oracle.

One sample in one variant (:func:`_run_sample`) is run eagerly on fresh
copies of its tensors (what it changed is noted), traced with each tracer
(``make_fx(tracing_mode="fake")``, and ``torch.export.export`` for the first
samples), analysed with :func:`aliasing.analyze` and run on real copies under
:func:`aliasing.verification.oracle.check_analysis` (:func:`_check_graph`):
one :class:`~tools.audit.report.SampleResult` per check. One op
(:func:`_audit_op`, the campaign item :func:`audit_item`) is every sample of
every variant; :func:`audit` runs the ops as a campaign
(:mod:`tools.campaign`) and folds their outcomes into the report.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import traceback
import warnings
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from aliasing.core.analysis import DEFAULT_EFFECTS, analyze
from aliasing.core.effects import EffectTable
from aliasing.verification.oracle import AnalysisUnsound, check_analysis
from tools import campaign
from tools.audit.ops import (
    _OP_DB_MODULE,
    TOOL,
    TRACERS,
    _AuditedOp,
    _campaign_settings,
    _op_by_key,
    _pick_dtype,
    _variants,
    _work_items,
)
from tools.audit.report import _EXAMPLE_LIMIT, AuditReport, SampleResult, _fold
from tools.campaign import CampaignError, CampaignOptions, Outcome
from tools.errors import AuditError
from tools.time_limit import SampleTimeout, time_limit

_MESSAGE_LIMIT = 4000


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
    """Every check of one sample in one variant: one per tracer (each skipped with its reason, or run)."""
    tracers = TRACERS if export else TRACERS[:1]
    common: dict[str, Any] = {"op": key, "variant": variant, "sample": index}
    text = ""
    with contextlib.suppress(Exception):  # a description is best effort
        text = _describe(sample)
    results: list[SampleResult] = []
    seed = _seed(key, variant, index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with time_limit(timeout):
                call, eager_changed = _run_eager(fn, sample, variant, seed)
                for tracer in tracers:
                    base = {**common, "tracer": tracer, "sample_text": text}
                    results.append(_trace_and_check(call, tracer, eager_changed, effects, seed, base))
        except _Skip as skip:
            return _skipped(common, text, tracers, skip.reason, skip.detail)
        except SampleTimeout:
            done = {r.tracer for r in results}
            return results + _skipped(common, text, [t for t in tracers if t not in done], "timeout", f"over {timeout} s")
        except Exception as err:  # anything else: this sample, not the audit
            done = {r.tracer for r in results}
            rest = [t for t in tracers if t not in done]
            return results + _skipped(common, text, rest, f"audit error {type(err).__name__}", _error_text(err))
    return results


def _skipped(common: dict[str, Any], text: str, tracers: Sequence[str], reason: str, message: str) -> list[SampleResult]:
    """The checks of ``tracers`` for one sample, skipped for ``reason``."""
    return [
        SampleResult(**common, tracer=t, status="skipped", reason=reason, message=message, sample_text=text)
        for t in tracers
    ]


def _run_eager(fn: Callable[..., Any], sample: Any, variant: str, seed: int) -> tuple[_Call, set[int]]:
    """The sample's call in ``variant``, run eagerly once on fresh copies: the call, and the inputs it changed.

    Raises :class:`_Skip` where the call cannot be made (or the eager call raises).
    """
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
    return call, _changed(before, eager_inputs)


def _trace_and_check(
    call: _Call,
    tracer: str,
    eager_changed: set[int],
    effects: EffectTable,
    seed: int,
    base: dict[str, Any],
) -> SampleResult:
    """One check: ``call`` traced with ``tracer``, analysed and run under the oracle (skipped if tracing fails)."""
    torch.manual_seed(seed)
    try:
        gm, target, inputs, watched, again = _trace(call, tracer)
    except _Skip as skip:
        return SampleResult(**base, status="skipped", reason=skip.reason, message=skip.detail)
    except Exception as err:
        return SampleResult(**base, status="skipped", reason=_trace_failure(tracer, err), message=_error_text(err))
    return _check_graph(gm, target, inputs, again, watched, eager_changed, effects, seed, base)


def _trace(call: _Call, tracer: str) -> tuple[torch.fx.GraphModule, Any, list[Any], list[torch.Tensor], list[Any]]:
    """``call`` traced with ``tracer``: its graph, what to analyse (the graph, or the exported program),
    the graph's inputs, the tensors among them to watch for writes, and inputs for a second run."""
    from torch.fx.experimental.proxy_tensor import make_fx

    if tracer == "make_fx":
        gm = make_fx(call, tracing_mode="fake")(*call.fresh())
        inputs: list[Any] = call.fresh()
        return gm, gm, inputs, inputs, call.fresh()
    ep = torch.export.export(_Exported(call), tuple(call.fresh()), strict=False)
    watched = call.fresh()
    return ep.graph_module, ep, _export_inputs(ep, watched), watched, _export_inputs(ep, call.fresh())


# ---------------------------------------------------------------------------
# one op


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
# the campaign of ops


#: A custom effect table, for items run in this process (tables hold functions: they do not travel).
_IN_PROCESS_EFFECTS: list[EffectTable] = []


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

    Each op is one item of a campaign (:mod:`tools.campaign`): in this process by
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
    campaign_options : tools.campaign.CampaignOptions, optional
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

