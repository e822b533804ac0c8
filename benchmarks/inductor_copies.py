"""Copies in Inductor's generated code with and without fx-aliasing's pass.

For every program of ``tests/test_inductor.py``, under both functionalization
versions (``torch._inductor.config.enable_auto_functionalized_v2`` True and
False), this compiles the program twice with Inductor's C++ (CPU) backend:
stock, and with ``post_grad_custom_post_pass=CloneEliminationPass()``. It reads
the final generated code (``run_and_get_code``) and counts the *copies* in it:

- a **clone** is a freshly allocated buffer (``bufN = empty_strided_cpu(...)``)
  that a kernel fills by plain copying: every store into it stores a value that
  is a bare load from another buffer (no arithmetic), or a value the same
  kernel also stores into another output (a second materialization of one
  value, which is how a clone fused with its producer looks); its bytes are the
  buffer's allocation size. Copies done by the wrapper (``bufN.copy_(...)``,
  ``aten.clone``) count too;
- a **copy-back** is the same kind of plain copy into a graph input (the
  ``copy_`` epilogue of a mutated input that was not written in place).

Both runs are also compared with eager (outputs and inputs afterwards): stock
Inductor compiles some of these programs to wrong results (pytorch/pytorch#198031
and programs in the spirit of #198094 and #198131), where the copy it drops is
the one the program needs.

Usage::

    python -m benchmarks.inductor_copies            # all programs, both versions
    python -m benchmarks.inductor_copies --only qkv_rotary shared_kv_pool

Prints a table and writes ``benchmarks/results/inductor_copies.json``.
Targets (issue 4): never more copies than stock on a program stock compiles
correctly; strictly fewer where region precision matters (the shared KV pool,
qkv with rotary under ``enable_auto_functionalized_v2=False``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "inductor_copies.json"

#: Programs of tests/test_inductor.py (name -> inputs factory name or shapes).
PROGRAM_NAMES: tuple[str, ...] = (
    "mutated_intermediate",
    "mutated_input",
    "mutated_view_of_input",
    "mutated_slice_of_input",
    "two_mutated_args",
    "multi_output",
    "repeated_mutation",
    "qkv_rotary",
    "shared_kv_pool",
    "old_value_read_after",
    "inductor_198031",
    "views_overlap_intermediate",
    "views_overlap_input",
    "input_view_mutation_reads_clone",
)

#: Programs where region precision matters (the issue's "strictly fewer" targets), by version.
PRECISION_TARGETS: tuple[tuple[str, str], ...] = (("shared_kv_pool", "v1"), ("qkv_rotary", "v1"))


def load_test_programs() -> ModuleType:
    """Import ``tests/test_inductor.py`` (the programs and their inputs) by path."""
    path = ROOT / "tests" / "test_inductor.py"
    spec = importlib.util.spec_from_file_location("fx_aliasing_test_inductor_programs", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def program_inputs(module: ModuleType, name: str) -> Callable[[], list[torch.Tensor]]:
    """The inputs a test gives the program ``name``."""
    shapes: dict[str, tuple[tuple[int, ...], ...]] = {
        "mutated_intermediate": ((8,),),
        "mutated_input": ((8,),),
        "mutated_view_of_input": ((3, 4),),
        "mutated_slice_of_input": ((3, 4),),
        "two_mutated_args": ((8,), (8,)),
        "multi_output": ((8,),),
        "repeated_mutation": ((8,),),
        "shared_kv_pool": ((2, 4, 8), (4, 8), (4, 8)),
        "old_value_read_after": ((8,),),
    }
    if name == "qkv_rotary":
        return module.rotary_inputs  # type: ignore[no-any-return]
    if name in shapes:
        return module.randn(*shapes[name])  # type: ignore[no-any-return]
    return module.arange6  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------
# reading the generated code

_KERNEL = re.compile(r"^(\w+) = async_compile\.cpp_pybinding\(\[[^\]]*\], r'''(.*?)'''\)", re.S | re.M)
_SIGNATURE = re.compile(r'extern "C"\s+void\s+kernel\((.*?)\)', re.S)
_DEF = re.compile(r"auto (tmp\d+) = (.*?);\s*$", re.M)
_VEC_STORE = re.compile(r"(tmp\d+)\.store\((\w+)\s*\+")
_SCALAR_STORE = re.compile(r"(\w+)\[[^\]]*\]\s*=\s*(?:static_cast<[\w:]+>\()?(tmp\d+)\)?;")
_PTR = re.compile(r"\b((?:in_out_ptr|in_ptr|out_ptr)\d+)\b")
_TMP = re.compile(r"\btmp\d+\b")
_BUFFER = re.compile(r"^\s*(buf\d+) = empty_strided_\w+\(\(([^)]*)\), \(([^)]*)\), torch\.(\w+)\)", re.M)
_INPUT = re.compile(r"assert_size_stride\((arg\w+), \(([^)]*)\), \(([^)]*)\)")
_WRAPPER_COPY = re.compile(r"^\s*(buf\d+)\.copy_\((\w+)", re.M)
_WRAPPER_CLONE = re.compile(r"^\s*(buf\d+) = (?:torch\.ops\.)?aten\.clone(?:\.default)?\(", re.M)


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.replace(" ", "").split(",") if t]


def _nbytes(sizes: Sequence[int], strides: Sequence[int], dtype: str) -> int:
    if any(s == 0 for s in sizes):
        return 0
    extent = 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
    return extent * torch.empty((), dtype=getattr(torch, dtype)).element_size()


def copy_outputs(kernel_src: str) -> list[int]:
    """Positions (in the kernel's parameter list) of outputs filled only by plain copies."""
    sig = _SIGNATURE.search(kernel_src)
    if sig is None:
        return []
    params = [p.strip().split()[-1].lstrip("*") for p in sig.group(1).split(",") if p.strip()]
    defs = {m.group(1): m.group(2) for m in _DEF.finditer(kernel_src)}

    def is_load(tmp: str) -> bool:
        rhs = defs.get(tmp)
        if rhs is None:
            return False
        ptrs = set(_PTR.findall(rhs))
        return len(ptrs) == 1 and not _TMP.search(rhs)

    stores: dict[str, list[str]] = {}
    first_store: dict[str, str] = {}  # tmp -> the output it is first stored into
    found = [(m.start(), m.group(2), m.group(1)) for m in _VEC_STORE.finditer(kernel_src)]
    found += [(m.start(), m.group(1), m.group(2)) for m in _SCALAR_STORE.finditer(kernel_src)]
    for _, ptr, tmp in sorted(found):
        stores.setdefault(ptr, []).append(tmp)
        first_store.setdefault(tmp, ptr)

    def copied(tmp: str, ptr: str) -> bool:
        # a bare load, or a value already stored into another output (a second materialization)
        return is_load(tmp) or first_store.get(tmp, ptr) != ptr

    out: list[int] = []
    for i, p in enumerate(params):
        if p.startswith("out_ptr") and stores.get(p) and all(copied(t, p) for t in stores[p]):
            out.append(i)
    return out


@dataclass
class CopyCount:
    """Copies found in one generated module."""

    clones: int = 0
    clone_bytes: int = 0
    copy_backs: int = 0
    copy_back_bytes: int = 0
    buffers: list[str] = field(default_factory=list)


def count_copies(code: str) -> CopyCount:
    r"""Count clones and copy-backs in Inductor's generated (CPU) module source.

    Examples
    --------
    >>> q = "'" * 3
    >>> kernel = 'extern "C" void kernel(const float* in_ptr0, float* out_ptr0)\n{\n    auto tmp0 = in_ptr0[x0];\n    out_ptr0[x0] = tmp0;\n}\n'
    >>> src = ("cpp_fused_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r" + q + kernel + q + ")\n"
    ...        "    def call(self, args):\n"
    ...        "        buf0 = empty_strided_cpu((8, ), (1, ), torch.float32)\n"
    ...        "        cpp_fused_0(arg0_1, buf0)\n")
    >>> c = count_copies(src)
    >>> (c.clones, c.clone_bytes)
    (1, 32)
    """
    kernels = {m.group(1): copy_outputs(m.group(2)) for m in _KERNEL.finditer(code)}
    buffers = {m.group(1): _nbytes(_ints(m.group(2)), _ints(m.group(3)), m.group(4)) for m in _BUFFER.finditer(code)}
    inputs: dict[str, int] = {}
    for m in _INPUT.finditer(code):
        inputs[m.group(1)] = _nbytes(_ints(m.group(2)), _ints(m.group(3)), "float32")
    count = CopyCount()
    seen: set[str] = set()

    def record(dest: str) -> None:
        if dest in seen:
            return
        seen.add(dest)
        if dest in buffers:
            count.clones += 1
            count.clone_bytes += buffers[dest]
            count.buffers.append(dest)
        elif dest in inputs:
            count.copy_backs += 1
            count.copy_back_bytes += inputs[dest]

    call_src = code[code.find("def call(") :] if "def call(" in code else code
    for name, outs in kernels.items():
        if not outs:
            continue
        for m in re.finditer(rf"^\s*{re.escape(name)}\((.*)\)\s*$", call_src, re.M):
            args = [a.strip() for a in m.group(1).split(",")]
            for i in outs:
                if i < len(args):
                    record(args[i])
    for m in _WRAPPER_COPY.finditer(call_src):
        record(m.group(1))
    for m in _WRAPPER_CLONE.finditer(call_src):
        record(m.group(1))
    return count


# ---------------------------------------------------------------------------
# compiling


@dataclass
class Run:
    """One compile of one program."""

    copies: CopyCount
    correct: bool
    note: str = ""


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-5, atol=1e-5))
    return bool(a == b)


