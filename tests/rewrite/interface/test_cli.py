"""The user-facing shell: the bundled example, the ``fx-aliasing`` CLI, the README.

- the example block: its custom ops compute what they say, its trace runs like
  the eager block, and clone elimination takes the expected decision on each
  of its five clones;
- ``fx-aliasing demo``: exit codes, printed sections, the DOT file, the HTML report;
- README.md: every ``python`` block runs, and CI runs the README's test command.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pydot
import pytest
import torch

import aliasing
from rewrite import eliminate_clones
from rewrite.cli import count_clones, main, version_text
from rewrite.errors import NotEquivalent
from rewrite.examples import (
    DEMO_DONATED_INPUTS,
    DEMO_INPUT_NAMES,
    EPS,
    START,
    TOKENS,
    TracingMode,
    demo_block,
    make_demo_inputs,
    rms_norm_,
    rotary_,
    trace_demo,
)
from rewrite.testing import check_equivalent, copy_program

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"

# --- the example --------------------------------------------------------------


def test_rms_norm_writes_its_argument() -> None:
    x = torch.randn(3, 8)
    weight = torch.randn(8)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight
    result = rms_norm_(x, weight, EPS)
    assert result is None
    torch.testing.assert_close(x, expected)


def test_rotary_writes_two_views_of_one_buffer_and_nothing_else() -> None:
    qkv = torch.randn(4, 24)
    before = qkv.clone()
    q, k, v = qkv.split(8, dim=-1)
    angles = torch.rand(4, 4)
    rotary_(q, k, angles.cos(), angles.sin())
    assert not torch.equal(qkv[:, :16], before[:, :16])
    assert torch.equal(v, before[:, 16:])
    # a rotation keeps the norm of each (first, second) pair
    for new, old in ((q, before[:, :8]), (k, before[:, 8:16])):
        new_pairs = new[:, :4] ** 2 + new[:, 4:] ** 2
        old_pairs = old[:, :4] ** 2 + old[:, 4:] ** 2
        torch.testing.assert_close(new_pairs, old_pairs)


def test_custom_op_schemas_declare_their_writes() -> None:
    norm = str(torch.ops.fx_aliasing_demo.rms_norm_.default._schema)
    rotary = str(torch.ops.fx_aliasing_demo.rotary_.default._schema)
    assert "Tensor(a0!) x" in norm
    assert "Tensor(a0!) q" in rotary and "Tensor(a1!) k" in rotary


def test_demo_inputs_are_seeded() -> None:
    a, b, c = make_demo_inputs(seed=5), make_demo_inputs(seed=5), make_demo_inputs(seed=6)
    assert len(a) == len(DEMO_INPUT_NAMES)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    with pytest.raises(ValueError, match="even hidden size"):
        make_demo_inputs(hidden=7)


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_traced_demo_matches_eager_block(mode: TracingMode) -> None:
    fn, make_inputs = demo_block()
    gm = trace_demo(mode)
    eager_inputs = make_inputs(seed=3)
    traced_inputs = make_inputs(seed=3)
    eager_out = fn(*eager_inputs)
    traced_out = gm(*traced_inputs)
    for e, t in zip(eager_out, traced_out):
        torch.testing.assert_close(t, e)
    # the caches are written in place, the same way on both sides
    for e, t in zip(eager_inputs, traced_inputs):
        torch.testing.assert_close(t, e)
    # only the rows of this step are written in the caches
    fresh = make_inputs(seed=3)
    for cache in (6, 7):
        rows = slice(START, START + TOKENS)
        assert not torch.equal(eager_inputs[cache][rows], fresh[cache][rows])
        assert torch.equal(eager_inputs[cache][:START], fresh[cache][:START])
        assert torch.equal(eager_inputs[cache][START + TOKENS :], fresh[cache][START + TOKENS :])
    assert [n.name for n in gm.graph.nodes if n.op == "placeholder"] == [f"{n}_1" for n in DEMO_INPUT_NAMES]
    targets = {n.target for n in gm.graph.nodes}
    assert torch.ops.fx_aliasing_demo.rms_norm_.default in targets
    assert torch.ops.fx_aliasing_demo.rotary_.default in targets
    assert torch.ops.aten.copy_.default in targets
    assert torch.ops.aten.index_copy_.default in targets
    assert count_clones(gm) == 5


def test_trace_demo_rejects_unknown_mode() -> None:
    with pytest.raises(ValueError, match="tracing_mode"):
        trace_demo("eager")  # type: ignore[arg-type]  # invalid on purpose


def test_demo_analysis_sees_the_views_and_writes() -> None:
    gm = trace_demo()
    analysis = aliasing.analyze(gm, donated_inputs=DEMO_DONATED_INPUTS)
    q, k, v = (n.name for n in gm.graph.nodes if n.name.startswith("getitem"))
    assert analysis.may_alias(q, k) and analysis.may_alias(k, v)
    assert not analysis.may_overlap(q, k)
    assert not analysis.may_overlap(q, v)
    assert not analysis.may_overlap(k, v)
    assert [n.name for n in analysis.writers(v)] == []
    assert "rotary_" in [n.name for n in analysis.writers(q)]
    assert "rotary_" in [n.name for n in analysis.writers(k)]
    assert "rms_norm_" in [n.name for n in analysis.writers("clone")]
    assert analysis.role("x_1") is aliasing.Role.USER_INPUT
    # the k-cache slice written by copy_ and the cache it belongs to
    assert analysis.may_overlap("slice_1", "k_cache_1")
    assert "copy_" in [n.name for n in analysis.writers("k_cache_1")]


def test_clone_elimination_on_the_demo() -> None:
    gm = trace_demo()
    original = copy_program(gm)
    report = eliminate_clones(gm, donated_inputs=DEMO_DONATED_INPUTS, strict=True)
    decisions = {d.node: d for d in report.decisions}
    assert set(decisions) == {"clone", "clone_1", "clone_2", "clone_3", "clone_4", "copy_"}
    # the write-back of the KV cache is a real copy (C9 judges every copy_ too)
    assert decisions["copy_"].action == "keep" and report.dropped_copies == ()
    # h = x.clone() is normalised in place while x is read by the residual add;
    # k_pre and q.contiguous() copy strided views into dense tensors
    assert report.kept == ("clone", "clone_1", "clone_2")
    # softmax probabilities only read; projection output dead after the add_
    assert report.removed == ("clone_3", "clone_4")
    assert count_clones(gm) == 3
    for seed in range(3):
        check_equivalent(original, gm, make_demo_inputs(seed=seed), donated_inputs=DEMO_DONATED_INPUTS)
    # running it again changes nothing
    again = eliminate_clones(gm, donated_inputs=DEMO_DONATED_INPUTS, strict=True)
    assert again.removed == ()
    assert count_clones(gm) == 3


# --- the CLI ------------------------------------------------------------------

SECTIONS = (
    "fx-aliasing demo: transformer-style block",
    "== graph ==",
    "== storages ==",
    "== alias sets (values that may share storage) ==",
    "== reads and writes per storage, in graph order ==",
)


def test_demo_prints_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    positions = [out.index(s) for s in (*SECTIONS, "== clone elimination ==", "== rewritten graph ==")]
    assert positions == sorted(positions)
    storages = out.split("== storages ==")[1].split("==")[0]
    for name in DEMO_INPUT_NAMES:
        assert re.search(rf"^s\d+\s+user_input\s+.*\b{name}_1\b", storages, re.M), name
    alias_sets = out.split("== alias sets")[1].split("== reads")[0]
    assert re.search(r"provably disjoint: .*getitem/getitem_1", alias_sets)
    accesses = out.split("== reads and writes")[1].split("== clone elimination")[0]
    assert re.search(r"^\s+write rotary_ via getitem\b", accesses, re.M)
    assert re.search(r"^\s+write rms_norm_ via clone\b", accesses, re.M)
    assert re.search(r"^\s+write copy_ via slice_1\b", accesses, re.M)
    assert "6 copy candidates (5 clones, 1 copy_): 2 removed, 4 kept" in out
    assert "equivalent: yes" in out


def test_demo_no_rewrite_stops_after_the_analysis(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--no-rewrite", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    for section in SECTIONS:
        assert section in out
    assert "== clone elimination ==" not in out
    assert "equivalent:" not in out


def test_demo_symbolic(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--tracing-mode", "symbolic"]) == 0
    out = capsys.readouterr().out
    assert "tracing_mode=symbolic" in out
    assert "sym_size" in out
    assert "provably disjoint: getitem/getitem_1, getitem/getitem_2, getitem_1/getitem_2" in out
    assert "equivalent: yes" in out


@pytest.mark.integration
@pytest.mark.filterwarnings("ignore::DeprecationWarning:pydot.dot_parser")
def test_demo_writes_dot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dot_file = tmp_path / "demo.dot"
    assert main(["demo", "--no-rewrite", "--dot", str(dot_file)]) == 0
    assert f"wrote the storage graph to {dot_file}" in capsys.readouterr().out
    source = dot_file.read_text()
    graphs = pydot.graph_from_dot_data(source)
    assert graphs is not None and len(graphs) == 1
    parsed = nx.nx_pydot.from_pydot(graphs[0])
    gm = trace_demo()
    # the DOT file draws every node of the program once (an op and the value it defines together)
    names = {str(n).strip('"') for n in parsed.nodes} - {"node", "graph", "edge"}
    assert names == {n.name for n in gm.graph.nodes}
    assert {s.get_name().strip('"') for s in graphs[0].get_subgraphs()} >= {"cluster_s10"}
    # with the clone decisions coloured
    assert "KEPT: C3 clone-written-then-original-read" in source and "REMOVED: removable" in source


@pytest.mark.integration
def test_demo_writes_the_html_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="the report's timeline needs matplotlib (the notebooks extra)")
    report = tmp_path / "demo.html"
    assert main(["demo", "--no-rewrite", "--html", str(report)]) == 0
    assert f"wrote the HTML report to {report}" in capsys.readouterr().out
    assert report.read_text().startswith("<!DOCTYPE html>")
    assert main(["demo", "--html", str(tmp_path / "demo.txt")]) == 2  # checked before anything runs


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")
def test_demo_dot_renders_to_png(tmp_path: Path) -> None:
    dot_file = tmp_path / "demo.dot"
    assert main(["demo", "--no-rewrite", "--dot", str(dot_file)]) == 0
    png = tmp_path / "demo.png"
    subprocess.run(["dot", "-Tpng", str(dot_file), "-o", str(png)], check=True, timeout=120)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_reports_an_unwritable_dot_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "missing-dir" / "demo.dot"
    assert main(["demo", "--no-rewrite", "--dot", str(target)]) == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and "cannot write" in err


def test_demo_fails_when_equivalence_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def not_equivalent(*args: object, **kwargs: object) -> None:
        raise NotEquivalent("output", "output 0 differs")

    monkeypatch.setattr("rewrite.commands.check_equivalent", not_equivalent)
    assert main(["demo"]) == 1
    captured = capsys.readouterr()
    assert "equivalent: NO" in captured.out
    assert "not equivalent" in captured.err and "[output] output 0 differs" in captured.err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["demo", "--seed", "many"]) == 2
    assert main(["frobnicate"]) == 2
    assert "usage: fx-aliasing" in capsys.readouterr().err
    assert main(["--help"]) == 0


def test_console_script_points_at_main() -> None:
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="fx-aliasing")
    assert script.value == "rewrite.cli:main"
    assert script.load() is main


# --- no torch for --help, --version and usage errors ------------------------------

#: Runs main() on each argument list in one process (argv[1]: a JSON list of them), then says
#: whether torch or the library were imported on the way.
_WITHOUT_TORCH = """
import contextlib, io, json, sys
from rewrite.cli import main

results = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    results.append({"args": args, "rc": rc, "out": out.getvalue(), "err": err.getvalue()})
imported = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "aliasing", "numpy"))
print(json.dumps({"results": results, "imported": imported}))
"""

#: (arguments, the argument the one error line names); "{p}" is an existing file, "{d}" a folder.
USAGE_ERRORS = [
    ([], "the following arguments are required: COMMAND"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["explain"], "the following arguments are required: PROGRAM.pt2"),
    (["explain", "{d}/nope.pt2"], "nope.pt2: no such file"),
    (["explain", "{d}"], "is not a file"),
    (["explain", "{p}", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["explain", "{p}", "--donated", "x,,y"], "--donated 'x,,y': an empty entry"),
    (["explain", "{p}", "--donated", "x-1"], "--donated 'x-1': 'x-1' is neither a placeholder position nor a name"),
    (["explain", "{p}", "--import", "no_such_module_here"], "--import no_such_module_here: no module named"),
    (["explain", "{p}", "--import", "my-ops"], "--import 'my-ops': not a module name"),
    (["explain", "{p}", "--json", "--summary"], "argument --summary: not allowed with argument --json"),
    (["explain", "{p}", "--html", "{d}/r.txt"], "--html {d}/r.txt: the file name must end with .html or .htm"),
    (["explain", "{p}", "--dot", "{d}/g.pdf"], "--dot {d}/g.pdf: writes DOT text"),
    (["rewrite", "{p}"], "the following arguments are required: -o/--output"),
    (["rewrite", "{p}", "-o", "{p}"], "is the input program"),
    (["demo", "--seed", "many"], "argument --seed: invalid int value: 'many'"),
    (["demo", "--tracing-mode", "eager"], "argument --tracing-mode: invalid choice: 'eager'"),
]


@pytest.mark.integration
def test_help_version_and_usage_errors_do_not_import_torch(tmp_path: Path) -> None:
    program = tmp_path / "p.pt2"
    program.write_bytes(b"not looked at: the arguments are wrong before the file is read")

    def fill(args: list[str]) -> list[str]:
        return [a.format(p=program, d=tmp_path) for a in args]

    cases = [["--help"], ["--version"], ["explain", "--help"], *(fill(args) for args, _ in USAGE_ERRORS)]
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH, json.dumps(cases)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=True,
    )
    report = json.loads(done.stdout)
    assert report["imported"] == []  # neither torch, nor aliasing, nor numpy
    help_, version, explain_help, *errors = report["results"]
    assert help_["rc"] == 0 and "usage: fx-aliasing" in help_["out"] and "2 on a usage error" in help_["out"]
    assert version["rc"] == 0 and version["out"].strip() == version_text()
    assert explain_help["rc"] == 0 and "--json" in explain_help["out"]
    for result, (_, message) in zip(errors, USAGE_ERRORS):
        assert result["rc"] == 2, result
        lines = result["err"].splitlines()
        assert lines[0].startswith("usage: fx-aliasing"), result
        (error,) = [line for line in lines if ": error: " in line]  # one error line, naming the argument
        assert error == lines[-1] and message.format(d=tmp_path) in error, result
    assert list(tmp_path.iterdir()) == [program]  # nothing written


@pytest.mark.integration
def test_console_script_answers_version_without_torch() -> None:
    script = _console_script()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(script), "--version"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert done.stdout.strip() == version_text()
    assert done.stdout.strip() == (
        f"fx-aliasing {importlib.metadata.version('fx-aliasing')} (torch {importlib.metadata.version('torch')})"
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "rewrite.cli" in imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "aliasing")}


# --- one vocabulary of counts ---------------------------------------------------------

_COUNTS = re.compile(r"(\d+) copy candidates? \((\d+) clones?, (\d+) copy_\): (\d+) removed, (\d+) kept")


def decision_rows(text: str) -> list[dict[str, str]]:
    """The rows of the first decision table in ``text`` (header ``node  kind  original  action ...``)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"node +kind +original +action +reason", line))
    header = lines[start]
    cuts = [m.start() for m in re.finditer(r"\S+", header)]
    rows = []
    for line in lines[start + 2 :]:
        if _COUNTS.match(line):
            break
        cells = [line[a:b].strip() for a, b in zip(cuts, [*cuts[1:], None])]
        rows.append(dict(zip(header.split(), cells)))
    return rows


