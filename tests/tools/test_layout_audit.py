"""The layout audit (``python -m tools.audit --layouts``) and the planner's use of its table.

Meta kernels are evidence, not proof: ``aten.roll``'s meta kernel returns a
contiguous result for every input while the CPU kernel keeps a channels-last
input's layout, so the layout refinement, which predicts a consumer's layout
on meta tensors, removed clones whose layout change ``roll`` makes visible.

- regression programs: a layout-changing clone (``contiguous`` of a
  channels-last input, ``clone(memory_format=channels_last)``, ``_to_copy``
  with a memory format) read by ``roll``, traced with ``make_fx`` (fake and
  real) and ``torch.export``: the clone is kept (``roll`` is in
  ``aliasing.core.layout_divergences``) and the rewrite equals the original on
  real inputs; without the table the same rewrite differs (the rewritten
  program raises, or returns other strides);
- a time-bounded slice of the audit finds ``roll``'s divergence, and what it
  finds on the installed torch is in that release's committed results (a
  release without committed results fails, naming the command that makes
  them); the committed table is what the committed results of every release
  render, their union (a JSON data file of the package, which
  ``aliasing.core.layout_divergences`` reads and the wheel ships), and every
  release with a committed operator classification has committed layout results;
- a planted lying kernel (a custom op whose fake kernel returns contiguous
  strides while its CPU kernel keeps the input's layout) is caught, and an
  honest twin is not.
"""

from __future__ import annotations

import fnmatch
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import rewrite.planning.dataflow
from aliasing import AliasAnalysis
from aliasing.core import layout_divergences, ops
from aliasing.core.registry import committed_path, torch_release
from rewrite import Reason, eliminate_clones
from rewrite.errors import NotEquivalent
from rewrite.testing import check_equivalent, copy_program
from tools.audit import main as audit_main
from tools.layout_audit import (
    LAYOUTS,
    REGENERATE,
    TABLE_PATH,
    LayoutAuditError,
    audit_layouts,
    committed_results,
    relayout,
    release_of,
    render_markdown,
    render_table,
    results_path,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

Program = torch.fx.GraphModule | torch.export.ExportedProgram


# --------------------------------------------------------------------------- regression programs


def contiguous_then_roll(x: torch.Tensor) -> torch.Tensor:
    c = x.contiguous()  # a channels-last input: make_fx records aten.clone(memory_format=contiguous_format)
    return torch.roll(c, 1, 0).view(-1)  # eager roll keeps c's layout; without the clone the view raises


def clone_contiguous_then_roll(x: torch.Tensor) -> torch.Tensor:
    c = x.clone(memory_format=torch.contiguous_format)  # torch.export keeps aten.contiguous: spell it as a clone
    return torch.roll(c, 1, 0).view(-1)


def clone_channels_last_then_roll(x: torch.Tensor) -> torch.Tensor:
    c = x.clone(memory_format=torch.channels_last)
    return torch.roll(c, 1, 0)  # its strides are the output's (a view(-1) would raise in the original)


def to_copy_channels_last_then_roll(x: torch.Tensor) -> torch.Tensor:
    c = torch.ops.aten._to_copy.default(x, memory_format=torch.channels_last)
    return torch.roll(c, 1, 0)


def _channels_last() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, 4, 5, generator=g).contiguous(memory_format=torch.channels_last)]


def _contiguous() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, 4, 5, generator=g)]


PROGRAMS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[], list[torch.Tensor]]]] = {
    "contiguous_of_channels_last": (contiguous_then_roll, _channels_last),
    "clone_contiguous_of_channels_last": (clone_contiguous_then_roll, _channels_last),
    "clone_channels_last_of_contiguous": (clone_channels_last_then_roll, _contiguous),
    "to_copy_channels_last_of_contiguous": (to_copy_channels_last_then_roll, _contiguous),
}
TRACERS = ("make_fx_fake", "make_fx_real", "export")
#: ``x.contiguous()`` stays ``aten.contiguous`` under torch.export: no clone to judge there.
NO_CANDIDATE = {("contiguous_of_channels_last", "export")}
CASES = [(p, t) for p in PROGRAMS for t in TRACERS if (p, t) not in NO_CANDIDATE]