def compile_once(fn: Callable[..., Any], inputs: Callable[[], Sequence[torch.Tensor]], *, v2: bool, with_pass: bool) -> Run:
    """Compile ``fn`` (stock or with the pass), count copies, compare with eager."""
    from torch._inductor.utils import run_and_get_code

    from rewrite.inductor import CloneEliminationPass

    torch._dynamo.reset()
    options: dict[str, Any] = {"post_grad_custom_post_pass": CloneEliminationPass()} if with_pass else {}
    with torch._inductor.config.patch(enable_auto_functionalized_v2=v2, fx_graph_cache=False), torch._functorch.config.patch(
        enable_autograd_cache=False
    ):
        compiled = torch.compile(fn, fullgraph=True, options=options)
        eager_in, comp_in = list(inputs()), list(inputs())
        expected = fn(*eager_in)
        got, codes = run_and_get_code(compiled, *comp_in)
    correct = _same(got, expected) and _same(comp_in, eager_in)
    total = CopyCount()
    for code in codes:
        c = count_copies(code)
        total.clones += c.clones
        total.clone_bytes += c.clone_bytes
        total.copy_backs += c.copy_backs
        total.copy_back_bytes += c.copy_back_bytes
        total.buffers += c.buffers
    return Run(total, correct)


@dataclass
class Row:
    """Stock vs pass for one program under one functionalization version."""

    program: str
    version: str
    stock: Run
    with_pass: Run


