"""Lowering of ``triton_kernel_wrapper_functional`` (a user Triton kernel that mutates arguments).

``triton_kernel_wrapper_functional(..., kwargs, tensors_to_clone)`` clones the
named kernel arguments, runs the kernel on them and returns ``{name: new
value}``. The lowering clones those arguments with their layout and calls
``triton_kernel_wrapper_mutation`` on the clones; the wrapper's getitems take
the clones.
"""

from __future__ import annotations

import torch
import torch.fx

from rewrite.editing.nodes import Builder, LoweredCall, LoweringSkip, getitem_users
from rewrite.lowering.copies import exact_copy

__all__ = ["lower_triton_wrapper"]


def lower_triton_wrapper(b: Builder, node: torch.fx.Node) -> LoweredCall:
    """Clones of ``tensors_to_clone``, the mutation wrapper on them, and the getitem replacements."""
    from torch._higher_order_ops.triton_kernel_wrap import triton_kernel_wrapper_mutation

    users = getitem_users(node)
    kw = dict(node.kwargs)
    kernel_kwargs = kw.get("kwargs")
    to_clone = kw.get("tensors_to_clone")
    if not isinstance(kernel_kwargs, dict) or not isinstance(to_clone, (list, tuple)):
        raise LoweringSkip("wrapper without kwargs/tensors_to_clone")
    new_kwargs = dict(kernel_kwargs)
    clones: list[torch.fx.Node] = []
    values: dict[str, torch.fx.Node] = {}
    for key in to_clone:
        arg = kernel_kwargs.get(key)
        if not isinstance(arg, torch.fx.Node):
            raise LoweringSkip(f"tensor to clone {key!r} is not a node")
        cp = exact_copy(b, arg)
        clones.append(cp.clone)
        new_kwargs[key] = cp.value
        values[key] = cp.value
    call_kwargs = {k: v for k, v in kw.items() if k != "tensors_to_clone"}
    call_kwargs["kwargs"] = new_kwargs
    call = b.call(triton_kernel_wrapper_mutation, (), call_kwargs, val=None)
    repl: dict[object, torch.fx.Node] = {}
    for key in users:
        if key not in values:
            raise LoweringSkip(f"getitem of {key!r}, which the wrapper does not return")
        repl[key] = values[key]
    return clones, call, repl
