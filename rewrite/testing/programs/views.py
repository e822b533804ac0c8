"""View statements: every view op the fuzzer draws (``view``, ``reshape``, slicing, ``select``,
``narrow``, ``split``, ``unbind``, ``chunk``, ``permute``, ``transpose``, ``t``, ``expand``,
``unsqueeze``, ``diagonal``, ``as_strided``, the custom ``first_half`` and ``_unsafe_view``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from aliasing.core.ops import HIDDEN_EFFECTS
from rewrite.testing.programs.aten_sample import pure_overloads, schema_call
from rewrite.testing.programs.state import BuilderState
from rewrite.testing.programs.values import MAX_RANK, Rejected, Value, compiled, shape_args, shape_tuple

#: ``_unsafe_view`` returns a view its schema calls a fresh tensor (drawn among the views).
_DRAW_UNSAFE_VIEW = HIDDEN_EFFECTS.get("aten::_unsafe_view") is not None


def _plain_tensors(result: object) -> bool:
    """Whether every tensor of a call's result is a strided CPU tensor of an ordinary dtype (what the
    program state can track: no sparse, quantized or meta results)."""
    results = result if isinstance(result, (list, tuple)) else (result,)
    return all(
        not isinstance(r, torch.Tensor)
        or (r.layout == torch.strided and r.device.type == "cpu" and not r.is_quantized and r.dtype.itemsize > 0)
        for r in results
    )


class ViewStatements(BuilderState):
    """Draws a view of a value: one of the view ops that apply to its rank."""

    def _draw_view(self) -> None:
        x = self._pick(self.values)
        shape = x.shape
        rank = len(shape)
        options: list[Callable[[Value], str]] = [self._view_unsqueeze] if rank < MAX_RANK else []
        if rank >= 1:
            options += [
                self._view_view,
                self._view_reshape,
                self._view_slice,
                self._view_select,
                self._view_narrow,
                self._view_split,
                self._view_unbind,
                self._view_chunk,
                self._view_permute,
                self._view_as_strided,
                self._view_expand,
            ]
            if self.allow_custom_ops:
                options.append(self._view_custom)
            if self.allow_hidden_effects and _DRAW_UNSAFE_VIEW:
                options.append(self._view_unsafe_view)
            if self.allow_untrusted_ops:
                options += [self._view_dtype, self._view_untrusted, self._view_unsafe_split]
                options += [self._aten_sample] * 3
        if rank >= 2:
            options += [self._view_transpose, self._view_diagonal]
        if rank <= 2:
            options.append(self._view_t)
        if not options:
            raise Rejected("no view applies")
        self._emit(self._choice(options)(x), "view")

    def _dim(self, x: Value) -> int:
        return self._int(0, x.tensor.dim() - 1)

    def _view_view(self, x: Value) -> str:
        return f"{x.name}.view({self._new_shape(x)})"

    def _view_reshape(self, x: Value) -> str:
        return f"{x.name}.reshape({self._new_shape(x)})"

    def _new_shape(self, x: Value) -> str:
        shape = list(x.shape)
        how = self._int(0, 2)
        if how == 0 or len(shape) == 1:
            return "-1"
        if how == 1:  # merge two adjacent dimensions
            d = self._int(0, len(shape) - 2)
            new = shape[:d] + [shape[d] * shape[d + 1]] + shape[d + 2 :]
        else:  # split a dimension into two factors, or add a size-1 dimension
            d = self._dim(x)
            factors = [f for f in range(1, shape[d] + 1) if shape[d] % f == 0]
            f = self._choice(factors)
            new = shape[:d] + [f, shape[d] // f] + shape[d + 1 :]
            if len(new) > MAX_RANK:
                raise Rejected("rank")
        return shape_tuple(new)

    def _view_slice(self, x: Value) -> str:
        d = self._dim(x)
        size = x.shape[d]
        start = self._int(0, size - 1)
        stop = self._int(start + 1, size)
        step = self._int(1, 2)
        index = ", ".join([":"] * d + [f"{start}:{stop}" + (f":{step}" if step != 1 else "")])
        return f"{x.name}[{index}]"

    def _view_select(self, x: Value) -> str:
        d = self._dim(x)
        i = self._int(0, x.shape[d] - 1)
        return f"{x.name}.select({d}, {i})" if self._int(0, 1) else f"{x.name}[{', '.join([':'] * d + [str(i)])}]"

    def _view_narrow(self, x: Value) -> str:
        d = self._dim(x)
        size = x.shape[d]
        start = self._int(0, size - 1)
        return f"{x.name}.narrow({d}, {start}, {self._int(1, size - start)})"

    def _view_split(self, x: Value) -> str:
        d = self._dim(x)
        return f"{x.name}.split({self._int(1, x.shape[d])}, {d})"

    def _view_unbind(self, x: Value) -> str:
        return f"{x.name}.unbind({self._dim(x)})"

    def _view_chunk(self, x: Value) -> str:
        d = self._dim(x)
        return f"torch.chunk({x.name}, {self._int(1, x.shape[d])}, {d})"

    def _view_permute(self, x: Value) -> str:
        perms = list(itertools.permutations(range(x.tensor.dim())))
        return f"{x.name}.permute{self._choice(perms)!r}".replace(",)", ")")

    def _view_transpose(self, x: Value) -> str:
        d1 = self._dim(x)
        d2 = self._dim(x)
        return f"{x.name}.transpose({d1}, {d2})"

    def _view_t(self, x: Value) -> str:
        return f"{x.name}.t()"

    def _view_expand(self, x: Value) -> str:
        shape = list(x.shape)
        if self._int(0, 1) == 0 and 1 in shape:
            new = [self._int(1, self.max_size) if s == 1 else s for s in shape]
        elif len(shape) < MAX_RANK:
            new = [self._int(1, 4)] + shape
        else:
            raise Rejected("rank")
        return f"{x.name}.expand({shape_args(new)})"

    def _view_unsqueeze(self, x: Value) -> str:
        return f"{x.name}.unsqueeze({self._int(0, x.tensor.dim())})"

    def _view_diagonal(self, x: Value) -> str:
        rank = x.tensor.dim()
        d1 = self._int(0, rank - 1)
        d2 = self._choice([d for d in range(rank) if d != d1])
        n1, n2 = x.shape[d1], x.shape[d2]
        offset = self._int(-(n1 - 1), n2 - 1)
        return f"{x.name}.diagonal({offset}, {d1}, {d2})"

    def _view_custom(self, x: Value) -> str:
        self.uses_custom_ops = True
        return f"torch.ops.fxa_fuzz.first_half({x.name})"

    def _view_unsafe_view(self, x: Value) -> str:
        shape = self._new_shape(x)
        return f"torch.ops.aten._unsafe_view({x.name}, {'(-1,)' if shape == '-1' else shape})"

    def _view_dtype(self, x: Value) -> str:
        """A dtype view (same element size): float32 <-> int32, anywhere in a chain of views."""
        dtype = x.tensor.dtype
        if dtype == torch.float32:
            return f"{x.name}.view(torch.int32)"
        if dtype == torch.int32:
            return f"{x.name}.view(torch.float32)"
        raise Rejected("no dtype view of the same element size")

    def _view_untrusted(self, x: Value) -> str:
        """An op whose schema declares a fresh result but that returns its argument or a view of it
        (CompositeImplicit ops that torch.export keeps; dequantize's CPU kernel on a float tensor)."""
        shape, rank = x.shape, x.tensor.dim()
        forms = [
            f"torch.atleast_2d({x.name})",
            f"torch.atleast_3d({x.name})",
            f"{x.name}.sum_to_size({shape_args(shape)})",
            f"torch.broadcast_tensors({x.name}, {x.name})[{self._int(0, 1)}]",
            f"torch.conj_physical({x.name})",
            f"{x.name}.to_dense()",
            f"torch.dequantize({x.name})",
        ]
        if rank == 2:
            forms.append(f"torch.einsum('ij->ji', {x.name})")
        if rank == 1:
            forms += [f"torch.einsum('i->i', {x.name})", f"torch.cartesian_prod({x.name})"]
        return self._choice(forms)

    def _aten_sample(self, x: Value) -> str:
        """A call of a random ATen overload of the registry's ``pure`` ones (:mod:`.aten_sample`)."""
        overloads = pure_overloads()
        for _ in range(8):  # most overloads take no such arguments: try a few (each call run on the real state)
            call = schema_call(overloads[self._int(0, len(overloads) - 1)], x.name, x.tensor, lambda: self._pick(self.values).name)
            if call is None:
                continue
            try:
                result = eval(compiled(call, "<fxa_fuzz>", "eval"), dict(self.env))
            except Exception:
                continue
            if _plain_tensors(result):
                return call
        raise Rejected("no overload drawn runs with arguments made from its schema")

    def _view_unsafe_split(self, x: Value) -> str:
        """``unsafe_split`` and ``unsafe_chunk``: views their schemas do not declare."""
        d = self._dim(x)
        k = self._int(1, x.shape[d])
        if self._int(0, 1):
            return f"torch.ops.aten.unsafe_split({x.name}, {k}, {d})"
        return f"torch.unsafe_chunk({x.name}, {k}, {d})"

    def _view_as_strided(self, x: Value) -> str:
        t = x.tensor
        if self._int(0, 3) == 0 and t.dim() == 1 and t.shape[0] >= 2:  # overlapping sliding windows
            k = self._int(1, t.shape[0] - 1)
            size: tuple[int, ...] = (t.shape[0] - k + 1, k)
            stride: tuple[int, ...]
            stride = (t.stride(0), t.stride(0))
            offset = t.storage_offset()
        else:  # a box inside x, dimensions in any order
            starts = [self._int(0, n - 1) for n in t.shape]
            sizes = [self._int(1, n - s) for n, s in zip(t.shape, starts)]
            offset = t.storage_offset() + sum(s * st_ for s, st_ in zip(starts, t.stride()))
            order = self._choice(list(itertools.permutations(range(t.dim()))))
            size = tuple(sizes[i] for i in order)
            stride = tuple(t.stride()[i] for i in order)
        return f"{x.name}.as_strided({shape_tuple(size)}, {shape_tuple(stride)}, {offset})"
