"""Data shipped with tunedb (hardware catalog, sample tuning data; see README.md here) and their paths.

Installed as package ``tunedb.datasets`` (folder ``datasets/`` of the checkout).

``dataset_path("tophub", "cuda_v0.10.log")`` works both in a source checkout (editable install)
and in a regular ``pip install`` (the files are package data; see ``datasets/SOURCES.md`` for
what they are, where they come from and their licences).
"""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path

PACKAGE = "tunedb.datasets"


def dataset_path(*parts: str) -> Path:
    """The filesystem path of ``datasets/<parts...>``; raises FileNotFoundError if it is not shipped.

    The package is installed as plain files (never zipped), so the path stays valid after return."""
    res = files(PACKAGE)
    for part in parts:  # one step at a time: Traversable.joinpath takes one argument on Python 3.10
        res = res / part
    if not res.is_file() and not res.is_dir():
        raise FileNotFoundError(f"{'/'.join(parts)} is not among tunedb's shipped datasets ({PACKAGE})")
    with as_file(res) as p:
        return Path(p)


def convolution_files() -> dict[str, Path]:
    """Device name -> Kernel Tuner cache file of the shipped convolution kernel (6 GPUs)."""
    d = dataset_path("kernel_tuner", "convolution_milo")
    return {p.name.split(".")[0]: p for p in sorted(d.glob("*.json.gz"))}