def assert_counts_match(line: str, rows: list[dict[str, str]]) -> None:
    """Every count in ``line`` is the number of ``rows`` of its kind or action."""
    match = _COUNTS.search(line)
    assert match, line
    candidates, clones, copies, removed, kept = map(int, match.groups())
    assert candidates == len(rows)
    assert clones == sum(r["kind"] == "clone" for r in rows)
    assert copies == sum(r["kind"] == "copy_" for r in rows)
    assert removed == sum(r["action"] == "remove" for r in rows)
    assert kept == sum(r["action"] == "keep" for r in rows)
    assert clones + copies == removed + kept == candidates


def test_demo_counts_every_row_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    rows = decision_rows(out.split("== clone elimination ==", 1)[1])
    assert {r["kind"] for r in rows} == {"clone", "copy_"}  # the demo has both
    assert [r["node"] for r in rows if r["kind"] == "copy_"] == ["copy_"]
    first, table_counts = out.splitlines()[0], out.split("== clone elimination ==", 1)[1]
    assert_counts_match(first, rows)  # the first line
    assert_counts_match(table_counts, rows)  # the line under the table
    assert len(_COUNTS.findall(out)) == 2
    # the rewritten graph keeps exactly the kept rows
    code = out.split("== rewritten graph ==", 1)[1]
    for r in rows:
        assert (f"    {r['node']} = " in code) == (r["action"] == "keep"), r


