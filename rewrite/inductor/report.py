"""What the passes tell the user: log lines, counters, structured-trace artifacts, HTML reports.

Logger ``rewrite.inductor``: each run's summary at INFO (the guard's, then
the clone elimination's), each decision at DEBUG. The full reports are also
structured-trace artifacts (``fx_aliasing_guard``,
``fx_aliasing_clone_elimination``, ``fx_aliasing_html_report``). Each run
adds its counts to ``torch._dynamo.utils.counters["inductor"]``
(:data:`COUNTS`), which Inductor's cache stores with each compiled graph and
adds again when it replays one: a Dynamo compile in which they grow by more
than the passes counted is one the cache replayed, and the INFO line says so
(:func:`follow_compiles`).
"""

from __future__ import annotations

import copy
import itertools
import logging
import re
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.fx

from aliasing.core.analysis import paused_gc
from rewrite.inductor.hazards import GuardReport
from rewrite.pipeline.reports import PipelineReport

__all__ = ["COUNTS", "REPORT_DIR_ENV", "log_pipeline_report"]

#: The adapter's logger (the README documents its name).
log = logging.getLogger("rewrite.inductor")

#: The environment variable naming the folder of the HTML reports when no ``report_dir`` is given.
REPORT_DIR_ENV = "FX_ALIASING_REPORT_DIR"

RUNS, REMOVED, KEPT, GUARDED = (
    "fx_aliasing_runs",
    "fx_aliasing_clones_removed",
    "fx_aliasing_clones_kept",
    "fx_aliasing_hazards_guarded",
)
#: The passes' counts in ``torch._dynamo.utils.counters["inductor"]``: post-grad runs, clones removed and
#: kept, hazards guarded.
COUNTS = (RUNS, REMOVED, KEPT, GUARDED)


def count(key: str, n: int) -> None:
    """Add ``n`` to the count ``key`` of ``counters["inductor"]`` (best effort)."""
    if not n:
        return
    _FOLLOWED.own[key] += n
    try:
        from torch._dynamo.utils import counters

        counters["inductor"][key] += n
    except Exception as e:  # counting is best effort
        log.debug("counters not available: %s", e)


def trace(name: str, payload: Callable[[], str]) -> None:
    """Emit the structured-trace artifact ``name`` (``TORCH_TRACE`` / tlparse; best effort)."""
    try:
        torch._logging.trace_structured(  # type: ignore[attr-defined]  # re-exported without __all__
            "artifact", metadata_fn=lambda: {"name": name, "encoding": "string"}, payload_fn=payload
        )
    except Exception as e:  # tracing is best effort
        log.debug("structured trace failed: %s", e)


def log_guard(report: GuardReport) -> None:
    """Count, log and trace one guard stage's report (nothing at INFO when it guarded nothing)."""
    count(GUARDED, len(report.guarded))
    if not report.guarded and not report.error:
        return
    if log.isEnabledFor(logging.DEBUG):
        for g in report.guarded:
            log.debug("guard: %s", g.describe())
    log.info("%s", report.summary())
    trace("fx_aliasing_guard", lambda: str(report))


def log_clone_elimination(report: PipelineReport) -> None:
    """Count, log (:func:`log_pipeline_report`) and trace one run of the lowering and the clone elimination."""
    count(REMOVED, len(report.removed))
    count(KEPT, len(report.kept))
    log_pipeline_report(report, log)
    trace("fx_aliasing_clone_elimination", lambda: str(report))


