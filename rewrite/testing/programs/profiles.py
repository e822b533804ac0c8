"""Hypothesis settings for fuzzing with the random programs, and their named profiles.

Also :func:`hypothesis_tracer_paused`: while the fuzzer's own code runs (drawing a
program, tracing it, the oracle's runs), Hypothesis's explain-phase line tracer is
paused, so that only the pass under test is traced.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from hypothesis import HealthCheck, Phase, settings

__all__ = ["CI_SETTINGS", "FUZZ_SETTINGS", "SOAK_SETTINGS", "hypothesis_tracer_paused", "register_profiles"]

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
#: deadline and no too-slow health check (every draw traces a program with ``make_fx``), one
#: failure shrunk and reported rather than every distinct one, and no explain phase (which
#: traces every line the test runs while it shrinks, and for a program argument only says
#: that other programs fail too). The example database stays on, so a re-run replays the
#: failure at once.
FUZZ_SETTINGS = settings(
    deadline=None,
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


def _scrutineer_tool() -> int | None:
    """The ``sys.monitoring`` tool id of Hypothesis's explain-phase tracer (Python 3.12 and later)."""
    try:
        from hypothesis.internal import scrutineer
    except ImportError:  # pragma: no cover - a Hypothesis without it
        return None
    tool = getattr(scrutineer, "MONITORING_TOOL_ID", None)
    return tool if isinstance(tool, int) else None


@contextlib.contextmanager
def hypothesis_tracer_paused() -> Iterator[None]:
    """Pause Hypothesis's explain-phase line tracer (its *scrutineer*) for the block, if it is on.

    With its default phases, Hypothesis traces every line a failing test runs while it
    shrinks (``sys.settrace`` before Python 3.12, ``sys.monitoring`` after), to report
    the lines that only failing examples ran. Under ``sys.settrace`` that made
    shrinking about 2.5 times slower, every line of torch that drawing, tracing
    and checking a program runs being traced. The fuzzer runs its own work in this
    block, so that the lines of the pass under test are still traced and reported.
    Any other tracer (a debugger, coverage) is left alone.

    Examples
    --------
    >>> with hypothesis_tracer_paused():
    ...     pass
    """
    tracer = sys.gettrace()
    if tracer is not None and type(getattr(tracer, "__self__", None)).__module__ == "hypothesis.internal.scrutineer":
        sys.settrace(None)
        try:
            yield
        finally:
            sys.settrace(tracer)
        return
    monitoring = getattr(sys, "monitoring", None)
    tool = _scrutineer_tool() if monitoring is not None else None
    if monitoring is None or tool is None or monitoring.get_tool(tool) != "scrutineer":
        yield
        return
    events = monitoring.get_events(tool)
    monitoring.set_events(tool, 0)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # (the tool was freed meanwhile)
            monitoring.set_events(tool, events)


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
