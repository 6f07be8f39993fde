"""``tunedb space`` for a family tunedb has no definition of: what the DB's records hold, said so.

A Kernel Tuner cache imports as the family ``convolution_kernel``, which ``best`` and ``nearest``
accept; ``space`` describes it from its records (knobs and the values measured), and says that
the valid configs, their number and the default are the tuner's knowledge, not the DB's.
"""

from __future__ import annotations

import gzip
import json

from helpers import kernel_tuner_file, run_cli


def test_space_of_an_imported_kernel_tuner_family_comes_from_its_records(tmp_path):
    db = tmp_path / "db"
    cache = kernel_tuner_file("A4000")
    r = run_cli("import", "kernel-tuner", "--db", str(db), "--no-models", str(cache))
    assert r.returncode == 0, r.stderr
    r = run_cli("workloads", "--db", str(db), "--json")
    spec = json.loads(r.stdout)["targets"][0]["workloads"][0]["spec"]
    r = run_cli("space", "--db", str(db), "--workload", spec, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    with gzip.open(cache, "rt") as f:
        doc = json.load(f)
    assert out["source"] == "records" and out["size"] is None and out["default"] is None
    assert out["stored_configs"] == len(doc["cache"])
    knobs = {k["name"]: k["values"] for k in out["knobs"]}
    assert knobs == {k: sorted(v) for k, v in doc["tune_params"].items() if k in knobs}
    assert set(knobs) == set(doc["tune_params_keys"])
    human = run_cli("space", "--db", str(db), "--workload", spec).stdout
    assert "as stored" in human and "unknown" in human


def test_space_of_an_unknown_family_the_db_does_not_hold_is_one_line(tmp_path):
    db = tmp_path / "db"
    run_cli("init", "--db", str(db))
    r = run_cli("space", "--db", str(db), "--workload", '{"family": "nope", "x": 1}')
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
