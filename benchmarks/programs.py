"""Named small programs for the side-by-side comparison of clone-elimination rules.

Each :class:`NamedProgram` is one case of docs/DESIGN.md's precision targets (must
remove) or of its must-keep cases, traced with
``make_fx(tracing_mode="fake")``. ``sound_removals`` is how many of its clones
a sound and precise pass removes; the benchmark reports it next to what
``rewrite.eliminate_clones`` and the output-only baseline remove, and asks
``rewrite.testing.check_equivalent`` about every removal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.fx
from torch import Tensor
from torch.fx.experimental.proxy_tensor import make_fx

import benchmarks.synthetic  # noqa: F401  (registers fxa_bench::rms_norm_)

__all__ = ["PROGRAMS", "NamedProgram", "program"]


@torch.library.custom_op("fxa_bench::shift_add_", mutates_args=("out",))
def shift_add_(out: Tensor, src: Tensor) -> None:
    """``out[i] += src[i - 1]`` row by row: not elementwise, wrong if ``out`` aliases ``src``."""
    for i in range(1, out.shape[0]):
        out[i] += src[i - 1]


@shift_add_.register_fake
def _shift_add_fake(out: Tensor, src: Tensor) -> None:
    return None


@dataclass(frozen=True)
class NamedProgram:
    """A small program, its inputs and how many clones a sound, precise pass removes.

    Attributes
    ----------
    name : str
        Short identifier.
    case : str
        The docs/DESIGN.md case it stands for.
    fn : Callable
        The eager function (traced by :meth:`trace`).
    input_shapes : tuple
        Shapes of its float32 inputs.
    sound_removals : int
        Clones a sound and precise pass removes.
    donated_inputs : tuple of int
        Placeholder positions the caller donates.
    """

    name: str
    case: str
    fn: Callable[..., object]
    input_shapes: tuple[tuple[int, ...], ...]
    sound_removals: int
    donated_inputs: tuple[int, ...] = ()

    def inputs(self, seed: int = 0) -> list[Tensor]:
        """Fresh real inputs (same values for the same seed)."""
        gen = torch.Generator().manual_seed(seed)
        return [torch.randn(s, generator=gen) for s in self.input_shapes]

    def trace(self) -> torch.fx.GraphModule:
        """The program traced with ``make_fx(tracing_mode="fake")``.

        Examples
        --------
        >>> gm = program("clone_only_read").trace()
        >>> sum(n.target is torch.ops.aten.clone.default for n in gm.graph.nodes)
        1
        """
        return make_fx(self.fn, tracing_mode="fake")(*self.inputs())


# --------------------------------------------------------------------------- must remove


def _clone_only_read(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    return c * 2


def _written_original_dead(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    c.mul_(2)
    return c


def _chain(x: Tensor) -> Tensor:
    y = x + 1
    return y.clone().clone() * 2


def _unused_view_after_write(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    c.add_(1)
    y[0]  # a view of the original nobody uses
    return c


def _q_written_kv_read(x: Tensor, w: Tensor) -> Tensor:
    q, k, v = (w @ x).split(4, dim=0)  # q keeps its layout when cloned (offset 0, contiguous)
    c = q.clone()
    c.mul_(2)
    return c + k + v


def _donated_input_written(x: Tensor) -> Tensor:
    c = x.clone()
    c.add_(1)
    return c * 2


def _returned_intermediate(x: Tensor) -> Tensor:
    y = x + 1
    return y.clone()


def _rms_norm_original_dead(x: Tensor, w: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    torch.ops.fxa_bench.rms_norm_(c.view(-1, 8), w)
    return c


# --------------------------------------------------------------------------- must keep


def _original_read_after_clone_write(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    c.add_(1)
    return c + y


def _original_written_clone_read(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    y.mul_(2)
    return c + y


def _original_written_through_view(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    y[0].zero_()
    return c + y


def _clone_written_through_view(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    c[0].add_(1)
    return c + y


def _clone_written_chained(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    c.add_(1).mul_(2)
    return c + y


def _clone_written_out_kwarg(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    torch.mul(x, 2, out=c)
    return c + y


def _two_clones_written(x: Tensor) -> Tensor:
    y = x + 1
    a = y.clone()
    b = y.clone()
    a.add_(1)
    b.mul_(2)
    return a + b


def _returned_clone_of_input(x: Tensor) -> Tensor:
    return x.clone()


def _written_clone_of_input(x: Tensor) -> Tensor:
    c = x.clone()
    c.add_(1)
    return c * 2


def _written_clone_of_input_view(x: Tensor) -> Tensor:
    c = x[:2].clone()
    c.add_(1)
    return c * 2


def _returned_twice(x: Tensor) -> tuple[Tensor, Tensor]:
    y = x + 1
    return y, y.clone()


def _same_node_hazard(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    torch.ops.fxa_bench.shift_add_(c, y)
    return c


def _two_direct_writers(x: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    c.add_(1)
    c.mul_(2)
    return c + y


def _rms_norm_residual(x: Tensor, w: Tensor) -> Tensor:
    y = x + 1
    c = y.clone()
    torch.ops.fxa_bench.rms_norm_(c.view(-1, 8), w)
    return c + y


_X = (4, 8)
#: name, case, function, input shapes, clones a sound and precise pass removes[, donated inputs]
PROGRAMS: tuple[NamedProgram, ...] = (
    NamedProgram(
        "clone_only_read",
        "remove: a clone only read",
        _clone_only_read,
        (_X,),
        1,
    ),
    NamedProgram(
        "written_original_dead",
        "remove: clone written, original dead",
        _written_original_dead,
        (_X,),
        1,
    ),
    NamedProgram(
        "chain",
        "remove: chain of clones",
        _chain,
        (_X,),
        2,
    ),
    NamedProgram(
        "unused_view_after_write",
        "remove: original read later only by an unused view",
        _unused_view_after_write,
        (_X,),
        1,
    ),
    NamedProgram(
        "q_written_kv_read",
        "remove: q clone written, only disjoint k, v read",
        _q_written_kv_read,
        (_X, (12, 4)),
        1,
    ),
    NamedProgram(
        "donated_input_written",
        "remove: clone of a donated input, written",
        _donated_input_written,
        (_X,),
        1, (0,),
    ),
    NamedProgram(
        "returned_intermediate",
        "remove: returned clone of an intermediate",
        _returned_intermediate,
        (_X,),
        1,
    ),
    NamedProgram(
        "rms_norm_original_dead",
        "remove: custom op writes clone via view, original dead",
        _rms_norm_original_dead,
        (_X, (8,)),
        1,
    ),
    NamedProgram(
        "original_read_after_write",
        "keep: original read after clone written",
        _original_read_after_clone_write,
        (_X,),
        0,
    ),
    NamedProgram(
        "original_written_clone_read",
        "keep: original written, clone read",
        _original_written_clone_read,
        (_X,),
        0,
    ),
    NamedProgram(
        "original_written_via_view",
        "keep: original written through a view",
        _original_written_through_view,
        (_X,),
        0,
    ),
    NamedProgram(
        "clone_written_via_view",
        "keep: clone written through a view",
        _clone_written_through_view,
        (_X,),
        0,
    ),
    NamedProgram(
        "clone_written_chained",
        "keep: clone written via chained in-place",
        _clone_written_chained,
        (_X,),
        0,
    ),
    NamedProgram(
        "clone_written_out_kwarg",
        "keep: clone written through out=",
        _clone_written_out_kwarg,
        (_X,),
        0,
    ),
    NamedProgram(
        "two_clones_written",
        "keep one: two clones of one value, both written",
        _two_clones_written,
        (_X,),
        1,
    ),
    NamedProgram(
        "returned_clone_of_input",
        "keep: returned clone of an input",
        _returned_clone_of_input,
        (_X,),
        0,
    ),
    NamedProgram(
        "written_clone_of_input",
        "keep: written clone of a non-donated input",
        _written_clone_of_input,
        (_X,),
        0,
    ),
    NamedProgram(
        "written_clone_of_input_view",
        "keep: written clone of a view of an input",
        _written_clone_of_input_view,
        (_X,),
        0,
    ),
    NamedProgram(
        "returned_twice",
        "keep: clone of a value also returned",
        _returned_twice,
        (_X,),
        0,
    ),
    NamedProgram(
        "same_node_hazard",
        "keep: one op writes clone, reads original",
        _same_node_hazard,
        (_X,),
        0,
    ),
    NamedProgram(
        "two_direct_writers",
        "keep: two direct in-place writers (shipped rule asserts)",
        _two_direct_writers,
        (_X,),
        0,
    ),
    NamedProgram(
        "rms_norm_residual",
        "keep: custom op writes clone, original read",
        _rms_norm_residual,
        (_X, (8,)),
        0,
    ),
)


def program(name: str) -> NamedProgram:
    """The program called ``name``.

    Examples
    --------
    >>> program("chain").sound_removals
    2
    """
    for p in PROGRAMS:
        if p.name == name:
            return p
    raise KeyError(name)
