"""A private nginx for the tests (and benchmarks/bench_publish.py): Debian's nginx binary on its
own free 127.0.0.1 port, with its own prefix, config, pid file, logs and temp directories under a
directory of the caller's (no root-owned defaults are touched), serving one directory as it is.

    srv = NginxServer(base_dir, root=snapshot_dir, max_ranges=None)  # max_ranges=0: no Range support
    srv.start(); srv.url  # http://127.0.0.1:PORT/
    srv.stop()            # fast shutdown: open connections are cut (a server that stops mid-read)
    srv.served()          # the access log so far: (path, status, body bytes sent) per request
    srv.clear_log()       # empty the access log (measure one command's requests)

The nginx is a child of the process that started it and gets SIGTERM (a fast shutdown) when
that process dies, even by SIGKILL (Linux: ``PR_SET_PDEATHSIG``), so no server outlives a
killed test run.  (The kernel sends it when the *thread* that started nginx ends: start it from
a thread that outlives it, such as the main thread.)

CLI::

    python tests/nginx_server.py serve ROOT [PORT]   # in the foreground, until Ctrl-C
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: ``prctl`` option: the signal this process gets when the thread that started it ends (linux/prctl.h)
PR_SET_PDEATHSIG = 1


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library (for ``prctl``), loaded in the parent: loading it between fork and exec could hang."""
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def die_with_parent(libc: ctypes.CDLL | None, parent: int) -> None:
    """In a child between fork and exec (``preexec_fn``): have the kernel send it SIGTERM when its
    parent dies (Linux: ``libc`` from :func:`_libc`; nothing where that is None), and exit at once
    if ``parent`` (the PID of the process that forked it) is already gone."""
    if libc is None:
        return
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        os._exit(126)
    if os.getppid() != parent:
        os._exit(1)


def find_nginx() -> str | None:
    for p in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if p and os.access(p, os.X_OK):
            return p
    return None


def need_nginx() -> None:
    """Skip the calling test when nginx is missing (fail it under ``CI=true``: .ci/run installs it)."""
    import pytest

    if find_nginx() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nginx is missing under CI=true (.ci/run installs Debian's nginx)")
        pytest.skip("nginx not installed (apt-get install -y nginx); CI runs these tests")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONF = """\
{user}
worker_processes 1;
pid {base}/nginx.pid;
error_log {base}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log {base}/logs/access.log;
    client_body_temp_path {base}/tmp/body;
    proxy_temp_path {base}/tmp/proxy;
    fastcgi_temp_path {base}/tmp/fastcgi;
    uwsgi_temp_path {base}/tmp/uwsgi;
    scgi_temp_path {base}/tmp/scgi;
    types {{ application/json json; application/octet-stream parquet; }}
    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout 30;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        etag on;
        {extra}
        location / {{ try_files $uri =404; }}
    }}
}}
"""


#: a request line of the access log (nginx's default ``combined`` format): its path, status and
#: ``$body_bytes_sent`` (the bytes of the body, without headers: for a Range request, the range's)
LOG_LINE = re.compile(r'"[A-Z]+ (?P<path>\S+) [^"]*" (?P<status>\d{3}) (?P<bytes>\d+) ')


class NginxServer:
    """One private nginx serving ``root`` (see the module docstring).  ``max_ranges``: nginx's
    setting (0: Range requests are answered with the whole file); ``limit_rate``: bytes/s per
    connection (e.g. ``"200k"``: slow enough to stop the server mid-read)."""

    def __init__(self, base: Path, root: Path, *, port: int | None = None, max_ranges: int | None = None,
                 limit_rate: str | None = None) -> None:
        self.bin = find_nginx()
        if self.bin is None:
            raise RuntimeError("nginx not found (apt-get install -y nginx)")
        self.base = Path(base).resolve()
        self.root = Path(root).resolve()
        self.port = port or free_port()
        self.max_ranges = max_ranges
        self.limit_rate = limit_rate
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def _config(self) -> Path:
        for d in ("logs", "tmp"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        extra = []
        if self.max_ranges is not None:
            extra.append(f"max_ranges {int(self.max_ranges)};")
        if self.limit_rate:
            extra.append(f"limit_rate {self.limit_rate};")
        # as root, nginx's workers would run as nobody, who cannot read a 0700 pytest temp dir
        user = "user root root;" if os.geteuid() == 0 else ""
        conf = self.base / "nginx.conf"
        conf.write_text(CONF.format(user=user, base=self.base, port=self.port, root=self.root,
                                    extra=" ".join(extra)))
        return conf

    def start(self, timeout: float = 15.0) -> NginxServer:
        conf = self._config()
        cmd = [self.bin, "-p", str(self.base), "-c", str(conf), "-e", str(self.base / "logs" / "error.log"),
               "-g", "daemon off;"]
        libc, parent = _libc(), os.getpid()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=lambda: die_with_parent(libc, parent))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = (self.proc.stderr.read() or b"").decode(errors="replace").strip().splitlines()
                raise RuntimeError(f"nginx exited (rc {self.proc.returncode}): {err[-1] if err else 'no output'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nginx did not listen on 127.0.0.1:{self.port} within {timeout:.0f} s")

    def stop(self) -> None:
        """Fast shutdown (SIGTERM): connections in flight are cut."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    @property
    def access_log(self) -> Path:
        return self.base / "logs" / "access.log"

    def served(self) -> list[tuple[str, int, int]]:
        """Every request in the access log so far: ``(path, status, body bytes sent)``, in order
        (nginx writes a line when a request completes)."""
        try:
            text = self.access_log.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return [(m["path"], int(m["status"]), int(m["bytes"])) for m in map(LOG_LINE.search, text.splitlines()) if m]

    def clear_log(self) -> None:
        """Empty the access log (nginx keeps appending to the same file)."""
        if self.access_log.exists():
            with open(self.access_log, "r+b") as f:
                f.truncate(0)

    def restart(self) -> NginxServer:
        self.stop()
        return self.start()

    def __enter__(self) -> NginxServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "serve":
        sys.exit("usage: python tests/nginx_server.py serve ROOT [PORT]")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tunedb-nginx-") as d:
        srv = NginxServer(Path(d), Path(sys.argv[2]), port=int(sys.argv[3]) if len(sys.argv) > 3 else None).start()
        print(srv.url, flush=True)
        try:
            srv.proc.wait()
        except KeyboardInterrupt:
            srv.stop()
