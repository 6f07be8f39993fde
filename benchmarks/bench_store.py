"""Store benchmark: tunedb's Parquet store against two baselines, on the same records, in one run.

Baselines
  jsonl   a JSON-lines log loaded whole into a dict (how AutoTVM logs and MetaSchedule's
          JSONDatabase work): append a line per commit, parse every line on open.
  json1   the seeds' design: one JSON file rewritten on every save (quadratic; only run at
          N <= 10,000 -- above that it is skipped and reported as null).

Rounds (``--rounds N``, default 3): the baseline and tunedb are measured in turn, metric by
metric, N times on the same records, so that the load of a shared machine hits both alike:
per round a fresh bulk ingest of each (the order alternating by round), a fresh open of each,
then lookups and ``best`` answered in alternating blocks of 500 queries (a new tunedb handle and a
new random sample of queries per round), then durable single-record commits alternating in 10
sub-rounds of 40.  ``rounds`` holds every round's figures and ratios; the ``tunedb`` and
``jsonl`` figures are medians over the rounds and ``ratios`` the medians of the per-round ratios
(``ratios_per_round`` lists them).  The benchmark's own objects (the generated records, the
loaded dict) are frozen out of the cyclic garbage collector (``gc.freeze``) once built, so that
neither side's allocations pay for collector passes over the other side's objects.

Figures (per store): ingest_rec_per_s (bulk; for tunedb a columnar ``RecordBatch`` per 250,000
records, with ingest_records_rec_per_s the same for lists of ``Record`` objects and
index_after_ingest_s the deferred indexing that the first query after a bulk commit pays),
commit_per_s (durable single-record commits, fsync'ed), open_s (median of 3), lookup_us_p50
(hits, random order), best_us_p50 and best_us_p99 (k=5, entries in random order, so most are
asked for the first time: tunedb ranked every entry of a target ahead of time, when its first
query loaded the target), size_bytes.  Record construction (canonical JSON + keys) is timed
once for all as record_build_per_s.  In a fresh process per store (``probe``): open_s, resident memory after
opening (rss_open_mb) and after 10,000 lookups (rss_mb), lookup and best percentiles there.
``writers``: K processes (and, for tunedb, K threads sharing one handle) each committing one
record at a time, durably, for a few seconds: total commits/s per K (group commit: the rate
should grow with K).  It measures; it asserts nothing.

    python benchmarks/bench_store.py --records 1000000 --json
    python benchmarks/bench_store.py --records 1000000 --previous 7933b0d --json  # + that tunedb, same run
    python benchmarks/bench_store.py --records 10000000 --json   # streamed in; no JSON-lines baseline

``--previous REF``: the tunedb of git revision REF (``git archive``) measured the same way in a
child process, on the same generated records, beside this one: the before/after of a change.

At 10M records the JSON-lines dict is not run (its 7.6 GB log would need ~45 GB of memory: 4.7 GB at 1M);
the records are generated and committed in RecordBatches of 250,000, and the queries touch two
targets of the 50.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tunedb.index import ParquetStore, Record, RecordBatch  # noqa: E402
from tunedb.index.model.keys import canonical_json  # noqa: E402


# ------------------------------------------------------------------------ fields, streaming
def shape(n: int) -> tuple[int, int]:
    """(targets, workloads) of an N-record set: up to 50 targets x 200 workloads, then more
    configs per entry (at 10M: 1,000 a (target, workload))."""
    n_targets = max(1, min(50, n // 2000))
    n_work = max(1, min(200, n // (n_targets * 10)))
    return n_targets, n_work


def fields(i: int, n: int) -> tuple[dict, dict, dict]:
    """(target, workload, config) of record ``i`` of an N-record set (deterministic)."""
    n_targets, n_work = shape(n)
    t = i % n_targets
    w = (i // n_targets) % n_work
    j = i // (n_targets * n_work)
    return ({"kind": "gpu", "name": f"dev{t}", "vendor": "nv", "sm": 80 + t},
            {"family": "conv2d", "N": 1, "C": 64 + w, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3},
            {"tile_x": 2 ** (j % 6), "tile_y": 2 ** ((j // 6) % 6), "unroll": j % 4, "vec": 4, "seq": j})


def stream_batches(n: int, chunk: int = 250_000):
    """The N records as RecordBatches of ``chunk`` records, built column-wise (no Record objects;
    one shared dict per target and workload), so 10M records never sit in memory at once."""
    n_targets, n_work = shape(n)
    rng = np.random.default_rng(0)
    tdicts = [fields(t, n)[0] for t in range(n_targets)]
    wdicts = [fields(w * n_targets, n)[1] for w in range(n_work)]
    for lo in range(0, n, chunk):
        idx = range(lo, min(n, lo + chunk))
        c = rng.uniform(1e-4, 1e-2, len(idx))
        yield RecordBatch.from_columns(
            target=[tdicts[i % n_targets] for i in idx], workload=[wdicts[(i // n_targets) % n_work] for i in idx],
            config=[fields(i, n)[2] for i in idx], costs=np.stack([c, c * 1.01, c * 0.99], 1).tolist(),
            compile_s=[0.5] * len(idx), wall_s=[1.0] * len(idx), source="measured")


def make_records(n: int, seed: int = 0) -> list[Record]:
    rng = random.Random(seed)
    n_targets, n_work = shape(n)
    targets = [fields(t, n)[0] for t in range(n_targets)]
    works = [fields(w * n_targets, n)[1] for w in range(n_work)]
    out = []
    for i in range(n):
        cfg = fields(i, n)[2]
        c = rng.uniform(1e-4, 1e-2)
        out.append(Record(targets[i % n_targets], works[(i // n_targets) % n_work], cfg, [c, c * 1.01, c * 0.99],
                          compile_s=0.5, wall_s=1.0, source="measured"))
    return out


def make_batch(recs: list[Record]) -> RecordBatch:
    """The same records (ids, values, timestamps) as one columnar RecordBatch, built the way a
    bulk producer would: parallel columns, one shared dict per distinct target and workload."""
    shared: dict[str, dict] = {}
    return RecordBatch.from_columns(
        target=[shared.setdefault(r.target_key, r.target) for r in recs],
        workload=[shared.setdefault(r.workload_key, r.workload) for r in recs],
        config=[r.config for r in recs], costs=[list(r.costs) for r in recs],
        compile_s=[r.compile_s for r in recs], wall_s=[r.wall_s for r in recs],
        timestamp=[r.timestamp for r in recs], source="measured", record_id=[r.record_id for r in recs])


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``; "" where unknown)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        return ""


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def dir_size(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def time_calls(fn, items) -> list[float]:
    """Seconds of ``fn(item)`` for each item; a None answer is an error (every query is a hit)."""
    out = []
    for it in items:
        t0 = time.perf_counter()
        res = fn(it)
        out.append(time.perf_counter() - t0)
        if res is None:
            raise AssertionError(f"no answer for {it!r}")
    return out


def time_opens(fn) -> float:
    """Median seconds of three calls of ``fn``."""
    opens = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        opens.append(time.perf_counter() - t0)
    return statistics.median(opens)


def queries(recs, n: int) -> list[Record]:
    rng = random.Random(1)
    return [recs[rng.randrange(len(recs))] for _ in range(n)]


# ----------------------------------------------------------------------------- tunedb
def bench_tunedb(recs, work: Path, n_queries: int, n_commits: int) -> dict:
    chunk = 250_000
    # bulk ingest of Record objects (into a scratch DB, removed)
    db = ParquetStore.open(work / "from_records")
    t0 = time.perf_counter()
    for i in range(0, len(recs), chunk):
        db.commit(recs[i:i + chunk])
    ingest_records = len(recs) / (time.perf_counter() - t0)
    shutil.rmtree(work / "from_records")
    # bulk ingest of RecordBatches (columnar; building them is timed apart, like building Records)
    t0 = time.perf_counter()
    batches = [make_batch(recs[i:i + chunk]) for i in range(0, len(recs), chunk)]
    batch_build = len(recs) / (time.perf_counter() - t0)
    path = work / "tunedb"
    db = ParquetStore.open(path)
    t0 = time.perf_counter()
    for b in batches:
        db.commit(b)
    ingest = len(recs) / (time.perf_counter() - t0)
    del batches
    t0 = time.perf_counter()
    n_all = len(db)  # the first query indexes the bulk-committed files
    first_query_s = time.perf_counter() - t0
    assert n_all == len(recs), (n_all, len(recs))
    db.compact()
    open_s = time_opens(lambda: ParquetStore.open(path))
    db = ParquetStore.open(path)
    qs = queries(recs, n_queries)
    lat = time_calls(lambda r: db.lookup(r.target, r.workload, r.config), qs)
    blat = time_calls(lambda r: db.best(r.target, r.workload, 5), qs[: max(100, n_queries // 10)])
    size = dir_size(path / "records")
    extra = [Record(r.target, r.workload, dict(r.config, extra=i), list(r.costs)) for i, r in enumerate(qs[:n_commits])]
    t0 = time.perf_counter()
    for r in extra:
        db.commit(r)
    commit = len(extra) / (time.perf_counter() - t0)
    return {"ingest_rec_per_s": ingest, "ingest_records_rec_per_s": ingest_records,
            "batch_build_per_s": batch_build, "index_after_ingest_s": first_query_s,
            "commit_per_s": commit, "open_s": open_s,
            "lookup_us_p50": pct(lat, 0.5) * 1e6, "lookup_us_p99": pct(lat, 0.99) * 1e6,
            "best_us_p50": pct(blat, 0.5) * 1e6, "best_us_p99": pct(blat, 0.99) * 1e6, "size_bytes": size}


# ------------------------------------------------------------------------------ jsonl
class JsonlLog:
    """Append-only JSON lines, loaded whole into a dict keyed by canonical (target, workload, config)."""

    def __init__(self, path: Path):
        self.path = path
        self.index: dict[tuple, dict] = {}
        self.by_entry: dict[tuple, list] = {}

    def load(self) -> None:
        self.index.clear()
        self.by_entry.clear()
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                key = (canonical_json(d["target"]), canonical_json(d["workload"]))
                self.index[key + (canonical_json(d["config"]),)] = d
                self.by_entry.setdefault(key, []).append(d)
        for v in self.by_entry.values():
            v.sort(key=lambda d: d["cost"] if d["cost"] is not None else float("inf"))

    def append(self, dicts, durable: bool) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(d) + "\n" for d in dicts))
            if durable:
                f.flush()
                os.fsync(f.fileno())

    def lookup(self, t, w, c):
        return self.index.get((canonical_json(t), canonical_json(w), canonical_json(c)))

    def best(self, t, w, k):
        return self.by_entry.get((canonical_json(t), canonical_json(w)), [])[:k]


def bench_jsonl(recs, work: Path, n_queries: int, n_commits: int) -> dict:
    log = JsonlLog(work / "log.jsonl")
    dicts = [r.to_dict() for r in recs]
    t0 = time.perf_counter()
    for i in range(0, len(dicts), 250_000):
        log.append(dicts[i:i + 250_000], durable=True)
    ingest = len(recs) / (time.perf_counter() - t0)
    open_s = time_opens(log.load)
    qs = queries(recs, n_queries)
    lat = time_calls(lambda r: log.lookup(r.target, r.workload, r.config), qs)
    blat = time_calls(lambda r: log.best(r.target, r.workload, 5), qs[: max(100, n_queries // 10)])
    size = dir_size(log.path)
    t0 = time.perf_counter()
    for i, r in enumerate(qs[:n_commits]):
        d = r.to_dict()
        d["config"] = dict(d["config"], extra=i)
        log.append([d], durable=True)
    commit = n_commits / (time.perf_counter() - t0)
    return {"ingest_rec_per_s": ingest, "commit_per_s": commit, "open_s": open_s,
            "lookup_us_p50": pct(lat, 0.5) * 1e6, "lookup_us_p99": pct(lat, 0.99) * 1e6,
            "best_us_p50": pct(blat, 0.5) * 1e6, "best_us_p99": pct(blat, 0.99) * 1e6, "size_bytes": size}


# ------------------------------------------------------------------------------ json1
def bench_json1(recs, work: Path, n_queries: int, n_commits: int) -> dict:
    """One JSON document rewritten (durably) on every save."""
    path = work / "db.json"
    store: list[dict] = []

    def save() -> None:
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(store, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    dicts = [r.to_dict() for r in recs]
    t0 = time.perf_counter()
    step = max(1, len(dicts) // 100)  # bulk: 100 saves
    for i in range(0, len(dicts), step):
        store.extend(dicts[i:i + step])
        save()
    ingest = len(recs) / (time.perf_counter() - t0)
    opens = []
    index: dict = {}
    for _ in range(3):
        t0 = time.perf_counter()
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        index = {(canonical_json(d["target"]), canonical_json(d["workload"]), canonical_json(d["config"])): d
                 for d in data}
        opens.append(time.perf_counter() - t0)
    rng = random.Random(1)
    qs = [recs[rng.randrange(len(recs))] for _ in range(n_queries)]
    lat = []
    for r in qs:
        t0 = time.perf_counter()
        assert index.get((canonical_json(r.target), canonical_json(r.workload), canonical_json(r.config)))
        lat.append(time.perf_counter() - t0)
    blat = []
    for r in qs[:100]:
        t0 = time.perf_counter()
        tk, wk = canonical_json(r.target), canonical_json(r.workload)
        sorted((d for (a, b, _), d in index.items() if a == tk and b == wk), key=lambda d: d["cost"])[:5]
        blat.append(time.perf_counter() - t0)
    size = dir_size(path)
    nc = min(n_commits, 50)
    t0 = time.perf_counter()
    for i in range(nc):
        d = dict(dicts[i])
        d["config"] = dict(d["config"], extra=i)
        store.append(d)
        save()
    commit = nc / (time.perf_counter() - t0)
    return {"ingest_rec_per_s": ingest, "commit_per_s": commit, "open_s": statistics.median(opens),
            "lookup_us_p50": pct(lat, 0.5) * 1e6, "lookup_us_p99": pct(lat, 0.99) * 1e6,
            "best_us_p50": pct(blat, 0.5) * 1e6, "best_us_p99": pct(blat, 0.99) * 1e6, "size_bytes": size}


# ------------------------------------------------------------- fresh-process probes
def rss_mb(field: str = "VmRSS") -> float:
    """Resident memory of this process now (``VmHWM``: its peak since exec), MiB (Linux /proc)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def write_queries(path: Path, triples: list[tuple[dict, dict, dict]]) -> None:
    path.write_text(json.dumps(triples))


