"""Hypothesis settings for fuzzing with the random programs, and their named profiles."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

__all__ = ["CI_SETTINGS", "FUZZ_SETTINGS", "SOAK_SETTINGS", "register_profiles"]

#: Settings for continuous integration: small example counts, no deadline (a
#: draw traces a program with ``make_fx``), no example database, derandomized.
CI_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)

#: Settings for long campaigns: many examples, no deadline, random seeds.
SOAK_SETTINGS = settings(
    max_examples=100_000,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)


#: Settings for fuzzing your own pass in your own test suite (profile ``"fx-aliasing"``): no
#: deadline and no too-slow health check (every draw traces a program with ``make_fx``), and
#: one failure shrunk and reported rather than every distinct one (Hypothesis otherwise
#: shrinks each failing soundness clause separately: two to four times the shrinking).
#: The example database stays on, so a re-run replays the failure at once.
FUZZ_SETTINGS = settings(
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


def register_profiles() -> None:
    """Register :data:`CI_SETTINGS` as Hypothesis profile ``"ci"``, :data:`SOAK_SETTINGS` as ``"soak"``
    and :data:`FUZZ_SETTINGS` as ``"fx-aliasing"``.

    Examples
    --------
    >>> from hypothesis import settings
    >>> register_profiles()
    >>> settings.get_profile("ci").deadline is None
    True
    """
    settings.register_profile("ci", CI_SETTINGS)
    settings.register_profile("soak", SOAK_SETTINGS)
    settings.register_profile("fx-aliasing", FUZZ_SETTINGS)
