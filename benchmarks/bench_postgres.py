"""PostgreSQL store benchmark, beside the Parquet store (``tunedb.open(dir)``) in the same run,
on the same records (bench_store.py's generator).

Figures per store: commit_per_s (durable single-record commits), batch_commit_rec_per_s
(RecordBatch of 1000 per commit), ingest_rec_per_s (bulk: RecordBatches of 250,000),
lookup_us_p50/p99 (hits, random existing triples), best_us_p50 (k=5), open_s (median of 3: a
new handle plus its first lookup).  The PostgreSQL server is ``--url`` (a database it may fill)
or a private cluster started for the run (tests/pg_server.py; fsync on, default settings).
It measures; it asserts nothing.

    python benchmarks/bench_postgres.py --records 100000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_store import make_batch, make_records, pct, queries, time_calls, time_opens  # noqa: E402

import tunedb  # noqa: E402
from tunedb.index import Record  # noqa: E402


def bench(open_store, recs, n_queries: int, n_commits: int) -> dict:
    chunk = 250_000
    batches = [make_batch(recs[i:i + chunk]) for i in range(0, len(recs), chunk)]
    db = open_store()
    t0 = time.perf_counter()
    for b in batches:
        db.commit(b)
    n_all = len(db)
    ingest = len(recs) / (time.perf_counter() - t0)
    assert n_all == len(recs), (n_all, len(recs))
    del batches
    db.compact()
    qs = queries(recs, n_queries)
    open_s = time_opens(lambda: open_store().lookup(qs[0].target, qs[0].workload, qs[0].config))
    db = open_store()
    lat = time_calls(lambda r: db.lookup(r.target, r.workload, r.config), qs)
    blat = time_calls(lambda r: db.best(r.target, r.workload, 5) or None, qs[: max(100, n_queries // 10)])
    singles = [Record(r.target, r.workload, dict(r.config, extra=i), list(r.costs)) for i, r in enumerate(qs[:n_commits])]
    t0 = time.perf_counter()
    for r in singles:
        db.commit(r)
    commit = len(singles) / (time.perf_counter() - t0)
    more = [Record(r.target, r.workload, dict(r.config, batch=i), list(r.costs)) for i, r in enumerate(recs[:20_000])]
    bs = [make_batch(more[i:i + 1000]) for i in range(0, len(more), 1000)]
    t0 = time.perf_counter()
    for b in bs:
        db.commit(b)
    batch_commit = len(more) / (time.perf_counter() - t0)
    stats = db.stats()
    db.close()
    return {"ingest_rec_per_s": ingest, "commit_per_s": commit, "batch_commit_rec_per_s": batch_commit,
            "open_s": open_s, "lookup_us_p50": pct(lat, 0.5) * 1e6, "lookup_us_p99": pct(lat, 0.99) * 1e6,
            "best_us_p50": pct(blat, 0.5) * 1e6, "size_bytes": stats.size_bytes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=5_000)
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--url", default=os.environ.get("TUNEDB_BENCH_POSTGRES"),
                    help="admin URL of a server to create the benchmark database on (default: a private cluster)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    import pg_server

    work = Path(tempfile.mkdtemp(prefix="bench_pg_"))
    server = None
    try:
        admin = a.url
        if not admin:
            server = Path(tempfile.mkdtemp(prefix="bench_pg_server_"))
            admin = pg_server.start(server)
        url = pg_server.create_database(admin)
        recs = make_records(a.records)
        res: dict = {"records": len(recs), "queries": a.queries, "commits": a.commits,
                     "machine": {"cpus": os.cpu_count()}}
        res["postgres"] = bench(lambda: tunedb.open(url), recs, a.queries, a.commits)
        res["parquet"] = bench(lambda: tunedb.open(work / "pq"), recs, a.queries, a.commits)
        pg_server.drop_database(admin, url)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if server is not None:
            pg_server.stop(server)
            shutil.rmtree(server, ignore_errors=True)
    print(json.dumps(res, sort_keys=True) if a.json else json.dumps(res, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
