"""The Inductor adapter end to end: torch.compile with CloneEliminationPass against eager.

Integration tests (each compile takes seconds on the C++ backend). Every case
compiles a program with ``post_grad_custom_post_pass=CloneEliminationPass()``,
runs eager and compiled on equal fresh inputs, and compares the outputs and the
inputs afterwards (input mutations). Then it checks what the pass did: which
functional ops it lowered and how many clones remain, and that its hazard
guard (on by default; ``tests/rewrite/inductor/test_inductor_guard.py`` tests it) found
nothing to guard in these programs. The Triton case runs in a
subprocess: it installs a target-only Triton driver (so that Triton's mutation
analysis works without a GPU) and runs the captured graphs with the kernel under
the Triton interpreter (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from rewrite.inductor import REPORT_DIR_ENV, CloneEliminationPass, compile_options, library_source_hash
from rewrite.pipeline.reports import PipelineReport

#: torch.compile with Inductor (and a Triton kernel in a subprocess)
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]

# --- custom ops ------------------------------------------------------------------------


@torch.library.custom_op("fxa_inductor_test::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(1)


@torch.library.custom_op("fxa_inductor_test::axpy_", mutates_args=("a", "b"))
def axpy_(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    a.add_(c)
    b.mul_(2)


@torch.library.custom_op("fxa_inductor_test::split2", mutates_args=("x",))
def split2(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x.mul_(2)
    return x + 1, x - 1


@split2.register_fake
def _split2_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op("fxa_inductor_test::rotary_", mutates_args=("q", "k"))
def rotary_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    h = q.shape[-1] // 2
    for t in (q, k):
        a, b = t[..., :h].clone(), t[..., h:].clone()
        t[..., :h] = a * cos - b * sin
        t[..., h:] = b * cos + a * sin


@torch.library.custom_op("fxa_inductor_test::addrev_", mutates_args=("y",))
def addrev_(y: torch.Tensor, x: torch.Tensor) -> None:
    """``y[i] += x[n-1-i]`` element by element: wrong if ``y`` and ``x`` share memory."""
    n = y.shape[0]
    for i in range(n):
        y[i] += x[n - 1 - i]


@torch.library.custom_op("fxa_inductor_test::exponent_up_", mutates_args=("x",))
def exponent_up_(x: torch.Tensor) -> None:
    """Adds ``1 << 23``: to an int32 view of float32 values, one to their exponents (it doubles them, a change
    no rounding tolerance hides); a float32 argument instead would grow by 8388608."""
    x.add_(1 << 23)


@torch.library.custom_op("fxa_inductor_test::bump8_", mutates_args=("x",))
def bump8_(x: torch.Tensor) -> None:
    """Adds one in the argument's own dtype (through float32: float8 has no ``add``)."""
    x.copy_((x.float() + 1).to(x.dtype))


@torch.library.custom_op("fxa_inductor_test::checksum", mutates_args=())
def checksum(x: torch.Tensor) -> torch.Tensor:
    """An opaque reader: the sum of the values, in float64."""
    return x.double().sum().reshape(1)


