"""Structure metrics of a tunedb source tree: what a new engineer meets, measured the same way on
any git revision.

What is measured (static analysis with ``ast``; nothing is imported or run):

* wrong-way imports: ``tunedb`` imports (type-only ones included) from a module of one layer of
  ``transfer/`` into a higher layer, with the layer order top first
  ``cli, apps, migration, integrations, search, measure, interop, kernels, space`` and ``index/``
  below all of them (the order ``tests/test_package.py`` asserts); a module of ``index/``
  importing ``transfer/`` counts too;
* import cycles: elementary module cycles found by a depth-first walk, at run time and with
  ``TYPE_CHECKING`` imports included;
* private names imported across modules: ``from tunedb.x import _name``;
* the longest functions and classes (lines from ``def``/``class`` to the end of the body);
* README.md's lines, and how many test files sit flat in ``tests/``;
* index/ layer violations: imports against index/'s layer order (``tests/test_house.py``), top
  first ``opener``; ``views`` | ``testing``; the backends ``memory`` | ``parquet`` | ``postgres``
  | ``snapshot``; ``retrieval`` | ``contract`` (base, checks, runs_codec, tables, retention,
  answers/lookups, decisions); ``hardware``; ``model`` (record, batch, keys, schema, version,
  estimate); ``support`` (fsutil, cachedir, lazy, redact) -- an import upwards, or sideways into
  another group (``|``) of its layer, counts (a flat module of an older tree counts in the layer
  its subpackage holds now); and modules of ``transfer/`` that import a backend's internals
  (``tunedb.index.parquet.*``, ``postgres.*``, ``snapshot.*``) instead of the store contract;
* look-alike module stems: groups of modules whose file stems are equal, or equal once a plural
  ``s`` or an ``ing`` is dropped (``journal``/``journaling``, ``report``/``reports``); not
  counted: ``base`` (an interface module), a command module of ``cli/commands/`` (the command line
  of what it names) and the same stem in sibling packages (``index/parquet/store.py`` and
  ``index/postgres/store.py``: one module per backend);
* places that assemble a tuning run: modules that construct a ``Tuner``;
* duplicated lines: lines of the package inside a run of 6 or more consecutive (stripped,
  non-blank, non-comment) lines that occurs more than once.

    .venv/bin/python benchmarks/house_metrics.py                      # the working tree
    .venv/bin/python benchmarks/house_metrics.py --rev bench-baseline --json
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("index", "transfer", "datasets")
LAYERS = ("cli", "apps", "migration", "integrations", "search", "measure", "interop", "kernels", "space")
INDEX_LAYERS = (  # top first: (layer, its groups: index/ subpackages or modules, old flat names included)
    ("opener", (("opener", "stores"),)),
    ("views", (("views", "layered", "trust"), ("testing",))),
    ("backends", (("memory",), ("parquet",), ("postgres",), ("snapshot",))),
    ("retrieval | contract", (("retrieval",), ("contract", "base", "checks", "runs_codec", "lookups", "tables",
                                               "retention", "decisions"))),
    ("hardware", (("hardware",),)),
    ("model", (("model", "record", "batch", "keys", "schema", "version", "estimate"),)),
    ("support", (("support", "redact", "cachedir", "fsutil", "lazy"),)),
)
BACKEND_PACKAGES = ("tunedb.index.parquet.", "tunedb.index.postgres.", "tunedb.index.snapshot.")
DUP_WINDOW = 6


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package rooted at ``root``."""
    out = {"tunedb": root / "__init__.py"}
    for d in PACKAGE_DIRS:
        for f in sorted((root / d).rglob("*.py")):
            parts = ["tunedb", *f.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def imports(tree: ast.AST, mods: dict[str, Path], *, type_only: bool) -> list[tuple[str, str]]:
    """(module imported, name) pairs of ``tunedb`` imports in ``tree``; ``TYPE_CHECKING`` blocks
    only when ``type_only``."""
    skip = set() if type_only else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body for n in ast.walk(stmt)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in mods:
                    out.append((sub, ""))
                elif node.module in mods:
                    out.append((node.module, a.name))
        elif isinstance(node, ast.Import):
            out.extend((a.name, "") for a in node.names if a.name in mods)
    return out


def layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] == ["tunedb", "index"]:
        return len(LAYERS)
    if parts[:2] == ["tunedb", "transfer"] and len(parts) > 2:
        name = parts[2]
        if name in LAYERS:
            return LAYERS.index(name)
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                found.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    sys.setrecursionlimit(10000)
    for m in sorted(graph):
        if m not in state:
            visit(m)
    return found


