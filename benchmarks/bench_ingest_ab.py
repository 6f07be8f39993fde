"""Bulk ingest and durable commits of two tunedb versions, side by side: this tree and the tunedb of
a git revision (``--previous``), alternating round by round, each round in a fresh process.

Per round and version: N records (``bench_store.stream_batches``: RecordBatches of 250,000) into a
new DB, then the first query (which indexes them), then 300 durable single-record commits.
Medians and min-max over the rounds.  It measures; it asserts nothing.

    python benchmarks/bench_ingest_ab.py --records 1000000 --rounds 3 --previous 7933b0d --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r'''
import json, shutil, sys, tempfile, time
sys.path.insert(0, sys.argv[2])
import bench_store as b
from tunedb.index import Record, ParquetStore
n = int(sys.argv[1])
batches = list(b.stream_batches(n))
d = tempfile.mkdtemp(dir=sys.argv[3])
db = ParquetStore.open(d + "/db")
t0 = time.perf_counter()
for x in batches:
    db.commit(x)
ingest = n / (time.perf_counter() - t0)
t0 = time.perf_counter()
len(db)
index_s = time.perf_counter() - t0
t, w = {"kind": "cpu", "name": "commit-target"}, {"family": "matmul", "M": 8}
recs = [Record(t, w, {"i": i}, [1e-3]) for i in range(301)]
db.commit(recs[0])
t0 = time.perf_counter()
for r in recs[1:]:
    db.commit(r)
commit = 300 / (time.perf_counter() - t0)
shutil.rmtree(d)
print(json.dumps({"ingest_rec_per_s": ingest, "index_s": index_s, "commit_per_s": commit}))
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--previous", required=True, metavar="REF", help="git revision of the other tunedb")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench_ingest_ab_"))
    try:
        code = work / "previous" / "tunedb"
        code.mkdir(parents=True)
        arch = subprocess.run(["git", "-C", str(HERE.parent), "archive", a.previous], capture_output=True,
                              check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(code)], input=arch, check=True)
        runs: dict[str, list[dict]] = {"previous": [], "now": []}
        for _ in range(a.rounds):
            for which in ("previous", "now"):
                env = dict(os.environ)
                if which == "previous":
                    env["PYTHONPATH"] = str(code.parent) + os.pathsep + env.get("PYTHONPATH", "")
                out = subprocess.run([sys.executable, "-c", CHILD, str(a.records), str(HERE), str(work)], env=env,
                                     capture_output=True, text=True, check=True)
                runs[which].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res: dict = {"records": a.records, "rounds": a.rounds, "previous_ref": a.previous}
    for which, rs in runs.items():
        res[which] = {k: {"median": statistics.median(r[k] for r in rs), "min": min(r[k] for r in rs),
                          "max": max(r[k] for r in rs)} for k in rs[0]}
    res["ratios"] = {k: res["now"][k]["median"] / res["previous"][k]["median"] for k in runs["now"][0]}
    print(json.dumps(res, sort_keys=True) if a.json else json.dumps(res, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
