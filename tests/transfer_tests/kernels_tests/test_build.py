"""Builder: validated codegen only, real compiler, build cache, per-variant paths, locking, failures."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from tunedb.index.hardware.localcpu import preset
from tunedb.transfer.kernels import get_family
from tunedb.transfer.kernels.build import BuildError, build, build_key, build_many, generate_source, machine_lock
from tunedb.transfer.measure.backend import LocalBackend, MeasureOptions, TimingProtocol, measure

INJECTION = '8); system("reboot"); (1'
FAST = MeasureOptions(protocol=TimingProtocol(warmup=0, min_repeat_ms=0.5, repeat=2))
W = {"family": "matmul", "M": 17, "N": 19, "K": 23}


@pytest.fixture
def cc_log(tmp_path, monkeypatch) -> Path:
    """A wrapper compiler that logs each real invocation (not --version) to a file, then runs gcc."""
    log = tmp_path / "cc.log"
    cc = tmp_path / "cc-wrapper"
    cc.write_text(f'#!/bin/sh\n[ "$1" = "--version" ] || echo "$@" >> "{log}"\nexec gcc "$@"\n')
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("TUNEDB_CC", str(cc))
    monkeypatch.setenv("TUNEDB_CACHE_DIR", str(tmp_path / "cache"))
    return log


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _src(cfg_change: dict | None = None) -> str:
    cfg = {**get_family("matmul").default_config(W), **(cfg_change or {})}
    return generate_source(W, cfg)


def test_cache_hit_second_time(cc_log):
    t = preset("cpu-native")
    a = build(t, _src())
    assert not a.cached and a.path.exists() and a.compile_s > 0 and _calls(cc_log) == 1
    b = build(t, _src())
    assert b.cached and b.path == a.path and b.compile_s == pytest.approx(a.compile_s)
    assert _calls(cc_log) == 1  # no compiler process the second time
    assert a.path.name == f"{a.key}.so"


def test_each_variant_and_target_gets_its_own_path(cc_log):
    t1, t2 = preset("cpu-native"), preset("cpu-x86-64-v2")
    a = build(t1, _src())
    b = build(t1, _src({"unroll": 2}))
    c = build(t2, _src())
    assert len({a.path, b.path, c.path}) == 3 and _calls(cc_log) == 3
    assert "-march=x86-64-v2" in cc_log.read_text().splitlines()[2]
    assert build_key("s", ["-O3"], "/cc", "gcc 12") != build_key("s", ["-O3"], "/cc", "gcc 13")


def test_two_targets_two_keys_two_builds(cc_log, tmp_path):
    from tunedb.index import ParquetStore

    db = ParquetStore.open(tmp_path / "db")
    cfg = get_family("matmul").default_config(W)
    r1, c1 = measure(preset("cpu-native"), W, cfg, db=db, backend=LocalBackend(FAST))
    r2, c2 = measure(preset("cpu-x86-64-v3"), W, cfg, db=db, backend=LocalBackend(FAST))
    assert r1.status == r2.status == "ok" and not c1 and not c2
    assert r1.target_key != r2.target_key
    assert r1.meta["build_key"] != r2.meta["build_key"]
    assert not r1.meta["build_cached"] and not r2.meta["build_cached"]
    assert _calls(cc_log) == 2


def test_injection_rejected_before_any_compiler_runs(cc_log, tmp_path):
    from tunedb.index import ParquetStore

    db = ParquetStore.open(tmp_path / "db")
    cfg = {**get_family("matmul").default_config(W), "mr": INJECTION}
    cache = Path(os.environ["TUNEDB_CACHE_DIR"])
    before = sorted(p.name for p in cache.rglob("*")) if cache.exists() else []
    rec, cached = measure(preset("cpu-native"), W, cfg, db=db, backend=LocalBackend(FAST))
    assert rec.status == "invalid" and "mr" in rec.error and not cached
    assert rec.config["mr"] == INJECTION  # kept verbatim as data, never as code
    assert _calls(cc_log) == 0 and not cc_log.exists()
    after = sorted(p.name for p in cache.rglob("*")) if cache.exists() else []
    assert before == after
    # control: the wrapper does see a valid config being built
    ok, _ = measure(preset("cpu-native"), W, get_family("matmul").default_config(W), db=db,
                    backend=LocalBackend(FAST))
    assert ok.status == "ok" and _calls(cc_log) == 1


def test_compile_error_and_build_timeout(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEDB_CACHE_DIR", str(tmp_path / "cache"))
    bad = tmp_path / "bad-cc"
    bad.write_text('#!/bin/sh\n[ "$1" = "--version" ] && { echo "badcc 1.0"; exit 0; }\necho "boom: broken" >&2\nexit 1\n')
    bad.chmod(0o755)
    monkeypatch.setenv("TUNEDB_CC", str(bad))
    with pytest.raises(BuildError, match="boom") as e:
        build(preset("cpu-native"), _src())
    assert e.value.status == "compile_error"
    rec = LocalBackend(FAST).measure(preset("cpu-native"), W, get_family("matmul").default_config(W))
    assert rec.status == "compile_error" and "boom" in rec.error and rec.costs == ()
    slow = tmp_path / "slow-cc"
    slow.write_text('#!/bin/sh\n[ "$1" = "--version" ] && { echo "slowcc 1.0"; exit 0; }\nexec sleep 30\n')
    slow.chmod(0o755)
    monkeypatch.setenv("TUNEDB_CC", str(slow))
    t0 = time.perf_counter()
    rec = LocalBackend(MeasureOptions(build_timeout_s=0.5)).measure(preset("cpu-native"), W,
                                                                   get_family("matmul").default_config(W))
    assert rec.status == "timeout" and "build timed out" in rec.error
    assert time.perf_counter() - t0 < 10


def test_untrusted_march_is_refused():
    t = dict(preset("cpu-native"))
    t["march"] = "native -fplugin=/tmp/evil.so"
    with pytest.raises(BuildError) as e:
        build(t, _src())
    assert e.value.status == "invalid"
    with pytest.raises(ValueError, match="differs from this machine"):
        LocalBackend(FAST).measure(t, W, get_family("matmul").default_config(W))
    with pytest.raises(ValueError, match="not a local preset"):
        LocalBackend(FAST).measure({"kind": "gpu", "name": "h100"}, W, get_family("matmul").default_config(W))


def test_build_many_parallel_in_order(cc_log):
    srcs = [_src({"unroll": u}) for u in (1, 2, 4)] + [_src({"unroll": 1})]
    res = build_many(preset("cpu-native"), srcs, jobs=2)
    assert [type(r).__name__ for r in res] == ["BuildResult"] * 4
    assert res[0].path == res[3].path and len({r.path for r in res}) == 3
    assert _calls(cc_log) == 3  # the duplicate source built once


def test_build_waits_for_a_timed_run(cc_log):
    """A build holds the machine lock shared and a timed run exclusively: no build during a run."""
    done = threading.Event()

    def do_build() -> None:
        build(preset("cpu-native"), _src({"unroll": 8}))
        done.set()

    with machine_lock(exclusive=True):
        th = threading.Thread(target=do_build)
        th.start()
        assert not done.wait(1.0)  # blocked while the "run" holds the lock
        assert _calls(cc_log) == 0
    th.join(60)
    assert done.is_set() and _calls(cc_log) == 1
