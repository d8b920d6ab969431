"""The documentation site builds with warnings as errors, and documents every configuration key."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zarr_dask_gpu.config import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]


def test_every_configuration_key_is_documented_with_its_default():
    text = (ROOT / "docs" / "configuration.md").read_text()
    for key, value in DEFAULTS.items():  # each key's row shows its default as the code has it
        assert f"| `{key}` | `{repr(value).replace(chr(39), chr(34))}` |" in text, key


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


def test_environment_variables_override_the_defaults():
    code = "from zarr_dask_gpu import config; print(config.get('block-size'), config.get('io-retries'))"
    env = {**os.environ, "DASK_ZARR_DASK_GPU__BLOCK_SIZE": "64MiB", "DASK_ZARR_DASK_GPU__IO_RETRIES": "7"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["64MiB", "7"]


def test_a_mode_setting_outside_its_choices_raises_naming_it():
    import dask

    from zarr_dask_gpu import config

    with (
        dask.config.set({"zarr_dask_gpu.staging": "hots"}),
        pytest.raises(
            ValueError, match=r"zarr_dask_gpu.staging is 'hots'; it must be one of 'device', 'host'"
        ),
    ):
        config.choice("staging")
    assert config.choice("staging") == "device"


def test_import_sets_cuda_hardware_queues_unless_set():
    code = "import os, zarr_dask_gpu; print(os.environ['CUDA_DEVICE_MAX_CONNECTIONS'])"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    run = lambda env: subprocess.run(  # noqa: E731
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert run(env) == "32"
    assert run({**env, "CUDA_DEVICE_MAX_CONNECTIONS": "8"}) == "8"
