"""The Parquet store keeps the head of each large entry's ranking in ``derived/ranked/``
(``rankcache``): a new process answers ``best``/``best_costs`` from it without ranking, with
exactly the records and estimates that ranking computes -- and a kept ranking never answers
once the entry can have changed (a published commit, a verdict, an invalidation, a compaction)
or when its file is damaged or does not match the records.

``MIN_ENTRY_ROWS`` and ``KEEP`` are lowered here so that the small entries of these tests are
kept and a query can ask for more than is kept."""

from __future__ import annotations

import random

import pyarrow.parquet as pq
import pytest

from tunedb.index import ParquetStore, Record
from tunedb.index.model.estimate import rank
from tunedb.index.parquet import queries, rankcache

T1 = {"kind": "gpu", "name": "dev-a", "sm": 80}
T2 = {"kind": "gpu", "name": "dev-b", "sm": 90}
WS = [{"family": "conv2d", "C": 64 + i, "H": 56} for i in range(3)]
KEEP = 4


@pytest.fixture(autouse=True)
def small_entries_kept(monkeypatch):
    monkeypatch.setattr(rankcache, "MIN_ENTRY_ROWS", 1)
    monkeypatch.setattr(rankcache, "KEEP", KEEP)


def populate(path, seed: int = 0) -> None:
    rng = random.Random(seed)
    out = []
    for t in (T1, T2):
        for w in WS:
            for c in range(10):
                base = rng.uniform(1e-4, 1e-2)
                for rep in range(rng.randint(1, 3)):
                    meta = {"origin": "confirm"} if c == 5 and rep < 2 else \
                        {"kernel_tuner": {"iterations": 7}} if c == 6 else {}
                    out.append(Record(t, w, {"tile": c, "rep": rep},
                                      [base * rng.uniform(0.9, 1.1) for _ in range(rng.randint(1, 4))], meta=meta))
            out.append(Record(t, w, {"tile": 99}, [], status="runtime_error", error="boom"))
    db = ParquetStore.open(path)
    db.commit(out)
    db.close()


def full(got) -> list[tuple]:
    """Everything of an answer: config key, estimate, and every field of the record."""
    return [(c.config_key, c.estimate, c.config, c.record.to_dict(), c.record.lookup_key, c.record.entry_key)
            for c in got]


def definition(path, t, w, k: int) -> list[tuple]:
    return full(rank(ParquetStore.open(path).entry_records(t, w), k))


def files(path) -> list:
    return sorted((path / "derived" / rankcache.SUBDIR).glob("*.parquet"))


def no_ranking(monkeypatch) -> None:
    def fail(*a, **k):
        raise AssertionError("an entry was ranked again although its ranking is kept")
    monkeypatch.setattr(queries, "rank_arrays", fail)


def test_a_new_process_answers_from_kept_rankings_exactly_as_ranking_does(tmp_path, monkeypatch):
    path = tmp_path / "db"
    populate(path)
    first = ParquetStore.open(path)
    pairs = [(t, w) for t in (T1, T2) for w in WS]
    ranked = [full(x) for x in first.best_costs_many(pairs, 1)]
    assert len(files(path)) == 2  # one per target (partition)
    with monkeypatch.context() as m:
        no_ranking(m)
        for k in (1, 3, KEEP):
            db = ParquetStore.open(path)  # a new handle: nothing in memory
            got = [full(db.best_costs(t, w, k)) for t, w in pairs]
            assert got == [definition(path, t, w, k) for t, w in pairs]
            assert [g[:1] for g in got] == ranked
            assert [[r.to_dict() for r in db.best(t, w, k)] for t, w in pairs] == [[x[3] for x in g] for g in got]
            assert [full(x) for x in ParquetStore.open(path).best_costs_many(pairs, k)] == got
    # more than is kept: ranked again, still the definition
    db = ParquetStore.open(path)
    assert full(db.best_costs(T1, WS[0], 8)) == definition(path, T1, WS[0], 8)