def test_explanation_text_html_and_json_count_alike() -> None:
    from rewrite.counts import count_copies
    from rewrite.explain import explain

    e = explain(trace_demo(), donated_inputs=DEMO_DONATED_INPUTS, name="the demo block")
    text = e.text()
    rows = decision_rows(text)
    assert len(rows) == len(e.report.decisions) == 6
    summary_line = text.splitlines()[0]
    assert summary_line.startswith("the demo block: 34 nodes, ")
    assert summary_line.endswith(" storages, 6 copy candidates (5 clones, 1 copy_): 2 removed, 4 kept")
    assert_counts_match(summary_line, rows)
    assert_counts_match(text.split("== clone elimination ==", 1)[1], rows)
    data = json.loads(e.to_json())
    assert data["counts"] == e.counts.as_dict() == count_copies(e.report.decisions).as_dict()
    assert [(d["node"], d["kind"], d["action"]) for d in data["decisions"]] == [
        (r["node"], r["kind"], r["action"]) for r in rows
    ]
    assert data["counts"]["copies"] == 1 and data["counts"]["copies_kept"] == 1
    if importlib.util.find_spec("matplotlib") is not None:  # the page draws the timeline
        page = e.html()
        html_rows = re.findall(r'<tr class="(remove|keep)"><td><code>(?:<a [^>]*>)?(\w+)(?:</a>)?</code></td><td>(clone|copy_)</td>', page)
        assert [(node, kind, action) for action, node, kind in html_rows] == [
            (r["node"], r["kind"], r["action"]) for r in rows
        ]
        summary = page.split('id="summary"', 1)[1].split("</table>", 1)[0]
        assert_counts_match(summary, rows)
        assert_counts_match(page.split('id="decisions"', 1)[1].split("</h2>", 1)[1], rows)


