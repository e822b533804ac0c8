"""The storage timeline: per storage, program order across and byte offset up.

One horizontal *lane* per storage. Inside a lane, the x axis is the program
order (graph positions, the node names under the axis) and the y axis the byte
offset in the storage (0 at the bottom of the lane, its size at the top):

- each value that lives in the storage is drawn as the bytes it can touch
  (its region: one bar per contiguous run of a strided view, so ``q``, ``k``
  and ``v`` of a fused projection show as interleaved stripes) from the
  position that defines it to its last use;
- a value whose place in the storage is unknown is a hatched band over the
  whole lane (it may be anywhere);
- reads (blue, a dot) and writes (red, a triangle) are vertical marks over the
  bytes they touch, at the position where they happen: the accessed value's
  runs (a write to ``q`` of an interleaved ``q, k, v`` marks ``q``'s stripes,
  not the bytes of ``k`` and ``v`` between them); dashed where only the
  envelope is known (too many runs) or the access may touch the whole storage;
- parameters, buffers and constants that the program never writes (and no
  clone decision involves) are drawn as one band, the lane label saying how
  many (``group_parameters=False`` draws one lane each);
- with ``decisions=``, clones removed (green, hatched) and kept (orange, with
  their reason) are annotated, with a dashed link to the original's lane.

Values take colours from a palette of blues, purples and greys, apart from the
decision colours (green removed, orange kept, red writes). Labels are placed
where they overlap no other label (a label with no room is left out), and the
title, notes and legend wrap to the figure's width. Positions under the axis
read ``#40 add_``: position 40, the node ``add_``.

Large graphs: ``storages=`` picks lanes, ``around=`` the storages that one or
more nodes (or clones) touch, ``window=`` a range of positions; without any,
lanes where nothing happens in the window (no read, write, definition or clone)
are dropped, at most ``max_storages`` lanes are drawn, those with clone
decisions and writes first, and the notes say what was left out.

:func:`storage_timeline` computes the picture's content (pure data, no
matplotlib); :func:`plot_timeline` draws it with matplotlib (imported only
then: ``import aliasing`` does not need it) and returns a ``Figure`` to show
in a notebook or save as SVG or PNG (:func:`save_timeline`).

Example
-------
>>> import torch, aliasing
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> def f(x):
...     q, k = x.split(2, dim=-1)
...     q.mul_(2)
...     return k + 1
>>> a = aliasing.analyze(make_fx(f, tracing_mode="fake")(torch.randn(3, 4)))
>>> t = aliasing.storage_timeline(a)
>>> [(s.value, s.runs) for s in t.lane("s0").spans if s.value.startswith("getitem")]
[('getitem', ((0, 8), (16, 24), (32, 40))), ('getitem_1', ((8, 16), (24, 32), (40, 48)))]
>>> [(m.node, m.kind, m.value) for m in t.lane("s0").accesses if m.kind == "write"]
[('mul_', 'write', 'getitem')]
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import operator
import sys
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.fx

from aliasing.core.regions import Region
from aliasing.core.roles import UNKNOWN_STORAGE
from aliasing.errors import UnknownNodeError
from aliasing.pictures.storage_graph import (
    EVIDENCE_COLOUR,
    KEPT_FILL,
    REMOVED_FILL,
    ROLE_COLOURS,
    WRITE_COLOUR,
    DecisionLike,
    Decisions,
    RenderingError,
    decisions_of,
    reason_text,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation, Text
    from matplotlib.transforms import Bbox

    from aliasing.core.analysis import AliasAnalysis

__all__ = [
    "GROUP",
    "MAX_RUNS",
    "AccessMark",
    "CloneMark",
    "Lane",
    "Timeline",
    "ValueSpan",
    "plot_timeline",
    "save_timeline",
    "storage_timeline",
    "timeline_svg",
]

#: Positions drawn, at least, around the nodes of ``around=``.
MIN_AROUND_POSITIONS: int = 24

#: Contiguous runs drawn per value; a value with more is drawn as its envelope, hatched.
MAX_RUNS: int = 64

#: The storage id of the band of read-only parameters, buffers and constants (:attr:`Lane.members`).
GROUP: str = "parameters"

#: Roles whose never-written storages are grouped into one band.
_GROUPED_ROLES = ("parameter", "buffer", "constant")

ByteRange = tuple[int, int]


@dataclass(frozen=True)
class ValueSpan:
    """One value in one storage: its bytes, from its definition to its last use.

    ``runs`` are the contiguous byte ranges ``[lo, hi)`` it can touch (empty
    when there are more than :data:`MAX_RUNS` or the place is unknown);
    ``envelope`` the lowest and highest byte (None when unknown: the value may
    be anywhere in the storage).
    """

    value: str
    storage: str
    start: int
    stop: int
    runs: tuple[ByteRange, ...]
    envelope: ByteRange | None
    layout: str

    @property
    def exact(self) -> bool:
        """True when the runs are listed (not only the envelope)."""
        return bool(self.runs)


@dataclass(frozen=True)
class AccessMark:
    """A read or a write of a storage by ``node`` at ``position``, through ``value``.

    ``runs`` are the contiguous byte ranges the access touches (the accessed
    value's runs); empty when only ``envelope`` is known (more than
    :data:`MAX_RUNS` runs) or the access may touch the whole storage
    (``envelope`` None).
    """

    position: int
    node: str
    kind: Literal["read", "write"]
    value: str
    storage: str
    envelope: ByteRange | None  #: lowest and highest byte touched; None for "anywhere in the storage"
    runs: tuple[ByteRange, ...] = ()


@dataclass(frozen=True)
class CloneMark:
    """A clone decision placed on the timeline."""

    clone: str
    original: str
    action: str
    reason: str
    position: int
    storages: tuple[str, ...]  #: the clone's storages
    original_storages: tuple[str, ...]
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Lane:
    """One storage: its role, size in bytes (None when unknown) and what happens in it.

    The band of read-only parameters, buffers and constants is a lane too: its
    ``storage`` is :data:`GROUP`, ``members`` the storages it stands for (their
    reads are its ``accesses``, each naming its own storage), ``nbytes`` their
    total size, and it has no spans.
    """

    storage: str
    role: str
    origin: str
    nbytes: int | None
    spans: tuple[ValueSpan, ...]
    accesses: tuple[AccessMark, ...]
    members: tuple[str, ...] = ()
    member_roles: tuple[str, ...] = ()  #: the role of each member


@dataclass(frozen=True)
class Timeline:
    """What :func:`plot_timeline` draws: lanes over a window of positions.

    ``window`` is ``(first, last)``, inclusive; ``names[i]`` is the node at
    position ``first + i``. ``hidden`` lists storages left out by
    ``max_storages``, ``idle`` those left out because nothing happens to them
    in the window; ``symbolic`` says sizes were drawn at their trace-time hints.
    """

    lanes: tuple[Lane, ...]
    window: tuple[int, int]
    names: tuple[str, ...]
    clones: tuple[CloneMark, ...]
    total_storages: int
    hidden: tuple[str, ...]
    symbolic: bool
    title: str
    notes: tuple[str, ...] = ()
    idle: tuple[str, ...] = ()

    def lane(self, storage: str) -> Lane:
        """The lane of ``storage`` (:data:`GROUP` for the band; KeyError when it is not drawn)."""
        for lane in self.lanes:
            if lane.storage == storage:
                return lane
        raise KeyError(storage)

    @property
    def group(self) -> Lane | None:
        """The band of read-only parameters, buffers and constants, if one is drawn."""
        return next((lane for lane in self.lanes if lane.members), None)

    @property
    def shown(self) -> tuple[str, ...]:
        """Every storage drawn, the band's members included."""
        return tuple(s for lane in self.lanes for s in (lane.members or (lane.storage,)))


