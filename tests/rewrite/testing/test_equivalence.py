"""Tests of rewrite.testing.equivalence: check_equivalent's five clauses, exact and tolerant comparison, its
refusals (OracleError), copy_program."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from aliasing.errors import AliasingError
from rewrite.errors import NotEquivalent
from rewrite.testing.equivalence import OracleError, check_equivalent, copy_program

aten = torch.ops.aten


def _trace(fn: Callable[..., Any], *inputs: torch.Tensor) -> torch.fx.GraphModule:
    return make_fx(fn)(*inputs)


def _is_clone(node: torch.fx.Node) -> bool:
    return node.target in (aten.clone.default, "clone")


def _without_clones(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` with every clone replaced by its argument (an unchecked rewrite)."""
    new = copy_program(gm)
    for node in [n for n in new.graph.nodes if _is_clone(n)]:
        node.replace_all_uses_with(node.args[0])
        new.graph.erase_node(node)
    new.recompile()
    return new


def _clause(original: Any, rewritten: Any, inputs: Any, **kwargs: Any) -> str:
    with pytest.raises(NotEquivalent) as info:
        check_equivalent(original, rewritten, inputs, **kwargs)
    return info.value.clause


# ---- equivalent programs pass -------------------------------------------------


def test_removing_clone_of_intermediate_is_equivalent() -> None:
    x = torch.randn(3, 4)
    gm = _trace(lambda x: (x + 1).clone() * 2, x)
    rewritten = _without_clones(gm)
    assert not any(_is_clone(n) for n in rewritten.graph.nodes)
    check_equivalent(gm, rewritten, [x])
    check_equivalent(gm, rewritten, lambda: [torch.randn(3, 4)])


def test_nan_equals_nan_and_ints_compare_exactly() -> None:
    x = torch.tensor([float("nan"), 1.0])
    gm = _trace(lambda x: x * 2, x)
    check_equivalent(gm, copy_program(gm), [x])
    i = torch.tensor([1, 2, 3])
    assert _clause(_trace(lambda i: i * 2, i), _trace(lambda i: i * 2 + 1, i), [i]) == "output"


# ---- clause 1: output -------------------------------------------------------------


def test_changed_output_value_is_reported() -> None:
    x = torch.randn(4)
    with pytest.raises(NotEquivalent, match="output 0") as info:
        check_equivalent(_trace(lambda x: x + 1, x), _trace(lambda x: x + 2, x), [x])
    assert info.value.clause == "output"


def test_changed_output_strides_are_reported() -> None:
    x = torch.randn(3, 4)
    original = _trace(lambda x: x.t().contiguous(), x)
    rewritten = _trace(lambda x: x.t().clone(), x)  # clone keeps the transposed strides
    with pytest.raises(NotEquivalent, match="strides") as info:
        check_equivalent(original, rewritten, [x])
    assert info.value.clause == "output"


def test_changed_output_dtype_is_reported() -> None:
    x = torch.randn(4)
    assert _clause(_trace(lambda x: x + 1, x), _trace(lambda x: (x + 1).double(), x), [x]) == "output"


# ---- clause 2: input-mutation -----------------------------------------------------


def _mul_in_place(x: torch.Tensor) -> torch.Tensor:
    x.mul_(2)
    return x.clone()


def test_input_mutated_in_one_program_only_is_reported() -> None:
    x = torch.randn(4)
    original = _trace(lambda x: x * 2, x)
    rewritten = _trace(_mul_in_place, x.clone())
    with pytest.raises(NotEquivalent, match="input 0") as info:
        check_equivalent(original, rewritten, [x])
    assert info.value.clause == "input-mutation"


def test_donated_input_may_end_differently() -> None:
    x, y = torch.randn(4), torch.randn(4)
    original = _trace(lambda x, y: x * 2 + y, x, y)
    rewritten = _trace(lambda x, y: x.mul_(2).add(y), x.clone(), y)
    check_equivalent(original, rewritten, [x, y], donated_inputs=(0,))
    assert _clause(original, rewritten, [x, y], donated_inputs=(1,)) == "input-mutation"


