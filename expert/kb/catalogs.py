"""The typed shape of every knowledge_base/*.yaml file (pydantic models, strict and frozen): the fact vocabulary,
hardware, interconnects, optimizations, tools, scorecard, regimes, kernel classes and units; and how hardware names
are matched (`hardware_key`). `knowledge.KnowledgeBase` loads and indexes them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

# Vocabulary names whose values are knowledge-base data, checked when the knowledge base loads: axes
# (regimes.yaml `axes`), iron-law and C³ terms (regimes.yaml `terms`), numeric formats (units.yaml `dtypes`).
Axis = str
Term = str
Dtype = str


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # built on first validation: a cached
    # knowledge base (expert/_loadcache.py) is never validated again


class FactSpec(_Strict):
    """One fact of the observation vocabulary."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    kind: Literal["observed", "derived", "both"]
    type: Literal["fraction", "number", "integer", "enum", "hardware", "text", "optimizations"]
    unit: str | None = None
    dimension: str | None = None
    min: float | None = None
    max: float | None = None
    exclusive_min: bool = False
    choices: list[str] | None = None
    # other spellings of a choice (facts.yaml header), each stored as the choice it names
    aliases: dict[str, str] = {}
    description: str
    question: str | None = None
    example: str | None = None
    ask_first: bool = False
    cost: int = Field(default=3, ge=1, le=5)
    measure: str | None = None
    workloads: list[Literal["training", "inference"]] | None = None  # None: a fact of either workload

    @model_validator(mode="after")
    def _consistent(self) -> FactSpec:
        if self.type == "enum" and not self.choices:
            raise ValueError("an enum fact needs `choices`")
        if self.aliases:
            if self.type != "enum":
                raise ValueError("`aliases` spell the choices of an enum fact")
            choices = self.choices or []
            for alias, choice in self.aliases.items():
                if choice not in choices:
                    raise ValueError(f"alias {alias!r} names {choice!r}, which is not one of the choices")
                if alias != alias.strip().casefold() or not alias or alias in choices:
                    raise ValueError(f"alias {alias!r} must be lower case, trimmed, and not a choice itself")
        if self.kind != "derived" and not self.question:
            raise ValueError("an observable fact needs a `question`")
        return self

    @property
    def askable(self) -> bool:
        return self.kind in ("observed", "both")

    def applies_to(self, workload: object) -> bool:
        """Whether a job of this workload (a `workload` value, or None when unsaid) has this fact: a training-only
        fact (the optimizer step, the gradients) is neither asked of nor suggested to an inference service."""
        return self.workloads is None or workload is None or workload in self.workloads

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
        if self.type == "optimizations":
            return "optimization ids of knowledge_base/optimizations.yaml, comma-separated or a list, or none"
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
    mig_of: str | None = None  # a MIG slice: the catalog id of the part it is carved from (hardware.yaml `mig`)

    def peak(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s for a dtype, or None when the part has no published figure for it."""
        return self.peak_tflops.get(dtype)


class HardwareFamily(_Strict):
    """A bare family name ("h100") and the catalog variant it resolves to; the report says which was picked."""

    default: str
    variants: list[str] = []  # the other variants, named in the note ("say --set hardware=h100-pcie if not")
    why: str = "the most common variant"


class HardwareUpgrade(_Strict):
    """The realistic next part for one catalogued part (hardware.yaml `upgrades`): what a faster accelerator means."""

    to: str
    why: str


MIG_PROFILE = re.compile(r"([1-9][0-9]*)g\.([1-9][0-9]*)gb")  # "<g>g.<m>gb": compute slices, GB


class MigPart(_Strict):
    """The Multi-Instance GPU profiles of one part (hardware.yaml `mig`): "<g>g.<m>gb" is g of its compute slices
    and m GB of its memory."""

    compute_slices: int = Field(ge=1)
    memory_slices: int = Field(ge=1)
    profiles: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _profile_names(self) -> MigPart:
        for name in self.profiles:
            found = MIG_PROFILE.fullmatch(name)
            if found is None:
                raise ValueError(f"{name!r} is not a MIG profile name such as 1g.10gb")
            if int(found.group(1)) > self.compute_slices:
                raise ValueError(f"{name!r} takes more than the part's {self.compute_slices} compute slices")
        return self


class MigCatalog(_Strict):
    source: str
    parts: dict[str, MigPart] = {}


class HardwareCatalog(_Strict):
    schema_version: int = 1
    hardware: list[HardwareSpec]
    families: dict[str, HardwareFamily] = {}
    name_prefixes: list[str] = []  # leading vendor words a device name may carry ("NVIDIA", "Tesla", "AMD Instinct")
    upgrades: dict[str, HardwareUpgrade] = {}  # part id -> its realistic next part (more_peak_flops' bound)
    mig: MigCatalog | None = None  # the MIG profiles of the parts that have them: each becomes an entry of its own


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
    reach: Literal["node", "network"]  # within a node (GPU to GPU) or between nodes: the links a job can move to
    name: str
    per_direction_gbs: float = Field(gt=0)
    default: bool = False
    source: str
    notes: str | None = None


class InterconnectCatalog(_Strict):
    schema_version: int = 1
    interconnects: list[InterconnectSpec] = []


class OptimizationWording(_Strict):
    """How an optimization is named and applied in one kind of job, where that differs (optimizations.yaml header)."""

    title: str | None = None
    how: str | None = None


class Optimization(_Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str
    axis: Axis
    shrinks: Term
    how: str
    source: str
    # the title and how for a training job or an inference service, where the general wording names techniques of
    # the other (post-training weight quantization and a KV cache are not what a training job applies)
    for_workload: dict[Literal["training", "inference"], OptimizationWording] = {}
    # the workloads it applies to (empty: both): where the job's workload is known and not among them, it is neither
    # recommended nor ruled out (DDP's unused-parameter search is no concern of a server, a KV cache of a trainer)
    workloads: list[Literal["training", "inference"]] = []
    # the title and how on one vendor's parts (hardware.yaml `vendor`), where the general wording names a CUDA
    # mechanism that part does its own way (a TPU compiles the whole step with XLA; Gaudi captures HPU graphs)
    for_vendor: dict[str, OptimizationWording] = {}
    effort: int | None = Field(default=None, ge=1, le=5)  # optimizations.yaml header: the declared effort order
    floor: str | None = None  # a derived share its term keeps at best (optimizations.yaml header); None: zero
    floor_of: Literal["step", "own"] = "step"  # the floor is a share of today's step, or of the run at the floor
    # the most its term can speed up (optimizations.yaml header): a derived fact (a peak ratio from the catalog), and
    # the declared bound where that fact is unknown, with its source
    term_speedup: str | None = None
    max_term_speedup: float | None = Field(default=None, gt=1)
    bound_source: str | None = None
    # an optimization of the compute term that leaves the step's bytes to move (optimizations.yaml header): how much
    # faster it can make the D/BW term, a number (1: not at all) or a derived fact; None: not bounded by that term
    data_term_speedup: float | str | None = None
    # the shares of the step (facts, summed) the optimization can act on at most, where narrower than its term
    # (optimizations.yaml header); the first must be known, the others add where known
    acts_on: list[str] = []
    # shares of the step (facts) it can take away entirely where known, beside what it acts on (optimizations.yaml
    # header); they count only where the first of acts_on is known
    removes: list[str] = []
    # facts that applying it settles (an enum fact and its value): listed in applied_optimizations, it gives them
    # where they are not given (expert.observations.normalise)
    implies: dict[str, str] = {}
    # True where a known MFU does not bound its gain (optimizations.yaml header): it raises the roof MFU is taken
    # against, cuts the model FLOPs per unit of work, or saves time outside the measured step
    beyond_mfu: bool = False

    def worded(self, workload: object, vendor: str | None = None) -> tuple[str, str]:
        """(title, how) for this workload (a `workload` fact value, or None when unknown) on this vendor's parts (None
        when the hardware is unknown): the vendor's wording first, then the workload's, then the general one."""
        title, how = self.title, self.how
        wording = next((w for kind, w in self.for_workload.items() if kind == workload), None)
        if wording is not None:
            title, how = wording.title or title, wording.how or how
        on_vendor = self.for_vendor.get(vendor) if vendor is not None else None
        if on_vendor is not None:
            title, how = on_vendor.title or title, on_vendor.how or how
        return title, how

    @model_validator(mode="after")
    def _bound_sourced(self) -> Optimization:
        if self.max_term_speedup is not None and not self.bound_source:
            raise ValueError("max_term_speedup needs bound_source (where the bound comes from)")
        if self.data_term_speedup is not None and self.shrinks != "compute":
            raise ValueError("data_term_speedup bounds an optimization of the compute term (shrinks: compute)")
        if isinstance(self.data_term_speedup, float) and self.data_term_speedup < 1:
            raise ValueError("data_term_speedup is at least 1 (the D/BW term runs no slower)")
        if self.removes and not self.acts_on:
            raise ValueError("removes needs acts_on (the shares it takes away add to what it acts on)")
        if self.workloads and (outside := sorted(set(self.for_workload) - set(self.workloads))):
            raise ValueError(f"for_workload words it for {', '.join(outside)}, which `workloads` leaves out")
        return self


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

    available_tools: ToolsQuestion = ToolsQuestion.model_construct()  # the defaults (not validated at import)


class ToolMap(_Strict):
    schema_version: int = 1
    tools: dict[str, Tool]
    axes: dict[Axis, AxisTools]
    measurements: dict[str, Measurement]
    consultation: ConsultationWording = ConsultationWording.model_construct()


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


BAND_BOUNDS = ("fail_above", "pass_below", "fail_below", "pass_above")
"""The bounds a scorecard metric may set; a rule message names one as `{scorecard.<metric id>.<bound>}`."""


class Scorecard(_Strict):
    schema_version: int = 1
    source: str
    metrics: list[ScoreMetric]

    def bound(self, placeholder: str) -> float | None:
        """The band a message placeholder `scorecard.<metric id>.<bound>` names (a fraction), so that rule messages
        quote the scorecard instead of repeating its numbers; None when the scorecard sets no such band."""
        prefix, _, rest = placeholder.partition(".")
        metric_id, _, bound = rest.partition(".")
        if prefix != "scorecard" or bound not in BAND_BOUNDS:
            return None
        metric = next((m for m in self.metrics if m.id == metric_id), None)
        value: float | None = getattr(metric, bound) if metric is not None else None
        return value

    def bound_names(self) -> list[str]:
        """Every band placeholder the scorecard defines, in file order."""
        return [f"scorecard.{m.id}.{b}" for m in self.metrics for b in BAND_BOUNDS if getattr(m, b) is not None]


class ConfirmWith(_Strict):
    """The measurement that confirms a regime where its axis's row of seed Table 4 names the wrong tool (a
    communication-bound step is confirmed on the collectives' timeline, not by the DataLoader's wait)."""

    tool: str  # a tools.yaml `tools` id
    how: str
    source: str


class Regime(_Strict):
    title: str
    term: Term
    axes: dict[Axis, float]
    confirm_axis: Axis
    confirm_with: ConfirmWith | None = None
    source: str


Strength = Literal["suspect", "likely", "confirmed"]


class TermSpec(_Strict):
    """A term of the iron law (or a C³ term): the derived facts that hold its seconds and its share of the step."""

    label: str
    share: str | None = None  # None: not a share of the step (memory capacity must fit; it has no Amdahl bound)
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
    unexplained_label: str = "unexplained (the part of the measured step no known term accounts for)"
    precedence: list[str]
    regimes: dict[str, Regime]

    @model_validator(mode="after")
    def _precedence_complete(self) -> RegimeCatalog:
        if sorted(self.precedence) != sorted(self.regimes):
            raise ValueError("`precedence` must list every regime exactly once")
        if "unexplained" in self.terms:
            raise ValueError("`unexplained` is the iron-law table's last line (unexplained_label), not a term")
        return self

    def iron_law_terms(self) -> list[Term]:
        """The terms of the iron law, in file order: those with seconds of their own."""
        return [term for term, spec in self.terms.items() if spec.seconds]


KernelActivity = Literal["kernel", "memcpy", "memset"]


class KernelClass(_Strict):
    """One class of GPU activity (knowledge_base/kernels.yaml), recognised by name patterns."""

    id: Literal["gemm", "conv", "attention", "elementwise", "reduction", "communication", "host_transfer", "memcpy",
                "memset", "triton", "other"]
    title: str
    activities: list[KernelActivity] = ["kernel"]
    memory_bound_by_nature: bool
    reads_weights: bool = False  # its kernels may read the weights or the KV cache (what quantization shrinks)
    source: str
    rationale: str
    patterns: Patterns


def _check_patterns(patterns: list[str]) -> list[str]:
    """The patterns, after raising ValueError naming the first that is not a regular expression."""
    import re

    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"pattern {pattern!r} is not a regular expression: {exc}") from exc
    return patterns


Patterns = Annotated[list[str], Field(min_length=1), AfterValidator(_check_patterns)]
"""Name patterns (regular expressions), each checked when the knowledge base loads."""


class _Patterns(_Strict):
    """Names recognised by patterns (regular expressions, each checked when the knowledge base loads)."""

    source: str
    rationale: str
    patterns: Patterns


class CallPatterns(_Patterns):
    """Host runtime/driver calls of one role, by name patterns (regular expressions, case-sensitive)."""


class KernelCalls(_Strict):
    blocking: CallPatterns
    graph_launch: CallPatterns
    launch: CallPatterns
    # host operators and calls that copy data (a copy from pageable memory holds the launching thread)
    host_copy: CallPatterns | None = None
    # calls that return device memory to the driver (a caching allocator's flush, or empty_cache())
    device_free: CallPatterns | None = None


class TraceAnalysisSettings(_Strict):
    """Thresholds of the trace analysis (each with its source)."""

    top_n: int = Field(ge=1, le=100)
    launch_gap_max_us: float = Field(gt=0)
    launch_gap_source: str
    event_free_gap_us: float = Field(gt=0)
    event_free_gap_source: str
    warmup_min_tail_share: float = Field(gt=0, lt=1)
    warmup_source: str
    one_off_launch_min_us: float = Field(gt=0)
    one_off_launch_source: str
    min_shape_coverage: float = Field(gt=0, le=1)
    min_shape_coverage_source: str


class LowPrecisionGemm(_Patterns):
    """GEMM kernel names that run 16-bit or narrower tensor-core math, and the share of GEMM time that shows it."""

    min_share: float = Field(gt=0, le=1)
    # the format (a units.yaml dtype) each matching kernel computes in: the first entry whose patterns match wins
    formats: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _formats_compile(self) -> LowPrecisionGemm:
        for patterns in self.formats.values():
            _check_patterns(patterns)
        return self


class FusedMemoryBound(_Patterns):
    """Kernel names a compiler generated by fusing memory-bound ops, and the share of memory-bound GPU time in them
    that shows kernel fusion already applied."""

    min_share: float = Field(gt=0, le=1)


class FastConvolution(_Patterns):
    """Convolution kernel names of algorithms that do fewer multiply-adds than the direct count (Winograd, FFT)."""


class Tf32Gemm(_Patterns):
    """GEMM kernel names that run TF32 tensor-core math on fp32 tensors (regular expressions, case-insensitive)."""


class CollectiveKind(_Strict):
    """One kind of collective, by the names of the communication kernels that run it (case-insensitive)."""

    id: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    data_parallel: bool = False  # all-reduce, reduce-scatter, all-gather: gradients and parameters (kernels.yaml)
    patterns: Patterns


class Collectives(_Strict):
    """Which collective each communication kernel runs (kernels.yaml `collectives`), first match first."""

    source: str
    rationale: str
    kinds: list[CollectiveKind] = Field(min_length=1)


class KernelCatalog(_Strict):
    """knowledge_base/kernels.yaml: kernel classes, host call roles and the trace analysis thresholds."""

    schema_version: int = 1
    classes: list[KernelClass]
    calls: KernelCalls
    low_precision_gemm: LowPrecisionGemm | None = None
    tf32_gemm: Tf32Gemm | None = None
    fused_memory_bound: FusedMemoryBound | None = None
    fast_convolution: FastConvolution | None = None
    collectives: Collectives | None = None
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
    """A numeric format: bytes per element, and how PyTorch's profiler spells its tensors' element type."""

    bytes: int | float = Field(gt=0)  # fractional for sub-byte formats (fp4: 0.5)
    lower: list[str] = []  # the narrower formats lower precision moves to, preferred first (units.yaml header)
    tensor_cores: list[str] = []  # the formats its matmuls reach tensor cores in, preferred first (units.yaml header)
    torch_types: list[str] = []  # the profiler's `Input type` spellings of tensors in this format (units.yaml header)
    # the vendors (hardware.yaml `vendor`) on whose parts PyTorch runs matmuls in this format only when allowed
    # (units.yaml header: tf32 on NVIDIA parts)
    opt_in_vendors: list[str] = []


class ElementTypeSpec(_Strict):
    """A tensor element type that is no compute format (indices, masks, fp64, complex): bytes per element."""

    bytes: int | float = Field(gt=0)
    torch_types: list[str] = Field(min_length=1)


TorchTypes = dict[str, tuple[str, int | float]]
"""PyTorch profiler `Input type` spelling -> (element type, bytes per element)."""


class UnitTable(_Strict):
    schema_version: int = 1
    dimensions: dict[str, Dimension]
    dtypes: dict[str, DtypeSpec]
    element_types: dict[str, ElementTypeSpec] = {}
    quantized_weight_bytes: float = Field(0.5, gt=0)  # bytes per weight after the narrowest weight quantization
    quantized_training_bytes: float = Field(1.0, gt=0)  # bytes per value after the narrowest training format (fp8)
    quantized_kv_cache_bytes: float = Field(1.0, gt=0)  # bytes per KV-cache value after quantization (fp8)
    gradient_allreduce_bytes: float = Field(2.0, gt=0)  # the least bytes a data-parallel job all-reduces per gradient

    @model_validator(mode="after")
    def _types_distinct(self) -> UnitTable:
        both = set(self.dtypes) & set(self.element_types)
        if both:
            raise ValueError(f"{', '.join(sorted(both))}: in both `dtypes` and `element_types`")
        seen: dict[str, str] = {}
        for name, spec in self._element_specs():
            for spelling in spec.torch_types:
                if seen.setdefault(spelling, name) != name:
                    raise ValueError(f"torch type {spelling!r} is listed for both {seen[spelling]} and {name}")
        return self

    def _element_specs(self) -> list[tuple[str, DtypeSpec | ElementTypeSpec]]:
        return [*self.dtypes.items(), *self.element_types.items()]

    def narrower_format(self, dtype: str, hw: HardwareSpec) -> str | None:
        """The narrower format lower precision moves a `dtype` job to on `hw`: the first of the dtype's `lower` the
        part has at all (a null peak counts: the format exists, its figure is unpublished); None when it has none."""
        spec = self.dtypes.get(dtype)
        return next((d for d in (spec.lower if spec else []) if d in hw.peak_tflops), None)

    def tensor_core_format(self, dtype: str, hw: HardwareSpec) -> str:
        """The tensor-core format a `dtype` job runs its matmuls in on `hw`: the first of the dtype's `tensor_cores`
        the part has at all (a null peak counts: the format exists, its figure is unpublished), else the dtype."""
        spec = self.dtypes.get(dtype)
        return next((d for d in (spec.tensor_cores if spec else []) if d in hw.peak_tflops), dtype)

    def torch_types(self) -> TorchTypes:
        """Every profiler `Input type` spelling of a tensor element type: (its dtype or element type, bytes)."""
        return {spelling: (name, spec.bytes) for name, spec in self._element_specs() for spelling in spec.torch_types}


# ---- device-memory model of a training step (knowledge_base/memory.yaml) -------------------------------------------


class BytesPerParam(_Strict):
    """Bytes per parameter, part by part (the parts add up), with the source: what an optimizer step moves
    (`optimizer_step_traffic`, the step's floor over the peak bandwidth)."""

    bytes_per_param: float = Field(gt=0)
    parts: dict[str, float]
    source: str

    @model_validator(mode="after")
    def _parts_add_up(self) -> BytesPerParam:
        if abs(sum(self.parts.values()) - self.bytes_per_param) > 1e-9:
            raise ValueError(f"parts add up to {sum(self.parts.values())}, not bytes_per_param {self.bytes_per_param}")
        return self


class StateBytes(BytesPerParam):
    """Bytes per parameter of the model states kept on the GPU, part by part, with the source."""

    frozen_bytes_per_param: float = Field(2.0, gt=0)  # a parameter the optimizer does not train keeps its weight only

    @model_validator(mode="after")
    def _frozen_within_trained(self) -> StateBytes:
        if self.frozen_bytes_per_param > self.bytes_per_param:
            raise ValueError(f"a frozen parameter cannot keep more ({self.frozen_bytes_per_param} bytes) than a "
                             f"trained one ({self.bytes_per_param})")
        return self


class ActivationModel(_Strict):
    """Activation bytes kept for backward: `coefficient` · seq_len · batch · hidden_size per layer."""

    coefficient: float = Field(gt=0)
    assumptions: str
    source: str


class MemoryModel(_Strict):
    """knowledge_base/memory.yaml: model-state bytes per parameter (optimizer on the GPU or offloaded), the bytes an
    optimizer step moves, and the activation coefficient, the constants of the memory derivations."""

    schema_version: int = 1
    optimizer_on_gpu: StateBytes
    optimizer_offloaded: StateBytes
    optimizer_step_traffic: BytesPerParam | None = None  # the optimizer step's floor (optimizer_over_floor)
    activations: ActivationModel
