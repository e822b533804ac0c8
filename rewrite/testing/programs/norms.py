"""Normalisation statements with running statistics: ops with effects their schemas do not declare.

``batch_norm`` and ``instance_norm`` in train mode update their running
statistics in place (the entries of
:data:`aliasing.core.ops.HIDDEN_EFFECTS`), and in eval mode only read
them (the control). The statistics are program values (inputs, views of them,
clones, intermediates), and are often cloned just before the norm, with the
clone or its original read after it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aliasing.core.ops import HIDDEN_EFFECTS
from rewrite.testing.programs.state import BuilderState
from rewrite.testing.programs.values import Rejected, Value, compiled, shape_tuple, storage_elements


@dataclass(frozen=True)
class _NormCall:
    """A normalisation call with running statistics, whose traced graph has a hidden write.

    ``effect`` is the :data:`~aliasing.core.ops.HIDDEN_EFFECTS` entry
    whose effect the call has (``F.batch_norm`` traces to
    ``aten.native_batch_norm``; ``F.instance_norm`` to its decomposition,
    ``native_batch_norm`` on repeated statistics and a ``copy_`` back).
    ``template`` has the fields ``x``, ``rm``, ``rv``, ``w``, ``b``, ``t`` (the
    literal ``training``/``use_input_stats`` flag: ``False`` is the control,
    no hidden write) and ``m`` (momentum). ``instance``: statistics per sample
    and channel, so the input needs a spatial dimension.
    """

    effect: str
    template: str
    instance: bool = False


#: The norm calls drawn (the functional forms twice, as weights), each kept only while
#: its table entry says it writes running statistics.
NORM_CALLS: tuple[_NormCall, ...] = tuple(
    call
    for call in (
        _NormCall(
            "aten::native_batch_norm",
            "torch.nn.functional.batch_norm({x}, {rm}, {rv}, {w}, {b}, training={t}, momentum={m})",
        ),
        _NormCall(
            "aten::native_batch_norm",
            "torch.nn.functional.batch_norm({x}, {rm}, {rv}, {w}, {b}, training={t}, momentum={m})",
        ),
        _NormCall(
            "aten::native_batch_norm",
            "torch.ops.aten.native_batch_norm({x}, {w}, {b}, {rm}, {rv}, {t}, {m}, 1e-05)[0]",
        ),
        _NormCall(
            "aten::instance_norm",
            "torch.nn.functional.instance_norm({x}, {rm}, {rv}, {w}, {b}, use_input_stats={t}, momentum={m})",
            instance=True,
        ),
        _NormCall(
            "aten::instance_norm",
            "torch.nn.functional.instance_norm({x}, {rm}, {rv}, {w}, {b}, use_input_stats={t}, momentum={m})",
            instance=True,
        ),
    )
    if call.effect in HIDDEN_EFFECTS and "running_mean" in HIDDEN_EFFECTS[call.effect].writes
)


class NormStatements(BuilderState):
    """Draws a norm call, its running statistics, its input and its affine parameters."""

    norm_calls: tuple[_NormCall, ...]

    @staticmethod
    def _disjoint(v: Value, others: Sequence[Value]) -> bool:
        return all(o.storage != v.storage or not (o.elements & v.elements) for o in others)

    def _aimed(self, candidates: Sequence[Value]) -> bool:
        """Whether ``candidates`` satisfy the current aim (no aim, or one of them lives there)."""
        return self._aim is None or any(v.storage == self._aim for v in candidates)

    def _draw_norm(self) -> None:
        """``batch_norm`` / ``instance_norm`` with running statistics that are program values.

        In train mode (three times in four) the norm writes its running
        statistics in place, a write its schema does not declare; in eval mode
        it only reads them. Unless a hazard aims this statement at a clone
        pair, two times in three one statistic is cloned just before the norm,
        the norm gets the clone or the original, and one side is read after it.
        """
        call: _NormCall = self._choice(self.norm_calls)
        training = self._int(0, 3) != 0
        hazard = self._aim is None and self._int(0, 2) != 0
        rm = self._norm_stat(None, training, avoid=())
        try:
            rv = self._norm_stat(rm.shape[0], training, avoid=(rm,))
        except Rejected:  # no vector fits: a clone of the running mean (both are then written)
            self._draw_clone(rm)
            rv = self.values[-1]
        stats = [rm, rv]
        written: Value | None = None  # the side of the clone pair the norm gets
        other: Value | None = None  # the side it does not get
        if hazard:
            which = self._int(0, 1)
            self._draw_clone(stats[which])
            clone = self.values[-1]
            written, other = (clone, stats[which]) if self._int(0, 1) else (stats[which], clone)
            stats[which] = written
        channels = rm.shape[0]
        x = self._norm_input(call, channels, training, avoid=stats)
        weight = self._norm_affine(channels, training, avoid=stats)
        bias = self._norm_affine(channels, training, avoid=stats)
        var = stats[1].name
        if not training and bool((stats[1].tensor < 0).any()):  # eval mode divides by sqrt(running_var)
            var = f"{var}.abs()"  # keep NaN out of the outputs: it would hide differences
        expr = call.template.format(
            x=x.name,
            rm=stats[0].name,
            rv=var,
            w=weight,
            b=bias,
            t=training,
            m=self._choice(["0.1", "0.5"]),
        )
        self._emit(expr, "fresh")
        if written is not None and other is not None and self._int(0, 3) != 0:
            # Read a side after the norm: mostly the one it did not get (the clone while
            # the original was written, or the original while the clone was written).
            with self._aiming((other if self._int(0, 3) != 0 else written).storage):
                self._draw_pointwise()

    def _norm_stat(self, length: int | None, training: bool, avoid: Sequence[Value]) -> Value:
        """A vector for a running statistic: an existing one, or a new 1-D view of a value.

        In train mode it is written, so it must have no internal overlap and be
        disjoint from ``avoid`` (the other statistic).
        """

        def fits(v: Value) -> bool:
            if v.tensor.dim() != 1 or (length is not None and v.shape[0] != length):
                return False
            return not training or (v.writable and self._disjoint(v, avoid))

        ok = [v for v in self.values if fits(v)]
        if ok and self._aimed(ok) and self._int(0, 2) != 0:
            return self._pick(ok)
        need = 1 if length is None else length
        bases = [v for v in self.values if any(n >= need for n in v.shape)]
        for _ in range(3):  # a few tries at a view that fits, before emitting one
            base = self._pick(bases)
            keep = self._choice([d for d, n in enumerate(base.shape) if n >= need])
            parts: list[str] = []
            for d, n in enumerate(base.shape):
                if d != keep:
                    parts.append(str(self._int(0, n - 1)))
                elif length is None or n == length:
                    parts.append(":")
                else:
                    start = self._int(0, n - length)
                    parts.append(f"{start}:{start + length}")
            expr = f"{base.name}[{', '.join(parts)}]"
            view = eval(compiled(expr, "<fxa_fuzz>", "eval"), self.env)  # a view: no side effect
            if fits(Value("", "view", view, storage_elements(view), view.untyped_storage().data_ptr())):
                self._emit(expr, "view")
                return self.values[-1]
        raise Rejected("no running statistic fits")

    def _norm_input(self, call: _NormCall, channels: int, training: bool, avoid: Sequence[Value]) -> Value:
        """An input ``(N, C, ...)`` for the norm: an existing value, or a reshape or expand of one.

        In train mode it needs more than one value per statistic and must not
        overlap the statistics (it is read while they are written).
        """
        if channels <= 0:
            raise Rejected("statistics of a zero-size dimension")

        def enough(shape: Sequence[int]) -> bool:
            per = math.prod(shape[2:]) if call.instance else math.prod(shape) // channels
            return not training or per > 1

        def fits(v: Value) -> bool:
            rank_ok = v.tensor.dim() >= (3 if call.instance else 2)
            return (
                rank_ok
                and v.shape[1] == channels
                and enough(v.shape)
                and (not training or self._disjoint(v, avoid))
            )

        ok = [v for v in self.values if fits(v)]
        if ok and self._aimed(ok) and self._int(0, 2) != 0:
            return self._pick(ok)
        readable = [v for v in self.values if not training or self._disjoint(v, avoid)]
        vectors = [v for v in readable if v.shape == (channels,)]
        bases = [v for v in readable if v.tensor.numel() % channels == 0 and v.tensor.numel() // channels >= 2]
        if vectors and (not bases or self._int(0, 3) == 0):  # a batch of one repeated vector
            v = self._pick(vectors)
            n = self._int(2, 4) if training and not call.instance else self._int(1, 4)
            if call.instance:
                self._emit(f"{v.name}.unsqueeze(1).expand({n}, {channels}, {self._int(2, 4)})", "view")
            else:
                self._emit(f"{v.name}.expand({n}, {channels})", "view")
        else:
            v = self._pick(bases)
            rest = v.tensor.numel() // channels
            if call.instance or self._int(0, 1):
                k = self._choice([f for f in range(2 if call.instance else 1, rest + 1) if rest % f == 0])
                shape = shape_tuple((rest // k, channels, k))
            else:
                shape = f"(-1, {channels})"
            self._emit(f"{v.name}.reshape({shape})", "view")
        made = self.values[-1]
        if not fits(made):
            raise Rejected("norm input does not fit")
        return made

    def _norm_affine(self, channels: int, training: bool, avoid: Sequence[Value]) -> str:
        """``None`` or a vector of ``channels`` values (read; in train mode disjoint from the statistics)."""
        if self._int(0, 1) == 0:
            return "None"
        ok = [v for v in self.values if v.shape == (channels,) and (not training or self._disjoint(v, avoid))]
        return self._pick(ok).name if ok else "None"
