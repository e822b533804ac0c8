"""Real model graphs for the benchmarks: small GPT-2, Llama, BERT, ResNet and ViT models.

Each model is written here with ``torch.nn`` (no downloads, no torchvision) at a
size that gives graphs of roughly 150 to 1,000 nodes, and captured two ways:

- ``export``: ``torch.export.export`` (training IR: ATen ops with in-place
  updates of buffers, ``batch_norm`` in train mode);
- ``post_grad``: the post-grad graph Inductor passes to
  ``post_grad_custom_post_pass`` under ``torch.compile`` (functional ATen after
  decomposition).

``python -m benchmarks.models`` prints, per graph, the nodes and the median CPU
time of ``aliasing.analyze`` in microseconds per node (target: the median over
the graphs at most 5; the worst, and each graph's minimum, are reported beside
it), and writes ``benchmarks/results/models.json``. The graphs are captured
first, then each is analysed ``--repeats`` times in a row (``--interleave``: in
rounds, one analysis of each graph per round).

``--vs-vllm`` also times the whole pass, ``rewrite.eliminate_clones`` on the bare
``Graph``, side by side with vLLM's ``UnsafeCloneEliminationPass`` (where ``vllm`` is
installed) on fresh copies of every graph, interleaved round by round in one process
(CPU medians), with the clones each removes: graphs with few clones or none, where the
unsafe pass costs little more than a loop over the nodes (target: at most 1.0x). Beside
them, the schema floor (:func:`benchmarks.scaling.schema_floor`: one visit of each node
that records, by its op's schema, which storages it reads and writes), the least a
whole-graph alias analysis does: where it alone costs more than vLLM's pass (which
looks at the clones and their users only), no analysis of the whole graph can match it.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import aliasing

__all__ = ["MODELS", "capture_export", "capture_post_grad", "compare_passes", "main", "time_analyze"]

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "models.json"
#: Target of the real-model measure: analysis time per node, microseconds, median over the graphs.
TARGET_US_PER_NODE = 5.0


class _RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class _LlamaBlock(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = _RMSNorm(dim), _RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(dim, 2 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))

        def rotate(y: Tensor) -> Tensor:
            y1, y2 = y.chunk(2, dim=-1)
            return torch.cat((y1 * cos - y2 * sin, y1 * sin + y2 * cos), dim=-1)

        att = torch.nn.functional.scaled_dot_product_attention(rotate(q), rotate(k), v, is_causal=True)
        x = x + self.out(att.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, layers: int = 4, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_LlamaBlock(dim, heads) for _ in range(layers))
        self.head_dim = dim // heads

    def forward(self, x: Tensor) -> Tensor:
        t = x.shape[1]
        angles = torch.arange(t, dtype=x.dtype)[:, None] * torch.arange(self.head_dim // 2, dtype=x.dtype)[None]
        cos, sin = angles.cos(), angles.sin()
        for block in self.blocks:
            x = block(x, cos, sin)
        return x


class _GPT2Block(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT2(nn.Module):
    def __init__(self, layers: int = 4, dim: int = 64, vocab: int = 100) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(64, dim)
        self.blocks = nn.Sequential(*(_GPT2Block(dim) for _ in range(layers)))
        self.ln = nn.LayerNorm(dim)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        return self.ln(self.blocks(x)) @ self.wte.weight.t()


class BERT(nn.Module):
    def __init__(self, layers: int = 4, dim: int = 64, vocab: int = 100) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pool = nn.Linear(dim, dim)

    def forward(self, ids: Tensor) -> Tensor:
        h = self.encoder(self.embed(ids))
        return torch.tanh(self.pool(h[:, 0]))


class _BasicBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.conv2, self.bn2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)

    def forward(self, x: Tensor) -> Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class ResNet(nn.Module):
    def __init__(self, blocks: int = 8, channels: int = 8) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU())
        self.body = nn.Sequential(*(_BasicBlock(channels) for _ in range(blocks)))
        self.fc = nn.Linear(channels, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.body(self.stem(x)).mean((2, 3)))


class ViT(nn.Module):
    def __init__(self, layers: int = 4, dim: int = 64, patch: int = 4) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        layer = nn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: Tensor) -> Tensor:
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat((self.cls.expand(x.shape[0], -1, -1), tokens), dim=1)
        return self.head(self.encoder(tokens)[:, 0])


#: name -> (model factory in train mode, example inputs)
MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[Tensor, ...]]]] = {
    "gpt2": (lambda: GPT2().train(), lambda: (torch.randint(0, 100, (2, 16)),)),
    "llama": (lambda: Llama().train(), lambda: (torch.randn(2, 16, 64),)),
    "bert": (lambda: BERT().train(), lambda: (torch.randint(0, 100, (2, 16)),)),
    "resnet": (lambda: ResNet().train(), lambda: (torch.randn(2, 3, 16, 16),)),
    "vit": (lambda: ViT().train(), lambda: (torch.randn(2, 3, 16, 16),)),
}


def capture_export(name: str) -> torch.fx.GraphModule:
    """The ``torch.export`` graph module of model ``name``."""
    make, inputs = MODELS[name]
    return torch.export.export(make(), inputs()).graph_module


def capture_post_grad(name: str) -> torch.fx.Graph:
    """The post-grad graph Inductor hands to ``post_grad_custom_post_pass`` for model ``name`` (inference)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    captured: list[torch.fx.Graph] = []

    class Capture(CustomGraphPass):
        def __call__(self, graph: torch.fx.Graph) -> None:
            captured.append(copy.deepcopy(graph))

        def uuid(self) -> bytes:
            return get_hash_for_files((__file__,)) + name.encode()

    make, inputs = MODELS[name]
    model = make().eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, options={"post_grad_custom_post_pass": Capture(), "fx_graph_cache": False})
    with torch.no_grad():
        compiled(*inputs())
    if not captured:
        raise RuntimeError(f"no post-grad graph captured for {name}")
    return captured[-1]


