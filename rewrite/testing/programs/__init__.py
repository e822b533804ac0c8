"""Random aliasing-heavy programs as a Hypothesis strategy, and a fuzzer for FX passes.

:func:`programs` draws straight-line PyTorch programs built from exactly what
alias analyses and clone elimination get wrong: views of every kind
(``view``, ``reshape``, ``slice``, ``select``, ``narrow``, ``split``,
``unbind``, ``chunk``, ``transpose``, ``permute``, ``t``, ``expand``,
``unsqueeze``, ``diagonal``, ``as_strided``), in-place ops (``add_``,
``mul_``, ``copy_``, ``zero_``, ``index_put_``, ``masked_fill_``, ``out=`` by
keyword), custom ops with alias annotations (one writes two arguments, one
returns a view), ops with effects their schemas do not declare (the
entries of :data:`aliasing.core.ops.HIDDEN_EFFECTS` that ``make_fx``
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

The package's modules: :mod:`~rewrite.testing.programs.profiles` (Hypothesis
settings, and the pause of Hypothesis's explain-phase tracer while the fuzzer
works), :mod:`~rewrite.testing.programs.custom_ops` (the fuzzer's custom ops,
registered on import), :mod:`~rewrite.testing.programs.program` (:class:`Program`),
:mod:`~rewrite.testing.programs.values` and :mod:`~rewrite.testing.programs.inputs`
(real tensors and inputs of a program being drawn), the statement builder
(:mod:`~rewrite.testing.programs.state`, and a mixin per kind of statement:
:mod:`~rewrite.testing.programs.views`, :mod:`~rewrite.testing.programs.writes`,
:mod:`~rewrite.testing.programs.norms`, :mod:`~rewrite.testing.programs.patterns`
with its table of patterns; :mod:`~rewrite.testing.programs.builder` puts them
together), :mod:`~rewrite.testing.programs.strategies` (:func:`programs`, :func:`sample_programs`) and
:mod:`~rewrite.testing.programs.checking` (:func:`check_pass`).
"""

from __future__ import annotations

# Hypothesis first: without it, importing this package fails before the custom ops are registered.
from rewrite.testing.programs.profiles import CI_SETTINGS, FUZZ_SETTINGS, SOAK_SETTINGS, register_profiles

# isort: split
from rewrite.testing.programs.checking import check_pass
from rewrite.testing.programs.custom_ops import CUSTOM_OPS_SOURCE, FUZZ_NAMESPACE
from rewrite.testing.programs.program import Program
from rewrite.testing.programs.strategies import programs, sample_programs

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
    "sample_programs",
]
