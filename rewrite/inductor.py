"""The torch.compile adapter: fx-aliasing as Inductor custom passes.

This is the only module of the library that imports ``torch._inductor``.

:class:`CloneEliminationPass` runs on the functional post-grad graph
(``post_grad_custom_post_pass``), before Inductor reinplaces and decomposes
mutable custom ops itself. With ``lower_functional=True`` it lowers
``auto_functionalized``, ``auto_functionalized_v2`` and
``triton_kernel_wrapper_functional`` into explicit clones plus in-place calls
(:func:`rewrite.lowering.lower_functional_ops`), then lets the one copy planner
(:mod:`rewrite.planning.planner`) remove every copy the program does not need: clones
that conditions C1-C7 allow, clones folded into the original they are copied
back into (the ``copy_`` epilogue of a mutated graph input, a scatter
write-back; condition C8), and the ``copy_`` nodes that then copy a region
onto itself (C9). Inductor's later passes then find nothing left to
reinplace. With ``lower_functional=False`` the functional wrappers are left to
Inductor and only the copies already in the graph are judged.

With ``guard=True`` (the default) the pass also runs the hazard guard
(:mod:`rewrite.guard`), which protects the program from Inductor's own
aliasing bugs: before the lowering it restores the reads that the joint
graph's ``remove_noop_ops`` made stale (H1: a reordered write-back, or a
clone); after the clone elimination it adds the protective clones that
Inductor's reinplacing, lowering and scheduling need (H2-H6) and rebases
``as_strided`` views of views of intermediates onto their storage (H9). Its
clones are kept by the clone elimination. :class:`JointGraphGuard` is the part
only a ``joint_custom_pre_pass`` can do (H7: offset-changing clones the no-op
removal would drop; H8: returned values the no-op removal would make one
object). Both read from AOTAutograd which outputs reach the caller as they are
(:func:`output_roles`). :func:`compile_options` installs both in one line:

>>> import torch
>>> from rewrite.inductor import compile_options
>>> compiled = torch.compile(lambda x: x + 1, options=compile_options())  # doctest: +SKIP

Logging: logger ``rewrite.inductor`` writes a one-line summary at INFO (the
guard's, with the hazards it guarded, where and their bytes, then the clone
elimination's) and each decision at DEBUG; the full reports are also
structured-trace artifacts named ``fx_aliasing_clone_elimination`` and
``fx_aliasing_guard`` (visible with ``TORCH_TRACE`` / tlparse). When
Inductor's cache replays a compile, no pass runs: ``last_report`` is None,
``last_report_source`` is ``"cache"``, and ``rewrite.inductor`` says so at INFO
with the cached compile's counts (``counters["inductor"]["fx_aliasing_*"]``,
which the cache replays); ``TORCHINDUCTOR_FX_GRAPH_CACHE=0`` compiles afresh.

HTML reports: ``compile_options(report_dir=FOLDER)`` (or ``CloneEliminationPass(report_dir=FOLDER)``,
or the environment variable :data:`REPORT_DIR_ENV`, ``FX_ALIASING_REPORT_DIR=FOLDER``, read when
the pass runs) writes one self-contained HTML report (:mod:`rewrite.html_report`: the decisions,
the storage timeline and graph, the code) per graph the pass rewrites, named
``fx_aliasing_<n>_compile_<id>_<forward|backward>.html``: ``n`` counts the reports of the process
(a number already taken in the folder is skipped), ``id`` is the Dynamo compile id that tlparse
shows (``0_0`` for ``[0/0]``; ``none`` outside a compile); the path is logged at INFO and is the
structured-trace artifact ``fx_aliasing_html_report``. The folder changes no decision and is no
part of :meth:`CloneEliminationPass.uuid`: a compile that Inductor's cache replays runs no pass
and writes no report (``TORCHINDUCTOR_FX_GRAPH_CACHE=0`` to get one). Writing a report copies the
graph and analyses it once more (seconds on a large graph); a failure to write one is logged and
changes nothing.

Example
-------
>>> import torch
>>> from rewrite.inductor import CloneEliminationPass
>>> def f(x):
...     return (x * 2).clone() + 1
>>> compiled = torch.compile(f, options={"post_grad_custom_post_pass": CloneEliminationPass()})
>>> bool((compiled(torch.ones(3)) == 3).all())  # doctest: +SKIP
True
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import logging
import os
import re
import warnings
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import torch
import torch.fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from aliasing.core.analysis import paused_gc
from aliasing.core.registry import torch_release
from rewrite.guard import (
    GuardReport,
    InductorModel,
    OutputRoles,
    guard_inductor_hazards,
    guard_joint_graph,
    guard_stale_reads,
    hazards_on,
    protected_nodes,
)
from rewrite.pipeline.driver import lower_and_eliminate
from rewrite.pipeline.reports import PipelineReport, log_pipeline_report

__all__ = [
    "REPORT_DIR_ENV",
    "CloneEliminationPass",
    "JointGraphGuard",
    "compile_options",
    "inductor_model",
    "library_source_hash",
    "output_roles",
]

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("aliasing", "rewrite")

#: The environment variable naming the folder of the HTML reports when no ``report_dir`` is given.
REPORT_DIR_ENV = "FX_ALIASING_REPORT_DIR"


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
    """How the caller receives each output of ``graph`` (:class:`rewrite.guard.OutputRoles`), from AOTAutograd.

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
        Run the hazard guard (:mod:`rewrite.guard`, H1-H6 and H9) around the
        clone elimination.
    report_dir : str or os.PathLike, optional
        Write an HTML report of each graph the pass rewrites into this folder
        (made if missing; the module docstring says how the files are named).
        None reads the environment variable :data:`REPORT_DIR_ENV` when the pass
        runs (no report when it is unset or empty). It changes no decision and
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
        self._keyed = False  # Inductor asked for uuid() (a compile started) and the pass has not run since
        self._ran = False
        self._counts_at_key: dict[str, int] | None = None

    @property
    def last_report_source(self) -> Literal["pass", "cache"] | None:
        """Where the last compile's result came from: ``"pass"`` (the pass ran; :attr:`last_report`
        is its report), ``"cache"`` (Inductor keyed its cache with :meth:`uuid` and replayed a cached
        compile: the pass did not run and :attr:`last_report` is None), or None before any compile.

        Inductor calls :meth:`uuid` to key its cache at the start of every compile that uses the
        pass; that call, inside a Dynamo compile, is what this follows."""
        if self._keyed:
            return "cache"
        return "pass" if self._ran else None

    @property
    def cache_hit(self) -> bool:
        """True when the last compile came from Inductor's cache (``last_report_source == "cache"``)."""
        return self._keyed

    def _note_keyed(self) -> None:
        if _compile_id() is not None:  # Inductor keying its cache inside a Dynamo compile, not a direct call
            self._keyed = True
            _watch_compile(self)

    def _note_ran(self) -> None:
        self._keyed = False
        self._ran = True

    def _compile_ended(self) -> None:
        """At the end of a Dynamo compile that keyed the pass: if it did not run, say so (at INFO)."""
        before, self._counts_at_key = self._counts_at_key, None
        if not self._keyed:
            return
        self.last_report = None
        self.last_guard_report = None
        replayed = ""
        now = _cached_counts()
        if before is not None and now is not None:
            delta = {k: now[k] - before.get(k, 0) for k in now}
            if any(delta.values()):
                replayed = (
                    f" (the cached compile removed {delta[_REMOVED]} clone(s), kept {delta[_KEPT]}, "
                    f"guarded {delta[_GUARDED]} hazard(s))"
                )
        log.info(
            "fx-aliasing: Inductor's cache replayed this compile, so %r did not run and its last_report "
            "is None%s; to see the report, compile with Inductor's caches off: "
            "TORCHINDUCTOR_FX_GRAPH_CACHE=0 (or torch._inductor.config.fx_graph_cache = False)",
            self,
            replayed,
        )

    def config(self) -> dict[str, Any]:
        """The configuration that changes what the pass does (part of :meth:`uuid`; the report
        folder changes nothing the pass does, and is not in it)."""
        return {"donated_inputs": self.donated_inputs, "lower_functional": self.lower_functional, "guard": self.guard}

    def uuid(self) -> str:
        """A hash of the library's source, of :meth:`config` and, during a compile, of how its outputs reach the caller.

        The guard's decisions depend on that (:func:`output_roles`), which
        Inductor's graph cache does not see in the graph it hashes.
        """
        self._note_keyed()
        outputs = _aot_output_types() if self.guard else None
        return _uuid({**self.config(), "outputs": outputs})

    def __call__(self, graph: torch.fx.Graph) -> None:
        """Rewrite ``graph`` in place (see the module docstring)."""
        with paused_gc():  # guard and pipeline: no collection of Inductor's young objects inside them
            self._rewrite(graph)

    def report_folder(self) -> Path | None:
        """Where the HTML reports go: :attr:`report_dir`, else the folder that the environment
        variable :data:`REPORT_DIR_ENV` names now, else None (no report)."""
        if self.report_dir is not None:
            return self.report_dir
        named = os.environ.get(REPORT_DIR_ENV, "").strip()
        return Path(named) if named else None

    def _rewrite(self, graph: torch.fx.Graph) -> None:
        self._note_ran()
        self.last_report_path = None
        guard = GuardReport()
        outputs = output_roles(graph) if self.guard else None
        if self.guard:
            guard = guard_stale_reads(graph, donated_inputs=self.donated_inputs, hazards=hazards_on(torch_release()))
        folder = self.report_folder()
        before = _snapshot(graph) if folder is not None else None  # the graph the pipeline starts from
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
            try:
                model = inductor_model()
            except Exception as e:  # an Inductor without these tables: predict with the default model
                log.debug("Inductor's op tables are not available (%s); using the default model", e)
                model = InductorModel(hazards=hazards_on(torch_release()))
            guard = guard.merged(
                guard_inductor_hazards(graph, model, donated_inputs=self.donated_inputs, outputs=outputs)
            )
            self.last_guard_report = guard
            _log_guard(guard)
        if report is not None:
            self.last_report = report
            _log_report(report)
            if folder is not None and before is not None:
                self.last_report_path = _write_html_report(folder, before, graph, report, self.donated_inputs)

    def __repr__(self) -> str:
        folder = f", report_dir={str(self.report_dir)!r}" if self.report_dir is not None else ""
        return (
            f"CloneEliminationPass(donated_inputs={self.donated_inputs}, "
            f"lower_functional={self.lower_functional}, guard={self.guard}{folder})"
        )


