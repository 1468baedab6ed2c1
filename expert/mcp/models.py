"""The arguments and results of the MCP tools, as pydantic models: their JSON Schemas are the tools' schemas.

Arguments are validated by these models (unknown arguments are refused), then by the library itself (fact
vocabulary, units, ranges), so an agent gets the same messages as the command line. Results reuse the library's own
models (`Report`, `Question`, `Turn`, `Status`, `SessionFile`, the explanations, `FileResult`, `HardwareSpec`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..consult.session import Question, SessionFile, Status, Turn
from ..ingest import FileResult
from ..observations.normalise import Observation
from ..report.explain import Counterfactuals, How, WhatIf, Why, WhyNot
from ..report.model import Report

Detail = Literal["summary", "full"]
_DETAIL = ("What the text copy of the report holds: `summary` (default) leaves out `evaluations`, `graph` and "
           "`tables`, which can be large; `full` is the whole report. The structured result is always the whole "
           "report.")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DiagnoseArgs(_Args):
    """diagnose(observations): observed facts -> the report."""

    observations: dict[str, Any] = Field(
        description="Observed facts: fact name -> value (a number, a number with a unit such as \"120 ms\", a "
                    "percentage such as \"45%\", a choice, a hardware id) or {value, source, detail} as `ingest` "
                    "returns them. \"unknown\" leaves a fact out. The vocabulary is the resource dam://facts.")
    detail: Detail = Field(default="summary", description=_DETAIL)


class IngestArgs(_Args):
    """ingest(paths): profiler traces and GPU telemetry -> observations."""

    paths: list[str] = Field(min_length=1, description="Trace or telemetry files inside the allowed directories "
                                                       "(relative paths are read from the server's working "
                                                       "directory). Several files of one run merge.")
    format: str = Field(default="auto", description="Input format; auto tells them apart.")
    steps: str | None = Field(default=None, description="ProfilerStep numbers to keep, inclusive: \"2:5\", \"3:\", "
                                                        "\":8\", \"7\" (traces).")
    window: str | None = Field(default=None, description="Seconds from the start of the recording to keep: "
                                                         "\"10:70\".")
    samples: str | None = Field(default=None, description="Sample numbers to keep in telemetry logs (1-based): "
                                                          "\"5:60\".")
    gpus: list[int] | None = Field(default=None, description="Device indices to keep (default: all, averaged).")
    columns: list[str] | None = Field(default=None, description="The --query-gpu fields of an nvidia-smi CSV "
                                                                "written with noheader.")


class DiagnoseFilesArgs(IngestArgs):
    """diagnose_files(paths, facts): ingest, add what the files cannot tell, diagnose."""

    facts: dict[str, Any] = Field(default_factory=dict,
                                  description="Facts the files cannot give (hardware, dtype, workload, ...); they "
                                              "override what the files give. Same forms as diagnose's observations.")
    detail: Detail = Field(default="summary", description=_DETAIL)


class ExplainArgs(_Args):
    """explain(report, why | why_not | how | what_if | counterfactuals)."""

    report: dict[str, Any] | None = Field(default=None, description="A report as diagnose or diagnose_files "
                                                                    "returned it.")
    observations: dict[str, Any] | None = Field(default=None, description="Instead of a report: the observations "
                                                                          "to diagnose and explain.")
    why: str | None = Field(default=None, description="The chain from the observations to a conclusion: "
                                                      "\"verdict\" (the default question), a finding, regime, "
                                                      "optimization, rule or fact id.")
    why_not: str | None = Field(default=None, description="Why a bottleneck, finding, optimization or rule was not "
                                                          "concluded, rule by rule, with the tests that failed.")
    how: str | None = Field(default=None, description="How a fact was observed or derived (formula, inputs, "
                                                      "hardware figures and their source).")
    what_if: dict[str, Any] | None = Field(default=None, description="Re-diagnose with these facts changed (fact -> "
                                                                     "new value; \"unknown\" removes one; a derived "
                                                                     "fact is realised through an input) and say "
                                                                     "what changed.")
    counterfactuals: bool = Field(default=False, description="The smallest single-fact changes that flip the "
                                                             "verdict, each verified by re-diagnosis.")


class NextQuestionArgs(_Args):
    """next_question(session): the most valuable question of a consultation."""

    session: dict[str, Any] | str | None = Field(default=None, description="The session as the last "
                                                                           "next_question/answer returned it; "
                                                                           "leave it out to start one.")
    known: dict[str, Any] | None = Field(default=None, description="Facts already known, recorded before asking "
                                                                   "(same forms as diagnose's observations).")


class AnswerArgs(_Args):
    """answer(session, fact, value): record one answer and get the next question."""

    session: dict[str, Any] | str = Field(description="The session as the last next_question/answer returned it.")
    fact: str = Field(description="The `fact` of the question answered (a fact, a combined question id such as "
                                  "`job`, or `available_tools`); any other askable fact may be volunteered.")
    value: str | int | float | list[str] | dict[str, Any] | None = Field(
        description="The answer in the question's terms (see its `accepted`); \"unknown\" or null when the user "
                    "does not know. A combined question takes one of its choices, the member values in order, or a "
                    "mapping of member fact -> value; available_tools takes a list of tool ids, \"all\" or "
                    "\"none\".")


class HardwareArgs(_Args):
    """hardware(id): one catalog entry."""

    id: str = Field(description="A catalog id (h100-sxm) or a device name as profilers print it (\"NVIDIA H100 "
                                "80GB HBM3\").")


class CompareSide(_Args):
    """One side of a comparison: files, observations or a saved report (exactly one)."""

    paths: list[str] | None = Field(default=None, description="Trace or telemetry files (allowed directories).")
    observations: dict[str, Any] | None = Field(default=None, description="Observed facts, as for diagnose.")
    report: dict[str, Any] | None = Field(default=None, description="A report as diagnose returned it.")


class CompareArgs(_Args):
    """compare(a, b): before and after."""

    a: CompareSide = Field(description="Before.")
    b: CompareSide = Field(description="After.")


# ---- results ------------------------------------------------------------------------------------------------------


class IngestOutput(BaseModel):
    """What the files gave: observations to pass to diagnose, and what could not be derived (and why)."""

    observations: dict[str, Observation] = Field(description="fact -> {value, source, detail}; pass it to "
                                                             "diagnose as `observations` (add what you know).")
    not_derived: dict[str, str] = Field(description="Facts these formats can give that these files did not, with "
                                                    "the reason.")
    notes: list[str] = Field(description="Choices made while reading (steps kept, devices averaged, ...).")
    files: list[FileResult] = Field(description="Per file: format, what it measured, what it could not derive.")


class Explanation(BaseModel):
    """One explanation: which question, its text as `dam explain` prints it, and the structured answer."""

    kind: Literal["why", "why_not", "how", "what_if", "counterfactuals"]
    subject: str = Field(description="The id, fact or changes asked about.")
    text: str = Field(description="The explanation as `dam explain` prints it.")
    rediagnosed: bool = Field(default=False, description="True when the report given had no evaluations (the "
                                                         "summary copy) and was diagnosed again from its "
                                                         "observations.")
    why: Why | None = None
    why_not: WhyNot | None = None
    how: How | None = None
    what_if: WhatIf | None = None
    counterfactuals: Counterfactuals | None = None


class ConsultationStep(BaseModel):
    """Where a consultation stands after a call: the session to pass back, the next question, the state."""

    session: SessionFile = Field(description="Pass this back unchanged as `session` in the next call.")
    question: Question | None = Field(description="The next question, or null when no answer can change the "
                                                  "verdict or the recommendations any more.")
    turn: Turn | None = Field(default=None, description="The answer just recorded (answer only).")
    status: Status
    report: Report | None = Field(default=None, description="The diagnosis of everything answered, once the "
                                                            "consultation is finished.")
