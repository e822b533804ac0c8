"""The real-execution oracle, and the alias analysis checked against it.

1. The oracle's own facts (byte ranges, storages, writers) on hand-checked programs.
2. ``check_analysis`` catches a lying analysis and reports an over-cautious one.
3. Soundness: ``aliasing.analyze`` misses no alias, overlap or writer on many
   small programs (views of every kind, in-place ops, ``out=``, custom ops).
4. Exactness: disjoint views (qkv splits, unbind, chunk, narrow, select,
   interleaved strides, KV-cache slices) are answered "no overlap", also with
   dynamic shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import aliasing
from aliasing.errors import AliasingError
from aliasing.verification.oracle import AnalysisUnsound, Exactness, Observed
from rewrite.testing import check_analysis, observe_memory

Inputs = Callable[[], list[torch.Tensor]]


@torch.library.custom_op("fxaliasing_oracle::axpy_and_scale", mutates_args=("y", "z"))
def axpy_and_scale(y: torch.Tensor, z: torch.Tensor, x: torch.Tensor) -> None:
    """Mutates two arguments: ``y += x`` and ``z *= 2``."""
    y.add_(x)
    z.mul_(2)


@axpy_and_scale.register_fake
def _axpy_and_scale_fake(y: torch.Tensor, z: torch.Tensor, x: torch.Tensor) -> None:
    return None


def trace(fn: Callable[..., Any], inputs: Inputs, mode: str = "fake") -> torch.fx.GraphModule:
    return make_fx(fn, tracing_mode=mode)(*inputs())


def trace_dynamic_first_dim(fn: Callable[..., Any], inputs: Inputs) -> torch.fx.GraphModule:
    """Trace with only dimension 0 of every input symbolic (a dynamic token count)."""
    mode = FakeTensorMode(shape_env=ShapeEnv())
    fakes = []
    for t in inputs():
        dims = [DimDynamic.DYNAMIC] + [DimDynamic.STATIC] * (t.dim() - 1)
        fakes.append(mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=dims)))
    return make_fx(fn, tracing_mode="symbolic")(*fakes)


def returned(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The nodes the graph returns, in order."""
    result = gm.graph.output_node().args[0]
    return list(result) if isinstance(result, (tuple, list)) else [result]


def observe(fn: Callable[..., Any], inputs: Inputs) -> tuple[torch.fx.GraphModule, dict[str, Observed]]:
    gm = trace(fn, inputs)
    return gm, observe_memory(gm, inputs())


# --------------------------------------------------------------------------- 1. oracle facts


def test_observed_byte_ranges_of_views() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x[1:], x.t(), x[:, 1], x[2:2], x[0].expand(5, 3)

    gm, seen = observe(fn, lambda: [torch.zeros(4, 3)])
    base = seen[gm.graph.find_nodes(op="placeholder")[0].name]
    tail, t, col, empty, expanded = (seen[n.name] for n in returned(gm))
    assert base.intervals == ((0, 48),) and base.storage_nbytes == 48
    assert tail.intervals == ((12, 48),)
    assert t.intervals == ((0, 48),)
    assert col.intervals == ((4, 8), (16, 20), (28, 32), (40, 44))
    assert empty.intervals == ()
    assert expanded.intervals == ((0, 12),)
    assert {v.storage for v in (base, tail, t, col, empty, expanded)} == {base.storage}
    assert empty.shares_storage(base) and not empty.overlaps(base)
    assert col.overlaps(t) and col.overlaps(expanded)
    assert not col.overlaps(Observed(base.storage, 48, ((0, 4), (8, 16)), frozenset()))


def test_observed_disjoint_pieces() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v = x.split(4, -1)
        return q, k, v, x[:, ::2], x[:, 1::2]

    gm, seen = observe(fn, lambda: [torch.zeros(2, 12)])
    q, k, v, even, odd = (seen[n.name] for n in returned(gm))
    assert q.intervals == ((0, 16), (48, 64))
    assert not q.overlaps(k) and not k.overlaps(v) and not q.overlaps(v)
    assert not even.overlaps(odd) and even.overlaps(q) and odd.overlaps(v)
    assert q.shares_storage(k) and even.shares_storage(odd)


