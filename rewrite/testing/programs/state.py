"""The statement builder's state and the drawing primitives every kind of statement uses.

:class:`BuilderState` holds a program being drawn: its statements so far, the
real tensors they made (each statement runs on real tensors as it is drawn, and
a statement the tensors reject is dropped) and the clone pairs later statements
aim at. The statement kinds (views, writes, norms, patterns) are mixins over it,
put together by :class:`rewrite.testing.programs.builder.ProgramBuilder`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import hypothesis.strategies as st
import torch

from rewrite.testing.programs.values import (
    MAX_RANK,
    Rejected,
    Value,
    broadcast,
    broadcasts_to,
    compiled,
    integers,
    storage_elements,
)

_T = TypeVar("_T")


def _bindable(value: object) -> bool:
    """A plain strided tensor whose storage can be read (not a list, not a functorch-wrapped tensor)."""
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return False
    try:
        value.untyped_storage()
    except (NotImplementedError, RuntimeError):
        return False
    return True


class BuilderState:
    """A program being drawn, with the helpers that draw operands and emit statements.

    The attributes are set by :class:`~rewrite.testing.programs.builder.ProgramBuilder`.
    """

    max_lines: int
    draw: st.DrawFn
    kinds: tuple[tuple[str, int], ...]
    allow_custom_ops: bool
    allow_hidden_effects: bool
    allow_untrusted_ops: bool
    alias_bias: float
    max_size: int
    inputs_source: str
    input_names: list[str]
    lines: list[str]
    clones: list[tuple[str, str]]  # (clone, original)
    uses_custom_ops: bool
    counter: int
    env: dict[str, Any]
    values: list[Value]
    _history: list[tuple[str, tuple[str, ...], str]]
    _aim: int | None  # storage that operand picks must use while set (hazards)
    _focus_off: bool  # no aiming at the last clone pair (set after some hazards)

    # -- state ------------------------------------------------------------ #

    def _reset(self) -> None:
        namespace: dict[str, Any] = {"torch": torch}
        exec(compiled(self.inputs_source, "<fxa_fuzz inputs>", "exec"), namespace)
        inputs = namespace["make_inputs"]()
        self.env = {"torch": torch}
        self.values = []
        for name, tensor in zip(self.input_names, inputs):
            self._bind(name, "input", tensor)

    def _replay(self) -> None:
        """Rebuild the real state after a rejected statement may have half-run."""
        self._reset()
        for line, names, kind in self._history:
            result = eval(compiled(line, "<fxa_fuzz>", "eval"), self.env)
            self._bind_result(names, kind, result)

    def _bind(self, name: str, kind: str, tensor: torch.Tensor) -> None:
        self.env[name] = tensor
        storage = tensor.untyped_storage().data_ptr()
        self.values.append(Value(name, kind, tensor, storage_elements(tensor), storage))

    def _bind_result(self, names: tuple[str, ...], kind: str, result: Any) -> None:
        bound = [result] if isinstance(result, torch.Tensor) else list(result)[: len(names)] if names else []
        if not all(_bindable(t) for t in bound):  # a list in a tuple, a functorch-wrapped tensor...
            raise Rejected("a result that is not a plain tensor")
        if isinstance(result, torch.Tensor):
            if names:
                self._bind(names[0], kind, result)
        elif names:
            for name, tensor in zip(names, result):
                self._bind(name, kind, tensor)

    def _fresh_names(self, n: int) -> tuple[str, ...]:
        names = tuple(f"v{self.counter + i}" for i in range(n))
        self.counter += n
        return names

    # -- drawing helpers -------------------------------------------------- #

    def _int(self, lo: int, hi: int) -> int:
        if hi < lo:  # a zero-size dimension: nothing to index, slice or split
            raise Rejected("an empty range")
        return self.draw(integers(lo, hi))

    def _choice(self, options: Sequence[_T]) -> _T:
        return options[self._int(0, len(options) - 1)]

    def _biased(self) -> bool:
        """True with probability ``alias_bias`` (shrinks toward True when bias > 0)."""
        return self._int(0, 99) < round(self.alias_bias * 100)

    def _focus(self) -> list[int]:
        """Storages of the most recent clone and of its original (the pair statements aim at)."""
        if not self.clones or self._focus_off:
            return []
        by_name = {v.name: v for v in self.values}
        clone, original = self.clones[-1]
        return [by_name[clone].storage, by_name[original].storage]

    def _pick(self, candidates: Sequence[Value]) -> Value:
        """Pick a candidate; with probability ``alias_bias``, one living with the focused clone or its original."""
        if not candidates:
            raise Rejected("no candidate")
        if self._aim is not None:
            aimed = [v for v in candidates if v.storage == self._aim]
            if aimed:
                return self._choice(aimed)
        focus = self._focus()
        if focus and self._biased():
            side = focus[self._int(0, 1)]
            preferred = [v for v in candidates if v.storage == side]
            if preferred:
                return self._choice(preferred)
        return self._choice(candidates)

    def _source_for(
        self, dst: Value, *, shape: Sequence[int] | None = None, allow_same: bool = True
    ) -> Value | None:
        """A value readable while writing ``dst``: broadcastable, disjoint from (or identical to) it."""
        target = dst.shape if shape is None else tuple(shape)
        ok = [
            v
            for v in self.values
            if broadcasts_to(v.shape, target)
            and (
                v.storage != dst.storage
                or not (v.elements & dst.elements)
                or (allow_same and self._same_or_disjoint(v, dst))
            )
        ]
        if not ok:
            return None
        return self._pick(ok)

    @staticmethod
    def _same_or_disjoint(a: Value, b: Value) -> bool:
        if a.storage != b.storage:
            return True
        same = (
            a.tensor.storage_offset() == b.tensor.storage_offset()
            and a.tensor.shape == b.tensor.shape
            and a.tensor.stride() == b.tensor.stride()
        )
        return same or not (a.elements & b.elements)

    @contextlib.contextmanager
    def _aiming(self, storage: int) -> Iterator[None]:
        """Operand picks of the block use ``storage`` where a candidate lives there."""
        self._aim = storage
        try:
            yield
        finally:
            self._aim = None

    # -- statements every kind uses ----------------------------------------- #

    def _emit(self, expr: str, kind: str, *, bind: bool = True, original: str = "") -> None:
        """Execute ``expr`` on the real state, then record it (binding its tensors to new names).

        ``original`` names the value a ``"clone"`` statement copies.
        """
        if len(self.lines) >= self.max_lines:
            raise Rejected("program is long enough")
        try:
            result = eval(compiled(expr, "<fxa_fuzz>", "eval"), self.env)
        except Exception as err:
            self._replay()
            raise Rejected(str(err)) from err
        names: tuple[str, ...] = ()
        if bind and isinstance(result, torch.Tensor):
            names = self._fresh_names(1)
            line = f"{names[0]} = {expr}"
        elif bind and isinstance(result, (tuple, list)) and result:
            names = self._fresh_names(len(result))
            line = f"({', '.join(names)},) = {expr}" if len(names) == 1 else f"{', '.join(names)} = {expr}"
        else:
            line = expr
        self._bind_result(names, kind, result)
        self._history.append((expr, names, kind))
        self.lines.append(line)
        if kind == "clone":
            self.clones.append((names[0], original))

    def _draw_clone(self, src: Value | None = None) -> None:
        """A clone (``aten.clone`` with or without ``memory_format``, or a no-op ``_to_copy``) of ``src``.

        By default ``src`` is the last value made (chains such as ``y = x * 2;
        c = y.clone()``) or any value.
        """
        if src is None:
            src = self.values[-1] if self._int(0, 2) == 0 else self._pick(self.values)
        forms = ["{x}.clone()", "{x}.clone()", "{x}.clone()", "torch.clone({x})"]
        forms += ["{x}.clone(memory_format=torch.contiguous_format)"]
        forms += ["{x}.clone(memory_format=torch.preserve_format)", "{x}.to(torch.float32, copy=True)"]
        if src.tensor.dim() == 4:
            forms.append("{x}.clone(memory_format=torch.channels_last)")
        if not src.tensor.is_contiguous():
            forms.append("{x}.contiguous()")
        self._emit(self._choice(forms).format(x=src.name), "clone", original=src.name)
        self._focus_off = False

    def _draw_pointwise(self) -> None:
        """A fresh value made by a pointwise op of one value, or of two that broadcast together."""
        a = self._pick(self.values)
        if self._int(0, 1) == 0:
            # Mostly ops that keep information, so that a wrong value shows in the outputs.
            form = self._choice(["{a} + 1.0", "{a} * 2.0", "torch.sin({a})", "{a}.neg()", "torch.relu({a})"])
            self._emit(form.format(a=a.name), "fresh")
            return
        partners = [v for v in self.values if broadcast(v.shape, a.shape) is not None]
        partners = [v for v in partners if len(broadcast(v.shape, a.shape) or ()) <= MAX_RANK]
        b = self._pick(partners)
        same = b.tensor is a.tensor or (b.storage == a.storage and b.elements == a.elements)
        forms = ["{a} + {b}", "{a} * {b}"] + ([] if same else ["torch.sub({a}, {b})"])
        form = self._choice(forms)
        self._emit(form.format(a=a.name, b=b.name), "fresh")

    def _writable(self) -> Value:
        """A value without internal overlap, to write in place."""
        return self._pick([v for v in self.values if v.writable])

    def _bind_inplace(self) -> bool:
        """Whether an in-place statement also binds its result to a new name (one time in three)."""
        return self._int(0, 2) == 2
