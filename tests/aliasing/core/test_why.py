"""``AliasAnalysis.why``: the evidence behind ``may_alias``/``may_overlap``, checked against real runs."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import pytest
import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import aliasing
from aliasing import UnknownNodeError
from aliasing.core.analysis import WhyAlias
from aliasing.verification.oracle import check_analysis, observe_memory


def _checked(
    gm: torch.fx.GraphModule, inputs: Callable[[], Sequence[torch.Tensor]], a: str, b: str
) -> tuple[aliasing.AliasAnalysis, WhyAlias]:
    """The analysis of ``gm`` (checked sound on a real run) and ``why(a, b)``, whose answers must be the
    analysis's and never miss what the run showed: a shared storage, a common byte, a writer."""
    analysis = aliasing.analyze(gm)
    check_analysis(analysis, gm, inputs())
    seen = observe_memory(gm, inputs())
    why = analysis.why(a, b)
    assert (why.may_alias, why.may_overlap) == (analysis.may_alias(a, b), analysis.may_overlap(a, b))
    assert why == analysis.why(_node(gm, a), _node(gm, b))  # nodes or their names
    if seen[a].shares_storage(seen[b]):
        assert why.may_alias, str(why)
    if seen[a].overlaps(seen[b]):
        assert why.may_overlap, str(why)
    if why.may_alias and not why.more_writes:
        listed = {w.node for w in why.writes}
        assert (seen[a].written_by | seen[b].written_by) <= listed, str(why)
    text = str(why)
    assert text.splitlines()[0] == f"{a} and {b}: {why.verdict}"
    return analysis, why


def _node(gm: torch.fx.GraphModule, name: str) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.name == name)


def test_view_chain_from_the_input() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = x.view(3, 4)[1:].t()
        v[0].add_(1)
        c = x.view(3, 4)[1:].t().reshape(-1)  # reshape of a transposed slice: a copy
        return v, c * 2

    inputs = lambda: [torch.randn(12)]  # noqa: E731
    gm = make_fx(f, tracing_mode="fake")(*inputs())
    _, why = _checked(gm, inputs, "x_1", "select")
    assert why.may_alias and why.may_overlap
    chain = [(s.node, s.what) for s in why.chain_b]
    assert chain == [("x_1", "user input"), ("view", "view"), ("slice_1", "slice"), ("t", "t"), ("select", "select")]
    assert str(why).splitlines()[2] == "  select  x_1 (user input) -> view (view) -> slice_1 (slice) -> t (t) -> select (select)  [s0]"
    assert why.shared == ("s0",) and why.alias == "both may live in s0 (user input x_1)"
    assert why.overlap.startswith("yes: exact regions x_1 0+[12]:[1]x4, select 4+[2]:[4]x4")
    assert [(w.node, w.where, w.touches) for w in why.writes] == [("add_", "after both", ("x_1", "select"))]
    # the reshape made a copy: a new storage, rooted at the copy
    copy = next(n.name for n in gm.graph.nodes if n.name.startswith("_unsafe_view"))
    _, apart = _checked(gm, inputs, "x_1", copy)
    assert not apart.may_alias
    assert [str(s) for s in apart.chain_b] == ["clone (clone: new storage)", f"{copy} (_unsafe_view)"]
    assert apart.alias == f"distinct storages: x_1 lives in s0 (user input x_1), {copy} in {apart.storage_b} (new memory of clone)"


def test_two_halves_of_a_split_do_not_overlap() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        q, k = x.split(4, dim=-1)
        q.mul_(2)
        return k + 1

    inputs = lambda: [torch.randn(3, 8)]  # noqa: E731
    gm = make_fx(f, tracing_mode="fake")(*inputs())
    _, why = _checked(gm, inputs, "getitem", "getitem_1")
    assert why.may_alias and not why.may_overlap
    assert why.verdict == "may alias, disjoint bytes"
    assert [str(s) for s in why.chain_a] == ["x_1 (user input)", "getitem (split[0])"]
    assert [str(s) for s in why.chain_b] == ["x_1 (user input)", "getitem_1 (split[1])"]
    assert why.overlap == "disjoint: exact regions getitem 0+[3,4]:[8,1]x4, getitem_1 4+[3,4]:[8,1]x4 share no byte"
    # the in-place write touches only the first half
    assert [(w.node, w.touches) for w in why.writes] == [("mul_", ("getitem",))]


