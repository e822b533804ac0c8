"""``aliasing.core.regions`` on its own: regions, the overlap test and the symbolic bounds, against real memory.

The reference is the bytes real tensors occupy: every element's ``data_ptr()``
and element size give the exact set of bytes a view touches, with no use of
the region code. For concrete regions :func:`regions_may_overlap` is exact (its
docstring promises it; the layouts here are far below its work limit), so it
must answer "overlap" exactly when those byte sets meet, on hand-picked views
and on Hypothesis-drawn layouts over one storage in several dtypes. For
symbolic regions it may only answer "no overlap" where no size consistent with
the shape environment overlaps, and it must prove the disjointness its
docstring lists (splits with a dynamic outer size, interleaved strides,
disjoint byte intervals).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from aliasing.core.regions import Region, regions_may_overlap, static_int


def region_of(t: torch.Tensor) -> Region:
    return Region(offset=t.storage_offset(), sizes=tuple(t.shape), strides=tuple(t.stride()), itemsize=t.element_size())


def touched_bytes(t: torch.Tensor) -> set[int]:
    """Every byte address ``t``'s elements occupy, element by element from real memory."""
    out: set[int] = set()
    for index in itertools.product(*(range(s) for s in t.shape)):
        ptr = t[index].data_ptr() if index else t.data_ptr()
        out.update(range(ptr, ptr + t.element_size()))
    return out


def really_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    return bool(touched_bytes(a) & touched_bytes(b))


def _base() -> torch.Tensor:
    return torch.arange(48, dtype=torch.float32).reshape(4, 12)


HAND_PICKED: dict[str, Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]] = {
    "split q k": lambda x: x.split(4, dim=-1)[:2],
    "split k v": lambda x: x.split(4, dim=-1)[1:],
    "interleaved columns": lambda x: (x[:, ::2], x[:, 1::2]),
    "interleaved rows": lambda x: (x[::2], x[1::2]),
    "overlapping slices": lambda x: (x[0:3], x[2:4]),
    "adjacent slices": lambda x: (x[0:2], x[2:4]),
    "transpose of itself": lambda x: (x, x.t()),
    "diagonal and first row": lambda x: (x[:, :4].diagonal(), x[0]),
    "diagonal and second row past it": lambda x: (x[:, :4].diagonal()[:1], x[1, 1:]),
    "column and row": lambda x: (x[:, 3], x[2]),
    "chunks of a column block": lambda x: x[:, 4:8].chunk(2, dim=0),
    "empty and everything": lambda x: (x[0:0], x),
    "expanded row and the next row": lambda x: (x[0:1].expand(3, 12), x[1]),
    "floats and the bytes after them": lambda x: (x.view(-1)[0:2], x.view(torch.uint8).view(-1)[8:12]),
    "floats and a byte inside": lambda x: (x.view(-1)[0:2], x.view(torch.uint8).view(-1)[7:9]),
    "halves as int16 and float32": lambda x: (x.view(torch.int16)[:, 1::2], x[:, 6:]),
}


@pytest.mark.parametrize("name", list(HAND_PICKED))
def test_overlap_is_exact_on_hand_picked_views(name: str) -> None:
    a, b = HAND_PICKED[name](_base())
    want = really_overlap(a, b)
    assert regions_may_overlap(region_of(a), region_of(b)) is want
    assert regions_may_overlap(region_of(b), region_of(a)) is want  # symmetric


def test_hand_picked_views_cover_both_answers() -> None:
    answers = {really_overlap(*make(_base())) for make in HAND_PICKED.values()}
    assert answers == {True, False}


STORAGE_BYTES = 96


@st.composite
def layouts(draw: st.DrawFn, storage: torch.Tensor) -> torch.Tensor:
    """A view of ``storage`` (uint8, ``STORAGE_BYTES`` bytes) in a drawn dtype, sizes, strides and offset."""
    dtype = draw(st.sampled_from([torch.uint8, torch.int16, torch.float32, torch.float64]))
    typed = storage.view(dtype)
    ndim = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim))
    strides = draw(st.lists(st.integers(0, 7), min_size=ndim, max_size=ndim))
    span = sum((s - 1) * st_ for s, st_ in zip(sizes, strides)) if all(sizes) else 0
    offset = draw(st.integers(0, max(0, typed.numel() - 1 - span)))
    if span + offset >= typed.numel():
        sizes = [0] * ndim  # does not fit: an empty view
    return typed.as_strided(sizes, strides, offset)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_overlap_is_exact_on_drawn_layouts(data: st.DataObject) -> None:
    storage = torch.zeros(STORAGE_BYTES, dtype=torch.uint8)
    a = data.draw(layouts(storage), label="a")
    b = data.draw(layouts(storage), label="b")
    assert regions_may_overlap(region_of(a), region_of(b)) is really_overlap(a, b)


