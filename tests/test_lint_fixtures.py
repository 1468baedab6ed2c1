"""Every lint against its fixtures: tests/fixtures/lint/<lint>/ triggers it, tests/fixtures/lint/clean/ must not.

A trailing ``# expect: DAMxxx`` comment in a fixture file marks the line a diagnostic must point at; the set of
(file, line, lint) found must equal the set annotated, so a lint that fires too often fails as surely as one that
misses.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from expert._resources import data_dir
from expert.rules.lint import LINTS, lint_paths

FIXTURES = Path(__file__).parent / "fixtures" / "lint"
DIRS = sorted(d for d in FIXTURES.iterdir() if d.is_dir() and (d.name.startswith("dam") or d.name == "clean"))
EXPECT = re.compile(r"#\s*expect:\s*(DAM\d{3}(?:\s*,\s*DAM\d{3})*)")

Triple = tuple[str, int, str]


def annotations(directory: Path) -> set[Triple]:
    out: set[Triple] = set()
    for path in sorted(directory.rglob("*.yaml")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = EXPECT.search(line)
            if match:
                for lint_id in re.split(r"\s*,\s*", match.group(1)):
                    out.add((path.relative_to(directory).as_posix(), number, lint_id))
    return out


def knowledge_base_for(directory: Path, tmp_path: Path) -> Path | None:
    """A copy of the knowledge base with the fixture's extra facts, when it has knowledge_base_patch.yml."""
    patch = directory / "knowledge_base_patch.yml"
    if not patch.is_file():
        return None
    kb = tmp_path / "knowledge_base"
    shutil.copytree(data_dir("knowledge_base"), kb)
    facts = yaml.safe_load((kb / "facts.yaml").read_text(encoding="utf-8"))
    facts["facts"] += yaml.safe_load(patch.read_text(encoding="utf-8"))
    (kb / "facts.yaml").write_text(yaml.safe_dump(facts, sort_keys=False), encoding="utf-8")
    return kb


@pytest.mark.parametrize("directory", DIRS, ids=[d.name for d in DIRS])
def test_fixture_reports_exactly_what_it_marks(directory: Path, tmp_path: Path) -> None:
    result = lint_paths([directory], builtin=False, knowledge_base=knowledge_base_for(directory, tmp_path),
                        run_tests=(directory / "tests").is_dir())
    found = {(Path(d.path).resolve().relative_to(directory.resolve()).as_posix(), d.line or 0, d.lint)
             for d in result.diagnostics}
    expected = annotations(directory)
    assert found == expected, "\n".join(
        [f"missing: {t}" for t in sorted(expected - found)] + [f"unexpected: {t}" for t in sorted(found - expected)]
        + [str(d) for d in result.diagnostics])
    severities = {LINTS_BY_ID_SEVERITY[lint] for _, _, lint in expected}
    assert result.exit_code == (2 if "error" in severities else 1 if severities else 0)


LINTS_BY_ID_SEVERITY = {lint.id: lint.severity for lint in LINTS}


def test_every_lint_has_a_fixture_that_triggers_it() -> None:
    marked = {lint for directory in DIRS for _, _, lint in annotations(directory)}
    untested = {lint.id for lint in LINTS} - marked - {"DAM012"}  # DAM012 (a loader message no lint names): test_lint
    assert not untested, f"lints without a triggering fixture: {sorted(untested)}"


def test_clean_fixture_runs_its_tests_and_has_nothing_to_say() -> None:
    result = lint_paths([FIXTURES / "clean"], builtin=False)
    assert result.tests_run and result.diagnostics == [] and result.exit_code == 0
    assert result.rules == 5


def test_waived_diagnostic_is_kept_aside_with_its_reason() -> None:
    result = lint_paths([FIXTURES / "dam115_waivers"], builtin=False, run_tests=False)
    assert [(d.lint, d.subject, d.waived) for d in result.waived] == [("DAM101", "fx-percent",
                                                                       "fixture: the waived finding")]
    assert all(d.lint == "DAM115" for d in result.diagnostics)