def run(names: Sequence[str], versions: Sequence[str]) -> list[Row]:
    """Compile every program in ``names`` under every version in ``versions``."""
    module = load_test_programs()
    rows: list[Row] = []
    for name in names:
        fn = getattr(module, name)
        inputs = program_inputs(module, name)
        for version in versions:
            v2 = version == "v2"
            stock = compile_once(fn, inputs, v2=v2, with_pass=False)
            ours = compile_once(fn, inputs, v2=v2, with_pass=True)
            rows.append(Row(name, version, stock, ours))
            print(f"  {name} [{version}]: stock {stock.copies.clones} clone(s) / pass {ours.copies.clones}", file=sys.stderr)
    return rows


def verdict(rows: Sequence[Row]) -> dict[str, Any]:
    """Check the issue's targets."""
    worse = [
        f"{r.program} [{r.version}]"
        for r in rows
        if r.stock.correct
        and (
            r.with_pass.copies.clones + r.with_pass.copies.copy_backs > r.stock.copies.clones + r.stock.copies.copy_backs
            or r.with_pass.copies.clone_bytes + r.with_pass.copies.copy_back_bytes
            > r.stock.copies.clone_bytes + r.stock.copies.copy_back_bytes
        )
    ]
    by_key = {(r.program, r.version): r for r in rows}
    not_fewer = [
        f"{p} [{v}]"
        for p, v in PRECISION_TARGETS
        if (p, v) in by_key and not by_key[(p, v)].with_pass.copies.clones < by_key[(p, v)].stock.copies.clones
    ]
    wrong_with_pass = [f"{r.program} [{r.version}]" for r in rows if not r.with_pass.correct]
    wrong_stock = [f"{r.program} [{r.version}]" for r in rows if not r.stock.correct]
    return {
        "more_copies_than_stock": worse,
        "precision_targets_not_strictly_fewer": not_fewer,
        "wrong_with_pass": wrong_with_pass,
        "wrong_stock": wrong_stock,
        "targets_met": not worse and not not_fewer and not wrong_with_pass,
    }


def table(rows: Sequence[Row]) -> str:
    """A Markdown table of the rows."""
    head = (
        "| program | af | stock clones | stock bytes | stock copy-backs | stock correct "
        "| pass clones | pass bytes | pass copy-backs | pass correct |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        s, p = r.stock.copies, r.with_pass.copies
        lines.append(
            f"| {r.program} | {r.version} | {s.clones} | {s.clone_bytes} | {s.copy_backs} | {'yes' if r.stock.correct else '**no**'} "
            f"| {p.clones} | {p.clone_bytes} | {p.copy_backs} | {'yes' if r.with_pass.correct else '**no**'} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns 0 when the targets are met."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="program names (default: all)")
    parser.add_argument("--versions", nargs="*", default=["v2", "v1"], choices=["v2", "v1"])
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    names = list(args.only) if args.only else list(PROGRAM_NAMES)
    unknown = [n for n in names if n not in PROGRAM_NAMES]
    if unknown:
        parser.error(f"unknown programs: {unknown}")
    rows = run(names, args.versions)
    print(table(rows))
    v = verdict(rows)
    print()
    print(json.dumps(v, indent=2))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "torch": torch.__version__,
        "backend": "inductor cpp (CPU)",
        "rows": [
            {"program": r.program, "version": r.version, "stock": asdict(r.stock), "with_pass": asdict(r.with_pass)}
            for r in rows
        ],
        "verdict": v,
    }
    args.output.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0 if v["targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
