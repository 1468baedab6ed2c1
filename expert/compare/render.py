"""A Comparison for people: a rich terminal view and Markdown for a pull-request comment. Renders only: every
decision is already in the Comparison."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..kb.knowledge import KnowledgeBase
from ..observations.normalise import format_value
from ..report.render.console import NARROW_COLUMNS, SafeConsole
from .model import BreakdownDelta, Comparison, FactChange, NamedDelta, Side

_TOP = 10


def _value(kb: KnowledgeBase | None, name: str, value: object) -> str:
    if value is None:
        return "—"
    return format_value(kb.facts.get(name) if kb is not None else None, value)


def _change(fc: FactChange) -> str:
    if fc.change is not None:
        return f"{fc.change:+.1%}"
    if fc.before is not None and fc.after is not None and fc.before != fc.after:
        return "changed" if fc.delta is None else f"{fc.delta:+.4g}"
    return ""


def _verdict(side: Side) -> str:
    if side.bottleneck is None:
        return "no verdict (insufficient evidence)"
    axes = ", ".join(f"{a.axis} {a.share:.0%}" for a in side.axes)
    return f"{side.bottleneck} ({side.verdict_title})" + (f"; axes {axes}" if axes else "")


def _seconds(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value * 1e3:.4g} ms" if value < 1 else f"{value:.4g} s"


def headline(c: Comparison) -> str:
    """One line: the step time before and after, and the speed-up."""
    step = c.fact("step_time_s")
    if c.speedup is None or step is None:
        return "step time: not known on both sides"
    word = "faster" if c.speedup > 1 else "slower" if c.speedup < 1 else "the same"
    factor = c.speedup if c.speedup >= 1 else 1 / c.speedup
    noise = "beyond its noise" if step.significant else "within its noise"
    text = (f"step time {_seconds(c.before.step_time_s)} → {_seconds(c.after.step_time_s)}: {factor:.2f}× {word} "
            f"({noise})")
    if c.before.mfu is not None and c.after.mfu is not None:
        text += f"; MFU {c.before.mfu:.1%} → {c.after.mfu:.1%}"
    return text


def _moved(c: Comparison) -> list[FactChange]:
    return [f for f in c.facts if f.significant]


def _split(c: Comparison) -> tuple[list[FactChange], list[FactChange]]:
    """(observed facts that moved, derived ones that moved)."""
    moved = _moved(c)
    return [f for f in moved if not f.derived], [f for f in moved if f.derived]


def _brief(fc: FactChange) -> str:
    return f"{fc.name} {_change(fc)}".strip()


def _bound(value: float | None) -> str:
    return "?" if value is None else f"≤ {value:.2f}×"


def _measured(value: float | None, realised: float | None) -> str:
    if value is None:
        return "?"
    if realised is not None and value >= 1:
        return f"{value:.2f}× ({realised:.0%} of it)"
    return f"{value:.2f}×"


# ---- terminal ---------------------------------------------------------------------------------------------------


def renderable(c: Comparison, kb: KnowledgeBase | None = None, width: int | None = None) -> RenderableType:
    """The whole comparison as one rich renderable; for a terminal `width` columns wide (None: wide), where below
    110 columns how each fact was judged goes under its name."""
    parts: list[RenderableType] = []
    body = Text()
    body.append("before ", style="bold")
    body.append(f"{c.before.source} ({c.before.kind}): {_verdict(c.before)}\n")
    body.append("after  ", style="bold")
    body.append(f"{c.after.source} ({c.after.kind}): {_verdict(c.after)}\n")
    style = "green" if (c.speedup or 1) > 1 else "red" if (c.speedup or 1) < 1 else ""
    body.append(headline(c), style=f"bold {style}".strip())
    if c.verdict_changed:
        body.append(f"\nverdict changed: {c.before.bottleneck or 'none'} → {c.after.bottleneck or 'none'}",
                    style="yellow")
    parts.append(Panel(body, title="dam compare: before → after", box=box.ROUNDED, border_style="cyan"))
    if c.gate.conditions:
        if c.gate.passed:
            gate: RenderableType = Text(f"passed ({len(c.gate.conditions)} condition(s))", style="bold green")
        else:
            gate = Text("\n".join(f"✗ {reason}" for reason in c.gate.failed), style="bold red")
        parts.append(Panel(gate, title="regression gate", box=box.ROUNDED,
                           border_style="green" if c.gate.passed else "red"))
    observed, derived = _split(c)
    if observed:
        narrow = width is not None and width < NARROW_COLUMNS
        table = Table(title="Facts that moved beyond their noise", box=box.SIMPLE_HEAD, title_justify="left")
        # fact names are what a reader looks up or gates on (--fail-if): never cut
        table.add_column("fact (how judged)" if narrow else "fact", no_wrap=not narrow, overflow="fold",
                         min_width=26 if narrow else None)
        for col in ("before", "after"):  # a value that is text (operator names) wraps
            table.add_column(col, justify="right", overflow="fold", max_width=15)
        table.add_column("change", justify="right", no_wrap=True)
        if not narrow:
            table.add_column("how judged", overflow="fold", min_width=24)
        for f in observed:
            name = Text(f.name)
            if narrow:
                name.append(f"\n  {f.basis}", style="dim")
            # values can be text from the inputs (operator names, a saved report's values): text, never markup
            row: list[RenderableType] = [name, Text(_value(kb, f.name, f.before)), Text(_value(kb, f.name, f.after)),
                                         _change(f)]
            table.add_row(*row, *([] if narrow else [Text(f.basis, style="dim")]))
        if derived:
            table.caption = "derived: " + ", ".join(_brief(f) for f in derived)
        parts.append(table)
    elif derived:
        parts.append(Text("derived quantities that moved: " + ", ".join(_brief(f) for f in derived)))
    if c.findings_new or c.findings_cleared:
        table = Table(title="Findings", box=box.SIMPLE_HEAD, title_justify="left")
        table.add_column("")
        table.add_column("finding")
        table.add_column("severity")
        for word, style, refs in (("new", "red", c.findings_new), ("cleared", "green", c.findings_cleared)):
            for ref in refs:
                finding = Text(ref.title)  # a custom rule's or a saved report's text: never rich markup
                finding.append(f" ({ref.id})", style="dim")
                table.add_row(Text(word, style=style), finding, Text(ref.severity))
        parts.append(table)
    if c.predictions:
        table = Table(title="Did the change do what the before report predicted?", box=box.SIMPLE_HEAD,
                      title_justify="left")
        table.add_column("recommendation: what moved", ratio=4)
        table.add_column("predicted", justify="right", no_wrap=True)
        table.add_column("measured", justify="right", no_wrap=True)
        for p in c.predictions:
            cell = Text(f"{p.id} ({p.match})", style="bold green" if p.match == "matches" else "bold")
            cell.append("\n" + "; ".join(p.evidence), style="dim")
            table.add_row(cell, _bound(p.predicted_max_speedup), _measured(p.measured_speedup, p.realised))
        parts.append(table)
    parts.extend(_breakdown_tables(c.breakdown_delta))
    quiet = len(c.facts) - len(observed) - len(derived)
    notes = [*c.notes, *c.breakdown_delta.notes]
    if quiet:
        notes.append(f"{quiet} other facts did not move beyond their noise or are known on one side only "
                     "(--format json lists every fact)")
    if notes:
        parts.append(Text("\n".join(f"note: {n}" for n in notes), style="dim"))
    return Group(*parts)


def _breakdown_tables(delta: BreakdownDelta) -> list[RenderableType]:
    if not (delta.classes or delta.top_kernels or delta.top_ops):
        return []
    unit = "GPU s/step" if delta.basis == "per step" else "GPU s (window)"
    out: list[RenderableType] = []
    if delta.classes:
        table = Table(title=f"Where GPU time went ({delta.basis})", box=box.SIMPLE_HEAD, title_justify="left")
        for col in ("kernel class", f"before {unit}", f"after {unit}", "Δ", "share before → after"):
            table.add_column(col, justify="left" if col == "kernel class" else "right")
        for row in delta.classes:
            table.add_row(Text(row.class_), _num(row.before_s), _num(row.after_s), _signed(row.delta_s),
                          f"{_pct(row.before_share)} → {_pct(row.after_share)}")
        out.append(table)
    for title, rows in (("Top kernels", delta.top_kernels), ("Top operators", delta.top_ops)):
        if not rows:
            continue
        table = Table(title=f"{title}: largest changes ({delta.basis})", box=box.SIMPLE_HEAD, title_justify="left")
        for col in ("name", "before", "after", "Δ"):
            table.add_column(col, justify="left" if col == "name" else "right", overflow="fold")
        for r in rows[:_TOP]:
            table.add_row(Text(_short(r.name)), _num(r.before_s), _num(r.after_s), _signed(r.delta_s))
        out.append(table)
    return out


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.4g}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def print_comparison(c: Comparison, console: Console | None = None, kb: KnowledgeBase | None = None) -> None:
    console = console or SafeConsole()
    console.print(renderable(c, kb, console.width))



# ---- markdown ---------------------------------------------------------------------------------------------------


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def markdown(c: Comparison, kb: KnowledgeBase | None = None, title: str = "dam compare: before → after") -> str:
    """The comparison as Markdown, sized for a pull-request comment (every fact in a collapsed section)."""
    lines = [f"### {title}", ""]
    if c.gate.conditions:
        if c.gate.passed:
            lines += [f"**Gate: passed** ({', '.join(f'`{x}`' for x in c.gate.conditions)})", ""]
        else:
            lines += ["**Gate: failed**", ""] + [f"- ❌ `{_cell(r)}`" for r in c.gate.failed] + [""]
    lines += [f"**{headline(c)}**", "",
              "| | source | verdict |", "|---|---|---|",
              f"| before | {_cell(c.before.source)} ({c.before.kind}) | {_cell(_verdict(c.before))} |",
              f"| after | {_cell(c.after.source)} ({c.after.kind}) | {_cell(_verdict(c.after))} |", ""]
    observed, derived = _split(c)
    if observed:
        lines += ["#### Facts that moved beyond their noise", "", "| fact | before | after | change |",
                  "|---|---:|---:|---:|"]
        lines += [f"| `{f.name}` | {_cell(_value(kb, f.name, f.before))} | {_cell(_value(kb, f.name, f.after))} | "
                  f"{_cell(_change(f))} |" for f in observed]
        lines.append("")
    if derived:
        lines += ["Derived: " + ", ".join(f"`{f.name}` {_cell(_change(f))}" for f in derived), ""]
    if c.findings_new or c.findings_cleared:
        lines += ["#### Findings", ""]
        lines += [f"- new: **{_cell(f.title)}** (`{f.id}`, {f.severity})" for f in c.findings_new]
        lines += [f"- cleared: ~~{_cell(f.title)}~~ (`{f.id}`)" for f in c.findings_cleared]
        lines.append("")
    if c.predictions:
        lines += ["#### Did the change do what the before report predicted?", "",
                  "| recommendation | looks like it | predicted | measured | evidence |", "|---|---|---:|---:|---|"]
        lines += [f"| `{p.id}` | {'**matches**' if p.match == 'matches' else p.match} | "
                  f"{_bound(p.predicted_max_speedup)} | {_measured(p.measured_speedup, p.realised)} | "
                  f"{_cell('; '.join(p.evidence))} |" for p in c.predictions]
        lines.append("")
    lines += _breakdown_markdown(c.breakdown_delta)
    notes = [*c.notes, *c.breakdown_delta.notes]
    if notes:
        lines += [f"> {_cell(n)}" for n in notes] + [""]
    lines += ["<details><summary>Every fact, and how its noise was judged</summary>", "",
              "| fact | before | after | change | beyond noise | how judged |", "|---|---:|---:|---:|:-:|---|"]
    lines += [f"| `{f.name}` | {_cell(_value(kb, f.name, f.before))} | {_cell(_value(kb, f.name, f.after))} | "
              f"{_cell(_change(f))} | {'yes' if f.significant else ''} | {_cell(f.basis)} |" for f in c.facts]
    lines += ["", "</details>", "", "_Compared by dam-expert (`dam compare A B --format json` for tools)._", ""]
    return "\n".join(lines)


def _breakdown_markdown(delta: BreakdownDelta) -> list[str]:
    if not (delta.classes or delta.top_kernels or delta.top_ops):
        return []
    unit = "GPU s per step" if delta.basis == "per step" else "GPU s over the window"
    lines = [f"#### Where GPU time went ({unit})", ""]
    if delta.classes:
        lines += ["| kernel class | before | after | Δ | share before → after |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {r.class_} | {_num(r.before_s)} | {_num(r.after_s)} | {_signed(r.delta_s)} | "
                  f"{_pct(r.before_share)} → {_pct(r.after_share)} |" for r in delta.classes]
        lines.append("")
    for title, rows in (("Top kernels", delta.top_kernels), ("Top operators", delta.top_ops)):
        if rows:
            lines += _named_markdown(title, rows)
    return lines


def _named_markdown(title: str, rows: Sequence[NamedDelta]) -> list[str]:
    lines = [f"{title} (largest changes):", "", "| name | before | after | Δ |", "|---|---:|---:|---:|"]
    lines += [f"| `{_cell(_short(r.name))}` | {_num(r.before_s)} | {_num(r.after_s)} | {_signed(r.delta_s)} |"
              for r in rows[:_TOP]]
    return [*lines, ""]
