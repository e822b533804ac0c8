"""Random aliasing-heavy programs as a Hypothesis strategy, and a fuzzer for FX passes.

:func:`programs` draws straight-line PyTorch programs built from exactly what
alias analyses and clone elimination get wrong: views of every kind
(``view``, ``reshape``, ``slice``, ``select``, ``narrow``, ``split``,
``unbind``, ``chunk``, ``transpose``, ``permute``, ``t``, ``expand``,
``unsqueeze``, ``diagonal``, ``as_strided``), in-place ops (``add_``,
``mul_``, ``copy_``, ``zero_``, ``index_put_``, ``masked_fill_``, ``out=`` by
keyword), custom ops with alias annotations (one writes two arguments, one
returns a view), ops with effects their schemas do not declare (the
entries of :data:`aliasing.core.hidden_effects.HIDDEN_EFFECTS` that ``make_fx``
traces: normalisation layers with running statistics, ``batch_norm`` and
``instance_norm`` in train mode, which update the statistics in place, and
in eval mode as a control; ``_unsafe_view``), ``clone`` with and without
``memory_format`` and no-op ``_to_copy``, pointwise ops that make fresh
values, contiguous and non-contiguous inputs, donated inputs, outputs that
are views, repeated outputs and dead values. Running statistics are program
values (inputs, views of them, clones, intermediates), and are often cloned
before the norm and the clone or its original read after it.

Each program is Python source first: the function is compiled from the same
text that :meth:`Program.source` returns, so a failing example pastes into a
bug report and runs. While drawing, every statement is executed on real
tensors, and a statement is only kept when it is valid there: shapes fit,
written tensors have no internal overlap (no ``expand``-ed destinations), and
the memory an op reads is either disjoint from the memory it writes or
exactly the same tensor region (so results never depend on iteration order).

:func:`check_pass` runs any pass on a copy of a drawn program and checks the
soundness clauses with :func:`rewrite.testing.check_equivalent` (outputs
bitwise, input mutations, no new aliasing, the same raises, the RNG state).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import itertools
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

import hypothesis.strategies as st
import torch
import torch.fx
from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument
from torch.fx.experimental.proxy_tensor import make_fx

from aliasing.core.hidden_effects import HIDDEN_EFFECTS
from rewrite.errors import NotEquivalent, RewriteError
from rewrite.testing.equivalence import OracleError, check_equivalent, copy_program, quiet_torch_trace

__all__ = [
    "CI_SETTINGS",
    "CUSTOM_OPS_SOURCE",
    "FUZZ_NAMESPACE",
    "FUZZ_SETTINGS",
    "SOAK_SETTINGS",
    "Program",
    "check_pass",
    "programs",
    "register_profiles",
]

_T = TypeVar("_T")

#: Library namespace of the fuzzer's custom ops.
FUZZ_NAMESPACE = "fxa_fuzz"

#: Definitions of the fuzzer's custom ops. The library runs exactly this text,
#: and :meth:`Program.source` embeds it, so a repro behaves as the fuzzer did.
#: ``mutate_two`` writes both tensor arguments (``mutates_args=("a", "b")``);
#: ``first_half`` returns a view of its argument (``Tensor(a) -> Tensor(a)``),
#: which ``custom_op`` forbids, hence a ``torch.library.Library`` definition.
CUSTOM_OPS_SOURCE = '''\
# Custom ops of the fx-aliasing fuzzer (namespace fxa_fuzz), defined once per process.
if not hasattr(torch.ops.fxa_fuzz, "mutate_two"):

    @torch.library.custom_op("fxa_fuzz::mutate_two", mutates_args=("a", "b"))
    def fxa_fuzz_mutate_two(a: torch.Tensor, b: torch.Tensor, alpha: float) -> None:
        """Write both arguments in place: a += alpha, then b *= alpha."""
        a.add_(alpha)
        b.mul_(alpha)

    @fxa_fuzz_mutate_two.register_fake
    def _(a: torch.Tensor, b: torch.Tensor, alpha: float) -> None:
        return None

if not hasattr(torch.ops.fxa_fuzz, "first_half"):
    FXA_FUZZ_LIB = torch.library.Library("fxa_fuzz", "FRAGMENT")  # keep alive: deleting it unregisters
    FXA_FUZZ_LIB.define("first_half(Tensor(a) x) -> Tensor(a)")

    def fxa_fuzz_first_half(x: torch.Tensor) -> torch.Tensor:
        """The first half (rounded up) of dimension 0, as a view of x."""
        return x.narrow(0, 0, (x.size(0) + 1) // 2)

    FXA_FUZZ_LIB.impl("first_half", fxa_fuzz_first_half, "CompositeExplicitAutograd")
    FXA_FUZZ_LIB.impl("first_half", fxa_fuzz_first_half, "Meta")
'''

_CUSTOM_OPS_NAMESPACE: dict[str, Any] = {"torch": torch}
exec(compile(CUSTOM_OPS_SOURCE, "<fxa_fuzz custom ops>", "exec"), _CUSTOM_OPS_NAMESPACE)

_HEADER = "import torch\nfrom torch.fx.experimental.proxy_tensor import make_fx\n"

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


# --------------------------------------------------------------------------- #
# Program
# --------------------------------------------------------------------------- #


class Program:
    """One drawn program: its source, its traced graph and a way to make inputs.

    Attributes
    ----------
    graph_module : torch.fx.GraphModule
        The program traced by ``make_fx(fn, tracing_mode=tracing_mode)``: every
        tensor node's ``meta['val']`` is a fake tensor (with symbolic sizes in
        ``"symbolic"`` mode). Passes should rewrite a
        copy (:func:`check_pass` makes one).
    donated_inputs : tuple[int, ...]
        Placeholder positions of inputs the caller gives up.
    seed : int
        Seed of the input values.
    num_ops : int
        Statements in the function body.
    function_source : str
        The ``def program(...)`` text.
    inputs_source : str
        The ``def make_inputs()`` text.
    tracing_mode : str
        ``"fake"`` or ``"symbolic"``: how :attr:`graph_module` was traced.
    """

    __slots__ = (
        "_fn",
        "_make_inputs",
        "donated_inputs",
        "function_source",
        "graph_module",
        "inputs_source",
        "num_ops",
        "seed",
        "tracing_mode",
        "uses_custom_ops",
    )

    graph_module: torch.fx.GraphModule
    donated_inputs: tuple[int, ...]
    seed: int
    num_ops: int
    function_source: str
    inputs_source: str
    uses_custom_ops: bool
    tracing_mode: str

    def __init__(
        self,
        *,
        function_source: str,
        inputs_source: str,
        donated_inputs: tuple[int, ...],
        seed: int,
        num_ops: int,
        uses_custom_ops: bool,
        tracing_mode: str = "fake",
    ) -> None:
        namespace: dict[str, Any] = {"torch": torch}
        exec(compile(function_source + "\n" + inputs_source, "<fxa_fuzz program>", "exec"), namespace)
        self._fn: Callable[..., Any] = namespace["program"]
        self._make_inputs: Callable[[], list[torch.Tensor]] = namespace["make_inputs"]
        self.function_source = function_source
        self.inputs_source = inputs_source
        self.donated_inputs = donated_inputs
        self.seed = seed
        self.num_ops = num_ops
        self.uses_custom_ops = uses_custom_ops
        self.tracing_mode = tracing_mode
        self.graph_module = _trace(self._fn, self._make_inputs, function_source, inputs_source, tracing_mode)

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, name):
            raise AttributeError(f"Program.{name} is read-only")
        object.__setattr__(self, name, value)

    def make_inputs(self) -> list[torch.Tensor]:
        """Fresh real inputs, the same values on every call, none sharing storage.

        Examples
        --------
        >>> from hypothesis import find
        >>> p = find(programs(max_ops=3), lambda p: True)
        >>> a, b = p.make_inputs(), p.make_inputs()
        >>> all(torch.equal(x, y) and x.data_ptr() != y.data_ptr() for x, y in zip(a, b))
        True
        """
        return self._make_inputs()

    def run(self) -> Any:
        """Run the Python function (not the graph) on fresh inputs and return its outputs."""
        return self._fn(*self._make_inputs())

    def source(self) -> str:
        """The program as a standalone Python script (imports, custom ops, function, inputs, trace).

        Examples
        --------
        >>> from hypothesis import find
        >>> p = find(programs(max_ops=3), lambda p: True)
        >>> namespace = {}
        >>> exec(p.source(), namespace)
        >>> namespace["gm"].code == p.graph_module.code
        True
        """
        parts = [_HEADER]
        if self.uses_custom_ops:
            parts.append(CUSTOM_OPS_SOURCE)
        parts.append(self.function_source)
        parts.append(self.inputs_source)
        parts.append(f"DONATED_INPUTS = {self.donated_inputs!r}  # placeholder positions the caller gives up\n")
        parts.append(f"gm = make_fx(program, tracing_mode={self.tracing_mode!r})(*make_inputs())\n")
        parts.append("outputs = program(*make_inputs())\n")
        return "\n".join(parts)

    def __repr__(self) -> str:
        body = textwrap.indent(self.inputs_source + self.function_source, "    ")
        return f"Program(seed={self.seed}, donated_inputs={self.donated_inputs}, num_ops={self.num_ops}):\n{body}"


_TRACES: collections.OrderedDict[tuple[str, str, str], tuple[torch.fx.GraphModule, str]] = collections.OrderedDict()
_TRACE_CACHE_SIZE = 512


def _trace(
    fn: Callable[..., Any],
    make_inputs: Callable[[], list[torch.Tensor]],
    function_source: str,
    inputs_source: str,
    tracing_mode: str = "fake",
) -> torch.fx.GraphModule:
    """``make_fx(fn, tracing_mode=tracing_mode)`` on fresh inputs, cached by source and mode.

    Hypothesis draws the same program many times while shrinking; a trace does
    not depend on input values, so the key leaves the seed out. A cached module
    is reused only while its graph is unchanged (a caller may have rewritten it).
    """
    key = (function_source, re.sub(r"manual_seed\(\d+\)", "manual_seed(SEED)", inputs_source), tracing_mode)
    hit = _TRACES.get(key)
    if hit is not None and str(hit[0].graph) == hit[1]:
        _TRACES.move_to_end(key)
        return hit[0]
    mode: Literal["fake", "symbolic"] = "symbolic" if tracing_mode == "symbolic" else "fake"
    with quiet_torch_trace():
        gm = make_fx(fn, tracing_mode=mode)(*make_inputs())
    _TRACES[key] = (gm, str(gm.graph))
    if len(_TRACES) > _TRACE_CACHE_SIZE:
        _TRACES.popitem(last=False)
    return gm


# --------------------------------------------------------------------------- #
# Drawing
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class _InputSpec:
    shape: tuple[int, ...]
    layout: str  # "contiguous" | "transposed" | "strided" | "offset"

    def expression(self) -> str:
        shape = self.shape
        if self.layout == "transposed":
            base = (*shape[:-2], shape[-1], shape[-2])
            return f"torch.randn({_shape_args(base)}, generator=g).transpose(-2, -1)"
        if self.layout == "strided":
            base = (*shape[:-1], 2 * shape[-1])
            return f"torch.randn({_shape_args(base)}, generator=g)[..., ::2]"
        if self.layout == "offset":
            base = (shape[0] + 1, *shape[1:])
            return f"torch.randn({_shape_args(base)}, generator=g)[1:]"
        return f"torch.randn({_shape_args(shape)}, generator=g)"


def _shape_args(shape: Sequence[int]) -> str:
    return ", ".join(str(s) for s in shape) if shape else "()"


def _shape_tuple(shape: Sequence[int]) -> str:
    return "(" + "".join(f"{s}, " for s in shape).rstrip(" ") + ")" if len(shape) != 1 else f"({shape[0]},)"


def _elements(t: torch.Tensor) -> frozenset[int]:
    """Storage element offsets that ``t`` covers."""
    idx = torch.tensor([t.storage_offset()], dtype=torch.int64)
    for size, stride in zip(t.shape, t.stride()):
        idx = (idx[:, None] + torch.arange(size, dtype=torch.int64) * stride).reshape(-1)
    return frozenset(idx.tolist())


def _clone_keeps_layout(t: torch.Tensor) -> bool:
    """Whether ``t.clone()`` has ``t``'s strides and storage offset."""
    return bool(t.storage_offset() == 0 and t.clone().stride() == t.stride())