class _Accumulate(torch.nn.Module):
    def __init__(self, update: bool) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(4))
        self.update = update

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.update:
            self.total.add_(x)
        return x + 1


def test_buffer_mutated_differently_is_reported_and_state_left_alone() -> None:
    original = torch.fx.symbolic_trace(_Accumulate(update=True))
    rewritten = torch.fx.symbolic_trace(_Accumulate(update=False))
    x = torch.ones(4)
    with pytest.raises(NotEquivalent, match="total") as info:
        check_equivalent(original, rewritten, [x])
    assert info.value.clause == "input-mutation"
    check_equivalent(original, copy_program(original), [x])
    assert torch.equal(original.total, torch.zeros(4))  # every run used a fresh copy
    assert torch.equal(x, torch.ones(4))


# ---- clause 3: new-aliasing -------------------------------------------------------


def test_output_newly_aliasing_an_input_is_reported() -> None:
    x = torch.randn(4)
    gm = _trace(lambda x: x.clone(), x)
    with pytest.raises(NotEquivalent, match="output 0 shares storage with input 0") as info:
        check_equivalent(gm, _without_clones(gm), [x])
    assert info.value.clause == "new-aliasing"
    check_equivalent(gm, _without_clones(gm), [x], donated_inputs=(0,))  # may take over a donated input


def test_aliasing_the_original_already_had_passes() -> None:
    x = torch.randn(3, 4)
    gm = _trace(lambda x: (x.t(), x[0].clone()), x)
    rewritten = copy_program(gm)
    check_equivalent(gm, rewritten, [x])


def test_two_outputs_newly_sharing_storage_are_reported() -> None:
    x = torch.randn(4)
    gm = _trace(lambda x: (lambda y: (y, y.clone()))(x + 1), x)
    with pytest.raises(NotEquivalent, match="output 1 shares storage with output 0") as info:
        check_equivalent(gm, _without_clones(gm), [x])
    assert info.value.clause == "new-aliasing"


