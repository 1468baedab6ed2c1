"""`dam explain`: why / why-not / how / what-if / counterfactuals on a saved report, and exports."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EPILOG = """\
examples:
  dam diagnose --example data_starved_training --format json --output report.json
  dam explain report.json                         (why the verdict)
  dam explain report.json --why data_starved      (a finding, regime, optimization, rule or fact)
  dam explain report.json --why-not compute       (every rule that could conclude it, and what failed)
  dam explain report.json --why-not quantization  (optimizations: also whether it is wasted, and why)
  dam explain report.json --how mfu               (formula, inputs, hardware figures and their source)
  dam explain report.json --what-if data_wait_s=10ms host_cpu_util=95%
  dam explain report.json --counterfactuals       (smallest single-fact changes that flip the verdict)
  dam explain report.json --export html --output postmortem.html
  dam explain --example llm_decode_batch1 --why-not compute

REPORT is a JSON report (dam diagnose --format json, or --export json); an observation file (YAML) is
diagnosed first. export formats: markdown, mermaid, dot, graphml, json (lossless), html (self-contained).
"""


def register(sub: Any) -> None:
    from ..report.render import FORMATS

    p = sub.add_parser("explain", help="why / why-not / how / what-if on a report, and postmortem exports",
                       description="Explain a diagnosis: the evidence behind each conclusion, why something was "
                                   "not concluded, what would change it; export it for a postmortem.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", nargs="?", metavar="REPORT", help="saved report (JSON) or an observation file")
    p.add_argument("--example", metavar="NAME", help="diagnose a bundled example instead of reading REPORT")
    ask = p.add_mutually_exclusive_group()
    ask.add_argument("--why", metavar="ID", help="the chain behind a conclusion (or 'verdict')")
    ask.add_argument("--why-not", metavar="ID",
                     help="why a bottleneck, finding, optimization or rule was not concluded")
    ask.add_argument("--how", metavar="FACT", help="how a fact was observed or derived")
    ask.add_argument("--what-if", nargs="+", metavar="NAME=VALUE", help="re-diagnose with facts changed")
    ask.add_argument("--counterfactuals", action="store_true",
                     help="the smallest single-fact changes that flip the verdict")
    ask.add_argument("--export", choices=FORMATS, metavar="FORMAT", help=f"export: {', '.join(FORMATS)}")
    p.add_argument("--format", choices=["text", "json"], default="text", help="explanation output format")
    p.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--engine", choices=["auto", "durable", "pure"], default="auto",
                   help="rule engine for --what-if / --counterfactuals")
    p.add_argument("--rules-dir", action="append", default=[], metavar="DIR",
                   help="extra rules directory for --what-if / --counterfactuals (as used for the report)")
    p.set_defaults(func=run)


def load_report(path: str | None, example: str | None, rules_args: argparse.Namespace | None = None) -> Any:
    """A report from a saved JSON report, or by diagnosing an observation file or a bundled example."""
    from ..errors import ObservationError, Problem
    from ..observations.file import read_observation_file
    from ..report.render import load
    from ._common import example_path, make_expert, observation_path

    if example:
        source = example_path(example)
    elif path:
        source = observation_path(path, "explain")
    else:
        raise ObservationError([Problem("REPORT", "no report given",
                                        "give a saved report (dam diagnose ... --format json --output report.json) "
                                        "or --example NAME")])
    if source.suffix.lower() == ".json" and _looks_like_report(source):
        return load(source)
    if example:
        from .._loadcache import bundled_yaml

        observations = read_observation_file(source, parse_yaml=bundled_yaml).observations
    else:
        observations = read_observation_file(source).observations
    if rules_args is not None:
        return make_expert(rules_args).diagnose(observations)
    import expert

    return expert.default_expert().diagnose(observations)


def _looks_like_report(path: Path) -> bool:
    try:
        head = path.read_text(encoding="utf-8")[:4096]
    except (OSError, UnicodeDecodeError):
        return True  # let the report loader give the message
    return '"evaluations"' in head or '"dam-expert/provenance"' in head or '"schema_version"' in head


def _write(text: str, output: str | None) -> None:
    from ._common import write_text

    text = text if text.endswith("\n") else text + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    write_text(output, text)


def _did_you_mean(ident: str, names: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(ident, sorted(names), n=3, cutoff=0.6)
    return f"did you mean {', '.join(close)}? " if close else ""


def _nothing_to_explain(option: str, ident: str, problem: str, hint: str) -> Exception:
    from ..errors import ObservationError, Problem

    return ObservationError([Problem(f"{option} {ident}", problem, hint)], title="nothing to explain")


def _facts(report: Any, kb: Any) -> set[str]:
    from ..derive.registry import DERIVATIONS

    return set(kb.facts) | set(report.observations) | set(report.derived) | {d.output for d in DERIVATIONS}


def _check_fact(report: Any, name: str, kb: Any) -> None:
    """--how NAME for a fact the report does not know: a fact of the vocabulary that was not observed is a question
    with an answer (exit 0); a name that is no fact at all is an error (exit 2), with the closest fact names."""
    facts = _facts(report, kb)
    if name in facts:
        return
    raise _nothing_to_explain("--how", name, f"no fact is called {name!r}",
                              f"{_did_you_mean(name, facts)}the facts are listed in knowledge_base/facts.yaml; a "
                              "conclusion is explained by --why ID")


def _check_why_not(report: Any, ident: str, kb: Any) -> None:
    """--why-not ID that no rule or regime table of the report can conclude: a regime or optimization of the
    knowledge base is still a question with an answer (exit 0); a fact, or a name that is nothing at all, is an
    error (exit 2), with the closest names that --why-not can ask about."""
    regimes, optimizations = set(kb.regimes.regimes), set(kb.optimizations)
    if ident in regimes or ident in optimizations:
        return
    if ident in _facts(report, kb):
        raise _nothing_to_explain("--why-not", ident, f"{ident!r} is a fact, not a conclusion",
                                  f"how it was observed or derived: dam explain REPORT --how {ident}")
    rules = {e.rule_id for e in report.evaluations}
    findings = {e.concludes.finding for e in report.evaluations if e.concludes.finding}
    findings |= {f.id for f in report.findings}
    targets = regimes | optimizations | rules | findings
    raise _nothing_to_explain(
        "--why-not", ident, f"no bottleneck, finding, optimization or rule is called {ident!r}",
        f"{_did_you_mean(ident, targets)}ask about a bottleneck ({', '.join(sorted(regimes))}), a finding or rule id "
        "(dam rules list) or an optimization id (knowledge_base/optimizations.yaml)")


def run(args: argparse.Namespace) -> int:
    from ..report.render import export
    from ._common import make_expert, parse_sets

    report = load_report(args.report, args.example, args)
    if args.export:
        _write(export(report, args.export), args.output)
        return 0
    result: Any
    if args.why_not:
        result = report.why_not(args.why_not)
        if result.kind == "unknown":
            _check_why_not(report, args.why_not, make_expert(args).kb)
    elif args.how:
        result = report.how(args.how)
        if result.kind == "unknown":
            _check_fact(report, args.how, make_expert(args).kb)
    elif args.what_if:
        result = report.what_if(parse_sets(args.what_if), make_expert(args))
    elif args.counterfactuals:
        result = report.counterfactuals(make_expert(args))
    else:
        if args.why:
            from ..errors import ObservationError, Problem
            from ..report.explain import unknown_id

            problem = unknown_id(report, args.why)
            if problem is not None:
                raise ObservationError([Problem(f"--why {args.why}", problem, "")], title="nothing to explain")
        result = report.why(args.why or "verdict")
    _write(result.model_dump_json(indent=2) if args.format == "json" else result.text(), args.output)
    return 0