# --- regions as byte runs -----------------------------------------------------


def _hint(x: object) -> int | None:
    """An int for an int or a SymInt with a trace-time hint; None otherwise."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        node = x.node
        try:
            if node.has_hint():
                hint = node.hint
                return int(hint) if isinstance(hint, int) else None
        except Exception:  # a hint is a convenience for drawing, never a failure
            return None
    return None


def _runs(region: Region) -> tuple[tuple[ByteRange, ...], ByteRange | None]:
    """Contiguous byte runs of a region (``()`` when too many) and its byte envelope."""
    offset = _hint(region.offset)
    sizes = [_hint(s) for s in region.sizes]
    strides = [_hint(s) for s in region.strides]
    if offset is None or any(s is None for s in sizes) or any(s is None for s in strides):
        return (), None
    item = region.itemsize
    dims = [(int(size), int(stride) * item) for size, stride in zip(sizes, strides) if size != 1]  # type: ignore[arg-type]
    if any(size == 0 for size, _ in dims):
        return (), (offset * item, offset * item)
    dims = sorted(((size, stride) for size, stride in dims if stride != 0), key=lambda d: d[1])
    run = item
    outer: list[tuple[int, int]] = []
    for size, stride in dims:
        if not outer and stride == run:
            run *= size
        else:
            outer.append((size, stride))
    base = offset * item
    lo = base
    hi = base + run + sum((size - 1) * stride for size, stride in outer)
    count = math.prod(size for size, _ in outer)
    if count > MAX_RUNS:
        return (), (lo, hi)
    starts = sorted(
        base + sum(i * stride for i, (_, stride) in zip(index, outer))
        for index in itertools.product(*(range(size) for size, _ in outer))
    )
    merged: list[list[int]] = []
    for start in starts:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], start + run)
        else:
            merged.append([start, start + run])
    return tuple((a, b) for a, b in merged), (lo, hi)


def _layout(analysis: AliasAnalysis, node: torch.fx.Node) -> str:
    facts = analysis.facts_of(node)
    if facts is None:
        return "no metadata"
    dtype = str(facts.dtype).replace("torch.", "")
    return f"{dtype}{list(facts.sizes)} strides {list(facts.strides)} offset {facts.storage_offset}"


def _storage_nbytes(analysis: AliasAnalysis, values: Iterable[torch.fx.Node]) -> int | None:
    for node in values:
        facts = analysis.facts_of(node)
        if facts is None or facts.region is None or analysis.storage_of(node) != frozenset({_sid_of(analysis, node)}):
            continue
        try:
            return _hint(facts.value.untyped_storage().nbytes())
        except Exception:  # opaque tensor subclasses: size from the regions instead
            return None
    return None


def _sid_of(analysis: AliasAnalysis, node: torch.fx.Node) -> str:
    storages = analysis.storage_of(node)
    return next(iter(storages)) if len(storages) == 1 else ""


def _is_container(analysis: AliasAnalysis, node: torch.fx.Node) -> bool:
    """A multi-output op's tuple (``split``): its getitems are drawn instead."""
    return (
        analysis.region_of(node) is None
        and analysis.facts_of(node) is None
        and bool(node.users)
        and all(u.op == "call_function" and u.target is operator.getitem for u in node.users)
    )


# --- what to draw -------------------------------------------------------------


def _refs(analysis: AliasAnalysis, refs: object) -> list[torch.fx.Node]:
    if refs is None:
        return []
    if isinstance(refs, (str, torch.fx.Node)):
        refs = [refs]
    if not isinstance(refs, Iterable):
        raise UnknownNodeError(f"expected a node, a node name or an iterable of them, got {type(refs).__name__}")
    nodes = []
    for ref in refs:
        if not isinstance(ref, (str, torch.fx.Node)):
            raise UnknownNodeError(f"expected a node or a node name, got {type(ref).__name__}")
        nodes.append(analysis.nodes[analysis.position(ref)])
    return nodes


def _all_storages(analysis: AliasAnalysis) -> list[str]:
    found = list(analysis.storages)
    if any(UNKNOWN_STORAGE in analysis.storage_of(n) for n in analysis.nodes):
        found.append(UNKNOWN_STORAGE)
    return found


def _touched(analysis: AliasAnalysis, nodes: list[torch.fx.Node], by_clone: dict[str, DecisionLike]) -> list[str]:
    """Storages the nodes live in, read or write (and, for a clone, its original's)."""
    wanted = {n.name for n in nodes}
    found: set[str] = set()
    for node in nodes:
        found |= analysis.storage_of(node)
        decision = by_clone.get(node.name)
        if decision is not None and decision.original:
            with contextlib.suppress(UnknownNodeError):  # an original outside this graph adds nothing
                found |= analysis.storage_of(decision.original)
    for sid in _all_storages(analysis):
        if any(acc.node.name in wanted for acc in analysis.storage_accesses(sid)):
            found.add(sid)
    return [s for s in _all_storages(analysis) if s in found]


def _window(value: object, last: int) -> tuple[int, int]:
    if not isinstance(value, tuple) or len(value) != 2 or not all(type(v) is int for v in value):
        raise ValueError(f"window must be a (first, last) pair of positions, got {value!r}")
    first, stop = value
    if not 0 <= first <= stop:
        raise ValueError(f"window must satisfy 0 <= first <= last, got {value!r}")
    return first, min(stop, last)


