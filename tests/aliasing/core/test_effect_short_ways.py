"""The short ways through ``schema_effect`` (plain, view, mutator, in-place, list-view and traced-view ops) give exactly the general rules' effects.

``aliasing.core.effects`` computes each overload's template once and sends calls
of five kinds of op a short way: *plain* ops (one fresh tensor result, nothing
written, no alias annotation, no hidden effect: ``mm``, ``softmax``, ``clone``),
*view* ops whose one result aliases their first argument only (``view``,
``t``, ``slice``, ``expand``), *mutators*, which return nothing and write
arguments they declare (custom in-place kernels, ``_foreach_add_``), *in-place*
ops (``add_``, ``copy_``) and *list-view* ops, whose ``Tensor[]`` result's
elements are views of their first argument (``split``, ``unbind``; a call
passing another tensor, ``tensor_split``'s indices, takes the general way); and calls of
*view-or-copy* ops (``reshape``, ``contiguous``) that the trace recorded as views
take the view ops' way (a recorded copy takes the general one). Here every
call node of many graphs (drawn fuzzer programs, the benchmark decoders, a
program of views passed by keyword, a program of mutators, one of list views
with and without metadata, and a graph whose
fake tensors show a "fresh" result in its argument's storage) gets its effect
both ways, the general one with the short ways switched off in the template,
and the two must be equal field by field.

The analysis takes the short ways too (``EffectTable.short_effect`` and the
builder's ``short_call``, which records their accesses and binds their result
without the general case's questions): every answer of the analysis, per node
and per storage, must be the same with the short ways switched off.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from torch.fx.experimental.proxy_tensor import make_fx

from aliasing.core import effects
from aliasing.core.facts import FactsCache
from benchmarks.synthetic import build_shared_weight_graph, build_transformer_graph
from rewrite.testing.programs import Program, programs


def _fields(e: effects.Effect) -> tuple[object, ...]:
    return (e.reads, e.writes, dict(e.outputs), e.unknown, e.reaches, e.note, e.copies)


def _calls(graph: torch.fx.Graph) -> Iterator[tuple[torch.fx.Node, torch._ops.OpOverload]]:
    for node in graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            yield node, node.target


def _general(node: torch.fx.Node, op: torch._ops.OpOverload, cache: FactsCache, monkeypatch: pytest.MonkeyPatch) -> effects.Effect:
    """The effect by the general rules: the op's template with every short way off (put where
    ``schema_effect`` looks templates up, by the op's identity)."""
    template = dataclasses.replace(
        effects._schema_effect(op), plain=False, view=False, mutator=False, view_or_copy=False, inplace=False, list_view=False
    )
    with monkeypatch.context() as m:
        m.setitem(effects._TEMPLATES, id(op), (op, template))
        general = effects.schema_effect(node, cache, op)
    assert effects._TEMPLATES[id(op)][1] is not template  # (restored)
    return general


