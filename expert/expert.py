"""The Expert: knowledge base and rules loaded and compiled once, then any number of diagnoses, from any thread."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _loadcache
from ._resources import data_dir
from .breakdown import TimeBreakdown
from .derive.graph import GRAPH, DeriveMemo
from .diagnosis.build import build_report
from .engine import EngineName, make_engine
from .kb.knowledge import KnowledgeBase
from .observations.normalise import Observations, normalise
from .report.model import Report
from .rules.ruleset import RuleSet

if TYPE_CHECKING:
    from .kb.custom import ExtraHardware


class Expert:
    """A long-lived diagnostician. Holds no per-diagnosis state, so one instance serves many threads.

    >>> expert = Expert()
    >>> expert.diagnose({"hardware": "h100-sxm", "gpu_util": "45%", "data_wait_s": 0.12, "step_time_s": 0.3}).bottleneck
    'input'
    """

    def __init__(
        self,
        rules_dirs: Sequence[str | Path] | None = None,
        knowledge_base: str | Path | None = None,
        *,
        extra_rules_dirs: Sequence[str | Path] = (),
        engine: EngineName = "auto",
        extra_hardware: ExtraHardware | None = None,
    ) -> None:
        """`extra_hardware`: entries beside the hardware catalog, for this Expert only: a YAML/JSON file in the
        catalog's schema, or a list of mappings / HardwareSpec. An id the catalog already has is an error."""
        kb_dir = Path(knowledge_base) if knowledge_base is not None else data_dir("knowledge_base")
        dirs = [Path(d) for d in rules_dirs] if rules_dirs is not None else [data_dir("rules")]
        dirs += [Path(d) for d in extra_rules_dirs]
        if extra_hardware is None:
            self.kb, self.ruleset = _loadcache.load(kb_dir, dirs)  # both from the cache where it holds them
        else:
            from .kb.custom import extra_hardware_specs  # only for extra hardware

            kb = KnowledgeBase.load(kb_dir)
            specs, where = extra_hardware_specs(extra_hardware)
            self.kb = kb.with_hardware(specs, where)
            self.ruleset = RuleSet.load(dirs, self.kb)
        self.engine = make_engine(self.ruleset, engine)
        self._derive_memo = DeriveMemo()  # the derived values that depend on hardware and dtype alone

    @property
    def engine_name(self) -> str:
        return self.engine.name

    def observations(self, raw: Mapping[str, Any] | Observations) -> Observations:
        """Validate and normalise raw observations (units, percentages, hardware aliases)."""
        return normalise(self.kb, raw, given_instead=GRAPH.given_instead)

    def diagnose(self, observations: Mapping[str, Any] | Observations, *,
                 time_breakdown: TimeBreakdown | None = None) -> Report:
        """Diagnose one set of observations. Raises ObservationError (with every problem) on invalid input.

        time_breakdown: where the GPU time went (`IngestResult.time_breakdown` of the trace the observations came
        from); it is carried into `Report.time_breakdown` for the report's "where the time goes" section."""
        obs = normalise(self.kb, observations, given_instead=GRAPH.given_instead)
        facts, derived = GRAPH.derive_deferred(obs.values(), self.kb, memo=self._derive_memo)
        result = self.engine.run(facts)
        report = build_report(self.kb, self.ruleset, self.engine.name, obs, derived, result, facts)
        if time_breakdown is not None:
            report.time_breakdown = time_breakdown
        return report
