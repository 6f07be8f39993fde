"""The PostgreSQL backend beyond the shared contract (tests/index_tests/test_store_contract.py runs that):
its schema and migrations, several processes writing at once, writers SIGKILLed mid-commit,
other handles seeing commits, the CLI, and records moved to and from a Parquet store staying
byte-identical.  A real server: the ``postgres_url`` fixture (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tunedb

from helpers import TESTS, run_cli
from pg_workers import POOL, pool_record

psycopg = pytest.importorskip("psycopg")

from tunedb.index.model.keys import rid_hash  # noqa: E402
from tunedb.index.model.record import target_slug  # noqa: E402
from tunedb.index.postgres.migrations import CURRENT_VERSION, migrate, schema_version  # noqa: E402
from tunedb.index.postgres.store import PostgresStore  # noqa: E402

WORKERS = str(TESTS / "pg_workers.py")
T1 = {"kind": "cpu", "name": "alpha", "vector_bits": 256}
W = {"family": "matmul", "M": 64, "N": 64, "K": 64}

#: the records columns of schema version 1 (what a version-1 tunedb wrote)
V1_COLUMNS = ["record_id", "target_key", "target_name", "target", "workload_key", "family", "workload",
              "config_key", "config", "costs", "cost", "status", "error", "compile_s", "wall_s", "timestamp",
              "source", "session", "meta", "lookup_key", "entry_key", "tunedb_version", "schema_version",
              "target_slug", "rid_hash"]
V1_INSERT = ("INSERT INTO records (" + ", ".join(f'"{c}"' for c in V1_COLUMNS) + ", committed, seq) VALUES ("
             + ", ".join(["%s"] * len(V1_COLUMNS)) + ", now(), %s)")


def odd_records():
    """Records whose JSON exercises canonicalisation: unicode, nesting, floats, big ints, bools."""
    t = {"kind": "gpu", "name": "Γ-device ü", "sm": 8.0, "flags": [True, False, None]}
    out = []
    for i in range(12):
        w = {"family": "conv2d", "shape": [1, 64, 56 + i], "dtype": "float16", "eps": 1e-5, "big": 2**70}
        c = {"tile": [i, 2.5, -0.0], "name": 'q"uote\\\n', "on": i % 2 == 0, "x": 1 / 3}
        out.append(tunedb.Record(t, w, c, [1e-4 * (i + 1) / 3, 2.2e-4], compile_s=0.25, wall_s=None,
                                 meta={"note": "ok", "k": [1, 2]}, session="s1", source="imported:kernel_tuner",
                                 origin="file.json", host="h"))
    out.append(tunedb.Record(t, w, {"tile": 99}, [], status="compile_error", error="boom\nline 2"))
    return out


# ---------------------------------------------------------------------------- schema and migrations
def test_schema_created_on_first_open_and_version_recorded(postgres_url):
    s = tunedb.open(postgres_url)
    assert isinstance(s, PostgresStore) and len(s) == 0
    with psycopg.connect(postgres_url) as conn:
        assert [r[0] for r in conn.execute("SELECT version FROM tunedb_schema ORDER BY version")] == \
            list(range(1, CURRENT_VERSION + 1))
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert {"records", "invalidations", "verdicts", "tunedb_meta", "tunedb_changes", "tunedb_schema"} <= tables
        ident = conn.execute("SELECT value FROM tunedb_meta WHERE key = 'identity'").fetchone()[0]
    assert s.identity == ident and len(ident) == 32
    assert s.cache_dir().name == ident
    s.close()
    assert tunedb.open(postgres_url).identity == ident  # a second open migrates nothing, same identity


@pytest.mark.parametrize("from_version", range(CURRENT_VERSION))
def test_migration_from_every_earlier_version(postgres_url, from_version):
    rs = odd_records()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert migrate(conn, upto=from_version) == from_version
        if from_version >= 1:
            for i, r in enumerate(rs):
                row = r.to_row()
                row.update(target_slug=target_slug(r.target_name, r.target_key), rid_hash=rid_hash(r.record_id))
                conn.execute(V1_INSERT, [row[c] for c in V1_COLUMNS] + [i])
    s = tunedb.open(postgres_url)
    with s._db() as conn:
        assert schema_version(conn) == CURRENT_VERSION
    t = s.records().sort_by("record_id")
    if from_version == 0:
        assert t.num_rows == 0
        return
    assert t.num_rows == len(rs)
    by = {r.record_id: r for r in rs}
    for row in t.to_pylist():
        r = by[row["record_id"]]
        want = r.to_row()
        for c in V1_COLUMNS:
            if c in want:
                assert row[c] == want[c], c  # byte-identical JSON texts, keys, costs
        assert row["host"] == "" and row["origin"] == ""  # what schema 1 did not know: unknown
    hit = s.lookup(rs[0].target, rs[0].workload, rs[0].config)
    assert hit.record_id == rs[0].record_id and hit.config_json == rs[0].config_json
    assert s.mark({rs[0].record_id: "refuted"}) == 1  # the tables of later versions exist
    assert s.lookup(rs[0].target, rs[0].workload, rs[0].config) is None


def test_a_newer_schema_is_refused_with_one_line(postgres_url):
    tunedb.open(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO tunedb_schema (version) VALUES (%s)", (CURRENT_VERSION + 7,))
    with pytest.raises(ValueError) as e:
        tunedb.open(postgres_url)
    msg = str(e.value)
    assert "\n" not in msg and str(CURRENT_VERSION + 7) in msg and str(CURRENT_VERSION) in msg


def test_concurrent_first_opens_from_several_processes(postgres_url):
    procs = [subprocess.Popen([sys.executable, WORKERS, "open", postgres_url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    assert {o[0].strip() for o in outs} == {str(CURRENT_VERSION)}
    with psycopg.connect(postgres_url) as conn:
        assert [r[0] for r in conn.execute("SELECT version FROM tunedb_schema ORDER BY version")] == \
            list(range(1, CURRENT_VERSION + 1))
        assert conn.execute("SELECT count(*) FROM tunedb_meta").fetchone()[0] == 1


def test_unreachable_server_and_location_without_password(postgres_url):
    with pytest.raises(OSError) as e:  # transient: a caller that retries on OSError retries
        tunedb.open("postgresql://nobody:secret@127.0.0.1:1/none")
    assert "\n" not in str(e.value) and "secret" not in str(e.value)
    from tunedb.index.postgres.store import redact

    assert redact("postgresql://u:pw@h:5/db?sslmode=off&password=x") == "postgresql://u@h:5/db?sslmode=off"
    assert "@" in tunedb.open(postgres_url).location


# ---------------------------------------------------------------------------- several processes
def _acked(path: Path) -> list[str]:
    """The record_ids a writer acknowledged: complete ``ack`` lines of its output."""
    text = path.read_text() if path.exists() else ""
    return [ln[4:] for ln in text.split("\n")[:-1] if ln.startswith("ack ") and len(ln) == 36]


@pytest.fixture(params=["postgres", "parquet"])
def shared_location(request, tmp_path) -> str:
    """Where the crash and multi-writer tests write: a PostgreSQL database, and beside it - the
    same workers, the same checks - a Parquet directory, so the figures compare."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return str(tmp_path / "parquet-db")


