"""Independent copies of programs, for passes that rewrite a copy and keep the original.

:func:`copy_program` copies a ``GraphModule`` or an ``ExportedProgram``: a new
graph (node names kept, node ``meta`` copied shallowly), the same parameters,
buffers and constants by reference, subgraph modules copied recursively.
:func:`rewrite.explain.explain` and the ``fx-aliasing`` command line rewrite such
a copy; :func:`rewrite.testing.copy_program` is the same function.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram

from aliasing.errors import InvalidTargetError

__all__ = ["ProgramLike", "copy_program"]

#: What :func:`copy_program` copies.
ProgramLike = torch.fx.GraphModule | ExportedProgram


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
