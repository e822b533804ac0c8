"""Errors of the ``rewrite`` package, part of the :class:`aliasing.AliasingError` hierarchy."""

from __future__ import annotations

from aliasing.errors import AliasingError

__all__ = ["NotEquivalent", "RewriteError"]


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
