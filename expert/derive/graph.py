"""The derivation graph: facts are its nodes, each derivation an edge from its inputs to its output. Everything that
walks it walks it here: applying the derivations (`derive`), the facts upstream of a quantity a user could give
(`askable_inputs`, `askable_inputs_given`), what a fact feeds (`downstream`, `feeds`), and whether a derivation could
still apply given what is known (`could_apply`, read from its declared gate).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from .._weakcache import PerObject
from ..kb.knowledge import KnowledgeBase
from ..rules.evaluate import Evaluator, compile_condition
from ..rules.logic import facts_used
from ..rules.model import Condition
from .derivation import Result
from .formulas import DerivedValue, Facts, Value, check_consistency
from .registry import DERIVATIONS, Derivation

STATIC_FACTS = frozenset({"hardware", "dtype"})
"""The facts that name the part and the number format: a derivation that reads only these (or only what other such
derivations give) comes out the same for every job on that part in that format, so its result can be kept."""

_MEMO_MAX = 4096  # entries per memo: one per (derivation, hardware, dtype) seen; past this nothing more is kept
_ABSENT = object()

# one derivation as the walk reads it: output, needs, gate, compute, the unit of its output, formula, source, the
# derivation (for its recorded inputs), and, where its result depends on the part and the format alone, its index and
# the facts its result depends on (the memo's key)
_Step = tuple[str, frozenset[str], "Evaluator | None", Callable[[Facts, KnowledgeBase], Result], "str | None", str,
              str, Derivation, "tuple[int, tuple[str, ...]] | None"]


class DeriveMemo:
    """What the derivations that depend only on hardware and dtype gave, kept between walks by its owner (an Expert
    keeps one, for its own knowledge base). Thread-safe: entries are only added, each a whole value."""

    def __init__(self) -> None:
        # the knowledge base and its entries, replaced as one tuple (so no thread sees one with the other's entries)
        self._bound: tuple[KnowledgeBase, dict[tuple[int, tuple[object, ...]], Result | None]] | None = None

    def entries(self, kb: KnowledgeBase) -> dict[tuple[int, tuple[object, ...]], Result | None]:
        """The entries for `kb` (emptied when the memo is first used with another knowledge base)."""
        bound = self._bound
        if bound is None or bound[0] is not kb:
            bound = self._bound = (kb, {})
        return bound[1]

    def __len__(self) -> int:
        return len(self._bound[1]) if self._bound is not None else 0


@dataclass
class _Bound:
    """The graph's gates written for one knowledge base, and the answers that depend on it alone."""

    steps: tuple[tuple[Derivation, Evaluator | None], ...]  # every derivation in order, with its compiled gate
    gates: dict[int, tuple[Condition, Evaluator]]  # id(derivation) -> its gate's condition, compiled
    reads: dict[int, frozenset[str]]  # id(derivation) -> every fact it reads
    plan: tuple[_Step, ...] = ()  # the steps as the walk reads them
    askable_inputs: dict[str, list[str]] = field(default_factory=dict)
    # the names of the observed facts -> the steps of the plan they could lead to (see `steps_for`)
    reachable: dict[frozenset[str], tuple[_Step, ...]] = field(default_factory=dict)
    # a set of changed facts -> (the facts whose value it may change, the steps deriving them), for `revalue`
    reached: dict[frozenset[str], tuple[frozenset[str], tuple[_Step, ...]] | None] = field(default_factory=dict)

    def steps_for(self, observed: frozenset[str]) -> tuple[_Step, ...]:
        """The steps of the plan, in order, whose needs the observed facts and the outputs of such steps could meet,
        leaving out those whose output is observed: the only steps a walk from facts with these names can apply
        (what a step's gate says only narrows it). Kept per set of names: jobs give the same names again and again."""
        found = self.reachable.get(observed)
        if found is None:
            known = set(observed)
            chosen = [False] * len(self.plan)
            grew = True
            while grew:  # the least fixed point, ignoring gates and values
                grew = False
                for i, step in enumerate(self.plan):
                    if not chosen[i] and step[0] not in observed and step[1] <= known:
                        chosen[i] = grew = True
                        known.add(step[0])
            found = tuple(step for i, step in enumerate(self.plan) if chosen[i])
            if len(self.reachable) >= _MEMO_MAX:  # a bound all the same
                self.reachable.clear()
            self.reachable[observed] = found
        return found


# what a derived value's record is made from: the result, the derivation, the unit, formula and source of its output,
# whether its constants are the memo's (so copied), and the optional inputs known when it was derived
_Applied = tuple[Result, Derivation, "str | None", str, str, bool, "dict[str, Value] | None"]


