"""The layouts C1 refined simulates on meta tensors are remembered per op and described arguments:
a remembered answer is the answer a fresh run gives, and a call whose arguments have no plain value
is run every time."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from aliasing import analyze
from rewrite.planning import dataflow


def _program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.t()
    return y.reshape(-1), y * 2, y.sum(0), y.permute(1, 0).contiguous(), y.expand(2, *y.shape).flatten(1)


def _calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.args and isinstance(n.args[0], torch.fx.Node)]


@pytest.mark.parametrize("make", [lambda: torch.randn(4, 6), lambda: torch.randn(6, 8)[:, ::2], lambda: torch.randn(5, 6)[1:]])
def test_a_remembered_layout_is_the_fresh_one(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    gm = make_fx(_program, tracing_mode="fake")(make())
    a = analyze(gm)
    runs: list[object] = []
    real = dataflow._run_on_meta
    monkeypatch.setattr(dataflow, "_run_on_meta", lambda *args: runs.append(args) or real(*args))
    monkeypatch.setattr(dataflow, "_SIMULATED", {})
    calls = _calls(gm)
    fresh = [dataflow.simulate(a, n, {}) for n in calls]
    assert len(runs) == len(calls) and any(layout is not None for layout in fresh)
    remembered = [dataflow.simulate(a, n, {}) for n in calls]
    assert remembered == fresh and len(runs) == len(calls)  # no op ran again
    monkeypatch.setattr(dataflow, "_SIMULATED", {})
    assert [dataflow.simulate(a, n, {}) for n in calls] == fresh


def test_scalars_of_other_types_are_other_calls() -> None:
    op = torch.ops.aten.add.Tensor
    t = dataflow._Described(((2,), (1,), 0, torch.float32), torch.device("cpu"))
    keys = {dataflow._simulation_key(op, ((t, v), {})) for v in (1, 1.0, True)}
    assert len(keys) == 3 and None not in keys


def test_a_symbolic_argument_is_never_remembered() -> None:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    s = ShapeEnv().create_unbacked_symint()
    t = dataflow._Described(((2,), (1,), 0, torch.float32), torch.device("cpu"))
    assert dataflow._simulation_key(torch.ops.aten.view.default, ((t, [s]), {})) is None


def test_the_default_dtype_is_part_of_the_call() -> None:
    gm = make_fx(lambda x: x + 1.5, tracing_mode="fake")(torch.arange(6).reshape(2, 3))
    a = analyze(gm)
    (add,) = _calls(gm)
    assert dataflow.simulate(a, add, {})[3] == torch.float32  # type: ignore[index]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert dataflow.simulate(a, add, {})[3] == torch.float64  # type: ignore[index]
    finally:
        torch.set_default_dtype(previous)
