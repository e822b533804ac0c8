"""Golden decisions of eliminate_clones, each checked against real execution.

Every case traces a small program, rewrites a copy, checks the decisions and
reasons, then runs original and rewrite on the same real inputs with
``check_equivalent`` (outputs, input mutations, new aliasing, raising), and
checks that a second run changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from rewrite import Reason, eliminate_clones
from rewrite.testing import check_equivalent, copy_program

Fn = Callable[..., object]


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 8, generator=g)]


def rewrite_and_check(
    fn: Fn,
    inputs: Callable[[], Sequence[object]] = _inputs,
    *,
    donated: Sequence[int] = (),
    mode: str = "fake",
    constants: bool = False,
) -> dict[str, tuple[str, Reason]]:
    original = make_fx(fn, tracing_mode=mode, _allow_non_fake_inputs=constants)(*inputs())
    rewritten = copy_program(original)
    report = eliminate_clones(rewritten, donated_inputs=donated, strict=True)
    check_equivalent(original, rewritten, inputs, donated_inputs=donated)
    again = eliminate_clones(rewritten, donated_inputs=donated, strict=True)
    assert again.removed == (), f"second run removed {again.removed}"
    assert str(report)  # the table renders
    return {d.node: (d.action, d.reason) for d in report.decisions}


REMOVE = ("remove", Reason.REMOVABLE)


# --- must remove ---------------------------------------------------------------------


def test_clone_only_read() -> None:
    assert rewrite_and_check(lambda x: x.clone() * 2) == {"clone": REMOVE}


def test_clone_written_original_dead() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        c = y.clone()
        c.add_(1)
        return c

    assert rewrite_and_check(f) == {"clone": REMOVE}


def test_chain_of_clones() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).clone().clone().clone() + 1

    assert rewrite_and_check(f) == {"clone": REMOVE, "clone_1": REMOVE, "clone_2": REMOVE}


def test_original_read_only_by_metadata_and_unused_views() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, int]:
        y = x * 2
        c = y.clone()
        c.add_(1)
        y.view(-1)  # a view nobody uses
        y[1:]  # another one
        return c, y.size(0) + y.stride(0)

    decisions = rewrite_and_check(f, mode="symbolic")
    assert decisions == {"clone": REMOVE}


def _qkv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    qkv = (x.repeat(3, 1) * 2).view(3, x.shape[0], x.shape[1])
    q, k, v = qkv.unbind(0)
    c = q.clone()
    c.mul_(2)
    return c, k + v


def test_q_written_while_only_disjoint_k_v_read() -> None:
    assert rewrite_and_check(_qkv) == {"clone": REMOVE}


def test_q_written_symbolic_shapes() -> None:
    assert rewrite_and_check(_qkv, mode="symbolic") == {"clone": REMOVE}


def test_clone_of_donated_input_written() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = x.clone()
        c.add_(1)
        return c

    assert rewrite_and_check(f, donated=(0,)) == {"clone": REMOVE}


def test_clone_of_intermediate_returned() -> None:
    assert rewrite_and_check(lambda x: (x + 1).clone()) == {"clone": REMOVE}


def test_noop_to_copy_removed_and_dtype_change_kept() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        return y.to(torch.float32, copy=True) * 2, y.to(torch.float64) * 2

    decisions = rewrite_and_check(f)
    assert decisions["_to_copy"] == REMOVE
    assert decisions["_to_copy_1"] == ("keep", Reason.LAYOUT)


# --- must keep -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "read",
    [
        lambda y: y * 1,  # the original itself
        lambda y: y.view(-1) * 1,  # a view of it
        lambda y: y[1] * 1,  # an overlapping slice
    ],
    ids=["original", "view", "overlapping-sibling"],
)
def test_original_read_after_clone_written(read: Callable[[torch.Tensor], torch.Tensor]) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        c = y.clone()
        c.add_(1)
        return c, read(y)

    assert rewrite_and_check(f) == {"clone": ("keep", Reason.CLONE_WRITTEN_ORIGINAL_READ)}


def test_base_read_after_clone_of_view_written() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        base = x + 1
        c = base[0].clone()
        c.add_(1)
        return c, base.sum(0)

    assert rewrite_and_check(f) == {"clone": ("keep", Reason.CLONE_WRITTEN_ORIGINAL_READ)}


@pytest.mark.parametrize("through_view", [False, True], ids=["direct", "through-view"])
def test_original_written_while_clone_read_later(through_view: bool) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        c = y.clone()
        (y.view(-1) if through_view else y).mul_(3)
        return c * 2

    assert rewrite_and_check(f) == {"clone": ("keep", Reason.ORIGINAL_WRITTEN)}


@pytest.mark.parametrize(
    "write",
    [
        lambda c, x: c.view(-1).add_(1),
        lambda c, x: c.add_(1).mul_(2),
        lambda c, x: torch.add(x, 1, out=c),
    ],
    ids=["view", "chained-inplace", "out-kwarg"],
)
def test_clone_written_indirectly_original_read(write: Callable[[torch.Tensor, torch.Tensor], object]) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        c = y.clone()
        write(c, x)
        return c, y * 2

    assert rewrite_and_check(f) == {"clone": ("keep", Reason.CLONE_WRITTEN_ORIGINAL_READ)}


def test_two_clones_of_one_value_both_written() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        a = y.clone()
        b = y.clone()
        a.add_(1)
        b.mul_(2)
        return a, b

    decisions = rewrite_and_check(f)
    assert [a for a, _ in decisions.values()].count("remove") <= 1
    assert decisions["clone_1"][0] == "keep"


@pytest.mark.parametrize("view", [False, True], ids=["input", "view-of-input"])
def test_clone_of_input_written(view: bool) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = (x[:2] if view else x).clone()  # x[:2]: same layout as its clone
        c.add_(1)
        return c

    assert rewrite_and_check(f) == {"clone": ("keep", Reason.WRITES_CALLER_MEMORY)}


def test_returned_clone_of_input() -> None:
    assert rewrite_and_check(lambda x: x.clone()) == {"clone": ("keep", Reason.OUTPUT_ALIASING)}


def test_returned_clone_of_constant() -> None:
    const = torch.arange(8.0)

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return const.clone(), x + 1

    gm_decisions = rewrite_and_check(f, constants=True)
    assert gm_decisions == {"clone": ("keep", Reason.OUTPUT_ALIASING)}


def test_returned_clone_of_value_returned_elsewhere() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        return y, y.clone()

    assert rewrite_and_check(f) == {"clone": ("keep", Reason.OUTPUT_ALIASING)}


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        # non-dense original: the clone is contiguous, and so is the product of either
        (lambda y: y[:, ::2].clone(), ("remove", Reason.LAYOUT_UNOBSERVED)),
        # the product of the transposed original would be transposed: the output shows it
        (lambda y: y.t().clone(memory_format=torch.contiguous_format), ("keep", Reason.LAYOUT)),
        # storage offset differs: the product is a fresh tensor either way
        (lambda y: y[1:].clone(), ("remove", Reason.LAYOUT_UNOBSERVED)),
    ],
    ids=["non-dense", "memory-format", "offset"],
)
def test_layout_changing_clone(make: Callable[[torch.Tensor], torch.Tensor], expected: tuple[str, Reason]) -> None:
    """C1 refined: a change of strides or offset goes when no consumer observes it (the layout
    refinement: the non-dense and offset cases go too, not only the dense ones)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return make(x + 1) * 2

    assert rewrite_and_check(f) == {"clone": expected}


