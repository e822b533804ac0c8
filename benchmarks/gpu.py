"""Serving-engine programs compiled on CUDA: stock Inductor, vLLM's clone elimination, and fx-aliasing's.

Two cases (``--cases``, both by default):

- ``decoder``: a vLLM-style decoder (:class:`Decoder`) whose in-place rotary
  kernel mutates q and k, two views of one qkv projection output;
- ``kv_pool``: the K/V pool of vllm-omni (:class:`KVPool`): one allocation
  holding the K and V caches, whose two halves are the two mutated arguments
  of one cache-write kernel (``fxa_gpu::reshape_and_cache``), written by every
  layer; in three layouts (``--pool-layouts``): ``stacked``
  (``pool[0], pool[1]``, shape ``(2, slots, hidden)``), ``interleaved``
  (``pool[:, 0], pool[:, 1]``, shape ``(slots, 2, hidden)``) and ``per_layer``
  (``pool[i][0], pool[i][1]``, shape ``(layers, 2, slots, hidden)``).

The decoder (:class:`Decoder`) has, per layer, what vLLM's models compile:

- the fused add+RMSNorm as vLLM IR lowering leaves it: ``clone`` of the
  activation and of the residual, then the in-place kernel
  (``fxa_vllm::fused_add_rms_norm`` of :mod:`benchmarks.vllm_comparison`,
  called through ``view(-1, H)``);
- a fused qkv projection split into q, k, v views, with the in-place rotary
  kernel on the q and k views (``fxa_bench::rotary_`` of
  :mod:`benchmarks.synthetic`);
- k and v written into this layer's slots of a preallocated KV-cache graph
  input, attention reading them back from the cache;
- a SiLU-gated MLP.

The K/V pool (:class:`KVPool`) has, per layer, q, k and v projections of the
hidden states, k and v written at the layer's slot positions
(``slot_mapping[i]``) into the pool's two halves by
``fxa_gpu::reshape_and_cache(key, value, k_cache, v_cache, slot_mapping)``
(``mutates_args=("k_cache", "v_cache")``, the contract of vLLM's
``reshape_and_cache_flash`` on a flat cache), attention reading them back from
the pool inside ``fxa_gpu::attention`` (as vLLM's attention op reads its
cache), and a residual add. In the ``stacked`` and ``interleaved`` layouts
every layer writes the same pool (disjoint slots); in ``per_layer`` layer ``i``
writes ``pool[i]``. ``--pool-slots`` is each half's number of slots: the
default, 524,288 slots of ``--hidden 1024`` in bfloat16, is 1 GiB per half.

The custom ops are plain torch code, so they run on any device. Each program is
compiled four ways (backend inductor, Inductor's caches off) under each of
``--auto-functionalized v1,v2`` (v1, ``enable_auto_functionalized_v2=False``,
is how vLLM compiles; v2 is Inductor's default):

- **stock**: no custom pass;
- **vllm**: vLLM's pipeline, as ``post_grad_custom_post_pass``: functional
  wrappers lowered to clone plus in-place call (what vLLM IR lowering leaves;
  :func:`rewrite.lowering.lower_functional_ops`), then vLLM's
  ``UnsafeCloneEliminationPass`` under vLLM's pass context
  (:func:`benchmarks.vllm_comparison.run_pass`). Only where ``vllm`` is
  importable; otherwise the column is skipped with the reason;
- **ours-vllm**: the same pipeline with this library's vLLM adapter
  (``rewrite.vllm.CloneEliminationPass``) in place of vLLM's pass, as the
  plugin puts it there (only where ``vllm`` is importable);
- **ours**: ``rewrite.inductor.compile_options()``, the one-line install.

For each: the **bytes copied** in the generated code
(:func:`benchmarks.inductor_copies.count_copies`; Triton kernels are first
put in the C++ form it reads, :func:`triton_as_cpp`), the **time** of one
forward call (CUDA events around each call after ``--warmup`` calls, median
of ``--runs``; on ``--device cpu``, ``time.perf_counter``), the **peak memory**
of one call (``torch.cuda.max_memory_allocated`` after a reset; not measured
on CPU) and the result against eager's (outputs and the mutated cache
afterwards): max abs difference, whether it is bitwise equal, and which of
them differ.

Usage::

    python -m benchmarks.gpu                    # CUDA; without a CUDA device: skipped, JSON says why
    python -m benchmarks.gpu --device cpu --layers 2 --tokens 16 --hidden 64 --pool-slots 64 --runs 20   # on CPU
    python -m benchmarks.gpu --cases kv_pool --pool-layouts per_layer --auto-functionalized v1
    python -m benchmarks.gpu --cases kv_pool --dynamic   # every size symbolic (torch.compile(dynamic=True))

Prints a table per case, layout and functionalization, and writes ``benchmarks/results/gpu.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch import Tensor, nn
from torch._inductor.custom_graph_pass import CustomGraphPass

from benchmarks.inductor_copies import _split_args, count_copies
from benchmarks.synthetic import rotary_
from benchmarks.vllm_comparison import fused_add_rms_norm
from rewrite.inductor import compile_options, library_source_hash

__all__ = [
    "CASES",
    "CONFIGS",
    "POOL_LAYOUTS",
    "Decoder",
    "KVPool",
    "Result",
    "VllmPipelinePass",
    "attention",
    "bytes_copied",
    "format_table",
    "main",
    "measure",
    "reshape_and_cache",
    "time_calls",
    "triton_as_cpp",
]

RESULTS = Path(__file__).resolve().parent / "results" / "gpu.json"
CONFIGS: tuple[str, ...] = ("stock", "vllm", "ours-vllm", "ours")
CASES: tuple[str, ...] = ("decoder", "kv_pool")
POOL_LAYOUTS: tuple[str, ...] = ("stacked", "interleaved", "per_layer")
EPS = 1e-6


# --------------------------------------------------------------------------- the decoder


class Decoder(nn.Module):
    """A vLLM-style decoder of ``layers`` layers over ``tokens`` tokens (see the module docstring).

    ``forward(x, residual, cos, sin, kv_cache)`` returns the last layer's
    hidden states and residual, and writes every layer's k and v into
    ``kv_cache`` (``(layers, 2, tokens, hidden)``).

    Examples
    --------
    >>> m = Decoder(layers=1, hidden=16, heads=2, tokens=4)
    >>> x, residual, cos, sin, cache = m.inputs(seed=0)
    >>> [tuple(t.shape) for t in m(x, residual, cos, sin, cache)], bool(cache.abs().sum() > 0)
    ([(4, 16), (4, 16)], True)
    """

    case = "decoder"
    variant: str | None = None
    mutated = "kv_cache"

    def __init__(
        self,
        *,
        layers: int = 4,
        hidden: int = 1024,
        heads: int = 16,
        tokens: int = 256,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__()
        if hidden % heads or (hidden // heads) % 2:
            raise ValueError("hidden must be heads times an even head size")
        self.layers, self.hidden, self.heads, self.tokens = layers, hidden, heads, tokens
        self.dtype, self.device = dtype, torch.device(device)
        gen = torch.Generator().manual_seed(1234)

        def weight(*shape: int, scale: float, offset: float = 0.0) -> nn.Parameter:
            w = torch.randn(*shape, generator=gen) * scale + offset
            return nn.Parameter(w.to(device=self.device, dtype=dtype), requires_grad=False)

        h = hidden
        self.norm1 = nn.ParameterList(weight(h, scale=0.1, offset=1.0) for _ in range(layers))
        self.norm2 = nn.ParameterList(weight(h, scale=0.1, offset=1.0) for _ in range(layers))
        self.qkv = nn.ParameterList(weight(h, 3 * h, scale=h**-0.5) for _ in range(layers))
        self.out = nn.ParameterList(weight(h, h, scale=h**-0.5) for _ in range(layers))
        self.gate_up = nn.ParameterList(weight(h, 4 * h, scale=h**-0.5) for _ in range(layers))
        self.down = nn.ParameterList(weight(2 * h, h, scale=(2 * h) ** -0.5) for _ in range(layers))

    def inputs(self, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Fresh inputs ``(x, residual, cos, sin, kv_cache)``, the same values for the same seed."""
        gen = torch.Generator().manual_seed(seed)
        t, h, half = self.tokens, self.hidden, self.hidden // self.heads // 2
        angles = torch.arange(t, dtype=torch.float32)[:, None] * torch.rand(half, generator=gen)[None]

        def put(x: Tensor) -> Tensor:
            return x.to(device=self.device, dtype=self.dtype)

        x, residual = put(torch.randn(t, h, generator=gen)), put(torch.randn(t, h, generator=gen))
        cache = torch.zeros(self.layers, 2, t, h, device=self.device, dtype=self.dtype)
        return x, residual, put(angles.cos()), put(angles.sin()), cache

    def forward(self, x: Tensor, residual: Tensor, cos: Tensor, sin: Tensor, kv_cache: Tensor) -> tuple[Tensor, Tensor]:
        """Every layer; see the class docstring."""
        t, h, nh = x.shape[0], self.hidden, self.heads
        hd = h // nh
        cos_h, sin_h = cos[:, None, :], sin[:, None, :]  # (t, 1, hd/2): broadcast over heads
        for i in range(self.layers):
            # fused add + RMSNorm as vLLM IR lowering leaves it: clones, then the in-place kernel
            x, residual = x.clone(), residual.clone()
            fused_add_rms_norm(x.view(-1, h), residual.view(-1, h), self.norm1[i], EPS)
            q, k, v = (x @ self.qkv[i]).split(h, dim=-1)
            q, k = q.view(t, nh, hd), k.view(t, nh, hd)
            rotary_(q, k, cos_h, sin_h)  # in place on views of the qkv output
            kv_cache[i, 0].copy_(k.reshape(t, h))  # this layer's slots of the KV cache
            kv_cache[i, 1].copy_(v)
            keys, values = kv_cache[i, 0].view(t, nh, hd), kv_cache[i, 1].view(t, nh, hd)
            att = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1), is_causal=True
            )
            x = att.transpose(0, 1).reshape(t, h) @ self.out[i]
            x, residual = x.clone(), residual.clone()
            fused_add_rms_norm(x.view(-1, h), residual.view(-1, h), self.norm2[i], EPS)
            gate, up = (x @ self.gate_up[i]).chunk(2, dim=-1)
            x = (torch.nn.functional.silu(gate) * up) @ self.down[i]
        return x, residual


