"""Batch look-up of a tuner's population against a Python dict of the same records.

A DB (Parquet) holds ``--entries`` (target, workload) entries of ``--per-entry`` records each,
Kernel Tuner-like configs of 8 integer knobs.  A population of ``--population`` configs of one
entry, ``--hit-rate`` of them measured before, is looked up:

- ``dict``: the JSON-log tuner's index, a dict keyed by the canonical JSON of (target, workload,
  config), one ``get`` per config, canonicalising all three each time (what a look-up by value
  costs in a tuner that keeps its log in a dict; the dict is built beforehand, not timed);
- ``lookup``: ``db.lookup`` once per config;
- ``batch``: ``db.lookup_batch`` of the whole population (``found`` mask, no Record built);
- ``batch+hits``: the same, then every hit's Record read.

Each round times every method once, in an order shuffled per round, after a warm-up round
(the partition index is loaded); reported: the median time per config over ``--rounds``
rounds, the interquartile range, and the ratio to ``dict``.  Goal: ``batch`` <= 0.5x ``dict``.

    .venv/bin/python benchmarks/bench_lookup.py --json
    .venv/bin/python benchmarks/bench_lookup.py --population 500 --hit-rate 0.1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

import tunedb  # noqa: E402
from tunedb.index.model.keys import canonical_json  # noqa: E402

KNOBS = ("block_size_x", "block_size_y", "tile_size_x", "tile_size_y", "use_padding", "read_only",
         "filter_height", "filter_width")


def config(rng: random.Random) -> dict:
    return {k: rng.choice((1, 2, 4, 8, 16, 32, 64, 128)) for k in KNOBS}


def build(path: Path, entries: int, per_entry: int, seed: int) -> tuple[dict, dict, list, dict]:
    """The DB at ``path``; returns entry 0's target, workload and configs, and the dict index."""
    rng = random.Random(seed)
    db = tunedb.open(path)
    index: dict = {}
    first: tuple = ()
    for e in range(entries):
        target = {"kind": "gpu", "name": f"gpu{e % 7}", "vendor": "nvidia", "sms": 80 + e % 7, "driver": "550.1"}
        workload = {"family": "convolution_kernel", "problem_size": [4096, 4096 + e], "filter": [15, 15]}
        seen: set = set()
        recs = []
        while len(recs) < per_entry:
            c = config(rng)
            k = canonical_json(c)
            if k in seen:
                continue
            seen.add(k)
            recs.append(tunedb.Record(target, workload, c, [rng.uniform(1e-4, 1e-2)]))
        db.commit(recs)
        tj, wj = canonical_json(target), canonical_json(workload)
        for r in recs:
            index[(tj, wj, canonical_json(r.config))] = r.to_dict()
        if e == 0:
            first = (target, workload, [r.config for r in recs])
    db.close()
    return first[0], first[1], first[2], index


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=40)
    ap.add_argument("--per-entry", type=int, default=2000)
    ap.add_argument("--population", type=int, default=100)
    ap.add_argument("--hit-rate", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-lookup-"))
    target, workload, stored, index = build(work / "db", a.entries, a.per_entry, a.seed)
    db = tunedb.open(work / "db")
    rng = random.Random(a.seed + 1)
    stored_keys = {canonical_json(c) for c in stored}
    hits = rng.sample(stored, int(a.population * a.hit_rate))
    misses = []
    while len(misses) < a.population - len(hits):
        c = config(rng)
        if canonical_json(c) not in stored_keys:
            misses.append(c)
    population = hits + misses
    rng.shuffle(population)

    def by_dict():
        return [index.get((canonical_json(target), canonical_json(workload), canonical_json(c))) for c in population]

    tj, wj = canonical_json(target), canonical_json(workload)
    by_config = {k[2]: v for k, v in index.items() if k[:2] == (tj, wj)}

    def by_config_dict():
        return [by_config.get(canonical_json(c)) for c in population]

    def by_lookup():
        return [db.lookup(target, workload, c) for c in population]

    def by_batch():
        return db.lookup_batch(target, workload, population).found

    def by_batch_hits():
        return list(db.lookup_batch(target, workload, population))

    methods = {"dict": by_dict, "dict(config)": by_config_dict, "lookup": by_lookup, "batch": by_batch, "batch+hits": by_batch_hits}
    expect = [x is not None for x in by_dict()]
    assert sum(expect) == len(hits)
    for name, fn in methods.items():  # warm-up, and every method gives the same answers
        got = fn()
        found = got.tolist() if name == "batch" else [x is not None for x in got]
        assert found == expect, name
    times: dict[str, list[float]] = {k: [] for k in methods}
    for _ in range(a.rounds):
        order = list(methods)
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            methods[name]()
            times[name].append((time.perf_counter() - t0) / len(population) * 1e6)
    base = statistics.median(times["dict"])
    rows = {}
    for name, v in times.items():
        q = statistics.quantiles(v, n=4)
        rows[name] = {"median_us": round(statistics.median(v), 3), "iqr_us": [round(q[0], 3), round(q[2], 3)],
                      "ratio_to_dict": round(statistics.median(v) / base, 3)}
    out = {"host": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "records": len(index),
           "population": a.population, "hit_rate": a.hit_rate, "rounds": a.rounds, "goal_ratio": 0.5,
           "per_config": rows}
    db.close()
    shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{len(index)} records; population {a.population}, {len(hits)} hits; per config, median of "
              f"{a.rounds} rounds [IQR]:")
        for name, r in rows.items():
            print(f"  {name:12s} {r['median_us']:7.2f} us  [{r['iqr_us'][0]:.2f}, {r['iqr_us'][1]:.2f}]  "
                  f"{r['ratio_to_dict']:.2f}x dict")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
