"""The notebooks run top to bottom (CPU mode in CI, GPU where there is one), stored without outputs."""

from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_and_is_stripped(path):
    nbformat = pytest.importorskip("nbformat")  # absent on the GPU host
    NotebookClient = pytest.importorskip("nbclient").NotebookClient
    nb = nbformat.read(path, as_version=4)
    assert all(
        not c.get("outputs") and not c.get("execution_count") for c in nb.cells if c.cell_type == "code"
    )
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    printed = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "on 0 worker(s)" not in printed  # blocks are shown where they are, once they are there


@pytest.mark.gpu
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_code_runs_on_the_gpu(path, monkeypatch):
    """The notebook's code cells in order, in one namespace, on the GPU host (which has no jupyter):
    its device="auto" reads pick the GPU there, and its own asserts compare against engine="zarr"."""
    import json

    monkeypatch.chdir(path.parent)
    namespace: dict = {"__name__": "__main__"}
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), f"{path.name} cell", "exec"), namespace)
