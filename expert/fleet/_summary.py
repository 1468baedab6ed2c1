"""The fleet summary: verdict distribution, the most common wasted spends, the jobs with the largest Amdahl-bounded
gain, and the errors; as Markdown and as a self-contained HTML page."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

INSUFFICIENT = "insufficient evidence"
_TOP = 10
_MAX_LABEL_VALUES = 12


@dataclass
class FleetSummary:
    """What a fleet's rows say together."""

    jobs: int
    diagnosed: int
    errors: int
    error_kinds: dict[str, int]
    verdicts: list[tuple[str, int, dict[str, int]]]  # (bottleneck or INSUFFICIENT, jobs, by strength)
    axes: list[tuple[str, int]]
    wasted: list[tuple[str, str, int]]  # (optimization id, title, jobs)
    recommended: list[tuple[str, str, int]]  # top recommendation id, title, jobs
    gains: list[dict[str, Any]]  # the jobs with the largest Amdahl bound
    failures: list[tuple[str, str, str]]  # (job key, kind, first line of the message)
    by_label: dict[str, list[tuple[str, Counter[str]]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def summarize(rows: Sequence[Mapping[str, Any]], titles: Mapping[str, str] | None = None,
              notes: Sequence[str] = ()) -> FleetSummary:
    """Summarize rows (with or without report_json); `titles` names optimizations (id -> title)."""
    titles = titles or {}
    ok = [r for r in rows if not r.get("error")]
    failed = [r for r in rows if r.get("error")]
    verdicts: dict[str, Counter[str]] = {}
    for r in ok:
        verdicts.setdefault(r.get("bottleneck") or INSUFFICIENT, Counter())[r.get("strength") or "-"] += 1
    ranked = sorted(verdicts.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    axes = Counter(a for r in ok for a in (r.get("axes") or [])[:1])
    wasted = Counter(w for r in ok for w in set(r.get("wasted") or []))
    top = Counter(r["top_recommendation"] for r in ok if r.get("top_recommendation"))
    # a bound is ranked only where the job has a verdict: a withheld one (thin or conflicting evidence) bounds nothing
    gains = sorted((r for r in ok if r.get("max_speedup") and r.get("bottleneck")),
                   key=lambda r: (-float(r["max_speedup"]), r["job_key"]))
    by_label: dict[str, list[tuple[str, Counter[str]]]] = {}
    label_keys = sorted({k for r in ok for k in dict(_labels(r))})
    for key in label_keys:
        groups: dict[str, Counter[str]] = {}
        for r in ok:
            value = dict(_labels(r)).get(key)
            if value is not None:
                groups.setdefault(value, Counter())[r.get("bottleneck") or INSUFFICIENT] += 1
        if 1 < len(groups) <= _MAX_LABEL_VALUES:
            by_label[key] = sorted(groups.items())
    return FleetSummary(
        jobs=len(rows), diagnosed=len(ok), errors=len(failed),
        error_kinds=dict(Counter(r.get("error_kind") or "error" for r in failed).most_common()),
        verdicts=[(name, sum(c.values()), dict(c)) for name, c in ranked],
        axes=axes.most_common(),
        wasted=[(w, titles.get(w, w), n) for w, n in sorted(wasted.items(), key=lambda kv: (-kv[1], kv[0]))[:_TOP]],
        recommended=[(t, titles.get(t, t), n) for t, n in sorted(top.items(), key=lambda kv: (-kv[1], kv[0]))[:_TOP]],
        gains=[{"job_key": r["job_key"], "bottleneck": r.get("bottleneck") or INSUFFICIENT,
                "top_recommendation": titles.get(r["top_recommendation"], r["top_recommendation"]),
                "max_speedup": float(r["max_speedup"])} for r in gains[:_TOP]],
        failures=[(r["job_key"], r.get("error_kind") or "error", _one_line(str(r["error"])))
                  for r in sorted(failed, key=lambda r: r["job_key"])[:50]],
        by_label=by_label, notes=list(notes))


def _one_line(message: str, limit: int = 300) -> str:
    """An error message on one line: `title:` and its `- problem` lines joined."""
    text = " ".join(line.strip().removeprefix("- ") for line in message.strip().splitlines() if line.strip())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _labels(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    labels = row.get("labels") or []
    return list(labels.items()) if isinstance(labels, Mapping) else [tuple(x) for x in labels]


def _pct(n: int, total: int) -> str:
    return f"{100 * n / total:.0f}%" if total else "-"


def _md_table(head: Sequence[str], body: Sequence[Sequence[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in body]
    return [*lines, ""]


def _sections(s: FleetSummary) -> list[tuple[str, list[str], list[list[Any]], str]]:
    """(title, header, rows, text when empty) for each table, shared by both renderers."""
    strengths = ["confirmed", "likely", "suspect"]
    return [
        ("Verdicts", ["verdict", "jobs", "share", *strengths],
         [[name, n, _pct(n, s.diagnosed), *[by.get(k, 0) for k in strengths]] for name, n, by in s.verdicts],
         "no job was diagnosed"),
        ("Leading axis", ["axis", "jobs", "share"], [[a, n, _pct(n, s.diagnosed)] for a, n in s.axes],
         "no job implicates an axis"),
        ("Most common wasted spends", ["optimization", "id", "jobs", "share"],
         [[title, w, n, _pct(n, s.diagnosed)] for w, title, n in s.wasted], "no job has a wasted spend"),
        ("Most common best recommendation (largest Amdahl bound)", ["optimization", "id", "jobs"],
         [[title, t, n] for t, title, n in s.recommended], "no job has a recommendation with a bound"),
        ("Jobs with the largest Amdahl-bounded gain", ["job", "verdict", "best recommendation", "max speedup"],
         [[g["job_key"], g["bottleneck"], g["top_recommendation"], f"{g['max_speedup']:.2f}x"] for g in s.gains],
         "no job with a verdict has a bounded gain"),
        ("Errors", ["job", "kind", "message"], [list(f) for f in s.failures], "no errors"),
    ]


def _headline(s: FleetSummary) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in s.error_kinds.items())
    return (f"{s.jobs} jobs: {s.diagnosed} diagnosed, {s.errors} errors" + (f" ({kinds})" if kinds else ""))


def to_markdown(s: FleetSummary, title: str = "Fleet diagnosis") -> str:
    lines = [f"# {title}", "", _headline(s) + ".", ""]
    lines += [f"- {n}" for n in s.notes] + ([""] if s.notes else [])
    for name, head, body, empty in _sections(s):
        lines += [f"## {name}", ""]
        lines += _md_table(head, body) if body else [f"_{empty}_", ""]
    for key, groups in s.by_label.items():
        verdicts = sorted({v for _, c in groups for v in c})
        lines += [f"## Verdicts by label `{key}`", ""]
        lines += _md_table([key, *verdicts], [[value, *[c.get(v, 0) for v in verdicts]] for value, c in groups])
    lines.append("Query the rows: `dam fleet query OUT \"select bottleneck, count(*) from fleet group by 1\"`.")
    return "\n".join(lines) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
th{background:#f3f3f3}td.n{text-align:right}.bar{background:#4a7bd0;height:.8em;display:inline-block}
.empty{color:#777;font-style:italic}"""


def to_html(s: FleetSummary, title: str = "Fleet diagnosis") -> str:
    e = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>{_CSS}</style>"
             f"</head><body><h1>{e(title)}</h1><p>{e(_headline(s))}.</p>"]
    if s.notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in s.notes) + "</ul>")
    for name, head, body, empty in _sections(s):
        parts.append(f"<h2>{e(name)}</h2>")
        if not body:
            parts.append(f"<p class='empty'>{e(empty)}</p>")
            continue
        rows = []
        for row in body:
            cells = []
            for i, value in enumerate(row):
                text = e(str(value))
                if name == "Verdicts" and i == 2 and s.diagnosed:
                    width = 10 * row[1] / s.diagnosed
                    text += f" <span class='bar' style='width:{width:.2f}em'></span>"
                cells.append(f"<td class='n'>{text}</td>" if isinstance(value, (int, float)) else f"<td>{text}</td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
        parts.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>")
    for key, groups in s.by_label.items():
        verdicts = sorted({v for _, c in groups for v in c})
        parts.append(f"<h2>Verdicts by label <code>{e(key)}</code></h2><table><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in [key, *verdicts]) + "</tr>"
                     + "".join("<tr><td>" + e(value) + "</td>" + "".join(f"<td class='n'>{c.get(v, 0)}</td>"
                                                                          for v in verdicts) + "</tr>"
                               for value, c in groups) + "</table>")
    parts.append("</body></html>\n")
    return "".join(parts)
