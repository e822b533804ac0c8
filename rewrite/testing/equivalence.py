"""Check that a rewritten program is equivalent to the original, by real execution.

:func:`check_equivalent` runs an original and a rewritten program on fresh copies of
the same real inputs, both from the same random-number-generator state, and checks the
soundness clauses of docs/DESIGN.md.  The first clause that fails raises
:class:`rewrite.errors.NotEquivalent`, whose ``clause`` is:

1. ``"output"``: every output of the rewritten program equals the original's output
   at the same position: dtype, shape, device, layout (strided, sparse...), for a
   strided tensor the layout the original produced (strides of dimensions longer
   than one, storage offset), and the values, **exactly** by default: floating-point
   and complex values bitwise, except that NaN equals NaN at the same position
   whatever its sign and payload (so ``0.0`` and ``-0.0`` differ: ``1 / x`` tells
   them apart); integers and booleans by ``==``.  Non-tensor outputs are compared
   with ``==`` (a Python float also by the sign of a zero, NaN equal to NaN).
2. ``"input-mutation"``: every non-donated input, parameter, buffer and tensor
   constant ends with the same value (and layout) after both runs, compared as
   outputs are.  Donated inputs are skipped: their final value is unspecified.
3. ``"new-aliasing"``: the rewritten program's outputs share no storage that the
   original's outputs did not share at the same positions: output with a
   non-donated input, output with a parameter, buffer or constant, output with
   another output.  An output may take over a donated input's storage.
4. ``"raises"``: the two programs disagree on raising: only the rewritten program
   raised, or the original raised and the rewritten one returned normally (a
   runtime check was erased) or raised an exception of another type.  When both
   raise exceptions of the same type (the messages may differ) they agree on these
   inputs and nothing else is compared: what a raising program leaves behind in its
   inputs is unspecified.
5. ``"rng-state"``: the random-number generators end in different states: the CPU
   default generator, every CUDA device's default generator when CUDA is available,
   and every ``torch.Generator`` passed among the inputs.  A rewrite that adds,
   drops or reorders a random op (even one whose result is unused) draws a
   different amount of randomness, which later code would see.

Both runs start from the generators' state as :func:`check_equivalent` finds it
(after it has called an ``example_inputs`` factory), so a program with
``torch.rand``, dropout or ``bernoulli_`` equals an unmodified copy of itself; that
state is restored when the check returns, so the oracle draws no random numbers
of its own.

**Tolerance.**  ``rtol`` and ``atol`` (keyword-only, ``None`` by default) switch the
comparison of floating-point and complex values (outputs, final inputs and module
state; Python floats too) from bitwise to ``|got - expected| <= atol + rtol *
|expected|``, NaN equal to NaN; the one not given is ``0``.  Integers, booleans,
metadata, aliasing, raising and the generators' state stay exact.  Use it only
where rounding legitimately differs, for example a compiled program (Inductor
reorders and fuses floating-point arithmetic) judged against eager.  Exact
comparison assumes deterministic kernels, as on CPU; on CUDA set
``torch.use_deterministic_algorithms(True)`` or pass a tolerance.

The oracle refuses to judge, with :class:`OracleError` (not a
:class:`~rewrite.errors.NotEquivalent`, and never a silent pass), when a check
would be vacuous: ``reason`` is

- ``"bad-inputs"``: the inputs do not fit the original program's signature (too
  few or too many positional inputs), so neither program ran.  A program whose
  signature takes ``*args`` raises ``TypeError`` instead, and clause 4 judges it.
- ``"nothing-compared"``: every clause passed, but no tensor with data took part:
  the original returned no tensor on a real device, no non-donated tensor input or
  module state lives on one, and it drew no random numbers (for example, every
  tensor is on the ``meta`` device, or the program returns no tensor and has
  nothing to mutate).

Inputs are copied so that each input keeps its sizes, strides and storage offset,
and inputs (and module state) that share a storage share one fresh storage in the
copy; a ``torch.Generator`` input is copied with its state.  Module state
(parameters, buffers, tensor attributes) is replaced by such copies for the
duration of each run, so a run that mutates a buffer does not leak into the other
one.  Both programs run under ``torch.no_grad()``.

:func:`copy_program` (defined in :mod:`rewrite.editing.copying`, re-exported here) gives a pass
an independent program to rewrite.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from aliasing.errors import InvalidTargetError
from rewrite.editing.copying import ProgramLike, copy_program
from rewrite.errors import NotEquivalent, OracleError

__all__ = ["OracleError", "check_equivalent", "copy_program"]


_StateSlot = tuple[torch.nn.Module, str, str]  # (owner module, "param"|"buffer"|"attr", name)
_StorageKey = tuple[str, int]


@contextmanager
def quiet_torch_trace() -> Iterator[None]:
    """Silence torch's structured-trace logger (``torch.__trace``) for the block, unless a trace is being written.

    Fake tensors and ``make_fx`` log a DEBUG record without a message for every
    tensor they describe; no handler of torch's prints them unless ``TORCH_TRACE``
    is set, but pytest's log capture keeps them all and prints about a thousand
    empty ``DEBUG torch.__trace`` lines under a failing fuzz test. The fuzzer's
    tracing and :func:`rewrite.testing.check_pass` run inside this. With
    ``TORCH_TRACE`` (or ``TORCH_DTRACE``, ``TORCH_COMPILE_DEBUG=1``) set, nothing
    changes.
    """
    trace = logging.getLogger("torch.__trace")
    wanted = any(os.environ.get(k) for k in ("TORCH_TRACE", "TORCH_DTRACE"))
    wanted = wanted or os.environ.get("TORCH_COMPILE_DEBUG") == "1"
    wanted = wanted or any(getattr(h, "root_dir", None) is not None for h in trace.handlers)
    if wanted:
        yield
        return
    level = trace.level
    trace.setLevel(logging.CRITICAL + 1)  # torch checks the level of this logger only
    try:
        yield
    finally:
        trace.setLevel(level)


def check_equivalent(
    original: ProgramLike,
    rewritten: ProgramLike,
    example_inputs: Sequence[Any] | Callable[[], Sequence[Any]],
    *,
    donated_inputs: Sequence[int] = (),
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Raise :class:`NotEquivalent` unless ``rewritten`` behaves as ``original``.

    Both programs run on fresh copies of the inputs from the same random-number
    generator state; outputs, final inputs and module state are compared exactly
    (floating point bitwise, NaN equal to NaN) unless a tolerance is given.

    Parameters
    ----------
    original, rewritten
        GraphModules, or ExportedPrograms (run through ``.module()``).
    example_inputs
        Real inputs (tensors and other values; for an ExportedProgram the user
        inputs), or a zero-argument callable returning them (called once, before
        the generators' state is saved).  Each run gets fresh copies that keep
        layouts and storage sharing.
    donated_inputs
        Positions of donated inputs: placeholder positions of ``original``'s graph.
        For a GraphModule they index the flattened inputs; for an ExportedProgram
        they are translated through its graph signature to user inputs.
    rtol, atol
        Relative and absolute tolerance for floating-point and complex values; both
        ``None`` (the default) compares them bitwise.  Giving one switches to
        ``|got - expected| <= atol + rtol * |expected|`` with the other ``0``.
        Only for programs whose rounding legitimately differs (compiled against
        eager); integers, metadata, aliasing, raising and RNG state stay exact.

    Raises
    ------
    NotEquivalent
        With ``clause`` one of ``"output"``, ``"input-mutation"``,
        ``"new-aliasing"``, ``"raises"``, ``"rng-state"`` (see the module
        docstring).  An original that raises is judged: the rewrite must raise an
        exception of the same type.
    OracleError
        When the check cannot be made: the inputs do not fit the original's
        signature (``reason="bad-inputs"``), or no tensor with data could be
        compared (``reason="nothing-compared"``).
    ValueError
        When ``rtol`` or ``atol`` is negative or not a number.

    Examples
    --------
    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: x.clone())
    >>> bad = torch.fx.symbolic_trace(lambda x: x)
    >>> check_equivalent(gm, gm, [torch.ones(2)])
    >>> check_equivalent(gm, bad, [torch.ones(2)])
    Traceback (most recent call last):
    ...
    rewrite.errors.NotEquivalent: [new-aliasing] output 0 shares storage with input 0 ...

    Summing in another order changes the last bit on these inputs: caught by
    default, accepted with an explicit tolerance.

    >>> total = torch.fx.symbolic_trace(lambda x: x.sum())
    >>> reordered = torch.fx.symbolic_trace(lambda x: x.flip(0).sum())
    >>> x = torch.tensor([1.0, 2.0**-24, 2.0**-24])
    >>> check_equivalent(total, reordered, [x])
    Traceback (most recent call last):
    ...
    rewrite.errors.NotEquivalent: [output] output 0: values differ ...
    >>> check_equivalent(total, reordered, [x], rtol=1e-6)

    A random op draws the same numbers in both runs; an extra draw is caught.

    >>> noise = torch.fx.symbolic_trace(lambda x: x + torch.rand(2))
    >>> def more_noise(x):
    ...     torch.rand(1)  # unused, but it advances the generator
    ...     return x + torch.rand(2)
    >>> check_equivalent(noise, noise, [torch.ones(2)])
    >>> check_equivalent(noise, torch.fx.symbolic_trace(more_noise), [torch.ones(2)])
    Traceback (most recent call last):
    ...
    rewrite.errors.NotEquivalent: [output] output 0: values differ ...
    """
    raw = example_inputs() if callable(example_inputs) else example_inputs
    tolerance = _tolerance(rtol, atol)
    donated = _donated_leaves(original, frozenset(donated_inputs))
    module_a, module_b = _as_module(original), _as_module(rewritten)
    _check_signature(module_a, raw)
    start = _rng_snapshot()
    try:
        run_a = _Run(module_a, raw, start)
        run_b = _Run(module_b, raw, start)
    finally:
        _rng_restore(start)
    if run_a.error is not None:
        _judge_raising_original(run_a.error, run_b.error)
        return
    if run_b.error is not None:
        err = run_b.error
        raise NotEquivalent("raises", f"only the rewritten program raised {type(err).__name__}: {err}")
    _compare_outputs(run_a, run_b, tolerance)
    _compare_final_state(run_a, run_b, donated, tolerance)
    _check_no_new_aliasing(run_a, run_b, donated)
    _check_generator_states(run_a, run_b)
    _check_something_compared(run_a, start, donated)