def compare_passes(
    graphs: list[tuple[str, str, torch.fx.GraphModule | torch.fx.Graph]], repeats: int, *, with_vllm: bool = True
) -> list[dict[str, Any]]:
    """Per graph: CPU medians of ``rewrite.eliminate_clones`` on a fresh copy of its bare ``Graph`` and,
    where ``vllm`` is installed (and ``with_vllm``), of vLLM's ``UnsafeCloneEliminationPass`` on another,
    interleaved round by round; the clones of the graph and the clones each pass removed.

    The copies are made before each clock starts; a pass that raises is recorded as crashed.
    """
    import rewrite
    from benchmarks.scaling import _vllm_pass, schema_floor

    theirs = _vllm_pass() if with_vllm else None

    def clones(g: torch.fx.Graph) -> int:
        return len(g.find_nodes(op="call_function", target=torch.ops.aten.clone.default))

    def timed(run: Callable[[torch.fx.Graph], object], g: torch.fx.Graph) -> tuple[float, int | None]:
        before = clones(g)
        start = time.process_time()
        try:
            run(g)
        except Exception:
            return time.process_time() - start, None  # crashed
        return time.process_time() - start, before - clones(g)

    rows: list[dict[str, Any]] = []
    for name, kind, target in graphs:
        graph = target.graph if isinstance(target, torch.fx.GraphModule) else target
        ours_runs: list[float] = []
        theirs_runs: list[float] = []
        floor_runs: list[float] = []
        removed: dict[str, int | None] = {}
        for _ in range(repeats + 1):  # the first round warms up
            t, removed["ours"] = timed(rewrite.eliminate_clones, copy.deepcopy(graph))
            ours_runs.append(t)
            start = time.process_time()
            schema_floor(graph)
            floor_runs.append(time.process_time() - start)
            if theirs is not None:
                t, removed["vllm"] = timed(theirs, copy.deepcopy(graph))
                theirs_runs.append(t)
        row: dict[str, Any] = {
            "model": name,
            "graph": kind,
            "nodes": len(graph.nodes),
            "clones": clones(graph),
            "ours_ms": statistics.median(ours_runs[1:]) * 1e3,
            "schema_floor_ms": statistics.median(floor_runs[1:]) * 1e3,
            "removed_ours": removed["ours"],
        }
        if theirs is not None:
            row["vllm_ms"] = statistics.median(theirs_runs[1:]) * 1e3
            row["removed_vllm"] = removed["vllm"]
            row["ratio"] = row["ours_ms"] / row["vllm_ms"]
        rows.append(row)
    return rows


def time_analyze(target: torch.fx.GraphModule | torch.fx.Graph, repeats: int) -> dict[str, Any]:
    """Median (and minimum) CPU time of ``aliasing.analyze(target)`` over ``repeats`` runs, and per node."""
    return _row(target, [_time_once(target) for _ in range(repeats)])


def _time_once(target: torch.fx.GraphModule | torch.fx.Graph) -> float:
    start = time.process_time()
    aliasing.analyze(target)
    return time.process_time() - start


def _row(target: torch.fx.GraphModule | torch.fx.Graph, runs: list[float]) -> dict[str, Any]:
    graph = target.graph if isinstance(target, torch.fx.GraphModule) else target
    nodes = len(graph.nodes)
    median = statistics.median(runs)
    return {
        "nodes": nodes,
        "median_s": median,
        "us_per_node": median / nodes * 1e6,
        "min_us_per_node": min(runs) / nodes * 1e6,
        "runs_s": [round(r, 5) for r in runs],
    }


