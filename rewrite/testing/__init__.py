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
- :func:`greedy_removable` is a dynamic oracle of what can soundly go, and
  :func:`measure_precision` reports how much of it any pass removes.
"""

from aliasing.oracle import AnalysisUnsound, Exactness, Observed, check_analysis, observe_memory
from rewrite.errors import NotEquivalent
from rewrite.testing.equivalence import OracleError, check_equivalent, copy_program
from rewrite.testing.precision import PrecisionReport, greedy_removable, measure_precision, sample_programs
from rewrite.testing.programs import FUZZ_SETTINGS, Program, check_pass, programs

__all__ = [
    "FUZZ_SETTINGS",
    "AnalysisUnsound",
    "Exactness",
    "NotEquivalent",
    "Observed",
    "OracleError",
    "PrecisionReport",
    "Program",
    "check_analysis",
    "check_equivalent",
    "check_pass",
    "copy_program",
    "greedy_removable",
    "measure_precision",
    "observe_memory",
    "programs",
    "sample_programs",
]
