"""Execute the notebooks under ``notebooks/`` headless and check what they print.

The kernel is this interpreter (``sys.executable``) through a kernelspec written
to a temporary folder, so the notebooks see exactly the environment the tests
run in, whatever kernels the machine has installed.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
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


def _has_svg(nb: nbformat.NotebookNode) -> bool:
    return any(
        "image/svg+xml" in output.get("data", {})
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )


def test_every_notebook_is_listed() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == ["storage_graphs.ipynb"]


def test_notebooks_are_committed_without_outputs() -> None:
    for path in NOTEBOOKS.glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [], f"{path.name}: clear outputs before committing"
                assert cell.execution_count is None


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
    if shutil.which("dot"):
        assert _has_svg(nb), "dot is installed but the storage graph was not rendered"
    else:
        assert "Graphviz 'dot' not found" in text
        assert "digraph" in text