def test_a_published_commit_a_verdict_an_invalidation_and_a_compaction_are_never_answered_stale(tmp_path):
    path = tmp_path / "db"
    populate(path)
    pairs = [(t, w) for t in (T1, T2) for w in WS]

    def check() -> None:
        ParquetStore.open(path).best_costs_many(pairs, 2)  # (ranks and keeps what changed)
        db = ParquetStore.open(path)
        for t, w in pairs:
            assert full(db.best_costs(t, w, 3)) == definition(path, t, w, 3)
    check()
    db = ParquetStore.open(path)
    db.commit([Record(T1, WS[0], {"tile": "fast", "i": i}, [1e-9 * (i + 1)])
               for i in range(ParquetStore.JOURNAL_MAX + 5)])  # (published as a file)
    db.close()
    check()
    assert ParquetStore.open(path).best(T1, WS[0], 1)[0].config == {"tile": "fast", "i": 0}
    db = ParquetStore.open(path)
    top = db.best(T2, WS[1], 1)[0]
    db.mark({top.record_id: "refuted"})
    db.close()
    check()
    assert top.record_id not in {r.record_id for r in ParquetStore.open(path).best(T2, WS[1], 8)}
    db = ParquetStore.open(path)
    db.invalidate(T2)
    db.close()
    assert all(ParquetStore.open(path).best(T2, w, 3) == [] for w in WS)
    check()
    db = ParquetStore.open(path)
    db.commit(Record(T1, WS[2], {"tile": "own"}, [1e-12]))  # (a journal row: that partition is not kept)
    assert db.best(T1, WS[2], 1)[0].config == {"tile": "own"}
    db.close()
    check()
    db = ParquetStore.open(path)
    db.compact()
    db.close()
    check()
    assert ParquetStore.open(path).best(T1, WS[2], 1)[0].config == {"tile": "own"}


@pytest.mark.parametrize("damage", ["garbage", "rows", "record", "entry", "truncated"])
def test_a_damaged_or_foreign_kept_file_is_a_miss(tmp_path, damage):
    """Bytes that are not Parquet, rows that point elsewhere, another record's columns, places
    of two entries interleaved: the file is ignored and the entry ranked from its records."""
    path = tmp_path / "db"
    populate(path)
    pairs = [(t, w) for t in (T1, T2) for w in WS]
    ParquetStore.open(path).best_costs_many(pairs, 1)
    for f in files(path):
        t = pq.read_table(f)
        if damage == "garbage":
            f.write_bytes(b"PAR1 not a parquet file")
            continue
        if damage == "truncated":
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
            continue
        cols = {n: t.column(n).to_pylist() for n in t.column_names}
        if damage == "rows":
            cols["rk_row"] = cols["rk_row"][1:] + cols["rk_row"][:1]
        elif damage == "record":
            cols["record_id"] = cols["record_id"][1:] + cols["record_id"][:1]
        else:
            cols["rk_entry"] = cols["rk_entry"][1:] + cols["rk_entry"][:1]
        import pyarrow as pa

        pq.write_table(pa.table({n: pa.array(v, t.schema.field(n).type) for n, v in cols.items()}), f)
    db = ParquetStore.open(path)
    for t, w in pairs:
        assert full(db.best_costs(t, w, 3)) == definition(path, t, w, 3)


def test_a_db_where_nothing_can_be_kept_answers_all_the_same(tmp_path):
    """``derived/ranked`` cannot be made (here: a file is in its place): answers are the
    definition and nothing is left behind."""
    path = tmp_path / "db"
    populate(path)
    (path / "derived").mkdir(exist_ok=True)
    (path / "derived" / rankcache.SUBDIR).write_text("not a directory")
    db = ParquetStore.open(path)
    for k in (3, 3):
        assert full(db.best_costs(T1, WS[0], k)) == definition(path, T1, WS[0], k)
    assert sorted(p.name for p in (path / "derived").iterdir()) == [rankcache.SUBDIR]
