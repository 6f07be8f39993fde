"""``best``/``best_costs`` of the Parquet store answer repeated queries from kept per-entry answers
(``queries.RankedEntries``): a kept answer always equals the definition -- ``estimate.rank`` of
the entry's live, ok, unrefuted records -- and is never stale: a commit through the same handle
(journaled or as files), another process's commit after ``refresh()``, ``invalidate``, a verdict
(``mark``), ``forget``, ``dedup`` and ``compact`` all show at the next query.  Every test runs
twice: as shipped (these small entries are not kept on disk) and with every entry's ranking
kept in ``derived/ranked/`` (``rankcache``), at most three configs of it, so that new handles
answer from kept rankings and larger queries rank again."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from tunedb.index import ParquetStore, Record
from tunedb.index.model.estimate import rank
from tunedb.index.parquet import rankcache

T1 = {"kind": "gpu", "name": "dev-a", "sm": 80}
T2 = {"kind": "gpu", "name": "dev-b", "sm": 90}
WS = [{"family": "conv2d", "C": 64 + i, "H": 56} for i in range(6)]


@pytest.fixture(autouse=True, params=["shipped", "kept-on-disk"])
def rankings_kept(request, monkeypatch):
    if request.param == "kept-on-disk":
        monkeypatch.setattr(rankcache, "MIN_ENTRY_ROWS", 1)
        monkeypatch.setattr(rankcache, "KEEP", 3)


def populate(db: ParquetStore, seed: int = 0) -> None:
    """Two targets x six workloads: several configs each, repeats of a config, confirmation
    re-measurements, another tuner's records (their value is the mean), failures."""
    rng = random.Random(seed)
    out = []
    for t in (T1, T2):
        for w in WS:
            for c in range(8):
                base = rng.uniform(1e-4, 1e-2)
                for rep in range(rng.randint(1, 3)):
                    costs = [base * rng.uniform(0.9, 1.1) for _ in range(rng.randint(1, 4))]
                    meta = {}
                    if c == 5 and rep < 2:
                        meta = {"origin": "confirm"}
                    elif c == 6:
                        meta = {"kernel_tuner": {"iterations": 7}}
                    out.append(Record(t, w, {"tile": c, "rep": rep}, costs, meta=meta))
            out.append(Record(t, w, {"tile": 99}, [], status="runtime_error", error="boom"))
    db.commit(out)


def definition(db: ParquetStore, t, w, k: int) -> list[tuple]:
    """The answer by the contract's definition, from the entry's records (no kept answer)."""
    return [(c.config_key, c.estimate, c.record.record_id) for c in rank(db.entry_records(t, w), k)]


def answer(db: ParquetStore, t, w, k: int) -> list[tuple]:
    got = db.best_costs(t, w, k)
    assert [r.record_id for r in db.best(t, w, k)] == [c.record.record_id for c in got]
    return [(c.config_key, c.estimate, c.record.record_id) for c in got]


def every_entry(db: ParquetStore, k: int) -> None:
    for t in (T1, T2):
        for w in WS:
            assert answer(db, t, w, k) == definition(db, t, w, k)


