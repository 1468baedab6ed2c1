"""Lints of files that cannot be loaded: invalid YAML, schema violations, and the loader's own messages."""

from __future__ import annotations

from .core import _LoadLint


class InvalidYaml(_LoadLint):
    id = "DAM001"
    name = "invalid-yaml"
    severity = "error"
    summary = "The file is not valid YAML, cannot be read, or a mapping repeats a key."
    docs = """
**Why it matters.** A file that does not parse cannot be loaded at all, and a repeated key silently keeps only the
last value (YAML 1.2 forbids duplicates), so half of what you wrote is ignored.

**Example.**
```yaml
- id: my-rule
  when: {fact: gpu_util, lt: 0.8}
  when: {fact: gpu_util, lt: 0.5}   # DAM001: duplicate key `when`
```
**Fix.** Correct the syntax at the line shown; keep one value per key.
"""


class SchemaViolation(_LoadLint):
    id = "DAM002"
    name = "schema-violation"
    severity = "error"
    summary = "The file does not match its schema (rule file, rule-test file or waiver file)."
    docs = """
**Why it matters.** The loader rejects the whole rules directory when one file does not match its schema.

**Example.** `severity: high` (the schema allows info, warning, critical); a condition with two keys
(`{fact: x, all: [...]}`); `then` that concludes nothing; a missing `rationale`.

**Fix.** Follow the message; editors validate as you type with `schemas/rules.schema.json`
(`dam schema rules`).
"""


class LoadError(_LoadLint):
    id = "DAM012"
    name = "load-error"
    severity = "error"
    summary = "The rules fail to load for a reason no other check names (the loader's own message)."
    docs = """
**Why it matters.** `dam diagnose` would refuse these rules with the same message.

**Fix.** Follow the message; it names the file, the rule and the field.
"""


# -- warnings --
