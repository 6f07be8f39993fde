"""The RGPE-style transfer surrogate (tunedb.transfer.search.rgpe)."""

from __future__ import annotations

import numpy as np
import pytest

from tunedb.transfer.measure.replay import ReplayData
from tunedb.transfer.search.costmodel import spearman
from tunedb.transfer.search.rgpe import RGPESurrogate, SourceModel, bootstrap_ranking_losses, ranking_loss

from helpers import kernel_tuner_file


def _synthetic(n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 8, size=(n, 3)).astype(float)
    X = np.unique(X, axis=0)
    y = np.log(1e-3 * (1 + (X[:, 0] - 3) ** 2 + 0.5 * (X[:, 1] - 5) ** 2 + 0.2 * X[:, 2]))
    return X, y


def test_ranking_loss_counts_misranked_pairs():
    y = np.array([1.0, 2.0, 3.0])
    assert ranking_loss(y, y) == 0
    assert ranking_loss(-y, y) == 6  # every ordered pair misranked
    assert ranking_loss(np.array([1.0, 3.0, 2.0]), y) == 2


def test_bootstrap_losses_are_the_ranking_losses_of_each_sample_with_its_duplicates():
    rng = np.random.default_rng(3)
    for n in (2, 7, 60):
        pred = rng.integers(0, 4, size=(3, n)).astype(float)  # ties on purpose
        y = rng.integers(0, 5, size=n).astype(float)
        idx = rng.integers(0, n, size=(16, n))
        got = bootstrap_ranking_losses(pred, y, idx)
        want = [[ranking_loss(p[b], y[b]) for b in idx] for p in pred]
        assert got.tolist() == want


def test_a_long_run_is_fitted_on_its_fastest_half_and_its_latest_rows():
    rng = np.random.default_rng(4)
    y = rng.normal(size=1000)
    keep = RGPESurrogate.target_rows(y, 128)
    assert len(keep) == 128 and np.all(np.diff(keep) > 0)
    assert set(np.argsort(y)[:64]) <= set(keep.tolist())
    rest = [i for i in range(1000) if i not in set(np.argsort(y)[:64].tolist())]
    assert set(rest[-64:]) <= set(keep.tolist())
    assert RGPESurrogate.target_rows(y[:100], 128).tolist() == list(range(100))
    X = rng.integers(0, 8, size=(1000, 3)).astype(float)
    sur = RGPESurrogate(random_state=0).fit(X, y, [(X, y), (X, -y)])
    assert sur.n_targets_ == 128
    assert float(np.min(sur.y_)) == float(np.min(y))  # the best observation stays in the fit
    assert sur.weights_[0] > sur.weights_[1]
    with pytest.raises(ValueError):
        RGPESurrogate(max_target_rows=1)


def test_weights_go_to_the_monotone_source_and_not_to_the_anti_correlated_one():
    X, y = _synthetic()
    rng = np.random.default_rng(1)
    obs = rng.choice(len(X), 12, replace=False)
    sources = [(X, 2.0 * y + 1.0), (X, -y)]   # a monotone transform, an anti-correlated one
    sur = RGPESurrogate(random_state=0).fit(X[obs], y[obs], sources)
    assert sur.weights_.shape == (3,) and sur.weights_.sum() == pytest.approx(1.0)
    assert sur.weights_[0] > 0.9
    assert sur.weights_[1] < 0.02
    # order of the sources does not matter
    rev = RGPESurrogate(random_state=0).fit(X[obs], y[obs], sources[::-1])
    assert rev.weights_[1] > 0.9 and rev.weights_[0] < 0.02


def test_predictions_are_target_log_seconds_of_the_right_shape():
    X, y = _synthetic()
    obs = np.random.default_rng(2).choice(len(X), 15, replace=False)
    sur = RGPESurrogate(random_state=0).fit(X[obs], y[obs], [(X, 3.0 * y - 2.0), (X, -y)])
    pred = sur.predict(X[:50])
    assert pred.shape == (50,) and np.all(np.isfinite(pred))
    assert spearman(pred, y[:50]) > 0.99
    # in the target's scale (log seconds), not the source's (3y - 2)
    assert np.median(np.abs(pred - y[:50])) < 0.35 * np.std(y)
    assert sur.predict_sources(X[:7]).shape == (2, 7)


def test_deterministic_for_a_random_state_and_without_target_data():
    X, y = _synthetic()
    noisy = y + np.random.default_rng(3).normal(0, 0.5, len(y))
    obs = np.arange(0, 40, 4)
    a = RGPESurrogate(random_state=7).fit(X[obs], y[obs], [(X, noisy), (X, y[::-1])])
    b = RGPESurrogate(random_state=7).fit(X[obs], y[obs], [(X, noisy), (X, y[::-1])])
    assert np.array_equal(a.weights_, b.weights_) and np.array_equal(a.predict(X), b.predict(X))
    empty = RGPESurrogate().fit(np.zeros((0, 3)), np.zeros(0), [(X, y), (X, noisy)])
    assert empty.weights_.tolist() == [0.5, 0.5, 0.0]  # nothing to rank: the sources alike
    assert empty.predict(X[:4]).shape == (4,)


