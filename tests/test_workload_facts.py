"""Facts a workload does not have (knowledge_base/facts.yaml `workloads`): an inference service is neither asked for
its optimizer step or gradient bytes nor told to measure them; a training job still is."""

from __future__ import annotations

from typing import Any

import pytest

import expert
from expert.consult.session import Consultation
from expert.consult.session import answer_from as scripted_answer

EXPERT = expert.default_expert()
KB = EXPERT.kb
TRAINING_ONLY = {name for name, spec in KB.facts.items() if spec.workloads == ["training"]}

# eight GPUs in tensor parallelism spending 30 % of the step in collectives (rules/tests/cluster.test.yaml)
COLLECTIVES = {"num_gpus": 8, "tensor_parallel_size": 8, "comm_frac": 0.30, "hardware": "h100-sxm", "dtype": "bf16"}


def test_the_catalog_marks_the_optimizer_and_gradient_facts_training_only() -> None:
    assert {"gradient_bytes", "optimizer_step_s", "optimizer_offload", "fwd_bwd_s", "restart_time_s",
            "checkpoint_write_s", "gradient_accumulation_steps"} <= TRAINING_ONLY
    assert "data_wait_s" not in TRAINING_ONLY  # offline batch inference reads a dataset too
    spec = KB.facts["gradient_bytes"]
    assert spec.applies_to("training") and spec.applies_to(None) and not spec.applies_to("inference")


def _suggested(report: expert.Report) -> set[str]:
    return {m.fact for m in report.next_measurements if m.fact} | {m.fact for m in report.missing}


def test_a_service_is_not_told_to_measure_gradients() -> None:
    served = EXPERT.diagnose({**COLLECTIVES, "workload": "inference"})
    trained = EXPERT.diagnose({**COLLECTIVES, "workload": "training"})
    assert "gradient_bytes" in _suggested(trained)  # the collectives are the gradient all-reduce: how many bytes
    assert not _suggested(served) & TRAINING_ONLY, _suggested(served) & TRAINING_ONLY
    assert TRAINING_ONLY & {m.fact for m in EXPERT.diagnose({**COLLECTIVES}).missing}  # workload unsaid: either


def _asked(facts: dict[str, Any]) -> list[str]:
    c = Consultation(EXPERT)
    asked: list[str] = []
    q = c.next_question()
    while q is not None:
        asked.append(q.fact)
        raw = scripted_answer(q, facts, EXPERT)
        c.answer(q.fact, raw) if raw is not None else c.unknown(q.fact)
        q = c.next_question()
    return asked


@pytest.mark.parametrize("facts", [
    {**COLLECTIVES, "workload": "inference"},
    {"workload": "inference", "phase": "decode", "hardware": "a100-sxm-80gb", "dtype": "bf16", "batch_size": 1},
    {"workload": "inference"},  # everything else unknown: the longest session
], ids=["tensor-parallel-service", "batch-1-decode", "inference-only"])
def test_a_service_is_never_asked_a_training_only_fact(facts: dict[str, Any]) -> None:
    asked = _asked(facts)
    assert asked and not set(asked) & TRAINING_ONLY, set(asked) & TRAINING_ONLY
    members = {m for name in asked if (q := KB.questions.get(name)) for m in q.facts}
    assert not members & TRAINING_ONLY, members & TRAINING_ONLY


def test_a_training_job_is_still_asked_them() -> None:
    asked = _asked({**COLLECTIVES, "workload": "training"})
    assert set(asked) & (TRAINING_ONLY | {"checkpointing"}), asked