def storage_timeline(
    analysis: AliasAnalysis,
    *,
    storages: object = None,
    around: object = None,
    window: tuple[int, int] | None = None,
    decisions: Decisions | None = None,
    max_storages: int = 24,
    max_positions: int = 120,
    group_parameters: bool = True,
) -> Timeline:
    """Compute the storage timeline of an analysis (what :func:`plot_timeline` draws).

    Parameters
    ----------
    analysis : AliasAnalysis
        The analysis of the program (before any rewrite, so that removed clones are in it).
    storages : storage id or iterable of ids, optional
        Draw these storages.
    around : node, name or iterable of them, optional
        Draw the storages these nodes live in, read or write (for a clone also its
        original's); without ``window``, the positions from the first of them to the
        last use of what lives in their storages, and the evidence of their decisions.
    window : (int, int), optional
        First and last position drawn (inclusive). Lanes with nothing in it are dropped;
        without ``storages`` and ``around``, so are lanes whose values only live through
        it (no read, write, definition or clone in the window).
    decisions : CloneEliminationReport or sequence of decisions, optional
        Annotate removed and kept clones.
    max_storages : int
        Without ``storages`` and ``around``, draw at most this many lanes: the storages of
        clone decisions first, then written storages, then the busiest (the band of
        parameters counts as one lane).
    max_positions : int
        Without ``window``, draw at most this many positions (from the first active one,
        or around the nodes of ``around``); the timeline's notes say what was cut.
    group_parameters : bool
        Without ``storages``, draw the parameters, buffers and constants that the program
        never writes and no clone decision involves as one band (:data:`GROUP`), when
        there are at least two of them.

    Returns
    -------
    Timeline

    Raises
    ------
    aliasing.UnknownNodeError
        When ``around`` names a node, or ``storages`` a storage, that the analysis does not have.
    ValueError
        For a malformed ``window``, ``max_storages`` or ``max_positions``.

    Examples
    --------
    >>> import torch, aliasing
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> a = aliasing.analyze(make_fx(lambda x: x[1:].add_(1), tracing_mode="fake")(torch.zeros(4)))
    >>> lane = aliasing.storage_timeline(a).lane("s0")
    >>> lane.nbytes, [(s.value, s.envelope) for s in lane.spans]
    (16, [('x_1', (0, 16)), ('slice_1', (4, 16)), ('add_', (4, 16))])
    """
    _check_limits(max_storages=max_storages, max_positions=max_positions)
    nodes = analysis.nodes
    last = len(nodes) - 1
    by_clone = {d.node: d for d in decisions_of(decisions)}
    every = _all_storages(analysis)
    centres = _refs(analysis, around)
    chosen = _chosen_storages(analysis, storages, centres, by_clone, every)
    explicit = storages is not None or bool(centres)
    chosen_set = set(chosen) if explicit else set(every)
    lanes = [_lane(analysis, sid) for sid in every if sid in chosen_set]
    symbolic = any(_symbolic(analysis, lane) for lane in lanes)
    clones = _clone_marks(analysis, by_clone)

    notes: list[str] = []
    if window is not None:
        first, stop = _window(window, last)
    else:
        first, stop = _default_window(analysis, centres, lanes, by_clone, max_positions, notes)
    written = {lane.storage for lane in lanes if any(m.kind == "write" for m in lane.accesses)}
    in_window = [c for c in clones if first <= c.position <= stop]
    decided = {s for c in in_window for s in (*c.storages, *c.original_storages)}
    lanes, idle = _lanes_in_window(lanes, first, stop, explicit, decided, notes)
    if group_parameters and storages is None:
        lanes = _group_read_only(lanes, written | decided, notes)
    hidden: tuple[str, ...] = ()
    if not explicit and len(lanes) > max_storages:
        lanes, hidden = _cap_lanes(lanes, clones, max_storages, notes)
    if symbolic:
        notes.append("symbolic sizes drawn at their trace-time hints")
    shown = {s for lane in lanes for s in (lane.storage, *lane.members)}
    title = (
        f"storage timeline: {len(shown - {GROUP})} of {len(every)} storages, "
        f"positions {first}-{stop} of {last + 1} nodes"
    )
    return Timeline(
        tuple(lanes),
        (first, stop),
        tuple(n.name for n in nodes[first : stop + 1]),
        tuple(c for c in in_window if set(c.storages) & shown),
        len(every),
        hidden,
        symbolic,
        title,
        tuple(notes),
        idle,
    )


def _check_limits(**limits: int) -> None:
    """ValueError unless each limit is a positive int (a bool is not)."""
    for name, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _chosen_storages(
    analysis: AliasAnalysis,
    storages: object,
    centres: list[torch.fx.Node],
    by_clone: dict[str, DecisionLike],
    every: list[str],
) -> list[str]:
    """The storages asked for: ``storages=`` (checked against ``every``), then those the centres touch."""
    chosen: list[str] = []
    if storages is not None:
        wanted = [storages] if isinstance(storages, str) else list(storages)  # type: ignore[call-overload]
        for sid in wanted:
            if sid not in every:
                raise UnknownNodeError(f"no storage {sid!r} in this analysis")
        chosen = list(wanted)
    if centres:
        chosen += _touched(analysis, centres, by_clone)
    return chosen


def _default_window(
    analysis: AliasAnalysis,
    centres: list[torch.fx.Node],
    lanes: list[Lane],
    by_clone: dict[str, DecisionLike],
    max_positions: int,
    notes: list[str],
) -> tuple[int, int]:
    """The window drawn without ``window=``: around the centres, or where the lanes are active.

    At most ``max_positions`` positions; when that cuts, a note (appended to ``notes``) says so.
    """
    nodes = analysis.nodes
    last = len(nodes) - 1
    if centres:
        first, stop = _centred_window(analysis, centres, lanes, by_clone, last)
    else:
        points = [p for lane in lanes for sp in lane.spans for p in (sp.start, sp.stop)]
        points += [m.position for lane in lanes for m in lane.accesses]
        first, stop = (min(points), max(points)) if points else (0, last)
    if stop - first + 1 > max_positions:
        if not centres:  # start where the program starts computing, not among its inputs
            ops = (analysis.position(n) for n in nodes if n.op not in ("placeholder", "get_attr"))
            first = max(first, min(next(ops, first) - 2, last - max_positions + 1))
        stop = first + max_positions - 1
        notes.append(f"positions {first}-{stop} of {last + 1} shown: pass window=(first, last) or around=")
    return first, stop


def _lanes_in_window(
    lanes: list[Lane], first: int, stop: int, explicit: bool, decided: set[str], notes: list[str]
) -> tuple[list[Lane], tuple[str, ...]]:
    """The lanes clipped to the window, less those with nothing in it, and the idle storages left out.

    Lanes asked for (``explicit``) stay while something of theirs is in the window; the others
    only while something happens in it (:func:`_active`), a note (appended to ``notes``) saying
    how many were left out.
    """
    lanes = [_clip(lane, first, stop) for lane in lanes]
    if explicit:
        return [lane for lane in lanes if lane.spans or lane.accesses], ()
    idle = tuple(lane.storage for lane in lanes if not _active(lane, first, stop, decided))
    if idle:
        notes.append(f"{len(idle)} storages with nothing happening in positions {first}-{stop} not shown")
    return [lane for lane in lanes if lane.storage not in idle], idle


def _group_read_only(lanes: list[Lane], involved: set[str], notes: list[str]) -> list[Lane]:
    """The lanes with the read parameters, buffers and constants not ``involved`` as one band (:func:`_band`).

    Only when there are at least two of them (the band replaces them where the first was;
    a note, appended to ``notes``, says so). ``involved``: storages written or in a clone decision.
    """
    grouped = [
        lane for lane in lanes
        if lane.role in _GROUPED_ROLES and lane.storage not in involved and lane.accesses
    ]
    if len(grouped) < 2:
        return lanes
    band = _band(grouped)
    at = lanes.index(grouped[0])
    lanes = [lane for lane in lanes if lane not in grouped]
    lanes.insert(at, band)
    notes.append(
        f"{_band_count_text(band)} the program never writes drawn as one band "
        f"(group_parameters=False draws one lane each)"
    )
    return lanes


def _cap_lanes(
    lanes: list[Lane], clones: list[CloneMark], max_storages: int, notes: list[str]
) -> tuple[list[Lane], tuple[str, ...]]:
    """The ``max_storages`` most telling lanes (:func:`_rank`) and the storages left out (a note says how many)."""
    kept = _rank(lanes, clones, max_storages)
    hidden = tuple(s for lane in lanes if lane.storage not in kept for s in (lane.members or (lane.storage,)))
    notes.append(f"{len(hidden)} more storages active here not shown: pass storages= or around=")
    return [lane for lane in lanes if lane.storage in kept], hidden


