"""The hazard guard end to end: Inductor's own aliasing bugs, stock and with every fx-aliasing hook.

Integration tests (each compile takes a second or more on the C++ backend).
Every program is run eagerly and compiled twice on equal fresh inputs: stock
Inductor, and with :func:`rewrite.inductor.compile_options` (the one-line
install: the clone elimination with its guard as ``post_grad_custom_post_pass``
and :class:`rewrite.inductor.JointGraphGuard` as ``joint_custom_pre_pass``).
Each run is compared with eager on the outputs (values and strides), the
inputs and module buffers afterwards (mutations), which outputs share
storage with which inputs or buffers and with each other, which outputs are
one tensor object, and whether it raised. A program that breaks the graph
(``fullgraph=False``) runs its caller's code between the compiled graphs, as
eager code (H8's ``resize_``).

- *Faithful repros* of public bug reports (the ``issue`` column) are in the
  default suite; stock Inductor must get them wrong (the bug is real on this
  torch), ``aot_eager`` right (the bug is Inductor's), and the guarded compile
  right, guarding exactly the hazards listed.
- *Variants* of each bug class (views of inputs, registered buffers, other
  dims and ops, dynamic shapes): right when guarded, with the listed hazards;
  a variant that stock gets wrong and the guard does not guard fails. Some
  are right on stock by luck (``latent``): the hazard is there (Inductor does
  not order the accesses) and the guard pays for it. A program a release no
  longer gets wrong although its class is still broken there (``fixed_on``:
  torch 2.15 regenerates a no-op ``view`` of another output, not a
  ``detach``) must be right on stock there, with no hazard and stock's copies.
- *Controls* have none of the hazards: stock is right, the guard does nothing,
  and the generated code has no more than stock's copies (counted by
  :func:`benchmarks.inductor_copies.count_copies`); some are programs where the
  guard once paid a copy eager does not need.

The long tail of variants is marked ``slow``. ``benchmarks/inductor_copies.py``
imports :data:`PROGRAMS` and tabulates their copies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from aliasing.core.registry import torch_release
from rewrite.inductor import (
    KNOWN_RELEASES,
    STOCK_MISCOMPILES,
    CloneEliminationPass,
    GuardReport,
    JointGraphGuard,
    compile_options,
)

#: torch.compile with Inductor on every program
pytestmark = pytest.mark.integration

# --- custom ops ------------------------------------------------------------------------


@torch.library.custom_op("fxa_guard_test::storage_offset", mutates_args=())
def storage_offset_of(x: torch.Tensor) -> torch.Tensor:
    """The storage offset of ``x`` as a tensor (pytorch/pytorch#197489's op)."""
    return torch.tensor(x.storage_offset(), device=x.device, dtype=torch.int64)


@storage_offset_of.register_fake
def _storage_offset_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty((), device=x.device, dtype=torch.int64)


@torch.library.custom_op("fxa_guard_test::total", mutates_args=())
def total(x: torch.Tensor) -> torch.Tensor:
    """The sum of ``x``: an opaque op that does not look at layouts."""
    return x.sum()


@total.register_fake
def _total_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty((), device=x.device, dtype=x.dtype)


# --- programs: faithful repros ---------------------------------------------------------


def shift_rows(x: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#197829."""
    x[1:] = x[:-1].clone()  # every row takes the row before it
    return x


def scatter_then_zero(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#198094."""
    y = torch.slice_scatter(x, src[1:3], dim=0, start=1, end=3)  # a fresh tensor in eager
    x.zero_()
    return y


def diagonal_scatter_then_fill(x: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#198094 (second shape): a value-wise no-op scatter."""
    y = torch.diagonal_scatter(x, x.diagonal())
    x.fill_(2)
    return y


def index_fill_clone_clamp(x: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#198094 (third shape): a clone taken after an ``index_fill_``."""
    x.index_fill_(0, torch.tensor([1]), -1)
    y = x.clone()
    x.clamp_(min=0)
    return y


def copy_then_add(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#198131."""
    dst[0:, :] = src[0:, :]  # copy src -> dst (full-slice view as the source)
    src.add_(1)  # then mutate src
    return src


def offset_of_clone(x: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#197489."""
    return storage_offset_of(x[1:].clone())  # the slice has offset 1, its clone 0


def dtype_view_then_write(x: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#198101."""
    y = x.view(torch.int32) * 2  # reads x (as int32 pairs) -> fresh tensor
    y.sub_(-4)
    x[:, 2:5] = 2  # mutate the input afterwards
    return y.view(torch.int64)  # must reflect x before the mutation


def index_put_then_add_flip(x: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#198270."""
    x.index_put_((torch.arange(x.size(0), device=x.device),), x * 2.0)
    x.add_(x.flip(0))
    return x


def scatter_copied_back_and_returned(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#195451: the result must not alias ``x``."""
    updated = torch.slice_scatter(x, src, 0, 0, 1)
    x.copy_(updated)
    return updated


def noop_view_resized_after_break(x: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#191449: ``resize_`` breaks the graph; the first graph returns ``base`` and ``alias``."""
    base = x + 1
    alias = base.view(-1)
    alias.resize_(12)  # eager: only alias grows; base stays as it was
    return base + 1


def detached_alias_resized_after_break(x: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#191449 with ``detach()``, the shape its fix (torch 2.15) leaves open: ``._base`` is None."""
    base = x + 1
    alias = base.detach()
    alias.resize_(12)
    return base + 1


def as_strided_of_strided_slice_of_repeat(x: torch.Tensor) -> torch.Tensor:
    """pytorch/pytorch#197431: as_strided is relative to the storage of ``full``, not to the slice."""
    full = x.repeat((3, 2))
    return torch.as_strided(full[:, ::2], (3, 2), full.stride())


# --- programs: variants ----------------------------------------------------------------


def assign_view_then_mul(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    dst[:] = src.view(3, 4)  # src is used first: its write-back comes first
    src.mul_(2)
    return dst


def copy_into_two_then_add(d1: torch.Tensor, d2: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    d1[0:, :] = src[0:, :]
    d2[0:, :] = src[0:, :]
    src.add_(1)
    return src


def swap_through_clone(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    t = a.clone()
    a.copy_(b)
    b.copy_(t)  # a cycle of write-backs: no order works, a copy does
    return a + 0


class BufferIntoInput(torch.nn.Module):
    state: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.arange(12.0).view(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x[:] = self.state  # the buffer comes first: its write-back runs first
        self.state.add_(1)
        return x * 1


def select_scatter_then_zero(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    y = x.select_scatter(src[0], 0, 1)
    x.zero_()
    return y


def slice_scatter_dim1_then_zero(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    y = torch.slice_scatter(x, src[:, 1:3], dim=1, start=1, end=3)
    x.zero_()
    return y


def nested_scatter_then_zero(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    y = torch.select_scatter(x, torch.slice_scatter(x[1], src, 0, 1, 3), 0, 1)  # Inductor fuses the two
    x.zero_()
    return y


def index_put_then_fill(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x.index_put((torch.tensor([0, 2]),), v)
    x.fill_(0)
    return y


def as_strided_scatter_then_fill(x: torch.Tensor) -> torch.Tensor:
    y = torch.as_strided_scatter(x, torch.ones(2), (2,), (1,), 1)
    x.fill_(0)
    return y


class BufferScatterThenZero(torch.nn.Module):
    state: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.arange(24.0).view(4, 6))

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        y = torch.slice_scatter(self.state, src[1:3], dim=0, start=1, end=3)
        self.state.zero_()
        return y


def select_scatter_copied_back_and_returned(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    u = x.select_scatter(src, 0, 0)
    x.copy_(u)
    return u


def scatter_copied_back_strided_view_returned(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    u = torch.slice_scatter(x, src, 0, 0, 1)
    x.copy_(u)
    return u[:, ::2]  # the guard's copy keeps this layout


class BufferScatterReturned(torch.nn.Module):
    state: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.arange(8.0).view(4, 2))

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        u = torch.slice_scatter(self.state, src, 0, 1, 2)
        self.state.copy_(u)
        return u


def index_put_then_copy_flip(x: torch.Tensor) -> torch.Tensor:
    x.index_put_((torch.arange(x.size(0)),), x * 2.0)
    x.copy_(x.flip(0))
    return x


def index_copy_then_add_flip(x: torch.Tensor) -> torch.Tensor:
    x.index_copy_(0, torch.arange(x.size(0)), x * 2.0)
    x.add_(x.flip(0))
    return x


def diagonal_fill_then_add_flip(x: torch.Tensor) -> torch.Tensor:
    x.diagonal().fill_(1.0)
    x.add_(x.flip(0))
    return x


def index_put_accumulate_then_add_roll(x: torch.Tensor) -> torch.Tensor:
    x.index_put_((torch.arange(x.size(0)),), x * 2.0, accumulate=True)
    x.add_(x.roll(1, 0))
    return x


def write_row_then_times_one(x: torch.Tensor) -> torch.Tensor:
    """Inductor 2.14 drops ``x * 1`` and returns the caller's input tensor itself (eager: a fresh tensor)."""
    x[1].add_(1)
    return x * 1


def index_put_then_sub_column_mean(x: torch.Tensor) -> torch.Tensor:
    x.index_put_((torch.arange(x.size(0)),), x * 2.0)
    x.sub_(x.mean(0, keepdim=True))  # a reduction fused into the loop that writes x
    return x


def index_put_then_sub_sum(x: torch.Tensor) -> torch.Tensor:
    x.index_put_((torch.arange(x.size(0)),), x * 2.0)
    x.sub_(x.sum())
    return x


def index_assign_then_shift(x: torch.Tensor) -> torch.Tensor:
    x[torch.arange(x.size(0))] = x * 3.0
    x[1:] = x[:-1].clone()
    return x


def shift_1d(x: torch.Tensor) -> torch.Tensor:
    x[1:] = x[:-1].clone()
    return x


def shift_rows_back(x: torch.Tensor) -> torch.Tensor:
    x[:-1] = x[1:].clone()  # reads ahead of the writes: right in one thread, a race in chunks
    return x


class BufferShift(torch.nn.Module):
    state: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.arange(96.0).view(3, 32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.state[1:] = self.state[:-1].clone()
        return self.state.sum() + x


def int16_view_then_write(x: torch.Tensor) -> torch.Tensor:
    y = x.view(torch.int16) * 2
    y.sub_(3)
    x[1:3] = 0
    return y


class BufferDtypeView(torch.nn.Module):
    state: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.arange(-12, 12, dtype=torch.int64).view(4, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.state.view(torch.int32) * 2
        y.sub_(-4)
        self.state[:, 2:5] = x
        return y.view(torch.int64)


def offset_of_row_clone(x: torch.Tensor) -> torch.Tensor:
    return storage_offset_of(x[1].clone())


def offset_of_rows_clone(x: torch.Tensor) -> torch.Tensor:
    return storage_offset_of(x[2:].clone())


def reshaped_alias_resized_after_break(x: torch.Tensor) -> torch.Tensor:
    base = x + 1
    alias = base.reshape(-1)
    alias.resize_(12)
    return base + 1


def view_as_alias_resized_after_break(x: torch.Tensor) -> torch.Tensor:
    base = x + 1
    alias = base.view_as(base)
    alias.resize_(12)
    return base + 1


def flattened_alias_resized_after_break(x: torch.Tensor) -> torch.Tensor:
    base = x + 1
    alias = base.unsqueeze(-1).flatten()  # two views, back to base's layout (no pointless_view to remove)
    alias.resize_(12)
    return base + 1


def full_slice_alias_resized_after_break(x: torch.Tensor) -> torch.Tensor:
    base = x * 2
    alias = base[:]  # remove_noop_ops drops the full slice
    alias.resize_(24)
    return base + 1


def two_aliases_of_intermediate_resized_after_break(x: torch.Tensor) -> torch.Tensor:
    t = x + 1  # not returned: both returned values are views of it
    a = t.view(-1)
    b = t.detach()
    b.resize_(12)
    return a + 1


def value_and_noop_view(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    base = x + 1
    return base, base.view(-1)  # two objects in eager


def value_and_double_transpose(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    base = x * 3
    return base, base.t().t()


def value_and_detached(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    base = x * 3
    return base, base.detach(), base.detach()  # three objects in eager


def value_and_noop_expand(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    base = x - 1
    return base, base.expand(base.shape)


def as_strided_of_strided_slice_wide(x: torch.Tensor) -> torch.Tensor:
    full = x.repeat(3, 2)  # (6, 6): the compact slice holds half of it, in other places
    return torch.as_strided(full[:, ::2], full.shape, full.stride())


def as_strided_of_unfold(x: torch.Tensor) -> torch.Tensor:
    full = x.repeat(2, 1)
    return torch.as_strided(full.unfold(0, 2, 1), full.shape, full.stride())


def as_strided_of_diagonal(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    return torch.as_strided(y.diagonal(), (2, 4), (4, 1), 4)


def as_strided_of_transposed_slice(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    return torch.as_strided(y.t()[1:], (2, 4), (4, 1))  # the slice's own offset (1)


def as_strided_of_offset_slice(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    return torch.as_strided(y[1:], (2, 4), (4, 1), 0)  # rows 0 and 1 of y: before the slice


def as_strided_of_bitcast_slice(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    return torch.as_strided(y.view(torch.int32)[1:], (2, 4), (4, 1), 2)


def value_and_as_strided_of_its_slice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    full = x.repeat(3, 2)
    return full, torch.as_strided(full[:, ::2], (3, 2), full.stride())  # full's own layout: a second object


# --- programs: controls ----------------------------------------------------------------


def assign_into_first_then_mul(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    dst[:] = src  # dst's write-back comes first: it reads src before src's
    src.mul_(2)
    return dst


def copy_without_later_write(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    dst.copy_(src)
    return dst * 2


def clone_then_add(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    x.add_(1)
    return y


def slice_assign(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    x[1:3] = src
    return x


def nested_slice_assign(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    x[1][1:3] = src
    return x


def scatter_copied_back_returns_input(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    y = torch.slice_scatter(x, src, 0, 1, 3)
    x.copy_(y)
    return x


def scatter_copied_back_sum(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    y = torch.slice_scatter(x, src, 0, 1, 3)
    x.copy_(y)
    return y.sum()


def index_put_then_mul(x: torch.Tensor) -> torch.Tensor:
    x.index_put_((torch.arange(x.size(0)),), x * 2.0)
    x.mul_(2)
    return x


def index_put_then_add_matmul(x: torch.Tensor) -> torch.Tensor:
    x.index_put_((torch.arange(x.size(0)),), x * 2.0)
    x.add_(x @ x.t())  # the matmul reads x in a kernel of its own, before the write
    return x


def add_flip(x: torch.Tensor) -> torch.Tensor:
    x.add_(x.flip(0))
    return x


def same_size_dtype_view_then_write(x: torch.Tensor) -> torch.Tensor:
    y = x.view(torch.int32) * 2
    x[1:3] = 0
    return y


def dtype_view_no_write(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32) * 2


def offset_of_dense_clone(x: torch.Tensor) -> torch.Tensor:
    return storage_offset_of(x.clone())


def opaque_op_of_column_clone(x: torch.Tensor) -> torch.Tensor:
    return total(x[:, 1:].clone())  # the clone changes strides: stock keeps it


def shift_intermediate(a: torch.Tensor) -> torch.Tensor:
    y = a + 1
    y[1:] = y[:-1].clone()
    return y


def view_of_slice_resized_after_break(x: torch.Tensor) -> torch.Tensor:
    base = (x + 1)[1:]  # a view with an offset: returned as a reinterpret_tensor, an object of its own
    alias = base.view(-1)
    alias.resize_(12)
    return base + 1


def input_alias_resized_after_break(x: torch.Tensor) -> torch.Tensor:
    alias = x.view(-1)  # a view of an input: AOTAutograd regenerates it
    alias.resize_(12)
    return x + 1


def value_twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    base = x + 1
    return base, base  # one object in eager too


def as_strided_of_input_slice(x: torch.Tensor) -> torch.Tensor:
    return torch.as_strided(x[:, ::2], (3, 2), (2, 1))  # a view of an input stays one


def as_strided_of_intermediate(x: torch.Tensor) -> torch.Tensor:
    return torch.as_strided(x + 1, (2, 2), (1, 2))


def as_strided_of_slice_of_output(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    full = x.repeat(3, 2)  # returned: Inductor realizes it, and the slice stays a view of it
    return full, torch.as_strided(full[:, ::2], (2, 2), (2, 1), 2)


def as_strided_after_int16_view(x: torch.Tensor) -> torch.Tensor:
    y = x + 1  # the element-size-changing dtype view is an extern kernel over y, realized
    return torch.as_strided(y.view(torch.int16)[:, ::2], (4, 4), (8, 1), 2)


def squeezed_input_written_after_break(x: torch.Tensor) -> torch.Tensor:
    y = x.squeeze(0)
    torch._dynamo.graph_break()
    y[0] = 1  # the second graph writes its input y and returns a view of it (AOTAutograd regenerates it)
    return y.view(-1)


def row_written_then_squeezed(x: torch.Tensor) -> torch.Tensor:
    x[0, 1:] = 1
    return x.squeeze(0)  # a view of x in eager too


def index_put_into_row_view(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    v = x[1:]
    v.index_put_((torch.tensor([0, 2]),), src)
    return v  # a view of x in eager too


# --- inputs ----------------------------------------------------------------------------


def _g() -> torch.Generator:
    return torch.Generator().manual_seed(0)


Inputs = Callable[[], list[torch.Tensor]]


def rand(*shape: int) -> Inputs:
    return lambda: [torch.rand(*shape, generator=_g())]


def ints_4x6_pair() -> list[torch.Tensor]:
    return [torch.arange(24).reshape(4, 6), torch.arange(-12, 12).reshape(4, 6)]


def floats_4x6_pair() -> list[torch.Tensor]:
    return [torch.arange(24.0).reshape(4, 6), -torch.arange(24.0).reshape(4, 6)]


def dst_src() -> list[torch.Tensor]:
    return [torch.zeros(3, 4), torch.arange(12.0).view(3, 4)]


@dataclass(frozen=True)
class Program:
    """One program of the table: how to build it, what the guard must do, and what it shows."""

    name: str
    fn: Callable[..., Any] | None  #: a function (None for a module program)
    inputs: Inputs
    hazards: tuple[str, ...]  #: the hazard codes the guard must report, in order ("H1".."H9")
    kind: str  #: "repro", "variant" or "control"
    issue: str = ""  #: the pytorch/pytorch issue a repro reproduces
    module: Callable[[], torch.nn.Module] | None = None
    dynamic: bool = False
    latent: bool = False  #: stock may be right by luck (the hazard is there)
    slow: bool = False
    #: torch releases whose stock Inductor gets this program right by luck although its class is broken there
    #: (the guard still pays for the hazard)
    right_on: frozenset[str] = frozenset()
    #: torch releases that no longer miscompile this program although its class is broken there (another
    #: shape of the class still is): stock right, and the guard finds nothing and has stock's copies
    fixed_on: frozenset[str] = frozenset()
    fullgraph: bool = True  #: False for a program that breaks the graph (its caller's code runs between graphs)


PROGRAMS: tuple[Program, ...] = (
    # faithful repros (the issues' own programs and inputs)
    Program("shift_rows", shift_rows, rand(3, 16, 16), ("H5",), "repro", "197829"),
    Program("scatter_then_zero", scatter_then_zero, ints_4x6_pair, ("H2",), "repro", "198094"),
    Program("diagonal_scatter_then_fill", diagonal_scatter_then_fill, lambda: [torch.arange(9.0).reshape(3, 3)], ("H2",), "variant", "198094", right_on=frozenset({"2.15"})),
    Program("index_fill_clone_clamp", index_fill_clone_clamp, lambda: [torch.arange(-6.0, 6.0).reshape(4, 3)], ("H2",), "repro", "198094"),
    Program("copy_then_add", copy_then_add, dst_src, ("H1",), "repro", "198131"),
    Program("offset_of_clone", offset_of_clone, lambda: [torch.arange(8.0)], ("H7",), "repro", "197489"),
    Program("dtype_view_then_write", dtype_view_then_write, lambda: [torch.arange(-12, 12).reshape(4, 6)], ("H6",), "repro", "198101"),
    Program("index_put_then_add_flip", index_put_then_add_flip, rand(4, 8), ("H4",), "repro", "198270"),
    Program("scatter_copied_back_and_returned", scatter_copied_back_and_returned, lambda: [torch.tensor([1.0, 2.0]), torch.tensor([10.0])], ("H3",), "repro", "195451"),
    # torch 2.15's AOTAutograd regenerates a no-op view of another output (pytorch/pytorch#191844), not a detach
    Program("noop_view_resized_after_break", noop_view_resized_after_break, lambda: [torch.zeros(1)], ("H8",), "repro", "191449", fixed_on=frozenset({"2.15"}), fullgraph=False),
    Program("detached_alias_resized_after_break", detached_alias_resized_after_break, lambda: [torch.zeros(1)], ("H8",), "repro", "191449", fullgraph=False),
    Program("as_strided_of_strided_slice_of_repeat", as_strided_of_strided_slice_of_repeat, lambda: [torch.randn(1, 1, generator=_g())], ("H9",), "repro", "197431"),
    # H1 variants
    Program("assign_view_then_mul", assign_view_then_mul, lambda: [torch.zeros(3, 4), torch.arange(12.0)], ("H1",), "variant"),
    Program("swap_through_clone", swap_through_clone, dst_src, ("H1",), "variant"),
    Program("copy_into_two_then_add", copy_into_two_then_add, lambda: [torch.zeros(3, 4), *dst_src()], ("H1", "H1"), "variant", slow=True),
    Program("buffer_into_input", None, lambda: [torch.zeros(3, 4)], ("H1",), "variant", module=BufferIntoInput),
    Program("copy_then_add_dynamic", copy_then_add, dst_src, ("H1",), "variant", dynamic=True, slow=True),
    # H2 variants
    Program("select_scatter_then_zero", select_scatter_then_zero, floats_4x6_pair, ("H2",), "variant"),
    Program("slice_scatter_dim1_then_zero", slice_scatter_dim1_then_zero, floats_4x6_pair, ("H2",), "variant", slow=True),
    Program("nested_scatter_then_zero", nested_scatter_then_zero, lambda: [torch.arange(12.0).view(3, 4), -torch.ones(2)], ("H2",), "variant", slow=True),
    Program("index_put_then_fill", index_put_then_fill, lambda: [torch.arange(24.0).reshape(4, 6), -torch.ones(2, 6)], ("H2",), "variant", slow=True),
    Program("as_strided_scatter_then_fill", as_strided_scatter_then_fill, lambda: [torch.arange(6.0)], ("H2",), "variant", slow=True),
    Program("buffer_scatter_then_zero", None, lambda: [-torch.arange(24.0).reshape(4, 6)], ("H2",), "variant", module=BufferScatterThenZero, slow=True),
    Program("scatter_then_zero_dynamic", scatter_then_zero, ints_4x6_pair, ("H2",), "variant", dynamic=True),
    # H3 variants
    Program("select_scatter_copied_back_and_returned", select_scatter_copied_back_and_returned, lambda: [torch.arange(24.0).reshape(4, 6), -torch.ones(6)], ("H3",), "variant"),
    Program("scatter_copied_back_strided_view_returned", scatter_copied_back_strided_view_returned, lambda: [torch.arange(24.0).reshape(4, 6), -torch.ones(1, 6)], ("H3",), "variant", slow=True),
    Program("buffer_scatter_returned", None, lambda: [-torch.ones(1, 2)], ("H3",), "variant", module=BufferScatterReturned, slow=True),
    Program("scatter_copied_back_and_returned_dynamic", scatter_copied_back_and_returned, lambda: [torch.arange(4.0), torch.tensor([10.0])], ("H3",), "variant", dynamic=True, slow=True),
    # H4 variants
    Program("index_put_then_copy_flip", index_put_then_copy_flip, rand(4, 8), ("H4",), "variant"),
    Program("index_copy_then_add_flip", index_copy_then_add_flip, rand(4, 8), ("H4",), "variant", slow=True),
    Program("index_put_accumulate_then_add_roll", index_put_accumulate_then_add_roll, rand(4, 8), ("H4",), "variant"),
    Program("diagonal_fill_then_add_flip", diagonal_fill_then_add_flip, rand(4, 4), ("H4",), "variant", slow=True),
    Program("index_put_then_sub_column_mean", index_put_then_sub_column_mean, rand(4, 8), ("H4",), "variant", slow=True),
    Program("index_put_then_sub_sum", index_put_then_sub_sum, rand(4, 8), ("H4",), "variant", latent=True, slow=True),
    Program("index_assign_then_shift", index_assign_then_shift, rand(4, 8), ("H4",), "variant", slow=True),
    Program("index_put_then_add_flip_dynamic", index_put_then_add_flip, rand(4, 8), ("H4",), "variant", dynamic=True, slow=True),
    # H5 variants
    Program("shift_1d", shift_1d, rand(64), ("H5",), "variant"),
    # a race between the threads of one loop: wrong or right from run to run on stock
    Program("shift_rows_back_large", shift_rows_back, rand(1024, 2048), ("H5",), "variant", latent=True, slow=True),
    Program("shift_rows_back_small", shift_rows_back, rand(3, 16, 16), ("H5",), "variant", latent=True, slow=True),
    Program("buffer_shift", None, lambda: [torch.zeros(())], ("H5",), "variant", module=BufferShift, slow=True),
    Program("shift_rows_dynamic", shift_rows, rand(3, 16, 16), ("H5",), "variant", dynamic=True, slow=True),
    # H6 variants
    Program("int16_view_then_write", int16_view_then_write, lambda: [torch.arange(24.0).reshape(4, 6)], ("H6",), "variant", latent=True),
    Program("buffer_dtype_view", None, lambda: [torch.full((4, 3), 7, dtype=torch.int64)], ("H6",), "variant", module=BufferDtypeView, slow=True),
    Program("dtype_view_then_write_dynamic", dtype_view_then_write, lambda: [torch.arange(-12, 12).reshape(4, 6)], ("H6",), "variant", dynamic=True, slow=True),
    # H7 variants
    Program("offset_of_row_clone", offset_of_row_clone, lambda: [torch.arange(12.0).view(3, 4)], ("H7",), "variant"),
    Program("offset_of_rows_clone", offset_of_rows_clone, lambda: [torch.arange(12.0).view(4, 3)], ("H7",), "variant", slow=True),
    Program("offset_of_clone_dynamic", offset_of_clone, lambda: [torch.arange(8.0)], ("H7",), "variant", dynamic=True, slow=True),
    # H8 variants
    Program("reshaped_alias_resized_after_break", reshaped_alias_resized_after_break, lambda: [torch.zeros(1)], ("H8",), "variant", fixed_on=frozenset({"2.15"}), fullgraph=False),
    Program("view_as_alias_resized_after_break", view_as_alias_resized_after_break, lambda: [torch.zeros(1)], ("H8",), "variant", fixed_on=frozenset({"2.15"}), fullgraph=False, slow=True),
    Program("flattened_alias_resized_after_break", flattened_alias_resized_after_break, lambda: [torch.zeros(1)], ("H8",), "variant", fixed_on=frozenset({"2.15"}), fullgraph=False, slow=True),
    Program("full_slice_alias_resized_after_break", full_slice_alias_resized_after_break, lambda: [torch.arange(6.0)], ("H8",), "variant", fixed_on=frozenset({"2.15"}), fullgraph=False, slow=True),
    Program("two_aliases_of_intermediate_resized_after_break", two_aliases_of_intermediate_resized_after_break, lambda: [torch.zeros(1)], ("H8",), "variant", fullgraph=False),
    Program("detached_alias_resized_after_break_dynamic", detached_alias_resized_after_break, lambda: [torch.arange(3.0)], ("H8",), "variant", dynamic=True, fullgraph=False, slow=True),
    Program("value_and_noop_view", value_and_noop_view, rand(4), ("H8",), "variant", fixed_on=frozenset({"2.15"})),
    Program("value_and_double_transpose", value_and_double_transpose, rand(3, 4), ("H8",), "variant", fixed_on=frozenset({"2.15"}), slow=True),
    Program("value_and_detached", value_and_detached, rand(3, 4), ("H8", "H8"), "variant"),
    Program("value_and_noop_expand", value_and_noop_expand, rand(4), ("H8",), "variant", fixed_on=frozenset({"2.15"}), slow=True),
    Program("value_and_as_strided_of_its_slice", value_and_as_strided_of_its_slice, lambda: [torch.randn(1, 1, generator=_g())], ("H8",), "variant", fixed_on=frozenset({"2.15"}), slow=True),
    # H9 variants
    Program("as_strided_of_strided_slice_wide", as_strided_of_strided_slice_wide, lambda: [torch.arange(6.0).view(2, 3)], ("H9",), "variant"),
    Program("as_strided_of_unfold", as_strided_of_unfold, lambda: [torch.arange(12.0).view(3, 4)], ("H9",), "variant"),
    Program("as_strided_of_diagonal", as_strided_of_diagonal, lambda: [torch.arange(16.0).view(4, 4)], ("H9",), "variant", slow=True),
    Program("as_strided_of_transposed_slice", as_strided_of_transposed_slice, lambda: [torch.arange(12.0).view(3, 4)], ("H9",), "variant", slow=True),
    Program("as_strided_of_offset_slice", as_strided_of_offset_slice, lambda: [torch.arange(16.0).view(4, 4)], ("H9",), "variant"),
    Program("as_strided_of_bitcast_slice", as_strided_of_bitcast_slice, lambda: [torch.arange(16.0).view(4, 4)], ("H9",), "variant", slow=True),
    Program("as_strided_of_strided_slice_wide_dynamic", as_strided_of_strided_slice_wide, lambda: [torch.arange(6.0).view(2, 3)], ("H9",), "variant", dynamic=True, slow=True),
    # controls: none of the hazards
    Program("copy_without_later_write", copy_without_later_write, dst_src, (), "control"),
    Program("assign_into_first_then_mul", assign_into_first_then_mul, dst_src, (), "control", slow=True),
    Program("clone_then_add", clone_then_add, rand(8), (), "control"),
    Program("slice_assign", slice_assign, lambda: [torch.zeros(4, 3), torch.ones(2, 3)], (), "control"),
    Program("nested_slice_assign", nested_slice_assign, lambda: [torch.zeros(3, 4), torch.ones(2)], (), "control", slow=True),
    Program("scatter_copied_back_returns_input", scatter_copied_back_returns_input, lambda: [torch.zeros(4, 3), torch.ones(2, 3)], (), "control"),
    Program("scatter_copied_back_sum", scatter_copied_back_sum, lambda: [torch.zeros(4, 3), torch.ones(2, 3)], (), "control", slow=True),
    Program("index_put_then_mul", index_put_then_mul, rand(4, 8), (), "control"),
    Program("add_flip", add_flip, rand(4, 8), (), "control", slow=True),
    Program("index_put_then_add_matmul", index_put_then_add_matmul, rand(4, 4), (), "control", slow=True),
    Program("same_size_dtype_view_then_write", same_size_dtype_view_then_write, lambda: [torch.arange(24.0).reshape(4, 6)], (), "control"),
    Program("dtype_view_no_write", dtype_view_no_write, lambda: [torch.arange(24.0).reshape(4, 6)], (), "control", slow=True),
    Program("offset_of_dense_clone", offset_of_dense_clone, lambda: [torch.arange(8.0)], (), "control", slow=True),
    Program("opaque_op_of_column_clone", opaque_op_of_column_clone, lambda: [torch.arange(12.0).view(3, 4)], (), "control"),
    Program("shift_intermediate", shift_intermediate, rand(3, 16, 16), (), "control", slow=True),
    Program("view_of_slice_resized_after_break", view_of_slice_resized_after_break, lambda: [torch.zeros(2)], (), "control", fullgraph=False),
    Program("input_alias_resized_after_break", input_alias_resized_after_break, lambda: [torch.zeros(1)], (), "control", fullgraph=False, slow=True),
    Program("value_twice", value_twice, rand(4), (), "control", slow=True),
    Program("as_strided_of_input_slice", as_strided_of_input_slice, lambda: [torch.arange(6.0).view(3, 2)], (), "control"),
    Program("as_strided_of_intermediate", as_strided_of_intermediate, lambda: [torch.arange(4.0)], (), "control", slow=True),
    Program("as_strided_of_slice_of_output", as_strided_of_slice_of_output, lambda: [torch.randn(1, 1, generator=_g())], (), "control", slow=True),
    Program("as_strided_after_int16_view", as_strided_after_int16_view, lambda: [torch.arange(16.0).view(4, 4)], (), "control", slow=True),
    # the guard once paid a copy here that eager does not need (H3 on an output that is a view of the input in eager)
    Program("squeezed_input_written_after_break", squeezed_input_written_after_break, lambda: [torch.arange(2.0).view(1, 2)], (), "control", fullgraph=False),
    Program("row_written_then_squeezed", row_written_then_squeezed, lambda: [torch.arange(2.0).view(1, 2)], (), "control"),
    Program("index_put_into_row_view", index_put_into_row_view, lambda: [torch.zeros(4, 4), torch.ones(2, 4)], (), "control"),
)


# --- harness ---------------------------------------------------------------------------


@dataclass
class Observed:
    """What a run shows: outputs, inputs and buffers afterwards, storage sharing, object identity, or what it raised."""

    outputs: list[Any]
    inputs: list[torch.Tensor]
    buffers: dict[str, torch.Tensor]
    sharing: list[list[bool]]  #: output i shares storage with input/buffer j
    shared_outputs: list[tuple[int, int]] = field(default_factory=list)  #: outputs i < j that share a storage
    same_objects: list[tuple[int, int]] = field(default_factory=list)  #: outputs i < j that are one tensor object
    raised: str | None = None  #: the type of the exception the run raised


def _flat(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _storage(t: torch.Tensor) -> int:
    return int(t.untyped_storage().data_ptr())


def observe(p: Program, call: Callable[..., Any] | None = None, *, wrap: Callable[[Any], Any] | None = None) -> Observed:
    """Run ``p`` (eagerly, or through ``wrap(callable)``) on fresh inputs and record what it shows."""
    target: Any = p.module() if p.module is not None else p.fn
    inputs = p.inputs()
    fn = wrap(target) if wrap is not None else target
    buffers = dict(target.named_buffers()) if isinstance(target, torch.nn.Module) else {}
    try:
        outputs = _flat(fn(*inputs))
    except Exception as e:
        if wrap is None:
            raise  # every program runs eagerly
        return Observed([], inputs, buffers, [], raised=type(e).__name__)  # a compile that fails
    memory = [*inputs, *buffers.values()]
    sharing = [[isinstance(o, torch.Tensor) and _storage(o) == _storage(m) for m in memory] for o in outputs]
    pairs = [(i, j) for i in range(len(outputs)) for j in range(i + 1, len(outputs))]
    tensors = [isinstance(o, torch.Tensor) for o in outputs]
    shared = [(i, j) for i, j in pairs if tensors[i] and tensors[j] and _storage(outputs[i]) == _storage(outputs[j])]
    same = [(i, j) for i, j in pairs if tensors[i] and outputs[i] is outputs[j]]
    return Observed(outputs, inputs, buffers, sharing, shared, same)


def differences(got: Observed, want: Observed) -> list[str]:
    """How ``got`` differs from eager (empty when it does not)."""
    diffs: list[str] = []

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                return False
            if a.is_floating_point():  # compiled arithmetic may round differently
                return bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))
            return bool(torch.equal(a, b))
        return bool(a == b)

    if got.raised != want.raised:
        return [f"raised {got.raised}, eager {want.raised}"]
    if len(got.outputs) != len(want.outputs):
        return [f"{len(got.outputs)} outputs, eager {len(want.outputs)}"]
    diffs += [f"output {i}" for i, (a, b) in enumerate(zip(got.outputs, want.outputs)) if not same(a, b)]
    diffs += [
        f"output {i} strides {a.stride()}, eager {b.stride()}"
        for i, (a, b) in enumerate(zip(got.outputs, want.outputs))
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() and a.stride() != b.stride()
    ]
    diffs += [f"input {i} afterwards" for i, (a, b) in enumerate(zip(got.inputs, want.inputs)) if not same(a, b)]
    diffs += [f"buffer {k} afterwards" for k in want.buffers if not same(got.buffers[k], want.buffers[k])]
    if got.sharing != want.sharing:
        diffs.append(f"output/input storage sharing {got.sharing}, eager {want.sharing}")
    if got.shared_outputs != want.shared_outputs:
        diffs.append(f"outputs sharing a storage {got.shared_outputs}, eager {want.shared_outputs}")
    if got.same_objects != want.same_objects:
        diffs.append(f"outputs that are one object {got.same_objects}, eager {want.same_objects}")
    return diffs


@dataclass
class Compiled:
    observed: Observed
    code: list[str]
    reports: list[GuardReport]  #: the guard's reports, in the order its passes ran (every graph of the program)

    @property
    def hazards(self) -> tuple[str, ...]:
        return tuple(h for r in self.reports for h in r.hazards)


class _Recorded(CustomGraphPass):
    """Runs a guard pass and keeps the report of each run (a program that breaks the graph compiles several)."""

    def __init__(self, inner: CloneEliminationPass | JointGraphGuard, reports: list[GuardReport]) -> None:
        self.inner, self.reports = inner, reports

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.inner(graph)
        report = self.inner.last_guard_report if isinstance(self.inner, CloneEliminationPass) else self.inner.last_report
        if report is not None:
            self.reports.append(report)

    def uuid(self) -> Any:
        return self.inner.uuid()


def _recorded(options: dict[str, Any], reports: list[GuardReport]) -> dict[str, Any]:
    out = dict(options)
    for key in ("joint_custom_pre_pass", "post_grad_custom_post_pass"):
        passes = out.get(key)
        if isinstance(passes, (CloneEliminationPass, JointGraphGuard)):
            out[key] = _Recorded(passes, reports)
        elif isinstance(passes, list):
            out[key] = [_Recorded(q, reports) if isinstance(q, (CloneEliminationPass, JointGraphGuard)) else q for q in passes]
    return out


def compile_and_observe(p: Program, *, backend: str = "inductor", options: dict[str, Any] | None = None) -> Compiled:
    """Compile ``p`` (caches off, so every compile runs the passes) and observe one call."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    codes: list[str] = []
    reports: list[GuardReport] = []

    def wrap(target: Any) -> Callable[..., Any]:
        kwargs: dict[str, Any] = {"backend": backend, "fullgraph": p.fullgraph, "dynamic": p.dynamic}
        if backend == "inductor":
            kwargs["options"] = _recorded(options or {}, reports)
        compiled = torch.compile(target, **kwargs)

        def run(*args: Any) -> Any:
            if backend != "inductor":
                return compiled(*args)
            out, code = run_and_get_code(compiled, *args)
            codes.extend(code)
            return out

        return run

    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        observed = observe(p, wrap=wrap)
    return Compiled(observed, codes, reports)


def copies(code: Sequence[str]) -> tuple[int, int]:
    """(copies, bytes) in generated code, as benchmarks/inductor_copies.py counts them."""
    from benchmarks.inductor_copies import count_copies

    counts = [count_copies(c) for c in code]
    return sum(c.copies for c in counts), sum(c.nbytes for c in counts)


def _params(kind: str, *, default_only: bool = False) -> list[Any]:
    out = []
    for p in PROGRAMS:
        if p.kind != kind:
            continue
        marks = [pytest.mark.slow] if p.slow and not default_only else []
        out.append(pytest.param(p, id=p.name, marks=marks))
    return out


# --- tests -----------------------------------------------------------------------------


def _fixed_here(p: Program) -> bool:
    """The installed torch no longer miscompiles ``p``: its hazard class is fixed (STOCK_MISCOMPILES), or ``p`` is."""
    release = torch_release()
    return bool(p.hazards) and (release in p.fixed_on or all(release not in STOCK_MISCOMPILES[h] for h in p.hazards))


def _no_more_copies(guarded: Compiled, stock: Compiled) -> bool:
    """The guarded code copies no more than stock's (the clone elimination may copy less)."""
    (n_guarded, b_guarded), (n_stock, b_stock) = copies(guarded.code), copies(stock.code)
    return n_guarded <= n_stock and b_guarded <= b_stock


def test_every_hazard_class_has_a_repro_that_proves_its_status() -> None:
    """test_faithful_repro checks each class's status on the installed torch against its repro."""
    assert {p.hazards[0] for p in PROGRAMS if p.kind == "repro"} == set(STOCK_MISCOMPILES)
    assert torch_release() in KNOWN_RELEASES, f"torch {torch_release()}: record which hazards its Inductor still has"
    broken = {h for h, releases in STOCK_MISCOMPILES.items() if torch_release() in releases}
    proving = {p.hazards[0] for p in PROGRAMS if p.kind == "repro" and torch_release() not in p.fixed_on}
    assert broken <= proving, f"no repro wrong on {torch_release()} proves {sorted(broken - proving)} broken there"


@pytest.mark.parametrize("p", _params("repro"))
def test_faithful_repro(p: Program) -> None:
    """Wrong on stock Inductor where its hazard class is marked broken, right where it is marked fixed
    (proving rewrite.inductor.STOCK_MISCOMPILES on this torch); right under aot_eager; right when guarded,
    guarding exactly the listed hazards, and where the class is fixed no hazard and stock's copies."""
    want = observe(p)
    assert differences(compile_and_observe(p, backend="aot_eager").observed, want) == [], "aot_eager is wrong too"
    stock = compile_and_observe(p)
    guarded = compile_and_observe(p, options=compile_options())
    assert differences(guarded.observed, want) == []
    if _fixed_here(p):
        assert differences(stock.observed, want) == [], (
            f"#{p.issue} is wrong on stock Inductor {torch_release()}, marked fixed there (STOCK_MISCOMPILES, fixed_on)"
        )
        assert guarded.hazards == ()
        assert _no_more_copies(guarded, stock)
    else:
        assert differences(stock.observed, want), (
            f"#{p.issue} is right on stock Inductor {torch_release()}: mark {p.hazards[0]} fixed there in STOCK_MISCOMPILES"
        )
        assert guarded.hazards == p.hazards


@pytest.mark.parametrize("p", _params("variant"))
def test_variant_is_guarded(p: Program) -> None:
    """Right when guarded. Where the class is marked broken: the expected hazards, and stock wrong unless
    ``latent``; where it is marked fixed: stock right, no hazard and stock's copies."""
    want = observe(p)
    stock = compile_and_observe(p)
    stock_wrong = bool(differences(stock.observed, want))
    guarded = compile_and_observe(p, options=compile_options())
    assert differences(guarded.observed, want) == []
    if _fixed_here(p):
        assert not stock_wrong, f"stock Inductor {torch_release()} gets this wrong: it is marked fixed there"
        assert guarded.hazards == ()
        assert _no_more_copies(guarded, stock)
        return
    if torch_release() in p.right_on:
        assert not stock_wrong, f"stock Inductor {torch_release()} gets this wrong: take it out of right_on"
        assert _no_more_copies(guarded, stock)
    elif stock_wrong:
        assert guarded.hazards, "stock Inductor gets this variant wrong and the guard did not guard it"
    else:
        assert p.latent, "stock Inductor is right: mark the variant latent, list the release in right_on, or make it a control"
    assert guarded.hazards == p.hazards


def test_returned_input_times_one_stays_a_fresh_tensor() -> None:
    """``x[1].add_(1); return x * 1``: Inductor 2.14 and 2.15 return the caller's input itself; 2.13 does not.
    Guarded it is right on every torch; where stock is right the guard adds nothing."""
    p = Program("write_row_then_times_one", write_row_then_times_one, rand(4, 8), (), "variant")
    want = observe(p)
    stock = compile_and_observe(p)
    guarded = compile_and_observe(p, options=compile_options())
    assert differences(guarded.observed, want) == []
    if differences(stock.observed, want):
        assert guarded.hazards == ("H3",)
    else:
        assert guarded.hazards == () and _no_more_copies(guarded, stock)


@pytest.mark.parametrize("p", _params("control"))
def test_control_gets_no_copy(p: Program) -> None:
    """No hazard: stock is right, the guard does nothing, and the code has exactly stock's copies."""
    want = observe(p)
    stock = compile_and_observe(p)
    assert differences(stock.observed, want) == []
    guarded = compile_and_observe(p, options=compile_options())
    assert differences(guarded.observed, want) == []
    assert guarded.hazards == ()
    (n_guarded, b_guarded), (n_stock, b_stock) = copies(guarded.code), copies(stock.code)
    assert n_guarded <= n_stock and b_guarded <= b_stock


def test_post_grad_pass_alone_guards_what_a_post_grad_pass_can() -> None:
    """Installed only as post_grad_custom_post_pass, the guard still fixes H1-H6 and H9; H7 and H8 need the joint hook."""
    p = next(q for q in PROGRAMS if q.kind == "repro" and q.hazards[0] not in ("H7", "H8") and not _fixed_here(q))
    want = observe(p)
    post = CloneEliminationPass()
    alone = compile_and_observe(p, options={"post_grad_custom_post_pass": post})
    assert differences(alone.observed, want) == [] and alone.hazards == p.hazards
    unguarded = compile_and_observe(p, options={"post_grad_custom_post_pass": CloneEliminationPass(guard=False)})
    assert differences(unguarded.observed, want), "the clone elimination alone is right: the repro is not one"
    offset = next(q for q in PROGRAMS if q.name == "offset_of_clone")
    late = compile_and_observe(offset, options={"post_grad_custom_post_pass": CloneEliminationPass()})
    assert differences(late.observed, observe(offset)), "the clone was expected gone before any post-grad hook"


def test_report_and_logs_say_what_was_guarded(caplog: pytest.LogCaptureFixture) -> None:
    p = next(q for q in PROGRAMS if q.name == "shift_rows")
    if _fixed_here(p):
        pytest.skip(f"H5 is fixed in stock Inductor {torch_release()}: the guard does not look for it there")
    options = compile_options()
    with caplog.at_level(logging.DEBUG, logger="rewrite.inductor"):
        compiled = compile_and_observe(p, options=options)
    report = options["post_grad_custom_post_pass"].last_guard_report
    assert report is not None and compiled.hazards == ("H5",)
    (g,) = report.guarded
    assert g.action == "clone" and g.node == "slice_scatter" and g.nbytes == 2 * 16 * 16 * 4
    infos = [r.getMessage() for r in caplog.records if r.name == "rewrite.inductor" and r.levelno == logging.INFO]
    assert any("H5 clone at slice_scatter" in m and "2048 B" in m for m in infos)
    debugs = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any(m.startswith("guard: H5 scatter-source-overlaps-destination") for m in debugs)


def test_compile_options_installs_every_hook() -> None:
    opts = compile_options(donated_inputs=(1,), lower_functional=False)
    post, joint = opts["post_grad_custom_post_pass"], opts["joint_custom_pre_pass"]
    assert isinstance(post, CloneEliminationPass) and isinstance(joint, JointGraphGuard)
    assert post.donated_inputs == (1,) and not post.lower_functional and post.guard
    assert "joint_custom_pre_pass" not in compile_options(guard=False)
    mine = CloneEliminationPass(guard=False)
    merged = compile_options(post_grad_custom_post_pass=mine)
    assert merged["post_grad_custom_post_pass"][0] is mine and len(merged["post_grad_custom_post_pass"]) == 2


def test_uuid_covers_the_guard() -> None:
    assert CloneEliminationPass().uuid() != CloneEliminationPass(guard=False).uuid()
    assert JointGraphGuard().uuid() == JointGraphGuard().uuid() != CloneEliminationPass().uuid()


# --- the guard's stages on graphs, without compiling --------------------------------------


def _copies(gm: torch.fx.GraphModule) -> list[str]:
    return [n.name for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]


def test_guard_clones_are_kept_by_the_clone_elimination() -> None:
    """A guard clone is removable read literally: the clone elimination must be told to keep it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from rewrite.pipeline.driver import lower_and_eliminate

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).clone() + 1

    for keep in (False, True):
        gm = make_fx(f, tracing_mode="fake")(torch.randn(4))
        (clone,) = [n for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default]
        report = lower_and_eliminate(gm.graph, keep=[clone] if keep else [])
        assert report.removed == (() if keep else ("clone",))


def test_stale_reads_only_in_the_epilogue() -> None:
    """A read after a write in the middle of the program is meant (a non-functional graph): H1 leaves it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from rewrite.inductor import guard_stale_reads

    def f(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        src.copy_(src + 1)
        dst.copy_(src)
        return (dst * 2).sum()

    gm = make_fx(f, tracing_mode="fake")(torch.zeros(3), torch.ones(3))
    first, second = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
    second.replace_input_with(first, first.args[0])
    before = _copies(gm)
    report = guard_stale_reads(gm.graph)
    assert report.guarded == () and _copies(gm) == before  # a compute node follows the write-backs


def test_guard_never_raises_without_fake_tensors(caplog: pytest.LogCaptureFixture) -> None:
    """A hazard found where no copy can be built (values of several fake modes that cannot be
    propagated again): reported, graph left valid. Where they can be (a real-mode trace), the
    analysis fakes them again in one mode first, and the guard builds its copy."""
    import warnings

    from torch.fx.experimental.proxy_tensor import make_fx

    from rewrite.inductor import guard_inductor_hazards

    def f(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        y = torch.ops.aten.slice_scatter.default(x, src, 0, 1, 3)
        x.copy_(torch.zeros(4, 2))
        return y

    gm = make_fx(f)(torch.zeros(4, 2), torch.ones(2, 2))  # real mode: a fake mode per value
    guarded = guard_inductor_hazards(gm.graph)
    assert [g.node for g in guarded.guarded] == ["slice_scatter"] and guarded.error is None
    gm.graph.lint()

    gm = make_fx(f)(torch.zeros(4, 2), torch.ones(2, 2))
    del next(iter(gm.graph.nodes)).meta["val"]  # nothing to propagate from
    with caplog.at_level(logging.WARNING, logger="rewrite.inductor.guard"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = guard_inductor_hazards(gm.graph)
    assert report.guarded == () and report.error is not None
    gm.graph.lint()


def test_nested_as_strided_of_a_dtype_view_rebased_once() -> None:
    """Two ``as_strided`` of one dtype view of an intermediate (the lowering's flat copy of an int32 row,
    folded): H9 rebases both onto the intermediate and drops the dead views once (it erased one twice)."""
    import warnings

    from torch.fx.experimental.proxy_tensor import make_fx

    from rewrite.inductor import guard_storage_views
    from rewrite.testing import check_equivalent, copy_program

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        flat = torch.as_strided(y.view(torch.int32), (8,), (1,), 0)
        return torch.as_strided(flat, (4,), (1,), 4) + 1

    original = make_fx(f, tracing_mode="fake")(torch.zeros(3, 4))
    gm = copy_program(original)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = guard_storage_views(gm.graph)
    assert report.error is None and [g.action for g in report.guarded] == ["rebase", "rebase"], str(report)
    gm.recompile()
    check_equivalent(original, gm, lambda: [torch.randn(3, 4)])


@pytest.fixture(autouse=True)
def _reset_dynamo() -> Iterator[None]:
    yield
    torch._dynamo.reset()
