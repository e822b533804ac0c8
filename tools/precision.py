"""Precision of a clone-elimination pass, against a dynamic greedy oracle.

:func:`greedy_removable` is the reference: it tries to remove each clone of a
program in graph order, on top of the removals kept so far, and keeps a removal
when the soundness clauses of :func:`rewrite.testing.check_equivalent`
(outputs with their layout, bitwise; input mutations; no new aliasing; the same
raises; the RNG state)
hold against the *original* program on several independent input draws. It
answers "what can go, as far as running the program shows", which no static
analysis can beat by more than luck (a removal it rejects changes a result on
some draw) and which an exact static pass should reach.

:func:`measure_precision` runs any pass (a callable that rewrites a
``GraphModule`` copy in place, as :func:`rewrite.testing.check_pass` takes it)
over programs and reports: clones the pass removed (soundly: a program whose
rewrite fails the oracle counts as unsound and its removals do not count),
clones the greedy oracle removes, their ratio, the programs where the pass
keeps less than greedy (shortest first, each with the clones it missed) and
the programs where it removes more (possible for a pass that also erases dead
writers: greedy removes one clone at a time and keeps every other node, so
``eliminate_clones``'s condition C10 beats it on clones that are only written).

The greedy oracle is not a proof: three draws may miss a value coincidence
(``relu`` of a square). Where it is wrong the pass is right to keep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rewrite.errors import NotEquivalent
from rewrite.planning.planner import is_clone_candidate
from rewrite.testing.equivalence import OracleError, check_equivalent, copy_program
from rewrite.testing.programs import Program, sample_programs

__all__ = [
    "Miss",
    "PrecisionReport",
    "combine_figures",
    "greedy_removable",
    "measure_passes",
    "measure_precision",
    "precision_item",
    "refined_pass",
    "sample_programs",
]

#: A pass under measurement: rewrites the module in place (or returns a new one), given the
#: placeholder positions the caller donates.
PassFn = Callable[[torch.fx.GraphModule, tuple[int, ...]], object]


def _input_draws(program: Program, draws: int) -> list[Callable[[], list[Any]]]:
    """``draws`` input factories: the program's own inputs, then redraws of their floating values.

    Redraws keep every input's layout, storage sharing, dtype and integer
    values (indices stay valid); floating-point values are drawn anew.
    """

    def redraw(k: int) -> Callable[[], list[Any]]:
        def make() -> list[Any]:
            inputs = program.make_inputs()
            generator = torch.Generator().manual_seed(program.seed * 7919 + k)
            seen: set[int] = set()
            for t in inputs:
                if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.layout != torch.strided:
                    continue
                storage = t.untyped_storage()
                if storage.data_ptr() in seen:
                    continue
                seen.add(storage.data_ptr())
                flat = torch.empty(0, dtype=t.dtype).set_(storage)
                with torch.no_grad():
                    flat.copy_(torch.randn(flat.shape, generator=generator, dtype=t.dtype))
            return inputs

        return make

    return [program.make_inputs, *(redraw(k) for k in range(1, draws))]


def _equivalent_on(original: torch.fx.GraphModule, rewritten: torch.fx.GraphModule, program: Program, draws: Sequence[Callable[[], list[Any]]]) -> bool:
    """True when every draw the original accepts shows no difference (and at least one does)."""
    judged = 0
    for make in draws:
        try:
            check_equivalent(original, rewritten, make, donated_inputs=program.donated_inputs)
        except NotEquivalent:
            return False
        except OracleError:
            continue  # the original rejects this draw: it says nothing about the rewrite
        judged += 1
    return judged > 0


def _remove(gm: torch.fx.GraphModule, name: str) -> torch.fx.GraphModule:
    trial = copy_program(gm)
    if not isinstance(trial, torch.fx.GraphModule):
        raise TypeError("copy_program returned something other than a GraphModule")
    node = next(n for n in trial.graph.nodes if n.name == name)
    original = node.args[0]
    if not isinstance(original, torch.fx.Node):
        raise TypeError(f"{name} does not copy a node")
    node.replace_all_uses_with(original)
    trial.graph.erase_node(node)
    trial.recompile()
    return trial


def greedy_removable(program: Program, *, draws: int = 3) -> tuple[str, ...]:
    """The clones a greedy dynamic oracle removes from ``program``, in graph order.

    Each clone candidate (:func:`rewrite.is_clone_candidate`) is tried in graph
    order on top of the removals kept so far; a removal is kept when the
    rewritten program is equivalent to the original on ``draws`` input draws
    (the program's inputs, then redraws of their floating-point values).

    Examples
    --------
    >>> from hypothesis import find
    >>> from rewrite.testing import programs
    >>> p = find(programs(max_ops=3), lambda p: "clone" in p.graph_module.code)
    >>> set(greedy_removable(p)) <= {n.name for n in p.graph_module.graph.nodes}
    True
    """
    original = program.graph_module
    inputs = _input_draws(program, draws)
    current = original
    removed: list[str] = []
    for node in original.graph.nodes:
        if not is_clone_candidate(node):
            continue
        trial = _remove(current, node.name)
        if _equivalent_on(original, trial, program, inputs):
            current = trial
            removed.append(node.name)
    return tuple(removed)


@dataclass(frozen=True)
class Miss:
    """A program where the pass removed fewer clones than the greedy oracle."""

    program: Program
    missed: tuple[str, ...]  #: removable by greedy, kept by the pass
    removed: int
    greedy: int


@dataclass
class PrecisionReport:
    """Removals of a pass against the greedy oracle over a set of programs."""

    programs: int = 0
    clones: int = 0
    removed: int = 0  #: clones the pass removed, in programs whose rewrite is sound (what :attr:`ratio` counts)
    greedy: int = 0  #: clones the greedy oracle removed
    covered: int = 0  #: clones the greedy oracle removed that the pass removed too
    unsound_programs: int = 0  #: rewrites the oracle rejects (their removals are not counted)
    short: list[Miss] = field(default_factory=list)  #: programs where the pass removed less
    beats: int = 0  #: programs where the pass removed more than greedy
    removed_total: int = 0  #: clones the pass removed, in every program (unsound rewrites too)

    @property
    def ratio(self) -> float:
        """Removed / greedy-removable (1.0 when greedy removes nothing)."""
        return self.removed / self.greedy if self.greedy else 1.0

    @property
    def coverage(self) -> float:
        """The stricter figure: of the clones greedy removes, the share the pass removes too.

        Unlike :attr:`ratio` it gives no credit for clones greedy keeps (those
        C10 erases), so a program where the pass beats greedy cannot hide a miss
        elsewhere. Where both orders are sound (one of two chained clones),
        choosing the other clone counts as a miss here.
        """
        return self.covered / self.greedy if self.greedy else 1.0

    def add(self, other: PrecisionReport) -> None:
        """Add ``other``'s counts and misses to this report's (a report over both program sets)."""
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.short.extend(other.short)

    def figures(self) -> dict[str, Any]:
        """The counts and the misses as JSON-ready data (what :func:`combine_figures` adds up).

        Examples
        --------
        >>> PrecisionReport(programs=2, clones=3, removed=1, greedy=1, covered=1).figures()["removed"]
        1
        """
        data: dict[str, Any] = {name: getattr(self, name) for name in _COUNTS}
        data["short"] = [
            {
                "num_ops": m.program.num_ops,
                "function_source": m.program.function_source,
                "inputs_source": m.program.inputs_source,
                "missed": list(m.missed),
            }
            for m in self.short
        ]
        return data

    def shortest_misses(self, count: int = 5) -> list[Miss]:
        """The programs with misses, fewest statements first."""
        return sorted(self.short, key=lambda m: (m.program.num_ops, len(m.program.function_source)))[:count]

    def summary(self) -> str:
        """Human-readable lines, with the shortest program that shows a miss."""
        removed = f"removed by the pass: {self.removed_total}"
        if self.removed_total != self.removed:
            removed += (
                f" ({self.removed} in sound rewrites, counted below; {self.removed_total - self.removed} "
                f"in the {self.unsound_programs} unsound ones, which count for nothing)"
            )
        lines = [
            f"programs:            {self.programs} ({self.clones} clones)",
            removed,
            f"greedy-removable:    {self.greedy}",
            f"ratio:               {self.ratio:.3f}",
            f"coverage:            {self.coverage:.3f} (of greedy's removals, the share the pass makes too)",
            f"programs short:      {len(self.short)}",
            f"programs beating greedy: {self.beats}",
            f"unsound rewrites:    {self.unsound_programs}",
        ]
        for miss in self.shortest_misses(1):
            lines.append(f"shortest miss ({', '.join(miss.missed)} kept):\n{miss.program.function_source}")
        return "\n".join(lines)


_COUNTS = ("programs", "clones", "removed", "greedy", "covered", "unsound_programs", "beats", "removed_total")


def combine_figures(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The :meth:`PrecisionReport.figures` of several program sets as one: counts added, misses
    in order; ``ratio``, ``coverage`` and ``shortest`` (the shortest miss, or ``None``) added.

    Examples
    --------
    >>> a = PrecisionReport(programs=2, removed=1, greedy=2, covered=1).figures()
    >>> b = PrecisionReport(programs=1, removed=1, greedy=1, covered=1).figures()
    >>> c = combine_figures([a, b])
    >>> c["programs"], c["ratio"], c["coverage"], c["shortest"]
    (3, 0.6667, 0.6667, None)
    """
    total: dict[str, Any] = {name: sum(p[name] for p in parts) for name in _COUNTS}
    total["short"] = [m for p in parts for m in p["short"]]
    total["ratio"] = round(total["removed"] / total["greedy"], 4) if total["greedy"] else 1.0
    total["coverage"] = round(total["covered"] / total["greedy"], 4) if total["greedy"] else 1.0
    ranked = sorted(total["short"], key=lambda m: (m["num_ops"], len(m["function_source"])))
    total["shortest"] = ranked[0] if ranked else None
    return total


def refined_pass(refinements: frozenset[str], erase_dead: bool) -> PassFn:
    """``eliminate_clones`` (strict) with these refinements and dead-clone erasure, as a :data:`PassFn`."""
    import rewrite

    def run(gm: torch.fx.GraphModule, donated: tuple[int, ...]) -> object:
        return rewrite.eliminate_clones(
            gm, donated_inputs=donated, strict=True, erase_dead=erase_dead, refinements=refinements
        )

    return run


def measure_passes(
    programs_: Sequence[Program], passes: Sequence[tuple[str, PassFn]], *, draws: int = 3
) -> list[tuple[str, PrecisionReport, float]]:
    """Each pass measured on ``programs_`` (the greedy oracle runs once per program), with the CPU
    seconds it took; the first row is the oracle's (an empty report and its CPU seconds)."""
    cache: dict[str, tuple[str, ...]] = {}
    start = time.process_time()
    measure_precision(lambda gm, donated: None, programs_, draws=draws, greedy_cache=cache)  # fills the cache
    rows = [("greedy oracle", PrecisionReport(), time.process_time() - start)]
    for label, fn in passes:
        start = time.process_time()
        report = measure_precision(fn, programs_, draws=draws, greedy_cache=cache)
        rows.append((label, report, time.process_time() - start))
    return rows


def precision_item(settings: dict[str, Any], batch: int) -> dict[str, Any]:
    """One campaign item of the precision measurement: batch ``batch`` of 100 programs.

    The batch is ``sample_programs(size, seed=settings["seed"] + batch, max_ops=...)``
    (``size`` is 100, less for the last batch of ``settings["programs"]``), measured
    with each row ``[label, refinements, erase_dead]`` of ``settings["rows"]``.
    Returns the batch's programs, the oracle's CPU seconds and, per row, its CPU
    seconds and :meth:`PrecisionReport.figures`.

    Examples
    --------
    >>> settings = {"programs": 3, "seed": 1, "max_ops": 4, "draws": 3, "rows": [["C1-C9", [], False]]}
    >>> item = precision_item(settings, 0)
    >>> item["programs"], item["rows"][0]["pass"], item["rows"][0]["unsound_programs"]
    (3, 'C1-C9', 0)
    """
    size = min(BATCH, settings["programs"] - BATCH * batch)
    drawn = sample_programs(size, seed=settings["seed"] + batch, max_ops=settings["max_ops"])
    passes = [(label, refined_pass(frozenset(refinements), erase)) for label, refinements, erase in settings["rows"]]
    rows = measure_passes(drawn, passes, draws=settings["draws"])
    return {
        "programs": len(drawn),
        "oracle_cpu_s": rows[0][2],
        "rows": [{"pass": label, "cpu_s": cpu, **report.figures()} for label, report, cpu in rows[1:]],
    }


#: Programs per batch (one campaign item) of the precision measurement.
BATCH = 100


def _clone_names(gm: torch.fx.GraphModule) -> list[str]:
    return [n.name for n in gm.graph.nodes if is_clone_candidate(n)]


def _program_key(program: Program) -> str:
    return f"{program.function_source}\n{program.inputs_source}\n{program.donated_inputs!r}"


def measure_precision(
    pass_fn: PassFn,
    programs_: Iterable[Program],
    *,
    draws: int = 3,
    greedy_cache: dict[str, tuple[str, ...]] | None = None,
) -> PrecisionReport:
    """Measure how much of what can soundly go a pass removes.

    Parameters
    ----------
    pass_fn
        The pass, called as ``pass_fn(gm, donated_inputs)`` on a copy of each
        program: it rewrites ``gm`` in place (or returns a new module).
    programs_
        The programs, e.g. :func:`sample_programs`.
    draws
        Input draws per equivalence check, for the pass and for the oracle.
    greedy_cache
        Where to keep the oracle's answers (keyed by program source, inputs and
        donations), so that several passes measured on the same programs run
        the oracle once.

    Returns
    -------
    PrecisionReport

    Examples
    --------
    >>> import rewrite
    >>> ps = sample_programs(3, seed=1, max_ops=4)
    >>> report = measure_precision(lambda gm, donated: rewrite.eliminate_clones(gm, donated_inputs=donated), ps)
    >>> report.programs, report.unsound_programs
    (3, 0)
    """
    report = PrecisionReport()
    for program in programs_:
        before = _clone_names(program.graph_module)
        report.programs += 1
        report.clones += len(before)
        key = _program_key(program)
        cached = greedy_cache.get(key) if greedy_cache is not None else None
        greedy = cached if cached is not None else greedy_removable(program, draws=draws)
        if greedy_cache is not None:
            greedy_cache[key] = greedy
        report.greedy += len(greedy)
        rewritten = copy_program(program.graph_module)
        if not isinstance(rewritten, torch.fx.GraphModule):
            raise TypeError("copy_program returned something other than a GraphModule")
        result = pass_fn(rewritten, program.donated_inputs)
        if isinstance(result, torch.fx.GraphModule):
            rewritten = result
        left = set(_clone_names(rewritten))
        gone = [c for c in before if c not in left]
        report.removed_total += len(gone)
        if not _equivalent_on(program.graph_module, rewritten, program, _input_draws(program, draws)):
            report.unsound_programs += 1
            continue
        report.removed += len(gone)
        report.covered += sum(1 for c in greedy if c not in left)
        if len(gone) > len(greedy):
            report.beats += 1
        if len(gone) < len(greedy):
            missed = tuple(c for c in greedy if c in left)
            report.short.append(Miss(program, missed, len(gone), len(greedy)))
    return report
