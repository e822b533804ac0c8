"""The pictures: the storage graph as DOT (``aliasing.to_dot``) and the storage timeline.

- DOT: one box per graph node, values clustered by storage, every drawn edge
  going forward in program order (writes excepted, which do not constrain the
  layout), writes distinct from reads, the filters (``nodes=``, ``storages=``,
  ``around=``/``depth=``, ``window=``, ``max_nodes``), decisions coloured, and
  Graphviz rendering where ``dot`` is installed;
- the timeline's content (``storage_timeline``): byte runs of strided views,
  live ranges, reads and writes where they happen, clone marks, lane and
  window selection, symbolic sizes;
- drawing (``plot_timeline``, ``save_timeline``) with matplotlib, which
  ``import aliasing`` does not import;
- legibility on a 1,000-node program exported with ``torch.export`` (a stack
  of GPT-style blocks): the default pictures stay within a bounded size with
  readable text, and so do the close-ups around a clone.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import networkx as nx
import pydot
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import aliasing
from aliasing.errors import UnknownNodeError
from aliasing.pictures.timeline import MAX_RUNS, storage_timeline
from rewrite import eliminate_clones
from rewrite.examples import DEMO_DONATED_INPUTS, trace_demo
from rewrite.testing import copy_program

HAS_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAS_DOT, reason="Graphviz 'dot' is not installed (Debian: apt-get install graphviz)")
matplotlib = pytest.importorskip("matplotlib", reason="matplotlib is not installed (the notebooks extra)")


@pytest.fixture(scope="module")
def demo() -> tuple[torch.fx.GraphModule, aliasing.AliasAnalysis, object]:
    gm = trace_demo()
    analysis = aliasing.analyze(gm, donated_inputs=DEMO_DONATED_INPUTS)
    report = eliminate_clones(copy_program(gm), donated_inputs=DEMO_DONATED_INPUTS)
    return gm, analysis, report


def _parse(dot: str) -> pydot.Dot:
    graphs = pydot.graph_from_dot_data(dot)
    assert graphs is not None and len(graphs) == 1
    return graphs[0]


def _edges(dot: str) -> list[tuple[str, str, str]]:
    """(tail, head, attributes) of every edge line."""
    return re.findall(r'^\s*"([^"]+)" -> "([^"]+)" \[(.*)\];$', dot, re.M)


def _boxes(dot: str) -> set[str]:
    return set(re.findall(r'^\s*"([^"]+)" \[label=', dot, re.M))


# --- DOT ----------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::DeprecationWarning:pydot.dot_parser")
def test_dot_draws_each_node_once_clustered_by_storage(demo: tuple) -> None:
    gm, analysis, _ = demo
    dot = aliasing.to_dot(analysis)
    parsed = _parse(dot)
    assert _boxes(dot) == {n.name for n in gm.graph.nodes}  # an op and its value: one box
    clusters = {s.get_name().strip('"'): s for s in parsed.get_subgraphs()}
    # storages holding several values are frames: the qkv buffer, both caches, clone_4 and its add_
    assert set(clusters) == {"cluster_s6", "cluster_s7", "cluster_s10", "cluster_s19"}
    members = {n.get_name().strip('"') for n in clusters["cluster_s10"].get_nodes()}
    assert members == {"mm", "split", "getitem", "getitem_1", "getitem_2"}
    # a value alone in its storage says which in its label
    assert re.search(r'"clone_3" \[label="clone_3  #28  · s16', dot)


def test_dot_edges_follow_program_order_and_writes_stand_out(demo: tuple) -> None:
    gm, analysis, _ = demo
    position = {n.name: i for i, n in enumerate(gm.graph.nodes)}
    dot = aliasing.to_dot(analysis)
    writes = set()
    for tail, head, attrs in _edges(dot):
        if "label=\"writes\"" in attrs:
            writes.add((tail, head))
            assert "constraint=false" in attrs and "#d62728" in attrs and "penwidth" in attrs
        else:  # every other edge, visible or not, goes forward: top to bottom is program order
            assert position[tail] < position[head], (tail, head)
    assert writes == {
        ("rms_norm_", "clone"),
        ("rotary_", "getitem"),
        ("rotary_", "getitem_1"),
        ("copy_", "slice_1"),
        ("index_copy_", "v_cache_1"),
        ("add_", "clone_4"),
    }
    # copy_ reads getitem_1 after rotary_ wrote it: an ordering edge keeps copy_ below rotary_
    assert ("rotary_", "copy_") in {(t, h) for t, h, _ in _edges(dot)}
    # views are dashed, from the base to the view
    assert any(t == "k_cache_1" and h == "slice_1" and "dashed" in a for t, h, a in _edges(dot))


def test_dot_decisions_colour_clones_with_their_reasons(demo: tuple) -> None:
    _, analysis, report = demo
    dot = aliasing.to_dot(analysis, decisions=report)
    assert re.search(r'"clone_3" \[label="[^"]*REMOVED: removable", [^\]]*fillcolor="#b9e6b9"', dot)
    assert re.search(r'"clone" \[label="[^"]*KEPT: C3 clone-written-then-original-read", [^\]]*fillcolor="#ffd19a"', dot)
    # the evidence of the C3 keep: the write through rms_norm_ and the read by add_
    evidence = {h for t, h, a in _edges(dot) if t == "clone" and "evidence" in a}
    assert evidence == {"rms_norm_", "add_"}
    # a plain sequence of decisions works as well as the report
    assert aliasing.to_dot(analysis, decisions=report.decisions) == dot


def test_dot_filters(demo: tuple) -> None:
    _, analysis, _ = demo
    around = aliasing.to_dot(analysis, around="rotary_", depth=1)
    assert _boxes(around) == {"rotary_", "getitem", "getitem_1", "cos_1", "sin_1"}
    assert "5 of 34 nodes shown" in around
    deeper = _boxes(aliasing.to_dot(analysis, around="rotary_", depth=2))
    assert {"split", "clone_1", "copy_", "clone_2"} <= deeper
    assert _boxes(aliasing.to_dot(analysis, around="rotary_", depth=0)) == {"rotary_"}
    by_storage = _boxes(aliasing.to_dot(analysis, storages="s6"))
    assert by_storage == {"k_cache_1", "slice_1", "copy_", "slice_2", "t", "mm_1"}  # values in s6, their readers
    assert _boxes(aliasing.to_dot(analysis, nodes=["mm", "mul"])) == {"mm", "mul"}
    # a window takes the inputs its nodes use
    window = _boxes(aliasing.to_dot(analysis, window=(29, 31)))
    assert window == {"mm_2", "mm_3", "clone_4", "w_out_1"}
    # filters combine as a union; a networkx graph is accepted as well
    graph = aliasing.build_storage_graph(analysis)
    assert _boxes(aliasing.to_dot(graph, nodes="mm", storages=["s19"])) == {"mm", "clone_4", "add_", "output"}
    with pytest.raises(UnknownNodeError, match="no node named 'nope'"):
        aliasing.to_dot(analysis, around="nope")
    with pytest.raises(UnknownNodeError, match="no storage 's99'"):
        aliasing.to_dot(analysis, storages=["s99"])
    with pytest.raises(ValueError, match="depth"):
        aliasing.to_dot(analysis, around="mm", depth=-1)
    with pytest.raises(ValueError, match="window"):
        aliasing.to_dot(analysis, window=(1,))  # type: ignore[arg-type]


def test_dot_of_a_large_graph_is_a_window_unless_asked(demo: tuple) -> None:
    _, analysis, _ = demo
    small = aliasing.to_dot(analysis, max_nodes=10)
    assert "nodes shown (positions 9-18: pass nodes=, storages=, around= or window= to choose)" in small
    assert {"clone", "rms_norm_", "mm", "slice_1"} <= _boxes(small) and "copy_" not in _boxes(small)
    assert _boxes(aliasing.to_dot(analysis, max_nodes=None)) == _boxes(aliasing.to_dot(analysis))


@needs_dot
def test_render_dot_svg_and_png(demo: tuple) -> None:
    _, analysis, report = demo
    source = aliasing.to_dot(analysis, decisions=report)
    svg = aliasing.render_dot(source, "svg").decode()
    assert "<svg" in svg and "rotary_" in svg and "KEPT: C3" in svg
    png = aliasing.render_dot(source, "png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(aliasing.RenderingError, match="dot failed"):
        aliasing.render_dot("digraph { a -> }")


def test_render_dot_without_graphviz(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("aliasing.pictures.storage_graph.shutil.which", lambda name: None)
    assert not aliasing.graphviz_available()
    with pytest.raises(aliasing.RenderingError, match="apt-get install graphviz"):
        aliasing.render_dot("digraph { a }")


# --- the timeline's content ---------------------------------------------------------------


def test_timeline_draws_strided_views_as_interleaved_runs(demo: tuple) -> None:
    _, analysis, _ = demo
    lane = storage_timeline(analysis).lane("s10")
    spans = {s.value: s for s in lane.spans}
    assert "split" not in spans  # the tuple is drawn through its getitems
    assert lane.nbytes == 4 * 24 * 4
    row = 24 * 4  # bytes per row of the [4, 24] float32 buffer
    assert spans["getitem"].runs == tuple((r * row, r * row + 32) for r in range(4))
    assert spans["getitem_1"].runs == tuple((r * row + 32, r * row + 64) for r in range(4))
    assert spans["getitem_2"].envelope == (64, 3 * row + 96)
    assert spans["mm"].runs == ((0, 384),)
    # each value from its definition to its last use
    assert (spans["getitem"].start, spans["getitem"].stop) == (13, 23)  # read last by clone_2
    assert (spans["mm"].start, spans["mm"].stop) == (11, 12)
    writes = [(m.position, m.node, m.value, m.envelope) for m in lane.accesses if m.kind == "write"]
    assert writes == [(17, "rotary_", "getitem", spans["getitem"].envelope), (17, "rotary_", "getitem_1", spans["getitem_1"].envelope)]


def test_timeline_marks_clone_decisions(demo: tuple) -> None:
    _, analysis, report = demo
    t = storage_timeline(analysis, decisions=report)
    marks = {c.clone: c for c in t.clones}
    # every copy decided is marked: the five clones and the KV cache's write-back (a real copy, kept)
    assert set(marks) == {"clone", "clone_1", "clone_2", "clone_3", "clone_4", "copy_"}
    assert marks["copy_"].action == "keep"
    assert marks["clone"].action == "keep" and marks["clone"].reason == "C3 clone-written-then-original-read"
    assert marks["clone"].storages == ("s9",) and marks["clone"].original_storages == ("s0",)
    assert marks["clone_3"].action == "remove" and marks["clone_3"].evidence == ()


def test_timeline_selection(demo: tuple) -> None:
    _, analysis, report = demo
    full = storage_timeline(analysis)
    assert len(full.lanes) == 20 and full.window == (0, 33) and full.notes == ()
    # around a clone: its storage, its original's, and what it reads; a window around it
    around = storage_timeline(analysis, around="clone", decisions=report)
    assert [lane.storage for lane in around.lanes] == ["s0", "s9"]
    assert around.window[0] <= 9 <= around.window[1] and around.window[1] >= 32  # add_ reads x_1 at 32
    assert [lane.storage for lane in storage_timeline(analysis, storages=["s6", "s7"]).lanes] == ["s6", "s7"]
    # a window drops the lanes with nothing in it and clips the rest
    window = storage_timeline(analysis, window=(25, 28))
    assert {lane.storage for lane in window.lanes} >= {"s13", "s14", "s15", "s16"}
    assert all(25 <= m.position <= 28 for lane in window.lanes for m in lane.accesses)
    assert window.names == ("mm_1", "mul", "_softmax", "clone_3")
    # limits say what they left out
    capped = storage_timeline(analysis, decisions=report, max_storages=5, max_positions=10)
    assert len(capped.lanes) <= 5 and capped.window[1] - capped.window[0] == 9
    assert any("pass window=" in n for n in capped.notes) and any("not shown" in n for n in capped.notes)
    with pytest.raises(UnknownNodeError):
        storage_timeline(analysis, storages=["s99"])
    with pytest.raises(UnknownNodeError):
        storage_timeline(analysis, around="nope")
    with pytest.raises(ValueError, match="window"):
        storage_timeline(analysis, window=(5, 2))
    with pytest.raises(ValueError, match="max_storages"):
        storage_timeline(analysis, max_storages=0)


def test_timeline_runs_of_unusual_layouts() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x[:, ::2], x[:, 1::2], x.t(), x[0:0], x.expand(3, 4, 6)

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4, 6))
    lane = storage_timeline(aliasing.analyze(gm)).lane("s0")
    spans = {s.value: s for s in lane.spans}
    assert spans["slice_1"].runs == tuple((24 * r + 8 * c, 24 * r + 8 * c + 4) for r in range(4) for c in range(3))
    assert spans["slice_2"].runs[0] == (4, 8)  # x[:, 1::2]: interleaved with x[:, ::2]
    assert spans["t"].runs == ((0, 96),)  # a transpose touches the same bytes
    assert spans["slice_3"].envelope == (0, 0) and spans["slice_3"].runs == ()  # empty
    assert spans["expand"].runs == ((0, 96),)  # stride-0 dimensions repeat bytes
    # more runs than MAX_RUNS: the envelope only
    gm = make_fx(lambda x: x[:, ::2] + 1, tracing_mode="fake")(torch.randn(MAX_RUNS + 1, 4))
    lane = storage_timeline(aliasing.analyze(gm)).lane("s0")
    strided = next(s for s in lane.spans if s.value == "slice_1")
    assert strided.runs == () and strided.envelope is not None and not strided.exact


def test_timeline_symbolic_sizes_use_hints() -> None:
    analysis = aliasing.analyze(trace_demo("symbolic"))
    t = storage_timeline(analysis)
    assert t.symbolic and any("trace-time hints" in n for n in t.notes)
    spans = {s.value: s for s in t.lane("s10").spans}
    assert spans["getitem_1"].runs == tuple((r * 96 + 32, r * 96 + 64) for r in range(4))


# --- drawing ------------------------------------------------------------------------------


def test_import_aliasing_does_not_import_matplotlib() -> None:
    code = "import sys, aliasing, rewrite, rewrite.cli, rewrite.explain, rewrite.html_report; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert result.stdout.strip() == "False"


def test_plot_and_save_timeline(tmp_path: Path, demo: tuple) -> None:
    _, analysis, report = demo
    fig = aliasing.plot_timeline(analysis, decisions=report)
    texts = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert "clone: kept\nC3 clone-written-then-original-read" in texts
    assert "clone_3: removed" in texts
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels[0] == "#0 x_1" and labels[-1] == "#33 output"  # every position named, in order
    svg = aliasing.save_timeline(fig, tmp_path / "t.svg").read_text()
    assert svg.startswith("<?xml") and "<svg" in svg
    png = aliasing.save_timeline(analysis, tmp_path / "t.png", decisions=report).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in aliasing.timeline_svg(storage_timeline(analysis, around="clone_3", decisions=report))
    with pytest.raises(ValueError, match=r"\.svg or \.png"):
        aliasing.save_timeline(fig, tmp_path / "t.pdf")


def test_plot_timeline_without_matplotlib(monkeypatch: pytest.MonkeyPatch, demo: tuple) -> None:
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib here")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(aliasing.RenderingError, match="needs matplotlib"):
        aliasing.plot_timeline(demo[1])


# --- what the drawn timeline shows: geometry read back from the figure ------------------------


class _SmallCNN(torch.nn.Module):
    """Three conv + BatchNorm layers and a linear head (14 parameters), one removable clone."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.c2, self.b2 = torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.c3, self.b3 = torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(x)))
        r = y.clone()
        y = torch.relu(self.b3(self.c3(y))) + r
        return self.fc(y.mean((2, 3)))


