"""``aliasing.core.ops.COMPOSITE_RUNS`` against what each composite op really runs on fake tensors.

The table says which overloads a composite op's kernel may run at any size and layout, so that a
call is judged without being run, on symbolic sizes too. Here each listed op runs on fake tensors
of several layouts (contiguous, transposed, sliced, expanded, channels-last, a zero-size and a
size-one dimension) at sizes 0, 1, 2 and 5, with static and with symbolic sizes, for target shapes
that need a view and shapes that need a copy; every overload that reaches the dispatcher must be
in the table.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

from aliasing.core.effects import _Recorder
from aliasing.core.ops import COMPOSITE_RUNS


def _layouts(n: int) -> Iterator[tuple[str, torch.Tensor, list[tuple[int, ...]]]]:
    """(name, a real tensor of that layout with a leading dimension of size n, target shapes)."""
    yield "contiguous", torch.empty(n, 6, 4), [(-1,), (n * 6, 4), (n, 24), (4, -1, 2)]
    yield "transposed", torch.empty(n, 6, 4).transpose(0, 2), [(-1,), (24, n), (4, -1)]
    yield "sliced", torch.empty(n, 6, 8)[:, :, :4], [(-1,), (n * 6, 4), (n, 24)]
    yield "expanded", torch.empty(1, 6, 4).expand(n, 6, 4), [(-1,), (n * 6, 4), (n, 6, 4)]
    yield "channels_last", torch.empty(n, 6, 4, 3).to(memory_format=torch.channels_last), [(-1,), (n, 72)]
    yield "size_one", torch.empty(n, 1, 4).transpose(1, 2), [(-1,), (n, 4)]


def _fake(mode: FakeTensorMode, t: torch.Tensor, symbolic: bool, name: str) -> torch.Tensor:
    if not symbolic:
        return mode.from_tensor(t)
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim())
    return mode.from_tensor(t, symbolic_context=context, source=ConstantSource(name))


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_reshape_runs_only_what_the_table_lists(n: int, symbolic: bool) -> None:
    listed = COMPOSITE_RUNS["aten.reshape.default"]
    ran: set[str] = set()
    calls = 0
    mode = FakeTensorMode(shape_env=ShapeEnv() if symbolic else None)
    for name, t, shapes in _layouts(n):
        x = _fake(mode, t, symbolic, f"{name}_{n}")
        if symbolic:
            assert any(isinstance(s, torch.SymInt) for s in x.shape), name
        for shape in shapes:
            recorder = _Recorder()
            with mode, recorder:
                torch.ops.aten.reshape.default(x, list(shape))
            ran |= recorder.ops
            calls += 1
    assert calls == 17
    assert ran <= listed, sorted(ran - listed)
    assert "aten.view.default" in ran  # (the recorder saw the kernel's ops at all)
    if n > 1:
        assert "aten.clone.default" in ran  # some layouts need a copy: both paths ran


def test_every_listed_composite_is_a_composite_op() -> None:
    """The table lists composite ops (a call of one runs other ops) and overloads that exist."""
    from aliasing.core.effects import decomposes

    for name, runs in COMPOSITE_RUNS.items():
        packet, overload = name.removeprefix("aten.").rsplit(".", 1)
        assert decomposes(getattr(getattr(torch.ops.aten, packet), overload)), name
        for ran in runs:
            packet, overload = ran.removeprefix("aten.").rsplit(".", 1)
            assert getattr(getattr(torch.ops.aten, packet), overload) is not None, ran