def _active(lane: Lane, first: int, stop: int, decided: set[str]) -> bool:
    """Whether something happens to the lane's storage in the window (its lane was clipped to it)."""
    return (
        bool(lane.accesses)
        or lane.storage in decided
        or any(first <= span.start <= stop for span in lane.spans)
    )


def _band(lanes: list[Lane]) -> Lane:
    """One lane for read-only parameters, buffers and constants: their reads, their total size."""
    sizes = [lane.nbytes for lane in lanes]
    total = None if any(n is None for n in sizes) else sum(n for n in sizes if n is not None)
    marks = tuple(sorted((m for lane in lanes for m in lane.accesses), key=lambda m: m.position))
    return Lane(
        GROUP, "parameter", "", total, (), marks,
        tuple(lane.storage for lane in lanes), tuple(lane.role for lane in lanes),
    )


def _band_count_text(lane: Lane) -> str:
    """``"14 parameters, 2 buffers"``: how many of each role the band stands for."""
    counts = {role: lane.member_roles.count(role) for role in _GROUPED_ROLES if role in lane.member_roles}
    return ", ".join(f"{n} {role}{'s' if n != 1 else ''}" for role, n in counts.items())


def _lane(analysis: AliasAnalysis, sid: str) -> Lane:
    members = [n for n in analysis.values_in(sid) if sid in analysis.storage_of(n) and not _is_container(analysis, n)]
    spans: list[ValueSpan] = []
    for node in members:
        start = analysis.position(node)
        stop = max((analysis.position(u) for u in node.users), default=start)
        region = analysis.region_of(node) if analysis.storage_of(node) == frozenset({sid}) else None
        runs: tuple[ByteRange, ...] = ()
        envelope: ByteRange | None = None
        if region is not None:
            runs, envelope = _runs(region)
        spans.append(ValueSpan(node.name, sid, start, stop, runs, envelope, _layout(analysis, node)))
    span_of = {sp.value: sp for sp in spans}
    marks = []
    for acc in analysis.storage_accesses(sid):
        span = None if acc.whole else span_of.get(acc.value.name)
        envelope, runs = (None, ()) if span is None else (span.envelope, span.runs)
        marks.append(AccessMark(acc.position, acc.node.name, acc.kind, acc.value.name, sid, envelope, runs))
    nbytes = _storage_nbytes(analysis, members)
    if nbytes is None:
        ends = [sp.envelope[1] for sp in spans if sp.envelope is not None]
        nbytes = max(ends) if ends else None
    if sid == UNKNOWN_STORAGE:
        role, origin = "unknown", ""
    else:
        info = analysis.storage_info(sid)
        role, origin = info.role.value, info.origin
    return Lane(sid, role, origin, nbytes, tuple(spans), tuple(marks))


def _symbolic(analysis: AliasAnalysis, lane: Lane) -> bool:
    for span in lane.spans:
        region = analysis.region_of(span.value)
        if region is not None and not region.is_concrete:
            return True
    return False


def _clone_marks(analysis: AliasAnalysis, by_clone: dict[str, DecisionLike]) -> list[CloneMark]:
    marks = []
    for name, d in by_clone.items():
        try:
            position = analysis.position(name)
            clone_storages = tuple(sorted(analysis.storage_of(name)))
        except UnknownNodeError:  # a decision about another graph's node: not drawn
            continue
        try:
            original_storages = tuple(sorted(analysis.storage_of(d.original))) if d.original else ()
        except UnknownNodeError:
            original_storages = ()
        marks.append(
            CloneMark(name, d.original, d.action, reason_text(d), position, clone_storages, original_storages, tuple(d.evidence))
        )
    return marks


def _rank(lanes: list[Lane], clones: list[CloneMark], limit: int) -> set[str]:
    """The ``limit`` most telling lanes: clone decisions first, then writes, then the busiest."""
    clone_storages = {s for c in clones for s in (*c.storages, *c.original_storages)}

    def score(lane: Lane) -> tuple[bool, bool, bool, int]:
        written = any(m.kind == "write" for m in lane.accesses)
        touched = bool(lane.accesses)
        band = bool(lane.members)  # the band stands for many storages in one lane: always kept
        return (band, lane.storage in clone_storages or written, touched, len(lane.accesses) + len(lane.spans))

    return {lane.storage for lane in sorted(lanes, key=score, reverse=True)[:limit]}


def _centred_window(
    analysis: AliasAnalysis,
    centres: list[torch.fx.Node],
    lanes: list[Lane],
    by_clone: dict[str, DecisionLike],
    last: int,
) -> tuple[int, int]:
    points = [analysis.position(c) for c in centres]
    own: set[str] = set()
    for c in centres:
        own |= analysis.storage_of(c)
        d = by_clone.get(c.name)
        for ref in (d.evidence if d is not None else ()):
            try:
                points.append(analysis.position(ref))
            except UnknownNodeError:
                continue
    for c in centres:  # what the centres read and write happens at their own position
        points.extend(analysis.position(u) for u in c.users)
    for lane in lanes:
        if lane.storage in own:
            points += [p for s in lane.spans for p in (s.start, s.stop)]
    lo, hi = min(points), max(points)
    if hi - lo < MIN_AROUND_POSITIONS:  # some context on both sides
        grow = MIN_AROUND_POSITIONS - (hi - lo)
        lo, hi = lo - grow // 2, hi + grow - grow // 2
    lo, hi = max(0, lo - 2), min(last, hi + 2)
    return lo, hi


def _clip(lane: Lane, first: int, stop: int) -> Lane:
    spans = tuple(s for s in lane.spans if s.stop >= first and s.start <= stop)
    marks = tuple(m for m in lane.accesses if first <= m.position <= stop)
    return Lane(lane.storage, lane.role, lane.origin, lane.nbytes, spans, marks, lane.members, lane.member_roles)


# --- drawing ------------------------------------------------------------------

_READ = "#1f77b4"
#: Value fills: blues, purples and greys, apart from the decision colours (green removed,
#: orange kept) and the write colour (red).
_PALETTE = (
    "#a6c8e8", "#c9b3e0", "#c8c8c8", "#9fd3e0", "#b8b0e8", "#e2bfe6", "#b4c4d4", "#9db4e8", "#d8c6f0", "#c5cbd3",
)
_LANE_GAP = 0.18
_INCH_PER_POSITION = 0.17
_MARGIN = 0.15  #: inches around the header and beside the lane labels
_VALUE_PT = 7.0
_ROW = 0.17  #: inches per row of value labels inside a lane
_DASHED = (0, (2.0, 1.5))


def _import_matplotlib() -> type[Figure]:
    try:
        import matplotlib

        matplotlib.use  # noqa: B018 - the attribute proves a real matplotlib
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise RenderingError(
            "the storage timeline needs matplotlib: pip install matplotlib (or fx-aliasing[notebooks])"
        ) from exc
    return Figure