def test_kept_answers_equal_the_definition_for_every_k(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    populate(db)
    for k in (3, 3, 1, 8, 20, 2):  # (repeats answer from what was kept; a larger k ranks again)
        every_entry(db, k)
    # a fresh handle (nothing kept) answers the same; string keys and a target name find the same answer
    fresh = ParquetStore.open(tmp_path / "db")
    r = db.best(T1, WS[2], 1)[0]
    assert answer(fresh, T1, WS[2], 4) == answer(db, T1, WS[2], 4)
    assert answer(db, r.target_key, r.workload_key, 4) == answer(db, T1, WS[2], 4)
    assert answer(db, r.target_name, WS[2], 4) == answer(db, T1, WS[2], 4)
    assert answer(db, r, r, 4) == answer(db, T1, WS[2], 4)
    # an answer is a new list each time: changing one changes no later answer
    got = db.best(T1, WS[0], 3)
    got.clear()
    assert len(db.best(T1, WS[0], 3)) == 3
    assert db.best({"kind": "gpu", "name": "nowhere"}, WS[0], 3) == []
    assert db.best(T1, {"family": "conv2d", "C": 1}, 3) == []


def test_files_of_per_record_metas_rank_as_the_definition(tmp_path):
    """A meta that differs per record (here a run counter, beside confirmations and another
    tuner's records) decodes column by column, not as shared combinations: every entry ranked at
    once still equals the definition."""
    db = ParquetStore.open(tmp_path / "db")
    rng = random.Random(3)
    out = []
    for w in WS:
        for c in range(12):
            for rep in range(3):
                meta = {"run": len(out)}
                if c % 4 == 1 and rep < 2:
                    meta["origin"] = "confirm"
                elif c % 4 == 2:
                    meta["kernel_tuner"] = {"iterations": 7}
                elif c % 4 == 3:
                    meta["noisy"] = True
                out.append(Record(T1, w, {"tile": c}, [rng.uniform(1e-4, 1e-3) for _ in range(3)], meta=meta))
    db.commit(out)
    db.compact()
    for k in (2, 5, 12):
        for w in WS:
            assert answer(db, T1, w, k) == definition(db, T1, w, k)


def test_equal_dicts_of_other_value_types_are_other_entries(tmp_path):
    """``{"sm": True}`` and ``{"sm": 1}`` compare equal in Python but are other targets (their
    canonical JSON differs): a kept answer of one never answers the other; ``1.0`` is ``1``."""
    db = ParquetStore.open(tmp_path / "db")
    ti, tf, tb = {"kind": "gpu", "sm": 1}, {"kind": "gpu", "sm": 1.0}, {"kind": "gpu", "sm": True}
    db.commit([Record(ti, WS[0], {"tile": 1}, [1e-3]), Record(tb, WS[0], {"tile": 2}, [2e-3])])
    for _ in range(2):
        assert [r.config["tile"] for r in db.best(ti, WS[0], 5)] == [1]
        assert [r.config["tile"] for r in db.best(tb, WS[0], 5)] == [2]
        assert [r.config["tile"] for r in db.best(tf, WS[0], 5)] == [1]
    assert db.best({"kind": "gpu", "sm": False}, WS[0], 5) == []
    assert db.best({"kind": "gpu", "sm": 0}, WS[0], 5) == []


def test_own_commits_show_at_once(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    populate(db)
    every_entry(db, 3)  # (every entry of both targets kept)
    old_w1 = answer(db, T1, WS[1], 3)
    # a better config through this handle's journal (a tuner's single-record commit)
    db.commit(Record(T1, WS[0], {"tile": "fast"}, [1e-7, 1.1e-7]))
    assert db.best(T1, WS[0], 1)[0].config == {"tile": "fast"}
    assert answer(db, T1, WS[0], 3) == definition(db, T1, WS[0], 3)
    assert answer(db, T1, WS[1], 3) == old_w1  # (another entry: unchanged)
    # a commit written as files (above the journal's size)
    db.commit([Record(T1, WS[1], {"tile": "bulk", "i": i}, [1e-8 * (i + 1)]) for i in range(ParquetStore.JOURNAL_MAX + 5)])
    assert db.best(T1, WS[1], 1)[0].config == {"tile": "bulk", "i": 0}
    # a large commit (indexed lazily, at the next query)
    db.SMALL_COMMIT = 10
    db.commit([Record(T1, WS[2], {"tile": "large", "i": i}, [1e-9 * (i + 1)]) for i in range(30)])
    assert db.best(T1, WS[2], 1)[0].config == {"tile": "large", "i": 0}
    # a worse one changes no ranking but its entry's own answer is computed again all the same
    db.commit(Record(T1, WS[3], {"tile": "slow"}, [10.0]))
    every_entry(db, 3)
    every_entry(db, 40)
    db.close()
    every_entry(ParquetStore.open(tmp_path / "db"), 40)


def test_another_process_commit_shows_after_refresh(tmp_path):
    path = tmp_path / "db"
    db = ParquetStore.open(path)
    populate(db)
    db.close()
    every_entry(db, 3)
    before = answer(db, T2, WS[4], 3)
    code = ("import sys; from tunedb.index import ParquetStore, Record; db = ParquetStore.open(sys.argv[1]); "
            f"db.commit(Record({T2!r}, {WS[4]!r}, {{'tile': 'other'}}, [1e-9])); db.close()")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=120)
    assert answer(db, T2, WS[4], 3) == before  # (other processes' commits: after refresh)
    db.refresh()
    assert db.best(T2, WS[4], 1)[0].config == {"tile": "other"}
    every_entry(db, 3)


def test_refresh_that_finds_nothing_new_keeps_answers(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    populate(db)
    db.refresh()  # (this handle's commits now read from the files, as another process's are)
    first = db.best(T1, WS[0], 3)
    db.refresh()
    assert all(a is b for a, b in zip(first, db.best(T1, WS[0], 3)))  # the kept answer, not a new one
    db.commit(Record(T1, WS[0], {"tile": "new"}, [5.0]))
    again = db.best(T1, WS[0], 3)
    assert [r.record_id for r in again] == [r.record_id for r in first]


def test_invalidate_and_verdicts_drop_kept_answers(tmp_path):
    path = tmp_path / "db"
    db = ParquetStore.open(path)
    populate(db)
    every_entry(db, 3)
    # a verdict through this handle
    top = db.best(T1, WS[0], 1)[0]
    db.mark({top.record_id: "refuted"})
    assert top.record_id not in {c.record.record_id for c in db.best_costs(T1, WS[0], 8)}
    every_entry(db, 3)
    # a verdict by another process, seen after refresh
    top2 = db.best(T2, WS[1], 1)[0]
    code = ("import sys; from tunedb.index import ParquetStore; db = ParquetStore.open(sys.argv[1]); "
            "db.mark({sys.argv[2]: 'refuted'})")
    subprocess.run([sys.executable, "-c", code, str(path), top2.record_id], check=True, timeout=120)
    db.refresh()
    assert db.best(T2, WS[1], 1)[0].record_id != top2.record_id
    every_entry(db, 3)
    # invalidation: the target's records no longer answer; later measurements do
    db.invalidate(T1)
    assert all(db.best(T1, w, 3) == [] for w in WS)
    assert db.best(T2, WS[0], 3) != []
    db.commit(Record(T1, WS[0], {"tile": "after"}, [1e-3]))
    assert [r.config for r in db.best(T1, WS[0], 3)] == [{"tile": "after"}]
    every_entry(db, 3)


def test_forget_dedup_and_compact_drop_kept_answers(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    populate(db)
    every_entry(db, 5)
    db.compact()
    every_entry(db, 5)
    db.commit([Record(T1, WS[0], {"tile": 0, "rep": 0}, [1e-3]) for _ in range(3)])
    every_entry(db, 5)
    db.dedup()
    every_entry(db, 5)
    db.forget(keep_top=1)
    every_entry(db, 5)
    assert all(len(db.best(t, w, 5)) == 1 for t in (T1, T2) for w in WS)
    db.forget(target=T2)
    assert all(db.best(T2, w, 5) == [] for w in WS)
    every_entry(db, 5)


@pytest.mark.parametrize("k", [1, 4])
def test_threads_sharing_a_handle_get_the_definition(tmp_path, k):
    import threading

    db = ParquetStore.open(tmp_path / "db")
    populate(db)
    want = {(i, j): definition(db, t, w, k) for i, t in enumerate((T1, T2)) for j, w in enumerate(WS)}
    errors: list = []

    def ask() -> None:
        for _ in range(3):
            for (i, j), exp in want.items():
                got = answer(db, (T1, T2)[i], WS[j], k)
                if got != exp:
                    errors.append(((i, j), got, exp))

    ts = [threading.Thread(target=ask) for _ in range(4)]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    assert not errors


def test_batched_answers_equal_the_definition_and_are_kept(tmp_path):
    """``best_costs_many`` over entries of two targets (the per-entry files' metas read once for
    all of them) answers each entry as the definition does, keeps what it ranked (a later
    ``best_costs`` is the same kept answer) and ranks again only the entry a commit changed."""
    db = ParquetStore.open(tmp_path / "db")
    populate(db)
    db.close()
    fresh = ParquetStore.open(tmp_path / "db")
    pairs = [(t, w) for w in WS for t in (T2, T1)] + [(T1, {"family": "conv2d", "C": 1})]
    for k in (3, 1, 5, 20):
        got = fresh.best_costs_many(pairs, k)
        assert [[(c.config_key, c.estimate, c.record.record_id) for c in g] for g in got] == \
            [definition(fresh, t, w, k) for t, w in pairs]
    kept = fresh.best_costs(T1, WS[2], 20)
    assert all(a.record is b.record for a, b in zip(kept, fresh.best_costs_many([(T1, WS[2])], 20)[0]))
    fresh.commit(Record(T1, WS[2], {"tile": "fast"}, [1e-9]))
    got = fresh.best_costs_many(pairs, 3)
    assert got[pairs.index((T1, WS[2]))][0].config == {"tile": "fast"}
    assert [[(c.config_key, c.estimate, c.record.record_id) for c in g] for g in got] == \
        [definition(fresh, t, w, 3) for t, w in pairs]

