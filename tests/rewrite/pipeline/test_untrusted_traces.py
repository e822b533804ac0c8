"""Decisions that rest on a trace hold for every run the program can have (the one trust rule).

Each program here was removed wrongly once: a view-or-copy op decided at the example size of a
symbolic dimension (a view at size 1), a CompositeImplicit op that returns its argument or a view
of it taken as fresh in a program loaded from its ``.pt2``, an op whose schema declares no alias
although it returns views (``unsafe_split``). Each rewrite is checked against the original program
on the same inputs, at the boundary sizes too, and each analysis against real execution.
"""

from __future__ import annotations

import copy
import io
import warnings
from collections.abc import Callable

import pytest
import torch
from torch.export import Dim
from torch.fx.experimental.proxy_tensor import make_fx

import aliasing
from aliasing.verification.oracle import check_analysis
from rewrite import eliminate_clones
from rewrite.explain import explain
from rewrite.testing import check_equivalent

aten = torch.ops.aten


def _module(forward: Callable[[torch.Tensor], object]) -> torch.nn.Module:
    """A module of one input whose forward is ``forward``."""

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> object:
            return forward(x)

    return M()


def _save_load(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    return torch.export.load(buf)


def _check_traced(forward: Callable[[torch.Tensor], object], inputs: tuple[torch.Tensor, ...], mode: str) -> None:
    """Trace ``forward`` (``make_fx`` in ``mode``, or exported, and saved and loaded), check the analysis
    against a real run, then the rewrite against the original on the same inputs."""
    target: torch.fx.GraphModule | torch.export.ExportedProgram
    if mode == "export-save-load":
        target = _save_load(torch.export.export(_module(forward), inputs))
    elif mode == "export":
        target = torch.export.export(_module(forward), inputs)
    else:
        target = make_fx(forward, tracing_mode=mode)(*inputs)
    gm = target.graph_module if isinstance(target, torch.export.ExportedProgram) else target
    check_analysis(aliasing.analyze(target), gm, [t.clone() for t in inputs])
    original = copy.deepcopy(target)
    eliminate_clones(target)
    check_equivalent(original, target, lambda: tuple(t.clone() for t in inputs))


def _rewrite_matches(ep: torch.export.ExportedProgram, inputs_by_size: list[tuple[torch.Tensor, ...]]) -> None:
    """Rewrite ``ep`` and compare it with the original on every input tuple (fresh copies each)."""
    original = copy.deepcopy(ep)
    eliminate_clones(ep)
    for inputs in inputs_by_size:
        check_equivalent(original, ep, lambda inputs=inputs: tuple(t.clone() for t in inputs))


# -- 1. symbolic sizes at their boundaries ------------------------------------------------------

_LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "transposed": lambda o: o.t(),
    "column-sliced": lambda o: o[:, 1:3],
    "expanded": lambda o: o[:, :1].expand(-1, 4),
}
_VIEW_OR_COPY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "reshape": lambda v: v.reshape(-1),
    "contiguous": lambda v: v.contiguous(),
    "flatten": lambda v: v.flatten(),
    "ravel": lambda v: v.ravel(),
    "reshape_as": lambda v: v.reshape_as(torch.empty(v.numel())),
}


@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
@pytest.mark.parametrize("op", sorted(_VIEW_OR_COPY))
@pytest.mark.parametrize("minimum", [None, 1])
def test_symbolic_view_or_copy_holds_at_every_size(layout: str, op: str, minimum: int | None) -> None:
    """``reshape`` of a transposed ``(n, 4)`` copies for n > 1 and is a view of ``o`` at n == 1:
    the clone of ``o`` is kept, since ``r.add_`` writes ``o`` at n == 1."""
    make_view, view_or_copy = _LAYOUTS[layout], _VIEW_OR_COPY[op]

    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        o = x * 1
        c = o.clone()
        r = view_or_copy(make_view(o))
        r.add_(1)
        return c * 1, r * 1

    dim = Dim("n") if minimum is None else Dim("n", min=minimum)
    ep = torch.export.export(_module(forward), (torch.randn(3, 4),), dynamic_shapes=({0: dim},))
    for n in (2, 3):  # (at n == 1 the expanded layouts' in-place add raises: check_equivalent judges that)
        check_analysis(aliasing.analyze(ep), ep.graph_module, [torch.randn(n, 4)])
    _rewrite_matches(ep, [(torch.randn(n, 4),) for n in (1, 2, 3, 7)])