def _compare_outputs(run_a: _Run, run_b: _Run, tolerance: Tolerance) -> None:
    """Clause 1: the outputs have one structure, and each equals the original's at its position."""
    if run_a.out_spec != run_b.out_spec:
        raise NotEquivalent("output", f"output structure differs: {run_a.out_spec} vs {run_b.out_spec}")
    for i, (a, b) in enumerate(zip(run_a.outputs, run_b.outputs)):
        problem = _difference(a, b, tolerance)
        if problem:
            raise NotEquivalent("output", f"output {i}: {problem}")


def _compare_final_state(run_a: _Run, run_b: _Run, donated: frozenset[int], tolerance: Tolerance) -> None:
    """Clause 2: every non-donated input and all module state end as after the original."""
    for i, (a, b) in enumerate(zip(run_a.inputs, run_b.inputs)):
        skip = i in donated or isinstance(a, torch.Generator)  # generators: clause 5
        problem = None if skip else _difference(a, b, tolerance)
        if problem:
            raise NotEquivalent("input-mutation", f"input {i} ends differently: {problem}")
    for name in sorted(run_a.state.keys() | run_b.state.keys()):
        # state that only one program has is left alone by the other: it keeps its initial value
        final_a = run_a.state.get(name, run_b.initial.get(name))
        problem = _difference(final_a, run_b.state.get(name, run_a.initial.get(name)), tolerance)
        if problem:
            raise NotEquivalent("input-mutation", f"module state {name!r} ends differently: {problem}")