_MYOPS = """
import torch


@torch.library.custom_op("myops::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, s: float) -> None:
    x.mul_(s)


@scale_.register_fake
def _(x, s):
    return None
"""

_MAKE_PROGRAM = """
import torch
import myops


class M(torch.nn.Module):
    def forward(self, x):
        y = x.clone()
        torch.ops.myops.scale_(y, 2.0)
        return y + 1


torch.export.save(torch.export.export(M(), (torch.randn(4),)), "prog.pt2")
"""


def _console_script() -> Path:
    script = Path(sys.executable).parent / "fx-aliasing"
    if not script.exists():
        pytest.skip(f"the fx-aliasing console script is not installed next to {sys.executable}")
    return script


def _user_folder(tmp_path: Path) -> dict[str, str]:
    """tmp_path as a user's folder: myops.py (a custom op) and prog.pt2 (a program that uses it)."""
    (tmp_path / "myops.py").write_text(_MYOPS)
    (tmp_path / "make.py").write_text(_MAKE_PROGRAM)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing puts the folder on sys.path
    subprocess.run([sys.executable, "make.py"], cwd=tmp_path, env=env, check=True, timeout=300, capture_output=True)
    return env


@pytest.mark.integration
def test_console_script_imports_a_module_of_the_current_folder(tmp_path: Path) -> None:
    env = _user_folder(tmp_path)
    script = _console_script()
    found = subprocess.run(
        [str(script), "explain", "prog.pt2", "--import", "myops"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert found.returncode == 0, found.stderr
    assert "write scale_ via clone" in found.stdout
    missing = subprocess.run(
        [str(script), "explain", "prog.pt2"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert missing.returncode == 1
    errors = [line for line in missing.stderr.splitlines() if not line.startswith("fx-aliasing: loading")]
    assert len(errors) == 1, missing.stderr  # one line, no torch traceback
    assert "custom op myops.scale_.default" in errors[0] and "--import MODULE" in errors[0]
    assert "Traceback" not in missing.stderr


def test_a_damaged_program_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.pt2"
    torch.export.save(torch.export.export(torch.nn.ReLU(), (torch.randn(2),)), path)
    data = bytearray(path.read_bytes())
    start = data.index(b"{", data.index(b"models/model.json"))
    data[start + 10 : start + 20] = b"\xff" * 10  # not UTF-8 any more
    path.write_bytes(bytes(data))
    assert main(["explain", str(path)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("fx-aliasing: loading")]
    assert len(err) == 1 and "the file is damaged or incomplete" in err[0] and "torch.export.save" in err[0]


@pytest.mark.integration
def test_python_dash_m() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rewrite.cli", "demo", "--no-rewrite"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "== storages ==" in result.stdout


# --- README -------------------------------------------------------------------


def _readme_blocks(language: str) -> list[tuple[str, str]]:
    """(heading, code) for each fenced block of ``language`` in README.md."""
    blocks: list[tuple[str, str]] = []
    heading = "top"
    lines = README.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.strip() == f"```{language}":
            body: list[str] = []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            blocks.append((heading, "\n".join(body) + "\n"))
        i += 1
    return blocks


PYTHON_BLOCKS = _readme_blocks("python")


def test_readme_has_python_examples() -> None:
    assert len(PYTHON_BLOCKS) >= 4


@pytest.mark.integration
@pytest.mark.parametrize(
    "code", [code for _, code in PYTHON_BLOCKS], ids=[re.sub(r"\W+", "-", h).strip("-") for h, _ in PYTHON_BLOCKS]
)
def test_readme_python_block_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if "from vllm" in code and importlib.util.find_spec("vllm") is None:
        pytest.skip("this README block needs vLLM (the vllm extra, installed by .ci/run)")
    monkeypatch.chdir(tmp_path)  # blocks that save files save them here
    namespace: dict[str, object] = {"__name__": "__readme__"}
    # Compiled from a file of its own: Dynamo reads the source of the functions it traces from the
    # code's file, and the README's lines at the block's line numbers are other text.
    block = tmp_path / "readme_block.py"
    block.write_text(code)
    exec(compile(code, str(block), "exec"), namespace)


def test_readme_setup_commands_match_ci() -> None:
    install, test = (code.strip() for _, code in _readme_blocks("bash")[:2])
    assert "pip install torch==2.13.0" in install
    assert install.endswith("fx-aliasing demo")
    assert test == ". .venv/bin/activate && python -m pytest -q -n 2"
    ci = (ROOT / ".ci" / "run").read_text()
    # CI activates its own fresh venv, then runs the same command (run_suite passes its arguments on)
    assert re.search(r'^\s*python -m pytest -q "\$@"$', ci, re.M)
    assert re.search(r"^\s*run_suite -n 2$", ci, re.M)
    extras = re.compile(r"pip install torch==2\.13\.0 -e '\.\[([\w,]+)\]'")
    readme_match, ci_match = extras.search(install), extras.search(ci)
    assert readme_match and ci_match
    readme_extras, ci_extras = set(readme_match.group(1).split(",")), set(ci_match.group(1).split(","))
    # the README installs what the tests need; CI installs at least that (and may add tools)
    assert {"test", "notebooks"} <= readme_extras <= ci_extras
    assert "fx-aliasing demo" in ci


def test_tests_readme_lists_every_test_file() -> None:
    listed = set(re.findall(r"^\| `((?:\w+/)*test_\w+\.py)`", (ROOT / "tests" / "README.md").read_text(), re.M))
    present = {p.relative_to(ROOT / "tests").as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    assert present - listed == set(), "add these files to tests/README.md"
    assert listed - present == set(), "tests/README.md lists files that do not exist"


@pytest.fixture(scope="module")
def block_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo block exported with torch.export and saved: 4 clones and the KV cache's copy_."""
    fn, make_inputs = demo_block()

    class Block(torch.nn.Module):
        def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return fn(*args)

    path = tmp_path_factory.mktemp("block") / "block.pt2"
    torch.export.save(torch.export.export(Block(), make_inputs()), path)
    return path


DECISION_KEYS = {"node", "kind", "original", "action", "reason", "condition", "description", "evidence", "erased"}
COUNT_KEYS = {
    "candidates", "clones", "copies", "removed", "kept", "clones_removed", "clones_kept", "copies_removed", "copies_kept"
}


def test_explain_json_schema_and_text_agree(
    block_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dot = tmp_path / "g.dot"
    assert main(["explain", str(block_file), "--import", "rewrite.examples", "--json", "--dot", str(dot)]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # standard output holds the JSON document alone
    assert captured.out == json.dumps(data, indent=2, sort_keys=True) + "\n"  # stable: sorted keys, indent 2
    assert f"wrote the storage graph to {dot}" in captured.err and dot.exists()
    assert set(data) == {
        "schema", "program", "torch", "fx_aliasing", "nodes", "storages", "donated_inputs", "counts", "decisions",
        "opaque", "error",
    }
    assert data["schema"] == "fx-aliasing-explain/1" and data["program"] == "block.pt2"
    assert data["torch"] == torch.__version__ and data["fx_aliasing"] == importlib.metadata.version("fx-aliasing")
    assert data["error"] is None and data["opaque"] == [] and data["donated_inputs"] == []
    assert set(data["counts"]) == COUNT_KEYS
    for d in data["decisions"]:
        assert set(d) == DECISION_KEYS
        assert d["kind"] in ("clone", "copy_") and d["action"] in ("remove", "keep")
        assert d["condition"] is None or re.fullmatch(r"C\d+[ab]?(-C\d+)?", d["condition"]), d
        assert isinstance(d["description"], str) and d["description"]
        assert all(isinstance(n, str) for n in d["evidence"] + d["erased"])
    kinds = [d["kind"] for d in data["decisions"]]
    actions = [d["action"] for d in data["decisions"]]
    counts = data["counts"]
    assert counts["candidates"] == len(kinds) and "copy_" in kinds
    assert (counts["clones"], counts["copies"]) == (kinds.count("clone"), kinds.count("copy_"))
    assert (counts["removed"], counts["kept"]) == (actions.count("remove"), actions.count("keep"))
    # the text says the same, row by row
    assert main(["explain", str(block_file), "--import", "rewrite.examples"]) == 0
    text = capsys.readouterr().out
    rows = decision_rows(text)
    assert [
        (d["node"], d["kind"], d["original"], d["action"], f"{d['condition'] or ''} {d['reason']}".strip(),
         ", ".join(d["evidence"]))
        for d in data["decisions"]
    ] == [(r["node"], r["kind"], r["original"], r["action"], r["reason"], r["evidence"]) for r in rows]
    assert_counts_match(text.splitlines()[0], rows)
    assert_counts_match(text.split("== clone elimination ==", 1)[1], rows)
    # donated inputs, by position and name
    assert main(["explain", str(block_file), "--import", "rewrite.examples", "--json", "--donated", "6,args_7"]) == 0
    donated = json.loads(capsys.readouterr().out)["donated_inputs"]
    assert donated == [{"position": 6, "name": "args_6"}, {"position": 7, "name": "args_7"}]


def test_rewrite_command_counts_every_row_once(
    block_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.pt2"
    assert main(["rewrite", str(block_file), "--import", "rewrite.examples", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = decision_rows(printed)
    assert {r["kind"] for r in rows} == {"clone", "copy_"}
    (line,) = [line for line in printed.splitlines() if _COUNTS.search(line)]  # said once
    assert_counts_match(line, rows)
    assert printed.endswith(f"\nsaved {out}\n")
    from rewrite.explain import load_program
    from rewrite.planning.candidates import copy_candidates

    left = sorted(n.name for n in copy_candidates(load_program(out).graph_module.graph))
    assert left == sorted(r["node"] for r in rows if r["action"] == "keep")
