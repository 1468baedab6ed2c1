"""Roofline and iron-law charts drawn with matplotlib (the optional `plot` extra): PNG, PDF or SVG files.

The built-in SVG writer (expert/export/svg.py) needs no plotting library; matplotlib is used for raster output.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Literal

from ...errors import ObservationError, OutputError, Problem
from ..model import Report
from . import _parts as shared
from .svg import roofline

Chart = Literal["roofline", "iron-law"]
SAVE_DPI = 150


def _figure() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ObservationError([Problem("--output", "PNG/PDF output needs matplotlib, which is not installed",
                                        "pip install 'dam-expert[plot]', or write an .svg (no dependency)")],
                               title="cannot draw the chart") from exc
    return Figure(figsize=(8, 5), layout="constrained")


def no_chart(chart: Chart) -> ObservationError:
    """The error for a chart the report has no numbers for."""
    if chart == "roofline":
        return ObservationError([Problem("roofline", "the peak FLOP/s or the memory bandwidth is unknown",
                                         "give hardware and dtype (e.g. --set hardware=h100-sxm --set dtype=bf16)")],
                                title="cannot draw the chart")
    return ObservationError([Problem("iron-law", "no term of the iron law is known",
                                     "give step_time_s with data_wait_s, flops, mfu or bytes_moved")],
                            title="cannot draw the chart")


def draw(report: Report, chart: Chart, path: Path) -> Path:
    """Draw a chart with matplotlib into `path` (format from its suffix)."""
    fig = _figure()
    ax = fig.subplots()
    if chart == "roofline":
        _roofline(report, ax)
    else:
        _iron_law(report, ax)
    try:
        fig.savefig(path, dpi=SAVE_DPI)
    except (OSError, ValueError) as exc:
        raise OutputError([Problem(str(path), f"cannot write: {getattr(exc, 'strerror', None) or exc}")],
                          title="cannot draw the chart") from exc
    return path


def _roofline(report: Report, ax: Any) -> None:
    rf = roofline(report)
    if rf is None:
        raise no_chart("roofline")
    xs = [rf.ridge] + ([rf.intensity] if rf.intensity else [])
    lo, hi = min(xs) / 30, max(xs) * 30
    ax.loglog([lo, rf.ridge, hi], [rf.attainable(lo), rf.peak_tflops, rf.peak_tflops], color="#1f2937", lw=2.5,
              label=f"roof: min({rf.peak_tflops:.4g} TFLOP/s, {rf.bandwidth_gbs:.4g} GB/s × I)")
    ax.axvline(rf.ridge, color="#d97706", ls="--", label=f"ridge {rf.ridge:.4g} FLOP/B")
    if rf.intensity is not None:
        roof_at = rf.attainable(rf.intensity)
        if rf.achieved_tflops is not None:
            ax.plot([rf.intensity], [rf.achieved_tflops], "o", color="#dc2626", ms=9,
                    label=f"workload: {rf.intensity:.4g} FLOP/B, {rf.achieved_tflops:.4g} TFLOP/s "
                          f"({rf.achieved_tflops / roof_at:.0%} of roof)")
        else:
            ax.plot([rf.intensity], [roof_at], "o", mfc="none", color="#dc2626", ms=9,
                    label=f"workload: {rf.intensity:.4g} FLOP/B (achieved unknown)")
    elif rf.achieved_tflops is not None:
        ax.axhline(rf.achieved_tflops, color="#dc2626", ls=":",
                   label=f"achieved {rf.achieved_tflops:.4g} TFLOP/s (intensity unknown)")
    warning = rf.above_roof()
    if warning is not None and rf.achieved_tflops is not None:  # a point above its roof: only with this label
        ax.set_ylim(top=rf.achieved_tflops * 10)  # room for the label above the point
        ax.text(0.02, 0.97, warning, transform=ax.transAxes, va="top", fontsize=9, fontweight="bold",
                color="#86198f", wrap=True, bbox={"boxstyle": "round", "facecolor": "#fdf4ff", "edgecolor": "#a21caf"})
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("performance (TFLOP/s)")
    ax.set_title(f"Roofline: {rf.hardware}" + (f" {rf.dtype}" if rf.dtype else ""))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)


_LABEL_CHARS = 24  # a term's label wraps at this many characters (the bars keep most of the width)
_FOOTNOTE_SIZE = 7


def _iron_law(report: Report, ax: Any) -> None:
    """The iron-law bars: each term's label wrapped beside its bar, the values in a column right of the axes (clear
    of the bars and of the measured-step line), the legend below the axes, and the notes as a footnote wrapped to
    the figure's width; the figure's height follows the number of label lines."""
    law = report.iron_law
    if all(t.seconds is None for t in law.terms):
        raise no_chart("iron-law")
    terms = law.terms[::-1]  # drawn bottom to top: the first term on top
    labels = [textwrap.fill(t.label, _LABEL_CHARS) for t in terms]
    fig = ax.figure
    lines = sum(label.count("\n") + 1 for label in labels)
    fig.set_size_inches(fig.get_figwidth(), max(3.6, 2.2 + 0.2 * lines + 0.25 * len(terms)))
    colours = ["#d97706" if t.term == "unexplained" else "#7c3aed" for t in terms]
    rows = list(range(len(terms)))
    ax.barh(rows, [t.seconds or 0.0 for t in terms], color=colours)
    ax.set_yticks(rows)
    ax.set_yticklabels(labels)
    values = ax.get_yaxis_transform()  # x in axes coordinates, y in data: a column right of the axes
    for row, term in zip(rows, terms, strict=True):
        text = "unknown" if term.seconds is None else f"{term.seconds:.4g} s" + (
            f" ({term.share:.0%})" if term.share is not None else "")
        ax.annotate(text, (1.0, row), xycoords=values, xytext=(6, 0), textcoords="offset points", va="center",
                    fontsize=9, color="#6b7280" if term.seconds is None else "#111827", annotation_clip=False)
    if law.step_time_s is not None:
        ax.axvline(law.step_time_s, color="#dc2626", ls="--", label=f"measured step {law.step_time_s:.4g} s")
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.12), fontsize=8, frameon=False, borderaxespad=0.0)
    ax.set_xlim(left=0.0)
    ax.set_xlabel("seconds per step")
    ax.set_title("Iron law: T = input + D/BW + O/(R·η) + L")
    notes = shared.iron_law_notes(law, "sequential")
    if notes:
        fig.supxlabel(_wrap_to_figure(fig, "; ".join(notes), _FOOTNOTE_SIZE), x=0.01, ha="left",
                      fontsize=_FOOTNOTE_SIZE, color="#374151")


def _wrap_to_figure(fig: Any, text: str, fontsize: float) -> str:
    """`text` wrapped so that every line fits the figure's width (less a margin), measured at the figure's dpi and
    at the dpi it is saved at (hinting makes text wider at some resolutions than at others)."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.text import Text

    room = fig.get_figwidth() * 0.96  # inches: the footnote starts 1 % in from the left edge
    probe = Text(0, 0, "", fontsize=fontsize, figure=fig)
    renderers = []
    for dpi in sorted({float(fig.dpi), float(SAVE_DPI)}):
        size = (int(fig.get_figwidth() * dpi), int(fig.get_figheight() * dpi))
        renderers.append((RendererAgg(*size, dpi), dpi))  # type: ignore[no-untyped-call]

    def fits(line: str) -> bool:
        probe.set_text(line)
        return all(probe.get_window_extent(renderer, dpi=dpi).width / dpi <= room for renderer, dpi in renderers)

    def wraps_within(width: int) -> bool:
        return all(fits(line) for line in textwrap.fill(text, width).splitlines())

    lo, hi = 20, max(len(text), 20)  # the widest wrap that fits: a binary search (narrower wraps fit too)
    if wraps_within(hi):
        return textwrap.fill(text, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if wraps_within(mid) else (lo, mid)
    return textwrap.fill(text, lo)
