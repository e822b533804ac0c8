"""The user's own program: ``fx-aliasing explain`` and ``fx-aliasing rewrite`` on a ``.pt2`` file.

- ``rewrite.explain``: :func:`explain` leaves the program alone and holds the
  analysis, the decisions and the rewritten copy; donated inputs by position or
  name; :func:`explain_file` / :func:`rewrite_file` on saved programs, and a
  clear :class:`ProgramFileError` for files that are not exported programs;
- the text: a summary and the decisions first, then the details;
  ``text(summary=True)`` and ``fx-aliasing explain --summary`` stay a few dozen
  lines on a 400-node program;
- ``fx-aliasing explain``: the printed sections, ``--html``, ``--timeline``,
  ``--dot``, ``--donated``, ``--import``, ``--summary``;
- ``fx-aliasing rewrite``: the saved program loads, runs like the original and
  has the removable clones removed; ``--check``;
- paths and arguments are checked before any work starts (exit status 2, and
  nothing is written); slow phases say so on standard error; ``--version``.
"""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from rewrite.cli import ProgressReporter, main, version_text
from rewrite.explain import (
    ProgramFileError,
    explain,
    explain_file,
    load_program,
    resolve_donated,
    rewrite_file,
)
from rewrite.testing import check_equivalent

matplotlib = pytest.importorskip("matplotlib", reason="matplotlib is not installed (the notebooks extra)")

ROOT = Path(__file__).resolve().parents[3]


class TinyAttention(torch.nn.Module):
    """A KV cache in buffers written in place, and three clones: two removable, one needed."""

    def __init__(self, d: int = 8, cache: int = 16) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.out = torch.nn.Linear(d, d, bias=False)
        self.register_buffer("k_cache", torch.zeros(cache, d))
        self.register_buffer("v_cache", torch.zeros(cache, d))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(x).split(x.shape[-1], dim=-1)
        self.k_cache.index_copy_(0, pos, k)
        self.v_cache.index_copy_(0, pos, v)
        probs = (q @ self.k_cache.t()).softmax(-1).clone()  # only read: removable
        y = self.out(probs @ self.v_cache).clone()  # written, original dead: removable
        y.add_(x)
        out = y + x
        h = x.clone()  # written, and x is the caller's: needed unless x is donated
        h.mul_(2)
        return out, h


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 8), torch.arange(4)


@pytest.fixture(scope="module")
def program_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("programs") / "tiny.pt2"
    torch.manual_seed(0)
    torch.export.save(torch.export.export(TinyAttention(), _inputs()), path)
    return path


# --- the Python API -------------------------------------------------------------------------


def test_explain_leaves_the_program_alone(program_file: Path) -> None:
    ep = load_program(program_file)
    before = ep.graph_module.code
    e = explain(ep, name="tiny")
    assert ep.graph_module.code == before
    assert e.report.removed == ("clone", "clone_1")
    assert e.report.kept == ("clone_2",)
    assert e.report.decision("clone_2").reason.condition == "C5"
    assert "clone_1" not in e.rewritten.graph_module.code
    text = e.text()
    for section in ("== clone elimination ==", "== inputs", "== storages ==", "== alias sets", "== reads and writes"):
        assert section in text
    assert "2:b_k_cache (buffer)" in text and "write index_copy_ via b_k_cache" in text
    assert "reasons:\n  removable: no condition requires the copy" in text


def test_donated_inputs_by_position_or_name(program_file: Path) -> None:
    ep = load_program(program_file)
    assert resolve_donated(ep, ["x", 5, "5"]) == (4, 5)
    # x given up, but an exported program's module takes x at any storage offset and h is returned:
    # its clone stays for its layout (C1, naming x), no longer for the caller's memory (C5)
    donated = explain(ep, donated_inputs=["x"]).report
    assert donated.kept == ("clone_2",) and str(donated.decisions[-1].reason) == "layout"
    assert "x" in donated.decisions[-1].evidence
    from aliasing import InvalidTargetError

    with pytest.raises(InvalidTargetError, match=r"'y' is not a placeholder .*4:x"):
        resolve_donated(ep, ["y"])
    with pytest.raises(InvalidTargetError, match="out of range"):
        resolve_donated(ep, [9])


