"""Campaign throughput: the same soak rounds and audit slice in 1 and 2 worker processes.

Runs the soak over seeds ``0 .. --rounds - 1`` (``--examples`` programs a round)
and the effects audit over ``--ops`` (``--max-samples`` samples, no export),
each in one process and then through :mod:`tools.campaign` in 1 and 2
worker processes (``--workers``), every run in a fresh interpreter; checks that
every run gives the same totals, and prints per run: wall seconds (the workers'
start included, the interpreter's not), the items' own wall and CPU seconds
summed, items per second and programs (checks, for the audit) per second.

Usage::

    python -m benchmarks.campaign                       # 8 rounds of 5, 6 ops
    python -m benchmarks.campaign --rounds 16 --workers 1 2 4

Writes ``benchmarks/results/campaign.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from tools import audit, soak
from tools.campaign import CampaignOptions, Outcome, run_campaign

__all__ = ["main", "time_audit", "time_soak"]  # (each run in a fresh interpreter: see _one)

RESULTS = Path(__file__).resolve().parent / "results" / "campaign.json"
AUDIT_OPS = ("abs", "add", "mul", "neg", "sub", "t")


def _label(jobs: int | None) -> str:
    return "in-process" if jobs is None else f"{jobs} worker{'s' if jobs > 1 else ''}"


def _times(jobs: int | None, run: Callable[[CampaignOptions], tuple[Any, dict[str, Outcome]]]) -> tuple[Any, dict[str, Any]]:
    """Run one campaign; its fold and the times: wall (worker start included), the items' own
    wall and CPU seconds summed, this process's CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    folded, outcomes = run(CampaignOptions(jobs=jobs))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return folded, {
        "run": _label(jobs),
        "jobs": jobs,
        "items": len(outcomes),
        "wall_s": round(wall, 2),
        "item_s": round(sum(o.seconds for o in outcomes.values()), 2),
        "item_cpu_s": round(sum(o.cpu_seconds for o in outcomes.values()), 2),
        "cpu_s_this_process": round(cpu, 2),
        "items_per_s": round(len(outcomes) / wall, 3),
    }


def time_soak(rounds: int, examples: int, max_ops: int, jobs: int | None, out: str) -> dict[str, Any]:
    """The soak rounds of seeds ``0 .. rounds - 1`` with ``jobs`` workers: totals and times."""
    settings = {"max_ops": max_ops, "tracing_mode": "fake", "examples": examples, "seeds": [0, rounds - 1]}

    def run(options: CampaignOptions) -> tuple[Any, dict[str, Outcome]]:
        done = run_campaign(soak._round, soak._work_items(settings), settings=settings, tool=soak.TOOL, options=options)
        return soak._fold(settings, done.outcomes, out=out, echo=False), done.outcomes

    figures, row = _times(jobs, run)
    totals = {k: v for k, v in asdict(figures).items() if k != "minutes"}
    return {**row, "programs": figures.programs_run, "programs_per_s": round(figures.programs_run / row["wall_s"], 2), "totals": totals}


def time_audit(ops: Sequence[str], max_samples: int, jobs: int | None) -> dict[str, Any]:
    """The audit of ``ops`` with ``jobs`` workers: its summary (less the runtime) and times."""
    settings = audit._campaign_settings(ops, max_samples, 0, 60.0, True, False, 1, ())

    def run(options: CampaignOptions) -> tuple[Any, dict[str, Outcome]]:
        # (workers import op_db before their first op, as the audit's own runs do)
        options = dataclasses.replace(options, imports=(audit._OP_DB_MODULE,))
        done = run_campaign(audit.audit_item, audit._work_items(settings), settings=settings, tool=audit.TOOL, options=options)
        return audit._fold(settings, done.outcomes), done.outcomes

    report, row = _times(jobs, run)
    summary = report.summary()
    summary.pop("runtime_s")
    return {**row, "checks": summary["samples"], "checks_per_s": round(summary["samples"] / row["wall_s"], 2), "totals": summary}


def _one(kind: str, jobs: int | None, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement in a fresh interpreter (each campaign starts its own workers from scratch)."""
    command = [sys.executable, "-m", "benchmarks.campaign", "--one", kind, str(jobs or 0), *_passed(args)]
    proc = subprocess.run(command, capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return row


def _passed(args: argparse.Namespace) -> list[str]:
    return [
        "--rounds", str(args.rounds), "--examples", str(args.examples), "--max-ops", str(args.max_ops),
        "--max-samples", str(args.max_samples), "--repro-dir", args.repro_dir, "--ops", *args.ops,
    ]


def _table(rows: Sequence[dict[str, Any]], unit: str) -> str:
    lines = [
        f"| run | items | {unit} | wall s | items' wall s | items' CPU s | items/s | {unit}/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['items']} | {r[unit]} | {r['wall_s']} | {r['item_s']} | {r['item_cpu_s']} "
            f"| {r['items_per_s']} | {r[unit + '_per_s']} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8, help="soak rounds (seeds 0 .. R-1; default 8)")
    parser.add_argument("--examples", type=int, default=5, help="programs per soak round (default 5)")
    parser.add_argument("--max-ops", type=int, default=10, help="statements per program at most (default 10)")
    parser.add_argument("--ops", nargs="*", default=list(AUDIT_OPS), help=f"audit slice (default {' '.join(AUDIT_OPS)}; none: no audit)")
    parser.add_argument("--max-samples", type=int, default=2, help="audit samples per op and variant (default 2)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to run (default 1 2)")
    parser.add_argument("--repro-dir", default="repros", help="where failing rounds' repros go (default ./repros)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    parser.add_argument("--one", nargs=2, metavar=("KIND", "JOBS"), help=argparse.SUPPRESS)  # one row, as JSON
    args = parser.parse_args(argv)
    if args.one is not None:
        kind, jobs_text = args.one
        one_jobs = int(jobs_text) or None
        if kind == "soak":
            row = time_soak(args.rounds, args.examples, args.max_ops, one_jobs, args.repro_dir)
        else:
            row = time_audit(args.ops, args.max_samples, one_jobs)
        print(json.dumps(row))
        return 0
    runs: list[int | None] = [None, *args.workers]
    soak_rows = [_one("soak", jobs, args) for jobs in runs]
    audit_rows = [_one("audit", jobs, args) for jobs in runs] if args.ops else []
    same = all(r["totals"] == soak_rows[0]["totals"] for r in soak_rows) and all(
        r["totals"] == audit_rows[0]["totals"] for r in audit_rows
    )
    print(f"soak: seeds 0..{args.rounds - 1}, {args.examples} programs a round")
    print(_table(soak_rows, "programs"))
    if audit_rows:
        print(f"\naudit: {' '.join(args.ops)}, {args.max_samples} samples, no export")
        print(_table(audit_rows, "checks"))
    print(f"\nsame totals in every run: {same}")
    data = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "repro_dir", "one")},
        "same_totals": same,
        "soak": soak_rows,
        "audit": audit_rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
