"""The cost of a config: one estimator, used by every surface of tunedb.

"How fast is this config on this target" has exactly one answer in tunedb, computed here and
nowhere else.  ``best``, ``lookup``-then-cost, the tuner's results, ``tune-model``, migration,
the Kernel Tuner strategy's DB answers, the TVM database, the report, the dashboard and the
demo all call :func:`estimate` (records in memory) or :func:`estimate_table` (an Arrow table
of records); both run the same array code (:func:`estimate_groups`).

Definition (units: seconds per run of the kernel)
    1. Only ``ok`` records with at least one cost count.
    2. Each record's value is the statistic its tuner computes of its repeats (``Record.costs``),
       so a number tunedb shows is the number the user's tuner showed: the **mean** for records
       of Kernel Tuner (its ``time``: the mean of the iterations), AutoTVM (the mean of
       ``costs``) and MetaSchedule (the mean of ``run_secs``, what its database ranks by),
       recognised by their ``meta`` (:data:`TUNER_META_KEYS`, :func:`record_tuner`; a replay of
       a Kernel Tuner cache, ``meta["replay_file"]``, is Kernel Tuner's measurement too); the
       **median of its repeats** for every other record (tunedb's own measurements).
    3. When at least :data:`MIN_CONFIRMED` of a config's records are *confirmation
       re-measurements* (``meta["origin"]`` in :data:`CONFIRM_ORIGINS`: ``confirm``, measured
       after a search chose the config, or ``compare``, measured for ``tunedb compare``'s
       interleaved test), only those count (``basis="confirmed"``): a search's own samples of its
       winner are biased low (the best of n noisy samples), measurements taken after the choice
       are not.  Otherwise every ok record counts (``basis="all"``).
    4. The cost is the **median of those per-record values** -- never a minimum over
       measurements taken at different moments.  With one record it is that record's value:
       exactly the tuner's own number.
    5. Its interval is a distribution-free confidence interval of the median from order
       statistics (binomial ranks), at :data:`LEVEL` (95 %) where the data allow it, over the
       per-record values whenever there are at least two records (the records are the
       independent measurements: repeats within one record share its process and moment, so
       pooling them would claim a confidence that the records do not have); a single record's
       interval is over its repeats.  With too few values for 95 % (fewer than
       :data:`MIN_CI_UNITS`), the widest interval (min..max) is given with the confidence it
       really has (``coverage`` = 1 - 2**(1 - n): 50 % for 2 records, 75 % for 3, 87.5 % for
       4, 93.75 % for 5); one value has no interval (``coverage`` 0).
    6. ``noisy``: the interval's half-width exceeds :data:`NOISY_REL_HALFWIDTH` (10 %) of the
       cost, or a record used says its repeats were noisy and there is no interval to show it.

Ranking (:func:`rank`, and so ``best``, an entry's best cost, the tuner's answer)
    Configs whose estimate is confirmed (3.) come first, by cost; then the others, by cost;
    ties by ``config_key``.  The lowest of many search samples is biased low (winner's curse):
    a lower number that no measurement after the choice has confirmed is not evidence of a
    faster config, so it does not displace one that was confirmed.  An entry with no confirmed
    config ranks by cost alone.  :func:`rank_key` is the order.

A number shown to a user comes with ``records`` (n), the interval and the noisy flag:
:meth:`CostEstimate.text`.  :func:`tunedb.index.model.units.fmt_seconds` is the one unit style (seconds with SI
prefixes, three significant digits).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from tunedb.index.model.units import fmt_seconds

if TYPE_CHECKING:
    import pyarrow as pa

    from tunedb.index.model.record import Record

#: the confidence level of the intervals
LEVEL = 0.95
#: fewer values than this give no 95 % order-statistic interval of the median (6 is the least)
MIN_CI_UNITS = 6
#: a config needs this many confirmation re-measurements before only they count
MIN_CONFIRMED = 2
#: an estimate whose interval half-width is above this fraction of its value is "noisy"
NOISY_REL_HALFWIDTH = 0.10
#: ``meta["origin"]`` of a confirmation re-measurement (made after the config was chosen)
CONFIRM_ORIGIN = "confirm"
#: the origins whose records are measured for a decision, not by a search: confirmations
CONFIRM_ORIGINS = (CONFIRM_ORIGIN, "compare")
#: canonical JSON of a confirmation record's meta matches this (the table path's test)
_CONFIRM_RE = '"origin":"(' + "|".join(CONFIRM_ORIGINS) + ')"'
#: ``meta`` keys that mark a record of another tuner, whose value is the mean of its repeats
#: (code 1, 2, 3 in :func:`tuner_codes`; code 0: tunedb's own record, the median)
TUNER_META_KEYS = ("kernel_tuner", "autotvm", "metaschedule", "vllm_moe")
#: what each tuner calls the mean it shows
TUNER_STATISTIC_NAMES = {"kernel_tuner": "Kernel Tuner's time", "autotvm": "AutoTVM's mean cost",
                         "metaschedule": "MetaSchedule's mean run_secs",
                         "vllm_moe": "a serving framework's best-only table: the cost is a 1 s placeholder"}
#: tuners whose records hold no timing at all, only which config is best (the statistic says so)
BEST_ONLY_TUNERS = frozenset({"vllm_moe"})
#: the meta text of a record of ``TUNER_META_KEYS[i]`` matches ``_TUNER_RES[i]`` (first match wins)
#: (a tunedb replay of a Kernel Tuner cache, ``meta.replay_file``, replays Kernel Tuner's measurements)
_TUNER_RES = tuple('"' + k + '":[{\\[]' + ('|"replay_file":"' if k == "kernel_tuner" else "") for k in TUNER_META_KEYS)
_TUNER_RE = tuple(re.compile(r) for r in _TUNER_RES)


def ci_label(coverage: float) -> str:
    """The label of an interval whose coverage is ``coverage``: ``95 % CI`` whenever it is at
    least :data:`LEVEL` (an order-statistic interval's exact coverage - 96.1 %, 97.9 %, ... -
    varies with n in steps; it is a 95 % interval), else its own lower level, rounded down (``93 % CI``: too
    few values for 95 %).  Every surface labels intervals through this function."""
    if coverage >= LEVEL - 1e-9:
        return f"{LEVEL * 100:.0f} % CI"
    return f"{math.floor(coverage * 100)} % CI"


@dataclass(frozen=True)
class CostEstimate:
    """The cost of one config on one target (see the module docstring).  Seconds."""

    value: float
    lo: float
    hi: float
    #: ok records it is estimated from (after the confirmed-only rule)
    records: int
    #: repeats in those records
    samples: int
    #: the confidence of [lo, hi] (LEVEL, less with few values, 0 without an interval)
    coverage: float
    #: "confirmed" (only confirmation re-measurements) or "all"
    basis: str
    noisy: bool
    #: confirmation re-measurements among the config's ok records (whether or not only they count)
    confirmed: int = 0
    #: each record's value: "median" (tunedb's own records), "mean" (another tuner's records,
    #: as that tuner computes it) or "mixed" (records of both kinds)
    statistic: str = "median"
    #: the tuner whose mean the records' values are (a :data:`TUNER_META_KEYS` entry) when they
    #: all are one tuner's, else ""
    tuner: str = ""

    @property
    def rel_halfwidth(self) -> float:
        """Half the interval's width as a fraction of the value (0 without an interval)."""
        return (self.hi - self.lo) / 2 / self.value if self.value > 0 else 0.0

    @property
    def has_interval(self) -> bool:
        return self.coverage > 0 and self.records + self.samples > 1

    def to_dict(self) -> dict:
        """Plain JSON: value, lo, hi (seconds), records, samples, coverage, basis, noisy,
        confirmed, statistic, tuner."""
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "records": self.records,
                "samples": self.samples, "coverage": round(self.coverage, 4), "basis": self.basis,
                "noisy": self.noisy, "confirmed": self.confirmed, "statistic": self.statistic,
                "tuner": self.tuner}

    @classmethod
    def from_dict(cls, d: dict) -> CostEstimate:
        return cls(value=float(d["value"]), lo=float(d["lo"]), hi=float(d["hi"]), records=int(d["records"]),
                   samples=int(d["samples"]), coverage=float(d["coverage"]), basis=str(d["basis"]),
                   noisy=bool(d["noisy"]), confirmed=int(d.get("confirmed", 0)),
                   statistic=str(d.get("statistic") or "median"), tuner=str(d.get("tuner") or ""))

    def statistic_text(self) -> str:
        """Which statistic the value is: ``mean of 7 runs (Kernel Tuner's time)``, ``median of
        4 runs`` (one record), ``median of 3 records' means (Kernel Tuner's time)``, ...; see the
        module docstring (2., 4.)."""
        if self.tuner in BEST_ONLY_TUNERS:
            return f"no timing ({TUNER_STATISTIC_NAMES[self.tuner]})"
        name = f" ({TUNER_STATISTIC_NAMES[self.tuner]})" if self.tuner in TUNER_STATISTIC_NAMES else ""
        if self.records == 1:
            return f"{self.statistic if self.statistic != 'mixed' else 'median'} of {self.samples} " \
                   f"run{'s' if self.samples != 1 else ''}{name}"
        each = "means and medians" if self.statistic == "mixed" else f"{self.statistic}s"
        return f"median of {self.records} records' {each}{name}"

    def interval_text(self) -> str:
        """``95 % CI 1.20-1.27 ms`` (the label :func:`ci_label`: ``72 % CI ...`` with too few
        values for 95 %, ``no interval`` with one)."""
        if not self.has_interval:
            return "no interval"
        lo, hi = fmt_seconds(self.lo), fmt_seconds(self.hi)
        lo_num, lo_unit = lo.rsplit(" ", 1)
        hi_num, hi_unit = hi.rsplit(" ", 1)
        span = f"{lo_num}-{hi}" if lo_unit == hi_unit else f"{lo}-{hi}"
        return f"{ci_label(self.coverage)} {span}"

    def text(self) -> str:
        """What a person needs to judge the number: ``1.23 ms (95% CI 1.20-1.27 ms, n=5)``,
        ``noisy`` appended when it is."""
        n = f"n={self.records}, {self.statistic_text()}"
        extra = ", confirmed" if self.basis == "confirmed" else ""
        return f"{fmt_seconds(self.value)} ({self.interval_text()}, {n}{extra})" + (" noisy" if self.noisy else "")


