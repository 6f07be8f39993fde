"""Cost model: (config knobs + workload features + hardware features) -> log run time.

Follows scikit-learn conventions: ``fit`` returns self, fitted attributes end in ``_``.
One model per kernel family, trained on that family's ``ok`` records across all targets.

Why LightGBM (measured, see README "cost model"): gradient-boosted trees handle the mixed,
non-smooth knob effects (tile sizes that stop fitting a cache, loop orders) far better than a
linear model on the same features; on the Kernel Tuner data its held-out Spearman rank
correlation was clearly higher than ridge regression, and it trains on 50,000 records in well
under a second on 2 cores.  ``RidgeCostModel`` (numpy only) is kept as the fallback and for
comparison.

Feature layout (``FeatureSpace``): for each knob name seen in training, in sorted order, one
column -- log2(1 + |v|) with the sign of v for numbers, 0/1 for booleans, a stable hashed code
for strings; a list value (AutoTVM splits) gives one column per element (``knob[i]``, up to 4);
then the workload vector and the hardware vector of ``tunedb.index.retrieval.features`` (fixed layouts).

Sample weights (``record_weight``): a record counts 1.0 in a fit, or :data:`NOISY_WEIGHT` when
it was measured on a noisy machine -- its meta says ``noisy`` (its repeats' CV was over the
timing protocol's threshold) or its ``meta["context"]`` shows the machine was loaded
(``tunedb.transfer.measure.machine.context_is_loaded``).  :func:`training_set` carries them in
``TrainingSet.weights`` and :func:`training_data` returns them with ``with_weights=True``; pass
them to ``fit`` / ``fit_matrix`` as ``sample_weight`` (and to ``corrected``).
"""

from __future__ import annotations

import importlib.util
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tunedb.transfer.search import lgbm_capi
from tunedb.transfer.search.trees import TreeEnsemble, boost_residuals

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore

MAX_LIST = 4
#: sample weight (relative to 1.0) of a record measured on a noisy machine (see ``record_weight``)
NOISY_WEIGHT = 0.25


def _num(v: Any) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return math.copysign(math.log2(1.0 + abs(v)), v) if v else 0.0
    if isinstance(v, str):
        return float(zlib.crc32(v.encode()) % 997) / 997.0
    return 0.0


