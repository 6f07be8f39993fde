"""Worker processes of tests/index_tests/postgres_tests/test_postgres.py (real processes on a real server)::

    python tests/pg_workers.py open URL                 # open (migrating), print the schema version
    python tests/pg_workers.py write URL SEED ROUNDS    # ROUNDS commits (0: until killed)
    python tests/pg_workers.py write-through-faults URL SEED SECONDS   # see write_through_faults

``write`` commits single records and batches of fresh records (ids derived from SEED) mixed
with records of a shared pool (the same ids and contents in every writer), and prints
``ack <record_id>`` for each record of a commit after ``commit`` returned, flushing each line.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import random
import sys

T = {"kind": "cpu", "name": "pg-writer", "threads": 1}
W = {"family": "matmul", "M": 32, "N": 32, "K": 32}
POOL = 300
_TS = _dt.datetime(2024, 1, 1, tzinfo=_dt.timezone.utc)


def rid(*parts: object) -> str:
    return hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).hexdigest()


def pool_record(j: int):
    """Shared record ``j``: the same id and contents in every process."""
    from tunedb.index.model.record import Record

    return Record(T, W, {"pool": j}, [1e-3 + j * 1e-6], timestamp=_TS, record_id=rid("pool", j), host="")


def fresh_record(seed: int, i: int):
    from tunedb.index.model.record import Record

    return Record(T, W, {"seed": seed, "i": i}, [2e-3 + i * 1e-7], record_id=rid("fresh", seed, i))


def write(url: str, seed: int, rounds: int) -> None:
    import tunedb

    rng = random.Random(seed)
    store = tunedb.open(url)
    i = r = 0
    while rounds == 0 or r < rounds:
        r += 1
        batch = []
        for _ in range(1 if rng.random() < 0.4 else rng.randint(2, 25)):
            if rng.random() < 0.3:
                batch.append(pool_record(rng.randrange(POOL)))
            else:
                batch.append(fresh_record(seed, i))
                i += 1
        store.commit(batch[0] if len(batch) == 1 else batch)
        sys.stdout.write("".join(f"ack {x.record_id}\n" for x in batch))
        sys.stdout.flush()
    store.close()


def write_through_faults(url: str, seed: int, seconds: float) -> None:
    """Commit batches of fresh records for ``seconds``, riding out network and server faults:
    ``ack SECONDS IDS`` after a commit returned (how long it took), ``fail SECONDS IDS`` or
    ``unknown SECONDS IDS`` (its OSError said the outcome is unknown) after one raised, then ``error MESSAGE`` (the error's text, repr'd so a
    line break would show); ``host NAME`` first."""
    import socket
    import time

    import tunedb

    rng = random.Random(seed)
    print("host", socket.gethostname(), flush=True)
    store = tunedb.open(url)
    i = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        batch = [fresh_record(seed, i + k) for k in range(rng.randint(1, 40))]
        i += len(batch)
        ids = " ".join(r.record_id for r in batch)
        t0 = time.monotonic()
        try:
            store.commit(batch)
        except OSError as e:
            kind = "unknown" if "unknown" in str(e) else "fail"
            sys.stdout.write(f"{kind} {time.monotonic() - t0:.3f} {ids}\nerror {str(e)!r}\n")
        else:
            sys.stdout.write(f"ack {time.monotonic() - t0:.3f} {ids}\n")
        sys.stdout.flush()
        time.sleep(rng.uniform(0, 0.05))
    store.close()


def main(argv: list[str]) -> int:
    if argv[0] == "open":
        from tunedb.index.postgres.migrations import schema_version

        store = __import__("tunedb").open(argv[1])
        with store._db() as conn:
            print(schema_version(conn))
        return 0
    if argv[0] == "write":
        write(argv[1], int(argv[2]), int(argv[3]))
        return 0
    if argv[0] == "write-through-faults":
        write_through_faults(argv[1], int(argv[2]), float(argv[3]))
        return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
