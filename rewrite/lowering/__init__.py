"""Lower functional higher-order ops into clones plus in-place calls, then remove the copies not needed.

A functionalized graph (what torch.compile's post-grad passes, ``torch.export``
and vLLM's pass managers see) hides every mutation of a custom op or a user
Triton kernel inside a functional wrapper that copies the mutated arguments.
:func:`lower_functional_ops` makes those copies explicit, one module per
wrapper family:

- :mod:`~rewrite.lowering.auto_functionalized`: ``auto_functionalized(op,
  **kwargs)`` clones each mutated argument and runs the mutable ``op`` on the
  clones;
- :mod:`~rewrite.lowering.auto_functionalized_v2`:
  ``auto_functionalized_v2(op, _all_bases=[...], view info...)`` clones each
  *base* and regenerates the argument views on the clones;
- :mod:`~rewrite.lowering.triton`: ``triton_kernel_wrapper_functional(...,
  tensors_to_clone)`` clones the named kernel arguments;
- :mod:`~rewrite.lowering.scatter`: version-1 write-backs
  ``*_scatter(base, new_value, ...)`` become ``clone(base)`` plus ``copy_``
  into the view.

Each wrapper becomes ``aten.clone`` of what it would copy (with the exact
dtype and layout, dtype views included: :mod:`~rewrite.lowering.copies`), the
in-place call (the op's mutable overload, ``triton_kernel_wrapper_mutation``)
on the clones, and the wrapper's ``getitem`` users rewired (the functional
graph's views of the new values recreated on the clones). Nothing is removed by the lowering: the
graph computes exactly what it computed before (new nodes get a ``meta['val']``
computed under the graph's fake mode; existing nodes' metadata is never
touched).

Then :func:`rewrite.lower_and_eliminate` (:mod:`rewrite.pipeline`) runs the one
copy planner, :mod:`rewrite.planning.planner`, to a fixed point. Clones and ``copy_``
write-backs are one model there: a clone is removed when C1-C7 allow it, or
folded into its original when it is only written where it is copied back
(``c = clone(o); op_(c); copy_(o', c')``: a graph input's ``copy_`` epilogue,
a scatter write-back) or where nobody reads the original again (C8); a
``copy_`` that then copies a region onto itself goes too (C9).
:mod:`~rewrite.lowering.metadata` keeps fake values truthful after a removal.
This package does not import ``torch._inductor``;
:class:`rewrite.inductor.CloneEliminationPass` runs that pipeline.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> from torch._higher_order_ops.auto_functionalize import auto_functionalized_v2
>>> @torch.library.custom_op("lowering_doc::bump_", mutates_args=("x",))
... def bump_(x: torch.Tensor) -> None:
...     x.add_(1)
>>> def f(x):  # what functionalization makes of ``bump_(x[1]); return x.sum()``
...     out = auto_functionalized_v2(torch.ops.lowering_doc.bump_.default, _x_base_index=0,
...                                  _x_size=(3,), _x_stride=(1,), _x_storage_offset=3, _all_bases=[x])
...     x.copy_(out[1])
...     return x.sum()
>>> gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 3))
>>> from rewrite import lower_and_eliminate
>>> report = lower_and_eliminate(gm.graph)
>>> report.lowering.clones, report.removed, report.dropped_copies
(('clone_default',), ('clone_default',), ('copy_',))
>>> [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]  # bump_ writes x[1] in place
['aten.as_strided.default', 'lowering_doc.bump_.default', 'aten.sum.default']
"""

from rewrite.lowering.functional import lower_functional_ops
from rewrite.lowering.reports import Kind, Lowered, LoweringReport, Skipped

__all__ = [
    "Kind",
    "Lowered",
    "LoweringReport",
    "Skipped",
    "lower_functional_ops",
]
