"""NVTX ranges as steps: which ranges mean one iteration (named like steps and repeating, or named by the user with
`--step-range NAME`), per process, numbered and selected by `--steps` / `--window`; and the DataLoader and training
ranges found in the same scan."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..records import Range
from .names import OPERATOR

if TYPE_CHECKING:
    from .._source import Source
    from .rows import NsysExport

_STEP_WORDS = re.compile(r"(?i)^(?:profiler_?step|(?:train(?:ing)?|fwd_?bwd|forward_?backward|optimi[sz]er|"
                         r"eval|val(?:idation)?|inference|decode|serve)?[ _.-]?(?:step|iteration|iter|batch))$")
_NUMBER_SUFFIX = re.compile(r"^(?P<base>.*?)(?:\s*[#:_ -]\s*(?P<n>\d+))$")
ANNOTATION = re.compile(r"(?:,\s*(?:seq|op_id)\s*=\s*\d+)+$")
LOADER = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")
TRAINING = ("autograd::engine::evaluate_function", "Optimizer.step#")
_NOT_STEPS = re.compile(r"(?i)optimizer\.step|lr_scheduler|scheduler\.step|aten::|^cuda|^nccl")
NO_STEPS = ("the export has no NVTX ranges named like steps that repeat (annotate each iteration with "
             "torch.cuda.nvtx.range('step') or name the range with --step-range NAME)")


def step_base(name: str) -> tuple[str, int | None]:
    """A range name without emit_nvtx's `, seq = N, op_id = N` annotation and a trailing step number (`step#3`,
    `iteration 12`, `train_step_7`), and that number."""
    text = ANNOTATION.sub("", name).strip()
    match = _NUMBER_SUFFIX.match(text)
    if match and match.group("base").strip():
        return match.group("base").strip(), int(match.group("n"))
    return text, None


def looks_like_step(base: str) -> bool:
    """True for range names that mean one training/serving iteration (a pattern, not a guess: see _STEP_WORDS)."""
    return bool(_STEP_WORDS.match(base.strip())) and not _NOT_STEPS.search(base)



StepList = list[tuple[int, float, float]]
"""(key, start_us, end_us) of each step of one process; keys are unique across processes (`NvtxSteps.numbers`)."""


class NvtxSteps:
    """One scan of NVTX_EVENTS, kept: the step ranges per process, the DataLoader ranges, the training ranges."""

    def __init__(self, export: NsysExport, src: Source, *, step_range: str | None,
                 step_numbers: tuple[int | None, int | None] | None,
                 time_window: tuple[float | None, float | None] | None, first_us: float) -> None:
        self.x, self.src = export, src
        self.step_range, self.step_numbers, self.time_window, self.first = step_range, step_numbers, time_window, \
            first_us
        self.step_name: str | None = None
        self.numbers: dict[int, int] = {}
        """step key -> its number (the range's own trailing number, or its order from 1)."""
        self.no_steps_reason = NO_STEPS
        self.notes: list[str] = []
        self._scan: tuple[list[Range], list[Range], int] | None = None

    def scan(self) -> tuple[list[Range], list[Range], int]:
        """One scan of NVTX_EVENTS, kept: (step ranges: the named one, or candidates named like steps; DataLoader
        ranges; the number of backward/optimizer ranges)."""
        if self._scan is None:
            named = self.step_range.strip() if self.step_range else None
            steps: list[Range] = []
            loader: list[Range] = []
            training = 0
            # emit_nvtx's operators (most rows) are never steps (_NOT_STEPS), DataLoader or training ranges: skipped
            # first, unless the user names the step range
            for rg in self.x.ranges(prefixes=(*LOADER, *TRAINING, *((named,) if named else ())),
                                    likes=() if named else ("%step%", "%iter%", "%batch%"),
                                    not_prefixes=() if named else (OPERATOR,)):
                name = rg.name
                if named is not None:
                    if name == named or step_base(name)[0] == named:
                        steps.append(rg)
                elif not name.startswith(LOADER) and not name.startswith(TRAINING):
                    steps.append(rg)
                if name.startswith(LOADER):
                    loader.append(rg)
                elif name.startswith(TRAINING):
                    training += 1
            self._scan = (steps, loader, training)
        return self._scan

    @staticmethod
    def _all_numbers(by_proc: dict[int, list[Range]]) -> Iterator[int]:
        for lst in by_proc.values():
            nums = [step_base(rg.name)[1] for rg in lst]
            if any(n is None for n in nums):
                yield from range(1, len(lst) + 1)
            else:
                yield from (n for n in nums if n is not None)

    def by_process(self) -> dict[int, StepList]:
        """Process -> its step ranges as (key, start_us, end_us), outermost and non-overlapping, after --steps and
        --window; sets step_name. Raises when --step-range names a range the export does not have."""
        x = self.x
        if self.step_range:
            name = self.step_range.strip()
            found = self.scan()[0]
            if not found:
                shown = ", ".join(f"{n!r} ×{c}" for n, c in x.range_names())
                raise self.src.problem(f"--step-range {name}: no NVTX range of that name in the export"
                                       + (f" (most frequent: {shown})" if shown else " (it has no NVTX ranges)"),
                                       hint="name a range the export has; trailing step numbers (step#3, "
                                            "iteration 12) and emit_nvtx's ', seq = N, op_id = N' are ignored")
            base = name
        else:
            candidates: dict[str, list[Range]] = defaultdict(list)
            for rg in self.scan()[0]:
                b, _ = step_base(rg.name)
                if looks_like_step(b):
                    candidates[b].append(rg)
            repeating = {b: v for b, v in candidates.items() if len(v) >= 2}
            if not repeating:
                if candidates:
                    self.no_steps_reason = (f"the step-like NVTX range {next(iter(candidates))!r} occurs once; "
                                             "name a repeating range with --step-range NAME")
                elif self.step_numbers is not None:
                    raise self.src.problem(f"--steps: {NO_STEPS}", hint="use --window START:END (seconds) instead")
                return {}
            base = max(repeating, key=lambda b: (sum(rg.end_us - rg.start_us for rg in repeating[b]), b))
            found = repeating[base]
            others = sorted(b for b in repeating if b != base)
            if others:
                self.notes.append(f"NVTX step ranges: used {base!r}; also named like steps: {', '.join(others)} "
                               "(choose with --step-range NAME)")
        self.step_name = base
        by_thread: dict[tuple[int, int], list[Range]] = defaultdict(list)
        for rg in found:
            by_thread[(rg.process, rg.thread)].append(rg)
        by_proc: dict[int, list[Range]] = {}
        for (proc, _), lst in by_thread.items():
            if proc not in by_proc or len(lst) > len(by_proc[proc]):
                by_proc[proc] = lst
        out: dict[int, StepList] = {}
        key = 0
        self.numbers = {}
        for proc, lst in by_proc.items():
            lst.sort(key=lambda rg: (rg.start_us, -rg.end_us))
            outer: list[Range] = []
            for rg in lst:
                if outer and rg.start_us < outer[-1].end_us:
                    continue  # nested in (or overlapping) the previous step: keep the outermost
                outer.append(rg)
            numbered = [(step_base(rg.name)[1], rg) for rg in outer]
            if any(n is None for n, _ in numbered):
                numbered = [(i + 1, rg) for i, (_, rg) in enumerate(numbered)]
            kept: StepList = []
            for n, rg in numbered:
                assert n is not None
                if self.step_numbers is not None:
                    lo, hi = self.step_numbers
                    if (lo is not None and n < lo) or (hi is not None and n > hi):
                        continue
                if self.time_window is not None:
                    w_lo, w_hi = self.time_window
                    if (w_lo is not None and rg.start_us < self.first + w_lo * 1e6) or \
                            (w_hi is not None and rg.start_us > self.first + w_hi * 1e6):
                        continue
                kept.append((key, rg.start_us, rg.end_us))
                self.numbers[key] = n
                key += 1
            if kept:
                out[proc] = kept
        if not out:
            available = sorted({n for n in self._all_numbers(by_proc)})
            shown = ", ".join(f"#{n}" for n in available[:20]) + (" ..." if len(available) > 20 else "")
            raise self.src.problem(f"no {base!r} step ranges in the selected range (the export has {shown})",
                                   hint=f"pick steps the export has, e.g. --steps {available[0]}:{available[-1]}"
                                   if available else "")
        return out

