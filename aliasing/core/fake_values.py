"""Fake values the analysis can trust: computed the way torch computes them, and re-propagated
where a program lost its storage identity.

A program saved with ``torch.export.save`` and loaded with ``torch.export.load`` (and a
``make_fx`` trace in real mode) gives every value a fake tensor in a storage of its own: a
view no longer shares its base's fake storage, so the evidence the analysis takes from fake
storage identity (which results are views, which view-or-copy calls copied, where a view lies
in its base) is gone, and the program would get weaker decisions from its file than in memory.
:func:`restore_storage_identity` runs the graph again on its placeholders' fake values
(:class:`torch.fx.passes.fake_tensor_prop.FakeTensorProp`, without autograd, with the Python
dispatcher where sizes are symbolic) so that views share fake storages again, as in the
program before it was saved. Where that fails, the metadata is left as it was, the analysis
stays conservative where it rests on identity, and :class:`UntrustedMetadataWarning` says so.

Example
-------
>>> import io, torch
>>> class M(torch.nn.Module):
...     def forward(self, x):
...         return (x * 2).t() + 1
>>> buf = io.BytesIO()
>>> torch.export.save(torch.export.export(M(), (torch.randn(2, 3),)), buf)
>>> _ = buf.seek(0)
>>> ep = torch.export.load(buf)
>>> storage_identity_lost(ep.graph)
True
>>> restore_storage_identity(ep.graph_module)
True
>>> storage_identity_lost(ep.graph)
False
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher

from aliasing.core.effects import always_aliases_first, rests_on_identity
from aliasing.core.facts import meta_value
from aliasing.core.ops import COMMON_VIEWS
from aliasing.core.target import OFFSET_UNKNOWN
from aliasing.errors import AliasingError

__all__ = [
    "UntrustedMetadataWarning",
    "computing",
    "identity_restored",
    "keeps_storage_identity",
    "mark_offsets_unknown",
    "propagate_fake_values",
    "restore_storage_identity",
    "storage_identity_lost",
]

#: Graphs whose fake values this module propagated again: their storage identity is known to hold.
_RESTORED: weakref.WeakSet[torch.fx.Graph] = weakref.WeakSet()


class UntrustedMetadataWarning(UserWarning):
    """A graph's fake values lost their storage identity (a program loaded from its ``.pt2``) and
    could not be propagated again: the analysis is conservative where it rests on identity."""


@contextmanager
def computing(mode: Any) -> Iterator[None]:
    """Run ops on fake values under ``mode`` as Inductor's own fake propagation does.

    Where the mode's shape environment has symbols, the Python dispatcher is on
    too: without it, a C++ kernel that reads a symbolic tensor's storage offset
    or strides directly (a custom op's Meta kernel calling ``narrow``) raises
    "Cannot call storage_offset() on tensor with symbolic sizes/strides", which
    ``make_fx`` never met because it traces with the dispatcher on.
    """
    env = getattr(mode, "shape_env", None)
    with mode:
        if env is not None and getattr(env, "var_to_range", True):
            with enable_python_dispatcher():
                yield
        else:
            yield


def _view_evidence(graph: torch.fx.Graph) -> bool | None:
    """Whether the first call of an always-aliasing op (a view, an in-place op) whose result and
    first argument both have fake tensors shares its argument's fake storage; None without one."""
    for op in COMMON_VIEWS:
        for node in graph.find_nodes(op="call_function", target=op, sort=False):
            answer = _shares_with_first(node)
            if answer is not None:
                return answer
    for node in graph.nodes:
        op = node.target
        if node.op == "call_function" and isinstance(op, torch._ops.OpOverload) and always_aliases_first(op):
            answer = _shares_with_first(node)
            if answer is not None:
                return answer
    return None


def _shares_with_first(node: torch.fx.Node) -> bool | None:
    """Whether ``node``'s fake value lives in its first argument's fake storage; None where either has
    no strided fake tensor."""
    from torch._subclasses.fake_tensor import FakeTensor

    first = node.args[0] if node.args else None
    if not isinstance(first, torch.fx.Node):
        return None
    a, b = meta_value(node), meta_value(first)
    if not (isinstance(a, FakeTensor) and isinstance(b, FakeTensor)) or a.layout != torch.strided:
        return None
    return bool(a.untyped_storage()._cdata == b.untyped_storage()._cdata)


def storage_identity_lost(graph: torch.fx.Graph) -> bool:
    """Whether the graph's fake values show a view outside its base's fake storage (as every view
    of a program loaded with ``torch.export.load`` is), or come from fake modes of their own (a
    ``make_fx`` trace in real mode fakes every value apart, each at storage offset 0); False where
    they keep identity or show nothing."""
    return _modes_of_their_own(graph) or _view_evidence(graph) is False


def _modes_of_their_own(graph: torch.fx.Graph) -> bool:
    """Whether the first two fake tensor values of the graph belong to different fake modes."""
    from torch._subclasses.fake_tensor import FakeTensor

    first = None
    for node in graph.nodes:
        v = meta_value(node)
        if isinstance(v, FakeTensor):
            if first is None:
                first = v.fake_mode
            else:
                return v.fake_mode is not first
    return False


def mark_offsets_unknown(placeholders: Iterable[torch.fx.Node]) -> None:
    """Mark placeholders whose recorded storage offset a run is not held to
    (:data:`aliasing.core.target.OFFSET_UNKNOWN`; :meth:`aliasing.AliasAnalysis.unknown_offset`).

    The analysis marks those of a graph that lost storage identity itself; a tool that hands
    on the graph module of an ``ExportedProgram`` (whose module takes user inputs at any
    offset) marks its user inputs, as the analysis takes them for the program itself.
    """
    for p in placeholders:
        p.meta[OFFSET_UNKNOWN] = True


def identity_restored(graph: torch.fx.Graph) -> bool:
    """Whether :func:`restore_storage_identity` propagated the graph's fake values (they keep identity)."""
    return graph in _RESTORED


def keeps_storage_identity(graph: torch.fx.Graph) -> bool:
    """Whether the graph's fake values keep storage identity: propagated here, or a view of the
    graph shares its argument's fake storage (:func:`_view_evidence`)."""
    return graph in _RESTORED or _view_evidence(graph) is True


def _needs_propagation(graph: torch.fx.Graph) -> bool:
    """Identity lost; or no call shows it either way while some call's decision rests on it (a
    view-or-copy op, an ATen op with undeclared results: ``einsum`` in a graph without views)."""
    if _modes_of_their_own(graph):
        return True
    evidence = _view_evidence(graph)
    if evidence is not None:
        return not evidence
    if graph in _RESTORED:
        return False
    return any(
        n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and rests_on_identity(n.target)
        for n in graph.nodes
    )


def restore_storage_identity(module: torch.nn.Module | None, graph: torch.fx.Graph | None = None) -> bool:
    """Propagate the fake values of ``module``'s graph again where they lost storage identity.

    A graph that lost identity also lost its inputs' storage offsets (``torch.export.load``
    records every input at offset 0): its placeholders are marked :data:`OFFSET_UNKNOWN`
    (:data:`aliasing.core.target.OFFSET_UNKNOWN`, :meth:`aliasing.AliasAnalysis.unknown_offset`),
    whether propagation succeeds or not.
    Propagation is needed where identity is lost (:func:`storage_identity_lost`), and where no
    call shows it either way while some call's decision rests on it (a view-or-copy op, an ATen
    op whose undeclared results may alias: a loaded program with ``einsum`` and no view); a graph
    propagated once is not propagated again (:func:`identity_restored`). Returns True when the
    values were propagated again, False when nothing needed it.
    Where propagation fails (a custom op without a fake kernel, a placeholder without a
    fake value), the metadata is left as it was and :class:`UntrustedMetadataWarning`
    says that the analysis is conservative there. The placeholders' values are kept (their
    sizes and symbols are the program's); every other node's ``meta['val']`` is replaced.
    """
    graph = graph if graph is not None else getattr(module, "graph", None)
    if graph is None or not _needs_propagation(graph):
        return False
    if storage_identity_lost(graph):
        mark_offsets_unknown(graph.find_nodes(op="placeholder"))
    if not isinstance(module, torch.fx.GraphModule) or module.graph is not graph:
        _warn(graph, "the graph has no GraphModule to run")
        return False
    try:
        _propagate(module)
    except Exception as err:  # (torch raises many kinds here)
        _warn(graph, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        return False
    _RESTORED.add(graph)
    return True


def _propagate(module: torch.fx.GraphModule) -> None:
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    placeholders = list(module.graph.find_nodes(op="placeholder", sort=True))
    values = [meta_value(p) for p in placeholders]
    if any(v is None for v in values):
        raise AliasingError("a placeholder has no meta['val']")
    old = {n: n.meta.get("val") for n in module.graph.nodes}
    modes = {id(v.fake_mode): v.fake_mode for v in values if isinstance(v, FakeTensor)}
    mode: FakeTensorMode | None
    if len(modes) > 1:  # a make_fx trace in real mode: each input faked in a mode of its own
        mode = FakeTensorMode()
        values = [_refake(v, mode) for v in values]
        for p, v in zip(placeholders, values):
            p.meta["val"] = v
    else:
        mode = detect_fake_mode(values)
    if mode is None:
        raise AliasingError("the placeholders have no fake mode")
    try:
        with torch.no_grad(), computing(mode):
            # (FakeTensorProp enters the mode again: entering it twice is allowed)
            FakeTensorProp(module, mode).propagate_dont_convert_inputs(*values)
        if storage_identity_lost(module.graph):
            raise AliasingError("views still outside their bases' fake storages after propagation")
    except BaseException:
        for n, v in old.items():  # never leave the metadata half propagated
            if v is not None:
                n.meta["val"] = v
            elif "val" in n.meta:
                del n.meta["val"]
        raise


def propagate_fake_values(module: torch.fx.GraphModule, *inputs: Any) -> None:
    """Record a fake value (``meta['val']``) on every node of ``module``'s graph, from example inputs.

    For a graph whose metadata was stripped or never recorded (``torch.fx.symbolic_trace``, a
    pass that made nodes without it): the inputs, parameters and buffers are faked in one fake
    mode (the parameters' values are never changed, whatever the graph writes) and the graph
    is run on them without autograd, so that views share their bases' fake storages as in a
    trace.

    Example
    -------
    >>> class M(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.cache = torch.nn.Parameter(torch.zeros(4, 8))
    ...     def forward(self, x):
    ...         self.cache[0].copy_(x)  # an in-place write into a parameter's view
    ...         return self.cache.clone() * 2
    >>> gm = torch.fx.symbolic_trace(M())
    >>> propagate_fake_values(gm, torch.randn(8))
    >>> [tuple(n.meta["val"].shape) for n in gm.graph.nodes if n.op == "get_attr"]
    [(4, 8)]
    """
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(allow_non_fake_inputs=True)

    def fake(value: Any) -> Any:
        return mode.from_tensor(value) if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor) else value

    class _Prop(FakeTensorProp):
        def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
            return fake(super().get_attr(target, args, kwargs))

    with torch.no_grad(), computing(mode):
        _Prop(module, mode).propagate_dont_convert_inputs(*[fake(t) for t in inputs])
    _RESTORED.add(module.graph)


def _refake(value: Any, mode: Any) -> Any:
    """A fake tensor of ``mode`` with ``value``'s layout, in a storage of its own (static sizes only)."""
    if not isinstance(value, torch.Tensor):
        return value
    layout = (*value.shape, *value.stride(), value.storage_offset())
    if value.layout != torch.strided or not all(type(x) is int for x in layout):
        raise AliasingError("an input with a symbolic or non-strided layout in a fake mode of its own")
    with mode:
        base = torch.empty(value.untyped_storage().nbytes() // value.itemsize, dtype=value.dtype, device=value.device)
        return base.as_strided(value.shape, value.stride(), value.storage_offset())


def _warn(graph: torch.fx.Graph, why: str) -> None:
    warnings.warn(
        f"the graph's fake values lost their storage identity (a program loaded from its .pt2?) and could not "
        f"be propagated again ({why}): views, view-or-copy results and undeclared results are taken as "
        f"aliases of their arguments, which keeps more clones than the same program in memory",
        UntrustedMetadataWarning,
        stacklevel=3,
    )
