"""A drawn program: its Python source, its traced graph and its inputs (:class:`Program`).

Each program is Python source first: the function is compiled from the same
text that :meth:`Program.source` returns, and its graph is traced from it by
``make_fx`` (traces are cached by source, see :func:`_trace`).
"""

from __future__ import annotations

import collections
import re
import textwrap
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from rewrite.testing.equivalence import quiet_torch_trace
from rewrite.testing.programs.custom_ops import CUSTOM_OPS_SOURCE

__all__ = ["Program"]

_HEADER = "import torch\nfrom torch.fx.experimental.proxy_tensor import make_fx\n"


class Program:
    """One drawn program: its source, its traced graph and a way to make inputs.

    Attributes
    ----------
    graph_module : torch.fx.GraphModule
        The program traced by ``make_fx(fn, tracing_mode=tracing_mode)``: every
        tensor node's ``meta['val']`` is a fake tensor (with symbolic sizes in
        ``"symbolic"`` mode). Passes should rewrite a
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
        self._fn, self._make_inputs = _load(function_source, inputs_source)
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
        parts.append(f"gm = make_fx(program, tracing_mode={self.tracing_mode!r})(*make_inputs())\n")
        parts.append("outputs = program(*make_inputs())\n")
        return "\n".join(parts)

    def __repr__(self) -> str:
        body = textwrap.indent(self.inputs_source + self.function_source, "    ")
        return f"Program(seed={self.seed}, donated_inputs={self.donated_inputs}, num_ops={self.num_ops}):\n{body}"


_TRACES: collections.OrderedDict[tuple[str, str, str], tuple[torch.fx.GraphModule, str]] = collections.OrderedDict()
_TRACE_CACHE_SIZE = 512


def _load(function_source: str, inputs_source: str) -> tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]:
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