@checksum.register_fake
def _checksum_fake(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(1, dtype=torch.float64)


# --- programs --------------------------------------------------------------------------


def mutated_intermediate(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    bump_(y)
    return y + 1


def mutated_input(x: torch.Tensor) -> torch.Tensor:
    bump_(x)
    return x.sum()


def mutated_view_of_input(x: torch.Tensor) -> torch.Tensor:
    bump_(x[1])
    return x * 2  # reads all of x after the write (not a no-op Inductor may drop: x + 0 is one on 2.14)


def mutated_slice_of_input(x: torch.Tensor) -> torch.Tensor:
    bump_(x[:, 1:3])
    return x + 1  # reads all of x after the write


def two_mutated_args(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = x + 1
    axpy_(z, y, x)
    return z


def multi_output(x: torch.Tensor) -> torch.Tensor:
    a, b = split2(x)
    return a * b


def repeated_mutation(x: torch.Tensor) -> torch.Tensor:
    bump_(x)
    bump_(x)
    y = x * 2
    bump_(y)
    bump_(y)
    return y


def qkv_rotary(x: torch.Tensor, w: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    qkv = x @ w
    q, k, v = qkv.split([8, 8, 8], dim=-1)
    rotary_(q, k, cos, sin)
    return (q * k).sum(-1, keepdim=True) * v


def shared_kv_pool(pool: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One op writes two disjoint views (the K and the V half) of one cache buffer."""
    axpy_(pool[0], pool[1], k)
    return pool[0].sum() + v.sum()


def inductor_198031(a: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#198031: ``y = x.clone(); op(y, x)`` with op mutating its first argument."""
    x = a + 1
    y = x.clone()
    addrev_(y, x)
    return y


def views_overlap_intermediate(a: torch.Tensor) -> torch.Tensor:
    """In the spirit of pytorch/pytorch#198094 (wrong results around views in reinplacing):
    a clone of one view of an intermediate is written while the op reads an overlapping view."""
    x = a + 1
    y = x[1:].clone()
    addrev_(y, x[:-1])
    return y


def views_overlap_input(a: torch.Tensor) -> torch.Tensor:
    """In the spirit of pytorch/pytorch#198094: the same with a view of a graph input."""
    y = a[1:].clone()
    addrev_(y, a[:-1])
    return y


def input_view_mutation_reads_clone(a: torch.Tensor) -> torch.Tensor:
    """In the spirit of pytorch/pytorch#198131 (overlap ignored when reinplacing an input
    mutation): a view of the input is written while the op reads a snapshot of the input."""
    y = a.clone()
    addrev_(a[1:], y[:-1])
    return a * 2  # a fresh output that reads a afterwards (a * 1 is dropped by Inductor 2.14)


def transposed_clone_row_mutated(x: torch.Tensor) -> torch.Tensor:
    """A mutated row of a transposed copy of an input. Version-1 functionalization drops the clone
    (the joint graph's no-op removal) and writes the row back into the transposed input with a scatter;
    the lowering then copies the base once and lets the op write the row of that copy, as version 2 does."""
    y = x.t().clone()
    bump_(y[1])
    return y


def old_value_read_after(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    bump_(y)
    return y + x


# Dtype views of inputs: the op must get the view's dtype, and the input is written in place as stock
# Inductor writes it (the lowering once rebuilt the argument in the storage root's dtype, and kept a copy
# where the functional graph's own dtype views of the new value hid it from the analysis).


def int32_view_of_row(x: torch.Tensor) -> torch.Tensor:
    exponent_up_(x[1].view(torch.int32))
    return x * 2


def fp8_view_of_pool_row(pool: torch.Tensor) -> torch.Tensor:
    """A float8 view of a row of a uint8 pool (a quantized KV cache)."""
    bump8_(pool[2].view(torch.float8_e4m3fn))
    return pool + 1


def int32_view_of_input(x: torch.Tensor) -> torch.Tensor:
    exponent_up_(x.view(torch.int32))
    return x * 2


def int32_view_then_row(x: torch.Tensor) -> torch.Tensor:
    exponent_up_(x.view(torch.int32)[1])
    return x * 2


def two_ops_reader_between(x: torch.Tensor) -> torch.Tensor:
    v = x.view(torch.int32)
    exponent_up_(v)
    r = checksum(v)
    exponent_up_(v)
    return r


def old_value_cloned(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    exponent_up_(x.view(torch.int32))
    return y + 1


def view_as_real_row(x: torch.Tensor) -> torch.Tensor:
    """A row of the real view of a complex view of a float input."""
    bump_(torch.view_as_real(x.view(torch.complex64))[1])
    return x * 2


def uint8_pool() -> list[torch.Tensor]:
    return [torch.arange(24, dtype=torch.uint8).view(3, 8)]


def arange6() -> list[torch.Tensor]:
    return [torch.arange(6.0)]


def randn(*shapes: tuple[int, ...]) -> Callable[[], list[torch.Tensor]]:
    def make() -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        return [torch.randn(*s, generator=g) for s in shapes]

    return make


def rotary_inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    angle = torch.rand(4, 4, generator=g)
    return [torch.randn(4, 16, generator=g), torch.randn(16, 24, generator=g), angle.cos(), angle.sin()]


# --- harness ---------------------------------------------------------------------------


def compile_and_compare(
    fn: Callable[..., Any],
    inputs: Callable[[], Sequence[torch.Tensor]],
    *,
    v2: bool = True,
    pass_: Any = None,
    dynamic: bool = False,
) -> PipelineReport:
    """Compile ``fn`` with the pass, compare with eager, return the pass's report."""
    torch._dynamo.reset()
    p = CloneEliminationPass() if pass_ is None else pass_
    with torch._inductor.config.patch(enable_auto_functionalized_v2=v2, fx_graph_cache=False), torch._functorch.config.patch(
        enable_autograd_cache=False
    ):
        compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic, options={"post_grad_custom_post_pass": p})
        eager_inputs, compiled_inputs = list(inputs()), list(inputs())
        expected = fn(*eager_inputs)
        got = compiled(*compiled_inputs)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=lambda m: f"outputs differ: {m}")
    for i, (a, b) in enumerate(zip(compiled_inputs, eager_inputs)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, i=i: f"input {i} after the call: {m}")
    report = p.last_report if isinstance(p, CloneEliminationPass) else None
    assert report is not None and report.error is None, report
    if p.guard:
        assert p.last_guard_report is not None and p.last_guard_report.guarded == (), str(p.last_guard_report)
    return report


def remaining(report: PipelineReport) -> int:
    return len(report.lowering.clones) - len([c for c in report.lowering.clones if c in report.removed])


# --- cases -----------------------------------------------------------------------------


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
@pytest.mark.parametrize(
    ("fn", "inputs"),
    [
        (mutated_intermediate, randn((8,))),
        (mutated_input, randn((8,))),
        (mutated_view_of_input, randn((3, 4))),
        (mutated_slice_of_input, randn((3, 4))),
        (two_mutated_args, randn((8,), (8,))),
        (multi_output, randn((8,))),
        (repeated_mutation, randn((8,))),
        (qkv_rotary, rotary_inputs),
        (shared_kv_pool, randn((2, 4, 8), (4, 8), (4, 8))),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_needless_copies_all_go(fn: Callable[..., Any], inputs: Callable[[], list[torch.Tensor]], v2: bool) -> None:
    report = compile_and_compare(fn, inputs, v2=v2)
    assert report.lowering.lowered, "nothing was lowered"
    assert report.lowering.skipped == ()
    assert remaining(report) == 0, str(report)


@pytest.mark.parametrize(
    ("fn", "inputs"),
    [
        (inductor_198031, arange6),
        (views_overlap_intermediate, arange6),
        (views_overlap_input, arange6),
        (input_view_mutation_reads_clone, arange6),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_inductor_wrong_result_reproductions_are_right(fn: Callable[..., Any], inputs: Callable[[], list[torch.Tensor]]) -> None:
    """Programs that stock Inductor compiles to wrong results (see their docstrings).

    With the pass the op writes a copy: it reads memory overlapping what it writes.
    """
    report = compile_and_compare(fn, inputs)
    assert remaining(report) == 1, str(report)
    kept = [d for rep in report.eliminations for d in rep.decisions if d.action == "keep" and not d.reason.is_copy_reason]
    assert kept and kept[0].reason.condition in {"C3", "C4"}


@pytest.mark.parametrize(
    ("fn", "inputs", "v2"),
    [
        (shared_kv_pool, randn((2, 4, 8), (4, 8), (4, 8)), True),
        (shared_kv_pool, randn((2, 4, 8), (4, 8), (4, 8)), False),
        (qkv_rotary, rotary_inputs, False),
    ],
    ids=["shared_kv_pool-v2", "shared_kv_pool-v1", "qkv_rotary-v1"],
)
def test_dynamic_shapes(fn: Callable[..., Any], inputs: Callable[[], list[torch.Tensor]], v2: bool) -> None:
    """Symbolic sizes and offsets (vLLM compiles with a dynamic token dimension).

    Stock Inductor compiles the shared KV pool to wrong results under
    ``dynamic=True`` (the second view's symbolic storage offset is lost and both
    writes land in the first view); with the pass the views are replayed on the
    pool and the result is right.
    """
    report = compile_and_compare(fn, inputs, v2=v2, dynamic=True)
    assert report.lowering.skipped == () and remaining(report) == 0, str(report)


def test_v1_transposed_row_copies_the_base_once() -> None:
    """``y = x.t().clone(); bump_(y[1]); return y`` under version 1: stock Inductor copies the row (the flat
    storage prefix of a strided view) and then the whole transposed input (the scatter write-back): 2 copies,
    88 bytes. The pass clones the base once and lets the op write the row of that clone, as version 2 does."""
    from torch._inductor.utils import run_and_get_code

    from benchmarks.inductor_copies import count_copies

    report = compile_and_compare(transposed_clone_row_mutated, randn((3, 4)), v2=False)
    assert [low.kind for low in report.lowering.lowered] == ["auto_functionalized"]
    assert remaining(report) == 1 and report.dropped_copies == ()
    counts = {}
    for name, options in (("stock", {}), ("pass", {"post_grad_custom_post_pass": CloneEliminationPass()})):
        torch._dynamo.reset()
        with torch._inductor.config.patch(enable_auto_functionalized_v2=False, fx_graph_cache=False):
            compiled = torch.compile(transposed_clone_row_mutated, fullgraph=True, options=options)
            _, code = run_and_get_code(compiled, *randn((3, 4))())
        c = [count_copies(src) for src in code]
        counts[name] = (sum(x.copies for x in c), sum(x.nbytes for x in c))
    assert counts == {"stock": (2, 88), "pass": (1, 48)}


def test_old_value_read_keeps_clone() -> None:
    report = compile_and_compare(old_value_read_after, randn((8,)))
    assert remaining(report) == 1


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous().reshape(-1)
    return (torch.view_as_real(t) if t.is_complex() else t).reshape(-1).view(torch.uint8)


def same_bits(a: Any, b: Any) -> bool:
    """Equal values, bitwise (dtype and shape included)."""
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        ok = isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        return ok and bool(torch.equal(_bits(a), _bits(b)))
    return bool(a == b)


def compile_and_count(
    fn: Callable[..., Any], inputs: Callable[[], Sequence[torch.Tensor]], options: dict[str, Any], *, v2: bool, dynamic: bool = False
) -> tuple[bool, tuple[int, int]]:
    """Compile ``fn`` with ``options``: whether outputs and inputs afterwards are eager's bitwise, and the
    (copies, bytes) of Inductor's final code as ``benchmarks/inductor_copies.py`` counts them."""
    from torch._inductor.utils import run_and_get_code

    from benchmarks.inductor_copies import count_copies

    torch._dynamo.reset()
    with torch._inductor.config.patch(enable_auto_functionalized_v2=v2, fx_graph_cache=False), torch._functorch.config.patch(
        enable_autograd_cache=False
    ):
        compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic, options=options)
        eager_inputs, compiled_inputs = list(inputs()), list(inputs())
        expected = fn(*eager_inputs)
        got, code = run_and_get_code(compiled, *compiled_inputs)
    right = same_bits(got, expected) and same_bits(compiled_inputs, eager_inputs)
    counts = [count_copies(c) for c in code]
    return right, (sum(c.copies for c in counts), sum(c.nbytes for c in counts))


def _dtype_view_cases() -> list[Any]:
    cases = [
        (int32_view_of_row, randn((3, 4)), (True, False)),
        (fp8_view_of_pool_row, uint8_pool, (True, False)),
        (int32_view_of_input, randn((8,)), (True, False)),
        (int32_view_then_row, randn((3, 4)), (True, False)),
        (two_ops_reader_between, randn((8,)), (True, False)),
        (view_as_real_row, randn((3, 8)), (False,)),  # version 2: see test_v2_view_as_real_is_left_to_inductor
    ]
    out = []
    for fn, inputs, versions in cases:
        for v2 in versions:
            for dynamic in (False, True):
                marks = [pytest.mark.slow] if dynamic and fn is not int32_view_of_row else []
                name = f"{fn.__name__}-{'v2' if v2 else 'v1'}{'-dynamic' if dynamic else ''}"
                out.append(pytest.param(fn, inputs, v2, dynamic, id=name, marks=marks))
    return out


@pytest.mark.parametrize(("fn", "inputs", "v2", "dynamic"), _dtype_view_cases())
def test_dtype_view_of_an_input_is_written_in_place(
    fn: Callable[..., Any], inputs: Callable[[], list[torch.Tensor]], v2: bool, dynamic: bool
) -> None:
    """The op gets the dtype view (int32, float8, the real view of a complex view), and writes the input in
    place: no copy left (stock Inductor copies the base, or the argument and the base), and never more
    copies than stock where stock compiles the program right."""
    from rewrite.inductor import compile_options

    options = compile_options()
    p = options["post_grad_custom_post_pass"]
    right, ours = compile_and_count(fn, inputs, options, v2=v2, dynamic=dynamic)
    assert right, "the pass changed the result"
    report = p.last_report
    assert report is not None and report.lowering.lowered and report.lowering.skipped == (), str(report)
    assert remaining(report) == 0 and ours == (0, 0), (str(report), ours)
    assert p.last_guard_report is not None and p.last_guard_report.guarded == (), str(p.last_guard_report)
    stock_right, stock = compile_and_count(fn, inputs, {}, v2=v2, dynamic=dynamic)
    if stock_right:  # (symbolic sizes count 0 bytes: then the copies are compared)
        assert ours[0] <= stock[0] and ours[1] <= stock[1], (ours, stock)


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
def test_old_value_cloned_before_a_dtype_view_is_written(v2: bool) -> None:
    """``y = x.clone(); exponent_up_(x.view(torch.int32)); return y + 1``: functionalization drops ``y``'s clone, so
    the op's copy stays (the old value is read after the op, C3) with its copy-back; the op writes the copy
    itself, not a bitcast of it (Inductor would write a buffer of its own). Stock Inductor compiles version 2
    to a wrong result on torch 2.13 (it writes the input in place); where stock is right, no more copies."""
    from rewrite.inductor import compile_options

    options = compile_options()
    p = options["post_grad_custom_post_pass"]
    right, ours = compile_and_count(old_value_cloned, randn((8,)), options, v2=v2)
    assert right, "the pass changed the result"
    report = p.last_report
    assert report is not None and remaining(report) == 1, str(report)
    kept = [d for rep in report.eliminations for d in rep.decisions if d.action == "keep" and d.node in report.lowering.clones]
    assert [d.reason.condition for d in kept] == ["C3"], str(report)
    stock_right, stock = compile_and_count(old_value_cloned, randn((8,)), {}, v2=v2)
    if stock_right:
        assert ours[0] <= stock[0] and ours[1] <= stock[1], (ours, stock)


def test_v2_view_as_real_is_left_to_inductor() -> None:
    """Version 2 records ``view_as_real(x.view(torch.complex64))[1]`` as an ``as_strided`` of the complex base
    in float elements, without the dtype: it cannot be regenerated exactly. The lowering leaves the wrapper
    to Inductor (which fails to compile it on torch 2.13 with or without the pass) rather than call the op
    on another view."""
    from rewrite.inductor import compile_options

    options = compile_options()
    p = options["post_grad_custom_post_pass"]
    try:
        right, _ = compile_and_count(view_as_real_row, randn((3, 8)), options, v2=True)
    except Exception:  # Inductor's own failure (torch 2.13: "auto_functionalized_v2 was not removed")
        right = True
    assert right, "a wrong result"
    report = p.last_report
    assert report is not None and report.lowering.lowered == (), str(report)
    assert [s.kind for s in report.lowering.skipped] == ["auto_functionalized_v2"], str(report)


def test_copy_counter_sees_copies_through_bitcasts() -> None:
    """A dtype view of a buffer Inductor computes is a bitcast in the kernel: a vectorized kernel's scalar
    fallback (a lambda over local arrays) or ``c10::bit_cast``. Copying through one is a copy."""
    from benchmarks.inductor_copies import count_copies

    q = "'" * 3
    vectorized = """extern "C"  void  kernel(const float* in_ptr0,
                       int32_t* out_ptr0)
{
    {
        for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(8L); x0+=static_cast<int64_t>(16L))
        {
            {
                if(C10_LIKELY(x0 >= static_cast<int64_t>(0L) && x0 < static_cast<int64_t>(8L)))
                {
                    auto tmp0 = at::vec::Vectorized<float>::loadu(in_ptr0 + static_cast<int64_t>(x0), static_cast<int64_t>(8L));
                    auto tmp1 =
                    [&]()
                    {
                        __at_align__ std::array<float, 16> tmpbuf0;
                        tmp0.store(tmpbuf0.data(), static_cast<int64_t>(8L));
                        __at_align__ std::array<int32_t, 16> tmpbuf_out;
                        for (int i = 0; i < static_cast<int64_t>(8L); i++)
                        {
                            tmpbuf_out[i] = c10::bit_cast<int32_t>(tmpbuf0[i]);
                        }
                        return at::vec::Vectorized<int32_t>::loadu(tmpbuf_out.data(), static_cast<int64_t>(8L));
                    }
                    ()
                    ;
                    tmp1.store(out_ptr0 + static_cast<int64_t>(x0), static_cast<int64_t>(8L));
                }
            }
        }
    }
}
"""
    scalar = """extern "C"  void  kernel(const at::Float8_e4m3fn* in_ptr0,
                       uint8_t* out_ptr0)
{
    for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(8L); x0+=static_cast<int64_t>(1L))
    {
        auto tmp0 = in_ptr0[static_cast<int64_t>(x0)];
        auto tmp1 = c10::bit_cast<uint8_t>(tmp0);
        out_ptr0[static_cast<int64_t>(x0)] = tmp1;
    }
}
"""
    for kernel, types, dtype, nbytes in ((vectorized, "'const float*', 'int32_t*'", "int32", 32), (scalar, "'const at::Float8_e4m3fn*', 'uint8_t*'", "uint8", 8)):
        src = (
            f"cpp_fused_0 = async_compile.cpp_pybinding([{types}], r" + q + kernel + q + ")\n"
            "    def call(self, args):\n"
            f"        buf0 = empty_strided_cpu((8, ), (1, ), torch.{dtype})\n"
            "        cpp_fused_0(arg0_1, buf0)\n"
        )
        c = count_copies(src)
        assert (c.clones, c.clone_bytes) == (1, nbytes), dtype


def test_lower_functional_false_only_eliminates() -> None:
    p = CloneEliminationPass(lower_functional=False)
    report = compile_and_compare(mutated_intermediate, randn((8,)), pass_=p)
    assert report.lowering.lowered == () and report.lowering.clones == ()


def test_in_a_list_with_other_passes() -> None:
    seen: list[int] = []

    def count_nodes(graph: torch.fx.Graph) -> None:
        seen.append(len(graph.nodes))

    p = CloneEliminationPass()
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False):
        compiled = torch.compile(mutated_intermediate, options={"post_grad_custom_post_pass": [count_nodes, p, count_nodes]})
        x = torch.randn(8)
        torch.testing.assert_close(compiled(x.clone()), mutated_intermediate(x.clone()))
    assert len(seen) == 2 and p.last_report is not None and p.last_report.lowering.lowered


def test_callable_with_a_graph_and_donated_inputs() -> None:
    """Pass managers (vLLM's) call the pass with a graph and give donated input ids."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized_v2

    def f(x: torch.Tensor) -> torch.Tensor:
        out = auto_functionalized_v2(torch.ops.fxa_inductor_test.bump_.default, _x_base_index=0, _all_bases=[x])
        return out[1] * 2

    kept = make_fx(f, tracing_mode="fake")(torch.randn(4))
    CloneEliminationPass()(kept.graph)
    assert sum(1 for n in kept.graph.nodes if n.target is torch.ops.aten.clone.default) == 1
    donated = make_fx(f, tracing_mode="fake")(torch.randn(4))
    CloneEliminationPass(donated_inputs=(0,))(donated.graph)
    assert sum(1 for n in donated.graph.nodes if n.target is torch.ops.aten.clone.default) == 0


def test_uuid_changes_with_configuration() -> None:
    base = CloneEliminationPass()
    assert base.uuid() == CloneEliminationPass().uuid()
    assert base.uuid() != CloneEliminationPass(lower_functional=False).uuid()
    assert base.uuid() != CloneEliminationPass(guard=False).uuid()
    assert base.uuid() != CloneEliminationPass(donated_inputs=(0,)).uuid()
    assert CloneEliminationPass(donated_inputs=(0,)).uuid() != CloneEliminationPass(donated_inputs=(1,)).uuid()
    assert len(library_source_hash()) == 64


def test_uuid_changes_with_library_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import rewrite.inductor.passes as adapter

    for pkg in ("aliasing", "rewrite"):
        for f in (ROOT / pkg).rglob("*.py"):
            copy = tmp_path / pkg / f.relative_to(ROOT / pkg)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(f.read_bytes())
    monkeypatch.setattr(adapter, "_ROOT", tmp_path)
    before = CloneEliminationPass().uuid()
    assert before == CloneEliminationPass().uuid()
    for changed in ("rewrite/planning/planner.py", "rewrite/pipeline/driver.py"):  # a module and a subpackage's module
        path = tmp_path / changed
        path.write_text(path.read_text() + "\n# changed\n")
        after = CloneEliminationPass().uuid()
        assert after != before, changed
        before = after


def test_logging_and_structured_trace(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    artifacts: list[tuple[dict[str, Any], str]] = []

    def capture(name: str, *, metadata_fn: Callable[[], dict[str, Any]], payload_fn: Callable[[], str], **_: Any) -> None:
        artifacts.append((metadata_fn(), payload_fn()))

    import torch._inductor.compile_fx  # Inductor's modules bind the real trace_structured first

    monkeypatch.setattr(torch._logging, "trace_structured", capture)
    gm = make_fx(lambda a: (a * 2).clone() + 1, tracing_mode="fake")(torch.randn(4))
    with caplog.at_level(logging.DEBUG, logger="rewrite"):
        CloneEliminationPass()(gm.graph)
    infos = [r.getMessage() for r in caplog.records if r.name == "rewrite.inductor" and r.levelno == logging.INFO]
    debugs = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(infos) == 1 and "removed 1 clone" in infos[0]
    assert any("remove clone" in m for m in debugs)
    (meta, payload), = artifacts
    assert meta == {"name": "fx_aliasing_clone_elimination", "encoding": "string"}
    assert "clone" in payload and "removable" in payload


def test_cache_hit_says_the_report_came_from_the_cache(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Inductor's FX graph cache (and AOTAutograd's) replay a compile without running the pass.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x.sin()
        return a.clone(memory_format=torch.channels_last) * 2, a  # a clone the pass keeps (layout)

    def compile_once() -> CloneEliminationPass:
        torch._dynamo.reset()
        p = CloneEliminationPass()
        compiled = torch.compile(f, options={"post_grad_custom_post_pass": p})
        x = torch.randn(2, 3, 4, 4)
        torch.testing.assert_close(compiled(x), f(x))
        return p

    with torch._inductor.config.patch(fx_graph_cache=True), torch._functorch.config.patch(enable_autograd_cache=True):
        first = compile_once()
        assert first.last_report_source == "pass" and not first.cache_hit
        assert first.last_report is not None and len(first.last_report.kept) == 1
        with caplog.at_level(logging.INFO, logger="rewrite.inductor"):
            second = compile_once()
        assert second.last_report_source == "cache" and second.cache_hit and second.last_report is None
        (line,) = [r.getMessage() for r in caplog.records if "cache replayed" in r.getMessage()]
        assert "kept 1" in line and "TORCHINDUCTOR_FX_GRAPH_CACHE=0" in line
        with torch._inductor.config.patch(fx_graph_cache=False):
            third = compile_once()  # the documented way to see the report again
        assert third.last_report_source == "pass" and third.last_report is not None
    torch._dynamo.reset()
    outside = CloneEliminationPass()
    outside.uuid()  # not inside a compile: nothing to follow
    assert outside.last_report_source is None and not outside.cache_hit


def test_html_report_per_compiled_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REPORT_DIR_ENV, raising=False)
    folder = tmp_path / "reports"  # made by the pass
    torch._dynamo.reset()
    opts = compile_options(report_dir=folder)
    p = opts["post_grad_custom_post_pass"]
    assert p.uuid() == CloneEliminationPass().uuid() and p.config() == CloneEliminationPass().config()
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        compiled = torch.compile(mutated_intermediate, options=opts)
        x = torch.randn(8)
        torch.testing.assert_close(compiled(x), mutated_intermediate(x))
        first, report = p.last_report_path, p.last_report
        y = torch.randn(2, 3)  # another shape: a second compile of the same frame
        torch.testing.assert_close(compiled(y), mutated_intermediate(y))
    assert first is not None and report is not None and report.removed
    pages = sorted(folder.iterdir())
    assert [re.sub(r"_\d{3}_", "_N_", q.name) for q in pages] == [
        "fx_aliasing_N_compile_0_0_forward.html", "fx_aliasing_N_compile_0_1_forward.html"
    ]
    assert first == pages[0] and p.last_report_path == pages[1]
    page = first.read_text()
    assert page.startswith("<!DOCTYPE html>") and "compiled graph (forward) of compile 0/0" in page
    for d in report.elimination().decisions:  # the lowered clone's decision, with its close-up
        assert f'<a href="#clone-{d.node}">{d.node}</a>' in page and d.reason.value in page
    # the same decisions as without a report
    assert compile_and_compare(mutated_intermediate, randn((8,))).removed == report.removed


def test_html_report_folder_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REPORT_DIR_ENV, str(tmp_path))
    p = CloneEliminationPass()
    report = compile_and_compare(mutated_intermediate, randn((8,)), pass_=p)
    (page,) = tmp_path.glob("fx_aliasing_*_compile_0_0_forward.html")
    assert p.last_report_path == page and report.removed[0] in page.read_text()
    # called outside a compile: no compile id; a folder that cannot be made: logged, decisions unchanged
    gm = make_fx(lambda a: (a * 2).clone() + 1, tracing_mode="fake")(torch.randn(4))
    p(gm.graph)
    assert p.last_report_path is not None and p.last_report_path.name.endswith("_compile_none_forward.html")
    blocked = tmp_path / "a file"
    blocked.write_text("")
    monkeypatch.setenv(REPORT_DIR_ENV, str(blocked / "reports"))
    gm = make_fx(lambda a: (a * 2).clone() + 1, tracing_mode="fake")(torch.randn(4))
    p(gm.graph)
    assert p.last_report_path is None and p.last_report is not None and p.last_report.removed == ("clone",)
    monkeypatch.delenv(REPORT_DIR_ENV)
    assert CloneEliminationPass().report_folder() is None
    assert CloneEliminationPass(report_dir=tmp_path).report_folder() == tmp_path


def test_never_raises_on_a_broken_pipeline(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import rewrite.pipeline.driver as driver

    def boom(graph: torch.fx.Graph, **_: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(driver, "lower_functional_ops", boom)
    gm = make_fx(lambda a: (a * 2).clone() + 1, tracing_mode="fake")(torch.randn(4))
    p = CloneEliminationPass()
    p(gm.graph)
    assert p.last_report is not None and "boom" in (p.last_report.error or "")
    assert sum(1 for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default) == 1
    gm.graph.lint()


# --- Triton ----------------------------------------------------------------------------

TRITON_SCRIPT = textwrap.dedent(
    r'''
    import json, os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction


    class TargetOnlyDriver:
        """Enough of a Triton driver for Triton's front end: a target, no device."""

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def get_active_torch_device(self):
            return torch.device("cpu")

        def get_current_device(self):
            return 0


    triton.runtime.driver.set_active(TargetOnlyDriver())


    def _axpy_rev(x_ptr, src_ptr, n, BLOCK: tl.constexpr):
        # x[i] += src[n - 1 - i]: reads src while writing x, in blocks
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        s = tl.load(src_ptr + (n - 1 - offs), mask=m)
        tl.store(x_ptr + offs, x + s, mask=m)


    jit_kernel = JITFunction(_axpy_rev)  # traceable (TRITON_INTERPRET makes triton.jit interpreted)
    from torch.library import triton_op, wrap_triton


    @triton_op("fxa_triton_test::axpy_rev_", mutates_args={"x"})
    def axpy_rev_(x: torch.Tensor, src: torch.Tensor) -> None:
        n = x.numel()
        wrap_triton(jit_kernel)[(triton.cdiv(n, 4),)](x, src, n, BLOCK=4)


    def intermediate(a, b):
        x = a * 2
        axpy_rev_(x, b)
        return x + 1


    def clone_then_read(a, b):  # the pattern of pytorch/pytorch#198031, with a Triton kernel
        x = a + b
        y = x.clone()
        axpy_rev_(y, x)
        return y


    def input_mutation(a, b):
        axpy_rev_(a, b)
        return a.sum()


    from torch._dynamo.backends.common import aot_autograd
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    from rewrite.pipeline.driver import lower_and_eliminate
    from rewrite.testing import check_equivalent, copy_program

    results = {}
    for fn in (intermediate, clone_then_read, input_mutation):
        captured = []

        def capture(gm, example_inputs):
            captured.append(gm)
            return gm.forward

        torch._dynamo.reset()
        backend = aot_autograd(fw_compiler=capture, keep_inference_input_mutations=True)
        compiled = torch.compile(fn, backend=backend, fullgraph=True)
        try:
            compiled(torch.randn(8), torch.randn(8))
        except Exception:
            pass  # the compiled kernel cannot launch without a GPU; the capture is what we need
        (gm,) = captured
        wrappers = [n for n in gm.graph.nodes if n.target is torch.ops.higher_order.triton_kernel_wrapper_functional]
        to_clone = [list(n.kwargs["tensors_to_clone"]) for n in wrappers]
        rewritten = copy_program(gm)
        report = lower_and_eliminate(rewritten.graph)
        rewritten.recompile()
        targets = [str(n.target) for n in rewritten.graph.nodes if n.op == "call_function"]
        # run original and rewrite with the kernel under the interpreter
        for n in wrappers:
            kernel_side_table.id_to_kernel[n.kwargs["kernel_idx"]] = InterpretedFunction(_axpy_rev)
        inputs = lambda: [torch.arange(8.0), torch.arange(8.0) * 10]
        check_equivalent(gm, rewritten, inputs)
        results[fn.__name__] = {
            "tensors_to_clone": to_clone,
            "lowered": [l.kind for l in report.lowering.lowered],
            "clones_left": targets.count("aten.clone.default"),
            "has_mutation_hop": any(
                n.target is torch.ops.higher_order.triton_kernel_wrapper_mutation for n in rewritten.graph.nodes
            ),
            "kept_reasons": [
                str(d.reason) for r in report.eliminations for d in r.decisions if d.action == "keep" and not d.reason.is_copy_reason
            ],
            "error": report.error,
        }
    print("RESULTS " + json.dumps(results))
    '''
)


def test_triton_kernel_via_triton_op(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    pytest.importorskip("numpy")  # the Triton interpreter needs it
    script = tmp_path / "triton_program.py"  # Triton reads kernel source from a file
    script.write_text(TRITON_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    results = json.loads(lines[-1][len("RESULTS ") :])
    for name, r in results.items():
        assert r["tensors_to_clone"] == [["x_ptr"]], name  # Triton's analysis found the mutated argument
        assert r["lowered"] == ["triton_kernel_wrapper_functional"] and r["has_mutation_hop"], name
        assert r["error"] is None, name
    assert results["intermediate"]["clones_left"] == 0
    assert results["input_mutation"]["clones_left"] == 0
    # the kernel reads x while writing the copy of x: the copy stays
    assert results["clone_then_read"]["clones_left"] == 1
    assert results["clone_then_read"]["kept_reasons"][0] == "same-node-writes-clone-reads-original"


@pytest.fixture(autouse=True)
def _reset_dynamo() -> Iterator[None]:
    yield
    torch._dynamo.reset()
