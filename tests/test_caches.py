"""Caches belong to the modules that compute them: nothing is written on the knowledge base or the rule set, and
an Expert's knowledge base and rules are freed with it (the caches hold them weakly)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import expert
from expert.consult.session import play

FACTS = {"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": 0.5, "data_wait_s": 0.1, "step_time_s": 0.3}
LAZY = {"ruleset.by_id", "ruleset.by_stratum", "kb._alias_index", "rule._evaluator"}  # their own lazy values


def _state(ex: expert.Expert) -> dict[str, Any]:
    """Every attribute of the knowledge base, the rule set and its rules, with the size of the containers."""
    objects = [("kb", ex.kb), ("ruleset", ex.ruleset), *((f"rule {lr.id}", lr) for lr in ex.ruleset.rules.values())]
    out: dict[str, Any] = {}
    for name, obj in objects:
        for key, value in vars(obj).items():
            if f"{name.split()[0]}.{key}" not in LAZY:
                out[f"{name}.{key}"] = len(value) if isinstance(value, (dict, list, set)) else id(value)
    return out


def _use(ex: expert.Expert) -> tuple[weakref.ref[Any], weakref.ref[Any], dict[str, Any], dict[str, Any]]:
    before = _state(ex)
    ex.diagnose(FACTS)
    play(FACTS, ex)
    return weakref.ref(ex.kb), weakref.ref(ex.ruleset), before, _state(ex)


def test_no_cache_is_written_on_the_knowledge_base_or_the_rules_and_they_are_freed_with_the_expert() -> None:
    kb, ruleset, before, after = _use(expert.Expert(engine="pure"))
    assert before == after
    gc.collect()
    assert kb() is None and ruleset() is None