def test_observed_writers_of_a_view_write() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = x.chunk(2)
        b.mul_(2)
        return a, b, x[1:]

    gm, seen = observe(fn, lambda: [torch.ones(4, 2)])
    x = gm.graph.find_nodes(op="placeholder")[0].name
    a, b, tail = (seen[n.name] for n in returned(gm))
    assert seen[x].written_by == b.written_by == tail.written_by == {"mul_"}
    assert a.written_by == frozenset()


def test_observed_out_keyword_and_input_storages() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.add(a, b, out=c)

    gm = trace(fn, lambda: [torch.ones(3), torch.ones(3), torch.zeros(3)])
    a, b, c = (n.name for n in gm.graph.find_nodes(op="placeholder"))
    out = returned(gm)[0].name
    shared = torch.zeros(3)
    seen = observe_memory(gm, [torch.ones(3), torch.ones(3), shared])
    assert seen[c].written_by == seen[out].written_by == {out}
    assert seen[c].storage == shared.untyped_storage().data_ptr() == seen[out].storage
    assert len({seen[a].storage, seen[b].storage, seen[c].storage}) == 3
    same = torch.ones(3)
    again = observe_memory(gm, [same, same, torch.zeros(3)])
    assert again[a].storage == again[b].storage


def test_observed_write_of_identical_bytes_is_invisible() -> None:
    _, seen = observe(lambda x: x.zero_(), lambda: [torch.zeros(3)])
    assert all(v.written_by == frozenset() for v in seen.values())


# --------------------------------------------------------------------------- 2. check_analysis itself


class _Says:
    """A stand-in analysis giving one fixed answer to every query."""

    def __init__(self, answer: bool, gm: torch.fx.GraphModule) -> None:
        self.answer = answer
        self.nodes = tuple(gm.graph.nodes)

    def may_alias(self, a: str, b: str) -> bool:
        return self.answer

    def may_overlap(self, a: str, b: str) -> bool:
        return self.answer

    def writers(self, n: str) -> tuple[torch.fx.Node, ...]:
        return self.nodes if self.answer else ()