# --------------------------------------------------------------------------- the K/V pool


@torch.library.custom_op("fxa_gpu::reshape_and_cache", mutates_args=("k_cache", "v_cache"))
def reshape_and_cache(key: Tensor, value: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor) -> None:
    """Write ``key`` and ``value`` (``(tokens, hidden)``) into rows ``slot_mapping`` of the caches, in place."""
    k_cache.index_copy_(0, slot_mapping, key)
    v_cache.index_copy_(0, slot_mapping, value)


@reshape_and_cache.register_fake
def _reshape_and_cache_fake(key: Tensor, value: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor) -> None:
    return None


@torch.library.custom_op("fxa_gpu::attention", mutates_args=())
def attention(query: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor, heads: int) -> Tensor:
    """Causal attention of ``query`` (``(tokens, hidden)``) over the keys and values at ``slot_mapping`` of the caches."""
    t, h = query.shape
    keys, values = k_cache[slot_mapping], v_cache[slot_mapping]
    q, k, v = (a.reshape(t, heads, h // heads).transpose(0, 1) for a in (query, keys, values))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out.transpose(0, 1).reshape(t, h)


@attention.register_fake
def _attention_fake(query: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor, heads: int) -> Tensor:
    return torch.empty_like(query)


class KVPool(nn.Module):
    """Layers writing their k and v into the two halves of one K/V pool (see the module docstring).

    ``forward(x, slot_mapping, pool)`` returns the last layer's hidden states
    and writes every layer's k and v into ``pool``; ``slot_mapping`` is
    ``(layers, tokens)``, disjoint slots of each half. ``layout`` is one of
    :data:`POOL_LAYOUTS`: the pool is ``(2, slots, hidden)`` (``stacked``),
    ``(slots, 2, hidden)`` (``interleaved``) or ``(layers, 2, slots, hidden)``
    (``per_layer``).

    Examples
    --------
    >>> m = KVPool(layers=2, hidden=16, heads=2, tokens=4, slots=8, layout="interleaved")
    >>> x, slot_mapping, pool = m.inputs(seed=0)
    >>> tuple(pool.shape), tuple(m(x, slot_mapping, pool)[0].shape), int((pool != 0).any(-1).sum())
    ((8, 2, 16), (4, 16), 16)
    """

    case = "kv_pool"
    mutated = "pool"

    def __init__(
        self,
        *,
        layers: int = 4,
        hidden: int = 1024,
        heads: int = 16,
        tokens: int = 256,
        slots: int = 524_288,
        layout: str = "stacked",
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__()
        if layout not in POOL_LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(POOL_LAYOUTS)}")
        if hidden % heads:
            raise ValueError("hidden must be a multiple of heads")
        if slots < (tokens if layout == "per_layer" else layers * tokens):
            raise ValueError("the pool has fewer slots than the layers write")
        self.layers, self.hidden, self.heads, self.tokens, self.slots = layers, hidden, heads, tokens, slots
        self.variant: str | None = layout
        self.layout, self.dtype, self.device = layout, dtype, torch.device(device)
        gen = torch.Generator().manual_seed(4321)

        def weight() -> nn.Parameter:
            w = torch.randn(hidden, hidden, generator=gen) * hidden**-0.5
            return nn.Parameter(w.to(device=self.device, dtype=dtype), requires_grad=False)

        self.wq = nn.ParameterList(weight() for _ in range(layers))
        self.wk = nn.ParameterList(weight() for _ in range(layers))
        self.wv = nn.ParameterList(weight() for _ in range(layers))
        self.wo = nn.ParameterList(weight() for _ in range(layers))

    def pool_shape(self) -> tuple[int, ...]:
        """The pool's shape in this layout."""
        s, h = self.slots, self.hidden
        return {"stacked": (2, s, h), "interleaved": (s, 2, h), "per_layer": (self.layers, 2, s, h)}[self.layout]

    def inputs(self, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
        """Fresh inputs ``(x, slot_mapping, pool)``, the same values for the same seed (the pool zeroed)."""
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(self.tokens, self.hidden, generator=gen).to(device=self.device, dtype=self.dtype)
        per_pool = 1 if self.layout == "per_layer" else self.layers
        slots = torch.randperm(self.slots, generator=gen)[: per_pool * self.tokens].view(per_pool, self.tokens)
        slot_mapping = slots.expand(self.layers, -1) if per_pool == 1 else slots
        pool = torch.zeros(self.pool_shape(), device=self.device, dtype=self.dtype)
        return x, slot_mapping.contiguous().to(self.device), pool

    def halves(self, pool: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """Layer ``layer``'s K and V caches: two views of ``pool``."""
        if self.layout == "stacked":
            return pool[0], pool[1]
        if self.layout == "interleaved":
            return pool[:, 0], pool[:, 1]
        return pool[layer][0], pool[layer][1]

    def forward(self, x: Tensor, slot_mapping: Tensor, pool: Tensor) -> tuple[Tensor]:
        """Every layer; see the class docstring."""
        for i in range(self.layers):
            k_cache, v_cache = self.halves(pool, i)
            q, k, v = x @ self.wq[i], x @ self.wk[i], x @ self.wv[i]
            reshape_and_cache(k, v, k_cache, v_cache, slot_mapping[i])
            x = x + attention(q, k_cache, v_cache, slot_mapping[i], self.heads) @ self.wo[i]
        return (x,)


# --------------------------------------------------------------------------- vLLM's pass


class VllmPipelinePass(CustomGraphPass):
    """vLLM's post-grad clone elimination as a ``post_grad_custom_post_pass``.

    vLLM IR lowering leaves clone plus in-place call where torch.compile's
    functional graph has ``auto_functionalized``; that is done with
    :func:`rewrite.lowering.lower_functional_ops`, then vLLM's
    ``UnsafeCloneEliminationPass`` runs under vLLM's pass context (no donated
    inputs); with ``ours``, this library's vLLM adapter
    (:class:`rewrite.vllm.CloneEliminationPass`) takes its place, as the plugin
    puts it there. ``ImportError`` at construction when vLLM is not installed.
    """

    def __init__(self, *, ours: bool = False) -> None:
        from benchmarks.vllm_comparison import _vllm_config, load_vllm_pass

        if ours:
            from rewrite.vllm import CloneEliminationPass

            self.pass_: Any = CloneEliminationPass(_vllm_config())
        else:
            self.pass_ = load_vllm_pass()(_vllm_config())
        self.ours = ours
        self.seconds = 0.0

    def uuid(self) -> str:
        """Changes with the library's source (the lowering) and vLLM's version."""
        import vllm

        which = "ours" if self.ours else "unsafe"
        return f"vllm-{which}-{getattr(vllm, '__version__', '?')}-{library_source_hash()}"

    def __call__(self, graph: torch.fx.Graph) -> None:
        """Lower the functional wrappers, then run the vLLM pass on ``graph``."""
        from benchmarks.vllm_comparison import run_pass
        from rewrite.lowering import lower_functional_ops

        gm = graph.owning_module
        if not isinstance(gm, torch.fx.GraphModule):
            raise TypeError("vLLM's pass needs the graph's GraphModule")
        lower_functional_ops(graph)
        self.seconds += run_pass(self.pass_, gm, ())


def config_options(config: str) -> dict[str, Any]:
    """Inductor options of ``config``; ``ImportError`` for ``"vllm"`` without vLLM."""
    if config == "stock":
        return {}
    if config == "vllm":
        return {"post_grad_custom_post_pass": VllmPipelinePass()}
    if config == "ours-vllm":
        return {"post_grad_custom_post_pass": VllmPipelinePass(ours=True)}
    if config == "ours":
        return compile_options()
    raise ValueError(f"unknown configuration {config!r}")


# --------------------------------------------------------------------------- reading the generated code

_TRITON_KERNEL = re.compile(r"^(\w+) = async_compile\.triton\((?:'[^']*'|\"[^\"]*\"),\s*'''(.*?)'''[^\n]*\)$", re.S | re.M)
_TRITON_DEF = re.compile(r"^def (\w+)\((.*?)\):\s*$", re.M | re.S)
_TRITON_SIGNATURE = re.compile(r"'signature':\s*\{(.*?)\}", re.S)
_TRITON_NUMEL = re.compile(r"^\s*(x|y|z|r0_|r1_|r)numel = (\d+)\s*$", re.M)
_TRITON_ASSIGN = re.compile(r"^\s*(tmp\d+) = (.*?)\s*$")
_TRITON_STORE = re.compile(r"^\s*tl\.store\((\w+_ptr\d+) \+ (.*)\)\s*$")
_TRITON_RUN = re.compile(r"^(\s*)(\w+)\.run\((.*)\)\s*$", re.M)
_TRITON_WHERE = re.compile(r"^tl\.where\((.*)\)$")
_TRITON_CAST = re.compile(r"^(tmp\d+)\.to\(.*\)$|^tl\.broadcast_to\((tmp\d+),.*\)$|^\((tmp\d+)\)\.to\(.*\)$")
#: C types of Triton's pointer types (their element sizes are what count_copies reads).
_TRITON_CTYPE = {
    "fp64": "double", "fp32": "float", "fp16": "half", "bf16": "bfloat16", "i64": "int64_t", "u64": "uint64_t",
    "i32": "int32_t", "u32": "uint32_t", "i16": "int16_t", "u16": "uint16_t", "i8": "int8_t", "u8": "uint8_t",
    "i1": "bool", "fp8e4nv": "uint8_t", "fp8e5": "uint8_t",
}


def _triton_kernel_as_cpp(src: str) -> tuple[str, list[str]] | None:
    """One Triton kernel's source in the C++ form :func:`count_copies` reads, and its C parameter types."""
    found = _TRITON_DEF.search(src)
    if found is None:
        return None
    params = [p.split(":")[0].strip() for p in found.group(2).split(",") if p.strip() and "constexpr" not in p]
    sig = _TRITON_SIGNATURE.search(src)
    types = dict(re.findall(r"'(\w+)':\s*'([^']*)'", sig.group(1))) if sig else {}
    decls, ctypes = [], []
    for p in params:
        ty = types.get(p, "*fp32" if "ptr" in p else "i32")
        if ty.startswith("*"):
            ctype = _TRITON_CTYPE.get(ty[1:], "float")
            const = "const " if p.startswith("in_ptr") else ""
            decls.append(f"{const}{ctype}* {p}")
            ctypes.append(f"{const}{ctype}*")
        else:
            decls.append(f"int64_t {p}")
            ctypes.append("int64_t")
    numels = dict(_TRITON_NUMEL.findall(src[found.end() :]))
    body: list[str] = []
    for line in src[found.end() :].splitlines():
        store = _TRITON_STORE.match(line)
        if store is not None:
            ptr, rest = store.group(1), _split_args(store.group(2))
            if len(rest) >= 2:
                idx = " ".join([rest[0], *rest[2:]])
                # a loop over each dimension the store's index or mask uses (its element count)
                loops = [p for p in numels if re.search(rf"\b{p}(?:\d|index|mask)", idx)]
                body += [f"    for(int64_t {p}i=0; {p}i<{numels[p]}; {p}i++) {{" for p in loops]
                body.append(f"    {ptr}[i] = {_triton_expr(rest[1])};")
                body += ["    }"] * len(loops)
            continue
        assign = _TRITON_ASSIGN.match(line)
        if assign is not None:
            body.append(f"    auto {assign.group(1)} = {_triton_expr(assign.group(2))};")
    kernel = 'extern "C" void kernel(' + ", ".join(decls) + ")\n{\n" + "\n".join(body) + "\n}\n"
    return kernel, ctypes


def _triton_expr(rhs: str) -> str:
    """A Triton expression in the C++ form :func:`count_copies` classifies (select, cast, load or arithmetic)."""
    rhs = rhs.strip()
    where = _TRITON_WHERE.match(rhs)
    if where is not None:
        args = _split_args(where.group(1))
        if len(args) == 3:
            return f"{args[0]} ? {args[1]} : {args[2]}"
    cast = _TRITON_CAST.match(rhs)
    if cast is not None:
        return f"static_cast<float>({next(g for g in cast.groups() if g)})"
    return rhs.replace(";", ",")


def triton_as_cpp(code: str) -> str:
    r"""Inductor's Triton (CUDA) module with its kernels and launches in the C++ form :func:`count_copies` reads.

    Each ``async_compile.triton`` kernel becomes an ``async_compile.cpp_pybinding``
    kernel whose stores and temporaries keep their meaning (a load, a select,
    a cast, arithmetic; a loop over each dimension a store uses, so the
    elements it stores are counted), and each ``kernel.run(args...)`` launch a
    call with the same positional arguments. Buffers and input checks are
    read as they are. A C++ module is returned unchanged.

    Examples
    --------
    >>> q = "'" * 3
    >>> src = ("triton_poi_0 = async_compile.triton('triton_poi_0', " + q + "\n"
    ...        "@triton.jit\ndef triton_poi_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n"
    ...        "    xnumel = 8\n    x0 = xindex\n    tmp0 = tl.load(in_ptr0 + (x0), xmask)\n"
    ...        "    tl.store(out_ptr0 + (x0), tmp0, xmask)\n" + q + ", device_str='cuda')\n"
    ...        "def call(args):\n"
    ...        "    buf0 = empty_strided_cuda((8, ), (1, ), torch.float32)\n"
    ...        "    triton_poi_0.run(arg0_1, buf0, 8, stream=stream0)\n")
    >>> c = count_copies(triton_as_cpp(src))
    >>> (c.clones, c.clone_bytes)
    (1, 32)
    """
    kernels: set[str] = set()

    def kernel(m: re.Match[str]) -> str:
        converted = _triton_kernel_as_cpp(m.group(2))
        if converted is None:
            return m.group(0)
        kernels.add(m.group(1))
        cpp, ctypes = converted
        return f"{m.group(1)} = async_compile.cpp_pybinding({ctypes!r}, r'''{cpp}''')"

    out = _TRITON_KERNEL.sub(kernel, code)

    def launch(m: re.Match[str]) -> str:
        if m.group(2) not in kernels:
            return m.group(0)
        args = [a for a in _split_args(m.group(3)) if not re.match(r"^\w+\s*=", a)]
        return f"{m.group(1)}{m.group(2)}({', '.join(args)})"

    return _TRITON_RUN.sub(launch, out)


def bytes_copied(codes: Sequence[str]) -> dict[str, Any]:
    """Copies and their bytes in Inductor's generated modules (C++ or Triton), added up."""
    total = {"copies": 0, "bytes": 0, "clones": 0, "copies_into": 0, "copy_backs": 0, "symbolic": False}
    for code in codes:
        c = count_copies(triton_as_cpp(code))
        total["copies"] += c.copies
        total["bytes"] += c.nbytes
        total["clones"] += c.clones
        total["copies_into"] += c.copies_into
        total["copy_backs"] += c.copy_backs
        total["symbolic"] = bool(total["symbolic"]) or c.symbolic
    return total


# --------------------------------------------------------------------------- measuring


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn: Callable[[], object], device: torch.device, *, warmup: int, runs: int) -> list[float]:
    """Milliseconds of each of ``runs`` calls of ``fn`` after ``warmup`` calls.

    On CUDA each call is timed with a pair of CUDA events (the GPU time of
    the kernels it launches, launch gaps included); elsewhere with
    ``time.perf_counter``.

    Examples
    --------
    >>> ms = time_calls(lambda: None, torch.device("cpu"), warmup=1, runs=3)
    >>> len(ms), all(t >= 0 for t in ms)
    (3, True)
    """
    for _ in range(warmup):
        fn()
    _sync(device)
    out: list[float] = []
    if device.type == "cuda":
        event = torch.cuda.Event
        pairs = [(event(enable_timing=True), event(enable_timing=True)) for _ in range(runs)]  # type: ignore[no-untyped-call]
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) for start, end in pairs]
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _peak_bytes(fn: Callable[[], object], device: torch.device) -> tuple[int, int] | None:
    """Peak allocated bytes during one call, and above what was allocated before it (None off CUDA)."""
    if device.type != "cuda":
        return None
    _sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    _sync(device)
    peak = torch.cuda.max_memory_allocated(device)
    return peak, peak - before


def _compare(got: Sequence[Tensor], want: Sequence[Tensor]) -> tuple[float, bool]:
    """Max abs difference (``inf`` where a difference is NaN) and bitwise equality of two lists of tensors."""
    diff = max(
        ((g.float() - w.float()).abs().nan_to_num(nan=math.inf).max().item() for g, w in zip(got, want)), default=0.0
    )
    equal = all(_same(g, w) for g, w in zip(got, want))
    return float(diff), equal


def _same(got: Tensor, want: Tensor) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


@dataclass
class Result:
    """One configuration's measurements (or why it was skipped) on one case (and layout) under v1 or v2."""

    config: str
    case: str = "decoder"
    variant: str | None = None
    auto_functionalized: str = "v1"
    skipped: str | None = None
    error: str | None = None
    copies: dict[str, Any] = field(default_factory=dict)
    median_ms: float | None = None
    runs_ms: list[float] = field(default_factory=list)
    peak_bytes: int | None = None
    peak_extra_bytes: int | None = None
    max_abs_diff: float | None = None
    bitwise_equal: bool | None = None
    differs: list[str] = field(default_factory=list)
    compile_s: float | None = None


def measure(
    model: Decoder | KVPool, config: str, *, warmup: int, runs: int, v2: bool = False, dynamic: bool = False
) -> Result:
    """Compile ``model`` in ``config``, read its generated code, time it, and compare with eager.

    The outputs and the mutated input (the last one: the KV cache, the pool)
    are compared. ``v2`` is Inductor's ``enable_auto_functionalized_v2``; vLLM
    compiles with it off (the default here); ``dynamic`` compiles with every size symbolic
    (``torch.compile(dynamic=True)``). An exception while compiling or
    running is recorded in ``error`` (a CUDA fault can leave the device
    unusable for the rows after it).
    """
    row = Result(config, case=model.case, variant=model.variant, auto_functionalized="v2" if v2 else "v1")
    try:
        options = config_options(config)
    except ImportError as e:
        return replace(row, skipped=f"vllm is not importable: {e}")
    try:
        return _measure(model, row, options, warmup=warmup, runs=runs, v2=v2, dynamic=dynamic)
    except Exception as e:  # a compile or a run that fails is a result (the other rows still run)
        torch._dynamo.reset()
        return replace(row, error=f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")


def _measure(
    model: Decoder | KVPool, row: Result, options: dict[str, Any], *, warmup: int, runs: int, v2: bool, dynamic: bool
) -> Result:
    from torch._inductor.utils import run_and_get_code

    device = model.device
    with torch.no_grad():
        want_inputs = model.inputs(seed=0)
        want = [*model(*want_inputs), want_inputs[-1]]
        torch._dynamo.reset()
        with torch._inductor.config.patch(fx_graph_cache=False, enable_auto_functionalized_v2=v2):
            compiled = torch.compile(model, backend="inductor", options=options, dynamic=dynamic or None)
            got_inputs = model.inputs(seed=0)
            t0 = time.perf_counter()
            out, codes = run_and_get_code(compiled, *got_inputs)
            compile_s = time.perf_counter() - t0
        got = [*out, got_inputs[-1]]
        diff, equal = _compare(got, want)
        names = [f"output {i}" for i in range(len(got) - 1)] + [model.mutated]
        differs = [n for n, g, w in zip(names, got, want) if not _same(g, w)]
        del want_inputs, want, got_inputs, got, out
        bench_inputs = model.inputs(seed=1)
        ms = time_calls(lambda: compiled(*bench_inputs), device, warmup=warmup, runs=runs)
        peak = _peak_bytes(lambda: compiled(*bench_inputs), device)
    torch._dynamo.reset()
    return replace(
        row,
        copies=bytes_copied(codes),
        median_ms=statistics.median(ms),
        runs_ms=[round(t, 5) for t in ms],
        peak_bytes=peak[0] if peak else None,
        peak_extra_bytes=peak[1] if peak else None,
        max_abs_diff=diff,
        bitwise_equal=equal,
        differs=differs,
        compile_s=compile_s,
    )


def format_table(results: Sequence[Result], *, device: torch.device) -> str:
    """A Markdown table of the configurations (the memory column only on CUDA)."""
    timer = "CUDA events" if device.type == "cuda" else "perf_counter"
    head = ["config", "copies", "bytes copied", f"median ms ({timer})"]
    if device.type == "cuda":
        head += ["peak MiB", "peak above inputs MiB"]
    head += ["max abs diff vs eager", "bitwise equal"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in results:
        if r.skipped or r.error:
            why = f"skipped: {r.skipped}" if r.skipped else f"failed: {r.error}"
            lines.append(f"| {r.config} | {why} |" + " |" * (len(head) - 2))
            continue
        cells = [r.config, str(r.copies["copies"]), f"{r.copies['bytes']:,}", f"{r.median_ms:.3f}"]
        if device.type == "cuda":
            cells += [f"{(r.peak_bytes or 0) / 2**20:.2f}", f"{(r.peak_extra_bytes or 0) / 2**20:.2f}"]
        cells += [f"{r.max_abs_diff:.3g}", "yes" if r.bitwise_equal else f"no ({', '.join(r.differs)})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _title(model: Decoder | KVPool, version: str) -> str:
    """The line above a case's table: the case, its layout and sizes, and the functionalization."""
    if isinstance(model, KVPool):
        half = model.slots * model.hidden * torch.empty((), dtype=model.dtype).element_size()
        what = f"kv_pool, {model.layout} (pool {tuple(model.pool_shape())}, {half / 2**20:,.2f} MiB per half)"
    else:
        what = "decoder (rotary on q/k views of one qkv output)"
    return f"{what}, {model.layers} layers, auto-functionalized {version}:"


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with a non-finite ``max_abs_diff`` as its name (``"inf"``, ``"nan"``): the JSON stays strict."""
    diff = row.get("max_abs_diff")
    if isinstance(diff, float) and not math.isfinite(diff):
        row["max_abs_diff"] = str(diff)
    return row


def _choices(value: str, allowed: Sequence[str], flag: str) -> list[str]:
    """The comma-separated names of ``value``, each one of ``allowed`` (else a usage error)."""
    names = [c for c in value.split(",") if c]
    if not names or any(c not in allowed for c in names):
        build_parser().error(f"{flag} takes {', '.join(allowed)}")
    return names


def _write(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, allow_nan=False) + "\n")
    print(f"wrote {path}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.gpu``."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (the same measurements, perf_counter timing)")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument(
        "--pool-slots",
        type=int,
        default=524_288,
        help="kv_pool: slots of each half of the pool (default: 1 GiB per half at --hidden 1024 in bfloat16)",
    )
    p.add_argument(
        "--pool-layouts", default=",".join(POOL_LAYOUTS), help=f"kv_pool: comma-separated, of {', '.join(POOL_LAYOUTS)}"
    )
    p.add_argument("--dtype", default=None, help="torch dtype name (default: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument(
        "--auto-functionalized",
        default="v1,v2",
        help="Inductor's functionalization of mutable custom ops, comma-separated: v1 (as vLLM compiles), v2 (default: both)",
    )
    p.add_argument("--dynamic", action="store_true", help="compile with every size symbolic (torch.compile(dynamic=True))")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; without a CUDA device (for ``--device cuda``) write a skipped JSON and return 0."""
    args = build_parser().parse_args(argv)
    device = torch.device(args.device)
    configs = _choices(args.configs, CONFIGS, "--configs")
    cases = _choices(args.cases, CASES, "--cases")
    layouts = _choices(args.pool_layouts, POOL_LAYOUTS, "--pool-layouts")
    versions = _choices(args.auto_functionalized, ("v1", "v2"), "--auto-functionalized")
    if device.type == "cuda" and not torch.cuda.is_available():
        reason = f"no CUDA device (torch {torch.__version__}, torch.cuda.is_available() is False)"
        print(f"benchmarks.gpu: skipped: {reason}")
        _write(args.out, {"skipped": True, "reason": reason})
        return 0
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    sizes = {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "tokens": args.tokens}
    models: list[Decoder | KVPool] = []
    if "decoder" in cases:
        models.append(Decoder(**sizes, dtype=dtype, device=device))
    if "kv_pool" in cases:
        models += [
            KVPool(**sizes, slots=args.pool_slots, layout=layout, dtype=dtype, device=device) for layout in layouts
        ]
    results = []
    for model in models:
        for version in versions:
            group = []
            for config in configs:
                print(f"{model.case} {model.variant or ''} {version} {config} ...", file=sys.stderr, flush=True)
                row = measure(model, config, warmup=args.warmup, runs=args.runs, v2=version == "v2", dynamic=args.dynamic)
                group.append(row)
            print(f"\n{_title(model, version)}\n\n{format_table(group, device=device)}")
            results += group
    try:
        import vllm

        vllm_version: str | None = getattr(vllm, "__version__", "?")
    except ImportError:
        vllm_version = None
    payload = {
        "skipped": False,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "vllm": vllm_version,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "timer": "CUDA events" if device.type == "cuda" else "time.perf_counter",
        },
        "decoder": {
            "layers": args.layers, "hidden": args.hidden, "heads": args.heads, "tokens": args.tokens, "dtype": str(dtype),
            "auto_functionalized": ",".join(versions), "dynamic": args.dynamic,
        },
        "cases": cases,
        "kv_pool": {"slots": args.pool_slots, "layouts": layouts} if "kv_pool" in cases else None,
        "warmup": args.warmup,
        "runs": args.runs,
        "results": [_finite(asdict(r)) for r in results],
    }
    _write(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