def _compare(graph: torch.fx.Graph, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Compare both ways on every op call of ``graph``; count the calls that took each short way."""
    taken = {"plain": 0, "view": 0, "mutator": 0, "view_or_copy": 0, "inplace": 0, "list_view": 0}
    cache = FactsCache()
    for node, op in _calls(graph):
        template = effects._schema_effect(op)
        short = effects.schema_effect(node, cache, op)
        general = _general(node, op, cache, monkeypatch)
        assert _fields(short) == _fields(general), (node.format_node(), _fields(short), _fields(general))
        taken["plain"] += template.plain
        taken["view"] += template.view
        taken["mutator"] += template.mutator
        taken["view_or_copy"] += template.view_or_copy
        taken["inplace"] += template.inplace
        taken["list_view"] += template.list_view
    return taken


def test_templates_name_the_short_ways() -> None:
    t = effects._schema_effect
    assert t(torch.ops.aten.mm.default).plain and not t(torch.ops.aten.mm.default).view
    assert t(torch.ops.aten.clone.default).plain
    assert t(torch.ops.aten.t.default).view and t(torch.ops.aten.expand.default).view
    assert t(torch.ops.aten._foreach_add_.Scalar).mutator and t(torch.ops.fxa_bench.rms_norm_.default).mutator
    for op in (
        torch.ops.aten.add_.Tensor,  # writes
        torch.ops.aten.split.Tensor,  # a list of views
        torch.ops.aten.native_batch_norm.default,  # hidden writes, three results
        torch.ops.aten.reshape.default,  # a view or a copy
        torch.ops.aten.contiguous.default,
        torch.ops.aten.sym_size.int,  # metadata only
        torch.ops.aten.t_.default,  # changes its argument's layout
    ):
        assert not t(op).plain and not t(op).view and not t(op).mutator, op
    # a view the schema does not declare (the hidden-effects table's): a view op's way
    assert t(torch.ops.aten._unsafe_view.default).view and not t(torch.ops.aten._unsafe_view.default).plain
    for op in (
        torch.ops.aten.reshape.default,
        torch.ops.aten.contiguous.default,
        torch.ops.aten.flatten.using_ints,
        torch.ops.aten.dropout.default,  # the input itself where it drops nothing (hidden-effects table)
        torch.ops.aten.type_as.default,
    ):
        assert t(op).view_or_copy and not t(op).view and not t(op).plain, op
    for op in (
        torch.ops.aten.t.default,
        torch.ops.aten.mm.default,
        torch.ops.aten._unsafe_view.default,
        torch.ops.aten.split.Tensor,
        torch.ops.aten.native_dropout.default,  # two results
    ):
        assert not t(op).view_or_copy, op
    for op in (torch.ops.aten.add_.Tensor, torch.ops.aten.mul_.Tensor, torch.ops.aten.copy_.default, torch.ops.aten.index_put_.default):
        assert t(op).inplace and not (t(op).plain or t(op).view or t(op).mutator or t(op).view_or_copy), op
    for op in (
        torch.ops.aten.add.out,  # out=
        torch.ops.aten.t_.default,  # changes its argument's layout
        torch.ops.aten.native_batch_norm.default,  # hidden writes
        torch.ops.aten._foreach_add_.Scalar,  # returns nothing
        torch.ops.aten.add.Tensor,  # writes nothing
    ):
        assert not t(op).inplace, op
    for op in (
        torch.ops.aten.add_.Tensor,  # returns what it wrote
        torch.ops.aten.copy_.default,  # overwrites its destination without reading it
        torch.ops.aten.add.out,  # out=: may resize
        torch.ops.aten._foreach_add.Scalar,  # writes nothing
    ):
        assert not t(op).mutator, op
    for op in (
        torch.ops.aten.split.Tensor,
        torch.ops.aten.split_with_sizes.default,
        torch.ops.aten.unbind.int,
        torch.ops.aten.chunk.default,
        torch.ops.aten.unsafe_split.Tensor,  # no alias annotation, but the storage-sharing audit saw views
    ):
        assert t(op).list_view and not (t(op).plain or t(op).view or t(op).mutator or t(op).inplace), op
    assert t(torch.ops.aten.unsafe_split.Tensor).undeclared and not t(torch.ops.aten.split.Tensor).undeclared
    for op in (
        torch.ops.aten.t.default,  # one result
        torch.ops.aten.native_batch_norm.default,  # three results, hidden writes
        torch.ops.aten._foreach_add.Scalar,  # a list of fresh results
    ):
        assert not t(op).list_view, op


def test_benchmark_decoders(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = {"plain": 0, "view": 0, "mutator": 0, "view_or_copy": 0, "inplace": 0, "list_view": 0}
    for gm in (build_shared_weight_graph(2)[0], build_transformer_graph(2)[0]):
        for k, v in _compare(gm.graph, monkeypatch).items():
            taken[k] += v
    assert taken["plain"] > 0 and taken["view"] > 0 and taken["mutator"] > 0 and taken["list_view"] > 0


def test_views_by_keyword_and_extra_tensor_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.ops.aten.view.default(x, size=[6, 2])
        b = torch.ops.aten.expand.default(self=y[:1], size=[4, 3])
        c = torch.ops.aten.slice.Tensor(x, dim=1, start=1, end=3)
        d = torch.ops.aten.as_strided.default(x, [2, 2], [1, 3], 1)
        e = torch.ops.aten.mm.default(x.t(), y)
        return a, b, c, d, e, x.clone()

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4, 3), torch.randn(4, 3))
    taken = _compare(gm.graph, monkeypatch)
    assert taken["view"] >= 4 and taken["plain"] >= 2


def _list_views(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    a, b, c = x.split(2, dim=-1)
    d, e = torch.ops.aten.split_with_sizes.default(self=y, split_sizes=[1, 3])  # by keyword
    f, g = x.clone().chunk(2)  # (traced as a split)
    rows = y.unbind(0)
    a.add_(1)  # a view of x written: the other views overlap it or not
    return [b * 2, c, d + e.sum(), f, g.relu(), rows[3] * 3, (e * 2).clone()]  # (the last clone: removable)


@pytest.mark.filterwarnings("ignore::aliasing.errors.MissingMetadataWarning")  # (stripped on purpose)
def test_list_views(monkeypatch: pytest.MonkeyPatch) -> None:
    from aliasing import DEFAULT_EFFECTS

    gm = make_fx(_list_views, tracing_mode="fake")(torch.randn(4, 6), torch.randn(4, 4))
    taken = _compare(gm.graph, monkeypatch)
    assert taken["list_view"] == 4, taken
    cache = FactsCache()
    assert all(DEFAULT_EFFECTS.short_effect(n, cache) for n, op in _calls(gm.graph) if effects._schema_effect(op).list_view)
    _analysis_both_ways(gm)
    # Without the trace's lists (metadata stripped from the views and their elements): each
    # element of the result, both ways.
    for n, op in list(_calls(gm.graph)):
        if effects._schema_effect(op).list_view:
            del n.meta["val"]
            for user in n.users:
                user.meta.pop("val", None)
    _compare(gm.graph, monkeypatch)
    _analysis_both_ways(gm)


@pytest.mark.filterwarnings("ignore::aliasing.errors.MissingMetadataWarning")  # (stripped on purpose)
def test_a_list_view_passed_another_tensor_takes_the_general_way(monkeypatch: pytest.MonkeyPatch) -> None:
    # tensor_split's indices as a tensor: its template is a list view, its call is not.
    op = torch.ops.aten.tensor_split.tensor_indices_or_sections
    assert effects._schema_effect(op).list_view
    traced = make_fx(lambda x, i: x * 2, tracing_mode="fake")(torch.randn(4, 6), torch.tensor([1]))
    g = traced.graph
    x, idx = [n for n in g.nodes if n.op == "placeholder"]
    with g.inserting_before(next(iter(g.find_nodes(op="output")))):
        split = g.call_function(op, (x, idx))
        first = g.call_function(operator.getitem, (split, 0))
        first_used = g.call_function(torch.ops.aten.add_.Tensor, (first, 1))
    assert effects.SCHEMA_EFFECTS.short_effect(split, FactsCache()) is None
    assert first_used.args[0] is first
    _compare(g, monkeypatch)
    _analysis_both_ways(traced)


def test_a_fresh_result_in_its_arguments_storage_aliases_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The trace is evidence: where a plain op's fake result lives in an argument's fake storage,
    # the result aliases that argument, by both ways.
    gm = make_fx(lambda x: x.clone() + 1, tracing_mode="fake")(torch.randn(3))
    clone = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default)
    clone.meta["val"] = clone.args[0].meta["val"]  # type: ignore[union-attr]
    _compare(gm.graph, monkeypatch)
    assert effects.schema_effect(clone, FactsCache()).outputs[effects.SINGLE] == (clone.args[0],)


@settings(max_examples=40, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_drawn_programs(program: Program) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _compare(program.graph_module.graph, monkeypatch)


def _mutators(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    a, b = x.clone(), y.clone()
    torch.ops.aten._foreach_add_.Scalar([a, b, a], 1.0)  # a list, with a repeat
    torch.ops.fxa_bench.rms_norm_.default(a, weight=y[0])  # by keyword
    torch.ops.fxa_bench.rotary_.default(a[:, :2], b[:, :2], y[0, :2], y[1, :2])  # views of both
    torch.ops.fxa_bench.rotary_.default(a, a, b[0], b[0])  # one tensor passed twice
    return [a, b]


def test_mutators(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = make_fx(_mutators, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4))
    taken = _compare(gm.graph, monkeypatch)
    assert taken["mutator"] == 4


class _ViewsOrCopies(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x.reshape(12)  # a view
        b = x.t().reshape(12)  # a copy
        c = torch.ops.aten.reshape.default(self=x, shape=[6, 2])  # a view, by keyword
        d = x.t().contiguous()  # a copy
        e = x.contiguous()  # the argument itself (export drops the call)
        f = y[:, 1:].flatten()  # a copy of a view
        g = y.flatten()  # a view
        # the input itself in eager (the hidden-effects table); where export records a copy, the
        # general way, where the analysis reruns the fake kernel and keeps the alias
        h = torch.ops.aten.dropout.default(y, 0.5, False)
        i = torch.ops.aten.type_as.default(x, y)  # the same dtype: the input itself
        return a * 2, b, c, d, e + 1, f, g, e.clone(), h + 1, i * 3, d.clone() - 1  # (the last clone: removable)


def _views_or_copies() -> torch.fx.GraphModule:
    """An export graph (``make_fx`` decomposes ``reshape``, ``contiguous`` and ``flatten``), one
    call's arguments passed by keyword."""
    gm = torch.export.export(_ViewsOrCopies(), (torch.randn(4, 3), torch.randn(4, 3))).graph_module
    by_keyword = [n for n in gm.graph.nodes if n.target is torch.ops.aten.reshape.default][2]
    x, shape = by_keyword.args
    by_keyword.args, by_keyword.kwargs = (), {"self": x, "shape": shape}
    return gm


def test_views_or_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = _views_or_copies()
    taken = _compare(gm.graph, monkeypatch)
    assert taken["view_or_copy"] == 8
    # The analysis's short way answers the calls recorded as views; the recorded copies (whose
    # effects name them in ``copies``) are left to the general path.
    from aliasing import DEFAULT_EFFECTS

    cache = FactsCache()
    calls = [n for n, op in _calls(gm.graph) if effects._schema_effect(op).view_or_copy]
    copies = [n.name for n in calls if effects.schema_effect(n, cache).copies]
    short = [n.name for n in calls if DEFAULT_EFFECTS.short_effect(n, cache) is not None]
    assert len(calls) == 8, calls
    # (torch 2.13's export records the dropout as a copy, 2.14's as its input)
    assert {"reshape_1", "contiguous", "flatten"} <= set(copies) <= {"reshape_1", "contiguous", "flatten", "dropout"}, copies
    assert sorted(short) == sorted(n.name for n in calls if n.name not in copies)
    _analysis_both_ways(gm)
    import aliasing

    assert aliasing.analyze(gm).may_alias("dropout", "y")


def _in_place(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    a, b = x.clone(), y.clone()
    a.add_(b)
    torch.ops.aten.mul_.Tensor(self=a, other=b[0])  # by keyword
    a[0].copy_(b[1])  # a view written, its old value not read
    b.copy_(b)  # the destination passed as the source too: read
    torch.ops.aten.add_.Tensor(a, a, alpha=2)  # one tensor passed twice
    a.index_put_([torch.tensor([0, 2])], b[1], accumulate=True)  # a list of indices
    return [a.relu_(), b, a.clone() * 2]  # (a removable clone: only read)


def test_in_place_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = make_fx(_in_place, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4))
    taken = _compare(gm.graph, monkeypatch)
    assert taken["inplace"] == 7, taken
    _analysis_both_ways(gm)
    # An in-place result whose metadata is in a storage of its own (as after a rewrite, or in a
    # trace that re-wraps results) takes the layout of the tensor it wrote, both ways.
    for n, op in list(_calls(gm.graph)):
        if effects._schema_effect(op).inplace:
            fake = n.meta["val"]
            with fake.fake_mode:
                n.meta["val"] = torch.empty_strided(fake.shape, fake.stride(), dtype=fake.dtype)
    _compare(gm.graph, monkeypatch)
    _analysis_both_ways(gm)


def test_new_short_ways_against_real_runs() -> None:
    # The analysis of the in-place, view-or-copy and list-view programs misses no alias, overlap or writer of
    # a real run, and the clone elimination that queries it removes the clone that may go and keeps
    # outputs, input mutations and aliasing of the original program, on the same real inputs.
    import aliasing
    from aliasing.verification.oracle import check_analysis
    from rewrite import eliminate_clones
    from rewrite.testing import check_equivalent, copy_program

    def inputs(rows: int, cols: int) -> Callable[[], list[torch.Tensor]]:
        return lambda: [torch.randn(rows, cols), torch.randn(rows, cols)]

    programs = [
        (make_fx(_in_place, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4)), inputs(4, 4)),
        (_views_or_copies(), inputs(4, 3)),
        (make_fx(_list_views, tracing_mode="fake")(torch.randn(4, 6), torch.randn(4, 4)), lambda: [torch.randn(4, 6), torch.randn(4, 4)]),
    ]
    for program, make in programs:
        check_analysis(aliasing.analyze(program), program, make())
        rewritten = copy_program(program)
        report = eliminate_clones(rewritten, strict=True)
        assert any(d.action == "remove" for d in report.decisions), report
        check_equivalent(program, rewritten, make)