def _split_and_write(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q, k = x.split(2, -1)
    k.add_(1)
    return q, k


def test_check_analysis_catches_missed_claims() -> None:
    gm = trace(_split_and_write, lambda: [torch.zeros(2, 4)])
    with pytest.raises(AnalysisUnsound) as caught:
        check_analysis(_Says(False, gm), gm, [torch.zeros(2, 4)])  # type: ignore[arg-type]
    message = str(caught.value)
    assert "may_alias(getitem, getitem_1)" in message
    assert "may_overlap(x_1, getitem_1)" in message
    assert "add_ is not in writers(getitem_1)" in message
    assert isinstance(caught.value, AssertionError) and isinstance(caught.value, AliasingError)


def test_check_analysis_reports_false_positives() -> None:
    gm = trace(_split_and_write, lambda: [torch.zeros(2, 4)])
    report = check_analysis(_Says(True, gm), gm, [torch.zeros(2, 4)])  # type: ignore[arg-type]
    assert isinstance(report, Exactness)
    assert ("getitem", "getitem_1") in report.false_overlap
    assert ("getitem", "getitem_1") not in report.false_alias
    assert ("add_", "getitem") in report.false_writers


# --------------------------------------------------------------------------- 3. soundness


def _cat_views(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (
        x.view(6, 4),
        x.reshape(24),
        x.t().reshape(-1),  # a copy
        x[1:3, ::2],
        x.select(1, 2),
        x.narrow(0, 2, 2),
        x.transpose(0, 1)[2:],
        x.permute(1, 0).contiguous(),
        x[0].unsqueeze(0).expand(3, 6),
        x.diagonal(),
        x.as_strided((3, 3), (2, 1), 1),
        x.as_strided((2, 2), (0, 1), 5),
    )


def _multi_views(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a, b, c = x.unbind(0)
    d, e = x.chunk(2, 1)
    f, g, h = x.split([1, 1, 1], 0)
    return a, b, c, d, e, f, g, h, x.split(3, 1)[1]


def _inplace_chain(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    v = x[1:]
    v.add_(y[:2])
    w = x.t()
    w.mul_(2)
    x[0].copy_(y[2])
    x[:, 1].zero_()
    return v, w, x.sum(0)


def _index_put(x: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor) -> tuple[torch.Tensor, ...]:
    row = x[1]
    row.index_put_((idx,), vals)
    return row, x[0] * 2


def _out_keyword(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
    view = c[1:]
    r = torch.add(a, b, out=c)
    torch.mul(a[:2], b[:2], out=view[:2])
    return r, view


def _custom_two_writes(y: torch.Tensor, z: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    yv = y.view(2, 2)
    torch.ops.fxaliasing_oracle.axpy_and_scale(y, z[1:], x)
    return yv, z, y + 1


def _view_outputs(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.clone()
    y[0].add_(1)
    return y[0], y.t(), x[1:], x


def _kv_cache(cache: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, ...]:
    cache[0:4].copy_(k)
    layer0, layer1 = cache[:, 0], cache[:, 1]
    layer1.mul_(3)
    return cache[4:8], layer0, layer1


PROGRAMS: dict[str, tuple[Callable[..., Any], Inputs]] = {
    "views": (_cat_views, lambda: [torch.randn(4, 6)]),
    "multi-output views": (_multi_views, lambda: [torch.randn(3, 6)]),
    "in-place chain": (_inplace_chain, lambda: [torch.randn(3, 3), torch.randn(3, 3)]),
    "index_put_": (
        _index_put,
        lambda: [torch.randn(3, 5), torch.tensor([0, 3]), torch.tensor([7.0, 8.0])],
    ),
    "out keyword": (_out_keyword, lambda: [torch.randn(4), torch.randn(4), torch.zeros(4)]),
    "custom op mutating two": (
        _custom_two_writes,
        lambda: [torch.randn(4), torch.randn(5), torch.randn(4)],
    ),
    "outputs are views": (_view_outputs, lambda: [torch.randn(3, 3)]),
    "kv cache": (_kv_cache, lambda: [torch.randn(8, 2, 3), torch.randn(4, 2, 3)]),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_analysis_is_sound(name: str) -> None:
    fn, inputs = PROGRAMS[name]
    gm = trace(fn, inputs)
    check_analysis(aliasing.analyze(gm), gm, inputs())


@pytest.mark.parametrize(
    "name", ["multi-output views", "in-place chain", "out keyword", "custom op mutating two", "kv cache"]
)
def test_analysis_is_exact_on_common_programs(name: str) -> None:
    """No "may overlap" between disjoint values and no writer that wrote nothing there."""
    fn, inputs = PROGRAMS[name]
    gm = trace(fn, inputs)
    report = check_analysis(aliasing.analyze(gm), gm, inputs())
    assert [pair for pair in report.false_overlap if pair[0] != pair[1]] == []
    assert report.false_alias == ()
    assert report.false_writers == ()


@pytest.mark.parametrize("name", ["multi-output views", "in-place chain", "kv cache"])
def test_analysis_is_sound_symbolic(name: str) -> None:
    fn, inputs = PROGRAMS[name]
    gm = trace(fn, inputs, mode="symbolic")
    check_analysis(aliasing.analyze(gm), gm, inputs())


def test_custom_op_writes_both_mutated_arguments() -> None:
    fn, inputs = PROGRAMS["custom op mutating two"]
    gm = trace(fn, inputs)
    analysis = aliasing.analyze(gm)
    y, z, x = gm.graph.find_nodes(op="placeholder")
    op = next(n for n in gm.graph.nodes if n.target is torch.ops.fxaliasing_oracle.axpy_and_scale.default)
    assert op in analysis.writers(y) and op in analysis.writers(z)
    assert op not in analysis.writers(x)


# --------------------------------------------------------------------------- 4. exactness


def _qkv_split(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.split(4, -1)


def _qkv_unbind(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.unbind(0)


EXACT: dict[str, tuple[Callable[..., Any], Inputs]] = {
    "qkv split": (_qkv_split, lambda: [torch.randn(5, 12)]),
    "qkv unbind": (_qkv_unbind, lambda: [torch.randn(3, 5, 4)]),
    "chunk": (lambda x: x.chunk(3, 1), lambda: [torch.randn(4, 6)]),
    "narrow": (lambda x: (x.narrow(1, 0, 2), x.narrow(1, 2, 3)), lambda: [torch.randn(4, 6)]),
    "select rows": (lambda x: (x[0], x[2], x.select(0, 3)), lambda: [torch.randn(4, 6)]),
    "interleaved": (lambda x: (x[:, ::2], x[:, 1::2]), lambda: [torch.randn(4, 6)]),
    "transposed slices": (lambda x: (x[:, :4].t(), x[:, 4:].t()), lambda: [torch.randn(3, 8)]),
    "kv cache blocks": (lambda c: (c[0:4], c[4:8]), lambda: [torch.zeros(8, 2, 3)]),
    "kv cache layers": (lambda c: (c[:, 0], c[:, 1]), lambda: [torch.zeros(8, 2, 3)]),
}


def _assert_pieces_exact(gm: torch.fx.GraphModule, inputs: Inputs) -> None:
    analysis = aliasing.analyze(gm)
    pieces = returned(gm)
    report = check_analysis(analysis, gm, inputs())
    for i, a in enumerate(pieces):
        for b in pieces[i + 1 :]:
            assert analysis.may_alias(a, b), f"{a} and {b} share a storage"
            assert not analysis.may_overlap(a, b), f"{a} and {b} are disjoint"
    assert not [pair for pair in report.false_overlap if pair[0] != pair[1]]


@pytest.mark.parametrize("name", list(EXACT))
def test_disjoint_views_do_not_overlap(name: str) -> None:
    fn, inputs = EXACT[name]
    _assert_pieces_exact(trace(fn, inputs), inputs)


@pytest.mark.parametrize("name", ["qkv split", "qkv unbind", "kv cache blocks", "kv cache layers"])
def test_disjoint_views_dynamic_first_dim(name: str) -> None:
    fn, inputs = EXACT[name]
    gm = trace_dynamic_first_dim(fn, inputs)
    assert any(isinstance(s, torch.SymInt) for s in gm.graph.find_nodes(op="placeholder")[0].meta["val"].shape)
    _assert_pieces_exact(gm, inputs)


def _qkv_split_symbolic_size(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.split(x.shape[-1] // 3, -1)


def _qkv_chunk_rows(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    half = x.shape[0] // 2
    return x[:half], x[half:]


EXACT["qkv split, symbolic split size"] = (_qkv_split_symbolic_size, lambda: [torch.randn(5, 12)])
EXACT["halves of a symbolic dim"] = (_qkv_chunk_rows, lambda: [torch.randn(6, 4)])


@pytest.mark.parametrize(
    "name", ["qkv split", "qkv unbind", "qkv split, symbolic split size", "halves of a symbolic dim", "interleaved"]
)
def test_disjoint_views_all_dims_symbolic(name: str) -> None:
    fn, inputs = EXACT[name]
    _assert_pieces_exact(trace(fn, inputs, mode="symbolic"), inputs)


def test_write_through_view_is_a_writer_of_overlapping_values_only() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v = x.split(4, -1)
        k.add_(1)
        return q, k, v, x[:, 2:6], x

    gm = trace(fn, lambda: [torch.randn(3, 12)])
    analysis = aliasing.analyze(gm)
    check_analysis(analysis, gm, [torch.randn(3, 12)])
    q, k, v, straddle, x = returned(gm)
    write = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.add_.Tensor)
    for value in (k, straddle, x, write):
        assert write in analysis.writers(value), value
    for value in (q, v):
        assert write not in analysis.writers(value), value
