"""`pip install .` (not editable) into a fresh virtual environment, then `dam` from another directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env, timeout=900)


def test_wheel_carries_rules_and_knowledge_base(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT)
    assert built.returncode == 0, built.stderr
    wheel = next(dist.glob("dam_expert-*.whl"))

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = _run(python, "-m", "pip", "install", "-q", wheel)
    assert installed.returncode == 0, installed.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "obs.yaml").write_text("gpu_util: 45%\ndata_wait_s: 120 ms\nstep_time_s: 300 ms\n")
    dam = env_dir / "bin" / "dam"
    for args in (["diagnose", "obs.yaml", "--format", "json"],
                 ["diagnose", "--example", "llm_decode_batch1", "--format", "json"]):
        result = _run(dam, *args, cwd=elsewhere)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["bottleneck"] in ("input", "memory")
    where = _run(python, "-c", "import expert, expert._resources as r; print(expert.__file__); "
                 "print(r.data_dir('rules')); print(expert.default_expert().engine_name)", cwd=elsewhere)
    assert where.returncode == 0, where.stderr
    module, rules, engine = where.stdout.split()
    assert str(env_dir) in module and str(env_dir) in rules and rules.endswith("_data/rules")
    assert engine == ("durable-rules" if sys.version_info < (3, 13) else "pure")
