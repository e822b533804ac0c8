"""Check that a rewritten program is equivalent to the original, by real execution.

:func:`check_equivalent` runs an original and a rewritten program on fresh copies of
the same real inputs and checks the four soundness clauses of docs/DESIGN.md.  The first
clause that fails raises :class:`rewrite.errors.NotEquivalent`, whose ``clause`` is:

1. ``"output"``: every output of the rewritten program equals the original's output
   at the same position: values (exact for integers and booleans, close with
   ``torch.testing`` default tolerances for floating point, NaN equal to NaN), dtype,
   shape, and the layout the original produced (strides of dimensions longer than
   one, storage offset).  Non-tensor outputs are compared with ``==``.
2. ``"input-mutation"``: every non-donated input, parameter, buffer and tensor
   constant ends with the same value (and layout) after both runs.  Donated inputs
   are skipped: their final value is unspecified.
3. ``"new-aliasing"``: the rewritten program's outputs share no storage that the
   original's outputs did not share at the same positions: output with a
   non-donated input, output with a parameter, buffer or constant, output with
   another output.  An output may take over a donated input's storage.
4. ``"raises"``: the rewritten program raised where the original did not.

The oracle refuses to judge, with :class:`OracleError` (not a
:class:`~rewrite.errors.NotEquivalent`, and never a silent pass), when a check
would be vacuous: ``reason`` is

- ``"original-raises"``: the original program raised on the inputs (wrong number
  of inputs, shapes it rejects...), whether or not the rewritten one raised too.
  A rewrite is only judged on inputs the original accepts (docs/DESIGN.md: "for every
  input satisfying G's assumptions").
- ``"nothing-compared"``: every clause passed, but no tensor with data took part:
  the original returned no tensor on a real device, and no non-donated tensor
  input or module state lives on one (for example, every tensor is on the
  ``meta`` device, or the program returns no tensor and has nothing to mutate).

Inputs are copied so that each input keeps its sizes, strides and storage offset,
and inputs (and module state) that share a storage share one fresh storage in the
copy.  Module state (parameters, buffers, tensor attributes) is replaced by such
copies for the duration of each run, so a run that mutates a buffer does not leak
into the other one.  Both programs run under ``torch.no_grad()``.

:func:`copy_program` gives a pass an independent program to rewrite.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from aliasing.errors import AliasingError, InvalidTargetError
from rewrite.errors import NotEquivalent

__all__ = ["OracleError", "check_equivalent", "copy_program"]

ProgramLike = torch.fx.GraphModule | ExportedProgram


class OracleError(AliasingError):
    """:func:`check_equivalent` cannot judge the rewrite: passing would check nothing.

    Not a :class:`~rewrite.errors.NotEquivalent` (nor an ``AssertionError``): no
    difference was found, the check itself could not be made.  ``reason`` is
    ``"original-raises"`` (the original program raised on the given inputs;
    ``error`` is what it raised) or ``"nothing-compared"`` (no tensor with data
    took part in the comparison).

    Examples
    --------
    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: x + 1)
    >>> try:
    ...     check_equivalent(gm, gm, [])  # the original rejects zero inputs
    ... except OracleError as err:
    ...     print(err.reason)
    original-raises
    """

    def __init__(self, reason: str, message: str, error: BaseException | None = None) -> None:
        self.reason = reason
        self.error = error
        super().__init__(f"[{reason}] {message}")
_StateSlot = tuple[torch.nn.Module, str, str]  # (owner module, "param"|"buffer"|"attr", name)
_StorageKey = tuple[str, int]


def copy_program(program: ProgramLike) -> ProgramLike:
    """Return an independent copy of ``program`` that a pass can rewrite.

    The copy has a new graph whose nodes keep their names; node ``meta`` dicts are
    copied shallowly (fake tensors in ``meta['val']`` are shared, never copied).
    Parameters, buffers and constants are carried over by reference with the same
    kind (parameter, buffer, plain attribute); subgraph modules of higher-order ops
    are copied recursively.  An :class:`~torch.export.ExportedProgram` is rebuilt
    around a copy of its graph module.

    Examples
    --------
    >>> import torch
    >>> gm = torch.fx.symbolic_trace(lambda x: x.clone())
    >>> gm2 = copy_program(gm)
    >>> clone = next(n for n in gm2.graph.nodes if n.op == "call_method")
    >>> _ = clone.replace_all_uses_with(clone.args[0])
    >>> gm2.graph.erase_node(clone)
    >>> len(gm.graph.nodes), len(gm2.graph.nodes)
    (3, 2)
    """
    if isinstance(program, ExportedProgram):
        gm = _copy_graph_module(program.graph_module)
        return ExportedProgram(
            root=gm,
            graph=gm.graph,
            graph_signature=copy.deepcopy(program.graph_signature),
            state_dict=dict(program.state_dict),
            range_constraints=copy.deepcopy(program.range_constraints),
            module_call_graph=_deepcopy_quietly(program.module_call_graph),
            example_inputs=program.example_inputs,
            constants=dict(program.constants),
            verifiers=list(program.verifiers),
        )
    if not isinstance(program, torch.fx.GraphModule):
        raise InvalidTargetError(f"copy_program expects a GraphModule or ExportedProgram, not {type(program)}")
    return _copy_graph_module(program)


def _copy_graph_module(program: torch.fx.GraphModule) -> torch.fx.GraphModule:
    graph = copy.deepcopy(program.graph)  # Graph.__deepcopy__ copies node meta shallowly
    new = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph(), class_name=type(program).__name__)
    targets = {str(n.target) for n in program.graph.nodes if n.op in ("get_attr", "call_module")}
    for target in sorted(targets, key=lambda t: t.count(".")):
        _carry_attr(program, new, target)
    new.graph = graph  # the setter recompiles
    new.meta = dict(program.meta)
    return new


def _deepcopy_quietly(value: Any) -> Any:
    """``copy.deepcopy``, silencing torch's deprecation warning about ``LeafSpec`` tree specs."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*LeafSpec", category=FutureWarning)
        return copy.deepcopy(value)


