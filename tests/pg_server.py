"""A private PostgreSQL cluster for the tests (and .ci/run): find the server binaries, start a
cluster on its own port and unix-socket directory with ``trust`` auth for local connections,
make fresh databases, stop it.

A cluster started from inside a process (a test fixture, a test) dies with that process: a
watchdog (tests/server_watchdog.py) started beside it stops it (``-m immediate``) as soon as the
starting process is gone, even after a SIGKILL.  A cluster started by the CLI below stays up
until ``stop``.

Run as root, the server runs as the ``postgres`` user (``runuser -u postgres``) and its
directory is chowned to it.  CLI (what .ci/run calls)::

    python tests/pg_server.py start DIR PORT     # prints the admin URL
    python tests/pg_server.py stop DIR
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

#: the watchdog script (see the module docstring)
WATCHDOG = Path(__file__).resolve().parent / "server_watchdog.py"
#: watchdog processes started by :func:`start` in this process, by the ``base`` they guard
_WATCHDOGS: dict[Path, list[subprocess.Popen]] = {}


def find_bin(name: str) -> str | None:
    """The newest ``/usr/lib/postgresql/*/bin/NAME``, else NAME on PATH, else None."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                   key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parts[-3].split(".")])
    if found:
        return found[-1]
    return shutil.which(name)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _run(cmd: list[str], timeout: float = 120, prefix: tuple[str, ...] = ()) -> None:
    p = subprocess.run([*prefix, *_as_server_user(cmd)], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed (rc {p.returncode}): "
                           + ((p.stderr or p.stdout).strip().splitlines() or ["no output"])[-1])


def start(base: Path, port: int | None = None, *, listen: str = "127.0.0.1", prefix: tuple[str, ...] = (),
          trust: str | None = None, settings: dict[str, str] | None = None, watch: bool = True) -> str:
    """Create and start a cluster in ``base`` (``data/``, ``sock/``, ``log``) on ``port``
    (default: a free one); returns the admin URL (user postgres, database postgres).
    ``listen``: the address it listens on; ``prefix``: a command the server runs under (another
    network namespace: ``ip netns exec NS``); ``trust``: a further network (CIDR) whose clients
    connect without a password; ``settings``: further server settings; ``watch``: the server
    is stopped (``-m immediate``) when this process dies, however it dies (a watchdog process;
    ``stop(base)`` ends it).  Starting a cluster that exists starts it again (crash recovery after
    a kill).  ``RuntimeError`` (one line) when it cannot."""
    initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
    if not initdb or not pg_ctl:
        raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin "
                           "or on PATH")
    port = port or free_port()
    base = Path(base).resolve()
    base.mkdir(parents=True, exist_ok=True)
    home = _server_home(base)
    (home / "sock").mkdir(exist_ok=True)
    if os.geteuid() == 0:
        for d in (home, home / "sock"):
            shutil.chown(d, "postgres", "postgres")
        os.chmod(home, 0o755)
    if not (home / "data" / "PG_VERSION").exists():
        _run([initdb, "-D", str(home / "data"), "-U", "postgres", "-A", "trust", "-E", "UTF8",
              "--no-sync", "--no-instructions"])
    hba = home / "data" / "pg_hba.conf"
    if trust and trust not in hba.read_text():
        with open(hba, "a") as f:
            f.write(f"host all all {trust} trust\n")
    opts = f"-p {port} -k {home / 'sock'} -c listen_addresses={listen} -c max_connections=200"
    opts += "".join(f" -c {k}={v}" for k, v in (settings or {}).items())
    dog = _start_watchdog(base, home / "data") if watch else None  # before the server: no window unwatched
    try:
        _run([pg_ctl, "-D", str(home / "data"), "-l", str(home / "log"), "-o", opts, "-w", "-t", "60", "start"],
             prefix=prefix)
    except BaseException:
        if dog is not None:
            _end_watchdog(dog)
            _WATCHDOGS[base].remove(dog)
        raise
    (base / "port").write_text(str(port))
    return admin_url(port, listen)


def _start_watchdog(base: Path, data: Path) -> subprocess.Popen:
    """Start the watchdog that stops the cluster in ``data`` (``pg_ctl stop -m immediate``'s
    signal, SIGQUIT, to the postmaster) when this process is gone; kept for :func:`stop`."""
    dog = subprocess.Popen([sys.executable, str(WATCHDOG), str(os.getpid()), str(data / "postmaster.pid"), str(data),
                            "SIGQUIT"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    _WATCHDOGS.setdefault(base, []).append(dog)
    return dog


def _end_watchdog(dog: subprocess.Popen) -> None:
    """End a watchdog of :func:`_start_watchdog` (its server is stopped or never started)."""
    if dog.poll() is None:
        dog.terminate()
    try:
        dog.wait(10)
    except subprocess.TimeoutExpired:
        dog.kill()
        dog.wait(10)


def _server_home(base: Path) -> Path:
    """Where the cluster of ``base`` lives: ``base`` itself when the server user can reach it,
    else a directory under the temp dir named in ``base/home`` (a clone under /root is out of
    the ``postgres`` user's reach)."""
    if (base / "home").exists():
        return Path((base / "home").read_text().strip())
    if os.geteuid() != 0 or subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(base.parent)],
                                           capture_output=True).returncode == 0:
        return base
    home = Path(tempfile.mkdtemp(prefix="tunedb-pg-"))
    (base / "home").write_text(str(home))
    return home


def admin_url(port: int, host: str = "127.0.0.1") -> str:
    return f"postgresql://postgres@{host}:{port}/postgres"


def start_for_test(base: Path) -> str:
    """:func:`start` for a test fixture: the admin URL; when no server can be started, the
    calling test is skipped (failed under ``CI=true``, which must run the PostgreSQL tests) and
    ``base`` removed."""
    import pytest

    try:
        return start(base)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        shutil.rmtree(base, ignore_errors=True)
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the PostgreSQL tests but no server could be started: {e}")
        pytest.skip(f"no PostgreSQL server could be started: {e}")


def restart(base: Path, mode: str = "immediate") -> None:
    """Restart the cluster of ``start(base)`` with ``pg_ctl restart -m MODE`` (``immediate``: a
    crash, every connection cut, recovery on start), waiting until it accepts connections."""
    pg_ctl = find_bin("pg_ctl")
    home = _server_home(Path(base).resolve())
    _run([pg_ctl, "-D", str(home / "data"), "-l", str(home / "log"), "-m", mode, "-w", "-t", "60", "restart"])


def halt(base: Path) -> None:
    """Stop the cluster of ``start(base)`` like a crash (``-m immediate``), keeping its files:
    ``start(base, port)`` brings it back."""
    pg_ctl = find_bin("pg_ctl")
    home = _server_home(Path(base).resolve())
    _run([pg_ctl, "-D", str(home / "data"), "-m", "immediate", "-w", "stop"])


def stop(base: Path) -> None:
    """Stop the cluster of ``start(base)`` (no error when it is not running)."""
    pg_ctl = find_bin("pg_ctl")
    base = Path(base).resolve()
    home = _server_home(base) if base.is_dir() else base
    data = home / "data"
    if pg_ctl and (data / "postmaster.pid").exists():
        try:
            _run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"])
        except RuntimeError:
            _run([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"])
    if home != base:
        shutil.rmtree(home, ignore_errors=True)
    for dog in _WATCHDOGS.pop(base, []):
        _end_watchdog(dog)


def with_database(url: str, dbname: str) -> str:
    """``url`` with its database replaced by ``dbname``."""
    head, _, tail = url.partition("?")
    base = head.rsplit("/", 1)[0] if head.count("/") >= 3 else head
    return f"{base}/{dbname}" + (f"?{tail}" if tail else "")


def create_database(admin: str) -> str:
    """A new empty database on the server of ``admin`` (a URL); returns its URL."""
    import psycopg
    from psycopg import sql

    name = f"tunedb_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(admin, name)


def drop_database(admin: str, url: str) -> None:
    """Drop the database of ``url`` (made by ``create_database``), closing its connections."""
    import psycopg
    from psycopg import sql

    name = url.partition("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "start":
        print(start(Path(argv[1]), int(argv[2]), watch=False))  # up until `stop`, as .ci/run wants
        return 0
    if len(argv) == 2 and argv[0] == "stop":
        stop(Path(argv[1]))
        return 0
    sys.stderr.write("usage: pg_server.py start DIR PORT | stop DIR\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
