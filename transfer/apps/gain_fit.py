"""The fit of the database's gain against its size: ``G(n) = G_max * (1 - exp(-beta * n))``.

``G`` is a tuning run's gain (the fraction of its tuning time the database saved,
``1 - (measure_s + query_s) / t_full_s``) and ``n`` the records in the database when the run
started.  :func:`fit_saturation` fits :func:`gain_model` by least squares (bounded
``0 <= G_max <= 1``, ``beta > 0`` per record); :func:`saturation` is the fit to show, or why there
is none (too few points, :func:`saturation_fit_reason`; a fit that does not determine its
parameters, :func:`fit_problem`).  ``tunedb report`` and ``tunedb dashboard`` show the same fit.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tunedb.transfer.apps.rundata import as_number

MIN_FIT_POINTS = 3
#: G <= 1 by definition (the DB cannot save more than all of the tuning time)
G_MAX_BOUNDS = (0.0, 1.0)
#: G_max within this of its upper bound counts as "at the bound"
AT_BOUND = 1e-3
#: at the bound, a standard error of G_max above this says the points do not show the level
AT_BOUND_MAX_SE = 0.2


def gain_model(n: Any, g_max: float, beta: float) -> np.ndarray:
    """``G(n) = g_max * (1 - exp(-beta * n))`` (``n`` records, ``beta`` per record)."""
    return g_max * -np.expm1(-beta * np.asarray(n, dtype=np.float64))


def _fit_pairs(n: Iterable[Any], g: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The (n, G) pairs with a finite n >= 0 and a finite G, as float arrays."""
    pairs = [(a, b) for a, b in ((as_number(x), as_number(y)) for x, y in zip(n, g)) if a is not None and a >= 0
             and b is not None]
    return (np.array([a for a, _ in pairs], np.float64), np.array([b for _, b in pairs], np.float64))


def saturation_fit_reason(n: Iterable[Any], g: Iterable[Any]) -> str | None:
    """Why :func:`fit_saturation` cannot fit these points (one line), or None when it can try:
    it needs at least MIN_FIT_POINTS points (finite n >= 0, finite G) with distinct n, and a run
    with G > 0 (G_max is bounded below by 0: points all below it would fit G_max = 0, a level
    that says nothing)."""
    x, y = _fit_pairs(n, g)
    distinct = len(set(x.tolist()))
    if len(x) < MIN_FIT_POINTS:
        return (f"{len(x)} run(s) with a gain and records_before; the fit of G(n) (the gain against the records before the run) needs at least "
                f"{MIN_FIT_POINTS} with distinct n")
    if distinct < MIN_FIT_POINTS:
        return (f"the {len(x)} runs with a gain started with only {distinct} distinct number(s) of records "
                f"in the database (n); the fit of G(n) (the gain against the records before the run) needs at least {MIN_FIT_POINTS}")
    if not np.any(y > 0):
        return (f"no run gained time from the database (G <= 0 in all {len(x)}: its queries cost more than its "
                "answers saved), so there is no saturation level to fit")
    return None


def fit_problem(fit: Mapping[str, Any]) -> str | None:
    """Why a :func:`fit_saturation` result says nothing (one line), or None when it is a fit to
    show: a standard error that is not finite, or larger than its parameter (G_max = 1.5 ± 33
    is no estimate of G_max), or G_max at its upper bound (1: G can never exceed it) with a
    standard error above AT_BOUND_MAX_SE (the points do not show where G levels off)."""
    g, g_se, b, b_se = fit["g_max"], fit["g_max_se"], fit["beta"], fit["beta_se"]
    if g_se is None or b_se is None:
        return (f"the fit over {fit['points']} runs has no finite standard error (G_max = {g:.3g}, "
                f"beta = {b:.3g} per record): the points do not determine it")
    if g >= G_MAX_BOUNDS[1] - AT_BOUND and g_se > AT_BOUND_MAX_SE:
        return (f"the fit over {fit['points']} runs put G_max at its bound {G_MAX_BOUNDS[1]:g} (G <= 1 by "
                f"definition) with a standard error of {g_se:.2g}: the points do not show where G levels off")
    if g_se > g:
        return (f"the fit over {fit['points']} runs gives G_max = {g:.3g} with a standard error of {g_se:.2g}, "
                "larger than the value: the points do not determine G_max")
    if b_se > b:
        return (f"the fit over {fit['points']} runs gives beta = {b:.3g} per record with a standard error of "
                f"{b_se:.2g}, larger than the value: the points do not show how fast G saturates")
    return None


