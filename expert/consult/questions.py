"""What the consultation says: each question with the reason it is worth asking, "why do you ask?", the leading
hypotheses and why the session stopped, all worded from the planner's state and plan (`expert.consult.planner`).

Facts an expert asks for in one breath (facts.yaml `questions`: the kind of job; the accelerator and its precision)
are asked as one combined question when more than one of them is worth asking (`expert.consult.combined` reads the
answer)."""

from __future__ import annotations

from collections.abc import Sequence

from ..derive.graph import GRAPH
from ..kb.knowledge import CombinedQuestion, FactSpec
from ..observations.normalise import format_value
from ..rules.evaluate import LeafTrace, evaluate
from ..rules.logic import facts_used
from ..rules.ruleset import LoadedRule
from . import combined
from .models import Effect, Question, RuleNeed, Turn, WhyAsk
from .planner import Plan, Probe, State, weigh
from .rule_index import Index
from .tools import AVAILABLE_TOOLS, tool_offer

Value = int | float | str
_WHY_RULES = 8  # rules shown in a "why"


def why_stopped(ix: Index, state: State, plan: Plan) -> str:
    """Why the session has no more questions to ask."""
    verdict = state.now.verdict
    title = ix.kb.regimes.regimes[verdict].title if verdict else "undecided"
    n_rec = len(state.now.recommended)
    what = f"the verdict ({title}) and the {n_rec} recommendation{'s' if n_rec != 1 else ''}"
    if plan.settled_soundly:
        return (f"no question left can change {what}: every rule that could still fire or stop firing "
                "only adds findings, axis notes or measurements")
    others = sorted({f for p in plan.probes for f in p.leaves if state.askable_open(f)})
    tail = f" ({len(others)} other facts could only add detail)" if others else ""
    return (f"no answer to the remaining questions can change {what}, alone or with the other facts an "
            f"undecided rule needs{tail}")


def combined_for(ix: Index, state: State, plan: Plan, fact: str, gated: str | None) -> CombinedQuestion | None:
    """The combined question to ask instead of `fact`: every member still open, and another member worth asking
    too (or the one `fact` is asked before)."""
    question = ix.question_of.get(fact)
    if question is None or not all(state.askable_open(name) for name in question.facts):
        return None
    others = [name for name in question.facts if name != fact]
    return question if any(name == gated or plan.scores.get(name) for name in others) else None


def shared_tool(ix: Index, question: CombinedQuestion) -> str | None:
    """The tool that measures every member of a combined question, if one does."""
    tools = {ix.tool_of.get(name) for name in question.facts}
    return next(iter(tools)) if len(tools) == 1 else None


def question_for(ix: Index, state: State, plan: Plan, fact: str, gated: str | None, number: int) -> Question:
    """The question for one fact (`gated`: the fact it is asked before), numbered `number`."""
    spec = ix.kb.facts[fact]
    credited = sorted(plan.credited.get(fact, []) or plan.credited.get(gated or "", []), key=lambda c: -c[0])
    effects = _effects(ix, state, fact, credited)
    rules = sorted({r for _, p, _ in credited for r in p.rules})
    if gated is not None:
        why = (f"a cheap context question asked before {gated}: the rules that need {gated} also test {fact}, "
               f"so its answer decides whether {gated} matters")
        effects = []
    else:
        why = _reason(ix, state, fact, credited)
    tool = ix.tool_of.get(fact)
    group = [f for f in ix.askable if tool and f != fact and ix.tool_of.get(f) == tool and state.askable_open(f)]
    return Question(
        number=number, fact=fact, text=spec.question or spec.description,
        kind=spec.type, unit=spec.unit,
        choices=(spec.choices if spec.type == "enum"
                 else sorted(state.now.recommended) if spec.type == "optimizations" else None),
        example=spec.example, accepted=spec.range_text(),
        why=why, effects=effects[:6], rules=rules, measure=_measure(ix, fact),
        group=ix.kb.tools.tools[tool].name if tool and group else None, group_facts=group,
        ask_first=spec.ask_first, cost=spec.cost, score=round(plan.scores.get(fact, 0.0), 4),
    )