def _answers(gm: torch.fx.GraphModule) -> list[object]:
    """Every answer of the analysis of ``gm``: per node and per storage."""
    import aliasing

    a = aliasing.analyze(gm)
    rows: list[object] = []
    for n in gm.graph.nodes:
        effect = a.effect_of(n)
        rows.append(
            (
                n.name,
                sorted(a.storage_of(n)),
                [m.name for m in a.writers(n)],
                [m.name for m in a.readers(n)],
                str(a.region_of(n)),
                None if effect is None else _fields(effect),
            )
        )
    for sid in a.storages:
        rows.append((sid, str(a.storage_role(sid)), list(a.storage_accesses(sid))))
    return rows


def _analysis_both_ways(gm: torch.fx.GraphModule) -> None:
    short = _answers(gm)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(effects.EffectTable, "short_effect", lambda self, node, facts: None)
        general = _answers(gm)
    assert short == general


def test_analysis_takes_the_short_ways_exactly() -> None:
    programs_ = [
        build_shared_weight_graph(2)[0],
        build_transformer_graph(2)[0],
        make_fx(_mutators, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4)),
        _views_or_copies(),
        make_fx(_in_place, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4)),
    ]
    for gm in programs_:
        _analysis_both_ways(gm)


def test_model_graphs_take_the_short_ways_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    # Real export graphs: reshape, contiguous and flatten recorded as views and as copies among them.
    from benchmarks.models import MODELS, capture_export

    taken = {"plain": 0, "view": 0, "mutator": 0, "view_or_copy": 0, "inplace": 0, "list_view": 0}
    for name in MODELS:
        gm = capture_export(name)
        for k, v in _compare(gm.graph, monkeypatch).items():
            taken[k] += v
        _analysis_both_ways(gm)
    assert taken["plain"] > 0 and taken["view"] > 0 and taken["view_or_copy"] > 0, taken


@settings(max_examples=40, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_analysis_of_drawn_programs_takes_the_short_ways_exactly(program: Program) -> None:
    _analysis_both_ways(program.graph_module)


def test_a_table_that_answers_effect_itself_answers_every_call() -> None:
    # The analysis's short ways are the default table's: a table whose class answers
    # ``effect`` otherwise is asked about every call, plain ones included.
    import aliasing

    class Opaque(effects.EffectTable):
        def effect(self, node: torch.fx.Node, facts: FactsCache) -> effects.Effect:
            return effects.unknown_effect(node, "every call is opaque here")

    gm = make_fx(lambda x: (x.clone() + 1).t(), tracing_mode="fake")(torch.randn(2, 3))
    table = Opaque(effects.SCHEMA_EFFECTS.rules, effects.SCHEMA_EFFECTS.hop_rules)
    a = aliasing.analyze(gm, effects=table)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert calls and all(a.is_unknown(n) for n in calls)
    assert not any(aliasing.analyze(gm).is_unknown(n) for n in calls)
