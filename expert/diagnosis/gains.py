"""The expected gain of an optimization, from the report's own iron-law terms (Amdahl, floors, peak-ratio bounds)."""

from __future__ import annotations

from ..derive.derivation import decode_bytes_left_out
from ..derive.formulas import amdahl_max_speedup
from ..kb.knowledge import Optimization
from ..report.model import ExpectedGain
from .provenance import Basis


def expected_gain(ctx: Basis, opt: Optimization) -> ExpectedGain | None:
    """`_term_gain`, at most 1 / mfu where the MFU is known (below 1) and the optimization does not go beyond it
    (`beyond_mfu`, optimizations.yaml): no change makes the step faster than its model FLOPs at the dense peak, so
    terms whose shares add up past the step (they overlap) bound nothing tighter."""
    gain = _term_gain(ctx, opt)
    known = _known_shares(ctx, ["mfu"])
    mfu = known[0][1] if known else 0.0
    if gain is None or opt.beyond_mfu or not 0 < mfu < 1 or gain.max_speedup <= 1 / mfu:
        return gain
    return ExpectedGain(term=gain.term, term_share=gain.term_share, max_speedup=round(1 / mfu, 3),
                        assumptions=f"{gain.assumptions}; at most 1 / mfu = 1 / {mfu:.3g} (the step's model FLOPs at "
                        "the dense peak, which no change of this kind lowers)")


