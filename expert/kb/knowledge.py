"""The knowledge base: fact vocabulary, hardware, optimizations, tools, scorecard, regimes and units (all YAML data)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .._yaml import load_yaml, validate
from ..errors import KnowledgeBaseError, Problem

# Vocabulary names whose values are knowledge-base data, checked when the knowledge base loads: axes
# (regimes.yaml `axes`), iron-law and C³ terms (regimes.yaml `terms`), numeric formats (units.yaml `dtypes`).
Axis = str
Term = str
Dtype = str


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FactSpec(_Strict):
    """One fact of the observation vocabulary."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    kind: Literal["observed", "derived", "both"]
    type: Literal["fraction", "number", "integer", "enum", "hardware", "text"]
    unit: str | None = None
    dimension: str | None = None
    min: float | None = None
    max: float | None = None
    exclusive_min: bool = False
    choices: list[str] | None = None
    description: str
    question: str | None = None
    example: str | None = None
    ask_first: bool = False
    cost: int = Field(default=3, ge=1, le=5)
    measure: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> FactSpec:
        if self.type == "enum" and not self.choices:
            raise ValueError("an enum fact needs `choices`")
        if self.kind != "derived" and not self.question:
            raise ValueError("an observable fact needs a `question`")
        return self

    @property
    def askable(self) -> bool:
        return self.kind in ("observed", "both")

    def range_text(self) -> str:
        """Human description of the accepted values."""
        if self.type == "fraction":
            return "a fraction in [0, 1], or a percentage such as 62%"
        if self.type in ("enum",):
            return "one of " + ", ".join(self.choices or [])
        if self.type == "hardware":
            return "a hardware catalog id (dam hardware list) or a device name"
        if self.type == "text":
            return "a short text (quoted in messages, never compared)"
        lo = "-inf" if self.min is None else f"{self.min:g}"
        hi = "inf" if self.max is None else f"{self.max:g}"
        bracket = "(" if self.exclusive_min else "["
        unit = f" {self.unit}" if self.unit else ""
        kind = "an integer" if self.type == "integer" else "a number"
        return f"{kind} in {bracket}{lo}, {hi}]{unit}"


class QuestionChoice(_Strict):
    """One answer to a combined question: a short label and the member facts it sets (the rest become unknown)."""

    answer: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    help: str
    sets: dict[str, str]


