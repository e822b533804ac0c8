"""The hazard guard: restore eager semantics where Inductor's own later passes would break them.

Pure FX analysis and rewriting (this package does not import ``torch._inductor``;
:mod:`rewrite.inductor` runs it and tells it what it needs to know about
Inductor in an :class:`InductorModel`). A rewrite is judged against eager
execution, not against stock Inductor: the guard adds the least copying that
makes Inductor's result right, and nothing where none of the hazards is present.

Inductor 2.13's pipeline, as far as the guard relies on it: the joint graph's
``remove_noop_ops`` replaces every ``clone``/``copy``/``alias`` whose fake
value has the source's sizes, strides and dtype by its source (storage offset
and later mutations are ignored), and its ``pointless_view`` pattern a
``view`` to the sizes its operand already has; after the post-grad hooks,
``reinplace_inplaceable_ops`` turns ``index_put``, ``_unsafe_index_put`` and
the scatters (``slice/select/diagonal/as_strided_scatter``, canonicalised to
one generalized scatter) into in-place writes of their first argument, then
the graph is lowered and scheduled. The hazards, numbered (docs/DESIGN.md and
the reports cite them):

H1 stale input read (``remove_noop_ops``): in a functional post-grad graph
   every write of a graph input is a ``copy_`` write-back at the end, and any
   read of the input's placeholder means its value *before* the program. A
   write-back that reads an input (through its placeholder or views of it)
   after that input's own write-back is what a dropped copy leaves behind
   (pytorch/pytorch#198131); Inductor would copy the new value. Fix: move the
   reading write-back before the first write-back it reads stale (free); when
   that would break another read (two inputs copied into each other), clone
   what it reads before that write-back.
H2 in-placed result overwritten: Inductor writes a scatter or ``index_put``
   whose first argument is an input ``M`` in place into ``M`` whenever some
   write-back into ``M`` exists; when that write-back copies another value and
   the result is used after it (returned, read later), the result is
   overwritten (#198094). Fix: clone ``M`` as the op's first argument (the op
   then writes the copy; eager copies ``M`` there too).
H3 in-placed result returned: the same op, when its result is also copied back
   into ``M`` (the write-back is then dropped) and returned, makes the output
   an alias of the input (#195451). Fix: return a clone of the result; not
   where the output is a view of ``M`` in eager too (the runtime regenerates
   it from ``M``).
H4 write-back reading the in-placed result elsewhere: after the in-place op,
   ``M`` is written a second time by its write-back, whose value reads the
   op's result at other positions (a flip, a shifted view, a gather, a
   reduction; anything but same-position pointwise reads, short of an extern
   kernel); Inductor may fuse that read into the loop that writes ``M`` and
   read values it already overwrote (#198270: its write-after-read tracking
   misses a buffer mutated twice). Fix: as for H2, the op writes a clone of
   ``M``.
H5 overlapping scatter source: a scatter Inductor will do in place whose
   source overlaps (but is not exactly) the region it writes becomes one copy
   loop reading what it overwrites (#197829: ``x[1:] = x[:-1].clone()`` after
   the clone was dropped). Fix: clone the source.
H6 dtype view read before a later write: a view that changes the element size
   (or a complex view) is lowered as an aliasing extern kernel, and its readers
   are not ordered before a later write of the viewed memory (#198101). Fix:
   take the view of a clone of its base.
H7 offset-changing clone (joint graph, before ``remove_noop_ops``): a clone
   whose source has another storage offset but equal sizes and strides is
   dropped although an opaque op (a custom op) may observe the offset
   (#197489). Fix: spell the clone ``aten.as_strided_copy`` of the same
   layout, which the no-op removal does not know (a copy all the same).
H8 returned values collapsed into one object (joint graph, before the no-op
   removal and ``pointless_view``): two returned values of one storage whose
   layouts are their storage root's (a value and a no-op ``view``,
   ``reshape``, ``detach``, full slice, ``t().t()`` of it) are returned by
   Inductor as one tensor object (the no-op views are dropped, and the
   wrapper code returns a same-layout view of a buffer as the buffer),
   where eager returns distinct objects over the storage: after a graph
   break, ``alias.resize_(12)`` resizes ``base`` too (#191449; torch 2.15's
   AOTAutograd regenerates a no-op view of another output, not a
   ``detach``). Fix: return ``aten.view_as(v, v)`` instead, a view op
   Inductor has no lowering for and calls as a fallback kernel: a distinct
   object over the same storage, no copy.
H9 storage-relative view of a materialised view (post-grad graph): an
   ``as_strided`` is relative to its operand's storage, but Inductor realizes
   the operand with its own strides, and a view of an unrealized
   intermediate (``x.repeat(...)[:, ::2]``, a diagonal, an offset slice)
   becomes a compact buffer holding only the view's elements: the
   ``as_strided`` reads the wrong elements and past the buffer's end
   (#197431; torch 2.15 refuses to compile it instead). Fix: rebase the
   ``as_strided`` onto the storage root, with the same sizes, strides and
   offset (the operand's own offset where none is given; the root's storage
   viewed in the operand's dtype where the views change it): the same view,
   no copy; Inductor realizes the root as laid out.

Which outputs the caller receives as they are (:class:`OutputRoles`) matters
to H3 and H8: AOTAutograd regenerates every output that is a view of an input
in eager (and, from 2.15, a no-op view of another output), whatever the graph
returns there; :mod:`rewrite.inductor` reads it from AOTAutograd's metadata.

Every guard copy is an ``aten.clone`` (H7: ``aten.as_strided_copy``); where
its layout is observed (a returned value, a scatter's base: H2-H4) it keeps
the exact layout and dtype of what it copies (the flat storage-prefix copy of
:func:`rewrite.lowering.copies.exact_copy` for a strided view). An FX
clone whose source Inductor writes later is materialised before that write.
Read literally on the FX graph a guard clone is removable, so the clone
elimination must be told to keep them (:attr:`GuardReport.clones`; H1 runs
before it, H2-H6 and H9 after it). Which ops Inductor will write in place is
predicted from the graph (:func:`predict_reinplacing`); a prediction of "in
place" that Inductor does not follow costs a copy, never a wrong result.
Each rewrite is reported (:class:`Guarded`): the hazard, where, and the
bytes it copies.

The package's modules: :mod:`~rewrite.guard.hazards` (the classes,
:data:`STOCK_MISCOMPILES`, the reports, :class:`InductorModel`,
:class:`OutputRoles`), :mod:`~rewrite.guard.stale_reads` (H1),
:mod:`~rewrite.guard.reinplacing` (:func:`predict_reinplacing`),
:mod:`~rewrite.guard.inductor_hazards` (H2-H6), :mod:`~rewrite.guard.storage_views`
(H9), :mod:`~rewrite.guard.joint_graph` (H7, H8); the fixes H1-H6 plan and
apply in rounds, :mod:`~rewrite.guard.fixes`; the helpers they share,
:mod:`~rewrite.guard.common`.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> def f(dst, src):
...     src.copy_(src + 1)
...     dst.copy_(src)
>>> gm = make_fx(f, tracing_mode="fake")(torch.zeros(3), torch.ones(3))
>>> first, second = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
>>> second.replace_input_with(first, first.args[0])  # what the hook sees for ``dst[:] = src; src.add_(1)``
>>> report = guard_stale_reads(gm.graph)
>>> [(g.hazard.code, g.action, g.nbytes) for g in report.guarded]
[('H1', 'reorder', 0)]
>>> [n.name for n in gm.graph.nodes if n.op == "call_function"]  # dst takes src's old value first
['add', 'copy__1', 'copy_']
"""

