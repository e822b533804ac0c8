"""The analysis on graphs from every source it promises to read, checked against real runs.

Sources: ``make_fx`` (fake and symbolic), ``torch.export.export`` (training IR,
with a parameter and a buffer mutated in ``forward``), Inductor's post-grad
graph (captured by a custom pass, analysed as a ``torch.fx.Graph``), custom ops
with ``mutates_args``, ``out=`` by keyword, and ``torch.fx.symbolic_trace``
graphs without metadata (unknown must never be "no"). Also graph-boundary
roles and the errors of queries about nodes the analysis does not know.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch.fx.experimental.proxy_tensor import make_fx

import aliasing
import rewrite
from aliasing import Role
from rewrite.testing import check_analysis, check_equivalent, copy_program


@torch.library.custom_op("fxaliasing_sources::scatter_two", mutates_args=("dst", "acc"))
def scatter_two(dst: torch.Tensor, acc: torch.Tensor, src: torch.Tensor) -> None:
    """Mutates two arguments: ``dst <- src`` and ``acc += src``."""
    dst.copy_(src)
    acc.add_(src)


@scatter_two.register_fake
def _scatter_two_fake(dst: torch.Tensor, acc: torch.Tensor, src: torch.Tensor) -> None:
    return None


def returned(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    result = graph.output_node().args[0]
    return list(result) if isinstance(result, (tuple, list)) else [result]


def by_target(graph: torch.fx.Graph, target: object) -> torch.fx.Node:
    return next(n for n in graph.nodes if n.target is target)


def _attention_like(x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, ...]:
    q, k, v = x.split(4, -1)
    cache[: x.shape[0]].copy_(k)
    q.mul_(0.5)
    return q @ cache[: x.shape[0]].t(), v, cache[1:]


def _attention_inputs() -> list[torch.Tensor]:
    return [torch.randn(3, 12), torch.zeros(6, 4)]


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_make_fx(mode: str) -> None:
    gm = make_fx(_attention_like, tracing_mode=mode)(*_attention_inputs())
    analysis = aliasing.analyze(gm)
    check_analysis(analysis, gm, _attention_inputs())
    x, cache = gm.graph.find_nodes(op="placeholder")
    copy_ = by_target(gm.graph, torch.ops.aten.copy_.default)
    mul_ = by_target(gm.graph, torch.ops.aten.mul_.Tensor)
    assert copy_ in analysis.writers(cache) and mul_ in analysis.writers(x)
    assert copy_ not in analysis.writers(x) and mul_ not in analysis.writers(cache)
    assert analysis.role(x) is Role.USER_INPUT and analysis.role(cache) is Role.USER_INPUT
    assert not analysis.may_alias(x, cache)


class _Stateful(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))
        self.register_buffer("steps", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.steps.add_(1)
        y = x @ self.weight
        return y + self.steps, y[0]


def test_torch_export_roles_and_buffer_mutation() -> None:
    module = _Stateful()
    ep = torch.export.export(module, (torch.randn(2, 4),))
    analysis = aliasing.analyze(ep)
    weight, steps, x = ep.graph.find_nodes(op="placeholder")
    assert analysis.role(weight) is Role.PARAMETER
    assert analysis.role(steps) is Role.BUFFER
    assert analysis.role(x) is Role.USER_INPUT
    add_ = by_target(ep.graph, torch.ops.aten.add_.Tensor)
    assert add_ in analysis.writers(steps) and add_ not in analysis.writers(weight)
    assert len({*analysis.storage_of(weight), *analysis.storage_of(steps), *analysis.storage_of(x)}) == 3
    inputs = [module.weight.detach().clone(), module.steps.clone(), torch.randn(2, 4)]
    check_analysis(analysis, ep.graph_module, inputs)


class _CustomOpModule(torch.nn.Module):
    def forward(self, dst: torch.Tensor, acc: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        view = acc[1:]
        torch.ops.fxaliasing_sources.scatter_two(dst, view, src)
        return acc.sum() + dst


def _custom_inputs() -> list[torch.Tensor]:
    return [torch.zeros(3), torch.ones(4), torch.randn(3)]


def test_custom_op_mutating_two_arguments_in_export() -> None:
    ep = torch.export.export(_CustomOpModule(), tuple(_custom_inputs()))
    analysis = aliasing.analyze(ep)
    dst, acc, src = ep.graph.find_nodes(op="placeholder")
    op = by_target(ep.graph, torch.ops.fxaliasing_sources.scatter_two.default)
    assert op in analysis.writers(dst) and op in analysis.writers(acc)
    assert op not in analysis.writers(src)
    check_analysis(analysis, ep.graph_module, _custom_inputs())


def test_out_keyword() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tail = c[1:]
        return torch.add(a, b, out=c), tail

    def inputs() -> list[torch.Tensor]:
        return [torch.randn(4), torch.randn(4), torch.zeros(4)]

    gm = make_fx(fn, tracing_mode="fake")(*inputs())
    analysis = aliasing.analyze(gm)
    a, b, c = gm.graph.find_nodes(op="placeholder")
    add = by_target(gm.graph, torch.ops.aten.add.out)
    assert add.kwargs["out"] is c
    tail = returned(gm.graph)[1]
    assert add in analysis.writers(c) and add in analysis.writers(tail)
    assert add not in analysis.writers(a) and add not in analysis.writers(b)
    assert analysis.may_alias(add, c) and analysis.may_overlap(add, tail)
    check_analysis(analysis, gm, inputs())


class _Capture(CustomGraphPass):
    """A post-grad pass that analyses the live graph and keeps a runnable copy."""

    def __init__(self) -> None:
        self.analyses: list[aliasing.AliasAnalysis] = []
        self.copies: list[torch.fx.GraphModule] = []

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.analyses.append(aliasing.analyze(graph))
        owner = graph.owning_module
        if not isinstance(owner, torch.fx.GraphModule):
            raise TypeError("post-grad graph without an owning GraphModule")
        self.copies.append(copy.deepcopy(owner))

    def uuid(self) -> None:
        return None


def _compiled_program(x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v = x.split(4, -1)
    cache[0:2].copy_(k)
    torch.ops.fxaliasing_sources.scatter_two(cache[2], q[0], v[1])
    return torch.relu(q) + v.sin(), cache[1:3].clone()


def _compiled_inputs() -> list[torch.Tensor]:
    return [torch.randn(2, 12), torch.zeros(4, 4)]


PostGrad = tuple[aliasing.AliasAnalysis, torch.fx.GraphModule, list[torch.Tensor], Any]


@pytest.fixture(scope="module")
def post_grad() -> PostGrad:
    """Compile once; return the analysis, a runnable copy of the graph, the inputs, the result."""
    capture = _Capture()
    inputs = _compiled_inputs()
    torch._dynamo.reset()
    with inductor_config.patch(post_grad_custom_post_pass=capture, fx_graph_cache=False):
        compiled = torch.compile(_compiled_program, backend="inductor", fullgraph=True)
        result = compiled(*[t.clone() for t in inputs])
    torch._dynamo.reset()
    if len(capture.analyses) != 1:
        raise RuntimeError(f"expected one post-grad graph, captured {len(capture.analyses)}")
    return capture.analyses[0], capture.copies[0], inputs, result


def test_inductor_post_grad_graph(post_grad: PostGrad) -> None:
    analysis, gm, inputs, compiled_result = post_grad
    expected = _compiled_program(*[t.clone() for t in inputs])
    torch.testing.assert_close(list(compiled_result), list(expected))
    torch.testing.assert_close(list(gm(*[t.clone() for t in inputs])), list(expected))
    assert any(n.target is torch.ops.higher_order.auto_functionalized_v2 for n in gm.graph.nodes)
    check_analysis(analysis, gm, [t.clone() for t in inputs])
    x, cache = gm.graph.find_nodes(op="placeholder")
    copies = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
    assert {n.args[0] for n in copies} == {x, cache}  # both inputs are written back at the end
    for write in copies:  # the analysis answers with nodes of the live graph: compare names
        assert write.name in {n.name for n in analysis.writers(write.args[0].name)}


def test_graph_without_metadata_is_conservative() -> None:
    class Opaque(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
            v = x.view(-1)
            v.add_(y.flatten())
            return self.lin(x), v, torch.relu(y)

    gm = torch.fx.symbolic_trace(Opaque())
    analysis = aliasing.analyze(gm)
    x, y = gm.graph.find_nodes(op="placeholder")
    lin, v, relu = returned(gm.graph)
    add_ = next(n for n in gm.graph.nodes if n.op == "call_method" and n.target == "add_")
    assert analysis.may_alias(x, v) and analysis.may_overlap(x, v)
    assert analysis.may_alias(lin, x)  # call_module is opaque: its result may alias what it reaches
    assert not analysis.may_alias(relu, y)  # torch.relu resolves to aten.relu: fresh memory
    assert analysis.may_alias(x, y)  # inputs without metadata may share memory with each other...
    assert not analysis.may_alias(relu, x)  # ...but not with memory the program allocates
    assert add_ in analysis.writers(x) and add_ in analysis.writers(v)
    assert add_ in analysis.writers(y)  # y may be x's memory
    check_analysis(analysis, gm, [torch.randn(2, 4), torch.randn(2, 4)])


def test_donated_inputs_role() -> None:
    gm = make_fx(lambda a, b: (a.add_(1), b * 2), tracing_mode="fake")(torch.randn(3), torch.randn(3))
    a, b = gm.graph.find_nodes(op="placeholder")
    analysis = aliasing.analyze(gm, donated_inputs=(0,))
    assert analysis.role(a) is Role.DONATED_INPUT and analysis.role(b) is Role.USER_INPUT
    assert aliasing.analyze(gm).role(a) is Role.USER_INPUT
    assert analysis.storage_role(next(iter(analysis.storage_of(a)))) is Role.DONATED_INPUT


def test_roles_of_outputs_intermediates_and_constants() -> None:
    table = torch.arange(4.0)

    def fn(x: torch.Tensor) -> torch.Tensor:
        scaled = x * 3
        return scaled + table

    gm = make_fx(fn, tracing_mode="fake", _allow_non_fake_inputs=True)(torch.randn(4))
    analysis = aliasing.analyze(gm)
    constant = next(n for n in gm.graph.nodes if n.op == "get_attr")
    mul = by_target(gm.graph, torch.ops.aten.mul.Tensor)
    (out,) = returned(gm.graph)
    assert analysis.role(constant) is Role.CONSTANT
    assert analysis.role(mul) is Role.INTERMEDIATE
    assert analysis.role(out) is Role.OUTPUT
    assert not analysis.may_alias(constant, out)
    check_analysis(analysis, gm, [torch.randn(4)])


def test_queries_about_unknown_nodes_raise() -> None:
    gm = make_fx(lambda x: x[1:], tracing_mode="fake")(torch.randn(3))
    other = make_fx(lambda y: y * 2, tracing_mode="fake")(torch.randn(3))
    analysis = aliasing.analyze(gm)
    (x,) = gm.graph.find_nodes(op="placeholder")
    queries: list[Callable[[], Any]] = [
        lambda: analysis.may_alias("no_such_node", x),
        lambda: analysis.writers("no_such_node"),
        lambda: analysis.role("no_such_node"),
    ]
    for query in queries:
        with pytest.raises(aliasing.UnknownNodeError, match="no_such_node"):
            query()
    foreign = by_target(other.graph, torch.ops.aten.mul.Tensor)
    with pytest.raises(aliasing.AliasingError, match="mul"):
        analysis.storage_of(foreign)
    with pytest.raises(aliasing.InvalidTargetError):
        aliasing.analyze(42)  # type: ignore[arg-type]


def test_loaded_exported_program_views_have_no_trusted_layout(tmp_path: Path) -> None:
    # torch.export.load gives every view a fake storage of its own at offset 0: the
    # analysis must not read `y[1:]` as starting at offset 0 of `y` (removing the
    # clone would then move the output's storage offset).
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            y = x * 2
            q, k, _ = y.split(4, -1)
            return y[1:].clone(), q * 2, k + 1

    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(M(), (torch.randn(3, 12),)), path)
    loaded = torch.export.load(path)
    analysis = aliasing.analyze(loaded)
    (slice_,) = [n for n in loaded.graph.nodes if n.target is torch.ops.aten.slice.Tensor]
    assert analysis.region_of(slice_) is None and analysis.facts_of(slice_) is None
    check_analysis(analysis, loaded.graph_module, [torch.randn(3, 12)])
    original = copy_program(loaded)
    report = rewrite.eliminate_clones(loaded)
    assert report.kept == ("clone",)
    check_equivalent(original, loaded, [torch.randn(3, 12)])
