"""The provenance graph as Mermaid, Graphviz DOT, GraphML and node-link JSON (with the full report, lossless)."""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any

from ...errors import ObservationError, Problem
from ..model import GraphNode, Report

if TYPE_CHECKING:
    from pydantic import TypeAdapter

JSON_FORMAT = "dam-expert/provenance"
JSON_VERSION = 1

# kind -> (fill, stroke): shared by every graph format and the inline SVG
KIND_STYLE: dict[str, tuple[str, str]] = {
    "observation": ("#dbeafe", "#2563eb"),
    "derived": ("#e0f2fe", "#0891b2"),
    "rule": ("#f3f4f6", "#4b5563"),
    "finding": ("#fef3c7", "#d97706"),
    "bottleneck": ("#fee2e2", "#dc2626"),
    "recommendation": ("#dcfce7", "#16a34a"),
    "wasted": ("#f5f5f4", "#78716c"),
    "applied": ("#ecfccb", "#4d7c0f"),
    "measurement": ("#ede9fe", "#7c3aed"),
}
RELATION_STYLE: dict[str, tuple[str, bool]] = {  # relation -> (colour, dashed)
    "used": ("#6b7280", False),
    "derived-from": ("#0891b2", False),
    "concluded": ("#111827", False),
    "ruled-out": ("#dc2626", True),
    "needs": ("#7c3aed", True),
}


def node_kind(node: GraphNode) -> str:
    """The kind every export shows for a node: its graph kind, except that an optimization the job already applies
    (an `applied:` node, from the fact applied_optimizations) is its own kind, "applied", not "wasted" (the report
    graph may store it as "wasted"; an optimization that a rule also rules out keeps its own "wasted:" node)."""
    return "applied" if node.id.startswith("applied:") else node.kind


def node_label(report: Report, node: GraphNode) -> str:
    """A one-line label for a node: the value of a fact, the rule id and title, the conclusion's title."""
    bare = node.id.split(":", 1)[1] if ":" in node.id else node.id
    if node.kind == "rule":
        return f"{bare}: {node.label}" if not bare.startswith("table/") else node.label
    if node.kind == "finding":
        return f"finding: {bare}"
    if node.kind == "bottleneck":
        return f"{node.label}" + (" (verdict)" if bare == report.bottleneck else "")
    if node_kind(node) == "applied":
        return f"already applied: {node.label}"
    if node.kind == "wasted":
        return f"wasted: {node.label}"
    return node.label


def labels(report: Report) -> dict[str, str]:
    return {n.id: node_label(report, n) for n in report.graph.nodes}


# ---- Mermaid ----------------------------------------------------------------------------------------------------

_MERMAID_SHAPE = {
    "observation": ('(["', '"])'),
    "derived": ('[/"', '"/]'),
    "rule": ('["', '"]'),
    "finding": ('{{"', '"}}'),
    "bottleneck": ('[["', '"]]'),
    "recommendation": ('("', '")'),
    "wasted": ('>"', '"]'),
    "applied": ('[\\"', '"/]'),
    "measurement": ('[("', '")]'),
}
# plain arrows feed evidence forward, thick ones conclude; only the dashed relations carry a label (less clutter)
_MERMAID_ARROW = {"used": "-->", "derived-from": "-->", "concluded": "==>", "ruled-out": "-.->|ruled-out|",
                  "needs": "-.->|needs|"}


def _mermaid_text(text: str) -> str:
    return (text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
            .replace("\n", " "))


def to_mermaid(report: Report) -> str:
    """A Mermaid flowchart (renders on GitHub/GitLab): one node line per provenance node, one line per edge.

    Plain arrows: used / derived-from; thick: concluded; dashed and labelled: ruled-out, needs.
    """
    ids = {n.id: f"n{i}" for i, n in enumerate(report.graph.nodes)}
    text = labels(report)
    lines = ["flowchart LR"]
    for n in report.graph.nodes:
        kind = node_kind(n)
        left, right = _MERMAID_SHAPE[kind]
        lines.append(f"  {ids[n.id]}{left}{_mermaid_text(text[n.id])}{right}:::{kind}")
    for e in report.graph.edges:
        if e.source in ids and e.target in ids:
            lines.append(f"  {ids[e.source]} {_MERMAID_ARROW[e.relation]} {ids[e.target]}")
    for kind, (fill, stroke) in KIND_STYLE.items():
        lines.append(f"  classDef {kind} fill:{fill},stroke:{stroke},color:#111827")
    return "\n".join(lines) + "\n"


# ---- Graphviz DOT -----------------------------------------------------------------------------------------------

