"""fx-aliasing: which values of a torch.fx graph share memory, where they overlap, and who writes them when.

Public surface:

- :func:`analyze` builds an immutable :class:`AliasAnalysis` from a
  ``GraphModule``, ``Graph`` or ``ExportedProgram``;
- :class:`Role`, :class:`Access`, :class:`Region` describe its answers;
- :class:`EffectTable` / :data:`DEFAULT_EFFECTS` hold the memory-effect rules;
- :class:`AliasingError` is the root of every error the library raises.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> import aliasing
>>> def f(x):
...     q, k, v = x.split(4, dim=-1)
...     return q + k
>>> a = aliasing.analyze(make_fx(f, tracing_mode="fake")(torch.randn(2, 12)))
>>> a.may_overlap("getitem", "getitem_1")
False
"""

from aliasing.analysis import UNKNOWN_STORAGE, Access, AliasAnalysis, StorageInfo, analyze
from aliasing.effects import DEFAULT_EFFECTS, Effect, EffectTable
from aliasing.errors import AliasingError, InvalidTargetError, NodeError, UnknownNodeError
from aliasing.regions import Region, regions_may_overlap
from aliasing.roles import Role

__all__ = [
    "Access",
    "AliasAnalysis",
    "AliasingError",
    "DEFAULT_EFFECTS",
    "Effect",
    "EffectTable",
    "InvalidTargetError",
    "NodeError",
    "Region",
    "Role",
    "StorageInfo",
    "UNKNOWN_STORAGE",
    "UnknownNodeError",
    "analyze",
    "regions_may_overlap",
]
