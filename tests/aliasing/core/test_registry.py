"""The operator-registry coverage check (aliasing.core.registry) and the ops that change a tensor's storage.

Every ATen overload of the installed torch must be classified, and the classification
must equal the one committed for this torch release: a release that adds an op with a
mutation or alias annotation (torch 2.14's ``shallow_copy_data_``) fails here until the
op is reviewed. An ATen op that no rule classifies is an unknown op for the analysis.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import rewrite
from aliasing.core import effects, registry
from rewrite.testing import NotEquivalent, check_equivalent
from tools.audit import main as audit_main


def test_installed_torch_matches_its_committed_classification() -> None:
    diff = registry.compare_with_committed()
    assert diff.committed, diff.summary()
    assert diff.ok, diff.summary()


def test_every_release_file_classifies_every_overload() -> None:
    files = sorted(registry.committed_path("2.13").parent.glob("torch-*.tsv"))
    assert {f.name for f in files} >= {"torch-2.13.tsv", "torch-2.14.tsv", "torch-2.15.tsv"}
    for f in files:
        rows = registry.read_classification(f)
        assert len(rows) > 3000, f
        assert {r.kind for r in rows} <= set(registry.KINDS) - {"unclassified"}, f


def test_registry_cli_passes_on_the_installed_torch(capsys: pytest.CaptureFixture[str]) -> None:
    assert audit_main(["--registry"]) == 0
    assert "0 unclassified" in capsys.readouterr().out


def test_a_new_op_is_reported_by_name() -> None:
    rows = registry.classify_installed()
    new = registry.Classification("aten::made_up_.default", "unclassified", "writes self; not reviewed")
    diff = registry.compare_with_committed([*rows, new])
    assert not diff.ok
    assert "aten::made_up_.default" in diff.summary()
    assert "python -m tools.audit --registry --write" in diff.summary()


@pytest.mark.parametrize(
    ("op", "kind"),
    [
        (torch.ops.aten.add_.Tensor, "schema-inplace"),
        (torch.ops.aten.__iand__.Tensor, "schema-inplace"),
        (torch.ops.aten.add.out, "schema-out"),
        (torch.ops.aten.add.Tensor, "pure"),
        (torch.ops.aten.view.default, "schema-alias"),
        (torch.ops.aten.set_.source_Tensor, "metadata-mutating"),
        (torch.ops.aten.set_data.default, "metadata-mutating"),
        (torch.ops.aten.t_.default, "metadata-mutating"),  # tagged inplace_view
        (torch.ops.aten.resize_.default, "metadata-mutating"),
        (torch.ops.aten.native_batch_norm.default, "hidden-effects"),
        (torch.ops.aten._foreach_add_.List, "schema-inplace"),
        (torch.ops.aten._fused_adam_.default, "reviewed"),
    ],
)
def test_rules(op: torch._ops.OpOverload, kind: str) -> None:
    assert registry.classify(op).kind == kind


@pytest.fixture
def unreviewed_op() -> torch._ops.OpOverload:
    """A custom op shaped like shallow_copy_data_: writes self, no functional twin, no review."""
    lib = torch.library.Library("fx_aliasing_registry_test", "FRAGMENT")
    lib.define("take_storage_(Tensor(a!) self, Tensor source) -> Tensor(a!)")
    op = torch.ops.fx_aliasing_registry_test.take_storage_.default
    yield op
    lib._destroy()


def test_an_op_no_rule_fits_is_unclassified(unreviewed_op: torch._ops.OpOverload) -> None:
    c = registry.classify(unreviewed_op)
    assert c.kind == "unclassified"
    assert "self" in c.reason


def test_an_unclassified_aten_op_is_an_unknown_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take set_data out of the metadata table: it is then unclassified, and every call is unknown."""
    monkeypatch.setattr(registry, "METADATA_MUTATING", registry.METADATA_MUTATING - {"aten::set_data"})
    monkeypatch.setattr(effects, "_TEMPLATES", {})
    op = torch.ops.aten.set_data.default
    assert registry.classify(op).kind == "unclassified"
    # make_fx does not record set_data (``x.data = y``): trace set_, then call set_data in its place
    gm = make_fx(_takes_storage_with(torch.ops.aten.set_.source_Tensor))(torch.randn(3))
    for n in gm.graph.nodes:
        if n.target is torch.ops.aten.set_.source_Tensor:
            n.target = op
    gm.recompile()
    report = rewrite.eliminate_clones(gm)
    assert report.removed == ()
    node = next(n for n in gm.graph.nodes if n.target is op)
    from aliasing import analyze

    effect = analyze(gm).effect_of(node)
    assert effect is not None and effect.unknown


def _takes_storage_with(op: torch._ops.OpOverload):  # type: ignore[no-untyped-def]
    def program(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x * 2
        c = a.clone()
        t = torch.zeros(3)
        op(t, c)  # t now shares c's storage
        t.add_(1)  # so this writes c
        return a * 3, c * 3

    return program


def _storage_taking_ops() -> list[torch._ops.OpOverload]:
    ops = [torch.ops.aten.set_.source_Tensor]
    if hasattr(torch.ops.aten, "shallow_copy_data_"):  # new in torch 2.14
        ops.append(torch.ops.aten.shallow_copy_data_.default)
    return ops


@pytest.mark.parametrize("op", _storage_taking_ops(), ids=str)
@pytest.mark.parametrize("mode", ["fake", "real", "symbolic"])
def test_an_op_that_takes_a_clones_storage_keeps_the_clone(op: torch._ops.OpOverload, mode: str) -> None:
    program = _takes_storage_with(op)
    x = torch.randn(3)
    gm = make_fx(program, tracing_mode=mode)(x)
    # removing the clone really is wrong: the write through t would land in a
    removed_all = make_fx(program, tracing_mode=mode)(x)
    for n in list(removed_all.graph.nodes):
        if n.target is torch.ops.aten.clone.default:
            n.replace_all_uses_with(n.args[0])
            removed_all.graph.erase_node(n)
    removed_all.recompile()
    with pytest.raises(NotEquivalent):
        check_equivalent(gm, removed_all, [x])

    report = rewrite.eliminate_clones(gm)
    assert report.removed == ()
    check_equivalent(make_fx(program, tracing_mode=mode)(x), gm, [x])
