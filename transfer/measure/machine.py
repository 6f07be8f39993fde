"""Is this machine fit to measure?  Measurement conditions, other processes, a reference kernel.

Imports nothing heavy (``os``, ``time``, ``pathlib``); every reading degrades to None (or an
empty list) where the operating system does not expose it, and nothing here raises for a
missing or unreadable file.

* :func:`measurement_context` -- a cheap (well under a millisecond on a few-core Linux machine)
  snapshot of load and CPU frequency state; the local backend stores it in every record's
  ``meta["context"]``.
* :func:`busy_processes` -- other processes using CPU right now (two samples of ``/proc``).
* :func:`reference_kernel_cv` -- how much a short, fixed, single-threaded pure-Python kernel's
  timings spread right now (robust coefficient of variation).
* :func:`machine_check` -- all of the above plus a verdict (``"fit"`` / ``"noisy"``), the
  problems behind a noisy verdict and advice; ``tunedb doctor`` prints it, tuning runs call the
  quick form at their start.
* :func:`context_is_loaded` -- whether a stored record's context says the machine was loaded
  while it was measured (the cost model down-weights such records).

Thresholds (module constants, see each for its unit) and what makes the verdict ``noisy``:

* reference kernel robust CV > :data:`NOISY_CV` (a fraction: 0.05 = 5 %);
* 1-minute load average >= usable CPUs - :data:`LOAD_HEADROOM_CPUS` (leave one core free for the
  measurement; usable CPUs: the affinity mask, or a lower cgroup CPU quota);
* other processes together use more than :data:`BUSY_OTHER_CPUS` CPUs (cores' worth of CPU time)
  over the check;
* the mean CPU frequency moved by more than :data:`FREQ_UNSTABLE_FRACTION` during the check.

The scaling governor and turbo boost are advice, not a noisy verdict on their own: a governor
other than ``performance`` ramps the clock with demand, and turbo moves it with temperature,
but what matters for a measurement is whether timings and the clock are steady *now*, which the
reference kernel's CV and the frequency check measure directly.  When the governor is not
``performance`` and the frequency cannot be read (so its steadiness cannot be checked), the
governor counts as a problem (noisy).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: reference kernel robust CV (1.4826 * MAD / median of its per-run times, a fraction) above which
#: the machine is "noisy"; equal to the timing protocol's default ``noisy_cv``
NOISY_CV = 0.05
#: CPUs (cores' worth) to keep free for the measurement: the 1-minute load average must stay
#: below ``usable CPUs - LOAD_HEADROOM_CPUS``
LOAD_HEADROOM_CPUS = 0.5
#: other processes together using more than this many CPUs (1.0 = one core fully busy) make
#: the machine "noisy"
BUSY_OTHER_CPUS = 0.5
#: a process is listed by :func:`busy_processes` from this share of one CPU on (percent)
BUSY_MIN_PERCENT = 5.0
#: the mean CPU frequency moving by more than this fraction (0.10 = 10 %) between the start and
#: the end of the check makes the machine "noisy"
FREQ_UNSTABLE_FRACTION = 0.10
#: the reference kernel's duration in a quick check / a full check (seconds)
QUICK_REFERENCE_S = 0.25
FULL_REFERENCE_S = 1.0
#: the interval :func:`busy_processes` samples over by default (seconds)
BUSY_INTERVAL_S = 0.3
#: target duration of one block of reference-kernel runs (seconds; blocks last 5-10 ms)
REFERENCE_BLOCK_S = 0.007
#: at least this many blocks, however short ``seconds`` is
REFERENCE_MIN_BLOCKS = 5
#: scaling_cur_freq is read for at most this many CPUs (the first of the affinity mask)
FREQ_MAX_CPUS = 64
#: name of the reference kernel (stored with its results)
REFERENCE_KERNEL = "pyloop-20k"
#: MAD -> standard deviation of a normal distribution
MAD_TO_SD = 1.4826

_CPU = Path("/sys/devices/system/cpu")
_PROC = Path("/proc")


# --------------------------------------------------------------------------- small readers
def _read(path: Path | str, limit: int = -1) -> str | None:
    """The text of a small file (its first ``limit`` characters when >= 0), stripped; None when
    it cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(limit).strip()
    except (OSError, ValueError):
        return None