def test_static_copy_is_still_trusted() -> None:
    """At static sizes the recorded copy holds for every run: the clone of a contiguous copy goes."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        c = x.t().contiguous().clone()  # a clone of a copy of an input: not needed
        return c * 2

    ep = torch.export.export(_module(forward), (torch.randn(3, 4),))
    original = copy.deepcopy(ep)
    report = eliminate_clones(ep)
    assert len(report.removed) == 1, report
    check_equivalent(original, ep, lambda: (torch.randn(3, 4),))


# -- 2. programs loaded from their .pt2 ---------------------------------------------------------

#: CompositeImplicit ops kept in torch.export's IR that return their argument or a view of it
#: while their schema declares a fresh tensor: (name, what makes v from o (3 x 4 float), input)
_RETURNS_ARGUMENT: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "einsum": lambda o: torch.einsum("ij->ji", o),
    "atleast_1d": lambda o: torch.atleast_1d(o),
    "atleast_2d": lambda o: torch.atleast_2d(o),
    "atleast_3d": lambda o: torch.atleast_3d(o[0]),
    "atleast_1d.Sequence": lambda o: torch.atleast_1d((o, o[0]))[0],
    "sum_to_size": lambda o: o.sum_to_size(3, 4),
    "broadcast_tensors": lambda o: torch.broadcast_tensors(o, o[0])[0],
    "conj_physical": lambda o: torch.conj_physical(o),
    "to_dense": lambda o: o.to_dense(),
    "dequantize": lambda o: torch.dequantize(o),
    "cartesian_prod": lambda o: torch.cartesian_prod(o[0]),
    "flatten_dense_tensors": lambda o: torch._C._nn.flatten_dense_tensors([o]),
    "unflatten_dense_tensors": lambda o: torch._C._nn.unflatten_dense_tensors(o.reshape(-1), [o])[0],
}


@pytest.mark.parametrize("name", sorted(_RETURNS_ARGUMENT))
def test_loaded_program_keeps_clone_of_returned_argument(name: str) -> None:
    make = _RETURNS_ARGUMENT[name]

    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        o = x * 1
        c = make(o).clone()
        c.add_(1)
        return o * 1, c

    ep = torch.export.export(_module(forward), (torch.randn(3, 4),))
    loaded = _save_load(ep)
    _rewrite_matches(loaded, [(torch.randn(3, 4),)])
    _rewrite_matches(ep, [(torch.randn(3, 4),)])


def _decoder_block() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(8, 24)
            self.register_buffer("cache", torch.zeros(4, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).split(8, dim=-1)
            k2 = k.clone()  # only read: not needed
            self.cache[: x.shape[0]].copy_(v)
            att = torch.softmax(q @ k2.t(), dim=-1)
            kept = q.clone()  # written below while q is read after: needed
            kept.add_(1)
            return att @ self.cache[: x.shape[0]] + kept + q

    return Block(), (torch.randn(4, 8),)


@pytest.mark.parametrize("program", ["decoder", "einsum", "view-chain"])
def test_same_decisions_in_memory_and_from_file(program: str) -> None:
    if program == "decoder":
        module, inputs = _decoder_block()
    elif program == "einsum":
        module = _module(lambda x: torch.einsum("ij->ji", x * 1).clone() + 1)
        inputs = (torch.randn(3, 4),)
    else:
        module = _module(lambda x: (x * 2).t()[1:].clone().mul_(3) + x.sum())
        inputs = (torch.randn(3, 4),)
    with torch.no_grad():
        ep = torch.export.export(module, inputs)
    loaded = _save_load(ep)
    in_memory = explain(copy.deepcopy(ep))
    from_file = explain(loaded)
    assert [(d.node, d.action, str(d.reason)) for d in from_file.report.decisions] == [
        (d.node, d.action, str(d.reason)) for d in in_memory.report.decisions
    ]
    a, b = aliasing.analyze(copy.deepcopy(ep)), aliasing.analyze(_save_load(ep))
    assert len(a.storages) == len(b.storages)


def test_loaded_program_that_cannot_be_propagated_warns_once() -> None:
    """Fake values that cannot be computed again leave the metadata as it was, conservatively, and say so."""
    ep = _save_load(torch.export.export(_module(lambda x: (x * 2).t().clone() + 1), (torch.randn(3, 4),)))
    for p in ep.graph.find_nodes(op="placeholder"):
        del p.meta["val"]  # nothing to propagate from
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        aliasing.analyze(ep)
    assert [w.category for w in caught].count(aliasing.UntrustedMetadataWarning) == 1


# -- 3. schemas that lie ------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk"])
@pytest.mark.parametrize("mode", ["real", "fake", "export-save-load"])
def test_unsafe_split_returns_views(split: str, mode: str) -> None:
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        o = x * 1
        if split == "unsafe_split":
            a, _ = aten.unsafe_split(o, 2)
        elif split == "unsafe_split_with_sizes":
            a, _ = aten.unsafe_split_with_sizes(o, [2, 2])
        else:
            a, _ = torch.unsafe_chunk(o, 2)
        c = a.clone()
        c.add_(1)
        return o * 1, c

    _check_traced(forward, (torch.randn(4, 3),), mode)


# -- 4. storage offsets that no run is held to ----------------------------------------------------


@pytest.mark.parametrize("mode", ["in-memory", "export-save-load", "real"])
def test_clone_of_input_at_unguarded_offset_keeps_its_layout(mode: str) -> None:
    """An exported program's module takes inputs at any storage offset (it checks sizes), a loaded
    one records every input at offset 0, and a real-mode trace fakes every value at offset 0: a
    returned clone of a donated input keeps the output at offset 0 (found by the soak's new modes)."""

    def forward(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x.clone().clone(),)

    traced_with, run_with = torch.randn(3)[1:], torch.randn(2)
    target: torch.fx.GraphModule | torch.export.ExportedProgram
    if mode == "real":
        target = make_fx(forward, tracing_mode="real")(traced_with)
    else:
        target = torch.export.export(_module(forward), (traced_with if mode != "in-memory" else torch.randn(2),))
        if mode == "export-save-load":
            target = _save_load(target)
    original = copy.deepcopy(target)
    eliminate_clones(target, donated_inputs=[0])
    check_equivalent(original, target, lambda: (_at_offset(run_with),), donated_inputs=[0])


def _at_offset(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a tensor at storage offset 1 (check_equivalent copies keep the layout)."""
    base = torch.empty(t.numel() + 1)
    out = base[1:].view(t.shape)
    out.copy_(t)
    return out


def _absolute_view(x: torch.Tensor) -> tuple[torch.Tensor]:
    return (x.as_strided((1,), (1,), 1).clone(),)


def _fold_then_absolute_view(x: torch.Tensor) -> tuple[torch.Tensor]:
    y = x.clone()
    y.add_(1.0)
    x.copy_(y)
    return (y.as_strided((1,), (1,), 0).clone(),)


@pytest.mark.parametrize("program", [_absolute_view, _fold_then_absolute_view])
@pytest.mark.parametrize("mode", ["real", "export-save-load"])
def test_absolute_views_of_inputs_at_unguarded_offsets(program: Callable[..., object], mode: str) -> None:
    """``as_strided`` with a storage offset places its view at an absolute position, while the input
    lies at an offset its metadata does not give (found by the soak: the analysis said the view and
    the input do not overlap; a copy-back fold moved an absolute view from the clone to the input)."""
    x = torch.randn(3)[1:]
    target: torch.fx.GraphModule | torch.export.ExportedProgram
    if mode == "real":
        target = make_fx(program, tracing_mode="real")(_at_offset(x))
    else:
        target = _save_load(torch.export.export(_module(program), (torch.randn(2),)))
    gm = target.graph_module if isinstance(target, torch.export.ExportedProgram) else target
    check_analysis(aliasing.analyze(target), gm, [_at_offset(x)])
    original = copy.deepcopy(target)
    eliminate_clones(target)
    check_equivalent(original, target, lambda: (_at_offset(x),))


@pytest.mark.parametrize("mode", ["fake", "real", "export-save-load"])
def test_elements_of_a_list_result_may_share_one_allocation(mode: str) -> None:
    """``nonzero_numpy`` returns the columns of one tensor (its schema declares fresh results, and
    none shares an argument's storage): the elements share one fresh storage (found by the soak)."""

    def forward(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = torch.ops.aten.nonzero_numpy.default(x)
        return a.clone(), b

    _check_traced(forward, (torch.randn(3, 2),), mode)


# -- 5. fake layouts of composite ops -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fake", "real", "export", "export-save-load"])
def test_composite_op_is_laid_out_by_what_it_runs(mode: str) -> None:
    """``torch.export`` keeps ``aten.batch_norm`` (CompositeImplicitAutograd), which runs
    ``native_batch_norm``: eagerly the result of a transposed input is contiguous, its fake
    kernel records it transposed. ``reshape`` of the clone is then a view, not the copy the
    recorded layout says, and ``add_`` writes ``v`` (found by the soak in loaded programs)."""

    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        o = x * 1
        n = o.shape[0]
        v = torch.nn.functional.batch_norm(o.t(), torch.zeros(n), torch.ones(n), training=False)
        c = v.clone()
        r = c.reshape(-1)
        r.add_(1)
        return v * 1, r * 1

    _check_traced(forward, (torch.randn(6, 4),), mode)


def test_composite_op_on_symbolic_sizes_is_not_judged_at_the_example_size() -> None:
    """What a composite kernel runs may depend on the sizes; a call on symbolic sizes ran at the
    example size only, so it is taken to lie and observe (a static call is judged by what it ran),
    unless :data:`aliasing.core.ops.COMPOSITE_RUNS` lists what it may run at any size (``reshape``)."""
    from aliasing.core.effects import composite_diverges, composite_lies, decomposition
    from aliasing.core.ops import COMPOSITE_RUNS

    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 1
        return y.flatten(), y.reshape(-1)

    flatten, reshape = aten.flatten.using_ints, aten.reshape.default
    nodes = {}
    for label, shapes in (("static", None), ("symbolic", {"x": (Dim("n"), 4)})):
        ep = torch.export.export(_module(forward), (torch.randn(6, 4),), dynamic_shapes=shapes)
        nodes[label] = {n.target: n for n in ep.graph.nodes if n.target in (flatten, reshape)}
    assert set(nodes["static"]) == set(nodes["symbolic"]) == {flatten, reshape}
    assert decomposition(nodes["static"][flatten]) is not None
    assert not composite_lies(nodes["static"][flatten]) and not composite_diverges(nodes["static"][flatten])
    assert decomposition(nodes["symbolic"][flatten]) is None
    assert composite_lies(nodes["symbolic"][flatten]) and composite_diverges(nodes["symbolic"][flatten])
    for label in ("static", "symbolic"):  # judged by the table, at any size
        assert decomposition(nodes[label][reshape]) == COMPOSITE_RUNS[str(reshape)]
        assert not composite_lies(nodes[label][reshape]) and not composite_diverges(nodes[label][reshape])


def _reshape_then_layout_clone_read(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = (x * 1).reshape(-1, 2)
    c = r.t().clone(memory_format=torch.contiguous_format)  # a layout change downstream of reshape
    return c * 2, r.sum(0)


def _reshape_then_layout_clone_written(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    o = x * 1
    r = o.reshape(-1, 2)
    c = r.t().clone(memory_format=torch.contiguous_format)
    c.add_(1)
    return o * 1, c.reshape(-1)


@pytest.mark.parametrize("forward", [_reshape_then_layout_clone_read, _reshape_then_layout_clone_written])
def test_reshape_judged_by_its_listed_paths_is_sound_at_every_size(forward: Callable[..., object]) -> None:
    """On symbolic sizes a ``reshape`` is judged by what it may run at any size
    (:data:`aliasing.core.ops.COMPOSITE_RUNS`), not taken to lie: the rewrite of the dynamic
    exported program equals the original at the size's boundaries and beyond (n of 1, 2, 3 and 8
    rows of 2 elements: a view at some sizes, a copy at none)."""
    ep = torch.export.export(_module(forward), (torch.randn(6, 2),), dynamic_shapes={"x": (Dim("n"), 2)})
    reshape = next(n for n in ep.graph.nodes if n.target is aten.reshape.default)
    from aliasing.core.effects import composite_lies

    assert not composite_lies(reshape)
    _rewrite_matches(ep, [(torch.randn(n, 2),) for n in (1, 2, 3, 8)])
