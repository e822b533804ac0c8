"""Graph-boundary roles of values and storages."""

from __future__ import annotations

import enum

__all__ = ["CALLER_VISIBLE", "UNKNOWN_STORAGE", "Role"]


class Role(str, enum.Enum):
    """Where a value comes from (or goes to) at the graph boundary."""

    USER_INPUT = "user_input"
    DONATED_INPUT = "donated_input"
    PARAMETER = "parameter"
    BUFFER = "buffer"
    CONSTANT = "constant"
    OUTPUT = "output"
    INTERMEDIATE = "intermediate"

    def __str__(self) -> str:
        return self.value


#: Roles whose memory the caller still observes after the program ran:
#: writing it changes the program's visible behaviour.
CALLER_VISIBLE = frozenset({Role.USER_INPUT, Role.PARAMETER, Role.BUFFER, Role.CONSTANT})

#: Storage id that stands for "any storage at all" (a value of unknown origin).
UNKNOWN_STORAGE = "unknown"
