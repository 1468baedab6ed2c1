"""Self-contained SVG: the provenance graph (layered layout), a roofline chart and the iron-law breakdown.

No plotting library is needed: the drawings are plain SVG text, so the HTML export works offline and `dam plot ...
--output x.svg` works without matplotlib. Layout and scales are computed here; every number comes from the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from ..model import Report
from . import _parts as shared
from .graph import KIND_STYLE, RELATION_STYLE, labels, node_kind

_FONT = "font-family=\"Helvetica, Arial, sans-serif\""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _num(value: float) -> str:
    return f"{value:.1f}"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---- provenance graph -------------------------------------------------------------------------------------------

NODE_W, NODE_H, GAP_X, GAP_Y, MARGIN = 210, 34, 80, 14, 20
_KIND_ORDER = list(KIND_STYLE)


def layout(report: Report) -> dict[str, tuple[float, float]]:
    """Top-left corner of every node: longest-path layers left to right, barycentre ordering within a layer."""
    nodes = [n.id for n in report.graph.nodes]
    kind = {n.id: node_kind(n) for n in report.graph.nodes}
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    succs: dict[str, list[str]] = {n: [] for n in nodes}
    for e in report.graph.edges:
        if e.source in preds and e.target in preds and e.source != e.target:
            preds[e.target].append(e.source)
            succs[e.source].append(e.target)
    layer: dict[str, int] = {}
    remaining = {n: len(preds[n]) for n in nodes}
    ready = [n for n in nodes if remaining[n] == 0]
    while ready:  # Kahn's order; nodes left on a cycle (never expected) go after the rest
        n = ready.pop(0)
        layer[n] = max((layer[p] + 1 for p in preds[n] if p in layer), default=0)
        for s in succs[n]:
            remaining[s] -= 1
            if remaining[s] == 0:
                ready.append(s)
    deepest = max(layer.values(), default=0)
    for n in nodes:
        layer.setdefault(n, deepest + 1)
    for n in nodes:  # a source that is not evidence (a rule waiting on missing facts) sits next to what it feeds
        if not preds[n] and succs[n] and kind[n] != "observation":
            layer[n] = max(0, min(layer[s] for s in succs[n]) - 1)
    columns: dict[int, list[str]] = {}
    for n in nodes:
        columns.setdefault(layer[n], []).append(n)
    for col in columns.values():
        col.sort(key=lambda n: (_KIND_ORDER.index(kind[n]), n))
    order = sorted(columns)
    for sweep in range(6):
        forward = sweep % 2 == 0
        position = {n: i for col in columns.values() for i, n in enumerate(col)}
        for index in order if forward else reversed(order):
            col = columns[index]
            neighbours = preds if forward else succs

            keys = {n: (_centre(n, neighbours, position), position[n]) for n in col}
            col.sort(key=keys.__getitem__)
            position.update({n: i for i, n in enumerate(col)})
    tallest = max((len(c) for c in columns.values()), default=0)
    coords: dict[str, tuple[float, float]] = {}
    for index, col in columns.items():
        offset = (tallest - len(col)) * (NODE_H + GAP_Y) / 2
        for i, n in enumerate(col):
            coords[n] = (MARGIN + index * (NODE_W + GAP_X), MARGIN + 30 + offset + i * (NODE_H + GAP_Y))
    return coords


def _centre(n: str, neighbours: dict[str, list[str]], position: dict[str, int]) -> float:
    near = [position[m] for m in neighbours[n]]
    return sum(near) / len(near) if near else float(position[n])


def provenance_svg(report: Report, element_id: str = "provenance-graph") -> str:
    """The provenance graph as one <svg>: a <g class="node"> per node (full label in its <title>), edges as paths."""
    coords = layout(report)
    text = labels(report)
    width = max((x for x, _ in coords.values()), default=0) + NODE_W + MARGIN
    height = max((y for _, y in coords.values()), default=0) + NODE_H + MARGIN
    width, height = max(width, 640), max(height, 120)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{_e(element_id)}" class="provenance" '
           f'width="{_num(width)}" height="{_num(height)}" viewBox="0 0 {_num(width)} {_num(height)}" role="img" '
           f'aria-label="provenance graph: {len(coords)} nodes, {len(report.graph.edges)} edges" {_FONT}>',
           "<defs>"]
    for relation, (colour, _) in RELATION_STYLE.items():
        out.append(f'<marker id="arrow-{relation}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
                   f'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
                   f'fill="{colour}"/></marker>')
    out.append("</defs>")
    x = MARGIN
    out.append('<g class="legend">')
    for kind, (fill, stroke) in KIND_STYLE.items():
        out.append(f'<rect x="{x}" y="{MARGIN - 12}" width="12" height="12" rx="3" fill="{fill}" stroke="{stroke}"/>'
                   f'<text x="{x + 16}" y="{MARGIN - 2}" font-size="11">{kind}</text>')
        x += 24 + 7 * len(kind)
    out.append("</g>")
    out.append('<g class="edges">')
    for e in report.graph.edges:
        if e.source not in coords or e.target not in coords:
            continue
        (sx, sy), (tx, ty) = coords[e.source], coords[e.target]
        x1, y1, x2, y2 = sx + NODE_W, sy + NODE_H / 2, tx, ty + NODE_H / 2
        bend = max(30.0, abs(x2 - x1) / 2)
        colour, dashed = RELATION_STYLE[e.relation]
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        out.append(f'<path class="edge" data-relation="{e.relation}" d="M {_num(x1)} {_num(y1)} C {_num(x1 + bend)} '
                   f'{_num(y1)}, {_num(x2 - bend)} {_num(y2)}, {_num(x2)} {_num(y2)}" fill="none" stroke="{colour}" '
                   f'stroke-width="1.2"{dash} marker-end="url(#arrow-{e.relation})"><title>{_e(e.source)} '
                   f'{e.relation} {_e(e.target)}</title></path>')
    out.append("</g>")
    out.append('<g class="nodes">')
    for n in report.graph.nodes:
        nx_, ny = coords[n.id]
        kind = node_kind(n)
        fill, stroke = KIND_STYLE[kind]
        width_px = 2.5 if n.id == f"bottleneck:{report.bottleneck}" else 1.2
        deco = ' text-decoration="line-through"' if kind == "wasted" else ""
        out.append(f'<g class="node" data-id="{_e(n.id)}" data-kind="{kind}"><title>{_e(text[n.id])}</title>'
                   f'<rect x="{_num(nx_)}" y="{_num(ny)}" width="{NODE_W}" height="{NODE_H}" rx="8" fill="{fill}" '
                   f'stroke="{stroke}" stroke-width="{width_px}"/>'
                   f'<text x="{_num(nx_ + 8)}" y="{_num(ny + 14)}" font-size="9" fill="{stroke}">{kind}</text>'
                   f'<text x="{_num(nx_ + 8)}" y="{_num(ny + 27)}" font-size="11" fill="#111827"{deco}>'
                   f"{_e(_short(text[n.id], 32))}</text></g>")
    out.append("</g></svg>")
    return "\n".join(out)


# ---- roofline ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    """The hardware roof and the workload's point, from the report's facts."""

    hardware: str
    dtype: str | None
    peak_tflops: float
    bandwidth_gbs: float
    ridge: float  # FLOP/byte
    intensity: float | None  # FLOP/byte
    achieved_tflops: float | None

    def attainable(self, intensity: float) -> float:
        """min(peak, BW · I) in TFLOP/s."""
        return min(self.peak_tflops, self.bandwidth_gbs * intensity / 1e3)

    def above_roof(self) -> str | None:
        """A warning when the workload's point lies above its roof (physically impossible: conflicting evidence),
        else None. 5 % of slack, as rules/sanity.yaml allows."""
        if self.achieved_tflops is None:
            return None
        roof = self.attainable(self.intensity) if self.intensity is not None else self.peak_tflops
        if self.achieved_tflops <= roof * 1.05:
            return None
        return (f"WARNING: above the roof ({self.achieved_tflops / roof:.2g}x its {roof:.4g} TFLOP/s): "
                "conflicting evidence, the inputs cannot all be right")


def roofline(report: Report) -> Roofline | None:
    """The roofline of the diagnosed hardware and dtype, or None when the peak or bandwidth is unknown."""
    facts = report.facts()

    def num(name: str) -> float | None:
        value = facts.get(name)
        return float(value) if isinstance(value, (int, float)) else None

    peak, bandwidth = num("peak_tflops"), num("peak_bandwidth")
    if peak is None or bandwidth is None or peak <= 0 or bandwidth <= 0:
        return None
    # a measurement beats a derivation: observed achieved TFLOP/s, observed MFU, then whatever was derived
    observed = report.observations
    mfu = num("mfu")
    achieved = num("achieved_tflops")
    prefer_mfu = "achieved_tflops" not in observed and "mfu" in observed
    if mfu is not None and (prefer_mfu or achieved is None):
        achieved = mfu * peak
    intensity = num("arithmetic_intensity")
    return Roofline(hardware=str(facts.get("hardware", "?")), dtype=str(facts["dtype"]) if "dtype" in facts else None,
                    peak_tflops=peak, bandwidth_gbs=bandwidth, ridge=num("ridge_point") or peak * 1e3 / bandwidth,
                    intensity=intensity if intensity and intensity > 0 else None,
                    achieved_tflops=achieved if achieved and achieved > 0 else None)


def _decade_ticks(lo: float, hi: float) -> list[float]:
    return [10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def _tick_label(value: float) -> str:
    return f"{value:g}" if 1e-3 <= value < 1e5 else f"1e{round(math.log10(value))}"


def roofline_svg(report: Report, width: int = 640, height: int = 400, element_id: str = "roofline") -> str | None:
    """A log-log roofline: the roof, the ridge point and the workload's point (when known); None without a roof."""
    rf = roofline(report)
    if rf is None:
        return None
    xs = [rf.ridge] + ([rf.intensity] if rf.intensity else [])
    x_lo = 10.0 ** math.floor(math.log10(min(xs) / 20))
    x_hi = 10.0 ** math.ceil(math.log10(max(xs) * 20))
    ys = [rf.peak_tflops, rf.attainable(x_lo)] + ([rf.achieved_tflops] if rf.achieved_tflops else [])
    y_lo = 10.0 ** math.floor(math.log10(min(ys)))
    y_hi = 10.0 ** math.ceil(math.log10(max(ys) * 2))
    left, right, top, bottom = 70, 20, 40, 50
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * pw

    def py(y: float) -> float:
        return top + ph - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * ph

    title = f"Roofline: {rf.hardware}" + (f" {rf.dtype}" if rf.dtype else "") + \
        f" (peak {rf.peak_tflops:.4g} TFLOP/s, {rf.bandwidth_gbs:.4g} GB/s)"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{_e(element_id)}" class="roofline" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}" {_FONT}>',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">{_e(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#9ca3af"/>']
    def gridline(tick: float, line: tuple[object, object, object, object], at: tuple[object, object],
                 anchor: str) -> str:
        """A grid line across the plot at one decade, labelled at `at`."""
        x1, y1, x2, y2 = line
        return (f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#e5e7eb"/>'
                f'<text x="{at[0]}" y="{at[1]}" font-size="11" text-anchor="{anchor}">{_tick_label(tick)}</text>')

    out += [gridline(t, (_num(px(t)), top, _num(px(t)), top + ph), (_num(px(t)), top + ph + 16), "middle")
            for t in _decade_ticks(x_lo, x_hi) if x_lo <= t <= x_hi]
    out += [gridline(t, (left, _num(py(t)), left + pw, _num(py(t))), (left - 6, _num(py(t) + 4)), "end")
            for t in _decade_ticks(y_lo, y_hi) if y_lo <= t <= y_hi]
    out.append(f'<text x="{left + pw / 2}" y="{height - 12}" font-size="12" text-anchor="middle">'
               "arithmetic intensity (FLOP/byte)</text>")
    out.append(f'<text x="16" y="{top + ph / 2}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 16 {top + ph / 2})">performance (TFLOP/s)</text>')
    roof = [(x_lo, rf.attainable(x_lo)), (rf.ridge, rf.peak_tflops), (x_hi, rf.peak_tflops)]
    points = " ".join(f"{_num(px(x))},{_num(py(y))}" for x, y in roof)
    out.append(f'<polyline class="roof" points="{points}" fill="none" stroke="#1f2937" stroke-width="2.5"/>')
    out.append(f'<line class="ridge" x1="{_num(px(rf.ridge))}" y1="{top}" x2="{_num(px(rf.ridge))}" y2="{top + ph}" '
               'stroke="#d97706" stroke-dasharray="5 4"/>'
               f'<text x="{_num(px(rf.ridge) + 5)}" y="{top + 14}" font-size="11" fill="#b45309">'
               f"ridge {rf.ridge:.4g} FLOP/B</text>")
    out.append(f'<text x="{_num(px(x_lo) + 8)}" y="{_num(py(rf.attainable(x_lo)) - 8)}" font-size="11" '
               f'fill="#374151">memory roof: {rf.bandwidth_gbs:.4g} GB/s × I</text>')
    if rf.intensity is not None:
        roof_at = rf.attainable(rf.intensity)
        x = px(rf.intensity)
        if rf.achieved_tflops is not None:
            y = py(max(rf.achieved_tflops, y_lo))
            note = (f"workload: {rf.intensity:.4g} FLOP/B, {rf.achieved_tflops:.4g} TFLOP/s "
                    f"({rf.achieved_tflops / roof_at:.0%} of its roof)")
            out.append(f'<circle class="workload" cx="{_num(x)}" cy="{_num(y)}" r="6" fill="#dc2626"><title>{_e(note)}'
                       "</title></circle>")
        else:
            y = py(roof_at)
            note = f"workload: {rf.intensity:.4g} FLOP/B (achieved unknown; roof {roof_at:.4g} TFLOP/s)"
            out.append(f'<circle class="workload" cx="{_num(x)}" cy="{_num(y)}" r="6" fill="none" stroke="#dc2626" '
                       f'stroke-width="2"><title>{_e(note)}</title></circle>')
        anchor = "end" if x + 10 + 6 * len(note) > left + pw else "start"  # ~6 px per character at 11 px
        dx = -10 if anchor == "end" else 10
        out.append(f'<text x="{_num(x + dx)}" y="{_num(y + 16)}" font-size="11" fill="#b91c1c" '
                   f'text-anchor="{anchor}">{_e(note)}</text>')
    elif rf.achieved_tflops is not None:
        y = py(rf.achieved_tflops)
        out.append(f'<line class="workload" x1="{left}" y1="{_num(y)}" x2="{left + pw}" y2="{_num(y)}" '
                   'stroke="#dc2626" stroke-dasharray="2 3"/>'
                   f'<text x="{left + 6}" y="{_num(y - 5)}" font-size="11" fill="#b91c1c">achieved '
                   f"{rf.achieved_tflops:.4g} TFLOP/s (arithmetic intensity unknown)</text>")
    warning = rf.above_roof()
    if warning is not None:  # a point above its roof is drawn only with this label (issue 12: conflicting evidence)
        out.append(f'<rect class="warning" x="{left + 4}" y="{top + 4}" width="{pw - 8}" height="20" rx="3" '
                   'fill="#fdf4ff" stroke="#a21caf"/>'
                   f'<text class="warning" x="{left + 10}" y="{top + 18}" font-size="12" font-weight="bold" '
                   f'fill="#86198f">{_e(_short(warning, int((pw - 20) / 6.5)))}<title>{_e(warning)}</title></text>')
    out.append("</svg>")
    return "\n".join(out)


