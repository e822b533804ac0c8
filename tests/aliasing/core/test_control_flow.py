"""Control-flow higher-order ops analysed through their subgraphs (``aliasing.core.subgraphs``).

Every program runs for real under the memory oracle (``check_analysis``), with
each predicate value and with loops that run zero and several times:

1. ``cond``: branches that only read their operands write nothing and return
   fresh memory; a branch that mutates its operand (allowed by torch under
   ``no_grad``) makes the op a writer of it; an output aliasing an operand keeps
   its region only when the metadata shows where it lives.
2. ``while_loop``: writes of the body and the condition reach the operands;
   outputs are fresh; a body returning an alias of its inputs is opaque.
3. Nested control flow, ``invoke_subgraph`` (Inductor post-grad graph), ``wrap``
   and the wrap-like ops (``torch.export``'s grad-mode and autocast regions).
4. What a summary cannot express falls back to an unknown op (rules R5 a-g of
   ``aliasing.core.subgraphs``), and the fallback is still sound.
5. Clone elimination: a clone passed to a read-only ``cond`` is removed, one
   passed to a mutating ``cond`` is kept; both rewrites checked by real runs.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.fx
from torch._higher_order_ops.while_loop import while_loop
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

import aliasing
from aliasing import DEFAULT_EFFECTS, with_control_flow
from aliasing.core.effects import Effect
from aliasing.core.subgraphs import OpaqueSubgraph, summarize_subgraph
from rewrite import eliminate_clones
from rewrite.testing import check_analysis, check_equivalent, copy_program

Inputs = Callable[[], list[Any]]
Program = Any  # a GraphModule or an ExportedProgram


class _Wrapped(torch.nn.Module):
    """A module whose forward is a plain function, for ``torch.export``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _trace(fn: Callable[..., Any], inputs: Inputs, source: str, *, no_grad: bool = False) -> Program:
    with torch.set_grad_enabled(not no_grad):
        if source == "make_fx":
            return make_fx(fn, tracing_mode="fake")(*inputs())
        return torch.export.export(_Wrapped(fn), tuple(inputs()))


def _module(program: Program) -> torch.fx.GraphModule:
    return program.graph_module if isinstance(program, torch.export.ExportedProgram) else program


def _node(program: Program, target: object) -> torch.fx.Node:
    return next(n for n in _module(program).graph.nodes if n.target is target)


def _check(program: Program, inputs: Inputs) -> aliasing.AliasAnalysis:
    """Analyse, check against a real run, and return the analysis."""
    analysis = aliasing.analyze(program)
    check_analysis(analysis, _module(program), inputs())
    return analysis


def _writer_names(analysis: aliasing.AliasAnalysis, node: torch.fx.Node) -> list[str]:
    return [n.name for n in analysis.writers(node)]


def _pred(value: bool) -> Callable[[], torch.Tensor]:
    return lambda: torch.tensor(value)


def _with_meta(gm: torch.fx.GraphModule, inputs: Sequence[Any], *, shape_env: bool = False) -> torch.fx.GraphModule:
    """Fill the outer graph's ``meta['val']`` by fake propagation (the subgraphs carry their own)."""
    mode = FakeTensorMode(shape_env=ShapeEnv() if shape_env else None)
    FakeTensorProp(gm, mode).propagate(*[mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs])
    return gm


def _hop_graph(
    hop: Any,
    inputs: Sequence[str],
    subgraphs: dict[str, torch.fx.GraphModule],
    args: Callable[[list[torch.fx.Node], list[torch.fx.Node]], tuple[Any, ...]],
    keys: Sequence[int],
    extra: Callable[[torch.fx.Graph, list[torch.fx.Node]], list[torch.fx.Node]] = lambda g, ph: [],
) -> torch.fx.GraphModule:
    """A graph calling one higher-order op on subgraph modules, returning ``getitem`` of ``keys``."""
    root = torch.nn.Module()
    graph = torch.fx.Graph()
    placeholders = [graph.placeholder(name) for name in inputs]
    attrs = []
    for name, module in subgraphs.items():
        root.add_module(name, module)
        attrs.append(graph.get_attr(name))
    call = graph.call_function(hop, args(placeholders, attrs))
    outs = [graph.call_function(operator.getitem, (call, k)) for k in keys]
    graph.output(tuple(outs + extra(graph, placeholders)))
    return torch.fx.GraphModule(root, graph)


