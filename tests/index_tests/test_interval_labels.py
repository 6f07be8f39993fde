"""An estimate's interval is labelled by the records it rests on, as the README's rule says.

The records are the independent measurements of a config (different moments, often different
processes); the repeats inside one record are not.  So with 2 records of 10 repeats each the
interval is min..max of the 2 record values and its confidence is 1 - 2**(1 - 2) = 50 %, never
the 95 % that pooling the 20 repeats would claim; 3 records: 75 %; 6 or more: 95 %.  A real
Parquet DB (the Arrow path, ``estimate_table``) and the in-memory path (``estimate``) agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tunedb.index import ParquetStore
from tunedb.index.model.estimate import estimate
from tunedb.index.model.record import Record

T = {"kind": "llvm", "name": "interval-label-cpu"}
W = {"family": "matmul", "M": 8, "N": 8, "K": 8}
CFG = {"tile": 4}


def _records(n: int, repeats: int = 10) -> list[Record]:
    """``n`` records of one config, record i's repeats around (1 + i/10) ms (seconds)."""
    return [Record(T, W, CFG, [1e-3 * (1 + i / 10) * (1 + j / 1000) for j in range(repeats)])
            for i in range(n)]


@pytest.mark.parametrize(("n", "label", "coverage"), [(2, "50 % CI", 0.5), (3, "75 % CI", 0.75),
                                                       (5, "93 % CI", 0.9375), (40, "95 % CI", None)])
def test_label_follows_the_number_of_records(tmp_path: Path, n: int, label: str, coverage: float | None) -> None:
    recs = _records(n)
    est = estimate(recs)
    assert est is not None and est.records == n and est.samples == 10 * n
    if coverage is not None:  # min..max of the record values, with the confidence it has
        assert est.coverage == pytest.approx(coverage)
        assert (est.lo, est.hi) == pytest.approx((min(r.cost for r in recs), max(r.cost for r in recs)))
    else:
        assert est.coverage >= 0.95
    assert est.interval_text().startswith(label + " ") and f"({label} " in est.text() and f"n={n}," in est.text()
    db = ParquetStore.open(tmp_path / "db")
    db.commit(recs)
    stored = db.cost(T, W, CFG)
    db.close()
    assert stored is not None and stored.interval_text() == est.interval_text()
    assert (stored.lo, stored.hi, stored.coverage) == pytest.approx((est.lo, est.hi, est.coverage))


def test_one_record_keeps_the_interval_of_its_repeats() -> None:
    """One record is one measurement: its interval is that of its repeats (10 repeats: 97 %
    order-statistic interval, labelled 95 % CI); one record of one repeat has none."""
    est = estimate(_records(1))
    assert est is not None and est.records == 1 and est.interval_text().startswith("95 % CI ")
    single = estimate([Record(T, W, CFG, [1e-3])])
    assert single is not None and single.interval_text() == "no interval"
