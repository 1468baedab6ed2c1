"""The record types of the derivation registry and the helpers every topic module shares.

A `Derivation` names its output, the facts it needs (all must be known), the formula in words, its source, and the
function that computes it from the facts (`expert.derive.formulas` holds the arithmetic). When a formula applies only
to some jobs or only where the catalog has a figure, its `Gate` says so as a condition on facts in the rule
language's own condition model (`expert.rules.model`). The topic modules (`single_gpu`, `llm`, `cluster`,
`margins`) declare the derivations; `expert.derive.registry` puts them in the one order the walker applies them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..kb.knowledge import HardwareSpec, KnowledgeBase
from ..rules.model import AllOf, AnyOf, Condition, FactTest
from .formulas import Facts, Value

_T = TypeVar("_T")

@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 3x (object.__setattr__ per field), ~30 a walk
class Result:
    """What a formula gives: the value, the catalog figures it used (with their source), a note (a clamp). Treat it
    as immutable: the walk's memo shares one Result between the diagnoses that derive the same value."""

    value: float
    constants: dict[str, Value] = field(default_factory=dict)
    note: str | None = None


@dataclass(frozen=True)
class Gate:
    """When a derivation applies, as a condition on facts. `condition` is the condition itself or, for a gate on
    catalog data, how to write it for a knowledge base (it lists the catalog entries that have the figure)."""

    description: str
    condition: Condition | Callable[[KnowledgeBase], Condition]

    def on(self, kb: KnowledgeBase) -> Condition:
        """The condition for this knowledge base."""
        return self.condition(kb) if callable(self.condition) else self.condition

    def on_static(self) -> Condition:
        """The condition of a gate that does not depend on the knowledge base."""
        if callable(self.condition):
            raise TypeError(f"gate {self.description!r} is written per knowledge base")
        return self.condition


@dataclass(frozen=True)
class Derivation:
    """One way to compute `output` from `inputs` (all must be known), where its `gate` (if any) holds."""

    output: str
    inputs: tuple[str, ...]
    formula: str
    source: str
    compute: Callable[[Facts, KnowledgeBase], Result]
    gate: Gate | None = None
    optional: tuple[str, ...] = ()  # also used, and recorded among the inputs, when known (the iron law's other terms)
    substitutes: tuple[tuple[str, str], ...] = ()  # (input, fact used in its place when known)
    needs: frozenset[str] = field(init=False, repr=False, compare=False)  # `inputs` as a set, for the hot loop

    def __post_init__(self) -> None:
        object.__setattr__(self, "needs", frozenset(self.inputs))

    @property
    def gated(self) -> bool:
        """Whether the derivation applies only where its gate holds (LLM decode only, a link the GPU has)."""
        return self.gate is not None

    def recorded_inputs(self, facts: Mapping[str, Value]) -> dict[str, Value]:
        """The inputs a derived value records: every input, and the optional ones that are known."""
        used = {name: facts[name] for name in self.inputs}
        if self.optional:
            used.update({name: facts[name] for name in self.optional if name in facts})
        return used


def required(value: _T | None, what: str) -> _T:
    """A catalog figure the derivation's gate promised; its absence is a bug in the gate, not a missing input."""
    if value is None:
        raise LookupError(f"the gate let the formula through, but the catalog has no {what}")
    return value


# ---- shared helpers: gates, facts, catalog look-ups --------------------------------------------------------------


# Gates are written here in code, from constants and catalog ids, so their condition models are built as validation
# would build them (`model_construct`: the same fields, defaults and fields set; tests/test_cold_models.py checks
# every gate of the registry against `model_validate`) without building the condition models' validators when the
# derivation modules import: a cold `dam diagnose` builds none at all.


def fact_test(name: str, **test: Any) -> FactTest:
    """A fact test of the rule language (`{"fact": name, **test}`), for gates."""
    built = FactTest.model_construct(fact=name, **test)
    built.ops()  # what validating leaves behind beside the fields: its operator check caches the (operator, constant)s
    return built


def all_of(branches: list[Condition]) -> AllOf:
    """`{"all": branches}`: every branch holds."""
    return AllOf.model_construct(all=branches)


def either(branches: list[Condition]) -> AnyOf:
    """`{"any": branches}`: some branch holds."""
    return AnyOf.model_construct(any=branches)


def any_of(branches: list[Condition]) -> Condition:
    """One branch as itself, several as `any`."""
    return branches[0] if len(branches) == 1 else either(branches)


MBU_SOURCE = ("Databricks, LLM inference performance engineering: MBU "
              "(https://www.databricks.com/blog/llm-inference-performance-engineering-best-practices)")
"""Where model bandwidth utilisation (a decode step's bytes over its time, over the peak) is defined."""