@torch.library.custom_op("fxa_test::prefix_sum_into", mutates_args=("out",))
def prefix_sum_into(out: torch.Tensor, src: torch.Tensor) -> None:
    """Writes out[i] = sum(src[:i+1]) element by element: wrong if out and src alias."""
    flat_out, flat_src = out.view(-1), src.reshape(-1)
    for i in range(flat_out.numel()):
        flat_out[i] = flat_src[: i + 1].sum()


@prefix_sum_into.register_fake
def _(out: torch.Tensor, src: torch.Tensor) -> None:
    return None


def test_same_node_writes_clone_reads_original() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        c = y.clone()
        prefix_sum_into(c, y)
        return c

    assert rewrite_and_check(f) == {"clone": ("keep", Reason.SAME_NODE_WRITES_CLONE_READS_ORIGINAL)}


def test_same_node_writes_original_reads_clone() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        c = y.clone()
        prefix_sum_into(y, c)
        return y

    assert rewrite_and_check(f) == {"clone": ("keep", Reason.SAME_NODE_WRITES_ORIGINAL_READS_CLONE)}


def test_clone_with_two_direct_writers() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x + 1
        c = y.clone()
        c.add_(1)
        c.mul_(2)
        return c, y

    assert rewrite_and_check(f) == {"clone": ("keep", Reason.CLONE_WRITTEN_ORIGINAL_READ)}


def test_graph_without_metadata_keeps_clones() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.clone() * 2

    traced = torch.fx.symbolic_trace(f)
    # symbolic_trace records clone as a call_method; lower it to the aten op to make it a candidate.
    for node in traced.graph.nodes:
        if node.op == "call_method" and node.target == "clone":
            node.op, node.target = "call_function", torch.ops.aten.clone.default
    traced.recompile()
    rewritten = copy_program(traced)
    report = eliminate_clones(rewritten, strict=True)
    assert [(d.node, d.action, d.reason) for d in report.decisions] == [("clone", "keep", Reason.UNKNOWN_STORAGE)]
    check_equivalent(traced, rewritten, _inputs)


