"""Precision of ``eliminate_clones`` against the greedy dynamic oracle, one refinement at a time.

On random aliasing-heavy programs of :func:`rewrite.testing.programs` (drawn
in batches of 100, seeds ``--seed``, ``--seed + 1``, ...), the greedy oracle
(:func:`rewrite.testing.greedy_removable`: every clone tried in graph order on
top of the removals kept so far, kept when the four soundness clauses hold
against the original on three input draws) says how many clones can go. Each
row runs ``eliminate_clones`` with more of its refinements turned on
(``refinements=``, ``erase_dead=``), cumulatively:

- ``C1-C9``: the conditions alone (no refinement of C1-C5, no C10);
- ``+ layout``: C1 refined, a layout change that no consumer observes;
- ``+ liveness``: dead readers and dead writers;
- ``+ exact``: element-exact same-node effects (C4');
- ``+ kills``: kills, value-preserving and self copies, write-only destinations;
- ``+ C10``: dead clones erased with their writers (the default pass).

With ``--vllm`` (needs the ``vllm`` extra) vLLM's ``UnsafeCloneEliminationPass``
runs on the same programs, under vLLM's pass context with the same donated
inputs.

Per row: clones removed (in programs whose rewrite the oracle accepts),
``ratio`` = removed / greedy-removable, ``coverage`` = the share of greedy's
removals the pass makes too (no credit for clones greedy keeps, so a program
where the pass beats greedy cannot hide a miss elsewhere), programs short of
greedy, programs beating it, unsound rewrites (their removals do not count).

Usage::

    python -m benchmarks.precision                    # 1,000 programs
    python -m benchmarks.precision --programs 3000 --seed 7 --vllm

Prints a table and the shortest program the full pass falls short on, and
writes ``benchmarks/results/precision.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import rewrite
from rewrite.testing.equivalence import copy_program
from rewrite.testing.precision import PassFn, PrecisionReport, measure_precision, sample_programs
from rewrite.testing.programs import Program

__all__ = ["ROWS", "main", "measure"]

RESULTS = Path(__file__).resolve().parent / "results" / "precision.json"

#: (label, refinements, erase_dead), cumulative.
ROWS: tuple[tuple[str, frozenset[str], bool], ...] = (
    ("C1-C9", frozenset(), False),
    ("+ layout", frozenset({"layout"}), False),
    ("+ liveness", frozenset({"layout", "liveness"}), False),
    ("+ exact", frozenset({"layout", "liveness", "exact"}), False),
    ("+ kills", frozenset({"layout", "liveness", "exact", "kills"}), False),
    ("+ C10", frozenset({"layout", "liveness", "exact", "kills"}), True),
)


def _ours(refinements: frozenset[str], erase_dead: bool) -> PassFn:
    def run(gm: torch.fx.GraphModule, donated: tuple[int, ...]) -> object:
        return rewrite.eliminate_clones(
            gm, donated_inputs=donated, strict=True, erase_dead=erase_dead, refinements=refinements
        )

    return run


class _VllmPass:
    """vLLM's pass as a :data:`PassFn`; a crash (vLLM's compilation would fail) counts as nothing
    removed, and is counted."""

    def __init__(self) -> None:
        from benchmarks.vllm_comparison import _vllm_config, load_vllm_pass

        self.pass_ = load_vllm_pass()(_vllm_config())
        self.crashes = 0

    def __call__(self, gm: torch.fx.GraphModule, donated: tuple[int, ...]) -> object:
        from benchmarks.vllm_comparison import run_pass

        before = copy_program(gm)
        try:
            run_pass(self.pass_, gm, donated)
        except Exception:
            self.crashes += 1
            return before
        return None


def _programs(count: int, seed: int, max_ops: int) -> list[Program]:
    drawn: list[Program] = []
    batch = 0
    while len(drawn) < count:
        drawn.extend(sample_programs(min(100, count - len(drawn)), seed=seed + batch, max_ops=max_ops))
        batch += 1
    return drawn


def measure(
    programs: Sequence[Program], passes: Sequence[tuple[str, PassFn]], *, draws: int = 3
) -> list[tuple[str, PrecisionReport, float]]:
    """Each pass measured on ``programs`` (the greedy oracle runs once per program); with CPU seconds."""
    cache: dict[str, tuple[str, ...]] = {}
    start = time.process_time()
    measure_precision(lambda gm, donated: None, programs, draws=draws, greedy_cache=cache)  # fills the cache
    oracle_s = time.process_time() - start
    rows = [("greedy oracle", PrecisionReport(), oracle_s)]
    for label, fn in passes:
        start = time.process_time()
        report = measure_precision(fn, programs, draws=draws, greedy_cache=cache)
        rows.append((label, report, time.process_time() - start))
    return rows


def _row(report: PrecisionReport) -> dict[str, Any]:
    return {
        "programs": report.programs,
        "clones": report.clones,
        "greedy_removable": report.greedy,
        "removed": report.removed,
        "ratio": round(report.ratio, 4),
        "covered": report.covered,
        "coverage": round(report.coverage, 4),
        "programs_short": len(report.short),
        "programs_beating_greedy": report.beats,
        "unsound_programs": report.unsound_programs,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", type=int, default=1000, help="programs to draw (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first batch of 100 (default 0)")
    parser.add_argument("--max-ops", type=int, default=10, help="statements per program at most (default 10)")
    parser.add_argument("--vllm", action="store_true", help="also measure vLLM's UnsafeCloneEliminationPass")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    if args.programs <= 0:
        parser.error("--programs must be positive")
    programs = _programs(args.programs, args.seed, args.max_ops)
    passes: list[tuple[str, PassFn]] = [(label, _ours(r, e)) for label, r, e in ROWS]
    vllm = _VllmPass() if args.vllm else None
    if vllm is not None:
        passes.append(("vLLM UnsafeCloneEliminationPass", vllm))
    rows = measure(programs, passes)
    header = f"{'pass':34s} {'removed':>8s} {'ratio':>7s} {'coverage':>9s} {'short':>6s} {'beats':>6s} {'unsound':>8s} {'CPU s':>7s}"
    print(f"{len(programs)} programs, {rows[1][1].clones} clones, greedy-removable {rows[1][1].greedy}")
    print(header)
    for label, report, cpu in rows[1:]:
        print(
            f"{label:34s} {report.removed:8d} {report.ratio:7.3f} {report.coverage:9.3f} {len(report.short):6d} "
            f"{report.beats:6d} {report.unsound_programs:8d} {cpu:7.1f}"
        )
    print(f"(greedy oracle: {rows[0][2]:.1f} CPU s)")
    if vllm is not None:
        print(f"vLLM's pass crashed on {vllm.crashes} programs (counted as removing nothing)")
    full = next(report for label, report, _ in rows if label == ROWS[-1][0])
    for miss in full.shortest_misses(1):
        print(f"shortest program the full pass falls short on ({', '.join(miss.missed)} kept):")
        print(miss.program.function_source)
        print(miss.program.inputs_source)
    data = {
        "programs": len(programs),
        "seed": args.seed,
        "max_ops": args.max_ops,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "oracle_cpu_s": round(rows[0][2], 1),
        "rows": [{"pass": label, "cpu_s": round(cpu, 1), **_row(report)} for label, report, cpu in rows[1:]],
    }
    if vllm is not None:
        data["vllm_crashes"] = vllm.crashes
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
