"""The fuzzer's tracing modes and untrusted ops: the places where a trace, a file or a schema cannot be trusted.

``programs(tracing_mode=...)`` draws programs traced by ``make_fx`` in real mode,
exported and loaded back from a ``.pt2``, or exported with dynamic sizes and checked at
the sizes' boundaries; ``allow_untrusted_ops=True`` draws dtype views and ops whose
schemas declare fresh results that are views or their argument. Each mode must give
runnable programs whose sources reproduce their graphs, keep the library's pass sound,
and reach what it is there for: an analysis that trusts an undeclared result is caught.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample

import aliasing
import rewrite
from aliasing.core.effects import SINGLE, Effect, tensor_nodes
from aliasing.verification.oracle import check_analysis
from rewrite.testing import Program, check_pass, programs

_FIND = settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize("mode", ["real", "export-save-load", "export-dynamic"])
def test_tracing_mode_gives_runnable_reproducible_programs(mode: str) -> None:
    p = find(programs(max_ops=4, tracing_mode=mode), lambda p: p.num_ops >= 2, settings=_FIND)
    assert p.tracing_mode == mode
    namespace: dict[str, Any] = {}
    exec(p.source(), namespace)
    assert namespace["gm"].code == p.graph_module.code
    check_pass(lambda gm: rewrite.eliminate_clones(gm, donated_inputs=p.donated_inputs, strict=True), p)


def test_export_dynamic_programs_run_at_boundary_sizes() -> None:
    """Inputs at each symbol's boundaries (0, 1, 2, the example, a larger one, as the program admits)."""

    def sizes(p: Program) -> set[tuple[int, ...]]:
        return {tuple(t.shape) for make in p.input_sets for t in make()[:1]}

    p = find(programs(max_ops=3, tracing_mode="export-dynamic"), lambda p: len(sizes(p)) >= 3, settings=_FIND)
    assert p.input_sets[0] is not None and len(p.input_sets) >= 3
    check_pass(lambda gm: rewrite.eliminate_clones(gm, donated_inputs=p.donated_inputs, strict=True), p)


def test_untrusted_ops_are_drawn_only_when_asked() -> None:
    untrusted = ("view(torch.int32)", "einsum", "atleast_", "sum_to_size", "dequantize", "unsafe_split", "unsafe_chunk")
    drawn = find(
        programs(max_ops=8, allow_untrusted_ops=True),
        lambda p: any(u in p.function_source for u in untrusted),
        settings=_FIND,
    )
    assert drawn.num_ops >= 1
    with pytest.raises(NoSuchExample):
        find(programs(max_ops=8), lambda p: any(u in p.function_source for u in untrusted), settings=_FIND)


def _trusting(node: torch.fx.Node, facts: Any) -> Effect:
    """The rule the analysis had before the trust rule: an undeclared result is fresh memory."""
    return Effect(reads=tuple(dict.fromkeys(tensor_nodes((node.args, node.kwargs)))), outputs={SINGLE: ()})


def test_a_trusting_analysis_is_caught_in_a_loaded_program() -> None:
    """An analysis that takes ``unsafe_split``'s or ``einsum``'s schema at its word (fresh results) is
    caught by the real-execution oracle on programs loaded from their file, within 200 draws."""
    table = aliasing.DEFAULT_EFFECTS
    for op in (torch.ops.aten.unsafe_split.Tensor, torch.ops.aten.unsafe_chunk.default, torch.ops.aten.einsum.default):
        table = table.with_rule(op, _trusting)

    def wrong(p: Program) -> bool:
        gm = p.graph_module
        try:
            check_analysis(aliasing.analyze(gm, effects=table), gm, p.make_inputs())
        except AssertionError:
            return True
        return False

    p = find(programs(max_ops=6, tracing_mode="export-save-load", allow_untrusted_ops=True), wrong, settings=_FIND)
    assert "unsafe" in p.function_source or "einsum" in p.function_source
    gm = p.graph_module
    check_analysis(aliasing.analyze(gm), gm, p.make_inputs())  # the library's own analysis holds
