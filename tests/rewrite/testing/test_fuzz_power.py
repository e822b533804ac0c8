"""The fuzzer's power: it catches deliberately broken passes.

Each broken variant of clone elimination (``tools.broken``: the
library's pass with one of conditions C2, C3, C5, C6 not checked, and the
"output-only" rule of unsafe pipelines) must be caught by ``check_pass`` on
programs from ``programs()`` within a bounded number of examples, with a
fixed seed. The test fails if the fuzzer misses one. The counterexample
Hypothesis shrinks to must be small, must pass with the real pass, and, for
a dropped condition, must be a clone the real pass keeps for exactly that
condition. Run with ``-s`` to see the counterexamples.

The last tests use the user's entry point as the README shows it
(``@settings(FUZZ_SETTINGS) @given(programs())`` and ``check_pass``, through
``tools.broken.seconds_to_catch``): the naive pass and the one that ignores later
writes to the original are caught and shrunk small. How fast is
``python -m tools.broken``'s figure, never asserted here.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
import torch.fx
from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample

import rewrite
from rewrite.errors import NotEquivalent
from rewrite.testing import Program, check_pass, copy_program, programs
from tools.broken import (
    BROKEN_CONDITIONS,
    CATCH_PASSES,
    eliminate_clones_skipping,
    output_only_pass,
    seconds_to_catch,
    skipping,
)

#: At most this many drawn programs (shrinking excluded) to find each counterexample.
MAX_EXAMPLES = 300
#: A shrunk counterexample has at most this many statements.
MAX_SHRUNK_OPS = 6

POWER = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,  # a fixed seed: the test is deterministic
    database=None,
    deadline=None,
    phases=[Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)

PassFor = Callable[[Program], Callable[[torch.fx.GraphModule], object]]

def _skipping_for(condition: str, program: Program) -> Callable[[torch.fx.GraphModule], object]:
    return skipping(condition, donated_inputs=program.donated_inputs)


VARIANTS: dict[str, PassFor] = {
    **{c: partial(_skipping_for, c) for c in BROKEN_CONDITIONS},
    "output-only": lambda p: output_only_pass,
}


def caught(make_pass: PassFor) -> Callable[[Program], bool]:
    def predicate(program: Program) -> bool:
        try:
            check_pass(make_pass(program), program)
        except NotEquivalent:
            return True
        return False

    return predicate


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_fuzzer_catches_broken_variant(variant: str) -> None:
    make_pass = VARIANTS[variant]
    try:
        program = find(programs(), caught(make_pass), settings=POWER)
    except NoSuchExample:
        pytest.fail(f"the fuzzer missed the broken variant {variant!r} in {MAX_EXAMPLES} programs")
    with pytest.raises(NotEquivalent) as info:
        check_pass(make_pass(program), program)
    print(f"\n--- {variant}: caught ({info.value.clause}), shrunk to {program.num_ops} statements ---\n{program!r}")
    assert program.num_ops <= MAX_SHRUNK_OPS, f"shrunk counterexample is large:\n{program!r}"

    # The real pass is sound on the counterexample ...
    check_pass(lambda gm: rewrite.eliminate_clones(gm, donated_inputs=program.donated_inputs, strict=True), program)
    if variant == "output-only":
        return
    # ... and the broken variant removes a clone that the real pass keeps for the dropped condition
    # (replacing clones only: erasing a dead clone with its writers, C10, is another way to remove it).
    gm = copy_program(program.graph_module)
    assert isinstance(gm, torch.fx.GraphModule)
    real = rewrite.eliminate_clones(gm, donated_inputs=program.donated_inputs, erase_dead=False)
    gm = copy_program(program.graph_module)
    assert isinstance(gm, torch.fx.GraphModule)
    broken = eliminate_clones_skipping(gm, [variant], donated_inputs=program.donated_inputs)
    extra = set(broken.removed) - set(real.removed)
    assert any(real.decision(name).reason.condition == variant for name in extra), f"{real}\n{broken}"


def test_broken_variants_are_unsound_on_named_programs() -> None:
    """Each variant really is broken: a hand-written program it gets wrong (independent of the fuzzer)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from rewrite.testing import check_equivalent

    def c2(x: torch.Tensor) -> tuple[torch.Tensor]:
        y = x + 1
        c = y.clone()
        y.add_(1)  # the original is written, the clone is read afterwards
        return (c,)

    def c3(x: torch.Tensor) -> tuple[torch.Tensor]:
        y = x + 1
        c = y.clone()
        c.add_(1)  # the clone is written, the original is read afterwards
        return (c * y,)

    def c5(x: torch.Tensor) -> tuple[torch.Tensor]:
        c = x.clone()
        c.add_(1)  # the clone is written and the original is caller memory
        return (c + 1,)

    def c6(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x.clone(),)  # the output would alias the input

    cases = {"C2": (c2, "output"), "C3": (c3, "output"), "C5": (c5, "input-mutation"), "C6": (c6, "new-aliasing")}
    for condition, (fn, clause) in cases.items():
        gm = make_fx(fn, tracing_mode="fake")(torch.randn(3))
        rewritten = copy_program(gm)
        assert isinstance(rewritten, torch.fx.GraphModule)
        eliminate_clones_skipping(rewritten, [condition])
        with pytest.raises(NotEquivalent) as info:
            check_equivalent(gm, rewritten, lambda: [torch.randn(3)])
        assert info.value.clause == clause, condition
        check_equivalent(gm, copy_program(gm), lambda: [torch.randn(3)])


@pytest.mark.parametrize("name", list(CATCH_PASSES))
def test_fuzz_settings_catch_the_wrong_passes(name: str) -> None:
    """The README's way of fuzzing a pass (``@settings(FUZZ_SETTINGS) @given(programs())`` and
    ``check_pass``) catches the naive pass and the one that ignores later writes to the original,
    and shrinks the failure small. How fast is ``python -m tools.broken``'s figure: not asserted."""
    catch = seconds_to_catch(name, seed=0, settings="fuzz")
    assert catch.caught, catch
    assert catch.failures_reported == 1
    assert catch.shrunk_ops <= MAX_SHRUNK_OPS, catch


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CATCH_PASSES))
def test_hypothesis_defaults_catch_the_wrong_passes_as_one_failure(name: str) -> None:
    """With Hypothesis's own defaults (explain phase, several bugs reported), a wrong pass is one
    failure whatever the soundness clauses it breaks: ``check_pass`` raises every ``NotEquivalent``
    from one place, so that Hypothesis shrinks once, not once per clause."""
    catch = seconds_to_catch(name, seed=1, settings="defaults")
    assert catch.caught, catch
    assert catch.failures_reported == 1, catch