@pytest.fixture(scope="module")
def cnn() -> tuple[aliasing.AliasAnalysis, object]:
    ep = torch.export.export(_SmallCNN(), (torch.randn(2, 3, 8, 8),))  # train mode: BatchNorm writes its buffers
    return aliasing.analyze(ep), eliminate_clones(copy_program(ep))


def _artists(fig: object, prefix: str) -> list[object]:
    """Patches and lines of the timeline's axes whose id starts with ``prefix``."""
    ax = fig.axes[0]  # type: ignore[attr-defined]
    return [a for a in (*ax.patches, *ax.lines) if (a.get_gid() or "").startswith(prefix)]


def _y_range(artist: object) -> tuple[float, float]:
    if hasattr(artist, "get_ydata"):
        ys = artist.get_ydata()  # type: ignore[attr-defined]
        return float(min(ys)), float(max(ys))
    return artist.get_y(), artist.get_y() + artist.get_height()  # type: ignore[attr-defined]


def _texts(fig: object) -> list[object]:
    """Every visible text of the figure with something in it: titles, labels, ticks, legend."""
    texts = fig.findobj(matplotlib.text.Text)  # type: ignore[attr-defined]
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def _renderer(fig: object) -> object:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)  # type: ignore[attr-defined]
    return canvas.get_renderer()


