"""Layout audit: do meta and fake kernels predict the strides and offsets eager CPU kernels produce?

The copy planner's *layout* refinement (``rewrite.planning.dataflow.layout_observer``)
runs a consumer on meta tensors to predict the layout it would produce if a
clone were removed, and compares it with the layout its ``meta['val']`` (a
fake tensor, itself computed by the meta or fake kernel) records. That is only
sound where those kernels compute the layout the real kernel computes. They do
not always: ``aten.roll``'s meta kernel returns a contiguous result for every
input, while the CPU kernel keeps a channels-last (or column-major) input's
layout. This audit measures where they disagree.

For every :class:`~torch.testing._internal.opinfo.core.OpInfo` of
``torch.testing._internal.common_methods_invocations.op_db`` it takes the
first ``max_samples`` sample inputs on CPU (in the first supported dtype of
:data:`DTYPE_PREFERENCE`: floats first), re-lays their tensors out in each
*layout class* of :data:`LAYOUTS` (values kept, except ``expanded`` and
``zero_size``), either only the sample's input tensor(s) (target ``input``) or
every tensor argument (target ``all``), and calls the op eagerly under a
dispatch mode that records every ATen overload call the op makes (the ops a
``make_fx`` graph would contain). Each recorded call is then run again on
*meta* tensors and under a ``FakeTensorMode`` on fake tensors with the same
sizes, strides and storage offsets, and the sizes, strides (those of
dimensions of size one do not count, as in the planner's layouts), storage
offsets and dtypes of the tensors it returns are compared with the eager ones
(for a result without elements only sizes and dtype: its layout addresses no
memory; such differences are reported apart, as *hidden*).
The OpInfo's function as a whole is compared the same way (its ``aten_name``
stands for it), which covers composite ops that ``torch.export`` graphs keep
(``aten.contiguous``, ``aten.reshape``...).

A call whose meta or fake run raises (no meta kernel, data-dependent output)
is counted, not reported: the planner never trusts a layout it cannot compute.
A *divergence* is a call whose meta or fake layout is computed and differs
from eager. Kernels change between releases, so the results of every
supported torch release are committed (``benchmarks/results/layout_audit-<release>.{json,md}``,
:func:`results_path`), and :func:`render_table` turns their union (an overload
that diverges on any release counts as divergent on every one) into a JSON
data file of the package, :data:`TABLE_PATH`
(``aliasing/core/registry_data/layout-divergences.json``), the table the planner
reads through :mod:`aliasing.core.layout_divergences`: a clone whose layout
change reaches an op of a divergent overload packet is kept.

Run it with ``python -m tools.audit --layouts`` (``--help`` for the
options; ``--seconds`` and ``--ops`` bound it); it needs ``expecttest``
(``torch.testing._internal`` imports it), in the ``test`` extra. On each
supported release, :data:`REGENERATE` rewrites that release's results and the
table; ``--table-only --write-table PATH`` renders the table from the committed
results alone.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import json
import logging
import os
import pickle
import select
import signal
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from tools.errors import LayoutAuditError
from tools.time_limit import SampleTimeout, time_limit

__all__ = [
    "DTYPE_PREFERENCE",
    "LAYOUTS",
    "REGENERATE",
    "RESULTS_DIR",
    "TABLE_PATH",
    "TARGETS",
    "CallSpec",
    "Divergence",
    "LayoutAuditError",
    "LayoutAuditReport",
    "TensorSpec",
    "audit_layouts",
    "committed_results",
    "main",
    "relayout",
    "release_of",
    "render_markdown",
    "render_table",
    "results_path",
    "write_table",
]

#: The layout classes every sample is re-laid out in, in report order.
LAYOUTS: tuple[str, ...] = (
    "contiguous",  # a contiguous copy
    "channels_last",  # rank 4, or rank 3 lifted to rank 4 by a leading dimension of size 2
    "channels_last_3d",  # rank 5, or rank 4 lifted likewise
    "permuted",  # rank >= 3: dense, dimension 1 innermost (channels-last-like for any rank)
    "transposed",  # rank >= 2: dense, dimensions reversed (column-major)
    "sliced",  # a strided slice: storage offset 1, innermost stride 2
    "expanded",  # the first dimension longer than one expanded from its first element (stride 0)
    "size_one",  # dimensions of size one get stride 1 (ties with the innermost dimension)
    "zero_size",  # the first dimension (of every tensor sharing the input's first size) becomes 0
)
#: Which tensors of a sample a layout class is applied to.
TARGETS: tuple[str, ...] = ("input", "all")
#: CPU dtypes tried in this order; the first one the op supports is used.
DTYPE_PREFERENCE: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.complex64,
    torch.int64,
    torch.int32,
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.complex128,
)

_EVIDENCE_LIMIT = 3  # evidence kept per (overload, layout) pair (all are counted)
_FUNCTION = "function"  # the kind of a whole-function comparison (not a recorded ATen call)


# ---------------------------------------------------------------------------
# layouts


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor's layout: what a meta or fake copy of it needs (values aside)."""

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    storage_numel: int

    @staticmethod
    def of(t: torch.Tensor) -> TensorSpec:
        """The spec of a strided tensor ``t``."""
        itemsize = t.element_size()
        numel = t.untyped_storage().nbytes() // itemsize if itemsize else 0
        return TensorSpec(tuple(t.shape), tuple(t.stride()), int(t.storage_offset()), t.dtype, numel)

    def normal(self) -> tuple[tuple[int, ...], tuple[int, ...], int, str]:
        """Sizes, strides (0 for dimensions of size one), offset, dtype: what the planner compares."""
        strides = tuple(0 if n == 1 else s for n, s in zip(self.sizes, self.strides))
        return self.sizes, strides, self.offset, str(self.dtype).replace("torch.", "")

    def observable(self) -> tuple[tuple[int, ...], tuple[int, ...], int, str]:
        """:meth:`normal`, without strides and offset for a tensor of no elements.

        A tensor without elements addresses no memory: no view of it raises, no
        value depends on its strides, and ``check_equivalent`` compares only its
        sizes and dtype. (Where such a layout reaches an op whose result has
        elements, that result's layout is compared.)
        """
        sizes, strides, offset, dtype = self.normal()
        return (sizes, (), 0, dtype) if 0 in sizes else (sizes, strides, offset, dtype)

    def text(self) -> str:
        """``sizes/strides@offset``."""
        sizes = ",".join(map(str, self.sizes))
        strides = ",".join(map(str, self.strides))
        return f"({sizes})/({strides})@{self.offset}"

    def build(self, device: str) -> torch.Tensor:
        """An uninitialised tensor with this layout on ``device`` (under a fake mode: a fake one)."""
        span = 0 if 0 in self.sizes else 1 + sum((n - 1) * s for n, s in zip(self.sizes, self.strides))
        numel = max(self.storage_numel, self.offset + span)
        base = torch.empty(numel, dtype=self.dtype, device=device)
        return base.as_strided(self.sizes, self.strides, self.offset)


