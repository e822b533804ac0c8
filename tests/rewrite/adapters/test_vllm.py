"""The vLLM adapter inside vLLM's own pass machinery, against vLLM's ``UnsafeCloneEliminationPass`` and eager.

Needs vLLM 0.33.0 (the ``vllm`` extra, which ``.ci/run`` installs without
vLLM's dependencies): the whole module is skipped, with that reason, when vLLM
is not installed, and fails if it is installed but does not import.

- the pass is a vLLM pass: base class, constructor and call signature of
  vLLM's pass, ``uuid()``, timing and debug logging through vLLM's logger,
  :func:`rewrite.vllm.install` into ``PostGradPassManager``;
- vLLM's own test programs of its pass (clone only read, written with the
  original read later or dead, chains, two clones of an input, donated,
  non-donated and mixed inputs, repeated passes, the snapshot of an input
  written later), traced as the post-grad graph is (one fake mode) and as
  vLLM's tests trace them (``make_fx`` in real mode), run under vLLM's pass
  context;
- programs as vLLM IR lowering leaves them (clone + in-place fused
  add+RMSNorm kernel, through ``view(-1, H)``), and the programs where vLLM's
  pass is wrong or raises; every result checked by ``check_equivalent`` on
  real inputs, side by side with vLLM's pass (:mod:`benchmarks.vllm_comparison`);
- the real thing: vLLM's ``VllmIRLoweringPass`` with an in-place CPU provider
  of ``vllm.ir.ops.fused_add_rms_norm``, vLLM's whole ``PostGradPassManager``,
  and ``torch.compile`` with Inductor's C++ backend and vLLM's pre-grad
  donation pass, compared with eager (integration: seconds per compile).
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vLLM is not installed: .ci/run runs these tests in a vLLM user's environment "
        "(pip install vllm==0.33.0, then this project with its vllm and test extras)",
        allow_module_level=True,
    )

import torch
import torch.fx
from torch._inductor.compile_fx import compile_fx
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch.fx.experimental.proxy_tensor import make_fx
from vllm import ir
from vllm.compilation.passes.inductor_pass import InductorPass, get_pass_context, pass_context
from vllm.compilation.passes.ir.clone_elimination import UnsafeCloneEliminationPass
from vllm.compilation.passes.ir.inplace_functionalization import VllmIRInplaceFunctionalizationPass
from vllm.compilation.passes.ir.lowering_pass import VllmIRLoweringPass
from vllm.compilation.passes.pass_manager import PostGradPassManager
from vllm.compilation.passes.vllm_inductor_pass import VllmInductorPass
from vllm.config import DeviceConfig, VllmConfig
from vllm.config.utils import Range
from vllm.ir import ops

from benchmarks.vllm_comparison import EPS, PROGRAMS, VllmProgram, compare, program, run_pass
from rewrite.planning.decisions import Reason
from rewrite.testing import check_equivalent, copy_program
from rewrite.vllm import CloneEliminationPass, donated_positions, install, installed, uninstall

#: Loads vLLM and compiles with its pass manager.
pytestmark = pytest.mark.integration

CLONE = torch.ops.aten.clone.default

#: Clones our pass removes on each program (and keeps: the rest).
OURS_REMOVED = {
    "readonly_clone": 1,
    "written_original_read_after": 0,
    "written_original_dead": 1,
    "clone_chain": 2,
    "two_clones_of_input": 2,
    "no_clones": 0,
    "donated_input_written": 1,
    "input_written_returned": 0,
    "mixed_donated": 1,
    "snapshot_of_mutated_input": 0,
    "ir_fused_add_rms_norm": 1,
    "ir_fused_add_rms_norm_donated": 2,
    "ir_fused_add_rms_norm_2d_donated": 2,
    "ir_two_layers": 3,
    "view_write_original_read": 0,
    "ir_residual_read_after": 1,
    "two_clones_written": 1,
    "out_kwarg_write": 0,
    "two_inplace_writers": 1,
    "two_inplace_writers_original_read": 0,
    "synthetic_3_layers": 12,
}

#: What vLLM 0.33.0's pass does wrong: the failed soundness clause, or "crashed".
VLLM_FAILS = {
    "ir_two_layers": "input-mutation",  # the layer-0 residual clone is not returned: its input is written
    "view_write_original_read": "output",
    "ir_residual_read_after": "output",
    "two_clones_written": "output",
    "out_kwarg_write": "output",
    "two_inplace_writers": "crashed",
    "two_inplace_writers_original_read": "crashed",
}

#: Clones kept in a ``make_fx`` real-mode trace that a fake-mode trace removes: a real-mode trace
#: fakes every input apart at storage offset 0, so its inputs' offsets are unknown, and a
#: returned clone of a donated input stands for an output whose storage offset the input's
#: would replace (C1 layout).
REAL_MODE_LAYOUT_KEPT = {"donated_input_written": 1, "mixed_donated": 1}

SMALL = [p for p in PROGRAMS if p.name in OURS_REMOVED]
VLLM_TESTS = [p for p in PROGRAMS if p.source == "vllm-tests"]


@pytest.fixture(scope="module")
def config() -> VllmConfig:
    return VllmConfig(device_config=DeviceConfig(device="cpu"))


def _clones(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target is CLONE)


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    new = copy_program(gm)
    assert isinstance(new, torch.fx.GraphModule)
    return new


# --------------------------------------------------------------------------- a vLLM pass


def test_is_a_vllm_pass_with_vllms_signature(config: VllmConfig) -> None:
    assert issubclass(CloneEliminationPass, VllmInductorPass)
    assert issubclass(CloneEliminationPass, InductorPass)
    ours = inspect.signature(CloneEliminationPass.__init__).parameters
    theirs = inspect.signature(UnsafeCloneEliminationPass.__init__).parameters
    positional = [n for n, p in ours.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == list(theirs)  # (self, vllm_config); the rest is keyword-only with defaults
    assert all(p.default is not p.empty for n, p in ours.items() if n not in theirs)
    call = inspect.signature(CloneEliminationPass.__call__).parameters
    assert list(call) == list(inspect.signature(UnsafeCloneEliminationPass.__call__).parameters)
    p = CloneEliminationPass(config)
    assert p.pass_name == "CloneEliminationPass"
    assert p.uuid() == CloneEliminationPass(config).uuid()
    assert p.uuid() != CloneEliminationPass(config, lower_functional=True).uuid()
    assert p.uuid() != UnsafeCloneEliminationPass(config).uuid()
    assert p.is_applicable_for_range(Range(1, 8192))


def test_install_makes_the_pass_manager_build_ours(config: VllmConfig) -> None:
    try:
        install()
        install()  # idempotent
        assert installed()
        pm = PostGradPassManager()
        pm.configure(config)
        assert isinstance(pm.clone_elimination, CloneEliminationPass)
    finally:
        uninstall()
    assert not installed()
    pm = PostGradPassManager()
    pm.configure(config)
    assert type(pm.clone_elimination) is UnsafeCloneEliminationPass


def test_off_switch_keeps_vllms_pass(config: VllmConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """``FX_ALIASING_VLLM=0``: install() does nothing in this process, whoever calls it."""
    monkeypatch.setenv("FX_ALIASING_VLLM", "0")
    try:
        install()
        assert not installed()
        assert type(UnsafeCloneEliminationPass(config)) is UnsafeCloneEliminationPass
    finally:
        uninstall()


def test_every_platform_pass_manager_runs_ours(config: VllmConfig) -> None:
    """Managers written as vllm-ascend's (a subclass with its own configure, vLLM's class imported into
    its module) and as one that builds its own pass list: both run this library's pass, and get the
    residual case right where vLLM's pass gets it wrong."""
    from platform_pass_managers import OwnListPassManager, PlatformPostGradPassManager

    inputs = _ir_inputs()
    expected = _eager(_residual_read_after, inputs())
    for name in ("vllm", "ours"):
        try:
            if name == "ours":
                install()
            platform = PlatformPostGradPassManager()
            platform.configure(config)
            managers = {"platform": platform, "own-list": OwnListPassManager(config)}
        finally:
            uninstall()
        kinds = {type(platform.clone_elimination), type(managers["own-list"].passes[-1])}
        assert kinds == {CloneEliminationPass if name == "ours" else UnsafeCloneEliminationPass}
        for manager in managers.values():
            with ops.fused_add_rms_norm.set_priority([PROVIDER, "native"]), pass_context(Range(1, 8192)):
                gm = make_fx(_residual_read_after, tracing_mode="fake")(*inputs())
                manager(gm.graph)
            gm.recompile()
            right = all(torch.allclose(a, b) for a, b in zip(gm(*inputs()), expected))
            assert right == (name == "ours")