def _term_gain(ctx: Basis, opt: Optimization) -> ExpectedGain | None:
    """The expected gain from the report's own terms: the Amdahl bound 1 / (1 - share) of removing the term, or,
    for an optimization with a `floor` (optimizations.yaml) that is known, the term falling to the floor, not to
    zero: 1 / (1 - share + floor) for a share of today's step (better kernels reach η = 1), (1 - floor) / (1 - share)
    for a share of the run at the floor (checkpoint interval tuning reaches Daly's optimum). An optimization with a
    term speed-up bound (`term_speedup`, a peak ratio, else the declared `max_term_speedup`) shrinks its term at best
    to share / s: 1 / (1 - share + share / s), never above s. An optimization that acts on another share of the
    step than its term's (`acts_on`: facts whose shares add up, the first known; the time of the kernels whose bytes
    it cuts may be narrower or wider than the D/BW term) saves at most that: 1 / (1 - share), or with a term
    speed-up bound s, 1 / (1 - share + share / s); while they are unknown the term bounds it, and the assumptions
    say so."""
    shrinks, floor, floor_of = opt.shrinks, opt.floor, opt.floor_of
    term = ctx.kb.regimes.terms.get(shrinks)
    acted_on = _acted_on(ctx, opt)
    shares = [name for name, _ in acted_on] or ([term.share] if term is not None and term.share else [])
    if any(name not in _WEIGHT_READS and _weights_only_decode(ctx, name) for name in shares):
        return None  # a share counted from the weights alone is a lower bound: no upper bound on the gain follows
    if acted_on:
        removed = _removed(ctx, opt)
        acted = min(1.0, sum(v for _, v in acted_on))
        share = min(1.0, acted + sum(v for _, v in removed))  # all it can save: hidden or removed entirely (Amdahl)
        cap = ctx.kb.regimes.max_reported_speedup
        capped = share >= 1 - 1 / cap
        what = " + ".join(f"{name} {v:.0%}" for name, v in acted_on)
        bound = _term_bound(ctx, opt)
        if bound is not None:  # what it acts on shrinks, at best, by its bound; what it removes goes
            s, where = bound
            gone = " + ".join(f"{name} {v:.0%}" for name, v in removed)
            return _sped_up(shrinks, share, acted / s, cap, f"what {opt.id} acts on, {what}", s, where, gone)
        what = " + ".join(f"{name} {v:.0%}" for name, v in (*acted_on, *removed))
        return ExpectedGain(
            term=shrinks, term_share=round(share, 4),
            max_speedup=round(cap if capped else amdahl_max_speedup(share), 3),
            assumptions=f"upper bound (Amdahl): what {opt.id} acts on, {what} of the step, saved entirely; other "
            "terms unchanged" + ("; capped" if capped else ""))
    if term is None or term.share is None or term.share not in ctx.facts:
        return None
    share = float(ctx.facts[term.share])
    cap = ctx.kb.regimes.max_reported_speedup
    capped = share >= 1 - 1 / cap
    bound = _term_bound(ctx, opt)
    data = _data_floor(ctx, opt, share)
    if bound is not None:
        s, where = bound
        rest = share / s
        if floor is not None and floor in ctx.facts and floor_of == "step":
            rest = max(rest, min(float(ctx.facts[floor]), share))
        kept = ""
        if data is not None and data[0] > rest:
            rest, kept = data
        return _sped_up(shrinks, share, rest, cap, f"the {shrinks} term, {share:.1%}", s, where, kept=kept)
    known_floor = float(ctx.facts[floor]) if floor is not None and floor in ctx.facts else None
    own = floor_of == "own"
    if data is not None and (known_floor is None or data[0] > min(known_floor, share)) and not own:
        rest, kept = data
        return ExpectedGain(
            term=shrinks, term_share=round(share, 4), max_speedup=round(min(1 / (1 - share + rest), cap), 3),
            assumptions=f"upper bound: the {shrinks} term, {share:.1%} of the step, {kept}; "
            f"1 / (1 − {share:.3g} + {rest:.3g}); other terms unchanged")
    if known_floor is not None and not (capped and own):  # a floor of today's step bounds the gain at any share
        rest = min(known_floor, share)
        speedup = (1 - rest) / (1 - share) if own else 1 / (1 - share + rest) if share - rest < 1 else cap
        formula = f"(1 − {rest:.3g}) / (1 − {share:.3g})" if own else f"1 / (1 − {share:.3g} + {rest:.3g})"
        return ExpectedGain(
            term=shrinks, term_share=round(share, 4), max_speedup=round(min(speedup, cap), 3),
            assumptions=f"upper bound: the {shrinks} term, {share:.1%} of the step, falls to {floor} "
            f"{rest:.1%}, not to zero; {formula}; other terms unchanged" + ("; capped" if speedup > cap else ""))
    speedup = cap if capped else amdahl_max_speedup(share)
    what = "hidden behind compute" if shrinks == "overlap" else "removed entirely"
    narrower = (f"; it acts only on {' and '.join(opt.acts_on)}, not measured here: a profiler trace gives "
                f"{'them' if len(opt.acts_on) > 1 else 'it'} and a tighter bound" if bound_is_loose(ctx, opt) else "")
    return ExpectedGain(
        term=shrinks, term_share=round(share, 4), max_speedup=round(speedup, 3),
        assumptions=f"upper bound (Amdahl): the {shrinks} term, {share:.0%} of the step, {what}; other terms unchanged"
        + ("; capped" if capped else "") + narrower,
    )


# shares that count the weight reads alone by definition: batching amortises those, not the KV cache's
_WEIGHT_READS = frozenset({"batchable_frac"})


def _weights_only_decode(ctx: Basis, name: str, depth: int = 0) -> bool:
    """Whether the share `name` was worked out (through the derivations it reads) from a decode bandwidth that leaves
    bytes out at a batch of more than one: the KV cache the sequences read (weights alone), or the experts a mixture
    of experts reads beyond one token's active parameters. The share is then a lower bound, and a gain computed from
    it would understate what the optimization can do."""
    record = ctx.derived.get(name)
    if record is None or depth > 8:
        return False
    if name == "mem_bw_util":  # from a token rate (not a measured achieved_bandwidth): what did it count?
        return "tokens_per_s" in record.inputs and bool(
            decode_bytes_left_out(ctx.facts, kv_counted="decode_bytes_per_token" in record.inputs))
    return any(_weights_only_decode(ctx, i, depth + 1) for i in record.inputs if i in ctx.derived)