def measure(root: Path) -> dict:
    """Every metric of the tree at ``root`` (a checkout: the package is its root)."""
    mods = modules(root)
    trees = {m: ast.parse(f.read_text()) for m, f in mods.items()}
    wrong, private = [], []
    graphs: dict[bool, dict[str, set[str]]] = {False: {}, True: {}}
    for type_only in (False, True):
        for m, tree in trees.items():
            deps = {i for i, _ in imports(tree, mods, type_only=type_only)}
            deps = {i for i in deps if i != m and not m.startswith(i + ".")}
            if m in ("tunedb", "tunedb.index"):  # a package's __init__ re-exports its own submodules
                deps = {i for i in deps if not i.startswith(m + ".")}
            graphs[type_only][m] = deps
    for m, tree in trees.items():
        lm = layer(m)
        for i, name in imports(tree, mods, type_only=True):
            li = layer(i)
            if m.startswith("tunedb.index") and i.startswith("tunedb.transfer"):
                wrong.append(f"{m} -> {i}")
            elif lm is not None and li is not None and li < lm:
                wrong.append(f"{m} -> {i}")
            if name.startswith("_") and not name.startswith("__") and i != m:
                private.append(f"{m} <- {i}.{name}")
    index_wrong, backend_reach, run_builders = [], [], []
    for m, tree in trees.items():
        lm = index_layer(m)
        for i, _ in imports(tree, mods, type_only=True):
            li = index_layer(i)
            if lm is not None and li is not None and (li[0] < lm[0] or (li[0] == lm[0] and li[1] != lm[1])):
                index_wrong.append(f"{m} -> {i}")  # upwards, or sideways into another group of its layer
            if m.startswith("tunedb.transfer.") and i.startswith(BACKEND_PACKAGES):
                backend_reach.append(f"{m} -> {i}")
        if any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "Tuner"
               for n in ast.walk(tree)):
            run_builders.append(m)
    spans = []
    for m, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                spans.append({"kind": kind, "name": f"{m}.{node.name}",
                              "lines": node.end_lineno - node.lineno + 1})
    spans.sort(key=lambda s: -s["lines"])
    readme = root / "README.md"
    tests = root / "tests"
    return {
        "wrong_way_imports": sorted(set(wrong)),
        "cycles_runtime": [" -> ".join(c) for c in cycles(graphs[False])],
        "cycles_with_type_only": [" -> ".join(c) for c in cycles(graphs[True])],
        "private_names_across_modules": sorted(set(private)),
        "longest_functions": [s for s in spans if s["kind"] == "function"][:5],
        "longest_classes": [s for s in spans if s["kind"] == "class"][:5],
        "readme_lines": len(readme.read_text().splitlines()) if readme.exists() else 0,
        "flat_test_files": len(list(tests.glob("test_*.py"))) if tests.exists() else 0,
        "modules": len(mods),
        "index_layer_violations": sorted(set(index_wrong)),
        "transfer_reaching_into_backends": sorted(set(backend_reach)),
        "look_alike_stems": look_alike_stems(mods),
        "modules_assembling_a_run": sorted(run_builders),
        "duplicated_lines": duplicated_lines(sorted(mods.values())),
    }


def index_layer(module: str) -> tuple[int, int] | None:
    """(position of an ``index/`` module's layer in :data:`INDEX_LAYERS`, 0 = top; its group in
    that layer), or None."""
    parts = module.split(".")
    if parts[:2] != ["tunedb", "index"] or len(parts) < 3:
        return None
    for n, (_, groups) in enumerate(INDEX_LAYERS):
        for g, names in enumerate(groups):
            if parts[2] in names:
                return n, g
    return None


def look_alike_stems(mods: dict[str, Path]) -> list[list[str]]:
    """Groups of module paths whose stems look alike (see the module docstring)."""
    groups: dict[str, list[str]] = {}
    for m, f in mods.items():
        stem = f.stem
        if stem in ("__init__", "__main__", "base") or m.startswith("tunedb.transfer.cli.commands."):
            continue
        norm = stem[:-3] if stem.endswith("ing") and len(stem) > 6 else stem
        norm = norm[:-1] if norm.endswith("s") and len(norm) > 4 else norm
        groups.setdefault(norm, []).append(m)
    out = []
    for g in groups.values():
        # sibling packages' modules of one stem (one per backend) count once
        kinds = {(m.rsplit(".", 2)[0], m.rsplit(".", 1)[1]) if m.count(".") >= 3 else (m, "") for m in g}
        if len(kinds) > 1:
            out.append(sorted(g))
    return sorted(out)


def duplicated_lines(files: list[Path], window: int = DUP_WINDOW) -> int:
    """Lines inside a run of ``window`` consecutive normalised lines seen more than once."""
    seqs = []
    for f in files:
        lines = [ln.strip() for ln in f.read_text().splitlines()]
        seqs.append([ln for ln in lines if ln and not ln.startswith("#")])
    seen: dict[int, int] = {}
    for lines in seqs:
        for i in range(len(lines) - window + 1):
            h = hash(tuple(lines[i:i + window]))
            seen[h] = seen.get(h, 0) + 1
    dup = 0
    for lines in seqs:
        marked = [False] * len(lines)
        for i in range(len(lines) - window + 1):
            if seen[hash(tuple(lines[i:i + window]))] > 1:
                marked[i:i + window] = [True] * window
        dup += sum(marked)
    return dup


def tree_at(rev: str, dest: Path) -> Path:
    """Extract the tree of git revision ``rev`` into ``dest``."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", help="a git revision (default: the working tree)")
    ap.add_argument("--json", action="store_true", help="print the metrics as JSON")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = tree_at(args.rev, Path(tmp)) if args.rev else ROOT
        out = {"rev": args.rev or "working tree", **measure(root)}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{out['rev']}: {len(out['wrong_way_imports'])} wrong-way imports, "
          f"{len(out['cycles_runtime'])} cycles at run time, {len(out['cycles_with_type_only'])} with type-only imports, "
          f"{len(out['private_names_across_modules'])} private names imported across modules, "
          f"README {out['readme_lines']} lines, {out['flat_test_files']} flat test files")
    print(f"index/ layer violations {len(out['index_layer_violations'])}, transfer/ modules reaching into a "
          f"backend {len(out['transfer_reaching_into_backends'])}, look-alike stem groups {len(out['look_alike_stems'])}, "
          f"modules assembling a run {len(out['modules_assembling_a_run'])}, duplicated lines {out['duplicated_lines']}")
    for key in ("longest_functions", "longest_classes"):
        print(key.replace("_", " ") + ": " + ", ".join(f"{s['name']} ({s['lines']})" for s in out[key]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
