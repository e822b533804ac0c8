"""Long fuzzing campaigns: ``python -m tools.soak --minutes N [--seed S] [--out DIR]``,
or over fixed rounds: ``--rounds R`` (seeds ``S .. S + R - 1``) or ``--seeds A..B``.

Draws random programs (:func:`rewrite.testing.programs`) until the time is up
(or the rounds are done) and checks, for each one:

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
its end). A round is deterministic (its seed and settings draw the same programs
in any process), so a campaign over fixed rounds is a list of work items for
:mod:`tools.campaign`: ``--jobs N`` runs them in N worker processes,
``--shard K/N`` runs one of N disjoint parts, ``--results PATH`` records each
round as it ends (and resumes from it), ``--ray ADDRESS`` runs them on a Ray
cluster, and ``--merge RESULTS...`` prints the figures of shards' results files;
the figures are those of one run over the same rounds whatever the split. The
figures are printed at the end, then as one JSON line:
``programs_run`` counts every program checked, Hypothesis's shrinking runs
included; clones seen, removed and kept are summed over those programs;
``failures`` counts failing rounds by check (at most 20 repro files per check);
``rounds_failed`` counts rounds that did not run to their end (a harness error,
a worker that died or ran past ``--item-timeout``); ``minutes`` sums the rounds'
times. While it runs, a progress line goes to stderr every ``--progress`` seconds
(default 30; 0: none): rounds done (of those planned), programs, failures.

``--pass MODULE:FUNCTION`` checks your own pass instead of the library's: the
function (or an instance of the class, made with no arguments) is imported in this
process and in every worker, and called as :func:`rewrite.testing.check_pass` calls a
pass: on a copy of each program's ``GraphModule`` (or its ``Graph``, for a pass
annotated ``torch.fx.Graph`` or with a ``uuid()`` method, as Inductor's custom passes),
with ``donated_inputs=`` the program's donated inputs if it takes that keyword. The
checks are then ``raises`` (the pass raises, or leaves a graph that fails
``graph.lint()``) and ``equivalence``; clones seen and removed are counted from the
graphs. The repro files load the pass and check it again (run them where the soak ran).

Examples
--------
>>> from tools.soak import main
>>> main(["--minutes", "0.05", "--seed", "1", "--out", "/tmp/fxa-soak-doctest"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import inspect
import itertools
import json
import os
import sys
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

import aliasing
import rewrite
from aliasing.verification.oracle import check_analysis
from rewrite.errors import NotEquivalent
from rewrite.planning.candidates import is_clone_candidate
from rewrite.testing.equivalence import OracleError, check_equivalent, copy_program
from rewrite.testing.programs import Program, check_pass, programs
from rewrite.testing.programs.checking import PassFn
from rewrite.testing.programs.program import TRACING_MODES
from tools import campaign
from tools.campaign import CampaignError, CampaignOptions, Outcome, WorkItem
from tools.errors import SoakError, SoakFailure

__all__ = [
    "CHECKS",
    "PASS_CHECKS",
    "TOOL",
    "Figures",
    "SoakError",
    "SoakFailure",
    "check_program",
    "check_user_pass",
    "load_pass",
    "main",
    "run_campaign",
]

#: The checks run on each program, in order.
CHECKS: tuple[str, ...] = ("analysis", "raises", "equivalence", "idempotence")
#: The checks run on each program for a pass of your own (``--pass``).
PASS_CHECKS: tuple[str, ...] = ("raises", "equivalence")

_EXAMPLES_PER_ROUND = 25
_MAX_REPROS_PER_CHECK = 20  # later failures of the same check are counted, not written



@dataclass
class Figures:
    """What a campaign did. ``failures`` counts shrunk failures by check."""

    minutes: float = 0.0
    seed: int = 0
    tracing_mode: str = "fake"
    pass_spec: str = ""  # ``--pass MODULE:FUNCTION``; "" for the library's pass
    rounds: int = 0
    rounds_failed: int = 0
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
            f"soak: {self.minutes:.1f} min, seed {self.seed}, {self.rounds} rounds"
            + (f" ({self.rounds_failed} did not run to their end)" if self.rounds_failed else "")
            + (f", pass {self.pass_spec}" if self.pass_spec else ""),
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
        analysis = aliasing.analyze(gm, donated_inputs=donated)
        for make_inputs in program.input_sets:  # the example, then the boundary sizes (export-dynamic)
            check_analysis(analysis, gm, make_inputs())
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
        for make_inputs in program.input_sets:
            check_equivalent(gm, rewritten, make_inputs, donated_inputs=donated)
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


def load_pass(spec: str) -> PassFn:
    """The pass ``spec`` names: ``MODULE:FUNCTION`` (``FUNCTION`` may be dotted, ``Class.method``);
    a class is instantiated with no arguments (Inductor's custom passes are classes).

    Raises
    ------
    SoakError
        For a spec not of that form, a module that does not import, a missing name or
        something not callable: one line, naming what is wrong.

    Examples
    --------
    >>> load_pass("tools.broken:drop_every_clone").__name__
    'drop_every_clone'
    >>> load_pass("tools.broken")
    Traceback (most recent call last):
    ...
    tools.errors.SoakError: 'tools.broken' is not MODULE:FUNCTION (e.g. mypkg.passes:my_pass)
    """
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name.strip() or not name.strip():
        raise SoakError(f"{spec!r} is not MODULE:FUNCTION (e.g. mypkg.passes:my_pass)")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as err:  # ImportError, or anything the module raises while it imports
        raise SoakError(f"cannot import {module_name!r}: {type(err).__name__}: {err}") from None
    for part in name.split("."):
        if not hasattr(found, part):
            raise SoakError(f"module {module_name!r} has no {name!r}") from None
        found = getattr(found, part)
    if isinstance(found, type):
        try:
            found = found()
        except Exception as err:
            raise SoakError(f"cannot make a {spec} with no arguments: {type(err).__name__}: {err}") from None
    if not callable(found):
        raise SoakError(f"{spec} is a {type(found).__name__}, not a callable pass")
    pass_fn: PassFn = found
    return pass_fn


@functools.lru_cache(maxsize=8)
def _loaded(spec: str) -> PassFn:
    return load_pass(spec)


def _takes_donated(pass_fn: PassFn) -> bool:
    try:
        return "donated_inputs" in inspect.signature(pass_fn).parameters
    except (TypeError, ValueError):
        return False


def _for_program(pass_fn: PassFn, donated: tuple[int, ...]) -> PassFn:
    """``pass_fn`` with ``donated_inputs=donated`` if it takes that keyword (not for an Inductor
    pass object: its ``uuid()`` says it takes a Graph, which a ``partial`` would hide)."""
    if callable(getattr(pass_fn, "uuid", None)) or not _takes_donated(pass_fn):
        return pass_fn
    takes_donated: Any = pass_fn  # (a pass with the keyword, whichever its first argument)
    bound: PassFn = functools.partial(takes_donated, donated_inputs=donated)
    return bound


def _clones(gm: torch.fx.GraphModule) -> int:
    return sum(1 for node in gm.graph.nodes if is_clone_candidate(node))


def check_user_pass(program: Program, spec: str) -> tuple[int, int]:
    """Check the pass ``spec`` (``--pass``) on ``program`` with :func:`rewrite.testing.check_pass`;
    return (clones in the program, clones the pass removed).

    Raises
    ------
    SoakFailure
        ``equivalence`` when the rewritten program differs (or the oracle cannot judge it),
        ``raises`` when the pass raises or its graph fails ``graph.lint()``.

    Examples
    --------
    >>> from hypothesis import find
    >>> program = find(programs(max_ops=3), lambda p: True)
    >>> check_user_pass(program, "tools.broken:output_only_pass")[0] >= 0
    True
    """
    pass_fn = _for_program(_loaded(spec), program.donated_inputs)
    try:
        rewritten = check_pass(pass_fn, program)
    except NotEquivalent as err:
        raise SoakFailure("equivalence", _without_source(str(err))) from err
    except OracleError as err:  # not a verdict on the pass: the program cannot be judged
        raise SoakFailure("equivalence", f"the oracle cannot judge this program: {_without_source(str(err))}") from err
    except Exception as err:  # the pass raised, or its graph fails lint (strict)
        raise SoakFailure("raises", f"{type(err).__name__}: {_without_source(str(err))}") from err
    seen = _clones(program.graph_module)
    return seen, max(0, seen - _clones(rewritten))


def _without_source(message: str) -> str:
    """``check_pass``'s message without the program's source (the repro file holds it already)."""
    head, sep, rest = message.partition("\n\nstandalone repro of the program:\n")
    if not sep:
        return message
    _, sep, graph = rest.partition("\n\nrewritten graph:\n")
    return head + (f"\n\nrewritten graph:\n{graph}" if sep else "")


_PASS_CHECK_CODE = """\
import functools
import importlib
import inspect
import os
import sys
import types

from rewrite.testing import check_pass

# the pass of --pass, loaded as the soak loaded it (run this where the soak ran, so that it imports)
sys.path[:0] = [os.getcwd()]
module, _, name = {spec!r}.partition(":")
pass_fn = importlib.import_module(module)
for part in name.split("."):
    pass_fn = getattr(pass_fn, part)
if isinstance(pass_fn, type):
    pass_fn = pass_fn()
if not callable(getattr(pass_fn, "uuid", None)) and "donated_inputs" in inspect.signature(pass_fn).parameters:
    pass_fn = functools.partial(pass_fn, donated_inputs=DONATED_INPUTS)
program = types.SimpleNamespace(
    graph_module=gm,
    donated_inputs=DONATED_INPUTS,
    input_sets=globals().get("input_sets", [make_inputs]),
    source=lambda: "(this file)",
)
print(check_pass(pass_fn, program).code)  # raises as the soak's check did
"""


_CHECK_CODE = {
    "analysis": """\
import aliasing
from rewrite.testing import check_analysis

analysis = aliasing.analyze(gm, donated_inputs=DONATED_INPUTS)
for make in globals().get("input_sets", [make_inputs]):
    check_analysis(analysis, gm, make())
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
for make in globals().get("input_sets", [make_inputs]):
    check_equivalent(gm, rewritten, make, donated_inputs=DONATED_INPUTS)
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


def repro_source(program: Program, failure: SoakFailure, pass_spec: str = "") -> str:
    """A standalone script: the program, then the check that failed (with its message as comments);
    for a pass of your own (``pass_spec``, ``--pass``), the script runs that pass."""
    message = "\n".join(f"# {line}".rstrip() for line in str(failure).splitlines())
    check = _PASS_CHECK_CODE.format(spec=pass_spec) if pass_spec else _CHECK_CODE[failure.check]
    header = f"# fx-aliasing soak failure: {failure.check}" + (f" (pass {pass_spec})" if pass_spec else "")
    return f"{header}\n{message}\n\n{program.source()}\n# --- the failing check ---\n{check}"


def _write_repro(out: str, check: str, source: str, index: int) -> str:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"repro_{check}_{index:03d}.py")
    with open(path, "w") as f:
        f.write(source)
    return path


