"""The SGLang adapter (:mod:`rewrite.sglang`) against the real ``sglang`` package.

Needs SGLang 0.5.23 beside torch 2.14.1 (the torch it pins); ``.ci/run`` installs the
package without its serving dependencies, and the few its compilation and plugin modules
import. Skipped where sglang is not installed. SGLang's ``SGLangBackend`` module needs a GPU
to import (its piecewise backends); these tests set up the pass manager as it does: an empty
``PostGradPassManager`` as Inductor's ``post_grad_custom_post_pass``, compiled with
auto-functionalization v1, inside SGLang's pass context.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "SGLang is not installed: .ci/run runs these tests beside torch 2.14.1 "
        "(pip install --no-deps sglang==0.5.23 and the modules its compilation package imports)",
        allow_module_level=True,
    )

import torch
from sglang.srt.compilation.inductor_pass import InductorPass, SGLangInductorPass, pass_context
from sglang.srt.compilation.pass_manager import PostGradPassManager
from torch._inductor.utils import run_and_get_code

from benchmarks.inductor_copies import count_copies
from rewrite.sglang import CloneEliminationPass

#: Compiles with Inductor's C++ backend.
pytestmark = pytest.mark.integration


@torch.library.custom_op("fxa_sglang_test::kv_write_", mutates_args=("k_cache", "v_cache"))
def kv_write_(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    k_cache.copy_(k)
    v_cache.copy_(v)


@torch.library.custom_op("fxa_sglang_test::rms_norm_", mutates_args=("x",))
def rms_norm_(x: torch.Tensor, weight: torch.Tensor) -> None:
    x.mul_(torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight)


def kv_pool_layers(pool: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Two layers writing the two halves of one K/V allocation (``pool[0]``, ``pool[1]``)."""
    h = x
    for _ in range(2):
        kv_write_(pool[0], pool[1], h @ w, h * 2)
        h = (pool[0] * h).relu() + pool[1]
    return h


def residual_read_after(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The normalized copy must stay: the value before the in-place norm is returned too."""
    y = x * 2
    z = y.clone()
    rms_norm_(z, weight)
    return z, y + 1


def _inputs(fn: Callable[..., Any]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(2, 16, 16), (16, 16), (16, 16)] if fn is kv_pool_layers else [(4, 16), (16,)]
    return [torch.randn(s, generator=gen) for s in shapes]


def _compile(fn: Callable[..., Any], manager: PostGradPassManager) -> tuple[Any, list[torch.Tensor], int]:
    """Compile as SGLang's backend configures Inductor; the outputs, the inputs after the call, the bytes copied."""
    torch._dynamo.reset()
    options = {"enable_auto_functionalized_v2": False, "post_grad_custom_post_pass": manager}
    inputs = _inputs(fn)
    with pass_context(None), torch._inductor.config.patch(force_disable_caches=True):
        out, codes = run_and_get_code(torch.compile(fn, options=options, fullgraph=True), *inputs)
    copied = 0
    for code in codes:
        counted = count_copies(code)
        copied += counted.clone_bytes + counted.copy_into_bytes + counted.copy_back_bytes
    return out, inputs, copied


def test_is_an_sglang_pass_with_a_stable_uuid() -> None:
    p = CloneEliminationPass()
    assert isinstance(p, SGLangInductorPass) and isinstance(p, InductorPass)
    manager = PostGradPassManager()
    manager.add(p)  # SGLang's add() asserts an InductorPass
    assert p.uuid() == CloneEliminationPass().uuid() != CloneEliminationPass(guard=False).uuid()
    done = subprocess.run(
        [sys.executable, "-c", "from rewrite.sglang import CloneEliminationPass; print(CloneEliminationPass().uuid())"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert done.stdout.split()[-1] == p.uuid()


@pytest.mark.parametrize(("fn", "ours_copied"), [(kv_pool_layers, 0), (residual_read_after, None)])
def test_sglang_compile_against_eager_and_stock(fn: Callable[..., Any], ours_copied: int | None) -> None:
    """Auto-functionalized v1 graphs through the lowering, the planner and the guard: the results
    and the inputs' mutations of eager, and never more bytes copied than stock Inductor."""
    inputs = _inputs(fn)
    expected = fn(*inputs)
    runs = {}
    for name in ("stock", "ours"):
        manager = PostGradPassManager()
        if name == "ours":
            manager.add(CloneEliminationPass())
        out, after, copied = _compile(fn, manager)
        outs = out if isinstance(out, tuple) else (out,)
        wants = expected if isinstance(expected, tuple) else (expected,)
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(outs, wants)), name
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(after, inputs)), name  # the same mutations
        runs[name] = (copied, manager)
    assert runs["ours"][0] <= runs["stock"][0]
    if ours_copied is not None:
        assert runs["ours"][0] == ours_copied < runs["stock"][0]
    report = runs["ours"][1].passes[0].last_report
    assert report is not None and report.error is None


_PLUGIN_PROBE = """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.compilation.pass_manager import PostGradPassManager
print(*[type(p).__module__ + "." + type(p).__name__ for p in PostGradPassManager().passes] or ["none"])
"""


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"FX_ALIASING_SGLANG": "1"}, "rewrite.sglang.CloneEliminationPass"),
        ({"FX_ALIASING_SGLANG": "1", "SGLANG_PLUGINS": "fx_aliasing"}, "rewrite.sglang.CloneEliminationPass"),
        ({}, "none"),
        ({"FX_ALIASING_SGLANG": "0"}, "none"),
        ({"FX_ALIASING_SGLANG": "1", "SGLANG_PLUGINS": "other"}, "none"),
    ],
    ids=["enabled", "enabled-allow-listed", "unset", "disabled", "not-allow-listed"],
)
def test_general_plugin_through_sglangs_plugin_loader(env: dict[str, str], expected: str) -> None:
    """The package's ``sglang.srt.plugins`` entry point, loaded by SGLang's own loader in a fresh process."""
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="sglang.srt.plugins") if e.name == "fx_aliasing"]
    assert ep.value == "rewrite.sglang:plugin"
    clean = {k: v for k, v in os.environ.items() if k not in ("FX_ALIASING_SGLANG", "SGLANG_PLUGINS")}
    done = subprocess.run(
        [sys.executable, "-c", _PLUGIN_PROBE], env={**clean, **env}, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected
