"""The cross-file checks of a knowledge base: every fact, tool, measurement, axis, term, dtype, question and
interconnect a knowledge_base/*.yaml file names is one another file defines, and hardware names match one entry each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import KnowledgeBaseError, Problem
from .catalogs import hardware_key
from .mig import memory_slice_share, profile_shape

if TYPE_CHECKING:
    from .knowledge import KnowledgeBase


def check_references(kb: KnowledgeBase) -> None:
    """Raise KnowledgeBaseError listing every name a knowledge-base file uses that another does not define."""
    where = str(kb.source or "knowledge_base")
    problems: list[Problem] = check_hardware_names(kb, f"{where}/hardware.yaml")
    for fact in kb.facts.values():
        if fact.dimension and fact.dimension not in kb.units.dimensions:
            problems.append(Problem(f"{where}/facts.yaml: {fact.name}", f"unknown dimension {fact.dimension!r}"))
        if fact.measure and fact.measure not in kb.tools.measurements:
            problems.append(Problem(f"{where}/facts.yaml: {fact.name}", f"unknown measurement {fact.measure!r}"))
    problems.extend(_check_questions(kb, where))
    for cap in kb.regimes.evidence_caps:
        problems.extend(Problem(f"{where}/regimes.yaml: evidence_caps.{cap.finding}.conflict",
                                f"unknown fact {name!r}") for name in cap.conflict if name not in kb.facts)
    for name in kb.tools.consultation.available_tools.after:
        if name not in kb.facts:
            problems.append(Problem(f"{where}/tools.yaml: consultation.available_tools.after",
                                    f"unknown fact {name!r}"))
    for name, m in kb.tools.measurements.items():
        if m.tool not in kb.tools.tools:
            problems.append(Problem(f"{where}/tools.yaml: measurements.{name}", f"unknown tool {m.tool!r}"))
    for axis, row in kb.tools.axes.items():
        for tool in [row.primary, *row.secondary]:
            if tool not in kb.tools.tools:
                problems.append(Problem(f"{where}/tools.yaml: axes.{axis}", f"unknown tool {tool!r}"))
    problems.extend(_check_vocabulary(kb, where))
    for term, term_spec in kb.regimes.terms.items():
        for fact_name in filter(None, (term_spec.share, term_spec.seconds)):
            if fact_name not in kb.facts:
                problems.append(Problem(f"{where}/regimes.yaml: terms.{term}", f"unknown fact {fact_name!r}"))
    vendors = {hw.vendor for hw in kb.hardware.values()}
    for name, spec in kb.units.dtypes.items():
        for vendor in spec.opt_in_vendors:
            if vendor not in vendors:
                problems.append(Problem(f"{where}/units.yaml: dtypes.{name}",
                                        f"opt_in_vendors: unknown vendor {vendor!r}",
                                        f"the vendors of hardware.yaml: {', '.join(sorted(vendors))}"))
    for opt in kb.optimizations.values():
        if opt.shrinks not in kb.regimes.terms:
            problems.append(Problem(f"{where}/optimizations.yaml: {opt.id}",
                                    f"shrinks {opt.shrinks!r}, which regimes.yaml `terms` does not define"))
        if opt.floor is not None and opt.floor not in kb.facts:
            problems.append(Problem(f"{where}/optimizations.yaml: {opt.id}", f"floor: unknown fact {opt.floor!r}"))
        for field_name, names in (("acts_on", opt.acts_on), ("removes", opt.removes)):
            for fact_name in names:
                if fact_name not in kb.facts:
                    problems.append(Problem(f"{where}/optimizations.yaml: {opt.id}",
                                            f"{field_name}: unknown fact {fact_name!r}"))
        if opt.term_speedup is not None and opt.term_speedup not in kb.facts:
            problems.append(Problem(f"{where}/optimizations.yaml: {opt.id}",
                                    f"term_speedup: unknown fact {opt.term_speedup!r}"))
        if isinstance(opt.data_term_speedup, str) and opt.data_term_speedup not in kb.facts:
            problems.append(Problem(f"{where}/optimizations.yaml: {opt.id}",
                                    f"data_term_speedup: unknown fact {opt.data_term_speedup!r}"))
        for vendor in opt.for_vendor:
            if vendor not in vendors:
                problems.append(Problem(f"{where}/optimizations.yaml: {opt.id}",
                                        f"for_vendor: unknown vendor {vendor!r}",
                                        f"the vendors of hardware.yaml: {', '.join(sorted(vendors))}"))
        for fact_name, value in opt.implies.items():
            implied = kb.facts.get(fact_name)
            if implied is None or not implied.askable or implied.type != "enum" or value not in (implied.choices or []):
                problems.append(Problem(f"{where}/optimizations.yaml: {opt.id}", f"implies: {fact_name} = {value!r} is "
                                        "not an observable enum fact and one of its choices"))
    problems.extend(_check_mig(kb, where))
    for part_id, upgrade in kb.hardware_upgrades.items():
        for name in (part_id, upgrade.to):
            if name not in kb.hardware:
                problems.append(Problem(f"{where}/hardware.yaml: upgrades.{part_id}", f"unknown hardware {name!r}",
                                        "upgrades map catalog ids to catalog ids"))
    for dtype_id, dtype_spec in kb.units.dtypes.items():
        for lower in dtype_spec.lower:
            if lower not in kb.units.dtypes or kb.units.dtypes[lower].bytes >= dtype_spec.bytes:
                problems.append(Problem(f"{where}/units.yaml: dtypes.{dtype_id}.lower", f"{lower!r} is not a narrower "
                                        "dtype", "a dtype of units.yaml `dtypes` with fewer bytes per element"))
        for fmt in dtype_spec.tensor_cores:
            if fmt not in kb.units.dtypes:
                problems.append(Problem(f"{where}/units.yaml: dtypes.{dtype_id}.tensor_cores", f"unknown dtype {fmt!r}",
                                        "a dtype of units.yaml `dtypes`"))
    low = kb.kernels.low_precision_gemm if kb.kernels is not None else None
    for fmt in (low.formats if low is not None else {}):
        if fmt not in kb.units.dtypes:
            problems.append(Problem(f"{where}/kernels.yaml: low_precision_gemm.formats", f"unknown dtype {fmt!r}",
                                    "a dtype of units.yaml `dtypes`"))
    for metric in kb.scorecard.metrics:
        if metric.fact not in kb.facts:
            problems.append(Problem(f"{where}/scorecard.yaml: {metric.id}", f"unknown fact {metric.fact!r}"))
    problems.extend(_check_interconnects(kb, where))
    if problems:
        raise KnowledgeBaseError(problems, title="the knowledge base refers to things it does not define")


def _check_mig(kb: KnowledgeBase, where: str) -> list[Problem]:
    """MIG profiles name catalog parts, and each profile's memory is a whole number of the part's memory slices (so
    its bandwidth share is the guide's "fraction of memory", not a guess); a slice names the part it is carved from."""
    problems: list[Problem] = []
    mig = kb.hardware_mig
    for part_id, part in (mig.parts if mig is not None else {}).items():
        at = f"{where}/hardware.yaml: mig.parts.{part_id}"
        hw = kb.hardware.get(part_id)
        if hw is None or hw.mig_of is not None:
            problems.append(Problem(at, f"{part_id!r} is not a catalog part", "name a part's id (dam hardware list)"))
            continue
        for profile in part.profiles:
            shape = profile_shape(profile)
            slices = None if shape is None else memory_slice_share(hw, part.memory_slices, shape[1])
            if shape is None or slices is None:
                continue
            if abs(slices - round(slices)) > 0.1 or round(slices) < 1 or round(slices) > part.memory_slices:
                problems.append(Problem(f"{at}: {profile}", f"{shape[1]} GB is not a whole number of the part's "
                                        f"{part.memory_slices} memory slices of {hw.memory_gb:g} GB",
                                        "check the profile name against the MIG User Guide"))
    for hw in kb.hardware.values():
        if hw.mig_of is not None and hw.mig_of not in kb.hardware:
            problems.append(Problem(f"{where}: {hw.id}", f"mig_of names {hw.mig_of!r}, not a catalog id"))
    return problems


def check_hardware_names(kb: KnowledgeBase, where: str) -> list[Problem]:
    """Ids and aliases name one entry each (as matched: `hardware_key`); families name an entry and no alias."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for hw in kb.hardware.values():
        for alias in [hw.id, *hw.aliases]:
            key = hardware_key(alias, kb.hardware_prefixes)
            if not key:
                problems.append(Problem(f"{where}: {hw.id}", f"alias {alias!r} has no letters or digits"))
            elif key in seen and seen[key] != hw.id:
                problems.append(Problem(f"{where}: {hw.id}", f"alias {alias!r} also names {seen[key]}",
                                        "names match ignoring case, separators and a leading vendor word"))
            seen.setdefault(key, hw.id)
    for name, family in kb.hardware_families.items():
        at = f"{where}: families.{name}"
        for target in [family.default, *family.variants]:
            if target not in kb.hardware:
                problems.append(Problem(at, f"{target!r} is not a catalog id"))
        key = hardware_key(name, kb.hardware_prefixes)
        if key in seen and seen[key] != family.default:
            problems.append(Problem(at, f"the family name also names {seen[key]}, not its default "
                                    f"{family.default}", "a family name must not be another entry's name"))
        elif any(hardware_key(hw.id, kb.hardware_prefixes) == key for hw in kb.hardware.values()):
            problems.append(Problem(at, "the family name is a catalog id", "a family name must not be an id"))
    return problems


def _check_vocabulary(kb: KnowledgeBase, where: str) -> list[Problem]:
    """Axes, terms and dtypes named anywhere are the ones regimes.yaml and units.yaml define."""
    problems: list[Problem] = []
    axes, terms, dtypes = kb.regimes.axes, kb.regimes.terms, kb.units.dtypes

    def axis(at: str, name: str) -> None:
        if name not in axes:
            problems.append(Problem(at, f"unknown axis {name!r}",
                                    f"regimes.yaml `axes` defines: {', '.join(axes)}"))

    for term_id, term_spec in terms.items():
        if term_spec.part_of is not None and term_spec.part_of not in terms:
            problems.append(Problem(f"{where}/regimes.yaml: terms.{term_id}",
                                    f"part_of unknown term {term_spec.part_of!r}",
                                    f"`terms` defines: {', '.join(terms)}"))
    for regime_id, regime in kb.regimes.regimes.items():
        at = f"{where}/regimes.yaml: regimes.{regime_id}"
        if regime.term not in terms:
            problems.append(Problem(at, f"unknown term {regime.term!r}", f"`terms` defines: {', '.join(terms)}"))
        for name in [*regime.axes, regime.confirm_axis]:
            axis(at, name)
        if regime.confirm_with is not None and regime.confirm_with.tool not in kb.tools.tools:
            problems.append(Problem(f"{at}.confirm_with", f"unknown tool {regime.confirm_with.tool!r}",
                                    f"tools.yaml `tools` defines: {', '.join(kb.tools.tools)}"))
    for name in kb.tools.axes:
        axis(f"{where}/tools.yaml: axes.{name}", name)
    for metric in kb.scorecard.metrics:
        axis(f"{where}/scorecard.yaml: {metric.id}", metric.axis)
    for opt in kb.optimizations.values():
        axis(f"{where}/optimizations.yaml: {opt.id}", opt.axis)
    for hw in kb.hardware.values():
        for dtype in hw.peak_tflops:
            if dtype not in dtypes:
                problems.append(Problem(f"{where}/hardware.yaml: {hw.id}: peak_tflops", f"unknown dtype {dtype!r}",
                                        f"units.yaml `dtypes` defines: {', '.join(dtypes)}"))
    spec = kb.facts.get("dtype")
    if spec is not None and list(spec.choices or []) != list(dtypes):
        problems.append(Problem(f"{where}/facts.yaml: dtype", "the choices of `dtype` must be units.yaml `dtypes`, "
                                f"in order: {', '.join(dtypes)}"))
    return problems


def _check_questions(kb: KnowledgeBase, where: str) -> list[Problem]:
    """Combined questions name askable facts (each in one question at most), ids that no fact uses, and choices
    whose values the member facts accept."""
    problems: list[Problem] = []
    owner: dict[str, str] = {}
    for q in kb.questions.values():
        at = f"{where}/facts.yaml: questions.{q.id}"
        if q.id in kb.facts or q.id == "available_tools":
            problems.append(Problem(at, f"the id {q.id!r} is already a fact or question name"))
        for name in q.facts:
            spec = kb.facts.get(name)
            if spec is None or not spec.askable:
                problems.append(Problem(at, f"{name!r} is not an askable fact"))
            elif name in owner:
                problems.append(Problem(at, f"{name!r} is already asked by question {owner[name]!r}"))
            owner.setdefault(name, q.id)
        labels = [c.answer for c in q.choices or []]
        if len(set(labels)) != len(labels):
            problems.append(Problem(at, "two choices share an answer label"))
        for choice in q.choices or []:
            for name, value in choice.sets.items():
                spec = kb.facts.get(name)
                if name not in q.facts:
                    problems.append(Problem(f"{at}.{choice.answer}", f"sets {name!r}, not one of {q.facts}"))
                elif spec is not None and spec.type == "enum" and value not in (spec.choices or []):
                    problems.append(Problem(f"{at}.{choice.answer}", f"{name} = {value!r} is not one of "
                                            f"{', '.join(spec.choices or [])}"))
                elif spec is not None and spec.type == "hardware" and kb.resolve_hardware(value) is None:
                    problems.append(Problem(f"{at}.{choice.answer}", f"{name} = {value!r} is not in the "
                                            "hardware catalog"))
                elif spec is not None and spec.type in ("fraction", "number", "integer"):
                    problems.append(Problem(f"{at}.{choice.answer}", f"sets the {spec.type} {name}; choices "
                                            "may set only enum and hardware facts"))
    return problems


def _check_interconnects(kb: KnowledgeBase, where: str) -> list[Problem]:
    """Every catalog link is of a kind the `interconnect` fact offers; each such kind has exactly one default."""
    if not kb.interconnects:
        return []
    spec = kb.facts.get("interconnect")
    kinds = (spec.choices or []) if spec else []
    problems = [Problem(f"{where}/interconnects.yaml: {i.id}", f"kind {i.kind!r} is not a choice of the "
                        f"`interconnect` fact ({', '.join(kinds) or 'not defined'})")
                for i in kb.interconnects.values() if i.kind not in kinds]
    for kind in kinds:
        defaults = [i.id for i in kb.interconnects.values() if i.kind == kind and i.default]
        if len(defaults) != 1:
            problems.append(Problem(f"{where}/interconnects.yaml", f"kind {kind!r} needs exactly one `default: "
                                    f"true` entry, found {len(defaults)}"))
    return problems
