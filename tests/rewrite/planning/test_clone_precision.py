"""Golden decisions of the precision refinements of the planner (and of torch-level clones).

One section per capability of :mod:`rewrite.planning.planner`: C1 refined (layout
observability), liveness (dead readers and dead writers), element-exact
same-node effects, kills and value-preserving copies, dead clones erased
with their writers (C10), ``wrap`` judged through its subgraph, and
``symbolic_trace`` clones. Each case checks the decisions, runs original and
rewrite on the same real inputs with ``check_equivalent``, and checks that a
second run removes nothing. Cases that must stay kept sit next to the ones
that go.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from rewrite import Reason, eliminate_clones
from rewrite.testing import check_equivalent, copy_program

Fn = Callable[..., object]
Inputs = Callable[[], Sequence[torch.Tensor]]
Decisions = dict[str, tuple[str, Reason]]


def _randn(*shapes: tuple[int, ...]) -> Inputs:
    def make() -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        return [torch.randn(*s, generator=g) for s in shapes]

    return make


def _check(
    original: torch.fx.GraphModule, inputs: Inputs, *, donated: Sequence[int] = (), erase_dead: bool = True
) -> tuple[Decisions, torch.fx.GraphModule]:
    rewritten = copy_program(original)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = eliminate_clones(rewritten, donated_inputs=donated, strict=True, erase_dead=erase_dead)
    check_equivalent(original, rewritten, inputs, donated_inputs=donated)
    again = eliminate_clones(rewritten, donated_inputs=donated, strict=True, erase_dead=erase_dead)
    assert again.removed == again.dropped_copies == (), f"second run removed {again.removed}\n{again}"
    assert str(report)
    return {d.node: (d.action, d.reason) for d in report.decisions if not d.reason.is_copy_reason}, rewritten


def decide(fn: Fn, inputs: Inputs, *, donated: Sequence[int] = (), erase_dead: bool = True) -> Decisions:
    """Trace ``fn``, rewrite a copy, check it against real execution and idempotence; the decisions."""
    return _check(make_fx(fn, tracing_mode="fake")(*inputs()), inputs, donated=donated, erase_dead=erase_dead)[0]


DATAFLOW = ("remove", Reason.REMOVABLE_BY_DATAFLOW)
UNOBSERVED = ("remove", Reason.LAYOUT_UNOBSERVED)
ERASED = ("remove", Reason.DEAD_CLONE_ERASED)


# --- C1 refined: a change of layout nothing observes ---------------------------------


def _transposed() -> list[torch.Tensor]:
    return [torch.randn(8, 4, generator=torch.Generator().manual_seed(0)).t()]


def _strided() -> list[torch.Tensor]:
    return [torch.randn(4, 16, generator=torch.Generator().manual_seed(0))[:, ::2]]


def test_unused_layout_changing_clone_goes() -> None:
    """C1 used to be checked before looking at uses: an unused ``contiguous()`` was kept."""

    def f(x: torch.Tensor) -> torch.Tensor:
        x.contiguous()  # unused
        return x * 2

    assert decide(f, _transposed) == {"clone": UNOBSERVED}


def test_elementwise_consumer_of_contiguous_clone_goes() -> None:
    """``x[:, ::2] * 2`` is laid out densely, as ``x.contiguous() * 2`` is: nothing observes the copy."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x.contiguous()) + 1

    assert decide(f, _strided) == {"clone": UNOBSERVED}


def test_copy_of_layout_changing_clone_goes() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 0  # its own layout, whatever the copy's source
        y.copy_(x.contiguous())
        return y

    assert decide(f, _transposed) == {"clone": UNOBSERVED}


