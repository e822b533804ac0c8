"""Pass managers written as out-of-tree vLLM platforms write theirs (for ``test_vllm.py``).

vllm-ascend's ``AscendPostGradPassManager`` and vllm-musa's manager subclass vLLM's
``PostGradPassManager``, import vLLM's pass classes into their own modules and configure
their own pass lists; :class:`PlatformPostGradPassManager` does the same (with no fusion
pass of its own: what matters here is that clone elimination is built from this module's
name for vLLM's class). :class:`OwnListPassManager` builds its pass list itself, with no
``clone_elimination`` attribute at all.
"""

from __future__ import annotations

from typing import Any

import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass
from vllm.compilation.passes.inductor_pass import InductorPass
from vllm.compilation.passes.ir.clone_elimination import UnsafeCloneEliminationPass
from vllm.compilation.passes.ir.lowering_pass import VllmIRLoweringPass
from vllm.compilation.passes.pass_manager import PostGradPassManager
from vllm.compilation.passes.utility.fix_functionalization import FixFunctionalizationPass
from vllm.compilation.passes.utility.post_cleanup import PostCleanupPass
from vllm.config import VllmConfig


class PlatformPostGradPassManager(PostGradPassManager):
    """A platform's manager: vLLM's ``__call__`` and ``uuid``, its own ``configure``."""

    def configure(self, config: VllmConfig) -> None:
        self.pass_config = config.compilation_config.pass_config
        self.passes = []  # the platform's fusion passes would go here
        self.ir_lowering = VllmIRLoweringPass(config)
        self.clone_elimination = UnsafeCloneEliminationPass(config)
        self.post_cleanup = PostCleanupPass(config)
        self.fix_functionalization = FixFunctionalizationPass(config)


class OwnListPassManager(CustomGraphPass):
    """A manager that builds and runs its own list of passes."""

    def __init__(self, config: VllmConfig) -> None:
        self.passes: list[InductorPass] = [VllmIRLoweringPass(config), UnsafeCloneEliminationPass(config)]

    def __call__(self, graph: torch.fx.Graph) -> None:
        for pass_ in self.passes:
            pass_(graph)

    def uuid(self) -> Any:
        return InductorPass.hash_dict({"passes": [p.uuid() for p in self.passes]})