def test_explain_file_and_rewrite_file(program_file: Path, tmp_path: Path) -> None:
    e = explain_file(program_file, html=tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    out = tmp_path / "out.pt2"
    rewritten = rewrite_file(program_file, out).report
    assert rewritten.removed == e.report.removed
    loaded = load_program(out)
    clones = [n.name for n in loaded.graph.nodes if n.target is torch.ops.aten.clone.default]
    assert clones == ["clone_2"]
    check_equivalent(load_program(program_file), loaded, _inputs())


def test_not_an_exported_program(tmp_path: Path) -> None:
    text = tmp_path / "notes.pt2"
    text.write_text("hello")
    with pytest.raises(ProgramFileError, match="not an exported program: not a zip archive"):
        load_program(text)
    checkpoint = tmp_path / "weights.pt2"
    torch.save({"w": torch.zeros(2)}, checkpoint)
    with pytest.raises(ProgramFileError, match=r"without torch.export's model files \(a torch.save checkpoint"):
        load_program(checkpoint)
    broken = tmp_path / "broken.pt2"
    with zipfile.ZipFile(broken, "w") as z:
        z.writestr("broken/archive_format", "pt2")
        z.writestr("broken/models/model.json", "{not json")
    with pytest.raises(ProgramFileError, match="could not be loaded as an exported program"):
        load_program(broken)
    with pytest.raises(ProgramFileError, match="no such file"):
        load_program(tmp_path / "missing.pt2")
    with pytest.raises(ProgramFileError, match="cannot import 'no_such_module_here'"):
        load_program(text, imports=["no_such_module_here"])


# --- fx-aliasing explain --------------------------------------------------------------------


def test_cli_explain_prints_every_section(program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(program_file)]) == 0
    out = capsys.readouterr().out
    # a summary and the decisions first, the details after
    sections = ["tiny.pt2: 25 nodes", "\ninputs: ", "\nstorages: ", "\nalias sets: ", "== clone elimination ==",
                "== inputs (placeholder position:name (role)) ==", "== storages ==", "== alias sets",
                "== reads and writes per storage"]
    positions = [out.index(s) for s in sections]
    assert positions == sorted(positions)
    assert "inputs: 2 parameters (0:p_qkv_weight, 1:p_out_weight); 2 buffers (2:b_k_cache, 3:b_v_cache);" in out
    assert "\n    the caller's memory: b_k_cache by index_copy_, b_v_cache by index_copy__1\n" in out
    assert "clone_2  clone  x         keep    C5 clone-written-original-is-caller-memory  mul_, x" in out
    assert "{linear, split, getitem, getitem_1, getitem_2}" in out  # q, k, v: one storage
    # (torch.export.load gives every view storage offset 0 in its metadata, so the saved program's
    # q, k and v are not proved disjoint; the in-memory program's are)
    assert "provably disjoint: getitem/getitem_1" in explain(torch.export.export(TinyAttention(), _inputs())).text()


