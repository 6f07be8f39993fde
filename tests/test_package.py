"""The package itself: one top-level name, a light and complete public API, one-way imports."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tunedb

from helpers import ROOT

PACKAGE_DIRS = ("index", "transfer", "datasets")


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package (the checkout root is ``tunedb``)."""
    out = {"tunedb": ROOT / "__init__.py", "tunedb.__main__": ROOT / "__main__.py"}
    for d in PACKAGE_DIRS:
        for f in (ROOT / d).rglob("*.py"):
            rel = f.relative_to(ROOT).with_suffix("")
            parts = ["tunedb", *rel.parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """tunedb modules ``path`` imports anywhere (module level or inside functions), except under
    ``if TYPE_CHECKING:`` (annotations only, never executed)."""
    found = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found.update(n for n in names if n in modules)
        assert not (isinstance(node, ast.ImportFrom) and node.level), f"{path}: relative import"
    return found


def test_index_never_imports_transfer():
    mods = _modules()
    bad = {m: sorted(i for i in _imports(f, mods) if i.startswith("tunedb.transfer"))
           for m, f in mods.items() if m.startswith("tunedb.index")}
    assert not {m: v for m, v in bad.items() if v}


def test_no_import_cycles():
    mods = _modules()
    graph = {m: {i for i in _imports(f, mods) if i != m} for m, f in mods.items()}
    # a package's __init__ may re-export its own submodules lazily (tunedb/__init__, tunedb.index)
    for m in ("tunedb", "tunedb.index"):
        graph[m] = {i for i in graph[m] if not i.startswith(m + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def test_import_is_light_and_public_api_resolves():
    code = ("import sys, time; t = time.perf_counter(); import tunedb; dt = time.perf_counter() - t; "
            "heavy = [m for m in ('pyarrow', 'numpy', 'faiss', 'lightgbm', 'tvm', 'ray', 'matplotlib') if m in sys.modules]; "
            "import json; print(json.dumps({'heavy': heavy, 'dt': dt}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    cwd=ROOT / "tests").stdout)
    assert out["heavy"] == []
    for name in tunedb.__all__:
        assert getattr(tunedb, name) is not None, name
    assert tunedb.__version__ == tunedb.TUNEDB_VERSION
    with pytest.raises(AttributeError):
        tunedb.no_such_name  # noqa: B018


def test_user_modules_named_index_or_transfer_do_not_shadow_ours(tmp_path):
    (tmp_path / "index.py").write_text("raise SystemExit('the user index.py was imported')\n")
    (tmp_path / "transfer").mkdir()
    (tmp_path / "transfer" / "__init__.py").write_text("raise SystemExit('the user transfer/ was imported')\n")
    code = ("import tunedb; db = tunedb.open('db'); "
            "from tunedb.transfer.search.tuner import Tuner; from tunedb.index.parquet.store import TuningDB; "
            "print(type(db).__name__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "TuningDB", r.stderr
    r = subprocess.run([sys.executable, "-m", "tunedb", "--version"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "tunedb" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-c", "import index"], capture_output=True, text=True, cwd=tmp_path.parent)
    assert r.returncode != 0  # outside a folder that has one, there is no module named index


@pytest.mark.slow
def test_wheel_installs_one_top_level_package(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                        str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    wheel = next(tmp_path.glob("tunedb-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"tunedb", wheel.name.split("-py")[0] + ".dist-info"}
    assert "tunedb/datasets/hardware_catalog.csv" in names
    assert "tunedb/index/base.py" in names and "tunedb/transfer/cli/main.py" in names
    assert not any(n.startswith(("tunedb/tests/", "tunedb/benchmarks/", "tunedb/notebooks/")) for n in names)
