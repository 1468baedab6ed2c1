"""The derivation registry: every way a derived fact is computed, with its inputs and its gate declared as data.

A `Derivation` names its output, the facts it needs (all must be known), the formula in words, its source, and the
function that computes it from the facts (`expert.derive.formulas` holds the arithmetic). When a formula applies only
to some jobs or only where the catalog has a figure, its `gate` says so as a condition on facts in the rule
language's own condition model (`expert.rules.model`): "phase = decode and the workload is inference or not given",
"hardware is one the catalog publishes a dense peak for in this dtype". The walker (`expert.derive.graph`) applies a
formula only where its gate holds, and everyone who asks whether a formula could still apply (the report's missing
evidence, the consultation) reads the gate instead of trying the formula: a formula never declines, so an error in
one is an error, not a missing input.

The derivations live in one module per topic (`single_gpu`, `llm`, `cluster`, `margins`; the record types in
`derivation`); this module puts them in the one order the walker applies them in a single pass: a derivation comes
after those whose outputs it reads, and of several ways to one output the first whose inputs are known wins.
"""

from __future__ import annotations

from .cluster import (
    CATALOG_LINK,
    CLUSTER,
    GRADIENT_TRAFFIC,
    OWN_LINK,
    PARALLEL_LAYOUT,
    SEVERAL_GPUS,
    SOME_FAILURES,
    TOPOLOGY,
)
from .derivation import LLM_DECODE, Derivation, Gate, Result
from .gain_bounds import GAIN_BOUNDS
from .llm import (
    LLM_DECODE_IN_TURNS,
    LLM_DECODE_RATIO,
    LLM_DECODE_UTIL,
    LLM_RATES,
    LLM_SERVING_HOST_MEMORY,
    MODEL_SHAPE,
    OPTIMIZER_OFFLOADED,
    OPTIMIZER_ON_GPU,
    PREFILL_OR_FORWARD,
    PUBLISHED_MEMORY,
    SERVING,
    TRAINING,
)
from .margins import CONSISTENCY_MARGINS, SOME_ACHIEVED
from .single_gpu import (
    DECODE_WEIGHT_STREAMING,
    FP8_PEAK,
    IRON_LAW,
    KERNEL_TIMELINE,
    PEAKS_AND_ROOFLINE,
    PUBLISHED_BANDWIDTH,
    PUBLISHED_PEAK,
    SCORECARD,
)

DERIVATIONS: tuple[Derivation, ...] = (
    *PARALLEL_LAYOUT,  # from observed facts alone: data_parallel_size before the decode rate reads it (LLM_RATES)
    *KERNEL_TIMELINE,  # the idle share where no trace measures it, before everything that reads it
    *PEAKS_AND_ROOFLINE,
    *LLM_RATES,  # the tokens/s ways to achieved_tflops, before mfu reads it
    *SCORECARD,
    *LLM_DECODE_UTIL,  # the KV-cache-aware decode bandwidth before the weights-only one
    *DECODE_WEIGHT_STREAMING,
    *LLM_DECODE_RATIO,
    *LLM_DECODE_IN_TURNS,  # reads mem_bw_util, either way
    *IRON_LAW,
    *GAIN_BOUNDS,  # the most lower precision, a faster GPU or tensor cores can speed the compute term up
    *CLUSTER,
    *LLM_SERVING_HOST_MEMORY,
    *MODEL_SHAPE,
    *CONSISTENCY_MARGINS,
    *TOPOLOGY,  # reads gpus_per_node, which the margins derive
)

__all__ = ["CATALOG_LINK", "DERIVATIONS", "FP8_PEAK", "GRADIENT_TRAFFIC", "LLM_DECODE", "OPTIMIZER_OFFLOADED",
           "OPTIMIZER_ON_GPU", "OWN_LINK", "PREFILL_OR_FORWARD", "PUBLISHED_BANDWIDTH", "PUBLISHED_MEMORY",
           "PUBLISHED_PEAK", "SERVING", "SEVERAL_GPUS", "SOME_ACHIEVED", "SOME_FAILURES", "TRAINING",
           "Derivation", "Gate", "Result"]
