"""Behaviour is unchanged unless intended: every golden output still has its recorded digest.

After an intended change of behaviour, rerun `python tests/golden/record.py` and commit digests.json with the change;
`--dump DIR` on two versions shows what differs. The check runs in a fresh interpreter: it pins what a new process
computes, whatever earlier tests of this session left in memory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RECORD = Path(__file__).parent / "golden" / "record.py"
ROOT = Path(__file__).resolve().parents[1]


def test_golden_outputs_are_unchanged() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, str(RECORD), "--check"], capture_output=True, text=True, env=env,
                            timeout=900, cwd=ROOT)
    changed = [line for line in result.stdout.splitlines() if line and not line.startswith("all ")]
    assert result.returncode == 0, (f"{len(changed)} golden outputs differ (first: {changed[:5]}); see "
                                    f"tests/golden/record.py\n{result.stderr[-2000:]}")
