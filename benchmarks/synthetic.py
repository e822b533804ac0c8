"""Synthetic transformer-like FX graphs for the scaling benchmark.

:func:`build_transformer_graph` traces ``layers`` decoder layers with
``make_fx(tracing_mode="fake")`` so every node carries a fake tensor in
``meta['val']`` exactly as a compiler pipeline sees it. Each layer has:

- an in-place custom RMSNorm (``fxa_bench::rms_norm_``, ``mutates_args``) on a
  clone of the residual stream that is read again later (a *necessary* clone);
- a fused qkv projection split into q, k, v views, with an in-place custom
  rotary op on the q and k views (``fxa_bench::rotary_``, mutating two arguments);
- writes of k and v into slices of a preallocated KV-cache graph input
  (``select``/``slice`` views and ``aten.copy_``), and attention that reads the
  cache back through views, transposes and head reshapes;
- a clone only read (*removable*), a chain of two clones (*removable*), a clone
  written in place while its original is dead afterwards (*removable*), a second
  necessary clone before the MLP's RMSNorm, and an ``out=`` call by keyword;
- the clones ``make_fx`` itself produces when reshaping non-contiguous
  attention outputs (layout changes: kept by a sound pass).

The weights of each layer are separate graph inputs, as in a real model.
``layers_for_nodes`` picks the layer count for a node budget (about 1k, 16k
and 64k nodes in the benchmark); ``count_nodes`` reports the actual size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.fx
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.shape_prop import _extract_tensor_metadata

__all__ = [
    "NODES_PER_LAYER",
    "SHARED_NODES_PER_LAYER",
    "GraphSpec",
    "build_shared_weight_graph",
    "build_transformer_graph",
    "count_nodes",
    "layers_for_nodes",
    "make_inputs",
    "shared_layers_for_nodes",
]


# --------------------------------------------------------------------------- custom ops


@torch.library.custom_op("fxa_bench::rms_norm_", mutates_args=("x",))
def rms_norm_(x: Tensor, weight: Tensor, eps: float = 1e-6) -> None:
    """In-place RMSNorm over the last dimension."""
    scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x.mul_(scale).mul_(weight)


@rms_norm_.register_fake
def _rms_norm_fake(x: Tensor, weight: Tensor, eps: float = 1e-6) -> None:
    return None


@torch.library.custom_op("fxa_bench::rotary_", mutates_args=("q", "k"))
def rotary_(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> None:
    """In-place rotary embedding of ``q`` and ``k`` (rotate-half form)."""
    for t in (q, k):
        half = t.shape[-1] // 2
        t1 = t[..., :half].clone()
        t2 = t[..., half:].clone()
        t[..., :half] = t1 * cos - t2 * sin
        t[..., half:] = t2 * cos + t1 * sin


@rotary_.register_fake
def _rotary_fake(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> None:
    return None


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class GraphSpec:
    """Shapes of a synthetic graph.

    Attributes
    ----------
    layers : int
        Number of decoder layers.
    hidden : int
        Hidden size ``H``.
    heads : int
        Attention heads (``H`` must be divisible by ``heads``; head size even).
    tokens : int
        Tokens processed in this step ``T``.
    position : int
        Position of the first token in the KV cache.
    cache_len : int
        Length of the preallocated KV cache (``>= position + tokens``).
    """

    layers: int
    hidden: int = 32
    heads: int = 4
    tokens: int = 4
    position: int = 4
    cache_len: int = 16

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def input_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the graph's inputs in placeholder order."""
        h, t = self.hidden, self.tokens
        shapes: list[tuple[int, ...]] = [
            (t, h),  # x
            (t, self.head_dim // 2),  # cos
            (t, self.head_dim // 2),  # sin
            (self.layers, 2, self.cache_len, h),  # kv cache
        ]
        for _ in range(self.layers):
            shapes += [(h,), (h, 3 * h), (h, h), (h,), (h, 4 * h), (4 * h, h)]
        return shapes


WEIGHTS_PER_LAYER = 6


def _layer(spec: GraphSpec, i: int, x: Tensor, cos: Tensor, sin: Tensor, cache: Tensor, w: Sequence[Tensor]) -> Tensor:
    w_ln1, w_qkv, w_o, w_ln2, w_up, w_down = w
    h, t, nh, hd = spec.hidden, spec.tokens, spec.heads, spec.head_dim
    p0, p1 = spec.position, spec.position + spec.tokens

    # necessary clone: x is read again by the residual add
    hx = x.clone()
    torch.ops.fxa_bench.rms_norm_(hx, w_ln1)
    qkv = hx @ w_qkv
    q, k, v = qkv.split(h, dim=-1)  # three views of qkv
    q4 = q.view(t, nh, hd)
    k4 = k.view(t, nh, hd)
    torch.ops.fxa_bench.rotary_(q4, k4, cos.unsqueeze(1), sin.unsqueeze(1))

    # KV cache: write this step's k and v into slices of the layer's cache
    layer_cache = cache[i]  # select view
    layer_cache[0, p0:p1].copy_(k)
    layer_cache[1, p0:p1].copy_(v)
    keys = layer_cache[0, :p1].view(p1, nh, hd).transpose(0, 1)  # [nh, p1, hd]
    values = layer_cache[1, :p1].view(p1, nh, hd).transpose(0, 1)
    queries = q4.transpose(0, 1)  # [nh, t, hd]
    scores = torch.softmax(queries @ keys.transpose(-1, -2) * hd**-0.5, dim=-1)
    attn = (scores @ values).transpose(0, 1).reshape(t, h)  # layout-changing copy
    o = attn @ w_o
    o_copy = o.clone()  # removable: only read
    x = x + o_copy

    # necessary clone: x is read again by the MLP residual
    hm = x.clone()
    torch.ops.fxa_bench.rms_norm_(hm, w_ln2)
    up = hm @ w_up
    g = torch.nn.functional.silu(up)
    g2 = g.clone()  # removable: written, g is dead afterwards
    g2.mul_(up)
    down = g2 @ w_down
    d2 = down.clone().clone()  # removable chain
    out = torch.empty_like(x)
    torch.add(x, d2, out=out)  # out= by keyword
    return out


def _model(spec: GraphSpec) -> Callable[..., Tensor]:
    def forward(x: Tensor, cos: Tensor, sin: Tensor, cache: Tensor, *weights: Tensor) -> Tensor:
        for i in range(spec.layers):
            w = weights[WEIGHTS_PER_LAYER * i : WEIGHTS_PER_LAYER * (i + 1)]
            x = _layer(spec, i, x, cos, sin, cache, w)
        return x

    return forward


def make_inputs(spec: GraphSpec, *, seed: int = 0) -> list[Tensor]:
    """Real CPU inputs for a graph of ``spec`` (fresh tensors on each call).

    Examples
    --------
    >>> spec = GraphSpec(layers=1)
    >>> [tuple(t.shape) for t in make_inputs(spec)][:2]
    [(4, 32), (4, 4)]
    """
    gen = torch.Generator().manual_seed(seed)
    out: list[Tensor] = []
    for shape in spec.input_shapes():
        scale = shape[0] ** -0.5 if len(shape) == 2 else 1.0
        out.append(torch.randn(shape, generator=gen) * scale)
    out[3] = torch.zeros(spec.input_shapes()[3])  # KV cache starts empty ...
    out[3][:, :, : spec.position] = torch.randn(out[3][:, :, : spec.position].shape, generator=gen)  # ... but a prefix
    return out


def _fake_inputs(spec: GraphSpec, mode: FakeTensorMode) -> list[Tensor]:
    with mode:
        return [torch.empty(shape) for shape in spec.input_shapes()]


def count_nodes(gm: torch.fx.GraphModule) -> int:
    """Number of nodes in ``gm.graph`` (placeholders and output included)."""
    return len(gm.graph.nodes)


def build_transformer_graph(
    layers: int, *, hidden: int = 32, heads: int = 4, seed: int = 0, method: str = "replicate"
) -> tuple[torch.fx.GraphModule, Callable[[], list[Tensor]]]:
    """Build a synthetic decoder graph of ``layers`` layers with fake-tensor metadata.

    Parameters
    ----------
    layers : int
        Number of decoder layers (60 nodes each plus 6 weight inputs).
    hidden : int
        Hidden size; the fake tensors make the size irrelevant to analysis cost.
    heads : int
        Number of attention heads.
    seed : int
        Seed of the real inputs returned by the input factory.
    method : {"replicate", "make_fx"}
        ``"make_fx"`` traces the whole model with ``make_fx(tracing_mode="fake")``
        (about 4 ms a node: minutes at 64k nodes). ``"replicate"`` traces one
        layer with ``make_fx`` and copies it ``layers`` times by graph surgery;
        each copy gets its own fake tensors in the same ``FakeTensorMode``,
        derived from the template's (same sizes, strides, dtypes; storages
        remapped so that views share their base's storage and every allocation
        gets a fresh one), plus ``tensor_meta`` and ``eager_input_vals`` as
        ``make_fx`` records them. Both give the same graph (same ops, arguments,
        names and metadata); ``tests/project/test_benchmarks_smoke.py`` checks it.

    Returns
    -------
    tuple
        The ``GraphModule`` (``meta['val']`` is a fake tensor on every
        tensor-valued node) and a zero-argument factory of fresh real inputs.

    Examples
    --------
    >>> gm, inputs = build_transformer_graph(1)
    >>> out = gm(*inputs())
    >>> tuple(out.shape)
    (4, 32)
    """
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    spec = GraphSpec(layers=layers, hidden=hidden, heads=heads)
    mode = FakeTensorMode()
    fake = _fake_inputs(spec, mode)
    if method == "make_fx":
        gm = make_fx(_model(spec), tracing_mode="fake")(*fake)
    elif method == "replicate":
        gm = _replicate(spec, mode, fake)
    else:
        raise ValueError(f"method must be 'replicate' or 'make_fx', got {method!r}")
    return gm, lambda: make_inputs(spec, seed=seed)


def _trace_layer(spec: GraphSpec, fake: Sequence[Tensor]) -> torch.fx.GraphModule:
    """``make_fx`` of layer 0 alone: placeholders x, cos, sin, cache, then its 6 weights."""

    def one_layer(x: Tensor, cos: Tensor, sin: Tensor, cache: Tensor, *w: Tensor) -> Tensor:
        return _layer(spec, 0, x, cos, sin, cache, w)

    return make_fx(one_layer, tracing_mode="fake")(*fake[: 4 + WEIGHTS_PER_LAYER])


def _replicate(spec: GraphSpec, mode: FakeTensorMode, fake: Sequence[Tensor]) -> torch.fx.GraphModule:
    """Copy a traced layer ``spec.layers`` times; layer ``i`` reads ``cache[i]`` and its own weights."""
    template = _trace_layer(spec, fake)
    t_cache = [n for n in template.graph.nodes if n.op == "placeholder"][3]
    cache_step = fake[3].stride(0)

    def bind(i: int, carried: list[torch.fx.Node], inputs: list[torch.fx.Node]) -> list[torch.fx.Node]:
        return [*carried, *inputs[1:4], *inputs[4 + WEIGHTS_PER_LAYER * i : 4 + WEIGHTS_PER_LAYER * (i + 1)]]

    def shift(i: int, t_in: torch.fx.Node) -> int | None:
        return i * cache_step if t_in is t_cache else None

    def adjust(i: int, node: torch.fx.Node, new: torch.fx.Node, env: dict[torch.fx.Node, torch.fx.Node]) -> None:
        if node.target is torch.ops.aten.select.int and node.args[0] is t_cache:
            new.args = (env[t_cache], node.args[1], i)  # cache[i]: this layer's slice

    return _replicate_layers(template, mode, fake, spec.layers, carried=1, bind=bind, shift=shift, adjust=adjust)


def _replicate_layers(
    template: torch.fx.GraphModule,
    mode: FakeTensorMode,
    fake: Sequence[Tensor],
    layers: int,
    *,
    carried: int,
    bind: Callable[[int, list[torch.fx.Node], list[torch.fx.Node]], list[torch.fx.Node]],
    shift: Callable[[int, torch.fx.Node], int | None] = lambda i, t_in: None,
    adjust: Callable[[int, torch.fx.Node, torch.fx.Node, dict[torch.fx.Node, torch.fx.Node]], None] | None = None,
) -> torch.fx.GraphModule:
    """Copy ``template`` (one layer) ``layers`` times; give every copy its own fake values.

    The graph's placeholders carry ``fake``; the first ``carried`` of them feed
    layer 0, and layer ``i + 1`` reads what layer ``i`` returns in their place.
    ``bind(i, carried, inputs)`` lists the nodes bound to the template's
    placeholders in layer ``i``; ``shift(i, t_in)`` may move the storage offset
    of a template input's values (default: the bound input's offset);
    ``adjust`` may edit each copied node.

    Fake values are not recomputed by dispatching each op again (about 3 ms a
    node); they are derived from the template's, which have the same sizes,
    strides and dtypes in every layer. Storage identity is remapped: a template
    value living in an input's storage lives in the input bound in its place in
    layer ``i``; a value living in a storage the template allocates gets a fresh
    storage per layer, shared with exactly the values that shared it in the template.
    """
    t_nodes = list(template.graph.nodes)
    t_inputs = [n for n in t_nodes if n.op == "placeholder"]
    t_body = [n for n in t_nodes if n.op == "call_function"]
    t_output = next(n for n in t_nodes if n.op == "output")
    t_results = t_output.args[0] if isinstance(t_output.args[0], (tuple, list)) else (t_output.args[0],)
    if len(t_results) != carried or not all(isinstance(r, torch.fx.Node) for r in t_results):
        raise TypeError(f"the layer template must return {carried} tensor(s)")

    graph = torch.fx.Graph()
    inputs = [graph.placeholder(f"arg{k}_1") for k in range(len(fake))]
    for node, val in zip(inputs, fake):
        _set_meta(node, val, None)
    state: list[torch.fx.Node] = inputs[:carried]
    for i in range(layers):
        bound = bind(i, state, inputs)
        env: dict[torch.fx.Node, torch.fx.Node] = dict(zip(t_inputs, bound))
        # template storage -> (storage of layer i, offset shift)
        storages: dict[int, tuple[torch.UntypedStorage, int]] = {}
        for t_in, new_in in zip(t_inputs, bound):
            t_val, new_val = t_in.meta["val"], new_in.meta["val"]
            moved = shift(i, t_in)
            offset = new_val.storage_offset() - t_val.storage_offset() if moved is None else moved
            storages.setdefault(_storage_key(t_val), (new_val.untyped_storage(), offset))

        def derive(t_val: object, storages: dict[int, tuple[torch.UntypedStorage, int]] = storages) -> object:
            if isinstance(t_val, Tensor):
                key = _storage_key(t_val)
                if key not in storages:
                    nbytes = t_val.untyped_storage().nbytes()
                    storages[key] = (torch.UntypedStorage(nbytes, device="meta"), 0)
                storage, offset = storages[key]
                return _fake_on(mode, storage, t_val, t_val.storage_offset() + offset)
            if isinstance(t_val, (tuple, list)):
                return type(t_val)(derive(v) for v in t_val)
            return t_val

        for node in t_body:
            new = graph.node_copy(node, lambda n, env=env: env[n])
            if adjust is not None:
                adjust(i, node, new, env)
            env[node] = new
            eager = None
            if "eager_input_vals" in node.meta:
                eager = (
                    torch.fx.node.map_arg(new.args, lambda n: n.meta.get("val")),
                    torch.fx.node.map_arg(new.kwargs, lambda n: n.meta.get("val")),
                )
            _set_meta(new, derive(node.meta["val"]) if "val" in node.meta else None, eager)
            if "tensor_meta" in node.meta:
                new.meta["tensor_meta"] = node.meta["tensor_meta"]  # same sizes, strides, dtype
        state = [env[r] for r in t_results]
    graph.output(state[0] if carried == 1 else tuple(state))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


# --------------------------------------------------------------------------- the shared-weight decoder


@torch.library.custom_op("fxa_bench::fused_add_rms_norm_", mutates_args=("x", "residual"))
def fused_add_rms_norm_(x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6) -> None:
    """In place, as vLLM's ``_C.fused_add_rms_norm``: ``residual += x``, then ``x = rms_norm(residual) * weight``."""
    residual.add_(x)
    x.copy_(residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + eps) * weight)


@fused_add_rms_norm_.register_fake
def _fused_add_rms_norm_fake(x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6) -> None:
    return None


#: Hidden size and tokens of the shared-weight decoder (its placeholders: x, residual,
#: the norm weight, w1 [H, 3H], w2 [H, H], cos and sin [T, H/2]).
SHARED_HIDDEN, SHARED_TOKENS = 64, 8


def _shared_layer(x: Tensor, res: Tensor, w_norm: Tensor, w1: Tensor, w2: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    h = SHARED_HIDDEN
    xc, rc = x.clone(), res.clone()
    torch.ops.fxa_bench.fused_add_rms_norm_(xc, rc, w_norm)
    q, k, v = (xc @ w1).split([h, h, h], -1)
    qc, kc = q.clone(), k.clone()
    torch.ops.fxa_bench.rotary_(qc, kc, cos, sin)
    return torch.softmax(qc @ kc.t(), -1) @ v @ w2, rc


def _shared_fake(mode: FakeTensorMode) -> list[Tensor]:
    h, t = SHARED_HIDDEN, SHARED_TOKENS
    with mode:
        return [torch.empty(s) for s in ((t, h), (t, h), (h,), (h, 3 * h), (h, h), (t, h // 2), (t, h // 2))]


def build_shared_weight_graph(
    layers: int, *, method: str = "replicate", seed: int = 0
) -> tuple[torch.fx.GraphModule, Callable[[], list[Tensor]]]:
    """A decoder of ``layers`` layers over one set of weights, with fake-tensor metadata.

    Per layer: ``xc, rc = x.clone(), res.clone()``; the in-place fused add+RMSNorm
    (``fxa_bench::fused_add_rms_norm_``) on both; ``q, k, v = (xc @ w1).split(...)``;
    ``qc, kc = q.clone(), k.clone()``; the in-place rotary op on both;
    ``softmax(qc @ kc.t()) @ v @ w2`` and ``rc`` go to the next layer. Few users pile
    up on one value (unlike :func:`build_transformer_graph`), but some do: removing the
    residual's clones one after the other hands every layer's residual uses to layer 0's
    clone, and vLLM's pass scans that value's users for each written clone it meets, so
    its time grows about 12x for 4x the nodes from 16k to 64k nodes (``benchmarks/README.md``).
    ``method`` as in :func:`build_transformer_graph`: ``"make_fx"`` traces the whole
    model, ``"replicate"`` one layer copied by graph surgery (the same graph).

    Examples
    --------
    >>> gm, inputs = build_shared_weight_graph(2)
    >>> out, res = gm(*inputs())
    >>> tuple(out.shape), tuple(res.shape)
    ((8, 64), (8, 64))
    """
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    mode = FakeTensorMode()
    fake = _shared_fake(mode)

    def model(x: Tensor, res: Tensor, *shared: Tensor) -> tuple[Tensor, Tensor]:
        for _ in range(layers):
            x, res = _shared_layer(x, res, *shared)
        return x, res

    if method == "make_fx":
        gm = make_fx(model, tracing_mode="fake")(*fake)
    elif method == "replicate":
        template = make_fx(_shared_layer, tracing_mode="fake")(*fake)
        gm = _replicate_layers(
            template, mode, fake, layers, carried=2, bind=lambda i, state, inputs: [*state, *inputs[2:]]
        )
    else:
        raise ValueError(f"method must be 'replicate' or 'make_fx', got {method!r}")

    def inputs() -> list[Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return [torch.randn(v.shape, generator=gen) * (v.shape[0] ** -0.5 if v.dim() == 2 else 1.0) for v in fake]

    return gm, inputs


#: Per-layer node count of the shared-weight decoder (checked by the smoke test).
SHARED_NODES_PER_LAYER = 16
_SHARED_FIXED_NODES = 8  # seven placeholders and the output


def shared_layers_for_nodes(nodes: int) -> int:
    """Layer count whose shared-weight graph has about ``nodes`` nodes.

    Examples
    --------
    >>> shared_layers_for_nodes(16000)
    1000
    """
    return max(1, round((nodes - _SHARED_FIXED_NODES) / SHARED_NODES_PER_LAYER))


def _storage_key(t: Tensor) -> int:
    return t.untyped_storage()._cdata


def _fake_on(mode: FakeTensorMode, storage: torch.UntypedStorage, like: Tensor, offset: int) -> Tensor:
    """A fake tensor shaped like ``like`` at ``offset`` in ``storage`` (a meta storage)."""
    meta = torch.empty(0, dtype=like.dtype, device="meta").set_(storage, offset, like.size(), like.stride())
    return FakeTensor(mode, meta, like.device)


def _set_meta(node: torch.fx.Node, val: object, eager: object) -> None:
    if val is not None:
        node.meta["val"] = val
        if isinstance(val, Tensor) and node.op == "placeholder":
            node.meta["tensor_meta"] = _extract_tensor_metadata(val)
    if eager is not None:
        node.meta["eager_input_vals"] = eager


# Per-layer node count of the traced graph (checked by the smoke test).
NODES_PER_LAYER = 66
_FIXED_NODES = 5  # x, cos, sin, cache placeholders and the output


def layers_for_nodes(nodes: int) -> int:
    """Layer count whose graph has about ``nodes`` nodes.

    Examples
    --------
    >>> layers_for_nodes(1000)
    15
    """
    return max(1, round((nodes - _FIXED_NODES) / NODES_PER_LAYER))


def _time_build(layers: int, method: str) -> tuple[int, float]:
    start = time.perf_counter()
    gm, _ = build_transformer_graph(layers, method=method)
    return count_nodes(gm), time.perf_counter() - start


if __name__ == "__main__":
    import sys

    method = "replicate"
    counts = []
    for a in sys.argv[1:]:
        if a.startswith("--method="):
            method = a.split("=", 1)[1]
        else:
            counts.append(int(a))
    for n in counts or [1]:
        size, seconds = _time_build(n, method)
        print(f"layers={n} nodes={size} {method}={seconds:.2f}s")