def test_target_model_takes_over_when_no_source_ranks_the_target():
    X, y = _synthetic()
    obs = np.random.default_rng(4).choice(len(X), 30, replace=False)
    sur = RGPESurrogate(random_state=0).fit(X[obs], y[obs], [(X, -y), (X, np.zeros(len(y)))])
    assert sur.weights_[-1] > 0.9


def test_posterior_predicts_what_was_measured_next_to_it_and_is_unsure_far_away():
    X, y = _synthetic()
    # the sources' favourite region (their 30 fastest configs) is slow on this target
    region = np.zeros(len(X), bool)
    region[np.argsort(y)[:30]] = True
    target = np.where(region, y.max(), y)
    rng = np.random.default_rng(5)
    obs = np.concatenate([rng.choice(np.flatnonzero(region), 6, replace=False),
                          rng.choice(np.flatnonzero(~region), 3, replace=False)])
    sur = RGPESurrogate(random_state=0).fit(X[obs], target[obs], [(X, y), (X, y + 0.01)])
    mean, sd = sur.posterior_z(X)
    zt = (target - sur.mean_) / sur.std_
    # at the observations: about what was measured, with a small std
    assert np.max(np.abs(mean[obs] - zt[obs])) < 0.5 and np.all(sd[obs] < 0.35)
    # far from every observation the std is the prior's, larger than anywhere near one
    assert np.max(sd) > 2.5 * np.max(sd[obs])
    ei = sur.expected_improvement(X)
    assert ei.shape == (len(X),) and np.all(ei >= 0)
    # the ensemble mean proposes more of the refuted region; EI proposes outside it
    untried = np.setdiff1d(np.arange(len(X)), obs)
    assert region[untried[np.argmin(sur.predict(X[untried]))]]
    assert not region[untried[np.argmax(ei[untried])]]
    assert region[untried[np.argsort(-ei[untried])[:10]]].sum() <= 2


def test_expected_improvement_without_target_data_follows_the_ensemble():
    X, y = _synthetic()
    sur = RGPESurrogate().fit(np.zeros((0, 3)), np.zeros(0), [(X, y), (X, y)])
    ei = sur.expected_improvement(X[:20])
    assert np.array_equal(np.argsort(-ei), np.argsort(sur.predict_z(X[:20])))


def test_source_model_looks_up_what_it_holds_and_interpolates_the_rest():
    X, y = _synthetic()
    y = y.copy()
    y[3] = np.inf  # failed there: the source's slowest plus the margin
    m = SourceModel(fail_margin=1.0).fit(X[1:], y[1:])
    assert m.predict(X[5:6])[0] == y[5]
    assert m.predict(X[3:4])[0] == pytest.approx(np.max(y[np.isfinite(y)]) + 1.0)
    near = m.predict(X[:1])[0]   # not held: a mean of neighbours, between the source's extremes
    assert np.min(y[1:][np.isfinite(y[1:])]) <= near <= np.max(y[np.isfinite(y)])


def _log_costs(d: ReplayData, keys: list[str]) -> np.ndarray:
    return np.log([d.results[k].cost for k in keys])


def test_on_real_devices_the_similar_gpu_outweighs_its_own_mirror_image():
    """Held-out A4000 (convolution): A6000 (same architecture) ranks it well, the A6000's
    times negated rank it backwards; ten A4000 measurements make the surrogate believe the
    first and not the second."""
    held = ReplayData(kernel_tuner_file("A4000"))
    src = ReplayData(kernel_tuner_file("A6000"))
    names = held.space.names
    keys = [k for k, r in held.results.items() if r.status == "ok" and r.cost
            and k in src.results and src.results[k].status == "ok" and src.results[k].cost]
    codes = [{repr(v): i for i, v in enumerate(k.values)} for k in held.space.knobs]
    X = np.array([[codes[j][repr(held.results[k].config[n])] for j, n in enumerate(names)] for k in keys], float)
    ys = _log_costs(src, keys)
    yt = _log_costs(held, keys)
    obs = np.random.default_rng(0).choice(len(keys), 10, replace=False)
    sur = RGPESurrogate(random_state=0).fit(X[obs], yt[obs], [(X, ys), (X, -ys)])
    assert sur.weights_[0] > 0.9 and sur.weights_[1] < 0.02
    # the ensemble ranks the whole device about as well as the A6000 itself does
    assert spearman(sur.predict(X), yt) > 0.8
