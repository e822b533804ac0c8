"""``rewrite.planning.dataflow.Liveness`` on its own: dead nodes, dead readers and ``forget``, against real runs.

The reference is what erasing nodes does to real outputs and inputs: a node
Liveness calls dead must be erasable without changing either, and a node that
writes memory must never be called dead (erasing it changes what a run
leaves behind). Dead readers are dead nodes whose reads cannot matter; a dead
node that may raise on the values it reads (an out-of-range index) still
matters, as a real run that raises shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from aliasing import analyze
from rewrite.editing.copying import copy_program
from rewrite.planning.dataflow import Liveness


def _trace(f: Callable[..., object], *inputs: torch.Tensor) -> torch.fx.GraphModule:
    return make_fx(f, tracing_mode="fake")(*inputs)


def _named(gm: torch.fx.GraphModule, names: Iterable[str]) -> list[torch.fx.Node]:
    by_name = {n.name: n for n in gm.graph.nodes}
    return [by_name[n] for n in names]


def _erased(gm: torch.fx.GraphModule, names: Iterable[str]) -> torch.fx.GraphModule:
    """A copy of ``gm`` without the nodes ``names`` (erased users first); the graph must stay valid."""
    copy = copy_program(gm)
    assert isinstance(copy, torch.fx.GraphModule)
    doomed = set(names)
    for node in reversed(list(copy.graph.nodes)):
        if node.name in doomed:
            assert all(u.name in doomed for u in node.users), f"{node.name} is still used"
            copy.graph.erase_node(node)
    copy.graph.lint()
    copy.recompile()
    return copy


def _run(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(outputs, inputs after the run) of one run on fresh copies of ``inputs``."""
    fresh = [t.clone() for t in inputs]
    out = gm(*fresh)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o.clone() for o in outs], fresh


