"""Precision of ``eliminate_clones`` against the greedy dynamic oracle, one refinement at a time.

On random aliasing-heavy programs of :func:`rewrite.testing.programs` (drawn
in batches of 100, seeds ``--seed``, ``--seed + 1``, ...), the greedy oracle
(:func:`tools.precision.greedy_removable`: every clone tried in graph order on
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
inputs (in this process only).

Per row: clones removed (in programs whose rewrite the oracle accepts),
``ratio`` = removed / greedy-removable, ``coverage`` = the share of greedy's
removals the pass makes too (no credit for clones greedy keeps, so a program
where the pass beats greedy cannot hide a miss elsewhere), programs short of
greedy, programs beating it, unsound rewrites (their removals do not count).

Each batch of 100 programs is one work item of a campaign (:mod:`tools.campaign`):
``--jobs N`` measures batches in N worker processes, ``--shard K/N`` one of N
disjoint parts of them, ``--results PATH`` records each batch as it ends (and
resumes from it), ``--ray ADDRESS`` runs them on a Ray cluster, and ``--merge
RESULTS...`` prints and writes the table of shards' results files: the same
figures as one run (CPU seconds are summed over batches).

Usage::

    python -m benchmarks.precision                    # 1,000 programs
    python -m benchmarks.precision --programs 3000 --seed 7 --vllm
    python -m benchmarks.precision --programs 3000 --jobs 2

Prints a table and the shortest program the full pass falls short on, and
writes ``benchmarks/results/precision.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rewrite.testing.equivalence import copy_program
from rewrite.testing.programs import Program
from tools import campaign
from tools.campaign import CampaignError, Outcome, WorkItem
from tools.precision import (
    BATCH,
    PassFn,
    PrecisionReport,
    combine_figures,
    measure_passes,
    precision_item,
    refined_pass,
    sample_programs,
)

__all__ = ["ROWS", "TOOL", "main", "measure"]

RESULTS = Path(__file__).resolve().parent / "results" / "precision.json"
#: The campaign tool name of this measurement (results files name it).
TOOL = "benchmarks.precision"

#: (label, refinements, erase_dead), cumulative.
ROWS: tuple[tuple[str, frozenset[str], bool], ...] = (
    ("C1-C9", frozenset(), False),
    ("+ layout", frozenset({"layout"}), False),
    ("+ liveness", frozenset({"layout", "liveness"}), False),
    ("+ exact", frozenset({"layout", "liveness", "exact"}), False),
    ("+ kills", frozenset({"layout", "liveness", "exact", "kills"}), False),
    ("+ C10", frozenset({"layout", "liveness", "exact", "kills"}), True),
)

#: Each pass measured on programs, with CPU seconds (the oracle's row first).
measure = measure_passes


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
    """The programs of the campaign's batches, in order (batch ``b``: seed ``seed + b``)."""
    drawn: list[Program] = []
    for batch in range(-(-count // BATCH)):
        drawn.extend(sample_programs(min(BATCH, count - BATCH * batch), seed=seed + batch, max_ops=max_ops))
    return drawn


def _work_items(settings: dict[str, Any]) -> list[WorkItem]:
    return [WorkItem(f"batch-{b:06d}", b) for b in range(-(-settings["programs"] // BATCH))]


def _row(figures: dict[str, Any]) -> dict[str, Any]:
    return {
        "programs": figures["programs"],
        "clones": figures["clones"],
        "greedy_removable": figures["greedy"],
        "removed": figures["removed"],
        "ratio": figures["ratio"],
        "covered": figures["covered"],
        "coverage": figures["coverage"],
        "programs_short": len(figures["short"]),
        "programs_beating_greedy": figures["beats"],
        "unsound_programs": figures["unsound_programs"],
    }


def _fold(outcomes: dict[str, Outcome]) -> tuple[int, float, list[tuple[str, dict[str, Any], float]]]:
    """(programs, oracle CPU s, rows of (label, combined figures, CPU s)) of the batches, in batch order."""
    failed = [f"{o.key}: {o.status}: {o.error}" for o in outcomes.values() if o.status != "ok"]
    if failed:
        raise CampaignError("batches did not finish: " + "; ".join(failed))
    batches = [outcomes[k].value for k in sorted(outcomes)]
    labels = [r["pass"] for r in batches[0]["rows"]] if batches else []
    rows = [
        (
            label,
            combine_figures([b["rows"][i] for b in batches]),
            sum(b["rows"][i]["cpu_s"] for b in batches),
        )
        for i, label in enumerate(labels)
    ]
    return sum(b["programs"] for b in batches), sum(b["oracle_cpu_s"] for b in batches), rows


def _report(
    settings: dict[str, Any],
    programs: int,
    oracle_s: float,
    rows: list[tuple[str, dict[str, Any], float]],
    out: Path,
    vllm_crashes: int | None = None,
) -> int:
    header = f"{'pass':34s} {'removed':>8s} {'ratio':>7s} {'coverage':>9s} {'short':>6s} {'beats':>6s} {'unsound':>8s} {'CPU s':>7s}"
    print(f"{programs} programs, {rows[0][1]['clones']} clones, greedy-removable {rows[0][1]['greedy']}")
    print(header)
    for label, f, cpu in rows:
        print(
            f"{label:34s} {f['removed']:8d} {f['ratio']:7.3f} {f['coverage']:9.3f} {len(f['short']):6d} "
            f"{f['beats']:6d} {f['unsound_programs']:8d} {cpu:7.1f}"
        )
    print(f"(greedy oracle: {oracle_s:.1f} CPU s)")
    if vllm_crashes is not None:
        print(f"vLLM's pass crashed on {vllm_crashes} programs (counted as removing nothing)")
    full = next(f for label, f, _ in rows if label == ROWS[-1][0])
    miss = full["shortest"]
    if miss is not None:
        print(f"shortest program the full pass falls short on ({', '.join(miss['missed'])} kept):")
        print(miss["function_source"])
        print(miss["inputs_source"])
    data: dict[str, Any] = {
        "programs": programs,
        "seed": settings["seed"],
        "max_ops": settings["max_ops"],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "oracle_cpu_s": round(oracle_s, 1),
        "rows": [{"pass": label, "cpu_s": round(cpu, 1), **_row(f)} for label, f, cpu in rows],
    }
    if vllm_crashes is not None:
        data["vllm_crashes"] = vllm_crashes
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def _settings(programs: int, seed: int, max_ops: int) -> dict[str, Any]:
    return {
        "programs": programs,
        "seed": seed,
        "max_ops": max_ops,
        "draws": 3,
        "rows": [[label, sorted(refinements), erase] for label, refinements, erase in ROWS],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", type=int, default=1000, help="programs to draw (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first batch of 100 (default 0)")
    parser.add_argument("--max-ops", type=int, default=10, help="statements per program at most (default 10)")
    parser.add_argument("--vllm", action="store_true", help="also measure vLLM's UnsafeCloneEliminationPass (in this process)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    campaign.add_campaign_arguments(parser)
    args = parser.parse_args(argv)
    try:
        if args.merge is not None:
            settings, outcomes = campaign.merge_results(args.merge, tool=TOOL, items=_work_items, allow_missing=args.allow_missing)
            return _report(settings, *_fold(outcomes), args.out)
        if args.programs <= 0:
            parser.error("--programs must be positive")
        settings = _settings(args.programs, args.seed, args.max_ops)
        options = campaign.options_from_args(args)
        if args.vllm:
            if options != campaign.CampaignOptions():
                parser.error("--vllm runs in this process: no --jobs, --shard, --results or --ray")
            vllm = _VllmPass()
            passes: list[tuple[str, PassFn]] = [(label, refined_pass(r, e)) for label, r, e in ROWS]
            passes.append(("vLLM UnsafeCloneEliminationPass", vllm))
            measured: list[tuple[str, PrecisionReport, float]] = measure(_programs(args.programs, args.seed, args.max_ops), passes)
            rows = [(label, combine_figures([report.figures()]), cpu) for label, report, cpu in measured[1:]]
            return _report(settings, measured[1][1].programs, measured[0][2], rows, args.out, vllm.crashes)
        run = campaign.run_campaign(precision_item, _work_items(settings), settings=settings, tool=TOOL, options=options)
        return _report(settings, *_fold(run.outcomes), args.out)
    except CampaignError as err:
        parser.error(str(err))


if __name__ == "__main__":
    sys.exit(main())