def test_a_clone_does_not_alias_its_original() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.add_(1)
        return c

    inputs = lambda: [torch.randn(5)]  # noqa: E731
    gm = make_fx(f, tracing_mode="fake")(*inputs())
    _, why = _checked(gm, inputs, "x_1", "clone")
    assert not why.may_alias and not why.may_overlap and why.verdict == "no alias"
    assert why.shared == () and why.storages_a == ("s0",) and why.storages_b == ("s1",)
    assert why.alias == "distinct storages: x_1 lives in s0 (user input x_1), clone in s1 (new memory of clone)"
    assert why.overlap == "" and why.writes == ()
    assert "storage: distinct storages" in str(why)


@torch.fx.wrap
def _tail(x: torch.Tensor) -> torch.Tensor:
    return x[1:]  # a Python function the analysis does not see into


class _Opaque(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        t = _tail(y)
        return t + 1, y[:2]


def test_an_op_the_analysis_does_not_model() -> None:
    inputs = lambda: [torch.randn(4)]  # noqa: E731
    gm = torch.fx.symbolic_trace(_Opaque())
    FakeTensorProp(gm).propagate(*inputs())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", aliasing.NoAtenOpsWarning)
        _, why = _checked(gm, inputs, "_tail", "getitem")
    assert why.may_alias and why.may_overlap  # really: they share bytes (y[1:] and y[:2])
    assert why.chain_a[-1] == ("_tail", "_tail, an op the analysis does not model: any argument's memory or new")
    assert why.chain_a[0] == ("mul", "mul: new storage")
    assert why.overlap.startswith("unknown: they may live in different sets of storages")
    assert "_tail is an op the analysis does not model" in why.overlap
    assert "_tail may also live in" in why.alias


def test_missing_metadata_and_symbolic_regions() -> None:
    def halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = x.shape[0] // 2
        return x[:n], x[n:]

    inputs = lambda: [torch.randn(8)]  # noqa: E731
    gm = make_fx(halves, tracing_mode="symbolic")(*inputs())
    a, b = [n.name for n in gm.graph.nodes if n.name.startswith("slice")]
    analysis = aliasing.analyze(gm)
    why = analysis.why(a, b)
    assert not why.may_overlap and why.overlap.endswith("share no byte (proved for every size)")
    seen = observe_memory(gm, inputs())
    assert seen[a].shares_storage(seen[b]) and not seen[a].overlaps(seen[b])

    for node in gm.graph.nodes:
        node.meta.pop("val", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", aliasing.MissingMetadataWarning)
        stripped = aliasing.analyze(gm).why(a, b)
    assert stripped.may_overlap
    assert f"{a} has no exact region: missing metadata" in stripped.overlap


def test_writes_around_and_their_positions() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x.add_(1)  # before both
        y = x[1:]
        z = x[:2]
        x.mul_(3)  # after both
        return y + 1, z + 1

    inputs = lambda: [torch.randn(4)]  # noqa: E731
    gm = make_fx(f, tracing_mode="fake")(*inputs())
    _, why = _checked(gm, inputs, "slice_1", "slice_2")
    assert [(w.node, w.where, w.touches) for w in why.writes] == [
        ("add_", "before both", ("slice_1", "slice_2")),
        ("mul_", "after both", ("slice_1", "slice_2")),
    ]
    assert why.writes[0].position < why.writes[1].position


def test_non_tensor_and_unknown_nodes() -> None:
    gm = make_fx(lambda x: x * 2, tracing_mode="fake")(torch.randn(2))
    analysis = aliasing.analyze(gm)
    why = analysis.why("mul", "output")
    assert not why.may_alias and why.alias == "output is not a tensor value (it lives in no storage)"
    assert why.chain_b == () and "not a tensor value" in str(why)
    same = analysis.why("mul", "mul")
    assert same.may_overlap and same.overlap == "the same value"
    with pytest.raises(UnknownNodeError):
        analysis.why("mul", "nope")
