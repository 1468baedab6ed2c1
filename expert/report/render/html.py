"""One self-contained HTML file: the report, why-chains, the provenance graph and a roofline chart as inline SVG.

No script, no stylesheet link, no font or image download: the file opens offline and prints as it shows.
"""

from __future__ import annotations

from html import escape

from ..explain import gain_text, why
from ..model import Report
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


def _fmt(value: object) -> str:
    if value is None:
        return "?"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


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
        effect = "verdict withheld" if c.effect == "withheld" else f"strength capped at {c.max_strength}"
        values = ", ".join(f"<code>{_e(name)}</code> = {_e(_fmt(value))}" for name, value in c.facts.items())
        remeasure = "".join(f"<li><code>{_e(m.fact)}</code>: {_e(m.tool)} ({_e(m.how)})</li>" for m in c.remeasure)
        out.append(f"<div class=\"conflict\" data-finding=\"{_e(c.finding)}\"><p><strong>Conflicting "
                   f"evidence</strong> ({_e(effect)}): {_e(c.title)} ({values})</p><p>{_e(c.message)}</p>"
                   f"<p>To settle it: {_e(c.firmer)}</p>" + (f"<ul>{remeasure}</ul>" if remeasure else "") + "</div>")
    for c in report.evidence_limits:
        effect = "verdict withheld" if c.effect == "withheld" else f"strength capped at {c.max_strength}"
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
           "<table><tr><th>fact</th><th>value</th></tr>"]
    out += [f"<tr><td><code>{_e(name)}</code></td><td>{_e(_fmt(value))}</td></tr>"
            for name, value in cluster.model_dump().items() if value is not None and name != "ranks"]
    out.append("</table>")
    if not cluster.ranks:
        return out

    def sec(value: float | None) -> str:
        return "?" if value is None else (f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s")

    def share(value: float | None) -> str:
        return "?" if value is None else f"{value:.0%}"

    of = f" of {cluster.world_size}" if cluster.world_size else ""
    out.append(f"<h3>Ranks ({len(cluster.ranks)} traced{of}; per step)</h3><ul>")
    if cluster.straggler_rank is not None:
        out.append(f"<li id=\"straggler\" data-rank=\"{cluster.straggler_rank}\"><strong>Straggler: rank "
                   f"{cluster.straggler_rank}</strong>: the other ranks wait {share(cluster.sync_wait_frac)} of each "
                   "step inside collectives for it.</li>")
    elif len(cluster.ranks) > 1 and cluster.sync_wait_frac is not None:
        out.append(f"<li>No straggler: the ranks wait {share(cluster.sync_wait_frac)} of the step for one "
                   "another.</li>")
    if cluster.slow_link is not None:
        out.append("<li>Slow link: collectives are slow on every rank.</li>" if cluster.slow_link
                   else "<li>The link is not slow: the transfers are short or hidden behind compute.</li>")
    if cluster.comm_frac is not None:
        out.append(f"<li>Exposed communication: {share(cluster.comm_frac)} of the step.</li>")
    if cluster.step_time_skew is not None:
        out.append(f"<li>Step-time skew (slowest rank over the median): {cluster.step_time_skew:.1%}.</li>")
    out.append("</ul><table id=\"ranks\"><tr><th>rank</th><th>file</th><th>step</th><th>compute</th><th>comm</th>"
               "<th>exposed comm</th><th>idle</th><th>overlap</th><th>waits</th></tr>")
    for r in cluster.ranks:
        mark = " class=\"sev-critical\"" if r.rank == cluster.straggler_rank else ""
        out.append(f"<tr{mark}><td>{r.rank}</td><td>{_e(r.file.rsplit('/', 1)[-1])}</td><td>{sec(r.step_time_s)}</td>"
                   f"<td>{sec(r.compute_s)}</td><td>{sec(r.comm_s)}</td><td>{share(r.exposed_comm_frac)}</td>"
                   f"<td>{share(r.idle_frac)}</td><td>{share(r.comm_overlap_frac)}</td><td>{sec(r.sync_wait_s)}</td>"
                   "</tr>")
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
        out.append("<table><tr><th>#</th><th>optimization</th><th>why</th><th>expected gain (upper bound)</th></tr>")
        for i, r in enumerate(report.recommended, 1):
            out.append(f"<tr><td>{i}</td><td><strong>{_e(r.title)}</strong><br><span class=\"muted\">{_e(r.how)}"
                       f"</span></td><td>{_e(r.why)}</td><td>{_e(gain_text(r.expected_gain))}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p class=\"muted\">Nothing yet: no rule concluded an optimization on this evidence.</p>")
    out.append("<h2>Wasted effort</h2>")
    if report.wasted:
        out.append("<table><tr><th>optimization</th><th>why it would not help</th><th>decided by</th></tr>")
        for w in report.wasted:
            out.append(f"<tr><td><del>{_e(w.title)}</del></td><td>{_e(w.reason)}</td>"
                       f"<td>{_e(', '.join(w.rules))}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p class=\"muted\">Nothing is ruled out on this evidence.</p>")
    if report.applied:
        out.append("<h2>Already applied</h2>")
        out.append("<table><tr><th>optimization</th><th>given by</th><th>would have been proposed by</th></tr>")
        for a in report.applied:
            out.append(f"<tr><td>{_e(a.title)} (<code>{_e(a.id)}</code>)</td><td>{_e(a.source)}</td>"
                       f"<td>{_e(', '.join(a.rules) or '—')}</td></tr>")
        out.append("</table>")
    return out


def _scorecard(report: Report) -> list[str]:
    out = ["<h2>Scorecard</h2>",
           "<table><tr><th>axis</th><th>metric</th><th>value</th><th>band</th><th>bands</th></tr>"]
    for row in report.scorecard:
        value = "?" if row.value is None else f"{row.value:.1%}"
        out.append(f"<tr><td>{_e(row.axis)}</td><td>{_e(row.title)}</td><td>{value}</td>"
                   f"<td class=\"band-{_e(row.band.replace('/', ''))}\">{_e(row.band)}</td>"
                   f"<td>{_e(row.bands)}</td></tr>")
    out.append("</table>")
    return out


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
    out = ["<h2>Evidence</h2>", "<table><tr><th>fact</th><th>value</th><th>source</th></tr>"]
    for name, obs in report.observations.items():
        out.append(f"<tr><td><code>{_e(name)}</code></td><td>{_e(_fmt(obs.value))}</td><td>{_e(obs.source)}</td></tr>")
    for name, d in report.derived.items():
        unit = f" {d.unit}" if d.unit else ""
        out.append(f"<tr><td><code>{_e(name)}</code></td><td>{_e(_fmt(d.value) + unit)}</td>"
                   f"<td>derived: {_e(d.formula)} <span class=\"muted\">({_e(d.source)})</span></td></tr>")
    out.append("</table>")
    return out


def _time_breakdown(report: Report) -> list[str]:
    """Where the GPU time goes (profiler traces): class shares as bars, top kernels and operators."""
    tb = report.time_breakdown
    if tb is None:
        return []

    def num(v: float | None) -> str:
        return "" if v is None else f"{v:.3g}"

    def pct(v: float | None) -> str:
        return "" if v is None else f"{v:.0%}"

    out = ["<h2 id=\"time-breakdown\">Where the time goes</h2>",
           f"<p class=\"muted\">Window: {_e(tb.window.reason)}</p>"]
    if tb.roof is not None:
        out.append(f"<p class=\"muted\">Roof: {_e(tb.roof.hardware)} {_e(tb.roof.dtype)}, {tb.roof.peak_tflops:g} "
                   f"TFLOP/s, {tb.roof.peak_bandwidth_gbs:g} GB/s (ridge {tb.roof.ridge_flop_per_byte:.3g} FLOP/B)</p>")
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
                       f"style=\"width:{width}px\"></span></td><td class=\"num\">{num(c.arithmetic_intensity)}</td>"
                       f"<td class=\"num\">{pct(c.pct_of_roof)}</td></tr>")
        out.append("</table>")
    for title, entries in (("Top kernels", tb.top_kernels), ("Top operators (by the kernels they launched)",
                                                            tb.top_ops), ("Top modules", tb.top_modules)):
        if not entries:
            continue
        out.append(f"<h3>{_e(title)}</h3><table><tr><th>name</th><th>class</th><th>share</th><th>count</th>"
                   "<th>FLOP/B</th><th>% of roof</th></tr>")
        out += [f"<tr><td><code>{_e(e.name[:160])}</code></td><td>{_e(e.class_ or '')}</td>"
                f"<td class=\"num\">{e.share:.1%}</td><td class=\"num\">{e.count}</td>"
                f"<td class=\"num\">{num(e.arithmetic_intensity)}</td><td class=\"num\">{pct(e.pct_of_roof)}</td></tr>"
                for e in entries]
        out.append("</table>")
    if tb.idle is not None:
        i = tb.idle
        out.append(f"<p>GPU busy {i.busy:.0%}; idle: input {i.input:.0%}, launch overhead {i.launch:.0%}, host "
                   f"compute {i.host_compute:.0%}, blocking syncs {i.sync:.0%}, no host event {i.unattributed:.0%}, "
                   f"GPU-side waits {i.gpu_wait:.0%}.</p>")
        if tb.host_during_idle and i.host_compute >= 0.02:
            out.append("<p class=\"muted\">While the GPU idled the host ran: " + ", ".join(
                f"<code>{_e(e.name)}</code> ({e.share:.0%})" for e in tb.host_during_idle[:4]) + ".</p>")
    out += [f"<p class=\"muted\">Note: {_e(n)}</p>" for n in tb.notes]
    return out
