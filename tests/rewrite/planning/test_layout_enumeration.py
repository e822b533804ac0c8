"""Layout observability (C1 refined) against real execution, over an enumeration.

Every clone form that may change a layout (``contiguous()``, ``clone`` with and
without ``memory_format``), of an input or of an intermediate, with five input
layouts (transposed, strided, offset, expanded, a selected middle dimension),
followed by one consumer from a menu of views, in-place ops, rearrangements,
reductions, reshapes and pointwise ops (and a seeded sample of two-consumer
chains): whatever ``eliminate_clones`` removes must pass ``check_equivalent``
(outputs with their layout, input mutations, no new aliasing, no new raise),
and a second run must remove nothing. The enumeration also asserts that some
layout-changing clones do go, so that it cannot pass by removing nothing.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from rewrite import Reason, eliminate_clones
from rewrite.testing import check_equivalent, copy_program
from rewrite.testing.equivalence import OracleError

Step = Callable[[torch.Tensor], torch.Tensor]


def _input(kind: str) -> Callable[[], list[torch.Tensor]]:
    def make() -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        if kind == "transposed":
            return [torch.randn(6, 4, generator=g).t()]
        if kind == "strided":
            return [torch.randn(4, 12, generator=g)[:, ::2]]
        if kind == "offset":
            return [torch.randn(5, 6, generator=g)[1:]]
        if kind == "expanded":
            return [torch.randn(1, 6, generator=g).expand(4, 6)]
        return [torch.randn(4, 2, 6, generator=g)[:, 0, :]]

    return make


INPUTS = ("transposed", "strided", "offset", "expanded", "selected")

STEPS: dict[str, Step] = {
    "t": lambda v: v.t(),
    "unsqueeze": lambda v: v.unsqueeze(0),
    "view": lambda v: v.view(-1),
    "flip": lambda v: v.flip(0),
    "mul_": lambda v: v.mul_(2.0),
    "sin": torch.sin,
    "sum": lambda v: v.sum(0),
    "slice": lambda v: v[1:],
    "select": lambda v: v[0],
    "cat": lambda v: torch.cat([v, v]),
    "repeat": lambda v: v.repeat(2, *([1] * (v.dim() - 1))),
    "add": lambda v: v + 1.0,
    "copy_": lambda v: v.copy_(v * 3.0),
    "expand": lambda v: v.expand(2, *v.shape),
    "contiguous": lambda v: v.contiguous(),
    "reshape": lambda v: v.reshape(-1),
}

CLONES: dict[str, Step] = {
    "contiguous": lambda x: x.contiguous(),
    "clone-contiguous": lambda x: x.clone(memory_format=torch.contiguous_format),
    "clone": lambda x: x.clone(),
}


def _program(clone: Step, chain: Sequence[str], intermediate: bool) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if intermediate:
            x = x * 1.0  # not caller memory: the clone may be written through
        v = clone(x)
        for step in chain:
            v = STEPS[step](v)
        return (v, x) if intermediate else (v,)

    return f


def _chains() -> list[tuple[str, ...]]:
    singles = [(s,) for s in STEPS]
    pairs = list(itertools.product(STEPS, repeat=2))
    return singles + random.Random(13).sample(pairs, 24)


def _run(kind: str) -> tuple[int, int]:
    """(programs with a removal, layout-changing clones removed) for one input layout."""
    make = _input(kind)
    with_removal = unobserved = 0
    for (name, clone), chain, intermediate in itertools.product(CLONES.items(), _chains(), (False, True)):
        f = _program(clone, chain, intermediate)
        try:
            f(*make())
        except RuntimeError:
            continue  # eager rejects the program (a view of non-viewable strides, an expanded write)
        gm = make_fx(f, tracing_mode="fake")(*make())
        rewritten = copy_program(gm)
        assert isinstance(rewritten, torch.fx.GraphModule)
        report = eliminate_clones(rewritten, strict=True)
        if not report.removed:
            continue
        with_removal += 1
        unobserved += sum(1 for d in report.decisions if d.reason is Reason.LAYOUT_UNOBSERVED)
        where = f"{kind} input, {name}, then {' -> '.join(chain)}{' (of an intermediate)' if intermediate else ''}"
        try:
            check_equivalent(gm, rewritten, make)
        except OracleError:  # pragma: no cover - the original ran above
            raise AssertionError(f"{where}: the oracle could not judge") from None
        except Exception as e:
            raise AssertionError(f"{where}: {e}\n{report}") from e
        again = eliminate_clones(rewritten, strict=True)
        assert not again.removed, f"{where}: a second run removed {again.removed}"
    return with_removal, unobserved


@pytest.mark.slow
@pytest.mark.parametrize("kind", INPUTS)
def test_layout_changing_clones_against_real_execution(kind: str) -> None:
    with_removal, unobserved = _run(kind)
    assert with_removal > 0 and unobserved > 0, f"no layout-changing clone removed for a {kind} input"
