"""Effects that schemas do not declare (``aliasing.core.ops.HIDDEN_EFFECTS``), each shown by a real run.

- batch norm and instance norm write their running statistics in train mode
  (``make_fx`` graphs: ``aten.native_batch_norm``; ``torch.export`` graphs:
  ``aten.batch_norm`` / ``aten.instance_norm``), and nothing in eval mode;
- clone elimination keeps a snapshot clone of a running statistic that a later
  train-mode batch norm overwrites;
- the dropout family returns its input itself when ``p == 0`` or ``train`` is False;
  so do ``type_as``, the ``_cast_*`` ops and ``lift`` when there is nothing to convert
  (a loaded ``.pt2`` program's metadata does not show it);
- an ``out=`` tensor of the wrong size is resized: its value becomes "unknown storage";
- every table entry names real schema arguments and carries its evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import aliasing
import rewrite
from aliasing.core.ops import HIDDEN_EFFECTS
from aliasing.verification.oracle import check_analysis
from rewrite.testing import check_equivalent, copy_program


def _node(gm: torch.fx.GraphModule, target: Any) -> torch.fx.Node:
    node: torch.fx.Node = next(n for n in gm.graph.nodes if n.target is target)
    return node


def _arg(node: torch.fx.Node, i: int) -> torch.fx.Node:
    value = node.args[i]
    assert isinstance(value, torch.fx.Node)
    return value


def _stats_inputs() -> list[torch.Tensor]:
    return [torch.randn(8, 4), torch.zeros(4), torch.ones(4), torch.rand(4) + 0.5, torch.randn(4)]


def _batch_norm(training: bool) -> Callable[..., torch.Tensor]:
    def fn(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, mean, var, w, b, training=training, momentum=0.3)

    return fn


# ---------------------------------------------------------------------------- batch norm


class _SnapshotThenNormalise(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.bn.running_mean
        assert mean is not None
        snap = mean.clone()
        return self.bn(x), snap * 1.0


def test_exported_batch_norm_keeps_the_snapshot_clone() -> None:
    ep = torch.export.export(_SnapshotThenNormalise().train(), (torch.randn(8, 4),))
    original = copy_program(ep)
    clone = _node(ep.graph_module, torch.ops.aten.clone.default)
    bn = _node(ep.graph_module, torch.ops.aten.batch_norm.default)
    analysis = aliasing.analyze(ep)
    assert bn in analysis.writers(_arg(clone, 0))  # the running mean, a buffer
    report = rewrite.eliminate_clones(ep)
    assert clone.name in report.kept and report.removed == ()
    check_equivalent(original, ep, (torch.randn(8, 4),))


def test_exported_batch_norm_in_eval_mode_lets_the_clone_go() -> None:
    ep = torch.export.export(_SnapshotThenNormalise().eval(), (torch.randn(8, 4),))
    original = copy_program(ep)
    clone = _node(ep.graph_module, torch.ops.aten.clone.default)
    report = rewrite.eliminate_clones(ep)
    assert report.removed == (clone.name,)
    check_equivalent(original, ep, (torch.randn(8, 4),))


def test_make_fx_batch_norm_train_writes_the_running_stats() -> None:
    gm = make_fx(_batch_norm(True), tracing_mode="fake")(*_stats_inputs())
    analysis = aliasing.analyze(gm)
    x, mean, var, w, _b = gm.graph.find_nodes(op="placeholder")
    bn = _node(gm, torch.ops.aten.native_batch_norm.default)
    assert analysis.writers(mean) == (bn,) and analysis.writers(var) == (bn,)
    assert analysis.writers(x) == () and analysis.writers(w) == ()
    inputs = _stats_inputs()
    before = inputs[1].clone()
    check_analysis(analysis, gm, inputs)
    assert not torch.equal(inputs[1], before)  # the run did change the running mean


def test_batch_norm_eval_writes_nothing() -> None:
    gm = make_fx(_batch_norm(False), tracing_mode="fake")(*_stats_inputs())
    analysis = aliasing.analyze(gm)
    for p in gm.graph.find_nodes(op="placeholder"):
        assert analysis.writers(p) == ()
    check_analysis(analysis, gm, _stats_inputs())


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_exported_batch_norm_functional(training: bool) -> None:
    class Fn(torch.nn.Module):
        def forward(self, *t: torch.Tensor) -> torch.Tensor:
            return _batch_norm(training)(*t)

    ep = torch.export.export(Fn(), tuple(_stats_inputs()))
    analysis = aliasing.analyze(ep)
    _x, mean, var, _w, _b = ep.graph.find_nodes(op="placeholder")
    bn = _node(ep.graph_module, torch.ops.aten.batch_norm.default)
    expected = (bn,) if training else ()
    assert analysis.writers(mean) == expected and analysis.writers(var) == expected
    check_analysis(analysis, ep.graph_module, _stats_inputs())


def test_instance_norm_with_running_stats_writes_them() -> None:
    module = torch.nn.InstanceNorm1d(3, affine=True, track_running_stats=True).train()
    state = {k: v.detach().clone() for k, v in [*module.named_parameters(), *module.named_buffers()]}
    names = list(state)

    def fn(x: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.func.functional_call(module, dict(zip(names, tensors)), (x,))
        return out

    def inputs() -> list[torch.Tensor]:
        return [torch.randn(2, 3, 5)] + [t.clone() for t in state.values()]

    gm = make_fx(fn, tracing_mode="fake")(*inputs())
    analysis = aliasing.analyze(gm)
    by_name = dict(zip(["x", *names], gm.graph.find_nodes(op="placeholder")))
    bn = _node(gm, torch.ops.aten.native_batch_norm.default)
    # make_fx: batch norm over a (1, N*C, L) view, on repeated running stats that it updates in
    # place; their means are copied back into the running buffers
    copies = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
    for k, stat in enumerate(("running_mean", "running_var")):
        assert bn in analysis.writers(_arg(bn, 3 + k))
        assert analysis.writers(by_name[stat]) == (copies[k],)
    check_analysis(analysis, gm, inputs())

    ep = torch.export.export(module, (torch.randn(2, 3, 5),))
    exported = aliasing.analyze(ep)
    op = _node(ep.graph_module, torch.ops.aten.instance_norm.default)
    spec = {s.target: s.arg.name for s in ep.graph_signature.input_specs if s.target}
    for stat in ("running_mean", "running_var"):
        assert op in exported.writers(spec[stat])


# ---------------------------------------------------------------------------- dropout


@pytest.mark.parametrize("name", ["dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"])
@pytest.mark.parametrize(("p", "train"), [(0.0, True), (0.5, False)])
def test_dropout_family_may_return_its_input(name: str, p: float, train: bool) -> None:
    op = getattr(torch.ops.aten, name).default
    x = torch.randn(4, 3, 5)
    assert op(x, p, train) is x  # the evidence: the very input, not a copy

    graph = torch.fx.Graph()
    inp = graph.placeholder("x")
    out = graph.call_function(op, (inp, p, train))
    graph.output(out)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    analysis = aliasing.analyze(gm)
    assert analysis.may_alias(inp, out) and analysis.may_overlap(inp, out)
    check_analysis(analysis, gm, [torch.randn(4, 3, 5)])


def test_exported_dropout_with_p_zero_aliases_its_input() -> None:
    class Drop(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.dropout(x, p=0.0, training=True)

    ep = torch.export.export(Drop(), (torch.randn(5, 5),))
    analysis = aliasing.analyze(ep)
    (x,) = ep.graph.find_nodes(op="placeholder")
    drop = _node(ep.graph_module, torch.ops.aten.dropout.default)
    assert analysis.may_alias(x, drop)
    check_analysis(analysis, ep.graph_module, [torch.randn(5, 5)])


@pytest.mark.parametrize(
    ("name", "x", "call"),
    [
        ("type_as", torch.randn(4, 3), lambda op, x: op(x, x)),
        ("_cast_Float", torch.randn(4, 3), lambda op, x: op(x)),
        ("_cast_Long", torch.arange(12).reshape(4, 3), lambda op, x: op(x)),
        ("lift", torch.randn(4, 3), lambda op, x: op(x)),
    ],
)
def test_ops_that_return_their_input_when_nothing_converts(name: str, x: torch.Tensor, call: Callable[..., Any]) -> None:
    op = getattr(torch.ops.aten, name).default
    assert call(op, x) is x  # the evidence: the very input, although the schema says fresh
    assert HIDDEN_EFFECTS[f"aten::{name}"].view_of == "self"


def test_loaded_type_as_clone_written_in_place_is_kept(tmp_path: Any) -> None:
    # torch.export.load gives type_as's result a fake storage of its own: without the table's
    # entry the clone looked removable, and the rewrite wrote the caller's input.
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            d = x.type_as(y).clone()
            d.add_(1)
            return d

    inputs = (torch.randn(3, 4), torch.randn(2))
    torch.export.save(torch.export.export(M(), inputs), tmp_path / "m.pt2")
    ep = torch.export.load(tmp_path / "m.pt2")
    analysis = aliasing.analyze(ep)
    x = ep.graph.find_nodes(op="placeholder")[0]
    type_as = _node(ep.graph_module, torch.ops.aten.type_as.default)
    assert analysis.may_alias(x, type_as)
    check_analysis(analysis, ep.graph_module, [t.clone() for t in inputs])
    original = copy_program(ep)
    assert rewrite.eliminate_clones(ep).kept == ("clone",)
    check_equivalent(original, ep, [t.clone() for t in inputs])


# ---------------------------------------------------------------------------- out= resized


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize(
    "make_out", [lambda: torch.empty(0), lambda: torch.zeros(7), lambda: torch.zeros(2, 3)], ids=["empty", "longer", "2d"]
)
def test_out_of_the_wrong_size_is_unknown_storage(make_out: Callable[[], torch.Tensor]) -> None:
    def fn(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return torch.add(x, 1, out=out)

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(3), make_out())
    analysis = aliasing.analyze(gm)
    _x, out = gm.graph.find_nodes(op="placeholder")
    add = _node(gm, torch.ops.aten.add.out)
    assert aliasing.UNKNOWN_STORAGE in analysis.storage_of(out)
    assert aliasing.UNKNOWN_STORAGE in analysis.storage_of(add)
    assert add in analysis.writers(out)
    check_analysis(analysis, gm, [torch.randn(3), make_out()])


def test_out_of_the_right_size_keeps_its_storage() -> None:
    gm = make_fx(lambda x, out: torch.add(x, 1, out=out), tracing_mode="fake")(torch.randn(3), torch.empty(3))
    analysis = aliasing.analyze(gm)
    x, out = gm.graph.find_nodes(op="placeholder")
    add = _node(gm, torch.ops.aten.add.out)
    assert aliasing.UNKNOWN_STORAGE not in analysis.storage_of(out)
    assert analysis.storage_of(add) == analysis.storage_of(out) and not analysis.may_alias(x, out)
    check_analysis(analysis, gm, [torch.randn(3), torch.empty(3)])


# ---------------------------------------------------------------------------- the table itself


@pytest.mark.parametrize("name", sorted(HIDDEN_EFFECTS))
def test_table_entries_name_schema_arguments_and_have_evidence(name: str) -> None:
    entry = HIDDEN_EFFECTS[name]
    assert entry.evidence and (entry.writes or entry.view_of)
    packet = getattr(torch.ops.aten, name.split("::", 1)[1])
    arguments = [
        {a.name for a in getattr(packet, overload)._schema.arguments} for overload in packet.overloads()
    ]
    named = set(entry.writes) | {n for n in (entry.unless_false, entry.view_of) if n is not None}
    assert any(named <= args for args in arguments), f"{name}: {named} not all in one schema"