def load_average() -> float | None:
    """The 1-minute load average, rounded to 3 decimals (None where the OS has none)."""
    try:
        return round(float(os.getloadavg()[0]), 3)
    except (OSError, AttributeError, ValueError):
        return None


def _procs_running() -> int | None:
    """Runnable tasks (threads) other than the reader: ``procs_running`` of /proc/stat minus 1
    (the reading thread is itself running while it reads); None when unreadable."""
    text = _read(_PROC / "stat")
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("procs_running "):
            try:
                return max(0, int(line.split()[1]) - 1)
            except (IndexError, ValueError):
                return None
    return None


def _affinity() -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _cpu_quota() -> float | None:
    """CPUs allowed by this process's cgroup CPU quota (v2 ``cpu.max``, v1 ``cfs_quota_us`` /
    ``cfs_period_us``); None when there is no quota or it cannot be read."""
    rel = ""
    v1 = ""
    text = _read(_PROC / "self" / "cgroup") or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0":
            rel = parts[2].lstrip("/")
        elif len(parts) == 3 and "cpu" in parts[1].split(","):
            v1 = parts[2].lstrip("/")
    root = Path("/sys/fs/cgroup")
    for p in (root / rel / "cpu.max", root / "cpu.max"):
        t = _read(p)
        if t:
            q, _, period = t.partition(" ")
            try:
                return None if q == "max" else round(int(q) / int(period or 100000), 3)
            except ValueError:
                return None
    for d in (root / "cpu" / v1, root / "cpu,cpuacct" / v1, root / "cpu"):
        q, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if q is not None and period is not None:
            try:
                qi, pi = int(q), int(period)
            except ValueError:
                return None
            return None if qi <= 0 or pi <= 0 else round(qi / pi, 3)
    return None


def _freq_mhz(cpus: list[int] | None = None) -> float | None:
    """Mean current frequency (MHz) of ``cpus`` (default: the affinity mask, at most
    :data:`FREQ_MAX_CPUS`) from ``scaling_cur_freq``, else the mean ``cpu MHz`` of /proc/cpuinfo;
    None when neither is readable."""
    ids = (cpus if cpus is not None else (_affinity() or [0]))[:FREQ_MAX_CPUS]
    vals = []
    for i in ids:
        t = _read(_CPU / f"cpu{i}" / "cpufreq" / "scaling_cur_freq")
        if t:
            try:
                vals.append(int(t) / 1000.0)  # kHz
            except ValueError:
                pass
    if not vals:
        # the first 64 KiB only (about 40 CPUs): /proc/cpuinfo is generated as it is read, and the
        # whole of it takes milliseconds on a large machine
        text = _read(_PROC / "cpuinfo", 65536) or ""
        for line in text.splitlines():
            if line.startswith("cpu MHz"):
                try:
                    vals.append(float(line.split(":", 1)[1]))
                except (IndexError, ValueError):
                    pass
    return round(sum(vals) / len(vals), 1) if vals else None


def _turbo() -> bool | None:
    """True when turbo boost is on, False when off, None when not readable."""
    t = _read(_CPU / "intel_pstate" / "no_turbo")
    if t in ("0", "1"):
        return t == "0"
    t = _read(_CPU / "cpufreq" / "boost")
    if t in ("0", "1"):
        return t == "1"
    return None


def usable_cpus(context: dict[str, Any]) -> float | None:
    """CPUs a measurement may use per ``context`` (a :func:`measurement_context`): the affinity
    mask's count (else ``cpus``), lowered to a cgroup CPU quota when there is one; None when unknown."""
    n = context.get("cpus_usable") or context.get("cpus")
    q = context.get("cpu_quota")
    if isinstance(q, (int, float)) and q > 0:
        n = min(n, q) if isinstance(n, (int, float)) else q
    return float(n) if isinstance(n, (int, float)) and n > 0 else None


