"""The rule language: schema (pydantic) of rule files, conditions and conclusions.

A condition is a tree of exactly-one-key nodes: ``{fact: x, lt: 0.8}``, ``{all: [...]}``, ``{any: [...]}``,
``{not: {...}}``, ``{ref: named_condition}``, ``{finding: id}``. There are no expression strings and no eval.
A threshold of an ordered test may name a knowledge-base value instead of repeating its number:
``{fact: mfu, lt: {kb: scorecard.mfu.fail_below}}`` (resolved once, when the rule set loads).
"""

from __future__ import annotations

import re
import string
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from .._lazy import cached_property
from ..kb.knowledge import Strength

Number = Union[int, float]  # noqa: UP007 - runtime aliases pydantic reads on Python 3.10
Literal_ = Union[int, float, str]  # noqa: UP007
Severity = Literal["info", "warning", "critical"]
OPS = ("lt", "le", "gt", "ge", "eq", "ne", "in", "not_in")


class _Node(BaseModel):
    # allow_inf_nan=False: a threshold of .nan never compares true and .inf crashes durable-rules; both are refused
    # when the file loads, naming the file and the rule, for both engines (issues 21, 22)
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False,
                              ignored_types=(cached_property,), defer_build=True)  # see kb.catalogs._Strict

    @model_validator(mode="after")
    def _printable(self) -> _Node:
        """Rule text is printable: an ANSI escape (`\\e[2J`) in a title or message would reach every terminal and
        export that shows it (newlines and tabs are fine)."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            for text in (value if isinstance(value, list) else [value]):
                if isinstance(text, str) and _CONTROL.search(text):
                    char = _CONTROL.search(text).group()  # type: ignore[union-attr]
                    raise ValueError(f"`{name}` holds the control character U+{ord(char):04X} "
                                     f"(accepted: printable text; newlines and tabs are fine)")
        return self


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
MAX_FORMAT_WIDTH = 200  # widest field a message template may ask for ({gpu_util:>12.1%} is fine, {x:99999} is not)
_WIDTH = re.compile(r"^(?:.?[<>=^])?[-+ ]?z?#?0?(\d*)[_,]?(?:\.(\d+))?")


def _check_template(template: str) -> str:
    """A message template whose format specs ask for at most MAX_FORMAT_WIDTH characters (a `{x:200000000}` would
    allocate 200 MB per rendering) and no nested replacement fields."""
    try:
        fields = [(name, spec) for _, name, spec, _ in string.Formatter().parse(template) if name is not None]
    except ValueError:
        return template  # unbalanced braces render as written (lint DAM112 reports them)
    for name, spec in fields:
        if not spec:
            continue
        if "{" in spec:
            raise ValueError(f"placeholder {{{name}:{spec}}}: a format spec cannot contain another placeholder")
        match = _WIDTH.match(spec)
        widths = [int(g) for g in match.groups() if g] if match else []
        if any(w > MAX_FORMAT_WIDTH for w in widths):
            raise ValueError(f"placeholder {{{name}:{spec}}}: a width or precision over {MAX_FORMAT_WIDTH} "
                             f"(accepted: specs such as .0%, .2f, >8.1f)")
    return template


Template = Annotated[str, AfterValidator(_check_template)]


class KnowledgeValue(_Node):
    """A threshold named in the knowledge base instead of written as a number: ``{kb: scorecard.mfu.fail_below}``
    (the names a message placeholder accepts too). The rule set replaces it with the number when the rules load
    (rules/references.py: `knowledge_value`), so evaluation only ever compares numbers."""

    kb: str = Field(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$",
                    description="a named knowledge value, e.g. scorecard.mfu.fail_below")


Threshold = Union[int, float, KnowledgeValue]  # noqa: UP007


class FactTest(_Node):
    """Compare one fact with constants; several operators in one node are ANDed. Unknown fact -> unknown.

    An ordered operator (lt, le, gt, ge) may name a `KnowledgeValue`; in a loaded rule set's resolved conditions
    every constant is a number."""

    fact: str
    lt: Threshold | None = None
    le: Threshold | None = None
    gt: Threshold | None = None
    ge: Threshold | None = None
    eq: Literal_ | None = None
    ne: Literal_ | None = None
    in_: list[Literal_] | None = Field(default=None, alias="in")
    not_in: list[Literal_] | None = None
    known: bool | None = None

    @model_validator(mode="after")
    def _one_op(self) -> FactTest:
        if not self.ops() and self.known is None:
            raise ValueError(f"a test of {self.fact!r} needs an operator: one of {', '.join(OPS)} or known")
        for op, constant in self.ops():  # facts are floats: a constant beyond one can never be compared
            for value in constant if isinstance(constant, list) else [constant]:
                if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**1023:
                    raise ValueError(f"{op}: a {len(str(abs(value)))}-digit number is beyond a 64-bit float "
                                     f"(about 1.8e308), which facts are compared as (accepted: a finite number)")
        return self

    def ops(self) -> list[tuple[str, Any]]:
        """The (operator, constant) pairs of this test, in a fixed order."""
        return self._ops

    @cached_property
    def _ops(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for op in OPS:
            value = getattr(self, "in_" if op == "in" else op)
            if value is not None:
                out.append((op, value))
        return out


class AllOf(_Node):
    all: list[Condition] = Field(min_length=1)


class AnyOf(_Node):
    any: list[Condition] = Field(min_length=1)


class NotOf(_Node):
    not_: Condition = Field(alias="not")


class ConditionRef(_Node):
    ref: str


class FindingRef(_Node):
    """True when another rule concluded this finding (forward chaining)."""

    finding: str


_TAGS = ("fact", "all", "any", "not", "ref", "finding")


def _tag(value: Any) -> str | None:
    if isinstance(value, dict):
        present = [k for k in _TAGS if k in value]
        return present[0] if len(present) == 1 else None
    tags: dict[type, str] = {FactTest: "fact", AllOf: "all", AnyOf: "any", NotOf: "not", ConditionRef: "ref",
                             FindingRef: "finding"}
    return tags.get(type(value))


Condition = Annotated[
    Annotated[FactTest, Tag("fact")]
    | Annotated[AllOf, Tag("all")]
    | Annotated[AnyOf, Tag("any")]
    | Annotated[NotOf, Tag("not")]
    | Annotated[ConditionRef, Tag("ref")]
    | Annotated[FindingRef, Tag("finding")],
    Discriminator(
        _tag,
        custom_error_type="condition",
        custom_error_message="a condition needs exactly one of: fact, all, any, not, ref, finding",
    ),
]

# AllOf, AnyOf and NotOf name `Condition` before it exists; being deferred (defer_build), each resolves it from this
# module when first validated, so no model_rebuild() here (it would build their validators at import)


class NamedCondition(_Node):
    """A reusable condition (like a Falco macro, but structured)."""

    description: str
    when: Condition


class FindingSpec(_Node):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    message: Template


class BottleneckVote(_Node):
    regime: str
    strength: Strength


class AxisVote(_Node):
    axis: str  # an axis of knowledge_base/regimes.yaml `axes` (checked when the rules load)
    strength: Strength


class RecommendSpec(_Node):
    id: str
    why: Template


class WasteSpec(_Node):
    id: str
    reason: Template


class Then(_Node):
    finding: FindingSpec | None = None
    bottleneck: BottleneckVote | None = None
    axis: AxisVote | None = None
    recommend: list[RecommendSpec] = []
    waste: list[WasteSpec] = []
    measure: list[str] = []

    @model_validator(mode="after")
    def _concludes_something(self) -> Then:
        if not (self.finding or self.bottleneck or self.axis or self.recommend or self.waste or self.measure):
            raise ValueError("`then` must conclude something (finding, bottleneck, axis, recommend, waste or measure)")
        return self


class Rule(_Node):
    """One declarative rule: conditions on facts and findings, and what it concludes."""

    id: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    title: str
    source: str
    rationale: str
    severity: Severity = "info"
    when: Condition
    then: Then
    tags: list[str] = []


class WastedEntry(_Node):
    id: str
    reason: str


class RegimeTable(_Node):
    """Effective vs wasted optimizations for one regime (seed Table 3, one table per regime)."""

    regime: str
    source: str
    effective: list[str]
    wasted: list[WastedEntry]


class RuleFile(_Node):
    schema_version: Literal[1] = 1
    conditions: dict[str, NamedCondition] = {}
    rules: list[Rule] = []
    tables: list[RegimeTable] = []