def main(argv: list[str] | None = None) -> int:
    """Capture every model both ways, time the analysis, print the table and write the JSON.

    Every graph is captured first (no compilation runs between the timings), analysed once to
    warm up, then timed ``--repeats`` times in a row (the figures the target is judged on). With
    ``--interleave`` the analyses run in rounds instead, one of each graph per round: a slow
    spell of a shared machine then falls on all graphs alike, and each analysis starts with
    the caches holding another graph (colder, as in a compiler between its passes).
    """
    p = argparse.ArgumentParser(prog="python -m benchmarks.models", description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=21, help="timed analyses of each graph")
    p.add_argument("--interleave", action="store_true", help="one analysis of every graph per round")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated names")
    p.add_argument("--no-post-grad", action="store_true", help="skip the torch.compile captures (slow)")
    p.add_argument("--vs-vllm", action="store_true", help="also time eliminate_clones beside vLLM's pass")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    graphs: list[tuple[str, str, torch.fx.GraphModule | torch.fx.Graph]] = []
    for name in args.models.split(","):
        captures: list[tuple[str, Callable[[], torch.fx.GraphModule | torch.fx.Graph]]] = [
            ("export", lambda name=name: capture_export(name))
        ]
        if not args.no_post_grad:
            captures.append(("post_grad", lambda name=name: capture_post_grad(name)))
        for kind, capture in captures:
            print(f"capturing {name} ({kind})", file=sys.stderr, flush=True)
            graphs.append((name, kind, capture()))
    for _, _, g in graphs:  # warm-up: op templates, caches
        aliasing.analyze(g)
    if args.interleave:
        runs: list[list[float]] = [[] for _ in graphs]
        for _ in range(args.repeats):
            for i, (_, _, g) in enumerate(graphs):
                runs[i].append(_time_once(g))
    else:
        runs = [[_time_once(g) for _ in range(args.repeats)] for _, _, g in graphs]
    rows = [{"model": name, "graph": kind, **_row(g, r)} for (name, kind, g), r in zip(graphs, runs)]
    print("| model | graph | nodes | analyze (ms, CPU median) | us per node (median) | us per node (min) |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['model']} | {r['graph']} | {r['nodes']} | {r['median_s'] * 1000:.2f} | {r['us_per_node']:.1f} "
            f"| {r['min_us_per_node']:.1f} |"
        )
    worst = max(r["us_per_node"] for r in rows)
    median = statistics.median(r["us_per_node"] for r in rows)
    median_of_min = statistics.median(r["min_us_per_node"] for r in rows)
    met = median <= TARGET_US_PER_NODE
    print(
        f"median: {median:.1f} us per node (target <= {TARGET_US_PER_NODE:.0f}): {'MET' if met else 'NOT MET'}; "
        f"worst: {worst:.1f}; median of the minimums: {median_of_min:.1f}"
    )
    if args.vs_vllm:
        summary_vs = _print_comparison(compare_passes(graphs, args.repeats))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "median_us_per_node": median,
        "worst_us_per_node": worst,
        "median_of_min_us_per_node": median_of_min,
        "meets_target": met,
        "repeats": args.repeats,
        "interleaved": args.interleave,
    }
    if args.vs_vllm:
        summary["vs_vllm"] = summary_vs
    args.out.write_text(json.dumps({"target_us_per_node": TARGET_US_PER_NODE, **summary, "graphs": rows}, indent=2) + "\n")
    return 0


def _print_comparison(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Print the side-by-side table; the rows with the worst and median ratio (None without vllm)."""
    print()
    print(
        "| model | graph | nodes | clones | eliminate_clones (ms) | vLLM's pass (ms) | ratio | schema floor (ms)"
        " | floor / vLLM | removed (ours / vLLM) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        theirs = f"{r['vllm_ms']:.3f}" if "vllm_ms" in r else "-"
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
        floor_ratio = f"{r['schema_floor_ms'] / r['vllm_ms']:.2f}" if "vllm_ms" in r else "-"
        vllm_removed = "crashed" if r.get("removed_vllm", 0) is None else r.get("removed_vllm", "-")
        print(
            f"| {r['model']} | {r['graph']} | {r['nodes']} | {r['clones']} | {r['ours_ms']:.3f} | {theirs} | {ratio} "
            f"| {r['schema_floor_ms']:.3f} | {floor_ratio} | {r['removed_ours']} / {vllm_removed} |"
        )
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    worst = max(ratios) if ratios else None
    median = statistics.median(ratios) if ratios else None
    if ratios:
        print(f"ratio median {median:.2f}, worst {worst:.2f} (target <= 1.0 on every graph: {'MET' if worst <= 1.0 else 'NOT MET'})")
    return {"median_ratio": median, "worst_ratio": worst, "rows": rows}


if __name__ == "__main__":
    raise SystemExit(main())