def _check_no_new_aliasing(run_a: _Run, run_b: _Run, donated: frozenset[int]) -> None:
    """Clause 3: the rewrite's outputs share no storage that the original's did not."""
    new_pairs = sorted(run_b.sharing(donated) - run_a.sharing(donated))
    if new_pairs:
        out, other = new_pairs[0]
        raise NotEquivalent(
            "new-aliasing",
            f"output {out} shares storage with {other} in the rewritten program, not in the original",
        )


def _check_generator_states(run_a: _Run, run_b: _Run) -> None:
    """Clause 5: every random-number generator ends in the state the original left it in."""
    for label, final_a, final_b in _generator_states(run_a, run_b):
        if not torch.equal(final_a, final_b):
            raise NotEquivalent(
                "rng-state",
                f"the {label} ends in another state after the rewritten program: it draws a different amount "
                "of randomness (a random op added, dropped or reordered)",
            )


def _check_something_compared(run_a: _Run, start: _RngSnapshot, donated: frozenset[int]) -> None:
    """Refuse to judge (``OracleError("nothing-compared")``) when no tensor with data took part."""
    drew = any(not torch.equal(s, e) for (_, s), (_, e) in zip(start, run_a.rng))
    if not run_a.compared_data(donated) and not drew:
        raise OracleError(
            "nothing-compared",
            "no tensor with data was compared: the original returns no tensor off the meta device, has no "
            "non-donated tensor input or module state off it that a run could mutate, and draws no random numbers",
        )


