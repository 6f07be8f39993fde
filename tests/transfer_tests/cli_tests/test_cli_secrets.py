"""The command line never prints a database password: real ``tunedb`` processes against a real
PostgreSQL server whose user authenticates with a password (scram-sha-256), on the error paths (no
server, a wrong password, a malformed URL) and the success paths (``stats``, ``stats --json``,
``best``, ``copy`` into and out of the database, a ``tune`` run), and the run summaries a command
stores hold no password either."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunedb.index import ParquetStore, Record

from helpers import kernel_tuner_file, run_cli

SECRET = "S3cretPass-x9Q"
USER = "tuser_secret"
T = {"kind": "cpu", "name": "secret-target"}
W = {"family": "matmul", "M": 8, "N": 8, "K": 8}


@pytest.fixture(scope="module")
def password_db() -> Iterator[dict]:
    """A private PostgreSQL cluster in which ``USER`` must give ``SECRET`` over TCP
    (scram-sha-256; the admin user stays trusted): ``{"url": the user's URL with the password,
    "port": the server's port, "db": the database name}``.  Skips when no server can be started
    (fails under ``CI=true``)."""
    pytest.importorskip("psycopg")
    import psycopg
    from psycopg import sql

    import pg_server

    base = Path(tempfile.mkdtemp(prefix="tunedb-pg-secret-"))
    admin = pg_server.start_for_test(base)
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(USER),
                                                                             sql.Literal(SECRET)))
            conn.execute(sql.SQL("CREATE DATABASE secretdb OWNER {}").format(sql.Identifier(USER)))
            hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
            hba.write_text(f"host all {USER} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
            conn.execute("SELECT pg_reload_conf()")
        port = int(admin.rsplit(":", 1)[1].split("/")[0])
        url = f"postgresql://{USER}:{SECRET}@127.0.0.1:{port}/secretdb"
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(url.replace(SECRET, "wrong-password"), connect_timeout=10).close()
        yield {"url": url, "port": port, "db": "secretdb"}
    finally:
        pg_server.stop(base)
        shutil.rmtree(base, ignore_errors=True)


def _no_secret(p: subprocess.CompletedProcess, *secrets: str) -> None:
    """Neither stream of ``p`` holds any of ``secrets`` (default: SECRET)."""
    for s in secrets or (SECRET,):
        assert s not in p.stdout and s not in p.stderr, (p.stdout[-2000:], p.stderr[-2000:])


def _error_line(p: subprocess.CompletedProcess) -> str:
    """The one error line of a failed command (exit 2, nothing on stdout, no traceback)."""
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunedb: error: "), p.stderr
    return lines[0]


def test_error_paths_mask_the_password(password_db):
    port = password_db["port"]
    # no server on that port: the URL is shown, its password masked
    p = run_cli("stats", "--db", f"postgresql://{USER}:{SECRET}@127.0.0.1:1/secretdb", timeout=120)
    line = _error_line(p)
    _no_secret(p)
    assert f"postgresql://{USER}:***@127.0.0.1:1/secretdb" in line or f"postgresql://{USER}@127.0.0.1:1" in line
    # a wrong password: the server's refusal is shown, not the password tried
    wrong = "Wr0ngPassw0rd-77"
    p = run_cli("stats", "--db", f"postgresql://{USER}:{wrong}@127.0.0.1:{port}/secretdb", timeout=120)
    assert "password authentication failed" in _error_line(p)
    _no_secret(p, wrong, SECRET)
    # a malformed URL whose error quotes the password alone (psycopg: invalid percent-encoded token)
    odd = "S3c%ZZret-odd"
    p = run_cli("stats", "--db", f"postgresql://{USER}:{odd}@127.0.0.1:{port}/secretdb", timeout=120)
    assert "percent-encoded" in _error_line(p)
    _no_secret(p, odd)
    # the password as a query parameter, and a usage error that quotes the URL
    p = run_cli("stats", "--db", f"postgresql://{USER}@127.0.0.1:1/secretdb?password={SECRET}", timeout=120)
    _error_line(p)
    _no_secret(p)
    p = run_cli("stats", "--db", password_db["url"], "--no-such-option", timeout=120)
    assert p.returncode == 2
    _no_secret(p)
    p = run_cli("stats", password_db["url"], timeout=120)  # argparse quotes the stray argument
    assert "unrecognized arguments" in _error_line(p) and f"{USER}:***@" in p.stderr
    _no_secret(p)
    # a lower layer given twice: the CLI's own message quotes the location
    p = run_cli("stats", "--db", password_db["url"], "--also", password_db["url"], timeout=120)
    assert "given twice" in _error_line(p)
    _no_secret(p)


def test_success_paths_and_stored_runs_hold_no_password(password_db, tmp_path):
    url = password_db["url"]
    src = tmp_path / "src"
    ParquetStore.open(src).commit([Record(T, W, {"tile": i}, [1e-3 * (i + 1)]) for i in range(6)])
    # copy into the database: the success line names the destination, password masked
    p = run_cli("copy", str(src), url, timeout=300)
    assert p.returncode == 0, p.stderr
    _no_secret(p)
    assert f"copied 6, skipped 0 (already in postgresql://{USER}" in p.stdout
    p = run_cli("copy", str(src), url, "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    _no_secret(p)
    res = json.loads(p.stdout)
    assert res["skipped"] == 6 and res["destination"].startswith(f"postgresql://{USER}") and SECRET not in res["destination"]
    # import into the database (the same records: none new)
    dump = tmp_path / "dump.jsonl"
    assert run_cli("export", "--format", "jsonl", str(dump), "--db", str(src), timeout=120).returncode == 0
    for extra in ((), ("--json",)):
        p = run_cli("--db", url, *extra, "import", "jsonl", str(dump), timeout=300)
        assert p.returncode == 0 and "6" in p.stdout, p.stderr
        _no_secret(p)
    # stats, stats --json, best (human and JSON)
    p = run_cli("stats", "--db", url, timeout=120)
    assert p.returncode == 0 and re.search(r"\brecords: 6\n", p.stdout), (p.stdout, p.stderr)
    _no_secret(p)
    assert f"postgresql://{USER}" in p.stdout  # the location is shown, without its password
    p = run_cli("stats", "--db", url, "--json", timeout=120)
    assert p.returncode == 0, p.stderr
    _no_secret(p)
    s = json.loads(p.stdout)
    assert s["records"] == 6 and s["location"].startswith(f"postgresql://{USER}") and SECRET not in s["location"]
    for extra in ((), ("--json",)):
        p = run_cli("best", "--db", url, "--target", "secret-target", "--workload", "matmul:M=8,N=8,K=8", *extra,
                    timeout=120)
        assert p.returncode == 0, p.stderr
        _no_secret(p)
    # a user error of a command on the database (its message names --db as given)
    p = run_cli("best", "--db", url, "--target", "no-such-target", "--workload", "matmul:M=8", timeout=120)
    assert p.returncode == 2
    _no_secret(p)
    # copy out of the database: the source is named
    p = run_cli("copy", url, str(tmp_path / "out"), timeout=300)
    assert p.returncode == 0, p.stderr
    _no_secret(p)
    # a tuning run stores its summary in the database: no password in it, nor in the output
    p = run_cli("tune", "--db", url, "--replay", str(kernel_tuner_file("A6000")), "--budget", "6", timeout=600)
    assert p.returncode == 0, p.stderr
    _no_secret(p)
    import tunedb

    store = tunedb.open(url)
    try:
        runs = store.runs()
        assert runs, "the tune run stored no summary"
        assert SECRET not in json.dumps(runs, default=str)
        assert SECRET not in repr(store) and SECRET not in store.location and SECRET not in str(store.stats().to_dict())
    finally:
        store.close()


def test_the_password_from_the_environment_is_never_printed(password_db):
    bare = password_db["url"].replace(f":{SECRET}@", "@")
    p = run_cli("stats", "--db", bare, "--json", env={"PGPASSWORD": SECRET}, timeout=120)
    assert p.returncode == 0, p.stderr  # libpq took the password from PGPASSWORD
    _no_secret(p)
    p = run_cli("stats", "--db", bare.replace(f":{password_db['port']}/", ":1/"), env={"PGPASSWORD": SECRET},
                timeout=120)
    _error_line(p)
    _no_secret(p)


def test_an_unexpected_exception_prints_its_traceback_masked(password_db, tmp_path):
    """A bug's traceback (here: the opener raises a RuntimeError quoting the URL, planted by a
    sitecustomize) is printed with the password masked."""
    (tmp_path / "sitecustomize.py").write_text(
        "import tunedb.index.opener as s\n"
        "def boom(location, **kw):\n"
        "    raise RuntimeError(f'unexpected failure at {location}')\n"
        "s.open_store = boom\n")
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = run_cli("stats", "--db", password_db["url"], env=env, timeout=120)
    assert p.returncode == 1 and "Traceback" in p.stderr and "RuntimeError: unexpected failure at" in p.stderr
    assert f"{USER}:***@" in p.stderr
    _no_secret(p)
