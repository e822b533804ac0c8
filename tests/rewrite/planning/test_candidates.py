"""Which nodes the pipeline decides: the copy candidates, read from FX's index of nodes, in graph order."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from rewrite.planning.candidates import copy_candidates, is_clone_candidate, is_copy_candidate


def _by_scan(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [n for n in graph.nodes if is_clone_candidate(n) or is_copy_candidate(n)]


def test_candidates_of_every_spelling_come_in_graph_order() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = x.clone()
        x.copy_(y)
        b = torch.clone(y) + a.clone()
        c = b.clone(memory_format=torch.contiguous_format)
        return c.to(torch.float64).clone() + y.clone()

    for gm in (make_fx(f, tracing_mode="fake")(torch.randn(3), torch.randn(3)), torch.fx.symbolic_trace(f)):
        found = copy_candidates(gm.graph)
        assert found == _by_scan(gm.graph) and len(found) >= 6
        assert found == sorted(found)


def test_a_node_moved_in_the_graph_is_found_where_it_now_is() -> None:
    gm = make_fx(lambda x: x.clone() * x.clone(), tracing_mode="fake")(torch.randn(3))
    first, second = [n for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default]
    first.prepend(second)  # the second clone now comes first
    assert copy_candidates(gm.graph) == [second, first] == _by_scan(gm.graph)


def test_calls_that_are_no_candidates_are_left_out() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.call_function(torch.ops.aten.clone.default, (x, x))  # two arguments: not a clone candidate
    g.call_function(torch.ops.aten._to_copy.default, (x,), {"pin_memory": True})
    g.call_function(torch.ops.aten.copy_.default, (x, 1.0))
    assert copy_candidates(g) == [] == _by_scan(g)
