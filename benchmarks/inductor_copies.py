"""Copies in Inductor's generated code: stock, with fx-aliasing's pass, and with the pass and its guard.

Two sets of programs, each compiled with Inductor's C++ (CPU) backend in three
configurations:

- **stock**: no custom pass;
- **pass**: ``post_grad_custom_post_pass=CloneEliminationPass(guard=False)``
  (lowering and clone elimination only);
- **guard**: ``rewrite.inductor.compile_options()``, the one-line install:
  the pass with its hazard guard (H1-H6, H9) and the joint-graph guard (H7,
  H8).

The programs: every custom-op program of ``tests/rewrite/adapters/test_inductor.py``, under both
functionalization versions (``torch._inductor.config.enable_auto_functionalized_v2``
True = ``v2``, False = ``v1``); and every program of
``tests/rewrite/inductor/test_inductor_guard.py`` (faithful repros of public Inductor bug
reports, variants of each bug class H1-H9, controls with none of the hazards;
a program that breaks the graph counts the copies of every graph it compiles).
Each compile is compared with eager (outputs, inputs and module buffers
afterwards, and which outputs share storage with inputs) and its final
generated code (``run_and_get_code``) is read for *copies*:

- a **clone** is a freshly allocated buffer (``bufN = empty_strided_cpu(...)``)
  that a kernel fills by plain copying: every value it stores is a load from
  memory, or a selection between loads and constants (a functional scatter
  writes a copy of its input with a region replaced), with no arithmetic on
  the loaded data; or a value the same kernel also stores elsewhere (a
  second materialization of one value, how a clone fused with its producer
  looks). A bitcast (how a kernel reads a dtype view: ``c10::bit_cast``, or a
  vectorized kernel's scalar fallback over local arrays) keeps the data: a
  copy through one is a copy. Its bytes are the buffer's allocation size.
  Wrapper-level ``bufN.copy_(...)`` and ``aten.clone`` count too;
- a **copy into existing memory**: the same kind of kernel writing a buffer it
  did not allocate (an earlier buffer, a view of it); its bytes are the
  elements the kernel's loops store. A copy into a graph input is a
  **copy-back** (the ``copy_`` epilogue of an input mutation, or a scatter
  done in place), counted with the input's size.

``copies`` and ``bytes`` in the table add the three kinds. Symbolic sizes
(dynamic shapes) count as 0 bytes and are flagged.

Usage::

    python -m benchmarks.inductor_copies                      # everything
    python -m benchmarks.inductor_copies --only qkv_rotary shift_rows --versions v1
    python -m benchmarks.inductor_copies --set guard          # only the guard's programs

Prints a table and the verdict, and writes ``benchmarks/results/inductor_copies.json``.
Targets: never more copies (nor bytes) than stock on a program stock compiles
correctly, except where the guard guards a hazard stock survives by luck (it
is listed); strictly fewer where region precision matters (the shared KV pool,
qkv with rotary and the transposed row, under version 1); every faithful
repro right with the guard; no control with a copy more than stock.
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

#: Custom-op programs of tests/rewrite/adapters/test_inductor.py.
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
    "transposed_clone_row_mutated",
    "old_value_read_after",
    "inductor_198031",
    "views_overlap_intermediate",
    "views_overlap_input",
    "input_view_mutation_reads_clone",
    "int32_view_of_row",
    "fp8_view_of_pool_row",
    "int32_view_of_input",
    "int32_view_then_row",
    "two_ops_reader_between",
    "old_value_cloned",
    "view_as_real_row",
)

#: Custom-op programs compiled under some functionalization versions only, and why.
ONLY_VERSIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "view_as_real_row": (
        ("v1",),
        "version 2 records the op's view of a complex base without its dtype: "
        "Inductor 2.13 fails to compile it, with or without the pass",
    ),
}

#: Programs where region precision matters (the "strictly fewer" targets), by version.
PRECISION_TARGETS: tuple[tuple[str, str], ...] = (
    ("shared_kv_pool", "v1"),
    ("qkv_rotary", "v1"),
    ("transposed_clone_row_mutated", "v1"),
)

CONFIGS: tuple[str, ...] = ("stock", "pass", "guard")


def _load(name: str, filename: str) -> ModuleType:
    path = ROOT / "tests" / filename
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_test_programs() -> ModuleType:
    """Import ``tests/rewrite/adapters/test_inductor.py`` (the custom-op programs and their inputs) by path."""
    return _load("fx_aliasing_test_inductor_programs", "rewrite/adapters/test_inductor.py")


def load_guard_programs() -> ModuleType:
    """Import ``tests/rewrite/inductor/test_inductor_guard.py`` (``PROGRAMS``, the harness) by path."""
    return _load("fx_aliasing_test_inductor_guard_programs", "rewrite/inductor/test_inductor_guard.py")


def program_inputs(module: ModuleType, name: str) -> Callable[[], list[torch.Tensor]]:
    """The inputs a test gives the custom-op program ``name``."""
    shapes: dict[str, tuple[tuple[int, ...], ...]] = {
        "mutated_intermediate": ((8,),),
        "mutated_input": ((8,),),
        "mutated_view_of_input": ((3, 4),),
        "mutated_slice_of_input": ((3, 4),),
        "two_mutated_args": ((8,), (8,)),
        "multi_output": ((8,),),
        "repeated_mutation": ((8,),),
        "shared_kv_pool": ((2, 4, 8), (4, 8), (4, 8)),
        "transposed_clone_row_mutated": ((3, 4),),
        "old_value_read_after": ((8,),),
        "int32_view_of_row": ((3, 4),),
        "int32_view_of_input": ((8,),),
        "int32_view_then_row": ((3, 4),),
        "two_ops_reader_between": ((8,),),
        "old_value_cloned": ((8,),),
        "view_as_real_row": ((3, 8),),
    }
    if name == "qkv_rotary":
        return module.rotary_inputs  # type: ignore[no-any-return]
    if name == "fp8_view_of_pool_row":
        return module.uint8_pool  # type: ignore[no-any-return]
    if name in shapes:
        return module.randn(*shapes[name])  # type: ignore[no-any-return]
    return module.arange6  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------
# reading the generated code

_KERNEL = re.compile(r"^(\w+) = async_compile\.cpp_pybinding\(\[[^\]]*\], r'''(.*?)'''\)", re.S | re.M)
_SIGNATURE = re.compile(r'extern "C"\s+void\s+kernel\((.*?)\)', re.S)
_DEF = re.compile(r"^\s*auto (tmp\d+) = (.*?);\s*$")
#: A value computed by a lambda on the lines that follow (``auto tmpN = [&]``, or ``auto tmpN =`` then ``[&]()``).
_LAMBDA = re.compile(r"^\s*auto (tmp\d+) =(?:\s*\[&\])?\s*$")
_RETURN = re.compile(r"^\s*return (tmp\d+);\s*$")
# A vectorized kernel's scalar fallback (a bitcast, how a dtype view is read): the vector is stored into a
# local array, each element reinterpreted into another, which is loaded back as the lambda's value.
_LOCAL_STORE = re.compile(r"\b(tmp\d+)\.store\((tmpbuf\w*)\.data\(\)")
_LOCAL_ELEMENT = re.compile(r"^\s*(tmpbuf\w*)\[\w+\]\s*=\s*(.*?);\s*$")
_LOCAL_READ = re.compile(r"^(?:c10::bit_cast<.+>\()?(tmpbuf\w*)\[\w+\]\)?$")
_LOCAL_RETURN = re.compile(r"^\s*return\s+at::vec::\w+<.+?>::loadu\((tmpbuf\w*)\.data\(\)")
_VEC_STORE = re.compile(r"\b(tmp\d+)\.store\((\w+)\s*\+")
_SCALAR_STORE = re.compile(r"\b(\w+_ptr\d+)\[[^\]]*\]\s*=\s*(.*?);\s*$")
_FOR = re.compile(r"^\s*for\s*\(\s*int64_t\s+(\w+)\s*=\s*(.*?);\s*\w+\s*<\s*(.*?);")
_CONST = re.compile(r"^(?:static_cast<int64_t>\()?\s*(-?\d+)L?\s*\)?$")
_PTR = re.compile(r"\b(?:in_out_ptr|in_ptr|out_ptr)\d+\b")
_TMP = re.compile(r"\btmp\d+\b")
_SELECT = re.compile(r"^\s*(tmp\d+)\s*\?\s*(.+?)\s*:\s*(.+?)\s*$")
_BLEND = re.compile(r"::blendv\(\s*(tmp\d+)\s*,\s*(tmp\d+)\s*,\s*(tmp\d+)")
_WRAP = re.compile(
    r"^\s*(?:at::vec::Vectorized(?:N)?<[^>]*>\((tmp\d+)\)|(tmp\d+)\(\)|static_cast<[\w:]+>\((tmp\d+)\)"
    r"|c10::bit_cast<.+>\((tmp\d+)\)|(tmp\d+))\s*$"
)  # the same data: a vector of a scalar, a lambda's value, a conversion, a bitcast (a dtype view), a name
_REINTERPRET = re.compile(r"^(?:reinterpret_tensor|aten\.view\.dtype)\((\w+)")  # a view of a buffer
_BUFFER = re.compile(r"^\s*(buf\d+) = empty_strided_\w+\((.*)\)\s*$", re.M)
_INPUT = re.compile(r"assert_size_stride\((arg\w+), \(([^)]*)\), \(([^)]*)\)")
_WRAPPER_COPY = re.compile(r"^\s*(buf\d+)\.copy_\((\w+)", re.M)
_WRAPPER_CLONE = re.compile(r"^\s*(buf\d+) = (?:torch\.ops\.)?aten\.clone(?:\.default)?\(", re.M)

#: Element size of the C types of kernel parameters.
_CTYPE_SIZE = {
    "double": 8, "float": 4, "int64_t": 8, "uint64_t": 8, "int32_t": 4, "uint32_t": 4, "int16_t": 2,
    "uint16_t": 2, "int8_t": 1, "uint8_t": 1, "bool": 1, "half": 2, "bfloat16": 2, "at::Half": 2,
    "at::BFloat16": 2, "at::Float8_e4m3fn": 1, "at::Float8_e5m2": 1, "at::Float8_e4m3fnuz": 1,
    "at::Float8_e5m2fnuz": 1, "at::complex<at::Half>": 4, "at::complex<float>": 8, "at::complex<double>": 16,
}


def _ints(text: str) -> list[int] | None:
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        return None  # a symbolic size


def _nbytes(sizes: Sequence[int] | None, strides: Sequence[int] | None, itemsize: int) -> int | None:
    if sizes is None or strides is None:
        return None
    if any(s == 0 for s in sizes):
        return 0
    extent = 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
    return extent * itemsize


@dataclass(frozen=True)
class _Val:
    """What a kernel temporary holds: data loaded from memory (``data``), changed by arithmetic (``computed``)."""

    data: bool
    computed: bool
    uid: int


@dataclass
class KernelCopies:
    """For one kernel: what each output parameter gets, loop nest by loop nest.

    ``nests[i]`` lists, in the kernel's order, one ``(copy, elements)`` per
    loop nest that stores into parameter ``i``: ``copy`` when every value the
    nest stores there is a plain copy, ``elements`` the elements its loops
    store (None when symbolic).
    """

    nests: dict[int, list[tuple[bool, int | None]]] = field(default_factory=dict)
    params: list[str] = field(default_factory=list)
    itemsize: dict[int, int] = field(default_factory=dict)

    @property
    def copied(self) -> list[int]:
        """Parameters some loop nest fills by plain copying."""
        return sorted(i for i, ns in self.nests.items() if any(c for c, _ in ns))


def _classify(rhs: str, defs: dict[str, _Val], uid: int) -> _Val:
    """The kind of value an expression computes."""
    if _PTR.search(rhs):
        return _Val(True, False, uid)  # a load (its index arithmetic does not change the data)
    wrapped = _WRAP.match(rhs)
    if wrapped:
        inner = next(g for g in wrapped.groups() if g)
        v = defs.get(inner)
        return _Val(v.data, v.computed, uid) if v else _Val(False, False, uid)
    operands = [defs[t] for t in _TMP.findall(rhs) if t in defs]
    data = [v for v in operands if v.data]
    if not data:
        return _Val(False, False, uid)  # indices, masks and constants
    select = _SELECT.match(rhs)
    blend = _BLEND.search(rhs)
    if select or blend:
        cond = defs.get(select.group(1) if select else blend.group(3))  # type: ignore[union-attr]
        picked = [defs[t] for t in _TMP.findall(rhs) if t in defs and t != (select.group(1) if select else blend.group(3))]  # type: ignore[union-attr]
        computed = bool(cond and cond.data) or any(v.computed for v in picked if v.data)
        return _Val(True, computed, uid)
    return _Val(True, True, uid)


def kernel_copies(kernel_src: str) -> KernelCopies:
    """Which output parameters of a C++ kernel are filled by plain copies, and how many elements each gets."""
    sig = _SIGNATURE.search(kernel_src)
    out = KernelCopies()
    if sig is None:
        return out
    decls = [p.strip() for p in sig.group(1).split(",") if p.strip()]
    out.params = [d.split()[-1].lstrip("*") for d in decls]
    for i, d in enumerate(decls):
        ctype = d.replace("const", "").replace("*", " ").split()[0]
        out.itemsize[i] = _CTYPE_SIZE.get(ctype, 4)
    body = kernel_src[sig.end() :]
    defs: dict[str, _Val] = {}
    lambdas: list[str] = []
    loops: list[tuple[int, int | None, int]] = []  # (brace depth of the body, trip count, id of the outer loop)
    pending: tuple[int | None, int] | None = None
    depth = 0
    uid = 0
    stores: dict[str, list[tuple[_Val, int, int | None]]] = {}  # ptr -> (value, loop nest id, elements)
    first_store: dict[int, str] = {}
    for lineno, line in enumerate(body.splitlines()):
        m = _FOR.match(line)
        if m:
            var = m.group(1)
            lo, hi = _CONST.match(m.group(2).strip()), _CONST.match(m.group(3).strip())
            trip = int(hi.group(1)) - int(lo.group(1)) if lo and hi else None
            if var.endswith("_tail"):
                trip = 1  # the scalar tail of the enclosing vector loop: its range is counted there
            pending = (trip, loops[0][2] if loops else lineno)
        opens, closes = line.count("{"), line.count("}")
        if opens and pending is not None:
            loops.append((depth + 1, pending[0], pending[1]))
            pending = None
        depth += opens - closes
        while loops and depth < loops[-1][0]:
            loops.pop()
        uid += 1
        if (lm := _LAMBDA.match(line)) is not None:
            lambdas.append(lm.group(1))
            continue
        if lambdas and (rm := _RETURN.match(line) or _LOCAL_RETURN.match(line)) is not None:
            v = defs.get(rm.group(1), _Val(False, False, uid))
            defs[lambdas.pop()] = _Val(v.data, v.computed, uid)
            continue
        if (ls := _LOCAL_STORE.search(line)) is not None:
            defs[ls.group(2)] = defs.get(ls.group(1), _Val(False, True, uid))
            continue
        if (le := _LOCAL_ELEMENT.match(line)) is not None:
            read = _LOCAL_READ.match(le.group(2).strip())
            held = defs.get(read.group(1)) if read else None  # an element, or its bitcast: the same data
            defs[le.group(1)] = _Val(held.data, held.computed, uid) if held else _Val(True, True, uid)
            continue
        if (dm := _DEF.match(line)) is not None:
            defs[dm.group(1)] = _classify(dm.group(2), defs, uid)
            continue
        found: list[tuple[str, _Val]] = []
        for vm in _VEC_STORE.finditer(line):
            found.append((vm.group(2), defs.get(vm.group(1), _Val(False, True, uid))))
        sm = _SCALAR_STORE.search(line)
        if sm and not found:
            found.append((sm.group(1), _classify(sm.group(2), defs, uid)))
        for ptr, v in found:
            elements: int | None = 1
            for _, trip, _ in loops:
                elements = None if elements is None or trip is None else elements * trip
            nest = loops[0][2] if loops else -lineno
            stores.setdefault(ptr, []).append((v, nest, elements))
            first_store.setdefault(v.uid, ptr)
    for i, p in enumerate(out.params):
        if not p.startswith(("out_ptr", "in_out_ptr")) or p not in stores:
            continue
        by_nest: dict[int, list[tuple[_Val, int | None]]] = {}
        for v, nest, elements in stores[p]:
            by_nest.setdefault(nest, []).append((v, elements))
        entries: list[tuple[bool, int | None]] = []
        for nest_stores in by_nest.values():
            copy = all((v.data and not v.computed) or first_store.get(v.uid, p) != p for v, _ in nest_stores)
            counts = [e for _, e in nest_stores]
            entries.append((copy, None if any(e is None for e in counts) else max(e for e in counts if e is not None)))
        out.nests[i] = entries
    return out


def copy_outputs(kernel_src: str) -> list[int]:
    """Positions (in the kernel's parameter list) of outputs some loop nest fills by plain copying."""
    return kernel_copies(kernel_src).copied


@dataclass
class CopyCount:
    """Copies found in one generated module (or added up over several)."""

    clones: int = 0
    clone_bytes: int = 0
    copies_into: int = 0
    copy_into_bytes: int = 0
    copy_backs: int = 0
    copy_back_bytes: int = 0
    symbolic: bool = False
    buffers: list[str] = field(default_factory=list)

    @property
    def copies(self) -> int:
        """Every copy: clones, copies into existing memory, copy-backs."""
        return self.clones + self.copies_into + self.copy_backs

    @property
    def nbytes(self) -> int:
        """Bytes of every copy."""
        return self.clone_bytes + self.copy_into_bytes + self.copy_back_bytes

    def add(self, other: CopyCount) -> None:
        """Add ``other``'s counts to these."""
        self.clones += other.clones
        self.clone_bytes += other.clone_bytes
        self.copies_into += other.copies_into
        self.copy_into_bytes += other.copy_into_bytes
        self.copy_backs += other.copy_backs
        self.copy_back_bytes += other.copy_back_bytes
        self.symbolic = self.symbolic or other.symbolic
        self.buffers += other.buffers


_INPUT_GROUPED = re.compile(r"^\s*(assert_size_stride_grouped\(.*\))\s*$", re.M)


def _grouped_inputs(code: str) -> dict[str, tuple[list[int] | None, list[int] | None]]:
    """Inputs checked by torch 2.14's ``assert_size_stride_grouped((a, b), (sizes...), (strides...), ...)``."""
    import ast

    found: dict[str, tuple[list[int] | None, list[int] | None]] = {}
    for m in _INPUT_GROUPED.finditer(code):
        try:
            call = ast.parse(m.group(1), mode="eval").body
        except SyntaxError:
            continue
        if not isinstance(call, ast.Call) or len(call.args) < 3:
            continue
        names, sizes, strides = call.args[:3]
        if not all(isinstance(t, ast.Tuple) for t in (names, sizes, strides)):
            continue
        for name, size, stride in zip(names.elts, sizes.elts, strides.elts):  # type: ignore[attr-defined]
            if isinstance(name, ast.Name):
                found[name.id] = (_ints(ast.unparse(size).strip("() ")), _ints(ast.unparse(stride).strip("() ")))
    return found


def count_copies(code: str) -> CopyCount:
    r"""Count clones, copies into existing memory and copy-backs in Inductor's generated (CPU) module.

    Examples
    --------
    >>> q = "'" * 3
    >>> kernel = 'extern "C" void kernel(const float* in_ptr0, float* out_ptr0)\n{\n    auto tmp0 = in_ptr0[x0];\n    out_ptr0[x0] = tmp0;\n}\n'
    >>> src = ("cpp_fused_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r" + q + kernel + q + ")\n"
    ...        "    def call(self, args):\n"
    ...        "        buf0 = empty_strided_cpu((8, ), (1, ), torch.float32)\n"
    ...        "        cpp_fused_0(arg0_1, buf0)\n")
    >>> c = count_copies(src)
    >>> (c.clones, c.clone_bytes, c.copies)
    (1, 32, 1)
    """
    kernels = {m.group(1): kernel_copies(m.group(2)) for m in _KERNEL.finditer(code)}
    buffers: dict[str, int | None] = {}
    for m in _BUFFER.finditer(code):
        parts = _split_args(m.group(2))
        if len(parts) < 3 or not parts[2].startswith("torch."):
            continue
        item = torch.empty((), dtype=getattr(torch, parts[2][len("torch.") :])).element_size()
        buffers[m.group(1)] = _nbytes(_ints(parts[0].strip("() ")), _ints(parts[1].strip("() ")), item)
    inputs: dict[str, tuple[list[int] | None, list[int] | None]] = {}
    for m in _INPUT.finditer(code):
        inputs[m.group(1)] = (_ints(m.group(2)), _ints(m.group(3)))
    inputs.update(_grouped_inputs(code))
    count = CopyCount()
    written: set[str] = set()  # buffers already written (a later copy into them is a copy into existing memory)
    seen_inputs: set[str] = set()

    def record(dest: str, elements: int | None, itemsize: int) -> None:
        rm = _REINTERPRET.match(dest)
        base = rm.group(1) if rm else dest
        if base in buffers and base not in written:
            nbytes = buffers[base]
            count.clones += 1
            count.clone_bytes += nbytes or 0
            count.symbolic |= nbytes is None
            count.buffers.append(base)
        elif base in inputs:
            if base in seen_inputs:
                return
            seen_inputs.add(base)
            sizes, strides = inputs[base]
            nbytes = _nbytes(sizes, strides, itemsize)
            count.copy_backs += 1
            count.copy_back_bytes += nbytes or 0
            count.symbolic |= nbytes is None
        elif base in buffers:
            size = buffers[base]
            nbytes = None if elements is None else elements * itemsize
            if nbytes is not None and size is not None:
                nbytes = min(nbytes, size)  # a loop nest never stores more than its buffer holds
            count.copies_into += 1
            count.copy_into_bytes += nbytes or 0
            count.symbolic |= nbytes is None

    call_src = code[code.find("def call(") :] if "def call(" in code else code
    calls: list[tuple[int, str, list[str]]] = []
    for name in kernels:
        for m in re.finditer(rf"^\s*{re.escape(name)}\((.*)\)\s*$", call_src, re.M):
            calls.append((m.start(), name, _split_args(m.group(1))))
    for m in _WRAPPER_COPY.finditer(call_src):
        calls.append((m.start(), "<copy_>", [m.group(1)]))
    for m in _WRAPPER_CLONE.finditer(call_src):
        calls.append((m.start(), "<clone>", [m.group(1)]))
    for _, name, args in sorted(calls):
        if name in ("<copy_>", "<clone>"):
            record(args[0], None, 4)
            written.add(args[0])
            continue
        k = kernels[name]
        for i, a in enumerate(args):
            for copy, elements in k.nests.get(i, []):
                if copy:
                    record(a, elements, k.itemsize.get(i, 4))
                rm = _REINTERPRET.match(a)
                written.add(rm.group(1) if rm else a)
    return count


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments (a ``reinterpret_tensor(...)`` stays one)."""
    args, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur.strip():
        args.append(cur.strip())
    return args


# ---------------------------------------------------------------------------
# compiling


@dataclass
class Run:
    """One compile of one program."""

    copies: CopyCount
    correct: bool
    hazards: tuple[str, ...] = ()
    differences: list[str] = field(default_factory=list)


def compile_once(guard_module: ModuleType, program: Any, *, v2: bool, config: str) -> Run:
    """Compile ``program`` (a ``tests/rewrite/inductor/test_inductor_guard.py`` Program) in ``config`` and compare with eager."""
    from rewrite.inductor import CloneEliminationPass, compile_options

    options: dict[str, Any] = {}
    if config == "pass":
        options = {"post_grad_custom_post_pass": CloneEliminationPass(guard=False)}
    elif config == "guard":
        options = compile_options()
    want = guard_module.observe(program)
    with torch._inductor.config.patch(enable_auto_functionalized_v2=v2):
        compiled = guard_module.compile_and_observe(program, options=options)
    total = CopyCount()
    for code in compiled.code:
        total.add(count_copies(code))
    diffs = guard_module.differences(compiled.observed, want)
    return Run(total, not diffs, tuple(compiled.hazards), diffs)


@dataclass
class Row:
    """One program under one functionalization version, in every configuration."""

    program: str
    version: str
    kind: str
    issue: str
    latent: bool
    runs: dict[str, Run]


def run(names: Sequence[str] | None, versions: Sequence[str], sets: Sequence[str]) -> list[Row]:
    """Compile the selected programs (all by default) under every configuration."""
    guard_module = load_guard_programs()
    Program = guard_module.Program
    selected: list[tuple[Any, str, bool]] = []
    if "custom-ops" in sets:
        module = load_test_programs()
        for name in PROGRAM_NAMES:
            if names and name not in names:
                continue
            p = Program(name, getattr(module, name), program_inputs(module, name), (), "custom-op")
            allowed = ONLY_VERSIONS.get(name, (("v1", "v2"), ""))[0]
            selected.extend((p, v, v == "v2") for v in versions if v in allowed)
    if "guard" in sets:
        for p in guard_module.PROGRAMS:
            if names and p.name not in names:
                continue
            selected.append((p, "-", True))
    rows: list[Row] = []
    for p, version, v2 in selected:
        runs = {c: compile_once(guard_module, p, v2=v2, config=c) for c in CONFIGS}
        rows.append(Row(p.name, version, p.kind, p.issue, p.latent, runs))
        line = " / ".join(f"{c} {r.copies.copies} ({r.copies.nbytes} B){'' if r.correct else ' WRONG'}" for c, r in runs.items())
        print(f"  {p.name} [{version}]: {line}", file=sys.stderr)
    return rows


def verdict(rows: Sequence[Row]) -> dict[str, Any]:
    """Check the targets."""

    def more(a: Run, b: Run) -> bool:
        return a.copies.copies > b.copies.copies or a.copies.nbytes > b.copies.nbytes

    def label(r: Row) -> str:
        return f"{r.program} [{r.version}]" if r.version != "-" else r.program

    worse: list[str] = []
    latent: list[str] = []
    for r in rows:
        stock = r.runs["stock"]
        if not stock.correct:
            continue
        for c in ("pass", "guard"):
            if more(r.runs[c], stock):
                (latent if c == "guard" and r.latent and r.runs[c].hazards else worse).append(f"{label(r)} ({c})")
    by_key = {(r.program, r.version): r for r in rows}
    not_fewer = [
        f"{p} [{v}]"
        for p, v in PRECISION_TARGETS
        if (p, v) in by_key and not by_key[(p, v)].runs["pass"].copies.copies < by_key[(p, v)].runs["stock"].copies.copies
    ]
    controls_extra = [label(r) for r in rows if r.kind == "control" and (more(r.runs["guard"], r.runs["stock"]) or r.runs["guard"].hazards)]
    repros_wrong = [label(r) for r in rows if r.kind == "repro" and not r.runs["guard"].correct]
    wrong = {c: [label(r) for r in rows if not r.runs[c].correct] for c in CONFIGS}
    unguarded = [label(r) for r in rows if not r.runs["stock"].correct and r.kind != "custom-op" and not r.runs["guard"].hazards]
    return {
        "more_copies_than_stock": worse,
        "latent_hazards_guarded": latent,
        "precision_targets_not_strictly_fewer": not_fewer,
        "controls_with_extra_copies": controls_extra,
        "repros_wrong_with_guard": repros_wrong,
        "stock_wrong_and_not_guarded": unguarded,
        "wrong_stock": wrong["stock"],
        "wrong_with_pass": wrong["pass"],
        "wrong_with_guard": wrong["guard"],
        "targets_met": not worse and not not_fewer and not controls_extra and not repros_wrong and not wrong["guard"] and not unguarded,
    }


def table(rows: Sequence[Row]) -> str:
    """A Markdown table of the rows: copies (bytes) per configuration, correctness, the guard's hazards."""
    head = "| program | kind | af | stock | stock right | pass | pass right | guard | guard right | hazards |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        cells = []
        for c in CONFIGS:
            run_ = r.runs[c]
            sym = "+sym" if run_.copies.symbolic else ""
            cells.append(f"{run_.copies.copies} ({run_.copies.nbytes} B{sym})")
            cells.append("yes" if run_.correct else "**no**")
        kind = f"{r.kind} #{r.issue}" if r.issue else (f"{r.kind} (latent)" if r.latent else r.kind)
        hazards = ", ".join(r.runs["guard"].hazards) or "-"
        lines.append(f"| {r.program} | {kind} | {r.version} | " + " | ".join(cells) + f" | {hazards} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns 0 when the targets are met."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="program names (default: all)")
    parser.add_argument("--versions", nargs="*", default=["v2", "v1"], choices=["v2", "v1"], help="for the custom-op programs")
    parser.add_argument("--set", nargs="*", dest="sets", default=["custom-ops", "guard"], choices=["custom-ops", "guard"])
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = run(args.only, args.versions, args.sets)
    print(table(rows))
    v = verdict(rows)
    print()
    print(json.dumps(v, indent=2))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "torch": torch.__version__,
        "backend": "inductor cpp (CPU)",
        "configs": {
            "stock": "no custom pass",
            "pass": "post_grad_custom_post_pass=CloneEliminationPass(guard=False)",
            "guard": "rewrite.inductor.compile_options()",
        },
        "rows": [
            {
                "program": r.program,
                "version": r.version,
                "kind": r.kind,
                "issue": r.issue,
                "latent": r.latent,
                **{c: {**asdict(run_), "copies_total": run_.copies.copies, "bytes_total": run_.copies.nbytes} for c, run_ in r.runs.items()},
            }
            for r in rows
        ],
        "verdict": v,
    }
    args.output.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0 if v["targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