#: The campaign tool name of the soak (results files name it; ``python -m tools.campaign merge``).
TOOL = "tools.soak"


def _round(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """One campaign item: the round of ``config["examples"]`` examples under Hypothesis seed ``seed``.

    Deterministic: the same seed and settings draw the same programs in any process
    (no example database, no deadline). Returns the round's counts, its shrunk failure
    (``{"check", "repro"}``, the repro script's text) or ``None``, and a harness error
    (generator or Hypothesis, not a check) as text or ``""``.

    Examples
    --------
    >>> r = _round({"max_ops": 4, "tracing_mode": "fake", "examples": 2}, 7)
    >>> r["programs"] >= 2, r["failure"]
    (True, None)
    """
    failing: list[tuple[Program, SoakFailure]] = []
    counts = {"programs": 0, "statements": 0, "seen": 0, "removed": 0}
    spec: str = config.get("pass", "")
    if spec:
        _loaded(spec)  # a pass that cannot load is the round's harness error, before any program

    @hypothesis_seed(seed)
    @settings(
        max_examples=config["examples"],
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
    )
    @given(
        programs(
            max_ops=config["max_ops"],
            tracing_mode=config["tracing_mode"],
            allow_untrusted_ops=config.get("untrusted_ops", False),
        )
    )
    def one_round(program: Program) -> None:
        counts["programs"] += 1
        counts["statements"] += program.num_ops
        try:
            seen, removed = check_user_pass(program, spec) if spec else check_program(program)
        except SoakFailure as failure:
            failing.append((program, failure))  # the last one is Hypothesis's shrunk example
            raise
        counts["seen"] += seen
        counts["removed"] += removed

    failure: dict[str, str] | None = None
    harness_error = ""
    try:
        one_round()
    except SoakFailure:
        program, found = failing[-1]
        failure = {"check": found.check, "repro": repro_source(program, found, spec)}
    except Exception:  # a generator or harness error: reported, and the campaign goes on
        harness_error = traceback.format_exc()
    return {**counts, "failure": failure, "harness_error": harness_error}


def _seed_key(seed: int) -> str:
    return f"seed-{seed:010d}"


def _work_items(settings: dict[str, Any]) -> list[WorkItem]:
    """The rounds of a campaign over the seeds ``settings["seeds"] = [first, last]``."""
    first, last = settings["seeds"]
    return [WorkItem(_seed_key(s), s) for s in range(first, last + 1)]


def _endless(first: int) -> Iterator[WorkItem]:
    return (WorkItem(_seed_key(s), s) for s in itertools.count(first))


def _fold(settings: dict[str, Any], outcomes: dict[str, Outcome], *, out: str, echo: bool) -> Figures:
    """The figures of a campaign's rounds, in seed order (whatever order they finished in);
    writes the repro files of failing rounds to ``out``."""
    spec = settings.get("pass", "")
    checks = PASS_CHECKS if spec else CHECKS
    figures = Figures(
        seed=settings["seeds"][0], tracing_mode=settings["tracing_mode"], pass_spec=spec, failures=dict.fromkeys(checks, 0)
    )
    for outcome in sorted(outcomes.values(), key=lambda o: int(o.key.split("-")[1])):
        figures.rounds += 1
        if outcome.status != "ok":
            figures.rounds_failed += 1
            if echo:
                print(f"round {outcome.key}: {outcome.status}: {outcome.error}", file=sys.stderr)
            continue
        r = outcome.value
        figures.programs_run += r["programs"]
        figures.statements += r["statements"]
        figures.clones_seen += r["seen"]
        figures.clones_removed += r["removed"]
        if r["harness_error"]:
            figures.rounds_failed += 1
            if echo:
                print(f"round {outcome.key}: harness error:\n{r['harness_error']}", file=sys.stderr)
        failure = r["failure"]
        if failure is not None:
            figures.failures[failure["check"]] += 1
            if figures.failures[failure["check"]] <= _MAX_REPROS_PER_CHECK:
                path = _write_repro(out, failure["check"], failure["repro"], len(figures.repro_files))
                figures.repro_files.append(path)
                if echo:
                    print(f"failure ({failure['check']}), repro written to {path}", file=sys.stderr)
    figures.clones_kept = figures.clones_seen - figures.clones_removed
    figures.minutes = sum(o.seconds for o in outcomes.values()) / 60
    return figures


def run_campaign(
    minutes: float | None = None,
    *,
    seed: int = 0,
    out: str = "repros",
    max_ops: int = 10,
    echo: bool = True,
    tracing_mode: str = "fake",
    rounds: int | None = None,
    examples: int = _EXAMPLES_PER_ROUND,
    campaign_options: CampaignOptions | None = None,
    untrusted_ops: bool = False,
    pass_spec: str = "",
    progress_every: float | None = None,
) -> Figures:
    """Draw and check programs; return the figures (see the module docstring).

    Either for ``minutes`` (rounds of seeds ``seed``, ``seed + 1``, ... until the
    time is up; a round started before then runs to its end), or for exactly
    ``rounds`` rounds of seeds ``seed .. seed + rounds - 1``: a fixed set of items,
    whose figures are the same whatever ``campaign_options`` (worker processes,
    shards, a resumed results file, Ray) run them. ``pass_spec`` (``MODULE:FUNCTION``)
    checks that pass instead of the library's (:func:`check_user_pass`);
    ``progress_every`` prints a progress line to stderr at most every so many seconds.

    Examples
    --------
    >>> figures = run_campaign(0.02, seed=3, out="/tmp/fxa-soak-doctest", echo=False)
    >>> figures.programs_run > 0
    True
    >>> run_campaign(rounds=2, seed=5, examples=2, max_ops=4, echo=False).rounds
    2
    """
    if (minutes is None) == (rounds is None):
        raise SoakError("give either minutes or rounds")
    if seed < 0:
        raise SoakError(f"seeds are non-negative, got {seed}")
    if examples < 1:
        raise SoakError(f"examples must be at least 1, got {examples}")
    options = campaign_options or CampaignOptions()
    last = seed + rounds - 1 if rounds is not None else None
    settings = {"max_ops": max_ops, "tracing_mode": tracing_mode, "examples": examples, "seeds": [seed, last]}
    if untrusted_ops:  # (only when on: results files of earlier soaks keep their settings)
        settings["untrusted_ops"] = True
    if pass_spec:  # (likewise)
        load_pass(pass_spec)  # here first: a bad spec is one error, not one per round
        settings["pass"] = pass_spec
    if rounds is not None:
        items: Iterable[WorkItem] = _work_items(settings)
    else:
        if options.shard is not None or options.results is not None:
            raise SoakError("a time-bounded soak has no fixed rounds to shard or resume: give rounds")
        assert minutes is not None
        items = _endless(seed)
        options = dataclasses.replace(options, time_budget=minutes * 60)
    progress = _Progress(progress_every, minutes, PASS_CHECKS if pass_spec else CHECKS) if progress_every else None
    try:
        run = campaign.run_campaign(_round, items, settings=settings, tool=TOOL, options=options, progress=progress)
    except CampaignError as err:
        raise SoakError(str(err)) from err
    return _fold(settings, run.outcomes, out=out, echo=echo)


class _Progress:
    """The campaign's progress callback: a line to stderr at most every ``every`` seconds,
    ``soak: 12/40 rounds, 310 programs, failures: equivalence 1 (2.0 min)``."""

    def __init__(self, every: float, minutes: float | None, checks: Sequence[str]) -> None:
        self.every, self.minutes = every, minutes
        self.start = self.last = time.monotonic()
        self.programs = 0
        self.failures = dict.fromkeys(checks, 0)
        self.not_ok = 0

    def __call__(self, outcome: Outcome, done: int, total: int | None) -> None:
        value = outcome.value if outcome.status == "ok" and isinstance(outcome.value, dict) else None
        if value is None:
            self.not_ok += 1
        else:
            self.programs += int(value.get("programs", 0))
            failure = value.get("failure")
            if failure is not None and failure.get("check") in self.failures:
                self.failures[failure["check"]] += 1
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        elapsed = (now - self.start) / 60
        rounds = f"{done}/{total} rounds" if total is not None else f"{done} round{'s' if done != 1 else ''}"
        clock = f"{elapsed:.1f} of {self.minutes:g} min" if self.minutes is not None else f"{elapsed:.1f} min"
        failed = ", ".join(f"{k} {v}" for k, v in self.failures.items())
        broken = f", {self.not_ok} did not run to their end" if self.not_ok else ""
        print(f"soak: {rounds}, {self.programs} programs, failures: {failed}{broken} ({clock})", file=sys.stderr, flush=True)


def _seed_range(text: str) -> tuple[int, int]:
    """``"A..B"`` (inclusive) as ``(A, B)``."""
    first, sep, last = text.partition("..")
    try:
        a, b = int(first), int(last)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds are A..B, e.g. 0..99, got {text!r}") from None
    if not sep or a < 0 or b < a:
        raise argparse.ArgumentTypeError(f"seeds are A..B with 0 <= A <= B, got {text!r}")
    return a, b


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns 0 when no check failed (and every round ran), 1 otherwise."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.merge is not None:
        return _merge(parser, args)
    if args.minutes is None and args.rounds is None and args.seeds is None:
        parser.error("give --minutes, --rounds or --seeds")
    if args.minutes is not None and args.minutes <= 0:
        parser.error("--minutes must be positive")
    if args.precision:
        if args.minutes is None:
            parser.error("--precision runs for --minutes")
        if args.pass_spec is not None:
            parser.error("--precision measures the library's pass; --pass checks the soundness of yours")
        return _precision_campaign(args.minutes, args.seed, args.max_ops, args.min_programs)
    if args.pass_spec is not None:
        try:
            load_pass(args.pass_spec)
        except SoakError as err:
            return _error(f"argument --pass: {err}")
    if args.progress < 0:
        parser.error("--progress must be at least 0")
    seed, rounds = _first_seed_and_rounds(parser, args)
    try:
        figures = run_campaign(
            args.minutes,
            rounds=rounds,
            seed=seed,
            out=args.out,
            max_ops=args.max_ops,
            tracing_mode=args.tracing_mode,
            examples=args.examples,
            campaign_options=campaign.options_from_args(args),
            untrusted_ops=args.untrusted_ops,
            pass_spec=args.pass_spec or "",
            progress_every=args.progress or None,
        )
    except SoakError as err:
        return _error(str(err))
    return _print_figures(figures)


def _error(message: str) -> int:
    """A campaign's error as one line on stderr (no usage text: the command line was well formed); exit status 2."""
    print(f"python -m tools.soak: error: {message}", file=sys.stderr)
    return 2


def _parser() -> argparse.ArgumentParser:
    """The command line's options: the soak's own, then the campaign's (:mod:`tools.campaign`)."""
    parser = argparse.ArgumentParser(prog="python -m tools.soak", description=__doc__.split("\n\n")[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, default=None, help="how long to run")
    length.add_argument("--rounds", type=int, default=None, metavar="R", help="run R rounds, seeds --seed .. --seed + R - 1")
    length.add_argument("--seeds", type=_seed_range, default=None, metavar="A..B", help="run the rounds of seeds A to B (inclusive)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first round (default 0)")
    parser.add_argument("--examples", type=int, default=_EXAMPLES_PER_ROUND, metavar="N", help=f"examples per round (default {_EXAMPLES_PER_ROUND})")
    parser.add_argument("--out", default="repros", help="directory for repro files (default ./repros)")
    parser.add_argument("--max-ops", type=int, default=10, help="statements per program at most (default 10)")
    parser.add_argument(
        "--tracing-mode",
        choices=TRACING_MODES,
        default="fake",
        help="how the drawn programs are traced: make_fx with fake, symbolic or real values, or torch.export "
        "saved and loaded again (default fake)",
    )
    parser.add_argument(
        "--untrusted-ops",
        action="store_true",
        help="also draw dtype views, ops that return their argument although their schema says fresh "
        "(einsum, atleast_2d, sum_to_size, dequantize...) and unsafe_split (programs(allow_untrusted_ops=True))",
    )
    parser.add_argument(
        "--pass",
        dest="pass_spec",
        default=None,
        metavar="MODULE:FUNCTION",
        help="check this pass instead of the library's: a function (or a class, made with no arguments) "
        "taking a GraphModule or a Graph, as rewrite.testing.check_pass calls it, with donated_inputs= "
        "if it takes that keyword",
    )
    parser.add_argument(
        "--progress",
        type=float,
        default=30.0,
        metavar="S",
        help="print a progress line to stderr at most every S seconds (default 30; 0: none)",
    )
    parser.add_argument(
        "--precision",
        action="store_true",
        help="measure eliminate_clones against the greedy dynamic oracle instead "
        "(tools.precision): print removed / greedy-removable, with and without "
        "dead-clone erasure (C10)",
    )
    parser.add_argument(
        "--min-programs",
        type=int,
        default=0,
        help="with --precision: keep drawing batches of 100 until at least this many programs are measured",
    )
    campaign.add_campaign_arguments(parser)
    return parser


def _merge(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--merge``: print the figures of shards' results files (repro files of failing rounds to ``--out``)."""
    try:
        settings, outcomes = campaign.merge_results(args.merge, tool=TOOL, items=_work_items, allow_missing=args.allow_missing)
    except (CampaignError, OSError) as err:
        return _error(str(err))
    return _print_figures(_fold(settings, outcomes, out=args.out, echo=True))


def _first_seed_and_rounds(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[int, int | None]:
    """The first round's seed and the number of rounds (``None``: as many as ``--minutes`` allow)."""
    seed, rounds = args.seed, args.rounds
    if args.seeds is not None:
        seed, rounds = args.seeds[0], args.seeds[1] - args.seeds[0] + 1
    if rounds is not None and rounds < 1:
        parser.error("--rounds must be at least 1")
    return seed, rounds


def _print_figures(figures: Figures) -> int:
    print(figures.summary())
    data: dict[str, Any] = asdict(figures)
    print(json.dumps(data, sort_keys=True))
    return 1 if any(figures.failures.values()) or figures.rounds_failed else 0


def _precision_campaign(minutes: float, seed: int, max_ops: int, min_programs: int = 0) -> int:
    """Batches of 100 programs until the time is up (and ``min_programs`` are measured); prints the
    running ratio, then the report, for ``eliminate_clones`` with and without dead-clone erasure (C10)
    on the same programs."""
    from tools.precision import PrecisionReport, measure_precision, sample_programs

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
            total.add(part)
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
