"""RGPE-style transfer surrogate: per-source models weighted by how well they rank the target.

After Feurer, Letham, Hutter & Bakshy (2018), "Scalable Meta-Learning for Bayesian
Optimization" (RGPE).  Every *source* (another target's records of this workload) gets its own
model of log cost; the *target* (the entry being tuned) gets a model of its own measurements.
The ensemble's prediction is the weighted sum of the members' standardised predictions; the
weights come from how well each member *ranks* the target's observations:

* ranking loss of a member on a set of observations = number of misranked pairs
  (``(f(x_i) < f(x_j)) != (y_i < y_j)``, strict on both sides);
* ``n_bootstrap`` bootstrap samples of the target's observations: a source's loss is taken on
  the sample, the target model's loss from its leave-one-out predictions on the same sample
  (so it is not judged on points it was fitted to);
* the weight of a member = share of the samples in which it has the lowest loss (ties split
  evenly); a source whose median loss exceeds the target model's 95th percentile loss is
  dropped (RGPE's weight-dilution guard, applied once the target has ``>= dilution_min``
  observations).

So after a few own measurements the sources that rank this device right dominate, and once the
target's own data rank better than every source, the target model takes over.

Contract
  ``fit(X, y, sources)``: ``X`` (n, d) numeric encodings of the target's evaluated configs,
  ``y`` (n,) their costs as **log seconds** (finite); ``sources`` a sequence of ``(X_s, y_s)``
  pairs, ``y_s`` log seconds of source s (``inf`` = the config failed there: predicted as the
  source's slowest plus ``fail_margin``).  ``predict(X)`` -> (m,) predicted log seconds **in the
  target's scale** (the target's mean and std of ``y``; with fewer than 2 target observations the
  standardised ensemble score is returned, still rank-consistent).  After ``fit``: ``weights_``
  (n_sources + 1,) summing to 1, the target model last.  Deterministic for a given
  ``random_state``.

Per-source model: the source's own measured value looked up directly for a config it holds
(rows compared exactly, the data sets share the space), else the distance-weighted mean of its
``n_neighbors`` nearest configs (Euclidean on the columns scaled to unit range).  Target model:
Nadaraya-Watson kernel regression on the same scaled columns (bandwidth: the median pairwise
distance of the target's configs), with an exact leave-one-out.

Complexity: ``fit`` O(S * n^2 * B) for S sources, n target observations (at most
``max_target_rows``: a longer run's fit keeps its fastest half and its latest rows) and B bootstrap
samples, plus the sources' predictions of the n configs (lookups O(n), kNN O(n * N_s * d) for
configs a source lacks); ``predict`` O(m * (S + n) * d) plus kNN for rows the sources lack.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

_ERFC = np.frompyfunc(math.erfc, 1, 1)

__all__ = ["RGPESurrogate", "SourceModel", "bootstrap_ranking_losses", "ranking_loss"]


def _standardise(y: np.ndarray) -> tuple[float, float]:
    mu = float(np.mean(y)) if len(y) else 0.0
    sd = float(np.std(y)) if len(y) > 1 else 1.0
    return mu, (sd if sd > 1e-12 else 1.0)


def ranking_loss(pred: np.ndarray, y: np.ndarray) -> int:
    """Number of misranked pairs: ``i, j`` with ``(pred_i < pred_j) != (y_i < y_j)`` (i != j)."""
    p = np.asarray(pred, np.float64)
    t = np.asarray(y, np.float64)
    return int(np.sum((p[:, None] < p[None, :]) != (t[:, None] < t[None, :])))


def bootstrap_ranking_losses(pred: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Ranking losses of each row of ``pred`` (k, n) on the bootstrap samples ``idx`` (B, n).

    A sample's loss counts the misranked pairs of its draws, duplicates included, so it is
    ``c^T D c`` with ``c`` the sample's draw counts per row and ``D[i, j]`` 1 where rows i and j
    are misranked: O(k * n^2 * B) multiply-adds in BLAS, no (k, B, n, n) array; exact integers."""
    n = len(y)
    counts = np.zeros((idx.shape[0], n))
    np.add.at(counts, (np.arange(idx.shape[0])[:, None], idx), 1.0)
    t = y[:, None] < y[None, :]
    out = np.empty((pred.shape[0], idx.shape[0]))
    for k, p in enumerate(pred):
        D = ((p[:, None] < p[None, :]) != t).astype(np.float64)
        out[k] = np.einsum("bi,bi->b", counts @ D, counts)
    return np.rint(out).astype(np.int64)


def _rbf(A: np.ndarray, B: np.ndarray, var0: float, length_scale: float) -> np.ndarray:
    """RBF kernel matrix ``var0 * exp(-|a - b|^2 / (2 length_scale^2))`` of rows ``A`` (m, d) and ``B`` (n, d)."""
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return var0 * np.exp(-d2 / (2.0 * length_scale ** 2))


