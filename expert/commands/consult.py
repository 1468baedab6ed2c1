"""`dam consult`: a guided consultation, one question at a time (a thin loop over `expert.consult.Consultation`)."""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import secrets
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..consult.session import Consultation, Question
    from ..expert import Expert
    from ..report.model import Report
    from ..report.render.console import SafeConsole as Console

EPILOG = """\
at any prompt:
  an answer        62%, 0.62, 3.35 TB/s, 12 ms, 7B, h100-sxm ... (the question shows the unit and an example)
  unknown, skip    you do not know it; the consultation works around it
  no-tool          you have no data from the tool that measures it (skips its other questions too)
  tool1, tool2     at "Which of these can you run": the tools you can use (ids or names), or all, or none
  h100-sxm bf16    at a question asking for several facts: one of its choices, or the values in order
                   (leave out what you do not know)
  NAME=VALUE       give another fact you happen to know
  why [FACT]       why the question is asked: the hypotheses, the rules, what each answer would mean
  back             take back the last answer        status   hypotheses and what is known so far
  done             stop asking and show the report  quit     save and leave (resume later with --resume)
  help             this list

examples:
  dam consult                                   ask interactively
  dam consult --answers run.yaml                answer from a file ("unknown" for facts it lacks); no terminal needed
  dam consult --from trace.json dcgm.txt        start from what a profiler trace and telemetry give; ask the rest
  printf 'training\\nall\\nh100-sxm bf16\\n' | dam consult    answers from piped stdin
  dam consult --resume ~/.local/state/dam-expert/consult-20260101-120000.json
  dam consult --answers run.yaml --export markdown --output consult.md

The session is saved (JSON) after every answer; Ctrl-C or the end of input leaves it resumable and says where.
exit codes: 0 finished (or quit), 1 input ended before the consultation finished, 2 invalid input, 130 interrupted.
"""

HELP = """\
Answer the question, or type one of:
  unknown | skip     you do not know it          no-tool   no data from the tool that measures it
  NAME=VALUE         give another fact           why [FACT]   why it is asked and what each answer would mean
  back               take back the last answer   status    leading hypotheses and what is known
  done               stop and show the report    quit      save the session and leave
"""

def _export_formats() -> tuple[str, ...]:
    from ..report.render import FORMATS

    return tuple(FORMATS)


def register(sub: Any) -> None:
    p = sub.add_parser("consult", help="a guided consultation: answer a few questions, get a diagnosis",
                       description="Answer questions one at a time; only questions whose answer can still change the "
                                   "verdict or the recommendations are asked.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--answers", metavar="FILE",
                   help="answer from an observation file (YAML or JSON); facts it lacks are answered unknown, and "
                        "the facts it gives that no question asked for go into the report as well; it may also "
                        "answer a combined question by its id (job: llm-decode) and the tools question "
                        "(available_tools: [nvidia_smi])")
    p.add_argument("--from", dest="from_files", nargs="+", default=[], metavar="TRACE",
                   help="start from the facts profiler traces / GPU telemetry give (see dam ingest --help); only what "
                        "they leave open is asked")
    p.add_argument("--resume", metavar="FILE", help="continue a saved session")
    p.add_argument("--save", metavar="FILE",
                   help="where to save the session after every answer (default: the --resume file, or a new file "
                        "under $XDG_STATE_HOME/dam-expert/)")
    formats = ", ".join(_export_formats())
    p.add_argument("--export", choices=_export_formats(), metavar="FORMAT",
                   help=f"also write the report with the transcript (with --output FILE): {formats}")
    p.add_argument("--output", metavar="FILE", help="file for --export")
    from .ingest import add_input_options

    add_input_options(p.add_argument_group("--from options"), format_flag="--from-format")
    from ._common import add_hardware_file_option

    add_hardware_file_option(p)
    p.set_defaults(func=run)


# ---- session files -------------------------------------------------------------------------------------------------


def default_session_path() -> Path:
    """A new session file under $XDG_STATE_HOME/dam-expert (default ~/.local/state/dam-expert), reserved with
    O_EXCL under a name no other run can pick (time to the microsecond, process id, random suffix)."""
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "dam-expert"
    base.mkdir(parents=True, exist_ok=True)
    while True:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        path = base / f"consult-{stamp}-{os.getpid()}-{secrets.token_hex(3)}.json"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o600))
        except FileExistsError:  # pragma: no cover - a clash of all three
            continue
        return path


