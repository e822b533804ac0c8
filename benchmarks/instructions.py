"""Instructions executed by one measure, this checkout against another revision, under callgrind.

Run from the repository root (needs ``valgrind``: ``apt-get install valgrind``)::

    python -m benchmarks.instructions --base HEAD~1                    # shared-weight graph, 2k nodes, all measures
    python -m benchmarks.instructions --base main --shape synthetic --nodes 4k --measures analyze

On a machine shared with other jobs, the CPU time of identical runs moves by
up to a half within minutes (``benchmarks/README.md``), so a change of a few
percent is invisible in timings. The number of instructions a measure
executes is the same from run to run (within about 0.5% for this project's
measures; vLLM's pass moved by up to 1.5%) and answers "is this
revision cheaper than that one" where timings cannot. It is no substitute for
the targets, which are judged on CPU time (``benchmarks/scaling.py``): it does
not see cache misses, and callgrind runs about fifty times slower.

Each measure runs in a child process under ``valgrind --tool=callgrind``,
with instrumentation off until the graph is built and one warm-up run is
done, then counting only inside the measured call:

- ``analyze``: ``aliasing.analyze`` on the GraphModule;
- ``eliminate``: ``rewrite.eliminate_clones`` on a copy of the bare Graph;
- ``vllm``: vLLM's ``UnsafeCloneEliminationPass`` on a copy of the Graph
  (only where ``vllm`` is installed; the same in both trees).

The graph shapes are ``scaling.py``'s (``shared``, ``synthetic``; ``--nodes`` sets
their size) and ``models``: the ``torch.export`` graphs of ``benchmarks/models.py``'s
five models (1,025 nodes in all), each measured once in turn in one count.

The other revision is checked out with ``git worktree`` into a temporary
folder (removed afterwards) and put first on ``sys.path`` for its children.
A table is printed and JSON written (``--out``, default
``benchmarks/results/instructions-<shape>.json``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch.fx

from benchmarks.scaling import SHAPES, parse_size

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
MEASURES = ("analyze", "eliminate", "vllm")
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def _child(tree: str, shape: str, nodes: int, measure: str) -> None:
    """In the child (under callgrind): build the graph, warm up, turn instrumentation on, run the measure once."""
    import aliasing
    import rewrite
    from benchmarks.scaling import _vllm_pass
    from rewrite.testing import copy_program

    if not aliasing.__file__ or not Path(aliasing.__file__).resolve().is_relative_to(Path(tree).resolve()):
        raise SystemExit(f"aliasing was imported from {aliasing.__file__}, not from {tree}")
    graphs = _graphs(shape, nodes)
    if measure == "analyze":
        run: Any = aliasing.analyze
        targets: list[Any] = [copy_program(gm) for gm in graphs]
    elif measure == "eliminate":
        run, targets = rewrite.eliminate_clones, [copy_program(gm).graph for gm in graphs]
    else:
        run, targets = _vllm_pass(), [copy_program(gm).graph for gm in graphs]
        if run is None:
            raise SystemExit("vllm is not installed here")
    for gm in graphs:
        warm = copy_program(gm)
        run(warm if measure == "analyze" else warm.graph)  # op templates, imports, caches
    # Instrumentation on (callgrind acts on the command while this process runs code).
    control = subprocess.Popen(["callgrind_control", "-i", "on", str(os.getpid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while control.poll() is None and time.monotonic() < deadline:
        sum(range(1000))
    # Counted: only while functools.reduce (a C function the measure does not call) is on the stack.
    functools.reduce(lambda _, t: run(t), targets, None)


def _graphs(shape: str, nodes: int) -> list[torch.fx.GraphModule]:
    """The graphs one count measures: one of ``scaling.py``'s shapes at ``nodes`` nodes, or the models' export graphs."""
    if shape == "models":
        from benchmarks.models import MODELS, capture_export

        return [capture_export(name) for name in MODELS]
    build, layers_for = SHAPES[shape]
    return [build(layers_for(nodes))[0]]


def count(tree: Path, shape: str, nodes: int, measure: str) -> int:
    """Instructions ``measure`` executes on the ``shape`` graph of ``nodes`` nodes, with the packages of ``tree``."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
            "--toggle-collect=functools_reduce", f"--callgrind-out-file={tmp}/callgrind.out",
            sys.executable, str(Path(__file__).resolve()), "--child", str(tree), shape, str(nodes), measure,
        ]  # fmt: skip
        # (a fixed hash seed: the order of sets of strings, and so the work, is the same in every run)
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    found = _COLLECTED.findall(done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{measure} under callgrind failed in {tree} (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return int(found[-1])


def _worktree(ref: str, where: Path) -> Path:
    tree = where / "base"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=ROOT, check=True, capture_output=True)
    return tree


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", default="HEAD", help="the revision to compare this checkout with (default HEAD)")
    p.add_argument("--shape", default="shared", choices=("shared", "synthetic", "models"))
    p.add_argument("--nodes", type=parse_size, default="2k", help="graph size (k = 1000; default 2k)")
    p.add_argument("--measures", default=",".join(MEASURES), help="comma-separated, of: " + ", ".join(MEASURES))
    p.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/instructions-<shape>.json)")
    p.add_argument("--child", nargs=4, metavar=("TREE", "SHAPE", "NODES", "MEASURE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        tree, shape, nodes, measure = args.child
        _child(tree, shape, int(nodes), measure)
        return 0
    nodes: int = args.nodes
    measures = [m for m in args.measures.split(",") if m]
    unknown = set(measures) - set(MEASURES)
    if unknown:
        p.error(f"unknown measures: {sorted(unknown)}")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind (with callgrind_control) is not installed: apt-get install valgrind", file=sys.stderr)
        return 2
    actual = sum(len(gm.graph.nodes) for gm in _graphs(args.shape, nodes))
    rows: list[dict[str, Any]] = []
    vllm: int | None = None
    with tempfile.TemporaryDirectory() as tmp:
        base = _worktree(args.base, Path(tmp))
        try:
            for m in measures:
                print(f"counting {m} ({args.shape}, {actual} nodes)...", file=sys.stderr)
                if m == "vllm":  # the same in both trees: counted once, the reference for ``eliminate``
                    try:
                        vllm = count(ROOT, args.shape, nodes, m)
                    except RuntimeError as e:
                        print(f"vllm left out: {str(e).splitlines()[-1]}", file=sys.stderr)
                    continue
                theirs, ours = count(base, args.shape, nodes, m), count(ROOT, args.shape, nodes, m)
                rows.append({"measure": m, "base": theirs, "this": ours, "ratio": ours / theirs})
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    print(f"{args.shape} graph{'s' if args.shape == 'models' else ''}, {actual} nodes; instructions (callgrind)")
    print(f"| measure | {args.base} | this checkout ({head} and the working tree) | ratio | per node (this) |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['measure']} | {r['base']:,} | {r['this']:,} | {r['ratio']:.3f} | {r['this'] / actual:,.0f} |")
    ours = next((r["this"] for r in rows if r["measure"] == "eliminate"), None)
    if vllm is not None:
        print(f"| vllm (both) | {vllm:,} | {vllm:,} | | {vllm / actual:,.0f} |")
        if ours is not None:
            print(f"eliminate / vLLM's pass: {ours / vllm:.2f}")
    base_commit = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    result = {"base": args.base, "base_commit": base_commit, "head": head, "working_tree_counted": True, "shape": args.shape, "nodes": actual, "rows": rows, "vllm": vllm}
    out = args.out or RESULTS / f"instructions-{args.shape}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
