"""Every exception of the ``rewrite`` package, part of the :class:`aliasing.AliasingError` hierarchy.

The modules that raise them re-export them under their old names
(``rewrite.testing.equivalence.OracleError``, ``rewrite.explain.ProgramFileError``,
``rewrite.editing.nodes.LoweringSkip``, ``rewrite.cli.DemoFailed`` and
``rewrite.cli.UsageError``), so either import works.
"""

from __future__ import annotations

from aliasing.errors import AliasingError

__all__ = [
    "DemoFailed",
    "LoweringSkip",
    "NotEquivalent",
    "OracleError",
    "ProgramFileError",
    "RewriteError",
    "UsageError",
]


class RewriteError(AliasingError):
    """A rewrite failed (raised only in strict mode; the default mode keeps every clone)."""


class NotEquivalent(AliasingError, AssertionError):
    """A rewritten program differs from the original.

    ``clause`` names the soundness clause of docs/DESIGN.md that failed:
    ``"output"``, ``"input-mutation"``, ``"new-aliasing"`` or ``"raises"``.
    """

    def __init__(self, clause: str, message: str) -> None:
        self.clause = clause
        super().__init__(f"[{clause}] {message}")


class OracleError(AliasingError):
    """:func:`~rewrite.testing.check_equivalent` cannot judge the rewrite: passing would check nothing.

    Not a :class:`~rewrite.errors.NotEquivalent` (nor an ``AssertionError``): no
    difference was found, the check itself could not be made.  ``reason`` is
    ``"bad-inputs"`` (the inputs do not fit the original program's signature;
    ``error`` is the ``TypeError`` binding them raised) or ``"nothing-compared"``
    (no tensor with data took part in the comparison).  An original program that
    raises on the inputs is judged, not refused (clause ``"raises"``).

    Examples
    --------
    >>> import torch
    >>> from rewrite.testing import check_equivalent
    >>> gm = torch.fx.symbolic_trace(lambda x: x + 1)
    >>> try:
    ...     check_equivalent(gm, gm, [])  # the original takes one input, not zero
    ... except OracleError as err:
    ...     print(err.reason)
    bad-inputs
    """

    def __init__(self, reason: str, message: str, error: BaseException | None = None) -> None:
        self.reason = reason
        self.error = error
        super().__init__(f"[{reason}] {message}")


class ProgramFileError(AliasingError):
    """A file is not a program saved with ``torch.export.save``, or cannot be read or written."""


class LoweringSkip(RewriteError):
    """A wrapper node the lowering leaves alone (with the reason); never escapes the package."""


class DemoFailed(Exception):
    """A step of the ``fx-aliasing demo`` command failed; the message says which and why."""


class UsageError(Exception):
    """A path or an argument of the ``fx-aliasing`` command line is wrong; nothing was done."""
