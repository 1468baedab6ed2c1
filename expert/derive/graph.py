"""The derivation graph: facts are its nodes, each derivation an edge from its inputs to its output. Everything that
walks it walks it here: applying the derivations (`derive`), the facts upstream of a quantity a user could give
(`askable_inputs`, `askable_inputs_given`), what a fact feeds (`downstream`, `feeds`), and whether a derivation could
still apply given what is known (`could_apply`, read from its declared gate).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .._weakcache import PerObject
from ..kb.knowledge import KnowledgeBase
from ..rules.evaluate import Evaluator, compile_condition
from ..rules.logic import facts_used
from ..rules.model import Condition
from .formulas import DerivedValue, Facts, Value, check_consistency
from .registry import DERIVATIONS, Derivation


@dataclass
class _Bound:
    """The graph's gates written for one knowledge base, and the answers that depend on it alone."""

    steps: tuple[tuple[Derivation, Evaluator | None], ...]  # every derivation in order, with its compiled gate
    gates: dict[int, tuple[Condition, Evaluator]]  # id(derivation) -> its gate's condition, compiled
    reads: dict[int, frozenset[str]]  # id(derivation) -> every fact it reads
    askable_inputs: dict[str, list[str]] = field(default_factory=dict)


class DerivationGraph:
    """The derivations as a graph over fact names, indexed once."""

    def __init__(self, derivations: Sequence[Derivation]) -> None:
        self.derivations = tuple(derivations)
        producers: dict[str, list[Derivation]] = {}
        consumers: dict[str, list[Derivation]] = {}
        for d in self.derivations:
            producers.setdefault(d.output, []).append(d)
            for name in d.inputs:
                if d not in consumers.setdefault(name, []):
                    consumers[name].append(d)
        self._producers = {name: tuple(ds) for name, ds in producers.items()}
        self._consumers = {name: tuple(ds) for name, ds in consumers.items()}
        self._gated_below: dict[str, bool] = {}
        self._bound: PerObject[KnowledgeBase, _Bound] = PerObject(self._bind)

    # the graph itself -----------------------------------------------------------------------------------------------

    def producers(self, name: str) -> tuple[Derivation, ...]:
        """The ways to derive `name`, in registry order (the first that applies wins)."""
        return self._producers.get(name, ())

    def consumers(self, name: str) -> tuple[Derivation, ...]:
        """The derivations that take `name` as an input, in registry order."""
        return self._consumers.get(name, ())

    def downstream(self, name: str) -> list[Derivation]:
        """Every derivation `name` feeds, directly or through other derived quantities, nearest first (each output
        once, through the first derivation that reaches it)."""
        out: list[Derivation] = []
        frontier, seen = [name], {name}
        while frontier:
            current = frontier.pop(0)
            for d in self.consumers(current):
                if d.output not in seen:
                    seen.add(d.output)
                    out.append(d)
                    frontier.append(d.output)
        return out

    def feeds(self, fact: str, d: Derivation, depth: int = 6) -> bool:
        """Whether `fact` is an input of `d` or, up to `depth` derivations up, of a way to one of its inputs."""
        return fact in d.inputs or (depth > 0 and any(
            self.feeds(fact, inner, depth - 1) for name in d.inputs for inner in self.producers(name)))

    def gated_below(self, name: str) -> bool:
        """Whether some derivation on the way from the askable facts to `name` has a gate."""
        if name not in self._gated_below:
            self._gated_below[name] = False  # guards against cycles
            self._gated_below[name] = any(d.gated or any(self.gated_below(i) for i in d.inputs)
                                          for d in self.producers(name))
        return self._gated_below[name]

    # gates ----------------------------------------------------------------------------------------------------------

    def _bind(self, kb: KnowledgeBase) -> _Bound:
        """The gates written for `kb`, compiled, and every derivation's reads."""
        steps: list[tuple[Derivation, Evaluator | None]] = []
        gates: dict[int, tuple[Condition, Evaluator]] = {}
        reads: dict[int, frozenset[str]] = {}
        for d in self.derivations:
            tested: list[str] = []
            evaluator = None
            if d.gate is not None:
                condition = d.gate.on(kb)
                evaluator = compile_condition(condition)
                gates[id(d)] = (condition, evaluator)
                tested = facts_used(condition)
            steps.append((d, evaluator))
            reads[id(d)] = frozenset((*d.inputs, *d.optional, *(s for _, s in d.substitutes), *tested))
        return _Bound(tuple(steps), gates, reads)

    def gate(self, d: Derivation, kb: KnowledgeBase) -> Condition | None:
        """The condition under which `d` applies, written for this knowledge base (None: it always applies)."""
        found = self._bound(kb).gates.get(id(d))
        return found[0] if found is not None else None

    def reads(self, d: Derivation, kb: KnowledgeBase) -> frozenset[str]:
        """Every fact `d` reads: its inputs, the optional ones and substitutes, and the facts its gate tests."""
        return self._bound(kb).reads[id(d)]

    def could_apply(self, d: Derivation, facts: Mapping[str, Value], kb: KnowledgeBase) -> bool:
        """Whether the known facts leave `d` able to apply: its gate is not false on them (three-valued, so a fact
        the gate tests that is not known yet could still open it)."""
        found = self._bound(kb).gates.get(id(d))
        return found is None or found[1](facts, (), None, False) != "false"

    # walking --------------------------------------------------------------------------------------------------------

    def derive(self, observed: Facts, kb: KnowledgeBase, *, check: bool = True) -> dict[str, DerivedValue]:
        """Apply every derivation whose inputs are known and whose gate holds, in order; observed facts are never
        overwritten. With `check` (the default) contradictory observations are refused first (`check_consistency`).
        """
        if check:
            check_consistency(observed)
        out: dict[str, DerivedValue] = {}
        self._walk(observed, kb, out)
        return out

    def values(self, observed: Facts, kb: KnowledgeBase) -> dict[str, Value]:
        """The observed facts with every value `derive` would add (unchecked, without the provenance records):
        what a what-if probe needs."""
        return self._walk(observed, kb, None)

    def _walk(self, observed: Facts, kb: KnowledgeBase, records: dict[str, DerivedValue] | None) -> dict[str, Value]:
        """The one pass over the derivations: the facts it ends with; each derived value's record into `records`."""
        facts: dict[str, Value] = dict(observed)
        for d, gate in self._bound(kb).steps:
            if d.output in facts or not facts.keys() >= d.needs:
                continue
            if gate is not None and gate(facts, (), None, False) != "true":
                continue
            result = d.compute(facts, kb)
            if records is not None:
                spec = kb.facts.get(d.output)
                records[d.output] = DerivedValue(
                    name=d.output, value=result.value, unit=spec.unit if spec else None, formula=d.formula,
                    inputs=d.recorded_inputs(facts), constants=result.constants, source=d.source, note=result.note,
                )
            facts[d.output] = result.value
        return facts

    def askable_inputs(self, name: str, kb: KnowledgeBase) -> list[str]:
        """The facts a user could supply to settle `name`: itself if askable, else the inputs of its derivations."""
        cache = self._bound(kb).askable_inputs
        if name not in cache:
            spec = kb.facts.get(name)
            if spec is not None and spec.askable:
                cache[name] = [name]
            else:
                out: list[str] = []
                for d in self.producers(name):
                    for inp in d.inputs:
                        for leaf in self.askable_inputs(inp, kb):
                            if leaf not in out:
                                out.append(leaf)
                cache[name] = out
        return cache[name]

    def askable_inputs_given(self, name: str, facts: Mapping[str, Value], kb: KnowledgeBase,
                             memo: dict[str, list[str]] | None = None) -> list[str]:
        """`askable_inputs`, leaving out the inputs already known and the ways to `name` that the known facts rule
        out (`could_apply`): no LLM-decode formula for a training job. `memo` caches answers for these same facts."""
        memo = {} if memo is None else memo
        if name in memo:
            return memo[name]
        if not self.gated_below(name):  # no way on the way has a gate: the cached inputs, less the known ones
            memo[name] = [leaf for leaf in self.askable_inputs(name, kb) if leaf not in facts]
            return memo[name]
        memo[name] = []  # guards against cycles
        spec = kb.facts.get(name)
        if spec is not None and spec.askable:
            memo[name] = [name]
            return memo[name]
        out: list[str] = []
        for d in self.producers(name):
            if d.gated and not self.could_apply(d, facts, kb):
                continue
            for inp in d.inputs:
                for leaf in self.askable_inputs_given(inp, facts, kb, memo) if inp not in facts else []:
                    if leaf not in out:
                        out.append(leaf)
        memo[name] = out
        return out


GRAPH = DerivationGraph(DERIVATIONS)


def derive(observed: Facts, kb: KnowledgeBase, *, check: bool = True) -> dict[str, DerivedValue]:
    """`DerivationGraph.derive` over the registry's derivations."""
    return GRAPH.derive(observed, kb, check=check)


def askable_inputs(name: str, kb: KnowledgeBase) -> list[str]:
    """`DerivationGraph.askable_inputs` over the registry's derivations."""
    return GRAPH.askable_inputs(name, kb)


def askable_inputs_given(name: str, facts: Mapping[str, Value], kb: KnowledgeBase,
                         memo: dict[str, list[str]] | None = None) -> list[str]:
    """`DerivationGraph.askable_inputs_given` over the registry's derivations."""
    return GRAPH.askable_inputs_given(name, facts, kb, memo)
