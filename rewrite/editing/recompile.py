"""Regenerate a GraphModule's Python code lazily, on first use, as torch's own lazy graph modules do."""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.fx

__all__ = ["recompile_lazily"]


class _CodeOnDemand:
    """The generated code of a GraphModule, produced on first access (a non-data
    descriptor: once ``recompile`` stores ``_code`` on the instance, it is plain data)."""

    def __get__(self, obj: object, owner: object = None) -> object:
        if obj is None:
            return self
        torch.fx.GraphModule.recompile(cast(torch.fx.GraphModule, obj))  # installed on GraphModule classes only
        return obj.__dict__["_code"]


def _forward_on_demand(self: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
    torch.fx.GraphModule.recompile(self)  # installs the real forward on the instance's class
    return self.forward(*args, **kwargs)


def _reduce_fresh(self: torch.fx.GraphModule) -> Any:
    torch.fx.GraphModule.recompile(self)
    return torch.fx.GraphModule.__reduce__(self)


def recompile_lazily(gm: torch.fx.GraphModule) -> None:
    """Mark ``gm``'s Python code stale: it is generated on the first call, ``.code``,
    ``str()`` or pickling, as torch's own lazy graph modules do.

    Pass managers that never run the Python code (Inductor, vLLM) then never pay
    for it. Every GraphModule instance has a class of its own (torch creates one
    per instance), so the change touches this module only.

    Example
    -------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> gm = make_fx(lambda x: x.clone() * 2)(torch.ones(2))
    >>> clone = next(n for n in gm.graph.nodes if n.name == "clone")
    >>> _ = clone.replace_all_uses_with(clone.args[0]); gm.graph.erase_node(clone)
    >>> recompile_lazily(gm)
    >>> "clone" in gm.code, gm(torch.ones(2)).tolist()
    (False, [2.0, 2.0])
    """
    cls = type(gm)
    if cls.__qualname__.rsplit(".", 1)[-1] != "GraphModuleImpl":
        gm.recompile()  # not torch's per-instance class: compile now rather than touch a shared class
        return
    gm.__dict__.pop("_code", None)
    # torch's per-instance GraphModule class: these shadow GraphModule's members for this module only
    cls._code = _CodeOnDemand()
    cls.forward = _forward_on_demand  # replaced by the real forward at the first recompile
    cls.__reduce__ = _reduce_fresh  # type: ignore[method-assign]  # pickling regenerates the code first
