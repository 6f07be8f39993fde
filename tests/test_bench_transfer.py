"""benchmarks/bench_transfer.py: the Optuna TPE baseline on real replayed Kernel Tuner data, and
the --strategies filter (the bench run as a real subprocess)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tunedb.index.model.keys import canonical_json
from tunedb.transfer.measure.replay import ReplayData

from helpers import ROOT, kernel_tuner_file

BENCH = ROOT / "benchmarks" / "bench_transfer.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_transfer", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args: str, block_optuna: bool = False) -> subprocess.CompletedProcess:
    """The bench as a script; ``block_optuna``: as in an environment without optuna (importing it
    raises ImportError)."""
    code = ("import runpy, sys\n"
            + ("sys.modules['optuna'] = None\n" if block_optuna else "")
            + f"sys.argv = [{str(BENCH)!r}] + sys.argv[1:]\n"
            + f"runpy.run_path({str(BENCH)!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def datas() -> dict[str, ReplayData]:
    """Three devices of the convolution data set: W6600 is held out, the other two are the history."""
    return {dev: ReplayData(kernel_tuner_file(dev)) for dev in ("A100", "MI250X", "W6600")}


def test_tpe_measures_the_other_devices_bests_first_then_distinct_valid_configs(datas):
    pytest.importorskip("optuna")
    bench = _bench()
    held = datas["W6600"]
    priors = bench.source_bests(datas, "W6600")
    assert priors == list({canonical_json(d.optimum()[0]): d.optimum()[0]
                           for dev, d in datas.items() if dev != "W6600"}.values())
    order = bench.tpe_order(held, priors, 20, seed=0)
    assert order[:len(priors)] == priors
    assert len(order) == 20
    keys = [canonical_json(c) for c in order]
    assert len(set(keys)) == 20  # a repeated proposal spends no budget
    assert all(held.space.is_valid(c) and k in held.results for c, k in zip(order, keys))
    assert bench.tpe_order(held, priors, 20, seed=0) == order  # seeded: the same run again
    assert bench.tpe_order(held, priors, 20, seed=1)[:len(priors)] == priors


def test_the_tpe_proposal_cap_stops_a_run_short(datas):
    pytest.importorskip("optuna")
    bench = _bench()
    priors = bench.source_bests(datas, "W6600")
    assert bench.tpe_order(datas["W6600"], priors, 20, seed=0, max_asks=2) == priors[:2]


def test_the_tpe_row_says_skipped_without_optuna():
    p = _run("--strategies", "optuna_tpe", "--data", str(kernel_tuner_file("W6600").parents[1]),
             "--kernels", "convolution_milo", "--devices", "W6600", block_optuna=True)
    assert p.returncode == 0, p.stderr
    line = "skipped: optuna not installed (pip install -e '.[bench]')"
    assert f"optuna_tpe     {line}" in p.stderr
    out = json.loads(p.stdout)
    assert out["table"] == {"optuna_tpe": {"skipped": line}}
    assert out["strategies"] == ["optuna_tpe"] and out["devices"] == []


def test_an_unknown_strategy_is_refused():
    p = _run("--strategies", "optuna_tpe,nope")
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.strip().splitlines()[-1].endswith(
        "error: --strategies: unknown nope (choose from " + ", ".join(_bench().ALL_STRATEGIES) + ")")
