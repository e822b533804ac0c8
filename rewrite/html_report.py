"""One self-contained HTML page that explains a program's memory and its clone decisions.

:func:`render_html` turns an :class:`~rewrite.explain.Explanation` into a page
with no external resources (pictures are embedded as ``data:`` URIs, styles
inline, no scripts):

1. a summary: nodes, inputs by role, storages, alias sets, and the copy
   candidates counted as everywhere else (:mod:`rewrite.counts`);
2. the decision table: node, kind (``clone`` or ``copy_``), original, action,
   condition, reason (with what it means) and evidence, each candidate linked
   to its close-up;
3. the storage timeline (:func:`aliasing.plot_timeline`) with the decisions;
4. the storage graph (:func:`aliasing.to_dot`, rendered by Graphviz where it is
   installed; the DOT text otherwise);
5. a close-up per clone: the timeline of the storages it touches and the
   graph around it (at most :data:`MAX_CLOSE_UPS`, kept clones first); for a
   kept clone, why its original (or the clone) and the first node of its
   evidence that may share its memory alias (:meth:`aliasing.AliasAnalysis.why`:
   the chains of views, the shared storage, the regions, the writes);
6. the graph's code with removed (green) and kept (orange) clones marked, and
   the rewritten code;
7. the storages and their reads and writes, in graph order.

Example
-------
>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> from rewrite.explain import explain
>>> page = explain(make_fx(lambda x: (x * 2).clone() + 1, tracing_mode="fake")(torch.randn(3))).html()
>>> page.startswith("<!DOCTYPE html>") and "clone" in page
True
"""

from __future__ import annotations

import base64
import html
import io
import re
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.fx

from aliasing import RenderingError, graphviz_available, render_dot
from aliasing.pictures.storage_graph import reason_text
from rewrite.counts import copy_kind, count_copies
from rewrite.planning.decisions import Reason

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from aliasing import AliasAnalysis
    from rewrite.planning.decisions import CloneEliminationReport, Decision

__all__ = ["MAX_CLOSE_UPS", "ExplainedProgram", "render_html", "why_pair"]


class ExplainedProgram(Protocol):
    """What :func:`render_html` reads: the part of :class:`rewrite.explain.Explanation` a page shows.

    :mod:`rewrite.explain` imports this module to render its explanations; this
    protocol keeps the import one-way.
    """

    @property
    def analysis(self) -> AliasAnalysis: ...
    @property
    def report(self) -> CloneEliminationReport: ...
    @property
    def rewritten(self) -> Any: ...
    @property
    def donated_inputs(self) -> tuple[int, ...]: ...
    @property
    def name(self) -> str: ...
    @property
    def graph_module(self) -> torch.fx.GraphModule: ...
    def timeline(self, **kwargs: Any) -> Figure: ...
    def dot(self, **kwargs: Any) -> str: ...

