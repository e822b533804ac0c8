"""Storage-sharing audit: which ATen overloads whose schemas declare no alias return memory of an argument?

The analysis takes an ATen overload whose schema declares no alias (registry
kind ``pure``, :mod:`aliasing.core.registry`) as returning fresh memory. Schemas
lie: ``aten.unsafe_split.Tensor`` returns views without declaring it, the CPU
kernel of ``aten.dequantize.self`` returns a float argument itself, and
CompositeImplicitAutograd ops that ``torch.export`` keeps return an argument
or a view of it (``einsum("ij->ji", x)``, ``atleast_2d``, ``broadcast_tensors``,
``conj_physical`` of a real tensor, ``to_dense`` of a strided one...). This
audit runs every ``pure`` overload of the installed torch for real, on CPU, on
as many argument sets as it can get, and records whether any tensor result
shares a storage with any tensor argument (a result that *is* an argument
counts; tensors nested in lists count; a sparse tensor's storages are those of
its indices and values; a storage argument, as ``set.source_Storage`` takes,
counts as one). The calls come from:

- ``opinfo``: every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db``
  (and the effects audit's extra cases, :mod:`tools.audit.ops`):
  its ``sample_inputs`` and, where it defines more, ``reference_inputs``, in
  up to one dtype of each group of :data:`DTYPE_GROUPS` it supports on CPU
  (floating, complex, integer, bool: ``conj_physical`` returns its argument
  on real dtypes only), each sample also ``noncontiguous()`` and in the edge
  variants of :data:`EDGES` (zero-size, size-one, one-element tensors; a
  variant that raises is skipped). Each is run eagerly under a
  :class:`~torch.utils._python_dispatch.TorchDispatchMode` that checks every
  ATen call reaching it (the backend kernels), and traced with
  ``torch.export.export`` (which keeps CompositeImplicitAutograd ops such as
  ``aten.einsum``) whose graph is then run node by node on real tensors,
  every ATen node's result checked against its arguments. Export is slower:
  only the first ``export_samples`` samples of each dtype are exported, and
  every variant of every sample once an exported graph of the OpInfo held a
  ``pure`` CompositeImplicitAutograd overload;
- ``hand``: :func:`hand_cases`, argument sets written for overloads that
  ``op_db`` does not reach but graphs meet (``unsafe_split``, ``dequantize``,
  ``cartesian_prod``, ``flatten_dense_tensors``, ``native_dropout`` of an empty tensor...),
  edge cases included, each called directly, eagerly under the mode and
  through ``torch.export``;
- ``schema``: every ``pure`` overload called directly with arguments made
  from its schema (:func:`schema_argument_sets`: small float, integer,
  complex and bool tensors, zeros for index-like tensors, small integers,
  the tensor's shape for sizes...), each overload in a forked child (random
  arguments can crash a kernel: such crashes are listed, not counted).

The verdict of an overload is ``shares`` where some call returned a result
sharing a storage with an argument, ``fresh`` where it was called at least
once and never did, ``not-run`` where no call reached it. Only ``fresh`` is
evidence: the analysis trusts a ``pure`` overload to return fresh memory only
where the audit of that torch release confirmed it.

Each OpInfo, hand case and batch of schema calls is one work item of a
campaign (:mod:`tools.campaign`): ``--jobs N`` worker
processes, ``--shard``, ``--results`` (resumable), ``--merge``. Run it with
``python -m tools.audit --storage --jobs 2 --write`` on each
supported release: it writes the data file the analysis reads,
``aliasing/core/registry_data/storage-<release>.tsv`` (:func:`table_path`, one
row per ``pure`` overload, named as the registry names it (``aten::mm`` for a
default overload): overload, verdict, calls, evidence), and the
reports ``benchmarks/results/storage_audit-<release>.{json,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from tools import campaign
from tools.campaign import CampaignOptions, Outcome, WorkItem
from tools.errors import AuditError, CampaignError, SampleTimeout
from tools.time_limit import time_limit

__all__ = [
    "DTYPE_GROUPS",
    "EDGES",
    "REGENERATE",
    "RESULTS_DIR",
    "SOURCES",
    "TOOL",
    "VERDICTS",
    "AuditError",
    "StorageAuditReport",
    "audit_storage",
    "hand_cases",
    "main",
    "read_table",
    "render_markdown",
    "render_table",
    "report_path",
    "schema_argument_sets",
    "sharing",
    "table_path",
]

#: The verdicts of the data file.
VERDICTS: tuple[str, ...] = ("fresh", "shares", "not-run")
#: Where the calls come from (see the module docstring).
SOURCES: tuple[str, ...] = ("opinfo", "hand", "schema")
#: Per OpInfo, the first dtype of each group that it supports on CPU is run.
DTYPE_GROUPS: tuple[tuple[torch.dtype, ...], ...] = (
    (torch.float32, torch.float64, torch.bfloat16, torch.float16),
    (torch.complex64, torch.complex128),
    (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8),
    (torch.bool,),
)
#: Variants of each sample besides itself: its ``noncontiguous()`` copy and edge variants
#: (``zero``: tensors sharing the input's first size get first size 0; ``leading_one``: ... first
#: size 1; ``one_element``: every tensor narrowed to its first element, ranks kept).
EDGES: tuple[str, ...] = ("noncontiguous", "zero", "leading_one", "one_element")

#: The campaign tool (results files name it; ``python -m tools.campaign merge`` hands them here).
TOOL = "tools.storage_audit"
_OP_DB_MODULE = "torch.testing._internal.common_methods_invocations"
_HAND_PREFIX = "hand."
_SCHEMA_PREFIX = "schema."
_SCHEMA_BATCHES = 24  # the schema source's work items (overloads split evenly, by name)
_EVIDENCE_LIMIT = 240
_WHERE_LIMIT = 200


# ---------------------------------------------------------------------------
# what counts as sharing


def _storage_keys(t: torch.Tensor) -> list[tuple[int, int]]:
    """(StorageImpl address, data pointer or 0) of each storage ``t`` holds: one for a strided tensor,
    those of the indices and values of a sparse one, none where they cannot be read (mkldnn, nested)."""
    try:
        if t.layout == torch.strided:
            s = t.untyped_storage()
            return [(int(s._cdata), int(s.data_ptr()) if s.nbytes() else 0)]
        if t.layout == torch.sparse_coo:
            parts = [t._indices(), t._values()]
        elif t.layout in (torch.sparse_csr, torch.sparse_bsr):
            parts = [t.crow_indices(), t.col_indices(), t.values()]
        elif t.layout in (torch.sparse_csc, torch.sparse_bsc):
            parts = [t.ccol_indices(), t.row_indices(), t.values()]
        else:
            return []
    except Exception:  # storage-less tensors (functorch wrappers, meta...): nothing to compare
        return []
    return [k for p in parts for k in _storage_keys(p)]


def _tensor_leaves(tree: Any, prefix: str) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) of every tensor in ``tree`` (a value or nested lists, tuples and dicts)."""
    if isinstance(tree, torch.Tensor):
        return [(prefix, tree)]
    found: list[tuple[str, torch.Tensor]] = []
    if isinstance(tree, (list, tuple)):
        for i, x in enumerate(tree):
            found += _tensor_leaves(x, f"{prefix}[{i}]")
    elif isinstance(tree, dict):
        for k, x in tree.items():
            found += _tensor_leaves(x, f"{prefix}[{k!r}]")
    return found


