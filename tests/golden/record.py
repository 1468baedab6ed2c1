"""Golden outputs for behaviour-preserving refactors: a digest of every report and consultation transcript.

    python tests/golden/record.py            # rewrite tests/golden/digests.json (after an intended change)
    python tests/golden/record.py --dump DIR # also write each output in full to DIR, to diff two versions
    python tests/golden/record.py --check --shard 1/4  # check a quarter of the cases (tests/test_golden.py)

Covered: the report JSON of every bundled example and every rule-test case (rules/tests/*.test.yaml) with both
engines, their Markdown rendering, and consultation transcripts under bench/bench_consult.py's three protocols (all
three for each example; one for half of the rule-test cases, the three in turn: see consult_protocols).
tests/test_golden.py fails when any digest differs.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DIGESTS = Path(__file__).with_name("digests.json")


def cases() -> list[tuple[str, dict[str, Any]]]:
    from expert._resources import data_dir, examples_dir
    from expert.observations.file import read_observation_file
    from expert.rules.testing import load_rule_tests

    out = [(f"example/{p.stem}", dict(read_observation_file(p).observations))
           for p in sorted(examples_dir().glob("*.yaml"))]
    for path, tf in load_rule_tests([data_dir("rules")]):
        out += [(f"rule-test/{path.stem.removesuffix('.test')}/{c.name}", dict(c.facts)) for c in tf.cases]
    return out


def _transcript(expert: Any, facts: dict[str, Any], protocol: str) -> str:
    from expert import Consultation
    from expert.consult.session import answer_from

    kb = expert.kb
    tool_of = {name: kb.tools.measurements[spec.measure or name].tool for name, spec in kb.facts.items()
               if spec.askable and (spec.measure or name) in kb.tools.measurements}
    c = Consultation(expert, ask_tools=protocol == "tools")
    lines: list[str] = []
    while (q := c.next_question()) is not None:
        lines.append(f"Q {q.fact} [{q.kind}] {q.prompt()} | why: {q.why}")
        raw = answer_from(q, facts, expert)
        if raw is not None:
            turn = c.answer(q.fact, raw)
        else:
            tool = tool_of.get(q.fact)
            unmeasured = tool is not None and not any(tool_of.get(f) == tool for f in facts)
            turn = c.unknown(q.fact, whole_group=protocol == "no-tool" and unmeasured)
        lines.append(f"A {turn.value!r} sets={turn.sets} closes={turn.closes} -> {turn.verdict_after}")
    report = c.report()
    lines.append(f"END {c.stop_reason} verdict={report.bottleneck} recommended={[r.id for r in report.recommended]}")
    return "\n".join(lines) + "\n"


PROTOCOLS = ("tools", "per-fact", "no-tool")


def consult_protocols(index: int, name: str) -> tuple[str, ...]:
    """Every protocol for a bundled example; one for half of the rule-test cases, the three in turn.

    A transcript costs about as much as twenty diagnoses: three per case were most of this check's time. The half is
    taken in runs of four cases (four on, four off), so each of the check's shards (every fourth case) gets its share.
    """
    if name.startswith("example/"):
        return PROTOCOLS
    return () if index // 4 % 2 else (PROTOCOLS[index // 8 % len(PROTOCOLS)],)


def outputs(shard: tuple[int, int] = (1, 1)) -> Iterator[tuple[str, str]]:
    """(name, text) for every golden output, in a fixed order; shard (K, N): those of every Nth case from the Kth."""
    from expert import Expert
    from expert.report.render import export

    experts = {"durable": Expert(engine="durable"), "pure": Expert(engine="pure")}
    k, n = shard
    for index, (name, facts) in enumerate(cases()):
        if index % n != k - 1:
            continue
        for engine, ex in experts.items():
            report = ex.diagnose(facts)
            yield f"{name}/{engine}.json", report.to_json()
            if engine == "durable":
                yield f"{name}/report.md", export(report, "markdown")
        for protocol in consult_protocols(index, name):
            yield f"{name}/consult-{protocol}.txt", _transcript(experts["pure"], facts, protocol)


def digests(dump: Path | None = None, shard: tuple[int, int] = (1, 1)) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, text in outputs(shard):
        out[name] = hashlib.sha256(text.encode()).hexdigest()
        if dump is not None:
            target = dump / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dump", type=Path, help="also write every output in full under this directory")
    parser.add_argument("--check", action="store_true", help="compare with digests.json instead of rewriting it")
    parser.add_argument("--shard", metavar="K/N", default="1/1",
                        help="with --check: only every Nth case from the Kth (the test runs the shards in parallel)")
    args = parser.parse_args()
    k, _, n = args.shard.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)) or (int(n) > 1 and not args.check):
        parser.error(f"--shard {args.shard}: expected K/N with 1 <= K <= N, and --check to use N > 1")
    shard = (int(k), int(n))
    # Hundreds of consultations fill the planner's memos; the cyclic collector's full passes over them were a fifth
    # of this run, and it frees little (the peak memory grew by 5 MB without it). No output depends on it.
    gc.disable()
    found = digests(args.dump, shard)
    if args.check:
        want = json.loads(DIGESTS.read_text())
        if shard != (1, 1):
            names = {name for name, _ in cases()[shard[0] - 1::shard[1]]}
            want = {key: value for key, value in want.items() if key.rsplit("/", 1)[0] in names}
        bad = sorted(k for k in want.keys() | found.keys() if want.get(k) != found.get(k))
        print("\n".join(bad) or f"all {len(found)} golden outputs identical")
        return 1 if bad else 0
    DIGESTS.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(found)} digests to {DIGESTS}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
