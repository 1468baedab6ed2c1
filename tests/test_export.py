"""Exports parse back (DOT via pydot, GraphML and node-link via networkx), Mermaid has one node per graph node,
the JSON export round-trips to identical explanations, and the Markdown/HTML documents carry the report."""

from __future__ import annotations

import json
import re
from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from expert import Expert, Report
from expert._resources import data_dir, examples_dir
from expert.observations.file import read_observation_file
from expert.report.render import FORMATS, export, load, write
from expert.report.render.graph import load_json, node_kind
from expert.report.render.svg import roofline
from expert.rules.testing import load_rule_tests

ROOT = Path(__file__).resolve().parents[1]
EXPERT = Expert(engine="pure")
EXAMPLES = {p.stem: read_observation_file(p).observations for p in sorted(examples_dir().glob("*.yaml"))}
CASES: list[tuple[str, dict[str, Any]]] = [(f"example:{k}", v) for k, v in EXAMPLES.items()] + [
    (f"case:{path.stem.removesuffix('.test')}:{c.name}", c.facts)
    for path, tf in load_rule_tests([data_dir("rules")]) for c in tf.cases
]
NAMES = [n for n, _ in CASES]
# pydot's parser takes about a second per graph on a small machine: every example and a sample of the cases
DOT_NAMES = [n for n in NAMES if n.startswith("example:")] + [n for n in NAMES if n.startswith("case:")][::30]
# every why / why-not / how of a report, twice, is ~0.3 s: every example and an eighth of the cases (the round trip
# itself is checked on all of them; tests/test_explain.py checks the answers' semantics)
EXPLAIN_NAMES = [n for n in NAMES if n.startswith("example:")] + [n for n in NAMES if n.startswith("case:")][::8]
STARVED = {"hardware": "h100-sxm", "dtype": "bf16", "workload": "training", "batch_size": 256, "num_workers": 0,
           "gpu_util": "45%", "host_cpu_util": "30%", "step_time_s": "300 ms", "data_wait_s": "120 ms", "mfu": "12%"}
GEMM = {"hardware": "h100-sxm", "dtype": "bf16", "workload": "training", "batch_size": 64, "gpu_util": "99%",
        "sm_active": "93%", "tensor_active": "71%", "mem_bw_util": "24%", "flops": "550 TFLOP",
        "bytes_moved": "400 GB", "step_time_s": "0.95 s"}


@cache
def report(name: str) -> Report:
    return EXPERT.diagnose(dict(CASES)[name])


def explanations(r: Report) -> dict[str, Any]:
    """Every why / why-not / how answer of a report, as data."""
    ids = ([f"finding:{f.id}" for f in r.findings] + [f"bottleneck:{c.regime}" for c in r.candidates]
           + [f"recommendation:{x.id}" for x in r.recommended] + [f"wasted:{w.id}" for w in r.wasted])
    asks = [*EXPERT.kb.optimizations, *EXPERT.kb.regimes.regimes, *(e.rule_id for e in r.evaluations)]
    return {"why": {i: r.why(i).model_dump() for i in ids},
            "why_not": {i: r.why_not(i).model_dump() for i in asks},
            "how": {f: r.how(f).model_dump() for f in r.facts()}}


@pytest.mark.parametrize("name", DOT_NAMES)
def test_dot_parses_back(name: str) -> None:
    pydot = pytest.importorskip("pydot", reason="pydot is in the test extra: pip install -e '.[test]'")
    r = report(name)
    (dot,) = pydot.graph_from_dot_data(export(r, "dot"))
    parsed = nx.nx_pydot.from_pydot(dot)
    assert set(parsed.nodes) == {n.id for n in r.graph.nodes}
    assert {(u, v, d["relation"].strip('"')) for u, v, d in parsed.edges(data=True)} == {
        (e.source, e.target, e.relation) for e in r.graph.edges}
    assert {n: parsed.nodes[n]["kind"].strip('"') for n in parsed.nodes} == {n.id: node_kind(n) for n in r.graph.nodes}


