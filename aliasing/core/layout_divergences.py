"""Ops whose meta or fake kernels lay results out otherwise than their eager CPU kernels.

The table is data: ``aliasing/core/registry_data/layout-divergences.json``,
written by the layout audit (:mod:`tools.layout_audit`, outside the wheel) from
the results committed for every supported torch release
(``benchmarks/results/layout_audit-<release>.json``) and read once, at import,
by :mod:`aliasing.core.ops` (:data:`aliasing.core.ops.LAYOUT_DIVERGENCES`, with
the operator library's other tables); this module describes the file and
answers the queries. Do not edit it by hand; on each supported release run

    python -m tools.audit --layouts --results benchmarks/results \\
        --write-table aliasing/core/registry_data/layout-divergences.json

(``python -m tools.audit --layouts --table-only --write-table
aliasing/core/registry_data/layout-divergences.json`` renders it from the
committed results without running the audit).

The data file is one JSON object:

``releases``
    per torch release measured (``"2.13"``, oldest first): its ``torch_version``
    (:data:`TORCH_VERSIONS`), the committed ``results`` it comes from, what
    the scan covered (``max_samples`` sample inputs per OpInfo of ``op_db``,
    the layout classes ``layouts``) and what it found (``opinfos_run``,
    ``calls_compared``, ``divergent_calls``, ``divergent_overloads``,
    ``runtime_s``);
``layout_divergent``
    every overload seen diverging, on meta or fake tensors, with the releases
    it diverged on (:data:`LAYOUT_DIVERGENT_OVERLOADS`; ``aten.<op>`` alone
    is the op's function as a whole);
``fake_divergent``
    those whose fake kernel diverged, with the releases it diverged on
    (:data:`FAKE_DIVERGENT_OVERLOADS`);
``agreeing_siblings``
    the overloads of those ops that every release ran and none saw diverge
    (:data:`AGREEING_SIBLINGS`).

The table is the union of the releases' results, conservative: an overload
seen diverging on any release observes on every one, and an overload of a
divergent op is trusted only where every release ran it and none saw it
diverge. An overload whose releases are not all of ``releases`` diverges on
those only (the table holds it on every release all the same).

The planner's layout refinement (``rewrite.planning.dataflow.layout_observer``) predicts
layouts on meta tensors and compares them with the fake tensors the trace
recorded. An op for which :func:`layout_divergent` holds observes a clone's
layout change (the clone is kept); a value computed from one for which
:func:`fake_layout_divergent` holds has a recorded layout that may not be the
real one. Meta kernels are evidence, not proof: an op the audit never ran, or
ran only on layouts where its kernels agree, is not listed.
"""

from __future__ import annotations

from aliasing.core.ops import (
    AGREEING_SIBLINGS,
    FAKE_DIVERGENT_OVERLOADS,
    LAYOUT_DIVERGENCES,
    LAYOUT_DIVERGENT_OVERLOADS,
    TORCH_VERSIONS,
)

__all__ = [
    "AGREEING_SIBLINGS",
    "FAKE_DIVERGENT_OVERLOADS",
    "LAYOUT_DIVERGENT_OVERLOADS",
    "TORCH_VERSIONS",
    "fake_layout_divergent",
    "layout_divergent",
]


def layout_divergent(overload: str) -> bool:
    """Whether an overload (``"aten.roll.default"``) may have another result layout on meta or fake tensors than eagerly.

    True for an overload the audit saw diverge (on any release), and for every
    overload of the same op that the audit did not see agree (on every release).

    Examples
    --------
    >>> layout_divergent("aten.roll.default"), layout_divergent("aten.add.Tensor")
    (True, False)
    """
    return LAYOUT_DIVERGENCES.listed(overload)


def fake_layout_divergent(overload: str) -> bool:
    """Whether an overload's *fake* kernel (what ``make_fx`` and ``torch.export`` record) may lay its result out otherwise than eager.

    Examples
    --------
    >>> fake_layout_divergent("aten.roll.default"), fake_layout_divergent("aten.convolution.default")
    (True, False)
    """
    return LAYOUT_DIVERGENCES.listed(overload, fake=True)