@pytest.mark.parametrize(
    ("consume", "observer"),
    [
        (lambda c: c + 1, "add"),  # the sum, returned, would be transposed: its recorded strides change
        (lambda c: c.sum(0), "sum_1"),  # summation order follows strides: not provable
        (lambda c: c.view(-1) * 2, "view"),  # view of a transposed tensor raises
    ],
    ids=["output-strides", "reduction", "view"],
)
def test_observed_layout_change_is_kept(consume: Callable[[torch.Tensor], torch.Tensor], observer: str) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return consume(x.contiguous())

    gm = make_fx(f, tracing_mode="fake")(*_transposed())
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = eliminate_clones(rewritten, strict=True)
    d = report.decision("clone")
    assert (d.action, d.reason) == ("keep", Reason.LAYOUT)
    assert d.evidence[-1].startswith(observer), d.evidence
    check_equivalent(gm, rewritten, _transposed)


def test_chained_layout_clones_judge_the_removed_copy_too() -> None:
    """Found by the soak: once ``clone_2`` (a copy of the channels-last clone) goes, its users
    read the channels-last clone; removing that one would change the output's strides."""

    def f(x: torch.Tensor) -> torch.Tensor:
        v1 = x.clone(memory_format=torch.channels_last)
        v2 = v1.clone()
        return v2 + 1.0

    decisions = decide(f, _randn((1, 2, 1, 2)))
    assert decisions == {"clone": ("keep", Reason.LAYOUT), "clone_1": ("remove", Reason.REMOVABLE)}


@pytest.mark.parametrize(
    ("consume", "observer"),
    [
        (lambda c: c.mul_(3).add_(1) + 1, "mul_"),  # the in-place result is used
        (lambda c: torch.sin(c.t()), "t"),  # the view is used
    ],
    ids=["in-place-result", "view"],
)
def test_used_alias_of_a_layout_changing_clone_is_kept(
    consume: Callable[[torch.Tensor], torch.Tensor], observer: str
) -> None:
    """Either would carry the original's layout while its metadata records the clone's; the pass
    does not rewrite metadata that later passes read, so it keeps the clone (found by the soak: a
    second run judged such a view by its stale metadata)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        t = x * 2
        return consume(t[:, ::2].contiguous())

    gm = make_fx(f, tracing_mode="fake")(*_randn((4, 16))())
    report = eliminate_clones(copy_program(gm), strict=True)  # type: ignore[arg-type]
    d = report.decision("clone")
    assert (d.action, d.reason) == ("keep", Reason.LAYOUT) and d.evidence[-1] == observer, d


def test_dead_view_the_new_layout_allows_goes() -> None:
    """An unused ``view(-1)`` of the offset original is allowed (only the offset changes)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        x[1:].clone().view(-1)
        return x * 2

    assert decide(f, _randn((3, 4))) == {"clone": UNOBSERVED}


def test_dead_view_the_new_layout_forbids_is_kept() -> None:
    """A dead ``view`` of the clone applied to the original's strides would raise (clause 4); only
    C10, erasing both, removes the clone."""

    def f(x: torch.Tensor) -> torch.Tensor:
        x.contiguous().view(-1)
        return x * 2

    gm = make_fx(f, tracing_mode="fake")(*_transposed())
    assert decide(f, _transposed) == {"clone": ERASED}
    report = eliminate_clones(copy_program(gm), strict=True, erase_dead=False)  # type: ignore[arg-type]
    d = report.decision("clone")
    assert (d.action, d.reason) == ("keep", Reason.LAYOUT) and d.evidence[-1] == "view", d


def test_clones_of_an_in_place_result_of_an_offset_clone_are_decided_once() -> None:
    """Found by the soak: ``clone`` (an offset change) goes; ``v0.zero_()``'s result is then the
    donated input itself, and a second run must not find more to remove."""

    def f(x2: torch.Tensor) -> tuple[torch.Tensor]:
        v0 = x2.clone()
        x2.add_(1.0)
        v0.zero_()
        v1 = v0.clone()
        v4 = v0.clone()
        v5 = v4[:, 0]
        v1.clone()
        return (v5.clone(),)

    inputs = lambda: [torch.randn(3, 2, generator=torch.Generator().manual_seed(0))[1:]]  # noqa: E731
    decide(f, inputs, donated=(0,))  # checks equivalence and that a second run removes nothing


