"""The diagnosis report: pydantic models, lossless JSON, and the provenance graph as networkx on demand."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FieldSerializationInfo,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_validator,
)

from .._lazy import cached_property
from ..breakdown import TimeBreakdown
from ..derive.formulas import DerivedValue
from ..observations.normalise import Observation, RankFigures
from ..rules.evaluate import LeafTrace, Outcome

if TYPE_CHECKING:
    import networkx as nx

    from ..expert import Expert
    from .explain import Counterfactuals, How, WhatIf, Why, WhyNot

Value = int | float | str


class Explanations(NamedTuple):
    """The functions behind Report.why / how / why_not / what_if / counterfactuals. The explanations sit above this
    model in the layering (they read reports; what-ifs re-diagnose), so they are bound here by the expert.report
    package when it is imported (always, before this module) instead of being imported from below."""

    why: Callable[[Report, str], Why]
    how: Callable[[Report, str], How]
    why_not: Callable[[Report, str], WhyNot]
    what_if: Callable[[Report, Mapping[str, Any], Expert | None], WhatIf]
    counterfactuals: Callable[[Report, Expert | None, int | None], Counterfactuals]


_bound: list[Explanations] = []


def bind_explanations(explanations: Explanations) -> None:
    """Set the implementation of the Report's explanation methods (called once, by expert/report/__init__.py)."""
    _bound[:] = [explanations]


def _explanations() -> Explanations:
    if not _bound:  # pragma: no cover - expert/report/__init__.py binds them before this module is usable
        raise RuntimeError("the report explanations are not bound: import expert.report")
    return _bound[0]


Band = Literal["fail", "marginal", "pass", "n/a"]
NodeKind = Literal["observation", "derived", "rule", "finding", "bottleneck", "recommendation", "wasted", "measurement"]
EdgeRelation = Literal["used", "derived-from", "concluded", "ruled-out", "needs"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ignored_types=(cached_property,), defer_build=True)


# The small records below are plain dataclasses: a report holds hundreds of them, and pydantic validates and
# serialises them as fields of the Report (so JSON round trips and JSON Schemas cover them) without paying
# for validation each time the diagnosis builds one from values it already checked.


@dataclass
class Evidence:
    """A fact (or finding) a conclusion rests on, with the comparison that held."""

    fact: str
    test: str  # e.g. "gpu_util 0.55 < 0.8"
    value: Value | None = None
    source: str | None = None


@dataclass
class Finding:
    id: str
    severity: Literal["info", "warning", "critical"]
    title: str
    message: str
    rule_id: str
    source: str
    evidence: list[Evidence]


@dataclass
class Candidate:
    """A bottleneck regime some rule voted for."""

    regime: str
    title: str
    strength: Literal["suspect", "likely", "confirmed"]
    score: int
    rules: list[str]


@dataclass
class AxisScore:
    axis: str  # an axis of knowledge_base/regimes.yaml `axes`
    share: Annotated[float, Field(ge=0, le=1)]
    strength: float
    rules: list[str]


@dataclass
class ExpectedGain:
    """Amdahl bound on the step speedup if the term this optimization shrinks went to zero."""

    term: str
    term_share: float
    max_speedup: float
    assumptions: str


@dataclass
class Recommendation:
    id: str
    title: str
    why: str
    how: str
    axis: str
    shrinks: str
    source: str
    rules: list[str]
    expected_gain: ExpectedGain | None = None


@dataclass
class Wasted:
    id: str
    title: str
    reason: str
    rules: list[str]


@dataclass
class Applied:
    """An optimization the job already uses (fact applied_optimizations): never recommended again."""

    id: str
    title: str
    source: str  # where applied_optimizations came from (the user, a profiler trace)
    rules: list[str] = field(default_factory=list)  # the rules that would have recommended it


@dataclass
class NextMeasurement:
    fact: str | None
    axis: str
    tool: str
    how: str
    why: str
    settles: list[str]


VerdictState = Literal["verdict", "conflicting evidence", "insufficient evidence"]


@dataclass
class EvidenceLimit:
    """A finding that caps every candidate's strength while it holds (knowledge_base/regimes.yaml `evidence_caps`):
    thin evidence, or conflicting evidence (`facts`: the known values that cannot all be right). `effect` is
    "withheld" when the cap lies below the verdict threshold; `firmer` and `remeasure` say what would lift it."""

    finding: str
    title: str
    message: str
    max_strength: Literal["suspect", "likely", "confirmed"]
    effect: Literal["withheld", "capped"]
    firmer: str
    source: str
    facts: dict[str, Value] = field(default_factory=dict)
    remeasure: list[NextMeasurement] = field(default_factory=list)