def _stored_rows(s) -> int:
    """Rows as stored, without de-duplication: Parquet rows of the live files (after the open
    that folded the killed writers' journals), PostgreSQL rows.  PostgreSQL stores a record_id
    once (primary key); the lock-free Parquet writers each store their copy of a record another
    process committed at the same time, and readers count it once (``snapshot_files``)."""
    if hasattr(s, "snapshot_files"):
        import pyarrow.dataset as pads

        files = s.snapshot_files()
        return pads.dataset([str(f) for f in files], format="parquet").count_rows() if files else 0
    return len(s)


def _check_store(url: str, acked: set[str]) -> dict:
    s = tunedb.open(url)
    ids = s.records().column("record_id").to_pylist()
    assert len(ids) == len(set(ids)) == len(s), "a record read twice"
    raw = _stored_rows(s)
    if not hasattr(s, "snapshot_files"):
        assert raw == len(ids), "a record stored twice"
    missing = acked - set(ids)
    assert not missing, f"{len(missing)} acknowledged records lost"
    s.close()
    return {"stored": len(ids), "acknowledged": len(acked), "lost": len(missing),
            "duplicated": len(ids) - len(set(ids)), "stored_rows": raw}


def test_several_writer_processes_disjoint_and_overlapping(shared_location, tmp_path):
    postgres_url = shared_location
    tunedb.open(postgres_url).close()
    n = 6
    outs = [tmp_path / f"w{i}.out" for i in range(n)]
    procs = [subprocess.Popen([sys.executable, WORKERS, "write", postgres_url, str(i), "60"],
                              stdout=outs[i].open("w"), stderr=subprocess.PIPE) for i in range(n)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    acked = set().union(*(_acked(o) for o in outs))
    pool = {pool_record(j).record_id for j in range(POOL)}
    assert acked & pool, "the writers overlapped on no record"
    figures = _check_store(postgres_url, acked)
    assert figures["stored"] == len(acked)  # nothing but what was acknowledged
    print(f"multi-writer ({'postgres' if '://' in shared_location else 'parquet'}):", figures)


#: how long a SIGKILL run may wait for its writers' acknowledgements before it gives up (seconds):
#: generous, for a loaded machine where a writer takes seconds to import tunedb and connect
ACK_WAIT_S = 120.0
#: acknowledged records a SIGKILL run needs in all before its last writers are killed
MIN_ACKED = 50


def _wait_for_acks(outs: list[Path], at_least: int, deadline: float) -> int:
    """Poll the writers' outputs until they hold ``at_least`` acknowledged records in all or until
    ``deadline`` (``time.monotonic()``); returns how many they hold then."""
    while True:
        n = sum(len(_acked(o)) for o in outs)
        if n >= at_least or time.monotonic() >= deadline:
            return n
        time.sleep(0.02)


def _acking(running: list[tuple[subprocess.Popen, Path]], deadline: float) -> list[int]:
    """Indexes of the ``running`` writers (process, output) that have acknowledged a commit,
    polled until there is one, until one of them exited on its own or until ``deadline``."""
    while True:
        ready = [i for i, (_, out) in enumerate(running) if out.stat().st_size >= 37]  # one "ack <id>" line
        if ready or time.monotonic() >= deadline or any(p.poll() is not None for p, _ in running):
            return ready
        time.sleep(0.02)


def _sigkill_run(url: str, tmp_path: Path, kills: int, writers: int = 4) -> dict:
    """``writers`` writer processes at once, ``kills`` times one of them SIGKILLed mid-stream (and
    replaced), then the rest: a writer is killed only after it acknowledged a commit (plus a random
    0-0.4 s of further commits), and the last ones only once ``MIN_ACKED`` records were
    acknowledged in all, so the kills land mid-commit however slowly this machine starts a
    writer.  Waits at most ``ACK_WAIT_S`` in all (then the writers are killed and the test fails).
    Returns the figures of :func:`_check_store` plus ``kills``."""
    tunedb.open(url).close()
    rng = random.Random(kills)
    deadline = time.monotonic() + ACK_WAIT_S
    seed = 0
    running: list[tuple[subprocess.Popen, Path]] = []
    outs: list[Path] = []
    exited: list[int] = []  # exit statuses of writers that ended before their SIGKILL

    def spawn():
        nonlocal seed
        out = tmp_path / f"k{seed}.out"
        outs.append(out)
        with out.open("w") as f:
            p = subprocess.Popen([sys.executable, WORKERS, "write", url, str(seed), "0"], stdout=f,
                                 stderr=subprocess.DEVNULL)
        seed += 1
        running.append((p, out))

    def kill(p: subprocess.Popen) -> None:
        p.send_signal(signal.SIGKILL)
        if p.wait() != -signal.SIGKILL:
            exited.append(p.returncode)

    for _ in range(writers):
        spawn()
    done = 0
    try:
        while done < kills:
            ready = _acking(running, deadline)
            if not ready:
                break
            i = rng.choice(ready)
            p, _ = running[i]
            time.sleep(rng.uniform(0.0, 0.4))  # a random point of its stream of commits
            kill(p)
            running.pop(i)
            done += 1
            spawn()
        _wait_for_acks(outs, MIN_ACKED + 1, deadline)
    finally:
        for p, _ in running:
            kill(p)
    acked = set().union(*(_acked(o) for o in outs))
    assert done == kills and len(acked) > MIN_ACKED and not exited, (
        f"the writers acknowledged almost nothing before being killed: {len(acked)} records, "
        f"{done} of {kills} kills in {ACK_WAIT_S:.0f} s, writers that exited on their own: {exited}")
    figures = _check_store(url, acked)
    figures["kills"] = done + len(running)
    return figures


def test_sigkilled_writers_lose_no_acknowledged_record(shared_location, tmp_path):
    figures = _sigkill_run(shared_location, tmp_path, kills=10)
    print(f"sigkill ({'postgres' if '://' in shared_location else 'parquet'}):", figures)
    assert figures["lost"] == 0 and figures["duplicated"] == 0


@pytest.mark.slow
def test_sigkilled_writers_many_runs(shared_location, tmp_path):
    figures = _sigkill_run(shared_location, tmp_path, kills=30, writers=6)
    print(f"sigkill, slow ({'postgres' if '://' in shared_location else 'parquet'}):", figures)
    assert figures["lost"] == 0 and figures["duplicated"] == 0


def test_another_process_commit_is_seen_by_this_handle(postgres_url):
    s = tunedb.open(postgres_url)
    token = s.change_token()
    p = subprocess.run([sys.executable, WORKERS, "write", postgres_url, "42", "3"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    ids = [ln[4:] for ln in p.stdout.splitlines()]
    assert s.change_token() != token
    got = s.records().column("record_id").to_pylist()
    assert set(ids) <= set(got)
    r = next(iter(s.iter_records()))
    assert s.lookup(r.target, r.workload, r.config) is not None


# ---------------------------------------------------------------------------- CLI and interchange
def test_cli_stats_json(postgres_url, tmp_path):
    s = tunedb.open(postgres_url)
    s.commit(odd_records())
    p = run_cli("--db", postgres_url, "stats", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["records"] == len(odd_records()) and d["location"] == s.location


def test_records_move_between_parquet_and_postgres_unchanged(postgres_url, tmp_path):
    cols = ["record_id", "target_key", "workload_key", "config_key", "target", "workload", "config", "meta",
            "costs", "cost", "status", "error", "compile_s", "wall_s", "timestamp", "source", "session",
            "lookup_key", "entry_key", "rid_hash", "target_slug", "host", "origin", "target_name"]
    pq_store = tunedb.open(tmp_path / "pq")
    pq_store.commit(odd_records())
    batch = tunedb.RecordBatch.from_columns(target=[T1] * 5, workload=[W] * 5, config=[{"t": i / 7} for i in range(5)],
                                            costs=[[i * 1.1e-5 + 1e-9] for i in range(5)], origin="o", host="h2")
    pq_store.commit(batch)
    pg = tunedb.open(postgres_url)
    assert pg.commit([tunedb.Record.from_row(r) for r in pq_store.records().to_pylist()]) == 18
    a = pq_store.records().sort_by("record_id").select(cols)
    b = pg.records().sort_by("record_id").select(cols)
    assert a.equals(b)
    back = tunedb.open(tmp_path / "pq2")
    back.commit([tunedb.Record.from_row(r) for r in pg.records().to_pylist()])
    assert back.records().sort_by("record_id").select(cols).equals(a)
    assert pg.commit(batch) == 0  # the batch's ids are all stored: nothing new


# ---------------------------------------------------------------------------- lost replies, restarts
def _fresh_batch(tag: str, n: int = 20) -> list[tunedb.Record]:
    return [tunedb.Record({"kind": "cpu", "name": "pg-retry"}, {"family": "matmul", "M": 4}, {"tag": tag, "i": i},
                          [1e-3]) for i in range(n)]


def _lose_reply(monkeypatch, *, after_commit: bool) -> dict:
    """Make the next transaction of any psycopg connection lose its connection: after the server
    committed it (the reply lost) or before COMMIT was sent (the transaction rolled back)."""
    real = psycopg.Connection.transaction
    state = {"lost": 0}

    @contextlib.contextmanager
    def lossy(self, *a, **k):
        if state["lost"]:
            with real(self, *a, **k) as tx:
                yield tx
            return
        state["lost"] += 1
        if after_commit:
            with real(self, *a, **k) as tx:
                yield tx
        else:
            with contextlib.suppress(psycopg.Error), real(self, *a, **k) as tx:
                yield tx
                raise psycopg.errors.QueryCanceled("rolled back here")  # never committed
        self.close()
        raise psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
    monkeypatch.setattr(psycopg.Connection, "transaction", lossy)
    return state


@pytest.mark.parametrize("after_commit", [True, False])
def test_a_lost_reply_is_answered_truthfully(postgres_url, monkeypatch, after_commit):
    """The connection drops around COMMIT: the store asks the server what happened.  Committed:
    the commit returns its count, nothing is stored twice.  Not committed: it is retried and
    stored once."""
    s = tunedb.open(postgres_url)
    batch = _fresh_batch("lost")
    state = _lose_reply(monkeypatch, after_commit=after_commit)
    assert s.commit(batch) == len(batch)
    assert state["lost"] == 1
    monkeypatch.undo()
    assert len(s) == len(batch) == len(set(s.records().column("record_id").to_pylist()))
    assert s.commit(batch) == 0  # (a retry by the caller stays a no-op)
    s.close()


def test_server_down_is_an_oserror_after_bounded_retries(tmp_path, monkeypatch):
    """A server that is gone: the commit tries COMMIT_ATTEMPTS times with back-off, then raises
    ``OSError`` (transient), and nothing was stored."""
    from tunedb.index.postgres import store as pg_store

    import pg_server

    try:
        url = pg_server.start(tmp_path / "pg")
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"no private PostgreSQL server: {e}")
    try:
        s = tunedb.open(url)
        monkeypatch.setattr(pg_store, "RETRY_BACKOFF_S", 0.01)
        pg_server.stop(tmp_path / "pg")
        t0 = time.perf_counter()
        with pytest.raises(OSError) as e:
            s.commit(_fresh_batch("down"))
        assert "\n" not in str(e.value) and time.perf_counter() - t0 < 60
        with pytest.raises(OSError):
            tunedb.open(url)
    finally:
        pg_server.stop(tmp_path / "pg")


@pytest.mark.slow
def test_commits_ride_out_immediate_restarts(tmp_path):
    """A writer commits fresh records non-stop while the server is restarted with ``-m
    immediate`` (a crash) four times: every commit that returned is stored, every one that raised
    is not (no failed-but-stored), and the bounded retries ride out the restarts."""
    import threading

    import pg_server

    try:
        url = pg_server.start(tmp_path / "pg")
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"no private PostgreSQL server: {e}")
    acked: list[list[str]] = []
    failed: list[list[str]] = []
    stop = threading.Event()

    def writer() -> None:
        s = tunedb.open(url)
        i = 0
        while not stop.is_set():
            batch = _fresh_batch(f"w{i}")
            i += 1
            try:
                s.commit(batch)
                acked.append([r.record_id for r in batch])
            except OSError:
                failed.append([r.record_id for r in batch])
    try:
        t = threading.Thread(target=writer)
        t.start()
        deadline = time.monotonic() + 120  # the first commit before the first crash, however busy the machine
        while not acked and t.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        for _ in range(4):
            time.sleep(1.0)
            pg_server.restart(tmp_path / "pg", "immediate")
        time.sleep(1.0)
        stop.set()
        t.join(timeout=120)
        stored = set(tunedb.open(url).records().column("record_id").to_pylist())
        assert acked and all(set(b) <= stored for b in acked)  # 0 acknowledged lost
        assert not any(set(b) & stored for b in failed)  # 0 failed-but-stored
        assert len(failed) <= 1, len(failed)  # the retries ride out a restart
    finally:
        stop.set()
        pg_server.stop(tmp_path / "pg")


def test_a_field_over_the_csv_block_reads_back(postgres_url, tmp_path):
    """A record with a 2 MiB config string (larger than the CSV reader's 1 MiB block): records()
    of its target and of the whole DB, a lookup, and a copy to Parquet return it unchanged."""
    big = tunedb.Record({"kind": "cpu", "name": "pg-big"}, {"family": "matmul", "M": 2},
                        {"blob": "x\"y\\n," * ((2 << 20) // 6) + "end"}, [1e-3])
    small = _fresh_batch("beside", 3)
    s = tunedb.open(postgres_url)
    assert s.commit([big, *small]) == 4
    for t in (s.records(big.target), s.records()):
        got = dict(zip(t.column("record_id").to_pylist(), t.column("config").to_pylist()))
        assert got[big.record_id] == big.config_json
    assert s.lookup(big.target, big.workload, big.config).config_json == big.config_json
    s.close()
    p = run_cli("copy", postgres_url, str(tmp_path / "pq"))
    assert p.returncode == 0, p.stderr
    pq = tunedb.open(tmp_path / "pq")
    assert pq.lookup(big.target, big.workload, big.config).config_json == big.config_json


def test_hostile_values_round_trip_parquet_postgres_parquet(postgres_url, tmp_path):
    """Quotes, backslashes, COPY and placeholder syntax, CRLF, SQL text, non-BMP characters, an
    escaped NUL and a 2 MiB field: Parquet -> PostgreSQL -> Parquet with ``tunedb copy`` gives
    back every record field by field."""
    values = ["it's \"q\"", "b\\s \\N \\. %s $1", "cr\r\nlf", "'; DROP TABLE records; --", "\U0001f680\U00010348",
              "a\u0000b", "z" * (2 << 20)]
    # (the 2 MiB value in the config only: in three columns it would be over the 4 MiB a record may hold)
    recs = [tunedb.Record({"kind": "cpu", "name": "rt " + v.replace("\u0000", "")[:40]},
                          {"family": "matmul", "note": v[:1000], "M": i}, {"s": v}, [1e-3],
                          session=v.replace("\u0000", "")[:100], meta={"v": v[:1000]}) for i, v in enumerate(values)]
    src = tunedb.open(tmp_path / "a")
    assert src.commit(recs) == len(recs)
    src.close()
    for a, b in ((str(tmp_path / "a"), postgres_url), (postgres_url, str(tmp_path / "b"))):
        p = run_cli("copy", a, b)
        assert p.returncode == 0, (a, b, p.stderr)
    key = ["record_id", "target", "workload", "config", "meta", "session", "target_name", "costs"]

    def rows(loc) -> list:
        t = tunedb.open(loc).records()
        return sorted(tuple(str(r[k]) for k in key) for r in t.to_pylist())
    assert rows(tmp_path / "b") == rows(tmp_path / "a") == rows(postgres_url)


def test_an_unknown_outcome_is_said_when_the_server_stays_away(tmp_path, monkeypatch):
    """The reply is lost after the server committed, and the server is gone before it can be
    asked: the OSError says the outcome is unknown (never "failed"); once the server is back the
    records are there and committing them again is a no-op."""
    from tunedb.index.postgres import store as pg_store

    import pg_server

    base = tmp_path / "pg"
    try:
        url = pg_server.start(base)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"no private PostgreSQL server: {e}")
    port = int((base / "port").read_text())
    try:
        s = tunedb.open(url)
        monkeypatch.setattr(pg_store, "RETRY_BACKOFF_S", 0.01)
        real = psycopg.Connection.transaction

        @contextlib.contextmanager
        def commit_then_vanish(self, *a, **k):
            with real(self, *a, **k) as tx:
                yield tx
            pg_server.halt(base)
            raise psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
        monkeypatch.setattr(psycopg.Connection, "transaction", commit_then_vanish)
        batch = _fresh_batch("unknown")
        with pytest.raises(OSError) as e:
            s.commit(batch)
        assert "unknown" in str(e.value) and "\n" not in str(e.value)
        monkeypatch.undo()
        pg_server.start(base, port)
        again = tunedb.open(url)
        assert len(again) == len(batch) and again.commit(batch) == 0
    finally:
        pg_server.stop(base)
