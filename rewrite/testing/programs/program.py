"""A drawn program: its Python source, its traced graph and its inputs (:class:`Program`).

Each program is Python source first: the function is compiled from the same
text that :meth:`Program.source` returns, and its graph is traced from it by
``make_fx`` (traces are cached by source, see :func:`_trace`).
"""

from __future__ import annotations

import collections
import io
import re
import textwrap
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from aliasing.core.fake_values import mark_offsets_unknown
from rewrite.testing.equivalence import quiet_torch_trace
from rewrite.testing.programs.custom_ops import CUSTOM_OPS_SOURCE

__all__ = ["TRACING_MODES", "Program", "load_functions"]

_HEADER = "import torch\nfrom torch.fx.experimental.proxy_tensor import make_fx\n"

#: How a drawn program's graph is made: ``make_fx`` with fake or symbolic sizes (the graph's fake
#: tensors keep storage identity), ``make_fx`` in real mode, and ``torch.export`` saved to a
#: ``.pt2`` and loaded again (every value in a fake storage of its own: what a program loaded
#: from its file gives the analysis).
#: ``"export-dynamic"``: ``torch.export`` with every input size dynamic (``Dim.AUTO``), kept in
#: memory, and checked at its sizes' boundaries too (:attr:`Program.input_sets`).
TRACING_MODES = ("fake", "symbolic", "real", "export-save-load", "export-dynamic")

_EXPORT_SAVE_LOAD = """\
import io

from aliasing.core.fake_values import mark_offsets_unknown


class Program(torch.nn.Module):
    def forward(self, *args):
        return program(*args)


buffer = io.BytesIO()
torch.export.save(torch.export.export(Program(), tuple(make_inputs())), buffer)
buffer.seek(0)
ep = torch.export.load(buffer)
# the module takes its user inputs at any storage offset
mark_offsets_unknown(p for p in ep.graph.find_nodes(op="placeholder") if p.name in ep.graph_signature.user_inputs)
gm = ep.graph_module
"""

_EXPORT_DYNAMIC = """\
from aliasing.core.fake_values import mark_offsets_unknown
from rewrite.testing.programs.boundary import boundary_inputs


class Program(torch.nn.Module):
    def forward(self, *args):
        return program(*args)


inputs = make_inputs()
dynamic = tuple({d: torch.export.Dim.AUTO for d in range(t.dim())} for t in inputs)
ep = torch.export.export(Program(), tuple(inputs), dynamic_shapes=(dynamic,))
# the module takes its user inputs at any storage offset
mark_offsets_unknown(p for p in ep.graph.find_nodes(op="placeholder") if p.name in ep.graph_signature.user_inputs)
gm = ep.graph_module
input_sets = [make_inputs, *boundary_inputs(ep, seed=0)]  # the checks run on each
"""


