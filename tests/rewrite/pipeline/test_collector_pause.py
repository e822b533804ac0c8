"""Every entry point pauses Python's cyclic collector for its whole pass, and restores it.

A collection of the caller's young objects (a graph copy, Inductor's or vLLM's
leftovers) landing inside the pass made a 67-node graph's pass five times slower
(``benchmarks/README.md``); :func:`aliasing.core.analysis.paused_gc` holds it off
from the graph's validation to the last refresh, and leaves the collector as it
found it, frozen objects included.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import aliasing.core.target
import rewrite.inductor.passes
import rewrite.lowering.metadata
import rewrite.pipeline.driver
from rewrite import eliminate_clones, lower_and_eliminate
from rewrite.inductor import CloneEliminationPass, JointGraphGuard


def _program(x: torch.Tensor) -> torch.Tensor:
    y = (x * 2).clone()
    return y.view(-1) + 1  # the clone goes: its view is refreshed (recreated)


def _graph() -> torch.fx.GraphModule:
    return make_fx(_program, tracing_mode="fake")(torch.randn(2, 3))


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, bool]]]:
    """Records, at the first and the last step of a pass, whether the collector was enabled."""
    seen: list[tuple[str, bool]] = []

    def spy(module: Any, name: str) -> None:
        real: Callable[..., Any] = getattr(module, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            seen.append((name, gc.isenabled()))
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapped)

    spy(aliasing.core.target, "validate_graph")
    spy(rewrite.pipeline.driver, "validate_graph")  # (the passes validate where they read: resolve_for_pass)
    spy(rewrite.lowering.metadata, "fake_mode")
    spy(rewrite.inductor.passes, "guard_stale_reads")
    spy(rewrite.inductor.passes, "guard_inductor_hazards")
    spy(rewrite.inductor.passes, "guard_joint_graph")
    was = gc.isenabled()
    gc.enable()
    try:
        yield seen
    finally:
        if not was:
            gc.disable()


ENTRY_POINTS: dict[str, Callable[[torch.fx.GraphModule], object]] = {
    "eliminate_clones": lambda gm: eliminate_clones(gm.graph),
    "lower_and_eliminate": lambda gm: lower_and_eliminate(gm.graph),
    "inductor pass": lambda gm: CloneEliminationPass()(gm.graph),
    "joint-graph guard": lambda gm: JointGraphGuard()(gm.graph),
}
STEPS = {
    "eliminate_clones": {"validate_graph", "fake_mode"},
    "lower_and_eliminate": {"validate_graph", "fake_mode"},
    "inductor pass": {"guard_stale_reads", "validate_graph", "fake_mode", "guard_inductor_hazards"},
    "joint-graph guard": {"guard_joint_graph"},
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_the_collector_is_paused_for_the_whole_pass(entry: str, seen: list[tuple[str, bool]]) -> None:
    gm = _graph()
    frozen = gc.get_freeze_count()
    ENTRY_POINTS[entry](gm)
    steps = {name for name, _ in seen}
    assert STEPS[entry] <= steps, f"{entry} did not reach {STEPS[entry] - steps}"
    assert not [name for name, enabled in seen if enabled], f"the collector ran during {entry}: {seen}"
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen  # what the pass froze is handed back


def test_a_caller_that_disabled_the_collector_keeps_it_disabled(seen: list[tuple[str, bool]]) -> None:
    gm = _graph()
    gc.disable()
    try:
        eliminate_clones(gm.graph)
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert not [name for name, enabled in seen if enabled]
