"""A watchdog that stops a test server when the process that started it dies, even by SIGKILL.

Started beside a daemonised server (tests/pg_server.py: ``pg_ctl`` detaches the postmaster, so
no parent-death signal reaches it) in a session of its own, it polls the owner every
``POLL_S`` seconds.  When the owner is gone (no such process, a zombie, or another process that
reused its PID) it sends ``SIGNAL`` to the server whose PID is the first line of ``PIDFILE``
(only if that process's command line or working directory names ``MARKER``), SIGKILLs it if it
is still there after ``GRACE_S`` seconds, and exits.  It also exits, doing nothing, once the
directory of ``PIDFILE`` is gone (the server's files were removed) or on SIGTERM (the owner
stopped the server itself)::

    python tests/server_watchdog.py OWNER_PID PIDFILE MARKER SIGNAL    # SIGNAL: a name, e.g. SIGQUIT
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

#: seconds between two looks at the owner
POLL_S = 0.2
#: seconds the server has to exit after ``SIGNAL`` before it is SIGKILLed
GRACE_S = 10.0


def start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (field 22 of /proc/PID/stat, clock ticks since boot),
    or None when there is no such live process (a zombie counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def alive(pid: int, started: str | None) -> bool:
    """Whether ``pid`` is still the live process that had start time ``started`` (where there is no
    /proc, whether any process ``pid`` exists)."""
    if started is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return start_time(pid) == started


def names(pid: int, marker: str) -> bool:
    """Whether process ``pid``'s command line or working directory contains ``marker``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmdline = ""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""
    return marker in cmdline or marker in cwd


def server_pid(pidfile: Path, marker: str) -> int | None:
    """The PID of the first line of ``pidfile`` when that process is the server (see :func:`names`)."""
    try:
        pid = int(pidfile.read_text().split("\n", 1)[0].strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and names(pid, marker) else None


def stop_server(pidfile: Path, marker: str, sig: signal.Signals) -> None:
    """Send ``sig`` to the server of ``pidfile``; SIGKILL it after ``GRACE_S`` seconds if it is still there."""
    pid = server_pid(pidfile, marker)
    if pid is None:
        return
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        if start_time(pid) is None:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def watch(owner: int, pidfile: Path, marker: str, sig: signal.Signals) -> None:
    """Poll ``owner`` until it is gone (then stop the server) or ``pidfile``'s directory is gone."""
    has_proc = Path("/proc").is_dir()
    started = start_time(owner) if has_proc else None
    while not (has_proc and started is None) and alive(owner, started):  # (None with /proc: gone already)
        if not pidfile.parent.is_dir():
            return
        time.sleep(POLL_S)
    stop_server(pidfile, marker, sig)


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        sys.stderr.write("usage: server_watchdog.py OWNER_PID PIDFILE MARKER SIGNAL\n")
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for pytest: it stops the server itself
    watch(int(argv[0]), Path(argv[1]), argv[2], signal.Signals[argv[3]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