def test_cli_explain_writes_the_report_and_pictures(
    program_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html, svg, png, dot = (tmp_path / n for n in ("r.html", "t.svg", "t.png", "g.dot"))
    assert main(["explain", str(program_file), "--html", str(html), "--timeline", str(svg), "--dot", str(dot)]) == 0
    out = capsys.readouterr().out
    assert f"wrote the HTML report to {html}" in out and f"wrote the storage timeline to {svg}" in out
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "data:image/svg+xml;base64," in page
    assert svg.read_text().startswith("<?xml")
    assert dot.read_text().startswith("digraph storage_graph {") and "KEPT: C5" in dot.read_text()
    assert main(["explain", str(program_file), "--timeline", str(png), "--donated", "x"]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "1 kept" in capsys.readouterr().out  # (donated x: h's layout, see test_donated_inputs_by_position_or_name)


def test_cli_explain_imports_modules_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a program with the demo's custom ops loads once the module that registers them is imported
    from rewrite.examples import demo_block

    fn, make_inputs = demo_block()

    class Block(torch.nn.Module):
        def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return fn(*args)

    path = tmp_path / "block.pt2"
    torch.export.save(torch.export.export(Block(), make_inputs()), path)
    assert main(["explain", str(path), "--import", "rewrite.examples"]) == 0
    assert "rms_norm_" in capsys.readouterr().out


class _Stack(torch.nn.Module):
    """Layers of :class:`TinyAttention` (18 layers: about 420 nodes and 54 clones)."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(TinyAttention() for _ in range(layers))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            out, h = layer(x, pos)
            x = out + h
        return x


@pytest.fixture(scope="module")
def stack() -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    return torch.export.export(_Stack(18), _inputs())


def test_summary_is_short_on_a_400_node_program(stack: torch.export.ExportedProgram) -> None:
    from rewrite.explain import SUMMARY_DECISIONS

    e = explain(stack, name="stack")
    assert len(stack.graph.nodes) >= 400 and len(e.report.decisions) > SUMMARY_DECISIONS
    full, summary = e.text(), e.text(summary=True)
    lines = summary.splitlines()
    assert len(lines) <= 36, summary
    assert max(len(line) for line in lines[:-1]) <= 120  # wrapped (the last line is the hint)
    assert lines[0] == (
        f"stack: {len(stack.graph.nodes)} nodes, {len(e.analysis.storages)} storages, "
        "54 copy candidates (54 clones, 0 copy_): 53 removed, 1 kept"
    )
    assert "\n54 copy candidates (54 clones, 0 copy_): 53 removed, 1 kept (the table: without --summary)\n" in summary
    # many decisions: grouped by action and reason, kept first, at most three lines a group
    assert "  kept 1, C5 clone-written-original-is-caller-memory: clone_2" in summary
    removed = summary.split("  removed 53, removable: ", 1)[1].split("\n\n")[0]
    assert removed.count("\n") <= 2 and re.search(r", \.\.\. and \d+ more$", removed)
    assert "reasons:\n  removable: no condition requires the copy" in summary
    assert "== storages ==" not in summary and "without --summary" in lines[-1]
    # the full text starts the same way and has everything
    assert full.startswith(summary.split("\n== clone elimination ==")[0])
    assert len(full.splitlines()) > 900
    table = full.split("== clone elimination ==\n", 1)[1].split("\n\n")[0]
    assert len([line for line in table.splitlines()[2:] if re.match(r"clone(_\d+)? ", line)]) == 54  # after the header
    assert full.index("== clone elimination ==") < full.index("== storages ==") < full.index("== reads and writes")


def test_summary_of_a_small_program_has_the_decision_table(program_file: Path) -> None:
    summary = explain(load_program(program_file), name="tiny").text(summary=True)
    assert "clone_2  clone  x         keep    C5 clone-written-original-is-caller-memory  mul_, x" in summary
    assert "== reads and writes" not in summary and len(summary.splitlines()) <= 25


def test_cli_explain_summary(program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(program_file), "--summary"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tiny.pt2: 25 nodes") and "== clone elimination ==" in out
    assert "== storages ==" not in out and "fx-aliasing explain without --summary" in out
    assert main(["explain", str(program_file)]) == 0
    assert "== storages ==" in capsys.readouterr().out


# --- fx-aliasing rewrite --------------------------------------------------------------------


def test_cli_rewrite_saves_a_program_without_the_clones(
    program_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.pt2"
    assert main(["rewrite", str(program_file), "-o", str(out), "--check"]) == 0
    printed = capsys.readouterr().out
    assert "equivalent on the saved example inputs: yes" in printed
    assert "3 copy candidates (3 clones, 0 copy_): 2 removed, 1 kept\n" in printed
    assert printed.endswith(f"\nsaved {out}\n")
    loaded = load_program(out)
    check_equivalent(load_program(program_file), loaded, _inputs())
    assert main(["rewrite", str(program_file), "-o", str(out), "--donated", "4"]) == 0
    assert "3 copy candidates (3 clones, 0 copy_): 2 removed, 1 kept" in capsys.readouterr().out  # (h's layout: x may come at any offset)
    check_equivalent(load_program(program_file), load_program(out), _inputs(), donated_inputs=(4,))


@pytest.mark.integration
def test_cli_in_a_subprocess(program_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.pt2"
    result = subprocess.run(
        [sys.executable, "-m", "rewrite.cli", "rewrite", str(program_file), "-o", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size > 0


def test_readme_your_own_program_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Your own program", 1)[1].split("\n## ", 1)[0]
    (python,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (shell,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(python, "README.md", "exec"), {"__name__": "__readme__"})
    for line in shell.strip().splitlines():
        command = shlex.split(line.split("#", 1)[0])
        assert command[0] == "fx-aliasing"
        assert main(command[1:]) == 0, line
    out = capsys.readouterr().out
    assert "clone  clone  mul       remove  removable" in out and "equivalent on the saved example inputs: yes" in out
    assert (tmp_path / "report.html").exists() and load_program(tmp_path / "scale-rewritten.pt2")


# --- checks before any work -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["explain", "{missing}"], "no such file"),
        (["explain", "{dir}"], "is not a file"),
        (["explain", "{program}", "--html", "{dir}/nowhere/r.html"], "does not exist"),
        (["explain", "{program}", "--html", "{dir}/r.txt"], "must end with .html or .htm"),
        (["explain", "{program}", "--timeline", "{dir}/t.pdf"], "must end with .svg or .png"),
        (["explain", "{program}", "--html", "{dir}"], "must end with"),
        (["explain", "{program}", "--dot", "{dir}"], "is a directory"),
        (["explain", "{program}", "--dot", "{dir}/a.dot", "--timeline", "{dir}/a.dot"], "must end with .svg"),
        (["explain", "{program}", "--donated", "x,,y"], "an empty entry"),
        (["explain", "{program}", "--donated", "x-1"], "neither a placeholder position nor a name"),
        (["rewrite", "{program}", "-o", "{program}"], "is the input program"),
        (["rewrite", "{program}", "-o", "{dir}/no/out.pt2"], "does not exist"),
        (["rewrite", "{program}", "-o", "{dir}/out.pt2", "--import", "no_such_module_here"], "no module named"),
        (["explain", "{program}", "--json", "--summary"], "not allowed with argument --json"),
    ],
)
def test_arguments_are_checked_first(
    args: list[str], message: str, program_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_work(*a: object, **k: object) -> None:
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr("rewrite.commands.load_program", no_work)
    filled = [a.format(missing=tmp_path / "missing.pt2", dir=tmp_path, program=program_file) for a in args]
    assert main(filled) == 2
    err = capsys.readouterr().err
    assert "usage: fx-aliasing" in err and message in err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    ("command", "donated", "message"),
    [
        ("explain", "nope", "--donated 'nope': donated input 'nope' is not a placeholder of the program"),
        ("explain", "4,99", "--donated '4,99': donated input position 99 is out of range: the program has 6 placeholders"),
        ("rewrite", "99", "--donated '99': donated input position 99 is out of range"),
    ],
)
def test_donated_inputs_the_program_lacks_are_usage_errors(
    command: str, donated: str, message: str, program_file: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checked right after loading (the placeholders are the program's), before the analysis: exit status 2."""

    def no_work(*a: object, **k: object) -> None:
        raise AssertionError("the analysis started before --donated was checked")

    monkeypatch.setattr("rewrite.commands.explain", no_work)
    out = tmp_path / "out.pt2"
    args = [command, str(program_file), "--donated", donated] + (["-o", str(out)] if command == "rewrite" else [])
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = [line for line in captured.err.splitlines() if not line.startswith("fx-aliasing: loading")]
    assert len(err) == 2 and err[0].startswith("usage: fx-aliasing"), captured.err
    assert err[1].startswith(f"fx-aliasing {command}: error: {message}"), err[1]
    assert not out.exists()


def test_not_a_program_is_a_clear_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), path)
    assert main(["explain", str(path)]) == 1
    err = capsys.readouterr().err
    assert "is not an exported program" in err and "torch.export.save" in err
    assert "Traceback" not in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    # (the package metadata's version: a CUDA wheel from the index says 2.14.0 where torch.__version__ says 2.14.0+cu130)
    assert out == version_text() and out.startswith("fx-aliasing 0.") and f"torch {torch.__version__.split('+')[0]}" in out


def test_progress_only_for_slow_phases() -> None:
    import time

    quick, slow = io.StringIO(), io.StringIO()
    with ProgressReporter(quick, after=0.5)("a quick phase"):
        pass
    assert quick.getvalue() == ""
    with ProgressReporter(slow, after=0.05)("a slow phase"):
        time.sleep(0.3)
    lines = slow.getvalue().splitlines()
    assert lines[0] == "fx-aliasing: a slow phase ..." and lines[1].startswith("fx-aliasing: a slow phase done (")


def test_cli_reports_slow_phases_on_stderr(
    program_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("rewrite.cli.ProgressReporter", lambda: ProgressReporter(after=0.0))
    assert main(["explain", str(program_file)]) == 0
    captured = capsys.readouterr()
    for phase in (f"loading {program_file}", "analysing", "eliminating clones"):
        assert f"fx-aliasing: {phase} ..." in captured.err
    assert "fx-aliasing:" not in captured.out