def _show_in_notebooks(figure_class: type[Figure]) -> None:
    """In IPython/Jupyter, let a figure returned by a cell show itself as a PNG.

    Figures made without ``pyplot`` have no display hook until the inline backend
    is activated; this registers one (only when none is registered yet).
    """
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    formatter = getattr(getattr(shell, "display_formatter", None), "formatters", {}).get("image/png")
    if formatter is None:
        return
    try:
        formatter.lookup_by_type(figure_class)
    except KeyError:
        formatter.for_type(figure_class, _figure_png)


def _figure_png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _lane_height(lane: Lane) -> float:
    if lane.members:
        return 0.36
    stripes = max((len(s.runs) for s in lane.spans), default=0)
    if stripes > 1:
        return 1.1
    if len(lane.spans) > 3:
        return 0.7
    return 0.42


def _lane_label(lane: Lane, max_chars: int = 44) -> str:
    if lane.members:
        return f"{_band_count_text(lane)}\nread only · {_size_text(lane.nbytes)} in all"
    origin = lane.origin
    head = f"{_size_text(lane.nbytes)} · from "
    if origin and len(head) + len(origin) > max_chars:  # elide the middle of a long name
        keep = max(6, max_chars - len(head) - 1)
        origin = origin[: keep // 2] + "…" + origin[len(origin) - (keep - keep // 2) :]
    second = f"{head}{origin}" if origin else _size_text(lane.nbytes)
    return f"{lane.storage}  {lane.role.replace('_', ' ')}\n{second}"


def _size_text(nbytes: int | None) -> str:
    if nbytes is None:
        return "size unknown"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def _wrap(text: str, fits: Callable[[str], bool]) -> str:
    """``text`` wrapped at the widest line length for which ``fits`` holds (words kept whole)."""
    if fits(text):
        return text
    for width in range(max(len(text) - 1, 1), 9, -2):
        wrapped = textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)
        if fits(wrapped):
            return wrapped
    return textwrap.fill(text, 10, break_long_words=False, break_on_hyphens=False)


def _tick_label(position: int, name: str) -> str:
    """``#40 add_``: position 40, node ``add_`` (the storage graph numbers positions the same way)."""
    return f"#{position} {name}"


def plot_timeline(
    source: AliasAnalysis | Timeline,
    *,
    storages: object = None,
    around: object = None,
    window: tuple[int, int] | None = None,
    decisions: Decisions | None = None,
    max_storages: int = 24,
    max_positions: int = 120,
    group_parameters: bool = True,
    title: str | None = None,
) -> Figure:
    """Draw the storage timeline (module docstring) with matplotlib.

    Parameters
    ----------
    source : AliasAnalysis or Timeline
        An analysis (the keyword arguments go to :func:`storage_timeline`), or a
        timeline computed already.
    storages, around, window, decisions, max_storages, max_positions, group_parameters
        As for :func:`storage_timeline`.
    title : str, optional
        Replaces the computed title's first part.

    Returns
    -------
    matplotlib.figure.Figure
        A figure made without ``pyplot`` (no global state): a notebook cell that
        returns it (or ``display(fig)``) shows it as a PNG; ``fig.savefig("t.svg")``
        writes it. Its artists carry ids (``get_gid()``) that say what they draw:
        ``value-<storage>-<value>-<i>`` for the i-th run of a value's bytes,
        ``read-`` / ``write-<storage>-<node>-<value>-<i>`` for the i-th run an
        access touches, ``label-<storage>-<value>`` and ``clone-<clone>`` for the
        labels, ``lane-<storage>`` for a lane's frame.

    Raises
    ------
    RenderingError
        When matplotlib is not installed.

    Examples
    --------
    >>> import torch, aliasing
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> a = aliasing.analyze(make_fx(lambda x: x[1:].add_(1), tracing_mode="fake")(torch.zeros(4)))
    >>> fig = aliasing.plot_timeline(a)
    >>> bool(fig.get_size_inches()[0] > 0)
    True
    """
    figure_class = _import_matplotlib()
    _show_in_notebooks(figure_class)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if isinstance(source, Timeline):
        timeline = source
    else:
        timeline = storage_timeline(
            source,
            storages=storages,
            around=around,
            window=window,
            decisions=decisions,
            max_storages=max_storages,
            max_positions=max_positions,
            group_parameters=group_parameters,
        )
    first, stop = timeline.window
    heights = [_lane_height(lane) for lane in timeline.lanes]
    axes_h = sum(heights) + _LANE_GAP * len(heights) + 0.2
    axes_w = max(6.0, min(44.0, (stop - first + 1) * _INCH_PER_POSITION))
    fig = figure_class(figsize=(axes_w + 4.0, axes_h + 3.0), dpi=100)
    sheet = _Sheet(fig, FigureCanvasAgg(fig))  # a renderer to measure text with; savefig picks its own backend
    frame = _frame(sheet, timeline, heights, axes_w, axes_h)
    ax = _header_and_axes(sheet, timeline, frame, title)
    plot = _Plot(timeline, ax, _lane_bases(timeline, heights, axes_h), frame.x0, frame.x1)
    labels = _draw_lanes(plot)
    # labels: clone annotations first, then value labels, each where it overlaps no other label
    placer = _Placer(sheet.canvas.get_renderer(), 0.04 * fig.dpi)
    _annotate_clones(plot, placer)
    _place_value_labels(plot, placer, labels)
    _decorate_axes(plot, frame)
    return fig


@dataclass
class _Sheet:
    """The figure being drawn and the canvas that measures text on it."""

    fig: Figure
    canvas: Any

    def size_of(self, artist: Any) -> tuple[float, float]:
        """Width and height of a drawn artist, in inches."""
        box = artist.get_window_extent(self.canvas.get_renderer())
        return box.width / self.fig.dpi, box.height / self.fig.dpi

    def measure(self, text: str, **props: Any) -> tuple[float, float]:
        """Width and height, in inches, of ``text`` drawn with ``props`` (drawn, measured, removed)."""
        probe = self.fig.text(0, 0, text, **props)
        found = self.size_of(probe)
        probe.remove()
        return found


@dataclass(frozen=True)
class _Frame:
    """The figure's layout in inches: the lanes' axes and the margins measured around them."""

    heights: list[float]  #: of each lane
    axes_w: float
    axes_h: float
    left_in: float  #: lane labels
    right_in: float  #: lane sizes
    bottom_in: float  #: positions and the axis label
    fig_w: float
    x0: float  #: the axes' x range
    x1: float
    ticks: list[int]
    tick_labels: list[str]
    lane_labels: list[str]
    xlabel: str


def _frame(sheet: _Sheet, timeline: Timeline, heights: list[float], axes_w: float, axes_h: float) -> _Frame:
    """The margins, measured: lane labels on the left, sizes on the right, positions below."""
    measure = sheet.measure
    first, stop = timeline.window
    lane_labels = [_lane_label(lane) for lane in timeline.lanes]
    label_w = max((measure(text, fontsize=8)[0] for text in lane_labels), default=1.0)
    left_in = max(1.2, label_w + 0.25)
    size_w = max((measure(_size_text(lane.nbytes), fontsize=6.5)[0] for lane in timeline.lanes), default=0.3)
    right_in = max(0.5, 0.25 + size_w)
    x0, x1 = first - 0.6, stop + 0.6
    inch_per_position = axes_w / (x1 - x0)
    step = max(1, math.ceil(0.14 / inch_per_position))  # a tick label needs about 0.14 inch
    ticks = list(range(first, stop + 1, step))
    tick_labels = [_tick_label(t, timeline.names[t - first]) for t in ticks]
    tick_h = max((measure(text, fontsize=7.5, rotation=90)[1] for text in tick_labels), default=0.3)
    xlabel = "program order: #position node · in each lane, the byte offset goes up from 0 to the storage's size"
    xlabel = _wrap(xlabel, lambda t: measure(t, fontsize=8)[0] <= axes_w)
    bottom_in = tick_h + 0.12 + measure(xlabel, fontsize=8)[1] + 0.2
    return _Frame(
        heights, axes_w, axes_h, left_in, right_in, bottom_in, left_in + axes_w + right_in,
        x0, x1, ticks, tick_labels, lane_labels, xlabel,
    )