# ---- iron law ---------------------------------------------------------------------------------------------------


def iron_law_svg(report: Report, width: int = 640, element_id: str = "iron-law") -> str | None:
    """One bar per iron-law term (seconds and share of the step); None when no term is known."""
    law = report.iron_law
    if all(t.seconds is None for t in law.terms):
        return None
    row, left, top = 30, 230, 40
    height = top + row * len(law.terms) + 40 + (14 if law.efficiency_source else 0)
    bar_w = width - left - 150
    title = "Iron law: T = input + D/BW + O/(R·η) + L"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{_e(element_id)}" class="iron-law" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}" {_FONT}>',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="10" y="22" font-size="14" font-weight="bold">{_e(title)}</text>']
    for i, term in enumerate(law.terms):
        y = top + i * row
        out.append(f'<text x="10" y="{y + 15}" font-size="12">{_e(_short(term.label, 34))}</text>'
                   f'<rect x="{left}" y="{y + 3}" width="{bar_w}" height="16" fill="#f3f4f6"/>')
        if term.seconds is None:
            out.append(f'<text class="term" data-term="{term.term}" x="{left + 6}" y="{y + 15}" font-size="11" '
                       'fill="#6b7280">unknown</text>')
            continue
        share = term.share if term.share is not None else 0.0
        value = f"{term.seconds:.4g} s" + (f" ({term.share:.0%})" if term.share is not None else "")
        fill = "#d97706" if term.term == "unexplained" else "#7c3aed"
        out.append(f'<rect class="term" data-term="{term.term}" x="{left}" y="{y + 3}" '
                   f'width="{_num(bar_w * min(1.0, share))}" height="16" fill="{fill}"/>'
                   f'<text x="{left + bar_w + 8}" y="{y + 15}" font-size="12">{_e(value)}</text>')
    caption = shared.iron_law_notes(law, "sequential", efficiency=False)  # the efficiency gets a line of its own
    out.append(f'<text x="10" y="{height - 12 - (14 if law.efficiency_source else 0)}" font-size="11" '
               f'fill="#374151">{_e("; ".join(caption))}</text>')
    if law.efficiency_source:
        out.append(f'<text class="efficiency" x="10" y="{height - 12}" font-size="11" fill="#374151">'
                   f'{_e(_short(law.efficiency_source, 110))}</text>')
    out.append("</svg>")
    return "\n".join(out)