# --------------------------------------------------------------------------- context
def measurement_context() -> dict[str, Any]:
    """The conditions a measurement starts under; cheap (typically well under 1 ms) and never raises.

    Keys (each None where unreadable):

    * ``loadavg`` (float): 1-minute load average (``os.getloadavg``);
    * ``running`` (int): runnable tasks (threads) other than the reader (``procs_running`` of
      /proc/stat minus the reading thread);
    * ``cpus`` (int): ``os.cpu_count()``; ``cpus_usable`` (int): CPUs in this process's
      affinity mask (Linux; else ``cpus``); ``cpu_quota`` (float): CPUs allowed by a cgroup CPU
      quota (None: no quota);
    * ``freq_mhz`` (float): mean current frequency of the usable CPUs in MHz (``scaling_cur_freq``,
      else ``cpu MHz`` of /proc/cpuinfo);
    * ``governor`` (str): cpu0's ``scaling_governor``;
    * ``turbo`` (bool): turbo boost on (``intel_pstate/no_turbo`` = 0 or ``cpufreq/boost`` = 1).
    """
    aff = _affinity()
    cpus = os.cpu_count()
    return {
        "loadavg": load_average(),
        "running": _procs_running(),
        "cpus": cpus,
        "cpus_usable": len(aff) if aff else cpus,
        "cpu_quota": _cpu_quota(),
        "freq_mhz": _freq_mhz(aff),
        "governor": _read(_CPU / "cpu0" / "cpufreq" / "scaling_governor") or None,
        "turbo": _turbo(),
    }


def context_is_loaded(context: Any, threads: int | None = None) -> bool:
    """Whether a record's ``meta["context"]`` says the machine was loaded while it was measured.

    Loaded: the runnable tasks other than tunedb at the start (``running``) plus the
    measurement's own ``threads`` (default 1) exceed the usable CPUs, or the 1-minute load average
    at the start or end (``loadavg`` / ``loadavg_after``) is at least ``usable CPUs +
    LOAD_HEADROOM_CPUS`` -- that is, with the measurement's own worker (about one runnable task of
    the load while a tuning run measures), others kept the machine more than
    ``usable - LOAD_HEADROOM_CPUS`` CPUs busy.  A context without usable readings is not loaded.
    """
    if not isinstance(context, dict):
        return False
    n = usable_cpus(context)
    if n is None:
        return False
    own = threads if isinstance(threads, int) and threads > 0 else 1
    running = context.get("running")
    if isinstance(running, int) and not isinstance(running, bool) and running + own > n:
        return True
    for key in ("loadavg", "loadavg_after"):
        v = context.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= n + LOAD_HEADROOM_CPUS:
            return True
    return False


# --------------------------------------------------------------------------- other processes
def _cpu_ticks() -> dict[int, tuple[str, int, int]]:
    """pid -> (comm, ppid, utime + stime in clock ticks) of every readable process ({} without /proc)."""
    out: dict[int, tuple[str, int, int]] = {}
    try:
        names = os.listdir(_PROC)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        text = _read(_PROC / name / "stat")
        if not text:
            continue
        lp, rp = text.find("("), text.rfind(")")
        rest = text[rp + 2:].split()
        try:
            out[int(name)] = (text[lp + 1:rp], int(rest[1]), int(rest[11]) + int(rest[12]))
        except (IndexError, ValueError):
            continue
    return out


def _own_family(*samples: dict[int, tuple[str, int, int]]) -> set[int]:
    """This process and its descendants in ``samples``."""
    me = os.getpid()
    children: dict[int, set[int]] = {}
    for s in samples:
        for pid, (_name, ppid, _t) in s.items():
            children.setdefault(ppid, set()).add(pid)
    fam, todo = {me}, [me]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in fam:
                fam.add(c)
                todo.append(c)
    return fam


def _cpu_use(before: dict, after: dict, elapsed_s: float, exclude_children: bool) -> list[dict[str, Any]]:
    """Processes other than this one (and, with ``exclude_children``, its descendants) that used
    CPU between the two samples: {pid, name, cpu_percent (of one CPU)}, most first."""
    try:
        hz = os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, ValueError):
        hz = 100
    skip = _own_family(before, after) if exclude_children else {os.getpid()}
    out = []
    for pid, (name, _ppid, t1) in after.items():
        b = before.get(pid)
        if pid in skip or b is None or elapsed_s <= 0:
            continue
        pct = (t1 - b[2]) / hz / elapsed_s * 100.0
        if pct > 0:
            out.append({"pid": pid, "name": name, "cpu_percent": round(pct, 1)})
    out.sort(key=lambda d: (-d["cpu_percent"], d["pid"]))
    return out