def save(consultation: Consultation, path: Path) -> None:
    """Write the session atomically and durably: a fresh temporary file beside it (O_EXCL, random name, so a
    planted `<file>.tmp` symlink is never followed), fsync, then rename over the file."""
    from ..errors import ObservationError, Problem

    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(consultation.to_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise ObservationError([Problem(str(path), f"cannot save the session: {exc.strerror}",
                                        "choose another file with --save FILE")]) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@contextlib.contextmanager
def interrupts_deferred(pending: bool = False) -> Iterator[list[int]]:
    """While an answer is read to its end, recorded and saved, Ctrl-C waits: it takes effect (KeyboardInterrupt) right
    after, so an answer the user submitted is never lost. `pending`: a Ctrl-C already arrived; the caller may also
    append to the list it is given (a Ctrl-C its reader saw). A KeyboardInterrupt raised inside (Ctrl-C at an empty
    prompt) passes through. Outside the main thread this only honours what is pending."""
    arrived: list[int] = [signal.SIGINT] if pending else []
    if threading.current_thread() is not threading.main_thread():
        yield arrived
        if arrived:
            raise KeyboardInterrupt
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
    try:
        yield arrived
    finally:
        signal.signal(signal.SIGINT, previous)
    if arrived:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in here (in the main thread), whatever handler is in place around it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


MAX_ANSWER_BYTES = 64 * 1024  # one answer line; an endless line (a stray binary on stdin) is refused, not buffered


def _too_long() -> Exception:
    from ..errors import ObservationError, Problem

    return ObservationError([Problem("standard input", f"an answer line longer than {MAX_ANSWER_BYTES // 1024} KiB",
                                     "answer each question on a line of its own")], title="cannot read the answer")


def bounded_input(prompt: str) -> str:
    """input() that reads at most MAX_ANSWER_BYTES characters of a line (EOFError at the end of the input)."""
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline(MAX_ANSWER_BYTES + 1)
    if not line:
        raise EOFError
    if len(line) > MAX_ANSWER_BYTES:
        raise _too_long()
    return line.removesuffix("\n")


class TerminalReader:
    """Lines typed at a terminal, read so that Ctrl-C never loses a line the user submitted.

    A terminal throws typed input away on Ctrl-C, and Python's input() can be interrupted after it has read a line
    but before it returns it, so "Enter, then Ctrl-C at once" could lose a submitted answer. Here the terminal's
    flush is switched off (NOFLSH) while waiting, Ctrl-C only sets a flag, and the reader waits with select():
    a complete line is read and returned (with the flag, so the caller records it and then stops); at an empty
    prompt Ctrl-C interrupts within a tenth of a second, and whatever was half typed is discarded as usual.
    Anything else (a pipe, another thread, no termios) reads with input()."""

    def __init__(self) -> None:
        self.buffer = b""

    def read(self, prompt: str) -> tuple[str, bool]:
        fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
        if fd is None or threading.current_thread() is not threading.main_thread():
            with _interruptible():
                return bounded_input(prompt), False
        try:
            import select
            import termios
        except ImportError:  # pragma: no cover - not a POSIX terminal
            with _interruptible():
                return bounded_input(prompt), False
        arrived: list[int] = []
        saved = termios.tcgetattr(fd)
        changed = list(saved)
        changed[3] = changed[3] | termios.NOFLSH
        # no flush and the flag handler before the prompt shows: a line typed the moment it appears, then Ctrl-C,
        # would otherwise be thrown away by the terminal before this reads it
        previous = signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
        try:
            termios.tcsetattr(fd, termios.TCSANOW, changed)
            sys.stdout.write(prompt)
            sys.stdout.flush()
            while b"\n" not in self.buffer:
                ready, _, _ = select.select([fd], [], [], 0.1)
                if ready:
                    chunk = os.read(fd, 65536)
                    if not chunk:  # Ctrl-D at an empty prompt
                        if self.buffer:
                            break
                        raise EOFError
                    self.buffer += chunk
                    if len(self.buffer) > MAX_ANSWER_BYTES and b"\n" not in self.buffer:
                        self.buffer = b""
                        raise _too_long()
                elif arrived:
                    termios.tcflush(fd, termios.TCIFLUSH)
                    raise KeyboardInterrupt
        finally:
            termios.tcsetattr(fd, termios.TCSANOW, saved)
            signal.signal(signal.SIGINT, previous)
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8", errors="replace").rstrip("\r"), bool(arrived)


def load(path: Path, expert: Expert | None = None) -> Consultation:
    from ..consult.session import Consultation
    from ..errors import ObservationError, Problem

    if not path.is_file():
        raise ObservationError([Problem(str(path), "no such file", "give a file written by `dam consult`")],
                               title="cannot resume")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ObservationError([Problem(str(path), "cannot be read as UTF-8 text")], title="cannot resume") from exc
    return Consultation.from_json(text, expert, where=str(path))


# ---- exports -------------------------------------------------------------------------------------------------------


def transcript_markdown(consultation: Consultation) -> str:
    """The transcript as a Markdown section: every question, the answer, and why it was asked."""
    lines = ["## Consultation transcript", ""]
    for turn in consultation.transcript:
        shown = "unknown" if turn.value is None else str(turn.value)
        extra = turn.closed()
        mark = " *(taken back)*" if turn.undone else ""
        asked = "" if turn.asked else " *(volunteered)*"
        lines.append(f"{turn.step}. **{turn.fact}**{asked}: {turn.question} → `{shown}`{extra}{mark}")
        lines.append(f"   - why asked: {turn.reason}")
    if not consultation.transcript:
        lines.append("No questions were answered.")
    reason = consultation.stop_reason
    lines += ["", f"Questions asked: {consultation.questions_asked}."]
    if reason:
        lines.append(f"Stopped: {reason}.")
    return "\n".join(lines) + "\n"


def export_text(consultation: Consultation, report: Report, fmt: str) -> str:
    """The report in an export format (`expert.export`), with the transcript attached in that format's own way."""
    from ..report.render import export

    text = export(report, fmt)
    transcript = transcript_markdown(consultation)
    if fmt == "json":  # the export's own document, plus the whole session
        document = json.loads(text)
        document["consultation"] = json.loads(consultation.to_json())
        return json.dumps(document, indent=2) + "\n"
    if fmt == "markdown":
        return text.rstrip("\n") + "\n\n" + transcript
    if fmt == "html":
        section = ("<section id=\"consultation\"><h2>Consultation transcript</h2><pre>"
                   + html.escape(transcript) + "</pre></section>\n")
        return text.replace("</body>", section + "</body>", 1) if "</body>" in text else text + section
    comment = {"mermaid": "%% ", "dot": "// "}.get(fmt)
    if comment is not None:
        return "".join(f"{comment}{line}\n" for line in transcript.splitlines()) + text
    if fmt == "graphml":
        note = "<!--\n" + transcript.replace("--", "- -") + "-->\n"
        head, sep, rest = text.partition("?>\n")
        return head + sep + note + rest if sep else note + text
    return text


# ---- the loop ------------------------------------------------------------------------------------------------------


class _Session:
    """The terminal side of one consultation: prompts, commands, saving."""

    def __init__(self, consultation: Consultation, path: Path, console: Console, interactive: bool) -> None:
        self.c = consultation
        self.path = path
        self.console = console
        self.interactive = interactive
        self.interrupted = False  # Ctrl-C came while the last answer was being read
        self.reader = TerminalReader()

    def say(self, text: str, style: str | None = None) -> None:
        self.console.print(text, style=style, markup=False, highlight=False, soft_wrap=not self.interactive)

    def save(self) -> None:
        save(self.c, self.path)

    def resume_hint(self) -> str:
        return f"session saved to {self.path}\nresume with: dam consult --resume {self.path}"

    def show_question(self, q: Question) -> None:
        self.say("")
        self.say(f"Q{q.number}. {q.prompt()}", style="bold")
        for tool, note in q.choice_help.items():
            self.say(f"   {tool:24s} {note}", style="dim")
        if q.measure and (q.cost >= 3 or self.c.status().verdict):
            self.say(f"   measure it with {q.measure}", style="dim")
        if q.group:
            self.say(f"   (no-tool: no {q.group} data; also skips {', '.join(q.group_facts)})", style="dim")

    def ask(self, q: Question) -> str:
        """Read one line; EOFError and KeyboardInterrupt propagate to the caller."""
        line, self.interrupted = self.reader.read("> ")
        if not self.interactive:
            self.say(line)
        return line

    def handle(self, q: Question, line: str) -> str | None:
        """Act on one line; returns "next" (ask the next question), "again", "quit" or "done"."""
        from ..errors import ExpertError

        text = line.strip()
        word = text.casefold()
        if not text:
            self.say("type an answer, `unknown`, or `help`", style="yellow")
            return "again"
        if word in ("help", "h"):
            self.say(HELP)
            return "again"
        if word in ("quit", "exit", "q"):
            return "quit"
        if word in ("done", "report", "stop"):
            self.c.stop()
            return "done"
        if word == "status":
            self.say(self.c.status().text())
            return "again"
        if word in ("back", "undo"):
            turn = self.c.undo()
            self.save()
            self.say(f"took back: {turn.fact} = {'unknown' if turn.value is None else turn.raw}" if turn
                     else "nothing to take back", style="yellow")
            return "next"
        try:
            if word == "why" or word.startswith("why "):
                fact = text[3:].strip() or None
                self.say(self.c.why(fact).text())
                return "again"
            if word in ("no-tool", "notool", "no tool"):
                self.c.unknown(q.fact, whole_group=True)
            elif "=" in text and text.split("=", 1)[0].strip().isidentifier():
                name, value = (part.strip() for part in text.split("=", 1))
                self.c.answer(name, value, raw=value)
            else:
                before = self.c.status().verdict
                self.c.answer(q.fact, text, raw=text)
                self.save()
                self._after(before)
                return "next"
        except ExpertError as exc:
            self.say(str(exc), style="red")
            if not text.startswith("why"):
                self.say(f"accepted: {q.accepted}", style="yellow")
            return "again"
        self.save()
        return "next"

    def _after(self, before: str | None) -> None:
        """After an answer that changed the leading hypothesis: say so, and which tool confirms it (seed Table 4)."""
        status = self.c.status()
        if status.verdict == before or not status.verdict_title:
            return
        self.say(f"   -> leading hypothesis now: {status.verdict_title}", style="cyan")
        confirm = next((m for m in self.c.report().next_measurements if m.fact is None), None)
        if confirm is not None:
            self.say(f"   to confirm it: {confirm.tool} ({confirm.how})", style="dim")

    def loop(self) -> str:
        """Ask until done; returns "finished", "done" or "quit"."""
        while True:
            q = self.c.next_question()
            if q is None:
                return "finished"
            self.show_question(q)
            while True:
                # deferred from before the read: a Ctrl-C right after Enter waits until the answer is saved
                with interrupts_deferred() as arrived:
                    line = self.ask(q)
                    if self.interrupted:
                        arrived.append(signal.SIGINT)
                    outcome = self.handle(q, line)
                if outcome == "again":
                    continue
                if outcome in ("quit", "done"):
                    return outcome
                break

    def scripted(self, answers: dict[str, Any], source: str) -> None:
        """Answer every question from `answers` ("unknown" for what they lack); then record the facts they give that
        no question asked for (they could not change the verdict or the recommendations, but they are the user's
        evidence: the report shows them and does not ask for them again)."""
        from ..observations.normalise import format_value, is_unknown

        self._ask_from(answers, source)
        facts = self.c.expert.kb.facts
        used = {name for t in self.c.transcript if not t.undone for name in (t.fact, *t.sets)}
        left = [name for name in answers if name not in used and name not in self.c.answers
                and (spec := facts.get(name)) is not None and spec.askable and not is_unknown(answers[name])]
        if not left:
            return
        for name in left:
            self.c.answer(name, answers[name], source=source)
        given = self.c.answers
        self.say("")
        self.say(f"not asked, taken from {source} (they could not change the verdict or the recommendations): "
                 + ", ".join(f"{name} = {format_value(facts.get(name), given[name])}" for name in left), style="dim")
        self.save()
        self._ask_from(answers, source)  # nothing is left to ask, unless one of them opened a question

    def _ask_from(self, answers: dict[str, Any], source: str) -> None:
        from ..consult.session import AVAILABLE_TOOLS, answer_from
        from ..observations.normalise import is_unknown

        while (q := self.c.next_question()) is not None:
            self.show_question(q)
            raw = answer_from(q, answers, self.c.expert)
            if raw is None or is_unknown(raw):
                self.say(f"> unknown (not in {source})")
                self.c.unknown(q.fact)
                self.save()
                continue
            before = self.c.status().verdict
            if isinstance(raw, dict):  # a combined question's members: shown as its choice ("training") if one
                turn = self.c.answer(q.fact, raw)
                shown = str(turn.value)
            else:
                shown = (", ".join(map(str, raw)) or "none") if isinstance(raw, list) else str(raw)
                self.c.answer(q.fact, raw, raw=shown)
            derived = q.fact == AVAILABLE_TOOLS and q.fact not in answers
            self.say(f"> {shown}" + (f" (the tools behind the facts in {source})" if derived else ""))
            if q.fact != AVAILABLE_TOOLS:
                self._after(before)
            self.save()


def run(args: argparse.Namespace) -> int:
    from ..consult.session import Consultation
    from ..errors import ObservationError, Problem
    from ..report.render.console import SafeConsole as Console
    from ._common import make_expert

    if args.output and not args.export:
        formats = ", ".join(_export_formats())
        raise ObservationError([Problem("--output", "needs --export FORMAT",
                                        f"e.g. --export markdown --output consult.md ({formats})")],
                               title="invalid option")
    if args.export and not args.output:
        raise ObservationError([Problem("--export", "needs --output FILE", "e.g. --output consult.md")],
                               title="invalid option")
    if args.from_files and args.resume:
        raise ObservationError([Problem("--from", "starts a new session and cannot be combined with --resume",
                                        "resume the session, and give a measured fact at a prompt as NAME=VALUE")],
                               title="invalid option")
    answers: dict[str, Any] | None = None
    expert_ = make_expert(args)  # the default Expert, or one with the --hardware-file entries
    if args.answers:
        from ..observations.file import read_observation_file

        answers = dict(read_observation_file(Path(args.answers)).observations)
        from ..consult import combined
        from ..consult.session import AVAILABLE_TOOLS

        kb = expert_.kb
        # answers to the tools question and to combined questions ("job: training") are not facts
        facts = {k: v for k, v in answers.items() if k != AVAILABLE_TOOLS and k not in kb.questions}
        expert_.observations(facts)  # every problem in the file at once, before any question
        for name in [k for k in answers if k in kb.questions]:
            try:
                combined.parse(kb.questions[name], answers[name], kb)
            except ValueError as exc:
                raise ObservationError([Problem(f"{args.answers}: {name}", str(exc),
                                                f"accepted: {combined.accepted(kb.questions[name], kb)}")]) from exc
    consultation = load(Path(args.resume), expert_) if args.resume else Consultation(expert_)
    if args.from_files:
        from .ingest import ingested_observations

        observations, ingested = ingested_observations(args, args.from_files, expert_.kb)
        args.time_breakdown = ingested.time_breakdown  # for the final report's "where the time goes"
        for name, obs in observations.items():
            consultation.answer(name, obs["value"], source=obs.get("source"))
    path = Path(args.save) if args.save else (Path(args.resume) if args.resume else default_session_path())
    interactive = sys.stdin.isatty()
    console = Console()
    session = _Session(consultation, path, console, interactive)
    session.save()
    session.say(f"dam consult: {'resuming' if args.resume else 'new'} session, saved after every answer to {path}",
                style="dim")
    if args.resume:
        session.say(f"{consultation.questions_asked} questions answered so far; `back` takes the last one back",
                    style="dim")
    if args.from_files:
        from ..observations.normalise import format_value

        facts = consultation.expert.kb.facts
        given = [f"{name} = {format_value(facts.get(name), value)}" for name, value in consultation.answers.items()]
        session.say(f"from {', '.join(args.from_files)}: {', '.join(given) or 'no facts'}", style="dim")
    if not args.answers and interactive:
        session.say("type `help` at any prompt for the commands (why, back, status, done, quit)", style="dim")
    try:
        if answers is not None:
            session.scripted(answers, args.answers)
            outcome = "finished"
        else:
            outcome = session.loop()
    except KeyboardInterrupt:
        session.save()
        print(f"\ninterrupted; {session.resume_hint()}", file=sys.stderr)
        return 130
    except EOFError:
        session.save()
        print(f"\ninput ended before the consultation finished; {session.resume_hint()}", file=sys.stderr)
        return 1
    session.save()
    if outcome == "quit":
        session.say(session.resume_hint())
        return 0
    return finish(session, args, answers)


def finish(session: _Session, args: argparse.Namespace, answers: dict[str, Any] | None) -> int:
    from ..report.render.terminal import print_report

    c = session.c
    reason = c.stop_reason or "finished"
    session.say("")
    session.say(f"Consultation finished after {c.questions_asked} questions: {reason}.", style="bold")
    if answers is not None:
        used = {name for t in c.transcript if not t.undone for name in (t.fact, *t.sets)}
        unused = sorted(set(answers) - used)
        if unused:
            session.say(f"in {args.answers} but not used (no question asked for them): {', '.join(unused)}",
                        style="dim")
    report = c.report()
    if getattr(args, "time_breakdown", None) is not None:
        report.time_breakdown = args.time_breakdown
    print_report(report, session.console)
    if args.export:
        from ..errors import write_output

        target = write_output(args.output, export_text(c, report, args.export))
        session.say(f"wrote the {args.export} export with the transcript to {target}", style="dim")
    session.say(f"session saved to {session.path}", style="dim")
    return 0
