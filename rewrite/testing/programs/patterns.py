"""The patterns a precise pass must see through (the planner's refinements), as a table.

Each entry of :data:`_PATTERNS` is one pattern: a clone, then the statements
that make the pattern, then (for most) a read of one side of the clone pair:

- an unused layout-changing clone (``v.contiguous()`` of a non-contiguous value);
- a layout-changing clone read by an elementwise op, copied, rearranged
  (``cat``, ``flip``), or read through a view or an in-place result
  (``c.unsqueeze(0) * 2.0``, ``c.view(-1)``, ``c.mul_(2.0)`` then a read);
- a dead read of the clone after a write of its original (``c.sum()`` unused);
- a clone only written, never read;
- a same-element in-place op between the clone and its original
  (``c.mul_(o)``, ``torch.mul(o, 2.0, out=c)``, ``o.add_(c)``);
- a ``copy_`` between the clone and its original (``c.copy_(o)``, ``o.copy_(c)``);
- a write of one side, then a full overwrite (``zero_``, ``fill_``, ``copy_``
  of the whole region) of the other;
- the clone written and read, then a dead ``index_put_`` of the original
  (an indexing op that can raise only on its indices);
- the clone written, a value made from it (``c.cumsum(0)``), a second
  clone of the original, a dead ``_to_copy`` of that value (a clone
  candidate that changes the dtype) and an ``out=`` write of it into the
  second clone: two dead clones (C10) and a dead candidate erased alone,
  whose groups share the value they read (``torch.add(s, 1.0, out=c1)``).
  Only sizes of the original decide it, so it traces in symbolic mode
  too.

A pattern is drawn by its position in the table, every position alike; a new
pattern goes at the end, so that the programs drawn for a seed stay as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rewrite.testing.programs.state import BuilderState
from rewrite.testing.programs.values import Rejected, Value

#: What a pattern draws after its clone: ``draw(builder, clone, original)``.
_PatternDraw = Callable[[BuilderState, Value, Value], None]


@dataclass(frozen=True)
class _Pattern:
    """One entry of :data:`_PATTERNS`.

    ``draw`` emits the pattern's statements after the clone. ``layout_changing``:
    the clone is a layout-changing ``contiguous()`` of a non-contiguous value, else
    a ``clone()`` of the last value made or of any value. ``read_after``: then,
    three times in four, a read of the clone or of its original.
    """

    name: str
    draw: _PatternDraw
    layout_changing: bool = False
    read_after: bool = True


def _unused(b: BuilderState, c: Value, o: Value) -> None:
    """Nothing: the layout-changing clone stays unused."""


def _layout_clone_read(b: BuilderState, c: Value, o: Value) -> None:
    """The layout-changing clone read directly, copied, or read through a rearrangement, a view
    or an in-place result."""
    direct = ["torch.sin({c})", "{c} * 2.0", "{c} + 1.0", "{c}.neg()", "{c} + {o}", "{c}.clone()", "copy"]
    through = ["torch.cat([{c}, {c}])", "{c}.flip(0)", "{c}.unsqueeze(0) * 2.0", "{c}.view(-1) * 2.0", "in-place"]
    consumer = b._choice(direct if b._int(0, 1) == 0 else through)
    if consumer == "in-place":  # the in-place result is the clone itself, read afterwards
        b._emit(f"{c.name}.mul_(2.0)", "inplace", bind=True)
        b._emit(f"{b.values[-1].name} + 1.0", "fresh")
    elif consumer == "copy":
        dst = [v for v in b.values if v.writable and v.shape == o.shape and v.name != c.name]
        if not dst:
            raise Rejected("no destination")
        b._emit(f"{b._choice(dst).name}.copy_({c.name})", "inplace", bind=b._bind_inplace())
    else:
        b._emit(consumer.format(c=c.name, o=o.name), "fresh")


def _dead_read_after_write(b: BuilderState, c: Value, o: Value) -> None:
    """A write of the original, then a read of the clone that nothing uses."""
    if not o.writable:
        raise Rejected("original not writable")
    write = b._choice(["{o}.add_(1.0)", "{o}.mul_(-0.5)", "{o}.zero_()"])
    b._emit(write.format(o=o.name), "inplace", bind=False)
    b._emit(b._choice(["{c}.sum()", "{c} * 2.0", "{c}.amax()"]).format(c=c.name), "fresh")


def _clone_only_written(b: BuilderState, c: Value, o: Value) -> None:
    """A write of the clone, which nothing reads."""
    write = b._choice(["{c}.add_(1.0)", "{c}.mul_({o})", "{c}.zero_()", "{c}.fill_(0.5)"])
    b._emit(write.format(c=c.name, o=o.name), "inplace", bind=False)


def _same_elements(b: BuilderState, c: Value, o: Value) -> None:
    """One node that reads and writes the same elements of the clone and of its original."""
    forms = ["{c}.mul_({o})", "{c}.add_({o})", "torch.mul({o}, 2.0, out={c})", "torch.add({o}, {c}, out={c})"]
    if o.writable:
        forms += ["{o}.add_({c})", "torch.mul({c}, 2.0, out={o})"]
    b._emit(b._choice(forms).format(c=c.name, o=o.name), "inplace", bind=b._bind_inplace())


def _copy_between(b: BuilderState, c: Value, o: Value) -> None:
    """A ``copy_`` between the clone and its original, half the time after a write of one side."""
    forms = ["{c}.copy_({o})"] + (["{o}.copy_({c})"] if o.writable else [])
    if b._int(0, 1):  # after a write of one side
        first = b._choice(["{c}.mul_(2.0)"] + (["{o}.add_(1.0)"] if o.writable else []))
        b._emit(first.format(c=c.name, o=o.name), "inplace", bind=False)
    b._emit(b._choice(forms).format(c=c.name, o=o.name), "inplace", bind=b._bind_inplace())


def _write_then_overwrite(b: BuilderState, c: Value, o: Value) -> None:
    """A write of one side, then a full overwrite of the other."""
    if not o.writable:
        raise Rejected("original not writable")
    written, other = b._choice([(c, o), (o, c)])
    b._emit(f"{written.name}.add_(1.0)", "inplace", bind=False)
    source = b._source_for(other, allow_same=False)
    forms = ["{x}.zero_()", "{x}.fill_(1.5)"] + (["{x}.copy_({s})"] if source is not None else [])
    b._emit(b._choice(forms).format(x=other.name, s=source.name if source else ""), "inplace", bind=False)


def _dead_index_put(b: BuilderState, c: Value, o: Value) -> None:
    """The clone written and read, then a dead indexing write of the original."""
    if not o.writable or o.tensor.dim() == 0:
        raise Rejected("original not writable, or a scalar")
    b._emit(f"{c.name}.mul_(2.0)", "inplace", bind=False)
    b._emit(f"{c.name}.neg()", "fresh")
    n0 = o.tensor.shape[0]
    index = f"(torch.arange(0, {n0}, 2),), torch.full((), 1.5), accumulate=True"
    b._emit(f"{o.name}.index_put_({index})", "inplace", bind=False)


def _two_dead_clones(b: BuilderState, c: Value, o: Value) -> None:
    """Two dead clones and a dead ``_to_copy`` candidate, reading what both groups share."""
    b._emit(b._choice(["{c}.add_(1.0)", "{c}.mul_(2.0)"]).format(c=c.name), "inplace", bind=False)
    b._emit(b._choice(["{c}.cumsum(0)", "{c} * 2.0"]).format(c=c.name), "fresh")
    value = b.values[-1].name
    b._emit(f"{o.name}.clone()", "clone", original=o.name)
    second = b.values[-1].name
    b._emit(f"{value}.to(torch.float64)", "fresh")
    out_op, operand = b._choice([("add", "1.0"), ("mul", "2.0")])
    b._emit(f"torch.{out_op}({value}, {operand}, out={second})", "inplace", bind=False)


#: The patterns, drawn by position (see the module docstring).
_PATTERNS: tuple[_Pattern, ...] = (
    _Pattern("unused layout-changing clone", _unused, layout_changing=True, read_after=False),
    _Pattern("layout-changing clone read", _layout_clone_read, layout_changing=True, read_after=False),
    _Pattern("dead read after a write of the original", _dead_read_after_write, read_after=False),
    _Pattern("clone only written", _clone_only_written, read_after=False),
    _Pattern("same elements read and written", _same_elements),
    _Pattern("copy between the clone and its original", _copy_between),
    _Pattern("write, then full overwrite of the other side", _write_then_overwrite),
    _Pattern("dead index_put_ of the original", _dead_index_put, read_after=False),
    _Pattern("two dead clones and a dead _to_copy", _two_dead_clones),
)


class PatternStatements(BuilderState):
    """Draws one of the patterns of :data:`_PATTERNS`."""

    def _draw_pattern(self, which: int | None = None) -> None:
        """A clone, then the pattern at position ``which`` of :data:`_PATTERNS` (drawn when ``None``),
        then maybe a read of one side of the clone pair."""
        if which is None:
            which = self._int(0, len(_PATTERNS) - 1)
        pattern = _PATTERNS[which]
        clone, original = self._pattern_clone(layout_changing=pattern.layout_changing)
        pattern.draw(self, clone, original)
        if pattern.read_after and self._int(0, 3) != 0:
            with self._aiming((clone if self._int(0, 1) else original).storage):
                self._draw_pointwise()

    def _pattern_clone(self, *, layout_changing: bool) -> tuple[Value, Value]:
        """Emit the clone a pattern starts with; return (the clone, its original)."""
        if layout_changing:
            strided = [v for v in self.values if not v.tensor.is_contiguous() and v.tensor.numel() > 1]
            if not strided:
                raise Rejected("no non-contiguous value")
            src = self._pick(strided)
            form = self._choice(["{x}.contiguous()", "{x}.clone(memory_format=torch.contiguous_format)"])
        else:
            src = self.values[-1] if self._int(0, 2) == 0 else self._pick(self.values)
            form = "{x}.clone()"
        self._emit(form.format(x=src.name), "clone", original=src.name)
        self._focus_off = False
        return self.values[-1], src
