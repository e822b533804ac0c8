"""The exceptions of the maintainer tools, part of the :class:`aliasing.AliasingError` hierarchy.

The modules that raise them re-export them (``tools.campaign.CampaignError``,
``tools.audit.AuditError``, ``tools.layout_audit.LayoutAuditError``,
``tools.time_limit.SampleTimeout``, ``tools.soak.SoakError``...), so either import works.
"""

from __future__ import annotations

from aliasing.errors import AliasingError

__all__ = [
    "AuditError",
    "CampaignError",
    "LayoutAuditError",
    "SampleTimeout",
    "SoakError",
    "SoakFailure",
]


class LayoutAuditError(AliasingError, ValueError):
    """The layout audit was asked for something it cannot do (an unknown op or layout class)."""


class SampleTimeout(BaseException):
    """Raised by the alarm when one sample runs past its time limit (a BaseException, so
    that an op's own ``except Exception`` cannot swallow it; :func:`tools.time_limit.time_limit`)."""


class AuditError(AliasingError, ValueError):
    """The audit was asked for something it cannot do (an unknown op name, a bad setting)."""


class CampaignError(AliasingError, ValueError):
    """A campaign cannot run or merge as asked: a malformed shard, a results file of another
    campaign, shards that do not cover the items, a worker that cannot start."""


class SoakError(AliasingError, ValueError):
    """The soak was asked for something it cannot do (bad rounds or seeds, a results file of
    another campaign)."""


class SoakFailure(AssertionError):
    """One check failed on one program; ``check`` names it (one of ``tools.soak.CHECKS``)."""

    def __init__(self, check: str, message: str) -> None:
        self.check = check
        super().__init__(f"[{check}] {message}")