def _carry_attr(src: torch.nn.Module, dst: torch.nn.Module, target: str) -> None:
    *path, field = target.split(".")
    for item in path:
        src = getattr(src, item)
        nxt = dst._modules.get(item)
        if nxt is src:  # a parent module was carried over whole
            return
        if nxt is None:
            nxt = torch.nn.Module()
            dst.add_module(item, nxt)
        dst = nxt
    value = getattr(src, field)
    if isinstance(value, torch.fx.GraphModule):
        value = copy_program(value)
    if field in src._parameters:
        dst.register_parameter(field, value)
    elif field in src._buffers:
        dst.register_buffer(field, value, persistent=field not in src._non_persistent_buffers_set)
    elif field in src._modules:
        dst.add_module(field, value)
    else:
        object.__setattr__(dst, field, value)


def check_equivalent(
    original: ProgramLike,
    rewritten: ProgramLike,
    example_inputs: Sequence[Any] | Callable[[], Sequence[Any]],
    *,
    donated_inputs: Sequence[int] = (),
) -> None:
    """Raise :class:`NotEquivalent` unless ``rewritten`` behaves as ``original``.

    Parameters
    ----------
    original, rewritten
        GraphModules, or ExportedPrograms (run through ``.module()``).
    example_inputs
        Real inputs (tensors and other values; for an ExportedProgram the user
        inputs), or a zero-argument callable returning them (called once).  Each
        run gets fresh copies that keep layouts and storage sharing.
    donated_inputs
        Positions of donated inputs: placeholder positions of ``original``'s graph.
        For a GraphModule they index the flattened inputs; for an ExportedProgram
        they are translated through its graph signature to user inputs.

    Raises
    ------
    NotEquivalent
        With ``clause`` one of ``"output"``, ``"input-mutation"``,
        ``"new-aliasing"``, ``"raises"`` (see the module docstring).
    OracleError
        When the check cannot be made: the original program raises on the inputs
        (``reason="original-raises"``, also when both raise), or no tensor with
        data could be compared (``reason="nothing-compared"``).

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
    """
    raw = example_inputs() if callable(example_inputs) else example_inputs
    donated = _donated_leaves(original, frozenset(donated_inputs))
    run_a = _Run(original, raw)
    if run_a.error is not None:
        err = run_a.error
        raise OracleError(
            "original-raises",
            f"the original program raised {type(err).__name__} on these inputs, so no rewrite can be judged "
            f"on them: {err}",
            err,
        ) from err
    run_b = _Run(rewritten, raw)
    if run_b.error is not None:
        err = run_b.error
        raise NotEquivalent("raises", f"only the rewritten program raised {type(err).__name__}: {err}")
    if run_a.out_spec != run_b.out_spec:
        raise NotEquivalent("output", f"output structure differs: {run_a.out_spec} vs {run_b.out_spec}")
    for i, (a, b) in enumerate(zip(run_a.outputs, run_b.outputs)):
        problem = _difference(a, b)
        if problem:
            raise NotEquivalent("output", f"output {i}: {problem}")
    for i, (a, b) in enumerate(zip(run_a.inputs, run_b.inputs)):
        problem = None if i in donated else _difference(a, b)
        if problem:
            raise NotEquivalent("input-mutation", f"input {i} ends differently: {problem}")
    for name in sorted(run_a.state.keys() | run_b.state.keys()):
        # state that only one program has is left alone by the other: it keeps its initial value
        final_a = run_a.state.get(name, run_b.initial.get(name))
        problem = _difference(final_a, run_b.state.get(name, run_a.initial.get(name)))
        if problem:
            raise NotEquivalent("input-mutation", f"module state {name!r} ends differently: {problem}")
    new_pairs = sorted(run_b.sharing(donated) - run_a.sharing(donated))
    if new_pairs:
        out, other = new_pairs[0]
        raise NotEquivalent(
            "new-aliasing",
            f"output {out} shares storage with {other} in the rewritten program, not in the original",
        )
    if not run_a.compared_data(donated):
        raise OracleError(
            "nothing-compared",
            "no tensor with data was compared: the original returns no tensor off the meta device and has no "
            "non-donated tensor input or module state off it that a run could mutate",
        )


