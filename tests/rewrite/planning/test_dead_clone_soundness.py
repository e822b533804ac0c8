"""Dead clones (C10) erased soundly: runtime checks stay, and every plan applies.

Two findings of one issue, each a regression test that failed before the fix:

- C10 took runtime checks away with a dead clone's group: ``torch._assert_async``,
  ``aten._assert_async.msg``, ``aten._assert_scalar`` and an ``index_select`` whose
  out-of-range indices live in the clone. The original raised and the rewritten
  program returned normally. A rewrite keeps every runtime check the original would
  have executed (docs/DESIGN.md, clause 4 of soundness): the clone is kept with
  :attr:`~rewrite.Reason.DEAD_CLONE_FEEDS_A_CHECK`, the check as evidence, and both
  programs raise the same exception type on real inputs. Controls: dead groups without
  a check still go.
- C10 and C7 together made a plan ``apply_decisions`` rejected (a dead ``_to_copy``
  erased alone, then ``cumsum``, which it reads, erased with another group): the
  default mode kept every clone as ``internal-error`` and ``strict=True`` raised. Now
  every plan applies, and a plan that erases a node something left in the graph still
  uses is refused before the graph changes, naming both nodes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from torch.fx.experimental.proxy_tensor import make_fx

from aliasing import analyze
from rewrite import Reason, apply_decisions, eliminate_clones
from rewrite.errors import RewriteError
from rewrite.planning.decisions import Decision
from rewrite.planning.planner import plan_clone_elimination
from rewrite.testing import check_equivalent, copy_program
from rewrite.testing.programs import Program
from rewrite.testing.programs.builder import KINDS, ProgramBuilder
from rewrite.testing.programs.inputs import draw_inputs, make_inputs_source
from rewrite.testing.programs.strategies import finish_program

Fn = Callable[..., object]


def _raised(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]) -> type[BaseException] | None:
    try:
        gm(*[t.clone() for t in inputs])
    except Exception as err:  # the exception type is what both programs must agree on
        return type(err)
    return None


def _rewrite(gm: torch.fx.GraphModule, **kwargs: object) -> tuple[torch.fx.GraphModule, dict[str, Decision]]:
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = eliminate_clones(rewritten, strict=True, **kwargs)  # type: ignore[arg-type]
    assert report.error is None, report
    return rewritten, {d.node: d for d in report.decisions}


def _targets(gm: torch.fx.GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


# --------------------------------------------------------------------------- finding 2: checks stay


def _assert_async(x: torch.Tensor) -> torch.Tensor:
    o = x * 2
    c = o.clone()
    c.add_(1)
    torch._assert_async((c < 0).all())  # a value read from the clone's group
    return o


def _assert_async_msg(x: torch.Tensor) -> torch.Tensor:
    o = x * 2
    c = o.clone()
    c.add_(1)
    torch.ops.aten._assert_async.msg((c < 0).all(), "the clone must be negative")
    return o


def _assert_scalar(x: torch.Tensor) -> torch.Tensor:
    o = x * 2
    c = o.clone()
    c.add_(1)
    torch.ops.aten._assert_scalar.default((c < 0).all().item(), "the clone must be negative")
    return o


def _index_select_input(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    o = x * 2
    c = idx.clone()
    c.add_(10)  # out of range for o's 4 rows
    torch.index_select(o, 0, c)  # dead, but it checks the indices
    return o


def _index_select_intermediate(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    o = x * 2
    i = idx * 1
    c = i.clone()
    c.fill_(7)
    torch.index_select(o, 0, c)
    return o, i


CHECKS: dict[str, tuple[Fn, Callable[[], list[torch.Tensor]], object]] = {
    "_assert_async": (_assert_async, lambda: [torch.ones(4)], torch.ops.aten._assert_async.default),
    "_assert_async.msg": (_assert_async_msg, lambda: [torch.ones(4)], torch.ops.aten._assert_async.msg),
    "_assert_scalar": (_assert_scalar, lambda: [torch.ones(4)], torch.ops.aten._assert_scalar.default),
    "index_select, clone of an input": (
        _index_select_input,
        lambda: [torch.ones(4), torch.tensor([0, 1])],
        torch.ops.aten.index_select.default,
    ),
    "index_select, clone of an intermediate": (
        _index_select_intermediate,
        lambda: [torch.ones(4), torch.tensor([0, 1])],
        torch.ops.aten.index_select.default,
    ),
}


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
@pytest.mark.parametrize("name", list(CHECKS))
def test_a_dead_clone_feeding_a_runtime_check_is_kept(name: str, mode: str) -> None:
    fn, inputs, check = CHECKS[name]
    gm = make_fx(fn, tracing_mode=mode)(*inputs())
    raised = _raised(gm, inputs())
    assert raised is not None, "the original must raise on these inputs"
    for refinements in (None, ()):
        rewritten, decisions = _rewrite(gm, refinements=refinements)
        assert check in _targets(rewritten), f"the check was erased:\n{rewritten.code}"
        assert _raised(rewritten, inputs()) is raised, f"the rewrite no longer raises {raised.__name__}"
        clone = decisions["clone"]
        assert clone.action == "keep", clone
        assert clone.reason is Reason.DEAD_CLONE_FEEDS_A_CHECK, clone
        assert clone.reason.condition == "C10"
        checks = {n.name for n in gm.graph.nodes if n.target is check}
        assert checks & set(clone.evidence), clone
        # A second run changes nothing either.
        again = eliminate_clones(rewritten, strict=True, refinements=refinements)
        assert again.removed == ()


def test_impure_nodes_are_never_erased_with_a_dead_clone() -> None:
    """Every kind of impure node torch.fx's dead-code elimination keeps (``Node.is_impure()``) stays
    in a dead clone's group: asserts, range constraints, profiler ranges."""
    from rewrite.planning.dataflow import is_side_effectful

    def f(x: torch.Tensor) -> torch.Tensor:
        o = x * 2
        c = o.clone()
        c.add_(1)
        torch.ops.aten._assert_tensor_metadata.default(c, dtype=torch.float32)
        return o

    gm = make_fx(f, tracing_mode="fake")(torch.ones(4))
    meta = next(n for n in gm.graph.nodes if n.target is torch.ops.aten._assert_tensor_metadata.default)
    assert meta.is_impure() and is_side_effectful(meta)
    rewritten, decisions = _rewrite(gm)
    assert decisions["clone"].reason is Reason.DEAD_CLONE_FEEDS_A_CHECK
    assert decisions["clone"].evidence == (meta.name,)
    assert torch.ops.aten._assert_tensor_metadata.default in _targets(rewritten)
    check_equivalent(gm, rewritten, [torch.ones(4)])
    for op in (
        torch.ops.aten._assert_scalar.default,
        torch.ops.aten._assert_async.default,
        torch.ops.aten._assert_async.msg,
        torch.ops.aten.sym_constrain_range.default,
        torch.ops.aten.sym_constrain_range_for_size.default,
        torch.ops.profiler._record_function_enter_new.default,
    ):
        node = gm.graph.call_function(op, ())
        assert is_side_effectful(node), op
        gm.graph.erase_node(node)
    adds = [n for n in gm.graph.nodes if n.target is torch.ops.aten.add_.Tensor]
    assert adds and not is_side_effectful(adds[0])  # impure only by its writes, which C10 judges