class DerivedRecords(Mapping[str, DerivedValue]):
    """The records of one walk (`derive_deferred`), each `DerivedValue` built on first read, equal to the one `derive`
    builds: the values were final once derived (a walk never overwrites a fact), so the inputs are read from the
    walk's facts. Iterates in the order the values were derived. Two threads may both build a record; both are
    equal and one is kept."""

    __slots__ = ("_applied", "_built", "_facts")

    def __init__(self, facts: Mapping[str, Value], applied: dict[str, _Applied]) -> None:
        self._facts = facts
        self._applied = applied
        self._built: dict[str, DerivedValue] = {}

    def __getitem__(self, name: str) -> DerivedValue:
        found = self._built.get(name)
        if found is None:
            result, d, unit, formula, source, copy, optional = self._applied[name]
            facts = self._facts
            used = {inp: facts[inp] for inp in d.inputs}
            if optional:
                used.update(optional)
            found = self._built[name] = DerivedValue(name, result.value, formula, used, source, unit,
                                                     dict(result.constants) if copy else result.constants,
                                                     result.note)
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._applied

    def __iter__(self) -> Iterator[str]:
        return iter(self._applied)

    def __len__(self) -> int:
        return len(self._applied)


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

    def given_instead(self, name: str) -> str:
        """What to give instead of a derived fact someone tried to give: the inputs of each way to derive it."""
        ways = [" and ".join(d.inputs) for d in self.producers(name)]
        ways = list(dict.fromkeys(ways))  # the same inputs, gated differently, once
        if not ways:
            return "give its inputs instead"
        shown = ways[:3] + ([f"{len(ways) - 3} other sets of inputs"] if len(ways) > 3 else [])
        return f"it is worked out from {'; or from '.join(shown)}: give those instead"

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
        return _Bound(tuple(steps), gates, reads, self._plan(kb, steps, reads))

    def _plan(self, kb: KnowledgeBase, steps: list[tuple[Derivation, Evaluator | None]],
              reads: dict[int, frozenset[str]]) -> tuple[_Step, ...]:
        """The steps as tuples, each marked with its memo key where its result depends on hardware and dtype alone:
        everything it reads is one of STATIC_FACTS or an output whose every derivation is such a one. The key holds
        the values of everything it reads, so a kept result is only ever reused for the same inputs."""
        static: set[str] = set(STATIC_FACTS)
        grew = True
        while grew:  # the least fixed point: an output joins once all its derivations read static facts only
            grew = False
            for d, _ in steps:
                if d.output not in static and all(reads[id(p)] <= static for p in self.producers(d.output)):
                    static.add(d.output)
                    grew = True
        plan: list[_Step] = []
        for index, (d, gate) in enumerate(steps):
            keyed = reads[id(d)] <= static
            spec = kb.facts.get(d.output)
            plan.append((d.output, d.needs, gate, d.compute, spec.unit if spec else None, d.formula, d.source, d,
                         (index, tuple(sorted(reads[id(d)]))) if keyed else None))
        return tuple(plan)

    def memoised(self, kb: KnowledgeBase) -> list[Derivation]:
        """The derivations whose results a `DeriveMemo` keeps (they depend on hardware and dtype alone)."""
        return [step[7] for step in self._bound(kb).plan if step[8] is not None]

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

    def derive(self, observed: Facts, kb: KnowledgeBase, *, check: bool = True,
               memo: DeriveMemo | None = None) -> dict[str, DerivedValue]:
        """Apply every derivation whose inputs are known and whose gate holds, in order; observed facts are never
        overwritten. With `check` (the default) contradictory observations are refused first (`check_consistency`).
        `memo` keeps the results that depend on hardware and dtype alone between calls (same values either way)."""
        if check:
            check_consistency(observed)
        out: dict[str, DerivedValue] = {}
        self._walk(observed, kb, out, memo)
        return out

    def derive_deferred(self, observed: Facts, kb: KnowledgeBase, *,
                        memo: DeriveMemo | None = None) -> tuple[dict[str, Value], DerivedRecords]:
        """`derive`, checked as it is, giving the facts it ends with (observed, then derived in order) and the
        records as a mapping that builds each `DerivedValue` on first use: most diagnoses read few of them."""
        check_consistency(observed)
        applied: dict[str, _Applied] = {}
        facts = self._walk(observed, kb, None, memo, applied)
        return facts, DerivedRecords(facts, applied)

    def values(self, observed: Facts, kb: KnowledgeBase, *, memo: DeriveMemo | None = None) -> dict[str, Value]:
        """The observed facts with every value `derive` would add (unchecked, without the provenance records):
        what a what-if probe needs."""
        return self._walk(observed, kb, None, memo)

    def revalue(self, facts: Mapping[str, Value], observed: Facts, changed: frozenset[str],
                kb: KnowledgeBase) -> tuple[dict[str, Value], frozenset[str]]:
        """`values(observed, kb)`, from `facts`, the values of observed facts that differ from `observed` at most in
        `changed` (given another value, added or left out): only the derivations the changed facts reach are applied
        again. Also returns the facts whose value may differ from `facts` (the changed ones and all they reach)."""
        bound = self._bound(kb)
        if changed in bound.reached:
            reach = bound.reached[changed]
        else:
            reach = self._reach(bound, changed)
            if len(bound.reached) >= _MEMO_MAX:
                bound.reached.clear()
            bound.reached[changed] = reach
        if reach is None:  # the walk's order is not the graph's: walk it all
            out = self._walk(observed, kb, None)
            return out, frozenset(out.keys() | facts.keys())
        dirty, steps = reach
        start = dict(facts)
        for name in dirty:
            if name in observed:
                start[name] = observed[name]
            else:
                start.pop(name, None)
        return self._walk(observed, kb, None, start=start, steps=steps), dirty

    def _reach(self, bound: _Bound, changed: frozenset[str]) -> tuple[frozenset[str], tuple[_Step, ...]] | None:
        """The facts `changed` may change and the steps that derive them, in walk order; None when some step reads
        a fact derived after it (then a partial walk could see a value the whole walk does not)."""
        later: set[str] = set()  # the outputs of this step and the ones after it
        for step in reversed(bound.plan):
            later.add(step[0])
            if not bound.reads[id(step[7])].isdisjoint(later):
                return None
        dirty = set(changed)
        for step in bound.plan:
            if not bound.reads[id(step[7])].isdisjoint(dirty):
                dirty.add(step[0])
        return frozenset(dirty), tuple(step for step in bound.plan if step[0] in dirty)

    def _walk(self, observed: Facts, kb: KnowledgeBase, records: dict[str, DerivedValue] | None,
              memo: DeriveMemo | None = None, applied: dict[str, _Applied] | None = None, *,
              start: dict[str, Value] | None = None, steps: Sequence[_Step] | None = None) -> dict[str, Value]:
        """The one pass over the derivations: the facts it ends with; each derived value's record into `records`,
        or what it is made from into `applied` (see DerivedRecords). `start` and `steps` (for `revalue`): the facts
        to start from and the steps to walk, instead of the observed facts and the steps they could lead to."""
        facts: dict[str, Value] = dict(observed) if start is None else start
        kept = memo.entries(kb) if memo is not None else None
        known = facts.keys()
        result: Result | None
        for output, needs, gate, compute, unit, formula, source, d, keyed in (
                self._bound(kb).steps_for(frozenset(facts)) if steps is None else steps):
            if output in facts or not known >= needs:
                continue
            if keyed is not None and kept is not None:
                key = (keyed[0], tuple([facts.get(name, _ABSENT) for name in keyed[1]]))
                if key in kept:
                    result = kept[key]
                else:
                    result = compute(facts, kb) if gate is None or gate(facts, (), None, False) == "true" else None
                    if len(kept) < _MEMO_MAX:
                        kept[key] = result
                if result is None:
                    continue
                constants = dict(result.constants) if applied is None else None  # each record its own dict
            else:
                if gate is not None and gate(facts, (), None, False) != "true":
                    continue
                result = compute(facts, kb)
                constants = result.constants
            if applied is not None:  # the optional inputs known now (one may be derived later on)
                applied[output] = (result, d, unit, formula, source, constants is None, {
                    name: facts[name] for name in d.optional if name in facts} if d.optional else None)
            elif records is not None:  # the inputs as `Derivation.recorded_inputs` records them, inline
                used = {name: facts[name] for name in d.inputs}
                if d.optional:
                    used.update({name: facts[name] for name in d.optional if name in facts})
                records[output] = DerivedValue(output, result.value, formula, used, source, unit,
                                               constants if constants is not None else dict(result.constants),
                                               result.note)
            facts[output] = result.value
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

    def completing_inputs(self, name: str, facts: Mapping[str, Value], kb: KnowledgeBase,
                          seen: frozenset[str] = frozenset()) -> list[str]:
        """Askable facts that alone would let `name` be derived from what is known: the one unknown input of a way
        to it that could apply, and, when that input can itself be derived, the one that would complete it (model
        size and tokens/s given: num_gpus completes the achieved FLOP/s and so the MFU)."""
        out: list[str] = []
        for d in self.producers(name):
            unknown = [inp for inp in d.inputs if inp not in facts]
            if len(unknown) != 1 or unknown[0] in seen or (d.gated and not self.could_apply(d, facts, kb)):
                continue
            (inp,) = unknown
            spec = kb.facts.get(inp)
            for leaf in ([inp] if spec is not None and spec.askable else []) + self.completing_inputs(
                    inp, facts, kb, seen | {name}):
                if leaf not in out:
                    out.append(leaf)
        return out

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


def derive(observed: Facts, kb: KnowledgeBase, *, check: bool = True,
           memo: DeriveMemo | None = None) -> dict[str, DerivedValue]:
    """`DerivationGraph.derive` over the registry's derivations."""
    return GRAPH.derive(observed, kb, check=check, memo=memo)


def askable_inputs(name: str, kb: KnowledgeBase) -> list[str]:
    """`DerivationGraph.askable_inputs` over the registry's derivations."""
    return GRAPH.askable_inputs(name, kb)


def askable_inputs_given(name: str, facts: Mapping[str, Value], kb: KnowledgeBase,
                         memo: dict[str, list[str]] | None = None) -> list[str]:
    """`DerivationGraph.askable_inputs_given` over the registry's derivations."""
    return GRAPH.askable_inputs_given(name, facts, kb, memo)
