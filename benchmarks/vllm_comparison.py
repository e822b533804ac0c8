"""fx-aliasing's vLLM pass and vLLM's ``UnsafeCloneEliminationPass``, side by side on the same graphs.

For every program below, traced once with ``make_fx(tracing_mode="fake")``
(one fake mode, as in the post-grad graph vLLM's pass manager receives), both
passes run on fresh copies of the graph under vLLM's pass context, with the
program's donated inputs in ``donated_input_ids``:

- ``ours``: :class:`rewrite.vllm.CloneEliminationPass`;
- ``vllm``: ``vllm.compilation.passes.ir.clone_elimination.UnsafeCloneEliminationPass``,
  read from the installed vLLM package at run time.

Per pass it records the clones removed and kept, whether the result is
**wrong** (``rewrite.testing.check_equivalent`` on real inputs: the clause that
failed), whether the pass **crashed** (raised; vLLM's compilation would fail),
and the CPU time of the call (``time.process_time``, median of ``--repeats``
rounds, both passes interleaved in one process). Neither includes generating the
``GraphModule``'s Python code: ours marks it stale when it changed the graph (it
is generated on first use, :func:`rewrite.editing.recompile.recompile_lazily`),
vLLM's leaves it to Inductor, and the harness recompiles after the clock stops.

The programs:

- ``vllm-tests``: the programs of vLLM's own tests of its pass (clone only
  read, written with the original read later or dead, chains, two clones of an
  input, donated, non-donated and mixed inputs, and the snapshot of an input
  written later from vLLM's full-graph test);
- ``ir-lowering``: programs as vLLM IR lowering leaves them: the functional
  ``fused_add_rms_norm`` lowered to ``clone`` of each activation plus the
  in-place kernel (``fxa_vllm::fused_add_rms_norm``, with the contract of
  vLLM's ``_C.fused_add_rms_norm``), often called through ``x.view(-1, H)``;
- ``vllm-unsafe``: programs where vLLM's pass is wrong (a write through a view
  of a clone while the original is read later, two clones of one value both
  written, an ``out=`` write by keyword) or crashes (a clone with two in-place
  writers);
- ``synthetic``: the synthetic decoder of :mod:`benchmarks.synthetic` (3 and 15
  layers), for the time on larger graphs.

Usage::

    python -m benchmarks.vllm_comparison                # every program, 5 rounds
    python -m benchmarks.vllm_comparison --only two_clones_written --repeats 3

Prints a table and writes ``benchmarks/results/vllm_comparison.json``. Needs
``vllm`` (the ``vllm`` extra); nothing here imports it before :func:`load_vllm_pass`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch import Tensor
from torch.fx.experimental.proxy_tensor import make_fx

from benchmarks.synthetic import build_transformer_graph
from rewrite.errors import NotEquivalent
from rewrite.testing import check_equivalent, copy_program

__all__ = [
    "PROGRAMS",
    "VllmProgram",
    "compare",
    "format_table",
    "fused_add_rms_norm",
    "load_vllm_pass",
    "main",
    "program",
    "run_pass",
]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "vllm_comparison.json"
CLONE = torch.ops.aten.clone.default
H = 8  # hidden size of the small programs
EPS = 1e-6


# --------------------------------------------------------------------------- in-place kernels


@torch.library.custom_op("fxa_vllm::fused_add_rms_norm", mutates_args=("x", "residual"))
def fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, epsilon: float) -> None:
    """In place, as vLLM's ``_C.fused_add_rms_norm``: ``residual += x``, then ``x = rms_norm(residual) * weight``."""
    residual.add_(x)
    variance = residual.pow(2).mean(dim=-1, keepdim=True)
    x.copy_(residual * torch.rsqrt(variance + epsilon) * weight)


@fused_add_rms_norm.register_fake
def _fused_add_rms_norm_fake(x: Tensor, residual: Tensor, weight: Tensor, epsilon: float) -> None:
    return None