Tolerance = tuple[float, float] | None  # (rtol, atol); None compares bitwise


def _tolerance(rtol: float | None, atol: float | None) -> Tolerance:
    if rtol is None and atol is None:
        return None
    pair = (0.0 if rtol is None else rtol, 0.0 if atol is None else atol)
    for name, value in zip(("rtol", "atol"), pair):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"{name} must be a non-negative number or None, not {value!r}")
    return (float(pair[0]), float(pair[1]))


def _as_module(program: ProgramLike) -> torch.nn.Module:
    """What runs: the program itself, or an ExportedProgram's ``.module()``."""
    return program.module() if isinstance(program, ExportedProgram) else program


def _check_signature(module: torch.nn.Module, raw_inputs: Sequence[Any]) -> None:
    """Raise ``OracleError("bad-inputs")`` when the inputs cannot bind to the module's ``forward``."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):  # no signature to read: the run itself decides
        return
    try:
        signature.bind(*raw_inputs)
    except TypeError as err:
        raise OracleError(
            "bad-inputs",
            f"the inputs do not fit the original program's signature {signature}, so neither program ran: {err}",
            err,
        ) from err


def _judge_raising_original(err_a: Exception, err_b: Exception | None) -> None:
    """Clause 4 when the original raised: the rewrite must raise an exception of the same type."""
    what = f"the original program raised {type(err_a).__name__} ({_first_line(err_a)})"
    if err_b is None:
        raise NotEquivalent("raises", f"{what} but the rewritten program returned normally")
    if type(err_b) is not type(err_a):
        raise NotEquivalent(
            "raises", f"{what} but the rewritten program raised {type(err_b).__name__}: {_first_line(err_b)}"
        )


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no message"


_RngSnapshot = list[tuple[str, torch.Tensor]]  # (generator label, state) in a fixed order


def _rng_snapshot() -> _RngSnapshot:
    """The state of the CPU default generator and, when CUDA is available, every CUDA device's."""
    states = [("CPU default generator", torch.get_rng_state())]
    if torch.cuda.is_available():
        states += [(f"default generator of cuda:{i}", s) for i, s in enumerate(torch.cuda.get_rng_state_all())]
    return states


def _rng_restore(states: _RngSnapshot) -> None:
    torch.set_rng_state(states[0][1])
    if len(states) > 1:
        torch.cuda.set_rng_state_all([s for _, s in states[1:]])


