"""No test server outlives a killed test run: a real ``pytest`` subprocess starts a private server
through the suite's own code (the ``postgres_server`` fixture of tests/conftest.py; an
``NginxServer`` of tests/nginx_server.py), waits, and is SIGKILLed; within ``GONE_WITHIN_S``
seconds no process of that server may remain (/proc: command lines, working directories, PIDs)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_watchdog import start_time

import nginx_server
import pg_server
from helpers import TESTS

#: how long the server may take to go after its pytest was SIGKILLed (seconds)
GONE_WITHIN_S = 30.0
#: how long the inner pytest may take to start its server (seconds; initdb on a loaded machine)
START_WITHIN_S = 180.0

INNER_CONFTEST = """\
import importlib.util
import sys

sys.path.insert(0, {tests!r})
_spec = importlib.util.spec_from_file_location("tunedb_tests_conftest", {conftest!r})
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
postgres_server = _suite.postgres_server  # the suite's fixture, as the suite's tests use it
"""

INNER_POSTGRES = """\
import os
import time
from pathlib import Path


def test_hold_a_private_server(postgres_server):
    Path(os.environ["HOLD_FILE"] + ".part").write_text(postgres_server)
    os.replace(os.environ["HOLD_FILE"] + ".part", os.environ["HOLD_FILE"])
    time.sleep(600)
"""

INNER_NGINX = """\
import os
import time
from pathlib import Path

import nginx_server


def test_hold_a_private_nginx(tmp_path):
    (tmp_path / "www").mkdir()
    srv = nginx_server.NginxServer(tmp_path / "nginx", tmp_path / "www").start()
    Path(os.environ["HOLD_FILE"] + ".part").write_text(f"{srv.proc.pid} {srv.base}")
    os.replace(os.environ["HOLD_FILE"] + ".part", os.environ["HOLD_FILE"])
    time.sleep(600)
"""


def _inner_pytest(tmp_path: Path, test_text: str) -> tuple[subprocess.Popen, Path]:
    """Start ``pytest`` on a one-test folder (``test_text``, the suite's fixtures at hand); returns
    the process and the file its test writes once its server is up."""
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "conftest.py").write_text(INNER_CONFTEST.format(tests=str(TESTS), conftest=str(TESTS / "conftest.py")))
    (inner / "test_hold.py").write_text(test_text)
    hold = tmp_path / "hold"
    env = {k: v for k, v in os.environ.items() if k != "TUNEDB_TEST_POSTGRES"}  # its own server, not CI's
    env.update(HOLD_FILE=str(hold), PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")])))
    with open(tmp_path / "inner.log", "w") as log:
        p = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:dash",
                              "--basetemp", str(tmp_path / "inner-tmp"), str(inner)],
                             cwd=inner, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    return p, hold


def _wait_for_hold(p: subprocess.Popen, hold: Path, tmp_path: Path) -> str:
    """The inner test's report once its server is up (the inner pytest is killed on failure)."""
    deadline = time.monotonic() + START_WITHIN_S
    while not hold.exists():
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            p.wait()
            log = (tmp_path / "inner.log").read_text()[-3000:]
            if "skipped" in log.lower() and "passed" not in log.lower():
                pytest.skip(f"the inner pytest could not start its server: {log.strip().splitlines()[-1]}")
            pytest.fail(f"the inner pytest did not start its server (rc {p.returncode}):\n{log}")
        time.sleep(0.05)
    return hold.read_text()


def _processes() -> dict[int, tuple[str, str, str | None]]:
    """Every live process: pid -> (command line, working directory, start time)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        pid = int(d.name)
        try:
            cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        try:
            cwd = os.readlink(d / "cwd")
        except OSError:
            cwd = ""
        started = start_time(pid)
        if started is not None:
            out[pid] = (cmdline, cwd, started)
    return out


def _of_server(marker: str) -> dict[int, str]:
    """Live processes whose command line names ``marker`` or that run in it: pid -> start time."""
    return {pid: started for pid, (cmdline, cwd, started) in _processes().items()
            if marker in cmdline or cwd == marker or cwd.startswith(marker + "/")}


def _children(pids: set[int]) -> dict[int, str]:
    """Live children of ``pids``: pid -> start time."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            started = start_time(int(d.name))
            if ppid in pids and started is not None:
                out[int(d.name)] = started
    return out


def _still_there(seen: dict[int, str], marker: str) -> dict[int, str]:
    """Of the processes ``seen`` (pid -> start time) and those naming ``marker``, the live ones."""
    left = {pid: st for pid, st in seen.items() if start_time(pid) == st}
    return left | _of_server(marker)


def _wait_gone(seen: dict[int, str], marker: str) -> dict[int, str]:
    """Poll until none of the server's processes is left or ``GONE_WITHIN_S`` passed; what is left."""
    deadline = time.monotonic() + GONE_WITHIN_S
    left = _still_there(seen, marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _still_there(seen, marker)
    return left


def _kill_left(left: dict[int, str]) -> None:
    """Clean up after a failure: SIGKILL what is left."""
    for pid, st in left.items():
        if start_time(pid) == st:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")
def test_private_postgres_dies_with_a_sigkilled_pytest(tmp_path):
    if pg_server.find_bin("initdb") is None:
        pytest.skip("PostgreSQL server binaries (initdb) not installed")
    psycopg = pytest.importorskip("psycopg")
    p, hold = _inner_pytest(tmp_path, INNER_POSTGRES)
    url = _wait_for_hold(p, hold, tmp_path)
    with psycopg.connect(url, autocommit=True) as conn:
        data = str(conn.execute("SHOW data_directory").fetchone()[0])
    seen = _of_server(data)
    try:
        assert len(seen) >= 2, f"the server of {data} was not found among the processes"  # postmaster + helpers
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        left = _wait_gone(seen, data)
        assert not left, {pid: _processes().get(pid, ("?",))[0] for pid in left}
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        _kill_left(_still_there(seen, data))
        shutil.rmtree(Path(data).parent, ignore_errors=True)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")
def test_private_nginx_dies_with_a_sigkilled_pytest(tmp_path):
    if nginx_server.find_nginx() is None:
        pytest.skip("nginx not installed")
    p, hold = _inner_pytest(tmp_path, INNER_NGINX)
    master, base = _wait_for_hold(p, hold, tmp_path).split(" ", 1)
    seen = _of_server(base) | _children({int(master)})
    try:
        assert int(master) in seen and len(seen) >= 2, seen  # master + worker
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        left = _wait_gone(seen, base)
        assert not left, {pid: _processes().get(pid, ("?",))[0] for pid in left}
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        _kill_left(_still_there(seen, base))