class JointGraphGuard(CustomGraphPass):
    """The hazard guard's ``joint_custom_pre_pass`` (H7 and H8 of :mod:`rewrite.guard`).

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
        _log_guard(report)

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
    ``report_dir`` (or the environment variable :data:`REPORT_DIR_ENV`) writes
    an HTML report per compiled graph into that folder (the module docstring).

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


#: Numbers of the HTML reports of this process (a number already taken in the folder is skipped).
_REPORT_NUMBERS = itertools.count()


def _snapshot(graph: torch.fx.Graph) -> torch.fx.GraphModule | None:
    """A copy of ``graph`` in a ``GraphModule`` of its own (attributes by reference), whose names
    continue as the graph's do (so a lowering of the copy names its nodes as it names the graph's);
    None when it cannot be made (logged)."""
    try:
        copied = copy.deepcopy(graph)  # Graph.__deepcopy__ copies node meta shallowly
        names, mine = getattr(graph, "_graph_namespace", None), getattr(copied, "_graph_namespace", None)
        if names is not None and mine is not None:  # the names a lowering picks depend on the names used before
            mine._used_names = set(names._used_names)
            mine._base_count = dict(names._base_count)
        owner = graph.owning_module
        root = owner if isinstance(owner, torch.nn.Module) else torch.nn.Module()
        return torch.fx.GraphModule(root, copied, class_name="CompiledGraph")
    except Exception as e:  # a report is best effort
        log.warning("fx-aliasing: no HTML report, the graph could not be copied: %s: %s", type(e).__name__, e)
        return None


def _write_html_report(
    folder: Path, before: torch.fx.GraphModule, graph: torch.fx.Graph, report: PipelineReport, donated: tuple[int, ...]
) -> Path | None:
    """Write the HTML report of one run into ``folder``: the analysis of ``before`` (lowered as the
    run lowered the graph), the run's decisions, and ``graph`` as the run left it. Returns the path,
    or None when it could not be written (logged; never raises)."""
    try:
        from aliasing import analyze
        from rewrite.explain import Explanation
        from rewrite.lowering.functional import lower_functional_ops

        with paused_gc(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the pass's own analysis has already warned
            if report.lowering.lowered:
                lowered = lower_functional_ops(before.graph)
                if lowered.clones != report.lowering.clones:
                    log.debug("fx-aliasing: the report's lowering named its clones otherwise: %s", lowered.clones)
                before.recompile()
            analysis = analyze(before, donated_inputs=donated)
            after = _snapshot(graph)
        compile_id = _compile_id()
        cid = re.sub(r"[^0-9A-Za-z]+", "_", str(compile_id)).strip("_") if compile_id is not None else "none"
        kind = "backward" if any(n.name.startswith("tangents") for n in graph.find_nodes(op="placeholder")) else "forward"
        name = f"compiled graph ({kind}) of compile {compile_id if compile_id is not None else '-'}"
        page = Explanation(before, analysis, report.elimination(), after, donated, name).html()
        folder.mkdir(parents=True, exist_ok=True)
        while True:
            path = folder / f"fx_aliasing_{next(_REPORT_NUMBERS):03d}_compile_{cid}_{kind}.html"
            try:
                with path.open("x", encoding="utf-8") as f:
                    f.write(page)
                break
            except FileExistsError:
                continue
    except Exception as e:  # a report is best effort: never fail the compile
        log.warning("fx-aliasing: the HTML report could not be written to %s: %s: %s", folder, type(e).__name__, e)
        return None
    log.info("fx-aliasing: wrote the HTML report of %s to %s", name, path)
    try:
        torch._logging.trace_structured(  # type: ignore[attr-defined]  # re-exported without __all__
            "artifact",
            metadata_fn=lambda: {"name": "fx_aliasing_html_report", "encoding": "string"},
            payload_fn=lambda: str(path.resolve()),
        )
    except Exception as e:  # tracing is best effort
        log.debug("structured trace failed: %s", e)
    return path


def _uuid(config: dict[str, Any]) -> str:
    h = hashlib.sha256()
    h.update(library_source_hash().encode())
    h.update(repr(sorted(config.items())).encode())
    return h.hexdigest()


_REMOVED, _KEPT, _GUARDED = "fx_aliasing_clones_removed", "fx_aliasing_clones_kept", "fx_aliasing_hazards_guarded"
#: Passes keyed by the Dynamo compile now running (see :meth:`CloneEliminationPass._compile_ended`).
_KEYED: weakref.WeakSet[CloneEliminationPass] = weakref.WeakSet()


def _compile_id() -> object | None:
    """The id of the Dynamo compile running now, or None."""
    try:
        from torch._guards import CompileContext

        return CompileContext.current_compile_id()
    except Exception:
        return None


def _cached_counts() -> dict[str, int] | None:
    """The pass's counts in ``torch._dynamo.utils.counters["inductor"]``, which Inductor's cache stores
    with each compiled graph and adds again when it replays one."""
    try:
        from torch._dynamo.utils import counters

        return {k: int(counters["inductor"][k]) for k in (_REMOVED, _KEPT, _GUARDED)}
    except Exception:
        return None


def _count(key: str, n: int) -> None:
    if n:
        try:
            from torch._dynamo.utils import counters

            counters["inductor"][key] += n
        except Exception as e:  # counting is best effort
            log.debug("counters not available: %s", e)


def _watch_compile(p: CloneEliminationPass) -> None:
    """Have Dynamo tell ``p`` when the compile that keyed it ends (its end callbacks also run on cache hits)."""
    try:
        from torch._dynamo.callback import callback_handler

        if _on_compile_end not in callback_handler.end_callbacks:  # torch._dynamo.reset() clears them
            callback_handler.register_end_callback(_on_compile_end)
    except Exception as e:  # another Dynamo: no log line on cache hits, last_report_source still says it
        log.debug("Dynamo's compile callbacks are not available: %s", e)
        return
    if p not in _KEYED:
        p._counts_at_key = _cached_counts()
        _KEYED.add(p)


def _on_compile_end(args: object) -> None:
    for p in list(_KEYED):
        try:
            p._compile_ended()
        except Exception as e:  # a callback must never break the compile
            log.debug("fx-aliasing compile-end callback failed: %s", e)
    _KEYED.clear()


def _log_guard(report: GuardReport) -> None:
    _count(_GUARDED, len(report.guarded))
    if not report.guarded and not report.error:
        return
    if log.isEnabledFor(logging.DEBUG):
        for g in report.guarded:
            log.debug("guard: %s", g.describe())
    log.info("%s", report.summary())
    try:
        torch._logging.trace_structured(  # type: ignore[attr-defined]  # re-exported without __all__
            "artifact",
            metadata_fn=lambda: {"name": "fx_aliasing_guard", "encoding": "string"},
            payload_fn=lambda: str(report),
        )
    except Exception as e:  # tracing is best effort
        log.debug("structured trace failed: %s", e)


def _log_report(report: PipelineReport) -> None:
    _count(_REMOVED, len(report.removed))
    _count(_KEPT, len(report.kept))
    log_pipeline_report(report, log)
    try:
        torch._logging.trace_structured(  # type: ignore[attr-defined]  # re-exported without __all__
            "artifact",
            metadata_fn=lambda: {"name": "fx_aliasing_clone_elimination", "encoding": "string"},
            payload_fn=lambda: str(report),
        )
    except Exception as e:  # tracing is best effort
        log.debug("structured trace failed: %s", e)