def test_output_newly_aliasing_a_buffer_is_reported() -> None:
    class ReadBuffer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("b", torch.arange(4.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b.clone()

    tracer = torch.fx.Tracer()
    tracer.proxy_buffer_attributes = True  # read the buffer through get_attr, not as a traced constant
    module = ReadBuffer()
    gm = torch.fx.GraphModule(module, tracer.trace(module))
    assert any(n.op == "get_attr" and n.target == "b" for n in gm.graph.nodes)
    with pytest.raises(NotEquivalent, match="output 0 shares storage with module state 'b'") as info:
        check_equivalent(gm, _without_clones(gm), [torch.randn(4)])
    assert info.value.clause == "new-aliasing"


# ---- clause 4: raises -----------------------------------------------------------


def test_only_the_rewritten_side_raising_is_reported() -> None:
    x = torch.randn(6)
    original = _trace(lambda x: x + 1, x)
    rewritten = torch.fx.symbolic_trace(lambda x: x.view(5, -1) + 1)  # 6 elements: raises
    with pytest.raises(NotEquivalent, match="only the rewritten program raised") as info:
        check_equivalent(original, rewritten, [x])
    assert info.value.clause == "raises"


def test_original_raising_is_judged_the_rewrite_must_raise_the_same_type() -> None:
    x = torch.randn(6)
    raises = torch.fx.symbolic_trace(lambda x: x.view(5, -1) + 1)  # 6 elements: RuntimeError
    fine = _trace(lambda x: x + 1, x)
    with pytest.raises(NotEquivalent, match=r"original program raised RuntimeError.*returned normally") as info:
        check_equivalent(raises, fine, [x])  # the rewrite erased the raising op
    assert info.value.clause == "raises"
    check_equivalent(raises, copy_program(raises), [x])  # both raise RuntimeError: equivalent here
    other_message = torch.fx.symbolic_trace(lambda x: x.view(4, -1) + 1)  # another message, same type
    check_equivalent(raises, other_message, [x])
    other_type = torch.fx.symbolic_trace(_checked_sum)  # AssertionError on a negative sum
    with pytest.raises(NotEquivalent, match="rewritten program raised AssertionError") as info:
        check_equivalent(raises, other_type, [-torch.ones(6)])
    assert info.value.clause == "raises"


def _checked_sum(x: torch.Tensor) -> torch.Tensor:
    torch._assert(x.sum() > 0, "x must sum to a positive value")
    return x * 2


def _erases_the_check(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """An unsound 'dead code' pass: drops the assertion, whose result nothing uses."""
    new = copy_program(gm)
    for node in [n for n in new.graph.nodes if n.target is torch._assert]:
        new.graph.erase_node(node)
    new.graph.eliminate_dead_code()
    new.recompile()
    return new


def test_a_pass_that_erases_a_runtime_check_is_caught() -> None:
    gm = torch.fx.symbolic_trace(_checked_sum)
    erased = _erases_the_check(gm)
    assert not any(n.target is torch._assert for n in erased.graph.nodes)
    check_equivalent(gm, erased, [torch.ones(3)])  # where the check passes, nothing differs
    assert _clause(gm, erased, [-torch.ones(3)]) == "raises"  # where it fires, the rewrite must fire too


# ---- the oracle refuses to judge what it cannot check ----------------------------


def _refusal(original: Any, rewritten: Any, inputs: Any, **kwargs: Any) -> OracleError:
    with pytest.raises(OracleError) as info:
        check_equivalent(original, rewritten, inputs, **kwargs)
    assert not isinstance(info.value, (NotEquivalent, AssertionError))
    assert isinstance(info.value, AliasingError)
    return info.value


def test_wrong_number_of_inputs_is_not_judged_equivalent() -> None:
    x = torch.randn(4)
    plus_one = _trace(lambda x: x + 1, x)
    times_two = _trace(lambda x: x * 2, x)  # a genuinely different program
    for inputs in ([], [x, x], lambda: [x, x, x]):
        err = _refusal(plus_one, times_two, inputs)
        assert err.reason == "bad-inputs" and isinstance(err.error, TypeError)
    assert _clause(plus_one, times_two, [x]) == "output"  # on the right inputs the difference shows
    ep = torch.export.export(_Accumulate(update=True), (torch.randn(4),))
    assert _refusal(ep, ep, [x, x]).reason == "bad-inputs"


def test_meta_device_inputs_compare_nothing() -> None:
    meta = torch.empty(3, 4, device="meta")
    plus_one = torch.fx.symbolic_trace(lambda x: x + 1)
    plus_two = torch.fx.symbolic_trace(lambda x: x + 2)
    err = _refusal(plus_one, plus_two, [meta])
    assert err.reason == "nothing-compared"
    assert _refusal(plus_one, plus_one, lambda: [meta]).reason == "nothing-compared"
    writes = torch.fx.symbolic_trace(lambda x: x.add_(1))
    assert _refusal(writes, plus_one, [meta]).reason == "nothing-compared"
    # A difference that metadata alone shows is still a difference.
    double = torch.fx.symbolic_trace(lambda x: (x + 1).double())
    assert _clause(plus_one, double, [meta]) == "output"
    # One real tensor is enough to compare: the real input could have been mutated.
    two = torch.fx.symbolic_trace(lambda x, y: x + 1)
    check_equivalent(two, copy_program(two), [meta, torch.randn(2)])


def _write_and_return_nothing(x: torch.Tensor) -> None:
    x.add_(1)


def test_no_outputs_and_nothing_to_mutate_compare_nothing() -> None:
    def constant() -> tuple[()]:
        return ()

    def three() -> int:
        return 3

    empty = torch.fx.symbolic_trace(constant)
    assert _refusal(empty, copy_program(empty), []).reason == "nothing-compared"
    assert _refusal(torch.fx.symbolic_trace(three), torch.fx.symbolic_trace(three), []).reason == "nothing-compared"
    # A donated input is not compared either: nothing to judge.
    returns_none = torch.fx.symbolic_trace(lambda x: None)
    err = _refusal(returns_none, copy_program(returns_none), [torch.randn(3)], donated_inputs=(0,))
    assert err.reason == "nothing-compared"
    # A non-donated tensor input is compared even when nothing is returned.
    check_equivalent(returns_none, copy_program(returns_none), [torch.randn(3)])
    assert _clause(returns_none, torch.fx.symbolic_trace(_write_and_return_nothing), [torch.randn(3)]) == (
        "input-mutation"
    )


def test_genuine_differences_are_still_not_equivalent() -> None:
    x = torch.randn(4)
    assert _clause(_trace(lambda x: x + 1, x), _trace(lambda x: x + 2, x), [x]) == "output"
    assert _clause(_trace(lambda x: x + 1, x), _trace(lambda x: x.add_(1), x.clone()), [x]) in {
        "input-mutation",
        "new-aliasing",
    }


# ---- input copies keep layout and sharing ----------------------------------------


def _write_x_return_y(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return y.clone()


def _write_x_return_x_tail(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return x[1:].clone()


def test_inputs_sharing_storage_share_it_in_the_copies() -> None:
    base = torch.arange(6.0)
    original = torch.fx.symbolic_trace(_write_x_return_y)
    rewritten = torch.fx.symbolic_trace(_write_x_return_x_tail)
    check_equivalent(original, rewritten, [base, base[1:]])  # equal only if y is a view of x
    assert _clause(original, rewritten, [base, base[1:].clone()]) == "output"
    assert torch.equal(base, torch.arange(6.0))  # the caller's tensors are never touched


def test_input_copies_keep_strides_and_storage_offset() -> None:
    keep_layout = torch.fx.symbolic_trace(lambda x: x.clone())
    make_dense = torch.fx.symbolic_trace(lambda x: x.clone(memory_format=torch.contiguous_format))
    check_equivalent(keep_layout, make_dense, [torch.randn(3, 4)])
    assert _clause(keep_layout, make_dense, [torch.randn(3, 4).t()]) == "output"
    offset = torch.fx.symbolic_trace(lambda x: x.storage_offset())
    three = torch.fx.symbolic_trace(lambda x: 3)
    check_equivalent(offset, three, [torch.arange(6.0)[3:]])
    assert _clause(offset, three, [torch.arange(6.0)[2:]]) == "output"


# ---- copy_program ----------------------------------------------------------------


def test_copy_program_is_independent() -> None:
    x = torch.randn(4)
    gm = _trace(lambda x: (x + 1).clone(), x)
    code = gm.code
    copied = copy_program(gm)
    clone = next(n for n in copied.graph.nodes if _is_clone(n))
    original_clone = next(n for n in gm.graph.nodes if _is_clone(n))
    assert clone is not original_clone and clone.name == original_clone.name
    assert clone.meta is not original_clone.meta
    assert clone.meta["val"] is original_clone.meta["val"]  # fake tensors shared, not copied
    clone.replace_all_uses_with(clone.args[0])
    copied.graph.erase_node(clone)
    copied.recompile()
    assert gm.code == code and any(_is_clone(n) for n in gm.graph.nodes)
    gm.graph.lint()


class _WithState(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 2.0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).clone() * self.scale


def test_copy_program_carries_state_with_its_kind() -> None:
    gm = torch.fx.symbolic_trace(_WithState())
    gm._non_persistent_buffers_set.add("scale")  # hand edits: a non-persistent buffer ...
    gm.offset = torch.ones(4)  # ... and a plain tensor attribute read by get_attr
    output = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(output), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fx warns that a plain attribute is not a registered buffer
        shifted = gm.graph.call_function(torch.add, (output.args[0], gm.graph.get_attr("offset")))
    output.args = (shifted,)
    gm.recompile()
    copied = copy_program(gm)
    assert dict(copied.named_parameters()).keys() == {"lin.weight", "lin.bias"}
    assert copied.get_parameter("lin.weight") is gm.get_parameter("lin.weight")
    assert copied.get_buffer("scale") is gm.get_buffer("scale")
    assert copied.state_dict().keys() == gm.state_dict().keys() == {"lin.weight", "lin.bias"}
    assert "offset" in vars(copied) and copied.offset is gm.offset
    check_equivalent(gm, _without_clones(gm), [torch.randn(2, 4)])


def test_copy_program_copies_subgraphs_of_higher_order_ops() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda x: x.clone(), lambda x: x + 1, (x,))

    x = torch.randn(4)
    gm = _trace(f, x)
    copied = copy_program(gm)
    names = [str(n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    assert names
    for name in names:
        sub, sub_copy = gm.get_submodule(name), copied.get_submodule(name)
        assert isinstance(sub_copy, torch.fx.GraphModule) and sub_copy is not sub
        assert sub_copy.graph is not sub.graph
    check_equivalent(gm, copied, [x])
    check_equivalent(gm, copied, [-x])


class _Exported(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1)
        return (x * 2).clone() + self.count


def test_exported_program_copy_and_check() -> None:
    ep = torch.export.export(_Exported(), (torch.randn(3),))
    copied = copy_program(ep)
    assert isinstance(copied, torch.export.ExportedProgram)
    clone = next(n for n in copied.graph_module.graph.nodes if _is_clone(n))
    clone.replace_all_uses_with(clone.args[0])
    copied.graph_module.graph.erase_node(clone)
    copied.graph_module.recompile()
    assert any(_is_clone(n) for n in ep.graph.nodes)
    assert not any(_is_clone(n) for n in copied.graph.nodes)
    check_equivalent(ep, copied, [torch.randn(3)])
    assert torch.equal(ep.state_dict["count"], torch.zeros(3))
    forgets_buffer = torch.export.export(_Accumulate(update=False), (torch.randn(4),))
    remembers = torch.export.export(_Accumulate(update=True), (torch.randn(4),))
    assert _clause(remembers, forgets_buffer, [torch.randn(4)]) == "input-mutation"


class _DoubleInPlace(torch.nn.Module):
    def __init__(self, in_place: bool) -> None:
        super().__init__()
        self.register_buffer("unused", torch.zeros(2))
        self.in_place = in_place

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(2).clone() if self.in_place else x * 2


def test_exported_program_donated_positions_are_placeholder_positions() -> None:
    x = torch.randn(3)
    original = torch.export.export(_DoubleInPlace(in_place=False), (x.clone(),))
    rewritten = torch.export.export(_DoubleInPlace(in_place=True), (x.clone(),))
    kinds = [spec.kind.name for spec in original.graph_signature.input_specs]
    assert kinds == ["BUFFER", "USER_INPUT"]
    check_equivalent(original, rewritten, [x], donated_inputs=(1,))
    assert _clause(original, rewritten, [x], donated_inputs=(0,)) == "input-mutation"


# ---- exact comparison, and a tolerance only when asked for ------------------------


def _reorder_sums(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A pass that sums in another order (reverses the operand first): equal in real arithmetic only."""
    new = copy_program(gm)
    for node in [n for n in new.graph.nodes if n.target is aten.sum.default]:
        with new.graph.inserting_before(node):
            flipped = new.graph.call_function(aten.flip.default, (node.args[0], [0]))
        node.args = (flipped, *node.args[1:])
    new.recompile()
    return new


def test_a_reordered_sum_is_caught_exactly_and_accepted_with_a_tolerance() -> None:
    x = torch.tensor([1.0, 2.0**-24, 2.0**-24])  # (1 + e) + e rounds to 1, e + e + 1 does not
    gm = _trace(lambda x: x.sum() * 2, x)
    reordered = _reorder_sums(gm)
    assert not torch.equal(gm(x), reordered(x)) and torch.allclose(gm(x), reordered(x))
    with pytest.raises(NotEquivalent, match=r"compared bitwise.*1 of 1 elements") as info:
        check_equivalent(gm, reordered, [x])
    assert info.value.clause == "output"
    check_equivalent(gm, reordered, [x], rtol=1e-6)
    check_equivalent(gm, reordered, [x], atol=1e-6)
    check_equivalent(gm, reordered, [x], rtol=1.3e-6, atol=1e-5)
    assert _clause(gm, reordered, [x], rtol=1e-9) == "output"  # a tolerance too tight still catches it
    check_equivalent(gm, reordered, [torch.tensor([1.0, 2.0, 3.0])])  # exact where no rounding differs


def test_tolerance_applies_to_final_inputs_but_never_to_integers() -> None:
    x = torch.tensor([1.0, 2.0**-24, 2.0**-24])
    writes_sum = _trace(lambda x: x.copy_(x.sum().expand(3)).clone(), x.clone())
    reordered = _reorder_sums(writes_sum)
    assert _clause(writes_sum, reordered, [x]) == "output"
    check_equivalent(writes_sum, reordered, [x], rtol=1e-6)
    i = torch.tensor([100, 200])
    assert _clause(_trace(lambda i: i + 1, i), _trace(lambda i: i + 2, i), [i], rtol=0.5, atol=10) == "output"
    floats = torch.fx.symbolic_trace(lambda x: x.sum().item())
    shifted = torch.fx.symbolic_trace(lambda x: x.sum().item() + 1e-12)
    assert _clause(floats, shifted, [torch.ones(2)]) == "output"  # Python floats too
    check_equivalent(floats, shifted, [torch.ones(2)], atol=1e-9)


def test_nan_matches_any_nan_and_the_sign_of_zero_counts() -> None:
    x = torch.ones(3)
    nan = torch.fx.symbolic_trace(lambda x: torch.full_like(x, float("nan")))
    negated_nan = torch.fx.symbolic_trace(lambda x: -torch.full_like(x, float("nan")))  # another sign bit
    assert not torch.equal(nan(x).view(torch.int32), negated_nan(x).view(torch.int32))
    check_equivalent(nan, negated_nan, [x])
    zero = torch.fx.symbolic_trace(lambda x: torch.zeros_like(x))
    negative_zero = torch.fx.symbolic_trace(lambda x: -torch.zeros_like(x))  # 1 / result tells them apart
    assert _clause(zero, negative_zero, [x]) == "output"
    check_equivalent(zero, negative_zero, [x], atol=0.0)  # a tolerance compares values: -0.0 == 0.0
    complex_in = torch.tensor([1 + 2j, float("nan") + 0j])
    conj = _trace(lambda z: z.conj().clone(), complex_in)
    check_equivalent(conj, copy_program(conj), [complex_in])
    assert _clause(conj, _trace(lambda z: z.clone(), complex_in), [complex_in]) == "output"
    half = _trace(lambda x: (x * 3).to(torch.bfloat16), x)
    check_equivalent(half, copy_program(half), [x])


def test_bad_tolerances_are_rejected() -> None:
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    for bad in ({"rtol": -1.0}, {"atol": float("nan")}, {"rtol": "1e-5"}, {"atol": True}):
        with pytest.raises(ValueError, match="non-negative"):
            check_equivalent(gm, gm, [torch.ones(2)], **bad)


# ---- clause 5: rng-state ----------------------------------------------------------


def _noisy(x: torch.Tensor) -> torch.Tensor:
    mask = torch.empty_like(x).bernoulli_(0.5)
    return torch.nn.functional.dropout(x, 0.5, training=True) * mask + torch.rand(x.shape)


class _Dropout(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5, training=True)


def test_a_random_program_equals_an_unmodified_copy_of_itself() -> None:
    x = torch.randn(16)
    before = torch.get_rng_state()
    for gm in (_trace(_noisy, x), torch.fx.symbolic_trace(_noisy)):
        check_equivalent(gm, copy_program(gm), [x])
        check_equivalent(gm, copy_program(gm), lambda: [torch.randn(16)])
    ep = torch.export.export(_Dropout(), (x,))
    check_equivalent(ep, copy_program(ep), [x])
    gm = _trace(_noisy, x)  # tracing with real tensors draws: trace first
    torch.manual_seed(0)
    first = torch.rand(4)
    torch.manual_seed(0)
    check_equivalent(gm, copy_program(gm), [x])
    assert torch.equal(torch.rand(4), first)  # the oracle draws nothing of its own
    assert not torch.equal(torch.get_rng_state(), before)  # (the input factories above did draw)


def _extra_draw(gm: torch.fx.GraphModule, where: str) -> torch.fx.GraphModule:
    """A pass that inserts an unused ``aten.rand`` call before the first or after the last random op."""
    new = copy_program(gm)
    random_ops = [n for n in new.graph.nodes if n.op == "call_function" and "rand" in str(n.target)]
    anchor = random_ops[0] if where == "first" else random_ops[-1].next
    with new.graph.inserting_before(anchor):
        new.graph.call_function(aten.rand.default, ([3],), {"device": torch.device("cpu"), "pin_memory": False})
    new.recompile()  # no dead-code elimination: the unused draw stays
    return new


def test_drawing_more_random_numbers_is_caught() -> None:
    x = torch.randn(8)
    gm = _trace(lambda x: x + torch.rand(8), x)
    after = _extra_draw(gm, "last")  # same outputs, but the generator ends elsewhere
    assert len(after.graph.nodes) == len(gm.graph.nodes) + 1
    with pytest.raises(NotEquivalent, match="CPU default generator ends in another state") as info:
        check_equivalent(gm, after, [x])
    assert info.value.clause == "rng-state"
    assert _clause(gm, _extra_draw(gm, "first"), [x]) == "output"  # the used draw moves: values change
    assert _clause(after, gm, [x]) == "rng-state"  # dropping a dead random op is caught too


def _returns_three(draw: bool) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    if draw:
        graph.call_function(torch.rand, (2,))  # unused: only the generator sees it
    graph.output(3)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_a_program_that_only_draws_is_compared_by_its_generator() -> None:
    draws, still = _returns_three(draw=True), _returns_three(draw=False)
    check_equivalent(draws, copy_program(draws), [])  # drawing is something to compare
    assert _clause(draws, still, []) == "rng-state"
    assert _clause(still, draws, []) == "rng-state"
    assert _refusal(still, copy_program(still), []).reason == "nothing-compared"


def _draw_from(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    return x + torch.rand(x.shape, generator=g)


def _draw_twice_from(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    torch.rand(x.shape, generator=g)
    return x + torch.rand(x.shape, generator=g)


def test_generators_passed_as_inputs_are_copied_and_compared() -> None:
    g = torch.Generator().manual_seed(7)
    state = g.get_state()
    once, twice = torch.fx.symbolic_trace(_draw_from), torch.fx.symbolic_trace(_draw_twice_from)
    check_equivalent(once, copy_program(once), [torch.zeros(4), g])
    assert torch.equal(g.get_state(), state)  # each run drew from its own copy
    twice_then_drop = torch.fx.symbolic_trace(lambda x, g: (torch.rand(x.shape, generator=g), x.clone())[1])
    assert _clause(once, twice, [torch.zeros(4), g]) == "output"
    with pytest.raises(NotEquivalent, match="generator passed as input 1") as info:
        check_equivalent(torch.fx.symbolic_trace(lambda x, g: x.clone()), twice_then_drop, [torch.zeros(4), g])
    assert info.value.clause == "rng-state"