def combined_question(ix: Index, state: State, plan: Plan, question: CombinedQuestion, fact: str,
                      gated: str | None, number: int) -> Question:
    """The combined question asked instead of `fact` (see `combined_for`)."""
    one = question_for(ix, state, plan, fact, gated, number)
    specs = [ix.kb.facts[name] for name in question.facts]
    if specs[question.facts.index(fact)].ask_first:
        clauses = [f"{fact} decides whether {gated} matters" if name == fact and gated is not None
                   else _context_clause(name, plan.credited[name], name)
                   for name in question.facts if (name == fact and gated is not None) or plan.credited.get(name)]
        why = f"a cheap context question, asked first: {'; '.join(clauses)}" if clauses else one.why
    else:
        others = [name for name in question.facts if name != fact]
        why = f"{fact}: {one.why} ({', '.join(others)} in the same breath)"
    shared = shared_tool(ix, question) is not None  # one tool measures every member: keep its hints
    group = [name for name in one.group_facts if name not in question.facts] if shared else []
    return one.model_copy(update={
        "fact": question.id, "text": question.question, "kind": "combined", "facts": list(question.facts),
        "unit": None, "choices": [c.answer for c in question.choices] if question.choices else None,
        "choice_help": {c.answer: c.help for c in question.choices or []}, "example": question.example,
        "accepted": combined.accepted(question, ix.kb), "why": why,
        "measure": one.measure if shared else None, "group": one.group if group else None, "group_facts": group,
        "ask_first": all(s.ask_first for s in specs), "cost": max(s.cost for s in specs),
        "score": round(sum(plan.scores.get(name, 0.0) for name in question.facts), 4),
    })


def why_combined(question: CombinedQuestion, parts: list[WhyAsk], state: State, plan: Plan) -> WhyAsk:
    """Why a combined question is asked: its members' reasons (`parts`, in member order) together."""
    rules: dict[str, RuleNeed] = {}
    for part in parts:
        for need in part.rules:
            rules.setdefault(need.rule_id, need)
    worth = [name for name in question.facts if plan.scores.get(name) and state.askable_open(name)]
    goal = (f"Its answer can still change the verdict or the recommendations (through {', '.join(worth)})."
            if worth else parts[0].goal)
    return WhyAsk(fact=question.id, question=question.question, goal=goal, hypotheses=parts[0].hypotheses,
               rules=list(rules.values())[:_WHY_RULES], via=list(dict.fromkeys(v for p in parts for v in p.via)),
               known=parts[0].known, effects=[e for p in parts for e in p.effects][:8])


def why_tools(ix: Index, state: State, plan: Plan, answered: Turn | None) -> WhyAsk:
    """Why the tools question is asked (`answered`: its answer in force, if any)."""
    offer = tool_offer(ix, plan)
    tools = ix.kb.tools.tools
    wording = ix.kb.tools.consultation.available_tools
    goal = (wording.goal_answered.format(answer=answered.value or "unknown") if answered is not None
            else wording.goal)
    known = {name: format_value(ix.kb.facts.get(name), value) for name, value in state.answers.items()}
    return WhyAsk(fact=AVAILABLE_TOOLS, question=wording.question, goal=goal, hypotheses=hypotheses(ix, state),
               rules=[], known=known,
               tools=[f"{t} ({tools[t].name}): {', '.join(facts)}" for t, facts in offer.items()])


def why_fact(ix: Index, state: State, plan: Plan, fact: str, spec: FactSpec) -> WhyAsk:
    """Why a fact is (or would be) asked: the hypotheses, the rules that need it, what each answer would mean."""
    via = _via(ix, fact)
    through = {fact} | {line.split(" = ", 1)[0] for line in via}
    needs: list[RuleNeed] = []
    for lr in ix.rules:
        used = set(facts_used(lr.condition))
        if not used & through:
            continue
        if lr.id not in state.live and lr.id not in state.now.fired:
            continue
        trace: list[LeafTrace] = []
        outcome = evaluate(lr.condition, state.facts, state.now.findings, trace)
        needs.append(RuleNeed(rule_id=lr.id, title=lr.rule.title, outcome=outcome,
                              concludes=_concludes(lr), tests=[t.describe() for t in trace]))
    # the rules that decide something and are still undecided first; a handful is enough to answer "why"
    needs.sort(key=lambda r: (r.rule_id not in ix.decisive, r.outcome != "unknown", r.rule_id))
    needs = needs[:_WHY_RULES]
    credited = sorted(plan.credited.get(fact, []), key=lambda c: -c[0])
    credited += [(0.0, p, p.subject or fact) for p in plan.probes  # regions that change nothing, for completeness
                 if p.kind == "leaf" and p.subject in through and weigh(state.now, p.answer)[0] == 0]
    effects = _effects(ix, state, fact, credited)
    known = {name: format_value(ix.kb.facts.get(name), value) for name, value in state.answers.items()}
    if fact in state.answers:
        goal = f"It is already answered ({known[fact]}); a different answer would be weighed like this."
    elif fact in state.unknowns:
        goal = "It is recorded as unknown."
    elif plan.scores.get(fact):
        goal = "Its answer can still change the verdict or the recommendations."
    else:
        goal = "No answer to it can change the verdict or the recommendations now."
    return WhyAsk(fact=fact, question=spec.question or spec.description, goal=goal,
               hypotheses=hypotheses(ix, state), rules=needs, via=via, known=known, effects=effects[:8],
               measure=_measure(ix, fact))