def saturation(n: Iterable[Any], g: Iterable[Any]) -> tuple[dict | None, str | None]:
    """The fit of G(n) to show: (:func:`fit_saturation`'s dict, None), or (None, why there is
    no fit: one line) when the points cannot be fitted (:func:`saturation_fit_reason`), the fit
    fails, or it is not meaningful (:func:`fit_problem`).  What both the report and the
    dashboard show."""
    reason = saturation_fit_reason(n, g)
    fit = None if reason else fit_saturation(n, g)
    if fit is None and reason is None:
        reason = "scipy's curve_fit found no finite fit of G(n) (the gain against the records before the run) to these points"
    if fit is not None:
        reason = fit_problem(fit)
        if reason is not None:
            fit = None
    return fit, reason


def fit_saturation(n: Iterable[Any], g: Iterable[Any]) -> dict | None:
    """Least-squares fit of ``G(n) = G_max * (1 - exp(-beta * n))`` (:func:`gain_model`) to the
    points (``n``: records in the DB before each run; ``g``: each run's gain, a fraction) with
    ``scipy.optimize.curve_fit``, bounded ``G_max`` in G_MAX_BOUNDS (0..1: G <= 1 by definition)
    and ``beta > 0``; initial
    guesses: ``G_max`` = the largest G, ``beta`` = 1 / the smallest n whose G reaches 63% of it.

    Returns ``{"g_max", "beta" (per record), "g_max_se", "beta_se" (standard errors from the
    covariance; None when it is not finite), "points", "rmse" (of G)}``, or None when
    :func:`saturation_fit_reason` gives a reason or the fit fails (does not converge, or gives
    no finite estimate).  Points with a non-finite value or n < 0 are left out.  Whether the fit
    means anything is :func:`fit_problem`'s question (:func:`saturation` asks it)."""
    if saturation_fit_reason(n, g) is not None:
        return None
    from scipy.optimize import OptimizeWarning, curve_fit

    x, y = _fit_pairs(n, g)
    scale = float(x.max())      # fit beta * scale on n / scale (well conditioned), then scale back
    xs = x / scale
    g0 = float(np.clip(y.max(), 1e-3, G_MAX_BOUNDS[1] - 1e-6))
    order = np.argsort(xs)
    reached = [float(v) for v in xs[order][y[order] >= 0.632 * g0] if v > 0]
    b0 = float(np.clip(1.0 / (reached[0] if reached else float(np.median(xs[xs > 0]))), 1e-3, 1e3))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            popt, pcov = curve_fit(gain_model, xs, y, p0=[g0, b0],
                                   bounds=([G_MAX_BOUNDS[0], 1e-9], [G_MAX_BOUNDS[1], np.inf]), maxfev=20_000)
    except (RuntimeError, ValueError):
        return None
    if not np.all(np.isfinite(popt)):
        return None
    se = np.sqrt(np.abs(np.diag(pcov))) if np.shape(pcov) == (2, 2) else np.full(2, np.inf)

    def finite(v: float) -> float | None:
        return float(v) if math.isfinite(v) else None

    resid = y - gain_model(xs, *popt)
    return {"g_max": float(popt[0]), "beta": float(popt[1]) / scale, "g_max_se": finite(se[0]),
            "beta_se": finite(se[1] / scale), "points": int(len(x)), "rmse": float(np.sqrt(np.mean(resid ** 2)))}