def test_view_of_a_clone_of_an_offset_value_is_decided_once() -> None:
    """Found by the soak: with used views followed, ``v2 = v1.clone()`` went in a second run only."""

    def f(x1: torch.Tensor) -> tuple[torch.Tensor]:
        v0 = x1.view((1, 2))
        v1 = v0.clone()
        v0.add_(1.0)
        v1.copy_(v0)
        v2 = v1.clone()
        v3 = v2.view(-1)
        v3.clone()
        return (v2 + 1.0,)

    decide(f, lambda: [torch.randn(2, 1, 2, generator=torch.Generator().manual_seed(0))[1:]])


def test_rearranging_consumer_of_an_offset_clone_goes() -> None:
    """``repeat``, ``cat`` and ``flip`` move elements without arithmetic: their values and recorded
    layouts are those of the offset original too."""

    def f(x: torch.Tensor) -> torch.Tensor:
        c = x[1:].clone()
        return torch.cat([c.repeat(2, 1), c.flip(0)])

    assert decide(f, _randn((3, 4))) == {"clone": UNOBSERVED}


# --- liveness: dead readers and dead writers -----------------------------------------


def test_dead_read_does_not_keep_the_clone() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        c = y.clone()
        y.add_(1)
        c.sum()  # unused
        return y

    assert decide(f, _randn((4, 8))) == {"clone": DATAFLOW}


