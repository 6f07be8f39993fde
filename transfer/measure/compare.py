"""Decisions with confidence: is A faster than B, or within a margin of it?

Every claim tunedb makes about two configurations ("tuned beats default", "warm reached cold's
latency", "config A beats config B") is decided here, by *interleaved re-measurement rounds*:

* a round measures A and B back to back, alternating the order (A B, B A, A B, ...), so a slow
  minute of a shared machine hits both alike; each round gives one ratio ``a / b``;
* the statistic is the geometric mean of the round ratios, with a paired t-interval on their
  logarithms (the classic paired comparison; on log ratios because timing noise is
  multiplicative);
* rounds are added adaptively: the interval is looked at after each round in ``looks`` (default
  3, 5, 8 and 12 rounds) and the comparison stops as soon as the question has an answer.  Each
  look uses the level ``1 - (1 - level) / len(looks)`` (Bonferroni), so over all looks together
  the stated ``level`` (95 %) holds: the chance of a false claim stays below 5 %.

Questions (``question=``)
    ``"sign"``: is A faster or slower than B?  ``faster`` when the whole interval is below 1,
    ``slower`` when above 1, ``equivalent`` when it lies inside ``[1/(1+margin), 1+margin]``,
    else (after the last look) ``inconclusive``.
    ``"within"``: is A no more than ``margin`` slower than B (an equivalence-style claim, "warm
    reached cold's latency within 5 %")?  ``holds`` when the interval's top is <= 1+margin,
    ``fails`` when its bottom is > 1+margin, else ``inconclusive``.

An inconclusive answer always carries its reason: the measured noise (the coefficient of
variation of the round ratios) and the interval that was still too wide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from tunedb.index.model.units import fmt_seconds

#: rounds after which the interval is looked at (the comparison may stop there)
LOOKS = (3, 5, 8, 12)
#: the default equivalence margin: "within 5 %"
MARGIN = 0.05
LEVEL = 0.95


@dataclass
class Comparison:
    """The answer of :func:`compare`.  ``ratio`` = A / B (below 1: A is faster), with its
    interval ``[lo, hi]`` at ``level`` (over all looks); ``verdict`` answers ``question``."""

    question: str
    verdict: str
    ratio: float | None
    lo: float | None
    hi: float | None
    rounds: int
    level: float
    margin: float
    #: coefficient of variation of the round ratios (the measured noise of the comparison)
    noise_cv: float | None
    #: per-round values of A and of B (seconds; a failed round is left out)
    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    reason: str = ""

    @property
    def decided(self) -> bool:
        return self.verdict != "inconclusive"

    def to_dict(self) -> dict:
        return asdict(self)

    def interval_text(self) -> str:
        """``0.97 (95 % CI 0.95-0.99)``."""
        if self.ratio is None:
            return "no ratio"
        return f"{self.ratio:.3f} ({self.level * 100:.0f} % CI {self.lo:.3f}-{self.hi:.3f})"

    def percent_text(self, a_name: str = "A", b_name: str = "B") -> str:
        """The ratio as a sentence fragment with its direction: ``A is 3.1 % faster than B (95%
        CI 1.0-5.2 % faster)`` / ``... slower ...`` (the interval labelled ``95 % CI``)."""
        if self.ratio is None:
            return f"{a_name} and {b_name} could not be compared"
        def pct(r: float) -> float:
            return abs(1.0 - r) * 100.0
        word = "faster" if self.ratio < 1 else "slower"
        lo_w = "faster" if self.hi is not None and self.hi < 1 else ("slower" if self.lo is not None and self.lo > 1
                                                                     else None)
        if lo_w is None:
            ci = f"{self.level * 100:.0f} % CI {pct(self.lo):.1f} % {'faster' if self.lo < 1 else 'slower'} to " \
                 f"{pct(self.hi):.1f} % {'faster' if self.hi < 1 else 'slower'}"
        else:
            a, b = sorted((pct(self.lo), pct(self.hi)))
            ci = f"{self.level * 100:.0f} % CI {a:.1f}-{b:.1f} % {lo_w}"
        return f"{a_name} is {pct(self.ratio):.1f} % {word} than {b_name} ({ci}, {self.rounds} interleaved rounds)"


def _t_quantile(p: float, dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(p, dof))


def ratio_interval(a: Sequence[float], b: Sequence[float], level: float) -> tuple[float, float, float, float]:
    """(ratio, lo, hi, cv) of paired samples ``a``, ``b`` (same length >= 2, all > 0): the
    geometric mean of a_i / b_i with a two-sided paired t-interval at ``level`` on the log
    ratios; ``cv``: the standard deviation of the log ratios (~ the CV of the ratios)."""
    d = [math.log(x / y) for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else math.inf
    half = _t_quantile(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n) if n > 1 else math.inf
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half), sd


def _answer(question: str, lo: float, hi: float, margin: float) -> str:
    if question == "within":
        if hi <= 1 + margin:
            return "holds"
        if lo > 1 + margin:
            return "fails"
        return "inconclusive"
    if hi < 1:
        return "faster"
    if lo > 1:
        return "slower"
    if lo >= 1 / (1 + margin) and hi <= 1 + margin:
        return "equivalent"
    return "inconclusive"


def compare(round_fn: Callable[[int], tuple[float | None, float | None]], *, question: str = "sign",
            margin: float = MARGIN, level: float = LEVEL, looks: Sequence[int] = LOOKS,
            on_round: Callable[[int, Comparison], None] | None = None) -> Comparison:
    """Decide ``question`` about A and B (module docstring) by interleaved rounds.

    ``round_fn(r)`` measures round ``r`` (0, 1, ...) and returns ``(a, b)`` in seconds (None
    for a side that failed: the round is left out); it should measure A first in even rounds
    and B first in odd ones (:func:`interleaved` builds such a function from two measuring
    callables).  At most ``max(looks)`` rounds.  ``on_round(r, state)`` sees the state after
    each round.  ``ValueError`` for an unknown question, a margin < 0 or no looks."""
    if question not in ("sign", "within"):
        raise ValueError(f"question must be 'sign' or 'within', got {question!r}")
    if margin < 0 or not looks or min(looks) < 2:
        raise ValueError("margin must be >= 0 and looks a list of round counts >= 2")
    looks = sorted(set(int(x) for x in looks))
    per_look = 1 - (1 - level) / len(looks)
    a: list[float] = []
    b: list[float] = []
    state = Comparison(question, "inconclusive", None, None, None, 0, level, margin, None)
    for r in range(max(looks)):
        x, y = round_fn(r)
        if x is not None and y is not None and x > 0 and y > 0:
            a.append(float(x))
            b.append(float(y))
        state.rounds = r + 1
        if len(a) >= 2:
            ratio, lo, hi, cv = ratio_interval(a, b, per_look)
            state.ratio, state.lo, state.hi, state.noise_cv = ratio, lo, hi, cv
            state.a, state.b = list(a), list(b)
            if r + 1 in looks:
                state.verdict = _answer(question, lo, hi, margin)
        if on_round is not None:
            on_round(r, state)
        if state.verdict != "inconclusive":
            break
    if state.verdict == "inconclusive":
        if len(a) < 2:
            state.reason = f"only {len(a)} of {state.rounds} rounds measured both sides"
        else:
            state.reason = (f"the machine's noise was too large for the difference: round-to-round CV "
                            f"{state.noise_cv * 100:.1f} %, interval {state.lo:.3f}-{state.hi:.3f} after "
                            f"{state.rounds} rounds")
    return state


def interleaved(measure_a: Callable[[], float | None], measure_b: Callable[[], float | None]
                ) -> Callable[[int], tuple[float | None, float | None]]:
    """A :func:`compare` round function: A then B in even rounds, B then A in odd ones."""
    def round_fn(r: int) -> tuple[float | None, float | None]:
        if r % 2 == 0:
            x = measure_a()
            return x, measure_b()
        y = measure_b()
        return measure_a(), y
    return round_fn


def round_medians(res: Comparison) -> tuple[float | None, float | None]:
    """The medians of A's and of B's per-round values (seconds; None without rounds): the
    numbers the comparison itself rests on, as opposed to the DB's estimates of the configs,
    which pool every record of each config, earlier ones included."""
    import statistics

    return (statistics.median(res.a) if res.a else None, statistics.median(res.b) if res.b else None)


def decision_of(res: Comparison, target: dict, workload: dict, a: dict, b: dict, *, by: str,
                kept: dict | None = None) -> dict:
    """The stored form of a "sign" comparison of configs ``a`` and ``b`` of (target, workload)
    (``tunedb.index.contract.decisions.decision_summary``): its verdict, ratio, interval, level and
    rounds; ``kept``: the config the deciding run kept (``tune-model``), None for ``compare``."""
    from tunedb.index.contract.decisions import decision_summary
    from tunedb.index.model.keys import key_of

    if res.question != "sign":
        raise ValueError("only a 'sign' comparison is a decision between two configs")
    return decision_summary(key_of(dict(target)), key_of(dict(workload)), a, b, res.verdict, by=by, kept=kept,
                            ratio=res.ratio, lo=res.lo, hi=res.hi, level=res.level, rounds=len(res.a),
                            margin=res.margin)


def describe_costs(a: Sequence[float], b: Sequence[float]) -> str:
    """``A median 1.23 ms, B median 1.30 ms`` of a comparison's round values."""
    import statistics

    if not a or not b:
        return ""
    return f"median {fmt_seconds(statistics.median(a))} vs {fmt_seconds(statistics.median(b))}"


__all__ = ["Comparison", "compare", "interleaved", "ratio_interval", "describe_costs", "round_medians", "decision_of", "LOOKS", "MARGIN", "LEVEL"]
