"""Every ```python block of README.md, CONTRIBUTING.md and docs/*.md runs verbatim.

Each block runs alone in a fresh interpreter (``sys.executable``), in an empty temporary directory
with its own ``TUNEDB_CACHE_DIR``, under a timeout: a block must be self-contained (it makes its
own data or reads what the package ships in ``tunedb.datasets``) and must exit 0.  Output samples
and shell sessions are fenced as ``text`` / ``sh`` and are not run.

A block declares what it needs in its leading comment lines, which the user reads too:

* ``# needs: tvm`` (modules, comma-separated; the rest of the line is free text such as the pip
  command): the block is skipped, with the failed import as the reason, only when one of those
  modules cannot be imported;
* ``server: postgresql`` in a leading comment line: the block gets a fresh, empty PostgreSQL
  database (the ``postgres_url`` fixture: a private server, skipped where none can be started)
  through libpq's environment (``PGHOST``, ``PGPORT``, ``PGUSER``, ``PGPASSWORD``,
  ``PGDATABASE``), so ``tunedb.open("postgresql://")`` opens it;
* ``slow`` in a leading comment line: the block runs for more than about 20 s (``-m "not slow"``
  leaves it out).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
OPEN = re.compile(r"^```\s*python\s*$")
NEEDS = re.compile(r"\bneeds:\s*([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)")
SLOW = re.compile(r"\bslow\b")
SERVER = re.compile(r"\bserver:\s*postgresql\b")
LIBPQ_ENV = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD", "dbname": "PGDATABASE"}
TIMEOUT_S = 240
SLOW_TIMEOUT_S = 900


def python_blocks() -> list[tuple[str, str]]:
    """(``file:line`` of the opening fence, the block's source) for every ```python block."""
    out = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            if OPEN.match(lines[i]):
                j = i + 1
                while j < len(lines) and not lines[j].startswith("```"):
                    j += 1
                if j == len(lines):
                    raise AssertionError(f"{path.relative_to(ROOT)}:{i + 1}: a ```python block is never closed")
                out.append((f"{path.relative_to(ROOT)}:{i + 1}", "\n".join(lines[i + 1:j]) + "\n"))
                i = j
            i += 1
    return out


def header(source: str) -> list[str]:
    """The block's leading comment lines."""
    head = []
    for line in source.splitlines():
        if not line.startswith("#"):
            break
        head.append(line)
    return head


def needs(source: str) -> list[str]:
    return [m.strip() for line in header(source) for found in NEEDS.findall(line) for m in found.split(",")]


def is_slow(source: str) -> bool:
    return any(SLOW.search(line) for line in header(source))


def needs_postgres(source: str) -> bool:
    return any(SERVER.search(line) for line in header(source))


def libpq_env(url: str) -> dict[str, str]:
    """libpq's environment variables naming the database of ``url``."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(url)
    return {var: str(info[key]) for key, var in LIBPQ_ENV.items() if info.get(key) not in (None, "")}


def test_every_python_block_defines_the_names_it_uses(tmp_path):
    """Pyflakes' checks (ruff ``F``: undefined names, unused imports, ...) on every block, also
    those skipped here for a missing extra."""
    why = import_error("ruff")
    if why:
        pytest.skip(f"ruff is not installed (pip install -e '.[test]'): {why}")
    names = {}
    for i, (where, src) in enumerate(BLOCKS):
        (tmp_path / f"block_{i}.py").write_text(src, encoding="utf-8")
        names[f"block_{i}.py"] = where
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--select", "F", "--output-format",
                           "concise", "."], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    def doc_line(m: re.Match) -> str:  # block_3.py:4 -> README.md:<the line in the document>
        file, fence = names[m.group(1)].rsplit(":", 1)
        return f"{file}:{int(fence) + int(m.group(2))}"

    found = re.sub(r"(block_\d+\.py):(\d+)", doc_line, proc.stdout)
    if proc.returncode != 0:
        pytest.fail(found + proc.stderr, pytrace=False)


@functools.cache
def import_error(module: str) -> str:
    """Why ``import module`` fails in a fresh interpreter ("" when it works)."""
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        return ""
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {proc.returncode}"


BLOCKS = python_blocks()
PARAMS = [pytest.param(src, id=where, marks=[pytest.mark.slow] if is_slow(src) else [])
          for where, src in BLOCKS]


def test_the_docs_have_python_blocks_and_each_has_its_own_place():
    where = [w for w, _ in BLOCKS]
    assert len(where) == len(set(where))
    assert any(w.startswith("README.md:") for w in where) and any(w.startswith("docs/") for w in where)
    for w, src in BLOCKS:
        assert src.strip(), f"{w}: an empty python block"
    for path in DOCS:  # Python under another fence name would escape this test: it is fenced ```python
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not re.match(r"^```\s*(py|python3|pycon|ipython|py3)\s*$", line), f"{path.name}:{n}: {line}"


def test_the_block_parser_reads_needs_and_slow():
    src = "# needs: tvm, kernel_tuner (pip install 'tunedb[tvm]'); slow: a minute\nimport tvm\n# needs: x\n"
    assert needs(src) == ["tvm", "kernel_tuner"] and is_slow(src) and not needs_postgres(src)
    assert needs("import tunedb\n# needs: tvm\n") == [] and not is_slow("x = 1  # slow\n")
    assert needs_postgres("# needs: psycopg; server: postgresql\n") and needs("# needs: psycopg; server: x\n") == ["psycopg"]
    assert import_error("json") == "" and "No module named" in import_error("tunedb_no_such_extra")


@pytest.mark.parametrize("source", PARAMS)
def test_python_block_runs(source, tmp_path, request):
    where = request.node.callspec.id
    for module in needs(source):
        why = import_error(module)
        if why:
            reason = f"{where} needs {module}: {why}"
            print(reason)
            pytest.skip(reason)
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "block.py"
    script.write_text(source, encoding="utf-8")
    env = {**os.environ, "TUNEDB_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)  # only what a user has: the installed package
    if needs_postgres(source):
        for var in LIBPQ_ENV.values():
            env.pop(var, None)
        env.update(libpq_env(request.getfixturevalue("postgres_url")))
    timeout = SLOW_TIMEOUT_S if is_slow(source) else TIMEOUT_S
    try:
        proc = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{where} ran past {timeout} s\n--- stdout\n{e.stdout}\n--- stderr\n{e.stderr}")
    if proc.returncode != 0:
        pytest.fail(f"{where} exited {proc.returncode}\n--- block\n{source}--- stdout\n{proc.stdout[-4000:]}\n"
                    f"--- stderr\n{proc.stderr[-6000:]}", pytrace=False)
