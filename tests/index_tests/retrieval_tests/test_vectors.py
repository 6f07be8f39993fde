"""The FAISS vector index: exact search against numpy, IVF/HNSW recall, filters, incremental add, persistence."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tunedb.index import ParquetStore, Record
from tunedb.index.retrieval import features, vectors

from helpers import ROOT


def _unit(rng: np.random.Generator, n: int, d: int = features.DIM) -> np.ndarray:
    x = rng.normal(size=(n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x)


def _keys(n: int, n_targets: int = 7, n_fams: int = 3, start: int = 0):
    tks = [f"t{(i % n_targets):031d}" for i in range(start, start + n)]
    wks = [f"w{i:031d}" for i in range(start, start + n)]
    fams = [("matmul", "conv2d", "imported")[i % n_fams] for i in range(start, start + n)]
    return tks, wks, fams


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_index", ROOT / "benchmarks" / "bench_index.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_cosine_scores_match_numpy(kind):
    rng = np.random.default_rng(1)
    x = _unit(rng, 500)
    vi = vectors.VectorIndex.build(x, *_keys(500), kind=kind)
    assert vi.kind == kind
    for q in _unit(rng, 10):
        rows, s = vi.search(q, 10)
        want = x @ q
        assert np.allclose(s, want[rows], atol=1e-5)
        if kind == "flat":
            assert rows.tolist() == np.argsort(-want, kind="stable")[:10].tolist()
        assert np.all(np.diff(s) <= 1e-6)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_an_entry_finds_itself_first(kind):
    rng = np.random.default_rng(2)
    x = _unit(rng, 300)
    vi = vectors.VectorIndex.build(x, *_keys(300), kind=kind)
    for i in (0, 17, 299):
        rows, s = vi.search(x[i], 1)
        assert rows[0] == i and s[0] == pytest.approx(1.0, abs=1e-5)


def test_choose_kind_auto_and_override(monkeypatch):
    monkeypatch.delenv("TUNEDB_INDEX_KIND", raising=False)
    assert vectors.choose_kind(10) == "flat"
    assert vectors.choose_kind(vectors.FLAT_MAX) == "flat"
    assert vectors.choose_kind(vectors.FLAT_MAX + 1) == "ivf"
    assert vectors.choose_kind(10, "hnsw") == "hnsw"
    assert vectors.choose_kind(10**7, "flat") == "flat"
    assert vectors.choose_kind(10, "IVF") == "ivf"
    monkeypatch.setenv("TUNEDB_INDEX_KIND", "hnsw")
    assert vectors.choose_kind(10) == "hnsw"
    with pytest.raises(ValueError, match="unknown index kind"):
        vectors.choose_kind(10, "ivf-magic")


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_filters_match_brute_force(kind, monkeypatch):
    monkeypatch.setattr(vectors, "EXACT_SUBSET", 50)  # force the FAISS-selector path for families
    rng = np.random.default_rng(3)
    n = 3000
    x = _unit(rng, n)
    tks, wks, fams = _keys(n)
    # IVF with every list probed is exhaustive: it checks the selector logic exactly
    vi = vectors.VectorIndex.build(x, tks, wks, fams, kind=kind, **({"nprobe": 10**6} if kind == "ivf" else {}))
    fam_a, tk_a = np.array(fams), np.array(tks)
    skip = np.array([5, 8, 11, 14, 4, 4, 10**9])  # duplicates, rows of other families, out of range: ignored
    rec = []
    for q in _unit(rng, 15):
        rows, s = vi.search(q, 10, family="conv2d", exclude_target=tks[4], skip_rows=skip)
        allowed = (fam_a == "conv2d") & (tk_a != tks[4])
        allowed[skip[skip < n]] = False
        sc = np.where(allowed, x @ q, -np.inf)
        want = np.argsort(-sc, kind="stable")[:10]
        assert len(rows) == 10
        assert all(fam_a[r] == "conv2d" and tk_a[r] != tks[4] and r not in skip for r in rows)
        rec.append(vectors.recall_at_k(rows, want, sc[want], s, 10))
    # flat and exhaustive IVF are exact; HNSW on random (unstructured) vectors is approximate
    assert np.mean(rec) >= (0.85 if kind == "hnsw" else 1.0)
    rows, _ = vi.search(x[0], 5, family="no-such-family")
    assert len(rows) == 0


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_filters_that_allow_few_rows_return_exactly_those(kind, monkeypatch):
    monkeypatch.setattr(vectors, "EXACT_SUBSET", 0)
    rng = np.random.default_rng(5)
    n = 2000
    x = _unit(rng, n)
    tks = ["tA" if i % 2 else "tB" for i in range(n)]
    fams = ["rare" if i % 500 == 1 else "common" for i in range(n)]  # rows 1, 501, 1001, 1501; all of target tA
    vi = vectors.VectorIndex.build(x, tks, [f"w{i}" for i in range(n)], fams, kind=kind)
    rows, _ = vi.search(x[0], 10, family="rare")
    assert sorted(rows.tolist()) == [1, 501, 1001, 1501]
    rows, _ = vi.search(x[0], 10, family="rare", skip_rows=np.array([501]))
    assert sorted(rows.tolist()) == [1, 1001, 1501]
    rows, _ = vi.search(x[0], 10, family="rare", exclude_target="tA")
    assert len(rows) == 0
    rows, _ = vi.search(x[0], 3, exclude_target="tB")
    assert len(rows) == 3 and all(r % 2 for r in rows.tolist())


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_incremental_add_is_searchable_and_merges(kind, monkeypatch):
    monkeypatch.setattr(vectors, "DELTA_MIN", 100)
    rng = np.random.default_rng(4)
    x = _unit(rng, 1000)
    vi = vectors.VectorIndex.build(x[:500], *_keys(500), kind=kind)
    merged = vi.add(x[500:550], *_keys(50, start=500))
    assert not merged and vi.n_main == 500 and vi.ntotal == 550
    rows, s = vi.search(x[520], 1)
    assert rows[0] == 520 and s[0] == pytest.approx(1.0, abs=1e-5)
    rows, _ = vi.search(x[520], 3, family=_keys(1, start=520)[2][0])
    assert rows[0] == 520
    merged = vi.add(x[550:], *_keys(450, start=550))
    assert merged and vi.n_main == 1000 and vi.ntotal == 1000
    assert vi.index.ntotal == 1000
    assert np.allclose(vi.vectors([999, 3]), x[[999, 3]])
    rows, _ = vi.search(x[999], 1)
    assert rows[0] == 999
    rows, _ = vi.search(x[999], 1, family=_keys(1, start=999)[2][0], exclude_target="nobody")
    assert rows[0] == 999
    with pytest.raises(ValueError):
        vi.add(x[:2], ["a"], ["b"], ["c"])  # keys do not line up


def test_ivf_refits_its_lists_when_it_has_outgrown_them(monkeypatch):
    monkeypatch.setattr(vectors, "DELTA_MIN", 100)
    rng = np.random.default_rng(6)
    x = _unit(rng, 3000)
    vi = vectors.VectorIndex.build(x[:600], *_keys(600), kind="ivf")
    assert vi.n_trained == 600 and vi.nlist == vectors.ivf_nlist(600)
    vi.add(x[600:1100], *_keys(500, start=600))  # 1100 <= 2 x 600: straight into the lists
    assert vi.n_main == 1100 and vi.n_trained == 600
    vi.add(x[1100:], *_keys(1900, start=1100))   # 3000 > 2 x 600: lists re-fitted over every row
    assert vi.n_main == vi.index.ntotal == 3000 and vi.n_trained == 3000 and vi.nlist == vectors.ivf_nlist(3000)
    for i in (0, 700, 2999):
        rows, s = vi.search(x[i], 1)
        assert rows[0] == i and s[0] == pytest.approx(1.0, abs=1e-5)
    assert np.allclose(vi.vectors(), x)


def test_empty_ivf_index_trains_on_its_first_merge(monkeypatch):
    monkeypatch.setattr(vectors, "DELTA_MIN", 10)
    rng = np.random.default_rng(7)
    x = _unit(rng, 200)
    vi = vectors.VectorIndex.build(np.zeros((0, features.DIM), np.float32), [], [], [], kind="ivf")
    assert vi.search(x[0], 3)[0].size == 0
    vi.add(x[:5], *_keys(5))
    assert vi.search(x[3], 1)[0].tolist() == [3]  # exact delta search before any training
    assert vi.add(x[5:], *_keys(195, start=5))
    assert vi.n_main == 200 and vi.n_trained == 200 and vi.index.is_trained
    assert vi.search(x[150], 1)[0].tolist() == [150]


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_saved_index_reloads_with_its_delta(kind, tmp_path):
    rng = np.random.default_rng(8)
    x = _unit(rng, 700)
    vi = vectors.VectorIndex.build(x[:600], *_keys(600), kind=kind)
    vi.pinned = True
    man = vectors.save(vi, tmp_path, full=True, manifest=None)
    vi.add(x[600:], *_keys(100, start=600))  # stays a delta (DELTA_MIN)
    man = vectors.save(vi, tmp_path, full=False, manifest=man)
    loaded, man2 = vectors.load(tmp_path)
    assert man2 == json.loads((tmp_path / "manifest.json").read_text())
    assert loaded.kind == kind and loaded.pinned and loaded.n_main == 600 and loaded.ntotal == 700
    assert np.allclose(loaded.vectors(), x)
    if kind == "ivf":
        assert loaded.nlist == vi.nlist and loaded.n_trained == 600 and loaded.nprobe == vi.nprobe
    for q in x[[0, 599, 650]]:
        for fam in (None, "conv2d"):
            a, b = vi.search(q, 5, family=fam), loaded.search(q, 5, family=fam)
            assert a[0].tolist() == b[0].tolist() and np.allclose(a[1], b[1])
    # a file of another kind than the manifest says is damage: rebuilt, not misread
    man2["kind"] = "hnsw" if kind != "hnsw" else "ivf"
    (tmp_path / "manifest.json").write_text(json.dumps(man2))
    assert vectors.load(tmp_path) is None


A100 = {"kind": "gpu", "name": "NVIDIA A100-PCIE-40GB"}
TX2 = {"target": "cuda -model=tx2"}


def _small_db(path: Path) -> ParquetStore:
    db = ParquetStore.open(path)
    recs = []
    for t in (A100, TX2):
        for m in (64, 128, 256, 512, 1024, 2048):
            w = {"family": "matmul", "M": m, "N": m, "K": m, "dtype": "float32"}
            recs.append(Record(t, w, {"tile": 8}, costs=[m * 1e-6]))
    db.commit(recs)
    return db


def test_auto_rebuilds_a_stored_hnsw_index_it_chose_but_keeps_one_asked_for(tmp_path, monkeypatch):
    monkeypatch.delenv("TUNEDB_INDEX_KIND", raising=False)
    monkeypatch.setattr(vectors, "FLAT_MAX", 4)  # auto: approximate above 4 entries
    vectors.clear_cache()
    db = _small_db(tmp_path / "db")
    d = Path(db.cache_dir()) / vectors.SUBDIR
    st = vectors.sync(db, "hnsw")
    assert st.vi.kind == "hnsw" and st.vi.pinned
    vectors.clear_cache()
    assert vectors.sync(db).vi.kind == "hnsw"  # asked for: auto keeps it
    # a manifest written before the IVF kind (no "pinned"): its HNSW index was auto's choice
    man = json.loads((d / "manifest.json").read_text())
    del man["pinned"]
    (d / "manifest.json").write_text(json.dumps(man))
    vectors.clear_cache()
    old = vectors.load(d)[0]
    assert old.kind == "hnsw" and not old.pinned
    st = vectors.sync(db)
    assert st.vi.kind == "ivf" and not st.vi.pinned and st.vi.ntotal == db.entries().num_rows
    man = json.loads((d / "manifest.json").read_text())
    assert man["kind"] == "ivf" and man["pinned"] is False and man["params"]["nlist"] == st.vi.nlist
    assert np.allclose(st.vi.vectors(), old.vectors([old.pos[k] for k in zip(st.vi.target_keys, st.vi.workload_keys)]))
    vectors.clear_cache()
    again = vectors.sync(db)
    assert again.vi.kind == "ivf" and (d / man["index"]["file"]).exists()  # loaded, not rebuilt
    assert json.loads((d / "manifest.json").read_text())["index"] == man["index"]
    w = {"family": "matmul", "M": 256, "N": 256, "K": 256, "dtype": "float32"}
    m = db.nearest(A100, w, k=2)
    assert m[0].workload == w and m[0].similarity == pytest.approx(1.0, abs=1e-6)
    vectors.clear_cache()


def test_wrong_dimension_is_a_clear_error():
    vi = vectors.VectorIndex.build(np.eye(features.DIM, dtype=np.float32)[:3], *_keys(3), kind="flat")
    with pytest.raises(ValueError, match="dimensions"):
        vi.search(np.ones(5, np.float32), 1)


def test_recall_helper_counts_ties():
    assert vectors.recall_at_k(np.array([1, 2]), np.array([1, 3]), np.array([0.9, 0.5]),
                               np.array([0.9, 0.5]), 2) == 1.0
    assert vectors.recall_at_k(np.array([1, 2]), np.array([1, 3]), np.array([0.9, 0.5]),
                               np.array([0.9, 0.4]), 2) == 0.5


def _realistic(n: int, nq: int, seed: int):
    bench = _bench()
    x, tks, wks, fams = bench.synthetic_entries(n + nq, seed=seed)
    return (x[:n], tks[:n], wks[:n], fams[:n]), (x[n:], tks[n:], fams[n:])


def _recall(vi, flat, qs, **filters_of) -> float:
    rec = []
    for i, q in enumerate(qs):
        f = {key: v[i] for key, v in filters_of.items()}
        er, es = flat.search(q, 10, **f)
        ar, as_ = vi.search(q, 10, **f)
        rec.append(vectors.recall_at_k(ar, er, es, as_, 10))
    return float(np.mean(rec))


def test_ivf_recall_at_10_on_30k_realistic_entries():
    """The automatic approximate kind against exact search on generated entries (the
    benchmark's generator): unfiltered, same-family and same-family + other-target queries."""
    (x, tks, wks, fams), (qx, qtk, qfam) = _realistic(30_000, 150, seed=11)
    vi = vectors.VectorIndex.build(x, tks, wks, fams, kind=vectors.choose_kind(vectors.FLAT_MAX + 1))
    assert vi.kind == "ivf" and vi.nlist == vectors.ivf_nlist(30_000)
    flat = vectors.VectorIndex.build(x, tks, wks, fams, kind="flat")
    assert _recall(vi, flat, qx) >= 0.95
    assert _recall(vi, flat, qx, family=qfam) >= 0.95
    assert _recall(vi, flat, qx, family=qfam, exclude_target=qtk) >= 0.95


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_recall_at_10_on_100k_realistic_entries(kind):
    (x, tks, wks, fams), (qx, _, qfam) = _realistic(100_000, 200, seed=7)
    vi = vectors.VectorIndex.build(x, tks, wks, fams, kind=kind)
    flat = vectors.VectorIndex.build(x, tks, wks, fams, kind="flat")
    assert _recall(vi, flat, qx) >= 0.95
    assert _recall(vi, flat, qx[:50], family=qfam[:50]) >= 0.95
    assert math.isfinite(vi.memory_bytes()) and vi.memory_bytes() > x.nbytes
