"""Session-wide fixtures: multi-rank traces generated once per test session into a temporary directory, and a copy of
the bundled knowledge base for a test to edit (`kb_copy`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

GEN = Path(__file__).parent / "gen_traces"
SHARED = Path(os.environ.get("DAM_SHARED") or Path(__file__).resolve().parents[1].parent / "shared")
CONTROL = SHARED / "traces" / "hta" / "trace_diff_control_control.json.gz"


_OLD_XDG_CACHE_HOME: list[tuple[str | None, str]] = []  # (the variable before, the directory made for the suite)


def pytest_configure(config: pytest.Config) -> None:
    """The suite's Experts (and the `dam` processes it starts) cache their loaded rules in a directory of its own,
    never in the user's ~/.cache (expert/_loadcache.py); set before collection, which builds Experts too."""
    made = tempfile.mkdtemp(prefix="dam-test-cache-")
    _OLD_XDG_CACHE_HOME.append((os.environ.get("XDG_CACHE_HOME"), made))
    os.environ["XDG_CACHE_HOME"] = made


@pytest.fixture
def kb_copy(tmp_path: Path) -> Path:
    """A copy of the bundled knowledge base in a temporary directory, for a test to edit before loading it."""
    from expert._resources import data_dir

    target = tmp_path / "knowledge_base"
    shutil.copytree(data_dir("knowledge_base"), target)
    return target


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _OLD_XDG_CACHE_HOME:
        return
    old, made = _OLD_XDG_CACHE_HOME.pop()
    shutil.rmtree(made, ignore_errors=True)
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(scope="session")
def gloo_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 3-rank DDP job on the CPU (gloo), rank 2 slowed by 40 ms of extra compute per step (make_rank_traces)."""
    pytest.importorskip("torch", reason="torch is not installed (pip install -e .[traces])")
    out = tmp_path_factory.mktemp("gloo_job")
    subprocess.run([sys.executable, str(GEN / "make_rank_traces.py"), str(out), "--ranks", "3", "--slow-rank", "2",
                    "--slow-ms", "40", "--steps", "4"], check=True, capture_output=True, timeout=300)
    return out


def _gpu_ranks(tmp_path_factory: pytest.TempPathFactory, name: str, *args: str) -> Path:
    if not CONTROL.is_file():
        pytest.skip(f"the shared real traces are not at {CONTROL.parent} (set DAM_SHARED)")
    out = tmp_path_factory.mktemp(name)
    subprocess.run([sys.executable, str(GEN / "make_gpu_ranks.py"), str(out), "--source", str(CONTROL), *args],
                   check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="session")
def gpu_straggler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 ranks of the real A100 trace; rank 2 computes 1.5x as long, the others wait for it (make_gpu_ranks)."""
    return _gpu_ranks(tmp_path_factory, "gpu_straggler", "--ranks", "4", "--slow-rank", "2", "--slow-factor", "1.5")


@pytest.fixture(scope="session")
def gpu_fast_link(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 ranks of the real A100 trace on a link 4x as fast (every NCCL kernel a quarter as long), no straggler."""
    return _gpu_ranks(tmp_path_factory, "gpu_fast_link", "--ranks", "2", "--link-factor", "0.25")