@dataclass(frozen=True)
class ConfigCost:
    """One config of an entry with its estimate; ``record`` is one of its stored records (the
    one whose value is nearest the estimate; the latest among equals): its config, keys and
    provenance.  Compare and show ``estimate``, not ``record.cost``."""

    config_key: str
    config: dict
    estimate: CostEstimate
    record: Record

    @property
    def cost(self) -> float:
        """``estimate.value`` (seconds)."""
        return self.estimate.value


# --------------------------------------------------------------------------- the array core
@cache
def order_rank(n: int, level: float = LEVEL) -> tuple[int, float]:
    """``(j, coverage)``: the 1-based rank j such that [x_(j), x_(n+1-j)] of n sorted values
    covers their population median with probability ``coverage`` >= ``level``, j as large as
    possible; j = 1 (min..max, coverage below ``level``) when n is too small; (1, 0) for n <= 1."""
    if n <= 1:
        return 1, 0.0
    alpha = 1.0 - level
    # the Binomial(n, 1/2) CDF, cdf[i] = P(X <= i) = sum_{m <= i} C(n, m) / 2^n: in exact integers
    # up to 1,000 values, from log-probabilities above (its tail is all the interval needs)
    cdf: list[float] = []
    if n <= 1000:
        total, acc = 1 << n, 0
        for m in range(n // 2 + 1):
            acc += math.comb(n, m)
            cdf.append(acc / total)
    else:
        acc_f, base = 0.0, math.lgamma(n + 1) - n * math.log(2.0)
        for m in range(n // 2 + 1):
            acc_f += math.exp(base - math.lgamma(m + 1) - math.lgamma(n - m + 1))
            cdf.append(acc_f)
            if acc_f > alpha:  # past the tail: j is settled
                break
    j = 1
    for cand in range(1, len(cdf) + 1):
        if cdf[cand - 1] <= alpha / 2:
            j = cand
        else:
            break
    return j, float(1.0 - 2.0 * cdf[j - 1])


def tuner_of_meta(meta: str | Any) -> str:
    """The tuner a record's ``meta`` (a dict, or its canonical JSON text) says it comes from: the
    first :data:`TUNER_META_KEYS` entry the text holds as a key of an object or list, or "" for
    tunedb's own record."""
    text = meta if isinstance(meta, str) else canonical_meta(meta)
    if text and '":' in text:
        for key, rx in zip(TUNER_META_KEYS, _TUNER_RE):
            if rx.search(text):
                return key
    return ""


def canonical_meta(meta: Any) -> str:
    """The canonical JSON text of a meta dict (``{}`` when empty)."""
    from tunedb.index.model.keys import canonical_json

    return canonical_json(dict(meta)) if meta else "{}"


def tuner_codes(metas: Iterable[str]) -> np.ndarray:
    """Per meta JSON text: 0 for tunedb's own record (value: median of its repeats), else 1 +
    the index of its tuner in :data:`TUNER_META_KEYS` (value: mean of its repeats)."""
    memo: dict[str, int] = {}
    out = []
    for m in metas:
        c = memo.get(m)
        if c is None:
            t = tuner_of_meta(m or "")
            c = memo[m] = TUNER_META_KEYS.index(t) + 1 if t else 0
        out.append(c)
    return np.asarray(out, np.int64)


def record_tuner(record: Record) -> str:
    """:func:`tuner_of_meta` of a record (its stored meta JSON)."""
    return tuner_of_meta(record.meta_json or "{}")


def record_values(flat: np.ndarray, lengths: np.ndarray, codes: np.ndarray | None = None) -> np.ndarray:
    """Each record's value (module docstring, 2.): the median of its repeats, or their mean for
    a record whose tuner code (:func:`tuner_codes`) is not 0.  ``flat``/``lengths`` as
    :func:`record_medians`; ``codes`` None: every record's median."""
    med = record_medians(flat, lengths)
    if codes is None or not len(med):
        return med
    codes = np.asarray(codes, np.int64)
    if not codes.any():
        return med
    lengths = np.asarray(lengths, np.int64)
    rec = np.repeat(np.arange(len(lengths)), lengths)
    sums = np.bincount(rec, weights=np.asarray(flat, np.float64), minlength=len(lengths))
    return np.where(codes > 0, sums / np.maximum(lengths, 1), med)


def record_medians(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The median of each record's repeats: ``flat`` holds every record's costs one record after
    another, ``lengths`` how many each has (all >= 1)."""
    lengths = np.asarray(lengths, np.int64)
    if len(lengths) == 0:
        return np.zeros(0)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rec = np.repeat(np.arange(len(lengths)), lengths)
    s = np.asarray(flat, np.float64)[np.lexsort((flat, rec))]
    return (s[starts + (lengths - 1) // 2] + s[starts + lengths // 2]) / 2.0


def _group_median_ci(x: np.ndarray, g: np.ndarray, n_groups: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group of ``g`` (0..n_groups-1): (count, median, lo, hi, coverage) of the values ``x``."""
    counts = np.bincount(g, minlength=n_groups).astype(np.int64)
    nan = np.full(n_groups, np.nan)
    if len(x) == 0:
        return counts, nan, nan.copy(), nan.copy(), np.zeros(n_groups)
    order = np.lexsort((x, g))
    xs = x[order]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    has = counts > 0
    med, lo, hi, cov = nan.copy(), nan.copy(), nan.copy(), np.zeros(n_groups)
    s, n = starts[has], counts[has]
    med[has] = (xs[s + (n - 1) // 2] + xs[s + n // 2]) / 2.0
    ranks = np.array([order_rank(int(c)) for c in n], dtype=np.float64).reshape(-1, 2)
    j = ranks[:, 0].astype(np.int64)
    lo[has] = xs[s + j - 1]
    hi[has] = xs[s + n - j]
    cov[has] = ranks[:, 1]
    return counts, med, lo, hi, cov


def estimate_groups(flat: np.ndarray, lengths: np.ndarray, group: np.ndarray, confirm: np.ndarray,
                    n_groups: int, noisy_rec: np.ndarray | None = None, tuner_rec: np.ndarray | None = None
                    ) -> dict[str, np.ndarray]:
    """The estimator over records given as arrays (one entry per ok record with >= 1 cost):
    ``flat``/``lengths`` their costs (seconds), ``group`` which config (0..n_groups-1) each is
    of, ``confirm`` whether each is a confirmation re-measurement, ``noisy_rec`` whether each
    says its repeats were noisy, ``tuner_rec`` each one's tuner code (:func:`tuner_codes`; None:
    all tunedb's own).  Returns per group: value, lo, hi, records, samples, coverage,
    confirmed (counts), basis_confirmed (bool), noisy (bool), tuner_lo/tuner_hi (the least and
    greatest tuner code of the records used); value NaN for an empty group."""
    lengths = np.asarray(lengths, np.int64)
    group = np.asarray(group, np.int64)
    confirm = np.asarray(confirm, bool)
    codes = np.zeros(len(lengths), np.int64) if tuner_rec is None else np.asarray(tuner_rec, np.int64)
    med = record_values(flat, lengths, codes)
    n_conf = np.bincount(group[confirm], minlength=n_groups).astype(np.int64) if len(group) else \
        np.zeros(n_groups, np.int64)
    conf_basis = n_conf >= MIN_CONFIRMED
    use = ~conf_basis[group] | confirm if len(group) else np.zeros(0, bool)
    gu, mu = group[use], med[use]
    n_rec, value, rlo, rhi, rcov = _group_median_ci(mu, gu, n_groups)
    # the repeats of the records used: the interval of a group of one record
    rep_group = np.repeat(group, lengths)
    rep_use = np.repeat(use, lengths)
    n_rep, _, plo, phi, pcov = _group_median_ci(np.asarray(flat, np.float64)[rep_use], rep_group[rep_use], n_groups)
    by_rec = n_rec >= 2
    lo = np.where(by_rec, rlo, plo)
    hi = np.where(by_rec, rhi, phi)
    cov = np.where(by_rec, rcov, pcov)
    # the interval always contains the estimate (one record's repeats' range may not: its mean)
    lo = np.fmin(lo, value)
    hi = np.fmax(hi, value)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(value > 0, (hi - lo) / 2 / value, 0.0)
    noisy = (cov > 0) & (rel > NOISY_REL_HALFWIDTH)
    if noisy_rec is not None and len(group):
        said = np.bincount(group[use & np.asarray(noisy_rec, bool)], minlength=n_groups) > 0
        noisy |= said & (cov <= 0)
    t_lo = np.full(n_groups, len(TUNER_META_KEYS) + 1, np.int64)
    t_hi = np.full(n_groups, -1, np.int64)
    if len(gu):
        np.minimum.at(t_lo, gu, codes[use])
        np.maximum.at(t_hi, gu, codes[use])
    return {"value": value, "lo": lo, "hi": hi, "records": n_rec, "samples": n_rep, "coverage": cov,
            "confirmed": n_conf, "basis_confirmed": conf_basis, "noisy": noisy, "tuner_lo": t_lo, "tuner_hi": t_hi}


def _statistic(t_lo: int, t_hi: int) -> tuple[str, str]:
    """(statistic, tuner) of a group whose records' tuner codes span ``t_lo..t_hi``."""
    if t_hi <= 0:
        return "median", ""
    if t_lo == 0:
        return "mixed", ""
    return "mean", TUNER_META_KEYS[t_lo - 1] if t_lo == t_hi else ""


def estimate_at(arrs: dict[str, np.ndarray], i: int) -> CostEstimate | None:
    """The estimate of group ``i`` of the grouped arrays ``arrs`` (as :func:`rank_arrays` builds
    them), or None when the group has no ok value."""
    v = float(arrs["value"][i])
    if math.isnan(v):
        return None
    statistic, tuner = _statistic(int(arrs["tuner_lo"][i]), int(arrs["tuner_hi"][i]))
    return CostEstimate(value=v, lo=float(arrs["lo"][i]), hi=float(arrs["hi"][i]), records=int(arrs["records"][i]),
                        samples=int(arrs["samples"][i]), coverage=float(arrs["coverage"][i]),
                        basis="confirmed" if arrs["basis_confirmed"][i] else "all", noisy=bool(arrs["noisy"][i]),
                        confirmed=int(arrs["confirmed"][i]), statistic=statistic, tuner=tuner)


# --------------------------------------------------------------------------- records in memory
def is_confirmation(record: Record) -> bool:
    """Whether ``record`` is a confirmation re-measurement (``meta["origin"]`` in :data:`CONFIRM_ORIGINS`)."""
    return record.meta.get("origin") in CONFIRM_ORIGINS


def record_value(record: Record) -> float | None:
    """One record's value (module docstring, 2.): the mean of its repeats for another tuner's
    record (:func:`record_tuner`), else their median (seconds); None for a failed record or one
    without costs.  (A single measurement: the cost of a config is :func:`estimate`.)"""
    if record.status != "ok" or not record.costs:
        return None
    if record_tuner(record):
        return float(np.mean(np.asarray(record.costs, np.float64)))
    c = sorted(record.costs)
    n = len(c)
    return (c[(n - 1) // 2] + c[n // 2]) / 2.0


def _usable(records: Iterable[Record]) -> list[Record]:
    return [r for r in records if r.status == "ok" and r.costs]


def _arrays_of(recs: Sequence[Record], group: Sequence[int], n_groups: int) -> dict[str, np.ndarray]:
    lengths = np.array([len(r.costs) for r in recs], np.int64)
    flat = np.fromiter((c for r in recs for c in r.costs), np.float64, count=int(lengths.sum()))
    confirm = np.array([is_confirmation(r) for r in recs], bool)
    noisy = np.array([bool(r.meta.get("noisy")) for r in recs], bool)
    codes = tuner_codes(r.meta_json or "{}" for r in recs)
    return estimate_groups(flat, lengths, np.asarray(group, np.int64), confirm, n_groups, noisy, codes)


def estimate(records: Iterable[Record]) -> CostEstimate | None:
    """The cost of one config from its records (any order; failed ones are ignored): the module
    docstring's definition.  None when none is ``ok`` with a cost."""
    recs = _usable(records)
    if not recs:
        return None
    return estimate_at(_arrays_of(recs, [0] * len(recs), 1), 0)


def rank_key(est: CostEstimate, config_key: str) -> tuple[int, float, str]:
    """The ranking order (module docstring): confirmed estimates first, then by cost, then by
    ``config_key``."""
    return (0 if est.basis == "confirmed" else 1, est.value, config_key)


def rank_arrays(flat: np.ndarray, lengths: np.ndarray, config_keys: Sequence[str], group: np.ndarray,
                confirm: np.ndarray, noisy: np.ndarray, timestamps: np.ndarray, k: int | None = None,
                tuner_rec: np.ndarray | None = None) -> list[tuple[int, CostEstimate, int]]:
    """:func:`rank` over records given as arrays (one entry per ok record with >= 1 cost):
    ``flat``/``lengths`` their costs (seconds), ``group`` the config (index into ``config_keys``)
    of each, ``confirm``/``noisy`` per record as in :func:`estimate_groups`, ``timestamps`` any
    increasing time (ties of the representative go to the latest), ``tuner_rec`` each one's
    tuner code (:func:`tuner_codes`; None: all tunedb's own, medians).  Returns ``(group,
    estimate, representative record's position)`` in ranking order, the first ``k`` (all when
    None).  The representative is the record whose median is nearest the estimate, the latest
    among equals (the last in order among full ties)."""
    n_groups = len(config_keys)
    group = np.asarray(group, np.int64)
    arrs = estimate_groups(flat, lengths, group, confirm, n_groups, noisy, tuner_rec)
    meds = record_values(flat, lengths, tuner_rec)
    dist = np.abs(meds - arrs["value"][group])
    pos = np.arange(len(group))
    order = np.lexsort((-pos, -np.asarray(timestamps, np.float64), dist, group))
    first = np.ones(len(order), bool)
    first[1:] = group[order][1:] != group[order][:-1]
    rep = np.full(n_groups, -1, np.int64)
    rep[group[order][first]] = order[first]
    # rank_key's order: confirmed first, then by value, then by config_key (groups without a value: out)
    valid = np.flatnonzero(~np.isnan(arrs["value"]))
    key_rank = np.empty(n_groups, np.int64)
    key_rank[np.argsort(np.asarray(config_keys, dtype=object).astype(str), kind="stable")] = np.arange(n_groups)
    ranked = valid[np.lexsort((key_rank[valid], arrs["value"][valid], ~arrs["basis_confirmed"][valid]))]
    if k is not None:
        ranked = ranked[:k]
    return [(int(gi), estimate_at(arrs, int(gi)), int(rep[gi])) for gi in ranked]


def rank(records: Iterable[Record], k: int | None = None) -> list[ConfigCost]:
    """The configs of ``records`` (one entry's ok records; failed ones ignored), each with its
    estimate, in ranking order (:func:`rank_key`: confirmed first, then by cost); the first
    ``k`` (all when None)."""
    recs = _usable(records)
    if not recs or (k is not None and k <= 0):
        return []
    index: dict[str, int] = {}
    group = np.array([index.setdefault(r.config_key, len(index)) for r in recs], np.int64)
    lengths = np.array([len(r.costs) for r in recs], np.int64)
    flat = np.fromiter((c for r in recs for c in r.costs), np.float64, count=int(lengths.sum()))
    confirm = np.array([is_confirmation(r) for r in recs], bool)
    noisy = np.array([bool(r.meta.get("noisy")) for r in recs], bool)
    ts = np.array([r.timestamp.timestamp() for r in recs], np.float64)
    codes = tuner_codes(r.meta_json or "{}" for r in recs)
    keys = list(index)
    return [ConfigCost(config_key=keys[gi], config=recs[j].config, estimate=est, record=recs[j])
            for gi, est, j in rank_arrays(flat, lengths, keys, group, confirm, noisy, ts, k, codes)]


# --------------------------------------------------------------------------- Arrow tables
def estimate_table(t: pa.Table, by: Sequence[str] = ("target_key", "workload_key", "config_key")) -> pa.Table:
    """The estimate of every group of ``t`` (a ``RECORD_SCHEMA`` table or a projection with
    ``status``, ``costs``, ``meta`` and the ``by`` columns): one row per group that has an ok
    record with a cost, with the ``by`` columns and value, lo, hi (seconds), records, samples,
    coverage, confirmed, basis ("confirmed"/"all"), noisy.  Group order: first appearance."""
    import pyarrow as pa
    import pyarrow.compute as pc

    by = list(by)
    out_schema = {c: t.schema.field(c).type for c in by}
    ok = pc.and_(pc.equal(t.column("status"), "ok"), pc.greater(pc.fill_null(pc.list_value_length(t.column("costs")), 0), 0))
    ok = pc.fill_null(ok, False)
    u = t.filter(ok)
    if u.num_rows == 0:
        return pa.table({**{c: pa.array([], typ) for c, typ in out_schema.items()},
                         "value": pa.array([], pa.float64()), "lo": pa.array([], pa.float64()),
                         "hi": pa.array([], pa.float64()), "records": pa.array([], pa.int64()),
                         "samples": pa.array([], pa.int64()), "coverage": pa.array([], pa.float64()),
                         "confirmed": pa.array([], pa.int64()), "basis": pa.array([], pa.string()),
                         "noisy": pa.array([], pa.bool_()), "statistic": pa.array([], pa.string()),
                         "tuner": pa.array([], pa.string())})
    costs = u.column("costs").combine_chunks()
    lengths = pc.list_value_length(costs).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(costs).to_numpy(zero_copy_only=False).astype(np.float64)
    meta = u.column("meta")
    confirm = pc.fill_null(pc.match_substring_regex(meta, _CONFIRM_RE), False).to_numpy(zero_copy_only=False)
    noisy_rec = pc.fill_null(pc.match_substring(meta, '"noisy":true'), False).to_numpy(zero_copy_only=False)
    codes = np.zeros(u.num_rows, np.int64)
    for i, rx in reversed(list(enumerate(_TUNER_RES))):  # the first key that matches wins
        hit = pc.fill_null(pc.match_substring_regex(meta, rx), False).to_numpy(zero_copy_only=False)
        codes[hit] = i + 1
    if len(by) == 1:
        enc = pc.dictionary_encode(u.column(by[0])).combine_chunks()
        group = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        n_groups = len(enc.dictionary)
        first = np.full(n_groups, len(group), np.int64)
        np.minimum.at(first, group, np.arange(len(group)))
    else:
        keys = [pc.dictionary_encode(u.column(c)).combine_chunks().indices.to_numpy(zero_copy_only=False)
                .astype(np.int64) for c in by]
        stacked = np.stack(keys, axis=1)
        _, first, group = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
        group = group.reshape(-1).astype(np.int64)
        n_groups = len(first)
    arrs = estimate_groups(flat, lengths, group, confirm, n_groups, noisy_rec, codes)
    order = np.argsort(first, kind="stable")
    stats = [_statistic(int(a), int(b)) for a, b in zip(arrs["tuner_lo"][order], arrs["tuner_hi"][order])]
    rows = u.take(pa.array(first[order]))
    cols = {c: rows.column(c) for c in by}
    cols.update({
        "value": pa.array(arrs["value"][order], pa.float64()),
        "lo": pa.array(arrs["lo"][order], pa.float64()),
        "hi": pa.array(arrs["hi"][order], pa.float64()),
        "records": pa.array(arrs["records"][order], pa.int64()),
        "samples": pa.array(arrs["samples"][order], pa.int64()),
        "coverage": pa.array(arrs["coverage"][order], pa.float64()),
        "confirmed": pa.array(arrs["confirmed"][order], pa.int64()),
        "basis": pa.array(np.where(arrs["basis_confirmed"][order], "confirmed", "all"), pa.string()),
        "noisy": pa.array(arrs["noisy"][order], pa.bool_()),
        "statistic": pa.array([st for st, _ in stats], pa.string()),
        "tuner": pa.array([tu for _, tu in stats], pa.string()),
    })
    return pa.table(cols)


def estimate_of_row(row: dict[str, Any]) -> CostEstimate:
    """A row of :func:`estimate_table` (as ``to_pylist`` gives it) as a CostEstimate."""
    return CostEstimate(value=row["value"], lo=row["lo"], hi=row["hi"], records=row["records"],
                        samples=row["samples"], coverage=row["coverage"], basis=row["basis"], noisy=row["noisy"],
                        confirmed=row["confirmed"], statistic=row.get("statistic") or "median",
                        tuner=row.get("tuner") or "")


__all__ = ["CostEstimate", "ConfigCost", "estimate", "rank", "rank_key", "estimate_table", "estimate_groups", "estimate_of_row",
           "record_medians", "record_value", "record_values", "record_tuner", "tuner_of_meta", "tuner_codes",
           "TUNER_META_KEYS", "TUNER_STATISTIC_NAMES", "order_rank", "is_confirmation", "LEVEL", "MIN_CI_UNITS",
           "MIN_CONFIRMED", "NOISY_REL_HALFWIDTH", "CONFIRM_ORIGIN", "CONFIRM_ORIGINS"]
