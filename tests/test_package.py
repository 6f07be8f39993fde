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


def _imports(path: Path, modules: dict[str, Path], *, type_only: bool = False) -> set[str]:
    """tunedb modules ``path`` imports anywhere (module level or inside functions), except under
    ``if TYPE_CHECKING:`` (annotations only, never executed) unless ``type_only``."""
    found = set()
    tree = ast.parse(path.read_text())
    typing_only = set() if type_only else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
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


#: transfer/'s layers, top first: a module may import its own layer's modules and lower layers'
#: only.  index/ (records at rest, hardware description included: a target is part of every
#: record's key) is below all of them, and never imports transfer/ (the test below).
TRANSFER_LAYERS = ("cli", "tuners", "apps", "migration", "integrations", "search", "measure", "interop", "kernels", "space")


def _format_modules(mods: dict[str, Path]) -> set[str]:
    """The outside tuners' file formats: each module of ``tuners`` the importer registry names
    (``FORMATS``), and the modules of ``tuners`` those import.  They are importer code and rank
    with ``interop``, so a lower layer may use them (the replay backend reads Kernel Tuner cache
    files) and they may import nothing above ``interop``; the rest of a tuner's folder (its
    strategy, database, decorator) ranks as ``tuners``."""
    from tunedb.transfer.interop.registry import FORMATS

    todo = [f.module for f in FORMATS.values() if f.module.startswith("tunedb.transfer.tuners.")]
    found: set[str] = set()
    while todo:
        m = todo.pop()
        if m in found or m not in mods:
            continue
        found.add(m)
        todo += [i for i in _imports(mods[m], mods, type_only=True) if i.startswith("tunedb.transfer.tuners.")]
    return found


def _layer(module: str, formats: set[str] = frozenset()) -> int | None:
    parts = module.split(".")
    if parts[:2] == ["tunedb", "index"]:
        return len(TRANSFER_LAYERS)
    if module in formats:
        return TRANSFER_LAYERS.index("interop")
    if parts[:2] == ["tunedb", "transfer"] and len(parts) > 2 and parts[2] in TRANSFER_LAYERS:
        return TRANSFER_LAYERS.index(parts[2])
    return None


def test_transfer_layers_keep_their_order():
    """cli -> tuners -> apps -> migration -> integrations -> search -> measure -> interop ->
    kernels -> space, then index: no import runs upwards, type-only imports included.  A tuner's
    format modules rank with interop (:func:`_format_modules`)."""
    mods = _modules()
    assert {m.split(".")[2] for m in mods if m.startswith("tunedb.transfer.")} == set(TRANSFER_LAYERS)
    formats = _format_modules(mods)
    assert {"tunedb.transfer.tuners.kernel_tuner.cachefile", "tunedb.transfer.tuners.tvm.autotvm_logs",
            "tunedb.transfer.tuners.tvm.metaschedule_logs"} <= formats
    wrong = []
    for m, f in mods.items():
        lm = _layer(m, formats)
        if lm is None:
            continue
        for i in _imports(f, mods, type_only=True):
            li = _layer(i, formats)
            if li is not None and li < lm:
                wrong.append(f"{m} -> {i}")
    assert not wrong, "imports against the layer order: " + "; ".join(sorted(wrong))


def test_index_never_imports_transfer():
    mods = _modules()
    bad = {m: sorted(i for i in _imports(f, mods) if i.startswith("tunedb.transfer"))
           for m, f in mods.items() if m.startswith("tunedb.index")}
    assert not {m: v for m, v in bad.items() if v}


@pytest.mark.parametrize("type_only", [False, True], ids=["runtime", "with-type-only"])
def test_no_import_cycles(type_only):
    """No module cycle, at run time or through ``TYPE_CHECKING`` imports (a cycle of annotations
    is still two modules that cannot be understood apart)."""
    mods = _modules()
    graph = {m: {i for i in _imports(f, mods, type_only=type_only) if i != m and not m.startswith(i + ".")}
             for m, f in mods.items()}
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
    # the Parquet backend's former name keeps working, with a DeprecationWarning naming its successor
    for pkg in (tunedb, tunedb.index):
        with pytest.warns(DeprecationWarning, match="use .*ParquetStore"):
            assert pkg.TuningDB is tunedb.ParquetStore
    assert "TuningDB" not in tunedb.__all__
    with pytest.raises(AttributeError):
        tunedb.no_such_name  # noqa: B018


def test_user_modules_named_index_or_transfer_do_not_shadow_ours(tmp_path):
    (tmp_path / "index.py").write_text("raise SystemExit('the user index.py was imported')\n")
    (tmp_path / "transfer").mkdir()
    (tmp_path / "transfer" / "__init__.py").write_text("raise SystemExit('the user transfer/ was imported')\n")
    code = ("import tunedb; db = tunedb.open('db'); "
            "from tunedb.transfer.search.tuner import Tuner; from tunedb.index.parquet.store import ParquetStore; "
            "print(type(db).__name__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ParquetStore", r.stderr
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
    assert "tunedb/index/contract/base.py" in names and "tunedb/transfer/cli/main.py" in names
    assert not any(n.startswith(("tunedb/tests/", "tunedb/benchmarks/", "tunedb/notebooks/")) for n in names)
    # every module of the checkout is in the wheel (a new subpackage must be listed in pyproject.toml)
    missing = sorted(str(f.relative_to(ROOT)) for f in _modules().values()
                     if "tunedb/" + f.relative_to(ROOT).as_posix() not in names)
    assert not missing, f"modules missing from the wheel: {missing}"


def test_the_checkout_root_holds_no_module_that_shadows_another_package():
    """The root is the package ``tunedb``; a Python started there has it on ``sys.path``, so a root
    ``kernel_tuner.py`` would be ``import kernel_tuner``.  ``tunedb.kernel_tuner`` is an alias
    module registered by ``tunedb/__init__`` (no import hook): its names are those of
    ``tunedb.transfer.tuners.kernel_tuner``, and Kernel Tuner stays Kernel Tuner."""
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["__init__.py", "__main__.py"]
    code = ("import sys, json, tunedb; finders = [type(f).__module__ for f in sys.meta_path]; "
            "import tunedb.kernel_tuner as k; loaded = 'tunedb.transfer.tuners.kernel_tuner.strategy' in sys.modules; "
            "import kernel_tuner; from tunedb.kernel_tuner import WarmStart; "
            "import tunedb.transfer.tuners.kernel_tuner.strategy as s; "
            "print(json.dumps([hasattr(kernel_tuner, 'tune_kernel'), k is tunedb.kernel_tuner, WarmStart is s.WarmStart, "
            "k.Recorder is s.Recorder, loaded, 'tunedb' in finders, k.__name__]))")
    for cwd in (ROOT, ROOT.parent):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, check=True)
        assert json.loads(out.stdout) == [True, True, True, True, False, False, "tunedb.kernel_tuner"]


def test_no_private_names_imported_across_modules():
    """``from tunedb.x import _name`` is a private name of one module used by another: what is
    shared is public where it belongs."""
    mods = _modules()
    bad = []
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in mods and node.module != m:
                bad += [f"{m} <- {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, "private names imported across modules: " + "; ".join(sorted(bad))