def _boxes_of(fig: object, texts: list[object]) -> list[object]:
    renderer = _renderer(fig)
    return [t.get_window_extent(renderer) for t in texts]  # type: ignore[attr-defined]


def test_a_write_marks_the_bytes_it_touches(demo: tuple) -> None:
    # rotary_ writes q and k in place: q's and k's stripes of the qkv buffer, never v's between them
    _, analysis, _ = demo
    lane = storage_timeline(analysis).lane("s10")
    spans = {s.value: s for s in lane.spans}
    writes = {m.value: m for m in lane.accesses if m.kind == "write"}
    assert set(writes) == {"getitem", "getitem_1"}
    for value, mark in writes.items():
        assert mark.runs == spans[value].runs and len(mark.runs) == 4
    fig = aliasing.plot_timeline(analysis, storages=["s10"])
    v = sorted(_y_range(r) for r in _artists(fig, "value-s10-getitem_2-"))
    assert len(v) == 4
    for value in ("getitem", "getitem_1"):
        drawn = sorted(_y_range(line) for line in _artists(fig, f"write-s10-rotary_-{value}-"))
        bytes_of_value = sorted(_y_range(r) for r in _artists(fig, f"value-s10-{value}-"))
        assert [y for r in drawn for y in r] == pytest.approx([y for r in bytes_of_value for y in r])  # the accessed region
        for lo, hi in drawn:  # and it crosses none of v's bytes
            assert all(hi <= v_lo + 1e-9 or v_hi <= lo + 1e-9 for v_lo, v_hi in v), (value, lo, hi)


