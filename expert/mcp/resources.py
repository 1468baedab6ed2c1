"""The MCP resources: the fact vocabulary, the hardware catalog, the rules with their docs, the JSON Schemas, and
the agent guide. Everything is generated from rules/ and knowledge_base/ (as `dam rules docs` and `dam schema` do).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._lazy import cached_property
from ..errors import ObservationError, Problem
from ..expert import Expert
from ..kb.knowledge import FactCatalog, HardwareCatalog
from ..rules.docs import cases_by_rule, render_rules_docs, rule_section
from ..rules.testing import RuleTestFile, load_rule_tests
from ..schemas import SCHEMAS, render, schema_for

SCHEME = "dam://"
JSON = "application/json"
MARKDOWN = "text/markdown"


@dataclass(frozen=True)
class ResourceSpec:
    uri: str
    name: str
    title: str
    description: str
    mime_type: str


@dataclass(frozen=True)
class TemplateSpec:
    uri_template: str
    name: str
    title: str
    description: str
    mime_type: str


def guide_path() -> Path | None:
    """docs/SKILL.md, bundled in the wheel or in the checkout."""
    from .._resources import data_dir

    try:
        path = data_dir("docs") / "SKILL.md"
    except FileNotFoundError:
        return None
    return path if path.is_file() else None


class Resources:
    """What `resources/list` shows and `resources/read` returns."""

    def __init__(self, expert: Expert, rules_dirs: Sequence[Path]) -> None:
        self.expert = expert
        self.kb = expert.kb
        self.rules_dirs = list(rules_dirs)
        self.static: dict[str, tuple[ResourceSpec, Callable[[], str]]] = {}
        n_facts = sum(1 for f in self.kb.facts.values() if f.askable)
        self._add(ResourceSpec(
            f"{SCHEME}facts", "facts", "The fact vocabulary",
            f"Every fact the expert reasons about ({len(self.kb.facts)}: {n_facts} can be observed, the rest are "
            "derived), with its type, unit, accepted range, question and how to measure it; and the combined "
            "questions of a consultation. Same layout as knowledge_base/facts.yaml.", JSON), self._facts)
        self._add(ResourceSpec(
            f"{SCHEME}hardware", "hardware", "The hardware catalog",
            f"{sum(hw.mig_of is None for hw in self.kb.hardware.values())} accelerators: dense peak TFLOP/s per "
            "dtype, memory bandwidth, links, aliases and the datasheet each figure comes from, and the MIG profiles "
            "of those that have them. Same layout as knowledge_base/hardware.yaml.", JSON),
            self._hardware)
        self._add(ResourceSpec(
            f"{SCHEME}rules", "rules", "The rules, with their docs",
            f"The rule reference ({len(expert.ruleset.rules)} rules): what each detects, why it matters, when it "
            "fires, what it concludes, an example that fires it and its source; named conditions; the regime "
            "optimization tables. As `dam rules docs` writes it.", MARKDOWN), lambda: self._rules_docs)
        guide = guide_path()
        if guide is not None:
            self._add(ResourceSpec(
                f"{SCHEME}guide", "guide", "How to use these tools",
                "When to call which tool, and how to read a report: verdict strength, conflicting and insufficient "
                "evidence, the wasted list (docs/SKILL.md).", MARKDOWN), lambda: guide.read_text(encoding="utf-8"))
        self.templates = [
            TemplateSpec(f"{SCHEME}rules/{{rule_id}}", "rule", "One rule",
                         "One rule's page with all its test cases (as `dam rules show ID`); the ids are in "
                         "dam://rules.", MARKDOWN),
            TemplateSpec(f"{SCHEME}schemas/{{name}}", "schema", "A JSON Schema",
                         "The JSON Schema of a file format or of the report (as `dam schema NAME`): "
                         + ", ".join(SCHEMAS) + ".", JSON),
        ]

    def _add(self, spec: ResourceSpec, read: Callable[[], str]) -> None:
        self.static[spec.uri] = (spec, read)

    @property
    def listed(self) -> list[ResourceSpec]:
        return [spec for spec, _ in self.static.values()]

    # ---- contents --------------------------------------------------------------------------------------------------

    def _facts(self) -> str:
        catalog = FactCatalog(facts=list(self.kb.facts.values()), questions=list(self.kb.questions.values()))
        return catalog.model_dump_json(indent=2, exclude_none=True)

    def _hardware(self) -> str:
        parts = [hw for hw in self.kb.hardware.values() if hw.mig_of is None]  # slices: `mig` makes them
        return HardwareCatalog(hardware=parts, families=self.kb.hardware_families,
                               name_prefixes=list(self.kb.hardware_prefixes),
                               mig=self.kb.hardware_mig).model_dump_json(indent=2)

    @cached_property
    def _tests(self) -> list[tuple[Path, RuleTestFile]]:
        return load_rule_tests(self.rules_dirs)

    @cached_property
    def _rules_docs(self) -> str:
        return render_rules_docs(self.kb, self.expert.ruleset, self._tests, self.rules_dirs)

    def _rule(self, rule_id: str) -> str:
        ruleset = self.expert.ruleset
        lr = ruleset.rules.get(rule_id)
        if lr is None:
            close = difflib.get_close_matches(rule_id, list(ruleset.rules), n=3, cutoff=0.5)
            raise ObservationError([Problem(f"rule {rule_id}", "no such rule",
                                            f"did you mean {', '.join(close)}?" if close else "see dam://rules")],
                                   title="cannot read the resource")
        cases = cases_by_rule(self._tests).get(rule_id, [])
        return rule_section(lr, self.kb, ruleset, cases, self.rules_dirs, level=1, show_cases=True)

    def _schema(self, name: str) -> str:
        if name not in SCHEMAS:
            raise ObservationError([Problem(f"schema {name}", "no such schema", f"one of: {', '.join(SCHEMAS)}")],
                                   title="cannot read the resource")
        return render(schema_for(name, self.kb))

    def read(self, uri: str) -> tuple[str, str]:
        """(text, MIME type) of a resource; an unknown URI is an ObservationError listing what there is."""
        found = self.static.get(uri)
        if found is not None:
            spec, make = found
            return make(), spec.mime_type
        for prefix, reader, mime in ((f"{SCHEME}rules/", self._rule, MARKDOWN),
                                     (f"{SCHEME}schemas/", self._schema, JSON)):
            if uri.startswith(prefix) and len(uri) > len(prefix):
                return reader(uri[len(prefix):]), mime
        known = [*self.static, *(t.uri_template for t in self.templates)]
        raise ObservationError([Problem(f"resource {uri}", "no such resource", f"one of: {', '.join(known)}")],
                               title="cannot read the resource")
