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

Run it with ``python -m tools.audit`` (``--help`` for the options); it
needs ``expecttest`` (``torch.testing._internal`` imports it) and numpy (the
oracle), both in the ``test`` extra. ``python -m tools.audit --layouts``
runs the layout audit instead (:mod:`tools.layout_audit`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Besides the public names, those that tests/ and benchmarks/campaign.py take from this package
# (``audit._fold``, ``audit.torch``...), as when the audit was one module.
import torch as torch

from aliasing.core.analysis import DEFAULT_EFFECTS as DEFAULT_EFFECTS
from tools.audit.ops import _OP_DB_MODULE as _OP_DB_MODULE
from tools.audit.ops import DTYPE_PREFERENCE as DTYPE_PREFERENCE
from tools.audit.ops import TOOL as TOOL
from tools.audit.ops import TRACERS, VARIANTS, audited_ops
from tools.audit.ops import _campaign_settings as _campaign_settings
from tools.audit.ops import _work_items as _work_items
from tools.audit.report import AuditReport, SampleResult, render_markdown
from tools.audit.report import _fold as _fold
from tools.audit.run import audit, audit_item
from tools.errors import AuditError

if TYPE_CHECKING:
    from tools.audit.__main__ import main

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


def __getattr__(name: str) -> Any:
    """``main``, the command line, imported on first use (PEP 562).

    ``python -m tools.audit`` imports this package, then runs its
    ``__main__`` module as a script: imported here already, it would run twice
    (and ``runpy`` would warn).
    """
    if name != "main":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from tools.audit.__main__ import main as command

    globals()["main"] = command
    return command
