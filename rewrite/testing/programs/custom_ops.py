"""The fuzzer's custom ops (namespace ``fxa_fuzz``), registered when this module is imported.

``fxa_fuzz::mutate_two`` writes both tensor arguments; ``fxa_fuzz::first_half``
returns a view of its argument. The library registers them by running exactly
:data:`CUSTOM_OPS_SOURCE`, the text that :meth:`~rewrite.testing.Program.source`
embeds, so a repro behaves as the fuzzer did.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["CUSTOM_OPS_SOURCE", "FUZZ_NAMESPACE"]

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