def probe(kind: str, store_path: str, qfile: str) -> dict:
    """In this (fresh) process: open the store, measure resident memory, answer the queries
    (lookups, then best of the first tenth), measure again.  Every query must hit."""
    qs = json.loads(Path(qfile).read_text())
    base = rss_mb()
    t0 = time.perf_counter()
    if kind == "tunedb":
        db = ParquetStore.open(store_path)
        open_s = time.perf_counter() - t0
        lookup, best = db.lookup, db.best
    else:
        log = JsonlLog(Path(store_path))
        log.load()
        open_s = time.perf_counter() - t0
        lookup, best = log.lookup, log.best
    rss_open = rss_mb()
    lat = time_calls(lambda q: lookup(*q), qs)
    blat = time_calls(lambda q: best(q[0], q[1], 5) or None, qs[: max(100, len(qs) // 10)])
    return {"open_s": open_s, "rss_base_mb": base, "rss_open_mb": rss_open, "rss_mb": rss_mb(),
            "peak_rss_mb": rss_mb("VmHWM"),  # (not ru_maxrss: that counts the parent's pages before exec)
            "lookup_us_p50": pct(lat, 0.5) * 1e6, "lookup_us_p99": pct(lat, 0.99) * 1e6,
            "best_us_p50": pct(blat, 0.5) * 1e6, "best_us_p99": pct(blat, 0.99) * 1e6, "queries": len(qs)}


def run_probe(kind: str, store_path: Path, qfile: Path) -> dict:
    """``probe`` in a new Python process (its memory is the store's alone)."""
    import subprocess

    out = subprocess.run([sys.executable, __file__, "--probe", kind, "--path", str(store_path), "--qfile", str(qfile)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------- durable commits, interleaved
def bench_commits_interleaved(db_path: Path, log_path: Path, rounds: int = 30, per_round: int = 40) -> dict:
    """Durable single-record commits, tunedb and a JSON-lines append with one fsync each,
    alternating in rounds on the same disk (its fsync rate moves a lot from second to second
    here, so separate runs cannot be compared).  Rates per round; the ratio per round pair."""
    db = ParquetStore.open(db_path)
    t, w = {"kind": "cpu", "name": "commit-target"}, {"family": "matmul", "M": 48}
    db.commit(Record(t, w, {"warm": 1}, [1e-3]))
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    tun, jl = [], []
    try:
        for k in range(rounds):
            recs = [Record(t, w, {"round": k, "i": i}, [1e-3]) for i in range(per_round)]
            t0 = time.perf_counter()
            for r in recs:
                db.commit(r)
            tun.append(per_round / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for r in recs:
                os.write(fd, (json.dumps(r.to_dict()) + "\n").encode())
                os.fsync(fd)
            jl.append(per_round / (time.perf_counter() - t0))
    finally:
        os.close(fd)
    ratios = [a / b for a, b in zip(tun, jl)]
    return {"tunedb_per_s": statistics.median(tun), "jsonl_per_s": statistics.median(jl),
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "rounds": rounds, "per_round": per_round}


# ------------------------------------------------------------------- interleaved rounds
BLOCK = 500  # queries of one side before the other side's


def interleaved_latencies(sides: dict, items: list) -> dict[str, list[float]]:
    """Seconds of each side's ``fn(item)`` over ``items``, the sides taking turns in blocks of
    ``BLOCK`` items (each side answers every item); a None answer is an error."""
    out: dict[str, list[float]] = {name: [] for name in sides}
    for lo in range(0, len(items), BLOCK):
        for name, fn in sides.items():
            out[name].extend(time_calls(fn, items[lo:lo + BLOCK]))
    return out


def ingest_tunedb(batches: list, path: Path) -> tuple[float, float]:
    """(records/s of committing ``batches`` into a new DB at ``path``, seconds of the first
    query after it, which indexes the new files)."""
    db = ParquetStore.open(path)
    n = sum(len(b) for b in batches)
    t0 = time.perf_counter()
    for b in batches:
        db.commit(b)
    rate = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    assert len(db) == n, (len(db), n)
    return rate, time.perf_counter() - t0


def ingest_jsonl(dicts: list[dict], path: Path) -> float:
    """Records/s of appending ``dicts`` durably to a new JSON-lines log at ``path`` (250,000 a write)."""
    log = JsonlLog(path)
    t0 = time.perf_counter()
    for i in range(0, len(dicts), 250_000):
        log.append(dicts[i:i + 250_000], durable=True)
    return len(dicts) / (time.perf_counter() - t0)


def one_round(k: int, recs: list[Record], batches: list, dicts: list[dict], work: Path, db_path: Path,
              log: JsonlLog, a: argparse.Namespace) -> dict:
    """Round ``k``: each metric of tunedb (the DB at ``db_path``) and of the JSON-lines dict
    (``log``) measured in turn (see module docstring).  Returns {side: {metric: value}}."""
    t: dict = {}
    j: dict = {}
    scratch = work / f"round{k}"
    scratch.mkdir()
    for side in (("tunedb", "jsonl") if k % 2 == 0 else ("jsonl", "tunedb")):
        if side == "tunedb":
            t["ingest_rec_per_s"], t["index_after_ingest_s"] = ingest_tunedb(batches, scratch / "tunedb")
            shutil.rmtree(scratch / "tunedb")
        else:
            j["ingest_rec_per_s"] = ingest_jsonl(dicts, scratch / "log.jsonl")
            (scratch / "log.jsonl").unlink()
    t["open_s"] = time_opens(lambda: ParquetStore.open(db_path))
    t0 = time.perf_counter()
    log.load()
    j["open_s"] = time.perf_counter() - t0
    gc.freeze()  # (the loaded dict: the store itself, not scanned again by the collector)
    db = ParquetStore.open(db_path)  # a new handle: every target is touched first in this round
    rng = random.Random(1000 + k)
    qs = [recs[rng.randrange(len(recs))] for _ in range(a.queries)]
    lat = interleaved_latencies({"tunedb": lambda r: db.lookup(r.target, r.workload, r.config),
                                 "jsonl": lambda r: log.lookup(r.target, r.workload, r.config)}, qs)
    blat = interleaved_latencies({"tunedb": lambda r: db.best(r.target, r.workload, 5) or None,
                                  "jsonl": lambda r: log.best(r.target, r.workload, 5) or None},
                                 qs[: max(100, a.queries // 10)])
    for side, d in (("tunedb", t), ("jsonl", j)):
        d.update({"lookup_us_p50": pct(lat[side], 0.5) * 1e6, "lookup_us_p99": pct(lat[side], 0.99) * 1e6,
                  "best_us_p50": pct(blat[side], 0.5) * 1e6, "best_us_p99": pct(blat[side], 0.99) * 1e6})
    ci = bench_commits_interleaved(scratch / "ci-db", scratch / "ci.jsonl", rounds=10, per_round=40)
    t["commit_per_s"], j["commit_per_s"] = ci["tunedb_per_s"], ci["jsonl_per_s"]
    t["commit_ratio"] = ci["ratio_median"]
    shutil.rmtree(scratch, ignore_errors=True)
    return {"tunedb": t, "jsonl": j}


#: per-round ratio name -> (metric, True: tunedb / jsonl, False: jsonl / tunedb)
ROUND_RATIOS = {"lookup_vs_jsonl": ("lookup_us_p50", True), "lookup_p99_vs_jsonl": ("lookup_us_p99", True),
                "best_vs_jsonl": ("best_us_p50", True), "best_p99_vs_jsonl": ("best_us_p99", True),
                "ingest_vs_jsonl": ("ingest_rec_per_s", True), "open_speedup_vs_jsonl": ("open_s", False)}


def round_ratios(r: dict) -> dict[str, float]:
    """The ratios of one round (``ROUND_RATIOS``; commits: the median of its sub-rounds' ratios)."""
    t, j = r["tunedb"], r["jsonl"]
    out = {name: (t[m] / j[m] if fwd else j[m] / t[m]) for name, (m, fwd) in ROUND_RATIOS.items()}
    out["commit_vs_jsonl"] = t["commit_ratio"]
    return out


def medians(rounds: list[dict], side: str) -> dict[str, float]:
    """Each metric of ``side`` (tunedb, jsonl): its median over ``rounds``."""
    return {m: statistics.median(r[side][m] for r in rounds) for m in rounds[0][side]}


def bench_rounds(recs: list[Record], work: Path, a: argparse.Namespace) -> dict:
    """The interleaved rounds (see module docstring): the query stores are built once (tunedb
    compacted), then ``a.rounds`` rounds of ``one_round``.  Returns the per-round figures and
    ratios and their medians, and the figures measured once (Record-list ingest, batch build,
    size)."""
    chunk = 250_000
    db = ParquetStore.open(work / "from_records")  # bulk ingest of Record objects (scratch, removed)
    t0 = time.perf_counter()
    for i in range(0, len(recs), chunk):
        db.commit(recs[i:i + chunk])
    ingest_records = len(recs) / (time.perf_counter() - t0)
    del db
    shutil.rmtree(work / "from_records")
    t0 = time.perf_counter()
    batches = [make_batch(recs[i:i + chunk]) for i in range(0, len(recs), chunk)]
    batch_build = len(recs) / (time.perf_counter() - t0)
    dicts = [r.to_dict() for r in recs]
    gc.freeze()
    db_path = work / "tunedb"
    ingest_tunedb(batches, db_path)
    ParquetStore.open(db_path).compact()
    log = JsonlLog(work / "log.jsonl")
    ingest_jsonl(dicts, log.path)
    rounds = []
    for k in range(a.rounds):
        r = one_round(k, recs, batches, dicts, work, db_path, log, a)
        r["ratios"] = round_ratios(r)
        rounds.append(r)
    log.index.clear()  # (its memory back before the fresh-process probes)
    log.by_entry.clear()
    t, j = medians(rounds, "tunedb"), medians(rounds, "jsonl")
    t.update({"ingest_records_rec_per_s": ingest_records, "batch_build_per_s": batch_build,
              "size_bytes": dir_size(db_path / "records")})
    j["size_bytes"] = dir_size(log.path)
    return {"tunedb": t, "jsonl": j, "rounds": rounds}


# ------------------------------------------------------------------ concurrent writers
def _writer(kind: str, path: str, seconds: float, go, wid: int, q) -> None:
    """Commit one record at a time, durably, for ``seconds`` once ``go`` holds the start time;
    put "ready" first, then the count."""
    t = {"kind": "cpu", "name": f"writer-target-{wid % 2}"}
    w = {"family": "matmul", "M": 64, "N": 64, "K": 64}
    if kind == "tunedb":
        db = ParquetStore.open(path)
        db.commit(Record(t, w, {"warmup": wid}, [1e-3]))
        put = db.commit
    else:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

        def put(r: Record) -> None:
            os.write(fd, (json.dumps(r.to_dict()) + "\n").encode())
            os.fsync(fd)
    recs = [Record(t, w, {"wid": wid, "i": i}, [1e-3]) for i in range(20_000)]
    q.put("ready")
    while go.value == 0.0:
        time.sleep(0.001)
    while time.time() < go.value:
        time.sleep(0.0005)
    n, end = 0, go.value + seconds
    while time.time() < end and n < len(recs):
        put(recs[n])
        n += 1
    q.put(n)


def writers_rate(kind: str, path: Path, k: int, seconds: float = 3.0) -> float:
    """Total durable single-record commits/s of ``k`` writer processes on one store."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    go = ctx.Value("d", 0.0)
    ps = [ctx.Process(target=_writer, args=(kind, str(path), seconds, go, i, q)) for i in range(k)]
    for p in ps:
        p.start()
    for _ in ps:
        assert q.get(timeout=300) == "ready"
    go.value = time.time() + 0.2  # every process has imported, opened and built its records
    total = sum(q.get(timeout=120) for _ in ps)
    for p in ps:
        p.join()
    return total / seconds


def threads_rate(path: Path, k: int, seconds: float = 3.0) -> float:
    """Total durable single-record commits/s of ``k`` threads sharing one tunedb handle."""
    import threading

    db = ParquetStore.open(path)
    counts = [0] * k
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        t, w = {"kind": "cpu", "name": "thread-target"}, {"family": "matmul", "M": 32}
        while time.perf_counter() < stop:
            db.commit(Record(t, w, {"thread": i, "n": counts[i]}, [1e-3]))
            counts[i] += 1
    ts = [threading.Thread(target=run, args=(i,)) for i in range(k)]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    return sum(counts) / seconds


def bench_writers(work: Path, ks: tuple[int, ...] = (1, 2, 4, 8)) -> dict:
    """Concurrent durable writers: tunedb processes, tunedb threads (one handle), JSON-lines processes."""
    out: dict = {"processes": {}, "threads": {}, "jsonl_processes": {}}
    for k in ks:
        out["processes"][k] = writers_rate("tunedb", work / f"wp{k}", k)
        out["threads"][k] = threads_rate(work / f"wt{k}", k)
        out["jsonl_processes"][k] = writers_rate("jsonl", work / f"wj{k}.jsonl", k)
    return out


# ------------------------------------------------------------------------------ 10M
def bench_streamed(n: int, work: Path, n_queries: int, n_commits: int) -> dict:
    """N records streamed in as RecordBatches; queries of two targets in a fresh process."""
    path = work / "tunedb"
    db = ParquetStore.open(path)
    build = ingest = 0.0
    for b in _timed_iter(stream_batches(n)):
        build += b[1]
        t0 = time.perf_counter()
        db.commit(b[0])
        ingest += time.perf_counter() - t0
    t0 = time.perf_counter()
    db.compact()
    compact_s = time.perf_counter() - t0
    del db
    n_targets, n_work = shape(n)
    rng = random.Random(1)
    per_t = n // n_targets
    # queries of targets 0 and 1: record i = t + n_targets * m
    triples = [fields(t + n_targets * rng.randrange(per_t), n) for t in (0, 1) for _ in range(n_queries // 2)]
    rng.shuffle(triples)
    qfile = work / "queries.json"
    write_queries(qfile, triples)
    opens = [run_probe("tunedb", path, qfile) for _ in range(3)]
    p = sorted(opens, key=lambda d: d["open_s"])[1]  # the median open
    db = ParquetStore.open(path)
    extra = [Record(t, w, dict(c, extra=i), [1e-3]) for i, (t, w, c) in enumerate(triples[:n_commits])]
    t0 = time.perf_counter()
    for r in extra:
        db.commit(r)
    commit = len(extra) / (time.perf_counter() - t0)
    return {"records": n, "batch_build_per_s": n / build, "ingest_rec_per_s": n / ingest, "compact_s": compact_s,
            "open_s": p["open_s"], "open_s_all": [d["open_s"] for d in opens], "rss_open_mb": p["rss_open_mb"],
            "rss_mb": p["rss_mb"], "peak_rss_mb": p["peak_rss_mb"], "lookup_us_p50": p["lookup_us_p50"],
            "lookup_us_p99": p["lookup_us_p99"], "best_us_p50": p["best_us_p50"], "commit_per_s": commit,
            "size_bytes": dir_size(path / "records"), "targets_queried": 2, "targets": n_targets}


def _timed_iter(it):
    """(item, seconds it took to produce) of each item of ``it``."""
    while True:
        t0 = time.perf_counter()
        try:
            x = next(it)
        except StopIteration:
            return
        yield x, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (>= 1; medians reported)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir, removed)")
    ap.add_argument("--no-writers", action="store_true", help="skip the concurrent-writer figures")
    ap.add_argument("--previous", metavar="REF", help="also measure the tunedb of this git revision (see above)")
    ap.add_argument("--tunedb-only", action="store_true", help=argparse.SUPPRESS)  # (the --previous child)
    ap.add_argument("--probe", choices=("tunedb", "jsonl"), help=argparse.SUPPRESS)  # (the fresh-process probe)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--qfile", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if a.probe:
        print(json.dumps(probe(a.probe, a.path, a.qfile)))
        return 0
    if a.records > 2_000_000:
        return main_streamed(a)
    if a.tunedb_only:
        return main_tunedb_only(a)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench_store_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        recs = make_records(a.records)
        build = len(recs) / (time.perf_counter() - t0)
        gc.collect()
        gc.freeze()  # (the generated records: the benchmark's, neither store's)
        res: dict = {"records": len(recs), "record_build_per_s": build, "rounds_run": a.rounds,
                     "machine": {"cpus": os.cpu_count(), "model": cpu_model()}}
        (work / "r").mkdir()
        got = bench_rounds(recs, work / "r", a)
        res["tunedb"], res["jsonl"], res["rounds"] = got["tunedb"], got["jsonl"], got["rounds"]
        if a.records <= 10_000:
            (work / "o").mkdir()
            res["json1"] = bench_json1(recs, work / "o", a.queries, a.commits)
        else:
            res["json1"] = None
            res["json1_note"] = "skipped: rewriting one JSON file per save is quadratic; run with --records <= 10000"
        qfile = work / "queries.json"
        write_queries(qfile, [(r.target, r.workload, r.config) for r in queries(recs, a.queries)])
        del recs
        if a.previous:
            res["previous"] = run_previous(a, work)
        res["probe"] = {"tunedb": run_probe("tunedb", work / "r" / "tunedb", qfile),
                        "jsonl": run_probe("jsonl", work / "r" / "log.jsonl", qfile)}
        per_round = [r["ratios"] for r in res["rounds"]]
        res["ratios_per_round"] = {name: [x[name] for x in per_round] for name in per_round[0]}
        if not a.no_writers:
            (work / "w").mkdir()
            res["writers"] = bench_writers(work / "w")
        t, j, pt, pj = res["tunedb"], res["jsonl"], res["probe"]["tunedb"], res["probe"]["jsonl"]
        res["ratios"] = {
            **{name: statistics.median(xs) for name, xs in res["ratios_per_round"].items()},
            "size_vs_jsonl": t["size_bytes"] / j["size_bytes"],
            "fresh_process_lookup_vs_jsonl": pt["lookup_us_p50"] / pj["lookup_us_p50"],
            "fresh_process_best_vs_jsonl": pt["best_us_p50"] / pj["best_us_p50"],
            "fresh_process_open_speedup_vs_jsonl": pj["open_s"] / pt["open_s"],
            "rss_vs_jsonl": (pt["rss_mb"] - pt["rss_base_mb"]) / (pj["rss_mb"] - pj["rss_base_mb"]),
        }
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(res, sort_keys=True))
    else:
        print(json.dumps(res, indent=2, sort_keys=True))
    return 0


def main_tunedb_only(a: argparse.Namespace) -> int:
    """The tunedb figures alone (in-process, fresh-process probe, writers): the --previous child."""
    work = Path(tempfile.mkdtemp(prefix="bench_store_prev_"))
    try:
        recs = make_records(a.records)
        (work / "t").mkdir()
        res = {"tunedb": bench_tunedb(recs, work / "t", a.queries, a.commits)}
        qfile = work / "queries.json"
        write_queries(qfile, [(r.target, r.workload, r.config) for r in queries(recs, a.queries)])
        del recs
        res["probe"] = run_probe("tunedb", work / "t" / "tunedb", qfile)
        if not a.no_writers:
            (work / "w").mkdir()
            res["writers"] = bench_writers(work / "w")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res, sort_keys=True))
    return 0


def run_previous(a: argparse.Namespace, work: Path) -> dict:
    """This benchmark's tunedb figures for the tunedb of git revision ``a.previous``: its tree
    (``git archive``) first on the import path of a child process."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    code = work / "previous" / "tunedb"
    code.mkdir(parents=True)
    arch = subprocess.run(["git", "-C", str(root), "archive", a.previous], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(code)], input=arch, check=True)
    env = dict(os.environ, PYTHONPATH=str(code.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [sys.executable, __file__, "--tunedb-only", "--records", str(a.records), "--queries", str(a.queries),
            "--commits", str(a.commits)] + (["--no-writers"] if a.no_writers else [])
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["ref"] = a.previous
    return res


def main_streamed(a: argparse.Namespace) -> int:
    """--records above 2M: streamed in, tunedb alone (see module docstring)."""
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench_store_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        res = {"records": a.records, "machine": {"cpus": os.cpu_count()},
               "tunedb": bench_streamed(a.records, work, a.queries, a.commits),
               "jsonl": None, "jsonl_note": "skipped above 2M records: the log would not fit in memory here"}
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res, sort_keys=True) if a.json else json.dumps(res, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