@dataclass
class MissingFact:
    fact: str
    question: str
    why: str
    rules: list[str]


@dataclass
class ScoreRow:
    id: str
    title: str
    axis: str
    value: float | None
    band: Band
    definition: str
    bands: str


UNEXPLAINED_TERM = "unexplained"
"""The iron-law table's last line: the part of the measured step no known term accounts for."""


@dataclass
class IronLawTerm:
    # an iron-law term of knowledge_base/regimes.yaml `terms` (RegimeCatalog.iron_law_terms()), or UNEXPLAINED_TERM;
    # the report schema lists them from the knowledge base (expert/schemas.py)
    term: str
    label: str
    seconds: float | None
    share: float | None


class IronLaw(_Model):
    """The iron-law terms; the last, `unexplained`, is the measured step no known term accounts for (when the step
    time and some term are known). `efficiency` is the η of the compute term O/(R_peak·η), and `efficiency_source`
    says where it came from (η = 1 when no activity was measured)."""

    step_time_s: float | None
    terms: list[IronLawTerm]
    sequential_s: float | None
    overlapped_s: float | None
    efficiency: float | None = None
    efficiency_source: str | None = None


class Concludes(_Model):
    """What a rule concludes when it fires (its `then`, compactly), so a saved report can answer why-not."""

    finding: str | None = None
    bottleneck: str | None = None
    strength: Literal["suspect", "likely", "confirmed"] | None = None
    axis: str | None = None
    recommend: list[str] = []
    waste: list[str] = []
    measure: list[str] = []


@dataclass
class RuleEvaluation:
    """How one rule evaluated on these facts (fired or not), leaf by leaf.

    A plain dataclass (validated and serialised by pydantic as part of the Report): a report holds one per rule,
    and building them must stay cheap.
    """

    rule_id: str
    title: str
    source: str
    outcome: Outcome
    fired: bool
    leaves: list[LeafTrace]
    concludes: Concludes = field(default_factory=Concludes)
    when: dict[str, Any] | None = None  # the resolved condition tree; its leaves are `leaves`, in order


class RegimeTableRecord(_Model):
    """One regime's effective vs wasted optimizations (rules/optimization_tables.yaml), as the diagnosis used it."""

    regime: str
    source: str
    effective: list[str]
    wasted: dict[str, str]  # optimization id -> reason


@dataclass
class GraphNode:
    """A provenance node (a plain dataclass for speed; pydantic validates it inside ProvenanceData)."""

    id: str
    kind: NodeKind
    label: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class GraphEdge:
    source: str
    target: str
    relation: EdgeRelation


class ProvenanceData(_Model):
    nodes: list[GraphNode] = []
    edges: list[GraphEdge] = []


_LIST_ITEMS: dict[str, type] = {"evaluations": RuleEvaluation, "missing": MissingFact,
                                 "next_measurements": NextMeasurement, "findings": Finding,
                                 "conflicts": EvidenceLimit, "evidence_limits": EvidenceLimit,
                                 "candidates": Candidate, "recommended": Recommendation, "wasted": Wasted,
                                 "applied": Applied, "scorecard": ScoreRow}
_DICT_ITEMS: dict[str, type] = {"derived": DerivedValue}  # deferred dict fields (keyed by name) -> their item
_AS_MODEL: dict[str, Any] = {}  # field name -> RootModel[list[its item]] (or dict), made when first written


def _as_model(name: str) -> Any:
    """A deferred list (or dict) field as one model, so that it is written by its schema's serializer (made on first
    use: a parametrised RootModel builds its schema as it is created)."""
    from pydantic import RootModel  # not at import: defining RootModel builds a validator (a cold diagnose builds none)

    found = _AS_MODEL.get(name)
    if found is None and name in _LIST_ITEMS:
        found = _AS_MODEL[name] = RootModel[list[_LIST_ITEMS[name]]]  # type: ignore[valid-type]
    elif found is None and name in _DICT_ITEMS:
        found = _AS_MODEL[name] = RootModel[dict[str, _DICT_ITEMS[name]]]  # type: ignore[valid-type]
    return found