def busy_processes(interval_s: float = BUSY_INTERVAL_S, top: int = 5, *,
                   exclude_children: bool = True) -> list[dict[str, Any]]:
    """Other processes using CPU right now: ``{"pid": int, "name": str (comm), "cpu_percent":
    float}`` (percent of one CPU over ``interval_s`` seconds; a multi-threaded process may exceed
    100), busiest first, at most ``top`` of them, each using >= :data:`BUSY_MIN_PERCENT`.

    Samples ``utime + stime`` of every /proc/<pid>/stat twice, ``interval_s`` apart.  This
    process is never listed, nor (``exclude_children``, the default) its descendants, such as
    the measurement's own workers.  [] where there is no /proc (not Linux).
    """
    if not interval_s > 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
    before, t0 = _cpu_ticks(), time.monotonic()
    time.sleep(interval_s)
    after, t1 = _cpu_ticks(), time.monotonic()
    use = _cpu_use(before, after, t1 - t0, exclude_children)
    return [d for d in use if d["cpu_percent"] >= BUSY_MIN_PERCENT][:max(0, top)]


# --------------------------------------------------------------------------- reference kernel
def _reference_kernel(n: int = 20_000) -> int:
    """The reference kernel: a fixed integer recurrence, ``n`` steps of pure Python (about 1 ms
    on a 2.6 GHz core with CPython 3.11): single-threaded, no allocation, no memory traffic."""
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) & 0xFFFF
    return acc


def reference_kernel_cv(seconds: float = 0.5) -> dict[str, Any]:
    """Time the reference kernel (:data:`REFERENCE_KERNEL`, pure Python, one thread) repeatedly
    for about ``seconds`` and say how much its timings spread.

    The kernel runs in blocks of ``number`` runs, ``number`` calibrated so a block lasts about
    :data:`REFERENCE_BLOCK_S` (5-10 ms); blocks are timed until ``seconds`` have passed (at least
    :data:`REFERENCE_MIN_BLOCKS` of them).  Returns ``{"kernel": name, "blocks": count, "number":
    runs per block, "median_s": median seconds per run, "cv": robust coefficient of variation of
    the per-run times = 1.4826 * MAD / median (a fraction; MAD = median absolute deviation from
    the median; the 1.4826 makes it the standard deviation / mean for normal noise), "min_s",
    "max_s": the fastest and slowest block's seconds per run, "seconds": wall time spent}``.
    ValueError when ``seconds`` is not > 0.
    """
    if not (isinstance(seconds, (int, float)) and seconds > 0):
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    clock = time.perf_counter
    start = clock()
    single = float("inf")
    for _ in range(3):  # calibration: the fastest of three single runs
        t0 = clock()
        _reference_kernel()
        single = min(single, clock() - t0)
    number = max(1, round(REFERENCE_BLOCK_S / max(single, 1e-6)))
    per_run: list[float] = []
    while len(per_run) < REFERENCE_MIN_BLOCKS or clock() - start < seconds:
        t0 = clock()
        for _ in range(number):
            _reference_kernel()
        per_run.append((clock() - t0) / number)
    s = sorted(per_run)
    med = _median(s)
    mad = _median(sorted(abs(x - med) for x in s))
    return {"kernel": REFERENCE_KERNEL, "blocks": len(s), "number": number, "median_s": med,
            "cv": MAD_TO_SD * mad / med if med > 0 else 0.0, "min_s": s[0], "max_s": s[-1],
            "seconds": round(clock() - start, 4)}


def _median(sorted_vals: list[float]) -> float:
    n = len(sorted_vals)
    if n == 0:
        return 0.0
    m = n // 2
    return sorted_vals[m] if n % 2 else (sorted_vals[m - 1] + sorted_vals[m]) / 2.0


# --------------------------------------------------------------------------- the check
def _fmt_s(s: float) -> str:
    return f"{s * 1e3:#.3g} ms"


