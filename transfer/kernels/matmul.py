"""``matmul``: float32 C = A @ B (row-major A: M x K, B: K x N, C: M x N) in C.

Schedule (BLIS/GotoBLAS style): three cache-blocking loops over N (``nc``), K (``kc``) and
M (``mc``) in the order ``order`` (0..5, see ``ORDERS``), optional packing of the A block and
B panel into contiguous zero-padded buffers (``pack``), and a register-blocked micro-kernel
computing an ``mr x nr`` tile of C with GCC vector extensions ``vec`` floats wide (``nr`` is a
multiple of ``vec``; ``mr * nr / vec`` accumulator vectors), its K loop unrolled ``unroll`` times.
Tiles may be larger than the matrix; partial tiles go through a padded scratch tile
(packed) or a scalar loop (unpacked).  With several threads the (jr, ir) micro-tiles of a block
are shared out by OpenMP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tunedb.transfer.kernels.base import KernelFamily
from tunedb.transfer.kernels.target_properties import (
    cache_bytes,
    cores,
    snap_down,
    snap_up,
    vector_floats,
    vector_registers,
)
from tunedb.transfer.kernels.templating import render_template
from tunedb.transfer.space import Constraint, Knob, Space

#: loop orders of the cache-blocking loops, outermost first (n = nc loop, k = kc loop, m = mc loop)
ORDERS = ("nkm", "nmk", "knm", "kmn", "mnk", "mkn")
_DIM_INDEX = {"n": 0, "k": 1, "m": 2}

TEMPLATE = r"""
/* tunedb matmul kernel: generated from transfer/kernels/matmul.py; integers only */
#include <stdlib.h>
#include <string.h>
#define MR @MR@
#define NR @NR@
#define VEC @VEC@
#define MC @MC@
#define NC @NC@
#define KC @KC@
#define PACK @PACK@
#define L0 @L0@
#define L1 @L1@
#define L2 @L2@
#define NV (NR / VEC)
typedef float vf __attribute__((vector_size(VEC * 4)));
static inline vf vload(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline int imin(int a, int b) { return a < b ? a : b; }

/* Ct[MR x NR] += A-sliver * B-sliver; A element (i, p) at A[i*ars + p*acs], B row p at B + p*brs */
static inline void micro(int kc, const float *restrict A, int ars, int acs,
                         const float *restrict B, int brs, float *restrict Ct, int ldc) {
    vf c[MR][NV];
    #pragma GCC unroll 64
    for (int i = 0; i < MR; i++)
        #pragma GCC unroll 64
        for (int v = 0; v < NV; v++) c[i][v] = vload(Ct + i * ldc + v * VEC);
    #pragma GCC unroll @UNROLL@
    for (int p = 0; p < kc; p++) {
        vf b[NV];
        #pragma GCC unroll 64
        for (int v = 0; v < NV; v++) b[v] = vload(B + p * brs + v * VEC);
        #pragma GCC unroll 64
        for (int i = 0; i < MR; i++) {
            vf a = (vf){0} + A[i * ars + p * acs];
            #pragma GCC unroll 64
            for (int v = 0; v < NV; v++) c[i][v] += a * b[v];
        }
    }
    #pragma GCC unroll 64
    for (int i = 0; i < MR; i++)
        #pragma GCC unroll 64
        for (int v = 0; v < NV; v++) vstore(Ct + i * ldc + v * VEC, c[i][v]);
}

static void pack_a(int mc, int kc, const float *A, int lda, float *Ap) {
    for (int i0 = 0; i0 < mc; i0 += MR) {
        int mr = imin(MR, mc - i0);
        for (int p = 0; p < kc; p++) {
            for (int i = 0; i < mr; i++) Ap[p * MR + i] = A[(size_t)(i0 + i) * lda + p];
            for (int i = mr; i < MR; i++) Ap[p * MR + i] = 0.f;
        }
        Ap += MR * kc;
    }
}

static void pack_b(int kc, int nc, const float *B, int ldb, float *Bp) {
    for (int j0 = 0; j0 < nc; j0 += NR) {
        int nr = imin(NR, nc - j0);
        for (int p = 0; p < kc; p++) {
            for (int j = 0; j < nr; j++) Bp[p * NR + j] = B[(size_t)p * ldb + j0 + j];
            for (int j = nr; j < NR; j++) Bp[p * NR + j] = 0.f;
        }
        Bp += NR * kc;
    }
}

static void block(const float *A, const float *B, float *C, int N, int K,
                  int ic, int mc, int jc, int nc, int pc, int kc, const float *Ap, const float *Bp) {
    int nj = (nc + NR - 1) / NR, ni = (mc + MR - 1) / MR;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int jb = 0; jb < nj; jb++) {
        for (int ib = 0; ib < ni; ib++) {
            int jr = jb * NR, ir = ib * MR;
            int mr = imin(MR, mc - ir), nr = imin(NR, nc - jr);
            float *Ct = C + (size_t)(ic + ir) * N + jc + jr;
#if PACK
            const float *As = Ap + (size_t)ir * kc, *Bs = Bp + (size_t)jr * kc;
            if (mr == MR && nr == NR) {
                micro(kc, As, 1, MR, Bs, NR, Ct, N);
            } else {
                float tmp[MR * NR];
                for (int i = 0; i < MR; i++)
                    for (int j = 0; j < NR; j++) tmp[i * NR + j] = (i < mr && j < nr) ? Ct[(size_t)i * N + j] : 0.f;
                micro(kc, As, 1, MR, Bs, NR, tmp, NR);
                for (int i = 0; i < mr; i++)
                    for (int j = 0; j < nr; j++) Ct[(size_t)i * N + j] = tmp[i * NR + j];
            }
#else
            const float *As = A + (size_t)(ic + ir) * K + pc, *Bs = B + (size_t)pc * N + jc + jr;
            if (mr == MR && nr == NR) {
                micro(kc, As, K, 1, Bs, N, Ct, N);
            } else {
                for (int i = 0; i < mr; i++)
                    for (int p = 0; p < kc; p++) {
                        float a = As[(size_t)i * K + p];
                        for (int j = 0; j < nr; j++) Ct[(size_t)i * N + j] += a * Bs[(size_t)p * N + j];
                    }
            }
#endif
        }
    }
}