def log_pipeline_report(report: PipelineReport, logger: logging.Logger) -> None:
    """Log what one pipeline run did, as the ``torch.compile`` adapter does (the vLLM adapter words
    its own lines, as vLLM's passes do: :mod:`rewrite.vllm`).

    At DEBUG (only when DEBUG is enabled): each lowered op and every op not lowered, every
    decision of every planner round with its condition and evidence, every dropped self-copy;
    then :meth:`PipelineReport.summary` at INFO.

    Examples
    --------
    >>> import logging
    >>> records = []
    >>> class Keep(logging.Handler):
    ...     def emit(self, record):
    ...         records.append(record.getMessage())
    >>> logger = logging.getLogger("fx_aliasing_doctest")
    >>> logger.addHandler(Keep())
    >>> logger.setLevel(logging.DEBUG)
    >>> log_pipeline_report(PipelineReport(), logger)
    >>> records[-1].startswith("fx-aliasing: lowered 0 functional op(s)")
    True
    """
    if logger.isEnabledFor(logging.DEBUG):
        for low in report.lowering.lowered:
            logger.debug("lowered %s (%s) -> %s, clones %s", low.node, low.kind, low.call, ", ".join(low.clones))
        for sk in report.lowering.skipped:
            logger.debug("not lowered %s (%s): %s", sk.node, sk.kind, sk.reason)
        for i, rep in enumerate(report.eliminations):
            for d in rep.decisions:
                cond = f"{d.reason.condition} " if d.reason.condition else ""
                logger.debug(
                    "round %d: %s %s (%s): %s%s %s",
                    i + 1,
                    d.action,
                    d.node,
                    d.original,
                    cond,
                    d.reason,
                    ", ".join(d.evidence),
                )
        for name in report.dropped_copies:
            logger.debug("dropped self-copy %s", name)
    logger.info("%s", report.summary())


# ---------------------------------------------------------------------------
# compiles Inductor's cache replayed


@dataclass
class _Followed:
    """The counts at the start of the Dynamo compile now running (None outside one), what the passes
    of this process counted since, and how many compiles so far the cache replayed runs into."""

    at_start: dict[str, int] | None = None
    own: Counter[str] = field(default_factory=Counter)
    replays: int = 0


_FOLLOWED = _Followed()


def follow_compiles() -> None:
    """Have Dynamo call this module at the start and the end of each compile (idempotent).

    A compile's runs and counts are compared there (:data:`COUNTS`): when the
    cache replayed runs of the pass, the end says so at INFO, with the cached
    compile's counts, and :func:`replays` counts it. Passes call it when made
    and when they run (``torch._dynamo.reset()`` forgets Dynamo's callbacks).
    """
    try:
        from torch._dynamo.callback import callback_handler

        if _compile_started not in callback_handler.start_callbacks:
            callback_handler.register_start_callback(_compile_started)
        if _compile_ended not in callback_handler.end_callbacks:
            callback_handler.register_end_callback(_compile_ended)
    except Exception as e:  # another Dynamo: no line on a cache hit
        log.debug("Dynamo's compile callbacks are not available: %s", e)


def replays() -> int:
    """How many Dynamo compiles of this process so far Inductor's cache replayed runs of the pass into."""
    return _FOLLOWED.replays


def _counts() -> dict[str, int] | None:
    try:
        from torch._dynamo.utils import counters

        return {k: int(counters["inductor"][k]) for k in COUNTS}
    except Exception:
        return None


def _compile_started(args: object) -> None:
    _FOLLOWED.at_start = _counts()
    _FOLLOWED.own.clear()


def _compile_ended(args: object) -> None:
    before, _FOLLOWED.at_start = _FOLLOWED.at_start, None
    now = _counts()
    if before is None or now is None:
        return
    replayed = {k: now[k] - before[k] - _FOLLOWED.own[k] for k in COUNTS}
    if replayed[RUNS] <= 0:
        return
    _FOLLOWED.replays += 1
    log.info(
        "fx-aliasing: Inductor's cache replayed this compile (the cached compile removed %d clone(s), "
        "kept %d, guarded %d hazard(s)), so the pass did not run and has no report of it; to see the "
        "report, compile with Inductor's caches off: TORCHINDUCTOR_FX_GRAPH_CACHE=0 "
        "(or torch._inductor.config.fx_graph_cache = False)",
        replayed[REMOVED],
        replayed[KEPT],
        replayed[GUARDED],
    )


