"""Roofline and iron-law charts drawn with matplotlib (the optional `plot` extra): PNG, PDF or SVG files.

The built-in SVG writer (expert/export/svg.py) needs no plotting library; matplotlib is used for raster output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from ...errors import ObservationError, OutputError, Problem
from ..model import Report
from .svg import roofline

Chart = Literal["roofline", "iron-law"]


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
        fig.savefig(path, dpi=150)
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


def _iron_law(report: Report, ax: Any) -> None:
    law = report.iron_law
    if all(t.seconds is None for t in law.terms):
        raise no_chart("iron-law")
    labels = [t.label for t in law.terms][::-1]
    seconds = [t.seconds or 0.0 for t in law.terms][::-1]
    colours = ["#d97706" if t.term == "unexplained" else "#7c3aed" for t in law.terms][::-1]
    bars = ax.barh(labels, seconds, color=colours)
    for bar, term in zip(bars, law.terms[::-1], strict=True):
        text = "unknown" if term.seconds is None else f"{term.seconds:.4g} s" + (
            f" ({term.share:.0%})" if term.share is not None else "")
        ax.annotate(text, (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=9)
    if law.step_time_s is not None:
        ax.axvline(law.step_time_s, color="#dc2626", ls="--", label=f"measured step {law.step_time_s:.4g} s")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("seconds per step")
    ax.set_title("Iron law: T = input + D/BW + O/(R·η) + L")
    if law.efficiency_source:
        ax.text(0.0, -0.18, law.efficiency_source[:140], transform=ax.transAxes, fontsize=7, va="top")
