"""The MCP tools: what each one does, its schemas, and its handler (plain synchronous code over the library).

Handlers raise `ExpertError` for anything wrong with the input; `expert.mcp.server` turns that into a tool error
with the same message the command line prints. Nothing here knows about the protocol, so the tools are tested
without a server too.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..consult.session import Consultation, Question, SessionFile
from ..errors import ObservationError, Problem
from ..expert import Expert
from ..ingest import IngestResult, Progress, ingest_result
from ..ingest._source import CANNOT_READ
from ..kb.knowledge import HardwareSpec, KnowledgeBase
from ..report.model import Report
from . import schema as S
from .models import (
    AnswerArgs,
    CompareArgs,
    CompareSide,
    ConsultationStep,
    DiagnoseArgs,
    DiagnoseFilesArgs,
    ExplainArgs,
    Explanation,
    HardwareArgs,
    IngestArgs,
    IngestOutput,
    NextQuestionArgs,
)
from .paths import AllowedPaths
from .summary import compact_json, report_data, report_text, verdict_lines

ArgsT = TypeVar("ArgsT", bound=BaseModel)


@dataclass
class ToolResult:
    """A tool's answer: the structured result (matches the output schema) and the text copies."""

    structured: dict[str, Any]
    texts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    input_schema: S.JsonSchema
    output_schema: S.JsonSchema | None
    run: Callable[[Mapping[str, Any], Progress | None], ToolResult]


def parse_args(model: type[ArgsT], arguments: Mapping[str, Any] | None, tool: str) -> ArgsT:
    """Validate a tool's arguments; every problem names the argument and what is accepted."""
    try:
        return model.model_validate(dict(arguments or {}))
    except ValidationError as exc:
        accepted = ", ".join(model.model_fields)
        problems = []
        for error in exc.errors()[:12]:
            where = ".".join(str(p) for p in error["loc"]) or "arguments"
            if error["type"] == "extra_forbidden" and len(error["loc"]) == 1:
                problems.append(Problem(where, "unknown argument", f"{tool} takes: {accepted}"))
            elif error["type"] == "missing":
                problems.append(Problem(where, "missing (required)", f"{tool} takes: {accepted}"))
            else:
                problems.append(Problem(where, error["msg"]))
        raise ObservationError(problems, title=f"invalid arguments for {tool}") from exc


def _report_from(data: Mapping[str, Any], expert: Expert, where: str) -> tuple[Report, bool]:
    """A report an agent passed back; the summary copy (no evaluations) is diagnosed again from its observations.
    Returns the report and whether it was diagnosed again."""
    try:
        return Report.model_validate(dict(data)), False
    except ValidationError as exc:
        missing = {str(e["loc"][0]) for e in exc.errors() if e["type"] == "missing" and len(e["loc"]) == 1}
        others = [e for e in exc.errors() if not (e["type"] == "missing" and len(e["loc"]) == 1)]
        observations = data.get("observations")
        if missing and missing <= {"evaluations", "graph", "tables"} and not others and isinstance(observations,
                                                                                                  Mapping):
            return expert.diagnose(observations), True
        problems = [Problem(f"{where}.{'.'.join(str(p) for p in e['loc'])}", e["msg"]) for e in exc.errors()[:8]]
        raise ObservationError(problems, title="not a report (give one as diagnose returned it, or observations)"
                               ) from exc


def _session(raw: Mapping[str, Any] | str, expert: Expert) -> Consultation:
    text = raw if isinstance(raw, str) else json.dumps(raw)
    return Consultation.from_json(text, expert, where="session")


def compare_function() -> Callable[..., Any] | None:
    """`expert.compare`, where this version of the library has it (a function, or a module holding one)."""
    import importlib

    import expert

    found: Any = getattr(expert, "compare", None)
    if found is None:
        try:  # a module expert/compare*, not imported by the package yet
            found = importlib.import_module("expert.compare")
        except ImportError:
            return None
    if isinstance(found, ModuleType):
        found = getattr(found, "compare", None)
    return found if callable(found) else None


