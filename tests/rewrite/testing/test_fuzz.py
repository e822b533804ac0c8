"""Property-based tests over random programs, and tests of the program generator itself.

Properties, each over programs drawn by ``rewrite.testing.programs``
(the number of examples follows the Hypothesis profile, ``ci`` by default):

1. the analysis never claims "no alias", "no overlap" or "no writer" where a
   real run shows otherwise (``check_analysis``);
2. ``eliminate_clones`` preserves semantics (``check_pass``) and a second run
   removes nothing;
3. ``eliminate_clones`` never raises, nor fails internally, on a drawn program.

The generator: ``source()`` is a standalone script that re-traces to the same
graph (also in a fresh interpreter), the graph computes what the Python
function computes, inputs are fresh and deterministic, every construct the
issue lists shows up with reasonable frequency, and options are validated.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch.fx.experimental.proxy_tensor import make_fx

import aliasing
import rewrite
from rewrite.errors import NotEquivalent, RewriteError
from rewrite.testing import (
    Program,
    check_analysis,
    check_equivalent,
    check_pass,
    copy_program,
    programs,
)
from rewrite.testing.programs import CI_SETTINGS, SOAK_SETTINGS, register_profiles, sample_programs

# Per-test settings only lift what a traced draw needs; example counts follow the profile.
fuzz = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def draw_many(strategy: st.SearchStrategy[Program], n: int) -> list[Program]:
    """``n`` programs drawn deterministically (no shrinking, no database)."""
    drawn: list[Program] = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(program: Program) -> None:
        drawn.append(program)

    collect()
    return drawn


@pytest.fixture(scope="module")
def sample() -> list[Program]:
    """A fixed batch of default programs, shared by the generator tests."""
    return draw_many(programs(), 300)


def call_targets(gm: torch.fx.GraphModule) -> Counter[str]:
    return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.storage_offset() == b.storage_offset()
        and torch.equal(a, b)
    )


# --------------------------------------------------------------------------- #
# Properties 1-3
# --------------------------------------------------------------------------- #


@fuzz
@given(programs())
def test_analysis_never_misses_an_alias_overlap_or_writer(program: Program) -> None:
    gm = program.graph_module
    analysis = aliasing.analyze(gm, donated_inputs=program.donated_inputs)
    check_analysis(analysis, gm, program.make_inputs())


@fuzz
@given(programs())
def test_eliminate_clones_preserves_semantics_and_is_idempotent(program: Program) -> None:
    reports: list[rewrite.CloneEliminationReport] = []

    def run(gm: torch.fx.GraphModule) -> None:
        reports.append(rewrite.eliminate_clones(gm, donated_inputs=program.donated_inputs, strict=True))

    rewritten = check_pass(run, program)
    (report,) = reports
    remaining = {n.name for n in rewritten.graph.nodes if rewrite.is_clone_candidate(n)}
    assert not remaining & set(report.removed)
    assert remaining == set(report.kept)
    second = rewrite.eliminate_clones(copy_program(rewritten), donated_inputs=program.donated_inputs, strict=True)
    assert second.removed == (), f"a second run removed {second.removed}:\n{second}\n\n{program.source()}"


@fuzz
@given(programs())
def test_eliminate_clones_never_raises(program: Program) -> None:
    gm = copy_program(program.graph_module)
    assert isinstance(gm, torch.fx.GraphModule)
    report = rewrite.eliminate_clones(gm, donated_inputs=program.donated_inputs)
    assert report.error is None, f"internal failure: {report.error}\n\n{program.source()}"
    gm.graph.lint()


# --------------------------------------------------------------------------- #
# The generator
# --------------------------------------------------------------------------- #


@settings(fuzz, max_examples=25)
@given(programs())
def test_source_runs_and_retraces_to_the_same_graph(program: Program) -> None:
    namespace: dict[str, object] = {"__name__": "fxa_fuzz_repro"}
    exec(compile(program.source(), "<repro>", "exec"), namespace)
    gm = namespace["gm"]
    assert isinstance(gm, torch.fx.GraphModule)
    assert call_targets(gm) == call_targets(program.graph_module)
    assert gm.code == program.graph_module.code
    assert namespace["DONATED_INPUTS"] == program.donated_inputs


@pytest.mark.integration
def test_source_is_standalone_in_a_fresh_interpreter(sample: list[Program]) -> None:
    program = next(
        p for p in sample if "fxa_fuzz.first_half" in p.function_source and "fxa_fuzz.mutate_two" in p.function_source
    )
    script = program.source() + "\nprint(gm.code)\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "fxa_fuzz.mutate_two.default" in done.stdout
    assert "fxa_fuzz.first_half.default" in done.stdout
    assert done.stdout.strip() == program.graph_module.code.strip()


@settings(fuzz, max_examples=25)
@given(programs())
def test_graph_computes_what_the_function_computes(program: Program) -> None:
    eager_inputs = program.make_inputs()
    graph_inputs = program.make_inputs()
    namespace: dict[str, object] = {"torch": torch}
    exec(program.function_source, namespace)
    eager = namespace["program"](*eager_inputs)  # type: ignore[operator]
    traced = program.graph_module(*graph_inputs)
    assert len(eager) == len(traced)
    for a, b in zip(eager, traced):
        assert same_tensor(a, b)
    for a, b in zip(eager_inputs, graph_inputs):  # in-place writes to inputs happen in both
        assert same_tensor(a, b)


def test_make_inputs_is_fresh_deterministic_and_unshared(sample: list[Program]) -> None:
    for program in sample[:40]:
        first, second = program.make_inputs(), program.make_inputs()
        assert len(first) == len(program.graph_module.graph.find_nodes(op="placeholder"))
        for a, b in zip(first, second):
            assert same_tensor(a, b)
            assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
        storages = [x.untyped_storage().data_ptr() for x in first]
        assert len(set(storages)) == len(storages)


def test_placeholders_carry_fake_tensors_with_the_input_layout(sample: list[Program]) -> None:
    for program in sample[:40]:
        placeholders = program.graph_module.graph.find_nodes(op="placeholder")
        for node, real in zip(placeholders, program.make_inputs()):
            fake = node.meta["val"]
            assert isinstance(fake, torch._subclasses.fake_tensor.FakeTensor)
            assert (fake.shape, fake.stride(), fake.storage_offset()) == (
                real.shape,
                real.stride(),
                real.storage_offset(),
            )


#: Regular expressions over ``function_source`` for every construct the generator promises to draw.
CONSTRUCTS: dict[str, str] = {
    "view": r"\.view\(",
    "reshape": r"\.reshape\(",
    "slice": r"\[[^\]]*\d:\d",
    "select": r"\.select\(|\[(:, )*\d+\]",
    "narrow": r"\.narrow\(",
    "split": r"\.split\(",
    "unbind": r"\.unbind\(",
    "chunk": r"torch\.chunk\(",
    "transpose": r"\.transpose\(",
    "permute": r"\.permute\(",
    "t": r"\.t\(\)",
    "expand": r"\.expand\(",
    "unsqueeze": r"\.unsqueeze\(",
    "diagonal": r"\.diagonal\(",
    "as_strided": r"\.as_strided\(",
    "add_": r"\.add_\(",
    "mul_": r"\.mul_\(",
    "copy_": r"\.copy_\(",
    "zero_": r"\.zero_\(\)",
    "index_put_": r"\.index_put_\(",
    "masked_fill_": r"\.masked_fill_\(",
    "out=": r"out=v|out=x",
    "custom op writing two arguments": r"fxa_fuzz\.mutate_two\(",
    "custom op returning a view": r"fxa_fuzz\.first_half\(",
    "clone": r"\.clone\(\)|torch\.clone\(",
    "clone(memory_format=contiguous_format)": r"memory_format=torch\.contiguous_format",
    "clone(memory_format=preserve_format)": r"memory_format=torch\.preserve_format",
    "clone(memory_format=channels_last)": r"memory_format=torch\.channels_last",
    "no-op _to_copy": r"\.to\(torch\.float32, copy=True\)",
    "pointwise": r" = v\d+ \+ |torch\.sin\(|torch\.relu\(|\.neg\(\)",
    "chained in-place result": r"v\d+ = v\d+\.\w+_\(",
    # ops with hidden effects (aliasing.core.ops.HIDDEN_EFFECTS), train mode and the eval-mode control
    "batch_norm, train mode": r"functional\.batch_norm\([^\n]*training=True",
    "batch_norm, eval mode": r"functional\.batch_norm\([^\n]*training=False",
    "instance_norm, train mode": r"functional\.instance_norm\([^\n]*use_input_stats=True",
    "instance_norm, eval mode": r"functional\.instance_norm\([^\n]*use_input_stats=False",
    "native_batch_norm, train mode": r"aten\.native_batch_norm\([^\n]*, True, 0\.\d, 1e-05\)",
    "native_batch_norm, eval mode": r"aten\.native_batch_norm\([^\n]*, False, 0\.\d, 1e-05\)",
    "norm with weight and bias": r"functional\.\w+_norm\(v\d+, \w+, [\w.()]+, (v|x)\d+, (v|x)\d+,",
    "_unsafe_view": r"aten\._unsafe_view\(",
    # what a precise pass must see through
    "contiguous()": r"\.contiguous\(\)",
    "fill_": r"\.fill_\(",
}

#: The precision patterns around a clone ``C = O.clone()``: regular expressions with ``{c}``/``{o}``
#: standing for the clone's and the original's names, matched after the clone's line.
PRECISION_PATTERNS: dict[str, str] = {
    "same-element in-place op": r"{c}\.(mul|add)_\({o}\)|{o}\.add_\({c}\)",
    "elementwise out= between clone and original": r"torch\.\w+\({o}, [^\n]*out={c}\)|torch\.\w+\({c}, [^\n]*out={o}\)",
    "copy_ between clone and original": r"{c}\.copy_\({o}\)|{o}\.copy_\({c}\)",
    "full overwrite of one side": r"({c}|{o})\.(zero_\(\)|fill_\(|copy_\()",
    "dead read of the clone": r"= {c}\.(sum|amax)\(\)",
    "dead indexing write of the original": r"{c}\.mul_\(2\.0\)\n.*= {c}\.neg\(\)\n\s*{o}\.index_put_\(",
    "layout clone read through a view or in-place result": r"= ({c}\.unsqueeze\(0\)|{c}\.view\(-1\)) \* 2\.0|= {c}\.mul_\(2\.0\)",
}


def test_programs_draw_every_construct(sample: list[Program]) -> None:
    sources = [p.function_source for p in sample]
    missing = [name for name, pattern in CONSTRUCTS.items() if not any(re.search(pattern, s) for s in sources)]
    assert not missing, f"never drawn in {len(sample)} programs: {missing}"
    layouts = " ".join(p.inputs_source for p in sample)
    for marker in ("transpose(-2, -1)", "[..., ::2]", ")[1:]"):
        assert marker in layouts, f"no input built with {marker}"
    assert any(p.donated_inputs for p in sample) and any(not p.donated_inputs for p in sample)


def _clone_pairs(source: str) -> list[tuple[str, str, str, str]]:
    """(clone, original, how, the source after the clone's line) for every ``C = O.clone()`` line."""
    pattern = r"^    (v\d+) = (\w+)\.(clone\(\)|contiguous\(\)|clone\(memory_format[^)]*\))$"
    return [(m.group(1), m.group(2), m.group(3), source[m.end() :]) for m in re.finditer(pattern, source, re.M)]


@pytest.mark.slow
def test_programs_draw_the_precision_patterns() -> None:
    """The generator is biased toward the patterns a precise pass must see through
    (on seeded random draws: the derandomized ``sample`` favours a few of the patterns)."""
    sample = sample_programs(600, seed=13)
    found = dict.fromkeys(PRECISION_PATTERNS, 0)
    unused_layout = elementwise_layout = 0
    for program in sample:
        for clone, original, how, rest in _clone_pairs(program.function_source):
            for name, pattern in PRECISION_PATTERNS.items():
                if re.search(pattern.format(c=rf"\b{clone}\b", o=rf"\b{original}\b"), rest):
                    found[name] += 1
            if "contiguous" not in how:
                continue
            if not re.search(rf"\b{clone}\b", rest):
                unused_layout += 1  # an unused layout-changing clone
            elif re.search(rf"torch\.sin\({clone}\)|= {clone}( \* 2\.0| \+ 1\.0|\.neg\(\))", rest):
                elementwise_layout += 1  # read by an elementwise op
    missing = [name for name, count in found.items() if count == 0]
    assert not missing, f"never drawn in {len(sample)} programs: {missing}"
    assert unused_layout > 0 and elementwise_layout > 0, (unused_layout, elementwise_layout)


def _returns(program: Program) -> list[torch.fx.Node]:
    out = program.graph_module.graph.output_node().args[0]
    return [n for n in out if isinstance(n, torch.fx.Node)]  # type: ignore[union-attr]


def _is_view(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    if node.target is __import__("operator").getitem:
        return True
    return bool(schema and schema.returns and schema.returns[0].alias_info and not schema.returns[0].alias_info.is_write)


def _train_norms(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """``native_batch_norm`` nodes in train mode: they write their running statistics (args 3 and 4)."""
    return [
        n
        for n in gm.graph.nodes
        if n.target is torch.ops.aten.native_batch_norm.default and n.args[5] is True
    ]


def _stat_clone_read_after_train_norm(gm: torch.fx.GraphModule) -> bool:
    """Whether a clone or its original is a running statistic of a later train-mode norm, and is read after it."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for norm in _train_norms(gm):
        stats = {a for a in norm.args[3:5] if isinstance(a, torch.fx.Node)}
        for clone in gm.graph.nodes:
            if order[clone] >= order[norm] or not rewrite.is_clone_candidate(clone):
                continue
            pair = {clone, clone.args[0]}
            if pair & stats and any(order[u] > order[norm] for side in pair for u in side.users):
                return True
    return False


def test_programs_have_aliasing_with_reasonable_frequency(sample: list[Program]) -> None:
    n = len(sample)
    inplace = sum(any(t.endswith(("_.default", "_.Tensor", "_.Scalar")) or ".out" in t or "mutate_two" in t
                      for t in call_targets(p.graph_module)) for p in sample)
    views = sum(any(_is_view(node) for node in p.graph_module.graph.nodes if node.op == "call_function")
                for p in sample)
    clones = sum(any(rewrite.is_clone_candidate(node) for node in p.graph_module.graph.nodes) for p in sample)
    view_outputs = sum(any(_is_view(node) for node in _returns(p)) for p in sample)
    repeated = sum(len(_returns(p)) != len(set(_returns(p))) for p in sample)
    dead = sum(any(not node.users for node in p.graph_module.graph.nodes
                   if node.op == "call_function" and rewrite.is_clone_candidate(node)) for p in sample)
    assert clones >= 0.7 * n, f"{clones}/{n} programs with a clone"
    assert inplace >= 0.5 * n, f"{inplace}/{n} programs with an in-place op"
    assert views >= 0.3 * n, f"{views}/{n} programs with a view"
    assert view_outputs >= 0.05 * n, f"{view_outputs}/{n} programs returning a view"
    assert repeated >= 0.03 * n, f"{repeated}/{n} programs returning a value twice"
    assert dead >= 0.05 * n, f"{dead}/{n} programs with a dead clone"
    # Hidden writes: train-mode norms whose running statistics meet clones, read after the norm.
    norms = sum(bool(_train_norms(p.graph_module)) for p in sample)
    instance = sum("instance_norm(" in p.function_source for p in sample)
    stat_clones = sum(_stat_clone_read_after_train_norm(p.graph_module) for p in sample)
    assert norms >= 0.05 * n, f"{norms}/{n} programs with a train-mode native_batch_norm"
    assert instance >= 0.02 * n, f"{instance}/{n} programs with an instance_norm"
    assert stat_clones >= 0.02 * n, f"{stat_clones}/{n} programs reading a statistic's clone pair after a norm"


def test_options_bound_and_restrict_programs() -> None:
    drawn = draw_many(programs(max_ops=3, max_inputs=1, max_size=2, allow_custom_ops=False, allow_donation=False), 40)
    assert drawn
    for program in drawn:
        assert program.num_ops <= 3
        assert "fxa_fuzz" not in program.function_source and not program.uses_custom_ops
        assert program.donated_inputs == ()
        (x,) = program.make_inputs()
        assert all(1 <= s <= 2 for s in x.shape)
    assert all(p.num_ops >= 2 for p in draw_many(programs(min_ops=2, max_ops=2), 20))
    plain = draw_many(programs(allow_hidden_effects=False), 60)
    assert not any(re.search(r"_norm\(|_unsafe_view\(", p.function_source) for p in plain)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_ops": -1},
        {"min_ops": 5, "max_ops": 2},
        {"max_ops": 1.5},
        {"max_inputs": 0},
        {"max_outputs": 0},
        {"max_size": 0},
        {"max_size": True},
        {"alias_bias": 1.5},
        {"alias_bias": "high"},
        {"allow_custom_ops": 1},
        {"allow_donation": None},
        {"allow_hidden_effects": "yes"},
    ],
)
def test_invalid_arguments_raise_invalid_argument(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        programs(**kwargs)  # type: ignore[arg-type]


def test_program_is_read_only_and_has_a_readable_repr(sample: list[Program]) -> None:
    program = sample[-1]
    with pytest.raises(AttributeError):
        program.donated_inputs = (0,)  # type: ignore[misc]
    text = repr(program)
    assert text.startswith("Program(seed=")
    assert "def program(" in text and "def make_inputs():" in text


# --------------------------------------------------------------------------- #
# check_pass
# --------------------------------------------------------------------------- #


def drop_every_clone(gm: torch.fx.GraphModule) -> None:
    """An unsound pass: every clone becomes its argument."""
    for node in list(gm.graph.nodes):
        if rewrite.is_clone_candidate(node):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    gm.recompile()


def _fails(pass_fn: Callable[[torch.fx.GraphModule], object]) -> Callable[[Program], bool]:
    def predicate(program: Program) -> bool:
        try:
            check_pass(pass_fn, program)
        except NotEquivalent:
            return True
        return False

    return predicate


def test_check_pass_catches_an_unsound_pass_and_appends_the_repro() -> None:
    program = find(
        programs(),
        _fails(drop_every_clone),
        settings=settings(database=None, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)),
    )
    before = program.graph_module.code
    with pytest.raises(NotEquivalent) as info:
        check_pass(drop_every_clone, program)
    assert info.value.clause in {"output", "input-mutation", "new-aliasing", "raises"}
    message = str(info.value)
    assert program.source() in message and "rewritten graph:" in message
    assert program.graph_module.code == before  # the pass ran on a copy


def test_check_pass_accepts_in_place_and_returning_passes(sample: list[Program]) -> None:
    program = sample[10]
    same = check_pass(lambda gm: None, program)
    assert same is not program.graph_module and same.code == program.graph_module.code
    fresh = torch.fx.GraphModule(torch.nn.Module(), copy_program(program.graph_module).graph)
    assert check_pass(lambda gm: fresh, program) is fresh
    report_returning = check_pass(lambda gm: rewrite.eliminate_clones(gm, donated_inputs=program.donated_inputs), program)
    assert isinstance(report_returning, torch.fx.GraphModule)


def test_check_pass_strict_rejects_a_malformed_graph(sample: list[Program]) -> None:
    program = next(p for p in sample if any(n.op == "call_function" for n in p.graph_module.graph.nodes))

    def misorder(gm: torch.fx.GraphModule) -> None:
        first = next(n for n in gm.graph.nodes if n.op == "call_function")
        gm.graph.output_node().append(first)  # a node after the output: lint fails

    with pytest.raises(RewriteError, match="lint"):
        check_pass(misorder, program)


# --------------------------------------------------------------------------- #
# Hidden effects: clones of running statistics around normalisation layers
# --------------------------------------------------------------------------- #

NormFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]

#: Norms with running statistics: in train mode each writes them in place, a write no schema declares.
NORMS: dict[str, NormFn] = {
    "batch_norm": lambda x, m, v, t: torch.nn.functional.batch_norm(x, m, v, training=t, momentum=0.1),
    "instance_norm": lambda x, m, v, t: torch.nn.functional.instance_norm(x, m, v, use_input_stats=t, momentum=0.1),
    "native_batch_norm": lambda x, m, v, t: torch.ops.aten.native_batch_norm(x, None, None, m, v, t, 0.1, 1e-5)[0],
}


def stat_clone_program(
    norm: str, stat: str, source: str, norm_gets: str, training: bool
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``c = s.clone()``; a norm gets ``s`` or ``c`` as running statistic ``stat``; the other side is read after.

    ``source``: the statistics are the inputs, rows of the inputs, or intermediates.
    """
    index = 0 if stat == "running_mean" else 1

    def program(x: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        stats = {"input": [m, v], "view": [m[0], v[0]], "intermediate": [m + 0.5, v * 2.0]}[source]
        clone = stats[index].clone()
        passed = list(stats)
        if norm_gets == "clone":
            passed[index], later = clone, stats[index]
        else:
            later = clone
        y = NORMS[norm](x, passed[0], passed[1], training)
        return y, later * 2

    return program


def stat_inputs(source: str, n: int, c: int, length: int) -> Callable[[], list[torch.Tensor]]:
    def make() -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(n * 100 + c * 10 + length)
        rows = (2, c) if source == "view" else (c,)
        x = torch.randn(n, c, length, generator=g)
        return [x, torch.randn(*rows, generator=g), torch.rand(*rows, generator=g) + 0.5]

    return make


def check_stat_clone(
    norm: str, stat: str, source: str, norm_gets: str, training: bool, shape: tuple[int, int, int]
) -> None:
    """The clone is kept exactly in train mode (removed in eval mode), and the rewrite is equivalent."""
    make_inputs = stat_inputs(source, *shape)
    gm = make_fx(stat_clone_program(norm, stat, source, norm_gets, training), tracing_mode="fake")(*make_inputs())
    (clone,) = [n.name for n in gm.graph.nodes if rewrite.is_clone_candidate(n)]
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = rewrite.eliminate_clones(rewritten, strict=True)
    check_equivalent(gm, rewritten, make_inputs)
    dropped = copy_program(gm)
    assert isinstance(dropped, torch.fx.GraphModule)
    drop_every_clone(dropped)
    if training:  # the hidden write makes the clone necessary: dropping it changes the program
        assert report.kept == (clone,), f"{report}\n{gm.code}"
        assert report.decision(clone).reason.condition, report
        with pytest.raises(NotEquivalent):
            check_equivalent(gm, dropped, make_inputs)
    else:  # the eval-mode control: the statistics are only read, the clone is not needed
        assert report.removed == (clone,), f"{report}\n{gm.code}"
        check_equivalent(gm, dropped, make_inputs)


def test_clone_of_running_mean_read_after_train_mode_batch_norm_is_kept() -> None:
    def program(x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor) -> tuple[torch.Tensor, ...]:
        before = running_mean.clone()  # the statistics before the norm updates them in place
        y = torch.nn.functional.batch_norm(x, running_mean, running_var, training=True, momentum=0.1)
        return y, before * 2

    make_inputs = stat_inputs("input", 4, 3, 2)
    gm = make_fx(program, tracing_mode="fake")(*make_inputs())
    rewritten = copy_program(gm)
    assert isinstance(rewritten, torch.fx.GraphModule)
    report = rewrite.eliminate_clones(rewritten, strict=True)
    assert report.kept == ("clone",) and report.decision("clone").reason.condition == "C2", report
    check_equivalent(gm, rewritten, make_inputs)
    check_stat_clone("batch_norm", "running_mean", "input", "original", False, (4, 3, 2))  # eval: removed


@settings(fuzz, max_examples=40)
@given(
    norm=st.sampled_from(sorted(NORMS)),
    stat=st.sampled_from(["running_mean", "running_var"]),
    source=st.sampled_from(["input", "view", "intermediate"]),
    norm_gets=st.sampled_from(["original", "clone"]),
    training=st.booleans(),
    shape=st.tuples(st.integers(2, 4), st.integers(1, 5), st.integers(2, 3)),
)
def test_clone_of_running_statistic_is_kept_exactly_in_train_mode(
    norm: str, stat: str, source: str, norm_gets: str, training: bool, shape: tuple[int, int, int]
) -> None:
    check_stat_clone(norm, stat, source, norm_gets, training, shape)


@pytest.mark.parametrize("norm", sorted(NORMS))
@pytest.mark.parametrize("norm_gets", ["original", "clone"])
@pytest.mark.parametrize("source", ["input", "view", "intermediate"])
def test_clone_of_running_statistic_named_cases(norm: str, norm_gets: str, source: str) -> None:
    for training in (True, False):
        check_stat_clone(norm, "running_var", source, norm_gets, training, (3, 2, 2))


def test_profiles_register() -> None:
    register_profiles()
    assert settings.get_profile("ci").deadline is None
    assert settings.get_profile("ci").max_examples == CI_SETTINGS.max_examples
    assert settings.get_profile("soak").max_examples == SOAK_SETTINGS.max_examples


@pytest.mark.slow
def test_symbolic_programs_have_symbolic_sizes_and_stay_sound() -> None:
    """``programs(tracing_mode="symbolic")``: the graphs carry SymInt sizes; eliminate_clones stays sound."""

    def symbolic_sizes(p: Program) -> bool:  # sizes 0 and 1 are specialised by the tracer
        vals = [n.meta.get("val") for n in p.graph_module.graph.nodes if n.op == "placeholder"]
        return any(isinstance(s, torch.SymInt) for v in vals if isinstance(v, torch.Tensor) for s in v.shape)

    assert not symbolic_sizes(find(programs(max_ops=3), lambda p: p.num_ops >= 1))
    p = find(programs(max_ops=6, tracing_mode="symbolic"), lambda p: p.num_ops >= 3 and symbolic_sizes(p))
    assert p.tracing_mode == "symbolic"
    assert "tracing_mode='symbolic'" in p.source()
    check_pass(lambda gm: rewrite.eliminate_clones(gm, donated_inputs=p.donated_inputs, strict=True), p)


# ------------------------------------------------------------- fuzzing in a user's own test suite


def _drop_every_clone(gm: torch.fx.GraphModule) -> None:  # unsound on purpose
    for node in list(gm.graph.nodes):
        if node.target is torch.ops.aten.clone.default:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    gm.recompile()


def test_fuzz_settings_profile_shrinks_one_failure() -> None:
    from rewrite.testing import FUZZ_SETTINGS

    register_profiles()
    assert settings.get_profile("fx-aliasing").report_multiple_bugs is False
    assert FUZZ_SETTINGS.deadline is None and not FUZZ_SETTINGS.report_multiple_bugs

    @settings(FUZZ_SETTINGS, max_examples=50, database=None, derandomize=True)
    @given(programs(max_ops=4))
    def drops_every_clone(program: Program) -> None:
        check_pass(_drop_every_clone, program)

    with pytest.raises(NotEquivalent):  # one failure, not an ExceptionGroup of every clause's
        drops_every_clone()


def test_fuzzer_keeps_torch_trace_logger_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    trace = logging.getLogger("torch.__trace")
    handler = Keep()
    trace.addHandler(handler)
    try:
        for var in ("TORCH_TRACE", "TORCH_DTRACE", "TORCH_COMPILE_DEBUG"):
            monkeypatch.delenv(var, raising=False)
        (program,) = sample_programs(1, seed=3, max_ops=4)
        check_pass(lambda gm: rewrite.eliminate_clones(gm, donated_inputs=program.donated_inputs), program)
        assert records == []
        monkeypatch.setenv("TORCH_TRACE", "/nonexistent")  # a trace is wanted: nothing is silenced
        make_fx(lambda x: x * 2, tracing_mode="fake")(torch.randn(2))  # a control: torch does log
        logged = len(records)
        from rewrite.testing.equivalence import quiet_torch_trace

        with quiet_torch_trace():
            make_fx(lambda x: x * 2, tracing_mode="fake")(torch.randn(2))
        assert logged > 0 and len(records) == 2 * logged
    finally:
        trace.removeHandler(handler)


def test_check_pass_takes_graph_passes() -> None:
    (program,) = sample_programs(1, seed=5, max_ops=6)
    donated = program.donated_inputs

    def annotated(graph: torch.fx.Graph) -> None:
        rewrite.eliminate_clones(graph, donated_inputs=donated)

    seen: list[type] = []

    def unannotated(graph):  # type: ignore[no-untyped-def]  # uses graph.nodes: only a Graph has it
        seen.append(torch.fx.Graph if isinstance(graph, torch.fx.Graph) else torch.fx.GraphModule)
        for _ in graph.nodes:
            pass
        rewrite.eliminate_clones(graph, donated_inputs=donated)

    class InductorStyle:  # a torch._inductor CustomGraphPass: uuid() and __call__(graph)
        def uuid(self) -> str:
            return "x"

        def __call__(self, graph: object) -> None:
            assert isinstance(graph, torch.fx.Graph)
            rewrite.eliminate_clones(graph, donated_inputs=donated)

    for graph_pass in (annotated, unannotated, InductorStyle()):
        rewritten = check_pass(graph_pass, program)
        assert isinstance(rewritten, torch.fx.GraphModule)
    assert seen == [torch.fx.GraphModule, torch.fx.Graph]  # tried as a GraphModule pass, then on a Graph

    def drop_clones_of_graph(graph: torch.fx.Graph) -> None:  # unsound: caught as a wrong result
        for node in list(graph.nodes):
            if node.target is torch.ops.aten.clone.default:
                node.replace_all_uses_with(node.args[0])
                graph.erase_node(node)

    bad = find(programs(max_ops=4), lambda p: _graph_pass_fails(drop_clones_of_graph, p))
    with pytest.raises(NotEquivalent):
        check_pass(drop_clones_of_graph, bad)

    def broken(gm: torch.fx.GraphModule) -> None:  # a bug of the pass itself still surfaces
        raise AttributeError("my pass is broken")

    with pytest.raises(AttributeError, match="my pass is broken"):
        check_pass(broken, program)


def _graph_pass_fails(pass_fn: Callable[[torch.fx.Graph], None], program: Program) -> bool:
    try:
        check_pass(pass_fn, program)
    except NotEquivalent:
        return True
    return False


_BATCH_NORM_THEN_VIEW = """def program(x0):
    v0 = torch.nn.functional.batch_norm(x0, None, None, training=True)
    v1 = v0.clone()
    return (v1.view(-1),)
"""
_TRANSPOSED_INPUT = """def make_inputs():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, generator=g).transpose(-2, -1)]
"""


def test_a_program_only_the_tracer_rejects_is_discarded_and_a_broken_one_raises() -> None:
    """native_batch_norm's fake kernel keeps a transposed input's layout where the CPU kernel
    returns a contiguous result, so the program runs eagerly but make_fx fails at the view
    (seed 93417 of a soak): the generator draws another. A program that fails eagerly too
    is the builder's bug, and raises."""
    from types import SimpleNamespace

    from hypothesis.errors import Unsatisfiable

    from rewrite.testing.programs.strategies import finish_program

    program = _BATCH_NORM_THEN_VIEW.replace("def program(x0):\n", "").splitlines()
    builder = SimpleNamespace(
        input_names=["x0"],
        lines=[line.strip() for line in program[:-1]],
        inputs_source=_TRANSPOSED_INPUT,
        uses_custom_ops=False,
    )

    def norm_then_view(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.batch_norm(x, None, None, training=True).clone().view(-1)

    transposed = torch.randn(2, 3).transpose(-2, -1)
    assert norm_then_view(transposed).shape == (6,)  # eagerly fine
    with pytest.raises(Exception, match="view"):
        make_fx(norm_then_view, tracing_mode="fake")(transposed)  # the tracer's failure

    @given(st.just(builder))
    @settings(max_examples=1, database=None, deadline=None)
    def draw(b: SimpleNamespace) -> None:
        finish_program(b, ["v1.view(-1)"], donated=(), seed=0)  # type: ignore[arg-type]

    with pytest.raises(Unsatisfiable):  # every draw discarded, none failed
        draw()
    builder.lines.append("v2 = v1.view(5)")  # fails eagerly as well
    with pytest.raises(Exception, match=r"view|shape"):
        finish_program(builder, ["v2"], donated=(), seed=0)  # type: ignore[arg-type]
