"""``best`` does bounded work per call: a handle ranks a target's entries ahead of time, once,
when its first query loads the target (``Queries.prerank``, all entries at once through
``queries.rank_all``), so a later ``best`` answers from memory, and a query no ranking
answers (a larger ``k``, an entry this handle committed to) ranks the one entry asked, never
the whole target.  The ranking functions are wrapped to count their calls (they still run):
counts, not timings, so the assertions hold on a loaded machine.  The answers ranked ahead of
time are the contract's definition (``estimate.rank`` of the entry's records)."""

from __future__ import annotations

import random

import pytest

from tunedb.index import ParquetStore, Record
from tunedb.index.model.estimate import rank
from tunedb.index.parquet import queries

TS = [{"kind": "gpu", "name": f"dev-{i}", "sm": 80 + i} for i in range(2)]
WS = [{"family": "conv2d", "C": 64 + i, "H": 56} for i in range(12)]
K = queries.Queries.PRERANK_K


def populate(path, seed: int = 0) -> None:
    """Two targets x 12 workloads x 15 configs, some measured again, confirmations, another
    tuner's records and a failure per entry."""
    rng = random.Random(seed)
    out = []
    for t in TS:
        for w in WS:
            for c in range(15):
                base = rng.uniform(1e-4, 1e-2)
                for rep in range(rng.randint(1, 3)):
                    meta = {"origin": "confirm"} if c == 3 and rep < 2 else \
                        {"kernel_tuner": {"iterations": 7}} if c == 4 else {}
                    out.append(Record(t, w, {"tile": c, "rep": rep},
                                      [base * rng.uniform(0.9, 1.1) for _ in range(rng.randint(1, 4))], meta=meta))
            out.append(Record(t, w, {"tile": 99}, [], status="runtime_error", error="boom"))
    db = ParquetStore.open(path)
    db.commit(out)
    db.close()


@pytest.fixture()
def calls(monkeypatch):
    """Counts of ``rank_all`` (whole target) and ``rank_arrays`` (one entry) calls, and the
    record count of each entry ``rank_arrays`` ranked."""
    got = {"rank_all": 0, "rank_arrays": 0, "entry_rows": []}
    real_all, real_one = queries.rank_all, queries.rank_arrays

    def rank_all(*a, **k):
        got["rank_all"] += 1
        return real_all(*a, **k)

    def rank_arrays(flat, lengths, *a, **k):
        got["rank_arrays"] += 1
        got["entry_rows"].append(len(lengths))
        return real_one(flat, lengths, *a, **k)
    monkeypatch.setattr(queries, "rank_all", rank_all)
    monkeypatch.setattr(queries, "rank_arrays", rank_arrays)
    return got


def full(got) -> list[tuple]:
    return [(c.config_key, c.estimate, c.record.to_dict()) for c in got]


def test_best_after_the_first_query_of_a_target_ranks_nothing(tmp_path, calls):
    populate(tmp_path / "db")
    db = ParquetStore.open(tmp_path / "db")
    assert db.lookup(TS[0], WS[0], {"tile": 0, "rep": 0}) is not None  # (loads the target: ranked once)
    assert calls["rank_all"] == 1
    for w in WS:
        for k in (1, 5, K):
            assert len(db.best(TS[0], w, k)) == k
    assert calls == {"rank_all": 1, "rank_arrays": 0, "entry_rows": []}
    db.best(TS[1], WS[3], 5)  # the other target: ranked once, when first asked
    for w in WS:
        db.best_costs(TS[1], w, 3)
    assert calls["rank_all"] == 2 and calls["rank_arrays"] == 0