_DOT_SHAPE = {"observation": "ellipse", "derived": "parallelogram", "rule": "box", "finding": "hexagon",
              "bottleneck": "doubleoctagon", "recommendation": "box", "wasted": "box", "applied": "note",
              "measurement": "cylinder"}
_DOT_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _dot_quote(value: object) -> str:
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def _scalar_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if isinstance(v, (str, int, float, bool)) and _DOT_ID.match(k)}


def to_dot(report: Report) -> str:
    """Graphviz DOT (`dot -Tsvg`): nodes coloured by kind, dashed edges for ruled-out and needs."""
    text = labels(report)
    lines = ["digraph provenance {", "  rankdir=LR;",
             '  node [style="rounded,filled", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    for n in report.graph.nodes:
        kind = node_kind(n)
        fill, stroke = KIND_STYLE[kind]
        attrs = {"label": text[n.id], "kind": kind, "shape": _DOT_SHAPE[kind], "fillcolor": fill, "color": stroke}
        attrs.update({f"attr_{k}": v for k, v in _scalar_attrs(n.attrs).items()})
        body = ", ".join(f"{k}={_dot_quote(v)}" for k, v in attrs.items())
        lines.append(f"  {_dot_quote(n.id)} [{body}];")
    for e in report.graph.edges:
        colour, dashed = RELATION_STYLE[e.relation]
        style = ', style="dashed"' if dashed else ""
        lines.append(f"  {_dot_quote(e.source)} -> {_dot_quote(e.target)} [relation={_dot_quote(e.relation)}, "
                     f"label={_dot_quote(e.relation)}, color={_dot_quote(colour)}{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---- GraphML ----------------------------------------------------------------------------------------------------


def _graphml_value(value: object) -> str | int | float | bool:
    if isinstance(value, (str, bool, int, float)):
        return value
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True, default=str)


def to_graphml(report: Report) -> str:
    """GraphML (yEd, Gephi, networkx.read_graphml): every attribute a scalar; lists and mappings as JSON text."""
    import networkx as nx

    graph = nx.DiGraph()
    text = labels(report)
    for n in report.graph.nodes:
        attrs = {k: _graphml_value(v) for k, v in n.attrs.items()}
        attrs.update(kind=node_kind(n), label=text[n.id])
        graph.add_node(n.id, **attrs)
    for e in report.graph.edges:
        graph.add_edge(e.source, e.target, relation=e.relation)
    return "\n".join(nx.generate_graphml(graph, encoding="utf-8", prettyprint=True, named_key_ids=False)) + "\n"


# ---- node-link JSON (lossless) ----------------------------------------------------------------------------------


def node_link(report: Report) -> dict[str, Any]:
    """The provenance graph as node-link data (`networkx.node_link_graph(data, edges="edges")` reads it)."""
    return {
        "directed": True,
        "multigraph": False,
        "graph": {"verdict": report.bottleneck},
        "nodes": [{"id": n.id, "kind": node_kind(n), "label": n.label, **n.attrs} for n in report.graph.nodes],
        "edges": [{"source": e.source, "target": e.target, "relation": e.relation} for e in report.graph.edges],
    }


@functools.cache
def _any_json() -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(Any)


def to_json(report: Report) -> str:
    """Node-link JSON with the full report beside it: `load_json` gives back the same report and explanations."""
    payload = {"format": JSON_FORMAT, "version": JSON_VERSION, "graph": node_link(report),
               "report": json.loads(report.to_json(indent=None))}
    # pydantic's serializer writes the same text as json.dumps(indent=1, ensure_ascii=False), whose indented form
    # runs in pure Python: 25 ms against 3 on a rule-test case's report
    return _any_json().dump_json(payload, indent=1).decode() + "\n"


def load_json(text: str, where: str = "report") -> Report:
    """A report from a JSON export (node-link + report) or from a plain report JSON (`dam diagnose --format json`)."""
    from pydantic import ValidationError

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ObservationError([Problem(f"{where}:{exc.lineno}", f"invalid JSON: {exc.msg}")],
                               title="cannot read the report") from exc
    if isinstance(data, dict) and data.get("format") == JSON_FORMAT:
        data = data.get("report")
    if not isinstance(data, dict) or "evaluations" not in data:
        raise ObservationError([Problem(where, "is not a dam-expert report",
                                        "save one with `dam diagnose ... --format json --output report.json`")],
                               title="cannot read the report")
    try:
        return Report.model_validate(data)
    except ValidationError as exc:
        problems = [Problem(f"{where}: {'.'.join(str(p) for p in err['loc'])}", err["msg"])
                    for err in exc.errors()[:5]]
        raise ObservationError(problems, title="the report does not match this version of dam-expert") from exc
