"""JSON Schemas of the tools: the argument and result models' own schemas, refined with the fact vocabulary.

The same refinements `dam schema` publishes (expert/schemas.py) are applied: observation mappings list every
observable fact with its description and accepted values, reports are the `report` schema, sessions the saved
consultation's. Sub-schemas are merged into one `$defs` per tool, so each tool's schema is self-contained.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from ..consult.session import AVAILABLE_TOOLS, SessionFile
from ..ingest import FORMATS
from ..kb.knowledge import KnowledgeBase
from ..observations.normalise import Observation
from ..report.model import Report
from ..schemas import schema_for

JsonSchema = dict[str, Any]
_NULL = {"type": "null"}


def merge_defs(into: JsonSchema, schema: JsonSchema) -> JsonSchema:
    """`schema` without its `$defs`, which move into `into`; a name defined twice must mean the same thing."""
    schema = copy.deepcopy(schema)
    for name, definition in schema.pop("$defs", {}).items():
        if name in into and into[name] != definition:
            raise ValueError(f"two different JSON Schema definitions named {name!r}")
        into[name] = definition
    return schema


def facts_input(kb: KnowledgeBase, defs: JsonSchema) -> JsonSchema:
    """fact -> value for every observable fact (as `dam schema observations`), or -> {value, source, detail}."""
    flat = schema_for("observations", kb)["anyOf"][1]
    merge_defs(defs, {"$defs": {"Observation": Observation.model_json_schema()}})
    properties: JsonSchema = {}
    for name, value in flat["properties"].items():
        described = {k: v for k, v in value.items() if k != "description"}
        properties[name] = {"description": value.get("description", ""),
                            "anyOf": [described, {"$ref": "#/$defs/Observation"}]}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def any_fact_input(kb: KnowledgeBase) -> JsonSchema:
    """fact -> new value for any fact, observed or derived (what-if changes)."""
    return {"type": "object", "propertyNames": {"enum": sorted(kb.facts)},
            "additionalProperties": {"type": ["number", "string"]}}


def facts_names_input(kb: KnowledgeBase, defs: JsonSchema) -> JsonSchema:
    """Observable fact -> value or {value, source, detail}, by name only (the descriptions are in diagnose's
    schema and the resource dam://facts), for the tools where observations are a secondary input."""
    merge_defs(defs, {"$defs": {"Observation": Observation.model_json_schema()}})
    names = sorted(name for name, spec in kb.facts.items() if spec.askable)
    return {"type": "object", "propertyNames": {"enum": names},
            "additionalProperties": {"anyOf": [{"type": ["number", "string"]}, {"$ref": "#/$defs/Observation"}]}}


def report_input(defs: JsonSchema) -> JsonSchema:
    """A report as diagnose returned it: whole, or its text copy without OMITTED (then diagnosed again from its
    observations, so those parts need not be sent back)."""
    from .summary import OMITTED

    schema = merge_defs(defs, Report.model_json_schema(mode="validation"))
    schema["required"] = [name for name in schema.get("required", []) if name not in OMITTED]
    return schema


def session_input(defs: JsonSchema) -> JsonSchema:
    """The saved consultation (`Consultation.to_json`), as an object or as its JSON text."""
    defs["SessionFile"] = merge_defs(defs, SessionFile.model_json_schema(mode="validation"))
    return {"anyOf": [{"$ref": "#/$defs/SessionFile"},
                      {"type": "string", "description": "the same session, as JSON text"}]}


def answerable(kb: KnowledgeBase) -> list[str]:
    """What `answer` accepts as `fact`: askable facts, combined question ids and the tools question."""
    return sorted([name for name, spec in kb.facts.items() if spec.askable] + list(kb.questions) + [AVAILABLE_TOOLS])


def _nullable(old: JsonSchema) -> bool:
    return any(option == _NULL for option in old.get("anyOf", []))


def args_schema(model: type[BaseModel], refine: Mapping[tuple[str, ...], Any]) -> JsonSchema:
    """The model's validation schema with some properties replaced.

    `refine` maps a path (property, or definition then property) to a function of the shared `$defs` returning the
    replacement; the property keeps its description and default, and stays nullable where it was.
    """
    schema = model.model_json_schema(mode="validation")
    defs: JsonSchema = schema.pop("$defs", {})
    for path, make in refine.items():
        holder = schema if len(path) == 1 else defs[path[0]]
        name = path[-1]
        old = holder["properties"][name]
        new = make(defs)
        if _nullable(old):
            new = {"anyOf": [*new["anyOf"], _NULL]} if set(new) == {"anyOf"} else {"anyOf": [new, _NULL]}
        kept = {k: old[k] for k in ("description", "default") if k in old}
        holder["properties"][name] = {**{k: v for k, v in new.items() if k not in kept}, **kept}
    schema.pop("title", None)
    if defs:
        schema["$defs"] = defs
    return schema


def result_schema(model: type[BaseModel]) -> JsonSchema:
    schema = model.model_json_schema(mode="serialization")
    schema.pop("title", None)
    return schema


def report_result(kb: KnowledgeBase) -> JsonSchema:
    """The `report` schema `dam schema report` publishes."""
    return schema_for("report", kb)


def format_enum() -> JsonSchema:
    return {"type": "string", "enum": ["auto", *FORMATS]}