#: Close-ups (timeline and graph around one clone) in a report; kept clones come first.
MAX_CLOSE_UPS: int = 12

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0 2em 3em; color: #1a1a1a; }
h1 { font-size: 1.5em; margin: 1em 0 0.2em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1em; margin: 1.2em 0 0.4em; }
.sub { color: #555; margin: 0 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #d5d5d5; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; }
tr.remove td.action { background: #b9e6b9; font-weight: bold; }
tr.keep td.action { background: #ffd19a; font-weight: bold; }
.picture { overflow: auto; max-height: 90vh; border: 1px solid #e2e2e2; padding: 4px; background: #fff; }
.picture img { display: block; }
pre { background: #f7f7f7; padding: 0.6em; overflow: auto; font-size: 0.85em; line-height: 1.35; }
pre .removed { background: #c8ecc8; }
pre .kept { background: #ffe0b8; }
.note { color: #8a5a00; }
code { font-size: 0.95em; }
nav a { margin-right: 1em; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _svg_of(figure: Figure) -> bytes:
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text: small and searchable
        figure.savefig(buffer, format="svg")
    return buffer.getvalue()


def _img(data: bytes, alt: str, mime: str = "image/svg+xml") -> str:
    return f'<div class="picture"><img alt="{_e(alt)}" src="{_data_uri(mime, data)}"></div>'


def _timeline(explanation: ExplainedProgram, alt: str, **kwargs: object) -> str:
    try:
        figure = explanation.timeline(**kwargs)
    except RenderingError as exc:
        return f'<p class="note">No timeline: {_e(exc)}</p>'
    return _img(_svg_of(figure), alt)


def _graph(explanation: ExplainedProgram, alt: str, **kwargs: object) -> str:
    source = explanation.dot(**kwargs)
    if graphviz_available():
        try:
            return _img(render_dot(source, "svg"), alt)
        except RenderingError as exc:
            note = f"Graphviz failed ({exc}); the DOT source:"
    else:
        note = "Graphviz's <code>dot</code> is not installed (Debian: <code>apt-get install graphviz</code>); the DOT source:"
    return f'<p class="note">{note}</p><pre>{_e(source)}</pre>'


def _decision_rows(decisions: tuple[Decision, ...], close_ups: set[str]) -> str:
    rows = []
    for d in decisions:
        name = f'<a href="#clone-{_e(d.node)}">{_e(d.node)}</a>' if d.node in close_ups else _e(d.node)
        rows.append(
            f'<tr class="{_e(d.action)}"><td><code>{name}</code></td><td>{_e(copy_kind(d))}</td>'
            f"<td><code>{_e(d.original)}</code></td>"
            f'<td class="action">{_e(d.action)}</td><td>{_e(d.reason.condition or "-")}</td>'
            f"<td><code>{_e(d.reason.value)}</code><br>{_e(d.reason.description)}</td>"
            f"<td><code>{_e(', '.join(d.evidence) or '-')}</code></td></tr>"
        )
    return "\n".join(rows)


_ASSIGN = re.compile(r"^(\s*)(\w+) = ")


def _marked_code(code: str, decisions: tuple[Decision, ...]) -> str:
    by_name = {d.node: d for d in decisions}
    out = []
    for line in code.strip("\n").splitlines():
        match = _ASSIGN.match(line)
        d = by_name.get(match.group(2)) if match else None
        if d is None:
            out.append(_e(line))
            continue
        what = "removed" if d.action == "remove" else "kept"
        why = reason_text(d) + (f" (evidence: {', '.join(d.evidence)})" if d.evidence and d.action == "keep" else "")
        out.append(f'<span class="{what}" title="{_e(why)}">{_e(line)}  # {what}: {_e(why)}</span>')
    return "\n".join(out)


def _summary(explanation: ExplainedProgram) -> str:
    analysis, report = explanation.analysis, explanation.report
    gm = explanation.graph_module
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    roles = Counter(analysis.role(n).value for n in placeholders)
    shared = {tuple(m.name for m in analysis.alias_set(n)) for n in analysis.nodes if len(analysis.alias_set(n)) > 1}
    writes = sum(1 for sid in analysis.storages for a in analysis.storage_accesses(sid) if a.kind == "write")
    rows = [
        ("nodes", len(gm.graph.nodes)),
        ("inputs", ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(roles.items())) or "-"),
        ("donated inputs", ", ".join(placeholders[i].name for i in explanation.donated_inputs) or "none"),
        ("storages", len(analysis.storages)),
        ("alias sets of several values", len(shared)),
        ("writes", writes),
        ("copy candidates", str(count_copies(report.decisions))),
        ("opaque nodes (answered conservatively)", ", ".join(report.opaque) or "none"),
    ]
    if report.error:
        rows.append(("error (every clone kept)", report.error))
    body = "\n".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _accesses(explanation: ExplainedProgram) -> str:
    analysis = explanation.analysis
    parts = []
    for sid in analysis.storages:
        info = analysis.storage_info(sid)
        values = ", ".join(n.name for n in analysis.values_in(sid))
        rows = "".join(
            f"<tr><td class='num'>{a.position}</td><td>{_e(a.kind)}</td><td><code>{_e(a.node.name)}</code></td>"
            f"<td><code>{_e(a.value.name)}</code></td></tr>"
            for a in analysis.storage_accesses(sid)
        )
        table = (
            f"<table><tr><th>position</th><th>access</th><th>node</th><th>via</th></tr>{rows}</table>"
            if rows
            else "<p>no reads or writes</p>"
        )
        parts.append(
            f"<details><summary><code>{_e(sid)}</code> {_e(info.role.value)}, from <code>{_e(info.origin)}</code>: "
            f"<code>{_e(values)}</code></summary>{table}</details>"
        )
    return "\n".join(parts)


def render_html(explanation: ExplainedProgram, *, title: str | None = None) -> str:
    """The report page of an explanation (module docstring), as one string.

    Parameters
    ----------
    explanation : ExplainedProgram
        From :func:`rewrite.explain.explain`.
    title : str, optional
        The page's title; ``"fx-aliasing: <name>"`` by default.

    Returns
    -------
    str
        An HTML document with everything embedded.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from rewrite.explain import explain
    >>> e = explain(make_fx(lambda x: x.clone().add_(1), tracing_mode="fake")(torch.randn(3)))
    >>> "C5" in render_html(e)
    True
    """
    started = time.strftime("%Y-%m-%d %H:%M")
    report = explanation.report
    heading = title or f"fx-aliasing: {explanation.name}"
    ordered = sorted(report.decisions, key=lambda d: d.action != "keep")
    close_ups = [d for d in ordered if _in_graph(explanation, d.node)][:MAX_CLOSE_UPS]
    parts = _page_head(heading, started)
    parts += ['<h2 id="summary">Summary</h2>', _summary(explanation)]
    parts += _decisions_section(report.decisions, close_ups)
    parts += _pictures_section(explanation)
    parts += _close_ups_section(explanation, close_ups, len(report.decisions))
    parts += _code_section(explanation, report.decisions)
    parts += ['<h2 id="storages">Storages, reads and writes</h2>', _accesses(explanation), "</body></html>"]
    return "\n".join(parts) + "\n"


def _package_version() -> str:
    """fx-aliasing's installed version, or ``"source"`` in a source checkout."""
    try:
        from importlib.metadata import version

        return version("fx-aliasing")
    except Exception:  # not installed as a distribution (a source checkout)
        return "source"


def _page_head(heading: str, started: str) -> list[str]:
    """The document's head, its heading, the versions and time line, and the navigation bar."""
    ours = _package_version()
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(heading)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(heading)}</h1>",
        f'<p class="sub">fx-aliasing {_e(ours)}, torch {_e(torch.__version__)}, {started}</p>',
        '<nav><a href="#summary">summary</a><a href="#decisions">decisions</a><a href="#timeline">timeline</a>'
        '<a href="#graph">storage graph</a><a href="#close-ups">close-ups</a><a href="#code">code</a>'
        '<a href="#storages">storages</a></nav>',
    ]


def _decisions_section(decisions: tuple[Decision, ...], close_ups: list[Decision]) -> list[str]:
    """The decision table (each clone with a close-up linked to it)."""
    parts = ['<h2 id="decisions">Clone decisions</h2>']
    if decisions:
        parts.append(
            "<table><tr><th>node</th><th>kind</th><th>original</th><th>action</th><th>condition</th><th>reason</th>"
            f"<th>evidence</th></tr>{_decision_rows(decisions, {d.node for d in close_ups})}</table>"
        )
        parts.append(f"<p>{_e(count_copies(decisions))}</p>")
    else:
        parts.append("<p>The program has no copy candidate (clone or <code>copy_</code>).</p>")
    return parts


def _pictures_section(explanation: ExplainedProgram) -> list[str]:
    """The storage timeline and the storage graph of the whole program."""
    return [
        '<h2 id="timeline">Storage timeline</h2>',
        "<p>One lane per storage: program order across (<code>#position node</code>), byte offset up. Each value "
        "is drawn over the bytes it can touch, from its definition to its last use; reads (blue dots) and writes "
        "(red triangles) mark the bytes they touch; parameters and buffers the program never writes share one "
        "band; removed clones are green, kept clones orange with their reason, stars mark the evidence of a "
        "keep.</p>",
        _timeline(explanation, "storage timeline"),
        '<h2 id="graph">Storage graph</h2>',
        "<p>One box per node (#position in program order), values framed by storage, reads grey, writes red, "
        "views dashed blue.</p>",
        _graph(explanation, "storage graph"),
    ]


def _close_ups_section(explanation: ExplainedProgram, close_ups: list[Decision], decisions: int) -> list[str]:
    """Per clone of ``close_ups`` (of ``decisions`` in all): its decision, timeline and graph around it."""
    parts = ['<h2 id="close-ups">Close-ups</h2>']
    if not close_ups:
        parts.append("<p>No clone to look at.</p>")
    elif len(close_ups) < decisions:
        parts.append(f"<p>The first {len(close_ups)} of {decisions} decisions, kept clones first.</p>")
    for d in close_ups:
        what = "removed" if d.action == "remove" else "kept"
        parts += [
            f'<h3 id="clone-{_e(d.node)}"><code>{_e(d.node)}</code> = clone(<code>{_e(d.original)}</code>): '
            f"{what}, {_e(reason_text(d))}</h3>",
            f"<p>{_e(d.reason.description)}"
            + (f" Evidence: <code>{_e(', '.join(d.evidence))}</code>." if d.evidence else "")
            + "</p>",
            _why_block(explanation, d),
            _timeline(explanation, f"timeline around {d.node}", around=d.node),
            _graph(explanation, f"storage graph around {d.node}", around=[d.node, *_present(explanation, d.evidence)]),
        ]
    return parts


def why_pair(analysis: AliasAnalysis, d: Decision) -> tuple[str, str] | None:
    """The two values whose aliasing explains a kept copy, or None.

    For a kept clone, its original (else the clone itself) and the first node of its evidence that
    may share that value's memory; for a kept ``copy_``, its destination and the first node of its
    evidence (whether or not they alias: that is why the copy is not provably onto itself). None
    for a removal, a clone kept for its layout (C1), or when no such pair is in the analysed graph.

    Examples
    --------
    >>> import torch
    >>> from torch.fx.experimental.proxy_tensor import make_fx
    >>> from rewrite.explain import explain
    >>> def f(x):
    ...     y = x[1:]
    ...     c = y.clone()
    ...     x.add_(1)  # writes the original while the clone is live
    ...     return c + y
    >>> e = explain(make_fx(f, tracing_mode="fake")(torch.randn(4)))
    >>> why_pair(e.analysis, e.report.decisions[0])
    ('slice_1', 'add_')
    """
    if d.action != "keep" or d.reason is Reason.LAYOUT:
        return None
    names = {n.name for n in analysis.nodes}
    if d.reason.is_copy_reason:
        other = next((e for e in d.evidence if e != d.original and e in names), None)
        return (d.original, other) if other is not None and d.original in names else None
    for first in (d.original, d.node):
        if first not in names:
            continue
        for other in d.evidence:
            if other != first and other in names and analysis.may_alias(first, other):
                return first, other
    return None


def _why_block(explanation: ExplainedProgram, d: Decision) -> str:
    """A kept clone's :func:`why_pair` explained (:meth:`aliasing.AliasAnalysis.why`), or nothing."""
    pair = why_pair(explanation.analysis, d)
    if pair is None:
        return ""
    why = explanation.analysis.why(*pair)
    return (
        f'<details class="why" open><summary>why <code>{_e(pair[0])}</code> and <code>{_e(pair[1])}</code> '
        f"share memory ({_e(why.verdict)})</summary><pre>{_e(why)}</pre></details>"
    )


def _code_section(explanation: ExplainedProgram, decisions: tuple[Decision, ...]) -> list[str]:
    """The graph's code with the clones of ``decisions`` marked, and the rewritten graph's code."""
    rewritten_code = _graph_code(explanation.rewritten)
    return [
        '<h2 id="code">Code</h2>',
        "<p>The program's graph, with removed clones in green and kept clones in orange (hover for the reason).</p>",
        f"<pre>{_marked_code(explanation.graph_module.code, decisions)}</pre>",
        f"<details><summary>the rewritten graph</summary><pre>{_e(rewritten_code.strip())}</pre></details>",
    ]


def _graph_code(program: object) -> str:
    if isinstance(program, torch.export.ExportedProgram):
        return str(program.graph_module.code)
    if isinstance(program, torch.fx.GraphModule):
        return str(program.code)
    return ""


def _in_graph(explanation: ExplainedProgram, name: str) -> bool:
    return any(n.name == name for n in explanation.analysis.nodes)


def _present(explanation: ExplainedProgram, names: tuple[str, ...]) -> list[str]:
    return [n for n in names if _in_graph(explanation, n)]
