"""``softmax``: float32 row softmax y[i, :] = exp(x[i, :] - max) / sum(exp(x[i, :] - max)) in C.

Workload: M rows of N columns.  Schedule: ``online`` = 0 is three passes over a row (max; exp and
sum; scale), ``online`` = 1 finds max and sum in one pass with running rescaling, then writes
exp(x - max) / sum (exp computed twice, one pass less over memory); ``vec`` is the GCC vector width
in floats and ``accs`` the number of independent accumulator vectors (instruction-level parallelism);
``fast_exp`` = 1 uses a vectorised polynomial exp (relative error ~2e-7) instead of libm ``expf``;
``rows`` rows form one OpenMP work unit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tunedb.transfer.kernels.base import KernelFamily
from tunedb.transfer.kernels.target_properties import snap_down, threads, vector_floats, vector_registers
from tunedb.transfer.kernels.templating import render_template
from tunedb.transfer.space import Knob, Space

TEMPLATE = r"""
/* tunedb softmax kernel: generated from transfer/kernels/softmax.py; integers only */
#include <math.h>
#include <string.h>
#include <stdint.h>
#define VEC @VEC@
#define ACCS @ACCS@
#define FAST @FAST@
#define ONLINE @ONLINE@
#define ROWS @ROWS@
#define STEP (VEC * ACCS)
typedef float vf __attribute__((vector_size(VEC * 4)));
typedef int32_t vi __attribute__((vector_size(VEC * 4)));
static inline vf vload(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf vsplat(float a) { return (vf){0} + a; }
/* lane-wise select: m lanes are all-ones (take a) or zero (take b) */
static inline vf vsel(vi m, vf a, vf b) {
    vi ai, bi;
    memcpy(&ai, &a, sizeof ai);
    memcpy(&bi, &b, sizeof bi);
    vi r = (ai & m) | (bi & ~m);
    vf out;
    memcpy(&out, &r, sizeof out);
    return out;
}
static inline vf vmax(vf a, vf b) { return vsel(a > b, a, b); }
static inline vf vmin(vf a, vf b) { return vsel(a < b, a, b); }

static inline vf vexp(vf x) {
#if FAST
    /* exp(x) = 2^n * exp(r), r = x - n ln2 in [-ln2/2, ln2/2]; degree-6 Taylor/Horner for exp(r) */
    x = vmax(x, vsplat(-87.0f));
    x = vmin(x, vsplat(88.0f));
    /* round-to-nearest through the 1.5 * 2^23 trick (|n| <= 127) */
    vf nf = (x * vsplat(1.44269504088896341f) + vsplat(12582912.0f)) - vsplat(12582912.0f);
    vi ni = __builtin_convertvector(nf, vi);
    vf r = x - nf * vsplat(0.693359375f) + nf * vsplat(2.12194440e-4f);
    vf p = vsplat(1.0f / 720);
    p = p * r + vsplat(1.0f / 120);
    p = p * r + vsplat(1.0f / 24);
    p = p * r + vsplat(1.0f / 6);
    p = p * r + vsplat(0.5f);
    p = p * r + vsplat(1.0f);
    p = p * r + vsplat(1.0f);
    vi bits = (ni + 127) << 23;
    vf scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
#else
    vf out;
    for (int i = 0; i < VEC; i++) out[i] = expf(x[i]);
    return out;
#endif
}

static inline float sexp(float x) {
#if FAST
    vf v = vexp(vsplat(x));
    return v[0];
#else
    return expf(x);
#endif
}

static inline float hmax(vf v) { float m = v[0]; for (int i = 1; i < VEC; i++) m = m > v[i] ? m : v[i]; return m; }
static inline float hsum(vf v) { float s = 0.f; for (int i = 0; i < VEC; i++) s += v[i]; return s; }

static void row(const float *restrict x, float *restrict y, int N) {
    int nv = N / STEP * STEP;
    float m = -INFINITY, s = 0.f;
#if ONLINE
    vf vm[ACCS], vs[ACCS];
    for (int a = 0; a < ACCS; a++) { vm[a] = vsplat(-INFINITY); vs[a] = vsplat(0.f); }
    for (int j = 0; j < nv; j += STEP) {
        #pragma GCC unroll 16
        for (int a = 0; a < ACCS; a++) {
            vf v = vload(x + j + a * VEC);
            vf nm = vmax(vm[a], v);
            vs[a] = vs[a] * vexp(vm[a] - nm) + vexp(v - nm);
            vm[a] = nm;
        }
    }
    for (int a = 0; a < ACCS; a++) m = m > hmax(vm[a]) ? m : hmax(vm[a]);
    for (int j = nv; j < N; j++) m = m > x[j] ? m : x[j];
    for (int a = 0; a < ACCS; a++) {
        if (nv == 0) break;
        vf f = vexp(vm[a] - vsplat(m));
        s += hsum(vs[a] * f);
    }
    for (int j = nv; j < N; j++) s += sexp(x[j] - m);
    float inv = 1.0f / s;
    for (int j = 0; j < nv; j += STEP) {
        #pragma GCC unroll 16
        for (int a = 0; a < ACCS; a++) vstore(y + j + a * VEC, vexp(vload(x + j + a * VEC) - vsplat(m)) * vsplat(inv));
    }
    for (int j = nv; j < N; j++) y[j] = sexp(x[j] - m) * inv;
#else
    vf vm[ACCS], vs[ACCS];
    for (int a = 0; a < ACCS; a++) { vm[a] = vsplat(-INFINITY); vs[a] = vsplat(0.f); }
    for (int j = 0; j < nv; j += STEP) {
        #pragma GCC unroll 16
        for (int a = 0; a < ACCS; a++) vm[a] = vmax(vm[a], vload(x + j + a * VEC));
    }
    for (int a = 0; a < ACCS; a++) m = m > hmax(vm[a]) ? m : hmax(vm[a]);
    for (int j = nv; j < N; j++) m = m > x[j] ? m : x[j];
    vf vmm = vsplat(m);
    for (int j = 0; j < nv; j += STEP) {
        #pragma GCC unroll 16
        for (int a = 0; a < ACCS; a++) {
            vf e = vexp(vload(x + j + a * VEC) - vmm);
            vstore(y + j + a * VEC, e);
            vs[a] += e;
        }
    }
    for (int a = 0; a < ACCS; a++) s += hsum(vs[a]);
    for (int j = nv; j < N; j++) { y[j] = sexp(x[j] - m); s += y[j]; }
    vf vinv = vsplat(1.0f / s);
    for (int j = 0; j < nv; j += STEP) {
        #pragma GCC unroll 16
        for (int a = 0; a < ACCS; a++) vstore(y + j + a * VEC, vload(y + j + a * VEC) * vinv);
    }
    for (int j = nv; j < N; j++) y[j] *= 1.0f / s;
#endif
}

int kernel(const float *x, float *y, int M, int N) {
    #pragma omp parallel for schedule(static, ROWS)
    for (int i = 0; i < M; i++) row(x + (size_t)i * N, y + (size_t)i * N, N);
    return 0;
}
"""


VEC_VALUES = (4, 8, 16)
ACCS_VALUES = (1, 2, 4)
ROWS_VALUES = (1, 4, 16, 64)
#: vector registers one accumulator keeps live in the exp-and-sum pass (accumulator, argument,
#: polynomial, scale/exponent) -- the pass that needs the most
REGISTERS_PER_ACC = 4


def register_footprint(config: Mapping[str, Any]) -> int:
    """Vector registers the widest pass keeps live: ``REGISTERS_PER_ACC`` per accumulator."""
    return REGISTERS_PER_ACC * config["accs"]


class SoftmaxFamily(KernelFamily):
    """float32 row softmax in C: passes, vector width, accumulators, exp implementation, rows per task."""

    name = "softmax"
    hardware_knobs = {"vec": "vector_bits"}
    kind = "c"
    dims = {"M": (1, 1 << 20), "N": (1, 1 << 20)}
    doc = __doc__ or ""

    def shapes(self, w: dict) -> dict[str, tuple[int, ...]]:
        return {"x": (w["M"], w["N"]), "out": (w["M"], w["N"])}

    def space(self, workload: Any) -> Space:
        self.validate_workload(workload)
        knobs = (
            Knob("online", (0, 1), "0 = three passes, 1 = online max+sum then one write pass"),
            Knob("vec", VEC_VALUES, "vector width in floats"),
            Knob("accs", ACCS_VALUES, "independent accumulator vectors"),
            Knob("fast_exp", (0, 1), "1 = vectorised polynomial exp, 0 = libm expf"),
            Knob("rows", ROWS_VALUES, "rows per OpenMP work unit"),
        )
        return Space(knobs, ())

    def default_config(self, workload: Any, target: Mapping[str, Any] | None = None) -> dict:
        """The default for ``target`` (None: the portable x86-64 baseline).

        ``vec`` is the target's vector width in floats (``vector_bits / 32``); ``accs`` the most
        accumulators whose ``register_footprint`` fits the target's vector registers, fewer when a
        row is shorter than ``vec * accs`` (the rest of a row runs scalar); ``rows`` the largest
        work unit that still gives every thread 4 of them; three passes with the polynomial exp
        (measured fastest on AVX2 and AVX-512 at 512 x 1024).
        """
        w = self.validate_workload(workload)
        vec = snap_down(VEC_VALUES, vector_floats(target))
        accs = snap_down(ACCS_VALUES, vector_registers(target) // REGISTERS_PER_ACC)
        while accs > ACCS_VALUES[0] and vec * accs > w["N"]:
            accs = ACCS_VALUES[ACCS_VALUES.index(accs) - 1]
        rows = snap_down(ROWS_VALUES, w["M"] / (4 * threads(target)))
        return self.space(w).validate({"online": 0, "vec": vec, "accs": accs, "fast_exp": 1, "rows": rows})

    def flops(self, workload: Any) -> float:
        # count per element: max, subtract, exp (as 1), add, multiply
        w = self.validate_workload(workload)
        return 5.0 * w["M"] * w["N"]

    def make_inputs(self, w: dict, seed: int = 0) -> dict[str, np.ndarray]:
        arrays = super().make_inputs(w, seed)
        arrays["x"] *= 4.0  # a spread that makes max-subtraction matter
        return arrays

    def reference(self, w: dict, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        return _softmax(inputs["x"].astype(np.float64))

    def tolerance(self, w: dict) -> tuple[float, float]:
        return 1e-4, 1e-7

    def numpy_baseline(self, w: dict, inputs: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        x = inputs["x"]
        return lambda: _softmax(x)

    def source(self, workload: Any, config: Mapping[str, Any]) -> str:
        values = {"VEC": config["vec"], "ACCS": config["accs"], "FAST": config["fast_exp"],
                  "ONLINE": config["online"], "ROWS": config["rows"]}
        return render_template(TEMPLATE, values)

    def bind(self, w: dict, config: Mapping[str, Any], lib: Any, inputs: Mapping[str, np.ndarray]) -> Callable[[], None]:
        import ctypes

        fn = lib.kernel
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int] * 2
        args = (inputs["x"].ctypes.data, inputs["out"].ctypes.data, w["M"], w["N"])
        return lambda: fn(*args)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
