"""JSON Schemas for every file format, generated from the pydantic models (`dam schema NAME`, schemas/*.json).

The models decide the structure; the knowledge base adds the vocabulary, so editors complete and check fact names,
optimization ids and regimes in rule files, rule tests and observation files. Regenerate with
``dam schema --all --output-dir schemas/`` after changing a model or the vocabulary (a test compares them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from .kb import knowledge as _knowledge
from .kb.knowledge import (
    FactCatalog,
    FactSpec,
    HardwareCatalog,
    KnowledgeBase,
    OptimizationCatalog,
    RegimeCatalog,
    Scorecard,
    ToolMap,
    UnitTable,
)
from .observations.file import ObservationFile
from .report.model import UNEXPLAINED_TERM, Report
from .rules.lint import WaiverFile
from .rules.model import RuleFile
from .rules.references import knowledge_value_names
from .rules.testing import RuleTestFile

DIALECT = "https://json-schema.org/draft/2020-12/schema"
JsonSchema = dict[str, Any]


@dataclass(frozen=True)
class SchemaSpec:
    """One file format: its model, what it describes, and how the knowledge base refines it."""

    model: type[BaseModel]
    description: str
    mode: Literal["validation", "serialization"] = "validation"
    refine: Callable[[JsonSchema, KnowledgeBase], None] | None = None


def _enum(names: list[str]) -> JsonSchema:
    return {"type": "string", "enum": names}


_REGEX_SYNTAX = frozenset("^$\\.*+?()[]{}|/")  # escaped in a pattern; any other character stands for itself


def _any_case(words: list[str]) -> str:
    """A regular expression (ECMA 262, no flags) matching exactly one of `words` in any mix of cases."""
    def one(word: str) -> str:
        return "".join(f"[{c.lower()}{c.upper()}]" if c.lower() != c.upper()
                       else f"\\{c}" if c in _REGEX_SYNTAX else c for c in word)

    return "^(?:" + "|".join(one(word) for word in words) + ")$"


def _fact_value(spec: FactSpec, kb: KnowledgeBase) -> JsonSchema:
    """What an observation of one fact may look like (values are normalised by the library, so this is lenient)."""
    described = f"{spec.description} Accepts {spec.range_text()}."
    if spec.type == "enum":
        words = [*(spec.choices or []), "unknown", *spec.aliases]
        choices: list[object] = list(words)
        if set(spec.choices or []) == {"yes", "no"}:  # YAML reads a bare yes/no as a boolean, which `convert` takes
            choices += [True, False]
        # the library matches the words in any case (RoCE, BF16): the enum lists them for completion, the pattern
        # accepts the other cases
        return {"description": described, "anyOf": [{"enum": choices},
                                                     {"type": "string", "pattern": _any_case(words)}]}
    if spec.type == "hardware":
        return {"description": described, "type": "string", "examples": kb.part_ids()}
    if spec.type == "text":
        return {"description": described, "type": "string", **({"examples": [spec.example]} if spec.example else {})}
    if spec.type == "optimizations":
        return {"description": described, "anyOf": [
            {"type": "string"}, {"type": "array", "items": {"enum": sorted(kb.optimizations)}, "minItems": 1}]}
    return {"description": described, "type": ["number", "string"],
            **({"examples": [spec.example]} if spec.example else {})}


def _with_provenance(value: JsonSchema) -> JsonSchema:
    """A fact's value given bare or as `{value, source, detail}`, the form `dam ingest` writes (both are read by
    expert/observations/normalise.py: `_raw_items` and `_entry`)."""
    bare = {k: v for k, v in value.items() if k != "description"}
    entry = {"type": "object", "required": ["value"], "additionalProperties": False, "properties": {
        "value": bare,
        "source": {"type": "string", "description": "where the value came from (default: user)"},
        "detail": {"type": "object", "description": "how it was measured (method, window, file, ...); string and "
                                                    "number entries are kept in the report, others are dropped"}}}
    return {"description": value["description"], "anyOf": [bare, entry]}


def _facts_object(kb: KnowledgeBase, provenance: bool = False) -> JsonSchema:
    """A mapping of observable fact -> value (derived facts cannot be given); with `provenance`, each value may also
    be given as `{value, source, detail}`."""
    props = {name: _with_provenance(_fact_value(spec, kb)) if provenance else _fact_value(spec, kb)
             for name, spec in sorted(kb.facts.items()) if spec.askable}
    return {"type": "object", "properties": props, "additionalProperties": False}


def _refine_rules(schema: JsonSchema, kb: KnowledgeBase) -> None:
    defs = schema["$defs"]
    facts = sorted(kb.facts)
    optimizations = sorted(kb.optimizations)
    regimes = sorted(kb.regimes.regimes)
    defs["FactTest"]["properties"]["fact"] = {**_enum(facts), "description": "a fact of knowledge_base/facts.yaml"}
    defs["FactTest"]["minProperties"] = 2  # a fact and at least one operator
    defs["KnowledgeValue"]["properties"]["kb"] = {**_enum(knowledge_value_names(kb)),
                                                  "description": "a band of knowledge_base/scorecard.yaml"}
    defs["Then"]["properties"]["measure"]["items"] = _enum(facts)
    defs["RecommendSpec"]["properties"]["id"] = _enum(optimizations)
    defs["WasteSpec"]["properties"]["id"] = _enum(optimizations)
    defs["WastedEntry"]["properties"]["id"] = _enum(optimizations)
    defs["RegimeTable"]["properties"]["effective"]["items"] = _enum(optimizations)
    defs["RegimeTable"]["properties"]["regime"] = _enum(regimes)
    defs["BottleneckVote"]["properties"]["regime"] = _enum(regimes)


def _refine_report(schema: JsonSchema, kb: KnowledgeBase) -> None:
    terms = schema["$defs"]["IronLawTerm"]["properties"]
    terms["term"] = {"enum": [*kb.regimes.iron_law_terms(), UNEXPLAINED_TERM], **terms["term"]}


def _refine_tests(schema: JsonSchema, kb: KnowledgeBase) -> None:
    schema["$defs"]["RuleTestCase"]["properties"]["facts"] = _facts_object(kb)


def _refine_observations(schema: JsonSchema, kb: KnowledgeBase) -> None:
    facts = _facts_object(kb, provenance=True)
    schema["properties"]["observations"] = facts
    structured = {key: schema.pop(key) for key in ("properties", "required", "additionalProperties", "type")
                  if key in schema}
    schema["anyOf"] = [structured, {**facts, "description": "a flat mapping of fact: value"}]


SCHEMAS: dict[str, SchemaSpec] = {
    "rules": SchemaSpec(RuleFile, "A rule file (rules/*.yaml): named conditions, rules and regime tables.",
                        refine=_refine_rules),
    "rule-tests": SchemaSpec(RuleTestFile, "A rule-test file (rules/tests/*.test.yaml): cases with facts and the "
                             "conclusions expected present or absent.", refine=_refine_tests),
    "lint-waivers": SchemaSpec(WaiverFile, "Lint waivers (rules/lint_waivers.yaml): subject -> lint id -> reason."),
    "observations": SchemaSpec(ObservationFile, "An observation file for `dam diagnose FILE`: {description, "
                               "observations} or a flat mapping of fact: value.", refine=_refine_observations),
    "report": SchemaSpec(Report, "A diagnosis report, as `dam diagnose --format json` writes it.",
                         mode="serialization", refine=_refine_report),
    "facts": SchemaSpec(FactCatalog, "knowledge_base/facts.yaml: the fact vocabulary."),
    "hardware": SchemaSpec(HardwareCatalog, "knowledge_base/hardware.yaml: accelerators with dense peaks."),
    "optimizations": SchemaSpec(OptimizationCatalog, "knowledge_base/optimizations.yaml: the optimization catalog."),
    "tools": SchemaSpec(ToolMap, "knowledge_base/tools.yaml: profilers and how each fact is measured."),
    "scorecard": SchemaSpec(Scorecard, "knowledge_base/scorecard.yaml: the seed's Table 5 metrics and bands."),
    "regimes": SchemaSpec(RegimeCatalog, "knowledge_base/regimes.yaml: bottleneck regimes, strengths, precedence."),
    "units": SchemaSpec(UnitTable, "knowledge_base/units.yaml: accepted units per dimension."),
}
SCHEMAS["memory"] = SchemaSpec(_knowledge.MemoryModel, "knowledge_base/memory.yaml: model-state bytes per parameter "
                               "and the activation coefficient of the memory-capacity derivations.")
SCHEMAS["kernels"] = SchemaSpec(_knowledge.KernelCatalog, "knowledge_base/kernels.yaml: kernel classes, host call "
                                "roles and trace-analysis thresholds.")
_interconnects = getattr(_knowledge, "InterconnectCatalog", None)
if _interconnects is not None:  # the catalog of GPU-to-GPU links, where this version of the library has one
    SCHEMAS["interconnects"] = SchemaSpec(_interconnects, "knowledge_base/interconnects.yaml: GPU-to-GPU links.")


def schema_for(name: str, kb: KnowledgeBase) -> JsonSchema:
    """The JSON Schema of one file format (see SCHEMAS for the names)."""
    spec = SCHEMAS[name]
    schema = spec.model.model_json_schema(mode=spec.mode)
    if spec.refine is not None:
        spec.refine(schema, kb)
    return {"$schema": DIALECT, "title": f"dam-expert {name}", "description": spec.description,
            **{k: v for k, v in schema.items() if k not in ("title", "description")}}


def render(schema: JsonSchema) -> str:
    """Stable JSON text of a schema (what schemas/*.json hold)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def file_name(name: str) -> str:
    return f"{name}.schema.json"


def write_all(directory: Path, kb: KnowledgeBase) -> list[Path]:
    """Write every schema to directory/<name>.schema.json; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in SCHEMAS:
        path = directory / file_name(name)
        path.write_text(render(schema_for(name, kb)), encoding="utf-8")
        written.append(path)
    return written