def hypotheses(ix: Index, state: State) -> list[str]:
    """The candidate regimes now, best first, with their strength and score."""
    regimes = ix.kb.regimes.regimes
    return [f"{regimes[v.regime].title} ({v.strength}, score {v.score})" for v in state.now.candidates]


def _reason(ix: Index, state: State, fact: str, credited: list[tuple[float, Probe, str]]) -> str:
    """One sentence: what the best what-if involving this fact would change, and how the fact gets there."""
    if not credited:
        return "its answer can change the verdict or the recommendations"
    if ix.kb.facts[fact].type == "optimizations":  # asked last (planner.already_applied)
        ids = sorted(state.now.recommended)
        return (f"nothing else asked can change the verdict or the recommendations now; {len(ids)} "
                f"optimization{'s are' if len(ids) != 1 else ' is'} about to be recommended ({', '.join(ids)}), "
                "and one the job already uses is not recommended again")
    if ix.kb.facts[fact].ask_first:
        return f"a cheap context question, asked first: {_context_clause(fact, credited)}"
    _, probe, link = credited[0]
    effect = _effect(ix, state, probe).text()
    if link == fact:
        return effect
    return f"it is needed to work out {link} ({_formula(fact, link)}); {effect}"


def _formula(fact: str, output: str) -> str:
    """The formula of the first derivation of `output` that (transitively) reads `fact`."""
    found = next((d for d in GRAPH.producers(output) if GRAPH.feeds(fact, d)), None)
    return f"{output} = {found.formula}" if found else output


def _effects(ix: Index, state: State, fact: str, credited: list[tuple[float, Probe, str]]) -> list[Effect]:
    """The distinct what-ifs behind a fact's value, best first, each naming the quantity the fact feeds."""
    out: list[Effect] = []
    for probe in _distinct([p for _, p, _ in credited]):
        link = next(link for _, p, link in credited if p is probe)
        effect = _effect(ix, state, probe)
        out.append(effect.model_copy(update={"via": link}) if link != fact else effect)
    return out


def _effect(ix: Index, state: State, probe: Probe) -> Effect:
    kb = ix.kb
    before, after = state.now, probe.answer
    bands = zip(kb.scorecard.metrics, before.bands, after.bands, strict=True)
    scorecard = [f"{m.id}: {b} -> {a}" for m, b, a in bands if a != b]
    fired = sorted((after.fired - before.fired) | (before.fired - after.fired))
    decisive = [r for r in fired if r in ix.decisive] or fired
    return Effect(condition=f"if {probe.condition}" if probe.kind == "leaf" else probe.condition,
                  verdict_before=before.verdict, verdict_after=after.verdict,
                  added=sorted(after.recommended - before.recommended),
                  removed=sorted(before.recommended - after.recommended), scorecard=scorecard,
                  rules=decisive[:4])


def _measure(ix: Index, fact: str) -> str | None:
    kb = ix.kb
    spec = kb.facts[fact]
    m = kb.tools.measurements.get(spec.measure or fact)
    return f"{kb.tools.tools[m.tool].name}: {m.how}" if m else None


def _via(ix: Index, fact: str) -> list[str]:
    """The derived quantities this fact feeds, as formulas ("io_overhead = data_wait_s / step_time_s")."""
    return [f"{d.output} = {d.formula}" for d in GRAPH.downstream(fact)
            if d.output in ix.tests or d.output in ix.readers]


def _concludes(lr: LoadedRule) -> str:
    then = lr.rule.then
    parts: list[str] = []
    if then.bottleneck:
        parts.append(f"votes {then.bottleneck.regime} ({then.bottleneck.strength})")
    if then.recommend:
        parts.append("recommends " + ", ".join(r.id for r in then.recommend))
    if then.waste:
        parts.append("rules out " + ", ".join(w.id for w in then.waste))
    if then.finding:
        parts.append(f"concludes {then.finding.id}")
    if then.axis:
        parts.append(f"points at the {then.axis.axis} axis")
    if then.measure and not parts:
        parts.append("asks to measure " + ", ".join(then.measure))
    return "; ".join(parts) or "nothing"


def _distinct(probes: Sequence[Probe]) -> list[Probe]:
    """Probes in order, each set of what-if values once."""
    out: list[Probe] = []
    seen: set[tuple[tuple[str, Value | None], ...]] = set()
    for probe in probes:
        if probe.overrides not in seen:
            seen.add(probe.overrides)
            out.append(probe)
    return out


def _context_clause(fact: str, credited: list[tuple[float, Probe, str]], name: str = "it") -> str:
    """Why the rules need a context fact: "the rules test it directly" or "... need it to work out mfu, ..."."""
    leaves = list(dict.fromkeys(link for _, _, link in credited))
    if fact in leaves:
        return f"the rules test {name} directly"
    return f"the rules need {name} to work out {', '.join(leaves[:4])}"