class Deferred:
    """A report part built on first use: `build(state)`, computed once (the state never refers to the report, so a
    report makes no reference cycle). The diagnosis defers every section past the verdict, its state and the axes
    this way (`_DEFERRABLE`): the candidates, the findings, the evidence limits, the recommended, wasted and applied
    optimizations, the missing facts, the next measurements, the scorecard, the iron law, the cluster section, the
    derived values' records, the rule evaluations and the provenance graph: most callers read few of them. Where
    the part stands in for its value (equality, repr, copies, pickling) it is its value; `Report` resolves it on
    attribute access and when it is serialised, so the JSON is the same bytes.

    Two threads may both build it the first time; both results are equal, and one of them is kept."""

    __slots__ = ("_build", "_state", "_value")

    def __init__(self, build: Callable[[Any], Any], state: Any) -> None:
        self._build = build
        self._state: Any = state
        self._value: Any = None

    def value(self) -> Any:
        value = self._value
        if value is None:
            state = self._state
            if state is None:  # another thread built it meanwhile (it sets the value before it drops the state)
                return self._value
            value = self._value = self._build(state)
            self._state = None  # what it was built from is no longer needed
        return value

    def __eq__(self, other: object) -> bool:
        return bool(self.value() == (other.value() if isinstance(other, Deferred) else other))

    __hash__ = None  # type: ignore[assignment]  # as the list or model it stands for

    def __repr__(self) -> str:
        return repr(self.value())

    def __reduce__(self) -> tuple[Callable[[Any], Any], tuple[Any]]:
        return _same, (self.value(),)

    def __copy__(self) -> Deferred:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        import copy

        return copy.deepcopy(self.value(), memo)


def _same(value: Any) -> Any:
    return value


