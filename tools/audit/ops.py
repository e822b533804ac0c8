"""Which ops the effects audit runs: OpInfos of ``op_db`` and extra cases, their variants, the work items.

The audit's ops are the :class:`~torch.testing._internal.opinfo.core.OpInfo`
entries of ``torch.testing._internal.common_methods_invocations.op_db`` plus a
few *extra* cases shaped like them (norm modules' functional calls); each op
runs in the dtype of :data:`DTYPE_PREFERENCE` it supports first, in the
variants of :data:`VARIANTS` it has, traced by each of :data:`TRACERS`. Each
op is one work item of a campaign (:mod:`tools.campaign`),
whose settings :func:`_campaign_settings` writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tools.campaign import WorkItem
from tools.errors import AuditError

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


def _variants(info: Any) -> list[tuple[str, Callable[..., Any]]]:
    out: list[tuple[str, Callable[..., Any]]] = [("function", info.op)]
    if getattr(info, "inplace_variant", None) is not None:
        out.append(("inplace", info.inplace_variant))
    if getattr(info, "supports_out", False):
        out.extend((kind, info.op) for kind in ("out", "out_empty", "out_wrong_shape"))
    return out


# ---------------------------------------------------------------------------
# the work items


#: The campaign tool name of the audit (results files name it): the package whose ``main``
#: ``python -m tools.campaign merge`` hands the files to.
TOOL = "tools.audit"
_OP_DB_MODULE = "torch.testing._internal.common_methods_invocations"


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