def test_reads_mark_their_runs_and_unknown_extents_are_dashed() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x[:, ::2] * 2

    gm = make_fx(f, tracing_mode="fake")(torch.randn(3, 4))
    fig = aliasing.plot_timeline(aliasing.analyze(gm))
    reads = _artists(fig, "read-s0-mul-slice_1-")
    assert len(reads) == 6 and all(line.get_linestyle() == "-" for line in reads)  # type: ignore[attr-defined]
    gm = make_fx(f, tracing_mode="fake")(torch.randn(MAX_RUNS + 1, 4))  # too many runs: the envelope, dashed
    fig = aliasing.plot_timeline(aliasing.analyze(gm))
    (envelope,) = _artists(fig, "read-s0-mul-slice_1-")
    assert envelope.get_linestyle() != "-"  # type: ignore[attr-defined]
    assert "access somewhere in the range" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_lanes_where_nothing_happens_are_dropped() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = (x * 2).sin().cos().exp()
        return y + w  # w lives from the start to here, untouched in between

    analysis = aliasing.analyze(make_fx(f, tracing_mode="fake")(torch.randn(4), torch.randn(4)))
    t = storage_timeline(analysis, window=(3, 5))
    assert "s1" in t.idle and "s1" not in t.shown and t.shown == ("s2", "s3", "s4", "s5")
    assert any("3 storages with nothing happening in positions 3-5 not shown" in n for n in t.notes)
    for lane in t.lanes:
        assert lane.accesses or any(3 <= s.start <= 5 for s in lane.spans), lane.storage
    # asked for by name, a lane is drawn while one of its values lives in the window
    assert storage_timeline(analysis, storages=["s1"], window=(3, 5)).shown == ("s1",)


