"""The HTML export opened in headless Chromium: the verdict text shows and the SVG has one laid-out node per graph node.

Needs Debian's chromium package (apt-get install -y chromium); skipped with that reason where it is absent.
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from expert import Expert, Report
from expert.report.render import export

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium is not installed (Debian: apt-get update && apt-get install -y chromium)")

EXPERT = Expert(engine="pure")
CASES = {
    "starved": {"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": "45%", "step_time_s": "300 ms",
                "data_wait_s": "120 ms", "num_workers": 0, "host_cpu_util": "30%"},
    "undecided": {"hardware": "l40s", "workload": "training", "gpu_util": "62%"},
}
# Appended to a copy of the export: counts the graph nodes that Chromium actually laid out (non-empty boxes).
PROBE = """<script>
const nodes = [...document.querySelectorAll('#provenance-graph g.node')];
const laidOut = nodes.filter(n => { const b = n.getBBox(); return b.width > 0 && b.height > 0; }).length;
const verdict = document.getElementById('verdict');
const probe = document.createElement('pre');
probe.id = 'probe';
probe.textContent = JSON.stringify({nodes: nodes.length, laidOut: laidOut, verdictHeight: verdict.offsetHeight});
document.body.appendChild(probe);
</script>"""


def dump_dom(page: Path, profile: Path) -> str:
    assert CHROMIUM is not None
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.verdict = ""
        self.svg: str | None = None
        self.nodes = 0
        self.probe = ""
        self.in_probe = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self.svg = a.get("id")
        if tag == "g" and self.svg == "provenance-graph" and "node" in (a.get("class") or "").split():
            self.nodes += 1
        if a.get("id") == "verdict" or self.depth:
            self.depth += 1
        self.in_probe = a.get("id") == "probe"

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1
        if tag == "svg":
            self.svg = None
        self.in_probe = False

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.verdict += data
        if self.in_probe:
            self.probe += data


@pytest.mark.parametrize("case", sorted(CASES))
def test_html_renders_in_headless_chromium(case: str, tmp_path: Path) -> None:
    import json

    report: Report = EXPERT.diagnose(CASES[case])
    html = export(report, "html")
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    dom = _Dom()
    dom.feed(dump_dom(page, tmp_path / "profile"))
    expected = report.verdict_title or "undecided"
    assert "Verdict:" in dom.verdict and expected in dom.verdict
    assert dom.nodes == len(report.graph.nodes)

    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    dom = _Dom()
    dom.feed(dump_dom(probed, tmp_path / "profile2"))
    seen = json.loads(dom.probe)
    assert seen["nodes"] == seen["laidOut"] == len(report.graph.nodes)
    assert seen["verdictHeight"] > 0
