"""``benchmarks/instructions.py``: instruction counts under callgrind are real and repeatable.

The counts are the benchmark's answer where timings on a shared machine move
by half: the test runs the measure twice on a tiny graph and checks the two
counts agree within the 1% the module's docstring promises, and that the
counted region holds the measure (at least ten thousand instructions a node:
an analysis costs about fifty thousand; a region that missed it would count
next to nothing). Skipped where valgrind is not installed (``.ci/run``
installs it). The CLI's refusals need no valgrind.
"""

from __future__ import annotations

import shutil

import pytest

from benchmarks import instructions


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
    reason="needs valgrind with callgrind_control (apt-get install valgrind)",
)
@pytest.mark.slow
def test_counts_repeat_and_hold_the_measure() -> None:
    counts = [instructions.count(instructions.ROOT, "shared", 64, "analyze") for _ in range(2)]
    assert counts[0] > 64 * 10_000, counts
    assert abs(counts[0] - counts[1]) <= 0.01 * counts[0], counts


def test_an_unknown_measure_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        instructions.main(["--measures", "bogus"])
    assert "unknown measures: ['bogus']" in capsys.readouterr().err


def test_without_valgrind_it_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(instructions.shutil, "which", lambda name: None)
    assert instructions.main(["--measures", "analyze"]) == 2
    assert "apt-get install valgrind" in capsys.readouterr().err


def test_the_models_shape_is_the_five_export_graphs() -> None:
    from benchmarks.models import MODELS

    graphs = instructions._graphs("models", 0)
    assert len(graphs) == len(MODELS) == 5
    for gm in graphs:
        calls = [n for n in gm.graph.nodes if n.op == "call_function"]
        assert calls and all("val" in n.meta for n in calls if n.target is not None), gm
    (shared,) = instructions._graphs("shared", 64)
    assert 32 <= len(shared.graph.nodes) <= 128
