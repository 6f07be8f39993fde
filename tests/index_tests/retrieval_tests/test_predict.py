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


def test_one_near_device_does_not_outvote_two_others_that_agree(db):
    # W7800's nearest is the AMD W6600 (similarity 0.98), then the two NVIDIA devices (0.87-0.88),
    # which agree on a config that reaches a third of the optimum on the AMD one, and vice versa
    target = resolve_target("AMD Radeon PRO W7800")
    pred = db.predict_best(target, WORKLOAD, k=2)
    sims = {m.target_name: m.similarity for m in pred.neighbours}
    assert sims["AMD Radeon PRO W6600"] > max(sims["NVIDIA RTX A4000"], sims["NVIDIA RTX A6000"]) + 0.05
    assert [c.config for c in pred.configs] == [{"bx": 128, "tile": 2}, {"bx": 64, "tile": 4}]
    # the weights are exp(sharpness * (s - 1)): a sharper weighting lets the nearest device decide
    sharp = db.predict_best(target, WORKLOAD, k=1, sharpness=20.0)
    assert sharp.configs[0].config == {"bx": 64, "tile": 4}
    # sharpness 0: every neighbour alike, and the score is the plain mean of the relative speeds
    flat = db.predict_best(target, WORKLOAD, k=1, sharpness=0)
    ev = flat.configs[0].evidence
    assert flat.configs[0].score == pytest.approx(sum(e.relative for e in ev) / len(ev))


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


def test_bad_arguments_are_value_errors(db):
    target = resolve_target("NVIDIA A100-PCIE-40GB")
    with pytest.raises(ValueError, match="k must be"):
        db.predict_best(target, WORKLOAD, k=0)
    with pytest.raises(ValueError, match="default must be"):
        db.predict_best(target, WORKLOAD, default=[("bx", 32)])
    with pytest.raises(ValueError, match="default is not a JSON config"):
        db.predict_best(target, WORKLOAD, default={"bx": object()})
    for bad in (-1.0, float("nan"), True, "5"):
        with pytest.raises(ValueError, match="sharpness must be"):
            db.predict_best(target, WORKLOAD, sharpness=bad)


SPECIALISTS = {"NVIDIA RTX A4000": {"bx": 256, "tile": 1}, "NVIDIA RTX A6000": {"bx": 512, "tile": 1},
               "AMD Radeon PRO W6600": {"bx": 1024, "tile": 1}}
DEFAULT = {"bx": 64, "tile": 2}


def _specialist_cost(device: str, cfg: dict) -> float:
    """Each device has its own specialist config (1 ms there, 4 ms on the others); the default
    runs in 1.1 ms everywhere and is nowhere the best."""
    if cfg == DEFAULT:
        return 1.1e-3
    return 1e-3 if SPECIALISTS[device] == cfg else 4e-3


def test_the_default_config_competes_on_the_neighbours_evidence(tmp_path):
    db = tunedb.open(tmp_path / "db")
    configs = [*SPECIALISTS.values(), DEFAULT]
    db.commit([Record(resolve_target(d), WORKLOAD, c, [_specialist_cost(d, c)] * 3) for d in GPUS for c in configs])
    target = resolve_target("NVIDIA A100-PCIE-40GB")
    # from each neighbour's best config only, the default is no candidate: a specialist is predicted
    without = db.predict_best(target, WORKLOAD, k=3, top_n=1)
    assert DEFAULT not in [c.config for c in without.configs]
    assert without.configs[0].config in SPECIALISTS.values()
    # given as the default, it is scored like the others and wins: 91 % of the optimum on every neighbour
    given = db.predict_best(target, WORKLOAD, k=4, top_n=1, default=DEFAULT)
    first = given.configs[0]
    assert first.config == DEFAULT and len(given.configs) == 4
    assert first.score == pytest.approx(1.0 / 1.1)
    assert {e.target_name: e.cost_s for e in first.evidence} == pytest.approx({d: 1.1e-3 for d in GPUS})
    assert first.score > given.configs[1].score == pytest.approx(without.configs[0].score)
    # a default that no neighbour measured is a candidate with no evidence: score 0, ranked last
    unmeasured = {"bx": 8, "tile": 8}
    last = db.predict_best(target, WORKLOAD, k=10, top_n=1, default=unmeasured).configs[-1]
    assert last.config == unmeasured and last.score == 0
    assert all(e.cost_s is None and e.relative == 0 for e in last.evidence)
    db.close()


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


def test_cli_best_puts_the_kernel_familys_default_among_the_candidates(tmp_path):
    from tunedb.transfer.kernels import default_config

    workload = {"family": "matmul", "M": 512, "N": 512, "K": 512}
    target = resolve_target("NVIDIA A100-PCIE-40GB")
    default = default_config(workload, target)
    db = tunedb.open(tmp_path / "db")
    recs = []
    for d, device in enumerate(GPUS):
        # 21 configs of its own that run in 1 ms there (4 ms on the others): more than the 20 best
        # configs of each neighbour that `best` takes, so the default is in none of those lists
        own = [{**default, "unroll": 100 * (d + 1) + i} for i in range(21)]
        recs += [Record(resolve_target(other), workload, c, [1e-3 if other == device else 4e-3] * 3)
                 for c in own for other in GPUS]
        recs.append(Record(resolve_target(device), workload, default, [1.1e-3] * 3))
    db.commit(recs)
    loc = db.location
    db.close()
    out = run_cli("--json", "best", "--db", loc, "--target", "NVIDIA A100-PCIE-40GB", "--workload",
                  json.dumps(workload), "-k", "2")
    assert out.returncode == 0, out.stderr
    configs = json.loads(out.stdout)["configs"]
    assert configs[0]["config"] == default and configs[0]["score"] == pytest.approx(1 / 1.1)
    # next, one neighbour's own config: its best there, a quarter of the optimum on the others
    assert configs[1]["config"]["unroll"] >= 100 and configs[1]["score"] < 0.7
    evidence = sorted(e["relative"] for e in configs[1]["evidence"])
    assert evidence == pytest.approx([0.25, 0.25, 1.0])
