"""Layered stores (``tunedb.index.views.layered.LayeredStore``) and the CLI's ``--db``/``--also``/``--layers``.

The whole RecordStore contract runs against a layered store in tests/index_tests/test_store_contract.py;
these tests cover what only several layers have: ordered vs union answers, read-only lower
layers (a read-only bind mount, so that even root cannot write), writes landing in the top
layer, copies counted once, verdicts and invalidations across layers, nearest over all layers."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tunedb
from tunedb.index.views.layered import LayeredStore
from tunedb.transfer.migration.copy import copy_records

from helpers import run_cli, run_command

T1 = {"kind": "cpu", "name": "alpha", "compiler": "gcc 12", "vector_bits": 256, "threads": 1}
T2 = {"kind": "cpu", "name": "beta", "compiler": "gcc 12", "vector_bits": 512, "threads": 1}
W = {"family": "matmul", "M": 64, "N": 64, "K": 64}
W2 = {"family": "matmul", "M": 128, "N": 128, "K": 128}
WSPEC = "matmul:M=64,N=64,K=64"


def rec(tile, cost, target=T1, workload=W, **kw):
    return tunedb.Record(target, workload, {"tile": tile}, [cost], **kw)


@contextlib.contextmanager
def read_only(src: Path, where: Path) -> Iterator[Path]:
    """``src`` mounted read-only at ``where`` (a bind mount remounted ro: root cannot write
    either).  Skips when mounting is not possible (not root, a container without mount)."""
    where.mkdir(parents=True, exist_ok=True)
    why = run_command(["mount", "--bind", str(src), str(where)])
    if why is None:
        why = run_command(["mount", "-o", "remount,ro,bind", str(where)])
        if why is not None:
            run_command(["umount", str(where)])
    if why is not None:
        pytest.skip(f"cannot make a read-only bind mount: {why}")
    try:
        probe = where / "probe"
        with pytest.raises(OSError):
            probe.write_text("x")
        yield where
    finally:
        if run_command(["umount", str(where)]) is not None:
            run_command(["umount", "-l", str(where)])


@pytest.fixture
def two_layers(tmp_path):
    """top (Parquet) holds tiles 0-2 at 3-5 ms and a timeout of tile 9; lower (Parquet) holds
    tiles 1-4 at 1-4 ms and an ok tile 9 at 9 ms: the same entry, different records."""
    top, lower = tunedb.open(tmp_path / "top"), tunedb.open(tmp_path / "lower")
    top.commit([rec(0, 3e-3), rec(1, 4e-3), rec(2, 5e-3),
                tunedb.Record(T1, W, {"tile": 9}, [], status="timeout")])
    lower.commit([rec(1, 1e-3), rec(2, 2e-3), rec(3, 3e-3), rec(4, 4e-3), rec(9, 9e-3)])
    yield top, lower
    top.close()
    lower.close()


def test_ordered_and_union_answers(two_layers):
    top, lower = two_layers
    ordered = LayeredStore([top, lower])
    union = LayeredStore([top, lower], mode="union")
    # ordered: the first layer with the triple / with any ok record of the entry answers
    assert ordered.lookup(T1, W, {"tile": 1}).cost == 4e-3
    assert ordered.lookup(T1, W, {"tile": 3}).cost == 3e-3  # only the lower layer has it
    assert ordered.lookup(T1, W, {"tile": 9}).status == "timeout"
    assert [(r.config["tile"], r.cost) for r in ordered.best(T1, W, 3)] == [(0, 3e-3), (1, 4e-3), (2, 5e-3)]
    # union: every layer's records of a config count in its estimate (the median of its
    # records); lookup: the fastest ok answer
    assert union.lookup(T1, W, {"tile": 1}).cost == 1e-3
    assert union.lookup(T1, W, {"tile": 9}).cost == 9e-3  # ran fine somewhere: not a failure
    got = [(c.config["tile"], c.cost, c.estimate.records) for c in union.best_costs(T1, W, 4)]
    assert got == [(1, pytest.approx(2.5e-3), 2), (0, 3e-3, 1), (3, 3e-3, 1), (2, pytest.approx(3.5e-3), 2)]
    assert [r.config["tile"] for r in union.best(T1, W, 4)] == [1, 0, 3, 2]
    assert ordered.cost(T1, W, {"tile": 1}).value == 4e-3 and union.cost(T1, W, {"tile": 1}).records == 2
    assert ordered.lookup(T1, W, {"tile": 77}) is None and union.best(T2, W) == []
    # an entry only the lower layer has answers in both modes
    lower.commit(rec(5, 7e-3, workload=W2))
    assert ordered.best(T1, W2)[0].cost == union.best(T1, W2)[0].cost == 7e-3
    assert ordered.location == f"{top.location} + {lower.location}"
    assert len(ordered) == 10 and ordered.stats().entries == 2


def test_bottom_layer_read_only_and_commits_land_on_top(tmp_path):
    built = tunedb.open(tmp_path / "published")
    built.commit([rec(i, (i + 1) * 1e-3) for i in range(5)])
    built.close()
    with read_only(tmp_path / "published", tmp_path / "ro") as ro:
        lower = tunedb.open(ro, create=False)
        with pytest.raises(OSError):
            lower.commit(rec(50, 1e-3))  # the medium refuses: the lower layer really is read-only
        top = tunedb.open(tmp_path / "top")
        db = LayeredStore([top, lower])
        assert len(db) == 5 and db.best(T1, W)[0].cost == 1e-3
        fresh = rec(7, 5e-4)
        assert db.commit(fresh) == 1
        assert db.commit(rec(7, 5e-4, record_id=fresh.record_id)) == 0
        assert db.commit(next(lower.iter_records())) == 0  # held by the lower layer: already stored
        assert len(top) == 1 and len(lower) == 5 and len(db) == 6
        assert db.best(T1, W)[0].record_id == fresh.record_id
        assert db.nearest(T1, W, k=1)[0].best[0].record_id == fresh.record_id  # cache under top/derived
        assert (tmp_path / "top" / "derived" / "layered").is_dir()
        view = LayeredStore([lower], writable=None)
        for write in (lambda: view.commit(fresh), lambda: view.mark({fresh.record_id: "verified"}),
                      lambda: view.invalidate("alpha"), view.compact, view.dedup,
                      lambda: view.forget(keep_top=1)):
            with pytest.raises(ValueError, match="read-only"):
                write()
        assert view.lookup(T1, W, {"tile": 0}).cost == 1e-3 and view.nearest(T1, W, k=1)
        view.refresh()
        view.close()
        db.close()


def test_copies_count_once(two_layers, tmp_path):
    top, lower = two_layers
    copy_records(lower, top)  # the top now holds every lower record too (same record_ids)
    db = LayeredStore([top, lower])
    assert len(top) == 9 and len(db) == 9
    t = db.records()
    assert t.num_rows == 9 and len(set(t.column("record_id").to_pylist())) == 9
    e = db.entry_list()
    assert len(e) == 1 and e[0].records == 9
    s = db.stats()
    assert (s.records, s.entries, s.targets) == (9, 1, 1)
    assert db.targets()[0]["records"] == 9


def test_refuted_in_a_lower_layer_through_a_top_verdict(two_layers):
    top, lower = two_layers
    db = LayeredStore([top, lower], mode="union")
    fast = lower.lookup(T1, W, {"tile": 1})
    assert db.best_costs(T1, W)[0].config == {"tile": 1} and db.cost(T1, W, {"tile": 1}).records == 2
    assert db.mark({fast.record_id: "refuted"}) == 1
    assert top.verdicts() == {fast.record_id: "refuted"} and lower.verdicts() == {}  # stored on top
    assert db.verdicts() == {fast.record_id: "refuted"}
    assert db.lookup(T1, W, {"tile": 1}).cost == 4e-3  # the top's measurement of that config
    assert db.cost(T1, W, {"tile": 1}).value == 4e-3 and db.cost(T1, W, {"tile": 1}).records == 1
    assert [r.config["tile"] for r in db.best(T1, W, 2)] == [0, 3]
    assert fast.record_id in db.records().column("record_id").to_pylist() and len(db) == 9
    with pytest.raises(ValueError, match="no such record"):
        db.mark({"0" * 32: "refuted"})
    # a verdict in the lower layer hides the top's copy of the same record too
    copy_records(lower, top)
    other = lower.lookup(T1, W, {"tile": 2})
    lower.mark({other.record_id: "refuted"})
    db.refresh()
    assert other.record_id not in [r.record_id for r in db.best(T1, W, 5)]
    # the top's own measurement answers, not the hidden copy committed after it
    assert LayeredStore([top, lower]).lookup(T1, W, {"tile": 2}).cost == 5e-3
    assert LayeredStore([top, lower]).lookup(T1, W, {"tile": 3}).cost == 3e-3
    lower.mark({lower.lookup(T1, W, {"tile": 3}).record_id: "refuted"})
    assert LayeredStore([top, lower]).lookup(T1, W, {"tile": 3}) is None  # the only measurement is refuted


def test_invalidate_a_target_only_a_lower_layer_holds(two_layers):
    top, lower = two_layers
    lower.commit(rec(1, 1e-3, target=T2))
    db = LayeredStore([top, lower])
    assert db.best(T2, W)[0].cost == 1e-3
    key = db.invalidate("beta")
    assert key == tunedb.Record(T2, W, {}).target_key
    assert db.best(T2, W) == [] and db.lookup(T2, W, {"tile": 1}) is None
    assert lower.best(T2, W)[0].cost == 1e-3 and lower.stats().stale_targets == []  # lower untouched
    assert db.records(T2, include_stale=False).num_rows == 0 and db.records(T2).num_rows == 1
    time.sleep(0.002)
    db.commit(rec(1, 2e-3, target=T2))
    assert db.best(T2, W)[0].cost == 2e-3
    with pytest.raises(ValueError):
        db.invalidate({"kind": "cpu", "name": "never-seen"})


def test_nearest_finds_entries_only_a_lower_layer_has(two_layers):
    top, lower = two_layers
    lower.commit([rec(0, 2e-3, target=T2, workload=W2)])
    db = LayeredStore([top, lower])
    got = db.nearest(T1, W2, k=5, exclude_target=True)
    assert [(m.target_name, m.workload["M"]) for m in got] == [("beta", 128)]
    assert got[0].best[0].cost == 2e-3
    token = db.change_token()
    lower.commit(rec(3, 1e-3, target={**T2, "name": "gamma"}))
    assert db.change_token() != token
    assert "gamma" in [m.target_name for m in db.nearest(T1, W, k=5)]


def test_bad_arguments():
    with pytest.raises(ValueError):
        LayeredStore([])
    with pytest.raises(ValueError, match="mode"):
        LayeredStore([tunedb.open("memory:")], mode="sideways")
    with pytest.raises(ValueError, match="writable"):
        LayeredStore([tunedb.open("memory:")], writable=3)


# ---------------------------------------------------------------------------- the CLI
def _cli_db(path: Path, costs: list[float], target=T1) -> None:
    db = tunedb.open(path)
    db.commit([rec(i, c, target=target) for i, c in enumerate(costs)])
    db.close()


def _best(*args: str) -> list[float]:
    p = run_cli("best", "--target", "alpha", "--workload", WSPEC, "-k", "2", *args)
    assert p.returncode == 0, p.stderr
    return [r["cost"] for r in json.loads(p.stdout)["records"]]


def test_cli_layers(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _cli_db(a, [3e-3, 4e-3])
    _cli_db(b, [1e-3, 2e-3, 5e-3])
    assert _best("--db", str(a), "--json") == [3e-3, 4e-3]
    assert _best("--db", str(a), "--also", str(b), "--json") == [3e-3, 4e-3]  # ordered: a answers
    # union: both layers' records of a config count (the median of 3 and 1 ms, of 4 and 2 ms)
    assert _best("--db", str(a), "--also", str(b), "--layers", "union", "--json") == [2e-3, 3e-3]
    # repeated --db: the others are lower layers; global options before the command too
    p = run_cli("--db", str(a), "--db", str(b), "--layers", "union", "--json", "best", "--target", "alpha",
                "--workload", WSPEC)
    assert p.returncode == 0 and json.loads(p.stdout)["records"][0]["cost"] == 2e-3
    # after the command, the --db list replaces the one before it
    assert _best("--db", str(b), "--json") == [1e-3, 2e-3]
    p = run_cli("--db", str(b), "--json", "best", "--target", "alpha", "--workload", WSPEC, "--db", str(a))
    assert [r["cost"] for r in json.loads(p.stdout)["records"]] == [3e-3]
    p = run_cli("stats", "--db", str(a), "--also", str(b), "--json")
    s = json.loads(p.stdout)
    assert p.returncode == 0 and s["records"] == 5 and s["location"] == f"{a} + {b}"
    # writes go to the first --db only
    p = run_cli("invalidate", "--target", "alpha", "--db", str(a), "--also", str(b), "--json")
    assert p.returncode == 0, p.stderr
    assert tunedb.open(b).stats().stale_targets == [] and len(tunedb.open(a)) == 5  # b's copied up to a
    p = run_cli("best", "--target", "alpha", "--workload", WSPEC, "--db", str(a), "--also", str(b))
    assert p.returncode == 2 and "has no records" in p.stderr  # nothing live answers now, in either layer
    assert run_cli("init", "--db", str(tmp_path / "c"), "--also", str(b)).returncode == 0  # an empty top layer
    p = run_cli("nearest", "--target", "alpha", "--workload", WSPEC, "--db", str(tmp_path / "c"), "--also",
                str(b), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["matches"][0]["best"][0]["cost"] == 1e-3


def test_cli_layer_errors_are_one_line(tmp_path):
    a = tmp_path / "a"
    _cli_db(a, [1e-3])
    for args, msg in ((["--also", str(tmp_path / "missing")], "lower layer must exist"),
                      (["--db", str(a)], "given twice"),
                      (["--layers", "sideways"], "invalid choice")):
        p = run_cli("stats", "--db", str(a), *args)
        assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "missing").exists()


def test_cli_read_only_lower_layer(tmp_path):
    _cli_db(tmp_path / "pub", [1e-3, 2e-3])
    with read_only(tmp_path / "pub", tmp_path / "ro") as ro:
        top = tmp_path / "top"
        p = run_cli("stats", "--db", str(top), "--also", str(ro))
        assert p.returncode == 2 and "no tunedb database" in p.stderr  # a read creates no top layer
        assert not top.exists()
        p = run_cli("init", "--db", str(top), "--also", str(ro), "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["records"] == 2, p.stderr
        p = run_cli("stats", "--db", str(top), "--also", str(ro), "--json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["records"] == 2
        p = run_cli("best", "--target", "alpha", "--workload", WSPEC, "--db", str(top), "--also", str(ro), "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["records"][0]["cost"] == 1e-3
        p = run_cli("stats", "--db", str(ro), "--json")  # read-only as the only --db: reads work
        assert p.returncode == 0 and json.loads(p.stdout)["records"] == 2, p.stderr
        p = run_cli("compact", "--db", str(ro))  # a write to it is one line, exit 2
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    shutil.rmtree(tmp_path / "ro", ignore_errors=True)
    assert os.path.isdir(tmp_path / "pub")


def test_entries_combine_the_layers_own_tables_exactly(tmp_path):
    """``entries()`` of a layered store is built from the layers' own entries where a target is
    in one layer only, and from records where several layers hold it; the answer is exactly the
    records-based summary (RecordStore.entries: each record once, stale in any layer left out),
    through copies, invalidations of copies, verdicts and targets that share a name."""
    from tunedb.index.contract.base import RecordStore

    T1b = {**T1, "compiler": "gcc 13"}  # another target named "alpha"
    T3 = {**T2, "name": "gamma"}
    top, mid, low = tunedb.open(tmp_path / "top"), tunedb.open("memory:mid"), tunedb.open(tmp_path / "low")
    low.commit([rec(i, 1e-3 * (i + 1), target=t, workload=w) for i in range(4) for t in (T1, T2, T3)
                for w in (W, W2)])
    mid.commit([rec(i, 2e-3 * (i + 1), target=T1b, workload=W) for i in range(3)]
               + [tunedb.Record(T3, W, {"tile": 7}, [], status="timeout")])
    top.commit([rec(10 + i, 5e-4, target=T2, workload=W2) for i in range(2)])
    copy_records(low, top, targets=[T3["name"]])  # copies: counted once
    lay = LayeredStore([top, mid, low], mode="union")
    want = RecordStore.entries(lay)
    assert want.num_rows == 7 and lay.entries().equals(want)
    lay.invalidate(T2)  # stale copies in the top layer hide the lower layer's records of T2
    lay.mark({low.records(T1).column("record_id")[0].as_py(): "refuted"})
    lay.refresh()
    want = RecordStore.entries(lay)
    assert lay.entries().equals(want) and T2["name"] not in want.column("target_name").to_pylist()
    top.commit([rec(20, 1e-4, target=T1b, workload=W)])  # a tie on ("alpha", W) with a shared target
    lay.refresh()
    assert lay.entries().equals(RecordStore.entries(lay))
    for layers in ([mid, low], [low, mid], [top]):  # one target per layer; a single layer
        one = LayeredStore(layers, writable=None)
        assert one.entries().equals(RecordStore.entries(one))
    for s in (top, mid, low):
        s.close()
