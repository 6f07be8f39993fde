"""Durable file operations: write-then-rename with fsync, an advisory lock, temp-file hygiene."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

HOST = socket.gethostname().replace("-", "_")[:32] or "host"
#: seconds: a temp file this old whose writer cannot be checked (another host) counts as abandoned
TEMP_MAX_AGE_S = 3600.0


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(suffix: str = ".parquet") -> str:
    """A name readers ignore (leading ``_``) that says which host and process wrote it."""
    return f"_tmp-{HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}{suffix}"


def temp_owner_alive(name: str, max_age_s: float, path: Path) -> bool:
    """Whether a temp file may still belong to a live writer (so must not be removed)."""
    parts = name.split("-")
    if len(parts) >= 4 and parts[1] == HOST:
        try:
            os.kill(int(parts[2]), 0)
            return True
        except (ValueError, ProcessLookupError):
            return False
        except PermissionError:
            return True
    try:
        return time.time() - path.stat().st_mtime < max_age_s
    except FileNotFoundError:
        return False


def remove_dead_temp(path: Path, max_age_s: float = TEMP_MAX_AGE_S) -> None:
    """Delete temp file ``path`` unless its writer may still be alive (``temp_owner_alive``)."""
    if not temp_owner_alive(path.name, max_age_s, path):
        try:
            path.unlink()
        except OSError:
            pass


def tree_bytes(*roots: Path) -> int:
    """Total size in bytes of the files under ``roots`` (files vanishing meanwhile are skipped)."""
    size = 0
    for root in roots:
        for d, _, names in os.walk(root):
            for n in names:
                try:
                    size += os.path.getsize(os.path.join(d, n))
                except OSError:
                    pass
    return size


def replace_derived(final: Path, write: Callable[[Path], None], others: str) -> None:
    """Derived data (rebuildable, so no fsync): ``write(tmp)`` a temp file next to ``final``,
    rename it over ``final``, then remove the other files of its directory matching the glob
    ``others``.  Best effort: OSError (a read-only or full disk) leaves neither file behind."""
    tmp = final.parent / f"_tmp-{uuid.uuid4().hex}{final.suffix}"
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, final)
        for old in final.parent.glob(others):
            if old != final:
                old.unlink(missing_ok=True)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def unlink_quietly(path: Path) -> None:
    """Remove ``path`` if it is there; errors are ignored (best-effort cleanup)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def stage_bytes(directory: Path, data: bytes | memoryview, suffix: str = ".parquet") -> Path:
    """Write ``data`` to a new temp file (a name readers ignore) in ``directory``, fsync'ed
    through one descriptor; returns its path.  On any failure (ENOSPC, ...) the temp file is
    removed and the error raised: nothing is left behind."""
    tmp = directory / temp_name(suffix)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        unlink_quietly(tmp)
        raise
    return tmp


def atomic_write_bytes(final: Path, data: bytes) -> None:
    """Write ``data`` as ``final`` durably: a new temp file (a name readers ignore) in the same
    directory, written and fsync'ed through one descriptor, renamed to ``final``, directory
    fsync'ed.  On any failure the temp file is removed and ``final`` is untouched (or, when
    only the directory fsync failed, in place but possibly not yet durable)."""
    tmp = stage_bytes(final.parent, data, final.suffix)
    try:
        os.rename(tmp, final)
    except BaseException:
        unlink_quietly(tmp)
        raise
    fsync_dir(final.parent)


@contextlib.contextmanager
def file_lock(path: Path, *, blocking: bool = True, timeout_s: float = 120.0, shared: bool = False
              ) -> Iterator[bool]:
    """Advisory lock on ``path`` (flock), exclusive or ``shared``.  Yields True when held; with
    ``blocking=False`` yields False at once if another process holds it.  Where the lock file
    cannot be opened (a read-only DB) a shared lock is skipped and yields False."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        if shared:
            yield False
            return
        raise
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    held = False
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                held = True
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if not blocking:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"could not lock {path} within {timeout_s} s") from None
                time.sleep(0.01)
        yield held
    finally:
        if held:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class OutsideRootError(ValueError):
    """A path under a DB or cache directory that is a symbolic link, or that a log or listing
    names outside that directory: refused, because following it would read, write or delete
    files that are not the directory's own.  ``str()`` is one line naming the path."""


def _link_error(root: Path, path: Path, kind: str) -> OutsideRootError:
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        rel = str(path)
    return OutsideRootError(f"{root}: refused: {rel} is a {kind}; tunedb follows no link inside a database "
                            f"or cache folder (remove the link, or copy what it points to into place)")


def check_no_links(root: Path, path: Path) -> None:
    """Refuse ``path`` unless it lies lexically under ``root`` and no component below ``root``
    (``path`` itself included) is a symbolic link; components that do not exist yet are fine.
    Raises :class:`OutsideRootError` (one line).  Checks with ``lstat``: nothing is followed."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise OutsideRootError(f"{root}: refused: {path} is outside it") from None
    cur = root
    for part in rel.parts:
        if part in ("..", "."):
            raise OutsideRootError(f"{root}: refused: {rel.as_posix()} leaves it")
        cur = cur / part
        try:
            if os.path.islink(cur):
                raise _link_error(root, cur, "symbolic link")
        except OSError:
            return


def refuse_links_under(root: Path, skip: frozenset[str] = frozenset()) -> None:
    """Walk the tree under ``root`` without following anything and refuse the first symbolic
    link found (:class:`OutsideRootError`, one line naming it).  Top-level names in ``skip``
    are not entered.  Entries vanishing meanwhile are skipped."""
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            if d == root and e.name in skip:
                continue
            if e.is_symlink():
                raise _link_error(root, Path(e.path), "symbolic link")
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def relative_path_problem(rel: object) -> str | None:
    """Why ``rel`` is not a plain relative path inside a directory (None when it is): it must be
    a non-empty '/'-separated string with no absolute start, no URL scheme, no ``..`` or ``.``
    or empty component, no backslash and no NUL."""
    if not isinstance(rel, str) or not rel:
        return "not a non-empty string"
    if "\x00" in rel or "\\" in rel:
        return "holds a NUL or a backslash"
    if rel.startswith("/") or _SCHEME.match(rel):
        return "is absolute or a URL"
    if any(p in ("", ".", "..") for p in rel.split("/")):
        return "has an empty, '.' or '..' component"
    return None
