"""Write statements: in-place ops (``add_``, ``mul_``, ``copy_``, ``zero_``, ``fill_``,
``index_put_``, ``masked_fill_``), ``out=`` by keyword, and the custom op that writes two arguments.

Every write reads memory that is either disjoint from what it writes or exactly
the same tensor region, so results never depend on iteration order.
"""

from __future__ import annotations

from rewrite.testing.programs.state import BuilderState
from rewrite.testing.programs.values import Rejected, broadcast


class WriteStatements(BuilderState):
    """Draws a write of a value without internal overlap."""

    def _draw_inplace(self) -> None:
        dst = self._writable()
        # add_ twice as often as the others: it keeps information, so wrong values show.
        op = max(self._int(-1, 5), 0)
        d = dst.name
        if op == 0:  # add_
            src = self._source_for(dst)
            if src is None or self._int(0, 2) == 0:
                expr = f"{d}.add_(1.0)"
            else:
                expr = f"{d}.add_({src.name}" + (", alpha=2.0)" if self._int(0, 1) else ")")
        elif op == 1:  # mul_
            src = self._source_for(dst)
            expr = f"{d}.mul_(-0.5)" if src is None or self._int(0, 2) == 0 else f"{d}.mul_({src.name})"
        elif op == 2:  # copy_
            src = self._source_for(dst)
            if src is None:
                raise Rejected("no source")
            expr = f"{d}.copy_({src.name})"
        elif op == 3:
            expr = f"{d}.zero_()" if self._int(0, 1) == 0 else f"{d}.fill_(0.75)"
        elif op == 4:  # index_put_ along dim 0
            if dst.tensor.dim() == 0:
                raise Rejected("rank")
            n = dst.shape[0]
            start = self._int(0, n - 1)
            step = self._int(1, 2)
            count = len(range(start, n, step))
            src = self._source_for(dst, shape=(count, *dst.shape[1:]), allow_same=False)
            values = "torch.full((), 1.5)" if src is None or self._int(0, 2) == 0 else src.name
            accumulate = ", accumulate=True" if self._int(0, 1) else ""
            expr = f"{d}.index_put_((torch.arange({start}, {n}, {step}),), {values}{accumulate})"
        else:  # masked_fill_ with a mask computed from a value (possibly dst itself)
            mask = self._source_for(dst)
            if mask is None:
                raise Rejected("no mask source")
            expr = f"{d}.masked_fill_({mask.name} > 0, 0.25)"
        self._emit(expr, "inplace", bind=self._bind_inplace())

    def _draw_out(self) -> None:
        dst = self._writable()
        a = self._source_for(dst)
        if a is None:
            raise Rejected("no source")
        b = self._source_for(dst)
        op = self._choice(["add", "mul"])
        scalar = b is None or self._int(0, 2) == 0
        operand = ("1.0" if op == "add" else "2.0") if scalar or b is None else b.name
        if broadcast(a.shape, () if scalar or b is None else b.shape) != dst.shape:
            raise Rejected("out= shape")
        self._emit(f"torch.{op}({a.name}, {operand}, out={dst.name})", "inplace", bind=self._bind_inplace())

    def _draw_custom(self) -> None:
        a = self._writable()
        b = self._pick([v for v in self.values if v.writable and (v.storage != a.storage or not (v.elements & a.elements))])
        self.uses_custom_ops = True
        self._emit(f"torch.ops.fxa_fuzz.mutate_two({a.name}, {b.name}, {self._choice([2.0, -1.0])})", "inplace", bind=False)
