"""fx-aliasing rewrites: a sound clone-elimination pass built on :mod:`aliasing`.

- :func:`eliminate_clones` removes every ``clone`` the program does not need
  and none it does, and reports a :class:`Decision` with a :class:`Reason`
  for each candidate;
- :func:`plan_clone_elimination` (pure) and :func:`apply_decisions` (the one
  applier of decisions; the lowering and the hazard guard mutate graphs too,
  docs/DESIGN.md lists who does) are its two halves, for pipelines that want to
  inspect or filter decisions in between;
- :mod:`rewrite.testing` has the real-execution equivalence oracle and the
  property-based fuzzer (the fuzzer needs Hypothesis, the ``test`` extra);
  :mod:`rewrite.inductor` the torch.compile adapter; :mod:`rewrite.errors` every
  exception class of the package.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> import rewrite
>>> gm = make_fx(lambda x: (x * 2).clone() + 1, tracing_mode="fake")(torch.randn(4))
>>> rewrite.eliminate_clones(gm).removed
('clone',)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rewrite.lazy import lazy_names

if TYPE_CHECKING:
    from rewrite.editing.apply import apply_decisions
    from rewrite.errors import NotEquivalent, RewriteError
    from rewrite.pipeline.driver import lower_and_eliminate
    from rewrite.pipeline.eliminate import eliminate_clones
    from rewrite.pipeline.reports import PipelineReport
    from rewrite.planning.decisions import CloneEliminationReport, Decision, Reason
    from rewrite.planning.planner import is_clone_candidate, plan_clone_elimination

#: Where each public name lives. They are imported on first use (PEP 562), so that
#: ``import rewrite`` (and the ``fx-aliasing`` command's ``--help``, ``--version`` and
#: argument errors, :mod:`rewrite.cli`) does not import torch.
_HOMES = {
    "CloneEliminationReport": "rewrite.planning.decisions",
    "Decision": "rewrite.planning.decisions",
    "NotEquivalent": "rewrite.errors",
    "PipelineReport": "rewrite.pipeline.reports",
    "Reason": "rewrite.planning.decisions",
    "RewriteError": "rewrite.errors",
    "apply_decisions": "rewrite.editing.apply",
    "eliminate_clones": "rewrite.pipeline.eliminate",
    "is_clone_candidate": "rewrite.planning.planner",
    "lower_and_eliminate": "rewrite.pipeline.driver",
    "plan_clone_elimination": "rewrite.planning.planner",
}

__all__ = [
    "CloneEliminationReport",
    "Decision",
    "NotEquivalent",
    "PipelineReport",
    "Reason",
    "RewriteError",
    "apply_decisions",
    "eliminate_clones",
    "is_clone_candidate",
    "lower_and_eliminate",
    "plan_clone_elimination",
]


__getattr__, __dir__ = lazy_names(globals(), _HOMES, __all__)