class _Run:
    """One execution of a program on fresh copies of the inputs and module state."""

    def __init__(self, program: ProgramLike, raw_inputs: Sequence[Any]) -> None:
        module = program.module() if isinstance(program, ExportedProgram) else program
        leaves, in_spec = pytree.tree_flatten(list(raw_inputs))
        slots = _state_slots(module)
        originals = {name: _read_slot(slot) for name, slot in slots.items()}
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)] + list(originals.values())
        fresh = _clone_tensors(tensors)
        self.inputs = [fresh.get(id(x), x) if isinstance(x, torch.Tensor) else x for x in leaves]
        self.error: Exception | None = None
        self.outputs: list[Any] = []
        self.out_spec: pytree.TreeSpec | None = None
        with _swapped_state(slots, {n: fresh[id(t)] for n, t in originals.items()}) as final:
            try:
                with torch.no_grad():
                    result = module(*pytree.tree_unflatten(self.inputs, in_spec))
                self.outputs, self.out_spec = pytree.tree_flatten(result)
            except Exception as err:  # clause 4, and the oracle's refusal when the original raises
                self.error = err
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


def _difference(a: Any, b: Any) -> str | None:
    """Describe how ``b`` differs from the reference ``a``, or return None."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return f"expected {_brief(a)}, got {_brief(b)}"
        same = a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)
        return None if same else f"expected {a!r}, got {b!r}"
    for what in ("dtype", "shape", "device"):
        if getattr(a, what) != getattr(b, what):
            return f"{what} {getattr(b, what)} instead of {getattr(a, what)}"
    if a.numel() > 0:
        if a.storage_offset() != b.storage_offset():
            return f"storage offset {b.storage_offset()} instead of {a.storage_offset()}"
        if any(n > 1 and sa != sb for n, sa, sb in zip(a.shape, a.stride(), b.stride())):
            return f"strides {b.stride()} instead of {a.stride()}"
    try:
        torch.testing.assert_close(b.detach(), a.detach(), equal_nan=True, check_stride=False)
    except AssertionError as err:
        detail = "; ".join(line.strip() for line in str(err).splitlines()[1:] if line.strip())
        return f"values differ ({detail}): expected {_brief(a)}, got {_brief(b)}"
    return None


def _brief(x: Any) -> str:
    if not isinstance(x, torch.Tensor):
        return repr(x)
    values = x.detach().flatten()[:6].tolist()
    more = ", ..." if x.numel() > 6 else ""
    return f"tensor{tuple(x.shape)} {x.dtype} {str(values)[:-1]}{more}]"
