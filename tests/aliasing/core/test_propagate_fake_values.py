"""``aliasing.propagate_fake_values``: a graph without metadata gets the analysis a trace gets.

The recipe the missing-metadata warning names; checked against real runs (the memory oracle)
and the rewrite against the original on the same inputs.
"""

from __future__ import annotations

import copy
import warnings

import torch

import aliasing
from aliasing.verification.oracle import check_analysis
from rewrite import eliminate_clones
from rewrite.testing import check_equivalent


class _Cache(torch.nn.Module):
    """A buffer written in place through a view, a clone of an intermediate read after."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 8))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        c = y.clone()
        self.cache[0].copy_(c)
        return self.cache.clone() * 2, c + 1


def test_symbolic_trace_with_propagated_values_is_analysed_like_a_trace() -> None:
    gm = torch.fx.symbolic_trace(_Cache())
    x = torch.randn(8)
    aliasing.propagate_fake_values(gm, x)
    assert all("val" in n.meta for n in gm.graph.nodes if n.op != "output")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        analysis = aliasing.analyze(gm)
    assert not [w for w in caught if issubclass(w.category, aliasing.MissingMetadataWarning)]
    check_analysis(analysis, gm, [x.clone()])
    original = copy.deepcopy(gm)
    report = eliminate_clones(gm)
    assert report.removed  # with metadata, a clone goes (without, every clone is kept)
    check_equivalent(original, gm, lambda: (torch.randn(8),))


def test_parameters_are_never_written() -> None:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                self.w.add_(x)
            return self.w * 1

    m = M()
    gm = torch.fx.symbolic_trace(m)
    aliasing.propagate_fake_values(gm, torch.ones(3))
    assert torch.equal(m.w.detach(), torch.ones(3))
