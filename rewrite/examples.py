"""The bundled example: a small transformer-style block with real custom ops.

The block is what ``fx-aliasing demo`` traces, analyses and rewrites. It mixes
everything the alias analysis has to get right in a real serving graph:

- ``fx_aliasing_demo::rms_norm_``: an in-place RMSNorm custom op
  (``mutates_args=("x",)``), applied to a clone of the hidden state, the way
  serving pipelines lower a functional norm into ``clone`` + in-place kernel;
- a fused qkv projection split along the last dimension into ``q``, ``k``, ``v``
  (three disjoint, strided views of one buffer at offsets ``0``, ``D``, ``2D``);
- ``fx_aliasing_demo::rotary_``: an in-place rotary embedding that mutates two
  arguments (the ``q`` and ``k`` views) in one call;
- a KV-cache write: ``k`` is copied into a slice of a preallocated cache that
  the caller passes in (``k_cache[START:START + T].copy_(k)``) and ``v`` is
  scattered into the value cache with ``index_copy_`` at given slots;
- five clones, some needed and some not:

  ========== ============================================ ==================
  clone      what it copies                               needed?
  ========== ============================================ ==================
  ``h``      the input ``x``, then normalised in place;   yes: ``x`` is read
             ``x`` is read again by the residual add      after the write
  ``k_pre``  the strided ``k`` view (before rotary)        yes: layout change
                                                          and ``k`` is
                                                          written later
  ``q_c``    ``q.contiguous()`` after rotary              yes: layout change
  ``p_c``    the attention probabilities, only read       no
  ``y``      the projection output, written by the        no: the original
             residual add                                 is dead afterwards
  ========== ============================================ ==================

Examples
--------
>>> from rewrite.examples import demo_block, trace_demo
>>> fn, make_inputs = demo_block()
>>> out, k_pre = fn(*make_inputs(seed=0))
>>> tuple(out.shape)
(4, 8)
>>> gm = trace_demo()
>>> sum(1 for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default)
5
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
import torch.fx
from torch import Tensor
from torch.fx.experimental.proxy_tensor import make_fx

__all__ = [
    "DEMO_DONATED_INPUTS",
    "DEMO_INPUT_NAMES",
    "EPS",
    "HIDDEN",
    "MAX_TOKENS",
    "START",
    "TOKENS",
    "TracingMode",
    "demo_block",
    "make_demo_inputs",
    "rms_norm_",
    "rotary_",
    "trace_demo",
]

#: ``make_fx`` tracing modes :func:`trace_demo` accepts.
TracingMode = Literal["fake", "symbolic", "real"]

#: Tokens in the demo batch (``T``).
TOKENS: int = 4
#: Hidden size (``D``); even, so rotary can rotate halves.
HIDDEN: int = 8
#: Rows of the preallocated KV cache.
MAX_TOKENS: int = 16
#: First cache row written by this step.
START: int = 2
#: RMSNorm epsilon.
EPS: float = 1e-6
#: Names of the block's inputs, in placeholder order.
DEMO_INPUT_NAMES: tuple[str, ...] = (
    "x",
    "norm_weight",
    "w_qkv",
    "w_out",
    "cos",
    "sin",
    "k_cache",
    "v_cache",
    "slots",
)
#: Placeholder positions the caller donates: none. Every input, the caches
#: included, must end with the value the block gives it.
DEMO_DONATED_INPUTS: tuple[int, ...] = ()


# --- custom ops (registered once, when this module is first imported) -------


@torch.library.custom_op("fx_aliasing_demo::rms_norm_", mutates_args=("x",))
def rms_norm_(x: Tensor, weight: Tensor, eps: float) -> None:
    """Normalise ``x`` in place over its last dimension and scale by ``weight``.

    Parameters
    ----------
    x : Tensor
        ``[T, D]`` tensor, overwritten with ``x / rms(x) * weight``.
    weight : Tensor
        ``[D]`` scale.
    eps : float
        Added to the mean square before the square root.

    Examples
    --------
    >>> x = torch.ones(2, 4)
    >>> rms_norm_(x, torch.full((4,), 2.0), 1e-6)
    >>> x
    tensor([[2.0000, 2.0000, 2.0000, 2.0000],
            [2.0000, 2.0000, 2.0000, 2.0000]])
    """
    scale = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    x.mul_(scale).mul_(weight)


@rms_norm_.register_fake
def _rms_norm_fake(x: Tensor, weight: Tensor, eps: float) -> None:
    return None


@torch.library.custom_op("fx_aliasing_demo::rotary_", mutates_args=("q", "k"))
def rotary_(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> None:
    """Apply a rotary embedding to ``q`` and ``k`` in place (rotate-half form).

    Parameters
    ----------
    q, k : Tensor
        ``[T, D]`` tensors (possibly strided views of one buffer), both overwritten.
    cos, sin : Tensor
        ``[T, D // 2]`` angles.

    Examples
    --------
    >>> q, k = torch.ones(1, 2), torch.ones(1, 2)
    >>> rotary_(q, k, torch.zeros(1, 1), torch.ones(1, 1))
    >>> q
    tensor([[-1.,  1.]])
    """
    for t in (q, k):
        first, second = t.chunk(2, dim=-1)
        rotated = torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
        t.copy_(rotated)


@rotary_.register_fake
def _rotary_fake(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> None:
    return None


# --- the block ----------------------------------------------------------------


def _block(
    x: Tensor,
    norm_weight: Tensor,
    w_qkv: Tensor,
    w_out: Tensor,
    cos: Tensor,
    sin: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    slots: Tensor,
) -> tuple[Tensor, Tensor]:
    tokens, hidden = x.shape
    # needed: h is normalised in place and x is read again by the residual add
    h = x.clone()
    rms_norm_(h, norm_weight, EPS)
    qkv = torch.mm(h, w_qkv)  # [T, 3D], one buffer
    q, k, v = torch.split(qkv, hidden, dim=-1)  # strided views at offsets 0, D, 2D
    # needed: k is a strided view (layout change) and rotary writes k below
    k_pre = k.clone()
    rotary_(q, k, cos, sin)  # one call writes two disjoint views of qkv
    # KV-cache write into the caller's preallocated buffers
    k_cache[START : START + tokens].copy_(k)
    v_cache.index_copy_(0, slots, v)
    keys = k_cache[: START + tokens]
    values = v_cache[: START + tokens]
    # needed: makes the strided q contiguous (a layout change)
    q_c = q.contiguous()
    scores = torch.mm(q_c, keys.t()) * hidden**-0.5
    probs = scores.softmax(dim=-1)
    # not needed: only read
    p_c = probs.clone()
    attn = torch.mm(p_c, values)
    out = torch.mm(attn, w_out)
    # not needed: written in place, but out is never read again
    y = out.clone()
    y.add_(x)
    return y, k_pre


def make_demo_inputs(
    seed: int = 0, *, tokens: int = TOKENS, hidden: int = HIDDEN
) -> tuple[Tensor, ...]:
    """Fresh random inputs for the demo block, in :data:`DEMO_INPUT_NAMES` order.

    Parameters
    ----------
    seed : int
        Seed of a private generator: equal seeds give equal inputs.
    tokens, hidden : int
        ``T`` and ``D``; ``hidden`` must be even and ``START + tokens`` at most
        :data:`MAX_TOKENS`.

    Returns
    -------
    tuple of Tensor
        ``x, norm_weight, w_qkv, w_out, cos, sin, k_cache, v_cache, slots``.

    Examples
    --------
    >>> inputs = make_demo_inputs(seed=1)
    >>> [tuple(t.shape) for t in inputs[:2]]
    [(4, 8), (8,)]
    >>> torch.equal(inputs[0], make_demo_inputs(seed=1)[0])
    True
    """
    if hidden % 2 != 0 or tokens < 1 or START + tokens > MAX_TOKENS:
        raise ValueError(
            f"need an even hidden size and 1 <= tokens <= {MAX_TOKENS - START}, "
            f"got tokens={tokens}, hidden={hidden}"
        )
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen)

    angles = torch.rand(tokens, hidden // 2, generator=gen) * 6.283185307179586
    slots = torch.arange(START, START + tokens)
    return (
        randn(tokens, hidden),
        1.0 + 0.1 * randn(hidden),
        randn(hidden, 3 * hidden) / hidden**0.5,
        randn(hidden, hidden) / hidden**0.5,
        angles.cos(),
        angles.sin(),
        randn(MAX_TOKENS, hidden),
        randn(MAX_TOKENS, hidden),
        slots,
    )


def demo_block() -> tuple[Callable[..., tuple[Tensor, Tensor]], Callable[..., tuple[Tensor, ...]]]:
    """The demo block and a factory of example inputs for it.

    Returns
    -------
    fn : callable
        ``fn(x, norm_weight, w_qkv, w_out, cos, sin, k_cache, v_cache, slots)
        -> (y, k_pre)``; writes the new keys and values into ``k_cache`` and
        ``v_cache`` in place.
    make_inputs : callable
        :func:`make_demo_inputs`: ``make_inputs(seed=0) -> tuple[Tensor, ...]``.

    Examples
    --------
    >>> fn, make_inputs = demo_block()
    >>> x, *rest = make_inputs(seed=0)
    >>> k_cache = rest[5]
    >>> before = k_cache.clone()
    >>> _ = fn(x, *rest)
    >>> bool(torch.equal(before[START:START + TOKENS], k_cache[START:START + TOKENS]))
    False
    """
    return _block, make_demo_inputs


def trace_demo(tracing_mode: TracingMode = "fake", *, seed: int = 0) -> torch.fx.GraphModule:
    """Trace the demo block with ``make_fx`` (ATen ops, custom ops kept whole).

    Parameters
    ----------
    tracing_mode : {"fake", "symbolic", "real"}
        Passed to :func:`torch.fx.experimental.proxy_tensor.make_fx`. Every
        node carries its value in ``meta['val']``; ``"symbolic"`` makes the token
        dimension a SymInt.
    seed : int
        Seed of the example inputs used for tracing.

    Returns
    -------
    torch.fx.GraphModule
        The traced block; its placeholders follow :data:`DEMO_INPUT_NAMES`.

    Examples
    --------
    >>> gm = trace_demo()
    >>> [n.name for n in gm.graph.nodes if n.op == "placeholder"][:3]
    ['x_1', 'norm_weight_1', 'w_qkv_1']
    >>> any(n.target is torch.ops.fx_aliasing_demo.rotary_.default for n in gm.graph.nodes)
    True
    """
    if tracing_mode not in ("fake", "symbolic", "real"):
        raise ValueError(f"tracing_mode must be 'fake', 'symbolic' or 'real', got {tracing_mode!r}")
    fn, make_inputs = demo_block()
    inputs: Sequence[Tensor] = make_inputs(seed=seed)
    return make_fx(fn, tracing_mode=tracing_mode)(*inputs)
