"""The vocabulary is knowledge-base data: dtypes, axes and terms are defined in YAML and checked when it loads."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from expert import Expert, KnowledgeBaseError
from expert._resources import data_dir
from expert.kb.knowledge import KnowledgeBase


def _kb_copy(tmp_path: Path) -> Path:
    target = tmp_path / "kb"
    shutil.copytree(data_dir("knowledge_base"), target)
    return target


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path.name}"
    path.write_text(text.replace(old, new, 1))


def test_a_new_dtype_needs_yaml_only(tmp_path: Path) -> None:
    kb_dir = _kb_copy(tmp_path)
    int8 = "  int8: {bytes: 1, torch_types: [signed char]}"
    _edit(kb_dir / "units.yaml", int8, int8 + "\n  fp4: {bytes: 0.5}")
    _edit(kb_dir / "facts.yaml", "choices: [fp32, tf32, bf16, fp16, fp8, int8]",
          "choices: [fp32, tf32, bf16, fp16, fp8, int8, fp4]")
    hardware = (kb_dir / "hardware.yaml").read_text()
    # give the H100 SXM an fp4 peak in its peak_tflops mapping (the first one listed after its id)
    start = hardware.index("id: h100-sxm")
    at = hardware.index("peak_tflops:", start)
    brace = hardware.index("{", at)
    (kb_dir / "hardware.yaml").write_text(hardware[:brace + 1] + "fp4: 3958, " + hardware[brace + 1:])
    kb = KnowledgeBase.load(kb_dir)
    assert kb.dtype_bytes("fp4") == 0.5
    report = Expert(knowledge_base=kb_dir).diagnose({
        "hardware": "h100-sxm", "dtype": "fp4", "workload": "inference", "phase": "decode", "batch_size": 1,
        "model_params": 7e9, "tokens_per_s": 100})
    decode = report.derived["arithmetic_intensity"]
    assert decode.constants["bytes per weight"] == 0.5
    assert decode.value == pytest.approx(4.0)  # 2·b / b_w FLOP/byte at batch 1: 2 / 0.5


@pytest.mark.parametrize(("file", "old", "new", "message"), [
    ("hardware.yaml", "peak_tflops: {", "peak_tflops: {fp6: 1, ", "unknown dtype 'fp6'"),
    ("facts.yaml", "choices: [fp32, tf32, bf16, fp16, fp8, int8]", "choices: [fp32, tf32, bf16, fp16, fp8, int8, fp6]",
     "the choices of `dtype` must be units.yaml `dtypes`"),
    ("regimes.yaml", "confirm_axis: machine", "confirm_axis: network", "unknown axis 'network'"),
    ("regimes.yaml", "term: compute", "term: thermal", "unknown term 'thermal'"),
    ("kernels.yaml", "patterns: ['tf32', ", "patterns: ['tf32(', ", "pattern 'tf32(' is not a regular expression"),
    ("kernels.yaml", "patterns: ['^(cuda|hip)Launch', ", "patterns: ['^(cuda|hip)Launch[', ",
     "pattern '^(cuda|hip)Launch[' is not a regular expression"),
    ("kernels.yaml", "fp8: ['e4m3', ", "fp8: ['e4m3)', ", "pattern 'e4m3)' is not a regular expression"),
])
def test_names_outside_the_vocabulary_are_load_errors(tmp_path: Path, file: str, old: str, new: str,
                                                       message: str) -> None:
    kb_dir = _kb_copy(tmp_path)
    _edit(kb_dir / file, old, new)
    with pytest.raises(KnowledgeBaseError) as info:
        KnowledgeBase.load(kb_dir)
    assert message in str(info.value)


def test_a_rule_voting_for_an_unknown_axis_does_not_load(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(re.sub(r"^ {8}", "", """
        schema_version: 1
        rules:
          - id: votes-network
            title: t
            source: s
            rationale: r
            when: {fact: gpu_util, lt: 0.5}
            then: {axis: {axis: network, strength: likely}}
        """, flags=re.M))
    with pytest.raises(KnowledgeBaseError) as info:
        Expert(rules_dirs=[rules])
    assert "unknown axis 'network'" in str(info.value)
