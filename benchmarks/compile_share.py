"""The pass's share of ``torch.compile``: fx-aliasing's time against the whole compile, on the real models.

Every model of :mod:`benchmarks.models` (small GPT-2, Llama, BERT, ResNet and
ViT, in inference: ``eval()`` and ``torch.no_grad()``) is compiled with
``torch.compile`` (Inductor, CPU) two ways, alternately, ``--repeats`` times:

- **stock**: no custom pass;
- **ours**: ``rewrite.inductor.compile_options()``, the one-line install
  (:class:`rewrite.inductor.CloneEliminationPass` as
  ``post_grad_custom_post_pass`` and :class:`rewrite.inductor.JointGraphGuard`
  as ``joint_custom_pre_pass``).

Each compile is cold: ``torch._dynamo.reset()``, Inductor's FX graph cache off
(``fx_graph_cache=False``) and a fresh, empty ``TORCHINDUCTOR_CACHE_DIR``
(``torch._inductor.utils.fresh_cache``), so the C++ kernels are compiled
again too. The **compile time** is the first call of the compiled model (wall:
``time.perf_counter``; CPU: ``time.process_time`` of this process, so not of
Inductor's compile workers), after one untimed compile in each configuration
(the first compile of a process also pays for imports and set-up). The **pass time** is the time spent inside the two
passes' ``__call__``, measured by wrapping each pass object from the outside
(:class:`TimedPass`; the wrapper delegates ``uuid()``). ``nodes`` is the size
of the post-grad graph(s) our pass received; ``share`` is pass time over the
compile time with the pass, and ``overhead`` the difference of the two
compile times (noisy: it is a difference of two medians of cold compiles).

Usage::

    python -m benchmarks.compile_share                     # every model, 3 repeats
    python -m benchmarks.compile_share --models resnet --repeats 1

Prints a table and writes ``benchmarks/results/compile_share.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from aliasing.core.analysis import counting_analyses
from benchmarks.models import MODELS
from rewrite.inductor import CloneEliminationPass, compile_options

__all__ = ["CONFIGS", "Compile", "TimedPass", "compile_once", "format_table", "main", "measure", "summarise"]

RESULTS = Path(__file__).resolve().parent / "results" / "compile_share.json"
CONFIGS: tuple[str, ...] = ("stock", "ours")


class TimedPass(CustomGraphPass):
    """Wraps a custom Inductor pass and adds up the wall and CPU time of its calls.

    ``uuid()`` is the wrapped pass's (so its cache key and its compile
    tracking are unchanged); ``nodes`` adds up the sizes of the graphs it was
    given, before it ran.

    Examples
    --------
    >>> import torch.fx
    >>> t = TimedPass(CloneEliminationPass())
    >>> t(torch.fx.Graph())
    >>> t.calls, t.nodes, t.wall_s >= 0
    (1, 0, True)
    """

    def __init__(self, inner: CustomGraphPass) -> None:
        self.inner = inner
        self.calls = 0
        self.nodes = 0
        self.wall_s = 0.0
        self.cpu_s = 0.0

    def uuid(self) -> Any:
        """The wrapped pass's ``uuid()``."""
        return self.inner.uuid()

    def __call__(self, graph: torch.fx.Graph) -> None:
        """Run the wrapped pass on ``graph`` and add its time."""
        self.nodes += len(graph.nodes)
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            self.inner(graph)
        finally:
            self.wall_s += time.perf_counter() - wall
            self.cpu_s += time.process_time() - cpu
            self.calls += 1


@dataclass
class Compile:
    """One cold compile of one model in one configuration."""

    model: str
    config: str
    wall_s: float
    cpu_s: float
    pass_wall_s: float = 0.0
    pass_cpu_s: float = 0.0
    nodes: int = 0
    graphs: int = 0
    removed: int = 0
    kept: int = 0
    passes: dict[str, float] = field(default_factory=dict)
    analyses: int = 0  #: alias analyses built during the compile (aliasing.core.analysis.counting_analyses)