def sharing(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> str | None:
    """How a result of a call shares a storage with an argument (the first such pair), or None.

    A result that *is* an argument shares; so does one whose storage is an
    argument's (same ``StorageImpl``, or the same data pointer of a non-empty
    storage). Arguments and results may be nested lists of tensors.

    Examples
    --------
    >>> x = torch.ones(4, 2)
    >>> sharing((x, 2), {}, torch.ops.aten.unsafe_split.Tensor(x, 2))
    'output 0 is a view of argument 0'
    >>> sharing((x,), {}, torch.ops.aten.dequantize.self(x))
    'output 0 is argument 0'
    >>> sharing((x, x), {}, torch.ops.aten.add.Tensor(x, x)) is None
    True
    """
    inputs: list[tuple[str, Any, list[tuple[int, int]]]] = []
    named = [(f"argument {i}", a) for i, a in enumerate(args)] + [(f"argument {k!r}", a) for k, a in kwargs.items()]
    for name, a in named:
        if isinstance(a, (torch.UntypedStorage, torch.TypedStorage)):  # set.source_Storage: a storage argument
            u = a.untyped() if isinstance(a, torch.TypedStorage) else a  # type: ignore[no-untyped-call]
            inputs.append((name, u, [(int(u._cdata), int(u.data_ptr()) if u.nbytes() else 0)]))
            continue
        inputs += [(p, t, _storage_keys(t)) for p, t in _tensor_leaves(a, name)]
    if not inputs:
        return None
    outs = _tensor_leaves(out if isinstance(out, (list, tuple)) else (out,), "")
    for n, (_, o) in enumerate(outs):
        keys = _storage_keys(o)
        for path, t, tkeys in inputs:
            if o is t:
                return f"output {n} is {path}"
            for impl, ptr in keys:
                if any(impl == i2 or (ptr and ptr == p2) for i2, p2 in tkeys):
                    strided = isinstance(t, torch.Tensor) and t.layout == torch.strided and o.layout == torch.strided
                    what = "a view of" if strided else "sharing a storage with"
                    return f"output {n} is {what} {path}"
    return None


def _describe_value(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        dtype = str(x.dtype).replace("torch.", "")
        text = f"{dtype}{list(x.shape)}"
        if x.layout != torch.strided:
            return f"{str(x.layout).replace('torch.', '')} {text}"
        if x.is_quantized:
            return f"quantized {text}"
        if not x.is_contiguous() and x.numel() > 1:
            text += f" stride {tuple(x.stride())}"
        return text
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_describe_value(v) for v in x[:4]) + (", ..." if len(x) > 4 else "")
        return f"[{inner}]"
    if isinstance(x, torch.dtype):
        return str(x).replace("torch.", "")
    if isinstance(x, (torch.UntypedStorage, torch.TypedStorage)):
        return f"storage[{x.nbytes()} bytes]"
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def _op_text(func: Any) -> str:
    """``einsum`` for ``aten.einsum.default``, ``unsafe_split.Tensor`` for that overload."""
    name = str(func._schema.name).split("::")[-1]
    overload = func._schema.overload_name
    return f"{name}.{overload}" if overload else name


def _describe_call(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    parts = [_describe_value(a) for a in args] + [f"{k}={_describe_value(v)}" for k, v in kwargs.items()]
    return f"{_op_text(func)}({', '.join(parts)})"


def _clean(text: str, limit: int) -> str:
    text = " ".join(text.split())  # no tabs or newlines in a data file's field
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------
# which overloads: the registry's ``pure`` ones


_PURE: frozenset[str] | None = None
_CIA: frozenset[str] | None = None


def _pure() -> frozenset[str]:
    """Registry names (``aten::add.Tensor``, ``aten::mm``) of the installed torch's ``pure`` overloads."""
    global _PURE
    if _PURE is None:
        from aliasing.core.registry import classify_installed

        _PURE = frozenset(c.overload for c in classify_installed() if c.kind == "pure")
    return _PURE


def _composite_implicit() -> frozenset[str]:
    """The ``pure`` overloads with a CompositeImplicitAutograd kernel (they never reach a dispatch mode)."""
    global _CIA
    if _CIA is None:
        _CIA = frozenset(n for n in _pure() if torch._C._dispatch_has_kernel_for_dispatch_key(n, "CompositeImplicitAutograd"))
    return _CIA


def _registry_name(func: Any) -> str | None:
    """The registry's name of an ATen ``OpOverload`` (``aten::mm`` for ``aten.mm.default``), else None."""
    schema = getattr(func, "_schema", None)
    if schema is None or not isinstance(func, torch._ops.OpOverload):
        return None
    name = str(schema.name)
    if not name.startswith("aten::"):
        return None
    return f"{name}.{schema.overload_name}" if schema.overload_name else name


def _overload_of(name: str) -> Any:
    """The ``OpOverload`` of a registry name (``aten::mm`` -> ``aten.mm.default``)."""
    base, _, overload = name.split("::", 1)[1].partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


# ---------------------------------------------------------------------------
# the tally of one work item


class _Tally:
    """Calls checked per ``pure`` overload, with the first sharing call's evidence and where it came from."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.evidence: dict[str, str] = {}
        self.where: dict[str, str] = {}
        self.skips: Counter[str] = Counter()
        self.context = ""  # where the calls being checked come from (the item, dtype, variant, path)

    def check(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any, path: str) -> None:
        name = _registry_name(func)
        if name is None or name not in _pure():
            return
        self.calls[name] += 1
        if name in self.evidence:
            return
        try:
            found = sharing(args, kwargs, out)
        except Exception as err:  # never the audit's failure: counted apart
            self.skips[f"sharing check raised {type(err).__name__}"] += 1
            return
        if found is not None:
            self.evidence[name] = _clean(f"{_describe_call(func, args, kwargs)}: {found}", _EVIDENCE_LIMIT)
            self.where[name] = _clean(f"{self.context}, {path}", _WHERE_LIMIT)

    def to_json(self) -> dict[str, Any]:
        return {
            "overloads": {
                n: {"calls": c, "evidence": self.evidence.get(n), "where": self.where.get(n)} for n, c in sorted(self.calls.items())
            },
            "skips": dict(self.skips),
        }


class _Checker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Checks every ATen call that reaches it (the backend kernels, below CompositeImplicitAutograd)."""

    def __init__(self, tally: _Tally) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tally = tally

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.tally.check(func, args, kwargs, out, "eager")
        return out


class _GraphChecker(torch.fx.Interpreter):
    """Runs a graph node by node on real tensors, checking every ATen node's result against its arguments."""

    def __init__(self, gm: torch.fx.GraphModule, tally: _Tally) -> None:
        super().__init__(gm)
        self.tally = tally

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        out = super().call_function(target, args, kwargs)
        if isinstance(target, torch._ops.OpOverload):
            self.tally.check(target, args, kwargs, out, "export")
        return out


class _Exportable(torch.nn.Module):
    """A sample's call as a function of its tensors only (every other argument is a constant)."""

    def __init__(self, fn: Callable[..., Any], leaves: list[Any], spec: Any, slots: list[int]) -> None:
        super().__init__()
        self.fn = fn
        self.leaves = leaves
        self.spec = spec
        self.slots = slots

    def forward(self, *tensors: torch.Tensor) -> Any:
        leaves = list(self.leaves)
        for i, t in zip(self.slots, tensors):
            leaves[i] = t
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(inp, *args, **kwargs)


def _export_and_run(tally: _Tally, fn: Callable[..., Any], inp: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[str]:
    """Export ``fn(inp, *args, **kwargs)`` and run its graph on the same tensors, node by node.

    Returns the ``pure`` overloads the graph called (empty when the export failed: counted as a skip).
    """
    from torch.export.graph_signature import InputKind

    leaves, spec = pytree.tree_flatten((inp, args, kwargs))
    slots = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    tensors = [leaves[i] for i in slots]
    if any(t.layout != torch.strided or t.is_quantized for t in tensors):
        tally.skips["export: a non-strided or quantized tensor argument"] += 1
        return set()
    try:
        ep = torch.export.export(_Exportable(fn, leaves, spec, slots), tuple(tensors), strict=False)
    except SampleTimeout:
        raise
    except Exception as err:
        tally.skips[f"export raised {type(err).__name__}"] += 1
        return set()
    user = iter(tensors)
    values: list[Any] = []
    for s in ep.graph_signature.input_specs:
        if s.kind is InputKind.USER_INPUT:
            values.append(next(user))
        elif s.kind in (InputKind.PARAMETER, InputKind.BUFFER) and s.target in ep.state_dict:
            values.append(ep.state_dict[s.target])
        elif s.kind in (InputKind.CONSTANT_TENSOR, InputKind.BUFFER) and s.target in ep.constants:
            values.append(ep.constants[s.target])
        else:
            tally.skips[f"export: a graph input of kind {s.kind.name}"] += 1
            return set()
    called = {
        n for n in (_registry_name(node.target) for node in ep.graph_module.graph.nodes if node.op == "call_function") if n in _pure()
    }
    try:
        with torch.no_grad():
            _GraphChecker(ep.graph_module, tally).run(*values)
    except SampleTimeout:
        raise
    except Exception as err:
        tally.skips[f"exported graph raised {type(err).__name__}"] += 1
    return called


# ---------------------------------------------------------------------------
# the OpInfo source


def _signature(inp: Any, args: Any, kwargs: Any) -> str:
    """What tells two argument sets apart for this audit: tensors' dtypes, sizes and strides, other values."""

    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return ("T", str(x.dtype), str(x.layout), tuple(x.shape), tuple(x.stride()) if x.layout == torch.strided else ())
        return repr(x)[:80]

    return repr(pytree.tree_map(leaf, (inp, args, kwargs)))


def _dtypes(info: Any) -> list[torch.dtype]:
    """The first dtype of each group of :data:`DTYPE_GROUPS` that ``info`` supports on CPU."""
    supported = set(info.supported_dtypes("cpu"))
    found = (next((d for d in group if d in supported), None) for group in DTYPE_GROUPS)
    return [d for d in found if d is not None]


def _edge(sample: Any, edge: str) -> Any | None:
    """``sample`` in edge variant ``edge`` (one of :data:`EDGES`), or None where it changes nothing."""
    if edge == "noncontiguous":
        return sample.noncontiguous()
    first = next((t for _, t in _tensor_leaves(sample.input, "") if t.layout == torch.strided and t.dim() > 0), None)
    size = first.shape[0] if first is not None else None
    changed = False

    def shrink(t: Any) -> Any:
        nonlocal changed
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.dim() == 0 or t.is_quantized:
            return t
        if edge in ("zero", "leading_one"):
            if size is None or size == 0 or t.shape[0] != size:
                return t
            n = 0 if edge == "zero" else 1
            if t.shape[0] == n:
                return t
            changed = True
            return t.detach().narrow(0, 0, n).clone()
        if t.numel() <= 1:
            return t
        out = t.detach()
        for d in range(out.dim()):
            if out.shape[d] > 1:
                out = out.narrow(d, 0, 1)
        changed = True
        return out.clone()

    new = sample.transform(shrink)
    return new if changed else None


def _variants(sample: Any) -> Iterator[tuple[str, Any]]:
    yield "sample", sample
    for edge in EDGES:
        try:
            v = _edge(sample, edge)
        except Exception:
            continue
        if v is not None:
            yield edge, v


def _samples(info: Any, dtype: torch.dtype, max_samples: int | None) -> list[tuple[str, Any]]:
    """("sample" or "reference", SampleInput): the first ``max_samples`` of each (reference inputs only
    where the OpInfo defines more than its sample inputs)."""
    funcs: list[tuple[str, Callable[[], Iterable[Any]]]] = []
    sample_fn = getattr(info, "sample_inputs_func", None)
    if sample_fn is not None:
        funcs.append(("sample", lambda: sample_fn(info, "cpu", dtype, False)))
    else:  # the effects audit's extra cases
        funcs.append(("sample", lambda: info.sample_inputs("cpu", dtype, requires_grad=False)))
    reference_fn = getattr(info, "reference_inputs_func", None)
    if reference_fn is not None:
        funcs.append(("reference", lambda: reference_fn(info, "cpu", dtype, False)))
    found: list[tuple[str, Any]] = []
    for kind, make in funcs:
        torch.manual_seed(0)
        samples = iter(make())
        try:
            found += [(kind, s) for s in itertools.islice(samples, max_samples)]
        finally:
            # closed here, not when collected: an OpInfo's generator runs under no_grad, and its
            # closing sets the grad mode, which must not happen in the middle of an export
            close = getattr(samples, "close", None)
            if close is not None:
                close()
    return found


def _audit_opinfo(tally: _Tally, key: str, settings: dict[str, Any]) -> dict[str, Any]:
    from tools.audit.ops import _op_by_key

    info = _op_by_key(key).info
    try:
        dtypes = _dtypes(info)
    except Exception as err:
        return {"dtypes": [], "not_run": f"supported dtypes raised {type(err).__name__}"}
    if not dtypes:
        return {"dtypes": [], "not_run": "no CPU dtype"}
    start = time.monotonic()
    budget = settings["op_seconds"]
    export_samples = settings["export_samples"]
    export_all = False  # set once an exported graph held a pure CompositeImplicitAutograd overload
    samples = exports = 0
    fn = info.op
    for dtype in dtypes:
        seen: set[str] = set()
        exported_here = 0
        dname = str(dtype).replace("torch.", "")
        try:
            for index, (kind, sample) in enumerate(_samples(info, dtype, settings["max_samples"])):
                if budget is not None and time.monotonic() - start > budget:
                    tally.skips["op time budget spent"] += 1
                    break
                try:
                    with time_limit(settings["sample_timeout_s"]):
                        for variant, s in _variants(sample):
                            sig = _signature(s.input, s.args, s.kwargs)
                            if sig in seen:
                                continue
                            seen.add(sig)
                            tally.context = f"OpInfo {key} {kind} {index} {dname} {variant}"
                            samples += 1
                            try:
                                with warnings.catch_warnings(), torch.no_grad(), _Checker(tally):
                                    warnings.simplefilter("ignore")
                                    fn(s.input, *s.args, **s.kwargs)
                            except SampleTimeout:
                                raise
                            except Exception as err:
                                tally.skips[f"eager call raised {type(err).__name__}"] += 1
                                continue
                            if export_all or (variant == "sample" and exported_here < export_samples):
                                exported_here += variant == "sample"
                                exports += 1
                                with warnings.catch_warnings():
                                    warnings.simplefilter("ignore")
                                    called = _export_and_run(tally, fn, s.input, tuple(s.args), dict(s.kwargs))
                                export_all = export_all or bool(called & _composite_implicit())
                except SampleTimeout:
                    tally.skips["sample timed out"] += 1
        except SampleTimeout:
            tally.skips["sample timed out"] += 1
        except Exception as err:
            tally.skips[f"sample inputs raised {type(err).__name__}"] += 1
    return {"dtypes": [str(d).replace("torch.", "") for d in dtypes], "not_run": "", "samples": samples, "exports": exports,
            "export_all": export_all}


# ---------------------------------------------------------------------------
# the hand-written source


@dataclasses.dataclass(frozen=True)
class _HandCase:
    """Argument sets for one overload: ``make()`` returns a list of (args, kwargs), each called
    directly, eagerly under the dispatch mode, and through ``torch.export``."""

    overload: str  # registry name: "aten::unsafe_split.Tensor"
    make: Callable[[], list[tuple[tuple[Any, ...], dict[str, Any]]]]


def _t(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    if dtype.is_complex or dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    return torch.randint(0, 5, shape, dtype=dtype)


def _shapes() -> list[torch.Tensor]:
    """Tensors of the common edge shapes: 2-d, 1-d, 0-d, one element, zero-size, size-one dims, non-contiguous."""
    return [_t(3, 4), _t(5), _t(), _t(1), _t(1, 1), _t(0, 4), _t(4, 1, 3), _t(4, 3).t()]


def _sparse() -> torch.Tensor:
    return torch.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse()


def _hand_table() -> list[_HandCase]:
    f, c, i64, b = torch.float32, torch.complex64, torch.int64, torch.bool

    def each(*shapes: torch.Tensor, extra: tuple[Any, ...] = (), **kw: Any) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [((x, *extra), dict(kw)) for x in shapes]

    def q() -> torch.Tensor:
        return torch.quantize_per_tensor(torch.rand(3, 4), 0.1, 0, torch.quint8)

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("aten::unsafe_split.Tensor", lambda: [((_t(6, 2), 2), {}), ((_t(6, 2), 6), {}), ((_t(6, 2), 9), {}), ((_t(5), 2), {}),
                                               ((_t(2, 6), 4, 1), {}), ((_t(0, 3), 1), {}), ((_t(1), 1), {}), ((_t(4, 3).t(), 1), {})]),
        ("aten::unsafe_split_with_sizes", lambda: [((_t(6, 2), [2, 4]), {}), ((_t(6, 2), [6]), {}), ((_t(6, 2), [0, 6]), {}),
                                                   ((_t(2, 6), [1, 5], 1), {}), ((_t(1), [1]), {}), ((_t(0, 2), [0]), {})]),
        ("aten::unsafe_chunk", lambda: [((_t(6, 2), 3), {}), ((_t(6, 2), 1), {}), ((_t(1), 1), {}), ((_t(2, 6), 2, 1), {}),
                                        ((_t(0, 2), 2), {})]),
        ("aten::dequantize.self", lambda: [*each(*_shapes()), ((_t(3, 4, dtype=torch.float64),), {}), ((q(),), {})]),
        ("aten::dequantize.tensors", lambda: [(([_t(3)],), {}), (([_t(3), _t(2)],), {}), (([q()],), {})]),
        ("aten::conj_physical", lambda: [*each(*_shapes()), *each(_t(3, dtype=i64), _t(3, dtype=b), _t(3, dtype=c), _t(3, dtype=torch.float64))]),
        ("aten::to_dense", lambda: [*each(*_shapes()), ((_sparse(),), {}), ((_sparse().to_sparse_csr(),), {}),
                                    ((_t(2, dtype=f),), {"dtype": torch.float32}), ((_t(2, dtype=i64),), {"dtype": torch.int64})]),
        ("aten::cartesian_prod", lambda: [(([_t(3)],), {}), (([_t(3), _t(2)],), {}), (([_t(1)],), {}), (([_t(0)],), {})]),
        ("aten::flatten_dense_tensors", lambda: [(([_t(3, 4)],), {}), (([_t(5)],), {}), (([_t(3), _t(2, 2)],), {}),
                                                 (([_t(4, 3).t()],), {}), (([_t()],), {}), (([_t(0)],), {})]),
        ("aten::unflatten_dense_tensors", lambda: [((_t(12), [_t(3, 4)]), {}), ((_t(7), [_t(3), _t(2, 2)]), {}),
                                                   ((_t(1), [_t()]), {}), ((_t(0), [_t(0)]), {})]),
        ("aten::broadcast_tensors", lambda: [(([_t(3, 4)],), {}), (([_t(3, 4), _t(3, 4)],), {}), (([_t(3, 1), _t(1, 4)],), {}),
                                             (([_t(3, 4), _t(4)],), {}), (([_t(), _t()],), {}), (([_t(0, 2), _t(2)],), {})]),
        ("aten::einsum", lambda: [(("ij->ji", [_t(3, 4)]), {}), (("ij->ij", [_t(3, 4)]), {}), (("ii->i", [_t(3, 3)]), {}),
                                  (("ij,jk->ik", [_t(3, 4), _t(4, 2)]), {}), (("i->i", [_t(5)]), {}), (("...->...", [_t(2, 3)]), {}),
                                  (("ijk->kji", [_t(2, 3, 4)]), {}), (("ij->j", [_t(3, 4)]), {}), (("i,i->i", [_t(3), _t(3)]), {}),
                                  (("ij->ji", [_t(1, 1)]), {}), (("ij->ji", [_t(0, 3)]), {})]),
        ("aten::sum_to_size", lambda: [((_t(3, 4), [3, 4]), {}), ((_t(3, 4), [1, 4]), {}), ((_t(3, 4), [4]), {}),
                                       ((_t(1), [1]), {}), ((_t(0, 2), [0, 2]), {})]),
        ("aten::_to_cpu", lambda: [(([_t(3)],), {}), (([_t(3), _t(2, 2)],), {})]),
        ("aten::data", lambda: each(_t(3, 4), _t())),
        ("aten::_reshape_from_tensor", lambda: [((_t(3, 4), torch.tensor([12])), {}), ((_t(3, 4), torch.tensor([4, 3])), {})]),
        ("aten::native_channel_shuffle", lambda: [((_t(2, 4, 3), 1), {}), ((_t(2, 4, 3), 2), {}), ((_t(1, 2, 2, 2), 1), {})]),
        ("aten::chalf", lambda: [((_t(3, dtype=torch.complex32),), {}), ((_t(3),), {})]),
        ("aten::matrix_power", lambda: [((_t(3, 3), 1), {}), ((_t(3, 3), 0), {}), ((_t(3, 3), 2), {})]),
        ("aten::linalg_matrix_power", lambda: [((_t(3, 3), 1), {}), ((_t(3, 3), 2), {})]),
        ("aten::chain_matmul", lambda: [(([_t(3, 3)],), {}), (([_t(3, 4), _t(4, 2)],), {})]),
        ("aten::linalg_multi_dot", lambda: [(([_t(3, 4), _t(4, 2)],), {}), (([_t(3), _t(3)],), {})]),
        ("aten::pad", lambda: [((_t(3, 4), [0, 0]), {}), ((_t(3, 4), [1, 1]), {}), ((_t(1, 3, 4), [0, 0], "reflect"), {}),
                               ((_t(1, 3, 4), [0, 0], "circular"), {})]),
        ("aten::constant_pad_nd", lambda: [((_t(3, 4), [0, 0]), {}), ((_t(3, 4), [1, 0]), {}), ((_t(0, 4), [0, 0]), {})]),
        ("aten::tile", lambda: [((_t(3, 4), [1, 1]), {}), ((_t(3, 4), [1]), {}), ((_t(3), [2]), {})]),
        ("aten::repeat_interleave.self_int", lambda: [((_t(3, 4), 1), {}), ((_t(3, 4), 2, 0), {})]),
        ("aten::native_dropout", lambda: [((_t(3, 4), 0.5, False), {}), ((_t(3, 4), 0.5, True), {}), ((_t(0, 4), 0.5, True), {}),
                                          ((_t(3, 4), 0.0, True), {})]),
        ("aten::_sparse_coo_tensor_unsafe", lambda: [((torch.tensor([[0, 1]]), _t(2), [3]), {})]),
        ("aten::sparse_coo_tensor.indices", lambda: [((torch.tensor([[0, 1]]), _t(2)), {})]),
        ("aten::sparse_coo_tensor.indices_size", lambda: [((torch.tensor([[0, 1]]), _t(2), [3]), {})]),
        ("aten::_sparse_csr_tensor_unsafe", lambda: [((torch.tensor([0, 1, 2]), torch.tensor([0, 1]), _t(2), [2, 2]), {})]),
        ("aten::sparse_csr_tensor.crow_col_value_size", lambda: [((torch.tensor([0, 1, 2]), torch.tensor([0, 1]), _t(2), [2, 2]), {})]),
        ("aten::sparse_csr_tensor.crow_col_value", lambda: [((torch.tensor([0, 1, 2]), torch.tensor([0, 1]), _t(2)), {})]),
        ("aten::to_sparse", lambda: [((_sparse(),), {}), ((_t(2, 2),), {})]),
        ("aten::to_sparse.sparse_dim", lambda: [((_sparse(), 2), {}), ((_t(2, 2), 1), {})]),
        ("aten::to_sparse_csr", lambda: [((_sparse().to_sparse_csr(),), {}), ((_t(2, 2),), {})]),
        ("aten::meshgrid", lambda: [(([_t(3)],), {}), (([_t(3), _t(2)],), {})]),
        ("aten::meshgrid.indexing", lambda: [(([_t(3)],), {"indexing": "ij"}), (([_t(3), _t(2)],), {"indexing": "xy"})]),
        ("aten::where", lambda: [((_t(3, dtype=b),), {})]),
        ("aten::clip", lambda: [((_t(3),), {}), ((_t(3), 0.0), {})]),
        ("aten::clamp", lambda: [((_t(3),), {}), ((_t(3), 0.0), {})]),
        ("aten::fix", lambda: each(_t(3), _t(3, dtype=i64))),
        ("aten::trunc", lambda: each(_t(3), _t(3, dtype=i64))),
        ("aten::float_power.Tensor_Scalar", lambda: [((_t(3, dtype=torch.float64), 1), {})]),
        ("aten::_shape_as_tensor", lambda: each(_t(3))),
        ("aten::adaptive_avg_pool1d", lambda: [((_t(1, 2, 4), [4]), {}), ((_t(1, 2, 4), [1]), {})]),
        ("aten::adaptive_avg_pool2d", lambda: [((_t(1, 2, 4, 4), [4, 4]), {}), ((_t(1, 2, 4, 4), [1, 1]), {})]),
        ("aten::max_pool2d", lambda: [((_t(1, 2, 4, 4), [1, 1]), {})]),
        ("aten::max_pool1d", lambda: [((_t(1, 2, 4), [1]), {})]),
        ("aten::avg_pool1d", lambda: [((_t(1, 2, 4), [1]), {})]),
        ("aten::matmul", lambda: [((_t(3, 4), _t(4)), {}), ((_t(4), _t(4, 3)), {}), ((_t(2, 3, 4), _t(4, 5)), {})]),
        ("aten::linear", lambda: [((_t(3, 4), _t(2, 4)), {}), ((_t(3, 4), _t(2, 4), _t(2)), {})]),
        ("aten::clone", lambda: each(*_shapes())),
        ("aten::lift_fresh_copy", lambda: each(_t(3))),
        ("aten::alias_copy", lambda: each(_t(3))),
        ("aten::_to_copy", lambda: [((_t(3),), {}), ((_t(3),), {"dtype": torch.float32})]),
        ("aten::atleast_1d", lambda: each(*_shapes())),
        ("aten::atleast_2d", lambda: each(*_shapes())),
        ("aten::atleast_3d", lambda: each(*_shapes(), _t(2, 3, 4))),
        ("aten::atleast_1d.Sequence", lambda: [(([x],), {}) for x in _shapes()] + [(([_t(3), _t()],), {})]),
        ("aten::atleast_2d.Sequence", lambda: [(([x],), {}) for x in _shapes()] + [(([_t(3), _t(2, 2)],), {})]),
        ("aten::atleast_3d.Sequence", lambda: [(([x],), {}) for x in _shapes()] + [(([_t(3), _t(2, 2, 2)],), {})]),
        ("aten::column_stack", lambda: [(([_t(3, 2)],), {}), (([_t(3)],), {})]),
        ("aten::hstack", lambda: [(([_t(3, 2)],), {})]),
        ("aten::vstack", lambda: [(([_t(3, 2)],), {})]),
        ("aten::dstack", lambda: [(([_t(3, 2, 2)],), {})]),
        ("aten::row_stack", lambda: [(([_t(3, 2)],), {})]),
        ("aten::cat", lambda: [(([_t(3, 2)],), {}), (([_t(3, 2), _t(0)],), {})]),
        ("aten::concat", lambda: [(([_t(3, 2)],), {})]),
        ("aten::concatenate", lambda: [(([_t(3, 2)],), {})]),
        ("aten::stack", lambda: [(([_t(3, 2)],), {})]),
        ("aten::block_diag", lambda: [(([_t(3, 2)],), {})]),
        ("aten::flip", lambda: [((_t(3, 2), []), {}), ((_t(3, 2), [0]), {})]),
        ("aten::roll", lambda: [((_t(3, 2), [0]), {}), ((_t(3, 2), [3], [0]), {})]),
        ("aten::fft_fftshift", lambda: [((_t(1),), {})]),
        ("aten::squeeze_copy", lambda: each(_t(3, 1))),
        ("aten::as_strided_copy", lambda: [((_t(3, 2), [2], [1]), {})]),
        ("aten::expand_copy", lambda: [((_t(3, 1), [3, 2]), {})]),
        ("aten::masked_fill.Scalar", lambda: [((_t(3), _t(3, dtype=b), 0.0), {})]),
        ("aten::index.Tensor", lambda: [((_t(3, 2), [torch.tensor([0, 1])]), {})]),
        ("aten::diag", lambda: each(_t(3), _t(3, 3))),
        ("aten::diagflat", lambda: each(_t(3), _t(1))),
        ("aten::trace", lambda: each(_t(3, 3))),
        ("aten::one_hot", lambda: [((torch.tensor([0, 2]),), {})]),
        ("aten::quantize_per_tensor", lambda: [((_t(3, 4), 0.1, 0, torch.quint8), {}), ((_t(0, 4), 0.1, 0, torch.qint8), {})]),
        ("aten::int_repr", lambda: [((q(),), {})]),
        ("aten::q_scale", lambda: [((q(),), {})]),
        ("aten::nll_loss", lambda: [((torch.log_softmax(_t(3, 4), 1), torch.tensor([0, 3, 1])), {})]),
        ("aten::set.source_Storage", lambda: [((_t(3), _t(4).untyped_storage()), {})]),
        ("aten::set.source_Tensor", lambda: [((_t(3), _t(4)), {})]),
    ]
    return [_HandCase(name, make) for name, make in cases]


def hand_cases() -> dict[str, _HandCase]:
    """The hand-written argument sets, by work-item key (``hand.aten::unsafe_split.Tensor``)."""
    return {_HAND_PREFIX + c.overload: c for c in _hand_table()}


def _audit_hand(tally: _Tally, key: str, settings: dict[str, Any]) -> dict[str, Any]:
    case = hand_cases()[key]
    try:
        func = _overload_of(case.overload)
    except (AttributeError, RuntimeError):
        return {"not_run": "no such overload in this torch"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            argument_sets = case.make()
    except Exception as err:  # e.g. a dtype this release's CPU kernels do not make
        return {"not_run": f"its arguments could not be made ({type(err).__name__})"}
    calls = 0
    for index, (args, kwargs) in enumerate(argument_sets):
        base = f"hand {case.overload} {index}"
        for path in ("direct", "eager", "export"):
            tally.context = base
            try:
                with time_limit(settings["sample_timeout_s"]), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if path == "direct":  # the overload itself, whatever kernel it has
                        with torch.no_grad():
                            out = func(*args, **kwargs)
                        tally.check(func, args, kwargs, out, "direct")
                        calls += 1
                    elif path == "eager":
                        with torch.no_grad(), _Checker(tally):
                            func(*args, **kwargs)
                    else:
                        _export_and_run(tally, _Positional(func), args, (), kwargs)
            except SampleTimeout:
                tally.skips["sample timed out"] += 1
            except Exception as err:
                tally.skips[f"{path} call raised {type(err).__name__}"] += 1
    return {"not_run": "" if calls else "every call raised", "samples": calls}


class _Positional:
    """``func(*args, **kwargs)`` as ``f(args, **kwargs)``: the export wrapper's ``(input, *args)`` shape."""

    def __init__(self, func: Any) -> None:
        self.func = func

    def __call__(self, args: tuple[Any, ...], **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)


# ---------------------------------------------------------------------------
# the schema source


#: Tensor arguments that hold indices, lengths or targets: filled with zeros of an integer dtype.
_INDEX_LIKE = frozenset({
    "index", "indices", "target", "targets", "offsets", "lengths", "batch_sizes", "repeats", "input_lengths",
    "target_lengths", "crow_indices", "col_indices", "ccol_indices", "row_indices", "compressed_indices", "plain_indices",
    "sorted_sequence", "boundaries", "segment_ids", "labels",
})


def _schema_values(arg: Any, tensor: torch.Tensor) -> list[Any] | None:
    """Candidate values of one required schema argument, given the tensor of this attempt (None: unsupported type)."""
    kind = str(getattr(arg, "real_type", arg.type))
    optional = kind.startswith("Optional[")
    base = kind[len("Optional["):-1] if optional else kind
    if base == "Tensor" and arg.name in _INDEX_LIKE:
        base_values: list[Any] = [torch.zeros(tensor.shape, dtype=torch.int64)]
    else:
        other = tensor.clone()
        values: dict[str, list[Any]] = {
            "Tensor": [tensor],
            "List[Tensor]": [[tensor], [tensor, other]],
            "List[Optional[Tensor]]": [[torch.zeros(tensor.shape[:1], dtype=torch.int64)], [None, None]],
            "int": [1, 0, -1],
            "List[int]": [list(tensor.shape) or [1], [1], [0, 1]],
            "float": [0.5, 0.0],
            "List[float]": [[0.5]],
            "bool": [False, True],
            "List[bool]": [[True, True, True], [True, False, False]],
            "number": [1, 0.5, 2],
            "List[number]": [[1], [0.5]],
            "ScalarType": [tensor.dtype, torch.float32],
            "str": ["mean", "ij->ji", "none"],
            "Layout": [torch.strided],
            "Device": [torch.device("cpu")],
            "MemoryFormat": [torch.contiguous_format],
            "Generator": [None],
            "Storage": [other.untyped_storage()],
        }
        if base not in values:
            return [None] if optional else None
        base_values = values[base]
    return ([None] if optional else []) + base_values


def schema_argument_sets(func: Any, limit: int = 24) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Argument sets for ``func`` made from its schema alone: required arguments filled with small values.

    Each attempt uses one tensor of :func:`_schema_tensors` for every tensor
    argument (index-like ones, by name, get integer zeros of its shape);
    other required arguments take the k-th of a few candidates in the k-th
    attempt with that tensor (optional ones are left out). At most ``limit`` sets.

    Examples
    --------
    >>> args, kwargs = next(schema_argument_sets(torch.ops.aten.add.Tensor))
    >>> [tuple(a.shape) for a in args], kwargs
    ([(3, 4), (3, 4)], {})
    """
    schema = func._schema
    required = [a for a in schema.arguments if not a.has_default_value()]
    made = 0
    for tensor in _schema_tensors():
        choices: list[list[Any]] = []
        for a in required:
            vals = _schema_values(a, tensor)
            if vals is None:
                return
            choices.append(vals)
        width = max((len(c) for c in choices), default=1)
        for k in range(min(width, 3)):
            args: list[Any] = []
            kwargs: dict[str, Any] = {}
            for a, vals in zip(required, choices):
                v = vals[k % len(vals)]
                value = v.clone() if isinstance(v, torch.Tensor) and any(v is x for x in args) else v
                if a.kwarg_only:
                    kwargs[a.name] = value
                else:
                    args.append(value)
            yield tuple(args), kwargs
            made += 1
            if made >= limit:
                return


def _schema_tensors() -> list[torch.Tensor]:
    return [_t(3, 4), _t(3, 4, dtype=torch.int64), _t(4), _t(), _t(3, 4, dtype=torch.complex64), _t(3, 4, dtype=torch.bool),
            _t(2, 3, 4, 4), _t(0, 4)]


def _schema_batch(settings: dict[str, Any], index: int) -> list[str]:
    pure = sorted(_pure())
    return pure[index::_SCHEMA_BATCHES]


#: Overloads the schema source leaves out: their kernels wait, sleep or write files whatever their arguments.
_SCHEMA_SKIP = frozenset({"aten::_async_error", "aten::_print", "aten::_test_optional_filled_intlist"})


def _schema_one(name: str, timeout: float | None) -> dict[str, Any]:
    """One overload's schema calls (in a forked child): the tally's JSON."""
    tally = _Tally()
    func = _overload_of(name)
    for index, (args, kwargs) in enumerate(schema_argument_sets(func)):
        tally.context = f"schema {name} {index}"
        try:
            with time_limit(timeout), warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                out = func(*args, **kwargs)
            tally.check(func, args, kwargs, out, "direct")
        except SampleTimeout:
            tally.skips["schema call timed out"] += 1
            break
        except Exception:
            continue
        if tally.calls[name] >= 6:
            break
    return tally.to_json()


def _audit_schema(tally: _Tally, key: str, settings: dict[str, Any]) -> dict[str, Any]:
    from tools.layout_audit import _isolated

    index = int(key[len(_SCHEMA_PREFIX):])
    names = [n for n in _schema_batch(settings, index) if n not in _SCHEMA_SKIP]
    crashed: list[str] = []
    for name in names:
        found = _isolated(lambda name=name: _schema_one(name, settings["sample_timeout_s"]), timeout=60.0)  # type: ignore[misc]
        if isinstance(found, str):
            crashed.append(f"{name}: {found}")
            continue
        for n, o in found["overloads"].items():
            tally.calls[n] += o["calls"]
            if o["evidence"] and n not in tally.evidence:
                tally.evidence[n], tally.where[n] = o["evidence"], o["where"]
        tally.skips.update(found["skips"])
    return {"not_run": "", "crashed": crashed}


# ---------------------------------------------------------------------------
# the campaign


def _settings(
    ops: Sequence[str] | None,
    sources: Sequence[str],
    max_samples: int | None,
    export_samples: int,
    sample_timeout: float | None,
    op_seconds: float | None,
) -> dict[str, Any]:
    return {
        "ops": list(ops) if ops is not None else "all",
        "sources": list(sources),
        "max_samples": max_samples,
        "export_samples": export_samples,
        "sample_timeout_s": sample_timeout,
        "op_seconds": op_seconds,
        "dtype_groups": [[str(d).replace("torch.", "") for d in g] for g in DTYPE_GROUPS],
        "edges": list(EDGES),
    }


def _work_items(settings: dict[str, Any]) -> list[WorkItem]:
    """OpInfo keys, ``hand.<overload>`` and ``schema.<batch>`` items (``ops`` selects OpInfos and hand cases by name)."""
    from tools.audit.ops import _select

    ops = None if settings["ops"] == "all" else settings["ops"]
    keys: list[str] = []
    if "opinfo" in settings["sources"]:
        if ops is None:
            keys += [op.key for op in _select(None, True)]
        else:
            opinfo_names = [n for n in ops if not n.startswith("aten::")]
            keys += [op.key for op in _select(opinfo_names, True)] if opinfo_names else []
    if "hand" in settings["sources"]:
        hands = hand_cases()
        keys += [k for k in hands if ops is None or hands[k].overload in ops]
    if "schema" in settings["sources"] and ops is None:
        keys += [f"{_SCHEMA_PREFIX}{i:02d}" for i in range(_SCHEMA_BATCHES)]
    return [WorkItem(k, k) for k in keys]


def storage_item(settings: dict[str, Any], key: str) -> dict[str, Any]:
    """One campaign item (what a worker runs): an OpInfo, a hand case or a batch of schema calls.

    Returns the tally (``overloads``: calls, evidence, where; ``skips``) and what the item did.
    """
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    logging.getLogger("torch.export").setLevel(logging.CRITICAL)
    logging.getLogger("torch._export").setLevel(logging.CRITICAL)
    tally = _Tally()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    try:
        if key.startswith(_HAND_PREFIX):
            info = _audit_hand(tally, key, settings)
        elif key.startswith(_SCHEMA_PREFIX):
            info = _audit_schema(tally, key, settings)
        else:
            info = _audit_opinfo(tally, key, settings)
    finally:
        torch.set_num_threads(threads)
    return {**tally.to_json(), **info}


# ---------------------------------------------------------------------------
# the report


@dataclasses.dataclass(frozen=True)
class StorageAuditReport:
    """What one storage-sharing audit found, per ``pure`` overload of the installed torch."""

    torch_version: str
    #: registry name -> (verdict, calls checked, evidence, where the evidence came from)
    rows: dict[str, tuple[str, int, str, str]]
    #: registry name -> sources that reached it
    sources: dict[str, list[str]]
    #: work item -> why it did not run (error, timeout, crash, not started, or the item's own reason)
    not_run: dict[str, str]
    #: schema calls that crashed their forked child: "overload: signal"
    crashed: list[str]
    skips: dict[str, int]
    items: int
    samples: int
    exports: int
    settings: dict[str, Any]
    runtime_s: float
    jobs: int | None = None

    def verdicts(self) -> dict[str, str]:
        """Registry name -> verdict."""
        return {n: r[0] for n, r in self.rows.items()}

    def summary(self) -> dict[str, Any]:
        """Headline figures."""
        counts = Counter(r[0] for r in self.rows.values())
        by_source = Counter(s for ss in self.sources.values() for s in set(ss))
        only = Counter(ss[0] for ss in self.sources.values() if len(set(ss)) == 1)
        return {
            "pure_overloads": len(self.rows),
            "fresh": counts["fresh"],
            "shares": counts["shares"],
            "not_run": counts["not-run"],
            "calls_checked": sum(r[1] for r in self.rows.values()),
            "work_items": self.items,
            "items_not_run": len(self.not_run),
            "opinfo_samples_run": self.samples,
            "exports": self.exports,
            "overloads_reached_by_source": {s: by_source[s] for s in SOURCES},
            "overloads_reached_only_by_source": {s: only[s] for s in SOURCES},
            "runtime_s": round(self.runtime_s, 1),
            "jobs": self.jobs,
        }

    def to_json(self) -> dict[str, Any]:
        """The report as JSON: summary, settings, the ``shares`` overloads with evidence, every verdict."""
        return {
            "torch_version": self.torch_version,
            "summary": self.summary(),
            "settings": self.settings,
            "shares": [
                {"overload": n, "calls": r[1], "evidence": r[2], "where": r[3]} for n, r in self.rows.items() if r[0] == "shares"
            ],
            "verdicts": {n: [r[0], r[1], sorted(set(self.sources.get(n, [])))] for n, r in self.rows.items()},
            "not_run_items": dict(sorted(self.not_run.items())),
            "crashed_schema_calls": self.crashed,
            "skips": dict(sorted(self.skips.items(), key=lambda kv: -kv[1])),
        }

    def table(self) -> str:
        """The data file's text (:func:`render_table`)."""
        return render_table(self.torch_version, self.rows)


def _source_of(key: str) -> str:
    return "hand" if key.startswith(_HAND_PREFIX) else "schema" if key.startswith(_SCHEMA_PREFIX) else "opinfo"


def _fold(settings: dict[str, Any], outcomes: dict[str, Outcome], not_started: Sequence[str], runtime: float,
          jobs: int | None) -> StorageAuditReport:
    calls: Counter[str] = Counter()
    evidence: dict[str, tuple[str, str]] = {}
    sources: dict[str, list[str]] = {}
    not_run: dict[str, str] = dict.fromkeys(not_started, "not started: time budget spent")
    skips: Counter[str] = Counter()
    crashed: list[str] = []
    samples = exports = 0
    for key in sorted(outcomes):
        o = outcomes[key]
        if o.status != "ok":
            not_run[key] = f"{o.status}: {o.error[:200]}"
            continue
        v = o.value
        if v.get("not_run"):
            not_run[key] = v["not_run"]
        crashed += v.get("crashed", [])
        samples += v.get("samples", 0) if _source_of(key) == "opinfo" else 0
        exports += v.get("exports", 0)
        skips.update(v.get("skips", {}))
        for n, found in v["overloads"].items():
            calls[n] += found["calls"]
            sources.setdefault(n, []).append(_source_of(key))
            if found["evidence"] and n not in evidence:
                evidence[n] = (found["evidence"], found["where"] or key)
    rows: dict[str, tuple[str, int, str, str]] = {}
    for n in sorted(_pure()):
        if n in evidence:
            rows[n] = ("shares", calls[n], *evidence[n])
        elif calls[n]:
            rows[n] = ("fresh", calls[n], "", "")
        else:
            rows[n] = ("not-run", 0, "", "")
    return StorageAuditReport(
        torch.__version__, rows, {n: sorted(set(s)) for n, s in sources.items()}, not_run, sorted(crashed), dict(skips),
        len(outcomes) + len(not_started), samples, exports, settings, runtime, jobs,
    )


def audit_storage(
    ops: Sequence[str] | None = None,
    *,
    sources: Sequence[str] = SOURCES,
    max_samples: int | None = 20,
    export_samples: int = 5,
    sample_timeout: float | None = 20.0,
    op_seconds: float | None = 20.0,
    progress: Callable[[str], None] | None = None,
    campaign_options: CampaignOptions | None = None,
) -> StorageAuditReport:
    """Run the storage-sharing audit of the installed torch.

    Parameters
    ----------
    ops : sequence of str, optional
        OpInfo names or keys (``"einsum"``) and registry names of hand cases
        (``"aten::unsafe_split.Tensor"``); ``None``: every OpInfo, hand case and
        schema batch. (With ``ops``, the schema source does not run.)
    sources : sequence of str
        Which of :data:`SOURCES` to run.
    max_samples : int or None
        Per OpInfo and dtype, the first this many sample inputs and as many
        reference inputs (None: all).
    export_samples : int
        Per OpInfo and dtype, the first this many samples are also exported
        (every variant of every sample once a graph held a ``pure``
        CompositeImplicitAutograd overload).
    sample_timeout : float or None
        Seconds one sample (all its variants) may take.
    op_seconds : float or None
        Per OpInfo, no sample is started after this many seconds.
    progress : callable, optional
        Called with one line per work item.
    campaign_options : CampaignOptions, optional
        Worker processes, shard, results file (resume), item time limit.

    Examples
    --------
    >>> report = audit_storage(["aten::unsafe_split.Tensor"], sources=["hand"])
    >>> report.verdicts()["aten::unsafe_split.Tensor"]
    'shares'
    """
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        raise AuditError(f"unknown sources {unknown} (known: {', '.join(SOURCES)})")
    if max_samples is not None and max_samples < 1:
        raise AuditError(f"max_samples must be at least 1, got {max_samples}")
    options = campaign_options or CampaignOptions()
    options = dataclasses.replace(options, imports=(_OP_DB_MODULE, *options.imports))
    settings = _settings(ops, sources, max_samples, export_samples, sample_timeout, op_seconds)
    if ops is not None:
        known = set(hand_cases()) | {k[len(_HAND_PREFIX):] for k in hand_cases()}
        from tools.audit.ops import _select

        for name in ops:
            if name.startswith("aten::"):
                if name not in known:
                    raise AuditError(f"no hand case for {name!r}")
            else:
                _select([name], True)  # raises AuditError for an unknown OpInfo
    items = _work_items(settings)
    if not items:
        raise AuditError("nothing to run: no work item for these ops and sources")

    def report_item(outcome: Outcome, done: int, total: int | None) -> None:
        if progress is None:
            return
        if outcome.status != "ok":
            progress(f"[{done}/{total}] {outcome.key}: {outcome.status}: {outcome.error[:200]} ({outcome.seconds:.1f} s)")
            return
        v = outcome.value
        shares = sorted(n for n, o in v["overloads"].items() if o["evidence"])
        progress(
            f"[{done}/{total}] {outcome.key}: {sum(o['calls'] for o in v['overloads'].values())} calls, "
            f"{len(v['overloads'])} pure overloads{', shares: ' + ' '.join(shares) if shares else ''}"
            f"{' (' + v['not_run'] + ')' if v.get('not_run') else ''} ({outcome.seconds:.1f} s)"
        )

    start = time.monotonic()
    try:
        run = campaign.run_campaign(storage_item, items, settings=settings, tool=TOOL, options=options, progress=report_item)
    except CampaignError as err:
        raise AuditError(str(err)) from err
    return _fold(settings, run.outcomes, run.not_started, time.monotonic() - start, options.jobs)


# ---------------------------------------------------------------------------
# files


#: Where the reports of each release are committed (``storage_audit-2.13.{json,md}``).
RESULTS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
#: The command that writes a release's data file and reports (run it on that release).
REGENERATE = "python -m tools.audit --storage --jobs 2 --write"


def table_path(release: str | None = None) -> Path:
    """Where the data file of a torch release is committed: ``aliasing/core/registry_data/storage-2.13.tsv``."""
    from aliasing.core.registry import storage_audit_path

    return storage_audit_path(release)


def report_path(release: str | None = None, suffix: str = ".json", directory: Path | None = None) -> Path:
    """Where the reports of a torch release are committed: ``benchmarks/results/storage_audit-2.13.json``.

    Examples
    --------
    >>> report_path("2.14", ".md").name
    'storage_audit-2.14.md'
    """
    from aliasing.core.registry import torch_release

    return (directory or RESULTS_DIR) / f"storage_audit-{release or torch_release()}{suffix}"


def render_table(version: str, rows: dict[str, tuple[str, int, str, str]] | dict[str, tuple[str, int, str]]) -> str:
    """The data file: a header line, then ``overload<TAB>verdict<TAB>calls<TAB>evidence``, sorted.

    Examples
    --------
    >>> text = render_table("2.13.0+cpu", {"aten::mm": ("fresh", 3, ""), "aten::einsum": ("shares", 1, "einsum(...)")})
    >>> text.splitlines()[1:]
    ['aten::einsum\\tshares\\t1\\teinsum(...)', 'aten::mm\\tfresh\\t3\\t']
    """
    lines = [f"# storage-sharing audit of torch {version}: overload, verdict, calls, evidence (python -m tools.audit --storage)"]
    lines += [f"{n}\t{r[0]}\t{r[1]}\t{_clean(str(r[2]), _EVIDENCE_LIMIT) if r[2] else ''}" for n, r in sorted(rows.items())]
    return "\n".join(lines) + "\n"


def read_table(path: Path) -> dict[str, tuple[str, int, str]]:
    """A data file's rows: registry name -> (verdict, calls, evidence).

    Raises
    ------
    AuditError
        For a line that is not four tab-separated fields, an unknown verdict or
        a bad count.
    """
    rows: dict[str, tuple[str, int, str]] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise AuditError(f"{path}:{number}: {len(fields)} fields, not 4")
        name, verdict, count, evidence = fields
        if verdict not in VERDICTS or not count.isdigit() or name in rows:
            raise AuditError(f"{path}:{number}: bad row {line!r}")
        rows[name] = (verdict, int(count), evidence)
    return rows


def render_markdown(data: dict[str, Any]) -> str:
    """The Markdown report of :meth:`StorageAuditReport.to_json`."""
    s = data["summary"]
    st = data["settings"]
    samples = f"the first {st['max_samples']}" if st.get("max_samples") else "all"
    jobs = f", {s['jobs']} worker processes" if s.get("jobs") else ""
    lines = [
        "# Storage-sharing audit",
        "",
        f"`python -m tools.audit --storage` on torch {data['torch_version']}, CPU: every ATen overload "
        "that the registry classifies `pure` (its schema declares no alias), run for real; a call *shares* when a "
        "tensor result is, or shares a storage with, a tensor argument. Calls from: "
        f"every OpInfo of `op_db` ({samples} sample inputs and as many reference inputs per dtype, one dtype of each "
        "of the floating, complex, integer and bool groups it supports, each sample also non-contiguous, zero-size, "
        "with first size one and one-element; run eagerly under a dispatch mode that checks every ATen call, and "
        f"the first {st['export_samples']} samples per dtype traced with `torch.export` and run node by node, all "
        "variants once a graph held a CompositeImplicitAutograd overload); hand-written argument sets "
        "(`tools.storage_audit.hand_cases`); and arguments made from each overload's schema. "
        "`fresh`: called, never shared (the only verdict under which the analysis takes the op's results as fresh "
        "memory); `shares`: some call shared; `not-run`: no call reached it. The data file is "
        f"`aliasing/core/registry_data/storage-{_release(data)}.tsv`.",
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| `pure` overloads | {s['pure_overloads']} |",
        f"| fresh | {s['fresh']} |",
        f"| **shares** | **{s['shares']}** |",
        f"| not-run | {s['not_run']} |",
        f"| calls checked | {s['calls_checked']} |",
        f"| work items (OpInfos, hand cases, schema batches) | {s['work_items']} |",
        f"| work items not run | {s['items_not_run']} |",
        f"| OpInfo argument sets run (variants included) | {s['opinfo_samples_run']} |",
        f"| exports run | {s['exports']} |",
        f"| runtime | {s['runtime_s']} s{jobs} |",
        "",
        "| source | overloads reached | reached by it alone |",
        "| --- | --- | --- |",
    ]
    for src in SOURCES:
        lines.append(f"| {src} | {s['overloads_reached_by_source'][src]} | {s['overloads_reached_only_by_source'][src]} |")
    lines += ["", "## Overloads whose results share an argument's storage", "",
              "Evidence: the first sharing call (arguments as dtype[sizes]), and where it came from.", "",
              "| overload | calls | evidence | where |", "| --- | --- | --- | --- |"]
    for r in data["shares"]:
        lines.append(f"| `{r['overload']}` | {r['calls']} | {_esc(r['evidence'])} | {_esc(r['where'])} |")
    if data["not_run_items"]:
        lines += ["", "## Work items that did not run", "", "| item | reason |", "| --- | --- |"]
        lines += [f"| `{k}` | {_esc(v)[:200]} |" for k, v in data["not_run_items"].items()]
    if data.get("crashed_schema_calls"):
        lines += ["", "## Schema calls that crashed their (forked) process", "",
                  "Their overloads' other calls still count; the crash itself is no sharing evidence.", ""]
        lines += [f"- `{c}`" for c in data["crashed_schema_calls"]]
    if data["skips"]:
        lines += ["", "## Argument sets skipped", "", "| reason | count |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in data["skips"].items()]
    return "\n".join(lines) + "\n"


def _esc(text: str) -> str:
    return text.replace("|", "\\|")


def _release(data: dict[str, Any]) -> str:
    from aliasing.core.registry import torch_release

    return torch_release(str(data["torch_version"]))


# ---------------------------------------------------------------------------
# the command line


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.audit --storage``: run the audit, print the summary, write the files.

    Exit status 0 (``shares`` verdicts are findings, not failures: the data file records them).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.merge is not None:
            start = time.monotonic()
            settings, outcomes = campaign.merge_results(args.merge, tool=TOOL, items=_work_items, allow_missing=args.allow_missing)
            report = _fold(settings, outcomes, (), time.monotonic() - start, None)
        else:
            report = audit_storage(
                args.ops,
                sources=args.sources,
                max_samples=args.max_samples or None,
                export_samples=args.export_samples,
                sample_timeout=args.sample_timeout,
                op_seconds=args.op_seconds or None,
                progress=None if args.quiet else _progress,
                campaign_options=campaign.options_from_args(args, time_budget=args.seconds),
            )
    except (AuditError, CampaignError) as err:
        parser.error(str(err))
    data = report.to_json()
    outputs: list[tuple[Path | None, Callable[[], str]]] = [
        (args.table or (table_path() if args.write else None), report.table),
        (args.json or (report_path(None, ".json") if args.write else None), lambda: json.dumps(data, indent=1) + "\n"),
        (args.markdown or (report_path(None, ".md") if args.write else None), lambda: render_markdown(data)),
    ]
    for path, text in outputs:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text())
    if not args.quiet:
        s = data["summary"]
        for k in ("pure_overloads", "fresh", "shares", "not_run", "calls_checked", "items_not_run", "runtime_s"):
            print(f"{k}: {s[k]}", file=sys.stderr)
        print("shares: " + ", ".join(r["overload"] for r in data["shares"]), file=sys.stderr)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.audit --storage",
        description="Run every `pure` ATen overload for real and record whether a result shares an argument's storage.",
        epilog=f"The committed data file and reports, on each supported torch release: {REGENERATE}",
    )
    parser.add_argument("--ops", nargs="+", metavar="NAME", help="OpInfo names or keys, registry names of hand cases (default: all)")
    parser.add_argument("--sources", nargs="+", choices=SOURCES, default=list(SOURCES), help="which sources of calls (default: all)")
    parser.add_argument("--max-samples", type=int, default=20, metavar="N",
                        help="per OpInfo and dtype: sample inputs, and as many reference inputs (default 20; 0: all)")
    parser.add_argument("--export-samples", type=int, default=5, metavar="N", help="per OpInfo and dtype: samples exported (default 5)")
    parser.add_argument("--sample-timeout", type=float, default=20.0, metavar="S", help="seconds per sample (default 20)")
    parser.add_argument("--op-seconds", type=float, default=20.0, metavar="S",
                        help="per OpInfo: start no sample after S seconds (default 20; 0: no limit)")
    parser.add_argument("--seconds", type=float, default=None, metavar="S", help="start no work item after S seconds")
    parser.add_argument("--write", action="store_true",
                        help="write the committed data file and reports of the installed release (aliasing/core/registry_data/"
                        "storage-<release>.tsv, benchmarks/results/storage_audit-<release>.{json,md})")
    parser.add_argument("--table", type=Path, metavar="PATH", help="write the data file here")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the JSON report here")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the Markdown report here")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    campaign.add_campaign_arguments(parser)
    parser.set_defaults(item_timeout=300.0)
    return parser


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
