"""The Triton integration against the real Triton autotuner, on a CPU: kernels run in Triton's
interpreter (``TRITON_INTERPRET=1``, set by the worker process before it imports triton), each
process a real subprocess on a real Parquet DB; Triton's own cache file is written by Triton's
``check_disk_cache`` (``triton_cache_writer.py``) and imported with the real CLI.  Skipped where
triton or torch is not installed (``pip install 'tunedb[triton]'``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

import tunedb  # noqa: E402
from tunedb.transfer.search.asktell import AskTell  # noqa: E402
from tunedb.transfer.tuners.triton.identity import INTERPRETER_KIND, interpreter_target  # noqa: E402
from tunedb.transfer.tuners.triton.keys import config_dict, workload_of  # noqa: E402

HERE = Path(__file__).resolve().parent
BLOCKS = [64, 128, 256, 1024]
#: the benchmarker's reported times of the history runs: BLOCK=128 is the fastest everywhere
FAKE_MS = {"64": 5.0, "128": 1.0, "256": 3.0, "1024": 4.0}
F32 = "torch.float32"



def env(tmp: Path) -> dict:
    return dict(os.environ, TRITON_CACHE_DIR=str(tmp / "triton-cache"), TUNEDB_CACHE_DIR=str(tmp / "tunedb-cache"))


def worker(tmp: Path, **spec) -> list[dict]:
    """One run of ``triton_worker.py`` (its own process); its per-size results."""
    out = subprocess.run([sys.executable, str(HERE / "triton_worker.py"), json.dumps(spec)], capture_output=True,
                         text=True, env=env(tmp), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])["runs"]


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tunedb", *args], capture_output=True, text=True, env=env(tmp),
                          timeout=300)


def entry(n: int) -> tuple[dict, dict]:
    return interpreter_target(), workload_of("add_kernel", (n, F32, F32, F32))


def configs() -> list[dict]:
    return [{"BLOCK": b, "num_ctas": 1, "num_stages": 3, "num_warps": 4} for b in BLOCKS]


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """A DB holding every config of sizes 1000, 2000, 4000 on this interpreter target."""
    tmp = tmp_path_factory.mktemp("history")
    runs = worker(tmp, db=str(tmp / "db"), sizes=[1000, 2000, 4000], fake_ms=FAKE_MS)
    assert all(sorted(r["benched"]) == BLOCKS and r["used"] == 128 and r["correct"] for r in runs)
    return tmp / "db"


def test_a_second_process_benchmarks_nothing_and_picks_the_same_config(tmp_path):
    db = str(tmp_path / "db")
    first = worker(tmp_path, db=db, sizes=[1000])[0]
    assert sorted(first["benched"]) == BLOCKS and first["source"] == "measured" and first["correct"]
    second = worker(tmp_path, db=db, sizes=[1000])[0]
    assert second["benched"] == [] and second["source"] == "db" and not second["predicted"]
    assert second["used"] == first["used"] and second["correct"]
    store = tunedb.open(db)
    recs = store.records(*entry(1000))
    assert recs.num_rows == 4 and set(recs.column("status").to_pylist()) == {"ok"}
    rec = store.lookup(*entry(1000), configs()[0])
    assert rec.target["kind"] == INTERPRETER_KIND and rec.meta["statistic"] == "median" and len(rec.costs) == 1


def test_a_failing_config_is_stored_as_failed_and_never_retried(tmp_path):
    db = str(tmp_path / "db")
    first = worker(tmp_path, db=db, sizes=[1000], fail=True)[0]
    assert sorted(first["benched"]) == [64, 128, 256] and first["used"] != 1024 and first["correct"]
    rec = tunedb.open(db).lookup(*entry(1000), configs()[3])
    assert rec.status == "compile_error" and "static assertion" in rec.error
    second = worker(tmp_path, db=db, sizes=[1000], fail=True)[0]
    assert second["benched"] == [] and second["used"] == first["used"]


def test_a_new_shape_is_benchmarked_in_the_predicted_order_and_top_k_limits_it(history, tmp_path):
    db = tmp_path / "db"
    shutil.copytree(history, db)
    study = AskTell(tunedb.open(str(db)), *entry(3000), configs=configs())
    expected = [s.config["BLOCK"] for s in study.suggest()]
    assert expected[0] == 128  # the history's best first
    run = worker(tmp_path, db=str(db), sizes=[3000], top_k=1, fake_ms=FAKE_MS)[0]
    assert run["benched"] == expected[:1] and run["used"] == 128 and run["source"] == "measured"
    assert tunedb.open(str(db)).records(*entry(3000)).num_rows == 1


def test_benchmark_false_uses_the_prediction_and_says_so(history, tmp_path):
    db = tmp_path / "db"
    shutil.copytree(history, db)
    run = worker(tmp_path, db=str(db), sizes=[5000], benchmark=False)[0]
    assert run["benched"] == [] and run["used"] == 128 and run["correct"]
    assert run["source"] == "predicted" and run["predicted"]
    assert run["warnings"] and run["warnings"][0].startswith("PredictedConfigWarning")
    assert tunedb.open(str(db)).records(*entry(5000)).num_rows == 0


def test_import_of_a_cache_file_written_by_triton(tmp_path):
    timings = {"64": [0.5, 0.4, 0.6], "128": [0.2, 0.19, 0.21], "256": [0.3, 0.28, 0.33], "1024": None}
    out = subprocess.run([sys.executable, str(HERE / "triton_cache_writer.py"), json.dumps(timings)],
                         capture_output=True, text=True, env=env(tmp_path), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    cache = tmp_path / "triton-cache"
    (written,) = cache.rglob("*.autotune.json")
    odd = cache / "other" / "odd_kernel.autotune.json"
    odd.parent.mkdir()
    odd.write_text(json.dumps({**json.loads(written.read_text()), "version": 2}))
    (tmp_path / "target.json").write_text(json.dumps(interpreter_target()))
    db = str(tmp_path / "db")
    res = cli(tmp_path, "import", "triton", str(cache), "--device", str(tmp_path / "target.json"), "--db", db,
              "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["imported"] == 4 and report["skipped"] == 1
    assert "odd_kernel.autotune.json" in report["errors"][0]["where"] and "'version'" in report["errors"][0]["error"]
    store = tunedb.open(db)
    for b, t in timings.items():
        rec = store.lookup(*entry(1000), configs()[BLOCKS.index(int(b))])
        if t is None:
            assert rec.status == "compile_error" and rec.costs == ()
        else:
            assert rec.status == "ok" and rec.costs == pytest.approx((t[0] * 1e-3,)) and rec.source == "imported:triton"
            assert rec.meta["triton"]["times_ms"] == t and rec.meta["triton"]["statistic"] == "median"
    assert store.records(target=None, workload=workload_of("odd_kernel", (1000, F32, F32, F32))).num_rows == 0
    run = worker(tmp_path, db=db, sizes=[1000])[0]  # the imported decision is the decorator's exact hit
    assert run["benched"] == [] and run["used"] == 128 and run["source"] == "db"


def test_import_without_a_device_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "k.autotune.json").write_text(json.dumps({"key": [1], "configs_timings": []}))
    res = cli(tmp_path, "import", "triton", str(tmp_path), "--db", str(tmp_path / "db"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "--device" in res.stderr
    assert not (tmp_path / "db").exists()


def test_a_config_of_a_cache_file_with_an_unknown_field_is_refused():
    with pytest.raises(ValueError, match="unknown Triton config field"):
        config_dict({"kwargs": {"BLOCK": 64}, "num_warps": 4, "maxnreg_v2": 1})
    assert config_dict({"kwargs": {"BLOCK": 64}, "num_warps": 8, "maxnreg": None}) == \
        {"BLOCK": 64, "num_warps": 8, "num_ctas": 1, "num_stages": 3}
