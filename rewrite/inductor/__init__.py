"""The torch.compile adapter: fx-aliasing as Inductor custom passes, with the hazard guard.

This is the only package of the library that imports ``torch._inductor``.

:class:`CloneEliminationPass` runs on the functional post-grad graph
(``post_grad_custom_post_pass``), before Inductor reinplaces and decomposes
mutable custom ops itself. With ``lower_functional=True`` it lowers
``auto_functionalized``, ``auto_functionalized_v2`` and
``triton_kernel_wrapper_functional`` into explicit clones plus in-place calls
(:func:`rewrite.lowering.lower_functional_ops`), then lets the one copy planner
(:mod:`rewrite.planning.planner`) remove every copy the program does not need: clones
that conditions C1-C7 allow, clones folded into the original they are copied
back into (the ``copy_`` epilogue of a mutated graph input, a scatter
write-back; condition C8), and the ``copy_`` nodes that then copy a region
onto itself (C9). Inductor's later passes then find nothing left to
reinplace. With ``lower_functional=False`` the functional wrappers are left to
Inductor and only the copies already in the graph are judged.

With ``guard=True`` (the default) the pass also runs the hazard guard, which
protects the program from Inductor's own aliasing bugs, the hazard classes
H1-H9 of :data:`HAZARDS` (docs/DESIGN.md states them in full): before the
lowering it restores the reads that the joint graph's ``remove_noop_ops``
made stale (H1); after the clone elimination it rebases ``as_strided`` views
of views of intermediates onto their storage (H9) and adds the protective
clones that Inductor's reinplacing, lowering and scheduling need (H2-H6).
:class:`JointGraphGuard` is the part only a ``joint_custom_pre_pass`` can do
(H7, H8). Both read from AOTAutograd which outputs reach the caller as they
are (:func:`output_roles`). :func:`compile_options` installs both in one line:

>>> import torch
>>> from rewrite.inductor import compile_options
>>> compiled = torch.compile(lambda x: x + 1, options=compile_options())  # doctest: +SKIP

The guard is pure FX. A rewrite is judged against eager execution, not
against stock Inductor: the guard adds the least copying that makes
Inductor's result right, and nothing where none of the hazards is present;
it looks only for the classes the installed Inductor still gets wrong
(:func:`hazards_on`). Every guard copy is an ``aten.clone`` (H7:
``aten.as_strided_copy``); where its layout is observed (a returned value, a
scatter's base: H2-H4) it keeps the exact layout and dtype of what it copies
(:func:`rewrite.lowering.copies.exact_copy`). Read literally on the FX graph a
guard clone is removable, so the clone elimination is told to keep them
(:attr:`GuardReport.clones`). Which ops Inductor will write in place is
predicted from the graph (:func:`predict_reinplacing`); a prediction of "in
place" that Inductor does not follow costs a copy, never a wrong result. Each
rewrite is reported (:class:`Guarded`): the hazard, where, and the bytes it
copies.

Logging: logger ``rewrite.inductor`` writes a one-line summary at INFO (the
guard's, with the hazards it guarded, where and their bytes, then the clone
elimination's) and each decision at DEBUG (the guard's stages log a failure
at WARNING to ``rewrite.inductor.guard``); the full reports are also structured-trace
artifacts named ``fx_aliasing_clone_elimination`` and ``fx_aliasing_guard``
(visible with ``TORCH_TRACE`` / tlparse). When Inductor's cache replays a
compile, no pass runs: ``rewrite.inductor`` says so at INFO with the cached
compile's counts (``counters["inductor"]["fx_aliasing_*"]``, which the cache
replays), and a pass that has not run has ``last_report`` None and
``last_report_source`` ``"cache"``; ``TORCHINDUCTOR_FX_GRAPH_CACHE=0``
compiles afresh.

HTML reports: ``compile_options(report_dir=FOLDER)`` (or ``CloneEliminationPass(report_dir=FOLDER)``,
or the environment variable :data:`REPORT_DIR_ENV`, ``FX_ALIASING_REPORT_DIR=FOLDER``, read when
the pass runs) writes one self-contained HTML report (:mod:`rewrite.html_report`: the decisions,
the storage timeline and graph, the code) per graph the pass rewrites, named
``fx_aliasing_<n>_compile_<id>_<forward|backward>.html``: ``n`` counts the reports of the process
(a number already taken in the folder is skipped), ``id`` is the Dynamo compile id that tlparse
shows (``0_0`` for ``[0/0]``; ``none`` outside a compile); the path is logged at INFO and is the
structured-trace artifact ``fx_aliasing_html_report``. The folder changes no decision and is no
part of :meth:`CloneEliminationPass.uuid`: a compile that Inductor's cache replays runs no pass
and writes no report (``TORCHINDUCTOR_FX_GRAPH_CACHE=0`` to get one). Writing a report copies the
graph and analyses it once more (seconds on a large graph); a failure to write one is logged and
changes nothing.

The modules: :mod:`~rewrite.inductor.passes` (the passes, :func:`compile_options`,
what they read from Inductor and AOTAutograd), :mod:`~rewrite.inductor.report`
(log lines, counters, trace artifacts, HTML reports, compiles the cache
replayed), :mod:`~rewrite.inductor.hazards` (the catalogue, the guard's
reports and models), :mod:`~rewrite.inductor.post_grad` (H1, H9, H2-H6 and the
prediction of reinplacing), :mod:`~rewrite.inductor.joint_graph` (H7, H8),
:mod:`~rewrite.inductor.fixes` (how the stages edit graphs, and what they read).

Example
-------
>>> import torch
>>> from rewrite.inductor import CloneEliminationPass
>>> def f(x):
...     return (x * 2).clone() + 1
>>> compiled = torch.compile(f, options={"post_grad_custom_post_pass": CloneEliminationPass()})
>>> bool((compiled(torch.ones(3)) == 3).all())  # doctest: +SKIP
True
"""