def _no_check(x: torch.Tensor) -> torch.Tensor:
    o = x * 2
    c = o.clone()
    c.add_(1)
    (c < 0).all()  # the same dead values, but nothing checks them
    c.cumsum(0)
    return o


def _no_check_index(x: torch.Tensor) -> torch.Tensor:
    o = x * 2
    c = o.clone()
    c.mul_(o)
    c.sum()
    return o


CONTROLS: dict[str, tuple[Fn, Callable[[], list[torch.Tensor]], tuple[str, ...]]] = {
    "pointwise and reductions": (_no_check, lambda: [torch.ones(4)], ("add_", "lt", "all_1", "cumsum")),
    "in-place product and a sum": (_no_check_index, lambda: [torch.ones(4)], ("mul_", "sum_1")),
}


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
@pytest.mark.parametrize("name", list(CONTROLS))
def test_a_dead_group_without_a_check_still_goes(name: str, mode: str) -> None:
    fn, inputs, erased = CONTROLS[name]
    gm = make_fx(fn, tracing_mode=mode)(*inputs())
    rewritten, decisions = _rewrite(gm)
    clone = decisions["clone"]
    assert (clone.action, clone.reason) == ("remove", Reason.DEAD_CLONE_ERASED), clone
    assert clone.erased == erased
    assert torch.ops.aten.clone.default not in _targets(rewritten)
    check_equivalent(gm, rewritten, inputs)


def test_an_index_checked_outside_the_group_is_kept_too() -> None:
    """An indexing op erased with a dead clone checks its indices even when they come from
    outside the group: the original raises on out-of-range indices, so it stays."""

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        o = x * 2
        c = o.clone()
        c.add_(1)
        torch.index_select(c, 0, idx)
        return o

    inputs = [torch.ones(4), torch.tensor([9])]
    gm = make_fx(f, tracing_mode="fake")(*inputs)
    raised = _raised(gm, inputs)
    assert raised is not None
    rewritten, decisions = _rewrite(gm)
    assert decisions["clone"].reason is Reason.DEAD_CLONE_FEEDS_A_CHECK
    assert _raised(rewritten, inputs) is raised
    in_range = [torch.ones(4), torch.tensor([1])]
    check_equivalent(gm, rewritten, in_range)


