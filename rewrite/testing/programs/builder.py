"""The statement builder: draws a program's statements one at a time, each kept only when valid.

:class:`ProgramBuilder` puts the statement kinds of :data:`KINDS` together (clones,
hazards, views, in-place writes, pointwise ops, ``out=`` writes, custom ops,
norms, patterns) and draws the program's outputs. While drawing, every
statement is executed on real tensors, and a statement is only kept when it is
valid there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import hypothesis.strategies as st

from rewrite.testing.programs.norms import NORM_CALLS, NormStatements
from rewrite.testing.programs.patterns import PatternStatements
from rewrite.testing.programs.values import Rejected, clone_keeps_layout
from rewrite.testing.programs.views import ViewStatements
from rewrite.testing.programs.writes import WriteStatements

#: The statement kinds and their weights (each is drawn by ``_draw_<kind>``).
KINDS: tuple[tuple[str, int], ...] = (
    ("clone", 3),
    ("hazard", 8),
    ("view", 8),
    ("inplace", 5),
    ("pointwise", 3),
    ("out", 2),
    ("custom", 1),
    ("norm", 3),
    ("pattern", 3),  # last: shrinking toward kind 0 leaves the older kinds' draws as they were
)


class ProgramBuilder(ViewStatements, WriteStatements, NormStatements, PatternStatements):
    """Draws statements one at a time, executing each on real tensors to keep it valid."""

    def __init__(
        self,
        draw: st.DrawFn,
        *,
        inputs_source: str,
        num_inputs: int,
        alias_bias: float,
        kinds: Sequence[tuple[str, int]],
        max_size: int,
        max_lines: int,
        allow_hidden_effects: bool = True,
        allow_untrusted_ops: bool = False,
    ) -> None:
        self.max_lines = max_lines
        self.draw = draw
        self.kinds = tuple(kinds) if NORM_CALLS else tuple(k for k in kinds if k[0] != "norm")
        self.allow_custom_ops = any(kind == "custom" for kind, _ in kinds)
        self.allow_hidden_effects = allow_hidden_effects
        self.allow_untrusted_ops = allow_untrusted_ops
        self.norm_calls = NORM_CALLS
        self.alias_bias = alias_bias
        self.max_size = max_size
        self.inputs_source = inputs_source
        self.input_names = [f"x{i}" for i in range(num_inputs)]
        self.lines = []
        self.clones = []  # (clone, original)
        self.uses_custom_ops = False
        self.counter = 0
        self.env = {}
        self.values = []
        self._history = []
        self._aim = None  # storage that operand picks must use while set (hazards)
        self._focus_off = False  # no aiming at the last clone pair (set after some hazards)
        self._reset()

    # -- statements ------------------------------------------------------- #

    def step(self, draw: st.DrawFn) -> None:
        """Draw one statement (with ``draw``, the draw function of the statement's own span)."""
        self.draw = draw
        total = sum(w for _, w in self.kinds)
        roll = self._int(0, total - 1)
        chosen = self.kinds[-1][0]
        for kind, weight in self.kinds:
            if roll < weight:
                chosen = kind
                break
            roll -= weight
        with contextlib.suppress(Rejected):  # a statement the state cannot take: draw nothing
            getattr(self, f"_draw_{chosen}")()

    def _draw_hazard(self) -> None:
        """A clone, then maybe a view and a write of one side (clone or original), then maybe a read.

        The clone's original is an input (caller-visible, unless donated) or an
        intermediate value (made by a pointwise op first if there is none yet).
        """
        inputs = {v.storage for v in self.values if v.kind == "input"}
        if self._int(0, 1) == 0:
            by_name = {v.name: v for v in self.values}
            cloned = {by_name[original].storage for _, original in self.clones}
            candidates = [v for v in self.values if v.kind == "input"]
            # Inputs not cloned yet (a second clone reads the original again), and
            # mostly inputs whose clone has the same layout (else C1 alone decides).
            candidates = [v for v in candidates if v.storage not in cloned] or candidates
            same_layout = [v for v in candidates if clone_keeps_layout(v.tensor)]
            if same_layout and self._int(0, 3) != 0:
                candidates = same_layout
            src = self._choice(candidates)
        else:
            intermediates = [v for v in self.values if v.storage not in inputs]
            if not intermediates:
                self._draw_pointwise()
                intermediates = [self.values[-1]]
            src = self._choice(intermediates)
        self._draw_clone(src)
        by_name = {v.name: v for v in self.values}
        clone, original = self.clones[-1]
        sides = [by_name[clone].storage, by_name[original].storage]
        enabled = {k for k, _ in self.kinds}
        writers = [kind for kind in ("inplace", "inplace", "out", "custom", "norm") if kind in enabled]
        parts: list[tuple[int, Callable[[], None]]] = []
        side = sides[self._int(0, 1)]
        if self._int(0, 2) == 2:  # write through a view
            parts.append((side, self._draw_view))
        if writers:
            parts.append((side, getattr(self, f"_draw_{self._choice(writers)}")))
        if self._int(0, 3) != 0:  # read one side afterwards
            parts.append((sides[self._int(0, 1)], self._draw_pointwise))
        for aim, part in parts:
            with contextlib.suppress(Rejected), self._aiming(aim):
                part()
        # Half the time, later statements stop aiming at this pair (so that the hazard
        # is not always masked by later reads and writes of both sides).
        self._focus_off = self._int(0, 1) == 1

    # -- outputs ---------------------------------------------------------- #

    def outputs(self, draw: st.DrawFn, max_outputs: int) -> list[str]:
        """Draw the returned values: recent and clone-related values first, repeats allowed."""
        self.draw = draw
        n = self._int(1, max_outputs)
        chosen: list[str] = []
        for _ in range(n):
            how = self._int(0, 3)
            if how == 0:  # the last value made
                chosen.append(self.values[-1].name)
            elif how == 1 or not chosen:  # any value, clone-related ones preferred
                chosen.append(self._pick(self.values).name)
            elif how == 2:  # any value
                chosen.append(self._choice(self.values).name)
            else:  # a repeated output
                chosen.append(self._choice(chosen))
        return chosen