from __future__ import annotations

from rewrite.guard.hazards import (
    ALL_HAZARDS,
    KNOWN_RELEASES,
    STOCK_MISCOMPILES,
    Guarded,
    GuardReport,
    Hazard,
    InductorModel,
    OutputRoles,
    hazards_on,
    protected_nodes,
)
from rewrite.guard.hazards import Action as Action  # not in __all__, as before
from rewrite.guard.inductor_hazards import guard_inductor_hazards, plan_inductor_hazards
from rewrite.guard.joint_graph import (
    CollapsedOutput,
    guard_collapsed_outputs,
    guard_joint_graph,
    plan_collapsed_outputs,
    plan_offset_clones,
)
from rewrite.guard.reinplacing import Reinplacing, predict_reinplacing
from rewrite.guard.stale_reads import guard_stale_reads, plan_stale_reads
from rewrite.guard.storage_views import StorageView, guard_storage_views, plan_storage_views

__all__ = [
    "ALL_HAZARDS",
    "KNOWN_RELEASES",
    "STOCK_MISCOMPILES",
    "CollapsedOutput",
    "GuardReport",
    "Guarded",
    "Hazard",
    "InductorModel",
    "OutputRoles",
    "Reinplacing",
    "StorageView",
    "guard_collapsed_outputs",
    "guard_inductor_hazards",
    "guard_joint_graph",
    "guard_stale_reads",
    "guard_storage_views",
    "hazards_on",
    "plan_collapsed_outputs",
    "plan_inductor_hazards",
    "plan_offset_clones",
    "plan_stale_reads",
    "plan_storage_views",
    "predict_reinplacing",
    "protected_nodes",
]