def _model_of(function: Callable[..., Any]) -> type[BaseModel] | None:
    """The pydantic model a function is annotated to return, if any (a class, or the name of one in the function's
    module: only the return annotation is resolved, so parameters typed for type checkers alone do not matter)."""
    hint = getattr(function, "__annotations__", {}).get("return")
    if isinstance(hint, str):
        hint = getattr(function, "__globals__", {}).get(hint)
    return hint if isinstance(hint, type) and issubclass(hint, BaseModel) else None


class Toolbox:
    """Every tool of `dam mcp`, over one Expert and one set of allowed directories."""

    def __init__(self, expert: Expert, allowed: AllowedPaths) -> None:
        self.expert = expert
        self.kb: KnowledgeBase = expert.kb
        self.allowed = allowed
        self.compare = compare_function()
        self.tools: dict[str, ToolSpec] = {spec.name: spec for spec in self._specs()}

    # ---- registry --------------------------------------------------------------------------------------------------

    def _specs(self) -> list[ToolSpec]:
        kb = self.kb
        facts: Callable[[S.JsonSchema], S.JsonSchema] = lambda defs: S.facts_input(kb, defs)  # noqa: E731
        names: Callable[[S.JsonSchema], S.JsonSchema] = lambda defs: S.facts_names_input(kb, defs)  # noqa: E731
        report = S.report_result(kb)
        ingest_refine: dict[tuple[str, ...], Callable[[S.JsonSchema], S.JsonSchema]] = {
            ("format",): lambda defs: S.format_enum()}
        specs = [
            ToolSpec(
                "diagnose", "Diagnose observed facts",
                "Why is this training job or inference service slow? Give the facts you know (utilization, step "
                "time, data wait, hardware, dtype, ...); returns the report: `bottleneck` (null when the evidence "
                "is insufficient: the expert never guesses), `candidates` with their strength, `recommended` "
                "optimizations with their Amdahl bound, `wasted` ones (what will not help this bottleneck), "
                "`missing` facts and `next_measurements` that would settle it, every conclusion traced to the "
                "facts. Deterministic: the same facts give the same report.",
                S.args_schema(DiagnoseArgs, {("observations",): facts}), report, self._diagnose),
            ToolSpec(
                "ingest", "Read profiler traces and GPU telemetry",
                "Turn PyTorch profiler (Kineto) traces, nvidia-smi / nvidia-smi dmon logs, dcgmi dmon output or "
                "dcgm-exporter text into observations, with where each came from and what could not be derived "
                "(and why). Pass the observations to diagnose, adding the facts the files cannot tell.",
                S.args_schema(IngestArgs, ingest_refine), S.result_schema(IngestOutput), self._ingest),
            ToolSpec(
                "diagnose_files", "Diagnose from traces and telemetry",
                "ingest + diagnose in one call: read the files, add `facts` (which override what the files give), "
                "diagnose. Returns the same report as diagnose.",
                S.args_schema(DiagnoseFilesArgs, {**ingest_refine, ("facts",): facts}), report,
                self._diagnose_files),
            ToolSpec(
                "explain", "Explain a diagnosis",
                "Follow-up questions on a report (or on observations): why (the chain from the facts to a "
                "conclusion; the verdict by default), why_not (which rules could have concluded something and "
                "which test failed), how (how a fact was observed or derived), what_if (re-diagnose with facts "
                "changed), counterfactuals (the smallest single-fact changes that flip the verdict). Ask one "
                "question per call.",
                S.args_schema(ExplainArgs, {("report",): S.report_input, ("observations",): names,
                                            ("what_if",): lambda defs: S.any_fact_input(kb)}),
                S.result_schema(Explanation), self._explain),
            ToolSpec(
                "next_question", "Start or continue a consultation",
                "Not sure what to measure? A consultation asks one question at a time, only questions whose answer "
                "can still change the verdict or the recommendations, each with why it is asked and how to measure "
                "it. Call without a session to start; pass the returned `session` back unchanged.",
                S.args_schema(NextQuestionArgs, {("session",): S.session_input, ("known",): names}),
                S.result_schema(ConsultationStep), self._next_question),
            ToolSpec(
                "answer", "Answer a consultation question",
                "Record the answer to the question next_question (or the last answer) returned, and get the next "
                "question; when none is left, `report` holds the diagnosis.",
                S.args_schema(AnswerArgs, {("session",): S.session_input,
                                           ("fact",): lambda defs: {"type": "string", "enum": S.answerable(kb)}}),
                S.result_schema(ConsultationStep), self._answer),
            ToolSpec(
                "hardware", "Look up an accelerator",
                "One entry of the hardware catalog: dense peak TFLOP/s per dtype (vendor sparse headlines halved), "
                "memory size and bandwidth, host and scale-up links, and the datasheet it comes from. The whole "
                "catalog is the resource dam://hardware.",
                S.args_schema(HardwareArgs, {("id",): lambda defs: {"type": "string",
                                                                    "examples": kb.part_ids()}}),
                S.result_schema(HardwareSpec), self._hardware),
        ]
        if self.compare is not None:
            model = _model_of(self.compare)
            specs.append(ToolSpec(
                "compare", "Compare before and after",
                "Before and after a change: each side is files, observations or a report. Says which facts moved, "
                "whether the verdict moved, which findings appeared or cleared, and how the measured speed-up "
                "compares with the bound the first report predicted.",
                S.args_schema(CompareArgs, {("CompareSide", "observations"): names,
                                            ("CompareSide", "report"): S.report_input}),
                S.result_schema(model) if model is not None else None, self._compare))
        return specs

    def call(self, name: str, arguments: Mapping[str, Any] | None, progress: Progress | None = None) -> ToolResult:
        """Run a tool; `progress(bytes_read, total)` hears how far the files being read are."""
        spec = self.tools.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, list(self.tools), n=2, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}?" if close else f"the tools are: {', '.join(self.tools)}"
            raise ObservationError([Problem(f"tool {name}", "no such tool", hint)], title="unknown tool")
        return spec.run(arguments or {}, progress)

    # ---- diagnosis -------------------------------------------------------------------------------------------------

    def _report(self, report: Report, detail: str, extra: Sequence[str] = ()) -> ToolResult:
        data = report_data(report, "full")
        copy = data if detail == "full" else report_data(report, detail)
        head = report_text(report, detail)
        return ToolResult(data, ["\n".join([head, *extra]), compact_json(copy)])

    def _diagnose(self, arguments: Mapping[str, Any], progress: Progress | None = None) -> ToolResult:
        args = parse_args(DiagnoseArgs, arguments, "diagnose")
        if not args.observations:
            raise ObservationError([Problem("observations", "nothing to diagnose",
                                            "give at least one fact, e.g. {\"gpu_util\": \"45%\"} (resource "
                                            "dam://facts lists them)")], title="invalid arguments for diagnose")
        return self._report(self.expert.diagnose(args.observations), args.detail)

    def _read(self, args: IngestArgs, progress: Progress | None) -> IngestResult:
        paths = [self.allowed.resolve(raw, f"paths[{i}]") for i, raw in enumerate(args.paths)]
        try:
            return ingest_result([str(p) for p in paths], format=args.format, steps=args.steps, window=args.window,
                                 samples=args.samples, gpus=args.gpus, columns=args.columns, progress=progress,
                                 kb=self.kb)
        except OSError as exc:
            raise ObservationError([Problem(str(exc.filename or "paths"), f"cannot read: {exc.strerror or exc}")],
                                   title=CANNOT_READ) from exc

    def _ingest(self, arguments: Mapping[str, Any], progress: Progress | None = None) -> ToolResult:
        args = parse_args(IngestArgs, arguments, "ingest")
        result = self._read(args, progress)
        out = IngestOutput(observations=dict(result.observations.facts), not_derived=result.not_derived,
                           notes=result.notes, files=result.files)
        lines = ["Read: " + ", ".join(f"{f.name} ({f.format})" for f in result.files),
                 "Measured: " + (", ".join(f"{n} = {o.value}" for n, o in result.observations.facts.items())
                                 or "nothing")]
        lines += [f"Not derived: {n} ({why})" for n, why in result.not_derived.items()]
        lines += [f"Note: {n}" for n in result.notes]
        data = out.model_dump(mode="json")
        return ToolResult(data, ["\n".join(lines), compact_json(data)])

    def _diagnose_files(self, arguments: Mapping[str, Any], progress: Progress | None = None) -> ToolResult:
        args = parse_args(DiagnoseFilesArgs, arguments, "diagnose_files")
        result = self._read(args, progress)
        raw: dict[str, Any] = {k: v for k, v in result.to_observation_file()["observations"].items()
                               if v["value"] != "unknown"}
        raw.update(args.facts)
        extra = []
        if result.not_derived:
            extra.append(f"Not derived from {', '.join(f.name for f in result.files)}: "
                         + "; ".join(f"{n} ({why})" for n, why in result.not_derived.items()))
        observations = self.expert.observations(raw)
        if result.observations.ranks:  # a multi-GPU job's rank table, as `dam diagnose --from` keeps it
            observations = observations.model_copy(update={"ranks": list(result.observations.ranks)})
        return self._report(self.expert.diagnose(observations, time_breakdown=result.time_breakdown), args.detail,
                            extra)

    # ---- explanations ----------------------------------------------------------------------------------------------

    def _explain(self, arguments: Mapping[str, Any], progress: Progress | None = None) -> ToolResult:
        args = parse_args(ExplainArgs, arguments, "explain")
        asked = [name for name in ("why", "why_not", "how", "what_if") if getattr(args, name) is not None]
        asked += ["counterfactuals"] if args.counterfactuals else []
        if len(asked) > 1:
            raise ObservationError([Problem(", ".join(asked), "ask one question per call",
                                            "one of why, why_not, how, what_if, counterfactuals")],
                                   title="invalid arguments for explain")
        if (args.report is None) == (args.observations is None):
            raise ObservationError([Problem("report, observations", "give exactly one of them",
                                            "a report as diagnose returned it, or the observations to diagnose")],
                                   title="invalid arguments for explain")
        rediagnosed = False
        if args.report is not None:
            report, rediagnosed = _report_from(args.report, self.expert, "report")
        else:
            report = self.expert.diagnose(args.observations or {})
        kind = asked[0] if asked else "why"
        result: Any
        if kind == "why_not":
            subject, result = str(args.why_not), report.why_not(str(args.why_not))
        elif kind == "how":
            subject, result = str(args.how), report.how(str(args.how))
        elif kind == "what_if":
            changes = dict(args.what_if or {})
            if not changes:
                raise ObservationError([Problem("what_if", "no change given", "e.g. {\"data_wait_s\": \"10 ms\"}")],
                                       title="invalid arguments for explain")
            subject = ", ".join(f"{k}={v}" for k, v in changes.items())
            result = report.what_if(changes, self.expert)
        elif kind == "counterfactuals":
            subject, result = "verdict", report.counterfactuals(self.expert)
        else:
            subject = args.why or "verdict"
            result = report.why(subject)
        explanation = Explanation(kind=kind, subject=subject, text=result.text(), rediagnosed=rediagnosed,
                                  **{kind: result})
        data = explanation.model_dump(mode="json")
        copy = dict(data)
        if explanation.what_if is not None and explanation.what_if.after is not None:
            copy["what_if"] = {**data["what_if"], "after": report_data(explanation.what_if.after, "summary")}
        note = ("(The report given had no evaluations; it was diagnosed again from its observations.)\n"
                if rediagnosed else "")
        return ToolResult(data, [note + explanation.text, compact_json(copy)])

    # ---- consultation ----------------------------------------------------------------------------------------------

    def _step(self, consultation: Consultation, question: Question | None, turn: Any = None) -> ToolResult:
        session = SessionFile.model_validate_json(consultation.to_json())
        status = consultation.status()
        report = consultation.report() if question is None else None
        step = ConsultationStep(session=session, question=question, turn=turn, status=status, report=report)
        data = step.model_dump(mode="json")
        copy = dict(data)
        lines: list[str] = []
        if turn is not None:
            lines.append(f"Recorded: {turn.fact} = {'unknown' if turn.value is None else turn.value}"
                         + turn.closed())
        if question is not None:
            lines += [f"Question {question.number} ({question.fact}): {question.prompt()}",
                      f"Accepted: {question.accepted}", f"Why asked: {question.why}"]
            if question.measure:
                lines.append(f"How to measure it: {question.measure}")
        else:
            lines.append(f"Finished: {status.stop_reason}")
        if report is not None:
            lines += verdict_lines(report)
            copy["report"] = report_data(report, "summary")
        lines.append("Pass `session` back unchanged with the next call.")
        return ToolResult(data, ["\n".join(lines), compact_json(copy)])

    def _next_question(self, arguments: Mapping[str, Any], progress: Progress | None = None) -> ToolResult:
        args = parse_args(NextQuestionArgs, arguments, "next_question")
        if args.session is not None:
            consultation = _session(args.session, self.expert)
            for name, raw in (args.known or {}).items():
                consultation.answer(name, raw)
        else:
            consultation = Consultation(self.expert, known=args.known)
        return self._step(consultation, consultation.next_question())

    def _answer(self, arguments: Mapping[str, Any], progress: Progress | None = None) -> ToolResult:
        args = parse_args(AnswerArgs, arguments, "answer")
        consultation = _session(args.session, self.expert)
        consultation.next_question()  # the pending question: an answer to it is recorded as asked, with its reason
        raw = args.value if isinstance(args.value, str) or args.value is None else json.dumps(args.value)
        turn = consultation.answer(args.fact, args.value, raw=raw)
        return self._step(consultation, consultation.next_question(), turn)

    # ---- catalog ---------------------------------------------------------------------------------------------------

    def _hardware(self, arguments: Mapping[str, Any], progress: Progress | None = None) -> ToolResult:
        args = parse_args(HardwareArgs, arguments, "hardware")
        found = self.kb.hardware_resolution(args.id)
        if found is None:
            close = self.kb.close_hardware(args.id, cutoff=0.4)
            raise ObservationError([Problem(f"hardware {args.id}", "not in the catalog",
                                            f"did you mean {', '.join(close)}?" if close
                                            else "see dam hardware list")])
        hw = self.kb.hardware[found.id]
        lines = [f"{hw.id}: {hw.name} ({hw.vendor})"] + ([f"assumed {found.note}"] if found.note else [])
        lines += [f"dense {dtype} peak: " + (f"{peak:g} TFLOP/s" if peak is not None else "not published")
                  for dtype, peak in hw.peak_tflops.items()]
        size = f"{hw.memory_gb:g} GB" if hw.memory_gb is not None else "size not published"
        bw = hw.memory_bandwidth_gbs
        bandwidth = f"{bw:g} GB/s" if bw is not None else "bandwidth not published"
        lines.append("memory: " + ", ".join(filter(None, (size, hw.memory_type, bandwidth))))
        if hw.host_link:
            lines.append(f"host link: {hw.host_link}" + (f" ({hw.host_link_gbs:g} GB/s)" if hw.host_link_gbs else ""))
        if hw.scale_up_link:
            lines.append(f"scale-up link: {hw.scale_up_link}"
                         + (f" ({hw.scale_up_gbs:g} GB/s)" if hw.scale_up_gbs else ""))
        lines.append(f"source: {hw.source}")
        data = hw.model_dump(mode="json")
        return ToolResult(data, ["\n".join(lines), compact_json(data)])

    # ---- comparison (where the library has it) ---------------------------------------------------------------------

    def _side(self, side: CompareSide, where: str) -> Any:
        given = [name for name in ("paths", "observations", "report") if getattr(side, name) is not None]
        if len(given) != 1:
            raise ObservationError([Problem(where, "give exactly one of paths, observations, report",
                                            f"got {', '.join(given) or 'none'}")],
                                   title="invalid arguments for compare")
        if side.paths is not None:
            if not side.paths:
                raise ObservationError([Problem(f"{where}.paths", "no files given")],
                                       title="invalid arguments for compare")
            return [self.allowed.resolve(raw, f"{where}.paths[{i}]") for i, raw in enumerate(side.paths)]
        if side.report is not None:
            return _report_from(side.report, self.expert, f"{where}.report")[0]
        return self.expert.diagnose(side.observations or {})

    def _compare(self, arguments: Mapping[str, Any], progress: Progress | None = None) -> ToolResult:
        args = parse_args(CompareArgs, arguments, "compare")
        assert self.compare is not None  # registered only when the library has it
        result = self.compare(self._side(args.a, "a"), self._side(args.b, "b"))
        data: Any = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
        if not isinstance(data, dict):
            data = {"result": data}
        text = result.text() if callable(getattr(result, "text", None)) else ""
        return ToolResult(data, [t for t in (text, compact_json(data)) if t])
