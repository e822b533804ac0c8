"""The torch.compile adapter: fx-aliasing as an Inductor post-grad custom pass.

This is the only module of the library that imports ``torch._inductor``.

:class:`CloneEliminationPass` runs on the functional post-grad graph
(``post_grad_custom_post_pass``), before Inductor reinplaces and decomposes
mutable custom ops itself. With ``lower_functional=True`` it lowers
``auto_functionalized``, ``auto_functionalized_v2`` and
``triton_kernel_wrapper_functional`` into explicit clones plus in-place calls
(:func:`rewrite.lowering.lower_functional_ops`), removes every clone sound clone
elimination proves unneeded, folds clones that are only copied back into their
original (the ``copy_`` epilogue of a mutated graph input, a scatter
write-back) and drops the copies that became self-copies. Inductor's later
passes then find nothing left to reinplace. With ``lower_functional=False`` the
functional wrappers are left to Inductor and only the clones already in the
graph are judged.

Logging: logger ``rewrite.inductor`` writes a one-line summary at INFO and each
decision at DEBUG; the full report is also a structured-trace artifact named
``fx_aliasing_clone_elimination`` (visible with ``TORCH_TRACE`` / tlparse).

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

import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

import torch
import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from rewrite.lowering import PipelineReport, lower_and_eliminate

__all__ = ["CloneEliminationPass", "library_source_hash"]

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("aliasing", "rewrite")


def library_source_hash() -> str:
    """SHA-256 of the source of every module of ``aliasing`` and ``rewrite`` (``*.py``, sorted).

    Examples
    --------
    >>> len(library_source_hash())
    64
    """
    h = hashlib.sha256()
    for pkg in _PACKAGES:
        for path in sorted((_ROOT / pkg).glob("*.py")):
            h.update(f"{pkg}/{path.name}\0".encode())
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


class CloneEliminationPass(CustomGraphPass):
    """Lower functional custom ops and keep only the clones the program needs.

    Parameters
    ----------
    donated_inputs : iterable of int
        Placeholder positions (0-based, graph order) whose storage the caller
        gives up (their final value is unspecified; an output may take it over).
        Pass managers that know them (vLLM's) supply them here.
    lower_functional : bool
        Lower ``auto_functionalized``/``auto_functionalized_v2``/
        ``triton_kernel_wrapper_functional`` before eliminating clones.

    Notes
    -----
    Install it with ``torch.compile(fn, options={"post_grad_custom_post_pass":
    CloneEliminationPass()})`` or in a list with other passes (Inductor runs a
    list in order). Any pass manager may call it with a ``torch.fx.Graph``. It
    never raises: an internal failure leaves the graph valid and equivalent
    (every step is) and is logged. The last run's report is
    :attr:`last_report`. :meth:`uuid` changes when the library's code or the
    configuration changes, so Inductor's cache never replays a stale result.

    Examples
    --------
    >>> p = CloneEliminationPass(donated_inputs=(0,))
    >>> p.uuid() != CloneEliminationPass().uuid()
    True
    """

    def __init__(self, *, donated_inputs: Iterable[int] = (), lower_functional: bool = True) -> None:
        self.donated_inputs: tuple[int, ...] = tuple(int(i) for i in donated_inputs)
        self.lower_functional = bool(lower_functional)
        self.last_report: Optional[PipelineReport] = None

    def config(self) -> dict[str, Any]:
        """The configuration that changes what the pass does (part of :meth:`uuid`)."""
        return {"donated_inputs": self.donated_inputs, "lower_functional": self.lower_functional}

    def uuid(self) -> str:
        """A hash of the library's source and of :meth:`config`."""
        h = hashlib.sha256()
        h.update(library_source_hash().encode())
        h.update(repr(sorted(self.config().items())).encode())
        return h.hexdigest()

    def __call__(self, graph: torch.fx.Graph) -> None:
        """Rewrite ``graph`` in place (see the module docstring)."""
        try:
            report = lower_and_eliminate(
                graph, donated_inputs=self.donated_inputs, lower_functional=self.lower_functional
            )
        except Exception as e:  # the pipeline reports its own failures; this is a last guard
            log.warning("fx-aliasing clone elimination failed: %s: %s", type(e).__name__, e)
            return
        self.last_report = report
        _log_report(report)

    def __repr__(self) -> str:
        return f"CloneEliminationPass(donated_inputs={self.donated_inputs}, lower_functional={self.lower_functional})"


def _log_report(report: PipelineReport) -> None:
    if log.isEnabledFor(logging.DEBUG):
        for low in report.lowering.lowered:
            log.debug("lowered %s (%s) -> %s, clones %s", low.node, low.kind, low.call, ", ".join(low.clones))
        for sk in report.lowering.skipped:
            log.debug("not lowered %s (%s): %s", sk.node, sk.kind, sk.reason)
        for i, rep in enumerate(report.eliminations):
            for d in rep.decisions:
                log.debug("round %d: %s %s (%s): %s %s", i + 1, d.action, d.node, d.original, d.reason, ", ".join(d.evidence))
        for f in report.folds:
            log.debug("%s", f)
        for name in report.dropped_copies:
            log.debug("dropped self-copy %s", name)
    log.info("%s", report.summary())
    try:
        torch._logging.trace_structured(
            "artifact",
            metadata_fn=lambda: {"name": "fx_aliasing_clone_elimination", "encoding": "string"},
            payload_fn=lambda: str(report),
        )
    except Exception as e:  # tracing is best effort
        log.debug("structured trace failed: %s", e)
