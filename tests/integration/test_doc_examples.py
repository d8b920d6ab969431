"""Every Python example in README.md and docs/ runs as written: a page's blocks in order, as one
script, in a folder holding the stores the docs name (tests/doc_stores.py), on this machine (CPU mode
without a GPU). A block preceded by ``<!-- not run: why -->`` needs what a test machine lacks (a
cloud bucket, several GPUs under torchrun): it is compiled only. A page whose examples import an
optional package this machine lacks (torch) is skipped, naming it."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- not run: (?P<why>[^>]*) -->\s*\n)?```python\n(?P<code>.*?)```", re.S)


def _blocks(page: Path) -> list[tuple[str, str | None]]:
    return [(m["code"], m["why"]) for m in BLOCK.finditer(page.read_text())]


RUN = [p for p in PAGES if any(why is None for _, why in _blocks(p))]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("doc-stores")
    subprocess.run([sys.executable, "-m", "tests.doc_stores", str(root)], cwd=ROOT, check=True)
    return root


def test_every_example_compiles():
    for page in PAGES:
        for code, _ in _blocks(page):
            compile(code, str(page), "exec")
    assert len(RUN) >= 8


@pytest.mark.parametrize("page", RUN, ids=lambda p: p.name)
def test_the_examples_of_a_page_run_as_written(page, stores, tmp_path):
    for store in stores.iterdir():  # read where the page says; what it writes stays in tmp_path
        (tmp_path / store.name).symlink_to(store)
    script = tmp_path / "example.py"
    script.write_text("\n".join(code for code, why in _blocks(page) if why is None))
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", run.stderr)
    if missing and not missing[1].startswith("zarr_dask_gpu"):
        pytest.skip(f"{page.name}'s examples need {missing[1]}")
    assert run.returncode == 0, run.stderr[-4000:]
