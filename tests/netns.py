"""Several "hosts" on one machine for the tests: Linux network namespaces joined by a bridge.

Each host is a network namespace with its own network stack (its own loopback, one veth
interface on a private /24 that never leaves the machine) and, for the processes started in it,
its own host name (a UTS namespace).  The test process stays in the root namespace, which has an
address on the bridge too.  Faults are real: ``cut(host)`` takes the host's link down on the
bridge side (packets in flight are lost, TCP hangs as it would on a pulled cable) and
``kill_host(host)`` SIGKILLs every process of the host and deletes its namespace and interface
(a power cut); ``add`` makes it again with the same address (the host reboots).

Needs root and a kernel that allows network namespaces, veth and bridges; ``available()`` says
whether it works here, and why not.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {(p.stderr or p.stdout).strip()}")
    return p


def available() -> str | None:
    """None when namespaces, veth pairs and bridges can be made here, else the reason."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    name = f"tdbchk{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", name)
        _ip("netns", "del", name)
        _ip("link", "add", name, "type", "bridge")
        _ip("link", "del", name)
    except (RuntimeError, FileNotFoundError, subprocess.TimeoutExpired) as e:
        return f"cannot make network namespaces or bridges here ({e})"
    return None


class Hosts:
    """Hosts on a private bridge ``10.<a>.<b>.0/24`` (a random subnet unused here)."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:5]
        used = _ip("-4", "addr").stdout
        for _ in range(50):
            a, b = 200 + random.randrange(50), random.randrange(256)
            if f"10.{a}.{b}." not in used:
                break
        self.net = f"10.{a}.{b}"
        self.bridge = f"tdbbr{self.tag}"
        self.hosts: dict[str, int] = {}
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.net}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def ns(self, host: str) -> str:
        return f"tdb{self.tag}{host}"

    def veth(self, host: str) -> str:
        return f"tv{self.tag}{host}"[:15]

    def ip(self, host: str) -> str:
        return f"{self.net}.{self.hosts[host]}"

    def add(self, host: str, number: int | None = None) -> str:
        """Make host ``host`` (again) with address number ``number`` (1-250); returns its IP."""
        number = number if number is not None else self.hosts.get(host, len(self.hosts) + 1)
        self.hosts[host] = number
        ns, veth = self.ns(host), self.veth(host)
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", veth, "master", self.bridge)
        _ip("link", "set", veth, "up")
        _ip("-n", ns, "addr", "add", f"{self.net}.{number}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        return self.ip(host)

    def prefix(self, host: str) -> tuple[str, ...]:
        """The command prefix that runs a command in ``host``'s network namespace."""
        return ("ip", "netns", "exec", self.ns(host))

    def command(self, host: str, cmd: list[str]) -> list[str]:
        """``cmd`` run on ``host``: in its network namespace, with its own host name."""
        return ["ip", "netns", "exec", self.ns(host), "unshare", "--uts", "sh", "-c",
                f'hostname {host} && exec "$@"', "sh", *cmd]

    def cut(self, host: str) -> None:
        """Pull ``host``'s cable: its link on the bridge goes down (nothing gets through)."""
        _ip("link", "set", self.veth(host), "down")

    def restore(self, host: str) -> None:
        _ip("link", "set", self.veth(host), "up")

    def pids(self, host: str) -> list[int]:
        p = _ip("netns", "pids", self.ns(host), check=False)
        return [int(x) for x in p.stdout.split()]

    def kill_host(self, host: str) -> None:
        """Power cut: SIGKILL every process of ``host``, then delete its namespace and link."""
        for _ in range(20):
            pids = self.pids(host)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        _ip("netns", "del", self.ns(host), check=False)
        _ip("link", "del", self.veth(host), check=False)

    def close(self) -> None:
        for host in list(self.hosts):
            self.kill_host(host)
        _ip("link", "del", self.bridge, check=False)
