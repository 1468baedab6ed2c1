"""The knowledge base: fact vocabulary, hardware, optimizations, tools, scorecard, regimes and units (all YAML data),
loaded, checked (`checks.py`) and indexed. The models of each file are in `catalogs.py`; this module re-exports them,
so `expert.kb.knowledge` stays the one import path for knowledge-base types."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from pathlib import Path

from .._lazy import cached_property
from .._yaml import load_yaml, validate
from ..errors import KnowledgeBaseError, Problem
from .catalogs import (
    BAND_BOUNDS,
    Axis,
    AxisSpec,
    AxisTools,
    CallPatterns,
    CombinedQuestion,
    ConsultationWording,
    Dimension,
    Dtype,
    DtypeSpec,
    EvidenceCap,
    FactCatalog,
    FactSpec,
    HardwareCatalog,
    HardwareFamily,
    HardwareResolution,
    HardwareSpec,
    HardwareUpgrade,
    InterconnectCatalog,
    InterconnectSpec,
    KernelActivity,
    KernelCalls,
    KernelCatalog,
    KernelClass,
    LowPrecisionGemm,
    Measurement,
    MemoryModel,
    Optimization,
    OptimizationCatalog,
    QuestionChoice,
    Regime,
    RegimeCatalog,
    Scorecard,
    ScoreMetric,
    Strength,
    Term,
    TermSpec,
    Tool,
    ToolMap,
    ToolsQuestion,
    TraceAnalysisSettings,
    UnitTable,
    _Strict,
    hardware_key,
)
from .checks import check_hardware_names, check_references
from .mig import mig_entries

# a memory size in a device name, with the memory type after it when given: "80GB", "40 GB", "32GB HBM2", "24GiB"
_MEMORY_SIZE = re.compile(r"(?<![0-9a-z.])(\d+(?:\.\d+)?)\s*gi?b(?:\s*(?:hbm\d?e?|gddr\d+x?))?(?![0-9a-z])")


class KnowledgeBase:
    """Everything in knowledge_base/, validated and indexed. Immutable after loading; safe to share across threads."""

    def __init__(
        self,
        facts: FactCatalog,
        hardware: HardwareCatalog,
        optimizations: OptimizationCatalog,
        tools: ToolMap,
        scorecard: Scorecard,
        regimes: RegimeCatalog,
        units: UnitTable,
        source: Path | None = None,
        interconnects: InterconnectCatalog | None = None,
        kernels: KernelCatalog | None = None,
        memory: MemoryModel | None = None,
    ) -> None:
        self.source = source
        self.facts = {f.name: f for f in facts.facts}
        self.questions = {q.id: q for q in facts.questions}
        slices, slice_upgrades = mig_entries(hardware)  # each MIG profile is an entry of its own (expert.kb.mig)
        self.hardware = {h.id: h for h in [*hardware.hardware, *slices]}
        self.hardware_families = dict(hardware.families)
        self.hardware_prefixes = tuple(p.casefold() for p in hardware.name_prefixes)
        self.hardware_upgrades = {**slice_upgrades, **hardware.upgrades}
        self.hardware_mig = hardware.mig
        self.optimizations = {o.id: o for o in optimizations.optimizations}
        self.tools = tools
        self.scorecard = scorecard
        self.regimes = regimes
        self.units = units
        self.interconnects = {i.id: i for i in (interconnects.interconnects if interconnects else [])}
        self.kernels = kernels  # kernel classes for trace analysis (None: a knowledge base without kernels.yaml)
        self.memory = memory  # the memory-capacity constants (None: a knowledge base without memory.yaml)
        check_references(self)

    @classmethod
    def load(cls, directory: Path) -> KnowledgeBase:
        """Load and validate every file of a knowledge_base/ directory."""

        def part(name: str, model: type[_Strict]) -> _Strict:
            path = directory / f"{name}.yaml"
            return validate(model, load_yaml(path), path)

        return cls(
            facts=part("facts", FactCatalog),  # type: ignore[arg-type]
            hardware=part("hardware", HardwareCatalog),  # type: ignore[arg-type]
            optimizations=part("optimizations", OptimizationCatalog),  # type: ignore[arg-type]
            tools=part("tools", ToolMap),  # type: ignore[arg-type]
            scorecard=part("scorecard", Scorecard),  # type: ignore[arg-type]
            regimes=part("regimes", RegimeCatalog),  # type: ignore[arg-type]
            units=part("units", UnitTable),  # type: ignore[arg-type]
            source=directory,
            interconnects=part("interconnects", InterconnectCatalog)  # type: ignore[arg-type]
            if (directory / "interconnects.yaml").is_file() else None,
            kernels=part("kernels", KernelCatalog)  # type: ignore[arg-type]
            if (directory / "kernels.yaml").is_file() else None,
            memory=part("memory", MemoryModel)  # type: ignore[arg-type]
            if (directory / "memory.yaml").is_file() else None,
        )

    def with_hardware(self, extra: Iterable[HardwareSpec], where: str = "extra hardware") -> KnowledgeBase:
        """A copy of this knowledge base whose catalog also holds `extra` (this one is left unchanged).

        Raises KnowledgeBaseError when an extra entry reuses a catalog id or alias, or names an unknown dtype."""
        added = list(extra)
        problems: list[Problem] = []
        hardware = dict(self.hardware)
        for hw in added:
            if hw.id in hardware:
                origin = "the catalog" if hw.id in self.hardware else "another entry of the same file"
                problems.append(Problem(f"{where}: {hw.id}", f"the id is already used by {origin}",
                                        "choose another id (dam hardware list shows the catalog ids)"))
            hardware[hw.id] = hw
            for dtype in hw.peak_tflops:
                if dtype not in self.units.dtypes:
                    problems.append(Problem(f"{where}: {hw.id}: peak_tflops", f"unknown dtype {dtype!r}",
                                            f"units.yaml `dtypes` defines: {', '.join(self.units.dtypes)}"))
        if problems:
            raise KnowledgeBaseError(problems, title="the extra hardware cannot be added")
        kb = copy.copy(self)
        kb.hardware = hardware
        kb.__dict__.pop("_alias_index", None)  # the copy builds its own name index
        name_problems = check_hardware_names(kb, where)
        if name_problems:
            raise KnowledgeBaseError(name_problems, title="the extra hardware cannot be added")
        return kb

    def part_ids(self) -> list[str]:
        """The ids of the whole parts, sorted (the catalog less its MIG slices): what examples and lists offer."""
        return sorted(hw.id for hw in self.hardware.values() if hw.mig_of is None)

    def dtype_bytes(self, dtype: str) -> int | float:
        """Bytes per element of a numeric format (units.yaml `dtypes`)."""
        return self.units.dtypes[dtype].bytes

    def default_interconnect(self, kind: str) -> InterconnectSpec | None:
        """The catalog's default link of a kind (nvlink, pcie, infiniband, ethernet), if the catalog has one."""
        return next((i for i in self.interconnects.values() if i.kind == kind and i.default), None)

    @cached_property
    def _alias_index(self) -> tuple[dict[str, str], dict[str, str]]:
        """(case-folded id or alias -> catalog id, `hardware_key` of every id and alias -> catalog id)."""
        exact: dict[str, str] = {}
        loose: dict[str, str] = {}
        for hw in self.hardware.values():
            for alias in [hw.id, *hw.aliases]:
                exact.setdefault(alias.strip().casefold(), hw.id)
                loose.setdefault(hardware_key(alias, self.hardware_prefixes), hw.id)
        return exact, loose

    def resolve_hardware(self, name: str) -> str | None:
        """Map a catalog id, alias, device name ("NVIDIA H100 80GB HBM3", "Tesla T4") or family name ("h100") to a
        catalog id; case, separators and a leading vendor word do not matter. See `hardware_resolution`."""
        found = self.hardware_resolution(name)
        return found.id if found is not None else None

    def hardware_resolution(self, name: str) -> HardwareResolution | None:
        """How `name` maps to a catalog id. An id or alias as written (any case) wins; then a family name, which maps
        to its default variant with a note saying so; then an id or alias spelled with other separators or without
        the vendor word ("h100_sxm", "A100-80GB")."""
        exact, loose = self._alias_index
        hw_id = exact.get(name.strip().casefold())
        if hw_id is not None:
            return HardwareResolution(hw_id)
        key = hardware_key(name, self.hardware_prefixes)
        if not key:
            return None
        for family_name, family in self.hardware_families.items():
            if hardware_key(family_name, self.hardware_prefixes) == key:
                others = f"; say --set hardware={' or '.join(family.variants)} if not" if family.variants else ""
                note = f"{name.strip()} -> {family.default} ({family.why}{others})"
                return HardwareResolution(family.default, family_name, note)
        hw_id = loose.get(key)
        if hw_id is not None:
            return HardwareResolution(hw_id)
        return self._sized_resolution(name)

    def _sized_resolution(self, name: str) -> HardwareResolution | None:
        """A name with its memory size in it ("H100 80GB", "A100 40GB PCIe", "V100 32GB HBM2"): the name without the
        size resolved, then held to the size. A family's default that has that much memory stays its answer (with the
        family's note); else the first of its variants that has it; a size within a tenth of the listed one (B200's
        headline 192 GB beside the 180 the catalog lists) is that size, noted; a size no candidate has resolves to
        nothing (never the nearest-looking entry)."""
        sized = _MEMORY_SIZE.search(name.casefold())
        if sized is None:
            return None
        gb = float(sized.group(1))
        found = self.hardware_resolution(name.casefold()[:sized.start()] + " " + name.casefold()[sized.end():])
        if found is None:
            return None
        family = self.hardware_families.get(found.family) if found.family is not None else None
        candidates = [family.default, *family.variants] if family is not None else [found.id]
        sizes = {hw_id: self.hardware[hw_id].memory_gb for hw_id in candidates}
        fitting = [hw_id for hw_id, size in sizes.items() if size == gb] or [
            hw_id for hw_id, size in sizes.items() if size is not None and abs(size - gb) <= 0.1 * gb]
        if not fitting:
            return None
        hw_id = found.id if found.id in fitting else fitting[0]
        listed = sizes[hw_id]
        other_size = f"; the catalog lists {listed:g} GB" if listed != gb else ""
        if hw_id == found.id and family is not None:
            note = f"{name.strip()} -> {hw_id}" + (found.note or "").partition(" -> " + hw_id)[2]
            return HardwareResolution(hw_id, found.family, note[:-1] + other_size + ")" if other_size else note)
        if hw_id == found.id:
            return HardwareResolution(hw_id, None, f"{name.strip()} -> {hw_id} ({other_size[2:]})" if other_size
                                      else None)
        return HardwareResolution(hw_id, found.family, f"{name.strip()} -> {hw_id} (the {gb:g} GB part of the "
                                                       f"{found.family} family{other_size})")

    def close_hardware(self, name: str, n: int = 3, cutoff: float = 0.5) -> list[str]:
        """The ids whose id or alias reads most like `name`, matched as names are (`hardware_key`), for "did you
        mean": "A100-SXM4-40GB MIG 5g.25gb" is nearest the 40 GB part's slices, not the 80 GB part's."""
        import difflib

        loose = self._alias_index[1]
        out: list[str] = []
        for key in difflib.get_close_matches(hardware_key(name, self.hardware_prefixes), list(loose), n=4 * n,
                                             cutoff=cutoff):
            if loose[key] not in out:
                out.append(loose[key])
        return out[:n]

    def strength(self, name: str) -> int:
        return self.regimes.strengths[name]  # type: ignore[index]


__all__ = [
    "BAND_BOUNDS",
    "Axis",
    "AxisSpec",
    "AxisTools",
    "CallPatterns",
    "CombinedQuestion",
    "ConsultationWording",
    "Dimension",
    "Dtype",
    "DtypeSpec",
    "EvidenceCap",
    "FactCatalog",
    "FactSpec",
    "HardwareCatalog",
    "HardwareFamily",
    "HardwareResolution",
    "HardwareSpec",
    "HardwareUpgrade",
    "InterconnectCatalog",
    "InterconnectSpec",
    "KernelActivity",
    "KernelCalls",
    "KernelCatalog",
    "KernelClass",
    "KnowledgeBase",
    "LowPrecisionGemm",
    "Measurement",
    "MemoryModel",
    "Optimization",
    "OptimizationCatalog",
    "QuestionChoice",
    "Regime",
    "RegimeCatalog",
    "ScoreMetric",
    "Scorecard",
    "Strength",
    "Term",
    "TermSpec",
    "Tool",
    "ToolMap",
    "ToolsQuestion",
    "TraceAnalysisSettings",
    "UnitTable",
    "hardware_key",
]