def test_read_only_parameters_are_one_band(cnn: tuple) -> None:
    analysis, report = cnn
    t = storage_timeline(analysis, decisions=report)
    band = t.group
    assert band is not None and band.storage == aliasing.pictures.timeline.GROUP
    parameters = [s for s in analysis.storages if analysis.storage_role(s).value == "parameter"]
    assert len(parameters) == 14 and sorted(band.members) == sorted(parameters)
    assert [lane.storage for lane in t.lanes if lane.role == "parameter"] == [band.storage]
    # the buffers BatchNorm writes keep their own lanes; every storage is drawn, the band counting 14
    assert sum(lane.role == "buffer" for lane in t.lanes) == 9 and len(t.shown) == 37 and len(t.lanes) == 24
    assert {m.kind for m in band.accesses} == {"read"} and {m.storage for m in band.accesses} == set(parameters)
    assert any("14 parameters the program never writes drawn as one band" in n for n in t.notes)
    fig = aliasing.plot_timeline(t)
    labels = [label.get_text() for label in fig.axes[0].get_yticklabels()]
    assert labels[0].startswith("14 parameters\nread only · ")
    # one lane each on request, and never for storages asked for by name
    flat = storage_timeline(analysis, decisions=report, group_parameters=False, max_storages=100)
    assert flat.group is None and sum(lane.role == "parameter" for lane in flat.lanes) == 14
    assert storage_timeline(analysis, storages=parameters[:3]).group is None


