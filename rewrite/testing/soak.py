"""Long fuzzing campaigns: ``python -m rewrite.testing.soak --minutes N [--seed S] [--out DIR]``.

Draws random programs (:func:`rewrite.testing.programs`) until the time is up
and checks, for each one:

- ``analysis``: :func:`aliasing.analyze` never misses an alias, an overlap or a
  writer that a real run shows (:func:`rewrite.testing.check_analysis`);
- ``raises``: :func:`rewrite.eliminate_clones` does not raise, in strict mode;
- ``equivalence``: the rewritten program passes :func:`rewrite.testing.check_equivalent`
  (a refusal of the oracle, :class:`~rewrite.testing.equivalence.OracleError`, counts
  here too: a drawn program whose original raises on its own inputs, or that
  compares nothing, is a defect of the generator worth a repro);
- ``idempotence``: a second run on the rewritten program removes nothing.

Hypothesis shrinks every failure; the smallest failing program of each round
is written to ``DIR`` (default ``./repros``) as a standalone script: the
program's :meth:`~rewrite.testing.Program.source` followed by the failing
check. A round is a batch of examples under one seed; rounds repeat with new
seeds until the time is up (a round that starts before the deadline runs to
its end). The figures are printed at the end, then as one JSON line:
``programs_run`` counts every program checked, Hypothesis's shrinking runs
included; clones seen, removed and kept are summed over those programs;
``failures`` counts failing rounds by check (at most 20 repro files per check).

Examples
--------
>>> from rewrite.testing.soak import main
>>> main(["--minutes", "0.05", "--seed", "1", "--out", "/tmp/fxa-soak-doctest"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

import aliasing
import rewrite
from aliasing.oracle import check_analysis
from rewrite.testing.equivalence import OracleError, check_equivalent, copy_program
from rewrite.testing.programs import Program, programs

__all__ = ["CHECKS", "Figures", "SoakFailure", "check_program", "main", "run_campaign"]

#: The checks run on each program, in order.
CHECKS: tuple[str, ...] = ("analysis", "raises", "equivalence", "idempotence")

_EXAMPLES_PER_ROUND = 25
_MAX_REPROS_PER_CHECK = 20  # later failures of the same check are counted, not written


class SoakFailure(AssertionError):
    """One check failed on one program; ``check`` names it (one of :data:`CHECKS`)."""

    def __init__(self, check: str, message: str) -> None:
        self.check = check
        super().__init__(f"[{check}] {message}")


@dataclass
class Figures:
    """What a campaign did. ``failures`` counts shrunk failures by check."""

    minutes: float = 0.0
    seed: int = 0
    tracing_mode: str = "fake"
    rounds: int = 0
    programs_run: int = 0
    statements: int = 0
    clones_seen: int = 0
    clones_removed: int = 0
    clones_kept: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHECKS, 0))
    repro_files: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """Human-readable lines."""
        removed = self.clones_removed / self.clones_seen * 100 if self.clones_seen else 0.0
        lines = [
            f"soak: {self.minutes:.1f} min, seed {self.seed}, {self.rounds} rounds",
            f"programs run:    {self.programs_run} ({self.statements} statements)",
            f"clones seen:     {self.clones_seen}",
            f"clones removed:  {self.clones_removed} ({removed:.1f}%)",
            f"clones kept:     {self.clones_kept}",
            "failures:        " + ", ".join(f"{k} {v}" for k, v in self.failures.items()),
        ]
        lines += [f"repro:           {path}" for path in self.repro_files]
        return "\n".join(lines)


def check_program(program: Program) -> tuple[int, int]:
    """Run every check of :data:`CHECKS` on ``program``; return (clones seen, clones removed).

    Raises
    ------
    SoakFailure
        Naming the first check that failed.

    Examples
    --------
    >>> from hypothesis import find
    >>> program = find(programs(max_ops=3), lambda p: True)
    >>> seen, removed = check_program(program)
    >>> 0 <= removed <= seen
    True
    """
    gm, donated = program.graph_module, program.donated_inputs
    try:
        check_analysis(aliasing.analyze(gm, donated_inputs=donated), gm, program.make_inputs())
    except AssertionError as err:
        raise SoakFailure("analysis", str(err)) from err
    rewritten = copy_program(gm)
    if not isinstance(rewritten, torch.fx.GraphModule):
        raise SoakFailure("raises", "copy_program did not return a GraphModule")
    try:
        report = rewrite.eliminate_clones(rewritten, donated_inputs=donated, strict=True)
    except Exception as err:  # property 3: the pass never raises on a drawn program
        raise SoakFailure("raises", f"{type(err).__name__}: {err}") from err
    try:
        check_equivalent(gm, rewritten, program.make_inputs, donated_inputs=donated)
    except AssertionError as err:
        raise SoakFailure("equivalence", f"{err}\n\n{report}") from err
    except OracleError as err:  # not a verdict on the pass: the program cannot be judged
        raise SoakFailure("equivalence", f"the oracle cannot judge this program: {err}") from err
    again = copy_program(rewritten)
    if not isinstance(again, torch.fx.GraphModule):
        raise SoakFailure("raises", "copy_program did not return a GraphModule")
    second = rewrite.eliminate_clones(again, donated_inputs=donated, strict=True)
    if second.removed:
        raise SoakFailure("idempotence", f"a second run removed {', '.join(second.removed)}\n\n{second}")
    return len(report.decisions), len(report.removed)


_CHECK_CODE = {
    "analysis": """\