from __future__ import annotations

from rewrite.inductor.hazards import (
    ALL_HAZARDS,
    HAZARDS,
    KNOWN_RELEASES,
    STOCK_MISCOMPILES,
    Guarded,
    GuardReport,
    Hazard,
    HazardClass,
    InductorModel,
    OutputRoles,
    hazards_on,
    protected_nodes,
)
from rewrite.inductor.joint_graph import (
    CollapsedOutput,
    guard_collapsed_outputs,
    guard_joint_graph,
    plan_collapsed_outputs,
    plan_offset_clones,
)
from rewrite.inductor.passes import (
    CloneEliminationPass,
    JointGraphGuard,
    compile_options,
    inductor_model,
    library_source_hash,
    output_roles,
)
from rewrite.inductor.post_grad import (
    Reinplacing,
    StorageView,
    guard_inductor_hazards,
    guard_stale_reads,
    guard_storage_views,
    plan_inductor_hazards,
    plan_stale_reads,
    plan_storage_views,
    predict_reinplacing,
)
from rewrite.inductor.report import REPORT_DIR_ENV

__all__ = [
    "ALL_HAZARDS",
    "HAZARDS",
    "KNOWN_RELEASES",
    "REPORT_DIR_ENV",
    "STOCK_MISCOMPILES",
    "CloneEliminationPass",
    "CollapsedOutput",
    "GuardReport",
    "Guarded",
    "Hazard",
    "HazardClass",
    "InductorModel",
    "JointGraphGuard",
    "OutputRoles",
    "Reinplacing",
    "StorageView",
    "compile_options",
    "guard_collapsed_outputs",
    "guard_inductor_hazards",
    "guard_joint_graph",
    "guard_stale_reads",
    "guard_storage_views",
    "hazards_on",
    "inductor_model",
    "library_source_hash",
    "output_roles",
    "plan_collapsed_outputs",
    "plan_inductor_hazards",
    "plan_offset_clones",
    "plan_stale_reads",
    "plan_storage_views",
    "predict_reinplacing",
    "protected_nodes",
]