# --- torch.export ----------------------------------------------------------------------


class _BufferModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(8))
        self.weight = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.count.add_(1)  # a mutated buffer
        a = x.clone()  # written: x is a user input, must stay
        a.mul_(self.weight)
        b = x.clone()  # only read: goes
        return a + b, self.count.clone()


def test_exported_program_with_mutated_buffer() -> None:
    inputs = lambda: [torch.arange(32.0).view(4, 8)]  # noqa: E731
    ep = torch.export.export(_BufferModule(), tuple(inputs()))
    original = copy_program(ep)
    report = eliminate_clones(ep, strict=True)
    decisions = {d.node: (d.action, d.reason) for d in report.decisions}
    # x is read after the write (by the second clone) and is caller memory: C3 and C5 both hold.
    assert decisions["clone"] == ("keep", Reason.CLONE_WRITTEN_ORIGINAL_READ)
    assert decisions["clone_1"] == REMOVE
    assert decisions["clone_2"] == ("keep", Reason.OUTPUT_ALIASING)  # a returned copy of a buffer
    check_equivalent(original, ep, inputs)
    module = ep.module()
    _, count = module(*inputs())
    assert torch.equal(count, torch.ones(8))


# --- a pipeline's lowering of a functional fused op: clone, then an in-place kernel ---


@torch.library.custom_op("fxa_test::fused_add_rms_norm_", mutates_args=("x", "residual"))
def fused_add_rms_norm_(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    """In-place: residual += x; x = rms_norm(residual) * weight."""
    residual.add_(x)
    x.copy_(residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + 1e-6) * weight)


@fused_add_rms_norm_.register_fake
def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    return None


def _lowered_block(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = x * 2  # an intermediate, dead after the clone
    out = h.clone()
    res = residual.clone()  # a graph input: the clone protects the caller's tensor
    fused_add_rms_norm_(out.view(-1, out.shape[-1]), res.view(-1, res.shape[-1]), weight)
    return out, res


def _block_inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g), torch.randn(8, generator=g)]


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_lowered_fused_op_through_view(mode: str) -> None:
    decisions = rewrite_and_check(_lowered_block, _block_inputs, mode=mode)
    assert decisions == {"clone": REMOVE, "clone_1": ("keep", Reason.WRITES_CALLER_MEMORY)}


def test_lowered_fused_op_with_donated_residual() -> None:
    decisions = rewrite_and_check(_lowered_block, _block_inputs, donated=(1,))
    assert decisions == {"clone": REMOVE, "clone_1": REMOVE}


def test_second_run_over_stale_metadata_stays_sound() -> None:
    """After a removal, users of the clone keep fake tensors of its (dead) storage; an
    undeclared view (_unsafe_view) of it must still alias the original on a second run."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        c = y.clone()
        v = torch.ops.aten._unsafe_view.default(c, [4, 2])
        d = y.clone()
        d.add_(1)
        return v.sum() + d.sum()

    inputs = lambda: [torch.randn(2, 4)]  # noqa: E731
    original = make_fx(f, tracing_mode="fake")(*inputs())
    rewritten = copy_program(original)
    first = eliminate_clones(rewritten, strict=True)
    second = eliminate_clones(rewritten, strict=True)
    assert first.removed == ("clone",)
    assert second.removed == ()
    check_equivalent(original, rewritten, inputs)


def test_exported_program_returning_removed_clones_keeps_its_signature() -> None:
    class Returns(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = x * 2
            return y.clone(), (y + 1).clone()

    inputs = lambda: [torch.randn(3)]  # noqa: E731
    ep = torch.export.export(Returns(), tuple(inputs()))
    original = copy_program(ep)
    report = eliminate_clones(ep, strict=True)
    assert report.removed == ("clone", "clone_1")
    names = [spec.arg.name for spec in ep.graph_signature.output_specs]  # type: ignore[union-attr]
    assert names == ["mul", "add"]
    check_equivalent(original, ep, inputs)


def test_removal_of_a_later_clone_unblocks_an_earlier_one() -> None:
    """Found by the soak campaign: the second clone of v0 was the read that kept the first;
    once it goes (it is dead), the first may go too, in the same run (C7 fixed point).
    With the dead-reader refinement the first goes at once: the second clone is a dead reader (C3 refined)."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor]:
        v0 = x + 1.0
        v1 = v0.clone()
        v1.add_(1.0)
        v0.clone()  # dead: removable, and the only read of v0 after v1's write
        v3 = v1.clone()
        v3.add_(1.0)
        return (v3,)

    decisions = rewrite_and_check(f, lambda: [torch.randn(1)])
    assert decisions == {"clone": ("remove", Reason.REMOVABLE_BY_DATAFLOW), "clone_1": REMOVE, "clone_2": REMOVE}
