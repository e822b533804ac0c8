"""The effects audit's results: one :class:`SampleResult` per check, the :class:`AuditReport`, its Markdown.

A campaign's outcomes (one per op, :mod:`tools.campaign`) fold
into an :class:`AuditReport` (:func:`_fold`, in audit order whatever order the
ops finished in); :meth:`AuditReport.to_json` is the JSON report and
:func:`render_markdown` its Markdown summary (``benchmarks/results/audit.md``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from tools.audit.ops import TRACERS, VARIANTS, _work_items
from tools.campaign import Outcome

_EXAMPLE_LIMIT = 300
_DETAILS_LIMIT = 5  # violations described in full per op (all are counted)


# ---------------------------------------------------------------------------
# results


@dataclasses.dataclass(frozen=True)
class SampleResult:
    """The outcome of one check: one op, variant, sample and tracer.

    Attributes
    ----------
    op
        The op's key: the OpInfo's name, plus ``.variant_test_name`` if it has one.
    variant
        One of :data:`VARIANTS`.
    sample
        Index of the sample input in the op's ``sample_inputs`` (0-based).
    tracer
        One of :data:`TRACERS`.
    status
        ``"pass"``, ``"violation"`` or ``"skipped"``.
    reason
        For a skip: its category (``"eager call raised RuntimeError"``...).
    message
        For a violation: the oracle's message; for a skip: the error text.
    false_alias, false_overlap, false_writers
        Imprecise claims of a passing check (see :class:`aliasing.verification.oracle.Exactness`).
    examples
        Up to three imprecise claims, as text.
    trace_divergence
        Inputs the eager call changed but the traced graph's run did not (the
        graph does not represent the call; the analysis is checked on the graph).
    fake_mismatch
        Graph outputs whose real sizes or strides differ from their fake tensor
        in ``meta['val']`` (the analysis reads layouts from the fake tensors).
    graph_ops
        The ``call_function`` targets of the traced graph, in order, without repeats.
    sample_text
        A short description of the sample (shapes, dtypes, other arguments).
    """

    op: str
    variant: str
    sample: int
    tracer: str
    status: str
    reason: str = ""
    message: str = ""
    false_alias: int = 0
    false_overlap: int = 0
    false_writers: int = 0
    examples: tuple[str, ...] = ()
    trace_divergence: tuple[str, ...] = ()
    fake_mismatch: tuple[str, ...] = ()
    graph_ops: tuple[str, ...] = ()
    sample_text: str = ""

    @property
    def imprecise_claims(self) -> int:
        """Number of claims the run did not confirm."""
        return self.false_alias + self.false_overlap + self.false_writers


# ---------------------------------------------------------------------------
# the report


@dataclasses.dataclass(frozen=True)
class AuditReport:
    """Everything one audit found.

    Attributes
    ----------
    results
        One :class:`SampleResult` per check, in audit order.
    dtypes
        The dtype each audited op ran with.
    not_run
        Ops that produced no check, with the reason (no CPU dtype, time budget...).
    settings
        The audit's parameters.
    runtime_s
        Seconds the ops took, summed over ops (a one-process run's wall-clock time; a
        parallel or merged run's total work).
    """

    results: tuple[SampleResult, ...]
    dtypes: dict[str, str]
    not_run: dict[str, str]
    settings: dict[str, Any]
    runtime_s: float

    @property
    def violations(self) -> tuple[SampleResult, ...]:
        """The checks where the analysis missed what the run showed."""
        return tuple(r for r in self.results if r.status == "violation")

    @property
    def skipped(self) -> tuple[SampleResult, ...]:
        """The checks that could not be made, each with its reason."""
        return tuple(r for r in self.results if r.status == "skipped")

    @property
    def passes(self) -> tuple[SampleResult, ...]:
        """The checks the analysis passed."""
        return tuple(r for r in self.results if r.status == "pass")

    def per_op(self) -> dict[str, dict[str, Any]]:
        """Figures per op (see :meth:`to_json`)."""
        ops: dict[str, dict[str, Any]] = {}
        for key in sorted({r.op for r in self.results} | set(self.dtypes)):
            rs = [r for r in self.results if r.op == key]
            by_variant: dict[str, dict[str, dict[str, int]]] = {}
            for r in rs:
                cell = by_variant.setdefault(r.variant, {}).setdefault(
                    r.tracer, {"samples": 0, "passes": 0, "violations": 0, "skipped": 0}
                )
                cell["samples"] += 1
                cell[{"pass": "passes", "violation": "violations", "skipped": "skipped"}[r.status]] += 1
            skips = Counter(r.reason for r in rs if r.status == "skipped")
            examples: dict[str, str] = {}
            for r in rs:
                if r.status == "skipped" and r.reason not in examples:
                    examples[r.reason] = r.message[:_EXAMPLE_LIMIT]
            ops[key] = {
                "dtype": self.dtypes.get(key),
                "variants": [v for v in VARIANTS if v in by_variant],
                "samples": len(rs),
                "passes": sum(r.status == "pass" for r in rs),
                "violations": sum(r.status == "violation" for r in rs),
                "skipped": sum(r.status == "skipped" for r in rs),
                "imprecise_claims": {
                    "false_alias": sum(r.false_alias for r in rs),
                    "false_overlap": sum(r.false_overlap for r in rs),
                    "false_writers": sum(r.false_writers for r in rs),
                },
                "imprecise_checks": sum(r.imprecise_claims > 0 for r in rs),
                "imprecision_examples": sorted({e for r in rs for e in r.examples})[:5],
                "trace_divergence": sum(bool(r.trace_divergence) for r in rs),
                "fake_mismatch": sum(bool(r.fake_mismatch) for r in rs),
                "fake_mismatch_examples": sorted({f"{r.variant}/{r.tracer}: {m}" for r in rs for m in r.fake_mismatch})[:3],
                "by_variant": {v: by_variant[v] for v in VARIANTS if v in by_variant},
                "skips": dict(sorted(skips.items())),
                "skip_examples": dict(sorted(examples.items())),
                "violations_by_variant": dict(
                    sorted(Counter(f"{r.variant}/{r.tracer}" for r in rs if r.status == "violation").items())
                ),
                "violation_details": [
                    {
                        "variant": r.variant,
                        "sample": r.sample,
                        "tracer": r.tracer,
                        "sample_text": r.sample_text,
                        "graph_ops": list(r.graph_ops),
                        "fake_mismatch": list(r.fake_mismatch),
                        "message": r.message,
                    }
                    for r in [r for r in rs if r.status == "violation"][:_DETAILS_LIMIT]
                ],
            }
        return ops

    def summary(self) -> dict[str, Any]:
        """Headline figures: ops, variants, samples, passes, violations, imprecise ops, skips by reason.

        Examples
        --------
        >>> from tools.audit import audit
        >>> report = audit(["abs"], max_samples=1, export_samples=0)
        >>> s = report.summary()
        >>> s["violations"], s["ops_audited"], s["samples"] == s["passes"] + s["skipped"]
        (0, 1, True)
        """
        variants = {(r.op, r.variant) for r in self.results}
        samples = {(r.op, r.variant, r.sample) for r in self.results}
        imprecise = {r.op for r in self.results if r.imprecise_claims}
        by_tracer = {
            t: {
                "checks": sum(r.tracer == t for r in self.results),
                "passes": sum(r.tracer == t and r.status == "pass" for r in self.results),
                "violations": sum(r.tracer == t and r.status == "violation" for r in self.results),
                "skipped": sum(r.tracer == t and r.status == "skipped" for r in self.results),
            }
            for t in TRACERS
        }
        return {
            "ops_audited": len({r.op for r in self.results}),
            "ops_not_run": len(self.not_run),
            "variants": len(variants),
            "sample_inputs": len(samples),
            "samples": len(self.results),
            "passes": len(self.passes),
            "violations": len(self.violations),
            "ops_with_violations": len({r.op for r in self.violations}),
            "skipped": len(self.skipped),
            "skipped_by_reason": dict(sorted(Counter(r.reason for r in self.skipped).items(), key=lambda kv: (-kv[1], kv[0]))),
            "imprecise_ops": len(imprecise),
            "imprecise_claims": sum(r.imprecise_claims for r in self.results),
            "trace_divergences": sum(bool(r.trace_divergence) for r in self.results),
            "fake_mismatches": sum(bool(r.fake_mismatch) for r in self.results),
            "by_tracer": by_tracer,
            "runtime_s": round(self.runtime_s, 1),
        }

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data: settings, summary, ops not run, and figures per op.

        Per op: ``dtype``, ``variants``, ``samples`` (checks), ``passes``,
        ``violations``, ``skipped``, ``imprecise_claims`` (by kind),
        ``imprecise_checks``, ``imprecision_examples``, ``trace_divergence``,
        ``fake_mismatch`` (and examples), ``by_variant`` (per variant and
        tracer), ``skips`` (count per reason), ``skip_examples`` (the first
        message per reason), ``violations_by_variant`` and
        ``violation_details`` (the first five violations in full).
        """
        return {
            "torch_version": torch.__version__,
            "settings": self.settings,
            "summary": self.summary(),
            "not_run": dict(sorted(self.not_run.items())),
            "ops": self.per_op(),
        }

    def to_markdown(self, top: int = 40) -> str:
        """A summary table, skips by reason, violations, and the ``top`` most imprecise ops
        (:func:`render_markdown` of :meth:`to_json`)."""
        return render_markdown(self.to_json(), top)


# ---------------------------------------------------------------------------
# its Markdown


def _first_claim(message: str) -> str:
    lines = message.splitlines()
    return lines[1].strip() if len(lines) > 1 else message.strip()


def render_markdown(data: dict[str, Any], top: int = 40) -> str:
    """The Markdown summary of an audit's JSON report (:meth:`AuditReport.to_json`).

    Parameters
    ----------
    data : dict
        The JSON report, for example read back from ``--json``.
    top : int
        How many of the most imprecise ops to list.

    Returns
    -------
    str

    Examples
    --------
    >>> from tools.audit import audit
    >>> text = render_markdown(audit(["t"], max_samples=1, export_samples=0).to_json())
    >>> text.splitlines()[0], "| **violations** | **0** |" in text
    ('# Effects audit', True)
    """
    ops: dict[str, Any] = data["ops"]
    lines = _figure_lines(data)
    lines += _skip_lines(data)
    lines += _violation_lines(ops)
    lines += _imprecision_lines(ops, top)
    lines += _trace_lines(ops)
    return "\n".join(lines) + "\n"


def _figure_lines(data: dict[str, Any]) -> list[str]:
    """The title, what was run, the table of headline figures and the table per tracer."""
    s = data["summary"]
    st = data["settings"]
    limit = f"at most {st['max_samples']}" if st.get("max_samples") else "all"
    lines = [
        "# Effects audit",
        "",
        f"`python -m tools.audit` on torch {data['torch_version']}, CPU, one thread: every OpInfo of "
        "`op_db` (plus the extra norm-module cases, `extra.*`) in its function, in-place and `out=` variants "
        "(`out=` of the right size, of size 0 and of a wrong shape), traced with "
        "`make_fx(tracing_mode=\"fake\")` and, for the first "
        f"{st.get('export_samples')} sample(s) of each op and variant only (export is slow), with "
        "`torch.export.export`; each graph analysed and run on real tensors under the memory oracle "
        f"(`aliasing.verification.oracle.check_analysis`), {limit} sample inputs per op and variant. A *sample* below is "
        "one check: one op, variant, sample input and tracer. A skipped sample is never counted as a pass.",
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| ops audited | {s['ops_audited']} |",
        f"| ops not run | {s['ops_not_run']} |",
        f"| variants (op, variant) | {s['variants']} |",
        f"| sample inputs (op, variant, sample) | {s['sample_inputs']} |",
        f"| samples (checks) | {s['samples']} |",
        f"| passes | {s['passes']} |",
        f"| **violations** | **{s['violations']}** |",
        f"| ops with violations | {s['ops_with_violations']} |",
        f"| skipped | {s['skipped']} |",
        f"| imprecise ops | {s['imprecise_ops']} |",
        f"| imprecise claims | {s['imprecise_claims']} |",
        f"| checks whose graph did not write an input eager wrote | {s['trace_divergences']} |",
        f"| checks whose fake output layout differs from the real one | {s['fake_mismatches']} |",
        f"| runtime | {s['runtime_s']} s |",
        "",
        "| tracer | checks | passes | violations | skipped |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t, f in s["by_tracer"].items():
        lines.append(f"| {t} | {f['checks']} | {f['passes']} | {f['violations']} | {f['skipped']} |")
    return lines


def _skip_lines(data: dict[str, Any]) -> list[str]:
    """The skipped samples by reason, and the ops not run (if any)."""
    lines = ["", "## Skipped samples by reason", "", "| reason | samples |", "| --- | --- |"]
    for reason, n in data["summary"]["skipped_by_reason"].items():
        lines.append(f"| {reason} | {n} |")
    if data["not_run"]:
        lines += ["", "## Ops not run", "", "| op | reason |", "| --- | --- |"]
        lines += [f"| `{k}` | {v} |" for k, v in sorted(data["not_run"].items())]
    return lines


def _violation_lines(ops: dict[str, Any]) -> list[str]:
    """The violations: one row per op that has any, with its first violation ("None." without)."""
    lines = ["", "## Violations", ""]
    bad = {k: v for k, v in ops.items() if v["violations"]}
    if not bad:
        lines.append("None.")
        return lines
    lines += [
        "| op | variant / tracer: checks | graph ops | first sample | first missed claim |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k, v in bad.items():
        first = v["violation_details"][0]
        where = ", ".join(f"{w}: {n}" for w, n in v["violations_by_variant"].items())
        graph_ops = ", ".join(f"`{g}`" for g in first["graph_ops"] if g != "getitem")
        lines.append(
            f"| `{k}` | {where} | {graph_ops} | {first['sample']}: `{first['sample_text']}` "
            f"| {_first_claim(first['message'])} |"
        )
    return lines


def _imprecision_lines(ops: dict[str, Any], top: int) -> list[str]:
    """The ``top`` ops with the most imprecise claims, most first."""
    lines = [
        "",
        f"## Imprecision: top {top} ops",
        "",
        "Claims of passing checks that the run never confirmed (false alias / overlap / writer), summed "
        "over the op's checks. Most come from `out=` tensors of the wrong size, whose values become "
        "\"unknown storage\" (may alias and be written by anything).",
        "",
        "| op | checks | imprecise checks | false alias | false overlap | false writers | example |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    ranked = sorted(
        (k for k, v in ops.items() if sum(v["imprecise_claims"].values())),
        key=lambda k: (-sum(ops[k]["imprecise_claims"].values()), k),
    )
    for k in ranked[:top]:
        v = ops[k]
        c = v["imprecise_claims"]
        ex = v["imprecision_examples"][0] if v["imprecision_examples"] else ""
        lines.append(
            f"| `{k}` | {v['samples']} | {v['imprecise_checks']} | {c['false_alias']} | {c['false_overlap']} "
            f"| {c['false_writers']} | `{ex}` |"
        )
    return lines


def _trace_lines(ops: dict[str, Any]) -> list[str]:
    """The ops whose traces do not write what eager writes, and those whose fake layouts are not the real ones."""
    lines: list[str] = []
    diverging = [k for k, v in ops.items() if v["trace_divergence"]]
    if diverging:
        lines += [
            "",
            "## Traces that do not write what eager writes",
            "",
            "Checks whose traced graph, run for real, left unchanged an input the eager call changed "
            "(the analysis is checked against the graph; these say the graph does not represent the call):",
            "",
        ]
        lines += [f"- `{k}`: {ops[k]['trace_divergence']} check(s)" for k in diverging]
    lying = [k for k, v in ops.items() if v["fake_mismatch"]]
    if lying:
        lines += [
            "",
            "## Fake tensors that do not match the real layout",
            "",
            "Checks where a graph output's real sizes, strides or offset differ from its fake tensor in "
            "`meta['val']` (the analysis takes regions from the fake tensors):",
            "",
        ]
        lines += [f"- `{k}`: {ops[k]['fake_mismatch']} check(s); e.g. {ops[k]['fake_mismatch_examples'][0]}" for k in lying]
    return lines


# ---------------------------------------------------------------------------
# folding a campaign's outcomes


def _sample_result(data: dict[str, Any]) -> SampleResult:
    tuples = ("examples", "trace_divergence", "fake_mismatch", "graph_ops")
    fields: dict[str, Any] = {k: tuple(v) if k in tuples else v for k, v in data.items()}
    return SampleResult(**fields)


def _fold(
    settings: dict[str, Any],
    outcomes: dict[str, Outcome],
    not_started: Sequence[str] = (),
    time_budget: float | None = None,
) -> AuditReport:
    """The report of a campaign's outcomes, in audit order (whatever order they finished in)."""
    results: list[SampleResult] = []
    dtypes: dict[str, str] = {}
    not_run: dict[str, str] = {}
    for item in _work_items(settings):
        outcome = outcomes.get(item.key)
        if outcome is None:
            if item.key in not_started:
                not_run[item.key] = f"time budget of {time_budget} s spent"
            continue
        if outcome.status != "ok":
            not_run[item.key] = f"{outcome.status}: {outcome.error}"[:_EXAMPLE_LIMIT]
            continue
        value = outcome.value
        if value["dtype"] is not None:
            dtypes[item.key] = value["dtype"]
        if value["not_run"]:
            not_run[item.key] = value["not_run"]
        results.extend(_sample_result(r) for r in value["results"])
    report_settings = {
        "ops": settings["ops"],
        "max_samples": settings["max_samples"],
        "export_samples": settings["export_samples"],
        "time_budget_s": time_budget,
        "sample_timeout_s": settings["sample_timeout_s"],
        "extra_cases": settings["extra_cases"],
        "dtype_preference": settings["dtype_preference"],
        "custom_effects": settings["custom_effects"],
    }
    if settings["imports"]:
        report_settings["imports"] = settings["imports"]
    runtime = sum(o.seconds for o in outcomes.values())
    return AuditReport(tuple(results), dtypes, not_run, report_settings, runtime)