class Program:
    """One drawn program: its source, its traced graph and a way to make inputs.

    Attributes
    ----------
    graph_module : torch.fx.GraphModule
        The traced program (see :data:`TRACING_MODES`): every tensor node's
        ``meta['val']`` is a fake tensor (with symbolic sizes in ``"symbolic"``
        mode, each in a fake storage of its own in ``"real"`` and
        ``"export-save-load"`` modes). Passes should rewrite a
        copy (:func:`~rewrite.testing.check_pass` makes one).
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
        One of :data:`TRACING_MODES`: how :attr:`graph_module` was traced.
    input_sets : tuple of callables
        Makers of the inputs every check runs the program on: :meth:`make_inputs`
        first, then, in ``"export-dynamic"`` mode, inputs at each symbolic size's
        boundaries (:func:`rewrite.testing.programs.boundary.boundary_inputs`).
    """

    __slots__ = (
        "_fn",
        "_make_inputs",
        "donated_inputs",
        "function_source",
        "graph_module",
        "input_sets",
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
    input_sets: tuple[Callable[[], list[torch.Tensor]], ...]

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
        self._fn, self._make_inputs = load_functions(function_source, inputs_source)
        self.function_source = function_source
        self.inputs_source = inputs_source
        self.donated_inputs = donated_inputs
        self.seed = seed
        self.num_ops = num_ops
        self.uses_custom_ops = uses_custom_ops
        self.tracing_mode = tracing_mode
        self.graph_module, boundary = _trace(self._fn, self._make_inputs, function_source, inputs_source, tracing_mode, seed)
        self.input_sets = (self._make_inputs, *boundary)

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, name):
            raise AttributeError(f"Program.{name} is read-only")
        object.__setattr__(self, name, value)

    def make_inputs(self) -> list[torch.Tensor]:
        """Fresh real inputs, the same values on every call, none sharing storage.

        Examples
        --------
        >>> from hypothesis import find
        >>> from rewrite.testing import programs
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
        >>> from rewrite.testing import programs
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
        if self.tracing_mode == "export-save-load":
            parts.append(_EXPORT_SAVE_LOAD)
        elif self.tracing_mode == "export-dynamic":
            parts.append(_EXPORT_DYNAMIC)
        else:
            parts.append(f"gm = make_fx(program, tracing_mode={self.tracing_mode!r})(*make_inputs())\n")
        parts.append("outputs = program(*make_inputs())\n")
        return "\n".join(parts)

    def __repr__(self) -> str:
        body = textwrap.indent(self.inputs_source + self.function_source, "    ")
        return f"Program(seed={self.seed}, donated_inputs={self.donated_inputs}, num_ops={self.num_ops}):\n{body}"


_Traced = tuple[torch.fx.GraphModule, tuple[Callable[[], list[torch.Tensor]], ...]]
_TRACES: collections.OrderedDict[tuple[str, str, str], tuple[_Traced, str]] = collections.OrderedDict()
_TRACE_CACHE_SIZE = 512


def load_functions(
    function_source: str, inputs_source: str
) -> tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]:
    """The ``program`` function and the ``make_inputs`` function the two sources define."""
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(function_source + "\n" + inputs_source, "<fxa_fuzz program>", "exec"), namespace)
    return namespace["program"], namespace["make_inputs"]


def _trace(
    fn: Callable[..., Any],
    make_inputs: Callable[[], list[torch.Tensor]],
    function_source: str,
    inputs_source: str,
    tracing_mode: str = "fake",
    seed: int = 0,
) -> _Traced:
    """The graph of ``fn`` on fresh inputs by ``tracing_mode`` (:data:`TRACING_MODES`), and the makers of
    the boundary inputs (``"export-dynamic"`` mode only), cached by source and mode.

    Hypothesis draws the same program many times while shrinking; a trace does
    not depend on input values, so the key leaves the seed out. A cached module
    is reused only while its graph is unchanged (a caller may have rewritten it).
    """
    key = (function_source, re.sub(r"manual_seed\(\d+\)", "manual_seed(SEED)", inputs_source), tracing_mode)
    hit = _TRACES.get(key)
    if hit is not None and str(hit[0][0].graph) == hit[1]:
        _TRACES.move_to_end(key)
        return hit[0]
    boundary: tuple[Callable[[], list[torch.Tensor]], ...] = ()
    with quiet_torch_trace():
        if tracing_mode == "export-save-load":
            gm = _export_save_load(fn, make_inputs())
        elif tracing_mode == "export-dynamic":
            gm, boundary = _export_dynamic(fn, make_inputs(), seed)
        else:
            mode: Literal["fake", "symbolic", "real"] = tracing_mode  # type: ignore[assignment]
            gm = make_fx(fn, tracing_mode=mode)(*make_inputs())
    traced = (gm, boundary)
    _TRACES[key] = (traced, str(gm.graph))
    if len(_TRACES) > _TRACE_CACHE_SIZE:
        _TRACES.popitem(last=False)
    return traced


class _Exported(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _export_save_load(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> torch.fx.GraphModule:
    """``fn`` exported with ``torch.export``, saved to a ``.pt2`` in memory and loaded again: the
    loaded program's graph module (its placeholders are the user inputs, in order)."""
    buffer = io.BytesIO()
    torch.export.save(torch.export.export(_Exported(fn), tuple(inputs)), buffer)
    buffer.seek(0)
    return _graph_of(torch.export.load(buffer))


def _export_dynamic(
    fn: Callable[..., Any], inputs: list[torch.Tensor], seed: int
) -> tuple[torch.fx.GraphModule, tuple[Callable[[], list[torch.Tensor]], ...]]:
    """``fn`` exported with every input size dynamic (``Dim.AUTO``), in memory: its graph module
    and the makers of its inputs at the sizes' boundaries."""
    from rewrite.testing.programs.boundary import boundary_inputs

    dynamic = tuple(dict.fromkeys(range(t.dim()), torch.export.Dim.AUTO) for t in inputs)
    ep = torch.export.export(_Exported(fn), tuple(inputs), dynamic_shapes=(dynamic,))  # (one entry: *args)
    return _graph_of(ep), tuple(boundary_inputs(ep, seed=seed))


def _graph_of(ep: torch.export.ExportedProgram) -> torch.fx.GraphModule:
    """The graph module of an exported program, its user inputs marked as having no guarded storage
    offset (:data:`aliasing.core.target.OFFSET_UNKNOWN`: the program's module takes any), as the
    analysis takes them for the ``ExportedProgram`` itself."""
    user = set(ep.graph_signature.user_inputs)
    mark_offsets_unknown(p for p in ep.graph.find_nodes(op="placeholder") if p.name in user)
    gm: torch.fx.GraphModule = ep.graph_module
    return gm