def test_value_colours_are_apart_from_the_decision_colours(demo: tuple) -> None:
    import colorsys

    from matplotlib.colors import to_rgb

    from aliasing.pictures.storage_graph import EVIDENCE_COLOUR, KEPT_FILL, REMOVED_FILL, WRITE_COLOUR

    _, analysis, report = demo
    fig = aliasing.plot_timeline(analysis, decisions=report)
    decided = {c.clone for c in storage_timeline(analysis, decisions=report).clones}
    fills = {
        matplotlib.colors.to_hex(r.get_facecolor(), keep_alpha=False)  # type: ignore[attr-defined]
        for r in _artists(fig, "value-")
        if r.get_gid().split("-")[2] not in decided and r.get_facecolor()[3] > 0  # type: ignore[attr-defined]
    }
    assert len(fills) >= 6
    decision_hues = [colorsys.rgb_to_hls(*to_rgb(c))[0] * 360 for c in (REMOVED_FILL, KEPT_FILL, WRITE_COLOUR, EVIDENCE_COLOUR)]
    for fill in fills:
        hue, _, saturation = colorsys.rgb_to_hls(*to_rgb(fill))
        if saturation < 0.12:
            continue  # a grey
        distance = min(min(abs(hue * 360 - d), 360 - abs(hue * 360 - d)) for d in decision_hues)
        assert distance >= 45, (fill, hue * 360)
        assert fill not in {REMOVED_FILL, KEPT_FILL}


def _layout_problems(fig: object) -> list[str]:
    """Texts outside the figure, and overlapping labels (inside the axes, and among ticks)."""
    problems = []
    fig.draw(_renderer(fig))  # type: ignore[attr-defined]  # legends and axis labels are laid out when drawn
    inside = fig.bbox  # type: ignore[attr-defined]
    texts = _texts(fig)
    for text, box in zip(texts, _boxes_of(fig, texts)):
        if box.x0 < inside.x0 - 1 or box.x1 > inside.x1 + 1 or box.y0 < inside.y0 - 1 or box.y1 > inside.y1 + 1:
            problems.append(f"outside the figure: {text.get_text()!r}")  # type: ignore[attr-defined]
    renderer = _renderer(fig)
    for legend in fig.legends:  # type: ignore[attr-defined]
        box = legend.get_window_extent(renderer)
        if box.x0 < inside.x0 or box.x1 > inside.x1 or box.y0 < inside.y0 or box.y1 > inside.y1:
            problems.append(f"legend outside the figure: {box}")
    ax = fig.axes[0]  # type: ignore[attr-defined]
    for group in (list(ax.texts), list(ax.get_xticklabels()), list(ax.get_yticklabels())):
        group = [t for t in group if t.get_visible() and t.get_text().strip()]
        boxes = _boxes_of(fig, group)
        for i, (a, box_a) in enumerate(zip(group, boxes)):
            for b, box_b in zip(group[i + 1 :], boxes[i + 1 :]):
                if box_a.overlaps(box_b):
                    problems.append(f"overlap: {a.get_text()!r} / {b.get_text()!r}")
    # the header (title, notes, legend) stays above the lanes
    top = ax.get_window_extent(renderer).y1
    for text in fig.texts:  # type: ignore[attr-defined]
        if text.get_window_extent(renderer).y0 < top:
            problems.append(f"header over the lanes: {text.get_text()!r}")
    return problems


