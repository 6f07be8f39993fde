"""The FAISS vector index: exact search against numpy, HNSW recall, filters, incremental add."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from tunedb.index.retrieval import features, vectors


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
        "bench_index", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_index.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
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


def test_an_entry_finds_itself_first():
    rng = np.random.default_rng(2)
    x = _unit(rng, 300)
    vi = vectors.VectorIndex.build(x, *_keys(300), kind="hnsw")
    for i in (0, 17, 299):
        rows, s = vi.search(x[i], 1)
        assert rows[0] == i and s[0] == pytest.approx(1.0, abs=1e-5)


def test_choose_kind_auto_and_override(monkeypatch):
    monkeypatch.delenv("TUNEDB_INDEX_KIND", raising=False)
    assert vectors.choose_kind(10) == "flat"
    assert vectors.choose_kind(vectors.FLAT_MAX + 1) == "hnsw"
    assert vectors.choose_kind(10, "hnsw") == "hnsw"
    monkeypatch.setenv("TUNEDB_INDEX_KIND", "hnsw")
    assert vectors.choose_kind(10) == "hnsw"
    with pytest.raises(ValueError, match="unknown index kind"):
        vectors.choose_kind(10, "ivf-magic")


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_filters_match_brute_force(kind, monkeypatch):
    monkeypatch.setattr(vectors, "EXACT_SUBSET", 50)  # force the FAISS-selector path for families
    rng = np.random.default_rng(3)
    n = 3000
    x = _unit(rng, n)
    tks, wks, fams = _keys(n)
    vi = vectors.VectorIndex.build(x, tks, wks, fams, kind=kind)
    fam_a, tk_a = np.array(fams), np.array(tks)
    skip = np.array([5, 8, 11, 14])
    rec = []
    for q in _unit(rng, 15):
        rows, s = vi.search(q, 10, family="conv2d", exclude_target=tks[4], skip_rows=skip)
        allowed = (fam_a == "conv2d") & (tk_a != tks[4])
        allowed[skip] = False
        sc = np.where(allowed, x @ q, -np.inf)
        want = np.argsort(-sc, kind="stable")[:10]
        assert all(fam_a[r] == "conv2d" and tk_a[r] != tks[4] and r not in skip for r in rows)
        rec.append(vectors.recall_at_k(rows, want, sc[want], s, 10))
    # flat is exact; HNSW on random (unstructured) vectors is approximate
    assert np.mean(rec) >= (1.0 if kind == "flat" else 0.85)
    rows, _ = vi.search(x[0], 5, family="no-such-family")
    assert len(rows) == 0


def test_incremental_add_is_searchable_and_merges(monkeypatch):
    monkeypatch.setattr(vectors, "DELTA_MIN", 100)
    rng = np.random.default_rng(4)
    x = _unit(rng, 1000)
    vi = vectors.VectorIndex.build(x[:500], *_keys(500), kind="hnsw")
    merged = vi.add(x[500:550], *_keys(50, start=500))
    assert not merged and vi.n_main == 500 and vi.ntotal == 550
    rows, s = vi.search(x[520], 1)
    assert rows[0] == 520 and s[0] == pytest.approx(1.0, abs=1e-5)
    rows, _ = vi.search(x[520], 3, family=_keys(1, start=520)[2][0])
    assert rows[0] == 520
    merged = vi.add(x[550:], *_keys(450, start=550))
    assert merged and vi.n_main == 1000 and vi.ntotal == 1000
    assert np.allclose(vi.vectors([999, 3]), x[[999, 3]])
    rows, _ = vi.search(x[999], 1)
    assert rows[0] == 999
    with pytest.raises(ValueError):
        vi.add(x[:2], ["a"], ["b"], ["c"])  # keys do not line up


def test_wrong_dimension_is_a_clear_error():
    vi = vectors.VectorIndex.build(np.eye(features.DIM, dtype=np.float32)[:3], *_keys(3), kind="flat")
    with pytest.raises(ValueError, match="dimensions"):
        vi.search(np.ones(5, np.float32), 1)


def test_recall_helper_counts_ties():
    assert vectors.recall_at_k(np.array([1, 2]), np.array([1, 3]), np.array([0.9, 0.5]),
                               np.array([0.9, 0.5]), 2) == 1.0
    assert vectors.recall_at_k(np.array([1, 2]), np.array([1, 3]), np.array([0.9, 0.5]),
                               np.array([0.9, 0.4]), 2) == 0.5


@pytest.mark.slow
def test_hnsw_recall_at_10_on_100k_random_entries():
    bench = _bench()
    n, nq = 100_000, 200
    x, tks, wks, fams = bench.synthetic_entries(n + nq, seed=7)
    hn = vectors.VectorIndex.build(x[:n], tks[:n], wks[:n], fams[:n], kind="hnsw")
    flat = vectors.VectorIndex.build(x[:n], tks[:n], wks[:n], fams[:n], kind="flat")
    rec = []
    for q in x[n:]:
        er, es = flat.search(q, 10)
        ar, as_ = hn.search(q, 10)
        rec.append(vectors.recall_at_k(ar, er, es, as_, 10))
    assert float(np.mean(rec)) >= 0.95
    assert math.isfinite(hn.memory_bytes()) and hn.memory_bytes() > x[:n].nbytes