def _generator_states(run_a: _Run, run_b: _Run) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(label, final state after the original, after the rewrite) for every generator, defaults first."""
    for (label, a), (_, b) in zip(run_a.rng, run_b.rng):
        yield label, a, b
    for i, (a, b) in enumerate(zip(run_a.inputs, run_b.inputs)):
        if isinstance(a, torch.Generator) and isinstance(b, torch.Generator):
            yield f"generator passed as input {i}", a.get_state(), b.get_state()


class _Run:
    """One execution of a program on fresh copies of the inputs and module state, from ``rng``."""

    def __init__(self, module: torch.nn.Module, raw_inputs: Sequence[Any], rng: _RngSnapshot) -> None:
        leaves, in_spec = pytree.tree_flatten(list(raw_inputs))
        slots = _state_slots(module)
        originals = {name: _read_slot(slot) for name, slot in slots.items()}
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)] + list(originals.values())
        fresh = _clone_tensors(tensors)
        self.inputs = [_fresh_leaf(x, fresh) for x in leaves]
        self.error: Exception | None = None
        self.outputs: list[Any] = []
        self.out_spec: pytree.TreeSpec | None = None
        with _swapped_state(slots, {n: fresh[id(t)] for n, t in originals.items()}) as final:
            _rng_restore(rng)
            try:
                with torch.no_grad():
                    result = module(*pytree.tree_unflatten(self.inputs, in_spec))
                self.outputs, self.out_spec = pytree.tree_flatten(result)
            except Exception as err:  # clause 4
                self.error = err
            self.rng = _rng_snapshot()
        self.state: dict[str, torch.Tensor] = final
        self.initial: dict[str, torch.Tensor] = originals

    def compared_data(self, donated: frozenset[int]) -> bool:
        """Whether an output, a non-donated input or module state is a tensor with data (not on ``meta``)."""
        inputs = [x for i, x in enumerate(self.inputs) if i not in donated]
        tensors = [x for x in [*self.outputs, *inputs, *self.state.values()] if isinstance(x, torch.Tensor)]
        return any(not x.is_meta for x in tensors)

    def sharing(self, donated: frozenset[int]) -> set[tuple[int, str]]:
        """Pairs (output position, what it shares a storage with): earlier outputs, inputs, state."""
        others = [(f"input {i}", _storage_key(x)) for i, x in enumerate(self.inputs) if i not in donated]
        others += [(f"module state {n!r}", _storage_key(t)) for n, t in self.state.items()]
        keys = [_storage_key(x) for x in self.outputs]
        pairs: set[tuple[int, str]] = set()
        for i, key in enumerate(keys):
            earlier = [(f"output {j}", keys[j]) for j in range(i)]
            pairs |= {(i, label) for label, k in earlier + others if key is not None and k == key}
        return pairs


def _storage_key(x: Any) -> _StorageKey | None:
    if not isinstance(x, torch.Tensor) or x.layout != torch.strided:
        return None
    storage = x.untyped_storage()
    return (str(x.device), storage.data_ptr()) if storage.nbytes() > 0 else None


def _donated_leaves(program: ProgramLike, positions: frozenset[int]) -> frozenset[int]:
    if not isinstance(program, ExportedProgram):
        return positions
    user = [i for i, s in enumerate(program.graph_signature.input_specs) if s.kind == InputKind.USER_INPUT]
    return frozenset(user.index(p) for p in positions if p in user)


def _state_slots(module: torch.nn.Module) -> dict[str, _StateSlot]:
    slots: dict[str, _StateSlot] = {}
    for prefix, sub in module.named_modules():
        named = [(n, "param") for n, t in sub._parameters.items() if t is not None]
        named += [(n, "buffer") for n, t in sub._buffers.items() if t is not None]
        named += [(n, "attr") for n, t in vars(sub).items() if isinstance(t, torch.Tensor)]
        for name, kind in named:
            slots[f"{prefix}.{name}" if prefix else name] = (sub, kind, name)
    return slots


def _slot_table(owner: torch.nn.Module, kind: str) -> dict[str, Any]:
    tables: dict[str, dict[str, Any]] = {"param": owner._parameters, "buffer": owner._buffers, "attr": owner.__dict__}
    return tables[kind]


def _read_slot(slot: _StateSlot) -> torch.Tensor:
    owner, kind, name = slot
    value = _slot_table(owner, kind)[name]
    if not isinstance(value, torch.Tensor):
        raise InvalidTargetError(f"module state {name!r} is no longer a tensor after the run")
    return value


def _write_slot(slot: _StateSlot, value: torch.Tensor) -> None:
    owner, kind, name = slot
    _slot_table(owner, kind)[name] = value


@contextmanager
def _swapped_state(
    slots: dict[str, _StateSlot], fresh: dict[str, torch.Tensor]
) -> Iterator[dict[str, torch.Tensor]]:
    """Install ``fresh`` module state; on exit fill the yielded dict with final values and restore."""
    saved = {name: _read_slot(slot) for name, slot in slots.items()}
    final: dict[str, torch.Tensor] = {}
    for name, slot in slots.items():
        _write_slot(slot, fresh[name])
    try:
        yield final
    finally:
        for name, slot in slots.items():
            final[name] = _read_slot(slot)
            _write_slot(slot, saved[name])


def _clone_tensors(tensors: Sequence[torch.Tensor]) -> dict[int, torch.Tensor]:
    """Map ``id(t)`` to a fresh copy, keeping layouts and storage sharing among ``tensors``."""
    storages: dict[_StorageKey, torch.UntypedStorage] = {}
    fresh: dict[int, torch.Tensor] = {}
    for t in tensors:
        if id(t) not in fresh:
            fresh[id(t)] = _clone_one(t, storages)
    return fresh


def _clone_one(t: torch.Tensor, storages: dict[_StorageKey, torch.UntypedStorage]) -> torch.Tensor:
    key = _storage_key(t)
    if key is None or t.is_quantized or type(t) not in (torch.Tensor, torch.nn.Parameter):
        copy_ = t.detach().clone()
    else:
        if key not in storages:
            storages[key] = t.untyped_storage().clone()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        copy_ = torch.empty(0, dtype=t.dtype, device=t.device)
        copy_.set_(storages[key], t.storage_offset(), t.size(), t.stride())
        copy_ = copy_.conj() if t.is_conj() else copy_
        copy_ = torch._neg_view(copy_) if t.is_neg() else copy_
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(copy_, requires_grad=t.requires_grad)
    return copy_.requires_grad_(t.requires_grad) if t.requires_grad and copy_.is_leaf else copy_


def _fresh_leaf(x: Any, fresh: dict[int, torch.Tensor]) -> Any:
    """The copy of one input leaf a run gets: tensors from ``fresh``, generators with their state."""
    if isinstance(x, torch.Tensor):
        return fresh.get(id(x), x)
    if isinstance(x, torch.Generator):
        generator = torch.Generator(device=x.device)
        generator.set_state(x.get_state())
        return generator
    return x


def _difference(a: Any, b: Any, tolerance: Tolerance = None) -> str | None:
    """Describe how ``b`` differs from the reference ``a``, or return None."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return f"expected {_brief(a)}, got {_brief(b)}"
        return None if _same_scalar(a, b, tolerance) else f"expected {a!r}, got {b!r}"
    for what in ("dtype", "shape", "device", "layout"):
        if getattr(a, what) != getattr(b, what):
            return f"{what} {getattr(b, what)} instead of {getattr(a, what)}"
    if a.layout == torch.strided and a.numel() > 0:
        if a.storage_offset() != b.storage_offset():
            return f"storage offset {b.storage_offset()} instead of {a.storage_offset()}"
        if any(n > 1 and sa != sb for n, sa, sb in zip(a.shape, a.stride(), b.stride())):
            return f"strides {b.stride()} instead of {a.stride()}"
    if a.is_meta or b.is_meta:  # no data: the metadata above is all there is
        return None
    if tolerance is not None and (a.is_floating_point() or a.is_complex()):
        rtol, atol = tolerance
        try:
            torch.testing.assert_close(b.detach(), a.detach(), rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
        except AssertionError as err:
            detail = "; ".join(line.strip() for line in str(err).splitlines()[1:] if line.strip())
            within = f"rtol={rtol:g}, atol={atol:g}"
            return f"values differ beyond {within} ({detail}): expected {_brief(a)}, got {_brief(b)}"
        return None
    flat_a, flat_b = _flat(a), _flat(b)
    differs = _mismatch(flat_a, flat_b)
    count = int(differs.sum())
    if count == 0:
        return None
    first = int(differs.nonzero()[0, 0])
    return (
        f"values differ (compared bitwise, NaN equal to NaN; {count} of {differs.numel()} elements, the first at "
        f"flat index {first}: expected {flat_a[first].item()!r}, got {flat_b[first].item()!r}): "
        f"expected {_brief(a)}, got {_brief(b)}"
    )


def _same_scalar(a: Any, b: Any, tolerance: Tolerance) -> bool:
    """Non-tensor values: ``==``; floats also by the sign of zero, NaN equal to NaN, or within ``tolerance``."""
    numbers = (float, complex)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        if _is_nan(a) and _is_nan(b):
            return True
        if tolerance is not None:
            rtol, atol = tolerance
            return bool(a == b or abs(b - a) <= atol + rtol * abs(a))
        if isinstance(a, float) and isinstance(b, float):
            return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


def _is_nan(x: float | complex) -> bool:
    return math.isnan(x) if isinstance(x, float) else math.isnan(x.real) or math.isnan(x.imag)


def _flat(t: torch.Tensor) -> torch.Tensor:
    """The logical values of ``t`` as a dense, contiguous, one-dimensional tensor of its dtype."""
    t = t.detach()
    if t.is_quantized:
        t = t.dequantize()
    if t.layout != torch.strided:
        t = t.to_dense()
    # a fresh dense copy: contiguous() keeps odd strides of size-one dimensions, which view(dtype) rejects
    return t.resolve_conj().resolve_neg().reshape(-1).clone(memory_format=torch.contiguous_format)


def _mismatch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per element of two flat tensors of one dtype: whether their bits differ (NaN equal to NaN)."""
    if a.is_complex():
        real_a, real_b = torch.view_as_real(a).reshape(-1), torch.view_as_real(b).reshape(-1)
        return _mismatch(real_a, real_b).view(-1, 2).any(-1)
    size = a.element_size()
    differs = (a.view(torch.uint8).view(-1, size) != b.view(torch.uint8).view(-1, size)).any(-1)
    if a.is_floating_point():
        differs &= ~(_isnan(a) & _isnan(b))
    return differs


def _isnan(t: torch.Tensor) -> torch.Tensor:
    try:
        return t.isnan()
    except (RuntimeError, NotImplementedError):  # dtypes without isnan (some float8 formats)
        return t.float().isnan()


def _brief(x: Any) -> str:
    """A value in a mismatch message: a tensor's dtype, shape and first values.

    Examples
    --------
    >>> _brief(torch.tensor(1.5)), _brief(torch.arange(8).view(2, 4))
    ('float32 scalar 1.5', 'int64 tensor of shape (2, 4): [0, 1, 2, 3, 4, 5, ...]')
    >>> _brief(torch.empty(0, 3)), _brief(3)
    ('float32 tensor of shape (0, 3): []', '3')
    """
    if not isinstance(x, torch.Tensor):
        return repr(x)
    dtype = str(x.dtype).removeprefix("torch.")
    shape = ", ".join(map(str, x.shape)) + ("," if x.dim() == 1 else "")
    if x.is_meta:
        return f"{dtype} tensor of shape ({shape}) on meta"
    values = _flat(x)[:6].tolist()
    if x.dim() == 0:
        return f"{dtype} scalar {values[0]}"
    more = ", ..." if x.numel() > 6 else ""
    return f"{dtype} tensor of shape ({shape}): {str(values)[:-1]}{more}]"
