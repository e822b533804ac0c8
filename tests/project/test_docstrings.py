"""Every docstring example of the public modules (and of the maintainer tools) runs and prints what it says."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import aliasing
import rewrite
import tools


def _modules() -> list[str]:
    names = []
    for package in (aliasing, rewrite, tools):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            names.append(info.name)
    return sorted(names)


#: Modules whose examples run for tens of seconds (fuzzing, audits, soak campaigns).
#: Packages and modules whose examples take seconds each (their submodules too).
SLOW_EXAMPLES = {"rewrite.testing.programs", "tools.audit", "tools.soak"}


def _is_slow(name: str) -> bool:
    return any(name == s or name.startswith(s + ".") for s in SLOW_EXAMPLES)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if _is_slow(n) else []) for n in _modules()]
)
def test_docstring_examples(name: str) -> None:
    if name == "rewrite.vllm" and importlib.util.find_spec("vllm") is None:
        pytest.skip("rewrite.vllm needs vLLM (the vllm extra, installed by .ci/run)")
    if name == "rewrite.sglang" and importlib.util.find_spec("sglang") is None:
        pytest.skip("rewrite.sglang needs SGLang (installed beside torch 2.14.1 by .ci/run's sglang stage)")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
