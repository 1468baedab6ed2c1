"""Consultation benchmark (issue 4): how many questions `dam consult` asks, against the size of the vocabulary.

Run:  .venv/bin/python bench/bench_consult.py [--json FILE] [--verbose]

For every bundled example and every rule-test case (rules/tests/*.test.yaml) a scripted user answers each question
from the case's facts, and "unknown" for facts the case lacks; the final verdict and recommended set must equal
`expert.diagnose` on the full facts. Printed next to the number of questions asked, measured in the same run:

* the vocabulary (askable facts): what a questionnaire asking everything would ask;
* a lower bound for any one-fact-at-a-time questioner that is right on every case: the facts to which the case is
  sensitive on their own (some value of that one fact, or leaving it out, changes the verdict or the recommended set).
  A questioner that never asks such a fact cannot tell the case from its neighbour that differs only there. The
  consultation can go below it because two kinds of question settle several facts with one answer: the tools
  question, and the combined questions of knowledge_base/facts.yaml (the kind of job; the accelerator and its
  precision), which the simulated user answers with the member facts the case gives (the others: unknown);
* the main protocol (first column): the session asks once which tools the user can run (`available_tools`); the
  simulated user names the offered tools that measure some fact the case has (a user holding a value can run its
  tool); the questions of the other offered tools are closed at once, and the user answers every other question from
  the case's facts as above;
* the per-fact protocol (no tools question: every question answered from the case, "unknown" when it lacks the fact);
* a third protocol where the user answers "no-tool" (no data from the tool that measures the fact: the question and
  every other one about that tool are closed) when the case has no fact from that tool;
* time per question against the time of one full `expert.diagnose`, in wall-clock and in CPU time (on a shared, busy
  machine the wall clock stretches a many-millisecond session more than a one-millisecond diagnose); and the same for
  sessions that start with the planner's memos emptied (every state new, as for the first user of a fresh Expert),
  on every sixth case.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import expert  # noqa: E402
from expert._resources import data_dir, examples_dir  # noqa: E402
from expert.consult.planner import fact_regions  # noqa: E402
from expert.consult.rule_index import index  # noqa: E402
from expert.consult.session import Consultation, answer_from  # noqa: E402
from expert.derive.graph import GRAPH  # noqa: E402
from expert.diagnosis.decide import decide  # noqa: E402
from expert.errors import ObservationError  # noqa: E402
from expert.observations.file import read_observation_file  # noqa: E402
from expert.observations.normalise import convert  # noqa: E402
from expert.rules.testing import load_rule_tests  # noqa: E402

EXPERT = expert.default_expert()
KB = EXPERT.kb
IX = index(EXPERT)
ASKABLE = [name for name, spec in KB.facts.items() if spec.askable]


def cases() -> list[tuple[str, str, dict[str, Any]]]:
    out = [("example", p.stem, dict(read_observation_file(p).observations))
           for p in sorted(examples_dir().glob("*.yaml"))]
    for path, tf in load_rule_tests([data_dir("rules")]):
        out += [("rule test", f"{path.stem.removesuffix('.test')}::{c.name}", dict(c.facts)) for c in tf.cases]
    return out


def consult(facts: dict[str, Any], protocol: str, clock: Any = time.perf_counter) -> tuple[Consultation, float]:
    """A scripted consultation ("tools", "per-fact" or "no-tool"); returns it and the seconds (of `clock`) spent
    choosing questions and taking answers. Only the "tools" protocol answers the tools question; the others never
    see it."""
    no_tool = protocol == "no-tool"
    c = Consultation(EXPERT, ask_tools=protocol == "tools")
    start = clock()
    while (q := c.next_question()) is not None:
        raw = answer_from(q, facts, EXPERT)
        if raw is not None:
            c.answer(q.fact, raw)
            continue
        tool = IX.tool_of.get(q.fact)
        unmeasured = tool is not None and not any(IX.tool_of.get(f) == tool for f in facts)
        c.unknown(q.fact, whole_group=no_tool and unmeasured)
    return c, clock() - start


def cold_turns(all_cases: list[tuple[str, str, dict[str, Any]]]) -> tuple[float, float]:
    """Median CPU seconds per turn and per diagnose of sessions that find the planner's memos empty (every sixth
    case; the "tools" protocol)."""
    per_turn: list[float] = []
    diagnoses: list[float] = []
    for _, _, facts in all_cases[::6]:
        start = time.process_time()
        EXPERT.diagnose(facts)
        diagnoses.append(time.process_time() - start)
        IX.what_ifs.clear()
        IX.decisions.clear()
        IX.witnesses.clear()
        getattr(IX.local, "plans", {}).clear()
        c, seconds = consult(facts, "tools", time.process_time)
        per_turn.append(seconds / max(1, c.questions_asked + 1))
    return statistics.median(per_turn), statistics.median(diagnoses)


def key(facts: dict[str, Any]) -> tuple[str | None, frozenset[str]] | None:
    try:
        values = GRAPH.values(facts, KB)
    except (ArithmeticError, ValueError, KeyError):
        return None
    result = IX.engine.run(values)
    decision = decide(EXPERT.ruleset, result.fired, result.findings, values)
    return decision.verdict, decision.recommended


def _probe_values(name: str) -> list[Any]:
    spec = KB.facts[name]
    values: list[Any] = [v for _, v in fact_regions(IX, name)]
    if spec.type == "enum":
        values += list(spec.choices or [])
    elif spec.type == "hardware":
        values += sorted(KB.hardware)
    elif spec.type == "fraction":
        values += [0.0, 0.005, 0.02, 0.08, 0.12, 0.3, 0.6, 0.75, 0.85, 0.97, 1.0]
    elif spec.type == "integer":
        values += [0, 1, 2, 4, 8, 64, 512, 4096]
    else:
        values += [10.0 ** e for e in range(-6, 17)] + [3 * 10.0 ** e for e in range(-6, 16)]
    return values


def sensitive_facts(facts: dict[str, Any]) -> int:
    """How many askable facts change the verdict or the recommended set on their own (a lower bound)."""
    observed = EXPERT.observations(facts).values()
    base = key(observed)
    count = 0
    for name in ASKABLE:
        spec = KB.facts[name]
        trials: list[dict[str, Any]] = []
        if name in observed:
            trials.append({k: v for k, v in observed.items() if k != name})
        for raw in _probe_values(name):
            try:
                trials.append({**observed, name: convert(spec, raw, KB)})
            except ValueError:
                continue
        for trial in trials:
            try:
                expert.derive.formulas.check_consistency(trial)
            except ObservationError:
                continue
            found = key(trial)
            if found is not None and found != base:
                count += 1
                break
    return count


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):5.1f}  max {max(values):3.0f}" if values else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", metavar="FILE", help="also write every case's figures as JSON")
    parser.add_argument("--verbose", action="store_true", help="one line per case")
    args = parser.parse_args()

    all_cases = cases()
    Consultation(EXPERT).next_question()  # warm the planner's index
    rows: list[dict[str, Any]] = []
    diag_times: list[float] = []
    cpu_diag: list[float] = []
    for group, name, facts in all_cases:
        start, cpu = time.perf_counter(), time.process_time()
        full = EXPERT.diagnose(facts)
        diag_times.append(time.perf_counter() - start)
        cpu_diag.append(time.process_time() - cpu)
        want = (full.bottleneck, {r.id for r in full.recommended})
        cpu = time.process_time()
        c, seconds = consult(facts, "tools")
        cpu_seconds = time.process_time() - cpu
        per_fact, _ = consult(facts, "per-fact")
        grouped, _ = consult(facts, "no-tool")
        got = [(x.report().bottleneck, {r.id for r in x.report().recommended}) for x in (c, per_fact, grouped)]
        row = {"group": group, "case": name, "facts": len(facts), "decided": full.bottleneck is not None,
               "asked": c.questions_asked, "asked_per_fact": per_fact.questions_asked,
               "asked_no_tool": grouped.questions_asked,
               "lower_bound": sensitive_facts(facts), "same": got[0] == want, "same_per_fact": got[1] == want,
               "same_no_tool": got[2] == want,
               "seconds_per_question": seconds / max(1, c.questions_asked + 1),
               "cpu_seconds_per_question": cpu_seconds / max(1, c.questions_asked + 1)}
        rows.append(row)
        if args.verbose:
            print(f"{group:9s} {name:62s} facts {row['facts']:2d}  asked {row['asked']:2d}  per-fact "
                  f"{row['asked_per_fact']:2d}  no-tool {row['asked_no_tool']:2d}  bound {row['lower_bound']:2d}  "
                  f"{'ok' if row['same'] else 'DIFFERS'}")

    vocabulary = len(ASKABLE)
    diag = statistics.median(diag_times)
    print(f"vocabulary: {vocabulary} askable facts ({len(KB.facts)} facts in all), {len(IX.rules)} rules; "
          f"{len(rows)} cases ({sum(r['group'] == 'example' for r in rows)} examples)")
    print(f"{'':28s}{'questions asked':22s}{'per-fact (no tools q)':22s}{'no-tool answers':22s}"
          f"{'lower bound (one fact at a time)':30s}")
    target = [r for r in rows if r["group"] == "example" or r["decided"]]  # the set issue 4 measures
    for label, subset in (("examples", [r for r in rows if r["group"] == "example"]),
                          ("rule tests", [r for r in rows if r["group"] == "rule test"]),
                          ("  with a decided verdict", [r for r in rows if r["group"] == "rule test" and r["decided"]]),
                          ("examples + decided (target)", target),
                          ("all", rows)):
        keys = ("asked", "asked_per_fact", "asked_no_tool", "lower_bound")
        figures = [summary([r[k] for r in subset]) for k in keys]
        print(f"{label:28s}{figures[0]:22s}{figures[1]:22s}{figures[2]:22s}{figures[3]:30s}")
    asked = [r["asked"] for r in target]
    median = statistics.median(asked)
    print(f"examples + rule tests with a decided verdict ({len(target)} cases): median {median:g} questions, "
          f"{median / vocabulary:.2f} of the vocabulary (a questionnaire asking everything: 1.00); "
          f"{sum(a <= 6 for a in asked)} of {len(asked)} cases ask 6 or fewer; target median <= 6: "
          f"{'met' if median <= 6 else 'not met'}")
    print(f"same verdict and recommendations as diagnose on the full facts: {sum(r['same'] for r in rows)}/{len(rows)} "
          f"(per-fact: {sum(r['same_per_fact'] for r in rows)}/{len(rows)}, "
          f"no-tool: {sum(r['same_no_tool'] for r in rows)}/{len(rows)})")
    per_q = statistics.median(r["seconds_per_question"] for r in rows)
    print(f"choosing a question: median {per_q * 1e3:.1f} ms = {per_q / diag:.1f}x one full diagnose "
          f"({diag * 1e3:.2f} ms, same run)")
    cpu_q = statistics.median(r["cpu_seconds_per_question"] for r in rows)
    cpu_d = statistics.median(cpu_diag)
    print(f"  in CPU time: median {cpu_q * 1e3:.2f} ms = {cpu_q / cpu_d:.2f}x one full diagnose ({cpu_d * 1e3:.2f} ms)")
    cold_q, cold_d = cold_turns(all_cases)
    print(f"  sessions on an emptied planner memo (every state new; every sixth case), CPU time: median "
          f"{cold_q * 1e3:.2f} ms = {cold_q / cold_d:.2f}x one full diagnose ({cold_d * 1e3:.2f} ms)")
    if args.json:
        Path(args.json).write_text(json.dumps({"vocabulary": vocabulary, "cases": rows}, indent=2) + "\n")
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
