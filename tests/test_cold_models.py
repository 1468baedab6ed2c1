"""Models built without validation on the cold `dam diagnose` path are the instances validation would build.

The derivation gates (expert/derive/derivation.py), observation files (expert/observations/file.py) and the
iron law and regime-table records of a report are made with `model_construct` / `bare_model`, so that a cold
diagnose builds no pydantic validator (issue 20); these tests hold each against `model_validate`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import expert
from expert.breakdown import TimeBreakdown
from expert.derive.registry import DERIVATIONS
from expert.errors import ObservationError
from expert.observations.file import ObservationFile, _observation_file, read_observation_file
from expert.observations.normalise import RankFigures
from expert.report.model import IronLaw, RegimeTableRecord

ROOT = Path(__file__).resolve().parents[1]


def _same(built: Any, validated: Any, where: str) -> None:
    """Equal values of the same types, and for models the same fields set, all the way down."""
    assert type(built) is type(validated), where
    if isinstance(built, BaseModel):
        assert built.__pydantic_fields_set__ == validated.__pydantic_fields_set__, where
        assert list(built.__dict__) == list(validated.__dict__), where
        for name in type(built).model_fields:
            _same(getattr(built, name), getattr(validated, name), f"{where}.{name}")
    elif isinstance(built, list):
        assert len(built) == len(validated), where
        for i, (a, b) in enumerate(zip(built, validated, strict=True)):
            _same(a, b, f"{where}[{i}]")
    elif isinstance(built, dict):
        assert list(built) == list(validated), where
        for key in built:
            _same(built[key], validated[key], f"{where}[{key!r}]")
    else:
        assert built == validated, where


def _revalidated(model: BaseModel) -> BaseModel:
    """The model as validation builds it from the same input (by alias, only the fields that were set)."""
    data = model.model_dump(by_alias=True, exclude_unset=True, round_trip=True)
    return type(model).model_validate(data)


def test_every_gate_condition_is_what_validation_builds() -> None:
    kb = expert.default_expert().kb
    gates = [d.gate for d in DERIVATIONS if d.gate is not None]
    assert gates, "the registry has gated derivations"
    for gate in gates:
        condition = gate.on(kb)
        _same(condition, _revalidated(condition), gate.description)


def _check_file(tmp_path: Path, text: str) -> ObservationFile:
    path = tmp_path / "obs.yaml"
    path.write_text(text)
    return read_observation_file(path)


def test_observation_files_are_what_validation_builds(tmp_path: Path) -> None:
    flat = _check_file(tmp_path, "gpu_util: 45%\nhardware: h100-sxm\n")
    _same(flat, ObservationFile(observations={"gpu_util": "45%", "hardware": "h100-sxm"}), "flat")
    ranks = [{"rank": 0, "file": "r0.json", "step_time_s": 0.3}]
    nested = _check_file(tmp_path, "description: a job\nobservations: {gpu_util: 0.5}\n"
                                   "ranks: [{rank: 0, file: r0.json, step_time_s: 0.3}]\n")
    _same(nested, ObservationFile(description="a job", observations={"gpu_util": 0.5},
                                  ranks=[RankFigures.model_validate(r) for r in ranks], time_breakdown=None), "nested")
    assert nested.model_dump() == ObservationFile.model_validate(nested.model_dump()).model_dump()


def test_observation_file_keys_that_are_not_strings_are_still_validated(tmp_path: Path) -> None:
    with pytest.raises(ObservationError, match="not a name"):  # the YAML reader refuses them first
        _check_file(tmp_path, "1: 2\n")
    with pytest.raises(ValidationError):  # and the model still does
        _observation_file({"observations": {1: 2}})


def test_report_records_are_what_validation_builds() -> None:
    report = expert.diagnose({"hardware": "h100-sxm", "dtype": "bf16", "gpu_util": 0.45, "data_wait_s": 0.12,
                              "step_time_s": 0.30})
    law = report.iron_law
    _same(law, IronLaw.model_validate(law.model_dump()), "iron_law")
    assert all(isinstance(t.seconds, (float, type(None))) for t in law.terms)
    tables = report.tables
    assert tables
    for t in tables:
        _same(t, RegimeTableRecord.model_validate(t.model_dump()), t.regime)


def test_a_cold_diagnose_builds_no_validator() -> None:
    """The bundled example diagnosed in a fresh process: no pydantic model is completed, and pydantic's plugin loader
    (importlib.metadata) is never imported."""
    code = """
import contextlib, io, sys
import pydantic._internal._model_construction as mc
built = []
complete = mc.complete_model_class
def record(cls, *args, **kwargs):
    built.append(cls.__qualname__)
    return complete(cls, *args, **kwargs)
mc.complete_model_class = record
from expert.commands import main
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["diagnose", "--example", "data_starved_training"]) == 0
print(built, "importlib.metadata" in sys.modules)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(2):  # the first may load the rules from their files into the suite's rule cache (validating them)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                             env=env)
    assert out.stdout.split()[-2:] == ["[]", "False"], out.stdout + out.stderr


def test_time_breakdown_in_a_file_is_still_validated(tmp_path: Path) -> None:
    with pytest.raises(ObservationError, match="time_breakdown"):
        _check_file(tmp_path, "observations: {gpu_util: 0.5}\ntime_breakdown: {nonsense: 1}\n")
    assert TimeBreakdown.model_fields
