"""Behaviour is unchanged unless intended: every golden output still has its recorded digest.

After an intended change of behaviour, rerun `python tests/golden/record.py` and commit digests.json with the change;
`--dump DIR` on two versions shows what differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "golden"))

import record


def test_golden_outputs_are_unchanged() -> None:
    want = json.loads(record.DIGESTS.read_text())
    found = record.digests()
    changed = sorted(k for k in want.keys() | found.keys() if want.get(k) != found.get(k))
    assert not changed, f"{len(changed)} golden outputs differ (first: {changed[:5]}); see tests/golden/record.py"
