"""Workload strings on the command line: parsing, printing and validation.

Three spellings name a workload wherever ``--workload`` is accepted:

* ``family:key=value,...`` (``matmul:M=512,N=512,K=512``): each value is read as an integer,
  then a float, then ``true``/``false``, else kept as a string;
* an inline JSON object (``{"family": "convolution_milo", "problem_size": [4096, 4096], ...}``),
  for workloads whose values are lists or objects (imported Kernel Tuner, AutoTVM, MetaSchedule
  workloads);
* a path to a JSON file holding such an object.

:func:`workload_spec` prints a workload in the shortest of the first two spellings that reads
back to the same workload (the same ``key_of``): ``tunedb workloads`` prints every entry this way.

:func:`check_workload` is the validation done before any lookup: a family that is neither a
kernel family of this tunedb nor a family stored in the database, a key the family does not
have, or a value of the wrong kind (``N=abc``) is a ``ValueError`` of one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tunedb.index.support import jsontext

#: characters that force the JSON spelling of a string value (they would split the k=v form)
_UNSAFE = set(",=:{}[]\"'") | {" "}


def scalar(text: str) -> Any:
    """A ``key=value`` value: an int, else a float, else a bool (``true``/``false``), else the
    stripped text."""
    t = text.strip()
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    return t


def parse_spec(spec: str, read_file: Callable[[str], Any]) -> dict:
    """``spec`` (any of the three spellings) -> a workload dict with a string ``family``.
    ``read_file(path)`` loads a JSON file.  ValueError (one line) when it is none of them."""
    if not spec or not spec.strip():
        raise ValueError("empty workload")
    text = spec.strip()
    if text.startswith("{"):
        try:
            w = jsontext.loads(text, "workload")
        except json.JSONDecodeError as e:
            raise ValueError(f"workload is not valid JSON: {e.msg} at column {e.colno}") from None
        if not isinstance(w, dict) or not isinstance(w.get("family"), str) or not w["family"]:
            raise ValueError("an inline JSON workload must be an object with a string 'family'")
        return w
    if os.path.exists(spec) or spec.endswith(".json"):
        w = read_file(spec)
        if not isinstance(w, dict) or not isinstance(w.get("family"), str):
            raise ValueError(f"workload file {spec} must hold a JSON object with a string 'family'")
        return w
    family, _, rest = spec.partition(":")
    family = family.strip()
    if not family or not family.replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise ValueError(f"bad workload {spec!r}: expected family:key=value,..., a JSON object or a JSON file")
    w: dict[str, Any] = {"family": family}
    if rest.strip():
        for item in rest.split(","):
            k, eq, v = item.partition("=")
            if not eq or not k.strip():
                raise ValueError(f"bad workload {spec!r}: {item!r} is not key=value")
            if k.strip() in w:
                raise ValueError(f"bad workload {spec!r}: {k.strip()} is given twice")
            w[k.strip()] = scalar(v)
    return w


def _reads_back(v: Any) -> bool:
    """Whether ``str`` of ``v`` in a ``key=value`` item parses back to ``v`` (same type)."""
    if isinstance(v, bool):
        return True
    if isinstance(v, (int, float)):
        text = repr(v)
        return "e" not in text.lower() and "n" not in text.lower() and type(scalar(text)) is type(v) \
            and scalar(text) == v
    if isinstance(v, str):
        return bool(v) and v == v.strip() and not (_UNSAFE & set(v)) and scalar(v) == v
    return False


def workload_spec(w: Mapping[str, Any]) -> str:
    """``w`` as a ``--workload`` string: ``family:key=value,...`` (keys sorted) when every value
    reads back unchanged, else compact JSON with sorted keys.  ``parse_spec`` of the result is
    equal to ``w``."""
    fam = w.get("family")
    rest = {k: v for k, v in w.items() if k != "family"}
    if isinstance(fam, str) and _reads_back(fam) and all(_reads_back(v) and _reads_back(k) for k, v in rest.items()):
        items = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in sorted(rest.items()))
        return f"{fam}:{items}" if items else fam
    return json.dumps(dict(w), sort_keys=True, separators=(",", ":"))


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return type(v).__name__


def _native_problem(fam: Any, key: str, v: Any) -> str | None:
    """Why ``key=v`` is not a value of kernel family ``fam``'s dimension or option ``key``; None
    when it is."""
    if key in fam.dims:
        lo, hi = fam.dims[key]
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if type(v) is not int or not lo <= v <= hi:
            return f"{fam.name}: workload {key}={v!r} must be an integer in [{lo}, {hi}]"
        return None
    allowed, default = fam.options[key]
    if v not in allowed or type(v) is not type(default):
        return f"{fam.name}: workload {key}={v!r} must be one of {list(allowed)}"
    return None


def check_workload(w: Mapping[str, Any], stored: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
    """Raise ValueError (one line) when ``w`` cannot name any workload; every key ``w`` gives is
    checked, missing keys are not (a partial workload is a fine ``nearest`` query).

    * The family must be a kernel family of this tunedb (``tunedb.transfer.kernels.families()``)
      or a family of a workload stored in the database (``stored()``, called only when needed).
    * A workload whose keys are all the kernel family's dimensions and options: each value must
      be one the family allows (an integer in range: ``N=abc`` is refused), or one a stored
      workload of the family has.
    * Any other workload (an imported one: AutoTVM's ``conv2d`` with ``task``, ``shapes``, ...;
      one stored with extra keys): each key must be a key of a stored workload of the family,
      with a value of the same kind (a number where they hold numbers), or one of the kernel
      family's own keys.
    """
    from tunedb.transfer.kernels import families, get_family

    fam_name = w.get("family")
    native = get_family(fam_name) if fam_name in families() else None
    cache: list[list[Mapping[str, Any]]] = []

    def same() -> list[Mapping[str, Any]]:
        if not cache:
            cache.append([s for s in stored() if s.get("family") == fam_name])
        return cache[0]

    if native is None and not same():
        known = sorted(set(families()) | {str(s.get("family")) for s in stored()})
        raise ValueError(f"unknown workload family {fam_name!r}; known: {', '.join(known)}")
    own = set(native.dims) | set(native.options) if native is not None else set()
    foreign = bool(set(w) - own - {"family"})  # an imported workload's keys (AutoTVM: task, shapes, ...)
    kinds: dict[str, set[str]] | None = None
    for k, v in w.items():
        if k == "family":
            continue
        if k in own and not foreign:
            problem = _native_problem(native, k, v)
            if problem is None:
                continue
            if not any(s.get(k) == v for s in same()):
                raise ValueError(problem)
            continue
        if kinds is None:
            kinds = {}
            for s in same():
                for sk, sv in s.items():
                    kinds.setdefault(sk, set()).add(_kind(sv))
        if k in own and k not in kinds:
            continue  # a kernel family's key beside an imported one's: its kind is not known here
        if k not in kinds:
            expected = sorted(own | set(kinds) - {"family"})
            raise ValueError(f"{fam_name}: unknown workload key {k!r}; expected one of {expected}")
        if _kind(v) not in kinds[k]:
            raise ValueError(f"{fam_name}: workload {k}={v!r} must be a {' or '.join(sorted(kinds[k]))}")
