"""A round whose removals make the refresh recreate nodes, and whose layout-changing removal may
call for another round: the question "another round?" is asked of the analysis before the graph
changes (it names only nodes the analysis saw), and nothing after the rewrite loses the plan.

The programs are the fuzzer's (``python -m tools.soak``, 14 statements): each raised
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


def _first_half_of_a_clone(x: torch.Tensor) -> torch.Tensor:
    import rewrite.testing.programs.custom_ops  # noqa: F401  (registers fxa_fuzz::first_half)

    c = (x * 2).clone()
    return torch.ops.fxa_fuzz.first_half(c) + 1


def test_the_refresh_runs_a_custom_meta_kernel_on_symbolic_sizes(caplog: pytest.LogCaptureFixture) -> None:
    """``fxa_fuzz::first_half``'s Meta kernel calls ``narrow``, which reads a symbolic tensor's
    storage offset unless the Python dispatcher is on (a symbolic soak on torch 2.15 logged it
    at ERROR level, and the view kept its stale fake value): the refresh computes fake values
    as ``make_fx`` and Inductor do, so the view lands in its new base's storage."""
    from aliasing.core.facts import storage_identity

    _first_half_of_a_clone(torch.ones(2))  # registers the op before the trace
    gm = make_fx(_first_half_of_a_clone, tracing_mode="symbolic")(torch.randn(4, 3))
    original = copy_program(gm)
    with caplog.at_level("ERROR"):
        report = eliminate_clones(gm, strict=True)
    assert report.removed == ("clone",)
    nodes = {n.name: n for n in gm.graph.nodes}
    half, base = nodes["first_half"].meta["val"], nodes["mul"].meta["val"]
    assert isinstance(half.shape[0], torch.SymInt)  # the sizes stayed symbolic
    assert storage_identity(half) == storage_identity(base)  # recomputed from the new base
    assert not [r.getMessage() for r in caplog.records if r.levelno >= 40]
    check_equivalent(original, gm, lambda: [torch.randn(6, 5)])
