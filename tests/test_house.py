"""The house: the two-stage test run, the package list, the architecture tree and the contributor
guide's claims stay true."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, TESTS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PACKAGE_DIRS = ("index", "transfer", "datasets")

TWO_TESTS = '''
import pytest

@pytest.mark.slow
def test_a_slow_one():
    open("slow-ran", "w").close()

def test_a_fast_one():
    assert FAST_PASSES
'''


def _run_stages(tmp_path: Path, *, fast_passes: bool, gate: bool) -> subprocess.CompletedProcess:
    (tmp_path / "test_two.py").write_text(f"FAST_PASSES = {fast_passes}\n" + TWO_TESTS)
    env = {k: v for k, v in os.environ.items() if k != "TUNEDB_FAST_GATE"}
    env["PYTHONPATH"] = str(TESTS)
    if gate:
        env["TUNEDB_FAST_GATE"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "stages", "-v", "-p", "no:cacheprovider",
                           "-o", "markers=slow", "test_two.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_fast_tests_run_before_slow_ones(tmp_path):
    p = _run_stages(tmp_path, fast_passes=True, gate=True)
    assert p.returncode == 0, p.stdout
    order = [m.group(1) for m in re.finditer(r"::(test_\w+) PASSED", p.stdout)]
    assert order == ["test_a_fast_one", "test_a_slow_one"]


def test_the_gate_stops_before_the_slow_stage_when_a_fast_test_failed(tmp_path):
    p = _run_stages(tmp_path, fast_passes=False, gate=True)
    assert p.returncode != 0 and "fast stage failed" in p.stdout
    assert not (tmp_path / "slow-ran").exists()
    p = _run_stages(tmp_path, fast_passes=False, gate=False)  # without the gate: everything runs
    assert p.returncode == 1 and (tmp_path / "slow-ran").exists()


def test_every_subpackage_is_listed_in_pyproject():
    """A subpackage missing from ``[tool.setuptools] packages`` would be missing from the wheel
    (the slow wheel test finds that too; this is the fast check)."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"tunedb"} | {"tunedb." + ".".join(f.parent.relative_to(ROOT).parts)
                          for d in PACKAGE_DIRS for f in (ROOT / d).rglob("__init__.py")}
    assert listed == found, (sorted(found - listed), sorted(listed - found))


def _tree_block() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    m = re.search(r"```\ntunedb/.*?```", text, re.S)
    assert m, "docs/architecture.md has no package tree"
    return m.group(0)


def test_the_architecture_tree_names_every_module():
    tree = _tree_block()
    named = set(re.findall(r"[\w]+\.py", tree)) | {w + ".py" for w in re.findall(r"\b\w+\b", tree)}
    missing = sorted(str(f.relative_to(ROOT)) for d in ("index", "transfer") for f in (ROOT / d).rglob("*.py")
                     if f.name != "__init__.py" and f.name not in named)
    assert not missing, f"modules missing from the tree in docs/architecture.md: {missing}"


def test_the_contributor_guide_is_linked_and_its_commands_exist():
    guide = (ROOT / "CONTRIBUTING.md").read_text()
    assert "CONTRIBUTING.md" in (ROOT / "README.md").read_text()
    assert "docs/contracts.md" in guide and 'pytest -m "not slow"' in guide
    for path in re.findall(r"`((?:index|transfer|tests|benchmarks|docs)/[\w/.]+\.(?:py|md))`", guide):
        assert (ROOT / path).exists(), f"CONTRIBUTING.md names {path}, which does not exist"


#: index/'s layers, top first.  A module may import its own subpackage and any subpackage of a
#: lower layer; subpackages of one layer are side by side and never import each other (the
#: backends; views and the contract suite; retrieval and the contract).
INDEX_LAYERS = (
    ("opener",),                                    # opening a store by location
    ("views", "testing"),                           # stores composed of stores; the contract suite
    ("memory", "parquet", "postgres", "snapshot"),  # the backends
    ("retrieval", "contract"),                      # nearest entries, predictions | RecordStore
    ("hardware",),                                  # device catalog, targets
    ("model",),                                     # the record model, the one cost estimator
    ("support",),                                   # file, cache, lazy-import and redaction helpers
)


def _index_part(module: str) -> str | None:
    """The subpackage (or top-level module) of ``tunedb.index`` that ``module`` belongs to."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["tunedb", "index"] and len(parts) > 2 else None


def _index_imports(path: Path) -> set[str]:
    """``tunedb.index`` modules ``path`` names: imports anywhere (in functions and ``TYPE_CHECKING``
    blocks too) and strings that are a module's dotted name (the tables of lazily loaded names)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                re.fullmatch(r"tunedb\.index(\.\w+)+", node.value):
            found.add(node.value)
    return {m for m in found if _index_part(m) is not None}


def test_index_layers_keep_their_order():
    """opener -> views, testing -> backends -> retrieval | contract -> hardware -> model -> support:
    no import runs upwards or sideways (type-only and lazy ones included), and every part of
    index/ has its layer."""
    rank = {name: n for n, names in enumerate(INDEX_LAYERS) for name in names}
    files = [f for f in (ROOT / "index").rglob("*.py") if f != ROOT / "index" / "__init__.py"]
    parts = {f.relative_to(ROOT / "index").parts[0].removesuffix(".py") for f in files}
    assert parts == set(rank), (sorted(parts - set(rank)), sorted(set(rank) - parts))
    wrong = []
    for f in files:
        own = f.relative_to(ROOT / "index").parts[0].removesuffix(".py")
        for m in _index_imports(f):
            other = _index_part(m)
            if other != own and other in rank and rank[other] <= rank[own]:
                wrong.append(f"{f.relative_to(ROOT)} -> {m}")
    assert not wrong, "imports against index/'s layer order: " + "; ".join(sorted(wrong))