class SourceModel:
    """One source's log costs: exact lookup of the configs it holds, kNN for the rest.

    ``fit(X, y)`` with ``y`` log seconds (``inf`` = failed: stored as the slowest ok value plus
    ``fail_margin``); ``predict(X)`` -> (m,) log seconds of the source."""

    def __init__(self, n_neighbors: int = 5, fail_margin: float = 1.0):
        self.n_neighbors = n_neighbors
        self.fail_margin = fail_margin

    def fit(self, X: np.ndarray, y: np.ndarray, scale: np.ndarray | None = None) -> SourceModel:
        X = np.asarray(X, np.float64)
        y = np.asarray(y, np.float64)
        ok = np.isfinite(y)
        worst = float(y[ok].max()) if ok.any() else 0.0
        y = np.where(ok, y, worst + self.fail_margin)
        self.X_ = X
        self.y_ = y
        self.scale_ = np.ones(X.shape[1]) if scale is None else np.asarray(scale, np.float64)
        self.index_ = {row.tobytes(): i for i, row in enumerate(np.ascontiguousarray(X))}
        self.mean_, self.std_ = _standardise(y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.ascontiguousarray(np.asarray(X, np.float64))
        out = np.empty(len(X))
        miss = []
        for i, row in enumerate(X):
            j = self.index_.get(row.tobytes())
            if j is None:
                miss.append(i)
            else:
                out[i] = self.y_[j]
        if miss:
            out[miss] = self._knn(X[miss])
        return out

    def _knn(self, X: np.ndarray) -> np.ndarray:
        A = self.X_ / self.scale_
        B = X / self.scale_
        k = min(self.n_neighbors, len(A))
        out = np.empty(len(B))
        for s in range(0, len(B), 256):  # chunks keep the distance matrix small
            d = np.sqrt(((B[s:s + 256, None, :] - A[None, :, :]) ** 2).sum(-1))
            nn = np.argpartition(d, k - 1, axis=1)[:, :k]
            dn = np.take_along_axis(d, nn, 1)
            w = 1.0 / (dn + 1e-9)
            out[s:s + 256] = (w * self.y_[nn]).sum(1) / w.sum(1)
        return out


class RGPESurrogate:
    """Rank-weighted ensemble of per-source models and a target model (see the module docstring).

    Parameters: ``n_bootstrap`` samples for the weights, ``n_neighbors`` of the sources' kNN,
    ``dilution_min`` target observations before the dilution guard applies, ``random_state``,
    ``max_target_rows`` target observations the members are fitted on (:meth:`target_rows`).
    Attributes after ``fit``: ``weights_`` (sources in the order given, then the target),
    ``source_models_``, ``n_targets_`` (target observations used, <= ``max_target_rows``), ``losses_`` (mean bootstrap loss per
    member)."""

    def __init__(self, n_bootstrap: int = 64, n_neighbors: int = 5, dilution_min: int = 6,
                 fail_margin: float = 1.0, random_state: int | None = 0, max_target_rows: int = 128):
        if max_target_rows < 2:
            raise ValueError(f"max_target_rows must be >= 2, not {max_target_rows}")
        self.max_target_rows = max_target_rows
        self.n_bootstrap = n_bootstrap
        self.n_neighbors = n_neighbors
        self.dilution_min = dilution_min
        self.fail_margin = fail_margin
        self.random_state = random_state

    # ------------------------------------------------------------------ fit
    def fit(self, X: np.ndarray, y: np.ndarray, sources: Sequence[tuple[np.ndarray, np.ndarray] | SourceModel],
            scale: np.ndarray | None = None) -> RGPESurrogate:
        """Fit the members and their weights; ``X`` (n, d), ``y`` (n,) log seconds, ``sources``
        ``[(X_s, y_s), ...]`` on the same columns, or already fitted :class:`SourceModel` s
        (reused as they are: a caller refitting the weights round after round builds them once).
        ``scale`` (d,): the column ranges for distances (default: the ranges of all rows given).
        Returns self."""
        pairs = [s for s in sources if not isinstance(s, SourceModel)]
        X = np.asarray(X, np.float64).reshape(-1, self._width(X, pairs))
        y = np.asarray(y, np.float64).ravel()
        if len(X) != len(y):
            raise ValueError(f"X has {len(X)} rows, y {len(y)} values")
        if not np.all(np.isfinite(y)):
            raise ValueError("target costs must be finite log seconds")
        if scale is None:
            allX = np.vstack([X] + [np.asarray(s[0], np.float64) for s in pairs]) if pairs else X
            span = allX.max(0) - allX.min(0) if len(allX) else np.ones(X.shape[1])
        else:
            span = np.asarray(scale, np.float64)
        self.scale_ = np.where(span > 0, span, 1.0)
        self.source_models_ = [s if isinstance(s, SourceModel)
                               else SourceModel(self.n_neighbors, self.fail_margin).fit(s[0], s[1], self.scale_)
                               for s in sources]
        keep = self.target_rows(y, self.max_target_rows)
        self.X_, self.y_ = X[keep], y[keep]
        self.n_targets_ = len(self.y_)
        self._gp_cache = None
        self.mean_, self.std_ = _standardise(y)
        self._fit_target()
        self.weights_, self.losses_ = self._weights()
        return self

    @staticmethod
    def target_rows(y: np.ndarray, cap: int) -> np.ndarray:
        """Indices of the target observations the members are fitted on: all of them up to
        ``cap``; beyond it the ``cap // 2`` fastest and the latest of the rest (in the order
        given), ``cap`` in all, ascending.  So a long run's fit costs O(cap^2) per round, not
        O(n^2), and keeps its best and its newest evidence."""
        n = len(y)
        if n <= cap:
            return np.arange(n)
        fastest = np.argsort(y, kind="stable")[: cap // 2]
        rest = np.setdiff1d(np.arange(n), fastest)
        return np.sort(np.concatenate([fastest, rest[len(rest) - (cap - len(fastest)):]]))

    @staticmethod
    def _width(X: np.ndarray, sources: Sequence[tuple[np.ndarray, np.ndarray]]) -> int:
        X = np.asarray(X)
        if X.ndim == 2 and X.shape[1]:
            return X.shape[1]
        for Xs, _ in sources:
            return np.asarray(Xs).shape[1]
        return max(X.shape[-1] if X.ndim else 1, 1)

    def _fit_target(self) -> None:
        Z = self.X_ / self.scale_
        if len(Z) > 1:
            d = np.sqrt(((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1))
            off = d[np.triu_indices(len(Z), 1)]
            bw = float(np.median(off)) if len(off) else 1.0
        else:
            bw = 1.0
        self.bandwidth_ = bw if bw > 1e-9 else 1.0

    def _target_predict_z(self, X: np.ndarray, leave_out: bool = False) -> np.ndarray:
        """The target model's standardised prediction (0 = the target's mean without data)."""
        if self.n_targets_ == 0:
            return np.zeros(len(X))
        zt = (self.y_ - self.mean_) / self.std_
        A = self.X_ / self.scale_
        B = X / self.scale_
        d2 = ((B[:, None, :] - A[None, :, :]) ** 2).sum(-1)
        k = np.exp(-0.5 * d2 / self.bandwidth_ ** 2)
        if leave_out:
            np.fill_diagonal(k, 0.0)
        s = k.sum(1)
        return np.where(s > 1e-12, (k * zt).sum(1) / np.maximum(s, 1e-300), 0.0)

    def _weights(self) -> tuple[np.ndarray, np.ndarray]:
        n_src = len(self.source_models_)
        w = np.zeros(n_src + 1)
        n = self.n_targets_
        if n < 2:
            # nothing to rank: the sources alike (the target model has no data), or the target alone
            if n_src:
                w[:n_src] = 1.0 / n_src
            else:
                w[-1] = 1.0
            return w, np.zeros(n_src + 1)
        preds = [m.predict(self.X_) for m in self.source_models_]
        preds.append(self._target_predict_z(self.X_, leave_out=True))
        P = np.vstack(preds)
        rng = np.random.default_rng(self.random_state)
        idx = rng.integers(0, n, size=(self.n_bootstrap, n))
        L = bootstrap_ranking_losses(P, self.y_, idx).astype(np.float64)   # (members, B)
        if n_src and n >= self.dilution_min:
            keep = np.median(L[:n_src], axis=1) <= np.percentile(L[-1], 95)
            L[:n_src][~keep] = np.inf
        best = L.min(0)
        winners = (L == best[None, :])
        w = (winners / winners.sum(0, keepdims=True)).mean(1)
        return w, np.where(np.isfinite(L), L, np.nan).mean(1)

    # -------------------------------------------------------------- predict
    def predict_z(self, X: np.ndarray) -> np.ndarray:
        """The ensemble's standardised score (lower = faster), shape (m,)."""
        X = np.asarray(X, np.float64).reshape(len(X), -1)
        out = np.zeros(len(X))
        for wi, m in zip(self.weights_[:-1], self.source_models_):
            if wi > 0:
                out += wi * (m.predict(X) - m.mean_) / m.std_
        if self.weights_[-1] > 0:
            out += self.weights_[-1] * self._target_predict_z(X)
        return out

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted log seconds of the target, shape (m,) (see the module docstring)."""
        return self.mean_ + self.std_ * self.predict_z(X)

    # ------------------------------------------------------------ posterior
    #: the grids :meth:`posterior_z` picks its kernel's length scale and noise from (by marginal likelihood)
    LENGTH_SCALES = (0.1, 0.2, 0.4, 0.8, 1.6)
    NOISES = (0.01, 0.1)

    def posterior_z(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A Gaussian-process posterior of the target's standardised cost, with the ensemble as
        its prior mean: ``(mean, std)``, each shape (m,), in the target's standardised units.

        The prior mean is ``a + b * predict_z(x)``, ``a, b`` fitted by least squares to the
        target's observations (``b >= 0``; ``b = 1, a = 0`` with fewer than 3), so the sources'
        scale is put on the target's.  The residuals of the observations from it are
        interpolated by an RBF kernel ``v * exp(-d^2 / (2 l^2))`` on the scaled columns (each
        knob's range = 1), ``v`` the residuals' mean square; the length scale ``l`` and the noise
        variance come from ``LENGTH_SCALES`` x ``NOISES`` by the highest log marginal likelihood
        (``gp_``: a, b, length_scale, noise).  So a config next to measured
        ones is predicted near what was measured there, with a small std, and one far from every
        observation keeps the ensemble's prediction with the full std: an acquisition on it
        explores where the sources' promise is untested, where the ensemble mean alone keeps
        proposing the sources' favourite region after this device has refuted it."""
        X = np.asarray(X, np.float64).reshape(len(X), -1)
        m = self.predict_z(X)
        if self.n_targets_ == 0:
            return m, np.ones(len(X))
        g = self._gp()
        Ks = _rbf(X / self.scale_, g["A"], g["var0"], g["length_scale"])  # (m, n)
        mean = g["a"] + g["b"] * m + Ks @ g["alpha"]
        v = np.linalg.solve(g["L"], Ks.T)
        var = np.maximum(g["var0"] - (v ** 2).sum(0), 1e-12)
        return mean, np.sqrt(var)

    def _gp(self) -> dict:
        """The posterior's fitted pieces (see :meth:`posterior_z`), computed once per ``fit``."""
        if self._gp_cache is not None:
            return self._gp_cache
        n = self.n_targets_
        zt = (self.y_ - self.mean_) / self.std_
        mo = self.predict_z(self.X_)
        a, b = 0.0, 1.0
        if n >= 3 and np.std(mo) > 1e-12:
            b, a = (float(v) for v in np.polyfit(mo, zt, 1))
            if b < 0:
                b, a = 0.0, float(np.mean(zt))
        r = zt - (a + b * mo)
        A = self.X_ / self.scale_
        best = None
        for noise in self.NOISES:
            var0 = max(float(np.mean(r ** 2)), noise)
            for ls in self.LENGTH_SCALES:
                K = _rbf(A, A, var0, ls)
                K[np.diag_indices(n)] += noise
                L = np.linalg.cholesky(K)
                alpha = np.linalg.solve(L.T, np.linalg.solve(L, r))
                lml = -0.5 * float(r @ alpha) - float(np.log(np.diag(L)).sum())
                if best is None or lml > best[0]:
                    best = (lml, ls, noise, var0, L, alpha)
        _, ls, noise, var0, L, alpha = best
        self._gp_cache = {"a": a, "b": b, "length_scale": ls, "noise": noise, "var0": var0, "A": A, "L": L,
                          "alpha": alpha}
        return self._gp_cache

    @property
    def gp_(self) -> dict:
        """The posterior's calibration and kernel (see :meth:`posterior_z`): a, b, length_scale,
        noise; ``{}`` without target observations (the posterior is then the ensemble's)."""
        if self.n_targets_ == 0:
            return {}
        g = self._gp()
        return {k: g[k] for k in ("a", "b", "length_scale", "noise")}

    def expected_improvement(self, X: np.ndarray) -> np.ndarray:
        """Expected improvement below the best observation (standardised units, >= 0, larger =
        more promising) under :meth:`posterior_z`; with no observation, ``-predict_z`` (so the
        order is the ensemble's)."""
        if self.n_targets_ == 0:
            return -self.predict_z(np.asarray(X, np.float64).reshape(len(X), -1))
        mean, sd = self.posterior_z(X)
        best = float(np.min((self.y_ - self.mean_) / self.std_))
        u = (best - mean) / sd
        cdf = 0.5 * _ERFC(-u / math.sqrt(2.0)).astype(np.float64)  # the normal CDF (no SciPy import)
        pdf = np.exp(-0.5 * u ** 2) / np.sqrt(2.0 * np.pi)
        return (best - mean) * cdf + sd * pdf

    def predict_sources(self, X: np.ndarray) -> np.ndarray:
        """Each source's standardised prediction, shape (n_sources, m)."""
        X = np.asarray(X, np.float64).reshape(len(X), -1)
        if not self.source_models_:
            return np.zeros((0, len(X)))
        return np.vstack([(m.predict(X) - m.mean_) / m.std_ for m in self.source_models_])
