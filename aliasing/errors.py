"""The one exception hierarchy of fx-aliasing, and every exception class of :mod:`aliasing`.

Every error the library raises on purpose derives from :class:`AliasingError`.
Messages that concern a graph node show it with ``node.format_node()``.
The modules that raise them re-export them under their old names
(``aliasing.verification.oracle.AnalysisUnsound``, ``aliasing.pictures.storage_graph.RenderingError``...),
so either import works; the errors of :mod:`rewrite` are in :mod:`rewrite.errors` (and those of
the maintainer tools, outside the package, in ``tools/errors.py``).
"""

from __future__ import annotations

import torch.fx

__all__ = [
    "AliasingError",
    "AnalysisUnsound",
    "InvalidTargetError",
    "MissingMetadataWarning",
    "NoAtenOpsWarning",
    "NodeError",
    "OpaqueSubgraph",
    "OracleUnavailable",
    "RenderingError",
    "UnknownNodeError",
    "describe_node",
]


def describe_node(node: torch.fx.Node) -> str:
    """Return ``node.format_node()``, or the node's name if formatting fails."""
    try:
        text = node.format_node()
    except Exception:  # formatting is best effort, never the cause of a failure
        text = None
    return text if text else f"%{node.name}"


class AliasingError(Exception):
    """Base class of every error raised by ``aliasing`` and ``rewrite``."""


class InvalidTargetError(AliasingError, TypeError):
    """The object passed to an entry point is not a graph the library can read."""


class UnknownNodeError(AliasingError, KeyError):
    """A query named a node that is not in the analysed graph."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class NodeError(AliasingError):
    """Something about one node is malformed; the message shows the node."""

    def __init__(self, node: torch.fx.Node, message: str) -> None:
        self.node_name = node.name
        super().__init__(f"{message}\n  at node: {describe_node(node)}")


class OpaqueSubgraph(AliasingError):
    """A subgraph whose effect on its inputs cannot be summarised precisely (R5 of :mod:`aliasing.core.subgraphs`)."""


class AnalysisUnsound(AliasingError, AssertionError):
    """An analysis said "no alias", "no overlap" or "not a writer" where real memory says otherwise."""


class OracleUnavailable(AliasingError, ImportError):
    """The oracle needs numpy (the ``test`` extra: ``pip install 'fx-aliasing[test]'``)."""


class RenderingError(AliasingError):
    """A picture could not be drawn: Graphviz or matplotlib is missing, or it failed."""


class NoAtenOpsWarning(UserWarning):
    """The analysed graph calls torch-level functions and methods only, no ATen ops."""


class MissingMetadataWarning(UserWarning):
    """Some placeholders or ATen calls of the analysed graph have no ``meta['val']``."""
