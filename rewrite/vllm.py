"""The vLLM adapter: a sound drop-in for vLLM's ``UnsafeCloneEliminationPass``.

This is the only module of the library that imports ``vllm`` (tested with
vLLM 0.33.0). vLLM's post-grad pass manager
(``vllm.compilation.passes.pass_manager.PostGradPassManager``) runs, after its
custom passes, vLLM IR lowering (which lowers functional IR ops such as
``fused_add_rms_norm`` into ``clone`` plus an in-place kernel), then clone
elimination, then cleanup and ``FixFunctionalizationPass``. vLLM's own clone
elimination pass is unsafe by its own docstring: it only looks at graph outputs
and at direct writers of a clone, so it removes clones written through a view,
through an ``out=`` keyword, two clones of one value that are both written, and
raises an ``AssertionError`` on a clone with two direct in-place writers.

:class:`CloneEliminationPass` takes its place with the same constructor and
call signature (``CloneEliminationPass(vllm_config)(graph)``). It is a
``VllmInductorPass``, so the pass manager's timing, graph dumps and
:meth:`uuid` work as for vLLM's passes; it reads the donated inputs from vLLM's
pass context (``get_pass_context().donated_input_ids``) exactly as vLLM's pass
does; and it removes every clone that conditions C1-C7 of
:mod:`rewrite.planning.planner` prove unneeded, with the library's copy-back folds
(C8) and self-copy removal (C9), and keeps every other one
(:func:`rewrite.lower_and_eliminate`).

Logging: through vLLM's logging setup (logger ``vllm.rewrite.vllm``, so
``VLLM_LOGGING_LEVEL=DEBUG`` shows it), each decision at DEBUG as vLLM's passes
log theirs, then one INFO line per compiled graph: the clones removed and kept
and the bytes of copies removed (per call of the graph; an expression in the
graph's size symbols where sizes are symbolic); a failure of the pipeline
(which never raises and leaves the graph valid) at WARNING.

To use it in vLLM's own engine set ``FX_ALIASING_VLLM=1``: the package's
vLLM general plugin (:func:`plugin`) then calls :func:`install` in every process
that compiles. :func:`install` makes every construction of vLLM's
``UnsafeCloneEliminationPass`` in the process build :class:`CloneEliminationPass`
instead, so every pass manager gets it: vLLM's ``PostGradPassManager``, a
platform's subclass of it (vllm-ascend's, vllm-musa's), and a manager that
imported the class into its own module or builds its pass list itself.
``FX_ALIASING_VLLM=0`` is the per-process off switch: with it, :func:`install`
does nothing (and says so at INFO), whoever calls it. A pass manager you build
yourself can also take the pass directly:
``pass_manager.clone_elimination = CloneEliminationPass(vllm_config)`` after
``pass_manager.configure(vllm_config)``. The README's "Using it in vLLM" shows both.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> from vllm.compilation.passes.inductor_pass import get_pass_context, pass_context
>>> from vllm.config import DeviceConfig, VllmConfig
>>> from vllm.config.utils import Range
>>> def f(x):
...     c = x.clone()
...     c.add_(1)            # the copy protects the caller's x, unless x is donated
...     return c
>>> clone_elimination = CloneEliminationPass(VllmConfig(device_config=DeviceConfig(device="cpu")))
>>> with pass_context(Range(1, 8192)):
...     gm = make_fx(f, tracing_mode="fake")(torch.randn(4))
...     clone_elimination(gm.graph)
...     kept = clone_elimination.last_report.kept
...     get_pass_context().donated_input_ids = {0}   # node index of the placeholder x
...     clone_elimination(gm.graph)
>>> kept, clone_elimination.last_report.removed
(('clone',), ('clone',))
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator

import torch.fx

from rewrite.inductor import library_source_hash
from rewrite.pipeline.driver import lower_and_eliminate
from rewrite.pipeline.reports import PipelineReport


@contextlib.contextmanager
def _without_torch_deprecation_notes() -> Iterator[None]:
    """Drop the deprecation warnings torch logs while vLLM's modules import.

    vLLM 0.33.0 uses ``torch._opaque_base`` and ``register_opaque_type(typ="value")``
    when ``vllm.config`` is first imported; torch 2.14 logs three "is deprecated"
    warnings for them, addressed to vLLM's developers. Importing this module is
    what first imports ``vllm.config`` in a user's process, so those lines
    appeared on every ``import rewrite.vllm``. Only torch's "deprecated" records
    of this one import are dropped; vLLM's loggers and every other record pass.
    """

    def keep(record: logging.LogRecord) -> bool:
        return not (record.name.startswith("torch") and "deprecated" in record.getMessage())

    loggers = [logging.getLogger(n) for n in ("torch._opaque_base", "torch._library.opaque_object")]
    handlers = list(logging.getLogger("torch").handlers)
    for target in (*loggers, *handlers):
        target.addFilter(keep)
    try:
        yield
    finally:
        for target in (*loggers, *handlers):
            target.removeFilter(keep)


with _without_torch_deprecation_notes():
    from vllm.compilation.passes.inductor_pass import InductorPass, get_pass_context
    from vllm.compilation.passes.vllm_inductor_pass import VllmInductorPass
    from vllm.config import VllmConfig
    from vllm.logger import init_logger

__all__ = ["ENABLE_VARIABLE", "CloneEliminationPass", "donated_positions", "install", "installed", "plugin", "uninstall"]

#: Set to ``1`` to have vLLM's plugin loader install the pass (:func:`plugin`), to ``0`` to keep
#: vLLM's own pass in the process whoever calls :func:`install`.
ENABLE_VARIABLE = "FX_ALIASING_VLLM"

#: Under vLLM's ``vllm`` logger, so vLLM's handler and ``VLLM_LOGGING_LEVEL`` apply.
logger = init_logger(f"vllm.{__name__}")


def donated_positions(graph: torch.fx.Graph, donated_input_ids: Iterable[int]) -> tuple[int, ...]:
    """Placeholder positions of the donated inputs named by vLLM's ``donated_input_ids``.

    vLLM's pass context names donated inputs by the index of their placeholder
    among all the graph's nodes (``{node: i for i, node in enumerate(graph.nodes)}``,
    as ``VllmIRInplaceFunctionalizationPass`` records them and
    ``UnsafeCloneEliminationPass`` reads them); :func:`rewrite.eliminate_clones`
    takes positions among the placeholders. Indices that are not a placeholder's
    are ignored, as vLLM's pass ignores them.

    Examples
    --------
    >>> g = torch.fx.Graph()
    >>> x, y = g.placeholder("x"), g.placeholder("y")
    >>> _ = g.output(g.call_function(torch.add, (x, y)))
    >>> donated_positions(g, {1, 2})
    (1,)
    """
    ids = set(donated_input_ids)
    positions: list[int] = []
    placeholder = 0
    for index, node in enumerate(graph.nodes):
        if node.op != "placeholder":
            continue
        if index in ids:
            positions.append(placeholder)
        placeholder += 1
    return tuple(positions)


class CloneEliminationPass(VllmInductorPass):
    """Remove every clone the program does not need, and none that it does, in vLLM's pass manager.

    Parameters
    ----------
    vllm_config : vllm.config.VllmConfig
        As for every vLLM pass (the base class keeps the pass config, dtype and device).
    lower_functional : bool
        Also lower ``auto_functionalized``/``auto_functionalized_v2``/
        ``triton_kernel_wrapper_functional`` into clones plus in-place calls
        before eliminating (:mod:`rewrite.lowering`). Off by default: in
        vLLM's pipeline ``FixFunctionalizationPass`` runs later and
        defunctionalizes the ops it knows, as with vLLM's own pass.

    Notes
    -----
    Call it inside vLLM's pass context (``pass_context(compile_range)``, which
    vLLM's compilation sets up): it reads ``donated_input_ids`` there. It
    rewrites the graph in place (the owning ``GraphModule`` is recompiled, as
    Inductor expects of post-grad passes), never raises on a well-formed graph,
    and running it twice changes nothing the second time. The last run's
    report is :attr:`last_report`. :meth:`uuid` follows this class's source,
    the library's source and the configuration, so vLLM's and Inductor's
    caches never replay a stale result.

    Examples
    --------
    >>> from vllm.config import DeviceConfig, VllmConfig
    >>> config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    >>> CloneEliminationPass(config).uuid() != CloneEliminationPass(config, lower_functional=True).uuid()
    True
    """

    def __init__(self, vllm_config: VllmConfig, *, lower_functional: bool = False) -> None:
        super().__init__(vllm_config)
        self.lower_functional = bool(lower_functional)
        self.last_report: PipelineReport | None = None

    # vLLM types its timing decorator for the base class; it wraps subclasses' methods as vLLM's own passes do
    @VllmInductorPass.time_and_log  # type: ignore[arg-type]
    def __call__(self, graph: torch.fx.Graph) -> None:
        """Rewrite ``graph`` in place, with the donated inputs of vLLM's pass context."""
        donated_input_ids = get_pass_context().donated_input_ids
        positions = donated_positions(graph, donated_input_ids)
        logger.debug("Donated input ids: %s (placeholder positions %s)", sorted(donated_input_ids), positions)
        sizes = {n.name: _bytes(n) for n in graph.nodes if n.op == "call_function" and n.target in _COPIES}
        report = lower_and_eliminate(graph, donated_inputs=positions, lower_functional=self.lower_functional)
        self.last_report = report
        _log_report(self.pass_name, report, sizes)

    def uuid(self) -> str:
        """A hash of this class's source, the library's source and the configuration: the same in
        every process of the same installation, changed by any option that changes decisions."""
        return str(
            InductorPass.hash_dict(
                {
                    "pass": InductorPass.hash_source(self),
                    "library": library_source_hash(),
                    "lower_functional": self.lower_functional,
                }
            )
        )

    def __repr__(self) -> str:
        return f"CloneEliminationPass(lower_functional={self.lower_functional})"


