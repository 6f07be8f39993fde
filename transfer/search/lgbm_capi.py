"""Training LightGBM through its C library, without importing the ``lightgbm`` Python package.

The package's import pulls in scikit-learn, SciPy and pandas when they are installed (1-2 s in a
fresh process, more than a whole tuning run's own work); the library it wraps loads in
milliseconds.  :func:`train` calls the library's C API (``LGBM_DatasetCreateFromMat``,
``LGBM_BoosterCreate``, ``LGBM_BoosterUpdateOneIter``, ``LGBM_BoosterSaveModelToString``) the way
``lightgbm.train`` does for a dense float64 matrix, and returns the model text, which
``tunedb.transfer.search.trees.TreeEnsemble`` evaluates.

Only numbers and a fixed parameter string built here reach the library; the library file is the
installed ``lightgbm`` package's own (``lightgbm/lib/lib_lightgbm.*``).
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

_DTYPE_FLOAT32, _DTYPE_FLOAT64 = 0, 1
_LOCK = threading.Lock()
_LIB: list[Any] = []


class LightGBMUnavailable(ImportError):
    """The lightgbm package (and its library) is not installed."""


def library_path() -> Path:
    """The installed lightgbm package's C library (LightGBMUnavailable when there is none)."""
    spec = importlib.util.find_spec("lightgbm")
    if spec is None or not spec.submodule_search_locations:
        raise LightGBMUnavailable("lightgbm is not installed")
    name = {"win32": "lib_lightgbm.dll", "darwin": "lib_lightgbm.dylib"}.get(sys.platform, "lib_lightgbm.so")
    for d in spec.submodule_search_locations:
        for cand in (Path(d) / "lib" / name, Path(d) / name):
            if cand.is_file():
                return cand
    raise LightGBMUnavailable(f"lightgbm is installed but its {name} was not found")


def _lib() -> Any:
    with _LOCK:
        if not _LIB:
            lib = ctypes.cdll.LoadLibrary(str(library_path()))
            lib.LGBM_GetLastError.restype = ctypes.c_char_p
            _LIB.append(lib)
        return _LIB[0]


def _check(lib: Any, rc: int) -> None:
    if rc != 0:
        raise RuntimeError(f"LightGBM: {lib.LGBM_GetLastError().decode(errors='replace')}")


def _param_text(params: Mapping[str, Any]) -> bytes:
    out = []
    for k, v in params.items():
        if not str(k).replace("_", "").isalnum():
            raise ValueError(f"not a LightGBM parameter name: {k!r}")
        text = str(v).lower() if isinstance(v, bool) else str(v)
        if not text or any(c.isspace() for c in text):
            raise ValueError(f"LightGBM parameter {k}: {v!r} is not a plain value")
        out.append(f"{k}={text}")
    return " ".join(out).encode()


def train(X: np.ndarray, y: np.ndarray, params: Mapping[str, Any], rounds: int, *,
          weight: np.ndarray | None = None) -> str:
    """The text (``Booster.model_to_string()`` format) of a LightGBM model trained for ``rounds``
    boosting rounds on the rows of ``X`` (float64, n x features) with labels ``y`` and optional
    per-row ``weight``; ``params`` as ``lightgbm.train`` takes them (plain scalars)."""
    lib = _lib()
    X = np.ascontiguousarray(X, np.float64)
    n, d = X.shape
    label = np.ascontiguousarray(y, np.float32)
    if label.shape != (n,):
        raise ValueError(f"{len(label)} labels for {n} rows")
    ptext = _param_text(params)
    ds, booster = ctypes.c_void_p(), ctypes.c_void_p()
    try:
        _check(lib, lib.LGBM_DatasetCreateFromMat(X.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(_DTYPE_FLOAT64),
                                                  ctypes.c_int32(n), ctypes.c_int32(d), ctypes.c_int(1),
                                                  ctypes.c_char_p(ptext), None, ctypes.byref(ds)))
        _check(lib, lib.LGBM_DatasetSetField(ds, ctypes.c_char_p(b"label"), label.ctypes.data_as(ctypes.c_void_p),
                                             ctypes.c_int(n), ctypes.c_int(_DTYPE_FLOAT32)))
        if weight is not None:
            w = np.ascontiguousarray(weight, np.float32)
            _check(lib, lib.LGBM_DatasetSetField(ds, ctypes.c_char_p(b"weight"), w.ctypes.data_as(ctypes.c_void_p),
                                                 ctypes.c_int(n), ctypes.c_int(_DTYPE_FLOAT32)))
        _check(lib, lib.LGBM_BoosterCreate(ds, ctypes.c_char_p(ptext), ctypes.byref(booster)))
        finished = ctypes.c_int(0)
        for _ in range(int(rounds)):
            _check(lib, lib.LGBM_BoosterUpdateOneIter(booster, ctypes.byref(finished)))
            if finished.value:
                break
        size = ctypes.c_int64(0)
        buf_len = 1 << 20
        while True:
            buf = ctypes.create_string_buffer(buf_len)
            _check(lib, lib.LGBM_BoosterSaveModelToString(booster, ctypes.c_int(0), ctypes.c_int(-1), ctypes.c_int(0),
                                                          ctypes.c_int64(buf_len), ctypes.byref(size), buf))
            if size.value <= buf_len:
                return buf.value.decode()
            buf_len = int(size.value)
    finally:
        if booster:
            lib.LGBM_BoosterFree(booster)
        if ds:
            lib.LGBM_DatasetFree(ds)
