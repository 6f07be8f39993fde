"""Benchmark of the entry vector index: the approximate kind ``auto`` picks above FLAT_MAX
(IVF, ``vectors.APPROX_KIND``) beside exact flat search and, as the named baseline, the
previous default (HNSW M=32, efConstruction=80, efSearch=64), on N synthetic but realistic
entries (every catalog device and local preset x random workloads of the known families and
of unknown imported kernels, log-uniform shapes).

Reports, per row (``flat``, ``ivf``, ``hnsw_baseline``): ``build_s`` (seconds, FAISS on all
its threads unless ``--build-threads``), ``nearest_ms_p50`` / ``nearest_ms_p99`` (one query at
a time, 1 FAISS thread, milliseconds; the median over ``--repeats`` passes, with the passes'
min/max in ``*_spread``), ``filtered_ms_p50`` / ``_p99`` (the default same-family filter) and
``exclude_ms_p50`` (same family and not the query's own target), ``recall_at_10`` /
``filtered_recall_at_10`` / ``exclude_recall_at_10`` against exact flat search in the same run
(tie-tolerant: a hit scoring at least the exact 10th score counts; the filtered ones over the
first quarter of the queries), ``memory_bytes`` (estimate: vectors + index structures + key
tables) and ``rss_growth_bytes`` (growth of the peak RSS while building and querying it).
Queries are held-out entries (not in the index).  The flat row times a quarter of the queries
(its unfiltered recall ground truth is one batched exact search).  The baseline row is on by
default up to 200,000 entries (``--baseline on`` at 1M: its build takes ~6 min on 2 cores).

    python benchmarks/bench_index.py --entries 1000000 --queries 1000 --json --baseline on
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
    from tunedb.index.model.keys import key_of

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


def _time_queries(vi: vectors.VectorIndex, qs: np.ndarray, k: int, family: list[str] | None = None,
                  exclude: list[str] | None = None) -> tuple[np.ndarray, list, list]:
    """(latencies in ms, rows, scores) of one pass of single queries."""
    lat, rows, scores = [], [], []
    for i, q in enumerate(qs):
        t0 = time.perf_counter()
        r, s = vi.search(q, k, family=family[i] if family else None, exclude_target=exclude[i] if exclude else None)
        lat.append((time.perf_counter() - t0) * 1e3)
        rows.append(r)
        scores.append(s)
    return np.array(lat), rows, scores


def _passes(vi: vectors.VectorIndex, qs: np.ndarray, k: int, repeats: int, **filt) -> tuple[dict, list, list]:
    """p50/p99 (ms) of ``repeats`` query passes: the median over passes and the min/max spread."""
    p50, p99 = [], []
    for _ in range(max(1, repeats)):
        lat, rows, scores = _time_queries(vi, qs, k, **filt)
        p50.append(float(np.percentile(lat, 50)))
        p99.append(float(np.percentile(lat, 99)))
    st = {"p50": round(float(np.median(p50)), 4), "p99": round(float(np.median(p99)), 4),
          "p50_spread": [round(min(p50), 4), round(max(p50), 4)], "p99_spread": [round(min(p99), 4), round(max(p99), 4)]}
    return st, rows, scores


def _recall(rows: list, scores: list, ex_rows: list, ex_scores: list, k: int) -> float:
    return round(float(np.mean([vectors.recall_at_k(rows[i], ex_rows[i], ex_scores[i], scores[i], k)
                                for i in range(len(ex_rows))])), 4)


ROWS = {  # row name -> (kind, VectorIndex parameters, description)
    "flat": ("flat", {}, "IndexFlatIP (exact)"),
    "ivf": ("ivf", {}, f"IVFFlat nlist={vectors.IVF_LISTS_PER_SQRT:g}*sqrt(N) nprobe={vectors.IVF_NPROBE} (new default)"),
    "hnsw_baseline": ("hnsw", {"hnsw_m": 32, "ef_construction": 80, "ef_search": 64},
                      "HNSW M=32 efConstruction=80 efSearch=64 (previous default)"),
}


def run(n: int, n_queries: int, k: int = 10, build_threads: int | None = None, ef_search: int | None = None,
        nprobe: int | None = None, baseline: bool | None = None, repeats: int = 3) -> dict:
    """Build each row's index over ``n`` entries and measure it (see module docstring);
    ``baseline`` None = the HNSW baseline row only up to 200,000 entries."""
    t0 = time.perf_counter()
    x, tks, wks, fams = synthetic_entries(n + n_queries)
    gen_s = time.perf_counter() - t0
    qx, qfam, qtk = x[n:], fams[n:], tks[n:]
    x, tks, wks, fams = x[:n], tks[:n], wks[:n], fams[:n]
    nf = max(1, n_queries // 4)
    build_threads = build_threads or faiss.omp_get_max_threads()
    out: dict = {"entries": n, "queries": n_queries, "k": k, "dim": int(x.shape[1]), "generate_s": round(gen_s, 2),
                 "repeats": repeats, "build_threads": build_threads, "query_threads": 1,
                 "approx_kind": vectors.APPROX_KIND, "cpu_count": os.cpu_count(),
                 "loadavg_start": [round(v, 2) for v in os.getloadavg()]}
    names = ["flat", "ivf"] + (["hnsw_baseline"] if (baseline if baseline is not None else n <= 200_000) else [])
    truth: dict = {}
    for name in names:
        kind, params, desc = ROWS[name]
        params = dict(params)
        if kind == "ivf" and nprobe:
            params["nprobe"] = nprobe
        if kind == "hnsw" and ef_search:
            params["ef_search"] = ef_search
        faiss.omp_set_num_threads(build_threads)
        rss0 = _rss()
        t0 = time.perf_counter()
        vi = vectors.VectorIndex.build(x, tks, wks, fams, kind, **params)
        build_s = time.perf_counter() - t0
        r: dict = {"config": desc, "build_s": round(build_s, 3)}
        if kind == "ivf":
            r.update(nlist=vi.nlist, nprobe=vi.nprobe)
        if kind == "flat":
            d, i = vi.index.search(qx, k)  # ground truth: one batched exact search (not timed)
            truth["all"] = ([i[j][i[j] >= 0] for j in range(len(qx))], [d[j][i[j] >= 0] for j in range(len(qx))])
        faiss.omp_set_num_threads(1)  # one query at a time on one thread
        fam_kw = {"family": qfam[:nf]}
        ex_kw = {"family": qfam[:nf], "exclude": qtk[:nf]}
        if kind == "flat":
            st, _, _ = _passes(vi, qx[:nf], k, 1)
            fst, frows, fsc = _passes(vi, qx[:nf], k, 1, **fam_kw)
            est, erows, esc = _passes(vi, qx[:nf], k, 1, **ex_kw)
            truth["fam"], truth["ex"] = (frows, fsc), (erows, esc)
            rows, scores = truth["all"]
        else:
            st, rows, scores = _passes(vi, qx, k, repeats)
            fst, frows, fsc = _passes(vi, qx, k, repeats, family=qfam)
            est, erows, esc = _passes(vi, qx[:nf], k, repeats, **ex_kw)
        r.update({"nearest_ms_p50": st["p50"], "nearest_ms_p99": st["p99"], "nearest_ms_p50_spread": st["p50_spread"],
                  "nearest_ms_p99_spread": st["p99_spread"], "filtered_ms_p50": fst["p50"],
                  "filtered_ms_p99": fst["p99"], "exclude_ms_p50": est["p50"],
                  "recall_at_10": _recall(rows, scores, *truth["all"], k),
                  "filtered_recall_at_10": _recall(frows[:nf], fsc[:nf], *truth["fam"], k),
                  "exclude_recall_at_10": _recall(erows, esc, *truth["ex"], k),
                  "memory_bytes": vi.memory_bytes(), "rss_growth_bytes": max(0, _rss() - rss0)})
        out[name] = r
        del vi
    out["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--build-threads", type=int, default=None, help="FAISS threads while building (default: all)")
    p.add_argument("--ef-search", type=int, default=None, help="override the baseline's HNSW efSearch")
    p.add_argument("--nprobe", type=int, default=None, help="override IVF nprobe")
    p.add_argument("--baseline", choices=("auto", "on", "off"), default="auto",
                   help="the HNSW M=32/efC=80 baseline row (auto: only up to 200,000 entries)")
    p.add_argument("--repeats", type=int, default=3, help="query passes per approximate index (median reported)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.entries < 10 or a.queries < 1 or a.repeats < 1:
        sys.stderr.write("bench_index: error: --entries >= 10, --queries >= 1 and --repeats >= 1\n")
        return 2
    r = run(a.entries, a.queries, build_threads=a.build_threads, ef_search=a.ef_search, nprobe=a.nprobe,
            baseline={"auto": None, "on": True, "off": False}[a.baseline], repeats=a.repeats)
    if a.json:
        print(json.dumps(r, sort_keys=True))
    else:
        for name in ROWS:
            if name not in r:
                continue
            x = r[name]
            print(f"{name:13} N={r['entries']:>9} build {x['build_s']:8.2f} s  p50 {x['nearest_ms_p50']:8.3f} ms  "
                  f"p99 {x['nearest_ms_p99']:8.3f} ms  filtered p50 {x['filtered_ms_p50']:8.3f} ms  "
                  f"recall@10 {x['recall_at_10']:.4f}  memory {x['memory_bytes'] / 2**20:8.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