def _legend_columns(sheet: _Sheet, handles: list[Any], room: float) -> tuple[int, float]:
    """Columns of the widest legend that fits in ``room`` inches (one column at least), and its height."""
    ncol, legend_h = len(handles), 0.0
    while ncol >= 1:
        probe_legend = sheet.fig.legend(handles=handles, loc="upper left", ncol=ncol, fontsize=7.5, frameon=False)
        width, legend_h = sheet.size_of(probe_legend)
        probe_legend.remove()
        if width <= room or ncol == 1:
            break
        ncol = max(1, min(ncol - 1, math.ceil(len(handles) / (math.ceil(len(handles) / ncol) + 1)) or 1))
    return ncol, legend_h


def _header_and_axes(sheet: _Sheet, timeline: Timeline, frame: _Frame, title: str | None) -> Axes:
    """The header (title, notes and legend wrapped to the figure's width), the figure's size, the axes."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, measure = sheet.fig, sheet.measure
    room = frame.fig_w - 2 * _MARGIN
    head = _wrap(title or timeline.title, lambda t: measure(t, fontsize=10, fontweight="bold")[0] <= room)
    notes = "; ".join(timeline.notes)
    if notes:
        notes = _wrap(notes, lambda t: measure(t, fontsize=7.5)[0] <= room)
    handles = _legend_handles(timeline, Line2D, Patch)
    ncol, legend_h = _legend_columns(sheet, handles, room)
    head_h = measure(head, fontsize=10, fontweight="bold")[1]
    notes_h = measure(notes, fontsize=7.5)[1] if notes else 0.0
    top_in = _MARGIN + head_h + 0.08 + (notes_h + 0.06 if notes else 0.0) + legend_h + 0.12
    fig_w, fig_h = frame.fig_w, top_in + frame.axes_h + frame.bottom_in
    fig.set_size_inches(fig_w, fig_h)
    y = fig_h - _MARGIN
    fig.text(_MARGIN / fig_w, y / fig_h, head, fontsize=10, fontweight="bold", va="top", ha="left")
    y -= head_h + 0.08
    if notes:
        fig.text(_MARGIN / fig_w, y / fig_h, notes, fontsize=7.5, va="top", ha="left", color="#444444")
        y -= notes_h + 0.06
    fig.legend(handles=handles, loc="upper left", ncol=ncol, fontsize=7.5, frameon=False,
               bbox_to_anchor=(_MARGIN / fig_w, y / fig_h), borderaxespad=0.0)
    ax = fig.add_axes((frame.left_in / fig_w, frame.bottom_in / fig_h, frame.axes_w / fig_w, frame.axes_h / fig_h))
    ax.set_xlim(frame.x0, frame.x1)
    ax.set_ylim(0, frame.axes_h)
    return ax


def _lane_bases(timeline: Timeline, heights: list[float], axes_h: float) -> dict[str, tuple[float, float]]:
    """Bottom and height of each lane, in inches from the axes' bottom (lanes drawn from the top)."""
    bases: dict[str, tuple[float, float]] = {}
    y = axes_h - 0.1
    for lane, height in zip(timeline.lanes, heights):
        y -= height
        bases[lane.storage] = (y, height)
        y -= _LANE_GAP
    return bases


@dataclass
class _Plot:
    """What the drawing steps share: the timeline, its axes, where each lane is and the x range."""

    timeline: Timeline
    ax: Axes
    bases: dict[str, tuple[float, float]]  #: bottom and height of each lane (:func:`_lane_bases`)
    x0: float
    x1: float

    def to_y(self, sid: str, byte: float, nbytes: int | None) -> float:
        """The height of a byte offset in a storage's lane (its middle when the size is unknown)."""
        base, height = self.bases[sid]
        if not nbytes:
            return base + height / 2
        return base + 0.06 * height + 0.88 * height * (byte / nbytes)

    def extent(self, lane: Lane, pieces: Iterable[ByteRange]) -> list[tuple[float, float]]:
        """Drawn y ranges of byte ranges of a lane (at least a hairline high)."""
        ys = []
        for lo, hi in pieces:
            ya, yb = self.to_y(lane.storage, lo, lane.nbytes), self.to_y(lane.storage, hi, lane.nbytes)
            ys.append((ya, max(yb, ya + 0.012)))
        return ys


#: A value label to place once the clone annotations are: its lane, its span, and the span's x range.
_PendingLabel = tuple[Lane, ValueSpan, float, float]


def _draw_lanes(plot: _Plot) -> list[_PendingLabel]:
    """Each lane's frame, values, accesses and size marks; returns the value labels to place."""
    from matplotlib.patches import Rectangle

    ax, x0, x1 = plot.ax, plot.x0, plot.x1
    colours: dict[str, str] = {}
    decisions_by_clone = {c.clone: c for c in plot.timeline.clones}
    labels: list[_PendingLabel] = []
    for lane in plot.timeline.lanes:
        base, height = plot.bases[lane.storage]
        frame = ROLE_COLOURS.get(lane.role, ("", "#f7f7f7"))[1]
        ax.add_patch(Rectangle((x0, base), x1 - x0, height, facecolor=frame, edgecolor="#c8c8c8", lw=0.6, zorder=0,
                               gid=f"lane-{lane.storage}"))
        for span in lane.spans:
            colour = colours.setdefault(span.value, _PALETTE[len(colours) % len(_PALETTE)])
            clone = decisions_by_clone.get(span.value)
            xa, xb = _draw_span(plot, lane, span, colour, clone)
            if clone is None:  # a clone's annotation names it
                labels.append((lane, span, xa, xb))
        for mark in lane.accesses:
            _draw_access(plot, lane, mark)
        if not lane.members:
            ax.text(x1 + 0.15, base + 0.02 * height, "0", fontsize=6.5, color="#777777", va="bottom", clip_on=False)
            ax.text(x1 + 0.15, base + 0.98 * height, _size_text(lane.nbytes), fontsize=6.5, color="#777777", va="top",
                    clip_on=False)
    return labels


def _decision_colour(action: str) -> str:
    """The edge and text colour of a clone decision: green removed, orange kept."""
    return "#2e7d32" if action == "remove" else "#b35900"


