"""Graphs of torch-level calls (``torch.fx.symbolic_trace``) against real runs.

Tensor methods, ``torch`` builtins and Python operators resolve to the ATen
schema of the same name where every overload the call can bind to agrees on
its alias annotations; everything else is unknown. Each graph is checked by
the real-execution oracle, with and without ``FakeTensorProp`` metadata.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import aliasing
from aliasing.core.analysis import NoAtenOpsWarning
from aliasing.core.resolve import resolve_overload
from rewrite.testing import check_analysis


def _analyse(fn: Callable[..., object], inputs: Sequence[torch.Tensor], meta: bool) -> tuple[torch.fx.GraphModule, aliasing.AliasAnalysis]:
    gm = torch.fx.symbolic_trace(fn)
    if meta:
        FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*[t.clone() for t in inputs])
    with pytest.warns(NoAtenOpsWarning, match="make_fx or torch.export"):
        analysis = aliasing.analyze(gm)
    check_analysis(analysis, gm, [t.clone() for t in inputs])
    return gm, analysis


def _views_and_writes(x: torch.Tensor, y: torch.Tensor) -> tuple[object, ...]:
    a = x.view(-1)
    a.add_(1)
    q, k = y.split(2, dim=-1)
    q.mul_(2)
    z = torch.add(k, 1)
    b = x[0]
    b.fill_(5.0)
    d = y[torch.ones(2, dtype=torch.long)]
    d.zero_()
    e = y.clone()
    e.sub_(1)
    return z, b, x.t(), d, e, x.size(0) * 2


@pytest.mark.parametrize("meta", [False, True], ids=["no-metadata", "fake-tensor-prop"])
def test_methods_and_builtins_resolve_to_aten_schemas(meta: bool) -> None:
    gm, a = _analyse(_views_and_writes, [torch.randn(3, 4), torch.randn(3, 4)], meta)
    by_name = {n.name: n for n in gm.graph.nodes}
    for name in ("view", "add_", "split", "mul_", "add", "fill_", "t", "zero_", "clone", "sub_", "size"):
        assert not a.is_unknown(name), name
    assert a.may_alias("view", "x") and a.may_alias("getitem_2", "x")  # x[0]: basic indexing is a view
    effect = a.effect_of(by_name["mul"])
    assert effect is not None and effect.reads == ()  # arithmetic on a size touches no tensor
    assert a.opaque_nodes == ()
    if meta:  # without metadata the inputs may share memory with anything
        assert not a.may_alias("clone", "y")
        assert not a.may_alias("add", "y")  # torch.add returns fresh memory
        assert [n.name for n in a.writers("x")] == ["add_", "fill_"]
        assert "mul_" in [n.name for n in a.writers("y")] and "sub_" not in [n.name for n in a.writers("y")]
        assert not a.may_alias("getitem_3", "y")  # y[tensor]: advanced indexing is a copy
        assert not a.may_overlap("getitem", "getitem_1")  # the two halves of the split


def test_python_operators_on_tensors() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, -(x @ y.t())

    _, a = _analyse(f, [torch.randn(3, 3), torch.randn(3, 3)], meta=True)
    assert a.opaque_nodes == ()
    assert not a.may_alias("add", "x") and a.writers("x") == ()


def _hand_built(target: Callable[..., object], extra: tuple[object, ...], inputs: Sequence[torch.Tensor]) -> torch.fx.GraphModule:
    """``x, y -> (x, target(x, *extra, y))``, as dynamo-style graphs write it, with metadata."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y")
    node = g.call_function(target, (x, *extra, y))  # type: ignore[arg-type]
    g.output((x, node))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    FakeTensorProp(gm).propagate(*[t.clone() for t in inputs])
    return gm


def test_setitem_writes_its_tensor() -> None:
    gm = _hand_built(operator.setitem, (slice(0, 2),), [torch.zeros(4), torch.ones(2)])
    a = aliasing.analyze(gm)
    assert [n.name for n in a.writers("x")] == ["setitem"]
    assert not a.is_unknown("setitem")
    check_analysis(a, gm, [torch.zeros(4), torch.ones(2)])


def test_inplace_python_operator_writes_and_returns_its_first_operand() -> None:
    gm = _hand_built(operator.iadd, (), [torch.zeros(4), torch.ones(4)])
    a = aliasing.analyze(gm)
    assert [n.name for n in a.writers("x")] == ["iadd"]
    assert a.may_alias("iadd", "x") and not a.may_alias("iadd", "y")
    check_analysis(a, gm, [torch.zeros(4), torch.ones(4)])


def test_python_wrappers_with_their_own_signature_stay_unknown() -> None:
    # F.batch_norm takes (input, running_mean, running_var, weight, bias, ...), not ATen's order:
    # resolving it by name would attach the hidden running-statistics write to the wrong argument.
    def f(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.batch_norm(x, mean, var, training=True)

    inputs = [torch.randn(8, 4), torch.zeros(4), torch.ones(4)]
    gm, a = _analyse(f, inputs, meta=True)
    (bn,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert resolve_overload(bn) is None and a.is_unknown(bn)
    assert [n.name for n in a.writers("mean")] == [bn.name]


def test_ambiguous_overloads_stay_unknown() -> None:
    # aten::to has overloads that return an alias of self and overloads that take a device and
    # a dtype: a call the analysis cannot bind to one alias behaviour stays unknown.
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float64)

    gm = torch.fx.symbolic_trace(f)
    (to,) = [n for n in gm.graph.nodes if n.op == "call_method"]
    op = resolve_overload(to)
    if op is not None:  # every overload it binds to agrees: the schema is the answer
        assert op._schema.name == "aten::to"
    check_analysis(aliasing.analyze(gm), gm, [torch.randn(3)])


def test_graph_with_aten_ops_gets_no_warning() -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x: x.add_(1), tracing_mode="fake")(torch.randn(3))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", NoAtenOpsWarning)
        aliasing.analyze(gm)
