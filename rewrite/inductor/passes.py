"""The Inductor custom passes (:class:`CloneEliminationPass`, :class:`JointGraphGuard`) and :func:`compile_options`.

The passes wire things: what the installed Inductor and AOTAutograd say
(:func:`inductor_model`, :func:`output_roles`), the guard's stages, the
pipeline (:func:`rewrite.lower_and_eliminate`) and the report
(:mod:`rewrite.inductor.report`). Their :meth:`~CloneEliminationPass.uuid`
is pure: a hash of the library's source (:func:`library_source_hash`) and of
what changes their decisions.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import torch
import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from aliasing.core.analysis import paused_gc
from aliasing.core.registry import torch_release
from rewrite.inductor.hazards import GuardReport, InductorModel, OutputRoles, hazards_on, protected_nodes
from rewrite.inductor.joint_graph import guard_joint_graph
from rewrite.inductor.post_grad import guard_inductor_hazards, guard_stale_reads
from rewrite.inductor.report import (
    REPORT_DIR_ENV,
    RUNS,
    count,
    follow_compiles,
    log_clone_elimination,
    log_guard,
    replays,
    snapshot,
    write_html_report,
)
from rewrite.pipeline.driver import lower_and_eliminate
from rewrite.pipeline.reports import PipelineReport

__all__ = [
    "CloneEliminationPass",
    "JointGraphGuard",
    "compile_options",
    "inductor_model",
    "library_source_hash",
    "output_roles",
]

log = logging.getLogger("rewrite.inductor")

_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = ("aliasing", "rewrite")


def library_source_hash() -> str:
    """SHA-256 of the source of every module of ``aliasing`` and ``rewrite``, subpackages included.

    Files are ``*.py`` under each package, hashed with their path relative to
    the package, in sorted order.

    Examples
    --------
    >>> len(library_source_hash())
    64
    """
    h = hashlib.sha256()
    for pkg in _PACKAGES:
        base = _ROOT / pkg
        for path in sorted(base.rglob("*.py")):
            h.update(f"{pkg}/{path.relative_to(base).as_posix()}\0".encode())
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def _uuid(config: dict[str, Any]) -> str:
    h = hashlib.sha256()
    h.update(library_source_hash().encode())
    h.update(repr(sorted(config.items())).encode())
    return h.hexdigest()


def inductor_model() -> InductorModel:
    """What the guard needs to know about the installed Inductor: the ops that realize their inputs
    (``needs_realized_inputs``), the extern (fallback) kernels, and the ops lowered by its kernel
    templates (``torch._inductor.kernel``: matmuls, convolutions)."""
    from torch._inductor import lowering

    kernels = frozenset(
        op for op, fn in lowering.lowerings.items() if str(getattr(fn, "__module__", "")).startswith("torch._inductor.kernel")
    )
    return InductorModel(
        frozenset(lowering.needs_realized_inputs),
        frozenset(lowering.fallbacks),
        kernels,
        hazards=hazards_on(torch_release()),
    )


def _aot_output_types() -> tuple[int, tuple[tuple[str, bool], ...]] | None:
    """AOTAutograd's view of the graph being compiled: (input-mutation outputs, (type, is a tensor) per user output).

    Read from the compile's ``TracingContext`` (``fw_metadata``); None outside
    a compile, or where some output is a tensor subclass (the graph returns
    its flattened parts).
    """
    try:
        from torch._guards import TracingContext

        ctx = TracingContext.try_get()
        meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
        if meta is None:
            return None
        if any(type(m).__name__ != "PlainTensorMeta" for m in getattr(meta, "subclass_fw_graph_out_meta", None) or ()):
            return None
        types = tuple(
            (str(o.output_type.name), isinstance(o.raw_type, type) and issubclass(o.raw_type, torch.Tensor))
            for o in meta.output_info
        )
        return int(meta.num_mutated_inp_runtime_indices), types
    except Exception as e:  # metadata of another shape: the guard then treats every output as returned
        log.debug("AOTAutograd's output metadata is not readable: %s", e)
        return None


def output_roles(graph: torch.fx.Graph, *, joint: bool = False) -> OutputRoles | None:
    """How the caller receives each output of ``graph`` (:class:`~rewrite.inductor.hazards.OutputRoles`), from AOTAutograd.

    AOTAutograd puts the new values of mutated inputs first, then the user
    outputs (``fw_metadata.output_info``), then what only it uses. A user
    output of type ``non_alias`` is returned as the graph returns it; every
    other one is regenerated at run time (a view of an input, or of another
    output). None when that cannot be read or does not fit ``graph``: a
    backward graph (its inputs include tangents and it returns gradients;
    ``joint`` says the graph is the joint graph, whose outputs start as the
    forward's), or outputs whose kinds do not match the metadata.
    """
    found = _aot_output_types()
    if found is None:
        return None
    mutated, types = found
    if not joint and any(n.name.startswith("tangents") for n in graph.find_nodes(op="placeholder")):
        return None
    out = next(iter(graph.find_nodes(op="output")), None)
    if out is None or not out.args:
        return None
    flat = torch.utils._pytree.tree_leaves(out.args[0])
    if len(flat) < mutated + len(types):
        return None
    returned: set[int] = set()
    regenerated: set[int] = set()
    for i, (kind, is_tensor) in enumerate(types):
        pos = mutated + i
        x = flat[pos]
        value = x.meta.get("val") if isinstance(x, torch.fx.Node) else x
        if is_tensor != isinstance(value, torch.Tensor):
            return None  # the positions do not line up
        (returned if kind == "non_alias" else regenerated).add(pos)
    return OutputRoles(frozenset(returned), frozenset(regenerated))


class CloneEliminationPass(CustomGraphPass):
    """Lower functional custom ops, keep only the copies the program needs, and guard Inductor's hazards.

    Parameters
    ----------
    donated_inputs : iterable of int
        Placeholder positions (0-based, graph order) whose storage the caller
        gives up (their final value is unspecified; an output may take it over).
        Pass managers that know them (vLLM's) supply them here.
    lower_functional : bool
        Lower ``auto_functionalized``/``auto_functionalized_v2``/
        ``triton_kernel_wrapper_functional`` before eliminating clones.
    guard : bool
        Run the hazard guard (:mod:`rewrite.inductor`, H1-H6 and H9) around the
        clone elimination.
    report_dir : str or os.PathLike, optional
        Write an HTML report of each graph the pass rewrites into this folder
        (made if missing; :mod:`rewrite.inductor` says how the files are named).
        None reads the environment variable :data:`~rewrite.inductor.report.REPORT_DIR_ENV`
        when the pass runs (no report when it is unset or empty). It changes no decision and
        not :meth:`uuid`. The last report written is :attr:`last_report_path`.

    Notes
    -----
    Install it with ``torch.compile(fn, options=compile_options())`` (this
    pass and :class:`JointGraphGuard`), or alone with
    ``options={"post_grad_custom_post_pass": CloneEliminationPass()}``, or in
    a list with other passes (Inductor runs a list in order). Any pass manager
    may call it with a ``torch.fx.Graph``. It never raises: an internal
    failure leaves the graph valid and equivalent (every step is) and is
    logged. The last run's reports are :attr:`last_report` and
    :attr:`last_guard_report`. :meth:`uuid` changes when the library's code
    or the configuration changes, so Inductor's cache never replays a stale
    result.

    Examples
    --------
    >>> p = CloneEliminationPass(donated_inputs=(0,))
    >>> p.uuid() != CloneEliminationPass().uuid() != CloneEliminationPass(guard=False).uuid()
    True
    >>> CloneEliminationPass(report_dir="reports").uuid() == CloneEliminationPass().uuid()
    True
    """

    def __init__(
        self,
        *,
        donated_inputs: Iterable[int] = (),
        lower_functional: bool = True,
        guard: bool = True,
        report_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.donated_inputs: tuple[int, ...] = tuple(int(i) for i in donated_inputs)
        self.lower_functional = bool(lower_functional)
        self.guard = bool(guard)
        self.report_dir: Path | None = None if report_dir is None else Path(report_dir)
        self.last_report: PipelineReport | None = None
        self.last_guard_report: GuardReport | None = None
        #: the HTML report the last run wrote (None when it wrote none)
        self.last_report_path: Path | None = None
        self._ran = False
        self._replays_before = replays()  # compiles Inductor's cache replayed before this pass was made
        follow_compiles()

    @property
    def last_report_source(self) -> Literal["pass", "cache"] | None:
        """Where the report comes from: ``"pass"`` once the pass has run (:attr:`last_report` is its
        last run's), ``"cache"`` when it has not run but a Dynamo compile since it was made came from
        Inductor's cache with runs of the pass in it (:attr:`last_report` is None), None otherwise."""
        if self._ran:
            return "pass"
        return "cache" if replays() > self._replays_before else None

    @property
    def cache_hit(self) -> bool:
        """True when the compiles came from Inductor's cache (``last_report_source == "cache"``)."""
        return self.last_report_source == "cache"

    def config(self) -> dict[str, Any]:
        """The configuration that changes what the pass does (part of :meth:`uuid`; the report
        folder changes nothing the pass does, and is not in it)."""
        return {"donated_inputs": self.donated_inputs, "lower_functional": self.lower_functional, "guard": self.guard}

    def uuid(self) -> str:
        """A hash of the library's source, of :meth:`config` and, during a compile, of how its outputs reach the caller.

        The guard's decisions depend on that (:func:`output_roles`), which
        Inductor's graph cache does not see in the graph it hashes. Pure: it
        reads the source files and the compile's metadata, and changes nothing.
        """
        outputs = _aot_output_types() if self.guard else None
        return _uuid({**self.config(), "outputs": outputs})

    def __call__(self, graph: torch.fx.Graph) -> None:
        """Rewrite ``graph`` in place (see :mod:`rewrite.inductor`)."""
        with paused_gc():  # guard and pipeline: no collection of Inductor's young objects inside them
            self._rewrite(graph)

    def report_folder(self) -> Path | None:
        """Where the HTML reports go: :attr:`report_dir`, else the folder that the environment
        variable :data:`~rewrite.inductor.report.REPORT_DIR_ENV` names now, else None (no report)."""
        if self.report_dir is not None:
            return self.report_dir
        named = os.environ.get(REPORT_DIR_ENV, "").strip()
        return Path(named) if named else None

    def _rewrite(self, graph: torch.fx.Graph) -> None:
        self._ran = True
        follow_compiles()
        count(RUNS, 1)
        self.last_report_path = None
        guard = GuardReport()
        outputs = output_roles(graph) if self.guard else None
        if self.guard:
            guard = guard_stale_reads(graph, donated_inputs=self.donated_inputs, hazards=hazards_on(torch_release()))
        folder = self.report_folder()
        before = snapshot(graph) if folder is not None else None  # the graph the pipeline starts from
        try:
            report = lower_and_eliminate(
                graph,
                donated_inputs=self.donated_inputs,
                lower_functional=self.lower_functional,
                keep=protected_nodes(graph, guard),
            )
        except Exception as e:  # the pipeline reports its own failures; this is a last guard
            log.warning("fx-aliasing clone elimination failed: %s: %s", type(e).__name__, e)
            report = None
        if self.guard:
            self.last_guard_report = guard.merged(self._guard_after(graph, outputs))
            log_guard(self.last_guard_report)
        if report is not None:
            self.last_report = report
            log_clone_elimination(report)
            if folder is not None and before is not None:
                self.last_report_path = write_html_report(folder, before, graph, report, self.donated_inputs)

    def _guard_after(self, graph: torch.fx.Graph, outputs: OutputRoles | None) -> GuardReport:
        """The guard's stages after the clone elimination (H9, H2-H6), with the installed Inductor's model."""
        try:
            model = inductor_model()
        except Exception as e:  # an Inductor without these tables: predict with the default model
            log.debug("Inductor's op tables are not available (%s); using the default model", e)
            model = InductorModel(hazards=hazards_on(torch_release()))
        return guard_inductor_hazards(graph, model, donated_inputs=self.donated_inputs, outputs=outputs)

    def __repr__(self) -> str:
        folder = f", report_dir={str(self.report_dir)!r}" if self.report_dir is not None else ""
        return (
            f"CloneEliminationPass(donated_inputs={self.donated_inputs}, "
            f"lower_functional={self.lower_functional}, guard={self.guard}{folder})"
        )


class JointGraphGuard(CustomGraphPass):
    """The hazard guard's ``joint_custom_pre_pass`` (H7 and H8 of :data:`~rewrite.inductor.hazards.HAZARDS`).

    It runs on the joint graph before Inductor's ``remove_noop_ops`` and
    keeps the clones that change a storage offset an opaque op may observe
    (pytorch/pytorch#197489), and gives each returned value that the no-op
    removal would make the same object as another a distinct view
    (pytorch/pytorch#191449); by the time a post-grad pass sees the graph
    those clones and views are gone. Never raises; the last run's report is
    :attr:`last_report`.

    Examples
    --------
    >>> JointGraphGuard().uuid() != CloneEliminationPass().uuid()
    True
    """

    def __init__(self) -> None:
        self.last_report: GuardReport | None = None

    def uuid(self) -> str:
        """A hash of the library's source (the pass has no configuration)."""
        return _uuid({"pass": "joint_graph_guard"})

    def __call__(self, graph: torch.fx.Graph | torch.fx.GraphModule) -> None:
        """Rewrite the joint graph in place."""
        g = graph.graph if isinstance(graph, torch.fx.GraphModule) else graph
        from torch._inductor import config as inductor_config

        hazards = hazards_on(torch_release())
        if "H8" in hazards and not inductor_config.implicit_fallbacks:
            # H8's distinct view (aten.view_as) has no lowering: Inductor calls it as an implicit fallback
            log.warning("fx-aliasing: implicit_fallbacks is off, so H8 (returned views made one object) is not guarded")
            hazards = hazards - {"H8"}
        with paused_gc():
            report = guard_joint_graph(g, hazards=hazards, outputs=output_roles(g, joint=True))
        self.last_report = report
        log_guard(report)

    def __repr__(self) -> str:
        return "JointGraphGuard()"


def compile_options(
    *,
    donated_inputs: Iterable[int] = (),
    lower_functional: bool = True,
    guard: bool = True,
    report_dir: str | os.PathLike[str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Inductor options that install every fx-aliasing hook: ``torch.compile(fn, options=compile_options())``.

    ``post_grad_custom_post_pass`` gets a :class:`CloneEliminationPass` (with
    these arguments) and, with ``guard``, ``joint_custom_pre_pass`` a
    :class:`JointGraphGuard`. Other Inductor ``options`` are passed through;
    a pass already given for one of these hooks runs first (in a list).
    ``report_dir`` (or the environment variable :data:`~rewrite.inductor.report.REPORT_DIR_ENV`)
    writes an HTML report per compiled graph into that folder (:mod:`rewrite.inductor`).

    Examples
    --------
    >>> opts = compile_options(donated_inputs=(0,))
    >>> sorted(opts), opts["post_grad_custom_post_pass"].donated_inputs
    (['joint_custom_pre_pass', 'post_grad_custom_post_pass'], (0,))
    >>> sorted(compile_options(guard=False, max_autotune=False))
    ['max_autotune', 'post_grad_custom_post_pass']
    """
    out = dict(options)
    hooks: dict[str, Any] = {
        "post_grad_custom_post_pass": CloneEliminationPass(
            donated_inputs=donated_inputs, lower_functional=lower_functional, guard=guard, report_dir=report_dir
        )
    }
    if guard:
        hooks["joint_custom_pre_pass"] = JointGraphGuard()
    for key, ours in hooks.items():
        theirs = out.get(key)
        if theirs is None:
            out[key] = ours
        else:
            out[key] = [*(theirs if isinstance(theirs, list) else [theirs]), ours]
    return out
