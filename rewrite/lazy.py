"""Names a module gives from other modules, imported on first use (PEP 562).

``rewrite``, ``rewrite.cli`` and ``rewrite.testing`` give names whose modules import torch or
Hypothesis; importing these modules stays cheap (``fx-aliasing --help`` imports no torch), and a
name's module is imported the first time the name is looked up. This module imports nothing
heavy itself.

Example
-------
>>> import types
>>> m = types.ModuleType("example")
>>> m.__getattr__, m.__dir__ = lazy_names(m.__dict__, {"sqrt": "math"}, ["sqrt"])
>>> m.sqrt(4.0), "sqrt" in vars(m)
(2.0, True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    namespace: MutableMapping[str, Any], homes: Mapping[str, str], exported: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__``: each name of ``homes`` comes from its module
    (``{"eliminate_clones": "rewrite.pipeline.eliminate"}``) on first lookup and is then kept in
    ``namespace`` (the module's ``globals()``), so the next lookup finds it directly."""
    exported = tuple(exported)
    name_of_module = namespace.get("__name__", "?")

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {name_of_module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exported})

    return __getattr__, __dir__