@pytest.mark.parametrize("name", NAMES)
def test_graphml_and_mermaid(name: str) -> None:
    r = report(name)
    node_ids = {n.id for n in r.graph.nodes}
    kinds = {n.id: node_kind(n) for n in r.graph.nodes}
    graphml = nx.parse_graphml(export(r, "graphml"))
    assert set(graphml.nodes) == node_ids and graphml.number_of_edges() == len(r.graph.edges)
    assert {n: graphml.nodes[n]["kind"] for n in graphml.nodes} == kinds
    assert {(u, v, d["relation"]) for u, v, d in graphml.edges(data=True)} == {
        (e.source, e.target, e.relation) for e in r.graph.edges}

    mermaid = export(r, "mermaid").splitlines()
    assert mermaid[0] == "flowchart LR"
    defined = [m.group(1) for line in mermaid if (m := re.match(r"^  (n\d+)[\[\(\{>]", line))]
    assert len(defined) == len(r.graph.nodes) == len(set(defined))
    edges = [line for line in mermaid if re.match(r"^  n\d+ [-=.]+>(\|[a-z-]+\|)? n\d+$", line)]
    assert len(edges) == len(r.graph.edges)


@pytest.mark.parametrize("name", NAMES)
def test_json_export_round_trips(name: str) -> None:
    r = report(name)
    text = export(r, "json")
    assert load_json(text) == r
    data = json.loads(text)
    graph = nx.node_link_graph(data["graph"], directed=True, multigraph=False, edges="edges")
    assert set(graph.nodes) == {n.id for n in r.graph.nodes}
    assert graph.number_of_edges() == len(r.graph.edges)
    assert nx.is_directed_acyclic_graph(graph)


@pytest.mark.parametrize("name", EXPLAIN_NAMES)
def test_a_loaded_json_export_gives_identical_explanations(name: str) -> None:
    r = report(name)
    again = load_json(export(r, "json"))
    assert explanations(again) == explanations(r)


def test_load_reads_plain_reports_and_exports(tmp_path: Path) -> None:
    r = report(NAMES[0])
    plain, exported = tmp_path / "plain.json", tmp_path / "exported.json"
    plain.write_text(r.to_json())
    write(r, "json", exported)
    assert load(plain) == load(exported) == r
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu_util": 0.5}')
    with pytest.raises(Exception, match="is not a dam-expert report"):
        load(bad)
    broken = tmp_path / "broken.json"
    broken.write_text('{"evaluations": ')
    with pytest.raises(Exception, match="invalid JSON"):
        load(broken)
    with pytest.raises(Exception, match="no such file"):
        load(tmp_path / "missing.json")


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_markdown_postmortem(example: str) -> None:
    r = report(f"example:{example}")
    md = export(r, "markdown")
    for heading in ("## Verdict", "## Evidence", "## Iron-law breakdown", "## Findings", "## Recommended",
                    "## Wasted effort", "## Scorecard", "## Next measurements", "## Provenance"):
        assert heading in md
    assert (r.verdict_title or "Undecided") in md
    for name in r.observations:
        assert f"| `{name}` |" in md
    for f in r.findings:
        assert f.message in md and "<- " in md
    for rec in r.recommended:
        assert rec.title in md
        assert (rec.expected_gain.assumptions if rec.expected_gain else "unknown") in md
    for w in r.wasted:
        assert f"~~{w.title}~~" in md and w.reason in md
    block = md.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert block == export(r, "mermaid")


def test_markdown_says_unknown_where_the_gain_is_unknown() -> None:
    r = EXPERT.diagnose({"pageable_copy_frac": 0.9})  # pin_memory shrinks the input term; no step timings given
    unknown = [x for x in r.recommended if x.expected_gain is None]
    assert unknown, "expected a recommendation without an iron-law share"
    md = export(r, "markdown")
    assert "unknown (the iron-law share of the term it shrinks is not known)" in md


