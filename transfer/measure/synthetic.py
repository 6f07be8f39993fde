"""Synthetic backend: known true costs plus injected measurement noise.

A measurement backend for evaluating the *statistics* of tuning (how often a tuner picks the
right config, how biased the cost it reports is, how often a comparison claims a win that is not
there) - like Kernel Tuner's simulation mode, but with noise whose size and shape you set, and
with the truth kept beside every measurement so the outcome can be scored.

Truth
    * a Kernel Tuner cache file (:meth:`SyntheticBackend.from_kernel_tuner`, or a
      :class:`~tunedb.transfer.measure.replay.ReplayData`): the recorded time of each config
      (Kernel Tuner's ``time``, the mean of its recorded runs; seconds) is its true cost; the
      file's failures keep their status (``runtime_error``, ``compile_error``) and a config
      the file lacks, or outside its space, is ``invalid`` - exactly as the replay backend;
    * or an analytic function of the config (:meth:`SyntheticBackend.from_function`):
      ``cost_fn(config) -> seconds``; ``None``, NaN, inf or a value <= 0 is a ``runtime_error``.

Noise (:class:`NoiseModel`), per call of :meth:`SyntheticBackend.measure` (one record)
    * a *machine-state factor* ``F``, lognormal with median 1 and coefficient of variation
      ``cv``, shared by all repeats of the record: noise on a shared machine is correlated in
      time, so the repeats of one measurement agree with each other far better than two
      measurements taken at different moments do;
    * with probability ``outlier_p`` the whole record is multiplied by ``outlier_factor``
      (another process took the machine for the whole measurement);
    * each repeat gets its own small jitter, lognormal with median 1 and CV ``repeat_cv``
      (default ``cv / 4``).

    So repeat ``i`` is ``true * F * O * J_i`` (``O`` = ``outlier_factor`` or 1).  The factors'
    median is 1: the true cost is what the config typically measures at, the median of its
    noise-free distribution; the *mean* of noisy measurements lies above it
    (by ``exp(sigma^2 / 2)``, +1 % at CV 20 %, +11 % at CV 50 %).  The draws are deterministic:
    the same seed and the same sequence of ``measure`` calls give the same costs
    (:meth:`SyntheticBackend.reset` starts the sequence again).

Records
    ``source="replay"`` (nothing ran), ``meta["backend"] = "synthetic"``, and for scoring
    ``meta["true_s"]`` (the true cost in seconds; None for a failed config),
    ``meta["noise_factor"]`` (``F * O``), ``meta["outlier"]`` (bool), ``meta["noise_cv"]`` and
    ``meta["truth"]`` (the cache file's name, or the function's name).  ``repeats`` (default 5)
    costs per record.  ``name`` is ``"synthetic"``, not ``"replay"``: a re-measurement gives a
    new noisy answer, so the Tuner's confirmation of its leaders (``TuneOptions.confirm_top``)
    runs, as on a real machine.

    from tunedb.transfer.measure.synthetic import NoiseModel, SyntheticBackend
    be = SyntheticBackend.from_kernel_tuner("A100.json.gz", NoiseModel(cv=0.2, seed=1))
    Tuner(tunedb.open("memory:"), be.target, be.workload, be.space(), be, TuneOptions(budget=30)).run()
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tunedb.index.model.keys import canonical_json
from tunedb.index.model.record import Record
from tunedb.transfer.measure.backend import MeasureBackend

if TYPE_CHECKING:
    from tunedb.transfer.measure.replay import ReplayData
    from tunedb.transfer.space import Space


def lognormal_sigma(cv: float) -> float:
    """The log-space standard deviation of a lognormal variable with coefficient of variation ``cv``."""
    return math.sqrt(math.log1p(cv * cv)) if cv > 0 else 0.0


@dataclass(frozen=True)
class NoiseModel:
    """Injected measurement noise (module docstring): per record a lognormal machine-state
    factor of CV ``cv`` shared by its repeats, with probability ``outlier_p`` the record times
    ``outlier_factor``, per repeat a jitter of CV ``repeat_cv`` (None: ``cv / 4``).  ``seed``
    makes the draws reproducible."""

    cv: float = 0.0
    outlier_p: float = 0.0
    outlier_factor: float = 3.0
    repeat_cv: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.cv >= 0 and math.isfinite(self.cv)):
            raise ValueError(f"cv must be a finite number >= 0, got {self.cv!r}")
        if not 0.0 <= self.outlier_p <= 1.0:
            raise ValueError(f"outlier_p must be in [0, 1], got {self.outlier_p!r}")
        if not self.outlier_factor > 0:
            raise ValueError(f"outlier_factor must be > 0, got {self.outlier_factor!r}")
        if self.repeat_cv is not None and not self.repeat_cv >= 0:
            raise ValueError(f"repeat_cv must be >= 0, got {self.repeat_cv!r}")

    @property
    def per_repeat_cv(self) -> float:
        """The CV of the jitter of each repeat (``repeat_cv``, default ``cv / 4``)."""
        return self.cv / 4.0 if self.repeat_cv is None else float(self.repeat_cv)

    def to_dict(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        """``cv 20 %`` / ``cv 20 % + 3x outliers p=0.05``."""
        s = f"cv {self.cv * 100:g} %"
        if self.outlier_p > 0:
            s += f" + {self.outlier_factor:g}x outliers p={self.outlier_p:g}"
        return s


class SyntheticBackend(MeasureBackend):
    """Measurements of known true costs with injected noise (module docstring).

    ``truth``: a :class:`~tunedb.transfer.measure.replay.ReplayData` (a Kernel Tuner cache) or a
    function ``config -> seconds``.  ``space``, ``target`` and ``workload`` default to the cache's
    (a function needs ``space`` for :meth:`space`; its target and workload default to a
    ``synthetic`` device and family).  ``repeats``: costs per record."""

    name = "synthetic"

    def __init__(self, truth: ReplayData | Callable[[dict], float | None], noise: NoiseModel | None = None, *,
                 repeats: int = 5, space: Space | None = None, target: Mapping[str, Any] | None = None,
                 workload: Mapping[str, Any] | None = None) -> None:
        from tunedb.transfer.measure.replay import ReplayData

        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        self.noise = noise or NoiseModel()
        self.repeats = int(repeats)
        self.data: ReplayData | None = truth if isinstance(truth, ReplayData) else None
        self.cost_fn: Callable[[dict], float | None] | None = None if self.data is not None else truth
        if self.data is None and not callable(truth):
            raise ValueError("truth must be a ReplayData (a Kernel Tuner cache) or a function config -> seconds")
        if self.data is not None:
            self.truth_name = self.data.path.name
            self._space = space or self.data.space
            self.target = dict(target or self.data.target)
            self.workload = dict(workload or self.data.workload)
        else:
            self.truth_name = getattr(truth, "__name__", "function")
            self._space = space
            self.target = dict(target or {"kind": "gpu", "name": "synthetic-device"})
            self.workload = dict(workload or {"family": "synthetic", "function": self.truth_name})
        self.calls = 0
        self.reset()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_kernel_tuner(cls, path: str | Path, noise: NoiseModel | None = None, *, repeats: int = 5,
                          device: str | None = None) -> SyntheticBackend:
        """True costs from a Kernel Tuner cache file (``.json`` / ``.json.gz``); ``device`` names
        the device when the file does not."""
        from tunedb.transfer.measure.replay import ReplayData

        return cls(ReplayData(path, device=device), noise, repeats=repeats)

    @classmethod
    def from_function(cls, cost_fn: Callable[[dict], float | None], space: Space, noise: NoiseModel | None = None,
                      *, repeats: int = 5, target: Mapping[str, Any] | None = None,
                      workload: Mapping[str, Any] | None = None) -> SyntheticBackend:
        """True costs from ``cost_fn(config) -> seconds`` over ``space``."""
        return cls(cost_fn, noise, repeats=repeats, space=space, target=target, workload=workload)

    def reset(self, seed: int | None = None) -> None:
        """Start the noise sequence again (from ``seed``, default the noise model's)."""
        self._rng = np.random.default_rng(self.noise.seed if seed is None else seed)
        self.calls = 0

    # ------------------------------------------------------------------ truth
    def space(self, workload: Mapping[str, Any] | None = None) -> Space:
        if self._space is None:
            raise ValueError("this synthetic backend was given no space")
        return self._space

    def _truth(self, config: Mapping[str, Any]) -> tuple[str, float | None, Record | None]:
        """(status, true seconds or None, the cache's record or None) of ``config``."""
        cfg = dict(config)
        if self._space is not None and not self._space.is_valid(cfg):
            rec = self.data.results.get(canonical_json(cfg)) if self.data is not None else None
            status = rec.status if rec is not None and rec.status != "ok" else "invalid"
            return status, None, rec
        if self.data is not None:
            rec = self.data.results.get(canonical_json(cfg))
            if rec is None:
                return "invalid", None, None
            if rec.status != "ok" or rec.cost is None:
                return rec.status if rec.status != "ok" else "runtime_error", None, rec
            return "ok", float(rec.cost), rec
        try:
            v = self.cost_fn(cfg)  # type: ignore[misc]
        except Exception:  # an analytic model that cannot cost a config: that config fails
            return "runtime_error", None, None
        if v is None or not math.isfinite(float(v)) or float(v) <= 0:
            return "runtime_error", None, None
        return "ok", float(v), None

    def true_cost(self, config: Mapping[str, Any]) -> float | None:
        """The true cost of ``config`` in seconds (None when it fails or is not in the space)."""
        return self._truth(config)[1]

    def true_costs(self) -> dict[str, tuple[dict, float]]:
        """config JSON -> (config, true seconds) of every ok config (of the cache, or of the
        space: its finite list, or every valid config when it has at most a million raw ones)."""
        if self.data is not None:
            return {k: (dict(r.config), float(r.cost)) for k, r in self.data.results.items()
                    if r.status == "ok" and r.cost is not None and self._truth(r.config)[0] == "ok"}
        space = self.space()
        if space.finite is None and space.raw_size > 1_000_000:
            raise ValueError("true_costs needs a Kernel Tuner cache or a space of at most a million configs")
        out = {}
        for c in space:
            v = self.true_cost(c)
            if v is not None:
                out[canonical_json(dict(c))] = (dict(c), v)
        return out

    def optimum(self) -> tuple[dict, float]:
        """(config, true seconds) of the fastest ok config."""
        cfg, v = min(self.true_costs().values(), key=lambda cv: (cv[1], canonical_json(cv[0])))
        return cfg, v

    # ------------------------------------------------------------------ measuring
    def draw(self, true_s: float) -> tuple[list[float], float, bool]:
        """One noisy measurement of a config of true cost ``true_s``: (repeats' costs, the
        record's factor ``F * O``, whether it is an outlier).  Advances the noise sequence."""
        nm = self.noise
        f = float(np.exp(self._rng.normal(0.0, lognormal_sigma(nm.cv)))) if nm.cv > 0 else 1.0
        outlier = bool(nm.outlier_p > 0 and self._rng.random() < nm.outlier_p)
        if outlier:
            f *= nm.outlier_factor
        rs = lognormal_sigma(nm.per_repeat_cv)
        jit = np.exp(self._rng.normal(0.0, rs, self.repeats)) if rs > 0 else np.ones(self.repeats)
        return [float(true_s * f * j) for j in jit], f, outlier

    def measure(self, target: Mapping[str, Any], workload: Mapping[str, Any], config: Mapping[str, Any]) -> Record:
        """One record of ``config``: the truth with this call's noise (module docstring)."""
        t0 = time.perf_counter()
        self.calls += 1
        status, true_s, src = self._truth(config)
        meta: dict[str, Any] = {"backend": self.name, "truth": self.truth_name, "true_s": true_s,
                                "noise_cv": self.noise.cv}
        if status != "ok" or true_s is None:
            error = (src.error if src is not None and src.error else
                     "config is not in the synthetic data set" if status == "invalid" else
                     "the true-cost function gives this config no cost")
            return Record(target, workload, dict(config), [], status=status, error=error, source="replay",
                          wall_s=time.perf_counter() - t0, meta=meta)
        costs, factor, outlier = self.draw(true_s)
        meta.update(noise_factor=factor, outlier=outlier)
        return Record(target, workload, dict(config), costs, status="ok",
                      compile_s=None if src is None else src.compile_s, wall_s=time.perf_counter() - t0,
                      source="replay", meta=meta)


__all__ = ["NoiseModel", "SyntheticBackend", "lognormal_sigma"]