def _draw_span(plot: _Plot, lane: Lane, span: ValueSpan, colour: str, clone: CloneMark | None) -> tuple[float, float]:
    """A value's bytes over its positions (in the decision's colours for a clone); returns its x range."""
    from matplotlib.patches import Rectangle

    first, stop = plot.timeline.window
    base, height = plot.bases[lane.storage]
    edge = "#555555"
    hatch = None
    if clone is not None:
        colour = REMOVED_FILL if clone.action == "remove" else KEPT_FILL
        edge = _decision_colour(clone.action)
        hatch = "///" if clone.action == "remove" else None
    xa, xb = max(span.start, first) - 0.4, min(span.stop, stop) + 0.4
    if span.envelope is None:
        plot.ax.add_patch(
            Rectangle((xa, base + 0.04 * height), xb - xa, 0.92 * height, facecolor="none",
                      edgecolor="#777777", hatch="xx", lw=0.6, zorder=1, gid=f"value-{lane.storage}-{span.value}-0")
        )
    else:
        pieces = span.runs if span.runs else (span.envelope,)
        for i, (ya, yb) in enumerate(plot.extent(lane, pieces)):
            plot.ax.add_patch(
                Rectangle((xa, ya), xb - xa, yb - ya, facecolor=colour, alpha=0.85,
                          edgecolor=edge, lw=0.6, hatch=hatch if hatch else (None if span.runs else ".."),
                          zorder=2, gid=f"value-{lane.storage}-{span.value}-{i}")
            )
    return xa, xb


def _draw_access(plot: _Plot, lane: Lane, mark: AccessMark) -> None:
    """A read (blue, a dot) or a write (red, a triangle) over the bytes it touches, dashed where inexact."""
    base, height = plot.bases[lane.storage]
    if lane.members or mark.envelope is None:
        exact, ys = bool(lane.members), [(base + 0.1 * height, base + 0.9 * height)]
    else:
        exact = bool(mark.runs)
        ys = plot.extent(lane, mark.runs if mark.runs else (mark.envelope,))
    write = mark.kind == "write"
    xm = mark.position + (0.14 if write else -0.14)
    colour = WRITE_COLOUR if write else _READ
    for i, (ya, yb) in enumerate(ys):
        plot.ax.plot([xm, xm], [ya, yb], color=colour, lw=2.2 if write else 1.1, zorder=4, solid_capstyle="butt",
                     ls="-" if exact else _DASHED, gid=f"{mark.kind}-{lane.storage}-{mark.node}-{mark.value}-{i}")
    if write:
        plot.ax.plot([xm], [max(yb for _, yb in ys)], marker="v", color=WRITE_COLOUR, ms=4.5, zorder=5)
    else:
        plot.ax.plot([xm], [(min(ya for ya, _ in ys) + max(yb for _, yb in ys)) / 2], marker="o", color=_READ, ms=3,
                     zorder=5)


@dataclass
class _Placer:
    """Places labels where they overlap no label placed before."""

    renderer: Any
    gap: float  #: pixels kept free between two labels
    placed: list[Bbox] = field(default_factory=list)  #: the placed labels' boxes, in pixels

    def fits(self, artist: Text | Annotation, inside: Bbox) -> bool:
        """Whether the artist, where it is now, lies inside ``inside`` and off every placed label."""
        from matplotlib.transforms import Bbox

        box = artist.get_window_extent(self.renderer)
        if box.x0 < inside.x0 - 0.5 or box.x1 > inside.x1 + 0.5 or box.y0 < inside.y0 - 0.5 or box.y1 > inside.y1 + 0.5:
            return False
        padded = Bbox.from_extents(box.x0 - self.gap, box.y0 - self.gap, box.x1 + self.gap, box.y1 + self.gap)
        return not any(padded.overlaps(other) for other in self.placed)

    def place(self, artist: Text | Annotation) -> None:
        """Keep the artist's box clear of the labels placed after it."""
        self.placed.append(artist.get_window_extent(self.renderer))


def _annotate_clones(plot: _Plot, placer: _Placer) -> None:
    """Each clone decision drawn: its note, a link to its original's lane, and the evidence of a keep."""
    area = plot.ax.get_window_extent(placer.renderer)
    spans_by_value = {(s.storage, s.value): s for lane in plot.timeline.lanes for s in lane.spans}
    for clone in plot.timeline.clones:
        lanes_here = [s for s in clone.storages if s in plot.bases]
        if not lanes_here:
            continue
        _clone_note(plot, placer, area, clone, spans_by_value.get((lanes_here[0], clone.clone)))
        _link_to_original(plot, clone)
        if clone.action != "remove":
            _evidence_stars(plot, clone)


def _clone_lane(plot: _Plot, clone: CloneMark) -> tuple[float, float]:
    """Bottom and height of the first drawn lane of the clone's storages."""
    return plot.bases[next(s for s in clone.storages if s in plot.bases)]


def _clone_note(plot: _Plot, placer: _Placer, area: Bbox, clone: CloneMark, own: ValueSpan | None) -> None:
    """The clone's note: beside its bytes (right, then left), else inside its lane wherever there is room."""
    first, stop = plot.timeline.window
    base, height = _clone_lane(plot, clone)
    removed = clone.action == "remove"
    colour = _decision_colour(clone.action)
    text = f"{clone.clone}: removed" if removed else f"{clone.clone}: kept\n{clone.reason}"
    end = min(own.stop, stop) if own is not None else clone.position
    start = max(own.start if own is not None else clone.position, first)
    note: Any = plot.ax.annotate(
        text, (end + 0.5, base + height * 0.5), xytext=(3, 0), textcoords="offset points", fontsize=7.5,
        color=colour, fontweight="bold", va="center", ha="left", zorder=7, annotation_clip=False,
        bbox={"boxstyle": "round,pad=0.15", "fc": REMOVED_FILL if removed else KEPT_FILL, "ec": colour, "lw": 0.6},
        gid=f"clone-{clone.clone}",
    )
    candidates = [(end + 0.5, "left", 3), (start - 0.5, "right", -3)]
    candidates += [(x, "left", 0) for x in _steps(plot.x0 + 0.1, plot.x1, 2.0)]
    for at, ha, dx in candidates:
        note.xy = (at, base + height * 0.5)
        note.set_ha(ha)
        note.xyann = (dx, 0)
        if placer.fits(note, area):
            break
    else:  # no room anywhere: beside the clone's bytes, inside the axes
        note.xy, note.xyann = (max(plot.x0 + 0.1, start - 0.5), base + height * 0.5), (0, 0)
        note.set_ha("left")
    placer.place(note)


def _link_to_original(plot: _Plot, clone: CloneMark) -> None:
    """A dashed link, at the clone's position, from its lane to each drawn lane of its original's alone."""
    base, height = _clone_lane(plot, clone)
    for sid in clone.original_storages:
        if sid in plot.bases and sid not in clone.storages:
            ob, oh = plot.bases[sid]
            ya, yb = sorted((ob + oh / 2, base + height / 2))
            plot.ax.plot([clone.position, clone.position], [ya, yb], color=_decision_colour(clone.action), lw=0.9,
                         ls=(0, (3, 2)), zorder=3)