/* C = A * B (matrix product); returns 0, or 1 when scratch memory could not be allocated */
int kernel(const float *A, const float *B, float *C, int M, int N, int K) {
    memset(C, 0, sizeof(float) * (size_t)M * N);
    float *Ap = NULL, *Bp = NULL;
#if PACK
    size_t asz = ((size_t)(MC + MR) * KC * sizeof(float) + 63) / 64 * 64;
    size_t bsz = ((size_t)(NC + NR) * KC * sizeof(float) + 63) / 64 * 64;
    Ap = aligned_alloc(64, asz);
    Bp = aligned_alloc(64, bsz);
    if (!Ap || !Bp) { free(Ap); free(Bp); return 1; }
#endif
    int nb[3] = {(N + NC - 1) / NC, (K + KC - 1) / KC, (M + MC - 1) / MC};
    int last_a_m = -1, last_a_k = -1, last_b_n = -1, last_b_k = -1;
    int idx[3];
    for (idx[L0] = 0; idx[L0] < nb[L0]; idx[L0]++)
    for (idx[L1] = 0; idx[L1] < nb[L1]; idx[L1]++)
    for (idx[L2] = 0; idx[L2] < nb[L2]; idx[L2]++) {
        int jc = idx[0] * NC, pc = idx[1] * KC, ic = idx[2] * MC;
        int nc = imin(NC, N - jc), kc = imin(KC, K - pc), mc = imin(MC, M - ic);
#if PACK
        if (last_b_n != jc || last_b_k != pc) { pack_b(kc, nc, B + (size_t)pc * N + jc, N, Bp); last_b_n = jc; last_b_k = pc; }
        if (last_a_m != ic || last_a_k != pc) { pack_a(mc, kc, A + (size_t)ic * K + pc, K, Ap); last_a_m = ic; last_a_k = pc; }
#else
        (void)last_a_m; (void)last_a_k; (void)last_b_n; (void)last_b_k;
#endif
        block(A, B, C, N, K, ic, mc, jc, nc, pc, kc, Ap, Bp);
    }
    free(Ap);
    free(Bp);
    return 0;
}
"""

MR_VALUES = (1, 2, 4, 6, 8, 12, 16)
NR_VALUES = (4, 8, 16, 32, 48, 64)
VEC_VALUES = (4, 8, 16)
MC_VALUES = (16, 32, 64, 96, 128, 256, 512)
NC_VALUES = (32, 64, 128, 256, 512, 1024, 2048)
KC_VALUES = (16, 32, 64, 128, 256, 512, 1024)
UNROLL_VALUES = (1, 2, 4, 8)
#: most accumulator vectors the space allows (``mr * nr / vec``)
MAX_ACCUMULATORS = 32

#: a config that reaches >= 50% of NumPy sgemm at 512^3 on one Sapphire Rapids core (AVX-512 only:
#: built for AVX2 its 16 512-bit accumulators need 32 ymm registers, it spills and runs 7-19x slower
#: than the AVX2 default).  Kept as a reference point; ``default_config`` derives one from the target.
FAST_CONFIG = {"mc": 64, "nc": 512, "kc": 512, "order": 0, "mr": 4, "nr": 64, "vec": 16, "pack": 1, "unroll": 4}


def register_footprint(config: Mapping[str, Any]) -> int:
    """Vector registers the micro-kernel keeps live: ``mr * nr / vec`` accumulators, ``nr / vec``
    B vectors and one A broadcast."""
    nv = config["nr"] // config["vec"]
    return config["mr"] * nv + nv + 1


def register_tile(vec: int, registers: int) -> tuple[int, int]:
    """``(mr, nr)`` of the micro-kernel for ``vec``-float vectors and ``registers`` vector registers.

    Accumulators are at most half the register file (the other half holds the B vectors, the A
    broadcast and the loads of the next unrolled K steps; measured on AVX2 and AVX-512, fuller
    tiles spill and run slower) and the whole footprint fits; among those the tile with the
    most accumulators, then the fewest loads per FMA (``mr + nr / vec``), then the taller one.
    SSE2: 4 x 8, AVX2: 4 x 16, AVX-512: 4 x 64 (for 4-, 8- and 16-float vectors, 16/16/32 registers).
    """
    best: tuple | None = None
    for mr in MR_VALUES:
        for nr in NR_VALUES:
            if nr % vec:
                continue
            nv = nr // vec
            acc = mr * nv
            if acc > max(1, registers // 2) or acc > MAX_ACCUMULATORS or acc + nv + 1 > max(registers, 3):
                continue
            cand = ((acc, -(mr + nv), mr), mr, nr)
            if best is None or cand[0] > best[0]:
                best = cand
    if best is None:  # fewer registers than any tile needs: the smallest tile
        return MR_VALUES[0], min(nr for nr in NR_VALUES if nr % vec == 0)
    return best[1], best[2]


class MatmulMath:
    """FLOPs, reference, tolerance and NumPy baseline shared by the matmul families (C and NumPy)."""

    def flops(self, workload: Any) -> float:
        w = self.validate_workload(workload)
        return 2.0 * w["M"] * w["N"] * w["K"]

    def reference(self, w: dict, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        return inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)

    def tolerance(self, w: dict) -> tuple[float, float]:
        # float32 accumulation over K terms of N(0,1) products: error grows ~ sqrt(K) * eps
        return 1e-4, 1e-5 * max(1.0, float(w["K"]) ** 0.5) * 4

    def numpy_baseline(self, w: dict, inputs: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        a, b, out = inputs["A"], inputs["B"], inputs["out"]
        return lambda: np.matmul(a, b, out=out)


class MatmulFamily(MatmulMath, KernelFamily):
    """float32 GEMM in C: cache tiles, loop order, packing, register-blocked vector micro-kernel."""

    name = "matmul"
    hardware_knobs = {"vec": "vector_bits"}
    kind = "c"
    dims = {"M": (1, 16384), "N": (1, 16384), "K": (1, 16384)}
    doc = __doc__ or ""

    def shapes(self, w: dict) -> dict[str, tuple[int, ...]]:
        return {"A": (w["M"], w["K"]), "B": (w["K"], w["N"]), "out": (w["M"], w["N"])}

    def space(self, workload: Any) -> Space:
        self.validate_workload(workload)
        knobs = (
            Knob("mc", MC_VALUES, "rows of A per cache block (L2)"),
            Knob("nc", NC_VALUES, "columns of B per cache block (L3)"),
            Knob("kc", KC_VALUES, "depth of a cache block (L1 panel)"),
            Knob("order", tuple(range(len(ORDERS))), "cache-loop order, outermost first: " +
                 ", ".join(f"{i}={o}" for i, o in enumerate(ORDERS))),
            Knob("mr", MR_VALUES, "micro-kernel rows"),
            Knob("nr", NR_VALUES, "micro-kernel columns (floats)"),
            Knob("vec", VEC_VALUES, "vector width in floats (4=128, 8=256, 16=512 bit)"),
            Knob("pack", (0, 1), "1 = copy A block and B panel into contiguous padded buffers"),
            Knob("unroll", UNROLL_VALUES, "unroll factor of the micro-kernel K loop"),
        )
        constraints = (
            Constraint("nr % vec == 0", lambda c: c["nr"] % c["vec"] == 0),
            Constraint(f"mr * nr / vec <= {MAX_ACCUMULATORS} accumulator vectors",
                       lambda c: c["mr"] * (c["nr"] // c["vec"]) <= MAX_ACCUMULATORS),
            Constraint("mc >= mr", lambda c: c["mc"] >= c["mr"]),
            Constraint("nc >= nr", lambda c: c["nc"] >= c["nr"]),
        )
        return Space(knobs, constraints)

    def default_config(self, workload: Any, target: Mapping[str, Any] | None = None) -> dict:
        """The BLIS-style default for ``target`` (None: the portable x86-64 baseline).

        * ``vec``: the target's vector width in floats (``vector_bits / 32``, snapped to 4/8/16);
        * ``mr x nr``: ``register_tile`` for that width and the target's vector registers;
        * ``kc``: the B sliver (``kc x nr``) and A sliver (``mr x kc``) reused by the micro-kernel
          fill at most 3/4 of L1d; ``mc``: the packed A block (``mc x kc``) half of L2; ``nc``: the
          packed B panel (``kc x nc``) half of the target's L3 share per core (L2 when L3 is unknown);
        * none larger than the workload needs (the smallest allowed value covering M, N, K), which
          keeps the packing buffers of small products small;
        * ``order`` 0 (n, k, m), packed, K loop unrolled 4 times.
        """
        w = self.validate_workload(workload)
        vec = snap_down(VEC_VALUES, vector_floats(target))
        mr, nr = register_tile(vec, vector_registers(target))
        l1 = cache_bytes(target, "l1d") or 0
        l2 = cache_bytes(target, "l2") or 0
        l3 = cache_bytes(target, "l3")
        panel = l3 // cores(target) if l3 else l2
        kc = min(snap_down(KC_VALUES, l1 * 3 / 4 / (4 * (mr + nr))), snap_up(KC_VALUES, w["K"]))
        mc = snap_down(MC_VALUES, l2 / 2 / (4 * kc))
        nc = snap_down(NC_VALUES, panel / 2 / (4 * kc))
        mc = max(min(mc, snap_up(MC_VALUES, w["M"])), snap_up(MC_VALUES, mr))
        nc = max(min(nc, snap_up(NC_VALUES, w["N"])), snap_up(NC_VALUES, nr))
        cfg = {"mc": mc, "nc": nc, "kc": kc, "order": 0, "mr": mr, "nr": nr, "vec": vec, "pack": 1, "unroll": 4}
        return self.space(w).validate(cfg)

    def retarget(self, config: Mapping[str, Any], source_target: Mapping[str, Any],
                 dest_target: Mapping[str, Any]) -> list[dict]:
        """``[config]`` when both targets have the same vector width and vector registers
        (``targets.vector_floats`` / ``vector_registers``, with their fallbacks) or ``config``
        has no micro-kernel knobs; else one candidate, ``config`` with the register blocking
        re-derived for ``dest_target`` as ``default_config`` does: ``vec`` = its float lanes snapped to
        ``VEC_VALUES``, ``(mr, nr)`` = ``register_tile(vec, its registers)``.  The cache blocking
        (``mc``, ``nc``, ``kc``, ``order``, ``pack``, ``unroll``) is the source's, except that ``mc`` /
        ``nc`` grow to the smallest allowed value covering the new ``mr`` / ``nr`` (a block holds
        at least one tile)."""
        out = dict(config)
        if not all(isinstance(out.get(k), int) for k in ("mr", "nr", "vec")):
            return [out]
        src = (vector_floats(source_target), vector_registers(source_target))
        dst = (vector_floats(dest_target), vector_registers(dest_target))
        if src == dst:
            return [out]
        vec = snap_down(VEC_VALUES, dst[0])
        mr, nr = register_tile(vec, dst[1])
        out.update(mr=mr, nr=nr, vec=vec)
        if isinstance(out.get("mc"), int) and out["mc"] < mr:
            out["mc"] = snap_up(MC_VALUES, mr)
        if isinstance(out.get("nc"), int) and out["nc"] < nr:
            out["nc"] = snap_up(NC_VALUES, nr)
        return [out]


    def source(self, workload: Any, config: Mapping[str, Any]) -> str:
        order = ORDERS[config["order"]]
        levels = [_DIM_INDEX[ch] for ch in order]
        values = {k.upper(): config[k] for k in ("mr", "nr", "vec", "mc", "nc", "kc", "pack", "unroll")}
        values.update(L0=levels[0], L1=levels[1], L2=levels[2])
        return render_template(TEMPLATE, values)

    def bind(self, w: dict, config: Mapping[str, Any], lib: Any, inputs: Mapping[str, np.ndarray]) -> Callable[[], None]:
        import ctypes

        fn = lib.kernel
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3
        a, b, out = inputs["A"], inputs["B"], inputs["out"]
        args = (a.ctypes.data, b.ctypes.data, out.ctypes.data, w["M"], w["N"], w["K"])

        def run() -> None:
            if fn(*args) != 0:
                raise MemoryError("matmul kernel could not allocate its packing buffers")

        return run
