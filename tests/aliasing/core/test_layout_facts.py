"""Layout facts: ``same_layout``'s comparison of plain-int layouts agrees with the fact-by-fact one.

``aliasing.core.facts.TensorFacts.plain_layout`` holds ``(sizes, strides,
offset, dtype)`` when they are all plain ints, and :func:`same_layout` then
compares those tuples and the ``bits`` (device, conj, neg) at once. Here drawn
pairs of tensors (real and fake; CPU and meta; sizes, strides, offsets, dtypes,
conj and neg bits) are compared both ways: the tuple way and the element-by-element
reference, which reads each fact from the tensor itself. Symbolic sizes have no
plain layout and take the general way, where equal symbols are equal.

Fake tensors' facts are read a short way (the C getters their Python properties
answer with); their storage identity and layout must be the tensor's own, and a
fake MKLDNN tensor must not pass for a strided one.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from aliasing.core.facts import TensorFacts, facts_of_value, same_layout

_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.int32)


@st.composite
def _tensors(draw: st.DrawFn) -> torch.Tensor:
    dtype = draw(st.sampled_from(_DTYPES))
    dims = draw(st.integers(0, 3))
    sizes = [draw(st.integers(1, 3)) for _ in range(dims)]
    strides = [draw(st.integers(0, 4)) for _ in range(dims)]
    offset = draw(st.integers(0, 2))
    span = 1 + offset + sum((n - 1) * s for n, s in zip(sizes, strides))
    base = torch.zeros(span, dtype=dtype, device=draw(st.sampled_from(["cpu", "meta"])))
    t = base.as_strided(sizes, strides, offset)
    if dtype.is_complex and draw(st.booleans()):
        t = t.conj()
    if dtype.is_complex and draw(st.booleans()):
        t = torch._neg_view(t)
    return t


def _reference(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.device == b.device
        and tuple(a.shape) == tuple(b.shape)
        and a.stride() == b.stride()
        and a.storage_offset() == b.storage_offset()
        and a.is_conj() == b.is_conj()
        and a.is_neg() == b.is_neg()
    )


def _facts(t: torch.Tensor) -> TensorFacts:
    facts = facts_of_value(t)
    assert facts is not None
    return facts


@settings(max_examples=300, deadline=None)
@given(_tensors(), _tensors(), st.booleans())
def test_plain_layouts_compare_like_the_facts(a: torch.Tensor, b: torch.Tensor, fake: bool) -> None:
    if fake:
        mode = FakeTensorMode()
        a, b = mode.from_tensor(a), mode.from_tensor(b)
    fa, fb = _facts(a), _facts(b)
    assert fa.plain_layout == (tuple(a.shape), a.stride(), a.storage_offset(), a.dtype)
    assert fa.bits == (a.device, a.is_conj(), a.is_neg())
    assert same_layout(fa, fb) == _reference(a, b)
    assert same_layout(fa, _facts(a)) == _reference(a, a)  # a value and itself (fresh facts)


def test_a_layout_and_its_copy_compare_equal_and_a_transpose_does_not() -> None:
    x = torch.randn(2, 3)
    assert same_layout(_facts(x), _facts(x.clone()))
    assert not same_layout(_facts(x), _facts(x.t().contiguous().t()))
    assert not same_layout(_facts(x), _facts(x.double()))
    assert not same_layout(_facts(x.to(torch.complex64)), _facts(x.to(torch.complex64).conj()))


def test_symbolic_sizes_have_no_plain_layout_and_compare_by_symbols() -> None:
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = mode.from_tensor(torch.randn(4, 3), symbolic_context=None)
    sym = mode.shape_env.create_unbacked_symint()
    with mode:
        y = x.new_empty((sym, 3))
        z = x.new_empty((sym, 3))
        w = x.new_empty((sym, 4))
    fy, fz, fw = _facts(y), _facts(z), _facts(w)
    assert fy.plain_layout is None
    assert same_layout(fy, fz)  # the same symbol: provably equal sizes and strides
    assert not same_layout(fy, fw)
    assert not same_layout(fy, _facts(x))


def test_non_strided_values_have_no_plain_layout() -> None:
    sparse = torch.eye(3).to_sparse()
    facts = _facts(sparse)
    assert facts.plain_layout is None
    assert not same_layout(facts, _facts(sparse))


@pytest.mark.parametrize("dtype", _DTYPES)
def test_zero_dim_values(dtype: torch.dtype) -> None:
    a, b = torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype)
    assert _facts(a).plain_layout == ((), (), 0, dtype)
    assert same_layout(_facts(a), _facts(b))


def test_a_fake_tensors_facts_read_its_storage_and_layout() -> None:
    # Fake tensors take a short way through facts_of_value (the C getters the fake tensor's
    # properties answer with); the storage identity and the layout are the tensor's own.
    mode = FakeTensorMode()
    with mode:
        base = torch.randn(4, 6)
        values = [base, base.t(), base[1:, ::2], base.view(24), torch.randn(3, dtype=torch.complex64).conj(), torch.randn(0)]
    dense = torch.randn(4, 4)
    others = [
        mode.from_tensor(t)
        for t in (dense.to_sparse(), dense.to_sparse_csr(), dense.to_sparse_csc(), dense.to_sparse_bsr((2, 2)), dense.to_sparse_bsc((2, 2)))
    ]
    keys = {facts_of_value(v).storage_key for v in values[:4]}  # type: ignore[union-attr]
    assert keys == {base.untyped_storage()._cdata}  # one storage, seen from each view
    for v in values:
        f = facts_of_value(v)
        assert f is not None and f.strided and f.storage_key == v.untyped_storage()._cdata
    for v in others:  # no storage: the short way's storage identity raises, the general way answers
        assert type(v) is FakeTensor and v.layout is not torch.strided
        f = facts_of_value(v)
        assert f is not None and not f.strided, v.layout


def test_a_fake_mkldnn_tensor_is_not_strided() -> None:
    # A fake tensor that records an MKLDNN dispatch key reports that layout (torch 2.14 on);
    # the analysis must not read strides of it, whatever its meta tensor says.
    fake = FakeTensorMode().from_tensor(torch.randn(4, 4).to_mkldnn())
    f = facts_of_value(fake)
    assert f is not None and f.strided == (fake.layout is torch.strided)
