"""Edge cases of the analysis, each checked against a real run with the memory oracle."""

from __future__ import annotations

import pytest
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import aliasing
from aliasing import UNKNOWN_STORAGE
from rewrite import eliminate_clones
from rewrite.testing import check_analysis, check_equivalent, copy_program


def test_metadata_mutation_makes_the_value_unknown() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x * 1
        a.t_()
        a[0].add_(1)
        z = y * 1
        z.set_(a)  # z now lives in a's storage
        z.add_(2)
        return a, z

    inputs = lambda: [torch.randn(3, 3), torch.randn(3, 3)]  # noqa: E731
    gm = make_fx(f, tracing_mode="fake")(*inputs())
    analysis = aliasing.analyze(gm)
    check_analysis(analysis, gm, inputs())
    assert UNKNOWN_STORAGE in analysis.storage_of("mul_1")
    assert analysis.region_of("mul") is None


def test_clone_of_value_whose_layout_mutates_is_kept() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        a = x * 1
        c = a.clone()
        a.t_()
        return c + a

    inputs = lambda: [torch.randn(3, 3)]  # noqa: E731
    gm = make_fx(f, tracing_mode="fake")(*inputs())
    rewritten = copy_program(gm)
    report = eliminate_clones(rewritten, strict=True)
    assert report.removed == ()
    check_equivalent(gm, rewritten, inputs)


def test_unsafe_view_aliases_despite_its_schema() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = (x * 2).clone()
        v = torch.ops.aten._unsafe_view(c, (-1,))
        v.add_(1)
        return c

    inputs = lambda: [torch.randn(2, 3)]  # noqa: E731
    gm = make_fx(f, tracing_mode="fake")(*inputs())
    analysis = aliasing.analyze(gm)
    assert analysis.may_alias("clone", "_unsafe_view")
    assert [n.name for n in analysis.writers("clone")] == ["add_"]
    check_analysis(analysis, gm, inputs())


def test_storage_graph_schema() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        q, k = x.split(2, dim=-1)
        q.mul_(2)
        return k + 1

    gm = make_fx(f, tracing_mode="fake")(torch.randn(3, 4))
    g = aliasing.build_storage_graph(aliasing.analyze(gm))
    kinds = {attrs["kind"] for _, attrs in g.nodes(data=True)}
    assert kinds == {"value", "storage", "op"}
    assert g.has_edge("op:mul_", "value:getitem", key="writes")
    assert g.has_edge("value:getitem", "storage:s0", key="lives_in")
    assert g.has_edge("op:add", "value:getitem_1", key="reads")
    for _, _, attrs in g.edges(data=True):
        assert all(isinstance(v, (str, int, float)) for v in attrs.values())
    for _, attrs in g.nodes(data=True):
        assert all(isinstance(v, (str, int, float)) for v in attrs.values())


def test_indexing_and_opaque_getitem_without_metadata_are_unknown() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    programs = [
        lambda x: (x[0:2].add_(1), x * 2)[1],  # operator.getitem on a tensor: indexing
        lambda x: torch.split(x, 2)[0],  # getitem of an opaque call's result
    ]
    for fn in programs:
        for with_meta in (False, True):
            gm = torch.fx.symbolic_trace(fn)
            if with_meta:
                FakeTensorProp(gm, FakeTensorMode()).propagate(torch.randn(4, 3))
            check_analysis(aliasing.analyze(gm), gm, [torch.randn(4, 3)])


def test_copy_and_out_destinations_are_written_not_read() -> None:
    # On real execution copy_ and out= variants never read their destination's old value
    # (README, "The memory model"); a destination also passed as an input is read as one.
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = x * 2
        z.copy_(y)
        torch.add(x, 1, out=z)
        torch.add(z, 1, out=z)  # z is also the input here
        return z

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(3), torch.randn(3))
    analysis = aliasing.analyze(gm)
    (sid,) = analysis.storage_of("mul")
    listed = [(a.kind, a.node.name) for a in analysis.storage_accesses(sid)]
    assert ("write", "copy_") in listed and ("read", "copy_") not in listed
    assert ("write", "add") in listed and ("read", "add") not in listed
    assert ("read", "add_1") in listed and ("write", "add_1") in listed
    assert [n.name for n in analysis.readers("y_1")] == ["copy_"]
    check_analysis(analysis, gm, [torch.randn(3), torch.randn(3)])




def test_view_or_copy_answers_remembered_per_layout_stay_right() -> None:
    """The view-or-copy answer of ``reshape`` is remembered per op and argument layouts: never per size.

    ``y.t().reshape(12)`` copies; after a rewrite hands that ``reshape`` the contiguous ``x``
    of the same sizes and offset, its recorded value still says "copy", but re-run on ``x``
    it is a view of ``x``: the analysis, which has just remembered the transposed layout's
    answer, must say it may alias ``x`` (checked against real memory).
    """

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x.reshape(12) + y.t().reshape(12)

    ep = torch.export.export(Model(), (torch.randn(3, 4), torch.randn(4, 3)))
    gm = ep.graph_module
    x = next(n for n in gm.graph.nodes if n.op == "placeholder")
    first, second = [n for n in gm.graph.nodes if n.target is torch.ops.aten.reshape.default]
    before = aliasing.analyze(gm)
    assert before.may_alias(first, x) and not before.may_alias(second, x)  # a view of x; a copy of y.t()
    second.args = (x, *second.args[1:])  # the rewrite: the same sizes and offset, other strides
    gm.recompile()
    after = aliasing.analyze(gm)
    assert after.may_alias(second, x)
    check_analysis(after, gm, [torch.randn(3, 4), torch.randn(4, 3)])


def _set_then_write(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    c = x * 1
    z = y * 1
    z.set_(c)  # z now lives in c's storage
    z.add_(1)  # writes c
    return c + 0


@pytest.mark.parametrize("form", ["method", "function"])
def test_a_torch_level_metadata_write_makes_the_value_unknown(form: str) -> None:
    # A torch-level graph with fake metadata (symbolic_trace, then FakeTensorProp): the call scan
    # sees tensor methods (call_method) as well as torch-level functions (call_function), so the
    # write through z reaches c.
    gm = torch.fx.symbolic_trace(_set_then_write)
    if form == "function":
        (node,) = [n for n in gm.graph.nodes if n.target == "set_"]
        node.op, node.target = "call_function", torch.Tensor.set_
        gm.recompile()
    inputs = lambda: [torch.randn(3, 3), torch.randn(3, 3)]  # noqa: E731
    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*inputs())
    with pytest.warns(aliasing.NoAtenOpsWarning):
        analysis = aliasing.analyze(gm)
    check_analysis(analysis, gm, inputs())
    assert UNKNOWN_STORAGE in analysis.storage_of("mul_1")
    assert [n.name for n in analysis.writers("mul")] == ["set_", "add_"]
