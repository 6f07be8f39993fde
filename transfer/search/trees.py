"""Regression-tree ensembles in numpy: LightGBM models evaluated without LightGBM, and the small
boosted correction a tuning run fits to a base model's residuals.

A tuning run needs the base cost model only to *predict*, and a few small trees fitted to its
own evaluations.  Importing LightGBM (which imports scikit-learn, SciPy and pandas when they are
installed) takes 1-2 s in a fresh process, more than the whole run's own work, so the run reads
the fitted model's text (``Booster.model_to_string()``, written by LightGBM's C library through
``tunedb.transfer.search.lgbm_capi``) into a :class:`TreeEnsemble` and fits its correction with
:func:`boost_residuals`.  The ``lightgbm`` Python package is never imported.

Contract of :meth:`TreeEnsemble.predict`: the same numbers as ``Booster.predict`` on float64 rows
(numerical splits with LightGBM's missing-value rules: ``None`` maps NaN to 0, ``Zero`` and ``NaN``
send such values the default way); categorical splits and linear trees are refused (ValueError).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_DEFAULT_LEFT = 2  # decision_type bit: missing values go left
_ZERO = 1e-35  # LightGBM's kZeroThreshold: |x| <= this is "zero"


@dataclass(frozen=True)
class TreeEnsemble:
    """Trees packed into flat node arrays (all trees' internal nodes, then all leaves).

    ``feature``/``threshold``/``left``/``right``/``default_left``/``missing`` are per internal
    node; a child >= 0 is an internal node index, < 0 is ``~leaf`` (an index into ``leaf``).
    ``roots``: per tree, its root as such a child index (a one-leaf tree's root is a leaf).
    Prediction = ``bias`` + the sum over trees of the leaf each row reaches."""

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    default_left: np.ndarray
    missing: np.ndarray  # 0 none, 1 zero, 2 NaN
    leaf: np.ndarray
    roots: np.ndarray
    bias: float = 0.0

    @property
    def n_trees(self) -> int:
        return len(self.roots)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The ensemble's output per row of ``X`` (n x features, any real dtype), float64."""
        X = np.asarray(X, np.float64)
        n = len(X)
        out = np.full(n, self.bias, np.float64)
        if n == 0 or not len(self.roots):
            return out
        trees = len(self.roots)
        node = np.tile(self.roots, n)
        base = np.repeat(np.arange(n) * X.shape[1], trees)
        flat = X.ravel()
        plain = not (self.missing == 1).any() and not np.isnan(flat).any()
        todo = np.flatnonzero(node >= 0)
        while todo.size:
            k = node[todo]
            x = flat[base[todo] + self.feature[k]]
            if plain:
                go_left = x <= self.threshold[k]
            else:
                miss = self.missing[k]
                nan = np.isnan(x)
                x = np.where(nan & (miss != 2), 0.0, x)
                default = ((miss == 1) & (np.abs(x) <= _ZERO)) | ((miss == 2) & nan)
                go_left = np.where(default, self.default_left[k], x <= self.threshold[k])
            nxt = np.where(go_left, self.left[k], self.right[k])
            node[todo] = nxt
            todo = todo[nxt >= 0]
        # summed tree by tree, in order, as LightGBM does (a cumulative sum is sequential): equal bits
        return out + np.cumsum(self.leaf[~node].reshape(n, trees), axis=1)[:, -1]

    @classmethod
    def from_lightgbm_text(cls, text: str) -> "TreeEnsemble":
        """The trees of a LightGBM model text (``Booster.model_to_string()``).  Raises ValueError
        for a model this evaluator does not cover (several classes, categorical or linear trees)."""
        blocks = text.split("\nTree=")[1:]
        if not blocks:
            raise ValueError("no trees in the LightGBM model text")
        header = dict(line.split("=", 1) for line in text.split("\nTree=")[0].splitlines() if "=" in line)
        if int(header.get("num_tree_per_iteration", "1")) != 1:
            raise ValueError("only single-output LightGBM models are supported")
        parts: dict[str, list] = {k: [] for k in ("feature", "threshold", "left", "right", "dt", "leaf", "roots")}
        n_internal = n_leaves = 0
        for block in blocks:
            body = block.split("\nend of trees")[0]
            f = dict(line.split("=", 1) for line in body.splitlines()[1:] if "=" in line)
            if int(f.get("num_cat", "0")) or int(f.get("is_linear", "0")):
                raise ValueError("categorical or linear LightGBM trees are not supported")
            leaves = np.array(f["leaf_value"].split(), np.float64)
            if int(f["num_leaves"]) == 1:
                parts["roots"].append(~n_leaves)
            else:
                left = np.array(f["left_child"].split(), np.int64)
                right = np.array(f["right_child"].split(), np.int64)
                parts["roots"].append(n_internal)
                parts["feature"].append(np.array(f["split_feature"].split(), np.int64))
                parts["threshold"].append(np.array(f["threshold"].split(), np.float64))
                parts["dt"].append(np.array(f["decision_type"].split(), np.int64))
                parts["left"].append(np.where(left >= 0, left + n_internal, ~(~left + n_leaves)))
                parts["right"].append(np.where(right >= 0, right + n_internal, ~(~right + n_leaves)))
                n_internal += len(left)
            parts["leaf"].append(leaves)
            n_leaves += len(leaves)
        dt = _cat(parts["dt"], np.int64)
        if (dt & 1).any():
            raise ValueError("categorical LightGBM splits are not supported")
        return cls(feature=_cat(parts["feature"], np.int64), threshold=_cat(parts["threshold"], np.float64),
                   left=_cat(parts["left"], np.int64), right=_cat(parts["right"], np.int64),
                   default_left=(dt & _DEFAULT_LEFT) > 0, missing=(dt >> 2) & 3,
                   leaf=_cat(parts["leaf"], np.float64), roots=np.array(parts["roots"], np.int64))


def _cat(arrays: list, dtype) -> np.ndarray:
    return np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype)


def boost_residuals(X: np.ndarray, residual: np.ndarray, *, weight: np.ndarray | None = None,
                    rounds: int = 30, learning_rate: float = 0.1, max_leaves: int = 7,
                    min_leaf: int = 3) -> TreeEnsemble:
    """Gradient boosting on squared error, starting from 0: ``rounds`` trees grown leaf-wise (the
    leaf whose best split gains most is split next) to at most ``max_leaves`` leaves of at least
    ``min_leaf`` rows, exact splits at midpoints between distinct values, leaf values shrunk by
    ``learning_rate``.  ``weight``: per-row weights (None = 1).  Deterministic; rows with
    non-finite residuals must not be passed.  Cost: O(rounds * leaves * n log n * features)."""
    X = np.asarray(X, np.float64)
    r = np.asarray(residual, np.float64).copy()
    w = np.ones(len(r)) if weight is None else np.asarray(weight, np.float64)
    feats, thrs, lefts, rights, leaves, roots = [], [], [], [], [], []
    n_int = n_leaf = 0
    for _ in range(rounds):
        tree_nodes: list[list] = []  # [feature, threshold, left, right] with local children
        tree_leaves: list[np.ndarray] = []  # row indices per leaf
        tree_leaves.append(np.arange(len(r)))
        parent_slot: list[tuple[int, int] | None] = [None]  # (node, 2 left / 3 right) per leaf
        best = [_best_split(X, r, w, tree_leaves[0], min_leaf)]
        while len(tree_leaves) < max_leaves:
            i = max(range(len(best)), key=lambda j: best[j][0])
            gain, f, thr = best[i]
            if gain <= 1e-12:
                break
            idx = tree_leaves[i]
            go = X[idx, f] <= thr
            node = len(tree_nodes)
            tree_nodes.append([f, thr, None, None])
            if parent_slot[i] is not None:
                p, side = parent_slot[i]
                tree_nodes[p][side] = node
            tree_leaves[i], parent_slot[i] = idx[go], (node, 2)
            tree_leaves.append(idx[~go])
            parent_slot.append((node, 3))
            best[i] = _best_split(X, r, w, tree_leaves[i], min_leaf)
            best.append(_best_split(X, r, w, tree_leaves[-1], min_leaf))
        values = np.array([learning_rate * float(np.dot(w[ix], r[ix]) / max(w[ix].sum(), 1e-12))
                           for ix in tree_leaves])
        for leaf_no, slot in enumerate(parent_slot):
            if slot is not None:
                tree_nodes[slot[0]][slot[1]] = ~(leaf_no + n_leaf)
        if tree_nodes:
            roots.append(n_int)
            for f, thr, lc, rc in tree_nodes:
                feats.append(f)
                thrs.append(thr)
                lefts.append(lc + n_int if lc >= 0 else lc)
                rights.append(rc + n_int if rc >= 0 else rc)
            n_int += len(tree_nodes)
        else:
            roots.append(~n_leaf)
        for leaf_no, ix in enumerate(tree_leaves):
            r[ix] -= values[leaf_no]
        leaves.append(values)
        n_leaf += len(values)
    k = len(feats)
    return TreeEnsemble(feature=np.array(feats, np.int64), threshold=np.array(thrs, np.float64),
                        left=np.array(lefts, np.int64), right=np.array(rights, np.int64),
                        default_left=np.zeros(k, bool), missing=np.full(k, 0, np.int64),
                        leaf=_cat(leaves, np.float64), roots=np.array(roots, np.int64))


def _best_split(X: np.ndarray, r: np.ndarray, w: np.ndarray, idx: np.ndarray, min_leaf: int
                ) -> tuple[float, int, float]:
    """(gain, feature, threshold) of the best split of rows ``idx``; gain 0 when none is allowed."""
    n = len(idx)
    if n < 2 * min_leaf:
        return 0.0, 0, 0.0
    x = X[idx]
    order = np.argsort(x, axis=0, kind="stable")
    xs = np.take_along_axis(x, order, axis=0)
    wr = (w[idx] * r[idx])[order]
    ww = w[idx][order]
    sl, wl = np.cumsum(wr, axis=0)[:-1], np.cumsum(ww, axis=0)[:-1]
    s, wt = wr.sum(axis=0), ww.sum(axis=0)
    sr, wrt = s - sl, wt - wl
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = sl ** 2 / wl + sr ** 2 / wrt - s ** 2 / wt
    pos = np.arange(1, n)[:, None]
    ok = (xs[1:] > xs[:-1]) & (pos >= min_leaf) & (n - pos >= min_leaf) & (wl > 0) & (wrt > 0)
    gain = np.where(ok, gain, -np.inf)
    flat = int(np.argmax(gain))
    at, f = divmod(flat, gain.shape[1])
    if not np.isfinite(gain[at, f]):
        return 0.0, 0, 0.0
    return float(gain[at, f]), int(f), float((xs[at, f] + xs[at + 1, f]) / 2)
