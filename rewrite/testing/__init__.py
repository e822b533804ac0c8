"""Testing tools for fx-aliasing users: real-execution oracles and property-based fuzzing.

- :func:`check_equivalent` runs an original and a rewritten program on the same
  real inputs from the same random-number-generator state, compares outputs and final
  inputs exactly (bitwise; a tolerance only when asked for), raising and the generators'
  final state, and raises :class:`NotEquivalent` naming the soundness clause that failed,
  or :class:`OracleError` when it cannot judge (inputs that do not fit the original's
  signature, nothing to compare).
- :func:`check_analysis` runs a graph on real tensors and checks that an
  :class:`aliasing.AliasAnalysis` never says "no alias", "no overlap" or
  "no writer" where real memory says otherwise.
- :func:`programs` is a Hypothesis strategy of random aliasing-heavy programs;
  :func:`check_pass` fuzzes any FX pass (over a GraphModule or a Graph) against
  :func:`check_equivalent`; :data:`FUZZ_SETTINGS` are Hypothesis settings for
  fuzzing in your own test suite.
- :func:`sample_programs` draws a fixed list of programs from :func:`programs` (per seed).

:func:`check_equivalent`, :func:`check_analysis` and :func:`copy_program` need only
torch; :func:`programs`, :func:`check_pass`, :func:`sample_programs` and
:data:`FUZZ_SETTINGS` need Hypothesis (``pip install 'fx-aliasing[test]'``) and are
imported the first time one of them is used.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

from aliasing.verification.oracle import AnalysisUnsound, Exactness, Observed, check_analysis, observe_memory
from rewrite.editing.copying import copy_program
from rewrite.errors import NotEquivalent, OracleError
from rewrite.lazy import lazy_names
from rewrite.testing.equivalence import check_equivalent

if TYPE_CHECKING:
    from rewrite.testing.programs import FUZZ_SETTINGS, Program, check_pass, programs, sample_programs

#: The names that need Hypothesis (the ``test`` extra), each with the module that defines it:
#: imported on first use (PEP 562), so that the oracles above import without Hypothesis and
#: without registering the fuzzer's custom ops.
_NEEDS_HYPOTHESIS = {
    "FUZZ_SETTINGS": "rewrite.testing.programs",
    "Program": "rewrite.testing.programs",
    "check_pass": "rewrite.testing.programs",
    "programs": "rewrite.testing.programs",
    "sample_programs": "rewrite.testing.programs",
}


class _Package(types.ModuleType):
    """This package, whose ``programs`` stays the strategy once the submodule of that name is imported.

    Importing ``rewrite.testing.programs`` binds the submodule as the package's
    ``programs`` attribute; the strategy of that name is what users import.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name == "programs" and isinstance(value, types.ModuleType) and hasattr(value, "programs"):
            value = value.programs
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "FUZZ_SETTINGS",
    "AnalysisUnsound",
    "Exactness",
    "NotEquivalent",
    "Observed",
    "OracleError",
    "Program",
    "check_analysis",
    "check_equivalent",
    "check_pass",
    "copy_program",
    "observe_memory",
    "programs",
    "sample_programs",
]

__getattr__, __dir__ = lazy_names(globals(), _NEEDS_HYPOTHESIS, __all__)