class _Module(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _trace(name: str, tracer: str) -> tuple[Program, Callable[[], list[torch.Tensor]]]:
    fn, inputs = PROGRAMS[name]
    if tracer == "export":
        return torch.export.export(_Module(fn), tuple(inputs())), inputs
    mode = "fake" if tracer == "make_fx_fake" else "real"
    return make_fx(fn, tracing_mode=mode)(*inputs()), inputs


def _graph(program: Program) -> torch.fx.Graph:
    return program.graph if isinstance(program, torch.fx.GraphModule) else program.graph_module.graph


@pytest.mark.parametrize(("name", "tracer"), CASES)
def test_clone_read_by_roll_is_kept(name: str, tracer: str) -> None:
    original, inputs = _trace(name, tracer)
    copies = [n.name for n in _graph(original).nodes if n.target in (torch.ops.aten.clone.default, torch.ops.aten._to_copy.default)]
    assert copies, _graph(original)
    rewritten = copy_program(original)
    report = eliminate_clones(rewritten, strict=True)
    assert report.removed == (), str(report)
    for copy in copies:
        d = report.decision(copy)
        assert (d.action, d.reason) == ("keep", Reason.LAYOUT), str(report)
        assert any(e.startswith("roll") for e in d.evidence), str(report)
    check_equivalent(original, rewritten, inputs)
    assert eliminate_clones(rewritten, strict=True).removed == ()


#: Traced for real, ``roll``'s recorded layout is the CPU kernel's: these were kept before the table too.
REAL_LAYOUT_RECORDED = {
    ("clone_channels_last_of_contiguous", "make_fx_real"),
    ("to_copy_channels_last_of_contiguous", "make_fx_real"),
}


@pytest.mark.parametrize(("name", "tracer"), [c for c in CASES if c not in REAL_LAYOUT_RECORDED])
def test_without_the_table_the_rewrite_differs(name: str, tracer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug the table fixes: meta's contiguous roll hides the layout change, the clone goes, real runs differ."""
    monkeypatch.setattr(rewrite.planning.dataflow, "layout_divergent", lambda overload: False)
    monkeypatch.setattr(AliasAnalysis, "lying_source", lambda self, node: None)
    original, inputs = _trace(name, tracer)
    rewritten = copy_program(original)
    report = eliminate_clones(rewritten, strict=True)
    assert [d.reason for d in report.decisions if d.action == "remove"] == [Reason.LAYOUT_UNOBSERVED], str(report)
    with pytest.raises(NotEquivalent, match=r"\[(raises|output)\]"):
        check_equivalent(original, rewritten, inputs)


def test_roll_is_in_the_table() -> None:
    assert layout_divergences.layout_divergent("aten.roll.default")
    assert layout_divergences.fake_layout_divergent("aten.roll.default")
    assert "aten.roll.default" in layout_divergences.LAYOUT_DIVERGENT_OVERLOADS
    assert not layout_divergences.layout_divergent("aten.add.Tensor")
    assert rewrite.planning.dataflow.layout_divergent is layout_divergences.layout_divergent


def test_overloads_of_a_divergent_op_that_were_never_run_count_as_divergent() -> None:
    assert layout_divergences.layout_divergent("aten.roll.some_overload_the_audit_never_ran")
    for sibling in layout_divergences.AGREEING_SIBLINGS:
        assert not layout_divergences.layout_divergent(sibling)


def test_an_elementwise_consumer_still_lets_the_clone_go() -> None:
    """Ops the audit found truthful keep the refinement: ``sin`` of a contiguous copy of a strided input."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x.contiguous()) + 1

    def inputs() -> list[torch.Tensor]:
        return [torch.randn(4, 16, generator=torch.Generator().manual_seed(0))[:, ::2]]

    original = make_fx(f, tracing_mode="fake")(*inputs())
    rewritten = copy_program(original)
    report = eliminate_clones(rewritten, strict=True)
    assert not layout_divergences.layout_divergent("aten.sin.default")
    assert [(d.action, d.reason) for d in report.decisions] == [("remove", Reason.LAYOUT_UNOBSERVED)], str(report)
    check_equivalent(original, rewritten, inputs)


def _export(fn: Callable[..., torch.Tensor], inputs: Callable[[], list[torch.Tensor]]) -> Program:
    class M(torch.nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            return fn(*xs)

    return torch.export.export(M(), tuple(inputs()))


def _rewrite(original: Program) -> tuple[Program, Any]:
    rewritten = copy_program(original)
    return rewritten, eliminate_clones(rewritten, strict=True)


def roll_then_contiguous_clone(x: torch.Tensor) -> torch.Tensor:
    r = torch.roll(x, 1, 0)  # recorded contiguous (fake), channels-last for real
    return r.clone(memory_format=torch.contiguous_format).view(-1)  # recorded: the same layout as r


def roll_then_clone(x: torch.Tensor) -> torch.Tensor:
    return torch.roll(x, 1, 0).clone() * 2  # a preserve_format clone copies the real layout


@pytest.mark.parametrize("tracer", ["make_fx_fake", "export"])
def test_clone_of_a_lying_fake_kernels_result_is_kept(tracer: str) -> None:
    """Equal recorded layouts prove nothing downstream of a fake kernel that lies (C1)."""
    fn = roll_then_contiguous_clone
    original = make_fx(fn, tracing_mode="fake")(*_channels_last()) if tracer != "export" else _export(fn, _channels_last)
    rewritten, report = _rewrite(original)
    d = report.decision("clone")
    assert (d.action, d.reason) == ("keep", Reason.LAYOUT) and "roll" in d.evidence, str(report)
    check_equivalent(original, rewritten, _channels_last)


def test_without_the_suspect_rule_the_clone_of_a_lying_kernels_result_goes_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AliasAnalysis, "lying_source", lambda self, node: None)
    original = make_fx(roll_then_contiguous_clone, tracing_mode="fake")(*_channels_last())
    rewritten, report = _rewrite(original)
    assert report.decision("clone").action == "remove", str(report)
    with pytest.raises(NotEquivalent, match=r"\[raises\]"):
        check_equivalent(original, rewritten, _channels_last)


def test_preserve_format_clone_of_a_lying_kernels_result_still_goes() -> None:
    original = make_fx(roll_then_clone, tracing_mode="fake")(*_channels_last())
    rewritten, report = _rewrite(original)
    assert report.decision("clone").action == "remove", str(report)
    check_equivalent(original, rewritten, _channels_last)


def cat_with_a_rolled_value(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    c = y.clone(memory_format=torch.channels_last)
    return torch.cat([c, torch.roll(x, 1, 0)], 1)  # cat's layout follows both arguments


def _cat_inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, 4, 5, generator=g).contiguous(memory_format=torch.channels_last), torch.randn(2, 3, 4, 5, generator=g)]


def test_a_copying_consumer_with_an_argument_from_a_lying_kernel_observes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cat``'s layout is recomputed with ``roll``'s recorded (contiguous) layout, not its real one."""
    original = make_fx(cat_with_a_rolled_value, tracing_mode="fake")(*_cat_inputs())
    rewritten, report = _rewrite(original)
    d = report.decision("clone")
    assert (d.action, d.reason) == ("keep", Reason.LAYOUT) and "cat" in d.evidence, str(report)
    check_equivalent(original, rewritten, _cat_inputs)
    monkeypatch.setattr(AliasAnalysis, "lying_source", lambda self, node: None)
    rewritten, report = _rewrite(original)
    assert report.decision("clone").action == "remove", str(report)
    with pytest.raises(NotEquivalent, match=r"\[output\] output 0: strides"):
        check_equivalent(original, rewritten, _cat_inputs)


# --------------------------------------------------------------------------- the audit, time-bounded

SLICE = (
    "roll", "add", "mul", "clone", "contiguous", "flip", "cat", "where", "copysign", "nn.functional.hardtanh",
    "nn.functional.pixel_shuffle",
)


@pytest.fixture(scope="module")
def report() -> Any:
    return audit_layouts(SLICE, max_samples=4, seconds=120, sample_timeout=30)


def test_slice_finds_roll_in_channels_last(report: Any) -> None:
    pairs = report.pairs()
    assert ("aten.roll.default", "channels_last") in pairs
    ev = pairs[("aten.roll.default", "channels_last")][0]
    assert ev.kind == "aten" and ev.opinfo == "roll"
    assert ev.eager != ev.meta and ev.inputs and ev.eager == ev.inputs  # eager keeps the input's layout
    assert ("aten.add.Tensor", "channels_last") not in pairs
    assert report.not_run == {} and report.crashes == {}


def test_slice_covers_every_layout_class(report: Any) -> None:
    compared = {layout for (_, layout), n in report.checked.items() if n}
    assert compared == set(LAYOUTS)


def _installed_release_results() -> dict[str, Any]:
    path = results_path(torch_release())
    if not path.exists():
        pytest.fail(
            f"torch {torch.__version__}: no committed layout audit results for release {torch_release()} "
            f"({path.relative_to(ROOT)}); on this release run\n    {REGENERATE}"
        )
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_what_the_slice_finds_is_in_this_releases_committed_results(report: Any) -> None:
    data = _installed_release_results()
    again = f"the installed torch finds what its committed results lack; run\n    {REGENERATE}"
    assert report.divergent_overloads <= set(data["divergent_overloads"]), (again, report.divergent_overloads)
    assert report.fake_divergent_overloads <= set(data["fake_divergent_overloads"]), again
    assert ("aten.roll.default", "channels_last") in {(p["overload"], p["layout"]) for p in data["pairs"]}
    assert report.divergent_overloads <= layout_divergences.LAYOUT_DIVERGENT_OVERLOADS
    assert report.fake_divergent_overloads <= layout_divergences.FAKE_DIVERGENT_OVERLOADS
    assert all(layout_divergences.layout_divergent(o) for o in report.divergent_overloads)


def test_results_without_elements_are_not_divergences(report: Any) -> None:
    """``hardtanh`` of a zero-size strided input: eager keeps the strides, meta does not; nothing can observe it."""
    assert "aten::hardtanh" not in report.divergent_packets
    assert any(d.overload == "aten.hardtanh.default" and d.layout in ("sliced", "expanded") for d in report.hidden)


def test_committed_table_is_what_the_committed_results_render() -> None:
    results = committed_results()
    assert TABLE_PATH.read_text() == render_table(*results.values()), f"regenerate the table: {REGENERATE}"
    assert {r: d["torch_version"] for r, d in results.items()} == layout_divergences.TORCH_VERSIONS
    union = set().union(*(d["divergent_overloads"] for d in results.values()))
    assert union == layout_divergences.LAYOUT_DIVERGENT_OVERLOADS
    fake = set().union(*(d["fake_divergent_overloads"] for d in results.values()))
    assert fake == layout_divergences.FAKE_DIVERGENT_OVERLOADS
    settings = {json.dumps(d["settings"], sort_keys=True) for d in results.values()}
    assert len(settings) == 1, "every release's results come from the same scan configuration"
    for release, data in results.items():
        assert release_of(data) == release
        assert data["settings"]["ops"] is None and data["settings"]["seconds"] is None, "the full scan"
        assert data["settings"]["layouts"] == list(LAYOUTS)
        for p in data["pairs"]:
            ev = p["evidence"][0]
            assert ev["inputs"] is not None and ev["eager"] and ev["meta"] and ev["fake"], p
        md = results_path(release, ".md").read_text()
        assert md == render_markdown(data), f"{results_path(release, '.md').name} is not what its JSON renders"
        assert "`aten.roll.default` | channels_last" in md


def test_every_supported_release_has_committed_layout_results() -> None:
    """The releases with a committed operator classification (``aliasing/core/registry_data``) are the supported ones."""
    supported = {p.stem.removeprefix("torch-") for p in committed_path("2.13").parent.glob("torch-*.tsv")}
    assert supported <= set(committed_results()), f"on each release missing, run {REGENERATE}"
    assert set(layout_divergences.TORCH_VERSIONS) == supported


def _result(version: str, divergent: list[str], fake: list[str], checked: list[str]) -> dict[str, Any]:
    return {
        "torch_version": version,
        "settings": {"max_samples": 24, "layouts": list(LAYOUTS)},
        "summary": {"opinfos_run": 1, "calls_compared": 1, "divergent_calls": len(divergent),
                    "divergent_overloads": len(divergent), "runtime_s": 1.0},
        "divergent_overloads": divergent,
        "fake_divergent_overloads": fake,
        "checked_overloads": sorted({*checked, *divergent}),
    }


def test_the_table_is_the_conservative_union_of_the_releases() -> None:
    old = _result("2.13.0+cpu", ["aten.roll.default"], ["aten.roll.default"], ["aten.div.Tensor", "aten.div.Scalar"])
    new = _result("2.15.0", ["aten.div.Tensor_mode", "aten.roll.default"], [], ["aten.div.Tensor", "aten.roll.other"])
    text = render_table(new, old)
    data = json.loads(text)
    table = ops.LayoutDivergences.of(data)  # what the library makes of the data file
    assert table.versions == {"2.13": "2.13.0+cpu", "2.15": "2.15.0"}
    assert table.divergent == {"aten.roll.default", "aten.div.Tensor_mode"}
    assert table.fake == {"aten.roll.default"}
    # div.Tensor ran and agreed on both; div.Scalar and roll.other ran on one release only: not trusted
    assert table.siblings == {"aten.div.Tensor"}
    assert table.listed("aten.div.Scalar") and not table.listed("aten.div.Tensor")
    assert table.listed("aten.roll.other") and table.listed("aten.roll.other", fake=True)
    assert not table.listed("aten.div.Tensor_mode", fake=True)
    # the releases each overload diverged on, and what each release measured
    assert data["layout_divergent"] == {"aten.div.Tensor_mode": ["2.15"], "aten.roll.default": ["2.13", "2.15"]}
    assert data["fake_divergent"] == {"aten.roll.default": ["2.13"]}
    assert list(data["releases"]) == ["2.13", "2.15"]
    assert data["releases"]["2.15"] == {
        "torch_version": "2.15.0", "results": "benchmarks/results/layout_audit-2.15.json", "max_samples": 24,
        "layouts": list(LAYOUTS), "opinfos_run": 1, "calls_compared": 1, "divergent_calls": 2,
        "divergent_overloads": 2, "runtime_s": 1.0,
    }
    assert data["regenerate"] == REGENERATE
    assert render_table(old, new) == text
    with pytest.raises(LayoutAuditError, match=r"more than one result for torch 2\.13"):
        render_table(old, old)


def test_table_only_renders_the_committed_table(tmp_path: Path) -> None:
    out = tmp_path / "layout-divergences.json"
    assert audit_main(["--layouts", "--table-only", "--write-table", str(out)]) == 0
    assert out.read_text() == TABLE_PATH.read_text()


def test_the_table_is_package_data_the_module_reads() -> None:
    """The data file lies beside the module (in ``registry_data``, whose files the wheel ships)."""
    beside = Path(layout_divergences.__file__).with_name("registry_data") / "layout-divergences.json"
    assert beside == TABLE_PATH
    table = ops.LayoutDivergences.of(json.loads(TABLE_PATH.read_text()))
    assert table == ops.LAYOUT_DIVERGENCES
    assert table.versions == layout_divergences.TORCH_VERSIONS
    assert table.divergent == layout_divergences.LAYOUT_DIVERGENT_OVERLOADS
    assert table.fake == layout_divergences.FAKE_DIVERGENT_OVERLOADS
    assert table.siblings == layout_divergences.AGREEING_SIBLINGS
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["aliasing"]
    shipped = TABLE_PATH.relative_to(ROOT / "aliasing").as_posix()
    assert any(fnmatch.fnmatch(shipped, p) for p in patterns), "the wheel must ship the table (package-data)"


def test_audit_cli_dispatches_to_the_layout_audit(tmp_path: Path) -> None:
    out = tmp_path / "layouts.json"
    assert audit_main(["--layouts", "--ops", "roll", "--max-samples", "4", "--json", str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert "aten.roll.default" in data["divergent_overloads"]
    assert data["settings"]["max_samples"] == 4


def test_bad_requests_are_refused() -> None:
    with pytest.raises(LayoutAuditError, match="no OpInfo"):
        audit_layouts(["no_such_op"])
    with pytest.raises(LayoutAuditError, match="unknown layout"):
        audit_layouts(["roll"], layouts=["diagonal"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_relayout_keeps_sizes_and_values(layout: str) -> None:
    x = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 1, 4)  # rank 4, a dimension of size one
    y = relayout(x, layout, zero_dim=2)
    if y is None:
        pytest.fail(f"{layout} should apply to a rank-4 tensor")
    if layout == "zero_size":
        assert y.shape == (0, 3, 1, 4)
        return
    if layout == "channels_last_3d":  # rank 4 is lifted by a leading dimension of size 2
        assert y.shape == (2, *x.shape) and torch.equal(y[0], x) and torch.equal(y[1], x)
        assert y.is_contiguous(memory_format=torch.channels_last_3d)
        return
    assert y.shape == x.shape
    if layout != "expanded":
        assert torch.equal(y, x)
    assert layout == "contiguous" or y.stride() != x.stride()


# --------------------------------------------------------------------------- a planted lying kernel

_NAMESPACE = "layout_audit_test"


def _register_planted_ops() -> None:
    if hasattr(torch.ops, _NAMESPACE) and hasattr(getattr(torch.ops, _NAMESPACE), "lying_copy"):
        return

    @torch.library.custom_op(f"{_NAMESPACE}::lying_copy", mutates_args=())
    def lying_copy(x: torch.Tensor) -> torch.Tensor:
        return x.clone()  # keeps a dense input's layout (channels-last, transposed...)

    @lying_copy.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)  # always contiguous: a lie

    @torch.library.custom_op(f"{_NAMESPACE}::crash_on_empty", mutates_args=())
    def crash_on_empty(x: torch.Tensor) -> torch.Tensor:
        if x.numel() == 0:
            os.abort()  # a kernel that takes the interpreter down (as _segment_reduce does on zero-size offsets)
        return x.clone()

    @crash_on_empty.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    @torch.library.custom_op(f"{_NAMESPACE}::honest_copy", mutates_args=())
    def honest_copy(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @honest_copy.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)  # preserve_format, as the CPU kernel


def _opinfo(name: str) -> Any:
    from torch.testing._internal.common_dtype import floating_types
    from torch.testing._internal.opinfo.core import OpInfo, SampleInput

    def samples(op: Any, device: str, dtype: torch.dtype, requires_grad: bool, **kwargs: Any) -> Sequence[Any]:
        return [SampleInput(torch.randn(3, 4, 5, dtype=dtype, device=device))]

    return OpInfo(
        f"{_NAMESPACE}.{name}",
        op=getattr(getattr(torch.ops, _NAMESPACE), name),
        dtypes=floating_types(),
        sample_inputs_func=samples,
        supports_out=False,
    )


def test_planted_lying_kernel_is_caught() -> None:
    _register_planted_ops()
    lying, honest = _opinfo("lying_copy"), _opinfo("honest_copy")
    found = audit_layouts([lying.name, honest.name], extra=[lying, honest], max_samples=1)
    overload = f"{_NAMESPACE}.lying_copy.default"
    assert overload in found.divergent_overloads
    assert f"{_NAMESPACE}.lying_copy" in found.divergent_packets
    classes = {layout for (o, layout) in found.pairs() if o == overload}
    assert {"channels_last", "permuted", "transposed"} <= classes
    assert "contiguous" not in classes
    ev = found.pairs()[(overload, "channels_last")][0]
    assert ev.eager == ev.inputs and ev.meta != ev.eager and ev.fake != ev.eager
    assert not any(d.overload.startswith(f"{_NAMESPACE}.honest_copy") for d in found.divergences)
    assert found.checked[(f"{_NAMESPACE}.honest_copy.default", "channels_last")] > 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the audit isolates ops in forked children only where os.fork exists")
def test_a_child_that_never_returns_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked child that hangs (a lock held by another thread at fork time) costs its op, never the audit."""
    from tools import layout_audit

    monkeypatch.setattr(layout_audit, "OP_TIMEOUT", 2.0)
    assert layout_audit._isolated(lambda: time.sleep(60)) == "timed out after 2 s"
    assert layout_audit._isolated(lambda: 41 + 1) == 42


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the audit isolates ops in forked children only where os.fork exists")
def test_an_op_that_crashes_the_process_costs_only_its_layout_class() -> None:
    _register_planted_ops()
    crashing = _opinfo("crash_on_empty")
    found = audit_layouts([crashing.name], extra=[crashing], layouts=["contiguous", "zero_size", "transposed"])
    assert found.crashes == {crashing.name: ["zero_size"]}
    assert any("crashed the process (SIGABRT)" in k for k in found.skips), found.skips
    assert found.checked[(f"{_NAMESPACE}.crash_on_empty.default", "transposed")] > 0
    assert found.divergences == ()
