"""An answer before the first measurement: ``predict_best`` and ``tunedb best`` for an entry with no records."""

from __future__ import annotations

import json

import pytest

import tunedb
from tunedb.index import Record
from tunedb.index.hardware.targets import resolve_target

from helpers import run_cli

WORKLOAD = {"family": "toy_kernel", "kernel": "toy", "problem_size": [1024]}
GPUS = ("NVIDIA RTX A4000", "NVIDIA RTX A6000", "AMD Radeon PRO W6600")
CONFIGS = [{"bx": bx, "tile": t} for bx in (32, 64, 128) for t in (1, 2, 4)]


def _cost(device: str, cfg: dict) -> float:
    """A toy landscape: NVIDIA devices like bx=128,tile=2; the AMD one likes bx=64,tile=4; the
    config {"bx": 32, "tile": 4} is the AMD device's second best and poor on NVIDIA."""
    nvidia = "NVIDIA" in device
    fav = {"bx": 128, "tile": 2} if nvidia else {"bx": 64, "tile": 4}
    base = 1e-3 * (1 + abs(cfg["bx"] - fav["bx"]) / 64 + abs(cfg["tile"] - fav["tile"]) / 2)
    return base * (1.5 if "A6000" in device else 1.0)


@pytest.fixture
def db(tmp_path):
    store = tunedb.open(tmp_path / "db")
    recs = [Record(resolve_target(d), WORKLOAD, cfg, [_cost(d, cfg)] * 3) for d in GPUS for cfg in CONFIGS]
    store.commit(recs)
    yield store
    store.close()


def test_a_device_without_records_gets_the_configs_its_nearest_devices_prefer(db):
    target = resolve_target("NVIDIA A100-PCIE-40GB")
    assert db.best(target, WORKLOAD) == []
    pred = db.predict_best(target, WORKLOAD, k=3)
    assert pred.trusted and len(pred.configs) == 3
    first = pred.configs[0]
    assert first.config == {"bx": 128, "tile": 2}  # what both NVIDIA neighbours prefer
    assert [c.score for c in pred.configs] == sorted((c.score for c in pred.configs), reverse=True)
    assert 0 < first.score <= 1
    # where it came from: every neighbour's cost and relative speed for it
    by_name = {e.target_name: e for e in first.evidence}
    assert set(by_name) == set(GPUS)
    assert by_name["NVIDIA RTX A4000"].relative == pytest.approx(1.0)
    assert by_name["AMD Radeon PRO W6600"].relative < 1.0
    assert by_name["NVIDIA RTX A4000"].cost_s == pytest.approx(_cost("NVIDIA RTX A4000", first.config))
    assert "NVIDIA RTX A" in first.source
    d = pred.to_dict()
    assert d["predicted"] is True and d["configs"][0]["predicted"] is True
    json.dumps(d)  # plain JSON


def test_an_amd_device_follows_the_amd_neighbour(db):
    pred = db.predict_best(resolve_target("AMD Radeon PRO W7800"), WORKLOAD, k=1)
    assert pred.trusted and pred.configs[0].config == {"bx": 64, "tile": 4}


def test_exclude_target_predicts_for_a_device_as_if_it_had_no_records(db):
    target = resolve_target("NVIDIA RTX A6000")
    pred = db.predict_best(target, WORKLOAD, k=1, exclude_target=True)
    assert "NVIDIA RTX A6000" not in {m.target_name for m in pred.neighbours}
    assert pred.configs[0].config == {"bx": 128, "tile": 2}


def test_too_far_to_trust_says_so_instead_of_guessing(db):
    pred = db.predict_best(resolve_target("cpu-native-t1"), WORKLOAD)
    assert not pred.trusted and pred.configs == []
    assert "too far" in pred.reason and "similarity" in pred.reason
    other = db.predict_best(resolve_target("NVIDIA A100-PCIE-40GB"), {"family": "nothing_like_it", "n": 1})
    assert not other.trusted and other.neighbours == [] and "nothing to predict from" in other.reason


def test_bad_k_is_a_value_error(db):
    with pytest.raises(ValueError, match="k must be"):
        db.predict_best(resolve_target("NVIDIA A100-PCIE-40GB"), WORKLOAD, k=0)


def test_cli_best_answers_a_device_without_records_with_marked_predictions(db, tmp_path):
    loc = db.location
    db.close()
    spec = json.dumps(WORKLOAD)
    p = run_cli("best", "--db", loc, "--target", "NVIDIA A100-PCIE-40GB", "--workload", spec, "-k", "2")
    assert p.returncode == 0, p.stderr
    assert "predicted" in p.stdout and "no records of this entry" in p.stdout and "NVIDIA RTX A" in p.stdout
    j = run_cli("--json", "best", "--db", loc, "--target", "NVIDIA A100-PCIE-40GB", "--workload", spec)
    out = json.loads(j.stdout)
    assert out["predicted"] is True and out["trusted"] is True
    assert out["configs"][0]["config"] == {"bx": 128, "tile": 2} and out["configs"][0]["evidence"]
    far = run_cli("best", "--db", loc, "--target", "cpu-native-t1", "--workload", spec)
    assert far.returncode == 0 and "too far" in far.stdout
    # a device that has records still answers from them, unchanged
    own = run_cli("--json", "best", "--db", loc, "--target", "NVIDIA RTX A4000", "--workload", spec)
    assert json.loads(own.stdout)["configs"][0]["config"] == {"bx": 128, "tile": 2}
    assert "predicted" not in json.loads(own.stdout)
    # an unknown target is still a mistake: one line, exit 2
    bad = run_cli("best", "--db", loc, "--target", "no-such-device-anywhere", "--workload", spec)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