def test_dead_read_that_may_raise_on_its_values_still_counts() -> None:
    """``x[c]`` with the clone as indices could go out of bounds once it reads the written original."""

    def f(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        c = i.clone()
        i.add_(1)
        x[c]  # unused, but indexing raises on bad indices
        return x * 2

    inputs = lambda: [torch.randn(4), torch.tensor([0, 1, 2])]  # noqa: E731
    assert decide(f, inputs, erase_dead=False) == {"clone": ("keep", Reason.ORIGINAL_WRITTEN)}
    # Erasing the dead indexing with the clone (C10) would erase its bounds check: the clone stays.
    assert decide(f, inputs) == {"clone": ("keep", Reason.DEAD_CLONE_FEEDS_A_CHECK)}


def test_writes_nothing_live_reads_after_the_merge() -> None:
    """Without C10: ``out=c`` reads ``y`` after the clone was written, but neither is read afterwards."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        c = y.clone()
        torch.mul(c, c, out=c)
        torch.mul(c, y, out=c)
        return x + 1

    assert decide(f, _randn((4, 8)), erase_dead=False) == {"clone": DATAFLOW}


def test_dead_indexing_writer_raises_only_on_its_indices() -> None:
    """A dead ``index_put_`` of the original reads it after the clone was written (C3), but it could
    only raise on its indices, which the removal does not change: a dead writer."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x)
        c = y.clone()
        c.mul_(2)
        out = c.neg()
        y.index_put_((torch.arange(0, 4, 2),), torch.ones(()), accumulate=True)
        return out

    assert decide(f, _randn((5, 3)), erase_dead=False) == {"clone": DATAFLOW}


def test_dead_indexing_writer_whose_indices_the_removal_changes_counts() -> None:
    """The indices are the original's values: after the removal they would be ``j[2:] + 1``, and
    index 2 of a two-element tensor raises."""

    def f(i: torch.Tensor) -> torch.Tensor:
        j = i * 1
        k = j.clone()
        k.add_(1)
        out = k * 2
        j[0:2].index_put_((j[2:4],), torch.zeros((), dtype=torch.long))
        return out

    inputs = lambda: [torch.tensor([0, 0, 0, 1])]  # noqa: E731
    assert decide(f, inputs, erase_dead=False)["clone"][0] == "keep"


# --- element-exact same-node effects -------------------------------------------------


def test_in_place_op_reading_the_original_elementwise_goes() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        c = y.clone()
        c.mul_(y)  # after removal y.mul_(y): each element read before it is written
        return c

    assert decide(f, _randn((4, 8))) == {"clone": DATAFLOW}


def test_elementwise_out_into_the_clone_goes() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        c = y.clone()
        torch.add(y, 1, out=c)
        return c * 2

    assert decide(f, _randn((4, 8))) == {"clone": DATAFLOW}


def test_partial_overlap_in_one_node_is_kept() -> None:
    """After removal ``y[1:].add_(y[:-1])`` would raise: partially overlapping input and output."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        c = y.clone()
        c[1:].add_(y[:-1])
        return c

    assert decide(f, _randn((4, 8))) == {"clone": ("keep", Reason.SAME_NODE_WRITES_CLONE_READS_ORIGINAL)}


def test_copy_back_becomes_a_self_copy_with_eliminate_clones_alone() -> None:
    """A vLLM-style copy-back: after removal the ``copy_`` copies a region onto itself."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        c = y.clone()
        q = c[:, :8]
        q.mul_(3)
        y[:, :8].copy_(q)
        return y + 1

    assert decide(f, _randn((4, 16))) == {"clone": ("remove", Reason.FOLDED_INTO_COPY_BACK)}


# --- kills, value-preserving copies, destinations only written ----------------------


def test_copy_between_clone_and_original_while_equal_is_a_no_op() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.copy_(x)  # x is the caller's; after removal x.copy_(x)
        return c * 2

    assert decide(f, _randn((4, 8))) == {"clone": DATAFLOW}


def test_copy_into_the_clone_after_it_was_written_is_kept() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        c = y.clone()
        c.add_(1)
        c.copy_(y)  # reads y where, after removal, c's write would be
        return c, y

    assert decide(f, _randn((4, 8)))["clone"][0] == "keep"


def test_full_overwrite_of_the_original_ends_its_old_value() -> None:
    def f(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.add_(1)
        r = c * 2
        x.copy_(z)  # every element of the caller's x is overwritten: c's write does not survive
        return r

    assert decide(f, _randn((4, 8), (4, 8))) == {"clone": DATAFLOW}


def test_out_destination_is_written_not_read() -> None:
    def f(x: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        c = y.clone()
        c.add_(1)
        r = c * 2
        torch.mul(z, 2, out=y)  # reads z only, and kills y
        return r, y

    assert decide(f, _randn((4, 8), (4, 8))) == {"clone": DATAFLOW}


def test_partial_overwrite_is_no_kill() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.add_(1)
        r = c * 2
        x[0].zero_()  # row 0 only: the rest of x would keep c's values
        return r

    # C3 (classic: x[0].zero_ counts as a read of x) keeps it, and the refined C5' agrees.
    assert decide(f, _randn((4, 8)), erase_dead=False) == {"clone": ("keep", Reason.CLONE_WRITTEN_ORIGINAL_READ)}


# --- C10: a dead clone goes with its writers -----------------------------------------


def test_clone_only_written_is_erased_with_its_writer() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        c = y.clone()
        c.add_(1)
        return y

    gm = make_fx(f, tracing_mode="fake")(*_randn((4, 8))())
    decisions, rewritten = _check(gm, _randn((4, 8)))
    assert decisions == {"clone": ERASED}
    assert not any(n.target is torch.ops.aten.add_.Tensor for n in rewritten.graph.nodes)
    # Without C10 the clone stays: replacing it would write y, which is returned.
    assert decide(f, _randn((4, 8)), erase_dead=False) == {"clone": ("keep", Reason.CLONE_WRITTEN_ORIGINAL_READ)}


def test_clone_of_input_only_written_is_erased() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.mul_(2)
        return x + 1

    assert decide(f, _randn((4, 8))) == {"clone": ERASED}


def test_dead_group_takes_a_clone_of_the_clone_with_it() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        c = y.clone()
        d = c.clone()
        d.add_(1)
        c.mul_(2)
        return y

    decisions = decide(f, _randn((4, 8)))
    assert decisions == {"clone": ERASED, "clone_1": ("remove", Reason.ERASED_WITH_DEAD_CLONE)}


@torch.library.custom_op("fxa_test_precision::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor) -> None:
    """A custom in-place op: erasing it could drop a side effect the library cannot see."""
    x.mul_(2)


@scale_.register_fake
def _(x: torch.Tensor) -> None:
    return None


def test_clone_written_by_a_custom_op_is_not_erased() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        c = y.clone()
        scale_(c)
        return y

    assert decide(f, _randn((4, 8)))["clone"][0] == "keep"


# --- wrap, judged through its subgraph -----------------------------------------------


def _wrap_program(body: Callable[[torch.Tensor], tuple[torch.Tensor]], *, offset: bool, write: bool) -> torch.fx.GraphModule:
    """``y = x * 2 [1:5]; c = clone(y); [y.add_(1)]; wrap(body, c)`` returning ``y`` and the wrap's result."""
    module = torch.nn.Module()
    module.add_module("body", make_fx(body, tracing_mode="fake")(torch.randn(4, 8)))
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.ops.aten.mul.Tensor, (x, 2))
    if offset:
        y = g.call_function(torch.ops.aten.slice.Tensor, (y, 0, 1, 5))
    c = g.call_function(torch.ops.aten.clone.default, (y,))
    if write:
        g.call_function(torch.ops.aten.add_.Tensor, (y, 1))
    call = g.call_function(torch.ops.higher_order.wrap, (g.get_attr("body"), c))
    result = g.call_function(operator.getitem, (call, 0))
    g.output((y,) if write else (result, y))
    gm = torch.fx.GraphModule(module, g)
    mode = FakeTensorMode()
    FakeTensorProp(gm, mode).propagate(mode.from_tensor(torch.randn(5, 8)))
    return gm


def test_dead_wrap_with_a_body_that_cannot_raise_reads_nothing_that_matters() -> None:
    gm = _wrap_program(lambda a: (a * 2 + 1,), offset=False, write=True)
    assert _check(gm, _randn((5, 8)))[0] == {"clone_default": DATAFLOW}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (lambda a: (torch.sin(a) * 2,), UNOBSERVED),  # elementwise: the layout does not show
        (lambda a: (a.sum(0),), ("keep", Reason.LAYOUT)),  # a reduction inside observes it
    ],
    ids=["pointwise-body", "reduction-body"],
)
def test_layout_change_judged_through_a_read_only_body(
    body: Callable[[torch.Tensor], tuple[torch.Tensor]], expected: tuple[str, Reason]
) -> None:
    gm = _wrap_program(body, offset=True, write=False)  # the clone of a view at offset 8 is at offset 0
    assert _check(gm, _randn((5, 8)))[0] == {"clone_default": expected}


# --- torch-level clones of symbolic_trace graphs ------------------------------------


def test_symbolic_trace_clones_are_candidates() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 2
        a = y.clone()  # call_method: only read
        b = torch.clone(y)  # torch.clone: written, y read afterwards
        b.add_(1)
        c = x.clone()  # becomes Tensor.clone below: written, x is the caller's
        c.mul_(2)
        return a + b, c, y.sum()

    gm = torch.fx.symbolic_trace(f)
    (method,) = [n for n in gm.graph.nodes if n.name == "clone_2"]
    with gm.graph.inserting_before(method):
        call = gm.graph.call_function(torch.Tensor.clone, method.args)
    method.replace_all_uses_with(call)
    gm.graph.erase_node(method)
    gm.recompile()
    mode = FakeTensorMode()
    FakeTensorProp(gm, mode).propagate(mode.from_tensor(torch.randn(4, 8)))
    assert [n.op for n in gm.graph.nodes if n.name.startswith("clone")] == ["call_method", "call_function", "call_function"]
    with pytest.warns(UserWarning, match="no ATen-level ops"):
        decisions, rewritten = _check(gm, _randn((4, 8)))
    assert decisions == {
        "clone": ("remove", Reason.REMOVABLE),
        "clone_1": ("keep", Reason.CLONE_WRITTEN_ORIGINAL_READ),
        "clone_3": ("keep", Reason.WRITES_CALLER_MEMORY),
    }
    assert "clone = " not in rewritten.code


# --- a lowered auto_functionalized (v1) program, with eliminate_clones alone ----------


@torch.library.custom_op("fxa_test_precision::rot_", mutates_args=("q", "k"))
def rot_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor) -> None:
    q.mul_(cos)
    k.mul_(cos)