def _index_put_arange(end: int, *, write_indices: bool = False) -> Fn:
    def f(x: torch.Tensor) -> torch.Tensor:
        o = x * 2
        c = o.clone()
        i = torch.arange(0, end)
        if write_indices:
            i[0:1].fill_(9)  # through a view: the index_put_ still reads the arange's node
        c.index_put_((i,), torch.tensor(1.0))
        return o

    return f


@pytest.mark.parametrize(("end", "write_indices", "erased"), [(4, False, True), (9, False, False), (4, True, False)])
def test_an_arange_index_in_range_checks_nothing(end: int, write_indices: bool, erased: bool) -> None:
    """An ``index_put_`` whose indices are an ``arange`` of constants inside the indexed dimension,
    unwritten until it reads them, cannot raise: erasing it erases no check. Out of range, or
    written before the read, it is a check and stays."""
    gm = make_fx(_index_put_arange(end, write_indices=write_indices), tracing_mode="fake")(torch.ones(4))
    inputs = [torch.ones(4)]
    raised = _raised(gm, inputs)
    assert (raised is None) == erased
    rewritten, decisions = _rewrite(gm)
    clone = decisions["clone"]
    if erased:
        assert (clone.action, clone.reason) == ("remove", Reason.DEAD_CLONE_ERASED), clone
        check_equivalent(gm, rewritten, inputs)
    else:
        assert clone.reason is Reason.DEAD_CLONE_FEEDS_A_CHECK and "index_put_" in clone.evidence, clone
        assert _raised(rewritten, inputs) is raised


# --------------------------------------------------------------------------- finding 3: plans apply


def _finding_3(x: torch.Tensor) -> torch.Tensor:
    o = x * x
    c = o.clone()
    c.add_(1)
    s = c.cumsum(0)
    c1 = o.clone()
    s.to(torch.float64)  # a dead _to_copy candidate of a dead value
    torch.add(s, 1, out=c1)  # an out= write into a dead clone
    return o * 1


REFINEMENT_SUBSETS: list[tuple[str, ...] | None] = [
    None,
    (),
    ("liveness",),
    ("layout", "exact", "kills"),
    ("liveness", "kills"),
]


@pytest.mark.parametrize("refinements", REFINEMENT_SUBSETS)
@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_a_dead_to_copy_erased_alone_and_a_group_reading_its_input_apply_together(
    mode: str, refinements: tuple[str, ...] | None
) -> None:
    gm = make_fx(_finding_3, tracing_mode=mode)(torch.randn(4))
    plan = plan_clone_elimination(analyze(gm), refinements=refinements)
    applied = copy_program(gm)
    assert isinstance(applied, torch.fx.GraphModule)
    apply_decisions(applied.graph, plan)  # the plan applies as it is
    applied.graph.lint()
    applied.recompile()
    check_equivalent(gm, applied, lambda: [torch.randn(4)])

    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = eliminate_clones(rewritten, refinements=refinements)  # the default mode
    assert report.error is None and Reason.INTERNAL_ERROR not in {d.reason for d in report.decisions}, report
    assert report.removed == ("clone", "clone_1", "_to_copy"), report
    decisions = {d.node: d for d in report.decisions}
    assert decisions["_to_copy"].reason is Reason.DEAD_CLONE_ERASED
    assert "cumsum" in decisions["clone"].erased
    check_equivalent(gm, rewritten, lambda: [torch.randn(4)])
    assert not [
        n for n in rewritten.graph.nodes if n.op == "call_function" and n.target is not torch.ops.aten.mul.Tensor
    ]

    strict = copy_program(gm)
    assert isinstance(strict, torch.fx.GraphModule)
    eliminate_clones(strict, strict=True, refinements=refinements)  # does not raise
    check_equivalent(gm, strict, lambda: [torch.randn(4)])
    assert eliminate_clones(strict, strict=True, refinements=refinements).removed == ()


def test_erase_dead_false_removes_by_replacement_only() -> None:
    gm = make_fx(_finding_3, tracing_mode="fake")(torch.randn(4))
    rewritten, decisions = _rewrite(gm, erase_dead=False)
    assert all(d.reason is not Reason.DEAD_CLONE_ERASED for d in decisions.values())
    check_equivalent(gm, rewritten, lambda: [torch.randn(4)])


