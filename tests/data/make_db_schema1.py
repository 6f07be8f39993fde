"""Build ``tests/data/db-schema1/`` and ``tests/data/db-schema1.expected.json`` with tunedb 0.1.0.

The DB must be written by the previous release's own code (schema 1), not by today's, so run
this script with the ``v0.1.0`` tag (commit b4bcf60) importable as ``tunedb``::

    rm -rf /tmp/tunedb-v010 /tmp/v010site && mkdir -p /tmp/tunedb-v010 /tmp/v010site
    git archive v0.1.0 | tar -x -C /tmp/tunedb-v010
    ln -s /tmp/tunedb-v010 /tmp/v010site/tunedb
    cd /tmp && PYTHONPATH=/tmp/v010site /work/main/.venv/bin/python \\
        /work/main/tests/data/make_db_schema1.py /work/main/tests/data

(run it from a directory that does not hold a ``tunedb`` package, e.g. /tmp).  It refuses to
run unless the imported tunedb is 0.1.0 (schema 1).  What the DB holds (about 400 records):

* targets ``cpu-a`` and ``cpu-b`` (measured and replayed records, several workloads, failed
  records, repeated measurements of one config) and the GPU-like ``cuda -model=titanx`` of 40
  records imported from a slice of TopHub's ``cuda_v0.10.log`` (AutoTVM; ``meta.origin.file``
  is ``titanx-slice.log``); ``cpu-b``'s replayed records have ``meta.replay_file``;
* ``cpu-a`` invalidated part-way (older records stale, later ones live);
* one compacted partition (``cpart-`` file), plain ``part-`` files, and a last commit left in
  a journal (the process ends with ``os._exit`` while its handle is open, as a crash would).

The expected file holds what 0.1.0 answered on the finished DB (a fresh handle, opened after
the last commit): ``len``, ``entries``, ``best`` (k=3) per entry, ``lookup`` of a few triples
(stale, failed, repeated, imported, journaled), the sorted record_ids of ``records()`` and a
few ``stats`` fields.  Records are ``Record.to_dict()`` objects.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from pathlib import Path


def main(out_dir: Path) -> None:
    from tunedb.index.model.record import Record
    from tunedb.index.model.version import SCHEMA_VERSION, TUNEDB_VERSION
    from tunedb.index.parquet.store import ParquetStore
    from tunedb.transfer.interop import collect

    if (TUNEDB_VERSION, SCHEMA_VERSION) != ("0.1.0", 1):
        raise SystemExit(f"this is tunedb {TUNEDB_VERSION} (schema {SCHEMA_VERSION}); run it with v0.1.0")
    import tunedb

    tophub = Path(tunedb.__file__).resolve().parent / "datasets" / "tophub" / "cuda_v0.10.log"
    db_dir = out_dir / "db-schema1"
    if db_dir.exists():
        shutil.rmtree(db_dir)
    rng = random.Random(20261201)
    cpu_a = {"kind": "cpu", "name": "cpu-a", "model": "xeon-8380", "threads": 8, "vector_bits": 512}
    cpu_b = {"kind": "cpu", "name": "cpu-b", "model": "epyc-7763", "threads": 16, "vector_bits": 256}
    workloads = [{"family": "matmul", "m": m, "n": 256, "k": 256} for m in (64, 128, 256)] + \
                [{"family": "conv2d", "c": c, "h": 14, "w": 14, "k": 3} for c in (32, 64)]

    def config(i: int) -> dict:
        return {"tile_x": 2 ** (i % 5), "tile_y": 2 ** (i // 5 % 4), "unroll": i % 3 == 0}

    def measured(target: dict, w: dict, i: int, **kw) -> Record:
        fail = kw.pop("fail", None)
        if fail:
            return Record(target, w, config(i), costs=(), status=fail, error=f"{fail} in config {i}",
                          compile_s=0.1, **kw)
        base = 1e-3 * (1 + w.get("m", w.get("c", 1)) / 64)
        costs = tuple(round(base * (1 + rng.random()), 9) for _ in range(3))
        return Record(target, w, config(i), costs=costs, compile_s=round(rng.uniform(0.1, 2), 3),
                      wall_s=round(rng.uniform(0.5, 3), 3), session="gen", **kw)

    db = ParquetStore.open(db_dir)
    # cpu-a: 3 workloads x 30 configs in one large commit (part file), some failed
    recs = [measured(cpu_a, w, i, fail=("compile_error" if i % 11 == 0 else None)) for w in workloads[:3]
            for i in range(30)]
    db.commit(recs)
    # cpu-b: 5 workloads x 24 configs, in 3 commits (-> part files), then compacted
    for chunk in range(3):
        db.commit([measured(cpu_b, w, chunk * 8 + i, fail=("runtime_error" if i == 5 else None))
                   for w in workloads for i in range(8)])
    db.compact()
    # cpu-b: replayed records (meta.replay_file, as tunedb.transfer.measure.replay writes them)
    db.commit([measured(cpu_b, workloads[0], 100 + i, source="replay",
                        meta={"backend": "replay", "replay_file": "epyc-replay.json.gz"}) for i in range(70)])
    # the GPU-like target: a slice of an AutoTVM log
    src = Path(os.environ.get("TMPDIR", "/tmp")) / "tunedb-gen" / "titanx-slice.log"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("".join(tophub.read_text().splitlines(keepends=True)[:40]))
    imported, _ = collect("autotvm", [src])
    db.commit(imported)
    db.close()
    # cpu-a: invalidated; then newer measurements (small commits: journal, folded at close)
    time.sleep(0.01)
    db = ParquetStore.open(db_dir)
    db.invalidate(cpu_a)
    time.sleep(0.01)
    for i in range(0, 30, 3):
        db.commit(measured(cpu_a, workloads[0], i))  # re-measured after the invalidation: live again
    db.commit([measured(cpu_a, workloads[3], i) for i in range(20)])
    db.close()
    # re-measure one cpu-b config twice (the later one answers lookup)
    db = ParquetStore.open(db_dir)
    again = [measured(cpu_b, workloads[1], 3) for _ in range(2)]
    db.commit(again[0])
    time.sleep(0.01)
    db.commit(again[1])
    db.close()
    # the last commit stays in this handle's journal (the process exits without closing it)
    writer = ParquetStore.open(db_dir)
    last = [measured(cpu_a, workloads[4], i) for i in range(12)]
    writer.commit(last)

    reader = ParquetStore.open(db_dir)  # a fresh handle: reads the live writer's journal in place
    ents = reader.entries().to_pylist()
    triples = [
        ("stale cpu-a record", cpu_a, workloads[1], config(7)),
        ("re-measured after invalidation", cpu_a, workloads[0], config(3)),
        ("failed cpu-b record", cpu_b, workloads[2], config(5)),
        ("re-measured cpu-b config (latest answers)", cpu_b, workloads[1], config(3)),
        ("replayed", cpu_b, workloads[0], config(105)),
        ("imported", imported[3].target, imported[3].workload, imported[3].config),
        ("journaled", cpu_a, workloads[4], config(4)),
        ("never measured", cpu_b, workloads[3], config(99)),
    ]
    st = reader.stats()
    expected = {
        "written_by": f"tunedb {TUNEDB_VERSION} (schema {SCHEMA_VERSION})",
        "len": len(reader),
        "entries": ents,
        "best": [{"target_key": e["target_key"], "workload_key": e["workload_key"],
                  "records": [r.to_dict() for r in reader.best(e["target_key"], e["workload_key"], k=3)]}
                 for e in ents],
        "lookup": [{"what": what, "target": t, "workload": w, "config": c,
                    "record": (lambda r: r.to_dict() if r is not None else None)(reader.lookup(t, w, c))}
                   for what, t, w, c in triples],
        "record_ids": sorted(reader.records().column("record_id").to_pylist()),
        "live_record_ids": sorted(reader.records(include_stale=False).column("record_id").to_pylist()),
        "stats": {k: getattr(st, k) for k in ("records", "targets", "workloads", "entries", "stale_targets")},
        "origins": {r["record_id"]: (r["meta"] and json.loads(r["meta"]).get("origin", {}).get("file"))
                    or (r["meta"] and json.loads(r["meta"]).get("replay_file")) or ""
                    for r in reader.records().select(["record_id", "meta"]).to_pylist()},
    }
    (out_dir / "db-schema1.expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    lock = db_dir / "_lock"
    if lock.exists() and lock.stat().st_size == 0:
        lock.unlink()
    shutil.rmtree(src.parent, ignore_errors=True)
    sys.stdout.write(f"wrote {db_dir} ({expected['len']} records) and db-schema1.expected.json\n")
    sys.stdout.flush()
    os._exit(0)  # leave the writer's journal unfolded, as a crash would


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent))
