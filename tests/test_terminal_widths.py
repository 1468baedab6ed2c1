"""The terminal views at 60, 80 and 120 columns (and wider): numbers, ids and fact names are never cut, prose wraps,
titles wrap rather than being cut, and a long kernel name is cut keeping what tells it from the others; `dam hardware`
says where the names went and what `show` needs; the iron-law PNG gives its bars the room and keeps its legend and
footnote clear of them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import expert
from expert.breakdown import ClassShare, RoofSpec, TimeBreakdown, TimeEntry, TraceWindow
from expert.report.render.fit import cut_name, differ_at
from expert.report.render.terminal import print_report, time_breakdown_view

ROOT = Path(__file__).resolve().parent.parent
WIDTHS = (60, 80, 120)
STARVED = expert.diagnose(
    {"data_wait_s": 0.12, "step_time_s": 0.3, "gpu_util": 0.45, "num_workers": 0, "host_cpu_util": 0.3,
     "mfu": 0.01044, "hardware": "h100-sxm", "dtype": "bf16", "workload": "training"})


def shown(renderable: object, width: int) -> str:
    console = Console(width=width, record=True, force_terminal=False)
    if hasattr(renderable, "iron_law"):
        print_report(renderable, console)  # type: ignore[arg-type]
    else:
        console.print(renderable)
    return console.export_text()


def words(text: str) -> set[str]:
    return set(text.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_cuts_no_value_id_or_fact_name(width: int) -> None:
    text = shown(STARVED, width)
    assert "…" not in text  # nothing ellipsised: the figures, rule ids, fact names and advice are whole
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    tokens = words(text)
    for term in STARVED.iron_law.terms:
        if term.seconds is not None:
            assert f"{term.seconds:.4g}" in tokens  # the seconds column: "0.12", not "0.…"
    assert {f.rule_id for f in STARVED.findings} <= tokens  # each rule id whole on a line of its own
    assert {m.fact for m in STARVED.next_measurements if m.fact} <= tokens
    assert {m.fact for m in STARVED.missing[:8]} <= tokens


def test_the_report_at_120_columns_keeps_its_wide_layout() -> None:
    lines = shown(STARVED, 120).splitlines()
    header = next(line for line in lines if line.split() == ["term", "seconds", "share", "of", "step"])
    assert "share of step" in header  # the header on one line
    bar = next(line for line in lines if line.lstrip().startswith("input wait"))
    assert len(re.findall("[█░]", bar)) == 30  # the full-width bar where there is room
    assert any(line.split()[:4] == ["fact", "tool", "how", "why"] for line in lines if line.strip())


def _breakdown() -> TimeBreakdown:
    elementwise = ("void at::native::vectorized_elementwise_kernel<4, at::native::{}<float>, "
                   "at::detail::Array<char*, 3> >(int, at::native::{}<float>, at::detail::Array<char*, 3>)")
    kernels = [elementwise.format(f, f) for f in ("AddFunctor", "MulFunctor", "threshold_kernel_impl")]
    kernels += ["void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int)",
                "void implicit_convolve_sgemm<float, float, 128, 6, 7, 3, 3, 5, 1, false, true, true>(int, int)"]
    top = [TimeEntry(name=name, gpu_time_s=0.01, share=0.1 - i / 100, count=10, class_="elementwise",
                     arithmetic_intensity=0.0833, pct_of_roof=0.87)
           for i, name in enumerate(kernels)]
    ops = [TimeEntry(name=name, gpu_time_s=0.01, share=0.2, count=3, class_="conv", arithmetic_intensity=91.4,
                     pct_of_roof=0.72) for name in ("aten::cudnn_convolution", "aten::cudnn_convolution_backward")]
    classes = [ClassShare(class_=name, gpu_time_s=0.1, share=share, arithmetic_intensity=ai, pct_of_roof=roof)
               for name, share, ai, roof in (("conv", 0.58, 76.3, 0.66), ("host_transfer", 0.019, None, None),
                                             ("elementwise", 0.15, 0.184, 0.87))]
    return TimeBreakdown(source="kineto", window=TraceWindow(start_us=0, end_us=1e6, reason="ProfilerStep#5–#10"),
                         gpu_time_s=0.6036, kernels=8772, classes=classes, top_kernels=top, top_ops=ops,
                         roof=RoofSpec(hardware="v100-sxm2", dtype="fp32", peak_tflops=15.7, peak_bandwidth_gbs=900,
                                       ridge_flop_per_byte=17.4))


def _names_shown(text: str, names: list[str]) -> list[str]:
    """The name cell of each row, in row order (rows start with their name's first characters at every width)."""
    rows = [line.strip().split("  ")[0] for line in text.splitlines() if line.strip()[:8] in {n[:8] for n in names}]
    cells = [row for row in rows if any(all(part in name for part in row.split("…") if part) for name in names)]
    assert len(cells) == len(names), cells
    return cells


@pytest.mark.parametrize("width", (*WIDTHS, 200))
def test_the_time_breakdown_keeps_its_figures_and_tells_its_kernels_apart(width: int) -> None:
    tb = _breakdown()
    text = shown(time_breakdown_view(tb), width)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    flat = " ".join(text.split())
    assert "Where the GPU time goes (0.6036 s of GPU activity, 8772 kernels)" in flat  # the title wraps, whole
    tokens = words(text.replace(",", " "))
    assert {"host_transfer", "elementwise", "0.0833", "87%", "91.4", "72%", "76.3", "66%"} <= tokens
    section = text.split("Top kernels")[1].split("Top operators")[0]
    kernels = _names_shown(section, [e.name for e in tb.top_kernels])
    assert len(set(kernels)) == len(kernels)  # every kernel row is told from the others
    ops = _names_shown(text.split("Top operators")[1], [e.name for e in tb.top_ops])
    assert len(set(ops)) == 2
    if width >= 120:
        assert all(len(name) > 34 for name in kernels)  # the name takes the width the figures leave
    if width == 200:
        assert tb.top_kernels[3].name in text  # a name that fits is shown whole


def test_cut_name_keeps_the_start_and_the_part_that_differs() -> None:
    names = ["void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int)",
             "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>(int)",
             "aten::cudnn_convolution", "aten::cudnn_convolution_backward", "short"]
    differ = differ_at(names)
    for width in (12, 20, 34, 60):
        cut = [cut_name(name, width, d) for name, d in zip(names, differ, strict=True)]
        assert all(len(c) <= width for c in cut) and len(set(cut)) == len(cut)
        assert all(c.startswith(name[:max(1, (width - 2) // 3)]) for c, name in zip(cut, names, strict=True))
    assert cut_name(names[0], 40, differ[0]) == "void at::native::ve…AddFunctor<float>>(…"
    assert cut_name("short", 5, 0) == "short"


def dam(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "XDG_STATE_HOME": str(ROOT)}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_hardware_list_keeps_every_figure_whole_and_says_where_the_names_are() -> None:
    from expert.commands.hardware import _opt, _peak

    kb = expert.default_expert().kb
    for columns in (*WIDTHS, None):  # None: piped, no COLUMNS (80)
        result = dam("hardware", "list", columns=columns)
        assert result.returncode == 0, result.stderr
        text = result.stdout
        assert "…" not in text and max(len(line.rstrip()) for line in text.splitlines()) <= (columns or 80)
        lines = text.splitlines()
        for hw in kb.hardware.values():
            if hw.mig_of is not None:  # `dam hardware list --mig` (below)
                continue
            row = next(i for i, line in enumerate(lines) if line.split()[:1] == [hw.id] or f"│ {hw.id} " in line)
            cells = words(" ".join(lines[row:row + 3]).replace("│", " "))  # a wrapped memory type is on the next line
            for value in (_peak(hw, "fp8"), _peak(hw, "fp32"), _opt(hw.memory_bandwidth_gbs)):
                assert value in cells, (columns, hw.id, value)
            if hw.memory_type:
                assert {f"{hw.memory_gb:g}", hw.memory_type} <= cells, (columns, hw.id)
        flat = " ".join(text.split())
        if columns is not None and columns >= 100:
            assert "NVIDIA H100 SXM5 80GB" in flat  # the names are shown
        else:
            assert "names from 100 columns on (dam hardware show ID gives them)" in flat  # and where they went


def test_the_mig_list_keeps_every_figure_whole() -> None:
    from expert.commands.hardware import _opt, _peak

    kb = expert.default_expert().kb
    for columns in (*WIDTHS, None):
        result = dam("hardware", "list", "--mig", columns=columns)
        assert result.returncode == 0, result.stderr
        text = result.stdout
        assert "…" not in text and max(len(line.rstrip()) for line in text.splitlines()) <= (columns or 80)
        rows = [line.replace("│", " ").split() for line in text.splitlines()]
        for hw in kb.hardware.values():
            if hw.mig_of is None:
                continue
            profile = hw.name.rsplit(" MIG ", 1)[1]
            cells = next(row for row in rows if row[:2] == [hw.mig_of, profile])
            for value in (_peak(hw, "bf16"), _peak(hw, "fp8"), _opt(hw.memory_bandwidth_gbs)):
                assert value in cells, (columns, hw.id, value)


@pytest.mark.parametrize("given", [[], [""], ["  "]])
def test_hardware_show_without_an_id_is_a_usage_error(given: list[str]) -> None:
    result = dam("hardware", "show", *given)
    assert result.returncode == 2 and not result.stdout
    assert "missing argument" in result.stderr and "dam hardware list" in result.stderr
    assert "invalid observations" not in result.stderr and "None" not in result.stderr


def test_the_iron_law_png_gives_its_bars_the_room_and_keeps_legend_and_footnote_clear() -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from expert.report.render import charts

    fig = charts._figure()
    ax = fig.subplots()
    charts._iron_law(STARVED, ax)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    figure_box = fig.bbox
    axes_box = ax.get_window_extent(renderer)
    assert axes_box.width >= 0.5 * figure_box.width  # the labels wrap: the bars get most of the width
    for label in ax.get_yticklabels():
        assert all(len(line) <= 26 for line in label.get_text().splitlines())
        assert label.get_window_extent(renderer).x0 >= figure_box.x0
    bars = [p.get_window_extent(renderer) for p in ax.patches if p.get_width() > 0]
    legend = ax.get_legend()
    assert legend is not None
    legend_box = legend.get_window_extent(renderer)
    assert not any(legend_box.overlaps(bar) for bar in bars) and legend_box.y1 <= axes_box.y0  # below the axes
    step = ax.get_lines()[0].get_window_extent(renderer)
    values = [t for t in ax.texts if re.match(r"[\d.]+ s|unknown", t.get_text())]
    assert len(values) == len(STARVED.iron_law.terms)
    for value in values:
        box = value.get_window_extent(renderer)
        assert box.x0 > step.x1 and box.x1 <= figure_box.x1  # clear of the measured-step line, inside the figure
    notes = [t for t in fig.findobj(Text) if "η = mfu / gpu_util" in t.get_text()]
    assert len(notes) == 1
    note = notes[0].get_window_extent(renderer)
    assert note.x0 >= figure_box.x0 and note.x1 <= figure_box.x1  # every footnote line fits the figure
    assert "gpu_util 0.45)" in notes[0].get_text()  # whole, not cut at 140 characters
    assert not any(note.overlaps(bar) for bar in bars) and not note.overlaps(legend_box)


@pytest.mark.parametrize("width", WIDTHS)
def test_dam_ingest_cuts_nothing_at_the_right_edge(width: int) -> None:
    """At 60 columns the facts table once ran past the edge: "← from" cut mid-word on every row, and the title cut."""
    from expert.ingest import ingest_result
    from expert.report.render.ingest import print_ingest

    trace = ROOT / "tests" / "fixtures" / "telemetry" / "kineto_two_steps.json"
    result = ingest_result(str(trace))
    console = Console(width=width, record=True, force_terminal=False)
    print_ingest(result, console)
    text = console.export_text()
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    flat = " ".join(text.split())
    assert "Observations · from kineto:kineto_two_steps.json · window ProfilerStep#1–#2 (2 steps)" in flat
    facts_part = text.split("Where the time goes")[0]  # the kernel lists below cut long names on purpose
    assert "…" not in facts_part
    shown_words = words(facts_part)
    for name, obs in result.observations.facts.items():
        assert name in shown_words
        how = str(obs.detail.get("method") or "")
        # where each fact came from reads as words, none cut at the edge (a hyphenated word may break after its "-")
        cut = [w for w in how.split() if w not in shown_words and not all(
            part in shown_words or f"{part}-" in shown_words for part in w.split("-") if part)]
        assert not cut, (width, name, cut)


def test_a_rich_without_the_private_helpers_falls_back_to_its_own_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """FitTable reads rich's private column measurements (rich 13 and 14); where a later rich has renamed them
    (an AttributeError or TypeError while fitting), the table renders as rich lays it out, never crashes."""
    from expert.report.render import fit

    def renamed(*args: object) -> list[int]:
        raise AttributeError("'FitTable' object has no attribute '_measure_column'")

    monkeypatch.setattr(fit, "_floors", renamed)
    text = shown(STARVED, 60)
    assert "Input-bound" in text and max(len(line.rstrip()) for line in text.splitlines()) <= 60