def _evidence_stars(plot: _Plot, clone: CloneMark) -> None:
    """A star where each piece of evidence of a keep touches memory (on the clone's lane otherwise)."""
    timeline = plot.timeline
    base, height = _clone_lane(plot, clone)
    lanes_by_id = {lane.storage: lane for lane in timeline.lanes}
    related = {*clone.storages, *clone.original_storages}
    for ev in clone.evidence:
        if ev not in timeline.names or ev == clone.original:
            continue
        xe = timeline.window[0] + timeline.names.index(ev)
        where = [
            (lane.storage, m)
            for lane in timeline.lanes
            if lane.storage in related
            for m in lane.accesses
            if m.node == ev
        ]
        points = [(plot.bases[sid], m.envelope, sid) for sid, m in where] or [((base, height), None, "")]
        for (lb, lh), envelope, sid in points[:3]:
            ys_ = lb + lh * 0.5
            if envelope is not None and sid:
                nbytes = lanes_by_id[sid].nbytes
                ys_ = (plot.to_y(sid, envelope[0], nbytes) + plot.to_y(sid, envelope[1], nbytes)) / 2
            plot.ax.plot([xe], [ys_], marker="*", color=EVIDENCE_COLOUR, ms=9, zorder=6,
                         markeredgecolor="#6b3d00", markeredgewidth=0.4)


def _place_value_labels(plot: _Plot, placer: _Placer, labels: list[_PendingLabel]) -> None:
    """Each value's label, inside its lane where it overlaps no other label; left out where there is no room."""
    from matplotlib.transforms import Bbox

    ax = plot.ax
    to_data = ax.transData.inverted()
    for lane, span, xa, xb in labels:
        base, height = plot.bases[lane.storage]
        inside = ax.transData.transform([(plot.x0, base), (plot.x1, base + height)])
        lane_box = Bbox.from_extents(inside[0][0], inside[0][1], inside[1][0], inside[1][1])
        label = ax.text(xa + 0.05, base + height - 0.03, span.value, fontsize=_VALUE_PT, va="top", ha="left",
                        color="#1a1a1a", zorder=6, clip_on=False, gid=f"label-{lane.storage}-{span.value}",
                        bbox={"boxstyle": "square,pad=0.05", "fc": "white", "ec": "none", "alpha": 0.75})
        if _find_room(placer, to_data, label, lane_box, (base, height), (xa, xb)):
            placer.place(label)
        else:  # no room: left out rather than drawn over another label
            label.remove()


def _find_room(
    placer: _Placer, to_data: Any, label: Text, lane_box: Bbox, lane: tuple[float, float], span: tuple[float, float]
) -> bool:
    """Move the label to the first place in its lane where it fits, row by row; False when there is none.

    In each row: the value's start (``span``, its x range), then just right of each label in the way.
    """
    base, height = lane
    xa, xb = span
    rows = max(1, int((height - 0.03) / _ROW))
    for row in range(rows):
        ty = base + height - 0.03 - row * _ROW
        starts = [xa + 0.05]
        starts += sorted(to_data.transform((b.x1 + 2 * placer.gap, b.y0))[0] for b in placer.placed
                         if lane_box.y0 <= b.y1 and b.y0 <= lane_box.y1)
        for tx in [x for x in starts if xa <= x <= xb]:
            label.set_position((tx, ty))
            if placer.fits(label, lane_box):
                return True
    return False


def _decorate_axes(plot: _Plot, frame: _Frame) -> None:
    """Lane labels, position ticks and their grid lines, the axis label."""
    ax = plot.ax
    ax.set_yticks([plot.bases[lane.storage][0] + plot.bases[lane.storage][1] / 2 for lane in plot.timeline.lanes])
    ax.set_yticklabels(frame.lane_labels, fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.set_xticks(frame.ticks)
    ax.set_xticklabels(frame.tick_labels, rotation=90, fontsize=7.5)
    ax.tick_params(axis="x", length=2, pad=2)
    for t in frame.ticks:
        ax.axvline(t, color="#e3e3e3", lw=0.4, zorder=0.5)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel(frame.xlabel, fontsize=8)


def _steps(lo: float, hi: float, step: float) -> list[float]:
    return [lo + i * step for i in range(max(0, int((hi - lo) / step) + 1))]


def _legend_handles(timeline: Timeline, line: Any, patch: Any) -> list[Any]:
    kinds = {m.kind for lane in timeline.lanes for m in lane.accesses}
    handles = [
        line([], [], color=_READ, lw=1.2, marker="o", ms=3, label="read"),
        line([], [], color=WRITE_COLOUR, lw=2.2, marker="v", ms=4.5, label="write (over the bytes it touches)"),
    ]
    handles = [h for h, kind in zip(handles, ("read", "write")) if kind in kinds]
    handles.append(patch(facecolor=_PALETTE[0], edgecolor="#555555", label="value: its bytes, definition to last use"))
    marks = [m for lane in timeline.lanes if not lane.members for m in lane.accesses]
    if any(not m.runs for m in marks):
        handles.append(line([], [], color="#555555", lw=1.2, ls=_DASHED, label="access somewhere in the range"))
    if any(sp.envelope is None for lane in timeline.lanes for sp in lane.spans):
        handles.append(patch(facecolor="none", edgecolor="#777777", hatch="xx", label="place unknown"))
    actions = {c.action for c in timeline.clones}
    if "remove" in actions:
        handles.append(patch(facecolor=REMOVED_FILL, edgecolor="#2e7d32", hatch="///", label="clone removed"))
    if "keep" in actions:
        handles.append(patch(facecolor=KEPT_FILL, edgecolor="#b35900", label="clone kept"))
    if any(c.action == "keep" and set(c.evidence) - {c.original} for c in timeline.clones):
        handles.append(line([], [], color=EVIDENCE_COLOUR, marker="*", ms=8, lw=0, label="evidence of a keep"))
    return handles


def save_timeline(figure_or_analysis: Figure | AliasAnalysis | Timeline, path: str | Path, **kwargs: Any) -> Path:
    """Save a timeline as SVG or PNG (by ``path``'s suffix); returns the path.

    ``figure_or_analysis`` is a figure from :func:`plot_timeline`, or what it
    takes (with its keyword arguments in ``kwargs``).

    Examples
    --------
    >>> import tempfile, torch, aliasing
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> a = aliasing.analyze(make_fx(lambda x: x * 2, tracing_mode="fake")(torch.zeros(4)))
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_timeline(a, f"{d}/t.svg").read_text()[:5]
    '<?xml'
    """
    path = Path(path)
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in ("svg", "png"):
        raise ValueError(f"save_timeline writes .svg or .png files, not {path.name!r}")
    figure = figure_or_analysis if _is_figure(figure_or_analysis) else plot_timeline(figure_or_analysis, **kwargs)  # type: ignore[arg-type]
    figure.savefig(path, format=suffix, dpi=110)  # type: ignore[union-attr]
    return path


def timeline_svg(source: AliasAnalysis | Timeline, **kwargs: Any) -> str:
    """The timeline as an SVG document (text), for HTML pages.

    Examples
    --------
    >>> import torch, aliasing
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> a = aliasing.analyze(make_fx(lambda x: x * 2, tracing_mode="fake")(torch.zeros(4)))
    >>> "<svg" in timeline_svg(a)
    True
    """
    buffer = io.StringIO()
    plot_timeline(source, **kwargs).savefig(buffer, format="svg")
    return str(buffer.getvalue())


def _is_figure(obj: object) -> bool:
    return type(obj).__name__ in ("Figure", "SubFigure") and hasattr(obj, "savefig")