LLM_DECODE = Gate("LLM decode of an inference service (or of a job whose kind is not given)", all_of([
    fact_test("phase", eq="decode"),
    either([fact_test("workload", eq="inference"), fact_test("workload", known=False)])]))
PIPELINED = Gate("pipeline parallelism (one stage has no bubble)", fact_test("pipeline_parallel_size", ge=2))
PIPELINED_DECODE = Gate(f"{LLM_DECODE.description}, its layers split into pipeline stages",
                        all_of([LLM_DECODE.on_static(), PIPELINED.on_static()]))
LLM_PREFILL = Gate("LLM prompt prefill of an inference service (or of a job whose kind is not given)", all_of([
    fact_test("phase", eq="prefill"),
    either([fact_test("workload", eq="inference"), fact_test("workload", known=False)])]))
GPU_COUNT_POSSIBLE = either([*(fact_test(name, known=True) for name in ("num_gpus", "tensor_parallel_size",
                                                                          "pipeline_parallel_size")),
                             fact_test("weights_to_one_gpu", le=1.0), fact_test("weights_to_one_gpu", known=False)])
"""The GPUs known (num_gpus, or the tensor or pipeline parallel size), or one GPU can hold the weights (or their size
or the GPU's memory is not known): where they cannot fit one GPU and no count is given, the job runs sharded over
several or keeps weights in host memory, and a figure per GPU that takes one GPU would be taken on a GPU the job
cannot be on."""
NOT_SPECULATIVE = either([fact_test("uses_speculative_decoding", eq="no"),
                         fact_test("uses_speculative_decoding", known=False)])
"""Not said to decode speculatively: each weight read yields one token a sequence, so the token rate gives the bytes."""
LLM_DECODE_PER_GPU = Gate(f"{LLM_DECODE.description}, whose GPUs are known (num_gpus or the parallel sizes "
                          "given, or the weights fit one GPU), not decoding speculatively (a verifying pass yields a "
                          "varying number of tokens per weight read)",
                          all_of([LLM_DECODE.on_static(), GPU_COUNT_POSSIBLE, NOT_SPECULATIVE]))


def hardware_of(f: Facts, kb: KnowledgeBase) -> HardwareSpec:
    """The catalog entry of the `hardware` fact."""
    return kb.hardware[str(f["hardware"])]


def num(f: Facts, name: str) -> float:
    """A numeric fact as a float."""
    return float(f[name])


def num_or(f: Facts, name: str, default: _T) -> float | _T:
    """A numeric fact as a float, or `default` where it is not known (an optional input)."""
    value = f.get(name)
    return float(value) if isinstance(value, (int, float)) else default


DECODE_GPU_FACTS = ("num_gpus", "tensor_parallel_size", "pipeline_parallel_size")
"""What `decode_gpus` reads (the optional inputs of the derivations that call it)."""


def decode_gpus(f: Facts) -> int:
    """The GPUs a decode job's tokens_per_s is spread over: num_gpus; where it is not given, the GPUs one replica
    spans (tensor x pipeline parallel size, each 1 when not given); 1 when neither is given."""
    if "num_gpus" in f:
        return int(num(f, "num_gpus"))
    return int(num_or(f, "tensor_parallel_size", 1) * num_or(f, "pipeline_parallel_size", 1))


def clamp_fraction(value: float, what: str) -> Result:
    """A share clamped to [0, 1], with a note when it came out above 1."""
    if value > 1.0:
        return Result(1.0, note=f"{what} came out at {value:.2f} (> 1); clamped to 1 - check the inputs")
    return Result(max(0.0, value))


def params_streamed(f: Facts) -> float:
    """The parameters a step computes with: active_params when given (MoE), else model_params."""
    return num(f, "active_params") if "active_params" in f else num(f, "model_params")


ACTIVE_PARAMS = (("model_params", "active_params"),)  # decode streams the active parameters when they are known


def decode_bytes_left_out(f: Facts, kv_counted: bool) -> list[str]:
    """What a decode step's bytes, counted from the weights (and the KV cache where `kv_counted`), leave out at a
    batch of more than one, each as a note saying the count is a lower bound (none: all counted): the KV cache the
    sequences read, and for a mixture of experts the experts a batch reads beyond one token's active parameters
    (Mixtral, 2 of 8 experts a token: a batch of 32 leaves almost none unread)."""
    if "batch_size" not in f or (batch := int(num(f, "batch_size"))) <= 1:
        return []
    notes = [] if kv_counted else [f"the weights' bytes only: the KV cache the {batch} sequences read is not counted, "
                                   "so this is a lower bound"]
    if "active_params" in f and "model_params" in f and num(f, "active_params") < num(f, "model_params"):
        notes.append(f"the active parameters only: the {batch} sequences' tokens are routed to more experts than one "
                     "token is, so a step reads more of the weights, up to all of them; this is a lower bound")
    return notes