def test_labels_never_overlap_and_everything_is_inside_the_figure(demo: tuple, cnn: tuple) -> None:
    _, analysis, report = demo
    figures = {
        "demo": aliasing.plot_timeline(analysis, decisions=report),
        "qkv": aliasing.plot_timeline(analysis, storages=["s6", "s7", "s10"]),
        "around clone": aliasing.plot_timeline(analysis, around="clone", decisions=report),
        "cnn": aliasing.plot_timeline(cnn[0], decisions=cnn[1]),
    }
    for name, fig in figures.items():
        assert _layout_problems(fig) == [], name
        ax = fig.axes[0]
        # value labels are left out when there is no room, never drawn over each other
        assert sum((t.get_gid() or "").startswith("label-") for t in ax.texts) >= 1, name
    # every clone annotation is drawn
    assert {t.get_gid() for t in figures["demo"].axes[0].texts if (t.get_gid() or "").startswith("clone-")} == {
        f"clone-{c}" for c in ("clone", "clone_1", "clone_2", "clone_3", "clone_4", "copy_")
    }


def test_the_legend_fits_narrow_and_wide_figures(demo: tuple, big: tuple) -> None:
    _, analysis, report = demo
    narrow = aliasing.plot_timeline(analysis, storages=["s9", "s16"], window=(8, 30), decisions=report)
    assert narrow.get_size_inches()[0] < 9.5
    entries = [t.get_text() for t in narrow.legends[0].get_texts()]
    assert {"read", "clone removed", "clone kept", "evidence of a keep"} <= set(entries)
    assert _layout_problems(narrow) == []

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.clone()
        y.add_(1)
        z = (x * 2).clone()
        torch.ops.aten.alias(z).resize_(0)  # metadata changed: the alias may be anywhere
        return y, z + 1

    gm = make_fx(f, tracing_mode="fake")(torch.randn(4))
    every_entry = aliasing.plot_timeline(aliasing.analyze(gm), decisions=eliminate_clones(copy_program(gm)))
    assert every_entry.get_size_inches()[0] < 9.5 and len(every_entry.legends[0].get_texts()) == 7
    assert _layout_problems(every_entry) == []
    _, big_analysis, big_report = big
    wide = aliasing.plot_timeline(big_analysis, decisions=big_report)
    assert wide.get_size_inches()[0] > 20
    assert _layout_problems(wide) == []


def test_axis_labels_say_position_and_node(demo: tuple) -> None:
    gm, analysis, _ = demo
    names = [n.name for n in gm.graph.nodes]
    fig = aliasing.plot_timeline(analysis, window=(30, 33))
    ax = fig.axes[0]
    for tick, label in zip(ax.get_xticks(), ax.get_xticklabels()):
        position, name = re.fullmatch(r"#(\d+) (\S+)", label.get_text()).groups()  # type: ignore[union-attr]
        assert int(position) == tick and names[int(tick)] == name
    assert "#position node" in ax.get_xlabel() and "byte offset" in ax.get_xlabel()
    assert ax.get_yticklabels()[0].get_text() == "s0  user input\n128 B · from x_1"


# --- legibility on a 1,000-node exported program --------------------------------------------


class _Block(torch.nn.Module):
    """A GPT-style block with a KV cache in buffers and three clones (two removable, one needed)."""

    def __init__(self, d: int = 32, heads: int = 4, cache: int = 16) -> None:
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.heads = heads
        self.register_buffer("k_cache", torch.zeros(cache, d))
        self.register_buffer("v_cache", torch.zeros(cache, d))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        self.k_cache.index_copy_(0, pos, k)
        self.v_cache.index_copy_(0, pos, v)
        q = q.view(t, self.heads, d // self.heads).transpose(0, 1)
        kc = self.k_cache.view(-1, self.heads, d // self.heads).transpose(0, 1)
        vc = self.v_cache.view(-1, self.heads, d // self.heads).transpose(0, 1)
        probs = (q @ kc.transpose(1, 2)).softmax(-1).clone()  # only read: removable
        h = self.proj((probs @ vc).transpose(0, 1).reshape(t, d)).clone()  # original dead: removable
        h.add_(x)
        y = self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(h))))
        r = h.clone()  # written, and h is read afterwards: needed (C3)
        r.mul_(0.5)
        return r + y + h


class _GPT(torch.nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block() for _ in range(layers))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, pos)
        return x


def export_gpt(layers: int) -> torch.export.ExportedProgram:
    """A stack of GPT-style blocks exported with ``torch.export`` (22 layers: 1,015 nodes)."""
    return torch.export.export(_GPT(layers), (torch.randn(4, 32), torch.arange(4)))


