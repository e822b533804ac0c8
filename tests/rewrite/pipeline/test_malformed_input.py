"""Malformed graphs and caller mistakes are rejected before anything changes.

``aliasing.analyze`` validates the graph first (a cycle, a use before definition,
an argument that is a node of another graph) and raises ``InvalidTargetError``
naming the node; ``eliminate_clones`` never leaves a graph half-rewritten and
reports bad arguments as errors, not as ``internal-error`` keeps.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import aliasing
from aliasing import InvalidTargetError
from rewrite import RewriteError, apply_decisions, eliminate_clones
from rewrite.planning.decisions import Decision, Reason
from rewrite.planning.planner import plan_clone_elimination
from rewrite.testing import check_equivalent, copy_program


def _program() -> torch.fx.GraphModule:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        c = y.clone()
        d = (y + 1).clone()
        return c + 1, d * 3

    return make_fx(f, tracing_mode="fake")(torch.randn(4))


def _node(gm: torch.fx.GraphModule, name: str) -> torch.fx.Node:
    return next(n for n in gm.graph.nodes if n.name == name)


def _cyclic() -> torch.fx.GraphModule:
    gm = _program()
    mul, add = _node(gm, "mul"), _node(gm, "add")
    mul.args = (add, 2)  # mul now uses a node defined after it: a cycle mul -> clone -> add -> mul
    return gm


def test_cycle_is_rejected_naming_the_node() -> None:
    gm = _cyclic()
    with pytest.raises(InvalidTargetError, match=r"node mul uses add, which is defined after it") as err:
        aliasing.analyze(gm)
    assert "%mul" in str(err.value)  # the message shows the node


def test_self_use_is_rejected() -> None:
    gm = _program()
    mul = _node(gm, "mul")
    mul.args = (mul, 2)
    with pytest.raises(InvalidTargetError, match="node mul uses itself"):
        aliasing.analyze(gm)


def test_node_of_another_graph_is_rejected() -> None:
    gm, other = _program(), _program()
    mul = _node(gm, "mul")
    mul.args = (_node(other, "x_1"), 2)
    with pytest.raises(InvalidTargetError, match="x_1, a node of another graph"):
        aliasing.analyze(gm)


def test_node_after_output_is_rejected() -> None:
    gm = _program()
    x = _node(gm, "x_1")
    gm.graph.output_node().append(gm.graph.create_node("call_function", torch.ops.aten.neg.default, (x,)))
    with pytest.raises(InvalidTargetError, match="comes after the output node"):
        aliasing.analyze(gm)


def test_second_output_node_is_rejected() -> None:
    gm = _program()
    x = _node(gm, "x_1")
    # A second output node in the middle of the graph: the nodes after it name the fault.
    with gm.graph.inserting_after(x):
        early = gm.graph.create_node("output", "output", ((x,),), name="early_output")
    following = early.next
    with pytest.raises(InvalidTargetError, match=f"node {following.name} comes after the output node early_output"):
        aliasing.analyze(gm)


def test_eliminate_clones_rejects_a_malformed_graph_before_any_change() -> None:
    gm = _cyclic()
    before = [(n.name, n.args) for n in gm.graph.nodes]
    for strict in (False, True):
        with pytest.raises(InvalidTargetError, match="node mul uses add"):
            eliminate_clones(gm, strict=strict)
        assert [(n.name, n.args) for n in gm.graph.nodes] == before


@pytest.mark.parametrize(
    ("donated", "message"),
    [
        ((99,), "donated input position 99 is not a placeholder position"),
        (None, "donated_inputs must be an iterable"),
        ("0", "donated_inputs must be an iterable"),
        ((0.0,), "is not an int"),
        ((True,), "is not an int"),
    ],
)
def test_bad_donated_inputs_are_errors_not_internal_keeps(donated: Any, message: str) -> None:
    gm = _program()
    code = gm.code
    with pytest.raises(InvalidTargetError, match=message):
        eliminate_clones(gm, donated_inputs=donated)
    assert gm.code == code
    with pytest.raises(InvalidTargetError, match=message):
        aliasing.analyze(gm, donated_inputs=donated)


def test_not_a_graph_is_an_invalid_target() -> None:
    with pytest.raises(InvalidTargetError, match="got int"):
        eliminate_clones(3)  # type: ignore[arg-type]


def test_apply_checks_every_decision_before_changing_the_graph() -> None:
    gm = _program()
    decisions = plan_clone_elimination(aliasing.analyze(gm))
    assert [d.action for d in decisions] == ["remove", "remove"]
    bogus = [*decisions, Decision("no_such_clone", "remove", Reason.REMOVABLE, (), "x_1")]
    code = gm.graph.python_code("self").src
    with pytest.raises(RewriteError, match="no_such_clone"):
        apply_decisions(gm.graph, bogus)
    assert gm.graph.python_code("self").src == code


def test_a_failure_while_rewriting_restores_every_use(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = _program()
    original = copy_program(gm)
    decisions = plan_clone_elimination(aliasing.analyze(gm))
    code = gm.graph.python_code("self").src
    calls = {"n": 0}
    real = torch.fx.Node.replace_all_uses_with

    def failing(self: torch.fx.Node, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected failure")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.fx.Node, "replace_all_uses_with", failing)
    with pytest.raises(RuntimeError, match="injected failure"):
        apply_decisions(gm.graph, decisions)
    monkeypatch.undo()
    assert calls["n"] == 2  # the first clone had been replaced when the second failed
    assert gm.graph.python_code("self").src == code
    gm.graph.lint()
    gm.recompile()
    check_equivalent(original, gm, [torch.randn(4)])


def test_internal_failure_keeps_every_clone_and_leaves_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    gm = _program()
    code = gm.code

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planner bug")

    monkeypatch.setattr("rewrite.pipeline.driver.plan", broken)
    report = eliminate_clones(gm)
    assert {d.reason for d in report.decisions} == {Reason.INTERNAL_ERROR}
    assert report.kept == ("clone", "clone_1") and "planner bug" in (report.error or "")
    assert gm.code == code
    with pytest.raises(RewriteError, match="planner bug"):
        eliminate_clones(gm, strict=True)


def test_report_counts_opaque_nodes() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        return c + 1

    gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    add = _node(gm, "add")
    with gm.graph.inserting_before(add):
        opaque = gm.graph.call_function(print, (add.args[0],))
    gm.recompile()
    report = eliminate_clones(gm)
    assert report.opaque == (opaque.name,)
    assert f"1 opaque nodes answered conservatively: {opaque.name}" in str(report)
    assert report.kept == ("clone",)


def test_a_graph_without_copies_is_not_read() -> None:
    """The pass validates what it reads: a malformed graph without copy candidates is left as it
    is, unread (a graph without copies costs the pass FX's index lookups only), while the
    analysis of the same graph, which reads every node, rejects it naming the node."""
    gm = make_fx(lambda x: (x * 2) + 1, tracing_mode="fake")(torch.randn(4))
    mul, add = _node(gm, "mul"), _node(gm, "add")
    mul.args = (add, 2)
    before = [(n.name, n.args) for n in gm.graph.nodes]
    report = eliminate_clones(gm, strict=True)
    assert report.removed == () and report.kept == ()
    assert [(n.name, n.args) for n in gm.graph.nodes] == before
    with pytest.raises(InvalidTargetError, match="node mul uses add"):
        aliasing.analyze(gm)
