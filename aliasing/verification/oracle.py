"""Real-execution oracle for alias analyses.

:func:`observe_memory` runs a graph on real tensors and records, for every
tensor value, the storage it lives in, the exact bytes it can touch, and the
nodes that really changed those bytes. :func:`check_analysis` compares an
:class:`aliasing.AliasAnalysis` with that record:

1. values whose real storages are equal must be answered ``may_alias``;
2. values whose real byte sets intersect must be answered ``may_overlap``;
3. a node that really changed a byte of a value must be in ``writers`` of it.

A missed claim raises :class:`AnalysisUnsound`. Claims that reality does not
confirm (imprecision, not unsoundness) come back in an :class:`Exactness`.
A write that stores the bytes already there is invisible to the oracle, which
is fine for an oracle that looks only for missed claims.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from aliasing.errors import AnalysisUnsound, OracleUnavailable

if TYPE_CHECKING:
    import numpy

    from aliasing import AliasAnalysis

__all__ = ["AnalysisUnsound", "Exactness", "Observed", "OracleUnavailable", "check_analysis", "observe_memory"]

Interval = tuple[int, int]


def _numpy() -> Any:
    """numpy, imported on first use: it is an optional dependency (the ``test`` extra)."""
    try:
        import numpy
    except ImportError as err:  # pragma: no cover - numpy is in the test extra
        raise OracleUnavailable(
            "the real-execution oracle needs numpy: pip install numpy (or fx-aliasing[test])"
        ) from err
    return numpy


@dataclasses.dataclass(frozen=True)
class Observed:
    """What one tensor value really was during one run.

    ``storage`` is the data pointer of the value's untyped storage when the
    value was produced, ``intervals`` the sorted, disjoint half-open byte
    ranges (relative to the storage start) that the value's elements cover,
    ``written_by`` the names of the nodes that changed at least one of those
    bytes at any point of the run (before or after the value was produced: the
    writers of its memory). ``impl`` identifies the storage object itself
    (its ``StorageImpl``; 0 when unknown): it stays the same when an op resizes
    the storage and moves its data (``out=`` tensors of the wrong size), and
    tells apart storages whose data pointers coincide because one was freed.
    """

    storage: int
    storage_nbytes: int
    intervals: tuple[Interval, ...]
    written_by: frozenset[str]
    impl: int = 0

    def overlaps(self, other: Observed) -> bool:
        """Whether both values touch a common byte of one storage."""
        if self.storage != other.storage or not self.intervals or not other.intervals:
            return False
        if self.impl and other.impl and self.impl != other.impl:
            return False  # a data pointer reused after a resize freed the first allocation
        np = _numpy()
        a, b = np.array(self.intervals, dtype=np.int64), np.array(other.intervals, dtype=np.int64)
        first = np.searchsorted(a[:, 1], b[:, 0], side="right")  # first a-interval ending after b starts
        inside = first < len(a)
        return bool(np.any(a[first[inside], 0] < b[inside, 1]))

    def shares_storage(self, other: Observed) -> bool:
        """Whether both values live in one storage (zero-byte storages have no identity).

        One storage object counts even when it was resized in between (an empty
        ``out=`` tensor and the op's result in it): both names denote it.
        """
        if self.impl and other.impl:
            return self.impl == other.impl and (self.storage_nbytes > 0 or other.storage_nbytes > 0)
        return self.storage == other.storage and self.storage != 0 and self.storage_nbytes > 0


@dataclasses.dataclass(frozen=True)
class Exactness:
    """Claims of an analysis that one run did not confirm (node names, graph order)."""

    false_alias: tuple[tuple[str, str], ...]
    false_overlap: tuple[tuple[str, str], ...]
    false_writers: tuple[tuple[str, str], ...]  # (writer, value)


def _is_dense_block(t: torch.Tensor) -> bool:
    """Whether the elements of ``t`` fill exactly ``numel`` consecutive slots of its storage."""
    expected = 1
    for stride, extent in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz > 1):
        if stride != expected:
            return False
        expected *= extent
    return True


def _byte_intervals(t: torch.Tensor) -> tuple[Interval, ...]:
    """Exact byte ranges of ``t`` relative to its storage start; empty tensors touch nothing."""
    if t.numel() == 0:
        return ()
    size = t.element_size()
    if _is_dense_block(t):
        start = int(t.storage_offset()) * size
        return ((start, start + int(t.numel()) * size),)
    np = _numpy()
    offsets = np.array([t.storage_offset()], dtype=np.int64)
    for extent, stride in zip(t.shape, t.stride()):
        if extent > 1 and stride != 0:  # stride 0 (expand) adds no new element
            offsets = (offsets[:, None] + np.arange(extent, dtype=np.int64) * stride).ravel()
    offsets = np.unique(offsets) * size
    gaps = np.nonzero(np.diff(offsets) > size)[0]
    starts = np.concatenate([offsets[:1], offsets[gaps + 1]])
    ends = np.concatenate([offsets[gaps], offsets[-1:]]) + size
    return tuple(zip(starts.tolist(), ends.tolist()))


def _storage_of(t: torch.Tensor) -> torch.UntypedStorage | None:
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, mkldnn and other storage-less layouts
        return None


def _bytes_of(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage).cpu().clone()


#: One allocation: the storage object's identity (its ``StorageImpl``) and its data pointer then.
_Allocation = tuple[int, int]


def _impl(storage: torch.UntypedStorage) -> int:
    """Identity of the storage object (not of its data, which a resize may move)."""
    return int(storage._cdata)


class _MemoryRecorder(torch.fx.Interpreter):
    """Runs a graph, keeps every value alive, and diffs every live storage around each node."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.keep: list[Any] = []  # nothing is freed, so storage identities stay unique
        # Storage objects, not tensors: a tensor may be moved to another storage (set_).
        self.live: dict[int, torch.UntypedStorage] = {}
        self.values: dict[str, tuple[int, int, int, tuple[Interval, ...]]] = {}  # impl, ptr, nbytes, intervals
        self.changes: dict[str, dict[_Allocation, numpy.ndarray]] = {}  # node -> allocation -> changed byte offsets

    def run_node(self, n: torch.fx.Node) -> Any:
        before = {impl: (st.data_ptr(), _bytes_of(st)) for impl, st in self.live.items()}
        result = super().run_node(n)
        self.keep.append(result)
        self.changes[n.name] = self._diff(before)
        for leaf in pytree.tree_leaves(result):
            if isinstance(leaf, torch.Tensor) and (storage := _storage_of(leaf)) is not None:
                self.live.setdefault(_impl(storage), storage)
        if n.op != "output" and isinstance(result, torch.Tensor) and (storage := _storage_of(result)) is not None:
            self.values[n.name] = (_impl(storage), storage.data_ptr(), storage.nbytes(), _byte_intervals(result))
        return result

    def _diff(self, before: dict[int, tuple[int, torch.Tensor]]) -> dict[_Allocation, numpy.ndarray]:
        np = _numpy()
        changed: dict[_Allocation, numpy.ndarray] = {}
        for impl, (ptr, old) in before.items():
            storage = self.live[impl]
            if storage.data_ptr() != ptr or storage.nbytes() != old.numel():
                # resized: every old byte is gone or reinterpreted; later nodes diff the new allocation
                if old.numel():
                    changed[(impl, ptr)] = np.arange(old.numel(), dtype=np.int64)
                continue
            diff = torch.nonzero(_bytes_of(storage) != old).flatten().numpy()
            if diff.size:
                changed[(impl, ptr)] = diff.astype(np.int64)
        return changed


def _touches(intervals: tuple[Interval, ...], offsets: numpy.ndarray) -> bool:
    """Whether any of the sorted byte ``offsets`` lies in ``intervals``."""
    if not intervals:
        return False
    np = _numpy()
    spans = np.array(intervals, dtype=np.int64)
    first = np.searchsorted(offsets, spans[:, 0], side="left")
    inside = first < len(offsets)
    return bool(np.any(offsets[first[inside]] < spans[inside, 1]))


def observe_memory(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> dict[str, Observed]:
    """Run ``gm`` on real tensors and record the memory of every tensor-valued node.

    The inputs are used as given (in-place ops in the graph mutate them); pass
    fresh copies to keep the originals. Placeholders are recorded like any node,
    so ``result[name].storage`` tells which storage each graph input has.
    Multi-output nodes (``split``) are not recorded; their ``getitem`` users are.
    Every live storage is copied around every node: meant for small graphs.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        The program; run with a :class:`torch.fx.Interpreter`.
    example_inputs : Sequence
        Real values for the placeholders, in graph order.

    Returns
    -------
    dict[str, Observed]
        Node name to what its value really was, in graph order.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: (x[1:], x.add_(1)))(torch.zeros(4))
    >>> seen = observe_memory(gm, [torch.zeros(4)])
    >>> [seen[n].intervals for n in seen]
    [((0, 16),), ((4, 16),), ((0, 16),)]
    >>> sorted(seen["x_1"].written_by)
    ['add_']
    """
    recorder = _MemoryRecorder(gm)
    recorder.run(*example_inputs)
    observed: dict[str, Observed] = {}
    for name, (impl, ptr, nbytes, intervals) in recorder.values.items():
        where = (impl, ptr)
        writers = frozenset(
            node
            for node, changed in recorder.changes.items()
            if where in changed and _touches(intervals, changed[where])
        )
        observed[name] = Observed(ptr, nbytes, intervals, writers, impl)
    return observed


def _names(nodes: Sequence[torch.fx.Node]) -> set[str]:
    return {n.name for n in nodes}


def check_analysis(
    analysis: AliasAnalysis, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> Exactness:
    """Check that ``analysis`` never misses an alias, an overlap or a writer of one real run.

    ``analysis`` must be of a graph whose node names are those of ``gm`` (for
    example ``aliasing.analyze(gm)``, or of the ExportedProgram ``gm`` comes from).

    Parameters
    ----------
    analysis : aliasing.AliasAnalysis
        The claims to check.
    gm : torch.fx.GraphModule
        The program, run by :func:`observe_memory`.
    example_inputs : Sequence
        Real values for the placeholders (mutated by in-place ops).

    Returns
    -------
    Exactness
        Claims the run did not confirm; empty tuples mean the analysis was exact here.

    Raises
    ------
    AnalysisUnsound
        Listing every missed claim, with both node names.

    Examples
    --------
    >>> import torch, aliasing
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x.split(2), tracing_mode="fake")(torch.zeros(4))
    >>> check_analysis(aliasing.analyze(gm), gm, [torch.zeros(4)]).false_overlap
    ()
    """
    observed = observe_memory(gm, example_inputs)
    names = list(observed)
    missed: list[str] = []
    false_alias: list[tuple[str, str]] = []
    false_overlap: list[tuple[str, str]] = []
    false_writers: list[tuple[str, str]] = []
    for i, a in enumerate(names):
        for b in names[i:]:
            oa, ob = observed[a], observed[b]
            alias, overlap = analysis.may_alias(a, b), analysis.may_overlap(a, b)
            if oa.shares_storage(ob) and not alias:
                missed.append(f"may_alias({a}, {b}) is False but both live in storage {oa.storage:#x}")
            elif alias and not oa.shares_storage(ob) and a != b:  # a value aliases itself, even an empty one
                false_alias.append((a, b))
            if oa.overlaps(ob) and not overlap:
                missed.append(f"may_overlap({a}, {b}) is False but both touch a common byte")
            elif overlap and not oa.overlaps(ob) and a != b:
                false_overlap.append((a, b))
        claimed = _names(analysis.writers(a))
        for writer in sorted(observed[a].written_by - claimed):
            missed.append(f"{writer} is not in writers({a}) but changed bytes of {a}")
        false_writers.extend((w, a) for w in sorted(claimed - observed[a].written_by))
    if missed:
        raise AnalysisUnsound("analysis misses what a real run showed:\n  " + "\n  ".join(missed))
    return Exactness(tuple(false_alias), tuple(false_overlap), tuple(false_writers))
