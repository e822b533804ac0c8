"""The greedy dynamic oracle and the precision report (``tools.precision``)."""

from __future__ import annotations

import pytest
import torch

import rewrite
from rewrite.testing import sample_programs
from rewrite.testing.programs import Program
from tools.precision import PrecisionReport, greedy_removable, measure_precision


def _program(function_source: str, inputs_source: str, donated: tuple[int, ...] = ()) -> Program:
    return Program(
        function_source=function_source,
        inputs_source=inputs_source,
        donated_inputs=donated,
        seed=0,
        num_ops=function_source.count("\n") - 1,
        uses_custom_ops=False,
    )


INPUTS = "def make_inputs():\n    torch.manual_seed(0)\n    return [torch.randn(4, 3)]\n"


def test_greedy_removes_what_can_go_and_keeps_what_must_stay() -> None:
    p = _program(
        "def program(x0):\n"
        "    v0 = x0.clone()\n"  # written, x0 is the caller's: must stay
        "    v0.add_(1.0)\n"
        "    v1 = (x0 * 2.0).clone()\n"  # only read: can go
        "    v2 = x0.clone()\n"  # returned: would alias the input
        "    return (v0, v1 + 1.0, v2)\n",
        INPUTS,
    )
    assert greedy_removable(p) == ("clone_1",)


def test_greedy_is_greedy_in_graph_order() -> None:
    # Either clone may go, not both: greedy keeps the first removal it can make.
    p = _program(
        "def program(x0):\n"
        "    y = x0 * 2.0\n"
        "    v0 = y.clone()\n"
        "    v1 = y.clone()\n"
        "    v0.add_(1.0)\n"
        "    v1.mul_(3.0)\n"
        "    return (v0, v1)\n",
        INPUTS,
    )
    assert greedy_removable(p) == ("clone",)


def test_greedy_checks_output_layout() -> None:
    p = _program(
        "def program(x0):\n    v0 = x0.t().contiguous()\n    return (v0 + 0.0,)\n",
        INPUTS,
    )
    # t().contiguous() copies into a new layout that the output's strides show.
    assert greedy_removable(p) == ()


def test_measure_precision_counts_removals_and_misses() -> None:
    programs = sample_programs(20, seed=5, max_ops=5)
    assert len(programs) == 20
    report = measure_precision(lambda gm, donated: rewrite.eliminate_clones(gm, donated_inputs=donated), programs)
    assert report.programs == 20 and report.unsound_programs == 0
    assert report.removed >= 0 and report.greedy >= report.removed - report.beats
    assert report.ratio >= 0.0
    assert "ratio:" in report.summary()
    for miss in report.short:
        assert miss.removed < miss.greedy


def test_measure_precision_rejects_an_unsound_pass() -> None:
    def drop_every_clone(gm: torch.fx.GraphModule, donated: tuple[int, ...]) -> None:
        for node in list(gm.graph.nodes):
            if node.target is torch.ops.aten.clone.default:
                node.replace_all_uses_with(node.args[0])
                gm.graph.erase_node(node)
        gm.recompile()

    p = _program(
        "def program(x0):\n    v0 = x0.clone()\n    v0.add_(1.0)\n    return (v0,)\n",
        INPUTS,
    )
    sound = _program("def program(x0):\n    v0 = (x0 * 2).clone()\n    return (v0,)\n", INPUTS)
    report = measure_precision(drop_every_clone, [p, sound])
    assert report.unsound_programs == 1 and report.removed == 1  # the sound rewrite's removal counts
    assert report.removed_total == 2  # the pass removed both clones
    assert isinstance(report, PrecisionReport)
    assert "removed by the pass: 2 (1 in sound rewrites" in report.summary()
    assert "1 in the 1 unsound ones" in report.summary()


def test_a_pass_that_removes_nothing_has_ratio_zero_when_greedy_removes() -> None:
    gm_program = _program("def program(x0):\n    v0 = (x0 + 1.0).clone()\n    return (v0 * 2.0,)\n", INPUTS)
    report = measure_precision(lambda gm, donated: None, [gm_program])
    assert report.greedy == 1 and report.removed == 0 and report.ratio == 0.0
    assert len(report.short) == 1 and report.short[0].missed == ("clone",)


def test_dead_clone_erasure_beats_greedy() -> None:
    """Greedy replaces one clone at a time: a clone only written cannot go (its write would land in
    the returned original). ``eliminate_clones`` erases it with its writer (condition C10)."""
    p = _program(
        "def program(x0):\n    y = x0 * 2.0\n    v0 = y.clone()\n    v0.add_(1.0)\n    return (y,)\n",
        INPUTS,
    )
    assert greedy_removable(p) == ()
    cache: dict[str, tuple[str, ...]] = {}
    erase = measure_precision(
        lambda gm, donated: rewrite.eliminate_clones(gm, donated_inputs=donated), [p], greedy_cache=cache
    )
    assert (erase.removed, erase.greedy, erase.beats, erase.unsound_programs) == (1, 0, 1, 0)
    keep = measure_precision(
        lambda gm, donated: rewrite.eliminate_clones(gm, donated_inputs=donated, erase_dead=False), [p], greedy_cache=cache
    )
    assert (keep.removed, keep.beats) == (0, 0)


def test_greedy_cache_runs_the_oracle_once_per_program(monkeypatch: pytest.MonkeyPatch) -> None:
    import tools.precision as precision

    calls: list[str] = []
    real = precision.greedy_removable

    def counting(program: Program, *, draws: int = 3) -> tuple[str, ...]:
        calls.append(program.function_source)
        return real(program, draws=draws)

    monkeypatch.setattr(precision, "greedy_removable", counting)
    programs = sample_programs(3, seed=2, max_ops=4)
    cache: dict[str, tuple[str, ...]] = {}
    for _ in range(2):
        measure_precision(lambda gm, donated: None, programs, greedy_cache=cache)
    assert len(calls) == 3 and len(cache) == len({(p.function_source, p.inputs_source) for p in programs})