def _broadcasts_to(src: Sequence[int], dst: Sequence[int]) -> bool:
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(reversed(src), reversed(dst)))


def _broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    try:
        shape: torch.Size = torch.broadcast_shapes(tuple(a), tuple(b))  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        return tuple(shape)
    except RuntimeError:
        return None


@dataclass
class _Value:
    name: str
    kind: str  # "input" | "fresh" | "clone" | "view" | "inplace"
    tensor: torch.Tensor
    elements: frozenset[int]
    storage: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.tensor.shape)

    @property
    def writable(self) -> bool:
        return len(self.elements) == self.tensor.numel()


@functools.cache
def _integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    """``st.integers(lo, hi)``, built once (drawing is the hot path of the generator)."""
    return st.integers(lo, hi)


class _Rejected(Exception):
    """A drawn statement is not valid on real tensors."""


_KINDS: tuple[tuple[str, int], ...] = (
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


@dataclass(frozen=True)
class _NormCall:
    """A normalisation call with running statistics, whose traced graph has a hidden write.

    ``effect`` is the :data:`~aliasing.core.hidden_effects.HIDDEN_EFFECTS` entry
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
_NORM_CALLS: tuple[_NormCall, ...] = tuple(
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

#: ``_unsafe_view`` returns a view its schema calls a fresh tensor (drawn among the views).
_DRAW_UNSAFE_VIEW = HIDDEN_EFFECTS.get("aten::_unsafe_view") is not None

_MAX_RANK = 4


class _Builder:
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
    ) -> None:
        self.max_lines = max_lines
        self.draw = draw
        self.kinds = tuple(kinds) if _NORM_CALLS else tuple(k for k in kinds if k[0] != "norm")
        self.allow_custom_ops = any(kind == "custom" for kind, _ in kinds)
        self.allow_hidden_effects = allow_hidden_effects
        self.norm_calls = _NORM_CALLS
        self.alias_bias = alias_bias
        self.max_size = max_size
        self.inputs_source = inputs_source
        self.input_names = [f"x{i}" for i in range(num_inputs)]
        self.lines: list[str] = []
        self.clones: list[tuple[str, str]] = []  # (clone, original)
        self.uses_custom_ops = False
        self.counter = 0
        self.env: dict[str, Any] = {}
        self.values: list[_Value] = []
        self._history: list[tuple[str, tuple[str, ...], str]] = []
        self._aim: int | None = None  # storage that operand picks must use while set (hazards)
        self._focus_off = False  # no aiming at the last clone pair (set after some hazards)
        self._reset()

    # -- state ------------------------------------------------------------ #

    def _reset(self) -> None:
        namespace: dict[str, Any] = {"torch": torch}
        exec(compile(self.inputs_source, "<fxa_fuzz inputs>", "exec"), namespace)
        inputs = namespace["make_inputs"]()
        self.env = {"torch": torch}
        self.values = []
        for name, tensor in zip(self.input_names, inputs):
            self._bind(name, "input", tensor)

    def _replay(self) -> None:
        """Rebuild the real state after a rejected statement may have half-run."""
        self._reset()
        for line, names, kind in self._history:
            result = eval(compile(line, "<fxa_fuzz>", "eval"), self.env)
            self._bind_result(names, kind, result)

    def _bind(self, name: str, kind: str, tensor: torch.Tensor) -> None:
        self.env[name] = tensor
        storage = tensor.untyped_storage().data_ptr()
        self.values.append(_Value(name, kind, tensor, _elements(tensor), storage))

    def _bind_result(self, names: tuple[str, ...], kind: str, result: Any) -> None:
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
        return self.draw(_integers(lo, hi))

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

    def _pick(self, candidates: Sequence[_Value]) -> _Value:
        """Pick a candidate; with probability ``alias_bias``, one living with the focused clone or its original."""
        if not candidates:
            raise _Rejected("no candidate")
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
        self, dst: _Value, *, shape: Sequence[int] | None = None, allow_same: bool = True
    ) -> _Value | None:
        """A value readable while writing ``dst``: broadcastable, disjoint from (or identical to) it."""
        target = dst.shape if shape is None else tuple(shape)
        ok = [
            v
            for v in self.values
            if _broadcasts_to(v.shape, target)
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
    def _same_or_disjoint(a: _Value, b: _Value) -> bool:
        if a.storage != b.storage:
            return True
        same = (
            a.tensor.storage_offset() == b.tensor.storage_offset()
            and a.tensor.shape == b.tensor.shape
            and a.tensor.stride() == b.tensor.stride()
        )
        return same or not (a.elements & b.elements)

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
        with contextlib.suppress(_Rejected):  # a statement the state cannot take: draw nothing
            getattr(self, f"_draw_{chosen}")()

    def _emit(self, expr: str, kind: str, *, bind: bool = True, original: str = "") -> None:
        """Execute ``expr`` on the real state, then record it (binding its tensors to new names).

        ``original`` names the value a ``"clone"`` statement copies.
        """
        if len(self.lines) >= self.max_lines:
            raise _Rejected("program is long enough")
        try:
            result = eval(compile(expr, "<fxa_fuzz>", "eval"), self.env)
        except Exception as err:
            self._replay()
            raise _Rejected(str(err)) from err
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

    def _draw_clone(self, src: _Value | None = None) -> None:
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
            same_layout = [v for v in candidates if _clone_keeps_layout(v.tensor)]
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
            self._aim = aim
            try:
                part()
            except _Rejected:
                pass
            finally:
                self._aim = None
        # Half the time, later statements stop aiming at this pair (so that the hazard
        # is not always masked by later reads and writes of both sides).
        self._focus_off = self._int(0, 1) == 1

    def _draw_pattern(self, which: int | None = None) -> None:
        """A clone, then one of the patterns a precise pass must see through (the planner's refinements).

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

        Most end with a read of one side.
        """
        if which is None:
            which = self._int(0, 8)
        if which <= 1:
            strided = [v for v in self.values if not v.tensor.is_contiguous() and v.tensor.numel() > 1]
            if not strided:
                raise _Rejected("no non-contiguous value")
            src = self._pick(strided)
            form = self._choice(["{x}.contiguous()", "{x}.clone(memory_format=torch.contiguous_format)"])
            self._emit(form.format(x=src.name), "clone", original=src.name)
            self._focus_off = False
            if which == 0:
                return
            made = self.values[-1].name
            direct = ["torch.sin({c})", "{c} * 2.0", "{c} + 1.0", "{c}.neg()", "{c} + {o}", "{c}.clone()", "copy"]
            through = ["torch.cat([{c}, {c}])", "{c}.flip(0)", "{c}.unsqueeze(0) * 2.0", "{c}.view(-1) * 2.0", "in-place"]
            consumer = self._choice(direct if self._int(0, 1) == 0 else through)
            if consumer == "in-place":  # the in-place result is the clone itself, read afterwards
                self._emit(f"{made}.mul_(2.0)", "inplace", bind=True)
                self._emit(f"{self.values[-1].name} + 1.0", "fresh")
            elif consumer == "copy":
                dst = [v for v in self.values if v.writable and v.shape == src.shape and v.name != made]
                if not dst:
                    raise _Rejected("no destination")
                self._emit(f"{self._choice(dst).name}.copy_({made})", "inplace", bind=self._bind_inplace())
            else:
                self._emit(consumer.format(c=made, o=src.name), "fresh")
            return
        src = self.values[-1] if self._int(0, 2) == 0 else self._pick(self.values)
        self._emit(f"{src.name}.clone()", "clone", original=src.name)
        self._focus_off = False
        c, o = self.values[-1], src
        o_writable = o.writable
        read_after = True
        if which == 2:  # a dead read of the clone after a write of the original
            if not o_writable:
                raise _Rejected("original not writable")
            write = self._choice(["{o}.add_(1.0)", "{o}.mul_(-0.5)", "{o}.zero_()"])
            self._emit(write.format(o=o.name), "inplace", bind=False)
            self._emit(self._choice(["{c}.sum()", "{c} * 2.0", "{c}.amax()"]).format(c=c.name), "fresh")
            read_after = False
        elif which == 3:  # the clone only written
            write = self._choice(["{c}.add_(1.0)", "{c}.mul_({o})", "{c}.zero_()", "{c}.fill_(0.5)"])
            self._emit(write.format(c=c.name, o=o.name), "inplace", bind=False)
            read_after = False
        elif which == 4:  # same elements read and written by one node
            forms = ["{c}.mul_({o})", "{c}.add_({o})", "torch.mul({o}, 2.0, out={c})", "torch.add({o}, {c}, out={c})"]
            if o_writable:
                forms += ["{o}.add_({c})", "torch.mul({c}, 2.0, out={o})"]
            self._emit(self._choice(forms).format(c=c.name, o=o.name), "inplace", bind=self._bind_inplace())
        elif which == 5:  # a copy between the clone and its original
            forms = ["{c}.copy_({o})"] + (["{o}.copy_({c})"] if o_writable else [])
            if self._int(0, 1):  # after a write of one side
                first = self._choice(["{c}.mul_(2.0)"] + (["{o}.add_(1.0)"] if o_writable else []))
                self._emit(first.format(c=c.name, o=o.name), "inplace", bind=False)
            self._emit(self._choice(forms).format(c=c.name, o=o.name), "inplace", bind=self._bind_inplace())
        elif which == 8:  # two dead clones and a dead _to_copy candidate reading what both groups share
            self._emit(self._choice(["{c}.add_(1.0)", "{c}.mul_(2.0)"]).format(c=c.name), "inplace", bind=False)
            self._emit(self._choice(["{c}.cumsum(0)", "{c} * 2.0"]).format(c=c.name), "fresh")
            value = self.values[-1].name
            self._emit(f"{o.name}.clone()", "clone", original=o.name)
            second = self.values[-1].name
            self._emit(f"{value}.to(torch.float64)", "fresh")
            out_op, operand = self._choice([("add", "1.0"), ("mul", "2.0")])
            self._emit(f"torch.{out_op}({value}, {operand}, out={second})", "inplace", bind=False)
        elif which == 7:  # the clone written and read, then a dead indexing write of the original
            if not o_writable or o.tensor.dim() == 0:
                raise _Rejected("original not writable, or a scalar")
            self._emit(f"{c.name}.mul_(2.0)", "inplace", bind=False)
            self._emit(f"{c.name}.neg()", "fresh")
            n0 = o.tensor.shape[0]
            index = f"(torch.arange(0, {n0}, 2),), torch.full((), 1.5), accumulate=True"
            self._emit(f"{o.name}.index_put_({index})", "inplace", bind=False)
            read_after = False
        else:  # a write of one side, then a full overwrite of the other
            if not o_writable:
                raise _Rejected("original not writable")
            written, other = self._choice([(c, o), (o, c)])
            self._emit(f"{written.name}.add_(1.0)", "inplace", bind=False)
            source = self._source_for(other, allow_same=False)
            forms = ["{x}.zero_()", "{x}.fill_(1.5)"] + (["{x}.copy_({s})"] if source is not None else [])
            self._emit(self._choice(forms).format(x=other.name, s=source.name if source else ""), "inplace", bind=False)
        if read_after and self._int(0, 3) != 0:
            self._aim = (c if self._int(0, 1) else o).storage
            try:
                self._draw_pointwise()
            finally:
                self._aim = None

    def _draw_pointwise(self) -> None:
        a = self._pick(self.values)
        if self._int(0, 1) == 0:
            # Mostly ops that keep information, so that a wrong value shows in the outputs.
            form = self._choice(["{a} + 1.0", "{a} * 2.0", "torch.sin({a})", "{a}.neg()", "torch.relu({a})"])
            self._emit(form.format(a=a.name), "fresh")
            return
        partners = [v for v in self.values if _broadcast(v.shape, a.shape) is not None]
        partners = [v for v in partners if len(_broadcast(v.shape, a.shape) or ()) <= _MAX_RANK]
        b = self._pick(partners)
        same = b.tensor is a.tensor or (b.storage == a.storage and b.elements == a.elements)
        forms = ["{a} + {b}", "{a} * {b}"] + ([] if same else ["torch.sub({a}, {b})"])
        form = self._choice(forms)
        self._emit(form.format(a=a.name, b=b.name), "fresh")

    def _draw_view(self) -> None:
        x = self._pick(self.values)
        shape = x.shape
        rank = len(shape)
        options: list[Callable[[_Value], str]] = [self._view_unsqueeze] if rank < _MAX_RANK else []
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
        if rank >= 2:
            options += [self._view_transpose, self._view_diagonal]
        if rank <= 2:
            options.append(self._view_t)
        if not options:
            raise _Rejected("no view applies")
        self._emit(self._choice(options)(x), "view")

    def _dim(self, x: _Value) -> int:
        return self._int(0, x.tensor.dim() - 1)

    def _view_view(self, x: _Value) -> str:
        return f"{x.name}.view({self._new_shape(x)})"

    def _view_reshape(self, x: _Value) -> str:
        return f"{x.name}.reshape({self._new_shape(x)})"

    def _new_shape(self, x: _Value) -> str:
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
            if len(new) > _MAX_RANK:
                raise _Rejected("rank")
        return _shape_tuple(new)

    def _view_slice(self, x: _Value) -> str:
        d = self._dim(x)
        size = x.shape[d]
        start = self._int(0, size - 1)
        stop = self._int(start + 1, size)
        step = self._int(1, 2)
        index = ", ".join([":"] * d + [f"{start}:{stop}" + (f":{step}" if step != 1 else "")])
        return f"{x.name}[{index}]"

    def _view_select(self, x: _Value) -> str:
        d = self._dim(x)
        i = self._int(0, x.shape[d] - 1)
        return f"{x.name}.select({d}, {i})" if self._int(0, 1) else f"{x.name}[{', '.join([':'] * d + [str(i)])}]"

    def _view_narrow(self, x: _Value) -> str:
        d = self._dim(x)
        size = x.shape[d]
        start = self._int(0, size - 1)
        return f"{x.name}.narrow({d}, {start}, {self._int(1, size - start)})"

    def _view_split(self, x: _Value) -> str:
        d = self._dim(x)
        return f"{x.name}.split({self._int(1, x.shape[d])}, {d})"

    def _view_unbind(self, x: _Value) -> str:
        return f"{x.name}.unbind({self._dim(x)})"

    def _view_chunk(self, x: _Value) -> str:
        d = self._dim(x)
        return f"torch.chunk({x.name}, {self._int(1, x.shape[d])}, {d})"

    def _view_permute(self, x: _Value) -> str:
        perms = list(itertools.permutations(range(x.tensor.dim())))
        return f"{x.name}.permute{self._choice(perms)!r}".replace(",)", ")")

    def _view_transpose(self, x: _Value) -> str:
        d1 = self._dim(x)
        d2 = self._dim(x)
        return f"{x.name}.transpose({d1}, {d2})"

    def _view_t(self, x: _Value) -> str:
        return f"{x.name}.t()"

    def _view_expand(self, x: _Value) -> str:
        shape = list(x.shape)
        if self._int(0, 1) == 0 and 1 in shape:
            new = [self._int(1, self.max_size) if s == 1 else s for s in shape]
        elif len(shape) < _MAX_RANK:
            new = [self._int(1, 4)] + shape
        else:
            raise _Rejected("rank")
        return f"{x.name}.expand({_shape_args(new)})"

    def _view_unsqueeze(self, x: _Value) -> str:
        return f"{x.name}.unsqueeze({self._int(0, x.tensor.dim())})"

    def _view_diagonal(self, x: _Value) -> str:
        rank = x.tensor.dim()
        d1 = self._int(0, rank - 1)
        d2 = self._choice([d for d in range(rank) if d != d1])
        n1, n2 = x.shape[d1], x.shape[d2]
        offset = self._int(-(n1 - 1), n2 - 1)
        return f"{x.name}.diagonal({offset}, {d1}, {d2})"

    def _view_custom(self, x: _Value) -> str:
        self.uses_custom_ops = True
        return f"torch.ops.fxa_fuzz.first_half({x.name})"

    def _view_unsafe_view(self, x: _Value) -> str:
        shape = self._new_shape(x)
        return f"torch.ops.aten._unsafe_view({x.name}, {'(-1,)' if shape == '-1' else shape})"

    def _view_as_strided(self, x: _Value) -> str:
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
        return f"{x.name}.as_strided({_shape_tuple(size)}, {_shape_tuple(stride)}, {offset})"

    def _writable(self) -> _Value:
        return self._pick([v for v in self.values if v.writable])

    def _bind_inplace(self) -> bool:
        return self._int(0, 2) == 2

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
                raise _Rejected("no source")
            expr = f"{d}.copy_({src.name})"
        elif op == 3:
            expr = f"{d}.zero_()" if self._int(0, 1) == 0 else f"{d}.fill_(0.75)"
        elif op == 4:  # index_put_ along dim 0
            if dst.tensor.dim() == 0:
                raise _Rejected("rank")
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
                raise _Rejected("no mask source")
            expr = f"{d}.masked_fill_({mask.name} > 0, 0.25)"
        self._emit(expr, "inplace", bind=self._bind_inplace())

    def _draw_out(self) -> None:
        dst = self._writable()
        a = self._source_for(dst)
        if a is None:
            raise _Rejected("no source")
        b = self._source_for(dst)
        op = self._choice(["add", "mul"])
        scalar = b is None or self._int(0, 2) == 0
        operand = ("1.0" if op == "add" else "2.0") if scalar or b is None else b.name
        if _broadcast(a.shape, () if scalar or b is None else b.shape) != dst.shape:
            raise _Rejected("out= shape")
        self._emit(f"torch.{op}({a.name}, {operand}, out={dst.name})", "inplace", bind=self._bind_inplace())

    def _draw_custom(self) -> None:
        a = self._writable()
        b = self._pick([v for v in self.values if v.writable and (v.storage != a.storage or not (v.elements & a.elements))])
        self.uses_custom_ops = True
        self._emit(f"torch.ops.fxa_fuzz.mutate_two({a.name}, {b.name}, {self._choice([2.0, -1.0])})", "inplace", bind=False)

    # -- normalisation with running statistics (hidden writes) ------------ #

    @staticmethod
    def _disjoint(v: _Value, others: Sequence[_Value]) -> bool:
        return all(o.storage != v.storage or not (o.elements & v.elements) for o in others)

    def _aimed(self, candidates: Sequence[_Value]) -> bool:
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
        except _Rejected:  # no vector fits: a clone of the running mean (both are then written)
            self._draw_clone(rm)
            rv = self.values[-1]
        stats = [rm, rv]
        written: _Value | None = None  # the side of the clone pair the norm gets
        other: _Value | None = None  # the side it does not get
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
            self._aim = (other if self._int(0, 3) != 0 else written).storage
            try:
                self._draw_pointwise()
            finally:
                self._aim = None

    def _norm_stat(self, length: int | None, training: bool, avoid: Sequence[_Value]) -> _Value:
        """A vector for a running statistic: an existing one, or a new 1-D view of a value.

        In train mode it is written, so it must have no internal overlap and be
        disjoint from ``avoid`` (the other statistic).
        """

        def fits(v: _Value) -> bool:
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
            view = eval(compile(expr, "<fxa_fuzz>", "eval"), self.env)  # a view: no side effect
            if fits(_Value("", "view", view, _elements(view), view.untyped_storage().data_ptr())):
                self._emit(expr, "view")
                return self.values[-1]
        raise _Rejected("no running statistic fits")

    def _norm_input(self, call: _NormCall, channels: int, training: bool, avoid: Sequence[_Value]) -> _Value:
        """An input ``(N, C, ...)`` for the norm: an existing value, or a reshape or expand of one.

        In train mode it needs more than one value per statistic and must not
        overlap the statistics (it is read while they are written).
        """

        def enough(shape: Sequence[int]) -> bool:
            per = math.prod(shape[2:]) if call.instance else math.prod(shape) // channels
            return not training or per > 1

        def fits(v: _Value) -> bool:
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
                shape = _shape_tuple((rest // k, channels, k))
            else:
                shape = f"(-1, {channels})"
            self._emit(f"{v.name}.reshape({shape})", "view")
        made = self.values[-1]
        if not fits(made):
            raise _Rejected("norm input does not fit")
        return made

    def _norm_affine(self, channels: int, training: bool, avoid: Sequence[_Value]) -> str:
        """``None`` or a vector of ``channels`` values (read; in train mode disjoint from the statistics)."""
        if self._int(0, 1) == 0:
            return "None"
        ok = [v for v in self.values if v.shape == (channels,) and (not training or self._disjoint(v, avoid))]
        return self._pick(ok).name if ok else "None"

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


def _draw_inputs(
    draw: st.DrawFn, *, max_inputs: int, max_size: int, allow_donation: bool
) -> tuple[list[_InputSpec], tuple[int, ...]]:
    count = draw(st.integers(1, max_inputs))
    specs: list[_InputSpec] = []
    donated: list[int] = []
    for i in range(count):
        rank = draw(_RANKS)
        shape = tuple(draw(st.integers(1, max_size)) for _ in range(rank))
        layouts = ["contiguous", "contiguous", "offset", "strided"] + (["transposed"] if rank >= 2 else [])
        specs.append(_InputSpec(shape, draw(st.sampled_from(layouts))))
        if allow_donation and draw(st.integers(0, 3)) == 3:
            donated.append(i)
    return specs, tuple(donated)


def _inputs_source(specs: Sequence[_InputSpec], seed: int) -> str:
    lines = ["def make_inputs():", f"    g = torch.Generator().manual_seed({seed})"]
    lines += [f"    x{i} = {spec.expression()}" for i, spec in enumerate(specs)]
    lines.append(f"    return [{', '.join(f'x{i}' for i in range(len(specs)))}]")
    return "\n".join(lines) + "\n"


_MORE = st.integers(0, 19)  # 0 stops
_RANKS = st.sampled_from([2, 1, 3, 4])  # matrices first: most views need two dimensions
_ENABLED = st.integers(0, 3)  # 0 disables a statement kind in one program


@st.composite
def _statement(draw: st.DrawFn, builder: _Builder) -> None:
    builder.step(draw)


@st.composite
def _programs(
    draw: st.DrawFn,
    *,
    min_ops: int,
    max_ops: int,
    max_inputs: int,
    max_outputs: int,
    max_size: int,
    alias_bias: float,
    allow_custom_ops: bool,
    allow_donation: bool,
    allow_hidden_effects: bool,
    tracing_mode: str = "fake",
) -> Program:
    seed = draw(st.integers(0, 2**31 - 1))
    specs, donated = _draw_inputs(draw, max_inputs=max_inputs, max_size=max_size, allow_donation=allow_donation)
    inputs_source = _inputs_source(specs, seed)
    # Swarm testing: each program uses a random subset of the statement kinds (clones always).
    kinds = [
        (kind, weight)
        for kind, weight in _KINDS
        if kind == "clone"
        or (
            (kind != "custom" or allow_custom_ops)
            and (kind != "norm" or (allow_hidden_effects and _NORM_CALLS))
            and draw(_ENABLED) != 0
        )
    ]
    builder = _Builder(
        draw,
        inputs_source=inputs_source,
        num_inputs=len(specs),
        alias_bias=alias_bias,
        kinds=kinds,
        max_size=max_size,
        max_lines=max_ops,
        allow_hidden_effects=allow_hidden_effects,
    )
    # One span per statement and a stop flag before each (shrinks toward 0: stop), so that
    # Hypothesis shrinks a program by deleting statements.
    attempts = 0
    while len(builder.lines) < max_ops and attempts < 3 * max_ops + 8:
        if len(builder.lines) >= min_ops and draw(_MORE) == 0:
            break
        attempts += 1
        draw(_statement(builder))
    return _finish(builder, builder.outputs(draw, max_outputs), donated=donated, seed=seed, tracing_mode=tracing_mode)


def _finish(
    builder: _Builder, outputs: Sequence[str], *, donated: tuple[int, ...], seed: int, tracing_mode: str = "fake"
) -> Program:
    """The program of ``builder``'s statements, returning ``outputs``."""
    params = ", ".join(builder.input_names)
    body = [f"    {line}" for line in builder.lines]
    body.append(f"    return ({outputs[0]},)" if len(outputs) == 1 else f"    return ({', '.join(outputs)})")
    function_source = f"def program({params}):\n" + "\n".join(body) + "\n"
    return Program(
        function_source=function_source,
        inputs_source=builder.inputs_source,
        donated_inputs=donated,
        seed=seed,
        num_ops=len(builder.lines),
        uses_custom_ops=builder.uses_custom_ops,
        tracing_mode=tracing_mode,
    )


def _check_int(name: str, value: object, lo: int, hi: float = math.inf) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name}={value!r} must be an int")
    if not lo <= value <= hi:
        raise InvalidArgument(f"{name}={value!r} must be in [{lo}, {hi}]")
    return value


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be a bool")
    return value


def programs(
    *,
    min_ops: int = 2,
    max_ops: int = 10,
    max_inputs: int = 3,
    max_outputs: int = 3,
    max_size: int = 6,
    alias_bias: float = 0.75,
    allow_custom_ops: bool = True,
    allow_donation: bool = True,
    allow_hidden_effects: bool = True,
    tracing_mode: str = "fake",
) -> st.SearchStrategy[Program]:
    """A Hypothesis strategy of random straight-line programs full of views, writes and clones.

    Parameters
    ----------
    min_ops, max_ops : int
        Bounds on the statements in the function body (``0 <= min_ops <= max_ops <= 200``).
        A statement that turns out invalid on real tensors is dropped, so a
        program can have fewer than ``min_ops`` statements in rare cases.
    max_inputs : int
        At most this many tensor inputs (1 to 8), each of rank 1 to 4, contiguous,
        transposed, strided (``[..., ::2]``) or with a storage offset (``[1:]``).
    max_outputs : int
        At most this many outputs (1 to 8); outputs may repeat and may be views.
    max_size : int
        Largest size of any input dimension (1 to 16).
    alias_bias : float
        Probability (0 to 1) of picking an operand among values that share a
        storage with a clone or a clone's original, when there are any.
    allow_custom_ops : bool
        Draw the fuzzer's custom ops (``fxa_fuzz::mutate_two`` writes two
        arguments, ``fxa_fuzz::first_half`` returns a view).
    allow_donation : bool
        Mark some inputs as donated.
    allow_hidden_effects : bool
        Draw ops whose effects their schemas do not declare
        (:data:`aliasing.core.hidden_effects.HIDDEN_EFFECTS`): ``batch_norm`` and
        ``instance_norm`` with running statistics, in train mode (they update
        the statistics in place) and eval mode, and ``_unsafe_view``.
    tracing_mode : str
        ``"fake"`` (the default) or ``"symbolic"`` (sizes become SymInts, as
        in a dynamic-shape compile): how each program's graph is traced.

    Returns
    -------
    hypothesis.strategies.SearchStrategy[Program]

    Raises
    ------
    hypothesis.errors.InvalidArgument
        For arguments of the wrong type or out of range.

    Examples
    --------
    >>> from hypothesis import given, settings
    >>> from rewrite.testing import check_pass
    >>> def my_pass(gm):  # a (sound) pass that does nothing
    ...     return gm
    >>> @settings(max_examples=5, deadline=None, database=None)
    ... @given(programs(max_ops=6))
    ... def test_my_pass(program):
    ...     check_pass(my_pass, program)
    >>> test_my_pass()
    """
    _check_int("min_ops", min_ops, 0, 200)
    _check_int("max_ops", max_ops, 0, 200)
    if min_ops > max_ops:
        raise InvalidArgument(f"min_ops={min_ops} must not exceed max_ops={max_ops}")
    _check_int("max_inputs", max_inputs, 1, 8)
    _check_int("max_outputs", max_outputs, 1, 8)
    _check_int("max_size", max_size, 1, 16)
    if isinstance(alias_bias, bool) or not isinstance(alias_bias, (int, float)) or not 0 <= alias_bias <= 1:
        raise InvalidArgument(f"alias_bias={alias_bias!r} must be a number in [0, 1]")
    _check_bool("allow_custom_ops", allow_custom_ops)
    _check_bool("allow_donation", allow_donation)
    _check_bool("allow_hidden_effects", allow_hidden_effects)
    if tracing_mode not in ("fake", "symbolic"):
        raise InvalidArgument(f"tracing_mode={tracing_mode!r} must be 'fake' or 'symbolic'")
    return _programs(
        min_ops=min_ops,
        max_ops=max_ops,
        max_inputs=max_inputs,
        max_outputs=max_outputs,
        max_size=max_size,
        alias_bias=float(alias_bias),
        allow_custom_ops=allow_custom_ops,
        allow_donation=allow_donation,
        allow_hidden_effects=allow_hidden_effects,
        tracing_mode=tracing_mode,
    )


# --------------------------------------------------------------------------- #
# check_pass
# --------------------------------------------------------------------------- #

PassFn = Callable[[torch.fx.GraphModule], object] | Callable[[torch.fx.Graph], object]


def check_pass(
    pass_fn: PassFn,
    program: Program,
    *,
    strict: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
) -> torch.fx.GraphModule:
    """Run ``pass_fn`` on a copy of ``program``'s graph and check the result is equivalent.

    The check is :func:`rewrite.testing.check_equivalent`'s: outputs compared
    bitwise (NaN equal to NaN) with their dtype, shape and strides, input
    mutations, no new aliasing, raising (an original that raises needs a rewrite
    that raises the same exception type), and the random-number generators' final
    state, both programs starting from the same generator state.

    Parameters
    ----------
    pass_fn : Callable[[torch.fx.GraphModule], object] or Callable[[torch.fx.Graph], object]
        The pass under test. It may return a new GraphModule, or rewrite its
        argument in place and return anything else (``None``, a report). A pass
        over a ``torch.fx.Graph`` (as Inductor's custom passes and vLLM's
        passes are) works too: one whose first parameter is annotated
        ``torch.fx.Graph``, or that has a ``uuid()`` method, gets the copy's
        Graph; any other gets the GraphModule, and runs again on a fresh copy's
        Graph if it fails on an attribute only a Graph has (``gm.nodes``...).
        The module's code is regenerated after a Graph pass.
    program : Program
        A drawn program (from :func:`programs`); its own graph is never touched.
    strict : bool
        Also require the rewritten graph to pass ``graph.lint()``.
    rtol, atol : float, optional
        A tolerance for floating-point values, passed to ``check_equivalent``;
        ``None`` (the default) compares them bitwise.  Only for a pass whose
        rounding legitimately differs (one that reorders arithmetic on purpose).

    Returns
    -------
    torch.fx.GraphModule
        The rewritten module, for further checks (for example idempotence).

    Raises
    ------
    NotEquivalent
        When a soundness clause fails (see :func:`rewrite.testing.check_equivalent`);
        the message ends with ``program.source()``, a standalone repro.
    RewriteError
        In strict mode, when the rewritten graph fails ``graph.lint()``.
    OracleError
        When the program's inputs do not fit its signature, or nothing could be
        compared (see :func:`rewrite.testing.check_equivalent`): a generator bug,
        never a verdict on the pass; the message ends with ``program.source()``.

    Examples
    --------
    >>> from hypothesis import find
    >>> import torch
    >>> def drop_clones(gm):  # unsound: replaces every clone by its input
    ...     for n in list(gm.graph.nodes):
    ...         if n.target is torch.ops.aten.clone.default:
    ...             n.replace_all_uses_with(n.args[0]); gm.graph.erase_node(n)
    ...     gm.recompile()
    >>> def fails(p):
    ...     try:
    ...         check_pass(drop_clones, p)
    ...     except NotEquivalent:
    ...         return True
    ...     return False
    >>> p = find(programs(max_ops=4), fails)
    >>> p.num_ops <= 4
    True
    """
    with quiet_torch_trace():
        return _check_pass(pass_fn, program, strict=strict, rtol=rtol, atol=atol)


def _check_pass(
    pass_fn: PassFn, program: Program, *, strict: bool, rtol: float | None, atol: float | None
) -> torch.fx.GraphModule:
    rewritten = _apply_pass(pass_fn, program)
    if strict:
        try:
            rewritten.graph.lint()
        except Exception as err:  # torch.fx raises RuntimeError and others from lint
            raise RewriteError(f"rewritten graph fails lint: {err}\n\n{_repro_note(program)}") from err
    try:
        check_equivalent(
            program.graph_module,
            rewritten,
            program.make_inputs,
            donated_inputs=program.donated_inputs,
            rtol=rtol,
            atol=atol,
        )
    except NotEquivalent as err:
        message = str(err).split("] ", 1)[-1]
        raise NotEquivalent(
            err.clause, f"{message}\n\n{_repro_note(program)}\n\nrewritten graph:\n{rewritten.code}"
        ) from err
    except OracleError as err:
        message = str(err).split("] ", 1)[-1]
        raise OracleError(err.reason, f"{message}\n\n{_repro_note(program)}", err.error) from err
    return rewritten


#: What a ``torch.fx.Graph`` has and a ``GraphModule`` does not: a pass that uses one takes a Graph.
_GRAPH_ONLY = frozenset(name for name in dir(torch.fx.Graph) if not hasattr(torch.fx.GraphModule, name))


def _takes_graph(pass_fn: PassFn) -> bool:
    """Whether ``pass_fn`` declares that it takes a ``torch.fx.Graph``: Inductor's custom passes
    (they have ``uuid()``) and functions whose first parameter is annotated ``torch.fx.Graph``."""
    if callable(getattr(pass_fn, "uuid", None)):  # torch._inductor.custom_graph_pass.CustomGraphPass
        return True
    try:
        params = list(inspect.signature(pass_fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params:
        return False
    annotation = params[0].annotation
    if isinstance(annotation, str):
        return annotation.split("[")[0].rsplit(".", 1)[-1] == "Graph"
    return annotation is torch.fx.Graph


def _graph_attribute_missing(err: AttributeError) -> bool:
    """Whether ``err`` is a GraphModule missing an attribute that only a Graph has."""
    name, obj = getattr(err, "name", None), getattr(err, "obj", None)
    if name is None:  # raised without the interpreter's context: read the message
        found = re.match(r"'(\w+)' object has no attribute '(\w+)'", str(err))
        return found is not None and found.group(1) == "GraphModule" and found.group(2) in _GRAPH_ONLY
    return name in _GRAPH_ONLY and (obj is None or isinstance(obj, torch.fx.GraphModule))


def _apply_pass(pass_fn: PassFn, program: Program) -> torch.fx.GraphModule:
    """Run ``pass_fn`` on a copy of the program, as a GraphModule pass or as a Graph pass.

    A pass that is not declared a Graph pass (:func:`_takes_graph`) gets the
    GraphModule first; if it then fails on an attribute only a Graph has
    (``gm.nodes``, ``gm.find_nodes``, ``gm.erase_node``...), it runs again on a
    fresh copy's Graph. A Graph pass rewrites the graph in place (or returns a
    new Graph); the module's code is regenerated after it.
    """
    copy = copy_program(program.graph_module)
    if not isinstance(copy, torch.fx.GraphModule):
        raise RewriteError("copy_program returned something other than a GraphModule")
    if not _takes_graph(pass_fn):
        try:
            result = cast(Callable[[torch.fx.GraphModule], object], pass_fn)(copy)
        except AttributeError as err:
            if not _graph_attribute_missing(err):
                raise
            copy = copy_program(program.graph_module)  # the failed attempt may have changed the first copy
            if not isinstance(copy, torch.fx.GraphModule):
                raise RewriteError("copy_program returned something other than a GraphModule") from err
        else:
            return result if isinstance(result, torch.fx.GraphModule) else copy
    result = pass_fn(copy.graph)  # type: ignore[arg-type]  # a Graph pass
    if isinstance(result, torch.fx.Graph) and result is not copy.graph:
        return torch.fx.GraphModule(copy, result)
    copy.recompile()
    return copy


def _repro_note(program: Program) -> str:
    return "standalone repro of the program:\n" + program.source()
