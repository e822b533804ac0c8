"""Lowering of functional higher-order ops (rewrite.lowering) and the copy planner's folds.

Fast tests on small ``make_fx`` graphs that call the functional wrappers the way
functionalization emits them. Every rewrite is checked against real execution
with ``check_equivalent`` (outputs, input mutations, new aliasing, raising), then
the decisions and the resulting graph are checked. The copy-back folds (C8) and
self-copies (C9) are decisions of the one copy planner (rewrite.planning.planner).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import pytest
import torch
import torch.fx
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2
from torch.fx.experimental.proxy_tensor import make_fx

from rewrite import Reason, eliminate_clones
from rewrite.lowering import lower_functional_ops
from rewrite.pipeline.driver import lower_and_eliminate
from rewrite.pipeline.reports import PipelineReport
from rewrite.testing import check_equivalent, copy_program

aten = torch.ops.aten
CLONE = aten.clone.default
AF = torch.ops.higher_order.auto_functionalized
AF2 = torch.ops.higher_order.auto_functionalized_v2


# --- custom ops ------------------------------------------------------------------------


@torch.library.custom_op("fxa_lowering_test::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(1)


@torch.library.custom_op("fxa_lowering_test::rot_", mutates_args=("q", "k"))
def rot_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor) -> None:
    q.mul_(cos)
    k.mul_(cos)


@torch.library.custom_op("fxa_lowering_test::addrev_", mutates_args=("y",))
def addrev_(y: torch.Tensor, x: torch.Tensor) -> None:
    """y[i] += x[n-1-i], element by element: wrong if y and x share memory."""
    n = y.shape[0]
    for i in range(n):
        y[i] += x[n - 1 - i]


@torch.library.custom_op("fxa_lowering_test::split2", mutates_args=("x",))
def split2(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x.mul_(2)
    return x + 1, x - 1


@split2.register_fake
def _split2_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op("fxa_lowering_test::bump_all_", mutates_args=("xs",))
def bump_all_(xs: list[torch.Tensor]) -> None:
    for x in xs:
        x.add_(1)


BUMP = torch.ops.fxa_lowering_test.bump_.default
ROT = torch.ops.fxa_lowering_test.rot_.default
ADDREV = torch.ops.fxa_lowering_test.addrev_.default
SPLIT2 = torch.ops.fxa_lowering_test.split2.default
BUMP_ALL = torch.ops.fxa_lowering_test.bump_all_.default


# --- helpers ---------------------------------------------------------------------------

Inputs = Callable[[], Sequence[torch.Tensor]]


def randn(*shapes: tuple[int, ...]) -> Inputs:
    def make() -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        return [torch.randn(*s, generator=g) for s in shapes]

    return make


def run_pipeline(fn: Callable[..., object], inputs: Inputs, *, donated: Sequence[int] = ()) -> tuple[torch.fx.GraphModule, PipelineReport]:
    original = make_fx(fn, tracing_mode="fake")(*inputs())
    rewritten = copy_program(original)
    report = lower_and_eliminate(rewritten.graph, donated_inputs=donated)
    assert report.error is None, report.error
    rewritten.recompile()
    check_equivalent(original, rewritten, inputs, donated_inputs=donated)
    again = lower_and_eliminate(rewritten.graph, donated_inputs=donated)
    assert again.removed == () and again.lowering.lowered == (), f"second run changed the graph: {again}"
    assert str(report)  # the report renders
    return rewritten, report


def clones(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is CLONE]


def targets(gm: torch.fx.GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


# --- lowering --------------------------------------------------------------------------


def test_v1_mutated_intermediate_clone_removed() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        y = a * 2
        _, y2 = auto_functionalized(BUMP, x=y)
        return y2 + 1

    gm, report = run_pipeline(f, randn((4,)))
    assert [low.kind for low in report.lowering.lowered] == ["auto_functionalized"]
    assert len(report.lowering.clones) == 1 and report.removed == report.lowering.clones
    assert clones(gm) == [] and AF not in targets(gm) and BUMP in targets(gm)


def test_lowering_alone_keeps_semantics_and_sets_fake_values() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        y = a * 2
        _, y2 = auto_functionalized(BUMP, x=y)
        return y2 + y

    original = make_fx(f, tracing_mode="fake")(torch.randn(4))
    rewritten = copy_program(original)
    before = {n.name: n.meta.get("val") for n in rewritten.graph.nodes}
    report = lower_functional_ops(rewritten.graph)
    rewritten.recompile()
    check_equivalent(original, rewritten, randn((4,)))
    (clone,) = clones(rewritten)
    assert clone.args[0].name == "mul" and isinstance(clone.meta["val"], torch.Tensor)
    assert report.clones == (clone.name,)
    for n in rewritten.graph.nodes:  # existing nodes keep their metadata objects
        if n.name in before:
            assert n.meta.get("val") is before[n.name]


def test_v2_view_of_input_folds_into_in_place_write() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:  # bump_(x[1]); return x.sum()
        out = auto_functionalized_v2(
            BUMP, _x_base_index=0, _x_size=(3,), _x_stride=(1,), _x_storage_offset=3, _all_bases=[x]
        )
        x.copy_(out[1])
        return x.sum()

    gm, report = run_pipeline(f, randn((2, 3)))
    assert clones(gm) == [] and aten.copy_.default not in targets(gm)
    assert [d.reason for d in report.folds] == [Reason.FOLDED_INTO_COPY_BACK]
    (call,) = [n for n in gm.graph.nodes if n.target is BUMP]
    view = call.args[0]
    assert view.target is aten.as_strided.default and view.args[0].op == "placeholder"
    assert view.args[1:] == ([3], [1], 3)


def test_v2_slice_view_regenerated_on_clone() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 0
        out = auto_functionalized_v2(BUMP, _x_base_index=0, _x_slice_dim=1, _x_slice_start=1, _x_slice_end=3, _all_bases=[y])
        return out[1] * y  # the old value is read: the clone stays

    gm, report = run_pipeline(f, randn((3, 4)))
    (clone,) = clones(gm)
    (call,) = [n for n in gm.graph.nodes if n.target is BUMP]
    assert call.args[0].target is aten.slice.Tensor and call.args[0].args == (clone, 1, 1, 3)
    assert report.kept == (clone.name,)


def test_v2_old_value_of_input_read_after_keeps_clone() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = auto_functionalized_v2(BUMP, _x_base_index=0, _all_bases=[x])
        old = x * 3  # reads the input's old value after the op
        x.copy_(out[1])
        return old, out[1] + 0

    gm, report = run_pipeline(f, randn((4,)))
    assert len(clones(gm)) == 1
    assert report.folds == ()  # nothing folded


def test_v2_two_views_of_one_base_shared_kv_pool() -> None:
    def f(pool: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:  # rot_(pool[0], pool[1], cos)
        out = auto_functionalized_v2(
            ROT, cos=cos,
            _q_base_index=0, _q_size=(3, 4), _q_stride=(4, 1), _q_storage_offset=0,
            _k_base_index=0, _k_size=(3, 4), _k_stride=(4, 1), _k_storage_offset=12,
            _all_bases=[pool],
        )
        pool.copy_(out[1])
        return pool.sum()

    gm, _ = run_pipeline(f, randn((2, 3, 4), (3, 4)))
    assert clones(gm) == [] and aten.copy_.default not in targets(gm)
    (call,) = [n for n in gm.graph.nodes if n.target is ROT]
    assert {a.args[0].op for a in call.args[:2]} == {"placeholder"}


def test_v1_qkv_split_with_scatter_write_back() -> None:
    def f(x: torch.Tensor, w: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
        qkv = x @ w
        q, k, _v = qkv.split([4, 4, 4], dim=-1)
        _, q2, k2 = auto_functionalized(ROT, q=q, k=k, cos=cos)
        t = torch.slice_scatter(qkv, q2, 1, 0, 4)
        t = torch.slice_scatter(t, k2, 1, 4, 8)
        q3, k3, v3 = t.split([4, 4, 4], dim=-1)
        return q3 + k3 + v3

    gm, report = run_pipeline(f, randn((3, 8), (8, 12), (3, 4)))
    kinds = [low.kind for low in report.lowering.lowered]
    assert kinds == ["auto_functionalized", "scatter", "scatter"]
    # the strided q and k are copied with their layout (flat prefix + as_strided)...
    assert len(report.lowering.clones) == 4
    # ...and all copies go: rot_ writes q and k of qkv in place
    assert clones(gm) == [] and aten.slice_scatter.default not in targets(gm)
    assert aten.copy_.default not in targets(gm)


def test_v1_kv_pool_rows_of_input() -> None:
    def f(pool: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
        _, q2, k2 = auto_functionalized(ROT, q=pool[0], k=pool[1], cos=cos)
        t = torch.select_scatter(pool, q2, 0, 0)
        t = torch.select_scatter(t, k2, 0, 1)
        s = t.sum()
        pool.copy_(t)
        return s

    gm, report = run_pipeline(f, randn((2, 3, 4), (3, 4)))
    assert clones(gm) == [] and aten.copy_.default not in targets(gm)
    assert {d.reason for d in report.folds} == {Reason.FOLDED_INTO_COPY_BACK}


def test_v1_two_mutated_args_and_multi_output() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x = a + 1
        out1, out2, x2 = auto_functionalized(SPLIT2, x=x)
        return out1 * out2 + x2

    gm, _ = run_pipeline(f, randn((4,), (4,)))
    assert clones(gm) == []
    (call,) = [n for n in gm.graph.nodes if n.target is SPLIT2]
    assert sorted(u.args[1] for u in call.users) == [0, 1]


def test_v1_tensor_list_argument() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = a + 1
        _, new = auto_functionalized(BUMP_ALL, xs=[c, b])
        b.copy_(new[1])
        return new[0] * 2

    gm, _ = run_pipeline(f, randn((4,), (4,)))
    assert clones(gm) == [] and AF not in targets(gm)
    (call,) = [n for n in gm.graph.nodes if n.target is BUMP_ALL]
    assert [x.name for x in call.args[0]] == ["add", "b_1"]


def test_repeated_mutation_of_one_input() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        o1 = auto_functionalized_v2(BUMP, _x_base_index=0, _all_bases=[x])
        o2 = auto_functionalized_v2(BUMP, _x_base_index=0, _all_bases=[o1[1]])
        x.copy_(o2[1])
        return x * 1

    gm, _ = run_pipeline(f, randn((4,)))
    assert clones(gm) == [] and targets(gm).count(BUMP) == 2


def test_inductor_198031_pattern_keeps_clone() -> None:
    """``y = x.clone(); op(y, x)``: the op reads x while writing y (pytorch/pytorch#198031)."""

    def f(a: torch.Tensor) -> torch.Tensor:
        x = a + 1
        _, y2 = auto_functionalized(ADDREV, y=x, x=x)  # what remains once noop removal dropped the clone
        return y2

    gm, report = run_pipeline(f, lambda: [torch.arange(6.0)])
    (clone,) = clones(gm)
    (call,) = [n for n in gm.graph.nodes if n.target is ADDREV]
    assert call.args[0] is clone and call.args[1].name == "add"
    (d,) = report.eliminations[0].decisions
    assert d.reason.condition == "C4"


def test_donated_input_clone_removed() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        out = auto_functionalized_v2(BUMP, _x_base_index=0, _all_bases=[x])
        return out[1] * 2  # x is not copied back: only donation allows writing it

    _, report = run_pipeline(f, randn((4,)))
    assert report.removed == ()
    gm, report = run_pipeline(f, randn((4,)), donated=(0,))
    assert clones(gm) == []


def test_skips_graph_without_fake_values() -> None:
    gm = make_fx(lambda a: auto_functionalized(BUMP, x=a * 2)[1], tracing_mode="fake")(torch.randn(3))
    for n in gm.graph.nodes:
        n.meta.pop("val", None)  # a test building its own input graph
    report = lower_functional_ops(gm.graph)
    assert report.lowered == () and [s.reason for s in report.skipped] == ["the graph has no fake tensors of a single fake mode"]
    assert AF in targets(gm)


def test_graph_with_a_fake_mode_per_value() -> None:
    """``make_fx`` in real mode gives every value its own fake mode at storage offset 0: the
    analysis fakes them again in one mode, the pipeline removes what it can, and the copy of
    ``x`` stays (``x`` may come at any storage offset, and the folded value's in-place result is
    used: C1, naming ``x``)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        c = y.clone()
        v = c.view(-1)
        d = x.clone()
        d.mul_(2)
        x.copy_(d)
        return v + 1

    inputs = randn((2, 3))
    original = make_fx(f)(*inputs())
    rewritten = copy_program(original)
    report = lower_and_eliminate(rewritten.graph)
    assert report.error is None, report.error
    rewritten.recompile()
    check_equivalent(original, rewritten, inputs)
    assert [n.name for n in clones(rewritten)] == ["clone_1"] and report.dropped_copies == ()


def test_lower_functional_false_leaves_wrappers() -> None:
    gm = make_fx(lambda a: auto_functionalized(BUMP, x=a * 2)[1], tracing_mode="fake")(torch.randn(3))
    report = lower_and_eliminate(gm.graph, lower_functional=False)
    assert report.lowering.lowered == () and AF in targets(gm)


# --- copy-back folds (C8) and self-copies (C9) on plain graphs -------------------------


def _trace(fn: Callable[..., object], *shapes: tuple[int, ...]) -> torch.fx.GraphModule:
    return make_fx(fn, tracing_mode="fake")(*[torch.randn(*s) for s in shapes])


def _decide(fn: Callable[..., object], *shapes: tuple[int, ...], donated: Sequence[int] = ()) -> tuple[str, Reason]:
    """The copy planner's first decision on the program's clone, checked against real execution."""
    gm = _trace(fn, *shapes)
    rewritten = copy_program(gm)
    report = lower_and_eliminate(rewritten.graph, donated_inputs=donated, lower_functional=False)
    assert report.error is None, report.error
    rewritten.recompile()
    check_equivalent(gm, rewritten, randn(*shapes), donated_inputs=donated)
    again = lower_and_eliminate(rewritten.graph, donated_inputs=donated, lower_functional=False)
    assert again.removed == () and again.dropped_copies == (), f"second run changed the graph: {again}"
    d = report.eliminations[0].decision("clone")
    if d.reason is Reason.FOLDED_INTO_COPY_BACK:  # the copy-back is a self-copy afterwards (C9)
        assert report.dropped_copies == d.evidence
    return d.action, d.reason


def test_fold_clone_copied_back_into_input() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.mul_(2)
        x.copy_(c)
        return x.sum()

    assert _decide(f, (4,)) == ("remove", Reason.FOLDED_INTO_COPY_BACK)


def test_keep_when_input_read_between_write_and_copy_back() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.mul_(2)
        s = x.sum()  # the old value
        x.copy_(c)
        return s

    assert _decide(f, (4,)) == ("keep", Reason.CLONE_WRITTEN_ORIGINAL_READ)


def test_keep_when_clone_written_after_copy_back() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.mul_(2)
        x.copy_(c)
        c.add_(1)
        return c.sum()

    assert _decide(f, (4,)) == ("keep", Reason.CLONE_WRITTEN_AFTER_COPY_BACK)


def test_keep_when_clone_written_outside_copied_back_region() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.mul_(2)  # all of c ...
        x[0].copy_(c[0])  # ... but only row 0 goes back
        return x.sum()

    assert _decide(f, (2, 3)) == ("keep", Reason.CLONE_WRITTEN_OUTSIDE_COPY_BACK)


def test_fold_when_clone_written_only_in_copied_back_region() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c[0].mul_(2)
        x[0].copy_(c[0])
        return x.sum() + c[1].sum()  # row 1 of c is read after the copy-back: x[1] was not written

    assert _decide(f, (2, 3)) == ("remove", Reason.FOLDED_INTO_COPY_BACK)


def test_keep_when_clone_returned() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.mul_(2)
        x.copy_(c)
        return c

    assert _decide(f, (4,)) == ("keep", Reason.OUTPUT_ALIASING)


def test_fold_returned_clone_copied_back_into_intermediate() -> None:
    """C6 (not "never returned"): the output may take over an intermediate's memory."""

    def f(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = a + 1
        c = y.clone()
        c.mul_(2)
        y.copy_(c)
        return c, y.sum()

    assert _decide(f, (4,)) == ("remove", Reason.FOLDED_INTO_COPY_BACK)


def test_remove_clone_read_before_and_after_a_write_of_another_row() -> None:
    """C2 by regions and order: the row of the original that is written is read from the clone only before."""

    def f(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = a + 1
        c = x.clone()
        s0 = c[0].sum()
        x[0].add_(1)
        s1 = c[1].sum()
        return s0 + s1, x

    assert _decide(f, (2, 3)) == ("remove", Reason.REMOVABLE_BY_REGIONS)


def test_keep_when_copy_back_covers_another_region() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.mul_(2)
        x[0].copy_(c[1])
        return x.sum()

    assert _decide(f, (2, 3)) == ("keep", Reason.COPY_BACK_REGION_DIFFERS)


def test_keep_when_original_written_before_copy_back() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        x.add_(1)
        c.mul_(2)  # reads c after x was written: C2 by regions
        x.copy_(c)
        return x.sum()

    assert _decide(f, (4,)) == ("keep", Reason.ORIGINAL_WRITTEN)


def test_keep_when_original_written_after_copy_back_and_clone_read_later() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.mul_(2)
        x.copy_(c)
        x.add_(1)
        return c.sum()

    assert _decide(f, (4,)) == ("keep", Reason.ORIGINAL_WRITTEN)


def test_keep_when_one_node_writes_original_and_reads_clone_after_copy_back() -> None:
    """After the copy-back the clone and the original hold equal values, but an op that
    reads one while writing the other must still see the clone's (pytorch/pytorch#198031)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.mul_(2)
        x.copy_(c)
        addrev_(x, c)
        return x.sum()

    assert _decide(f, (6,)) == ("keep", Reason.SAME_NODE_WRITES_ORIGINAL_READS_CLONE)


def test_keep_written_clone_of_input_without_copy_back() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.mul_(2)
        return c.sum()

    assert _decide(f, (4,)) == ("keep", Reason.WRITES_CALLER_MEMORY)


def test_remove_clone_written_where_original_is_never_read_again() -> None:
    """Region precision: the clone is written in row 0; only row 1 of the original is read later."""

    def f(a: torch.Tensor) -> torch.Tensor:
        x = a + 1
        c = x.clone()
        c[0].mul_(2)
        return c.sum() + x[1].sum()

    assert _decide(f, (2, 3)) == ("remove", Reason.REMOVABLE_BY_REGIONS)


def test_remove_clone_read_where_original_is_not_written() -> None:
    """Region precision for C2: the original is written in row 0; only row 1 of the clone is read."""

    def f(a: torch.Tensor) -> torch.Tensor:
        x = a + 1
        c = x.clone()
        x[0].mul_(2)
        return c[1].sum() + x.sum()

    assert _decide(f, (2, 3)) == ("remove", Reason.REMOVABLE_BY_REGIONS)


def test_keep_clone_written_where_original_is_read() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        x = a + 1
        c = x.clone()
        c[0].mul_(2)
        return c.sum() + x[0].sum()

    assert _decide(f, (2, 3)) == ("keep", Reason.CLONE_WRITTEN_ORIGINAL_READ)


def test_self_copies_same_region_only() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        x[0].copy_(x[0])  # same region: no-op
        x[1].copy_(x[0])  # another region: a real copy
        return x.sum()

    gm = _trace(f, (2, 3))
    rewritten = copy_program(gm)
    report = eliminate_clones(rewritten.graph)
    rewritten.recompile()
    assert [(d.node, d.action, d.reason) for d in report.decisions] == [
        ("copy_", "remove", Reason.SELF_COPY),
        ("copy__1", "keep", Reason.NOT_A_SELF_COPY),
    ]
    assert sum(1 for n in rewritten.graph.nodes if n.target is aten.copy_.default) == 1
    check_equivalent(gm, rewritten, randn((2, 3)))


def test_getitem_users_rewired() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        y = a * 2
        res = auto_functionalized(SPLIT2, x=y)
        return res[0] + res[1] + res[2]

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4))
    lower_functional_ops(gm.graph)
    assert not any(n.target is operator.getitem and n.args[0].target is AF for n in gm.graph.nodes if n.op == "call_function")
    gm.graph.lint()


@pytest.mark.parametrize("dense", [True, False])
def test_clone_keeps_layout(dense: bool) -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        x = a + 1
        v = x if dense else x[:, 1:3]
        _, v2 = auto_functionalized(BUMP, x=v)
        return v2.sum() + x.sum()

    gm = make_fx(f, tracing_mode="fake")(torch.randn(3, 4))
    report = lower_functional_ops(gm.graph)
    (call,) = [n for n in gm.graph.nodes if n.target is BUMP]
    arg = call.args[0].meta["val"]  # the copy the op writes has the argument's exact layout
    assert arg.stride() == (4, 1) and arg.storage_offset() == (0 if dense else 1)
    assert tuple(arg.shape) == ((3, 4) if dense else (3, 2))
    assert len(report.clones) == 1
    check_equivalent(make_fx(f, tracing_mode="fake")(torch.randn(3, 4)), gm, randn((3, 4)))


_LIB = torch.library.Library("fxa_lowering_test", "FRAGMENT")
_LIB.define("twice.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", tags=(torch.Tag.out,))


@torch.library.impl(_LIB, "twice.out", "CompositeExplicitAutograd")
def _twice_out(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return torch.mul(x, 2, out=out)


@torch.library.register_fake("fxa_lowering_test::twice.out")
def _twice_out_fake(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return out


def test_v2_out_operator_allocates_instead_of_copying() -> None:
    op = torch.ops.fxa_lowering_test.twice.out

    def f(x: torch.Tensor) -> torch.Tensor:
        y = auto_functionalized_v2(
            op, x=x, _out_size=(4,), _out_stride=(1,), _out_dtype=torch.float32, _out_device=torch.device("cpu"), _all_bases=[]
        )
        return y + 1

    gm, report = run_pipeline(f, randn((4,)))
    assert report.lowering.clones == () and [low.kind for low in report.lowering.lowered] == ["auto_functionalized_v2"]
    assert AF2 not in targets(gm) and op in targets(gm) and aten.empty_strided.default in targets(gm)


# --- dtype views: the copies keep them (view.dtype, view_as_real) -----------------------


@torch.library.custom_op("fxa_lowering_test::bump8_", mutates_args=("x",))
def bump8_(x: torch.Tensor) -> None:
    """Adds one in the argument's own dtype (through float32: float8 has no ``add``)."""
    x.copy_((x.float() + 1).to(x.dtype))


BUMP8 = torch.ops.fxa_lowering_test.bump8_.default


def _uint8_pool() -> list[torch.Tensor]:
    return [torch.arange(24, dtype=torch.uint8).view(3, 8)]


def _written(gm: torch.fx.GraphModule, op: object = BUMP) -> list[torch.fx.Node]:
    return [n.args[0] for n in gm.graph.nodes if n.target is op]


def _no_bitcast_of_a_copy(arg: torch.fx.Node) -> None:
    """The op writes its copy through views that keep the dtype: Inductor computes a ``view.dtype`` of a
    buffer it computes as a new buffer, and the op would write that buffer instead of the copy."""
    node = arg
    while node.target is not CLONE:
        assert node.target is not aten.view.dtype, f"{arg.name} is a dtype view of a copy"
        node = node.args[0]
    assert node.meta["val"].dtype == arg.meta["val"].dtype


def test_v1_int32_view_of_a_row_is_written_in_place() -> None:
    """``bump_(x[1].view(torch.int32)); return x * 2`` under version 1: the op gets int32 values (it got the
    float32 flat copy of the storage prefix) and its copy folds into the input's write-back."""

    def f(x: torch.Tensor) -> torch.Tensor:
        _, new = auto_functionalized(BUMP, x=x[1].view(torch.int32))
        y = torch.select_scatter(x, new.view(torch.float32), 0, 1)
        x.copy_(y)
        return y * 2

    gm, report = run_pipeline(f, randn((3, 4)))
    (arg,) = _written(gm)
    assert arg.meta["val"].dtype == torch.int32 and arg.meta["val"].storage_offset() == 4
    assert clones(gm) == [] and aten.copy_.default not in targets(gm), str(report)


def test_v2_int32_view_of_a_row_is_written_in_place() -> None:
    """The same under version 2, whose base is the dtype view itself."""

    def f(x: torch.Tensor) -> torch.Tensor:
        out = auto_functionalized_v2(BUMP, _x_base_index=0, _all_bases=[x[1].view(torch.int32)])
        y = torch.select_scatter(x, out[1].view(torch.float32), 0, 1)
        x.copy_(y)
        return y * 2

    gm, report = run_pipeline(f, randn((3, 4)))
    assert [a.meta["val"].dtype for a in _written(gm)] == [torch.int32]
    assert clones(gm) == [] and aten.copy_.default not in targets(gm), str(report)


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
def test_fp8_view_of_a_uint8_pool_row(v2: bool) -> None:
    """A float8 view of a row of a uint8 pool (a KV cache): the op gets float8, not uint8."""

    def f(pool: torch.Tensor) -> torch.Tensor:
        row = pool[2].view(torch.float8_e4m3fn)
        if v2:
            new = auto_functionalized_v2(BUMP8, _x_base_index=0, _all_bases=[row])[1]
        else:
            new = auto_functionalized(BUMP8, x=row)[1]
        y = torch.select_scatter(pool, new.view(torch.uint8), 0, 2)
        pool.copy_(y)
        return y + 1

    gm, report = run_pipeline(f, _uint8_pool)
    assert [a.meta["val"].dtype for a in _written(gm, BUMP8)] == [torch.float8_e4m3fn]
    assert clones(gm) == [], str(report)


def test_v2_dtype_view_then_row_regenerated_in_its_dtype() -> None:
    """``bump_(x.view(torch.int32)[1])`` under version 2: an ``as_strided`` of the int32 base, on its copy."""

    def f(x: torch.Tensor) -> torch.Tensor:
        out = auto_functionalized_v2(
            BUMP, _x_base_index=0, _x_size=(4,), _x_stride=(1,), _x_storage_offset=4, _all_bases=[x.view(torch.int32)]
        )
        new = out[1].view(torch.float32)
        x.copy_(new)
        return new * 2

    gm, report = run_pipeline(f, randn((3, 4)))
    assert [a.meta["val"].dtype for a in _written(gm)] == [torch.int32]
    assert clones(gm) == [], str(report)


def test_v1_two_ops_with_a_reader_between() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        _, a = auto_functionalized(BUMP, x=x.view(torch.int32))
        read = a.sum()
        _, b = auto_functionalized(BUMP, x=a)
        x.copy_(b.view(torch.float32))
        return read

    gm, report = run_pipeline(f, randn((8,)))
    assert clones(gm) == [] and len(report.removed) == 2, str(report)


@pytest.mark.parametrize("row", [False, True], ids=["whole", "row"])
def test_old_value_read_keeps_a_copy_in_the_views_dtype(row: bool) -> None:
    """The input's old value is read after the op: the copy stays, for C3 (not for an op the analysis
    cannot see into: the functional graph's own dtype views of the new value kept stale fake values),
    and the op writes it without a dtype view in between."""

    def f(x: torch.Tensor) -> torch.Tensor:
        view = x[1].view(torch.int32) if row else x.view(torch.int32)
        _, new = auto_functionalized(BUMP, x=view)
        old = x + 1
        x.copy_(torch.select_scatter(x, new.view(torch.float32), 0, 1) if row else new.view(torch.float32))
        return old

    gm, report = run_pipeline(f, randn((3, 4)))
    (arg,) = _written(gm)
    _no_bitcast_of_a_copy(arg)
    kept = [d for rep in report.eliminations for d in rep.decisions if d.action == "keep" and d.node in report.lowering.clones]
    assert kept and {d.reason.condition for d in kept} == {"C3"}, str(report)


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "row"])
def test_v1_view_as_real_of_a_complex_view(whole: bool) -> None:
    """``bump_(torch.view_as_real(x.view(torch.complex64))[1])`` of a float input: the complex views are
    applied to a copy of the input (a fold needs the copy-back's shape) and the copy folds."""

    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.view(torch.complex64)
        arg = torch.view_as_real(c) if whole else torch.view_as_real(c)[1]
        _, new = auto_functionalized(BUMP, x=arg)
        back = new if whole else torch.select_scatter(torch.view_as_real(c), new, 0, 1)
        y = torch.view_as_complex(back).view(torch.float32)
        x.copy_(y)
        return y * 2

    gm, report = run_pipeline(f, randn((3, 8)))
    (arg,) = _written(gm)
    assert arg.meta["val"].dtype == torch.float32 and arg.meta["val"].dim() == (3 if whole else 2)
    assert clones(gm) == [], str(report)


def test_v2_view_recorded_in_another_dtype_is_not_lowered() -> None:
    """Version 2 records ``view_as_real(base)[1]`` of a complex base as an ``as_strided`` in float elements,
    without the dtype: regenerated on the base it reaches past the storage (stock Inductor fails to compile
    it). The lowering leaves the wrapper rather than call the op on another view."""

    def f(x: torch.Tensor) -> torch.Tensor:
        out = auto_functionalized_v2(
            BUMP, _x_base_index=0, _x_size=(4, 2), _x_stride=(2, 1), _x_storage_offset=8, _all_bases=[x.view(torch.complex64)]
        )
        y = out[1].view(torch.float32)
        x.copy_(y)
        return y * 2

    gm = make_fx(f, tracing_mode="fake")(torch.randn(3, 8))
    report = lower_functional_ops(gm.graph)
    assert report.lowered == () and [s.kind for s in report.skipped] == ["auto_functionalized_v2"]
    assert "past" in report.skipped[0].reason and AF2 in targets(gm)


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
def test_symbolic_int32_view_of_a_row(v2: bool) -> None:
    """Symbolic sizes and offset: the int32 input is copied whole and the row taken again on the copy."""

    def f(x: torch.Tensor) -> torch.Tensor:
        row = x[1].view(torch.int32)
        new = (
            auto_functionalized_v2(BUMP, _x_base_index=0, _all_bases=[row])[1]
            if v2
            else auto_functionalized(BUMP, x=row)[1]
        )
        y = torch.select_scatter(x, new.view(torch.float32), 0, 1)
        old = x * 3
        x.copy_(y)
        return old  # the old value is read after the op: the copy stays

    inputs = randn((3, 4))
    original = make_fx(f, tracing_mode="symbolic")(*inputs())
    rewritten = copy_program(original)
    report = lower_and_eliminate(rewritten.graph)
    assert report.error is None and report.lowering.skipped == (), str(report)
    rewritten.recompile()
    check_equivalent(original, rewritten, inputs)
    check_equivalent(original, rewritten, randn((5, 4)))
    (arg,) = _written(rewritten)
    _no_bitcast_of_a_copy(arg)


# --- property: random clone / write / read / copy-back sequences ----------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_ROW = st.integers(min_value=0, max_value=2)
_STEP = st.one_of(
    st.tuples(st.just("write_clone"), _ROW),
    st.tuples(st.just("write_clone_all"), st.just(0)),
    st.tuples(st.just("read_clone"), _ROW),
    st.tuples(st.just("write_original"), _ROW),
    st.tuples(st.just("read_original"), _ROW),
    st.tuples(st.just("copy_back_row"), st.tuples(_ROW, _ROW)),
    st.tuples(st.just("copy_back_all"), st.just(0)),
    st.tuples(st.just("op_reads_original"), _ROW),
    st.tuples(st.just("op_reads_clone"), _ROW),
)


def _program(steps: list[tuple[str, object]], intermediate: bool, view: bool, returns_clone: bool) -> Callable[..., object]:
    def f(x: torch.Tensor) -> object:
        base = x + 0 if intermediate else x
        o = base[:, 1:] if view else base
        c = o.clone()
        acc = torch.zeros(())
        for kind, arg in steps:
            if kind == "write_clone":
                c[arg].mul_(2)  # type: ignore[index]
            elif kind == "write_clone_all":
                c.add_(1)
            elif kind == "read_clone":
                acc = acc + c[arg].sum()  # type: ignore[index]
            elif kind == "write_original":
                o[arg].add_(3)  # type: ignore[index]
            elif kind == "read_original":
                acc = acc + o[arg].sum()  # type: ignore[index]
            elif kind == "copy_back_row":
                i, j = arg  # type: ignore[misc]
                o[i].copy_(c[j])
            elif kind == "copy_back_all":
                o.copy_(c)
            elif kind == "op_reads_original":  # one node writes the clone and reads the original
                torch.ops.fxa_lowering_test.addrev_.default(c[arg], o[(arg + 1) % 3])  # type: ignore[index,operator]
            else:  # one node writes the original and reads the clone
                torch.ops.fxa_lowering_test.addrev_.default(o[arg], c[arg])  # type: ignore[index,operator]
        outs = [acc, base * 1]
        if returns_clone:
            outs.append(c)
        return tuple(outs)

    return f


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(_STEP, min_size=1, max_size=6),
    intermediate=st.booleans(),
    view=st.booleans(),
    returns_clone=st.booleans(),
    donated=st.booleans(),
)
def test_folds_are_sound_on_random_sequences(
    steps: list[tuple[str, object]], intermediate: bool, view: bool, returns_clone: bool, donated: bool
) -> None:
    """The copy planner's decisions (C1-C9: folds and self-copies included) against real execution."""
    fn = _program(steps, intermediate, view, returns_clone)
    inputs = randn((3, 4))
    donation = (0,) if donated else ()
    original = make_fx(fn, tracing_mode="fake")(*inputs())
    for lower in (False, True):
        rewritten = copy_program(original)
        report = lower_and_eliminate(rewritten.graph, donated_inputs=donation, lower_functional=lower)
        assert report.error is None, report.error
        rewritten.recompile()
        rewritten.graph.lint()
        check_equivalent(original, rewritten, inputs, donated_inputs=donation)
