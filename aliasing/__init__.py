"""fx-aliasing: which values of a torch.fx graph share memory, where they overlap, and who writes them when.

Public surface:

- :func:`analyze` builds an immutable :class:`AliasAnalysis` from a
  ``GraphModule``, ``Graph`` or ``ExportedProgram``;
- :class:`Role`, :class:`Access`, :class:`Region` describe its answers;
  :class:`WhyAlias` is the evidence behind one (:meth:`AliasAnalysis.why`);
- :class:`EffectTable` / :data:`DEFAULT_EFFECTS` hold the memory-effect rules
  (:func:`with_control_flow` re-ties an extended table to the control-flow rules);
- :func:`build_storage_graph` and :func:`to_dot` give an analysis as a
  ``networkx.MultiDiGraph`` and as Graphviz DOT (:func:`render_dot` renders it);
  :func:`storage_timeline` / :func:`plot_timeline` draw the storage timeline
  (matplotlib, imported only when drawing);
- :class:`AliasingError` is the root of every error the library raises.

Layering
--------
Three subpackages: :mod:`aliasing.core` (the analysis), :mod:`aliasing.pictures` (what is
drawn from an analysis) and :mod:`aliasing.verification` (what checks an analysis against
real execution). Data flows one way: facts read from the graph's metadata, effects of each op,
the analysis, then what is built from an analysis. Each module imports only
modules of the layers above its own (``tests/project/test_layering.py`` reads the
imports and checks them against this list, the only list of the layers:
docs/DESIGN.md refers to it); nothing here imports :mod:`rewrite`, and nothing in either
package imports the maintainer tools (``tools``, outside the wheel).

1. errors, core, pictures, verification: the exception classes of the package; the three subpackages (docstrings only)
2. core.roles, core.regions, core.ops: boundary roles, byte regions, every fact about operators (one table per fact, the per-release data)
3. core.resolve, core.layout_divergences, core.facts, core.target, core.registry: torch-level calls resolved to ATen overloads; the layout audit's answers; what node metadata says; what the caller passed, validated; how each ATen overload's effects are known
4. core.effects: the rule table, one effect per op, with a conservative default
5. core.subgraphs, core.fake_values: control-flow rules, given the analysis entry point (they do not import it); fake values computed as torch does, re-propagated where a loaded program lost storage identity
6. core.analysis: ``analyze`` and the immutable ``AliasAnalysis``; ``DEFAULT_EFFECTS``
7. pictures.storage_graph, verification.oracle: the networkx graph of an analysis and its DOT picture; real-execution checks of one
8. pictures.timeline: the storage timeline picture

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

from aliasing.core.analysis import (
    DEFAULT_EFFECTS,
    Access,
    AliasAnalysis,
    MissingMetadataWarning,
    NoAtenOpsWarning,
    StorageInfo,
    WhyAlias,
    analyze,
    warnings_once,
    with_control_flow,
)
from aliasing.core.effects import Effect, EffectTable
from aliasing.core.fake_values import UntrustedMetadataWarning, propagate_fake_values, restore_storage_identity
from aliasing.core.regions import Region, regions_may_overlap
from aliasing.core.roles import UNKNOWN_STORAGE, Role
from aliasing.errors import AliasingError, InvalidTargetError, NodeError, UnknownNodeError
from aliasing.pictures.storage_graph import RenderingError, build_storage_graph, graphviz_available, render_dot, to_dot
from aliasing.pictures.timeline import Timeline, plot_timeline, save_timeline, storage_timeline, timeline_svg

__all__ = [
    "DEFAULT_EFFECTS",
    "UNKNOWN_STORAGE",
    "Access",
    "AliasAnalysis",
    "AliasingError",
    "Effect",
    "EffectTable",
    "InvalidTargetError",
    "MissingMetadataWarning",
    "NoAtenOpsWarning",
    "NodeError",
    "Region",
    "RenderingError",
    "Role",
    "StorageInfo",
    "Timeline",
    "UnknownNodeError",
    "UntrustedMetadataWarning",
    "WhyAlias",
    "analyze",
    "build_storage_graph",
    "graphviz_available",
    "plot_timeline",
    "propagate_fake_values",
    "regions_may_overlap",
    "render_dot",
    "restore_storage_identity",
    "save_timeline",
    "storage_timeline",
    "timeline_svg",
    "to_dot",
    "warnings_once",
    "with_control_flow",
]