# ---------------------------------------------------------------------------
# HTML reports


#: Numbers of the HTML reports of this process (a number already taken in the folder is skipped).
_REPORT_NUMBERS = itertools.count()


def compile_id() -> object | None:
    """The id of the Dynamo compile running now, or None."""
    try:
        from torch._guards import CompileContext

        return CompileContext.current_compile_id()
    except Exception:
        return None


def snapshot(graph: torch.fx.Graph) -> torch.fx.GraphModule | None:
    """A copy of ``graph`` in a ``GraphModule`` of its own (attributes by reference), whose names
    continue as the graph's do (so a lowering of the copy names its nodes as it names the graph's);
    None when it cannot be made (logged)."""
    try:
        copied = copy.deepcopy(graph)  # Graph.__deepcopy__ copies node meta shallowly
        names, mine = getattr(graph, "_graph_namespace", None), getattr(copied, "_graph_namespace", None)
        if names is not None and mine is not None:  # the names a lowering picks depend on the names used before
            mine._used_names = set(names._used_names)
            mine._base_count = dict(names._base_count)
        owner = graph.owning_module
        root = owner if isinstance(owner, torch.nn.Module) else torch.nn.Module()
        return torch.fx.GraphModule(root, copied, class_name="CompiledGraph")
    except Exception as e:  # a report is best effort
        log.warning("fx-aliasing: no HTML report, the graph could not be copied: %s: %s", type(e).__name__, e)
        return None


def write_html_report(
    folder: Path, before: torch.fx.GraphModule, graph: torch.fx.Graph, report: PipelineReport, donated: tuple[int, ...]
) -> Path | None:
    """Write the HTML report of one run into ``folder``: the analysis of ``before`` (lowered as the
    run lowered the graph), the run's decisions, and ``graph`` as the run left it. Returns the path,
    or None when it could not be written (logged; never raises)."""
    try:
        from aliasing import analyze
        from rewrite.explain import Explanation
        from rewrite.lowering.functional import lower_functional_ops

        with paused_gc(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the pass's own analysis has already warned
            if report.lowering.lowered:
                lowered = lower_functional_ops(before.graph)
                if lowered.clones != report.lowering.clones:
                    log.debug("fx-aliasing: the report's lowering named its clones otherwise: %s", lowered.clones)
                before.recompile()
            analysis = analyze(before, donated_inputs=donated)
            after = snapshot(graph)
        cid = compile_id()
        kind = "backward" if any(n.name.startswith("tangents") for n in graph.find_nodes(op="placeholder")) else "forward"
        name = f"compiled graph ({kind}) of compile {cid if cid is not None else '-'}"
        page = Explanation(before, analysis, report.elimination(), after, donated, name).html()
        folder.mkdir(parents=True, exist_ok=True)
        path = _write_new(folder, re.sub(r"[^0-9A-Za-z]+", "_", str(cid)).strip("_") if cid is not None else "none", kind, page)
    except Exception as e:  # a report is best effort: never fail the compile
        log.warning("fx-aliasing: the HTML report could not be written to %s: %s: %s", folder, type(e).__name__, e)
        return None
    log.info("fx-aliasing: wrote the HTML report of %s to %s", name, path)
    trace("fx_aliasing_html_report", lambda: str(path.resolve()))
    return path


def _write_new(folder: Path, cid: str, kind: str, page: str) -> Path:
    """Write ``page`` to the first ``fx_aliasing_<n>_compile_<cid>_<kind>.html`` of ``folder`` not taken."""
    while True:
        path = folder / f"fx_aliasing_{next(_REPORT_NUMBERS):03d}_compile_{cid}_{kind}.html"
        try:
            with path.open("x", encoding="utf-8") as f:
                f.write(page)
            return path
        except FileExistsError:
            continue