@pytest.fixture(scope="module")
def big() -> tuple[torch.export.ExportedProgram, aliasing.AliasAnalysis, object]:
    ep = export_gpt(22)
    report = eliminate_clones(copy_program(ep))
    return ep, aliasing.analyze(ep), report


#: Limits a picture must keep to stay legible: text at least 7 pt, a position at least 0.15 in wide.
MIN_FONT_PT = 6.5
MAX_TIMELINE_INCHES = (48.0, 24.0)


def _check_legible(fig: object) -> None:
    width, height = fig.get_size_inches()  # type: ignore[attr-defined]
    assert width <= MAX_TIMELINE_INCHES[0] and height <= MAX_TIMELINE_INCHES[1], (width, height)
    ax = fig.axes[0]  # type: ignore[attr-defined]
    first, last = ax.get_xlim()
    axes_width = ax.get_position().width * width
    assert axes_width / (last - first) >= 0.15  # inches per position
    for label in [*ax.get_xticklabels(), *ax.get_yticklabels(), *ax.texts]:
        assert label.get_fontsize() >= MIN_FONT_PT


@pytest.mark.integration
def test_a_1000_node_program_gives_legible_pictures(big: tuple, tmp_path: Path) -> None:
    ep, analysis, report = big
    assert len(ep.graph.nodes) >= 1000
    assert len(report.removed) == 44 and len(report.kept) == 22
    started = time.monotonic()
    t = storage_timeline(analysis, decisions=report)
    assert len(t.lanes) <= 24 and t.window[1] - t.window[0] + 1 <= 120
    assert t.window[0] > 300  # it starts where the program computes, after the 310 inputs
    assert any("pass window=" in n for n in t.notes)
    # the KV-cache buffers written in this window are among the lanes
    assert any(lane.role == "buffer" and any(m.kind == "write" for m in lane.accesses) for lane in t.lanes)
    fig = aliasing.plot_timeline(t)
    _check_legible(fig)
    png = aliasing.save_timeline(fig, tmp_path / "big.png")
    assert png.stat().st_size > 0
    # a close-up around a kept clone in the middle of the program
    kept = report.kept[len(report.kept) // 2]
    close = storage_timeline(analysis, around=kept, decisions=report)
    assert 2 <= len(close.lanes) <= 4 and close.window[1] - close.window[0] <= 120
    _check_legible(aliasing.plot_timeline(close))
    # DOT: a window of the program by default, the neighbourhood of a clone on request
    dot = aliasing.to_dot(analysis, decisions=report)
    assert len(_boxes(dot)) <= 150 + 80  # the window's nodes and the inputs they take
    near = aliasing.to_dot(analysis, around=kept, depth=2, decisions=report)
    assert kept in _boxes(near) and len(_boxes(near)) < 30
    assert time.monotonic() - started < 120
    if HAS_DOT:
        svg = aliasing.render_dot(dot, "svg", timeout=120).decode()
        width_pt, height_pt = (float(v) for v in re.search(r'width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
        assert width_pt < 3000 and height_pt < 8000  # scrollable, and every box at full size
        assert nx.is_directed_acyclic_graph(
            nx.DiGraph([(t_, h) for t_, h, a in _edges(dot) if "constraint=false" not in a])
        )


def test_dot_around_a_kept_clone_draws_its_evidence() -> None:
    # The demo's first clone is kept because rms_norm_ writes it and add_ reads the original
    # later; add_ is further than one edge from the clone.
    gm = trace_demo()
    analysis = aliasing.analyze(gm, donated_inputs=DEMO_DONATED_INPUTS)
    report = eliminate_clones(copy_program(gm), donated_inputs=DEMO_DONATED_INPUTS)
    (decision,) = [d for d in report.decisions if d.node == "clone"]
    assert decision.action == "keep" and "add_" in decision.evidence
    without = aliasing.to_dot(analysis, around="clone", depth=1)
    assert '"add_" [' not in without  # not a neighbour of the clone
    source = aliasing.to_dot(analysis, around="clone", depth=1, decisions=report)
    for name in (*decision.evidence, decision.original):
        assert f'"{name}" [' in source
    assert re.search(r'"clone" -> "add_" \[style=dotted[^]]*label="evidence"', source)
