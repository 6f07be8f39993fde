"""PostgreSQL with the server and its writers on separate hosts: separate network namespaces on
this machine (``tests/netns.py``: own network stacks, own host names, a private bridge, loopback
only), with real faults -- a writer's cable pulled mid-transaction, and the server's host killed
(every process SIGKILLed, its network gone) and booted again (crash recovery on the same data).

Every writer commits batches of fresh records through the faults and prints what each commit
answered.  Goal: 0 acknowledged records lost, 0 records of a commit that failed stored, every
error one line.  The figures are printed (``-s``) for docs/reliability.md.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time

import pytest

import netns
import pg_server
from helpers import TESTS

HERE = TESTS
WORKERS = 3
REASON = netns.available() if sys.platform.startswith("linux") else "network namespaces are Linux-only"
if REASON is None and pg_server.find_bin("initdb") is None:
    REASON = "PostgreSQL server binaries not found (.ci/run installs them)"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

#: the server finds dead clients in seconds too (a client's transaction cut off holds no lock long)
SERVER_SETTINGS = {"tcp_keepalives_idle": "2", "tcp_keepalives_interval": "1", "tcp_keepalives_count": "3",
                   "tcp_user_timeout": "5000", "idle_in_transaction_session_timeout": "10000"}
#: the writers' connections: a cut path fails an attempt in seconds; the store's retries do the rest
CLIENT_PARAMS = "connect_timeout=2&tcp_user_timeout=3000&keepalives_idle=1&keepalives_interval=1&keepalives_count=2"
PORT = 5432


@pytest.fixture
def hosts_and_db(tmp_path):
    hosts = netns.Hosts()
    base = tmp_path / "pg"
    try:
        ip = hosts.add("db", 1)
        for i in range(WORKERS):
            hosts.add(f"w{i}", 10 + i)
        admin = pg_server.start(base, PORT, listen=ip, prefix=hosts.prefix("db"), trust=f"{hosts.net}.0/24",
                                settings=SERVER_SETTINGS)
        url = pg_server.create_database(admin)
        import tunedb
        tunedb.open(url).close()  # the schema, made once
        yield hosts, base, url
    finally:
        hosts.close()  # kills the server with its host
        home = pg_server._server_home(base.resolve()) if base.exists() else base
        if home != base:
            shutil.rmtree(home, ignore_errors=True)


def start_writers(hosts: netns.Hosts, url: str, seconds: float) -> list[subprocess.Popen]:
    return [subprocess.Popen(hosts.command(f"w{i}", [sys.executable, str(HERE / "pg_workers.py"),
                                                     "write-through-faults", f"{url}?{CLIENT_PARAMS}",
                                                     str(1000 + i), str(seconds)]),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE)
            for i in range(WORKERS)]


def collect(procs: list[subprocess.Popen]) -> dict:
    out = {"host": set(), "ack": set(), "fail": set(), "unknown": set(), "errors": [], "slowest_ack_s": 0.0,
           "commits": 0}
    for p in procs:
        stdout, stderr = p.communicate(timeout=240)
        assert p.returncode == 0, stderr[-2000:]
        for line in stdout.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "host":
                out["host"].add(rest)
            elif kind == "error":
                out["errors"].append(rest)
            elif kind in ("ack", "fail", "unknown"):
                took, _, ids = rest.partition(" ")
                out[kind].update(ids.split())
                out["commits"] += 1
                if kind == "ack":
                    out["slowest_ack_s"] = max(out["slowest_ack_s"], float(took))
    return out


def stored(url: str) -> tuple[set[str], set[str]]:
    import psycopg
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT record_id, host FROM records").fetchall()
    return {r[0] for r in rows}, {r[1] for r in rows}


def check(url: str, got: dict, label: str) -> None:
    ids, hosts = stored(url)
    lost = got["ack"] - ids
    failed_but_stored = got["fail"] & ids
    print(f"\n{label}: {got['commits']} commits, {len(got['ack'])} records acknowledged, {len(lost)} lost; "
          f"{len(got['fail'])} in failed commits, {len(failed_but_stored)} of them stored; "
          f"{len(got['unknown'])} in commits of unknown outcome ({len(got['unknown'] & ids)} stored); "
          f"slowest acknowledged commit {got['slowest_ack_s']:.1f} s; {len(got['errors'])} errors")
    for e in got["errors"][:5]:
        print("   ", e)
    assert got["host"] == {f"w{i}" for i in range(WORKERS)}  # each writer is a host of its own ...
    assert hosts == got["host"]  # ... and its records say so
    assert not lost and not failed_but_stored
    assert all("\\n" not in e and "\n" not in e for e in got["errors"])
    assert len(got["ack"]) > 200


def test_a_writer_whose_cable_is_pulled_mid_transaction(hosts_and_db):
    """Each writer's link is cut, in turn, for 0.5-6 s while it commits without pause (so the
    cut falls inside a transaction), then restored."""
    hosts, _, url = hosts_and_db
    procs = start_writers(hosts, url, 24)
    rng = random.Random(7)
    time.sleep(2)
    end = time.monotonic() + 18
    cuts = 0
    while time.monotonic() < end:
        host = f"w{rng.randrange(WORKERS)}"
        hosts.cut(host)
        time.sleep(rng.uniform(0.5, 6))
        hosts.restore(host)
        cuts += 1
        time.sleep(rng.uniform(0.3, 1.5))
    got = collect(procs)
    check(url, got, f"{cuts} cables pulled")
    assert got["slowest_ack_s"] > 0.5  # a commit was in flight when its cable was pulled, and it still landed


def test_the_server_host_is_killed_and_boots_again(hosts_and_db):
    """The server's host dies twice (every process SIGKILLed, its network gone) and boots after
    1-3 s: PostgreSQL recovers from its WAL; the writers' commits ride it out or fail, truthfully."""
    hosts, base, url = hosts_and_db
    procs = start_writers(hosts, url, 26)
    rng = random.Random(11)
    kills = 0
    for _ in range(2):
        time.sleep(rng.uniform(4, 7))
        hosts.kill_host("db")
        kills += 1
        time.sleep(rng.uniform(1, 3))
        ip = hosts.add("db", 1)
        pg_server.start(base, PORT, listen=ip, prefix=hosts.prefix("db"), trust=f"{hosts.net}.0/24",
                        settings=SERVER_SETTINGS)
    got = collect(procs)
    check(url, got, f"server host killed {kills} times")
    assert got["slowest_ack_s"] > 1.0 or got["fail"]  # the kills did hit commits in flight

