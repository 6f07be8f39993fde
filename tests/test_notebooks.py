"""The notebooks in notebooks/ execute from top to bottom (nbclient, this environment's python3 kernel),
each within 180 s, and are stored with their outputs stripped."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TIMEOUT_S = 180


def test_all_notebooks_are_present():
    assert [p.stem for p in NOTEBOOKS] == ["01_quickstart", "02_warm_start_cpu", "03_replay_gpus", "04_tvm_logs"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_stripped(path: Path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "a notebook without code"
    for c in code:
        assert c.outputs == [] and c.execution_count is None, f"{path.name}: outputs are not stripped"
    text = "\n".join(c.source for c in code)
    assert "../shared" not in text and "shared/data" not in text, "notebooks read datasets/ only"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path: Path, tmp_path: Path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:  # the kernel must be this environment's python, so it imports the tunedb under test
        spec = KernelSpecManager().get_kernel_spec("python3")
        same_env = Path(spec.argv[0]).resolve() == Path(sys.executable).resolve() or spec.argv[0] in (
            "python", "python3", "{sys.executable}")
    except NoSuchKernel:
        same_env = False
    if not same_env:  # install a kernelspec pointing at this interpreter into a private folder
        from ipykernel.kernelspec import install

        install(user=False, prefix=str(tmp_path / "jupyter"), kernel_name="python3")
        os.environ["JUPYTER_PATH"] = str(tmp_path / "jupyter" / "share" / "jupyter") + os.pathsep + \
            os.environ.get("JUPYTER_PATH", "")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    assert elapsed < TIMEOUT_S, f"{path.name} took {elapsed:.0f} s"
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                      if o.output_type == "stream")
    assert printed.strip(), "the notebook printed nothing"
    assert "nan" not in printed.split(), "a NaN in the printed results"