def compile_once(name: str, config: str) -> Compile:
    """Compile model ``name`` cold in ``config`` (``"stock"`` or ``"ours"``) and time its first call."""
    from torch._inductor.utils import fresh_cache

    make, make_inputs = MODELS[name]
    model = make().eval()
    inputs = make_inputs()
    options: dict[str, Any] = {}
    timed: dict[str, TimedPass] = {}
    if config == "ours":
        options = compile_options()
        for key in ("post_grad_custom_post_pass", "joint_custom_pre_pass"):
            timed[key] = TimedPass(options[key])
            options[key] = timed[key]
    elif config != "stock":
        raise ValueError(f"unknown configuration {config!r}")
    torch._dynamo.reset()
    with fresh_cache(), torch._inductor.config.patch(fx_graph_cache=False), torch.no_grad(), counting_analyses() as n:
        compiled = torch.compile(model, backend="inductor", options=options)
        wall, cpu = time.perf_counter(), time.process_time()
        compiled(*inputs)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    torch._dynamo.reset()
    out = Compile(name, config, wall, cpu, analyses=n.count)
    if timed:
        post = timed["post_grad_custom_post_pass"]
        inner = post.inner
        if not isinstance(inner, CloneEliminationPass) or inner.last_report_source != "pass" or not post.calls:
            raise RuntimeError(f"{name}: our pass did not run (source {getattr(inner, 'last_report_source', None)})")
        out.pass_wall_s = sum(t.wall_s for t in timed.values())
        out.pass_cpu_s = sum(t.cpu_s for t in timed.values())
        out.nodes, out.graphs = post.nodes, post.calls
        if inner.last_report is not None:
            out.removed, out.kept = len(inner.last_report.removed), len(inner.last_report.kept)
        out.passes = {key: round(t.wall_s, 6) for key, t in timed.items()}
    return out


def measure(models: Sequence[str], repeats: int, *, warmup: bool = True) -> list[Compile]:
    """``repeats`` rounds; in each, every model compiled stock and with ours, alternately.

    With ``warmup``, the first model is first compiled once in each configuration, untimed: the first
    compile of a process also pays for imports and Inductor's one-time set-up.
    """
    if warmup and models:
        for config in CONFIGS:
            compile_once(models[0], config)
    runs: list[Compile] = []
    for r in range(repeats):
        for name in models:
            for config in CONFIGS:
                c = compile_once(name, config)
                print(f"  round {r + 1} {name} {config}: {c.wall_s:.2f} s (pass {c.pass_wall_s * 1e3:.1f} ms)", file=sys.stderr, flush=True)
                runs.append(c)
    return runs


def summarise(runs: Sequence[Compile]) -> list[dict[str, Any]]:
    """Per model: medians of the compile times with and without the pass, of the pass's time, and its share."""
    rows: list[dict[str, Any]] = []
    for name in dict.fromkeys(c.model for c in runs):
        stock = [c for c in runs if c.model == name and c.config == "stock"]
        ours = [c for c in runs if c.model == name and c.config == "ours"]
        if not stock or not ours:
            continue

        def med(cs: Sequence[Compile], attr: str) -> float:
            return float(statistics.median(getattr(c, attr) for c in cs))

        row: dict[str, Any] = {
            "model": name,
            "nodes": ours[0].nodes,
            "graphs": ours[0].graphs,
            "removed": ours[0].removed,
            "kept": ours[0].kept,
            "analyses": ours[0].analyses,
            "repeats": len(ours),
        }
        for clock in ("wall", "cpu"):
            with_s, without_s, pass_s = med(ours, f"{clock}_s"), med(stock, f"{clock}_s"), med(ours, f"pass_{clock}_s")
            row[clock] = {
                "compile_stock_s": without_s,
                "compile_ours_s": with_s,
                "pass_s": pass_s,
                "share_pct": 100 * pass_s / with_s if with_s else 0.0,
                "overhead_s": with_s - without_s,
                "pass_us_per_node": pass_s / row["nodes"] * 1e6 if row["nodes"] else 0.0,
            }
        rows.append(row)
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`summarise` rows (wall-clock medians; CPU share in the last column)."""
    lines = [
        "| model | post-grad nodes | analyses | compile, stock (s) | compile, ours (s) | our pass (ms) | share (wall) | share (CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        w, c = r["wall"], r["cpu"]
        lines.append(
            f"| {r['model']} | {r['nodes']} | {r.get('analyses', 0)} | {w['compile_stock_s']:.2f} | {w['compile_ours_s']:.2f} | "
            f"{w['pass_s'] * 1e3:.1f} | {w['share_pct']:.2f}% | {c['share_pct']:.2f}% |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Compile every selected model both ways, print the table and write the JSON."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.compile_share", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="cold compiles per model and configuration (default 3)")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated names (default: all)")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed first compiles")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    runs = measure(models, max(1, args.repeats), warmup=not args.no_warmup)
    rows = summarise(runs)
    print(format_table(rows))
    worst = max((r["wall"]["share_pct"] for r in rows), default=0.0)
    print(f"largest share of the compile (wall): {worst:.2f}%")
    payload = {
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "compile_threads": torch._inductor.config.compile_threads,
        },
        "method": "cold compiles (dynamo reset, fx_graph_cache off, fresh TORCHINDUCTOR_CACHE_DIR), first call timed; "
        "medians over repeats, after one untimed compile per configuration; pass time = post-grad pass + joint-graph guard",
        "models": rows,
        "runs": [asdict(c) for c in runs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