def _fake_trace(fn: Callable[..., Any], *example: Any) -> torch.fx.GraphModule:
    return make_fx(fn, tracing_mode="fake")(*example)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    """torch.cond traces its branches with Dynamo, whose automatic dynamic shapes would make a
    test's graph depend on the sizes earlier tests used (sizes lifted into operands)."""
    torch._dynamo.reset()


# ---------------------------------------------------------------------------
# 1. cond


def read_only_cond(p: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> Any:
    def yes(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x.sin()

    def no(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x - y, x[0:2].cos().repeat(2)

    return torch.cond(p, yes, no, (x, y))


def mutating_cond(p: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> Any:
    def yes(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        x[1:3].add_(1)
        return (x + y,)

    def no(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        return (x - y,)

    return torch.cond(p, yes, no, (x, y))


@pytest.mark.parametrize("source", ["make_fx", "export"])
@pytest.mark.parametrize("pred", [True, False])
def test_read_only_cond_writes_nothing_and_returns_fresh_memory(source: str, pred: bool) -> None:
    inputs: Inputs = lambda: [torch.tensor(pred), torch.randn(4), torch.randn(4)]  # noqa: E731
    program = _trace(read_only_cond, inputs, source)
    analysis = _check(program, inputs)
    cond = _node(program, torch.ops.higher_order.cond)
    assert not analysis.is_unknown(cond), analysis.effect_of(cond)
    x, y = [n for n in _module(program).graph.nodes if n.op == "placeholder"][1:]
    assert _writer_names(analysis, x) == [] and _writer_names(analysis, y) == []
    outs = [u for u in cond.users if u.target is operator.getitem]
    assert len(outs) == 2
    for out in outs:
        assert not analysis.may_alias(out, x) and not analysis.may_alias(out, y)
    assert not analysis.may_alias(outs[0], outs[1])


@pytest.mark.parametrize("source", ["make_fx", "export"])
@pytest.mark.parametrize("pred", [True, False])
def test_cond_branch_mutating_its_operand_is_a_writer(source: str, pred: bool) -> None:
    """torch 2.13 allows a branch to mutate its inputs when grad mode is off."""
    inputs: Inputs = lambda: [torch.tensor(pred), torch.randn(4), torch.randn(4)]  # noqa: E731
    program = _trace(mutating_cond, inputs, source, no_grad=True)
    analysis = _check(program, inputs)
    cond = _node(program, torch.ops.higher_order.cond)
    x, y = [n for n in _module(program).graph.nodes if n.op == "placeholder"][1:]
    assert not analysis.is_unknown(cond)
    assert _writer_names(analysis, x) == [cond.name]
    assert _writer_names(analysis, y) == []


def test_cond_with_sizes_lifted_into_operands() -> None:
    """A second trace at another size lifts the sizes into operands: Python ints (fake tracing)
    or SymInt nodes (symbolic tracing); the branches get placeholders for them."""
    make_fx(read_only_cond, tracing_mode="fake")(torch.tensor(True), torch.randn(2), torch.randn(2))
    lifted = make_fx(read_only_cond, tracing_mode="fake")(torch.tensor(True), torch.randn(4), torch.randn(4))
    torch._dynamo.reset()
    symbolic = make_fx(read_only_cond, tracing_mode="symbolic")(torch.tensor(True), torch.randn(4), torch.randn(4))
    for gm, size in ((lifted, 4), (symbolic, 6)):
        operands = _node(gm, torch.ops.higher_order.cond).args[3]
        assert len(operands) > 2  # the sizes ride along
        analysis = _check(gm, lambda size=size: [torch.tensor(False), torch.randn(size), torch.randn(size)])
        assert not analysis.is_unknown("cond"), analysis.effect_of("cond")
        assert _writer_names(analysis, "x_1") == []
    assert any(type(x) is int for x in _node(lifted, torch.ops.higher_order.cond).args[3])


def _cond_output_aliasing(start: int) -> torch.fx.GraphModule:
    """``cond`` whose branches both return ``x[start:start+2]``, next to a write of ``x[2:4]``.

    torch's tracers reject branches that return aliases of their inputs, so the
    graph is built by hand; fake propagation merges the branches' outputs into a
    fresh tensor at offset 0, which is where ``x[0:2]`` lives but not ``x[1:3]``.
    """
    view = lambda x: (x[start : start + 2],)  # noqa: E731
    yes, no = _fake_trace(view, torch.randn(4)), _fake_trace(view, torch.randn(4))

    def tail(graph: torch.fx.Graph, ph: list[torch.fx.Node]) -> list[torch.fx.Node]:
        other = graph.call_function(torch.ops.aten.slice.Tensor, (ph[1], 0, 2, 4))
        return [graph.call_function(torch.ops.aten.add_.Tensor, (other, 1))]

    gm = _hop_graph(
        torch.ops.higher_order.cond,
        ["p", "x"],
        {"yes": yes, "no": no},
        lambda ph, at: (ph[0], at[0], at[1], (ph[1],)),
        [0],
        tail,
    )
    return _with_meta(gm, [torch.tensor(True), torch.randn(4)])


@pytest.mark.parametrize("pred", [True, False])
def test_cond_output_aliasing_an_operand_keeps_its_exact_region(pred: bool) -> None:
    gm = _cond_output_aliasing(0)
    analysis = _check(gm, lambda: [torch.tensor(pred), torch.randn(4)])
    assert not analysis.is_unknown("cond")
    assert analysis.storage_of("getitem") == analysis.storage_of("x")
    assert analysis.region_of("getitem") is not None
    assert not analysis.may_overlap("getitem", "slice_tensor")  # x[0:2] vs x[2:4]
    assert _writer_names(analysis, "getitem") == []


@pytest.mark.parametrize("pred", [True, False])
def test_cond_output_aliasing_an_operand_elsewhere_than_its_metadata_says_is_opaque(pred: bool) -> None:
    gm = _cond_output_aliasing(1)
    analysis = _check(gm, lambda: [torch.tensor(pred), torch.randn(4)])
    effect = analysis.effect_of("cond")
    assert effect is not None and effect.unknown and "R5 g" in effect.note
    # trusting the metadata (offset 0) would have answered "no overlap" for x[1:3] vs x[2:4]
    assert analysis.may_overlap("getitem", "slice_tensor")


# ---------------------------------------------------------------------------
# 2. while_loop


def counting_loop(i: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> Any:
    def keep_going(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return i < 3

    def body(i: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return i + 1, x.sin() + y

    return while_loop(keep_going, body, (i, x))


def mutating_loop(i: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> Any:
    def keep_going(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return i < 3

    def body(i: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x.add_(1)  # the carried input at the first iteration, fresh memory afterwards
        y.mul_(2)  # an additional input, at every iteration
        return i + 1, x.sin()

    return while_loop(keep_going, body, (i, x))


def _loop_inputs(start: int) -> Inputs:
    return lambda: [torch.tensor(start), torch.randn(4), torch.randn(4)]


@pytest.mark.parametrize("source", ["make_fx", "export"])
@pytest.mark.parametrize("start", [0, 3])  # three iterations, none
def test_read_only_while_loop_writes_nothing_and_returns_fresh_memory(source: str, start: int) -> None:
    program = _trace(counting_loop, _loop_inputs(0), source)
    analysis = _check(program, _loop_inputs(start))
    loop = _node(program, torch.ops.higher_order.while_loop)
    assert not analysis.is_unknown(loop), analysis.effect_of(loop)
    placeholders = [n for n in _module(program).graph.nodes if n.op == "placeholder"]
    for p in placeholders:
        assert _writer_names(analysis, p) == []
    for out in loop.users:
        for p in placeholders:
            assert not analysis.may_alias(out, p)


@pytest.mark.parametrize("source", ["make_fx", "export"])
@pytest.mark.parametrize("start", [0, 3])
def test_while_loop_writes_reach_carried_and_additional_inputs(source: str, start: int) -> None:
    program = _trace(mutating_loop, _loop_inputs(0), source, no_grad=True)
    analysis = _check(program, _loop_inputs(start))
    loop = _node(program, torch.ops.higher_order.while_loop)
    i, x, y = [n for n in _module(program).graph.nodes if n.op == "placeholder"]
    assert not analysis.is_unknown(loop)
    assert _writer_names(analysis, x) == [loop.name]
    assert _writer_names(analysis, y) == [loop.name]
    assert _writer_names(analysis, i) == []


def test_while_loop_body_returning_its_input_is_opaque() -> None:
    """torch's tracers reject such a body; the graph is built by hand."""
    keep_going = _fake_trace(lambda i, x: i < 3, torch.tensor(0), torch.randn(4))
    body = _fake_trace(lambda i, x: (i + 1, x), torch.tensor(0), torch.randn(4))
    gm = _hop_graph(
        torch.ops.higher_order.while_loop,
        ["i", "x"],
        {"keep_going": keep_going, "body": body},
        lambda ph, at: (at[0], at[1], (ph[0], ph[1]), ()),
        [1],
    )
    _with_meta(gm, [torch.tensor(0), torch.randn(4)], shape_env=True)
    analysis = _check(gm, lambda: [torch.tensor(0), torch.randn(4)])  # three iterations: returns x itself
    effect = analysis.effect_of("while_loop")
    assert effect is not None and effect.unknown and "alias of its inputs" in effect.note
    assert analysis.may_alias("getitem", "x")


# ---------------------------------------------------------------------------
# 3. nesting, invoke_subgraph, wrap-like ops


def nested_cond(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> Any:
    def inner_yes(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        x.mul_(2)
        return (x + y,)

    def inner_no(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        return (x * y,)

    def outer_yes(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        return torch.cond(q, inner_yes, inner_no, (x, y))

    def outer_no(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        return (y.cos(),)

    return torch.cond(p, outer_yes, outer_no, (x, y))


@pytest.mark.parametrize(("p", "q"), [(True, True), (True, False), (False, True)])
def test_nested_cond_writes_reach_the_outer_operands(p: bool, q: bool) -> None:
    inputs: Inputs = lambda: [torch.tensor(p), torch.tensor(q), torch.randn(4), torch.randn(4)]  # noqa: E731
    program = _trace(nested_cond, inputs, "make_fx", no_grad=True)
    analysis = _check(program, inputs)
    inner = next(n for n in program.true_graph_0.graph.nodes if n.target is torch.ops.higher_order.cond)
    assert not aliasing.analyze(program.true_graph_0).is_unknown(inner)
    assert not analysis.is_unknown("cond")
    assert _writer_names(analysis, "x_1") == ["cond"]
    assert _writer_names(analysis, "y_1") == []


def loop_with_cond(i: torch.Tensor, x: torch.Tensor) -> Any:
    def keep_going(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return i < 3

    def body(i: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (z,) = torch.cond(i > 1, lambda a: (a.sin(),), lambda a: (a.cos(),), (x,))
        return i + 1, z

    return while_loop(keep_going, body, (i, x))


@pytest.mark.parametrize("start", [0, 3])
def test_cond_inside_a_loop_body(start: int) -> None:
    inputs: Inputs = lambda: [torch.tensor(start), torch.randn(4)]  # noqa: E731
    program = _trace(loop_with_cond, lambda: [torch.tensor(0), torch.randn(4)], "make_fx")
    analysis = _check(program, inputs)
    assert not analysis.is_unknown("while_loop")
    assert _writer_names(analysis, "x_1") == []
    assert not analysis.may_alias("getitem_1", "x_1")


@torch.compiler.nested_compile_region
def _region(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * y + 1


@pytest.mark.integration
def test_invoke_subgraph_from_an_inductor_post_grad_graph() -> None:
    captured: list[torch.fx.GraphModule] = []

    def capture(graph: torch.fx.Graph) -> None:
        if any(n.target is torch.ops.higher_order.invoke_subgraph for n in graph.nodes):
            captured.append(copy_program(graph.owning_module))

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return _region(x, y) + _region(y, x)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, options={"post_grad_custom_post_pass": capture})
    compiled(torch.randn(4), torch.randn(4))
    assert len(captured) == 1
    gm = captured[0]
    analysis = _check(gm, lambda: [torch.randn(4), torch.randn(4)])
    calls = [n for n in gm.graph.nodes if n.target is torch.ops.higher_order.invoke_subgraph]
    assert len(calls) == 2
    for call in calls:
        assert not analysis.is_unknown(call), analysis.effect_of(call)
        for p in gm.graph.find_nodes(op="placeholder"):
            assert _writer_names(analysis, p) == []
            assert not analysis.may_alias(next(iter(call.users)), p)


def _mutating_body() -> torch.fx.GraphModule:
    def body(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x.add_(y)
        return x * 2, y.sin()

    return _fake_trace(body, torch.randn(4), torch.randn(4))


@pytest.mark.parametrize(
    ("hop", "lead"),
    [
        (torch.ops.higher_order.wrap, ()),
        (torch.ops.higher_order.tag_activation_checkpoint, ()),
        (torch.ops.higher_order.wrap_with_set_grad_enabled, (False,)),
    ],
    ids=["wrap", "tag_activation_checkpoint", "wrap_with_set_grad_enabled"],
)
def test_wrap_like_ops_built_by_hand(hop: Any, lead: tuple[Any, ...]) -> None:
    gm = _hop_graph(hop, ["x", "y"], {"body": _mutating_body()}, lambda ph, at: (*lead, at[0], *ph), [0, 1])
    inputs: Inputs = lambda: [torch.randn(4), torch.randn(4)]  # noqa: E731
    _with_meta(gm, inputs())
    analysis = _check(gm, inputs)
    call = next(n for n in gm.graph.nodes if n.target is hop)
    assert not analysis.is_unknown(call), analysis.effect_of(call)
    assert _writer_names(analysis, "x") == [call.name]
    assert _writer_names(analysis, "y") == []
    for out in ("getitem", "getitem_1"):
        assert not analysis.may_alias(out, "x") and not analysis.may_alias(out, "y")


class _GradAndAutocastRegions(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            z = x.sin() + y
        with torch.autocast("cpu", dtype=torch.bfloat16):
            w = z @ y
        return w.float() + 1


def test_export_grad_mode_and_autocast_regions() -> None:
    inputs: Inputs = lambda: [torch.randn(4, 4), torch.randn(4, 4)]  # noqa: E731
    ep = torch.export.export(_GradAndAutocastRegions(), tuple(inputs()))
    analysis = _check(ep, inputs)
    hops = [n for n in ep.graph.nodes if isinstance(n.target, torch._ops.HigherOrderOperator)]
    assert sorted(str(n.target.name()) for n in hops) == ["wrap_with_autocast", "wrap_with_set_grad_enabled"]
    for n in hops:
        assert not analysis.is_unknown(n), analysis.effect_of(n)
    assert _writer_names(analysis, "x") == [] and _writer_names(analysis, "y") == []


# ---------------------------------------------------------------------------
# 4. fallbacks (R5)


def _wrap_graph(body: torch.fx.GraphModule, inputs: Sequence[torch.Tensor], keys: Sequence[int]) -> torch.fx.GraphModule:
    names = [f"x{i}" for i in range(len(inputs))]
    gm = _hop_graph(torch.ops.higher_order.wrap, names, {"body": body}, lambda ph, at: (at[0], *ph), keys)
    return _with_meta(gm, inputs)


def _unknown_note(analysis: aliasing.AliasAnalysis, node: str) -> str:
    effect = analysis.effect_of(node)
    assert effect is not None and effect.unknown, effect
    return effect.note


def test_subgraph_without_metadata_is_opaque() -> None:
    def body(x: torch.Tensor) -> tuple[torch.Tensor]:
        x.add_(1)
        return (x * 2,)

    gm = _wrap_graph(torch.fx.symbolic_trace(body), [torch.randn(4)], [0])
    analysis = _check(gm, lambda: [torch.randn(4)])
    assert "R5 b" in _unknown_note(analysis, "wrap")
    assert _writer_names(analysis, "x0") == ["wrap"]


def _bump(t: torch.Tensor) -> torch.Tensor:
    t.add_(1)
    return t * 1


torch.fx.wrap("_bump")


def test_unknown_op_inside_a_subgraph_is_opaque() -> None:
    def body(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (_bump(x),)

    sub = torch.fx.symbolic_trace(body)
    assert [n.target for n in sub.graph.nodes if n.op == "call_function"] == [_bump]
    _with_meta(sub, [torch.randn(4)])
    gm = _wrap_graph(sub, [torch.randn(4)], [0])
    analysis = _check(gm, lambda: [torch.randn(4)])
    assert "R5 c" in _unknown_note(analysis, "wrap")
    assert _writer_names(analysis, "x0") == ["wrap"]


def test_as_strided_inside_a_branch_is_opaque() -> None:
    """The branch writes ``b[2:4]`` through ``as_strided`` of its operand ``b[0:2]``."""

    def f(p: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        def yes(v: torch.Tensor) -> tuple[torch.Tensor]:
            v.as_strided((2,), (1,), 2).add_(1)
            return (v * 1,)

        (o,) = torch.cond(p, yes, lambda v: (v * 2,), (b[0:2],))
        return o, b[2:4] * 1

    inputs: Inputs = lambda: [torch.tensor(True), torch.randn(4)]  # noqa: E731
    program = _trace(f, inputs, "make_fx", no_grad=True)
    analysis = _check(program, inputs)
    assert "R5 d" in _unknown_note(analysis, "cond")
    assert "cond" in _writer_names(analysis, "slice_2")


def test_outputs_sharing_a_fresh_storage_are_opaque() -> None:
    def body(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = x * 2
        return c[0], c[1]

    gm = _wrap_graph(_fake_trace(body, torch.randn(2, 3)), [torch.randn(2, 3)], [0, 1])
    analysis = _check(gm, lambda: [torch.randn(2, 3)])
    assert "R5 f" in _unknown_note(analysis, "wrap")
    assert analysis.may_alias("getitem", "getitem_1")


def test_graph_without_owning_module_is_opaque() -> None:
    inputs: Inputs = lambda: [torch.tensor(True), torch.randn(4), torch.randn(4)]  # noqa: E731
    gm = _trace(read_only_cond, inputs, "make_fx")
    bare = copy.deepcopy(gm.graph)
    assert bare.owning_module is None
    analysis = aliasing.analyze(bare)
    assert "R5 a" in _unknown_note(analysis, "cond")
    check_analysis(analysis, gm, inputs())


def test_summary_of_a_subgraph() -> None:
    def body(x: torch.Tensor, n: int, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x[0].add_(1)
        return y[1:], x * n, y.sum()

    sub = _fake_trace(body, torch.randn(3), 2, torch.randn(3))
    n = [p for p in sub.graph.nodes if p.op == "placeholder"][1]
    n.meta.pop("val", None)  # make_fx 2.13 records no metadata for an int input, 2.14 does: check the case of none
    with pytest.raises(OpaqueSubgraph, match="R5 b"):  # a placeholder without metadata
        summarize_subgraph(sub, aliasing.analyze)
    summary = summarize_subgraph(sub, aliasing.analyze, scalar_inputs=[1])
    assert summary.num_inputs == 3
    assert summary.writes == frozenset({0})
    assert summary.reads == frozenset({0, 2})
    assert summary.outputs == (frozenset({2}), frozenset(), frozenset())
    assert summary.exact_outputs[0]
    with pytest.raises(OpaqueSubgraph, match="R5 b"):
        summarize_subgraph(torch.fx.symbolic_trace(lambda x: (x + 1,)), aliasing.analyze)


def test_nested_analyses_use_the_extended_table() -> None:
    """A rule added to the table reaches subgraphs once the table is re-tied with ``with_control_flow``."""
    inputs: Inputs = lambda: [torch.tensor(True), torch.randn(4), torch.randn(4)]  # noqa: E731
    gm = _trace(read_only_cond, inputs, "make_fx")
    # pretend ``sin`` writes its argument: only a table whose subgraph analyses see the rule notices
    sin_writes = DEFAULT_EFFECTS.with_rule(
        torch.ops.aten.sin.default, lambda node, facts: Effect(reads=(node.args[0],), writes=(node.args[0],))
    )
    assert _writer_names(aliasing.analyze(gm, effects=sin_writes), "x_1") == []
    assert _writer_names(aliasing.analyze(gm, effects=with_control_flow(sin_writes)), "x_1") == ["cond"]


# ---------------------------------------------------------------------------
# 5. clone elimination around cond


def clone_into_read_only_cond(p: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> Any:
    c = x.clone()
    (a, b) = read_only_cond(p, c, y)
    return a + b + x


def clone_into_mutating_cond(p: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> Any:
    c = x.clone()
    (a,) = mutating_cond(p, c, y)
    return a + x


@pytest.mark.parametrize("source", ["make_fx", "export"])
def test_clone_passed_to_a_read_only_cond_is_removed(source: str) -> None:
    """Removed where the input's layout is guarded (make_fx, as Dynamo's graphs); an exported program's
    module takes its input at any storage offset, and the false branch uses a slice of the clone (its
    metadata would record the clone's offset): kept there (C1, naming the input)."""
    inputs: Inputs = lambda: [torch.tensor(True), torch.randn(4), torch.randn(4)]  # noqa: E731
    program = _trace(clone_into_read_only_cond, inputs, source)
    rewritten = copy_program(program)
    report = eliminate_clones(rewritten, strict=True)
    if source == "make_fx":
        assert report.removed == ("clone",), str(report)
    else:
        assert report.kept == ("clone",) and str(report.decisions[0].reason) == "layout", str(report)
    for pred in (True, False):
        check_equivalent(program, rewritten, lambda pred=pred: [torch.tensor(pred), torch.randn(5)[1:], torch.randn(4)])


@pytest.mark.parametrize("source", ["make_fx", "export"])
def test_clone_passed_to_a_mutating_cond_is_kept(source: str) -> None:
    inputs: Inputs = lambda: [torch.tensor(True), torch.randn(4), torch.randn(4)]  # noqa: E731
    program = _trace(clone_into_mutating_cond, inputs, source, no_grad=True)
    analysis = aliasing.analyze(program)
    assert [n.name for n in analysis.writers("clone")] == ["cond"]
    rewritten = copy_program(program)
    report = eliminate_clones(rewritten, strict=True)
    assert report.removed == () and report.kept == ("clone",), str(report)
    for pred in (True, False):
        check_equivalent(program, rewritten, lambda pred=pred: [torch.tensor(pred), torch.randn(4), torch.randn(4)])