#: The copy ops whose removal the INFO line counts in bytes.
_COPIES = (torch.ops.aten.clone.default, torch.ops.aten.copy_.default)


def _bytes(node: torch.fx.Node) -> int | torch.SymInt | None:
    """The bytes ``node``'s tensor value occupies (its elements, not its storage), or None without one."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return None
    return value.numel() * value.element_size()


def _amount(total: int | torch.SymInt | None) -> str:
    """``229376 bytes (224.0 KiB)``; an expression of size symbols as it is; ``unknown bytes``."""
    if total is None:
        return "unknown bytes"
    if not isinstance(total, int):
        return f"{total} bytes"
    size, unit = float(total), "bytes"
    for bigger in ("KiB", "MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{total} bytes" if unit == "bytes" else f"{total} bytes ({size:.1f} {unit})"


def _log_report(pass_name: str, report: PipelineReport, sizes: dict[str, int | torch.SymInt | None]) -> None:
    """Log a run as vLLM's passes log theirs: each lowering and decision at DEBUG, an error at
    WARNING, then one INFO line with the counts and the bytes of copies removed (``sizes``: the
    bytes of each clone and ``copy_`` of the graph before the run, by node name)."""
    if logger.isEnabledFor(logging.DEBUG):
        for low in report.lowering.lowered:
            logger.debug("Lowered %s (%s) into %s with clones %s", low.node, low.kind, low.call, ", ".join(low.clones))
        for rep in report.eliminations:
            for d in rep.decisions:
                if d.action == "remove":
                    what = "copy" if d.reason.is_copy_reason else "clone"
                    logger.debug("Node %s is a redundant %s of %s, removing it (%s)", d.node, what, d.original, d.reason)
        last = report.eliminations[-1].decisions if report.eliminations else ()
        for d in last:
            if d.action == "keep" and not d.reason.is_copy_reason:
                logger.debug(
                    "Clone removal not possible, node=%s original_node=%s: %s (evidence: %s)",
                    d.node,
                    d.original,
                    d.reason.description,
                    ", ".join(d.evidence) or "-",
                )
    if report.error:
        logger.warning("%s stopped early, every step so far is sound: %s", pass_name, report.error)
    removed = (*report.removed, *report.dropped_copies)
    known = [sizes.get(name) for name in removed]
    total: int | torch.SymInt | None = None if any(b is None for b in known) else sum(b for b in known if b is not None)
    logger.info(
        "%s removed %d clone nodes, kept %d, dropped %d self-copies: %s of copies removed per call",
        pass_name,
        len(report.removed),
        len(report.kept),
        len(report.dropped_copies),
        _amount(total),
    )


#: Whether :func:`install` is in effect in this process (read by :func:`_new`).
_INSTALLED = False


def _new(cls: type, *args: object, **kwargs: object) -> object:
    """``UnsafeCloneEliminationPass.__new__`` from the first :func:`install` on: while installed,
    vLLM's class itself builds :class:`CloneEliminationPass` (Python then skips vLLM's ``__init__``);
    otherwise, and for a subclass a platform wrote, the class builds its own instance. (The hook
    stays once set: CPython cannot give a class back an ``object.__new__`` that takes arguments.)"""
    from vllm.compilation.passes.ir.clone_elimination import UnsafeCloneEliminationPass

    if _INSTALLED and cls is UnsafeCloneEliminationPass:
        return CloneEliminationPass(*args, **kwargs)  # type: ignore[arg-type]
    return object.__new__(cls)


def install() -> None:
    """Make every construction of vLLM's ``UnsafeCloneEliminationPass`` in this process build :class:`CloneEliminationPass`.

    So every pass manager gets the sound pass, however it names vLLM's class: vLLM's
    ``PostGradPassManager.configure``, a platform's subclass of it, a manager that
    imported the class into its own module or builds its pass list itself. Call it
    before vLLM configures its pass managers, in every process that compiles (the
    plugin does: :func:`plugin`). A pass built before stays as it was. With
    ``FX_ALIASING_VLLM=0`` in the environment (the per-process off switch) it does
    nothing and says so at INFO. :func:`uninstall` undoes it. Idempotent.

    Examples
    --------
    >>> from vllm.compilation.passes.ir.clone_elimination import UnsafeCloneEliminationPass
    >>> from vllm.config import DeviceConfig, VllmConfig
    >>> config = VllmConfig(device_config=DeviceConfig(device="cpu"))
    >>> install()
    >>> type(UnsafeCloneEliminationPass(config)).__name__
    'CloneEliminationPass'
    >>> uninstall()
    >>> type(UnsafeCloneEliminationPass(config)).__name__
    'UnsafeCloneEliminationPass'
    """
    global _INSTALLED
    from vllm.compilation.passes.ir.clone_elimination import UnsafeCloneEliminationPass

    if os.environ.get(ENABLE_VARIABLE) == "0":
        logger.info("%s=0: vLLM's UnsafeCloneEliminationPass is left in place in this process", ENABLE_VARIABLE)
        return
    if _INSTALLED:
        return
    hook = UnsafeCloneEliminationPass.__dict__.get("__new__")
    if getattr(hook, "__func__", hook) is not _new:
        UnsafeCloneEliminationPass.__new__ = staticmethod(_new)  # type: ignore[assignment,method-assign]
    _INSTALLED = True
    logger.info("fx-aliasing CloneEliminationPass replaces vLLM's UnsafeCloneEliminationPass in this process")


def installed() -> bool:
    """Whether :func:`install` is in effect in this process."""
    return _INSTALLED


def uninstall() -> None:
    """Give vLLM's ``UnsafeCloneEliminationPass`` its own behaviour back (undoes :func:`install`)."""
    global _INSTALLED
    _INSTALLED = False


def plugin() -> None:
    """vLLM general plugin (entry point ``fx_aliasing`` in group ``vllm.general_plugins``).

    vLLM's plugin loader (``vllm.plugins.load_general_plugins``) calls it in
    every process that compiles. It calls :func:`install` when the environment
    variable ``FX_ALIASING_VLLM`` is ``1`` and does nothing otherwise, so
    installing the package changes nothing until a user asks for it:
    ``FX_ALIASING_VLLM=1 vllm serve ...``. ``VLLM_PLUGINS`` (vLLM's allow-list
    of plugin names) must include ``fx_aliasing`` when it is set.
    """
    value = os.environ.get(ENABLE_VARIABLE, "")
    if value == "1":
        install()
    elif value not in ("", "0"):
        logger.warning("%s=%r: expected 1 or 0; the fx-aliasing clone elimination pass is not installed", ENABLE_VARIABLE, value)