def _flatten(config: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in config.items():
        if isinstance(v, (list, tuple)):
            for i, x in enumerate(v[:MAX_LIST]):
                out[f"{k}[{i}]"] = _num(x if not isinstance(x, (list, tuple)) else len(x))
        elif isinstance(v, dict):
            continue
        else:
            out[k] = _num(v)
    return out


def hardware_features(target: Mapping[str, Any]) -> np.ndarray:
    """Fixed-length hardware vector of ``target`` (tunedb.index.retrieval.features when available)."""
    try:
        from tunedb.index.retrieval.features import hardware_vector
    except ImportError:  # pragma: no cover - retrieval not installed
        vals = [_num(v) for k, v in sorted(target.items()) if isinstance(v, (int, float))]
        return np.asarray((vals + [0.0] * 16)[:16], np.float32)
    return np.asarray(hardware_vector(dict(target)), np.float32)


def workload_features(workload: Mapping[str, Any]) -> np.ndarray:
    """Fixed-length workload vector of ``workload`` (tunedb.index.retrieval.features when available)."""
    try:
        from tunedb.index.retrieval.features import workload_vector
    except ImportError:  # pragma: no cover
        vals = [_num(v) for k, v in sorted(workload.items()) if isinstance(v, (int, float))]
        return np.asarray((vals + [0.0] * 16)[:16], np.float32)
    return np.asarray(workload_vector(dict(workload)), np.float32)


@dataclass
class FeatureSpace:
    """Column layout of the model's input matrix."""

    knob_columns: list[str]

    @classmethod
    def from_configs(cls, configs: Sequence[Mapping[str, Any]]) -> "FeatureSpace":
        names: set[str] = set()
        for c in configs:
            names.update(_flatten(c))
        return cls(sorted(names))

    def matrix(self, configs: Sequence[Mapping[str, Any]], workloads: Sequence[Mapping[str, Any]],
               targets: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Rows of [knobs | workload vector | hardware vector] (float32)."""
        n = len(configs)
        col = {k: i for i, k in enumerate(self.knob_columns)}
        kn = np.zeros((n, len(col)), np.float32)
        for r, c in enumerate(configs):
            for k, v in _flatten(c).items():
                j = col.get(k)
                if j is not None:
                    kn[r, j] = v
        wl_cache: dict[int, np.ndarray] = {}
        hw_cache: dict[int, np.ndarray] = {}
        if n == 0:
            return kn

        def cached(cache: dict, obj: Mapping, fn) -> np.ndarray:
            v = cache.get(id(obj))
            if v is None:
                v = cache[id(obj)] = fn(obj)
            return v

        wl = np.stack([cached(wl_cache, w, workload_features) for w in workloads])
        hw = np.stack([cached(hw_cache, t, hardware_features) for t in targets])
        return np.hstack([kn, wl, hw]).astype(np.float32)

    def knob_rows(self, configs: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """The knob block of :meth:`matrix` alone: one float32 row per config."""
        col = {k: i for i, k in enumerate(self.knob_columns)}
        kn = np.zeros((len(configs), len(col)), np.float32)
        for r, c in enumerate(configs):
            for k, v in _flatten(c).items():
                j = col.get(k)
                if j is not None:
                    kn[r, j] = v
        return kn

    def matrix_of_codes(self, configs: Sequence[Mapping[str, Any]], config_codes: np.ndarray,
                        workloads: Sequence[Mapping[str, Any]], workload_codes: np.ndarray,
                        targets: Sequence[Mapping[str, Any]], target_codes: np.ndarray) -> np.ndarray:
        """:meth:`matrix` of rows given as codes into lists of distinct configs, workloads and
        targets (row i is ``configs[config_codes[i]]`` on ``targets[target_codes[i]]`` ...):
        each distinct object is featurised once, so a family whose devices share one space costs
        one featurisation per config, not per record.  Equal to ``matrix`` of the expanded rows."""
        n = len(config_codes)
        kn = self.knob_rows(configs)
        if n == 0:
            return np.zeros((0, len(self.knob_columns)), np.float32)
        wl = np.stack([workload_features(w) for w in workloads]) if len(workloads) else np.zeros((0, 0), np.float32)
        hw = np.stack([hardware_features(t) for t in targets]) if len(targets) else np.zeros((0, 0), np.float32)
        return np.hstack([kn[config_codes], wl[workload_codes], hw[target_codes]]).astype(np.float32)


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x`` with ties sharing their average rank (as ``scipy.stats.rankdata``)."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], len(xs)]
    avg = (starts + ends + 1) / 2.0  # mean of the 1-based positions starts+1 .. ends
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (nan when undefined): the Pearson correlation of the average
    ranks, as ``scipy.stats.spearmanr`` computes it (numpy only: importing scipy.stats alone
    took 1-2 s per tuning run)."""
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(x) < 3 or len(x) != len(y) or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")  # a constant has no rank correlation
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return float("nan")
    rx, ry = _average_ranks(x), _average_ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    den = math.sqrt(float(rx @ rx) * float(ry @ ry))
    r = float(rx @ ry) / den if den > 0 else float("nan")
    return max(-1.0, min(1.0, r)) if r == r else float("nan")


class _Base:
    features_: FeatureSpace
    n_records_: int
    targets_: list[str]
    heldout_spearman_: float

    def _xy(self, configs, workloads, targets, costs):
        X = self.features_.matrix(configs, workloads, targets)
        y = np.log(np.asarray(costs, np.float64))
        return X, y

    def fit(self, configs: Sequence[Mapping], workloads: Sequence[Mapping], targets: Sequence[Mapping],
            costs: Sequence[float], *, sample_weight: Sequence[float] | None = None,
            holdout: float = 0.2, seed: int = 0) -> "_Base":
        """Fit on measured configs (costs in seconds, > 0).  ``holdout`` of the rows is kept
        aside first to measure ``heldout_spearman_``; the final model sees every row."""
        if len(configs) < 2:
            raise ValueError("the cost model needs at least 2 records")
        self.features_ = FeatureSpace.from_configs(configs)
        X, y = self._xy(configs, workloads, targets, costs)
        return self.fit_matrix(X, y, sample_weight=sample_weight, holdout=holdout, seed=seed,
                               target_names=sorted({str(t.get("name", "")) for t in targets}))

    def fit_matrix(self, X: np.ndarray, y: np.ndarray, *, sample_weight: Sequence[float] | None = None,
                   holdout: float = 0.2, seed: int = 0, target_names: Sequence[str] = ()) -> "_Base":
        """Fit on an already built feature matrix (``features_`` must be set) and log times."""
        w = None if sample_weight is None else np.asarray(sample_weight, np.float64)
        self.heldout_spearman_ = float("nan")
        rng = np.random.default_rng(seed)
        if holdout and len(y) >= 20:
            idx = rng.permutation(len(y))
            cut = int(len(y) * (1 - holdout))
            tr, te = idx[:cut], idx[cut:]
            self._fit_xy(X[tr], y[tr], None if w is None else w[tr])
            self.heldout_spearman_ = spearman(self._predict_x(X[te]), y[te])
        self._fit_xy(X, y, w)
        self.n_records_ = len(y)
        self.targets_ = list(target_names)
        return self

    def predict(self, configs: Sequence[Mapping], workloads: Sequence[Mapping], targets: Sequence[Mapping]
                ) -> np.ndarray:
        """Predicted run time in seconds per config."""
        X = self.features_.matrix(configs, workloads, targets)
        return np.exp(self._predict_x(X))

    def predict_log(self, X: np.ndarray) -> np.ndarray:
        """Predicted log seconds of the rows of an already built feature matrix."""
        return self._predict_x(X)

    def corrected(self, X: np.ndarray, y: np.ndarray, *, seed: int = 0,
                  sample_weight: Sequence[float] | None = None) -> "CorrectedModel":
        """This model plus a small correction fitted to its residuals on ``X``/``y`` (log
        seconds; typically the evaluations of the entry being tuned; ``sample_weight``: one
        weight per row, None = equal); ``self`` is not changed."""
        return CorrectedModel(self, X, y, seed=seed, sample_weight=sample_weight)

    # persistence (tunedb.transfer.search.modelcache): plain JSON data, exact round trip
    def params(self) -> dict:
        """The constructor arguments (JSON data)."""
        raise NotImplementedError

    def state(self) -> dict:
        """The fitted state (JSON data) that :func:`model_from_state` turns back into this model."""
        raise NotImplementedError

    def _set_state(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError


class LightGBMCostModel(_Base):
    """Gradient-boosted trees (LightGBM) on log time: trained by LightGBM's C library
    (``lgbm_capi``, without importing the ``lightgbm`` package), evaluated in numpy
    (``trees.TreeEnsemble``, LightGBM's predictions bit for bit).

    One thread by default: the tuner runs beside builds and timed runs, and OpenMP threads
    that spin-wait on an oversubscribed 2-core machine made a fit 50x slower (measured)."""

    def __init__(self, n_estimators: int = 120, learning_rate: float = 0.1, num_leaves: int = 31,
                 seed: int = 0, n_jobs: int = 1):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.seed = seed
        self.n_jobs = n_jobs

    def _fit_xy(self, X, y, w) -> None:
        # through LightGBM's C library (lgbm_capi): the Python package's import costs seconds
        params = {"objective": "regression", "learning_rate": self.learning_rate, "num_leaves": self.num_leaves,
                  "min_data_in_leaf": 3, "bagging_fraction": 0.9, "bagging_freq": 1, "feature_fraction": 0.9,
                  "seed": self.seed, "num_threads": self.n_jobs, "verbose": -1, "deterministic": True,
                  "force_row_wise": True}
        self.model_text_ = lgbm_capi.train(X, y, params, self.n_estimators, weight=w)
        self.trees_ = TreeEnsemble.from_lightgbm_text(self.model_text_)

    def _predict_x(self, X) -> np.ndarray:
        return self.trees_.predict(X)

    def params(self) -> dict:
        return {"n_estimators": self.n_estimators, "learning_rate": self.learning_rate,
                "num_leaves": self.num_leaves, "seed": self.seed, "n_jobs": self.n_jobs}

    def state(self) -> dict:
        return {"booster": self.model_text_}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        # evaluated in numpy (tunedb.transfer.search.trees): a loaded model never imports LightGBM
        self.model_text_ = str(state["booster"])
        self.trees_ = TreeEnsemble.from_lightgbm_text(self.model_text_)


class RidgeCostModel(_Base):
    """Ridge regression on the same features plus pairwise knob products (numpy only)."""

    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha

    @staticmethod
    def _expand(X: np.ndarray) -> np.ndarray:
        return np.hstack([X, X ** 2, np.ones((len(X), 1), X.dtype)])

    def _fit_xy(self, X, y, w) -> None:
        Z = self._expand(X).astype(np.float64)
        self.mu_ = Z.mean(0)
        self.sd_ = Z.std(0) + 1e-9
        self.mu_[-1], self.sd_[-1] = 0.0, 1.0
        Zs = (Z - self.mu_) / self.sd_
        W = np.ones(len(y)) if w is None else w
        A = Zs.T @ (Zs * W[:, None]) + self.alpha * np.eye(Zs.shape[1])
        self.coef_ = np.linalg.solve(A, Zs.T @ (W * y))

    def _predict_x(self, X) -> np.ndarray:
        return ((self._expand(X) - self.mu_) / self.sd_) @ self.coef_

    def params(self) -> dict:
        return {"alpha": self.alpha}

    def state(self) -> dict:
        return {"mu": self.mu_.tolist(), "sd": self.sd_.tolist(), "coef": self.coef_.tolist()}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self.mu_ = np.asarray(state["mu"], np.float64)
        self.sd_ = np.asarray(state["sd"], np.float64)
        self.coef_ = np.asarray(state["coef"], np.float64)


MODEL_KINDS = {"LightGBMCostModel": LightGBMCostModel, "RidgeCostModel": RidgeCostModel}


def model_from_state(kind: str, params: Mapping[str, Any], state: Mapping[str, Any], features: FeatureSpace, *,
                     n_records: int, targets: Sequence[str], heldout_spearman: float) -> _Base:
    """A fitted model of class ``kind`` (a :data:`MODEL_KINDS` name) from what ``params()``
    and ``state()`` returned.  Raises KeyError/ValueError/TypeError for data that is not such a
    state (the model cache then refits)."""
    model = MODEL_KINDS[kind](**params)
    model._set_state(state)
    model.features_ = features
    model.n_records_ = int(n_records)
    model.targets_ = [str(t) for t in targets]
    model.heldout_spearman_ = float(heldout_spearman)
    return model


class CorrectedModel:
    """A fitted base model plus a correction fitted to the base's residuals on a few rows (the
    evaluations of the entry being tuned): predictions are ``base + correction`` in log seconds.

    The correction is what LightGBM's continued training (``init_model``) would add, without
    copying the base and without importing LightGBM: ``CORRECTION_ROUNDS`` small trees (at most 7
    leaves of at least 3 rows) boosted on the base's residuals in numpy
    (``trees.boost_residuals``; on the same rows it gives LightGBM's ``init_score`` boosting's
    predictions to about 1e-7); ridge regression on the residuals when the base is not LightGBM.
    Costs: a fit on 50 rows takes about 20 ms.  Attributes as a
    fitted model's (``features_``, ``n_records_`` = base rows + correction rows, ``targets_``,
    ``heldout_spearman_`` of the base)."""

    CORRECTION_ROUNDS = 30

    def __init__(self, base: _Base, X: np.ndarray, y: np.ndarray, *, seed: int = 0,
                 sample_weight: Sequence[float] | None = None):
        self.base = base
        self.features_ = base.features_
        self.n_records_ = int(base.n_records_) + len(y)
        self.targets_ = list(base.targets_)
        self.heldout_spearman_ = base.heldout_spearman_
        self.correction_: Any = None
        if len(y) < 3:
            return
        init = base.predict_log(X)
        w = None if sample_weight is None else np.asarray(sample_weight, np.float64)
        if isinstance(base, LightGBMCostModel):
            self.correction_ = boost_residuals(X, np.asarray(y, np.float64) - init, weight=w,
                                               rounds=self.CORRECTION_ROUNDS)
        else:
            r = RidgeCostModel(alpha=10.0)
            r._fit_xy(X, np.asarray(y, np.float64) - init, w)
            self.correction_ = r

    def predict_log(self, X: np.ndarray) -> np.ndarray:
        """Predicted log seconds of the rows of a feature matrix."""
        out = self.base.predict_log(X)
        if self.correction_ is None:
            return out
        if isinstance(self.correction_, RidgeCostModel):
            return out + self.correction_._predict_x(X)
        return out + self.correction_.predict(X)

    def predict(self, configs: Sequence[Mapping], workloads: Sequence[Mapping], targets: Sequence[Mapping]
                ) -> np.ndarray:
        """Predicted run time in seconds per config."""
        return np.exp(self.predict_log(self.features_.matrix(configs, workloads, targets)))


def default_model(seed: int = 0) -> _Base:
    """LightGBM when installed, else ridge (LightGBM is not imported here: that takes seconds)."""
    if importlib.util.find_spec("lightgbm") is None:  # pragma: no cover
        return RidgeCostModel()
    return LightGBMCostModel(seed=seed)


def record_weight(meta: Any) -> float:
    """Sample weight of a record with this ``meta`` (a dict, or its JSON text): :data:`NOISY_WEIGHT`
    when ``meta["noisy"]`` is true (the repeats' CV was over the protocol's threshold) or
    ``meta["context"]`` says the machine was loaded (``context_is_loaded``, with the record's
    ``meta["threads"]``), else 1.0 (also for meta that is not an object or not JSON)."""
    from tunedb.transfer.measure.machine import context_is_loaded

    if isinstance(meta, str):
        import json

        try:
            meta = json.loads(meta) if meta else {}
        except ValueError:
            return 1.0
    if not isinstance(meta, Mapping):
        return 1.0
    if meta.get("noisy") is True:
        return NOISY_WEIGHT
    threads = meta.get("threads")
    if context_is_loaded(meta.get("context"), threads if isinstance(threads, int) else None):
        return NOISY_WEIGHT
    return 1.0


def meta_weights(meta: Any) -> np.ndarray:
    """:func:`record_weight` of each row of an Arrow string column (or list) of meta JSON texts
    (one line each, as the stores hold them), as float64.

    Only rows mentioning ``"noisy":true`` or ``"context":{`` can weigh less than 1; those are
    parsed at once by Arrow's JSON reader (only the few keys the rule needs; about 0.2 s per
    100,000 such rows on one core), falling back to :func:`record_weight` row by row when their values are
    not of the expected types.  tests/transfer_tests/measure_tests/test_machine.py checks both agree with ``record_weight``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = meta if isinstance(meta, (pa.Array, pa.ChunkedArray)) else pa.array(list(meta), pa.string())
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks else pa.array([], pa.string())
    w = np.ones(len(col), np.float64)
    if len(col) == 0:
        return w
    hit = pc.or_(pc.fill_null(pc.match_substring(col, '"noisy":true'), False),
                 pc.fill_null(pc.match_substring(col, '"context":{'), False))
    idx = np.flatnonzero(np.asarray(hit.to_numpy(zero_copy_only=False), bool))
    if len(idx) == 0:
        return w
    sub = col if len(idx) == len(col) else col.take(pa.array(idx))
    try:
        w[idx] = _parsed_weights(sub)
    except (pa.ArrowInvalid, ValueError, TypeError):  # a type the rule does not expect: one by one
        w[idx] = [record_weight(t) for t in sub.to_pylist()]
    return w


def _parsed_weights(texts: Any) -> np.ndarray:
    """:func:`record_weight` of each of the meta texts (a string array; a null weighs 1) through
    Arrow's JSON reader; ArrowInvalid/ValueError when the texts are not one JSON object a line
    with the types the rule expects."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    from tunedb.transfer.measure.machine import LOAD_HEADROOM_CPUS

    texts = pc.fill_null(texts, "{}")
    lines = pc.binary_join_element_wise(texts, pa.scalar("\n"), "")
    if not isinstance(lines, pa.StringArray):
        raise ValueError("not a string column")
    offsets = np.frombuffer(lines.buffers()[1], np.int32)[lines.offset:lines.offset + len(lines) + 1]
    data = lines.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    num = pa.float64()
    ctx_keys = ("loadavg", "loadavg_after", "running", "cpus", "cpus_usable", "cpu_quota")
    schema = pa.schema([("noisy", pa.bool_()), ("threads", num),
                        ("context", pa.struct([(k, num) for k in ctx_keys]))])
    table = pj.read_json(pa.BufferReader(data), read_options=pj.ReadOptions(use_threads=False),
                         parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
    if table.num_rows != len(texts):
        raise ValueError("meta texts are not one JSON object a line")

    def values(arr: Any) -> np.ndarray:
        arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
        return np.asarray(pc.fill_null(arr, np.nan).to_numpy(zero_copy_only=False), np.float64)

    ctx = table.column("context").combine_chunks()
    f = {k: values(pc.struct_field(ctx, k)) for k in ctx_keys}
    with np.errstate(invalid="ignore"):
        n = np.where(np.isfinite(f["cpus_usable"]) & (f["cpus_usable"] != 0), f["cpus_usable"], f["cpus"])
        quota = f["cpu_quota"]
        n = np.where(np.isfinite(quota) & (quota > 0), np.fmin(n, quota), n)
        threads = values(table.column("threads"))
        own = np.where(np.isfinite(threads) & (threads > 0) & (threads == np.floor(threads)), threads, 1.0)
        loaded = f["running"] + own > n
        loaded |= f["loadavg"] >= n + LOAD_HEADROOM_CPUS
        loaded |= f["loadavg_after"] >= n + LOAD_HEADROOM_CPUS
        loaded &= np.isfinite(n) & (n > 0)
    noisy = np.asarray(pc.fill_null(table.column("noisy"), False).to_numpy(zero_copy_only=False), bool)
    return np.where(noisy | loaded, NOISY_WEIGHT, 1.0)


@dataclass
class TrainingSet:
    """A family's training rows as model input: ``X`` (float32, ``features`` layout), ``y`` (log
    seconds), the distinct target names, ``weights`` (one sample weight per row, float64, see
    :func:`record_weight`; None: all 1), and ``rows``: how many records they are."""

    features: FeatureSpace
    X: np.ndarray
    y: np.ndarray
    target_names: list[str]
    weights: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return len(self.y)


def family_table(db: RecordStore, family: str, *, entries: Any = None, max_records: int = 200_000,
                 seed: int = 0) -> Any:
    """The family's live ``ok`` records with cost > 0 in ``db`` as an Arrow table (the columns of
    ``RecordStore.records``), sorted by (target, workload, config, timestamp) keys (so the result
    does not depend on how the store lays its rows out nor on the random ids of new records); at most ``max_records`` (a seeded sample, order kept).

    Reads only the targets holding the family (``records(target=...)`` per target) unless every
    target of the DB holds it (then one ``records()``).  ``entries``: ``db.entries()`` when the
    caller has it already."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ents = db.entries() if entries is None else entries
    if ents.num_rows == 0:
        return None
    fam_tks = sorted(set(ents.filter(pc.equal(ents.column("family"), family)).column("target_key").to_pylist()))
    if not fam_tks:
        return None
    if len(fam_tks) == len(set(ents.column("target_key").to_pylist())):
        parts = [db.records(include_stale=False)]
    else:
        parts = [db.records(tk, include_stale=False) for tk in fam_tks]
    t = pa.concat_tables([p.replace_schema_metadata(None) for p in parts], promote_options="default") \
        if len(parts) > 1 else parts[0]
    if t.num_rows == 0:
        return None
    keep = pc.and_(pc.and_(pc.equal(t.column("family"), family), pc.equal(t.column("status"), "ok")),
                   pc.greater(t.column("cost"), 0.0))
    t = t.filter(pc.fill_null(keep, False))
    if t.num_rows == 0:
        return None
    # content order, not record_id: a new measurement's id is random, and the rows' order shapes
    # the fitted trees (so the same DB content must give the same model in every run and store)
    t = t.take(pc.sort_indices(t, sort_keys=[(c, "ascending") for c in
                                             ("target_key", "workload_key", "config_key", "timestamp", "record_id")]))
    if t.num_rows > max_records:
        idx = np.random.default_rng(seed).choice(t.num_rows, max_records, replace=False)
        t = t.take(pa.array(np.sort(idx)))
    return t


def _distinct(column: Any) -> tuple[list, np.ndarray]:
    """(distinct JSON texts parsed, one code per row) of a string column."""
    import json

    import pyarrow as pa
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(column)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
    return [json.loads(x) for x in enc.dictionary.to_pylist()], codes


def training_set(db: RecordStore, family: str, *, max_records: int = 200_000, seed: int = 0,
                 entries: Any = None) -> TrainingSet | None:
    """The rows of :func:`family_table` as a :class:`TrainingSet` (None when there are none),
    with each row's sample weight (:func:`record_weight`) in ``weights``.
    Each distinct config, workload and target is parsed and featurised once."""
    t = family_table(db, family, entries=entries, max_records=max_records, seed=seed)
    if t is None:
        return None
    cfgs, cc = _distinct(t.column("config"))
    wls, wc = _distinct(t.column("workload"))
    tgs, tc = _distinct(t.column("target"))
    fs = FeatureSpace.from_configs(cfgs)
    X = fs.matrix_of_codes(cfgs, cc, wls, wc, tgs, tc)
    y = np.log(np.asarray(t.column("cost").to_numpy(zero_copy_only=False), np.float64))
    return TrainingSet(fs, X, y, sorted({str(x.get("name", "")) for x in tgs}), _table_weights(t))


def _table_weights(t: Any) -> np.ndarray:
    """Sample weights of the rows of a records table (all 1 when it has no ``meta`` column)."""
    if "meta" not in t.column_names:
        return np.ones(t.num_rows, np.float64)
    return meta_weights(t.column("meta"))


def training_data(db: RecordStore, family: str, *, max_records: int = 200_000, seed: int = 0,
                  with_weights: bool = False) -> tuple[list, ...]:
    """(configs, workloads, targets, costs) of the family's live ``ok`` records in ``db`` (any
    record store), in :func:`family_table` order; at most ``max_records`` (a seeded sample).
    ``with_weights``: a fifth list, each record's sample weight (:func:`record_weight`), to pass
    to ``fit(..., sample_weight=...)``."""
    t = family_table(db, family, max_records=max_records, seed=seed)
    if t is None:
        return ([], [], [], [], []) if with_weights else ([], [], [], [])
    cfgs, cc = _distinct(t.column("config"))
    wls, wc = _distinct(t.column("workload"))
    tgs, tc = _distinct(t.column("target"))
    # one dict per distinct target and workload (the feature caches key on id()); configs copied per row
    configs = [dict(cfgs[i]) for i in cc.tolist()]
    out = (configs, [wls[i] for i in wc.tolist()], [tgs[i] for i in tc.tolist()], t.column("cost").to_pylist())
    return (*out, _table_weights(t).tolist()) if with_weights else out