class CombinedQuestion(_Strict):
    """Several facts asked in one question, as an expert asks them in one breath ("which GPU, in which precision?").

    The consultation asks it instead of a member fact it chose when every member is open and another one is worth
    asking too.
    An answer is one of `choices` (when given) or the member values in order ("h100-sxm bf16"); a member left out is
    recorded as unknown."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    facts: list[str] = Field(min_length=2)
    question: str
    example: str
    choices: list[QuestionChoice] | None = None


class FactCatalog(_Strict):
    schema_version: int = 1
    facts: list[FactSpec]
    questions: list[CombinedQuestion] = []


class HardwareSpec(_Strict):
    """One accelerator: dense peaks per dtype, memory bandwidth, links, source.

    A dtype left out of `peak_tflops` is a format the part lacks; a null peak (or memory figure) is one its vendor
    does not publish."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str
    vendor: str
    peak_tflops: dict[Dtype, float | None]
    sparse_headline: bool
    memory_gb: float | None = Field(gt=0)
    memory_type: str | None
    memory_bandwidth_gbs: float | None = Field(gt=0)
    host_link: str | None = None
    host_link_gbs: float | None = None
    scale_up_link: str | None = None
    scale_up_gbs: float | None = None
    source: str
    notes: str | None = None
    aliases: list[str] = Field(default_factory=list)

    def peak(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s for a dtype, or None when the part has no published figure for it."""
        return self.peak_tflops.get(dtype)


class HardwareFamily(_Strict):
    """A bare family name ("h100") and the catalog variant it resolves to; the report says which was picked."""

    default: str
    variants: list[str] = []  # the other variants, named in the note ("say --set hardware=h100-pcie if not")
    why: str = "the most common variant"


class HardwareCatalog(_Strict):
    schema_version: int = 1
    hardware: list[HardwareSpec]
    families: dict[str, HardwareFamily] = {}
    name_prefixes: list[str] = []  # leading vendor words a device name may carry ("NVIDIA", "Tesla", "AMD Instinct")


@dataclass(frozen=True)
class HardwareResolution:
    """How a hardware name mapped to a catalog id: through an id or alias, or through a family's default."""

    id: str
    family: str | None = None  # the family name the input named, when the id is that family's default
    note: str | None = None  # "h100 -> h100-sxm (the most common variant; say --set hardware=h100-pcie if not)"


_NAME_WORDS = re.compile(r"[^0-9a-z]+")


def hardware_key(name: str, prefixes: Iterable[str] = ()) -> str:
    """The form names are matched in: case-folded, separators dropped, leading vendor words (`prefixes`) removed.

    >>> hardware_key("NVIDIA H100-SXM 80GB", ["nvidia"])
    'h100sxm80gb'
    """
    words = [w for w in _NAME_WORDS.split(name.casefold()) if w]
    drop = set(prefixes)
    while len(words) > 1 and words[0] in drop:
        words.pop(0)
    return "".join(words)


class InterconnectSpec(_Strict):
    """One GPU-to-GPU link (C³ communication term): per-direction bandwidth per GPU, with its source."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    kind: str  # a choice of the `interconnect` fact
    name: str
    per_direction_gbs: float = Field(gt=0)
    default: bool = False
    source: str
    notes: str | None = None


class InterconnectCatalog(_Strict):
    schema_version: int = 1
    interconnects: list[InterconnectSpec] = []


class Optimization(_Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str
    axis: Axis
    shrinks: Term
    how: str
    source: str


class OptimizationCatalog(_Strict):
    schema_version: int = 1
    optimizations: list[Optimization]


class Tool(_Strict):
    name: str
    url: str


class AxisTools(_Strict):
    key_metric: str
    primary: str
    secondary: list[str]
    source: str


class Measurement(_Strict):
    tool: str
    axis: Axis
    how: str


class ToolsQuestion(_Strict):
    """Wording of the consultation's `available_tools` question. `why` may use {questions} and {tools} (counts),
    `goal_answered` {answer}. The defaults keep older knowledge-base copies loading."""

    question: str = "Which of these can you run or look up?"
    after: list[str] = []  # facts settled before it is asked (answered, unknown, or no longer worth asking)
    why: str = ("it skips the measurements you cannot make: {questions} questions that can still change the answer "
                "need one of these {tools} tools, and a tool you cannot run closes its questions at once")
    goal: str = ("It skips the measurements you cannot make: the questions of a tool you do not name are closed at "
                 "once instead of being asked one by one; context questions (hardware, precision, workload, batch "
                 "size) stay open.")
    goal_answered: str = ("It is answered ({answer}). It skips the measurements you cannot make: the questions of a "
                          "tool you cannot run are closed, not asked one by one.")

    @model_validator(mode="after")
    def _templates(self) -> ToolsQuestion:
        for name, text in (("why", self.why), ("goal_answered", self.goal_answered)):
            try:
                text.format(questions=1, tools=1, answer="x")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"{name}: bad placeholder {exc} (allowed: {{questions}}, {{tools}}, {{answer}})"
                                 ) from exc
        return self


class ConsultationWording(_Strict):
    """User-facing wording of `dam consult` that is not tied to one fact (fact questions live in facts.yaml)."""

    available_tools: ToolsQuestion = ToolsQuestion()


class ToolMap(_Strict):
    schema_version: int = 1
    tools: dict[str, Tool]
    axes: dict[Axis, AxisTools]
    measurements: dict[str, Measurement]
    consultation: ConsultationWording = ConsultationWording()


class ScoreMetric(_Strict):
    id: str
    title: str
    axis: Axis
    fact: str
    definition: str
    direction: Literal["lower_is_better", "higher_is_better"]
    fail_above: float | None = None
    pass_below: float | None = None
    fail_below: float | None = None
    pass_above: float | None = None
    note: str | None = None

    def band(self, value: float | None) -> Literal["fail", "marginal", "pass", "n/a"]:
        """Grade a value against the seed's Table 5 bands."""
        if value is None:
            return "n/a"
        if self.direction == "lower_is_better":
            if self.fail_above is None or self.pass_below is None:
                return "n/a"
            if value > self.fail_above:
                return "fail"
            return "pass" if value < self.pass_below else "marginal"
        if self.fail_below is None or self.pass_above is None:
            return "n/a"
        if value < self.fail_below:
            return "fail"
        return "pass" if value > self.pass_above else "marginal"

    def bands_text(self) -> str:
        if self.direction == "lower_is_better" and self.fail_above is not None and self.pass_below is not None:
            return f"fail > {self.fail_above:.0%}, pass < {self.pass_below:.0%}"
        if self.direction == "higher_is_better" and self.fail_below is not None and self.pass_above is not None:
            return f"fail < {self.fail_below:.0%}, pass > {self.pass_above:.0%}"
        return self.note or "no bands"


class Scorecard(_Strict):
    schema_version: int = 1
    source: str
    metrics: list[ScoreMetric]


class Regime(_Strict):
    title: str
    term: Term
    axes: dict[Axis, float]
    confirm_axis: Axis
    source: str


Strength = Literal["suspect", "likely", "confirmed"]


class TermSpec(_Strict):
    """A term of the iron law (or a C³ term): the derived facts that hold its seconds and its share of the step."""

    label: str
    share: str
    seconds: str | None = None  # only the iron-law terms have a duration of their own
    part_of: str | None = None  # the term this one is a part of (checkpoint and straggler waits are coordination)


class AxisSpec(_Strict):
    """One D·A·M axis (seed Table 1)."""

    title: str
    constraint: str
    source: str


class EvidenceCap(_Strict):
    """While `finding` holds, no bottleneck candidate is stronger than `max_strength` (thin or conflicting evidence;
    below the verdict threshold, the verdict is withheld). `conflict` lists the facts that cannot all be right when
    the finding is conflicting evidence; `firmer` says what would lift the cap."""

    finding: str
    max_strength: Strength
    source: str
    firmer: str | None = None
    conflict: list[str] = []


class RegimeCatalog(_Strict):
    schema_version: int = 1
    axes: dict[str, AxisSpec]
    strengths: dict[Strength, int]
    verdict_min_strength: Strength
    evidence_caps: list[EvidenceCap] = []
    terms: dict[Term, TermSpec]
    max_reported_speedup: float = Field(gt=1)
    precedence: list[str]
    regimes: dict[str, Regime]

    @model_validator(mode="after")
    def _precedence_complete(self) -> RegimeCatalog:
        if sorted(self.precedence) != sorted(self.regimes):
            raise ValueError("`precedence` must list every regime exactly once")
        return self


KernelActivity = Literal["kernel", "memcpy", "memset"]


class KernelClass(_Strict):
    """One class of GPU activity (knowledge_base/kernels.yaml), recognised by name patterns."""

    id: Literal["gemm", "conv", "attention", "elementwise", "reduction", "communication", "memcpy", "memset", "triton",
                "other"]
    title: str
    activities: list[KernelActivity] = ["kernel"]
    memory_bound_by_nature: bool
    source: str
    rationale: str
    patterns: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _patterns_compile(self) -> KernelClass:
        import re

        for pattern in self.patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a regular expression: {exc}") from exc
        return self


class CallPatterns(_Strict):
    """Host runtime/driver calls of one role, by name patterns (regular expressions, case-sensitive)."""

    source: str
    rationale: str
    patterns: list[str] = Field(min_length=1)


class KernelCalls(_Strict):
    blocking: CallPatterns
    graph_launch: CallPatterns
    launch: CallPatterns


class TraceAnalysisSettings(_Strict):
    """Thresholds of the trace analysis (each with its source)."""

    top_n: int = Field(ge=1, le=100)
    launch_gap_max_us: float = Field(gt=0)
    launch_gap_source: str
    event_free_gap_us: float = Field(gt=0)
    event_free_gap_source: str
    warmup_min_tail_share: float = Field(gt=0, lt=1)
    warmup_source: str


class KernelCatalog(_Strict):
    """knowledge_base/kernels.yaml: kernel classes, host call roles and the trace analysis thresholds."""

    schema_version: int = 1
    classes: list[KernelClass]
    calls: KernelCalls
    analysis: TraceAnalysisSettings

    @model_validator(mode="after")
    def _classes_complete(self) -> KernelCatalog:
        ids = [c.id for c in self.classes]
        if len(set(ids)) != len(ids):
            raise ValueError("a kernel class is listed twice")
        if not ids or ids[-1] != "other":
            raise ValueError("the last class must be `other` (what no other class matches)")
        return self


class Dimension(_Strict):
    base: str
    units: dict[str, float]


class DtypeSpec(_Strict):
    """A numeric format: bytes per element."""

    bytes: int | float = Field(gt=0)  # fractional for sub-byte formats (fp4: 0.5)


class UnitTable(_Strict):
    schema_version: int = 1
    dimensions: dict[str, Dimension]
    dtypes: dict[str, DtypeSpec]


class KnowledgeBase:
    """Everything in knowledge_base/, validated and indexed. Immutable after loading; safe to share across threads."""

    def __init__(
        self,
        facts: FactCatalog,
        hardware: HardwareCatalog,
        optimizations: OptimizationCatalog,
        tools: ToolMap,
        scorecard: Scorecard,
        regimes: RegimeCatalog,
        units: UnitTable,
        source: Path | None = None,
        interconnects: InterconnectCatalog | None = None,
        kernels: KernelCatalog | None = None,
    ) -> None:
        self.source = source
        self.facts = {f.name: f for f in facts.facts}
        self.questions = {q.id: q for q in facts.questions}
        self.hardware = {h.id: h for h in hardware.hardware}
        self.hardware_families = dict(hardware.families)
        self.hardware_prefixes = tuple(p.casefold() for p in hardware.name_prefixes)
        self.optimizations = {o.id: o for o in optimizations.optimizations}
        self.tools = tools
        self.scorecard = scorecard
        self.regimes = regimes
        self.units = units
        self.interconnects = {i.id: i for i in (interconnects.interconnects if interconnects else [])}
        self.kernels = kernels  # kernel classes for trace analysis (None: a knowledge base without kernels.yaml)
        self._check_references()

    @classmethod
    def load(cls, directory: Path) -> KnowledgeBase:
        """Load and validate every file of a knowledge_base/ directory."""

        def part(name: str, model: type[_Strict]) -> _Strict:
            path = directory / f"{name}.yaml"
            return validate(model, load_yaml(path), path)

        return cls(
            facts=part("facts", FactCatalog),  # type: ignore[arg-type]
            hardware=part("hardware", HardwareCatalog),  # type: ignore[arg-type]
            optimizations=part("optimizations", OptimizationCatalog),  # type: ignore[arg-type]
            tools=part("tools", ToolMap),  # type: ignore[arg-type]
            scorecard=part("scorecard", Scorecard),  # type: ignore[arg-type]
            regimes=part("regimes", RegimeCatalog),  # type: ignore[arg-type]
            units=part("units", UnitTable),  # type: ignore[arg-type]
            source=directory,
            interconnects=part("interconnects", InterconnectCatalog)  # type: ignore[arg-type]
            if (directory / "interconnects.yaml").is_file() else None,
            kernels=part("kernels", KernelCatalog)  # type: ignore[arg-type]
            if (directory / "kernels.yaml").is_file() else None,
        )

    def _check_references(self) -> None:
        where = str(self.source or "knowledge_base")
        problems: list[Problem] = self._check_hardware_names(f"{where}/hardware.yaml")
        for fact in self.facts.values():
            if fact.dimension and fact.dimension not in self.units.dimensions:
                problems.append(Problem(f"{where}/facts.yaml: {fact.name}", f"unknown dimension {fact.dimension!r}"))
            if fact.measure and fact.measure not in self.tools.measurements:
                problems.append(Problem(f"{where}/facts.yaml: {fact.name}", f"unknown measurement {fact.measure!r}"))
        problems.extend(self._check_questions(where))
        for cap in self.regimes.evidence_caps:
            problems.extend(Problem(f"{where}/regimes.yaml: evidence_caps.{cap.finding}.conflict",
                                    f"unknown fact {name!r}") for name in cap.conflict if name not in self.facts)
        for name in self.tools.consultation.available_tools.after:
            if name not in self.facts:
                problems.append(Problem(f"{where}/tools.yaml: consultation.available_tools.after",
                                        f"unknown fact {name!r}"))
        for name, m in self.tools.measurements.items():
            if m.tool not in self.tools.tools:
                problems.append(Problem(f"{where}/tools.yaml: measurements.{name}", f"unknown tool {m.tool!r}"))
        for axis, row in self.tools.axes.items():
            for tool in [row.primary, *row.secondary]:
                if tool not in self.tools.tools:
                    problems.append(Problem(f"{where}/tools.yaml: axes.{axis}", f"unknown tool {tool!r}"))
        problems.extend(self._check_vocabulary(where))
        for term, term_spec in self.regimes.terms.items():
            for fact_name in filter(None, (term_spec.share, term_spec.seconds)):
                if fact_name not in self.facts:
                    problems.append(Problem(f"{where}/regimes.yaml: terms.{term}", f"unknown fact {fact_name!r}"))
        for opt in self.optimizations.values():
            if opt.shrinks not in self.regimes.terms:
                problems.append(Problem(f"{where}/optimizations.yaml: {opt.id}",
                                        f"shrinks {opt.shrinks!r}, which regimes.yaml `terms` does not define"))
        for metric in self.scorecard.metrics:
            if metric.fact not in self.facts:
                problems.append(Problem(f"{where}/scorecard.yaml: {metric.id}", f"unknown fact {metric.fact!r}"))
        problems.extend(self._check_interconnects(where))
        if problems:
            raise KnowledgeBaseError(problems, title="the knowledge base refers to things it does not define")

    def _check_hardware_names(self, where: str) -> list[Problem]:
        """Ids and aliases name one entry each (as matched: `hardware_key`); families name an entry and no alias."""
        problems: list[Problem] = []
        seen: dict[str, str] = {}
        for hw in self.hardware.values():
            for alias in [hw.id, *hw.aliases]:
                key = hardware_key(alias, self.hardware_prefixes)
                if not key:
                    problems.append(Problem(f"{where}: {hw.id}", f"alias {alias!r} has no letters or digits"))
                elif key in seen and seen[key] != hw.id:
                    problems.append(Problem(f"{where}: {hw.id}", f"alias {alias!r} also names {seen[key]}",
                                            "names match ignoring case, separators and a leading vendor word"))
                seen.setdefault(key, hw.id)
        for name, family in self.hardware_families.items():
            at = f"{where}: families.{name}"
            for target in [family.default, *family.variants]:
                if target not in self.hardware:
                    problems.append(Problem(at, f"{target!r} is not a catalog id"))
            key = hardware_key(name, self.hardware_prefixes)
            if key in seen and seen[key] != family.default:
                problems.append(Problem(at, f"the family name also names {seen[key]}, not its default "
                                        f"{family.default}", "a family name must not be another entry's name"))
            elif any(hardware_key(hw.id, self.hardware_prefixes) == key for hw in self.hardware.values()):
                problems.append(Problem(at, "the family name is a catalog id", "a family name must not be an id"))
        return problems

    def with_hardware(self, extra: Iterable[HardwareSpec], where: str = "extra hardware") -> KnowledgeBase:
        """A copy of this knowledge base whose catalog also holds `extra` (this one is left unchanged).

        Raises KnowledgeBaseError when an extra entry reuses a catalog id or alias, or names an unknown dtype."""
        added = list(extra)
        problems: list[Problem] = []
        hardware = dict(self.hardware)
        for hw in added:
            if hw.id in hardware:
                origin = "the catalog" if hw.id in self.hardware else "another entry of the same file"
                problems.append(Problem(f"{where}: {hw.id}", f"the id is already used by {origin}",
                                        "choose another id (dam hardware list shows the catalog ids)"))
            hardware[hw.id] = hw
            for dtype in hw.peak_tflops:
                if dtype not in self.units.dtypes:
                    problems.append(Problem(f"{where}: {hw.id}: peak_tflops", f"unknown dtype {dtype!r}",
                                            f"units.yaml `dtypes` defines: {', '.join(self.units.dtypes)}"))
        if problems:
            raise KnowledgeBaseError(problems, title="the extra hardware cannot be added")
        kb = copy.copy(self)
        kb.hardware = hardware
        kb.__dict__.pop("_alias_index", None)  # the copy builds its own name index
        name_problems = kb._check_hardware_names(where)
        if name_problems:
            raise KnowledgeBaseError(name_problems, title="the extra hardware cannot be added")
        return kb

    def dtype_bytes(self, dtype: str) -> int | float:
        """Bytes per element of a numeric format (units.yaml `dtypes`)."""
        return self.units.dtypes[dtype].bytes

    def _check_vocabulary(self, where: str) -> list[Problem]:
        """Axes, terms and dtypes named anywhere are the ones regimes.yaml and units.yaml define."""
        problems: list[Problem] = []
        axes, terms, dtypes = self.regimes.axes, self.regimes.terms, self.units.dtypes

        def axis(at: str, name: str) -> None:
            if name not in axes:
                problems.append(Problem(at, f"unknown axis {name!r}",
                                        f"regimes.yaml `axes` defines: {', '.join(axes)}"))

        for term_id, term_spec in terms.items():
            if term_spec.part_of is not None and term_spec.part_of not in terms:
                problems.append(Problem(f"{where}/regimes.yaml: terms.{term_id}",
                                        f"part_of unknown term {term_spec.part_of!r}",
                                        f"`terms` defines: {', '.join(terms)}"))
        for regime_id, regime in self.regimes.regimes.items():
            at = f"{where}/regimes.yaml: regimes.{regime_id}"
            if regime.term not in terms:
                problems.append(Problem(at, f"unknown term {regime.term!r}", f"`terms` defines: {', '.join(terms)}"))
            for name in [*regime.axes, regime.confirm_axis]:
                axis(at, name)
        for name in self.tools.axes:
            axis(f"{where}/tools.yaml: axes.{name}", name)
        for metric in self.scorecard.metrics:
            axis(f"{where}/scorecard.yaml: {metric.id}", metric.axis)
        for opt in self.optimizations.values():
            axis(f"{where}/optimizations.yaml: {opt.id}", opt.axis)
        for hw in self.hardware.values():
            for dtype in hw.peak_tflops:
                if dtype not in dtypes:
                    problems.append(Problem(f"{where}/hardware.yaml: {hw.id}: peak_tflops", f"unknown dtype {dtype!r}",
                                            f"units.yaml `dtypes` defines: {', '.join(dtypes)}"))
        spec = self.facts.get("dtype")
        if spec is not None and list(spec.choices or []) != list(dtypes):
            problems.append(Problem(f"{where}/facts.yaml: dtype", "the choices of `dtype` must be units.yaml `dtypes`, "
                                    f"in order: {', '.join(dtypes)}"))
        return problems

    def _check_questions(self, where: str) -> list[Problem]:
        """Combined questions name askable facts (each in one question at most), ids that no fact uses, and choices
        whose values the member facts accept."""
        problems: list[Problem] = []
        owner: dict[str, str] = {}
        for q in self.questions.values():
            at = f"{where}/facts.yaml: questions.{q.id}"
            if q.id in self.facts or q.id == "available_tools":
                problems.append(Problem(at, f"the id {q.id!r} is already a fact or question name"))
            for name in q.facts:
                spec = self.facts.get(name)
                if spec is None or not spec.askable:
                    problems.append(Problem(at, f"{name!r} is not an askable fact"))
                elif name in owner:
                    problems.append(Problem(at, f"{name!r} is already asked by question {owner[name]!r}"))
                owner.setdefault(name, q.id)
            labels = [c.answer for c in q.choices or []]
            if len(set(labels)) != len(labels):
                problems.append(Problem(at, "two choices share an answer label"))
            for choice in q.choices or []:
                for name, value in choice.sets.items():
                    spec = self.facts.get(name)
                    if name not in q.facts:
                        problems.append(Problem(f"{at}.{choice.answer}", f"sets {name!r}, not one of {q.facts}"))
                    elif spec is not None and spec.type == "enum" and value not in (spec.choices or []):
                        problems.append(Problem(f"{at}.{choice.answer}", f"{name} = {value!r} is not one of "
                                                f"{', '.join(spec.choices or [])}"))
                    elif spec is not None and spec.type == "hardware" and self.resolve_hardware(value) is None:
                        problems.append(Problem(f"{at}.{choice.answer}", f"{name} = {value!r} is not in the "
                                                "hardware catalog"))
                    elif spec is not None and spec.type in ("fraction", "number", "integer"):
                        problems.append(Problem(f"{at}.{choice.answer}", f"sets the {spec.type} {name}; choices "
                                                "may set only enum and hardware facts"))
        return problems

    def _check_interconnects(self, where: str) -> list[Problem]:
        """Every catalog link is of a kind the `interconnect` fact offers; each such kind has exactly one default."""
        if not self.interconnects:
            return []
        spec = self.facts.get("interconnect")
        kinds = (spec.choices or []) if spec else []
        problems = [Problem(f"{where}/interconnects.yaml: {i.id}", f"kind {i.kind!r} is not a choice of the "
                            f"`interconnect` fact ({', '.join(kinds) or 'not defined'})")
                    for i in self.interconnects.values() if i.kind not in kinds]
        for kind in kinds:
            defaults = [i.id for i in self.interconnects.values() if i.kind == kind and i.default]
            if len(defaults) != 1:
                problems.append(Problem(f"{where}/interconnects.yaml", f"kind {kind!r} needs exactly one `default: "
                                        f"true` entry, found {len(defaults)}"))
        return problems

    def default_interconnect(self, kind: str) -> InterconnectSpec | None:
        """The catalog's default link of a kind (nvlink, pcie, infiniband, ethernet), if the catalog has one."""
        return next((i for i in self.interconnects.values() if i.kind == kind and i.default), None)

    @cached_property
    def _alias_index(self) -> tuple[dict[str, str], dict[str, str]]:
        """(case-folded id or alias -> catalog id, `hardware_key` of every id and alias -> catalog id)."""
        exact: dict[str, str] = {}
        loose: dict[str, str] = {}
        for hw in self.hardware.values():
            for alias in [hw.id, *hw.aliases]:
                exact.setdefault(alias.strip().casefold(), hw.id)
                loose.setdefault(hardware_key(alias, self.hardware_prefixes), hw.id)
        return exact, loose

    def resolve_hardware(self, name: str) -> str | None:
        """Map a catalog id, alias, device name ("NVIDIA H100 80GB HBM3", "Tesla T4") or family name ("h100") to a
        catalog id; case, separators and a leading vendor word do not matter. See `hardware_resolution`."""
        found = self.hardware_resolution(name)
        return found.id if found is not None else None

    def hardware_resolution(self, name: str) -> HardwareResolution | None:
        """How `name` maps to a catalog id. An id or alias as written (any case) wins; then a family name, which maps
        to its default variant with a note saying so; then an id or alias spelled with other separators or without
        the vendor word ("h100_sxm", "A100-80GB")."""
        exact, loose = self._alias_index
        hw_id = exact.get(name.strip().casefold())
        if hw_id is not None:
            return HardwareResolution(hw_id)
        key = hardware_key(name, self.hardware_prefixes)
        if not key:
            return None
        for family_name, family in self.hardware_families.items():
            if hardware_key(family_name, self.hardware_prefixes) == key:
                others = f"; say --set hardware={' or '.join(family.variants)} if not" if family.variants else ""
                note = f"{name.strip()} -> {family.default} ({family.why}{others})"
                return HardwareResolution(family.default, family_name, note)
        hw_id = loose.get(key)
        return HardwareResolution(hw_id) if hw_id is not None else None

    def strength(self, name: str) -> int:
        return self.regimes.strengths[name]  # type: ignore[index]
