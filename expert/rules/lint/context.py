"""The context every lint reads: the loaded files, the knowledge base, and indexes derived from them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..._lazy import cached_property
from ...derive.registry import DERIVATIONS
from ...kb.knowledge import KnowledgeBase
from ..logic import BoxAlgebra, bind, finding_uses, refs_used
from ..model import Condition, NamedCondition, RuleFile
from ..references import knowledge_value
from .core import ConditionSite, Diagnostic, Lint, RuleSite, SourceFile, TableSite, Value, YamlPath


class LintContext:
    """The loaded files, the knowledge base and derived indexes, shared by every lint."""

    def __init__(self, kb: KnowledgeBase, kb_dir: Path, dirs: list[Path], files: list[SourceFile],
                 tests: list[SourceFile], waivers: list[SourceFile], load_errors: list[Diagnostic]) -> None:
        self.kb = kb
        self.kb_dir = kb_dir
        self.dirs = dirs
        self.files = files
        self.tests = tests
        self.waiver_files = waivers
        self.load_errors = load_errors
        self.rules: list[RuleSite] = []
        self.conditions_sites: list[ConditionSite] = []
        self.table_sites: list[TableSite] = []
        for f in files:
            if f.model is None:
                continue
            rf: RuleFile = f.model
            self.rules += [RuleSite(f, i, r, self.bound(r.when)) for i, r in enumerate(rf.rules)]
            self.conditions_sites += [ConditionSite(f, n, c, self.bound(c.when)) for n, c in rf.conditions.items()]
            self.table_sites += [TableSite(f, i, t) for i, t in enumerate(rf.tables)]
        self.rule_by_id: dict[str, RuleSite] = {}
        for site in self.rules:
            self.rule_by_id.setdefault(site.rule.id, site)
        self.conditions: dict[str, NamedCondition] = {}
        self.condition_by_name: dict[str, ConditionSite] = {}
        for cs in self.conditions_sites:
            self.conditions.setdefault(cs.name, cs.condition)
            self.condition_by_name.setdefault(cs.name, cs)
        self._whens = {name: cs.when for name, cs in self.condition_by_name.items()}
        self.tables: dict[str, TableSite] = {}
        for ts in self.table_sites:
            self.tables.setdefault(ts.table.regime, ts)
        self.producers: dict[str, list[RuleSite]] = {}
        for site in self.rules:
            if site.rule.then.finding:
                self.producers.setdefault(site.rule.then.finding.id, []).append(site)
        self.suite: Any = None  # the rule-test suite result, when the rules load

    def bound(self, when: Condition) -> Condition:
        """A condition as written with its `{kb: NAME}` thresholds bound to numbers (an unknown name, which DAM013
        reports, is left out)."""
        return bind(when, lambda value: knowledge_value(self.kb, value))

    # -- helpers lints use --

    def diag(self, lint: type[Lint], file: SourceFile, path: Sequence[str | int], message: str, *,
             subject: str | None = None, hint: str = "") -> Diagnostic:
        return Diagnostic(lint=lint.id, name=lint.name, severity=lint.severity, path=file.display,
                          line=file.line(path), subject=subject, message=message, hint=hint)

    def condition_roots(self) -> Iterator[tuple[SourceFile, YamlPath, Condition, str]]:
        """(file, path of `when`, condition with knowledge values bound, subject) for every rule and named
        condition."""
        for site in self.rules:
            yield site.file, (*site.path, "when"), site.when, site.rule.id
        for cs in self.conditions_sites:
            yield cs.file, (*cs.path, "when"), cs.when, cs.name

    def written_roots(self) -> Iterator[tuple[SourceFile, YamlPath, Condition, str]]:
        """As `condition_roots`, with each condition as written (`{kb: NAME}` thresholds unbound)."""
        for site in self.rules:
            yield site.file, (*site.path, "when"), site.rule.when, site.rule.id
        for cs in self.conditions_sites:
            yield cs.file, (*cs.path, "when"), cs.condition.when, cs.name

    @cached_property
    def domains(self) -> dict[str, frozenset[Value]]:
        """Enumerable fact domains (enum choices)."""
        return {name: frozenset(spec.choices) for name, spec in self.kb.facts.items()
                if spec.type == "enum" and spec.choices}

    @property
    def whens(self) -> dict[str, Condition]:
        """Named conditions: name -> its bound `when` (the first definition of each name)."""
        return self._whens

    @cached_property
    def algebra(self) -> BoxAlgebra:
        return BoxAlgebra(self.whens, self.domains)

    @cached_property
    def expanded(self) -> BoxAlgebra:
        producers = {f: [s.when for s in sites] for f, sites in self.producers.items()}
        return BoxAlgebra(self.whens, self.domains, producers)

    def refs_of(self, node: Condition, stack: tuple[str, ...] = ()) -> set[str]:
        """Named conditions a condition uses, transitively (undefined and cyclic ones included, not entered)."""
        return refs_used(node, self.whens, stack)

    def findings_of(self, node: Condition, negated: bool = False,
                    stack: tuple[str, ...] = ()) -> list[tuple[str, bool]]:
        """(finding, negated) references of a condition, through named conditions."""
        return [(name, neg != negated) for name, neg in finding_uses(node, self.whens, stack)]

    @cached_property
    def obtainable(self) -> set[str]:
        """Facts a user can give or expert/derive.py can compute from facts a user can give."""
        known = {name for name, spec in self.kb.facts.items() if spec.askable}
        changed = True
        while changed:
            changed = False
            for d in DERIVATIONS:
                if d.output not in known and all(i in known for i in d.inputs):
                    known.add(d.output)
                    changed = True
        return known

    @cached_property
    def finding_graph(self) -> Any:
        """networkx DiGraph: finding f -> finding g when a rule concluding g reads f (edge `negated`, `rules`)."""
        import networkx as nx

        graph = nx.DiGraph()
        for site in self.rules:
            then = site.rule.then
            if not then.finding:
                continue
            for f, neg in self.findings_of(site.when):
                if graph.has_edge(f, then.finding.id):
                    data = graph.edges[f, then.finding.id]
                    data["negated"] = data["negated"] or neg
                    data["rules"].add(site.rule.id)
                else:
                    graph.add_edge(f, then.finding.id, negated=neg, rules={site.rule.id})
        return graph

    @cached_property
    def cycles(self) -> list[tuple[list[str], bool, list[str]]]:
        """(findings in the cycle, through negation?, rules on it) for every simple cycle of the finding graph, each
        cycle starting at its smallest finding and the cycles sorted (networkx's order follows set iteration, which
        changes with the hash seed)."""
        import networkx as nx

        out = []
        graph = self.finding_graph
        for found in nx.simple_cycles(graph):
            at = found.index(min(found))
            cycle = [*found[at:], *found[:at]]
            edges = list(zip(cycle, [*cycle[1:], cycle[0]], strict=True))
            negated = any(graph.edges[a, b]["negated"] for a, b in edges)
            rules = sorted({r for a, b in edges for r in graph.edges[a, b]["rules"]})
            out.append((cycle, negated, rules))
        return sorted(out)
