"""A wall-clock limit for one piece of work, for the audits' per-sample time limits."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tools.errors import SampleTimeout

__all__ = ["SampleTimeout", "time_limit"]


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`SampleTimeout` in the body after ``seconds`` (SIGALRM, main thread only).

    Without ``setitimer``, outside the main thread, or for ``None``/non-positive
    seconds, the body runs without a limit.

    Examples
    --------
    >>> with time_limit(5.0):
    ...     x = 1 + 1
    >>> x
    2
    """
    usable = (
        seconds is not None
        and seconds > 0
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def alarm(signum: int, frame: Any) -> None:
        raise SampleTimeout()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))  # type: ignore[arg-type]
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
