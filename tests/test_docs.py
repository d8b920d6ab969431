"""The documentation site builds with warnings as errors, and documents every configuration key."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zarr_dask_gpu.config import DEFAULTS

ROOT = Path(__file__).resolve().parents[1]


def test_every_configuration_key_is_documented():
    text = (ROOT / "docs" / "configuration.md").read_text()
    for key, value in DEFAULTS.items():
        assert f"| `{key}` |" in text, key
        assert repr(value).replace("'", '"') in text or str(value) in text, key


def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or "mkdocs"
    result = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "site" / "api" / "index.html").exists()
    assert (tmp_path / "site" / "notebooks" / "quickstart" / "index.html").exists()
