"""The notebooks under ``notebooks/``: committed with their outputs, and re-executed here.

The committed notebook carries its outputs, pictures included, so that a reader
of the repository sees them without running anything; the test checks that they
are there and hold no machine-local paths. Re-executing it headless checks that
it still runs and still shows what it says.

The kernel is this interpreter (``sys.executable``) through a kernelspec written
to a temporary folder, so the notebooks see exactly the environment the tests
run in, whatever kernels the machine has installed. To refresh the committed
outputs after changing a notebook, run ``python tests/project/test_notebooks.py``.

The README says how a user runs the notebook (``jupyter execute``, ``jupyter
notebook``, the ``fx-aliasing`` kernel); the first of those commands is run here
as written, from the repository's root.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

#: runs the notebooks in a Jupyter kernel
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
KERNEL_NAME = "fx-aliasing-tests"


def _kernel_manager(spec_dir: Path) -> KernelManager:
    kernel_dir = spec_dir / KERNEL_NAME
    kernel_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fx-aliasing tests",
        "language": "python",
    }
    (kernel_dir / "kernel.json").write_text(json.dumps(spec))
    ksm = KernelSpecManager(kernel_dirs=[str(spec_dir)])
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm)


def _execute(path: Path, workdir: Path) -> nbformat.NotebookNode:
    nb: nbformat.NotebookNode = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        km=_kernel_manager(workdir / "kernels"),
        timeout=600,
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()
    return nb


def _text_outputs(nb: nbformat.NotebookNode) -> str:
    parts: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output.get("text", ""))
            elif "data" in output and "text/plain" in output["data"]:
                parts.append(output["data"]["text/plain"])
    return "".join(parts)


def _pictures(nb: nbformat.NotebookNode) -> list[int]:
    """Indexes of the code cells whose outputs include a PNG picture."""
    return [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
    ]


def _cell_of(nb: nbformat.NotebookNode, source: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and source in c.source)


def test_every_notebook_is_listed() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == ["storage_graphs.ipynb"]


def test_notebooks_are_committed_with_their_outputs() -> None:
    for path in NOTEBOOKS.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.outputs for c in code), f"{path.name}: execute it and commit it with its outputs"
        assert all(o.get("output_type") != "error" for c in code for o in c.outputs)
        assert not any(o.get("name") == "stderr" for c in code for o in c.outputs), f"{path.name}: warnings in outputs"
        text = _text_outputs(nb)
        for local in ("/tmp/", "/work/", "/home/", "/root/"):
            assert local not in text, f"{path.name}: a machine-local path in the outputs"
    nb = nbformat.read(NOTEBOOKS / "storage_graphs.ipynb", as_version=4)
    # the timelines (demo, around a clone, the exported model) and the storage graphs
    timelines = [_cell_of(nb, "aliasing.plot_timeline(analysis, decisions=report)"),
                 _cell_of(nb, 'aliasing.plot_timeline(analysis, around="clone"'), _cell_of(nb, "tiny.timeline()")]
    graphs = [_cell_of(nb, "show_dot(dot_source)"), _cell_of(nb, "show_dot(tiny.dot())")]
    assert set(timelines + graphs) <= set(_pictures(nb))


def test_storage_graphs_notebook_runs(tmp_path: Path) -> None:
    nb = _execute(NOTEBOOKS / "storage_graphs.ipynb", tmp_path)
    text = _text_outputs(nb)
    # the storages table lists the caller's inputs with their role
    assert "user_input" in text
    assert "k_cache_1" in text
    # q, k, v share a storage but are disjoint
    assert "getitem / getitem_1: may_alias=True  may_overlap=False" in text
    assert "getitem / getitem_2: may_alias=True  may_overlap=False" in text
    # the decision table and the equivalence check ran
    assert "removed: ('clone_3', 'clone_4')" in text
    assert "equivalent: yes" in text
    # the exported model: buffers, its decisions, the donated input, the saved and rewritten program
    assert "b_k_cache: BUFFER target='k_cache'" in text
    assert "clone_2  clone  x         keep    C5 clone-written-original-is-caller-memory" in text
    assert "2 removed, 1 kept" in text  # donated x: h is returned, and x may come at any offset (C1)
    assert "rewritten program equivalent: yes" in text
    assert "34 nodes drawn as 34 boxes" in text
    pictures = set(_pictures(nb))
    for source in ("aliasing.plot_timeline(analysis, decisions=report)", "tiny.timeline()"):
        assert _cell_of(nb, source) in pictures, f"no timeline from {source}"
    if shutil.which("dot"):
        assert _cell_of(nb, "show_dot(dot_source)") in pictures, "dot is installed but the graph was not rendered"
    else:
        assert "Graphviz 'dot' not found" in text
        assert "digraph" in text


def test_the_readme_says_how_to_run_it_and_the_command_works(tmp_path: Path) -> None:
    section = (ROOT / "README.md").read_text().split("\n## Pictures", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    commands = [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]
    assert commands[0] == "jupyter execute notebooks/storage_graphs.ipynb"
    assert "pip install notebook && jupyter notebook notebooks/storage_graphs.ipynb" in commands
    # the kernel .ci/run installs, for a Jupyter outside this environment
    assert "python -m ipykernel install --user --name fx-aliasing" in " ".join(section.split())
    assert "--kernel_name=fx-aliasing" in section
    jupyter = Path(sys.executable).parent / "jupyter"
    if not jupyter.exists():
        pytest.skip(f"no jupyter command beside {sys.executable} (nbclient installs it)")
    env = {**os.environ, "PATH": f"{jupyter.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        shlex.split(commands[0]), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Executing notebook with kernel: python3" in result.stderr


def _refresh(path: Path) -> None:
    """Execute ``path`` and write it back with its outputs (stderr dropped)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        metadata = dict(nbformat.read(path, as_version=4).metadata)
        nb = _execute(path, Path(folder))
    nb.metadata = metadata
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if o.get("name") != "stderr"]
    nbformat.validate(nb)
    nbformat.write(nb, path)


if __name__ == "__main__":
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        _refresh(notebook)
        print(f"refreshed {notebook.name}")