def _sped_up(shrinks: str, share: float, rest: float, cap: float, subject: str, s: float, where: str,
             gone: str = "", kept: str = "") -> ExpectedGain:
    """The gain when `subject` (a share of the step) runs at most `s` times faster, keeping `rest` of the step; `gone`
    names what is removed entirely beside it (its part of `share`), if anything; `kept`, why it keeps more than
    share / s (`_data_floor`)."""
    removed = f", and {gone} is removed entirely" if gone else ""
    kept = f", and {kept}" if kept else ""
    return ExpectedGain(
        term=shrinks, term_share=round(share, 4), max_speedup=round(min(1 / (1 - share + rest), cap), 3),
        assumptions=f"upper bound: {subject} of the step, runs at most {s:.3g}x faster ({where}){removed}{kept}; "
        f"1 / (1 − {share:.3g} + {rest:.3g}); other terms unchanged")


def _data_floor(ctx: Basis, opt: Optimization, share: float) -> tuple[float, str] | None:
    """What the compute term keeps at least under an optimization that leaves the step's bytes to move
    (`data_term_speedup`), with the reason: where η is the MFU over a busy share (compute_efficiency), the compute
    term is the time the GPU is busy, and that time also moves the step's bytes. Faster math leaves it at least the
    D/BW term (share_data), over how much faster that term runs under the optimization (fewer bytes per value,
    faster memory). None where that does not apply or a figure it needs is unknown."""
    if opt.data_term_speedup is None or opt.shrinks != "compute":
        return None
    record = ctx.derived.get("t_compute_s")
    known = _known_shares(ctx, ["share_data"])
    if record is None or "compute_efficiency" not in record.inputs or not known:
        return None
    if isinstance(opt.data_term_speedup, str):
        ratio = _known_shares(ctx, [opt.data_term_speedup])
        if not ratio:
            return None
        d, named = max(1.0, ratio[0][1]), f" / {opt.data_term_speedup} {ratio[0][1]:.3g}"
    else:
        d, named = max(1.0, float(opt.data_term_speedup)), (f" / {opt.data_term_speedup:.3g}"
                                                           if opt.data_term_speedup > 1 else "")
    data_share = known[0][1]
    return (min(share, data_share / d),
            f"no faster than its bytes move: the term is the GPU's busy time (η = mfu over the busy share), which "
            f"also moves the step's bytes, so it keeps at least the D/BW term, share_data {data_share:.1%}{named}")


def _known_shares(ctx: Basis, names: list[str]) -> list[tuple[str, float]]:
    """The facts of `names` that are known numbers, in order."""
    return [(name, float(v)) for name in names
            if isinstance(v := ctx.facts.get(name), (int, float)) and not isinstance(v, bool)]


def _removed(ctx: Basis, opt: Optimization) -> list[tuple[str, float]]:
    """The known shares the optimization takes away entirely (`removes`)."""
    return _known_shares(ctx, opt.removes)


def _acted_on(ctx: Basis, opt: Optimization) -> list[tuple[str, float]]:
    """The known shares of what the optimization acts on (`acts_on`), or none when the first is unknown."""
    known = _known_shares(ctx, opt.acts_on)
    return known if known and known[0][0] == opt.acts_on[0] else []


def bound_is_loose(ctx: Basis, opt: Optimization) -> bool:
    """Whether the optimization's gain is its term's bound though it acts on less (`acts_on` unmeasured)."""
    return bool(opt.acts_on) and not _acted_on(ctx, opt)


def _term_bound(ctx: Basis, opt: Optimization) -> tuple[float, str] | None:
    """How much faster the optimization can make its own term at best, and where that figure comes from: the
    derived peak ratio it names (`term_speedup`), else its declared bound (`max_term_speedup`); at least 1."""
    if opt.term_speedup is not None:
        raw = ctx.facts.get(opt.term_speedup)
        if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw > 0:
            record = ctx.derived.get(opt.term_speedup)
            where = ("the hardware catalog" if record is None or "hardware" in record.inputs
                     else record.formula)  # a ratio of catalog figures, or one of the job's own values
            return max(1.0, float(raw)), f"{opt.term_speedup} = {float(raw):.3g}, from {where}"
    if opt.max_term_speedup is not None:
        return opt.max_term_speedup, f"the declared bound of {opt.id}: {opt.bound_source}"
    return None
