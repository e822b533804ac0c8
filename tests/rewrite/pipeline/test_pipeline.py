"""The one pipeline: both entry points run :func:`rewrite.pipeline.driver.run` and decide alike.

``eliminate_clones`` (any target, caller options) and ``lower_and_eliminate``
(a post-grad graph, the guard's protected copies) give the same decisions on
the same graph, leave the same graph, and build one analysis per run.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from aliasing import analyze as aliasing_analyze
from aliasing.core.analysis import counting_analyses
from rewrite import Reason, eliminate_clones, lower_and_eliminate
from rewrite.editing.apply import apply_plan
from rewrite.examples import DEMO_DONATED_INPUTS, trace_demo
from rewrite.testing import check_equivalent, copy_program


def _fold(x: torch.Tensor) -> torch.Tensor:
    c = x.clone()
    c.mul_(2)
    x.copy_(c)  # after the fold, a self-copy (C9)
    return x.sum()


def _chain(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    a = y.clone()
    b = a.clone()
    b.add_(1)  # b is a's copy: written, a read after
    return a + b + y.t().contiguous().sum()


def _dead(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    c = y.clone()
    c.add_(1)  # nothing reads c: erased with its writer (C10)
    return y


PROGRAMS: dict[str, tuple[Callable[..., torch.Tensor], tuple[int, ...]]] = {
    "fold": (_fold, (3,)),
    "chain": (_chain, (4, 4)),
    "dead": (_dead, (3,)),
}


def _decisions(report: object) -> list[tuple[str, str, Reason, tuple[str, ...]]]:
    return [(d.node, d.action, d.reason, d.evidence) for d in report.decisions]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_both_entry_points_decide_alike_and_leave_the_same_graph(name: str) -> None:
    fn, shape = PROGRAMS[name]
    gm = make_fx(fn, tracing_mode="fake")(torch.randn(*shape))
    one, two = copy_program(gm), copy_program(gm)
    assert isinstance(one, torch.fx.GraphModule) and isinstance(two, torch.fx.GraphModule)
    first = eliminate_clones(one)
    second = lower_and_eliminate(two.graph, lower_functional=False)
    assert _decisions(first) == _decisions(second.elimination())
    assert first.removed == second.removed and first.dropped_copies == second.dropped_copies
    assert one.code == two.code
    check_equivalent(gm, one, lambda: [torch.randn(*shape)])


def test_the_fold_leaves_no_self_copy_through_eliminate_clones() -> None:
    gm = make_fx(_fold, tracing_mode="fake")(torch.randn(3))
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = eliminate_clones(rewritten)
    assert report.removed == ("clone",) and report.dropped_copies == ("copy_",)
    assert not [n for n in rewritten.graph.nodes if n.target is torch.ops.aten.copy_.default]
    check_equivalent(gm, rewritten, lambda: [torch.randn(3)])


def test_one_analysis_per_run_on_the_demo() -> None:
    gm = trace_demo()
    with counting_analyses() as count:
        report = eliminate_clones(copy_program(gm), donated_inputs=DEMO_DONATED_INPUTS)
    assert count.count == 1 and report.removed
    with counting_analyses() as count:
        pipeline = lower_and_eliminate(copy_program(gm).graph, donated_inputs=DEMO_DONATED_INPUTS)
    assert count.count == pipeline.analyses == 1
    assert pipeline.removed == report.removed


class _ViewOfClone(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        c = y.clone()  # removable: its view `select` is returned, with stale metadata after the removal
        return c[0], c.sum()


def test_recreated_nodes_keep_their_names_and_an_exported_program_stays_consistent(tmp_path: object) -> None:
    x = torch.randn(3, 4)
    ep = torch.export.export(_ViewOfClone(), (x,))
    expected = ep.module()(x)
    report = eliminate_clones(ep)
    assert report.removed == ("clone",)
    out = next(n for n in ep.graph.nodes if n.op == "output")
    returned = [a.name for a in out.args[0]]
    assert returned == ["select", "sum_1"]  # `select` was recreated (its fake value lived in the clone's storage)
    assert [s.arg.name for s in ep.graph_signature.output_specs] == returned
    assert all(a.equal(b) for a, b in zip(ep.module()(x), expected))
    path = f"{tmp_path}/rewritten.pt2"
    torch.export.save(ep, path)
    loaded = torch.export.load(path)
    assert all(a.equal(b) for a, b in zip(loaded.module()(x), expected))

    gm = make_fx(_ViewOfClone(), tracing_mode="fake")(x)
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    eliminate_clones(rewritten)
    assert "select = " in rewritten.code and "clone" not in rewritten.code
    check_equivalent(gm, rewritten, lambda: [torch.randn(3, 4)])


def _strided() -> torch.Tensor:
    return torch.randn(4, 16)[:, ::2]


def _relocated_alone(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x.contiguous()) + 1  # a layout change nothing observes (C1 refined)


def _relocated_beside_a_keep(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    c = x.clone()
    c.add_(1)  # kept: it judges x's memory, which the layout-changing removal leaves without regions
    return torch.sin(x.contiguous()) + 1, c * 2


@pytest.mark.parametrize(("fn", "analyses"), [(_relocated_alone, 1), (_relocated_beside_a_keep, 2)])
def test_a_second_analysis_only_where_a_kept_copy_meets_a_layout_changing_removal(
    fn: Callable[..., object], analyses: int
) -> None:
    gm = make_fx(fn, tracing_mode="fake")(_strided())
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    with counting_analyses() as count:
        report = lower_and_eliminate(rewritten.graph, lower_functional=False)
    assert Reason.LAYOUT_UNOBSERVED in {d.reason for d in report.elimination().decisions if d.action == "remove"}
    assert report.analyses == count.count == analyses
    check_equivalent(gm, rewritten, lambda: [_strided()])


def _views_of_a_clone(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    c = y.clone()
    a, b = c.split(2)  # elements of a tuple in the clone's storage
    d = a.t()[0]  # a view of a view
    e = b.add_(1)  # an in-place result
    return d.sum() + e.sum()


@pytest.mark.parametrize("fn", [_views_of_a_clone, _ViewOfClone()])
def test_refreshing_from_the_replacements_finds_every_stale_node_a_full_scan_finds(fn: Callable[..., object]) -> None:
    from rewrite.lowering.metadata import refresh_stale, storage_keys
    from rewrite.planning.planner import plan_clone_elimination

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(4, 4))
    results = []
    for use_roots in (False, True):
        g = copy_program(gm)
        assert isinstance(g, torch.fx.GraphModule)
        planned = plan_clone_elimination(aliasing_analyze(g))
        removed = [n for n, d, _ in planned.removals()]
        assert removed, "the clone is removed"
        stale = set().union(*(storage_keys(n.meta.get("val")) for n in removed))
        roots = [n.args[0] for n in removed]
        apply_plan(g.graph, planned)
        results.append(refresh_stale(g.graph, stale, roots if use_roots else None))
    assert results[0] == results[1] and results[0]


def _no_copies(x: torch.Tensor) -> torch.Tensor:
    y = x.t() * 2
    y.add_(1)
    return y.sum(0) + torch.roll(x, 1, 0).sum(1)


def test_a_graph_without_copies_builds_no_analysis_and_stays_as_it_is() -> None:
    gm = make_fx(_no_copies, tracing_mode="fake")(torch.randn(3, 3))
    code = gm.code
    with counting_analyses() as count:
        report = eliminate_clones(gm)
        pipeline = lower_and_eliminate(gm.graph)
    assert count.count == 0 and pipeline.analyses == 0
    assert report.decisions == () and pipeline.removed == () and pipeline.error is None
    assert gm.code == code
    assert not [n for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default]


def test_protected_copies_alone_build_no_analysis() -> None:
    gm = make_fx(lambda x: (x * 2).clone() + 1, tracing_mode="fake")(torch.randn(4))
    clone = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default)
    with counting_analyses() as count:
        report = lower_and_eliminate(gm.graph, keep=[clone])
    assert count.count == report.analyses == 0 and report.removed == ()
    with counting_analyses() as count:
        report = lower_and_eliminate(gm.graph)
    assert count.count == report.analyses == 1 and report.removed == ("clone",)
