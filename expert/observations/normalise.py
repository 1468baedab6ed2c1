"""Observations: what a user or a telemetry parser saw, validated against the fact vocabulary."""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, model_validator

from .._bare import bare_model
from ..errors import ObservationError, Problem
from ..kb.knowledge import FactSpec, KnowledgeBase

Scalar = Union[StrictInt, StrictFloat, StrictStr]  # noqa: UP007 - a runtime alias pydantic reads on Python 3.10
Value = Union[int, float, str]  # noqa: UP007

_NUMBER_WITH_UNIT = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$", re.ASCII)
_THOUSANDS = re.compile(r"^\s*[-+]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][-+]?\d+)?(?:\s*\D.*)?$", re.ASCII)
_UNKNOWN_WORDS = frozenset({"unknown", "skip", "?", "n/a", "na", ""})
_TEXT_MAX = 300  # text facts are quoted in messages: a few names, not a document


class Observation(BaseModel):
    """One observed value and where it came from."""

    # defer_build: built on first validation; `normalise` builds checked instances without validating, so a command
    # that only diagnoses never builds a validator (the first one imports pydantic's plugin loader, ~10 ms)
    model_config = ConfigDict(extra="forbid", defer_build=True)

    value: Scalar
    source: str = "user"
    detail: dict[str, Scalar] = Field(default_factory=dict)