@rot_.register_fake
def _(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor) -> None:
    return None


def test_lowered_v1_kv_pool_with_eliminate_clones_alone() -> None:
    """The lowering of ``auto_functionalized`` clones q and k of a KV pool (a graph input) and
    writes them back; ``eliminate_clones`` alone, without the pipeline's self-copy removal, removes
    every clone: the first copy-back of the pool is a value-preserving copy (C2-C5 refined), the
    others fold (C8). Without the value-preserving-copy refinement two clones would stay."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized

    from rewrite.lowering.functional import lower_functional_ops

    def f(pool: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
        _, q2, k2 = auto_functionalized(torch.ops.fxa_test_precision.rot_.default, q=pool[0], k=pool[1], cos=cos)
        t = torch.select_scatter(pool, q2, 0, 0)
        t = torch.select_scatter(t, k2, 0, 1)
        s = t.sum()
        pool.copy_(t)
        return s

    inputs = _randn((2, 3, 4), (3, 4))
    gm = make_fx(f, tracing_mode="fake")(*inputs())
    lowered = copy_program(gm)
    assert isinstance(lowered, torch.fx.GraphModule)
    lower_functional_ops(lowered.graph)
    lowered.recompile()
    check_equivalent(gm, lowered, inputs)
    decisions, rewritten = _check(lowered, inputs)
    assert len(decisions) == 4 and all(action == "remove" for action, _ in decisions.values())
    assert Reason.REMOVABLE_BY_DATAFLOW in {reason for _, reason in decisions.values()}
    assert not any(n.target is torch.ops.aten.clone.default for n in rewritten.graph.nodes)
    check_equivalent(gm, rewritten, inputs)


def test_applier_checks_an_erased_group_before_changing_anything() -> None:
    """The applier stays all or nothing with C10: a group still used from outside is refused."""
    from rewrite.editing.apply import apply_decisions
    from rewrite.errors import RewriteError
    from rewrite.planning.decisions import Decision

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        c = y.clone()
        d = y.clone()
        return c.add_(1) + d

    gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    before = str(gm.graph)
    bogus = [
        Decision("clone_1", "remove", Reason.REMOVABLE, (), "mul"),
        Decision("clone", "remove", Reason.DEAD_CLONE_ERASED, ("add_",), "mul", ("add_",)),
    ]
    with pytest.raises(RewriteError, match="still used"):
        apply_decisions(gm.graph, bogus)
    assert str(gm.graph) == before


def test_nodes_left_dead_by_an_erased_group_stop_counting() -> None:
    """Found by the soak: a C10 group erased a train-mode norm, which left ``x0 + 1``'s ``repeat``
    (the norm's input, reading the original after the clone was written) dead. The clone it had
    kept is decided again in the same run (C7), so a second run removes nothing."""

    def f(x0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v1 = x0 + 1.0
        v2 = v1.clone()
        v2.add_(1.0)
        v4 = x0.clone()
        v6 = v4.clone()
        v7 = x0.unsqueeze(1).expand(1, 1, 2)
        torch.nn.functional.instance_norm(v7, v4, v6, v1, None, use_input_stats=True, momentum=0.1)
        return x0, v2

    decisions = decide(f, _randn((1,)))
    assert decisions["clone"] == DATAFLOW and decisions["clone_1"] == ERASED


def test_copy_kept_in_an_earlier_pass_is_decided_again_when_its_classes_change() -> None:
    """Found by the soak: ``clone_3``'s group (C10) unblocked ``clone``'s, which erased the norm
    that kept ``clone_1`` (a layout change read by a view). ``clone_1`` was decided in the first
    pass only; the fixed point (C7) must decide it again, or a second run removes it."""

    def f(x0: torch.Tensor) -> tuple[torch.Tensor]:
        v0 = x0.clone()
        v1 = v0[:, 0, 0, 0]
        v2 = v0[:, 0, 0, 1]
        v3 = x0.reshape((1, 1, 2))
        torch.nn.functional.instance_norm(v3, v1, v2, None, None, use_input_stats=True, momentum=0.1)
        v5 = x0 + 1.0
        v5.clone()
        v7 = v5.clone()
        v7.index_put_((torch.arange(0, 1, 1),), v0)
        return (v5 + 1.0,)

    inputs = lambda: [torch.randn(1, 1, 1, 4, generator=torch.Generator().manual_seed(0))[..., ::2]]  # noqa: E731
    decisions = decide(f, inputs)
    assert all(action == "remove" for action, _ in decisions.values()), decisions


def test_same_memory_with_other_strides_of_size_one_dimensions_is_a_partial_overlap() -> None:
    """Found by the soak: after removal ``x0.add_(x0[0:1:2])`` reads and writes one element through
    strides (1,) and (2,); PyTorch calls that a partial overlap and raises. Element-exact means the
    same strides, those of size-one dimensions included."""

    def f(x0: torch.Tensor) -> tuple[torch.Tensor]:
        v1 = x0[0:1:2].clone()
        x0.add_(v1)
        return (x0,)

    assert decide(f, _randn((1,))) == {"clone": ("keep", Reason.SAME_NODE_WRITES_ORIGINAL_READS_CLONE)}


# --- each refinement is what removes its cases ----------------------------------------


def _unused_contiguous(x: torch.Tensor) -> torch.Tensor:
    x.contiguous()
    return x * 2


def _dead_read(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    c = y.clone()
    y.add_(1)
    c.sum()
    return y


def _element_exact(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    c = y.clone()
    c.mul_(y)
    return c


def _overwritten(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    c = x.clone()
    c.add_(1)
    r = c * 2
    x.copy_(z)
    return r


@pytest.mark.parametrize(
    ("fn", "inputs", "refinement", "kept_for"),
    [
        (_unused_contiguous, _transposed, "layout", Reason.LAYOUT),
        (_dead_read, _randn((4, 8)), "liveness", Reason.ORIGINAL_WRITTEN),
        (_element_exact, _randn((4, 8)), "exact", Reason.SAME_NODE_WRITES_CLONE_READS_ORIGINAL),
        # copy_ does not read its destination (the analysis records a write only): without the
        # kill of x's old value, the clone is kept because the caller's x would be written (C5).
        (_overwritten, _randn((4, 8), (4, 8)), "kills", Reason.WRITES_CALLER_MEMORY),
    ],
    ids=["layout", "liveness", "exact", "kills"],
)
def test_leaving_a_refinement_out_keeps_its_case(fn: Fn, inputs: Inputs, refinement: str, kept_for: Reason) -> None:
    from rewrite.planning.planner import REFINEMENTS

    gm = make_fx(fn, tracing_mode="fake")(*inputs())
    assert eliminate_clones(copy_program(gm), strict=True).removed == ("clone",)  # type: ignore[arg-type]
    others = REFINEMENTS - {refinement}
    report = eliminate_clones(copy_program(gm), strict=True, erase_dead=False, refinements=others)  # type: ignore[arg-type]
    d = report.decision("clone")
    assert (d.action, d.reason) == ("keep", kept_for), report


def test_unknown_refinement_raises_before_anything_changes() -> None:
    from aliasing import AliasingError

    gm = make_fx(lambda x: x.clone() * 2, tracing_mode="fake")(torch.randn(3))
    before = gm.code
    with pytest.raises(AliasingError, match="unknown refinements"):
        eliminate_clones(gm, refinements={"liveness", "lifetimes"})
    with pytest.raises(AliasingError, match="not the string"):
        eliminate_clones(gm, refinements="layout")
    assert gm.code == before