def _strided(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.layout == torch.strided and t.device.type == "cpu"


def _dense_with_order(t: torch.Tensor, order: Sequence[int]) -> torch.Tensor:
    """A copy of ``t`` whose dimensions are laid out outermost to innermost in ``order``."""
    inverse = [0] * len(order)
    for i, d in enumerate(order):
        inverse[d] = i
    return t.permute(*order).contiguous().permute(*inverse)


def relayout(t: torch.Tensor, layout: str, zero_dim: int | None = None) -> torch.Tensor | None:
    """``t`` re-laid out in layout class ``layout`` (one of :data:`LAYOUTS`), or None where it does not apply.

    The values are kept, except for ``expanded`` (the first element along the
    expanded dimension is repeated) and ``zero_size`` (no elements). The
    channels-last classes also lift a tensor one rank short of theirs by a
    leading dimension of size 2 (its values twice): most OpInfo samples are
    of rank 3 or less, and broadcasting accepts the extra dimension.
    ``zero_size`` applies only when ``t``'s first size is ``zero_dim``.

    Examples
    --------
    >>> relayout(torch.ones(2, 3, 4), "transposed").stride()
    (1, 2, 6)
    >>> r = relayout(torch.ones(2, 3), "sliced"); (r.stride(), r.storage_offset())
    ((7, 2), 1)
    >>> relayout(torch.ones(3, 4, 5), "channels_last").stride()
    (60, 1, 15, 3)
    >>> relayout(torch.ones(2, 3), "channels_last") is None
    True
    """
    rank = t.dim()
    if layout == "contiguous":
        return t.clone(memory_format=torch.contiguous_format)
    if layout in ("channels_last", "channels_last_3d"):
        fit = 4 if layout == "channels_last" else 5
        if rank == fit - 1:  # lifted: a leading dimension of size 2 (of size 1 the format is ambiguous)
            t = t.unsqueeze(0).expand(2, *t.shape)
        elif rank != fit:
            return None
        return t.contiguous(memory_format=torch.channels_last if fit == 4 else torch.channels_last_3d)
    if layout == "permuted":
        return _dense_with_order(t, [0, *range(2, rank), 1]) if rank >= 3 else None
    if layout == "transposed":
        return _dense_with_order(t, list(range(rank - 1, -1, -1))) if rank >= 2 else None
    if layout == "sliced":
        if rank == 0:
            out = torch.empty(2, dtype=t.dtype)[1]
        else:
            big = torch.empty(*t.shape[:-1], 2 * t.shape[-1] + 1, dtype=t.dtype)
            out = big[..., 1::2]
        return out.copy_(t)
    if layout == "expanded":
        longer = [d for d in range(rank) if t.shape[d] > 1]
        return t.narrow(longer[0], 0, 1).clone().expand(t.shape) if longer else None
    if layout == "size_one":
        if 1 not in t.shape:
            return None
        dense = t.contiguous()
        strides = [1 if n == 1 else s for n, s in zip(t.shape, dense.stride())]
        return dense.as_strided(t.shape, strides)
    if layout == "zero_size":
        if rank == 0 or zero_dim is None or t.shape[0] != zero_dim or t.shape[0] == 0:
            return None
        return torch.empty((0, *t.shape[1:]), dtype=t.dtype)
    raise LayoutAuditError(f"unknown layout class {layout!r} (one of {', '.join(LAYOUTS)})")


# ---------------------------------------------------------------------------
# recording and replaying ATen calls


@dataclasses.dataclass(frozen=True)
class CallSpec:
    """One ATen call as eager made it: the overload, its arguments with tensors as specs, its results."""

    overload: str
    args: Any  # the (args, kwargs) pytree, tensors replaced by TensorSpec
    eager: tuple[TensorSpec, ...]
    func: Any = dataclasses.field(compare=False, repr=False)  # the OpOverload (or the function)
    tag: str = ""  # for a whole function: the OpInfo it is (two OpInfos may share an ``aten_name``)

    def key(self) -> str:
        """What identifies the call for caching (overload, argument layouts and values)."""
        return f"{self.overload}|{self.tag}|{self.args!r}"

    def inputs(self) -> tuple[TensorSpec, ...]:
        """The tensor arguments' specs, in argument order."""
        return tuple(x for x in pytree.tree_leaves(self.args) if isinstance(x, TensorSpec))


def _spec_tree(tree: Any) -> Any:
    return pytree.tree_map(lambda x: TensorSpec.of(x) if _strided(x) else x, tree)


def _result_specs(out: Any) -> tuple[TensorSpec, ...] | None:
    leaves = [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
    if not leaves or not all(x.layout == torch.strided for x in leaves):
        return None
    return tuple(TensorSpec.of(x) for x in leaves)


class _Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records every ATen call made under it, with its arguments' layouts before the call."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.calls: list[CallSpec] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        before = _spec_tree((args, kwargs))
        out = func(*args, **kwargs)
        results = _result_specs(out)
        if results is not None:
            self.calls.append(CallSpec(str(func), before, results, func))
        return out


class _Unsupported(Exception):
    """The meta or fake run raised: no layout to compare."""


def _replay(call: CallSpec, device: str) -> tuple[TensorSpec, ...]:
    """The results' layouts of ``call`` run on meta tensors (``device="meta"``) or fake ones ("fake")."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def run() -> Any:
        target = "meta" if device == "meta" else "cpu"
        args, kwargs = pytree.tree_map(lambda x: x.build(target) if isinstance(x, TensorSpec) else x, call.args)
        with torch.no_grad():
            return call.func(*args, **kwargs)

    try:
        if device == "fake":
            with FakeTensorMode(allow_non_fake_inputs=False):
                out = run()
        else:
            out = run()
    except Exception as err:
        raise _Unsupported(f"{type(err).__name__}: {str(err)[:200]}") from err
    specs = _result_specs(out)
    if specs is None or len(specs) != len(call.eager):
        raise _Unsupported("no strided tensor results, or another number of them")
    return specs


@dataclasses.dataclass(frozen=True)
class Divergence:
    """One call whose meta or fake result layout differs from eager's.

    ``overload`` is the ATen overload (``aten.roll.default``) or, for a
    whole-function comparison (``kind == "function"``), ``aten.<aten_name>``
    of the OpInfo. ``meta``/``fake`` are the result layouts or the error text
    of that run.
    """

    overload: str
    kind: str  # "aten" (a recorded call) or "function" (the OpInfo's function as a whole)
    layout: str
    target: str
    opinfo: str
    sample: int
    inputs: tuple[str, ...]
    eager: tuple[str, ...]
    meta: tuple[str, ...] | str
    fake: tuple[str, ...] | str
    by: str = ""  # which runs diverge: "meta", "fake" or "meta fake"

    def to_json(self) -> dict[str, Any]:
        """The divergence as a JSON object."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _Outcome:
    meta: tuple[TensorSpec, ...] | str
    fake: tuple[TensorSpec, ...] | str
    diverges: bool  # an observable difference: sizes, dtype, or the layout of a result with elements
    hidden: bool  # only the strides or offset of results without elements differ
    by: str = ""  # the runs with an observable difference: "meta", "fake", "meta fake"


def _compare(call: CallSpec) -> _Outcome:
    found: dict[str, tuple[TensorSpec, ...] | str] = {}
    diverges = hidden = False
    by = []
    for device in ("meta", "fake"):
        try:
            specs = _replay(call, device)
        except _Unsupported as err:
            found[device] = str(err)
            continue
        found[device] = specs
        if [s.observable() for s in specs] != [s.observable() for s in call.eager]:
            diverges = True
            by.append(device)
        elif [s.normal() for s in specs] != [s.normal() for s in call.eager]:
            hidden = True
    return _Outcome(found["meta"], found["fake"], diverges, hidden and not diverges, " ".join(by))


def _texts(found: tuple[TensorSpec, ...] | str) -> tuple[str, ...] | str:
    return found if isinstance(found, str) else tuple(s.text() for s in found)


# ---------------------------------------------------------------------------
# which ops


def _op_key(info: Any) -> str:
    variant = getattr(info, "variant_test_name", "")
    return f"{info.name}.{variant}" if variant else str(info.name)


def _select(names: Sequence[str] | None, extra: Sequence[Any]) -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    pool = list(op_db) + list(extra)
    if names is None:
        return sorted(pool, key=_op_key)
    chosen: list[Any] = []
    for name in names:
        hits = [info for info in pool if _op_key(info) == name or info.name == name]
        if not hits:
            raise LayoutAuditError(f"no OpInfo named {name!r}")
        chosen.extend(h for h in hits if h not in chosen)
    return sorted(chosen, key=_op_key)


def _pick_dtype(info: Any) -> torch.dtype | None:
    supported = set(info.supported_dtypes("cpu"))
    for dtype in DTYPE_PREFERENCE:
        if dtype in supported:
            return dtype
    return None


def _aten_function(info: Any) -> Any:
    """The ATen overload packet standing for the OpInfo's function, or None."""
    name = str(getattr(info, "aten_name", None) or info.name).split(".")[-1]
    try:
        return getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return None


# ---------------------------------------------------------------------------
# one op


def _sample_parts(sample: Any) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    return sample.input, tuple(sample.args), dict(sample.kwargs)


def _relaid(sample: Any, layout: str, target: str) -> tuple[Any, tuple[Any, ...], dict[str, Any]] | None:
    """The sample's (input, args, kwargs) with ``layout`` applied to its ``target`` tensors (None: nothing applies)."""
    first = next((x for x in pytree.tree_leaves(sample.input) if _strided(x)), None)
    zero_dim = first.shape[0] if first is not None and first.dim() > 0 else None
    changed = False

    def apply(x: Any) -> Any:
        nonlocal changed
        if not _strided(x):
            return x
        out = relayout(x.detach(), layout, zero_dim)
        if out is None:
            return x
        changed = True
        return out

    inp, args, kwargs = _sample_parts(sample)
    if target == "input":
        new = (pytree.tree_map(apply, inp), args, kwargs)
    else:
        new = pytree.tree_map(apply, (inp, args, kwargs))
    return new if changed else None


class _OpRun:
    """The state one op's samples share: the cache of compared calls, counters, divergences."""

    def __init__(self, cache: dict[str, _Outcome]) -> None:
        self.cache = cache
        self.new: dict[str, _Outcome] = {}  # what this run added to the cache (a forked child returns it)
        self.divergences: list[Divergence] = []
        self.hidden: list[Divergence] = []  # differences in the layout of results without elements only
        self.checked: Counter[tuple[str, str]] = Counter()  # (overload, layout) -> calls compared
        self.unsupported: Counter[str] = Counter()  # overload -> calls whose meta or fake run raised
        self.skips: Counter[str] = Counter()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["cache"] = {}  # the parent has it already
        return state

    def merge(self, other: _OpRun) -> None:
        """Add ``other``'s findings (of another op, or of a child) to these."""
        self.cache.update(other.new)
        self.divergences.extend(other.divergences)
        self.hidden.extend(other.hidden)
        self.checked.update(other.checked)
        self.unsupported.update(other.unsupported)
        self.skips.update(other.skips)

    def judge(self, call: CallSpec, kind: str, layout: str, target: str, opinfo: str, index: int) -> bool:
        """Compare one call (cached by its key); record and return whether it differs at all (hidden or not)."""
        key = call.key()
        outcome = self.cache.get(key)
        if outcome is None:
            outcome = _compare(call)
            self.cache[key] = self.new[key] = outcome
        self.checked[(call.overload, layout)] += 1
        if isinstance(outcome.meta, str) or isinstance(outcome.fake, str):
            self.unsupported[call.overload] += 1
        if outcome.diverges or outcome.hidden:
            found = Divergence(
                call.overload, kind, layout, target, opinfo, index,
                tuple(s.text() for s in call.inputs()), tuple(s.text() for s in call.eager),
                _texts(outcome.meta), _texts(outcome.fake), outcome.by,
            )
            (self.divergences if outcome.diverges else self.hidden).append(found)
        return outcome.diverges or outcome.hidden


def _run_sample(run: _OpRun, info: Any, key: str, index: int, sample: Any, layouts: Sequence[str]) -> None:
    function = _aten_function(info)
    seen: set[str] = set()
    for layout in layouts:
        for target in TARGETS:
            try:
                parts = _relaid(sample, layout, target)
            except Exception as err:
                run.skips[f"re-layout raised {type(err).__name__}"] += 1
                continue
            if parts is None:
                continue
            inp, args, kwargs = parts
            signature = repr(_spec_tree(parts))
            if signature in seen:
                continue
            seen.add(signature)
            recorder = _Recorder()
            try:
                with torch.no_grad(), recorder:
                    out = info.op(inp, *args, **kwargs)
            except SampleTimeout:
                raise
            except Exception as err:
                run.skips[f"eager call raised {type(err).__name__}"] += 1
                continue
            explained = False
            for call in recorder.calls:
                explained = run.judge(call, "aten", layout, target, key, index) or explained
            results = _result_specs(out)
            if function is not None and results is not None and not explained:
                # The function as a whole, when no ATen call it made explains a divergence: composite
                # ops that export graphs keep may take another path on meta tensors than eagerly.
                name = "aten." + str(function._qualified_op_name).split("::")[-1]
                whole = CallSpec(name, (_spec_tree((inp, args, kwargs)), {}), results, _Whole(info.op), key)
                run.judge(whole, _FUNCTION, layout, target, key, index)


class _Whole:
    """The OpInfo's function called as ``f((input, args, kwargs))``'s parts, for replay."""

    def __init__(self, op: Callable[..., Any]) -> None:
        self.op = op

    def __call__(self, inp: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.op(inp, *args, **kwargs)


# ---------------------------------------------------------------------------
# the report


@dataclasses.dataclass(frozen=True)
class LayoutAuditReport:
    """Everything one layout-audit run found."""

    divergences: tuple[Divergence, ...]
    #: calls that differ only in the strides or offset of results without elements (not divergences)
    hidden: tuple[Divergence, ...]
    #: (overload, layout) -> calls compared
    checked: dict[tuple[str, str], int]
    #: overload -> calls whose meta or fake run raised (not compared)
    unsupported: dict[str, int]
    #: OpInfo key -> dtype used
    dtypes: dict[str, str]
    #: OpInfo key -> why it was not run
    not_run: dict[str, str]
    #: reason -> re-laid-out samples skipped for it
    skips: dict[str, int]
    #: OpInfo key -> layout classes in which it crashed the process (those classes are not audited)
    crashes: dict[str, list[str]]
    settings: dict[str, Any]
    runtime_s: float

    @property
    def divergent_overloads(self) -> frozenset[str]:
        """The overloads (``aten.roll.default``) of every divergence."""
        return frozenset(d.overload for d in self.divergences)

    @property
    def fake_divergent_overloads(self) -> frozenset[str]:
        """The overloads whose *fake* kernel diverged (what ``make_fx`` and ``torch.export`` record)."""
        return frozenset(d.overload for d in self.divergences if "fake" in d.by.split())

    @property
    def divergent_packets(self) -> frozenset[str]:
        """Their ops (``aten.roll``)."""
        return frozenset(_packet(o) for o in self.divergent_overloads)

    @property
    def agreeing_siblings(self) -> frozenset[str]:
        """Overloads of divergent ops that the audit ran and never saw diverge (``aten.div.Tensor``), unless
        the op's function as a whole diverged."""
        checked = {o for o, _ in self.checked}
        whole = {o for o in self.divergent_overloads if o.count(".") < 2}  # a function diverged: all of the op
        return frozenset(
            o
            for o in checked - self.divergent_overloads
            if o.count(".") >= 2 and _packet(o) in self.divergent_packets and _packet(o) not in whole
        )

    def pairs(self, hidden: bool = False) -> dict[tuple[str, str], list[Divergence]]:
        """The divergences (``hidden``: the hidden differences) by (overload, layout class), in report order."""
        found: dict[tuple[str, str], list[Divergence]] = {}
        for d in self.hidden if hidden else self.divergences:
            found.setdefault((d.overload, d.layout), []).append(d)
        return dict(sorted(found.items(), key=lambda kv: (kv[0][0], LAYOUTS.index(kv[0][1]))))

    def summary(self) -> dict[str, Any]:
        """Headline figures."""
        by_layout: Counter[str] = Counter()
        for (_, layout), n in self.checked.items():
            by_layout[layout] += n
        diverged_by_layout: Counter[str] = Counter(d.layout for d in self.divergences)
        return {
            "opinfos_run": len(self.dtypes),
            "opinfos_not_run": len(self.not_run),
            "overloads_checked": len({o for o, _ in self.checked}),
            "calls_compared": sum(self.checked.values()),
            "calls_unsupported": sum(self.unsupported.values()),
            "divergent_calls": len(self.divergences),
            "divergent_pairs": len(self.pairs()),
            "divergent_overloads": len(self.divergent_overloads),
            "divergent_packets": len(self.divergent_packets),
            "hidden_calls": len(self.hidden),
            "hidden_overloads": len({d.overload for d in self.hidden} - self.divergent_overloads),
            "by_layout": {
                layout: {"calls": by_layout[layout], "divergent": diverged_by_layout[layout]} for layout in LAYOUTS
            },
            "runtime_s": round(self.runtime_s, 1),
        }

    def to_json(self) -> dict[str, Any]:
        """The report as JSON: summary, settings, every divergent pair with its evidence, counters."""
        def pairs(hidden: bool) -> list[dict[str, Any]]:
            return [
                {
                    "overload": overload,
                    "layout": layout,
                    "divergent_calls": len(found),
                    "calls_compared": self.checked.get((overload, layout), 0),
                    "opinfos": sorted({d.opinfo for d in found}),
                    "evidence": [d.to_json() for d in found[:_EVIDENCE_LIMIT]],
                }
                for (overload, layout), found in self.pairs(hidden).items()
            ]

        return {
            "torch_version": torch.__version__,
            "summary": self.summary(),
            "settings": self.settings,
            "divergent_overloads": sorted(self.divergent_overloads),
            "divergent_packets": sorted(self.divergent_packets),
            "fake_divergent_overloads": sorted(self.fake_divergent_overloads),
            "agreeing_siblings": sorted(self.agreeing_siblings),
            "pairs": pairs(False),
            "hidden_pairs": pairs(True),
            "checked_overloads": sorted({o for o, _ in self.checked}),
            "unsupported": dict(sorted(self.unsupported.items())),
            "skips": dict(sorted(self.skips.items(), key=lambda kv: -kv[1])),
            "not_run": dict(sorted(self.not_run.items())),
            "crashes": dict(sorted(self.crashes.items())),
            "dtypes": dict(sorted(self.dtypes.items())),
        }

    def to_markdown(self) -> str:
        """The Markdown summary (:func:`render_markdown` of :meth:`to_json`)."""
        return render_markdown(self.to_json())


def _packet(overload: str) -> str:
    """The op of an overload: ``aten.roll.default`` -> ``aten.roll`` (a function's ``aten.roll`` is its own)."""
    return ".".join(overload.split(".")[:2])


def audit_layouts(
    ops: Sequence[str] | None = None,
    *,
    extra: Sequence[Any] = (),
    layouts: Sequence[str] = LAYOUTS,
    max_samples: int | None = 4,
    seconds: float | None = None,
    sample_timeout: float | None = 30.0,
    isolate: bool = hasattr(os, "fork"),
    progress: Callable[[str], None] | None = None,
) -> LayoutAuditReport:
    """Compare meta and fake result layouts with eager CPU over OpInfo samples in every layout class.

    Parameters
    ----------
    ops : sequence of str, optional
        OpInfo names or keys (``"roll"``, ``"nn.functional.conv2d"``);
        ``None``: every op of ``op_db``.
    extra : sequence
        More OpInfo-like objects (``name``, ``op``, ``supported_dtypes``,
        ``sample_inputs``) audited as well, as if they were in ``op_db``
        (with ``ops`` given, they are chosen by name too).
    layouts : sequence of str
        Layout classes of :data:`LAYOUTS` to apply.
    max_samples : int or None
        Sample inputs per op (the first ones); None: all.
    seconds : float or None
        Stop starting new ops after this many seconds (what was not run is
        listed as such in ``not_run``).
    sample_timeout : float or None
        Seconds one sample (in every layout class) may take.
    isolate : bool
        Run each op in a forked child process (default where ``os.fork``
        exists): an op that crashes the interpreter is then retried class by
        class and the classes that crash are listed in ``crashes``.
    progress : callable, optional
        Called with one line per op.

    Returns
    -------
    LayoutAuditReport

    Examples
    --------
    >>> report = audit_layouts(["roll"], max_samples=4)
    >>> "aten.roll.default" in report.divergent_overloads
    True
    """
    unknown = [x for x in layouts if x not in LAYOUTS]
    if unknown:
        raise LayoutAuditError(f"unknown layout classes {unknown} (known: {', '.join(LAYOUTS)})")
    start = time.monotonic()
    chosen = _select(ops, extra)
    cache: dict[str, _Outcome] = {}
    total = _OpRun(cache)
    dtypes: dict[str, str] = {}
    not_run: dict[str, str] = {}
    crashes: dict[str, list[str]] = {}
    for info in chosen:
        key = _op_key(info)
        if seconds is not None and time.monotonic() - start > seconds:
            not_run[key] = "time budget spent"
            continue
        dtype = _pick_dtype(info)
        if dtype is None:
            not_run[key] = "no CPU dtype"
            continue
        dtypes[key] = str(dtype).replace("torch.", "")
        t0 = time.monotonic()

        def one(classes: Sequence[str], info: Any = info, key: str = key, dtype: torch.dtype = dtype) -> _OpRun:
            return _audit_op(info, key, dtype, classes, max_samples, sample_timeout, cache)

        found = _run_op(one, layouts, isolate, total)
        if isinstance(found, list):
            crashes[key] = found
        if progress is not None:
            what = f"{found} divergent calls" if isinstance(found, int) else f"crashed in {', '.join(found)}"
            progress(f"{key}: {dtypes[key]}, {what}, {time.monotonic() - t0:.1f} s")
    settings = {
        "ops": list(ops) if ops is not None else None,
        "extra": [_op_key(info) for info in extra],
        "layouts": list(layouts),
        "targets": list(TARGETS),
        "max_samples": max_samples,
        "seconds": seconds,
        "sample_timeout_s": sample_timeout,
        "isolated": isolate,
    }
    return LayoutAuditReport(
        tuple(total.divergences), tuple(total.hidden), dict(total.checked), dict(total.unsupported), dtypes, not_run, dict(total.skips),
        crashes, settings, time.monotonic() - start,
    )


def _run_op(one: Callable[[Sequence[str]], _OpRun], layouts: Sequence[str], isolate: bool, total: _OpRun) -> int | list[str]:
    """One op in every layout class (``one(classes)``; in a forked child with ``isolate``), merged into ``total``.

    Returns the number of divergent calls it found, or, where it crashed its process, the
    layout classes in which it crashes again when run class by class (what does not crash is kept).
    """
    result = _isolated(lambda: one(layouts)) if isolate else one(layouts)
    if not isinstance(result, str):
        total.merge(result)
        return len(result.divergences)
    crashed = []  # the process died: again class by class, to keep what does not crash
    for layout in layouts:
        part = _isolated(lambda layout=layout: one([layout]))  # type: ignore[misc]
        if isinstance(part, str):
            crashed.append(layout)
            total.skips[f"crashed the process ({part})"] += 1
        else:
            total.merge(part)
    return crashed


def _audit_op(
    info: Any,
    key: str,
    dtype: torch.dtype,
    layouts: Sequence[str],
    max_samples: int | None,
    sample_timeout: float | None,
    cache: dict[str, _Outcome],
) -> _OpRun:
    """One op's samples in every layout class (what a forked child runs)."""
    run = _OpRun(cache)
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # it logs every exception a fake kernel raises
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            samples: Iterable[Any] = info.sample_inputs("cpu", dtype)
            for index, sample in enumerate(samples):
                if max_samples is not None and index >= max_samples:
                    break
                try:
                    with time_limit(sample_timeout):
                        _run_sample(run, info, key, index, sample, layouts)
                except SampleTimeout:
                    run.skips["sample timed out"] += 1
    except Exception as err:
        run.skips[f"sample inputs raised {type(err).__name__}"] += 1
    finally:
        quiet.setLevel(level)
    return run


_T = TypeVar("_T")


#: Seconds a forked child may take for one op before it is killed (a child can also deadlock on a
#: lock another thread of the parent held at fork time; it must never hang the audit).
OP_TIMEOUT = 600.0


def _isolated(work: Callable[[], _T], timeout: float | None = None) -> _T | str:
    """``work()`` in a forked child (its result pickled back), or how the child died.

    Some kernels crash the interpreter on unusual layouts (``_segment_reduce``
    on zero-size offsets segfaults); a child's crash costs only its op. The
    child runs with one intra-op thread (OpenMP is not fork-safe once the
    parent has used it), and a child still running after ``timeout`` seconds
    is killed and reported as timed out.
    """
    timeout = OP_TIMEOUT if timeout is None else timeout
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        faulthandler.disable()  # a crash is reported by the parent, as the signal that ended the child
        code = 0
        try:
            torch.set_num_threads(1)
            payload = pickle.dumps(work())
        except BaseException as err:
            payload = pickle.dumps(f"child raised {type(err).__name__}: {err}")
            code = 1
        try:
            with os.fdopen(write, "wb") as pipe:
                pipe.write(payload)
        finally:
            os._exit(code)
    os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    timed_out = False
    with os.fdopen(read, "rb", buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([pipe], [], [], min(left, 5.0))
            if not ready:
                continue
            chunk = pipe.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return f"timed out after {timeout:.0f} s"
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"{signal.Signals(os.WTERMSIG(status)).name}"
    try:
        result: _T | str = pickle.loads(b"".join(chunks))
    except Exception as err:
        return f"no result ({type(err).__name__})"
    return result


# ---------------------------------------------------------------------------
# rendering


def render_markdown(data: dict[str, Any]) -> str:
    """The Markdown summary of a layout audit's JSON report (:meth:`LayoutAuditReport.to_json`).

    Examples
    --------
    >>> text = render_markdown(audit_layouts(["roll"], max_samples=4).to_json())
    >>> text.splitlines()[0], "`aten.roll.default`" in text
    ('# Layout audit', True)
    """
    lines = _figure_lines(data)
    lines += _overload_lines(data["pairs"])
    lines += _pair_lines(data["pairs"])
    lines += _hidden_lines(data["hidden_pairs"])
    lines += _not_audited_lines(data)
    return "\n".join(lines) + "\n"


def _figure_lines(data: dict[str, Any]) -> list[str]:
    """The title, what was run, the table of headline figures and the table per layout class."""
    s = data["summary"]
    st = data["settings"]
    limit = f"the first {st['max_samples']}" if st.get("max_samples") else "all"
    lines = [
        "# Layout audit",
        "",
        f"`python -m tools.audit --layouts` on torch {data['torch_version']}, CPU: {limit} sample inputs of "
        "every OpInfo of `op_db`, re-laid out in each layout class (only the input tensor, then every tensor "
        "argument), called eagerly while every ATen call is recorded; each recorded call (and the OpInfo's "
        "function as a whole, named by its `aten_name`) run again on meta tensors and on fake tensors "
        "(`FakeTensorMode`) with the same layouts. A *divergence* is a call whose meta or fake result has other "
        "sizes or dtype than eager's, or (for a result with elements) other strides (dimensions of size one "
        "aside) or storage offset. Calls whose meta "
        "or fake run raises are counted, not compared. The divergent overloads of every supported release, "
        "united, are the table `aliasing/core/layout_divergences.py` that the planner's layout refinement reads: "
        "such an op, and any "
        "overload of the same op the audit did not see agree, observes layouts; downstream of an op whose "
        "*fake* kernel diverges, recorded layouts are suspect.",
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| OpInfos run | {s['opinfos_run']} |",
        f"| OpInfos not run | {s['opinfos_not_run']} |",
        f"| overloads checked | {s['overloads_checked']} |",
        f"| calls compared | {s['calls_compared']} |",
        f"| calls whose meta or fake run raised | {s['calls_unsupported']} |",
        f"| **divergent calls** | **{s['divergent_calls']}** |",
        f"| divergent (overload, layout) pairs | {s['divergent_pairs']} |",
        f"| divergent overloads | {s['divergent_overloads']} |",
        f"| divergent ops | {s['divergent_packets']} |",
        f"| calls differing only in the layout of results without elements (not divergences) | {s['hidden_calls']} |",
        f"| runtime | {s['runtime_s']} s |",
        "",
        "| layout class | calls compared | divergent |",
        "| --- | --- | --- |",
    ]
    for layout, f in s["by_layout"].items():
        lines.append(f"| {layout} | {f['calls']} | {f['divergent']} |")
    return lines


def _overload_lines(pairs: list[dict[str, Any]]) -> list[str]:
    """The divergent overloads: the layout classes each diverged in, and which runs diverged."""
    lines = [
        "",
        "## Divergent overloads",
        "",
        "Layout classes in which each diverged, and which runs diverged in the evidence kept (`meta`, `fake`; "
        "the table's fake list counts every call); an overload named without its overload name is the "
        "OpInfo's function as a whole.",
        "",
        "| overload | layout classes | diverging runs |",
        "| --- | --- | --- |",
    ]
    summary: dict[str, tuple[list[str], set[str]]] = {}
    for p in pairs:
        classes, runs = summary.setdefault(p["overload"], ([], set()))
        classes.append(p["layout"])
        for ev in p["evidence"]:
            runs.update(ev.get("by", "").split())
    for overload, (classes, runs) in summary.items():
        lines.append(f"| `{overload}` | {', '.join(classes)} | {' '.join(sorted(runs))} |")
    return lines


def _cell(x: Any) -> str:
    """A table cell of evidence: its layouts (or the error text), ``|`` escaped, at most 160 characters."""
    text = x if isinstance(x, str) else " ".join(x)
    return text.replace("|", "\\|")[:160]


def _pair_lines(pairs: list[dict[str, Any]]) -> list[str]:
    """The divergent (overload, layout class) pairs, each with its first divergent call."""
    lines = [
        "",
        "## Divergent (overload, layout) pairs",
        "",
        "Evidence: the first divergent call, as `(sizes)/(strides)@offset` of its tensor arguments and results.",
        "",
        "| overload | layout | divergent / compared | OpInfos | inputs | eager | meta | fake |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in pairs:
        ev = p["evidence"][0]
        opinfos = ", ".join(p["opinfos"][:3]) + (", ..." if len(p["opinfos"]) > 3 else "")
        lines.append(
            f"| `{p['overload']}` | {p['layout']} | {p['divergent_calls']} / {p['calls_compared']} | {opinfos} | "
            f"{_cell(ev['inputs'])} | {_cell(ev['eager'])} | {_cell(ev['meta'])} | {_cell(ev['fake'])} |"
        )
    return lines


def _hidden_lines(hidden: list[dict[str, Any]]) -> list[str]:
    """The overloads whose results differ only in the layout of results without elements (if any)."""
    if not hidden:
        return []
    lines = [
        "",
        "## Differences in results without elements only",
        "",
        "Not divergences: a tensor without elements addresses no memory, so its strides and offset are "
        "unobservable (no view of it raises, `check_equivalent` compares only its sizes); where they reach a "
        "result with elements, that result is compared. Overload (layout classes, calls):",
        "",
    ]
    by_overload: dict[str, list[str]] = {}
    for p in hidden:
        by_overload.setdefault(p["overload"], []).append(f"{p['layout']} {p['divergent_calls']}")
    lines += [f"- `{o}` ({', '.join(v)})" for o, v in by_overload.items()]
    return lines


def _not_audited_lines(data: dict[str, Any]) -> list[str]:
    """What was not audited (if anything): samples skipped, OpInfos that crashed the process, OpInfos not run."""
    lines: list[str] = []
    if data["skips"]:
        lines += ["", "## Re-laid-out samples skipped", "", "| reason | count |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in data["skips"].items()]
    if data["crashes"]:
        lines += ["", "## OpInfos that crashed the process", "", "| OpInfo | layout classes not audited |", "| --- | --- |"]
        lines += [f"| `{k}` | {', '.join(v)} |" for k, v in data["crashes"].items()]
    if data["not_run"]:
        lines += ["", "## OpInfos not run", "", "| OpInfo | reason |", "| --- | --- |"]
        lines += [f"| `{k}` | {v} |" for k, v in data["not_run"].items()]
    return lines


# ---------------------------------------------------------------------------
# per-release results and the table


#: Where a checkout commits the results of each supported torch release (``layout_audit-2.14.json``...).
RESULTS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
#: The table the planner reads (through :mod:`aliasing.core.layout_divergences`): a data file of the package.
TABLE_PATH = Path(__file__).resolve().parents[1] / "aliasing" / "core" / "registry_data" / "layout-divergences.json"
#: The command that regenerates a release's committed results and the table (run it on that release).
REGENERATE = (
    "python -m tools.audit --layouts --results benchmarks/results "
    "--write-table aliasing/core/registry_data/layout-divergences.json"
)


def release_of(data: dict[str, Any]) -> str:
    """The torch release (``"2.14"``) a layout audit's JSON report was measured on."""
    from aliasing.core.registry import torch_release

    return torch_release(str(data["torch_version"]))


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in release.split("."))


def results_path(release: str, suffix: str = ".json", directory: Path | None = None) -> Path:
    """Where the results of torch ``release`` are committed: ``benchmarks/results/layout_audit-2.14.json``.

    Examples
    --------
    >>> results_path("2.14", ".md").name
    'layout_audit-2.14.md'
    """
    return (directory or RESULTS_DIR) / f"layout_audit-{release}{suffix}"


def committed_results(directory: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every release's committed JSON report in ``directory`` (default :data:`RESULTS_DIR`), by release, oldest first.

    Raises :class:`LayoutAuditError` for a file whose report is of another release than its name says.
    """
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((directory or RESULTS_DIR).glob("layout_audit-*.json")):
        data = json.loads(path.read_text())
        release = release_of(data)
        if path.name != results_path(release).name:
            raise LayoutAuditError(f"{path} holds the results of torch {data['torch_version']} (release {release})")
        found[release] = data
    return dict(sorted(found.items(), key=lambda kv: _release_key(kv[0])))


@dataclasses.dataclass(frozen=True)
class _Union:
    """The table of several releases' results: what any release saw diverge, what every release saw agree."""

    releases: tuple[str, ...]
    versions: dict[str, str]
    divergent: dict[str, tuple[str, ...]]  # overload -> the releases it diverged on
    fake: dict[str, tuple[str, ...]]  # overload -> the releases its fake kernel diverged on
    siblings: tuple[str, ...]


def _unite(results: Sequence[dict[str, Any]]) -> _Union:
    if not results:
        raise LayoutAuditError("no layout audit results to render a table from")
    ordered = sorted(results, key=lambda d: _release_key(release_of(d)))
    releases = tuple(release_of(d) for d in ordered)
    repeated = sorted({r for r in releases if releases.count(r) > 1})
    if repeated:
        raise LayoutAuditError(f"more than one result for torch {', '.join(repeated)}")
    divergent: dict[str, list[str]] = {}
    fake: dict[str, list[str]] = {}
    for release, data in zip(releases, ordered):
        for o in data["divergent_overloads"]:
            divergent.setdefault(o, []).append(release)
        for o in data["fake_divergent_overloads"]:
            fake.setdefault(o, []).append(release)
    packets = {_packet(o) for o in divergent}
    whole = {o for o in divergent if o.count(".") < 2}  # a function diverged: none of the op's overloads is trusted
    ran_everywhere = set.intersection(*(set(d["checked_overloads"]) for d in ordered))
    siblings = sorted(
        o
        for o in ran_everywhere - divergent.keys()
        if o.count(".") >= 2 and _packet(o) in packets and _packet(o) not in whole
    )
    return _Union(
        releases,
        {r: str(d["torch_version"]) for r, d in zip(releases, ordered)},
        {o: tuple(rs) for o, rs in sorted(divergent.items())},
        {o: tuple(rs) for o, rs in sorted(fake.items())},
        tuple(siblings),
    )


def render_table(*results: dict[str, Any]) -> str:
    """The data file ``aliasing/core/registry_data/layout-divergences.json`` for the JSON reports of one or more torch releases.

    The table is their union, conservative: an overload seen diverging on any
    release is divergent on every one, and an overload of a divergent op is
    trusted (in ``agreeing_siblings``) only where every release ran it and
    none saw it diverge. Each divergent overload names the releases it
    diverged on; each release, its torch version, the committed results it
    comes from, what its scan covered and what it found.
    :mod:`aliasing.core.layout_divergences` reads the file (its docstring
    describes the fields).

    Examples
    --------
    >>> old = {"torch_version": "2.13.0", "settings": {"max_samples": 24, "layouts": ["sliced"]},
    ...        "summary": {"opinfos_run": 1, "calls_compared": 2, "divergent_calls": 1, "divergent_overloads": 1,
    ...                    "runtime_s": 0.5},
    ...        "divergent_overloads": ["aten.roll.default"], "fake_divergent_overloads": [],
    ...        "checked_overloads": ["aten.roll.default"]}
    >>> table = json.loads(render_table(old))
    >>> table["layout_divergent"], table["releases"]["2.13"]["torch_version"]
    ({'aten.roll.default': ['2.13']}, '2.13.0')
    """
    union = _unite(results)
    by_release = {release_of(d): d for d in results}
    releases: dict[str, Any] = {}
    for release in union.releases:
        d = by_release[release]
        s = d["summary"]
        releases[release] = {
            "torch_version": union.versions[release],
            "results": results_path(release).relative_to(RESULTS_DIR.parents[1]).as_posix(),
            "max_samples": d["settings"].get("max_samples"),
            "layouts": list(d["settings"]["layouts"]),
            **{k: s[k] for k in ("opinfos_run", "calls_compared", "divergent_calls", "divergent_overloads", "runtime_s")},
        }
    table = {
        "about": "Overloads whose meta or fake kernels lay results out otherwise than their eager CPU kernels: "
        "the union of the layout audit's results of every supported torch release, read by "
        "aliasing.core.layout_divergences (whose docstring describes these fields). Written by the layout "
        "audit (tools.layout_audit): do not edit by hand.",
        "regenerate": REGENERATE,
        "releases": releases,
        "layout_divergent": {o: list(rs) for o, rs in union.divergent.items()},
        "fake_divergent": {o: list(rs) for o, rs in union.fake.items()},
        "agreeing_siblings": list(union.siblings),
    }
    return _json_text(table) + "\n"


def _json_text(value: Any, depth: int = 0) -> str:
    """``value`` as JSON, one field (and one element of a top-level list) a line, other lists on one line."""
    pad = " " * (depth + 1)
    if isinstance(value, dict) and value:
        fields = [f"{pad}{json.dumps(k)}: {_json_text(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(fields) + "\n" + " " * depth + "}"
    if isinstance(value, list) and value and depth == 1:
        return "[\n" + ",\n".join(pad + json.dumps(v) for v in value) + "\n" + " " * depth + "]"
    return json.dumps(value)


def write_table(path: Path, *results: dict[str, Any]) -> None:
    """Write :func:`render_table` of ``results`` to ``path``."""
    path.write_text(render_table(*results))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.audit --layouts``: run the layout audit, print the summary, write the reports.

    Exit status 0 (divergences are findings, not failures; the table records them).

    Examples
    --------
    >>> main(["--ops", "abs", "--max-samples", "1", "--quiet"])
    0
    """
    parser = _parser()
    args = parser.parse_args(argv)
    directory = args.results or RESULTS_DIR
    if args.table_only:
        if args.write_table is None or args.json or args.markdown:
            parser.error("--table-only writes only --write-table (and needs it)")
        args.write_table.write_text(_table(parser, directory, None))
        return 0
    try:
        report = audit_layouts(
            args.ops,
            layouts=tuple(args.classes) if args.classes else LAYOUTS,
            max_samples=args.max_samples or None,
            seconds=args.seconds,
            sample_timeout=args.sample_timeout,
            progress=None if args.quiet else _progress,
        )
    except LayoutAuditError as err:
        parser.error(str(err))
    _write_outputs(parser, args, directory, report.to_json())
    if not args.quiet:
        summary = report.summary()
        for k in ("opinfos_run", "calls_compared", "divergent_calls", "divergent_pairs", "divergent_packets", "runtime_s"):
            print(f"{k}: {summary[k]}", file=sys.stderr)
        print("divergent packets: " + ", ".join(sorted(report.divergent_packets)), file=sys.stderr)
    return 0


def _parser() -> argparse.ArgumentParser:
    """The options of ``python -m tools.audit --layouts``."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.audit --layouts",
        description="Compare meta and fake result layouts with eager CPU over PyTorch's OpInfo samples.",
        epilog=f"The committed results and table, on each supported torch release: {REGENERATE}",
    )
    parser.add_argument("--ops", nargs="+", metavar="NAME", help="OpInfo names or keys (default: all of op_db)")
    parser.add_argument("--max-samples", type=int, default=24, metavar="N", help="sample inputs per op (default 24, as the committed scans; 0: all)")
    parser.add_argument("--classes", nargs="+", metavar="LAYOUT", choices=LAYOUTS, help="layout classes (default: all)")
    parser.add_argument("--seconds", type=float, default=None, metavar="S", help="stop starting ops after S seconds")
    parser.add_argument("--sample-timeout", type=float, default=30.0, metavar="S", help="seconds per sample (default 30)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the summary as Markdown")
    parser.add_argument(
        "--results", type=Path, metavar="DIR",
        help="write the report as DIR/layout_audit-<release>.json and .md (the committed ones: benchmarks/results)",
    )
    parser.add_argument(
        "--write-table", type=Path, metavar="PATH",
        help="write the table, a JSON data file (aliasing/core/registry_data/layout-divergences.json, read by "
        "aliasing.core.layout_divergences): the union of every release's results in "
        "the --results directory (default: the checkout's benchmarks/results), this run's standing for its release",
    )
    parser.add_argument("--table-only", action="store_true", help="run no audit: --write-table from the committed results only")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _table(parser: argparse.ArgumentParser, directory: Path, extra: dict[str, Any] | None) -> str:
    """:func:`render_table` of the results in ``directory``, ``extra`` standing for its release (errors exit as usage errors)."""
    try:
        results = committed_results(directory)
        if extra is not None:
            results[release_of(extra)] = extra
        return render_table(*results.values())
    except LayoutAuditError as err:
        parser.error(str(err))


def _write_outputs(parser: argparse.ArgumentParser, args: argparse.Namespace, directory: Path, data: dict[str, Any]) -> None:
    """Write the JSON report, the Markdown summary and the table where the options say."""
    outputs: list[tuple[Path | None, Callable[[], str]]] = [
        (args.json, lambda: json.dumps(data, indent=1) + "\n"),
        (args.markdown, lambda: render_markdown(data)),
    ]
    if args.results is not None:
        release = release_of(data)
        outputs += [
            (results_path(release, ".json", args.results), lambda: json.dumps(data, indent=1) + "\n"),
            (results_path(release, ".md", args.results), lambda: render_markdown(data)),
        ]
    outputs.append((args.write_table, lambda: _table(parser, directory, data)))
    for path, text in outputs:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text())
