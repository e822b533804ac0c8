"""The storage-sharing audit (``python -m tools.audit --storage``) and its committed data files.

Schemas lie: ``aten.unsafe_split.Tensor`` returns views without declaring
them, the CPU kernel of ``aten.dequantize.self`` returns a float argument
itself, and ``aten.einsum`` (CompositeImplicitAutograd, kept by
``torch.export``) returns a view for a permutation. The analysis trusts a
``pure`` overload to return fresh memory only where the audit of the installed
release confirmed it, so:

- the sharing check itself: results that are, view, or share a storage with
  an argument (nested lists, sparse tensors) are found, fresh ones are not;
- a slice of the audit (hand cases, and the dispatch-mode and export paths)
  finds those liars and confirms ``add.Tensor`` and ``mm`` fresh (the fast
  slice that runs in CI); OpInfo-driven runs do too (slow);
- the committed data file of the installed release exists, parses, has
  exactly one row per ``pure`` overload of the registry, and every ``shares``
  row has evidence; the known liars are ``shares`` in it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aliasing.core.registry import classify_installed, torch_release
from tools.audit import main as audit_main
from tools.storage_audit import (
    REGENERATE,
    VERDICTS,
    AuditError,
    _Checker,
    _export_and_run,
    _Tally,
    audit_storage,
    hand_cases,
    read_table,
    render_table,
    schema_argument_sets,
    sharing,
    table_path,
)

#: Overloads whose results share an argument's storage on every supported release (known liars).
KNOWN_SHARING = ("aten::unsafe_split.Tensor", "aten::unsafe_split_with_sizes", "aten::einsum", "aten::dequantize.self")


def _pure() -> set[str]:
    return {c.overload for c in classify_installed() if c.kind == "pure"}


# --------------------------------------------------------------------------- the sharing check


def test_sharing_finds_views_identity_and_nested_lists() -> None:
    x = torch.randn(4, 3)
    assert sharing((x,), {}, x.t()) == "output 0 is a view of argument 0"
    assert sharing((x,), {}, x) == "output 0 is argument 0"
    y = torch.randn(2)
    assert sharing(([y, x],), {}, [x[0]]) == "output 0 is a view of argument 0[1]"
    assert sharing((1, y), {}, (torch.zeros(2), y)) == "output 1 is argument 1"
    assert sharing((), {"other": x}, x.view(-1)) == "output 0 is a view of argument 'other'"


def test_sharing_finds_sparse_tensors_built_on_their_arguments() -> None:
    indices, values = torch.tensor([[0, 2]]), torch.randn(2)
    found = sharing((indices, values, [3]), {}, torch.sparse_coo_tensor(indices, values, (3,)))
    assert found is not None and "sharing a storage with argument" in found


def test_sharing_says_nothing_for_fresh_results() -> None:
    x = torch.randn(4, 3)
    assert sharing((x, x), {}, torch.add(x, x)) is None
    assert sharing((x,), {}, torch.empty(0)) is None  # zero-size results have storages of their own
    assert sharing((torch.empty(0),), {}, torch.empty(0)) is None
    assert sharing((x,), {}, (x.sum().item(), None)) is None


def test_dispatch_mode_path_sees_backend_kernels() -> None:
    tally = _Tally()
    x = torch.randn(3, 4)
    with torch.no_grad(), _Checker(tally):
        torch.dequantize(x)  # the CPU kernel returns its float argument itself
        torch.mm(x, x.t())
    assert "output 0 is argument 0" in tally.evidence["aten::dequantize.self"]
    assert tally.calls["aten::mm"] == 1 and "aten::mm" not in tally.evidence


def test_export_path_sees_composite_implicit_ops() -> None:
    tally = _Tally()
    x = torch.randn(3, 4)
    with torch.no_grad(), _Checker(tally):  # eagerly einsum decomposes: the mode never sees it
        torch.einsum("ij->ji", x)
    assert "aten::einsum" not in tally.calls

    def permute(o: torch.Tensor) -> torch.Tensor:
        return torch.einsum("ij->ji", o)

    called = _export_and_run(tally, permute, x, (), {})
    assert "aten::einsum" in called
    assert tally.evidence["aten::einsum"].startswith("einsum('ij->ji', [float32[3, 4]]): output 0 is a view of argument 1")


def test_schema_argument_sets_fill_required_arguments() -> None:
    args, kwargs = next(schema_argument_sets(torch.ops.aten.unsafe_split.Tensor))
    assert isinstance(args[0], torch.Tensor) and args[1:] == (1,) and kwargs == {}
    assert len(list(schema_argument_sets(torch.ops.aten.add.Tensor, limit=2))) == 2


# --------------------------------------------------------------------------- a slice of the audit (CI)


@pytest.fixture(scope="module")
def hand_slice() -> dict[str, str]:
    ops = ["aten::unsafe_split.Tensor", "aten::unsafe_split_with_sizes", "aten::einsum", "aten::dequantize.self", "aten::matmul",
           "add", "mm"]
    return audit_storage(ops, sources=["opinfo", "hand"], max_samples=2, sample_timeout=30.0).verdicts()


def test_slice_finds_the_known_liars(hand_slice: dict[str, str]) -> None:
    for overload in KNOWN_SHARING:
        assert hand_slice[overload] == "shares", overload


def test_slice_confirms_ordinary_kernels_fresh(hand_slice: dict[str, str]) -> None:
    assert hand_slice["aten::add.Tensor"] == "fresh"
    assert hand_slice["aten::mm"] == "fresh"
    assert hand_slice["aten::matmul"] == "fresh"


def test_slice_leaves_what_it_never_called_not_run(hand_slice: dict[str, str]) -> None:
    assert set(hand_slice) == _pure()
    assert hand_slice["aten::cartesian_prod"] == "not-run"


def test_every_hand_case_names_an_overload_of_some_release() -> None:
    pure = _pure()
    known = {c.overload for c in classify_installed()}
    cases = hand_cases()
    assert all(k.startswith("hand.aten::") for k in cases)
    missing = [c.overload for c in cases.values() if c.overload not in known]
    assert len(missing) <= 3, missing  # an overload a release removed or renamed
    assert {"aten::unsafe_split.Tensor", "aten::cartesian_prod", "aten::to_dense"} <= pure


def test_unknown_requests_are_refused() -> None:
    with pytest.raises(AuditError):
        audit_storage(["aten::no_such_overload"], sources=["hand"])
    with pytest.raises(AuditError):
        audit_storage(["no_such_opinfo"], sources=["opinfo"])
    with pytest.raises(AuditError):
        audit_storage(None, sources=["nonsense"])


@pytest.mark.slow
def test_opinfo_runs_find_liars_and_confirm_fresh_kernels() -> None:
    report = audit_storage(["einsum", "atleast_2d", "add", "mm", "broadcast_tensors"], sources=["opinfo"], max_samples=4)
    verdicts = report.verdicts()
    assert verdicts["aten::add.Tensor"] == "fresh"
    assert verdicts["aten::mm"] == "fresh"
    for overload in ("aten::atleast_2d", "aten::broadcast_tensors"):
        assert verdicts[overload] == "shares", overload
        assert "export" in report.rows[overload][3] or "eager" in report.rows[overload][3]


@pytest.mark.slow
def test_cli_writes_a_parseable_table(tmp_path: Path) -> None:
    table, md, js = tmp_path / "t.tsv", tmp_path / "r.md", tmp_path / "r.json"
    argv = ["--storage", "--ops", "aten::unsafe_split.Tensor", "mm", "--max-samples", "2", "--quiet",
            "--table", str(table), "--markdown", str(md), "--json", str(js)]
    assert audit_main(argv) == 0
    rows = read_table(table)
    assert rows["aten::unsafe_split.Tensor"][0] == "shares" and rows["aten::mm"][0] == "fresh"
    assert table.read_text().startswith(f"# storage-sharing audit of torch {torch.__version__}: overload, verdict, calls, evidence")
    assert "`aten::unsafe_split.Tensor`" in md.read_text()


# --------------------------------------------------------------------------- the committed data file


@pytest.fixture(scope="module")
def committed() -> dict[str, tuple[str, int, str]]:
    path = table_path()
    if not path.exists():
        pytest.fail(f"no storage-sharing audit committed for torch {torch_release()}: run `{REGENERATE}` on it ({path})")
    return read_table(path)


def test_committed_table_has_one_row_per_pure_overload(committed: dict[str, tuple[str, int, str]]) -> None:
    pure = _pure()
    assert sorted(committed) == sorted(pure), (sorted(set(committed) - pure)[:5], sorted(pure - set(committed))[:5])


def test_committed_table_is_well_formed(committed: dict[str, tuple[str, int, str]]) -> None:
    path = table_path()
    lines = path.read_text().splitlines()
    assert lines[0].startswith(f"# storage-sharing audit of torch {torch_release()}")
    names = [line.split("\t")[0] for line in lines[1:]]
    assert names == sorted(names)
    for name, (verdict, calls, evidence) in committed.items():
        assert verdict in VERDICTS
        assert (calls == 0) == (verdict == "not-run"), name
        if verdict == "shares":
            assert evidence.strip(), f"{name}: a shares row without evidence"
        else:
            assert evidence == "", name


def test_committed_table_names_the_known_liars(committed: dict[str, tuple[str, int, str]]) -> None:
    for overload in KNOWN_SHARING:
        assert committed[overload][0] == "shares", overload
    assert committed["aten::add.Tensor"][0] == "fresh"
    assert committed["aten::mm"][0] == "fresh"


def test_render_and_read_round_trip(tmp_path: Path) -> None:
    rows = {"aten::mm": ("fresh", 3, ""), "aten::einsum": ("shares", 1, "einsum('ij->ji', [float32[3, 4]]): output 0 is a view of argument 1[0]"),
            "aten::foo.bar": ("not-run", 0, "")}
    path = tmp_path / "t.tsv"
    path.write_text(render_table("2.13.0+cpu", rows))
    assert read_table(path) == rows
    path.write_text(path.read_text() + "aten::bad\tmaybe\t1\t\n")
    with pytest.raises(AuditError):
        read_table(path)