def test_a_query_no_ranking_answers_ranks_the_one_entry_asked(tmp_path, calls):
    populate(tmp_path / "db")
    db = ParquetStore.open(tmp_path / "db")
    db.best(TS[0], WS[0], 1)
    one_entry = len(db.entry_records(TS[0], WS[0]))
    got = db.best_costs(TS[0], WS[1], K + 3)  # more than was ranked ahead of time
    assert len(got) == K + 3
    assert calls["rank_arrays"] == 1 and calls["rank_all"] == 1
    assert calls["entry_rows"][0] <= one_entry + 5  # (one entry's records, not the target's)
    # an entry this handle committed to: ranked alone from its records, every other one still kept
    db.commit(Record(TS[0], WS[2], {"tile": "new"}, [1e-9]))
    assert db.best(TS[0], WS[2], 1)[0].config == {"tile": "new"}
    before = calls["rank_arrays"]
    for w in WS[3:]:
        db.best(TS[0], w, 5)
    assert calls["rank_arrays"] == before and calls["rank_all"] == 1


def test_answers_ranked_ahead_of_time_are_the_definition(tmp_path, calls):
    path = tmp_path / "db"
    populate(path)
    db = ParquetStore.open(path)
    top = db.best(TS[1], WS[5], 1)[0]
    db.mark({top.record_id: "refuted"})
    fresh = ParquetStore.open(path)
    ref = ParquetStore.open(path)
    for t in TS:
        for w in WS:
            for k in (1, 4, K):
                assert full(fresh.best_costs(t, w, k)) == full(rank(ref.entry_records(t, w), k))
    assert fresh.best(TS[1], WS[5], 1)[0].record_id != top.record_id
    assert calls["rank_all"] >= 2


def test_a_target_is_ranked_ahead_of_time_once_per_handle(tmp_path, calls):
    populate(tmp_path / "db")
    db = ParquetStore.open(tmp_path / "db")
    db.best(TS[0], WS[0], 2)
    db.commit([Record(TS[0], WS[0], {"tile": "big", "i": i}, [1e-9 * (i + 1)])
               for i in range(ParquetStore.JOURNAL_MAX + 5)])
    db.compact()  # (the target's arrays are rebuilt: the answers ranked ahead of time go)
    n = calls["rank_arrays"]
    assert db.best(TS[0], WS[1], 2)  # (this entry ranked alone)
    assert db.best(TS[0], WS[0], 1)[0].config == {"tile": "big", "i": 0}
    assert calls["rank_all"] == 1 and calls["rank_arrays"] == n + 2


def test_large_entries_ranked_ahead_of_time_are_kept_for_new_processes(tmp_path, monkeypatch):
    from tunedb.index.parquet import rankcache

    monkeypatch.setattr(rankcache, "MIN_ENTRY_ROWS", 10)
    monkeypatch.setattr(rankcache, "KEEP", K + 4)  # (more than is ranked ahead of time)
    path = tmp_path / "db"
    populate(path)
    ParquetStore.open(path).best(TS[0], WS[0], 1)  # (ranks target 0 ahead of time and keeps it)
    assert len(list((path / "derived" / rankcache.SUBDIR).glob("*.parquet"))) == 1
    ref = ParquetStore.open(path)
    db = ParquetStore.open(path)
    for w in WS:
        assert full(db.best_costs(TS[0], w, K + 4)) == full(rank(ref.entry_records(TS[0], w), K + 4))


def test_a_new_handle_ranks_nothing_a_kept_ranking_answers(tmp_path, monkeypatch, calls):
    """A target whose large entries' rankings are kept on disk (as ``tunedb import`` leaves
    them): a new handle's first query of it ranks none of those entries (a warm run's first
    proposal reads its neighbours' bests this way), and answers as ranking would."""
    from tunedb.index.parquet import rankcache

    monkeypatch.setattr(rankcache, "MIN_ENTRY_ROWS", 10)
    path = tmp_path / "db"
    populate(path)
    ParquetStore.open(path).best(TS[0], WS[0], 1)  # (ranks target 0 ahead of time and keeps it)
    before = calls["rank_all"]
    db = ParquetStore.open(path)
    got = db.best_costs_many([(TS[0], w) for w in WS], K)
    assert calls["rank_all"] == before and calls["rank_arrays"] == 0
    ref = ParquetStore.open(path)
    assert [full(g) for g in got] == [full(rank(ref.entry_records(TS[0], w), K)) for w in WS]
