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


@pytest.mark.integration
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


def test_loaded_exported_program_views_regain_their_layout(tmp_path: Path) -> None:
    # torch.export.load gives every view a fake storage of its own at offset 0: the
    # analysis propagates the fake values again (aliasing.restore_storage_identity), so
    # `y[1:]` starts at element 12 of `y` as in memory, and the clone stays (removing it
    # would move the output's storage offset).
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
    facts = analysis.facts_of(slice_)
    assert facts is not None and facts.storage_offset == 12 and analysis.region_of(slice_) is not None
    check_analysis(analysis, loaded.graph_module, [torch.randn(3, 12)])
    original = copy_program(loaded)
    report = rewrite.eliminate_clones(loaded)
    assert report.kept == ("clone",)
    check_equivalent(original, loaded, [torch.randn(3, 12)])


# ------------------------------------------------ view-or-copy ops (contiguous, reshape, to, ...)

_VIEW_OR_COPY_OPS = {
    "contiguous": lambda x: x.contiguous(),
    "contiguous_channels_last": lambda x: x.unsqueeze(0).contiguous(memory_format=torch.channels_last),
    "reshape": lambda x: x.reshape(-1),
    "flatten": lambda x: x.flatten(),
    "to_same_dtype": lambda x: x.to(torch.float32),
    "to_other_dtype": lambda x: x.to(torch.float64),
    "type_as_same": lambda x: x.type_as(x),
}


