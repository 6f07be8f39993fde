"""``conv2d``: float32 direct 2-D convolution (cross-correlation, as in deep-learning frameworks) in C.

Workload: N, C, H, W (input), K output channels, R x S filter, ``stride``, ``pad`` (zero padding on
every side), ``layout`` ``"NCHW"`` (input N,C,H,W; weights K,C,R,S; output N,K,P,Q) or ``"NHWC"``
(input N,H,W,C; weights R,S,C,K; output N,P,Q,K), with P = (H + 2 pad - R) / stride + 1 and Q likewise.

Schedule: the output is cut into tiles of ``tile_k`` output channels x ``tile_q`` output columns of one
output row; ``order`` puts the channel-tile loop outside (0) or inside (1) the spatial loops;
``vec_dim`` picks the vectorised (innermost, ``omp simd``) dimension: 0 = output channels, 1 = output
columns; ``unroll`` unrolls the filter-column loop.  Tiles are distributed over OpenMP threads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tunedb.transfer.kernels.base import KernelFamily
from tunedb.transfer.kernels.target_properties import cache_bytes, snap_down, snap_up
from tunedb.transfer.kernels.templating import render_template
from tunedb.transfer.space import Constraint, Knob, Space

LAYOUTS = ("NCHW", "NHWC")
TILE_VALUES = (1, 2, 4, 8, 16, 32, 64)
#: most accumulators (floats) of one output tile the space allows
MAX_TILE = 2048

TEMPLATE = r"""
/* tunedb conv2d kernel: generated from transfer/kernels/conv2d.py; integers only */
#include <stddef.h>
#define TK @TK@
#define TQ @TQ@
#define ORDER @ORDER@
#define VDIM @VDIM@
#define NHWC @NHWC@
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
#if NHWC
#define IN(n, c, h, w) x[(((size_t)(n) * H + (h)) * W + (w)) * C + (c)]
#define WT(k, c, r, s) wt[(((size_t)(r) * S + (s)) * C + (c)) * K + (k)]
#define OUT(n, k, p, q) y[(((size_t)(n) * P + (p)) * Q + (q)) * K + (k)]
#else
#define IN(n, c, h, w) x[(((size_t)(n) * C + (c)) * H + (h)) * W + (w)]
#define WT(k, c, r, s) wt[(((size_t)(k) * C + (c)) * R + (r)) * S + (s)]
#define OUT(n, k, p, q) y[(((size_t)(n) * K + (k)) * P + (p)) * Q + (q)]
#endif
#if VDIM == 0
#define ACC(kk, qq) acc[(qq) * TK + (kk)]
#else
#define ACC(kk, qq) acc[(kk) * TQ + (qq)]
#endif

static void tile(const float *restrict x, const float *restrict wt, float *restrict y,
                 int N, int C, int H, int W, int K, int R, int S, int st, int pad, int P, int Q,
                 int n, int k0, int p, int q0) {
    (void)N;
    float acc[TK * TQ];
    float wv[TK];
    int kn = imin(TK, K - k0), qn = imin(TQ, Q - q0);
    for (int i = 0; i < TK * TQ; i++) acc[i] = 0.f;
    for (int c = 0; c < C; c++) {
        for (int r = 0; r < R; r++) {
            int h = p * st + r - pad;
            if (h < 0 || h >= H) continue;
            #pragma GCC unroll @UNROLL@
            for (int s = 0; s < S; s++) {
                /* output columns whose input column q*st + s - pad lies inside [0, W) */
                int lo = pad - s > 0 ? (pad - s + st - 1) / st : 0;
                int hi = (W - 1 + pad - s) >= 0 ? (W - 1 + pad - s) / st + 1 : 0;
                int qlo = imax(lo - q0, 0), qhi = imin(hi - q0, qn);
                if (qlo >= qhi) continue;
                for (int kk = 0; kk < kn; kk++) wv[kk] = WT(k0 + kk, c, r, s);
#if VDIM == 0
                for (int qq = qlo; qq < qhi; qq++) {
                    float xv = IN(n, c, h, (q0 + qq) * st + s - pad);
                    #pragma omp simd
                    for (int kk = 0; kk < kn; kk++) ACC(kk, qq) += wv[kk] * xv;
                }
#else
                const float *xr = &IN(n, c, h, 0);
                for (int kk = 0; kk < kn; kk++) {
                    float w0 = wv[kk];
                    #pragma omp simd
                    for (int qq = qlo; qq < qhi; qq++)
#if NHWC
                        ACC(kk, qq) += w0 * xr[(size_t)((q0 + qq) * st + s - pad) * C];
#else
                        ACC(kk, qq) += w0 * xr[(q0 + qq) * st + s - pad];
#endif
                }
#endif
            }
        }
    }
    for (int kk = 0; kk < kn; kk++)
        for (int qq = 0; qq < qn; qq++) OUT(n, k0 + kk, p, q0 + qq) = ACC(kk, qq);
}

