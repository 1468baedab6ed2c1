"""One self-contained HTML file: the report, why-chains, the provenance graph and a roofline chart as inline SVG.

No script, no stylesheet link, no font or image download: the file opens offline and prints as it shows.
"""

from __future__ import annotations

from html import escape

from ..explain import gain_text, why
from ..model import Report
from . import _parts as shared
from .svg import iron_law_svg, provenance_svg, roofline_svg

_CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;color:#111827;line-height:1.45;
padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #e5e7eb;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;font-size:.92em}th,td{border:1px solid #e5e7eb;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f9fafb}.verdict{font-size:1.3em;padding:.6em 1em;border-radius:8px;
background:#fee2e2;border:1px solid #dc2626}.verdict.undecided{background:#fef9c3;border-color:#ca8a04}
.verdict.conflicting{background:#fae8ff;border-color:#a21caf}
.conflict{border-left:4px solid #a21caf;background:#fdf4ff;padding:.4em .8em}.thin{border-left:4px solid #ca8a04;
background:#fefce8;padding:.4em .8em}
.muted{color:#6b7280}.band-fail{color:#b91c1c;font-weight:bold}.band-pass{color:#15803d}.band-marginal{color:#a16207}
pre{background:#f9fafb;border:1px solid #e5e7eb;padding:.6em;overflow-x:auto;font-size:.85em;white-space:pre-wrap}
.graph{overflow-x:auto;border:1px solid #e5e7eb;border-radius:8px;padding:4px}del{color:#6b7280}
.sev-critical{color:#b91c1c;font-weight:bold}.sev-warning{color:#a16207;font-weight:bold}.sev-info{color:#0369a1}
.bar{display:inline-block;height:.8em;background:#0891b2}.bar.mem{background:#c026d3}td.num{text-align:right}
"""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _row(*cells: str) -> str:
    """A table row of cells already in HTML."""
    return "<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"


def _table(headers: tuple[str, ...], rows: list[str]) -> list[str]:
    """A table: its header row, one line per row, the closing tag."""
    return ["<table><tr>" + "".join(f"<th>{h}</th>" for h in headers) + "</tr>", *rows, "</table>"]


def to_html(report: Report, title: str | None = None) -> str:
    """The report as one offline HTML page."""
    heading = title or "D·A·M diagnosis"
    body: list[str] = [f"<h1>{_e(heading)}</h1>"]
    body += _verdict(report)
    body += _iron_law(report)
    body += _time_breakdown(report)
    body += _cluster(report)
    body += _roofline(report)
    body += _findings(report)
    body += _optimizations(report)
    body += _scorecard(report)
    body += _measurements(report)
    body += _evidence(report)
    body += ["<h2 id=\"provenance\">Provenance</h2>",
             "<p class=\"muted\">Observations (left) through derived quantities and rules to conclusions (right). "
             "Hover a node for its full label.</p>",
             f"<div class=\"graph\">{provenance_svg(report)}</div>",
             f"<p class=\"muted\">dam-expert, {_e(report.engine)} engine. Follow-up questions: "
             "<code>dam explain REPORT.json --why ID</code>, <code>--why-not ID</code>, "
             "<code>--what-if k=v</code>.</p>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(heading)}: {_e(report.verdict_title or 'undecided')}</title><style>{_CSS}</style></head>\n"
            "<body>\n" + "\n".join(body) + "\n</body></html>\n")


def _verdict(report: Report) -> list[str]:
    if report.bottleneck:
        lead = report.candidates[0]
        out = [f"<p id=\"verdict\" class=\"verdict\" data-verdict=\"{_e(report.bottleneck)}\">"
               f"Verdict: <strong>{_e(report.verdict_title)}</strong> "
               f"<span class=\"muted\">({_e(lead.strength)}; rules: {_e(', '.join(lead.rules))})</span></p>"]
    elif report.state == "conflicting evidence":
        out = ["<p id=\"verdict\" class=\"verdict conflicting\" data-verdict=\"\" data-state=\"conflicting evidence\">"
               "Verdict: <strong>withheld: conflicting evidence</strong> <span class=\"muted\">— the inputs cannot "
               "all be right, so no verdict is named until they are re-measured</span></p>"]
    else:
        out = ["<p id=\"verdict\" class=\"verdict undecided\" data-verdict=\"\">Verdict: <strong>undecided</strong> "
               "<span class=\"muted\">— the evidence is insufficient to name a bottleneck</span></p>"]
    out += _limits(report)
    others = report.candidates[1:] if report.bottleneck else report.candidates
    if others:
        out.append("<p>Other hypotheses: " + ", ".join(f"{_e(c.title)} ({_e(c.strength)}, score {c.score})"
                                                      for c in others) + "</p>")
    if report.axes:
        out.append("<p>D·A·M axes: " + ", ".join(f"{_e(a.axis)} {a.share:.0%}" for a in report.axes) + "</p>")
    return out


def _limits(report: Report) -> list[str]:
    """Conflicting and thin evidence in effect: the values that disagree, the effect, what to re-measure."""
    out: list[str] = []
    for c in report.conflicts:
        effect = shared.limit_effect(c)
        values = ", ".join(f"<code>{_e(name)}</code> = {_e(shared.value_text(value))}"
                           for name, value in c.facts.items())
        remeasure = "".join(f"<li><code>{_e(m.fact)}</code>: {_e(m.tool)} ({_e(m.how)})</li>" for m in c.remeasure)
        out.append(f"<div class=\"conflict\" data-finding=\"{_e(c.finding)}\"><p><strong>Conflicting "
                   f"evidence</strong> ({_e(effect)}): {_e(c.title)} ({values})</p><p>{_e(c.message)}</p>"
                   f"<p>To settle it: {_e(c.firmer)}</p>" + (f"<ul>{remeasure}</ul>" if remeasure else "") + "</div>")
    for c in report.evidence_limits:
        effect = shared.limit_effect(c)
        out.append(f"<div class=\"thin\" data-finding=\"{_e(c.finding)}\"><p><strong>Thin evidence</strong> "
                   f"({_e(effect)}): {_e(c.title)}. Firmer with: {_e(c.firmer)}</p></div>")
    return out


def _iron_law(report: Report) -> list[str]:
    svg = iron_law_svg(report)
    out = ["<h2>Iron law</h2>"]
    if svg is None:
        return [*out, "<p class=\"muted\">No term of the iron law is known on this evidence.</p>"]
    return [*out, svg]


def _cluster(report: Report) -> list[str]:
    """The cluster section: the C³ facts, and with rank traces the per-rank table with the straggler marked."""
    cluster = report.cluster
    if cluster is None:
        return []
    out = ["<h2 id=\"cluster\">Cluster (C³: computation, communication, coordination)</h2>",
           *_table(("fact", "value"), [_row(f"<code>{_e(name)}</code>", _e(shared.value_text(value)))
                                       for name, value in shared.cluster_facts(cluster)])]
    if not cluster.ranks:
        return out

    of = f" of {cluster.world_size}" if cluster.world_size else ""
    out.append(f"<h3>Ranks ({len(cluster.ranks)} traced{of}; per step)</h3><ul>")
    for key, sentence in shared.rank_prose(cluster, lambda lead: f"<strong>{lead}</strong>"):
        at = f" id=\"straggler\" data-rank=\"{cluster.straggler_rank}\"" if key == "straggler" else ""
        out.append(f"<li{at}>{sentence}</li>")
    out.append("</ul><table id=\"ranks\"><tr>" + "".join(f"<th>{h}</th>" for h in shared.RANK_HEADERS) + "</tr>")
    for r in cluster.ranks:
        mark = " class=\"sev-critical\"" if r.rank == cluster.straggler_rank else ""
        out.append(f"<tr{mark}><td>{r.rank}</td><td>{_e(r.file.rsplit('/', 1)[-1])}</td>"
                   + "".join(f"<td>{cell}</td>" for cell in shared.rank_cells(r)) + "</tr>")
    out.append("</table>")
    return out


def _roofline(report: Report) -> list[str]:
    svg = roofline_svg(report)
    out = ["<h2>Roofline</h2>"]
    if svg is None:
        return [*out, "<p class=\"muted\">No roofline: it needs the hardware and the dtype (for the peak FLOP/s "
                      "and the memory bandwidth).</p>"]
    return [*out, svg]


def _findings(report: Report) -> list[str]:
    out = ["<h2>Findings</h2>"]
    if not report.findings:
        return [*out, "<p class=\"muted\">No finding on this evidence.</p>"]
    for f in report.findings:
        chain = why(report, f"finding:{f.id}").text()
        out.append(f"<details><summary><span class=\"sev-{f.severity}\">{_e(f.severity)}</span> {_e(f.message)} "
                   f"<span class=\"muted\">({_e(f.rule_id)})</span></summary>"
                   f"<p class=\"muted\">{_e(f.source)}</p><pre>{_e(chain)}</pre></details>")
    return out


def _optimizations(report: Report) -> list[str]:
    out = ["<h2>Recommended</h2>"]
    if report.recommended:
        out += _table(("#", "optimization", "why", "expected gain (upper bound)"),
                      [_row(str(i), f"<strong>{_e(r.title)}</strong><br><span class=\"muted\">{_e(r.how)}</span>",
                            _e(r.why), _e(gain_text(r.expected_gain))) for i, r in enumerate(report.recommended, 1)])
    else:
        out.append("<p class=\"muted\">Nothing yet: no rule concluded an optimization on this evidence.</p>")
    out.append("<h2>Wasted effort</h2>")
    if report.wasted:
        out += _table(("optimization", "why it would not help", "decided by"),
                      [_row(f"<del>{_e(w.title)}</del>", _e(w.reason), _e(", ".join(w.rules))) for w in report.wasted])
    else:
        out.append("<p class=\"muted\">Nothing is ruled out on this evidence.</p>")
    if report.applied:
        out.append("<h2>Already applied</h2>")
        out += _table(("optimization", "given by", "would have been proposed by"),
                      [_row(f"{_e(a.title)} (<code>{_e(a.id)}</code>)", _e(a.source), _e(", ".join(a.rules) or "—"))
                       for a in report.applied])
    return out


def _scorecard(report: Report) -> list[str]:
    rows = [f"<tr><td>{_e(row.axis)}</td><td>{_e(row.title)}</td><td>{shared.percent_text(row.value)}</td>"
            f"<td class=\"band-{_e(row.band.replace('/', ''))}\">{_e(row.band)}</td><td>{_e(row.bands)}</td></tr>"
            for row in report.scorecard]
    return ["<h2>Scorecard</h2>", *_table(("axis", "metric", "value", "band", "bands"), rows)]


def _measurements(report: Report) -> list[str]:
    out = ["<h2>Next measurements</h2>"]
    if report.next_measurements:
        out.append("<ul>")
        for m in report.next_measurements:
            out.append(f"<li><strong>{_e(m.fact or m.axis + ' axis')}</strong> with {_e(m.tool)}: "
                       f"<code>{_e(m.how)}</code> — {_e(m.why)}</li>")
        out.append("</ul>")
    if report.missing:
        out.append("<p>Missing evidence (would sharpen or decide the diagnosis):</p><ul>")
        out += [f"<li><code>{_e(m.fact)}</code>: {_e(m.question)}</li>" for m in report.missing]
        out.append("</ul>")
    return out


def _evidence(report: Report) -> list[str]:
    rows = [_row(f"<code>{_e(name)}</code>", _e(shared.value_text(obs.value)), _e(obs.source))
            for name, obs in report.observations.items()]
    rows += [_row(f"<code>{_e(name)}</code>", _e(shared.value_text(d.value) + (f" {d.unit}" if d.unit else "")),
                  f"derived: {_e(d.formula)} <span class=\"muted\">({_e(d.source)})</span>")
             for name, d in report.derived.items()]
    return ["<h2>Evidence</h2>", *_table(("fact", "value", "source"), rows)]


def _time_breakdown(report: Report) -> list[str]:
    """Where the GPU time goes (profiler traces): class shares as bars, top kernels and operators."""
    tb = report.time_breakdown
    if tb is None:
        return []

    out = ["<h2 id=\"time-breakdown\">Where the time goes</h2>",
           f"<p class=\"muted\">Window: {_e(tb.window.reason)}</p>"]
    if tb.roof is not None:
        out.append(f"<p class=\"muted\">Roof: {shared.roof_text(tb.roof, _e)}</p>")
    if tb.classes:
        out.append(f"<p>{tb.gpu_time_s:.4g} s of GPU activity, {tb.kernels} kernels"
                   + (f"; {tb.memory_bound_share:.0%} in classes memory-bound by nature (magenta)"
                      if tb.memory_bound_share is not None else "") + ".</p>")
        out.append("<table class=\"classes\"><tr><th>kernel class</th><th>share</th><th></th><th>FLOP/B</th>"
                   "<th>% of roof</th></tr>")
        for c in tb.classes:
            width = max(1, round(c.share * 300))
            out.append(f"<tr data-class=\"{_e(c.class_)}\"><td>{_e(c.class_)}</td><td class=\"num\">{c.share:.1%}</td>"
                       f"<td><span class=\"bar{' mem' if c.memory_bound_by_nature else ''}\" "
                       f"style=\"width:{width}px\"></span></td>"
                       f"<td class=\"num\">{shared.number_text(c.arithmetic_intensity)}</td>"
                       f"<td class=\"num\">{shared.share_text(c.pct_of_roof, '')}</td></tr>")
        out.append("</table>")
    for title, entries in shared.top_lists(tb):
        out.append(f"<h3>{_e(title)}</h3><table><tr><th>name</th><th>class</th><th>share</th><th>count</th>"
                   "<th>FLOP/B</th><th>% of roof</th></tr>")
        out += [f"<tr><td><code>{_e(e.name[:160])}</code></td><td>{_e(e.class_ or '')}</td>"
                f"<td class=\"num\">{e.share:.1%}</td><td class=\"num\">{e.count}</td>"
                f"<td class=\"num\">{shared.number_text(e.arithmetic_intensity)}</td>"
                f"<td class=\"num\">{shared.share_text(e.pct_of_roof, '')}</td></tr>"
                for e in entries]
        out.append("</table>")
    if tb.idle is not None:
        out.append(f"<p>GPU busy {shared.idle_text(tb.idle)}.</p>")
        host = shared.host_during_idle(tb)
        if host:
            out.append("<p class=\"muted\">While the GPU idled the host ran: " + ", ".join(
                f"<code>{_e(e.name)}</code> ({e.share:.0%})" for e in host) + ".</p>")
    out += [f"<p class=\"muted\">Note: {_e(n)}</p>" for n in tb.notes]
    return out