def _view_or_copy_program(op: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    def program(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = op(x)
        z = y.clone()  # removable exactly when y is a copy
        z.add_(1)
        return z, x.transpose(0, 1) * 2  # a view: the trace shows whether fake storages are kept

    return program


def _view_or_copy_input(layout: str) -> torch.Tensor:
    x = torch.randn(4, 3, 5)
    return x if layout == "contiguous" else x.transpose(0, 2)


def _export(fn: Callable[..., Any], x: torch.Tensor) -> torch.export.ExportedProgram:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return fn(x)

    return torch.export.export(M(), (x,))


def _the_op(graph: torch.fx.Graph) -> torch.fx.Node:
    # The view-or-copy op: the input of the clone.
    clone = next(n for n in graph.nodes if n.target is torch.ops.aten.clone.default)
    arg = clone.args[0]
    assert isinstance(arg, torch.fx.Node)
    return arg


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("name", sorted(_VIEW_OR_COPY_OPS))
@pytest.mark.parametrize("source", ["make_fx-fake", "make_fx-symbolic", "export", "export-loaded", "make_fx-real"])
def test_view_or_copy_ops_follow_the_fake_storages_where_trusted(source: str, name: str, layout: str, tmp_path: Path) -> None:
    fn = _view_or_copy_program(_VIEW_OR_COPY_OPS[name])
    x = _view_or_copy_input(layout)
    if source.startswith("make_fx"):
        # pre_dispatch keeps contiguous/reshape/to as ops (plain make_fx decomposes them)
        target: Any = make_fx(fn, tracing_mode=source.split("-")[1], pre_dispatch=True)(x)
        gm = target
    else:
        target = _export(fn, x)
        if source == "export-loaded":
            torch.export.save(target, tmp_path / "m.pt2")
            target = torch.export.load(tmp_path / "m.pt2")
        gm = target.graph_module
    if _the_op(gm.graph).op == "placeholder":
        pytest.skip("the tracer dropped the op (it returned its input)")
    analysis = aliasing.analyze(target)
    op, (placeholder,) = _the_op(gm.graph), gm.graph.find_nodes(op="placeholder")
    real_x = torch.empty_strided(x.shape, x.stride()).copy_(x)
    copies = _real_copy(_VIEW_OR_COPY_OPS[name], real_x)
    exactness = check_analysis(analysis, gm, [real_x])  # never misses an alias, overlap or writer
    # Loaded and real-mode traces get their fake values propagated again (restore_storage_identity);
    # symbolic sizes admit other sizes than the example's, at which the op may return a view.
    trusted = source in ("make_fx-fake", "export", "export-loaded", "make_fx-real")
    if copies and trusted:
        assert not analysis.may_alias(op, placeholder), "a copy is fresh memory where the metadata is trustworthy"
        assert aliasing.UNKNOWN_STORAGE not in analysis.storage_of(op) and analysis.region_of(op) is not None
    else:
        assert analysis.may_alias(op, placeholder)  # a real alias, or metadata that cannot tell
    assert not (copies and trusted) or not any(placeholder.name in pair and op.name in pair for pair in exactness.false_alias)


def _real_copy(op: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> bool:
    return op(x).untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("name", ["contiguous", "reshape", "to_same_dtype", "to_other_dtype"])
def test_clone_of_a_fresh_copy_goes_in_export(name: str, layout: str) -> None:
    fn = _view_or_copy_program(_VIEW_OR_COPY_OPS[name])
    x = _view_or_copy_input(layout)
    ep = _export(fn, x)
    copies = _real_copy(_VIEW_OR_COPY_OPS[name], x.clone().as_strided(x.shape, x.stride()))
    original = copy_program(ep)
    report = rewrite.eliminate_clones(ep)
    # A copy is the program's own memory: its clone goes. An alias of the caller's input stays
    # (the clone is written).
    assert report.removed == (("clone",) if copies else ())
    check_equivalent(original, ep, [torch.empty_strided(x.shape, x.stride()).copy_(x)])
    assert not rewrite.eliminate_clones(ep).removed


def test_view_or_copy_decided_on_the_current_argument_after_a_rewrite() -> None:
    # c = clone(o) is contiguous, so reshape(c) returned a view of c. Replace c by o by hand, as
    # a rewrite does: the reshape node's metadata still names c's fake storage, not o's, which
    # looks like a copy of o. Run again on o's fake tensor, the op returns a view of o: an alias.
    def fn(x: torch.Tensor) -> torch.Tensor:
        o = x * 2
        n = o.clone().reshape(-1)
        n.add_(1)
        return x.t().reshape(-1) + n

    gm = make_fx(fn, tracing_mode="fake", pre_dispatch=True)(torch.randn(3, 3))
    clone = by_target(gm.graph, torch.ops.aten.clone.default)
    reshape = next(iter(clone.users))
    assert reshape.target is torch.ops.aten.reshape.default
    clone.replace_all_uses_with(clone.args[0])  # type: ignore[arg-type]
    gm.graph.erase_node(clone)
    gm.recompile()
    analysis = aliasing.analyze(gm)
    mul = by_target(gm.graph, torch.ops.aten.mul.Tensor)
    assert analysis.may_alias(reshape, mul)
    check_analysis(analysis, gm, [torch.randn(3, 3)])


def test_view_or_copy_downstream_of_a_lying_fake_kernel_keeps_the_alias() -> None:
    # roll keeps a channels-last input's layout on CPU but returns a contiguous fake tensor
    # (aliasing.core.layout_divergences): contiguous(channels_last) copies the fake tensor and
    # returns the real one itself.
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x.roll(1, 0)
        z = y.contiguous(memory_format=torch.channels_last)
        z.add_(1)
        return y * x.permute(0, 2, 3, 1).permute(0, 3, 1, 2)

    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    gm = make_fx(fn, tracing_mode="fake", pre_dispatch=True)(x)
    analysis = aliasing.analyze(gm)
    roll = by_target(gm.graph, torch.ops.aten.roll.default)
    contiguous = by_target(gm.graph, torch.ops.aten.contiguous.default)
    assert analysis.may_alias(contiguous, roll)
    check_analysis(analysis, gm, [x.clone(memory_format=torch.channels_last)])


def test_loaded_program_gets_the_decisions_it_gets_in_memory(tmp_path: Path) -> None:
    # The library propagates a loaded program's fake values again (restore_storage_identity):
    # the contiguous copy of a transposed value is fresh memory, from the file as in memory.
    fn = _view_or_copy_program(_VIEW_OR_COPY_OPS["contiguous"])
    x = _view_or_copy_input("transposed")
    in_memory = _export(fn, x)
    torch.export.save(in_memory, tmp_path / "m.pt2")
    loaded = torch.export.load(tmp_path / "m.pt2")
    assert rewrite.eliminate_clones(copy_program(in_memory)).removed == ("clone",)  # type: ignore[arg-type]
    original = copy_program(loaded)
    assert rewrite.eliminate_clones(loaded).removed == ("clone",)
    check_equivalent(original, loaded, [torch.empty_strided(x.shape, x.stride()).copy_(x)])


def test_stripped_metadata_warns_once_with_the_count() -> None:
    import warnings

    from rewrite.examples import trace_demo
    from rewrite.explain import explain

    gm = make_fx(lambda x: (x * 2).clone().add_(1), tracing_mode="fake")(torch.randn(3))
    for n in gm.graph.nodes:
        if n.op == "call_function":
            n.meta.pop("val", None)
    with pytest.warns(aliasing.MissingMetadataWarning, match=r"3 of 4 tensor-valued nodes have no meta\['val'\]"):
        aliasing.analyze(gm)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        explain(gm)  # analyses the program and its copy: one warning
        explain(torch.fx.symbolic_trace(lambda x: x.clone() + 1))  # no ATen ops: one warning
        aliasing.analyze(trace_demo())  # custom ops that return nothing have no meta['val']: no warning
    kinds = [type(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert kinds.count(aliasing.MissingMetadataWarning) == 1
    assert kinds.count(aliasing.NoAtenOpsWarning) == 1