int kernel(const float *x, const float *wt, float *y, int N, int C, int H, int W, int K, int R, int S,
           int st, int pad) {
    int P = (H + 2 * pad - R) / st + 1, Q = (W + 2 * pad - S) / st + 1;
    int nk = (K + TK - 1) / TK, nq = (Q + TQ - 1) / TQ;
    #pragma omp parallel for collapse(4) schedule(static)
    for (int n = 0; n < N; n++)
#if ORDER == 0
    for (int kt = 0; kt < nk; kt++)
    for (int p = 0; p < P; p++)
    for (int qt = 0; qt < nq; qt++)
#else
    for (int p = 0; p < P; p++)
    for (int qt = 0; qt < nq; qt++)
    for (int kt = 0; kt < nk; kt++)
#endif
        tile(x, wt, y, N, C, H, W, K, R, S, st, pad, P, Q, n, kt * TK, p, qt * TQ);
    return 0;
}
"""


class Conv2dFamily(KernelFamily):
    """float32 direct convolution in C (NCHW or NHWC) with channel/spatial tiles."""

    name = "conv2d"
    kind = "c"
    dims = {"N": (1, 64), "C": (1, 4096), "H": (1, 4096), "W": (1, 4096), "K": (1, 4096),
            "R": (1, 15), "S": (1, 15), "stride": (1, 8), "pad": (0, 7)}
    options = {"layout": (LAYOUTS, "NCHW")}
    doc = __doc__ or ""

    @staticmethod
    def out_hw(w: dict) -> tuple[int, int]:
        """Output height P and width Q."""
        p = (w["H"] + 2 * w["pad"] - w["R"]) // w["stride"] + 1
        q = (w["W"] + 2 * w["pad"] - w["S"]) // w["stride"] + 1
        return p, q

    def check_shapes(self, w: dict) -> None:
        if w["H"] + 2 * w["pad"] < w["R"] or w["W"] + 2 * w["pad"] < w["S"]:
            raise ValueError(f"conv2d: filter {w['R']}x{w['S']} is larger than the padded input "
                             f"{w['H'] + 2 * w['pad']}x{w['W'] + 2 * w['pad']}")
        if w["pad"] >= max(w["R"], w["S"]) and w["pad"] > 0:
            raise ValueError(f"conv2d: pad={w['pad']} must be smaller than the filter size")

    def shapes(self, w: dict) -> dict[str, tuple[int, ...]]:
        p, q = self.out_hw(w)
        n, c, h, wd, k, r, s = (w[x] for x in ("N", "C", "H", "W", "K", "R", "S"))
        if w["layout"] == "NHWC":
            return {"x": (n, h, wd, c), "w": (r, s, c, k), "out": (n, p, q, k)}
        return {"x": (n, c, h, wd), "w": (k, c, r, s), "out": (n, k, p, q)}

    def space(self, workload: Any) -> Space:
        self.validate_workload(workload)
        knobs = (
            Knob("tile_k", TILE_VALUES, "output channels per tile"),
            Knob("tile_q", TILE_VALUES, "output columns per tile"),
            Knob("order", (0, 1), "0 = channel-tile loop outside the spatial loops, 1 = inside"),
            Knob("vec_dim", (0, 1), "vectorised dimension: 0 = output channels, 1 = output columns"),
            Knob("unroll", (1, 2, 4), "unroll factor of the filter-column loop"),
        )
        constraints = (Constraint(f"tile_k * tile_q <= {MAX_TILE} accumulators",
                                  lambda c: c["tile_k"] * c["tile_q"] <= MAX_TILE),)
        return Space(knobs, constraints)

    def default_config(self, workload: Any, target: Mapping[str, Any] | None = None) -> dict:
        """The default for ``target`` (None: the portable x86-64 baseline).

        The accumulator tile (``tile_k x tile_q`` floats, kept in L1, not in registers) is as large
        as a quarter of the target's L1d allows (the rest holds the weight row and input rows):
        ``tile_k`` covers all output channels up to 64 -- so at least one vector of any x86 width
        once K >= 16, as the vectorised dimension is the channels (``vec_dim`` 0, measured faster
        than columns for NCHW and NHWC on AVX2 and AVX-512) -- and ``tile_q`` takes the rest of the
        budget, no wider than the output row.  Channel tiles inside the spatial loops (``order`` 1),
        filter-column loop unrolled 2x.
        """
        w = self.validate_workload(workload)
        _, q = self.out_hw(w)
        tile_k = snap_up(TILE_VALUES, w["K"])  # every output channel, up to 64
        l1 = cache_bytes(target, "l1d") or 0
        budget = min(l1 / 4 / 4, MAX_TILE) / tile_k
        tile_q = min(snap_down(TILE_VALUES, budget), snap_up(TILE_VALUES, q))
        return self.space(w).validate({"tile_k": tile_k, "tile_q": tile_q, "order": 1, "vec_dim": 0, "unroll": 2})

    def flops(self, workload: Any) -> float:
        w = self.validate_workload(workload)
        p, q = self.out_hw(w)
        return 2.0 * w["N"] * w["K"] * p * q * w["C"] * w["R"] * w["S"]

    def reference(self, w: dict, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        x, wt = inputs["x"].astype(np.float64), inputs["w"].astype(np.float64)
        if w["layout"] == "NHWC":
            x = x.transpose(0, 3, 1, 2)
            wt = wt.transpose(3, 2, 0, 1)
        out = _conv_nchw(x, wt, w["stride"], w["pad"])
        return out.transpose(0, 2, 3, 1) if w["layout"] == "NHWC" else out

    def numpy_baseline(self, w: dict, inputs: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        x, wt = inputs["x"], inputs["w"]
        if w["layout"] == "NHWC":
            return lambda: _conv_nchw(x.transpose(0, 3, 1, 2), wt.transpose(3, 2, 0, 1), w["stride"], w["pad"])
        return lambda: _conv_nchw(x, wt, w["stride"], w["pad"])

    def source(self, workload: Any, config: Mapping[str, Any]) -> str:
        w = self.validate_workload(workload)
        values = {"TK": config["tile_k"], "TQ": config["tile_q"], "ORDER": config["order"],
                  "VDIM": config["vec_dim"], "UNROLL": config["unroll"], "NHWC": int(w["layout"] == "NHWC")}
        return render_template(TEMPLATE, values)

    def bind(self, w: dict, config: Mapping[str, Any], lib: Any, inputs: Mapping[str, np.ndarray]) -> Callable[[], None]:
        import ctypes

        fn = lib.kernel
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 9
        args = (inputs["x"].ctypes.data, inputs["w"].ctypes.data, inputs["out"].ctypes.data,
                *(w[k] for k in ("N", "C", "H", "W", "K", "R", "S", "stride", "pad")))
        return lambda: fn(*args)


def _conv_nchw(x: np.ndarray, wt: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """NCHW cross-correlation through im2col windows and ``tensordot`` (dtype of the inputs)."""
    if pad:
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    r, s = wt.shape[2], wt.shape[3]
    win = np.lib.stride_tricks.sliding_window_view(x, (r, s), axis=(2, 3))[:, :, ::stride, ::stride]
    # win: N, C, P, Q, R, S ; wt: K, C, R, S -> N, P, Q, K
    out = np.tensordot(win, wt, axes=([1, 4, 5], [1, 2, 3]))
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
