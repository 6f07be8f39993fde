"""The kernel family base class: what a family must provide (workloads, space, default config,
cost-model inputs, running).  Families subclass it; the registry is ``tunedb.transfer.kernels``."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tunedb.transfer.space import Space

#: largest accepted number of elements of any single array of a workload (guards memory)
MAX_ELEMENTS = 1 << 27


class KernelFamily:
    """Base class of a kernel family.  Subclasses set ``name``, ``kind``, ``dims`` and implement the hooks.

    ``dims`` maps each required integer workload key to its inclusive ``(lo, hi)`` range;
    ``options`` maps optional keys to ``(allowed values, default)``.
    """

    name: str = ""
    kind: str = "c"  # "c" or "numpy"
    dims: Mapping[str, tuple[int, int]] = {}
    options: Mapping[str, tuple[tuple, Any]] = {}
    doc: str = ""
    #: knobs whose good value scales with a hardware property of the target (knob -> target key);
    #: adaptation multiplies a neighbour's value by dst[key] / src[key] before snapping
    hardware_knobs: Mapping[str, str] = {}

    # ------------------------------------------------------------------ workloads
    def validate_workload(self, workload: Any) -> dict:
        """Return the normalised workload (family, every dim, every option) or raise ValueError saying why."""
        if not isinstance(workload, Mapping):
            raise ValueError(f"{self.name}: workload must be an object, got {type(workload).__name__}")
        fam = workload.get("family")
        if fam != self.name:
            raise ValueError(f"{self.name}: workload family is {fam!r}, expected {self.name!r}")
        known = set(self.dims) | set(self.options) | {"family"}
        unknown = sorted(set(workload) - known)
        if unknown:
            raise ValueError(f"{self.name}: unknown workload key(s) {unknown}; expected {sorted(known - {'family'})}")
        out: dict[str, Any] = {"family": self.name}
        for key, (lo, hi) in self.dims.items():
            if key not in workload:
                raise ValueError(f"{self.name}: workload needs integer {key} in [{lo}, {hi}]")
            v = workload[key]
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if type(v) is not int or not lo <= v <= hi:
                raise ValueError(f"{self.name}: workload {key}={v!r} must be an integer in [{lo}, {hi}]")
            out[key] = v
        for key, (allowed, default) in self.options.items():
            v = workload.get(key, default)
            if v not in allowed or type(v) is not type(default):
                raise ValueError(f"{self.name}: workload {key}={v!r} must be one of {list(allowed)}")
            out[key] = v
        self.check_shapes(out)
        for shape in self.shapes(out).values():
            if math.prod(shape) > MAX_ELEMENTS:
                raise ValueError(f"{self.name}: an array of shape {shape} is larger than {MAX_ELEMENTS} elements")
        return out

    def check_shapes(self, w: dict) -> None:
        """Extra shape rules between dims (raise ValueError); the default accepts everything."""

    def shapes(self, w: dict) -> dict[str, tuple[int, ...]]:
        """Shapes of the kernel's arrays (inputs and output) for a validated workload."""
        raise NotImplementedError

    # ------------------------------------------------------------------ space
    def space(self, workload: Any) -> Space:
        """The schedule space for ``workload`` (validated first)."""
        raise NotImplementedError

    def default_config(self, workload: Any, target: Mapping[str, Any] | None = None) -> dict:
        """A reasonable valid config for ``workload`` on ``target`` (a tuner's starting point).

        ``target`` is a target dict (``vector_bits``, ``threads``, ``l1d_kb``/``l2_kb``/``l3_kb``,
        ...; see ``tunedb.transfer.kernels.target_properties``); None means a portable default for
        the x86-64 baseline.  Built-in families derive vector widths, register tiles and cache blocks from it;
        the result always passes ``self.space(workload).validate``.  Call it through the module's
        ``family_default_config`` to also serve plug-in families whose method takes only the workload.
        """
        raise NotImplementedError

    def retarget(self, config: Mapping[str, Any], source_target: Mapping[str, Any],
                 dest_target: Mapping[str, Any]) -> list[dict]:
        """Candidates for running ``config`` (tuned on ``source_target``) on ``dest_target``, best first.

        Adaptation (``tunedb.transfer.search.adapt.adapt_many``) calls it for a family that
        overrides it, then maps each candidate into the destination's space without scaling the
        ``hardware_knobs`` (the family has set them for ``dest_target``) and adds the scaled
        source config as one more candidate when that differs.  An override returns
        ``[dict(config)]`` when nothing about the targets asks for another config, re-derived
        configs otherwise (hardware-tied knobs for the destination, the rest kept).  This
        default keeps the config: adaptation then only scales ``hardware_knobs`` as before.
        """
        return [dict(config)]

    # ------------------------------------------------------------------ cost model inputs
    def flops(self, workload: Any) -> float:
        """Floating-point operations of one run (multiply and add count as 2)."""
        raise NotImplementedError

    def bytes(self, workload: Any) -> float:
        """Compulsory memory traffic of one run in bytes (each input read once, the output written once)."""
        w = self.validate_workload(workload)
        return float(sum(4 * math.prod(s) for s in self.shapes(w).values()))

    # ------------------------------------------------------------------ running
    def make_inputs(self, w: dict, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic float32 inputs plus a zeroed output array named ``out``."""
        rng = np.random.default_rng(seed)
        arrays = {}
        for name, shape in self.shapes(w).items():
            if name == "out":
                arrays[name] = np.zeros(shape, np.float32)
            else:
                arrays[name] = rng.standard_normal(shape, dtype=np.float32)
        return arrays

    def reference(self, w: dict, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The correct output (computed in float64 with NumPy)."""
        raise NotImplementedError

    def tolerance(self, w: dict) -> tuple[float, float]:
        """``(rtol, atol)`` for comparing a float32 result against the float64 reference."""
        return 1e-4, 1e-4

    def numpy_baseline(self, w: dict, inputs: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        """NumPy's own float32 implementation of the workload (the speed yardstick)."""
        raise NotImplementedError

    def source(self, workload: Any, config: Mapping[str, Any]) -> str:
        """C source of ``kernel`` for a config already validated against ``space(workload)`` (C families)."""
        raise NotImplementedError

    def bind(self, w: dict, config: Mapping[str, Any], lib: Any, inputs: Mapping[str, np.ndarray]) -> Callable[[], None]:
        """A zero-argument callable doing one run that writes ``inputs['out']``.

        ``lib`` is the loaded ``ctypes.CDLL`` for C families, None for NumPy families.
        """
        raise NotImplementedError