class _Dom(HTMLParser):
    """Collects what the HTML tests look for: resources, the verdict text, and nodes of each inline SVG."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.svg: list[str] = []
        self.nodes: dict[str, int] = {}
        self.in_verdict = 0
        self.verdict = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "svg":
            self.svg.append(a.get("id") or "")
        if tag == "g" and "node" in (a.get("class") or "").split() and self.svg:
            self.nodes[self.svg[-1]] = self.nodes.get(self.svg[-1], 0) + 1
        if a.get("id") == "verdict":
            self.in_verdict = 1
        elif self.in_verdict:
            self.in_verdict += 1

    def handle_endtag(self, tag: str) -> None:
        if self.in_verdict:
            self.in_verdict -= 1

    def handle_data(self, data: str) -> None:
        if self.in_verdict:
            self.verdict += data


def parse_html(text: str) -> _Dom:
    dom = _Dom()
    dom.feed(text)
    return dom


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_html_is_self_contained(example: str) -> None:
    r = report(f"example:{example}")
    html = export(r, "html")
    dom = parse_html(html)
    assert not [t for t, a in dom.tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    assert not [a for _, a in dom.tags if a.get("src") or (a.get("href") or "").startswith(("http", "//"))]
    assert "@import" not in html and "url(http" not in html
    assert (r.verdict_title or "undecided") in dom.verdict
    assert dom.nodes["provenance-graph"] == len(r.graph.nodes)
    assert ("roofline" in dom.svg) == (roofline(r) is not None)
    assert ("iron-law" in dom.svg) == any(t.seconds is not None for t in r.iron_law.terms)


def test_roofline_places_the_workload() -> None:
    r = EXPERT.diagnose(GEMM)
    rf = roofline(r)
    assert rf is not None and rf.ridge == pytest.approx(989.4e12 / 3.35e12)
    assert rf.intensity == pytest.approx(550e12 / 400e9)
    assert rf.achieved_tflops == pytest.approx(550 / 0.95)
    svg = export(r, "html")
    assert "ridge 295.3 FLOP/B" in svg and "of its roof" in svg
    decode = roofline(EXPERT.diagnose({"hardware": "h100-sxm", "dtype": "bf16", "workload": "inference",
                                       "phase": "decode", "batch_size": 1}))
    assert decode is not None and decode.intensity == pytest.approx(1.0) and decode.achieved_tflops is None
    assert roofline(EXPERT.diagnose({"hardware": "l40s", "gpu_util": 0.6})) is None  # no dtype: no peak


APPLIED = {"hardware": "h100-sxm", "workload": "training", "gpu_util": "60%", "uses_cuda_graphs": "yes",
           "applied_optimizations": "cuda_graphs"}


def test_an_applied_optimization_is_its_own_kind_in_every_export() -> None:
    """A job that already replays CUDA graphs: the report lists cuda_graphs both as wasted (trace-graphs-in-use: more
    of it would not help) and as already applied; every export shows the applied one as kind "applied", labelled
    "already applied", beside (not as a copy of) the wasted one."""
    pydot = pytest.importorskip("pydot", reason="pydot is in the test extra: pip install -e '.[test]'")
    r = EXPERT.diagnose(APPLIED)
    assert [w.id for w in r.wasted if w.id == "cuda_graphs"] == [a.id for a in r.applied] == ["cuda_graphs"]
    (dot,) = pydot.graph_from_dot_data(export(r, "dot"))
    node = dot.get_node('"applied:cuda_graphs"')[0]
    assert node.get("kind").strip('"') == "applied"
    assert node.get("label").strip('"') == "already applied: CUDA Graphs"
    assert dot.get_node('"wasted:cuda_graphs"')[0].get("label").strip('"') == "wasted: CUDA Graphs"
    graphml = nx.parse_graphml(export(r, "graphml"))
    assert graphml.nodes["applied:cuda_graphs"]["kind"] == "applied"
    assert graphml.nodes["wasted:cuda_graphs"]["kind"] == "wasted"
    mermaid = export(r, "mermaid")
    assert mermaid.count('"wasted: CUDA Graphs"') == 1
    assert '[\\"already applied: CUDA Graphs"/]:::applied' in mermaid
    assert "classDef applied " in mermaid
    linked = {n["id"]: n["kind"] for n in json.loads(export(r, "json"))["graph"]["nodes"]}
    assert linked["applied:cuda_graphs"] == "applied" and linked["wasted:cuda_graphs"] == "wasted"
    assert 'data-id="applied:cuda_graphs" data-kind="applied"' in export(r, "html")


def test_every_format_exports_text() -> None:
    r = EXPERT.diagnose(GEMM)
    for fmt in FORMATS:
        assert export(r, fmt).endswith("\n")
    with pytest.raises(Exception, match="unknown"):
        export(r, "pdf")


# ---- the CLI (in-process, through expert.commands, the parser and `main` behind cli.py) ------------------------


def dam(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from expert.commands import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("saved") / "report.json"
    path.write_text(EXPERT.diagnose(STARVED).to_json())
    return path


def test_cli_explain(capsys: pytest.CaptureFixture[str], saved: Path) -> None:
    code, out, _ = dam(capsys, "explain", str(saved))
    assert code == 0 and out.startswith("the verdict is input")
    code, out, _ = dam(capsys, "explain", str(saved), "--why", "data_starved")
    assert code == 0 and "io_overhead 0.4 > 0.1" in out
    code, out, _ = dam(capsys, "explain", str(saved), "--why-not", "compute")
    assert code == 0 and "mfu 0.12 > 0.5 fails" in out
    code, out, _ = dam(capsys, "explain", str(saved), "--why-not", "more_peak_flops", "--format", "json")
    assert code == 0 and json.loads(out)["wasted_for_verdict"] is True
    code, out, _ = dam(capsys, "explain", str(saved), "--how", "io_overhead")
    assert code == 0 and "data_wait_s / step_time_s" in out
    code, out, _ = dam(capsys, "explain", str(saved), "--what-if", "data_wait_s=10ms", "num_workers=8")
    assert code == 0 and "verdict: input -> undecided" in out and "num_workers: 0 -> 8" in out
    code, out, _ = dam(capsys, "explain", str(saved), "--counterfactuals", "--engine", "pure")
    assert code == 0 and "data_wait_s" in out
    # a known regime, optimization or fact that this report did not conclude or observe is a question (exit 0)
    code, out, _ = dam(capsys, "explain", str(saved), "--why-not", "pruning")
    assert code == 0 and "pruning is not recommended" in out
    code, out, _ = dam(capsys, "explain", str(saved), "--why-not", "coordination")
    assert code == 0 and "coordination" in out
    code, out, _ = dam(capsys, "explain", str(saved), "--how", "num_nodes")
    assert code == 0 and "num_nodes: unknown. It was not observed" in out
    code, out, _ = dam(capsys, "explain", "--example", "llm_decode_batch1", "--why", "verdict")
    assert code == 0 and ("the verdict is" in out or "there is no verdict" in out)


def test_cli_exports(capsys: pytest.CaptureFixture[str], saved: Path, tmp_path: Path) -> None:
    for fmt in FORMATS:
        target = tmp_path / f"out.{fmt}"
        code, _, err = dam(capsys, "explain", str(saved), "--export", fmt, "--output", str(target))
        assert code == 0, err
        assert target.read_text(encoding="utf-8") == export(load(saved), fmt)
        target2 = tmp_path / f"diag.{fmt}"
        code, _, err = dam(capsys, "diagnose", *(f"--set={k}={v}" for k, v in STARVED.items()), "--engine", "pure",
                           "--export", fmt, "--output", str(target2))
        assert code == 0, err
        assert target2.read_text(encoding="utf-8") == target.read_text(encoding="utf-8")
    code, out, _ = dam(capsys, "diagnose", "--example", "large_gemm", "--export", "mermaid")
    assert code == 0 and out.startswith("flowchart LR")
    code, out, _ = dam(capsys, "diagnose", "--example", "large_gemm", "--format", "json")
    assert code == 0 and Report.model_validate_json(out).observations["hardware"].value  # --format unchanged


def test_cli_plot(capsys: pytest.CaptureFixture[str], saved: Path, tmp_path: Path) -> None:
    svg = tmp_path / "roofline.svg"
    code, _, err = dam(capsys, "plot", "roofline", "--example", "large_gemm", "--output", str(svg))
    assert code == 0, err
    assert svg.read_text().startswith("<svg") and 'class="roof"' in svg.read_text()
    law = tmp_path / "iron.svg"
    code, _, err = dam(capsys, "plot", "iron-law", str(saved), "--output", str(law))
    assert code == 0 and 'data-term="input"' in law.read_text()
    observations = tmp_path / "obs.yaml"
    observations.write_text("hardware: h100-sxm\ndtype: bf16\narithmetic_intensity: 120\n")
    code, _, err = dam(capsys, "plot", "roofline", str(observations), "--output", str(svg))
    assert code == 0 and "workload: 120 FLOP/B" in svg.read_text()


def test_cli_plot_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="PNG needs the plot extra: pip install -e '.[plot]'")
    for chart in ("roofline", "iron-law"):
        png = tmp_path / f"{chart}.png"
        code, _, err = dam(capsys, "plot", chart, "--example", "large_gemm", "--output", str(png))
        assert code == 0, err
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("args", "needle"), [
    (("explain", "{tmp}/missing.json"), "no such file"),
    (("explain", "{tmp}/notreport.json"), "unknown fact"),
    (("explain", "{saved}", "--what-if", "gpu_util"), "expected NAME=VALUE"),
    (("explain", "{saved}", "--what-if", "gpu_util=250"), "gpu_util"),
    (("explain", "{saved}", "--what-if", "ridge_point=10"), "is derived"),
    (("explain",), "no report given"),
    # a name that is nothing at all: exit 2 with the closest names, for --why, --why-not and --how alike
    (("explain", "{saved}", "--how", "gpu_utl"), "no fact is called 'gpu_utl' (did you mean gpu_util"),
    (("explain", "{saved}", "--why-not", "nonsense"), "no bottleneck, finding, optimization or rule is called"),
    (("explain", "{saved}", "--why-not", "data_strved"), "did you mean data_starved?"),
    (("explain", "{saved}", "--why-not", "gpu_util"), "dam explain REPORT --how gpu_util"),
    (("explain", "{saved}", "--why", "data_strved"), "did you mean data_starved"),
    (("plot", "roofline", "--example", "large_gemm", "--output", "{tmp}/x.gif"), "unknown image type"),
    (("plot", "roofline", "--set", "gpu_util=0.5", "--output", "{tmp}/x.svg"), "peak FLOP/s"),
    (("plot", "roofline", "--output", "{tmp}/x.svg"), "nothing to plot"),
    (("diagnose", "--example", "large_gemm", "--export", "html", "--output", "{tmp}/no/such/dir/x.html"),
     "cannot write"),
])
def test_cli_bad_input_is_one_clear_message(capsys: pytest.CaptureFixture[str], saved: Path, tmp_path: Path,
                                            args: tuple[str, ...], needle: str) -> None:
    (tmp_path / "notreport.json").write_text('{"gpu_utilisation": 0.5}')
    code, out, err = dam(capsys, *(a.format(tmp=tmp_path, saved=saved) for a in args))
    assert code == 2, (out, err)
    assert needle in err and "Traceback" not in err + out
