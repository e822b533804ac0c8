"""The SGLang adapter: the library's Inductor pass as a pass of SGLang's post-grad pass manager.

This is the only module of the library that imports ``sglang`` (tested with SGLang 0.5.23 and
torch 2.14.1, the torch it pins). SGLang's compilation backend (``SGLangBackend``) sets its own
``PostGradPassManager`` (``sglang.srt.compilation.pass_manager``) as Inductor's
``post_grad_custom_post_pass``, empty by default, with ``add()`` for ``SGLangInductorPass``es,
and compiles with auto-functionalization v1 (``enable_auto_functionalized_v2=False``).

:class:`CloneEliminationPass` is such a pass: it runs :class:`rewrite.inductor.CloneEliminationPass`
(the lowering of ``auto_functionalized`` into clones plus in-place calls, the copy planner and
the post-grad hazard guard, H1-H6 and H9) on the graph, timed as SGLang's passes time
themselves. The joint-graph guard (H7, H8) needs Inductor's ``joint_custom_pre_pass``, which
SGLang's backend does not expose; SGLang's graphs do not go through it here.

To use it in SGLang's server set ``FX_ALIASING_SGLANG=1``: the package's SGLang general plugin
(:func:`plugin`, entry point ``fx_aliasing`` in group ``sglang.srt.plugins``, which SGLang's
``load_plugins`` runs in every process) registers a hook with SGLang's ``HookRegistry`` that
adds the pass to every ``PostGradPassManager`` SGLang builds. ``SGLANG_PLUGINS`` (SGLang's
allow-list of plugin names) must include ``fx_aliasing`` when it is set. A manager you build
yourself takes it with ``manager.add(CloneEliminationPass())``.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> from sglang.srt.compilation.inductor_pass import pass_context
>>> from sglang.srt.compilation.pass_manager import PostGradPassManager
>>> manager = PostGradPassManager()
>>> manager.add(CloneEliminationPass())
>>> def f(x):
...     y = x * 2
...     return y.clone() + 1        # y is read only: its copy goes
>>> gm = make_fx(f, tracing_mode="fake")(torch.randn(4))
>>> with pass_context(None):
...     manager(gm.graph)
>>> manager.passes[0].last_report.removed
('clone',)
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch.fx
from sglang.srt.compilation.inductor_pass import SGLangInductorPass

from rewrite import inductor

__all__ = ["ENABLE_VARIABLE", "CloneEliminationPass", "plugin"]

#: Set to ``1`` to have SGLang's plugin loader add the pass to its pass managers (:func:`plugin`).
ENABLE_VARIABLE = "FX_ALIASING_SGLANG"

#: The manager whose every instance gets the pass (:func:`plugin`).
MANAGER = "sglang.srt.compilation.pass_manager.PostGradPassManager.__init__"

logger = logging.getLogger(__name__)


class CloneEliminationPass(SGLangInductorPass):  # type: ignore[misc]
    """Lower functional custom ops, keep only the copies the program needs, and guard Inductor's
    post-grad hazards, in SGLang's pass manager.

    Parameters
    ----------
    lower_functional, guard : bool
        As for :class:`rewrite.inductor.CloneEliminationPass`, which does the work.

    Notes
    -----
    It never raises on a well-formed graph; its last run's reports are :attr:`last_report` and
    :attr:`last_guard_report`; :meth:`uuid` follows this class's source, the library's source
    and the options, so Inductor's cache never replays a stale result.

    Examples
    --------
    >>> CloneEliminationPass().uuid() != CloneEliminationPass(guard=False).uuid()
    True
    """

    def __init__(self, *, lower_functional: bool = True, guard: bool = True) -> None:
        super().__init__()
        self.inner = inductor.CloneEliminationPass(lower_functional=lower_functional, guard=guard)

    @property
    def last_report(self) -> Any:
        """The last run's :class:`rewrite.pipeline.reports.PipelineReport` (None before any run)."""
        return self.inner.last_report

    @property
    def last_guard_report(self) -> Any:
        """The last run's hazard guard report (None without the guard or before any run)."""
        return self.inner.last_guard_report

    def __call__(self, graph: torch.fx.Graph) -> None:
        """Rewrite ``graph`` in place."""
        self.begin()
        self.inner(graph)
        self.end_and_log()

    def uuid(self) -> Any:
        """A hash of this class's source and of the Inductor pass's key (the library's source and the options)."""
        return self.hash_dict({"pass": self.hash_source(self), "inner": self.inner.uuid()})

    def __repr__(self) -> str:
        return f"CloneEliminationPass(lower_functional={self.inner.lower_functional}, guard={self.inner.guard})"


def _add_to_manager(result: object, manager: Any, *args: object, **kwargs: object) -> None:
    """SGLang ``HookType.AFTER`` hook on ``PostGradPassManager.__init__``: the new manager gets the pass."""
    manager.add(CloneEliminationPass())


def plugin() -> None:
    """SGLang general plugin (entry point ``fx_aliasing`` in group ``sglang.srt.plugins``).

    SGLang's ``load_plugins`` calls it in every process. With ``FX_ALIASING_SGLANG=1`` it
    registers, with SGLang's ``HookRegistry``, a hook that adds :class:`CloneEliminationPass`
    to every ``PostGradPassManager`` built afterwards; otherwise it does nothing:
    ``FX_ALIASING_SGLANG=1 python -m sglang.launch_server ...``.
    """
    value = os.environ.get(ENABLE_VARIABLE, "")
    if value == "1":
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        HookRegistry.register(MANAGER, _add_to_manager, HookType.AFTER)
        logger.info("fx-aliasing CloneEliminationPass joins every SGLang PostGradPassManager in this process")
    elif value not in ("", "0"):
        logger.warning("%s=%r: expected 1 or 0; the fx-aliasing pass is not added", ENABLE_VARIABLE, value)