class _DeferredField:
    """The attribute of a Report field that may hold a `Deferred`: reads resolve it (and keep the value)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.name]
        if type(value) is Deferred:
            value = instance.__dict__[self.name] = value.value()
        return value

    def __set__(self, instance: Any, value: Any) -> None:  # pydantic writes fields to __dict__; this makes the
        instance.__dict__[self.name] = value  # descriptor take precedence over it on reads


class ClusterSection(_Model):
    """The cluster-scale view (seed Table 6, C³): each field is the fact of the same name, observed or derived,
    except three from the traces of every rank (expert/ingest/ranks.py): `ranks` (each rank's figures),
    `straggler_rank` (the rank the others wait for, when rule ranks-straggler finds one) and `slow_link` (rule
    ranks-slow-link: true when it fires, false when the rank traces rule it out, null without them).

    Present only when a diagnosis has cluster facts; unknown values stay null.
    """

    num_gpus: int | None = None
    num_nodes: int | None = None
    interconnect: str | None = None
    interconnect_bandwidth: float | None = None  # GB/s per direction, per GPU
    # C1 computation
    scaling_efficiency: float | None = None
    effective_gpus: float | None = None
    # C2 communication
    comm_time_s: float | None = None
    comm_overlap_frac: float | None = None
    comm_frac: float | None = None  # exposed (non-overlapped) communication share of the step
    t_comm_s: float | None = None  # communication term: ring all-reduce bytes over the link bandwidth
    comm_term_share: float | None = None
    bus_bandwidth: float | None = None  # achieved, GB/s
    bus_bw_util: float | None = None
    # C3 coordination
    sync_wait_frac: float | None = None
    checkpoint_write_s: float | None = None
    checkpoint_interval_s: float | None = None
    mtbf_h: float | None = None
    young_interval_s: float | None = None
    daly_interval_s: float | None = None
    checkpoint_interval_ratio: float | None = None  # actual / Daly optimum
    coordination_overhead: float | None = None
    optimal_coordination_overhead: float | None = None
    excess_coordination_overhead: float | None = None
    # from the traces of every rank (expert/ingest/ranks.py) and nccl-tests
    world_size: int | None = None
    ranks: list[RankFigures] = Field(default_factory=list)  # one row per traced rank
    straggler_rank: int | None = None  # the rank the others wait for, when rule ranks-straggler finds one
    step_time_skew: float | None = None  # slowest rank's step time / median - 1
    compute_skew: float | None = None
    slow_link: bool | None = None  # every rank's collectives slow (rule ranks-slow-link); null: no per-rank evidence
    nccl_bus_bandwidth: float | None = None  # GB/s measured by nccl-tests
    nccl_bw_util: float | None = None


class Report(_Model):
    """Everything a diagnosis concluded, with the evidence and the provenance behind each conclusion."""

    schema_version: Literal[1] = 1
    engine: str
    observations: dict[str, Observation]
    derived: dict[str, DerivedValue]
    bottleneck: str | None
    verdict_title: str | None = None
    state: VerdictState = "insufficient evidence"  # "conflicting evidence": a conflict holds and no verdict is named
    candidates: list[Candidate]
    conflicts: list[EvidenceLimit] = []  # conflicting evidence in effect (regimes.yaml caps with `conflict` facts)
    evidence_limits: list[EvidenceLimit] = []  # thin evidence in effect (the other caps)
    axes: list[AxisScore]
    findings: list[Finding]
    recommended: list[Recommendation]
    wasted: list[Wasted]
    applied: list[Applied] = []  # optimizations the job already uses (applied_optimizations), never recommended
    next_measurements: list[NextMeasurement]
    missing: list[MissingFact]
    scorecard: list[ScoreRow]
    iron_law: IronLaw
    evaluations: list[RuleEvaluation]
    graph: ProvenanceData
    tables: list[RegimeTableRecord] = []
    cluster: ClusterSection | None = None
    time_breakdown: TimeBreakdown | None = None  # where the GPU time goes, when the facts came from a profiler trace

    @model_validator(mode="after")
    def _state_of_verdict(self) -> Report:
        if self.bottleneck is not None:  # a report saved before `state` existed, or built without it
            self.state = "verdict"
        elif self.state == "verdict":
            raise ValueError("state 'verdict' needs a bottleneck")
        return self

    @field_serializer("derived", "candidates", "findings", "conflicts", "evidence_limits", "recommended", "wasted",
                      "applied", "next_measurements", "missing", "scorecard", "iron_law", "evaluations", "graph",
                      "cluster", mode="wrap")
    def _deferred_parts(self, value: Any, handler: SerializerFunctionWrapHandler,  # type: ignore[no-untyped-def]
                        info: FieldSerializationInfo):
        """Resolve a deferred part, then write it by its schema's serializer (the same bytes as a part built eagerly);
        with a nested include/exclude, through pydantic's handler. Unannotated on purpose: a return annotation
        would become these fields' serialization schema."""
        if type(value) is Deferred:
            value = getattr(self, info.field_name)
        if info.include is not None or info.exclude is not None:
            return handler(value)
        as_model = _as_model(info.field_name)
        return as_model.model_construct(value) if as_model is not None and isinstance(value, (list, dict)) else value

    def __iter__(self) -> Any:
        for name in _DEFERRABLE:
            getattr(self, name)  # resolve, so that dict(report) holds the parts themselves
        return super().__iter__()

    def to_json(self, indent: int | None = 2) -> str:
        """Lossless JSON; `Report.model_validate_json` reads it back."""
        return self.model_dump_json(indent=indent)

    def facts(self) -> dict[str, Value]:
        """Every observed and derived value, by fact name."""
        values: dict[str, Value] = {name: obs.value for name, obs in self.observations.items()}
        values.update({name: d.value for name, d in self.derived.items()})
        return values

    @cached_property
    def provenance(self) -> nx.DiGraph:
        """The provenance graph: node attribute `kind`, edge attribute `relation`."""
        import networkx as nx

        graph = nx.DiGraph()
        for node in self.graph.nodes:
            graph.add_node(node.id, kind=node.kind, label=node.label, **node.attrs)
        for edge in self.graph.edges:
            graph.add_edge(edge.source, edge.target, relation=edge.relation)
        return graph

    def evaluation(self, rule_id: str) -> RuleEvaluation | None:
        return next((e for e in self.evaluations if e.rule_id == rule_id), None)

    # ---- explanations: implemented in expert/report/explain/, bound by the expert.report package on import ----

    def why(self, conclusion_id: str) -> Why:
        """The chain from the observations through derivations and rules to a conclusion (finding, regime, ...)."""
        return _explanations().why(self, conclusion_id)

    def how(self, fact_name: str) -> How:
        """How a fact got its value: observation source, or formula, inputs and hardware figures."""
        return _explanations().how(self, fact_name)

    def why_not(self, ident: str) -> WhyNot:
        """Why a bottleneck, finding, optimization or rule was not concluded, rule by rule."""
        return _explanations().why_not(self, ident)

    def what_if(self, changes: Mapping[str, Any], expert: Expert | None = None) -> WhatIf:
        """Re-diagnose with some facts changed and return the differences."""
        return _explanations().what_if(self, changes, expert)

    def counterfactuals(self, expert: Expert | None = None, limit: int | None = None) -> Counterfactuals:
        """The smallest single-fact changes that flip the verdict, each verified by re-diagnosis."""
        return _explanations().counterfactuals(self, expert, limit)


_DEFERRABLE = ("derived", "candidates", "findings", "conflicts", "evidence_limits", "recommended", "wasted", "applied",
               "next_measurements", "missing", "scorecard", "iron_law", "evaluations", "graph", "cluster")
for _name in _DEFERRABLE:
    setattr(Report, _name, _DeferredField(_name))
