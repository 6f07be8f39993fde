"""Build C kernels: code generation from our templates, the compiler call, the build cache.

Contract
--------
* ``generate_source(workload, config)`` validates the workload and the config against the
  family's ``Space`` (``InvalidConfig`` / ``ValueError`` before anything else happens) and
  renders the family's own template; ``templating.render_template`` pastes only exact ``int`` values.
* ``build(target, source)`` compiles with ``<cc> -O3 -march=<target march> -fopenmp -shared
  -fPIC`` (``cc`` = ``$TUNEDB_CC``, else ``$CC``, else ``cc``; the compiler runs without a shell).
  The result is cached under ``cache_dir()/builds/<key>.so`` where ``key`` = BLAKE2b of (source,
  flags, compiler path, compiler version): each variant has its own path, so ``dlopen``'s
  by-path cache never hands back another variant.  A cache hit starts no process.
* ``cache_dir()``: ``$TUNEDB_CACHE_DIR``, else ``$XDG_CACHE_HOME/tunedb``, else ``~/.cache/tunedb``.
* ``machine_lock(exclusive)``: an advisory ``flock`` on ``cache_dir()/machine.lock``; builds hold it
  shared, timed runs exclusively, so timed runs never overlap a build or each other (across
  processes that use the same cache directory).
* ``build_many`` builds several sources in parallel (a thread pool of compiler processes).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunedb.index.hardware.localcpu import UARCH_MARCH
from tunedb.transfer.kernels import family_of

#: gcc -march values a build accepts (the local preset levels and microarchitectures); anything else is refused
ALLOWED_MARCH = ("native", "x86-64-v4", "x86-64-v3", "x86-64-v2", "x86-64", *UARCH_MARCH)

DEFAULT_BUILD_TIMEOUT_S = 120.0


class BuildError(Exception):
    """The compiler failed (``status`` 'compile_error') or ran too long (``status`` 'timeout')."""

    def __init__(self, message: str, status: str = "compile_error", compile_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.compile_s = compile_s


@dataclass(frozen=True)
class BuildResult:
    """A built shared object: ``path`` (unique per variant), ``key`` (hex), ``compile_s`` (seconds the
    compiler ran when this variant was built), ``cached`` (True when no compiler ran this time)."""

    path: Path
    key: str
    compile_s: float
    cached: bool


def generate_source(workload: Any, config: Any) -> str:
    """C source for (workload, config); the config is validated against the family's space first."""
    fam = family_of(workload)
    if fam.kind != "c":
        raise ValueError(f"family {fam.name} is not a C family")
    w = fam.validate_workload(workload)
    cfg = fam.space(w).validate(config)
    return fam.source(w, cfg)


def cache_dir() -> Path:
    """The build cache / lock directory (created)."""
    env = os.environ.get("TUNEDB_CACHE_DIR")
    if env:
        d = Path(env)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        d = (Path(xdg) if xdg else Path.home() / ".cache") / "tunedb"
    d.mkdir(parents=True, exist_ok=True)
    return d


def compiler() -> str:
    """Path of the C compiler: ``$TUNEDB_CC``, ``$CC`` or ``cc`` from PATH."""
    name = os.environ.get("TUNEDB_CC") or os.environ.get("CC") or "cc"
    path = shutil.which(name)
    if not path:
        raise BuildError(f"C compiler {name!r} not found")
    return path


_VERSION_CACHE: dict[str, str] = {}


def compiler_version(cc: str | None = None) -> str:
    """First line of ``<cc> --version`` (cached per compiler path and mtime)."""
    cc = cc or compiler()
    try:
        stamp = f"{cc}:{os.stat(cc).st_mtime_ns}"
    except OSError:
        stamp = cc
    if stamp not in _VERSION_CACHE:
        try:
            out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise BuildError(f"cannot run {cc} --version: {e}") from None
        _VERSION_CACHE[stamp] = out.splitlines()[0].strip() if out else "unknown"
    return _VERSION_CACHE[stamp]


def target_flags(target: Mapping[str, Any]) -> list[str]:
    """Compiler flags for ``target``: -O3, its -march level, OpenMP, shared PIC output."""
    march = target.get("march")
    if march not in ALLOWED_MARCH:
        raise BuildError(f"target march {march!r} is not one of {list(ALLOWED_MARCH)}", status="invalid")
    return ["-O3", f"-march={march}", "-fopenmp", "-shared", "-fPIC"]


def build_key(source: str, flags: Sequence[str], cc: str, version: str) -> str:
    """32-hex key of a build: hash of source, flags, compiler path and version."""
    h = hashlib.blake2b(digest_size=16)
    for part in (source, "\0".join(flags), cc, version):
        h.update(part.encode())
        h.update(b"\x00\x01")
    return h.hexdigest()


@contextlib.contextmanager
def machine_lock(exclusive: bool) -> Iterator[None]:
    """Hold ``cache_dir()/machine.lock``: shared for builds, exclusive for timed runs."""
    path = cache_dir() / "machine.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def build(target: Mapping[str, Any], source: str, timeout_s: float = DEFAULT_BUILD_TIMEOUT_S) -> BuildResult:
    """Compile ``source`` for ``target`` (or return the cached shared object).  Raises BuildError."""
    cc = compiler()
    flags = target_flags(target)
    version = compiler_version(cc)
    key = build_key(source, flags, cc, version)
    bdir = cache_dir() / "builds"
    bdir.mkdir(parents=True, exist_ok=True)
    so = bdir / f"{key}.so"
    meta_path = bdir / f"{key}.json"
    if so.exists():
        compile_s = 0.0
        try:
            compile_s = float(json.loads(meta_path.read_text())["compile_s"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return BuildResult(so, key, compile_s, True)
    with machine_lock(exclusive=False), tempfile.TemporaryDirectory(dir=bdir, prefix="tmp-") as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_text(source)
        out = Path(tmp) / "kernel.so"
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([cc, *flags, "-o", str(out), str(src), "-lm"], capture_output=True, text=True,
                                  timeout=timeout_s, cwd=tmp, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BuildError(f"build timed out after {timeout_s:g} s", status="timeout",
                             compile_s=time.perf_counter() - t0) from None
        compile_s = time.perf_counter() - t0
        if proc.returncode != 0 or not out.exists():
            msg = (proc.stderr or proc.stdout or "").strip().splitlines()
            tail = " | ".join(msg[-6:])[:2000]
            raise BuildError(f"{Path(cc).name} exited with {proc.returncode}: {tail}", compile_s=compile_s)
        meta = {"compile_s": compile_s, "flags": flags, "compiler": cc, "version": version}
        (Path(tmp) / "meta.json").write_text(json.dumps(meta))
        os.replace(Path(tmp) / "meta.json", meta_path)
        os.replace(out, so)  # atomic: readers see the whole file or none
    return BuildResult(so, key, compile_s, False)


def build_many(target: Mapping[str, Any], sources: Sequence[str], jobs: int | None = None,
               timeout_s: float = DEFAULT_BUILD_TIMEOUT_S) -> list[BuildResult | BuildError]:
    """Build ``sources`` in parallel (``jobs`` compiler processes, default = CPU count); results in order.

    Each element is a BuildResult or the BuildError of that source; identical sources build once.
    """
    jobs = jobs or max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    unique = list(dict.fromkeys(sources))

    def one(src: str) -> BuildResult | BuildError:
        try:
            return build(target, src, timeout_s)
        except BuildError as e:
            return e

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = dict(zip(unique, pool.map(one, unique)))
    return [done[s] for s in sources]
