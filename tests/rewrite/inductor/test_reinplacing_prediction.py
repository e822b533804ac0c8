"""``rewrite.inductor.predict_reinplacing`` on its own, against what Inductor really does.

Each program is compiled with Inductor (caches off). A post-grad custom pass
records the prediction on the graph Inductor's ``reinplace_inplaceable_ops``
then receives; a wrapper around that pass records what it really made in
place: the ``index_put`` nodes whose target became the in-place overload (the
node keeps its name), and the number of scatters it turned into in-place
generalized scatters. The two must agree, program by program, on writes into
inputs with a write-back, inputs without one, and intermediates read or not
read after the write; and the compiled program must compute what eager does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

from aliasing import analyze
from rewrite.inductor import predict_reinplacing

pytestmark = pytest.mark.integration

aten = torch.ops.aten
_INDEX_PUTS = {aten.index_put.default, aten._unsafe_index_put.default}

def _in_place_index_puts() -> set[Any]:
    """The in-place overloads Inductor's reinplacing gives index_put and _unsafe_index_put."""
    from torch._inductor import inductor_prims

    return {aten.index_put_.default, inductor_prims._unsafe_index_put_}


@dataclass
class Seen:
    predicted_index_puts: set[str] = field(default_factory=set)
    predicted_scatters: int = 0
    index_puts: set[str] = field(default_factory=set)  #: index_put nodes in the graph reinplacing receives
    reinplaced_index_puts: set[str] = field(default_factory=set)
    reinplaced_scatters: int = 0
    same_as_eager: bool = True  #: stock Inductor miscompiles some reinplacings (rewrite.inductor's H2)


class _Predict(CustomGraphPass):
    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    def __call__(self, graph: torch.fx.Graph) -> None:
        for r in predict_reinplacing(analyze(graph)):
            if r.node.target in _INDEX_PUTS:
                self.seen.predicted_index_puts.add(r.node.name)
            else:
                self.seen.predicted_scatters += 1
        self.seen.index_puts |= {n.name for n in graph.nodes if n.target in _INDEX_PUTS}

    def uuid(self) -> Any:
        return get_hash_for_files((__file__,))


def _recording_decompose(seen: Seen) -> Callable[[torch.fx.Graph], None]:
    """Inductor's last reinplacing step, recording first what the step before it made in place.

    ``reinplace_inplaceable_ops`` canonicalizes scatters into generalized scatters,
    reinplaces (an ``index_put`` node keeps its name and gets the in-place target;
    a scatter becomes an in-place generalized scatter), then decomposes the
    scatters, as mutations where they were reinplaced or always mutate.
    """
    from torch._inductor.fx_passes import reinplace

    original = reinplace.decompose_generalized_scatter
    in_place = _in_place_index_puts()

    def run(graph: torch.fx.Graph) -> None:
        seen.reinplaced_index_puts |= {n.name for n in graph.nodes if n.target in in_place}
        seen.reinplaced_scatters += sum(
            1
            for n in graph.nodes
            if n.target is reinplace._inplace_generalized_scatter
            or (n.target is reinplace._generalized_scatter and reinplace.scatter_always_uses_mutation(n))
        )
        original(graph)

    return run


def compile_and_see(f: Callable[..., Any], inputs: list[torch.Tensor]) -> Seen:
    seen = Seen()
    torch._dynamo.reset()
    eager_inputs = [t.clone() for t in inputs]
    want = f(*eager_inputs)
    compiled_inputs = [t.clone() for t in inputs]
    options = {"post_grad_custom_post_pass": _Predict(seen)}
    with (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setattr("torch._inductor.fx_passes.reinplace.decompose_generalized_scatter", _recording_decompose(seen))
        got = torch.compile(f, backend="inductor", fullgraph=True, options=options)(*compiled_inputs)
    seen.same_as_eager = _close(got, want) and all(_close(a, b) for a, b in zip(compiled_inputs, eager_inputs))
    return seen


def _close(a: Any, b: Any) -> bool:
    try:
        torch.testing.assert_close(a, b)  # Inductor may reorder a sum
    except AssertionError:
        return False
    return True


def index_put_into_input(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x.index_put_((idx,), v)
    return x.sum()


def index_put_of_input_without_write_back(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return x.index_put((idx,), v) * 2


def index_put_into_intermediate(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    t = x * 2
    t.index_put_((idx,), v)
    return t + 1


def index_put_of_intermediate_read_after(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    t = x * 2
    u = t.index_put((idx,), v)
    return u + t


def index_put_into_input_read_after(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.index_put((idx,), v)
    x.mul_(3)
    return y, x.sum()


def slice_assign_into_intermediate(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    t = x * 2
    t[1:3] = v
    return t.sin()


def slice_assign_into_input(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x[1:3] = v
    return x.cos()


def slice_scatter_of_input_then_zero(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x.slice_scatter(v, 0, 1, 3)
    x.zero_()
    return y


PROGRAMS = [
    index_put_into_input,
    index_put_of_input_without_write_back,
    index_put_into_intermediate,
    index_put_of_intermediate_read_after,
    index_put_into_input_read_after,
    slice_assign_into_intermediate,
    slice_assign_into_input,
    slice_scatter_of_input_then_zero,
]


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 6, generator=g), torch.tensor([0, 2]), torch.randn(2, 6, generator=g)]


@pytest.mark.parametrize("f", PROGRAMS, ids=[f.__name__ for f in PROGRAMS])
def test_prediction_matches_what_inductor_reinplaces(f: Callable[..., Any]) -> None:
    seen = compile_and_see(f, _inputs())
    assert seen.predicted_index_puts == seen.reinplaced_index_puts
    assert seen.predicted_scatters == seen.reinplaced_scatters


def test_the_programs_cover_both_answers() -> None:
    """Some index_put is made in place and some is not, and some scatter is: the agreement is not vacuous."""
    seen = [compile_and_see(f, _inputs()) for f in PROGRAMS]
    assert any(s.reinplaced_index_puts for s in seen)
    assert any(s.index_puts - s.reinplaced_index_puts for s in seen)
    assert any(s.reinplaced_scatters for s in seen)
    # a program stock Inductor computes wrongly here is one it wrote in place (the guard's hazards)
    assert all(s.reinplaced_scatters or s.reinplaced_index_puts for s in seen if not s.same_as_eager)


@pytest.fixture(autouse=True)
def _reset_dynamo() -> Iterator[None]:
    yield
    torch._dynamo.reset()
