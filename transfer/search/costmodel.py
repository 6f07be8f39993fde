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
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tunedb.index.base import RecordStore

MAX_LIST = 4


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


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (nan when undefined)."""
    from scipy.stats import spearmanr

    if len(a) < 3 or np.ptp(np.asarray(a, float)) == 0 or np.ptp(np.asarray(b, float)) == 0:
        return float("nan")  # a constant has no rank correlation
    r = spearmanr(a, b).statistic
    return float(r) if r == r else float("nan")


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


class LightGBMCostModel(_Base):
    """Gradient-boosted trees (LightGBM) on log time.

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
        import lightgbm as lgb

        params = {"objective": "regression", "learning_rate": self.learning_rate, "num_leaves": self.num_leaves,
                  "min_data_in_leaf": 3, "bagging_fraction": 0.9, "bagging_freq": 1, "feature_fraction": 0.9,
                  "seed": self.seed, "num_threads": self.n_jobs, "verbose": -1, "deterministic": True,
                  "force_row_wise": True}
        ds = lgb.Dataset(X, label=y, weight=w, free_raw_data=True)
        self.model_ = lgb.train(params, ds, num_boost_round=self.n_estimators)

    def _predict_x(self, X) -> np.ndarray:
        return np.asarray(self.model_.predict(X), np.float64)


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


def default_model(seed: int = 0) -> _Base:
    """LightGBM when installed, else ridge."""
    try:
        import lightgbm  # noqa: F401
    except ImportError:  # pragma: no cover
        return RidgeCostModel()
    return LightGBMCostModel(seed=seed)


def training_data(db: RecordStore, family: str, *, max_records: int = 200_000, seed: int = 0
                  ) -> tuple[list, list, list, list]:
    """(configs, workloads, targets, costs) of the family's live ``ok`` records in ``db`` (any
    record store), in the store's record order; at most ``max_records`` (a seeded sample)."""
    import json

    import pyarrow.compute as pc

    t = db.records(include_stale=False)
    if t.num_rows == 0:
        return [], [], [], []
    t = t.filter(pc.and_(pc.equal(t.column("family"), family), pc.equal(t.column("status"), "ok")))
    t = t.filter(pc.greater(t.column("cost"), 0.0))
    if t.num_rows > max_records:
        idx = np.random.default_rng(seed).choice(t.num_rows, max_records, replace=False)
        t = t.take(np.sort(idx))
    tj = t.column("target").to_pylist()
    wj = t.column("workload").to_pylist()
    # one dict per distinct JSON text: few targets and workloads, and the feature caches key on id()
    parsed = {x: json.loads(x) for x in set(tj) | set(wj)}
    targets = [parsed[x] for x in tj]
    workloads = [parsed[x] for x in wj]
    configs = [json.loads(x) for x in t.column("config").to_pylist()]
    costs = t.column("cost").to_pylist()
    return configs, workloads, targets, costs
