"""The notebooks run top to bottom (CPU mode in CI, GPU where there is one), stored without outputs."""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")  # absent on the GPU host
NotebookClient = pytest.importorskip("nbclient").NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_and_is_stripped(path):
    nb = nbformat.read(path, as_version=4)
    assert all(
        not c.get("outputs") and not c.get("execution_count") for c in nb.cells if c.cell_type == "code"
    )
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
