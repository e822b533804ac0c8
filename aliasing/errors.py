"""The one exception hierarchy of fx-aliasing.

Every error the library raises on purpose derives from :class:`AliasingError`.
Messages that concern a graph node show it with ``node.format_node()``.
"""

from __future__ import annotations

import torch.fx

__all__ = ["AliasingError", "InvalidTargetError", "NodeError", "UnknownNodeError", "describe_node"]


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