def _fmt_n(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def machine_check(quick: bool = True, *, seconds: float | None = None,
                  exclude_children: bool = True) -> dict[str, Any]:
    """Is this machine fit to measure now?  (``tunedb doctor``; the quick form at a tuning run's start.)

    Runs the reference kernel for ``seconds`` (default :data:`QUICK_REFERENCE_S` when ``quick``,
    else :data:`FULL_REFERENCE_S`) and samples the other processes' CPU use over that same time
    (so the check lasts about ``seconds``; ``exclude_children`` as in :func:`busy_processes`).
    Returns plain JSON data::

        {"context": measurement_context() at the start,
         "reference": reference_kernel_cv(...),
         "busy": busy processes (as busy_processes, top 5), "busy_cpus": CPUs all others used,
         "freq_mhz_after": mean frequency at the end (MHz or None),
         "checks": [{"check": name, "status": "ok" | "warn" | "unknown", "detail": one line}],
         "verdict": "fit" | "noisy", "problems": [one line each], "advice": [one line each],
         "thresholds": {the module constants used}}

    ``verdict`` is ``"noisy"`` exactly when ``problems`` is not empty (see the module docstring
    for what counts); ``advice`` may be non-empty for a fit machine (governor, turbo).
    """
    dur = seconds if seconds is not None else (QUICK_REFERENCE_S if quick else FULL_REFERENCE_S)
    if not (isinstance(dur, (int, float)) and dur > 0):
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    ticks0, t0 = _cpu_ticks(), time.monotonic()
    ctx = measurement_context()
    ref = reference_kernel_cv(dur)
    ticks1, t1 = _cpu_ticks(), time.monotonic()
    freq_after = _freq_mhz(_affinity())
    others = _cpu_use(ticks0, ticks1, t1 - t0, exclude_children) if ticks0 and ticks1 else None
    busy = [d for d in others or [] if d["cpu_percent"] >= BUSY_MIN_PERCENT][:5]
    busy_cpus = round(sum(d["cpu_percent"] for d in others) / 100.0, 3) if others is not None else None

    report = _Report()
    _check_reference(report, ref)
    _check_load(report, ctx)
    _check_processes(report, others, busy, busy_cpus)
    steady = _check_frequency(report, ctx.get("freq_mhz"), freq_after)
    _check_governor(report, ctx.get("governor"), steady)
    _check_turbo(report, ctx.get("turbo"))
    checks, problems, advice = report.checks, report.problems, report.advice

    return {"context": ctx, "reference": ref, "busy": busy, "busy_cpus": busy_cpus, "freq_mhz_after": freq_after,
            "checks": checks, "verdict": "noisy" if problems else "fit", "problems": problems, "advice": advice,
            "thresholds": {"noisy_cv": NOISY_CV, "load_headroom_cpus": LOAD_HEADROOM_CPUS,
                           "busy_other_cpus": BUSY_OTHER_CPUS, "busy_min_percent": BUSY_MIN_PERCENT,
                           "freq_unstable_fraction": FREQ_UNSTABLE_FRACTION}}


@dataclass
class _Report:
    """What :func:`machine_check` says: one row per check, the problems that make the machine
    noisy, and advice (one line each)."""

    checks: list[dict[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)

    def check(self, name: str, status: str, detail: str) -> None:
        self.checks.append({"check": name, "status": status, "detail": detail})


def _check_reference(report: _Report, ref: dict[str, Any]) -> None:
    """The reference kernel's spread against :data:`NOISY_CV`."""
    cv = ref["cv"]
    detail = (f"reference kernel: median {_fmt_s(ref['median_s'])} over {ref['blocks']} blocks, "
              f"CV {cv * 100:.1f} % (limit {NOISY_CV * 100:g} %)")
    report.check("reference", "ok" if cv <= NOISY_CV else "warn", detail)
    if cv > NOISY_CV:
        report.problems.append(f"reference kernel timings spread {cv * 100:.1f} % (limit {NOISY_CV * 100:g} %)")
        report.advice.append("timings spread now: stop other work on this machine, or pin the measurement to a "
                             "quiet core (`taskset -c N tunedb ...`) and rerun `tunedb doctor`")


def _check_load(report: _Report, ctx: dict[str, Any]) -> None:
    """The load average against the usable CPUs less :data:`LOAD_HEADROOM_CPUS`."""
    n = usable_cpus(ctx)
    la = ctx.get("loadavg")
    if la is None or n is None:
        report.check("load", "unknown", "load average: not readable")
        return
    limit = n - LOAD_HEADROOM_CPUS
    cpus_txt = f"{_fmt_n(n)} usable CPU{'s' if n != 1 else ''}"
    if la >= limit:
        report.check("load", "warn", f"load average {la:.2f} on {cpus_txt} (limit {_fmt_n(limit)})")
        report.problems.append(f"load average {la:.2f} on {cpus_txt}")
        report.advice.append(f"load average {la:.2f} on {cpus_txt}: wait until it falls below {_fmt_n(limit)} "
                             "(`uptime`), or stop what keeps the machine busy (`top`)")
    else:
        report.check("load", "ok", f"load average {la:.2f} on {cpus_txt} (limit {_fmt_n(limit)})")


def _check_processes(report: _Report, others: list[dict] | None, busy: list[dict],
                     busy_cpus: float | None) -> None:
    """The CPUs the other processes used during the check against :data:`BUSY_OTHER_CPUS`."""
    if busy_cpus is None:
        report.check("processes", "unknown", "other processes: not readable (no /proc)")
        return
    named = ", ".join(f"{d['name']} (pid {d['pid']}) {d['cpu_percent']:.0f} %" for d in busy)
    count = len([d for d in others or [] if d["cpu_percent"] >= BUSY_MIN_PERCENT])
    who = ("1 other process uses" if count == 1 else
           f"{count} other processes use" if count else "other processes use")
    text = f"{who} {busy_cpus:.2f} CPUs" + (f": {named}" if named else "")
    if busy_cpus > BUSY_OTHER_CPUS:
        report.check("processes", "warn", f"{text} (limit {BUSY_OTHER_CPUS:g})")
        report.problems.append(text)
        pids = " ".join(str(d["pid"]) for d in busy)
        them = "it" if count == 1 else "them"
        report.advice.append(f"{text}: stop {them} (`kill {pids}`) or measure with fewer threads"
                             if pids else f"{text}: stop {them} or measure with fewer threads")
    else:
        report.check("processes", "ok", f"other processes use {busy_cpus:.2f} CPUs (limit {BUSY_OTHER_CPUS:g})")


def _check_frequency(report: _Report, f0: float | None, freq_after: float | None) -> bool | None:
    """Did the clock move more than :data:`FREQ_UNSTABLE_FRACTION` during the check?  Returns
    whether it stayed steady (None when not readable)."""
    if f0 is None or freq_after is None:
        report.check("frequency", "unknown", "CPU frequency: not readable")
        return None
    moved = abs(freq_after - f0) / f0 if f0 > 0 else 0.0
    if moved <= FREQ_UNSTABLE_FRACTION:
        report.check("frequency", "ok", f"CPU frequency {f0:.0f} MHz, {freq_after:.0f} MHz after the kernel")
        return True
    msg = (f"CPU frequency moved {f0:.0f} -> {freq_after:.0f} MHz during the check "
           f"(limit {FREQ_UNSTABLE_FRACTION * 100:g} %)")
    report.check("frequency", "warn", msg)
    report.problems.append(msg)
    return False


def _check_governor(report: _Report, gov: str | None, steady: bool | None) -> None:
    """A governor other than ``performance`` is advice; a problem too when the clock cannot be
    checked (a moving clock is a problem of its own)."""
    if gov is None:
        report.check("governor", "unknown", "scaling governor: not readable")
    elif gov == "performance":
        report.check("governor", "ok", "scaling governor: performance")
    else:
        report.check("governor", "warn", f"scaling governor: {gov} (not performance)")
        report.advice.append(f"governor is {gov}: `sudo cpupower frequency-set -g performance` for a fixed clock")
        if steady is None:
            report.problems.append(f"governor is {gov} and the CPU frequency cannot be checked")


def _check_turbo(report: _Report, turbo: bool | None) -> None:
    """Turbo boost on is advice (results move with temperature), not a problem."""
    if turbo is None:
        report.check("turbo", "unknown", "turbo boost: not readable")
    elif turbo:
        report.check("turbo", "warn", "turbo boost: on")
        how = ("`echo 1 | sudo tee /sys/devices/system/cpu/intel_pstate/no_turbo`"
               if _read(_CPU / "intel_pstate" / "no_turbo") is not None
               else "`echo 0 | sudo tee /sys/devices/system/cpu/cpufreq/boost`")
        report.advice.append(f"turbo boost is on: results move with temperature; disable it for stable timings ({how})")
    else:
        report.check("turbo", "ok", "turbo boost: off")
