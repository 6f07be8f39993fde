"""Benchmark of the entry vector index: HNSW (what ``auto`` picks above FLAT_MAX) beside exact
flat search, on N synthetic but realistic entries (every catalog device and local preset x
random workloads of the known families and of unknown imported kernels, log-uniform shapes).

Reports, per index kind: ``build_s`` (seconds), ``nearest_ms_p50`` / ``nearest_ms_p99``
(one query at a time, 1 FAISS/BLAS thread, milliseconds), ``recall_at_10`` against exact
flat search (tie-tolerant: a hit scoring at least the exact 10th score counts) and
``memory_bytes`` (vectors + graph + key tables).  Queries are held-out entries (not in the
index).  ``filtered_ms_p50`` times the default same-family filter.

    python benchmarks/bench_index.py --entries 1000000 --queries 1000 --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time

import faiss
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tunedb.index.hardware import catalog
from tunedb.index.hardware.localcpu import preset, preset_names  # noqa: E402
from tunedb.index.hardware.targets import catalog_target  # noqa: E402
from tunedb.index.retrieval import features, vectors

FAMILIES = ("matmul", "batch_matmul", "dense", "conv2d", "depthwise_conv2d", "conv2d_winograd", "convolution",
            "dedispersion", "imported_kernel_a", "imported_kernel_b")


def _pow2ish(rng: np.random.Generator, lo: int, hi: int, n: int) -> np.ndarray:
    return np.round(np.exp(rng.uniform(math.log(lo), math.log(hi), n))).astype(int)


def random_workloads(n: int, seed: int = 0) -> list[dict]:
    """``n`` random workload dicts over ``FAMILIES`` with log-uniform shapes."""
    rng = np.random.default_rng(seed)
    fam = rng.integers(0, len(FAMILIES), n)
    a, b, c = _pow2ish(rng, 8, 8192, n), _pow2ish(rng, 8, 8192, n), _pow2ish(rng, 8, 8192, n)
    hw, ks = _pow2ish(rng, 7, 512, n), rng.choice([1, 3, 5, 7], n)
    bs = rng.choice([1, 2, 4, 8, 16, 32], n)
    dt = rng.choice(["float32", "float16", "int8"], n, p=[0.7, 0.2, 0.1])
    out = []
    for i in range(n):
        f = FAMILIES[fam[i]]
        if f in ("matmul", "dense"):
            w = {"family": f, "M": int(a[i]), "N": int(b[i]), "K": int(c[i]), "dtype": str(dt[i])}
        elif f == "batch_matmul":
            w = {"family": f, "B": int(bs[i]), "M": int(a[i]), "N": int(b[i]), "K": int(c[i]), "dtype": str(dt[i])}
        elif f.startswith(("conv2d", "depthwise")):
            w = {"family": f, "N": int(bs[i]), "C": int(a[i] % 1024 + 1), "H": int(hw[i]), "W": int(hw[i]),
                 "K": int(b[i] % 1024 + 1), "R": int(ks[i]), "S": int(ks[i]), "dtype": str(dt[i])}
        elif f == "convolution":
            w = {"family": f, "image_width": int(a[i]), "image_height": int(b[i]), "filter_width": int(ks[i] * 2 + 1),
                 "filter_height": int(ks[i] * 2 + 1)}
        elif f == "dedispersion":
            w = {"family": f, "nr_samples": int(a[i] * 16), "nr_dms": int(b[i] % 4096 + 1),
                 "nr_channels": int(c[i] % 2048 + 1)}
        else:
            w = {"family": f, "size": int(a[i]), "block": int(ks[i] * 16), "kernel": f"k{int(bs[i])}"}
        out.append(w)
    return out


def synthetic_entries(n: int, seed: int = 0) -> tuple[np.ndarray, list[str], list[str], list[str]]:
    """(vectors N x DIM, target_keys, workload_keys, families) of ``n`` random entries."""
    from tunedb.index.keys import key_of

    targets = [catalog_target(r) for r in catalog.devices()] + [preset(p) for p in preset_names()]
    hw = np.stack([features.normalized(features.hardware_vector(t)) for t in targets])
    tkeys = [key_of(t) for t in targets]
    rng = np.random.default_rng(seed + 1)
    ti = rng.integers(0, len(targets), n)
    wls = random_workloads(n, seed)
    wl = np.empty((n, features.WL_DIM), dtype=np.float32)
    for i, w in enumerate(wls):
        wl[i] = features.workload_vector(w)
    wl /= np.maximum(np.linalg.norm(wl, axis=1, keepdims=True), 1e-12)
    x = np.ascontiguousarray(np.concatenate([hw[ti], wl], axis=1) / np.float32(math.sqrt(2.0)), dtype=np.float32)
    # workload keys: cheap unique ids (the index only needs distinct keys)
    return x, [tkeys[i] for i in ti], [f"w{seed}-{i:09d}" for i in range(n)], [w["family"] for w in wls]


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _time_queries(vi: vectors.VectorIndex, qs: np.ndarray, k: int, family: list[str] | None = None):
    lat, rows, scores = [], [], []
    for i, q in enumerate(qs):
        t0 = time.perf_counter()
        r, s = vi.search(q, k, family=family[i] if family else None)
        lat.append((time.perf_counter() - t0) * 1e3)
        rows.append(r)
        scores.append(s)
    return np.array(lat), rows, scores


def run(n: int, n_queries: int, k: int = 10, build_threads: int | None = None, ef_search: int | None = None) -> dict:
    """Build flat and HNSW over ``n`` entries and measure both (see module docstring)."""
    t0 = time.perf_counter()
    x, tks, wks, fams = synthetic_entries(n + n_queries)
    gen_s = time.perf_counter() - t0
    qx, qfam = x[n:], fams[n:]
    x, tks, wks, fams = x[:n], tks[:n], wks[:n], fams[:n]
    out: dict = {"entries": n, "queries": n_queries, "k": k, "dim": int(x.shape[1]), "generate_s": round(gen_s, 2),
                 "hnsw_m": vectors.HNSW_M, "ef_construction": vectors.EF_CONSTRUCTION}
    if build_threads:
        faiss.omp_set_num_threads(build_threads)
    res = {}
    for kind in ("flat", "hnsw"):
        rss0 = _rss()
        t0 = time.perf_counter()
        vi = vectors.VectorIndex.build(x, tks, wks, fams, kind)
        if ef_search and kind == "hnsw":
            vi.ef_search = ef_search
        build_s = time.perf_counter() - t0
        faiss.omp_set_num_threads(1)  # one query at a time on one thread
        lat, rows, scores = _time_queries(vi, qx, k)
        flat_lat, _, _ = _time_queries(vi, qx[: max(1, n_queries // 4)], k, qfam)
        res[kind] = {"build_s": round(build_s, 3), "nearest_ms_p50": round(float(np.percentile(lat, 50)), 4),
                     "nearest_ms_p99": round(float(np.percentile(lat, 99)), 4),
                     "filtered_ms_p50": round(float(np.percentile(flat_lat, 50)), 4),
                     "memory_bytes": vi.memory_bytes(), "rss_growth_bytes": max(0, _rss() - rss0),
                     "rows": rows, "scores": scores}
        if build_threads:
            faiss.omp_set_num_threads(build_threads)
        del vi
    ex = res["flat"]
    for kind in ("flat", "hnsw"):
        r = res[kind]
        rec = [vectors.recall_at_k(r["rows"][i], ex["rows"][i], ex["scores"][i], r["scores"][i], k)
               for i in range(n_queries)]
        r["recall_at_10"] = round(float(np.mean(rec)), 4)
    for kind in ("flat", "hnsw"):
        del res[kind]["rows"], res[kind]["scores"]
    out["flat"] = res["flat"]
    out["hnsw"] = res["hnsw"]
    out.update({f"hnsw_{k2}": v for k2, v in res["hnsw"].items()})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--build-threads", type=int, default=None, help="FAISS threads while building (default: all)")
    p.add_argument("--ef-search", type=int, default=None, help="override HNSW efSearch")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.entries < 10 or a.queries < 1:
        sys.stderr.write("bench_index: error: --entries >= 10 and --queries >= 1\n")
        return 2
    r = run(a.entries, a.queries, build_threads=a.build_threads, ef_search=a.ef_search)
    if a.json:
        print(json.dumps(r, sort_keys=True))
    else:
        for kind in ("flat", "hnsw"):
            x = r[kind]
            print(f"{kind:5} N={r['entries']:>9} build {x['build_s']:8.2f} s  p50 {x['nearest_ms_p50']:8.3f} ms  "
                  f"p99 {x['nearest_ms_p99']:8.3f} ms  filtered p50 {x['filtered_ms_p50']:8.3f} ms  "
                  f"recall@10 {x['recall_at_10']:.4f}  memory {x['memory_bytes'] / 2**20:8.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
