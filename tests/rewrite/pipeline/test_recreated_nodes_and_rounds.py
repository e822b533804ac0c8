"""A round whose removals make the refresh recreate nodes, and whose layout-changing removal may
call for another round: the question "another round?" is asked of the analysis before the graph
changes (it names only nodes the analysis saw), and nothing after the rewrite loses the plan.

The programs are the fuzzer's (``python -m rewrite.testing.soak``, 14 statements): each raised
``UnknownNodeError`` in strict mode, and in the default mode reported an error and left a
``GraphModule`` whose code no longer matched its rewritten graph.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from aliasing.core.analysis import counting_analyses
from rewrite import eliminate_clones, lower_and_eliminate
from rewrite.testing import check_equivalent, copy_program


def _slice_of_a_clone(x0: torch.Tensor) -> tuple[torch.Tensor]:
    v0 = x0.clone()
    v1 = v0[1:2]
    v2 = v1.clone()
    v3 = v2.clone()
    return (v3,)


def _out_write_then_channels_last(x0: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor) -> tuple[torch.Tensor]:
    v0 = x1 + 1.0
    v1 = v0.clone()
    torch.add(v1, 1.0, out=v1)
    v2 = v1.clone(memory_format=torch.channels_last)
    v3 = v2.clone()
    return (v3,)


def _inputs(*shapes: tuple[int, ...]) -> Callable[[], list[torch.Tensor]]:
    def make() -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        return [torch.randn(*s, generator=g) for s in shapes]

    return make


CASES = [
    (_slice_of_a_clone, _inputs((2, 1, 1))),
    (_out_write_then_channels_last, _inputs((1,), (1, 1, 1, 2), (1,))),
]


@pytest.mark.parametrize(("fn", "inputs"), CASES)
def test_strict_runs_end_equivalent_and_idempotent(fn: Callable[..., object], inputs: Callable[[], list[torch.Tensor]]) -> None:
    gm = make_fx(fn, tracing_mode="fake")(*inputs())
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = eliminate_clones(rewritten, strict=True)
    assert report.removed and report.error is None
    check_equivalent(gm, rewritten, inputs)
    again = copy_program(rewritten)
    assert isinstance(again, torch.fx.GraphModule)
    assert eliminate_clones(again, strict=True).removed == ()


@pytest.mark.parametrize(("fn", "inputs"), CASES)
def test_the_default_mode_reports_the_plan_and_regenerates_the_code(
    fn: Callable[..., object], inputs: Callable[[], list[torch.Tensor]]
) -> None:
    gm = make_fx(fn, tracing_mode="fake")(*inputs())
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = eliminate_clones(rewritten)
    assert report.error is None and report.removed
    clones = [n.name for n in rewritten.graph.nodes if n.target is torch.ops.aten.clone.default]
    assert all(f"{name} = " not in rewritten.code for name in report.removed if name not in clones)
    assert rewritten.code.count("torch.ops.aten.clone.default") == len(clones)
    check_equivalent(gm, rewritten, inputs)


def test_a_second_round_follows_the_layout_changing_removal_where_a_keep_depends_on_it() -> None:
    gm = make_fx(_slice_of_a_clone, tracing_mode="fake")(*_inputs((2, 1, 1))())
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    with counting_analyses() as count:
        report = lower_and_eliminate(rewritten.graph, lower_functional=False)
    assert report.error is None and report.analyses == count.count == 2
    rewritten.recompile()
    check_equivalent(gm, rewritten, _inputs((2, 1, 1)))


def test_a_failed_refresh_keeps_the_plan_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from rewrite.errors import RewriteError

    def broken(*args: object) -> dict[str, str]:
        raise RuntimeError("refresh bug")

    monkeypatch.setattr("rewrite.pipeline.driver._refresh", broken)
    gm = make_fx(lambda x: (x * 2).clone() + 1, tracing_mode="fake")(torch.randn(4))
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = eliminate_clones(rewritten)
    assert report.removed == ("clone",) and "refresh bug" in (report.error or "")
    assert "clone" not in rewritten.code  # the code follows the rewritten graph
    check_equivalent(gm, rewritten, lambda: [torch.randn(4)])
    with pytest.raises(RewriteError, match="refresh bug"):
        eliminate_clones(copy_program(gm), strict=True)