@torch.library.custom_op("fxa_vllm::rms_norm", mutates_args=("x",))
def rms_norm(x: Tensor, weight: Tensor, epsilon: float) -> None:
    """In place: ``x = rms_norm(x) * weight``."""
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x.mul_(torch.rsqrt(variance + epsilon) * weight)


@rms_norm.register_fake
def _rms_norm_fake(x: Tensor, weight: Tensor, epsilon: float) -> None:
    return None


@torch.library.custom_op("fxa_vllm::attention", mutates_args=("out",))
def attention(q: Tensor, k: Tensor, v: Tensor, out: Tensor) -> None:
    """A stand-in attention writing ``out`` (as vLLM's test op ``silly::attention``)."""
    out.copy_(q * 2 + k + v)


@attention.register_fake
def _attention_fake(q: Tensor, k: Tensor, v: Tensor, out: Tensor) -> None:
    return None


def _norm(x: Tensor, residual: Tensor, weight: Tensor) -> None:
    """The in-place kernel through ``view(-1, H)``, as vLLM's IR implementations call it on 3-D activations."""
    torch.ops.fxa_vllm.fused_add_rms_norm(x.view(-1, x.shape[-1]), residual.view(-1, x.shape[-1]), weight, EPS)


# --------------------------------------------------------------------------- the programs


@dataclass(frozen=True)
class VllmProgram:
    """A program, how to make its real inputs, and which of them the caller donates.

    Attributes
    ----------
    name : str
        Short identifier.
    source : str
        ``"vllm-tests"``, ``"ir-lowering"``, ``"vllm-unsafe"`` or ``"synthetic"``.
    case : str
        What the program stands for.
    fn : Callable or None
        The eager function traced by :meth:`trace` (None for synthetic graphs).
    input_shapes : tuple
        Shapes of its float32 inputs (or, for synthetic graphs, ``((layers,),)``).
    donated_inputs : tuple of int
        Placeholder positions the caller donates.
    """

    name: str
    source: str
    case: str
    fn: Callable[..., object] | None
    input_shapes: tuple[tuple[int, ...], ...]
    donated_inputs: tuple[int, ...] = ()

    def inputs(self, seed: int = 0) -> list[Tensor]:
        """Fresh real inputs (the same values for the same seed)."""
        if self.fn is None:
            return build_transformer_graph(self.input_shapes[0][0], seed=seed)[1]()
        gen = torch.Generator().manual_seed(seed)
        return [torch.randn(s, generator=gen) for s in self.input_shapes]

    def trace(self) -> torch.fx.GraphModule:
        """The program's graph: ``make_fx(tracing_mode="fake")`` of :attr:`fn`, or the synthetic decoder.

        Examples
        --------
        >>> gm = program("clone_chain").trace()
        >>> sum(n.target is CLONE for n in gm.graph.nodes)
        2
        """
        if self.fn is None:
            return build_transformer_graph(self.input_shapes[0][0])[0]
        return make_fx(self.fn, tracing_mode="fake")(*self.inputs())


# vLLM's own tests of its pass (tests/compile/passes/ir/test_clone_cleanup.py,
# tests/compile/fullgraph/test_clone_elimination.py), written anew.


def _readonly_clone(x: Tensor) -> Tensor:
    return x.clone() + 1


def _written_original_read_after(x: Tensor) -> tuple[Tensor, Tensor]:
    y = x.relu()
    c = y.clone()
    c.add_(1)
    return y, c


def _written_original_dead(x: Tensor) -> Tensor:
    y = x.relu()
    c = y.clone()
    c.add_(1)
    return c


def _clone_chain(x: Tensor) -> Tensor:
    y = x.relu()
    return y.clone().clone() + 1


def _two_clones_of_input(x: Tensor) -> Tensor:
    return x.clone() + x.clone()


def _no_clones(x: Tensor) -> Tensor:
    return x + 1


