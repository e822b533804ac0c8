"""``python -m tools.audit``: the effects audit's command line.

It runs the audit (:func:`tools.audit.audit`) and writes its
reports, prints the report of a campaign's results files (``--merge``), runs
the operator-registry coverage check (``--registry``), the layout audit
(``--layouts``, :mod:`tools.layout_audit`) or the
storage-sharing audit (``--storage``, :mod:`tools.storage_audit`);
``--help`` lists the options.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tools import campaign
from tools.audit.ops import TOOL, _work_items
from tools.audit.report import AuditReport, _fold
from tools.audit.run import audit
from tools.campaign import CampaignError
from tools.errors import AuditError

__all__ = ["main"]


def _registry_main(*, write: bool) -> int:
    """``--registry``: the operator-registry coverage check (:mod:`aliasing.core.registry`)."""
    from aliasing.core import registry

    rows = registry.classify_installed()
    if write:
        unclassified = [r for r in rows if r.kind == "unclassified"]
        if unclassified:
            print(registry.compare_with_committed(rows).summary())
            return 1
        registry.write_classification(rows, registry.committed_path())
        print(f"wrote {registry.committed_path()} ({len(rows)} overloads)")
        return 0
    diff = registry.compare_with_committed(rows)
    print(diff.summary())
    return 0 if diff.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.audit``: run the audit, print the summary, write the reports.

    Exit status 0 when no check found a violation, 1 otherwise. With ``--jobs``,
    ``--shard``, ``--results``, ``--ray`` the ops run as a campaign
    (:mod:`tools.campaign`); ``--merge RESULTS...`` prints and writes the report
    of a campaign's results files instead of running.

    Examples
    --------
    >>> main(["--ops", "abs", "--max-samples", "1", "--no-export", "--quiet"])
    0
    """
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--layouts" in argv:
        from tools.layout_audit import main as layout_main

        return layout_main([a for a in argv if a != "--layouts"])
    if "--storage" in argv:
        from tools.storage_audit import main as storage_main

        return storage_main([a for a in argv if a != "--storage"])
    args = parser.parse_args(argv)
    if args.registry:
        return _registry_main(write=args.write)
    report = _report(parser, args)
    _write_reports(report, args.json, args.markdown)
    if not args.quiet:
        _print_summary(report)
    return 1 if report.violations else 0


def _parser() -> argparse.ArgumentParser:
    """The options of ``python -m tools.audit`` (the campaign's among them)."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.audit",
        description="Run PyTorch's OpInfo samples for real and check the alias analysis against them.",
    )
    parser.add_argument("--ops", nargs="+", metavar="NAME", help="OpInfo names or keys (default: all of op_db)")
    parser.add_argument("--max-samples", type=int, default=None, metavar="N", help="sample inputs per op and variant")
    parser.add_argument("--export-samples", type=int, default=2, metavar="N", help="samples also traced with torch.export (default 2)")
    parser.add_argument("--no-export", action="store_true", help="trace with make_fx only")
    parser.add_argument("--time-budget", type=float, default=None, metavar="S", help="stop starting ops after S seconds")
    parser.add_argument("--sample-timeout", type=float, default=60.0, metavar="S", help="seconds per sample (default 60)")
    parser.add_argument("--no-extra", action="store_true", help="leave out the extra norm-module cases")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the full report as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the summary as Markdown")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--registry",
        action="store_true",
        help="classify every ATen overload of the installed torch and compare with the committed classification",
    )
    parser.add_argument("--write", action="store_true", help="with --registry: write the classification file")
    parser.add_argument(
        "--layouts",
        action="store_true",
        help="run the layout audit instead (tools.layout_audit: meta and fake result layouts against eager; "
        "its options: --layouts --help)",
    )
    parser.add_argument(
        "--storage",
        action="store_true",
        help="run the storage-sharing audit instead (tools.storage_audit: do `pure` overloads' results "
        "share an argument's storage? its options: --storage --help)",
    )
    campaign.add_campaign_arguments(parser)
    return parser


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _report(parser: argparse.ArgumentParser, args: argparse.Namespace) -> AuditReport:
    """The report the options ask for: of the results files of ``--merge``, or of a run (errors exit as usage errors)."""
    try:
        if args.merge is not None:
            settings, outcomes = campaign.merge_results(
                args.merge, tool=TOOL, items=_work_items, allow_missing=args.allow_missing
            )
            return _fold(settings, outcomes)
        return audit(
            args.ops,
            max_samples=args.max_samples,
            export_samples=0 if args.no_export else args.export_samples,
            time_budget=args.time_budget,
            sample_timeout=args.sample_timeout,
            extra=not args.no_extra,
            progress=None if args.quiet else _progress,
            campaign_options=campaign.options_from_args(args),
        )
    except (AuditError, CampaignError) as err:
        parser.error(str(err))


def _write_reports(report: AuditReport, json_path: Path | None, markdown_path: Path | None) -> None:
    """Write the JSON report and the Markdown summary where the options say."""
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    if markdown_path is not None:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(report.to_markdown())


def _print_summary(report: AuditReport) -> None:
    """The headline figures and every violation, on stderr."""
    summary = report.summary()
    for k in ("ops_audited", "variants", "samples", "passes", "violations", "skipped", "imprecise_ops", "runtime_s"):
        print(f"{k}: {summary[k]}", file=sys.stderr)
    for r in report.violations:
        print(f"VIOLATION {r.op} {r.variant} sample {r.sample} ({r.tracer}):\n{r.message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