def test_a_plan_erasing_a_node_that_stays_in_use_is_refused_naming_both() -> None:
    """The invariant every plan is checked against before the graph changes: no erased node is
    used by a node that stays or is replaced."""
    gm = make_fx(_finding_3, tracing_mode="fake")(torch.randn(4))
    before = str(gm.graph)
    used_by_kept = [Decision("clone", "remove", Reason.DEAD_CLONE_ERASED, (), "mul", ("add_", "cumsum"))]
    with pytest.raises(RewriteError, match=r"cumsum is erased but still used by .*_to_copy"):
        apply_decisions(gm.graph, used_by_kept)
    assert str(gm.graph) == before
    used_by_replaced = [
        Decision("clone", "remove", Reason.DEAD_CLONE_ERASED, (), "mul", ("add_", "cumsum")),
        Decision("_to_copy", "remove", Reason.REMOVABLE, (), "cumsum"),
    ]
    with pytest.raises(RewriteError, match=r"cumsum is erased but still used by .*_to_copy \(replaced"):
        apply_decisions(gm.graph, used_by_replaced)
    assert str(gm.graph) == before


def _finding_3_program(data: st.DataObject) -> Program:
    """A drawn program around the fuzzer's pattern with finding 3's shape (``_draw_pattern(8)``),
    after and before a few statements of any kind."""
    specs, donated = draw_inputs(data.draw, max_inputs=2, max_size=5, allow_donation=True)
    seed = data.draw(st.integers(0, 2**31 - 1))
    builder = ProgramBuilder(
        data.draw,
        inputs_source=make_inputs_source(specs, seed),
        num_inputs=len(specs),
        alias_bias=0.75,
        kinds=KINDS,
        max_size=5,
        max_lines=40,
    )
    for _ in range(data.draw(st.integers(0, 3))):
        builder.step(data.draw)
    builder.draw = data.draw
    builder._draw_pattern(8)
    for _ in range(data.draw(st.integers(0, 2))):
        builder.step(data.draw)
    return finish_program(builder, builder.outputs(data.draw, 3), donated=donated, seed=seed)


def _symbolic(program: Program) -> torch.fx.GraphModule:
    namespace: dict[str, object] = {}
    exec(program.source().replace('tracing_mode="fake"', 'tracing_mode="symbolic"'), namespace)
    gm = namespace["gm"]
    assert isinstance(gm, torch.fx.GraphModule)
    return gm


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
@settings(max_examples=25, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_fuzzers_pattern_draws_finding_3s_shape(mode: str, data: st.DataObject) -> None:
    program = _finding_3_program(data)
    src = program.function_source
    assert re.search(r"= (v\d+)\.to\(torch\.float64\)\n    torch\.(add|mul)\(\1, [\d.]+, out=v\d+\)", src), src
    gm = program.graph_module if mode == "fake" else _symbolic(program)
    assert any(n.target is torch.ops.aten._to_copy.default for n in gm.graph.nodes)
    plan = plan_clone_elimination(analyze(gm, donated_inputs=program.donated_inputs))
    applied = copy_program(gm)
    assert isinstance(applied, torch.fx.GraphModule)
    apply_decisions(applied.graph, plan)  # every plan applies
    rewritten, decisions = _rewrite(gm, donated_inputs=program.donated_inputs)
    assert Reason.INTERNAL_ERROR not in {d.reason for d in decisions.values()}
    check_equivalent(gm, rewritten, program.make_inputs, donated_inputs=program.donated_inputs)
    assert eliminate_clones(rewritten, strict=True, donated_inputs=program.donated_inputs).removed == ()


def _blocked_by_a_later_erasure(x0: torch.Tensor, x1: torch.Tensor) -> tuple[torch.Tensor]:
    v0 = x0.unsqueeze(0)
    v1 = x0.clone()
    v2 = v1.clone()
    x0.add_(1.0)
    v3 = v2[:, 0]
    v4 = v1[:, 0]
    torch.nn.functional.batch_norm(v0, v3, v4, None, None, training=True, momentum=0.1)  # writes v3, v4
    v6 = x1.clone()
    v6.index_put_((torch.arange(0, 1, 1),), v3)  # reads v3; dead: erased with v6 (C10)
    return (x1,)


def test_a_group_blocked_by_a_member_a_later_erasure_takes_is_decided_again() -> None:
    """The fuzzer's program (soak, 14 statements): v1's C10 group first reaches the index_put_, which
    writes v6's memory, so v1 is kept; v6's group then erases the index_put_. v1 is decided again
    (C7) and goes with its group in the same run: a second run used to remove it."""
    gm = make_fx(_blocked_by_a_later_erasure, tracing_mode="fake")(torch.randn(1, 2), torch.randn(1, 1))
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = eliminate_clones(rewritten, strict=True)
    assert {d.node: str(d.reason) for d in report.decisions} == {
        "clone": str(Reason.DEAD_CLONE_ERASED),
        "clone_1": str(Reason.ERASED_WITH_DEAD_CLONE),
        "clone_2": str(Reason.DEAD_CLONE_ERASED),
    }
    check_equivalent(gm, rewritten, lambda: [torch.randn(1, 2), torch.randn(1, 1)])
    again = copy_program(rewritten)
    assert isinstance(again, torch.fx.GraphModule)
    assert eliminate_clones(again, strict=True).decisions == ()
