"""Running the lints: load the files (with positions), build the context, check, apply waivers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from ..._resources import data_dir
from ..._yaml import short_location, validation_errors
from ...errors import KnowledgeBaseError, Problem, not_a_file
from ...kb.knowledge import KnowledgeBase
from ..model import RuleFile
from ..ruleset import RuleSet, rule_file_paths
from ..testing import RuleTestFile, run_suite
from .context import LintContext
from .core import (
    WAIVER_FILE,
    Diagnostic,
    Lint,
    LintResult,
    SourceFile,
    YamlPath,
    _blank,
    _loc_path,
    _suggest,
    load_positioned,
)
from .load import InvalidYaml, LoadError, SchemaViolation
from .registry import LINTS, LINTS_BY_ID
from .rule_tests import InvalidRuleTest
from .waivers import UnusedWaiver, WaiverFile


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _load_file(path: Path, kind: Literal["rules", "tests", "waivers"], model: type[BaseModel], target: bool,
               errors: list[Diagnostic]) -> SourceFile:
    source = SourceFile(path=path, display=_display(path), kind=kind, target=target)

    def error(lint: type[Lint], line: int | None, message: str, hint: str = "") -> None:
        errors.append(Diagnostic(lint=lint.id, name=lint.name, severity="error", path=source.display, line=line,
                                 message=message, hint=hint))

    try:
        data, lines, duplicates = load_positioned(path)
    except (OSError, UnicodeDecodeError) as exc:
        error(InvalidYaml, None, f"cannot read the file: {exc}")
        return source
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        context = getattr(exc, "context_mark", None)
        what = getattr(exc, "context", None)
        opened = f" ({what} at line {context.line + 1})" if context is not None and what else ""
        error(InvalidYaml, mark.line + 1 if mark is not None else None,
              f"invalid YAML: {getattr(exc, 'problem', None) or exc}{opened}")
        return source
    source.data, source.lines = data, lines
    for line, key in duplicates:
        error(InvalidYaml, line, f"duplicate key {key!r} (only the last value would be used)")
    if data is None:
        error(SchemaViolation, None, "the file is empty", "it must hold a YAML mapping")
        return source
    try:
        source.model = model.model_validate(data)
    except ValidationError as exc:
        for where, msg in validation_errors(exc):
            loc = _loc_path(data, where)
            field_name = short_location(where)
            error(SchemaViolation, source.line(loc), f"{field_name or 'file'}: {msg}")
    return source


def _targets(paths: Sequence[Path]) -> tuple[list[Path], set[Path]]:
    """(rules directories, resolved target files) for the paths given on the command line."""
    dirs: list[Path] = []
    targets: set[Path] = set()
    accepted = "give a rules directory, a rule file (*.yaml) or a rule test file (tests/*.test.yaml)"
    for path in paths:
        what = not_a_file(path)
        if what is not None and what != "a directory":
            raise KnowledgeBaseError([Problem(str(path), "no such file or directory" if what == "no such file"
                                              else f"{what}, not a rule file", accepted)], title="cannot lint")
        if path.is_dir():
            folder = path
            found = {p.resolve() for p in rule_file_paths(path)}
            found |= {p.resolve() for p in (path / "tests").glob("*.test.yaml")}
            if not found:
                raise KnowledgeBaseError([Problem(str(path), "a directory without rule files (no *.yaml in it or "
                                                  "below it, no tests/*.test.yaml)", accepted)], title="cannot lint")
            targets |= found
            if (path / WAIVER_FILE).is_file():
                targets.add((path / WAIVER_FILE).resolve())
        elif path.suffix != ".yaml":
            kind = f"a {path.suffix} file" if path.suffix else "a file without a suffix"
            raise KnowledgeBaseError([Problem(str(path), f"{kind}, not a rule file",
                                              accepted)], title="cannot lint")
        else:
            folder = path.parent.parent if path.parent.name == "tests" else path.parent
            targets.add(path.resolve())
        if folder.resolve() not in {d.resolve() for d in dirs}:
            dirs.append(folder)
    return dirs, targets


def lint_paths(paths: Sequence[str | Path] = (), *, builtin: bool = True,
               knowledge_base: str | Path | KnowledgeBase | None = None, run_tests: bool = True) -> LintResult:
    """Lint rule directories or files (default: the built-in rules).

    Diagnostics are reported for the given paths only; the built-in rules are loaded beside them as context (so a
    team's rules may read built-in findings and named conditions) unless `builtin` is False. The rule tests of the
    directories run (with the knowledge base's directory) unless `run_tests` is False. Raises KnowledgeBaseError
    only when a path does not exist or the knowledge base itself cannot be loaded.
    """
    builtin_dir = data_dir("rules")
    given = [Path(p) for p in paths] or [builtin_dir]
    dirs, targets = _targets(given)
    if builtin and builtin_dir.resolve() not in {d.resolve() for d in dirs}:
        dirs.append(builtin_dir)
    if isinstance(knowledge_base, KnowledgeBase):
        kb = knowledge_base
        kb_dir = kb.source or data_dir("knowledge_base")
    else:
        kb_dir = Path(knowledge_base) if knowledge_base is not None else data_dir("knowledge_base")
        kb = KnowledgeBase.load(kb_dir)

    load_errors: list[Diagnostic] = []
    files = [_load_file(p, "rules", RuleFile, p.resolve() in targets, load_errors)
             for d in dirs for p in rule_file_paths(d)]
    tests = [_load_file(p, "tests", RuleTestFile, p.resolve() in targets, load_errors)
             for d in dirs for p in sorted((d / "tests").glob("*.test.yaml"))]
    waivers = [_load_file(d / WAIVER_FILE, "waivers", WaiverFile, (d / WAIVER_FILE).resolve() in targets, load_errors)
               for d in dirs if (d / WAIVER_FILE).is_file()]
    ctx = LintContext(kb, kb_dir, dirs, files, tests, waivers, load_errors)

    diagnostics: list[Diagnostic] = []
    for lint in LINTS:
        if not lint.needs_tests and lint is not InvalidRuleTest:
            diagnostics += lint().check(ctx)
    errors = [d for d in diagnostics if d.severity == "error"]
    if not errors:
        try:
            ruleset = RuleSet([(f.path, f.model) for f in files], kb)
        except KnowledgeBaseError as exc:
            diagnostics += _load_problems(ctx, exc.problems)
        else:
            if run_tests:
                ctx.suite = _run_tests(ctx, ruleset)
                for lint in LINTS:
                    if lint.needs_tests:
                        diagnostics += lint().check(ctx)
    diagnostics += InvalidRuleTest().check(ctx)

    shown_paths = {f.display for f in [*files, *tests, *waivers] if f.target}
    reported = [d for d in diagnostics if d.path in shown_paths]
    kept, waived = _apply_waivers(ctx, reported)
    kept.sort(key=lambda d: (d.severity != "error", d.path, d.line or 0, d.lint))
    waived.sort(key=lambda d: (d.path, d.line or 0, d.lint))
    return LintResult(diagnostics=kept, waived=waived, files=len([f for f in files if f.target]),
                      rules=len([s for s in ctx.rules if s.file.target]), tests_run=ctx.suite is not None)


def _load_problems(ctx: LintContext, problems: Iterable[Problem]) -> list[Diagnostic]:
    """The loader's problems as DAM012 diagnostics, located at the rule they name when possible."""
    out = []
    for problem in problems:
        file = next((f for f in ctx.files if problem.where.startswith(str(f.path))), None)
        site = None
        if file is not None:
            rest = problem.where[len(str(file.path)):]
            site = next((s for s in ctx.rules if s.file is file and f"rule {s.rule.id}" in rest), None)
        target = file or (ctx.files[0] if ctx.files else None)
        if target is None:
            continue
        out.append(Diagnostic(lint=LoadError.id, name=LoadError.name, severity="error", path=target.display,
                              line=site.line if site else None, subject=site.rule.id if site else None,
                              message=problem.message, hint=problem.hint))
    return out


def _run_tests(ctx: LintContext, ruleset: RuleSet) -> Any:
    from ...expert import Expert

    expert = Expert(rules_dirs=ctx.dirs, knowledge_base=ctx.kb_dir, engine="pure")
    test_files = [(tf.path, tf.model) for tf in ctx.tests if tf.model is not None]
    scope = [s.rule.id for s in ctx.rules if s.file.target and s.rule.id in ruleset.rules]
    return run_suite(expert, test_files, scope)


def _apply_waivers(ctx: LintContext, diagnostics: list[Diagnostic]) -> tuple[list[Diagnostic], list[Diagnostic]]:
    waivers: dict[tuple[str, str], tuple[str, SourceFile, YamlPath]] = {}
    problems: list[Diagnostic] = []
    for wf in ctx.waiver_files:
        if wf.model is None:
            continue
        model: WaiverFile = wf.model
        for subject, lints in model.waivers.items():
            for lint_id, reason in lints.items():
                path: YamlPath = ("waivers", subject, lint_id)
                lint = LINTS_BY_ID.get(lint_id)
                if lint is None:
                    problems.append(ctx.diag(UnusedWaiver, wf, path, f"unknown lint {lint_id!r}", subject=subject,
                                             hint=_suggest(lint_id, LINTS_BY_ID)))
                elif lint.severity == "error":
                    problems.append(ctx.diag(UnusedWaiver, wf, path, f"{lint_id} is an error and cannot be waived",
                                             subject=subject))
                elif _blank(reason):
                    problems.append(ctx.diag(UnusedWaiver, wf, path, "a waiver needs a reason", subject=subject))
                else:
                    waivers[(subject, lint_id)] = (reason, wf, path)
    kept: list[Diagnostic] = []
    waived: list[Diagnostic] = []
    used: set[tuple[str, str]] = set()
    for d in diagnostics:
        key = (d.subject or "", d.lint)
        if d.severity == "warning" and key in waivers:
            waived.append(d.model_copy(update={"waived": waivers[key][0]}))
            used.add(key)
        else:
            kept.append(d)
    for key, (_, wf, at) in waivers.items():
        if key not in used and wf.target and (ctx.suite is not None or not LINTS_BY_ID[key[1]].needs_tests):
            kept.append(ctx.diag(UnusedWaiver, wf, at, f"waiver of {key[1]} for {key[0]} suppresses nothing",
                                 subject=key[0]))
    kept += [d for d in problems if any(f.display == d.path and f.target for f in ctx.waiver_files)]
    return kept, waived