def _same_run(a: torch.fx.GraphModule, b: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> bool:
    (out_a, in_a), (out_b, in_b) = _run(a, inputs), _run(b, inputs)
    return len(out_a) == len(out_b) and all(torch.equal(x, y) for x, y in zip(out_a + in_a, out_b + in_b))


def _unreachable(gm: torch.fx.GraphModule) -> set[str]:
    """Calls with no path to the output (an independent reading of "nothing it computes is used")."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    reach, frontier = set(), [output]
    while frontier:
        node = frontier.pop()
        for arg in node.all_input_nodes:
            if arg not in reach:
                reach.add(arg)
                frontier.append(arg)
    return {n.name for n in gm.graph.nodes if n.op == "call_function" and n not in reach}


def pure_with_unused_values(x: torch.Tensor) -> torch.Tensor:
    unused = (x * 3).sum()
    also_unused = x.t().contiguous() + unused
    kept = x.relu()
    del also_unused
    return kept + 1


def unused_view_chain(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = x[1:].exp()
    b = x.view(-1)[::2] * 2  # unused
    del b
    return a, x + a.sum()


@pytest.mark.parametrize("f", [pure_with_unused_values, unused_view_chain])
def test_dead_nodes_of_a_pure_program_are_the_unused_ones_and_erasing_them_changes_nothing(
    f: Callable[..., object],
) -> None:
    x = torch.randn(4, 4)
    gm = _trace(f, x)
    live = Liveness(analyze(gm))
    dead = {n.name for n in live.dead}
    assert dead == _unreachable(gm)  # a program without writes: dead is exactly "unused"
    assert dead, "the program has unused values"
    assert _same_run(gm, _erased(gm, dead), [x])
    # none of these reads can raise: every dead node is a dead reader
    assert {n.name for n in live.readers()} == dead


def writes_an_input_and_an_unused_intermediate(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    x.add_(1)  # its result is never used; it writes the caller's memory
    z = y.clone()
    z.mul_(3)  # writes memory nobody reads afterwards
    return y + 1


def test_a_node_that_writes_is_never_dead() -> None:
    x = torch.randn(5)
    gm = _trace(writes_an_input_and_an_unused_intermediate, x)
    live = Liveness(analyze(gm))
    writers = [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).endswith("_.Tensor")]
    assert {str(n.target) for n in writers} == {"aten.add_.Tensor", "aten.mul_.Tensor"}
    assert not set(writers) & live.dead
    # the in-place add is unused as a value, yet erasing it changes the input the caller sees
    add_ = next(n for n in writers if "add_" in str(n.target))
    assert not add_.users
    assert not _same_run(gm, _erased(gm, [add_.name]), [x])
    # and the clone the dead-looking mul_ writes is not dead either (its writer uses it)
    clone = next(n for n in gm.graph.nodes if "clone" in str(n.target))
    assert clone not in live.dead


def reads_with_an_index(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    unused = x.index_select(0, idx)  # raises on an out-of-range index
    del unused
    summed = x.sum()  # unused, cannot raise
    del summed
    return x + 1


def test_a_dead_node_that_may_raise_on_values_is_not_a_dead_reader() -> None:
    x, idx = torch.randn(4, 3), torch.tensor([0, 2])
    gm = _trace(reads_with_an_index, x, idx)
    live = Liveness(analyze(gm))
    index_select, summed = _named(gm, ["index_select", "sum_1"])
    assert {index_select, summed} <= live.dead
    assert summed in live.readers()
    assert index_select not in live.readers()
    # why its read matters: on an out-of-range index the program raises, without the node it does not
    bad = torch.tensor([0, 7])
    with pytest.raises((IndexError, RuntimeError)):
        gm(x.clone(), bad)
    _erased(gm, ["index_select"])(x.clone(), bad)
    # while erasing the dead reader changes nothing on any input
    assert _same_run(gm, _erased(gm, ["sum_1"]), [x, idx])


def copies_into_input(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    c = y.clone()
    x.copy_(c)
    return x.sum()


def copies_into_input_and_returns_y(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * 2
    c = y.clone()
    x.copy_(c)
    return x.sum(), y + 1


def _forget_copy(gm: torch.fx.GraphModule) -> tuple[torch.fx.Node, list[torch.fx.Node]]:
    live = Liveness(analyze(gm))
    copy_ = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default)
    assert copy_ not in live.dead  # it writes the caller's memory
    found = live.forget([copy_], lambda n: [u for u in n.users if u is not copy_])
    assert set(found) <= live.dead
    return copy_, found


def _after_removal(gm: torch.fx.GraphModule, copy_name: str) -> torch.fx.GraphModule:
    """``gm`` with the ``copy_`` taken out of the graph (its uses read the input instead)."""
    copy = copy_program(gm)
    assert isinstance(copy, torch.fx.GraphModule)
    node = next(n for n in copy.graph.nodes if n.name == copy_name)
    node.replace_all_uses_with(node.args[0])
    copy.graph.erase_node(node)
    copy.recompile()
    return copy


@pytest.mark.parametrize(
    ("f", "expected"),
    [(copies_into_input, ["clone", "mul"]), (copies_into_input_and_returns_y, ["clone"])],
    ids=["feeding-values-die", "a-value-with-another-use-lives"],
)
def test_forget_finds_the_nodes_that_die_when_a_node_leaves(
    f: Callable[..., object], expected: list[str]
) -> None:
    x = torch.randn(6)
    gm = _trace(f, x)
    copy_, found = _forget_copy(gm)
    assert [n.name for n in found] == expected  # in the order found: the clone first, then what feeds it
    without = _after_removal(gm, copy_.name)
    # independently: the nodes with no path to the output once the copy_ is gone
    assert {n.name for n in found} == _unreachable(without) - {n.name for n in Liveness(analyze(gm)).dead}
    # erasing them too changes nothing beyond what removing the copy_ did
    assert _same_run(without, _erased(without, [n.name for n in found]), [x])