class RankFigures(BaseModel):
    """One rank of a multi-GPU job as its profiler trace shows it (expert/ingest/ranks.py): per step, in seconds, and
    shares of the step. `sync_wait_s` is the time it waits inside collectives for the slowest rank."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    rank: int
    file: str
    step_time_s: float | None = None
    compute_s: float | None = None
    comm_s: float | None = None
    exposed_comm_frac: float | None = None
    idle_frac: float | None = None
    sync_wait_s: float | None = None
    comm_overlap_frac: float | None = None  # Holistic Trace Analysis's communication/computation overlap
    steps: int | None = None
    idle_causes: dict[str, float] = Field(default_factory=dict)  # share of the step per cause of GPU idle time


class Observations(BaseModel):
    """A set of observations keyed by fact name. Accepts a flat mapping: ``Observations({"gpu_util": 0.62})``.

    `ranks`, when the observations come from the traces of a multi-GPU job, holds each rank's figures."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    facts: dict[str, Observation] = Field(default_factory=dict)
    ranks: list[RankFigures] = Field(default_factory=list)

    def __init__(self, data: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        if data is not None:
            kwargs = {**_as_fields(data), **kwargs}
        super().__init__(**kwargs)

    @model_validator(mode="before")
    @classmethod
    def _flat_mapping(cls, data: Any) -> Any:
        return _as_fields(data) if isinstance(data, Mapping) else data

    def values(self) -> dict[str, Value]:
        """The plain fact -> value mapping."""
        return {name: obs.value for name, obs in self.facts.items()}

    def merged(self, other: Observations) -> Observations:
        """A new set with `other`'s observations overriding these."""
        return Observations(facts={**self.facts, **other.facts}, ranks=other.ranks or self.ranks)

    def __len__(self) -> int:
        return len(self.facts)

    def __contains__(self, name: object) -> bool:
        return name in self.facts


def _as_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """Turn a flat {fact: value} mapping (or {fact: {value, source}}) into the model's fields."""
    if "facts" in data and set(data) <= {"facts", "ranks"} and isinstance(data.get("facts"), Mapping):
        return dict(data)
    facts: dict[str, Any] = {}
    for name, raw in data.items():
        if isinstance(raw, Observation):
            facts[str(name)] = raw
        elif isinstance(raw, Mapping) and "value" in raw:
            facts[str(name)] = dict(raw)
        else:
            facts[str(name)] = {"value": raw}
    return {"facts": facts}


def _close_matches(word: str, possibilities: list[str], n: int, cutoff: float) -> list[str]:
    """`difflib.get_close_matches`, imported only for a message (a valid input never needs it)."""
    import difflib

    return difflib.get_close_matches(word, possibilities, n=n, cutoff=cutoff)


def is_unknown(raw: object) -> bool:
    """True for the words that mean "I don't know" ("unknown", "skip", "n/a", "?")."""
    return isinstance(raw, str) and raw.strip().casefold() in _UNKNOWN_WORDS


def _number(raw: object, spec: FactSpec, kb: KnowledgeBase) -> float:
    """Parse a number, a percentage (fractions) or a number with a unit of the fact's dimension."""
    if isinstance(raw, bool):
        raise ValueError("a true/false value is not a number")
    if isinstance(raw, (int, float)):
        try:
            value = float(raw)
        except OverflowError:  # an integer of hundreds of digits
            raise ValueError(f"a {len(str(abs(raw)))}-digit number is not a measurement") from None
    elif isinstance(raw, str):
        text = raw
        if "," in raw:
            if not _THOUSANDS.match(raw):  # "0,3" is a decimal comma, "1,2" ambiguous: never guess
                raise ValueError(f"{raw!r} is not a number; write decimals with a point (0.3), and group thousands "
                                 "in threes (1,000,000) or not at all")
            text = raw.replace(",", "")
        match = _NUMBER_WITH_UNIT.match(text)
        if not match:
            raise ValueError(f"{raw!r} is not a number")
        digits, unit = match.group(1), match.group(2)
        if unit == "%":  # exactly: "95%" is 0.95, not 95 * 0.01 = 0.9500000000000001
            _unit_factor(unit, spec, kb)
            value = float(Decimal(digits) / 100)
        else:
            value = float(digits)
            if unit:
                value *= _unit_factor(unit, spec, kb)
    else:
        raise ValueError(f"expected a number, got {type(raw).__name__}")
    if math.isnan(value) or math.isinf(value):
        given = raw.strip() if isinstance(raw, str) else raw
        named = isinstance(given, str) and given.lstrip("+-").lower().rstrip("%") in ("nan", "inf", "infinity", ".nan",
                                                                                     ".inf")
        if named or (isinstance(raw, float) and not isinstance(given, str)):
            raise ValueError("NaN and infinity are not measurements")
        digits = len(re.sub(r"\D", "", str(given).split("e")[0].split("E")[0]))
        size = f"a {digits}-digit number" if digits > 20 else f"{given!r}"
        raise ValueError(f"{size} is too large to be a measurement (it overflows a 64-bit float, whose largest "
                         f"value is about 1.8e308)")
    return value


def _unit_factor(unit: str, spec: FactSpec, kb: KnowledgeBase) -> float:
    if unit == "%":
        if spec.type != "fraction":
            raise ValueError("a percentage is only accepted for fractions")
        return 0.01
    if spec.dimension is None:
        expected = "a percentage such as 62%" if spec.type == "fraction" else "a plain number"
        raise ValueError(f"unit {unit!r} is not accepted here; give {expected}")
    dim = kb.units.dimensions[spec.dimension]
    table = dim.units
    # the fact's own unit word after a magnitude, as people write sizes: "70B params", "7e9 params"
    named = spec.unit
    folded_unit = unit.casefold()
    if unit not in table and named and (folded_unit == named.casefold()
                                        or folded_unit.endswith(f" {named}".casefold())):
        magnitude = unit[:-len(named)].strip()
        if not magnitude and "" in table:  # "7e9 params": the number in the fact's own unit
            return table[""] / table.get(named, table.get(dim.base, 1.0))
        if magnitude.casefold() in {name.casefold() for name in table if name}:
            return _unit_factor(magnitude, spec, kb)
    if unit in table:
        factor = table[unit]
    else:
        # any case of a listed unit: "gb" is GB, "ms" is ms. For counts this is what people write for model sizes
        # ("7b", "70m", "1.5k"): a count has no milli or bit, so a lowercase k/m/b/g/t can only be the magnitude.
        # Only where the folded spellings agree: a table listing two units that differ only in case, with different
        # factors, takes neither folded.
        folded: dict[str, float] = {}
        clashes: set[str] = set()
        for name, value in table.items():
            if name:
                key = name.casefold()
                if key in folded and folded[key] != value:
                    clashes.add(key)
                folded[key] = value
        if unit.casefold() not in folded or unit.casefold() in clashes:
            raise ValueError(f"unknown unit {unit!r}; accepted: {', '.join(k for k in table if k) or 'none'}")
        listed = next(name for name in table if name.casefold() == unit.casefold())
        if spec.dimension != "count" and _bits_for_bytes(unit, listed):
            raise ValueError(f"{unit!r} reads as bits (a lowercase b after an upper-case letter, as a 400 Gb/s "
                             f"link is written); bytes are B: write {listed} (1 byte = 8 bits)")
        factor = folded[unit.casefold()]
    base = table.get(spec.unit or dim.base, 1.0)  # canonical unit may differ from the dimension's base
    return factor / base


def _bits_for_bytes(given: str, listed: str) -> bool:
    """True when `given` is a unit of bits where `listed` is the same unit of bytes: "Gb/s" for "GB/s", "Mb" for
    "MB" (a lowercase b where the unit has B, in a unit that spells another letter upper-case, as networking writes
    bits). An all-lowercase "gb" is left to mean the bytes it is usually typed for."""
    if not any(c.isupper() for c in given):
        return False
    return any(g == "b" and u == "B" for g, u in zip(given, listed, strict=False))


NO_OPTIMIZATIONS = "none"  # an `optimizations` fact's answer when the job uses none of them


def _optimization_ids(raw: object, kb: KnowledgeBase) -> str:
    """A list of optimization catalog ids ("cuda_graphs, lower_precision" or a YAML/JSON list), checked against
    knowledge_base/optimizations.yaml and stored once each, in catalog order, comma-separated; or "none"."""
    if isinstance(raw, str):
        items = [part for part in re.split(r"[,\s]+", raw) if part]
    elif isinstance(raw, (list, tuple)) and all(isinstance(part, str) for part in raw):
        items = [part.strip() for part in raw if part.strip()]
    else:
        raise ValueError("expected optimization ids, comma-separated or as a list of strings")
    if not items:
        raise ValueError("expected at least one optimization id, or none")
    if NO_OPTIMIZATIONS in (folded := [item.casefold() for item in items]):
        if folded != [NO_OPTIMIZATIONS]:
            raise ValueError(f"'none' means no optimization: give it alone, or only ids ({', '.join(items)})")
        return NO_OPTIMIZATIONS
    unknown = [item for item in items if item.casefold() not in kb.optimizations]
    if unknown:
        hints = []
        for item in unknown:
            close = _close_matches(item.casefold(), list(kb.optimizations), n=1, cutoff=0.6)
            hints.append(f"{item!r}" + (f" (did you mean {close[0]}?)" if close else ""))
        raise ValueError(f"unknown optimization {', '.join(hints)}; known: {', '.join(kb.optimizations)}")
    given = {item.casefold() for item in items}
    return ", ".join(opt for opt in kb.optimizations if opt in given)


def applied_optimizations(value: object) -> list[str]:
    """The ids held by an `optimizations` fact value (as `convert` stored it); [] for no value and for none."""
    if not isinstance(value, str) or value == NO_OPTIMIZATIONS:
        return []
    return [part for part in re.split(r"[,\s]+", value) if part]


_BOOLEAN_WORDS = {"true": True, "false": False, "on": True, "off": False, "y": True, "n": False}


def accepted_hint(spec: FactSpec, message: str) -> str:
    """The hint for a value `convert` refused: what the fact accepts, unless the message already says it."""
    accepted = spec.range_text()
    return "" if accepted in message else f"accepted: {accepted}"


def convert(spec: FactSpec, raw: object, kb: KnowledgeBase) -> Value:
    """Convert one raw value to the fact's canonical type and unit; raises ValueError with the reason."""
    if spec.type == "hardware":
        if not isinstance(raw, str):
            raise ValueError("expected a hardware id such as h100-sxm")
        resolved = kb.resolve_hardware(raw)
        if resolved is None:
            close = kb.close_hardware(raw)
            hint = f"did you mean {', '.join(close)}?" if close else "see `dam hardware list`"
            raise ValueError(f"unknown hardware {raw!r}; {hint}")
        return resolved
    if spec.type == "text":
        if not isinstance(raw, str) or not raw.strip():
            raise ValueError("expected a non-empty text")
        return raw.strip()[:_TEXT_MAX]
    if spec.type == "optimizations":
        return _optimization_ids(raw, kb)
    if spec.type == "enum":
        choices = spec.choices or []
        if isinstance(raw, bool) or (isinstance(raw, str) and raw.strip().casefold() in _BOOLEAN_WORDS):
            # YAML reads a bare yes/no/true/false as a boolean: a yes/no fact takes either spelling
            answer = raw if isinstance(raw, bool) else _BOOLEAN_WORDS[raw.strip().casefold()]
            if set(choices) == {"yes", "no"}:
                return "yes" if answer else "no"
        word = raw.strip().casefold() if isinstance(raw, str) else None
        if word is not None and word in spec.aliases:  # another spelling of a choice (torch.bfloat16, nvme)
            return spec.aliases[word]
        if word is None or word not in choices:
            raise ValueError(f"{raw!r} is not one of the accepted values")  # the hint lists them
        return word
    value = _number(raw, spec, kb)
    if spec.type == "fraction":
        if value > 1.0 and not (isinstance(raw, str) and raw.strip().endswith("%")):
            hint = f" (did you mean {value:g}%?)" if value <= 100 else ""
            raise ValueError(f"{value:g} is above 1; a fraction is in [0, 1]{hint}")
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{value:g} is outside [0, 1]")
        return value
    if spec.type == "integer":
        if value != int(value):
            raise ValueError(f"{value:g} is not a whole number")
        result: Value = int(value)
    else:
        result = value
    low, high = spec.min, spec.max
    if low is not None and (value < low or (spec.exclusive_min and value == low)):
        raise ValueError(f"{value:g} is out of range; expected {spec.range_text()}")
    if high is not None and value > high:
        raise ValueError(f"{value:g} is out of range; expected {spec.range_text()}")
    return result


def _raw_items(raw: Mapping[str, Any] | Observations) -> list[tuple[str, object, str, dict[str, Any]]]:
    """(name, raw value, source, detail) for every entry, without forcing values into a type yet. Reads the shapes
    `_as_fields` accepts straight into the tuples (a later entry whose name is the same string wins, in the first one's
    place), without building the model's field dicts first."""
    if isinstance(raw, Observations):
        return [(name, o.value, o.source, dict(o.detail)) for name, o in raw.facts.items()]
    if not isinstance(raw, Mapping):
        raise ObservationError([Problem("observations",
                                        f"expected a mapping of fact -> value, got {type(raw).__name__}")])
    items: dict[str, tuple[str, object, str, dict[str, Any]]] = {}
    if "facts" in raw and set(raw) <= {"facts", "ranks"} and isinstance(raw.get("facts"), Mapping):
        for name, entry in raw["facts"].items():
            items[name] = _entry(name, entry)
        return list(items.values())
    for key, value in raw.items():
        name = key if type(key) is str else str(key)
        kind = type(value)
        if kind is float or kind is int or kind is str:  # a plain value: no ABC check of Mapping
            items[name] = (name, value, "user", {})
        elif isinstance(value, Observation):
            items[name] = (name, value.value, value.source, dict(value.detail))
        elif isinstance(value, Mapping) and "value" in value:
            items[name] = _entry(name, value)
        else:
            items[name] = (name, value, "user", {})
    return list(items.values())


def _entry(name: str, entry: Any) -> tuple[str, object, str, dict[str, Any]]:
    """One entry of the model's `facts` field: an Observation or a {value, source, detail} mapping."""
    if isinstance(entry, Observation):
        return (name, entry.value, entry.source, dict(entry.detail))
    detail = entry.get("detail", {})
    detail = detail if isinstance(detail, dict) else {}
    return (name, entry.get("value"), str(entry.get("source", "user")), detail)


_OBSERVATION_FIELDS = ("value", "source", "detail")


def _observation(value: Value, source: str, detail: dict[str, Any]) -> Observation:
    """`Observation.model_construct(value=..., source=..., detail=...)` for a checked value, without its generic
    per-field loop: the same instance state (fields in declaration order, all three marked as set)."""
    return bare_model(Observation, {"value": value, "source": source, "detail": detail}, set(_OBSERVATION_FIELDS))



def _hardware_choice(kb: KnowledgeBase, raw: str) -> dict[str, str]:
    """Provenance detail for a family name resolved to its default variant: what was given and the note saying so."""
    found = kb.hardware_resolution(raw)
    if found is None or found.note is None:
        return {}
    return {"resolved_from": raw.strip(), "note": found.note}


# Plain values that `convert` would accept unchanged, checked inline (the common case: a number for a number, an
# enum's own spelling): fact -> (kind, lowest, highest, lowest excluded, enum choices). Kinds: 0 a fraction, 1 a
# number, 2 an integer, 3 an enum. Anything else, or anything these checks refuse, takes `convert`'s path, which
# gives the same value or the error.
_Quick = tuple[int, float | None, float | None, bool, frozenset[str]]
_QUICK: weakref.WeakKeyDictionary[KnowledgeBase, dict[str, _Quick]] = weakref.WeakKeyDictionary()
_QUICK_KINDS = {"fraction": 0, "number": 1, "integer": 2, "enum": 3}


def _quick_checks(kb: KnowledgeBase) -> dict[str, _Quick]:
    found = _QUICK.get(kb)
    if found is None:
        found = {}
        for name, spec in kb.facts.items():
            kind = _QUICK_KINDS.get(spec.type)
            choices = frozenset(spec.choices or ())
            if spec.kind == "derived" or kind is None or (kind == 3 and not choices.isdisjoint(_UNKNOWN_WORDS)):
                continue
            found[name] = (kind, spec.min, spec.max, spec.exclusive_min, choices)
        _QUICK[kb] = found  # built twice by two threads at once: the same table
    return found


_SLOW = object()  # `_quick_value`: the value needs `convert`


def _quick_value(quick: _Quick, raw: object) -> object:
    """The value `convert` gives for `raw` when it is a plain in-range number or an enum's own spelling; else _SLOW."""
    kind, low, high, exclusive_min, choices = quick
    if kind == 3:
        return raw if type(raw) is str and raw in choices else _SLOW
    if type(raw) is not float and type(raw) is not int:
        return _SLOW
    try:
        value = float(raw)
    except OverflowError:
        return _SLOW
    if kind == 0:
        return value if 0.0 <= value <= 1.0 else _SLOW
    if value - value != 0.0:  # NaN or infinity
        return _SLOW
    if low is not None and (value < low or (exclusive_min and value == low)):
        return _SLOW
    if high is not None and value > high:
        return _SLOW
    if kind == 2:
        return int(value) if value == int(value) else _SLOW
    return value


def _scalar_detail(detail: dict[str, Any]) -> dict[str, Any]:
    """The entries of an observation's detail that are numbers or text (what `Observation.detail` holds)."""
    return {k: v for k, v in detail.items()
            if isinstance(v, (int, float, str)) and not isinstance(v, bool)} if detail else {}


def normalise(kb: KnowledgeBase, raw: Mapping[str, Any] | Observations, *,
              given_instead: Callable[[str], str] | None = None) -> Observations:
    """Validate observations against the vocabulary; collect every problem before raising ObservationError.

    Values equal to "unknown"/"skip" are dropped (they mean "not observed"). `given_instead` says what to give in
    place of a derived fact (the derivations' inputs: `DerivationGraph.given_instead`).
    """
    problems: list[Problem] = []
    clean: dict[str, Observation] = {}
    quick_checks = _quick_checks(kb)
    for name, value_in, source, detail in _raw_items(raw):
        quick = quick_checks.get(name)
        if quick is not None and (value := _quick_value(quick, value_in)) is not _SLOW:
            clean[name] = _observation(value, source, _scalar_detail(detail))  # type: ignore[arg-type]  # a Value
            continue
        spec = kb.facts.get(name)
        if spec is None:
            close = _close_matches(name, list(kb.facts), n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(close)}?" if close else "see knowledge_base/facts.yaml for the vocabulary"
            problems.append(Problem(name, "unknown fact", hint))
            continue
        if spec.kind == "derived":
            problems.append(Problem(name, "is derived by the expert and cannot be given",
                                    given_instead(name) if given_instead else "give its inputs instead"))
            continue
        if value_in is None or is_unknown(value_in):
            continue
        try:
            value = convert(spec, value_in, kb)
        except ValueError as exc:
            problems.append(Problem(name, str(exc), accepted_hint(spec, str(exc))))
            continue
        clean_detail = _scalar_detail(detail)
        if spec.type == "hardware" and isinstance(value_in, str):
            clean_detail.update(_hardware_choice(kb, value_in))
        # value and detail were just checked and converted above, so the model is built without validating again
        clean[name] = _observation(value, source, clean_detail)
    if "applied_optimizations" in clean:
        _implied_by_applied(kb, clean, problems)
    if problems:
        raise ObservationError(problems, title="some observations are not valid")
    ranks = list(raw.ranks) if isinstance(raw, Observations) else []
    # as Observations.model_construct(facts=clean, ranks=ranks) builds it
    return bare_model(Observations, {"facts": clean, "ranks": ranks}, {"facts", "ranks"})


def _implications(kb: KnowledgeBase, applied: object) -> list[tuple[str, str, str]]:
    """(fact, value, optimization) for every fact the applied optimizations settle (optimizations.yaml `implies`:
    activation checkpointing means the step recomputes activations)."""
    return [(name, value, opt_id) for opt_id in applied_optimizations(applied)
            for name, value in kb.optimizations[opt_id].implies.items()]


def _contradiction(name: str, given: object, value: str, opt_id: str) -> Problem:
    return Problem(name, f"{given!r} contradicts applied_optimizations, which names {opt_id} ({name} {value!r})",
                   f"correct one of the two: {name}, or {opt_id} in applied_optimizations")


def check_implications(kb: KnowledgeBase, values: Mapping[str, object]) -> None:
    """Raise ObservationError where a given value contradicts what the applied optimizations imply (a consultation's
    answers are checked as they come, as `normalise` checks observations)."""
    problems = [_contradiction(name, given, value, opt_id)
                for name, value, opt_id in _implications(kb, values.get("applied_optimizations"))
                if (given := values.get(name)) is not None and given != value]
    if problems:
        raise ObservationError(problems, title="the observations contradict each other")


def _implied_by_applied(kb: KnowledgeBase, clean: dict[str, Observation], problems: list[Problem]) -> None:
    """The facts the applied optimizations settle, added where not given; a given value that says otherwise is a
    problem."""
    applied = clean["applied_optimizations"]
    for name, value, opt_id in _implications(kb, applied.value):
        given = clean.get(name)
        if given is None:
            clean[name] = _observation(value, applied.source, {"implied_by": f"applied_optimizations names {opt_id}"})
        elif given.value != value:
            problems.append(_contradiction(name, given.value, value, opt_id))


def format_value(spec: FactSpec | None, value: object) -> str:
    """A canonical value as a person reads it: "62%", "0.12 s", "7e+09 params", "h100-sxm"."""
    if isinstance(value, float) and spec is not None and spec.type == "fraction":
        pct = value * 100
        return f"{pct:.0f}%" if abs(pct - round(pct)) < 1e-9 else f"{pct:.3g}%"
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    if spec is not None and spec.unit and spec.type == "number" and not isinstance(value, str):
        return f"{text} {spec.unit}" if spec.unit not in ("ratio",) else text
    return text