def _input_clone_written(x: Tensor) -> Tensor:
    c = x.clone()
    c.add_(1)
    return c


def _input_clone_written_input_returned(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    c = x.clone()
    c.add_(1)
    return x, c


def _two_input_clones_written(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    a = x.clone()
    a.add_(1)
    b = y.clone()
    b.add_(2)
    return a, b


def _snapshot_of_mutated_input(x: Tensor) -> Tensor:
    snapshot = x.clone()
    out = torch.empty_like(x)
    torch.ops.fxa_vllm.attention(x, x, x, out)
    x.add_(out)
    return snapshot


# vLLM IR lowering: ``fused_add_rms_norm(x, residual, weight, eps)`` (functional)
# becomes ``clone`` of each activation plus the in-place kernel.


def _ir_fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    h = x.relu()  # the previous op's output
    x_c, r_c = h.clone(), residual.clone()  # the lowering's copies
    _norm(x_c, r_c, weight)
    return x_c * 2, r_c


def _ir_fused_add_rms_norm_donated(x: Tensor, residual: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    x_c, r_c = x.clone(), residual.clone()  # maybe_inplace on graph inputs: vLLM donates them
    _norm(x_c, r_c, weight)
    return x_c, r_c


def _ir_fused_add_rms_norm_2d_donated(x: Tensor, residual: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    x_c, r_c = x.clone(), residual.clone()
    torch.ops.fxa_vllm.fused_add_rms_norm(x_c, r_c, weight, EPS)  # 2-D: no view
    return x_c, r_c


def _ir_two_layers(x: Tensor, residual: Tensor, weight: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    h = x.relu()
    x_c, r_c = h.clone(), residual.clone()
    _norm(x_c, r_c, weight)
    h2 = x_c @ w
    x_c2, r_c2 = h2.clone(), r_c.clone()
    _norm(x_c2, r_c2, weight)
    return x_c2, r_c2


# Where vLLM's pass is wrong or crashes.


def _view_write_original_read(x: Tensor) -> tuple[Tensor, Tensor]:
    y = x * 2
    c = y.clone()
    c.view(-1).add_(1)  # the write goes through a view: vLLM sees no writer of c
    return c, y + 1  # y's old value is read after the write


def _ir_residual_read_after(x: Tensor, residual: Tensor, weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    h = x.relu()
    r = residual * 2
    x_c, r_c = h.clone(), r.clone()
    _norm(x_c, r_c, weight)  # through view(-1, H)
    return x_c, r_c, r + 1  # the residual's old value is read after the kernel


def _two_clones_written(x: Tensor) -> tuple[Tensor, Tensor]:
    y = x * 2
    a, b = y.clone(), y.clone()
    a.add_(1)
    b.mul_(3)
    return a, b


def _out_kwarg_write(x: Tensor) -> tuple[Tensor, Tensor]:
    y = x * 2
    c = y.clone()
    torch.mul(x, 3, out=c)  # traced as aten.mul.out(x, 3, out=c): the write is a keyword
    return c, y + 1


def _two_inplace_writers(x: Tensor, weight: Tensor) -> Tensor:
    c = x.relu().clone()
    torch.ops.fxa_vllm.rms_norm(c, weight, EPS)
    torch.ops.fxa_vllm.rms_norm(c, weight, EPS)  # a second direct writer: vLLM's pass asserts
    return c


def _two_inplace_writers_original_read(x: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    y = x.relu()
    c = y.clone()
    torch.ops.fxa_vllm.rms_norm(c, weight, EPS)
    torch.ops.fxa_vllm.rms_norm(c, weight, EPS)
    return c, y + 1


_X = ((4, H),)
_XRW = ((2, 3, H), (2, 3, H), (H,))

#: Every program of the comparison, in table order.
PROGRAMS: tuple[VllmProgram, ...] = (
    VllmProgram("readonly_clone", "vllm-tests", "clone only read", _readonly_clone, _X),
    VllmProgram(
        "written_original_read_after", "vllm-tests", "clone written, original read later", _written_original_read_after, _X
    ),
    VllmProgram("written_original_dead", "vllm-tests", "clone written, original dead", _written_original_dead, _X),
    VllmProgram("clone_chain", "vllm-tests", "chain of two clones", _clone_chain, _X),
    VllmProgram("two_clones_of_input", "vllm-tests", "two clones of an input, only read", _two_clones_of_input, _X),
    VllmProgram("no_clones", "vllm-tests", "no clone", _no_clones, _X),
    VllmProgram(
        "donated_input_written", "vllm-tests", "clone of a donated input written", _input_clone_written, _X, (0,)
    ),
    VllmProgram(
        "input_written_returned",
        "vllm-tests",
        "clone of a non-donated input written, input returned",
        _input_clone_written_input_returned,
        ((4, H), (4, H)),
    ),
    VllmProgram(
        "mixed_donated",
        "vllm-tests",
        "clones of a donated and a non-donated input, both written",
        _two_input_clones_written,
        ((4, H), (4, H)),
        (0,),
    ),
    VllmProgram(
        "snapshot_of_mutated_input",
        "vllm-tests",
        "snapshot clone of an input written later (full-graph test)",
        _snapshot_of_mutated_input,
        _X,
    ),
    VllmProgram(
        "ir_fused_add_rms_norm",
        "ir-lowering",
        "lowered fused add+RMSNorm via view(-1, H); residual is an input",
        _ir_fused_add_rms_norm,
        _XRW,
    ),
    VllmProgram(
        "ir_fused_add_rms_norm_donated",
        "ir-lowering",
        "lowered maybe_inplace fused add+RMSNorm on donated inputs, via view(-1, H)",
        _ir_fused_add_rms_norm_donated,
        _XRW,
        (0, 1),
    ),
    VllmProgram(
        "ir_fused_add_rms_norm_2d_donated",
        "ir-lowering",
        "lowered maybe_inplace fused add+RMSNorm on donated 2-D inputs, no view",
        _ir_fused_add_rms_norm_2d_donated,
        ((6, H), (6, H), (H,)),
        (0, 1),
    ),
    VllmProgram(
        "ir_two_layers",
        "ir-lowering",
        "two lowered fused add+RMSNorm layers, residual stream through both",
        _ir_two_layers,
        (*_XRW, (H, H)),
    ),
    VllmProgram(
        "view_write_original_read",
        "vllm-unsafe",
        "write through a view of a clone, original read later",
        _view_write_original_read,
        _X,
    ),
    VllmProgram(
        "ir_residual_read_after",
        "vllm-unsafe",
        "lowered fused add+RMSNorm via view(-1, H), old residual read later",
        _ir_residual_read_after,
        _XRW,
    ),
    VllmProgram("two_clones_written", "vllm-unsafe", "two clones of one value, both written", _two_clones_written, _X),
    VllmProgram("out_kwarg_write", "vllm-unsafe", "clone written by out= keyword, original read later", _out_kwarg_write, _X),
    VllmProgram(
        "two_inplace_writers", "vllm-unsafe", "clone with two in-place writers", _two_inplace_writers, ((4, H), (H,))
    ),
    VllmProgram(
        "two_inplace_writers_original_read",
        "vllm-unsafe",
        "clone with two in-place writers, original read later",
        _two_inplace_writers_original_read,
        ((4, H), (H,)),
    ),
    VllmProgram("synthetic_3_layers", "synthetic", "synthetic decoder, 3 layers (203 nodes)", None, ((3,),)),
    VllmProgram("synthetic_15_layers", "synthetic", "synthetic decoder, 15 layers (995 nodes)", None, ((15,),)),
)


def program(name: str) -> VllmProgram:
    """The program named ``name`` (KeyError if there is none).

    Examples
    --------
    >>> program("two_clones_written").source
    'vllm-unsafe'
    """
    for p in PROGRAMS:
        if p.name == name:
            return p
    raise KeyError(name)


# --------------------------------------------------------------------------- running the passes


def load_vllm_pass() -> type[Any]:
    """vLLM's ``UnsafeCloneEliminationPass`` class, from the installed package (ImportError if absent)."""
    from vllm.compilation.passes.ir.clone_elimination import UnsafeCloneEliminationPass

    return UnsafeCloneEliminationPass


def _vllm_config() -> Any:
    from vllm.config import DeviceConfig, VllmConfig

    return VllmConfig(device_config=DeviceConfig(device="cuda" if torch.cuda.is_available() else "cpu"))


def _count_clones(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target is CLONE)


def run_pass(pass_: Callable[[torch.fx.Graph], None], gm: torch.fx.GraphModule, donated: Sequence[int]) -> float:
    """Run ``pass_(gm.graph)`` under vLLM's pass context with ``donated`` inputs; return its CPU seconds.

    ``donated`` are placeholder positions; vLLM's context takes node indices
    (the same here: ``make_fx`` puts placeholders first). The pass's exception,
    if any, propagates. ``gm`` is recompiled afterwards.
    """
    from vllm.compilation.passes.inductor_pass import get_pass_context, pass_context
    from vllm.config.utils import Range

    index = {n: i for i, n in enumerate(gm.graph.nodes)}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    with pass_context(Range(1, 8192)):
        get_pass_context().donated_input_ids = {index[placeholders[p]] for p in donated}
        start = time.process_time()
        try:
            pass_(gm.graph)
        finally:
            elapsed = time.process_time() - start
            gm.recompile()
    return elapsed


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    new = copy_program(gm)
    if not isinstance(new, torch.fx.GraphModule):
        raise TypeError("copy_program returned a non-GraphModule for a GraphModule")
    return new


def _wrong(original: torch.fx.GraphModule, rewritten: torch.fx.GraphModule, p: VllmProgram) -> str | None:
    try:
        check_equivalent(original, rewritten, p.inputs, donated_inputs=p.donated_inputs)
    except NotEquivalent as e:
        return e.clause
    return None


def compare(p: VllmProgram, *, repeats: int = 5) -> dict[str, Any]:
    """Both passes on copies of ``p``'s graph: clones removed, kept, wrong, crashed; median CPU time.

    Returns
    -------
    dict
        ``name``, ``source``, ``case``, ``nodes``, ``clones`` and, for ``"ours"``
        and ``"vllm"``: ``removed``, ``kept`` (counts), ``wrong`` (the failed
        soundness clause, or None), ``crashed`` (the exception, or None),
        ``cpu_ms`` (median, None if it crashed) and ``cpu_ms_all``.

    Examples
    --------
    >>> r = compare(program("two_clones_written"), repeats=1)
    >>> (r["ours"]["removed"], r["ours"]["wrong"]), (r["vllm"]["removed"], r["vllm"]["wrong"])
    ((1, None), (2, 'output'))
    """
    from rewrite.vllm import CloneEliminationPass

    config = _vllm_config()
    passes: dict[str, Callable[[], Callable[[torch.fx.Graph], None]]] = {
        "ours": lambda: CloneEliminationPass(config),
        "vllm": lambda: load_vllm_pass()(config),
    }
    gm = p.trace()
    clones = _count_clones(gm)
    results: dict[str, dict[str, Any]] = {}
    times: dict[str, list[float]] = {k: [] for k in passes}
    for r in range(max(1, repeats)):
        for key, make in passes.items():
            work = _copy(gm)
            pass_ = make()
            crashed: str | None = None
            try:
                elapsed = run_pass(pass_, work, p.donated_inputs)
                times[key].append(elapsed * 1e3)
            except Exception as e:  # vLLM's pass asserts on some valid graphs
                crashed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
            if r == 0:
                left = _count_clones(work)
                results[key] = {
                    "removed": clones - left,
                    "kept": left,
                    "wrong": None if crashed else _wrong(gm, work, p),
                    "crashed": crashed,
                }
    for key, res in results.items():
        res["cpu_ms"] = statistics.median(times[key]) if times[key] and not res["crashed"] else None
        res["cpu_ms_all"] = times[key]
    return {
        "name": p.name,
        "source": p.source,
        "case": p.case,
        "nodes": len(gm.graph.nodes),
        "clones": clones,
        **results,
    }


# --------------------------------------------------------------------------- report


def _cell(res: dict[str, Any]) -> list[str]:
    wrong = "crashed" if res["crashed"] else (res["wrong"] or "-")
    ms = "-" if res["cpu_ms"] is None else f"{res['cpu_ms']:.2f}"
    return [str(res["removed"]) if not res["crashed"] else "-", str(res["kept"]) if not res["crashed"] else "-", wrong, ms]


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`compare` rows.

    Examples
    --------
    >>> print(format_table([compare(program("no_clones"), repeats=1)]).splitlines()[0])  # doctest: +ELLIPSIS
    | program | source | clones | ours removed | ours kept | ours wrong | ours ms | vLLM removed | ...
    """
    header = [
        "program",
        "source",
        "clones",
        "ours removed",
        "ours kept",
        "ours wrong",
        "ours ms",
        "vLLM removed",
        "vLLM kept",
        "vLLM wrong",
        "vLLM ms",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
    for row in rows:
        cells = [row["name"], row["source"], str(row["clones"]), *_cell(row["ours"]), *_cell(row["vllm"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sums over the rows: clones, removed, wrong and crashed per pass, and removals where vLLM is right."""
    out: dict[str, Any] = {"programs": len(rows), "clones": sum(r["clones"] for r in rows)}
    for key in ("ours", "vllm"):
        out[key] = {
            "removed": sum(r[key]["removed"] for r in rows if not r[key]["crashed"]),
            "wrong": sum(1 for r in rows if r[key]["wrong"]),
            "crashed": sum(1 for r in rows if r[key]["crashed"]),
        }
    right = [r for r in rows if not r["vllm"]["wrong"] and not r["vllm"]["crashed"]]
    out["where_vllm_is_right"] = {
        "programs": len(right),
        "ours_removed": sum(r["ours"]["removed"] for r in right),
        "vllm_removed": sum(r["vllm"]["removed"] for r in right),
        "ours_fewer_on": [r["name"] for r in right if r["ours"]["removed"] < r["vllm"]["removed"]],
        "ours_more_on": [r["name"] for r in right if r["ours"]["removed"] > r["vllm"]["removed"]],
    }
    return out


def _machine() -> dict[str, Any]:
    import vllm

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "vllm": getattr(vllm, "__version__", "?"),
        "machine": platform.machine(),
        "clock": "time.process_time (CPU seconds of this process), median of the rounds",
    }


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.vllm_comparison``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_comparison", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timing rounds per pass (default 5)")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME", help="run only these programs")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON output (default {RESULTS.relative_to(ROOT)})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison, print the table and write the JSON; 2 when vLLM is not installed."""
    args = build_parser().parse_args(argv)
    try:
        load_vllm_pass()
    except ImportError as e:
        print(f"vLLM is not installed (the 'vllm' extra): {e}", file=sys.stderr)
        return 2
    chosen = [program(n) for n in args.only] if args.only else list(PROGRAMS)
    rows = []
    for p in chosen:
        print(f"{p.name} ...", file=sys.stderr, flush=True)
        rows.append(compare(p, repeats=args.repeats))
    summary = totals(rows)
    print(format_table(rows))
    print()
    print(json.dumps(summary, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": _machine(), "totals": summary, "programs": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