def test_uuid_is_stable_across_processes(config: VllmConfig) -> None:
    """The same in a fresh process; changed by an option that changes decisions."""
    import subprocess
    import sys

    probe = (
        "from vllm.config import DeviceConfig, VllmConfig; from rewrite.vllm import CloneEliminationPass; "
        "c = VllmConfig(device_config=DeviceConfig(device='cpu')); "
        "print(CloneEliminationPass(c).uuid(), CloneEliminationPass(c, lower_functional=True).uuid())"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    plain, lowering = done.stdout.split()[-2:]
    assert plain == CloneEliminationPass(config).uuid()
    assert lowering == CloneEliminationPass(config, lower_functional=True).uuid() != plain


def test_donated_ids_are_node_indices_as_in_vllm() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    gm = make_fx(f, tracing_mode="fake")(torch.randn(2), torch.randn(2))
    graph = gm.graph
    first = next(iter(graph.nodes))
    with graph.inserting_after(first):
        graph.call_function(torch.ops.aten.sym_size.int, (first, 0))  # a node between the placeholders
    graph.lint()
    index = {n: i for i, n in enumerate(graph.nodes)}
    y = [n for n in graph.nodes if n.op == "placeholder"][1]
    assert index[y] == 2
    assert donated_positions(graph, {index[y]}) == (1,)
    assert donated_positions(graph, {1}) == ()  # the sym_size node: not an input


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def vllm_debug_logs() -> Iterator[_Records]:
    """DEBUG records of our logger and of vLLM's pass base class (vLLM's ``vllm`` logger does not propagate)."""
    handler = _Records()
    loggers = [logging.getLogger("vllm.rewrite.vllm"), logging.getLogger("vllm.compilation.passes.vllm_inductor_pass")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for lg, level in zip(loggers, levels):
            lg.removeHandler(handler)
            lg.setLevel(level)


def test_logs_decisions_at_debug_then_one_info_line_and_is_timed(config: VllmConfig, vllm_debug_logs: _Records) -> None:
    gm = program("two_clones_written").trace()
    clone = next(n for n in gm.graph.nodes if n.target is CLONE)
    size = clone.meta["val"].numel() * clone.meta["val"].element_size()
    run_pass(CloneEliminationPass(config), gm, ())
    messages = [r.getMessage() for r in vllm_debug_logs.records]
    ours = [r for r in vllm_debug_logs.records if r.name == "vllm.rewrite.vllm"]
    info = [r.getMessage() for r in ours if r.levelno == logging.INFO]
    assert info == [f"CloneEliminationPass removed 1 clone nodes, kept 1, dropped 0 self-copies: {size} bytes of copies removed per call"]
    assert all(r.levelno == logging.DEBUG for r in ours if r.levelno != logging.INFO)
    assert any(m.startswith("Donated input ids: []") for m in messages)
    assert any("is a redundant clone of mul, removing it" in m for m in messages)
    assert any(m.startswith("Clone removal not possible, node=clone_1") for m in messages)
    counts = [i for i, m in enumerate(messages) if m.startswith("CloneEliminationPass removed 1 clone nodes, kept 1")]
    assert counts, messages
    decisions = [i for i, m in enumerate(messages) if "redundant" in m or "not possible" in m]
    assert max(decisions) < counts[0]  # the count comes after the decisions
    assert any(m.startswith("CloneEliminationPass completed in") for m in messages)  # vLLM's timing


def test_never_raises_on_a_graph_without_metadata(config: VllmConfig) -> None:
    graph = torch.fx.Graph()  # ATen ops, no meta['val'] anywhere
    x = graph.placeholder("x")
    c = graph.call_function(CLONE, (x,))
    graph.call_function(torch.ops.aten.add_.Tensor, (c, 1))
    graph.output(graph.call_function(torch.ops.aten.add.Tensor, (c, x)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    original = _copy(gm)
    p = CloneEliminationPass(config)
    run_pass(p, gm, ())
    assert p.last_report is not None
    check_equivalent(original, gm, [torch.randn(3)])
    assert _clones(gm) == 1  # x is the caller's and c is written: the copy stays


# --------------------------------------------------------------------------- named programs, both passes


@pytest.mark.parametrize("prog", SMALL, ids=[p.name for p in SMALL])
def test_program_against_eager_and_vllm(prog: VllmProgram) -> None:
    row = compare(prog, repeats=1)
    ours, theirs = row["ours"], row["vllm"]
    assert (ours["removed"], ours["kept"]) == (OURS_REMOVED[prog.name], row["clones"] - OURS_REMOVED[prog.name])
    assert ours["wrong"] is None and ours["crashed"] is None
    expected_failure = VLLM_FAILS.get(prog.name)
    if expected_failure == "crashed":
        assert theirs["crashed"] is not None and theirs["crashed"].startswith("AssertionError")
    else:
        assert theirs["crashed"] is None
        assert theirs["wrong"] == expected_failure
    if expected_failure is None:  # where vLLM's pass is right, ours removes at least as many
        assert ours["removed"] >= theirs["removed"]


@pytest.mark.parametrize("prog", SMALL, ids=[p.name for p in SMALL])
def test_second_run_changes_nothing(prog: VllmProgram, config: VllmConfig) -> None:
    gm = prog.trace()
    p = CloneEliminationPass(config)
    run_pass(p, gm, prog.donated_inputs)
    code = gm.code
    run_pass(p, gm, prog.donated_inputs)
    assert p.last_report is not None and p.last_report.removed == ()
    assert gm.code == code


@pytest.mark.parametrize("prog", VLLM_TESTS, ids=[p.name for p in VLLM_TESTS])
def test_vllm_test_programs_traced_as_vllm_traces_them(prog: VllmProgram, config: VllmConfig) -> None:
    """``make_fx`` in real mode, as vLLM's tests trace: every value's fake tensor has its own fake mode."""
    assert prog.fn is not None
    gm = make_fx(prog.fn)(*prog.inputs())
    original = _copy(gm)
    before = _clones(gm)
    p = CloneEliminationPass(config)
    run_pass(p, gm, prog.donated_inputs)
    layout_kept = REAL_MODE_LAYOUT_KEPT.get(prog.name, 0)
    assert before - _clones(gm) == OURS_REMOVED[prog.name] - layout_kept
    assert p.last_report is not None
    kept = p.last_report.elimination().decisions
    assert sum(d.action == "keep" and d.reason is Reason.LAYOUT for d in kept) == layout_kept
    check_equivalent(original, gm, prog.inputs, donated_inputs=prog.donated_inputs)


def test_real_mode_graphs_report_no_error(config: VllmConfig) -> None:
    """Per-value fake modes leave nothing to recompute metadata with; the pipeline still finishes cleanly."""
    prog = program("clone_chain")
    assert prog.fn is not None
    gm = make_fx(prog.fn)(*prog.inputs())
    p = CloneEliminationPass(config)
    run_pass(p, gm, ())
    assert p.last_report is not None and p.last_report.error is None


# --------------------------------------------------------------------------- vLLM IR lowering, for real


def _supports(
    x: torch.Tensor, x_residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    return weight is not None and variance_size is None


def _fxa_cpu_fused_add_rms_norm(
    x: torch.Tensor, x_residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """An in-place provider shaped like vLLM's ``vllm_c`` one: the kernel on ``view(-1, H)``, returning the activations."""
    assert weight is not None
    hidden = x.shape[-1]
    torch.ops.fxa_vllm.fused_add_rms_norm(x.view(-1, hidden), x_residual.view(-1, hidden), weight, epsilon)
    return x, x_residual


PROVIDER = "fxa_cpu"
if PROVIDER not in ops.fused_add_rms_norm.impls:
    ops.fused_add_rms_norm.register_impl(PROVIDER, supports_args=_supports, inplace=True)(_fxa_cpu_fused_add_rms_norm)

# FixFunctionalizationPass (the pass manager's last pass) names torch.ops._C.rotary_embedding, which vLLM's
# compiled kernels define; their library does not load on a CPU-only machine, so define the schema alone.
_C_LIB: torch.library.Library | None = None
if not hasattr(torch.ops._C, "rotary_embedding"):
    _C_LIB = torch.library.Library("_C", "FRAGMENT")
    _C_LIB.define(
        "rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
        "Tensor cos_sin_cache, bool is_neox) -> ()"
    )


def _residual_read_after(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = x.relu()
    r = residual * 2
    out, res = ops.fused_add_rms_norm(h, r, weight, EPS)  # functional vLLM IR op
    return out, res, r + 1  # r's old value is read after: the lowering's clone of r is needed


def _two_layers(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    out, res = ops.fused_add_rms_norm(x.relu(), residual, weight, EPS)
    return ops.fused_add_rms_norm(out @ w, res, weight, EPS)


def _maybe_inplace(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    out, res = ops.fused_add_rms_norm.maybe_inplace(x, residual, weight, EPS)  # donates x and residual
    return out * 2, res


def _ir_inputs(*extra: tuple[int, ...]) -> Callable[[], list[torch.Tensor]]:
    def make() -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(0)
        return [torch.randn(s, generator=gen) for s in ((2, 3, 8), (2, 3, 8), (8,), *extra)]

    return make


def _eager(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> Any:
    with ops.fused_add_rms_norm.set_priority(["native"]):
        return fn(*inputs)


@pytest.mark.parametrize(
    ("fn", "inputs", "ours_removed", "vllm_wrong"),
    [
        (_residual_read_after, _ir_inputs(), 1, "output"),
        (_two_layers, _ir_inputs((8, 8)), 3, "input-mutation"),
    ],
    ids=["residual_read_after", "two_layers"],
)
def test_vllm_ir_lowering_then_clone_elimination(
    fn: Callable[..., Any], inputs: Callable[[], list[torch.Tensor]], ours_removed: int, vllm_wrong: str, config: VllmConfig
) -> None:
    """vLLM's own VllmIRLoweringPass lowers the functional op to clones + the in-place kernel; then each pass."""
    unlowered = make_fx(fn, tracing_mode="fake")(*inputs())
    results = {}
    for name, make in (("ours", CloneEliminationPass), ("vllm", UnsafeCloneEliminationPass)):
        gm = _copy(unlowered)
        with ops.fused_add_rms_norm.set_priority([PROVIDER, "native"]), pass_context(Range(1, 8192)):
            lowering = VllmIRLoweringPass(config)
            lowering(gm.graph)
            assert set(lowering.selected_impls["fused_add_rms_norm"].values()) == {PROVIDER}
            lowered = _clones(gm)
            make(config)(gm.graph)
            gm.recompile()
        try:
            check_equivalent(unlowered, gm, inputs)
            results[name] = (lowered - _clones(gm), None)
        except AssertionError as e:
            results[name] = (lowered - _clones(gm), getattr(e, "clause", "?"))
    assert results["ours"] == (ours_removed, None)
    assert results["vllm"][1] == vllm_wrong


def test_whole_post_grad_pass_manager(config: VllmConfig) -> None:
    """vLLM's PostGradPassManager, configured from a VllmConfig, with our pass in place of the unsafe one."""
    inputs = _ir_inputs()
    expected = _eager(_residual_read_after, inputs())
    outcomes = {}
    for name in ("vllm", "ours"):
        pm = PostGradPassManager()
        pm.configure(config)
        if name == "ours":
            pm.clone_elimination = CloneEliminationPass(config)
        with ops.fused_add_rms_norm.set_priority([PROVIDER, "native"]), pass_context(Range(1, 8192)):
            gm = make_fx(_residual_read_after, tracing_mode="fake")(*inputs())
            pm(gm.graph)
            uuid = pm.uuid()
        gm.recompile()
        got = gm(*inputs())
        outcomes[name] = (all(torch.allclose(a, b) for a, b in zip(got, expected)), _clones(gm), uuid)
    assert outcomes["ours"][:2] == (True, 1)  # right, with the residual's clone kept
    assert outcomes["vllm"][:2] == (False, 0)  # vLLM's pass removed it: the old residual is overwritten
    assert outcomes["ours"][2] != outcomes["vllm"][2]  # the pass manager's cache key changes with the pass


class _Recording(CustomGraphPass):
    """Runs a pass manager and counts the clones it leaves (Inductor's post-grad hook)."""

    def __init__(self, pm: PostGradPassManager) -> None:
        self.pm = pm
        self.clones: int | None = None

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.pm(graph)
        self.clones = sum(1 for n in graph.nodes if n.op == "call_function" and n.target is CLONE)

    def uuid(self) -> Any:
        return self.pm.uuid()


@pytest.mark.parametrize(
    ("fn", "inputs", "stock_right", "ours_clones", "stock_clones"),
    [
        (_residual_read_after, _ir_inputs(), False, 1, 0),
        (_maybe_inplace, _ir_inputs(), True, 0, 1),
    ],
    ids=["residual_read_after", "maybe_inplace_donated"],
)
def test_torch_compile_with_vllm_passes(
    fn: Callable[..., Any],
    inputs: Callable[[], list[torch.Tensor]],
    stock_right: bool,
    ours_clones: int,
    stock_clones: int,
    config: VllmConfig,
) -> None:
    """torch.compile + Inductor (C++), vLLM's pre-grad donation pass and post-grad pass manager, against eager.

    ``maybe_inplace`` donates its activations: vLLM's pre-grad pass records them in the pass context, and
    our pass reads them there and removes both copies; vLLM's pass misses the write to the returned residual
    through ``view(-1, H)`` and keeps its copy.
    """
    expected = _eager(fn, inputs())
    results = {}
    for name in ("stock", "ours"):
        torch._dynamo.reset()
        pm = PostGradPassManager()
        pm.configure(config)
        if name == "ours":
            pm.clone_elimination = CloneEliminationPass(config)
        recording = _Recording(pm)
        patches = {
            "post_grad_custom_post_pass": recording,
            "pre_grad_custom_pass": VllmIRInplaceFunctionalizationPass(config),
            "force_disable_caches": True,
        }

        def backend(gm: torch.fx.GraphModule, example_inputs: Any, patches: dict[str, Any] = patches) -> Any:
            return compile_fx(gm, example_inputs, config_patches=patches)

        with (
            ops.fused_add_rms_norm.set_priority([PROVIDER, "native"]),
            ir.enable_torch_wrap(True),
            pass_context(Range(1, 8192)),
        ):
            got = torch.compile(fn, backend=backend, fullgraph=True)(*inputs())
            donated = set(get_pass_context().donated_input_ids)
        right = all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got, expected))
        results[name] = (right, recording.clones, donated)
    torch._dynamo.reset()
    assert results["ours"][:2] == (True, ours_clones)
    assert results["stock"][:2] == (stock_right, stock_clones)
    if fn is _maybe_inplace:
        assert results["ours"][2] == {0, 1}


_PLUGIN_PROBE = """
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.compilation.passes.pass_manager import PostGradPassManager
from vllm.config import DeviceConfig, VllmConfig
from platform_pass_managers import PlatformPostGradPassManager
config = VllmConfig(device_config=DeviceConfig(device="cpu"))
kinds = set()
for manager in (PostGradPassManager(), PlatformPostGradPassManager()):
    manager.configure(config)
    kinds.add(type(manager.clone_elimination).__module__ + "." + type(manager.clone_elimination).__name__)
print(*sorted(kinds))
"""


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"FX_ALIASING_VLLM": "1"}, "rewrite.vllm.CloneEliminationPass"),
        ({"FX_ALIASING_VLLM": "1", "VLLM_PLUGINS": "fx_aliasing"}, "rewrite.vllm.CloneEliminationPass"),
        ({}, "vllm.compilation.passes.ir.clone_elimination.UnsafeCloneEliminationPass"),
        ({"FX_ALIASING_VLLM": "0"}, "vllm.compilation.passes.ir.clone_elimination.UnsafeCloneEliminationPass"),
        ({"FX_ALIASING_VLLM": "1", "VLLM_PLUGINS": "other"}, "vllm.compilation.passes.ir.clone_elimination.UnsafeCloneEliminationPass"),
    ],
    ids=["enabled", "enabled-allow-listed", "unset", "disabled", "not-allow-listed"],
)
def test_general_plugin_through_vllms_plugin_loader(env: dict[str, str], expected: str) -> None:
    """The package's ``vllm.general_plugins`` entry point, loaded by vLLM's own loader in a fresh process:
    vLLM's pass manager and a platform's (written as vllm-ascend's) build the same pass."""
    import os
    import subprocess
    import sys
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "fx_aliasing"]
    assert ep.value == "rewrite.vllm:plugin"
    clean = {k: v for k, v in os.environ.items() if k not in ("FX_ALIASING_VLLM", "VLLM_PLUGINS")}
    here = os.path.dirname(__file__)
    env = {**clean, **env, "PYTHONPATH": os.pathsep.join([here, clean.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _PLUGIN_PROBE], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected


def test_importing_the_adapter_prints_nothing() -> None:
    # vLLM's first import of vllm.config makes torch log three deprecation warnings meant for
    # vLLM's developers; importing rewrite.vllm (what first imports vllm.config here) drops them.
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", "import rewrite.vllm"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and result.stdout == ""