import aliasing
from rewrite.testing import check_analysis

check_analysis(aliasing.analyze(gm, donated_inputs=DONATED_INPUTS), gm, make_inputs())
""",
    "raises": """\
import rewrite
from rewrite.testing import copy_program

rewrite.eliminate_clones(copy_program(gm), donated_inputs=DONATED_INPUTS, strict=True)
""",
    "equivalence": """\
import rewrite
from rewrite.testing import check_equivalent, copy_program

rewritten = copy_program(gm)
print(rewrite.eliminate_clones(rewritten, donated_inputs=DONATED_INPUTS, strict=True))
check_equivalent(gm, rewritten, make_inputs, donated_inputs=DONATED_INPUTS)
""",
    "idempotence": """\
import rewrite
from rewrite.testing import copy_program

rewritten = copy_program(gm)
rewrite.eliminate_clones(rewritten, donated_inputs=DONATED_INPUTS, strict=True)
second = rewrite.eliminate_clones(rewritten, donated_inputs=DONATED_INPUTS, strict=True)
print(second)
assert not second.removed, "a second run removed clones"
""",
}


def repro_source(program: Program, failure: SoakFailure) -> str:
    """A standalone script: the program, then the check that failed (with its message as comments)."""
    message = "\n".join(f"# {line}".rstrip() for line in str(failure).splitlines())
    return (
        f"# fx-aliasing soak failure: {failure.check}\n{message}\n\n"
        f"{program.source()}\n# --- the failing check ---\n{_CHECK_CODE[failure.check]}"
    )


def _write_repro(out: str, program: Program, failure: SoakFailure, index: int) -> str:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"repro_{failure.check}_{index:03d}.py")
    with open(path, "w") as f:
        f.write(repro_source(program, failure))
    return path


def run_campaign(
    minutes: float,
    *,
    seed: int = 0,
    out: str = "repros",
    max_ops: int = 10,
    echo: bool = True,
    tracing_mode: str = "fake",
) -> Figures:
    """Draw and check programs for ``minutes``; return the figures (see the module docstring).

    Examples
    --------
    >>> figures = run_campaign(0.02, seed=3, out="/tmp/fxa-soak-doctest", echo=False)
    >>> figures.programs_run > 0
    True
    """
    figures = Figures(seed=seed, tracing_mode=tracing_mode)
    start = time.monotonic()
    deadline = start + minutes * 60
    round_seed = seed
    while time.monotonic() < deadline:
        failing: list[tuple[Program, SoakFailure]] = []
        counts = {"programs": 0, "statements": 0, "seen": 0, "removed": 0}

        @hypothesis_seed(round_seed)
        @settings(
            max_examples=_EXAMPLES_PER_ROUND,
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.generate, Phase.shrink],
            report_multiple_bugs=False,
        )
        @given(programs(max_ops=max_ops, tracing_mode=tracing_mode))
        def one_round(program: Program) -> None:
            counts["programs"] += 1
            counts["statements"] += program.num_ops
            try:
                seen, removed = check_program(program)
            except SoakFailure as failure:
                failing.append((program, failure))  # the last one is Hypothesis's shrunk example
                raise
            counts["seen"] += seen
            counts["removed"] += removed

        try:
            one_round()
        except SoakFailure:
            program, failure = failing[-1]
            figures.failures[failure.check] += 1
            if figures.failures[failure.check] <= _MAX_REPROS_PER_CHECK:
                path = _write_repro(out, program, failure, len(figures.repro_files))
                figures.repro_files.append(path)
                if echo:
                    print(f"failure ({failure.check}), repro written to {path}", file=sys.stderr)
        except Exception:  # a generator or harness error: report it and keep going
            if echo:
                traceback.print_exc()
        figures.rounds += 1
        figures.programs_run += counts["programs"]
        figures.statements += counts["statements"]
        figures.clones_seen += counts["seen"]
        figures.clones_removed += counts["removed"]
        round_seed += 1
    figures.clones_kept = figures.clones_seen - figures.clones_removed
    figures.minutes = (time.monotonic() - start) / 60
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns 0 when no check failed, 1 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m rewrite.testing.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, required=True, help="how long to run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first round (default 0)")
    parser.add_argument("--out", default="repros", help="directory for repro files (default ./repros)")
    parser.add_argument("--max-ops", type=int, default=10, help="statements per program at most (default 10)")
    parser.add_argument(
        "--tracing-mode",
        choices=("fake", "symbolic"),
        default="fake",
        help="trace the drawn programs with fake or symbolic sizes (default fake)",
    )
    parser.add_argument(
        "--precision",
        action="store_true",
        help="measure eliminate_clones against the greedy dynamic oracle instead "
        "(rewrite.testing.precision): print removed / greedy-removable, with and without "
        "dead-clone erasure (C10)",
    )
    parser.add_argument(
        "--min-programs",
        type=int,
        default=0,
        help="with --precision: keep drawing batches of 100 until at least this many programs are measured",
    )
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    if args.precision:
        return _precision_campaign(args.minutes, args.seed, args.max_ops, args.min_programs)
    figures = run_campaign(
        args.minutes, seed=args.seed, out=args.out, max_ops=args.max_ops, tracing_mode=args.tracing_mode
    )
    print(figures.summary())
    data: dict[str, Any] = asdict(figures)
    print(json.dumps(data, sort_keys=True))
    return 1 if any(figures.failures.values()) else 0


def _precision_campaign(minutes: float, seed: int, max_ops: int, min_programs: int = 0) -> int:
    """Batches of 100 programs until the time is up (and ``min_programs`` are measured); prints the
    running ratio, then the report, for ``eliminate_clones`` with and without dead-clone erasure (C10)
    on the same programs."""
    from rewrite.testing.precision import PrecisionReport, measure_precision, sample_programs

    deadline = time.monotonic() + minutes * 60
    totals = {"erase": PrecisionReport(), "no-erase": PrecisionReport()}
    batch = 0
    while time.monotonic() < deadline or totals["erase"].programs < min_programs:
        drawn = sample_programs(100, seed=seed + batch, max_ops=max_ops)
        cache: dict[str, tuple[str, ...]] = {}
        for variant, total in totals.items():
            erase = variant == "erase"
            part = measure_precision(
                lambda gm, donated: rewrite.eliminate_clones(
                    gm, donated_inputs=donated, strict=True, erase_dead=erase  # called at once
                ),
                drawn,
                greedy_cache=cache,
            )
            for name in ("programs", "clones", "removed", "greedy", "covered", "unsound_programs", "beats"):
                setattr(total, name, getattr(total, name) + getattr(part, name))
            total.short.extend(part.short)
        batch += 1
        print(
            f"batch {batch}: {totals['erase'].programs} programs, ratio {totals['erase'].ratio:.3f}, "
            f"coverage {totals['erase'].coverage:.3f} ({totals['no-erase'].ratio:.3f}, "
            f"{totals['no-erase'].coverage:.3f} without dead-clone erasure)",
            file=sys.stderr,
        )
    figures: dict[str, Any] = {}
    for variant, total in totals.items():
        print(f"--- eliminate_clones ({'with' if variant == 'erase' else 'without'} dead-clone erasure, C10)")
        print(total.summary())
        figures[variant] = {
            "programs": total.programs,
            "clones": total.clones,
            "removed": total.removed,
            "greedy": total.greedy,
            "ratio": round(total.ratio, 4),
            "covered": total.covered,
            "coverage": round(total.coverage, 4),
            "programs_short": len(total.short),
            "programs_beating_greedy": total.beats,
            "unsound_programs": total.unsound_programs,
        }
    print(json.dumps(figures, sort_keys=True))
    return 1 if any(t.unsound_programs for t in totals.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