def test_region_in_bytes_touches_the_same_bytes() -> None:
    x = _base()[:, 1::3]
    r = region_of(x)
    in_bytes = r.in_bytes()
    start = x.untyped_storage().data_ptr()
    elements = {
        start + int(in_bytes.offset) + sum(i * int(s) for i, s in zip(index, in_bytes.strides)) + k
        for index in itertools.product(*(range(int(s)) for s in in_bytes.sizes))
        for k in range(in_bytes.itemsize)
    }
    assert elements == touched_bytes(x)


# --- symbolic regions -------------------------------------------------------------


def _symbol(env: ShapeEnv, name: str, hint: int) -> tuple[torch.SymInt, sympy.Symbol]:
    symbol = env.create_symbol(hint, ConstantSource(name))
    return env.create_symintnode(symbol, hint=hint), symbol


def _concrete(r: Region, values: dict[sympy.Symbol, int]) -> Region:
    def at(v: object) -> int:
        if isinstance(v, torch.SymInt):
            return int(v.node.expr.subs(values))
        assert isinstance(v, int)
        return v

    return Region(at(r.offset), tuple(at(s) for s in r.sizes), tuple(at(s) for s in r.strides), r.itemsize)


def _really_overlap_regions(a: Region, b: Region) -> bool:
    def extent(r: Region) -> int:
        if any(int(s) == 0 for s in r.sizes):
            return 0
        return (int(r.offset) + sum((int(s) - 1) * int(st_) for s, st_ in zip(r.sizes, r.strides)) + 1) * r.itemsize

    storage = torch.zeros(max(extent(a), extent(b), 1), dtype=torch.uint8)

    def view(r: Region) -> torch.Tensor:
        dtype = {1: torch.uint8, 2: torch.int16, 4: torch.float32, 8: torch.float64}[r.itemsize]
        usable = storage[: storage.numel() - storage.numel() % r.itemsize].view(dtype)
        return usable.as_strided([int(s) for s in r.sizes], [int(s) for s in r.strides], int(r.offset))

    return really_overlap(view(a), view(b))


def _symbolic_cases() -> dict[str, tuple[Region, Region, bool]]:
    """(a, b, the answer the docstring promises) with a dynamic outer size ``n`` (rows of 12 floats)."""
    env = ShapeEnv()
    n, _ = _symbol(env, "n", 5)
    return {
        "split q k, dynamic rows": (Region(0, (n, 4), (12, 1), 4), Region(4, (n, 4), (12, 1), 4), False),
        "interleaved columns, dynamic rows": (Region(0, (n, 6), (12, 2), 4), Region(1, (n, 6), (12, 2), 4), False),
        "first and second half of 2n rows": (Region(0, (n, 12), (12, 1), 4), Region(n * 12, (n, 12), (12, 1), 4), False),
        "overlapping column blocks": (Region(0, (n, 5), (12, 1), 4), Region(4, (n, 4), (12, 1), 4), True),
        "rows and a shifted copy": (Region(0, (n, 12), (12, 1), 4), Region(12, (n, 12), (12, 1), 4), True),
        "empty when n rows are zero wide": (Region(0, (n, 0), (12, 1), 4), Region(0, (n, 12), (12, 1), 4), False),
    }


@pytest.mark.parametrize("name", list(_symbolic_cases()))
def test_symbolic_overlap_is_sound_and_proves_the_documented_cases(name: str) -> None:
    a, b, promised = _symbolic_cases()[name]
    answer = regions_may_overlap(a, b)
    assert answer is promised
    symbol = next(iter(next(s for s in a.sizes if isinstance(s, torch.SymInt)).node.expr.free_symbols))
    real = [_really_overlap_regions(_concrete(a, {symbol: v}), _concrete(b, {symbol: v})) for v in range(2, 9)]
    if not answer:
        assert not any(real), "a symbolic 'no overlap' that some size contradicts"
    else:
        assert any(real)


def test_symbolic_bounds_unknown_sign_is_may_overlap() -> None:
    """A region whose offset may lie on either side of another's is never "no overlap"."""
    env = ShapeEnv()
    n, symbol = _symbol(env, "n", 5)
    m, other = _symbol(env, "m", 7)
    a = Region(n, (4,), (1,), 4)
    b = Region(m, (4,), (1,), 4)
    assert regions_may_overlap(a, b)
    # and for some sizes they do overlap for real
    sizes = {symbol: 5, other: 6}
    assert _really_overlap_regions(_concrete(a, sizes), _concrete(b, sizes))


def test_static_int() -> None:
    env = ShapeEnv()
    n, _ = _symbol(env, "n", 5)
    assert static_int(7) == 7
    assert static_int(n) is None
    assert static_int(n - n + 3) == 3
    assert static_int(True) is None and static_int(3.0) is None
