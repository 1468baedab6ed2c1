"""`dam rules list|show|lint|test|docs`: the rule author's toolkit."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EPILOG = """\
examples:
  dam rules list                              every rule with its severity, source and test count
  dam rules show input-io-overhead-fail       one rule: rationale, conditions, conclusions, tests, consumers
  dam rules lint                              lint the built-in rules (exit 0 clean, 1 warnings, 2 errors)
  dam rules lint team_rules/                  lint a team's rules, with the built-in rules as context
  dam rules lint --explain DAM102             the docs page of one lint
  dam rules test                              run every rule test: per-rule table and coverage
  dam rules test --rules-dir team_rules/      the built-in tests plus a team's rules and tests/
  dam rules docs --output docs/rules.md       regenerate the rule reference (--check: fail if stale)
"""


def register(sub: Any) -> None:
    p = sub.add_parser("rules", help="list, show, lint, test and document the rules",
                       description="Tools for rule authors: list, show, lint, test and document the YAML rules.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="rules_command", metavar="ACTION", required=True)

    def rules_dir(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rules-dir", action="append", default=[], metavar="DIR",
                            help="extra rules directory (its rules, and its tests/ folder), beside the built-in rules")

    pl = actions.add_parser("list", help="every rule: id, title, severity, source, test count")
    rules_dir(pl)
    pl.add_argument("--format", choices=["rich", "json"], default="rich")
    pl.set_defaults(func=run_list)

    ps = actions.add_parser("show", help="one rule: rationale, conditions, conclusions, test cases, consumers")
    ps.add_argument("id", metavar="ID", help="rule id (see dam rules list)")
    rules_dir(ps)
    ps.set_defaults(func=run_show)

    pn = actions.add_parser("lint", help="structural errors and semantic lints (exit 0 clean, 1 warnings, 2 errors)",
                            description="Lint rule directories or files (default: the built-in rules). Errors first, "
                                        "then warnings, each with file:line and a lint id (--explain ID).")
    pn.add_argument("paths", nargs="*", metavar="PATH", help="rules directory or rule/test file")
    pn.add_argument("--isolated", action="store_true",
                    help="do not load the built-in rules as context for the given paths")
    pn.add_argument("--no-tests", action="store_true", help="do not run the rule tests (skips DAM110, DAM111)")
    pn.add_argument("--format", choices=["text", "json"], default="text")
    pn.add_argument("--show-waived", action="store_true", help="also print the waived diagnostics")
    pn.add_argument("--explain", metavar="LINT", help="print the docs page of a lint (e.g. DAM102) and exit")
    pn.add_argument("--list", action="store_true", help="list every lint and exit")
    pn.set_defaults(func=run_lint)

    pt = actions.add_parser("test", help="run the YAML rule tests: per-rule table, failures and coverage",
                            description="Run rule tests (default: every tests/*.test.yaml of the rules directories). "
                                        "Exit 1 when a case fails.")
    pt.add_argument("paths", nargs="*", metavar="PATH", help="test file, or a directory of *.test.yaml files")
    rules_dir(pt)
    pt.add_argument("--engine", choices=["auto", "durable", "pure"], default="auto")
    pt.add_argument("--format", choices=["rich", "json"], default="rich")
    pt.set_defaults(func=run_test)

    pd = actions.add_parser("docs", help="generate the rule reference (markdown) from the YAML")
    pd.add_argument("--output", metavar="FILE", help="write to FILE (default: stdout)")
    pd.add_argument("--check", action="store_true", help="exit 1 if FILE is not what would be generated")
    rules_dir(pd)
    pd.set_defaults(func=run_docs)


def _load(extra: list[str]) -> tuple[Any, Any, list[Any], list[Path]]:
    """(knowledge base, rule set, rule-test files, rules directories) for the built-in rules plus `extra`."""
    from .._resources import data_dir
    from ..kb.knowledge import KnowledgeBase
    from ..rules.ruleset import RuleSet
    from ..rules.testing import load_rule_tests

    _check_rules_dirs(extra)
    dirs = [data_dir("rules"), *(Path(d) for d in extra)]
    kb = KnowledgeBase.load(data_dir("knowledge_base"))
    ruleset = RuleSet.load(dirs, kb)
    return kb, ruleset, load_rule_tests(dirs), dirs


def _check_rules_dirs(extra: list[str]) -> None:
    """A --rules-dir that is a directory without a single rule file is a mistake (a typo, the wrong folder), not an
    empty team: say so rather than run with the built-in rules only. (Files and missing paths: the loader says.)"""
    from ..errors import KnowledgeBaseError, Problem
    from ..rules.ruleset import rule_file_paths

    for raw in extra:
        path = Path(raw)
        if path.is_dir() and not rule_file_paths(path):
            raise KnowledgeBaseError([Problem(f"--rules-dir {raw}", "a directory without rule files (no *.yaml in "
                                              "it or below it, outside tests/)",
                                              "give the directory that holds the team's rule files")],
                                     title="the rules cannot be loaded")


def run_list(args: argparse.Namespace) -> int:
    from ..rules.docs import cases_by_rule

    _, ruleset, tests, _ = _load(args.rules_dir)
    cases = cases_by_rule(tests)
    rows = [{"id": lr.id, "title": lr.rule.title, "severity": lr.rule.severity, "source": lr.rule.source,
             "tests": len(cases.get(lr.id, [])), "file": lr.path.name} for lr in ruleset.rules.values()]
    if args.format == "json":
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from ..report.render.console import NARROW_COLUMNS
    from ..report.render.console import SafeConsole as Console

    console = Console()
    # ids are what a reader copies (dam rules show ID): never folded. Sources are long citations: shown where the
    # terminal has room for them beside the titles, else left to `dam rules show` and --format json; in a narrow
    # terminal each title goes under its id
    columns = ["id", "title", "severity", "tests", "file", "source"]
    if console.width < _WIDE:
        columns.remove("source")
    if console.width < NARROW_COLUMNS:
        columns.remove("file")
        columns.remove("title")
    caption = None if "source" in columns else (f"sources: dam rules show ID, --format json, or a terminal of "
                                                f"{_WIDE} columns or more")
    table = Table(title=f"{len(rows)} rules", caption=caption, box=box.SIMPLE_HEAD, title_justify="left")
    for col in columns:
        merged = col == "id" and "title" not in columns  # the id, and its title under it
        wraps = col in ("title", "source") or merged
        table.add_column("rule" if merged else col, no_wrap=not wraps,
                         overflow="fold", justify="right" if col == "tests" else "left")
    for row in rows:
        cells = [escape(str(row[col])) for col in columns]  # titles and sources are text, never markup
        cells[0] = f"[bold]{escape(row['id'])}[/bold]" + ("" if "title" in columns else f"\n  {escape(row['title'])}")
        table.add_row(*cells)
    console.print(table)
    return 0


_WIDE = 140  # terminal columns from which `dam rules list` shows each rule's source


def run_show(args: argparse.Namespace) -> int:
    import difflib

    from rich.markdown import Markdown

    from ..errors import KnowledgeBaseError, Problem
    from ..report.render.console import SafeConsole as Console
    from ..rules.docs import cases_by_rule, rule_section
    from ..rules.logic import facts_used, findings_used

    kb, ruleset, tests, dirs = _load(args.rules_dir)
    lr = ruleset.rules.get(args.id)
    if lr is None:
        close = difflib.get_close_matches(args.id, list(ruleset.rules), n=3, cutoff=0.5)
        raise KnowledgeBaseError([Problem(f"rule {args.id}", "no such rule",
                                          f"did you mean {', '.join(close)}?" if close else "see dam rules list")],
                                 title="cannot show the rule")
    text = rule_section(lr, kb, ruleset, cases_by_rule(tests).get(lr.id, []), dirs, level=1, show_cases=True)
    facts = []
    for name in facts_used(lr.condition):
        spec = kb.facts.get(name)
        facts.append(f"- `{name}` ({spec.kind}{', ' + spec.unit if spec and spec.unit else ''}): "
                     f"{spec.description}" if spec else f"- `{name}`")
    pos, neg = findings_used(lr.condition)
    upstream = [f"- `{f}` from {', '.join(f'`{r}`' for r in ruleset.producers.get(f, []))}"
                for f in sorted(pos | neg)]
    text += "\n**Facts it reads.**\n\n" + "\n".join(facts) + "\n"
    if upstream:
        text += "\n**Findings it reads.**\n\n" + "\n".join(upstream) + "\n"
    Console().print(Markdown(text))
    return 0


def run_lint(args: argparse.Namespace) -> int:
    from ..rules.lint import LINTS, LINTS_BY_ID, lint_page, lint_paths

    if args.explain:
        if args.explain.strip().upper() not in LINTS_BY_ID:
            from ..errors import KnowledgeBaseError, Problem
            from ..rules.references import suggest

            close = suggest(args.explain.strip().upper(), LINTS_BY_ID)
            raise KnowledgeBaseError([Problem(f"--explain {args.explain}", "no such lint id",
                                              f"{close + ' ' if close else ''}the lint ids: "
                                              f"{', '.join(LINTS_BY_ID)} (dam rules lint --list)")],
                                     title="unknown lint id")
        print(lint_page(args.explain.strip()))
        return 0
    if args.list:
        for lint in LINTS:
            print(f"{lint.id}  {lint.name:26s} {lint.severity:8s} {lint.summary}")
        return 0
    result = lint_paths(args.paths, builtin=not args.isolated, run_tests=not args.no_tests)
    if args.format == "json":
        print(result.model_dump_json(indent=2))
        return result.exit_code
    from rich.markup import escape

    from ..report.render.console import SafeConsole as Console

    console = Console(highlight=False, soft_wrap=True)
    style = {"error": "bold red", "warning": "yellow"}
    shown = [*result.diagnostics, *(result.waived if args.show_waived else [])]
    for d in shown:
        about = f" {escape(d.subject)}:" if d.subject else ""
        waived = f" [dim](waived: {escape(d.waived)})[/dim]" if d.waived else ""
        console.print(f"[bold]{escape(d.location())}[/bold]: [{style[d.severity]}]{d.lint}[/] "
                      f"[dim]{d.name}[/dim]{about} {escape(d.message)}{waived}")
        if d.hint:
            console.print(f"    [dim]hint: {escape(d.hint)}[/dim]")
    summary = (f"{result.files} rule files, {result.rules} rules: {len(result.errors)} errors, "
               f"{len(result.warnings)} warnings, {len(result.waived)} waived")
    if not result.tests_run and not args.no_tests and not result.errors:
        summary += " (rule tests not run)"
    console.print(summary if result.diagnostics else f"[green]clean[/green]: {summary}")
    if result.diagnostics:
        console.print("[dim]explain a lint: dam rules lint --explain ID[/dim]")
    return result.exit_code


def _test_files(paths: list[str]) -> list[tuple[Path, Any]]:
    from .._yaml import load_yaml, validate
    from ..errors import KnowledgeBaseError, Problem, not_a_file
    from ..rules.testing import RuleTestFile

    accepted = "give a rule test file (*.test.yaml) or a directory holding some (in it or in its tests/)"
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        what = not_a_file(path)
        if what == "a directory":
            found = sorted({*path.glob("*.test.yaml"), *(path / "tests").glob("*.test.yaml")})
            if not found:
                raise KnowledgeBaseError([Problem(raw, "a directory without rule tests (no *.test.yaml in it or in "
                                                  "its tests/)", accepted)], title="cannot run the rule tests")
            files += found
        elif what is not None:
            raise KnowledgeBaseError([Problem(raw, "no such file or directory" if what == "no such file" else
                                              f"{what}, not a rule test file", accepted)],
                                     title="cannot run the rule tests")
        elif not path.name.endswith(".test.yaml"):
            raise KnowledgeBaseError([Problem(raw, "not a rule test file (rule test files end in .test.yaml)",
                                              accepted)], title="cannot run the rule tests")
        else:
            files.append(path)
    return [(p, validate(RuleTestFile, load_yaml(p), p)) for p in files]


def run_test(args: argparse.Namespace) -> int:
    import expert

    from ..rules.testing import load_rule_tests, rules_of_test_files, run_suite, status

    _check_rules_dirs(args.rules_dir)
    test_files = _test_files(args.paths) if args.paths else []
    expert_ = expert.Expert(extra_rules_dirs=args.rules_dir, engine=args.engine)
    ruleset = expert_.ruleset
    if args.paths:
        named = {c.rule for _, tf in test_files for c in tf.cases if c.rule in ruleset.rules}
        scope: list[str] | None = sorted(set(rules_of_test_files(test_files, ruleset)) | named)
    else:
        from .._resources import data_dir

        test_files = load_rule_tests([data_dir("rules"), *(Path(d) for d in args.rules_dir)])
        scope = None
    suite = run_suite(expert_, test_files, scope)
    coverage = suite.coverage()
    if args.format == "json":
        print(json.dumps({"engine": expert_.engine_name, "results": [r.model_dump() for r in suite.results],
                          "rules": {k: v.model_dump() for k, v in suite.rules.items()},
                          "coverage": coverage.model_dump(), "failures": len(suite.failures)}, indent=2))
        return 1 if suite.failures else 0

    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from ..report.render.console import SafeConsole as Console

    console = Console(highlight=False, soft_wrap=True)
    table = Table(title=f"Rule tests ({expert_.engine_name} engine)")
    for col in ("rule", "cases", "pass", "fail", "false neg.", "false pos.", "todo", "firing", "silent",
                "any-branches"):
        table.add_column(col, justify="left" if col == "rule" else "right")
    for tally in suite.rules.values():
        fail = f"[red]{tally.failed}[/red]" if tally.failed else "0"
        firing = str(tally.firing) if tally.firing else "[red]0[/red]"
        silent = str(tally.silent) if tally.silent else "[red]0[/red]"
        branches = f"{tally.branches_covered}/{len(tally.branches)}" if tally.branches else "-"
        if tally.branches_covered < len(tally.branches):
            branches = f"[red]{branches}[/red]"
        table.add_row(tally.rule, str(tally.cases), str(tally.passed), fail, str(tally.false_negatives),
                      str(tally.false_positives), str(tally.todo), firing, silent, branches)
    console.print(table)
    if suite.conditions:
        conditions = Table(title="Named conditions used by these rules")
        conditions.add_column("named condition")
        conditions.add_column("any-branches", justify="right")
        for name, owned in suite.conditions.items():
            done = sum(1 for branch in owned if branch.covered)
            cell = f"{done}/{len(owned)}"
            # a named condition's name is the rule file's text (its keys are not checked): text, never markup
            conditions.add_row(Text(name), cell if done == len(owned) else f"[red]{cell}[/red]")
        console.print(conditions)
    for result in suite.results:
        state = status(result)
        if state in ("pass", "todo"):
            continue
        where = f"{Path(result.file).name}::{result.case} ({result.rule})"
        if state == "xpass":
            console.print(f"[yellow]XPASS[/yellow] {escape(where)}: passes now; remove its `todo`")
            continue
        console.print(f"[red]{state.upper()}[/red] {escape(where)}")
        if result.error:
            hint = " (load its rules with --rules-dir)" if "not loaded" in result.error else ""
            console.print(f"    error: {escape(result.error)}{hint}")
        for item in result.false_negatives:
            console.print(f"    false negative: {escape(item)}")
        for item in result.false_positives:
            console.print(f"    false positive: {escape(item)}")
    for owner, where in suite.uncovered_branches():
        console.print(f"[yellow]untested branch[/yellow] {escape(owner)}: {escape(where)}")
    for tally in suite.rules.values():
        if not tally.covered:
            missing = " and no ".join(k for k, n in (("firing", tally.firing), ("silent", tally.silent)) if n == 0)
            console.print(f"[yellow]untested rule[/yellow] {tally.rule}: no {missing} case")
    todo = sum(1 for r in suite.results if r.todo)
    passed = sum(1 for r in suite.results if not r.todo and r.passed)
    console.print(f"{len(suite.results)} cases: {passed} passed, {len(suite.failures)} failed, {todo} todo")
    console.print(f"coverage: {coverage.describe()}")
    return 1 if suite.failures else 0


def _docs_command(args: argparse.Namespace) -> str:
    """The `dam rules docs` command line that regenerates the file --check compared: its --output and --rules-dir."""
    import shlex

    words = ["dam", "rules", "docs", "--output", args.output]
    for directory in args.rules_dir:
        words += ["--rules-dir", directory]
    return shlex.join(words)


def run_docs(args: argparse.Namespace) -> int:
    from ..rules.docs import render_rules_docs

    kb, ruleset, tests, dirs = _load(args.rules_dir)
    text = render_rules_docs(kb, ruleset, tests, dirs)
    if args.check:
        if not args.output:
            print("dam rules docs: --check needs --output FILE (the file to compare)", file=sys.stderr)
            return 2
        current = Path(args.output).read_text(encoding="utf-8") if Path(args.output).is_file() else None
        if current != text:
            print(f"{args.output} is stale; regenerate it with `{_docs_command(args)}`", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    if args.output:
        from ..errors import OutputError, Problem, write_output

        try:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError([Problem(f"--output {args.output}",
                                       f"cannot create its folder: {exc.strerror}")]) from None
        write_output(args.output, text)
        print(f"wrote {args.output} ({len(ruleset.rules)} rules)")
    else:
        sys.stdout.write(text)
    return 0
